//! The code maps of every process, as the session manager drives them.
//!
//! Samples in generated code (anonymous executable memory) wait in their process's timeline
//! until every code map source is known up to their time, then are attributed:
//!
//! - perf maps and code map files are read up to their end before each advance, and their
//!   writers write each entry at once, so they are known up to the moment of that read;
//! - a jitdump file is known up to its latest record: writers buffer it (V8 through a 2 MB
//!   stdio buffer), so a sample waits for a later record, or for the process's exit, but at
//!   most [`JITDUMP_MAX_WAIT_NS`];
//! - a VM publishing over gRPC is known up to its latest event or Sync, and at worst up to
//!   [`PUBLICATION_GRACE_NS`] ago: a sample waits at most that long for a publication;
//! - a process with no code map found yet may still be about to map one: its samples wait
//!   [`DISCOVERY_WAIT_NS`] while its mappings and /tmp are looked at again.
//!
//! A process that exited is read one last time and is then known to the end of time.
//!
//! Maps that come late still name the samples they explain, honestly:
//!
//! - A sample attributed before its timestamped sources vouched for its time (a bounded wait
//!   ran out: V8 buffers its jitdump until exit) is counted *provisionally* and parked in a
//!   second timeline, the replay, which moves only as far as the sources vouch. When they
//!   catch up (at the latest when the process exits), the sample is placed again in the map of
//!   its time and moved in its sessions if the answer changed. Sessions may stop meanwhile:
//!   the sample is moved all the same, until [`MAX_PARK_NS`] or [`MAX_PARKED`].
//! - A sample left unexplained by the map of its time may be named by a perf map, which has no
//!   timestamps, read after it (HotSpot writes its map on request or at exit; an entry may be
//!   read only after samples in its code). The first change of the perf map after the sample
//!   decides, as perf decides at report time, and the frame is marked as named from a later
//!   snapshot: never mixed silently with time-correct names. This holds while one of the
//!   sample's sessions still runs or stops ([`Sink::takes_snapshots`]).

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use super::{
    budget::ReadBudgets,
    code::CodeStore,
    live::LiveMap,
    process_code::ProcessCode,
    reader::{self, ReadReply, ReadRequest, Readers},
    reading::{ReadJob, Sources, Status},
    refusals::{Reason, Refusals},
    sample::{Parked, ParkedFrame, Placement, Recount, RoutedSample, SampleFrame, Sink},
    timeline::{Change, PendingSample, Timeline, apply_change},
};
use crate::{
    stats::vm::StatEvent,
    sys,
    vocab::{
        CodeId, CodeMapKinds, Executable, Location, MappedCodeMapFile, MappedFileKind, ModuleId,
        RefusedEntry, Unexplained,
    },
};

/// Most jitdump and code map files read for one process (a VM writes one or two): each is held
/// open while the process lives.
pub const MAX_FILES_PER_PROCESS: usize = 16;

/// Longest a sample waits for a VM's publication before it is attributed with what is known.
/// A publishing VM sends a Sync every few tens of ms, which keeps the wait short; this bound
/// only matters when its stream falls silent (a stuck or descheduled publisher), and must be
/// long enough that a merely slow one is still waited for: events arriving after samples later
/// than them were attributed would be applied too late.
pub const PUBLICATION_GRACE_NS: u64 = 1_000_000_000;

/// How often a process without a perf map is checked for one while its samples wait.
pub const PERF_MAP_RECHECK_NS: u64 = 200_000_000;

/// Longest a sample waits for a buffered jitdump file to catch up.
pub const JITDUMP_MAX_WAIT_NS: u64 = 5_000_000_000;

/// How long samples of a process without any code map wait for one to appear.
pub const DISCOVERY_WAIT_NS: u64 = 200_000_000;

/// Longest a sample waits for a read of its process's files that is under way (see
/// [`super::reader`]): a read that hangs (a user's FUSE file) leaves its samples attributed
/// provisionally after this, and placed again if it ever returns.
pub const READ_GRACE_NS: u64 = 1_000_000_000;

/// Longest a sample counted provisionally stays parked for its code map to catch up: a
/// runtime that buffers its jitdump until exit and runs longer leaves it provisional.
pub const MAX_PARK_NS: u64 = 15 * 60 * 1_000_000_000;

/// Most samples one process may have parked (provisional, or waiting for a later snapshot):
/// about three minutes of two busy CPUs at 1400 Hz; beyond, the oldest are let go.
pub const MAX_PARKED: usize = 500_000;

/// Ranges of entries refused for not being executable, remembered per process to say why a
/// sample there is unexplained.
const MAX_REFUSED_RANGES: usize = 256;

/// Counters of all code maps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeMapCounters {
    /// Samples attributed to a code map entry.
    pub attributed: u64,
    /// Syncs whose reads stopped at their user's byte budget (see [`super::budget`]).
    pub reads_deferred: u64,
    /// Reads of processes' files sent to reader threads ([`super::reader`]).
    pub reads: u64,
    /// Reads under way now (a gauge): one that stays is stuck on its file.
    pub reads_in_flight: u64,
    /// Reader threads alive now (a gauge).
    pub read_threads: u64,
    /// Reader threads started (one per user with files to read, again after an idle spell).
    pub read_threads_started: u64,
    /// Reads served on the manager's thread because no reader thread could be started.
    pub reads_served_inline: u64,
    /// Reads that came back for a process that exec'd or was forgotten meanwhile.
    pub reads_stale: u64,
    /// Reads that panicked (a bug: their sources were looked for afresh).
    pub reads_panicked: u64,
    /// Samples in generated code no code map explained.
    pub unexplained: u64,
    /// Changes applied.
    pub changes: u64,
    /// Changes refused (by the timeline: unknown addresses, outside the zone), since the daemon
    /// started.
    pub changes_refused: u64,
    /// Changes that arrived too late to apply in order.
    pub changes_late: u64,
    /// Samples counted provisionally: attributed before their code map was known up to their
    /// time (a bounded wait ran out), and parked for it to catch up.
    pub provisional: u64,
    /// Provisional samples placed again once their code map caught up.
    pub caught_up: u64,
    /// Provisional samples whose code map never caught up in time (parked too long or too
    /// many).
    pub expired: u64,
    /// Samples named from a perf map read after them.
    pub later_snapshot: u64,
    /// Samples that arrived after their timeline moved past them (should stay 0).
    pub samples_late: u64,
    /// Lines or records refused by file sources, since the daemon started.
    pub source_refusals: u64,
    /// Entries outside the executable mappings known when first read, accepted by a later
    /// read once their code was mapped (see [`super::outside`]).
    pub mapped_late: u64,
    /// Every refusal by reason, since the daemon started.
    pub refused: BTreeMap<Reason, u64>,
    /// Sources that could not be opened or read (wrong owner, symlink, malformed header...).
    pub source_failures: u64,
    /// Perf maps, jitdump and code map files read.
    pub sources: u64,
    /// Processes whose code maps were forgotten.
    pub forgotten: u64,
}

/// Code maps by pid.
#[derive(Debug)]
pub struct CodeMaps {
    store: Arc<CodeStore>,
    processes: HashMap<u32, ProcessCode>,
    counters: CodeMapCounters,
    /// Bytes of code map files each user's processes may read.
    budgets: ReadBudgets,
    /// Where reads of code map files go.
    readers: Readers,
    next_generation: u64,
    /// The VMs' statistics that reads of code map files brought, by pid, for the sink to take
    /// before the samples they concern.
    stats: Vec<(u32, Vec<(u64, StatEvent)>)>,
}

impl CodeMaps {
    /// No code maps yet; codes are interned into `store`, and files read on the caller's
    /// thread (tests of the registry).
    pub fn new(store: Arc<CodeStore>) -> CodeMaps {
        let readers = Readers::inline(store, Arc::new(reader::open_mapped));
        CodeMaps::with_readers(readers)
    }

