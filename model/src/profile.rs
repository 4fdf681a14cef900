//! A session's profile: its facts, frames, stacks, rows and notes.

use serde::{Deserialize, Serialize};

use crate::{
    AttributedSample, Frame, IntervalKind, KernelEvents, OffCpu, ProfileMode, ProfileRow,
    SampleType, Session, Stack, StackEndSamples, StackFrames, StackNode, SymbolizationIssue,
    Thread, VmStatistics,
};

/// What one session measured, aggregated and symbolised: every report renders from it.
///
/// Frames are interned: each distinct frame once in [`Profile::frames`], stacks name them by
/// index; and so are stacks, as a prefix tree ([`Profile::stack_nodes`]). Rows are the stacks summed by leaf (self) and by every frame (inclusive), with the
/// detail of where in the code samples fell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The session, as when the profile was built.
    pub session: Option<Session>,
    /// Main executable of the (first) target; empty for system-wide sessions.
    pub vm_executable: String,
    /// Every sample of the targets: "samples in the whole program".
    pub total_samples: u64,
    /// Samples the kernel took but could not deliver (the ring buffer, or a user's share of
    /// it, was full). Never hidden.
    pub lost_samples: u64,
    /// `lost_samples` by CPU, indexed by CPU number.
    pub lost_samples_per_cpu: Vec<u64>,
    /// Wall-clock time sampled.
    pub duration_seconds: f64,
    /// CPU time the targets (or, system-wide, all processes) used while sampled.
    pub cpu_seconds: f64,
    /// `total_samples / cpu_seconds`: samples per second per busy CPU.
    pub measured_frequency_hz: f64,
    /// Samples the kernel took, delivered plus lost, per busy CPU-second.
    pub taken_frequency_hz: f64,
    /// The kernel took clearly fewer samples than asked ([`taken_rate`]): judged once, for
    /// every report and client.
    pub throttled: bool,
    /// Rows, one per (section, module, name), most samples first; not folded.
    pub rows: Vec<ProfileRow>,
    /// Samples that could not be symbolised, by module and reason.
    pub symbolization_issues: Vec<SymbolizationIssue>,
    /// Whether any target has anonymous executable mappings (JIT code).
    pub has_generated_code: bool,
    /// The session stopped and every sample taken before the stop was read and attributed.
    pub complete: bool,
    /// Why a stopped session's profile is not complete, for a person; empty otherwise.
    pub incomplete_reason: String,
    /// Kept samples, in time order.
    pub samples: Vec<AttributedSample>,
    /// Samples beyond those kept, counted but not kept.
    pub samples_not_kept: u64,
    /// Share of the host's CPU time a hypervisor took for others while the session ran, in
    /// percent.
    pub host_steal_percent: f64,
    /// Samples in generated code attributed before their code map was known up to their time.
    pub jit_samples_before_code_map: u64,
    /// Of those, the ones whose code map may still catch up.
    pub jit_samples_awaiting_code_map: u64,
    /// Samples first counted provisionally, then placed again in the map of their time.
    pub jit_samples_caught_up: u64,
    /// Samples in generated code named from a perf map read after them: not time-correct.
    pub jit_samples_from_later_snapshot: u64,
    /// Distinct processes with samples.
    pub processes: u32,
    /// Each distinct frame once.
    pub frames: Vec<Frame>,
    /// The stack tree: each distinct (caller, frame) once, callers before their callees
    /// ([`crate::stack_tree`]). Each stack names its leaf's node.
    pub stack_nodes: Vec<StackNode>,
    /// What each stack's [`Stack::values`] measure, in order: [`SampleType::Samples`] first.
    pub sample_types: Vec<SampleType>,
    /// Values per distinct (process, thread, stack, end, intervals), most samples first. Every
    /// sample is in exactly one.
    pub stacks: Vec<Stack>,
    /// The threads the stacks name, most samples first.
    pub threads: Vec<Thread>,
    /// Samples whose stack was cut at the depth limit.
    pub truncated_stacks: u64,
    /// Samples per way their stacks ended (sessions with a call graph), most first.
    pub stack_ends: Vec<StackEndSamples>,
    /// What the kernel counted for the targets; `None` for system-wide sessions.
    pub kernel_events: Option<KernelEvents>,
    /// What the VMs among the targets published of their own statistics, by pid.
    pub vm_statistics: Vec<VmStatistics>,
    /// The kinds of VM interval that [`Stack::during`] and kept samples name, each once.
    pub vm_interval_kinds: Vec<IntervalKind>,
    /// The labels that [`Stack::labels`] name, each distinct (key, value) once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<crate::Label>,
    /// The labels the profile was cut to, for a person (`phase=a`); empty when it has every
    /// sample.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label_filter: String,
    /// Off-CPU and wall profiles: the time off the CPU, its rows and what was left out.
    pub off_cpu: Option<OffCpu>,
    /// The threads the profile was cut to, for a person (`tid 4243, threads named GC*`);
    /// empty when it has every thread.
    pub thread_filter: String,
    /// The native functions whose calls were counted (`record --count`), per target.
    pub call_counts: Vec<CallCount>,
}

