//! The kernel's side-band perf records: the mappings, program names, forks and exits that a
//! perf event opened with `mmap2`, `comm`, `comm_exec`, `task` and `sample_id_all` reports.
//!
//! The kernel writes an `MMAP2` record while the `mmap` is made, so a process that exits before
//! anyone reads its `/proc/PID/maps` is still known by what it mapped: what `perf record` relies
//! on for short-lived programs, and what the daemon keeps when `/proc` no longer answers.
//!
//! Records are read as the kernel lays them out (`include/uapi/linux/perf_event.h`): an 8-byte
//! header (type, misc, size), the record's fields, then the `sample_id` trailer. This parser
//! expects the trailer of `sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME` (pid, tid, time: 16
//! bytes), which is what the daemon asks for. Records of other types are [`Record::Other`].

use thiserror::Error;

/// `PERF_RECORD_LOST`.
const LOST: u32 = 2;
/// `PERF_RECORD_COMM`.
const COMM: u32 = 3;
/// `PERF_RECORD_EXIT`.
const EXIT: u32 = 4;
/// `PERF_RECORD_FORK`.
const FORK: u32 = 7;
/// `PERF_RECORD_MMAP2`.
const MMAP2: u32 = 10;

/// `PERF_RECORD_MISC_COMM_EXEC`: the name was set by `execve`.
const MISC_COMM_EXEC: u16 = 1 << 13;
/// `PERF_RECORD_MISC_MMAP_BUILD_ID`: an `MMAP2` record carries a build id instead of the
/// file's device and inode.
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;

/// Bytes of the `sample_id` trailer for `PERF_SAMPLE_TID | PERF_SAMPLE_TIME`.
const TRAILER: usize = 16;

/// `PROT_EXEC`.
const PROT_EXEC: u32 = 4;

/// The size of a record's header, and the least a record can be.
pub const HEADER_SIZE: usize = 8;

/// A record cut short or inconsistent with its header.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PerfRecordError {
    /// Fewer bytes than the header, or than the header's size says.
    #[error("perf record cut short: {have} bytes of {need}")]
    Short {
        /// Bytes there are.
        have: usize,
        /// Bytes the record needs.
        need: usize,
    },
    /// A size smaller than the record's type has fields.
    #[error("perf record of type {kind} is {size} bytes, too small for its fields")]
    TooSmall {
        /// The record's type.
        kind: u32,
        /// The size its header gives.
        size: usize,
    },
}

/// Where and when a record was made: the `sample_id` trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordId {
    /// Process id of the task the record is about.
    pub pid: u32,
    /// Its thread id.
    pub tid: u32,
    /// Time of the record on the event's clock (the daemon asks for CLOCK_MONOTONIC).
    pub time_ns: u64,
}

/// An `MMAP2` record: a mapping made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mmap {
    /// Process that mapped.
    pub pid: u32,
    /// First address.
    pub start: u64,
    /// Bytes mapped.
    pub len: u64,
    /// File offset of `start` (anonymous memory: the address itself, in pages).
    pub pgoff: u64,
    /// The file's device and inode (`None` when the kernel sent a build id instead).
    pub file: Option<(u32, u32, u64)>,
    /// Whether the mapping is executable.
    pub exec: bool,
    /// The file's path as the kernel names it (`//anon`, `[vdso]`, ... for others).
    pub filename: String,
}

/// One side-band record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A mapping made.
    Mmap(Mmap, RecordId),
    /// A thread named; `exec` when the name came with an `execve`, whose new image's mappings
    /// follow.
    Comm {
        /// The process.
        pid: u32,
        /// The thread.
        tid: u32,
        /// Its new name.
        name: String,
        /// Whether `execve` set it.
        exec: bool,
        /// When.
        id: RecordId,
    },
    /// A task forked: a new process when `pid != ppid`, a thread otherwise.
    Fork {
        /// The new task's process.
        pid: u32,
        /// Its parent's process.
        ppid: u32,
        /// The new task.
        tid: u32,
        /// When.
        id: RecordId,
    },
    /// A task exited: its process when `pid == tid`.
    Exit {
        /// The task's process.
        pid: u32,
        /// The task.
        tid: u32,
        /// When.
        id: RecordId,
    },
    /// The kernel dropped records for want of room: so many.
    Lost {
        /// Records dropped.
        lost: u64,
    },
    /// A record of another type, skipped.
    Other {
        /// Its type.
        kind: u32,
    },
}

impl Record {
    /// When the record was made, if it says (all but [`Record::Lost`] and [`Record::Other`]).
    pub fn time_ns(&self) -> Option<u64> {
        match self {
            Record::Mmap(_, id)
            | Record::Comm { id, .. }
            | Record::Fork { id, .. }
            | Record::Exit { id, .. } => Some(id.time_ns),
            Record::Lost { .. } | Record::Other { .. } => None,
        }
    }
}

