//! Parser (and writer) of vmscope's code map files, `vmscope-PID.codemap`.
//!
//! A VM that does not want to stream its code map to the daemon (`CodeMap.Publish`) can append
//! the same events to a file instead, and keep the file mapped executable so that the daemon
//! finds it in `/proc/PID/maps` (`proto/vmscope/v1/codemap.proto` has the rules). The file is a
//! 16-byte header, then length-delimited records, each a protobuf varint length followed by
//! that many bytes of one encoded `vmscope.v1.CodeMapEvent` (what protobuf's `writeDelimitedTo`
//! and prost's `encode_length_delimited` write):
//!
//! ```text
//! 56 4d 53 43 4f 50 45 2d 43 4f 44 45 4d 41 50 01   "VMSCOPE-CODEMAP", version 1
//! 0b 08 e8 07 12 06 08 d2 09 12 01 76               11 bytes: CodeMapEvent { timestamp_ns: 1000,
//!                                                       hello: { pid: 1234, vm: "v" } }
//! ...
//! ```
//!
//! The file grows while the VM runs, so parsing is incremental: [`parse_header`] and then
//! [`next_event`] over the bytes not consumed yet, each answering `Ok(None)` until the bytes
//! they need are all there. A record that cannot be decoded is an error, after which the caller
//! stops reading the file: without a valid length nothing says where the next record starts.
//! Whether the events follow the rules (Hello first, timestamps in order, addresses known) is
//! the caller's to check, as for a stream; this module only decodes.
//!
//! The records are decoded into the caller's message type (`vmscope_proto::v1::CodeMapEvent`
//! for the daemon), so that this crate of pure parsers does not depend on the API crate; the
//! file's framing (header, lengths, limits) is defined here. Lengths above
//! [`MAX_EVENT_SIZE`] are refused before anything is buffered or decoded, and prost's decoding
//! is bounded by the record's length.

use prost::Message;

/// First 15 bytes of a code map file; a version byte follows.
pub const CODEMAP_FILE_MAGIC: &[u8; 15] = b"VMSCOPE-CODEMAP";

/// Version byte of the code map files this module reads and writes.
pub const CODEMAP_FILE_VERSION: u8 = 1;

/// Length of a code map file's header: magic and version byte.
pub const CODEMAP_FILE_HEADER_LEN: usize = 16;

/// Largest event accepted, in bytes: 16 MiB, far above the pc map of any real method. It bounds
/// what the daemon buffers while it waits for a record to be complete.
pub const MAX_EVENT_SIZE: usize = 16 << 20;

/// Longest protobuf varint: 10 bytes hold 64 bits, 7 at a time.
const MAX_VARINT_LEN: usize = 10;

/// Why a code map file cannot be read on. The file's offset is the caller's to add.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeMapFileError {
    /// The file does not start with `VMSCOPE-CODEMAP`.
    #[error("not a vmscope code map file (it starts with {0:?}, not \"VMSCOPE-CODEMAP\")")]
    BadMagic(String),
    /// A version byte other than [`CODEMAP_FILE_VERSION`].
    #[error("unsupported code map file version {0} (vmscope reads version 1)")]
    UnsupportedVersion(u8),
    /// A record length that is not a varint of at most 10 bytes, or is above 64 bits.
    #[error("record length is not a valid protobuf varint (more than 10 bytes or above 2^64)")]
    BadLength,
    /// A record length above [`MAX_EVENT_SIZE`].
    #[error("record of {0} bytes is larger than the 16 MiB limit")]
    TooLarge(u64),
    /// The record's bytes are not a `CodeMapEvent`.
    #[error("record of {len} bytes is not a CodeMapEvent: {reason}")]
    Decode {
        /// The record's length.
        len: usize,
        /// prost's reason: in the message, so not a `source` (a chain printer would say it
        /// twice).
        reason: prost::DecodeError,
    },
}

