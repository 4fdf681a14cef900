//! ELF symbol parsing never panics on hostile files, and lookups are consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::elf::ElfSymbols;

fuzz_target!(|data: &[u8]| {
    let Ok(symbols) = ElfSymbols::parse(data) else {
        return;
    };
    let _ = symbols.build_id();
    let _ = symbols.debuglink();
    for symbol in symbols.symbols().take(256) {
        if let Some(found) = symbols.lookup(symbol.start) {
            assert!(found.start <= symbol.start);
            let _ = found.demangled();
        }
    }
    for offset in [0u64, 0x40, 0x1000, u64::MAX] {
        if let Some(vaddr) = symbols.file_offset_to_vaddr(offset) {
            let _ = symbols.lookup(vaddr);
        }
    }
});
