//! The code map of one process at one instant: which code occupies which addresses.
//!
//! Entries never overlap: a load replaces whatever it overlaps ("the later entry wins", as
//! perf does for perf maps). An entry of unknown size (Cog's constituents give starts only)
//! ends where the next entry starts, or at the zone's free start (CCFree) for the last one.
//! Lookups are O(log n) in a B-tree keyed by start address.

use std::collections::BTreeMap;

use super::code::CodeId;

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

/// The live code of a process.
#[derive(Clone, Debug)]
pub struct LiveMap {
    entries: BTreeMap<u64, LiveEntry>,
    /// The VM's code zone (start, free start, end), when it declared one.
    zone: Option<(u64, u64, u64)>,
    max_entries: usize,
}

impl Default for LiveMap {
    fn default() -> Self {
        LiveMap {
            entries: BTreeMap::new(),
            zone: None,
            max_entries: MAX_LIVE_ENTRIES,
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
        self.zone = Some((
            start,
            free_start.clamp(start, end.max(start)),
            end.max(start),
        ));
    }

    /// Where the entry starting at `start` ends, for lookups.
    fn end_of(&self, start: u64, entry: &LiveEntry) -> u64 {
        match entry.size {
            Some(size) => start.saturating_add(size),
            None => {
                let next = self
                    .entries
                    .range(start + 1..)
                    .next()
                    .map(|(&next, _)| next);
                let free = self.zone.map(|(_, free, _)| free).filter(|&f| f > start);
                match (next, free) {
                    (Some(n), Some(f)) => n.min(f),
                    (Some(n), None) => n,
                    (None, Some(f)) => f,
                    // The last entry of a map without a zone: bounded by nothing we know.
                    (None, None) => u64::MAX,
                }
            }
        }
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
        self.entries
            .remove(&start)
            .map(|e| e.code)
            .ok_or(Refusal::NoSuchEntry(start))
    }

    /// Frees every entry for which `which` holds (a perf map rewritten as a whole).
    pub fn free_where(&mut self, mut which: impl FnMut(CodeId) -> bool) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, e| !which(e.code));
        before - self.entries.len()
    }

    /// The code at `addr`: its start and id.
    pub fn lookup(&self, addr: u64) -> Option<(u64, CodeId)> {
        let (&start, entry) = self.entries.range(..=addr).next_back()?;
        (addr < self.end_of(start, entry)).then_some((start, entry.code))
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
}
