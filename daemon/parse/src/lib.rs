//! The pure parsers of vmscope: functions over bytes, with no I/O and no global state.
//!
//! The daemon reads files at its edges and hands the bytes here; these modules turn them into
//! values, skipping and counting what is malformed rather than failing a whole file, and never
//! panicking on hostile input. Each has unit tests over real and broken inputs and a fuzz target
//! (`daemon/fuzz`, run with `cargo xtask fuzz`).
//!
//! - [`maps`]: `/proc/PID/maps`, the mappings of a process.
//! - [`stat`]: `/proc/PID/stat`, `/proc/PID/status`, `/proc/stat`.
//! - [`cgroup`]: `/proc/PID/cgroup`, the container and the systemd service a process runs in.
//! - [`environ`]: `/proc/PID/environ`, the service name a process declares.
//! - [`kallsyms`]: `/proc/kallsyms`, the kernel's symbols.
//! - [`elf`]: symbols, load segments, build-id and debuglink of an ELF binary.
//! - [`dwarf`]: source lines and inlined functions of an ELF binary's DWARF.
//! - [`demangle`]: Rust and C++ symbol names.
//! - [`perf_map`]: `/tmp/perf-PID.map`, the names a JIT gives its code, read as the file grows.
//! - [`jitdump`]: Linux perf's `jit-PID.dump`, code loads and moves with source lines and unwind
//!   tables, read as the file grows.
//! - [`codemap_file`]: vmscope's own code map files, `vmscope-PID.codemap`.
//! - [`class_histogram`]: HotSpot's class histogram (`jcmd PID GC.class_histogram`), instances
//!   and bytes per class of the Java heap.
//! - [`hsperfdata`]: HotSpot's performance data file (`/tmp/hsperfdata_<user>/<pid>`), the GC,
//!   heap and JIT counters `jstat` reads.
//! - [`hotspot`]: HotSpot's vmStructs tables, read from a live JVM, and the code heaps and code
//!   blobs they describe: what the Java unwinder follows.
//! - [`perf_record`]: the kernel's side-band perf records (mappings, names, forks, exits),
//!   which outlive the processes they describe.
//! - [`h2_authority`]: the HTTP/2 bytes a gRPC client sends, with the `:authority` values h2
//!   refuses (C-core's socket path) replaced by ones it accepts.
#![deny(missing_docs)]

pub mod cgroup;
pub mod class_histogram;
pub mod codemap_file;
pub mod demangle;
pub mod dwarf;
pub mod elf;
pub mod environ;
pub mod h2_authority;
pub mod hotspot;
pub mod hsperfdata;
pub mod jitdump;
pub mod jvm_options;
pub mod kallsyms;
pub mod maps;
#[cfg(test)]
mod mutations;
pub mod perf_map;
pub mod perf_record;
pub mod stat;
