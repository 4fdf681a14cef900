//! What a code map says about one piece of generated code, wherever it sits.
//!
//! A [`Code`] holds a name, a kind, and positions *relative to the code's start*: the
//! machine-code pc to bytecode pc map (with inline stacks) from a VM, or source positions from
//! jitdump debug info. Relative positions make a method that moves (compaction, GC) the same
//! `Code`: the [`CodeStore`] interns descriptions, so samples of a method aggregate across all
//! the addresses it lived at, and memory grows with distinct methods, not with moves. How
//! reports label the ranges between positions is [`super::ranges`]' business.

use std::{
    fmt,
    hash::{BuildHasher, Hash},
    sync::{Arc, RwLock},
};

use hashbrown::{HashMap, HashTable, hash_table};

use vmscope_model::CodeKind;

use super::ranges::MergedRanges;
use crate::{
    shares::{Held, Refusal, ShareLimits},
    vocab::CodeId,
};

/// Which code map described the code.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CodeSource {
    /// Published by the VM (gRPC or code map file); the VM's name.
    Vm(String),
    /// A jitdump file.
    Jitdump,
    /// A perf map.
    PerfMap,
    /// A HotSpot JVM's own structures (vmStructs): an interpreted frame's `Method*`, an
    /// nmethod's method and scopes.
    HotSpot,
}

impl CodeSource {
    /// As reports name it.
    pub fn label(&self) -> &'static str {
        match self {
            CodeSource::Vm(_) => "vm",
            CodeSource::Jitdump => "jitdump",
            CodeSource::PerfMap => "perf map",
            CodeSource::HotSpot => "hotspot",
        }
    }
}

/// One mapped machine-code pc, relative to the code's start.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PcPoint {
    /// Offset of the machine-code pc from the code's start.
    pub offset: u64,
    /// Bytecode pc, 0-based.
    pub bcpc: u32,
    /// Inlined methods the code from here to the next point came from, outermost first, with
    /// their bytecode pcs; empty for the method's own code.
    pub inlined: Vec<(String, u32)>,
    /// The source line of each frame here where the VM keeps line tables (HotSpot): the
    /// compiled method's own first (at `bcpc`), then each inlined method's, outermost first
    /// (at its pc in `inlined`). Empty when none is known; an unknown one is `("", 0)`.
    pub lines: Vec<(Arc<str>, u32)>,
}

impl PcPoint {
    /// The innermost frame's source line here, if known: where the point's code came from.
    pub fn innermost_line(&self) -> Option<(&str, u32)> {
        self.lines
            .get(self.inlined.len())
            .filter(|(file, line)| !file.is_empty() && *line > 0)
            .map(|(file, line)| (&**file, *line))
    }
}

/// One source position (jitdump debug info), relative to the code's start.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourcePoint {
    /// Offset of the first machine-code byte at this position.
    pub offset: u64,
    /// File name.
    pub file: Arc<str>,
    /// Line, 1-based.
    pub line: u32,
    /// Column (jitdump's discriminator, which V8 uses for the column).
    pub column: u32,
}

/// A piece of generated code, as its code map described it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Code {
    /// What kind of code it is.
    pub kind: CodeKind,
    /// Its name.
    pub name: String,
    /// The code map that described it.
    pub source: CodeSource,
    /// Mapped pcs, sorted by offset (empty when the map has none).
    pub pc_map: Vec<PcPoint>,
    /// Source positions, sorted by offset (empty when the map has none).
    pub lines: Vec<SourcePoint>,
    /// Where its ranges begin once adjacent ranges with equal labels are merged: derived from
    /// the points on first use, ignored by comparisons. Leave it `Default`.
    pub merged_ranges: MergedRanges,
}

impl Code {
    /// Code known by name only.
    pub fn named(kind: CodeKind, name: impl Into<String>, source: CodeSource) -> Code {
        Code {
            kind,
            name: name.into(),
            source,
            pc_map: Vec::new(),
            lines: Vec::new(),
            merged_ranges: MergedRanges::default(),
        }
    }

    /// A VM's method with a pc map of (offset, bytecode pc) points and nothing inlined: the
    /// code tests build.
    #[cfg(test)]
    pub fn method_with_pcs(name: &str, points: &[(u64, u32)]) -> Code {
        Code {
            pc_map: points
                .iter()
                .map(|&(offset, bcpc)| PcPoint {
                    offset,
                    bcpc,
                    inlined: Vec::new(),
                    lines: Vec::new(),
                })
                .collect(),
            ..Code::named(CodeKind::Method, name, CodeSource::Vm("test vm".into()))
        }
    }

