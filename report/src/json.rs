//! The JSON report (`--format json`): the model serialised with serde, for
//! scripts and CI. The model's types derive `Serialize`, so the document's fields are the
//! model's, documented where they are declared ([`Report`] and what it holds,
//! [`crate::stats`], [`ShownStacks`]), in declaration order; what JSON spells differently
//! from the model is said by `#[serde]` attributes on the fields, through the helpers of this
//! module.
//!
//! - Every percentage is rounded to two decimals through [`round2`], as the text report rounds
//!   it, so that the two show the same numbers. Measurements (seconds, hertz, busy CPUs,
//!   rates) are not rounded.
//! - Names are never elided, whatever [`ReportOptions::name_width`](crate::ReportOptions) says.
//! - Values that do not apply are `null` (an `Option`, or an empty string where the model
//!   keeps one), never missing: every row object has `kind`, `code_map`, `optimised`, `ranges`
//!   and `inlined`, empty, false or null where they do not apply, so that consumers need not
//!   special-case rows. Unlike the text, which lists ranges and inlined methods only under
//!   generated code rows of at least
//!   [`ReportOptions::min_range_percent`](crate::ReportOptions) of the total, the JSON carries
//!   them for every row that has them: machines do not tire of detail. Only rows folded into
//!   `...others...` lose theirs (the fold has none); `--fold 0` keeps every row.
//! - Enums are spelt as their `as_str` says (`generated`, `closed_pic`, `language`), proto
//!   enums as the proto names them, in lower case without their prefix (`no_symbol`,
//!   `depth_limit`).
//!
//! The document is a [`JsonReport`]: the report's fields, then, when rendered with the
//! profile's stacks (what `--format json` writes), the [`StackTable`]: `stack_view`, `frames`,
//! `stacks`, `truncated_stacks` and `stack_ends`. It is serialised straight from the model,
//! never through a `serde_json::Value`, which would sort the keys; and it cannot fail.

use std::time::SystemTime;

use serde::Serialize;
use serde::ser::{SerializeStruct as _, Serializer};
use vmscope_model::{self as model, IntervalKind, IssueKind, Profile, StackEnd};

use crate::model::{Report, rfc3339_seconds, round2};
use crate::stack_view::ShownStacks;

/// The JSON document: `report`'s fields, then the stack table if there is one. Not a copy of
/// either: both are serialised where they are.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct JsonReport<'a> {
    /// The flat report.
    #[serde(flatten)]
    report: &'a Report,
    /// The call stacks, when rendered with the profile ([`JsonReport::with_stacks`]).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    stack_table: Option<StackTable<'a>>,
}

impl<'a> JsonReport<'a> {
    /// The flat report alone.
    pub fn new(report: &'a Report) -> Self {
        JsonReport {
            report,
            stack_table: None,
        }
    }

    /// The flat report followed by the stack table of the profile `report` was made from,
    /// its stacks as `shown`.
    pub fn with_stacks(report: &'a Report, shown: &'a ShownStacks<'a>) -> Self {
        JsonReport {
            report,
            stack_table: Some(StackTable { shown }),
        }
    }
}

