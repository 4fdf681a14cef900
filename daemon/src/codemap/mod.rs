//! JIT code maps: which generated code is where, and when.
//!
//! Three sources describe a process's generated code: perf maps (`/tmp/perf-PID.map`), jitdump
//! files (found through their executable mapping), and the VM itself (a stream of events on
//! the daemon's socket, or a code map file). Each becomes a sequence of timestamped changes to
//! one [`timeline::Timeline`] per process, against which every sample in generated code is
//! attributed *as the map was when the sample was taken*.
//!
//! - [`code`]: what a piece of code is (name, kind, pc map, source lines), interned.
//! - [`ranges`]: where inside a code a sample fell, labelled as reports print it.
//! - [`live`]: the map at one instant.
//! - [`timeline`]: changes and samples merged in time order.
//! - [`vm`]: events published by a VM, checked and turned into changes.
//! - [`sources`]: perf maps, jitdump and code map files read as they grow.
//! - [`reading`]: one read of a process's files, apart from everything else.
//! - [`reader`]: reads on their own threads, one per user, so that none stalls the manager.
//! - [`outside`]: entries outside the executable ranges a read checks them against
//!   ([`crate::vocab::Executable`]), held for the reads that follow.
//! - [`budget`]: how many bytes of those files each user's processes may have read.
//! - [`refusals`]: what was refused, counted by reason and summarised in the log.
//! - [`registry`]: every process's timeline and sources, driven by the session manager.

pub mod budget;
pub mod change_queue;
pub mod code;
pub mod live;
pub mod outside;
mod process_code;
pub mod ranges;
pub mod reader;
pub mod reading;
pub mod refusals;
pub mod registry;
pub mod sample;
pub mod sources;
pub mod timeline;
pub mod vm;