    /// Whether the code carries ranges (bytecode or source) to report under it.
    pub fn has_ranges(&self) -> bool {
        !self.pc_map.is_empty() || !self.lines.is_empty()
    }

    /// The method an offset's time belongs to: the innermost inlined method there, or the
    /// code's own name.
    pub fn attributed_method(&self, offset: u64) -> &str {
        let i = self.pc_map.partition_point(|p| p.offset <= offset);
        i.checked_sub(1)
            .and_then(|k| self.pc_map[k].inlined.last())
            .map_or(self.name.as_str(), |(method, _)| method.as_str())
    }

    /// Whether the code has inlined methods (optimised code).
    pub fn is_optimised(&self) -> bool {
        self.pc_map.iter().any(|p| !p.inlined.is_empty())
    }

    /// About how many bytes the code takes in the store, for its budget.
    pub fn approx_bytes(&self) -> usize {
        let inlined: usize = self
            .pc_map
            .iter()
            .flat_map(|p| &p.inlined)
            .map(|(name, _)| size_of::<(String, u32)>() + name.len())
            .sum();
        // Line files are shared with the method's other points (an `Arc` each).
        let point_lines: usize = self
            .pc_map
            .iter()
            .map(|p| p.lines.len() * size_of::<(Arc<str>, u32)>())
            .sum();
        // A file name is shared by the points that name it; count it once per run of them.
        let files: usize = self
            .lines
            .iter()
            .enumerate()
            .filter(|(i, p)| *i == 0 || !Arc::ptr_eq(&self.lines[i - 1].file, &p.file))
            .map(|(_, p)| p.file.len())
            .sum();
        let vm_name = match &self.source {
            CodeSource::Vm(name) => name.len(),
            _ => 0,
        };
        size_of::<Code>()
            + size_of::<Arc<Code>>()
            + size_of::<CodeId>()
            + self.name.len()
            + vm_name
            + self.pc_map.len() * size_of::<PcPoint>()
            + inlined
            + point_lines
            + self.lines.len() * size_of::<SourcePoint>()
            + files
            + MergedRanges::max_bytes(self)
    }
}

/// The default budget of a [`CodeStore`]: room for millions of named methods, or tens of
/// thousands with big pc maps, far beyond what real VMs publish, yet bounded so that a
/// publisher that never repeats itself cannot exhaust the daemon's memory.
pub const DEFAULT_BUDGET_BYTES: usize = 1 << 30;

/// How the store's bytes are shared by default when its budget is `total`: a quarter per user
/// other than root, three quarters for all of them together; the last quarter is root's.
pub fn default_shares(total: usize) -> ShareLimits {
    ShareLimits {
        per_user: total / 4,
        non_root: total / 4 * 3,
        total,
    }
}

/// A new code did not fit in its owner's share of the store; it is refused (its samples stay
/// unnamed generated code), and codes already known are still found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct StoreFull {
    /// Which share was full.
    pub refusal: Refusal,
    /// MiB in use by everyone.
    pub used_mib: usize,
}

impl fmt::Display for StoreFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |bytes: &usize| bytes >> 20;
        match &self.refusal {
            Refusal::PerUser { uid, limit } => write!(
                f,
                "uid {uid} holds its share of the code store ({} MiB; vmscoped \
                 --code-store-per-user-mib): new code is not named",
                mib(limit)
            ),
            Refusal::NonRoot { limit } => write!(
                f,
                "users other than root hold their share of the code store ({} MiB together; \
                 vmscoped --code-store-non-root-mib): new code is not named",
                mib(limit)
            ),
            Refusal::Total { limit } => write!(
                f,
                "the code store is full ({} MiB of {} MiB; vmscoped --code-store-mib): new code \
                 is not named",
                self.used_mib,
                mib(limit)
            ),
        }
    }
}

/// What a [`CodeStore`] refused and let go, since the daemon started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Codes refused because their owner held its share.
    pub refused_per_user: u64,
    /// Codes refused because users other than root held theirs together.
    pub refused_non_root: u64,
    /// Codes refused because the store was full.
    pub refused_total: u64,
    /// Codes reclaimed: nothing referred to them any more.
    pub reclaimed_codes: u64,
    /// Bytes of those codes.
    pub reclaimed_bytes: u64,
}

