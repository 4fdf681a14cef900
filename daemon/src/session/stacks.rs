//! A session's samples, aggregated by call stack.
//!
//! Every distinct location is stored once and named by a [`LocationId`]; every distinct stack
//! (a sequence of locations, leaf first, and how its walk ended) once, named
//! by a [`StackId`]; and the session counts samples per `(thread, stack)` ([`Task`]). A long session on a
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
//!
//! A session keeps at most [`StackTable::max_stacks`] distinct stacks, so that a target whose
//! every sample takes a new call path (or a user who makes one to exhaust the daemon) costs a
//! bounded amount. A sample whose stack is new beyond that is counted with its leaf alone
//! under a [`Location::StackLimit`] caller: self time and totals stay whole, only its callers
//! are not kept, and the samples so counted are reported. Beyond a quarter more (room for new
//! leaves), such a sample is counted under the marker alone.
//!
//! A stack is also told apart by the intervals its VM had under way when the sample was taken
//! (a scavenge, a safepoint...: [`DuringId`]), so that a profile can say where the time went
//! during each kind, and cut a flame graph to it, from the same counts.
//!
//! Off the CPU (`--mode off-cpu`, `wall`), a thread's blocks are interned in the same stacks,
//! and counted apart ([`StackTable::blocks`]): per `(thread, stack, why it was off the CPU)`,
//! how many and their time. A stack the thread both ran and blocked in (rare: a block's stack
//! goes through the scheduler) has both counts.
//!
//! A stack is told apart, too, by the labels its thread had set when the sample was taken
//! ([`LabelsId`]: each distinct set once per session), so that a profile can be grouped and
//! cut by them from the same counts.
//!
//! A thread whose VM publishes its send counter has, with each sample, the sends it executed
//! since its previous one: summed per `(thread, stack)` ([`StackTable::sends`]) beside the
//! samples, and moved with them when their attribution changes.

use std::{hash::BuildHasher, sync::Arc};

use hashbrown::{HashMap, HashSet, HashTable};

use vmscope_model::{BlockState, IntervalKind, Label};

use crate::{
    stats::intervals::During,
    vocab::{CodeId, Location, ModuleId, StackEnd, Task},
};

/// Most distinct sets of interval kinds one session tells apart; samples under way in more
/// are counted as in none.
pub const MAX_DURING_SETS: usize = 4096;

/// Most distinct stacks a session keeps by default (`vmscoped --max-stacks-per-session`): room
/// for the tens of thousands a long profile of a large program has, while the memory of the
/// session and of each profile built from it (which grow with its stacks) stays bounded.
pub const DEFAULT_MAX_STACKS: usize = 65_536;

/// A location's index in its session's [`StackTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocationId(pub u32);

/// A stack's index in its session's [`StackTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(pub u32);

/// A set of interval kinds a VM had under way, as an index into its session's
/// [`StackTable::during`]: 0 is none (most samples, and every sample of a process that
/// publishes no intervals).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DuringId(pub u16);

/// A set of labels a thread had set, as an index into its session's [`StackTable::labels`]: 0
/// is none (most samples, and every sample of a process that publishes no labels).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelsId(pub u16);

/// Most distinct label sets one session tells apart; samples with more are counted as
/// unlabelled (and said so: [`StackTable::labels_beyond_limit`]).
pub const MAX_LABEL_SETS: usize = 4096;

/// What a stack is told apart by beside its locations and end: when its samples were taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StackTags {
    /// The intervals under way.
    pub during: DuringId,
    /// The labels its thread had set.
    pub labels: LabelsId,
}

impl From<DuringId> for StackTags {
    fn from(during: DuringId) -> StackTags {
        StackTags {
            during,
            labels: LabelsId(0),
        }
    }
}

/// Where a stack's locations are in [`StackTable::frames`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackSpan {
    /// First location.
    pub start: u32,
    /// Number of locations.
    pub len: u32,
    /// How the walk ended; `None` for a leaf alone (no call graph).
    pub end: Option<StackEnd>,
    /// The intervals under way when its samples were taken.
    pub during: DuringId,
    /// The labels its thread had set then.
    pub labels: LabelsId,
}

impl StackSpan {
    /// What it is told apart by beside its locations and end.
    pub fn tags(&self) -> StackTags {
        StackTags {
            during: self.during,
            labels: self.labels,
        }
    }
}

impl StackSpan {
    /// Cut at the depth limit: its outermost callers are missing.
    pub fn truncated(&self) -> bool {
        self.end == Some(StackEnd::FrameLimit)
    }
}