/// Checks the header at the start of `bytes`. `Ok(None)`: fewer than 16 bytes yet. With
/// `Some(len)`, the first record starts `len` bytes into the file. A wrong magic is reported as
/// soon as the bytes there differ from it.
pub fn parse_header(bytes: &[u8]) -> Result<Option<usize>, CodeMapFileError> {
    let have = bytes.len().min(CODEMAP_FILE_MAGIC.len());
    let (Some(start), Some(magic)) = (bytes.get(..have), CODEMAP_FILE_MAGIC.get(..have)) else {
        return Ok(None);
    };
    if start != magic {
        return Err(CodeMapFileError::BadMagic(
            String::from_utf8_lossy(start).into_owned(),
        ));
    }
    match bytes.get(CODEMAP_FILE_MAGIC.len()) {
        None => Ok(None),
        Some(&CODEMAP_FILE_VERSION) => Ok(Some(CODEMAP_FILE_HEADER_LEN)),
        Some(&version) => Err(CodeMapFileError::UnsupportedVersion(version)),
    }
}

/// Decodes the record at the start of `bytes`. `Ok(None)`: the record is not complete yet
/// (wait for more data). `Ok(Some((event, consumed)))`: the next record starts `consumed` bytes
/// later (never 0). An error means the file cannot be read further.
pub fn next_event<E: Message + Default>(
    bytes: &[u8],
) -> Result<Option<(E, usize)>, CodeMapFileError> {
    let Some((len, prefix)) = read_varint(bytes)? else {
        return Ok(None);
    };
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= MAX_EVENT_SIZE)
        .ok_or(CodeMapFileError::TooLarge(len))?;
    let end = prefix + len;
    let Some(record) = bytes.get(prefix..end) else {
        return Ok(None);
    };
    let event = E::decode(record).map_err(|reason| CodeMapFileError::Decode { len, reason })?;
    Ok(Some((event, end)))
}

/// The header a writer puts at the start of a code map file.
pub fn header() -> [u8; 16] {
    let mut out = [0; CODEMAP_FILE_HEADER_LEN];
    let (magic, version) = out.split_at_mut(CODEMAP_FILE_MAGIC.len());
    magic.copy_from_slice(CODEMAP_FILE_MAGIC);
    version.fill(CODEMAP_FILE_VERSION);
    out
}

/// One event as a record of a code map file: its length as a varint, then its encoding. For
/// writers (the demo VM, tests); appending whole records with one `write` keeps a reader from
/// ever seeing half of one.
pub fn encode_event(event: &impl Message) -> Vec<u8> {
    event.encode_length_delimited_to_vec()
}

