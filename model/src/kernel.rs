//! What the kernel counted for the targets over a session's window (VMProfiler's "Events").

use serde::{Deserialize, Serialize};

/// The kernel's counts: for all targets, and per process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelEvents {
    /// All targets together.
    pub total: Option<KernelCounts>,
    /// Per target process.
    pub processes: Vec<ProcessKernelCounts>,
    /// Counters the machine or the kernel could not give, with why (no PMU...).
    pub unavailable: Vec<String>,
}

/// One set of counts. Hardware counters are `None` where the machine has no PMU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelCounts {
    /// Context switches.
    pub context_switches: u64,
    /// Of them, voluntary (where `/proc` says).
    pub voluntary_context_switches: Option<u64>,
    /// Of them, involuntary.
    pub involuntary_context_switches: Option<u64>,
    /// Moves to another CPU.
    pub cpu_migrations: u64,
    /// Page faults served without I/O.
    pub minor_faults: u64,
    /// Page faults that needed I/O.
    pub major_faults: u64,
    /// CPU cycles.
    pub cycles: Option<u64>,
    /// Instructions retired.
    pub instructions: Option<u64>,
    /// Last-level cache misses.
    pub cache_misses: Option<u64>,
}

/// One target process's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessKernelCounts {
    /// The process.
    pub pid: u32,
    /// Its command.
    pub command: String,
    /// Its counts.
    pub counts: Option<KernelCounts>,
    /// Its threads counted.
    pub threads: u32,
    /// Why its counts are partial, if they are (empty otherwise).
    pub note: String,
}
