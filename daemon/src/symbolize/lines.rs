//! DWARF line tables of the binaries profiles name, loaded on first use and kept within a
//! byte budget.
//!
//! A binary's line tables come from its own `.debug_*` sections or, for a stripped binary, from
//! its separate debug file (under the debug directories, `--debug-dir`; build id checked). They
//! are loaded the first time a profile needs a line in the binary, once per build id (the same
//! library in two containers is loaded once), and read and parsed lazily by
//! [`vmscope_parse::dwarf::SourceLines`]: sections stay in the file, read a page at a time, and
//! only the compilation units lookups fall in are parsed. What each binary's tables cost (what
//! they hold, and about what lookups parsed: [`SourceLines::weight`]) is kept under a budget
//! (`--dwarf-cache-mib`) after each load and lookup: least recently used first, tables shed
//! what their lookups parsed and read, and only then are dropped whole. A
//! binary without DWARF, or whose tables failed to load, is remembered as such (no retry per
//! profile). Loads, evictions, failures and binaries without DWARF are counted. Once no
//! session can ask for lines, the daemon lets every table go ([`LineTables::release`]):
//! the next profile loads what it needs again.

use std::{
    collections::HashMap,
    fs::File,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use object::read::ReadCache;
use vmscope_parse::{
    dwarf::{
        DwarfError, SourceFrame, SourceLines,
        paged::{PositionedFile, ReadAt},
    },
    elf::{GLOBAL_DEBUG_DIR, debug_file_candidates_in},
};

use super::module::MAX_BINARY_BYTES;
use crate::{sys, vocab::ModuleId};

/// Default budget of line tables: what an always-on daemon can live with. Tables weigh what
/// their lookups read and parsed, not their binaries' debug sections (see the module's doc).
pub const DEFAULT_DWARF_CACHE_BYTES: u64 = 64 << 20;

/// What the tables of a binary cost per byte of what [`SourceLines::weight`] says: the bytes
/// held and looked at, plus the line rows, function trees and inlined-call trees addr2line
/// builds from them.
const WEIGHT_PER_BYTE: u64 = 2;

/// Line tables shared by the threads that build profiles.
pub type SharedLines = Arc<Mutex<SourceLines>>;

/// Where a binary's tables are keyed: its build id, or the module itself when it has none.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    BuildId(Vec<u8>),
    Module(ModuleId),
}

#[derive(Debug)]
struct Entry {
    /// `None`: no DWARF, or it failed to load; remembered so as not to try again.
    lines: Option<SharedLines>,
    weight: u64,
    last_used: u64,
}

/// Counters of the line-table cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineCounters {
    /// Line tables loaded (from the binary or its debug file).
    pub loaded: u64,
    /// Of them, loaded from a separate debug file.
    pub from_debug_files: u64,
    /// Loaded tables dropped to stay within the budget.
    pub evicted: u64,
    /// Times tables let go of what lookups parsed and read to stay within the budget, before
    /// any is dropped.
    pub shed: u64,
    /// Binaries whose DWARF could not be read (malformed, truncated, over the budget).
    pub failures: u64,
    /// Binaries with no DWARF line information, in themselves or in a debug file.
    pub missing: u64,
    /// Lookups that failed on malformed DWARF (the frame keeps its symbol, without a line).
    pub lookup_failures: u64,
    /// Estimated bytes of the tables held now.
    pub bytes: u64,
    /// Times every table was let go, no session needing lines any more.
    pub releases: u64,
    /// Questions of profiles answered ready (looked up ahead, or by an earlier profile).
    pub profile_answers_ready: u64,
    /// Questions of profiles looked up as the profile was built.
    pub profile_lookups: u64,
}

/// Who asks for source lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asker {
    /// A profile being built: its questions are counted.
    Profile,
    /// The warmer, ahead of the profiles ([`super::warmer`]).
    Ahead,
}

/// Most answers [`LineTables::frames`] keeps: the same locations are asked about at every
/// profile of a session, and a lookup (units, names demangled, paths) costs microseconds. The
/// map is emptied when full, so it holds at most this many answers of a few frames each.
pub const MAX_CACHED_ANSWERS: usize = 1 << 16;

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Key, Entry>,
    /// Answers by (module, svma), shared with every profile that asks again.
    answers: HashMap<(ModuleId, u64), Arc<[SourceFrame]>>,
    clock: u64,
    bytes: u64,
    counters: LineCounters,
}

