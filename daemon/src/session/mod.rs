//! Sampling sessions: what each asked for, the samples it collected, and its life cycle.
//!
//! A session is *running* from start until it is asked to stop (by a client, because its
//! duration elapsed, or because all its targets exited). It is then *stopping* until every
//! sample stamped before the stop time has been read from the kernel (see
//! [`crate::bpf::Batch::watermark_ns`]), and *stopped* from then on: its profile is final. A
//! session counts exactly the samples of its targets at its period stamped in
//! `[start, stop)`, whatever other sessions run alongside.

pub mod call_counts;
mod jvm;
mod kept;
pub mod labels;
mod manager;
pub mod request;
mod routes;
pub mod shares;
pub mod stacks;
pub mod thread_counters;
pub mod threads;
mod vms;

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, SystemTime},
};

pub use kept::{KeptFrame, KeptSample, KeptSamples};
pub use manager::{DaemonCounters, ManagerConfig, ManagerHandle, Publication, spawn_manager};
pub use request::{CallGraph, CallGraphMode, Caller, ModeRequest, SessionRequest, SessionSpec};
pub use stacks::{
    Blocks, DuringId, LabelsId, LocationId, StackId, StackSnapshot, StackTable, StackTags,
};
use vmscope_common::ShortBlocks;
use vmscope_model::{BlockState, IntervalKind, Label, VmStatistics};
use vmscope_parse::stat::CpuTimes;

use crate::{
    bpf::SamplerError,
    stats::{
        hotspot::SessionPerfData,
        intervals::During,
        kernel::{KernelEvents, SessionCounters},
        vm::Window,
    },
    vocab::{CodeMapKinds, Location, StackEnd, Task},
};

/// The stop reason of a session whose targets all exited (clients recognise it: the server
/// checks that it is the API's `STOPPED_ALL_TARGETS_EXITED`).
pub const STOPPED_ALL_TARGETS_EXITED: &str = "all targets exited";

/// Most threads a session notes the names of: the threads of a large JVM many times over, while
/// a target that starts thread after thread costs a bounded amount. Threads beyond are counted
/// as any other, by id, without a name.
pub const MAX_THREAD_NAMES: usize = 16_384;

/// Most sends a thread can execute a nanosecond (a send takes cycles, a core runs a few a
/// nanosecond): a counter said to grow faster between two samples is not trusted.
pub const MAX_SENDS_PER_NS: u64 = 4;

/// Why a session request failed. The gRPC layer maps each to a status code.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The request is malformed (bad pid, frequency, duration...).
    #[error("{0}")]
    InvalidArgument(String),
    /// A target does not exist.
    #[error("no process with pid {0} (it may have exited)")]
    NoSuchProcess(u32),
    /// The caller may not do this.
    #[error("{0}")]
    PermissionDenied(String),
    /// No session with this id is visible to the caller.
    #[error(
        "no session {0}: it never existed, belongs to another user, or was evicted \
         (the daemon keeps the most recent stopped sessions only)"
    )]
    NoSuchSession(u64),
    /// The session is already stopped.
    #[error("session {0} is already stopped")]
    AlreadyStopped(u64),
    /// Too many sessions run at once.
    #[error("{0}")]
    ResourceExhausted(String),
    /// The kernel side refused. The message holds the sampler's: it is no `source`, which a
    /// chain printer would print a second time.
    #[error("the kernel refused: {0}")]
    Kernel(SamplerError),
    /// Something that should not happen; the message says what.
    #[error("{0}")]
    Internal(String),
    /// The daemon is shutting down.
    #[error("the daemon is shutting down")]
    ShuttingDown,
}

/// Life-cycle state of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Sampling.
    Running,
    /// Stop time fixed; waiting for samples still in flight.
    Stopping,
    /// Final.
    Stopped,
}

/// A session as clients see it, at one instant, in the daemon's terms: shown as the profile
/// model's [`vmscope_model::Session`] ([`SessionInfo::to_model`]), which the server carries as
/// the API's.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionInfo {
    /// Session id.
    pub id: u64,
    /// Life-cycle state.
    pub state: State,
    /// Its targets (none system-wide).
    pub targets: Vec<TargetInfo>,
    /// Whether it samples every process.
    pub system_wide: bool,
    /// Its frequency.
    pub frequency_hz: u32,
    /// Wall-clock time of its start.
    pub started_at: SystemTime,
    /// Time sampled so far (or in all, once stopping).
    pub elapsed: Duration,
    /// The duration it was asked to stop after.
    pub duration_limit: Option<Duration>,
    /// Why it stopped.
    pub stop_reason: Option<String>,
    /// Who started it.
    pub owner_uid: u32,
    /// Samples counted.
    pub samples: u64,
    /// How it records call stacks.
    pub call_graph: CallGraph,
    /// Samples in generated code waiting for their code map.
    pub awaiting_code_map_samples: u64,
    /// Most distinct stacks it keeps.
    pub max_stacks: u64,
    /// Samples beyond that limit.
    pub stack_limit_samples: u64,
    /// Samples counted unlabelled past the session's label sets' limit.
    pub label_limit_samples: u64,
    /// What it measures.
    pub mode: vmscope_model::ProfileMode,
    /// Its minimum block, in ns.
    pub min_block_ns: u64,
    /// The workload's parameters.
    pub params: Vec<(String, String)>,
    /// The functions whose calls it counts, as asked.
    pub counts: Vec<String>,
}

