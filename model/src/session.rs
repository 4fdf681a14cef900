//! The session a profile is of, as its header names it.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// A sampling session: what was asked, and where it stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The daemon's id for it.
    pub id: u64,
    /// Where it stands; `None` from a daemon that does not say.
    pub state: Option<SessionState>,
    /// The processes it was started for; empty for a system-wide session.
    pub targets: Vec<TargetProcess>,
    /// It samples every process of the host.
    pub system_wide: bool,
    /// Samples per second per busy CPU asked for.
    pub frequency_hz: u32,
    /// When it started.
    pub started_at: Option<SystemTime>,
    /// How long it has sampled (to its stop, once stopped).
    pub elapsed: Option<Duration>,
    /// When it stops by itself, if it does.
    pub duration_limit: Option<Duration>,
    /// Why it stopped, for a person; empty while it runs.
    pub stop_reason: String,
    /// The user that started it.
    pub owner_uid: u32,
    /// Samples so far.
    pub samples: u64,
    /// How it records call stacks; `None` from a daemon that does not say.
    pub call_graph: Option<CallGraph>,
    /// `dwarf` stacks: the bytes of stack copied per sample.
    pub dwarf_stack_bytes: u32,
    /// Samples in generated code waiting for their code map to catch up.
    pub awaiting_code_map_samples: u64,
    /// Most distinct stacks it keeps.
    pub max_stacks: u64,
    /// Samples counted by leaf alone once it held `max_stacks`.
    pub stack_limit_samples: u64,
    /// Samples counted unlabelled because their thread's label set was new once the session
    /// told apart as many as it keeps (4,096).
    #[serde(default)]
    pub label_limit_samples: u64,
    /// What it measures: CPU time (samples), time off the CPU, or both (wall-clock time).
    pub mode: ProfileMode,
    /// Off-CPU and wall sessions: blocks shorter than this were counted, not recorded with
    /// their stacks (`--min-block`), in nanoseconds.
    pub min_block_ns: u64,
    /// The workload parameters it was recorded with (`record --param n=1000`), in the order
    /// given: what `vmscope fit` fits costs against.
    pub params: Vec<(String, String)>,
    /// The native functions whose calls it counts (`record --count`), as asked.
    pub counts: Vec<String>,
}

/// What a session measures (`vmscope record --mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileMode {
    /// Where the CPU time goes: samples of the CPU clock (the default).
    #[default]
    Cpu,
    /// Where the time off the CPU goes: each block of a thread (a sleep, a lock, I/O, a wait
    /// for a CPU) with the stack it blocked in and how long it lasted.
    OffCpu,
    /// Both in one profile: each thread's on-CPU samples, weighted by the sampling period,
    /// and its off-CPU time, so that a thread's total is its elapsed time.
    Wall,
}

impl ProfileMode {
    /// How `--mode` and the report spell it: `cpu`, `off-cpu` or `wall`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::OffCpu => "off-cpu",
            Self::Wall => "wall",
        }
    }

    /// Whether it samples the CPU clock.
    pub fn on_cpu(self) -> bool {
        self != Self::OffCpu
    }

    /// Whether it records time off the CPU.
    pub fn off_cpu(self) -> bool {
        self != Self::Cpu
    }
}

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Sampling.
    Running,
    /// Stopped; waiting for the last samples to be read.
    Stopping,
    /// Stopped.
    Stopped,
}

/// How a session records call stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallGraph {
    /// The leaf only.
    None,
    /// The kernel walks frame pointers.
    Fp,
    /// The daemon unwinds copies of the stack with DWARF CFI.
    Dwarf,
}

impl CallGraph {
    /// How the report and `--call-graph` spell it: `none`, `fp` or `dwarf`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Fp => "fp",
            Self::Dwarf => "dwarf",
        }
    }

    /// Whether samples carry stacks of callers.
    pub fn has_stacks(self) -> bool {
        self != Self::None
    }
}

/// A process a session was started for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetProcess {
    /// Its pid.
    pub pid: u32,
    /// Its command (`comm`).
    pub command: String,
    /// Its main executable.
    pub executable: String,
    /// It exited during the session: its samples are still in the profile.
    pub exited: bool,
    /// Why sampling of it ended before the session did, other than exiting (empty if not).
    pub note: String,
}