/// The cache of loaded line tables.
#[derive(Debug)]
pub struct LineTables {
    budget: u64,
    debug_dirs: Vec<PathBuf>,
    state: Mutex<State>,
}

impl Default for LineTables {
    fn default() -> Self {
        LineTables::new(
            DEFAULT_DWARF_CACHE_BYTES,
            vec![PathBuf::from(GLOBAL_DEBUG_DIR)],
        )
    }
}

/// The binary whose lines are wanted, as the module registry knows it.
#[derive(Debug, Clone, Copy)]
pub struct Binary<'a> {
    /// Its module.
    pub module: ModuleId,
    /// The open binary.
    pub file: &'a File,
    /// Its path in the process's maps (for `.gnu_debuglink` candidates beside it).
    pub path: &'a Path,
    /// Its GNU build id.
    pub build_id: Option<&'a [u8]>,
    /// Its `.gnu_debuglink` file name.
    pub debuglink: Option<&'a vmscope_parse::elf::DebugLink>,
}

impl LineTables {
    /// A cache holding at most `budget` bytes of tables, looking for debug files under
    /// `debug_dirs` (in order).
    pub fn new(budget: u64, debug_dirs: Vec<PathBuf>) -> LineTables {
        LineTables {
            budget,
            debug_dirs,
            state: Mutex::new(State::default()),
        }
    }

    /// The debug directories searched.
    pub fn debug_dirs(&self) -> &[PathBuf] {
        &self.debug_dirs
    }

    /// The cache's counters.
    pub fn counters(&self) -> LineCounters {
        let state = self.lock();
        LineCounters {
            bytes: state.bytes,
            ..state.counters
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops what was kept for binaries the registry closed: tables keyed by a `closed` module,
    /// tables of a build id no held module uses any more (not `build_id_alive`), and answers
    /// about closed modules. Binaries without DWARF are remembered per build id too, so without
    /// this their entries would pile up with every distinct build the host runs.
    pub fn forget(
        &self,
        closed: impl Fn(ModuleId) -> bool,
        build_id_alive: impl Fn(&[u8]) -> bool,
    ) {
        let mut state = self.lock();
        let State {
            entries,
            answers,
            bytes,
            ..
        } = &mut *state;
        entries.retain(|key, entry| {
            let keep = match key {
                Key::Module(module) => !closed(*module),
                Key::BuildId(id) => build_id_alive(id),
            };
            if !keep {
                *bytes -= entry.weight;
            }
            keep
        });
        answers.retain(|(module, _), _| !closed(*module));
    }

    /// The frames at ELF virtual address `svma` of `binary`, innermost first (see
    /// [`SourceLines::lookup`]); empty when the binary has no DWARF or none covers the address.
    ///
    /// `asker` says who asks: a profile's questions are counted, answered ready (looked up
    /// ahead by the warmer, or by an earlier profile) or looked up then.
    pub fn frames(&self, binary: Binary<'_>, svma: u64, asker: Asker) -> Arc<[SourceFrame]> {
        let key = (binary.module, svma);
        {
            let mut state = self.lock();
            if let Some(answer) = state.answers.get(&key).cloned() {
                if asker == Asker::Profile {
                    state.counters.profile_answers_ready += 1;
                }
                return answer;
            }
            if asker == Asker::Profile {
                state.counters.profile_lookups += 1;
            }
        }
        let answer: Arc<[SourceFrame]> = self.look_up(binary, svma).into();
        let mut state = self.lock();
        if state.answers.len() >= MAX_CACHED_ANSWERS {
            state.answers.clear();
        }
        state.answers.insert(key, answer.clone());
        answer
    }

    fn look_up(&self, binary: Binary<'_>, svma: u64) -> Vec<SourceFrame> {
        let Some((key, lines)) = self.tables(binary) else {
            return Vec::new();
        };
        let mut guard = lines.lock().unwrap_or_else(|e| e.into_inner());
        // gimli and addr2line are written not to panic on malformed input; a daemon that
        // reads any binary on the host does not bet on it.
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| guard.lookup(svma)));
        let weight = guard.weight().saturating_mul(WEIGHT_PER_BYTE);
        drop(guard);
        self.lock().reweigh(&key, weight, self.budget);
        match found {
            Ok(Ok(frames)) => frames,
            Ok(Err(e)) => {
                tracing::debug!(module = %binary.path.display(), "DWARF lookup at {svma:#x}: {e}");
                self.lock().counters.lookup_failures += 1;
                Vec::new()
            }
            Err(_) => {
                tracing::warn!(module = %binary.path.display(), "DWARF lookup at {svma:#x} panicked");
                self.lock().counters.lookup_failures += 1;
                Vec::new()
            }
        }
    }

