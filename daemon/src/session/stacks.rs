//! A session's samples, aggregated by call stack.
//!
//! Every distinct location is stored once and named by a [`LocationId`]; every distinct stack
//! (a sequence of locations, leaf first, and how its walk ended) once, named
//! by a [`StackId`]; and the session counts samples per `(pid, stack)`. A long session on a
//! steady workload thus grows with the number of distinct stacks it meets, not with its
//! samples. A session without call graph has stacks of one location, and costs what the flat
//! counts it replaces did.
//!
//! Everything here only grows while the session runs, so a [`StackTable`] snapshot is a copy of
//! plain vectors: symbolisation works on the copy, off the manager thread.
//!
//! The table also knows which binaries its locations are in, noted as each location is first
//! interned: the binaries the session keeps open while it can be reported (see
//! [`crate::symbolize::Modules::retain`]), found without rescanning its locations.

use std::hash::BuildHasher;

use hashbrown::{HashMap, HashSet, HashTable};

use crate::{
    codemap::code::CodeId,
    symbolize::{Location, ModuleId},
    unwind::StackEnd,
};

/// A location's index in its session's [`StackTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocationId(pub u32);

/// A stack's index in its session's [`StackTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(pub u32);

/// Where a stack's locations are in [`StackTable::frames`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackSpan {
    /// First location.
    pub start: u32,
    /// Number of locations.
    pub len: u32,
    /// How the walk ended; `None` for a leaf alone (no call graph).
    pub end: Option<StackEnd>,
}

impl StackSpan {
    /// Cut at the depth limit: its outermost callers are missing.
    pub fn truncated(&self) -> bool {
        self.end == Some(StackEnd::FrameLimit)
    }
}

/// The interned locations and stacks of one session, and its samples per `(pid, stack)`.
#[derive(Clone, Debug, Default)]
pub struct StackTable {
    /// Distinct locations, by [`LocationId`].
    pub locations: Vec<Location>,
    /// The locations of every stack, stack after stack, each leaf first.
    pub frames: Vec<LocationId>,
    /// Distinct stacks, by [`StackId`].
    pub stacks: Vec<StackSpan>,
    /// Samples per process and stack.
    pub counts: HashMap<(u32, StackId), u64, foldhash::fast::RandomState>,
    location_index: HashTable<LocationId>,
    stack_index: HashTable<StackId>,
    /// The binaries of its locations.
    modules: HashSet<ModuleId, foldhash::fast::RandomState>,
    hasher: foldhash::fast::RandomState,
    /// Reused for each sample's location ids, so that counting allocates nothing.
    scratch: Vec<LocationId>,
}

impl StackTable {
    /// Counts one sample of `pid` whose stack is `locations` (leaf first), returning its stack.
    pub fn count(
        &mut self,
        pid: u32,
        locations: impl IntoIterator<Item = Location>,
        end: Option<StackEnd>,
    ) -> StackId {
        let stack = self.intern(locations, end);
        *self.counts.entry((pid, stack)).or_insert(0) += 1;
        stack
    }

    /// The id of the stack `locations` (leaf first), interning it on first sight.
    pub fn intern(
        &mut self,
        locations: impl IntoIterator<Item = Location>,
        end: Option<StackEnd>,
    ) -> StackId {
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        ids.extend(locations.into_iter().map(|l| self.location(l)));
        let stack = self.stack(&ids, end);
        self.scratch = ids;
        stack
    }

    /// The locations of a stack (leaf first) and how it ended.
    pub fn stack_of(&self, stack: StackId) -> (Vec<Location>, Option<StackEnd>) {
        let Some(span) = self.stacks.get(stack.0 as usize) else {
            return (Vec::new(), None);
        };
        let start = span.start as usize;
        let locations = self.frames[start..start + span.len as usize]
            .iter()
            .map(|id| self.locations[id.0 as usize])
            .collect();
        (locations, span.end)
    }

    /// Takes back one sample of `pid` counted in `stack` (it is counted elsewhere now).
    pub fn uncount(&mut self, pid: u32, stack: StackId) {
        if let Some(n) = self.counts.get_mut(&(pid, stack)) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&(pid, stack));
            }
        }
    }

    /// The binaries the session's samples are in: those of its locations, and those noted by
    /// [`StackTable::hold`].
    pub fn modules(&self) -> impl Iterator<Item = ModuleId> + '_ {
        self.modules.iter().copied()
    }

    /// The codes of its locations in generated code: those the code store keeps while the
    /// session can be reported.
    pub fn codes(&self) -> impl Iterator<Item = CodeId> + '_ {
        self.locations.iter().filter_map(|l| match l {
            Location::Jit { code, .. } => Some(*code),
            _ => None,
        })
    }

    /// Notes the binaries of `locations` as the session's before they are counted: a sample
    /// waiting for its code map is counted later, and its binaries must stay open until then.
    pub fn hold(&mut self, locations: impl IntoIterator<Item = Location>) {
        for location in locations {
            if let Location::File { module, .. } = location {
                self.modules.insert(module);
            }
        }
    }

    /// The id of a location, interning it on first sight.
    pub fn location(&mut self, location: Location) -> LocationId {
        let hash = self.hasher.hash_one(location);
        let locations = &mut self.locations;
        let modules = &mut self.modules;
        *self
            .location_index
            .entry(
                hash,
                |id| locations[id.0 as usize] == location,
                |id| self.hasher.hash_one(locations[id.0 as usize]),
            )
            .or_insert_with(|| {
                if let Location::File { module, .. } = location {
                    modules.insert(module);
                }
                locations.push(location);
                LocationId(locations.len() as u32 - 1)
            })
            .get()
    }

    /// The id of a stack, interning it on first sight.
    pub fn stack(&mut self, ids: &[LocationId], end: Option<StackEnd>) -> StackId {
        let hash = self.hasher.hash_one((ids, end));
        let (frames, stacks) = (&mut self.frames, &mut self.stacks);
        let ids_of = |span: &StackSpan| -> &[LocationId] {
            let start = span.start as usize;
            &frames[start..start + span.len as usize]
        };
        *self
            .stack_index
            .entry(
                hash,
                |id| {
                    let span = &stacks[id.0 as usize];
                    span.end == end && ids_of(span) == ids
                },
                |id| {
                    let span = &stacks[id.0 as usize];
                    self.hasher.hash_one((ids_of(span), span.end))
                },
            )
            .or_insert_with(|| {
                let start = frames.len() as u32;
                frames.extend_from_slice(ids);
                stacks.push(StackSpan {
                    start,
                    len: ids.len() as u32,
                    end,
                });
                StackId(stacks.len() as u32 - 1)
            })
            .get()
    }

    /// A copy for a profile: the tables without their indexes.
    pub fn snapshot(&self) -> StackSnapshot {
        StackSnapshot {
            locations: self.locations.clone(),
            frames: self.frames.clone(),
            stacks: self.stacks.clone(),
            counts: self
                .counts
                .iter()
                .map(|(&(pid, stack), &n)| (pid, stack, n))
                .collect(),
        }
    }
}

