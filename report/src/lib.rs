//! The vmscope report model, shared by the daemon and the command line.
//!
//! A [`vmscope_model::Profile`] is what the daemon measured; this crate says what it means,
//! once, for every client: the daemon encodes pprof with it for `GetProfile`, the CLI renders
//! its text, JSON, folded stacks and flame graphs from it.
//!
//! - [`model`]: the flat VMProfiler report ([`Report::from_profile`]): sections, rows sorted and
//!   folded into `...others...`, percentages, code ranges and inlined methods, warnings.
//! - [`sort_keys`]: rows split by process, command or module (`perf report --sort`).
//! - [`stats`]: the statistics after the code (VMProfiler's "Events"): what the kernel
//!   counted for the targets, with rates.
//! - [`runtimes`]: language runtimes that live in a shared library and count as the VM.
//! - [`module_pattern`]: shell-style patterns of module file names (`--vm-module`, the
//!   runtimes' libraries); `vm_modules` says which modules of other code count as the VM's.
//! - [`stack_view`]: which frames of each stack the stack outputs show (the language view, or
//!   every frame) and recursion collapsed, computed once for all of them.
//! - [`tree`]: call trees over the profile's stacks (top-down, callees and callers of a
//!   function), with inclusive and self samples, after Pharo's MessageTally.
//! - [`off_cpu`]: the report of time off the CPU (`--mode off-cpu`, `wall`): the same sections
//!   in nanoseconds, why threads waited, what was left out, each thread's time.
//! - [`json`]: the JSON report, the model serialised with serde (its types derive
//!   `Serialize`), and the profile's stack table after it.
#![deny(missing_docs)]

pub mod diff;
pub mod fit;
pub mod folded;
mod functions;
pub mod json;
pub mod model;
pub mod module_pattern;
pub mod off_cpu;
pub mod otlp;
pub mod pprof;
mod processes;
pub use vmscope_model::rank;
pub mod runtimes;
pub mod sort_keys;
pub mod stack_view;
pub mod stats;
pub mod tree;
mod vm_modules;

pub use processes::ProcessTotal;

pub use module_pattern::module_matches;

pub use vmscope_model::{CodeKind, Section};

pub use model::{
    InlinedRow, IssueRow, OTHERS_NAME, ProcessShare, RangeRow, Report, ReportOptions, ReportRow,
    ReportTarget, SectionReport, VmModule, rfc3339_seconds, round2, stack_end_reason,
};

/// Hand-built profiles whose numbers are known, shared by this crate's tests and (with the
/// `fixtures` feature) by the golden tests of the renderers.
#[cfg(any(test, feature = "fixtures"))]
#[doc(hidden)]
pub mod fixtures;

/// A hand-built profile with call stacks, shared by this crate's tests of the stack formats and
/// (with the `fixtures` feature) by the end-to-end tests of pprof and flame graphs.
#[cfg(any(test, feature = "fixtures"))]
#[doc(hidden)]
pub mod stack_fixture;
