//! The unwind sections of one binary: `.eh_frame`, `.eh_frame_hdr` or `.debug_frame`, with the
//! addresses framehop needs to read them, and the load segments that place the binary in a
//! process.
//!
//! Read once per binary (see `Module::unwind_sections`, which shares them by build id across
//! inodes and containers) and handed to every process's unwinder as cheap clones of
//! [`SectionBytes`]. The parser reads through [`object::ReadRef`] (a `ReadCache<File>` in the
//! daemon, a byte slice in tests): only the headers, the build-id note and the sections it
//! keeps, each bounds-checked and capped at [`MAX_UNWIND_SECTION_BYTES`]. Files come from any
//! process on the host, so nothing here may panic on bad input.
//!
//! Only 64-bit little-endian x86-64 files are accepted: framehop's unwinder here is the x86-64
//! one, and a 32-bit process's stack could not be walked with it anyway.

use std::{io::Read as _, ops::Deref, ops::Range, sync::Arc};

use framehop::ExplicitModuleSectionInfo;
use object::{
    Endianness, ReadRef,
    elf::{self, FileHeader64},
    read::elf::{FileHeader as _, ProgramHeader as _, SectionHeader as _},
};

/// Largest unwind section the daemon loads (libjvm's `.eh_frame` is a few MiB): a bound on what
/// a hostile binary can make the daemon allocate.
pub const MAX_UNWIND_SECTION_BYTES: u64 = 256 << 20;

/// Bytes of one section, shared: cloning is a reference-count increment, so every process
/// mapping a binary unwinds from the same copy.
#[derive(Clone, Debug, Default)]
pub struct SectionBytes(Arc<[u8]>);

impl Deref for SectionBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// A section's stated address range (SVMA) and its bytes.
#[derive(Clone, Debug)]
struct Section {
    svma: Range<u64>,
    bytes: SectionBytes,
}

/// A `PT_LOAD` segment with file contents.
#[derive(Clone, Copy, Debug)]
struct Load {
    offset: u64,
    filesz: u64,
    vaddr: u64,
    executable: bool,
}