    /// No code maps yet; files are read by `readers`, and codes interned into their store.
    pub fn with_readers(readers: Readers) -> CodeMaps {
        CodeMaps {
            store: readers.store().clone(),
            processes: HashMap::new(),
            counters: CodeMapCounters::default(),
            budgets: ReadBudgets::default(),
            readers,
            next_generation: 1,
            stats: Vec::new(),
        }
    }

    /// Up to when a gRPC publication for `pid` still open has published: `None` when none is.
    pub fn publishing_until(&self, pid: u32) -> Option<u64> {
        self.processes
            .get(&pid)
            .filter(|p| p.streams > 0)
            .map(|p| p.published_until_ns)
    }

    /// The interned codes.
    pub fn store(&self) -> &Arc<CodeStore> {
        &self.store
    }

    /// Counters (of the processes still known, plus what was attributed and refused so far).
    pub fn counters(&self) -> CodeMapCounters {
        let mut c = self.counters.clone();
        for p in self.processes.values() {
            let t = p.timeline.counters();
            c.changes += t.applied;
            c.changes_late += t.late;
            c.samples_late += t.late_samples;
        }
        c.changes_refused = c.refused.get(&Reason::Unapplicable).copied().unwrap_or(0);
        c.reads_deferred = self.budgets.exhausted;
        let r = self.readers.counters();
        c.reads = r.reads;
        c.read_threads_started = r.threads_started;
        c.reads_served_inline = r.served_inline;
        c.reads_in_flight = self
            .processes
            .values()
            .filter(|p| p.sources.is_none())
            .count() as u64;
        c.read_threads = self.readers.threads() as u64;
        c.source_refusals = c
            .refused
            .iter()
            .filter(|(reason, _)| reason.is_entry())
            .map(|(_, n)| n)
            .sum();
        c
    }

    /// How many processes' code maps were forgotten so far: unchanged, no map let go of a code.
    pub fn forgotten(&self) -> u64 {
        self.counters.forgotten
    }

    fn process(&mut self, pid: u32) -> &mut ProcessCode {
        self.processes.entry(pid).or_insert_with(|| {
            let status = sys::read_status(pid).ok();
            let mut timeline = Timeline::default();
            timeline.refusals = Refusals::new(pid, "code map changes");
            let mut replay = Timeline::default();
            // Its changes are the timeline's: refusals are counted there, once.
            replay.refusals = Refusals::new(pid, "code map changes (replay)");
            ProcessCode {
                timeline,
                replay,
                snapshot_parked: Vec::new(),
                perf_content: LiveMap::default(),
                refused_ranges: std::collections::VecDeque::new(),
                found_ns: [0; 4],
                unexplained_since_snapshot: 0,
                named_by_snapshots: 0,
                uid: status.as_ref().map(|s| s.uids.effective),
                nspid: status.as_ref().and_then(|s| s.nspid).unwrap_or(pid),
                sources: Some(Sources::new(sys::open_process_root(pid).ok())),
                status: Status::default(),
                read_ns: 0,
                read_after_exit: false,
                generation: 0,
                new_files: Vec::new(),
                reread_perf_map: false,
                perf_map_changed: false,
                start_time_ticks: sys::read_start_time(pid),
                streams: 0,
                published_until_ns: 0,
                exited: false,
                gone_ns: None,
            }
        })
    }

    /// Whether the process is known (sampled, read or published for, and not forgotten).
    pub fn knows(&self, pid: u32) -> bool {
        self.processes.contains_key(&pid)
    }

    /// Whether the process has any code map source.
    pub fn has_sources(&self, pid: u32) -> bool {
        self.processes
            .get(&pid)
            .is_some_and(|p| p.status.any() || p.streams > 0)
    }

    /// Whether `pid` maps one of vmscope's code map files that no read has opened yet. Such a
    /// file may open with the VM's Hello and carry its intervals, so even its native samples
    /// must wait for it: a sample taken in a collection must see the collection's begin.
    pub fn maps_unread_code_map_file(&self, pid: u32, files: &[MappedCodeMapFile]) -> bool {
        let sources = self.processes.get(&pid).and_then(|p| p.sources.as_ref());
        files
            .iter()
            .any(|f| f.kind == MappedFileKind::CodeMap && !sources.is_some_and(|s| s.knows(&f.id)))
    }

    /// Notes the jitdump and code map files a process maps: those not known yet are opened by
    /// its next read.
    pub fn observe_files(&mut self, pid: u32, files: &[MappedCodeMapFile]) {
        let process = self.process(pid);
        for mapped in files {
            let known = process
                .sources
                .as_ref()
                .is_some_and(|s| s.knows(&mapped.id));
            // One beyond the most a read opens, for it to say so.
            if known
                || process.new_files.iter().any(|f| f.id == mapped.id)
                || process.new_files.len() > MAX_FILES_PER_PROCESS
            {
                continue;
            }
            process.new_files.push(mapped.clone());
        }
    }

    /// A sample in generated code, to attribute once the maps are known up to its time.
    pub fn push_sample(&mut self, pid: u32, sample: PendingSample<RoutedSample>) {
        self.process(pid).timeline.push_sample(sample);
    }

    /// A gRPC publication for `pid` opened.
    pub fn stream_opened(&mut self, pid: u32) {
        self.process(pid).streams += 1;
    }

    /// A gRPC publication for `pid` ended: nothing more will come from it.
    pub fn stream_closed(&mut self, pid: u32) {
        let process = self.process(pid);
        process.streams = process.streams.saturating_sub(1);
    }

    /// Changes published by the VM, known up to `until_ns`.
    pub fn publish(&mut self, pid: u32, changes: Vec<(u64, Change)>, until_ns: u64) {
        self.process(pid);
        let process = self.processes.get_mut(&pid).expect("made above");
        process.note_found(sys::monotonic_ns());
        process.push_changes(sys::monotonic_ns(), changes);
        process.published_until_ns = process.published_until_ns.max(until_ns);
        count_refusals(&mut self.counters, &mut process.timeline.refusals);
    }

    /// Counts events a publication stream refused before they became changes (see
    /// [`super::vm`]), with the other events that break the protocol, by reason.
    pub fn count_stream_refusals(&mut self, reasons: &[Reason]) {
        for &reason in reasons {
            *self.counters.refused.entry(reason).or_default() += 1;
        }
    }

    /// The process exited: its files are read one last time, and it changes no more.
    pub fn exited(&mut self, pid: u32) {
        if let Some(process) = self.processes.get_mut(&pid) {
            process.exited = true;
        }
    }

    /// Makes sure a process is known, so that its sources are looked for at the next advance
    /// (a session's targets are, from its start).
    /// A process that exited and left its pid to another is forgotten then, with its map:
    /// answers whether it was.
    pub fn touch(&mut self, pid: u32) -> bool {
        let mut replaced = false;
        if let Some(known) = self.processes.get(&pid)
            && !known.busy()
            && known.start_time_ticks != sys::read_start_time(pid)
            && let Some(gone) = self.processes.remove(&pid)
        {
            gone.retire(&mut self.counters);
            replaced = true;
        }
        self.process(pid);
        replaced
    }

