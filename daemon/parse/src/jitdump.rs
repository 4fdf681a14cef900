//! Parser for jitdump files, `jit-PID.dump`: Linux perf's record of the code a JIT generates.
//!
//! A VM started with the right option (V8 `--perf-prof`, the JVM with perf's `libperf-jvmti.so`
//! agent, wasmtime `--profile=jitdump`, LLVM's `PerfJITEventListener`, ...) writes a binary file
//! of timestamped records, and maps it executable so that profilers find it in
//! `/proc/PID/maps` (see `tools/perf/Documentation/jitdump-specification.txt` in Linux). It is
//! written in the writer's byte order: a 40-byte file header, then records, each with a 16-byte
//! header of its own:
//!
//! ```text
//! file header   u32 magic 0x4A695444 ("JiTD")  u32 version (1)  u32 total_size (>= 40)
//!               u32 elf_mach  u32 pad1  u32 pid  u64 timestamp  u64 flags
//! record        u32 id  u32 total_size (header included)  u64 timestamp   then by id:
//!   0 CODE_LOAD           u32 pid  u32 tid  u64 vma  u64 code_addr  u64 code_size
//!                         u64 code_index  char name[] (NUL-terminated)  u8 code[code_size]
//!   1 CODE_MOVE           u32 pid  u32 tid  u64 vma  u64 old_code_addr  u64 new_code_addr
//!                         u64 code_size  u64 code_index
//!   2 CODE_DEBUG_INFO     u64 code_addr  u64 nr_entry  then nr_entry times:
//!                         u64 addr  u32 line  u32 discrim  char file[] (NUL-terminated)
//!   3 CODE_CLOSE          (nothing)
//!   4 CODE_UNWINDING_INFO u64 unwind_data_size  u64 eh_frame_hdr_size  u64 mapped_size
//!                         u8 unwind_data[unwind_data_size]
//! ```
//!
//! Writers may pad a record after its fields (V8 rounds debug and unwinding records up to 8
//! bytes), so a record's `total_size` is only a bound on what its fields use; records of other
//! ids are skipped by their size. A CODE_DEBUG_INFO record, and a CODE_UNWINDING_INFO record,
//! describe the CODE_LOAD that follows them.
//!
//! The file grows while the VM runs, so parsing is incremental: [`parse_header`] and then
//! [`next_record`] over the bytes not consumed yet, each answering `Ok(None)` until the bytes
//! they need are all there. Unlike a perf map, a jitdump file cannot be resynchronised after a
//! corrupt record (nothing marks where the next one starts), so an inconsistent record is an
//! error, after which the caller stops reading that file. Every size is checked against the
//! record's own bytes, so hostile counts cannot make the parser allocate or loop beyond them.
//!
//! This module checks a record's internal consistency only. Whether a debug entry's address
//! lies in the code it describes needs the CODE_LOAD, which comes later: that is the caller's
//! check (and V8 and LLVM write debug addresses 0x40 past the code, see [`DebugEntry::addr`]).

/// The magic number, `"JiTD"` as a `u32` in the writer's byte order.
pub const MAGIC: u32 = 0x4A69_5444;

/// The version of the format this module reads (the only one there is).
pub const VERSION: u32 = 1;

/// Size of the file header's fields; a header may claim more, which readers skip.
pub const HEADER_SIZE: usize = 40;

/// Size of a record's header: id, total size and timestamp.
pub const RECORD_HEADER_SIZE: usize = 16;

/// Largest record accepted, in bytes: 16 MiB, far above any real function's code, debug info
/// or unwind table. It bounds what the daemon buffers while it waits for a record to be
/// complete, and what one debug info record can make it hold.
pub const MAX_RECORD_SIZE: u32 = 16 << 20;

/// Bit of [`JitdumpHeader::flags`]: timestamps come from an architecture clock (the TSC on x86)
/// rather than from `CLOCK_MONOTONIC`, so they cannot be compared with samples as they are.
pub const FLAG_ARCH_TIMESTAMP: u64 = 1;

const MAGIC_SWAPPED: u32 = MAGIC.swap_bytes();

const CODE_LOAD: u32 = 0;
const CODE_MOVE: u32 = 1;
const CODE_DEBUG_INFO: u32 = 2;
const CODE_CLOSE: u32 = 3;
const CODE_UNWINDING_INFO: u32 = 4;

/// The file name of a debug entry that has the previous entry's file (V8 writes it after the
/// first entry of each script; perf reads it so).
pub const REPEATED_FILE_NAME: &[u8] = b"\xff";

/// Size of the fields of a debug entry before its file name.
const DEBUG_ENTRY_FIXED: usize = 16;

/// Byte order of a jitdump file: the writer's, told by the magic number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endian {
    /// Little-endian (x86-64, aarch64 as Linux runs it).
    Little,
    /// Big-endian (s390x, some ppc64).
    Big,
}

impl Endian {
    fn u32(self, b: [u8; 4]) -> u32 {
        match self {
            Endian::Little => u32::from_le_bytes(b),
            Endian::Big => u32::from_be_bytes(b),
        }
    }

    fn u64(self, b: [u8; 8]) -> u64 {
        match self {
            Endian::Little => u64::from_le_bytes(b),
            Endian::Big => u64::from_be_bytes(b),
        }
    }
}

/// The file header of a jitdump file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JitdumpHeader {
    /// Byte order of every later field; pass it to [`next_record`].
    pub endian: Endian,
    /// `uint32_t version`: always [`VERSION`].
    pub version: u32,
    /// `uint32_t total_size`: size of the header in bytes, at least [`HEADER_SIZE`]. The first
    /// record starts this many bytes into the file.
    pub header_size: u32,
    /// `uint32_t elf_mach`: ELF `e_machine` of the generated code (62 for x86-64, 183 for
    /// aarch64).
    pub elf_mach: u32,
    /// `uint32_t pid`: the process that wrote the file.
    pub pid: u32,
    /// `uint64_t timestamp`: when the file was created. Writers disagree on its clock (V8 writes
    /// wall-clock microseconds), so it is informative only; record timestamps are what count.
    pub timestamp: u64,
    /// `uint64_t flags`: [`FLAG_ARCH_TIMESTAMP`] or 0.
    pub flags: u64,
}

impl JitdumpHeader {
    /// True when record timestamps come from an architecture clock rather than
    /// `CLOCK_MONOTONIC` ([`FLAG_ARCH_TIMESTAMP`]).
    pub fn uses_arch_timestamp(&self) -> bool {
        self.flags & FLAG_ARCH_TIMESTAMP != 0
    }
}

