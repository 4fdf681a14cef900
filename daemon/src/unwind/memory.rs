//! Reading a live process's code bytes, for rules that recognise code by its bytes (the CPython
//! trampoline rule).

use std::{collections::HashMap, sync::Arc};

use crate::{process::ProcessAccess, sys};

/// Reads live code bytes of a process (anonymous JIT memory): the unwinder asks for the few
/// bytes around a return address. A trait so that tests can answer without a process.
pub trait ReadCode {
    /// Fills `buf` with the bytes at `addr` in process `pid`; false if they cannot all be read
    /// (unmapped, process gone).
    fn read(&mut self, pid: u32, addr: u64, buf: &mut [u8]) -> bool;

    /// Several reads of process `pid` at once, each as [`ReadCode::read`], uncached: whether
    /// each filled its buffer.
    fn read_many(&mut self, pid: u32, reads: &mut [(u64, &mut [u8])]) -> Vec<bool> {
        reads
            .iter_mut()
            .map(|(addr, buf)| self.read(pid, *addr, buf))
            .collect()
    }
}

/// Most answers [`ProcessMemory`] keeps; the cache is emptied when it fills up.
pub const MAX_CACHED_READS: usize = 1 << 16;

/// Longest a process's real uid is believed without reading it again.
pub const UID_TTL_NS: u64 = 1_000_000_000;

/// Longest read [`ProcessMemory`] caches: enough for the trampoline rule.
pub const MAX_CACHED_READ_BYTES: usize = 16;

/// Counters of [`ProcessMemory`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryCounters {
    /// `process_vm_readv` calls.
    pub reads: u64,
    /// Answers from the cache.
    pub cache_hits: u64,
    /// Reads that could not read everything (unmapped memory, process gone).
    pub failures: u64,
    /// Of the failures, reads not made or abandoned because a read of the same user's
    /// processes did not answer in time ([`ProcessAccess`]).
    pub stalled: u64,
}

/// [`ReadCode`] with `process_vm_readv`, caching answers per (pid, address, length): the same
/// trampoline is asked about in every sample that passes through it.
///
/// Code in anonymous memory can be freed and replaced, so the cache must not outlive it: call
/// [`ProcessMemory::forget`] when a process exits or execs, or [`ProcessMemory::clear`] when a
/// code map says code was freed.
#[derive(Debug, Default)]
pub struct ProcessMemory {
    cache:
        HashMap<(u32, u64, u8), Option<[u8; MAX_CACHED_READ_BYTES]>, foldhash::fast::RandomState>,
    counters: MemoryCounters,
    /// `process_vm_readv` waits on the process's memory lock, which it may hold for good.
    access: Arc<ProcessAccess>,
    /// The real uid of processes read, with when it was read: it picks the thread their reads
    /// run on ([`ProcessAccess::run_as`]). Reading `/proc/PID/status` for every read cost more
    /// than the read itself (a sixth of the daemon's CPU unwinding Java stacks). A real uid
    /// changes only by privileged code (`setuid` with `CAP_SETUID`), which makes the process
    /// undumpable until it execs, so its new user controls it only from its exec: an exec or
    /// exit forgets the uid ([`ProcessMemory::forget`]), and it is read again after
    /// [`UID_TTL_NS`] in any case.
    uids: HashMap<u32, (u32, u64), foldhash::fast::RandomState>,
}

impl ProcessMemory {
    /// An empty cache.
    pub fn new() -> ProcessMemory {
        ProcessMemory::default()
    }

    /// An empty cache reading through `access`.
    pub fn with_access(access: Arc<ProcessAccess>) -> ProcessMemory {
        ProcessMemory {
            access,
            ..ProcessMemory::default()
        }
    }

    /// Drops what is cached about `pid`.
    pub fn forget(&mut self, pid: u32) {
        self.cache.retain(|&(p, _, _), _| p != pid);
        self.uids.remove(&pid);
    }

    /// The real uid of `pid`, as last read if that was less than [`UID_TTL_NS`] ago.
    fn uid_of(&mut self, pid: u32) -> u32 {
        let now = sys::monotonic_ns();
        match self.uids.get(&pid) {
            Some(&(uid, read_ns)) if now.saturating_sub(read_ns) < UID_TTL_NS => uid,
            _ => {
                if self.uids.len() >= MAX_CACHED_READS {
                    self.uids.clear();
                }
                let uid = ProcessAccess::uid_of(pid);
                self.uids.insert(pid, (uid, now));
                uid
            }
        }
    }

