//! HotSpot's description of itself, read from outside the JVM.
//!
//! `libjvm.so` exports `gHotSpotVMStructs`, `gHotSpotVMTypes`, `gHotSpotVMIntConstants` and
//! `gHotSpotVMLongConstants`: tables of the offsets of its fields, the sizes of its types and
//! the values of its constants, written for the serviceability agent (and read by the
//! OpenTelemetry eBPF profiler's HotSpot unwinder). Reading them from the live process is what
//! lets an unwinder follow Java frames of any JDK build without hard-coding one build's
//! offsets.
//!
//! - [`vm_structs`]: the tables themselves, read through a [`Memory`] of the process;
//! - [`layout`]: what the unwinder needs of them (code heaps, code blobs, the interpreter's
//!   frame), or the names of what this JVM's tables lack;
//! - [`scopes`]: an nmethod's `PcDesc`s and scopes, the methods inlined at each pc;
//! - [`lines`]: a method's line number table; [`compressed`]: the UNSIGNED5 stream both are
//!   written in;
//! - [`method`]: Java method names as HotSpot's perf map spells them;
//! - [`code_heap`]: the code cache's blocks, found from a pc through the segment map, and the
//!   code blob headers in them.
//!
//! Everything here reads a hostile or racing process's memory: a read that fails, a table
//! without its terminator or a header that contradicts itself is an error or `None`, never a
//! panic or an unbounded walk.

pub mod code_heap;
pub mod compressed;
pub mod layout;
pub mod lines;
pub mod method;
pub mod scopes;
pub mod vm_structs;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_read_once_and_reads_may_span_them() {
        struct Counting(Regions, usize);
        impl Memory for Counting {
            fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
                self.1 += 1;
                self.0.read(addr, buf)
            }
        }
        let mut r = Regions::default();
        r.add(0x1000, (0..8192u32).map(|i| i as u8).collect());
        let mut pages = Pages::new(Counting(r, 0), 16);
        let mut buf = [0u8; 8];
        assert!(pages.read(0x1ffc, &mut buf));
        assert_eq!(buf, [0xfc, 0xfd, 0xfe, 0xff, 0, 1, 2, 3]);
        assert!(pages.read(0x1000, &mut buf));
        assert_eq!(pages.inner.1, 2, "two pages, each read once");
        assert!(!pages.read(0x2ffc, &mut buf), "the third page is not there");
        assert!(!pages.read(0x2ffc, &mut buf));
        assert_eq!(pages.inner.1, 3, "nor read again");
    }
}

/// Reads another process's memory (`process_vm_readv` in the daemon, a map of bytes in tests).
pub trait Memory {
    /// Fills `buf` with the bytes at `addr`; false if they cannot all be read.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool;

    /// The 8 little-endian bytes at `addr`.
    fn read_u64(&mut self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b).then(|| u64::from_le_bytes(b))
    }

    /// Several reads at once, each as [`Memory::read`]: whether each filled its buffer. One
    /// at a time unless the memory can do better (the daemon's: one round trip to the thread
    /// that reads the process, instead of one per read).
    fn read_many(&mut self, reads: &mut [(u64, &mut [u8])]) -> Vec<bool> {
        reads
            .iter_mut()
            .map(|(addr, buf)| self.read(*addr, buf))
            .collect()
    }
}

impl<M: Memory + ?Sized> Memory for &mut M {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        (**self).read(addr, buf)
    }

    fn read_many(&mut self, reads: &mut [(u64, &mut [u8])]) -> Vec<bool> {
        (**self).read_many(reads)
    }
}

/// Bytes of a page of [`Pages`].
pub const PAGE: u64 = 4096;

/// A [`Memory`] that reads whole pages of another and keeps them: the vmStructs tables are
/// thousands of small reads within a few dozen pages, each a system call (and, in the daemon,
/// a round trip to the thread that reads as the target's user) if made one by one. For
/// memory that does not change while it is read (the tables are written once, at the JVM's
/// start), not for code that may be freed.
#[derive(Debug)]
pub struct Pages<M> {
    inner: M,
    pages: std::collections::HashMap<u64, Option<Box<[u8]>>>,
    max_pages: usize,
}

impl<M: Memory> Pages<M> {
    /// Pages of `inner`, at most `max_pages` kept (then forgotten all at once).
    pub fn new(inner: M, max_pages: usize) -> Pages<M> {
        Pages {
            inner,
            pages: std::collections::HashMap::new(),
            max_pages,
        }
    }

    fn page(&mut self, page: u64) -> Option<&[u8]> {
        if !self.pages.contains_key(&page) {
            if self.pages.len() >= self.max_pages {
                self.pages.clear();
            }
            let mut bytes = vec![0u8; PAGE as usize].into_boxed_slice();
            let ok = self.inner.read(page, &mut bytes);
            self.pages.insert(page, ok.then_some(bytes));
        }
        self.pages.get(&page)?.as_deref()
    }
}

impl<M: Memory> Memory for Pages<M> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let mut done = 0usize;
        while done < buf.len() {
            let Some(at) = addr.checked_add(done as u64) else {
                return false;
            };
            let page = at & !(PAGE - 1);
            let within = (at - page) as usize;
            let n = (PAGE as usize - within).min(buf.len() - done);
            let Some(bytes) = self.page(page) else {
                return false;
            };
            buf[done..done + n].copy_from_slice(&bytes[within..within + n]);
            done += n;
        }
        true
    }
}

/// A [`Memory`] over byte regions, for tests and fuzzing.
#[derive(Debug, Default, Clone)]
pub struct Regions {
    regions: Vec<(u64, Vec<u8>)>,
}

impl Regions {
    /// Adds `bytes` at `addr`.
    pub fn add(&mut self, addr: u64, bytes: Vec<u8>) {
        self.regions.push((addr, bytes));
    }
}

impl Memory for Regions {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        for (start, bytes) in &self.regions {
            let Some(from) = addr.checked_sub(*start) else {
                continue;
            };
            let Ok(from) = usize::try_from(from) else {
                continue;
            };
            if let Some(src) = from
                .checked_add(buf.len())
                .and_then(|end| bytes.get(from..end))
            {
                buf.copy_from_slice(src);
                return true;
            }
        }
        false
    }
}
