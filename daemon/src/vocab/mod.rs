//! The daemon's shared vocabulary: the types its folders hand one another (where a sample was,
//! why its stack ended, which code map files a process maps, which of its ranges are
//! executable), one concept per file. The kind of a piece of generated code is the profile
//! model's [`vmscope_model::CodeKind`], as reports show it.
//!
//! This is the layer under `process/`, `codemap/`, `symbolize/` and `unwind/`: it imports
//! nothing of the daemon but [`crate::sys`], so that each of them can use it without importing
//! the others. What needs a higher layer (naming a location, unwinding to a stack end) stays
//! in that layer. `cargo xtask module-graph` shows the layers and fails on an import circle
//! across top-level modules (see `docs/architecture.md`).

mod executable;
mod ids;
mod location;
mod mapped_file;
mod stack_end;
mod task;

pub use executable::{ExecRanges, Executable};
pub use ids::{CodeId, ModuleId};
pub use location::{CodeMapKinds, Location, RefusedEntry, Unexplained, UnmappedReason};
pub use mapped_file::{MappedCodeMapFile, MappedFileKind};
pub use stack_end::StackEnd;
pub use task::Task;
