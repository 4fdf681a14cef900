//! Checking a start request: what it asks for, and whether the caller may ask for it.

use std::time::Duration;

use super::SessionError;
use vmscope_common::{
    DEFAULT_USER_COPY, MAX_USER_COPY, OFF_CPU_PERIOD, WANT_ROOT, WANT_STACKS, Wants,
};
pub use vmscope_model::ProfileMode;
use vmscope_parse::stat;

use crate::{bpf::period_of, codemap::sample::Wanted, sys};

/// Most processes one session may name.
pub const MAX_TARGETS_PER_SESSION: usize = 1024;

/// Longest duration a session may ask for: a week. Longer is surely a unit mistake.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Most samples a session may keep one by one.
pub const MAX_KEPT_SAMPLES: u32 = 1_000_000;

/// Longest `--min-block` a session may ask for: a minute. Blocks that long are the ones an
/// off-CPU profile is for; a longer minimum is surely a unit mistake.
pub const MAX_MIN_BLOCK: Duration = Duration::from_secs(60);

/// The daemon's own ceiling on a session's frequency unless `vmscoped --max-frequency` sets
/// another. The kernel's (`kernel.perf_event_max_sample_rate`, 100,000 by default) does not
/// protect the host here: it lowers itself when PMU interrupts take too long, and the daemon's
/// cpu-clock events are timers, opened by period, which it never lowers for. Each online CPU
/// takes a timer interrupt at the session's rate, and the cost grows fast beyond 10 kHz: on a
/// 2-CPU VM, a Python loop of 0.66 s of CPU took 0.87 s of wall time recorded at 10 kHz, 1.3 s
/// at 25 kHz, 2.6 s at 50 kHz and 28 s at 100 kHz (the kernel then managed 74 kHz).
pub const DEFAULT_MAX_FREQUENCY_HZ: u32 = 10_000;

/// The highest frequencies a session may ask for: the kernel's and the daemon's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrequencyLimits {
    /// `kernel.perf_event_max_sample_rate` now (it can change while the daemon runs).
    pub kernel_hz: u32,
    /// The daemon's own ceiling ([`DEFAULT_MAX_FREQUENCY_HZ`] unless configured).
    pub daemon_hz: u32,
}

impl FrequencyLimits {
    /// The kernel's limit as it is now, and the daemon's `daemon_hz`.
    pub fn read(daemon_hz: u32) -> std::io::Result<FrequencyLimits> {
        Ok(FrequencyLimits {
            kernel_hz: sys::perf_event_max_sample_rate()?,
            daemon_hz,
        })
    }

    /// The highest frequency a session may ask for: the lower of the two.
    pub fn ceiling(self) -> u32 {
        self.kernel_hz.min(self.daemon_hz)
    }

    /// Why `frequency_hz` is refused, if it is: a message that names the limit it passes, the
    /// other one, and what to do.
    pub fn refusal(self, frequency_hz: u32) -> Option<String> {
        if frequency_hz <= self.ceiling() {
            return None;
        }
        let kernel = self.kernel_hz;
        Some(if self.kernel_hz <= self.daemon_hz {
            format!(
                "frequency {frequency_hz} Hz is above the kernel's limit of {kernel} Hz \
                 (kernel.perf_event_max_sample_rate is {kernel}); ask for less, or raise the \
                 limit with `sysctl kernel.perf_event_max_sample_rate={frequency_hz}`"
            )
        } else {
            format!(
                "frequency {frequency_hz} Hz is above this daemon's ceiling of {} Hz \
                 (kernel.perf_event_max_sample_rate is {kernel}, but every online CPU takes a \
                 timer interrupt at the requested rate, and past about 10,000 Hz that slows the \
                 targets and the host many times over); ask for at most {} Hz, or start \
                 vmscoped with --max-frequency {}",
                self.daemon_hz,
                self.daemon_hz,
                frequency_hz.min(kernel)
            )
        })
    }
}

/// Who is asking, from the peer credentials of the Unix socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Effective uid of the client process when it connected.
    pub uid: u32,
    /// Its pid, when the kernel reported one.
    pub pid: Option<i32>,
}

impl Caller {
    /// Root may profile anything and see every session.
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether the caller may see and control a session owned by `owner`.
    pub fn owns(&self, owner: u32) -> bool {
        self.is_root() || self.uid == owner
    }
}

