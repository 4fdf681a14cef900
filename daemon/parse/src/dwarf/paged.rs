//! A `gimli` reader over debug sections read on demand, a page at a time, from wherever the
//! caller keeps the file.
//!
//! Debug sections are big (60 MB for vmscoped's own, 28 MB for the demo VM, 23 MB for
//! libpython), and a profile asks for the lines of a few hundred addresses in them. Holding
//! whole sections in memory, as `EndianSlice` or `EndianArcSlice` readers need, made DWARF
//! most of the daemon's memory (340 MB after a day's sessions). So an uncompressed section
//! stays in its file: [`PagedReader`] reads the bytes gimli asks for in [`PAGE_BYTES`] pages,
//! through [`ReadAt`] (the caller's file, read with `pread`: no memory map, so a file truncated
//! under the daemon is an error, not a SIGBUS), kept in a small least-recently-used cache shared
//! by the file's sections ([`PageCache`]). `addr2line` parses a compilation unit's line program
//! and functions only when an address in it is looked up, so what is read, and kept parsed, is
//! what the lookups need. Compressed sections are inflated whole (there is no page of a zlib
//! stream to read alone) and small ones read whole: [`Bytes::Owned`].
//!
//! Every read is checked against the section's bounds before the file is touched; a read that
//! fails (the file shrank) is gimli's `UnexpectedEof` for the lookup that needed it.

use std::{
    borrow::Cow,
    collections::HashMap,
    fmt, io,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use gimli::{Error, ReaderOffsetId, Result, RunTimeEndian};

/// Bytes per page read from a file: a compilation unit's header and root entry fit in one,
/// which is all `addr2line` reads of the units no lookup falls in.
pub const PAGE_BYTES: u64 = 4096;

/// Where a file's bytes are read from: positioned reads that leave no state behind.
pub trait ReadAt: Send + Sync {
    /// Fills `buf` with the bytes at `offset`; an error if they are not all there.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

/// A file read with `pread` (`FileExt::read_exact_at`): the one way the daemon reads its
/// binaries' sections.
#[derive(Debug)]
pub struct PositionedFile(pub std::fs::File);

impl ReadAt for PositionedFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.0, buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let bytes = start
            .checked_add(buf.len())
            .and_then(|end| self.get(start..end))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(bytes);
        Ok(())
    }
}

impl ReadAt for Vec<u8> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.as_slice().read_exact_at(buf, offset)
    }
}

/// The pages of one file's sections, most recently used kept up to a byte budget.
pub struct PageCache {
    file: Arc<dyn ReadAt>,
    state: Mutex<CacheState>,
    budget: u64,
}

#[derive(Default)]
struct CacheState {
    /// By page start (a file offset): the page and when it was last used.
    pages: HashMap<u64, (Arc<[u8]>, u64)>,
    clock: u64,
    bytes: u64,
    /// Bytes read from the file in all (a page read again after eviction counts again).
    read: u64,
    /// Reads that failed.
    failures: u64,
    /// Every page ever read, by its start: how much of the file the parser has looked at.
    touched: std::collections::HashSet<u64>,
}

