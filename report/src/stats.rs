//! The statistics after the code sections, VMProfiler's "Memory", "GCs", "Compiled Code
//! Compactions" and "Events": what each VM published of itself ([`VmStatsReport`]: its
//! settings, gauges, intervals and counters) and what the kernel counted for the targets
//! ([`KernelEventsReport`]), each count with its rate over the session.
//!
//! Where the VM's intervals have times (it publishes them), each kind also says what the
//! samples saw of it ([`Sampled`]): the share of the process's samples taken during it, beside
//! the VM's own share of the elapsed time, the functions those samples were in, and whether
//! the two shares disagree. The VM's clock and the sampler's are independent witnesses: a
//! collector that blocks (its time is not CPU time), a VM that is not on a CPU all the time,
//! or intervals published late, show as a disagreement.

use std::collections::HashMap;

use serde::Serialize;

use vmscope_model::{
    Configuration, GaugeDelta, IntervalKind, KernelCounts, KernelEvents, Profile, VmStatistics,
};

use crate::model::percent;

/// Points of percentage by which the sampled share of a kind may differ from the VM's own
/// before the report flags it: the sampling error of a few hundred samples in a kind, and
/// what the ground-truth tests hold the profiler to.
pub const DISAGREEMENT_POINTS: f64 = 3.0;
/// Functions listed per kind of interval.
pub const TOP_DURING: usize = 5;

/// One VM's statistics over the session, in VMProfiler's terms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmStatsReport {
    /// The VM's process.
    pub pid: u32,
    /// The VM's name ("jitvm 0.1").
    pub vm: String,
    /// The window the percentages and rates are of, in seconds.
    pub seconds: f64,
    /// Its settings, as the header prints them.
    pub configuration: Vec<Configuration>,
    /// Its gauges' changes (VMProfiler's "Memory").
    pub gauges: Vec<GaugeDelta>,
    /// Its intervals per kind: scavenges, full GCs, code compactions, safepoints, then the
    /// kinds it named.
    pub intervals: Vec<IntervalStats>,
    /// Its counters' growth, with rates (VMProfiler's "Events").
    pub counters: Vec<CounterGrowth>,
    /// What it counted exactly in its own memory (counter regions), each region's counts most
    /// first.
    pub exact_counts: Vec<vmscope_model::ExactCounts>,
    /// The events of its domain it published, by type, most first (objects and stacks most
    /// first within each).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub domain_events: Vec<vmscope_model::DomainEventType>,
}

/// Intervals of one kind over the session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalStats {
    /// Stable key for scripts: `scavenge`, `full_gc`, `code_compaction`, `safepoint`, or the
    /// VM's own name of the kind. JSON's `kind`.
    #[serde(rename = "kind")]
    pub key: String,
    /// What it is ("scavenges", or the VM's name).
    #[serde(skip)]
    pub label: String,
    /// The proto's kind. JSON says only whether it is the VM's own (`named`: true for the
    /// VM's kinds, false for those the proto names).
    #[serde(rename = "named", serialize_with = "crate::json::is_named")]
    pub kind: IntervalKind,
    /// Intervals begun in the session.
    pub count: u64,
    /// Their time in the session, in ms.
    pub total_ms: f64,
    /// `total_ms` as a percentage of the session's time.
    #[serde(serialize_with = "crate::json::rounded")]
    pub percent_of_elapsed: f64,
    /// `total_ms` over `count` (0 with none).
    pub average_ms: f64,
    /// The longest, in ms.
    pub longest_ms: f64,
    /// What the samples saw of it; `None` (JSON: null) where samples are not tagged
    /// (HotSpot's counters have no times), or the process has none.
    pub sampled: Option<Sampled>,
}

/// What the samples saw of one kind of interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sampled {
    /// The process's samples taken during the kind.
    pub samples: u64,
    /// Their share of the process's samples, in percent.
    #[serde(serialize_with = "crate::json::rounded")]
    pub percent: f64,
    /// `percent` minus the VM's own share of the elapsed time (`percent_of_elapsed`), when
    /// the two differ by more than [`DISAGREEMENT_POINTS`]. JSON's `disagreement_points`.
    #[serde(
        rename = "disagreement_points",
        serialize_with = "crate::json::rounded_or_null"
    )]
    pub disagreement: Option<f64>,
    /// The functions its samples were in (their leaves), most first, at most [`TOP_DURING`].
    pub top: Vec<FunctionShare>,
}