    /// The binary's tables, loaded on first use, with their key.
    fn tables(&self, binary: Binary<'_>) -> Option<(Key, SharedLines)> {
        let key = match binary.build_id {
            Some(id) => Key::BuildId(id.to_vec()),
            None => Key::Module(binary.module),
        };
        {
            let mut state = self.lock();
            state.clock += 1;
            let now = state.clock;
            if let Some(entry) = state.entries.get_mut(&key) {
                entry.last_used = now;
                return Some((key, entry.lines.clone()?));
            }
        }
        // Loaded outside the lock: other binaries' lookups go on meanwhile. Two threads may
        // load the same binary at once; the second result is dropped.
        let loaded = self.load(binary);
        let mut state = self.lock();
        if let Some(entry) = state.entries.get(&key) {
            return Some((key, entry.lines.clone()?));
        }
        let (lines, weight) = match loaded {
            Ok((lines, from_debug_file)) => {
                state.counters.loaded += 1;
                if from_debug_file {
                    state.counters.from_debug_files += 1;
                }
                let weight = lines.weight().saturating_mul(WEIGHT_PER_BYTE);
                (Some(Arc::new(Mutex::new(lines))), weight)
            }
            Err(Missing) => {
                state.counters.missing += 1;
                (None, 0)
            }
            Err(Failed(reason)) => {
                tracing::warn!(module = %binary.path.display(), "no source lines: {reason}");
                state.counters.failures += 1;
                (None, 0)
            }
        };
        state.make_room(weight, self.budget, None);
        state.clock += 1;
        let last_used = state.clock;
        state.bytes += weight;
        state.entries.insert(
            key.clone(),
            Entry {
                lines: lines.clone(),
                weight,
                last_used,
            },
        );
        Some((key, lines?))
    }

    #[cfg(test)]
    fn frames_for_test(&self, binary: Binary<'_>, svma: u64) -> Arc<[SourceFrame]> {
        self.frames(binary, svma, Asker::Profile)
    }

    #[cfg(test)]
    fn answers_cleared_for_test(&self) {
        self.lock().answers.clear();
    }

    /// Lets every loaded table go (binaries without DWARF stay remembered as such): no session
    /// needs lines now, and the next profile loads what it needs again. Answers how many
    /// bytes of tables went.
    pub fn release(&self) -> u64 {
        let mut state = self.lock();
        let before = state.bytes;
        state.entries.retain(|_, entry| entry.lines.is_none());
        state.bytes = 0;
        if before > 0 {
            state.counters.releases += 1;
        }
        before
    }

    /// Loads the binary's own DWARF, or its debug file's. `Ok(true)`: from a debug file.
    fn load(&self, binary: Binary<'_>) -> Result<(SourceLines, bool), LoadError> {
        // What one binary's tables hold from the start may take the whole budget, not more.
        let limit = self.budget / WEIGHT_PER_BYTE;
        match parse_file(binary.file, limit, None) {
            Ok(lines) => return Ok((lines, false)),
            Err(LoadError::Missing) => {}
            Err(failed) => return Err(failed),
        }
        // Only a debug file with the binary's build id: a debuglink name alone is a claim of
        // the (possibly hostile) binary.
        let build_id = binary.build_id.ok_or(LoadError::Missing)?;
        let mut failure = None;
        for candidate in debug_file_candidates_in(
            &self.debug_dirs,
            binary.path,
            Some(build_id),
            binary.debuglink,
        ) {
            let Ok(file) = sys::open_untrusted(&candidate, None) else {
                continue;
            };
            match parse_file(&file, limit, Some(build_id)) {
                Ok(lines) => {
                    tracing::debug!(binary = %binary.path.display(),
                        debug = %candidate.display(), "source lines from debug file");
                    return Ok((lines, true));
                }
                Err(LoadError::Missing) => {}
                Err(LoadError::Failed(reason)) => {
                    failure = Some(format!("{}: {reason}", candidate.display()));
                }
            }
        }
        Err(failure.map_or(LoadError::Missing, LoadError::Failed))
    }
}

