//! The session manager: one task, on a thread of its own, that owns every session, the process
//! table and the kernel-side filters.
//!
//! gRPC handlers send it [`Command`]s through a [`ManagerHandle`] and wait for the reply; the
//! ring-buffer reader sends it batches of events; a tick every [`ManagerConfig::tick`] reads the
//! targets' CPU time and notices targets that exited, and a timer ends sessions exactly when
//! their duration elapses. Nothing else mutates this state, so it needs no locks.
//!
//! A target's end comes from the kernel: its exit event ([`EVENT_EXIT`]) is read in order with
//! the samples, after the kernel stopped sampling its pid for target sessions. The manager
//! releases the target at the exit's time, or, when threads outlived the leader, arms the
//! kernel's filter again ([`Manager::arm`]); the tick is the fallback for an event the ring had
//! no room for. Targets are known by pid and start time throughout (see
//! [`crate::process::life`]): another process under a target's pid is never named as the target
//! nor read for it.
//!
//! The manager reads `/proc` (maps when a process is first seen, CPU times), which blocks for
//! microseconds to milliseconds: it runs on its own thread so that this never holds up the gRPC
//! runtime. Symbolisation is *not* done here: a profile request takes a [`Snapshot`] of the
//! counts and the handler symbolises it on a blocking thread, so parsing a large binary never
//! delays sampling.
//!
//! This file holds the manager's state, its commands and its loop; each concept it drives has
//! a file of its own under `manager/`:
//!
//! * `lifecycle.rs`: a session's start, stop, finalisation and eviction;
//! * `routing.rs`: a batch of events, each sample routed and its frames built;
//! * `off_cpu.rs`: blocks off the CPU routed, threads asleep at a start noted, threads still
//!   off their CPU at a stop counted;
//! * `process_events.rs`: `execve`, exits, changed credentials, the kernel filter armed;
//! * `code_maps.rs`: reads of code map files and the samples they let through;
//! * `jvms.rs`: HotSpot targets asked for their perf map;
//! * `tick.rs`: the housekeeping tick and the sweeps of binaries and codes;
//! * `snapshots.rs`: profiles taken once the reads their samples need are done;
//! * `cpu.rs`: CPU time and lost samples;
//! * `counters.rs`: the manager's counters, and the daemon-wide list `vmscope info` shows;
//! * `thread_counters.rs`: the VMs' per-thread send counters handed to the kernel.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use tokio::sync::{mpsc, oneshot};
use vmscope_common::{
    EVENT_EXEC, EVENT_EXIT, EVENT_OFF_CPU, EVENT_RENAME, EVENT_SAMPLE, Event, FLAG_COUNT,
    FLAG_KERNEL_TRUNCATED, FLAG_LABELS, FLAG_STACK, FLAG_TARGET, FLAG_USER_STACK_FAILED,
    FLAG_USER_TRUNCATED,
};
use vmscope_model::{IntervalKind, VmStatistics};
use vmscope_parse::stat;

use super::{
    HostCpu, KeptFrame, KeptSample, KeptSamples, MAX_THREAD_NAMES, STOPPED_ALL_TARGETS_EXITED,
    SampleTags, Session, SessionError, SessionInfo, SessionRequest, Snapshot, StackId, State,
    Target,
    jvm::{JvmReply, JvmSnapshots},
    request::{self, Caller},
    routes::Routes,
    vms::{PublishedCounter, Vms},
};
use crate::{
    bpf::{Batch, Guard, LostCounts, ReaderControl, SamplerControl, Tracking, UserCopy, period_of},
    codemap::{
        code::CodeStore,
        reader::{self, ReadReply, Readers},
        refusals::Reason,
        registry::{CodeMaps, READ_GRACE_NS},
        sample::{
            Counted, FpStack, ParkedFrame, Placement, Recount, RoutedSample, SampleFrame, Sink,
            Wanted,
        },
        timeline::{Change, PendingSample},
    },
    process::{
        ProcessAccess, ProcessTable,
        life::{self, AfterExit, Life, StartClock},
        mmap_events::MmapEvents,
    },
    stats::{
        hotspot::{self, SessionPerfData},
        kernel::{self, SessionCounters},
        vm::{StatEvent, VmState},
    },
    symbolize::{Modules, Warmer, warmer::MAX_BATCH},
    sys,
    unwind::{ProcessMemory, StackCopy, Unwinder, UserRegs},
    vocab::{CodeId, CodeMapKinds, Location, ModuleId, StackEnd, Task, Unexplained},
};

