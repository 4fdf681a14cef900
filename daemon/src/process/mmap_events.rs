//! The kernel's side-band records of every process's executable mappings, `execve`s, forks
//! and exits, read from one perf event per CPU: what [`super::mapping_log`] replays when a
//! process is gone before its `/proc/PID/maps` was read.
//!
//! Each event is a dummy software event (it counts nothing and samples nothing) opened for
//! every process on its CPU with `mmap`, `mmap2`, `comm`, `comm_exec` and `task`, so that the
//! kernel writes a record into the event's ring as each of those happens, stamped by
//! `CLOCK_MONOTONIC` (the clock of the BPF samples). This is what `perf record` opens for its
//! own side band. The rings are read by polling ([`MmapEvents::drain`], on each batch of samples
//! and on the tick): no wake-ups are asked for.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    ptr::NonNull,
    sync::atomic::{Ordering, fence},
};

use perf_event_open_sys::{self as perf, bindings};
use vmscope_parse::perf_record::{self, Record};

use crate::sys;

/// Data pages of each CPU's ring (a power of two): 256 KiB, some 1,500 mapping records.
pub const DATA_PAGES: usize = 64;

/// Counters of the rings, reported by the daemon.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmapEventCounters {
    /// CPUs whose event could not be opened (their processes' mappings are not recorded).
    pub open_failures: u64,
    /// Records that did not parse (skipped).
    pub malformed: u64,
}

/// One CPU's perf event and its mapped ring.
struct Ring {
    /// Kept open for as long as the mapping is.
    _fd: OwnedFd,
    /// The metadata page, then the data pages.
    base: NonNull<u8>,
    mapped_len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the ring's memory is owned by this value alone (the kernel writes the data and the
// head, this reads them and writes the tail); nothing else refers to it.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base and mapped_len are what mmap returned, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.mapped_len) };
    }
}

impl Ring {
    fn open(cpu: i32, page: usize) -> io::Result<Ring> {
        let mut attr = bindings::perf_event_attr {
            type_: bindings::PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<bindings::perf_event_attr>() as u32,
            config: u64::from(bindings::PERF_COUNT_SW_DUMMY),
            sample_type: u64::from(bindings::PERF_SAMPLE_TID | bindings::PERF_SAMPLE_TIME),
            clockid: libc::CLOCK_MONOTONIC,
            ..Default::default()
        };
        attr.set_mmap(1);
        attr.set_mmap2(1);
        attr.set_comm(1);
        attr.set_comm_exec(1);
        attr.set_task(1);
        attr.set_sample_id_all(1);
        attr.set_use_clockid(1);
        // SAFETY: attr is a whole perf_event_attr whose size field says so.
        let fd = unsafe {
            perf::perf_event_open(
                &mut attr,
                -1,
                cpu,
                -1,
                libc::c_ulong::from(bindings::PERF_FLAG_FD_CLOEXEC),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: perf_event_open returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mapped_len = (1 + DATA_PAGES) * page;
        // SAFETY: a shared read-write mapping of the event's ring, of the size the kernel
        // requires (one metadata page and a power of two of data pages).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u8>()).expect("mmap succeeded");
        let meta = base.as_ptr().cast::<bindings::perf_event_mmap_page>();
        // SAFETY: the metadata page is mapped; the kernel sets these once, before mmap returns.
        let (offset, size) = unsafe {
            (
                std::ptr::addr_of!((*meta).data_offset).read_volatile(),
                std::ptr::addr_of!((*meta).data_size).read_volatile(),
            )
        };
        // Kernels before 4.1 leave them 0: the data starts at the second page.
        let (data_offset, data_size) = if size == 0 {
            (page, DATA_PAGES * page)
        } else {
            (offset as usize, size as usize)
        };
        Ok(Ring {
            _fd: fd,
            base,
            mapped_len,
            data_offset,
            data_size,
        })
    }

    /// Copies out the records written since the last drain, and frees their room.
    fn drain(&mut self, scratch: &mut Vec<u8>, out: &mut Vec<Record>, malformed: &mut u64) {
        let meta = self.base.as_ptr().cast::<bindings::perf_event_mmap_page>();
        // SAFETY: the metadata page is mapped for the ring's life; the kernel moves the head,
        // and the acquire fence orders the data reads after it (as perf's ring_buffer_read_head).
        let head = unsafe { std::ptr::addr_of!((*meta).data_head).read_volatile() };
        fence(Ordering::Acquire);
        // SAFETY: as above; only this reader writes the tail.
        let tail = unsafe { std::ptr::addr_of!((*meta).data_tail).read_volatile() };
        let size = self.data_size as u64;
        // SAFETY: the data pages are mapped for the ring's life.
        let data = unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(self.data_offset), self.data_size)
        };
        let mut at = tail;
        while head - at >= perf_record::HEADER_SIZE as u64 {
            copy_wrapped(data, at % size, perf_record::HEADER_SIZE, scratch);
            let Ok(len) = perf_record::record_size(scratch) else {
                // A header the kernel never writes: nothing after it can be trusted.
                *malformed += 1;
                at = head;
                break;
            };
            if head - at < len as u64 {
                break;
            }
            copy_wrapped(data, at % size, len, scratch);
            match perf_record::parse_record(scratch) {
                Ok(Record::Other { .. }) => {}
                Ok(record) => out.push(record),
                Err(_) => *malformed += 1,
            }
            at += len as u64;
        }
        fence(Ordering::Release);
        // SAFETY: the release fence orders the reads above before the kernel may overwrite.
        unsafe { std::ptr::addr_of_mut!((*meta).data_tail).write_volatile(at) };
    }
}

