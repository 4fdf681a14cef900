//! The `vmscope` command line, as a library: the daemon client, the commands, and the
//! VMProfiler-style report renderer (usable on its own, e.g. by benchmarks and other tools).
#![deny(missing_docs)]

pub mod check;
pub mod client;
pub mod diff;
pub mod error_text;
pub mod fit;
pub mod heap;
pub mod heap_check;
pub mod heap_query;
pub mod output;
pub mod record;
pub mod refusal;
pub mod report;
pub mod sessions;
pub mod signals;
pub mod spawn;
