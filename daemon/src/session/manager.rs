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

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use tokio::sync::{mpsc, oneshot};
use vmscope_common::{
    EVENT_EXEC, EVENT_EXIT, EVENT_SAMPLE, Event, FLAG_KERNEL_TRUNCATED, FLAG_STACK, FLAG_TARGET,
    FLAG_USER_STACK_FAILED, FLAG_USER_TRUNCATED,
};
use vmscope_parse::stat;
use vmscope_proto::v1 as pb;

use super::{
    HostCpu, KeptFrame, KeptSample, KeptSamples, Session, SessionError, Snapshot, StackId, State,
    Target,
    jvm::{JvmReply, JvmSnapshots},
    request::{self, Caller},
    routes::Routes,
    vms::Vms,
};
use crate::{
    bpf::{Batch, Guard, LostCounts, ReaderControl, SamplerControl, Tracking, UserCopy, period_of},
    codemap::{
        code::{CodeId, CodeStore},
        reader::{self, ReadReply, Readers},
        refusals::Reason,
        registry::{
            CodeMaps, Counted, FpStack, ParkedFrame, Placement, READ_GRACE_NS, Recount,
            RoutedSample, SampleFrame, Sink, Wanted,
        },
        timeline::{Change, PendingSample},
    },
    process::{
        ProcessAccess, ProcessTable,
        life::{self, AfterExit, Life, StartClock},
    },
    stats::{
        hotspot::{self, SessionPerfData},
        intervals::During,
        kernel::{self, SessionCounters},
        vm::{IntervalKind, StatEvent, VmState},
    },
    symbolize::{
        CodeMapKinds, Location, ModuleId, Modules, Unexplained, Warmer, warmer::MAX_BATCH,
    },
    sys,
    unwind::{ProcessMemory, StackCopy, StackEnd, Unwinder, UserRegs},
};

/// Longest time between two sweeps of the code store while nothing suggests one is needed: codes
/// a live process's map let go of (a VM freeing code without compiling any) wait at most this.
const CODE_SWEEP_AT_LEAST_EVERY_NS: u64 = 30_000_000_000;

