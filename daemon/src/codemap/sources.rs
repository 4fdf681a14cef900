//! Reading code maps from files as they grow: perf maps, jitdump files, and vmscope code map
//! files. The I/O edge of [`super`]: bytes come from here, meaning from the pure parsers of
//! `vmscope-parse`.
//!
//! Each source keeps its file open from the moment it is found, reads only what was appended
//! since the last read, and keeps an incomplete last record for the next read. Holding the file
//! lets the daemon read it once more after the process exited, when `/proc/PID` is gone.
//!
//! Files read on a process's behalf must belong to the process's user and are opened without
//! following symlinks or blocking (a FIFO in /tmp must not hang the daemon). Anything refused is
//! counted with a reason; a source that turns out to be broken stops being read, with the
//! reason logged, and never affects the others.

use std::{
    collections::HashSet,
    fs::File,
    io::{self, Read, Seek, SeekFrom},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use vmscope_model::CodeKind;
use vmscope_parse::{
    codemap_file, jitdump,
    perf_map::{self, PerfMapEntry},
};

use super::{
    code::{Code, CodeSource, CodeStore, SourcePoint},
    outside::Outside,
    refusals::{Reason, Refusals},
    timeline::Change,
    vm::{Accepted, Publication},
};
use crate::{
    stats::vm::StatEvent,
    sys,
    vocab::{CodeId, ExecRanges},
};

/// Largest perf map read: about 750,000 entries (a JVM with 10,000 compiled methods writes
/// half a MiB). A bigger one is refused, with its reason counted, rather than read for seconds
/// on behalf of one process (a sparse file of 50 GB costs nothing to make).
pub const MAX_PERF_MAP_BYTES: u64 = 64 << 20;

/// Largest jitdump or code map file read: these grow for the life of the process, records
/// with debug info and pc maps included. Beyond it the file is read no more (counted).
pub const MAX_LOG_FILE_BYTES: u64 = 1 << 30;

/// Which address ranges are executable in the process (see [`ExecRanges`]).
pub type ExecCheck<'a> = &'a mut dyn ExecRanges;

/// Counters of one source; what it refused is in its [`Refusals`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceCounters {
    /// Entries or records turned into changes.
    pub accepted: u64,
    /// Of them, entries held outside the executable mappings at first, accepted at a later
    /// read once their code was mapped.
    pub mapped_late: u64,
    /// Bytes read.
    pub bytes: u64,
}

/// A file read as it grows.
#[derive(Debug)]
struct Growing {
    file: File,
    /// Largest size read.
    limit: u64,
    /// Offset of the first byte not read yet.
    offset: u64,
    /// Bytes read but not consumed (an incomplete last record).
    pending: Vec<u8>,
    /// Whether the last read reached the end of the file: an incomplete record left then is
    /// the writer's, not the read budget's.
    at_end: bool,
}

/// Why a growing file could not be read.
#[derive(Debug, thiserror::Error)]
enum GrowingError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("the file is {len} bytes, over the {limit}-byte limit")]
    TooLarge { len: u64, limit: u64 },
}

impl Growing {
    fn new(file: File, limit: u64) -> Growing {
        Growing {
            file,
            limit,
            offset: 0,
            pending: Vec::new(),
            at_end: false,
        }
    }

    /// Reads what was appended, at most `budget` bytes (taken from it), and hands over the
    /// bytes not consumed yet (taken, not copied, so that the source can parse them while
    /// updating its other fields), with whether the end of the file was reached. What the
    /// caller does not consume goes back through [`Growing::put_back`].
    fn take_more(&mut self, budget: &mut u64) -> Result<(Vec<u8>, bool), GrowingError> {
        let len = self.file.metadata()?.len();
        if len > self.limit {
            return Err(GrowingError::TooLarge {
                len,
                limit: self.limit,
            });
        }
        let available = len.saturating_sub(self.offset);
        let take = available.min(*budget) as usize;
        if take > 0 {
            self.file.seek(SeekFrom::Start(self.offset))?;
            let start = self.pending.len();
            self.pending.resize(start + take, 0);
            let n = read_fully(&mut self.file, &mut self.pending[start..])?;
            self.pending.truncate(start + n);
            self.offset += n as u64;
            *budget -= n as u64;
        }
        self.at_end = self.offset >= len;
        Ok((std::mem::take(&mut self.pending), self.at_end))
    }

