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

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fs::File,
    path::{Path, PathBuf},
    sync::Arc,
};

use vmscope_parse::stat;

use super::{
    code::{CodeId, CodeStore},
    live::LiveMap,
    refusals::{Reason, Refusals},
    sources::{CodeMapFileSource, JitdumpSource, PerfMapSource},
    timeline::{Change, PendingSample, Timeline},
};
use crate::{
    symbolize::Location,
    sys::{self, FileId},
    unwind::StackEnd,
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

/// A sample routed to its sessions, with its stack. One with a frame in generated code waits in
/// its process's timeline until the code maps are known up to its time, then has those frames
/// placed ([`SampleFrame::place`]) before it is counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutedSample {
    /// Thread.
    pub tid: u32,
    /// Whether the tick landed in the kernel.
    pub kernel: bool,
    /// How the stack's walk ended (for the sessions that want stacks).
    pub end: StackEnd,
    /// The stack, leaf first (the leaf alone when no session wants stacks): unwound from the
    /// sample's stack copy when it has one, else the kernel's frame-pointer walk.
    pub frames: Vec<SampleFrame>,
    /// The kernel's frame-pointer stack and how it ended, when `frames` was unwound from a copy
    /// and some session asked for frame pointers: each session gets the stack it asked for.
    pub fp: FpStack,
    /// The sessions that counted it, and which of its stacks each counts.
    pub sessions: Vec<(u64, Wanted)>,
}

/// A sample's frame-pointer stack beside the stack unwound from its copy, and how it ended.
pub type FpStack = Option<(Vec<SampleFrame>, StackEnd)>;

/// Which of a sample's stacks a session counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// The leaf alone (no call graph).
    Leaf,
    /// [`RoutedSample::frames`] (`--call-graph dwarf`, or frame pointers when nothing was
    /// copied).
    Stack,
    /// The frame-pointer stack: [`RoutedSample::fp`] when there is one, else `frames`.
    FramePointers,
}

impl RoutedSample {
    /// The frames a session wanting `wanted` counts, and how that stack ended (`None` for the
    /// leaf alone).
    pub fn stack_for(&self, wanted: Wanted) -> (&[SampleFrame], Option<StackEnd>) {
        match (wanted, &self.fp) {
            (Wanted::Leaf, _) => (&self.frames[..1], None),
            (Wanted::FramePointers, Some((fp, end))) => (fp, Some(*end)),
            _ => (&self.frames, Some(self.end)),
        }
    }

    /// Every frame of the sample, in all its stacks: each is placed in the code-map timeline.
    pub fn frames_mut(&mut self) -> impl Iterator<Item = &mut SampleFrame> {
        let fp = self.fp.iter_mut().flat_map(|(fp, _)| fp.iter_mut());
        self.frames.iter_mut().chain(fp)
    }
}

/// A frame of a sample, placed while its process lived; a frame in generated code is placed
/// again once the code map is known up to the sample's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleFrame {
    /// Where it is: [`Location::Anonymous`] for generated code no code map has placed (yet).
    pub location: Location,
    /// The address as the stack held it.
    pub address: u64,
    /// The address it is placed by: the instruction pointer itself for the leaf, the return
    /// address minus one (inside the call) for callers.
    pub lookup: u64,
    /// Generated code: the start of the code entry it fell in, at the sample's time; else 0.
    pub code_start: u64,
}

impl SampleFrame {
    /// Whether it is in generated code a code map may name.
    pub fn is_generated(&self) -> bool {
        matches!(self.location, Location::Anonymous { .. })
    }

    /// Places a frame in generated code with `map`, the code map as it was at the sample's
    /// time; other frames, and code the map does not explain, stay as they are.
    pub fn place(&mut self, map: &LiveMap) {
        if self.is_generated()
            && let Some((start, code)) = map.lookup(self.lookup)
        {
            self.location = Location::Jit {
                code,
                offset: self.lookup - start,
            };
            self.code_start = start;
        }
    }
}

