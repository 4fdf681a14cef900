//! The binaries the daemon has seen, opened once each and parsed at most once each.
//!
//! A binary is registered when a process that maps it is first read; registration opens the
//! file at once (through `/proc/PID/map_files`, see [`crate::sys::open_mapped_file`]) and keeps
//! it open. The open file pins the inode, so the binary can be read later even if it was
//! deleted or replaced, and `(device, inode)` stays a unique key while the daemon holds it.
//!
//! Symbols are parsed lazily, when a profile first needs them, through object's `ReadCache`:
//! it reads only the headers and tables it needs, and a file truncated under us gives an error
//! instead of the SIGBUS a memory map would. Parsed tables are shared by build-id, so the same
//! library in two containers (two inodes) is parsed once. A stripped binary gets the symbols of
//! its separate debug file (build-id or `.gnu_debuglink`, under the debug directories,
//! /usr/lib/debug by default) when one exists. Source lines come from the binary's DWARF, or its
//! debug file's, through the registry's [`LineTables`]. Unwind sections are loaded the same way,
//! lazily, shared by build id: see [`Module::unwind_sections`].

use std::{
    collections::HashMap,
    fs::File,
    io,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock, RwLock},
};

use object::{Object as _, read::ReadCache};
use vmscope_parse::{
    dwarf::SourceFrame,
    elf::{DebugLink, ElfSymbols, debug_file_candidates_in},
};

use super::lines::{Binary, LineTables};
use crate::{
    sys::{self, FileId},
    unwind::tables::{self, UnwindTables},
};

/// Index of a registered binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModuleId(pub u32);

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
    file: Result<File, String>,
    symbols: OnceLock<Result<Arc<ElfSymbols>, String>>,
    unwind: OnceLock<Result<Arc<UnwindTables>, String>>,
}

impl Module {
    /// The module's symbols, parsed on first use; the error is a reason for the report.
    pub fn symbols(&self, modules: &Modules) -> Result<Arc<ElfSymbols>, String> {
        self.symbols
            .get_or_init(|| {
                let file = self.file.as_ref().map_err(Clone::clone)?;
                let result = load_symbols(file, &self.path, modules);
                if let Err(reason) = &result {
                    tracing::warn!(module = %self.path.display(), "cannot symbolise: {reason}");
                }
                result
            })
            .clone()
    }

    /// The source frames at file offset `offset` of the module (DWARF, see
    /// [`LineTables::frames`]), innermost first; empty when unknown.
    pub fn source_frames(&self, modules: &Modules, offset: u64) -> Arc<[SourceFrame]> {
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
        )
    }

    /// The module's unwind sections, loaded on first use; the error is a reason for the report.
    ///
    /// A binary without `.eh_frame` and `.debug_frame` (stripped, built without unwind tables)
    /// gets the `.debug_frame` of its separate debug file when one with the same build id is
    /// installed. Tables without CFI are still an answer: its frames fall back to frame pointers.
    pub fn unwind_sections(&self, modules: &Modules) -> Result<Arc<UnwindTables>, String> {
        self.unwind
            .get_or_init(|| {
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
            .clone()
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
}

/// The registry of binaries, shared by the session manager (which registers) and profile
/// builders (which symbolise, on other threads).
#[derive(Debug, Default)]
pub struct Modules {
    by_file: Mutex<HashMap<FileId, ModuleId>>,
    list: RwLock<Vec<Arc<Module>>>,
    by_build_id: Mutex<HashMap<Vec<u8>, Arc<ElfSymbols>>>,
    unwind_by_build_id: Mutex<HashMap<Vec<u8>, Arc<UnwindTables>>>,
    counters: Mutex<ModuleCounters>,
    lines: LineTables,
}

impl Modules {
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
    pub fn register(
        &self,
        id: FileId,
        path: &Path,
        open: impl FnOnce() -> io::Result<File>,
    ) -> ModuleId {
        let mut by_file = self.by_file.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&module) = by_file.get(&id) {
            return module;
        }
        let file = open().map_err(|e| format!("cannot open the binary: {e}"));
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        counters.registered += 1;
        if file.is_err() {
            counters.open_failures += 1;
        }
        drop(counters);
        let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
        let module = ModuleId(list.len() as u32);
        list.push(Arc::new(Module {
            id: module,
            path: path.to_path_buf(),
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.to_string_lossy().into_owned()),
            file,
            symbols: OnceLock::new(),
            unwind: OnceLock::new(),
        }));
        by_file.insert(id, module);
        module
    }

    /// A registered module.
    pub fn get(&self, id: ModuleId) -> Option<Arc<Module>> {
        self.list
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id.0 as usize)
            .cloned()
    }

    /// Number of registered modules.
    pub fn len(&self) -> usize {
        self.list.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no module is registered.
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

/// What a table shared by build id already holds for `id`.
fn shared<T>(by_build_id: &Mutex<HashMap<Vec<u8>, Arc<T>>>, id: &[u8]) -> Option<Arc<T>> {
    by_build_id
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(id)
        .cloned()
}

/// Shares `value` under build id `id` (when the binary has one), and returns it.
fn share<T>(
    by_build_id: &Mutex<HashMap<Vec<u8>, Arc<T>>>,
    id: Option<Vec<u8>>,
    value: T,
) -> Arc<T> {
    let value = Arc::new(value);
    if let Some(id) = id {
        by_build_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, value.clone());
    }
    value
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
    let build_id = tables::read_build_id(&cache).map_err(|e| e.to_string())?;
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