    /// Gives back the bytes [`Growing::take_more`] handed over, of which `consumed` were used.
    fn put_back(&mut self, mut bytes: Vec<u8>, consumed: usize) {
        bytes.drain(..consumed.min(bytes.len()));
        self.pending = bytes;
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
}

/// [`Growing::take_more`] for a source called `name`: a file over its size limit is refused
/// (counted), and either error ends the source with the returned reason.
fn take_more(
    growing: &mut Growing,
    budget: &mut u64,
    name: &str,
    refusals: &mut Refusals,
) -> Result<(Vec<u8>, bool), String> {
    growing.take_more(budget).map_err(|e| {
        let why = format!("cannot read {name}: {e}");
        if let GrowingError::TooLarge { .. } = e {
            refusals.refuse(Reason::TooLarge, 1, || why.clone());
        }
        why
    })
}

fn read_fully(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read(&mut buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Refuses a file another user could have written.
fn check_owner(file: &File, path: &Path, uid: u32) -> Result<(), String> {
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
    if meta.uid() != uid {
        return Err(format!(
            "{} belongs to uid {}, not to the process's uid {uid}: not trusted",
            path.display(),
            meta.uid()
        ));
    }
    Ok(())
}

/// A perf map, `/tmp/perf-PID.map` as the process sees its /tmp.
///
/// Perf maps carry no timestamps: an entry counts from the moment the daemon read it, the
/// first read included (at the start of a session, or at the process's first sample in
/// generated code). Samples taken before, that nothing else explained, may still be named by
/// the map as a later snapshot (see [`super::registry`]), marked as such.
/// Appended lines are read incrementally; a file rewritten as a whole (shorter, another file at
/// the path, a different first line, or different bytes where the last read ended) is a new
/// snapshot, which replaces every entry of the old one.
#[derive(Debug)]
pub struct PerfMapSource {
    path: PathBuf,
    uid: u32,
    growing: Growing,
    inode: u64,
    first_line: Vec<u8>,
    /// Carries an over-long line's state from one read to the next.
    reader: perf_map::PerfMapReader,
    codes: Vec<CodeId>,
    /// The last bytes read, to tell a file rewritten in place (HotSpot truncates and rewrites
    /// its map) from one that grew.
    tail: Vec<u8>,
    /// Read again from the start at the next read, as a new snapshot.
    reread: bool,
    /// When a read last changed the entries (0: never).
    pub changed_ns: u64,
    /// Entries outside the executable mappings known when they were read, checked again at
    /// each read.
    outside: Outside<PerfMapEntry>,
    /// Counters.
    pub counters: SourceCounters,
    /// What it refused, by reason.
    pub refusals: Refusals,
}

impl PerfMapSource {
    /// Whether its last read stopped short of the file's end (for want of budget).
    pub fn behind(&self) -> bool {
        !self.growing.at_end
    }

    /// The perf map of a process (`/proc/PID/root/tmp/perf-NSPID.map`), if it has one. With
    /// `root`, the process's root directory held open ([`sys::open_process_root`]), it is
    /// found there even once the process is gone (a map written at exit).
    pub fn open(
        pid: u32,
        nspid: u32,
        uid: u32,
        root: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> Result<Option<PerfMapSource>, String> {
        let path = PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{nspid}.map"));
        let opened = match root {
            Some(root) => {
                sys::open_untrusted_in_root(root, Path::new(&format!("tmp/perf-{nspid}.map")))
            }
            None => sys::open_untrusted(&path, None),
        };
        let file = match opened {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::EXDEV)) => {
                return Err(format!("{} is a symlink: not followed", path.display()));
            }
            Err(e) => return Err(format!("cannot open {}: {e}", path.display())),
        };
        check_owner(&file, &path, uid)?;
        let inode = file.metadata().map(|m| m.ino()).unwrap_or(0);
        Ok(Some(PerfMapSource {
            uid,
            growing: Growing::new(file, MAX_PERF_MAP_BYTES),
            inode,
            first_line: Vec::new(),
            reader: perf_map::PerfMapReader::new(),
            codes: Vec::new(),
            tail: Vec::new(),
            reread: false,
            changed_ns: 0,
            outside: Outside::default(),
            counters: SourceCounters::default(),
            refusals: Refusals::new(pid, format!("perf map {}", path.display())),
            path,
        }))
    }

    /// Whether the file was rewritten since the last read: then it is read again from the
    /// start, as a new snapshot.
    fn rewritten(&mut self) -> bool {
        if std::mem::take(&mut self.reread) {
            return true;
        }
        let mut tail = vec![0u8; self.tail.len()];
        let changed_tail = !self.tail.is_empty()
            && (self
                .growing
                .file
                .seek(SeekFrom::Start(
                    self.growing.offset - self.tail.len() as u64,
                ))
                .is_err()
                || read_fully(&mut self.growing.file, &mut tail)
                    .map_or(true, |n| n < tail.len() || tail != self.tail));
        let shrunk = self
            .growing
            .len()
            .is_ok_and(|len| len < self.growing.offset);
        let replaced = std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() != self.inode);
        let mut head = vec![0u8; self.first_line.len()];
        let changed_head = !self.first_line.is_empty()
            && (self.growing.file.seek(SeekFrom::Start(0)).is_err()
                || read_fully(&mut self.growing.file, &mut head)
                    .map_or(true, |n| n < head.len() || head != self.first_line));
        shrunk || replaced || changed_head || changed_tail
    }

    /// Makes the next read take the whole file as a new snapshot: its writer said it rewrote
    /// it (HotSpot answered `Compiler.perfmap`).
    pub fn reread(&mut self) {
        self.reread = true;
    }

    /// Reads new entries, at most `budget` bytes (taken from it); `now_ns` is their time.
    /// `check` says which addresses are executable. Entries outside them are held and checked
    /// again at each read (see [`super::outside`]), until the `final_read` at the process's
    /// exit refuses what still does not fit.
    pub fn read(
        &mut self,
        now_ns: u64,
        store: &CodeStore,
        check: ExecCheck<'_>,
        final_read: bool,
        budget: &mut u64,
    ) -> Result<Vec<(u64, Change)>, String> {
        let mut changes = Vec::new();
        if self.rewritten() {
            // A snapshot: forget the old one, and read what is at the path now. Something that
            // may not be read (a symlink, another user's file) ends the source: reading the old
            // file again would make every read a new snapshot.
            let file = sys::open_untrusted(&self.path, None).map_err(|e| {
                format!(
                    "{} was replaced and cannot be read: {e}",
                    self.path.display()
                )
            })?;
            check_owner(&file, &self.path, self.uid)?;
            self.inode = file.metadata().map(|m| m.ino()).unwrap_or(0);
            self.growing = Growing::new(file, MAX_PERF_MAP_BYTES);
            self.reader = perf_map::PerfMapReader::new();
            self.first_line.clear();
            self.tail.clear();
            self.outside.give_up(&mut self.refusals);
            changes.push((now_ns, Change::FreeCodes(std::mem::take(&mut self.codes))));
        }
        // Held entries first: the file's newer lines, read below, win over them.
        for (when, entry) in self
            .outside
            .release(|start, end| check.known_to_contain(start, end))
        {
            self.counters.mapped_late += 1;
            self.load(when, entry, store, &mut changes);
        }
        let name = self.path.display().to_string();
        let (bytes, at_eof) = take_more(&mut self.growing, budget, &name, &mut self.refusals)?;
        if self.first_line.is_empty()
            && let Some(end) = bytes.iter().position(|&b| b == b'\n')
        {
            self.first_line = bytes[..end.min(256)].to_vec();
        }
        // What was read ends the file as far as the daemon knows: kept to see it rewritten.
        let read_end = bytes.len();
        let keep = read_end.min(64);
        if keep > 0 {
            self.tail.clear();
            self.tail.extend_from_slice(&bytes[read_end - keep..]);
        }
        let chunk = self.reader.parse(&bytes, at_eof && final_read);
        let consumed = chunk.consumed;
        self.counters.bytes += chunk.consumed as u64;
        let first_error = chunk.first_error.as_deref().unwrap_or("unreadable line");
        self.refusals
            .refuse(Reason::Malformed, chunk.bad_lines as u64, || {
                first_error.to_owned()
            });
        for entry in chunk.entries {
            let end = entry.end();
            if !check.contains(entry.start, end) {
                let example = format!("{} at {:#x}", entry.name, entry.start);
                let start = entry.start;
                self.outside
                    .hold(now_ns, start, end, entry, || example, &mut self.refusals);
                continue;
            }
            self.outside.supersede(entry.start, end);
            self.load(now_ns, entry, store, &mut changes);
        }
        self.growing.put_back(bytes, consumed);
        if final_read && at_eof {
            // The process is gone: nothing will map what is still outside.
            self.outside.give_up(&mut self.refusals);
        }
        if !changes.is_empty() {
            self.changed_ns = now_ns;
        }
        Ok(changes)
    }

    /// Entries held outside the executable mappings, waiting for a later read.
    pub fn held(&self) -> usize {
        self.outside.len()
    }

    /// Gives up on the held entries, refused: the source is let go.
    pub fn give_up_held(&mut self) {
        self.outside.give_up(&mut self.refusals);
    }

    /// Interns `entry` and loads it at `when`.
    fn load(
        &mut self,
        when: u64,
        entry: PerfMapEntry,
        store: &CodeStore,
        changes: &mut Vec<(u64, Change)>,
    ) {
        let PerfMapEntry { start, size, name } = entry;
        let code = match store.intern(
            Code::named(perf_map_kind(&name), name, CodeSource::PerfMap),
            self.uid,
        ) {
            Ok(code) => code,
            Err(full) => {
                self.refusals
                    .refuse(Reason::StoreFull, 1, || full.to_string());
                return;
            }
        };
        self.codes.push(code);
        self.counters.accepted += 1;
        changes.push((
            when,
            Change::Load {
                start,
                size: Some(size),
                code,
            },
        ));
    }
}

/// The kind of a perf map entry, from the conventions of the runtimes that write them.
fn perf_map_kind(name: &str) -> CodeKind {
    let stub_prefixes = [
        "Builtin:",
        "BytecodeHandler:",
        "Stub:",
        "RegExp:",
        "Interpreter",
    ];
    if stub_prefixes.iter().any(|p| name.starts_with(p)) {
        CodeKind::Stub
    } else {
        CodeKind::Unknown
    }
}

/// One debug info entry of a jitdump file: address, file, line, column.
type DebugPoint = (u64, Arc<str>, u32, u32);

/// A jitdump file (Linux perf's format, written by `node --perf-prof`, JVM agents, ...),
/// found through its executable mapping.
#[derive(Debug)]
pub struct JitdumpSource {
    name: String,
    growing: Growing,
    header: Option<jitdump::JitdumpHeader>,
    /// The debug info record waiting for its CODE_LOAD (code address, the record's bytes):
    /// the record comes right before the load it describes, so one is kept, not a pile of
    /// unclaimed ones. Its entries are read with the load, whose name may say how long their
    /// file names are (see [`JitdumpSource::debug_points`]).
    debug_info: Option<(u64, Vec<u8>)>,
    /// Source file names, shared by every point that names them.
    file_names: HashSet<Arc<str>>,
    /// Debug entries whose file name was unreadable and was taken from the code's name.
    pub repaired_file_names: u64,
    /// Unwinding info records seen (kept for stack unwinding, a later capability).
    pub unwinding_records: u64,
    /// Timestamp of the latest record read: the file is known up to here. Writers buffer
    /// (V8 through a 2 MB stdio buffer), so a read does not make it known up to the read.
    pub last_ns: u64,
    /// Loads and moves of code outside the executable mappings known when they were read,
    /// checked again at each read.
    outside: Outside<HeldRecord>,
    /// Counters.
    pub counters: SourceCounters,
    /// Set when the file turned out to be broken: it is read no more.
    pub broken: Broken,
    /// What it refused, by reason.
    pub refusals: Refusals,
    /// Whether timestamps are usable (CLOCK_MONOTONIC, not TSC).
    clock_ok: bool,
    /// The file's owner, whose codes these are.
    uid: u32,
}

/// Why a file source stopped being read, if it did, and whether the registry has been told:
/// a broken file is counted and logged once, then left alone.
#[derive(Debug, Default)]
pub struct Broken {
    reason: Option<String>,
    news: bool,
}

impl Broken {
    /// Whether the source is broken.
    pub fn is_broken(&self) -> bool {
        self.reason.is_some()
    }

