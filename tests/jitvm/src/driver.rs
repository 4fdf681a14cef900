//! The driver loop: calls the workload's methods into generated code for a given time, with a
//! safepoint after each call (heap reset, optimising tier, compactions).

use std::time::{Duration, Instant};

use crate::benchmarks::{Call, Workload, phase_of};
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
}

/// Runs `calls` in turn (see [`phase_of`]) until the time is up.
pub fn run(vm: &mut Vm, calls: &[Call], cfg: &RunConfig) -> Result<Summary, VmError> {
    let start = Instant::now();
    let mut last_compaction = start;
    let mut s = Summary::default();
    if calls.is_empty() {
        return Ok(s);
    }
    loop {
        let c = &calls[phase_of(cfg.workload, s.iterations, calls.len())];
        let r = vm.call(c.method, c.receiver, &c.args)?;
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
