//! Code map file parsing never panics on hostile files, walks them as the daemon does, and what
//! it decodes survives a round trip through the writer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::codemap_file::{encode_event, next_event, parse_header};
use vmscope_proto::v1::CodeMapEvent;

fuzz_target!(|data: &[u8]| {
    // Records are read after the header when there is one, and from the start otherwise, so
    // that the fuzzer need not find the 16 header bytes before it reaches the records.
    let mut pos = match parse_header(data) {
        Ok(Some(len)) => len,
        _ => 0,
    };
    while let Ok(Some((event, used))) = next_event::<CodeMapEvent>(&data[pos..]) {
        assert!(used > 0 && used <= data.len() - pos);
        // The same record cut short is incomplete, not an error: the daemon waits for it.
        assert!(matches!(
            next_event::<CodeMapEvent>(&data[pos..pos + used - 1]),
            Ok(None)
        ));
        let record = encode_event(&event);
        let (again, len) = next_event::<CodeMapEvent>(&record)
            .expect("a re-encoded event decodes")
            .expect("a re-encoded event is complete");
        assert_eq!(len, record.len());
        assert_eq!(again, event);
        pos += used;
    }
});
