//! What the kernel's side-band records say each process mapped for execution since its last
//! `execve`: the mappings of a process that exited before its `/proc/PID/maps` could be read.
//!
//! The BPF ring is read every few tens of milliseconds, so the exec event of a program that runs
//! for 5 ms is handled after the program is gone, and `/proc` no longer answers: every one of
//! its samples was `[unknown]`. The kernel writes an `MMAP2` record as each executable mapping
//! is made (`perf record` builds its whole picture of a process so), and the log replays them.
//!
//! Only processes whose whole image the log saw are followed: from an `execve` (the `COMM`
//! record it writes comes before the new image's mappings), or from a fork of such a process
//! (the child maps what its parent did). Mappings of other processes are not kept. `munmap` is
//! not reported: a later mapping over an older one's range replaces that part, as `mmap` did.
//!
//! Pure state: the records come from [`super::mmap_events`], the answers go to
//! [`super::ProcessTable`]. Bounded: a process keeps at most [`MAX_MAPPINGS_PER_PROCESS`]
//! mappings, the log [`MAX_MAPPINGS`] in all; past that, processes that exited go first, then
//! those followed longest. When the kernel loses records, every process is forgotten: any
//! could be missing its `execve`.

use std::{collections::HashMap, sync::Arc};

use vmscope_parse::perf_record::{Mmap, Record};

use crate::sys::FileId;

/// Most mappings kept for one process: a JIT that maps a code page at a time stops being
/// followed (its `/proc/PID/maps` is read while it lives anyway).
pub const MAX_MAPPINGS_PER_PROCESS: usize = 8192;

/// Most mappings kept in all (a few tens of bytes each, the paths shared).
pub const MAX_MAPPINGS: usize = 262_144;

/// How long a process that exited is kept: its samples are all read well within this.
pub const KEEP_EXITED_NS: u64 = 5_000_000_000;

/// One executable mapping as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedMapping {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// The file's identity; `None` for anonymous memory and for a record that gave a build id.
    pub file: Option<FileId>,
    /// The path as the kernel named it (`//anon`, `[vdso]`, ... for memory of no file).
    pub path: Arc<str>,
    /// Whether this is the main executable: the first file mapped after the `execve`.
    pub main: bool,
}

impl RecordedMapping {
    /// Whether this is anonymous memory (JIT code).
    pub fn is_anonymous(&self) -> bool {
        self.path.starts_with("//anon")
    }

    /// Whether this is the vDSO.
    pub fn is_vdso(&self) -> bool {
        &*self.path == "[vdso]"
    }
}

/// Whether the kernel's name of a mapping is a file's path, not `//anon`, `[vdso]` and the like.
fn names_file(path: &str) -> bool {
    path.starts_with('/') && !path.starts_with("//")
}

/// What the log knows of one process.
#[derive(Clone, Debug, Default)]
pub struct RecordedProcess {
    /// The name its last `execve` gave it (empty if it was followed from a fork and never
    /// exec'd).
    pub command: String,
    /// When the process was forked, if the log saw it: a process known from before is another.
    pub born_ns: Option<u64>,
    /// When its last `execve` was.
    pub exec_ns: Option<u64>,
    /// When its leader exited.
    pub exited_ns: Option<u64>,
    /// Executable mappings, sorted by start and disjoint.
    pub mappings: Vec<RecordedMapping>,
    /// It mapped more than [`MAX_MAPPINGS_PER_PROCESS`]: what is kept is not its whole image.
    pub overflowed: bool,
}

impl RecordedProcess {
    /// The main executable's path, if one was mapped.
    pub fn executable(&self) -> Option<&str> {
        self.mappings.iter().find(|m| m.main).map(|m| &*m.path)
    }