impl fmt::Debug for PageCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("PageCache")
            .field("pages", &state.pages.len())
            .field("bytes", &state.bytes)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl PageCache {
    /// A cache of pages of `file`, holding at most `budget` bytes of them (at least one page).
    pub fn new(file: Arc<dyn ReadAt>, budget: u64) -> Arc<PageCache> {
        Arc::new(PageCache {
            file,
            state: Mutex::new(CacheState::default()),
            budget: budget.max(PAGE_BYTES),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes of pages held now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Lets every page go (they are read again as lookups need them); the counts stay.
    pub fn clear(&self) {
        let mut state = self.lock();
        state.pages.clear();
        state.bytes = 0;
    }

    /// Bytes read from the file so far, and reads that failed.
    pub fn reads(&self) -> (u64, u64) {
        let state = self.lock();
        (state.read, state.failures)
    }

    /// Bytes of the distinct pages ever read: how much of the sections the parser has looked
    /// at, the measure of what it keeps parsed.
    pub fn touched(&self) -> u64 {
        self.lock().touched.len() as u64 * PAGE_BYTES
    }

    /// The `len` bytes at file offset `start` (a section's page: [`PAGE_BYTES`] or its last,
    /// shorter one), from the cache or read.
    fn page_of(&self, start: u64, len: usize) -> io::Result<Arc<[u8]>> {
        {
            let mut state = self.lock();
            state.clock += 1;
            let now = state.clock;
            if let Some((page, used)) = state.pages.get_mut(&start)
                && page.len() == len
            {
                *used = now;
                return Ok(page.clone());
            }
        }
        // Read outside the lock: other threads' lookups in cached pages go on.
        let mut bytes = vec![0; len];
        let read = self.file.read_exact_at(&mut bytes, start);
        let mut state = self.lock();
        if let Err(e) = read {
            state.failures += 1;
            return Err(e);
        }
        let page: Arc<[u8]> = bytes.into();
        state.read += len as u64;
        state.touched.insert(start);
        while state.bytes + len as u64 > self.budget {
            let Some(oldest) = state
                .pages
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(&start, _)| start)
            else {
                break;
            };
            if let Some((evicted, _)) = state.pages.remove(&oldest) {
                state.bytes -= evicted.len() as u64;
            }
        }
        state.clock += 1;
        let now = state.clock;
        if let Some((old, _)) = state.pages.insert(start, (page.clone(), now)) {
            state.bytes -= old.len() as u64;
        }
        state.bytes += len as u64;
        Ok(page)
    }
}

/// A section's bytes: in memory, or in its file behind a [`PageCache`].
#[derive(Clone)]
pub enum Bytes {
    /// Held whole (inflated, or small).
    Owned(Arc<[u8]>),
    /// `len` bytes at file offset `start`, read a page at a time.
    Paged {
        /// The file's pages.
        cache: Arc<PageCache>,
        /// File offset of the section.
        start: u64,
        /// Bytes in the section.
        len: u64,
    },
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bytes::Owned(bytes) => write!(f, "Owned({} bytes)", bytes.len()),
            Bytes::Paged { start, len, .. } => write!(f, "Paged({len} bytes at {start:#x})"),
        }
    }
}

impl Bytes {
    /// Bytes of the section.
    pub fn len(&self) -> u64 {
        match self {
            Bytes::Owned(bytes) => bytes.len() as u64,
            Bytes::Paged { len, .. } => *len,
        }
    }

    /// Whether the section is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held in memory for the section's whole life (its pages are the cache's).
    pub fn owned(&self) -> u64 {
        match self {
            Bytes::Owned(bytes) => bytes.len() as u64,
            Bytes::Paged { .. } => 0,
        }
    }

    /// Copies the bytes at `[at, at + buf.len())` of the section (the caller checked the
    /// bounds) into `buf`. `window` is the caller's last page of this section, tried before
    /// the cache and replaced by the page read.
    fn copy(&self, at: u64, buf: &mut [u8], window: &mut Option<Window>) -> io::Result<()> {
        if let Bytes::Owned(bytes) = self {
            let at = at as usize;
            buf.copy_from_slice(&bytes[at..at + buf.len()]);
            return Ok(());
        }
        let mut done = 0;
        while done < buf.len() {
            let offset = at + done as u64;
            let (page_start, page) = self.page_at(offset, window)?;
            let from = (offset - page_start) as usize;
            let n = (page.len() - from).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&page[from..from + n]);
            done += n;
        }
        Ok(())
    }

    /// The page of a paged section that holds section offset `at` (in bounds), with its start:
    /// `window` if it is that page, else from the cache or the file, then kept in `window`.
    fn page_at(&self, at: u64, window: &mut Option<Window>) -> io::Result<Window> {
        let page_start = at / PAGE_BYTES * PAGE_BYTES;
        if let Some((start, page)) = window
            && *start == page_start
        {
            return Ok((page_start, page.clone()));
        }
        let Bytes::Paged { cache, start, len } = self else {
            unreachable!("owned sections have no pages");
        };
        let page_len = (len - page_start).min(PAGE_BYTES) as usize;
        // Pages are the section's (its first starts with it), keyed in the cache by their
        // file offset.
        let page = cache.page_of(start + page_start, page_len)?;
        *window = Some((page_start, page.clone()));
        Ok((page_start, page))
    }
}

/// A reader's last page: its start in the section and its bytes.
type Window = (u64, Arc<[u8]>);

/// Gives every section its own range of [`ReaderOffsetId`]s: sections are far apart in it.
static NEXT_SECTION_ID: AtomicU64 = AtomicU64::new(1);

/// The bytes of a section and what tells its readers' offset ids from other sections'.
#[derive(Debug)]
pub struct Section {
    bytes: Bytes,
    id_base: u64,
}

/// A gimli [`gimli::Reader`] over part of a [`Section`].
#[derive(Clone)]
pub struct PagedReader {
    section: Arc<Section>,
    /// Section offsets of the first byte not read yet, and of the end.
    pos: u64,
    end: u64,
    endian: RunTimeEndian,
    /// The page read last: gimli reads a byte at a time, mostly from the page it read last, and
    /// splits readers off for a few bytes each (which start with the same page). Readers kept
    /// in parsed units (a unit's entries, its line program's header) hold one page each.
    window: Option<Window>,
}

