//! Symbols and load segments of one ELF file, for turning sampled addresses into function names.
//!
//! The daemon normalises every sample early, while the process still lives, to (binary, file
//! offset): the offset comes from the `/proc/PID/maps` line of the mapping that holds the
//! instruction pointer. It symbolises late, once per unique address, with this module: the
//! file offset goes through the binary's `PT_LOAD` program headers to an ELF virtual address
//! ([`ElfSymbols::file_offset_to_vaddr`], the same for PIE and non-PIE), and that address is
//! looked up in the binary's function symbols ([`ElfSymbols::lookup`]).
//!
//! Parsing is the slow path, done once per binary (the caller caches the result by build-id);
//! lookups are binary searches. [`ElfSymbols`] owns its data so that the cache holds no file
//! handle or mapping. The parser does no I/O of its own: it reads through [`object::ReadRef`],
//! normally a `&ReadCache<File>` so that a file truncated while being read gives an error rather
//! than a SIGBUS as a memory mapping would. Files come from any process on the host, so they
//! are untrusted: every table is bounds-checked against the file length before it is read, no
//! input can make this module panic, and its memory use is bounded by a small multiple of the
//! file size.
//!
//! We use `object`'s ELF header types and accessors (all classes and endiannesses) but not its
//! high-level `ElfFile`: that one also parses relocation sections we do not need (one bad
//! relocation section would make the whole binary unusable), and it reads each symbol name
//! separately, one read system call each through `ReadCache`. Here each string table is read
//! once.

use std::borrow::Cow;
use std::collections::HashMap;
use std::mem;
use std::path::{Component, Path, PathBuf};

use object::elf;
use object::endian::{Endianness, U32};
use object::read::elf::{
    FileHeader, NoteIterator, ProgramHeader as _, SectionHeader as _, Sym as _,
};
use object::{Pod, ReadRef};

use crate::demangle::demangle;

/// Root under which distributions install separate debug files (`-dbg` / `-debuginfo`
/// packages), searched by gdb and perf by default.
pub const GLOBAL_DEBUG_DIR: &str = "/usr/lib/debug";

/// How many symbols [`ElfSymbols::lookup`] steps back, at most, to find the innermost of several
/// nested symbols that contain an address. Nesting is rare and shallow; the bound keeps a lookup
/// O(log n) however a file is laid out, and past it the outermost container is still found.
const MAX_BACK_SCAN: usize = 16;

/// How many note sections (or segments) are searched for the build-id, and the largest one
/// read. The build-id note comes first in practice, in a section of a few dozen bytes.
const MAX_NOTE_AREAS: usize = 16;
const MAX_NOTE_AREA_SIZE: u64 = 1 << 20;

/// Rank bits, lower is better when two symbols share an address (see [`rank`]).
const RANK_ZERO_SIZE: u8 = 1 << 3;
const RANK_BIND_SHIFT: u8 = 1;
const RANK_FROM_DYNSYM: u8 = 1;

/// Symbols and load segments of one ELF file, ready for address lookups.
///
/// Holds only the defined code symbols of `.symtab` and `.dynsym` (one per address), sorted
/// by address, with their names in one string arena, plus what is needed to map file offsets
/// to addresses and to find a separate debug file. It borrows nothing from the input, so it can
/// be cached after the file is closed.
#[derive(Debug, Clone)]
pub struct ElfSymbols {
    /// Every kept symbol's (raw, mangled) name, concatenated.
    names: String,
    /// Sorted by `start`, at most one per address.
    symbols: Vec<Symbol>,
    /// `max_reach[i]` is the greatest end address of a sized symbol among `symbols[..=i]`: a
    /// prefix maximum that makes the search for an enclosing symbol a binary search.
    max_reach: Vec<u64>,
    /// `PT_LOAD` segments with file contents, sorted by file offset.
    loads: Vec<LoadSegment>,
    build_id: Option<Vec<u8>>,
    debuglink: Option<DebugLink>,
    has_symtab: bool,
    skipped: usize,
}

/// One function symbol, as found by [`ElfSymbols::lookup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymbolRef<'a> {
    /// The raw name from the symbol table, still mangled (see [`SymbolRef::demangled`]).
    pub name: &'a str,
    /// The symbol's ELF virtual address.
    pub start: u64,
    /// The size from the symbol table; 0 for symbols without one (assembly labels, some CRT
    /// functions), which are taken to extend to the next symbol or the end of their section.
    pub size: u64,
}

impl<'a> SymbolRef<'a> {
    /// The name made readable for a profile: Rust without its hash, C++ with its parameters,
    /// anything else unchanged (see [`crate::demangle::demangle`]).
    pub fn demangled(&self) -> Cow<'a, str> {
        demangle(self.name)
    }
}

/// Contents of a `.gnu_debuglink` section: how a stripped binary names its separate debug file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugLink {
    /// File name of the debug file, without any directory (see [`debug_file_candidates`] for
    /// where it is looked for). Names with a `/` are refused at parse time, so that a hostile
    /// binary cannot point the daemon at files outside the debug directories.
    pub file_name: String,
    /// CRC-32 (the gzip/zlib polynomial) of the whole debug file, to check that a file found
    /// by name really belongs to this binary.
    pub crc: u32,
}

/// Why an ELF file could not be parsed. The messages are meant for a log line or an API
/// response: they say what is wrong with the file in terms a person can check.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The data is not ELF at all (too short, or not starting with the ELF magic number).
    #[error("not an ELF file ({reason})")]
    NotElf {
        /// Which check failed.
        reason: &'static str,
    },
    /// A header or table lies (partly) past the end of the file: typically a file cut short
    /// by an interrupted copy or download, or being replaced while it was read.
    #[error("truncated ELF: {what} ends at byte {end} but the file is only {file_len} bytes long")]
    Truncated {
        /// The structure that does not fit.
        what: &'static str,
        /// Offset of the end of that structure.
        end: u64,
        /// Length of the file.
        file_len: u64,
    },
    /// The file's tables contradict each other or the ELF format (bad entry sizes, links to
    /// sections that do not exist, offsets that overflow, ...).
    #[error("malformed ELF: {0}")]
    Malformed(String),
    /// A well-formed ELF file this module does not handle, such as a relocatable object (`.o`)
    /// or a core dump, which have no load addresses to symbolise.
    #[error("unsupported ELF file: {0}")]
    Unsupported(String),
    /// The reader failed on a range that is inside the file: an I/O error, or the file shrank
    /// after its length was read (which a `ReadCache` reports this way instead of a SIGBUS).
    #[error(
        "could not read {what} from the ELF file (I/O error, or the file changed while being read)"
    )]
    Read {
        /// The structure being read.
        what: &'static str,
    },
}

#[derive(Debug, Clone, Copy)]
struct Symbol {
    start: u64,
    /// Exclusive end used by lookups: `start + size` for sized symbols, the end of their
    /// section for zero-size ones (the next symbol's start bounds them too, implicitly).
    end: u64,
    name_offset: u32,
    name_len: u32,
    rank: u8,
}

impl Symbol {
    fn is_sized(&self) -> bool {
        self.rank & RANK_ZERO_SIZE == 0
    }

    /// How far this symbol can contain an address found by looking back from a later symbol:
    /// zero-size symbols end where the next symbol starts, so they never do.
    fn reach(&self) -> u64 {
        if self.is_sized() {
            self.end
        } else {
            self.start
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct LoadSegment {
    offset: u64,
    filesz: u64,
    vaddr: u64,
}

/// A symbol that passed the filters, before deduplication and before its name is copied.
struct Candidate<'n> {
    start: u64,
    end: u64,
    rank: u8,
    name: &'n [u8],
    /// Identifies the name's bytes (table number, offset in its string table) so that names
    /// shared by several symbols are stored once.
    name_key: (usize, u32),
}

impl ElfSymbols {
    /// Parses one ELF file (executable, shared object or separate debug file; 32 or 64 bit;
    /// either endianness) from any `object` reader.
    ///
    /// Reads the ELF header, the program and section headers, the symbol tables with their
    /// string tables, the note sections and `.gnu_debuglink`; nothing else (in particular not
    /// the code or the DWARF data), which keeps the cost of a `ReadCache` small.
    pub fn parse<'data, R: ReadRef<'data>>(data: R) -> Result<ElfSymbols, ElfError> {
        let file_len = data.len().map_err(|()| ElfError::Read {
            what: "file length",
        })?;
        let ident_len = file_len.min(mem::size_of::<elf::Ident>() as u64);
        let ident = data
            .read_bytes_at(0, ident_len)
            .map_err(|()| ElfError::Read {
                what: "ELF identification",
            })?;
        let Some(magic) = ident.get(..4) else {
            return Err(ElfError::NotElf {
                reason: "file is shorter than the ELF magic number",
            });
        };
        if magic != elf::ELFMAG {
            return Err(ElfError::NotElf {
                reason: "bad magic",
            });
        }
        let Some(&[class, encoding, version]) = ident
            // EI_CLASS, EI_DATA and EI_VERSION.
            .get(4..7)
            .filter(|_| ident.len() == mem::size_of::<elf::Ident>())
        else {
            return Err(ElfError::Truncated {
                what: "ELF identification",
                end: mem::size_of::<elf::Ident>() as u64,
                file_len,
            });
        };
        if encoding != elf::ELFDATA2LSB && encoding != elf::ELFDATA2MSB {
            return Err(malformed(format!(
                "unknown data encoding {encoding} in the ELF identification"
            )));
        }
        if version != elf::EV_CURRENT {
            return Err(malformed(format!("unknown ELF version {version}")));
        }
        match class {
            elf::ELFCLASS32 => parse_elf::<elf::FileHeader32<Endianness>, R>(data, file_len),
            elf::ELFCLASS64 => parse_elf::<elf::FileHeader64<Endianness>, R>(data, file_len),
            other => Err(malformed(format!(
                "unknown ELF class {other} (neither 32 nor 64 bit)"
            ))),
        }
    }

    /// Translates a file offset into the ELF virtual address it is loaded at.
    ///
    /// The offset is what the daemon records per sample: mapping file offset + (ip - mapping
    /// start), from `/proc/PID/maps`. Going through the `PT_LOAD` segment that contains it
    /// (`vaddr = offset - p_offset + p_vaddr`) gives the address the symbol table uses, for
    /// PIE, non-PIE and shared objects alike, whatever the load bias. Only the file-backed part
    /// of a segment (`p_filesz`) counts: code is never in the zero-filled tail. `None` if no
    /// segment holds the offset, e.g. a mapping that is not the program text.
    pub fn file_offset_to_vaddr(&self, file_offset: u64) -> Option<u64> {
        // Segments do not overlap in real files, so the last one starting at or before the
        // offset is the one; the short look further back only covers odd linkers, and keeps a
        // file with thousands of segments from making each lookup linear.
        let candidates = self
            .loads
            .partition_point(|load| load.offset <= file_offset);
        self.loads
            .get(..candidates)?
            .iter()
            .rev()
            .take(MAX_BACK_SCAN)
            .find_map(|load| {
                let delta = file_offset.checked_sub(load.offset)?;
                if delta < load.filesz {
                    load.vaddr.checked_add(delta)
                } else {
                    None
                }
            })
    }

    /// Finds the function containing an ELF virtual address, in O(log n).
    ///
    /// The symbol with the greatest start at or below `vaddr` wins if it contains it: sized
    /// symbols up to `start + size`, zero-size ones up to the next symbol or the end of their
    /// section. Otherwise the address may still lie in an earlier, larger symbol that encloses
    /// the one found (a function with a sized label inside it), and the innermost such symbol
    /// is returned. `None` means no symbol covers the address (padding, PLT stubs, a stripped
    /// static function); the caller then shows module + offset.
    pub fn lookup(&self, vaddr: u64) -> Option<SymbolRef<'_>> {
        let candidates = self.symbols.partition_point(|symbol| symbol.start <= vaddr);
        let nearest = candidates.checked_sub(1)?;
        let symbol = self.symbols.get(nearest)?;
        if vaddr < symbol.end {
            return Some(self.symbol_ref(symbol));
        }
        // Earlier symbols all start at or before vaddr; the first one whose prefix-max reach
        // passes vaddr is itself a sized symbol containing it (the outermost one).
        let outermost = self
            .max_reach
            .get(..nearest)?
            .partition_point(|&reach| reach <= vaddr);
        if outermost >= nearest {
            return None;
        }
        let scan_from = outermost.max(nearest.saturating_sub(MAX_BACK_SCAN));
        let innermost = (scan_from + 1..nearest)
            .rev()
            .filter_map(|index| self.symbols.get(index))
            .find(|symbol| vaddr < symbol.reach());
        Some(self.symbol_ref(innermost.or_else(|| self.symbols.get(outermost))?))
    }

    /// The `NT_GNU_BUILD_ID` note: the key to cache parsed binaries by and to find a separate
    /// debug file under `/usr/lib/debug/.build-id/`.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// The `.gnu_debuglink` section of a stripped binary: the file name of its debug file and
    /// that file's CRC, the fallback when there is no build-id.
    pub fn debuglink(&self) -> Option<&DebugLink> {
        self.debuglink.as_ref()
    }

    /// Whether the file has a full symbol table (`.symtab`), including static functions. False
    /// for a stripped file, which only has the exported symbols of `.dynsym`: a sign that a
    /// separate debug file is worth looking for. True after merging one that has a `.symtab`.
    pub fn has_symtab(&self) -> bool {
        self.has_symtab
    }

    /// Number of symbols kept for lookups (one per address).
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// Whether no symbol was kept: every lookup will miss.
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// Number of code symbols dropped because their own entry was broken (name outside the
    /// string table, section index out of range): worth a debug log line, not worth refusing
    /// the whole file over.
    pub fn skipped_symbols(&self) -> usize {
        self.skipped
    }

    /// All kept symbols in address order, for diagnostics and tests.
    pub fn symbols(&self) -> impl ExactSizeIterator<Item = SymbolRef<'_>> + '_ {
        self.symbols.iter().map(|symbol| self.symbol_ref(symbol))
    }

    /// Adds the symbols of a separate debug file (found through build-id or debuglink under
    /// `/usr/lib/debug`) to this file's.
    ///
    /// The load segments, build-id and debuglink stay this file's: addresses are resolved
    /// against the binary that was mapped. Where both files have a symbol at the same address,
    /// the usual preference applies (sized, then global, then from `.symtab`), so the debug
    /// file's full names win over the stripped file's `.dynsym` entries. The caller checks that
    /// the debug file matches (same build-id, or debuglink CRC) before merging. In the
    /// theoretical case where the names together would pass 4 GiB, `debug` is ignored.
    pub fn merge_symbols(&mut self, debug: ElfSymbols) {
        let mut candidates = Vec::with_capacity(self.symbols.len() + debug.symbols.len());
        let sources: [(usize, &ElfSymbols); 2] = [(0, self), (1, &debug)];
        for (table, source) in sources {
            candidates.extend(source.symbols.iter().map(|symbol| Candidate {
                start: symbol.start,
                end: symbol.end,
                rank: symbol.rank,
                name: source.name_of(symbol).as_bytes(),
                name_key: (table, symbol.name_offset),
            }));
        }
        // Both arenas are already bounded; the budget only guards the u32 offsets.
        let budget = self.names.len().saturating_add(debug.names.len());
        if let Ok((names, symbols)) = build_index(candidates, budget) {
            self.names = names;
            self.max_reach = prefix_max_reach(&symbols);
            self.symbols = symbols;
            self.has_symtab |= debug.has_symtab;
            self.skipped = self.skipped.saturating_add(debug.skipped);
        }
    }

    fn symbol_ref(&self, symbol: &Symbol) -> SymbolRef<'_> {
        SymbolRef {
            name: self.name_of(symbol),
            start: symbol.start,
            size: symbol_size(symbol),
        }
    }

