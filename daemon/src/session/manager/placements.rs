//! Raw stacks placed before, placed again without a look at their process: a hot loop's
//! samples repeat a few thousand stacks, and placing each frame (a process lookup and a search
//! of its mappings) then interning it in each session was most of the cost of a sample.
//!
//! A placement is the locations of one raw stack (the instruction pointer, the kernel's
//! frames, the user frame-pointer walk, and the flags that shape them) of one process, as its
//! mappings were when it was placed ([`crate::process::Process::maps_generation`]): once they
//! are read again, its samples are placed afresh. Only what needs nothing of the sample's time
//! or of a later read is kept: no frame in anonymous memory (generated code waits for its code
//! map), none outside every mapping (a miss may read the mappings again). Sessions intern a
//! placement's stack once and find it by its id ([`crate::session::StackTable::intern_placed`]).

use hashbrown::HashTable;
use vmscope_common::{Event, FLAG_KERNEL_TRUNCATED, FLAG_STACK, FLAG_USER_TRUNCATED};

use crate::{
    codemap::sample::SampleFrame,
    vocab::{Location, StackEnd},
};

/// Most placements kept; beyond, they are all forgotten and made again as samples come.
pub const MAX_PLACEMENTS: usize = 8192;

/// Most frames all placements hold together: a frame takes at most 32 bytes (its address and
/// its location), and stacks may be 254 frames deep, so the count of placements alone would let
/// them hold 64 MiB. This bounds them to 4 MiB.
pub const MAX_PLACED_FRAMES: usize = 1 << 17;

/// The placements of raw stacks.
#[derive(Default)]
pub struct Placements {
    index: HashTable<u32>,
    entries: Vec<Placement>,
    /// Frames the entries hold together.
    frames: usize,
    /// Ids are never reused, even after the placements are forgotten: sessions may still hold
    /// stacks under old ones.
    next_id: u64,
    hasher: foldhash::fast::RandomState,
    /// The raw stack of the sample being routed.
    key: Vec<u64>,
}

/// The locations of one raw stack of one process.
pub struct Placement {
    /// Unique for the daemon's life.
    pub id: u64,
    pid: u32,
    generation: u64,
    raw: Box<[u64]>,
    /// Its frames' locations, leaf first.
    pub locations: Box<[Location]>,
    /// How its walk ended.
    pub end: StackEnd,
}

impl Placements {
    /// Notes the raw stack of `event` (`kernel` and `user` as the kernel walked them), as the
    /// key of [`Placements::find`] and [`Placements::keep`]. `whole` says whether any session
    /// takes more than the leaf.
    pub fn note(&mut self, event: &Event, kernel: &[u64], user: &[u64], whole: bool) {
        let stacked = whole && event.flags & FLAG_STACK != 0;
        let shape = event.flags & (FLAG_KERNEL_TRUNCATED | FLAG_USER_TRUNCATED);
        self.key.clear();
        self.key.push(event.ip);
        self.key
            .push(u64::from(event.is_kernel()) | u64::from(stacked) << 1 | u64::from(shape) << 2);
        if stacked {
            let kernel = if event.is_kernel() { kernel } else { &[] };
            self.key.push(kernel.len() as u64);
            self.key.extend_from_slice(kernel);
            self.key.extend_from_slice(user);
        }
    }

    /// The placement of the noted raw stack of `pid` under its mappings' `generation`.
    pub fn find(&self, pid: u32, generation: u64) -> Option<&Placement> {
        let hash = hash_of(&self.hasher, pid, generation, &self.key);
        self.index
            .find(hash, |&i| {
                let entry = &self.entries[i as usize];
                entry.pid == pid && entry.generation == generation && *entry.raw == *self.key
            })
            .map(|&i| &self.entries[i as usize])
    }

    /// Keeps how the noted raw stack of `pid` was placed (`frames`, `end`) under its mappings'
    /// `generation`, unless a frame needs the sample's time or a later read.
    pub fn keep(&mut self, pid: u32, generation: u64, frames: &[SampleFrame], end: StackEnd) {
        let placeable = frames.iter().all(|f| {
            matches!(
                f.location,
                Location::File { .. } | Location::Vdso { .. } | Location::Kernel { .. }
            )
        });
        if !placeable || frames.is_empty() {
            return;
        }
        if self.entries.len() >= MAX_PLACEMENTS || self.frames + frames.len() > MAX_PLACED_FRAMES {
            self.entries.clear();
            self.index.clear();
            self.frames = 0;
        }
        self.frames += frames.len();
        let hash = hash_of(&self.hasher, pid, generation, &self.key);
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push(Placement {
            id,
            pid,
            generation,
            raw: self.key.as_slice().into(),
            locations: frames.iter().map(|f| f.location).collect(),
            end,
        });
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index
            .insert_unique(hash, entries.len() as u32 - 1, |&i| {
                let e = &entries[i as usize];
                hash_of(hasher, e.pid, e.generation, &e.raw)
            });
    }
}