/// The profile's call stacks, after the flat report's fields: `stack_view`, `frames`,
/// `sample_types`, `stacks`, `threads`, `truncated_stacks`, `stack_ends`. Every sample is in exactly one stack, so
/// stacks' samples add up to `total_samples`.
///
/// - `stack_view`: how the stacks are shown ([`ShownStacks`]: `frames`, `collapse_recursion`,
///   `samples_with_hidden_frames`, `samples_with_collapsed_recursion`).
/// - `frames`: each distinct frame once, as the daemon's `Profile.frames`: `name`, `module`,
///   `section` (`generated`, `vanilla`, `other`), `symbolized`, `kind` (as rows' `kind`, or
///   null), `range` (generated code: the bytecode or source range the frame's pc is in, for a
///   caller its call site, e.g. `74->78`; null when unknown), `inlined` (a method inlined into
///   the compiled code of the frame after it in the stack, or a C function the compiler inlined
///   into it), `code_map` (or null), `optimised`, `build_id` (hex, or null), `kernel`, for
///   native code with DWARF `file` and `line` (its line, for a caller its call's; null when
///   unknown), and `later_snapshot` (named from a perf map read after its samples).
/// - `sample_types`: what each stack's `values` measure, in order, the profile's main measure
///   first: `samples`, then `cpu_time` (nanoseconds of CPU the samples stand for, one sampling
///   interval each); an off-CPU profile's `off_cpu_time` (nanoseconds) then `off_cpu_blocks`;
///   a wall profile's `wall_time` (CPU time plus time off the CPU), then `samples`,
///   `cpu_time`, `off_cpu_blocks`, `off_cpu_time`; then `sends` (the sends counted with the
///   samples) where a VM's threads published send counters. `--weight` puts its type first.
/// - `stacks`: values per distinct (thread, stack), most samples first: `frames` (indices
///   into `frames`, **leaf first**: kernel frames, then user frames, outermost caller last),
///   `pid`, `tid`, `samples`, `values` (one per `sample_types`), `truncated` (cut at the depth limit: outermost callers missing), `end` (how the
///   walk ended: `complete`, `depth_limit`, `no_frame_pointer`, `jit_no_frame_pointer`,
///   `unmapped_return`, `copy_too_small`, `copy_faulted`, `unwind_failed`, `stack_limit`;
///   null without call graph), `during` (the kinds of interval its VM had under way when its
///   samples were taken, as `vm_statistics` names them: `scavenge`, `full_gc`,
///   `code_compaction`, `safepoint`, or the VM's own name; empty for most stacks), and for
///   a stack of blocks off the CPU its `state` (`sleeping`, `uninterruptible`, `preempted`,
///   `stopped`, `idle`, `other`), and `labels` (an object, key to value) when its thread had
///   labels set. `samples` is the stack's samples whatever the measure (0 for blocks).
/// - `threads`: the threads the stacks name, most time first: `pid`, `tid`, `name` (its
///   `comm` when first sampled, or null) and `samples`; in off-CPU and wall profiles also
///   `cpu_ns`, `off_cpu_blocks` and `off_cpu_ns`.
/// - `truncated_stacks`: samples whose stack was truncated.
/// - `stack_ends`: samples per way their stacks ended (`end`, `samples`), most first.
///
/// A view rather than part of the model: the frames and stacks are the profile's own messages
/// (often tens of thousands), which the report does not copy, and their JSON spells some of
/// their fields otherwise (proto enums by name, empty strings and line 0 as null, `during`'s
/// indices as the kinds' names). It borrows them and writes each message as its object
/// directly, with no struct mirroring the messages.
#[derive(Debug, Clone, Copy)]
pub struct StackTable<'a> {
    shown: &'a ShownStacks<'a>,
}

impl Serialize for StackTable<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let profile: &Profile = &self.shown.profile;
        let mut table = serializer.serialize_struct("StackTable", 7)?;
        table.serialize_field("stack_view", self.shown)?;
        table.serialize_field("frames", &InProfile(profile.frames.as_slice(), profile))?;
        table.serialize_field("sample_types", &profile.sample_types)?;
        table.serialize_field("stacks", &InProfile(profile.stacks.as_slice(), profile))?;
        table.serialize_field("threads", &InProfile(profile.threads.as_slice(), profile))?;
        table.serialize_field("truncated_stacks", &profile.truncated_stacks)?;
        table.serialize_field(
            "stack_ends",
            &InProfile(profile.stack_ends.as_slice(), profile),
        )?;
        table.end()
    }
}

/// A message of the stack table (or a slice of them) with the profile it is from, whose
/// tables its indices point into: how [`StackTable`] writes each one.
struct InProfile<'a, T: ?Sized>(&'a T, &'a Profile);

impl<T> Serialize for InProfile<'_, [T]>
where
    for<'b> InProfile<'b, T>: Serialize,
{
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|item| InProfile(item, self.1)))
    }
}