/// Blocks of one thread in one stack and state: how many, and their time off the CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Blocks {
    /// How many.
    pub count: u64,
    /// Their time off the CPU inside the session, in nanoseconds.
    pub ns: u64,
}

/// The key of a thread's blocks: the thread, the stack it blocked in, why.
pub type BlockKey = (Task, StackId, BlockState);

/// The interned locations and stacks of one session, and its samples per `(thread, stack)`.
#[derive(Clone, Debug)]
pub struct StackTable {
    /// Distinct locations, by [`LocationId`].
    pub locations: Vec<Location>,
    /// The locations of every stack, stack after stack, each leaf first.
    pub frames: Vec<LocationId>,
    /// Distinct stacks, by [`StackId`].
    pub stacks: Vec<StackSpan>,
    /// Samples per thread and stack.
    pub counts: HashMap<(Task, StackId), u64, foldhash::fast::RandomState>,
    /// Blocks per thread, stack and why (off-CPU and wall sessions).
    pub blocks: HashMap<BlockKey, Blocks, foldhash::fast::RandomState>,
    /// Sends counted with the samples, per thread and stack (threads with a send counter).
    pub sends: HashMap<(Task, StackId), u64, foldhash::fast::RandomState>,
    /// Distinct sets of interval kinds, by [`DuringId`] (0, the empty set, included).
    pub during: Vec<Box<[IntervalKind]>>,
    during_index: HashMap<Box<[IntervalKind]>, DuringId, foldhash::fast::RandomState>,
    /// What a set of a process's interval log is here, by (log, set).
    during_of_log: HashMap<(u64, u32), DuringId, foldhash::fast::RandomState>,
    /// Distinct label sets, by [`LabelsId`] (0, no labels, included once any is).
    pub labels: Vec<Arc<[Label]>>,
    labels_index: HashMap<Arc<[Label]>, LabelsId, foldhash::fast::RandomState>,
    /// Samples whose label set was new once [`MAX_LABEL_SETS`] were told apart: counted
    /// unlabelled.
    labels_beyond_limit: u64,
    location_index: HashTable<LocationId>,
    stack_index: HashTable<StackId>,
    /// The binaries of its locations.
    modules: HashSet<ModuleId, foldhash::fast::RandomState>,
    hasher: foldhash::fast::RandomState,
    /// Reused for each sample's location ids, so that counting allocates nothing.
    scratch: Vec<LocationId>,
    /// Most distinct stacks kept whole (see the module's documentation).
    max_stacks: usize,
    /// Samples counted now in stacks cut at the limit.
    beyond_limit: u64,
    /// The stacks interned for placements of raw stacks the manager keeps, by (placement id,
    /// leaf alone): see [`StackTable::intern_placed`].
    placed: HashMap<(u64, bool), StackId, foldhash::fast::RandomState>,
}

/// Most placements a session remembers its stacks of ([`StackTable::intern_placed`]); beyond,
/// it forgets them all and interns again as they come.
pub const MAX_PLACED_STACKS: usize = 8192;

impl Default for StackTable {
    fn default() -> Self {
        StackTable::with_limit(DEFAULT_MAX_STACKS)
    }
}

impl StackTable {
    /// An empty table that keeps at most `max_stacks` distinct stacks whole.
    pub fn with_limit(max_stacks: usize) -> StackTable {
        StackTable {
            locations: Vec::new(),
            frames: Vec::new(),
            stacks: Vec::new(),
            counts: HashMap::default(),
            blocks: HashMap::default(),
            sends: HashMap::default(),
            during: Vec::new(),
            during_index: HashMap::default(),
            during_of_log: HashMap::default(),
            labels: Vec::new(),
            labels_index: HashMap::default(),
            labels_beyond_limit: 0,
            location_index: HashTable::new(),
            stack_index: HashTable::new(),
            modules: HashSet::default(),
            hasher: Default::default(),
            scratch: Vec::new(),
            max_stacks,
            beyond_limit: 0,
            placed: HashMap::default(),
        }
    }

    /// Most distinct stacks kept whole.
    pub fn max_stacks(&self) -> usize {
        self.max_stacks
    }

    /// Samples counted now with their leaf alone, their stack new once the table was full.
    pub fn beyond_limit(&self) -> u64 {
        self.beyond_limit
    }

    /// Counts one more sample of `task` in `stack`.
    pub fn add(&mut self, task: impl Into<Task>, stack: StackId) {
        *self.counts.entry((task.into(), stack)).or_insert(0) += 1;
        // Stacks are cut only once the table is full: below that, no sample looks.
        if self.stacks.len() >= self.max_stacks && self.cut_at_limit(stack) {
            self.beyond_limit += 1;
        }
    }