    fn name_of(&self, symbol: &Symbol) -> &str {
        let start = symbol.name_offset as usize;
        let end = start.saturating_add(symbol.name_len as usize);
        self.names.get(start..end).unwrap_or_default()
    }
}

fn symbol_size(symbol: &Symbol) -> u64 {
    if symbol.is_sized() {
        symbol.end.saturating_sub(symbol.start)
    } else {
        0
    }
}

/// Candidate paths of a separate debug file, in the order gdb and perf look, under the global
/// debug directory ([`GLOBAL_DEBUG_DIR`]); see [`debug_file_candidates_in`].
pub fn debug_file_candidates(
    binary_path: &Path,
    build_id: Option<&[u8]>,
    debuglink: Option<&DebugLink>,
) -> Vec<PathBuf> {
    debug_file_candidates_in(
        &[PathBuf::from(GLOBAL_DEBUG_DIR)],
        binary_path,
        build_id,
        debuglink,
    )
}

/// Candidate paths of a separate debug file under the debug directories `roots` (perf's
/// buildid dirs, gdb's `debug-file-directory`), in the order gdb and perf look.
///
/// For build-id `ab cd ef …`, under each root: `ROOT/.build-id/ab/cdef….debug`. Then, for a
/// debuglink file name `N` of a binary at `/dir/bin`: `/dir/N`, `/dir/.debug/N`, and under each
/// root `ROOT/dir/N`. Pure path computation: the caller opens the candidates (under the
/// target's root if it is in another mount namespace), parses them and checks that the
/// build-id or the debuglink CRC matches before [`ElfSymbols::merge_symbols`]. A debuglink
/// name with a path separator, or naming the binary itself, yields no candidate.
pub fn debug_file_candidates_in(
    roots: &[PathBuf],
    binary_path: &Path,
    build_id: Option<&[u8]>,
    debuglink: Option<&DebugLink>,
) -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Some((first, rest)) = build_id.and_then(|id| id.split_first())
        && !rest.is_empty()
    {
        let file = format!("{}.debug", hex(rest));
        for root in roots {
            candidates.push(root.join(".build-id").join(hex(&[*first])).join(&file));
        }
    }
    if let Some(link) = debuglink
        && is_plain_file_name(&link.file_name)
    {
        let dir = binary_path.parent().unwrap_or(Path::new(""));
        // The binary's directory, re-rooted under each debug directory.
        let relative_dir: PathBuf = dir
            .components()
            .filter(|component| matches!(component, Component::Normal(_)))
            .collect();
        let beside = [
            dir.join(&link.file_name),
            dir.join(".debug").join(&link.file_name),
        ];
        let under_roots = roots
            .iter()
            .map(|root| root.join(&relative_dir).join(&link.file_name));
        for path in beside.into_iter().chain(under_roots) {
            if path != binary_path {
                candidates.push(path);
            }
        }
    }
    candidates
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

fn malformed(message: String) -> ElfError {
    ElfError::Malformed(message)
}

fn parse_elf<'data, Elf, R>(data: R, file_len: u64) -> Result<ElfSymbols, ElfError>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let header: &Elf = read_pod(data, file_len, 0, "ELF header")?;
    let endian = header
        .endian()
        .map_err(|_| malformed("unknown data encoding".to_string()))?;
    match header.e_type(endian) {
        elf::ET_EXEC | elf::ET_DYN => {}
        elf::ET_REL => {
            return Err(ElfError::Unsupported(
                "relocatable object file (.o): it has no load addresses to symbolise".to_string(),
            ));
        }
        elf::ET_CORE => {
            return Err(ElfError::Unsupported(
                "core dump, not a program or library".to_string(),
            ));
        }
        other => return Err(ElfError::Unsupported(format!("ELF file type {other:#x}"))),
    }

    let sections = section_headers(header, endian, data, file_len)?;
    let segments = program_headers(header, endian, data, file_len, sections.first())?;
    let loads = load_segments(segments, endian);
    let section_names = section_name_table(header, endian, data, file_len, sections)?;

    let machine = header.e_machine(endian);
    let mut has_symtab = false;
    let mut skipped = 0;
    let mut candidates = Vec::new();
    let mut string_bytes: usize = 0;
    // The format allows one table of each kind; taking only the first bounds the work on a
    // file that declares thousands.
    for from_dynsym in [false, true] {
        let wanted = if from_dynsym {
            elf::SHT_DYNSYM
        } else {
            elf::SHT_SYMTAB
        };
        let Some((table_index, table)) = sections
            .iter()
            .enumerate()
            .find(|(_, section)| section.sh_type(endian) == wanted)
        else {
            continue;
        };
        let symbols: &[Elf::Sym] = section_array(table, endian, data, file_len, "symbol table")?;
        has_symtab |= !from_dynsym && symbols.len() > 1;
        let link = table.sh_link(endian);
        let strings_section = sections.get(link as usize).filter(|_| link != 0).ok_or_else(|| {
            malformed(format!(
                "symbol table (section {table_index}) links to string table section {link}, which does not exist"
            ))
        })?;
        if strings_section.sh_type(endian) != elf::SHT_STRTAB {
            return Err(malformed(format!(
                "symbol table (section {table_index}) links to section {link}, which is not a string table"
            )));
        }
        let strings = StringTable::new(section_bytes(
            strings_section,
            endian,
            data,
            file_len,
            "symbol string table",
        )?);
        string_bytes = string_bytes.saturating_add(strings.bytes.len());
        let extended_indices =
            extended_section_indices(sections, endian, data, file_len, table_index)?;

        for (symbol_index, symbol) in symbols.iter().enumerate().skip(1) {
            let symbol_type = symbol.st_type();
            if !matches!(
                symbol_type,
                elf::STT_FUNC | elf::STT_GNU_IFUNC | elf::STT_NOTYPE
            ) {
                continue;
            }
            let section_index = match symbol.st_shndx(endian) {
                elf::SHN_UNDEF => continue,
                elf::SHN_XINDEX => match extended_indices.get(symbol_index) {
                    Some(index) => index.get(endian),
                    None => {
                        skipped += 1;
                        continue;
                    }
                },
                // Absolute, common and processor-specific indices: not code in this file.
                index if index >= elf::SHN_LORESERVE => continue,
                index => u32::from(index),
            };
            let Some(section) = sections.get(section_index as usize) else {
                skipped += 1;
                continue;
            };
            if section.sh_flags(endian).into() & u64::from(elf::SHF_EXECINSTR) == 0 {
                continue;
            }
            let Some(name) = strings.get(symbol.st_name(endian)) else {
                skipped += 1;
                continue;
            };
            if name.is_empty() || is_mapping_symbol(name) {
                continue;
            }
            let mut start: u64 = symbol.st_value(endian).into();
            if machine == elf::EM_ARM && symbol_type != elf::STT_NOTYPE {
                // Bit 0 of an ARM function address only marks Thumb code.
                start &= !1;
            }
            let size: u64 = symbol.st_size(endian).into();
            let end = if size > 0 {
                start.saturating_add(size)
            } else {
                let section_start: u64 = section.sh_addr(endian).into();
                section_start
                    .saturating_add(section.sh_size(endian).into())
                    .max(start)
            };
            candidates.push(Candidate {
                start,
                end,
                rank: rank(size, symbol.st_bind(), from_dynsym),
                name,
                name_key: (table_index, symbol.st_name(endian)),
            });
        }
    }

    // Legitimate files need less than the string tables' size (only code symbols are kept);
    // the budget stops a hostile file whose symbols all point into one long string from making
    // us copy it once per symbol.
    let budget = string_bytes.saturating_mul(4).saturating_add(1 << 20);
    let (names, symbols) = build_index(candidates, budget)?;
    let build_id = find_build_id::<Elf, R>(endian, data, file_len, sections, segments)?;
    let debuglink = find_debuglink(endian, data, file_len, sections, section_names)?;
    Ok(ElfSymbols {
        names,
        max_reach: prefix_max_reach(&symbols),
        symbols,
        loads,
        build_id,
        debuglink,
        has_symtab,
        skipped,
    })
}