/// Longest time between two sweeps of the code store while nothing suggests one is needed: codes
/// a live process's map let go of (a VM freeing code without compiling any) wait at most this.
const CODE_SWEEP_AT_LEAST_EVERY_NS: u64 = 30_000_000_000;

/// Bytes reclaimed at once from the code store past which the allocator is asked to return
/// its free memory to the system: a big perf map's process gone shows in the daemon's RSS.
const RETURN_MEMORY_AFTER: usize = 16 << 20;

/// Shortest time between two returns of free memory after binaries closed: the tables of the
/// binaries of processes gone (a compiler's, under continuous profiling, which never idles) show
/// in the daemon's RSS until the allocator returns them, but a host that starts and ends
/// processes all the time closes binaries at most sweeps, and a return walks the whole heap.
const RETURN_AFTER_CLOSING_EVERY: Duration = Duration::from_secs(10);

/// How long the daemon stays without a session sampling, and without a profile being built,
/// before its parsed tables go: sessions back to back and reports keep them (see
/// [`Manager::give_memory_back`]).
const LINES_IDLE: Duration = Duration::from_secs(2);

/// Where x86-64 kernel addresses begin: a user stack walk that yields one went astray.
const KERNEL_SPACE: u64 = 0xffff_8000_0000_0000;