/// What one [`CodeStore::sweep`] let go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Codes.
    pub codes: usize,
    /// Their bytes.
    pub bytes: usize,
}

/// Interned code descriptions, shared by the session manager (which interns and sweeps), the
/// publication streams (which intern) and profile builders (which read).
///
/// Every code belongs to a uid: the user that published it, or the owner of the file that
/// described it. Owners do not share codes (two users' identical descriptions are two codes),
/// so what one user publishes can neither be charged to another nor tell it anything; each
/// owner is held to its share of the store's bytes ([`ShareLimits`]), and what no user other
/// than root may take is root's.
///
/// Codes that nothing refers to any more (no process's map, no session) are reclaimed by
/// [`CodeStore::sweep`]. Ids are never reused, so a reference the sweep missed finds no code
/// rather than another one; and a code interned or found since the previous sweep is never
/// let go, for it may be on its way to the manager in a batch of changes. A read of code map
/// files, which may take any time, holds its owner's codes interned since it began
/// ([`CodeStore::hold`]).
#[derive(Debug)]
pub struct CodeStore {
    inner: RwLock<Store>,
    limits: ShareLimits,
}

impl Default for CodeStore {
    fn default() -> Self {
        CodeStore::with_budget(DEFAULT_BUDGET_BYTES)
    }
}

#[derive(Debug)]
struct Entry {
    code: Arc<Code>,
    owner: u32,
    bytes: usize,
    hash: u64,
    /// The sweep epoch it was last interned, found or kept in.
    seen: u64,
}

/// The store's entries, each in the slot its id names. New codes fill freed slots first, then
/// the end: interning writes where the previous code went rather than at a random place in a
/// hash table, and a lookup by id is an index.
#[derive(Debug, Default)]
struct Slots {
    slots: Vec<Slot>,
    free: Vec<u32>,
    len: usize,
    /// The generation slots pushed anew start at: above any slot given back at the end, so
    /// that an id is not issued twice.
    fresh_generation: u32,
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    entry: Option<Entry>,
}

impl Slots {
    fn id(index: usize, generation: u32) -> CodeId {
        CodeId(u64::from(generation) << 32 | index as u64)
    }

    fn get(&self, id: CodeId) -> Option<&Entry> {
        let slot = self.slots.get(id.0 as u32 as usize)?;
        (slot.generation == (id.0 >> 32) as u32)
            .then_some(slot.entry.as_ref())
            .flatten()
    }

    fn get_mut(&mut self, id: CodeId) -> Option<&mut Entry> {
        let slot = self.slots.get_mut(id.0 as u32 as usize)?;
        (slot.generation == (id.0 >> 32) as u32)
            .then_some(slot.entry.as_mut())
            .flatten()
    }

    fn insert(&mut self, entry: Entry) -> CodeId {
        self.len += 1;
        let index = match self.free.pop() {
            Some(index) => index as usize,
            None => {
                self.slots.push(Slot {
                    generation: self.fresh_generation,
                    entry: None,
                });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.entry = Some(entry);
        Slots::id(index, slot.generation)
    }

    /// Keeps the entries `keep` says to keep, freeing the others' slots under a new generation.
    fn retain(&mut self, mut keep: impl FnMut(CodeId, &mut Entry) -> bool) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let Some(entry) = slot.entry.as_mut() else {
                continue;
            };
            if !keep(Slots::id(index, slot.generation), entry) {
                slot.entry = None;
                slot.generation = slot.generation.wrapping_add(1);
                self.free.push(index as u32);
                self.len -= 1;
            }
        }
        while let Some(slot) = self.slots.last()
            && slot.entry.is_none()
        {
            self.fresh_generation = self.fresh_generation.max(slot.generation);
            self.slots.pop();
        }
        let end = self.slots.len() as u32;
        self.free.retain(|&index| index < end);
        if self.slots.len() < self.slots.capacity() / 4 {
            self.slots.shrink_to_fit();
            self.free.shrink_to_fit();
        }
    }
}

#[derive(Debug, Default)]
struct Store {
    entries: Slots,
    interned: u64,
    held: Held,
    /// Ids by the hash of their owner and code, with that hash, so that growing the table
    /// rehashes without a lookup in `entries` per code; equality is checked against `entries`.
    ids: HashTable<(u64, CodeId)>,
    hasher: foldhash::fast::RandomState,
    epoch: u64,
    counters: StoreCounters,
    /// Reads under way: (owner, epoch at their start), by hold id.
    holds: HashMap<u64, (u32, u64)>,
    next_hold: u64,
}

