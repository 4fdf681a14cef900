//! Processes the daemon has sampled: their executable mappings, and the normalisation of a
//! sample's `(pid, ip)` into a [`Location`].
//!
//! Mappings are read from `/proc/PID/maps` when a process is first seen (at session start for
//! named targets, so that even a process that exits quickly is known), again after `execve`
//! (reported by the BPF exec tracepoint), and again when a sample falls outside every known
//! mapping (`dlopen`, a new JIT code zone), at most once per [`MIN_REFRESH_INTERVAL_NS`].
//! Only executable mappings are kept: a sampled instruction pointer cannot be anywhere else.
//!
//! The binaries behind file mappings are registered with [`Modules`] at once, which opens them,
//! so that a binary that is deleted or replaced later, or a process that exits, can still be
//! symbolised. The table tells the registry which binaries its live processes map
//! ([`ProcessTable::modules_in_use`]); once a process has exited and every sample it took has
//! been read, its binaries stay open only if a session has samples in them.

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
    stat,
};

use crate::{
    codemap::registry::{MappedCodeMapFile, MappedFileKind},
    symbolize::{Location, ModuleId, Modules, Unexplained, UnmappedReason},
    sys::{self, FileId},
};

/// Shortest time between two reads of one process's maps caused by samples that fit no mapping.
pub const MIN_REFRESH_INTERVAL_NS: u64 = 10_000_000;

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
    /// The jitdump and code map files it maps (executable mappings, never executed).
    pub code_map_files: Vec<MappedCodeMapFile>,
    mappings: Vec<ExecMapping>,
    maps_generation: u64,
    maps_read_at_ns: u64,
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

    /// The executable mapping holding `address` (mappings are sorted and disjoint).
    fn mapping_at(&self, address: u64) -> Option<&ExecMapping> {
        let i = self.mappings.partition_point(|m| m.start <= address);
        let mapping = self.mappings.get(i.checked_sub(1)?)?;
        (address < mapping.end).then_some(mapping)
    }
}

/// Counters of the process table, reported by the daemon.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessCounters {
    /// Reads of /proc/PID/maps.
    pub maps_reads: u64,
    /// Reads of /proc/PID/maps that failed (process gone, permission).
    pub maps_read_failures: u64,
    /// Lines of /proc/PID/maps that could not be parsed.
    pub maps_bad_lines: u64,
    /// `execve` events handled.
    pub execs: u64,
    /// Processes found exited by [`ProcessTable::modules_in_use`].
    pub exits_noticed: u64,
}

/// The processes the daemon knows, by pid.
#[derive(Debug)]
pub struct ProcessTable {
    /// foldhash: every frame of every sample looks its process up, and SipHash was a third of
    /// that time.
    processes: HashMap<u32, Process, foldhash::fast::RandomState>,
    modules: Arc<Modules>,
    counters: ProcessCounters,
}

impl ProcessTable {
    /// An empty table registering binaries with `modules`.
    pub fn new(modules: Arc<Modules>) -> ProcessTable {
        ProcessTable {
            processes: HashMap::default(),
            modules,
            counters: ProcessCounters::default(),
        }
    }

    /// The table's counters.
    pub fn counters(&self) -> ProcessCounters {
        self.counters
    }

    /// A known process.
    pub fn get(&self, pid: u32) -> Option<&Process> {
        self.processes.get(&pid)
    }

