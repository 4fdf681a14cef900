//! The intervals a VM published (GCs, compactions, safepoints...) through time, to tell which
//! kinds were under way when a sample was taken.
//!
//! A session's windows add intervals up ([`super::vm::Window`]); this log answers the other
//! question, per sample: *was the VM collecting at this instant?* It keeps, per kind, the union
//! of the kind's closed intervals as sorted disjoint ranges, and the begins of those still
//! open, so the answer is a binary search per kind whatever the number of intervals.
//!
//! Samples are tagged once their process's publication is known up to their time (the
//! session manager holds them until then), so the log only has to reach back as far as the
//! oldest sample still waiting: ranges older than [`KEEP_NS`] before the newest event, or the
//! oldest past [`MAX_KEPT`] in all its kinds, are forgotten (and counted).

use std::{
    collections::VecDeque,
    sync::atomic::{AtomicU64, Ordering},
};

use vmscope_model::IntervalKind;

/// How far back before its newest event the log keeps closed intervals: a sample waits for
/// its publication a second or two (five for a buffered jitdump), far less than this.
pub const KEEP_NS: u64 = 60_000_000_000;
/// Most closed ranges one process's log keeps, all its kinds together (16 bytes each, so
/// 256 KiB): a VM in a safepoint and a collection 1,000 times a second each keeps 8 s of them,
/// more than any sample waits for its publication.
pub const MAX_KEPT: usize = 16_384;
/// Most kinds one process's log tells apart: the four the protocol names, and the VM's own
/// ([`super::vm::MAX_NAMED_KINDS`] per publication, a process may have two).
pub const MAX_KINDS: usize = 32;

/// Kinds under way at an instant: bit `i` is the log's `i`-th kind ([`IntervalLog::kinds`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KindSet(pub u32);

impl KindSet {
    /// No interval under way.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The indices of its kinds, in the log's order.
    pub fn indices(self) -> impl Iterator<Item = usize> {
        (0..MAX_KINDS).filter(move |i| self.0 & (1 << i) != 0)
    }
}

/// One kind's intervals.
#[derive(Clone, Debug, Default)]
struct KindLog {
    /// The union of its closed intervals, as disjoint `[begin, end)` ranges in time order.
    closed: VecDeque<(u64, u64)>,
    /// Its open intervals: (id, begin).
    open: Vec<(u64, u64)>,
    /// The earliest begin among `open`.
    open_since: Option<u64>,
}

impl KindLog {
    fn at(&self, ts: u64) -> bool {
        if self.open_since.is_some_and(|begin| begin <= ts) {
            return true;
        }
        let after = self.closed.partition_point(|&(begin, _)| begin <= ts);
        after > 0 && self.closed[after - 1].1 > ts
    }

    /// How much of `[begin, end)` the kind's intervals cover: the union of its closed ranges,
    /// and everything from the earliest begin still open.
    fn overlap(&self, begin: u64, end: u64) -> u64 {
        let open_from = self.open_since.unwrap_or(u64::MAX);
        let closed_to = end.min(open_from);
        let mut covered = 0;
        let first = self.closed.partition_point(|&(_, e)| e <= begin);
        for &(b, e) in self.closed.iter().skip(first) {
            if b >= closed_to {
                break;
            }
            covered += e.min(closed_to).saturating_sub(b.max(begin));
        }
        if open_from < end {
            covered += end - open_from.max(begin);
        }
        covered
    }

    /// Adds `[begin, end)` to the union.
    fn close(&mut self, begin: u64, end: u64) {
        if end <= begin {
            return;
        }
        // Intervals end in time order but for overlapping ones: the common case appends.
        match self.closed.back_mut() {
            None => return self.closed.push_back((begin, end)),
            Some(last) if begin > last.1 => return self.closed.push_back((begin, end)),
            Some(last) if begin >= last.0 => {
                last.1 = last.1.max(end);
                return;
            }
            Some(_) => {}
        }
        // Overlaps or precedes earlier ranges: merge with every range it touches.
        let first = self.closed.partition_point(|&(_, e)| e < begin);
        let last = self.closed.partition_point(|&(b, _)| b <= end);
        if first == last {
            self.closed.insert(first, (begin, end));
            return;
        }
        let merged = (
            begin.min(self.closed[first].0),
            end.max(self.closed[last - 1].1),
        );
        self.closed.drain(first + 1..last);
        self.closed[first] = merged;
    }
}

/// The kinds under way when a sample was taken, as its process's log names them.
#[derive(Clone, Copy, Debug)]
pub struct During<'a> {
    /// Which log: unique for the daemon's life, so that a session may remember what a set of
    /// this log's means without asking again.
    pub log: u64,
    /// The kinds.
    pub set: KindSet,
    /// What the set's bits are.
    pub kinds: &'a [IntervalKind],
}

impl During<'_> {
    /// The kinds under way.
    pub fn kinds(&self) -> impl Iterator<Item = &IntervalKind> {
        self.set.indices().filter_map(|i| self.kinds.get(i))
    }
}

