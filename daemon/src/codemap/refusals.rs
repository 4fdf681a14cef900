//! What code maps get refused: counted per reason, and said in the log once per source.
//!
//! A runtime that writes one kind of entry the daemon must refuse writes it again and again:
//! `node --perf-basic-prof` lists hundreds of entries outside the process's executable
//! mappings, and a log line each (587 for one node run) buried everything else in the daemon's
//! log. So each source (a perf map, a jitdump file, a code map file, a process's stream of
//! changes) tallies its refusals by [`Reason`] with one example each, and the log gets one
//! summary line per source: when the source closes (its process exited or replaced its
//! program, the file was replaced), and, for a source that lives on, at most one per
//! [`SUMMARY_INTERVAL_NS`] with what is new. The daemon's counters (`vmscope info`) take every
//! refusal, by reason, as it happens.

use std::{collections::BTreeMap, fmt::Write as _};

/// Why an entry of a code map, or a change to it, was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// A line or record that does not parse.
    Malformed,
    /// A name that is not UTF-8.
    NotUtf8,
    /// Code (or code moved) outside the process's executable mappings.
    OutsideExecutable,
    /// Debug info for addresses outside the code it describes.
    DebugInfoOutsideCode,
    /// Its owner's share of the code store, or the store, is spent (`vmscoped
    /// --code-store-mib`, `--code-store-per-user-mib`, `--code-store-non-root-mib`).
    StoreFull,
    /// The file ends in the middle of a record.
    Truncated,
    /// An event a VM published that breaks the protocol's rules.
    Invalid,
    /// A change the map cannot apply: a move or free of code that is not there, code outside
    /// the VM's code zone or wrapping around, a full map, a change stamped far in the future.
    Unapplicable,
    /// A code map file over its size limit: read no more.
    TooLarge,
    /// An event a VM published stamped before one it published already.
    TimeBackwards,
    /// A VM's interval of a kind the daemon does not know.
    UnknownKind,
    /// A VM's interval end without its begin, begin of one already open, or interval still
    /// open when its publication closed (ended then).
    Unmatched,
    /// A VM's statistics past a publication's bounds (names, named kinds, open intervals).
    TooMany,
}

impl Reason {
    /// Every reason, in report order.
    pub const ALL: [Reason; 13] = [
        Reason::Malformed,
        Reason::NotUtf8,
        Reason::OutsideExecutable,
        Reason::DebugInfoOutsideCode,
        Reason::StoreFull,
        Reason::Truncated,
        Reason::Invalid,
        Reason::Unapplicable,
        Reason::TooLarge,
        Reason::TimeBackwards,
        Reason::UnknownKind,
        Reason::Unmatched,
        Reason::TooMany,
    ];

    /// The daemon counter of this reason's refusals (`vmscope info`).
    pub fn counter(self) -> &'static str {
        match self {
            Reason::Malformed => "code_map_refused_malformed",
            Reason::NotUtf8 => "code_map_refused_not_utf8",
            Reason::OutsideExecutable => "code_map_refused_outside_executable",
            Reason::DebugInfoOutsideCode => "code_map_refused_debug_info_outside_code",
            Reason::StoreFull => "code_map_refused_store_full",
            Reason::Truncated => "code_map_refused_truncated",
            Reason::Invalid => "code_map_refused_invalid",
            Reason::Unapplicable => "code_map_refused_unapplicable",
            Reason::TooLarge => "code_map_refused_too_large",
            Reason::TimeBackwards => "code_map_refused_time_backwards",
            Reason::UnknownKind => "code_map_refused_unknown_kind",
            Reason::Unmatched => "code_map_refused_unmatched_interval",
            Reason::TooMany => "code_map_refused_too_many_statistics",
        }
    }

    /// What the reason means, for the log ("12 malformed").
    pub fn describe(self) -> &'static str {
        match self {
            Reason::Malformed => "malformed",
            Reason::NotUtf8 => "with names that are not UTF-8",
            Reason::OutsideExecutable => "outside the process's executable mappings",
            Reason::DebugInfoOutsideCode => "with debug info outside their code",
            Reason::StoreFull => "past their owner's share of the code store",
            Reason::Truncated => "cut off at the end of the file",
            Reason::Invalid => "breaking the code map protocol",
            Reason::Unapplicable => "that the map could not apply",
            Reason::TooLarge => "in a file over its size limit",
            Reason::TimeBackwards => "stamped before an earlier event",
            Reason::UnknownKind => "of an unknown interval kind",
            Reason::Unmatched => {
                "ending an interval that never began, beginning one open, or leaving one open"
            }
            Reason::TooMany => "past a publication's bounds on statistics",
        }
    }

    /// Whether the reason counts against entries of a source (rather than changes to a map).
    pub fn is_entry(self) -> bool {
        self != Reason::Unapplicable
    }
}

/// A source that lives on has its refusals summarised at most this often.
pub const SUMMARY_INTERVAL_NS: u64 = 60_000_000_000;

#[derive(Debug, Default)]
struct Tally {
    /// Refusals in all.
    count: u64,
    /// Of them, already in a summary line.
    summarised: u64,
    /// Of them, already handed to the daemon's counters.
    counted: u64,
    /// The first refusal's details.
    example: String,
}

/// The refusals of one source.
#[derive(Debug)]
pub struct Refusals {
    pid: u32,
    source: String,
    tallies: BTreeMap<Reason, Tally>,
    /// When the summariser first saw refusals it had not summarised yet.
    pending_since_ns: Option<u64>,
}

impl Refusals {
    /// No refusals yet, of `source` ("perf map /tmp/perf-42.map") of process `pid`.
    pub fn new(pid: u32, source: impl Into<String>) -> Refusals {
        Refusals {
            pid,
            source: source.into(),
            tallies: BTreeMap::new(),
            pending_since_ns: None,
        }
    }

