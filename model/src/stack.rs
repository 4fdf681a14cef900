//! Samples per stack of frames, how stacks ended, and samples kept one by one.

use serde::{Deserialize, Serialize};

use crate::BlockState;

/// Samples of one thread with one stack of frames, ended one way, during one set of VM
/// intervals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stack {
    /// Its leaf's node in [`crate::Profile::stack_nodes`]; `None` for a stack without frames.
    /// [`crate::Profile::stack_frames`] reads its frames, leaf first: kernel frames (when the
    /// tick landed in the kernel), then the user frames under them, outermost caller last.
    pub node: Option<u32>,
    /// The process.
    pub pid: u32,
    /// The thread (its kernel task id; the process's id for its main thread).
    pub tid: u32,
    /// One value per [`crate::Profile::sample_types`], in that order: its samples first.
    pub values: Vec<u64>,
    /// Cut at the depth limit: callers beyond the last frame are missing.
    pub truncated: bool,
    /// How the walk ended; `None` for a session without call graph (or a daemon that does not
    /// say).
    pub end: Option<StackEnd>,
    /// The intervals its VM had under way when these samples were taken, as indices into
    /// [`crate::Profile::vm_interval_kinds`]; empty outside any. For a block, those under way
    /// during any of it.
    pub during: Vec<u32>,
    /// Blocks: why the thread was off its CPU; `None` for samples taken on it.
    pub state: Option<BlockState>,
    /// The labels its thread had set when these samples were taken, as indices into
    /// [`crate::Profile::labels`]; empty when none was set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<u32>,
}

/// What identifies a stack among a profile's: stacks that agree on all of it are one, and
/// merging them adds their values (a shown view's, merged profiles').
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StackKey {
    /// Its leaf's node: the same node, the same frames.
    pub node: Option<u32>,
    /// Its process.
    pub pid: u32,
    /// Its thread.
    pub tid: u32,
    /// Cut at the depth limit.
    pub truncated: bool,
    /// How its walk ended.
    pub end: Option<StackEnd>,
    /// Its intervals.
    pub during: Vec<u32>,
    /// Off the CPU, why.
    pub state: Option<BlockState>,
    /// Its labels.
    pub labels: Vec<u32>,
}

impl Stack {
    /// What identifies it, with its leaf's node `node` (its own, or its node in another
    /// tree) and its intervals `during`.
    pub fn key(&self, node: Option<u32>, during: Vec<u32>) -> StackKey {
        StackKey {
            node,
            pid: self.pid,
            tid: self.tid,
            truncated: self.truncated,
            end: self.end,
            during,
            state: self.state,
            labels: self.labels.clone(),
        }
    }

    /// Its events: the first of its values (its samples, or an off-CPU profile's blocks).
    pub fn samples(&self) -> u64 {
        self.values.first().copied().unwrap_or(0)
    }

    /// Adds `other`'s values to its own, type by type: the stack two merged stacks make.
    pub fn add_values(&mut self, other: &[u64]) {
        if self.values.len() < other.len() {
            self.values.resize(other.len(), 0);
        }
        for (mine, theirs) in self.values.iter_mut().zip(other) {
            *mine = mine.saturating_add(*theirs);
        }
    }
}

/// How a stack's walk ended, as a report groups stacks: whole, or why callers are missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StackEnd {
    /// The walk reached the thread's entry point.
    Complete,
    /// Cut at the depth limit (`kernel.perf_event_max_stack`).
    DepthLimit,
    /// A caller was built without frame pointers.
    NoFramePointer,
    /// A return address lay outside every mapping.
    UnmappedReturn,
    /// The unwinder went past the stack copy (`--call-graph dwarf,SIZE`).
    CopyTooSmall,
    /// The stack copy was cut by unreadable memory.
    CopyFaulted,
    /// Neither unwind information nor a frame pointer led further.
    UnwindFailed,
    /// Code a JIT compiled without frame pointers (HotSpot without
    /// `-XX:+PreserveFramePointer`).
    JitNoFramePointer,
    /// New once the session held its most distinct stacks: counted by leaf alone.
    StackLimit,
}

impl StackEnd {
    /// How JSON spells it: the variant in snake case (`complete`, `no_frame_pointer`...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::DepthLimit => "depth_limit",
            Self::NoFramePointer => "no_frame_pointer",
            Self::UnmappedReturn => "unmapped_return",
            Self::CopyTooSmall => "copy_too_small",
            Self::CopyFaulted => "copy_faulted",
            Self::UnwindFailed => "unwind_failed",
            Self::JitNoFramePointer => "jit_no_frame_pointer",
            Self::StackLimit => "stack_limit",
        }
    }
}

/// Samples whose stacks ended one way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackEndSamples {
    /// How they ended.
    pub end: StackEnd,
    /// How many.
    pub samples: u64,
}

/// One sample kept as it was taken (`--keep-samples`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributedSample {
    /// CLOCK_MONOTONIC time of the sample.
    pub timestamp_ns: u64,
    /// Its process.
    pub pid: u32,
    /// Its thread.
    pub tid: u32,
    /// The interrupted instruction pointer.
    pub ip: u64,
    /// Taken in the kernel.
    pub kernel: bool,
    /// The section of the row it was counted in.
    pub section: super::Section,
    /// The name of the row it was counted in.
    pub name: String,
    /// The module of the row it was counted in.
    pub module: String,
    /// Generated code: the start of the code entry it fell in, at the sample's time.
    pub code_start: u64,
    /// Its call stack, leaf first (the leaf alone without call graph).
    pub stack: Vec<StackFrame>,
    /// Its stack was cut at the depth limit.
    pub truncated: bool,
    /// Its VM's intervals under way when it was taken (as [`Stack::during`]).
    pub during: Vec<u32>,
}

/// One frame of a kept sample's stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackFrame {
    /// The address (a return address for callers).
    pub address: u64,
    /// Kernel code.
    pub kernel: bool,
    /// Its frame, as an index into [`crate::Profile::frames`].
    pub frame: u32,
    /// Generated code: the start of the code entry it fell in, at the sample's time.
    pub code_start: u64,
}