/// Bytes reclaimed at once from the code store past which the allocator is asked to return
/// its free memory to the system: a big perf map's process gone shows in the daemon's RSS.
const RETURN_MEMORY_AFTER: usize = 16 << 20;

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
    /// Period of the housekeeping tick (CPU times, exited targets).
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
            max_frequency_hz: request::DEFAULT_MAX_FREQUENCY_HZ,
            max_kernel_counter_fds: 16_384,
            max_stacks_per_session: super::stacks::DEFAULT_MAX_STACKS,
            sampling_share: Default::default(),
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
        request: pb::StartSessionRequest,
        reply: oneshot::Sender<Result<pb::Session, SessionError>>,
    },
    Stop {
        caller: Caller,
        id: u64,
        reason: String,
        reply: oneshot::Sender<Result<pb::Session, SessionError>>,
    },
    List {
        caller: Caller,
        reply: oneshot::Sender<Vec<pb::Session>>,
    },
    Get {
        caller: Caller,
        id: u64,
        reply: oneshot::Sender<Result<pb::Session, SessionError>>,
    },
    Snapshot {
        caller: Caller,
        id: u64,
        reply: oneshot::Sender<Result<Snapshot, SessionError>>,
    },
    Counters {
        reply: oneshot::Sender<DaemonCounters>,
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
        request: pb::StartSessionRequest,
    ) -> Result<pb::Session, SessionError> {
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
    ) -> Result<pb::Session, SessionError> {
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
    pub async fn list(&self, caller: Caller) -> Result<Vec<pb::Session>, SessionError> {
        self.ask(|reply| Command::List { caller, reply }).await
    }

    /// One session.
    pub async fn get(&self, caller: Caller, id: u64) -> Result<pb::Session, SessionError> {
        self.ask(|reply| Command::Get { caller, id, reply }).await?
    }

    /// A copy of a session's counts, to build a profile from.
    pub async fn snapshot(&self, caller: Caller, id: u64) -> Result<Snapshot, SessionError> {
        self.ask(|reply| Command::Snapshot { caller, id, reply })
            .await?
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
    let manager = Manager {
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
        unwinder: Unwinder::new(modules.clone()),
        process_memory: ProcessMemory::with_access(process_access.clone()),
        process_access,
        warmer: Warmer::spawn(modules.clone()),
        modules,
        codemaps: CodeMaps::with_readers(readers),
        reader,
        next_id: 1,
        watermark_ns: 0,
        config,
        max_frequency_hz,
        clock_ticks: sys::clock_ticks_per_second(),
        start_clock: StartClock::now(),
        online_cpus: sys::online_cpus(),
        counters: Counters::default(),
        last_forget_ns: 0,
        last_sweep_ns: 0,
        memory_given_back: false,
        idle_since: None,
        code_sweep: CodeSweep::default(),
        user_scratch: Vec::new(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let thread = std::thread::Builder::new()
        .name("vmscope-sessions".into())
        .spawn(move || {
            runtime.block_on(manager.run(commands, batches, jvm_replies, read_replies))
        })?;
    Ok((ManagerHandle { tx }, thread))
}

type Reply = oneshot::Sender<Result<pb::Session, SessionError>>;

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
    modules: Arc<Modules>,
    codemaps: CodeMaps,
    reader: Arc<ReaderControl>,
    next_id: u64,
    watermark_ns: u64,
    config: ManagerConfig,
    max_frequency_hz: Box<dyn Fn() -> std::io::Result<u32> + Send>,
    clock_ticks: u64,
    /// To compare processes' start times with events' times.
    start_clock: StartClock,
    online_cpus: u32,
    counters: Counters,
    last_forget_ns: u64,
    last_sweep_ns: u64,
    /// Whether the memory was given back since the daemon last fell idle.
    memory_given_back: bool,
    /// Since when no session samples.
    idle_since: Option<Instant>,
    /// When the code store was last swept, and why.
    code_sweep: CodeSweep,
    /// Reused for each sample's user stack, so that routing allocates nothing for it.
    user_scratch: Vec<u64>,
    /// Unwinds the user stack copies of `--call-graph dwarf` samples.
    unwinder: Unwinder,
    /// Code bytes of live processes, for the unwinder's CPython trampoline rule.
    process_memory: ProcessMemory,
    /// Runs the reads of processes that wait on their memory lock (both above use it).
    process_access: Arc<ProcessAccess>,
    /// HotSpot targets asked for their perf map.
    jvms: JvmSnapshots,
    /// What the kernel can count for the targets here.
    kernel_support: kernel::Support,
    /// What each VM published of its statistics so far, by pid: what a session starting now
    /// takes over, and the intervals its samples are tagged with. Let go with the process's
    /// code map.
    vms: Vms,
}

/// The statistics of the VMs a session watches: what they published, then what HotSpot's
/// performance data says of the JVMs that published none, by pid.
///
/// Published intervals have times, so each kind's total says beside it how many of the
/// process's samples were taken during it; HotSpot's counters have none.
fn vm_statistics(session: &Session, now_ns: u64) -> Vec<pb::VmStatistics> {
    let end_ns = session.stop_ns.unwrap_or(now_ns);
    let samples = session.stacks.samples_during();
    let mut all: Vec<pb::VmStatistics> = session
        .vm
        .iter()
        .filter(|(_, window)| window.has_statistics())
        .map(|(&pid, window)| {
            let mut stats = window.to_proto(pid, end_ns);
            if let Some(samples) = samples.get(&pid) {
                stats.samples = samples.total;
                for totals in &mut stats.intervals {
                    if let Ok(kind) = IntervalKind::from_proto(totals.kind, &totals.name) {
                        totals.sampled = samples.during.get(&kind).copied().unwrap_or(0);
                    }
                }
            }
            stats
        })
        .collect();
    if let Some(hotspot) = &session.hotspot {
        let window_ns = end_ns.saturating_sub(session.start_ns);
        for jvm in hotspot.to_proto(window_ns) {
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
        // The first tick one period from now, not at once: there is nothing to look after at
        // start, and a test that sets a long tick then has none at all.
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + self.config.tick,
            self.config.tick,
        );
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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
                    Some(batch) => self.ingest(batch),
                    None => {
                        tracing::error!("the ring-buffer reader stopped; no more samples will arrive");
                        batches_open = false;
                    }
                },
                _ = tick.tick() => self.tick(),
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
                    .map(|s| s.to_proto(now))
                    .collect();
                let _ = reply.send(list);
            }
            Command::Get { caller, id, reply } => {
                let now = sys::monotonic_ns();
                let _ = reply.send(self.visible(caller, id).map(|s| s.to_proto(now)));
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

    fn start(
        &mut self,
        caller: Caller,
        request: &pb::StartSessionRequest,
    ) -> Result<pb::Session, SessionError> {
        let kernel_hz = (self.max_frequency_hz)().map_err(|e| {
            SessionError::Internal(format!("cannot read {}: {e}", sys::MAX_SAMPLE_RATE_SYSCTL))
        })?;
        let limits = request::FrequencyLimits {
            kernel_hz,
            daemon_hz: self.config.max_frequency_hz,
        };
        let mut spec = request::validate(request, limits)?;
        spec.root = caller.is_root();
        let running = self.running().count();
        if running >= self.config.max_running_sessions {
            return Err(SessionError::ResourceExhausted(format!(
                "{running} sessions are running, the most this daemon allows; stop one first"
            )));
        }
        let mine = self.running().filter(|s| s.owner_uid == caller.uid).count();
        if !caller.is_root() && mine >= self.config.max_running_per_user {
            return Err(SessionError::ResourceExhausted(format!(
                "you (uid {}) already run {mine} sessions, the most one user may; stop one first",
                caller.uid
            )));
        }
        if !caller.is_root() {
            let specs: Vec<&request::SessionSpec> = self
                .running()
                .filter(|s| s.owner_uid == caller.uid)
                .map(|s| &s.spec)
                .collect();
            if let Some(refusal) =
                self.config
                    .sampling_share
                    .refusal(caller.uid, specs.iter().copied(), &spec)
            {
                return Err(SessionError::ResourceExhausted(refusal));
            }
        }
        // The processes named, by start time, before the caller is authorized for them: the
        // targets read after must be these, not others given their pids in between.
        let named: Vec<Option<u64>> = spec
            .pids
            .iter()
            .map(|&pid| life::probe(pid, None).start_time())
            .collect();
        request::authorize(&caller, &spec)?;
        let now = sys::monotonic_ns();
        let unfetched = self
            .sessions
            .values()
            .filter(|s| s.owner_uid == caller.uid && self.protected(s, now))
            .count();
        if !caller.is_root() && unfetched >= self.config.max_stopped_per_user {
            return Err(SessionError::ResourceExhausted(format!(
                "you (uid {}) have {unfetched} stopped sessions whose profiles nobody took, the \
                 most one user may: take them (vmscope report ID) or wait until they are {} s \
                 old",
                caller.uid,
                self.config.unfetched_kept_for.as_secs()
            )));
        }

        let mut targets = Vec::with_capacity(spec.pids.len());
        for (&pid, &named_start) in spec.pids.iter().zip(&named) {
            // Read the process now, while it surely lives: a target that exits right away is
            // still symbolised. What the table knows of an earlier process under the pid is not
            // this one.
            let process = self.processes.identify(pid, now);
            if named_start.is_none() || process.start_time != named_start {
                if named_start.is_some() && process.start_time.is_some() {
                    self.counters.pid_reuses += 1;
                }
                return Err(SessionError::NoSuchProcess(pid));
            }
            let mut target = Target {
                pid,
                start_time: process.start_time,
                command: process.command.clone(),
                executable: process
                    .executable
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                exited: false,
                until_ns: None,
                note: None,
                cpu_ticks_start: 0,
                cpu_ticks_last: 0,
                code_maps_after: CodeMapKinds::default(),
            };
            match life::probe(pid, target.start_time) {
                Life::Alive { cpu_ticks, .. } | Life::Exited { cpu_ticks, .. } => {
                    target.cpu_ticks_start = cpu_ticks;
                    target.cpu_ticks_last = cpu_ticks;
                }
                Life::Gone | Life::Reused { .. } => return Err(SessionError::NoSuchProcess(pid)),
            }
            targets.push(target);
        }

        self.routes
            .acquire(self.sampler.as_mut(), &spec)
            .map_err(|e| {
                if e.is_map_full() {
                    SessionError::ResourceExhausted(format!(
                        "the kernel filter is full ({} processes sampled at once across all \
                         sessions): stop a session first",
                        vmscope_common::MAX_TARGETS
                    ))
                } else {
                    SessionError::Kernel(e)
                }
            })?;
        let period_ns = period_of(spec.frequency_hz);
        let lost_baseline = match self.sampler.lost() {
            Ok(lost) => lost_for(&lost, period_ns, spec.system_wide, &spec.pids),
            Err(e) => {
                tracing::warn!("cannot read lost-sample counters: {e}");
                Vec::new()
            }
        };
        let host = read_host_cpu();
        let id = self.next_id;
        self.next_id += 1;
        let commands = targets.iter().map(|t| (t.pid, t.command.clone())).collect();
        let kernel = (!spec.system_wide).then(|| self.open_kernel_counters(&targets));
        let hotspot = (!spec.system_wide).then(|| {
            let started_ms = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let mut perf_data = SessionPerfData::new(targets.iter().map(|t| t.pid), started_ms);
            count_perf_data(&mut self.counters, perf_data.look_again());
            perf_data
        });
        let mut session = Session {
            id,
            owner_uid: caller.uid,
            period_ns,
            started_at: SystemTime::now(),
            start_ns: sys::monotonic_ns(),
            stop_ns: None,
            state: State::Running,
            stop_reason: None,
            targets,
            stacks: super::StackTable::with_limit(self.config.max_stacks_per_session),
            commands,
            total: 0,
            host_cpu: (host, host),
            lost: vec![0; lost_baseline.len()],
            lost_baseline,
            waiting: 0,
            jit: Default::default(),
            warmed: 0,
            incomplete: None,
            fetched: false,
            kept: KeptSamples::new(spec.keep_samples as usize),
            truncated: 0,
            kernel,
            hotspot,
            vm: Default::default(),
            spec,
        };
        // VMs publishing already: the session takes over their state (baselines, intervals
        // open now).
        for (pid, state) in self.vms.iter() {
            if session.watches(pid, session.start_ns) {
                session.vm.insert(pid, state.window(session.start_ns));
            }
        }
        tracing::info!(
            id,
            uid = caller.uid,
            pids = ?session.spec.pids,
            system_wide = session.spec.system_wide,
            frequency_hz = session.spec.frequency_hz,
            "session started"
        );
        let start_ns = session.start_ns;
        let pids = session.spec.pids.clone();
        self.by_period.entry(period_ns).or_default().push(id);
        self.sessions.insert(id, session);
        self.reader.set_active(true);
        self.counters.sessions_started += 1;
        // The filters are in place: arm each target for its own exit, and check it still lives.
        // One that ended meanwhile is released with no sample, whoever took its pid.
        for &pid in &pids {
            self.arm(pid, start_ns);
        }
        let reply = self.sessions[&id].to_proto(start_ns);
        // Read the targets' code maps now: entries present at the start count from the start.
        let now = sys::monotonic_ns();
        for &pid in &pids {
            self.touch_code_maps(pid);
            self.advance_code_maps(pid, now);
        }
        // HotSpot targets write their perf map when asked: the code compiled so far, named
        // from the start.
        self.observe_jvms(id);
        if self.jvm_attach(id) {
            for pid in self.sessions[&id].held_pids() {
                self.ask_jvm(pid, now, true);
            }
        }
        Ok(reply)
    }

    /// Opens the kernel counters of a new session's `targets`, within the daemon's share of
    /// descriptors for counters.
    fn open_kernel_counters(&mut self, targets: &[Target]) -> SessionCounters {
        let fds_left = self
            .config
            .max_kernel_counter_fds
            .saturating_sub(self.kernel_counter_fds());
        let opened = SessionCounters::open(
            targets.iter().map(|t| (t.pid, t.command.as_str())),
            &self.kernel_support,
            fds_left,
        );
        let failed = opened.failed() as u64;
        self.counters.kernel_counters_failed += failed;
        self.counters.kernel_counters_opened += targets.len() as u64 - failed;
        opened
    }

    /// Descriptors the sessions' kernel counters hold.
    fn kernel_counter_fds(&self) -> usize {
        self.sessions
            .values()
            .filter_map(|s| s.kernel.as_ref())
            .map(SessionCounters::fds)
            .sum()
    }

    /// Whether the session lets its HotSpot targets be asked for their perf map.
    fn jvm_attach(&self, id: u64) -> bool {
        self.config.jvm_attach
            && self
                .sessions
                .get(&id)
                .is_some_and(|s| s.spec.jvm_attach && !s.spec.system_wide)
    }

    /// Notes which targets of a session are HotSpot JVMs (they map libjvm.so), as far as their
    /// mappings show now (a command recorded from its start loads it later).
    fn observe_jvms(&mut self, id: u64) {
        let Some(session) = self.sessions.get(&id) else {
            return;
        };
        if session.spec.system_wide {
            return;
        }
        let pids: Vec<u32> = session.held_pids();
        for pid in pids {
            if self.jvms.is_jvm(pid) {
                continue;
            }
            let Some(process) = self.processes.get(pid) else {
                continue;
            };
            if process.gone {
                continue;
            }
            let modules = &self.modules;
            let hotspot = process.file_mappings().any(|(_, _, module)| {
                modules.get(module).is_some_and(|m| {
                    Path::new(&m.name)
                        .file_name()
                        .is_some_and(|n| n == "libjvm.so")
                })
            });
            if hotspot {
                self.jvms.observe(pid);
            }
        }
    }

    /// Finds HotSpot targets of running sessions, and asks those whose samples in code no map
    /// explains pile up for a new perf map.
    fn tick_jvms(&mut self, now_ns: u64) {
        let running: Vec<u64> = self.running().map(|s| s.id).collect();
        for id in running {
            self.observe_jvms(id);
            if !self.jvm_attach(id) {
                continue;
            }
            for pid in self.sessions[&id].held_pids() {
                if self.jvms.is_jvm(pid)
                    && self.codemaps.unexplained_since_snapshot(pid)
                        >= super::jvm::UNEXPLAINED_BEFORE_ASKING
                {
                    self.ask_jvm(pid, now_ns, false);
                }
            }
        }
    }

    /// Asks `pid` for its perf map if it is a JVM that may be asked: at once when `urgent`,
    /// else once the wait its last snapshots call for has passed (the code maps count what
    /// they named).
    fn ask_jvm(&mut self, pid: u32, now_ns: u64, urgent: bool) {
        let named = self.codemaps.named_by_snapshots(pid);
        self.jvms.request(pid, now_ns, urgent, named);
    }

    /// Makes sure the code maps know `pid`; a process that left its pid to another takes its
    /// VM's statistics with its map.
    fn touch_code_maps(&mut self, pid: u32) {
        if self.codemaps.touch(pid) {
            self.vms.retain(|known| known != pid);
        }
    }

    /// A JVM answered a perf map request: the map is read now, as a new snapshot, and samples
    /// it explains are named from it.
    fn jvm_answered(&mut self, mut reply: JvmReply) {
        let now = sys::monotonic_ns();
        if self.jvms.answered(&mut reply) {
            self.touch_code_maps(reply.pid);
            self.codemaps.perf_map_rewritten(reply.pid);
            self.advance_code_maps(reply.pid, now);
        }
        self.finalize_ready(now);
    }

    /// Fixes a running session's stop time and releases its kernel filters. It becomes final in
    /// [`Manager::finalize_ready`] once samples up to `stop_ns` have all been read.
    fn begin_stop(&mut self, id: u64, reason: &str, stop_ns: u64) {
        let lost = self.sampler.lost().ok();
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        if session.state != State::Running {
            return;
        }
        let update = update_cpu(session, read_host_cpu());
        self.counters.pid_reuses += update.reused;
        let exited: Vec<u32> = session
            .targets
            .iter()
            .filter(|t| t.exited)
            .map(|t| t.pid)
            .collect();
        // Losses are counted in the kernel when they happen; read them before the release below
        // clears the counters of a period nobody samples at any more.
        if let Some(lost) = &lost {
            refresh_lost(session, lost);
        }
        if let Some(kernel) = &mut session.kernel {
            kernel.freeze_all();
        }
        if let Some(hotspot) = &mut session.hotspot {
            hotspot.freeze_all();
        }
        session.state = State::Stopping;
        session.stop_ns = Some(stop_ns);
        session.stop_reason = Some(reason.to_owned());
        tracing::info!(id, reason, samples = session.total, "session stopping");
        let held = request::SessionSpec {
            pids: session.held_pids(),
            ..session.spec.clone()
        };
        self.routes.release(self.sampler.as_mut(), &held);
        self.reader
            .flush_at(stop_ns + self.config.stop_slack.as_nanos() as u64);
        // Targets that exited are read one last time now: their maps are complete.
        let now = sys::monotonic_ns();
        for &pid in &exited {
            self.codemaps.exited(pid);
            self.advance_code_maps(pid, now);
        }
        // Live HotSpot targets write their perf map once more: the stop waits for it.
        if self.jvm_attach(id) {
            let live: Vec<u32> = self.sessions[&id]
                .targets
                .iter()
                .map(|t| t.pid)
                .filter(|pid| !exited.contains(pid) && self.jvms.is_jvm(*pid))
                .collect();
            for pid in live {
                self.ask_jvm(pid, now, true);
            }
        }
    }

    fn finalize_ready(&mut self, now_ns: u64) {
        let slack = self.config.stop_slack.as_nanos() as u64;
        let timeout = self.config.stop_timeout.as_nanos() as u64;
        let system_wide_wait = self.config.system_wide_code_map_wait.as_nanos() as u64;
        let ready: Vec<(u64, Finish)> = self
            .sessions
            .values()
            .filter(|s| s.state == State::Stopping)
            .filter_map(|s| {
                let stop = s.stop_ns?;
                let drained = self.watermark_ns >= stop + slack;
                // A target's files being read (its perf map rewritten for the stop, its last
                // read after exit) are waited for, as long as the stop's timeout allows.
                // So is a VM's publication of its statistics still open and behind the stop (the
                // last GC's end may be on its way).
                let asking_jvm = s.targets.iter().any(|t| {
                    self.jvms.in_flight(t.pid)
                        || self.codemaps.reading(t.pid)
                        || (self.vms.get(t.pid).is_some_and(VmState::has_statistics)
                            && self
                                .codemaps
                                .publishing_until(t.pid)
                                .is_some_and(|until| until < stop))
                });
                if drained && s.waiting == 0 && !asking_jvm {
                    Some((s.id, Finish::Whole))
                } else if drained && s.spec.system_wide && now_ns >= stop + system_wide_wait {
                    Some((s.id, Finish::WithoutCodeMaps))
                } else if now_ns >= stop + timeout {
                    Some((
                        s.id,
                        if drained {
                            Finish::WithoutCodeMaps
                        } else {
                            Finish::Undrained
                        },
                    ))
                } else {
                    None
                }
            })
            .collect();
        if ready.is_empty() {
            // The flush served may have been an earlier one (another stop's, the module
            // sweep's), which a stop's request gave way to: ask again, or a quiet ring would
            // hold the stop until its timeout.
            self.request_stop_flushes();
            return;
        }
        for &(id, finish) in &ready {
            if finish != Finish::Whole {
                self.attribute_waiting(id, now_ns);
            }
            if finish == Finish::Undrained {
                self.counters.stop_timeouts += 1;
                let reason = format!(
                    "the kernel's ring buffer was not read past the stop time within {:.1} s \
                     (the daemon was starved of CPU?): samples taken just before the stop are \
                     missing",
                    self.config.stop_timeout.as_secs_f64()
                );
                tracing::warn!(id, "session stopped incomplete: {reason}");
                if let Some(session) = self.sessions.get_mut(&id) {
                    session.incomplete = Some(reason);
                }
            }
            let Some(session) = self.sessions.get_mut(&id) else {
                continue;
            };
            session.state = State::Stopped;
            // Its samples waiting for a later perf map settle with what is known now.
            self.codemaps.session_final(
                id,
                &mut SessionSink {
                    sessions: &mut self.sessions,
                    vms: &mut self.vms,
                },
            );
            let Some(session) = self.sessions.get_mut(&id) else {
                continue;
            };
            if let Some(ids) = self.by_period.get_mut(&session.period_ns) {
                ids.retain(|&other| other != id);
                if ids.is_empty() {
                    self.by_period.remove(&session.period_ns);
                }
            }
            let reply = session.to_proto(now_ns);
            tracing::info!(id, samples = session.total, "session stopped");
            for waiter in self.stop_waiters.remove(&id).unwrap_or_default() {
                let _ = waiter.send(Ok(reply.clone()));
            }
        }
        self.request_stop_flushes();
        self.reader.set_active(!self.by_period.is_empty());
        self.evict();
    }

    /// Asks the reader for a batch past each stopping session's stop time. The reader keeps
    /// only the earliest request and serves it first, so this is asked again after every batch
    /// while a stop waits.
    fn request_stop_flushes(&self) {
        let slack = self.config.stop_slack.as_nanos() as u64;
        for session in self.sessions.values() {
            if let (State::Stopping, Some(stop)) = (session.state, session.stop_ns) {
                self.reader.flush_at(stop + slack);
            }
        }
    }

    /// Attributes a stopping session's samples that still wait for code maps with what is
    /// known now; they are counted as attributed before their code map caught up. Samples
    /// taken after its stop (other sessions') keep waiting.
    fn attribute_waiting(&mut self, id: u64, now_ns: u64) {
        let Some(session) = self.sessions.get(&id) else {
            return;
        };
        let stop_ns = session.stop_ns.unwrap_or(now_ns);
        let waiting = self.codemaps.waiting();
        let pids: Vec<u32> = if session.spec.system_wide {
            waiting
        } else {
            session
                .targets
                .iter()
                .map(|t| t.pid)
                .filter(|p| waiting.contains(p))
                .collect()
        };
        for pid in pids {
            self.advance_code_maps_with(pid, now_ns, Some(stop_ns));
        }
    }

    /// Keeps each user's most recent stopped sessions, and those whose final profile was not
    /// taken yet (for a while).
    fn evict(&mut self) {
        let now = sys::monotonic_ns();
        let mut kept: HashMap<u32, usize> = HashMap::new();
        let mut evict = Vec::new();
        for session in self.sessions.values().rev() {
            if session.state != State::Stopped {
                continue;
            }
            let count = kept.entry(session.owner_uid).or_insert(0);
            *count += 1;
            if *count > self.config.max_stopped_per_user && !self.protected(session, now) {
                evict.push(session.id);
            }
        }
        for id in evict {
            self.sessions.remove(&id);
            self.counters.sessions_evicted += 1;
        }
    }

    /// Whether a stopped session is kept whatever the count: its final profile was not taken,
    /// and it stopped less than `unfetched_kept_for` ago.
    fn protected(&self, session: &Session, now_ns: u64) -> bool {
        session.state == State::Stopped
            && !session.fetched
            && session.stop_ns.is_some_and(|stop| {
                now_ns.saturating_sub(stop) < self.config.unfetched_kept_for.as_nanos() as u64
            })
    }

    fn ingest(&mut self, batch: Batch) {
        self.counters.batches += 1;
        self.counters.events += batch.events.len() as u64;
        self.counters.malformed_events += batch.malformed;
        let now = batch.watermark_ns;
        for (i, event) in batch.events.iter().enumerate() {
            match event.kind {
                EVENT_SAMPLE => {
                    let (kernel, user) = batch.stack(i);
                    self.route(event, kernel, user, batch.user_copy(i), now)
                }
                EVENT_EXEC => self.exec(event),
                EVENT_EXIT => self.exit(event),
                _ => self.counters.unknown_events += 1,
            }
        }
        self.watermark_ns = self.watermark_ns.max(batch.watermark_ns);
        // After the batch's exec events, which check their processes first.
        self.check_changed_creds();
        let now = sys::monotonic_ns();
        // Processes whose samples only wait for their perf map to change are read on the
        // tick: a batch comes every few milliseconds, and under process churn they would
        // be revisited, each, at every one.
        for pid in self.codemaps.counting() {
            self.advance_code_maps(pid, now);
        }
        self.finalize_ready(now);
    }

    /// Reads a process's code maps and attributes its waiting samples in generated code.
    fn advance_code_maps(&mut self, pid: u32, now_ns: u64) {
        self.advance_code_maps_with(pid, now_ns, None);
    }

    /// [`Manager::advance_code_maps`], optionally forcing the samples waiting up to
    /// `force_until` through.
    fn advance_code_maps_with(&mut self, pid: u32, now_ns: u64, force_until: Option<u64>) {
        // Code map files are found through the process's mappings, which it may have changed
        // since they were read.
        self.processes
            .refresh_if_older(pid, CODE_MAP_FILES_RECHECK_NS, now_ns);
        if let Some(process) = self.processes.get(pid) {
            self.codemaps.observe_files(pid, &process.code_map_files);
        }
        let processes = &mut self.processes;
        let sessions = &mut self.sessions;
        let samples_until = self
            .watermark_ns
            .saturating_sub(self.config.stop_slack.as_nanos() as u64);
        self.codemaps.advance(
            pid,
            now_ns,
            samples_until,
            force_until,
            &mut || processes.executable(pid, now_ns),
            &mut SessionSink {
                sessions,
                vms: &mut self.vms,
            },
        );
    }

    /// A read of a process's code map files came back: the samples it lets through are
    /// attributed, and stops that waited for it may end.
    fn read_done(&mut self, reply: ReadReply) {
        let now = sys::monotonic_ns();
        let pid = reply.job.pid;
        let samples_until = self
            .watermark_ns
            .saturating_sub(self.config.stop_slack.as_nanos() as u64);
        let mut sink = SessionSink {
            sessions: &mut self.sessions,
            vms: &mut self.vms,
        };
        let again = self
            .codemaps
            .read_done(reply, now, samples_until, &mut sink);
        if again {
            self.advance_code_maps(pid, now);
        }
        self.answer_snapshots(now);
        self.finalize_ready(now);
    }

    /// A process replaced its program: its mappings are all new, and it may now belong to
    /// another user (a setuid program).
    fn exec(&mut self, event: &Event) {
        self.counters.exec_events += 1;
        let pid = event.tgid;
        // Sessions that sample the process at the exec's time: stopping ones too, since a
        // program that exits at once can be seen to exit (and its session to stop) before its
        // exec is read from the ring.
        let targeted: Vec<u64> = self
            .sessions
            .values()
            .filter(|s| {
                s.state != State::Stopped && !s.spec.system_wide && s.wants(pid, event.timestamp_ns)
            })
            .map(|s| s.id)
            .collect();
        // The old program's code map ends at the exec; what the new one published stays.
        self.codemaps.exec(pid, event.timestamp_ns);
        let comm = comm_name(&event.exec_comm());
        for session in self.sessions.values_mut() {
            // Only sessions that sample the process at the exec: a session whose target under
            // this pid ended before keeps its name.
            if session.state != State::Stopped
                && session.wants(pid, event.timestamp_ns)
                && let Some(command) = session.commands.get_mut(&pid)
            {
                command.clone_from(&comm);
            }
        }
        if targeted.is_empty() {
            // Some process seen by a system-wide session: read it again when it is next
            // sampled, not now, so that a host busy with execs costs nothing for processes
            // that are never sampled.
            self.processes.forget(pid);
            return;
        }
        // A named target: read it now, while it may still live, as at session start. A short
        // program may be gone already: its name came with the event.
        let process = self.processes.exec(pid, event.timestamp_ns, &comm);
        let (start_time, command, executable) = (
            process.start_time,
            process.command.clone(),
            process
                .executable
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        );
        for id in &targeted {
            let Some(session) = self.sessions.get_mut(id) else {
                continue;
            };
            for target in session
                .targets
                .iter_mut()
                .filter(|t| t.pid == pid && t.until_ns.is_none_or(|u| event.timestamp_ns < u))
            {
                if target.start_time == start_time {
                    target.command.clone_from(&command);
                    // The old program's path would be wrong; an unknown one is said as such.
                    target.executable.clone_from(&executable);
                } else {
                    // The program is gone already, or another process holds the pid by now:
                    // the exec event's name is all that is known of the target's new program.
                    if start_time.is_some() {
                        self.counters.pid_reuses += 1;
                    }
                    target.command.clone_from(&comm);
                    target.executable.clear();
                }
                session.commands.insert(pid, target.command.clone());
            }
        }
        // The new program may belong to another user (setuid), another group or hold
        // capabilities: the kernel keeps the owners' samples to the credentials checked before
        // (see `Guard`), and the process is checked again now; an owner who may not profile the
        // new program has nothing of it from the exec on.
        self.arm_checking(pid, sys::monotonic_ns(), event.timestamp_ns);
    }

    /// Checks again the processes whose threads the kernel found running with credentials
    /// other than their guard's, which kept those samples from their target sessions: every
    /// such change is seen here, whether or not its exec event was.
    fn check_changed_creds(&mut self) {
        for (pid, first_ns) in self.sampler.take_creds_changed() {
            self.counters.target_creds_changed += 1;
            self.arm_checking(pid, sys::monotonic_ns(), first_ns);
        }
    }

    /// Checks who process `pid` runs as against the owners of the running sessions that hold
    /// it: those that may not profile it ([`request::may_profile`]) are released from
    /// `until_ns` on and counted as revoked. Returns the guard the others need: open for root's
    /// sessions alone, else the credentials just checked; held when they could not be read
    /// (the process is ending: its exit releases it).
    ///
    /// The kernel compares every sampled thread with the guard, so the check and the
    /// credentials it is held to are one reading: nothing that changes after it is sampled for
    /// a user's session.
    fn check_owners(&mut self, pid: u32, until_ns: u64) -> Guard {
        let status = sys::read_status(pid).ok();
        let mut guarded = false;
        for (id, _) in self.holders(pid, u64::MAX) {
            let owner = self.sessions[&id].owner_uid;
            if owner == 0 {
                continue;
            }
            let Some(status) = &status else {
                guarded = true;
                continue;
            };
            match request::may_profile(owner, status) {
                Ok(()) => guarded = true,
                Err(why) => {
                    self.counters.targets_revoked += 1;
                    tracing::info!(id, pid, owner, "target {why}: no longer sampled");
                    let note = format!("now {why}, another user's process: no longer sampled");
                    self.release_target(id, pid, until_ns, &note);
                }
            }
        }
        match (guarded, status.as_ref().and_then(request::creds_of)) {
            (false, _) => Guard::Open,
            (true, Some(creds)) => Guard::Creds(creds),
            (true, None) => Guard::Held,
        }
    }

    /// Stops sampling one target of a running session from `until_ns` on.
    fn release_target(&mut self, id: u64, pid: u32, until_ns: u64, note: &str) {
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        let Some(target) = session.held_target_mut(pid) else {
            return;
        };
        target.until_ns = Some(until_ns);
        target.note = Some(note.to_owned());
        if let Some(kernel) = &mut session.kernel {
            kernel.freeze(pid);
        }
        if let Some(hotspot) = &mut session.hotspot {
            hotspot.freeze(pid);
        }
        self.routes
            .release_target(self.sampler.as_mut(), &session.spec, pid);
    }

    /// The running sessions' targets under `pid` that still hold their filters, as (session,
    /// start time), in sessions started by `started_by_ns`.
    fn holders(&self, pid: u32, started_by_ns: u64) -> Vec<(u64, Option<u64>)> {
        self.running()
            .filter(|s| !s.spec.system_wide && s.start_ns <= started_by_ns)
            .flat_map(|s| {
                s.targets
                    .iter()
                    .filter(|t| t.pid == pid && t.until_ns.is_none())
                    .map(|t| (s.id, t.start_time))
            })
            .collect()
    }

    /// A target of a running session ended: it is marked exited (with its last CPU time when it
    /// could still be read), no longer sampled from `until_ns` on, and its session stops there
    /// if it was the last.
    fn target_exited(&mut self, id: u64, pid: u32, until_ns: u64, cpu_ticks: Option<u64>) {
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        if session.state != State::Running {
            return;
        }
        let Some(target) = session.held_target_mut(pid) else {
            return;
        };
        target.exited = true;
        if let Some(ticks) = cpu_ticks {
            target.cpu_ticks_last = ticks.max(target.cpu_ticks_last);
        }
        let all_exited = session.targets.iter().all(|t| t.exited);
        let stop_ns = until_ns.max(session.start_ns);
        // Its code maps are read one last time, and change no more.
        self.codemaps.exited(pid);
        if all_exited {
            self.begin_stop(id, vmscope_proto::STOPPED_ALL_TARGETS_EXITED, stop_ns);
        } else {
            self.release_target(id, pid, until_ns, "exited");
        }
    }

    /// A tracked process exited (its leader, or a thread of a process whose leader had): the
    /// kernel stopped sampling its pid for target sessions when it did. Its targets are released
    /// at that time, unless the process runs on ([`life::after_exit`]): then its filter is armed
    /// again.
    ///
    /// Targets of sessions started after the exit are not concerned: they were read, and their
    /// filters armed and checked, after it.
    fn exit(&mut self, event: &Event) {
        self.counters.exit_events += 1;
        let (pid, at) = (event.tgid, event.timestamp_ns);
        let concerned = self.holders(pid, at);
        if concerned.is_empty() {
            // A process a system-wide session saw, or a target released already.
            self.processes.exited(pid, at);
            return;
        }
        let now = life::probe(pid, None);
        let mut reused = false;
        let mut ran_on = None;
        for (id, start_time) in concerned {
            match life::after_exit(now, start_time, at, self.start_clock) {
                AfterExit::RunsOn { leader } => ran_on = Some(leader),
                AfterExit::Ended {
                    cpu_ticks,
                    reused: other,
                } => {
                    reused |= other;
                    self.target_exited(id, pid, at, cpu_ticks);
                }
            }
        }
        if reused {
            self.counters.pid_reuses += 1;
        }
        let Some(leader) = ran_on else {
            self.processes.exited(pid, at);
            return;
        };
        self.counters.exits_process_ran_on += 1;
        if leader {
            // An execve from another thread replaced the program: its exec event found the
            // filter gone, so its mappings are read again here.
            self.processes.refresh_if_older(pid, 0, sys::monotonic_ns());
        }
        self.arm(pid, sys::monotonic_ns());
    }

    /// Arms the kernel's `TRACKED` entry of `pid` for the targets of running sessions that hold
    /// its filters, as the process that holds the pid calls for: removed at its leader's exit,
    /// or at any thread's once the leader is gone. Then checks that it still lives: an exit
    /// before the entry was in place removed nothing, and would leave the pid sampled for
    /// whoever gets it next. A thread seen alive after the entry was written has its exit
    /// tracepoint still to run (see [`crate::process::life`]).
    ///
    /// Targets whose process is found gone, or whose start time is not that of the process
    /// found, are released from `until_ns` on (a time before the entry was written): no sample
    /// after that is theirs. So are targets whose owner may not profile the process as it runs
    /// now, and the entry's guard is set for the others ([`Manager::check_owners`]).
    fn arm(&mut self, pid: u32, until_ns: u64) {
        self.arm_checking(pid, until_ns, until_ns);
    }

    /// [`Manager::arm`], releasing the targets whose owner may not profile the process from
    /// `revoked_ns` on: the time its credentials changed, when known.
    fn arm_checking(&mut self, pid: u32, until_ns: u64, revoked_ns: u64) {
        // A process only goes from running with its leader, to running without, to gone: three
        // rounds see it settle.
        for _ in 0..3 {
            let holders = self.holders(pid, u64::MAX);
            if holders.is_empty() {
                return;
            }
            let life = life::probe(pid, None);
            let tracking = match life {
                Life::Alive { leader: true, .. } => Tracking::Leader,
                Life::Alive { leader: false, .. } => Tracking::AnyThread,
                _ => Tracking::Off,
            };
            let mut live = false;
            for (id, start_time) in holders {
                if tracking != Tracking::Off
                    && start_time.is_some()
                    && start_time == life.start_time()
                {
                    live = true;
                    continue;
                }
                let cpu_ticks = match life {
                    Life::Exited {
                        cpu_ticks,
                        start_time: now,
                    } if start_time == Some(now) => Some(cpu_ticks),
                    _ => {
                        if life.start_time().is_some() {
                            self.counters.pid_reuses += 1;
                        }
                        None
                    }
                };
                self.target_exited(id, pid, until_ns, cpu_ticks);
            }
            if !live {
                // The last holder's release took the entry away.
                return;
            }
            let guard = self.check_owners(pid, revoked_ns);
            if self.holders(pid, u64::MAX).is_empty() {
                // Revoked for every session: the last release took the entry away.
                return;
            }
            self.sampler.set_tracking(pid, tracking, guard);
            let after = life::probe(pid, life.start_time());
            let holds = match after {
                Life::Alive { leader, .. } => leader || tracking == Tracking::AnyThread,
                _ => false,
            };
            if holds {
                return;
            }
        }
        // Not settled (it cannot happen, by the order above): nothing is sampled for them.
        for (id, _) in self.holders(pid, u64::MAX) {
            self.target_exited(id, pid, until_ns, None);
        }
    }

    /// Counts a sample in the sessions that want it: its stack (leaf first) for those that
    /// asked for stacks, its leaf alone for the others. A sample with a frame in anonymous
    /// executable memory waits for its process's code maps to be known up to its time.
    fn route(
        &mut self,
        event: &Event,
        kernel: &[u64],
        user: &[u64],
        copy: Option<UserCopy<'_>>,
        now_ns: u64,
    ) {
        let wanting: Vec<(u64, Wanted)> = self
            .by_period
            .get(&event.period_ns)
            .into_iter()
            .flatten()
            .filter_map(|id| {
                let session = self.sessions.get(id)?;
                // A target session counts only what the kernel kept for target sessions: not a
                // sample taken for system-wide ones of a process whose guard refused it.
                (session.wants(event.tgid, event.timestamp_ns)
                    && (session.spec.system_wide || event.flags & FLAG_TARGET != 0))
                    .then_some((*id, session.spec.call_graph.wanted()))
            })
            .collect();
        if wanting.is_empty() {
            self.counters.samples_unrouted += 1;
            return;
        }
        self.counters.samples_routed += 1;
        let pid = event.tgid;
        // A sample stamped after the known process under its pid ended is another's.
        self.processes.sampled(pid, event.timestamp_ns, now_ns);
        for (id, _) in &wanting {
            if let Some(session) = self.sessions.get_mut(id) {
                session.total += 1;
                // Each session names the processes it sampled, from their first sample on.
                if let std::collections::hash_map::Entry::Vacant(name) = session.commands.entry(pid)
                {
                    name.insert(self.processes.observe(pid, now_ns).command.clone());
                }
            }
        }
        let whole = wanting.iter().any(|&(_, w)| w != Wanted::Leaf);
        let fp_too = wanting.iter().any(|&(_, w)| w == Wanted::FramePointers);
        let (mut frames, mut end, mut fp) =
            self.frames_of(event, kernel, user, copy, (whole, fp_too), now_ns);
        // Past Java code compiled without frame pointers, a walk reads garbage.
        if whole && self.jvms.cuts_stacks(pid) {
            end_at_generated_code(&mut frames, &mut end);
            if let Some((fp, fp_end)) = &mut fp {
                end_at_generated_code(fp, fp_end);
            }
        }
        let mut routed = RoutedSample {
            tid: event.tid,
            kernel: event.is_kernel(),
            end,
            frames,
            fp,
            sessions: wanting,
        };
        let first_generated = routed.frames_mut().find(|f| f.is_generated()).copied();
        if first_generated.is_none() && !self.vms.holds(pid) {
            count_routed(
                &mut self.sessions,
                pid,
                event.timestamp_ns,
                &routed,
                None,
                |_| {},
            );
            return;
        }
        // Generated code is attributed once the code maps are known up to its time (its
        // binaries stay open meanwhile: see `CodeMaps::waiting_modules`); any sample of a VM
        // that publishes, once its intervals are.
        let ip = first_generated.map_or(0, |f| f.lookup);
        for (id, _) in &routed.sessions {
            if let Some(session) = self.sessions.get_mut(id) {
                session.waiting += 1;
            }
        }
        self.codemaps.push_sample(
            pid,
            PendingSample {
                timestamp_ns: event.timestamp_ns,
                ip,
                payload: routed,
            },
        );
    }

    /// The frames of a sample, leaf first: the leaf alone unless `whole`, else the kernel
    /// frames (when the tick landed in the kernel) then the user frames
    /// ([`Manager::user_frames_of`]), each placed in its process now, while its mappings are
    /// known. Returns how the walk ended, and, when the user stack was unwound from a copy and
    /// `fp_too` (a session on the target asked for frame pointers), the frame-pointer stack
    /// too. Never empty: the leaf comes first whatever the stacks say.
    fn frames_of(
        &mut self,
        event: &Event,
        kernel: &[u64],
        user_fp: &[u64],
        copy: Option<UserCopy<'_>>,
        (whole, fp_too): (bool, bool),
        now_ns: u64,
    ) -> (Vec<SampleFrame>, StackEnd, FpStack) {
        let pid = event.tgid;
        let stacked = whole && event.flags & FLAG_STACK != 0;
        let mut frames = Vec::with_capacity(if stacked {
            1 + kernel.len() + user_fp.len().max(1)
        } else {
            1
        });
        // The leaf is the interrupted instruction, whatever the walkers found.
        let kernel_frames = if stacked && event.is_kernel() {
            kernel
        } else {
            &[]
        };
        if event.is_kernel() {
            let kernel_frame = |address, lookup| SampleFrame {
                location: Location::Kernel { ip: lookup },
                address,
                lookup,
                code_start: 0,
            };
            frames.push(kernel_frame(event.ip, event.ip));
            // Callers hold return addresses: the call is the instruction before.
            for &address in kernel_frames.iter().skip(1) {
                frames.push(kernel_frame(address, address.saturating_sub(1)));
            }
        }
        if !stacked {
            if !event.is_kernel() {
                frames.push(self.user_frame(pid, event.ip, event.ip, now_ns));
            }
            return (frames, StackEnd::FramePointerChainEnded, None);
        }
        if event.flags & FLAG_USER_STACK_FAILED != 0 {
            self.counters.user_stacks_failed += 1;
        }
        let mut end = StackEnd::FramePointerChainEnded;
        if event.flags & (FLAG_KERNEL_TRUNCATED | FLAG_USER_TRUNCATED) != 0 {
            self.counters.stacks_truncated += 1;
            end = StackEnd::FrameLimit;
        }
        if let Some(copy) = &copy {
            self.counters.user_copies += 1;
            self.counters.user_copy_bytes += copy.stack.len() as u64;
            if copy.faulted {
                self.counters.user_copies_faulted += 1;
            }
        }
        let mut unwound = std::mem::take(&mut self.user_scratch);
        unwound.clear();
        let unwound_from_copy = copy.is_some();
        // Sessions asking for frame-pointer stacks get the kernel's walk as it came, even when
        // another session on the target had the stack copied and unwound.
        let fp = (unwound_from_copy && fp_too).then(|| {
            let mut fp_frames = frames.clone();
            let mut fp_end = end;
            if self.push_user_frames(pid, event, user_fp, &mut fp_frames, now_ns) {
                fp_end = StackEnd::Unmapped;
            }
            (fp_frames, fp_end)
        });
        if let Some(mut dwarf_end) = self.user_frames_of(event, user_fp, copy, now_ns, &mut unwound)
        {
            // A return address the unwinder could not place may be new code (CPython maps its
            // trampolines as it goes): with the mappings read again, the unwind is done again,
            // since how a frame is stepped depends on what holds its address.
            let stray = unwound
                .iter()
                .skip(1)
                .find(|&&a| a != 0 && a < KERNEL_SPACE && !self.processes.maps_address(pid, a - 1));
            if let Some(&stray) = stray
                && self.processes.refresh_for_caller(pid, stray - 1, now_ns)
                && let Some(again) = self.user_frames_of(event, user_fp, copy, now_ns, &mut unwound)
            {
                dwarf_end = again;
            }
            end = dwarf_end;
        }
        if self.push_user_frames(pid, event, &unwound, &mut frames, now_ns) {
            end = StackEnd::Unmapped;
        }
        if unwound_from_copy {
            // Counted as the profile says it ended: a walk framehop ended otherwise may show
            // an address outside every mapping last.
            self.unwinder.count_end(end);
        }
        self.user_scratch = unwound;
        (frames, end, fp)
    }

    /// Places a user stack (leaf first, as [`Manager::user_frames_of`] gives it) after the
    /// kernel frames in `frames`. Answers whether it ended at an address outside every mapping.
    fn push_user_frames(
        &mut self,
        pid: u32,
        event: &Event,
        addresses: &[u64],
        frames: &mut Vec<SampleFrame>,
        now_ns: u64,
    ) -> bool {
        // The user stack's first entry is where user code was interrupted (the leaf itself in
        // user mode, the instruction after the system call in kernel mode): looked up as is.
        let mut user = addresses.iter().copied().enumerate();
        if !event.is_kernel() {
            frames.push(self.user_frame(pid, event.ip, event.ip, now_ns));
            // The walker starts at the same instruction pointer.
            if user.clone().next().is_some_and(|(_, ip)| ip == event.ip) {
                user.next();
            }
        }
        for (i, address) in user {
            // A zero or kernel address ends a walk that went astray.
            if address == 0 || address >= KERNEL_SPACE {
                break;
            }
            let lookup = if i == 0 { address } else { address - 1 };
            let frame = self.user_frame(pid, address, lookup, now_ns);
            let unmapped = matches!(frame.location, Location::Unmapped(_));
            frames.push(frame);
            // Past code built without frame pointers, the walker reads whatever the frame
            // pointer register held: an address outside every mapping ends the stack there
            // (shown as one unknown frame) rather than adding the garbage after it.
            if unmapped {
                self.counters.stack_frames_unmapped += 1;
                return true;
            }
        }
        false
    }

    /// The user stack of a sample into `out`, leaf first: the user instruction pointer (where
    /// user code was interrupted, or will resume after the system call when the tick landed in
    /// the kernel), then return addresses.
    ///
    /// A sample with a [`UserCopy`] (`--call-graph dwarf`) is unwound here from its registers
    /// and stack copy ([`Unwinder`]): DWARF CFI for binaries, frame pointers for JIT code, the
    /// CPython trampoline rule; the answer says how that walk ended. Other samples get the
    /// kernel's frame-pointer walk as it came (`None`: the caller judges how it ended). A
    /// process that can no longer be read has no mappings left: its copy is walked by frame
    /// pointers alone, and says how far that got.
    fn user_frames_of(
        &mut self,
        event: &Event,
        user_fp: &[u64],
        copy: Option<UserCopy<'_>>,
        now_ns: u64,
        out: &mut Vec<u64>,
    ) -> Option<StackEnd> {
        let Some(copy) = copy else {
            out.extend_from_slice(user_fp);
            return None;
        };
        let process = self.processes.observe(event.tgid, now_ns);
        let end = self.unwinder.unwind(
            process,
            UserRegs {
                ip: copy.ip,
                sp: copy.sp,
                bp: copy.bp,
            },
            StackCopy {
                sp: copy.sp,
                bytes: copy.stack,
                faulted: copy.faulted,
            },
            &mut self.process_memory,
            out,
        );
        Some(end)
    }

    /// A user-space frame of `pid` at `address`, placed by `lookup` (the address itself, or a
    /// return address minus one).
    fn user_frame(&mut self, pid: u32, address: u64, lookup: u64, now_ns: u64) -> SampleFrame {
        let location = if address == lookup {
            self.processes.normalize(pid, lookup, now_ns)
        } else {
            self.processes.normalize_caller(pid, lookup, now_ns)
        };
        SampleFrame {
            location,
            address,
            lookup,
            code_start: 0,
        }
    }

    /// The earliest CLOCK_MONOTONIC time at which a running session's duration elapses.
    fn next_deadline(&self) -> Option<u64> {
        self.running()
            .filter_map(|s| Some(s.start_ns + s.spec.duration?.as_nanos() as u64))
            .min()
    }

    /// Stops the sessions whose duration elapsed, exactly at their end.
    fn end_elapsed(&mut self) {
        let now = sys::monotonic_ns();
        let elapsed: Vec<(u64, u64)> = self
            .running()
            .filter_map(|s| {
                let end = s.start_ns + s.spec.duration?.as_nanos() as u64;
                (end <= now).then_some((s.id, end))
            })
            .collect();
        for (id, end) in elapsed {
            self.begin_stop(id, "duration elapsed", end);
        }
        self.finalize_ready(now);
    }

    fn tick(&mut self) {
        let now = sys::monotonic_ns();
        let running: Vec<u64> = self.running().map(|s| s.id).collect();
        // An idle daemon reads nothing.
        let host = if running.is_empty() {
            HostCpu::default()
        } else {
            read_host_cpu()
        };
        let mut leaderless = Vec::new();
        for id in running {
            let Some(session) = self.sessions.get_mut(&id) else {
                continue;
            };
            // JVM targets still starting: their performance data file comes within a second.
            if now.saturating_sub(session.start_ns) < hotspot::LOOK_FOR_NS
                && let Some(perf_data) = &mut session.hotspot
                && perf_data.missing()
            {
                count_perf_data(&mut self.counters, perf_data.look_again());
            }
            if let Some(perf_data) = &mut session.hotspot {
                self.counters.hotspot_perf_data_failed += perf_data.read_levels(now);
            }
            let update = update_cpu(session, host);
            self.counters.pid_reuses += update.reused;
            leaderless.extend(update.leaderless);
            let newly_exited: Vec<u32> = session
                .targets
                .iter()
                .filter(|t| t.exited && t.until_ns.is_none())
                .map(|t| t.pid)
                .collect();
            for target in &mut session.targets {
                // Only from the target's own process: not another one that has its pid now.
                if let Some(process) = self.processes.get(target.pid)
                    && !process.gone
                    && !target.exited
                    && target.until_ns.is_none()
                    && process.start_time == target.start_time
                {
                    target.command.clone_from(&process.command);
                    if let Some(exe) = &process.executable {
                        target.executable = exe.display().to_string();
                    }
                }
            }
            let all_exited = !session.spec.system_wide && session.targets.iter().all(|t| t.exited);
            // Its code maps are read one last time, and change no more.
            for &pid in &newly_exited {
                self.codemaps.exited(pid);
            }
            if all_exited {
                self.begin_stop(id, vmscope_proto::STOPPED_ALL_TARGETS_EXITED, now);
                continue;
            }
            // An exited target's pid may be reused by anyone: stop sampling it now. (Its exit
            // event, which the ring had no room for, would have done it at once.)
            for pid in newly_exited {
                self.release_target(id, pid, now, "exited");
            }
        }
        // Targets whose leader exited before their threads: their kernel filter goes with any
        // thread's exit, and is armed again while threads remain (an exit event lost to a full
        // ring would otherwise leave them unsampled).
        leaderless.sort_unstable();
        leaderless.dedup();
        for pid in leaderless {
            self.arm(pid, now);
        }
        // Processes whose samples wait for their code maps after every session that samples
        // them stopped: their exit is what flushes a buffered jitdump.
        self.codemaps.notice_exits();
        self.tick_jvms(now);
        for pid in self.codemaps.waiting() {
            self.advance_code_maps(pid, now);
        }
        // With nothing sampled, no sample can arrive: a VM publishing between sessions has its
        // changes applied as they come, rather than held until the reader's next batch.
        let sampling = self.sessions.values().any(|s| s.state != State::Stopped);
        let samples_until = if sampling {
            self.watermark_ns
                .saturating_sub(self.config.stop_slack.as_nanos() as u64)
        } else {
            now
        };
        self.codemaps.settle(now, samples_until);
        self.codemaps.retire_idle_readers(now);
        self.answer_snapshots(now);
        self.end_elapsed();

        if now.saturating_sub(self.last_sweep_ns) >= self.config.sweep_modules.as_nanos() as u64 {
            self.last_sweep_ns = now;
            self.sweep_modules(now);
            self.sweep_codes(now);
            self.warm_symbols();
            self.give_memory_back(sampling);
        }

        if now.saturating_sub(self.last_forget_ns) > 5_000_000_000 {
            self.last_forget_ns = now;
            let keep: Vec<u32> = self
                .sessions
                .values()
                .filter(|s| s.state != State::Stopped)
                .flat_map(|s| s.spec.pids.iter().copied())
                .collect();
            let horizon = now.saturating_sub(self.config.forget_processes_after.as_nanos() as u64);
            self.processes
                .forget_idle(|pid| keep.contains(&pid), horizon);
            let processes = &self.processes;
            self.unwinder.retain(|pid| processes.get(pid).is_some());
            // Code bytes are read again when next asked: code may have been freed or moved.
            self.process_memory.clear();
            self.codemaps
                .retain(|pid| keep.contains(&pid) || processes.get(pid).is_some());
            self.jvms
                .retain(|pid| keep.contains(&pid) || processes.get(pid).is_some());
            // The perf maps the daemon made JVMs write go once no running session needs them.
            self.jvms.remove_perf_maps(|pid| keep.contains(&pid));
        }
    }

    /// Closes the binaries nothing needs any more: those no live process maps and no session
    /// that can still be reported (running, stopping, stopped and kept) has samples in; and
    /// forgets the code maps of processes gone.
    ///
    /// A process that died keeps its binaries until every sample it took has been read: while
    /// sessions sample, until the reader's watermark passes the time it was found dead (a flush
    /// is asked for, so that a quiet ring does not hold it up); with none, at once, since no
    /// sample would be counted anyway. The cost is one `kill(pid, 0)` per known process and a
    /// pass over the sessions' sets of binaries, not over their samples.
    fn sweep_modules(&mut self, now_ns: u64) {
        let slack = self.config.stop_slack.as_nanos() as u64;
        let sampling = !self.by_period.is_empty();
        let settled_ns = if sampling {
            self.watermark_ns.saturating_sub(slack)
        } else {
            now_ns
        };
        let mut keep: std::collections::HashSet<ModuleId, foldhash::fast::RandomState> =
            Default::default();
        for session in self.sessions.values() {
            keep.extend(session.stacks.modules());
        }
        self.codemaps.waiting_modules(&mut keep);
        let unsettled =
            self.processes
                .modules_in_use(now_ns, settled_ns, sys::process_exists, &mut keep);
        // The code maps of processes gone go by the same rule (their codes with the next sweep
        // of the store).
        let maps_unsettled = self.codemaps.forget_gone(now_ns, settled_ns);
        // A VM's statistics go with its code map: sessions keep their own windows.
        let codemaps = &self.codemaps;
        self.vms.retain(|pid| codemaps.knows(pid));
        if (unsettled || maps_unsettled) && sampling {
            self.reader.flush_at(now_ns + slack);
        }
        let closed = self.modules.retain(|module| keep.contains(&module));
        if closed > 0 {
            tracing::debug!(closed, held = self.modules.len(), "binaries closed");
        }
    }

    /// Hands the locations in binaries that running sessions met since the last time to the
    /// symbolisation warmer ([`Warmer`]), a batch at a time, for the profiles to find their
    /// names and lines ready. A batch the warmer's queue has no room for waits for the next
    /// sweep.
    fn warm_symbols(&mut self) {
        for session in self.sessions.values_mut() {
            if session.state == State::Stopped {
                continue;
            }
            let locations = &session.stacks.locations;
            while session.warmed < locations.len() {
                let end = (session.warmed + MAX_BATCH).min(locations.len());
                let batch: Vec<Location> = locations[session.warmed..end]
                    .iter()
                    .filter(|l| matches!(l, Location::File { .. }))
                    .copied()
                    .collect();
                if !batch.is_empty() && !self.warmer.offer(batch) {
                    return;
                }
                session.warmed = end;
            }
        }
    }

    /// With no session running or stopping, nothing asks for symbols or source lines but a
    /// report of a kept session, and no stack is unwound: once no session sampled and no
    /// profile was built for [`LINES_IDLE`], every DWARF table, symbol table and unwind table
    /// goes (the binaries stay
    /// open, to be parsed again when asked), and the allocator gives its free memory back to the
    /// kernel, once each time the daemon falls idle (a daemon that had run ten sessions held
    /// 373 MiB, idle).
    fn give_memory_back(&mut self, sampling: bool) {
        let now = Instant::now();
        if sampling {
            self.idle_since = None;
            self.memory_given_back = false;
            return;
        }
        // Sessions back to back keep what the last one parsed, and so does a report being
        // built (a final profile, or a kept session's).
        let idle_since = *self.idle_since.get_or_insert(now);
        if now.duration_since(idle_since) < LINES_IDLE || self.modules.in_use_within(LINES_IDLE) {
            return;
        }
        let lines = self.modules.lines().release();
        if lines > 0 || !self.memory_given_back {
            self.memory_given_back = true;
            self.unwinder.retain(|_| false);
            let tables = self.modules.release_parsed();
            sys::return_free_memory();
            tracing::debug!(
                lines,
                tables,
                "idle: line, symbol and unwind tables let go, free memory given back"
            );
        }
    }

    /// Lets the code store reclaim the codes nothing refers to any more: no process's code
    /// map (live, or changes still to apply), no waiting sample, and no session that can still
    /// be reported. A process's codes thus go when it is forgotten and the last session that
    /// counted its samples is; the cost is a pass over the maps' entries and the sessions'
    /// distinct locations. That pass is skipped while no code was interned, no process's maps
    /// forgotten and no session evicted since the last one (a process with a million-line perf
    /// map would otherwise cost a tenth of a core), except every
    /// [`CODE_SWEEP_AT_LEAST_EVERY_NS`].
    fn sweep_codes(&mut self, now_ns: u64) {
        let store = self.codemaps.store().clone();
        if store.is_empty() {
            return;
        }
        let mark = [
            store.interned(),
            self.codemaps.forgotten(),
            self.counters.sessions_evicted,
        ];
        let last = self.code_sweep;
        // A code let go of is reclaimed by the second sweep after (the store's grace): one more
        // sweep follows a sweep for a change.
        let due = mark != last.mark
            || last.changed
            || now_ns.saturating_sub(last.at_ns) >= CODE_SWEEP_AT_LEAST_EVERY_NS;
        if !due {
            return;
        }
        self.code_sweep = CodeSweep {
            at_ns: now_ns,
            mark,
            changed: mark != last.mark,
        };
        let mut keep: std::collections::HashSet<CodeId, foldhash::fast::RandomState> =
            Default::default();
        for session in self.sessions.values() {
            keep.extend(session.stacks.codes());
        }
        self.codemaps.codes_in_use(&mut keep);
        let swept = store.sweep(|code| keep.contains(&code));
        if swept.codes > 0 {
            tracing::debug!(
                codes = swept.codes,
                bytes = swept.bytes,
                held = store.len(),
                "codes reclaimed"
            );
        }
        if swept.bytes >= RETURN_MEMORY_AFTER {
            sys::return_free_memory();
        }
    }

    /// The processes a running session samples whose samples wait for their code map files
    /// to be read up to the samples' time: the reads are asked for now, and a profile taken
    /// now waits for them (a grace at most), or it would count samples it shows nowhere. A
    /// read that came back just before the samples arrived leaves them waiting for the next.
    fn reads_holding_samples(&mut self, id: u64, now: u64) -> Vec<u32> {
        let Some(session) = self.sessions.get(&id) else {
            return Vec::new();
        };
        if session.state == State::Stopped {
            return Vec::new();
        }
        let waiting: Vec<u32> = self
            .codemaps
            .waiting()
            .into_iter()
            .filter(|&pid| session.watches(pid, now))
            .collect();
        let mut reading = Vec::new();
        for pid in waiting {
            self.advance_code_maps(pid, now);
            if self.codemaps.reading(pid) {
                reading.push(pid);
            }
        }
        reading
    }

    /// Code maps found only after a session say why its generated code is unexplained: a
    /// finished session's live targets with code no map explained are looked at again. Answers
    /// which (their reads may be under way).
    fn look_again(&mut self, id: u64, now: u64) -> Vec<u32> {
        let Some(session) = self.sessions.get(&id) else {
            return Vec::new();
        };
        if session.state != State::Stopped {
            return Vec::new();
        }
        let unexplained: Vec<u32> = session
            .stacks
            .locations
            .iter()
            .filter_map(|l| match l {
                Location::Anonymous {
                    pid,
                    why: Unexplained::NoCodeMap | Unexplained::NotLookedUp,
                    ..
                } => Some(*pid),
                _ => None,
            })
            .collect();
        let look: Vec<(u32, Option<u64>)> = session
            .targets
            .iter()
            .filter(|t| unexplained.contains(&t.pid))
            .map(|t| (t.pid, t.start_time))
            .collect();
        let mut looked = Vec::new();
        for (pid, start_time) in look {
            // The target itself, not whoever has its pid now: another process's maps never
            // name the target's code.
            if self
                .processes
                .get(pid)
                .is_some_and(|p| !p.gone && p.start_time == start_time)
            {
                self.touch_code_maps(pid);
                self.advance_code_maps(pid, now);
                looked.push(pid);
            }
        }
        looked
    }

    /// Answers the profile requests that waited for reads, once they came back or waited
    /// long enough.
    fn answer_snapshots(&mut self, now_ns: u64) {
        let waiters = std::mem::take(&mut self.snapshot_waiters);
        for waiter in waiters {
            let reading = waiter.pids.iter().any(|&pid| self.codemaps.reading(pid));
            if reading && now_ns < waiter.until_ns && !waiter.reply.is_closed() {
                self.snapshot_waiters.push(waiter);
                continue;
            }
            let result = match self.visible(waiter.caller, waiter.id) {
                Ok(_) => Ok(self.snapshot(waiter.id)),
                Err(e) => Err(e),
            };
            let _ = waiter.reply.send(result);
        }
    }

    fn snapshot(&mut self, id: u64) -> Snapshot {
        let now = sys::monotonic_ns();
        let lost = self.sampler.lost().ok();
        let session = self.sessions.get_mut(&id).expect("checked by visible()");
        if session.state == State::Running {
            let update = update_cpu(session, read_host_cpu());
            self.counters.pid_reuses += update.reused;
            if let Some(lost) = &lost {
                refresh_lost(session, lost);
            }
        }
        let session = self.sessions.get_mut(&id).expect("checked by visible()");
        if let Some(stop) = session.stop_ns {
            for target in &mut session.targets {
                let found = self.codemaps.found(target.pid);
                if !found.is_empty() && found.iter().all(|&(_, at)| at >= stop) {
                    target.code_maps_after = found
                        .iter()
                        .fold(CodeMapKinds::default(), |all, &(kind, _)| all.with(kind));
                }
            }
        }
        let session = &self.sessions[&id];
        let mut stacks = session.stacks.snapshot();
        for location in &mut stacks.locations {
            if let Location::Anonymous { pid, why, .. } = location
                && matches!(why, Unexplained::NoCodeMap | Unexplained::NotLookedUp)
                && let Some(target) = session.targets.iter().find(|t| t.pid == *pid)
                && !target.code_maps_after.is_empty()
            {
                *why = Unexplained::MapAfterSession(target.code_maps_after);
            }
        }
        let has_generated_code = session.targets.iter().any(|t| {
            self.processes
                .get(t.pid)
                .is_some_and(|p| p.has_anonymous_code && p.start_time == t.start_time)
        }) || session
            .stacks
            .locations
            .iter()
            .any(|l| matches!(l, Location::Anonymous { .. }));
        Snapshot {
            session: session.to_proto(now),
            stacks,
            truncated: session.truncated,
            commands: session.commands.clone(),
            total_samples: session.total,
            lost_per_cpu: session.lost.clone(),
            duration: session.elapsed(now),
            cpu_seconds: session.cpu_seconds(now, self.clock_ticks as f64, self.online_cpus),
            host_steal_percent: session.host_steal_percent(),
            vm_executable: session
                .targets
                .first()
                .map(|t| t.executable.clone())
                .unwrap_or_default(),
            has_generated_code,
            complete: session.state == State::Stopped
                && session.incomplete.is_none()
                && session.jit.awaiting == 0,
            incomplete_reason: session.incomplete.clone(),
            jit: session.jit,
            kept: session.kept.snapshot(),
            not_kept: session.kept.not_kept,
            kernel_events: session
                .kernel
                .as_ref()
                .map(|kernel| kernel.to_proto(|pid| session.commands.get(&pid).cloned())),
            vm_statistics: vm_statistics(session, now),
        }
    }
}

/// Counts a routed sample of `pid`, its frames placed, in each of its sessions: the whole stack
/// for those that want stacks, the leaf for the others. Kept where a session keeps samples.
/// `counted` is told where, in each session (samples in native code need not know: they
/// allocate nothing for it).
fn count_routed(
    sessions: &mut BTreeMap<u64, Session>,
    pid: u32,
    timestamp_ns: u64,
    sample: &RoutedSample,
    during: Option<During<'_>>,
    mut counted: impl FnMut(Counted),
) {
    for &(id, wanted) in &sample.sessions {
        let Some(session) = sessions.get_mut(&id) else {
            continue;
        };
        let (frames, end) = sample.stack_for(wanted);
        let locations = frames.iter().map(|f| f.location);
        let (stack, kept) = session.count(pid, locations, end, during, |stack| KeptSample {
            timestamp_ns,
            pid,
            tid: sample.tid,
            kernel: sample.kernel,
            stack,
            frames: kept_frames(frames),
        });
        counted(Counted {
            session: id,
            wanted,
            stack: stack.0,
            kept: kept.map(|k| k as u32),
        });
    }
}

fn kept_frames(frames: &[SampleFrame]) -> Box<[KeptFrame]> {
    frames
        .iter()
        .map(|f| KeptFrame {
            address: f.address,
            code_start: f.code_start,
        })
        .collect()
}

/// The sessions, as the code maps see them: where samples in generated code are counted once
/// placed, and moved when their attribution changes; and the VMs' statistics, which files
/// bring beside code maps.
struct SessionSink<'a> {
    sessions: &'a mut BTreeMap<u64, Session>,
    vms: &'a mut Vms,
}

impl Sink for SessionSink<'_> {
    fn count(
        &mut self,
        pid: u32,
        timestamp_ns: u64,
        sample: &RoutedSample,
        provisional: bool,
    ) -> Vec<Counted> {
        for (id, _) in &sample.sessions {
            if let Some(session) = self.sessions.get_mut(id) {
                session.waiting = session.waiting.saturating_sub(1);
                if provisional {
                    session.jit.provisional += 1;
                    session.jit.awaiting += 1;
                }
            }
        }
        // Where the sample was counted, for the code maps to move it if it is placed again.
        let mut counted = Vec::with_capacity(sample.sessions.len());
        let during = self.vms.during(pid, timestamp_ns);
        count_routed(self.sessions, pid, timestamp_ns, sample, during, |c| {
            counted.push(c)
        });
        counted
    }

    fn statistics(&mut self, pid: u32, stats: Vec<(u64, StatEvent)>) {
        self.vms.apply(pid, stats, self.sessions);
    }

    fn recount(
        &mut self,
        pid: u32,
        has_fp: bool,
        placed: &[(ParkedFrame, Placement)],
        counted: &mut [Counted],
        why: Recount,
    ) {
        for c in counted {
            let Some(session) = self.sessions.get_mut(&c.session) else {
                continue;
            };
            match why {
                Recount::Expired => {
                    session.jit.awaiting = session.jit.awaiting.saturating_sub(1);
                    continue;
                }
                Recount::CaughtUp => {
                    session.jit.awaiting = session.jit.awaiting.saturating_sub(1);
                    session.jit.provisional = session.jit.provisional.saturating_sub(1);
                    session.jit.caught_up += 1;
                }
                Recount::LaterSnapshot => session.jit.later_snapshot += 1,
            }
            // The stack as counted, its frames in generated code placed anew.
            let from = StackId(c.stack);
            let mut locations = session.stacks.locations_of(from);
            let mut moved: Vec<(usize, u64)> = Vec::new();
            for (frame, placement) in placed {
                if let Some(index) = c.counts(frame, has_fp)
                    && let Some(location) = locations.get_mut(index)
                {
                    let now = placement.apply(*location);
                    if now != *location {
                        *location = now;
                        moved.push((index, placement.code_start()));
                    }
                }
            }
            if moved.is_empty() {
                continue;
            }
            let kept = c.kept.map(|k| k as usize);
            let to = session.recount(pid, from, locations, kept, |sample| {
                for &(index, code_start) in &moved {
                    if let Some(kept) = sample.frames.get_mut(index) {
                        kept.code_start = code_start;
                    }
                }
            });
            c.stack = to.0;
        }
    }

    fn takes_snapshots(&self, session: u64) -> bool {
        self.sessions
            .get(&session)
            .is_some_and(|s| s.state != State::Stopped)
    }
}