/// What a client asks of a new session, before any check: the API's `StartSessionRequest` in
/// the daemon's terms (the server turns one into the other, filling in the API's defaults).
/// [`validate`] checks it into a [`SessionSpec`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionRequest {
    /// Target pids, as given (duplicates and all).
    pub pids: Vec<u32>,
    /// Sample every process.
    pub system_wide: bool,
    /// Requested frequency (the API's default when the client named none).
    pub frequency_hz: u32,
    /// Stop after this long; a duration that is not positive is [`Duration::ZERO`].
    pub duration: Option<Duration>,
    /// Samples to keep one by one.
    pub keep_samples: u32,
    /// How to record call stacks.
    pub call_graph: CallGraphMode,
    /// Bytes of user stack to copy, given with [`CallGraphMode::Dwarf`] only.
    pub dwarf_stack_bytes: Option<u32>,
    /// Never ask HotSpot targets for their perf map.
    pub no_jvm_attach: bool,
    /// What to measure.
    pub mode: ModeRequest,
    /// Off-CPU and wall sessions: the shortest block recorded with its stacks; `None` for
    /// every block.
    pub min_block: Option<Duration>,
    /// The workload's parameters (`record --param n=1000`), kept with the session for
    /// `vmscope fit`.
    pub params: Vec<(String, String)>,
    /// Native functions whose calls to count, `MODULE:FUNCTION`.
    pub counts: Vec<String>,
}

/// The mode a request asks for: one this daemon knows, or a value from a newer client, which
/// is refused rather than measured as something else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeRequest {
    /// A known mode.
    Known(ProfileMode),
    /// The API's value of a mode this daemon does not know.
    Unknown(i32),
}

impl Default for ModeRequest {
    fn default() -> Self {
        ModeRequest::Known(ProfileMode::Cpu)
    }
}

/// How a request asks for call stacks, before the size of a DWARF copy is checked (the API's
/// `CallGraph`: unspecified is the default, frame pointers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CallGraphMode {
    /// The interrupted instruction only.
    None,
    /// Frame pointers.
    #[default]
    FramePointers,
    /// A copy of the top of the user stack, unwound in the daemon.
    Dwarf,
}

/// A validated start request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSpec {
    /// Target pids, deduplicated, in request order; empty when system-wide.
    pub pids: Vec<u32>,
    /// Sample every process.
    pub system_wide: bool,
    /// Requested frequency.
    pub frequency_hz: u32,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Samples to keep one by one.
    pub keep_samples: u32,
    /// Whether to record call stacks.
    pub call_graph: CallGraph,
    /// Whether HotSpot targets may be asked for their perf map (signalled).
    pub jvm_attach: bool,
    /// Whether the session is root's: its samples may use the half of the ring buffer kept
    /// for root ([`WANT_ROOT`]). False from [`validate`], which does not know the caller; the
    /// manager sets it.
    pub root: bool,
    /// What it measures.
    pub mode: ProfileMode,
    /// Off-CPU and wall sessions: the shortest block recorded with its stacks, in ns (0: every
    /// block); 0 for CPU sessions.
    pub min_block_ns: u64,
    /// The workload's parameters, checked ([`check_params`]).
    pub params: Vec<(String, String)>,
    /// Native functions whose calls it counts, checked ([`check_counts`]).
    pub counts: Vec<CountedFunction>,
    /// Targets whose stacks the kernel copies although the session walks frame pointers:
    /// HotSpot JVMs whose compiled code keeps none, unwound from the copy by their own frame
    /// layout (see [`crate::unwind`]). Found at the start; empty for other call graphs.
    pub java_copies: Vec<u32>,
}

/// A native function whose calls a session counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountedFunction {
    /// As asked: `MODULE:FUNCTION`.
    pub asked: String,
    /// A file name (found among the target's mappings, or by the dynamic linker) or an
    /// absolute path.
    pub module: String,
    /// The symbol.
    pub function: String,
}

/// Most functions one session counts.
pub const MAX_COUNTED_FUNCTIONS: usize = 16;

/// Checks `--count`s: `MODULE:FUNCTION`, at most [`MAX_COUNTED_FUNCTIONS`], each once, a
/// module that is a file name or an absolute path.
fn check_counts(counts: &[String], system_wide: bool) -> Result<Vec<CountedFunction>, String> {
    if counts.is_empty() {
        return Ok(Vec::new());
    }
    if system_wide {
        return Err("counting calls needs targets: a system-wide session has none".into());
    }
    if counts.len() > MAX_COUNTED_FUNCTIONS {
        return Err(format!(
            "{} functions to count: a session counts at most {MAX_COUNTED_FUNCTIONS}",
            counts.len()
        ));
    }
    let mut checked: Vec<CountedFunction> = Vec::with_capacity(counts.len());
    for asked in counts {
        let bad = || format!("{asked:?} is not MODULE:FUNCTION (libc.so.6:malloc)");
        let (module, function) = asked.rsplit_once(':').ok_or_else(bad)?;
        if module.is_empty()
            || function.is_empty()
            || asked.len() > 4096
            || asked.chars().any(char::is_control)
        {
            return Err(bad());
        }
        if module.contains('/') && !module.starts_with('/') {
            return Err(format!(
                "{asked:?}: a module path must be absolute (the daemon has no working directory \
                 of yours)"
            ));
        }
        if checked.iter().any(|c| &c.asked == asked) {
            return Err(format!("{asked} is counted twice"));
        }
        checked.push(CountedFunction {
            asked: asked.clone(),
            module: module.to_owned(),
            function: function.to_owned(),
        });
    }
    Ok(checked)
}

