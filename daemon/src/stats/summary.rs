//! What a profile shows of a VM's statistics over a session's window, whoever gave them: a VM
//! that publishes its own ([`super::vm::Window::summary`]) or HotSpot's performance data
//! ([`super::hotspot::statistics`]). `profile/api.rs` shows them as the API's `VmStatistics`.

use super::vm::{ConfigValue, IntervalKind};

/// One VM's statistics over a window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmStatistics {
    /// Its process.
    pub pid: u32,
    /// Its name and version.
    pub vm: String,
    /// Its settings.
    pub configuration: Vec<Setting>,
    /// Its counters: how much they grew.
    pub counters: Vec<CounterDelta>,
    /// Its levels: how much they moved, and their range.
    pub gauges: Vec<GaugeDelta>,
    /// Its intervals, by kind.
    pub intervals: Vec<IntervalTotals>,
    /// The window's length.
    pub window_ns: u64,
    /// The session's samples of the process.
    pub samples: u64,
}

/// A setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: ConfigValue,
    /// Its unit (may be empty).
    pub unit: String,
}

/// A counter over the window.
#[derive(Clone, Debug, PartialEq, Eq)]
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GaugeDelta {
    /// Its name.
    pub name: String,
    /// Its unit (may be empty).
    pub unit: String,
    /// How much it moved, from its first reading to its last.
    pub delta: i64,
    /// Its last value.
    pub last: i64,
    /// Its lowest value.
    pub low: i64,
    /// Its highest value.
    pub high: i64,
}

/// The intervals of one kind over the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntervalTotals {
    /// The kind.
    pub kind: IntervalKind,
    /// How many.
    pub count: u64,
    /// Their time inside the window.
    pub total_ns: u64,
    /// The longest.
    pub longest_ns: u64,
    /// The process's samples taken during one.
    pub sampled: u64,
}