    fn set(&mut self, reason: String) {
        self.reason = Some(reason);
        self.news = true;
    }

    /// The reason, the first time it is asked for after the source broke.
    fn take_news(&mut self) -> Option<String> {
        std::mem::take(&mut self.news)
            .then(|| self.reason.clone())
            .flatten()
    }
}

/// Distinct source file names a jitdump source shares between its codes; past it (a hostile
/// file naming a new file at every point), names are no longer shared.
const MAX_SHARED_FILE_NAMES: usize = 100_000;

/// jitdump header flag: timestamps are the CPU's timestamp counter, not CLOCK_MONOTONIC.
const JITDUMP_FLAGS_ARCH_TIMESTAMP: u64 = 1;

impl JitdumpSource {
    /// Whether its last read stopped short of the file's end (for want of budget).
    pub fn behind(&self) -> bool {
        !self.growing.at_end
    }

    /// A jitdump file of process `pid` opened through its mapping of it, checked to be the
    /// user's.
    pub fn new(file: File, path: &Path, pid: u32, uid: u32) -> Result<JitdumpSource, String> {
        check_owner(&file, path, uid)?;
        Ok(JitdumpSource {
            name: path.display().to_string(),
            growing: Growing::new(file, MAX_LOG_FILE_BYTES),
            header: None,
            debug_info: None,
            file_names: HashSet::new(),
            repaired_file_names: 0,
            unwinding_records: 0,
            last_ns: 0,
            outside: Outside::default(),
            counters: SourceCounters::default(),
            broken: Broken::default(),
            refusals: Refusals::new(pid, format!("jitdump {}", path.display())),
            clock_ok: true,
            uid,
        })
    }

