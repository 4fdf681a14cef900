//! The JSON report: the text report's numbers for scripts and CI, with every percentage
//! rounded to two decimals (through [`round2`], like the text) and names never elided.
//!
//! Every row object has `kind`, `code_map`, `optimised`, `ranges` and `inlined`, empty, false
//! or null where they do not apply, so that consumers need not special-case rows. Unlike the
//! text, which lists ranges
//! and inlined methods only under generated code rows of at least
//! [`ReportOptions::min_range_percent`](super::ReportOptions) of the total, the JSON carries
//! them for every row that has them, whatever that option says: machines do not tire of
//! detail. Only rows folded into `...others...` lose theirs (the fold has none); `--fold 0`
//! keeps every row.
//!
//! A borrowed [`Serialize`] view rather than a `serde_json::Value`: fields come out in the
//! documented order (a `Value` would sort its keys), and building it cannot fail.
//!
//! [`render_json_with_stacks`] (what `--format json` writes) adds the profile's stack table
//! after the flat report, its stacks as shown (the language view by default): `stack_view`,
//! `frames`, `stacks` and `truncated_stacks` (see [`JsonStackTable`]).

use std::borrow::Cow;

use serde::Serialize;
use vmscope_proto::v1 as pb;

use vmscope_report::stack_view::ShownStacks;
use vmscope_report::stats::{
    EventCount, KernelEventsReport, SettingValue, VmStatsReport, interval_key,
};
use vmscope_report::{
    CodeKindLabel, InlinedRow, IssueRow, RangeRow, Report, ReportRow, ReportTarget, SectionKind,
    SectionReport, rfc3339_seconds, round2,
};

/// The report as JSON, borrowed from a [`Report`]; serialise it with `serde_json`.
///
/// Fields: `session_id`, `targets`, `system_wide`, `vm_executable`, `started_at` (RFC 3339 UTC
/// or null), `duration_seconds`, `requested_frequency_hz`, `measured_frequency_hz` and
/// `busy_cpus` (null when the targets used under 0.1 s of CPU, too little to measure a rate
/// against), `cpu_seconds`, `host_steal_percent`, `total_samples`, `vm_samples`,
/// `vm_percent_of_total`,
/// `lost_samples`, `lost_samples_per_cpu` (indexed by CPU), `taken_frequency_hz` (samples
/// taken, delivered plus lost, per busy CPU-second), `throttled` (the kernel took clearly fewer
/// samples than asked: under 90% over half a CPU-second or more), `call_graph` (`none`, `fp`, `dwarf`
/// or `unknown`), `dwarf_stack_bytes` (with `dwarf`, else null), `complete`, `stop_reason` (or null),
/// `incomplete_reason` (or null), `jit_samples_before_code_map` (provisional: attributed before
/// their code map caught up), `jit_samples_awaiting_code_map` (of those, the ones that may
/// still be named: the profile may change), `jit_samples_caught_up` (placed again, on time,
/// once their map caught up), `jit_samples_from_later_snapshot` (named from a perf map read
/// after them, not time-correct; their rows say how many in `later_snapshot_samples`, their
/// frames `later_snapshot`), `processes` (how many), `process_totals` (every process with
/// samples, most first: `pid`, `command`, `samples`, `percent_of_total`),
/// `vm_modules` (modules other than the executable counted as the VM: `module`, `runtime` or
/// null when `--vm-module` named it, `samples`), `sections`, `symbolization_issues` (`module`,
/// `kind`: `stripped`, `no_symbol`, `jit_unexplained`, `process_gone`... as the proto's
/// `SymbolizationIssueKind` names them, `reason` for a person, `samples`) and
/// `kernel_events` (null system-wide; see [`JsonKernelEvents`]), `vm_statistics` (what the
/// VMs published of themselves; see [`JsonVmStatistics`]).
/// Measurements (seconds, hertz, busy CPUs) are not rounded: only percentages are.
///
/// Rows carry `processes` (`pid`, `command`, `samples`, most first) and, when all their
/// samples are one process's, that `pid` and `command` (else null): rows of a system-wide or
/// multi-target profile can be told apart by process.
#[derive(Debug, Serialize)]
pub struct JsonReport<'a> {
    session_id: u64,
    targets: Vec<JsonTarget<'a>>,
    system_wide: bool,
    vm_executable: &'a str,
    started_at: Option<String>,
    duration_seconds: f64,
    requested_frequency_hz: u32,
    measured_frequency_hz: Option<f64>,
    cpu_seconds: f64,
    host_steal_percent: f64,
    busy_cpus: Option<f64>,
    total_samples: u64,
    vm_samples: u64,
    vm_percent_of_total: f64,
    lost_samples: u64,
    lost_samples_per_cpu: &'a [u64],
    taken_frequency_hz: f64,
    throttled: bool,
    call_graph: &'static str,
    dwarf_stack_bytes: Option<u32>,
    complete: bool,
    stop_reason: Option<&'a str>,
    incomplete_reason: Option<&'a str>,
    jit_samples_before_code_map: u64,
    jit_samples_awaiting_code_map: u64,
    jit_samples_caught_up: u64,
    jit_samples_from_later_snapshot: u64,
    processes: u32,
    process_totals: Vec<JsonProcessTotal<'a>>,
    vm_modules: Vec<JsonVmModule<'a>>,
    sections: Vec<JsonSection<'a>>,
    symbolization_issues: Vec<JsonIssue<'a>>,
    kernel_events: Option<JsonKernelEvents<'a>>,
    vm_statistics: Vec<JsonVmStatistics<'a>>,
    /// The call stacks, when rendered with the profile ([`render_json_with_stacks`]).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    stack_table: Option<JsonStackTable<'a>>,
}