/// Settings of the manager.
#[derive(Clone, Debug)]
pub struct ManagerConfig {
    /// Most sessions running at once, all users together.
    pub max_running_sessions: usize,
    /// Most sessions one user other than root may run at once.
    pub max_running_per_user: usize,
    /// Stopped sessions kept per user for later reports; a user's oldest are evicted first, so
    /// no user can push out another's. One whose final profile was never taken is kept beyond
    /// this for [`ManagerConfig::unfetched_kept_for`].
    pub max_stopped_per_user: usize,
    /// How long a stopped session whose final profile nobody took is kept whatever the count:
    /// a client that stops a session and then asks for its profile always gets it, however
    /// many sessions its user (or other clients of that user) stop meanwhile. A user other than
    /// root with `max_stopped_per_user` such sessions starts no more until it takes one.
    pub unfetched_kept_for: Duration,
    /// Period of the housekeeping tick (CPU times, exited targets). While batches of samples
    /// come, the tick is taken with the last batch before it is due (see `tick::Ticker`).
    pub tick: Duration,
    /// Time after a stop during which samples may still be in flight in the kernel.
    pub stop_slack: Duration,
    /// Longest a system-wide session's stop waits for code maps to catch up with its samples
    /// in generated code. A system-wide session sees processes whose buffered jitdump will not
    /// be flushed for a long time: its stop attributes them with what is known by then (and
    /// counts them), rather than wait for the longest code map wait.
    pub system_wide_code_map_wait: Duration,
    /// Longest wait for the ring-buffer reader to pass a stop time, and for the code maps the
    /// session's samples wait for, before a stop completes anyway: a second beyond the longest
    /// code map wait (a buffered jitdump), so that only a stuck reader reaches it. A session
    /// stopped before the reader passed its stop time is marked incomplete, with the reason.
    pub stop_timeout: Duration,
    /// Processes that produced no sample for this long, and that no running session names, are
    /// forgotten.
    pub forget_processes_after: Duration,
    /// Period of the sweep that closes the binaries nothing needs any more: no live process
    /// maps them, no session that can still be reported has samples in them.
    pub sweep_modules: Duration,
    /// Whether HotSpot targets may be asked for their perf map (sessions may still opt out).
    pub jvm_attach: bool,
    /// Whether HotSpot JVMs' Java frames are unwound by their vmStructs (and their stacks
    /// copied for frame-pointer sessions); off, they end at the first compiled Java frame.
    pub java_frames: bool,
    /// Highest frequency a session may ask for, unless the kernel's limit is lower (see
    /// [`request::DEFAULT_MAX_FREQUENCY_HZ`]).
    pub max_frequency_hz: u32,
    /// Most descriptors the sessions' kernel counters hold in all (one per counter and thread
    /// of each target): a target beyond is not counted, and its report says why. The daemon
    /// fits it to a quarter of its descriptor limit, so counters never starve connections.
    pub max_kernel_counter_fds: usize,
    /// Most distinct call stacks a session keeps; a sample whose stack is new beyond is
    /// counted with its leaf alone (see [`super::StackTable`]).
    pub max_stacks_per_session: usize,
    /// What the running sessions of each user other than root may ask of the sampler
    /// together: timer rate and stack copies.
    pub sampling_share: super::shares::SamplingShare,
    /// Whether the kernel's records of every process's mappings are read (see
    /// [`crate::process::mmap_events`]): a program that exits before its exec event is read
    /// still has its samples placed.
    pub mapping_records: bool,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            max_running_sessions: 64,
            max_running_per_user: 8,
            max_stopped_per_user: 32,
            unfetched_kept_for: Duration::from_secs(600),
            tick: Duration::from_millis(100),
            stop_slack: Duration::from_millis(2),
            system_wide_code_map_wait: Duration::from_secs(1),
            stop_timeout: Duration::from_nanos(crate::codemap::registry::JITDUMP_MAX_WAIT_NS)
                + Duration::from_secs(1),
            forget_processes_after: Duration::from_secs(30),
            sweep_modules: Duration::from_secs(1),
            jvm_attach: true,
            java_frames: true,
            max_frequency_hz: request::DEFAULT_MAX_FREQUENCY_HZ,
            max_kernel_counter_fds: 16_384,
            max_stacks_per_session: super::stacks::DEFAULT_MAX_STACKS,
            sampling_share: Default::default(),
            mapping_records: true,
        }
    }
}

/// Counters and gauges of the whole daemon, for `GetDaemonInfo`.
#[derive(Clone, Debug, Default)]
pub struct DaemonCounters {
    /// Name and value of every counter (they only go up), sorted by name.
    pub values: BTreeMap<&'static str, u64>,
    /// Name and value of every gauge (what is held now), sorted by name.
    pub gauges: BTreeMap<&'static str, u64>,
}

enum Command {
    Start {
        caller: Caller,
        request: SessionRequest,
        reply: oneshot::Sender<Result<SessionInfo, SessionError>>,
    },
    Stop {
        caller: Caller,
        id: u64,
        reason: String,
        reply: oneshot::Sender<Result<SessionInfo, SessionError>>,
    },
    List {
        caller: Caller,
        reply: oneshot::Sender<Vec<SessionInfo>>,
    },
    Get {
        caller: Caller,
        id: u64,
        reply: oneshot::Sender<Result<SessionInfo, SessionError>>,
    },
    Snapshot {
        caller: Caller,
        id: u64,
        reply: oneshot::Sender<Result<Snapshot, SessionError>>,
    },
    Counters {
        reply: oneshot::Sender<DaemonCounters>,
    },
    StartWindows {
        request: SessionRequest,
        out: mpsc::Sender<Snapshot>,
        reply: Reply,
    },
    WindowBuilt {
        id: u64,
    },
    Publish {
        pid: u32,
        update: Publication,
    },
}

