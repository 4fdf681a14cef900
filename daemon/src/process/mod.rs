//! Processes the daemon has sampled: their executable mappings, and the normalisation of a
//! sample's `(pid, ip)` into a [`Location`].
//!
//! Mappings are read from `/proc/PID/maps` when a process is first seen (at session start for
//! named targets, so that even a process that exits quickly is known), again after `execve`
//! (reported by the BPF exec tracepoint), and again when a sample falls outside every known
//! mapping (`dlopen`, a new JIT code zone), at most once per [`MIN_REFRESH_INTERVAL_NS`]. A
//! caller's return address outside them reads them again too (new code is not always seen
//! as a leaf first: CPython's perf trampolines run for a few instructions per call, and show
//! up as callers), backing off to [`MAX_CALLER_REFRESH_INTERVAL_NS`] while such reads find
//! nothing, since a frame-pointer walk through code without frame pointers yields garbage.
//! Only executable mappings are kept: a sampled instruction pointer cannot be anywhere else.
//!
//! The binaries behind file mappings are registered with [`Modules`] at once, which opens them,
//! so that a binary that is deleted or replaced later, or a process that exits, can still be
//! symbolised. The table tells the registry which binaries its live processes map
//! ([`ProcessTable::modules_in_use`]); once a process has exited and every sample it took has
//! been read, its binaries stay open only if a session has samples in them.
//!
//! A process gone before its maps could be read (a program that ran for a few milliseconds,
//! whose exec event was read from the ring after its end) is known by what the kernel recorded
//! it mapping since its `execve` ([`mapping_log`], read by [`mmap_events`]): its mappings, its
//! executable, its name.
//!
//! A process is its pid and its start time ([`life`]): a read of `/proc/PID` that finds another
//! start time is of another process, and never replaces what the table knows of the old one
//! (whose samples may still be on their way). Once a process is known to have exited (an exit
//! event, or another process found under its pid), samples stamped after its end read the pid
//! afresh; samples stamped before keep its mappings.

use std::{
    collections::HashMap,
    ops::Range,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use vmscope_parse::{
    maps::{self, MapEntry, MapPath},
    perf_record::Record,
    stat,
};

use crate::{
    symbolize::Modules,
    sys::{self, FileId},
    vocab::{
        Executable, Location, MappedCodeMapFile, MappedFileKind, ModuleId, Unexplained,
        UnmappedReason,
    },
};

pub mod access;
pub mod life;
pub mod mapping_log;
pub mod mmap_events;

pub use access::{AccessCounters, ProcessAccess};

/// Shortest time between two reads of one process's maps caused by samples that fit no mapping.
pub const MIN_REFRESH_INTERVAL_NS: u64 = 10_000_000;

/// Longest time between two reads of one process's maps caused by callers that fit no mapping,
/// once such reads keep finding nothing new.
pub const MAX_CALLER_REFRESH_INTERVAL_NS: u64 = 1_000_000_000;

/// Source of [`Process::maps_generation`]: global, so that a generation never repeats, even for
/// a reused pid or in another table.
static NEXT_MAPS_GENERATION: AtomicU64 = AtomicU64::new(1);

/// What an executable mapping holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MappingKind {
    File { module: ModuleId, main: bool },
    Anonymous,
    Vdso,
    Pseudo,
}

#[derive(Clone, Copy, Debug)]
struct ExecMapping {
    start: u64,
    end: u64,
    offset: u64,
    kind: MappingKind,
}