impl fmt::Debug for PagedReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PagedReader({:?} [{:#x}, {:#x}))",
            self.section.bytes, self.pos, self.end
        )
    }
}

impl PagedReader {
    /// A reader over the whole of `bytes`.
    pub fn new(bytes: Bytes, endian: RunTimeEndian) -> PagedReader {
        let end = bytes.len();
        PagedReader {
            section: Arc::new(Section {
                bytes,
                id_base: NEXT_SECTION_ID.fetch_add(1, Ordering::Relaxed) << 40,
            }),
            pos: 0,
            end,
            endian,
            window: None,
        }
    }

    fn eof(&self) -> Error {
        Error::UnexpectedEof(gimli::Reader::offset_id(self))
    }

    /// The remaining bytes, read.
    fn remaining(&self) -> Result<Cow<'_, [u8]>> {
        if let Bytes::Owned(bytes) = &self.section.bytes {
            return Ok(Cow::Borrowed(&bytes[self.pos as usize..self.end as usize]));
        }
        let mut buf = vec![0; (self.end - self.pos) as usize];
        self.section
            .bytes
            .copy(self.pos, &mut buf, &mut self.window.clone())
            .map_err(|_| self.eof())?;
        Ok(Cow::Owned(buf))
    }
}

impl gimli::Reader for PagedReader {
    type Endian = RunTimeEndian;
    type Offset = usize;

    fn endian(&self) -> RunTimeEndian {
        self.endian
    }

    fn len(&self) -> usize {
        (self.end - self.pos) as usize
    }

    fn empty(&mut self) {
        self.pos = self.end;
    }

    fn truncate(&mut self, len: usize) -> Result<()> {
        if len > self.len() {
            return Err(self.eof());
        }
        self.end = self.pos + len as u64;
        Ok(())
    }

    fn offset_from(&self, base: &Self) -> usize {
        (self.pos - base.pos) as usize
    }

    fn offset_id(&self) -> ReaderOffsetId {
        ReaderOffsetId(self.section.id_base + self.pos)
    }

    fn lookup_offset_id(&self, id: ReaderOffsetId) -> Option<usize> {
        let at = id.0.checked_sub(self.section.id_base)?;
        (self.pos..=self.end)
            .contains(&at)
            .then(|| (at - self.pos) as usize)
    }

    fn find(&self, byte: u8) -> Result<usize> {
        if let Bytes::Owned(bytes) = &self.section.bytes {
            return bytes[self.pos as usize..self.end as usize]
                .iter()
                .position(|&b| b == byte)
                .ok_or_else(|| self.eof());
        }
        // A page at a time, in place: strings are short, sections are not.
        let mut window = self.window.clone();
        let mut at = self.pos;
        while at < self.end {
            let (page_start, page) = self
                .section
                .bytes
                .page_at(at, &mut window)
                .map_err(|_| self.eof())?;
            let from = (at - page_start) as usize;
            let to = ((self.end - page_start) as usize).min(page.len());
            if let Some(i) = page[from..to].iter().position(|&b| b == byte) {
                return Ok((at - self.pos) as usize + i);
            }
            at = page_start + to as u64;
        }
        Err(self.eof())
    }

    fn skip(&mut self, len: usize) -> Result<()> {
        if len > self.len() {
            return Err(self.eof());
        }
        self.pos += len as u64;
        Ok(())
    }

    fn split(&mut self, len: usize) -> Result<Self> {
        if len > self.len() {
            return Err(self.eof());
        }
        let head = PagedReader {
            section: self.section.clone(),
            pos: self.pos,
            end: self.pos + len as u64,
            endian: self.endian,
            window: self.window.clone(),
        };
        self.pos += len as u64;
        Ok(head)
    }