/// What a VM's code map publication tells the manager.
#[derive(Debug)]
pub enum Publication {
    /// A stream for the process opened: samples in its generated code now wait for it.
    Opened,
    /// Changes, and the time up to which the map is now known.
    Changes {
        /// Timestamped changes.
        changes: Vec<(u64, Change)>,
        /// The VM's statistics, timestamped.
        stats: Vec<(u64, StatEvent)>,
        /// The map is known up to here.
        until_ns: u64,
        /// Why each event the stream refused since the last changes was (broken rules, a
        /// message over the size limit): counted with the daemon's code map refusals.
        refused: Vec<Reason>,
    },
    /// The stream ended.
    Closed,
}

/// The way to talk to the manager; cheap to clone. The manager ends when every handle is gone.
#[derive(Clone, Debug)]
pub struct ManagerHandle {
    tx: mpsc::Sender<Command>,
}

impl ManagerHandle {
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, SessionError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| SessionError::ShuttingDown)?;
        rx.await.map_err(|_| SessionError::ShuttingDown)
    }

    /// Starts a session.
    pub async fn start(
        &self,
        caller: Caller,
        request: SessionRequest,
    ) -> Result<SessionInfo, SessionError> {
        self.ask(|reply| Command::Start {
            caller,
            request,
            reply,
        })
        .await?
    }

    /// Stops a session; returns once its profile is final. `reason` (may be empty) becomes the
    /// session's stop reason.
    pub async fn stop(
        &self,
        caller: Caller,
        id: u64,
        reason: &str,
    ) -> Result<SessionInfo, SessionError> {
        let reason = stop_reason(reason);
        self.ask(|reply| Command::Stop {
            caller,
            id,
            reason,
            reply,
        })
        .await?
    }

    /// The caller's sessions.
    pub async fn list(&self, caller: Caller) -> Result<Vec<SessionInfo>, SessionError> {
        self.ask(|reply| Command::List { caller, reply }).await
    }

    /// One session.
    pub async fn get(&self, caller: Caller, id: u64) -> Result<SessionInfo, SessionError> {
        self.ask(|reply| Command::Get { caller, id, reply }).await?
    }

    /// A copy of a session's counts, to build a profile from.
    pub async fn snapshot(&self, caller: Caller, id: u64) -> Result<Snapshot, SessionError> {
        self.ask(|reply| Command::Snapshot { caller, id, reply })
            .await?
    }

    /// Starts continuous windows (see `manager/windows.rs`): root's system-wide sessions of
    /// `request`, back to back, each of its duration, sent to `out` once final. Answers the
    /// first.
    pub async fn start_windows(
        &self,
        request: SessionRequest,
        out: mpsc::Sender<Snapshot>,
    ) -> Result<SessionInfo, SessionError> {
        self.ask(|reply| Command::StartWindows {
            request,
            out,
            reply,
        })
        .await?
    }

    /// Continuous window `id`'s profiles are built: what its samples are in may go.
    pub async fn window_built(&self, id: u64) -> Result<(), SessionError> {
        self.tx
            .send(Command::WindowBuilt { id })
            .await
            .map_err(|_| SessionError::ShuttingDown)
    }

    /// The daemon's counters.
    pub async fn counters(&self) -> Result<DaemonCounters, SessionError> {
        self.ask(|reply| Command::Counters { reply }).await
    }

    /// Passes on part of a VM's code map publication for `pid`.
    pub async fn publish(&self, pid: u32, update: Publication) -> Result<(), SessionError> {
        self.tx
            .send(Command::Publish { pid, update })
            .await
            .map_err(|_| SessionError::ShuttingDown)
    }
}