    /// Reads new records, at most `budget` bytes (taken from it). Records carry their own
    /// times; `now_ns` stands in when the writer's clock is not CLOCK_MONOTONIC. On the
    /// `final_read` (the process exited), what cannot be read any more is reported.
    pub fn read(
        &mut self,
        now_ns: u64,
        store: &CodeStore,
        check: ExecCheck<'_>,
        final_read: bool,
        budget: &mut u64,
    ) -> Vec<(u64, Change)> {
        let mut changes = Vec::new();
        if self.broken.is_broken() {
            return changes;
        }
        for (when, held) in self
            .outside
            .release(|start, end| check.known_to_contain(start, end))
        {
            self.counters.mapped_late += 1;
            self.accept(when, held, store, &mut changes);
        }
        if let Err(e) = self.read_records(now_ns, store, check, &mut changes, budget) {
            self.broken.set(e);
            return changes;
        }
        if final_read && self.growing.at_end {
            // The process is gone: nothing will map what is still outside.
            self.outside.give_up(&mut self.refusals);
        }
        let left = self.growing.pending.len();
        if final_read && self.growing.at_end && left > 0 {
            if self.header.is_none() {
                self.broken.set(format!(
                    "{}: the file ends in its header ({left} of 40 bytes)",
                    self.name
                ));
            } else {
                self.refuse(Reason::Truncated, || {
                    format!("{left} bytes of a record left over")
                });
                self.growing.pending.clear();
            }
        }
        changes
    }

    /// Why the file stopped being read, reported once.
    pub fn take_failure(&mut self) -> Option<String> {
        self.broken.take_news()
    }

    /// Records held outside the executable mappings, waiting for a later read.
    pub fn held(&self) -> usize {
        self.outside.len()
    }

    /// Gives up on the held records, refused: the source is let go.
    pub fn give_up_held(&mut self) {
        self.outside.give_up(&mut self.refusals);
    }

    /// Turns a load or move whose code is inside an executable mapping into a change at `when`.
    fn accept(
        &mut self,
        when: u64,
        record: HeldRecord,
        store: &CodeStore,
        changes: &mut Vec<(u64, Change)>,
    ) {
        let change = match record {
            HeldRecord::Load { start, size, code } => match store.intern(code, self.uid) {
                Ok(code) => Change::Load {
                    start,
                    size: Some(size),
                    code,
                },
                Err(full) => return self.refuse(Reason::StoreFull, || full.to_string()),
            },
            HeldRecord::Move { from, to } => Change::Move { from, to },
        };
        self.counters.accepted += 1;
        changes.push((when, change));
    }

    /// Accepts `record` for code at `range` if it is inside an executable mapping, else holds
    /// it for the next reads.
    fn check_and_accept(
        &mut self,
        when: u64,
        (start, end): (u64, u64),
        record: HeldRecord,
        store: &CodeStore,
        check: ExecCheck<'_>,
        changes: &mut Vec<(u64, Change)>,
    ) {
        if check.contains(start, end) {
            self.accept(when, record, store, changes);
            return;
        }
        let example = match &record {
            HeldRecord::Load { code, size, .. } => {
                format!("{} at {start:#x}, {size} bytes", code.name)
            }
            HeldRecord::Move { .. } => format!("code moved to {start:#x}"),
        };
        self.outside
            .hold(when, start, end, record, || example, &mut self.refusals);
    }

    fn read_records(
        &mut self,
        now_ns: u64,
        store: &CodeStore,
        check: ExecCheck<'_>,
        changes: &mut Vec<(u64, Change)>,
        budget: &mut u64,
    ) -> Result<(), String> {
        let name = self.name.clone();
        let (bytes, _) = take_more(&mut self.growing, budget, &name, &mut self.refusals)?;
        let mut at = 0;
        if self.header.is_none() {
            match jitdump::parse_header(&bytes).map_err(|e| format!("{name}: {e}"))? {
                None => {
                    self.growing.put_back(bytes, 0);
                    return Ok(());
                }
                Some(header) => {
                    at = header.header_size as usize;
                    if at > bytes.len() {
                        self.growing.put_back(bytes, 0);
                        return Ok(());
                    }
                    self.clock_ok = header.flags & JITDUMP_FLAGS_ARCH_TIMESTAMP == 0;
                    if !self.clock_ok {
                        tracing::warn!(file = %name, "jitdump timestamps are TSC cycles: using read times");
                    }
                    self.header = Some(header);
                }
            }
        }
        let endian = self.header.as_ref().map(|h| h.endian).expect("set above");
        while let Some((record, used)) =
            jitdump::next_record(&bytes[at..], endian).map_err(|e| format!("{name}: {e}"))?
        {
            let raw = &bytes[at..at + used];
            at += used;
            self.counters.bytes += used as u64;
            self.last_ns = self.last_ns.max(self.time(record.timestamp(), now_ns));
            self.apply(record, raw, now_ns, store, check, changes);
        }
        self.growing.put_back(bytes, at);
        Ok(())
    }

    /// The entries of debug info record `raw`, each with its file, for a code whose V8 name
    /// names `script` (if it does).
    ///
    /// V8 writes the script of the function for every entry, and sometimes from freed memory
    /// (see [`jitdump::reread_debug_info`]): its name's length, from the code's name, reads the
    /// record right, and the code's name is the file. Other writers' names are taken as written,
    /// [`jitdump::REPEATED_FILE_NAME`] as the previous entry's, and a garbled one as `script`.
    fn debug_points(&mut self, raw: &[u8], script: Option<&str>) -> Vec<DebugPoint> {
        let Some(endian) = self.header.as_ref().map(|h| h.endian) else {
            return Vec::new();
        };
        let file_names = &mut self.file_names;
        let mut shared = |name: &str| -> Arc<str> {
            if let Some(known) = file_names.get(name) {
                return known.clone();
            }
            let name = Arc::<str>::from(name);
            if file_names.len() < MAX_SHARED_FILE_NAMES {
                file_names.insert(name.clone());
            }
            name
        };
        let script = script.map(&mut shared);
        if let Some(script) = &script
            && let Some(entries) = jitdump::reread_debug_info(raw, endian, script.len())
        {
            self.repaired_file_names += entries
                .iter()
                .filter(|e| e.file != jitdump::REPEATED_FILE_NAME && e.file != script.as_bytes())
                .count() as u64;
            return entries
                .iter()
                .map(|e| (e.addr, script.clone(), e.line, e.discrim))
                .collect();
        }
        let Ok(Some((jitdump::Record::DebugInfo { entries, .. }, _))) =
            jitdump::next_record(raw, endian)
        else {
            return Vec::new();
        };
        let mut points: Vec<DebugPoint> = Vec::with_capacity(entries.len());
        for e in entries {
            let previous = points.last().map(|p| &p.1);
            let file = match (previous, &script, e.file_str()) {
                (Some(previous), ..) if e.file == jitdump::REPEATED_FILE_NAME => previous.clone(),
                (_, _, Some(file)) if names_a_file(file) => shared(file),
                (_, Some(script), _) => {
                    self.repaired_file_names += 1;
                    script.clone()
                }
                (_, None, Some(file)) => shared(file),
                (_, None, None) => shared("?"),
            };
            points.push((e.addr, file, e.line, e.discrim));
        }
        points
    }