/// A session's stacks as a profile is built from them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackSnapshot {
    /// Distinct locations, by [`LocationId`].
    pub locations: Vec<Location>,
    /// The locations of every stack, leaf first.
    pub frames: Vec<LocationId>,
    /// Distinct stacks, by [`StackId`].
    pub stacks: Vec<StackSpan>,
    /// Samples per process and stack.
    pub counts: Vec<(u32, StackId, u64)>,
}

impl StackSnapshot {
    /// The location ids of a stack, leaf first.
    pub fn ids_of(&self, stack: StackId) -> &[LocationId] {
        let span = &self.stacks[stack.0 as usize];
        let start = span.start as usize;
        &self.frames[start..start + span.len as usize]
    }

    /// The location of an id.
    pub fn location(&self, id: LocationId) -> Location {
        self.locations[id.0 as usize]
    }

    /// Samples per process and leaf location: the flat profile.
    pub fn leaf_counts(&self) -> Vec<(u32, Location, u64)> {
        let mut leaves: std::collections::HashMap<(u32, Location), u64> =
            std::collections::HashMap::new();
        for &(pid, stack, n) in &self.counts {
            if let Some(&leaf) = self.ids_of(stack).first() {
                *leaves.entry((pid, self.location(leaf))).or_insert(0) += n;
            }
        }
        leaves.into_iter().map(|((p, l), n)| (p, l, n)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DONE: Option<StackEnd> = Some(StackEnd::Complete);

    fn k(ip: u64) -> Location {
        Location::Kernel { ip }
    }

    #[test]
    fn stacks_and_locations_are_stored_once() {
        let mut table = StackTable::default();
        let a = table.count(1, [k(1), k(2), k(3)], DONE);
        let b = table.count(1, [k(1), k(2), k(3)], DONE);
        let c = table.count(2, [k(1), k(2), k(3)], DONE);
        assert_eq!(a, b);
        assert_eq!(a, c, "one stack for both processes");
        let truncated = table.count(1, [k(1), k(2), k(3)], Some(StackEnd::FrameLimit));
        assert_ne!(a, truncated, "a cut stack is not the whole one");
        let other = table.count(1, [k(2), k(3)], DONE);
        assert_ne!(a, other);
        assert_eq!(table.locations.len(), 3);
        assert_eq!(table.stacks.len(), 3);
        assert_eq!(table.frames.len(), 3 + 3 + 2);
        assert_eq!(table.counts[&(1, a)], 2);
        assert_eq!(table.counts[&(2, a)], 1);
        let snapshot = table.snapshot();
        let other_locations: Vec<Location> = snapshot
            .ids_of(other)
            .iter()
            .map(|&id| snapshot.location(id))
            .collect();
        assert_eq!(other_locations, [k(2), k(3)]);
        // Growth follows distinct stacks: a million more samples of known stacks add nothing.
        for _ in 0..1000 {
            table.count(1, [k(1), k(2), k(3)], DONE);
        }
        assert_eq!((table.stacks.len(), table.frames.len()), (3, 8));
    }

    fn file(module: u64, offset: u64) -> Location {
        Location::File {
            module: ModuleId(module),
            offset,
            main_executable: false,
        }
    }

    /// The binaries a session keeps open are those of its locations, noted as they are first
    /// interned.
    #[test]
    fn the_binaries_of_its_locations_are_known_as_they_are_interned() {
        let mut table = StackTable::default();
        assert_eq!(table.modules().count(), 0);
        table.count(1, [file(3, 0x10), k(1), file(4, 0x20)], DONE);
        table.count(1, [file(3, 0x30)], DONE);
        table.count(2, [file(3, 0x10), k(1), file(4, 0x20)], DONE);
        let mut modules: Vec<ModuleId> = table.modules().collect();
        modules.sort();
        assert_eq!(modules, [ModuleId(3), ModuleId(4)]);
    }

    #[test]
    fn snapshots_give_the_flat_profile_by_leaf() {
        let mut table = StackTable::default();
        table.count(1, [k(1), k(2)], DONE);
        table.count(1, [k(1), k(3)], DONE);
        table.count(1, [k(2)], DONE);
        let snapshot = table.snapshot();
        let mut leaves = snapshot.leaf_counts();
        leaves.sort();
        assert_eq!(leaves, [(1, k(1), 2), (1, k(2), 1)]);
    }
}