/// Starts the manager on a thread of its own.
///
/// `max_frequency_hz` reads the kernel's current sampling-rate limit (it can change while the
/// daemon runs); tests pass a constant. `reader` steers the ring-buffer reader that feeds
/// `batches`.
pub fn spawn_manager(
    sampler: Box<dyn SamplerControl>,
    batches: mpsc::Receiver<Batch>,
    reader: Arc<ReaderControl>,
    modules: Arc<Modules>,
    codes: Arc<CodeStore>,
    config: ManagerConfig,
    max_frequency_hz: Box<dyn Fn() -> std::io::Result<u32> + Send>,
) -> std::io::Result<(ManagerHandle, std::thread::JoinHandle<()>)> {
    let (tx, commands) = mpsc::channel(256);
    let (jvm_tx, jvm_replies) = mpsc::unbounded_channel();
    let (read_tx, read_replies) = mpsc::unbounded_channel();
    let readers = Readers::threaded(codes, Arc::new(reader::open_mapped), read_tx);
    let process_access = Arc::new(ProcessAccess::default());
    let mmap_events = config
        .mapping_records
        .then(|| {
            MmapEvents::open()
                .inspect_err(|e| {
                    tracing::warn!(
                        "the kernel's mapping records cannot be read ({e}): samples of a program \
                         that exits before its exec event is read will be unplaced"
                    )
                })
                .ok()
        })
        .flatten();
    let manager = Manager {
        mmap_events,
        jvms: JvmSnapshots::new(jvm_tx),
        kernel_support: kernel::Support::probe(),
        vms: Vms::default(),
        sampler,
        routes: Routes::default(),
        sessions: BTreeMap::new(),
        by_period: HashMap::new(),
        stop_waiters: HashMap::new(),
        snapshot_waiters: Vec::new(),
        processes: ProcessTable::with_access(modules.clone(), process_access.clone()),
        unwinder: Unwinder::new(modules.clone()).following_java(config.java_frames),
        process_memory: ProcessMemory::with_access(process_access.clone()),
        java_codes: crate::jvm::java_codes::JavaCodes::default(),
        process_access,
        count_slots: Default::default(),
        thread_counters: Default::default(),
        warmer: Warmer::spawn(modules.clone()),
        modules,
        codemaps: CodeMaps::with_readers(readers),
        reader,
        next_id: 1,
        watermark_ns: 0,
        host_cpu_read_ns: 0,
        config,
        max_frequency_hz,
        clock_ticks: sys::clock_ticks_per_second(),
        start_clock: StartClock::now(),
        online_cpus: sys::online_cpus(),
        counters: Counters::default(),
        last_forget_ns: 0,
        last_sweep_ns: 0,
        ticks: 0,
        memory_given_back: false,
        closed_since_return: 0,
        returned_at: Instant::now(),
        idle_since: None,
        code_sweep: CodeSweep::default(),
        user_scratch: Vec::new(),
        placements: Placements::default(),
        windows: None,
        thread_renames: ThreadRenames::default(),
    };
    // I/O for the tick's timer (`tick::Ticker`).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .enable_io()
        .build()?;
    let thread = std::thread::Builder::new()
        .name("vmscope-sessions".into())
        .spawn(move || {
            runtime.block_on(manager.run(commands, batches, jvm_replies, read_replies))
        })?;
    Ok((ManagerHandle { tx }, thread))
}

type Reply = oneshot::Sender<Result<SessionInfo, SessionError>>;

/// A profile request waiting for reads of its targets' code map files.
struct SnapshotWaiter {
    caller: Caller,
    id: u64,
    reply: oneshot::Sender<Result<Snapshot, SessionError>>,
    /// The targets whose reads it waits for.
    pids: Vec<u32>,
    /// When it is answered with what is known, whatever the reads.
    until_ns: u64,
}