/// Preference among symbols at one address, lower is better: a symbol with a size (it bounds
/// its function), then global over weak over local (the public name is the one people know),
/// then `.symtab` over `.dynsym` (usually the same symbol twice; `.symtab` is the complete
/// table, and after a merge it is the debug file's).
fn rank(size: u64, bind: u8, from_dynsym: bool) -> u8 {
    let bind_rank = match bind {
        elf::STB_GLOBAL | elf::STB_GNU_UNIQUE => 0,
        elf::STB_WEAK => 1,
        elf::STB_LOCAL => 2,
        _ => 3,
    };
    let mut rank = bind_rank << RANK_BIND_SHIFT;
    if size == 0 {
        rank |= RANK_ZERO_SIZE;
    }
    if from_dynsym {
        rank |= RANK_FROM_DYNSYM;
    }
    rank
}

/// ARM, AArch64 and RISC-V mapping symbols (`$a`, `$d`, `$t`, `$x`, optionally followed by
/// `.suffix`, or an ISA string on RISC-V) mark code/data boundaries, they are not functions.
fn is_mapping_symbol(name: &[u8]) -> bool {
    matches!(
        name,
        [b'$', b'a' | b'd' | b't' | b'x']
            | [b'$', b'a' | b'd' | b't' | b'x', b'.', ..]
            | [b'$', b'x', b'r', b'v', ..]
    )
}

/// Sorts and deduplicates the candidates (one per address, best rank, ties broken by where the
/// name is stored so that the result is deterministic), and copies the survivors' names into
/// one arena, each distinct name once. Fails if the arena would exceed `budget` bytes or 4 GiB.
fn build_index(
    mut candidates: Vec<Candidate<'_>>,
    budget: usize,
) -> Result<(String, Vec<Symbol>), ElfError> {
    // The name key, not the name, breaks ties: as deterministic for a given file, and names
    // can be long enough to make comparing them a cost a hostile file could multiply.
    candidates
        .sort_unstable_by_key(|candidate| (candidate.start, candidate.rank, candidate.name_key));
    candidates.dedup_by_key(|candidate| candidate.start);

    let mut names = String::new();
    let mut interned: HashMap<(usize, u32), (u32, u32)> = HashMap::new();
    let mut symbols = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        let (name_offset, name_len) = match interned.get(&candidate.name_key) {
            Some(&location) => location,
            None => {
                let name = String::from_utf8_lossy(candidate.name);
                if names.len().saturating_add(name.len()) > budget {
                    return Err(malformed(format!(
                        "symbol names would take more than {budget} bytes: the symbol tables reuse their strings abusively"
                    )));
                }
                let too_big =
                    || ElfError::Unsupported("symbol names larger than 4 GiB".to_string());
                let offset = u32::try_from(names.len()).map_err(|_| too_big())?;
                let len = u32::try_from(name.len()).map_err(|_| too_big())?;
                names.push_str(&name);
                interned.insert(candidate.name_key, (offset, len));
                (offset, len)
            }
        };
        symbols.push(Symbol {
            start: candidate.start,
            end: candidate.end,
            name_offset,
            name_len,
            rank: candidate.rank,
        });
    }
    Ok((names, symbols))
}

fn prefix_max_reach(symbols: &[Symbol]) -> Vec<u64> {
    symbols
        .iter()
        .scan(0u64, |max, symbol| {
            *max = (*max).max(symbol.reach());
            Some(*max)
        })
        .collect()
}

/// A symbol string table read whole, with the positions of its NULs collected in one pass so
/// that finding where a name ends is a binary search. Scanning from each name's offset instead
/// would cost (symbols × table size) on a hostile file whose names all point into one long
/// unterminated run.
struct StringTable<'data> {
    bytes: &'data [u8],
    nuls: Vec<usize>,
}

impl<'data> StringTable<'data> {
    fn new(bytes: &'data [u8]) -> StringTable<'data> {
        let nuls = bytes
            .iter()
            .enumerate()
            .filter(|&(_, &byte)| byte == 0)
            .map(|(at, _)| at)
            .collect();
        StringTable { bytes, nuls }
    }

    /// The NUL-terminated string at `offset`; `None` if it starts or runs past the end.
    fn get(&self, offset: u32) -> Option<&'data [u8]> {
        let start = offset as usize;
        let end = *self
            .nuls
            .get(self.nuls.partition_point(|&nul| nul < start))?;
        self.bytes.get(start..end)
    }
}

/// The NUL-terminated string at the start of `bytes`.
fn leading_string(bytes: &[u8]) -> Option<&[u8]> {
    bytes.get(..bytes.iter().position(|&byte| byte == 0)?)
}

/// Checks that `offset..offset + size` lies inside the file, telling a truncated file (range
/// past the end) from a corrupt one (range that overflows).
fn check_range(file_len: u64, offset: u64, size: u64, what: &'static str) -> Result<(), ElfError> {
    let end = offset.checked_add(size).ok_or_else(|| {
        malformed(format!(
            "{what} at offset {offset:#x} with size {size:#x} overflows"
        ))
    })?;
    if end > file_len {
        return Err(ElfError::Truncated {
            what,
            end,
            file_len,
        });
    }
    Ok(())
}

fn read_bytes<'data, R: ReadRef<'data>>(
    data: R,
    file_len: u64,
    offset: u64,
    size: u64,
    what: &'static str,
) -> Result<&'data [u8], ElfError> {
    check_range(file_len, offset, size, what)?;
    data.read_bytes_at(offset, size)
        .map_err(|()| ElfError::Read { what })
}

fn read_pod<'data, T: Pod, R: ReadRef<'data>>(
    data: R,
    file_len: u64,
    offset: u64,
    what: &'static str,
) -> Result<&'data T, ElfError> {
    check_range(file_len, offset, mem::size_of::<T>() as u64, what)?;
    data.read_at(offset).map_err(|()| ElfError::Read { what })
}

fn read_table<'data, T: Pod, R: ReadRef<'data>>(
    data: R,
    file_len: u64,
    offset: u64,
    count: u64,
    what: &'static str,
) -> Result<&'data [T], ElfError> {
    let size = count
        .checked_mul(mem::size_of::<T>() as u64)
        .ok_or_else(|| malformed(format!("{what} with {count} entries overflows")))?;
    check_range(file_len, offset, size, what)?;
    // Fits in the file, so it fits in memory's address space.
    let count =
        usize::try_from(count).map_err(|_| malformed(format!("{what} with {count} entries")))?;
    data.read_slice_at(offset, count)
        .map_err(|()| ElfError::Read { what })
}

fn section_bytes<'data, S, R>(
    section: &S,
    endian: Endianness,
    data: R,
    file_len: u64,
    what: &'static str,
) -> Result<&'data [u8], ElfError>
where
    S: object::read::elf::SectionHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    match section.file_range(endian) {
        Some((offset, size)) => read_bytes(data, file_len, offset, size, what),
        None => Ok(&[]),
    }
}

/// A section's contents as whole entries of `T`; trailing bytes that make no whole entry are
/// ignored, as readelf does.
fn section_array<'data, T, S, R>(
    section: &S,
    endian: Endianness,
    data: R,
    file_len: u64,
    what: &'static str,
) -> Result<&'data [T], ElfError>
where
    T: Pod,
    S: object::read::elf::SectionHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    match section.file_range(endian) {
        Some((offset, size)) => {
            let count = size / mem::size_of::<T>() as u64;
            read_table(data, file_len, offset, count, what)
        }
        None => Ok(&[]),
    }
}

fn section_headers<'data, Elf, R>(
    header: &Elf,
    endian: Endianness,
    data: R,
    file_len: u64,
) -> Result<&'data [Elf::SectionHeader], ElfError>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let offset: u64 = header.e_shoff(endian).into();
    if offset == 0 {
        return Ok(&[]);
    }
    let entry_size = usize::from(header.e_shentsize(endian));
    let expected = mem::size_of::<Elf::SectionHeader>();
    if entry_size != expected {
        return Err(malformed(format!(
            "section header entry size is {entry_size}, expected {expected}"
        )));
    }
    // With more than 0xff00 sections, e_shnum is 0 and the count is in section 0's sh_size.
    let count = match header.e_shnum(endian) {
        0 => {
            let section_0: &Elf::SectionHeader =
                read_pod(data, file_len, offset, "section header table")?;
            section_0.sh_size(endian).into()
        }
        count => u64::from(count),
    };
    read_table(data, file_len, offset, count, "section header table")
}

fn program_headers<'data, Elf, R>(
    header: &Elf,
    endian: Endianness,
    data: R,
    file_len: u64,
    section_0: Option<&Elf::SectionHeader>,
) -> Result<&'data [Elf::ProgramHeader], ElfError>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let offset: u64 = header.e_phoff(endian).into();
    // With 0xffff or more program headers, the count is in section 0's sh_info.
    let count = match header.e_phnum(endian) {
        elf::PN_XNUM => section_0
            .map(|section| u64::from(section.sh_info(endian)))
            .ok_or_else(|| {
                malformed(
                    "e_phnum is PN_XNUM but there is no section 0 to hold the count".to_string(),
                )
            })?,
        count => u64::from(count),
    };
    if offset == 0 || count == 0 {
        return Ok(&[]);
    }
    let entry_size = usize::from(header.e_phentsize(endian));
    let expected = mem::size_of::<Elf::ProgramHeader>();
    if entry_size != expected {
        return Err(malformed(format!(
            "program header entry size is {entry_size}, expected {expected}"
        )));
    }
    read_table(data, file_len, offset, count, "program header table")
}

/// The `PT_LOAD` segments with file contents, sorted by file offset.
fn load_segments<P: object::read::elf::ProgramHeader<Endian = Endianness>>(
    headers: &[P],
    endian: Endianness,
) -> Vec<LoadSegment> {
    let mut loads: Vec<LoadSegment> = headers
        .iter()
        .filter(|segment| segment.p_type(endian) == elf::PT_LOAD)
        .map(|segment| LoadSegment {
            offset: segment.p_offset(endian).into(),
            filesz: segment.p_filesz(endian).into(),
            vaddr: segment.p_vaddr(endian).into(),
        })
        .filter(|load| load.filesz > 0)
        .collect();
    loads.sort_by_key(|load| (load.offset, load.filesz));
    loads
}

/// The section name string table (`.shstrtab`), read whole; empty if the file declares none.
fn section_name_table<'data, Elf, R>(
    header: &Elf,
    endian: Endianness,
    data: R,
    file_len: u64,
    sections: &[Elf::SectionHeader],
) -> Result<&'data [u8], ElfError>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let index = match header.e_shstrndx(endian) {
        elf::SHN_UNDEF => return Ok(&[]),
        elf::SHN_XINDEX => sections
            .first()
            .map_or(0, |section_0| section_0.sh_link(endian)),
        index => u32::from(index),
    };
    if sections.is_empty() {
        return Ok(&[]);
    }
    let section = sections
        .get(index as usize)
        .filter(|_| index != 0)
        .ok_or_else(|| {
            malformed(format!(
                "section name string table index {index} is out of range ({} sections)",
                sections.len()
            ))
        })?;
    section_bytes(section, endian, data, file_len, "section name string table")
}

