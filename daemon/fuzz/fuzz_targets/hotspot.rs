//! Reading a JVM's vmStructs and code heap from hostile memory never panics nor runs away: the
//! input is the process's memory (at one address), where the exports, tables, segment map and
//! blocks are whatever the fuzzer wrote. The same bytes are also read as the compressed streams
//! (scopes, line number tables) of either JDK coding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::hotspot::{
    Regions,
    code_heap::{Heap, Walk, parse_block, walk_segmap},
    compressed::Unsigned5,
    layout::Layout,
    lines::LineTable,
    scopes::scope_chain,
    vm_structs::{EXPORTS, Exports, VmStructs},
};

const BASE: u64 = 0x1000;

fuzz_target!(|data: &[u8]| {
    let mut mem = Regions::default();
    mem.add(BASE, data.to_vec());
    // Each export's value is a word of the input: tables, strides and offsets all fuzzed.
    let exports = Exports::new(
        EXPORTS
            .iter()
            .enumerate()
            .map(|(i, &name)| (name, BASE + 8 * i as u64)),
    );
    if let Ok(tables) = VmStructs::read(&mut mem, &exports)
        && let Ok(layout) = Layout::new(&tables)
        && let Some(heap) = Heap::parse(data, &layout.heap)
    {
        let _ = parse_block(data, heap.low, &heap, &layout.heap, &layout.blob, |_| true);
    }
    if let Some((&from, map)) = data.split_first() {
        match walk_segmap(map, 0, u64::from(from)) {
            Walk::Start(s) => assert!(s <= u64::from(from)),
            Walk::Before(s) => panic!("a walk from segment {from} left a window starting at 0 for {s}"),
            Walk::Free => {}
        }
    }
    for coding in [Unsigned5::for_jdk(17), Unsigned5::for_jdk(25)] {
        if let Ok(table) = LineTable::parse(data, coding) {
            let _ = table.line_at(data.len() as u32);
        }
        let _ = scope_chain(data, data.len() as u32 / 2, coding);
        let mut pos = 0;
        while pos < data.len() && coding.read_int(data, &mut pos).is_some() {}
    }
});
