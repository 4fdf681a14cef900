//! The statistics after the code sections, VMProfiler's "Memory", "GCs", "Compiled Code
//! Compactions" and "Events": for now the events the kernel counted for the targets
//! ([`KernelEventsReport`]), each with its rate over the session.

use vmscope_proto::v1::{KernelCounts, KernelEvents, Profile};

/// One count and its rate, as VMProfiler's "Events" lines read ("Process switches 38 (5 per
/// second)").
#[derive(Debug, Clone, PartialEq)]
pub struct EventCount {
    /// Stable name for scripts (`context_switches`, `minor_faults`...).
    pub key: &'static str,
    /// Name for people ("Context switches").
    pub label: &'static str,
    /// The count over the session.
    pub count: u64,
    /// `count` over the session's duration (0 when it has none).
    pub per_second: f64,
    /// A part of the line before it (voluntary and involuntary switches are parts of all
    /// switches): the text indents it.
    pub part: bool,
}

/// One target's events.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessEvents {
    /// Its pid.
    pub pid: u32,
    /// Its name when the session started.
    pub command: String,
    /// Threads counted when the session started.
    pub threads: u32,
    /// Its counts; empty when none could be taken (see `note`).
    pub events: Vec<EventCount>,
    /// Why its counts are missing or partial.
    pub note: Option<String>,
}

/// What the kernel counted for the targets over the session.
#[derive(Debug, Clone, PartialEq)]
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
                per_second: if seconds > 0.0 && seconds.is_finite() {
                    count as f64 / seconds
                } else {
                    0.0
                },
                part,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use vmscope_proto::v1::ProcessKernelCounts;

    use super::*;

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