/// A sampled process.
#[derive(Debug)]
pub struct Process {
    /// Process id.
    pub pid: u32,
    /// `comm`, the process's name.
    pub command: String,
    /// Main executable, if it could be read.
    pub executable: Option<PathBuf>,
    /// Start time in clock ticks since boot: with the pid, the identity of the process.
    pub start_time: Option<u64>,
    /// Whether the process has anonymous executable mappings (JIT code).
    pub has_anonymous_code: bool,
    /// Set once the process could not be read any more.
    pub gone: bool,
    /// Its mappings are what the kernel recorded it mapping ([`mapping_log`]): it was gone, or
    /// a zombie, when read.
    pub from_records: bool,
    /// Its mappings did not answer in time (it holds its own memory lock, see [`access`]):
    /// none are known, and samples that need them say so.
    pub unreadable: bool,
    /// When it was known to have ended (CLOCK_MONOTONIC): samples of its pid stamped later are
    /// another process's, or its last threads'.
    pub exited_at_ns: Option<u64>,
    /// Its pid was found still its own, the process exiting or gone, at this time (a batch's
    /// watermark): samples stamped up to it are its last threads', with no need to look again.
    exiting_checked_ns: u64,
    /// The jitdump and code map files it maps (executable mappings, never executed).
    pub code_map_files: Vec<MappedCodeMapFile>,
    mappings: Vec<ExecMapping>,
    /// The other mappings' ranges (data, heap, stacks), sorted: a return address there is what
    /// a frame-pointer walk reads past code without frame pointers, never new code.
    data: Vec<(u64, u64)>,
    maps_generation: u64,
    maps_read_at_ns: u64,
    /// How long after the last read a caller outside every mapping may read the maps again:
    /// doubled by each such read that did not find it, back to the minimum when one does.
    caller_refresh_ns: u64,
    last_sample_ns: u64,
    /// When [`ProcessTable::modules_in_use`] first found it dead.
    dead_since_ns: Option<u64>,
}

impl Process {
    /// Changes whenever the mappings are read again: what was built from them (an unwinder's
    /// module list) is stale when its generation differs.
    pub fn maps_generation(&self) -> u64 {
        self.maps_generation
    }

    /// The executable file mappings, in address order: address range, file offset of its start,
    /// binary.
    pub fn file_mappings(&self) -> impl Iterator<Item = (Range<u64>, u64, ModuleId)> + '_ {
        self.mappings.iter().filter_map(|m| match m.kind {
            MappingKind::File { module, .. } => Some((m.start..m.end, m.offset, module)),
            _ => None,
        })
    }

    /// The address range of the vDSO, if the process maps one.
    pub fn vdso_mapping(&self) -> Option<Range<u64>> {
        self.mappings
            .iter()
            .find(|m| m.kind == MappingKind::Vdso)
            .map(|m| m.start..m.end)
    }

    /// Whether `address` lies in anonymous executable memory (JIT code).
    pub fn is_anonymous_code(&self, address: u64) -> bool {
        self.mapping_at(address)
            .is_some_and(|m| m.kind == MappingKind::Anonymous)
    }

    /// Whether `address` lies in one of the process's data mappings (heap, stacks, files
    /// mapped without execute permission), as last read.
    fn in_data(&self, address: u64) -> bool {
        let i = self.data.partition_point(|&(start, _)| start <= address);
        i.checked_sub(1).is_some_and(|i| address < self.data[i].1)
    }

    /// The executable mapping holding `address` (mappings are sorted and disjoint).
    fn mapping_at(&self, address: u64) -> Option<&ExecMapping> {
        let i = self.mappings.partition_point(|m| m.start <= address);
        let mapping = self.mappings.get(i.checked_sub(1)?)?;
        (address < mapping.end).then_some(mapping)
    }
}

/// Whether `address` can be code at all: above the first 64 KiB (`vm.mmap_min_addr`), below
/// the top of x86-64 user space. Small integers and kernel addresses are what a frame-pointer
/// walk reads past code without frame pointers.
fn plausible_code_address(address: u64) -> bool {
    (0x10000..0x8000_0000_0000).contains(&address)
}

/// Counters of the process table, reported by the daemon.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessCounters {
    /// Reads of /proc/PID/maps.
    pub maps_reads: u64,
    /// Reads of /proc/PID/maps that failed (process gone, permission).
    pub maps_read_failures: u64,
    /// Reads of /proc/PID/maps abandoned or refused because a read of the same user's
    /// processes did not answer in time ([`ProcessAccess`]).
    pub maps_reads_stalled: u64,
    /// Of the reads, those made for a caller's return address outside every known mapping.
    pub caller_refreshes: u64,
    /// Lines of /proc/PID/maps that could not be parsed.
    pub maps_bad_lines: u64,
    /// Processes found exited by [`ProcessTable::modules_in_use`].
    pub exits_noticed: u64,
    /// Reads of a known pid that found another process (another start time, or a running leader
    /// after the known one exited).
    pub pid_reuses: u64,
    /// Reads of a process gone (or a zombie) answered by the mappings the kernel recorded.
    pub maps_from_records: u64,
}