impl Serialize for InProfile<'_, model::Frame> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let frame = self.0;
        let mut object = serializer.serialize_struct("Frame", 14)?;
        object.serialize_field("name", &frame.name)?;
        object.serialize_field("module", &frame.module)?;
        object.serialize_field("section", &frame.section)?;
        object.serialize_field("symbolized", &frame.symbolized)?;
        object.serialize_field("kind", &frame.kind)?;
        object.serialize_field("range", &non_empty_str(&frame.range))?;
        object.serialize_field("inlined", &frame.inlined)?;
        object.serialize_field("code_map", &non_empty_str(&frame.code_map))?;
        object.serialize_field("optimised", &frame.optimised)?;
        object.serialize_field("build_id", &non_empty_str(&frame.build_id))?;
        object.serialize_field("kernel", &frame.kernel)?;
        object.serialize_field("file", &non_empty_str(&frame.file))?;
        object.serialize_field("line", &(frame.line > 0).then_some(frame.line))?;
        object.serialize_field("later_snapshot", &frame.later_snapshot)?;
        object.end()
    }
}

impl Serialize for InProfile<'_, model::Stack> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (stack, profile) = (self.0, self.1);
        let during: Vec<_> = stack
            .during
            .iter()
            .filter_map(|&i| profile.vm_interval_kinds.get(i as usize))
            .map(IntervalKind::key)
            .collect();
        let mut object = serializer.serialize_struct("Stack", 10)?;
        let frames: Vec<u32> = profile.stack_frames(stack).collect();
        // Its samples, whichever measure the stacks are shown by (an off-CPU profile has
        // none).
        let samples = match profile.value_index(model::SampleType::Samples) {
            Some(at) => stack.values.get(at).copied().unwrap_or(0),
            None if profile.sample_types.is_empty() => stack.samples(),
            None => 0,
        };
        object.serialize_field("frames", &frames)?;
        object.serialize_field("pid", &stack.pid)?;
        object.serialize_field("tid", &stack.tid)?;
        object.serialize_field("samples", &samples)?;
        object.serialize_field("values", &stack.values)?;
        object.serialize_field("truncated", &stack.truncated)?;
        object.serialize_field("end", &stack.end.map(StackEnd::as_str))?;
        object.serialize_field("during", &during)?;
        if let Some(state) = stack.state {
            object.serialize_field("state", state.as_str())?;
        }
        if !stack.labels.is_empty() {
            let labels: std::collections::BTreeMap<&str, &str> = profile
                .labels_of(stack)
                .map(|l| (l.key.as_str(), l.value.as_str()))
                .collect();
            object.serialize_field("labels", &labels)?;
        }
        object.end()
    }
}

impl Serialize for InProfile<'_, model::Thread> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let thread = self.0;
        let mut object = serializer.serialize_struct("Thread", 7)?;
        object.serialize_field("pid", &thread.pid)?;
        object.serialize_field("tid", &thread.tid)?;
        object.serialize_field("name", &non_empty_str(&thread.name))?;
        object.serialize_field("samples", &thread.samples)?;
        // Times where the profile measured more than samples.
        if self.1.off_cpu.is_some() {
            object.serialize_field("cpu_ns", &thread.cpu_ns)?;
            object.serialize_field("off_cpu_blocks", &thread.off_cpu_blocks)?;
            object.serialize_field("off_cpu_ns", &thread.off_cpu_ns)?;
        }
        object.end()
    }
}

impl Serialize for InProfile<'_, model::StackEndSamples> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut object = serializer.serialize_struct("StackEndSamples", 2)?;
        object.serialize_field("end", &self.0.end.as_str())?;
        object.serialize_field("samples", &self.0.samples)?;
        object.end()
    }
}

fn non_empty_str(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

// The model's fields as JSON spells them (`#[serde(serialize_with = "...")]`).

/// A percentage, rounded through [`round2`].
pub(crate) fn rounded<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(round2(*value))
}

/// A percentage that may not apply, rounded through [`round2`], or null.
pub(crate) fn rounded_or_null<S: Serializer>(
    value: &Option<f64>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    value.map(round2).serialize(serializer)
}

/// A string, or null when empty (the model keeps the proto's empty strings).
pub(crate) fn non_empty<S: Serializer>(value: &str, serializer: S) -> Result<S::Ok, S::Error> {
    non_empty_str(value).serialize(serializer)
}

/// A time as RFC 3339 UTC to the second ([`rfc3339_seconds`]), or null.
pub(crate) fn rfc3339<S: Serializer>(
    time: &Option<SystemTime>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    time.and_then(rfc3339_seconds).serialize(serializer)
}