struct Manager {
    /// Symbolises the running sessions' new locations ahead of their profiles.
    warmer: Warmer,
    sampler: Box<dyn SamplerControl>,
    routes: Routes,
    sessions: BTreeMap<u64, Session>,
    /// Running and stopping sessions by sampling period: where samples are routed.
    by_period: HashMap<u64, Vec<u64>>,
    stop_waiters: HashMap<u64, Vec<Reply>>,
    snapshot_waiters: Vec<SnapshotWaiter>,
    processes: ProcessTable,
    /// The kernel's records of mappings, execs and exits, for the process table.
    mmap_events: Option<MmapEvents>,
    modules: Arc<Modules>,
    codemaps: CodeMaps,
    reader: Arc<ReaderControl>,
    next_id: u64,
    watermark_ns: u64,
    /// When the tick last read the host's CPU times (see [`HOST_CPU_EVERY_NS`]).
    host_cpu_read_ns: u64,
    config: ManagerConfig,
    max_frequency_hz: Box<dyn Fn() -> std::io::Result<u32> + Send>,
    clock_ticks: u64,
    /// To compare processes' start times with events' times.
    start_clock: StartClock,
    online_cpus: u32,
    counters: Counters,
    last_forget_ns: u64,
    last_sweep_ns: u64,
    /// Ticks so far: the targets' `/proc` is read at every [`tick::PROBE_EVERY_TICKS`]th.
    ticks: u64,
    /// Whether the memory was given back since the daemon last fell idle.
    memory_given_back: bool,
    /// Binaries closed since free memory was last returned after closing some.
    closed_since_return: usize,
    /// When free memory was last returned after binaries closed.
    returned_at: Instant,
    /// Since when no session samples.
    idle_since: Option<Instant>,
    /// When the code store was last swept, and why.
    code_sweep: CodeSweep,
    /// Reused for each sample's user stack, so that routing allocates nothing for it.
    user_scratch: Vec<u64>,
    /// Raw stacks placed before, placed again without a look at their process.
    placements: Placements,
    /// Unwinds the user stack copies of `--call-graph dwarf` samples.
    unwinder: Unwinder,
    /// Code bytes of live processes, for the unwinder's CPython trampoline rule.
    process_memory: ProcessMemory,
    /// The codes of the JVMs' compiled frames, interned once per nmethod.
    java_codes: crate::jvm::java_codes::JavaCodes,
    /// Runs the reads of processes that wait on their memory lock (both above use it).
    process_access: Arc<ProcessAccess>,
    /// The kernel's call counter slots free (`record --count`).
    count_slots: super::call_counts::CountSlots,
    /// The VMs' thread send counters the kernel reads with each sample.
    thread_counters: super::thread_counters::ThreadCounters,
    /// HotSpot targets asked for their perf map.
    jvms: JvmSnapshots,
    /// What the kernel can count for the targets here.
    kernel_support: kernel::Support,
    /// What each VM published of its statistics so far, by pid: what a session starting now
    /// takes over, and the intervals its samples are tagged with. Let go with the process's
    /// code map.
    vms: Vms,
    /// Continuous profiling's windows, when the daemon takes them.
    windows: Option<windows::WindowChain>,
    /// The names the kernel said threads of followed processes were given, by process.
    thread_renames: ThreadRenames,
}

/// The names threads were given ([`vmscope_common::EVENT_RENAME`]), by process, so that a
/// process's go at once with its exit.
#[derive(Debug, Default)]
struct ThreadRenames {
    by_pid: HashMap<u32, HashMap<u32, String>>,
    len: usize,
}

impl ThreadRenames {
    fn get(&self, task: Task) -> Option<&String> {
        self.by_pid.get(&task.pid)?.get(&task.tid)
    }

    fn insert(&mut self, task: Task, name: String) {
        if self
            .by_pid
            .entry(task.pid)
            .or_default()
            .insert(task.tid, name)
            .is_none()
        {
            self.len += 1;
        }
    }