impl Profile {
    /// The frames of `stack`, leaf first, as indices into [`Profile::frames`].
    pub fn stack_frames(&self, stack: &Stack) -> StackFrames<'_> {
        StackFrames::new(&self.stack_nodes, stack.node)
    }

    /// Where values of `kind` are in each stack's [`Stack::values`]; `None` when the profile
    /// does not measure it.
    pub fn value_index(&self, kind: SampleType) -> Option<usize> {
        self.sample_types.iter().position(|&t| t == kind)
    }

    /// What the session measured (CPU samples from a daemon that does not say).
    pub fn mode(&self) -> ProfileMode {
        self.session.as_ref().map_or(ProfileMode::Cpu, |s| s.mode)
    }

    /// The type stacks are ranked and drawn by, and where it is in their values: its samples,
    /// its time off the CPU, its wall-clock time ([`SampleType::main_of`]); the first type
    /// when the profile lacks that one.
    pub fn main_value(&self) -> (SampleType, usize) {
        let main = SampleType::main_of(self.mode());
        match self.value_index(main) {
            Some(index) => (main, index),
            None => (
                self.sample_types
                    .first()
                    .copied()
                    .unwrap_or(SampleType::Samples),
                0,
            ),
        }
    }

    /// The labels of `stack`, in key order.
    pub fn labels_of<'a>(
        &'a self,
        stack: &'a Stack,
    ) -> impl Iterator<Item = &'a crate::Label> + Clone + 'a {
        stack
            .labels
            .iter()
            .filter_map(|&i| self.labels.get(i as usize))
    }

    /// The value of label `key` of `stack`, if it has one.
    pub fn label_of<'a>(&'a self, stack: &'a Stack, key: &str) -> Option<&'a str> {
        self.labels_of(stack)
            .find(|l| l.key == key)
            .map(|l| l.value.as_str())
    }

    /// A stack's value of the main type ([`Profile::main_value`]).
    pub fn main_of(&self, stack: &Stack) -> u64 {
        stack.values.get(self.main_value().1).copied().unwrap_or(0)
    }
}

/// Below this share of the requested rate, samples taken (delivered plus lost) say the kernel
/// throttled sampling: the rate a cpu-clock event keeps, bunched or stolen ticks included, is
/// well above it.
pub const THROTTLED_BELOW: f64 = 0.9;

/// Least CPU time a throttling judgement is made over: below it, ticks are too few.
pub const THROTTLE_MIN_CPU_SECONDS: f64 = 0.5;

/// The rate the kernel took `taken` samples at, per busy CPU-second of `cpu_seconds`, and
/// whether it throttled sampling below `requested_hz`: the kernel lowers
/// `kernel.perf_event_max_sample_rate` when interrupts take too long, and no counter says so.
pub fn taken_rate(taken: u64, cpu_seconds: f64, requested_hz: u32) -> (f64, bool) {
    if cpu_seconds <= 0.0 {
        return (0.0, false);
    }
    let rate = taken as f64 / cpu_seconds;
    let throttled = requested_hz > 0
        && cpu_seconds >= THROTTLE_MIN_CPU_SECONDS
        && rate < THROTTLED_BELOW * f64::from(requested_hz);
    (rate, throttled)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Throttling is judged once, for every report and client: samples taken (lost ones included,
    /// as the daemon counts them) under 90% of the asked rate, over half a CPU-second or
    /// more.
    #[test]
    fn throttling_is_judged_on_the_samples_taken() {
        // 14,000 delivered + 16 lost over 10.012 CPU-seconds at 1400 Hz: the rate kept.
        let (rate, throttled) = taken_rate(14_016, 10.012, 1400);
        assert!((rate - 1400.0).abs() < 1.0 && !throttled, "{rate}");
        // The same samples over twice the CPU time: half the rate.
        let (rate, throttled) = taken_rate(14_016, 20.024, 1400);
        assert!((rate - 700.0).abs() < 1.0 && throttled, "{rate}");
        // Lost samples were taken: a full ring is not throttling.
        assert!(!taken_rate(700 + 700, 1.0, 1400).1);
        // Too little CPU time to judge, or none.
        assert!(!taken_rate(100, 0.4, 1400).1);
        assert_eq!(taken_rate(100, 0.0, 1400), (0.0, false));
    }

    #[test]
    fn a_profile_reads_back_from_its_json() {
        let profile = Profile {
            total_samples: 3,
            frames: vec![Frame {
                name: "hot".into(),
                kind: Some(crate::CodeKind::ClosedPic),
                ..Frame::default()
            }],
            stack_nodes: vec![StackNode {
                frame: 0,
                caller: None,
            }],
            sample_types: vec![SampleType::Samples, SampleType::CpuTime],
            stacks: vec![Stack {
                node: Some(0),
                values: vec![3, 3_000_000],
                end: Some(crate::StackEnd::Complete),
                ..Stack::default()
            }],
            vm_interval_kinds: vec![IntervalKind::Named("marking".into())],
            ..Profile::default()
        };
        let json = serde_json::to_string(&profile).unwrap();
        assert!(json.contains(r#""kind":"closed_pic""#), "{json}");
        assert_eq!(serde_json::from_str::<Profile>(&json).unwrap(), profile);
    }
}

/// A native function's calls in one target over the session, counted exactly by a uprobe at its
/// entry (`record --count 'libc.so.6:malloc'`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCount {
    /// As asked: `MODULE:FUNCTION`.
    pub function: String,
    /// The target.
    pub pid: u32,
    /// The file the uprobe was attached to.
    pub path: String,
    /// Its calls.
    pub calls: u64,
    /// Empty when counted; else why not, and `calls` is 0.
    pub note: String,
}