    fn time(&self, record_ns: u64, now_ns: u64) -> u64 {
        if self.clock_ok { record_ns } else { now_ns }
    }

    fn refuse(&mut self, reason: Reason, example: impl FnOnce() -> String) {
        self.refusals.refuse(reason, 1, example);
    }

    /// Applies one `record`, whose bytes are `raw`.
    fn apply(
        &mut self,
        record: jitdump::Record<'_>,
        raw: &[u8],
        now_ns: u64,
        store: &CodeStore,
        check: ExecCheck<'_>,
        changes: &mut Vec<(u64, Change)>,
    ) {
        use jitdump::Record;
        match record {
            Record::DebugInfo { code_addr, .. } => {
                self.debug_info = Some((code_addr, raw.to_vec()));
            }
            Record::CodeLoad {
                timestamp,
                code_addr,
                code_size,
                name,
                name_is_utf8,
                ..
            } => {
                let end = code_addr.saturating_add(code_size);
                let script = v8_script_path(&name);
                let debug = match self.debug_info.take() {
                    Some((addr, raw)) if addr == code_addr => self.debug_points(&raw, script),
                    _ => Vec::new(),
                };
                if !name_is_utf8 {
                    self.refuse(Reason::NotUtf8, || format!("{name:?} at {code_addr:#x}"));
                    return;
                }
                if code_size == 0 {
                    self.refuse(Reason::OutsideExecutable, || {
                        format!("{name} at {code_addr:#x}, {code_size} bytes")
                    });
                    return;
                }
                let shift = debug_address_shift(&debug, code_addr, end);
                let mut lines = Vec::new();
                for (addr, file, line, column) in debug {
                    let addr = addr.wrapping_sub(shift);
                    if addr < code_addr || addr >= end {
                        self.refuse(Reason::DebugInfoOutsideCode, || {
                            format!("{name}: {addr:#x} outside [{code_addr:#x}, {end:#x})")
                        });
                        continue;
                    }
                    lines.push(SourcePoint {
                        offset: addr - code_addr,
                        file,
                        line,
                        column,
                    });
                }
                lines.sort_by_key(|p| p.offset);
                lines.dedup_by_key(|p| p.offset);
                let code = Code {
                    lines,
                    ..Code::named(perf_map_kind(&name), name.into_owned(), CodeSource::Jitdump)
                };
                let held = HeldRecord::Load {
                    start: code_addr,
                    size: code_size,
                    code,
                };
                self.check_and_accept(
                    self.time(timestamp, now_ns),
                    (code_addr, end),
                    held,
                    store,
                    check,
                    changes,
                );
            }
            Record::CodeMove {
                timestamp,
                old_code_addr,
                new_code_addr,
                code_size,
                ..
            } => {
                let held = HeldRecord::Move {
                    from: old_code_addr,
                    to: new_code_addr,
                };
                let range = (new_code_addr, new_code_addr.saturating_add(code_size));
                self.check_and_accept(
                    self.time(timestamp, now_ns),
                    range,
                    held,
                    store,
                    check,
                    changes,
                );
            }
            Record::UnwindingInfo { .. } => self.unwinding_records += 1,
            Record::Close { .. } | Record::Unknown { .. } => {}
        }
    }
}

/// A jitdump load or move, held while its code is outside the executable mappings known.
#[derive(Debug)]
enum HeldRecord {
    /// Code loaded at `start` (interned once it fits).
    Load { start: u64, size: u64, code: Code },
    /// Code moved from `from` to `to`.
    Move { from: u64, to: u64 },
}

/// How far past the code a writer put its debug addresses: V8 and LLVM add 0x40 (the ELF header
/// `perf inject` puts before the code), perf's JVMTI agent does not. Told by the entries: some
/// past the code's end by less than 0x40, or the first exactly 0x40 in.
fn debug_address_shift(entries: &[DebugPoint], start: u64, end: u64) -> u64 {
    const ELF_HEADER: u64 = 0x40;
    let past_end = entries
        .iter()
        .any(|(a, ..)| *a >= end && *a < end.saturating_add(ELF_HEADER));
    let first_at_header = entries
        .iter()
        .map(|(a, ..)| *a)
        .min()
        .is_some_and(|a| a == start + ELF_HEADER);
    let all_after_header = entries
        .iter()
        .all(|(a, ..)| *a >= start.saturating_add(ELF_HEADER));
    if all_after_header && (past_end || first_at_header) {
        ELF_HEADER
    } else {
        0
    }
}

/// Whether a debug entry's file name can be one: a path, a URL or a file name with an
/// extension. V8 sometimes writes bytes of freed memory there (`Bc`); the code's own script,
/// from its name, is then the better guess.
fn names_a_file(name: &str) -> bool {
    name.contains(['/', '.', ':'])
}

/// The script of a V8 code name (`JS:*hotLoop /srv/app.js:3:17` -> `/srv/app.js`): the file
/// of every debug entry V8 writes for that code.
fn v8_script_path(name: &str) -> Option<&str> {
    let location = name.rsplit(' ').next().filter(|l| *l != name)?;
    let mut parts = location.rsplitn(3, ':');
    let (column, line, path) = (parts.next()?, parts.next()?, parts.next()?);
    (column.parse::<u32>().is_ok() && line.parse::<u32>().is_ok() && !path.is_empty())
        .then_some(path)
}

/// A vmscope code map file (`vmscope-PID.codemap`), found through its executable mapping.
#[derive(Debug)]
pub struct CodeMapFileSource {
    name: String,
    growing: Growing,
    header_read: bool,
    /// The publication's state (VM name, what it accepted...).
    pub publication: Publication,
    /// Set when the file turned out to be broken: it is read no more.
    pub broken: Broken,
    /// What it refused, by reason.
    pub refusals: Refusals,
    /// The VM's statistics read since [`CodeMapFileSource::take_stats`].
    stats: Vec<(u64, StatEvent)>,
}

impl CodeMapFileSource {
    /// Whether its last read stopped short of the file's end (for want of budget).
    pub fn behind(&self) -> bool {
        !self.growing.at_end
    }

