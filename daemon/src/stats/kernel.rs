//! What the kernel counts for a target while a session runs: context switches (voluntary and
//! not), CPU migrations, page faults (minor and major), and cycles, instructions and cache
//! misses where the machine has a PMU. VMProfiler's "Events" for any process, whatever its
//! runtime. Its CPU time too (`task-clock`), in nanoseconds, which stops at its exit: the
//! measure the session's sampling rate is checked against, where `/proc/PID/stat` (10 ms ticks,
//! and gone with the process once it is reaped) can only be read while it lives.
//!
//! These are counting-mode perf events: no samples, no ring buffer, one 24-byte read each at
//! the end. `perf_event_open(2)` counts one thread, so a target gets one event per counter and
//! thread, opened with `inherit` and `inherit_thread`: threads it starts later count with the
//! thread that started them (the kernel adds a live child's count to its parent's on read and
//! folds it in when it exits), child processes do not, as the sampler's filter does not
//! sample them either. A thread started between the listing of `/proc/PID/task` and its
//! parent's open is missed; `perf stat -p` has the same gap.
//!
//! The kernel's context-switch counter does not split voluntary from involuntary switches, so
//! voluntary ones are counted apart, from the `sched:sched_switch` tracepoint filtered on the
//! state the thread left in: a thread that went to sleep (`prev_state & 0xff`, the states
//! `S`, `D`... of `sched_switch`'s format) switched voluntarily; a preempted one reports
//! `R+` (`TASK_REPORT_MAX`, 0x100) and a yielding one `R` (0), both involuntary, as the
//! kernel's own `nvcsw` and `nivcsw` count them.

use std::{
    fs, io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::OnceLock,
};

use perf_event_open_sys::{self as perf, bindings};

/// Where tracefs says the id of `sched:sched_switch`, mounted on its own or under debugfs.
const SCHED_SWITCH_ID: [&str; 2] = [
    "/sys/kernel/tracing/events/sched/sched_switch/id",
    "/sys/kernel/debug/tracing/events/sched/sched_switch/id",
];

/// The tracepoint filter that keeps the switches where the thread went to sleep: one of the
/// task states in the low byte of `prev_state`, not 0 (`R`, runnable) nor `TASK_REPORT_MAX`
/// (`R+`, preempted).
const VOLUNTARY_FILTER: &[u8; 17] = b"prev_state & 255\0";

/// Most threads of one target that get counters: a process with more is counted partly, and
/// says so. Every thread costs one descriptor per counter.
pub const MAX_THREADS: usize = 1024;

/// One count the kernel keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// CPU time, in ns.
    TaskClock,
    /// Times a thread left its CPU.
    ContextSwitches,
    /// Of those, the ones where it went to sleep.
    VoluntarySwitches,
    /// Times a thread moved to another CPU.
    CpuMigrations,
    /// Page faults served without I/O.
    MinorFaults,
    /// Page faults that waited for I/O.
    MajorFaults,
    /// CPU cycles (PMU).
    Cycles,
    /// Instructions retired (PMU).
    Instructions,
    /// Last-level cache misses (PMU).
    CacheMisses,
}

impl Counter {
    /// The software counters every Linux counts.
    const SOFTWARE: [Counter; 5] = [
        Counter::TaskClock,
        Counter::ContextSwitches,
        Counter::CpuMigrations,
        Counter::MinorFaults,
        Counter::MajorFaults,
    ];

    /// The counters a PMU gives.
    const HARDWARE: [Counter; 3] = [Counter::Cycles, Counter::Instructions, Counter::CacheMisses];