/// Ends a stack at its first frame in generated code: a JIT that keeps no frame pointer
/// (HotSpot without -XX:+PreserveFramePointer) leaves nothing a walk can trust beyond, and
/// the stack says why it ends there.
fn end_at_generated_code(frames: &mut Vec<SampleFrame>, end: &mut StackEnd) {
    if let Some(first) = frames.iter().position(SampleFrame::is_generated) {
        frames.truncate(first + 1);
        *end = StackEnd::JitWithoutFramePointer;
    }
}

/// How a stopping session comes to its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finish {
    /// Every sample read, every sample in generated code attributed when its maps were known.
    Whole,
    /// Every sample read; those still waiting for code maps are attributed with what is known.
    WithoutCodeMaps,
    /// The reader did not pass the stop time in time: the last samples are missing.
    Undrained,
}

/// A kernel `comm` (NUL-padded) as text.
fn comm_name(comm: &[u8]) -> String {
    let len = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..len]).into_owned()
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

/// The stop reason to record for a client's stop request.
fn stop_reason(requested: &str) -> String {
    let requested = requested.trim();
    if requested.is_empty() {
        return "stopped by client".to_owned();
    }
    // Control characters would garble reports and logs.
    requested
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_STOP_REASON_CHARS)
        .collect()
}

