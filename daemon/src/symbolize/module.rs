//! The binaries the daemon needs, each held open while something needs it and parsed at most
//! once while held.
//!
//! A binary is registered when a process that maps it is first read; registration opens the
//! file at once (through `/proc/PID/map_files`, see [`crate::sys::open_mapped_file`]). The open
//! file pins the inode, so the binary can be read later even if it was deleted or replaced, and
//! `(device, inode)` stays a unique key while the daemon holds it.
//!
//! A binary is held while a live process the daemon tracks maps it, or while a session that can
//! still be reported (running, stopping, or stopped and kept) has samples in it. The session
//! manager sweeps the registry once a second with what those reference
//! ([`Modules::retain`]): every other binary is closed and forgotten, with its registry entries
//! and what was loaded from it. A process mapping the same file later registers it again, under
//! a new [`ModuleId`]: ids are never reused, so a location kept somewhere never names another
//! file. A profile built from a snapshot taken just before its session was evicted may meet a
//! closed module; its rows then say so ([`Modules::is_closed`]) instead of naming anything.
//!
//! Symbols are parsed lazily, when a profile first needs them, through object's `ReadCache`:
//! it reads only the headers and tables it needs, and a file truncated under us gives an error
//! instead of the SIGBUS a memory map would. Parsed tables are shared by build-id, so the same
//! library in two containers (two inodes) is parsed once; the sharing holds them weakly, so they
//! live exactly as long as a held module (or a profile being built) uses them, and memory stays
//! bounded by the binaries held. A stripped binary gets the symbols of its separate debug file
//! (build-id or `.gnu_debuglink`, under the debug directories, /usr/lib/debug by default) when
//! one exists. Source lines come from the binary's DWARF, or its debug file's, through the
//! registry's [`LineTables`] (within their byte budget; dropped with the last module of their
//! build id). Unwind sections are loaded the same way, lazily, shared by build id: see
//! [`Module::unwind_sections`].

use std::{
    collections::{HashMap, HashSet},
    fs::File,
    io,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, RwLock, Weak,
        atomic::{AtomicU64, Ordering},
    },
};

use object::{Object as _, read::ReadCache};
use vmscope_parse::{
    dwarf::SourceFrame,
    elf::{DebugLink, ElfSymbols, debug_file_candidates_in},
};

use super::{
    lines::{Asker, Binary, LineTables},
    unwind_tables::{self, UnwindTables},
};
use crate::{
    sys::{self, FileId},
    vocab::ModuleId,
};

/// Largest binary the daemon will parse. Bigger files are refused with a reason rather than
/// risk reading gigabytes on behalf of a hostile process.
pub const MAX_BINARY_BYTES: u64 = 4 << 30;

/// A registered binary.
#[derive(Debug)]
pub struct Module {
    /// Its id.
    pub id: ModuleId,
    /// Path as the process's maps named it.
    pub path: PathBuf,
    /// File name, for reports ("libc.so.6").
    pub name: String,
    /// Its key in the registry while held.
    file_id: FileId,
    file: Result<File, String>,
    symbols: Reparsable<ElfSymbols>,
    unwind: Reparsable<UnwindTables>,
}

/// A table parsed from a binary on first use, and kept until let go ([`Modules::release_parsed`]):
/// then parsed again when next asked for. A failure is kept: it would fail again.
#[derive(Debug)]
struct Reparsable<T> {
    slot: Mutex<Option<Result<Arc<T>, String>>>,
}

impl<T> Reparsable<T> {
    fn new() -> Self {
        Reparsable {
            slot: Mutex::new(None),
        }
    }

    /// The table, parsed by `parse` if it is not held. Others asking meanwhile wait for it.
    fn get_or_parse(
        &self,
        parse: impl FnOnce() -> Result<Arc<T>, String>,
    ) -> Result<Arc<T>, String> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = &*slot {
            return held.clone();
        }
        let parsed = parse();
        *slot = Some(parsed.clone());
        parsed
    }

    /// Lets the table go, if one is held; answers whether one was.
    fn release(&self) -> bool {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(Result::is_ok) {
            *slot = None;
            return true;
        }
        false
    }
}