    /// Adds the `sends` counted with a sample of `task` in `stack`.
    pub fn add_sends(&mut self, task: impl Into<Task>, stack: StackId, sends: u64) {
        if sends > 0 {
            let sum = self.sends.entry((task.into(), stack)).or_insert(0);
            *sum = sum.saturating_add(sends);
        }
    }

    /// Moves the `sends` of a sample of `task` from stack `from` to `to`.
    pub fn move_sends(&mut self, task: impl Into<Task>, from: StackId, to: StackId, sends: u64) {
        if sends == 0 || from == to {
            return;
        }
        let task = task.into();
        if let Some(sum) = self.sends.get_mut(&(task, from)) {
            *sum = sum.saturating_sub(sends);
            if *sum == 0 {
                self.sends.remove(&(task, from));
            }
        }
        self.add_sends(task, to, sends);
    }

    /// Counts one block of `task` in `stack`, off the CPU `ns` for `state`.
    pub fn add_block(&mut self, task: impl Into<Task>, stack: StackId, state: BlockState, ns: u64) {
        let blocks = self.blocks.entry((task.into(), stack, state)).or_default();
        blocks.count += 1;
        blocks.ns = blocks.ns.saturating_add(ns);
    }

    /// Takes back one block of `task` counted in `stack` (it is counted elsewhere now).
    pub fn remove_block(
        &mut self,
        task: impl Into<Task>,
        stack: StackId,
        state: BlockState,
        ns: u64,
    ) {
        let key = (task.into(), stack, state);
        if let Some(blocks) = self.blocks.get_mut(&key) {
            blocks.count = blocks.count.saturating_sub(1);
            blocks.ns = blocks.ns.saturating_sub(ns);
            if blocks.count == 0 {
                self.blocks.remove(&key);
            }
        }
    }

    /// Whether `stack` is one of the limit's: a leaf (or nothing) under [`Location::StackLimit`].
    pub fn cut_at_limit(&self, stack: StackId) -> bool {
        self.stacks.get(stack.0 as usize).is_some_and(|span| {
            span.len > 0
                && self.locations[self.frames[(span.start + span.len - 1) as usize].0 as usize]
                    == Location::StackLimit
        })
    }

    /// Counts one sample of `task` whose stack is `locations` (leaf first), taken `during`
    /// those intervals, returning its stack.
    pub fn count(
        &mut self,
        task: impl Into<Task>,
        locations: impl IntoIterator<Item = Location>,
        end: Option<StackEnd>,
        tags: impl Into<StackTags>,
    ) -> StackId {
        let stack = self.intern(locations, end, tags);
        self.add(task, stack);
        stack
    }

    /// The id of the stack `locations` (leaf first), interning it on first sight.
    pub fn intern(
        &mut self,
        locations: impl IntoIterator<Item = Location>,
        end: Option<StackEnd>,
        tags: impl Into<StackTags>,
    ) -> StackId {
        let tags = tags.into();
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        let stack = if self.stacks.len() < self.max_stacks {
            ids.extend(locations.into_iter().map(|l| self.location(l)));
            self.stack(&ids, end, tags)
        } else {
            self.intern_beyond_limit(&mut ids, locations, end, tags)
        };
        self.scratch = ids;
        stack
    }

    /// The stack of a raw stack the manager placed before (`placement`, an id never reused
    /// for other locations): [`StackTable::intern`] once, then found by the id, so that a hot
    /// loop's samples intern no location again. Taken outside any interval. A stack interned
    /// past the limit is not remembered: what it becomes there depends on how full the table
    /// is.
    pub fn intern_placed(
        &mut self,
        placement: u64,
        leaf_only: bool,
        locations: &[Location],
        end: Option<StackEnd>,
    ) -> StackId {
        if let Some(&stack) = self.placed.get(&(placement, leaf_only)) {
            return stack;
        }
        let whole = self.stacks.len() < self.max_stacks;
        let stack = self.intern(locations.iter().copied(), end, DuringId(0));
        if whole {
            if self.placed.len() >= MAX_PLACED_STACKS {
                self.placed.clear();
            }
            self.placed.insert((placement, leaf_only), stack);
        }
        stack
    }