/// Why a binary's unwind sections could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TablesError {
    /// Not an ELF file the x86-64 unwinder can use (wrong class, endianness or machine).
    #[error("not a 64-bit x86-64 ELF file ({0})")]
    Unsupported(&'static str),
    /// Headers or a section lie outside the file or contradict each other.
    #[error("malformed ELF: {0}")]
    Malformed(String),
    /// A section is larger than [`MAX_UNWIND_SECTION_BYTES`].
    #[error("{section} is {size} bytes, more than the {limit} the daemon loads")]
    TooLarge {
        /// The section's name.
        section: &'static str,
        /// Its size (uncompressed, for a compressed section).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A compressed `.debug_frame` the daemon cannot or will not decompress.
    #[error("cannot decompress {section}: {reason}")]
    Compressed {
        /// The section's name.
        section: &'static str,
        /// What went wrong.
        reason: String,
    },
}

impl From<object::read::Error> for TablesError {
    fn from(e: object::read::Error) -> Self {
        TablesError::Malformed(e.to_string())
    }
}

/// The unwind information of one binary, ready to hand to framehop.
#[derive(Clone, Debug, Default)]
pub struct UnwindTables {
    eh_frame: Option<Section>,
    eh_frame_hdr: Option<Section>,
    /// Only loaded when there is no `.eh_frame`: framehop prefers `.eh_frame` when both exist.
    debug_frame: Option<SectionBytes>,
    text_svma: Option<Range<u64>>,
    got_svma: Option<Range<u64>>,
    loads: Vec<Load>,
    build_id: Option<Vec<u8>>,
}

impl UnwindTables {
    /// Reads the unwind sections of an ELF file.
    ///
    /// A file without any (a stripped binary built without unwind tables) parses to tables for
    /// which [`UnwindTables::has_cfi`] is false; the caller then looks for a debug file.
    /// Sections of type `SHT_NOBITS` (how a separate debug file keeps the binary's allocated
    /// sections) count as absent.
    pub fn parse<'data, R: ReadRef<'data>>(data: R) -> Result<UnwindTables, TablesError> {
        let (header, endian) = header(data)?;
        let mut tables = UnwindTables {
            loads: header
                .program_headers(endian, data)?
                .iter()
                .filter(|p| p.p_type(endian) == elf::PT_LOAD && p.p_filesz(endian) > 0)
                .map(|p| Load {
                    offset: p.p_offset(endian),
                    filesz: p.p_filesz(endian),
                    vaddr: p.p_vaddr(endian),
                    executable: p.p_flags(endian) & elf::PF_X != 0,
                })
                .collect(),
            build_id: find_build_id(header, endian, data)?,
            ..UnwindTables::default()
        };
        tables.loads.sort_by_key(|l| l.offset);
        let sections = header.sections(endian, data)?;
        let by_name = |name: &[u8]| {
            sections
                .section_by_name(endian, name)
                .map(|(_, s)| s)
                .filter(|s| s.sh_type(endian) != elf::SHT_NOBITS)
        };
        let range = |s: &elf::SectionHeader64<Endianness>| {
            let start = s.sh_addr(endian);
            start..start.saturating_add(s.sh_size(endian))
        };
        let load = |name: &'static str| -> Result<Option<Section>, TablesError> {
            let Some(section) = by_name(name.as_bytes()) else {
                return Ok(None);
            };
            let bytes = section_bytes(section, endian, data, name)?;
            Ok((!bytes.is_empty()).then(|| Section {
                svma: range(section),
                bytes,
            }))
        };
        tables.eh_frame = load(".eh_frame")?;
        if tables.eh_frame.is_some() {
            tables.eh_frame_hdr = load(".eh_frame_hdr")?;
        } else if let Some(section) = by_name(b".debug_frame") {
            let bytes = section_bytes(section, endian, data, ".debug_frame")?;
            tables.debug_frame = (!bytes.is_empty()).then_some(bytes);
        }
        tables.text_svma = by_name(b".text").map(range);
        tables.got_svma = by_name(b".got").map(range);
        Ok(tables)
    }

    /// Whether the binary has call frame information framehop can use.
    pub fn has_cfi(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    /// The GNU build id, the key the tables are shared by.
    pub fn build_id(&self) -> Option<&[u8]> {
        self.build_id.as_deref()
    }

    /// Takes the `.debug_frame` of a separate debug file for a binary without CFI of its own.
    /// The debug file keeps the binary's section addresses, so only the bytes are taken; the
    /// caller checks that the build ids match.
    pub fn adopt_debug_frame(&mut self, debug: UnwindTables) {
        if !self.has_cfi() {
            self.debug_frame = debug.debug_frame;
        }
    }

    /// The load bias of a mapping of this binary (what to add to an address stated in the file
    /// to get the address in the process), from the mapping's start and file offset as
    /// /proc/PID/maps gives them.
    ///
    /// The file offset is placed in its `PT_LOAD` segment (`p_offset` rounded down to a page,
    /// since the kernel maps whole pages), preferring executable segments where two share a
    /// page: bias = start − offset + (p_offset − p_vaddr). Offset 0 is not assumed to be
    /// address 0. `None` if no segment holds the offset or the bias would be negative.
    pub fn load_bias(&self, mapping_start: u64, mapping_offset: u64) -> Option<u64> {
        const PAGE: u64 = 4096;
        let holds = |l: &&Load| {
            l.offset & !(PAGE - 1) <= mapping_offset
                && mapping_offset < l.offset.saturating_add(l.filesz)
        };
        let load = self
            .loads
            .iter()
            .filter(holds)
            .find(|l| l.executable)
            .or_else(|| self.loads.iter().find(holds))?;
        mapping_start
            .checked_add(load.offset)?
            .checked_sub(mapping_offset.checked_add(load.vaddr)?)
    }

    /// The section information framehop builds a module from; the bytes are shared, not
    /// copied.
    pub fn section_info(&self) -> ExplicitModuleSectionInfo<SectionBytes> {
        ExplicitModuleSectionInfo {
            // ELF addresses are stated from 0.
            base_svma: 0,
            text_svma: self.text_svma.clone(),
            got_svma: self.got_svma.clone(),
            eh_frame_svma: self.eh_frame.as_ref().map(|s| s.svma.clone()),
            eh_frame: self.eh_frame.as_ref().map(|s| s.bytes.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|s| s.svma.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|s| s.bytes.clone()),
            debug_frame: self.debug_frame.clone(),
            ..ExplicitModuleSectionInfo::default()
        }
    }

    /// Bytes of section data held (what the tables cost in memory).
    pub fn section_bytes(&self) -> usize {
        let len = |s: &Option<Section>| s.as_ref().map_or(0, |s| s.bytes.len());
        len(&self.eh_frame)
            + len(&self.eh_frame_hdr)
            + self.debug_frame.as_ref().map_or(0, |b| b.len())
    }

    /// Which unwind information the tables hold, for logs and reports.
    pub fn kind(&self) -> &'static str {
        match (&self.eh_frame, &self.eh_frame_hdr, &self.debug_frame) {
            (Some(_), Some(_), _) => ".eh_frame with .eh_frame_hdr",
            (Some(_), None, _) => ".eh_frame",
            (None, _, Some(_)) => ".debug_frame",
            (None, _, None) => "none",
        }
    }
}