    /// The process replaced its program at `timestamp_ns`: its map is empty from then on.
    /// Samples before it, and publications of the new program received already, keep their
    /// place in time.
    ///
    /// The perf map is the exception: it has no timestamps, and the path outlives the program
    /// (a JIT that execs leaves its map behind; a new one may write the same path). It is read
    /// again from its start, as a snapshot read after the new program's first samples.
    pub fn exec(&mut self, pid: u32, timestamp_ns: u64) {
        if let Some(process) = self.processes.get_mut(&pid) {
            if let Some(sources) = &mut process.sources {
                sources.give_up_held();
            }
            process.count_refusals(&mut self.counters);
            process.timeline.push_change(timestamp_ns, Change::Clear);
            process.replay.push_change(timestamp_ns, Change::Clear);
            process.perf_content = LiveMap::default();
            // The old program's files write no more (it is gone) and must not hold the new
            // program's samples back; the new program's are found in its own mappings. Its
            // root directory is the new program's too. Sources out to a reader come back
            // stale, and are dropped then.
            let root = match process.sources.take() {
                Some(sources) => sources.root,
                None => sys::open_process_root(pid).ok(),
            };
            process.sources = Some(Sources::new(root));
            process.generation = self.next_generation;
            self.next_generation += 1;
            process.status = Status::default();
            process.read_ns = 0;
            process.new_files.clear();
            process.reread_perf_map = false;
            // A setuid program is another user's: its maps must be that user's files.
            process.uid = read_uid(pid);
        }
    }

    /// Forgets a process nobody needs any more (nothing waiting).
    pub fn forget(&mut self, pid: u32) {
        if self.processes.get(&pid).is_some_and(|p| !p.busy())
            && let Some(gone) = self.processes.remove(&pid)
        {
            gone.retire(&mut self.counters);
        }
    }

