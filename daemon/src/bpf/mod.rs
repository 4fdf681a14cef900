//! The kernel side seen from user space: loading the eBPF object, opening perf events, and the
//! maps that select what is sampled.
//!
//! [`Sampler`] is the only type that talks to BPF. The session manager drives it through the
//! [`SamplerControl`] trait, so that session logic is unit-tested with a fake and only a few
//! end-to-end tests need root.
//!
//! Requires Linux 5.8 (BPF ring buffer) and root (CAP_BPF + CAP_PERFMON at least).

pub mod btf;
mod call_counts;
pub mod fake;
mod reader;
mod user_copy;

use std::collections::{HashMap, HashSet};

use aya::{
    Ebpf, EbpfError,
    maps::{Array, HashMap as BpfHashMap, MapData, MapError, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{
        BtfTracePoint, PerfEvent, ProgramError, RawTracePoint,
        perf_event::{
            PerfEventConfig, PerfEventLinkId, PerfEventScope, SamplePolicy, SoftwareEvent,
        },
        tp_btf::BtfTracePointLinkId,
    },
};
pub use reader::{Batch, ReaderControl, spawn_reader};
pub use user_copy::{UserCopies, UserCopy};
use vmscope_common::{
    Blocked, BlockedCopy, CONFIG_CRED_CAPS, CONFIG_CRED_IDS, CONFIG_MAX_STACK, CONFIG_SYSTEM_WIDE,
    CONFIG_TASK_CRED, CONFIG_TASK_PID, CONFIG_TASK_TGID, Creds, GUARD_CREDS, GUARD_HELD,
    GUARD_OPEN, MAX_STACK_FRAMES, OFF_CPU_COUNTS_LEN, OFF_CPU_PERIOD, ShortBlocks,
    TRACK_ANY_THREAD, TRACK_LEADER, TargetKey, ThreadCounter, Tracked, Wants,
};

use crate::sys;

/// The compiled eBPF object (built by build.rs with aya-build).
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/vmscope-ebpf"));

/// Nanoseconds in a second: the kernel turns a cpu-clock frequency `f` into the period
/// `NSEC_PER_SEC / f`, and so do we.
pub const NSEC_PER_SEC: u64 = 1_000_000_000;

/// The sampling period, in ns, of a frequency in Hz. Frequencies that round to the same period
/// share one set of perf events.
pub fn period_of(frequency_hz: u32) -> u64 {
    NSEC_PER_SEC / u64::from(frequency_hz.max(1))
}

/// The words of a thread's own memory its samples read, by address (0: not read): its send
/// counter and the id of its current label set (see [`vmscope_common::ThreadCounter`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadWords {
    /// Where its send counter is.
    pub sends: u64,
    /// Where the id of its current label set is.
    pub labels: u64,
}

impl ThreadWords {
    /// Whether it reads nothing.
    pub fn is_empty(&self) -> bool {
        self.sends == 0 && self.labels == 0
    }
}

/// Failure to load, attach or drive the BPF side. Each message includes the underlying error's,
/// which is therefore no `source`: a chain printer (`{:#}`) would print it twice.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// The object could not be loaded into the kernel (verifier, BTF, permissions).
    #[error("cannot load the BPF sampler: {0}")]
    Load(Box<EbpfError>),
    /// A program could not be loaded or attached.
    #[error("cannot {what}: {error}")]
    Program {
        /// What was being done.
        what: String,
        /// The underlying error.
        error: Box<ProgramError>,
    },
    /// A map operation failed.
    #[error("BPF map {map}: {error}")]
    Map {
        /// The map's name.
        map: &'static str,
        /// The underlying error.
        error: Box<MapError>,
    },
    /// The object lacks a map or program the daemon expects (a build mismatch).
    #[error("the BPF object has no {0}")]
    Missing(&'static str),
    /// The list of online or possible CPUs could not be read.
    #[error("cannot list the online or possible CPUs: {0}")]
    Cpus(std::io::Error),
    /// The kernel's BTF, where the sampler learns where credentials are, could not be read.
    #[error("cannot read {path}: {0}", path = btf::VMLINUX_BTF)]
    BtfRead(std::io::Error),
    /// The kernel's BTF does not say where credentials are as the sampler reads them.
    #[error("cannot find thread credentials in {path}: {0}", path = btf::VMLINUX_BTF)]
    Btf(btf::BtfError),
    /// Off-CPU profiling cannot run on this kernel; the message says why and what it needs.
    #[error("off-CPU profiling is not available here: {0}")]
    OffCpu(String),
    /// A function's calls cannot be counted (`record --count`).
    #[error("cannot count calls: {0}")]
    Count(String),
    /// A thread's send counter cannot be read with its samples.
    #[error("cannot read thread send counters: {0}")]
    ThreadCounter(String),
}