impl Module {
    /// A path to the very file the registry holds open (`/proc/self/fd/N`), for the kernel to
    /// resolve where the file itself is needed (a uprobe's target): whatever the process's
    /// mount namespace, and whatever has been put at its path since. `None` when it could not
    /// be opened.
    pub fn held_path(&self) -> Option<PathBuf> {
        use std::os::fd::AsRawFd as _;
        let file = self.file.as_ref().ok()?;
        Some(PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())))
    }

    /// Whether it is HotSpot's `libjvm.so`.
    pub fn is_libjvm(&self) -> bool {
        self.name == "libjvm.so"
    }

    /// The vmStructs exports of a `libjvm.so` (its dynamic symbols `gHotSpotVM*`), read from
    /// the very file the registry holds; the error is a reason for the log.
    pub fn hotspot_exports(
        &self,
    ) -> Result<vmscope_parse::hotspot::vm_structs::ElfExports, String> {
        let file = self.file.as_ref().map_err(Clone::clone)?;
        let cache = open_binary(file)?;
        vmscope_parse::hotspot::vm_structs::ElfExports::parse(&cache)
    }

    /// The module's symbols, parsed on first use; the error is a reason for the report.
    pub fn symbols(&self, modules: &Modules) -> Result<Arc<ElfSymbols>, String> {
        self.symbols.get_or_parse(|| {
            let file = self.file.as_ref().map_err(Clone::clone)?;
            let result = load_symbols(file, &self.path, modules);
            if let Err(reason) = &result {
                tracing::warn!(module = %self.path.display(), "cannot symbolise: {reason}");
            }
            result
        })
    }

    /// The source frames at file offset `offset` of the module (DWARF, see
    /// [`LineTables::frames`]), innermost first; empty when unknown.
    pub fn source_frames(
        &self,
        modules: &Modules,
        offset: u64,
        asker: Asker,
    ) -> Arc<[SourceFrame]> {
        let (Ok(file), Ok(symbols)) = (&self.file, self.symbols(modules)) else {
            return Arc::new([]);
        };
        let Some(svma) = symbols.file_offset_to_vaddr(offset) else {
            return Arc::new([]);
        };
        modules.lines.frames(
            Binary {
                module: self.id,
                file,
                path: &self.path,
                build_id: symbols.build_id(),
                debuglink: symbols.debuglink(),
            },
            svma,
            asker,
        )
    }

    /// The module's unwind sections, loaded on first use; the error is a reason for the report.
    ///
    /// A binary without `.eh_frame` and `.debug_frame` (stripped, built without unwind tables)
    /// gets the `.debug_frame` of its separate debug file when one with the same build id is
    /// installed. Tables without CFI are still an answer: its frames fall back to frame pointers.
    pub fn unwind_sections(&self, modules: &Modules) -> Result<Arc<UnwindTables>, String> {
        self.unwind.get_or_parse(|| {
            let result = self
                .file
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|file| load_unwind_tables(file, self, modules));
            if let Err(reason) = &result {
                modules.count(|c| c.unwind_failures += 1);
                tracing::warn!(module = %self.path.display(), "cannot unwind through: {reason}");
            }
            result
        })
    }
}

/// Counters of the module registry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModuleCounters {
    /// Binaries registered.
    pub registered: u64,
    /// Binaries that could not be opened.
    pub open_failures: u64,
    /// Symbol tables parsed.
    pub parsed: u64,
    /// Symbol tables reused from another file with the same build-id.
    pub build_id_hits: u64,
    /// Binaries whose symbols could not be read (malformed, truncated, too large).
    pub parse_failures: u64,
    /// Unwind tables loaded from a binary (or its debug file).
    pub unwind_loaded: u64,
    /// Unwind tables reused from another file with the same build-id.
    pub unwind_build_id_hits: u64,
    /// Binaries whose unwind tables could not be read.
    pub unwind_failures: u64,
    /// Binaries closed and forgotten because nothing needed them any more: `registered -
    /// closed` are held now.
    pub closed: u64,
    /// Binaries held open now (a gauge): held, minus those that could not be opened. A profile
    /// being built may keep one it uses open a little longer.
    pub open_now: u64,
    /// Symbol and unwind tables let go with no session sampling (parsed again when needed).
    pub tables_released: u64,
}