/// Codes of one owner interned while it lives are not swept: what a read of code map files
/// interned is kept until its changes reach their timeline, however long the read took. Only
/// that owner's codes are held, so a read stuck on one user's file keeps none of another's.
#[derive(Debug)]
pub struct Hold {
    store: Arc<CodeStore>,
    id: u64,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.store.write().holds.remove(&self.id);
    }
}

impl CodeStore {
    /// An empty store with the default budget.
    pub fn new() -> CodeStore {
        CodeStore::default()
    }

    /// An empty store that holds at most about `budget_bytes` of codes, shared as
    /// [`default_shares`] says.
    pub fn with_budget(budget_bytes: usize) -> CodeStore {
        CodeStore::with_shares(default_shares(budget_bytes))
    }

    /// An empty store whose bytes are shared by `limits`.
    pub fn with_shares(limits: ShareLimits) -> CodeStore {
        CodeStore {
            inner: RwLock::default(),
            limits,
        }
    }

    /// Keeps `owner`'s codes interned from now on from the sweeps while the hold lives.
    pub fn hold(self: &Arc<Self>, owner: u32) -> Hold {
        let mut store = self.write();
        let id = store.next_hold;
        store.next_hold += 1;
        let epoch = store.epoch;
        store.holds.insert(id, (owner, epoch));
        Hold {
            store: self.clone(),
            id,
        }
    }

    /// How the store's bytes are shared.
    pub fn limits(&self) -> ShareLimits {
        self.limits
    }

    /// The id of `owner`'s `code`, interning it on first sight: one hash, no clone. A new code
    /// that does not fit in its owner's share is refused, and counted.
    pub fn intern(&self, code: Code, owner: u32) -> Result<CodeId, StoreFull> {
        let mut store = self.write();
        let Store {
            entries,
            interned,
            held,
            ids,
            hasher,
            epoch,
            counters,
            ..
        } = &mut *store;
        let hash = hasher.hash_one((owner, &code));
        // One probe of the table, whether the code is new or not.
        let slot = match ids.entry(
            hash,
            |&(h, id)| {
                h == hash
                    && entries
                        .get(id)
                        .is_some_and(|entry| entry.owner == owner && *entry.code == code)
            },
            |&(h, _)| h,
        ) {
            hash_table::Entry::Occupied(found) => {
                let id = found.get().1;
                if let Some(entry) = entries.get_mut(id) {
                    entry.seen = *epoch;
                }
                return Ok(id);
            }
            hash_table::Entry::Vacant(slot) => slot,
        };
        let bytes = code.approx_bytes();
        if let Err(refusal) = held.take(&self.limits, owner, bytes) {
            match refusal {
                Refusal::PerUser { .. } => counters.refused_per_user += 1,
                Refusal::NonRoot { .. } => counters.refused_non_root += 1,
                Refusal::Total { .. } => counters.refused_total += 1,
            }
            return Err(StoreFull {
                refusal,
                used_mib: held.total() >> 20,
            });
        }
        *interned += 1;
        let id = entries.insert(Entry {
            code: Arc::new(code),
            owner,
            bytes,
            hash,
            seen: *epoch,
        });
        slot.insert((hash, id));
        Ok(id)
    }

    /// Lets go of the codes `keep` does not name and that were not interned or found since
    /// the previous sweep, giving their bytes back to their owners.
    pub fn sweep(&self, keep: impl Fn(CodeId) -> bool) -> Swept {
        let mut store = self.write();
        let Store {
            entries,
            held,
            ids,
            epoch,
            counters,
            holds,
            ..
        } = &mut *store;
        *epoch += 1;
        let now = *epoch;
        let mut swept = Swept::default();
        entries.retain(|id, entry| {
            if keep(id) {
                entry.seen = now;
                return true;
            }
            if entry.seen + 1 >= now {
                return true;
            }
            if holds
                .values()
                .any(|&(owner, since)| owner == entry.owner && entry.seen >= since)
            {
                return true;
            }
            held.give_back(entry.owner, entry.bytes);
            if let Ok(found) = ids.find_entry(entry.hash, |&(_, x)| x == id) {
                found.remove();
            }
            swept.codes += 1;
            swept.bytes += entry.bytes;
            false
        });
        counters.reclaimed_codes += swept.codes as u64;
        counters.reclaimed_bytes += swept.bytes as u64;
        if swept.codes > 0 && entries.len < ids.capacity() / 4 {
            ids.shrink_to_fit(|&(h, _)| h);
        }
        swept
    }