/// One record of a jitdump file, borrowing its names and data from the bytes parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// `JIT_CODE_LOAD`: code generated at `code_addr`, named. Its bytes follow in the file and are
    /// skipped, not copied.
    CodeLoad {
        /// `uint64_t timestamp` of the record header: when the code was created.
        timestamp: u64,
        /// `uint32_t pid`: the process the code belongs to.
        pid: u32,
        /// `uint32_t tid`: the thread that generated it.
        tid: u32,
        /// `uint64_t vma`: virtual address of the code's start; usually equal to `code_addr`,
        /// but LLVM writes 0. Use `code_addr`.
        vma: u64,
        /// `uint64_t code_addr`: address of the code's first byte.
        code_addr: u64,
        /// `uint64_t code_size`: bytes of code; `code_addr + code_size` does not overflow. May be
        /// 0 (the format allows empty functions).
        code_size: u64,
        /// `uint64_t code_index`: unique id of this code, which CODE_MOVE records refer to.
        code_index: u64,
        /// `char name[]`: the function's name, invalid UTF-8 replaced (see `name_is_utf8`).
        name: std::borrow::Cow<'a, str>,
        /// Whether the name was valid UTF-8. A writer may store script names raw (Latin-1
        /// paths); the caller decides whether to trust such a record, instead of this parser
        /// giving up on the whole file.
        name_is_utf8: bool,
    },
    /// `JIT_CODE_MOVE`: code already loaded now lives elsewhere, unchanged.
    CodeMove {
        /// `uint64_t timestamp` of the record header: when the code moved.
        timestamp: u64,
        /// `uint32_t pid`: the process the code belongs to.
        pid: u32,
        /// `uint32_t tid`: the thread that moved it.
        tid: u32,
        /// `uint64_t vma`: new virtual address of the code's start.
        vma: u64,
        /// `uint64_t old_code_addr`: where the code was.
        old_code_addr: u64,
        /// `uint64_t new_code_addr`: where the code is now.
        new_code_addr: u64,
        /// `uint64_t code_size`: bytes of code; neither range overflows.
        code_size: u64,
        /// `uint64_t code_index`: the `code_index` of the CODE_LOAD of this code.
        code_index: u64,
    },
    /// `JIT_CODE_DEBUG_INFO`: source lines of the code that the next CODE_LOAD at `code_addr`
    /// loads.
    DebugInfo {
        /// `uint64_t timestamp` of the record header.
        timestamp: u64,
        /// `uint64_t code_addr`: start of the code described.
        code_addr: u64,
        /// `debug_entry[nr_entry]`: one per source position, in the writer's order (usually by
        /// address).
        entries: Vec<DebugEntry<'a>>,
    },
    /// `JIT_CODE_CLOSE`: the VM is done writing (optional; the end of the file says as much).
    Close {
        /// `uint64_t timestamp` of the record header.
        timestamp: u64,
    },
    /// `JIT_CODE_UNWINDING_INFO`: DWARF call-frame information for the code of the next
    /// CODE_LOAD.
    UnwindingInfo {
        /// `uint64_t timestamp` of the record header.
        timestamp: u64,
        /// `uint64_t eh_frame_hdr_size`: bytes of `.eh_frame_hdr` in `data`, at most its length.
        /// The specification puts it first, but V8 writes it last, after the `.eh_frame`, and
        /// perf reads it there: `data[data.len() - eh_frame_hdr_size..]`.
        eh_frame_hdr_size: u64,
        /// `uint64_t mapped_size`: bytes of the table the VM also has in memory (0 when V8 wrote
        /// only an empty `.eh_frame_hdr`, telling the unwinder to use frame pointers).
        mapped_size: u64,
        /// `unwinding_data[unwind_data_size]`: the `.eh_frame` and `.eh_frame_hdr` bytes.
        data: &'a [u8],
    },
    /// A record of an id this module does not know, skipped.
    Unknown {
        /// `uint64_t timestamp` of the record header.
        timestamp: u64,
        /// `uint32_t id` of the record header.
        id: u32,
    },
}

impl Record<'_> {
    /// The timestamp of the record's header: when the event happened, on the file's clock
    /// (see [`JitdumpHeader::uses_arch_timestamp`]).
    pub fn timestamp(&self) -> u64 {
        match *self {
            Record::CodeLoad { timestamp, .. }
            | Record::CodeMove { timestamp, .. }
            | Record::DebugInfo { timestamp, .. }
            | Record::Close { timestamp }
            | Record::UnwindingInfo { timestamp, .. }
            | Record::Unknown { timestamp, .. } => timestamp,
        }
    }
}

/// One source position of a CODE_DEBUG_INFO record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebugEntry<'a> {
    /// `uint64_t code_addr`: the address where code for this position starts. Not checked against
    /// the code: V8 and LLVM add 0x40 to it (the size of the ELF header that `perf inject` puts
    /// before the code), perf's JVMTI agent does not, so the caller decides with the CODE_LOAD.
    pub addr: u64,
    /// `uint32_t line`: source line, from 1.
    pub line: u32,
    /// `uint32_t discrim`: column (V8, from 1) or DWARF discriminator (LLVM); 0 when unknown.
    pub discrim: u32,
    /// `char name[]`: the source file (`/srv/app.js`, `node:internal/util`, `[eval]`), as raw
    /// bytes: writers do not always write UTF-8 here, and Node 20's V8 has been seen writing
    /// garbage over the start of the name. See [`DebugEntry::file_str`].
    pub file: &'a [u8],
}

impl<'a> DebugEntry<'a> {
    /// The file name, if it is UTF-8 without control characters (a name a person can read).
    pub fn file_str(&self) -> Option<&'a str> {
        std::str::from_utf8(self.file)
            .ok()
            .filter(|s| !s.is_empty() && !s.chars().any(char::is_control))
    }
}

