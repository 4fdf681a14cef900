//! HotSpot JVMs: asking a running JVM for its perf map, with no JVM flags.
//!
//! HotSpot names its JIT code in `/tmp/perf-<nspid>.map` only when asked (`jcmd PID
//! Compiler.perfmap`, JDK 17+) or at exit (`-XX:+DumpPerfMapAtExit`). [`attach`] asks the way
//! jcmd does, through the attach mechanism, and refuses whenever asking could harm the process
//! (see [`attach::AttachError::is_refusal`]); [`options`] reads the JVM flags that decide it.
//!
//! [`code_cache`] follows a JVM's code cache through its vmStructs, for the unwinder's Java
//! frames; [`java_codes`] keeps the codes their compiled frames are named by.
//!
//! The caller decides whether a process is a HotSpot JVM (it maps `libjvm.so`), when to ask
//! (a snapshot holds the code compiled so far), and reads the perf map itself, as the target's
//! user's file, with the code-map machinery. [`perf_map_file`] tells whether a perf map was
//! there before the daemon asked, and removes one that was not when the caller is done.
//!
//! ```no_run
//! use std::time::Duration;
//! use vmscoped::jvm::{JvmTarget, request_perf_map};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let target = JvmTarget::read(4242)?;
//! // Blocks for up to the timeout: a thread of its own in the daemon.
//! let snapshot = request_perf_map(&target, Duration::from_secs(5))?;
//! println!("/tmp/perf-{}.map written in {:?}", target.nspid, snapshot.elapsed);
//! # Ok(())
//! # }
//! ```

pub mod attach;
pub mod code_cache;
pub mod java_codes;
pub mod options;
pub mod perf_map_file;

pub use attach::{AttachError, JvmTarget, Snapshot, request_perf_map};
pub use options::JvmOptions;
pub use perf_map_file::PerfMapFile;
