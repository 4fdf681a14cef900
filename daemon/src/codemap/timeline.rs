//! Attribution at sample time: a process's code map changes and its samples of generated code,
//! merged in timestamp order.
//!
//! Changes (loads, moves, frees) and samples both carry CLOCK_MONOTONIC timestamps. Samples
//! wait here until the caller knows every change up to their time (see
//! [`Timeline::advance`]); then, in time order, each sample is looked up in the map after
//! exactly the changes stamped at or before it. A method that moved after a sample was taken
//! is still found where it was, and code that later took over its addresses is not blamed:
//! this is what a map read once at the end (VMProfiler's way) gets wrong.

use std::collections::{HashSet, VecDeque};

use super::{
    change_queue::ChangeQueue,
    live::{LiveMap, Refusal},
    refusals::{Reason, Refusals},
};
use crate::vocab::CodeId;

/// Most changes one process may have waiting: far more than a VM makes while its samples wait
/// (a second or so), yet a bound on what a publisher stamping changes in the future can make
/// the daemon hold.
pub const MAX_QUEUED_CHANGES: usize = 4_000_000;

/// A change of the code map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The VM's code zone.
    Zone {
        /// Start (CogCode).
        start: u64,
        /// Start of unused space (CCFree).
        free_start: u64,
        /// End (CCEnd).
        end: u64,
    },
    /// Code loaded at `start`.
    Load {
        /// Start address.
        start: u64,
        /// Size; `None` to the next entry.
        size: Option<u64>,
        /// The code.
        code: CodeId,
    },
    /// Code moved unchanged.
    Move {
        /// Old start.
        from: u64,
        /// New start.
        to: u64,
    },
    /// Code freed.
    Free {
        /// Its start.
        start: u64,
    },
    /// Every entry of these codes is gone (a perf map rewritten as a whole snapshot).
    FreeCodes(Vec<CodeId>),
    /// The process replaced its program (`execve`): every entry is gone.
    Clear,
}

/// A sample waiting for its attribution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingSample<T> {
    /// CLOCK_MONOTONIC time of the sample.
    pub timestamp_ns: u64,
    /// Instruction pointer.
    pub ip: u64,
    /// What the caller needs back with the answer.
    pub payload: T,
}

/// Counters of a timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelineCounters {
    /// Changes applied.
    pub applied: u64,
    /// Changes refused (unknown addresses, outside the zone...).
    pub refused: u64,
    /// Changes that arrived after samples later than them were attributed; applied on arrival.
    pub late: u64,
    /// Samples that arrived after the timeline had moved past their time (a caller that
    /// advanced beyond the samples it had: they are looked up in a map too new).
    pub late_samples: u64,
}

/// The code map of one process through time, with the samples it still has to attribute.
#[derive(Debug)]
pub struct Timeline<T> {
    map: LiveMap,
    /// Every change stamped at or before this has been applied.
    applied_ns: u64,
    /// Changes not applied yet.
    changes: ChangeQueue,
    samples: Vec<PendingSample<T>>,
    counters: TimelineCounters,
    /// The ranges of the last loads refused.
    refused_loads: VecDeque<(u64, u64)>,
    /// Changes refused, by reason, for the log.
    pub refusals: Refusals,
}

impl<T> Default for Timeline<T> {
    fn default() -> Self {
        Timeline {
            map: LiveMap::default(),
            applied_ns: 0,
            changes: ChangeQueue::default(),
            samples: Vec::new(),
            counters: TimelineCounters::default(),
            refused_loads: VecDeque::new(),
            refusals: Refusals::new(0, "code map changes"),
        }
    }
}

impl<T> Timeline<T> {
    /// Records a change made at `timestamp_ns`.
    pub fn push_change(&mut self, timestamp_ns: u64, change: Change) {
        if timestamp_ns <= self.applied_ns && self.applied_ns > 0 {
            // Too late to apply in order: samples after it were attributed already.
            self.counters.late += 1;
            self.apply(change);
            return;
        }
        if self.changes.len() >= MAX_QUEUED_CHANGES {
            self.refuse(format!(
                "{MAX_QUEUED_CHANGES} changes wait to be applied already: one more is refused"
            ));
            return;
        }
        self.changes.push(timestamp_ns, change);
    }

    /// Records a sample to attribute once changes up to its time are known. The caller must
    /// not have advanced past the sample's time before: see [`Timeline::advance`].
    pub fn push_sample(&mut self, sample: PendingSample<T>) {
        if sample.timestamp_ns < self.applied_ns {
            self.counters.late_samples += 1;
        }
        self.samples.push(sample);
    }

    /// Samples waiting.
    pub fn pending_samples(&self) -> usize {
        self.samples.len()
    }

    /// The waiting samples, in no particular order.
    pub fn pending(&self) -> impl Iterator<Item = &PendingSample<T>> {
        self.samples.iter()
    }

