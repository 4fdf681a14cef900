//! The code map of one process at one instant: which code occupies which addresses.
//!
//! Entries never overlap: a load replaces whatever it overlaps ("the later entry wins", as
//! perf does for perf maps). An entry of unknown size (Cog's constituents give starts only)
//! ends where the next entry starts, or at the zone's free start (CCFree) for the last one.
//! Edits go to a B-tree keyed by start address. Lookups go to a flat bucketed copy of it,
//! built once enough lookups have been made since the last edit to pay for it: a lookup there
//! reads a bucket and an entry or two, where the B-tree's range search walks and compares
//! through a node per level, several times slower over a million entries. A map edited between every few lookups keeps
//! using the B-tree, so no rebuild costs more than the slow lookups it replaces.

use std::{
    collections::BTreeMap,
    sync::{
        OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
};

use crate::vocab::CodeId;

/// An occupied address range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveEntry {
    /// The code there.
    pub code: CodeId,
    /// Its size in bytes; `None` when it extends to the next entry.
    pub size: Option<u64>,
}

/// Why a change could not be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A move or free names an address where no code starts.
    #[error("no code starts at {0:#x}")]
    NoSuchEntry(u64),
    /// The range wraps around the address space.
    #[error("code at {start:#x} of {size} bytes wraps around the address space")]
    Overflow {
        /// Start address.
        start: u64,
        /// Size.
        size: u64,
    },
    /// The code lies outside the VM's declared code zone.
    #[error("code at {0:#x} lies outside the code zone")]
    OutsideZone(u64),
    /// The map holds [`MAX_LIVE_ENTRIES`] already.
    #[error("the code map holds {MAX_LIVE_ENTRIES} entries already: code at {0:#x} is refused")]
    Full(u64),
}

/// Most live entries one process's map holds: several times what the biggest VMs keep (a
/// 1,000,000-line perf map fits), yet a bound on what a publisher loading code at ever new
/// addresses can make the daemon keep.
pub const MAX_LIVE_ENTRIES: usize = 4_000_000;

/// Lookups made in the B-tree since the last edit, beyond one in this many entries, build the
/// flat index: its build (a walk of the B-tree) costs about what that many B-tree lookups do.
const LOOKUPS_PER_ENTRY_BEFORE_INDEX: usize = 16;

/// Fewest B-tree lookups before an index is built, so that small maps edited often do not
/// rebuild one at every lookup.
const MIN_LOOKUPS_BEFORE_INDEX: usize = 32;

/// The live code of a process.
#[derive(Debug)]
pub struct LiveMap {
    entries: BTreeMap<u64, LiveEntry>,
    /// The VM's code zone (start, free start, end), when it declared one.
    zone: Option<(u64, u64, u64)>,
    max_entries: usize,
    /// The entries as sorted arrays, for lookups; dropped by every edit.
    index: OnceLock<Index>,
    /// Lookups served by the B-tree since the last edit.
    tree_lookups: AtomicUsize,
}

/// The live entries flattened for lookups: each entry's start, end (sized, or up to the next
/// entry or the zone's free start) and code in one sorted array, and buckets of equal width
/// over the address range saying where each bucket's entries begin. There are at most as many
/// buckets as entries, so a lookup in code spread evenly reads one bucket and one or two entries
/// (two cache misses), where a binary search reads twenty; code packed into a few clusters
/// falls back to a binary search inside a bucket.
struct Index {
    spans: Vec<Span>,
    /// The first entry's start: bucket 0 begins there.
    base: u64,
    /// log2 of a bucket's width in bytes.
    shift: u32,
    /// The index of the first entry starting in each bucket or after it; one more bucket than
    /// the address range needs, holding `spans.len()`.
    buckets: Vec<u32>,
}

#[derive(Clone, Copy)]
struct Span {
    start: u64,
    end: u64,
    code: CodeId,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Index({} entries)", self.spans.len())
    }
}

impl Index {
    fn new(spans: Vec<Span>) -> Index {
        let (Some(first), Some(last)) = (spans.first(), spans.last()) else {
            return Index {
                spans,
                base: 0,
                shift: 0,
                buckets: vec![0],
            };
        };
        let base = first.start;
        let range = last.start - base;
        let mut shift = 0;
        while (range >> shift) >= spans.len() as u64 {
            shift += 1;
        }
        let count = (range >> shift) as usize + 1;
        let mut buckets = Vec::with_capacity(count + 1);
        let mut at = 0;
        for bucket in 0..count as u64 {
            let begins = base + (bucket << shift);
            while spans[at].start < begins {
                at += 1;
            }
            buckets.push(at as u32);
        }
        buckets.push(spans.len() as u32);
        Index {
            spans,
            base,
            shift,
            buckets,
        }
    }