/// Where a code map file of a process is, as its mappings show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedCodeMapFile {
    /// Path as mapped.
    pub path: PathBuf,
    /// A mapping of it, to open it through /proc/PID/map_files.
    pub start: u64,
    /// End of that mapping.
    pub end: u64,
    /// Its identity.
    pub id: FileId,
    /// jitdump (`jit-PID.dump`) or vmscope (`vmscope-PID.codemap`).
    pub kind: MappedFileKind,
}

/// The two kinds of code map files found through mappings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MappedFileKind {
    /// Linux perf's jitdump.
    Jitdump,
    /// vmscope's own format.
    CodeMap,
}

impl MappedFileKind {
    /// The kind of a mapped file, by its name.
    pub fn of(path: &Path) -> Option<MappedFileKind> {
        let name = path.file_name()?.to_str()?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if let Some(pid) = name
            .strip_prefix("jit-")
            .and_then(|n| n.strip_suffix(".dump"))
            && digits(pid)
        {
            return Some(MappedFileKind::Jitdump);
        }
        if let Some(pid) = name
            .strip_prefix("vmscope-")
            .and_then(|n| n.strip_suffix(".codemap"))
            && digits(pid)
        {
            return Some(MappedFileKind::CodeMap);
        }
        None
    }
}

/// Counters of all code maps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeMapCounters {
    /// Samples attributed to a code map entry.
    pub attributed: u64,
    /// Samples in generated code no code map explained.
    pub unexplained: u64,
    /// Changes applied.
    pub changes: u64,
    /// Changes refused (by the timeline: unknown addresses, outside the zone), since the daemon
    /// started.
    pub changes_refused: u64,
    /// Changes that arrived too late to apply in order.
    pub changes_late: u64,
    /// Samples that arrived after their timeline moved past them (should stay 0).
    pub samples_late: u64,
    /// Lines or records refused by file sources, since the daemon started.
    pub source_refusals: u64,
    /// Every refusal by reason, since the daemon started.
    pub refused: BTreeMap<Reason, u64>,
    /// Sources that could not be opened or read (wrong owner, symlink, malformed header...).
    pub source_failures: u64,
    /// Perf maps, jitdump and code map files read.
    pub sources: u64,
}

#[derive(Debug)]
struct ProcessCode {
    timeline: Timeline<RoutedSample>,
    uid: Option<u32>,
    nspid: u32,
    perf_map: Option<PerfMapSource>,
    perf_map_checked_ns: u64,
    /// When the current program started (its `execve`), if the daemon saw it; else 0.
    program_start_ns: u64,
    /// The process's start time (`/proc/PID/stat`): what tells it from a later one at its pid.
    start_time_ticks: Option<u64>,
    jitdumps: Vec<JitdumpSource>,
    files: Vec<CodeMapFileSource>,
    known_files: HashSet<FileId>,
    /// gRPC publications open, and how far they are known.
    streams: u32,
    published_until_ns: u64,
    exited: bool,
    reported: HashSet<String>,
}

impl ProcessCode {
    /// What each of its sources, and its timeline, refused.
    fn refusals(&mut self) -> impl Iterator<Item = &mut Refusals> {
        self.perf_map
            .iter_mut()
            .map(|s| &mut s.refusals)
            .chain(self.jitdumps.iter_mut().map(|s| &mut s.refusals))
            .chain(self.files.iter_mut().map(|s| &mut s.refusals))
            .chain(std::iter::once(&mut self.timeline.refusals))
    }

    /// Hands what its sources refused since last time to the daemon's counters: before the
    /// sources go (their refusals would be lost with them).
    fn count_refusals(&mut self, counters: &mut CodeMapCounters) {
        for refusals in self.refusals() {
            count_refusals(counters, refusals);
        }
    }

    /// Up to when its sources vouch for the map themselves: [`ProcessCode::known_until`]
    /// without its bounded waits. A sample attributed later than this was attributed before
    /// its code map caught up (a buffered jitdump, a silent publication).
    fn vouched_until(&self, now_ns: u64) -> u64 {
        self.until(now_ns, false)
    }

