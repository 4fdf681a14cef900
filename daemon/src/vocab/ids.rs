//! The identities a [`super::Location`] holds: of a binary, and of a piece of generated code.
//! Each is handed out by the registry of what it names, which may forget it, never by anyone
//! else: a location kept after its binary or code was let go names nothing else.

/// Index of a binary registered in [`crate::symbolize::Modules`]. Never reused, even after the
/// binary is closed: 64 bits do not run out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleId(pub u64);

/// Identity of a [`crate::codemap::code::Code`] interned in the code store
/// ([`crate::codemap::code::CodeStore`]); never reused, even once the code is reclaimed: the
/// store's slot in its low 32 bits, and how many codes that slot held before in its high 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeId(pub u64);