/// The size of the record that starts `bytes`, from its header: how far the next one is.
pub fn record_size(bytes: &[u8]) -> Result<usize, PerfRecordError> {
    if bytes.len() < HEADER_SIZE {
        return Err(PerfRecordError::Short {
            have: bytes.len(),
            need: HEADER_SIZE,
        });
    }
    let size = usize::from(u16::from_ne_bytes([bytes[6], bytes[7]]));
    if size < HEADER_SIZE {
        return Err(PerfRecordError::TooSmall {
            kind: u32_at(bytes, 0),
            size,
        });
    }
    Ok(size)
}

/// Parses the one record that `bytes` holds (its header's size must be `bytes.len()` or less;
/// what follows it is ignored).
pub fn parse_record(bytes: &[u8]) -> Result<Record, PerfRecordError> {
    let size = record_size(bytes)?;
    if bytes.len() < size {
        return Err(PerfRecordError::Short {
            have: bytes.len(),
            need: size,
        });
    }
    let record = &bytes[..size];
    let kind = u32_at(record, 0);
    let misc = u16::from_ne_bytes([record[4], record[5]]);
    // The least each type's fields and trailer take.
    let least = match kind {
        MMAP2 => HEADER_SIZE + 64 + TRAILER,
        COMM => HEADER_SIZE + 8 + TRAILER,
        FORK | EXIT => HEADER_SIZE + 24 + TRAILER,
        LOST => HEADER_SIZE + 16,
        _ => return Ok(Record::Other { kind }),
    };
    if size < least {
        return Err(PerfRecordError::TooSmall { kind, size });
    }
    let body = &record[HEADER_SIZE..];
    let id = || {
        let trailer = &record[size - TRAILER..];
        RecordId {
            pid: u32_at(trailer, 0),
            tid: u32_at(trailer, 4),
            time_ns: u64_at(trailer, 8),
        }
    };
    Ok(match kind {
        MMAP2 => {
            let file = (misc & MISC_MMAP_BUILD_ID == 0)
                .then(|| (u32_at(body, 32), u32_at(body, 36), u64_at(body, 40)));
            Record::Mmap(
                Mmap {
                    pid: u32_at(body, 0),
                    start: u64_at(body, 8),
                    len: u64_at(body, 16),
                    pgoff: u64_at(body, 24),
                    file,
                    exec: u32_at(body, 56) & PROT_EXEC != 0,
                    filename: c_string(&body[64..size - HEADER_SIZE - TRAILER]),
                },
                id(),
            )
        }
        COMM => Record::Comm {
            pid: u32_at(body, 0),
            tid: u32_at(body, 4),
            name: c_string(&body[8..size - HEADER_SIZE - TRAILER]),
            exec: misc & MISC_COMM_EXEC != 0,
            id: id(),
        },
        FORK => Record::Fork {
            pid: u32_at(body, 0),
            ppid: u32_at(body, 4),
            tid: u32_at(body, 8),
            id: id(),
        },
        EXIT => Record::Exit {
            pid: u32_at(body, 0),
            tid: u32_at(body, 8),
            id: id(),
        },
        LOST => Record::Lost {
            lost: u64_at(body, 8),
        },
        _ => unreachable!("other types returned above"),
    })
}