/// A target process as clients see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetInfo {
    /// Process id.
    pub pid: u32,
    /// `comm`.
    pub command: String,
    /// Main executable.
    pub executable: String,
    /// Whether it exited.
    pub exited: bool,
    /// Why sampling it ended early.
    pub note: Option<String>,
}

impl SessionInfo {
    /// The session as the model shows it: one path for a profile's header (`profile/`) and
    /// for the sessions the server lists, so that both say the same.
    pub fn to_model(&self) -> vmscope_model::Session {
        use vmscope_model::{CallGraph as Shown, SessionState};
        vmscope_model::Session {
            id: self.id,
            state: Some(match self.state {
                State::Running => SessionState::Running,
                State::Stopping => SessionState::Stopping,
                State::Stopped => SessionState::Stopped,
            }),
            targets: self.targets.iter().map(TargetInfo::to_model).collect(),
            system_wide: self.system_wide,
            frequency_hz: self.frequency_hz,
            started_at: Some(self.started_at),
            elapsed: Some(self.elapsed),
            duration_limit: self.duration_limit,
            stop_reason: self.stop_reason.clone().unwrap_or_default(),
            owner_uid: self.owner_uid,
            samples: self.samples,
            call_graph: Some(match self.call_graph.mode() {
                CallGraphMode::None => Shown::None,
                CallGraphMode::FramePointers => Shown::Fp,
                CallGraphMode::Dwarf => Shown::Dwarf,
            }),
            dwarf_stack_bytes: self.call_graph.dwarf_stack_bytes(),
            awaiting_code_map_samples: self.awaiting_code_map_samples,
            max_stacks: self.max_stacks,
            stack_limit_samples: self.stack_limit_samples,
            label_limit_samples: self.label_limit_samples,
            mode: self.mode,
            min_block_ns: self.min_block_ns,
            params: self.params.clone(),
            counts: self.counts.clone(),
        }
    }
}

impl TargetInfo {
    /// The target as the model shows it.
    pub fn to_model(&self) -> vmscope_model::TargetProcess {
        vmscope_model::TargetProcess {
            pid: self.pid,
            command: self.command.clone(),
            executable: self.executable.clone(),
            exited: self.exited,
            note: self.note.clone().unwrap_or_default(),
        }
    }
}

/// A target process as the session sees it.
#[derive(Clone, Debug)]
pub struct Target {
    /// Process id.
    pub pid: u32,
    /// Start time (clock ticks since boot): tells a recycled pid from the target.
    pub start_time: Option<u64>,
    /// `comm`.
    pub command: String,
    /// Main executable.
    pub executable: String,
    /// Whether it exited.
    pub exited: bool,
    /// When the session stopped sampling it (exit noticed, or permission lost at an exec):
    /// samples stamped later are not its, even under a recycled pid. Its kernel filter is then
    /// released.
    pub until_ns: Option<u64>,
    /// Why sampling it ended early.
    pub note: Option<String>,
    /// CPU ticks (user + system) when the session started.
    pub cpu_ticks_start: u64,
    /// CPU ticks at the last reading.
    pub cpu_ticks_last: u64,
    /// Code maps it had none of during the session but one of after (a perf map written at
    /// exit), as last seen.
    pub code_maps_after: CodeMapKinds,
}

/// Samples in generated code of a session whose attribution was not simply on time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JitAttribution {
    /// Attributed before their code map was known up to their time (a jitdump its VM buffers,
    /// a publication that fell silent), and not placed again since: they may be unnamed, or
    /// named after code that changed since.
    pub provisional: u64,
    /// Of `provisional`, those still parked: the profile changes when their code map catches
    /// up (at the latest when the process exits).
    pub awaiting: u64,
    /// Provisional ones placed again in the map of their time once it caught up.
    pub caught_up: u64,
    /// Named from a perf map read after them (nothing known at their time explained them).
    pub later_snapshot: u64,
}

/// What an off-CPU or wall session gathered of its targets' time off the CPU, beside the
/// blocks in its stacks ([`StackTable::blocks`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OffCpuTally {
    /// Blocks counted in its stacks.
    pub blocks: u64,
    /// Their time off the CPU inside the session, in nanoseconds.
    pub ns: u64,
    /// Blocks the session itself left out as shorter than its minimum: the kernel works to
    /// the least of its sessions' minimums.
    pub short: ShortBlocks,
    /// The kernel's short blocks of its targets when it started, and when last read.
    pub kernel_short: (ShortBlocks, ShortBlocks),
    /// Blocks of its targets the kernel could not deliver, when it started and when last read
    /// (the off-CPU channel's lost and shed counts).
    pub lost: (u64, u64),
    /// Threads the kernel could not follow off their CPU (its map full), host-wide, when it
    /// started and when last read.
    pub unfollowed: (u64, u64),
    /// Per thread, its time off the CPU inside each kind of its VM's intervals.
    pub during: HashMap<(Task, IntervalKind), u64, foldhash::fast::RandomState>,
    /// Threads still off their CPU at the stop, and their time inside the session (counted
    /// in the stacks under [`Location::StillOffCpu`]).
    pub still_blocked: (u32, u64),
    /// Their thread ids, with when their block began: that block, when it comes while the
    /// session stops, is counted already.
    pub still_blocked_tids: HashMap<u32, u64, foldhash::fast::RandomState>,
    /// Blocks of JVM threads counted, whose time inside the JVM's collections waits for the
    /// reads of its performance data to pass their end: thread, and the span in the session.
    pub gc_waits: Vec<(Task, u64, u64)>,
    /// Those left without their collections for want of room ([`MAX_GC_WAITS`]).
    pub gc_waits_dropped: u64,
}

