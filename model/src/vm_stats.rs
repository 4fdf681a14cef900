//! What a VM published of its own statistics over a session's window: settings, counters,
//! gauges, and its intervals (collections, safepoints) by kind.

use serde::{Deserialize, Serialize};

/// One VM's statistics over the session's window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmStatistics {
    /// Its process.
    pub pid: u32,
    /// Its name and version, from its Hello (`jitvm 0.1`).
    pub vm: String,
    /// Its settings, latest values, in the order first published.
    pub configuration: Vec<Configuration>,
    /// Its counters: how much they grew.
    pub counters: Vec<CounterDelta>,
    /// Its levels: how much they moved, and their range.
    pub gauges: Vec<GaugeDelta>,
    /// Its intervals, by kind.
    pub intervals: Vec<IntervalTotals>,
    /// The window's length, that percentages and rates are of: the session's time sampled.
    pub window_ns: u64,
    /// The process's samples in the session: what [`IntervalTotals::sampled`] is a share of.
    pub samples: u64,
    /// What the VM counted exactly in its own memory over the window, one entry per counter
    /// region it published.
    pub exact_counts: Vec<ExactCounts>,
    /// The events of its domain it published over the window, by type, most first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domain_events: Vec<crate::DomainEventType>,
}

/// A counter region's counts over a session (`codemap.proto`'s `CounterRegion`): each
/// counter's value at the end minus its value at the start, read from the VM's memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExactCounts {
    /// What is counted: `activations`.
    pub kind: String,
    /// Per counter that moved, in the region's order.
    pub counts: Vec<NamedCount>,
    /// Where the start values come from: `read` (the VM's memory at the session's start) or
    /// `zero` (a region published during the session).
    pub start_source: String,
    /// Where the end values come from: `read` (the VM's memory at the stop, or when the
    /// profile was asked for) or `published` (the VM's own last values, published as it
    /// exited).
    pub end_source: String,
    /// Empty when the counts are exact; else why not, and the counts are up to the last
    /// values known.
    pub note: String,
}

/// One counter's count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedCount {
    /// The counter's name: a method's, as its code map names it.
    pub name: String,
    /// How much it grew.
    pub count: u64,
}

/// A setting (`eden size`, `code size`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Configuration {
    /// Its name, as the report prints it.
    pub name: String,
    /// Its value; `None` when the VM published none.
    pub value: Option<ConfigValue>,
    /// Its unit (may be empty).
    pub unit: String,
}

/// A setting's value, as the VM published it: a number or a text (serialised as a JSON number
/// or string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ConfigValue {
    /// A number (`eden size: 3,801,936`).
    Number(i64),
    /// Anything else.
    Text(String),
}

/// A monotonic counter over the window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterDelta {
    /// Its name.
    pub name: String,
    /// Its unit (may be empty).
    pub unit: String,
    /// How much it grew.
    pub delta: u64,
    /// Its last value.
    pub last: u64,
}

/// A level over the window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GaugeDelta {
    /// Its name.
    pub name: String,
    /// Its unit (may be empty).
    pub unit: String,
    /// How much it moved, from its first reading to its last.
    pub delta: i64,
    /// Its last value.
    pub last: i64,
    /// Its lowest value over the window, its level at the start included.
    pub low: i64,
    /// Its highest value over the window: a heap's high-water mark.
    pub high: i64,
}

impl GaugeDelta {
    /// Whether the gauge moved during the window: one that stayed at one level has no change
    /// to report ("young +0 bytes"), only its level.
    pub fn moved(&self) -> bool {
        self.delta != 0 || self.low != self.high
    }
}

/// The intervals of one kind over the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntervalTotals {
    /// The kind.
    pub kind: IntervalKind,
    /// How many.
    pub count: u64,
    /// Their time inside the window.
    pub total_ns: u64,
    /// The longest (up to the window's end for one still open).
    pub longest_ns: u64,
    /// The process's samples taken while one was under way.
    pub sampled: u64,
}

/// What an interval is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalKind {
    /// A young-generation collection (Cog's scavenge, HotSpot's young GC).
    Scavenge,
    /// A collection of the whole heap.
    FullGc,
    /// A compaction of the code zone.
    CodeCompaction,
    /// Threads stopped for the VM's own work.
    Safepoint,
    /// A kind the VM named.
    Named(String),
}

impl IntervalKind {
    /// The protocol's own kinds, in the order reports list them.
    pub const PROTOCOL: [IntervalKind; 4] = [
        IntervalKind::Scavenge,
        IntervalKind::FullGc,
        IntervalKind::CodeCompaction,
        IntervalKind::Safepoint,
    ];

    /// How reports, JSON and pprof labels name it: `scavenge`, `full_gc`, `code_compaction`,
    /// `safepoint`, or the name the VM gave it.
    pub fn key(&self) -> &str {
        match self {
            IntervalKind::Scavenge => "scavenge",
            IntervalKind::FullGc => "full_gc",
            IntervalKind::CodeCompaction => "code_compaction",
            IntervalKind::Safepoint => "safepoint",
            IntervalKind::Named(name) => name,
        }
    }

    /// Where reports list it: scavenges, full GCs, code compactions, safepoints, then the VM's
    /// own kinds.
    pub fn rank(&self) -> u8 {
        match self {
            IntervalKind::Scavenge => 0,
            IntervalKind::FullGc => 1,
            IntervalKind::CodeCompaction => 2,
            IntervalKind::Safepoint => 3,
            IntervalKind::Named(_) => 4,
        }
    }

    /// The name a VM gave the kind; empty for the protocol's own kinds.
    pub fn name(&self) -> &str {
        match self {
            IntervalKind::Named(name) => name,
            _ => "",
        }
    }
}