/// The last sweep of the code store: when, what had been interned, forgotten and evicted by
/// then, and whether that had changed since the sweep before.
#[derive(Clone, Copy, Debug, Default)]
struct CodeSweep {
    at_ns: u64,
    mark: [u64; 3],
    changed: bool,
}

/// What a reading of the targets' CPU times found beyond the times.
#[derive(Debug, Default)]
struct CpuUpdate {
    /// Targets whose pid another process holds now.
    reused: u64,
    /// Targets that run on after their leader exited.
    leaderless: Vec<u32>,
}

/// The host's CPU times, now; zeros if /proc/stat cannot be read (then no steal is reported,
/// and a system-wide session's CPU time stays 0, which its report shows as no rate).
fn read_host_cpu() -> HostCpu {
    let times = sys::read_bounded(std::path::Path::new("/proc/stat"), sys::MAX_PROC_FILE_BYTES)
        .ok()
        .and_then(|text| stat::parse_proc_stat_cpu(&text).ok())
        .unwrap_or_default();
    HostCpu {
        times,
        at_ns: sys::monotonic_ns(),
    }
}

/// Takes the CPU times of the session's targets, and the host's (read once for all sessions);
/// marks the targets found ended as exited. A process under a target's pid with another start
/// time is not the target.
fn update_cpu(session: &mut Session, host: HostCpu) -> CpuUpdate {
    let mut update = CpuUpdate::default();
    if host.times.total_ticks() >= session.host_cpu.1.times.total_ticks() {
        session.host_cpu.1 = host;
    }
    if session.spec.system_wide {
        return update;
    }
    for target in session.targets.iter_mut().filter(|t| !t.exited) {
        match life::probe(target.pid, target.start_time) {
            Life::Alive {
                cpu_ticks, leader, ..
            } => {
                target.cpu_ticks_last = cpu_ticks;
                if !leader && target.until_ns.is_none() {
                    update.leaderless.push(target.pid);
                }
            }
            Life::Exited { cpu_ticks, .. } => {
                target.cpu_ticks_last = cpu_ticks;
                target.exited = true;
            }
            Life::Reused { .. } => {
                update.reused += 1;
                target.exited = true;
            }
            Life::Gone => target.exited = true,
        }
    }
    update
}