/// Most blocks a session keeps waiting for their JVM's collections to be read: reads come every
/// 10 ms and are taken every tick, so at 100,000 blocks a second some 10,000 wait.
pub const MAX_GC_WAITS: usize = 65_536;

impl OffCpuTally {
    /// The short blocks of its own and the kernel's, since it started.
    pub fn short_blocks(&self) -> ShortBlocks {
        let (start, last) = self.kernel_short;
        ShortBlocks {
            count: self.short.count + last.count.saturating_sub(start.count),
            ns: self.short.ns + last.ns.saturating_sub(start.ns),
        }
    }
}

/// One session and its aggregated samples.
#[derive(Debug)]
pub struct Session {
    /// Id, unique for the daemon's life.
    pub id: u64,
    /// Uid of the client that started it.
    pub owner_uid: u32,
    /// What it samples.
    pub spec: SessionSpec,
    /// Sampling period in ns.
    pub period_ns: u64,
    /// Wall-clock start, for reports.
    pub started_at: SystemTime,
    /// CLOCK_MONOTONIC start: samples stamped earlier are not this session's.
    pub start_ns: u64,
    /// CLOCK_MONOTONIC stop, once asked to stop.
    pub stop_ns: Option<u64>,
    /// Life-cycle state.
    pub state: State,
    /// Why it stopped.
    pub stop_reason: Option<String>,
    /// Targets (empty when system-wide).
    pub targets: Vec<Target>,
    /// Samples per process and call stack.
    pub stacks: StackTable,
    /// The name (comm) of every process sampled, from its first sample or its latest exec:
    /// rows say which processes their samples came from, even once they exited.
    pub commands: HashMap<u32, String, foldhash::fast::RandomState>,
    /// The executable of every process sampled, from its first sample, where known:
    /// continuous windows name processes that exited before their window was built.
    pub executables: HashMap<u32, String, foldhash::fast::RandomState>,
    /// The name of every thread sampled, from its first sample, up to [`MAX_THREAD_NAMES`]
    /// threads: empty where it could not be read.
    pub thread_names: HashMap<Task, String, foldhash::fast::RandomState>,
    /// Each thread's send counter at its last sample, and when, for threads whose VM publishes
    /// one (up to [`MAX_THREAD_NAMES`] threads): see [`Session::sends_since`].
    sends_last: HashMap<Task, (u64, u64), foldhash::fast::RandomState>,
    /// All samples.
    pub total: u64,
    /// The host's CPU times (`/proc/stat`) at start and at the last reading: work time is a
    /// system-wide session's CPU time, and steal says how far to trust cpu-clock's rate.
    pub host_cpu: (HostCpu, HostCpu),
    /// Lost-sample counters per CPU when the session started.
    pub lost_baseline: Vec<u64>,
    /// Lost samples per CPU since start; frozen when stopped.
    pub lost: Vec<u64>,
    /// Samples counted in `total` but waiting in their process's timeline: for its code maps
    /// (samples in generated code), or for its VM's publication (to be tagged with the
    /// intervals under way).
    pub waiting: u64,
    /// How its samples in generated code were attributed, where not simply on time.
    pub jit: JitAttribution,
    /// Its locations (`stacks.locations`) handed to the symbolisation warmer so far.
    pub warmed: usize,
    /// Why the profile is not whole, when its stop could not wait for every sample.
    pub incomplete: Option<String>,
    /// Whether its final profile was taken (a snapshot after it stopped): until then it is not
    /// evicted for being one too many (see `ManagerConfig::unfetched_kept_for`).
    pub fetched: bool,
    /// Samples kept one by one (StartSessionRequest.keep_samples).
    pub kept: KeptSamples,
    /// Samples whose stack was cut at the depth limit.
    pub truncated: u64,
    /// What the kernel counts for its targets (none system-wide).
    pub kernel: Option<SessionCounters>,
    /// What the VMs it watches published of their statistics, over its window, by pid.
    pub vm: BTreeMap<u32, Window>,
    /// The performance data files of its JVM targets (none system-wide).
    pub hotspot: Option<SessionPerfData>,
    /// Off-CPU and wall sessions: what it gathered of time off the CPU.
    pub off_cpu: Option<OffCpuTally>,
    /// The native functions whose calls it counts (`record --count`).
    pub call_counts: call_counts::CallCounts,
    /// Its targets found to be HotSpot JVMs (at its start, or once they mapped libjvm.so):
    /// whether a frame-pointer session copies their stacks ([`SessionSpec::java_copies`]) is
    /// decided once for each.
    pub jvms_decided: Vec<u32>,
}

/// A reading of the host's CPU times, and when it was taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCpu {
    /// The times.
    pub times: CpuTimes,
    /// CLOCK_MONOTONIC time of the reading.
    pub at_ns: u64,
}

impl Session {
    /// Whether the session wants a sample of `tgid` stamped `timestamp_ns`.
    pub fn wants(&self, tgid: u32, timestamp_ns: u64) -> bool {
        timestamp_ns >= self.start_ns
            && self.end_ns().is_none_or(|end| timestamp_ns < end)
            && (self.spec.system_wide
                || self
                    .targets
                    .iter()
                    .any(|t| t.pid == tgid && t.until_ns.is_none_or(|until| timestamp_ns < until)))
    }

