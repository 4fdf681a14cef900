//! The code map file format of `codemap.proto`: a 16-byte header (`VMSCOPE-CODEMAP` and the
//! version byte 1), then records, each a `CodeMapEvent` prefixed by its length as a protobuf
//! varint. The writer is the daemon's own (`vmscope_parse::codemap_file`); [`decode`] reads a
//! whole file back with its incremental parser, for tests and the code log.

use vmscope_parse::codemap_file::{next_event, parse_header};
use vmscope_proto::v1::CodeMapEvent;

pub use vmscope_parse::codemap_file::{CodeMapFileError, encode_event, header};

/// The events of a code map file, and the length of what follows the last whole record (a
/// record cut short by a writer mid-write, or a header not complete yet; 0 for a file that
/// ends cleanly).
pub fn decode(bytes: &[u8]) -> Result<(Vec<CodeMapEvent>, usize), CodeMapFileError> {
    let Some(mut at) = parse_header(bytes)? else {
        return Ok((Vec::new(), bytes.len()));
    };
    let mut events = Vec::new();
    while let Some((event, used)) = next_event(&bytes[at..])? {
        events.push(event);
        at += used;
    }
    Ok((events, bytes.len() - at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscope_proto::v1::code_map_event::Event;
    use vmscope_proto::v1::{CodeFree, Hello};

    #[test]
    fn round_trip_and_torn_tail() {
        let hello = CodeMapEvent {
            timestamp_ns: 5,
            event: Some(Event::Hello(Hello {
                pid: 42,
                vm: "jitvm 0.1".into(),
            })),
        };
        let free = CodeMapEvent {
            timestamp_ns: 6,
            event: Some(Event::Free(CodeFree { start: 0x1000 })),
        };
        let mut file = header().to_vec();
        assert_eq!(&file[..15], b"VMSCOPE-CODEMAP");
        assert_eq!(file[15], 1);
        file.extend(encode_event(&hello));
        file.extend(encode_event(&free));
        assert_eq!(decode(&file), Ok((vec![hello.clone(), free.clone()], 0)));
        file.truncate(file.len() - 1);
        assert_eq!(
            decode(&file),
            Ok((vec![hello], encode_event(&free).len() - 1))
        );
        assert!(decode(b"VMSCOPE-CODEMAX\x01").is_err());
        assert_eq!(decode(b"VMSCOPE"), Ok((vec![], 7)));
    }
}