    /// Up to when every change of the process is known (see the module's doc).
    fn known_until(&self, now_ns: u64) -> u64 {
        self.until(now_ns, true)
    }

    /// What the sources vouch for, and with `bounded`, no less than their bounded waits allow:
    /// a process with no source yet is waited for [`DISCOVERY_WAIT_NS`], a silent publication
    /// [`PUBLICATION_GRACE_NS`], a buffered jitdump [`JITDUMP_MAX_WAIT_NS`].
    fn until(&self, now_ns: u64, bounded: bool) -> u64 {
        if self.exited {
            return u64::MAX;
        }
        let at_least = |wait: u64| {
            if bounded {
                now_ns.saturating_sub(wait)
            } else {
                0
            }
        };
        let no_source_yet = self.perf_map.is_none()
            && self.jitdumps.is_empty()
            && self.files.is_empty()
            && self.streams == 0;
        // Without any source, nothing is vouched for and nothing waited for but the discovery.
        let mut until = if no_source_yet && bounded {
            now_ns.saturating_sub(DISCOVERY_WAIT_NS)
        } else {
            now_ns
        };
        if self.streams > 0 {
            until = until.min(self.published_until_ns.max(at_least(PUBLICATION_GRACE_NS)));
        }
        if let Some(jitdump) = self
            .jitdumps
            .iter()
            .filter(|j| !j.broken.is_broken())
            .map(|j| j.last_ns)
            .min()
        {
            until = until.min(jitdump.max(at_least(JITDUMP_MAX_WAIT_NS)));
        }
        until
    }
}

/// Code maps by pid.
#[derive(Debug)]
pub struct CodeMaps {
    store: Arc<CodeStore>,
    processes: HashMap<u32, ProcessCode>,
    counters: CodeMapCounters,
}

impl CodeMaps {
    /// No code maps yet; codes are interned into `store`.
    pub fn new(store: Arc<CodeStore>) -> CodeMaps {
        CodeMaps {
            store,
            processes: HashMap::new(),
            counters: CodeMapCounters::default(),
        }
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
        c.source_refusals = c
            .refused
            .iter()
            .filter(|(reason, _)| reason.is_entry())
            .map(|(_, n)| n)
            .sum();
        c
    }

    fn process(&mut self, pid: u32) -> &mut ProcessCode {
        self.processes.entry(pid).or_insert_with(|| {
            let status = read_status(pid);
            let mut timeline = Timeline::default();
            timeline.refusals = Refusals::new(pid, "code map changes");
            ProcessCode {
                timeline,
                uid: status.as_ref().map(|s| s.uids.effective),
                nspid: status.as_ref().and_then(|s| s.nspid).unwrap_or(pid),
                perf_map: None,
                perf_map_checked_ns: 0,
                program_start_ns: 0,
                start_time_ticks: read_start_time(pid),
                jitdumps: Vec::new(),
                files: Vec::new(),
                known_files: HashSet::new(),
                streams: 0,
                published_until_ns: 0,
                exited: false,
                reported: HashSet::new(),
            }
        })
    }

    /// Whether the process has any code map source.
    pub fn has_sources(&self, pid: u32) -> bool {
        self.processes.get(&pid).is_some_and(|p| {
            p.perf_map.is_some() || !p.jitdumps.is_empty() || !p.files.is_empty() || p.streams > 0
        })
    }

