//! Source lines and inlined functions of one ELF file's DWARF, for native frames.
//!
//! A sampled address in native code becomes a function name through the ELF symbol table
//! ([`crate::elf`]); this module adds where in the source it was: the file and line, and the
//! functions the compiler inlined at that address, innermost first, each with the line it is at
//! (the innermost) or the line of the call that inlined the next one (the outer ones), as
//! `addr2line -f -i` and `perf report --inline` show them.
//!
//! [`SourceLines::parse`] reads the ELF headers through [`object::ReadRef`], normally a
//! `&ReadCache<File>`, and the debug sections (`.debug_info`, `.debug_line`, `.debug_abbrev`,
//! the string, address and range tables) through [`paged::ReadAt`], a page at a time as the
//! lookups need them ([`paged`]): the code and everything else stay on disk, the sections too
//! but for the pages read lately, and a file truncated while it is read gives an error rather
//! than the SIGBUS a memory map would. zlib-compressed sections (`SHF_COMPRESSED`, what
//! `objcopy --compress-debug-sections` and distributions' debug packages write) are inflated
//! whole, within a bound, and small sections read whole. The DWARF is parsed with `gimli`, a
//! compilation unit at a time, the first time an address in it is looked up ([`units`]), by
//! the rules of the `addr2line` crate, whose answers the tests compare ours with.
//!
//! DWARF 2 to 5 are read; split DWARF (`.dwo` files) and supplementary files (dwz's
//! `.gnu_debugaltlink`) are not: their units give no lines, not an error.
//!
//! The input is untrusted (any binary on the host): sizes are checked against the file and a
//! caller's byte budget before anything is allocated, and malformed DWARF is an error of the
//! lookup it concerns, never a panic of ours.

pub mod paged;
mod units;

use std::{
    borrow::Cow,
    io::{self, Read},
    sync::Arc,
};

use gimli::{RunTimeEndian, SectionId};
use object::{
    ReadRef,
    elf::{self, FileHeader32, FileHeader64},
    endian::{Endian as _, Endianness},
    read::elf::{CompressionHeader as _, FileHeader, SectionHeader as _},
};
use paged::{Bytes, PageCache, PagedReader, ReadAt};
use units::Units;

/// The sections addr2line reads for lines and inlined functions. Location lists, type units and
/// macro tables describe variables and types: they are never loaded.
const LOADED: [SectionId; 9] = [
    SectionId::DebugAbbrev,
    SectionId::DebugAddr,
    SectionId::DebugAranges,
    SectionId::DebugInfo,
    SectionId::DebugLine,
    SectionId::DebugLineStr,
    SectionId::DebugRanges,
    SectionId::DebugRngLists,
    SectionId::DebugStr,
];

/// The other section addr2line asks for, loaded too (string offsets of DWARF 5 units).
const STR_OFFSETS: SectionId = SectionId::DebugStrOffsets;