/// The registry of binaries, shared by the session manager (which registers, and closes what
/// nothing needs) and profile builders (which symbolise, on other threads).
#[derive(Debug, Default)]
pub struct Modules {
    /// Held binaries by file. Locked before `held` where both are.
    by_file: Mutex<HashMap<FileId, ModuleId>>,
    held: RwLock<HashMap<ModuleId, Arc<Module>>>,
    /// The next id: every id below it was registered, and is closed unless held.
    next_id: AtomicU64,
    /// Tables shared by build id, held weakly: the modules that loaded them own them.
    by_build_id: Mutex<HashMap<Vec<u8>, Weak<ElfSymbols>>>,
    unwind_by_build_id: Mutex<HashMap<Vec<u8>, Weak<UnwindTables>>>,
    counters: Mutex<ModuleCounters>,
    lines: LineTables,
    /// Profile builds and warm-ups under way, and when the last one ended: what the parsed
    /// tables must not be let go during (see [`Modules::in_use_within`]).
    users: Mutex<(usize, Option<std::time::Instant>)>,
}

/// A profile build or a warm-up under way: the parsed tables stay while it lives.
#[derive(Debug)]
pub struct InUse<'a> {
    modules: &'a Modules,
}

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        let mut users = self.modules.users.lock().unwrap_or_else(|e| e.into_inner());
        users.0 = users.0.saturating_sub(1);
        users.1 = Some(std::time::Instant::now());
    }
}

