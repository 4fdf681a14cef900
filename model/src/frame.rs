//! A distinct frame of a profile: where samples or calls were, named.

use serde::{Deserialize, Serialize};

/// The three sections of a VMProfiler report, in report order.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    /// Code the VM generated at run time (JIT code).
    Generated,
    /// The VM executable itself, or each process's main executable in a system-wide session.
    Vanilla,
    /// Everything else: shared libraries, the kernel, code nobody could name. Also where a
    /// section this build does not know (from a newer daemon) goes, rather than vanish.
    #[default]
    Other,
}

impl Section {
    /// Every section, in report order.
    pub const ALL: [Section; 3] = [Section::Generated, Section::Vanilla, Section::Other];

    /// Its place in report order: an index into [`Section::ALL`].
    pub fn index(self) -> usize {
        match self {
            Self::Generated => 0,
            Self::Vanilla => 1,
            Self::Other => 2,
        }
    }

    /// How JSON and pprof labels spell it: `generated`, `vanilla` or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Generated => "generated",
            Self::Vanilla => "vanilla",
            Self::Other => "other",
        }
    }
}

/// What kind of generated code a frame is, after Cog's code zone constituents: what its code
/// map said of it, or what its name tells (a perf map's stubs). Native code has none.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum CodeKind {
    /// A compiled method (optimised if its pc map carries inlined frames).
    Method,
    /// A compiled block (closure).
    Block,
    /// Code called from generated code into the VM's runtime.
    Trampoline,
    /// Code called from the VM's runtime into generated code (trampoline backwards).
    Enilopmart,
    /// A polymorphic inline cache with a jump table of cases.
    ClosedPic,
    /// A megamorphic inline cache (a hashed lookup).
    OpenPic,
    /// Other runtime code.
    Stub,
    /// Code known by name only (perf maps, jitdump).
    #[default]
    Unknown,
}

impl CodeKind {
    /// How JSON spells it: `method`, `block`, `trampoline`, `enilopmart`, `closed_pic`,
    /// `open_pic`, `stub` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Method => "method",
            Self::Block => "block",
            Self::Trampoline => "trampoline",
            Self::Enilopmart => "enilopmart",
            Self::ClosedPic => "closed_pic",
            Self::OpenPic => "open_pic",
            Self::Stub => "stub",
            Self::Unknown => "unknown",
        }
    }

    /// How the text report tags a row of this kind (`area [closed PIC]`); `None` for methods
    /// and code known by name only, which are the rule and need no tag.
    pub fn text_tag(self) -> Option<&'static str> {
        match self {
            Self::Method | Self::Unknown => None,
            Self::Block => Some("block"),
            Self::Trampoline => Some("trampoline"),
            Self::Enilopmart => Some("enilopmart"),
            Self::ClosedPic => Some("closed PIC"),
            Self::OpenPic => Some("open PIC"),
            Self::Stub => Some("stub"),
        }
    }
}

/// One distinct frame: stacks name frames by their index in [`crate::Profile::frames`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Its section.
    pub section: Section,
    /// As [`crate::ProfileRow::name`]: the symbol, the code map's name, or a placeholder.
    pub name: String,
    /// As [`crate::ProfileRow::module`].
    pub module: String,
    /// Whether the name is a real symbol.
    pub symbolized: bool,
    /// Generated code: what kind of code the code map says it is.
    pub kind: Option<CodeKind>,
    /// Generated code with a pc map or source positions: the range this frame's pc is in
    /// (`74->78`, `app.js:12:5`); for a caller, its call site; for a method that inlined the
    /// next frame, the 1-based bytecode pc of that send (`@12`). Empty when unknown.
    pub range: String,
    /// A method inlined into the compiled code of the frame under it in the stack (its caller).
    pub inlined: bool,
    /// As [`crate::ProfileRow::code_map`].
    pub code_map: String,
    /// Part of optimised code: the compiled method's frame and those of the methods inlined
    /// into it.
    pub optimised: bool,
    /// The module's GNU build id in hex, when it has one.
    pub build_id: String,
    /// Kernel code.
    pub kernel: bool,
    /// Native code with DWARF line tables: the source file as the compiler recorded it, and
    /// the line (of the sample for the leaf, of the call for a caller, of the inlining call
    /// for a function others were inlined into); a HotSpot Java method with a line number
    /// table, its class's source file and the line of the frame's bytecode index. Empty and 0
    /// when unknown.
    pub file: String,
    /// See [`Frame::file`].
    pub line: u32,
    /// Generated code named from a perf map read after the sample, not from the map of the
    /// sample's time ([`crate::Profile::jit_samples_from_later_snapshot`]).
    pub later_snapshot: bool,
}