/// Why the DWARF of a file could not be loaded or read.
#[derive(Debug, thiserror::Error)]
pub enum DwarfError {
    /// The data is not an ELF file this module reads.
    #[error("not an ELF file ({0})")]
    NotElf(&'static str),
    /// The ELF headers could not be read (truncated, inconsistent).
    #[error("malformed ELF: {0}")]
    Elf(String),
    /// The file has no `.debug_info` (or no `.debug_line`): nothing to give lines with.
    #[error("no DWARF line information (.debug_info and .debug_line)")]
    NoDebugInfo,
    /// The debug sections held in memory (inflated, or small) together are bigger than the
    /// caller allows.
    #[error("debug sections need {needed} bytes in memory, more than the {limit} allowed")]
    TooLarge {
        /// Bytes the sections need, uncompressed.
        needed: u64,
        /// The caller's limit.
        limit: u64,
    },
    /// A compressed section could not be inflated.
    #[error("compressed section {section}: {reason}")]
    Compression {
        /// The section's name.
        section: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The file is not the debug file of the binary it was looked up for.
    #[error("build id {found} differs from the binary's")]
    WrongBuildId {
        /// The file's build id in hex, or "none".
        found: String,
    },
    /// The DWARF itself is malformed. gimli's words are in the message, so not a `source`
    /// (a chain printer would say them twice).
    #[error("malformed DWARF: {0}")]
    Dwarf(gimli::Error),
}

impl From<gimli::Error> for DwarfError {
    fn from(error: gimli::Error) -> DwarfError {
        DwarfError::Dwarf(error)
    }
}

/// One frame of the answer for an address: a function, innermost first, with its source
/// position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFrame {
    /// The function's name as DWARF gives it (demangled), if it does.
    pub function: Option<String>,
    /// The source file, as the compiler recorded it (the compilation directory joined in).
    pub file: Option<String>,
    /// The line in `file`; 0 when unknown (compiler-generated code).
    pub line: u32,
    /// Whether the function was inlined into the frame after it (every frame but the last).
    pub inlined: bool,
}

/// Sections up to this size are read whole when the tables are loaded: a page cache entry
/// each would cost more than they do.
pub const SMALL_SECTION_BYTES: u64 = 64 << 10;

/// The most bytes of pages one file's tables keep read (see [`paged::PageCache`]).
pub const PAGE_CACHE_BYTES: u64 = 1 << 20;

/// The line tables and inlined function trees of one ELF file, ready for lookups.
///
/// Holds its compressed and small sections, reads the others from the file as lookups need
/// them, and keeps the units lookups parsed within a budget. Lookups change it (they parse):
/// share it behind a mutex.
pub struct SourceLines {
    dwarf: gimli::Dwarf<PagedReader>,
    units: Units,
    owned_bytes: u64,
    pages: Arc<PageCache>,
}

impl std::fmt::Debug for SourceLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceLines")
            .field("owned_bytes", &self.owned_bytes)
            .field("units", &self.units)
            .field("pages", &self.pages)
            .finish_non_exhaustive()
    }
}

impl SourceLines {
    /// Loads the debug sections of an ELF file (32 or 64 bit, either endianness): its headers
    /// from any `object` reader, `data`, and the sections' bytes from `file` (the same file),
    /// as lookups need them. Refuses files whose compressed and small sections, held in
    /// memory, need more than `max_bytes`.
    ///
    /// With `build_id`, the file must carry that GNU build id (a separate debug file found for a
    /// binary): it is checked before any section is read, since a debug file of another build
    /// would give wrong lines, which is worse than none.
    pub fn parse<'data, R: ReadRef<'data>>(
        data: R,
        file: Arc<dyn ReadAt>,
        max_bytes: u64,
        build_id: Option<&[u8]>,
    ) -> Result<SourceLines, DwarfError> {
        let ident = data
            .read_bytes_at(0, 16)
            .map_err(|()| DwarfError::NotElf("shorter than the ELF identification"))?;
        if ident[..4] != elf::ELFMAG {
            return Err(DwarfError::NotElf("bad magic"));
        }
        // EI_CLASS.
        match ident[4] {
            elf::ELFCLASS32 => load::<FileHeader32<Endianness>, R>(data, file, max_bytes, build_id),
            elf::ELFCLASS64 => load::<FileHeader64<Endianness>, R>(data, file, max_bytes, build_id),
            _ => Err(DwarfError::NotElf("unknown ELF class")),
        }
    }

    /// Bytes of section data held for the tables' whole life (inflated and small sections).
    pub fn owned_bytes(&self) -> u64 {
        self.owned_bytes
    }

    /// What the tables cost in memory, about: the sections held, the pages read lately, the
    /// units' index and the units lookups parsed.
    pub fn weight(&self) -> u64 {
        self.owned_bytes + self.pages.bytes() + self.units.bytes()
    }

    /// Lets go of what lookups parsed and read (parsed units, cached pages), keeping what a
    /// load costs to make again (inflated sections, the units' index); answers stay the same.
    /// For a cache of many files' tables: shedding one costs the next lookups a unit parse
    /// each, dropping it costs the next lookup a whole load.
    pub fn shed(&mut self) {
        self.units.shed();
        self.pages.clear();
    }

    /// Compilation units in the file, units parsed now, and parses in all.
    pub fn units(&self) -> (usize, usize, u64) {
        let (all, parsed) = self.units.counts();
        (all, parsed, self.units.parses)
    }

    /// Bytes of pages kept read now, and in all read from the file.
    pub fn pages(&self) -> (u64, u64) {
        (self.pages.bytes(), self.pages.reads().0)
    }

    /// The frames at an ELF virtual address (svma), innermost first: the functions inlined
    /// there, then the function that holds them. Empty when no unit covers the address.
    ///
    /// For a caller's frame, look up the return address minus one: the call instruction. The
    /// unit that holds it is parsed if it was not (see [`units`]).
    pub fn lookup(&mut self, svma: u64) -> Result<Vec<SourceFrame>, DwarfError> {
        self.units.lookup(&self.dwarf, svma)
    }
}

