//! Why a stack ended: what the unwinder (`unwind/`) says of each stack it walks, what the
//! kernel's frame-pointer walk is read as (`session/`), what samples waiting for their code map
//! carry (`codemap/`), and what reports count per reason.

use std::fmt;

/// Why a stack ended; counted per reason and shown in reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackEnd {
    /// The outermost frame was reached: its unwind information says there is no caller (`_start`,
    /// `clone3`), or frame-pointer unwinding met a null frame pointer or return address.
    Complete,
    /// The next frame lies beyond the stack copy: a bigger copy (`--call-graph dwarf,SIZE`)
    /// would have gone further.
    CopyTooSmall,
    /// The next frame lies beyond the stack copy, which was cut short by memory the kernel
    /// could not read.
    CopyFaulted,
    /// [`vmscope_common::MAX_STACK_FRAMES`] frames were found and there were more.
    FrameLimit,
    /// A step left both the address and the stack pointer unchanged: it would loop.
    NoProgress,
    /// Unwind information gave a null return address.
    NullReturnAddress,
    /// Frame-pointer unwinding (code without unwind information, or JIT code) went down the
    /// stack instead of up: the code does not keep frame pointers.
    FramePointerBackwards,
    /// A step needed memory below the stack pointer, or an address overflowed: the unwind
    /// information does not match the stack (corrupt, or a wrong guess by frame pointers).
    BadAddress,
    /// A return address lay outside every mapping of the process: what a frame-pointer walk
    /// reads past code built without frame pointers. The stack ends at that unknown frame.
    Unmapped,
    /// The kernel's frame-pointer walk ended (a null or unreadable frame pointer). Whether that
    /// was the thread's entry point or code without frame pointers is known once the outermost
    /// frame is named: a profile says [`StackEnd::Complete`] or [`StackEnd::NoFramePointer`].
    FramePointerChainEnded,
    /// A frame-pointer walk ended at a frame that is not a thread's entry point: some caller
    /// was built without frame pointers (`--call-graph dwarf` unwinds through it).
    NoFramePointer,
    /// The stack reached code a JIT compiled without frame pointers (HotSpot without
    /// `-XX:+PreserveFramePointer`): that frame is named, and what a walk finds beyond it is
    /// not the callers, so the stack ends there.
    JitWithoutFramePointer,
}

impl StackEnd {
    /// Every reason, in the order of [`crate::unwind::UnwindCounters::stacks`].
    pub const ALL: [StackEnd; 12] = [
        StackEnd::Complete,
        StackEnd::CopyTooSmall,
        StackEnd::CopyFaulted,
        StackEnd::FrameLimit,
        StackEnd::NoProgress,
        StackEnd::NullReturnAddress,
        StackEnd::FramePointerBackwards,
        StackEnd::BadAddress,
        StackEnd::Unmapped,
        StackEnd::FramePointerChainEnded,
        StackEnd::NoFramePointer,
        StackEnd::JitWithoutFramePointer,
    ];

    /// Whether the stack may have been cut short (anything but [`StackEnd::Complete`]).
    pub fn is_early(self) -> bool {
        self != StackEnd::Complete
    }

    /// What a person reads in a report.
    pub fn describe(self) -> &'static str {
        match self {
            StackEnd::Complete => "complete",
            StackEnd::CopyTooSmall => "the stack copy was too small",
            StackEnd::CopyFaulted => "the stack copy was cut by unreadable memory",
            StackEnd::FrameLimit => "more frames than the limit",
            StackEnd::NoProgress => "unwinding made no progress",
            StackEnd::NullReturnAddress => "null return address",
            StackEnd::FramePointerBackwards => "code without unwind information or frame pointer",
            StackEnd::BadAddress => "unwind information does not match the stack",
            StackEnd::Unmapped => "a return address outside every mapping",
            StackEnd::FramePointerChainEnded => "the frame-pointer chain ended",
            StackEnd::NoFramePointer => "a caller without frame pointer",
            StackEnd::JitWithoutFramePointer => "JIT code without frame pointers",
        }
    }

    /// The daemon counter of stacks unwound that ended this way (`vmscope info`).
    pub fn counter(self) -> &'static str {
        match self {
            StackEnd::Complete => "unwind_ended_complete",
            StackEnd::CopyTooSmall => "unwind_ended_copy_too_small",
            StackEnd::CopyFaulted => "unwind_ended_copy_faulted",
            StackEnd::FrameLimit => "unwind_ended_frame_limit",
            StackEnd::NoProgress => "unwind_ended_no_progress",
            StackEnd::NullReturnAddress => "unwind_ended_null_return_address",
            StackEnd::FramePointerBackwards => "unwind_ended_frame_pointer_backwards",
            StackEnd::BadAddress => "unwind_ended_bad_address",
            StackEnd::Unmapped => "unwind_ended_unmapped",
            StackEnd::FramePointerChainEnded => "unwind_ended_frame_pointer_chain",
            StackEnd::NoFramePointer => "unwind_ended_no_frame_pointer",
            StackEnd::JitWithoutFramePointer => "unwind_ended_jit_without_frame_pointer",
        }
    }

    /// Its place in [`StackEnd::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for StackEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}