    /// Opens the jitdump and code map files a process maps, if not known yet. `open` opens a
    /// mapped file through /proc/PID/map_files.
    pub fn observe_files(
        &mut self,
        pid: u32,
        files: &[MappedCodeMapFile],
        open: impl Fn(&MappedCodeMapFile) -> std::io::Result<File>,
    ) {
        let process = self.process(pid);
        let Some(uid) = process.uid else { return };
        let (mut opened, mut failed) = (0, 0);
        for mapped in files {
            if process.known_files.contains(&mapped.id) {
                continue;
            }
            if process.known_files.len() >= MAX_FILES_PER_PROCESS {
                let problem = format!("it maps more than {MAX_FILES_PER_PROCESS} code map files");
                if process.reported.insert(problem.clone()) {
                    failed += 1;
                    tracing::warn!(pid, "code map {} refused: {problem}", mapped.path.display());
                }
                continue;
            }
            process.known_files.insert(mapped.id);
            let source = open(mapped)
                .map_err(|e| format!("cannot open {}: {e}", mapped.path.display()))
                .and_then(|file| match mapped.kind {
                    MappedFileKind::Jitdump => JitdumpSource::new(file, &mapped.path, pid, uid)
                        .map(|s| process.jitdumps.push(s)),
                    MappedFileKind::CodeMap => CodeMapFileSource::new(file, &mapped.path, pid, uid)
                        .map(|s| process.files.push(s)),
                });
            match source {
                Ok(()) => {
                    opened += 1;
                    tracing::info!(pid, file = %mapped.path.display(), "reading code map");
                }
                Err(e) => {
                    failed += 1;
                    tracing::warn!(pid, "code map refused: {e}");
                }
            }
        }
        self.counters.sources += opened;
        self.counters.source_failures += failed;
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
        push_changes(&mut process.timeline, sys::monotonic_ns(), changes);
        process.published_until_ns = process.published_until_ns.max(until_ns);
        count_refusals(&mut self.counters, &mut process.timeline.refusals);
    }

    /// The process exited: its files are read one last time, and it changes no more.
    pub fn exited(&mut self, pid: u32) {
        if let Some(process) = self.processes.get_mut(&pid) {
            process.exited = true;
        }
    }

    /// Makes sure a process is known, so that its sources are looked for at the next advance
    /// (a session's targets are, from its start).
    /// A process that exited and left its pid to another is forgotten then, with its map.
    pub fn touch(&mut self, pid: u32) {
        if let Some(known) = self.processes.get(&pid)
            && known.timeline.pending_samples() == 0
            && known.start_time_ticks != read_start_time(pid)
            && let Some(mut gone) = self.processes.remove(&pid)
        {
            gone.count_refusals(&mut self.counters);
        }
        self.process(pid);
    }

    /// The process replaced its program at `timestamp_ns`: its map is empty from then on.
    /// Samples before it, and publications of the new program received already, keep their
    /// place in time.
    ///
    /// The perf map is the exception: it has no timestamps, and the path outlives the program
    /// (a JIT that execs leaves its map behind; a new one may write the same path). It is read
    /// again from its start, stamped at the exec, even when it was read before this exec was
    /// seen (an exec event can arrive after the new program's first samples).
    pub fn exec(&mut self, pid: u32, timestamp_ns: u64) {
        if let Some(process) = self.processes.get_mut(&pid) {
            process.count_refusals(&mut self.counters);
            process.timeline.push_change(timestamp_ns, Change::Clear);
            process.program_start_ns = process.program_start_ns.max(timestamp_ns);
            process.perf_map = None;
            process.perf_map_checked_ns = 0;
            // The old program's files write no more (it is gone) and must not hold the new
            // program's samples back; the new program's are found in its own mappings.
            process.jitdumps.clear();
            process.files.clear();
            process.known_files.clear();
            // A setuid program is another user's: its maps must be that user's files.
            process.uid = read_uid(pid);
        }
    }

    /// Forgets a process nobody needs any more (nothing waiting).
    pub fn forget(&mut self, pid: u32) {
        if self
            .processes
            .get(&pid)
            .is_some_and(|p| p.timeline.pending_samples() == 0)
            && let Some(mut gone) = self.processes.remove(&pid)
        {
            gone.count_refusals(&mut self.counters);
        }
    }