/// Why a jitdump file cannot be read on. The file's offset is the caller's to add.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JitdumpError {
    /// The file does not start with the magic number.
    #[error(
        "not a jitdump file (magic {0:#010x}, expected 0x4a695444 \"JiTD\" in either byte order)"
    )]
    BadMagic(u32),
    /// A version other than [`VERSION`].
    #[error("unsupported jitdump version {0} (vmscope reads version 1)")]
    UnsupportedVersion(u32),
    /// The header's `total_size` is below [`HEADER_SIZE`] or above [`MAX_RECORD_SIZE`].
    #[error("jitdump header claims {0} bytes, outside 40 bytes to 16 MiB")]
    BadHeaderSize(u32),
    /// A record's `total_size` is less than its header and fixed fields.
    #[error("record of type {id} claims {size} bytes, less than its header ({min} bytes)")]
    RecordTooSmall {
        /// The record's id.
        id: u32,
        /// Its `total_size`.
        size: u32,
        /// The size of its header and fixed fields.
        min: usize,
    },
    /// A record's `total_size` is above [`MAX_RECORD_SIZE`].
    #[error("record of type {id} of {size} bytes is larger than the 16 MiB limit")]
    RecordTooLarge {
        /// The record's id.
        id: u32,
        /// Its `total_size`.
        size: u32,
    },
    /// A name or file name has no NUL terminator within its record.
    #[error("{what} has no NUL terminator within its {record} record")]
    Unterminated {
        /// Which string: "function name" or "file name of debug entry N".
        what: String,
        /// The record type, `CODE_LOAD` or `CODE_DEBUG_INFO`.
        record: &'static str,
    },
    /// A code range that runs past the end of the address space.
    #[error("{record} record: code at {addr:#x} of {size} bytes overflows the address space")]
    CodeOverflow {
        /// The record type, `CODE_LOAD` or `CODE_MOVE`.
        record: &'static str,
        /// The start of the code.
        addr: u64,
        /// Its size.
        size: u64,
    },
    /// A variable part (code, debug entries, unwind data) that does not fit in its record.
    #[error("{record} record of {size} bytes is too small for {what}")]
    Overrun {
        /// The record type.
        record: &'static str,
        /// Its `total_size`.
        size: u32,
        /// What did not fit ("its 4096 bytes of code", "entry 3 of 12").
        what: String,
    },
    /// An unwinding record whose `.eh_frame_hdr` is larger than all its unwind data.
    #[error(
        "CODE_UNWINDING_INFO record: eh_frame_hdr_size {eh_frame_hdr_size} exceeds \
         unwind_data_size {unwind_data_size}"
    )]
    EhFrameHdrTooLarge {
        /// `eh_frame_hdr_size`.
        eh_frame_hdr_size: u64,
        /// `unwind_data_size`.
        unwind_data_size: u64,
    },
}

/// Parses the file header at the start of `bytes`. `Ok(None)`: not enough bytes yet, including
/// the extra header bytes a header may claim; with `Some(header)`, the first record starts
/// `header.header_size` bytes into the file. A wrong magic number or version is reported as
/// soon as its bytes are there.
pub fn parse_header(bytes: &[u8]) -> Result<Option<JitdumpHeader>, JitdumpError> {
    let Some(&magic) = bytes.first_chunk::<4>() else {
        return Ok(None);
    };
    let endian = match u32::from_le_bytes(magic) {
        MAGIC => Endian::Little,
        MAGIC_SWAPPED => Endian::Big,
        other => return Err(JitdumpError::BadMagic(other)),
    };
    let field32 = |at: usize| {
        bytes
            .get(at..at + 4)?
            .try_into()
            .ok()
            .map(|b| endian.u32(b))
    };
    let field64 = |at: usize| {
        bytes
            .get(at..at + 8)?
            .try_into()
            .ok()
            .map(|b| endian.u64(b))
    };
    let Some(version) = field32(4) else {
        return Ok(None);
    };
    if version != VERSION {
        return Err(JitdumpError::UnsupportedVersion(version));
    }
    let Some(header_size) = field32(8) else {
        return Ok(None);
    };
    if (header_size as usize) < HEADER_SIZE || header_size > MAX_RECORD_SIZE {
        return Err(JitdumpError::BadHeaderSize(header_size));
    }
    if bytes.len() < header_size as usize {
        return Ok(None);
    }
    let (Some(elf_mach), Some(pid), Some(timestamp), Some(flags)) =
        (field32(12), field32(20), field64(24), field64(32))
    else {
        return Ok(None);
    };
    Ok(Some(JitdumpHeader {
        endian,
        version,
        header_size,
        elf_mach,
        pid,
        timestamp,
        flags,
    }))
}

/// Parses the record at the start of `bytes`, in the file's byte order. `Ok(None)`: the record
/// is not complete yet (wait for more data). `Ok(Some((record, consumed)))`: the next record
/// starts `consumed` bytes later (its `total_size`, never 0). An error means the file cannot
/// be read further.
pub fn next_record<'a>(
    bytes: &'a [u8],
    endian: Endian,
) -> Result<Option<(Record<'a>, usize)>, JitdumpError> {
    let (Some(id), Some(size)) = (read_u32(bytes, 0, endian), read_u32(bytes, 4, endian)) else {
        return Ok(None);
    };
    let min = RECORD_HEADER_SIZE
        + match id {
            CODE_LOAD => 40,
            CODE_MOVE => 48,
            CODE_DEBUG_INFO => 16,
            CODE_UNWINDING_INFO => 24,
            _ => 0,
        };
    if (size as usize) < min {
        return Err(JitdumpError::RecordTooSmall { id, size, min });
    }
    if size > MAX_RECORD_SIZE {
        return Err(JitdumpError::RecordTooLarge { id, size });
    }
    let Some(record) = bytes.get(..size as usize) else {
        return Ok(None);
    };
    let mut r = Reader {
        bytes: record,
        pos: 8,
        endian,
        size,
        name: record_name(id),
    };
    let timestamp = r.u64()?;
    let parsed = match id {
        CODE_LOAD => {
            let (pid, tid) = (r.u32()?, r.u32()?);
            let (vma, code_addr, code_size, code_index) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            check_range(r.name, code_addr, code_size)?;
            let raw = r.cbytes(|| "function name".to_owned())?;
            let name_is_utf8 = std::str::from_utf8(raw).is_ok();
            let name = String::from_utf8_lossy(raw);
            r.skip(code_size, || format!("its {code_size} bytes of code"))?;
            Record::CodeLoad {
                timestamp,
                pid,
                tid,
                vma,
                code_addr,
                code_size,
                code_index,
                name,
                name_is_utf8,
            }
        }
        CODE_MOVE => {
            let (pid, tid) = (r.u32()?, r.u32()?);
            let (vma, old_code_addr, new_code_addr) = (r.u64()?, r.u64()?, r.u64()?);
            let (code_size, code_index) = (r.u64()?, r.u64()?);
            check_range(r.name, old_code_addr, code_size)?;
            check_range(r.name, new_code_addr, code_size)?;
            Record::CodeMove {
                timestamp,
                pid,
                tid,
                vma,
                old_code_addr,
                new_code_addr,
                code_size,
                code_index,
            }
        }
        CODE_DEBUG_INFO => {
            let code_addr = r.u64()?;
            Record::DebugInfo {
                timestamp,
                code_addr,
                entries: r.debug_entries(None)?,
            }
        }
        CODE_CLOSE => Record::Close { timestamp },
        CODE_UNWINDING_INFO => {
            let (unwind_data_size, eh_frame_hdr_size, mapped_size) = (r.u64()?, r.u64()?, r.u64()?);
            if eh_frame_hdr_size > unwind_data_size {
                return Err(JitdumpError::EhFrameHdrTooLarge {
                    eh_frame_hdr_size,
                    unwind_data_size,
                });
            }
            let data = r.skip(unwind_data_size, || {
                format!("its {unwind_data_size} bytes of unwind data")
            })?;
            Record::UnwindingInfo {
                timestamp,
                eh_frame_hdr_size,
                mapped_size,
                data,
            }
        }
        _ => Record::Unknown { timestamp, id },
    };
    Ok(Some((parsed, size as usize)))
}