/// One VM's statistics over the session: `pid`, `vm`, `seconds` (the window), `configuration`
/// (`name`, `value`: a number or a string, `unit`), `gauges` (`name`, `unit`, `delta`,
/// `last`, `low` and `high`: its lowest and highest values over the session), `intervals`
/// (`kind`: `scavenge`, `full_gc`, `code_compaction`, `safepoint` or the VM's name; `named`
/// for the VM's own kinds; `count`, `total_ms`, `percent_of_elapsed`, `average_ms`,
/// `longest_ms`; `sampled`, null where samples are not tagged (HotSpot) or the
/// process has none, else `samples` taken during the kind, their `percent` of the process's
/// samples, `disagreement_points` (that percent minus `percent_of_elapsed` where they differ
/// by more than 3 points, else null) and `top`, the functions those samples were in: `name`,
/// `module`, `samples`, `percent` of the kind's samples), `counters` (`name`, `unit`,
/// `count`, `per_second`, `last`).
#[derive(Debug, Serialize)]
struct JsonVmStatistics<'a> {
    pid: u32,
    vm: &'a str,
    seconds: f64,
    configuration: Vec<JsonSetting<'a>>,
    gauges: Vec<JsonGauge<'a>>,
    intervals: Vec<JsonIntervals<'a>>,
    counters: Vec<JsonCounter<'a>>,
}

#[derive(Debug, Serialize)]
struct JsonSetting<'a> {
    name: &'a str,
    value: serde_json::Value,
    unit: &'a str,
}

#[derive(Debug, Serialize)]
struct JsonGauge<'a> {
    name: &'a str,
    unit: &'a str,
    delta: i64,
    last: i64,
    low: i64,
    high: i64,
}

#[derive(Debug, Serialize)]
struct JsonIntervals<'a> {
    kind: &'a str,
    named: bool,
    count: u64,
    total_ms: f64,
    percent_of_elapsed: f64,
    average_ms: f64,
    longest_ms: f64,
    sampled: Option<JsonSampled<'a>>,
}

/// What the samples saw of a kind of interval (null where they are not tagged).
#[derive(Debug, Serialize)]
struct JsonSampled<'a> {
    samples: u64,
    percent: f64,
    /// The sampled share minus the VM's own, where they differ by more than 3 points.
    disagreement_points: Option<f64>,
    top: Vec<JsonFunctionShare<'a>>,
}

#[derive(Debug, Serialize)]
struct JsonFunctionShare<'a> {
    name: &'a str,
    module: &'a str,
    samples: u64,
    percent: f64,
}

#[derive(Debug, Serialize)]
struct JsonCounter<'a> {
    name: &'a str,
    unit: &'a str,
    count: u64,
    per_second: f64,
    last: u64,
}

fn vm_statistics(vm: &VmStatsReport) -> JsonVmStatistics<'_> {
    JsonVmStatistics {
        pid: vm.pid,
        vm: &vm.vm,
        seconds: vm.seconds,
        configuration: vm
            .configuration
            .iter()
            .map(|s| JsonSetting {
                name: &s.name,
                value: match &s.value {
                    Some(SettingValue::Number(n)) => (*n).into(),
                    Some(SettingValue::Text(t)) => t.as_str().into(),
                    None => serde_json::Value::Null,
                },
                unit: &s.unit,
            })
            .collect(),
        gauges: vm
            .gauges
            .iter()
            .map(|g| JsonGauge {
                name: &g.name,
                unit: &g.unit,
                delta: g.delta,
                last: g.last,
                low: g.low,
                high: g.high,
            })
            .collect(),
        intervals: vm
            .intervals
            .iter()
            .map(|i| JsonIntervals {
                kind: &i.key,
                named: i.kind == vmscope_proto::v1::IntervalKind::Named,
                count: i.count,
                total_ms: i.total_ms,
                percent_of_elapsed: round2(i.percent_of_elapsed),
                average_ms: i.average_ms,
                longest_ms: i.longest_ms,
                sampled: i.sampled.as_ref().map(|s| JsonSampled {
                    samples: s.samples,
                    percent: round2(s.percent),
                    disagreement_points: s.disagreement.map(round2),
                    top: s
                        .top
                        .iter()
                        .map(|f| JsonFunctionShare {
                            name: &f.name,
                            module: &f.module,
                            samples: f.samples,
                            percent: round2(f.percent),
                        })
                        .collect(),
                }),
            })
            .collect(),
        counters: vm
            .counters
            .iter()
            .map(|c| JsonCounter {
                name: &c.name,
                unit: &c.unit,
                count: c.count,
                per_second: c.per_second,
                last: c.last,
            })
            .collect(),
    }
}