    /// Adds a mapping, replacing whatever part of older ones it covers.
    fn map(&mut self, mapping: RecordedMapping) {
        let (start, end) = (mapping.start, mapping.end);
        let first = self.mappings.partition_point(|m| m.end <= start);
        let last = self.mappings.partition_point(|m| m.start < end);
        let mut kept = Vec::new();
        for old in self.mappings.drain(first..last) {
            if old.start < start {
                kept.push(RecordedMapping {
                    end: start,
                    ..old.clone()
                });
            }
            if old.end > end {
                kept.push(RecordedMapping {
                    start: end,
                    offset: old.offset + (end - old.start),
                    ..old
                });
            }
        }
        kept.push(mapping);
        kept.sort_by_key(|m| m.start);
        self.mappings.splice(first..first, kept);
    }
}

/// Counters of the log, reported by the daemon.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MappingLogCounters {
    /// Records applied.
    pub records: u64,
    /// Records the kernel dropped for want of room in its buffers (their mappings are missing).
    pub lost: u64,
    /// Mappings not kept: their process had too many, or the log was full.
    pub dropped: u64,
    /// Processes forgotten early: the log was full, or the kernel lost records.
    pub evicted: u64,
}

/// The executable mappings of the processes followed since their `execve`.
#[derive(Debug, Default)]
pub struct MappingLog {
    processes: HashMap<u32, RecordedProcess, foldhash::fast::RandomState>,
    /// Mappings kept, all processes together.
    total: usize,
    /// Paths seen, shared by the mappings (a fork copies its parent's).
    paths: HashMap<String, Arc<str>, foldhash::fast::RandomState>,
    /// Exits in the order they came, to forget their processes [`KEEP_EXITED_NS`] later without
    /// a scan of every process at each batch of records.
    exits: std::collections::VecDeque<(u64, u32)>,
    counters: MappingLogCounters,
}

impl MappingLog {
    /// The log's counters.
    pub fn counters(&self) -> MappingLogCounters {
        self.counters
    }

    /// What the log knows of `pid`: its whole image since its `execve` or its fork, or nothing.
    pub fn get(&self, pid: u32) -> Option<&RecordedProcess> {
        self.processes.get(&pid).filter(|p| !p.overflowed)
    }

    /// Processes followed.
    pub fn len(&self) -> usize {
        self.processes.len()
    }

