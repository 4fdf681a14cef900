//! Where a sample's instruction pointer was, normalised while the process lived.
//!
//! Normalise early, symbolise late: the session manager turns each `(pid, ip)` into a
//! [`Location`] as the sample arrives, while `/proc/PID/maps` still describes the process, and
//! aggregates counts per location. Names are only looked up when a profile is built, once per
//! distinct location, by [`crate::symbolize::Symbolizer`]. A location holds no reference to the
//! process, so a process that exited stays fully symbolisable.

use super::{CodeId, ModuleId};

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
        /// Named from a snapshot without timestamps (a perf map) read after the sample, because
        /// nothing known at the sample's time explained it: what perf does at report time,
        /// kept apart from time-correct attributions.
        later_snapshot: bool,
    },
    /// Anonymous executable memory no code map explains: code generated at run time, by a JIT.
    Anonymous {
        /// The process that owns the memory.
        pid: u32,
        /// Start of the mapping.
        start: u64,
        /// End of the mapping.
        end: u64,
        /// Why no code map explains it.
        why: Unexplained,
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
    /// No location: the caller of every stack its session cut because it held its most
    /// distinct stacks (see [`crate::session::StackTable`]).
    StackLimit,
    /// No location: the one frame of a thread still off its CPU when its session stopped,
    /// whose stacks the kernel takes only as it comes back.
    StillOffCpu,
    /// No location: the caller of the kernel frames of a block that began before its session
    /// started, whose user stack (taken as a thread leaves its CPU) was never taken.
    OffCpuSinceStart,
}

/// Why generated code is unexplained, as far as the daemon knows when it attributes the sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unexplained {
    /// Not looked up in a code map yet.
    NotLookedUp,
    /// The process had no code map at all (no perf map, jitdump, code map file or publication).
    NoCodeMap,
    /// The process's code maps (these kinds) have no entry for the address.
    NoEntry(CodeMapKinds),
    /// An entry for the address was refused.
    Refused(RefusedEntry),
    /// The process had no code map during the session; one (of these kinds) appeared after it.
    MapAfterSession(CodeMapKinds),
}

/// A set of code map kinds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeMapKinds(pub u8);

impl CodeMapKinds {
    /// `/tmp/perf-PID.map`.
    pub const PERF_MAP: CodeMapKinds = CodeMapKinds(1);
    /// A jitdump file.
    pub const JITDUMP: CodeMapKinds = CodeMapKinds(2);
    /// A vmscope code map file.
    pub const CODE_MAP_FILE: CodeMapKinds = CodeMapKinds(4);
    /// A VM publishing over gRPC.
    pub const PUBLICATION: CodeMapKinds = CodeMapKinds(8);

    /// Both sets.
    pub fn with(self, other: CodeMapKinds) -> CodeMapKinds {
        CodeMapKinds(self.0 | other.0)
    }

    /// Whether no kind is in the set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The kinds, as a report names them ("perf map, jitdump").
    pub fn describe(self) -> String {
        let names = [
            (Self::PERF_MAP, "perf map"),
            (Self::JITDUMP, "jitdump"),
            (Self::CODE_MAP_FILE, "code map file"),
            (Self::PUBLICATION, "VM publication"),
        ];
        let named: Vec<&str> = names
            .iter()
            .filter(|(kind, _)| self.0 & kind.0 != 0)
            .map(|&(_, name)| name)
            .collect();
        named.join(", ")
    }
}

/// Why a code map entry was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefusedEntry {
    /// Its range is not inside an executable mapping of the process.
    NotExecutable,
    /// The code store was full.
    StoreFull,
    /// The map could not take it (outside the VM's code zone, wrapping, too many entries).
    Unapplicable,
}

impl Unexplained {
    /// A reason a person can read in a report.
    pub fn describe(self) -> String {
        match self {
            Unexplained::NotLookedUp | Unexplained::NoCodeMap => {
                "generated code, and no code map (perf map, jitdump or VM publication) for the \
                 process"
                    .into()
            }
            Unexplained::NoEntry(kinds) => format!(
                "generated code the process's code map ({}) has no entry for",
                kinds.describe()
            ),
            Unexplained::MapAfterSession(kinds) => format!(
                "generated code; the process's code map ({}) appeared only after the session",
                kinds.describe()
            ),
            Unexplained::Refused(RefusedEntry::NotExecutable) => {
                "generated code whose code map entry was refused: outside every executable \
                 mapping of the process"
                    .into()
            }
            Unexplained::Refused(RefusedEntry::StoreFull) => {
                "generated code whose code map entry was refused: the daemon's code store was \
                 full"
                    .into()
            }
            Unexplained::Refused(RefusedEntry::Unapplicable) => {
                "generated code whose code map entry was refused: it could not be applied \
                 (outside the VM's code zone, wrapping, or too many entries)"
                    .into()
            }
        }
    }
}

/// Why a sample could not be placed in any mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnmappedReason {
    /// The process exited (or could not be read) before the daemon read its mappings.
    ProcessGone,
    /// The address is outside every executable mapping, even after re-reading them.
    NoMapping,
    /// The process's mappings did not answer in time: it holds its own memory lock (a fault on
    /// a file whose reads hang), and was left alone.
    Unreadable,
    /// A pseudo mapping such as `[vsyscall]` or `[uprobes]`.
    Pseudo,
}

impl UnmappedReason {
    /// A reason a person can read in a report.
    pub fn describe(self) -> &'static str {
        match self {
            UnmappedReason::ProcessGone => "the process exited before its mappings could be read",
            UnmappedReason::NoMapping => "address outside every executable mapping",
            UnmappedReason::Unreadable => {
                "the process's mappings did not answer in time (it holds its own memory lock); \
                 not read"
            }
            UnmappedReason::Pseudo => "special kernel-provided mapping ([vsyscall], [uprobes])",
        }
    }
}