impl State {
    /// Makes room for `weight` more bytes in `budget`, but not in the tables under `keep` (the
    /// tables that grew: a lookup in them is under way). First the least recently used tables
    /// shed what lookups parsed and read ([`SourceLines::shed`]): the next lookups in them
    /// parse a unit again each. Only then are whole tables dropped, least recently used
    /// first: loading one again inflates and indexes its sections, which, when a host's tables
    /// outweigh the budget, every profile would pay for each binary it names.
    fn make_room(&mut self, weight: u64, budget: u64, keep: Option<&Key>) {
        if self.bytes + weight > budget {
            let mut by_age: Vec<(u64, Key)> = self
                .entries
                .iter()
                .filter(|(key, entry)| entry.lines.is_some() && Some(*key) != keep)
                .map(|(key, entry)| (entry.last_used, key.clone()))
                .collect();
            by_age.sort_unstable_by_key(|(used, _)| *used);
            for (_, key) in by_age {
                if self.bytes + weight <= budget {
                    break;
                }
                let entry = self.entries.get_mut(&key).expect("listed above");
                // A table a lookup holds is in use: not the one to shed.
                let Some(Ok(mut lines)) = entry.lines.as_ref().map(|l| l.try_lock()) else {
                    continue;
                };
                lines.shed();
                let shed = lines.weight().saturating_mul(WEIGHT_PER_BYTE);
                drop(lines);
                if shed < entry.weight {
                    self.bytes -= entry.weight - shed;
                    entry.weight = shed;
                    self.counters.shed += 1;
                }
            }
        }
        while self.bytes + weight > budget {
            let oldest = self
                .entries
                .iter()
                .filter(|(key, entry)| entry.weight > 0 && Some(*key) != keep)
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(key, _)| key.clone());
            let Some(oldest) = oldest else { break };
            let entry = self.entries.remove(&oldest).expect("found above");
            self.bytes -= entry.weight;
            self.counters.evicted += 1;
        }
    }

    /// The tables under `key` weigh `weight` now (lookups parsed more of them): the others make
    /// room for what they grew by.
    fn reweigh(&mut self, key: &Key, weight: u64, budget: u64) {
        let Some(entry) = self.entries.get_mut(key) else {
            // Released or evicted meanwhile.
            return;
        };
        let old = std::mem::replace(&mut entry.weight, weight);
        self.bytes -= old;
        self.make_room(weight, budget, Some(key));
        self.bytes += weight;
    }
}

#[derive(Debug)]
enum LoadError {
    /// No DWARF lines anywhere: a normal answer.
    Missing,
    /// DWARF that could not be read, and why.
    Failed(String),
}
use LoadError::{Failed, Missing};