    fn to_slice(&self) -> Result<Cow<'_, [u8]>> {
        self.remaining()
    }

    fn to_string(&self) -> Result<Cow<'_, str>> {
        match self.remaining()? {
            Cow::Borrowed(bytes) => std::str::from_utf8(bytes)
                .map(Cow::Borrowed)
                .map_err(|_| Error::BadUtf8),
            Cow::Owned(bytes) => String::from_utf8(bytes)
                .map(Cow::Owned)
                .map_err(|_| Error::BadUtf8),
        }
    }

    fn to_string_lossy(&self) -> Result<Cow<'_, str>> {
        Ok(match self.remaining()? {
            Cow::Borrowed(bytes) => String::from_utf8_lossy(bytes),
            Cow::Owned(bytes) => Cow::Owned(String::from_utf8_lossy(&bytes).into_owned()),
        })
    }

    #[inline]
    fn read_slice(&mut self, buf: &mut [u8]) -> Result<()> {
        let n = buf.len() as u64;
        if n > self.end - self.pos {
            return Err(self.eof());
        }
        // The common case, a few bytes in the page read last, takes no lock.
        match (&self.section.bytes, &self.window) {
            (Bytes::Owned(bytes), _) => {
                let at = self.pos as usize;
                buf.copy_from_slice(&bytes[at..at + buf.len()]);
            }
            (_, Some((start, page)))
                if self.pos >= *start && self.pos + n <= *start + page.len() as u64 =>
            {
                let from = (self.pos - start) as usize;
                buf.copy_from_slice(&page[from..from + buf.len()]);
            }
            _ => self
                .section
                .bytes
                .copy(self.pos, buf, &mut self.window)
                .map_err(|_| self.eof())?,
        }
        self.pos += n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gimli::Reader as _;

    /// A file of `n` bytes whose byte at `i` is `i % 251`, and a paged section of part of it.
    fn paged(n: usize, start: u64, len: u64, budget: u64) -> (PagedReader, Arc<PageCache>) {
        let file: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let cache = PageCache::new(Arc::new(file), budget);
        let bytes = Bytes::Paged {
            cache: cache.clone(),
            start,
            len,
        };
        (PagedReader::new(bytes, RunTimeEndian::Little), cache)
    }

    #[test]
    fn reads_across_pages_match_the_file() {
        let start = 1000;
        let (mut reader, cache) = paged(40_000, start, 30_000, 2 * PAGE_BYTES);
        let mut head = reader.split(5000).unwrap();
        let mut buf = vec![0; 5000];
        head.read_slice(&mut buf).unwrap();
        let expected: Vec<u8> = (start..start + 5000).map(|i| (i % 251) as u8).collect();
        assert_eq!(buf, expected);
        assert!(head.read_u8().is_err(), "the split's end is its own");
        // The rest starts where the split ended, and reads little-endian values.
        let at = start + 5000;
        let value = reader.read_u16().unwrap();
        assert_eq!(
            value,
            u16::from_le_bytes([(at % 251) as u8, ((at + 1) % 251) as u8])
        );
        // Pages beyond the budget are evicted: the cache stays within it.
        reader.skip(20_000).unwrap();
        reader.read_u8().unwrap();
        assert!(cache.bytes() <= 2 * PAGE_BYTES, "{cache:?}");
        assert!(reader.skip(reader.len() + 1).is_err());
    }

    #[test]
    fn strings_are_found_and_read_across_a_page_boundary() {
        let mut file = vec![b'x'; 3 * PAGE_BYTES as usize];
        let at = PAGE_BYTES as usize - 3;
        file[at..at + 7].copy_from_slice(b"abcdef\0");
        let cache = PageCache::new(Arc::new(file), PAGE_BYTES);
        let bytes = Bytes::Paged {
            cache: cache.clone(),
            start: 0,
            len: 3 * PAGE_BYTES,
        };
        let mut reader = PagedReader::new(bytes, RunTimeEndian::Little);
        reader.skip(at).unwrap();
        let name = reader.read_null_terminated_slice().unwrap();
        assert_eq!(name.to_string().unwrap(), "abcdef");
        assert_eq!(cache.touched(), 2 * PAGE_BYTES, "two pages looked at");
        assert_eq!(cache.bytes(), PAGE_BYTES, "one kept");
        // No terminator before the end: an error, not a read past the section.
        let mut rest = reader.clone();
        rest.skip(rest.len() - 10).unwrap();
        assert!(rest.find(0).is_err());
    }

    #[test]
    fn a_file_that_shrank_is_an_error_of_the_read() {
        let (mut reader, cache) = paged(100, 0, 10_000, PAGE_BYTES);
        let mut buf = [0; 8];
        assert!(matches!(
            reader.read_slice(&mut buf),
            Err(Error::UnexpectedEof(_))
        ));
        assert_eq!(cache.reads().1, 1);
    }

    #[test]
    fn offset_ids_belong_to_their_section() {
        let a = PagedReader::new(
            Bytes::Owned(Arc::from(&[1u8, 2, 3][..])),
            RunTimeEndian::Big,
        );
        let b = PagedReader::new(
            Bytes::Owned(Arc::from(&[1u8, 2, 3][..])),
            RunTimeEndian::Big,
        );
        let mut later = a.clone();
        later.skip(2).unwrap();
        assert_eq!(a.lookup_offset_id(later.offset_id()), Some(2));
        assert_eq!(b.lookup_offset_id(later.offset_id()), None);
        assert_eq!(later.offset_from(&a), 2);
    }
}