    /// Takes the waiting samples for which `which` holds, oldest first.
    pub fn take_samples(
        &mut self,
        mut which: impl FnMut(&PendingSample<T>) -> bool,
    ) -> Vec<PendingSample<T>> {
        self.samples.sort_by_key(|s| s.timestamp_ns);
        let (taken, kept) = std::mem::take(&mut self.samples)
            .into_iter()
            .partition(|s| which(s));
        self.samples = kept;
        taken
    }

    /// The time of the newest waiting sample.
    pub fn newest_pending_ns(&self) -> Option<u64> {
        self.samples.iter().map(|s| s.timestamp_ns).max()
    }

    /// The time of the oldest waiting sample.
    pub fn oldest_pending_ns(&self) -> Option<u64> {
        self.samples.iter().map(|s| s.timestamp_ns).min()
    }

    /// The counters.
    pub fn counters(&self) -> TimelineCounters {
        self.counters
    }

    /// Adds to `keep` the codes it refers to: those of its map and of its changes not applied
    /// yet.
    pub fn codes(&self, keep: &mut impl Extend<CodeId>) {
        keep.extend(self.map.codes());
        for change in self.changes.iter() {
            match change {
                Change::Load { code, .. } => keep.extend([*code]),
                Change::FreeCodes(codes) => keep.extend(codes.iter().copied()),
                _ => {}
            }
        }
    }

    /// The map as of the last advance.
    pub fn map(&self) -> &LiveMap {
        &self.map
    }

    /// Attributes, in time order, every waiting sample stamped at or before `until_ns`, calling
    /// `attribute` with each sample, the (start, code) its `ip` fell in, and the map as it was
    /// at the sample's time (for the other addresses of its stack), then applies the remaining
    /// changes up to `until_ns`.
    ///
    /// The caller must know every change *and every sample* up to `until_ns`: a sample stamped
    /// earlier that arrives later would be looked up in a map that has moved on.
    pub fn advance(
        &mut self,
        until_ns: u64,
        mut attribute: impl FnMut(PendingSample<T>, Option<(u64, CodeId)>, &LiveMap),
    ) {
        if self.samples.iter().any(|s| s.timestamp_ns <= until_ns) {
            self.samples.sort_by_key(|s| s.timestamp_ns);
            let ready = self.samples.partition_point(|s| s.timestamp_ns <= until_ns);
            let rest = self.samples.split_off(ready);
            for sample in std::mem::replace(&mut self.samples, rest) {
                self.apply_until(sample.timestamp_ns);
                let found = self.map.lookup(sample.ip);
                attribute(sample, found, &self.map);
            }
        }
        self.apply_until(until_ns);
        self.applied_ns = self.applied_ns.max(until_ns);
    }

    fn apply_until(&mut self, ts: u64) {
        while let Some(change) = self.changes.pop_until(ts) {
            self.apply(change);
        }
    }

    /// Counts a change refused before it reached the timeline, with what it was.
    pub fn refuse(&mut self, problem: String) {
        self.counters.refused += 1;
        self.refusals.refuse(Reason::Unapplicable, 1, || problem);
    }

    fn apply(&mut self, change: Change) {
        match apply_change(&mut self.map, &change) {
            Ok(()) => self.counters.applied += 1,
            Err(refusal) => {
                if let Change::Load { start, size, .. } = change {
                    if self.refused_loads.len() == MAX_REFUSED_LOADS {
                        self.refused_loads.pop_front();
                    }
                    let end = start.saturating_add(size.unwrap_or(1).max(1));
                    self.refused_loads.push_back((start, end));
                }
                self.refuse(refusal.to_string())
            }
        }
    }

    /// Whether a load covering `addr` was refused (among the last [`MAX_REFUSED_LOADS`]).
    pub fn refused_at(&self, addr: u64) -> bool {
        self.refused_loads
            .iter()
            .any(|&(start, end)| start <= addr && addr < end)
    }
}

/// Loads refused by a timeline that it remembers, to say why a sample there is unexplained.
pub const MAX_REFUSED_LOADS: usize = 256;

