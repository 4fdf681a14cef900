//! What the VM publishes of itself beside its code map, on the same publication: its settings
//! once at start ([`Vm::publish_configuration`]); its counters and heap gauges at start, at
//! most every [`LEVELS_PERIOD`] at safepoints, after each collection and at the end
//! ([`Vm::publish_levels`]), and the young generation's as each collection begins
//! ([`Vm::publish_young`]); and its collections ([`crate::gc`]) and code compactions
//! ([`crate::compaction`]) as intervals ([`Vm::interval`]), whose timestamps are the ones the
//! VM's own totals add up: the end-of-run line and the profile measure the same thing.

use std::time::{Duration, Instant};

use vmscope_proto::v1::code_map_event::Event;
use vmscope_proto::v1::{
    Configuration, CounterKind, CounterRegion, CounterRegionValues, CounterValue, GaugeValue,
    IntervalBegin, IntervalEnd, IntervalKind, ThreadCounter, configuration,
};

use crate::cpu_time::{CpuClock, ThreadTimes};
use crate::runtime::Vm;

/// What an interval took: its published length, and the CPU time of the VM's thread and of
/// all the process's threads within it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IntervalCost {
    /// The end's timestamp minus the begin's, in ns.
    pub ns: u64,
    /// CPU time of the VM's thread, in ns.
    pub thread_cpu_ns: u64,
    /// CPU time of every thread of the process, in ns.
    pub process_cpu_ns: u64,
}

fn gauge(name: &str, bytes: usize) -> Event {
    Event::Gauge(GaugeValue {
        name: name.into(),
        unit: "bytes".into(),
        value: i64::try_from(bytes).unwrap_or(i64::MAX),
    })
}

/// The id of the region of the methods' activation counters.
pub const ACTIVATIONS_REGION: u32 = 1;

/// Longest the VM's counters go unpublished while it runs.
pub const LEVELS_PERIOD: Duration = Duration::from_millis(20);

impl Vm {
    /// Publishes the VM's settings (VMProfiler's header: "eden size: ... code size: ...").
    pub(crate) fn publish_configuration(&self) {
        let number = |name: &str, n: usize, unit: &str| {
            Event::Configuration(Configuration {
                name: name.into(),
                value: Some(configuration::Value::Number(
                    i64::try_from(n).unwrap_or(i64::MAX),
                )),
                unit: unit.into(),
            })
        };
        let p = self.publisher();
        p.publish(number("code size", self.config.zone_size, "bytes"));
        p.publish(number("heap size", self.config.heap_size, "bytes"));
        if let Some(gc) = self.config.gc {
            p.publish(number("eden size", gc.eden_bytes, "bytes"));
        }
        let hot = if self.config.hot_calls == u64::MAX {
            "never".to_owned()
        } else {
            format!("after {} calls", self.config.hot_calls)
        };
        p.publish(Event::Configuration(Configuration {
            name: "optimising tier".into(),
            value: Some(configuration::Value::Text(hot)),
            unit: String::new(),
        }));
    }

    /// Publishes every counter and heap gauge now.
    pub(crate) fn publish_levels(&mut self) {
        self.levels_published = Some(Instant::now());
        let sends = self.sends();
        let p = self.publisher();
        let counter = |name: &str, value: u64| {
            Event::Counter(CounterValue {
                name: name.into(),
                unit: String::new(),
                value,
            })
        };
        p.publish(counter("Sends", sends));
        p.publish(counter("Send misses", self.stats.send_misses));
        p.publish(counter("Methods compiled", self.stats.compiled));
        p.publish(counter("Stack overflows", self.stats.stack_overflows));
        p.publish(gauge("old", self.heap.old_bytes()));
        p.publish(gauge("free", self.heap.free_bytes()));
        self.publish_young();
    }

    /// Publishes the young generation's size: with the other levels, and as a collection
    /// begins, when the eden is at its fullest (which the levels after it never see).
    pub(crate) fn publish_young(&mut self) {
        let young = self.heap.young_bytes();
        self.publisher().publish(gauge("young", young));
        self.stats.young_published = Some(
            self.stats
                .young_published
                .map_or((young, young), |(low, high)| {
                    (low.min(young), high.max(young))
                }),
        );
    }

    /// [`Vm::publish_levels`] if they were last published [`LEVELS_PERIOD`] ago or more.
    /// Publishes where the methods' activation counters are (one `u64` per method, in method
    /// order, bumped by compiled prologues, inlined bodies and the interpreter), for the
    /// daemon to read: exact counts per method. They are all zero now.
    pub(crate) fn publish_counter_region(&mut self) {
        let region = CounterRegion {
            id: ACTIVATIONS_REGION,
            kind: CounterKind::Activations as i32,
            address: self.counters().as_ptr() as u64,
            stride: 8,
            names: self.prog.methods.iter().map(|m| m.name.clone()).collect(),
        };
        self.publisher().publish(Event::CounterRegion(region));
    }

    /// Publishes where the VM thread (this one: the VM runs on the thread that made it) keeps
    /// its send counter, for the profiler to read with each of its samples.
    pub(crate) fn publish_thread_counter(&mut self) {
        let address = std::ptr::from_ref(self.thread_sends()) as u64;
        self.publish_thread_counter_at(address);
    }

    /// Withdraws the thread counter: its memory goes with the VM.
    pub(crate) fn withdraw_thread_counter(&mut self) {
        self.publish_thread_counter_at(0);
    }

    fn publish_thread_counter_at(&mut self, address: u64) {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        self.publisher()
            .publish(Event::ThreadCounter(ThreadCounter { tid, address }));
    }

    /// Publishes the counters' values as the VM finishes: a session that outlives the process
    /// can no longer read them.
    pub(crate) fn publish_counter_values(&mut self) {
        let values = self
            .counters()
            .iter()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
            .collect();
        self.publisher()
            .publish(Event::CounterValues(CounterRegionValues {
                region: ACTIVATIONS_REGION,
                values,
            }));
    }

    pub(crate) fn publish_levels_if_due(&mut self) {
        if self
            .levels_published
            .is_none_or(|at| at.elapsed() >= LEVELS_PERIOD)
        {
            self.publish_levels();
        }
    }

    /// Runs `work` as an interval of `kind`, published with its begin and end; answers what
    /// the interval took, by the timestamps published and by the CPU clocks.
    ///
    /// The clocks are read right before each timestamp is taken, so that the CPU time covers
    /// what the samples between the timestamps cover: not the wake of the publisher's thread
    /// after the end is published (1 point of a debug VM's time in collections), nor anything
    /// the publisher ran before the begin.
    pub(crate) fn interval(
        &mut self,
        kind: IntervalKind,
        id: u64,
        work: impl FnOnce(&mut Vm),
    ) -> IntervalCost {
        let threads = ThreadTimes::now();
        let thread = CpuClock::Thread.now_ns();
        let begin = self.publisher().publish(Event::Begin(IntervalBegin {
            kind: kind as i32,
            name: String::new(),
            id,
        }));
        work(self);
        let thread_cpu_ns = CpuClock::Thread.now_ns() - thread;
        let process_cpu_ns = threads.again().since(&threads);
        let end = self.publisher().publish(Event::End(IntervalEnd {
            kind: kind as i32,
            name: String::new(),
            id,
        }));
        IntervalCost {
            ns: end.saturating_sub(begin),
            thread_cpu_ns,
            process_cpu_ns,
        }
    }
}