    /// [`StackTable::intern`] once the table holds its most stacks: a known stack is found
    /// without interning anything, a new one becomes its leaf under [`Location::StackLimit`]
    /// (or the marker alone, past a quarter more stacks).
    fn intern_beyond_limit(
        &mut self,
        ids: &mut Vec<LocationId>,
        locations: impl IntoIterator<Item = Location>,
        end: Option<StackEnd>,
        tags: StackTags,
    ) -> StackId {
        let mut locations = locations.into_iter();
        let leaf = locations.next();
        let known = leaf.into_iter().chain(locations).all(|location| {
            let found = self.find_location(location);
            ids.extend(found);
            found.is_some()
        });
        if known && let Some(stack) = self.find_stack(ids, end, tags) {
            return stack;
        }
        ids.clear();
        let marker = self.location(Location::StackLimit);
        if let Some(leaf) = leaf.filter(|&l| l != Location::StackLimit) {
            let under_marker = self
                .find_location(leaf)
                .and_then(|id| self.find_stack(&[id, marker], end, tags));
            if let Some(stack) = under_marker {
                return stack;
            }
            if self.stacks.len() < self.max_stacks + self.max_stacks / 4 {
                ids.push(self.location(leaf));
            }
        }
        ids.push(marker);
        // How the walk ended is kept: a sample placed again keeps it (see `restack`).
        self.stack(ids, end, tags)
    }

    /// The id of a location already interned.
    fn find_location(&self, location: Location) -> Option<LocationId> {
        let hash = self.hasher.hash_one(location);
        self.location_index
            .find(hash, |id| self.locations[id.0 as usize] == location)
            .copied()
    }

    /// The id of a stack already interned.
    fn find_stack(
        &self,
        ids: &[LocationId],
        end: Option<StackEnd>,
        tags: StackTags,
    ) -> Option<StackId> {
        let hash = self.hasher.hash_one((ids, end, tags));
        self.stack_index
            .find(hash, |id| {
                let span = &self.stacks[id.0 as usize];
                let start = span.start as usize;
                span.end == end
                    && span.tags() == tags
                    && &self.frames[start..start + span.len as usize] == ids
            })
            .copied()
    }

    /// The id of a set of interval kinds under way, interning it on first sight. A process's
    /// set is looked up by its log and bits: a sample in a GC costs one hash lookup.
    pub fn during(&mut self, during: Option<During<'_>>) -> DuringId {
        let Some(during) = during else {
            return DuringId(0);
        };
        if let Some(&id) = self.during_of_log.get(&(during.log, during.set.0)) {
            return id;
        }
        if self.during.is_empty() {
            self.during.push(Box::new([]));
        }
        let set: Box<[IntervalKind]> = during.kinds().cloned().collect();
        let id = match self.during_index.get(&set) {
            Some(&id) => id,
            None if self.during.len() < MAX_DURING_SETS => {
                let id = DuringId(self.during.len() as u16);
                self.during.push(set.clone());
                self.during_index.insert(set, id);
                id
            }
            None => DuringId(0),
        };
        // Bounded as the sets are: past it, a log's set is looked up anew each time.
        if self.during_of_log.len() < 4 * MAX_DURING_SETS {
            self.during_of_log.insert((during.log, during.set.0), id);
        }
        id
    }

    /// The id of a label set, interning it on first sight: none for `None` or an empty set,
    /// and none (counted) past [`MAX_LABEL_SETS`].
    pub fn labels(&mut self, labels: Option<&Arc<[Label]>>) -> LabelsId {
        let Some(labels) = labels.filter(|l| !l.is_empty()) else {
            return LabelsId(0);
        };
        if let Some(&id) = self.labels_index.get(labels) {
            return id;
        }
        if self.labels.is_empty() {
            self.labels.push(Arc::new([]));
        }
        if self.labels.len() >= MAX_LABEL_SETS {
            self.labels_beyond_limit += 1;
            return LabelsId(0);
        }
        let id = LabelsId(self.labels.len() as u16);
        self.labels.push(labels.clone());
        self.labels_index.insert(labels.clone(), id);
        id
    }

    /// Samples counted unlabelled because their set was new past [`MAX_LABEL_SETS`].
    pub fn labels_beyond_limit(&self) -> u64 {
        self.labels_beyond_limit
    }

    /// The locations of a stack, leaf first.
    pub fn locations_of(&self, stack: StackId) -> Vec<Location> {
        let Some(span) = self.stacks.get(stack.0 as usize) else {
            return Vec::new();
        };
        let start = span.start as usize;
        self.frames[start..start + span.len as usize]
            .iter()
            .map(|id| self.locations[id.0 as usize])
            .collect()
    }

    /// The stack `locations` ended and taken as `like` was: where a sample of `like` goes when
    /// its frames are placed again (under the limit's marker again unless the whole stack is
    /// known).
    pub fn restack(
        &mut self,
        like: StackId,
        locations: impl IntoIterator<Item = Location>,
    ) -> StackId {
        let (end, tags) = self
            .stacks
            .get(like.0 as usize)
            .map_or((None, StackTags::default()), |span| (span.end, span.tags()));
        self.intern(locations, end, tags)
    }