/// The processes the daemon knows, by pid.
#[derive(Debug)]
pub struct ProcessTable {
    /// foldhash: every frame of every sample looks its process up, and SipHash was a third of
    /// that time.
    processes: HashMap<u32, Process, foldhash::fast::RandomState>,
    modules: Arc<Modules>,
    access: Arc<ProcessAccess>,
    counters: ProcessCounters,
    /// What the kernel recorded processes mapping, for those gone before they were read.
    log: mapping_log::MappingLog,
}

impl ProcessTable {
    /// An empty table registering binaries with `modules`.
    pub fn new(modules: Arc<Modules>) -> ProcessTable {
        ProcessTable::with_access(modules, Arc::new(ProcessAccess::default()))
    }

    /// An empty table registering binaries with `modules`, reading processes through `access`
    /// (shared with whatever else reads them).
    pub fn with_access(modules: Arc<Modules>, access: Arc<ProcessAccess>) -> ProcessTable {
        ProcessTable {
            processes: HashMap::default(),
            modules,
            access,
            counters: ProcessCounters::default(),
            log: mapping_log::MappingLog::default(),
        }
    }

    /// The table's counters.
    pub fn counters(&self) -> ProcessCounters {
        self.counters
    }

    /// Takes in the side-band records read since the last call (in time order): the mappings
    /// of processes that may be gone by the time their samples are read.
    pub fn record(&mut self, records: Vec<Record>, now_ns: u64) {
        self.log.apply(records, now_ns);
    }

    /// The counters of the log of recorded mappings, and how many processes it follows.
    pub fn log_counters(&self) -> (mapping_log::MappingLogCounters, usize, usize) {
        (
            self.log.counters(),
            self.log.len(),
            self.log.total_mappings(),
        )
    }

    /// A known process.
    pub fn get(&self, pid: u32) -> Option<&Process> {
        self.processes.get(&pid)
    }

    /// The process that holds `pid` now, read afresh unless the table knows it already: what a
    /// new session names as its target. An entry for another process (another start time, or
    /// one that exited while a leader runs under its pid now) is replaced.
    pub fn identify(&mut self, pid: u32, now_ns: u64) -> &Process {
        if let Some(known) = self.processes.get(&pid) {
            let now = sys::read_proc(pid, "stat")
                .ok()
                .and_then(|text| stat::parse_stat(&text).ok());
            let same = now.as_ref().is_some_and(|now| {
                Some(now.start_time_ticks) == known.start_time
                    && (known.exited_at_ns.is_none() || now.is_zombie() || now.is_exiting())
            });
            if !same {
                if now.is_some() && known.start_time.is_some() {
                    self.counters.pid_reuses += 1;
                }
                self.processes.remove(&pid);
            }
        }
        self.observe(pid, now_ns)
    }

    /// Notes that the process known under `pid` ended at `at_ns` (an exit event): it is never
    /// read again, and samples stamped after it read the pid afresh ([`ProcessTable::sampled`]).
    /// An entry read after `at_ns` is of a later process, and stays.
    pub fn exited(&mut self, pid: u32, at_ns: u64) {
        if let Some(process) = self.processes.get_mut(&pid)
            && process.maps_read_at_ns <= at_ns
            && process.exited_at_ns.is_none()
        {
            process.gone = true;
            process.exited_at_ns = Some(at_ns);
        }
    }

    /// Called for each sample of `pid` stamped `timestamp_ns` before it is placed, `now_ns`
    /// being its batch's watermark (no sample of the batch is later): when the known process
    /// had ended before the sample, the pid is read again, and a process running there now
    /// replaces it. A zombie or threads on their way out leave it as it was, the last samples
    /// of the process that exited; and since no successor could hold the pid before that read,
    /// the rest of the batch is not read for again (a leader that exited before its threads
    /// would otherwise cost a read per sample).
    pub fn sampled(&mut self, pid: u32, timestamp_ns: u64, now_ns: u64) {
        let Some(known) = self.processes.get_mut(&pid) else {
            return;
        };
        if known.exited_at_ns.is_none_or(|at| timestamp_ns <= at)
            || timestamp_ns <= known.exiting_checked_ns
        {
            return;
        }
        let running = sys::read_proc(pid, "stat")
            .ok()
            .and_then(|text| stat::parse_stat(&text).ok())
            .is_some_and(|now| !now.is_zombie() && !now.is_exiting());
        if !running {
            known.exiting_checked_ns = now_ns;
            return;
        }
        // A successor after a known end: found already (an exit event, or counted where the
        // other start time was seen), so not counted again.
        let fresh = self.read_process(pid, now_ns);
        self.processes.insert(pid, fresh);
    }