    fn forget(&mut self, pid: u32) {
        if let Some(threads) = self.by_pid.remove(&pid) {
            self.len -= threads.len();
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn clear(&mut self) {
        self.by_pid.clear();
        self.len = 0;
    }
}

/// The statistics of the VMs a session watches: what they published, then what HotSpot's
/// performance data says of the JVMs that published none, by pid.
///
/// Published intervals have times, so each kind's total says beside it how many of the
/// process's samples were taken during it; HotSpot's counters have none.
fn vm_statistics(session: &Session, now_ns: u64) -> Vec<VmStatistics> {
    let end_ns = session.stop_ns.unwrap_or(now_ns);
    let samples = session.stacks.samples_during();
    let mut all: Vec<VmStatistics> = session
        .vm
        .iter()
        .filter(|(_, window)| window.has_statistics())
        .map(|(&pid, window)| {
            let mut stats = window.summary(pid, end_ns);
            if let Some(samples) = samples.get(&pid) {
                stats.samples = samples.total;
                for totals in &mut stats.intervals {
                    totals.sampled = samples.during.get(&totals.kind).copied().unwrap_or(0);
                }
            }
            stats
        })
        .collect();
    if let Some(hotspot) = &session.hotspot {
        let window_ns = end_ns.saturating_sub(session.start_ns);
        for jvm in hotspot.summary(window_ns) {
            if !all.iter().any(|s| s.pid == jvm.pid) {
                all.push(jvm);
            }
        }
    }
    all.sort_by_key(|s| s.pid);
    all
}

/// Counts what a look for JVMs' performance data files found, and what it could not read.
fn count_perf_data(counters: &mut Counters, (found, failed): (u64, u64)) {
    counters.hotspot_perf_data_read += found;
    counters.hotspot_perf_data_failed += failed;
}

impl Manager {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut batches: mpsc::Receiver<Batch>,
        mut jvm_replies: mpsc::UnboundedReceiver<JvmReply>,
        mut read_replies: mpsc::UnboundedReceiver<ReadReply>,
    ) {
        let mut ticker = Ticker::new(self.config.tick);
        let mut batches_open = true;
        loop {
            let deadline = self.next_deadline();
            // Not biased: a client flooding the API must not starve sample ingestion (which
            // would end in lost samples), nor the other way round.
            tokio::select! {
                command = commands.recv() => match command {
                    Some(command) => self.handle(command),
                    // Every handle is gone: the daemon is shutting down. Perf events and
                    // filters go with the sampler's file descriptors.
                    None => break,
                },
                batch = batches.recv(), if batches_open => match batch {
                    Some(batch) => {
                        self.ingest(batch);
                        let now = sys::monotonic_ns();
                        if ticker.batch(now) {
                            self.tick();
                            ticker.ticked(now);
                        }
                    }
                    None => {
                        tracing::error!("the ring-buffer reader stopped; no more samples will arrive");
                        batches_open = false;
                    }
                },
                _ = ticker.expired() => {
                    let now = sys::monotonic_ns();
                    if ticker.due(now) {
                        self.tick();
                        ticker.ticked(now);
                    } else {
                        ticker.arm();
                    }
                }
                _ = sleep_until_ns(deadline), if deadline.is_some() => self.end_elapsed(),
                // The manager holds a sender: this never ends.
                Some(reply) = jvm_replies.recv() => self.jvm_answered(reply),
                // Likewise: the readers hold a sender.
                Some(reply) = read_replies.recv() => self.read_done(reply),
            }
        }
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Start {
                caller,
                request,
                reply,
            } => {
                let result = self.start(caller, &request);
                if let Err(e) = &result {
                    self.counters.sessions_refused += 1;
                    tracing::info!(uid = caller.uid, "session refused: {e}");
                }
                let _ = reply.send(result);
            }
            Command::Stop {
                caller,
                id,
                reason,
                reply,
            } => match self.visible(caller, id).map(|s| s.state) {
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
                Ok(State::Stopped) => {
                    let _ = reply.send(Err(SessionError::AlreadyStopped(id)));
                }
                // A stop is under way (the client's, the duration's, or targets' exit): wait
                // for it like its own caller does.
                Ok(State::Stopping) => self.stop_waiters.entry(id).or_default().push(reply),
                Ok(State::Running) => {
                    self.stop_waiters.entry(id).or_default().push(reply);
                    let now = sys::monotonic_ns();
                    self.window_stopped(id);
                    self.begin_stop(id, &reason, now);
                    self.finalize_ready(now);
                }
            },
            Command::List { caller, reply } => {
                let now = sys::monotonic_ns();
                let list = self
                    .sessions
                    .values()
                    .filter(|s| caller.owns(s.owner_uid))
                    .map(|s| s.info(now))
                    .collect();
                let _ = reply.send(list);
            }
            Command::Get { caller, id, reply } => {
                let now = sys::monotonic_ns();
                let _ = reply.send(self.visible(caller, id).map(|s| s.info(now)));
            }
            // Its client went away while the request waited: no copy for nobody.
            Command::Snapshot { reply, .. } if reply.is_closed() => {}
            Command::Snapshot { caller, id, reply } => {
                let result = match self.visible(caller, id) {
                    Ok(_) => {
                        if let Some(session) = self.sessions.get_mut(&id)
                            && session.state == State::Stopped
                        {
                            session.fetched = true;
                        }
                        let now = sys::monotonic_ns();
                        let mut pids = self.look_again(id, now);
                        pids.extend(self.reads_holding_samples(id, now));
                        if pids.iter().any(|&pid| self.codemaps.reading(pid)) {
                            // Answered as the reads come back, or after a grace.
                            self.snapshot_waiters.push(SnapshotWaiter {
                                caller,
                                id,
                                reply,
                                pids,
                                until_ns: now + READ_GRACE_NS,
                            });
                            return;
                        }
                        Ok(self.snapshot(id))
                    }
                    Err(e) => Err(e),
                };
                let _ = reply.send(result);
            }
            Command::Counters { reply } => {
                let _ = reply.send(self.daemon_counters());
            }
            Command::StartWindows {
                request,
                out,
                reply,
            } => {
                let _ = reply.send(self.start_windows(request, out));
            }
            Command::WindowBuilt { id } => self.window_built(id),
            Command::Publish { pid, update } => match update {
                Publication::Opened => self.codemaps.stream_opened(pid),
                Publication::Changes {
                    changes,
                    stats,
                    until_ns,
                    refused,
                } => {
                    // Before the changes can let samples through: those in a GC must see it.
                    self.vms.apply(pid, stats, &mut self.sessions);
                    self.codemaps.publish(pid, changes, until_ns);
                    self.codemaps.count_stream_refusals(&refused);
                }
                Publication::Closed => self.codemaps.stream_closed(pid),
            },
        }
    }