/// The profile's call stacks, after the flat report's fields: `stack_view`, `frames`,
/// `stacks`, `truncated_stacks`. Every sample is in exactly one stack, so stacks' samples add
/// up to `total_samples`.
///
/// - `stack_view`: how the stacks are shown ([`vmscope_report::stack_view`]): `frames`
///   (`language`: the VM's own frames above each stack's innermost language frame hidden, the
///   default; `native`: every frame, `--native`), `collapse_recursion` (`--collapse-recursion`:
///   a function calling itself, directly or through a cycle, is one level),
///   `samples_with_hidden_frames` and `samples_with_collapsed_recursion` (the samples whose
///   stacks the view changed).
/// - `frames`: each distinct frame once, as the daemon's `Profile.frames`: `name`, `module`,
///   `section` (`generated`, `vanilla`, `other`), `symbolized`, `kind` (as rows' `kind`, or
///   null), `range` (generated code: the bytecode or source range the frame's pc is in, for a
///   caller its call site, e.g. `74->78`; null when unknown), `inlined` (a method inlined into
///   the compiled code of the frame after it in the stack, or a C function the compiler inlined
///   into it), `code_map` (or null), `optimised`, `build_id` (hex, or null), `kernel`, and for
///   native code with DWARF `file` and `line` (its line, for a caller its call's; null when
///   unknown).
/// - `stacks`: samples per distinct (process, stack), most first: `frames` (indices into
///   `frames`, **leaf first**: kernel frames, then user frames, outermost caller last), `pid`,
///   `samples`, `truncated` (cut at the depth limit: outermost callers missing), `end` (how the
///   walk ended: `complete`, `depth_limit`, `no_frame_pointer`, `unmapped_return`,
///   `copy_too_small`, `copy_faulted`, `unwind_failed`; null without call graph), `during`
///   (the kinds of interval its VM had under way when its samples were taken, as
///   `vm_statistics` names them: `scavenge`, `full_gc`, `code_compaction`, `safepoint`, or the
///   VM's own name; empty for most stacks).
/// - `truncated_stacks`: samples whose stack was truncated.
/// - `stack_ends`: samples per way their stacks ended (`end`, `samples`), most first.
#[derive(Debug, Serialize)]
pub struct JsonStackTable<'a> {
    stack_view: JsonStackView,
    frames: Vec<JsonFrame<'a>>,
    stacks: Vec<JsonStack<'a>>,
    truncated_stacks: u64,
    stack_ends: Vec<JsonStackEnd>,
}

#[derive(Debug, Serialize)]
struct JsonStackView {
    frames: &'static str,
    collapse_recursion: bool,
    samples_with_hidden_frames: u64,
    samples_with_collapsed_recursion: u64,
}

#[derive(Debug, Serialize)]
struct JsonStackEnd {
    end: Option<&'static str>,
    samples: u64,
}

/// The JSON spelling of a stack end: the proto name without its prefix, lower case.
fn stack_end_name(end: i32) -> Option<&'static str> {
    use vmscope_proto::v1::StackEnd;
    Some(match StackEnd::try_from(end).ok()? {
        StackEnd::Unspecified => return None,
        StackEnd::Complete => "complete",
        StackEnd::DepthLimit => "depth_limit",
        StackEnd::NoFramePointer => "no_frame_pointer",
        StackEnd::JitNoFramePointer => "jit_no_frame_pointer",
        StackEnd::UnmappedReturn => "unmapped_return",
        StackEnd::CopyTooSmall => "copy_too_small",
        StackEnd::CopyFaulted => "copy_faulted",
        StackEnd::UnwindFailed => "unwind_failed",
        StackEnd::StackLimit => "stack_limit",
    })
}

#[derive(Debug, Serialize)]
struct JsonFrame<'a> {
    name: &'a str,
    module: &'a str,
    section: &'static str,
    symbolized: bool,
    kind: Option<&'static str>,
    range: Option<&'a str>,
    inlined: bool,
    code_map: Option<&'a str>,
    optimised: bool,
    build_id: Option<&'a str>,
    kernel: bool,
    file: Option<&'a str>,
    line: Option<u32>,
    later_snapshot: bool,
}

#[derive(Debug, Serialize)]
struct JsonStack<'a> {
    frames: &'a [u32],
    pid: u32,
    samples: u64,
    truncated: bool,
    end: Option<&'static str>,
    during: Vec<Cow<'a, str>>,
}

/// What the kernel counted for the targets: `total` and each of `processes` (`pid`,
/// `command`, `threads`, `note` or null, `events`) list `events` as `name` (see
/// [`vmscope_report::stats::EventCount::key`]), `count` and `per_second`; `unavailable` says
/// which counters were not counted and why.
#[derive(Debug, Serialize)]
struct JsonKernelEvents<'a> {
    total: Vec<JsonEvent>,
    processes: Vec<JsonProcessEvents<'a>>,
    unavailable: &'a [String],
}

#[derive(Debug, Serialize)]
struct JsonProcessEvents<'a> {
    pid: u32,
    command: &'a str,
    threads: u32,
    note: Option<&'a str>,
    events: Vec<JsonEvent>,
}

#[derive(Debug, Serialize)]
struct JsonEvent {
    name: &'static str,
    count: u64,
    per_second: f64,
}

fn kernel_events(events: &KernelEventsReport) -> JsonKernelEvents<'_> {
    let lines = |events: &[EventCount]| {
        events
            .iter()
            .map(|e| JsonEvent {
                name: e.key,
                count: e.count,
                per_second: e.per_second,
            })
            .collect()
    };
    JsonKernelEvents {
        total: lines(&events.total),
        processes: events
            .processes
            .iter()
            .map(|p| JsonProcessEvents {
                pid: p.pid,
                command: &p.command,
                threads: p.threads,
                note: p.note.as_deref(),
                events: lines(&p.events),
            })
            .collect(),
        unavailable: &events.unavailable,
    }
}

#[derive(Debug, Serialize)]
struct JsonVmModule<'a> {
    module: &'a str,
    runtime: Option<&'static str>,
    samples: u64,
}

#[derive(Debug, Serialize)]
struct JsonProcess<'a> {
    pid: u32,
    command: &'a str,
    samples: u64,
}