    /// Where its samples end: its stop, or else the end of its duration, which a sample may
    /// be routed past before the stop is noticed (a continuous window's successor takes it).
    pub fn end_ns(&self) -> Option<u64> {
        self.stop_ns.or_else(|| {
            self.spec
                .duration
                .map(|d| self.start_ns.saturating_add(d.as_nanos() as u64))
        })
    }

    /// How much of a block of `tgid` off its CPU over `[begin, end)` is the session's: the part
    /// inside its window and before its target ended; 0 when none (or it records no blocks).
    pub fn block_share(&self, tgid: u32, begin: u64, end: u64) -> (u64, u64) {
        if self.off_cpu.is_none() {
            return (0, 0);
        }
        let mut until = self.end_ns().unwrap_or(u64::MAX);
        if !self.spec.system_wide {
            match self.targets.iter().find(|t| t.pid == tgid) {
                Some(target) => until = until.min(target.until_ns.unwrap_or(u64::MAX)),
                None => return (0, 0),
            }
        }
        let (from, to) = (begin.max(self.start_ns), end.min(until));
        if to > from { (from, to) } else { (0, 0) }
    }

    /// Counts one block of `task` in the stack `locations` (leaf first), off the CPU over
    /// `[from, to)` (its share of the block: [`Session::block_share`]) for `state`, taken
    /// during those intervals of its VM, with its time inside each kind (`overlaps`).
    #[allow(clippy::too_many_arguments)]
    pub fn count_block(
        &mut self,
        task: Task,
        locations: impl IntoIterator<Item = Location>,
        end: Option<StackEnd>,
        during: Option<During<'_>>,
        state: BlockState,
        ns: u64,
        overlaps: Vec<(IntervalKind, u64)>,
    ) -> StackId {
        let during = self.stacks.during(during);
        let stack = self.stacks.intern(locations, end, during);
        self.stacks.add_block(task, stack, state, ns);
        if let Some(tally) = &mut self.off_cpu {
            tally.blocks += 1;
            tally.ns = tally.ns.saturating_add(ns);
        }
        self.add_during(task, overlaps);
        stack
    }

    /// Keeps a block of `task` over `[from, to)` until its JVM's collections are read past
    /// `to`, to add its time inside them to [`OffCpuTally::during`].
    pub fn wait_for_gcs(&mut self, task: Task, from: u64, to: u64) {
        if let Some(tally) = &mut self.off_cpu {
            if tally.gc_waits.len() < MAX_GC_WAITS {
                tally.gc_waits.push((task, from, to));
            } else {
                tally.gc_waits_dropped += 1;
            }
        }
    }

    /// Adds `overlaps`, a thread's time off the CPU inside each kind of its VM's intervals,
    /// to [`OffCpuTally::during`].
    pub fn add_during(&mut self, task: Task, overlaps: Vec<(IntervalKind, u64)>) {
        let Some(tally) = &mut self.off_cpu else {
            return;
        };
        for (kind, overlap) in overlaps {
            // Bounded as thread names are: beyond, a thread's time in intervals is lost.
            if tally.during.len() < MAX_THREAD_NAMES
                || tally.during.contains_key(&(task, kind.clone()))
            {
                *tally.during.entry((task, kind)).or_insert(0) += overlap;
            }
        }
    }

    /// Moves one block of `task` counted in stack `from` to the stack `locations` (its
    /// attribution changed). Returns the new stack.
    pub fn recount_block(
        &mut self,
        task: Task,
        from: StackId,
        locations: impl IntoIterator<Item = Location>,
        state: BlockState,
        ns: u64,
    ) -> StackId {
        let to = self.stacks.restack(from, locations);
        if to != from {
            self.stacks.remove_block(task, from, state, ns);
            self.stacks.add_block(task, to, state, ns);
        }
        to
    }

    /// Whether the session watches process `pid` at `timestamp_ns`, before its start
    /// included: a target (until it exited), or anyone for a system-wide session.
    pub fn watches(&self, pid: u32, timestamp_ns: u64) -> bool {
        self.spec.system_wide
            || self
                .targets
                .iter()
                .any(|t| t.pid == pid && t.until_ns.is_none_or(|until| timestamp_ns < until))
    }