    /// Makes sure a process is known, reading its mappings if it is not, and returns it.
    pub fn observe(&mut self, pid: u32, now_ns: u64) -> &Process {
        if !self.processes.contains_key(&pid) {
            let process = self.read_process(pid, now_ns);
            self.processes.insert(pid, process);
        }
        &self.processes[&pid]
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
            if !fresh.gone {
                self.processes.insert(pid, fresh);
            }
        }
    }

    /// Re-reads a process after `execve`: everything about it changed but its pid. `comm` is
    /// the new program's name as the exec event gave it, kept when the process cannot be read
    /// any more (a program that ran for a millisecond).
    pub fn exec(&mut self, pid: u32, now_ns: u64, comm: &str) -> &Process {
        self.counters.execs += 1;
        let mut process = self.read_process(pid, now_ns);
        if process.command.is_empty() {
            process.command = comm.to_owned();
        }
        self.processes.insert(pid, process);
        &self.processes[&pid]
    }

    /// Forgets a process (it exec'd and nobody needs it read at once): its next sample reads it
    /// afresh.
    pub fn forget(&mut self, pid: u32) {
        if self.processes.remove(&pid).is_some() {
            self.counters.execs += 1;
        }
    }

    /// Normalises a user-mode instruction pointer of `pid`.
    pub fn normalize(&mut self, pid: u32, ip: u64, now_ns: u64) -> Location {
        self.observe(pid, now_ns);
        if let Some(location) = self.lookup(pid, ip, now_ns) {
            return location;
        }
        let process = &self.processes[&pid];
        if process.gone {
            return Location::Unmapped(UnmappedReason::ProcessGone);
        }
        if now_ns.saturating_sub(process.maps_read_at_ns) < MIN_REFRESH_INTERVAL_NS {
            return Location::Unmapped(UnmappedReason::NoMapping);
        }
        // A miss usually means new code: dlopen, a JIT's new code zone. Re-read, keeping what
        // we knew if the process has gone in the meantime.
        let fresh = self.read_process(pid, now_ns);
        let process = self.processes.get_mut(&pid).expect("observed above");
        if fresh.gone {
            process.maps_read_at_ns = now_ns;
        } else {
            *process = fresh;
        }
        self.lookup(pid, ip, now_ns)
            .unwrap_or(Location::Unmapped(UnmappedReason::NoMapping))
    }

    /// Normalises a caller's return address of `pid` (minus one) with the mappings known now.
    /// Unlike [`ProcessTable::normalize`], a miss does not re-read the mappings: past code
    /// built without frame pointers a stack walk yields garbage addresses, and re-reading on
    /// each would cost a read of /proc/PID/maps per sample. New code shows in leaves first.
    pub fn normalize_caller(&mut self, pid: u32, address: u64, now_ns: u64) -> Location {
        self.observe(pid, now_ns);
        if let Some(location) = self.lookup(pid, address, now_ns) {
            return location;
        }
        if self.processes[&pid].gone {
            Location::Unmapped(UnmappedReason::ProcessGone)
        } else {
            Location::Unmapped(UnmappedReason::NoMapping)
        }
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

    /// Whether `[start, end)` lies inside one executable mapping of the process, re-reading its
    /// mappings (at most every [`MIN_REFRESH_INTERVAL_NS`]) when it does not: code maps name
    /// code the daemon may not have sampled yet.
    pub fn is_executable(&mut self, pid: u32, start: u64, end: u64, now_ns: u64) -> bool {
        let inside = |p: &Process| p.mapping_at(start).is_some_and(|m| end <= m.end);
        self.observe(pid, now_ns);
        let process = &self.processes[&pid];
        if inside(process) {
            return true;
        }
        if process.gone || now_ns.saturating_sub(process.maps_read_at_ns) < MIN_REFRESH_INTERVAL_NS
        {
            return false;
        }
        let fresh = self.read_process(pid, now_ns);
        if fresh.gone {
            return false;
        }
        let answer = inside(&fresh);
        self.processes.insert(pid, fresh);
        answer
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
        let mut process = Process {
            pid,
            command: String::new(),
            executable: None,
            start_time: None,
            has_anonymous_code: false,
            gone: false,
            code_map_files: Vec::new(),
            mappings: Vec::new(),
            maps_generation: NEXT_MAPS_GENERATION.fetch_add(1, Ordering::Relaxed),
            maps_read_at_ns: now_ns,
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
        let text = match sys::read_proc(pid, "maps") {
            Ok(text) => text,
            Err(e) => {
                self.counters.maps_read_failures += 1;
                tracing::debug!(pid, "cannot read /proc/{pid}/maps: {e}");
                process.gone = true;
                return process;
            }
        };
        let parsed = maps::parse_maps(&text);
        self.counters.maps_bad_lines += parsed.bad_lines as u64;
        // A zombie or a kernel thread has no mappings at all.
        if parsed.entries.is_empty() {
            process.gone = true;
        }
        for entry in parsed.entries.iter().filter(|e| e.perms.exec) {
            if let MapPath::File { path, .. } = &entry.path
                && let Some(kind) = MappedFileKind::of(path)
            {
                // A marker, never executed: read as a code map, not symbolised as a binary.
                process.code_map_files.push(MappedCodeMapFile {
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
            let kind = self.classify(pid, entry, exe.as_ref());
            if kind == MappingKind::Anonymous {
                process.has_anonymous_code = true;
            }
            process.mappings.push(ExecMapping {
                start: entry.start,
                end: entry.end,
                offset: entry.offset,
                kind,
            });
        }
        process.mappings.sort_by_key(|m| m.start);
        process
    }

    fn classify(&self, pid: u32, entry: &MapEntry, exe: Option<&(PathBuf, FileId)>) -> MappingKind {
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
                let module = self.modules.register(id, path, || {
                    sys::open_mapped_file(pid, entry.start, entry.end, path, id)
                });
                MappingKind::File { module, main }
            }
            MapPath::Vdso => MappingKind::Vdso,
            _ => MappingKind::Pseudo,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// A live process keeps the binaries it maps; a dead one keeps them until every sample it
    /// took has been read, then not even if its pid comes back.
    #[test]
    fn a_dead_process_holds_its_binaries_until_its_samples_are_read() {
        let modules = Arc::new(Modules::new());
        let mut table = ProcessTable::new(modules.clone());
        let me = std::process::id();
        table.observe(me, 100);
        let mine = modules.len();
        assert!(mine > 0, "this test binary, at least");
        let in_use = |table: &mut ProcessTable, now, settled, alive: bool| {
            let mut keep = HashSet::new();
            let unsettled = table.modules_in_use(now, settled, |_| alive, &mut keep);
            (keep.len(), unsettled)
        };
        assert_eq!(in_use(&mut table, 1_000, 900, true), (mine, false));
        // Found dead at 2000; samples are read up to 1500 only.
        assert_eq!(in_use(&mut table, 2_000, 1_500, false), (mine, true));
        assert_eq!(table.counters().exits_noticed, 1);
        assert_eq!(in_use(&mut table, 2_500, 1_999, false), (mine, true));
        // Read past its death: nothing of it is needed any more.
        assert_eq!(in_use(&mut table, 3_000, 2_000, false), (0, false));
        // Its pid reused: still the dead process's entry, whose binaries are gone.
        assert_eq!(in_use(&mut table, 4_000, 3_000, true), (0, false));
        assert_eq!(table.counters().exits_noticed, 1, "noticed once");
        // Read afresh (an exec, a forget and a new sample): alive again.
        table.forget(me);
        table.observe(me, 5_000);
        assert_eq!(in_use(&mut table, 5_000, 4_000, true), (mine, false));
    }
}
