//! Rows: samples per (section, module, name), with where inside the code they fell.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::{CodeKind, Section, rank::most_first};

/// One row: the self and inclusive samples of one piece of code (a function, a method, a
/// stub) in one section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileRow {
    /// Its section.
    pub section: Section,
    /// Symbol (demangled), or `module+0xOFFSET` / `[unknown]` when no symbol covers it.
    pub name: String,
    /// File name of the module (`libc.so.6`, `[kernel.kallsyms]`, `[vdso]`, `[anon]`).
    pub module: String,
    /// Samples whose leaf is this code (self time).
    pub samples: u64,
    /// Whether the name is a real symbol.
    pub symbolized: bool,
    /// Generated code: what kind of code the code map says it is.
    pub kind: Option<CodeKind>,
    /// Where inside this code the samples fell, in code order: bytecode ranges or source
    /// ranges. Empty when the code map has neither.
    pub ranges: Vec<CodeRange>,
    /// Optimised code: samples per method inlined into it, most first.
    pub inlined: Vec<InlinedMethod>,
    /// The code map that named it: `vm` (published), `jitdump` or `perf map`.
    pub code_map: String,
    /// Optimised code (its pc map names inlined methods): a method's optimised and baseline
    /// versions are separate rows.
    pub optimised: bool,
    /// Its samples by process, most first.
    pub processes: Vec<ProcessSamples>,
    /// Samples whose stack holds this code anywhere (perf's "children"), once per sample.
    pub inclusive_samples: u64,
    /// Set only in rows that are one source line (`--sort srcline`): `hot.c:12`.
    pub srcline: String,
    /// Native code with DWARF line tables: its samples by source position of their leaf and
    /// by process, most first. Samples without a known line are not listed.
    pub source_lines: Vec<SourceLineSamples>,
    /// Of `samples`, those named from a perf map read after them.
    pub later_snapshot_samples: u64,
    /// Its samples by thread, most first (`--sort tid`).
    pub threads: Vec<ThreadSamples>,
    /// Its labelled samples by label set and process, most first (`--sort label:KEY`); the
    /// rest of `samples` had no label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<LabelSetSamples>,
}

/// Samples of a row taken with one label set, in one process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelSetSamples {
    /// Its process.
    pub pid: u32,
    /// The set, as indices into [`Profile::labels`](crate::Profile::labels) in ascending
    /// order; never empty.
    pub labels: Vec<u32>,
    /// Samples.
    pub samples: u64,
}

impl LabelSetSamples {
    /// The one order of a row's label sets: most samples first, then by process and set.
    pub fn order(a: &LabelSetSamples, b: &LabelSetSamples) -> Ordering {
        most_first(a.samples, b.samples).then_with(|| (a.pid, &a.labels).cmp(&(b.pid, &b.labels)))
    }
}

/// Samples of a row in one thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadSamples {
    /// Its process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// Its name (`comm`), empty when unknown.
    pub name: String,
    /// Samples.
    pub samples: u64,
}

impl ThreadSamples {
    /// The one order of a row's threads: most samples first, then by process and thread.
    pub fn order(a: &ThreadSamples, b: &ThreadSamples) -> Ordering {
        most_first(a.samples, b.samples).then_with(|| (a.pid, a.tid).cmp(&(b.pid, b.tid)))
    }
}

impl ProfileRow {
    /// The one order of rows, wherever they are listed (the daemon's profile, a report's
    /// section, rows regrouped by `--sort`): most samples first, then most inclusive samples
    /// (so that code with no sample of its own comes by how much it called), then section,
    /// name and module, so that the order never depends on input or hash order.
    pub fn order(a: &ProfileRow, b: &ProfileRow) -> Ordering {
        most_first(a.samples, b.samples)
            .then_with(|| most_first(a.inclusive_samples, b.inclusive_samples))
            .then_with(|| a.section.cmp(&b.section))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.module.cmp(&b.module))
    }
}

/// Samples of a row at one source line, in one process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceLineSamples {
    /// The source file, as the compiler recorded it.
    pub file: String,
    /// The line.
    pub line: u32,
    /// The process.
    pub pid: u32,
    /// Samples.
    pub samples: u64,
}

/// Samples of a row in one process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSamples {
    /// The process.
    pub pid: u32,
    /// Its command (`comm`).
    pub command: String,
    /// Samples.
    pub samples: u64,
}

impl ProcessSamples {
    /// The one order of a row's processes: most samples first, then lowest pid.
    pub fn order(a: &ProcessSamples, b: &ProcessSamples) -> Ordering {
        most_first(a.samples, b.samples).then_with(|| a.pid.cmp(&b.pid))
    }
}

/// Samples in one range of a method's code.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeRange {
    /// `1->23`, `38->end`, `Inline>>heavy 33->70`, `5->12 Callers.java:20` (HotSpot, with
    /// its line), `app.js:12:5`.
    pub label: String,
    /// Samples.
    pub samples: u64,
}

/// Samples of optimised code in one method inlined into it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InlinedMethod {
    /// The inlined method.
    pub name: String,
    /// Samples.
    pub samples: u64,
}

impl InlinedMethod {
    /// The one order of a row's inlined methods: most samples first, then by name.
    pub fn order(a: &InlinedMethod, b: &InlinedMethod) -> Ordering {
        most_first(a.samples, b.samples).then_with(|| a.name.cmp(&b.name))
    }
}