    /// Counts one sample of `task` whose stack is `locations` (leaf first), taken as `tags`
    /// say (during those intervals of its VM, its thread's labels), with the `sends` its
    /// thread executed since its previous sample, and keeps it while there is room: `kept` is
    /// called only then, for its addresses.
    pub fn count<'a>(
        &mut self,
        task: impl Into<Task>,
        locations: impl IntoIterator<Item = Location>,
        end: Option<StackEnd>,
        tags: impl Into<SampleTags<'a>>,
        sends: u64,
        kept: impl FnOnce(StackId) -> KeptSample,
    ) -> (StackId, Option<usize>) {
        let task = task.into();
        let tags = tags.into();
        let tags = StackTags {
            during: self.stacks.during(tags.during),
            labels: self.stacks.labels(tags.labels),
        };
        let stack = self.stacks.count(task, locations, end, tags);
        self.stacks.add_sends(task, stack, sends);
        if end == Some(StackEnd::FrameLimit) {
            self.truncated += 1;
        }
        (stack, self.kept.keep(|| kept(stack)))
    }

    /// [`Session::count`] of a stack the manager placed before (`placement`, see
    /// `manager/placements.rs`): its leaf alone when `leaf_only`. Only for a session that keeps
    /// no samples one by one ([`Session::keeps_samples`]), outside any interval.
    pub fn count_placed(
        &mut self,
        task: Task,
        placement: u64,
        leaf_only: bool,
        locations: &[Location],
        end: StackEnd,
        sends: u64,
    ) {
        let (locations, end) = if leaf_only {
            (&locations[..1], None)
        } else {
            (locations, Some(end))
        };
        let stack = self
            .stacks
            .intern_placed(placement, leaf_only, locations, end);
        self.stacks.add(task, stack);
        self.stacks.add_sends(task, stack, sends);
        if end == Some(StackEnd::FrameLimit) {
            self.truncated += 1;
        }
    }

    /// The sends thread `task` executed since its previous sample in the session, given its
    /// send counter at `timestamp_ns` (`count`): none for its first sample here, which has
    /// nothing to count from, nor when the counter went back (another thread under the id, a
    /// VM that started again). `None` for more than [`MAX_SENDS_PER_NS`] a nanosecond since
    /// the previous sample, which no thread executes: the counter is not one (memory freed
    /// and reused, a broken VM), and the sample counts none.
    pub fn sends_since(&mut self, task: Task, count: u64, timestamp_ns: u64) -> Option<u64> {
        if self.sends_last.len() >= MAX_THREAD_NAMES && !self.sends_last.contains_key(&task) {
            return Some(0);
        }
        match self.sends_last.insert(task, (count, timestamp_ns)) {
            Some((last, at)) if count >= last => {
                let elapsed = timestamp_ns.saturating_sub(at);
                let sends = count - last;
                (sends <= elapsed.saturating_mul(MAX_SENDS_PER_NS)).then_some(sends)
            }
            _ => Some(0),
        }
    }

    /// Whether it keeps samples one by one (`keep_samples`).
    pub fn keeps_samples(&self) -> bool {
        self.kept.limit() > 0
    }

    /// Moves one sample of `task` counted in stack `from` to the stack `locations` (its
    /// attribution changed; how its walk ended and when it was taken did not), with its
    /// `sends`, and its kept copy at `kept` with it (`update` fixes its frames). Returns the
    /// new stack.
    pub fn recount(
        &mut self,
        task: impl Into<Task>,
        from: StackId,
        locations: impl IntoIterator<Item = Location>,
        kept: Option<usize>,
        sends: u64,
        update: impl FnOnce(&mut KeptSample),
    ) -> StackId {
        let to = self.stacks.restack(from, locations);
        if to != from {
            let task = task.into();
            self.stacks.uncount(task, from);
            self.stacks.add(task, to);
            self.stacks.move_sends(task, from, to, sends);
            if let Some(index) = kept {
                self.kept.update(index, |sample| {
                    sample.stack = to;
                    update(sample);
                });
            }
        }
        to
    }

    /// Pids whose kernel filters the session still holds.
    pub fn held_pids(&self) -> Vec<u32> {
        self.targets
            .iter()
            .filter(|t| t.until_ns.is_none())
            .map(|t| t.pid)
            .collect()
    }

    /// The target under `pid` whose kernel filter the session still holds.
    pub fn held_target_mut(&mut self, pid: u32) -> Option<&mut Target> {
        self.targets
            .iter_mut()
            .find(|t| t.pid == pid && t.until_ns.is_none())
    }

    /// Time sampled so far (or in all, once stopping).
    pub fn elapsed(&self, now_ns: u64) -> Duration {
        Duration::from_nanos(self.stop_ns.unwrap_or(now_ns).saturating_sub(self.start_ns))
    }

    /// CPU time the targets used while sampled, in seconds, with `ticks_per_second` clock
    /// ticks a second.
    ///
    /// System-wide, the work the host's `cpus` did (neither idle nor stolen) between the two
    /// readings that bracket the session, scaled to the session's own length: the readings are
    /// taken when the manager gets to them, which on a busy host can be well after the stop,
    /// and the work of that extra time is not the session's. `/proc/stat` counts in whole
    /// ticks per field, so a saturated host can read a little more work than its CPUs could
    /// do: the result is capped at `cpus` times the session's length.
    pub fn cpu_seconds(&self, now_ns: u64, ticks_per_second: f64, cpus: u32) -> f64 {
        if ticks_per_second <= 0.0 {
            return 0.0;
        }
        if !self.spec.system_wide {
            return self
                .targets
                .iter()
                .map(
                    |t| match self.kernel.as_ref().and_then(|k| k.cpu_ns(t.pid)) {
                        Some(ns) => ns as f64 / 1e9,
                        None => {
                            t.cpu_ticks_last.saturating_sub(t.cpu_ticks_start) as f64
                                / ticks_per_second
                        }
                    },
                )
                .sum();
        }
        let (first, last) = (&self.host_cpu.0, &self.host_cpu.1);
        let work = last
            .times
            .work_ticks()
            .saturating_sub(first.times.work_ticks());
        let window_ns = last.at_ns.saturating_sub(first.at_ns);
        if window_ns == 0 {
            return 0.0;
        }
        let elapsed = self.elapsed(now_ns).as_secs_f64();
        let scaled = work as f64 / ticks_per_second * (elapsed * 1e9 / window_ns as f64).min(1.0);
        scaled.min(f64::from(cpus) * elapsed)
    }

    /// Share of the host's CPU time a hypervisor took (steal) while the session ran, in percent.
    pub fn host_steal_percent(&self) -> f64 {
        self.host_cpu
            .1
            .times
            .steal_percent_since(&self.host_cpu.0.times)
    }

    /// The session as clients see it at `now_ns`.
    pub fn info(&self, now_ns: u64) -> SessionInfo {
        SessionInfo {
            id: self.id,
            state: self.state,
            targets: self
                .targets
                .iter()
                .map(|t| TargetInfo {
                    pid: t.pid,
                    command: t.command.clone(),
                    executable: t.executable.clone(),
                    exited: t.exited,
                    note: t.note.clone(),
                })
                .collect(),
            system_wide: self.spec.system_wide,
            frequency_hz: self.spec.frequency_hz,
            started_at: self.started_at,
            elapsed: self.elapsed(now_ns),
            duration_limit: self.spec.duration,
            stop_reason: self.stop_reason.clone(),
            owner_uid: self.owner_uid,
            samples: self.total,
            call_graph: self.spec.call_graph,
            awaiting_code_map_samples: self.jit.awaiting,
            max_stacks: self.stacks.max_stacks() as u64,
            stack_limit_samples: self.stacks.beyond_limit(),
            label_limit_samples: self.stacks.labels_beyond_limit(),
            mode: self.spec.mode,
            min_block_ns: self.spec.min_block_ns,
            params: self.spec.params.clone(),
            counts: self.spec.counts.iter().map(|c| c.asked.clone()).collect(),
        }
    }
}

