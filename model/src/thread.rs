//! The threads a profile's samples were taken in.

use serde::{Deserialize, Serialize};

/// A thread with samples in a profile: what [`crate::Stack::tid`] names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    /// Its process.
    pub pid: u32,
    /// Its kernel task id (the process's id for the main thread).
    pub tid: u32,
    /// Its name (`comm`) when the daemon first saw a sample of it; empty when it could not be
    /// read (the thread had exited).
    pub name: String,
    /// Its samples.
    pub samples: u64,
    /// The CPU time its samples stand for, in nanoseconds.
    pub cpu_ns: u64,
    /// Off-CPU and wall profiles: its blocks recorded.
    pub off_cpu_blocks: u64,
    /// Their time off the CPU, in nanoseconds.
    pub off_cpu_ns: u64,
    /// Of that time, how much fell inside each kind of interval its VM published (a GC, a
    /// safepoint: time waiting for it), as indices into [`crate::Profile::vm_interval_kinds`],
    /// most first.
    pub off_cpu_during: Vec<IntervalTime>,
}

/// Time of a thread inside one kind of its VM's intervals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntervalTime {
    /// The kind, as an index into [`crate::Profile::vm_interval_kinds`].
    pub kind: u32,
    /// Nanoseconds.
    pub ns: u64,
}

impl Thread {
    /// Its time on and off the CPU: in a wall profile, its elapsed time.
    pub fn total_ns(&self) -> u64 {
        self.cpu_ns.saturating_add(self.off_cpu_ns)
    }

    /// The one order of threads: most time first (samples and blocks both), then most
    /// samples, then by process and thread id.
    pub fn order(a: &Thread, b: &Thread) -> std::cmp::Ordering {
        crate::rank::most_first(a.total_ns(), b.total_ns())
            .then_with(|| crate::rank::most_first(a.samples, b.samples))
            .then_with(|| (a.pid, a.tid).cmp(&(b.pid, b.tid)))
    }
}