/// Recomputes a session's lost samples per CPU from the kernel's counters.
fn refresh_lost(session: &mut Session, lost: &LostCounts) {
    let now = lost_for(
        lost,
        session.period_ns,
        session.spec.system_wide,
        &session.spec.pids,
    );
    session.lost = now
        .iter()
        .enumerate()
        .map(|(cpu, v)| v.saturating_sub(session.lost_baseline.get(cpu).copied().unwrap_or(0)))
        .collect();
}

/// The lost-sample counters, per CPU, that concern a session: its samples the ring had no
/// room for, and those left out for root's reserve (only ever a session of another user's:
/// root's samples are never shed).
fn lost_for(lost: &LostCounts, period_ns: u64, system_wide: bool, pids: &[u32]) -> Vec<u64> {
    let mut per_cpu = lost.unkeyed.clone();
    for (key, values) in lost.keyed.iter().chain(&lost.shed) {
        if key.period_ns != period_ns || !(system_wide || pids.contains(&key.tgid)) {
            continue;
        }
        if per_cpu.len() < values.len() {
            per_cpu.resize(values.len(), 0);
        }
        for (sum, v) in per_cpu.iter_mut().zip(values) {
            *sum += v;
        }
    }
    per_cpu
}

mod counters;
use counters::Counters;

#[cfg(test)]
mod tests;
