//! Statistics of the targets beside their samples: what VMProfiler's report shows after the
//! code (Memory, GCs, Compiled Code Compactions, Events), so that a reader can tell whether the
//! time went to the mutator, the collector or the kernel.
//!
//! - [`kernel`]: what the kernel counts for every process, whatever its runtime: context
//!   switches (voluntary and not), CPU migrations, page faults, and hardware counters where
//!   the machine has a PMU.
//! - [`hotspot`]: what HotSpot keeps of itself in its performance data file (hsperfdata),
//!   read with no JVM flags at the start and the stop.
//! - [`vm`]: what a VM publishes of itself beside its code map (settings, counters, gauges,
//!   GCs and other intervals), over each session's window.
//! - [`hotspot_gc`]: HotSpot's collections through time, stitched from reads of that file
//!   every few milliseconds, and [`jvm_gcs`], the thread that reads it for off-CPU sessions:
//!   how much of a mutator's time off the CPU it spent waiting for the collector.
//! - [`intervals`]: the VM's intervals through time, to tell which were under way when a
//!   sample was taken.

pub mod counters;
pub mod domain_events;
pub mod hotspot;
pub mod hotspot_gc;
pub mod intervals;
pub mod jvm_gcs;
pub mod kernel;
pub mod vm;
