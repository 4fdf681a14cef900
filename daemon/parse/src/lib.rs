//! The pure parsers of vmscope: functions over bytes, with no I/O and no global state.
//!
//! The daemon reads files at its edges and hands the bytes here; these modules turn them into
//! values, skipping and counting what is malformed rather than failing a whole file, and never
//! panicking on hostile input. Each has unit tests over real and broken inputs and a fuzz target
//! (`daemon/fuzz`, run with `cargo xtask fuzz`).
//!
//! - [`maps`]: `/proc/PID/maps`, the mappings of a process.
//! - [`stat`]: `/proc/PID/stat`, `/proc/PID/status`, `/proc/stat`.
//! - [`kallsyms`]: `/proc/kallsyms`, the kernel's symbols.
//! - [`elf`]: symbols, load segments, build-id and debuglink of an ELF binary.
//! - [`demangle`]: Rust and C++ symbol names.
#![deny(missing_docs)]

pub mod demangle;
pub mod elf;
pub mod kallsyms;
pub mod maps;
pub mod stat;