    /// Whether no process is followed.
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }

    /// Applies records in time order, then forgets processes that exited more than
    /// [`KEEP_EXITED_NS`] before `now_ns`.
    pub fn apply(&mut self, records: impl IntoIterator<Item = Record>, now_ns: u64) {
        for record in records {
            self.counters.records += 1;
            self.apply_one(record);
        }
        let mut forgot = false;
        while let Some(&(at, pid)) = self.exits.front() {
            if now_ns.saturating_sub(at) <= KEEP_EXITED_NS {
                break;
            }
            self.exits.pop_front();
            // Unless the pid holds another process since (a fork, an exec after the exit).
            if self
                .processes
                .get(&pid)
                .is_some_and(|p| p.exited_ns == Some(at))
                && let Some(gone) = self.processes.remove(&pid)
            {
                self.total -= gone.mappings.len();
                forgot = true;
            }
        }
        if forgot {
            let paths = &mut self.paths;
            paths.retain(|_, path| Arc::strong_count(path) > 1);
        }
    }

    /// Counts records the kernel could not write, and forgets every process followed: which
    /// ones the lost records were of is not said, and a process whose `execve` went unrecorded
    /// would be taken for its old program.
    pub fn lost(&mut self, records: u64) {
        self.counters.lost += records;
        self.counters.evicted += self.processes.len() as u64;
        self.processes.clear();
        self.paths.clear();
        self.exits.clear();
        self.total = 0;
    }

    fn apply_one(&mut self, record: Record) {
        match record {
            Record::Comm {
                pid,
                tid,
                name,
                exec: true,
                id,
            } if pid == tid => {
                let old = self.processes.insert(
                    pid,
                    RecordedProcess {
                        command: name,
                        exec_ns: Some(id.time_ns),
                        ..Default::default()
                    },
                );
                // The same process, whose old image is gone: its birth stays known.
                if let Some(old) = old {
                    self.total -= old.mappings.len();
                    let process = self.processes.get_mut(&pid).expect("inserted");
                    process.born_ns = old.born_ns.filter(|_| old.exited_ns.is_none());
                }
            }
            Record::Fork { pid, ppid, id, .. } if pid != ppid => {
                if let Some(old) = self.processes.remove(&pid) {
                    self.total -= old.mappings.len();
                }
                let Some(parent) = self.processes.get(&ppid).filter(|p| !p.overflowed) else {
                    return;
                };
                let child = RecordedProcess {
                    command: parent.command.clone(),
                    born_ns: Some(id.time_ns),
                    exec_ns: None,
                    exited_ns: None,
                    mappings: parent.mappings.clone(),
                    overflowed: false,
                };
                if !self.make_room(child.mappings.len(), pid) {
                    self.counters.dropped += child.mappings.len() as u64;
                    return;
                }
                self.total += child.mappings.len();
                self.processes.insert(pid, child);
            }
            Record::Exit { pid, tid, id } if pid == tid => {
                if let Some(process) = self.processes.get_mut(&pid) {
                    process.exited_ns = Some(id.time_ns);
                    self.exits.push_back((id.time_ns, pid));
                }
            }
            Record::Mmap(mmap, _) => self.mapped(mmap),
            Record::Lost { lost } => self.lost(lost),
            _ => {}
        }
    }

    fn mapped(&mut self, mmap: Mmap) {
        if !mmap.exec || mmap.len == 0 {
            return;
        }
        let Some(process) = self.processes.get(&mmap.pid) else {
            return;
        };
        if process.overflowed {
            return;
        }
        if process.mappings.len() >= MAX_MAPPINGS_PER_PROCESS {
            // Not its whole image any more: never answered for, and its mappings go.
            self.counters.dropped += 1;
            let process = self.processes.get_mut(&mmap.pid).expect("found above");
            self.total -= process.mappings.len();
            process.mappings = Vec::new();
            process.overflowed = true;
            return;
        }
        if !self.make_room(1, mmap.pid) {
            self.counters.dropped += 1;
            return;
        }
        let path = match self.paths.get(mmap.filename.as_str()) {
            Some(path) => path.clone(),
            None => {
                let path: Arc<str> = Arc::from(mmap.filename.as_str());
                self.paths.insert(mmap.filename, path.clone());
                path
            }
        };
        let process = self.processes.get_mut(&mmap.pid).expect("found above");
        let is_file = names_file(&path);
        let file = mmap
            .file
            .filter(|_| is_file)
            .map(|(dev_major, dev_minor, inode)| FileId {
                dev_major,
                dev_minor,
                inode,
            });
        let main = is_file && process.exec_ns.is_some() && !process.mappings.iter().any(|m| m.main);
        let before = process.mappings.len();
        process.map(RecordedMapping {
            start: mmap.start,
            end: mmap.start.saturating_add(mmap.len),
            offset: mmap.pgoff,
            file,
            path,
            main,
        });
        self.total = self.total + process.mappings.len() - before;
    }

    /// Makes room for `more` mappings of `pid` within [`MAX_MAPPINGS`]: forgets the processes
    /// that exited, then those followed longest, never `pid`. Answers whether there is room.
    fn make_room(&mut self, more: usize, pid: u32) -> bool {
        if self.total + more <= MAX_MAPPINGS {
            return true;
        }
        let mut victims: Vec<(bool, u64, u32)> = self
            .processes
            .iter()
            .filter(|&(&p, _)| p != pid)
            .map(|(&p, r)| {
                (
                    r.exited_ns.is_none(),
                    r.exec_ns.or(r.born_ns).unwrap_or(0),
                    p,
                )
            })
            .collect();
        // Exited first, then the oldest.
        victims.sort_unstable();
        for (_, _, victim) in victims {
            if self.total + more <= MAX_MAPPINGS {
                break;
            }
            if let Some(gone) = self.processes.remove(&victim) {
                self.total -= gone.mappings.len();
                self.counters.evicted += 1;
            }
        }
        self.total + more <= MAX_MAPPINGS
    }

    /// Mappings kept, all processes together.
    pub fn total_mappings(&self) -> usize {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use vmscope_parse::perf_record::RecordId;

    use super::*;

    fn id(pid: u32, time_ns: u64) -> RecordId {
        RecordId {
            pid,
            tid: pid,
            time_ns,
        }
    }

    fn exec(pid: u32, name: &str, t: u64) -> Record {
        Record::Comm {
            pid,
            tid: pid,
            name: name.into(),
            exec: true,
            id: id(pid, t),
        }
    }

    fn mmap(pid: u32, start: u64, len: u64, pgoff: u64, path: &str, t: u64) -> Record {
        let file = (!path.starts_with("//") && !path.starts_with('[')).then_some((8, 1, 42));
        Record::Mmap(
            Mmap {
                pid,
                start,
                len,
                pgoff,
                file,
                exec: true,
                filename: path.into(),
            },
            id(pid, t),
        )
    }

    fn fork(pid: u32, ppid: u32, t: u64) -> Record {
        Record::Fork {
            pid,
            ppid,
            tid: pid,
            id: id(pid, t),
        }
    }

    fn ranges(p: &RecordedProcess) -> Vec<(u64, u64, u64, &str)> {
        p.mappings
            .iter()
            .map(|m| (m.start, m.end, m.offset, &*m.path))
            .collect()
    }

    #[test]
    fn an_exec_starts_the_image_and_its_first_file_is_the_main_executable() {
        let mut log = MappingLog::default();
        log.apply(
            [
                // Before the exec: a process the log does not follow.
                mmap(7, 0x1000, 0x1000, 0, "/bin/sh", 1),
                exec(7, "cost", 2),
                mmap(7, 0x5000, 0x2000, 0x1000, "/tmp/cost", 3),
                mmap(7, 0x7f00_0000, 0x1000, 0x7f00_0000, "//anon", 4),
                mmap(7, 0x7e00_0000, 0x3000, 0x2000, "/usr/lib/ld.so", 5),
                mmap(7, 0x7fff_0000, 0x2000, 0, "[vdso]", 6),
            ],
            10,
        );
        let p = log.get(7).unwrap();
        assert_eq!(p.command, "cost");
        assert_eq!(p.exec_ns, Some(2));
        assert_eq!(p.executable(), Some("/tmp/cost"));
        assert_eq!(
            ranges(p),
            [
                (0x5000, 0x7000, 0x1000, "/tmp/cost"),
                (0x7e00_0000, 0x7e00_3000, 0x2000, "/usr/lib/ld.so"),
                (0x7f00_0000, 0x7f00_1000, 0x7f00_0000, "//anon"),
                (0x7fff_0000, 0x7fff_2000, 0, "[vdso]"),
            ]
        );
        assert!(p.mappings[2].is_anonymous() && p.mappings[2].file.is_none());
        assert!(p.mappings[3].is_vdso() && !p.mappings[1].main);
        assert_eq!(log.total_mappings(), 4);
        assert_eq!(log.counters().records, 6);
        // A second exec replaces the image.
        log.apply([exec(7, "other", 20)], 21);
        assert!(log.get(7).unwrap().mappings.is_empty());
        assert_eq!(log.total_mappings(), 0);
    }

    #[test]
    fn a_mapping_over_older_ones_replaces_the_part_it_covers() {
        let mut log = MappingLog::default();
        log.apply(
            [
                exec(3, "vm", 1),
                mmap(3, 0x1000, 0x4000, 0x10000, "/a", 2),
                mmap(3, 0x6000, 0x1000, 0, "/b", 3),
                // Over the middle of /a and before /b.
                mmap(3, 0x2000, 0x1000, 0x6000_0000, "//anon", 4),
                // Exactly over /b.
                mmap(3, 0x6000, 0x1000, 0x6000, "//anon", 5),
            ],
            6,
        );
        assert_eq!(
            ranges(log.get(3).unwrap()),
            [
                (0x1000, 0x2000, 0x10000, "/a"),
                (0x2000, 0x3000, 0x6000_0000, "//anon"),
                (0x3000, 0x5000, 0x12000, "/a"),
                (0x6000, 0x7000, 0x6000, "//anon"),
            ]
        );
        assert_eq!(log.total_mappings(), 4);
    }

    #[test]
    fn a_fork_copies_a_followed_parent_and_exits_are_forgotten_after_a_while() {
        let mut log = MappingLog::default();
        log.apply(
            [
                exec(10, "shell", 1),
                mmap(10, 0x1000, 0x1000, 0, "/bin/sh", 2),
                fork(11, 10, 3),
                // A thread: not a process.
                Record::Fork {
                    pid: 10,
                    ppid: 10,
                    tid: 12,
                    id: id(10, 4),
                },
                // A child of a process the log does not follow.
                fork(20, 99, 5),
                mmap(20, 0x1000, 0x1000, 0, "/x", 6),
            ],
            7,
        );
        let child = log.get(11).unwrap();
        assert_eq!(child.born_ns, Some(3));
        assert_eq!(ranges(child), [(0x1000, 0x2000, 0, "/bin/sh")]);
        assert_eq!(log.get(20).map(|p| p.mappings.len()), None);
        assert_eq!(log.total_mappings(), 2);
        // The child exec's: the same process, its birth kept.
        log.apply([exec(11, "cost", 8)], 9);
        assert_eq!(log.get(11).unwrap().born_ns, Some(3));
        log.apply(
            [Record::Exit {
                pid: 11,
                tid: 11,
                id: id(11, 10),
            }],
            11,
        );
        assert_eq!(log.get(11).unwrap().exited_ns, Some(10));
        log.apply([], 10 + KEEP_EXITED_NS);
        assert!(log.get(11).is_some());
        log.apply([], 11 + KEEP_EXITED_NS);
        assert!(log.get(11).is_none());
        assert_eq!(log.len(), 1);
        assert_eq!(log.total_mappings(), 1);
    }

    #[test]
    fn lost_records_forget_every_process() {
        let mut log = MappingLog::default();
        log.apply([exec(1, "a", 1), mmap(1, 0x1000, 0x1000, 0, "/a", 2)], 3);
        // Lost records sort first in a drain: what follows them is followed again.
        log.apply(
            [
                Record::Lost { lost: 3 },
                exec(2, "b", 4),
                mmap(2, 0x1000, 0x1000, 0, "/b", 5),
            ],
            6,
        );
        assert!(log.get(1).is_none());
        assert_eq!(log.get(2).unwrap().executable(), Some("/b"));
        assert_eq!(log.total_mappings(), 1);
        assert_eq!((log.counters().lost, log.counters().evicted), (3, 1));
    }

    #[test]
    fn the_log_stays_within_its_bounds() {
        let mut log = MappingLog::default();
        log.apply([exec(1, "jit", 1)], 1);
        let pages = (0..=MAX_MAPPINGS_PER_PROCESS as u64)
            .map(|i| mmap(1, 0x10_0000 + i * 0x2000, 0x1000, 0, "//anon", 2 + i));
        log.apply(pages, 3);
        // Past its bound a process is not followed: it is no longer its whole image.
        assert!(log.get(1).is_none());
        assert_eq!(log.total_mappings(), 0);
        assert_eq!(log.counters().dropped, 1);

        // Processes that fill the log: the exited one goes first, then the oldest.
        let mut log = MappingLog::default();
        let per = 4096;
        let count = MAX_MAPPINGS / per;
        for pid in 0..count as u32 + 1 {
            let t = u64::from(pid) * 10_000;
            let mut records = vec![exec(pid + 100, "p", t)];
            records.extend((0..per as u64).map(|i| {
                mmap(
                    pid + 100,
                    0x10_0000 + i * 0x2000,
                    0x1000,
                    0,
                    "//anon",
                    t + 1,
                )
            }));
            if pid == 5 {
                records.push(Record::Exit {
                    pid: 105,
                    tid: 105,
                    id: id(105, t + 2),
                });
            }
            log.apply(records, t + 3);
        }
        assert!(log.total_mappings() <= MAX_MAPPINGS);
        assert!(log.get(105).is_none(), "the exited process goes first");
        assert!(log.get(100).is_some());
        assert!(log.get(count as u32 + 100).is_some());
        assert_eq!(log.counters().evicted, 1);
    }
}