impl SessionSpec {
    /// What the kernel must record with each of the session's samples, and whether they are
    /// root's.
    pub fn wants(&self) -> Wants {
        let wants = self.call_graph.wants();
        if self.root {
            Wants {
                flags: wants.flags | WANT_ROOT,
                ..wants
            }
        } else {
            wants
        }
    }

    /// What the kernel must record with the session's events of `channel` for target `tgid`:
    /// [`SessionSpec::wants_at`], with a copy of the user stack for the samples of a JVM of
    /// [`SessionSpec::java_copies`] (as much as `--call-graph dwarf` copies by default).
    pub fn wants_for(&self, channel: u64, tgid: u32) -> Wants {
        let wants = self.wants_at(channel);
        // Blocks keep their frame-pointer walk: a copy at every switch of every JVM thread
        // would cost far more than the samples' (and the off-CPU copies are bounded).
        if channel != OFF_CPU_PERIOD && self.java_copies.contains(&tgid) {
            Wants {
                user_copy_bytes: wants.user_copy_bytes.max(DEFAULT_USER_COPY),
                ..wants
            }
        } else {
            wants
        }
    }

    /// The kernel's channels it takes events from: its sampling period (CPU and wall
    /// sessions) and [`OFF_CPU_PERIOD`] (off-CPU and wall sessions), each a key of the
    /// kernel's filters and of the manager's routing.
    pub fn channels(&self) -> impl Iterator<Item = u64> + use<> {
        let sampling = self.mode.on_cpu().then(|| period_of(self.frequency_hz));
        let off_cpu = self.mode.off_cpu().then_some(OFF_CPU_PERIOD);
        sampling.into_iter().chain(off_cpu)
    }

    /// What the kernel must record with the session's events of `channel`: its stacks, and
    /// off the CPU its minimum block.
    pub fn wants_at(&self, channel: u64) -> Wants {
        let wants = self.wants();
        if channel == OFF_CPU_PERIOD {
            Wants {
                min_block_ns: self.min_block_ns,
                ..wants
            }
        } else {
            wants
        }
    }
}

/// How a session records call stacks (the API's `CallGraph`, never unspecified).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CallGraph {
    /// The interrupted instruction only.
    None,
    /// Kernel and user stacks by frame pointers (the default).
    #[default]
    FramePointers,
    /// The kernel stack, and the user registers with a copy of the top of the user stack, to
    /// unwind in the daemon (perf's `--call-graph dwarf,SIZE`).
    Dwarf {
        /// Bytes of stack copied from the stack pointer up: a multiple of 8, at most
        /// [`MAX_USER_COPY`].
        stack_bytes: u32,
    },
}

impl CallGraph {
    /// From the request's fields: `dwarf_stack_bytes` goes with [`CallGraphMode::Dwarf`] only,
    /// and is checked as perf checks it.
    pub fn from_request(
        mode: CallGraphMode,
        dwarf_stack_bytes: Option<u32>,
    ) -> Result<CallGraph, String> {
        let call_graph = match mode {
            CallGraphMode::None => CallGraph::None,
            CallGraphMode::Dwarf => {
                let stack_bytes = dwarf_stack_bytes.unwrap_or(DEFAULT_USER_COPY);
                if stack_bytes == 0 || stack_bytes > MAX_USER_COPY || !stack_bytes.is_multiple_of(8)
                {
                    return Err(format!(
                        "dwarf_stack_bytes {stack_bytes} is not a multiple of 8 from 8 to \
                         {MAX_USER_COPY} (perf's limits for --call-graph dwarf,SIZE); the \
                         default is {DEFAULT_USER_COPY}"
                    ));
                }
                return Ok(CallGraph::Dwarf { stack_bytes });
            }
            CallGraphMode::FramePointers => CallGraph::FramePointers,
        };
        match dwarf_stack_bytes {
            Some(_) => Err(
                "dwarf_stack_bytes goes with call_graph CALL_GRAPH_DWARF only; leave it unset \
                 or ask for DWARF stacks"
                    .into(),
            ),
            None => Ok(call_graph),
        }
    }