    /// How many codes were ever interned: unchanged, no code appeared that a sweep could let
    /// go of.
    pub fn interned(&self) -> u64 {
        self.read().interned
    }

    /// What was refused and reclaimed so far.
    pub fn counters(&self) -> StoreCounters {
        self.read().counters
    }

    /// About how many bytes the codes take.
    pub fn bytes(&self) -> usize {
        self.read().held.total()
    }

    /// About how many bytes `uid`'s codes take.
    pub fn bytes_of(&self, uid: u32) -> usize {
        self.read().held.of(uid)
    }

    /// An interned code; `None` once reclaimed.
    pub fn get(&self, id: CodeId) -> Option<Arc<Code>> {
        self.read().entries.get(id).map(|e| e.code.clone())
    }

    /// Number of distinct codes.
    pub fn len(&self) -> usize {
        self.read().entries.len
    }

    /// Whether it holds no code.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Store> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Store> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn method(points: &[(u64, u32)]) -> Code {
        Code::method_with_pcs("Integer>>benchFib", points)
    }

    #[test]
    fn inlined_time_goes_to_the_innermost_method() {
        let mut code = method(&[(0x10, 3), (0x20, 9), (0x30, 12)]);
        code.pc_map[0].inlined = vec![("Inline>>heavy".into(), 4)];
        code.pc_map[1].inlined = vec![("Inline>>light".into(), 2), ("SmallInteger>>+".into(), 0)];
        assert!(code.is_optimised());
        assert_eq!(code.attributed_method(0x5), "Integer>>benchFib");
        assert_eq!(code.attributed_method(0x15), "Inline>>heavy");
        assert_eq!(code.attributed_method(0x25), "SmallInteger>>+");
        assert_eq!(code.attributed_method(0x35), "Integer>>benchFib");
    }

    #[test]
    fn the_same_description_is_one_code() {
        let store = CodeStore::new();
        let a = store.intern(method(&[(0x10, 1)]), 1000).unwrap();
        let b = store.intern(method(&[(0x10, 1)]), 1000).unwrap();
        let c = store.intern(method(&[(0x11, 1)]), 1000).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(store.len(), 2);
        assert_eq!(store.get(c).unwrap().pc_map[0].offset, 0x11);
    }

    #[test]
    fn owners_do_not_share_codes() {
        let store = CodeStore::new();
        let one = method(&[(0x10, 1)]).approx_bytes();
        let theirs = store.intern(method(&[(0x10, 1)]), 1000).unwrap();
        let mine = store.intern(method(&[(0x10, 1)]), 0).unwrap();
        assert_ne!(theirs, mine);
        assert_eq!((store.bytes_of(1000), store.bytes_of(0)), (one, one));
    }

    #[test]
    fn a_full_store_refuses_new_codes_and_still_finds_known_ones() {
        let one = method(&[(0x10, 1)]).approx_bytes();
        let store = CodeStore::with_budget(2 * one + one / 2);
        let a = store.intern(method(&[(0x10, 1)]), 0).unwrap();
        store.intern(method(&[(0x11, 1)]), 0).unwrap();
        let err = store.intern(method(&[(0x12, 1)]), 0).unwrap_err();
        assert!(err.to_string().contains("code store is full"), "{err}");
        assert_eq!(
            store.intern(method(&[(0x10, 1)]), 0),
            Ok(a),
            "known codes are found"
        );
        assert_eq!((store.len(), store.bytes()), (2, 2 * one));
        assert_eq!(store.counters().refused_total, 1);
    }

    #[test]
    fn a_user_is_held_to_its_share_and_root_keeps_its_room() {
        let one = method(&[(0x10, 1)]).approx_bytes();
        let store = CodeStore::with_shares(ShareLimits {
            per_user: 2 * one,
            non_root: 3 * one,
            total: 5 * one,
        });
        let mut offset = 0x10;
        let mut next = |owner: u32| {
            offset += 1;
            store.intern(method(&[(offset, 1)]), owner)
        };
        next(1000).unwrap();
        next(1000).unwrap();
        let err = next(1000).unwrap_err();
        assert!(
            matches!(err.refusal, Refusal::PerUser { uid: 1000, .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("--code-store-per-user-mib"),
            "{err}"
        );
        next(1001).unwrap();
        let err = next(1002).unwrap_err();
        assert!(matches!(err.refusal, Refusal::NonRoot { .. }), "{err}");
        next(0).unwrap();
        next(0).unwrap();
        assert!(matches!(
            next(0).unwrap_err().refusal,
            Refusal::Total { .. }
        ));
        let counters = store.counters();
        assert_eq!(
            (
                counters.refused_per_user,
                counters.refused_non_root,
                counters.refused_total
            ),
            (1, 1, 1)
        );
    }

    #[test]
    fn codes_nothing_refers_to_are_reclaimed_after_a_grace_sweep() {
        let one = method(&[(0x10, 1)]).approx_bytes();
        let store = CodeStore::with_shares(ShareLimits {
            per_user: 2 * one,
            non_root: 2 * one,
            total: 2 * one,
        });
        let kept = store.intern(method(&[(0x10, 1)]), 1000).unwrap();
        let dropped = store.intern(method(&[(0x11, 1)]), 1000).unwrap();
        // Interned since the last sweep: it may still be on its way to a map.
        assert_eq!(store.sweep(|id| id == kept), Swept::default());
        assert!(store.get(dropped).is_some());
        assert_eq!(
            store.sweep(|id| id == kept),
            Swept {
                codes: 1,
                bytes: one
            }
        );
        assert!(store.get(dropped).is_none() && store.get(kept).is_some());
        assert_eq!(store.bytes_of(1000), one);
        // Its bytes are the owner's again, and its id is never given to another code.
        let again = store.intern(method(&[(0x11, 1)]), 1000).unwrap();
        assert_ne!(again, dropped);
        assert_eq!(store.counters().reclaimed_codes, 1);
        // A code found again since the last sweep is not let go either.
        store.sweep(|_| false);
        assert_eq!(store.intern(method(&[(0x10, 1)]), 1000), Ok(kept));
        assert_eq!(store.sweep(|_| false).codes, 1);
        assert_eq!(store.sweep(|_| false).codes, 1);
        assert!(store.is_empty() && store.bytes() == 0);
    }

    #[test]
    fn a_read_under_way_keeps_the_codes_its_owner_interned_since_it_began() {
        let store = Arc::new(CodeStore::new());
        let before = store.intern(method(&[(0x10, 1)]), 1000).unwrap();
        store.sweep(|_| false);
        let hold = store.hold(1000);
        let during = store.intern(method(&[(0x11, 1)]), 1000).unwrap();
        let other = store.intern(method(&[(0x12, 1)]), 2000).unwrap();
        for _ in 0..3 {
            store.sweep(|_| false);
        }
        // Only what its owner interned since the read began: not older codes, not another's.
        assert!(store.get(during).is_some());
        assert!(store.get(before).is_none() && store.get(other).is_none());
        drop(hold);
        store.sweep(|_| false);
        assert!(store.get(during).is_none() && store.is_empty());
    }

    #[test]
    fn ids_are_never_issued_twice_as_slots_are_freed_and_filled() {
        let store = CodeStore::new();
        let mut issued = std::collections::HashSet::new();
        let mut live = Vec::new();
        for round in 0..6u64 {
            // Some codes kept across rounds, the rest let go: freed slots in the middle are
            // filled again, and those at the end given back.
            for i in 0..50 {
                let id = store.intern(method(&[(round * 100 + i, 1)]), 1000).unwrap();
                assert!(issued.insert(id), "{id:?} issued twice");
                live.push(id);
            }
            let keep: Vec<CodeId> = live.iter().copied().step_by(3).collect();
            store.sweep(|id| keep.contains(&id));
            store.sweep(|id| keep.contains(&id));
            for &id in &live {
                assert_eq!(store.get(id).is_some(), keep.contains(&id), "{id:?}");
            }
            live = keep;
        }
        store.sweep(|_| false);
        store.sweep(|_| false);
        assert!(store.is_empty());
        let after = store.intern(method(&[(0x10, 1)]), 1000).unwrap();
        assert!(
            !issued.contains(&after),
            "a slot given back and pushed anew gets a new id"
        );
        assert_eq!(store.interned(), issued.len() as u64 + 1);
    }
}