    fn visible(&self, caller: Caller, id: u64) -> Result<&Session, SessionError> {
        self.sessions
            .get(&id)
            .filter(|s| caller.owns(s.owner_uid))
            .ok_or(SessionError::NoSuchSession(id))
    }

    fn running(&self) -> impl Iterator<Item = &Session> {
        self.sessions.values().filter(|s| s.state == State::Running)
    }
}

/// Sleeps until a CLOCK_MONOTONIC time (tokio's clock is CLOCK_MONOTONIC too).
async fn sleep_until_ns(deadline_ns: Option<u64>) {
    let wait = deadline_ns.map_or(Duration::MAX, |d| {
        Duration::from_nanos(d.saturating_sub(sys::monotonic_ns()))
    });
    tokio::time::sleep(wait.min(Duration::from_secs(24 * 3600))).await;
}

/// How often the mappings of a process with samples in generated code are re-read, to find the
/// jitdump or code map file it mapped since.
const CODE_MAP_FILES_RECHECK_NS: u64 = 200_000_000;

/// Longest stop reason a client may give.
pub const MAX_STOP_REASON_CHARS: usize = 200;

mod code_maps;
mod counters;
mod cpu;
mod exact_counts;
mod jvms;
mod lifecycle;
mod off_cpu;
mod placements;
mod process_events;
mod routing;
mod snapshots;
mod thread_counters;
mod tick;
mod windows;

use counters::Counters;
use cpu::{lost_for, read_host_cpu, refresh_lost, update_cpu};
use lifecycle::stop_reason;
use placements::Placements;
use routing::SessionSink;
use tick::{CodeSweep, Ticker};

#[cfg(test)]
mod tests;