    /// Takes back one sample of `task` counted in `stack` (it is counted elsewhere now).
    pub fn uncount(&mut self, task: impl Into<Task>, stack: StackId) {
        let key = (task.into(), stack);
        if let Some(n) = self.counts.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&key);
            }
            if self.cut_at_limit(stack) {
                self.beyond_limit -= 1;
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
    pub fn stack(
        &mut self,
        ids: &[LocationId],
        end: Option<StackEnd>,
        tags: impl Into<StackTags>,
    ) -> StackId {
        let tags = tags.into();
        let hash = self.hasher.hash_one((ids, end, tags));
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
                    span.end == end && span.tags() == tags && ids_of(span) == ids
                },
                |id| {
                    let span = &stacks[id.0 as usize];
                    self.hasher.hash_one((ids_of(span), span.end, span.tags()))
                },
            )
            .or_insert_with(|| {
                let start = frames.len() as u32;
                frames.extend_from_slice(ids);
                stacks.push(StackSpan {
                    start,
                    len: ids.len() as u32,
                    end,
                    during: tags.during,
                    labels: tags.labels,
                });
                StackId(stacks.len() as u32 - 1)
            })
            .get()
    }

    /// Per process, its samples and those taken during each kind of interval: what a VM's
    /// statistics compare their own time in each kind with.
    pub fn samples_during(&self) -> std::collections::HashMap<u32, SamplesDuring> {
        let mut by_pid: std::collections::HashMap<u32, SamplesDuring> = Default::default();
        for (&(task, stack), &n) in &self.counts {
            let of_pid = by_pid.entry(task.pid).or_default();
            of_pid.total += n;
            let during = self.stacks[stack.0 as usize].during.0 as usize;
            for kind in self.during.get(during).into_iter().flatten() {
                *of_pid.during.entry(kind.clone()).or_insert(0) += n;
            }
        }
        by_pid
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
                .map(|(&(task, stack), &n)| (task, stack, n))
                .collect(),
            blocks: self
                .blocks
                .iter()
                .map(|(&(task, stack, state), &b)| (task, stack, state, b))
                .collect(),
            sends: self
                .sends
                .iter()
                .map(|(&(task, stack), &n)| (task, stack, n))
                .collect(),
            during: self.during.clone(),
            labels: self.labels.clone(),
        }
    }
}

/// A process's samples in a session, and those taken during each kind of its VM's intervals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SamplesDuring {
    /// All its samples.
    pub total: u64,
    /// Those taken while an interval of the kind was under way.
    pub during: std::collections::HashMap<IntervalKind, u64>,
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
    /// Samples per thread and stack.
    pub counts: Vec<(Task, StackId, u64)>,
    /// Blocks per thread, stack and why.
    pub blocks: Vec<(Task, StackId, BlockState, Blocks)>,
    /// Sends per thread and stack; empty when no thread had a send counter.
    pub sends: Vec<(Task, StackId, u64)>,
    /// Sets of interval kinds, by [`DuringId`] (empty when no sample was in one).
    pub during: Vec<Box<[IntervalKind]>>,
    /// Label sets, by [`LabelsId`] (empty when no sample had labels).
    pub labels: Vec<Arc<[Label]>>,
}

impl StackSnapshot {
    /// The interval kinds under way when a stack's samples were taken.
    pub fn during_of(&self, stack: StackId) -> &[IntervalKind] {
        let id = self.stacks[stack.0 as usize].during.0 as usize;
        self.during.get(id).map_or(&[], |set| set)
    }