/// A profile's mode as `--mode` spells it: `cpu`, `off-cpu` or `wall`.
pub(crate) fn mode<S: Serializer>(
    mode: &vmscope_model::ProfileMode,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(mode.as_str())
}

/// Why a thread was off its CPU, as [`vmscope_model::BlockState::as_str`] spells it.
pub(crate) fn block_state<S: Serializer>(
    state: &vmscope_model::BlockState,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(state.as_str())
}

/// A symbolisation issue's kind as scripts read it ([`crate::IssueRow::kind_name`]).
pub(crate) fn issue_kind<S: Serializer>(
    kind: &Option<IssueKind>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(crate::model::issue_kind_name(*kind))
}

/// Whether a kind of interval is one the VM named itself (`named`), not one the proto names.
pub(crate) fn is_named<S: Serializer>(
    kind: &IntervalKind,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_bool(matches!(kind, IntervalKind::Named(_)))
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
    use vmscope_model::{
        ConfigValue, Configuration, CounterDelta, GaugeDelta, IntervalTotals, KernelCounts,
        KernelEvents, ProcessKernelCounts, VmStatistics,
    };

    use super::*;
    use crate::ReportOptions;
    use crate::fixtures::node_profile;

    /// An object's keys in the order they were written (a `serde_json::Value` sorts them).
    struct Keys(Vec<String>);

    impl<'de> Deserialize<'de> for Keys {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct KeysVisitor;
            impl<'de> Visitor<'de> for KeysVisitor {
                type Value = Keys;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
                    let mut keys = Vec::new();
                    while let Some(key) = map.next_key::<String>()? {
                        map.next_value::<IgnoredAny>()?;
                        keys.push(key);
                    }
                    Ok(Keys(keys))
                }
            }
            deserializer.deserialize_map(KeysVisitor)
        }
    }

    fn text(value: &impl Serialize) -> String {
        serde_json::to_string(value).expect("serialise")
    }

    fn keys(value: &impl Serialize) -> Vec<String> {
        let text = serde_json::to_string(value).expect("serialise");
        serde_json::from_str::<Keys>(&text).expect("an object").0
    }

    /// The model's fields are the document's, in declaration order: a field moved in the model
    /// moves in the JSON, which this catches.
    #[test]
    fn the_report_fields_come_in_the_documented_order() {
        let report = Report::from_profile(&node_profile(), &ReportOptions::DEFAULT);
        assert_eq!(
            keys(&JsonReport::new(&report)),
            [
                "session_id",
                "targets",
                "system_wide",
                "vm_executable",
                "started_at",
                "duration_seconds",
                "requested_frequency_hz",
                "measured_frequency_hz",
                "cpu_seconds",
                "host_steal_percent",
                "busy_cpus",
                "total_samples",
                "vm_samples",
                "vm_percent_of_total",
                "lost_samples",
                "lost_samples_per_cpu",
                "taken_frequency_hz",
                "throttled",
                "call_graph",
                "dwarf_stack_bytes",
                "complete",
                "stop_reason",
                "incomplete_reason",
                "jit_samples_before_code_map",
                "jit_samples_awaiting_code_map",
                "jit_samples_caught_up",
                "jit_samples_from_later_snapshot",
                "processes",
                "process_totals",
                "vm_modules",
                "sections",
                "symbolization_issues",
                "kernel_events",
                "vm_statistics",
                "call_counts",
                "mode",
                "off_cpu",
                "thread_filter",
                "label_filter",
                "label_limit_samples",
            ]
        );
        assert_eq!(
            keys(&report.sections[0].rows[0]),
            [
                "name",
                "module",
                "section",
                "samples",
                "percent_of_section",
                "percent_of_total",
                "cumulative_percent",
                "symbolized",
                "folded_rows",
                "kind",
                "code_map",
                "optimised",
                "ranges",
                "inlined",
                "pid",
                "command",
                "processes",
                "srcline",
                "later_snapshot_samples",
            ]
        );
        let profile = node_profile();
        let shown = ShownStacks::new(&profile, &ReportOptions::DEFAULT);
        let all = keys(&JsonReport::with_stacks(&report, &shown));
        assert_eq!(
            all[all.len() - 7..],
            [
                "stack_view",
                "frames",
                "sample_types",
                "stacks",
                "threads",
                "truncated_stacks",
                "stack_ends"
            ]
        );
    }

    /// What the VMs and the kernel counted, exactly as JSON writes it: names, order, rounding
    /// (percentages only) and nulls.
    #[test]
    fn vm_statistics_and_kernel_events_as_written() {
        let profile = Profile {
            duration_seconds: 2.0,
            vm_statistics: vec![VmStatistics {
                pid: 42,
                vm: "jitvm 0.1".into(),
                configuration: vec![
                    Configuration {
                        name: "eden size".into(),
                        value: Some(ConfigValue::Number(3_801_936)),
                        unit: "bytes".into(),
                    },
                    Configuration {
                        name: "gc".into(),
                        value: Some(ConfigValue::Text("generational".into())),
                        unit: String::new(),
                    },
                    Configuration {
                        name: "unset".into(),
                        value: None,
                        unit: String::new(),
                    },
                ],
                counters: vec![CounterDelta {
                    name: "Stack overflows".into(),
                    unit: String::new(),
                    delta: 209,
                    last: 1000,
                }],
                gauges: vec![GaugeDelta {
                    name: "old".into(),
                    unit: "bytes".into(),
                    delta: -5,
                    last: 10,
                    low: 5,
                    high: 20,
                }],
                intervals: vec![
                    IntervalTotals {
                        kind: IntervalKind::Scavenge,
                        count: 3,
                        total_ns: 57_123_456,
                        longest_ns: 30_000_000,
                        sampled: 0,
                    },
                    IntervalTotals {
                        kind: IntervalKind::Named("mark".into()),
                        count: 0,
                        total_ns: 0,
                        longest_ns: 0,
                        sampled: 0,
                    },
                ],
                window_ns: 3_000_000_000,
                samples: 0,
                exact_counts: Vec::new(),
                domain_events: Vec::new(),
            }],
            kernel_events: Some(KernelEvents {
                total: Some(KernelCounts {
                    context_switches: 3,
                    ..KernelCounts::default()
                }),
                processes: vec![ProcessKernelCounts {
                    pid: 8,
                    command: "gone".into(),
                    counts: None,
                    threads: 0,
                    note: "exited".into(),
                }],
                unavailable: vec!["cycles: no PMU".into()],
            }),
            ..Profile::default()
        };
        let report = Report::from_profile(&profile, &ReportOptions::DEFAULT);
        assert_eq!(
            text(&report.vm_statistics),
            concat!(
                r#"[{"pid":42,"vm":"jitvm 0.1","seconds":3.0,"configuration":["#,
                r#"{"name":"eden size","value":3801936,"unit":"bytes"},"#,
                r#"{"name":"gc","value":"generational","unit":""},"#,
                r#"{"name":"unset","value":null,"unit":""}],"#,
                r#""gauges":[{"name":"old","unit":"bytes","delta":-5,"last":10,"low":5,"high":20}],"#,
                r#""intervals":[{"kind":"scavenge","named":false,"count":3,"total_ms":57.123456,"#,
                r#""percent_of_elapsed":1.9,"average_ms":19.041152,"longest_ms":30.0,"sampled":null},"#,
                r#"{"kind":"mark","named":true,"count":0,"total_ms":0.0,"percent_of_elapsed":0.0,"#,
                r#""average_ms":0.0,"longest_ms":0.0,"sampled":null}],"#,
                r#""counters":[{"name":"Stack overflows","unit":"","count":209,"#,
                r#""per_second":69.66666666666667,"last":1000}],"exact_counts":[]}]"#,
            )
        );
        assert_eq!(
            text(&report.kernel_events),
            concat!(
                r#"{"total":[{"name":"context_switches","count":3,"per_second":1.5},"#,
                r#"{"name":"cpu_migrations","count":0,"per_second":0.0},"#,
                r#"{"name":"minor_faults","count":0,"per_second":0.0},"#,
                r#"{"name":"major_faults","count":0,"per_second":0.0}],"#,
                r#""processes":[{"pid":8,"command":"gone","threads":0,"note":"exited","events":[]}],"#,
                r#""unavailable":["cycles: no PMU"]}"#,
            )
        );
    }
}