    /// Keeps `fresh`, a new read of a known process, unless it is of another process: then the
    /// known one ended by `now_ns` (samples stamped later read the pid afresh). Returns whether
    /// `fresh` was kept.
    fn replace_if_same(&mut self, pid: u32, fresh: Process, now_ns: u64) -> bool {
        let Some(known) = self.processes.get_mut(&pid) else {
            self.processes.insert(pid, fresh);
            return true;
        };
        if known.start_time.is_some()
            && fresh.start_time.is_some()
            && known.start_time != fresh.start_time
        {
            self.counters.pid_reuses += 1;
            known.gone = true;
            known.exited_at_ns.get_or_insert(now_ns);
            return false;
        }
        let caller_refresh_ns = known.caller_refresh_ns;
        *known = fresh;
        known.caller_refresh_ns = caller_refresh_ns;
        true
    }

    /// Makes sure a process is known, reading its mappings if it is not, and returns it.
    pub fn observe(&mut self, pid: u32, now_ns: u64) -> &Process {
        self.know(pid, now_ns);
        &self.processes[&pid]
    }

    /// Reads `pid` unless the table knows it: [`ProcessTable::observe`] without the answer,
    /// for the per-frame paths, which look the process up next anyway.
    fn know(&mut self, pid: u32, now_ns: u64) {
        if !self.processes.contains_key(&pid) {
            let process = self.read_process(pid, now_ns);
            self.processes.insert(pid, process);
        }
    }

    /// Re-reads a process's mappings if they were read more than `age_ns` ago (a VM maps its
    /// jitdump or code map file some time after it starts).
    pub fn refresh_if_older(&mut self, pid: u32, age_ns: u64, now_ns: u64) {
        let stale = self
            .processes
            .get(&pid)
            .is_some_and(|p| !p.gone && now_ns.saturating_sub(p.maps_read_at_ns) > age_ns);
        if stale {
            let fresh = self.read_process(pid, now_ns);
            if fresh.unreadable {
                // What was known stays: it is read again after the same age.
                let known = self.processes.get_mut(&pid).expect("stale above");
                known.maps_read_at_ns = now_ns;
            } else if !fresh.gone || fresh.from_records {
                self.replace_if_same(pid, fresh, now_ns);
            }
        }
    }

    /// Re-reads a process after `execve`: everything about it changed but its pid and its start
    /// time. `comm` is the new program's name as the exec event gave it, kept when the process
    /// cannot be read any more (a program that ran for a millisecond).
    ///
    /// The process read may not be the one that exec'd (it exited since, and another has its
    /// pid): it replaces the known one all the same, as what holds the pid now, and is returned
    /// for the caller to judge by its start time.
    pub fn exec(&mut self, pid: u32, now_ns: u64, comm: &str) -> &Process {
        // What the table knew is from before the exec: recorded mappings older than that read
        // are the old program's (the kernel lost the exec's records).
        let before = self
            .processes
            .get(&pid)
            .filter(|known| !known.from_records)
            .map_or(0, |known| known.maps_read_at_ns);
        let mut process = self.read_process_since(pid, now_ns, before);
        if process.command.is_empty() {
            process.command = comm.to_owned();
        }
        let another = self.processes.get(&pid).is_some_and(|known| {
            known.start_time.is_some()
                && process.start_time.is_some()
                && known.start_time != process.start_time
        });
        if another {
            self.counters.pid_reuses += 1;
        }
        self.processes.insert(pid, process);
        &self.processes[&pid]
    }