/// A function's part of the samples taken during a kind of interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionShare {
    /// Its name.
    pub name: String,
    /// Its binary, or the code map of generated code.
    pub module: String,
    /// Samples during the kind in it.
    pub samples: u64,
    /// Their share of the kind's samples, in percent.
    #[serde(serialize_with = "crate::json::rounded")]
    pub percent: f64,
}

/// How a counter grew.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterGrowth {
    /// Its name ("Stack overflows").
    pub name: String,
    /// What one is.
    pub unit: String,
    /// Growth over the session.
    pub count: u64,
    /// `count` per second of the session.
    pub per_second: f64,
    /// Its last value.
    pub last: u64,
}

impl VmStatsReport {
    /// The VMs' statistics of `profile`, by pid.
    pub fn from_profile(profile: &Profile) -> Vec<VmStatsReport> {
        profile
            .vm_statistics
            .iter()
            .map(|stats| {
                let mut report = VmStatsReport::from_proto(stats);
                if stats.samples > 0 {
                    report.add_sampled(profile, stats);
                }
                report
            })
            .collect()
    }

    /// What the samples saw of each kind: its share of the process's samples, and the leaves
    /// of the stacks taken during it.
    fn add_sampled(&mut self, profile: &Profile, stats: &VmStatistics) {
        for (interval, totals) in self.intervals.iter_mut().zip(&stats.intervals) {
            let index = profile
                .vm_interval_kinds
                .iter()
                .position(|k| *k == totals.kind)
                .map(|i| i as u32);
            let mut leaves: HashMap<(&str, &str), u64> = HashMap::new();
            for stack in &profile.stacks {
                if stack.pid != stats.pid || !index.is_some_and(|i| stack.during.contains(&i)) {
                    continue;
                }
                let leaf = profile
                    .stack_frames(stack)
                    .next()
                    .and_then(|f| profile.frames.get(f as usize));
                let key = leaf.map_or(("[unknown]", ""), |f| (&f.name, &f.module));
                *leaves.entry(key).or_insert(0) += stack.samples();
            }
            let mut top: Vec<FunctionShare> = leaves
                .into_iter()
                .map(|((name, module), samples)| FunctionShare {
                    name: name.to_owned(),
                    module: module.to_owned(),
                    samples,
                    percent: percent(samples, totals.sampled),
                })
                .collect();
            crate::rank::rank(
                &mut top,
                |r| r.samples,
                |a, b| a.name.cmp(&b.name).then_with(|| a.module.cmp(&b.module)),
            );
            top.truncate(TOP_DURING);
            let share = percent(totals.sampled, stats.samples);
            let difference = share - interval.percent_of_elapsed;
            interval.sampled = Some(Sampled {
                samples: totals.sampled,
                percent: share,
                disagreement: (difference.abs() > DISAGREEMENT_POINTS).then_some(difference),
                top,
            });
        }
    }

    fn from_proto(stats: &VmStatistics) -> VmStatsReport {
        let seconds = stats.window_ns as f64 / 1e9;
        VmStatsReport {
            pid: stats.pid,
            vm: stats.vm.clone(),
            configuration: stats.configuration.clone(),
            gauges: stats.gauges.clone(),
            intervals: stats
                .intervals
                .iter()
                .map(|i| {
                    let kind = i.kind.clone();
                    let key = kind.key().to_owned();
                    let label = match &kind {
                        IntervalKind::Scavenge => "scavenges".into(),
                        IntervalKind::FullGc => "full".into(),
                        IntervalKind::CodeCompaction => "compactions".into(),
                        IntervalKind::Safepoint => "safepoints".into(),
                        IntervalKind::Named(name) => name.clone(),
                    };
                    let total_ms = i.total_ns as f64 / 1e6;
                    IntervalStats {
                        key,
                        label,
                        kind,
                        count: i.count,
                        total_ms,
                        percent_of_elapsed: per(total_ms / 10.0, seconds),
                        average_ms: if i.count == 0 {
                            0.0
                        } else {
                            total_ms / i.count as f64
                        },
                        longest_ms: i.longest_ns as f64 / 1e6,
                        sampled: None,
                    }
                })
                .collect(),
            counters: stats
                .counters
                .iter()
                .map(|c| CounterGrowth {
                    name: c.name.clone(),
                    unit: c.unit.clone(),
                    count: c.delta,
                    per_second: per(c.delta as f64, seconds),
                    last: c.last,
                })
                .collect(),
            exact_counts: stats
                .exact_counts
                .iter()
                .map(|region| {
                    let mut region = region.clone();
                    crate::rank::rank(&mut region.counts, |c| c.count, |a, b| a.name.cmp(&b.name));
                    region
                })
                .collect(),
            domain_events: stats.domain_events.clone(),
            seconds,
        }
    }