/// The GNU build id of an ELF file, reading only its headers and notes: enough to find tables
/// already loaded from another copy of the same binary.
pub fn read_build_id<'data, R: ReadRef<'data>>(data: R) -> Result<Option<Vec<u8>>, TablesError> {
    let (header, endian) = header(data)?;
    find_build_id(header, endian, data)
}

fn header<'data, R: ReadRef<'data>>(
    data: R,
) -> Result<(&'data FileHeader64<Endianness>, Endianness), TablesError> {
    let header = FileHeader64::<Endianness>::parse(data).map_err(|e| {
        // object refuses a 32-bit file as "unsupported class" in the same way as garbage; say
        // which it is.
        match data.read_bytes_at(0, 5) {
            Ok([0x7f, b'E', b'L', b'F', class]) if *class != elf::ELFCLASS64 => {
                TablesError::Unsupported("32-bit")
            }
            _ => TablesError::Malformed(e.to_string()),
        }
    })?;
    let endian = header.endian()?;
    if !header.is_little_endian() {
        return Err(TablesError::Unsupported("big-endian"));
    }
    if header.e_machine(endian) != elf::EM_X86_64 {
        return Err(TablesError::Unsupported("another machine"));
    }
    Ok((header, endian))
}

fn find_build_id<'data, R: ReadRef<'data>>(
    header: &FileHeader64<Endianness>,
    endian: Endianness,
    data: R,
) -> Result<Option<Vec<u8>>, TablesError> {
    let sections = header.sections(endian, data)?;
    for section in sections.iter() {
        // A broken note section is no reason to refuse the unwind tables: skip it.
        let Ok(Some(mut notes)) = section.notes(endian, data) else {
            continue;
        };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == elf::ELF_NOTE_GNU && note.n_type(endian) == elf::NT_GNU_BUILD_ID {
                return Ok(Some(note.desc().to_vec()));
            }
        }
    }
    Ok(None)
}