    /// The event's type and config; `sched_switch` is the tracepoint's id.
    fn event(self, sched_switch: u64) -> (u32, u64) {
        match self {
            Counter::TaskClock => (
                bindings::PERF_TYPE_SOFTWARE,
                bindings::PERF_COUNT_SW_TASK_CLOCK.into(),
            ),
            Counter::ContextSwitches => (
                bindings::PERF_TYPE_SOFTWARE,
                bindings::PERF_COUNT_SW_CONTEXT_SWITCHES.into(),
            ),
            Counter::VoluntarySwitches => (bindings::PERF_TYPE_TRACEPOINT, sched_switch),
            Counter::CpuMigrations => (
                bindings::PERF_TYPE_SOFTWARE,
                bindings::PERF_COUNT_SW_CPU_MIGRATIONS.into(),
            ),
            Counter::MinorFaults => (
                bindings::PERF_TYPE_SOFTWARE,
                bindings::PERF_COUNT_SW_PAGE_FAULTS_MIN.into(),
            ),
            Counter::MajorFaults => (
                bindings::PERF_TYPE_SOFTWARE,
                bindings::PERF_COUNT_SW_PAGE_FAULTS_MAJ.into(),
            ),
            Counter::Cycles => (
                bindings::PERF_TYPE_HARDWARE,
                bindings::PERF_COUNT_HW_CPU_CYCLES.into(),
            ),
            Counter::Instructions => (
                bindings::PERF_TYPE_HARDWARE,
                bindings::PERF_COUNT_HW_INSTRUCTIONS.into(),
            ),
            Counter::CacheMisses => (
                bindings::PERF_TYPE_HARDWARE,
                bindings::PERF_COUNT_HW_CACHE_MISSES.into(),
            ),
        }
    }

    /// The counter's name as perf names it, for errors.
    pub fn name(self) -> &'static str {
        match self {
            Counter::TaskClock => "task-clock",
            Counter::ContextSwitches => "context-switches",
            Counter::VoluntarySwitches => "sched:sched_switch",
            Counter::CpuMigrations => "cpu-migrations",
            Counter::MinorFaults => "minor-faults",
            Counter::MajorFaults => "major-faults",
            Counter::Cycles => "cycles",
            Counter::Instructions => "instructions",
            Counter::CacheMisses => "cache-misses",
        }
    }
}

/// Why a target's counters could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum CounterError {
    /// The process has no thread left to count (it exited).
    #[error("the process exited before its counters were opened")]
    Gone,
    /// `/proc/PID/task` could not be listed.
    #[error("cannot list its threads: {0}")]
    Threads(io::Error),
    /// The kernel refused a counter.
    #[error("perf_event_open of {counter} refused: {error}")]
    Open {
        /// The counter refused.
        counter: &'static str,
        /// What the kernel said: in the message already, so not a `source` (a chain printer
        /// would say it twice).
        error: io::Error,
    },
    /// The daemon's share of descriptors for counters is spent.
    #[error("not counted: the daemon already holds {0} counters, the most it opens")]
    TooMany(usize),
}

/// What this kernel and machine can count, found once when the daemon starts by opening each
/// kind of counter on the daemon itself.
#[derive(Clone, Debug)]
pub struct Support {
    /// `sched:sched_switch`'s id, or why voluntary switches cannot be counted.
    sched_switch: Result<u64, String>,
    /// Why hardware counters cannot be counted, if they cannot.
    hardware: Result<(), String>,
}

impl Support {
    /// Finds what can be counted here.
    pub fn probe() -> Support {
        let sched_switch = tracepoint_id().and_then(|id| {
            open_counter(Counter::VoluntarySwitches, id, 0)
                .map(|_| id)
                .map_err(|e| format!("voluntary context switches: {e}"))
        });
        let hardware = hardware().clone();
        Support {
            sched_switch,
            hardware,
        }
    }

    /// The counters a target gets.
    fn counters(&self) -> Vec<Counter> {
        let mut counters = Counter::SOFTWARE.to_vec();
        if self.sched_switch.is_ok() {
            counters.push(Counter::VoluntarySwitches);
        }
        if self.hardware.is_ok() {
            counters.extend(Counter::HARDWARE);
        }
        counters
    }

    /// Why some counters are not counted, for a person.
    pub fn unavailable(&self) -> Vec<String> {
        [
            &self.sched_switch.as_ref().err(),
            &self.hardware.as_ref().err(),
        ]
        .into_iter()
        .flatten()
        .map(|why| why.to_string())
        .collect()
    }