/// Reads a CODE_DEBUG_INFO `record` (as [`next_record`] found it, header included) again,
/// knowing that each file name is `file_name_len` bytes or the one-byte [`REPEATED_FILE_NAME`]:
/// `None` if its entries and padding do not fit that exactly.
///
/// V8 writes a name only when the script changes and [`REPEATED_FILE_NAME`] after, but it
/// writes the name from a buffer it has already freed when the script's name is not a flat
/// one-byte string: the length is right, the bytes are the allocator's, NULs included. Read up
/// to the first NUL, such an entry ends early and every entry after it is read from the wrong
/// place. The caller that knows the name's length (V8 puts the script in the code's name) reads
/// the record with it instead.
pub fn reread_debug_info(
    record: &[u8],
    endian: Endian,
    file_name_len: usize,
) -> Option<Vec<DebugEntry<'_>>> {
    if read_u32(record, 0, endian) != Some(CODE_DEBUG_INFO) {
        return None;
    }
    let mut r = Reader {
        bytes: record,
        pos: RECORD_HEADER_SIZE + 8,
        endian,
        size: u32::try_from(record.len()).ok()?,
        name: record_name(CODE_DEBUG_INFO),
    };
    let entries = r.debug_entries(Some(file_name_len)).ok()?;
    let padding = record.get(r.pos..)?;
    (padding.len() < 8 && padding.iter().all(|&b| b == 0)).then_some(entries)
}

/// The specification's name of a record type, for messages.
fn record_name(id: u32) -> &'static str {
    match id {
        CODE_LOAD => "CODE_LOAD",
        CODE_MOVE => "CODE_MOVE",
        CODE_DEBUG_INFO => "CODE_DEBUG_INFO",
        CODE_CLOSE => "CODE_CLOSE",
        CODE_UNWINDING_INFO => "CODE_UNWINDING_INFO",
        _ => "unknown",
    }
}

fn check_range(record: &'static str, addr: u64, size: u64) -> Result<(), JitdumpError> {
    match addr.checked_add(size) {
        Some(_) => Ok(()),
        None => Err(JitdumpError::CodeOverflow { record, addr, size }),
    }
}