    /// A code map file of process `pid` opened through its mapping of it, checked to be the
    /// user's.
    pub fn new(file: File, path: &Path, pid: u32, uid: u32) -> Result<CodeMapFileSource, String> {
        check_owner(&file, path, uid)?;
        Ok(CodeMapFileSource {
            name: path.display().to_string(),
            growing: Growing::new(file, MAX_LOG_FILE_BYTES),
            header_read: false,
            publication: Publication::owned_by(uid),
            broken: Broken::default(),
            refusals: Refusals::new(pid, format!("code map file {}", path.display())),
            stats: Vec::new(),
        })
    }

    /// The VM's statistics read since last time, in the file's order.
    pub fn take_stats(&mut self) -> Vec<(u64, StatEvent)> {
        std::mem::take(&mut self.stats)
    }

    /// Reads new events, at most `budget` bytes (taken from it). On the `final_read` (the
    /// process exited), an incomplete last record is reported.
    pub fn read(
        &mut self,
        store: &CodeStore,
        final_read: bool,
        budget: &mut u64,
    ) -> Vec<(u64, Change)> {
        let mut changes = Vec::new();
        if self.broken.is_broken() {
            return changes;
        }
        if let Err(e) = self.read_events(store, &mut changes, budget) {
            self.broken.set(e);
            self.close();
            return changes;
        }
        let left = self.growing.pending.len();
        if final_read && self.growing.at_end {
            if left > 0 {
                self.broken.set(format!(
                    "{}: the file ends in the middle of a record ({left} bytes left over)",
                    self.name
                ));
            }
            self.close();
        }
        changes
    }

    /// The publication is over (the process exited, or the file broke): the intervals it left
    /// open end at the time it was known up to, counted as refused.
    fn close(&mut self) {
        let ends = self.publication.close();
        if !ends.is_empty() {
            let n = ends.len();
            self.refusals.refuse(Reason::Unmatched, n as u64, || {
                format!("{n} intervals still open when the file ended: ended then")
            });
            self.stats.extend(ends);
        }
    }

    /// Why the file stopped being read, reported once.
    pub fn take_failure(&mut self) -> Option<String> {
        self.broken.take_news()
    }

    /// Up to when the file tells the map: its latest event or `Sync` (a VM that buffers its
    /// writes is known no further than what it wrote).
    pub fn known_until(&self) -> u64 {
        self.publication.until_ns
    }