    /// Counts `n` refusals for `reason`; `example` describes the first one, and is only called
    /// for the first of its reason.
    pub fn refuse(&mut self, reason: Reason, n: u64, example: impl FnOnce() -> String) {
        if n == 0 {
            return;
        }
        let tally = self.tallies.entry(reason).or_default();
        if tally.count == 0 {
            tally.example = example();
        }
        tally.count += n;
    }

    /// Refusals in all, of every reason.
    pub fn total(&self) -> u64 {
        self.tallies.values().map(|t| t.count).sum()
    }

    /// Refusals of one reason.
    pub fn count(&self, reason: Reason) -> u64 {
        self.tallies.get(&reason).map_or(0, |t| t.count)
    }

    /// Refusals not handed over yet, by reason, for the daemon's counters: each refusal is
    /// handed over once, so that counters keep what a source counted after it is gone.
    pub fn take_uncounted(&mut self) -> impl Iterator<Item = (Reason, u64)> + '_ {
        self.tallies.iter_mut().filter_map(|(&reason, tally)| {
            let new = tally.count - tally.counted;
            tally.counted = tally.count;
            (new > 0).then_some((reason, new))
        })
    }

    /// The summary line of what was not summarised yet, if it is due: always when `closing`,
    /// else [`SUMMARY_INTERVAL_NS`] after a call that first found them. Marks them summarised.
    pub fn take_summary(&mut self, now_ns: u64, closing: bool) -> Option<String> {
        if self.tallies.values().all(|t| t.summarised == t.count) {
            return None;
        }
        let since = *self.pending_since_ns.get_or_insert(now_ns);
        if !closing && now_ns.saturating_sub(since) < SUMMARY_INTERVAL_NS {
            return None;
        }
        self.pending_since_ns = None;
        let new: Vec<(Reason, u64, &str)> = self
            .tallies
            .iter_mut()
            .filter_map(|(&reason, tally)| {
                let new = tally.count - tally.summarised;
                tally.summarised = tally.count;
                (new > 0).then_some((reason, new, tally.example.as_str()))
            })
            .collect();
        let total: u64 = new.iter().map(|&(_, n, _)| n).sum();
        let mut line = format!(
            "{}: {total} {} refused",
            self.source,
            if total == 1 { "entry" } else { "entries" }
        );
        for (i, (reason, n, example)) in new.iter().enumerate() {
            let _ = write!(
                line,
                "{}{n} {} (e.g. {example})",
                if i == 0 { ": " } else { "; " },
                reason.describe()
            );
        }
        Some(line)
    }

    /// Logs the summary, if due (see [`Refusals::take_summary`]).
    pub fn log_summary(&mut self, now_ns: u64, closing: bool) {
        if let Some(line) = self.take_summary(now_ns, closing) {
            tracing::warn!(pid = self.pid, "{line}");
        }
    }
}

impl Drop for Refusals {
    /// A source that goes (its process exec'd, its file was replaced) says what it refused.
    fn drop(&mut self) {
        self.log_summary(u64::MAX, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_summary_per_source_with_counts_and_an_example() {
        let mut r = Refusals::new(42, "perf map /tmp/perf-42.map");
        for i in 0..587u64 {
            r.refuse(Reason::OutsideExecutable, 1, || {
                format!("LazyCompile:~f{i} at {:#x}", 0x1000 + i)
            });
        }
        r.refuse(Reason::Malformed, 3, || "line 7: no size".into());
        assert_eq!(r.total(), 590);
        // Not due while the source lives and the interval has not passed.
        assert_eq!(r.take_summary(5_000, false), None);
        let line = r.take_summary(5_000, true).expect("closing summarises");
        assert_eq!(
            line,
            "perf map /tmp/perf-42.map: 590 entries refused: 3 malformed (e.g. line 7: no size); \
             587 outside the process's executable mappings (e.g. LazyCompile:~f0 at 0x1000)"
        );
        // Said once: nothing new, nothing more.
        assert_eq!(r.take_summary(u64::MAX, true), None);
        // A long-lived source gets a line per interval with what is new.
        r.refuse(Reason::StoreFull, 1, || "the store is full".into());
        assert_eq!(r.take_summary(10_000, false), None, "first seen now");
        assert_eq!(
            r.take_summary(10_000 + SUMMARY_INTERVAL_NS - 1, false),
            None
        );
        let line = r.take_summary(10_000 + SUMMARY_INTERVAL_NS, false).unwrap();
        assert_eq!(
            line,
            "perf map /tmp/perf-42.map: 1 entry refused: 1 past their owner's share of the code store \
             (e.g. the store is full)"
        );
    }

    #[test]
    fn counters_get_each_refusal_once() {
        let mut r = Refusals::new(1, "s");
        r.refuse(Reason::NotUtf8, 2, String::new);
        r.refuse(Reason::Truncated, 0, || unreachable!("nothing refused"));
        assert_eq!(
            r.take_uncounted().collect::<Vec<_>>(),
            [(Reason::NotUtf8, 2)]
        );
        assert_eq!(r.take_uncounted().count(), 0);
        r.refuse(Reason::NotUtf8, 1, || {
            unreachable!("the example is the first's")
        });
        assert_eq!(
            r.take_uncounted().collect::<Vec<_>>(),
            [(Reason::NotUtf8, 1)]
        );
        assert_eq!(r.count(Reason::NotUtf8), 3);
    }

    #[test]
    fn counter_names_are_distinct() {
        let names: std::collections::HashSet<_> = Reason::ALL.map(Reason::counter).into();
        assert_eq!(names.len(), Reason::ALL.len());
    }
}
