//! The vmscope profile model: what one session measured, in the daemon's and the reports'
//! own types.
//!
//! The daemon's aggregator (`vmscoped`'s `profile/`) builds a [`Profile`]; `vmscope-proto`
//! carries it over gRPC as `vmscope.v1.Profile` (its `model` module converts both ways, the only
//! place the two meet); `vmscope-report` renders every output from it (text, JSON, pprof,
//! folded stacks, flame graphs, call trees). Neither the daemon's core nor the renderers see a
//! protobuf type: an enum here is a Rust enum, a timestamp a [`std::time::SystemTime`].
//!
//! Pure: no I/O, no gRPC. Every type serialises with serde.
//!
//! - [`profile`]: the [`Profile`] and its session-wide facts, each judged once (throttling).
//! - [`domain_event`]: the program's own events counted by type, object and second.
//! - [`frame`]: a distinct frame ([`Frame`]): its section, name, module, code kind, range and
//!   source line.
//! - [`stack`]: values per (process, thread, stack of frames), how each stack ended, the VM's
//!   intervals they were taken during, and kept samples.
//! - [`stack_tree`]: stacks as a prefix tree, each distinct (caller, frame) once.
//! - [`sample_type`]: what a stack's values measure (samples, the CPU time they stand for).
//! - [`thread`]: the threads samples were taken in, with their names and times.
//! - [`off_cpu`]: time off the CPU: why threads waited, its rows, what was left out.
//! - [`row`]: self and inclusive samples per (section, module, name), with their ranges,
//!   inlined methods, processes and source lines.
//! - [`label`]: what the program said it was doing at a sample ([`Label`]), and filters by it.
//! - [`issue`]: samples that could not be symbolised, by module and typed reason.
//! - [`session`]: the session a profile is of.
//! - [`vm_stats`], [`kernel`]: what the VMs published of their own statistics, and what the
//!   kernel counted.
//! - [`heap`]: what fills a process's heap: class histograms, and what grew between two.
//! - [`merge`]: profiles of disjoint samples (continuous profiling's windows) added into one.
//! - [`rank`]: the one order of every ranked list.
#![deny(missing_docs)]

pub mod domain_event;
pub mod frame;
pub mod heap;
pub mod issue;
pub mod kernel;
pub mod label;
pub mod merge;
pub mod off_cpu;
pub mod profile;
pub mod rank;
pub mod row;
pub mod sample_type;
pub mod session;
pub mod stack;
pub mod stack_tree;
pub mod thread;
pub mod vm_stats;

pub use domain_event::{DomainEventType, EventStack, ObjectEvents};
pub use frame::{CodeKind, Frame, Section};
pub use issue::{IssueKind, SymbolizationIssue};
pub use kernel::{KernelCounts, KernelEvents, ProcessKernelCounts};
pub use label::{Label, LabelFilter, LabelFilterError};
pub use off_cpu::{BlockState, OffCpu, StateTime};
pub use profile::{CallCount, Profile};
pub use row::{
    CodeRange, InlinedMethod, LabelSetSamples, ProcessSamples, ProfileRow, SourceLineSamples,
    ThreadSamples,
};
pub use sample_type::SampleType;
pub use session::{CallGraph, ProfileMode, Session, SessionState, TargetProcess};
pub use stack::{AttributedSample, Stack, StackEnd, StackEndSamples, StackFrame, StackKey};
pub use stack_tree::{StackFrames, StackNode, StackTreeBuilder};
pub use thread::{IntervalTime, Thread};
pub use vm_stats::{
    ConfigValue, Configuration, CounterDelta, ExactCounts, GaugeDelta, IntervalKind,
    IntervalTotals, NamedCount, VmStatistics,
};

#[cfg(test)]
mod tests {
    use super::*;

    /// JSON (serde) and the text, pprof and `--sort` renderers (`as_str`) spell every enum
    /// value the same way: two spellings that could drift apart are checked here.
    #[test]
    fn serde_spells_every_enum_as_as_str_does() {
        fn same<T: serde::Serialize + std::fmt::Debug>(values: &[T], as_str: impl Fn(&T) -> &str) {
            for value in values {
                let json = serde_json::to_string(value).unwrap();
                assert_eq!(json, format!("\"{}\"", as_str(value)), "{value:?}");
            }
        }
        same(&Section::ALL, |s| s.as_str());
        same(
            &[
                CodeKind::Method,
                CodeKind::Block,
                CodeKind::Trampoline,
                CodeKind::Enilopmart,
                CodeKind::ClosedPic,
                CodeKind::OpenPic,
                CodeKind::Stub,
                CodeKind::Unknown,
            ],
            |k| k.as_str(),
        );
        same(
            &[
                StackEnd::Complete,
                StackEnd::DepthLimit,
                StackEnd::NoFramePointer,
                StackEnd::UnmappedReturn,
                StackEnd::CopyTooSmall,
                StackEnd::CopyFaulted,
                StackEnd::UnwindFailed,
                StackEnd::JitNoFramePointer,
                StackEnd::StackLimit,
            ],
            |e| e.as_str(),
        );
        same(
            &[
                IssueKind::BinaryUnreadable,
                IssueKind::OutsideSegments,
                IssueKind::Stripped,
                IssueKind::NoSymbol,
                IssueKind::BinaryClosed,
                IssueKind::KernelAddressesHidden,
                IssueKind::NotInKallsyms,
                IssueKind::KernelNotShown,
                IssueKind::JitUnexplained,
                IssueKind::ProcessGone,
                IssueKind::Unmapped,
                IssueKind::MappingsUnreadable,
                IssueKind::PseudoMapping,
                IssueKind::DaemonBug,
            ],
            |k| k.as_str(),
        );
        same(&[CallGraph::None, CallGraph::Fp, CallGraph::Dwarf], |c| {
            c.as_str()
        });
        same(&IntervalKind::PROTOCOL, |k| k.key());
        same(SampleType::of_mode(crate::ProfileMode::Wall), |t| {
            t.as_str()
        });
    }
}