    /// The intervals of `kind` (a kind the proto names), if the VM published any.
    pub fn kind(&self, kind: IntervalKind) -> Option<&IntervalStats> {
        self.intervals.iter().find(|i| i.kind == kind)
    }
}

/// `amount` per second of `seconds` (0 for a window of no time).
fn per(amount: f64, seconds: f64) -> f64 {
    if seconds > 0.0 && seconds.is_finite() {
        amount / seconds
    } else {
        0.0
    }
}

/// One count and its rate, as VMProfiler's "Events" lines read ("Process switches 38 (5 per
/// second)").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventCount {
    /// Stable name for scripts (`context_switches`, `minor_faults`...). JSON's `name`.
    #[serde(rename = "name")]
    pub key: &'static str,
    /// Name for people ("Context switches").
    #[serde(skip)]
    pub label: &'static str,
    /// The count over the session.
    pub count: u64,
    /// `count` over the session's duration (0 when it has none).
    pub per_second: f64,
    /// A part of the line before it (voluntary and involuntary switches are parts of all
    /// switches): the text indents it.
    #[serde(skip)]
    pub part: bool,
}

/// One target's events.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessEvents {
    /// Its pid.
    pub pid: u32,
    /// Its name when the session started.
    pub command: String,
    /// Threads counted when the session started.
    pub threads: u32,
    /// Why its counts are missing or partial (JSON: null when they are not).
    pub note: Option<String>,
    /// Its counts; empty when none could be taken (see `note`).
    pub events: Vec<EventCount>,
}

/// What the kernel counted for the targets over the session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelEventsReport {
    /// All targets together.
    pub total: Vec<EventCount>,
    /// Per target, in the session's order.
    pub processes: Vec<ProcessEvents>,
    /// Counters not counted and why.
    pub unavailable: Vec<String>,
}

impl KernelEventsReport {
    /// The events of `profile`, if its daemon counted any.
    pub fn from_profile(profile: &Profile) -> Option<KernelEventsReport> {
        let events: &KernelEvents = profile.kernel_events.as_ref()?;
        let seconds = profile.duration_seconds;
        Some(KernelEventsReport {
            total: event_counts(&events.total.unwrap_or_default(), seconds),
            processes: events
                .processes
                .iter()
                .map(|p| ProcessEvents {
                    pid: p.pid,
                    command: p.command.clone(),
                    threads: p.threads,
                    events: if p.threads == 0 {
                        Vec::new()
                    } else {
                        event_counts(&p.counts.unwrap_or_default(), seconds)
                    },
                    note: (!p.note.is_empty()).then(|| p.note.clone()),
                })
                .collect(),
            unavailable: events.unavailable.clone(),
        })
    }
}