#[derive(Debug, Serialize)]
struct JsonTarget<'a> {
    pid: u32,
    command: &'a str,
    executable: &'a str,
    exited: bool,
    note: &'a str,
}

#[derive(Debug, Serialize)]
struct JsonSection<'a> {
    section: &'static str,
    title: &'a str,
    samples: u64,
    percent_of_vm: Option<f64>,
    percent_of_total: f64,
    rows: Vec<JsonRow<'a>>,
}

#[derive(Debug, Serialize)]
struct JsonRow<'a> {
    name: &'a str,
    module: &'a str,
    section: &'static str,
    samples: u64,
    percent_of_section: f64,
    percent_of_total: f64,
    cumulative_percent: f64,
    symbolized: bool,
    folded_rows: usize,
    /// `method`, `block`, `trampoline`, `enilopmart`, `closed_pic`, `open_pic`, `stub`,
    /// `unknown`, or null outside generated code and when the daemon did not say.
    kind: Option<&'static str>,
    /// `vm`, `jitdump`, `perf map`, or null when no code map named the row.
    code_map: Option<&'a str>,
    optimised: bool,
    /// In code order.
    ranges: Vec<JsonRange<'a>>,
    /// Most samples first.
    inlined: Vec<JsonInlined<'a>>,
    /// The process all the row's samples are from, or null.
    pid: Option<u32>,
    /// Its name, or null.
    command: Option<&'a str>,
    /// Samples per process, most first.
    processes: Vec<JsonProcess<'a>>,
    /// Rows grouped by source line (`--sort srcline`): the line, `hot.c:12`; else null.
    srcline: Option<&'a str>,
    /// Samples named from a perf map read after them.
    later_snapshot_samples: u64,
}

#[derive(Debug, Serialize)]
struct JsonRange<'a> {
    label: &'a str,
    samples: u64,
    percent_of_method: f64,
    cumulative_percent: f64,
}

#[derive(Debug, Serialize)]
struct JsonInlined<'a> {
    name: &'a str,
    samples: u64,
    percent_of_method: f64,
}

#[derive(Debug, Serialize)]
struct JsonProcessTotal<'a> {
    pid: u32,
    command: &'a str,
    samples: u64,
    percent_of_total: f64,
}

#[derive(Debug, Serialize)]
struct JsonIssue<'a> {
    module: &'a str,
    kind: String,
    reason: &'a str,
    samples: u64,
}

/// The JSON view of `report`, ready for `serde_json::to_writer_pretty` or `to_value`.
pub fn render_json(report: &Report) -> JsonReport<'_> {
    JsonReport {
        session_id: report.session_id,
        targets: report.targets.iter().map(target).collect(),
        system_wide: report.system_wide,
        vm_executable: &report.vm_executable,
        started_at: report.started_at.and_then(rfc3339_seconds),
        duration_seconds: report.duration_seconds,
        requested_frequency_hz: report.requested_frequency_hz,
        measured_frequency_hz: report.measured_frequency_hz,
        cpu_seconds: report.cpu_seconds,
        host_steal_percent: round2(report.host_steal_percent),
        busy_cpus: report.busy_cpus,
        total_samples: report.total_samples,
        vm_samples: report.vm_samples,
        vm_percent_of_total: round2(report.vm_percent_of_total),
        lost_samples: report.lost_samples,
        lost_samples_per_cpu: &report.lost_samples_per_cpu,
        taken_frequency_hz: report.taken_frequency_hz,
        throttled: report.throttled,
        call_graph: report.call_graph_mode,
        dwarf_stack_bytes: report.dwarf_stack_bytes,
        complete: report.complete,
        stop_reason: report.stop_reason.as_deref(),
        incomplete_reason: report.incomplete_reason.as_deref(),
        jit_samples_before_code_map: report.jit_samples_before_code_map,
        jit_samples_awaiting_code_map: report.jit_samples_awaiting_code_map,
        jit_samples_caught_up: report.jit_samples_caught_up,
        jit_samples_from_later_snapshot: report.jit_samples_from_later_snapshot,
        processes: report.processes,
        process_totals: report
            .process_totals
            .iter()
            .map(|p| JsonProcessTotal {
                pid: p.pid,
                command: &p.command,
                samples: p.samples,
                percent_of_total: round2(p.percent_of_total),
            })
            .collect(),
        vm_modules: report
            .vm_modules
            .iter()
            .map(|m| JsonVmModule {
                module: &m.module,
                runtime: m.runtime,
                samples: m.samples,
            })
            .collect(),
        sections: report.sections.iter().map(section).collect(),
        symbolization_issues: report.issues.iter().map(issue).collect(),
        kernel_events: report.kernel_events.as_ref().map(kernel_events),
        vm_statistics: report.vm_statistics.iter().map(vm_statistics).collect(),
        stack_table: None,
    }
}

/// [`render_json`] followed by the stack table of the profile `report` was made from, its
/// stacks as `shown`.
pub fn render_json_with_stacks<'a>(
    report: &'a Report,
    shown: &'a ShownStacks<'a>,
) -> JsonReport<'a> {
    JsonReport {
        stack_table: Some(stack_table(shown)),
        ..render_json(report)
    }
}

