//! Where a sample's instruction pointer was, normalised while the process lived.
//!
//! Normalise early, symbolise late: the session manager turns each `(pid, ip)` into a
//! [`Location`] as the sample arrives, while `/proc/PID/maps` still describes the process, and
//! aggregates counts per location. Names are only looked up when a profile is built, once per
//! distinct location, by [`super::Symbolizer`]. A location holds no reference to the process, so
//! a process that exited stays fully symbolisable.

use super::ModuleId;
use crate::codemap::code::CodeId;

/// A normalised code address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Location {
    /// Code in a file-backed executable mapping.
    File {
        /// The binary.
        module: ModuleId,
        /// Offset of the instruction in the file (mapping offset + ip - mapping start): the
        /// same for every process that maps the binary, whatever its load address.
        offset: u64,
        /// Whether the binary is the process's main executable (the "VM executable").
        main_executable: bool,
    },
    /// Generated code a code map named, as the map was when the sample was taken.
    Jit {
        /// The code (a method, a PIC, a trampoline...), the same wherever it was moved.
        code: CodeId,
        /// Offset of the sample from the code's start.
        offset: u64,
    },
    /// Anonymous executable memory no code map explains: code generated at run time, by a JIT.
    Anonymous {
        /// The process that owns the memory.
        pid: u32,
        /// Start of the mapping.
        start: u64,
        /// End of the mapping.
        end: u64,
    },
    /// The kernel's vDSO, which every process maps from the same image.
    Vdso {
        /// Offset in the vDSO image.
        offset: u64,
    },
    /// Kernel code.
    Kernel {
        /// The kernel instruction pointer.
        ip: u64,
    },
    /// An address no mapping explains.
    Unmapped(UnmappedReason),
}

/// Why a sample could not be placed in any mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnmappedReason {
    /// The process exited (or could not be read) before the daemon read its mappings.
    ProcessGone,
    /// The address is outside every executable mapping, even after re-reading them.
    NoMapping,
    /// A pseudo mapping such as `[vsyscall]` or `[uprobes]`.
    Pseudo,
}

impl UnmappedReason {
    /// A reason a person can read in a report.
    pub fn describe(self) -> &'static str {
        match self {
            UnmappedReason::ProcessGone => "the process exited before its mappings could be read",
            UnmappedReason::NoMapping => "address outside every executable mapping",
            UnmappedReason::Pseudo => "special kernel-provided mapping ([vsyscall], [uprobes])",
        }
    }
}