    /// Forgets the processes nothing waits on, no publication streams to, and `keep` does not
    /// name: their maps are read afresh if they are ever sampled again.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        let gone: Vec<u32> = self
            .processes
            .iter()
            .filter(|&(&pid, p)| !(keep(pid) || p.streams > 0 || p.busy()))
            .map(|(&pid, _)| pid)
            .collect();
        for pid in gone {
            if let Some(process) = self.processes.remove(&pid) {
                process.retire(&mut self.counters);
            }
        }
    }

    /// Forgets the processes that are gone (exited, or their pid is another process's now),
    /// that nothing waits on and no publication streams to, once no sample of theirs can still
    /// be on its way: the reader is past `settled_ns`, and they were found gone before it. Their
    /// maps' memory goes at once, their codes with the store's next sweep. Answers whether a
    /// process found gone waits for the reader. The cost is one `/proc/PID/stat` read per
    /// idle process.
    pub fn forget_gone(&mut self, now_ns: u64, settled_ns: u64) -> bool {
        let mut unsettled = false;
        let mut gone = Vec::new();
        for (&pid, process) in &mut self.processes {
            if process.streams > 0 || process.busy() {
                continue;
            }
            let found_ns = match process.gone_ns {
                Some(found_ns) => found_ns,
                None => {
                    let now = sys::read_start_time(pid);
                    if now.is_some() && now == process.start_time_ticks {
                        continue;
                    }
                    *process.gone_ns.insert(now_ns)
                }
            };
            if found_ns <= settled_ns {
                gone.push(pid);
            } else {
                unsettled = true;
            }
        }
        for pid in gone {
            if let Some(process) = self.processes.remove(&pid) {
                process.retire(&mut self.counters);
            }
        }
        unsettled
    }

    /// Applies the changes of processes with no sample waiting (a VM publishing between
    /// sessions), so that they do not pile up, but no further than `samples_until`: samples
    /// stamped before it may still be on their way.
    pub fn settle(&mut self, now_ns: u64, samples_until: u64) {
        for process in self.processes.values_mut() {
            if process.timeline.pending_samples() == 0 {
                let until = process.known_until(now_ns).min(samples_until);
                process.timeline.advance(until, |_, _, _| {});
            }
            if process.replay.pending_samples() == 0 {
                let until = process.vouched_until(now_ns).min(samples_until);
                process.replay.advance(until, |_, _, _| {});
            }
        }
    }

    /// Processes whose code maps are known: live ones sampled or watched, and the gone ones
    /// until their last samples are read.
    pub fn tracked(&self) -> usize {
        self.processes.len()
    }

    /// Pids with samples waiting, parked or provisional.
    pub fn waiting(&self) -> Vec<u32> {
        self.pids_where(ProcessCode::busy)
    }

    /// Pids with samples waiting or provisional, not only parked: those a batch of samples
    /// advances (see [`ProcessCode::counting`]).
    pub fn counting(&self) -> Vec<u32> {
        self.pids_where(ProcessCode::counting)
    }

    fn pids_where(&self, wanted: impl Fn(&ProcessCode) -> bool) -> Vec<u32> {
        self.processes
            .iter()
            .filter(|(_, p)| wanted(p))
            .map(|(&pid, _)| pid)
            .collect()
    }

    /// Adds to `keep` the binaries of the samples waiting for their code map, not counted in
    /// any session yet: they stay open until the samples are counted (then their sessions hold
    /// them).
    pub fn waiting_modules(&self, keep: &mut impl Extend<ModuleId>) {
        keep.extend(self.waiting_locations().filter_map(|l| match l {
            Location::File { module, .. } => Some(module),
            _ => None,
        }));
    }

    /// The locations of every frame of the samples waiting for their code map.
    fn waiting_locations(&self) -> impl Iterator<Item = Location> + '_ {
        self.processes
            .values()
            .flat_map(|process| process.timeline.pending())
            .flat_map(|sample| {
                let routed = &sample.payload;
                let fp = routed.fp.iter().flat_map(|(frames, _)| frames);
                routed.frames.iter().chain(fp).map(|f| f.location)
            })
    }

    /// Adds to `keep` every code a process's maps refer to, now or in changes still to be
    /// applied, and every code a waiting sample was placed in: what the store must not let go
    /// ([`CodeStore::sweep`]). Sessions' samples hold theirs.
    pub fn codes_in_use(&self, keep: &mut impl Extend<CodeId>) {
        for process in self.processes.values() {
            process.timeline.codes(keep);
            process.replay.codes(keep);
            keep.extend(process.perf_content.codes());
        }
        keep.extend(self.waiting_locations().filter_map(|l| match l {
            Location::Jit { code, .. } => Some(code),
            _ => None,
        }));
    }

    /// Samples counted provisionally and parked for their code map, over all processes.
    pub fn provisional(&self) -> usize {
        self.processes
            .values()
            .map(|p| p.replay.pending_samples())
            .sum()
    }

    /// Notices which processes with samples waiting or parked exited (no session is told of
    /// their exit: a system-wide session's processes, or targets of sessions stopped since):
    /// their files are read one last time at their next advance. A process gone before it
    /// was first read (a short-lived one, sampled in its last milliseconds) has no start time
    /// to compare: whatever holds its pid now is another, or nothing.
    pub fn notice_exits(&mut self) {
        for (&pid, process) in &mut self.processes {
            if process.busy()
                && !process.exited
                && (process.start_time_ticks.is_none()
                    || sys::read_start_time(pid) != process.start_time_ticks)
            {
                process.exited = true;
            }
        }
    }

    /// Samples of `pid` no map of their time explained since its perf map was last rewritten on
    /// request ([`CodeMaps::perf_map_rewritten`]).
    pub fn unexplained_since_snapshot(&self, pid: u32) -> u64 {
        self.processes
            .get(&pid)
            .map_or(0, |p| p.unexplained_since_snapshot)
    }

    /// Samples of `pid` that a perf map read after their time named, so far.
    pub fn named_by_snapshots(&self, pid: u32) -> u64 {
        self.processes.get(&pid).map_or(0, |p| p.named_by_snapshots)
    }

    /// The kinds of code map a process has had, with when each was first found.
    pub fn found(&self, pid: u32) -> Vec<(CodeMapKinds, u64)> {
        self.processes.get(&pid).map_or_else(Vec::new, |p| {
            p.found_ns
                .iter()
                .enumerate()
                .filter(|&(_, &ns)| ns > 0)
                .map(|(bit, &ns)| (CodeMapKinds(1 << bit), ns))
                .collect()
        })
    }

    /// The process's perf map was rewritten by its writer (HotSpot answered
    /// `Compiler.perfmap`): it is read again, whole, at the next advance.
    pub fn perf_map_rewritten(&mut self, pid: u32) {
        if let Some(process) = self.processes.get_mut(&pid) {
            process.unexplained_since_snapshot = 0;
            match &mut process.sources {
                Some(sources) => reread_perf_map(sources),
                None => process.reread_perf_map = true,
            }
        }
    }

    /// Whether a read of the process's files is under way or due at once: a session stopping
    /// waits for it (bounded by its stop timeout), so that a perf map rewritten for its stop
    /// names its samples.
    pub fn reading(&self, pid: u32) -> bool {
        self.processes.get(&pid).is_some_and(|p| p.reading())
    }

    /// Lets go of reader threads idle for a while.
    pub fn retire_idle_readers(&mut self, now_ns: u64) {
        self.readers.retire_idle(now_ns);
    }

    /// A session took its last samples: its samples waiting for a later snapshot are settled
    /// with what the perf map says now (if it changed after them), and let go.
    pub fn session_final(&mut self, session: u64, sink: &mut dyn Sink) {
        for (&pid, process) in &mut self.processes {
            let changed = process.status.perf_map_changed_ns;
            let content = &process.perf_content;
            process.snapshot_parked.retain_mut(|parked| {
                let Some(i) = parked.counted.iter().position(|c| c.session == session) else {
                    return true;
                };
                let mut mine = [parked.counted.swap_remove(i)];
                if changed > parked.timestamp_ns {
                    let named = name_from_snapshot(parked, content);
                    if !named.is_empty() {
                        sink.recount(
                            pid,
                            parked.has_fp,
                            &named,
                            &mut mine,
                            Recount::LaterSnapshot,
                        );
                    }
                }
                !parked.counted.is_empty()
            });
        }
    }

    /// Sends the process's sources to be read (unless a read is under way), and attributes
    /// every sample the maps are known for, handing each to `sink` with its frames placed;
    /// then places again the samples counted provisionally that the sources now vouch for, and
    /// those a perf map read after them names (see the module's doc). What the read finds is
    /// attributed as it comes back ([`CodeMaps::read_done`]); with inline readers, at once.
    ///
    /// `executable` gives the process's executable ranges (perf map and jitdump entries
    /// elsewhere are refused). `samples_until` is how far every sample is known: the
    /// timelines never move beyond it, or a sample still on its way would be looked up in a map
    /// too new. With `force_until`, every waiting sample stamped up to then is attributed with
    /// what is known now (a stop that cannot wait longer), provisionally; later ones keep
    /// waiting.
    pub fn advance(
        &mut self,
        pid: u32,
        now_ns: u64,
        samples_until: u64,
        force_until: Option<u64>,
        executable: &mut dyn FnMut() -> Executable,
        sink: &mut dyn Sink,
    ) {
        self.send_read(pid, now_ns, executable);
        while let Some(reply) = self.readers.take_inline() {
            self.take_back(reply, now_ns);
        }
        self.attribute(pid, now_ns, samples_until, force_until, sink);
    }

    /// A read came back: what it found is applied, and the samples it lets through are
    /// attributed. Answers whether the process wants another read at once: it exited, or its
    /// perf map was rewritten, while this one was under way, or samples came meanwhile that
    /// this read, sent before them, cannot vouch for (they would wait for a tick).
    pub fn read_done(
        &mut self,
        reply: ReadReply,
        now_ns: u64,
        samples_until: u64,
        sink: &mut dyn Sink,
    ) -> bool {
        let pid = reply.job.pid;
        if !self.take_back(reply, now_ns) {
            return false;
        }
        self.attribute(pid, now_ns, samples_until, None, sink);
        self.processes.get(&pid).is_some_and(|p| {
            // Sample times are in the past: the next read, sent now, vouches for them all.
            let unvouched = p
                .timeline
                .newest_pending_ns()
                .is_some_and(|newest| p.read_ns < newest && newest <= now_ns);
            p.reread_perf_map || (p.exited && !p.read_after_exit) || unvouched
        })
    }

    /// Checks the process's sources out to a reader, with the files newly mapped and a budget
    /// on its owner's bytes.
    fn send_read(&mut self, pid: u32, now_ns: u64, executable: &mut dyn FnMut() -> Executable) {
        let Some(process) = self.processes.get_mut(&pid) else {
            return;
        };
        let Some(mut sources) = process.sources.take() else {
            return;
        };
        if std::mem::take(&mut process.reread_perf_map) {
            reread_perf_map(&mut sources);
        }
        process.generation = self.next_generation;
        self.next_generation += 1;
        // Files are read on their owner's budget; processes whose owner could not be read (gone
        // at once) share one.
        let uid = process.uid.unwrap_or(u32::MAX);
        let request = ReadRequest {
            generation: process.generation,
            job: ReadJob {
                pid,
                nspid: process.nspid,
                uid: process.uid,
                now_ns,
                exited: process.exited,
            },
            sources,
            files: std::mem::take(&mut process.new_files),
            executable: executable(),
            budget: self.budgets.take(uid, now_ns),
            hold: self.store.hold(uid),
        };
        self.readers.send(uid, request, now_ns);
    }

    /// Takes a read's sources back and applies what it found; answers whether they were the
    /// process's current ones (stale ones are dropped, what they refused counted).
    fn take_back(&mut self, reply: ReadReply, now_ns: u64) -> bool {
        self.readers.returned(&reply);
        let ReadReply {
            generation,
            job,
            mut sources,
            outcome: read,
            budget_left,
            hold,
            ..
        } = reply;
        self.budgets
            .put_back(job.uid.unwrap_or(u32::MAX), budget_left, read.cut_short);
        self.counters.sources += read.opened;
        self.counters.source_failures += read.failures;
        self.counters.mapped_late += read.mapped_late;
        self.counters.reads_panicked += u64::from(read.panicked);
        for mut refusals in read.dropped {
            count_refusals(&mut self.counters, &mut refusals);
        }
        let current = self
            .processes
            .get_mut(&job.pid)
            .filter(|p| p.sources.is_none() && p.generation == generation);
        let Some(process) = current else {
            // The process exec'd or was forgotten meanwhile: what it read is another
            // program's, or nobody's.
            self.counters.reads_stale += 1;
            sources.give_up_held();
            for refusals in sources.refusals() {
                count_refusals(&mut self.counters, refusals);
            }
            return false;
        };
        for range in read.refused_ranges {
            if process.refused_ranges.len() == MAX_REFUSED_RANGES {
                process.refused_ranges.pop_front();
            }
            process.refused_ranges.push_back(range);
        }
        for (_, change) in &read.changes[..read.perf_map_changes] {
            // Refusals are the timeline's to count: the content only names.
            let _ = apply_change(&mut process.perf_content, change);
        }
        process.perf_map_changed |= read.perf_map_changes > 0;
        process.status = sources.status();
        process.sources = Some(sources);
        process.read_ns = process.read_ns.max(job.now_ns);
        process.read_after_exit |= job.exited;
        process.note_found(now_ns);
        if !read.stats.is_empty() {
            self.stats.push((job.pid, read.stats));
        }
        process.push_changes(now_ns, read.changes);
        // The changes are in the timeline, which keeps its codes from the sweeps.
        drop(hold);
        true
    }

    /// Attributes the process's samples that the maps are known for (see
    /// [`CodeMaps::advance`]).
    fn attribute(
        &mut self,
        pid: u32,
        now_ns: u64,
        samples_until: u64,
        force_until: Option<u64>,
        sink: &mut dyn Sink,
    ) {
        for (pid, stats) in self.stats.drain(..) {
            sink.statistics(pid, stats);
        }
        let Some(process) = self.processes.get_mut(&pid) else {
            return;
        };
        let final_read = process.exited && process.read_after_exit;
        let perf_changed = std::mem::take(&mut process.perf_map_changed);
        let known = process.known_until(now_ns).min(samples_until);
        let vouched = process.vouched_until(now_ns);
        // A forced advance attributes the waiting samples up to its limit, but moves the
        // timeline no further than the newest of them: changes stamped later still apply in
        // order, for the samples of other sessions still to come (and later samples wait).
        let until = match (process.timeline.newest_pending_ns(), force_until) {
            (Some(newest), Some(limit)) => known.max(newest.min(limit)),
            _ => known,
        };
        let kinds = process.kinds();
        let mut unexplained: Vec<Parked> = Vec::new();
        {
            let ProcessCode {
                timeline,
                replay,
                refused_ranges,
                ..
            } = process;
            let counters = &mut self.counters;
            let why = |timeline: &Timeline<RoutedSample>, frame: &mut SampleFrame| {
                if let Location::Anonymous { why: w, .. } = &mut frame.location {
                    *w = why_unexplained(timeline, refused_ranges, frame.lookup, kinds);
                }
            };
            let mut attributed = Vec::new();
            timeline.advance(until, |sample, found, map| {
                let mut placed = sample.payload;
                // Kept as normalised, to be placed again if counted provisionally.
                let generated = Parked::of(
                    sample.timestamp_ns,
                    &placed,
                    Vec::new(),
                    SampleFrame::is_generated,
                );
                if generated.frames.is_empty() {
                    // Native code of a VM that publishes: it waited for its time only.
                    attributed.push((sample.ip, generated, placed));
                    return;
                }
                if found.is_some() {
                    counters.attributed += 1;
                } else {
                    counters.unexplained += 1;
                }
                for frame in placed.frames_mut() {
                    frame.place(map);
                }
                attributed.push((sample.ip, generated, placed));
            });
            for (ip, mut generated, mut placed) in attributed {
                let timestamp_ns = generated.timestamp_ns;
                if generated.frames.is_empty() {
                    sink.count(pid, timestamp_ns, &placed, false);
                    continue;
                }
                placed.frames_mut().for_each(|f| why(timeline, f));
                let provisional = timestamp_ns > vouched;
                let counted = sink.count(pid, timestamp_ns, &placed, provisional);
                if provisional {
                    self.counters.provisional += 1;
                    generated.counted = counted;
                    replay.push_sample(PendingSample {
                        timestamp_ns,
                        ip,
                        payload: generated,
                    });
                } else if placed.has_unexplained() {
                    unexplained.push(Parked::of(
                        timestamp_ns,
                        &placed,
                        counted,
                        SampleFrame::is_generated,
                    ));
                }
            }

            // Provisional samples whose sources caught up with their time.
            let mut caught_up = Vec::new();
            let replay_until = vouched.min(samples_until);
            replay.advance(replay_until, |sample, _, map| {
                let parked = sample.payload;
                let placed: Vec<(ParkedFrame, Placement)> = parked
                    .frames
                    .iter()
                    .map(|&f| (f, Placement::in_map(map, f.lookup, false)))
                    .collect();
                caught_up.push((parked, placed));
            });
            for (mut parked, mut placed) in caught_up {
                for (frame, placement) in &mut placed {
                    if let Placement::Unexplained(w) = placement {
                        *w = why_unexplained(timeline, refused_ranges, frame.lookup, kinds);
                    }
                }
                self.counters.caught_up += 1;
                let mut counted = std::mem::take(&mut parked.counted);
                sink.recount(pid, parked.has_fp, &placed, &mut counted, Recount::CaughtUp);
                parked.frames = placed
                    .iter()
                    .filter(|(_, p)| matches!(p, Placement::Unexplained(_)))
                    .map(|&(f, _)| f)
                    .collect();
                if !parked.frames.is_empty() {
                    parked.counted = counted;
                    unexplained.push(parked);
                }
            }
            // Too old, or too many: they stay provisional. Taken only when some are, for the
            // taking sorts and moves every parked sample, and this runs with every batch.
            let oldest = now_ns.saturating_sub(MAX_PARK_NS);
            let excess = replay.pending_samples().saturating_sub(MAX_PARKED);
            let due = excess > 0 || replay.oldest_pending_ns().is_some_and(|t| t < oldest);
            let mut n = 0;
            let expired = if due {
                replay.take_samples(|s| {
                    n += 1;
                    s.timestamp_ns < oldest || n <= excess
                })
            } else {
                Vec::new()
            };
            for expired in expired {
                let mut parked = expired.payload;
                self.counters.expired += 1;
                sink.recount(
                    pid,
                    parked.has_fp,
                    &[],
                    &mut parked.counted,
                    Recount::Expired,
                );
            }
        }

        // Unexplained samples a perf map read after them may name.
        let changed = process.status.perf_map_changed_ns;
        let content = &process.perf_content;
        let named_by_snapshots = &mut process.named_by_snapshots;
        let mut settle = |parked: &mut Parked, sink: &mut dyn Sink| -> bool {
            if changed > parked.timestamp_ns {
                let named = name_from_snapshot(parked, content);
                if !named.is_empty() {
                    self.counters.later_snapshot += 1;
                    *named_by_snapshots += 1;
                    sink.recount(
                        pid,
                        parked.has_fp,
                        &named,
                        &mut parked.counted,
                        Recount::LaterSnapshot,
                    );
                }
                return true;
            }
            final_read
                || !parked
                    .counted
                    .iter()
                    .any(|c| sink.takes_snapshots(c.session))
        };
        if perf_changed || final_read {
            process
                .snapshot_parked
                .retain_mut(|parked| !settle(parked, sink));
        }
        process.unexplained_since_snapshot += unexplained.len() as u64;
        for mut parked in unexplained {
            if !settle(&mut parked, sink) {
                process.snapshot_parked.push(parked);
            }
        }
        if process.snapshot_parked.len() > MAX_PARKED {
            let excess = process.snapshot_parked.len() - MAX_PARKED;
            process.snapshot_parked.drain(..excess);
        }
        // Refusals are counted as they happen (reading sources, applying changes), and said
        // once per source: at the process's last read, or now and then while it lives.
        for refusals in process.refusals() {
            count_refusals(&mut self.counters, refusals);
            refusals.log_summary(now_ns, final_read);
        }
    }
}

