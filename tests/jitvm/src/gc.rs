//! The collector of the GC-heavy mode (`--eden-kb`): at a safepoint whose young objects have
//! reached the eden's size, a scavenge traces them and clears the eden; every
//! [`GcConfig::full_every`]-th collection is a full one, which traces the whole heap. Without
//! the mode, a safepoint frees the young objects at no cost and publishes nothing.
//!
//! Each collection is published as an interval (`INTERVAL_KIND_SCAVENGE` or
//! `INTERVAL_KIND_FULL_GC`), and its time, as published, is added to the VM's own totals,
//! with the CPU time its thread and its process spent in it.
//!
//! With [`GcConfig::thread`] (`--gc-thread`), a collection traces on a thread of its own
//! (named `gc`) while the VM thread waits for it in [`wait_for_gc`], off its CPU, as the
//! mutators of a stop-the-world collector do: the time off the CPU an off-CPU profile puts
//! inside the VM's collections.

use vmscope_proto::v1::IntervalKind;

use crate::runtime::Vm;

/// Settings of the GC-heavy mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcConfig {
    /// Bytes of young objects that make a collection due.
    pub eden_bytes: usize,
    /// Every this many collections, one is full (0: never).
    pub full_every: u64,
    /// Trace on a thread of its own while the VM thread waits.
    pub thread: bool,
}

/// The heap, lent to the collector's thread while the VM thread waits for it.
struct Lent<'a>(&'a crate::heap::Heap);

// SAFETY: the VM thread does not touch the heap while the collector's thread traces it: it
// waits for that thread to end ([`wait_for_gc`]) before it goes on.
unsafe impl Sync for Lent<'_> {}
// SAFETY: as above.
unsafe impl Send for Lent<'_> {}

/// Traces the heap on a thread of its own, named `gc`, and waits for it: the VM thread's
/// time off its CPU in a collection. Returns the references traced.
#[inline(never)]
pub fn wait_for_gc(heap: &crate::heap::Heap, full: bool) -> u64 {
    let lent = Lent(heap);
    std::thread::scope(|scope| {
        let collector = std::thread::Builder::new()
            .name("gc".into())
            .spawn_scoped(scope, || {
                let lent = &lent;
                lent.0.trace(full)
            })
            .expect("the collector's thread");
        collector.join().expect("the collector does not panic")
    })
}

impl Vm {
    /// At a safepoint: frees the young objects, by a collection when the GC-heavy mode is on
    /// and the eden is full.
    pub(crate) fn collect_if_due(&mut self) {
        let Some(gc) = self.config.gc else {
            self.heap.reset();
            return;
        };
        if self.heap.young_bytes() < gc.eden_bytes {
            return;
        }
        let collections = self.stats.scavenges + self.stats.full_gcs;
        let full = gc.full_every > 0 && (collections + 1).is_multiple_of(gc.full_every);
        let kind = if full {
            IntervalKind::FullGc
        } else {
            IntervalKind::Scavenge
        };
        // Published inside the interval, right after its begin: the publisher's thread wakes
        // for the begin anyway, and a wake of its own before it would take the VM's CPU
        // outside the collection (1 run in 6 put the VM thread's sampled share 3 points above
        // its own).
        let cost = self.interval(kind, collections, |vm| {
            vm.publish_young();
            if gc.thread {
                std::hint::black_box(wait_for_gc(&vm.heap, full));
            } else {
                std::hint::black_box(vm.heap.trace(full));
            }
            vm.heap.clear_young();
        });
        self.stats.gc_ns += cost.ns;
        self.stats.gc_thread_cpu_ns += cost.thread_cpu_ns;
        self.stats.gc_process_cpu_ns += cost.process_cpu_ns;
        if full {
            self.stats.full_gcs += 1;
        } else {
            self.stats.scavenges += 1;
        }
        self.publish_levels();
    }
}
