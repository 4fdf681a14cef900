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
}

impl Thread {
    /// The one order of threads: most samples first, then by process and thread id.
    pub fn order(a: &Thread, b: &Thread) -> std::cmp::Ordering {
        crate::rank::most_first(a.samples, b.samples)
            .then_with(|| (a.pid, a.tid).cmp(&(b.pid, b.tid)))
    }
}
