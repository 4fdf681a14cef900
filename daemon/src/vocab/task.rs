//! The thread a sample was taken in.

/// A thread of a process, as a sample names it: the process (the kernel's `tgid`) and the
/// thread (its task id). Counted apart, so that a profile says which thread each sample was
/// taken in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Task {
    /// The process.
    pub pid: u32,
    /// The thread: the process's id for its main thread.
    pub tid: u32,
}

impl Task {
    /// Thread `tid` of process `pid`.
    pub fn new(pid: u32, tid: u32) -> Task {
        Task { pid, tid }
    }
}

impl From<u32> for Task {
    /// The main thread of process `pid`, whose task id is the process's.
    fn from(pid: u32) -> Task {
        Task { pid, tid: pid }
    }
}