impl SamplerError {
    /// Whether a BPF map refused an entry because it is full (the kernel says E2BIG): a limit
    /// of the daemon, not a failure.
    pub fn is_map_full(&self) -> bool {
        matches!(
            self,
            SamplerError::Map { error, .. }
                if matches!(&**error, MapError::SyscallError(e)
                    if e.io_error.raw_os_error() == Some(libc::E2BIG))
        )
    }
}

fn map_err(map: &'static str) -> impl FnOnce(MapError) -> SamplerError {
    move |error| SamplerError::Map {
        map,
        error: Box::new(error),
    }
}

/// Samples that the kernel could not deliver because the ring buffer was full, or left out
/// because they were other users' and the ring held their share already, per CPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LostCounts {
    /// By target process and period; vectors are indexed by CPU number.
    pub keyed: HashMap<TargetKey, Vec<u64>>,
    /// Lost while the keyed table itself was full, or exec events lost; indexed by CPU.
    pub unkeyed: Vec<u64>,
    /// Samples no session of root's wanted, left out while the ring held its share of such
    /// samples ([`vmscope_common::Wants::fits`]), by target process and period; indexed by
    /// CPU. Lost for the sessions that wanted them.
    pub shed: HashMap<TargetKey, Vec<u64>>,
    /// Shed while the keyed table of those was full: the daemon's count alone, no session's.
    pub shed_unkeyed: Vec<u64>,
    /// Shed samples whose keyed counters were cleared with their period
    /// ([`SamplerControl::clear_lost`]).
    pub shed_cleared: u64,
    /// Off-CPU blocks shorter than the sessions' minimum, counted in the kernel and not sent,
    /// by process (summed over CPUs).
    pub short_blocks: HashMap<u32, ShortBlocks>,
    /// The off-CPU programs' counts (`vmscope_common::OFF_CPU_UNFOLLOWED` and after), summed
    /// over CPUs.
    pub off_cpu: [u64; OFF_CPU_COUNTS_LEN as usize],
}

impl LostCounts {
    /// All samples shed since the sampler was loaded.
    pub fn shed_total(&self) -> u64 {
        self.shed.values().flatten().sum::<u64>()
            + self.shed_unkeyed.iter().sum::<u64>()
            + self.shed_cleared
    }
}

/// A process's entry in the kernel's `TRACKED` map: a target is sampled only while it has one,
/// and the kernel removes it when the process exits (see [`vmscope_common::EVENT_EXIT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracking {
    /// No entry: not sampled for target sessions, no exec or exit events.
    Off,
    /// Removed by the kernel when the thread-group leader exits ([`TRACK_LEADER`]).
    Leader,
    /// Removed by the kernel when any thread exits, for a process whose leader exited before
    /// its other threads ([`TRACK_ANY_THREAD`]).
    AnyThread,
}

/// Whose samples of a tracked process its target sessions may have ([`Tracked::guard`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// Anyone's: only root's sessions hold the process ([`GUARD_OPEN`]).
    Open,
    /// Only threads with these credentials, those the owners' right was checked against
    /// ([`GUARD_CREDS`]).
    Creds(Creds),
    /// None, until the daemon has checked the process ([`GUARD_HELD`]).
    Held,
}

impl Guard {
    /// The `TRACKED` value of a process tracked with `mode` ([`TRACK_LEADER`] or
    /// [`TRACK_ANY_THREAD`]) under this guard.
    fn tracked(self, mode: u8) -> Tracked {
        let (guard, creds) = match self {
            Guard::Open => (GUARD_OPEN, Creds::default()),
            Guard::Creds(creds) => (GUARD_CREDS, creds),
            Guard::Held => (GUARD_HELD, Creds::default()),
        };
        Tracked {
            mode,
            guard,
            _pad: [0; 6],
            creds,
        }
    }
}

