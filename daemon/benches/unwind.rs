//! Unwinds per second of a real captured stack, warm caches.
//!
//! The stack is this benchmark's own, captured in a `qsort` comparator under a chain of Rust
//! functions, so the unwind goes through libc's code without frame pointers by its `.eh_frame`
//! (the same capture the unit tests check frame by frame). Tables are loaded and the
//! per-process unwinder built before measuring: what is measured is the steady state of a
//! session, one `Unwinder::unwind` per sample.

use std::{hint::black_box, sync::Arc};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use vmscoped::{
    process::ProcessTable,
    symbolize::Modules,
    sys,
    unwind::{ProcessMemory, StackCopy, Unwinder, UserRegs},
    vocab::StackEnd,
};

#[path = "../src/unwind/own_stack.rs"]
#[allow(dead_code)]
mod own_stack;

/// perf's default stack copy.
const COPY_BYTES: usize = 8192;

fn unwind(c: &mut Criterion) {
    let captured = own_stack::chain_a(COPY_BYTES);
    let modules = Arc::new(Modules::new());
    let mut table = ProcessTable::new(modules.clone());
    let mut unwinder = Unwinder::new(modules);
    let mut memory = ProcessMemory::new();
    let pid = std::process::id();
    let process = table.observe(pid, sys::monotonic_ns());
    let regs = UserRegs {
        ip: captured.ip,
        sp: captured.sp,
        bp: captured.bp,
    };
    let stack = StackCopy {
        sp: captured.sp,
        bytes: &captured.stack,
        faulted: captured.faulted,
        taken_ns: 0,
    };
    let mut out = Vec::with_capacity(128);
    let end = unwinder.unwind(process, regs, stack, &mut memory, &mut out);
    eprintln!(
        "captured stack: {} frames, {} bytes copied, ended: {end}",
        out.len(),
        captured.stack.len()
    );
    assert!(
        matches!(end, StackEnd::Complete | StackEnd::CopyTooSmall) && out.len() >= 10,
        "{end:?} after {} frames",
        out.len()
    );

    let mut group = c.benchmark_group("unwind");
    group.throughput(Throughput::Elements(1));
    group.bench_function("real_stack_through_qsort", |b| {
        b.iter(|| {
            let end = unwinder.unwind(process, regs, black_box(stack), &mut memory, &mut out);
            black_box((end, out.len()))
        })
    });
    group.finish();
}

criterion_group!(benches, unwind);
criterion_main!(benches);