    /// Forgets a process (it exec'd and nobody needs it read at once): its next sample reads it
    /// afresh.
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// Normalises a user-mode instruction pointer of `pid`.
    pub fn normalize(&mut self, pid: u32, ip: u64, now_ns: u64) -> Location {
        self.know(pid, now_ns);
        if let Some(location) = self.lookup(pid, ip, now_ns) {
            return location;
        }
        let process = &self.processes[&pid];
        if process.gone {
            return Location::Unmapped(UnmappedReason::ProcessGone);
        }
        let unmapped = if process.unreadable {
            UnmappedReason::Unreadable
        } else {
            UnmappedReason::NoMapping
        };
        if now_ns.saturating_sub(process.maps_read_at_ns) < MIN_REFRESH_INTERVAL_NS {
            return Location::Unmapped(unmapped);
        }
        // A miss usually means new code: dlopen, a JIT's new code zone. Re-read, keeping what
        // we knew if the process has gone in the meantime, or did not answer.
        let fresh = self.read_process(pid, now_ns);
        if (fresh.gone && !fresh.from_records) || fresh.unreadable {
            let process = self.processes.get_mut(&pid).expect("observed above");
            process.maps_read_at_ns = now_ns;
            if fresh.unreadable {
                return Location::Unmapped(UnmappedReason::Unreadable);
            }
        } else if !self.replace_if_same(pid, fresh, now_ns) {
            // Another process has the pid now: never place this sample in its mappings.
            return Location::Unmapped(UnmappedReason::ProcessGone);
        }
        self.lookup(pid, ip, now_ns)
            .unwrap_or(Location::Unmapped(UnmappedReason::NoMapping))
    }

    /// Normalises a caller's return address of `pid` (minus one). A miss reads the mappings
    /// again when [`ProcessTable::refresh_for_caller`] allows.
    pub fn normalize_caller(&mut self, pid: u32, address: u64, now_ns: u64) -> Location {
        self.know(pid, now_ns);
        if let Some(location) = self.lookup(pid, address, now_ns) {
            return location;
        }
        if self.refresh_for_caller(pid, address, now_ns)
            && let Some(location) = self.lookup(pid, address, now_ns)
        {
            return location;
        }
        let process = &self.processes[&pid];
        if process.gone {
            Location::Unmapped(UnmappedReason::ProcessGone)
        } else if process.unreadable {
            Location::Unmapped(UnmappedReason::Unreadable)
        } else {
            Location::Unmapped(UnmappedReason::NoMapping)
        }
    }

    /// The generation of the known mappings of `pid` (none if the process is not known yet),
    /// for a sample placed as an earlier one of the same raw stack was: it counts as a sample
    /// of the process, as a lookup of its frames would.
    pub fn placed_generation(&mut self, pid: u32, now_ns: u64) -> Option<u64> {
        let process = self.processes.get_mut(&pid)?;
        process.last_sample_ns = now_ns;
        Some(process.maps_generation)
    }

    /// Whether `address` lies in an executable mapping of `pid` as known.
    pub fn maps_address(&self, pid: u32, address: u64) -> bool {
        self.processes
            .get(&pid)
            .is_some_and(|p| p.mapping_at(address).is_some())
    }

    /// Reads the mappings of `pid` again for a caller at `address` outside every known one,
    /// unless they were read less than the process's caller interval ago; answers whether
    /// `address` is mapped now.
    ///
    /// Past code without frame pointers, a walk reads garbage that no read will ever map: each
    /// read that does not find the address doubles the interval, up to
    /// [`MAX_CALLER_REFRESH_INTERVAL_NS`], so such a process costs at most a read a second. A
    /// read that finds it (new code: a JIT's new code zone, `dlopen`) brings the interval back
    /// to [`MIN_REFRESH_INTERVAL_NS`].
    pub fn refresh_for_caller(&mut self, pid: u32, address: u64, now_ns: u64) -> bool {
        let Some(known) = self.processes.get(&pid) else {
            return false;
        };
        if known.mapping_at(address).is_some() {
            return true;
        }
        if known.gone
            || !plausible_code_address(address)
            || known.in_data(address)
            || now_ns.saturating_sub(known.maps_read_at_ns) < known.caller_refresh_ns
        {
            return false;
        }
        let interval = known.caller_refresh_ns;
        self.counters.caller_refreshes += 1;
        let fresh = self.read_process(pid, now_ns);
        if (fresh.gone && !fresh.from_records) || fresh.unreadable {
            let known = self.processes.get_mut(&pid).expect("known above");
            known.maps_read_at_ns = now_ns;
            known.unreadable |= fresh.unreadable;
            return false;
        }
        let found = fresh.mapping_at(address).is_some();
        if !self.replace_if_same(pid, fresh, now_ns) {
            return false;
        }
        let process = self.processes.get_mut(&pid).expect("kept above");
        process.caller_refresh_ns = if found {
            MIN_REFRESH_INTERVAL_NS
        } else {
            (interval * 2).min(MAX_CALLER_REFRESH_INTERVAL_NS)
        };
        found
    }