/// A copy of a session's data, taken by the manager and turned into a profile elsewhere, so
/// that symbolisation never holds up sampling.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The session as clients see it.
    pub session: SessionInfo,
    /// Samples per process and call stack.
    pub stacks: StackSnapshot,
    /// Samples whose stack was cut at the depth limit.
    pub truncated: u64,
    /// The name of every process sampled.
    pub commands: HashMap<u32, String, foldhash::fast::RandomState>,
    /// The executable of every process sampled, where known.
    pub executables: HashMap<u32, String, foldhash::fast::RandomState>,
    /// The name of every thread sampled, where noted.
    pub thread_names: HashMap<Task, String, foldhash::fast::RandomState>,
    /// CPU time one sample stands for: the sampling interval, in nanoseconds.
    pub period_ns: u64,
    /// All samples.
    pub total_samples: u64,
    /// Lost samples per CPU.
    pub lost_per_cpu: Vec<u64>,
    /// Wall-clock time sampled.
    pub duration: Duration,
    /// CPU time used by the targets while sampled.
    pub cpu_seconds: f64,
    /// Share of the host's CPU time stolen by a hypervisor meanwhile, in percent.
    pub host_steal_percent: f64,
    /// Main executable of the first target.
    pub vm_executable: String,
    /// Whether a target has anonymous executable mappings.
    pub has_generated_code: bool,
    /// Whether the session is stopped and its profile whole: every sample taken before the
    /// stop was read and attributed.
    pub complete: bool,
    /// Why a stopped session's profile is not whole.
    pub incomplete_reason: Option<String>,
    /// How samples in generated code were attributed, where not simply on time.
    pub jit: JitAttribution,
    /// Kept samples, in no particular order (the profile sorts them).
    pub kept: Vec<std::sync::Arc<[KeptSample]>>,
    /// Samples beyond the keep limit.
    pub not_kept: u64,
    /// What the kernel counted for the targets.
    pub kernel_events: Option<KernelEvents>,
    /// What the VMs published of their statistics over the window.
    pub vm_statistics: Vec<VmStatistics>,
    /// Off-CPU and wall sessions: what they gathered of time off the CPU.
    pub off_cpu: Option<OffCpuTally>,
    /// The threads it was cut to, for a person ([`threads::ThreadFilter::describe`]); `None`
    /// for every thread.
    pub thread_filter: Option<String>,
    /// The labels it was cut to, for a person ([`vmscope_model::LabelFilter::describe`]);
    /// `None` for every sample.
    pub label_filter: Option<String>,
    /// The native functions' calls counted (`record --count`).
    pub call_counts: Vec<vmscope_model::CallCount>,
}

/// What a sample is told apart by as it is counted, beside its stack: its VM's intervals under
/// way, and the labels its thread had set.
#[derive(Clone, Copy, Debug, Default)]
pub struct SampleTags<'a> {
    /// The intervals under way; `None` outside any.
    pub during: Option<During<'a>>,
    /// Its thread's labels; `None` when it had none.
    pub labels: Option<&'a Arc<[Label]>>,
}

impl<'a> From<Option<During<'a>>> for SampleTags<'a> {
    fn from(during: Option<During<'a>>) -> SampleTags<'a> {
        SampleTags {
            during,
            labels: None,
        }
    }
}

