//! Perf map parsing never panics, consumes what it should, and reading the input in two parts
//! (as the daemon reads a growing file) gives what reading it whole gives.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::perf_map::{PerfMapChunk, PerfMapReader, parse_perf_map};

fn check(chunk: &PerfMapChunk, bytes: &[u8]) {
    assert!(chunk.consumed <= bytes.len());
    for entry in &chunk.entries {
        assert!(entry.size > 0);
        assert!(entry.start.checked_add(entry.size).is_some());
        assert!(!entry.name.is_empty());
        assert!(entry.contains(entry.start) && !entry.contains(entry.end()));
    }
    let lines = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert!(chunk.entries.len() + chunk.bad_lines <= lines);
    assert_eq!(chunk.bad_lines == 0, chunk.first_error.is_none());
}

fuzz_target!(|data: &[u8]| {
    let whole = parse_perf_map(data, true);
    assert_eq!(whole.consumed, data.len());
    check(&whole, data);

    // The first byte chooses where the file is cut.
    let cut = data
        .first()
        .map_or(0, |&b| usize::from(b) * data.len() / 256);
    let mut reader = PerfMapReader::new();
    let first = reader.parse(&data[..cut], false);
    check(&first, &data[..cut]);
    // Only a final line without its newline is left.
    assert!(!data[first.consumed..cut].contains(&b'\n'));
    let rest = &data[first.consumed..];
    let second = reader.parse(rest, true);
    assert_eq!(second.consumed, rest.len());
    let mut entries = first.entries;
    entries.extend(second.entries);
    assert_eq!(entries, whole.entries);
    assert_eq!(first.bad_lines + second.bad_lines, whole.bad_lines);
});