    /// Descriptors one thread takes.
    pub fn per_thread(&self) -> usize {
        self.counters().len()
    }
}

/// Whether perf counts hardware events here (cycles, instructions, cache misses), or why not:
/// found once, by opening one on the daemon itself, so that `GetDaemonInfo` and the reports
/// say the same. A machine whose sysfs lists a PMU can still refuse it (a hypervisor, a
/// container): only an open tells.
pub fn hardware() -> &'static Result<(), String> {
    static HARDWARE: OnceLock<Result<(), String>> = OnceLock::new();
    HARDWARE.get_or_init(|| {
        open_counter(Counter::Instructions, 0, 0)
            .map(drop)
            .map_err(|e| {
                if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EOPNOTSUPP)) {
                    format!(
                        "cycles, instructions, cache misses: this machine exposes no hardware \
                         PMU to perf (perf_event_open of instructions: {e})"
                    )
                } else {
                    format!("cycles, instructions, cache misses: perf_event_open refused: {e}")
                }
            })
    })
}

/// The id of `sched:sched_switch`, from tracefs (which the kernel mounts when first looked at).
fn tracepoint_id() -> Result<u64, String> {
    let mut last = String::new();
    for path in SCHED_SWITCH_ID {
        match fs::read_to_string(path) {
            Ok(text) => {
                return text.trim().parse().map_err(|e| {
                    format!("voluntary context switches: {path} holds no tracepoint id: {e}")
                });
            }
            Err(e) => last = format!("{path}: {e}"),
        }
    }
    Err(format!(
        "voluntary context switches: the sched:sched_switch tracepoint is not to be found \
         (tracefs not mounted? {last})"
    ))
}