fn read_u32(bytes: &[u8], at: usize, endian: Endian) -> Option<u32> {
    Some(endian.u32(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// Reads the fields of one complete record; running out of its bytes is an error.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    endian: Endian,
    size: u32,
    name: &'static str,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn overrun(&self, what: String) -> JitdumpError {
        JitdumpError::Overrun {
            record: self.name,
            size: self.size,
            what,
        }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.bytes.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(out)
    }

    /// Takes `n` bytes, or fails with "too small for `what()`".
    fn skip(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8], JitdumpError> {
        usize::try_from(n)
            .ok()
            .and_then(|n| self.take(n))
            .ok_or_else(|| self.overrun(what()))
    }

    fn u32(&mut self) -> Result<u32, JitdumpError> {
        let b = self.take(4).and_then(|b| b.try_into().ok());
        b.map(|b| self.endian.u32(b))
            .ok_or_else(|| self.overrun("its fields".to_owned()))
    }

    fn u64(&mut self) -> Result<u64, JitdumpError> {
        let b = self.take(8).and_then(|b| b.try_into().ok());
        b.map(|b| self.endian.u64(b))
            .ok_or_else(|| self.overrun("its fields".to_owned()))
    }

    /// The `u64 nr_entry` and entries of a CODE_DEBUG_INFO record. Each file name ends at its
    /// first NUL, or, given `file_name_len`, is that many bytes or [`REPEATED_FILE_NAME`].
    fn debug_entries(
        &mut self,
        file_name_len: Option<usize>,
    ) -> Result<Vec<DebugEntry<'a>>, JitdumpError> {
        let nr_entry = self.u64()?;
        // Each entry takes at least its fixed fields and a NUL: the record's own bytes bound
        // the allocation, whatever nr_entry claims.
        let room = self.remaining() / (DEBUG_ENTRY_FIXED + 1);
        let mut entries =
            Vec::with_capacity(usize::try_from(nr_entry).unwrap_or(usize::MAX).min(room));
        for n in 0..nr_entry {
            if self.remaining() < DEBUG_ENTRY_FIXED + 1 {
                return Err(self.overrun(format!("entry {n} of the {nr_entry} it claims")));
            }
            let (addr, line, discrim) = (self.u64()?, self.u32()?, self.u32()?);
            let what = || format!("file name of debug entry {n}");
            let file = match file_name_len {
                None => self.cbytes(what)?,
                Some(len) => {
                    let rest = self.bytes.get(self.pos..).unwrap_or_default();
                    let len = if rest.starts_with(&[REPEATED_FILE_NAME[0], 0]) {
                        REPEATED_FILE_NAME.len()
                    } else {
                        len
                    };
                    if rest.get(len) != Some(&0) {
                        return Err(JitdumpError::Unterminated {
                            what: what(),
                            record: self.name,
                        });
                    }
                    self.pos += len + 1;
                    &rest[..len]
                }
            };
            entries.push(DebugEntry {
                addr,
                line,
                discrim,
                file,
            });
        }
        Ok(entries)
    }

    /// A NUL-terminated string's bytes, consuming its NUL.
    fn cbytes(&mut self, what: impl Fn() -> String) -> Result<&'a [u8], JitdumpError> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let Some(len) = rest.iter().position(|&b| b == 0) else {
            return Err(JitdumpError::Unterminated {
                what: what(),
                record: self.name,
            });
        };
        let raw = rest.get(..len).unwrap_or_default();
        self.pos += len + 1;
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_utf8_do_not_stop_the_file() {
        let mut w = Writer::new(Endian::Little);
        w.record(CODE_LOAD, 1, false, |w| {
            w.u32(1).u32(1).u64(0x1000).u64(0x1000).u64(0).u64(0);
            w.bytes(b"caf\xe9\0");
        });
        // Node 20's V8 has been seen writing garbage over a file name's first bytes.
        w.record(CODE_DEBUG_INFO, 2, false, |w| {
            w.u64(0x1000).u64(2);
            w.u64(0x1040).u32(4).u32(11).bytes(b"\xfcJ\x03\0");
            w.u64(0x1042).u32(5).u32(2).bytes(b"/srv/app.js\0");
        });
        let header = parse_header(&w.buf).unwrap().unwrap();
        let mut at = header.header_size as usize;
        let (load, used) = next_record(&w.buf[at..], Endian::Little).unwrap().unwrap();
        at += used;
        let Record::CodeLoad {
            name, name_is_utf8, ..
        } = load
        else {
            panic!("{load:?}");
        };
        assert_eq!((name.as_ref(), name_is_utf8), ("caf\u{fffd}", false));
        let (debug, _) = next_record(&w.buf[at..], Endian::Little).unwrap().unwrap();
        let Record::DebugInfo { entries, .. } = debug else {
            panic!("{debug:?}");
        };
        assert_eq!(entries[0].file_str(), None);
        assert_eq!(entries[0].line, 4);
        assert_eq!(entries[1].file_str(), Some("/srv/app.js"));
    }

    #[test]
    fn debug_names_written_from_freed_memory_are_reread_by_their_length() {
        // As Node 20's V8 writes them: the script's name for the first entry, from a freed
        // buffer (the allocator's pointers over its first bytes, NULs included), then the
        // repeated-name marker.
        let script = "/srv/app/hot.js";
        let mut garbled = script.as_bytes().to_vec();
        garbled[..8].copy_from_slice(&[0x50, 0x2f, 0x65, 0, 0, 0, 0, 0]);
        let mut w = Writer::new(Endian::Little);
        w.record(CODE_DEBUG_INFO, 2, true, |w| {
            w.u64(0x1000).u64(3);
            w.u64(0x1040).u32(5).u32(3).bytes(&garbled).bytes(&[0]);
            w.u64(0x1048).u32(6).u32(26).bytes(b"\xff\0");
            w.u64(0x1050).u32(7).u32(5).bytes(b"\xff\0");
        });
        let record = &w.buf[HEADER_SIZE..];
        // Read up to the first NUL, the entries after the garbled one come out wrong.
        let (Record::DebugInfo { entries, .. }, _) =
            next_record(record, Endian::Little).unwrap().unwrap()
        else {
            panic!()
        };
        assert_ne!(
            entries.iter().map(|e| e.line).collect::<Vec<_>>(),
            [5, 6, 7]
        );
        let entries = reread_debug_info(record, Endian::Little, script.len()).unwrap();
        let read: Vec<_> = entries.iter().map(|e| (e.addr, e.line, e.file)).collect();
        assert_eq!(
            read,
            [
                (0x1040, 5, &garbled[..]),
                (0x1048, 6, REPEATED_FILE_NAME),
                (0x1050, 7, REPEATED_FILE_NAME)
            ]
        );
        // Any other length does not fit the record, nor does another record type.
        for len in [script.len() - 1, script.len() + 1, 0] {
            assert_eq!(
                reread_debug_info(record, Endian::Little, len),
                None,
                "{len}"
            );
        }
        let mut w = Writer::new(Endian::Little);
        w.load(1, 0x1000, "JS:*f /srv/app/hot.js:1:1", &[0x90; 16], 0);
        assert_eq!(
            reread_debug_info(&w.buf[HEADER_SIZE..], Endian::Little, 15),
            None
        );
    }

    /// Writes jitdump streams in either byte order, as a VM would.
    struct Writer {
        endian: Endian,
        buf: Vec<u8>,
    }

    impl Writer {
        fn new(endian: Endian) -> Self {
            let mut w = Writer {
                endian,
                buf: Vec::new(),
            };
            w.u32(MAGIC).u32(VERSION).u32(40).u32(62).u32(0xdead_beef);
            w.u32(4242).u64(1_000).u64(0);
            w
        }

        fn u32(&mut self, v: u32) -> &mut Self {
            match self.endian {
                Endian::Little => self.buf.extend_from_slice(&v.to_le_bytes()),
                Endian::Big => self.buf.extend_from_slice(&v.to_be_bytes()),
            }
            self
        }

        fn u64(&mut self, v: u64) -> &mut Self {
            match self.endian {
                Endian::Little => self.buf.extend_from_slice(&v.to_le_bytes()),
                Endian::Big => self.buf.extend_from_slice(&v.to_be_bytes()),
            }
            self
        }

        fn bytes(&mut self, b: &[u8]) -> &mut Self {
            self.buf.extend_from_slice(b);
            self
        }

        fn cstr(&mut self, s: &str) -> &mut Self {
            self.bytes(s.as_bytes()).bytes(&[0])
        }

        /// A record: its header, then what `body` writes, with the size patched in and the
        /// record padded to 8 bytes when `pad`, as V8 does.
        fn record(&mut self, id: u32, ts: u64, pad: bool, body: impl FnOnce(&mut Self)) {
            let start = self.buf.len();
            self.u32(id).u32(0).u64(ts);
            body(self);
            if pad {
                while !(self.buf.len() - start).is_multiple_of(8) {
                    self.buf.push(0);
                }
            }
            let size = u32::try_from(self.buf.len() - start).unwrap();
            let size = match self.endian {
                Endian::Little => size.to_le_bytes(),
                Endian::Big => size.to_be_bytes(),
            };
            self.buf[start + 4..start + 8].copy_from_slice(&size);
        }

        fn load(&mut self, ts: u64, addr: u64, name: &str, code: &[u8], index: u64) {
            self.record(CODE_LOAD, ts, false, |w| {
                w.u32(4242).u32(4243).u64(addr).u64(addr);
                w.u64(code.len() as u64).u64(index).cstr(name).bytes(code);
            });
        }
    }

    /// A stream with every record type, and the records it must parse to.
    fn sample(endian: Endian) -> (Vec<u8>, Vec<Record<'static>>) {
        let mut w = Writer::new(endian);
        w.record(CODE_DEBUG_INFO, 10, true, |w| {
            w.u64(0x7000_0000).u64(2);
            w.u64(0x7000_0040).u32(1).u32(11).cstr("/srv/app.js");
            w.u64(0x7000_0050).u32(2).u32(3).cstr("/srv/caf\u{e9}.js");
        });
        w.record(CODE_UNWINDING_INFO, 11, true, |w| {
            w.u64(5).u64(4).u64(5).bytes(b"EHFRM");
        });
        w.load(12, 0x7000_0000, "JS:*f [eval]:1:11", &[0x90; 0x20], 0);
        w.record(CODE_MOVE, 13, false, |w| {
            w.u32(4242).u32(4243).u64(0x7100_0000).u64(0x7000_0000);
            w.u64(0x7100_0000).u64(0x20).u64(0);
        });
        w.record(99, 14, false, |w| {
            w.bytes(b"future record");
        });
        w.load(15, 0x7200_0000, "", &[], 1);
        w.record(CODE_CLOSE, 16, false, |_| {});
        let records = vec![
            Record::DebugInfo {
                timestamp: 10,
                code_addr: 0x7000_0000,
                entries: vec![
                    DebugEntry {
                        addr: 0x7000_0040,
                        line: 1,
                        discrim: 11,
                        file: b"/srv/app.js",
                    },
                    DebugEntry {
                        addr: 0x7000_0050,
                        line: 2,
                        discrim: 3,
                        file: "/srv/caf\u{e9}.js".as_bytes(),
                    },
                ],
            },
            Record::UnwindingInfo {
                timestamp: 11,
                eh_frame_hdr_size: 4,
                mapped_size: 5,
                data: b"EHFRM",
            },
            Record::CodeLoad {
                timestamp: 12,
                pid: 4242,
                tid: 4243,
                vma: 0x7000_0000,
                code_addr: 0x7000_0000,
                code_size: 0x20,
                code_index: 0,
                name: "JS:*f [eval]:1:11".into(),
                name_is_utf8: true,
            },
            Record::CodeMove {
                timestamp: 13,
                pid: 4242,
                tid: 4243,
                vma: 0x7100_0000,
                old_code_addr: 0x7000_0000,
                new_code_addr: 0x7100_0000,
                code_size: 0x20,
                code_index: 0,
            },
            Record::Unknown {
                timestamp: 14,
                id: 99,
            },
            Record::CodeLoad {
                timestamp: 15,
                pid: 4242,
                tid: 4243,
                vma: 0x7200_0000,
                code_addr: 0x7200_0000,
                code_size: 0,
                code_index: 1,
                name: "".into(),
                name_is_utf8: true,
            },
            Record::Close { timestamp: 16 },
        ];
        (w.buf, records)
    }

    /// Reads a whole stream as the daemon does: the header, then records until `Ok(None)`.
    /// Returns the records, the bytes consumed and the error that stopped it, if any.
    fn read_all(bytes: &[u8]) -> (Vec<Record<'_>>, usize, Option<JitdumpError>) {
        let header = match parse_header(bytes) {
            Ok(Some(h)) => h,
            Ok(None) => return (Vec::new(), 0, None),
            Err(e) => return (Vec::new(), 0, Some(e)),
        };
        let mut pos = header.header_size as usize;
        let mut records = Vec::new();
        loop {
            match next_record(&bytes[pos..], header.endian) {
                Ok(Some((record, used))) => {
                    assert!(used >= RECORD_HEADER_SIZE && used <= bytes.len() - pos);
                    records.push(record);
                    pos += used;
                }
                Ok(None) => return (records, pos, None),
                Err(e) => return (records, pos, Some(e)),
            }
        }
    }

    #[test]
    fn round_trip_both_byte_orders() {
        for endian in [Endian::Little, Endian::Big] {
            let (bytes, want) = sample(endian);
            let header = parse_header(&bytes).unwrap().unwrap();
            assert_eq!(
                header,
                JitdumpHeader {
                    endian,
                    version: 1,
                    header_size: 40,
                    elf_mach: 62,
                    pid: 4242,
                    timestamp: 1_000,
                    flags: 0,
                }
            );
            assert!(!header.uses_arch_timestamp());
            let (records, consumed, err) = read_all(&bytes);
            assert_eq!(err, None, "{endian:?}");
            assert_eq!(consumed, bytes.len());
            assert_eq!(records, want, "{endian:?}");
            let stamps: Vec<u64> = records.iter().map(Record::timestamp).collect();
            assert_eq!(stamps, [10, 11, 12, 13, 14, 15, 16]);
        }
    }

    /// The daemon's use: a file cut anywhere reads up to the last complete record and waits,
    /// and reads the same records once the rest arrives.
    #[test]
    fn truncation_at_every_offset() {
        for endian in [Endian::Little, Endian::Big] {
            let (bytes, want) = sample(endian);
            for cut in 0..bytes.len() {
                let (records, consumed, err) = read_all(&bytes[..cut]);
                assert_eq!(err, None, "cut at {cut}");
                assert!(consumed <= cut);
                assert_eq!(records[..], want[..records.len()], "cut at {cut}");
                if cut >= HEADER_SIZE {
                    // Then complete the file and go on from where it stopped.
                    let (rest, _, err) = read_all_from(&bytes, consumed, endian);
                    assert_eq!(err, None);
                    assert_eq!(records.len() + rest.len(), want.len(), "cut at {cut}");
                    assert_eq!(rest[..], want[records.len()..], "cut at {cut}");
                }
            }
        }
    }

    fn read_all_from(
        bytes: &[u8],
        mut pos: usize,
        endian: Endian,
    ) -> (Vec<Record<'_>>, usize, Option<JitdumpError>) {
        let mut records = Vec::new();
        loop {
            match next_record(&bytes[pos..], endian) {
                Ok(Some((record, used))) => {
                    records.push(record);
                    pos += used;
                }
                Ok(None) => return (records, pos, None),
                Err(e) => return (records, pos, Some(e)),
            }
        }
    }

    #[test]
    fn header_cases() {
        let (bytes, _) = sample(Endian::Little);
        for cut in 0..HEADER_SIZE {
            assert_eq!(parse_header(&bytes[..cut]), Ok(None), "cut at {cut}");
        }
        let err = parse_header(b"\x7fELF\x02\x01\x01\0").unwrap_err();
        assert_eq!(
            err.to_string(),
            "not a jitdump file (magic 0x464c457f, expected 0x4a695444 \"JiTD\" in either byte order)"
        );
        // Known as soon as its bytes are there.
        assert_eq!(
            parse_header(b"JITD"),
            Err(JitdumpError::BadMagic(0x4454_494a))
        );
        // "JiTD" is how a big-endian writer's magic reads, "DTiJ" a little-endian one's.
        assert_eq!(parse_header(b"JiTD"), Ok(None));
        assert_eq!(parse_header(b"DTiJ"), Ok(None));

        let mut w = Writer::new(Endian::Big);
        w.buf[4..8].copy_from_slice(&2u32.to_be_bytes());
        let err = parse_header(&w.buf[..8]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported jitdump version 2 (vmscope reads version 1)"
        );

        for size in [0u32, 39, MAX_RECORD_SIZE + 1, u32::MAX] {
            let mut w = Writer::new(Endian::Little);
            w.buf[8..12].copy_from_slice(&size.to_le_bytes());
            assert_eq!(
                parse_header(&w.buf[..12]),
                Err(JitdumpError::BadHeaderSize(size))
            );
        }
        assert_eq!(
            JitdumpError::BadHeaderSize(39).to_string(),
            "jitdump header claims 39 bytes, outside 40 bytes to 16 MiB"
        );

        // A longer header: its extra bytes must be there, and the records start after them.
        let mut w = Writer::new(Endian::Little);
        w.buf[8..12].copy_from_slice(&48u32.to_le_bytes());
        w.buf[32..40].copy_from_slice(&FLAG_ARCH_TIMESTAMP.to_le_bytes());
        w.bytes(b"EXTRAEXT");
        w.record(CODE_CLOSE, 7, false, |_| {});
        assert_eq!(parse_header(&w.buf[..47]), Ok(None));
        let header = parse_header(&w.buf).unwrap().unwrap();
        assert_eq!(header.header_size, 48);
        assert!(header.uses_arch_timestamp());
        let (records, _, err) = read_all(&w.buf);
        assert_eq!((records, err), (vec![Record::Close { timestamp: 7 }], None));
    }

    /// Records with sizes or contents that cannot be right, and the messages they give.
    #[test]
    fn bad_records_table() {
        type Build = fn(&mut Writer);
        let cases: &[(&str, Build, &str)] = &[
            (
                "size 0",
                |w| {
                    w.u32(CODE_CLOSE).u32(0).u64(1);
                },
                "record of type 3 claims 0 bytes, less than its header (16 bytes)",
            ),
            (
                "size 15",
                |w| {
                    w.u32(77).u32(15).u64(1);
                },
                "record of type 77 claims 15 bytes, less than its header (16 bytes)",
            ),
            (
                "size 8",
                |w| {
                    w.u32(CODE_LOAD).u32(8);
                },
                "record of type 0 claims 8 bytes, less than its header (56 bytes)",
            ),
            (
                "load shorter than its fields",
                |w| {
                    w.u32(CODE_LOAD).u32(40).u64(1).bytes(&[0; 24]);
                },
                "record of type 0 claims 40 bytes, less than its header (56 bytes)",
            ),
            (
                "move shorter than its fields",
                |w| {
                    w.u32(CODE_MOVE).u32(56).u64(1).bytes(&[0; 40]);
                },
                "record of type 1 claims 56 bytes, less than its header (64 bytes)",
            ),
            (
                "huge",
                |w| {
                    w.u32(CODE_CLOSE).u32(MAX_RECORD_SIZE + 1);
                },
                "record of type 3 of 16777217 bytes is larger than the 16 MiB limit",
            ),
            (
                "u32::MAX",
                |w| {
                    w.u32(9).u32(u32::MAX);
                },
                "record of type 9 of 4294967295 bytes is larger than the 16 MiB limit",
            ),
            (
                "name without NUL",
                |w| {
                    w.record(CODE_LOAD, 1, false, |w| {
                        w.u32(1).u32(1).u64(0x1000).u64(0x1000).u64(0).u64(0);
                        w.bytes(b"no terminator");
                    });
                },
                "function name has no NUL terminator within its CODE_LOAD record",
            ),
            (
                "code beyond the record",
                |w| {
                    w.record(CODE_LOAD, 1, false, |w| {
                        w.u32(1).u32(1).u64(0x1000).u64(0x1000).u64(100).u64(0);
                        w.cstr("f").bytes(&[0x90; 99]);
                    });
                },
                "CODE_LOAD record of 157 bytes is too small for its 100 bytes of code",
            ),
            (
                "load overflows",
                |w| {
                    w.record(CODE_LOAD, 1, false, |w| {
                        w.u32(1).u32(1).u64(0).u64(u64::MAX - 1).u64(2).u64(0);
                        w.cstr("f").bytes(&[0x90; 2]);
                    });
                },
                "CODE_LOAD record: code at 0xfffffffffffffffe of 2 bytes overflows the address \
                 space",
            ),
            (
                "move overflows",
                |w| {
                    w.record(CODE_MOVE, 1, false, |w| {
                        w.u32(1)
                            .u32(1)
                            .u64(0)
                            .u64(0x1000)
                            .u64(u64::MAX)
                            .u64(1)
                            .u64(0);
                    });
                },
                "CODE_MOVE record: code at 0xffffffffffffffff of 1 bytes overflows the address \
                 space",
            ),
            (
                "hostile nr_entry",
                |w| {
                    w.record(CODE_DEBUG_INFO, 1, false, |w| {
                        w.u64(0x1000).u64(1 << 63);
                        w.u64(0x1000).u32(1).u32(0).cstr("a.js");
                    });
                },
                "CODE_DEBUG_INFO record of 53 bytes is too small for entry 1 of the \
                 9223372036854775808 it claims",
            ),
            (
                "nr_entry one too many, padded",
                |w| {
                    w.record(CODE_DEBUG_INFO, 1, true, |w| {
                        w.u64(0x1000).u64(2);
                        w.u64(0x1000).u32(1).u32(0).cstr("a.js");
                    });
                },
                "CODE_DEBUG_INFO record of 56 bytes is too small for entry 1 of the 2 it claims",
            ),
            (
                "file name without NUL",
                |w| {
                    w.record(CODE_DEBUG_INFO, 1, false, |w| {
                        w.u64(0x1000).u64(1);
                        w.u64(0x1000).u32(1).u32(0).bytes(b"a.js");
                    });
                },
                "file name of debug entry 0 has no NUL terminator within its CODE_DEBUG_INFO \
                 record",
            ),
            (
                "unwind data beyond the record",
                |w| {
                    w.record(CODE_UNWINDING_INFO, 1, false, |w| {
                        w.u64(u64::MAX).u64(20).u64(0).bytes(&[0; 20]);
                    });
                },
                "CODE_UNWINDING_INFO record of 60 bytes is too small for its \
                 18446744073709551615 bytes of unwind data",
            ),
            (
                "eh_frame_hdr larger than the data",
                |w| {
                    w.record(CODE_UNWINDING_INFO, 1, false, |w| {
                        w.u64(8).u64(20).u64(0).bytes(&[0; 8]);
                    });
                },
                "CODE_UNWINDING_INFO record: eh_frame_hdr_size 20 exceeds unwind_data_size 8",
            ),
        ];
        for endian in [Endian::Little, Endian::Big] {
            for (what, build, msg) in cases {
                let mut w = Writer::new(endian);
                w.record(CODE_CLOSE, 0, false, |_| {});
                build(&mut w);
                let (records, _, err) = read_all(&w.buf);
                assert_eq!(records, [Record::Close { timestamp: 0 }], "{what}");
                let err = err.unwrap_or_else(|| panic!("{what}: no error"));
                assert_eq!(err.to_string(), *msg, "{what} {endian:?}");
            }
        }
    }

    /// Sizes at the edges of what is allowed parse, and what follows them too.
    #[test]
    fn edge_sizes_are_fine() {
        let mut w = Writer::new(Endian::Little);
        // An unknown record of just a header, and a close with trailing padding.
        w.u32(1234).u32(16).u64(1);
        w.u32(CODE_CLOSE).u32(24).u64(2).u64(0);
        w.record(CODE_DEBUG_INFO, 3, false, |w| {
            w.u64(0x1000).u64(0);
        });
        w.record(CODE_UNWINDING_INFO, 4, false, |w| {
            w.u64(0).u64(0).u64(0);
        });
        let (records, consumed, err) = read_all(&w.buf);
        assert_eq!((consumed, err), (w.buf.len(), None));
        assert_eq!(
            records,
            [
                Record::Unknown {
                    timestamp: 1,
                    id: 1234
                },
                Record::Close { timestamp: 2 },
                Record::DebugInfo {
                    timestamp: 3,
                    code_addr: 0x1000,
                    entries: vec![]
                },
                Record::UnwindingInfo {
                    timestamp: 4,
                    eh_frame_hdr_size: 0,
                    mapped_size: 0,
                    data: &[]
                },
            ]
        );
        // A record of the maximum size waits for its bytes rather than failing.
        let mut big = Writer::new(Endian::Little);
        big.u32(55).u32(MAX_RECORD_SIZE).u64(9).bytes(&[0; 100]);
        assert_eq!(
            next_record(&big.buf[HEADER_SIZE..], Endian::Little),
            Ok(None)
        );
    }

    /// Mutated streams never panic, and every record found lies within its bytes.
    #[test]
    fn no_panic_on_mutations() {
        let (seed, _) = sample(Endian::Little);
        crate::mutations::for_each_mutation(&seed, 0, 5000, 4, 0x2545_f491_4f6c_dd1d, |t, _| {
            let _ = read_all(t);
        });
    }

    /// A real file from V8, as node writes it with --perf-prof, for a script in a file (whose
    /// name V8 may write from freed memory, see [`reread_debug_info`]).
    #[test]
    fn real_node_jitdump() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("f.js");
        std::fs::write(
            &script,
            "function f(n){let s=0;for(let i=0;i<n;i++)s+=i;return s}\n\
             for(let i=0;i<2000;i++)f(1000)\n",
        )
        .unwrap();
        let script = script.to_str().unwrap();
        let status = std::process::Command::new("/usr/bin/node")
            .args(["--perf-prof", "--perf-prof-unwinding-info", script])
            .current_dir(dir.path())
            .status()
            .unwrap_or_else(|e| {
                panic!("cannot run /usr/bin/node ({e}): node is part of the test machine")
            });
        assert!(status.success(), "node failed: {status}");
        let path = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("jit-") && n.ends_with(".dump"))
            })
            .expect("node wrote no jit-PID.dump");
        let bytes = std::fs::read(&path).unwrap();
        let header = parse_header(&bytes).unwrap().unwrap();
        assert_eq!(header.endian, Endian::Little);
        let (records, consumed, err) = read_all(&bytes);
        assert_eq!(err, None);
        assert_eq!(
            consumed,
            bytes.len(),
            "trailing bytes in {}",
            path.display()
        );
        let loads: Vec<_> = records
            .iter()
            .filter_map(|r| match r {
                Record::CodeLoad {
                    name, code_addr, ..
                } => Some((name.to_string(), *code_addr)),
                _ => None,
            })
            .collect();
        assert!(loads.len() > 100, "{} loads", loads.len());
        assert!(
            loads
                .iter()
                .any(|(name, _)| name.starts_with("JS:") && name.contains(&format!("f {script}:"))),
            "no load of f"
        );
        let debug_records = records
            .iter()
            .filter(|r| matches!(r, Record::DebugInfo { .. }))
            .count();
        assert!(debug_records > 0, "no CODE_DEBUG_INFO");
        assert!(
            records
                .iter()
                .any(|r| matches!(r, Record::UnwindingInfo { data, .. } if !data.is_empty())),
            "no CODE_UNWINDING_INFO"
        );
        // Each debug record describes a load that follows it. Read with the length of the
        // script named by the load, every record fits, and V8 puts its addresses 0x40 past the
        // code (where `perf inject` puts the code, after an ELF header).
        let mut at = header.header_size as usize;
        let mut debug: Option<(u64, &[u8])> = None;
        let mut reread = 0;
        while let Ok(Some((record, used))) = next_record(&bytes[at..], header.endian) {
            match record {
                Record::DebugInfo { code_addr, .. } => {
                    debug = Some((code_addr, &bytes[at..at + used]))
                }
                Record::CodeLoad {
                    code_addr,
                    code_size,
                    name,
                    ..
                } if debug.is_some_and(|(a, _)| a == code_addr) => {
                    let (_, raw) = debug.take().unwrap();
                    let path = name
                        .rsplit(' ')
                        .next()
                        .unwrap()
                        .rsplitn(3, ':')
                        .nth(2)
                        .unwrap();
                    let entries = reread_debug_info(raw, header.endian, path.len())
                        .unwrap_or_else(|| panic!("{name}: does not read by its script's length"));
                    for e in entries {
                        assert!(
                            (code_addr + 0x40..=code_addr + 0x40 + code_size).contains(&e.addr),
                            "{e:?} outside the code {code_addr:#x} of {code_size} bytes (+0x40)"
                        );
                    }
                    reread += 1;
                }
                _ => {}
            }
            at += used;
        }
        assert_eq!(
            reread, debug_records,
            "every debug record precedes its load"
        );
    }
}