    /// The labels its thread had set when a stack's samples were taken.
    pub fn labels_of(&self, stack: StackId) -> &[Label] {
        let id = self.stacks[stack.0 as usize].labels.0 as usize;
        self.labels.get(id).map_or(&[], |set| set)
    }

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
        for &(task, stack, n) in &self.counts {
            if let Some(&leaf) = self.ids_of(stack).first() {
                *leaves.entry((task.pid, self.location(leaf))).or_insert(0) += n;
            }
        }
        leaves.into_iter().map(|((p, l), n)| (p, l, n)).collect()
    }

    /// Each process's samples apart, by pid, each part with only the stacks and locations it
    /// uses (renumbered), so that a profile built from one symbolises nothing of the others.
    /// One pass over the counts for every process.
    pub fn by_process(&self) -> std::collections::BTreeMap<u32, StackSnapshot> {
        type Renumbering = (
            StackSnapshot,
            HashMap<StackId, StackId>,
            HashMap<LocationId, LocationId>,
        );
        let mut parts: std::collections::BTreeMap<u32, Renumbering> = Default::default();
        // The stack `stack` in `pid`'s part, renumbered on first sight.
        let mut part_stack = |pid: u32, stack: StackId| -> (u32, StackId) {
            let (part, stack_ids, location_ids) = parts.entry(pid).or_insert_with(|| {
                let part = StackSnapshot {
                    during: self.during.clone(),
                    labels: self.labels.clone(),
                    ..StackSnapshot::default()
                };
                (part, HashMap::new(), HashMap::new())
            });
            let id = *stack_ids.entry(stack).or_insert_with(|| {
                let span = self.stacks[stack.0 as usize];
                let start = part.frames.len() as u32;
                for &location in self.ids_of(stack) {
                    let renumbered = *location_ids.entry(location).or_insert_with(|| {
                        part.locations.push(self.location(location));
                        LocationId(part.locations.len() as u32 - 1)
                    });
                    part.frames.push(renumbered);
                }
                part.stacks.push(StackSpan { start, ..span });
                StackId(part.stacks.len() as u32 - 1)
            });
            (pid, id)
        };
        let mut counts = Vec::with_capacity(self.counts.len());
        for &(task, stack, samples) in &self.counts {
            let (_, id) = part_stack(task.pid, stack);
            counts.push((task, id, samples));
        }
        let mut blocks = Vec::with_capacity(self.blocks.len());
        for &(task, stack, state, b) in &self.blocks {
            let (_, id) = part_stack(task.pid, stack);
            blocks.push((task, id, state, b));
        }
        let mut sends = Vec::with_capacity(self.sends.len());
        for &(task, stack, n) in &self.sends {
            let (_, id) = part_stack(task.pid, stack);
            sends.push((task, id, n));
        }
        for (task, id, samples) in counts {
            if let Some((part, ..)) = parts.get_mut(&task.pid) {
                part.counts.push((task, id, samples));
            }
        }
        for (task, id, n) in sends {
            if let Some((part, ..)) = parts.get_mut(&task.pid) {
                part.sends.push((task, id, n));
            }
        }
        for (task, id, state, b) in blocks {
            if let Some((part, ..)) = parts.get_mut(&task.pid) {
                part.blocks.push((task, id, state, b));
            }
        }
        parts
            .into_iter()
            .map(|(pid, (part, ..))| (pid, part))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DONE: Option<StackEnd> = Some(StackEnd::Complete);
    const NONE: DuringId = DuringId(0);

    fn k(ip: u64) -> Location {
        Location::Kernel { ip }
    }

    /// The same frames with other labels are another stack; a set is interned once, and past
    /// the session's bound a new set counts unlabelled, and is counted.
    #[test]
    fn labels_tell_stacks_apart_and_are_bounded() {
        let mut table = StackTable::default();
        let set = |v: &str| -> Arc<[Label]> { Arc::from(vec![Label::new("phase", v)]) };
        let (a, b) = (set("a"), set("b"));
        let tags = |table: &mut StackTable, labels: Option<&Arc<[Label]>>| StackTags {
            during: NONE,
            labels: table.labels(labels),
        };
        let ta = tags(&mut table, Some(&a));
        let tb = tags(&mut table, Some(&b));
        assert_eq!(tags(&mut table, Some(&a)), ta, "interned once");
        assert_eq!(tags(&mut table, None).labels, LabelsId(0));
        let sa = table.count(7, [k(1)], DONE, ta);
        let sb = table.count(7, [k(1)], DONE, tb);
        let none = table.count(7, [k(1)], DONE, NONE);
        assert!(sa != sb && sb != none && sa != none);
        let snapshot = table.snapshot();
        assert_eq!(snapshot.labels_of(sb), &b[..]);
        assert!(snapshot.labels_of(none).is_empty());
        // A placed-again sample keeps its labels.
        assert_eq!(table.restack(sa, [k(2)]), table.count(7, [k(2)], DONE, ta));
        for i in 0..MAX_LABEL_SETS {
            table.labels(Some(&set(&i.to_string())));
        }
        assert_eq!(table.labels.len(), MAX_LABEL_SETS);
        assert_eq!(table.labels(Some(&set("more"))), LabelsId(0));
        assert!(table.labels_beyond_limit() > 0);
        assert_eq!(table.labels(Some(&a)), ta.labels, "known sets still are");
    }

    /// A process's part holds its samples, stacks and locations, and nothing of others'.
    #[test]
    fn a_process_s_part_is_its_samples_alone() {
        let mut table = StackTable::default();
        table.count(7, [k(1), k(2)], DONE, NONE);
        table.count(8, [k(3), k(2)], DONE, NONE);
        table.count(Task::new(7, 9), [k(4), k(2)], DONE, NONE);
        table.count(7, [k(1), k(2)], DONE, NONE);
        let whole = table.snapshot();
        let mut parts = whole.by_process();
        let part = parts.remove(&7).expect("process 7's part");
        let mut stacks: Vec<(Task, Vec<Location>, u64)> = part
            .counts
            .iter()
            .map(|&(task, stack, n)| {
                let locations = part.ids_of(stack).iter().map(|&l| part.location(l));
                (task, locations.collect(), n)
            })
            .collect();
        stacks.sort_by_key(|s| (s.0.tid, s.2));
        assert_eq!(
            stacks,
            [
                (Task::new(7, 7), vec![k(1), k(2)], 2),
                (Task::new(7, 9), vec![k(4), k(2)], 1),
            ]
        );
        assert_eq!(part.locations.len(), 3, "k(3) is process 8's");
        assert!(
            whole
                .by_process()
                .get(&99)
                .is_none_or(|p| p.counts.is_empty())
        );
    }

    /// Threads of one process share its stacks and are counted apart.
    #[test]
    fn each_thread_is_counted_apart_in_the_same_stack() {
        let mut table = StackTable::default();
        let main = table.count(7, [k(1), k(2)], DONE, NONE);
        let worker = table.count(Task::new(7, 8), [k(1), k(2)], DONE, NONE);
        table.count(Task::new(7, 8), [k(1), k(2)], DONE, NONE);
        assert_eq!(main, worker);
        assert_eq!(table.counts[&(Task::new(7, 7), main)], 1);
        assert_eq!(table.counts[&(Task::new(7, 8), main)], 2);
        table.uncount(Task::new(7, 8), main);
        assert_eq!(table.counts[&(Task::new(7, 8), main)], 1);
        assert_eq!(table.samples_during()[&7].total, 2, "one process");
    }

    #[test]
    fn stacks_and_locations_are_stored_once() {
        let mut table = StackTable::default();
        let a = table.count(1, [k(1), k(2), k(3)], DONE, NONE);
        let b = table.count(1, [k(1), k(2), k(3)], DONE, NONE);
        let c = table.count(2, [k(1), k(2), k(3)], DONE, NONE);
        assert_eq!(a, b);
        assert_eq!(a, c, "one stack for both processes");
        let truncated = table.count(1, [k(1), k(2), k(3)], Some(StackEnd::FrameLimit), NONE);
        assert_ne!(a, truncated, "a cut stack is not the whole one");
        let other = table.count(1, [k(2), k(3)], DONE, NONE);
        assert_ne!(a, other);
        assert_eq!(table.locations.len(), 3);
        assert_eq!(table.stacks.len(), 3);
        assert_eq!(table.frames.len(), 3 + 3 + 2);
        assert_eq!(table.counts[&(Task::from(1), a)], 2);
        assert_eq!(table.counts[&(Task::from(2), a)], 1);
        let snapshot = table.snapshot();
        let other_locations: Vec<Location> = snapshot
            .ids_of(other)
            .iter()
            .map(|&id| snapshot.location(id))
            .collect();
        assert_eq!(other_locations, [k(2), k(3)]);
        // Growth follows distinct stacks: a million more samples of known stacks add nothing.
        for _ in 0..1000 {
            table.count(1, [k(1), k(2), k(3)], DONE, NONE);
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
        table.count(1, [file(3, 0x10), k(1), file(4, 0x20)], DONE, NONE);
        table.count(1, [file(3, 0x30)], DONE, NONE);
        table.count(2, [file(3, 0x10), k(1), file(4, 0x20)], DONE, NONE);
        let mut modules: Vec<ModuleId> = table.modules().collect();
        modules.sort();
        assert_eq!(modules, [ModuleId(3), ModuleId(4)]);
    }

    /// A placement's stack is interned once and then found by its id; past the limit, where
    /// what a new stack becomes depends on how full the table is, it is interned each time.
    #[test]
    fn placed_stacks_are_found_by_their_placement_below_the_limit_only() {
        let mut table = StackTable::with_limit(2);
        let stack = table.intern_placed(1, false, &[k(1), k(100)], DONE);
        assert_eq!(table.locations_of(stack), [k(1), k(100)]);
        // Found by its id, whatever the locations say now.
        assert_eq!(table.intern_placed(1, false, &[k(9)], DONE), stack);
        let leaf = table.intern_placed(1, true, &[k(1)], None);
        assert_ne!(leaf, stack);
        assert_eq!(table.stacks.len(), 2);
        assert_eq!(table.placed.len(), 2);
        let cut = table.intern_placed(2, false, &[k(20), k(200)], DONE);
        assert_eq!(table.locations_of(cut), [Location::StackLimit]);
        assert_eq!(table.placed.len(), 2, "not remembered past the limit");
    }

    /// Past its most stacks, a table finds known stacks, counts a new one by its leaf under
    /// the marker (the marker alone past a quarter more), and says how many samples it cut:
    /// every sample stays counted, moved ones included.
    #[test]
    fn new_stacks_beyond_the_limit_are_counted_by_leaf() {
        let mut table = StackTable::with_limit(8);
        for leaf in 1..=8 {
            table.count(1, [k(leaf), k(100)], DONE, NONE);
        }
        assert_eq!(table.beyond_limit(), 0);
        let known = table.count(1, [k(2), k(100)], DONE, NONE);
        assert_eq!(table.locations_of(known), [k(2), k(100)]);
        // New stacks: leaf kept, callers not, and no caller interned.
        let cut = table.count(1, [k(20), k(200), k(300)], DONE, NONE);
        assert_eq!(table.locations_of(cut), [k(20), Location::StackLimit]);
        assert_eq!(table.count(2, [k(20), k(201)], DONE, NONE), cut);
        assert!(!table.locations.contains(&k(200)));
        // One more leaf fits in the quarter more (2 stacks); past it, the marker alone.
        let other = table.count(1, [k(21), k(200)], DONE, NONE);
        assert_eq!(table.locations_of(other), [k(21), Location::StackLimit]);
        let marker = table.count(1, [k(22), k(200)], DONE, NONE);
        assert_eq!(table.locations_of(marker), [Location::StackLimit]);
        assert_eq!(table.count(1, [k(23)], DONE, NONE), marker);
        assert_eq!(table.stacks.len(), 8 + 2 + 1);
        assert_eq!(table.beyond_limit(), 5);
        let total: u64 = table.counts.values().sum();
        assert_eq!(total, 8 + 1 + 5);
        // A cut sample placed again goes under the marker again, and is counted once.
        let moved = table.restack(cut, [k(21), k(200)]);
        assert_eq!(moved, other);
        table.uncount(1, cut);
        table.add(1, moved);
        assert_eq!(table.beyond_limit(), 5);
        // A sample moved out of a cut stack into a known one is no longer beyond.
        table.uncount(2, cut);
        table.add(2, known);
        assert_eq!(table.beyond_limit(), 4);
        assert!(!table.counts.contains_key(&(Task::from(1), cut)));
    }

    #[test]
    fn snapshots_give_the_flat_profile_by_leaf() {
        let mut table = StackTable::default();
        table.count(1, [k(1), k(2)], DONE, NONE);
        table.count(1, [k(1), k(3)], DONE, NONE);
        table.count(1, [k(2)], DONE, NONE);
        let snapshot = table.snapshot();
        let mut leaves = snapshot.leaf_counts();
        leaves.sort();
        assert_eq!(leaves, [(1, k(1), 2), (1, k(2), 1)]);
    }

    /// Blocks are counted per (thread, stack, why) with their time, taken back when moved, and
    /// split by process with the samples.
    #[test]
    fn blocks_count_apart_from_samples_and_split_by_process() {
        use vmscope_model::BlockState::{Preempted, Sleeping};
        let mut table = StackTable::default();
        let stack = table.count(7, [k(1), k(2)], DONE, NONE);
        table.add_block(7, stack, Sleeping, 1_000);
        table.add_block(7, stack, Sleeping, 2_000);
        table.add_block(7, stack, Preempted, 5);
        let other = table.intern([k(3)], DONE, NONE);
        table.add_block(Task::new(8, 9), other, Sleeping, 7);
        assert_eq!(table.counts[&(Task::from(7), stack)], 1, "samples apart");
        let key = (Task::from(7), stack, Sleeping);
        assert_eq!(
            table.blocks[&key],
            Blocks {
                count: 2,
                ns: 3_000
            }
        );
        table.remove_block(7, stack, Sleeping, 2_000);
        assert_eq!(
            table.blocks[&key],
            Blocks {
                count: 1,
                ns: 1_000
            }
        );
        table.remove_block(7, stack, Preempted, 5);
        assert!(
            !table
                .blocks
                .contains_key(&(Task::from(7), stack, Preempted))
        );
        let parts = table.snapshot().by_process();
        assert_eq!(parts[&7].blocks.len(), 1);
        assert_eq!(parts[&7].counts.len(), 1);
        let (task, stack, state, blocks) = parts[&8].blocks[0];
        assert_eq!((task, state, blocks.ns), (Task::new(8, 9), Sleeping, 7));
        assert_eq!(
            parts[&8].ids_of(stack).len(),
            1,
            "its stack renumbered in its part"
        );
        assert!(parts[&8].counts.is_empty());
    }
}