/// Opens one counting event on thread `tid` (0: the caller), enabled, counting the threads
/// it starts later.
fn open_counter(counter: Counter, sched_switch: u64, tid: i32) -> io::Result<OwnedFd> {
    let (type_, config) = counter.event(sched_switch);
    let mut attr = bindings::perf_event_attr {
        type_,
        size: std::mem::size_of::<bindings::perf_event_attr>() as u32,
        config,
        read_format: u64::from(
            bindings::PERF_FORMAT_TOTAL_TIME_ENABLED | bindings::PERF_FORMAT_TOTAL_TIME_RUNNING,
        ),
        ..Default::default()
    };
    // Disabled until its filter is set: a tracepoint would count every switch meanwhile.
    attr.set_disabled(1);
    attr.set_inherit(1);
    attr.set_inherit_thread(1);
    // SAFETY: attr is a whole perf_event_attr whose size field says so; the call only counts.
    let fd = unsafe {
        perf::perf_event_open(
            &mut attr,
            tid,
            -1,
            -1,
            libc::c_ulong::from(bindings::PERF_FLAG_FD_CLOEXEC),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if counter == Counter::VoluntarySwitches {
        let mut filter = *VOLUNTARY_FILTER;
        // SAFETY: the filter is a NUL-terminated string that outlives the call.
        let done = unsafe { perf::ioctls::SET_FILTER(fd.as_raw_fd(), filter.as_mut_ptr().cast()) };
        if done < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: ENABLE takes no pointer.
    if unsafe { perf::ioctls::ENABLE(fd.as_raw_fd(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Reads a counting event opened by [`open_counter`]: its count, scaled up if the kernel had to
/// share the PMU between events (multiplexing; software events never are).
fn read_counter(fd: &OwnedFd) -> io::Result<u64> {
    let mut words = [0u64; 3];
    // SAFETY: the buffer is 24 writable bytes, the size of a read with read_format's two times.
    let read = unsafe {
        libc::read(
            fd.as_raw_fd(),
            words.as_mut_ptr().cast(),
            std::mem::size_of_val(&words),
        )
    };
    if read < 0 {
        return Err(io::Error::last_os_error());
    }
    if read as usize != std::mem::size_of_val(&words) {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("a counter read gave {read} bytes, not 24"),
        ));
    }
    let [value, enabled, running] = words;
    Ok(scaled(value, enabled, running))
}

/// A count scaled to the whole time its event was enabled, from the time it ran.
fn scaled(value: u64, enabled: u64, running: u64) -> u64 {
    if running == 0 || running >= enabled {
        value
    } else {
        let scaled = u128::from(value) * u128::from(enabled) / u128::from(running);
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }
}

/// What the kernel counted, for one target or several.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// CPU time, in ns.
    pub cpu_ns: u64,
    /// Times a thread left its CPU.
    pub context_switches: u64,
    /// Of those, the ones where it went to sleep, when countable.
    pub voluntary_switches: Option<u64>,
    /// Times a thread moved to another CPU.
    pub cpu_migrations: u64,
    /// Page faults served without I/O.
    pub minor_faults: u64,
    /// Page faults that waited for I/O.
    pub major_faults: u64,
    /// CPU cycles, with a PMU.
    pub cycles: Option<u64>,
    /// Instructions retired, with a PMU.
    pub instructions: Option<u64>,
    /// Cache misses, with a PMU.
    pub cache_misses: Option<u64>,
}

impl Counts {
    /// Adds `value` to the count of `counter`.
    fn add_to(&mut self, counter: Counter, value: u64) {
        let add = |slot: &mut Option<u64>| *slot = Some(slot.unwrap_or(0).saturating_add(value));
        match counter {
            Counter::TaskClock => self.cpu_ns += value,
            Counter::ContextSwitches => self.context_switches += value,
            Counter::VoluntarySwitches => add(&mut self.voluntary_switches),
            Counter::CpuMigrations => self.cpu_migrations += value,
            Counter::MinorFaults => self.minor_faults += value,
            Counter::MajorFaults => self.major_faults += value,
            Counter::Cycles => add(&mut self.cycles),
            Counter::Instructions => add(&mut self.instructions),
            Counter::CacheMisses => add(&mut self.cache_misses),
        }
    }

    /// Adds another target's counts (a count only one of them has stays known).
    pub fn add(&mut self, other: &Counts) {
        self.cpu_ns += other.cpu_ns;
        self.context_switches += other.context_switches;
        self.cpu_migrations += other.cpu_migrations;
        self.minor_faults += other.minor_faults;
        self.major_faults += other.major_faults;
        for (mine, theirs) in [
            (&mut self.voluntary_switches, other.voluntary_switches),
            (&mut self.cycles, other.cycles),
            (&mut self.instructions, other.instructions),
            (&mut self.cache_misses, other.cache_misses),
        ] {
            if let Some(theirs) = theirs {
                *mine = Some(mine.unwrap_or(0).saturating_add(theirs));
            }
        }
    }

    /// The context switches that were voluntary and those that were not, when the kernel
    /// tells them apart.
    pub fn switches(&self) -> Option<(u64, u64)> {
        // Switches are read one counter after the other: a few may land between the reads.
        let voluntary = self
            .voluntary_switches
            .map(|v| v.min(self.context_switches))?;
        Some((voluntary, self.context_switches - voluntary))
    }
}

/// What the kernel counted for a session's targets, for a profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelEvents {
    /// All targets together.
    pub total: Counts,
    /// Each target.
    pub processes: Vec<ProcessKernelCounts>,
    /// Counters not counted, and why, for a person.
    pub unavailable: Vec<String>,
}

/// What the kernel counted for one target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessKernelCounts {
    /// Its pid.
    pub pid: u32,
    /// Its name.
    pub command: String,
    /// Its counts.
    pub counts: Counts,
    /// Its threads counted.
    pub threads: u32,
    /// Why its counts are missing or partial.
    pub note: Option<String>,
}

/// The counters of one target: one event per counter and thread, until frozen.
#[derive(Debug)]
pub struct ProcessCounters {
    events: Vec<(Counter, OwnedFd)>,
    /// Threads counted at the open.
    threads: u32,
    /// Threads left out beyond [`MAX_THREADS`].
    threads_left_out: usize,
    /// The counts when frozen; the events are closed then.
    frozen: Option<Counts>,
}

impl ProcessCounters {
    /// Opens the counters of every thread of process `pid`, taking at most `fds_left`
    /// descriptors.
    pub fn open(
        pid: u32,
        support: &Support,
        fds_left: usize,
    ) -> Result<ProcessCounters, CounterError> {
        let mut tids = threads(pid).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => CounterError::Gone,
            _ => CounterError::Threads(e),
        })?;
        let counters = support.counters();
        let threads_left_out = tids.len().saturating_sub(MAX_THREADS);
        tids.truncate(MAX_THREADS);
        let wanted = tids.len() * counters.len();
        if wanted > fds_left {
            return Err(CounterError::TooMany(fds_left));
        }
        let sched_switch = support.sched_switch.clone().unwrap_or(0);
        let mut events = Vec::with_capacity(wanted);
        let mut threads = 0;
        for tid in tids {
            let mut opened = Vec::with_capacity(counters.len());
            for &counter in &counters {
                match open_counter(counter, sched_switch, tid) {
                    Ok(fd) => opened.push((counter, fd)),
                    // The thread ended since the listing: nothing of it to count.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                        opened.clear();
                        break;
                    }
                    Err(error) => {
                        return Err(CounterError::Open {
                            counter: counter.name(),
                            error,
                        });
                    }
                }
            }
            if !opened.is_empty() {
                threads += 1;
                events.extend(opened);
            }
        }
        if threads == 0 {
            return Err(CounterError::Gone);
        }
        Ok(ProcessCounters {
            events,
            threads,
            threads_left_out,
            frozen: None,
        })
    }

    /// The counts so far, or when frozen. A counter that cannot be read counts 0.
    pub fn counts(&self) -> Counts {
        self.counts_of(|_| true)
    }

    /// The CPU time so far, or when frozen, in ns: its `task-clock` events alone are read.
    pub fn cpu_ns(&self) -> u64 {
        self.counts_of(|counter| counter == Counter::TaskClock)
            .cpu_ns
    }

    /// The counts of the counters `wanted` picks (all of them once frozen).
    fn counts_of(&self, wanted: impl Fn(Counter) -> bool) -> Counts {
        if let Some(frozen) = self.frozen {
            return frozen;
        }
        let mut counts = Counts::default();
        for (counter, fd) in self.events.iter().filter(|(c, _)| wanted(*c)) {
            match read_counter(fd) {
                Ok(value) => counts.add_to(*counter, value),
                Err(e) => tracing::debug!("cannot read {}: {e}", counter.name()),
            }
        }
        counts
    }

    /// Reads the counts one last time and closes the events: the target is no longer the
    /// session's (it exited, or the session stopped).
    pub fn freeze(&mut self) {
        if self.frozen.is_none() {
            self.frozen = Some(self.counts());
            self.events = Vec::new();
        }
    }

    /// Descriptors held.
    pub fn fds(&self) -> usize {
        self.events.len()
    }

    /// Threads counted when opened.
    pub fn threads(&self) -> u32 {
        self.threads
    }

    /// Why the counts are partial, if they are.
    pub fn note(&self) -> Option<String> {
        (self.threads_left_out > 0).then(|| {
            format!(
                "partial: {} threads beyond the first {MAX_THREADS} were not counted",
                self.threads_left_out
            )
        })
    }
}