/// Reads a perf map again from its start at the next read (or looks for it at once).
fn reread_perf_map(sources: &mut Sources) {
    match &mut sources.perf_map {
        Some(source) => source.reread(),
        None => sources.perf_map_checked_ns = 0,
    }
}

/// Why an address no map explains is unexplained.
fn why_unexplained(
    timeline: &Timeline<RoutedSample>,
    refused_ranges: &std::collections::VecDeque<(u64, u64)>,
    addr: u64,
    kinds: CodeMapKinds,
) -> Unexplained {
    if timeline.refused_at(addr) {
        Unexplained::Refused(RefusedEntry::Unapplicable)
    } else if refused_ranges
        .iter()
        .any(|&(start, end)| start <= addr && addr < end)
    {
        Unexplained::Refused(RefusedEntry::NotExecutable)
    } else if kinds.is_empty() {
        Unexplained::NoCodeMap
    } else {
        Unexplained::NoEntry(kinds)
    }
}

/// The frames of a parked sample a perf map's content names, marked as from a later snapshot.
fn name_from_snapshot(parked: &Parked, content: &LiveMap) -> Vec<(ParkedFrame, Placement)> {
    parked
        .frames
        .iter()
        .map(|&f| (f, Placement::in_map(content, f.lookup, true)))
        .filter(|(_, p)| matches!(p, Placement::Named { .. }))
        .collect()
}