fn parse_file(file: &File, limit: u64, build_id: Option<&[u8]>) -> Result<SourceLines, LoadError> {
    let len = file
        .metadata()
        .map_err(|e| Failed(format!("cannot stat: {e}")))?
        .len();
    if len > MAX_BINARY_BYTES {
        return Err(Failed(format!("{len} bytes, too large to read")));
    }
    let reopen = || {
        file.try_clone()
            .map_err(|e| Failed(format!("cannot reopen: {e}")))
    };
    let cache = ReadCache::new(reopen()?);
    let pages: Arc<dyn ReadAt> = Arc::new(PositionedFile(reopen()?));
    let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        SourceLines::parse(&cache, pages, limit, build_id)
    }));
    match parsed {
        Ok(Ok(lines)) => Ok(lines),
        Ok(Err(DwarfError::NoDebugInfo)) => Err(Missing),
        // Not the debug file of this binary: as if absent.
        Ok(Err(DwarfError::WrongBuildId { found })) => {
            tracing::debug!("debug file candidate with build id {found} refused");
            Err(Missing)
        }
        Ok(Err(e)) => Err(Failed(e.to_string())),
        Err(_) => Err(Failed("the DWARF parser panicked".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary(file: &File, module: u64, build_id: Option<&[u8]>) -> Binary<'static> {
        // Tests leak a little to get 'static borrows of short-lived values.
        Binary {
            module: ModuleId(module),
            file: Box::leak(Box::new(file.try_clone().unwrap())),
            path: Path::new("/nonexistent/bin"),
            build_id: build_id.map(|id| &*Box::leak(id.to_vec().into_boxed_slice())),
            debuglink: None,
        }
    }

    fn this_exe() -> (File, Vec<u8>) {
        let exe = std::env::current_exe().unwrap();
        let symbols =
            vmscope_parse::elf::ElfSymbols::parse(&std::fs::read(&exe).unwrap()[..]).unwrap();
        (
            File::open(exe).unwrap(),
            symbols.build_id().unwrap().to_vec(),
        )
    }

    #[test]
    fn tables_load_once_per_build_id_shed_then_are_evicted_least_recently_used_first() {
        let (exe, id) = this_exe();
        let one = LineTables::new(u64::MAX / 4, Vec::new());
        let (_, a) = one.tables(binary(&exe, 1, Some(&id))).expect("tables");
        // Another module with the same build id: the same tables.
        let (_, b) = one.tables(binary(&exe, 2, Some(&id))).expect("tables");
        assert!(Arc::ptr_eq(&a, &b));
        let counters = one.counters();
        assert_eq!((counters.loaded, counters.evicted), (1, 0));
        let weight = counters.bytes;
        // What they weigh shed: what the load must hold, not the pages it read.
        let shed = {
            let mut lines = a.lock().unwrap();
            lines.shed();
            lines.weight() * WEIGHT_PER_BYTE
        };
        assert!(0 < shed && shed < weight, "{shed} shed, {weight} loaded");

        // Room for two tables as loaded and one shed: the third sheds the least recently used,
        // and all three stay.
        let (k1, k2, k3) = (b"one".as_slice(), b"two".as_slice(), b"three".as_slice());
        let key = |k: &[u8]| Key::BuildId(k.to_vec());
        let roomy = LineTables::new(weight * 2 + shed, Vec::new());
        roomy.tables(binary(&exe, 1, Some(k1))).unwrap();
        roomy.tables(binary(&exe, 2, Some(k2))).unwrap();
        // k1 used again: k2 is now the oldest.
        roomy.tables(binary(&exe, 1, Some(k1))).unwrap();
        roomy.tables(binary(&exe, 3, Some(k3))).unwrap();
        let counters = roomy.counters();
        assert_eq!(
            (counters.loaded, counters.shed, counters.evicted),
            (3, 1, 0)
        );
        assert_eq!(counters.bytes, weight * 2 + shed);
        let state = roomy.lock();
        assert_eq!(state.entries[&key(k2)].weight, shed);
        assert_eq!(state.entries[&key(k1)].weight, weight);
        drop(state);

        // Room for one as loaded and one and a half shed: shedding is not enough for the third,
        // and the least recently used goes.
        let tight = LineTables::new(weight + shed + shed / 2, Vec::new());
        tight.tables(binary(&exe, 1, Some(k1))).unwrap();
        tight.tables(binary(&exe, 2, Some(k2))).unwrap();
        tight.tables(binary(&exe, 3, Some(k3))).unwrap();
        let counters = tight.counters();
        assert_eq!(
            (counters.loaded, counters.shed, counters.evicted),
            (3, 2, 1),
            "{counters:?}"
        );
        assert!(counters.bytes <= weight + shed + shed / 2);
        let state = tight.lock();
        assert!(!state.entries.contains_key(&key(k1)));
        assert_eq!(state.entries[&key(k2)].weight, shed);
        assert_eq!(state.entries[&key(k3)].weight, weight);
    }

    /// Tables weigh what lookups made them read and parse: they grow as lookups reach new
    /// units, the others make room, and all of them go once nothing needs lines.
    #[test]
    fn lookups_weigh_what_they_parse_and_release_lets_every_table_go() {
        let (exe, id) = this_exe();
        let symbols = vmscope_parse::elf::ElfSymbols::parse(
            &std::fs::read(std::env::current_exe().unwrap()).unwrap()[..],
        )
        .unwrap();
        let starts: Vec<u64> = symbols
            .symbols()
            .map(|s| s.start)
            .filter(|&a| a > 0)
            .collect();
        let tables = LineTables::new(u64::MAX / 4, Vec::new());
        tables.tables(binary(&exe, 1, Some(&id))).expect("tables");
        let loaded = tables.counters().bytes;
        // Addresses all over the binary: units parsed, pages read.
        for &svma in starts.iter().step_by((starts.len() / 100).max(1)) {
            tables.frames_for_test(binary(&exe, 1, Some(&id)), svma);
        }
        let grown = tables.counters().bytes;
        assert!(
            grown > loaded,
            "{loaded} bytes before the lookups, {grown} after"
        );
        // Lazily: far less than the binary's debug sections, twice, as it weighed before.
        let exe_bytes = std::fs::metadata(std::env::current_exe().unwrap())
            .unwrap()
            .len();
        assert!(grown < exe_bytes, "{grown} of a {exe_bytes}-byte binary");

        // Another binary's tables (keyed apart) grown past the budget: the first sheds what its
        // lookups parsed and read, and stays loaded.
        let budget = grown + grown / 2;
        let two = LineTables::new(budget, Vec::new());
        for &svma in starts.iter().step_by((starts.len() / 100).max(1)) {
            two.frames_for_test(binary(&exe, 1, Some(b"first")), svma);
        }
        two.answers_cleared_for_test();
        for &svma in starts.iter().step_by((starts.len() / 100).max(1)) {
            two.frames_for_test(binary(&exe, 2, Some(b"second")), svma);
        }
        let counters = two.counters();
        assert_eq!((counters.loaded, counters.evicted), (2, 0), "{counters:?}");
        assert!(counters.shed >= 1, "{counters:?}");
        assert!(counters.bytes <= budget, "{counters:?}");
        assert!(two.lock().entries[&Key::BuildId(b"first".to_vec())].weight < grown);

        assert_eq!(tables.release(), grown);
        let counters = tables.counters();
        assert_eq!((counters.bytes, counters.releases), (0, 1));
        assert!(tables.lock().entries.is_empty());
        // Loaded again when asked about an address not answered before.
        tables.frames_for_test(binary(&exe, 1, Some(&id)), starts[starts.len() / 2] + 1);
        assert_eq!(tables.counters().loaded, 2);
    }

    /// An address asked about again (every profile of a session asks) is answered from the
    /// first answer, without a second lookup; the answers stay bounded.
    #[test]
    fn answers_are_kept_for_the_next_profile() {
        let (exe, id) = this_exe();
        let tables = LineTables::new(u64::MAX / 4, Vec::new());
        // An address in this test binary's code: this very function's (mangled names hold
        // its path).
        let symbols = vmscope_parse::elf::ElfSymbols::parse(
            &std::fs::read(std::env::current_exe().unwrap()).unwrap()[..],
        )
        .unwrap();
        let svma = symbols
            .symbols()
            .find(|s| s.name.contains("answers_are_kept_for_the_next_profile"))
            .map(|s| s.start)
            .expect("this test's symbol");
        let first = tables.frames_for_test(binary(&exe, 1, Some(&id)), svma);
        assert!(!first.is_empty(), "no frames at {svma:#x}");
        let again = tables.frames_for_test(binary(&exe, 1, Some(&id)), svma);
        assert!(Arc::ptr_eq(&first, &again), "looked up twice");
        assert_eq!(tables.lock().answers.len(), 1);
        let other = binary(&exe, 2, Some(&id));
        for svma in 0..MAX_CACHED_ANSWERS as u64 + 10 {
            tables.frames_for_test(other, svma);
        }
        assert!(tables.lock().answers.len() <= MAX_CACHED_ANSWERS);
    }

    /// What was kept for a binary the registry closed goes with it: tables keyed by its module,
    /// tables of a build id no held module uses any more, its answers.
    #[test]
    fn tables_and_answers_of_closed_binaries_are_dropped() {
        let (exe, id) = this_exe();
        let tables = LineTables::new(u64::MAX / 4, Vec::new());
        tables.tables(binary(&exe, 1, None)).expect("tables");
        tables.tables(binary(&exe, 2, Some(&id))).expect("tables");
        tables.frames_for_test(binary(&exe, 1, None), 0x10);
        tables.frames_for_test(binary(&exe, 2, Some(&id)), 0x10);
        let both = tables.counters().bytes;
        assert_eq!(tables.lock().answers.len(), 2);

        // Module 1 closed; another held module still has the build id.
        tables.forget(|m| m == ModuleId(1), |_| true);
        {
            let state = tables.lock();
            assert!(!state.entries.contains_key(&Key::Module(ModuleId(1))));
            assert!(state.entries.contains_key(&Key::BuildId(id.clone())));
            assert_eq!(
                state.answers.keys().map(|k| k.0).collect::<Vec<_>>(),
                [ModuleId(2)]
            );
        }
        assert_eq!(tables.counters().bytes, both / 2);

        // The last module of the build id closed.
        tables.forget(|m| m == ModuleId(2), |_| false);
        let state = tables.lock();
        assert!(state.entries.is_empty() && state.answers.is_empty());
        assert_eq!(state.bytes, 0);
    }

    /// Sections held in memory (compressed ones, inflated) count against the budget; the
    /// binary whose tables would hold more than it allows gets no lines.
    #[test]
    fn binaries_over_the_budget_or_without_dwarf_are_remembered_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tiny.c"), "int main(void) { return 0; }\n").unwrap();
        let built = std::process::Command::new("gcc")
            .args(["-g", "-gz=zlib", "-o", "tiny", "tiny.c"])
            .current_dir(dir.path())
            .status()
            .expect("gcc builds a program with compressed debug sections");
        assert!(built.success());
        let tiny = File::open(dir.path().join("tiny")).unwrap();
        let small = LineTables::new(100, Vec::new());
        assert!(small.tables(binary(&tiny, 1, None)).is_none());
        assert!(small.tables(binary(&tiny, 1, None)).is_none());
        assert_eq!(small.counters().failures, 1, "tried once");
        assert!(
            LineTables::new(1 << 20, Vec::new())
                .tables(binary(&tiny, 1, None))
                .is_some()
        );

        let not_elf = dir.path().join("script");
        std::fs::write(&not_elf, b"#!/bin/sh\n").unwrap();
        let tables = LineTables::default();
        assert!(
            tables
                .tables(binary(&File::open(&not_elf).unwrap(), 2, None))
                .is_none()
        );
        assert_eq!(tables.counters().failures, 1);
    }

    /// A stripped binary finds its debug file under a debug directory by build id; a file there
    /// with another build id is refused.
    #[test]
    fn debug_files_are_found_by_build_id_and_checked() {
        let (exe, id) = this_exe();
        let dir = tempfile::tempdir().unwrap();
        let stripped_path = dir.path().join("stripped");
        let status = std::process::Command::new("objcopy")
            .arg("--strip-debug")
            .arg(std::env::current_exe().unwrap())
            .arg(&stripped_path)
            .status()
            .expect("objcopy (binutils) runs");
        assert!(status.success());
        let stripped = File::open(&stripped_path).unwrap();
        let install = |id: &[u8]| {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            let path = dir
                .path()
                .join(".build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..]));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::copy(std::env::current_exe().unwrap(), path).unwrap();
        };
        let debug_dirs = vec![dir.path().to_path_buf()];
        // Without a debug file: no lines, counted as missing.
        let tables = LineTables::new(u64::MAX / 4, debug_dirs.clone());
        assert!(tables.tables(binary(&stripped, 1, Some(&id))).is_none());
        assert_eq!(tables.counters().missing, 1);
        // A file installed under the binary's build id that is another build: refused.
        let other_id = [0xabu8, 0xcd, 0xef, 0x01];
        install(&other_id);
        let tables = LineTables::new(u64::MAX / 4, debug_dirs.clone());
        assert!(
            tables
                .tables(binary(&stripped, 1, Some(&other_id)))
                .is_none()
        );
        assert_eq!(tables.counters().missing, 1);
        // The right one: found, and it gives this function's file.
        install(&id);
        let tables = LineTables::new(u64::MAX / 4, debug_dirs);
        let (_, lines) = tables
            .tables(binary(&stripped, 1, Some(&id)))
            .expect("tables");
        assert_eq!(tables.counters().from_debug_files, 1);
        drop(exe);
        let lines = lines.lock().unwrap();
        assert!(lines.weight() > 0);
    }
}