    fn lookup(&mut self, pid: u32, ip: u64, now_ns: u64) -> Option<Location> {
        let process = self.processes.get_mut(&pid)?;
        process.last_sample_ns = now_ns;
        let mapping = process.mapping_at(ip)?;
        Some(match mapping.kind {
            MappingKind::File { module, main } => Location::File {
                module,
                offset: mapping.offset + (ip - mapping.start),
                main_executable: main,
            },
            MappingKind::Anonymous => Location::Anonymous {
                pid,
                start: mapping.start,
                end: mapping.end,
                why: Unexplained::NotLookedUp,
            },
            MappingKind::Vdso => Location::Vdso {
                offset: ip - mapping.start,
            },
            MappingKind::Pseudo => Location::Unmapped(UnmappedReason::Pseudo),
        })
    }

    /// The executable ranges of the process as known, for a read of its code map files to
    /// check entries against away from this table: code maps name code the daemon may not
    /// have sampled yet, so the read may look at the mappings again on a miss (when they are
    /// older than [`MIN_REFRESH_INTERVAL_NS`]), as this process's only.
    pub fn executable(&mut self, pid: u32, now_ns: u64) -> Executable {
        let process = self.observe(pid, now_ns);
        let ranges = process.mappings.iter().map(|m| (m.start, m.end)).collect();
        let stale = now_ns.saturating_sub(process.maps_read_at_ns) >= MIN_REFRESH_INTERVAL_NS;
        Executable::new(pid, process.start_time, ranges, stale && !process.gone)
    }

    /// Adds to `keep` the binaries the processes of the table map, but those of processes that
    /// died before `settled_ns`, and answers whether some died after it.
    ///
    /// `exists` says whether a process still exists (`sys::process_exists`; tests fake it). A
    /// dead process's binaries are kept until every sample it took has been read and counted
    /// (a sample still in the ring would be normalised against them): the caller passes as
    /// `settled_ns` the time up to which samples have all been read, and this notes when each
    /// process was first found dead. A process found dead stays in the table (its mappings place
    /// late samples of it, and sessions look at it) until [`ProcessTable::forget_idle`].
    pub fn modules_in_use(
        &mut self,
        now_ns: u64,
        settled_ns: u64,
        exists: impl Fn(u32) -> bool,
        keep: &mut impl Extend<ModuleId>,
    ) -> bool {
        let mut unsettled = false;
        for (&pid, process) in &mut self.processes {
            if process.dead_since_ns.is_none() && (process.gone || !exists(pid)) {
                process.dead_since_ns = Some(now_ns);
                self.counters.exits_noticed += 1;
            }
            if process.dead_since_ns.is_some_and(|dead| dead <= settled_ns) {
                continue;
            }
            unsettled |= process.dead_since_ns.is_some();
            keep.extend(process.file_mappings().map(|(_, _, module)| module));
        }
        unsettled
    }

    /// Forgets processes that no running session names and that produced no sample since
    /// `before_ns`, keeping the table bounded in system-wide sessions.
    pub fn forget_idle(&mut self, keep: impl Fn(u32) -> bool, before_ns: u64) {
        self.processes
            .retain(|&pid, p| keep(pid) || p.last_sample_ns >= before_ns);
    }

    fn read_process(&mut self, pid: u32, now_ns: u64) -> Process {
        self.read_process_since(pid, now_ns, 0)
    }

