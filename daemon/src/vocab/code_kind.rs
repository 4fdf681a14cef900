//! What kind of generated code a piece is ([`CodeKind`]): what its code map said of it, or
//! what its name tells (a perf map's stubs).

/// What kind of generated code a piece is. The API's `CodeKind` without "unspecified": a
/// publication that names no kind (or one this daemon does not know) describes
/// [`CodeKind::Unknown`] code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