    fn lookup(&self, addr: u64) -> Option<(u64, CodeId)> {
        let offset = addr.checked_sub(self.base)?;
        let last = self.buckets.len() - 1;
        let bucket = usize::try_from(offset >> self.shift).map_or(last, |b| b.min(last));
        let first = self.buckets[bucket] as usize;
        let end = self.buckets[(bucket + 1).min(last)] as usize;
        let within = self.spans[first..end].partition_point(|span| span.start <= addr);
        // Entries before `first` start before the bucket, so before `addr`.
        let span = self.spans[(first + within).checked_sub(1)?];
        (addr < span.end).then_some((span.start, span.code))
    }
}

impl Default for LiveMap {
    fn default() -> Self {
        LiveMap {
            entries: BTreeMap::new(),
            zone: None,
            max_entries: MAX_LIVE_ENTRIES,
            index: OnceLock::new(),
            tree_lookups: AtomicUsize::new(0),
        }
    }
}

impl Clone for LiveMap {
    /// A copy of the entries; its index is built anew when lookups call for it.
    fn clone(&self) -> Self {
        LiveMap {
            entries: self.entries.clone(),
            zone: self.zone,
            max_entries: self.max_entries,
            ..LiveMap::default()
        }
    }
}

impl LiveMap {
    /// Number of live entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no code is live.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The codes of its entries (once per entry).
    pub fn codes(&self) -> impl Iterator<Item = CodeId> + '_ {
        self.entries.values().map(|e| e.code)
    }

    /// Declares the code zone: `[start, end)`, unused from `free_start` on.
    pub fn set_zone(&mut self, start: u64, free_start: u64, end: u64) {
        self.edited();
        self.zone = Some((
            start,
            free_start.clamp(start, end.max(start)),
            end.max(start),
        ));
    }

    /// Where the entry starting at `start` ends, for lookups.
    fn end_of(&self, start: u64, entry: &LiveEntry) -> u64 {
        let next = || {
            self.entries
                .range(start + 1..)
                .next()
                .map(|(&next, _)| next)
        };
        self.end_before(start, entry, next)
    }

    /// Where the entry starting at `start` ends when the next entry starts at `next()`: its
    /// size says, or else the next entry or the zone's free start, whichever comes first.
    fn end_before(&self, start: u64, entry: &LiveEntry, next: impl FnOnce() -> Option<u64>) -> u64 {
        match entry.size {
            Some(size) => start.saturating_add(size),
            None => {
                let free = self.zone.map(|(_, free, _)| free).filter(|&f| f > start);
                match (next(), free) {
                    (Some(n), Some(f)) => n.min(f),
                    (Some(n), None) => n,
                    (None, Some(f)) => f,
                    // The last entry of a map without a zone: bounded by nothing we know.
                    (None, None) => u64::MAX,
                }
            }
        }
    }

    /// Drops the lookup index: the entries or their ends change.
    fn edited(&mut self) {
        self.index.take();
        *self.tree_lookups.get_mut() = 0;
    }

    /// Loads code at `start`, replacing what it overlaps. Returns how many entries it replaced.
    pub fn load(&mut self, start: u64, size: Option<u64>, code: CodeId) -> Result<usize, Refusal> {
        let end = match size {
            Some(size) => start
                .checked_add(size)
                .ok_or(Refusal::Overflow { start, size })?,
            None => start
                .checked_add(1)
                .ok_or(Refusal::Overflow { start, size: 1 })?,
        };
        if let Some((zone_start, _, zone_end)) = self.zone
            && (start < zone_start || end > zone_end)
        {
            return Err(Refusal::OutsideZone(start));
        }
        // Checked before anything is replaced: a refused load leaves the map as it was.
        if self.entries.len() >= self.max_entries {
            return Err(Refusal::Full(start));
        }
        self.edited();
        let mut replaced = 0;
        // An entry starting before `start` that reaches into it.
        if let Some((&before, entry)) = self.entries.range(..start).next_back()
            && entry.size.is_some()
            && self.end_of(before, entry) > start
        {
            self.entries.remove(&before);
            replaced += 1;
        }
        // Usually nothing is there: look before collecting.
        while let Some((&s, _)) = self.entries.range(start..end).next() {
            self.entries.remove(&s);
            replaced += 1;
        }
        self.entries.insert(start, LiveEntry { code, size });
        Ok(replaced)
    }

    /// Moves the code at `from` to `to`, unchanged.
    pub fn move_code(&mut self, from: u64, to: u64) -> Result<CodeId, Refusal> {
        let entry = *self.entries.get(&from).ok_or(Refusal::NoSuchEntry(from))?;
        self.edited();
        self.entries.remove(&from);
        if let Err(e) = self.load(to, entry.size, entry.code) {
            // Leave the map as it was.
            self.entries.insert(from, entry);
            return Err(e);
        }
        Ok(entry.code)
    }

    /// Frees the code at `start`.
    pub fn free(&mut self, start: u64) -> Result<CodeId, Refusal> {
        self.edited();
        self.entries
            .remove(&start)
            .map(|e| e.code)
            .ok_or(Refusal::NoSuchEntry(start))
    }

    /// Frees every entry for which `which` holds (a perf map rewritten as a whole).
    pub fn free_where(&mut self, mut which: impl FnMut(CodeId) -> bool) -> usize {
        self.edited();
        let before = self.entries.len();
        self.entries.retain(|_, e| !which(e.code));
        before - self.entries.len()
    }

    /// The code at `addr`: its start and id.
    pub fn lookup(&self, addr: u64) -> Option<(u64, CodeId)> {
        if let Some(index) = self.index.get() {
            return index.lookup(addr);
        }
        // A load and a store, not an atomic add: lookups come from one thread at a time, and a
        // count that lost an increment to a race would only build the index a lookup later.
        let lookups = self.tree_lookups.load(Ordering::Relaxed) + 1;
        self.tree_lookups.store(lookups, Ordering::Relaxed);
        if lookups
            >= (self.entries.len() / LOOKUPS_PER_ENTRY_BEFORE_INDEX).max(MIN_LOOKUPS_BEFORE_INDEX)
        {
            return self.index.get_or_init(|| self.build_index()).lookup(addr);
        }
        self.tree_lookup(addr)
    }

    fn tree_lookup(&self, addr: u64) -> Option<(u64, CodeId)> {
        let (&start, entry) = self.entries.range(..=addr).next_back()?;
        (addr < self.end_of(start, entry)).then_some((start, entry.code))
    }

    fn build_index(&self) -> Index {
        let mut spans = Vec::with_capacity(self.entries.len());
        let mut entries = self.entries.iter().peekable();
        while let Some((&start, entry)) = entries.next() {
            let end = self.end_before(start, entry, || entries.peek().map(|&(&next, _)| next));
            spans.push(Span {
                start,
                end,
                code: entry.code,
            });
        }
        Index::new(spans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: CodeId = CodeId(1);
    const B: CodeId = CodeId(2);
    const C: CodeId = CodeId(3);

    #[test]
    fn sized_entries_replace_what_they_overlap() {
        let mut map = LiveMap::default();
        map.load(0x100, Some(0x40), A).unwrap();
        map.load(0x140, Some(0x40), B).unwrap();
        assert_eq!(map.lookup(0x13f), Some((0x100, A)));
        assert_eq!(map.lookup(0x140), Some((0x140, B)));
        assert_eq!(map.lookup(0x180), None);
        assert_eq!(map.lookup(0xff), None);
        // A later entry over the end of A and the start of B replaces both.
        assert_eq!(map.load(0x130, Some(0x20), C).unwrap(), 2);
        assert_eq!(map.lookup(0x100), None);
        assert_eq!(map.lookup(0x135), Some((0x130, C)));
        assert_eq!(map.lookup(0x160), None);
        assert_eq!(map.len(), 1);
    }

    #[test]
    fn unsized_entries_end_at_the_next_entry_or_ccfree() {
        let mut map = LiveMap::default();
        map.set_zone(0x1000, 0x1300, 0x2000);
        map.load(0x1000, None, A).unwrap();
        map.load(0x1100, None, B).unwrap();
        assert_eq!(map.lookup(0x10ff), Some((0x1000, A)));
        assert_eq!(map.lookup(0x1100), Some((0x1100, B)));
        assert_eq!(map.lookup(0x12ff), Some((0x1100, B)));
        assert_eq!(map.lookup(0x1300), None, "past CCFree is unused space");
        assert_eq!(
            map.load(0x2000, Some(4), C),
            Err(Refusal::OutsideZone(0x2000))
        );
    }

    #[test]
    fn moves_and_frees() {
        let mut map = LiveMap::default();
        map.load(0x100, Some(0x10), A).unwrap();
        map.load(0x200, Some(0x10), B).unwrap();
        assert_eq!(map.move_code(0x200, 0x100), Ok(B), "B moves over A");
        assert_eq!(map.lookup(0x105), Some((0x100, B)));
        assert_eq!(map.lookup(0x205), None);
        assert_eq!(
            map.move_code(0x300, 0x400),
            Err(Refusal::NoSuchEntry(0x300))
        );
        assert_eq!(map.free(0x100), Ok(B));
        assert!(map.is_empty());
        assert_eq!(map.free(0x100), Err(Refusal::NoSuchEntry(0x100)));
        assert_eq!(
            map.load(u64::MAX - 1, Some(4), A),
            Err(Refusal::Overflow {
                start: u64::MAX - 1,
                size: 4
            })
        );
        // Code of no size at the very last address has no end either.
        assert_eq!(
            map.load(u64::MAX, None, A),
            Err(Refusal::Overflow {
                start: u64::MAX,
                size: 1
            })
        );
        map.load(0x100, None, A).unwrap();
        assert!(map.move_code(0x100, u64::MAX).is_err());
        assert_eq!(
            map.lookup(0x100),
            Some((0x100, A)),
            "a refused move changes nothing"
        );
    }

    #[test]
    fn a_full_map_refuses_new_code_and_stays_as_it_was() {
        let mut map = LiveMap {
            max_entries: 2,
            ..LiveMap::default()
        };
        map.load(0x100, Some(0x10), A).unwrap();
        map.load(0x200, Some(0x10), B).unwrap();
        assert_eq!(map.load(0x100, Some(0x10), B), Err(Refusal::Full(0x100)));
        assert_eq!(map.lookup(0x105), Some((0x100, A)));
        assert_eq!(
            map.move_code(0x200, 0x300),
            Ok(B),
            "a move frees its old place"
        );
        map.free(0x100).unwrap();
        assert_eq!(map.load(0x400, None, A), Ok(0));
    }

    #[test]
    fn the_index_finds_what_the_tree_finds_and_edits_drop_it() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        let mut map = LiveMap::default();
        map.set_zone(0x1000, 0x9_0000, 0x10_0000);
        for round in 0..20u64 {
            // Sized and unsized entries, some overlapping, some freed or moved.
            for i in 0..200 {
                let start = 0x1000 + next(0x8_0000);
                let size = (i % 3 != 0).then(|| 1 + next(0x400));
                let _ = map.load(start, size, CodeId(round * 1000 + i));
            }
            let starts: Vec<u64> = map.entries.keys().copied().collect();
            for &start in starts.iter().step_by(7) {
                map.free(start).unwrap();
            }
            let _ = map.move_code(starts[1], 0x1000 + next(0x8_0000));
            assert!(map.index.get().is_none(), "an edit drops the index");
            let addresses: Vec<u64> = (0..2000).map(|_| 0xf00 + next(0x9_0200)).collect();
            for &addr in &addresses {
                assert_eq!(map.lookup(addr), map.tree_lookup(addr), "{addr:#x}");
            }
            assert!(map.index.get().is_some(), "2000 lookups build the index");
            for &start in map.entries.keys() {
                assert_eq!(map.lookup(start).map(|(s, _)| s), Some(start));
            }
        }
        // The zone's free start bounds the last unsized entry.
        map.set_zone(0x1000, 0x2000, 0x10_0000);
        assert!(map.index.get().is_none(), "a new zone drops the index");
    }

    #[test]
    fn the_index_finds_code_in_clusters_far_apart() {
        // Two clusters 2^46 bytes apart: nearly every entry falls in the first or last bucket,
        // searched within.
        let mut map = LiveMap::default();
        for i in 0..500u64 {
            map.load(0x10_0000 + i * 0x40, Some(0x20), CodeId(i))
                .unwrap();
            map.load(0x4000_0000_0000 + i * 0x40, None, CodeId(1000 + i))
                .unwrap();
        }
        let addresses = (0..500u64).flat_map(|i| {
            [0x10_0000 + i * 0x40 + 0x1f, 0x10_0000 + i * 0x40 + 0x20]
                .into_iter()
                .chain([
                    0x4000_0000_0000 + i * 0x40 + 0x3f,
                    0x2000_0000_0000 + i,
                    u64::MAX - i,
                    i,
                ])
        });
        for addr in addresses.clone() {
            map.lookup(addr);
        }
        assert!(map.index.get().is_some());
        for addr in addresses {
            assert_eq!(map.lookup(addr), map.tree_lookup(addr), "{addr:#x}");
        }
        assert_eq!(
            map.lookup(u64::MAX - 1),
            Some((0x4000_0000_0000 + 499 * 0x40, CodeId(1499)))
        );
    }
}