/// What the session manager asks of the kernel side. Reference counting across sessions is the
/// manager's job: every call here is a plain state change.
pub trait SamplerControl: Send {
    /// Opens a cpu-clock perf event with this period on every online CPU and attaches the
    /// sampler to each.
    fn start_period(&mut self, period_ns: u64) -> Result<(), SamplerError>;
    /// Closes the perf events of a period.
    fn stop_period(&mut self, period_ns: u64);
    /// Samples a process at a period, with what `wants` says beyond the instruction pointer;
    /// called again for a sampled process, changes what its samples carry.
    fn set_target(&mut self, key: TargetKey, wants: Wants) -> Result<(), SamplerError>;
    /// Stops sampling a process at a period.
    fn remove_target(&mut self, key: TargetKey);
    /// Samples every process at a period, with what `wants` says beyond the instruction
    /// pointer; called again, changes what the samples carry.
    fn set_system_wide(&mut self, period_ns: u64, wants: Wants) -> Result<(), SamplerError>;
    /// Stops sampling every process at a period.
    fn remove_system_wide(&mut self, period_ns: u64);
    /// Makes the process a live target, whose samples at its `TARGETS` periods are kept (as
    /// `guard` allows) and whose `execve` and exit are reported, until the exit `tracking`
    /// names; or, with [`Tracking::Off`] (and any guard), no longer. The kernel removes entries
    /// by itself at exits, so removing one that is gone is no error.
    fn set_tracking(&mut self, tgid: u32, tracking: Tracking, guard: Guard);
    /// The processes whose threads the kernel kept from their target sessions because their
    /// credentials were not those of their guard, each with the time of the first such
    /// sample; each is reported once (until it happens again).
    fn take_creds_changed(&mut self) -> Vec<(u32, u64)>;
    /// Sets the number of system-wide sessions, which turns on exec events for all processes.
    fn set_system_wide_sessions(&mut self, count: u32);
    /// Current counters of samples lost, and of samples shed for root's reserve.
    fn lost(&self) -> Result<LostCounts, SamplerError>;
    /// Forgets the lost-sample counters of a period nobody samples at any more, so that the
    /// keyed table does not fill up over the daemon's life (at [`OFF_CPU_PERIOD`], the short
    /// blocks' too).
    fn clear_lost(&mut self, period_ns: u64);
    /// Notes a thread of an off-CPU target as off its CPU since `blocked.since_ns`, unless the
    /// kernel follows it already: a thread asleep when its session starts would never be seen
    /// leaving. Answers whether it was noted (false: followed already, or no room).
    fn note_blocked(&mut self, tid: u32, blocked: Blocked) -> bool;
    /// The threads off their CPU that the kernel follows now, by thread id: at a session's
    /// stop, those still off it.
    fn blocked(&self) -> Vec<(u32, Blocked)>;
    /// Counts the calls of `symbol` (in the ELF file at `path`, named `shown` in messages) by
    /// process `pid` in `slot` (below [`vmscope_common::MAX_COUNT_SLOTS`]), from zero.
    fn attach_count(
        &mut self,
        slot: u32,
        file: (&std::path::Path, &str),
        symbol: &str,
        pid: u32,
    ) -> Result<(), SamplerError> {
        let _ = (slot, file, symbol, pid);
        Err(SamplerError::Count("this sampler counts no calls".into()))
    }
    /// The calls counted in `slot` so far.
    fn read_count(&self, slot: u32) -> Result<u64, SamplerError> {
        let _ = slot;
        Err(SamplerError::Count("this sampler counts no calls".into()))
    }
    /// Stops counting in `slot`.
    fn detach_count(&mut self, slot: u32) {
        let _ = slot;
    }
    /// Has each sample of thread `tid` of process `tgid` read the words of its memory at
    /// `words` (see [`vmscope_common::ThreadCounter`]).
    fn set_thread_counter(
        &mut self,
        tid: u32,
        tgid: u32,
        words: ThreadWords,
    ) -> Result<(), SamplerError> {
        let _ = (tid, tgid, words);
        Err(SamplerError::ThreadCounter(
            "this sampler has no kernel side".into(),
        ))
    }
    /// Reads thread `tid`'s counter no more (it may be gone already: the exit program removes
    /// a thread's entry as it exits).
    fn remove_thread_counter(&mut self, tid: u32) {
        let _ = tid;
    }
}