    fn read_events(
        &mut self,
        store: &CodeStore,
        changes: &mut Vec<(u64, Change)>,
        budget: &mut u64,
    ) -> Result<(), String> {
        let name = self.name.clone();
        let (bytes, _) = take_more(&mut self.growing, budget, &name, &mut self.refusals)?;
        let mut at = 0;
        if !self.header_read {
            match codemap_file::parse_header(&bytes).map_err(|e| format!("{name}: {e}"))? {
                None => {
                    self.growing.put_back(bytes, 0);
                    return Ok(());
                }
                Some(len) => {
                    at = len;
                    self.header_read = true;
                }
            }
        }
        while let Some((event, used)) =
            codemap_file::next_event(&bytes[at..]).map_err(|e| format!("{name}: {e}"))?
        {
            at += used;
            match self.publication.accept(&event, store) {
                Ok(Accepted::Change(ts, change)) => changes.push((ts, change)),
                Ok(Accepted::Stat(ts, stat)) => self.stats.push((ts, stat)),
                Ok(Accepted::Nothing) => {}
                Err(refused) => self.refusals.refuse(refused.reason, 1, || refused.problem),
            }
        }
        self.growing.put_back(bytes, at);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::{io::Write, os::unix::fs::PermissionsExt};

    use super::*;

    fn uid() -> u32 {
        sys::effective_uid()
    }

    fn loads(changes: &[(u64, Change)], store: &CodeStore) -> Vec<(u64, u64, String)> {
        changes
            .iter()
            .filter_map(|(ts, c)| match c {
                Change::Load { start, code, .. } => {
                    Some((*ts, *start, store.get(*code).unwrap().name.clone()))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn v8_conventions() {
        assert_eq!(
            v8_script_path("JS:*hotLoop /srv/app.js:3:17"),
            Some("/srv/app.js")
        );
        assert_eq!(v8_script_path("Builtin:ArrayPush"), None);
        assert_eq!(
            v8_script_path("JS:~ node:internal/x:1:1"),
            Some("node:internal/x")
        );
        let at = |a: u64| (a, Arc::<str>::from("f"), 1, 1);
        // V8: first entry at code + 0x40, some past the end.
        assert_eq!(
            debug_address_shift(&[at(0x1040), at(0x1105)], 0x1000, 0x1100),
            0x40
        );
        // JVMTI: addresses inside the code.
        assert_eq!(
            debug_address_shift(&[at(0x1000), at(0x1080)], 0x1000, 0x1100),
            0
        );
    }

    /// A little-endian jitdump file: header, then `records` as (id, body), 8-byte padded.
    fn jitdump_file(records: &[(u32, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        for v in [jitdump::MAGIC, 1, 40, 62, 0, 4242] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&[0; 16]);
        for (id, body) in records {
            let size = (16 + body.len()).next_multiple_of(8);
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&(size as u32).to_le_bytes());
            out.extend_from_slice(&1_000u64.to_le_bytes());
            out.extend_from_slice(body);
            out.resize(out.len() + size - 16 - body.len(), 0);
        }
        out
    }

    /// Seen in CI with Node 20: `hot.js:6:26` labelled `/e:6:26`. V8 wrote the script's name
    /// from freed memory; read to its first NUL, the name was `/e` and the entries after it
    /// came from the wrong bytes.
    #[test]
    fn v8_debug_names_from_freed_memory_take_the_script_of_the_code() {
        let script = "/srv/app/hot.js";
        let mut garbled = script.as_bytes().to_vec();
        garbled[..8].copy_from_slice(&[0x2f, 0x65, 0, 0x1a, 0x56, 0x55, 0, 0]);
        let mut debug = Vec::new();
        debug.extend_from_slice(&0x1000u64.to_le_bytes());
        debug.extend_from_slice(&3u64.to_le_bytes());
        for (n, (line, column)) in [(5u32, 3u32), (6, 26), (7, 5)].into_iter().enumerate() {
            debug.extend_from_slice(&(0x1040 + 8 * n as u64).to_le_bytes());
            debug.extend_from_slice(&line.to_le_bytes());
            debug.extend_from_slice(&column.to_le_bytes());
            debug.extend_from_slice(if n == 0 { &garbled } else { b"\xff" });
            debug.push(0);
        }
        let mut load = Vec::new();
        for v in [4242u32, 4242] {
            load.extend_from_slice(&v.to_le_bytes());
        }
        for v in [0x1000u64, 0x1000, 0x40, 0] {
            load.extend_from_slice(&v.to_le_bytes());
        }
        load.extend_from_slice(format!("JS:*hotLoop {script}:3:17\0").as_bytes());
        load.extend_from_slice(&[0x90; 0x40]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jit-4242.dump");
        std::fs::write(&path, jitdump_file(&[(2, debug), (0, load)])).unwrap();

        let mut source =
            JitdumpSource::new(File::open(&path).unwrap(), &path, 4242, uid()).unwrap();
        let store = CodeStore::new();
        let changes = source.read(0, &store, &mut |_, _| true, false, &mut u64::MAX.clone());
        let [(_, Change::Load { code, .. })] = changes.as_slice() else {
            panic!("{changes:?}");
        };
        let code = store.get(*code).unwrap();
        let points: Vec<_> = code
            .lines
            .iter()
            .map(|p| (p.offset, &*p.file, p.line, p.column))
            .collect();
        assert_eq!(
            points,
            [(0, script, 5, 3), (8, script, 6, 26), (16, script, 7, 5)]
        );
        assert_eq!(source.repaired_file_names, 1);
        assert_eq!(source.refusals.count(Reason::DebugInfoOutsideCode), 0);
    }

    #[test]
    fn garbage_file_names_are_not_files() {
        for name in [
            "/app/hot.js",
            "node:internal/main",
            "hot.js",
            "file:///x.mjs",
        ] {
            assert!(names_a_file(name), "{name}");
        }
        for name in ["Bc", "", "x"] {
            assert!(!names_a_file(name), "{name}");
        }
    }

    #[test]
    fn growing_files_are_read_within_the_budget_and_refused_over_their_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, [7u8; 100]).unwrap();
        let mut growing = Growing::new(File::open(&path).unwrap(), 1000);
        let mut budget = 30;
        let (bytes, at_end) = growing.take_more(&mut budget).unwrap();
        assert_eq!((bytes.len(), at_end, budget), (30, false, 0));
        growing.put_back(bytes, 30);
        let mut budget = 1000;
        let (bytes, at_end) = growing.take_more(&mut budget).unwrap();
        assert_eq!((bytes.len(), at_end, budget), (70, true, 930));

        // A sparse file costs nothing to make: its size alone refuses it, before any read.
        let file = File::options().write(true).open(&path).unwrap();
        file.set_len(1 << 40).unwrap();
        let mut source =
            CodeMapFileSource::new(File::open(&path).unwrap(), &path, 1, uid()).unwrap();
        let mut budget = u64::MAX;
        assert!(
            source
                .read(&CodeStore::new(), false, &mut budget)
                .is_empty()
        );
        assert_eq!(budget, u64::MAX, "nothing was read");
        let failure = source.take_failure().unwrap();
        assert!(
            failure.contains("over the 1073741824-byte limit"),
            "{failure}"
        );
        assert_eq!(source.refusals.count(Reason::TooLarge), 1);
    }

    /// A VM whose file ends mid-collection (it exited): the final read ends the interval at
    /// the last time the file told, and counts it as left open.
    #[test]
    fn a_code_map_file_that_ends_ends_its_open_intervals() {
        use vmscope_proto::v1::{
            CodeMapEvent, Hello, IntervalBegin, IntervalKind as Kind, Sync, code_map_event::Event,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vmscope-1.codemap");
        let mut bytes = codemap_file::header().to_vec();
        for (ts, event) in [
            (
                1,
                Event::Hello(Hello {
                    pid: 1,
                    vm: "jitvm".into(),
                }),
            ),
            (
                10,
                Event::Begin(IntervalBegin {
                    kind: Kind::Scavenge as i32,
                    name: String::new(),
                    id: 5,
                }),
            ),
            (25, Event::Sync(Sync {})),
        ] {
            bytes.extend(codemap_file::encode_event(&CodeMapEvent {
                timestamp_ns: ts,
                event: Some(event),
            }));
        }
        std::fs::write(&path, bytes).unwrap();
        let mut source =
            CodeMapFileSource::new(File::open(&path).unwrap(), &path, 1, uid()).unwrap();
        let store = CodeStore::new();
        source.read(&store, false, &mut { u64::MAX });
        assert_eq!(source.take_stats().len(), 2, "the Hello and the begin");
        source.read(&store, true, &mut { u64::MAX });
        assert_eq!(
            source.take_stats(),
            [(
                25,
                StatEvent::End {
                    kind: vmscope_model::IntervalKind::Scavenge,
                    id: 5
                }
            )]
        );
        assert_eq!(source.refusals.count(Reason::Unmatched), 1);
    }

    /// One test for the real /tmp/perf-PID.map of this process (tests share the pid).
    #[test]
    fn perf_maps_are_read_as_they_grow_and_reread_when_rewritten() {
        let me = std::process::id();
        let path = PathBuf::from(format!("/tmp/perf-{me}.map"));
        let _ = std::fs::remove_file(&path);
        assert!(
            PerfMapSource::open(me, me, uid(), None).unwrap().is_none(),
            "no map yet"
        );

        let mut file = File::create(&path).unwrap();
        writeln!(file, "1000 10 JS:*hot app.js:1:1").unwrap();
        write!(file, "2000 10 JS:~partial").unwrap(); // a line being written
        file.flush().unwrap();
        let store = CodeStore::new();
        let mut everything = |_: u64, _: u64| true;
        let mut source = PerfMapSource::open(me, me, uid(), None).unwrap().unwrap();
        let first = source
            .read(500, &store, &mut everything, false, &mut { u64::MAX })
            .unwrap();
        // Entries present at the first read count from that read.
        assert_eq!(
            loads(&first, &store),
            [(500, 0x1000, "JS:*hot app.js:1:1".into())]
        );
        assert_eq!(source.changed_ns, 500);

        writeln!(file, " done").unwrap();
        writeln!(file, "0x3000 0x20 not executable").unwrap();
        file.flush().unwrap();
        let mut below_3000 = |start: u64, _: u64| start < 0x3000;
        let next = source
            .read(600, &store, &mut below_3000, false, &mut { u64::MAX })
            .unwrap();
        assert_eq!(
            loads(&next, &store),
            [(600, 0x2000, "JS:~partial done".into())]
        );
        // Outside the mappings: held for the next reads, not refused yet.
        assert_eq!((source.held(), source.refusals.total()), (1, 0));

        // Rewritten as a snapshot (HotSpot's Compiler.perfmap): the old entries go, and the
        // entry held from the old one is refused.
        let bar = "0x0000000000004000 0x0000000000000040 void Foo.bar()";
        let mut file = File::create(&path).unwrap();
        writeln!(file, "{bar}").unwrap();
        writeln!(file, "0x0000000000005000 0x0000000000000040 void Foo.baz()").unwrap();
        file.flush().unwrap();
        let snapshot = source
            .read(700, &store, &mut everything, false, &mut { u64::MAX })
            .unwrap();
        assert_eq!(source.held(), 0);
        assert_eq!(source.refusals.count(Reason::OutsideExecutable), 1);
        let summary = source.refusals.take_summary(700, true).unwrap();
        assert!(summary.contains("1 outside"), "{summary}");
        assert!(
            matches!(&snapshot[0], (700, Change::FreeCodes(codes)) if codes.len() == 2),
            "{snapshot:?}"
        );
        assert_eq!(
            loads(&snapshot, &store),
            [
                (700, 0x4000, "void Foo.bar()".into()),
                (700, 0x5000, "void Foo.baz()".into())
            ]
        );
        assert!(
            source
                .read(750, &store, &mut everything, false, &mut { u64::MAX })
                .unwrap()
                .is_empty()
        );
        assert_eq!(source.changed_ns, 700);

        // Rewritten in place, longer, with the same first line (HotSpot truncates and writes
        // again): still a new snapshot, not lines appended to the old one.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        writeln!(file, "{bar}").unwrap();
        writeln!(file, "0x0000000000006000 0x0000000000000040 void Foo.qux()").unwrap();
        writeln!(
            file,
            "0x0000000000007000 0x0000000000000040 void Foo.quux()"
        )
        .unwrap();
        file.flush().unwrap();
        let again = source
            .read(800, &store, &mut everything, false, &mut { u64::MAX })
            .unwrap();
        assert!(
            matches!(&again[0], (800, Change::FreeCodes(_))),
            "{again:?}"
        );
        assert_eq!(loads(&again, &store).len(), 3, "{again:?}");

        // Told by its writer, even when nothing shows it.
        source.reread();
        let told = source
            .read(900, &store, &mut everything, false, &mut { u64::MAX })
            .unwrap();
        assert!(matches!(&told[0], (900, Change::FreeCodes(_))), "{told:?}");
        assert_eq!(loads(&told, &store).len(), 3);
        std::fs::remove_file(&path).unwrap();
    }

    /// CPython 3.12 `-X perf` lists trampolines it mapped after the daemon last read its
    /// mappings: the entries wait for a read that finds them mapped, stamped as first read, and
    /// the later line for the same code wins over a held one.
    #[test]
    fn entries_outside_the_known_mappings_are_taken_once_mapped() {
        let me = std::process::id();
        // A namespace pid no process has (beyond the largest pid_max): this test's own file.
        let nspid = (1 << 22) + me;
        let path = PathBuf::from(format!("/tmp/perf-{nspid}.map"));
        let mut file = File::create(&path).unwrap();
        writeln!(file, "7f0000001000 b py::a:callers.py").unwrap();
        writeln!(file, "7f0000001010 b py::b:callers.py").unwrap();
        writeln!(file, "7f0000003000 b py::old:callers.py").unwrap();
        writeln!(file, "1000 10 native").unwrap();
        file.flush().unwrap();
        let store = CodeStore::new();
        let mut source = PerfMapSource::open(me, nspid, uid(), None)
            .unwrap()
            .unwrap();
        let mut low = |start: u64, _: u64| start < 0x7f00_0000_0000;
        let first = source
            .read(100, &store, &mut low, false, &mut { u64::MAX })
            .unwrap();
        assert_eq!(loads(&first, &store), [(100, 0x1000, "native".into())]);
        assert_eq!(source.held(), 3);

        // The old trampoline's code is used again, named anew, before anything is mapped.
        writeln!(file, "7f0000003000 b py::new:callers.py").unwrap();
        file.flush().unwrap();
        let mut arena = |start: u64, _: u64| start < 0x7f00_0000_2000;
        let mut everything = |_: u64, _: u64| true;
        let second = source
            .read(200, &store, &mut arena, false, &mut { u64::MAX })
            .unwrap();
        // Released in file order, with the time they were first read.
        assert_eq!(
            loads(&second, &store),
            [
                (100, 0x7f00_0000_1000, "py::a:callers.py".into()),
                (100, 0x7f00_0000_1010, "py::b:callers.py".into()),
            ]
        );
        assert_eq!(
            source.held(),
            2,
            "the old and the new entry at 0x7f0000003000"
        );
        assert_eq!(source.counters.mapped_late, 2);
        let third = source
            .read(300, &store, &mut everything, false, &mut { u64::MAX })
            .unwrap();
        // The later line wins: applied after the earlier one.
        assert_eq!(
            loads(&third, &store),
            [
                (100, 0x7f00_0000_3000, "py::old:callers.py".into()),
                (200, 0x7f00_0000_3000, "py::new:callers.py".into()),
            ]
        );

        // What the exited process never mapped is refused at its last read.
        writeln!(file, "7f0000009000 b py::never:callers.py").unwrap();
        file.flush().unwrap();
        let last = source
            .read(400, &store, &mut low, true, &mut { u64::MAX })
            .unwrap();
        assert!(last.is_empty(), "{last:?}");
        assert_eq!(source.held(), 0);
        assert_eq!(source.refusals.count(Reason::OutsideExecutable), 1);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn untrusted_perf_maps_are_refused() {
        // A pid of our own that no other test uses for its perf map: a child's.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id();
        let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        std::fs::write(&path, "1000 10 x\n").unwrap();
        // Owned by someone else than the process's user.
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let err = PerfMapSource::open(pid, pid, uid(), None).unwrap_err();
        assert!(err.contains("belongs to uid 65534"), "{err}");
        // A symlink planted in /tmp.
        std::fs::remove_file(&path).unwrap();
        let target = tempfile::NamedTempFile::new().unwrap();
        std::os::unix::fs::symlink(target.path(), &path).unwrap();
        let err = PerfMapSource::open(pid, pid, uid(), None).unwrap_err();
        assert!(err.contains("symlink"), "{err}");
        // A FIFO: refused at once, never read (it would block).
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = PerfMapSource::open(pid, pid, uid(), None).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
        std::fs::remove_file(&path).unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}