/// A section's bytes, decompressed when `SHF_COMPRESSED` (Debian compresses the sections of
/// its debug files with zlib), refused above [`MAX_UNWIND_SECTION_BYTES`].
fn section_bytes<'data, R: ReadRef<'data>>(
    section: &elf::SectionHeader64<Endianness>,
    endian: Endianness,
    data: R,
    name: &'static str,
) -> Result<SectionBytes, TablesError> {
    let limit = MAX_UNWIND_SECTION_BYTES;
    let size = section.sh_size(endian);
    if size > limit {
        return Err(TablesError::TooLarge {
            section: name,
            size,
            limit,
        });
    }
    let raw = section
        .data(endian, data)
        .map_err(|_| TablesError::Malformed(format!("{name} lies outside the file")))?;
    if section.sh_flags(endian) & u64::from(elf::SHF_COMPRESSED) == 0 {
        return Ok(SectionBytes(raw.into()));
    }
    let compressed = |reason: String| TablesError::Compressed {
        section: name,
        reason,
    };
    let (chdr, stream) = object::pod::from_bytes::<elf::CompressionHeader64<Endianness>>(raw)
        .map_err(|()| compressed("shorter than its compression header".into()))?;
    if chdr.ch_type.get(endian) != elf::ELFCOMPRESS_ZLIB {
        return Err(compressed(format!(
            "compression type {} (only zlib is supported)",
            chdr.ch_type.get(endian)
        )));
    }
    let size = chdr.ch_size.get(endian);
    if size > limit {
        return Err(TablesError::TooLarge {
            section: name,
            size,
            limit,
        });
    }
    let mut out = Vec::with_capacity(size as usize);
    flate2::read::ZlibDecoder::new(stream)
        .take(size)
        .read_to_end(&mut out)
        .map_err(|e| compressed(e.to_string()))?;
    if out.len() as u64 != size {
        return Err(compressed(format!(
            "{} bytes decompressed, the header says {size}",
            out.len()
        )));
    }
    Ok(SectionBytes(out.into()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The libc this test process maps.
    pub(crate) fn libc_path() -> std::path::PathBuf {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so"))
            .expect("libc is mapped")
            .into()
    }

    #[test]
    fn own_executable_and_libc_have_eh_frame_with_hdr() {
        for path in [std::env::current_exe().unwrap(), libc_path()] {
            let bytes = std::fs::read(&path).unwrap();
            let tables = UnwindTables::parse(&*bytes).unwrap();
            assert_eq!(tables.kind(), ".eh_frame with .eh_frame_hdr", "{path:?}");
            assert!(tables.build_id().is_some(), "{path:?}");
            assert_eq!(
                read_build_id(&*bytes).unwrap().as_deref(),
                tables.build_id()
            );
            let info = tables.section_info();
            // framehop resolves eh_frame-relative pointers with these.
            assert!(info.eh_frame_svma.is_some() && info.text_svma.is_some());
            assert!(tables.section_bytes() > 1000);
        }
    }

    #[test]
    fn load_bias_goes_through_the_segment_not_offset_zero() {
        let tables = UnwindTables {
            loads: vec![
                Load {
                    offset: 0,
                    filesz: 0x800,
                    vaddr: 0,
                    executable: false,
                },
                // Text at file offset 0x1000, stated at 0x401000 (non-PIE layout)...
                Load {
                    offset: 0x1000,
                    filesz: 0x5000,
                    vaddr: 0x401000,
                    executable: true,
                },
                // ...and data whose file offset is not page-aligned.
                Load {
                    offset: 0x6e10,
                    filesz: 0x300,
                    vaddr: 0x407e10,
                    executable: false,
                },
            ],
            ..UnwindTables::default()
        };
        // Mapped where it is stated: no bias.
        assert_eq!(tables.load_bias(0x401000, 0x1000), Some(0));
        // A PIE-like load at 0x7f00_0000_0000 + 0x401000.
        assert_eq!(
            tables.load_bias(0x7f00_0040_1000, 0x1000),
            Some(0x7f00_0000_0000)
        );
        // A mapping starting at the page holding the unaligned segment.
        assert_eq!(
            tables.load_bias(0x7f00_0040_7000, 0x6000),
            Some(0x7f00_0000_0000)
        );
        // Beyond every segment, and a negative bias.
        assert_eq!(tables.load_bias(0x1000, 0x9000), None);
        assert_eq!(tables.load_bias(0x1000, 0x1000), None);
    }

    #[test]
    fn hostile_files_give_errors() {
        let libc = std::fs::read(libc_path()).unwrap();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"not an ELF file".to_vec(), "malformed"),
            (
                {
                    let mut b = libc.clone();
                    b[4] = elf::ELFCLASS32;
                    b
                },
                "32-bit",
            ),
            (
                {
                    let mut b = libc.clone();
                    b[18] = 0xb7; // EM_AARCH64
                    b
                },
                "another machine",
            ),
            // Cut short: the section headers, at the end, are missing.
            (libc[..libc.len() / 2].to_vec(), "malformed"),
        ];
        for (bytes, expected) in cases {
            let err = UnwindTables::parse(&*bytes).unwrap_err().to_string();
            assert!(err.contains(expected), "{expected}: {err}");
        }
        // Every prefix: an error or tables, never a panic.
        for len in (0..libc.len().min(1 << 16)).step_by(61) {
            let _ = UnwindTables::parse(&libc[..len]);
        }
    }
}