/// The stack depth the kernel program works to: `kernel.perf_event_max_stack`, which bounds
/// every walk the kernel does, capped at [`MAX_STACK_FRAMES`], the room in a record. An
/// unreadable sysctl leaves the cap (the kernel still enforces its own limit).
fn max_stack_frames() -> u32 {
    let cap = MAX_STACK_FRAMES as u32;
    match sys::perf_event_max_stack() {
        Ok(limit) => limit.clamp(1, cap),
        Err(e) => {
            tracing::warn!("cannot read the stack depth limit, assuming {cap} frames: {e}");
            cap
        }
    }
}

/// Looks at the kernel's count of credential changes still owed once no process is guarded by
/// credentials any more (see `Sampler::creds_guarded`).
const CREDS_LOOKS_AFTER_GUARDS: u8 = 2;

/// The loaded eBPF object and its perf events.
pub struct Sampler {
    ebpf: Ebpf,
    cpus: Vec<u32>,
    targets: BpfHashMap<MapData, TargetKey, Wants>,
    system_wide: BpfHashMap<MapData, u64, Wants>,
    tracked: BpfHashMap<MapData, u32, Tracked>,
    creds_changed: BpfHashMap<MapData, u32, u64>,
    /// How many entries the kernel has put in `creds_changed`, and that count when the map was
    /// last looked through.
    creds_changes: PerCpuArray<MapData, u64>,
    creds_changes_seen: u64,
    /// The processes tracked with a [`Guard::Creds`], the only guard under which the kernel
    /// reports a change of credentials; and how many more looks at `creds_changes` are owed
    /// once none is (two: a program that checked a guard just lifted may still be reporting).
    /// Root's sessions guard nothing: their batches then cost no lookup of the per-CPU count
    /// (a syscall, a tenth of the manager's time per batch).
    creds_guarded: HashSet<u32>,
    creds_looks_owed: u8,
    config: Array<MapData, u32>,
    lost: PerCpuHashMap<MapData, TargetKey, u64>,
    lost_unkeyed: PerCpuArray<MapData, u64>,
    shed: PerCpuHashMap<MapData, TargetKey, u64>,
    shed_unkeyed: PerCpuArray<MapData, u64>,
    shed_cleared: u64,
    links: HashMap<u64, Vec<PerfEventLinkId>>,
    blocked: BpfHashMap<MapData, u32, Blocked>,
    blocked_copies: BpfHashMap<MapData, u32, BlockedCopy>,
    short_blocks: PerCpuHashMap<MapData, u32, ShortBlocks>,
    off_cpu_counts: PerCpuArray<MapData, u64>,
    /// The switch program's link while an off-CPU session runs.
    off_cpu_link: Option<BtfTracePointLinkId>,
    /// Why off-CPU sessions cannot run here (the kernel refused the switch program).
    off_cpu_refusal: Option<String>,
    /// Calls counted by uprobes (`record --count`).
    call_counts: call_counts::CallCounter,
    thread_counters: BpfHashMap<MapData, u32, ThreadCounter>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("cpus", &self.cpus)
            .field("periods", &self.links.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn take_map<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, SamplerError>
where
    T: TryFrom<aya::maps::Map, Error = MapError>,
{
    let map = ebpf.take_map(name).ok_or(SamplerError::Missing(name))?;
    T::try_from(map).map_err(map_err(name))
}

impl Sampler {
    /// Loads the eBPF object with a ring buffer of `ring_bytes` (a power of two, a multiple of
    /// the page size; see [`vmscope_common::RING_BUFFER_BYTES`]), loads the sampler and attaches
    /// the exec and exit raw tracepoints. Nothing is sampled until a period is started and a target or
    /// system-wide mode is added.
    ///
    /// Returns the sampler and the ring buffer from which [`spawn_reader`] reads events.
    pub fn load(ring_bytes: u32) -> Result<(Sampler, RingBuf<MapData>), SamplerError> {
        // The program assembles a sample with stacks in the SCRATCH slot of its CPU number: one
        // slot per possible CPU (a CPU brought online later has its slot too).
        let possible_cpus = aya::util::nr_cpus().map_err(|(_, e)| SamplerError::Cpus(e))?;
        // Where a thread's credentials and ids are, for the guards of users' targets and the
        // switch program: a daemon that cannot check them would sample every setuid program its
        // users' targets run.
        let vmlinux = std::fs::read(btf::VMLINUX_BTF).map_err(SamplerError::BtfRead)?;
        let offsets = btf::task_offsets(&vmlinux).map_err(SamplerError::Btf)?;
        let mut ebpf = aya::EbpfLoader::new()
            .map_max_entries("EVENTS", ring_bytes)
            .map_max_entries("SCRATCH", possible_cpus as u32)
            .override_global("TASK_PID_OFFSET", &offsets.task_pid, true)
            .override_global("TASK_TGID_OFFSET", &offsets.task_tgid, true)
            .load(EBPF_OBJECT)
            .map_err(|e| SamplerError::Load(Box::new(e)))?;
        let cpus = aya::util::online_cpus().map_err(|(_, e)| SamplerError::Cpus(e))?;

        let program_err = |what: &str| {
            let what = what.to_owned();
            move |error| SamplerError::Program {
                what,
                error: Box::new(error),
            }
        };
        let sample: &mut PerfEvent = ebpf
            .program_mut("vmscope_sample")
            .ok_or(SamplerError::Missing("program vmscope_sample"))?
            .try_into()
            .map_err(program_err("use vmscope_sample as a perf_event program"))?;
        sample
            .load()
            .map_err(program_err("load the perf_event sampler"))?;
        let exec: &mut RawTracePoint = ebpf
            .program_mut("vmscope_exec")
            .ok_or(SamplerError::Missing("program vmscope_exec"))?
            .try_into()
            .map_err(program_err("use vmscope_exec as a raw tracepoint program"))?;
        exec.load()
            .map_err(program_err("load the exec tracepoint program"))?;
        exec.attach("sched_process_exec")
            .map_err(program_err("attach to raw tracepoint sched_process_exec"))?;
        let exit: &mut RawTracePoint = ebpf
            .program_mut("vmscope_exit")
            .ok_or(SamplerError::Missing("program vmscope_exit"))?
            .try_into()
            .map_err(program_err("use vmscope_exit as a raw tracepoint program"))?;
        exit.load()
            .map_err(program_err("load the exit tracepoint program"))?;
        exit.attach("sched_process_exit")
            .map_err(program_err("attach to raw tracepoint sched_process_exit"))?;
        let rename: &mut RawTracePoint = ebpf
            .program_mut("vmscope_rename")
            .ok_or(SamplerError::Missing("program vmscope_rename"))?
            .try_into()
            .map_err(program_err(
                "use vmscope_rename as a raw tracepoint program",
            ))?;
        rename
            .load()
            .map_err(program_err("load the rename tracepoint program"))?;
        rename
            .attach("task_rename")
            .map_err(program_err("attach to raw tracepoint task_rename"))?;
        // Loaded now, attached only while an off-CPU session runs: it runs at every context
        // switch of the host. A kernel that refuses it (older than 5.18, whose tracepoint has
        // no prev_state) samples as before; off-CPU sessions are refused with the reason.
        let btf = aya::Btf::from_sys_fs();
        let switch: &mut BtfTracePoint = ebpf
            .program_mut("vmscope_switch")
            .ok_or(SamplerError::Missing("program vmscope_switch"))?
            .try_into()
            .map_err(program_err(
                "use vmscope_switch as a BTF tracepoint program",
            ))?;
        let off_cpu_refusal = match &btf {
            Ok(btf) => switch.load("sched_switch", btf).err().map(|e| {
                format!(
                    "the kernel refused the sched_switch program (its prev_state argument, which \
                     says why a thread left its CPU, needs Linux 5.18 or later): {e}"
                )
            }),
            Err(e) => Some(format!("cannot read the kernel's BTF: {e}")),
        };
        if let Some(refusal) = &off_cpu_refusal {
            tracing::warn!("off-CPU profiling is not available: {refusal}");
        }
        let call_counts = call_counts::CallCounter::load(&mut ebpf, possible_cpus)?;
        let events = take_map(&mut ebpf, "EVENTS")?;
        let mut config: Array<MapData, u32> = take_map(&mut ebpf, "CONFIG")?;
        // The kernel walks no deeper than kernel.perf_event_max_stack; the program marks a
        // stack that reaches this limit as truncated, so it must know the limit.
        let max_stack = max_stack_frames();
        config
            .set(CONFIG_MAX_STACK, max_stack, 0)
            .map_err(map_err("CONFIG"))?;
        for (slot, offset) in [
            (CONFIG_TASK_CRED, offsets.task_real_cred),
            (CONFIG_CRED_IDS, offsets.cred_ids),
            (CONFIG_CRED_CAPS, offsets.cred_cap_permitted),
            (CONFIG_TASK_PID, offsets.task_pid),
            (CONFIG_TASK_TGID, offsets.task_tgid),
        ] {
            config.set(slot, offset, 0).map_err(map_err("CONFIG"))?;
        }
        let sampler = Sampler {
            targets: take_map(&mut ebpf, "TARGETS")?,
            system_wide: take_map(&mut ebpf, "SYSTEM_WIDE")?,
            tracked: take_map(&mut ebpf, "TRACKED")?,
            creds_changed: take_map(&mut ebpf, "CREDS_CHANGED")?,
            creds_changes: take_map(&mut ebpf, "CREDS_CHANGES")?,
            creds_changes_seen: 0,
            creds_guarded: HashSet::new(),
            creds_looks_owed: 0,
            config,
            lost: take_map(&mut ebpf, "LOST")?,
            lost_unkeyed: take_map(&mut ebpf, "LOST_UNKEYED")?,
            shed: take_map(&mut ebpf, "SHED")?,
            shed_unkeyed: take_map(&mut ebpf, "SHED_UNKEYED")?,
            shed_cleared: 0,
            blocked: take_map(&mut ebpf, "BLOCKED")?,
            blocked_copies: take_map(&mut ebpf, "BLOCKED_COPIES")?,
            short_blocks: take_map(&mut ebpf, "SHORT_BLOCKS")?,
            off_cpu_counts: take_map(&mut ebpf, "OFF_CPU_COUNTS")?,
            off_cpu_link: None,
            off_cpu_refusal,
            call_counts,
            thread_counters: take_map(&mut ebpf, "THREAD_COUNTERS")?,
            ebpf,
            cpus,
            links: HashMap::new(),
        };
        Ok((sampler, events))
    }

    /// Online CPUs, on each of which a perf event is opened per period.
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    fn program(&mut self) -> &mut PerfEvent {
        // Checked in load(): the program exists and is a perf_event program.
        self.ebpf
            .program_mut("vmscope_sample")
            .and_then(|p| <&mut PerfEvent>::try_from(p).ok())
            .expect("vmscope_sample was loaded as a perf_event program")
    }

    fn switch_program(&mut self) -> &mut BtfTracePoint {
        // Checked in load().
        self.ebpf
            .program_mut("vmscope_switch")
            .and_then(|p| <&mut BtfTracePoint>::try_from(p).ok())
            .expect("vmscope_switch is a BTF tracepoint program")
    }

    /// Attaches the switch program, once loaded.
    fn start_off_cpu(&mut self) -> Result<(), SamplerError> {
        if self.off_cpu_link.is_some() {
            return Ok(());
        }
        if let Some(refusal) = &self.off_cpu_refusal {
            return Err(SamplerError::OffCpu(refusal.clone()));
        }
        let link = self.switch_program().attach().map_err(|e| {
            SamplerError::OffCpu(format!("cannot attach to the sched_switch tracepoint: {e}"))
        })?;
        self.off_cpu_link = Some(link);
        Ok(())
    }

    /// Detaches the switch program and forgets the threads it followed: with no program to
    /// take them out, entries would only go stale.
    fn stop_off_cpu(&mut self) {
        let Some(link) = self.off_cpu_link.take() else {
            return;
        };
        if let Err(e) = self.switch_program().detach(link) {
            tracing::warn!("detaching the sched_switch program failed: {e}");
        }
        let tids: Vec<u32> = self.blocked.keys().filter_map(Result::ok).collect();
        for tid in tids {
            let _ = self.blocked.remove(&tid);
        }
        let tids: Vec<u32> = self.blocked_copies.keys().filter_map(Result::ok).collect();
        for tid in tids {
            let _ = self.blocked_copies.remove(&tid);
        }
    }
}

/// The map update flag that inserts only where no entry is (`BPF_NOEXIST` of linux/bpf.h).
const BPF_NOEXIST: u64 = 1;

impl SamplerControl for Sampler {
    fn start_period(&mut self, period_ns: u64) -> Result<(), SamplerError> {
        if period_ns == OFF_CPU_PERIOD {
            return self.start_off_cpu();
        }
        if self.links.contains_key(&period_ns) {
            return Ok(());
        }
        let cpus = self.cpus.clone();
        let mut links = Vec::with_capacity(cpus.len());
        for cpu in cpus {
            // A period rather than a frequency: for cpu-clock the kernel converts a frequency
            // into exactly this period anyway, and the period is what the program sees.
            let attached = self.program().attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Period(period_ns),
                false,
            );
            match attached {
                Ok(link) => links.push(link),
                Err(error) => {
                    for link in links {
                        let _ = self.program().detach(link);
                    }
                    return Err(SamplerError::Program {
                        what: format!("open a cpu-clock perf event on CPU {cpu}"),
                        error: Box::new(error),
                    });
                }
            }
        }
        self.links.insert(period_ns, links);
        Ok(())
    }

    fn stop_period(&mut self, period_ns: u64) {
        if period_ns == OFF_CPU_PERIOD {
            return self.stop_off_cpu();
        }
        for link in self.links.remove(&period_ns).unwrap_or_default() {
            if let Err(e) = self.program().detach(link) {
                tracing::warn!(period_ns, "detaching a perf event failed: {e}");
            }
        }
    }

    fn set_target(&mut self, key: TargetKey, wants: Wants) -> Result<(), SamplerError> {
        self.targets
            .insert(key, wants, 0)
            .map_err(map_err("TARGETS"))
    }

    fn remove_target(&mut self, key: TargetKey) {
        if let Err(e) = self.targets.remove(&key) {
            tracing::warn!(?key, "removing a target failed: {e}");
        }
    }

    fn set_system_wide(&mut self, period_ns: u64, wants: Wants) -> Result<(), SamplerError> {
        self.system_wide
            .insert(period_ns, wants, 0)
            .map_err(map_err("SYSTEM_WIDE"))
    }

    fn remove_system_wide(&mut self, period_ns: u64) {
        if let Err(e) = self.system_wide.remove(&period_ns) {
            tracing::warn!(period_ns, "removing system-wide mode failed: {e}");
        }
    }

    fn set_tracking(&mut self, tgid: u32, tracking: Tracking, guard: Guard) {
        if tracking != Tracking::Off && matches!(guard, Guard::Creds(_)) {
            self.creds_guarded.insert(tgid);
            self.creds_looks_owed = CREDS_LOOKS_AFTER_GUARDS;
        } else {
            self.creds_guarded.remove(&tgid);
        }
        let result = match tracking {
            Tracking::Off => match self.tracked.remove(&tgid) {
                // The exit tracepoint removed it first.
                Err(MapError::KeyNotFound) => Ok(()),
                Err(MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::ENOENT) =>
                {
                    Ok(())
                }
                other => other,
            },
            Tracking::Leader => self.tracked.insert(tgid, guard.tracked(TRACK_LEADER), 0),
            Tracking::AnyThread => self
                .tracked
                .insert(tgid, guard.tracked(TRACK_ANY_THREAD), 0),
        };
        if let Err(e) = result {
            tracing::warn!(
                tgid,
                ?tracking,
                "updating the tracked processes failed: {e}"
            );
        }
    }

    fn take_creds_changed(&mut self) -> Vec<(u32, u64)> {
        // Nothing guarded by credentials lately: the kernel put nothing in the map.
        if !self.creds_guarded.is_empty() {
            self.creds_looks_owed = CREDS_LOOKS_AFTER_GUARDS;
        }
        if self.creds_looks_owed == 0 {
            return Vec::new();
        }
        self.creds_looks_owed -= 1;
        // Read before the map: an entry added after the read moves the count again, and is
        // found at the next call. A failed read looks through the map anyway.
        if let Ok(counts) = self.creds_changes.get(&0, 0) {
            let count = counts.iter().fold(0u64, |sum, &n| sum.wrapping_add(n));
            if count == self.creds_changes_seen {
                return Vec::new();
            }
            self.creds_changes_seen = count;
        }
        let changed: Vec<(u32, u64)> = self.creds_changed.iter().filter_map(Result::ok).collect();
        for (tgid, _) in &changed {
            // Removed after it was read: a tick in between only finds it present.
            let _ = self.creds_changed.remove(tgid);
        }
        changed
    }

    fn set_system_wide_sessions(&mut self, count: u32) {
        if let Err(e) = self.config.set(CONFIG_SYSTEM_WIDE, count, 0) {
            tracing::warn!(count, "updating the system-wide count failed: {e}");
        }
    }

    fn lost(&self) -> Result<LostCounts, SamplerError> {
        let mut counts = LostCounts::default();
        for entry in self.lost.iter() {
            let (key, values) = entry.map_err(map_err("LOST"))?;
            counts.keyed.insert(key, values.to_vec());
        }
        let unkeyed = self
            .lost_unkeyed
            .get(&0, 0)
            .map_err(map_err("LOST_UNKEYED"))?;
        counts.unkeyed = unkeyed.to_vec();
        for entry in self.shed.iter() {
            let (key, values) = entry.map_err(map_err("SHED"))?;
            counts.shed.insert(key, values.to_vec());
        }
        let unkeyed = self
            .shed_unkeyed
            .get(&0, 0)
            .map_err(map_err("SHED_UNKEYED"))?;
        counts.shed_unkeyed = unkeyed.to_vec();
        counts.shed_cleared = self.shed_cleared;
        for entry in self.short_blocks.iter() {
            let (tgid, values) = entry.map_err(map_err("SHORT_BLOCKS"))?;
            let sum = values
                .iter()
                .fold(ShortBlocks::default(), |sum, v| ShortBlocks {
                    count: sum.count + v.count,
                    ns: sum.ns + v.ns,
                });
            counts.short_blocks.insert(tgid, sum);
        }
        for (index, total) in counts.off_cpu.iter_mut().enumerate() {
            let values = self
                .off_cpu_counts
                .get(&(index as u32), 0)
                .map_err(map_err("OFF_CPU_COUNTS"))?;
            *total = values.iter().sum();
        }
        Ok(counts)
    }

    fn clear_lost(&mut self, period_ns: u64) {
        let shed: Vec<(TargetKey, u64)> = self
            .shed
            .iter()
            .filter_map(Result::ok)
            .filter(|(k, _)| k.period_ns == period_ns)
            .map(|(k, values)| (k, values.iter().sum()))
            .collect();
        for (key, count) in shed {
            if self.shed.remove(&key).is_ok() {
                self.shed_cleared += count;
            }
        }
        let keys: Vec<TargetKey> = self
            .lost
            .keys()
            .filter_map(Result::ok)
            .filter(|k| k.period_ns == period_ns)
            .collect();
        for key in keys {
            let _ = self.lost.remove(&key);
        }
        if period_ns == OFF_CPU_PERIOD {
            let tgids: Vec<u32> = self.short_blocks.keys().filter_map(Result::ok).collect();
            for tgid in tgids {
                let _ = self.short_blocks.remove(&tgid);
            }
        }
    }

    fn note_blocked(&mut self, tid: u32, blocked: Blocked) -> bool {
        self.blocked.insert(tid, blocked, BPF_NOEXIST).is_ok()
    }

    fn blocked(&self) -> Vec<(u32, Blocked)> {
        self.blocked.iter().filter_map(Result::ok).collect()
    }

    fn attach_count(
        &mut self,
        slot: u32,
        file: (&std::path::Path, &str),
        symbol: &str,
        pid: u32,
    ) -> Result<(), SamplerError> {
        self.call_counts
            .attach(&mut self.ebpf, slot, file, symbol, pid)
    }

    fn read_count(&self, slot: u32) -> Result<u64, SamplerError> {
        self.call_counts.read(slot)
    }

    fn detach_count(&mut self, slot: u32) {
        self.call_counts.detach(&mut self.ebpf, slot);
    }

    fn set_thread_counter(
        &mut self,
        tid: u32,
        tgid: u32,
        words: ThreadWords,
    ) -> Result<(), SamplerError> {
        let counter = ThreadCounter {
            address: words.sends,
            labels: words.labels,
            tgid,
            _pad: 0,
        };
        self.thread_counters
            .insert(tid, counter, 0)
            .map_err(map_err("THREAD_COUNTERS"))
    }

    fn remove_thread_counter(&mut self, tid: u32) {
        match self.thread_counters.remove(&tid) {
            Ok(()) | Err(MapError::KeyNotFound) => {}
            Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => tracing::warn!(tid, "removing a thread's send counter failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_printer_says_the_cause_once() {
        let errors = [
            (
                SamplerError::Cpus(std::io::Error::from_raw_os_error(libc::ENOENT)),
                std::io::Error::from_raw_os_error(libc::ENOENT).to_string(),
            ),
            (
                SamplerError::Program {
                    what: "attach".to_owned(),
                    error: Box::new(ProgramError::NotLoaded),
                },
                ProgramError::NotLoaded.to_string(),
            ),
        ];
        for (error, cause) in errors {
            let text = format!("{:#}", anyhow::Error::new(error));
            assert_eq!(text.matches(&cause).count(), 1, "{text}");
        }
    }
}