fn stack_table<'a>(shown: &'a ShownStacks<'a>) -> JsonStackTable<'a> {
    fn non_empty(s: &str) -> Option<&str> {
        (!s.is_empty()).then_some(s)
    }
    let profile: &pb::Profile = &shown.profile;
    JsonStackTable {
        stack_view: JsonStackView {
            frames: shown.options.frames.as_str(),
            collapse_recursion: shown.options.collapse_recursion,
            samples_with_hidden_frames: shown.hidden_samples,
            samples_with_collapsed_recursion: shown.collapsed_samples,
        },
        frames: profile
            .frames
            .iter()
            .map(|f| JsonFrame {
                name: &f.name,
                module: &f.module,
                section: SectionKind::from_proto(f.section()).as_str(),
                symbolized: f.symbolized,
                kind: CodeKindLabel::from_proto(f.kind).map(CodeKindLabel::as_str),
                range: non_empty(&f.range),
                inlined: f.inlined,
                code_map: non_empty(&f.code_map),
                optimised: f.optimised,
                build_id: non_empty(&f.build_id),
                kernel: f.kernel,
                file: non_empty(&f.file),
                line: (f.line > 0).then_some(f.line),
                later_snapshot: f.later_snapshot,
            })
            .collect(),
        stacks: profile
            .stacks
            .iter()
            .map(|s| JsonStack {
                frames: &s.frames,
                pid: s.pid,
                samples: s.samples,
                truncated: s.truncated,
                end: stack_end_name(s.end),
                during: s
                    .during
                    .iter()
                    .filter_map(|&i| profile.vm_interval_kinds.get(i as usize))
                    .map(|k| interval_key(k.kind, &k.name))
                    .collect(),
            })
            .collect(),
        truncated_stacks: profile.truncated_stacks,
        stack_ends: profile
            .stack_ends
            .iter()
            .map(|e| JsonStackEnd {
                end: stack_end_name(e.end),
                samples: e.samples,
            })
            .collect(),
    }
}

fn target(target: &ReportTarget) -> JsonTarget<'_> {
    JsonTarget {
        pid: target.pid,
        command: &target.command,
        executable: &target.executable,
        exited: target.exited,
        note: &target.note,
    }
}

fn section(section: &SectionReport) -> JsonSection<'_> {
    JsonSection {
        section: section.section.as_str(),
        title: &section.title,
        samples: section.samples,
        percent_of_vm: section.percent_of_vm.map(round2),
        percent_of_total: round2(section.percent_of_total),
        rows: section.rows.iter().map(row).collect(),
    }
}

fn row(row: &ReportRow) -> JsonRow<'_> {
    JsonRow {
        name: &row.name,
        module: &row.module,
        section: row.section.as_str(),
        samples: row.samples,
        percent_of_section: round2(row.percent_of_section),
        percent_of_total: round2(row.percent_of_total),
        cumulative_percent: round2(row.cumulative_percent),
        symbolized: row.symbolized,
        folded_rows: row.folded_rows,
        kind: row.kind.map(|kind| kind.as_str()),
        code_map: (!row.code_map.is_empty()).then_some(row.code_map.as_str()),
        optimised: row.optimised,
        ranges: row.ranges.iter().map(range).collect(),
        inlined: row.inlined.iter().map(inlined).collect(),
        pid: row.pid,
        command: row.command.as_deref(),
        processes: row
            .processes
            .iter()
            .map(|p| JsonProcess {
                pid: p.pid,
                command: &p.command,
                samples: p.samples,
            })
            .collect(),
        srcline: (!row.srcline.is_empty()).then_some(row.srcline.as_str()),
        later_snapshot_samples: row.later_snapshot_samples,
    }
}

fn range(range: &RangeRow) -> JsonRange<'_> {
    JsonRange {
        label: &range.label,
        samples: range.samples,
        percent_of_method: round2(range.percent_of_method),
        cumulative_percent: round2(range.cumulative_percent),
    }
}

fn inlined(method: &InlinedRow) -> JsonInlined<'_> {
    JsonInlined {
        name: &method.name,
        samples: method.samples,
        percent_of_method: round2(method.percent_of_method),
    }
}

