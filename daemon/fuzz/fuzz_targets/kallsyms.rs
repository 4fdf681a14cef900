//! /proc/kallsyms parsing never panics, and lookups return symbols at or below the address.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::kallsyms::parse_kallsyms;

fuzz_target!(|data: &[u8]| {
    let symbols = parse_kallsyms(data);
    for probe in [0u64, 1, 0xffff_ffff_8100_0000, u64::MAX] {
        if let Some(found) = symbols.lookup(probe) {
            assert!(found.start <= probe);
        }
    }
    for symbol in symbols.iter().take(64) {
        let found = symbols.lookup(symbol.start).expect("a symbol's own address");
        assert_eq!(found.start, symbol.start);
    }
});