/// The `SHT_SYMTAB_SHNDX` table of a symbol table, holding section indices that do not fit in
/// `st_shndx` (files with more than 0xff00 sections); usually empty.
fn extended_section_indices<'data, S, R>(
    sections: &[S],
    endian: Endianness,
    data: R,
    file_len: u64,
    table_index: usize,
) -> Result<&'data [U32<Endianness>], ElfError>
where
    S: object::read::elf::SectionHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    match sections.iter().find(|section| {
        section.sh_type(endian) == elf::SHT_SYMTAB_SHNDX
            && section.sh_link(endian) as usize == table_index
    }) {
        Some(section) => section_array(
            section,
            endian,
            data,
            file_len,
            "extended section index table",
        ),
        None => Ok(&[]),
    }
}

/// The GNU build-id note, from the note sections or, in a file without section headers, from
/// the `PT_NOTE` segments. A note area that does not parse is skipped (it may be some other
/// vendor's note with a layout of its own); one that lies past the end of the file is an error
/// like any other truncation. Only the first [`MAX_NOTE_AREAS`] areas of up to
/// [`MAX_NOTE_AREA_SIZE`] bytes are read, so that a hostile file cannot make us read (and a
/// `ReadCache` keep) its whole contents many times over.
fn find_build_id<'data, Elf, R>(
    endian: Endianness,
    data: R,
    file_len: u64,
    sections: &[Elf::SectionHeader],
    segments: &[Elf::ProgramHeader],
) -> Result<Option<Vec<u8>>, ElfError>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let areas: Vec<(u64, u64, Elf::Word, &'static str)> = if sections.is_empty() {
        segments
            .iter()
            .filter(|segment| segment.p_type(endian) == elf::PT_NOTE)
            .map(|segment| {
                let (offset, size) = segment.file_range(endian);
                (offset, size, segment.p_align(endian), "note segment")
            })
            .take(MAX_NOTE_AREAS)
            .collect()
    } else {
        sections
            .iter()
            .filter(|section| section.sh_type(endian) == elf::SHT_NOTE)
            .map(|section| {
                let (offset, size) = section.file_range(endian).unwrap_or_default();
                (offset, size, section.sh_addralign(endian), "note section")
            })
            .take(MAX_NOTE_AREAS)
            .collect()
    };
    for (offset, size, align, what) in areas {
        if size > MAX_NOTE_AREA_SIZE {
            continue;
        }
        let bytes = read_bytes(data, file_len, offset, size, what)?;
        if let Some(id) = build_id_in_notes::<Elf>(endian, align, bytes) {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

fn build_id_in_notes<Elf: FileHeader<Endian = Endianness>>(
    endian: Endianness,
    align: Elf::Word,
    bytes: &[u8],
) -> Option<Vec<u8>> {
    let mut notes = NoteIterator::<Elf>::new(endian, align, bytes).ok()?;
    while let Ok(Some(note)) = notes.next() {
        if note.name() == elf::ELF_NOTE_GNU
            && note.n_type(endian) == elf::NT_GNU_BUILD_ID
            && !note.desc().is_empty()
        {
            return Some(note.desc().to_vec());
        }
    }
    None
}

/// `.gnu_debuglink`: a NUL-terminated file name, padding to 4 bytes, then the CRC-32 in the
/// file's byte order. A section that does not have that shape, or names a path rather than a
/// file, is ignored: it only matters as a hint for finding debug symbols.
fn find_debuglink<'data, S, R>(
    endian: Endianness,
    data: R,
    file_len: u64,
    sections: &[S],
    section_names: &[u8],
) -> Result<Option<DebugLink>, ElfError>
where
    S: object::read::elf::SectionHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    // Comparing in place (name and NUL) keeps this linear in the number of sections.
    const NAME: &[u8] = b".gnu_debuglink\0";
    let Some(section) = sections.iter().find(|section| {
        let start = section.sh_name(endian) as usize;
        section_names.get(start..start.saturating_add(NAME.len())) == Some(NAME)
    }) else {
        return Ok(None);
    };
    let bytes = section_bytes(section, endian, data, file_len, ".gnu_debuglink section")?;
    let Some(name) = leading_string(bytes) else {
        return Ok(None);
    };
    let crc_offset = name.len().saturating_add(4) & !3;
    let Some(&crc_bytes) = bytes
        .get(crc_offset..)
        .and_then(|tail| tail.first_chunk::<4>())
    else {
        return Ok(None);
    };
    let crc = match endian {
        Endianness::Little => u32::from_le_bytes(crc_bytes),
        Endianness::Big => u32::from_be_bytes(crc_bytes),
    };
    Ok(std::str::from_utf8(name)
        .ok()
        .filter(|name| is_plain_file_name(name))
        .map(|name| DebugLink {
            file_name: name.to_string(),
            crc,
        }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::fs::{self, File};
    use std::process::Command;

    use object::read::ReadCache;
    use tempfile::TempDir;

    // ---------------------------------------------------------------------------------------
    // Fixtures built with the system toolchain, checked against nm and readelf.

    /// The C functions of `testdata/fixture.c`, every one sized.
    const FUNCTIONS: [&str; 3] = ["vms_static_fn", "vms_alpha_fn", "vms_beta_fn"];

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Kind {
        Pie,
        NoPie,
        Shared,
        Shared32,
    }

    /// Runs a tool and returns its standard output; a failing tool fails the test.
    fn run(program: &str, args: &[&str]) -> String {
        let output = Command::new(program)
            .args(args)
            .output()
            .unwrap_or_else(|error| panic!("cannot run {program}: {error}"));
        assert!(
            output.status.success(),
            "{program} {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("tool output is UTF-8")
    }

    fn path_str(path: &Path) -> &str {
        path.to_str().expect("temporary paths are UTF-8")
    }

    fn compile(dir: &Path, kind: Kind) -> PathBuf {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fixture.c");
        let source = path_str(&source);
        let out = dir.join(format!("{kind:?}").to_lowercase());
        let out_str = path_str(&out);
        let build_id = "-Wl,--build-id=sha1";
        match kind {
            Kind::Pie => run(
                "gcc",
                &[
                    "-O1",
                    "-fPIE",
                    "-pie",
                    "-DWITH_MAIN",
                    build_id,
                    "-o",
                    out_str,
                    source,
                ],
            ),
            Kind::NoPie => run(
                "gcc",
                &[
                    "-O1",
                    "-fno-pie",
                    "-no-pie",
                    "-DWITH_MAIN",
                    build_id,
                    "-o",
                    out_str,
                    source,
                ],
            ),
            Kind::Shared => run(
                "gcc",
                &["-O1", "-shared", "-fPIC", build_id, "-o", out_str, source],
            ),
            Kind::Shared32 => {
                // No 32-bit libc here: compile only, then link without it.
                let object = dir.join("fixture32.o");
                run(
                    "gcc",
                    &[
                        "-m32",
                        "-O1",
                        "-fPIC",
                        "-c",
                        "-o",
                        path_str(&object),
                        source,
                    ],
                );
                run(
                    "ld",
                    &[
                        "-m",
                        "elf_i386",
                        "-shared",
                        "--build-id=sha1",
                        "-o",
                        out_str,
                        path_str(&object),
                    ],
                )
            }
        };
        out
    }

    /// Defined symbols by name: (address, size if nm shows one).
    fn nm_symbols(path: &Path) -> HashMap<String, (u64, Option<u64>)> {
        run("nm", &["-S", "--defined-only", path_str(path)])
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let hex = |text: &str| u64::from_str_radix(text, 16).ok();
                match fields.as_slice() {
                    [address, size, _, name] => {
                        Some((name.to_string(), (hex(address)?, hex(size))))
                    }
                    [address, _, name] => Some((name.to_string(), (hex(address)?, None))),
                    _ => None,
                }
            })
            .collect()
    }

    fn nm_function(path: &Path, name: &str) -> (u64, u64) {
        match nm_symbols(path).get(name) {
            Some(&(address, Some(size))) => (address, size),
            other => panic!("nm shows {name} in {} as {other:?}", path.display()),
        }
    }

    #[derive(Debug)]
    struct Load {
        offset: u64,
        vaddr: u64,
        filesz: u64,
    }

    /// PT_LOAD headers as readelf prints them.
    fn readelf_loads(path: &Path) -> Vec<Load> {
        let hex = |text: &str| {
            u64::from_str_radix(text.trim_start_matches("0x"), 16).expect("readelf prints hex")
        };
        run("readelf", &["-lW", path_str(path)])
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                match fields.as_slice() {
                    ["LOAD", offset, vaddr, _paddr, filesz, ..] => Some(Load {
                        offset: hex(offset),
                        vaddr: hex(vaddr),
                        filesz: hex(filesz),
                    }),
                    _ => None,
                }
            })
            .collect()
    }

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("hex digits"))
            .collect()
    }

    fn readelf_build_id(path: &Path) -> Vec<u8> {
        let notes = run("readelf", &["-n", path_str(path)]);
        let line = notes
            .lines()
            .find_map(|line| line.trim().strip_prefix("Build ID: "))
            .expect("a build-id note");
        unhex(line.trim())
    }

    /// (file name, CRC) of the .gnu_debuglink section, as readelf decodes it.
    fn readelf_debuglink(path: &Path) -> (String, u32) {
        let links = run("readelf", &["--debug-dump=links", path_str(path)]);
        let name = links
            .lines()
            .find_map(|line| line.trim().strip_prefix("Separate debug info file: "))
            .expect("a debuglink");
        let crc = links
            .lines()
            .find_map(|line| line.trim().strip_prefix("CRC value: 0x"))
            .expect("a CRC");
        (
            name.trim().to_string(),
            u32::from_str_radix(crc.trim(), 16).expect("hex CRC"),
        )
    }

    fn parse_file(path: &Path) -> ElfSymbols {
        let bytes = fs::read(path).expect("fixture readable");
        let from_slice = ElfSymbols::parse(bytes.as_slice()).expect("fixture parses from a slice");
        let cache = ReadCache::new(File::open(path).expect("fixture opens"));
        let from_cache = ElfSymbols::parse(&cache).expect("fixture parses through ReadCache");
        // Both readers must see the same file.
        assert_eq!(
            from_slice.symbols().collect::<Vec<_>>(),
            from_cache.symbols().collect::<Vec<_>>()
        );
        assert_eq!(from_slice.build_id(), from_cache.build_id());
        assert_eq!(from_slice.debuglink(), from_cache.debuglink());
        from_slice
    }

    fn check_functions(path: &Path, symbols: &ElfSymbols, functions: &[&str]) {
        check_lookups(path, symbols, functions);
        check_file_offsets(path, symbols, functions);
    }

    /// Every function is found at its first, middle and last byte, under its own name and with
    /// nm's address and size (`path` is the unstripped file nm reads).
    fn check_lookups(path: &Path, symbols: &ElfSymbols, functions: &[&str]) {
        for &function in functions {
            let (start, size) = nm_function(path, function);
            assert!(size > 2, "{function} is too small to test");
            for (what, address) in [
                ("first byte", start),
                ("middle", start + size / 2),
                ("last byte", start + size - 1),
            ] {
                let found = symbols.lookup(address).unwrap_or_else(|| {
                    panic!("no symbol for the {what} of {function} ({address:#x})")
                });
                assert_eq!(
                    (found.name, found.start, found.size),
                    (function, start, size),
                    "{what} of {function}"
                );
                assert_eq!(found.demangled(), function);
            }
            assert_ne!(
                symbols.lookup(start + size).map(|found| found.name),
                Some(function),
                "one past {function}"
            );
        }
    }

    /// Each function's first and last byte, as file offsets computed from readelf's program
    /// headers, map back to their addresses.
    fn check_file_offsets(path: &Path, symbols: &ElfSymbols, functions: &[&str]) {
        let loads = readelf_loads(path);
        for &function in functions {
            let (start, size) = nm_function(path, function);
            let load = loads
                .iter()
                .find(|load| load.vaddr <= start && start < load.vaddr + load.filesz)
                .unwrap_or_else(|| panic!("readelf shows no PT_LOAD for {function}"));
            for address in [start, start + size - 1] {
                let offset = load.offset + (address - load.vaddr);
                assert_eq!(
                    symbols.file_offset_to_vaddr(offset),
                    Some(address),
                    "offset {offset:#x} of {function}"
                );
            }
        }
    }

    #[test]
    fn symbolises_compiled_fixtures() {
        let dir = TempDir::new().expect("temporary directory");
        for kind in [Kind::Pie, Kind::NoPie, Kind::Shared, Kind::Shared32] {
            let path = compile(dir.path(), kind);
            let symbols = parse_file(&path);
            check_functions(&path, &symbols, &FUNCTIONS);
            assert!(symbols.has_symtab(), "{kind:?}");
            assert_eq!(
                symbols.build_id(),
                Some(readelf_build_id(&path).as_slice()),
                "{kind:?}"
            );
            assert_eq!(symbols.debuglink(), None, "{kind:?}");
            assert!(symbols.len() >= FUNCTIONS.len() && !symbols.is_empty());

            // The assembly label has no type and no size: found, extending to the next symbol.
            let (label, _) = *nm_symbols(&path)
                .get("vms_asm_label")
                .expect("nm shows the label");
            let found = symbols.lookup(label + 2).expect("label found");
            assert_eq!(
                (found.name, found.start, found.size),
                ("vms_asm_label", label, 0),
                "{kind:?}"
            );
            assert!(
                symbols
                    .symbols()
                    .all(|symbol| symbol.name != "vms_data_object"),
                "{kind:?}"
            );
            assert!(symbols.symbols().is_sorted_by_key(|symbol| symbol.start));

            assert_eq!(symbols.file_offset_to_vaddr(u64::MAX), None);
            let file_len = fs::metadata(&path).expect("metadata").len();
            assert_eq!(symbols.file_offset_to_vaddr(file_len + 0x10_0000), None);
            if kind == Kind::NoPie {
                // Not an identity mapping: the offset checks really exercised the translation.
                let (start, _) = nm_function(&path, "vms_alpha_fn");
                assert!(start >= 0x40_0000, "non-PIE text at {start:#x}");
                let offset = start - 0x40_0000;
                assert_eq!(symbols.file_offset_to_vaddr(offset), Some(start));
            }
        }
    }

    #[test]
    fn stripped_library_debuglink_and_merge() {
        let dir = TempDir::new().expect("temporary directory");
        let full = compile(dir.path(), Kind::Shared);
        let stripped = dir.path().join("stripped.so");
        let debug = dir.path().join("fixture.debug");
        let linked = dir.path().join("linked.so");
        run("strip", &["-o", path_str(&stripped), path_str(&full)]);
        run(
            "objcopy",
            &["--only-keep-debug", path_str(&full), path_str(&debug)],
        );
        run(
            "objcopy",
            &[
                &format!("--add-gnu-debuglink={}", path_str(&debug)),
                path_str(&stripped),
                path_str(&linked),
            ],
        );

        // (d) Stripped: only .dynsym is left, exported functions remain, the static one is gone.
        let stripped_symbols = parse_file(&stripped);
        assert!(!stripped_symbols.has_symtab());
        assert_eq!(
            stripped_symbols.build_id(),
            Some(readelf_build_id(&full).as_slice())
        );
        check_functions(&full, &stripped_symbols, &["vms_alpha_fn", "vms_beta_fn"]);
        let (static_start, static_size) = nm_function(&full, "vms_static_fn");
        assert_ne!(
            stripped_symbols
                .lookup(static_start)
                .map(|found| found.name),
            Some("vms_static_fn")
        );

        // (e) The debug file has the full table, NOBITS code sections notwithstanding (but no
        // code, so no file offsets to translate).
        let debug_symbols = parse_file(&debug);
        assert!(debug_symbols.has_symtab());
        assert_eq!(
            debug_symbols.build_id(),
            Some(readelf_build_id(&full).as_slice())
        );
        check_lookups(&full, &debug_symbols, &FUNCTIONS);

        let linked_symbols = parse_file(&linked);
        let (link_name, link_crc) = readelf_debuglink(&linked);
        assert_eq!(link_name, "fixture.debug");
        assert_eq!(
            linked_symbols.debuglink(),
            Some(&DebugLink {
                file_name: link_name,
                crc: link_crc
            })
        );
        assert!(!linked_symbols.has_symtab());

        // The candidates for the linked binary include the debug file next to it.
        let candidates = debug_file_candidates(
            &linked,
            linked_symbols.build_id(),
            linked_symbols.debuglink(),
        );
        assert!(candidates.contains(&debug), "{candidates:?}");

        // Merging brings the static function back; addresses still resolve through the
        // stripped file's segments.
        let mut merged = linked_symbols.clone();
        merged.merge_symbols(debug_symbols);
        assert!(merged.has_symtab());
        assert_eq!(merged.build_id(), linked_symbols.build_id());
        assert_eq!(merged.debuglink(), linked_symbols.debuglink());
        check_functions(&full, &merged, &FUNCTIONS);
        let found = merged
            .lookup(static_start + static_size - 1)
            .expect("static function after merge");
        assert_eq!(found.name, "vms_static_fn");
        assert!(merged.len() > linked_symbols.len());
        // One symbol per address, even though both files named the exported functions.
        let starts: Vec<u64> = merged.symbols().map(|symbol| symbol.start).collect();
        assert!(
            starts.windows(2).all(|pair| pair[0] < pair[1]),
            "{starts:x?}"
        );
    }

    #[inline(never)]
    fn some_fn(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(31).rotate_left(7)
    }

    #[test]
    fn symbolises_a_function_of_this_test_binary() {
        assert_ne!(some_fn(3), 0);
        let address = some_fn as fn(u64) -> u64 as usize as u64;
        // Normalise as the daemon does: the /proc/self/maps line holding the address gives the
        // file offset.
        let maps = fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
        let file_offset = maps
            .lines()
            .find_map(|line| {
                let mut fields = line.split_whitespace();
                let (start, end) = fields.next()?.split_once('-')?;
                let (start, end) = (
                    u64::from_str_radix(start, 16).ok()?,
                    u64::from_str_radix(end, 16).ok()?,
                );
                let offset = u64::from_str_radix(fields.nth(1)?, 16).ok()?;
                (start <= address && address < end).then(|| offset + (address - start))
            })
            .expect("a mapping holds some_fn");

        let cache = ReadCache::new(File::open("/proc/self/exe").expect("/proc/self/exe"));
        let symbols = ElfSymbols::parse(&cache).expect("the test binary parses");
        let vaddr = symbols
            .file_offset_to_vaddr(file_offset)
            .expect("some_fn is in a PT_LOAD");
        let found = symbols.lookup(vaddr).expect("some_fn has a symbol");
        assert_eq!(found.start, vaddr);
        assert_eq!(found.demangled(), "vmscope_parse::elf::tests::some_fn");
        assert_ne!(
            found.name, "vmscope_parse::elf::tests::some_fn",
            "the raw name is mangled"
        );
    }

    // ---------------------------------------------------------------------------------------
    // A minimal ELF writer, for what the toolchain here cannot produce (big-endian, ARM) and
    // for corrupt tables.

    const TEXT: u16 = 1;
    const DATA: u16 = 2;
    const TEXT_ADDR: u64 = 0x10000;
    const TEXT_OFFSET: u64 = 0x1000;
    const TEXT_SIZE: u64 = 0x1000;
    const DATA_ADDR: u64 = 0x30000;
    const DATA_OFFSET: u64 = 0x2000;
    const DATA_FILESZ: u64 = 0x100;

    #[derive(Clone)]
    struct MiniSym {
        name: &'static str,
        /// Raw `st_name` instead of `name`'s offset.
        name_offset: Option<u32>,
        value: u64,
        size: u64,
        bind: u8,
        kind: u8,
        shndx: u16,
        /// Section index through SHT_SYMTAB_SHNDX (st_shndx becomes SHN_XINDEX).
        xindex: Option<u32>,
    }

    fn sym(name: &'static str, kind: u8, bind: u8, shndx: u16, value: u64, size: u64) -> MiniSym {
        MiniSym {
            name,
            name_offset: None,
            value,
            size,
            bind,
            kind,
            shndx,
            xindex: None,
        }
    }

    fn func(name: &'static str, value: u64, size: u64) -> MiniSym {
        sym(name, elf::STT_FUNC, elf::STB_GLOBAL, TEXT, value, size)
    }

    #[derive(Clone)]
    struct MiniElf {
        is_64: bool,
        big_endian: bool,
        e_type: u16,
        machine: u16,
        symbols: Vec<MiniSym>,
        dynamic_symbols: Vec<MiniSym>,
        /// Bytes placed in .strtab right after its leading NUL (offset 1).
        extra_strings: Vec<u8>,
        build_id: Vec<u8>,
        debuglink: Option<(&'static str, u32)>,
        symtab_link: Option<u32>,
        shstrndx: Option<u16>,
    }

    impl MiniElf {
        fn new(is_64: bool, big_endian: bool) -> MiniElf {
            MiniElf {
                is_64,
                big_endian,
                e_type: elf::ET_DYN,
                machine: if is_64 { elf::EM_X86_64 } else { elf::EM_386 },
                symbols: Vec::new(),
                dynamic_symbols: Vec::new(),
                extra_strings: Vec::new(),
                build_id: (1..=20).map(|byte| byte * 11).collect(),
                debuglink: Some(("mini.debug", 0x1234_5678)),
                symtab_link: None,
                shstrndx: None,
            }
        }
    }

    struct Out {
        bytes: Vec<u8>,
        big_endian: bool,
        is_64: bool,
    }

    impl Out {
        fn new(mini: &MiniElf) -> Out {
            Out {
                bytes: Vec::new(),
                big_endian: mini.big_endian,
                is_64: mini.is_64,
            }
        }
        fn u8(&mut self, value: u8) {
            self.bytes.push(value);
        }
        fn u16(&mut self, value: u16) {
            let bytes = if self.big_endian {
                value.to_be_bytes()
            } else {
                value.to_le_bytes()
            };
            self.bytes.extend_from_slice(&bytes);
        }
        fn u32(&mut self, value: u32) {
            let bytes = if self.big_endian {
                value.to_be_bytes()
            } else {
                value.to_le_bytes()
            };
            self.bytes.extend_from_slice(&bytes);
        }
        fn u64(&mut self, value: u64) {
            let bytes = if self.big_endian {
                value.to_be_bytes()
            } else {
                value.to_le_bytes()
            };
            self.bytes.extend_from_slice(&bytes);
        }
        fn word(&mut self, value: u64) {
            if self.is_64 {
                self.u64(value);
            } else {
                self.u32(u32::try_from(value).expect("32-bit value"));
            }
        }
        fn pad_to(&mut self, len: u64) {
            self.bytes.resize(usize::try_from(len).expect("small"), 0);
        }
    }

    struct MiniSection {
        name: &'static str,
        kind: u32,
        flags: u64,
        addr: u64,
        data: Vec<u8>,
        /// Data size for NOBITS-like sections whose data is not written (the code and data).
        size: Option<u64>,
        offset: Option<u64>,
        link: u32,
        align: u64,
        entsize: u64,
    }

    fn section(name: &'static str, kind: u32, data: Vec<u8>) -> MiniSection {
        MiniSection {
            name,
            kind,
            flags: 0,
            addr: 0,
            data,
            size: None,
            offset: None,
            link: 0,
            align: 8,
            entsize: 0,
        }
    }

    /// (.symtab bytes, .strtab bytes, SHT_SYMTAB_SHNDX entries if any symbol needs one).
    fn symbol_table(mini: &MiniElf, symbols: &[MiniSym]) -> (Vec<u8>, Vec<u8>, Option<Vec<u8>>) {
        let mut strings = vec![0u8];
        strings.extend_from_slice(&mini.extra_strings);
        let mut table = Out::new(mini);
        let mut indices = Out::new(mini);
        let null = MiniSym {
            name: "",
            ..sym("", 0, 0, 0, 0, 0)
        };
        for symbol in std::iter::once(&null).chain(symbols) {
            let name = match (symbol.name_offset, symbol.name) {
                (Some(offset), _) => offset,
                (None, "") => 0,
                (None, name) => {
                    let offset = u32::try_from(strings.len()).expect("small");
                    strings.extend_from_slice(name.as_bytes());
                    strings.push(0);
                    offset
                }
            };
            let info = (symbol.bind << 4) | symbol.kind;
            let shndx = if symbol.xindex.is_some() {
                elf::SHN_XINDEX
            } else {
                symbol.shndx
            };
            indices.u32(symbol.xindex.unwrap_or(0));
            table.u32(name);
            if mini.is_64 {
                table.u8(info);
                table.u8(0);
                table.u16(shndx);
                table.u64(symbol.value);
                table.u64(symbol.size);
            } else {
                table.word(symbol.value);
                table.word(symbol.size);
                table.u8(info);
                table.u8(0);
                table.u16(shndx);
            }
        }
        let needs_indices = symbols.iter().any(|symbol| symbol.xindex.is_some());
        (table.bytes, strings, needs_indices.then_some(indices.bytes))
    }

    fn build(mini: &MiniElf) -> Vec<u8> {
        let (ehsize, phentsize, shentsize, symsize) = if mini.is_64 {
            (64, 56, 64, 24)
        } else {
            (52, 32, 40, 16)
        };
        let mut sections = vec![
            section("", elf::SHT_NULL, Vec::new()),
            MiniSection {
                flags: u64::from(elf::SHF_ALLOC | elf::SHF_EXECINSTR),
                addr: TEXT_ADDR,
                size: Some(TEXT_SIZE),
                offset: Some(TEXT_OFFSET),
                ..section(".text", elf::SHT_PROGBITS, Vec::new())
            },
            MiniSection {
                flags: u64::from(elf::SHF_ALLOC | elf::SHF_WRITE),
                addr: DATA_ADDR,
                size: Some(DATA_FILESZ),
                offset: Some(DATA_OFFSET),
                ..section(".data", elf::SHT_PROGBITS, Vec::new())
            },
        ];
        let mut note = Out::new(mini);
        note.u32(4);
        note.u32(u32::try_from(mini.build_id.len()).expect("small"));
        note.u32(elf::NT_GNU_BUILD_ID);
        note.bytes.extend_from_slice(b"GNU\0");
        note.bytes.extend_from_slice(&mini.build_id);
        while !note.bytes.len().is_multiple_of(4) {
            note.u8(0);
        }
        sections.push(MiniSection {
            align: 4,
            ..section(".note.gnu.build-id", elf::SHT_NOTE, note.bytes)
        });
        if let Some((name, crc)) = mini.debuglink {
            let mut link = Out::new(mini);
            link.bytes.extend_from_slice(name.as_bytes());
            link.u8(0);
            while !link.bytes.len().is_multiple_of(4) {
                link.u8(0);
            }
            link.u32(crc);
            sections.push(MiniSection {
                align: 4,
                ..section(".gnu_debuglink", elf::SHT_PROGBITS, link.bytes)
            });
        }
        if !mini.dynamic_symbols.is_empty() {
            let (table, strings, _) = symbol_table(mini, &mini.dynamic_symbols);
            let strings_index = u32::try_from(sections.len() + 1).expect("small");
            sections.push(MiniSection {
                link: strings_index,
                entsize: symsize,
                ..section(".dynsym", elf::SHT_DYNSYM, table)
            });
            sections.push(section(".dynstr", elf::SHT_STRTAB, strings));
        }
        let (table, strings, indices) = symbol_table(mini, &mini.symbols);
        let symtab_index = sections.len();
        let strings_index = u32::try_from(symtab_index + 1).expect("small");
        sections.push(MiniSection {
            link: mini.symtab_link.unwrap_or(strings_index),
            entsize: symsize,
            ..section(".symtab", elf::SHT_SYMTAB, table)
        });
        sections.push(section(".strtab", elf::SHT_STRTAB, strings));
        if let Some(indices) = indices {
            sections.push(MiniSection {
                link: u32::try_from(symtab_index).expect("small"),
                entsize: 4,
                ..section(".symtab_shndx", elf::SHT_SYMTAB_SHNDX, indices)
            });
        }
        let mut names = vec![0u8];
        let mut name_offsets = Vec::new();
        for section in &sections {
            name_offsets.push(if section.name.is_empty() {
                0
            } else {
                u32::try_from(names.len()).expect("small")
            });
            names.extend_from_slice(section.name.as_bytes());
            names.push(0);
        }
        let shstrndx = u16::try_from(sections.len()).expect("small");
        name_offsets.push(u32::try_from(names.len()).expect("small"));
        names.extend_from_slice(b".shstrtab\0");
        sections.push(section(".shstrtab", elf::SHT_STRTAB, names));

        // Lay out: headers, code at TEXT_OFFSET, data at DATA_OFFSET, then the other sections.
        let mut position = DATA_OFFSET + DATA_FILESZ;
        for section in sections.iter_mut().skip(1) {
            if section.offset.is_none() {
                position = position.next_multiple_of(section.align);
                section.offset = Some(position);
                position += section.data.len() as u64;
            }
        }
        let shoff = position.next_multiple_of(8);

        let mut out = Out::new(mini);
        out.bytes.extend_from_slice(&elf::ELFMAG);
        out.u8(if mini.is_64 {
            elf::ELFCLASS64
        } else {
            elf::ELFCLASS32
        });
        out.u8(if mini.big_endian {
            elf::ELFDATA2MSB
        } else {
            elf::ELFDATA2LSB
        });
        out.u8(elf::EV_CURRENT);
        out.pad_to(16);
        out.u16(mini.e_type);
        out.u16(mini.machine);
        out.u32(u32::from(elf::EV_CURRENT));
        out.word(TEXT_ADDR);
        out.word(ehsize);
        out.word(shoff);
        out.u32(0);
        out.u16(u16::try_from(ehsize).expect("small"));
        out.u16(phentsize);
        out.u16(2);
        out.u16(shentsize);
        out.u16(u16::try_from(sections.len()).expect("small"));
        out.u16(mini.shstrndx.unwrap_or(shstrndx));
        for (offset, vaddr, filesz, memsz, flags) in [
            (
                TEXT_OFFSET,
                TEXT_ADDR,
                TEXT_SIZE,
                TEXT_SIZE,
                elf::PF_R | elf::PF_X,
            ),
            (
                DATA_OFFSET,
                DATA_ADDR,
                DATA_FILESZ,
                2 * DATA_FILESZ,
                elf::PF_R | elf::PF_W,
            ),
        ] {
            out.u32(elf::PT_LOAD);
            if mini.is_64 {
                out.u32(flags);
            }
            out.word(offset);
            out.word(vaddr);
            out.word(vaddr);
            out.word(filesz);
            out.word(memsz);
            if !mini.is_64 {
                out.u32(flags);
            }
            out.word(0x1000);
        }
        out.pad_to(TEXT_OFFSET);
        out.bytes.resize(out.bytes.len() + TEXT_SIZE as usize, 0xcc);
        out.pad_to(DATA_OFFSET + DATA_FILESZ);
        for section in &sections {
            if let Some(offset) = section.offset
                && !section.data.is_empty()
            {
                out.pad_to(offset);
                out.bytes.extend_from_slice(&section.data);
            }
        }
        out.pad_to(shoff);
        for (section, name) in sections.iter().zip(name_offsets) {
            out.u32(name);
            out.u32(section.kind);
            out.word(section.flags);
            out.word(section.addr);
            out.word(section.offset.unwrap_or(0));
            out.word(section.size.unwrap_or(section.data.len() as u64));
            out.u32(section.link);
            out.u32(
                if section.kind == elf::SHT_SYMTAB || section.kind == elf::SHT_DYNSYM {
                    1
                } else {
                    0
                },
            );
            out.word(section.align);
            out.word(section.entsize);
        }
        out.bytes
    }

    /// Symbols exercising every selection, deduplication and lookup rule; the expectations
    /// are in `LOOKUPS`.
    fn rule_symbols() -> Vec<MiniSym> {
        use elf::{
            STB_GLOBAL, STB_LOCAL, STB_WEAK, STT_FILE, STT_FUNC, STT_GNU_IFUNC, STT_NOTYPE,
            STT_OBJECT, STT_SECTION,
        };
        vec![
            sym("fixture.c", STT_FILE, STB_LOCAL, elf::SHN_ABS, 0, 0),
            sym("", STT_SECTION, STB_LOCAL, TEXT, TEXT_ADDR, 0),
            func("func_a", 0x10000, 0x40),
            // Nested: outer contains inner contains inner2.
            func("outer", 0x10100, 0x100),
            sym("inner", STT_FUNC, STB_LOCAL, TEXT, 0x10120, 0x20),
            sym("inner2", STT_FUNC, STB_LOCAL, TEXT, 0x10130, 0x8),
            // A label without size extends to the next symbol.
            sym("label", STT_NOTYPE, STB_GLOBAL, TEXT, 0x10300, 0),
            func("after_label", 0x10380, 0x10),
            // Aliases: global beats weak beats local, and a size beats no size.
            sym("alias_weak", STT_FUNC, STB_WEAK, TEXT, 0x10400, 0x10),
            sym("alias_local", STT_FUNC, STB_LOCAL, TEXT, 0x10400, 0x10),
            func("alias_global", 0x10400, 0x10),
            func("alias_nosize", 0x10400, 0),
            func("nosize_global", 0x10500, 0),
            sym("sized_local", STT_FUNC, STB_LOCAL, TEXT, 0x10500, 0x10),
            // Not code: dropped.
            sym(
                "object_in_text",
                STT_OBJECT,
                STB_GLOBAL,
                TEXT,
                0x10600,
                0x10,
            ),
            MiniSym {
                shndx: DATA,
                ..func("func_in_data", DATA_ADDR, 8)
            },
            sym(
                "notype_in_data",
                STT_NOTYPE,
                STB_GLOBAL,
                DATA,
                DATA_ADDR + 8,
                0,
            ),
            sym("$x", STT_NOTYPE, STB_LOCAL, TEXT, 0x10700, 0),
            sym("$d.1", STT_NOTYPE, STB_LOCAL, TEXT, 0x10710, 0),
            sym("undefined_fn", STT_FUNC, STB_GLOBAL, elf::SHN_UNDEF, 0, 0),
            sym(
                "absolute_fn",
                STT_FUNC,
                STB_GLOBAL,
                elf::SHN_ABS,
                0x10780,
                0x10,
            ),
            sym("", STT_FUNC, STB_LOCAL, TEXT, 0x10800, 4),
            sym(
                "ifunc_resolver",
                STT_GNU_IFUNC,
                STB_GLOBAL,
                TEXT,
                0x10900,
                0x10,
            ),
            // In both tables at one address: .symtab wins.
            func("dup_symtab", 0x10a00, 0x10),
            // A section index that needs SHT_SYMTAB_SHNDX.
            MiniSym {
                xindex: Some(u32::from(TEXT)),
                ..func("far_fn", 0x10b00, 0x10)
            },
            // A label inside a function: it wins right after it (nearest preceding symbol),
            // but past a nested sized symbol the enclosing function does.
            func("outer_b", 0x10c00, 0x100),
            sym("label_in_outer", STT_NOTYPE, STB_LOCAL, TEXT, 0x10c10, 0),
            sym("inner_b", STT_FUNC, STB_LOCAL, TEXT, 0x10c20, 0x10),
            // A label at the end of .text extends to the end of .text, not beyond.
            sym("tail_label", STT_NOTYPE, STB_LOCAL, TEXT, 0x10f00, 0),
        ]
    }

    /// (address, expected symbol name, start, size).
    type Expected = Option<(&'static str, u64, u64)>;

    const LOOKUPS: &[(u64, Expected)] = &[
        (0, None),
        (0xfff0, None),
        (0x10000, Some(("func_a", 0x10000, 0x40))),
        (0x1003f, Some(("func_a", 0x10000, 0x40))),
        (0x10040, None),
        (0x10100, Some(("outer", 0x10100, 0x100))),
        (0x10125, Some(("inner", 0x10120, 0x20))),
        (0x10137, Some(("inner2", 0x10130, 0x8))),
        (0x10138, Some(("inner", 0x10120, 0x20))),
        (0x10150, Some(("outer", 0x10100, 0x100))),
        (0x101ff, Some(("outer", 0x10100, 0x100))),
        (0x10200, None),
        (0x10300, Some(("label", 0x10300, 0))),
        (0x1037f, Some(("label", 0x10300, 0))),
        (0x10380, Some(("after_label", 0x10380, 0x10))),
        (0x10390, None),
        (0x10400, Some(("alias_global", 0x10400, 0x10))),
        (0x1040f, Some(("alias_global", 0x10400, 0x10))),
        (0x10505, Some(("sized_local", 0x10500, 0x10))),
        (0x10600, None),
        (0x10700, None),
        (0x10785, None),
        (0x10800, None),
        (0x10905, Some(("ifunc_resolver", 0x10900, 0x10))),
        (0x10a00, Some(("dup_symtab", 0x10a00, 0x10))),
        (0x10b0f, Some(("far_fn", 0x10b00, 0x10))),
        (0x10c15, Some(("label_in_outer", 0x10c10, 0))),
        (0x10c25, Some(("inner_b", 0x10c20, 0x10))),
        (0x10c40, Some(("outer_b", 0x10c00, 0x100))),
        (0x10f00, Some(("tail_label", 0x10f00, 0))),
        (0x10fff, Some(("tail_label", 0x10f00, 0))),
        (0x11000, None),
        (DATA_ADDR, None),
        (u64::MAX, None),
    ];

    fn rules_elf(is_64: bool, big_endian: bool) -> MiniElf {
        MiniElf {
            symbols: rule_symbols(),
            dynamic_symbols: vec![
                func("dup_dynsym", 0x10a00, 0x10),
                func("alias_global", 0x10400, 0x10),
            ],
            ..MiniElf::new(is_64, big_endian)
        }
    }

    #[test]
    fn selection_and_lookup_rules_in_all_classes_and_byte_orders() {
        for (is_64, big_endian) in [(true, false), (true, true), (false, false), (false, true)] {
            let mini = rules_elf(is_64, big_endian);
            let symbols = ElfSymbols::parse(build(&mini).as_slice())
                .unwrap_or_else(|error| panic!("64-bit {is_64}, big-endian {big_endian}: {error}"));
            for &(address, expected) in LOOKUPS {
                let found = symbols
                    .lookup(address)
                    .map(|found| (found.name, found.start, found.size));
                assert_eq!(
                    found, expected,
                    "lookup({address:#x}), 64-bit {is_64}, big-endian {big_endian}"
                );
            }
            assert!(symbols.has_symtab());
            assert_eq!(symbols.skipped_symbols(), 0);
            assert_eq!(symbols.build_id(), Some(mini.build_id.as_slice()));
            assert_eq!(
                symbols.debuglink(),
                Some(&DebugLink {
                    file_name: "mini.debug".to_string(),
                    crc: 0x1234_5678
                })
            );
            for (offset, vaddr) in [
                (0, None),
                (TEXT_OFFSET - 1, None),
                (TEXT_OFFSET, Some(TEXT_ADDR)),
                (TEXT_OFFSET + 0x123, Some(TEXT_ADDR + 0x123)),
                (TEXT_OFFSET + TEXT_SIZE - 1, Some(TEXT_ADDR + TEXT_SIZE - 1)),
                (DATA_OFFSET, Some(DATA_ADDR)),
                (
                    DATA_OFFSET + DATA_FILESZ - 1,
                    Some(DATA_ADDR + DATA_FILESZ - 1),
                ),
                // Past p_filesz, inside p_memsz: zero-filled memory, no file offset maps there.
                (DATA_OFFSET + DATA_FILESZ, None),
            ] {
                assert_eq!(
                    symbols.file_offset_to_vaddr(offset),
                    vaddr,
                    "offset {offset:#x}"
                );
            }
        }
    }

    #[test]
    fn arm_thumb_bit_and_mapping_symbols() {
        let mini = MiniElf {
            machine: elf::EM_ARM,
            symbols: vec![
                func("thumb_fn", 0x10021, 0x10),
                sym("$t", elf::STT_NOTYPE, elf::STB_LOCAL, TEXT, 0x10020, 0),
                sym("$d", elf::STT_NOTYPE, elf::STB_LOCAL, TEXT, 0x10030, 0),
                sym("$a.0", elf::STT_NOTYPE, elf::STB_LOCAL, TEXT, 0x10040, 0),
                func("arm_fn", 0x10040, 0x10),
            ],
            ..MiniElf::new(false, false)
        };
        let symbols = ElfSymbols::parse(build(&mini).as_slice()).expect("parses");
        let names: Vec<(&str, u64)> = symbols
            .symbols()
            .map(|symbol| (symbol.name, symbol.start))
            .collect();
        assert_eq!(names, [("thumb_fn", 0x10020), ("arm_fn", 0x10040)]);
        assert_eq!(
            symbols.lookup(0x1002f).map(|found| found.name),
            Some("thumb_fn")
        );
        assert_eq!(symbols.lookup(0x10030), None);
    }

    #[test]
    fn merge_prefers_debug_symtab_and_keeps_own_segments() {
        let stripped = MiniElf {
            symbols: Vec::new(),
            dynamic_symbols: vec![func("exported", 0x10000, 0x10), func("nosize", 0x10100, 0)],
            ..MiniElf::new(true, false)
        };
        let debug = MiniElf {
            symbols: vec![
                func("exported", 0x10000, 0x10),
                sym(
                    "hidden_static",
                    elf::STT_FUNC,
                    elf::STB_LOCAL,
                    TEXT,
                    0x10080,
                    0x20,
                ),
                sym(
                    "nosize_sized",
                    elf::STT_FUNC,
                    elf::STB_LOCAL,
                    TEXT,
                    0x10100,
                    0x30,
                ),
            ],
            build_id: vec![9; 20],
            debuglink: None,
            ..MiniElf::new(true, false)
        };
        let mut symbols = ElfSymbols::parse(build(&stripped).as_slice()).expect("stripped parses");
        assert!(!symbols.has_symtab());
        assert_eq!(symbols.lookup(0x10090), None);
        symbols.merge_symbols(ElfSymbols::parse(build(&debug).as_slice()).expect("debug parses"));
        assert!(symbols.has_symtab());
        assert_eq!(symbols.build_id(), Some(stripped.build_id.as_slice()));
        assert_eq!(
            symbols.file_offset_to_vaddr(TEXT_OFFSET + 0x90),
            Some(0x10090)
        );
        let found: Vec<_> = [0x10005, 0x10090, 0x1012f]
            .into_iter()
            .map(|address| {
                symbols
                    .lookup(address)
                    .map(|found| (found.name, found.size))
            })
            .collect();
        assert_eq!(
            found,
            [
                Some(("exported", 0x10)),
                Some(("hidden_static", 0x20)),
                Some(("nosize_sized", 0x30))
            ]
        );
        assert_eq!(symbols.len(), 3);
    }

    // ---------------------------------------------------------------------------------------
    // Hostile and broken input: errors with readable messages, never a panic.

    fn expect_error(bytes: &[u8]) -> ElfError {
        match ElfSymbols::parse(bytes) {
            Ok(symbols) => panic!("parsed {} symbols from bad input", symbols.len()),
            Err(error) => {
                let message = error.to_string();
                assert!(message.contains("ELF"), "unhelpful message: {message}");
                error
            }
        }
    }

    fn put(bytes: &mut [u8], offset: usize, value: &[u8]) {
        bytes[offset..offset + value.len()].copy_from_slice(value);
    }

    /// Field offsets in a 64-bit ELF header.
    const E_TYPE: usize = 0x10;
    const E_PHOFF: usize = 0x20;
    const E_SHOFF: usize = 0x28;
    const E_PHENTSIZE: usize = 0x36;
    const E_SHNUM: usize = 0x3c;
    const E_SHSTRNDX: usize = 0x3e;

    #[test]
    fn header_corruptions_give_the_right_error() {
        let good = build(&rules_elf(true, false));
        let file_len = good.len() as u64;
        type Check = fn(&ElfError) -> bool;
        type Patch = (usize, Vec<u8>);
        let cases: Vec<(&str, Vec<Patch>, Check)> = vec![
            ("bad magic", vec![(0, b"\x7fELG".to_vec())], |e| {
                matches!(
                    e,
                    ElfError::NotElf {
                        reason: "bad magic"
                    }
                )
            }),
            (
                "class 3",
                vec![(4, vec![3])],
                |e| matches!(e, ElfError::Malformed(m) if m.contains("class")),
            ),
            (
                "encoding 0",
                vec![(5, vec![0])],
                |e| matches!(e, ElfError::Malformed(m) if m.contains("encoding")),
            ),
            (
                "version 2",
                vec![(6, vec![2])],
                |e| matches!(e, ElfError::Malformed(m) if m.contains("version")),
            ),
            (
                "relocatable",
                vec![(E_TYPE, elf::ET_REL.to_le_bytes().to_vec())],
                |e| matches!(e, ElfError::Unsupported(m) if m.contains(".o")),
            ),
            (
                "core",
                vec![(E_TYPE, elf::ET_CORE.to_le_bytes().to_vec())],
                |e| matches!(e, ElfError::Unsupported(_)),
            ),
            (
                "e_shoff past EOF",
                vec![(E_SHOFF, (file_len + 100).to_le_bytes().to_vec())],
                |e| {
                    matches!(
                        e,
                        ElfError::Truncated {
                            what: "section header table",
                            ..
                        }
                    )
                },
            ),
            (
                "e_phoff past EOF",
                vec![(E_PHOFF, (file_len - 8).to_le_bytes().to_vec())],
                |e| {
                    matches!(
                        e,
                        ElfError::Truncated {
                            what: "program header table",
                            ..
                        }
                    )
                },
            ),
            (
                "e_shoff overflows",
                vec![(E_SHOFF, (u64::MAX - 8).to_le_bytes().to_vec())],
                |e| matches!(e, ElfError::Truncated { .. } | ElfError::Malformed(_)),
            ),
            (
                "e_shnum huge",
                vec![(E_SHNUM, 0xfff0u16.to_le_bytes().to_vec())],
                |e| {
                    matches!(
                        e,
                        ElfError::Truncated {
                            what: "section header table",
                            ..
                        }
                    )
                },
            ),
            (
                "e_phentsize wrong",
                vec![(E_PHENTSIZE, 40u16.to_le_bytes().to_vec())],
                |e| matches!(e, ElfError::Malformed(m) if m.contains("program header entry size")),
            ),
            (
                "e_shstrndx out of range",
                vec![(E_SHSTRNDX, 500u16.to_le_bytes().to_vec())],
                |e| matches!(e, ElfError::Malformed(m) if m.contains("section name string table")),
            ),
        ];
        for (what, patches, check) in cases {
            let mut bytes = good.clone();
            for (offset, value) in patches {
                put(&mut bytes, offset, &value);
            }
            let error = expect_error(&bytes);
            assert!(check(&error), "{what}: got {error:?} ({error})");
        }
    }

    #[test]
    fn broken_tables_give_errors_or_skip_single_symbols() {
        let base = || MiniElf {
            symbols: vec![func("good_fn", 0x10000, 0x10)],
            ..MiniElf::new(true, false)
        };

        let error = expect_error(&build(&MiniElf {
            symtab_link: Some(99),
            ..base()
        }));
        assert!(
            matches!(&error, ElfError::Malformed(m) if m.contains("does not exist")),
            "{error}"
        );
        let error = expect_error(&build(&MiniElf {
            symtab_link: Some(u32::from(TEXT)),
            ..base()
        }));
        assert!(
            matches!(&error, ElfError::Malformed(m) if m.contains("not a string table")),
            "{error}"
        );

        // One broken entry costs that symbol only.
        let mut mini = base();
        mini.symbols.push(MiniSym {
            name_offset: Some(0xffff_0000),
            ..func("bad_name", 0x10100, 0x10)
        });
        mini.symbols.push(func("bad_section", 0x10200, 0x10));
        if let Some(last) = mini.symbols.last_mut() {
            last.shndx = 500;
        }
        let symbols = ElfSymbols::parse(build(&mini).as_slice()).expect("parses");
        assert_eq!(symbols.skipped_symbols(), 2);
        assert_eq!(
            symbols
                .symbols()
                .map(|symbol| symbol.name)
                .collect::<Vec<_>>(),
            ["good_fn"]
        );
    }

    #[test]
    fn symbols_sharing_one_long_string_cannot_exhaust_memory() {
        // 20 000 symbols naming successive suffixes of one 100 kB string would need ~2 GB of
        // name copies; the budget refuses the file instead.
        let mut mini = MiniElf {
            extra_strings: vec![b'a'; 100_000],
            ..MiniElf::new(true, false)
        };
        mini.extra_strings.push(0);
        // Distinct addresses, so that deduplication keeps them all (they run past the end of
        // .text, which the selection rules do not check).
        mini.symbols = (0..20_000u32)
            .map(|index| MiniSym {
                name_offset: Some(1 + index),
                ..func("", TEXT_ADDR + u64::from(index), 1)
            })
            .collect();
        let error = expect_error(&build(&mini));
        assert!(
            matches!(&error, ElfError::Malformed(m) if m.contains("symbol names")),
            "{error}"
        );

        // The same string shared by every symbol is stored once and is fine.
        for symbol in &mut mini.symbols {
            symbol.name_offset = Some(1);
        }
        let symbols = ElfSymbols::parse(build(&mini).as_slice()).expect("shared names parse");
        assert_eq!(symbols.len(), 20_000);
    }

    #[test]
    fn short_and_truncated_input_never_panics() {
        let dir = TempDir::new().expect("temporary directory");
        let path = compile(dir.path(), Kind::Shared);
        let bytes = fs::read(&path).expect("fixture readable");
        assert!(ElfSymbols::parse(bytes.as_slice()).is_ok());

        assert!(matches!(expect_error(&[]), ElfError::NotElf { .. }));
        for len in 1..=64 {
            let error = expect_error(&bytes[..len]);
            if len < 4 {
                assert!(
                    matches!(error, ElfError::NotElf { .. }),
                    "{len} bytes: {error}"
                );
            } else {
                assert!(
                    matches!(error, ElfError::Truncated { .. }),
                    "{len} bytes: {error}"
                );
            }
        }
        // Section headers come last, so every proper prefix is truncated.
        for len in (0..bytes.len()).step_by(97) {
            let error = expect_error(&bytes[..len]);
            assert!(
                matches!(error, ElfError::Truncated { .. } | ElfError::NotElf { .. }),
                "{len} bytes: {error}"
            );
        }
    }

    /// A small deterministic generator, so failures reproduce.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn random_and_mutated_input_never_panics() {
        let mut random = XorShift(0x2545_f491_4f6c_dd1d);
        for round in 0..2_000 {
            let len = (random.next() % 2048) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| random.next() as u8).collect();
            if round % 2 == 1 && len >= 16 {
                // Valid identification, garbage after: reaches the table parsing.
                put(&mut bytes, 0, &elf::ELFMAG);
                put(
                    &mut bytes,
                    4,
                    &[1 + (round % 4 / 2) as u8, 1 + (round % 8 / 4) as u8, 1],
                );
            }
            let _ = ElfSymbols::parse(bytes.as_slice());
        }
        // Flip bytes of a well-formed file, mostly in its headers and tables where each byte
        // steers the parser.
        for (is_64, big_endian) in [(true, false), (false, true)] {
            let good = build(&rules_elf(is_64, big_endian));
            let tables_start = (DATA_OFFSET + DATA_FILESZ) as usize;
            for _ in 0..3_000 {
                let mut bytes = good.clone();
                for _ in 0..(1 + random.next() % 4) {
                    let at = match random.next() % 3 {
                        0 => random.next() as usize % 0x100,
                        _ => tables_start + random.next() as usize % (good.len() - tables_start),
                    };
                    bytes[at] = random.next() as u8;
                }
                if let Ok(symbols) = ElfSymbols::parse(bytes.as_slice()) {
                    for address in [0, TEXT_ADDR, 0x10138, 0x10fff, u64::MAX] {
                        let _ = symbols.lookup(address);
                    }
                    let _ = symbols.file_offset_to_vaddr(TEXT_OFFSET);
                }
            }
        }
    }

    #[test]
    fn truncated_file_through_read_cache_is_an_error() {
        let dir = TempDir::new().expect("temporary directory");
        let path = compile(dir.path(), Kind::Shared);
        let bytes = fs::read(&path).expect("fixture readable");
        let truncated = dir.path().join("truncated.so");
        fs::write(&truncated, &bytes[..bytes.len() * 3 / 5]).expect("write truncated copy");
        let cache = ReadCache::new(File::open(&truncated).expect("open"));
        let error = ElfSymbols::parse(&cache).expect_err("truncated file");
        assert!(matches!(error, ElfError::Truncated { .. }), "{error}");
        assert!(error.to_string().starts_with("truncated ELF: "), "{error}");

        // Shrunk after the reader learnt its length, as when a package upgrade rewrites the
        // binary under us: an error, not a SIGBUS.
        let file = File::options()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open fixture");
        let cache = ReadCache::new(file.try_clone().expect("clone handle"));
        assert_eq!((&cache).len(), Ok(bytes.len() as u64));
        file.set_len(1000).expect("shrink");
        let error = ElfSymbols::parse(&cache).expect_err("file shrank");
        assert!(
            matches!(error, ElfError::Read { .. } | ElfError::Truncated { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("ELF"), "{error}");
    }

    #[test]
    fn not_elf_messages() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"",
                "not an ELF file (file is shorter than the ELF magic number)",
            ),
            (
                b"\x7fEL",
                "not an ELF file (file is shorter than the ELF magic number)",
            ),
            (b"#!/bin/sh\necho hello\n", "not an ELF file (bad magic)"),
            (
                b"\x7fELF\x02\x01\x01",
                "truncated ELF: ELF identification ends at byte 16 but the file is only 7 bytes long",
            ),
        ];
        for (bytes, message) in cases {
            assert_eq!(expect_error(bytes).to_string(), *message);
        }
    }

    #[test]
    fn debug_file_candidate_order() {
        let link = DebugLink {
            file_name: "libfoo.so.1.debug".to_string(),
            crc: 1,
        };
        let id = [0xab, 0xcd, 0xef, 0x01];
        type Case<'a> = (
            &'a str,
            Option<&'a [u8]>,
            Option<&'a DebugLink>,
            &'a [&'a str],
        );
        let cases: &[Case] = &[
            (
                "/usr/lib/x86_64-linux-gnu/libfoo.so.1",
                Some(&id),
                Some(&link),
                &[
                    "/usr/lib/debug/.build-id/ab/cdef01.debug",
                    "/usr/lib/x86_64-linux-gnu/libfoo.so.1.debug",
                    "/usr/lib/x86_64-linux-gnu/.debug/libfoo.so.1.debug",
                    "/usr/lib/debug/usr/lib/x86_64-linux-gnu/libfoo.so.1.debug",
                ],
            ),
            (
                "/opt/app/bin/app",
                Some(&id),
                None,
                &["/usr/lib/debug/.build-id/ab/cdef01.debug"],
            ),
            (
                "/opt/app/bin/app",
                None,
                Some(&link),
                &[
                    "/opt/app/bin/libfoo.so.1.debug",
                    "/opt/app/bin/.debug/libfoo.so.1.debug",
                    "/usr/lib/debug/opt/app/bin/libfoo.so.1.debug",
                ],
            ),
            // A one-byte build-id names no file; neither does nothing at all.
            ("/bin/true", Some(&[0xab]), None, &[]),
            ("/bin/true", None, None, &[]),
        ];
        for (binary, build_id, debuglink, expected) in cases {
            let got = debug_file_candidates(Path::new(binary), *build_id, *debuglink);
            let expected: Vec<PathBuf> = expected.iter().map(PathBuf::from).collect();
            assert_eq!(got, expected, "{binary}");
        }

        // A debuglink naming the binary itself, or a path, yields nothing for it.
        let itself = DebugLink {
            file_name: "app".to_string(),
            crc: 1,
        };
        assert_eq!(
            debug_file_candidates(Path::new("/opt/app"), None, Some(&itself)),
            [
                PathBuf::from("/opt/.debug/app"),
                PathBuf::from("/usr/lib/debug/opt/app")
            ]
        );
        for name in ["../../etc/shadow", "/etc/shadow", "", ".", ".."] {
            let hostile = DebugLink {
                file_name: name.to_string(),
                crc: 1,
            };
            assert!(
                debug_file_candidates(Path::new("/opt/app"), None, Some(&hostile)).is_empty(),
                "{name:?}"
            );
        }
    }

    #[test]
    fn debuglink_with_a_path_is_ignored() {
        let mini = MiniElf {
            debuglink: Some(("../../etc/shadow", 7)),
            ..MiniElf::new(true, false)
        };
        let symbols = ElfSymbols::parse(build(&mini).as_slice()).expect("parses");
        assert_eq!(symbols.debuglink(), None);
    }
}
