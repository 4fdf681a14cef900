//! /proc/PID/maps parsing never panics, and what it accepts is consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::maps::parse_maps;

fuzz_target!(|data: &[u8]| {
    let parsed = parse_maps(data);
    for entry in &parsed.entries {
        assert!(entry.start < entry.end);
        assert!(entry.contains(entry.start));
        assert!(!entry.contains(entry.end));
    }
    let lines = data.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count();
    assert!(parsed.entries.len() + parsed.bad_lines <= lines);
});