/// One process's published intervals through time.
#[derive(Clone, Debug)]
pub struct IntervalLog {
    serial: u64,
    kinds: Vec<IntervalKind>,
    logs: Vec<KindLog>,
    newest_ns: u64,
    forgotten: u64,
}

impl Default for IntervalLog {
    fn default() -> Self {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        IntervalLog {
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
            kinds: Vec::new(),
            logs: Vec::new(),
            newest_ns: 0,
            forgotten: 0,
        }
    }
}

impl IntervalLog {
    /// The kinds it tells apart, in the order first published: [`KindSet`]'s bits.
    pub fn kinds(&self) -> &[IntervalKind] {
        &self.kinds
    }

    /// Intervals forgotten before their time ([`MAX_KEPT`], [`MAX_KINDS`]): samples in them
    /// are not tagged.
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }

    fn index(&mut self, kind: &IntervalKind) -> Option<usize> {
        if let Some(i) = self.kinds.iter().position(|k| k == kind) {
            return Some(i);
        }
        if self.kinds.len() == MAX_KINDS {
            return None;
        }
        self.kinds.push(kind.clone());
        self.logs.push(KindLog::default());
        Some(self.kinds.len() - 1)
    }

    /// An interval of `kind` numbered `id` began at `ts`.
    pub fn begin(&mut self, ts: u64, kind: &IntervalKind, id: u64) {
        self.newest_ns = self.newest_ns.max(ts);
        let Some(i) = self.index(kind) else {
            self.forgotten += 1;
            return;
        };
        let log = &mut self.logs[i];
        if log.open.iter().any(|&(open, _)| open == id) {
            return;
        }
        log.open.push((id, ts));
        log.open_since = Some(log.open_since.map_or(ts, |since| since.min(ts)));
    }

    /// The interval of `kind` numbered `id` ended at `ts`.
    pub fn end(&mut self, ts: u64, kind: &IntervalKind, id: u64) {
        self.newest_ns = self.newest_ns.max(ts);
        let Some(i) = self.kinds.iter().position(|k| k == kind) else {
            return;
        };
        let log = &mut self.logs[i];
        let Some(at) = log.open.iter().position(|&(open, _)| open == id) else {
            return;
        };
        let (_, begin) = log.open.swap_remove(at);
        log.open_since = log.open.iter().map(|&(_, b)| b).min();
        log.close(begin, ts);
        self.prune();
    }

    /// Forgets what no waiting sample can need, and the oldest past the bound.
    fn prune(&mut self) {
        let horizon = self.newest_ns.saturating_sub(KEEP_NS);
        let mut kept = 0;
        for log in &mut self.logs {
            while log.closed.front().is_some_and(|&(_, end)| end <= horizon) {
                log.closed.pop_front();
            }
            kept += log.closed.len();
        }
        while kept > MAX_KEPT {
            let oldest = self
                .logs
                .iter_mut()
                .filter(|log| !log.closed.is_empty())
                .min_by_key(|log| log.closed[0].0)
                .expect("ranges are kept");
            oldest.closed.pop_front();
            kept -= 1;
            self.forgotten += 1;
        }
    }

    /// The kinds under way at `ts`.
    pub fn at(&self, ts: u64) -> KindSet {
        let mut set = 0;
        for (i, log) in self.logs.iter().enumerate() {
            if log.at(ts) {
                set |= 1 << i;
            }
        }
        KindSet(set)
    }

    /// How much of `[begin, end)` each kind's intervals cover, for the kinds that cover any:
    /// the time a thread off its CPU then spent waiting in each (a GC, a safepoint).
    pub fn overlaps(&self, begin: u64, end: u64) -> impl Iterator<Item = (&IntervalKind, u64)> {
        self.kinds
            .iter()
            .zip(&self.logs)
            .map(move |(kind, log)| (kind, log.overlap(begin, end)))
            .filter(|&(_, ns)| ns > 0)
    }

    /// The kinds under way at `ts`, with their names.
    pub fn during(&self, ts: u64) -> During<'_> {
        During {
            log: self.serial,
            set: self.at(ts),
            kinds: &self.kinds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GC: IntervalKind = IntervalKind::Scavenge;
    const SAFEPOINT: IntervalKind = IntervalKind::Safepoint;

    fn kinds_at(log: &IntervalLog, ts: u64) -> Vec<IntervalKind> {
        log.at(ts)
            .indices()
            .map(|i| log.kinds()[i].clone())
            .collect()
    }

    /// A block's time inside each kind: the union of the kind's intervals it overlaps, an open
    /// one up to the block's end, counted once where intervals of a kind overlap.
    #[test]
    fn a_block_is_inside_as_long_as_it_overlaps_the_union() {
        let mut log = IntervalLog::default();
        log.begin(100, &GC, 1);
        log.end(200, &GC, 1);
        log.begin(150, &SAFEPOINT, 1);
        log.end(160, &SAFEPOINT, 1);
        log.begin(300, &GC, 2);
        log.begin(350, &GC, 3);
        log.end(400, &GC, 3);
        let over = |b, e| -> Vec<(IntervalKind, u64)> {
            log.overlaps(b, e).map(|(k, ns)| (k.clone(), ns)).collect()
        };
        assert_eq!(over(0, 100), []);
        assert_eq!(over(50, 120), [(GC, 20)]);
        assert_eq!(over(120, 180), [(GC, 60), (SAFEPOINT, 10)]);
        // 100..200 closed, 300.. open (350..400 inside it, once).
        assert_eq!(over(0, 1_000), [(GC, 100 + 700), (SAFEPOINT, 10)]);
        assert_eq!(over(250, 320), [(GC, 20)]);
        assert_eq!(over(200, 300), [], "ends are exclusive");
    }

    #[test]
    fn a_sample_is_inside_from_the_begin_up_to_the_end() {
        let mut log = IntervalLog::default();
        log.begin(100, &GC, 1);
        assert_eq!(kinds_at(&log, 99), []);
        assert_eq!(kinds_at(&log, 100), [GC], "open: inside from its begin");
        assert_eq!(kinds_at(&log, 1_000), [GC], "open: inside until it ends");
        log.end(200, &GC, 1);
        assert_eq!(kinds_at(&log, 100), [GC]);
        assert_eq!(kinds_at(&log, 199), [GC]);
        assert_eq!(kinds_at(&log, 200), [], "the end is not inside");
        assert_eq!(kinds_at(&log, 1_000), []);
    }

    #[test]
    fn nested_kinds_are_both_under_way() {
        let mut log = IntervalLog::default();
        log.begin(100, &SAFEPOINT, 7);
        log.begin(110, &GC, 1);
        log.end(150, &GC, 1);
        log.end(160, &SAFEPOINT, 7);
        assert_eq!(kinds_at(&log, 105), [SAFEPOINT]);
        assert_eq!(kinds_at(&log, 120), [SAFEPOINT, GC]);
        assert_eq!(kinds_at(&log, 155), [SAFEPOINT]);
        assert_eq!(kinds_at(&log, 160), []);
    }

    /// Intervals of one kind with different ids may overlap, and end in any order: the kind is
    /// under way over their union.
    #[test]
    fn overlapping_intervals_of_a_kind_are_merged_in_any_order() {
        let mut log = IntervalLog::default();
        let jit = IntervalKind::Named("JIT compilations".into());
        for (id, begin, end) in [(1, 500, 600), (2, 100, 200), (3, 300, 400), (4, 150, 350)] {
            log.begin(begin, &jit, id);
            log.end(end, &jit, id);
        }
        let inside: Vec<u64> = (0..700)
            .step_by(10)
            .filter(|&t| !log.at(t).is_empty())
            .collect();
        let expected: Vec<u64> = (100..400).chain(500..600).step_by(10).collect();
        assert_eq!(inside, expected);
        assert_eq!(log.logs[0].closed, [(100, 400), (500, 600)]);
        // One of two open intervals ending leaves the kind under way from the other's begin.
        log.begin(1_000, &jit, 5);
        log.begin(900, &jit, 6);
        log.end(1_100, &jit, 5);
        assert!(!log.at(950).is_empty());
        assert!(!log.at(5_000).is_empty(), "interval 6 is still open");
        assert!(log.at(850).is_empty());
    }

    #[test]
    fn old_intervals_are_forgotten_and_the_bound_holds() {
        let mut log = IntervalLog::default();
        log.begin(10, &GC, 0);
        log.end(20, &GC, 0);
        log.begin(KEEP_NS + 100, &GC, 1);
        log.end(KEEP_NS + 200, &GC, 1);
        assert_eq!(log.logs[0].closed, [(KEEP_NS + 100, KEEP_NS + 200)]);
        assert_eq!(log.forgotten(), 0, "forgotten by age is not early");
        // Two kinds share the bound: the oldest ranges go first, whichever kind they are of.
        let jit = IntervalKind::Named("JIT compile".into());
        log.begin(KEEP_NS + 500, &jit, 0);
        log.end(KEEP_NS + 600, &jit, 0);
        for id in 0..MAX_KEPT as u64 + 10 {
            let at = KEEP_NS + 1_000 + 10 * id;
            log.begin(at, &GC, id + 2);
            log.end(at + 5, &GC, id + 2);
        }
        assert_eq!(log.logs[0].closed.len(), MAX_KEPT);
        assert!(
            log.logs[1].closed.is_empty(),
            "the oldest range, of another kind"
        );
        assert_eq!(log.forgotten(), 12);
    }

    #[test]
    fn unmatched_ends_and_kinds_past_the_bound_change_nothing() {
        let mut log = IntervalLog::default();
        log.end(50, &GC, 3);
        assert!(log.at(40).is_empty());
        for k in 0..MAX_KINDS + 2 {
            log.begin(100, &IntervalKind::Named(format!("k{k}")), 0);
        }
        assert_eq!(log.kinds().len(), MAX_KINDS);
        assert_eq!(log.forgotten(), 2);
        assert_eq!(log.at(100).indices().count(), MAX_KINDS);
    }
}
