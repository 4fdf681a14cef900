//! DWARF line tables never panic on hostile files: whatever parses answers every lookup with
//! frames or an error, within the byte budget the daemon gives it.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use vmscope_parse::dwarf::SourceLines;

fuzz_target!(|data: &[u8]| {
    // The sections are read from the same bytes, a page at a time.
    let Ok(mut lines) = SourceLines::parse(data, Arc::new(data.to_vec()), 1 << 20, None) else {
        return;
    };
    assert!(lines.owned_bytes() <= 1 << 20);
    // Addresses from the file itself, so that the fuzzer reaches real units and ranges.
    for chunk in data.chunks_exact(8).take(64) {
        let svma = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let _ = lines.lookup(svma);
    }
});