    /// Drops everything cached.
    pub fn clear(&mut self) {
        self.cache.clear();
    }

    /// The counters.
    pub fn counters(&self) -> MemoryCounters {
        self.counters
    }

    fn read_uncached(&mut self, pid: u32, addr: u64, buf: &mut [u8]) -> bool {
        self.counters.reads += 1;
        let len = buf.len();
        let uid = self.uid_of(pid);
        let read = self.access.run_as(uid, move || {
            let mut bytes = vec![0; len];
            let read = sys::read_process_memory(pid, addr, &mut bytes);
            read.is_ok_and(|n| n == len).then_some(bytes)
        });
        match read {
            Ok(Some(bytes)) => {
                buf.copy_from_slice(&bytes);
                true
            }
            Ok(None) => {
                self.counters.failures += 1;
                false
            }
            Err(_) => {
                self.counters.failures += 1;
                self.counters.stalled += 1;
                false
            }
        }
    }
}

impl ReadCode for ProcessMemory {
    /// One round trip to the thread that reads as the process's user, whatever the number
    /// of reads.
    fn read_many(&mut self, pid: u32, reads: &mut [(u64, &mut [u8])]) -> Vec<bool> {
        self.counters.reads += reads.len() as u64;
        let wanted: Vec<(u64, usize)> = reads.iter().map(|(a, b)| (*a, b.len())).collect();
        let uid = self.uid_of(pid);
        let answers = self.access.run_as(uid, move || {
            wanted
                .into_iter()
                .map(|(addr, len)| {
                    let mut bytes = vec![0; len];
                    let read = sys::read_process_memory(pid, addr, &mut bytes);
                    read.is_ok_and(|n| n == len).then_some(bytes)
                })
                .collect::<Vec<_>>()
        });
        let stalled = answers.is_err();
        let answers = answers.unwrap_or_default();
        let filled: Vec<bool> = reads
            .iter_mut()
            .enumerate()
            .map(|(i, (_, buf))| match answers.get(i) {
                Some(Some(bytes)) => {
                    buf.copy_from_slice(bytes);
                    true
                }
                _ => false,
            })
            .collect();
        let failed = filled.iter().filter(|ok| !**ok).count() as u64;
        self.counters.failures += failed;
        if stalled {
            self.counters.stalled += failed;
        }
        filled
    }

    fn read(&mut self, pid: u32, addr: u64, buf: &mut [u8]) -> bool {
        if buf.len() > MAX_CACHED_READ_BYTES {
            return self.read_uncached(pid, addr, buf);
        }
        let key = (pid, addr, buf.len() as u8);
        if let Some(answer) = self.cache.get(&key) {
            self.counters.cache_hits += 1;
            return match answer {
                Some(bytes) => {
                    buf.copy_from_slice(&bytes[..buf.len()]);
                    true
                }
                None => false,
            };
        }
        let ok = self.read_uncached(pid, addr, buf);
        if self.cache.len() >= MAX_CACHED_READS {
            self.cache.clear();
        }
        let answer = ok.then(|| {
            let mut bytes = [0; MAX_CACHED_READ_BYTES];
            bytes[..buf.len()].copy_from_slice(buf);
            bytes
        });
        self.cache.insert(key, answer);
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_cached_and_forgotten() {
        let pid = std::process::id();
        let code = Box::new(*b"0123456789abcdefXYZ");
        let addr = code.as_ptr() as u64;
        let mut memory = ProcessMemory::new();
        let mut buf = [0u8; 11];
        for _ in 0..3 {
            assert!(memory.read(pid, addr, &mut buf));
            assert_eq!(&buf, b"0123456789a");
        }
        assert_eq!(memory.counters().reads, 1);
        assert_eq!(memory.counters().cache_hits, 2);
        // Unreadable memory is an answer too.
        assert!(!memory.read(pid, 8, &mut buf));
        assert!(!memory.read(pid, 8, &mut buf));
        assert_eq!(memory.counters().failures, 1);
        // Longer reads are not cached.
        let mut long = [0u8; 19];
        assert!(memory.read(pid, addr, &mut long));
        assert!(memory.read(pid, addr, &mut long));
        assert_eq!(memory.counters().reads, 4);
        // Forgotten: read again.
        memory.forget(pid);
        assert!(memory.read(pid, addr, &mut buf));
        assert_eq!(memory.counters().reads, 5);
    }
}