/// The effective uid of a process, if it still runs.
fn read_uid(pid: u32) -> Option<u32> {
    sys::read_status(pid).ok().map(|s| s.uids.effective)
}

/// Adds what `refusals` refused since it was last counted to the daemon's counters.
pub(super) fn count_refusals(counters: &mut CodeMapCounters, refusals: &mut Refusals) {
    for (reason, n) in refusals.take_uncounted() {
        *counters.refused.entry(reason).or_default() += n;
    }
}

/// Changes stamped further ahead than this are refused: clocks agree far better, and a change
/// in the future would wait (held in memory) until then.
pub const MAX_FUTURE_NS: u64 = 10_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codemap::code::{Code, CodeSource};
    use crate::codemap::sample::{Counted, Wanted};
    use crate::sys::FileId;
    use crate::vocab::{MappedFileKind, StackEnd};
    use std::{collections::HashSet, path::PathBuf};
    use vmscope_model::CodeKind;

    /// A process's root directory is held until its perf map has been looked for once after it
    /// exited, and closed then: nothing opens through it any more, and a host running many
    /// short-lived targets must not keep one descriptor per dead process.
    #[test]
    fn the_root_of_an_exited_process_is_closed_after_its_last_look() {
        let mut maps = CodeMaps::new(Arc::new(CodeStore::new()));
        let me = std::process::id();
        let advance = |maps: &mut CodeMaps, now| {
            maps.advance(
                me,
                now,
                now,
                None,
                &mut Executable::anywhere,
                &mut Recorder::default(),
            )
        };
        maps.touch(me);
        assert!(maps.processes[&me].sources.as_ref().unwrap().root.is_some());
        advance(&mut maps, 1);
        assert!(
            maps.processes[&me].sources.as_ref().unwrap().root.is_some(),
            "alive: held"
        );
        maps.exited(me);
        advance(&mut maps, 2);
        assert!(
            maps.processes[&me].sources.as_ref().unwrap().root.is_none(),
            "looked once more, closed"
        );
    }

    /// What a sink was told: (what, sample time, where its leaf was placed).
    type Told = (&'static str, u64, Location);

    /// A sink that records what it is told; sessions in `stopped` take no later snapshot. Its
    /// "stacks" are the indices of the samples' times in `times`.
    #[derive(Default)]
    struct Recorder {
        told: Vec<Told>,
        stopped: HashSet<u64>,
        times: Vec<u64>,
    }

    impl Sink for Recorder {
        fn count(
            &mut self,
            _pid: u32,
            timestamp_ns: u64,
            sample: &RoutedSample,
            provisional: bool,
        ) -> Vec<Counted> {
            let what = if provisional { "provisional" } else { "count" };
            self.told
                .push((what, timestamp_ns, sample.frames[0].location));
            self.times.push(timestamp_ns);
            let stack = self.times.len() as u32 - 1;
            sample
                .sessions
                .iter()
                .map(|&(session, wanted)| Counted {
                    session,
                    tid: sample.tid,
                    wanted,
                    stack,
                    kept: None,
                    block: None,
                    sends: 0,
                })
                .collect()
        }

        fn recount(
            &mut self,
            pid: u32,
            _has_fp: bool,
            placed: &[(ParkedFrame, Placement)],
            counted: &mut [Counted],
            why: Recount,
        ) {
            let what = match why {
                Recount::CaughtUp => "caught up",
                Recount::Expired => "expired",
                Recount::LaterSnapshot => "later snapshot",
            };
            if let Some(&(_, placement)) = placed.first() {
                let ts = self.times[counted[0].stack as usize];
                let old = anon(pid, Unexplained::NotLookedUp);
                self.told.push((what, ts, placement.apply(old)));
            }
        }

        fn takes_snapshots(&self, session: u64) -> bool {
            !self.stopped.contains(&session)
        }

        fn statistics(&mut self, _pid: u32, _stats: Vec<(u64, StatEvent)>) {}
    }

    fn jit(code: CodeId, offset: u64, later_snapshot: bool) -> Location {
        Location::Jit {
            code,
            offset,
            later_snapshot,
        }
    }

    fn anon(pid: u32, why: Unexplained) -> Location {
        Location::Anonymous {
            pid,
            start: 0x7f00_0000_0000,
            end: 0x7f00_1000_0000,
            why,
        }
    }

    fn jit_sample(pid: u32, ts: u64, ip: u64) -> PendingSample<RoutedSample> {
        PendingSample {
            timestamp_ns: ts,
            ip,
            payload: RoutedSample {
                tid: pid,
                kernel: false,
                end: StackEnd::Complete,
                frames: vec![SampleFrame {
                    location: anon(pid, Unexplained::NotLookedUp),
                    address: ip,
                    lookup: ip,
                    code_start: 0,
                }],
                fp: None,
                sessions: vec![(1, Wanted::Leaf)],
                sends: Vec::new(),
                labels: 0,
                block: None,
            },
        }
    }

    /// A live process of this test's own (`sleep 30`), killed and reaped when dropped, even
    /// when an assertion fails: its pid is one no other test writes maps for.
    struct Sleeper(std::process::Child);

    impl Sleeper {
        fn start() -> Sleeper {
            Sleeper(
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .expect("spawn sleep"),
            )
        }

        fn pid(&self) -> u32 {
            self.0.id()
        }

        /// Ends it now.
        fn end(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    impl Drop for Sleeper {
        fn drop(&mut self) {
            self.end();
        }
    }

    /// A sample of `pid` at 2 s in code its open publication does not explain, counted
    /// provisionally after the grace and parked. Returns its time.
    fn park_one(maps: &mut CodeMaps, pid: u32, sink: &mut Recorder) -> u64 {
        let at = 2_000_000_000;
        maps.stream_opened(pid);
        maps.push_sample(pid, jit_sample(pid, at, 0x1010));
        advance(maps, pid, at + PUBLICATION_GRACE_NS + 1, sink);
        assert_eq!(maps.provisional(), 1);
        at
    }

    fn advance(maps: &mut CodeMaps, pid: u32, now: u64, sink: &mut Recorder) {
        maps.advance(pid, now, now, None, &mut Executable::anywhere, sink);
    }

    /// A sample waiting for its code map is in no session yet: the registry says which
    /// binaries it needs, so that they stay open until it is counted.
    #[test]
    fn waiting_samples_hold_their_binaries() {
        let store = Arc::new(CodeStore::new());
        let mut maps = CodeMaps::new(store);
        let pid = std::process::id();
        maps.stream_opened(pid);
        let mut sample = jit_sample(pid, 2_000, 0x1010);
        let file = |module, offset| SampleFrame {
            location: Location::File {
                module: ModuleId(module),
                offset,
                main_executable: false,
            },
            address: offset,
            lookup: offset,
            code_start: 0,
        };
        sample.payload.frames.push(file(7, 0x40));
        sample.payload.fp = Some((vec![file(8, 0x50)], StackEnd::Complete));
        maps.push_sample(pid, sample);
        let mut modules = Vec::new();
        maps.waiting_modules(&mut modules);
        modules.sort();
        assert_eq!(modules, [ModuleId(7), ModuleId(8)]);
        // Counted, the sample is its sessions' to hold.
        maps.publish(
            pid,
            vec![(1_000, load(0x1000, method(maps.store(), "m")))],
            3_000,
        );
        advance(&mut maps, pid, 3_000, &mut Recorder::default());
        let mut modules = Vec::new();
        maps.waiting_modules(&mut modules);
        assert!(modules.is_empty(), "{modules:?}");
    }

    /// A perf map has no timestamps: read after samples that nothing else explained, it names
    /// them, marked as a later snapshot, while their session has not stopped; samples after
    /// the read are named on time.
    #[test]
    fn a_perf_map_read_later_names_earlier_samples_as_a_later_snapshot() {
        // A live process of ours, whose /tmp/perf-PID.map this test may write.
        let child = Sleeper::start();
        let pid = child.pid();
        let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        let _ = std::fs::remove_file(&path);
        let store = Arc::new(CodeStore::new());
        let mut maps = CodeMaps::new(store.clone());
        let mut sink = Recorder::default();
        maps.touch(pid);
        let ip = 0x7f00_0000_1010;
        maps.push_sample(pid, jit_sample(pid, 1_000_000_000, ip));
        let mut late = jit_sample(pid, 1_100_000_000, ip);
        late.payload.sessions = vec![(2, Wanted::Leaf)];
        maps.push_sample(pid, late);
        // No map yet: after the discovery wait, unexplained, for want of any map.
        advance(&mut maps, pid, 2_000_000_000, &mut sink);
        assert_eq!(maps.unexplained_since_snapshot(pid), 2);
        let none = anon(pid, Unexplained::NoCodeMap);
        assert_eq!(
            sink.told,
            [
                ("count", 1_000_000_000, none),
                ("count", 1_100_000_000, none)
            ]
        );
        // Session 2 stops before the map appears: it keeps its answer.
        sink.stopped.insert(2);
        let mut told = std::mem::take(&mut sink.told);
        maps.session_final(2, &mut sink);
        assert!(sink.told.is_empty(), "{:?}", sink.told);

        std::fs::write(&path, "7f0000001000 100 JS:*hot app.js:1:1\n").unwrap();
        maps.perf_map_rewritten(pid);
        maps.push_sample(pid, jit_sample(pid, 3_500_000_000, ip));
        advance(&mut maps, pid, 3_000_000_000, &mut sink);
        // Interning again finds the same code.
        let hot = store
            .intern(
                Code::named(CodeKind::Unknown, "JS:*hot app.js:1:1", CodeSource::PerfMap),
                crate::sys::effective_uid(),
            )
            .unwrap();
        assert_eq!(
            sink.told,
            [("later snapshot", 1_000_000_000, jit(hot, 0x10, true))]
        );
        told.append(&mut sink.told);
        // After the read, on time.
        advance(&mut maps, pid, 4_000_000_000, &mut sink);
        assert_eq!(sink.told, [("count", 3_500_000_000, jit(hot, 0x10, false))]);
        assert_eq!(maps.counters().later_snapshot, 1);
        // What tells a JVM's snapshot was worth asking for.
        assert_eq!(maps.named_by_snapshots(pid), 1);
        assert_eq!(maps.unexplained_since_snapshot(pid), 0);

        let _ = std::fs::remove_file(&path);
    }

    /// A process gone before the daemon first read it (sampled in its last milliseconds)
    /// has no start time to compare with what holds its pid now: it is noticed exited all the
    /// same, its parked samples settle at its last read, and it is forgotten. (It was not:
    /// under churn such processes piled up, each read again at every batch.) Parked samples
    /// alone do not make a process advance with every batch.
    #[test]
    fn a_process_gone_before_its_first_read_is_noticed_and_forgotten() {
        let mut child = Sleeper::start();
        let pid = child.pid();
        child.end();
        let mut maps = CodeMaps::new(Arc::new(CodeStore::new()));
        let mut sink = Recorder::default();
        maps.touch(pid);
        maps.push_sample(pid, jit_sample(pid, 1_000_000_000, 0x7f00_0000_1010));
        assert_eq!((maps.waiting(), maps.counting()), (vec![pid], vec![pid]));
        // No map: after the discovery wait, unexplained, and parked for a later perf map.
        advance(&mut maps, pid, 2_000_000_000, &mut sink);
        assert_eq!(sink.told.len(), 1, "{:?}", sink.told);
        assert_eq!((maps.waiting(), maps.counting()), (vec![pid], vec![]));
        maps.notice_exits();
        advance(&mut maps, pid, 2_100_000_000, &mut sink);
        assert!(
            maps.waiting().is_empty(),
            "still parked after its last read"
        );
        assert!(!maps.forget_gone(2_200_000_000, 2_200_000_000));
        assert!(!maps.forget_gone(2_300_000_000, 2_300_000_000));
        assert_eq!(maps.tracked(), 0);
    }

    fn load(start: u64, code: CodeId) -> Change {
        Change::Load {
            start,
            size: Some(0x100),
            code,
        }
    }

    fn method(store: &CodeStore, name: &str) -> CodeId {
        store
            .intern(
                Code::named(CodeKind::Method, name, CodeSource::Vm("vm".into())),
                0,
            )
            .unwrap()
    }

    /// A publisher's changes stamped far in the future are refused, not held until then.
    #[test]
    fn changes_from_the_future_are_refused() {
        let store = Arc::new(CodeStore::new());
        let code = method(&store, "m");
        let mut maps = CodeMaps::new(store);
        let pid = std::process::id();
        let now = sys::monotonic_ns();
        maps.stream_opened(pid);
        maps.publish(
            pid,
            vec![
                (now, load(0x1000, code)),
                (now + MAX_FUTURE_NS + 1_000_000_000, load(0x2000, code)),
            ],
            now,
        );
        maps.settle(now + 1, now + 1);
        let c = maps.counters();
        assert_eq!(c.changes_refused, 1, "{c:?}");
        assert_eq!(c.changes, 1, "{c:?}");
        // Forgotten, the process's counts stay in the daemon's.
        maps.stream_closed(pid);
        maps.retain(|_| false);
        let after = maps.counters();
        assert!(maps.waiting().is_empty() && maps.processes.is_empty());
        assert_eq!((after.changes_refused, after.changes), (1, 1), "{after:?}");
    }

    /// A process gone is forgotten once no sample of it can be on its way, and then its codes
    /// are no longer in use: the store's sweep reclaims them.
    #[test]
    fn the_maps_of_a_process_gone_are_let_go() {
        let store = Arc::new(CodeStore::new());
        let code = method(&store, "m");
        let mut maps = CodeMaps::new(store.clone());
        let mut child = Sleeper::start();
        let pid = child.pid();
        let now = sys::monotonic_ns();
        maps.stream_opened(pid);
        maps.publish(pid, vec![(now, load(0x1000, code))], now);
        maps.settle(now + 1, now + 1);
        maps.stream_closed(pid);
        let in_use = |maps: &CodeMaps| {
            let mut keep = std::collections::BTreeSet::new();
            maps.codes_in_use(&mut keep);
            keep.into_iter().collect::<Vec<_>>()
        };
        assert!(!maps.forget_gone(now + 2, now + 2), "alive");
        assert_eq!(in_use(&maps), [code]);
        child.end();
        // Found gone at +3, while the reader has read only up to +2: its samples may come.
        assert!(maps.forget_gone(now + 3, now + 2));
        assert_eq!(in_use(&maps), [code]);
        assert!(!maps.forget_gone(now + 4, now + 3));
        assert!(in_use(&maps).is_empty() && maps.processes.is_empty());
        store.sweep(|_| false);
        store.sweep(|_| false);
        assert!(store.get(code).is_none() && store.is_empty());
    }

    /// A forced advance (a stop at its deadline) attributes every waiting sample, provisionally,
    /// but leaves later changes to apply in order, not as late ones; the provisional sample
    /// is placed again when the publication catches up.
    #[test]
    fn a_forced_advance_stops_at_the_newest_sample() {
        let store = Arc::new(CodeStore::new());
        let a = method(&store, "a");
        let b = method(&store, "b");
        let mut maps = CodeMaps::new(store);
        let pid = std::process::id();
        let mut sink = Recorder::default();
        maps.stream_opened(pid);
        maps.publish(pid, vec![(1_000, load(0x1000, a))], 1_000);
        maps.push_sample(pid, jit_sample(pid, 2_000, 0x1010));
        // Nothing is known past 1_000: only force attributes the sample at 2_000.
        maps.advance(
            pid,
            2_500,
            1_500,
            Some(u64::MAX),
            &mut Executable::anywhere,
            &mut sink,
        );
        assert_eq!(sink.told, [("provisional", 2_000, jit(a, 0x10, false))]);
        // b replaces a at 3_000; a sample at 4_000 sees b, and nothing counts as late.
        maps.publish(pid, vec![(3_000, load(0x1000, b))], 5_000);
        maps.push_sample(pid, jit_sample(pid, 4_000, 0x1010));
        sink.told.clear();
        advance(&mut maps, pid, 5_000, &mut sink);
        assert_eq!(
            sink.told,
            [
                ("count", 4_000, jit(b, 0x10, false)),
                ("caught up", 2_000, jit(a, 0x10, false)),
            ]
        );
        let c = maps.counters();
        assert_eq!((c.changes_late, c.samples_late), (0, 0), "{c:?}");
        assert_eq!((c.provisional, c.caught_up), (1, 1), "{c:?}");
    }

    /// A publication that falls silent (a VM buffering its map until exit) lets samples go
    /// after the grace, provisionally; when its events arrive, stamped before them, the
    /// samples are placed again in the map of their time, whatever came after.
    #[test]
    fn provisional_samples_are_placed_again_in_the_map_of_their_time() {
        let store = Arc::new(CodeStore::new());
        let hot = method(&store, "hot");
        let decoy = method(&store, "decoy");
        let mut maps = CodeMaps::new(store);
        // A process of its own: another test writes a perf map for this one's pid.
        let child = Sleeper::start();
        let pid = child.pid();
        let mut sink = Recorder::default();
        let s = 1_000_000_000;
        assert_eq!(park_one(&mut maps, pid, &mut sink), 2 * s);
        let published = anon(pid, Unexplained::NoEntry(CodeMapKinds::PUBLICATION));
        assert_eq!(sink.told, [("provisional", 2 * s, published)]);
        sink.told.clear();
        // The VM flushes: hot was there from 1 s, a decoy took its place at 3 s.
        maps.publish(
            pid,
            vec![(s, load(0x1000, hot)), (3 * s, load(0x1000, decoy))],
            4 * s,
        );
        advance(&mut maps, pid, 4 * s, &mut sink);
        assert_eq!(sink.told, [("caught up", 2 * s, jit(hot, 0x10, false))]);
        assert_eq!(maps.provisional(), 0);
        assert!(maps.waiting().is_empty());
    }

    /// A provisional sample whose map never catches up stays parked until
    /// [`MAX_PARK_NS`], and is let go then, provisional for good.
    #[test]
    fn provisional_samples_parked_too_long_expire() {
        let mut maps = CodeMaps::new(Arc::new(CodeStore::new()));
        let child = Sleeper::start();
        let pid = child.pid();
        let mut sink = Recorder::default();
        let s = 1_000_000_000;
        assert_eq!(park_one(&mut maps, pid, &mut sink), 2 * s);
        sink.told.clear();
        advance(&mut maps, pid, 2 * s + MAX_PARK_NS, &mut sink);
        assert_eq!(
            (maps.provisional(), maps.counters().expired),
            (1, 0),
            "not yet"
        );
        advance(&mut maps, pid, 2 * s + MAX_PARK_NS + 1, &mut sink);
        assert_eq!((maps.provisional(), maps.counters().expired), (0, 1));
        assert!(sink.told.is_empty(), "nothing placed: {:?}", sink.told);
    }

    /// A user's file whose open hangs (FUSE, NFS) holds up neither the caller nor another
    /// user's reads: its process's samples are attributed provisionally after
    /// [`READ_GRACE_NS`], and placed again once the read comes back.
    #[test]
    fn a_read_that_hangs_stalls_neither_the_manager_nor_another_user() {
        use std::sync::{Mutex, mpsc as std_mpsc};
        let (a, b) = (Sleeper::start(), Sleeper::start());
        let (root_pid, user_pid) = (a.pid(), b.pid());
        let (release, released) = std_mpsc::channel::<()>();
        let released = Mutex::new(released);
        let opened: Arc<Mutex<Vec<u32>>> = Arc::default();
        let seen = opened.clone();
        let open: reader::Opener = Arc::new(move |pid, _file| {
            seen.lock().unwrap().push(pid);
            // The server of the user's file answers when the test says so.
            let _ = released
                .lock()
                .unwrap()
                .recv_timeout(std::time::Duration::from_secs(30));
            Err(std::io::Error::other("the file system did not answer"))
        });
        let (replies_tx, mut replies) = tokio::sync::mpsc::unbounded_channel();
        let readers = Readers::threaded(Arc::new(CodeStore::new()), open, replies_tx);
        let mut maps = CodeMaps::with_readers(readers);
        let mut sink = Recorder::default();
        maps.touch(root_pid);
        maps.touch(user_pid);
        maps.processes.get_mut(&root_pid).unwrap().uid = Some(0);
        maps.processes.get_mut(&user_pid).unwrap().uid = Some(4242);
        maps.observe_files(
            user_pid,
            &[MappedCodeMapFile {
                path: format!("/fuse/jit-{user_pid}.dump").into(),
                start: 0x7000,
                end: 0x8000,
                id: FileId {
                    dev_major: 0,
                    dev_minor: 99,
                    inode: 7,
                },
                kind: MappedFileKind::Jitdump,
            }],
        );
        let s = 1_000_000_000;
        maps.push_sample(user_pid, jit_sample(user_pid, 2 * s, 0x1010));
        maps.push_sample(root_pid, jit_sample(root_pid, 2 * s, 0x1010));
        let t = 2 * s + 300_000_000;
        let advance = |maps: &mut CodeMaps, pid, now, sink: &mut Recorder| {
            maps.advance(pid, now, now, None, &mut Executable::anywhere, sink)
        };

        // The user's read is out and hangs in its open; the call came back all the same.
        advance(&mut maps, user_pid, t, &mut sink);
        while opened.lock().unwrap().is_empty() {
            std::thread::yield_now();
        }
        assert!(maps.reading(user_pid));
        // Root's read goes to its own reader, comes back, and lets its sample through.
        advance(&mut maps, root_pid, t, &mut sink);
        let reply = replies.blocking_recv().expect("root's read");
        assert_eq!(
            reply.job.pid, root_pid,
            "only root's read can have come back"
        );
        assert!(!maps.read_done(reply, t, t, &mut sink));
        let none = |pid| anon(pid, Unexplained::NoCodeMap);
        assert_eq!(sink.told, [("count", 2 * s, none(root_pid))]);
        assert_eq!(maps.counters().read_threads, 2);
        sink.told.clear();

        // The user's sample waits for its read, at most READ_GRACE_NS: then provisionally.
        advance(&mut maps, user_pid, t + READ_GRACE_NS / 2, &mut sink);
        assert!(sink.told.is_empty(), "{:?}", sink.told);
        advance(&mut maps, user_pid, 2 * s + READ_GRACE_NS + 1, &mut sink);
        assert_eq!(sink.told, [("provisional", 2 * s, none(user_pid))]);
        assert_eq!(maps.counters().reads_in_flight, 1);
        sink.told.clear();

        // The file system answers at last: the read comes back, vouches for the sample's time.
        release.send(()).unwrap();
        let reply = replies.blocking_recv().expect("the user's read");
        assert_eq!(reply.job.pid, user_pid);
        maps.read_done(reply, 4 * s, 4 * s, &mut sink);
        assert_eq!(sink.told, [("caught up", 2 * s, none(user_pid))]);
        let c = maps.counters();
        assert_eq!((c.reads_in_flight, c.source_failures), (0, 1), "{c:?}");
    }
}