impl Snapshot {
    /// Each process's share of a system-wide snapshot, by pid: its samples, stacks, threads and
    /// statistics alone, all split in one pass. What is not counted per process has no share: lost samples (the
    /// kernel counts them per CPU), how generated code was attributed, kept samples. Its CPU
    /// time is what its samples stand for.
    pub fn by_process(&self) -> Vec<(u32, Snapshot)> {
        type Names = HashMap<Task, String, foldhash::fast::RandomState>;
        let mut thread_names: HashMap<u32, Names> = HashMap::new();
        for (&task, name) in &self.thread_names {
            thread_names
                .entry(task.pid)
                .or_default()
                .insert(task, name.clone());
        }
        self.stacks
            .by_process()
            .into_iter()
            .map(|(pid, stacks)| {
                let names = thread_names.remove(&pid).unwrap_or_default();
                (pid, self.share(pid, stacks, names))
            })
            .collect()
    }

    /// Process `pid`'s share, its stacks `stacks` and the names of its threads `thread_names`
    /// (see [`Snapshot::by_process`]).
    fn share(
        &self,
        pid: u32,
        stacks: StackSnapshot,
        thread_names: HashMap<Task, String, foldhash::fast::RandomState>,
    ) -> Snapshot {
        let total_samples: u64 = stacks.counts.iter().map(|&(.., n)| n).sum();
        let truncated = stacks
            .counts
            .iter()
            .filter(|&&(_, stack, _)| stacks.stacks[stack.0 as usize].truncated())
            .map(|&(.., n)| n)
            .sum();
        let has_generated_code = stacks
            .locations
            .iter()
            .any(|l| matches!(l, Location::Anonymous { .. }));
        Snapshot {
            session: self.session.clone(),
            truncated,
            commands: self
                .commands
                .get_key_value(&pid)
                .map(|(&p, c)| (p, c.clone()))
                .into_iter()
                .collect(),
            executables: self
                .executables
                .get_key_value(&pid)
                .map(|(&p, e)| (p, e.clone()))
                .into_iter()
                .collect(),
            thread_names,
            period_ns: self.period_ns,
            total_samples,
            lost_per_cpu: Vec::new(),
            duration: self.duration,
            cpu_seconds: total_samples as f64 * self.period_ns as f64 / 1e9,
            host_steal_percent: self.host_steal_percent,
            vm_executable: String::new(),
            has_generated_code,
            complete: self.complete,
            incomplete_reason: self.incomplete_reason.clone(),
            jit: JitAttribution::default(),
            kept: Vec::new(),
            not_kept: 0,
            kernel_events: None,
            vm_statistics: self
                .vm_statistics
                .iter()
                .filter(|s| s.pid == pid)
                .cloned()
                .collect(),
            // Continuous windows sample the CPU alone.
            off_cpu: None,
            thread_filter: None,
            label_filter: None,
            call_counts: Vec::new(),
            stacks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn system_wide(start_ns: u64, stop_ns: u64, first: HostCpu, last: HostCpu) -> Session {
        Session {
            id: 1,
            owner_uid: 0,
            spec: SessionSpec {
                pids: Vec::new(),
                system_wide: true,
                frequency_hz: 1400,
                duration: None,
                keep_samples: 0,
                call_graph: Default::default(),
                jvm_attach: true,
                root: false,
                mode: vmscope_model::ProfileMode::Cpu,
                min_block_ns: 0,
                params: Vec::new(),
                counts: Vec::new(),
                java_copies: Vec::new(),
            },
            period_ns: 714_285,
            started_at: SystemTime::UNIX_EPOCH,
            start_ns,
            stop_ns: Some(stop_ns),
            state: State::Stopped,
            stop_reason: None,
            targets: Vec::new(),
            stacks: StackTable::default(),
            commands: HashMap::default(),
            executables: HashMap::default(),
            thread_names: HashMap::default(),
            sends_last: HashMap::default(),
            total: 0,
            host_cpu: (first, last),
            lost_baseline: Vec::new(),
            lost: Vec::new(),
            waiting: 0,
            jit: JitAttribution::default(),
            warmed: 0,
            incomplete: None,
            fetched: false,
            kept: KeptSamples::new(0),
            truncated: 0,
            kernel: None,
            hotspot: None,
            vm: Default::default(),
            off_cpu: None,
            call_counts: Default::default(),
            jvms_decided: Vec::new(),
        }
    }

    #[test]
    fn a_session_of_a_duration_takes_no_sample_past_it_before_its_stop_is_noticed() {
        let mut s = system_wide(1_000, 0, HostCpu::default(), HostCpu::default());
        s.stop_ns = None;
        s.state = State::Running;
        s.spec.duration = Some(Duration::from_nanos(500));
        assert!(!s.wants(7, 999));
        assert!(s.wants(7, 1_000));
        assert!(s.wants(7, 1_499));
        assert!(!s.wants(7, 1_500), "past its duration");
        s.spec.duration = None;
        assert!(s.wants(7, u64::MAX), "no duration, no stop: no end");
        s.stop_ns = Some(1_200);
        assert!(!s.wants(7, 1_200), "its stop");
    }

    fn reading(at_s: u64, work_ticks: u64, steal_ticks: u64) -> HostCpu {
        HostCpu {
            times: CpuTimes {
                busy_ticks: work_ticks + steal_ticks,
                idle_ticks: 0,
                steal_ticks,
            },
            at_ns: at_s * 1_000_000_000,
        }
    }

    #[test]
    fn system_wide_cpu_time_is_the_sessions_and_never_more_than_the_cpus() {
        // 2 CPUs busy for a 5 s session, read 5 s apart: 10 CPU-seconds (100 ticks a second).
        let s = system_wide(0, 5_000_000_000, reading(0, 0, 0), reading(5, 1000, 0));
        assert_eq!(s.cpu_seconds(0, 100.0, 2), 10.0);
        // The last reading came 5 s late (a busy manager): the work of the extra time is not
        // the session's.
        let late = system_wide(0, 5_000_000_000, reading(0, 0, 0), reading(10, 2000, 0));
        assert_eq!(late.cpu_seconds(0, 100.0, 2), 10.0);
        // Stolen time is no work: nothing ran, and cpu-clock took no sample.
        let stolen = system_wide(0, 5_000_000_000, reading(0, 0, 0), reading(5, 800, 200));
        assert_eq!(stolen.cpu_seconds(0, 100.0, 2), 8.0);
        // Whole-tick rounding of /proc/stat cannot make more CPUs than there are.
        let rounded = system_wide(0, 5_000_000_000, reading(0, 0, 0), reading(5, 1030, 0));
        assert_eq!(rounded.cpu_seconds(0, 100.0, 2), 10.0);
    }

    /// A sample placed again moves from its old stack to its new one, its kept copy with it;
    /// a snapshot taken before does not change.
    #[test]
    fn a_recounted_sample_moves_to_its_new_stack() {
        let mut s = system_wide(0, 5, reading(0, 0, 0), reading(5, 0, 0));
        s.kept = KeptSamples::new(10);
        let anon = Location::Anonymous {
            pid: 7,
            start: 0x1000,
            end: 0x2000,
            why: crate::vocab::Unexplained::NoCodeMap,
        };
        let named = Location::Jit {
            code: crate::vocab::CodeId(3),
            offset: 0x10,
            later_snapshot: false,
        };
        let kept = |stack| KeptSample {
            timestamp_ns: 1,
            pid: 7,
            tid: 7,
            kernel: false,
            stack,
            frames: Box::new([]),
        };
        // Each with the sends its thread counted since its previous sample.
        let (first, index) = s.count(7, [anon], None, None, 30, kept);
        let (other, _) = s.count(7, [anon], None, None, 12, kept);
        assert_eq!(first, other);
        // Taken during a scavenge: a stack of its own, which it keeps when placed again.
        let mut log = crate::stats::intervals::IntervalLog::default();
        log.begin(0, &vmscope_model::IntervalKind::Scavenge, 1);
        let (in_gc, _) = s.count(7, [anon], None, Some(log.during(1)), 0, kept);
        assert_ne!(in_gc, first);
        let in_gc_named = s.recount(7, in_gc, [named], None, 0, |_| {});
        let snapshot = s.stacks.snapshot();
        assert_eq!(
            snapshot.during_of(in_gc_named),
            [vmscope_model::IntervalKind::Scavenge]
        );
        let before = s.kept.snapshot();
        let frames = |sample: &mut KeptSample| {
            sample.frames = Box::new([KeptFrame {
                address: 0x1010,
                code_start: 0x1000,
            }])
        };
        let to = s.recount(7, first, [named], index, 30, frames);
        assert_ne!(to, in_gc_named);
        assert!(s.stacks.snapshot().during_of(to).is_empty());
        assert_ne!(to, first);
        assert_eq!(s.stacks.counts.get(&(Task::from(7), first)), Some(&1));
        assert_eq!(s.stacks.counts.get(&(Task::from(7), to)), Some(&1));
        // The sends moved with the sample: 30 to the new stack, the other sample's 12 stay.
        assert_eq!(s.stacks.sends.get(&(Task::from(7), to)), Some(&30));
        assert_eq!(s.stacks.sends.get(&(Task::from(7), first)), Some(&12));
        let after = s.kept.snapshot();
        assert_eq!(after[0][0].stack, to);
        assert_eq!(after[0][0].frames[0].code_start, 0x1000);
        assert_eq!(before[0][0].stack, first, "a snapshot never changes");
        // Moved to where it already is: nothing changes.
        assert_eq!(s.recount(7, to, [named], index, 30, frames), to);
        assert_eq!(s.stacks.counts.get(&(Task::from(7), to)), Some(&1));
        assert_eq!(s.stacks.sends.get(&(Task::from(7), to)), Some(&30));
    }

    /// A thread's sends are the differences of its counter between its samples in the
    /// session: nothing for its first, nor when the counter went back.
    #[test]
    fn sends_are_counted_from_the_thread_s_previous_sample() {
        let mut s = system_wide(0, 5, reading(0, 0, 0), reading(5, 0, 0));
        let (a, b) = (Task::new(7, 7), Task::new(7, 8));
        assert_eq!(s.sends_since(a, 1_000, 0), Some(0), "nothing to count from");
        assert_eq!(s.sends_since(a, 1_250, 1_000), Some(250));
        assert_eq!(s.sends_since(b, 10, 1_000), Some(0), "each thread apart");
        assert_eq!(s.sends_since(a, 1_250, 2_000), Some(0));
        assert_eq!(
            s.sends_since(a, 40, 3_000),
            Some(0),
            "went back: another thread under the id"
        );
        assert_eq!(s.sends_since(a, 45, 4_000), Some(5));
        assert_eq!(s.sends_since(b, 17, 5_000), Some(7));
        // A counter in memory freed and reused: more than a thread can send in the time.
        let garbage = 45 + 4 * 1_000 + 1;
        assert_eq!(s.sends_since(a, garbage, 5_000), None);
        assert_eq!(s.sends_since(a, garbage + 4_000, 6_000), Some(4_000));
    }
}