/// The lines of `counts`, in report order, with their rates over `seconds`: counts the kernel
/// could not take (no tracefs, no PMU) have no line.
fn event_counts(counts: &KernelCounts, seconds: f64) -> Vec<EventCount> {
    let lines: [(&'static str, &'static str, Option<u64>, bool); 9] = [
        (
            "context_switches",
            "Context switches",
            Some(counts.context_switches),
            false,
        ),
        (
            "voluntary_context_switches",
            "voluntary (went to sleep)",
            counts.voluntary_context_switches,
            true,
        ),
        (
            "involuntary_context_switches",
            "involuntary (preempted)",
            counts.involuntary_context_switches,
            true,
        ),
        (
            "cpu_migrations",
            "CPU migrations",
            Some(counts.cpu_migrations),
            false,
        ),
        (
            "minor_faults",
            "Minor page faults",
            Some(counts.minor_faults),
            false,
        ),
        (
            "major_faults",
            "Major page faults",
            Some(counts.major_faults),
            false,
        ),
        ("cycles", "Cycles", counts.cycles, false),
        ("instructions", "Instructions", counts.instructions, false),
        ("cache_misses", "Cache misses", counts.cache_misses, false),
    ];
    lines
        .into_iter()
        .filter_map(|(key, label, count, part)| {
            let count = count?;
            Some(EventCount {
                key,
                label,
                count,
                per_second: per(count as f64, seconds),
                part,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use vmscope_model::{
        ConfigValue, CounterDelta, GaugeDelta, IntervalTotals, ProcessKernelCounts,
    };

    use super::*;

    #[test]
    fn vm_statistics_become_vmprofilers_figures() {
        let profile = Profile {
            vm_statistics: vec![VmStatistics {
                pid: 42,
                vm: "jitvm 0.1".into(),
                configuration: vec![Configuration {
                    name: "eden size".into(),
                    value: Some(ConfigValue::Number(3_801_936)),
                    unit: "bytes".into(),
                }],
                counters: vec![CounterDelta {
                    name: "Stack overflows".into(),
                    unit: String::new(),
                    delta: 209,
                    last: 1000,
                }],
                gauges: vec![GaugeDelta {
                    name: "old".into(),
                    unit: "bytes".into(),
                    delta: 157_616,
                    last: 1 << 20,
                    low: 1 << 19,
                    high: 1 << 21,
                }],
                intervals: vec![IntervalTotals {
                    kind: IntervalKind::Scavenge,
                    count: 182,
                    total_ns: 57_000_000,
                    longest_ns: 1_000_000,
                    sampled: 0,
                }],
                window_ns: 7_126_000_000,
                samples: 0,
                exact_counts: Vec::new(),
                domain_events: Vec::new(),
            }],
            ..Profile::default()
        };
        let [vm] = VmStatsReport::from_profile(&profile).try_into().unwrap();
        assert_eq!(
            vm.configuration[0].value,
            Some(ConfigValue::Number(3_801_936))
        );
        let gcs = vm.kind(IntervalKind::Scavenge).unwrap();
        assert_eq!(
            (gcs.key.as_str(), gcs.label.as_str()),
            ("scavenge", "scavenges")
        );
        assert_eq!(gcs.total_ms, 57.0);
        // Figure 7: 57 ms of 7.126 s is 0.8%, 0.313 ms each.
        assert!(
            (gcs.percent_of_elapsed - 0.7999).abs() < 1e-3,
            "{}",
            gcs.percent_of_elapsed
        );
        assert!((gcs.average_ms - 0.313).abs() < 1e-3);
        assert_eq!(vm.counters[0].per_second.round(), 29.0);
        assert_eq!(vm.gauges[0].delta, 157_616);
        assert_eq!(gcs.sampled, None, "no samples were tagged");
    }

    /// Each kind says what the samples saw of it: the share of the process's samples taken
    /// during it (not another process's), the functions they were in, and whether that
    /// disagrees with the VM's own share of the time.
    #[test]
    fn samples_during_each_kind_are_set_beside_the_vms_own_time() {
        use vmscope_model::{Frame, Stack, StackNode};
        let frame = |name: &str, module: &str| Frame {
            name: name.into(),
            module: module.into(),
            ..Frame::default()
        };
        let stack = |pid, frame, samples, during: &[u32]| Stack {
            node: Some(frame),
            pid,
            values: vec![samples],
            during: during.to_vec(),
            ..Stack::default()
        };
        let totals = |kind: IntervalKind, total_ns, sampled| IntervalTotals {
            kind,
            count: 10,
            total_ns,
            longest_ns: 0,
            sampled,
        };
        let profile = Profile {
            frames: vec![
                frame("gc_trace", "jitvm"),
                frame("main", "jitvm"),
                frame("memset", "libc.so.6"),
            ],
            vm_interval_kinds: vec![IntervalKind::Scavenge, IntervalKind::FullGc],
            // Stacks of one frame each: node i is frame i.
            stack_nodes: (0..3)
                .map(|frame| StackNode {
                    frame,
                    caller: None,
                })
                .collect(),
            stacks: vec![
                stack(42, 0, 60, &[0]),
                stack(42, 2, 20, &[0]),
                stack(42, 1, 920, &[]),
                stack(43, 0, 500, &[0, 1]),
            ],
            vm_statistics: vec![VmStatistics {
                pid: 42,
                intervals: vec![
                    totals(IntervalKind::Scavenge, 75_000_000, 80),
                    totals(IntervalKind::FullGc, 50_000_000, 0),
                ],
                window_ns: 1_000_000_000,
                samples: 1000,
                ..VmStatistics::default()
            }],
            ..Profile::default()
        };
        let [vm] = VmStatsReport::from_profile(&profile).try_into().unwrap();
        let scavenges = vm.kind(IntervalKind::Scavenge).unwrap();
        let sampled = scavenges.sampled.as_ref().unwrap();
        assert_eq!((sampled.samples, sampled.percent), (80, 8.0));
        assert_eq!(
            sampled.disagreement, None,
            "8% sampled beside 7.5% is agreement"
        );
        let top: Vec<(&str, &str, u64, f64)> = sampled
            .top
            .iter()
            .map(|f| (f.name.as_str(), f.module.as_str(), f.samples, f.percent))
            .collect();
        assert_eq!(
            top,
            [
                ("gc_trace", "jitvm", 60, 75.0),
                ("memset", "libc.so.6", 20, 25.0)
            ]
        );
        let full = vm
            .kind(IntervalKind::FullGc)
            .unwrap()
            .sampled
            .as_ref()
            .unwrap();
        assert_eq!((full.samples, full.top.len()), (0, 0));
        assert_eq!(
            full.disagreement,
            Some(-5.0),
            "5% of the time, no sample saw it"
        );
    }

    #[test]
    fn events_have_rates_and_uncounted_ones_no_line() {
        let counts = KernelCounts {
            context_switches: 2010,
            voluntary_context_switches: Some(2000),
            involuntary_context_switches: Some(10),
            minor_faults: 30_000,
            ..KernelCounts::default()
        };
        let profile = Profile {
            duration_seconds: 2.0,
            kernel_events: Some(KernelEvents {
                total: Some(counts),
                processes: vec![
                    ProcessKernelCounts {
                        pid: 7,
                        command: "sleeper".into(),
                        counts: Some(counts),
                        threads: 1,
                        note: String::new(),
                    },
                    ProcessKernelCounts {
                        pid: 8,
                        command: "gone".into(),
                        counts: Some(KernelCounts::default()),
                        threads: 0,
                        note: "the process exited before its counters were opened".into(),
                    },
                ],
                unavailable: vec!["cycles: no PMU".into()],
            }),
            ..Profile::default()
        };
        let report = KernelEventsReport::from_profile(&profile).expect("counted");
        let keys: Vec<&str> = report.total.iter().map(|e| e.key).collect();
        assert_eq!(
            keys,
            [
                "context_switches",
                "voluntary_context_switches",
                "involuntary_context_switches",
                "cpu_migrations",
                "minor_faults",
                "major_faults"
            ]
        );
        assert_eq!(report.total[0].per_second, 1005.0);
        assert!(report.total[1].part && !report.total[3].part);
        let total = |key| report.total.iter().find(|e| e.key == key).map(|e| e.count);
        assert_eq!(total("minor_faults"), Some(30_000));
        assert_eq!(total("cycles"), None);
        assert_eq!(report.processes[0].events.len(), 6);
        assert!(report.processes[1].events.is_empty());
        assert_eq!(
            report.processes[1].note.as_deref(),
            Some("the process exited before its counters were opened")
        );
        assert_eq!(report.unavailable, ["cycles: no PMU"]);
        assert_eq!(
            KernelEventsReport::from_profile(&Profile::default()),
            None,
            "no counts from a daemon that does not count"
        );
    }
}