    /// Reads `pid`; if `/proc` no longer describes it, takes the mappings recorded since an
    /// image (an exec, or a fork) that began after `image_since_ns`.
    fn read_process_since(&mut self, pid: u32, now_ns: u64, image_since_ns: u64) -> Process {
        let mut process = Process {
            pid,
            command: String::new(),
            executable: None,
            start_time: None,
            has_anonymous_code: false,
            gone: false,
            from_records: false,
            unreadable: false,
            exited_at_ns: None,
            exiting_checked_ns: 0,
            code_map_files: Vec::new(),
            mappings: Vec::new(),
            data: Vec::new(),
            maps_generation: NEXT_MAPS_GENERATION.fetch_add(1, Ordering::Relaxed),
            maps_read_at_ns: now_ns,
            caller_refresh_ns: MIN_REFRESH_INTERVAL_NS,
            last_sample_ns: now_ns,
            dead_since_ns: None,
        };
        if let Ok(text) = sys::read_proc(pid, "stat")
            && let Ok(stat) = stat::parse_stat(&text)
        {
            process.command = stat.comm;
            process.start_time = Some(stat.start_time_ticks);
        }
        let exe = sys::process_exe(pid).ok();
        process.executable = exe.as_ref().map(|(path, _)| path.clone());

        self.counters.maps_reads += 1;
        let modules = self.modules.clone();
        let main = exe.clone();
        let read = self
            .access
            .run(pid, move || read_mappings(&modules, pid, main.as_ref()));
        let mappings = match read {
            Ok(Ok(mappings)) => mappings,
            Ok(Err(e)) => {
                self.counters.maps_read_failures += 1;
                tracing::debug!(pid, "cannot read /proc/{pid}/maps: {e}");
                process.gone = true;
                self.place_by_records(&mut process, image_since_ns);
                return process;
            }
            Err(stalled) => {
                self.counters.maps_reads_stalled += 1;
                tracing::debug!(pid, "mappings not read: {stalled}");
                process.unreadable = true;
                return process;
            }
        };
        self.counters.maps_bad_lines += mappings.bad_lines;
        // A zombie or a kernel thread has no mappings at all.
        process.gone = mappings.none;
        if process.gone {
            self.place_by_records(&mut process, image_since_ns);
            return process;
        }
        process.set_mappings(mappings);
        process
    }

    /// Gives a process that `/proc` no longer describes the mappings the kernel recorded it
    /// making since its `execve`, if the log followed it from an image that began after
    /// `image_since_ns`; its name and executable too, and the start time of the process the
    /// table knew under its pid when the log saw no fork there since (the same process, gone
    /// before its stat could be read).
    fn place_by_records(&mut self, process: &mut Process, image_since_ns: u64) {
        let pid = process.pid;
        let Some(recorded) = self.log.get(pid).filter(|r| {
            !r.mappings.is_empty()
                && r.exec_ns
                    .or(r.born_ns)
                    .is_some_and(|began| began >= image_since_ns)
        }) else {
            return;
        };
        if process.start_time.is_none() {
            process.start_time = self
                .processes
                .get(&pid)
                .filter(|known| recorded.born_ns.is_none_or(|b| b <= known.maps_read_at_ns))
                .and_then(|known| known.start_time);
        }
        if process.command.is_empty() {
            process.command.clone_from(&recorded.command);
        }
        process.executable = recorded.executable().map(PathBuf::from);
        let recorded = recorded.mappings.clone();
        let modules = self.modules.clone();
        // Registering opens the binaries, which may block (a file system that does not
        // answer): away from the manager's thread, as a read of the maps is.
        match self
            .access
            .run(pid, move || recorded_mappings(&modules, pid, &recorded))
        {
            Ok(mappings) => {
                self.counters.maps_from_records += 1;
                process.from_records = true;
                process.set_mappings(mappings);
            }
            Err(stalled) => {
                self.counters.maps_reads_stalled += 1;
                tracing::debug!(pid, "recorded mappings not registered: {stalled}");
            }
        }
    }
}

impl Process {
    fn set_mappings(&mut self, mappings: Mappings) {
        self.data = mappings.data;
        self.code_map_files = mappings.code_map_files;
        self.mappings = mappings.executable;
        self.has_anonymous_code = self
            .mappings
            .iter()
            .any(|m| m.kind == MappingKind::Anonymous);
    }
}

/// What a read of `/proc/PID/maps` found, the binaries registered.
struct Mappings {
    bad_lines: u64,
    /// No mapping at all: a zombie, a kernel thread.
    none: bool,
    data: Vec<(u64, u64)>,
    code_map_files: Vec<MappedCodeMapFile>,
    /// Sorted by start.
    executable: Vec<ExecMapping>,
}