    /// The mode, without the size of a DWARF copy.
    pub fn mode(self) -> CallGraphMode {
        match self {
            CallGraph::None => CallGraphMode::None,
            CallGraph::FramePointers => CallGraphMode::FramePointers,
            CallGraph::Dwarf { .. } => CallGraphMode::Dwarf,
        }
    }

    /// The bytes of user stack copied per sample: 0 unless [`CallGraph::Dwarf`].
    pub fn dwarf_stack_bytes(self) -> u32 {
        match self {
            CallGraph::Dwarf { stack_bytes } => stack_bytes,
            _ => 0,
        }
    }

    /// Whether stacks are recorded.
    pub fn wants_stacks(self) -> bool {
        self != CallGraph::None
    }

    /// Which of a sample's stacks a session in this mode counts.
    pub fn wanted(self) -> Wanted {
        match self {
            CallGraph::None => Wanted::Leaf,
            CallGraph::FramePointers => Wanted::FramePointers,
            CallGraph::Dwarf { .. } => Wanted::Stack,
        }
    }

    /// What the kernel must record with each sample for this mode.
    pub fn wants(self) -> Wants {
        match self {
            CallGraph::None => Wants::default(),
            CallGraph::FramePointers => Wants {
                flags: WANT_STACKS,
                ..Wants::default()
            },
            CallGraph::Dwarf { stack_bytes } => Wants {
                user_copy_bytes: stack_bytes,
                ..Wants::default()
            },
        }
    }
}