/// The thread ids of process `pid`, from `/proc/PID/task`.
fn threads(pid: u32) -> io::Result<Vec<i32>> {
    let mut tids: Vec<i32> = fs::read_dir(crate::sys::proc_path(pid, "task"))?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// One target's counters in a session, or why it has none.
#[derive(Debug)]
struct TargetCounters {
    pid: u32,
    command: String,
    counters: Result<ProcessCounters, String>,
}

/// The kernel counts of a session's targets.
#[derive(Debug, Default)]
pub struct SessionCounters {
    targets: Vec<TargetCounters>,
    unavailable: Vec<String>,
}

impl SessionCounters {
    /// Opens the counters of `targets` (pid and command), taking at most `fds_left`
    /// descriptors in all. A target whose counters cannot be opened is listed with the reason.
    pub fn open<'a>(
        targets: impl IntoIterator<Item = (u32, &'a str)>,
        support: &Support,
        mut fds_left: usize,
    ) -> SessionCounters {
        let targets = targets
            .into_iter()
            .map(|(pid, command)| {
                let counters = ProcessCounters::open(pid, support, fds_left).map_err(|e| {
                    tracing::info!(pid, "kernel counters not opened: {e}");
                    e.to_string()
                });
                if let Ok(opened) = &counters {
                    fds_left -= opened.fds();
                }
                TargetCounters {
                    pid,
                    command: command.to_owned(),
                    counters,
                }
            })
            .collect();
        SessionCounters {
            targets,
            unavailable: support.unavailable(),
        }
    }

    /// Freezes the counts of target `pid`: the session no longer samples it.
    pub fn freeze(&mut self, pid: u32) {
        for target in self.targets.iter_mut().filter(|t| t.pid == pid) {
            if let Ok(counters) = &mut target.counters {
                counters.freeze();
            }
        }
    }

    /// Freezes every target's counts: the session stops.
    pub fn freeze_all(&mut self) {
        for target in &mut self.targets {
            if let Ok(counters) = &mut target.counters {
                counters.freeze();
            }
        }
    }

    /// Descriptors held.
    pub fn fds(&self) -> usize {
        self.targets
            .iter()
            .filter_map(|t| t.counters.as_ref().ok())
            .map(ProcessCounters::fds)
            .sum()
    }

    /// The CPU time of target `pid` since its counters were opened, in ns, so far or until it
    /// exited or was frozen; `None` when it has no counters, or some threads went uncounted.
    pub fn cpu_ns(&self, pid: u32) -> Option<u64> {
        let counters = self
            .targets
            .iter()
            .find(|t| t.pid == pid)?
            .counters
            .as_ref()
            .ok()?;
        (counters.threads_left_out == 0).then(|| counters.cpu_ns())
    }

    /// Targets whose counters could not be opened.
    pub fn failed(&self) -> usize {
        self.targets.iter().filter(|t| t.counters.is_err()).count()
    }

    /// The counts so far (running) or final (frozen), for a profile; `command_of` names a
    /// target as it is now (after its exec), else it keeps its name at the start.
    pub fn summary(&self, command_of: impl Fn(u32) -> Option<String>) -> KernelEvents {
        let mut total = Counts::default();
        let processes = self
            .targets
            .iter()
            .map(|target| {
                let (counts, threads, note) = match &target.counters {
                    Ok(counters) => (counters.counts(), counters.threads(), counters.note()),
                    Err(why) => (Counts::default(), 0, Some(why.clone())),
                };
                total.add(&counts);
                ProcessKernelCounts {
                    pid: target.pid,
                    command: command_of(target.pid).unwrap_or_else(|| target.command.clone()),
                    counts,
                    threads,
                    note,
                }
            })
            .collect();
        KernelEvents {
            total,
            processes,
            unavailable: self.unavailable.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiplexed_counts_are_scaled_to_their_enabled_time() {
        assert_eq!(scaled(100, 10, 10), 100);
        assert_eq!(scaled(100, 20, 10), 200);
        // Never ran: nothing to scale from.
        assert_eq!(scaled(0, 20, 0), 0);
        assert_eq!(
            scaled(u64::MAX, 4, 2),
            u64::MAX,
            "saturates rather than wraps"
        );
    }

    #[test]
    fn involuntary_switches_are_the_rest_and_never_negative() {
        let counts = Counts {
            context_switches: 10,
            voluntary_switches: Some(12),
            ..Counts::default()
        };
        assert_eq!(counts.switches(), Some((10, 0)));
        let unknown = Counts {
            context_switches: 10,
            ..Counts::default()
        };
        assert_eq!(unknown.switches(), None);
    }

    #[test]
    fn totals_keep_a_count_only_some_targets_have() {
        let mut total = Counts::default();
        total.add(&Counts {
            context_switches: 3,
            minor_faults: 5,
            ..Counts::default()
        });
        total.add(&Counts {
            context_switches: 4,
            voluntary_switches: Some(2),
            ..Counts::default()
        });
        assert_eq!(total.context_switches, 7);
        assert_eq!(total.minor_faults, 5);
        assert_eq!(total.voluntary_switches, Some(2));
        assert_eq!(total.cycles, None);
    }

    /// A running process is counted in every thread it has when its counters open: here this
    /// test process, whose sleeper thread waits while they are opened, then sleeps.
    #[test]
    fn a_running_process_is_counted_in_every_thread_it_has() {
        let support = Support::probe();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            wait.recv().unwrap();
            for _ in 0..40 {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        });
        let counters =
            ProcessCounters::open(std::process::id(), &support, usize::MAX).expect("open");
        assert!(counters.threads() >= 2, "{} threads", counters.threads());
        assert_eq!(
            counters.fds(),
            counters.threads() as usize * support.per_thread()
        );
        go.send(()).unwrap();
        sleeper.join().unwrap();
        let counts = counters.counts();
        assert!(counts.voluntary_switches.unwrap() >= 40, "{counts:?}");
        // Too few descriptors left: refused whole, not opened in part.
        assert!(matches!(
            ProcessCounters::open(std::process::id(), &support, 1),
            Err(CounterError::TooMany(1))
        ));
        assert!(matches!(
            ProcessCounters::open(u32::MAX, &support, usize::MAX),
            Err(CounterError::Gone)
        ));
    }

    /// Real counters on a thread of this test: they count what it does, the voluntary
    /// switches apart, and keep their counts once frozen. Needs root (CI is root).
    #[test]
    fn counters_count_sleeps_and_faults_of_a_real_process() {
        let support = Support::probe();
        assert!(
            support.sched_switch.is_ok(),
            "the sched_switch tracepoint must be countable here (root, tracefs): {:?}",
            support.sched_switch
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let child = std::thread::spawn(move || {
            // SAFETY: gettid has no arguments.
            tx.send(unsafe { libc::gettid() }).unwrap();
            wait.recv().unwrap();
            for _ in 0..50 {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            // Pages of a mapping of its own: a heap allocation may reuse pages other tests
            // touched already (glibc's mmap threshold grows once big blocks are freed), which
            // then fault no more (999 faults for 1024 pages seen).
            const BYTES: usize = 4 << 20;
            // SAFETY: a fresh private anonymous mapping, written only below, unmapped after.
            unsafe {
                let pages = libc::mmap(
                    std::ptr::null_mut(),
                    BYTES,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(pages, libc::MAP_FAILED, "mmap 4 MiB");
                // One fault per page, not one per huge page.
                libc::madvise(pages, BYTES, libc::MADV_NOHUGEPAGE);
                for offset in (0..BYTES).step_by(4096) {
                    std::ptr::write_volatile(pages.cast::<u8>().add(offset), 1);
                }
                libc::munmap(pages, BYTES);
            }
        });
        let tid = rx.recv().unwrap();
        // The thread as a process of its own: /proc/TID/task lists the whole thread group, so
        // count one thread by hand.
        let mut events = Vec::new();
        for counter in support.counters() {
            let id = support.sched_switch.clone().unwrap_or(0);
            events.push((counter, open_counter(counter, id, tid).expect("open")));
        }
        let mut counters = ProcessCounters {
            events,
            threads: 1,
            threads_left_out: 0,
            frozen: None,
        };
        go.send(()).unwrap();
        child.join().unwrap();
        counters.freeze();
        let counts = counters.counts();
        assert!(
            (50..=60).contains(&counts.voluntary_switches.unwrap()),
            "{counts:?}"
        );
        assert!(counts.context_switches >= 50, "{counts:?}");
        assert!(counts.minor_faults >= 1000, "4 MiB touched: {counts:?}");
        assert_eq!(counters.fds(), 0, "frozen counters hold no descriptor");
    }
}