/// The text up to the first NUL (the kernel pads names to 8 bytes), invalid UTF-8 replaced.
fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u32, misc: u16, size: usize) -> Vec<u8> {
        let mut b = kind.to_ne_bytes().to_vec();
        b.extend(misc.to_ne_bytes());
        b.extend(u16::try_from(size).unwrap().to_ne_bytes());
        b
    }

    fn trailer(pid: u32, tid: u32, time: u64) -> Vec<u8> {
        let mut b = pid.to_ne_bytes().to_vec();
        b.extend(tid.to_ne_bytes());
        b.extend(time.to_ne_bytes());
        b
    }

    /// An MMAP2 record as the kernel writes it: the name NUL-padded to 8 bytes.
    fn mmap2(pid: u32, start: u64, prot: u32, name: &str, time: u64) -> Vec<u8> {
        let mut body = pid.to_ne_bytes().to_vec();
        body.extend((pid + 1).to_ne_bytes()); // tid
        body.extend(start.to_ne_bytes());
        body.extend(0x2000u64.to_ne_bytes()); // len
        body.extend(0x1000u64.to_ne_bytes()); // pgoff
        body.extend(259u32.to_ne_bytes()); // maj
        body.extend(3u32.to_ne_bytes()); // min
        body.extend(123_456u64.to_ne_bytes()); // ino
        body.extend(7u64.to_ne_bytes()); // ino_generation
        body.extend(prot.to_ne_bytes());
        body.extend(2u32.to_ne_bytes()); // MAP_PRIVATE
        body.extend(name.as_bytes());
        body.push(0);
        while !body.len().is_multiple_of(8) {
            body.push(0);
        }
        body.extend(trailer(pid, pid + 1, time));
        let mut record = header(MMAP2, 2, HEADER_SIZE + body.len());
        record.extend(body);
        record
    }

    #[test]
    fn an_mmap2_record_gives_the_mapping_its_file_and_its_time() {
        let bytes = mmap2(4242, 0x5555_0000_0000, 5, "/usr/bin/cost", 99);
        assert_eq!(record_size(&bytes).unwrap(), bytes.len());
        let Record::Mmap(m, id) = parse_record(&bytes).unwrap() else {
            panic!("not an mmap");
        };
        assert_eq!(m.pid, 4242);
        assert_eq!(m.start, 0x5555_0000_0000);
        assert_eq!(m.len, 0x2000);
        assert_eq!(m.pgoff, 0x1000);
        assert_eq!(m.file, Some((259, 3, 123_456)));
        assert!(m.exec);
        assert_eq!(m.filename, "/usr/bin/cost");
        assert_eq!(
            id,
            RecordId {
                pid: 4242,
                tid: 4243,
                time_ns: 99
            }
        );
        // Not executable (PROT_READ | PROT_WRITE).
        let Record::Mmap(m, _) = parse_record(&mmap2(1, 0x1000, 3, "data", 1)).unwrap() else {
            panic!("not an mmap");
        };
        assert!(!m.exec);
    }

    #[test]
    fn a_build_id_mmap2_has_no_inode() {
        let mut bytes = mmap2(1, 0x1000, 4, "/lib/x.so", 1);
        bytes[4..6].copy_from_slice(&(2 | MISC_MMAP_BUILD_ID).to_ne_bytes());
        let Record::Mmap(m, _) = parse_record(&bytes).unwrap() else {
            panic!("not an mmap");
        };
        assert_eq!(m.file, None);
    }

    #[test]
    fn comm_fork_exit_and_lost_records() {
        let mut comm = 77u32.to_ne_bytes().to_vec();
        comm.extend(77u32.to_ne_bytes());
        comm.extend(b"cost\0\0\0\0");
        comm.extend(trailer(77, 77, 5));
        let mut bytes = header(COMM, MISC_COMM_EXEC, HEADER_SIZE + comm.len());
        bytes.extend(comm);
        assert_eq!(
            parse_record(&bytes).unwrap(),
            Record::Comm {
                pid: 77,
                tid: 77,
                name: "cost".into(),
                exec: true,
                id: RecordId {
                    pid: 77,
                    tid: 77,
                    time_ns: 5
                }
            }
        );

        let task = |kind: u32| {
            let mut body = Vec::new();
            for v in [80u32, 77, 80, 77] {
                body.extend(v.to_ne_bytes());
            }
            body.extend(6u64.to_ne_bytes());
            body.extend(trailer(80, 80, 6));
            let mut bytes = header(kind, 0, HEADER_SIZE + body.len());
            bytes.extend(body);
            bytes
        };
        let id = RecordId {
            pid: 80,
            tid: 80,
            time_ns: 6,
        };
        assert_eq!(
            parse_record(&task(FORK)).unwrap(),
            Record::Fork {
                pid: 80,
                ppid: 77,
                tid: 80,
                id
            }
        );
        assert_eq!(
            parse_record(&task(EXIT)).unwrap(),
            Record::Exit {
                pid: 80,
                tid: 80,
                id
            }
        );

        let mut lost = header(LOST, 0, HEADER_SIZE + 16);
        lost.extend(1u64.to_ne_bytes());
        lost.extend(12u64.to_ne_bytes());
        assert_eq!(parse_record(&lost).unwrap(), Record::Lost { lost: 12 });
        assert_eq!(
            parse_record(&header(99, 0, 8)).unwrap(),
            Record::Other { kind: 99 }
        );
    }

    #[test]
    fn cut_or_inconsistent_records_are_errors() {
        let bytes = mmap2(1, 0x1000, 4, "/bin/x", 1);
        assert!(matches!(
            parse_record(&bytes[..bytes.len() - 1]),
            Err(PerfRecordError::Short { .. })
        ));
        assert!(matches!(
            parse_record(&bytes[..5]),
            Err(PerfRecordError::Short { .. })
        ));
        // A header that claims less than an MMAP2's fields.
        let mut small = bytes.clone();
        small[6..8].copy_from_slice(&40u16.to_ne_bytes());
        assert_eq!(
            parse_record(&small),
            Err(PerfRecordError::TooSmall {
                kind: MMAP2,
                size: 40
            })
        );
        // Smaller than a header: no way to the next record.
        let mut tiny = bytes;
        tiny[6..8].copy_from_slice(&4u16.to_ne_bytes());
        assert!(matches!(
            record_size(&tiny),
            Err(PerfRecordError::TooSmall { size: 4, .. })
        ));
    }
}
