//! What tagging samples with a VM's intervals costs, through the daemon's own code paths: a
//! process whose publication holds 10,000 intervals (scavenges inside safepoints, a full GC
//! every eighth collection, and the VM's own JIT compilations overlapping them), and 1,000,000
//! samples spread over the same time, in time order as the session manager counts them.
//!
//! * `lookup`: the kinds under way at each sample's time (`VmState::during`).
//! * `count_untagged`: counting each sample's 12-frame stack in a session as if its process
//!   published nothing: the baseline.
//! * `count_tagged`: the lookup, the set's id in the session, and the count.
//!
//! The per-sample cost of tagging is `count_tagged` minus `count_untagged`, both from one run:
//! `cargo bench -p vmscoped --bench intervals`.

use std::{hint::black_box, time::Duration};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use vmscope_model::IntervalKind;
use vmscoped::{
    session::{DuringId, StackTable},
    stats::vm::{StatEvent, VmState},
    vocab::{Location, StackEnd},
};

const SAMPLES: u64 = 1_000_000;
const COLLECTIONS: u64 = 2_500;
/// A collection every 400 µs, 90 µs long, in a safepoint 10 µs longer each side.
const EVERY_NS: u64 = 400_000;

/// The VM's state after publishing 10,000 intervals: per collection a safepoint, the
/// collection, and (every other one) a JIT compilation spanning it.
fn vm_state() -> VmState {
    let mut state = VmState::default();
    let jit = IntervalKind::Named("JIT compilation".into());
    let mut apply = |ts, event| state.apply(ts, &event);
    let mut intervals = 0;
    for i in 0..COLLECTIONS {
        let at = 1_000_000 + i * EVERY_NS;
        let gc = if i % 8 == 7 {
            IntervalKind::FullGc
        } else {
            IntervalKind::Scavenge
        };
        if i % 2 == 0 {
            apply(
                at - 50_000,
                StatEvent::Begin {
                    kind: jit.clone(),
                    id: i,
                },
            );
        }
        apply(
            at,
            StatEvent::Begin {
                kind: IntervalKind::Safepoint,
                id: i,
            },
        );
        apply(
            at + 10_000,
            StatEvent::Begin {
                kind: gc.clone(),
                id: i,
            },
        );
        apply(at + 100_000, StatEvent::End { kind: gc, id: i });
        apply(
            at + 110_000,
            StatEvent::End {
                kind: IntervalKind::Safepoint,
                id: i,
            },
        );
        intervals += 2;
        if i % 2 == 0 {
            apply(
                at + 150_000,
                StatEvent::End {
                    kind: jit.clone(),
                    id: i,
                },
            );
            intervals += 1;
        }
    }
    // The rest of the 10,000: more compilations, between collections.
    let mut id = COLLECTIONS;
    while intervals < 10_000 {
        let at = 1_000_000 + (id - COLLECTIONS) * EVERY_NS + 250_000;
        apply(
            at,
            StatEvent::Begin {
                kind: jit.clone(),
                id,
            },
        );
        apply(
            at + 20_000,
            StatEvent::End {
                kind: jit.clone(),
                id,
            },
        );
        intervals += 1;
        id += 1;
    }
    state
}

/// Sample times over the intervals' span, in order.
fn sample_times() -> Vec<u64> {
    let span = COLLECTIONS * EVERY_NS;
    (0..SAMPLES)
        .map(|i| 1_000_000 + i * span / SAMPLES)
        .collect()
}

/// A 12-frame stack per sample, among 64 distinct ones.
fn stack(i: u64) -> [Location; 12] {
    std::array::from_fn(|depth| Location::Kernel {
        ip: 0xffff_ffff_8100_0000 + (i % 64) * 0x100 + depth as u64,
    })
}

fn bench(c: &mut Criterion) {
    let state = vm_state();
    let times = sample_times();
    let in_some = times
        .iter()
        .filter(|&&t| !state.during(t).set.is_empty())
        .count();
    println!(
        "intervals: 10,000; samples: {SAMPLES}, {in_some} of them during at least one interval"
    );
    let mut group = c.benchmark_group("intervals");
    group.throughput(Throughput::Elements(SAMPLES));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("lookup", |b| {
        b.iter(|| {
            let mut tagged = 0u64;
            for &t in &times {
                tagged += u64::from(!state.during(black_box(t)).set.is_empty());
            }
            tagged
        })
    });
    let end = Some(StackEnd::Complete);
    group.bench_function("count_untagged", |b| {
        b.iter(|| {
            let mut table = StackTable::default();
            for (i, _) in times.iter().enumerate() {
                table.count(7, stack(i as u64), end, DuringId(0));
            }
            table.stacks.len()
        })
    });
    group.bench_function("count_tagged", |b| {
        b.iter(|| {
            let mut table = StackTable::default();
            for (i, &t) in times.iter().enumerate() {
                let during = state.during(t);
                let during = table.during((!during.set.is_empty()).then_some(during));
                table.count(7, stack(i as u64), end, during);
            }
            table.stacks.len()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