    /// Forgets the processes nothing waits on, no publication streams to, and `keep` does not
    /// name: their maps are read afresh if they are ever sampled again.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        let counters = &mut self.counters;
        self.processes.retain(|&pid, p| {
            let kept = keep(pid) || p.streams > 0 || p.timeline.pending_samples() > 0;
            if !kept {
                p.count_refusals(counters);
            }
            kept
        });
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
        }
    }

    /// Pids with samples waiting.
    pub fn waiting(&self) -> Vec<u32> {
        self.processes
            .iter()
            .filter(|(_, p)| p.timeline.pending_samples() > 0)
            .map(|(&pid, _)| pid)
            .collect()
    }

    /// Reads the process's sources and attributes every sample the maps are now known for,
    /// calling `attribute(sample, (start, code) found at its ip, the map at its time, waited)`, where `waited` says whether
    /// the maps were known up to the sample's time (false for a sample forced through).
    /// `check` says which address ranges are executable in the process (perf map and jitdump
    /// entries elsewhere are refused). `samples_until` is how far every sample is known: the
    /// timeline never moves beyond it, or a sample still on its way would be looked up in a map
    /// too new. With `force_until`, every waiting sample stamped up to then is attributed with
    /// what is known now (a stop that cannot wait longer); later ones keep waiting.
    pub fn advance(
        &mut self,
        pid: u32,
        now_ns: u64,
        samples_until: u64,
        force_until: Option<u64>,
        check: &mut dyn FnMut(u64, u64) -> bool,
        mut attribute: impl FnMut(PendingSample<RoutedSample>, Option<(u64, CodeId)>, &LiveMap, bool),
    ) {
        let store = self.store.clone();
        let Some(process) = self.processes.get_mut(&pid) else {
            return;
        };
        let final_read = process.exited;
        let mut changes = Vec::new();

        if process.perf_map.is_none()
            && let Some(uid) = process.uid
            && now_ns.saturating_sub(process.perf_map_checked_ns) >= PERF_MAP_RECHECK_NS
            && !process.exited
        {
            process.perf_map_checked_ns = now_ns;
            match PerfMapSource::open(pid, process.nspid, uid, process.program_start_ns) {
                Ok(Some(source)) => {
                    tracing::info!(pid, "reading perf map");
                    self.counters.sources += 1;
                    process.perf_map = Some(source);
                }
                Ok(None) => {}
                Err(e) => {
                    if process.reported.insert(e.clone()) {
                        self.counters.source_failures += 1;
                        tracing::warn!(pid, "perf map refused: {e}");
                    }
                }
            }
        }
        if let Some(perf_map) = &mut process.perf_map {
            match perf_map.read(now_ns, &store, check, final_read) {
                Ok(read) => changes.extend(read),
                Err(e) => {
                    self.counters.source_failures += 1;
                    tracing::warn!(pid, "perf map read no more: {e}");
                    count_refusals(&mut self.counters, &mut perf_map.refusals);
                    process.perf_map = None;
                    process.perf_map_checked_ns = u64::MAX;
                }
            }
        }
        for jitdump in &mut process.jitdumps {
            changes.extend(jitdump.read(now_ns, &store, check, final_read));
        }
        for file in &mut process.files {
            changes.extend(file.read(&store, final_read));
        }
        let failures = process
            .jitdumps
            .iter_mut()
            .filter_map(|s| s.take_failure())
            .chain(process.files.iter_mut().filter_map(|s| s.take_failure()));
        for failure in failures {
            self.counters.source_failures += 1;
            tracing::warn!(pid, "code map read no more: {failure}");
        }
        push_changes(&mut process.timeline, now_ns, changes);
        let known = process.known_until(now_ns).min(samples_until);
        let vouched = process.vouched_until(now_ns);
        // A forced advance attributes the waiting samples up to its limit, but moves the
        // timeline no further than the newest of them: changes stamped later still apply in
        // order, for the samples of other sessions still to come (and later samples wait).
        let until = match (process.timeline.newest_pending_ns(), force_until) {
            (Some(newest), Some(limit)) => known.max(newest.min(limit)),
            _ => known,
        };
        let counters = &mut self.counters;
        process.timeline.advance(until, |sample, found, map| {
            if found.is_some() {
                counters.attributed += 1;
            } else {
                counters.unexplained += 1;
            }
            let waited = sample.timestamp_ns <= vouched;
            attribute(sample, found, map, waited);
        });
        // Refusals are counted as they happen (reading sources, applying changes), and said
        // once per source: at the process's last read, or now and then while it lives.
        for refusals in process.refusals() {
            count_refusals(&mut self.counters, refusals);
            refusals.log_summary(now_ns, final_read);
        }
    }
}