fn elf_error(what: &str) -> impl FnOnce(object::read::Error) -> DwarfError + '_ {
    move |e| DwarfError::Elf(format!("{what}: {e}"))
}

fn load<'data, Elf, R>(
    data: R,
    file: Arc<dyn ReadAt>,
    max_bytes: u64,
    build_id: Option<&[u8]>,
) -> Result<SourceLines, DwarfError>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let header = Elf::parse(data).map_err(elf_error("ELF header"))?;
    let endian = header.endian().map_err(elf_error("ELF header"))?;
    let sections = header
        .sections(endian, data)
        .map_err(elf_error("section headers"))?;
    if let Some(expected) = build_id {
        let found = gnu_build_id::<Elf, R>(endian, data, sections.iter());
        if found != Some(expected) {
            return Err(DwarfError::WrongBuildId {
                found: found.map_or_else(
                    || "none".to_owned(),
                    |id| id.iter().map(|b| format!("{b:02x}")).collect(),
                ),
            });
        }
    }

    // Sizes first, so that nothing is read of a file whose sections would not fit.
    let wanted = LOADED.iter().chain([&STR_OFFSETS]);
    let mut found = Vec::new();
    let mut needed: u64 = 0;
    for &id in wanted {
        let Some((_, section)) = sections.section_by_name(endian, id.name().as_bytes()) else {
            continue;
        };
        if section.sh_type(endian) == elf::SHT_NOBITS {
            continue;
        }
        let compression = section
            .compression(endian, data)
            .map_err(elf_error(id.name()))?;
        let size: u64 = match compression {
            Some((header, _, _)) => header.ch_size(endian).into(),
            None => section.sh_size(endian).into(),
        };
        if compression.is_some() || size <= SMALL_SECTION_BYTES {
            needed = needed.saturating_add(size);
        }
        found.push((id, section, compression));
    }
    let has = |id| found.iter().any(|(found, _, _)| *found == id);
    if !has(SectionId::DebugInfo) || !has(SectionId::DebugLine) {
        return Err(DwarfError::NoDebugInfo);
    }
    if needed > max_bytes {
        return Err(DwarfError::TooLarge {
            needed,
            limit: max_bytes,
        });
    }

    let pages = PageCache::new(file.clone(), PAGE_CACHE_BYTES);
    let mut loaded: Vec<(SectionId, Bytes)> = Vec::with_capacity(found.len());
    for (id, section, compression) in found {
        let size: u64 = section.sh_size(endian).into();
        let bytes = match compression {
            None if size > SMALL_SECTION_BYTES => Bytes::Paged {
                cache: pages.clone(),
                start: section.sh_offset(endian).into(),
                len: size,
            },
            None => Bytes::Owned(
                section
                    .data(endian, data)
                    .map_err(elf_error(id.name()))?
                    .into(),
            ),
            Some((header, offset, size)) => {
                // Streamed from the file rather than read whole: the compressed bytes would
                // otherwise stay in the header reader's cache until the load ends, beside the
                // inflated ones (libc's debug file: 2.5 MiB more at the peak).
                let cannot_read = || DwarfError::Elf(format!("{}: cannot read", id.name()));
                let end = offset.checked_add(size).ok_or_else(cannot_read)?;
                if end > data.len().map_err(|()| cannot_read())? {
                    return Err(cannot_read());
                }
                let compressed = SectionReader {
                    file: &*file,
                    offset,
                    end,
                };
                Bytes::Owned(inflate(
                    id.name(),
                    header.ch_type(endian),
                    compressed,
                    header.ch_size(endian).into(),
                )?)
            }
        };
        loaded.push((id, bytes));
    }
    let endian = if endian.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let dwarf = gimli::Dwarf::load(|id| -> Result<PagedReader, gimli::Error> {
        let bytes = loaded.iter().find(|(found, _)| *found == id).map_or_else(
            || Bytes::Owned(Arc::from(&[][..])),
            |(_, bytes)| bytes.clone(),
        );
        Ok(PagedReader::new(bytes, endian))
    })?;
    let units = Units::index(&dwarf)?;
    Ok(SourceLines {
        dwarf,
        units,
        owned_bytes: needed,
        pages,
    })
}