fn hash_of(hasher: &foldhash::fast::RandomState, pid: u32, generation: u64, raw: &[u64]) -> u64 {
    use std::hash::BuildHasher as _;
    hasher.hash_one((pid, generation, raw))
}

#[cfg(test)]
mod tests {
    use vmscope_common::FLAG_KERNEL_MODE;

    use super::*;
    use crate::vocab::{ModuleId, Unexplained, UnmappedReason};

    fn frame(location: Location) -> SampleFrame {
        SampleFrame {
            location,
            address: 0x1000,
            lookup: 0x1000,
            code_start: 0,
        }
    }

    fn file(offset: u64) -> Location {
        Location::File {
            module: ModuleId(1),
            offset,
            main_executable: true,
        }
    }

    fn event(ip: u64, flags: u32) -> Event {
        Event {
            ip,
            flags: FLAG_STACK | flags,
            ..Event::default()
        }
    }

    #[test]
    fn a_placement_is_found_for_the_same_raw_stack_process_and_mappings_only() {
        let mut placements = Placements::default();
        placements.note(&event(0x1000, 0), &[], &[0x1000, 0x2000], true);
        assert!(placements.find(7, 1).is_none());
        let frames = [frame(file(0x10)), frame(file(0x20))];
        placements.keep(7, 1, &frames, StackEnd::FramePointerChainEnded);
        let found = placements.find(7, 1).expect("kept");
        assert_eq!(*found.locations, [file(0x10), file(0x20)]);
        let id = found.id;
        // Another process, mappings read again, another caller, another shape: not found.
        assert!(placements.find(8, 1).is_none());
        assert!(placements.find(7, 2).is_none());
        placements.note(&event(0x1000, 0), &[], &[0x1000, 0x3000], true);
        assert!(placements.find(7, 1).is_none());
        placements.note(
            &event(0x1000, FLAG_USER_TRUNCATED),
            &[],
            &[0x1000, 0x2000],
            true,
        );
        assert!(placements.find(7, 1).is_none());
        // Kernel frames are part of the key.
        placements.note(&event(0xffff_8000, FLAG_KERNEL_MODE), &[1], &[0x1000], true);
        placements.keep(
            7,
            1,
            &[frame(Location::Kernel { ip: 1 })],
            StackEnd::Complete,
        );
        placements.note(&event(0xffff_8000, FLAG_KERNEL_MODE), &[2], &[0x1000], true);
        assert!(placements.find(7, 1).is_none());
        // Ids are never reused.
        placements.note(&event(0x1000, 0), &[], &[0x1000, 0x2000], true);
        assert_eq!(placements.find(7, 1).map(|p| p.id), Some(id));
    }

    #[test]
    fn stacks_that_need_the_time_or_a_later_read_are_not_kept() {
        let mut placements = Placements::default();
        placements.note(&event(0x1000, 0), &[], &[0x1000, 0x2000], true);
        let anonymous = Location::Anonymous {
            pid: 7,
            start: 0x2000,
            end: 0x3000,
            why: Unexplained::NotLookedUp,
        };
        for odd in [anonymous, Location::Unmapped(UnmappedReason::NoMapping)] {
            placements.keep(7, 1, &[frame(file(0)), frame(odd)], StackEnd::Complete);
            assert!(placements.find(7, 1).is_none(), "{odd:?}");
        }
    }

    /// [`MAX_PLACED_FRAMES`]'s bound in bytes holds.
    #[test]
    fn a_placed_frame_takes_at_most_32_bytes() {
        assert!(size_of::<u64>() + size_of::<Location>() <= 32);
    }

    #[test]
    fn past_the_most_frames_all_are_forgotten() {
        let mut placements = Placements::default();
        let deep = vec![frame(file(0)); 254];
        let fit = MAX_PLACED_FRAMES / deep.len();
        for ip in 0..=fit as u64 {
            placements.note(&event(ip, 0), &[], &[], false);
            placements.keep(7, 1, &deep, StackEnd::Complete);
        }
        assert_eq!(placements.entries.len(), 1);
        assert_eq!(placements.frames, deep.len());
    }

    #[test]
    fn past_the_most_placements_all_are_forgotten_and_ids_go_on() {
        let mut placements = Placements::default();
        for ip in 0..MAX_PLACEMENTS as u64 + 1 {
            placements.note(&event(ip, 0), &[], &[], false);
            placements.keep(7, 1, &[frame(file(ip))], StackEnd::Complete);
        }
        assert_eq!(placements.entries.len(), 1);
        placements.note(&event(0, 0), &[], &[], false);
        assert!(placements.find(7, 1).is_none());
        placements.note(&event(MAX_PLACEMENTS as u64, 0), &[], &[], false);
        assert_eq!(
            placements.find(7, 1).map(|p| p.id),
            Some(MAX_PLACEMENTS as u64)
        );
    }
}