/// `len` bytes of the ring `data` from `at`, across its end if need be, into `out`.
fn copy_wrapped(data: &[u8], at: u64, len: usize, out: &mut Vec<u8>) {
    let at = at as usize;
    out.clear();
    let first = len.min(data.len() - at);
    out.extend_from_slice(&data[at..at + first]);
    out.extend_from_slice(&data[..len - first]);
}

/// The side-band events of every online CPU.
pub struct MmapEvents {
    rings: Vec<Ring>,
    scratch: Vec<u8>,
    counters: MmapEventCounters,
}

impl std::fmt::Debug for MmapEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmapEvents")
            .field("rings", &self.rings.len())
            .field("counters", &self.counters)
            .finish()
    }
}

impl MmapEvents {
    /// Opens an event on each online CPU. A CPU whose event cannot be opened is counted and
    /// said once; with none at all, the error (processes are then only known by `/proc`).
    pub fn open() -> io::Result<MmapEvents> {
        let page = sys::page_size();
        let mut counters = MmapEventCounters::default();
        let mut rings = Vec::new();
        let mut last_error = None;
        for cpu in 0..sys::online_cpus() {
            match Ring::open(cpu as i32, page) {
                Ok(ring) => rings.push(ring),
                Err(e) => {
                    counters.open_failures += 1;
                    last_error = Some(e);
                }
            }
        }
        match (rings.is_empty(), last_error) {
            (true, Some(e)) => Err(e),
            (_, error) => {
                if let Some(e) = error {
                    tracing::warn!(
                        "mapping records cannot be read on {} CPUs: {e}",
                        counters.open_failures
                    );
                }
                Ok(MmapEvents {
                    rings,
                    scratch: Vec::new(),
                    counters,
                })
            }
        }
    }

    /// The records written since the last drain, all CPUs together, in time order.
    pub fn drain(&mut self) -> Vec<Record> {
        let mut records = Vec::new();
        for ring in &mut self.rings {
            ring.drain(
                &mut self.scratch,
                &mut records,
                &mut self.counters.malformed,
            );
        }
        // Each ring is in order; a process moves between CPUs. Lost records carry no time:
        // they sort first, counted all the same.
        records.sort_by_key(|r| r.time_ns().unwrap_or(0));
        records
    }

    /// The rings' counters.
    pub fn counters(&self) -> MmapEventCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_across_the_end_of_the_ring_is_copied_whole() {
        let data: Vec<u8> = (0..16).collect();
        let mut out = Vec::new();
        copy_wrapped(&data, 12, 8, &mut out);
        assert_eq!(out, [12, 13, 14, 15, 0, 1, 2, 3]);
        copy_wrapped(&data, 4, 4, &mut out);
        assert_eq!(out, [4, 5, 6, 7]);
    }

    /// Real records of a real program: root can open the events (CI is root); a machine that
    /// refuses says why.
    #[test]
    fn an_exec_and_its_mappings_are_recorded() {
        let mut events = MmapEvents::open().expect(
            "cannot open the side-band perf events (needs root or perf_event_paranoid <= -1)",
        );
        let child = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = child.id();
        let status = child.wait_with_output().unwrap().status;
        assert!(status.success());
        let records = events.drain();
        let mut log = super::super::mapping_log::MappingLog::default();
        log.apply(records, sys::monotonic_ns());
        let process = log.get(pid).expect("the child's exec was recorded");
        assert_eq!(process.command, "true");
        let exe = process.executable().expect("its executable was recorded");
        assert!(exe.ends_with("true"), "{exe}");
        assert!(
            process.mappings.iter().any(|m| m.path.contains("ld-linux")),
            "{:?}",
            process.mappings
        );
        assert!(process.exited_ns.is_some());
        assert_eq!(events.counters().malformed, 0);
    }
}
