//! Time off the CPU (`--mode off-cpu` and `wall`): why threads waited, where, and how much of
//! it was lost or left out.

use serde::{Deserialize, Serialize};

use crate::{ProfileRow, rank::most_first};

/// Why a thread was off its CPU: the scheduler's state of it as it left.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Runnable, waiting for a CPU: preempted, or yielded (`R`).
    Preempted,
    /// An interruptible sleep (`S`): a timer, a lock, a futex, a read of a pipe or socket.
    Sleeping,
    /// An uninterruptible sleep (`D`): disk I/O, a page fault's read, a kernel lock.
    Uninterruptible,
    /// Stopped or traced (`T`): a signal, a debugger.
    Stopped,
    /// An idle wait (`I`): kernel threads waiting for work.
    Idle,
    /// Any other state (parked, dead...), or one this build does not know.
    #[default]
    Other,
}

impl BlockState {
    /// Every state, in report order.
    pub const ALL: [BlockState; 6] = [
        BlockState::Preempted,
        BlockState::Sleeping,
        BlockState::Uninterruptible,
        BlockState::Stopped,
        BlockState::Idle,
        BlockState::Other,
    ];

    /// How JSON, pprof labels and the report spell it: `preempted`, `sleeping`,
    /// `uninterruptible`, `stopped`, `idle`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Preempted => "preempted",
            Self::Sleeping => "sleeping",
            Self::Uninterruptible => "uninterruptible",
            Self::Stopped => "stopped",
            Self::Idle => "idle",
            Self::Other => "other",
        }
    }

    /// What it means, for the report: `waiting for a CPU (preempted)`...
    pub fn describe(self) -> &'static str {
        match self {
            Self::Preempted => "waiting for a CPU (preempted, runnable)",
            Self::Sleeping => "sleeping (timers, locks, futexes, sockets, pipes)",
            Self::Uninterruptible => "uninterruptible (disk I/O, page faults, kernel locks)",
            Self::Stopped => "stopped (signals, debuggers)",
            Self::Idle => "idle (kernel threads waiting for work)",
            Self::Other => "other states",
        }
    }
}

/// Time off the CPU in one state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateTime {
    /// The state.
    pub state: BlockState,
    /// Blocks in it.
    pub blocks: u64,
    /// Their time off the CPU, in nanoseconds.
    pub ns: u64,
}

impl StateTime {
    /// The one order of states: most time first, then report order.
    pub fn order(a: &StateTime, b: &StateTime) -> std::cmp::Ordering {
        most_first(a.ns, b.ns).then_with(|| a.state.cmp(&b.state))
    }
}

/// What a profile recorded of its targets' time off the CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffCpu {
    /// Blocks recorded (with their stacks, or still under way at the stop).
    pub blocks: u64,
    /// Their time off the CPU inside the session, in nanoseconds: a block under way at the
    /// start counts from the start, one under way at the stop up to the stop.
    pub total_ns: u64,
    /// Rows of time off the CPU, one per (section, module, name), most time first, as
    /// [`crate::Profile::rows`] are for samples, by the innermost *user* frame each thread
    /// blocked in (the kernel's frames, all through the scheduler, are in the stacks): **every
    /// count in them (`samples`, `inclusive_samples`, their ranges', processes', inlined
    /// methods' and source lines') is nanoseconds off the CPU**, not samples.
    pub rows: Vec<ProfileRow>,
    /// Time by why threads were off the CPU, most first.
    pub states: Vec<StateTime>,
    /// Blocks shorter than the session's minimum (`--min-block`), counted and left out: they
    /// are in no stack, no row and no thread's total.
    pub short_blocks: u64,
    /// Their time, in nanoseconds.
    pub short_ns: u64,
    /// Blocks the kernel could not deliver (the ring buffer, or a user's share of it, was
    /// full): lost, counted.
    pub lost_blocks: u64,
    /// Threads that left their CPU while the kernel followed its most threads off their CPU
    /// at once (`vmscope_common::MAX_BLOCKED_THREADS`), over the whole host while the session
    /// ran: their block was not seen.
    pub unfollowed: u64,
    /// Of `total_ns`, the time of threads still off their CPU at the stop: their stacks are
    /// taken as they come back, so these are counted under the frame [`STILL_BLOCKED_FRAME`]
    /// alone.
    pub still_blocked_ns: u64,
    /// Threads still off their CPU at the stop.
    pub still_blocked_threads: u32,
}

/// The one frame of a stack that stands for a thread still off its CPU when the session
/// stopped (its stack is taken only when it comes back).
pub const STILL_BLOCKED_FRAME: &str = "[still off-CPU at the stop]";

/// The outermost frame of a block that began before the session started: its kernel frames
/// are known, its user stack (taken as a thread leaves its CPU) is not.
pub const SINCE_START_FRAME: &str = "[off-CPU since before the start: user stack not taken]";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_spell_as_json_does() {
        for state in BlockState::ALL {
            let json = serde_json::to_string(&state).unwrap();
            assert_eq!(json, format!("\"{}\"", state.as_str()));
        }
    }
}