/// Checks the shape of a request against the sampling-rate limits. Existence of the processes
/// and permissions are checked by [`authorize`].
pub fn validate(
    request: &SessionRequest,
    limits: FrequencyLimits,
) -> Result<SessionSpec, SessionError> {
    let invalid = |m: String| Err(SessionError::InvalidArgument(m));
    if request.system_wide && !request.pids.is_empty() {
        return invalid("give either pids or system_wide, not both".into());
    }
    if !request.system_wide && request.pids.is_empty() {
        return invalid("no target: give one or more pids, or system_wide".into());
    }
    if request.pids.contains(&0) {
        return invalid(
            "pid 0 is not a process (it is the kernel's idle task); give the pid of a running process"
                .into(),
        );
    }
    // Bound the work before doing any: a request may carry millions of pids.
    if request.pids.len() > MAX_TARGETS_PER_SESSION {
        return invalid(format!(
            "{} target processes; a session takes at most {MAX_TARGETS_PER_SESSION}",
            request.pids.len()
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity(request.pids.len());
    let pids: Vec<u32> = request
        .pids
        .iter()
        .copied()
        .filter(|pid| seen.insert(*pid))
        .collect();
    let frequency_hz = request.frequency_hz;
    if frequency_hz == 0 {
        return invalid("frequency must be at least 1 Hz".into());
    }
    if let Some(refusal) = limits.refusal(frequency_hz) {
        return invalid(refusal);
    }
    let duration = match request.duration {
        None => None,
        Some(d) => {
            if d.is_zero() {
                return invalid("duration must be positive".into());
            }
            if d > MAX_DURATION {
                return invalid(format!(
                    "duration {}s is longer than the {}s a session may run",
                    d.as_secs(),
                    MAX_DURATION.as_secs()
                ));
            }
            Some(d)
        }
    };
    if request.keep_samples > MAX_KEPT_SAMPLES {
        return invalid(format!(
            "keep_samples {} is above the {MAX_KEPT_SAMPLES} a session may keep",
            request.keep_samples
        ));
    }
    let call_graph = CallGraph::from_request(request.call_graph, request.dwarf_stack_bytes)
        .map_err(SessionError::InvalidArgument)?;
    let mode = match request.mode {
        ModeRequest::Known(mode) => mode,
        ModeRequest::Unknown(value) => {
            return invalid(format!(
                "unknown mode {value}: this daemon measures PROFILE_MODE_CPU, _OFF_CPU and _WALL"
            ));
        }
    };
    let min_block_ns = match (mode, request.min_block) {
        (ProfileMode::Cpu, Some(_)) => {
            return invalid(
                "min_block goes with the off-CPU and wall modes only: a CPU profile has no \
                 blocks"
                    .into(),
            );
        }
        (_, Some(min)) if min > MAX_MIN_BLOCK => {
            return invalid(format!(
                "min_block {:?} is longer than the {}s a session may ask for",
                min,
                MAX_MIN_BLOCK.as_secs()
            ));
        }
        (_, min) => min.map_or(0, |d| d.as_nanos() as u64),
    };
    let params = check_params(&request.params).map_err(SessionError::InvalidArgument)?;
    let counts = check_counts(&request.counts, request.system_wide)
        .map_err(SessionError::InvalidArgument)?;
    if mode.off_cpu() && call_graph == CallGraph::None {
        return invalid(format!(
            "the {} mode needs call stacks: a thread off its CPU is always in the scheduler, and \
             only its stack says what it waited in; ask for frame pointers or DWARF stacks",
            mode.as_str()
        ));
    }
    Ok(SessionSpec {
        pids,
        system_wide: request.system_wide,
        frequency_hz,
        duration,
        keep_samples: request.keep_samples,
        call_graph,
        jvm_attach: !request.no_jvm_attach,
        root: false,
        mode,
        min_block_ns,
        params,
        counts,
        java_copies: Vec::new(),
    })
}

/// Most parameters a session keeps.
pub const MAX_PARAMS: usize = 16;
/// Longest parameter key, in bytes.
pub const MAX_PARAM_KEY: usize = 64;
/// Longest parameter value, in bytes.
pub const MAX_PARAM_VALUE: usize = 256;

/// Checks a request's parameters: a few short keys of `[A-Za-z0-9_.-]`, each once, with short
/// values. They are a client's words kept and shown to it, so they are bounded as any input.
fn check_params(params: &[(String, String)]) -> Result<Vec<(String, String)>, String> {
    if params.len() > MAX_PARAMS {
        return Err(format!(
            "{} parameters: a session keeps at most {MAX_PARAMS}",
            params.len()
        ));
    }
    for (i, (key, value)) in params.iter().enumerate() {
        let key_ok = !key.is_empty()
            && key.len() <= MAX_PARAM_KEY
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !key_ok {
            return Err(format!(
                "parameter key {key:?} is not 1 to {MAX_PARAM_KEY} characters of A-Z, a-z,                  0-9, `_`, `.` and `-`"
            ));
        }
        if value.len() > MAX_PARAM_VALUE || value.chars().any(char::is_control) {
            return Err(format!(
                "parameter {key}'s value is longer than {MAX_PARAM_VALUE} bytes or holds                  control characters"
            ));
        }
        if params[..i].iter().any(|(k, _)| k == key) {
            return Err(format!("parameter {key} is given twice"));
        }
    }
    Ok(params.to_vec())
}

/// Checks that every target exists and is a process (not one of its threads), and that the
/// caller may profile it ([`may_profile`]), and that only root asks for a system-wide session.
pub fn authorize(caller: &Caller, spec: &SessionSpec) -> Result<(), SessionError> {
    if spec.system_wide && !caller.is_root() {
        return Err(SessionError::PermissionDenied(format!(
            "system-wide sessions sample every user's processes and need root; you are uid {}",
            caller.uid
        )));
    }
    for &pid in &spec.pids {
        let text = sys::read_proc(pid, "status").map_err(|_| SessionError::NoSuchProcess(pid))?;
        let status = stat::parse_status(&text)
            .map_err(|e| SessionError::Internal(format!("cannot read /proc/{pid}/status: {e}")))?;
        // The kernel filter matches processes: a thread id would silently sample nothing.
        if let Some(tgid) = status.tgid
            && tgid != pid
        {
            return Err(SessionError::InvalidArgument(format!(
                "{pid} is a thread of process {tgid}; give the process id {tgid} (vmscope \
                 samples every thread of a process)"
            )));
        }
        if caller.is_root() {
            continue;
        }
        if let Err(why) = may_profile(caller.uid, &status) {
            return Err(SessionError::PermissionDenied(format!(
                "pid {pid} ({}) {why}; you are uid {} and may only profile your own processes \
                 (or run vmscope as root)",
                status.name, caller.uid
            )));
        }
    }
    Ok(())
}

/// Whether a session owned by `owner` may sample the process whose `/proc/PID/status` this is:
/// root may sample anything; anyone else only a process wholly their own, as ptrace requires of
/// a caller without privileges: real, effective, saved and filesystem uids all theirs, one group
/// id throughout (no setgid program) and no capability (no file-capability program). `Err` says
/// why not, as "runs as ...".
///
/// Checked at the start and again whenever the kernel says a target's credentials changed (see
/// [`crate::bpf::Guard`]): the kernel keeps a user's samples to the credentials checked here.
pub fn may_profile(owner: u32, status: &stat::ProcStatus) -> Result<(), String> {
    if owner == 0 {
        return Ok(());
    }
    let (uids, gids) = (status.uids, status.gids);
    if [uids.real, uids.effective, uids.saved, uids.filesystem] != [owner; 4] {
        return Err(format!(
            "runs as uid {} (real {})",
            uids.effective, uids.real
        ));
    }
    if [gids.effective, gids.saved, gids.filesystem] != [gids.real; 3] {
        return Err(format!(
            "runs with group {} (real group {}: a setgid program)",
            gids.effective, gids.real
        ));
    }
    match status.cap_permitted {
        Some(0) => Ok(()),
        Some(caps) => Err(format!("runs with capabilities {caps:#x}")),
        None => Err("runs with capabilities that cannot be read".to_owned()),
    }
}

/// The credentials a thread of the process whose status this is must have for a guard
/// ([`crate::bpf::Guard::Creds`]); `None` when its capabilities could not be read.
pub fn creds_of(status: &stat::ProcStatus) -> Option<vmscope_common::Creds> {
    let (u, g) = (status.uids, status.gids);
    Some(vmscope_common::Creds::new(
        [u.real, u.effective, u.saved, u.filesystem],
        [g.real, g.effective, g.saved, g.filesystem],
        status.cap_permitted?,
    ))
}

/// Whether process `pid` may be sampled for a session owned by `owner` now ([`may_profile`];
/// false when it cannot be read).
pub fn owner_may_profile(owner: u32, pid: u32) -> bool {
    sys::read_status(pid)
        .ok()
        .is_some_and(|s| may_profile(owner, &s).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request; no frequency is the API's default, 1400 Hz (the server fills it in).
    fn request(pids: &[u32], system_wide: bool, freq: Option<u32>) -> SessionRequest {
        SessionRequest {
            pids: pids.to_vec(),
            system_wide,
            frequency_hz: freq.unwrap_or(1400),
            ..Default::default()
        }
    }

    /// The kernel's limit alone.
    fn limits(kernel_hz: u32) -> FrequencyLimits {
        FrequencyLimits {
            kernel_hz,
            daemon_hz: u32::MAX,
        }
    }

    fn message(result: Result<SessionSpec, SessionError>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn parameters_are_kept_as_given_and_bounded() {
        let with = |params: &[(&str, &str)]| {
            let mut r = request(&[1], false, None);
            r.params = params
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            validate(&r, limits(100_000))
        };
        let spec = with(&[("n", "1000"), ("build.id", "a-1")]).unwrap();
        assert_eq!(
            spec.params,
            [
                ("n".to_owned(), "1000".to_owned()),
                ("build.id".to_owned(), "a-1".to_owned())
            ]
        );
        assert!(message(with(&[("n", "1"), ("n", "2")])).contains("given twice"));
        assert!(message(with(&[("", "1")])).contains("is not 1 to 64"));
        assert!(message(with(&[("a b", "1")])).contains("is not 1 to 64"));
        assert!(message(with(&[("n", "1\n2")])).contains("control characters"));
        let long = "x".repeat(MAX_PARAM_VALUE + 1);
        assert!(message(with(&[("n", &long)])).contains("longer than 256"));
        let many: Vec<(String, String)> = (0..=MAX_PARAMS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert!(message(with(&many)).contains("at most 16"));
    }

    #[test]
    fn defaults_and_dedup() {
        let spec = validate(&request(&[5, 7, 5], false, None), limits(100_000)).unwrap();
        assert_eq!(spec.pids, vec![5, 7]);
        assert_eq!(spec.frequency_hz, 1400);
        assert_eq!(spec.duration, None);
    }

    #[test]
    fn the_lower_of_the_kernel_and_the_daemon_ceilings_holds() {
        let limits = FrequencyLimits {
            kernel_hz: 100_000,
            daemon_hz: DEFAULT_MAX_FREQUENCY_HZ,
        };
        assert!(validate(&request(&[1], false, Some(10_000)), limits).is_ok());
        // What the kernel allows, and took 28 s for 0.66 s of work.
        let above = message(validate(&request(&[1], false, Some(100_000)), limits));
        for words in [
            "100000 Hz is above this daemon's ceiling of 10000 Hz",
            "kernel.perf_event_max_sample_rate is 100000",
            "--max-frequency 100000",
        ] {
            assert!(above.contains(words), "{words:?} not in {above}");
        }
        // A kernel limit under the daemon's: the kernel's is the one named.
        let lowered = FrequencyLimits {
            kernel_hz: 5_000,
            daemon_hz: DEFAULT_MAX_FREQUENCY_HZ,
        };
        let above = message(validate(&request(&[1], false, Some(6_000)), lowered));
        assert!(
            above.contains("kernel's limit of 5000 Hz")
                && above.contains("perf_event_max_sample_rate is 5000")
                && above.contains("sysctl kernel.perf_event_max_sample_rate=6000"),
            "{above}"
        );
    }

    #[test]
    fn bad_shapes_are_refused_with_a_reason() {
        assert!(
            message(validate(&request(&[], false, None), limits(100_000))).contains("no target")
        );
        assert!(
            message(validate(&request(&[1], true, None), limits(100_000))).contains("not both")
        );
        assert!(message(validate(&request(&[0], false, None), limits(100_000))).contains("pid 0"));
        assert!(
            message(validate(&request(&[1], false, Some(0)), limits(100)))
                .contains("at least 1 Hz")
        );
        let above = message(validate(&request(&[1], false, Some(101)), limits(100)));
        assert!(
            above.contains("101 Hz") && above.contains("limit of 100 Hz"),
            "{above}"
        );
        assert!(validate(&request(&[1], false, Some(100)), limits(100)).is_ok());
        let mut r = request(&[1], false, Some(100));
        r.duration = Some(Duration::ZERO);
        assert!(message(validate(&r, limits(100))).contains("positive"));
        r.duration = Some(Duration::from_millis(1500));
        assert_eq!(
            validate(&r, limits(100)).unwrap().duration,
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn authorization_follows_uids() {
        let me = std::process::id();
        let my_uid = sys::effective_uid();
        let spec = validate(&request(&[me], false, None), limits(100_000)).unwrap();
        let owner = Caller {
            uid: my_uid,
            pid: None,
        };
        assert!(authorize(&owner, &spec).is_ok());
        let stranger = Caller {
            uid: my_uid + 12345,
            pid: None,
        };
        let denied = authorize(&stranger, &spec).unwrap_err();
        assert!(
            matches!(denied, SessionError::PermissionDenied(_)),
            "{denied}"
        );
        assert!(denied.to_string().contains(&format!("pid {me}")));

        let system = validate(&request(&[], true, None), limits(100_000)).unwrap();
        assert!(matches!(
            authorize(&stranger, &system),
            Err(SessionError::PermissionDenied(_))
        ));
        let root = Caller { uid: 0, pid: None };
        assert!(authorize(&root, &system).is_ok());
    }

    #[test]
    fn dwarf_stack_sizes_follow_perf() {
        let dwarf = |bytes: Option<u32>| {
            let mut r = request(&[1], false, None);
            r.call_graph = CallGraphMode::Dwarf;
            r.dwarf_stack_bytes = bytes;
            validate(&r, limits(100_000)).map(|s| s.call_graph)
        };
        assert_eq!(dwarf(None).unwrap(), CallGraph::Dwarf { stack_bytes: 8192 });
        assert_eq!(
            dwarf(Some(16384)).unwrap(),
            CallGraph::Dwarf { stack_bytes: 16384 }
        );
        assert_eq!(
            dwarf(Some(65528)).unwrap().wants(),
            Wants {
                user_copy_bytes: 65528,
                ..Wants::default()
            }
        );
        for bad in [0, 12, 65536, u32::MAX - 7] {
            let err = dwarf(Some(bad)).unwrap_err().to_string();
            assert!(
                err.contains(&format!("dwarf_stack_bytes {bad}")) && err.contains("65528"),
                "{err}"
            );
        }
        let mut fp = request(&[1], false, None);
        fp.dwarf_stack_bytes = Some(8192);
        assert!(message(validate(&fp, limits(100_000))).contains("CALL_GRAPH_DWARF only"));
        fp.dwarf_stack_bytes = None;
        let spec = validate(&fp, limits(100_000)).unwrap();
        assert_eq!(spec.call_graph, CallGraph::FramePointers);
        assert_eq!(spec.call_graph.dwarf_stack_bytes(), 0);
        assert_eq!(spec.call_graph.wants().flags, WANT_STACKS);
    }

    /// Off-CPU and wall sessions take the sampling channel, the off-CPU one or both, need
    /// stacks, and say their minimum block to the off-CPU channel alone.
    #[test]
    fn modes_take_their_channels_and_need_stacks() {
        let spec_of = |mode, min_block, call_graph| {
            let mut r = request(&[1], false, Some(1000));
            r.mode = ModeRequest::Known(mode);
            r.min_block = min_block;
            r.call_graph = call_graph;
            validate(&r, limits(100_000))
        };
        let fp = CallGraphMode::FramePointers;
        let cpu = spec_of(ProfileMode::Cpu, None, fp).unwrap();
        assert_eq!(cpu.channels().collect::<Vec<_>>(), [1_000_000]);
        let off = spec_of(ProfileMode::OffCpu, Some(Duration::from_micros(50)), fp).unwrap();
        assert_eq!(off.channels().collect::<Vec<_>>(), [OFF_CPU_PERIOD]);
        assert_eq!(off.wants_at(OFF_CPU_PERIOD).min_block_ns, 50_000);
        assert_eq!(off.wants_at(OFF_CPU_PERIOD).flags, WANT_STACKS);
        let wall = spec_of(ProfileMode::Wall, Some(Duration::from_millis(1)), fp).unwrap();
        assert_eq!(
            wall.channels().collect::<Vec<_>>(),
            [1_000_000, OFF_CPU_PERIOD]
        );
        assert_eq!(
            wall.wants_at(1_000_000).min_block_ns,
            0,
            "samples have no blocks"
        );
        let no_stacks = spec_of(ProfileMode::OffCpu, None, CallGraphMode::None);
        assert!(message(no_stacks).contains("needs call stacks"));
        let cpu_min = spec_of(ProfileMode::Cpu, Some(Duration::from_millis(1)), fp);
        assert!(message(cpu_min).contains("off-CPU and wall modes only"));
        let long = spec_of(ProfileMode::Wall, Some(Duration::from_secs(61)), fp);
        assert!(message(long).contains("longer than the 60s"));
        let mut newer = request(&[1], false, None);
        newer.mode = ModeRequest::Unknown(9);
        assert!(message(validate(&newer, limits(100_000))).contains("unknown mode 9"));
    }

    #[test]
    fn huge_requests_are_refused_before_any_work() {
        let pids: Vec<u32> = (1..=2_000_000).collect();
        let err = message(validate(&request(&pids, false, None), limits(100_000)));
        assert!(err.contains("2000000 target processes"), "{err}");
    }

    #[test]
    fn a_thread_id_names_its_process() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let spec = validate(&request(&[tid], false, None), limits(100_000)).unwrap();
        let root = Caller { uid: 0, pid: None };
        let err = authorize(&root, &spec).unwrap_err().to_string();
        assert!(
            err.contains(&format!("thread of process {}", std::process::id())),
            "{err}"
        );
        done_tx.send(()).unwrap();
        thread.join().unwrap();
        assert!(owner_may_profile(0, std::process::id()));
        assert!(owner_may_profile(sys::effective_uid(), std::process::id()));
        assert!(!owner_may_profile(
            sys::effective_uid() + 777,
            std::process::id()
        ));
    }

    #[test]
    fn a_user_may_profile_only_processes_wholly_their_own() {
        let status = |uids: [u32; 4], gids: [u32; 4], caps: Option<u64>| {
            let ids = |[real, effective, saved, filesystem]: [u32; 4]| stat::Ids {
                real,
                effective,
                saved,
                filesystem,
            };
            stat::ProcStatus {
                name: "x".to_owned(),
                tgid: None,
                nspid: None,
                uids: ids(uids),
                gids: ids(gids),
                cap_permitted: caps,
            }
        };
        let mine = status([1000; 4], [100; 4], Some(0));
        assert_eq!(may_profile(1000, &mine), Ok(()));
        assert_eq!(
            creds_of(&mine),
            Some(vmscope_common::Creds {
                ids: [1000, 100, 1000, 100, 1000, 100, 1000, 100],
                cap_permitted: 0
            })
        );
        let refused = [
            // A setuid-root program, and one that made itself root throughout (sudo).
            (status([1000, 0, 0, 0], [100; 4], Some(0)), "runs as uid 0"),
            (status([0; 4], [100; 4], Some(0)), "runs as uid 0"),
            // A saved or filesystem uid kept from a setuid program.
            (status([1000, 1000, 0, 1000], [100; 4], Some(0)), "uid"),
            (status([1000, 1000, 1000, 0], [100; 4], Some(0)), "uid"),
            // A setgid program (unix_chkpwd, group shadow).
            (status([1000; 4], [100, 42, 42, 42], Some(0)), "setgid"),
            (status([1000; 4], [100, 100, 42, 100], Some(0)), "setgid"),
            // A file-capability program, and capabilities not known.
            (
                status([1000; 4], [100; 4], Some(1 << 13)),
                "capabilities 0x2000",
            ),
            (status([1000; 4], [100; 4], None), "cannot be read"),
        ];
        for (status, why) in refused {
            let err = may_profile(1000, &status).unwrap_err();
            assert!(err.contains(why), "{err} for {status:?}");
            assert_eq!(may_profile(0, &status), Ok(()), "root may profile anything");
        }
        assert!(may_profile(1001, &mine).is_err(), "another user's");
        assert_eq!(creds_of(&status([1000; 4], [100; 4], None)), None);
    }

    #[test]
    fn missing_process_is_not_found() {
        // Pids above pid_max (4194304 at most) never exist.
        let spec = validate(&request(&[4_194_305], false, None), limits(100_000)).unwrap();
        let root = Caller { uid: 0, pid: None };
        assert!(matches!(
            authorize(&root, &spec),
            Err(SessionError::NoSuchProcess(4_194_305))
        ));
    }
}
