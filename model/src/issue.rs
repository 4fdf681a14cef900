//! Samples that could not be symbolised, by module and typed reason.

use serde::{Deserialize, Serialize};

/// Samples of one module that could not be symbolised for one reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SymbolizationIssue {
    /// The module concerned, or `[unknown]`.
    pub module: String,
    /// What went wrong, for a person.
    pub reason: String,
    /// Samples affected.
    pub samples: u64,
    /// What went wrong, for a program; `None` from a daemon that does not say.
    pub kind: Option<IssueKind>,
}

/// What kind of symbolisation issue a [`SymbolizationIssue`] is: what clients group by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IssueKind {
    /// The binary could not be read or parsed.
    BinaryUnreadable,
    /// The address lies outside the binary's loaded segments.
    OutsideSegments,
    /// The binary has no symbol table.
    Stripped,
    /// No symbol covers the address.
    NoSymbol,
    /// The binary was closed before the profile was built.
    BinaryClosed,
    /// `kernel.kptr_restrict` hides kernel addresses.
    KernelAddressesHidden,
    /// The kernel address is not in `/proc/kallsyms`.
    NotInKallsyms,
    /// Kernel functions are not shown to this user.
    KernelNotShown,
    /// Generated code that no code map explained.
    JitUnexplained,
    /// The process was gone before its mappings were read.
    ProcessGone,
    /// No mapping covers the address.
    Unmapped,
    /// The process's mappings could not be read.
    MappingsUnreadable,
    /// A pseudo mapping (`[vsyscall]`, `[stack]`...).
    PseudoMapping,
    /// A bug of the daemon's: please report it.
    DaemonBug,
}

impl IssueKind {
    /// How scripts read it: the variant in snake case (`stripped`, `no_symbol`,
    /// `jit_unexplained`...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BinaryUnreadable => "binary_unreadable",
            Self::OutsideSegments => "outside_segments",
            Self::Stripped => "stripped",
            Self::NoSymbol => "no_symbol",
            Self::BinaryClosed => "binary_closed",
            Self::KernelAddressesHidden => "kernel_addresses_hidden",
            Self::NotInKallsyms => "not_in_kallsyms",
            Self::KernelNotShown => "kernel_not_shown",
            Self::JitUnexplained => "jit_unexplained",
            Self::ProcessGone => "process_gone",
            Self::Unmapped => "unmapped",
            Self::MappingsUnreadable => "mappings_unreadable",
            Self::PseudoMapping => "pseudo_mapping",
            Self::DaemonBug => "daemon_bug",
        }
    }
}
