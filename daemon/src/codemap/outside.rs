//! Entries of a code map file that name code outside the executable mappings known when they
//! were read: held, and checked again at later reads, rather than refused for good.
//!
//! A VM writes an entry just after it maps the code, and the daemon's copy of the process's
//! mappings may be older than that: CPython 3.12 `-X perf` maps a page of trampolines and
//! lists them in its perf map, and a read of that map against mappings taken at the exec that
//! started the program refused every entry (all 183 of them) for the life of the process, so
//! no Python frame was ever named. So an entry outside is held; each later read checks the
//! held entries against the mappings it has (kept current by the process table), and lets
//! those that now fit through, stamped as when they were first read, in file order. An entry
//! is refused only when nothing more can make it fit: its process exited, a newer snapshot of
//! the file replaced it, or more than [`MAX_HELD`] wait already.

use std::collections::BTreeMap;

use super::refusals::{Reason, Refusals};

/// Most entries one source holds; one more is refused at once. Runtimes list a few hundred
/// entries outside every executable mapping for good (`node --perf-basic-prof`), each checked
/// again at every read.
pub const MAX_HELD: usize = 4096;

/// One held entry: where its code is, when it was first read, and what it says.
#[derive(Debug)]
struct Held<T> {
    /// When the entry was first read (its time as a change).
    timestamp_ns: u64,
    end: u64,
    /// For the log, should it be refused in the end.
    example: String,
    entry: T,
}

/// The entries of one source held for a later check, in the order the source gave them.
#[derive(Debug)]
pub struct Outside<T> {
    /// By (start, arrival): arrival keeps file order among entries at one start.
    held: BTreeMap<(u64, u64), Held<T>>,
    arrivals: u64,
    /// The longest held range: how far back a range query must look for overlaps.
    longest: u64,
}

impl<T> Default for Outside<T> {
    fn default() -> Self {
        Outside {
            held: BTreeMap::new(),
            arrivals: 0,
            longest: 0,
        }
    }
}

impl<T> Outside<T> {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Holds `entry`, for code at `[start, end)` read at `timestamp_ns`. Past [`MAX_HELD`] it
    /// is refused instead, in `refusals`.
    pub fn hold(
        &mut self,
        timestamp_ns: u64,
        start: u64,
        end: u64,
        entry: T,
        example: impl FnOnce() -> String,
        refusals: &mut Refusals,
    ) {
        if self.held.len() >= MAX_HELD {
            refusals.refuse(Reason::OutsideExecutable, 1, example);
            return;
        }
        self.arrivals += 1;
        self.longest = self.longest.max(end.saturating_sub(start));
        self.held.insert(
            (start, self.arrivals),
            Held {
                timestamp_ns,
                end,
                example: example(),
                entry,
            },
        );
    }

    /// Drops the held entries that overlap `[start, end)`: a later entry for that code was
    /// read (in a perf map, the later line wins). Answers how many went.
    pub fn supersede(&mut self, start: u64, end: u64) -> usize {
        if self.held.is_empty() {
            return 0;
        }
        let from = start.saturating_sub(self.longest);
        let overlapping: Vec<(u64, u64)> = self
            .held
            .range((from, 0)..(end, 0))
            .filter(|(_, h)| h.end > start)
            .map(|(&key, _)| key)
            .collect();
        for key in &overlapping {
            self.held.remove(key);
        }
        overlapping.len()
    }

    /// Takes the held entries that `inside` now finds inside executable mappings, with the time
    /// each was first read, in the order they were held.
    pub fn release(&mut self, mut inside: impl FnMut(u64, u64) -> bool) -> Vec<(u64, T)> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let fit: Vec<(u64, u64)> = self
            .held
            .iter()
            .filter(|&(&(start, _), h)| inside(start, h.end))
            .map(|(&key, _)| key)
            .collect();
        let mut released: Vec<(u64, Held<T>)> = fit
            .into_iter()
            .filter_map(|key| Some((key.1, self.held.remove(&key)?)))
            .collect();
        released.sort_by_key(|&(arrival, _)| arrival);
        if self.held.is_empty() {
            self.longest = 0;
        }
        released
            .into_iter()
            .map(|(_, h)| (h.timestamp_ns, h.entry))
            .collect()
    }

    /// Refuses every held entry, in `refusals`: nothing can make them fit any more.
    pub fn give_up(&mut self, refusals: &mut Refusals) {
        let held = std::mem::take(&mut self.held);
        self.longest = 0;
        let mut examples = held.into_values().map(|h| h.example);
        if let Some(first) = examples.next() {
            refusals.refuse(
                Reason::OutsideExecutable,
                1 + examples.count() as u64,
                || first,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(outside: &mut Outside<&'static str>, refusals: &mut Refusals, at: (u64, u64, u64)) {
        let (ts, start, end) = at;
        outside.hold(ts, start, end, "e", || format!("{start:#x}"), refusals);
    }

    #[test]
    fn entries_that_fit_later_are_released_in_order_with_their_first_time() {
        let mut refusals = Refusals::new(1, "test");
        let mut outside = Outside::default();
        outside.hold(10, 0x3000, 0x3010, "late", || "3000".into(), &mut refusals);
        outside.hold(20, 0x1000, 0x1010, "first", || "1000".into(), &mut refusals);
        outside.hold(30, 0x9000, 0x9010, "never", || "9000".into(), &mut refusals);
        assert!(outside.release(|_, _| false).is_empty());
        let mapped = |start: u64, end: u64| end <= 0x4000 && start >= 0x1000;
        assert_eq!(outside.release(mapped), vec![(10, "late"), (20, "first")]);
        assert_eq!(outside.len(), 1);
        assert_eq!(
            refusals.total(),
            0,
            "nothing refused while it may still fit"
        );
        outside.give_up(&mut refusals);
        assert!(outside.is_empty());
        assert_eq!(refusals.count(Reason::OutsideExecutable), 1);
    }

    #[test]
    fn a_later_entry_for_the_same_code_supersedes_held_ones() {
        let mut refusals = Refusals::new(1, "test");
        let mut outside = Outside::default();
        held(&mut outside, &mut refusals, (1, 0x1000, 0x2000));
        held(&mut outside, &mut refusals, (1, 0x2000, 0x2100));
        held(&mut outside, &mut refusals, (1, 0x5000, 0x5010));
        // Overlaps the first only (ranges are half-open).
        assert_eq!(outside.supersede(0x1800, 0x2000), 1);
        assert_eq!(outside.supersede(0x3000, 0x4000), 0);
        // Reaches back past a long entry's start.
        assert_eq!(outside.supersede(0x20ff, 0x5001), 2);
        assert!(outside.is_empty());
    }

    #[test]
    fn past_the_bound_entries_are_refused_at_once() {
        let mut refusals = Refusals::new(1, "test");
        let mut outside = Outside::default();
        for i in 0..MAX_HELD as u64 + 3 {
            held(&mut outside, &mut refusals, (i, i * 16, i * 16 + 16));
        }
        assert_eq!(outside.len(), MAX_HELD);
        assert_eq!(refusals.count(Reason::OutsideExecutable), 3);
        outside.give_up(&mut refusals);
        assert_eq!(
            refusals.count(Reason::OutsideExecutable),
            MAX_HELD as u64 + 3
        );
    }
}