/// Reads the mappings of `pid` and registers the binaries they map with `modules` (opening
/// those it does not hold yet through `/proc/PID/map_files`). Both wait on the process's mmap
/// lock: run by [`ProcessAccess`], away from the manager's thread. `exe` is the process's main
/// executable.
fn read_mappings(
    modules: &Modules,
    pid: u32,
    exe: Option<&(PathBuf, FileId)>,
) -> std::io::Result<Mappings> {
    let text = sys::read_proc(pid, "maps")?;
    let parsed = maps::parse_maps(&text);
    let mut data: Vec<(u64, u64)> = parsed
        .entries
        .iter()
        .filter(|e| !e.perms.exec)
        .map(|e| (e.start, e.end))
        .collect();
    data.sort_unstable();
    let mut code_map_files = Vec::new();
    let mut executable = Vec::new();
    for entry in parsed.entries.iter().filter(|e| e.perms.exec) {
        if let MapPath::File { path, .. } = &entry.path
            && let Some(kind) = MappedFileKind::of(path)
        {
            // A marker, never executed: read as a code map, not symbolised as a binary.
            code_map_files.push(MappedCodeMapFile {
                path: path.clone(),
                start: entry.start,
                end: entry.end,
                id: FileId {
                    dev_major: entry.dev_major,
                    dev_minor: entry.dev_minor,
                    inode: entry.inode,
                },
                kind,
            });
            continue;
        }
        executable.push(ExecMapping {
            start: entry.start,
            end: entry.end,
            offset: entry.offset,
            kind: classify(modules, pid, entry, exe),
        });
    }
    executable.sort_by_key(|m| m.start);
    Ok(Mappings {
        bad_lines: parsed.bad_lines as u64,
        none: parsed.entries.is_empty(),
        data,
        code_map_files,
        executable,
    })
}

/// The mappings the kernel recorded for `pid`, the binaries registered with `modules` (opened
/// by path, checked against the recorded device and inode, when `/proc/PID/map_files` is gone).
fn recorded_mappings(
    modules: &Modules,
    pid: u32,
    recorded: &[mapping_log::RecordedMapping],
) -> Mappings {
    let mut code_map_files = Vec::new();
    let mut executable = Vec::new();
    for mapping in recorded {
        let path = std::path::Path::new(&*mapping.path);
        let kind = if mapping.is_anonymous() {
            MappingKind::Anonymous
        } else if mapping.is_vdso() {
            MappingKind::Vdso
        } else if let Some(id) = mapping.file {
            if let Some(kind) = MappedFileKind::of(path) {
                code_map_files.push(MappedCodeMapFile {
                    path: path.to_owned(),
                    start: mapping.start,
                    end: mapping.end,
                    id,
                    kind,
                });
                continue;
            }
            let module = modules.register(id, path, || {
                sys::open_mapped_file(pid, mapping.start, mapping.end, path, id)
            });
            MappingKind::File {
                module,
                main: mapping.main,
            }
        } else {
            // A special mapping, or a file named by its build id alone.
            MappingKind::Pseudo
        };
        executable.push(ExecMapping {
            start: mapping.start,
            end: mapping.end,
            offset: mapping.offset,
            kind,
        });
    }
    Mappings {
        bad_lines: 0,
        none: false,
        data: Vec::new(),
        code_map_files,
        executable,
    }
}

fn classify(
    modules: &Modules,
    pid: u32,
    entry: &MapEntry,
    exe: Option<&(PathBuf, FileId)>,
) -> MappingKind {
    if entry.is_anonymous_exec() {
        return MappingKind::Anonymous;
    }
    match &entry.path {
        MapPath::File { path, .. } => {
            let id = FileId {
                dev_major: entry.dev_major,
                dev_minor: entry.dev_minor,
                inode: entry.inode,
            };
            let main = exe.is_some_and(|(exe_path, exe_id)| *exe_id == id || exe_path == path);
            let module = modules.register(id, path, || {
                sys::open_mapped_file(pid, entry.start, entry.end, path, id)
            });
            MappingKind::File { module, main }
        }
        MapPath::Vdso => MappingKind::Vdso,
        _ => MappingKind::Pseudo,
    }
}

#[cfg(test)]
mod tests;
