//! HotSpot performance data parsing never panics, and what it finds lies inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::hsperfdata::{Value, parse_hsperfdata};

fuzz_target!(|data: &[u8]| {
    if let Ok(parsed) = parse_hsperfdata(data) {
        assert!(parsed.entries.len() <= data.len() / 20);
        for entry in &parsed.entries {
            // Invalid UTF-8 is replaced, 1 byte by 3 at most.
            assert!(entry.name.len() <= 3 * data.len());
            if let Value::String(s) = &entry.value {
                assert!(s.len() <= 3 * data.len());
            }
        }
    }
});