/// The GNU build id note of the first note sections (a few dozen bytes, first in practice);
/// notes that do not parse are skipped.
fn gnu_build_id<'a, 'data, Elf, R>(
    endian: Endianness,
    data: R,
    sections: impl Iterator<Item = &'a Elf::SectionHeader>,
) -> Option<&'data [u8]>
where
    Elf: FileHeader<Endian = Endianness> + 'a,
    R: ReadRef<'data>,
{
    sections
        .filter(|section| {
            section.sh_type(endian) == elf::SHT_NOTE && section.sh_size(endian).into() <= 1 << 16
        })
        .take(16)
        .find_map(|section| {
            let mut notes = section.notes(endian, data).ok()??;
            while let Ok(Some(note)) = notes.next() {
                if note.name() == elf::ELF_NOTE_GNU && note.n_type(endian) == elf::NT_GNU_BUILD_ID {
                    return Some(note.desc());
                }
            }
            None
        })
}

/// Inflates a `SHF_COMPRESSED` section to exactly `size` bytes (already checked against the
/// caller's budget), straight into the buffer the tables keep: a `Vec` turned into an
/// `Arc<[u8]>` is copied, and both were held at once (twice 5.8 MiB for libc's `.debug_info`).
fn inflate(
    section: &'static str,
    kind: u32,
    compressed: impl Read,
    size: u64,
) -> Result<Arc<[u8]>, DwarfError> {
    let error = |reason: String| DwarfError::Compression { section, reason };
    if kind != elf::ELFCOMPRESS_ZLIB {
        let name: Cow<'_, str> = if kind == elf::ELFCOMPRESS_ZSTD {
            "zstd is not supported, only zlib".into()
        } else {
            format!("unknown compression type {kind}").into()
        };
        return Err(error(name.into_owned()));
    }
    let size = usize::try_from(size).map_err(|_| error("too large".into()))?;
    // Allocated at its size once, zeroed by the allocator: collected from an iterator, the
    // bytes were written one by one in debug builds, a tenth of a debug daemon's time for
    // the source lines of a busy host's first system-wide profile.
    // SAFETY: zeroed memory is a valid `u8`.
    let mut out: Arc<[u8]> = unsafe { Arc::<[u8]>::new_zeroed_slice(size).assume_init() };
    let buffer = Arc::get_mut(&mut out).expect("a buffer of our own");
    let mut decoder = flate2::read::ZlibDecoder::new(compressed);
    let mut filled = 0;
    while filled < size {
        match decoder.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(error(e.to_string())),
        }
    }
    // One byte more than announced, to tell a stream longer than its header says.
    if filled == size {
        filled += decoder.read(&mut [0]).map_err(|e| error(e.to_string()))?;
    }
    if filled != size {
        return Err(error(format!(
            "inflates to {filled} bytes, the header says {size}"
        )));
    }
    Ok(out)
}

/// The bytes of a file from `offset` to `end`, read in the pieces the reader asks for.
struct SectionReader<'a> {
    file: &'a dyn ReadAt,
    offset: u64,
    end: u64,
}