/// Applies one change to a map.
pub fn apply_change(map: &mut LiveMap, change: &Change) -> Result<(), Refusal> {
    match change {
        &Change::Zone {
            start,
            free_start,
            end,
        } => {
            map.set_zone(start, free_start, end);
            Ok(())
        }
        &Change::Load { start, size, code } => map.load(start, size, code).map(|_| ()),
        &Change::Move { from, to } => map.move_code(from, to).map(|_| ()),
        &Change::Free { start } => map.free(start).map(|_| ()),
        Change::FreeCodes(codes) => {
            let codes: HashSet<CodeId> = codes.iter().copied().collect();
            map.free_where(|c| codes.contains(&c));
            Ok(())
        }
        Change::Clear => {
            *map = LiveMap::default();
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOT: CodeId = CodeId(1);
    const DECOY: CodeId = CodeId(2);

    fn sample(ts: u64, ip: u64) -> PendingSample<u64> {
        PendingSample {
            timestamp_ns: ts,
            ip,
            payload: ts,
        }
    }

    fn advance(timeline: &mut Timeline<u64>, until: u64) -> Vec<(u64, Option<CodeId>)> {
        let mut out = Vec::new();
        timeline.advance(until, |s, found, _| {
            out.push((s.payload, found.map(|(_, c)| c)))
        });
        out
    }

    #[test]
    fn each_sample_sees_the_map_of_its_time() {
        let mut t = Timeline::default();
        t.push_change(
            10,
            Change::Load {
                start: 0x1000,
                size: Some(0x100),
                code: HOT,
            },
        );
        // At 20 the hot method moves away and a decoy takes its old place at 30.
        t.push_change(
            20,
            Change::Move {
                from: 0x1000,
                to: 0x2000,
            },
        );
        t.push_change(
            30,
            Change::Load {
                start: 0x1000,
                size: Some(0x100),
                code: DECOY,
            },
        );
        for (ts, ip) in [
            (15, 0x1010),
            (25, 0x2010),
            (25, 0x1010),
            (35, 0x1010),
            (35, 0x2010),
        ] {
            t.push_sample(sample(ts, ip));
        }
        let got = advance(&mut t, 40);
        assert_eq!(
            got,
            [
                (15, Some(HOT)),   // the hot method, before it moved
                (25, Some(HOT)),   // the hot method at its new place
                (25, None),        // the old place, empty between the move and the decoy
                (35, Some(DECOY)), // the decoy, only once it is there
                (35, Some(HOT)),
            ]
        );
        // Read once at the end instead, the map blames the decoy for the sample at 15.
        assert_eq!(t.map().lookup(0x1010).map(|(_, c)| c), Some(DECOY));
    }

    #[test]
    fn samples_wait_until_changes_up_to_their_time_are_known() {
        let mut t = Timeline::default();
        t.push_sample(sample(50, 0x1010));
        assert!(advance(&mut t, 40).is_empty());
        assert_eq!(t.pending_samples(), 1);
        assert_eq!(t.oldest_pending_ns(), Some(50));
        // The load stamped 45 arrives after the sample but before the watermark passes 50.
        t.push_change(
            45,
            Change::Load {
                start: 0x1000,
                size: Some(0x100),
                code: HOT,
            },
        );
        assert_eq!(advance(&mut t, 60), [(50, Some(HOT))]);
        assert_eq!(t.pending_samples(), 0);
    }

    #[test]
    fn late_and_refused_changes_are_counted() {
        let mut t = Timeline::default();
        t.push_change(
            5,
            Change::Load {
                start: 0x1000,
                size: Some(0x10),
                code: HOT,
            },
        );
        advance(&mut t, 100);
        t.push_change(50, Change::Free { start: 0x1000 });
        assert_eq!(t.counters().late, 1);
        assert_eq!(t.map().lookup(0x1000), None, "a late change still applies");
        t.push_change(
            150,
            Change::Move {
                from: 0x5000,
                to: 0x6000,
            },
        );
        advance(&mut t, 200);
        assert_eq!(t.counters().refused, 1);
        let summary = t.refusals.take_summary(200, true).unwrap();
        assert!(summary.contains("no code starts at 0x5000"), "{summary}");
    }

    #[test]
    fn out_of_order_changes_are_applied_in_time_order() {
        let mut t = Timeline::default();
        t.push_change(30, Change::Free { start: 0x1000 });
        t.push_change(
            10,
            Change::Load {
                start: 0x1000,
                size: Some(0x10),
                code: HOT,
            },
        );
        t.push_sample(sample(20, 0x1004));
        t.push_sample(sample(40, 0x1004));
        assert_eq!(advance(&mut t, 50), [(20, Some(HOT)), (40, None)]);
        assert_eq!(t.counters().refused, 0);
    }

    #[test]
    fn an_exec_clears_the_map_at_its_time_only() {
        let mut t = Timeline::default();
        t.push_change(
            10,
            Change::Load {
                start: 0x1000,
                size: Some(0x10),
                code: HOT,
            },
        );
        t.push_change(20, Change::Clear);
        // The new program published before the exec was seen: it stays.
        t.push_change(
            25,
            Change::Load {
                start: 0x1000,
                size: Some(0x10),
                code: DECOY,
            },
        );
        t.push_sample(sample(15, 0x1004));
        t.push_sample(sample(22, 0x1004));
        t.push_sample(sample(30, 0x1004));
        assert_eq!(
            advance(&mut t, 40),
            [(15, Some(HOT)), (22, None), (30, Some(DECOY))]
        );
    }

    #[test]
    fn a_rewritten_snapshot_frees_its_codes() {
        let mut t = Timeline::<u64>::default();
        t.push_change(
            1,
            Change::Load {
                start: 0x1000,
                size: Some(0x10),
                code: HOT,
            },
        );
        t.push_change(
            1,
            Change::Load {
                start: 0x2000,
                size: Some(0x10),
                code: DECOY,
            },
        );
        t.push_change(2, Change::FreeCodes(vec![HOT]));
        advance(&mut t, 3);
        assert_eq!(t.map().len(), 1);
        assert_eq!(t.map().lookup(0x2000).map(|(_, c)| c), Some(DECOY));
    }
}
