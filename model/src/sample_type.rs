//! What a stack's values measure: the sample types of a profile.

use serde::{Deserialize, Serialize};

/// One kind of value every stack of a profile carries, in [`crate::Profile::sample_types`]
/// order: [`crate::Stack::values`] holds one number per type. The first type of every profile
/// is [`SampleType::Samples`], the events counted; the others weigh them (the CPU time they
/// stand for today; off-CPU time and the VM's counts fit here as further types, each a
/// variant, without a new row or stack type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleType {
    /// Samples taken: one per tick of the sampling clock that landed in a target.
    Samples,
    /// CPU time the samples stand for, in nanoseconds: one sampling interval each.
    CpuTime,
}

impl SampleType {
    /// How JSON spells it: the variant in snake case.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Samples => "samples",
            Self::CpuTime => "cpu_time",
        }
    }

    /// pprof's and OpenTelemetry's name of the type (`ValueType.type`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Samples => "samples",
            Self::CpuTime => "cpu",
        }
    }

    /// Its unit, as pprof spells units (`ValueType.unit`).
    pub fn unit(self) -> &'static str {
        match self {
            Self::Samples => "count",
            Self::CpuTime => "nanoseconds",
        }
    }
}