impl Read for SectionReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.end - self.offset).unwrap_or(usize::MAX);
        let n = buf.len().min(left);
        self.file.read_exact_at(&mut buf[..n], self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demangle::demangle;

    #[test]
    fn non_elf_and_truncated_input_are_errors() {
        let parse = |bytes: &[u8]| {
            SourceLines::parse(bytes, Arc::new(bytes.to_vec()), u64::MAX, None).unwrap_err()
        };
        let err = parse(&b"not an ELF file at all"[..]);
        assert!(matches!(err, DwarfError::NotElf(_)), "{err}");
        let err = parse(&b"\x7fELF"[..]);
        assert!(matches!(err, DwarfError::NotElf(_)), "{err}");
        // A real ELF header whose section table lies past the end.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let err = parse(&exe[..64]);
        assert!(matches!(err, DwarfError::Elf(_)), "{err}");
    }

    /// Only what is held in memory counts against the budget: compressed sections, inflated
    /// whole. Uncompressed ones are read a page at a time, and cost the budget nothing.
    #[test]
    fn the_budget_is_checked_before_reading_what_must_be_held() {
        // Test binaries are built with debug info.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let lines = SourceLines::parse(&exe[..], Arc::new(exe.clone()), 0, None).unwrap();
        assert_eq!(lines.owned_bytes(), 0);
        let dir = std::env::temp_dir().join(format!("vmscope-dwarf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tiny.c"), "int main(void) { return 0; }\n").unwrap();
        let status = std::process::Command::new("gcc")
            .args(["-g", "-gz=zlib", "-o", "tiny", "tiny.c"])
            .current_dir(&dir)
            .status()
            .expect("gcc builds a program with compressed debug sections");
        assert!(status.success());
        let bytes = std::fs::read(dir.join("tiny")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let err = SourceLines::parse(&bytes[..], Arc::new(bytes.clone()), 10, None).unwrap_err();
        assert!(
            matches!(err, DwarfError::TooLarge { limit: 10, .. }),
            "{err}"
        );
        let mut lines = SourceLines::parse(&bytes[..], Arc::new(bytes.clone()), u64::MAX, None)
            .expect("inflated within the budget");
        // .debug_info inflated, and the small sections read whole.
        assert!(lines.owned_bytes() > 0x4c, "{lines:?}");
        // Inflated from the file as it is read: the lines are the program's.
        let symbols = crate::elf::ElfSymbols::parse(&bytes[..]).unwrap();
        let main = symbols
            .symbols()
            .find(|s| s.demangled() == "main")
            .expect("main's symbol");
        let frames = lines.lookup(main.start).unwrap();
        let last = frames.last().expect("a frame");
        assert!(
            last.file.as_deref().unwrap().ends_with("tiny.c") && last.line == 1,
            "{frames:?}"
        );
        // Compressed sections are read from the file, not the headers' reader: a file that
        // shrank to nothing since is an error of the inflation, not a panic.
        let err = SourceLines::parse(&bytes[..], Arc::new(Vec::new()), u64::MAX, None).unwrap_err();
        assert!(matches!(err, DwarfError::Compression { .. }), "{err}");
    }

    #[test]
    fn this_test_binary_knows_where_this_function_is() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let symbols = crate::elf::ElfSymbols::parse(&exe[..]).unwrap();
        let build_id = symbols
            .build_id()
            .expect("rustc's linker writes a build id");
        let file = Arc::new(exe.clone());
        let wrong =
            SourceLines::parse(&exe[..], file.clone(), u64::MAX, Some(&[1, 2, 3])).unwrap_err();
        assert!(matches!(wrong, DwarfError::WrongBuildId { .. }), "{wrong}");
        let mut lines = SourceLines::parse(&exe[..], file, u64::MAX, Some(build_id)).unwrap();
        // Read a page at a time: what was read is far less than the sections.
        let (cached, read) = lines.pages();
        assert!(cached <= PAGE_CACHE_BYTES && read > 0, "{lines:?}");
        let me = symbols
            .symbols()
            .find(|s| {
                s.demangled()
                    .ends_with("this_test_binary_knows_where_this_function_is")
            })
            .expect("the test function's symbol");
        let frames = lines.lookup(me.start).unwrap();
        let last = frames.last().expect("a frame");
        assert!(
            last.file.as_deref().unwrap().ends_with("dwarf/mod.rs"),
            "{frames:?}"
        );
        assert!(last.line > 0 && !last.inlined, "{frames:?}");
        assert!(
            last.function
                .as_deref()
                .unwrap()
                .contains("this_test_binary_knows"),
            "{frames:?}"
        );
        // Outside every unit: no frame, no error. (Not 0: functions the linker dropped keep
        // their DWARF, at address 0.)
        assert_eq!(lines.lookup(u64::MAX - 1).unwrap(), []);
    }

    /// Shedding lets go of what lookups parsed and read, down to what a load must hold,
    /// and the next lookup answers the same, parsing its unit again.
    #[test]
    fn shed_tables_weigh_what_the_load_held_and_answer_the_same() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let symbols = crate::elf::ElfSymbols::parse(&exe[..]).unwrap();
        let mut lines =
            SourceLines::parse(&exe[..], Arc::new(exe.clone()), u64::MAX, None).unwrap();
        let loaded = lines.weight();
        let me = symbols
            .symbols()
            .find(|s| {
                s.demangled()
                    .ends_with("shed_tables_weigh_what_the_load_held_and_answer_the_same")
            })
            .expect("the test function's symbol");
        let before = lines.lookup(me.start).unwrap();
        assert!(!before.is_empty());
        let (_, parsed, parses) = lines.units();
        assert!(parsed > 0 && lines.weight() > loaded, "{lines:?}");
        lines.shed();
        // The pages the load read to index the units go too.
        assert!(lines.weight() <= loaded, "{lines:?}");
        assert_eq!(
            lines.weight(),
            lines.owned_bytes() + lines.units.index_bytes(),
            "{lines:?}"
        );
        assert_eq!(lines.units().1, 0);
        assert_eq!(lines.lookup(me.start).unwrap(), before);
        assert!(lines.units().2 > parses, "its unit parsed again");
    }

    /// Our lookups answer what addr2line's do (its whole-file context, over the same
    /// sections), for addresses all over this test binary: functions, files, lines, inlined
    /// calls. Units are parsed only for the addresses asked, and evicted beyond their budget.
    #[test]
    fn lookups_answer_what_addr2line_answers() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let symbols = crate::elf::ElfSymbols::parse(&exe[..]).unwrap();
        let mut lines =
            SourceLines::parse(&exe[..], Arc::new(exe.clone()), u64::MAX, None).unwrap();
        let (units, parsed, _) = lines.units();
        assert!(units > 50 && parsed == 0, "{units} units, {parsed} parsed");

        let reference = {
            use object::{Object as _, ObjectSection as _};
            let file = object::File::parse(&exe[..]).unwrap();
            let dwarf = gimli::Dwarf::load(|id| -> Result<_, gimli::Error> {
                let data = file
                    .section_by_name(id.name())
                    .and_then(|s| s.data().ok())
                    .unwrap_or(&[]);
                Ok(gimli::EndianSlice::new(data, gimli::LittleEndian))
            })
            .unwrap();
            addr2line::Context::from_dwarf(dwarf).unwrap()
        };
        let functions: Vec<(u64, u64)> = symbols
            .symbols()
            .filter(|s| s.size >= 8)
            .map(|s| (s.start, s.size))
            .collect();
        let step = (functions.len() / 3000).max(1);
        let (mut compared, mut with_inlined) = (0, 0);
        for (i, &(start, size)) in functions.iter().step_by(step).enumerate() {
            let probe = start + (size * (i as u64 % 7) / 7);
            let ours = lines.lookup(probe).unwrap();
            let mut theirs = Vec::new();
            let mut frames = reference.find_frames(probe).skip_all_loads().unwrap();
            while let Some(frame) = frames.next().unwrap() {
                theirs.push(SourceFrame {
                    function: frame
                        .function
                        .map(|f| demangle(&f.raw_name().unwrap()).into_owned()),
                    file: frame
                        .location
                        .as_ref()
                        .and_then(|l| l.file.map(str::to_owned)),
                    line: frame.location.as_ref().and_then(|l| l.line).unwrap_or(0),
                    inlined: true,
                });
            }
            if let Some(last) = theirs.last_mut() {
                last.inlined = false;
            }
            assert_eq!(ours, theirs, "at {probe:#x}");
            compared += 1;
            with_inlined += usize::from(ours.len() > 1);
        }
        assert!(
            compared > 1000 && with_inlined > 50,
            "{compared} {with_inlined}"
        );
        let (units, parsed, parses) = lines.units();
        assert!(parsed < units, "{parsed} of {units} units parsed");
        assert!(parses >= parsed as u64);
        assert!(lines.units.bytes() <= units::UNITS_BUDGET_BYTES + lines.units.index_bytes());
    }

    #[test]
    fn compressed_sections_inflate_within_their_announced_size() {
        use flate2::{Compression, write::ZlibEncoder};
        use std::io::Write as _;
        let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(&[7u8; 1000]).unwrap();
        let compressed = encoder.finish().unwrap();
        let ok = inflate(".debug_info", elf::ELFCOMPRESS_ZLIB, &compressed[..], 1000).unwrap();
        assert_eq!(*ok, [7u8; 1000]);
        for (size, kind) in [(999, elf::ELFCOMPRESS_ZLIB), (1001, elf::ELFCOMPRESS_ZLIB)] {
            assert!(inflate(".debug_info", kind, &compressed[..], size).is_err());
        }
        let zstd =
            inflate(".debug_info", elf::ELFCOMPRESS_ZSTD, &compressed[..], 1000).unwrap_err();
        assert!(zstd.to_string().contains("zstd"), "{zstd}");
        assert!(inflate(".debug_info", elf::ELFCOMPRESS_ZLIB, &b"garbage"[..], 10).is_err());
    }
}
