//! Reading a JVM's vmStructs and code heap from hostile memory never panics nor runs away: the
//! input is the process's memory (at one address), where the exports, tables, segment map and
//! blocks are whatever the fuzzer wrote.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::hotspot::{
    Regions,
    code_heap::{Heap, Walk, parse_block, walk_segmap},
    layout::Layout,
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
});