fn read_status(pid: u32) -> Option<stat::ProcStatus> {
    sys::read_proc(pid, "status")
        .ok()
        .and_then(|t| stat::parse_status(&t).ok())
}

/// The start time of a process, if it still runs.
fn read_start_time(pid: u32) -> Option<u64> {
    sys::read_proc(pid, "stat")
        .ok()
        .and_then(|t| stat::parse_stat(&t).ok())
        .map(|s| s.start_time_ticks)
}

/// The effective uid of a process, if it still runs.
fn read_uid(pid: u32) -> Option<u32> {
    read_status(pid).map(|s| s.uids.effective)
}

/// Adds what `refusals` refused since it was last counted to the daemon's counters.
fn count_refusals(counters: &mut CodeMapCounters, refusals: &mut Refusals) {
    for (reason, n) in refusals.take_uncounted() {
        *counters.refused.entry(reason).or_default() += n;
    }
}

/// Changes stamped further ahead than this are refused: clocks agree far better, and a change
/// in the future would wait (held in memory) until then.
pub const MAX_FUTURE_NS: u64 = 10_000_000_000;

fn push_changes(timeline: &mut Timeline<RoutedSample>, now_ns: u64, changes: Vec<(u64, Change)>) {
    for (ts, change) in changes {
        if ts > now_ns.saturating_add(MAX_FUTURE_NS) {
            timeline.refuse(format!(
                "a change stamped {:.1} s in the future",
                (ts - now_ns) as f64 / 1e9
            ));
        } else {
            timeline.push_change(ts, change);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codemap::code::{Code, CodeSource};
    use vmscope_proto::v1::CodeKind;

    #[test]
    fn mapped_code_map_files_are_known_by_name() {
        let kind = |p: &str| MappedFileKind::of(Path::new(p));
        assert_eq!(kind("/home/u/jit-4242.dump"), Some(MappedFileKind::Jitdump));
        assert_eq!(
            kind("/tmp/vmscope-7.codemap"),
            Some(MappedFileKind::CodeMap)
        );
        assert_eq!(kind("/tmp/jit-.dump"), None);
        assert_eq!(kind("/tmp/jit-42.dump.old"), None);
        assert_eq!(kind("/usr/lib/libjit-1.dump"), None);
        assert_eq!(kind("/tmp/vmscope-x.codemap"), None);
    }

    /// A perf map written by a program started with `execve` names the program's samples,
    /// whether the exec event arrives before the map is first read or after.
    #[test]
    fn a_perf_map_counts_from_its_programs_exec() {
        // A live process of ours, whose /tmp/perf-PID.map this test may write.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        std::fs::write(&path, "7f0000001000 100 JS:*hot app.js:1:1\n").unwrap();
        let sample = |ts: u64| PendingSample {
            timestamp_ns: ts,
            ip: 0x7f00_0000_1010,
            payload: RoutedSample {
                tid: pid,
                kernel: false,
                end: StackEnd::Complete,
                frames: Vec::new(),
                fp: None,
                sessions: vec![(1, Wanted::Leaf)],
            },
        };
        let names = |maps: &mut CodeMaps, now: u64| {
            let store = maps.store().clone();
            let mut found = Vec::new();
            maps.advance(pid, now, now, None, &mut |_, _| true, |s, code, _, _| {
                found.push((
                    s.timestamp_ns,
                    code.and_then(|(_, c)| store.get(c)).map(|c| c.name.clone()),
                ));
            });
            found
        };
        let hot = Some("JS:*hot app.js:1:1".to_owned());

        // The exec is known first.
        let mut maps = CodeMaps::new(Arc::new(CodeStore::new()));
        maps.touch(pid);
        maps.exec(pid, 1_000_000_000);
        maps.push_sample(pid, sample(1_100_000_000));
        assert_eq!(
            names(&mut maps, 2_000_000_000),
            [(1_100_000_000, hot.clone())]
        );

        // The map is read before the exec arrives: the exec must not wipe what the program
        // wrote after it.
        let mut maps = CodeMaps::new(Arc::new(CodeStore::new()));
        maps.touch(pid);
        maps.push_sample(pid, sample(1_100_000_000));
        maps.push_sample(pid, sample(1_900_000_000));
        assert_eq!(names(&mut maps, 1_050_000_000), []);
        maps.exec(pid, 1_000_000_000);
        assert_eq!(
            names(&mut maps, 2_000_000_000),
            [(1_100_000_000, hot.clone()), (1_900_000_000, hot)]
        );

        let _ = std::fs::remove_file(&path);
        let _ = child.kill();
        let _ = child.wait();
    }

    fn load(start: u64, code: CodeId) -> Change {
        Change::Load {
            start,
            size: Some(0x100),
            code,
        }
    }

    fn jit_sample(ts: u64, ip: u64) -> PendingSample<RoutedSample> {
        PendingSample {
            timestamp_ns: ts,
            ip,
            payload: RoutedSample {
                tid: 1,
                kernel: false,
                end: StackEnd::Complete,
                frames: Vec::new(),
                fp: None,
                sessions: vec![(1, Wanted::Leaf)],
            },
        }
    }

    /// A publisher's changes stamped far in the future are refused, not held until then.
    #[test]
    fn changes_from_the_future_are_refused() {
        let store = Arc::new(CodeStore::new());
        let code = store
            .intern(Code::named(
                CodeKind::Method,
                "m",
                CodeSource::Vm("vm".into()),
            ))
            .unwrap();
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
        let c = maps.counters();
        assert_eq!(c.changes_refused, 1, "{c:?}");
    }

    /// A forced advance (a stop at its deadline) attributes every waiting sample but leaves
    /// later changes to apply in order, not as late ones.
    #[test]
    fn a_forced_advance_stops_at_the_newest_sample() {
        let store = Arc::new(CodeStore::new());
        let a = store
            .intern(Code::named(
                CodeKind::Method,
                "a",
                CodeSource::Vm("vm".into()),
            ))
            .unwrap();
        let b = store
            .intern(Code::named(
                CodeKind::Method,
                "b",
                CodeSource::Vm("vm".into()),
            ))
            .unwrap();
        let mut maps = CodeMaps::new(store);
        let pid = std::process::id();
        maps.stream_opened(pid);
        maps.publish(pid, vec![(1_000, load(0x1000, a))], 1_000);
        maps.push_sample(pid, jit_sample(2_000, 0x1010));
        let mut found = Vec::new();
        let mut all = |_: u64, _: u64| true;
        // Nothing is known past 1_000: only force attributes the sample at 2_000.
        maps.advance(
            pid,
            2_500,
            1_500,
            Some(u64::MAX),
            &mut all,
            |s, code, _, _| found.push((s.timestamp_ns, code.map(|(_, c)| c))),
        );
        assert_eq!(found, [(2_000, Some(a))]);
        // b replaces a at 3_000; a sample at 4_000 sees b, and nothing counts as late.
        maps.publish(pid, vec![(3_000, load(0x1000, b))], 5_000);
        maps.push_sample(pid, jit_sample(4_000, 0x1010));
        found.clear();
        maps.advance(pid, 5_000, 5_000, None, &mut all, |s, code, _, _| {
            found.push((s.timestamp_ns, code.map(|(_, c)| c)))
        });
        assert_eq!(found, [(4_000, Some(b))]);
        let c = maps.counters();
        assert_eq!((c.changes_late, c.samples_late), (0, 0), "{c:?}");
    }
}
