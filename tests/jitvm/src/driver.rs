//! The driver loop: calls the workload's methods into generated code for a given time, with a
//! safepoint after each call (heap reset, optimising tier, compactions).

use std::time::{Duration, Instant};

use crate::benchmarks::{Call, Workload, phase_of};
use crate::cpu_time::CpuClock;
use crate::error::VmError;
use crate::runtime::Vm;

/// How long and how to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The workload (decides the order of calls).
    pub workload: Workload,
    /// Run for this long (at least one call).
    pub duration: Duration,
    /// Compact the code zone this often (at the first safepoint after).
    pub compact_every: Option<Duration>,
    /// Stop after this many calls instead, however long they take.
    pub iterations: Option<u64>,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Calls made.
    pub iterations: u64,
    /// Answer of the last call.
    pub last: i64,
    /// Wrapping sum of all answers.
    pub checksum: i64,
    /// Answers that differ from the Rust reference.
    pub mismatches: u64,
    /// Time spent.
    pub elapsed: Duration,
    /// The thread CPU time of the calls, by the labels they ran under: `(phase, receiver
    /// class, ns)`, one entry per call of the workload, in its order.
    pub labelled_cpu_ns: Vec<(&'static str, String, u64)>,
}

impl Summary {
    /// The labelled CPU time per value of one label, `phase` or `receiver`, in ms:
    /// `benchFib:812.4,benchmark:190.1`, in first-seen order.
    pub fn cpu_ms_by(&self, key: &str) -> String {
        let mut sums: Vec<(String, u64)> = Vec::new();
        for (phase, class, ns) in &self.labelled_cpu_ns {
            let value = if key == "phase" {
                phase.to_string()
            } else {
                class.clone()
            };
            match sums.iter_mut().find(|(v, _)| *v == value) {
                Some((_, sum)) => *sum += ns,
                None => sums.push((value, *ns)),
            }
        }
        let parts: Vec<String> = sums
            .iter()
            .map(|(v, ns)| format!("{v}:{:.3}", *ns as f64 / 1e6))
            .collect();
        parts.join(",")
    }
}

/// Runs `calls` in turn (see [`phase_of`]) until the time is up.
pub fn run(vm: &mut Vm, calls: &[Call], cfg: &RunConfig) -> Result<Summary, VmError> {
    let start = Instant::now();
    let mut last_compaction = start;
    let mut s = Summary::default();
    if calls.is_empty() {
        return Ok(s);
    }
    // Each call runs labelled with its phase and its receiver's class; the VM's own
    // accounting of their thread CPU time is what the profile's split by label is held to.
    let sets: Vec<u64> = calls
        .iter()
        .map(|c| {
            let class = vm.class_name_of(c.receiver);
            s.labelled_cpu_ns.push((c.label, class.clone(), 0));
            vm.label_set(&[("phase", c.label), ("receiver", &class)])
        })
        .collect();
    loop {
        let at = phase_of(cfg.workload, s.iterations, calls.len());
        let c = &calls[at];
        vm.use_labels(sets[at]);
        let cpu_before = CpuClock::Thread.now_ns();
        let r = vm.call(c.method, c.receiver, &c.args);
        s.labelled_cpu_ns[at].2 += CpuClock::Thread.now_ns().saturating_sub(cpu_before);
        vm.use_labels(0);
        let r = r?;
        let v = r.as_int().ok_or_else(|| {
            VmError::Internal(format!("{} answered a non-integer {r:?}", c.label))
        })?;
        if v != c.expected {
            if s.mismatches == 0 {
                eprintln!("jitvm: {} answered {v}, expected {}", c.label, c.expected);
            }
            s.mismatches += 1;
        }
        s.last = v;
        s.checksum = s.checksum.wrapping_add(v);
        s.iterations += 1;
        vm.safepoint();
        let now = Instant::now();
        if let Some(every) = cfg.compact_every
            && now.duration_since(last_compaction) >= every
        {
            vm.compact();
            last_compaction = Instant::now();
        }
        let done = match cfg.iterations {
            Some(n) => s.iterations >= n,
            None => now.duration_since(start) >= cfg.duration,
        };
        if done {
            break;
        }
    }
    s.elapsed = start.elapsed();
    Ok(s)
}