impl Modules {
    /// Marks a profile build or a warm-up as under way, until the guard is dropped.
    pub fn in_use(&self) -> InUse<'_> {
        self.users.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
        InUse { modules: self }
    }

    /// Whether a profile build or a warm-up is under way, or ended less than `window` ago:
    /// tables let go now would be parsed again at once (a build on a loaded host spends
    /// seconds in one binary's symbols between two line lookups).
    pub fn in_use_within(&self, window: std::time::Duration) -> bool {
        let users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        users.0 > 0 || users.1.is_some_and(|ended| ended.elapsed() < window)
    }

    /// An empty registry, with debug files under /usr/lib/debug and the default budget of line
    /// tables.
    pub fn new() -> Modules {
        Modules::default()
    }

    /// An empty registry whose line tables (and debug directories, for symbols too) are
    /// `lines`'.
    pub fn with_lines(lines: LineTables) -> Modules {
        Modules {
            lines,
            ..Modules::default()
        }
    }

    /// The cache of DWARF line tables.
    pub fn lines(&self) -> &LineTables {
        &self.lines
    }

    /// The id of the binary `id`, registering it (and opening it with `open`) on first sight.
    ///
    /// `open` runs with no lock held: it waits on the mapping process's memory lock, which that
    /// process may hold for good (see [`crate::process::access`]), and registrations of other
    /// processes' binaries must not wait behind it. Two threads that open the same new binary
    /// at once both open it; the first to finish registers it.
    pub fn register(
        &self,
        id: FileId,
        path: &Path,
        open: impl FnOnce() -> io::Result<File>,
    ) -> ModuleId {
        if let Some(&module) = self
            .by_file
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
        {
            return module;
        }
        let file = open().map_err(|e| format!("cannot open the binary: {e}"));
        let mut by_file = self.by_file.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&module) = by_file.get(&id) {
            return module;
        }
        self.count(|c| {
            c.registered += 1;
            if file.is_ok() {
                c.open_now += 1;
            } else {
                c.open_failures += 1;
            }
        });
        let module = ModuleId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.to_string_lossy().into_owned());
        let registered = Arc::new(Module {
            id: module,
            path: path.to_path_buf(),
            name,
            file_id: id,
            file,
            symbols: Reparsable::new(),
            unwind: Reparsable::new(),
        });
        self.held
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(module, registered);
        by_file.insert(id, module);
        module
    }

    /// A held module; `None` for one closed (see [`Modules::is_closed`]) or never registered.
    pub fn get(&self, id: ModuleId) -> Option<Arc<Module>> {
        self.held
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()
    }

    /// Whether `id` was registered and has been closed since: what a profile says of a location
    /// in it, rather than calling it a daemon bug.
    pub fn is_closed(&self, id: ModuleId) -> bool {
        id.0 < self.next_id.load(Ordering::Relaxed) && self.get(id).is_none()
    }

    /// Closes and forgets every held binary `keep` does not name, and answers how many.
    ///
    /// Its file is closed at once, unless a profile being built still uses the module (then
    /// when that build ends). What was loaded from it goes with it: its symbol and unwind tables
    /// unless another held module shares them by build id, its line tables and cached answers.
    /// The next process that maps the file registers it again, under a new id.
    pub fn retain(&self, mut keep: impl FnMut(ModuleId) -> bool) -> usize {
        let (closed, still_held): (Vec<Arc<Module>>, HashSet<ModuleId>) = {
            let mut by_file = self.by_file.lock().unwrap_or_else(|e| e.into_inner());
            let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
            let gone: Vec<ModuleId> = held.keys().copied().filter(|&id| !keep(id)).collect();
            let closed = gone
                .iter()
                .filter_map(|id| held.remove(id))
                .inspect(|module| {
                    by_file.remove(&module.file_id);
                })
                .collect();
            (closed, held.keys().copied().collect())
        };
        if closed.is_empty() {
            return 0;
        }
        let count = closed.len();
        let opened = closed.iter().filter(|m| m.file.is_ok()).count() as u64;
        self.count(|c| {
            c.closed += count as u64;
            c.open_now -= opened;
        });
        // Dropped first: the tables they alone used are freed, and their shared entries die.
        drop(closed);
        prune(&self.unwind_by_build_id);
        let alive: HashSet<Vec<u8>> = prune(&self.by_build_id);
        // Every module not held, not only those closed now: a profile that was still building
        // with a module closed earlier may have loaded its lines since.
        self.lines.forget(
            |module| !still_held.contains(&module),
            |id| alive.contains(id),
        );
        count
    }

    /// Lets go of the symbol and unwind tables parsed from every held binary (the binaries stay
    /// open): no session samples, and a later report parses again what it needs. Answers how
    /// many tables went.
    pub fn release_parsed(&self) -> usize {
        let held: Vec<Arc<Module>> = self
            .held
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let released = held
            .iter()
            .map(|m| usize::from(m.symbols.release()) + usize::from(m.unwind.release()))
            .sum();
        drop(held);
        prune(&self.unwind_by_build_id);
        prune(&self.by_build_id);
        self.count(|c| c.tables_released += released as u64);
        released
    }

    /// Number of held modules.
    pub fn len(&self) -> usize {
        self.held.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no module is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The registry's counters.
    pub fn counters(&self) -> ModuleCounters {
        *self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut ModuleCounters)) {
        f(&mut self.counters.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// A reader of the registered binary `file`, refused past [`MAX_BINARY_BYTES`]; the error is a
/// reason for the report.
fn open_binary(file: &File) -> Result<ReadCache<File>, String> {
    let len = file
        .metadata()
        .map_err(|e| format!("cannot stat the binary: {e}"))?
        .len();
    if len > MAX_BINARY_BYTES {
        return Err(format!(
            "binary is {len} bytes, more than the {MAX_BINARY_BYTES} the daemon parses"
        ));
    }
    let file = file
        .try_clone()
        .map_err(|e| format!("cannot reopen the binary: {e}"))?;
    Ok(ReadCache::new(file))
}

/// What a table shared by build id already holds for `id`, if a module still uses it.
fn shared<T>(by_build_id: &Mutex<HashMap<Vec<u8>, Weak<T>>>, id: &[u8]) -> Option<Arc<T>> {
    by_build_id
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(id)
        .and_then(Weak::upgrade)
}

/// Shares `value` under build id `id` (when the binary has one), and returns it: the caller
/// owns it, the table only points at it.
fn share<T>(
    by_build_id: &Mutex<HashMap<Vec<u8>, Weak<T>>>,
    id: Option<Vec<u8>>,
    value: T,
) -> Arc<T> {
    let value = Arc::new(value);
    if let Some(id) = id {
        by_build_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Arc::downgrade(&value));
    }
    value
}

/// Drops the entries of a table shared by build id that no module uses any more, and returns
/// the build ids still in use.
fn prune<T>(by_build_id: &Mutex<HashMap<Vec<u8>, Weak<T>>>) -> HashSet<Vec<u8>> {
    let mut map = by_build_id.lock().unwrap_or_else(|e| e.into_inner());
    map.retain(|_, table| table.strong_count() > 0);
    map.keys().cloned().collect()
}

/// The first separate debug file of the binary at `path` with build id `build_id` that `parse`
/// accepts, under the rules of [`find_debug_file`]: candidates from the debug directories and
/// beside the binary, opened as untrusted files, refused past [`MAX_BINARY_BYTES`]. `parse`
/// answers `None` for a file it cannot use (it checks the build id).
fn find_debug<T>(
    path: &Path,
    build_id: &[u8],
    debuglink: Option<&DebugLink>,
    modules: &Modules,
    mut parse: impl FnMut(&ReadCache<File>) -> Option<T>,
) -> Option<T> {
    for candidate in
        debug_file_candidates_in(modules.lines.debug_dirs(), path, Some(build_id), debuglink)
    {
        let Ok(file) = sys::open_untrusted(&candidate, None) else {
            continue;
        };
        if file.metadata().map_or(true, |m| m.len() > MAX_BINARY_BYTES) {
            continue;
        }
        if let Some(debug) = parse(&ReadCache::new(file)) {
            tracing::debug!(binary = %path.display(), debug = %candidate.display(), "using debug file");
            return Some(debug);
        }
    }
    None
}

fn load_symbols(file: &File, path: &Path, modules: &Modules) -> Result<Arc<ElfSymbols>, String> {
    let cache = open_binary(file).inspect_err(|_| modules.count(|c| c.parse_failures += 1))?;
    // The build-id is cheap to read (headers and one note) and spares a full parse of a binary
    // already seen under another inode.
    let build_id = object::File::parse(&cache)
        .ok()
        .and_then(|f| f.build_id().ok().flatten().map(<[u8]>::to_vec));
    if let Some(symbols) = build_id
        .as_deref()
        .and_then(|id| shared(&modules.by_build_id, id))
    {
        modules.count(|c| c.build_id_hits += 1);
        return Ok(symbols);
    }
    let mut symbols = match ElfSymbols::parse(&cache) {
        Ok(symbols) => symbols,
        Err(e) => {
            modules.count(|c| c.parse_failures += 1);
            return Err(e.to_string());
        }
    };
    drop(cache);
    if !symbols.has_symtab()
        && let Some(debug) = find_debug_file(path, &symbols, modules)
    {
        symbols.merge_symbols(debug);
    }
    modules.count(|c| c.parsed += 1);
    Ok(share(&modules.by_build_id, build_id, symbols))
}

fn load_unwind_tables(
    file: &File,
    module: &Module,
    modules: &Modules,
) -> Result<Arc<UnwindTables>, String> {
    let cache = open_binary(file)?;
    // The build-id (headers and one note) spares loading the sections of a binary already seen
    // under another inode.
    let build_id = unwind_tables::read_build_id(&cache).map_err(|e| e.to_string())?;
    if let Some(tables) = build_id
        .as_deref()
        .and_then(|id| shared(&modules.unwind_by_build_id, id))
    {
        modules.count(|c| c.unwind_build_id_hits += 1);
        return Ok(tables);
    }
    let mut tables = UnwindTables::parse(&cache).map_err(|e| e.to_string())?;
    drop(cache);
    if !tables.has_cfi()
        && let Some(debug) = find_debug_unwind_tables(module, &tables, modules)
    {
        tables.adopt_debug_frame(debug);
    }
    tracing::debug!(
        module = %module.path.display(),
        kind = tables.kind(),
        bytes = tables.section_bytes(),
        "unwind tables loaded"
    );
    modules.count(|c| c.unwind_loaded += 1);
    Ok(share(&modules.unwind_by_build_id, build_id, tables))
}

/// The unwind tables of a binary's separate debug file, under the rules of
/// [`find_debug_file`]: same build id, candidates opened as untrusted files.
fn find_debug_unwind_tables(
    module: &Module,
    stripped: &UnwindTables,
    modules: &Modules,
) -> Option<UnwindTables> {
    let build_id = stripped.build_id()?;
    // The debuglink is parsed with the symbols, which the profile needs anyway.
    let symbols = module.symbols(modules).ok();
    let debuglink = symbols.as_deref().and_then(ElfSymbols::debuglink);
    find_debug(
        &module.path,
        build_id,
        debuglink,
        modules,
        |cache| match UnwindTables::parse(cache) {
            Ok(debug) => (debug.build_id() == Some(build_id)).then_some(debug),
            Err(e) => {
                tracing::debug!(binary = %module.path.display(), "unusable debug file: {e}");
                None
            }
        },
    )
}

/// The symbols of a separate debug file for a stripped binary, if one is installed and matches.
///
/// Only binaries with a build-id get one, and only a debug file with the same build-id: a
/// `.gnu_debuglink` name alone is a claim by the (possibly hostile) binary, and a debug file of
/// another build would name the wrong functions, which is worse than none. Candidates beside
/// the binary are opened under [`sys::open_untrusted`]'s rules.
fn find_debug_file(path: &Path, stripped: &ElfSymbols, modules: &Modules) -> Option<ElfSymbols> {
    let build_id = stripped.build_id()?;
    find_debug(path, build_id, stripped.debuglink(), modules, |cache| {
        let Ok(debug) = ElfSymbols::parse(cache) else {
            modules.count(|c| c.parse_failures += 1);
            return None;
        };
        (debug.build_id() == Some(build_id)).then_some(debug)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(inode: u64) -> FileId {
        FileId {
            dev_major: 8,
            dev_minor: 1,
            inode,
        }
    }

    /// How many descriptors of this process point at `path`: other tests running at once open
    /// files of their own, never this test's temporary ones.
    fn fds_on(path: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target == path)
            .count()
    }

    /// An open that hangs (a process that holds its own memory lock) holds up no registration
    /// of another binary.
    #[test]
    fn an_open_that_hangs_holds_up_no_other_registration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, b"bytes").unwrap();
        let modules = Arc::new(Modules::new());
        let (release, hung) = std::sync::mpsc::channel::<()>();
        let held = {
            let (modules, path) = (modules.clone(), path.clone());
            std::thread::spawn(move || {
                modules.register(id(1), &path, || {
                    let _ = hung.recv();
                    File::open(&path)
                })
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (done, answer) = std::sync::mpsc::channel();
        {
            let (modules, path) = (modules.clone(), path.clone());
            std::thread::spawn(move || {
                let _ = done.send(modules.register(id(2), &path, || File::open(&path)));
            });
        }
        let other = answer
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("a registration waited behind another binary's open");
        release.send(()).unwrap();
        assert_ne!(held.join().unwrap(), other);
    }

    #[test]
    fn binaries_not_kept_are_closed_and_registered_again_under_a_new_id() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"not an ELF file").unwrap();
        std::fs::write(&b, b"not an ELF file either").unwrap();
        let modules = Modules::new();
        let first = modules.register(id(1), &a, || File::open(&a));
        let second = modules.register(id(2), &b, || File::open(&b));
        let missing = modules.register(id(3), Path::new("/gone"), || {
            Err(io::Error::from(io::ErrorKind::NotFound))
        });
        assert_eq!((fds_on(&a), fds_on(&b)), (1, 1));
        let counters = modules.counters();
        assert_eq!((counters.open_now, counters.closed), (2, 0));

        assert_eq!(modules.retain(|m| m == first), 2);
        assert_eq!((fds_on(&a), fds_on(&b)), (1, 0), "b is closed");
        assert!(modules.get(first).is_some());
        assert!(modules.get(second).is_none() && modules.get(missing).is_none());
        assert!(modules.is_closed(second) && modules.is_closed(missing));
        assert!(!modules.is_closed(first));
        assert!(
            !modules.is_closed(ModuleId(1000)),
            "never registered is not closed"
        );
        let counters = modules.counters();
        assert_eq!(
            (counters.registered, counters.open_now, counters.closed),
            (3, 1, 2)
        );
        assert_eq!(modules.len(), 1);

        // A process maps b again: opened again, under an id never seen before.
        let mut opened = false;
        let again = modules.register(id(2), &b, || {
            opened = true;
            File::open(&b)
        });
        assert!(opened);
        assert!(again > missing && again != second);
        assert_eq!(fds_on(&b), 1);
        assert_eq!(modules.retain(|m| m == first || m == again), 0);
    }

    /// A profile being built holds the module it uses: its file closes when the build ends.
    #[test]
    fn a_module_in_use_by_a_profile_closes_when_the_profile_is_done() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib");
        std::fs::write(&path, b"bytes").unwrap();
        let modules = Modules::new();
        let module = modules.register(id(1), &path, || File::open(&path));
        let in_use = modules.get(module).unwrap();
        assert_eq!(modules.retain(|_| false), 1);
        assert!(modules.is_closed(module));
        assert_eq!(fds_on(&path), 1, "still read by the profile");
        drop(in_use);
        assert_eq!(fds_on(&path), 0);
    }

    /// Symbol tables shared by build id live as long as a held module uses them, not longer:
    /// the cache is bounded by the binaries held.
    #[test]
    fn tables_shared_by_build_id_go_with_the_last_module_that_uses_them() {
        let exe = std::env::current_exe().unwrap();
        let modules = Modules::new();
        let one = modules.register(id(1), &exe, || File::open(&exe));
        let two = modules.register(id(2), &exe, || File::open(&exe));
        let symbols = modules.get(one).unwrap().symbols(&modules).unwrap();
        let build_id = symbols.build_id().expect("a build id").to_vec();
        let shared = modules.get(two).unwrap().symbols(&modules).unwrap();
        assert!(Arc::ptr_eq(&symbols, &shared));
        assert_eq!(modules.counters().build_id_hits, 1);
        drop((symbols, shared));

        modules.retain(|m| m == two);
        assert!(
            shared_entry(&modules, &build_id),
            "two still uses the tables"
        );
        modules.retain(|_| false);
        assert!(!shared_entry(&modules, &build_id), "freed with the last");

        // Registered again, the binary is parsed again.
        let three = modules.register(id(1), &exe, || File::open(&exe));
        modules.get(three).unwrap().symbols(&modules).unwrap();
        assert_eq!(modules.counters().parsed, 2);
    }

    fn shared_entry(modules: &Modules, build_id: &[u8]) -> bool {
        modules
            .by_build_id
            .lock()
            .unwrap()
            .get(build_id)
            .is_some_and(|w| w.strong_count() > 0)
    }
}