fn issue(issue: &IssueRow) -> JsonIssue<'_> {
    JsonIssue {
        module: &issue.module,
        kind: issue.kind_name(),
        reason: &issue.reason,
        samples: issue.samples,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use vmscope_proto::v1::Profile;

    use super::super::{Format, render};
    use super::*;
    use vmscope_report::fixtures::{jit_profile, node_profile};
    use vmscope_report::stack_view::{FrameView, StackOptions};
    use vmscope_report::{OTHERS_NAME, ReportOptions};

    const OPTIONS: ReportOptions = ReportOptions::DEFAULT;

    fn parsed(report: &Report) -> Value {
        let text = serde_json::to_string(&render_json(report)).expect("serialise");
        serde_json::from_str(&text).expect("parse back")
    }

    fn f64_at(value: &Value, key: &str) -> f64 {
        value[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} is not a number in {value}"))
    }

    #[test]
    fn header_fields_round_trip() {
        let report = Report::from_profile(&node_profile(), &OPTIONS);
        let json = parsed(&report);
        assert_eq!(json["session_id"], 7);
        assert_eq!(
            json["targets"],
            serde_json::json!([
                {"pid": 4242, "command": "node", "executable": "/usr/bin/node", "exited": false, "note": ""}
            ])
        );
        assert_eq!(json["system_wide"], false);
        assert_eq!(json["vm_executable"], "/usr/bin/node");
        assert_eq!(json["started_at"], "2026-11-22T10:00:00Z");
        assert_eq!(f64_at(&json, "duration_seconds"), 5.002);
        assert_eq!(json["requested_frequency_hz"], 1400);
        assert_eq!(
            Some(f64_at(&json, "measured_frequency_hz")),
            report.measured_frequency_hz
        );
        assert_eq!(f64_at(&json, "cpu_seconds"), 10.012);
        assert_eq!(Some(f64_at(&json, "busy_cpus")), report.busy_cpus);
        assert_eq!(json["total_samples"], 14_000);
        assert_eq!(json["vm_samples"], 13_000);
        assert_eq!(f64_at(&json, "vm_percent_of_total"), 92.86);
        assert_eq!(json["lost_samples"], 16);
        assert_eq!(
            json["lost_samples_per_cpu"],
            serde_json::json!([12, 0, 0, 4])
        );
        assert_eq!(json["call_graph"], report.call_graph_mode);
        assert_eq!(json["dwarf_stack_bytes"], serde_json::Value::Null);
        assert_eq!(json["complete"], true);
        assert_eq!(json["stop_reason"], "all targets exited");
        assert_eq!(
            json["symbolization_issues"][0],
            serde_json::json!({
                "module": "libstdc++.so.6",
                "kind": "no_symbol",
                "reason": "no symbol covers the address",
                "samples": 98
            })
        );
    }

    /// The daemon's throttling judgement reaches JSON, not only the text report's warning.
    #[test]
    fn throttling_reaches_json() {
        let json = parsed(&Report::from_profile(&node_profile(), &OPTIONS));
        assert_eq!(json["throttled"], false);
        let mut throttled = node_profile();
        throttled.taken_frequency_hz = 700.0;
        throttled.throttled = true;
        let json = parsed(&Report::from_profile(&throttled, &OPTIONS));
        assert_eq!(json["throttled"], true);
        assert_eq!(json["taken_frequency_hz"], 700.0);
    }

    #[test]
    fn dwarf_sessions_say_how_much_stack_they_copied() {
        let mut profile = node_profile();
        let session = profile.session.get_or_insert_with(Default::default);
        session.call_graph = pb::CallGraph::Dwarf as i32;
        session.dwarf_stack_bytes = 65528;
        let json = parsed(&Report::from_profile(&profile, &OPTIONS));
        assert_eq!(json["call_graph"], "dwarf");
        assert_eq!(json["dwarf_stack_bytes"], 65528);
    }

    #[test]
    fn sections_and_rows_carry_the_models_rounded_numbers() {
        let report = Report::from_profile(&node_profile(), &OPTIONS);
        let json = parsed(&report);
        let sections = json["sections"].as_array().expect("sections is an array");
        assert_eq!(sections.len(), report.sections.len());
        for (js, section) in sections.iter().zip(&report.sections) {
            assert_eq!(js["section"], section.section.as_str());
            assert_eq!(js["title"], section.title.as_str());
            assert_eq!(js["samples"], section.samples);
            match section.percent_of_vm {
                Some(p) => assert_eq!(f64_at(js, "percent_of_vm"), round2(p)),
                None => assert!(js["percent_of_vm"].is_null()),
            }
            assert_eq!(
                f64_at(js, "percent_of_total"),
                round2(section.percent_of_total)
            );
            let rows = js["rows"].as_array().expect("rows is an array");
            assert_eq!(rows.len(), section.rows.len());
            for (jr, row) in rows.iter().zip(&section.rows) {
                assert_eq!(jr["name"], row.name.as_str());
                assert_eq!(jr["module"], row.module.as_str());
                assert_eq!(jr["section"], section.section.as_str());
                assert_eq!(jr["samples"], row.samples);
                assert_eq!(jr["symbolized"], row.symbolized);
                assert_eq!(jr["folded_rows"], row.folded_rows);
                for (key, value) in [
                    ("percent_of_section", row.percent_of_section),
                    ("percent_of_total", row.percent_of_total),
                    ("cumulative_percent", row.cumulative_percent),
                ] {
                    assert_eq!(f64_at(jr, key), round2(value), "{key} of {jr}");
                }
            }
        }
        // Spot checks against numbers worked out by hand.
        let generated = &sections[0]["rows"];
        assert_eq!(
            generated[0]["name"],
            "LazyCompile:*hotLoop /tmp/fixture/hot.js:12"
        );
        assert_eq!(f64_at(&generated[0], "percent_of_section"), 57.78);
        assert_eq!(f64_at(&generated[0], "percent_of_total"), 37.14);
        let others = &sections[2]["rows"][3];
        assert_eq!(others["name"], OTHERS_NAME);
        assert_eq!(others["folded_rows"], 2);
        assert_eq!(f64_at(others, "cumulative_percent"), 100.0);
    }

    #[test]
    fn ranges_inlined_and_kinds_equal_the_models_rounded() {
        let report = Report::from_profile(&jit_profile(), &OPTIONS);
        let json = parsed(&report);
        let mut rows_with_ranges = 0;
        for (js, section) in json["sections"]
            .as_array()
            .expect("sections is an array")
            .iter()
            .zip(&report.sections)
        {
            for (jr, row) in js["rows"]
                .as_array()
                .expect("rows is an array")
                .iter()
                .zip(&section.rows)
            {
                match row.kind {
                    Some(kind) => assert_eq!(jr["kind"], kind.as_str()),
                    None => assert!(jr["kind"].is_null(), "{jr}"),
                }
                if row.code_map.is_empty() {
                    assert!(jr["code_map"].is_null(), "{jr}");
                } else {
                    assert_eq!(jr["code_map"], row.code_map.as_str());
                }
                let ranges = jr["ranges"].as_array().expect("ranges on every row");
                assert_eq!(ranges.len(), row.ranges.len(), "{jr}");
                for (jg, range) in ranges.iter().zip(&row.ranges) {
                    assert_eq!(jg["label"], range.label.as_str());
                    assert_eq!(jg["samples"], range.samples);
                    assert_eq!(
                        f64_at(jg, "percent_of_method"),
                        round2(range.percent_of_method)
                    );
                    assert_eq!(
                        f64_at(jg, "cumulative_percent"),
                        round2(range.cumulative_percent)
                    );
                }
                rows_with_ranges += usize::from(!ranges.is_empty());
                let inlined = jr["inlined"].as_array().expect("inlined on every row");
                assert_eq!(inlined.len(), row.inlined.len(), "{jr}");
                for (ji, method) in inlined.iter().zip(&row.inlined) {
                    assert_eq!(ji["name"], method.name.as_str());
                    assert_eq!(ji["samples"], method.samples);
                    assert_eq!(
                        f64_at(ji, "percent_of_method"),
                        round2(method.percent_of_method)
                    );
                }
            }
        }
        // benchFib, benchmark, Inline>>bench, the block, and SmallInteger>>- (0.5% of the
        // total, under min_range_percent: not in the text, but in the JSON).
        assert_eq!(rows_with_ranges, 5);

        // Spot checks against numbers worked out by hand.
        let generated = &json["sections"][0]["rows"];
        assert_eq!(generated[0]["name"], "Integer>>benchFib");
        assert_eq!(generated[0]["kind"], "method");
        assert_eq!(generated[0]["code_map"], "vm");
        assert_eq!(
            generated[0]["ranges"][2],
            serde_json::json!({
                "label": "30->31", "samples": 137, "percent_of_method": 2.89,
                "cumulative_percent": 66.74
            })
        );
        assert_eq!(
            f64_at(&generated[0]["ranges"][7], "cumulative_percent"),
            100.0
        );
        assert_eq!(
            generated[2]["inlined"][0],
            serde_json::json!({"name": "Inline>>heavy", "samples": 1234, "percent_of_method": 68.21})
        );
        assert_eq!(generated[3]["kind"], "closed_pic");
        assert_eq!(generated[3]["ranges"], serde_json::json!([]));
        assert_eq!(generated[4]["kind"], "open_pic");
        assert_eq!(generated[6]["kind"], "trampoline");
        let small = &generated[7];
        assert_eq!(small["name"], "SmallInteger>>-");
        assert_eq!(small["ranges"][1]["label"], "3->end");
        assert_eq!(f64_at(&small["ranges"][0], "percent_of_method"), 60.0);
        let vanilla = &json["sections"][1]["rows"][0];
        assert!(vanilla["kind"].is_null() && vanilla["code_map"].is_null());
        assert_eq!(vanilla["ranges"], serde_json::json!([]));
        assert_eq!(vanilla["inlined"], serde_json::json!([]));
    }

    #[test]
    fn vm_modules_agree_in_json() {
        let options = ReportOptions {
            vm_modules: vec!["lib*Plugin.so".into()],
            ..OPTIONS
        };
        let json = parsed(&Report::from_profile(&jit_profile(), &options));
        assert_eq!(json["vm_samples"], 9858);
        assert_eq!(f64_at(&json, "vm_percent_of_total"), 98.58);
        let vanilla = &json["sections"][1];
        assert_eq!(vanilla["samples"], 326);
        assert_eq!(f64_at(vanilla, "percent_of_vm"), 3.31);
        assert_eq!(vanilla["rows"][2]["module"], "libSocketPlugin.so");
        assert_eq!(vanilla["rows"][2]["section"], "vanilla");
        assert_eq!(json["sections"][2]["samples"], 142);
    }

    #[test]
    fn empty_profile_has_nulls_not_nan() {
        let report = Report::from_profile(&Profile::default(), &OPTIONS);
        let json = parsed(&report);
        assert!(json["started_at"].is_null());
        assert!(json["stop_reason"].is_null());
        assert!(json["busy_cpus"].is_null(), "nothing measured");
        assert!(json["measured_frequency_hz"].is_null());
        assert_eq!(json["sections"][0]["rows"], serde_json::json!([]));
        assert_eq!(f64_at(&json["sections"][1], "percent_of_total"), 0.0);
    }

    #[test]
    fn the_stack_table_follows_the_flat_report() {
        let mut profile = jit_profile();
        profile.frames = vec![
            pb::Frame {
                section: pb::Section::Vanilla as i32,
                name: "interpret".into(),
                module: "squeak".into(),
                symbolized: true,
                build_id: "0badc0de".into(),
                file: "/src/vm/interp.c".into(),
                line: 812,
                ..Default::default()
            },
            pb::Frame {
                section: pb::Section::Generated as i32,
                name: "Inline>>heavy".into(),
                module: "[anon]".into(),
                symbolized: true,
                kind: pb::CodeKind::Method as i32,
                range: "33->70".into(),
                inlined: true,
                code_map: "vm".into(),
                optimised: true,
                ..Default::default()
            },
            pb::Frame {
                section: pb::Section::Other as i32,
                name: "ksys_write".into(),
                module: "[kernel.kallsyms]".into(),
                kernel: true,
                ..Default::default()
            },
        ];
        profile.stacks = vec![
            pb::Stack {
                frames: vec![1, 0],
                pid: 42,
                samples: 9000,
                truncated: false,
                end: pb::StackEnd::Complete as i32,
                during: Vec::new(),
            },
            pb::Stack {
                frames: vec![2, 0],
                pid: 42,
                samples: 1000,
                truncated: true,
                end: pb::StackEnd::DepthLimit as i32,
                during: vec![0],
            },
        ];
        profile.vm_interval_kinds = vec![pb::VmIntervalKind {
            kind: pb::IntervalKind::Scavenge as i32,
            name: String::new(),
        }];
        profile.truncated_stacks = 1000;
        let report = Report::from_profile(&profile, &OPTIONS);
        let native = ReportOptions {
            stacks: StackOptions {
                frames: FrameView::Native,
                collapse_recursion: false,
            },
            ..OPTIONS
        };
        let shown = ShownStacks::new(&profile, &native);
        let json =
            serde_json::to_value(render_json_with_stacks(&report, &shown)).expect("serialise");
        assert_eq!(
            json["stack_view"],
            serde_json::json!({"frames": "native", "collapse_recursion": false,
                               "samples_with_hidden_frames": 0,
                               "samples_with_collapsed_recursion": 0})
        );
        assert_eq!(
            json["frames"],
            serde_json::json!([
                {"name": "interpret", "module": "squeak", "section": "vanilla",
                 "symbolized": true, "kind": null, "range": null, "inlined": false,
                 "code_map": null, "optimised": false, "build_id": "0badc0de", "kernel": false,
                 "file": "/src/vm/interp.c", "line": 812, "later_snapshot": false},
                {"name": "Inline>>heavy", "module": "[anon]", "section": "generated",
                 "symbolized": true, "kind": "method", "range": "33->70", "inlined": true,
                 "code_map": "vm", "optimised": true, "build_id": null, "kernel": false,
                 "file": null, "line": null, "later_snapshot": false},
                {"name": "ksys_write", "module": "[kernel.kallsyms]", "section": "other",
                 "symbolized": false, "kind": null, "range": null, "inlined": false,
                 "code_map": null, "optimised": false, "build_id": null, "kernel": true,
                 "file": null, "line": null, "later_snapshot": false},
            ])
        );
        assert_eq!(
            json["stacks"],
            serde_json::json!([
                {"frames": [1, 0], "pid": 42, "samples": 9000, "truncated": false,
                 "end": "complete", "during": []},
                {"frames": [2, 0], "pid": 42, "samples": 1000, "truncated": true,
                 "end": "depth_limit", "during": ["scavenge"]},
            ])
        );
        assert_eq!(json["truncated_stacks"], 1000);
        // The flat report's fields come first (a Value sorts keys: look at the text).
        let text =
            serde_json::to_string(&render_json_with_stacks(&report, &shown)).expect("serialise");
        let at = |key: &str| {
            text.find(&format!("\"{key}\":"))
                .unwrap_or_else(|| panic!("{key} in {text}"))
        };
        assert!(at("session_id") < at("symbolization_issues"));
        assert!(at("symbolization_issues") < at("stack_view"));
        assert!(at("stack_view") < at("frames"));
        assert!(at("frames") < at("stacks") && at("stacks") < at("truncated_stacks"));
        // And they are untouched.
        let mut flat = json.clone();
        for key in [
            "stack_view",
            "frames",
            "stacks",
            "truncated_stacks",
            "stack_ends",
        ] {
            flat.as_object_mut().expect("object").remove(key);
        }
        assert_eq!(flat, parsed(&report));

        // By default, the language view: the interpreter above the JIT method is hidden, the
        // kernel's stack (no language frame) whole; the frame table stays.
        let shown = ShownStacks::new(&profile, &OPTIONS);
        let json =
            serde_json::to_value(render_json_with_stacks(&report, &shown)).expect("serialise");
        assert_eq!(json["stack_view"]["frames"], "language");
        assert_eq!(json["stack_view"]["samples_with_hidden_frames"], 9000);
        assert_eq!(json["stacks"][0]["frames"], serde_json::json!([1]));
        assert_eq!(json["stacks"][1]["frames"], serde_json::json!([2, 0]));
        assert_eq!(json["frames"].as_array().map(Vec::len), Some(3));
    }

    #[test]
    fn render_json_format_is_pretty_json_and_a_newline() {
        let profile = node_profile();
        let report = Report::from_profile(&profile, &OPTIONS);
        let mut out = Vec::new();
        render(&profile, &OPTIONS, Format::Json, &mut out).expect("render");
        let text = String::from_utf8(out).expect("UTF-8");
        assert!(text.ends_with("}\n"), "{text}");
        assert!(text.starts_with("{\n  \"session_id\": 7,\n"), "{text}");
        let mut value: Value = serde_json::from_str(&text).expect("valid JSON");
        // The flat report's fields, then the stack table (empty in this fixture).
        let object = value.as_object_mut().expect("an object");
        assert_eq!(
            object.remove("stack_view"),
            Some(
                serde_json::json!({"frames": "language", "collapse_recursion": false,
                                    "samples_with_hidden_frames": 0,
                                    "samples_with_collapsed_recursion": 0})
            )
        );
        assert_eq!(object.remove("frames"), Some(serde_json::json!([])));
        assert_eq!(object.remove("stacks"), Some(serde_json::json!([])));
        assert_eq!(
            object.remove("truncated_stacks"),
            Some(serde_json::json!(0))
        );
        assert_eq!(object.remove("stack_ends"), Some(serde_json::json!([])));
        assert_eq!(value, parsed(&report));
        // Long names are never elided in JSON, whatever name_width says.
        assert!(
            text.contains("υπολογισμός_του_πολύ_μακρύ_ονόματος_μεθόδου /tmp/fixture/ελληνικά.js:3")
        );
    }
}