/// Reads a base-128 varint: `Ok(None)` when `bytes` ends inside it, else its value and length.
fn read_varint(bytes: &[u8]) -> Result<Option<(u64, usize)>, CodeMapFileError> {
    let mut value: u64 = 0;
    for (i, &b) in bytes.iter().take(MAX_VARINT_LEN).enumerate() {
        let bits = u64::from(b & 0x7f);
        // The tenth byte holds bit 63 only.
        if i == MAX_VARINT_LEN - 1 && b > 1 {
            return Err(CodeMapFileError::BadLength);
        }
        value |= bits << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Some((value, i + 1)));
        }
    }
    if bytes.len() >= MAX_VARINT_LEN {
        return Err(CodeMapFileError::BadLength);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscope_proto::v1::CodeMapEvent;
    use vmscope_proto::v1::code_map_event::Event;
    use vmscope_proto::v1::{
        CodeEntry, CodeFree, CodeKind, CodeMove, CodeZone, Hello, InlinedFrame, PcMapping, PicCase,
        Sync,
    };

    fn ev(timestamp_ns: u64, event: Event) -> CodeMapEvent {
        CodeMapEvent {
            timestamp_ns,
            event: Some(event),
        }
    }

    /// One event of every kind, as a VM would publish them.
    fn events() -> Vec<CodeMapEvent> {
        let pc = |mcpc, bcpc, inlined: &[(&str, u32)]| PcMapping {
            mcpc,
            bcpc,
            inlined: inlined
                .iter()
                .map(|&(method, bcpc)| InlinedFrame {
                    method: method.to_owned(),
                    bcpc,
                })
                .collect(),
        };
        vec![
            ev(
                1_000,
                Event::Hello(Hello {
                    pid: 1234,
                    vm: "jitvm 0.1".into(),
                }),
            ),
            ev(
                1_001,
                Event::Zone(CodeZone {
                    start: 0x7f00_0000_0000,
                    free_start: 0x7f00_0010_0000,
                    end: 0x7f00_0100_0000,
                }),
            ),
            ev(
                2_000,
                Event::Load(CodeEntry {
                    kind: CodeKind::Method.into(),
                    name: "Integer>>benchFib".into(),
                    start: 0x7f00_0000_1000,
                    size: 0x180,
                    pc_map: vec![
                        pc(0x7f00_0000_1020, 3, &[]),
                        pc(0x7f00_0000_1050, 9, &[("SmallInteger>>+", 2)]),
                        pc(
                            0x7f00_0000_1090,
                            14,
                            &[("Integer>>fib:", 4), ("SmallInteger>>-", 1)],
                        ),
                    ],
                    cases: vec![],
                }),
            ),
            ev(
                2_001,
                Event::Load(CodeEntry {
                    kind: CodeKind::ClosedPic.into(),
                    name: "printOn:".into(),
                    start: 0x7f00_0000_2000,
                    size: 0,
                    pc_map: vec![],
                    cases: vec![
                        PicCase {
                            class_name: "SmallInteger".into(),
                            target: 0x7f00_0000_1000,
                        },
                        PicCase {
                            class_name: "Float \u{1f980}".into(),
                            target: 0x7f00_0000_3000,
                        },
                    ],
                }),
            ),
            ev(
                2_002,
                Event::Load(CodeEntry {
                    kind: CodeKind::OpenPic.into(),
                    name: "value".into(),
                    start: 0x7f00_0000_4000,
                    size: 0x40,
                    ..Default::default()
                }),
            ),
            ev(
                3_000,
                Event::Move(CodeMove {
                    from: 0x7f00_0000_1000,
                    to: 0x7f00_0000_8000,
                }),
            ),
            ev(
                4_000,
                Event::Free(CodeFree {
                    start: 0x7f00_0000_8000,
                }),
            ),
            ev(u64::MAX, Event::Sync(Sync {})),
            // No event at all: decodes (what it means is the caller's to judge).
            CodeMapEvent::default(),
        ]
    }

    fn file() -> Vec<u8> {
        let mut out = header().to_vec();
        for e in events() {
            out.extend(encode_event(&e));
        }
        out
    }

    /// Reads from `pos` as the daemon does: records until `Ok(None)` or an error.
    fn read_from(bytes: &[u8], mut pos: usize) -> (Vec<CodeMapEvent>, usize, Option<String>) {
        let mut out = Vec::new();
        loop {
            match next_event(&bytes[pos..]) {
                Ok(Some((event, used))) => {
                    assert!(used > 0 && used <= bytes.len() - pos);
                    out.push(event);
                    pos += used;
                }
                Ok(None) => return (out, pos, None),
                Err(e) => return (out, pos, Some(e.to_string())),
            }
        }
    }

    #[test]
    fn round_trip_every_kind() {
        let bytes = file();
        assert_eq!(parse_header(&bytes), Ok(Some(16)));
        let (got, consumed, err) = read_from(&bytes, 16);
        assert_eq!(err, None);
        assert_eq!(consumed, bytes.len());
        assert_eq!(got, events());
    }

    #[test]
    fn header_layout() {
        assert_eq!(&header(), b"VMSCOPE-CODEMAP\x01");
        // The sample in the module documentation.
        let hello = ev(
            1_000,
            Event::Hello(Hello {
                pid: 1234,
                vm: "v".into(),
            }),
        );
        assert_eq!(
            encode_event(&hello),
            b"\x0b\x08\xe8\x07\x12\x06\x08\xd2\x09\x12\x01v"
        );
    }

    /// The daemon's use: a file cut anywhere reads up to the last complete record and waits,
    /// and reads the same events once the rest arrives.
    #[test]
    fn truncation_at_every_offset() {
        let bytes = file();
        let want = events();
        for cut in 0..bytes.len() {
            let part = &bytes[..cut];
            match parse_header(part) {
                Ok(None) => {
                    assert!(cut < 16);
                    continue;
                }
                Ok(Some(16)) => {}
                other => panic!("cut at {cut}: {other:?}"),
            }
            let (got, consumed, err) = read_from(part, 16);
            assert_eq!(err, None, "cut at {cut}");
            assert_eq!(got[..], want[..got.len()], "cut at {cut}");
            let (rest, end, err) = read_from(&bytes, consumed);
            assert_eq!((end, err), (bytes.len(), None));
            assert_eq!(rest[..], want[got.len()..], "cut at {cut}");
        }
    }

    #[test]
    fn bad_headers() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"\x7fELF",
                "not a vmscope code map file (it starts with \"\\u{7f}ELF\", not \"VMSCOPE-CODEMAP\")",
            ),
            (
                b"VMSCOPE-X",
                "not a vmscope code map file (it starts with \"VMSCOPE-X\", not \"VMSCOPE-CODEMAP\")",
            ),
            (
                b"VMSCOPE-CODEMAP\x02",
                "unsupported code map file version 2 (vmscope reads version 1)",
            ),
            (
                b"VMSCOPE-CODEMAP\x00rest",
                "unsupported code map file version 0 (vmscope reads version 1)",
            ),
        ];
        for (bytes, msg) in cases {
            let err = parse_header(bytes).unwrap_err();
            assert_eq!(err.to_string(), *msg);
        }
        assert_eq!(parse_header(b""), Ok(None));
        assert_eq!(parse_header(b"VMSCOPE"), Ok(None));
        assert_eq!(parse_header(b"VMSCOPE-CODEMAP"), Ok(None));
    }

    #[test]
    fn bad_records() {
        let cases: &[(&[u8], &str)] = &[
            (
                &[0xff; 10],
                "record length is not a valid protobuf varint (more than 10 bytes or above 2^64)",
            ),
            (
                b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02",
                "record length is not a valid protobuf varint (more than 10 bytes or above 2^64)",
            ),
            (
                b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
                "record of 18446744073709551615 bytes is larger than the 16 MiB limit",
            ),
            (
                b"\x81\x80\x80\x08",
                "record of 16777217 bytes is larger than the 16 MiB limit",
            ),
            // Field 1 with wire type 7, which does not exist.
            (
                b"\x02\x0f\x00",
                "record of 2 bytes is not a CodeMapEvent: failed to decode Protobuf message: \
                 invalid wire type value: 7",
            ),
            // A hello whose length runs past the record.
            (
                b"\x03\x12\x05\x08",
                "record of 3 bytes is not a CodeMapEvent: failed to decode Protobuf message: \
                 CodeMapEvent.event: buffer underflow",
            ),
            // A vm name that is not UTF-8.
            (
                b"\x06\x12\x04\x12\x02\xc3\x28",
                "record of 6 bytes is not a CodeMapEvent: failed to decode Protobuf message: \
                 Hello.vm: CodeMapEvent.event: invalid string value: data is not UTF-8 encoded",
            ),
        ];
        for (bytes, msg) in cases {
            let err = next_event::<CodeMapEvent>(bytes).unwrap_err();
            assert_eq!(err.to_string(), *msg, "{bytes:02x?}");
        }
        // A length of exactly the limit waits for its bytes.
        assert_eq!(next_event::<CodeMapEvent>(b"\x80\x80\x80\x08"), Ok(None));
        // A varint cut short waits too, up to 9 bytes.
        assert_eq!(next_event::<CodeMapEvent>(&[0xff; 9]), Ok(None));
        // A non-minimal varint is still a varint.
        let (event, used) = next_event(b"\x80\x00rest").unwrap().unwrap();
        assert_eq!((event, used), (CodeMapEvent::default(), 2));
    }

    /// Mutated files never panic.
    #[test]
    fn no_panic_on_mutations() {
        crate::mutations::for_each_mutation(&file(), 16, 5000, 4, 0x2545_f491_4f6c_dd1d, |t, _| {
            let _ = read_from(t, 16);
        });
    }
}
