//! What a stack's values measure: the sample types of a profile.

use serde::{Deserialize, Serialize};

/// One kind of value every stack of a profile carries, in [`crate::Profile::sample_types`]
/// order: [`crate::Stack::values`] holds one number per type. The first type of every profile
/// is the events counted: [`SampleType::Samples`] where the CPU clock was sampled (`cpu` and
/// `wall` modes), [`SampleType::OffCpuBlocks`] for an off-CPU profile; the others weigh them
/// (the CPU time samples stand for, the time blocks lasted, their sum). The VM's counts fit
/// here as further types, each a variant, without a new row or stack type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleType {
    /// Samples taken: one per tick of the sampling clock that landed in a target.
    Samples,
    /// CPU time the samples stand for, in nanoseconds: one sampling interval each.
    CpuTime,
    /// Blocks: times a thread left its CPU and came back (off-CPU and wall profiles).
    OffCpuBlocks,
    /// Time off the CPU, in nanoseconds: how long the blocks lasted.
    OffCpuTime,
    /// Wall-clock time, in nanoseconds: the CPU time samples stand for plus the time off the
    /// CPU (wall profiles), so that each thread's total is its elapsed time.
    WallTime,
    /// Sends (message sends, calls: what the VM counts) its thread executed since its previous
    /// sample, read from the thread's own counter with each sample: a stack weighed by the
    /// work done in it rather than the time. After the mode's types, in profiles of VMs that
    /// publish per-thread send counters.
    Sends,
}

impl SampleType {
    /// How JSON spells it: the variant in snake case.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Samples => "samples",
            Self::CpuTime => "cpu_time",
            Self::OffCpuBlocks => "off_cpu_blocks",
            Self::OffCpuTime => "off_cpu_time",
            Self::WallTime => "wall_time",
            Self::Sends => "sends",
        }
    }

    /// pprof's and OpenTelemetry's name of the type (`ValueType.type`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Samples => "samples",
            Self::CpuTime => "cpu",
            Self::OffCpuBlocks => "off_cpu_blocks",
            Self::OffCpuTime => "off_cpu",
            Self::WallTime => "wall",
            Self::Sends => "sends",
        }
    }

    /// Its unit, as pprof spells units (`ValueType.unit`).
    pub fn unit(self) -> &'static str {
        match self {
            Self::Samples | Self::OffCpuBlocks | Self::Sends => "count",
            Self::CpuTime | Self::OffCpuTime | Self::WallTime => "nanoseconds",
        }
    }

    /// The sample types of a profile of `mode`, in order: the events counted first.
    pub fn of_mode(mode: crate::ProfileMode) -> &'static [SampleType] {
        use crate::ProfileMode::*;
        match mode {
            Cpu => &[Self::Samples, Self::CpuTime],
            OffCpu => &[Self::OffCpuBlocks, Self::OffCpuTime],
            Wall => &[
                Self::Samples,
                Self::CpuTime,
                Self::OffCpuBlocks,
                Self::OffCpuTime,
                Self::WallTime,
            ],
        }
    }

    /// The type a profile of `mode` ranks and draws by (pprof's default sample type): its
    /// samples, its time off the CPU, its wall-clock time.
    pub fn main_of(mode: crate::ProfileMode) -> SampleType {
        use crate::ProfileMode::*;
        match mode {
            Cpu => Self::Samples,
            OffCpu => Self::OffCpuTime,
            Wall => Self::WallTime,
        }
    }

    /// The type named `name` as [`SampleType::as_str`] or [`SampleType::name`] spell it
    /// (`--weight`).
    pub fn from_name(name: &str) -> Option<SampleType> {
        use SampleType::*;
        [Samples, CpuTime, OffCpuBlocks, OffCpuTime, WallTime, Sends]
            .into_iter()
            .find(|t| t.as_str() == name || t.name() == name)
    }

    /// Whether its values are durations in nanoseconds.
    pub fn is_time(self) -> bool {
        self.unit() == "nanoseconds"
    }
}
