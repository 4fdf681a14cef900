//! jitvm: the demo JIT VM of vmscope.
//!
//! A small Smalltalk-flavoured stack bytecode VM whose JIT compiles methods to x86-64 machine
//! code in an executable code zone, after the Cog VM: send sites with inline caches that
//! relink from monomorphic to closed and open PICs through a send-miss trampoline, trampolines
//! and enilopmarts at the start of the zone, an optimising tier that inlines small callees,
//! and code compaction that moves live code down over freed code. Every load, move and free is
//! published with its CLOCK_MONOTONIC time as `vmscope.v1` code map events, so that vmscope can
//! attribute samples to methods and bytecode ranges as the code map was at each sample's time.
//!
//! Modules by concept:
//! - [`value`], [`heap`], [`gc`]: tagged values, the bump heap and its collector; [`program`], [`bytecode`]: classes,
//!   methods, bytecodes, the builder and verifier; [`interp`]: the reference interpreter.
//! - [`codezone`]: the executable mapping and its entries; [`jit`]: code generation
//!   (templates, PICs, trampolines); [`runtime`]: the VM, send misses and linking, calls into
//!   generated code; [`pic`]: relinking sites to PICs; [`compaction`]; [`tier`]: the
//!   optimising tier.
//! - [`publish`], [`codemap_file`]: publication of the code map; [`statistics`]: the VM's
//!   settings, counters, heap gauges and intervals, published with it; [`codelog`]: replaying and
//!   checking a code log (what tests hold the daemon against); [`benchmarks`], [`driver`]:
//!   the workloads and the loop that runs them.
#![deny(missing_docs)]

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("jitvm generates x86-64 code for Linux");

pub mod benchmarks;
pub mod bytecode;
pub mod codelog;
pub mod codemap_file;
pub mod codezone;
pub mod compaction;
pub mod cpu_time;
pub mod driver;
pub mod error;
pub mod gc;
pub mod heap;
pub mod heap_census;
pub mod heap_demo;
pub mod interp;
pub mod jit;
pub mod labels;
pub mod pic;
pub mod program;
pub mod publish;
pub mod runtime;
pub mod statistics;
pub mod tier;
pub mod value;

#[cfg(test)]
mod vm_tests;
