//! The report's arithmetic: from the daemon's unfolded [`Profile`] to sections of sorted, folded
//! rows with their percentages, and under generated code rows their code ranges and inlined
//! methods.
//!
//! Pure and free of I/O so that every rule can be unit-tested: the renderers (the CLI's text and
//! JSON) only format what is computed here. Values stay unrounded; both renderers round
//! through [`round2`], so that the text and the JSON always show the same two-decimal numbers.
//!
//! The types serialise themselves (serde) as the JSON report ([`crate::json`]): their fields
//! are its fields, in declaration order, except those marked `#[serde(skip)]`, which JSON
//! leaves out.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use vmscope_model::{
    CallGraph, CodeKind, InlinedMethod, IssueKind, Profile, ProfileMode, ProfileRow, Section,
    Session, StackEnd,
};

pub use crate::off_cpu::{IntervalShare, OffCpuReport, StateShare, ThreadTime};
use crate::{
    module_pattern::file_name,
    processes::{ProcessTotal, process_totals},
    rank::rank,
    sort_keys::{self, SortKey},
    stack_view::StackOptions,
    stats::{KernelEventsReport, VmStatsReport},
    tree::TreeOptions,
    vm_modules::{vm_module, vm_module_hint},
};

/// Name of the row that stands for all the rows folded away in a section, as VMProfiler
/// spells it.
pub const OTHERS_NAME: &str = "...others...";

/// First second that humantime can no longer format (10000-01-01T00:00:00Z).
const FORMATTABLE_UNTIL_SECS: u64 = 253_402_300_800;

/// How the report is computed and laid out; chosen by the CLI, not by the daemon.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportOptions {
    /// Rows with fewer samples than this percentage of the grand total fold into one
    /// `...others...` row per section. VMProfiler's 0.01 by default; 0 keeps every row.
    pub min_percent: f64,
    /// Longest name the text report shows; longer names are shortened (parameter lists, then
    /// template arguments, then the middle; see the CLI's `shorten_all`). 0 shows
    /// names whole, after the numbers (`--wide`). Ignored by JSON, whose readers want names
    /// whole.
    pub name_width: usize,
    /// Generated code rows with at least this percentage of the grand total list their code
    /// ranges and inlined methods under them in the text report (1 by default: "each JIT method
    /// with enough samples"). JSON carries them for every row whatever this says.
    pub min_range_percent: f64,
    /// Shell-style patterns (`*`, `?`; see [`module_matches`](crate::module_matches)) of module file names that belong
    /// to the VM although they are not its executable (`libv8*`, a VM's plugins): rows of other
    /// code in such modules count as vanilla vm code, before any section is computed.
    pub vm_modules: Vec<String>,
    /// Whether known runtime libraries ([`crate::runtimes::KNOWN_VM_RUNTIMES`]: `libjvm.so`,
    /// `libpython3.x.so`...) count as vanilla vm code too, as [`ReportOptions::vm_modules`]
    /// would make them.
    pub runtime_modules: bool,
    /// What each section's rows are (`perf report --sort`): empty or `[Sym]` for the usual
    /// one per function; see [`sort_keys`].
    pub sort: Vec<SortKey>,
    /// A call tree of the profile's stacks instead of the flat report (`--tree`,
    /// `--callers`, `--callees`); `None` for the flat report. [`Report::from_profile`] does
    /// not read it: renderers build the tree with [`crate::tree::CallTree::from_profile`].
    pub tree: Option<TreeOptions>,
    /// Which frames of each stack the call trees and the stack formats show, and whether
    /// recursion is collapsed ([`crate::stack_view`]). [`Report::from_profile`] does not read
    /// it: the flat report's rows are functions, whatever the view.
    pub stacks: StackOptions,
    /// Only the statistics after the code (`--stats`): the VMs' own and the events the
    /// kernel counted, with the header lines that say which session. [`Report::from_profile`] does not read it.
    pub stats: bool,
    /// What the call trees and the stack formats weigh stacks by (`--weight`): `None` for the
    /// profile's main measure (samples, or the time off the CPU or on the wall clock), or one
    /// of its sample types, such as [`SampleType::Sends`](vmscope_model::SampleType::Sends)
    /// for the work counted with the samples. Check it against the profile with
    /// [`crate::stack_view::check_weight`].
    pub weight: Option<vmscope_model::SampleType>,
}

impl ReportOptions {
    /// VMProfiler's fold threshold (0.01% of the total), a name column that fits a
    /// 100-column terminal next to the numbers, ranges under generated code rows of at least 1%
    /// of the total, and no module moved into the VM.
    pub const DEFAULT: ReportOptions = ReportOptions {
        min_percent: 0.01,
        name_width: 60,
        min_range_percent: 1.0,
        vm_modules: Vec::new(),
        runtime_modules: true,
        sort: Vec::new(),
        tree: None,
        stacks: StackOptions::DEFAULT,
        stats: false,
        weight: None,
    };
}

impl Default for ReportOptions {
    /// [`ReportOptions::DEFAULT`].
    fn default() -> Self {
        ReportOptions::DEFAULT
    }
}

/// A process the session was started for, as the report header names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportTarget {
    /// Process id.
    pub pid: u32,
    /// The process's name (comm).
    pub command: String,
    /// Path of its main executable.
    pub executable: String,
    /// Whether it exited during the session: its samples are still in the report.
    pub exited: bool,
    /// Why sampling of it ended before the session did, other than exiting (empty if not).
    pub note: String,
}

impl ReportTarget {
    /// A target as the profile's session names it.
    fn from_proto(target: &vmscope_model::TargetProcess) -> ReportTarget {
        ReportTarget {
            pid: target.pid,
            command: target.command.clone(),
            executable: target.executable.clone(),
            exited: target.exited,
            // "exited" says nothing that `exited` does not.
            note: if target.note == "exited" {
                String::new()
            } else {
                target.note.clone()
            },
        }
    }
}

/// One line of a section: a function (or module+offset), or the `...others...` fold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportRow {
    /// Symbol, `module+0xOFFSET`, `[unknown]`, or [`OTHERS_NAME`] for the fold.
    pub name: String,
    /// File name of the module; empty for the fold.
    pub module: String,
    /// Section the row belongs to.
    pub section: Section,
    /// Samples in this row (summed over the folded rows for the fold).
    pub samples: u64,
    /// Samples whose stack holds this row's code anywhere, its callees' included (perf's
    /// "children"), counted once per sample. `None` when the session recorded no stacks
    /// ([`Report::call_graph`]), for the fold (its rows' stacks overlap: the sum would count
    /// a sample once per folded row on its stack), and for rows grouped by `--sort` other than
    /// by function, whose inclusive time is not known.
    #[serde(skip)]
    pub inclusive_samples: Option<u64>,
    /// `inclusive_samples` as a share of every sample of the targets, 0 to 100.
    #[serde(skip)]
    pub inclusive_percent_of_total: Option<f64>,
    /// Share of the section's samples, 0 to 100.
    #[serde(serialize_with = "crate::json::rounded")]
    pub percent_of_section: f64,
    /// Share of every sample of the targets, 0 to 100.
    #[serde(serialize_with = "crate::json::rounded")]
    pub percent_of_total: f64,
    /// Running sum of `percent_of_section` down to this row; exactly 100 on a section's last row.
    #[serde(serialize_with = "crate::json::rounded")]
    pub cumulative_percent: f64,
    /// Whether `name` is a real symbol (false for module+offset, `[unknown]` and the fold).
    pub symbolized: bool,
    /// How many rows the fold stands for; 0 for every other row.
    pub folded_rows: usize,
    /// What kind of generated code the row is, as the code map says; `None` outside generated
    /// code, for the fold, and when the daemon did not say (or said something this CLI does not
    /// know).
    pub kind: Option<CodeKind>,
    /// The code map that named the row: "vm", "jitdump" or "perf map"; empty (JSON: null) when
    /// none did.
    #[serde(serialize_with = "crate::json::non_empty")]
    pub code_map: String,
    /// Optimised generated code: a method's optimised version, a row apart from its baseline.
    pub optimised: bool,
    /// Where inside the code its samples fell, in code order (never sorted by samples: the
    /// order is the code's, as VMProfiler shows it). Empty for the fold.
    pub ranges: Vec<RangeRow>,
    /// Optimised code: samples per method inlined into it, most first; the method's own code
    /// is listed under its own name. Empty for the fold.
    pub inlined: Vec<InlinedRow>,
    /// The process all the row's samples are from, when they are one process's (`None` when
    /// they are several's, or the daemon did not say): what tells rows of a system-wide or
    /// multi-target profile apart.
    pub pid: Option<u32>,
    /// That process's name (comm), with `pid`.
    pub command: Option<String>,
    /// The row's samples by process, most first (as many as the daemon said; for the fold, of
    /// every folded row).
    pub processes: Vec<ProcessShare>,
    /// Whether the text report lists `ranges` and `inlined` under the row: a generated code row
    /// that has some and holds at least [`ReportOptions::min_range_percent`] of the grand total.
    /// JSON lists them for every row that has some.
    #[serde(skip)]
    pub show_details: bool,
    /// Rows grouped by source line (`--sort srcline`): the line, `hot.c:12` (perf's `??:0` for
    /// samples without one). Empty (JSON: null) otherwise.
    #[serde(serialize_with = "crate::json::non_empty")]
    pub srcline: String,
    /// Of `samples`, those named from a perf map read after them, not from the map of their
    /// time.
    pub later_snapshot_samples: u64,
}

/// A process's share of a row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessShare {
    /// Process id.
    pub pid: u32,
    /// Its name (comm).
    pub command: String,
    /// Its samples in the row.
    pub samples: u64,
}

/// A module counted as the VM's although it is not the main executable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VmModule {
    /// Its file name.
    pub module: String,
    /// The runtime it is, when it is a known one; `None` when a `--vm-module` pattern named it.
    pub runtime: Option<&'static str>,
    /// Its samples.
    pub samples: u64,
}

/// Samples in one range of a method's code: bytecodes (`1->23`, `38->end`), an inlined
/// method's bytecodes (`Inline>>heavy 33->70`) or a source position (`app.js:12:5`, `start`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RangeRow {
    /// The range as the daemon labelled it.
    pub label: String,
    /// Samples in the range.
    pub samples: u64,
    /// Share of the method's samples, 0 to 100.
    #[serde(serialize_with = "crate::json::rounded")]
    pub percent_of_method: f64,
    /// Running sum of `percent_of_method` in code order, from exact sums: exactly 100 on the
    /// last range when the ranges hold all of the method's samples.
    #[serde(serialize_with = "crate::json::rounded")]
    pub cumulative_percent: f64,
}

/// Samples of an optimised method attributed to one method inlined into it (or to its own
/// code, under its own name).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InlinedRow {
    /// The inlined method.
    pub name: String,
    /// Samples attributed to it.
    pub samples: u64,
    /// Share of the optimised method's samples, 0 to 100.
    #[serde(serialize_with = "crate::json::rounded")]
    pub percent_of_method: f64,
}

/// One section of the report with its rows, sorted and folded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SectionReport {
    /// Which section this is.
    pub section: Section,
    /// Heading, e.g. "generated vm code" or, system-wide, "main executables".
    pub title: String,
    /// All samples of the section, folded rows included.
    pub samples: u64,
    /// Share of the VM's samples (generated + vanilla); `None` for other code, which is not
    /// part of the VM.
    #[serde(serialize_with = "crate::json::rounded_or_null")]
    pub percent_of_vm: Option<f64>,
    /// Share of every sample of the targets.
    #[serde(serialize_with = "crate::json::rounded")]
    pub percent_of_total: f64,
    /// Most samples first, then by name; the fold, if any, last.
    pub rows: Vec<ReportRow>,
}

/// Samples that could not be symbolised, by module and reason: worth showing because they are
/// why some rows read `module+0x...` or `[unknown]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IssueRow {
    /// The module concerned, or `[unknown]`.
    pub module: String,
    /// What went wrong, for a program; JSON spells it as [`IssueRow::kind_name`] does.
    #[serde(serialize_with = "crate::json::issue_kind")]
    pub kind: Option<IssueKind>,
    /// What went wrong, for a person.
    pub reason: String,
    /// Samples affected.
    pub samples: u64,
}

impl IssueRow {
    /// The kind as scripts read it: the proto's name in lower case, without its prefix
    /// (`stripped`, `no_symbol`, `jit_unexplained`...; `unspecified` from a daemon that does
    /// not say).
    pub fn kind_name(&self) -> &'static str {
        issue_kind_name(self.kind)
    }
}

/// [`IssueRow::kind_name`] of `kind`.
pub(crate) fn issue_kind_name(kind: Option<IssueKind>) -> &'static str {
    kind.map_or("unspecified", IssueKind::as_str)
}

/// A profile ready to render: header numbers, sections and symbolisation issues.
///
/// Serialised, the JSON report's fields (see [`crate::json`]), in this order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The daemon's session id.
    pub session_id: u64,
    /// The processes sampled; empty for a system-wide session.
    pub targets: Vec<ReportTarget>,
    /// Whether every process on the machine was sampled.
    pub system_wide: bool,
    /// Main executable of the (first) target; empty system-wide.
    pub vm_executable: String,
    /// When sampling started; `None` when the daemon sent none or one outside 1970..=9999,
    /// which could not be shown as a date anyway. JSON: RFC 3339 UTC to the second, or null.
    #[serde(serialize_with = "crate::json::rfc3339")]
    pub started_at: Option<SystemTime>,
    /// Wall-clock time sampled.
    pub duration_seconds: f64,
    /// Samples per second per busy CPU that the session asked for.
    pub requested_frequency_hz: u32,
    /// Samples per second per busy CPU actually taken; `None` when the targets' CPU time is
    /// too short to measure a rate against (under [`MIN_MEASURED_CPU_SECONDS`]).
    pub measured_frequency_hz: Option<f64>,
    /// CPU time used by what was sampled.
    pub cpu_seconds: f64,
    /// Share of the host's CPU time a hypervisor stole meanwhile, in percent: a high figure
    /// explains a measured rate away from the requested one.
    #[serde(serialize_with = "crate::json::rounded")]
    pub host_steal_percent: f64,
    /// `cpu_seconds / duration_seconds`: how many CPUs were busy on average, which explains why
    /// the sample count exceeds duration x frequency; `None` with the measured frequency.
    pub busy_cpus: Option<f64>,
    /// Every sample of the targets ("samples in the entire program"), the grand total.
    pub total_samples: u64,
    /// Samples in generated and vanilla code ("samples in the VM").
    pub vm_samples: u64,
    /// `vm_samples` as a share of `total_samples`.
    #[serde(serialize_with = "crate::json::rounded")]
    pub vm_percent_of_total: f64,
    /// Samples the kernel took but could not deliver.
    pub lost_samples: u64,
    /// Lost samples indexed by CPU number.
    pub lost_samples_per_cpu: Vec<u64>,
    /// Samples taken, delivered plus lost, per busy CPU-second (the daemon's figure).
    pub taken_frequency_hz: f64,
    /// The daemon judged that the kernel throttled sampling (see `Profile.throttled`): it
    /// took clearly fewer samples than asked, under 90% over half a CPU-second or more.
    pub throttled: bool,
    /// Whether the session recorded call stacks: rows then carry inclusive time and the
    /// profile's stacks can be read as call trees ([`crate::tree`]). False for sessions
    /// without call graph and for profiles of daemons that do not say. Not in JSON, whose
    /// `call_graph` is `call_graph_mode`.
    #[serde(skip)]
    pub call_graph: bool,
    /// How the session recorded call stacks: `none`, `fp`, `dwarf`, or `unknown` from a daemon
    /// that does not say. See [`Report::call_graph_label`]. JSON's `call_graph`.
    #[serde(rename = "call_graph")]
    pub call_graph_mode: &'static str,
    /// With DWARF stacks, the bytes of user stack copied per sample at most.
    pub dwarf_stack_bytes: Option<u32>,
    /// Whether the profile is whole: the session stopped and every sample taken before the stop
    /// was read and attributed.
    pub complete: bool,
    /// Why the session stopped, if it did and the daemon said.
    pub stop_reason: Option<String>,
    /// Why a stopped session's profile is not whole, if the daemon said.
    pub incomplete_reason: Option<String>,
    /// Samples in generated code attributed before their code map was known up to their time
    /// (a VM that buffers its jitdump): they may show as unnamed or stale code. Provisional.
    pub jit_samples_before_code_map: u64,
    /// Of those, the ones whose code map may still catch up: the profile may change.
    pub jit_samples_awaiting_code_map: u64,
    /// Samples placed again, on time, in the map of their time once it caught up.
    pub jit_samples_caught_up: u64,
    /// Samples named from a perf map read after them (no timestamps), not time-correct; their
    /// rows say how many in `later_snapshot_samples`, their frames `later_snapshot`.
    pub jit_samples_from_later_snapshot: u64,
    /// Processes with samples in the profile (0 from a daemon that does not say).
    pub processes: u32,
    /// Every process with samples, most first: what each process's share of the whole is,
    /// which a system-wide profile's sections split up. Empty for a profile without stacks.
    pub process_totals: Vec<ProcessTotal>,
    /// Modules other than the main executable counted as vanilla vm code, most samples first.
    pub vm_modules: Vec<VmModule>,
    /// A module of other code big enough that it may well be part of the VM, for a hint to
    /// count it with `--vm-module`: its name and share of all samples.
    #[serde(skip)]
    pub vm_module_hint: Option<(String, f64)>,
    /// Generated (when the targets have JIT code or it has rows), vanilla, other, in that order.
    pub sections: Vec<SectionReport>,
    /// Symbolisation problems, one per (module, reason), most samples first. JSON's
    /// `symbolization_issues`.
    #[serde(rename = "symbolization_issues")]
    pub issues: Vec<IssueRow>,
    /// What the kernel counted for the targets (VMProfiler's "Events"), when the daemon
    /// counted: not for system-wide sessions (JSON: null).
    pub kernel_events: Option<KernelEventsReport>,
    /// What the VMs among the targets published of their own statistics, by pid.
    pub vm_statistics: Vec<VmStatsReport>,
    /// The native functions whose calls were counted (`record --count`), per target, exact.
    pub call_counts: Vec<vmscope_model::CallCount>,
    /// Samples whose stack was cut at the depth limit (`kernel.perf_event_max_stack`): their
    /// outermost callers are missing. JSON's stack table says it.
    #[serde(skip)]
    pub truncated_stacks: u64,
    /// Samples whose stacks ended before their thread's entry point, per reason (the depth
    /// limit included), most first: what a reader must know before trusting callers' shares.
    /// JSON's stack table says it (`stack_ends`).
    #[serde(skip)]
    pub early_stack_ends: Vec<(StackEnd, u64)>,
    /// What the session measured: `cpu`, `off-cpu` or `wall`.
    #[serde(serialize_with = "crate::json::mode")]
    pub mode: ProfileMode,
    /// Off-CPU and wall sessions: their time off the CPU, its sections, why threads waited,
    /// what was left out, and each thread's time (JSON: null otherwise).
    pub off_cpu: Option<OffCpuReport>,
    /// The threads the profile was cut to (`--tid`, `--thread`), for a person; null for
    /// every thread.
    pub thread_filter: Option<String>,
    /// The labels the profile was cut to (`--label`), for a person; null for every sample.
    pub label_filter: Option<String>,
    /// Samples counted unlabelled because their label set was new once the session told
    /// apart as many as it keeps.
    pub label_limit_samples: u64,
    /// Share of all samples (percent) whose stacks run through V8's interpreter entry
    /// trampoline, behind which interpreted JavaScript callers stay nameless unless node runs
    /// with `--interpreted-frames-native-stack`: for a hint to use it. `None` below
    /// [`INTERPRETED_FRAMES_HINT_PERCENT`] or with the flag given (the trampoline then calls
    /// named per-function copies of itself).
    #[serde(skip)]
    pub v8_interpreted_frames: Option<f64>,
}

/// Least CPU time of the targets for the report to give a measured sampling rate. The kernel
/// counts CPU time in clock ticks (10 ms), each target's rounded down: below this, a rate from
/// it is off by 10% or more, and a run shorter than one tick counts none at all (it read "0 hz
/// per busy CPU (0.00 busy CPUs)" beside its samples).
pub const MIN_MEASURED_CPU_SECONDS: f64 = 0.1;

/// V8's entry into its bytecode interpreter: every interpreted JavaScript frame is this
/// builtin's frame unless node runs with `--interpreted-frames-native-stack`.
pub const V8_INTERPRETER_ENTRY: &str = "Builtins_InterpreterEntryTrampoline";

/// Share of all samples under V8's interpreter entry at which the report suggests
/// `--interpreted-frames-native-stack`.
pub const INTERPRETED_FRAMES_HINT_PERCENT: f64 = 5.0;

/// Share of all samples whose stacks hold V8's interpreter entry trampoline (see
/// [`Report::v8_interpreted_frames`]).
fn v8_interpreted_frames(profile: &Profile) -> Option<f64> {
    let entry: Vec<bool> = profile
        .frames
        .iter()
        .map(|f| f.name == V8_INTERPRETER_ENTRY)
        .collect();
    if !entry.contains(&true) {
        return None;
    }
    let samples: u64 = profile
        .stacks
        .iter()
        .filter(|s| {
            profile
                .stack_frames(s)
                .any(|i| entry.get(i as usize).copied().unwrap_or(false))
        })
        .map(|s| s.samples())
        .sum();
    Some(percent(samples, profile.total_samples))
        .filter(|&share| share >= INTERPRETED_FRAMES_HINT_PERCENT)
}

impl Report {
    /// The call graph mode as the header says it: `fp`, or `dwarf (8192 bytes of stack)`.
    pub fn call_graph_label(&self) -> String {
        match self.dwarf_stack_bytes {
            Some(bytes) => format!("{} ({bytes} bytes of stack)", self.call_graph_mode),
            None => self.call_graph_mode.to_owned(),
        }
    }

    /// Computes the report of `profile`: sorts each section, folds its small rows and derives
    /// every percentage. Never fails: a profile with missing or odd fields gives zeros, not NaN.
    pub fn from_profile(profile: &Profile, options: &ReportOptions) -> Report {
        let no_session = Session::default();
        let session = profile.session.as_ref().unwrap_or(&no_session);
        let total = profile.total_samples;
        let call_graph = session.call_graph.is_some_and(CallGraph::has_stacks);
        let dwarf_stack_bytes =
            (session.call_graph == Some(CallGraph::Dwarf)).then_some(session.dwarf_stack_bytes);
        let call_graph_mode = session.call_graph.map_or("unknown", CallGraph::as_str);

        let Sections {
            sections,
            vm_samples,
            vm_modules,
            vm_module_hint,
        } = sections(
            (&profile.rows, &profile.labels),
            total,
            session,
            call_graph,
            options,
        );
        let duration_seconds = finite_or_zero(profile.duration_seconds);
        let cpu_seconds = finite_or_zero(profile.cpu_seconds);
        let measured = cpu_seconds >= MIN_MEASURED_CPU_SECONDS && duration_seconds > 0.0;
        let busy_cpus = measured.then(|| finite_or_zero(cpu_seconds / duration_seconds));

        Report {
            session_id: session.id,
            targets: session
                .targets
                .iter()
                .map(ReportTarget::from_proto)
                .collect(),
            system_wide: session.system_wide,
            vm_executable: profile.vm_executable.clone(),
            started_at: session.started_at.filter(|t| is_formattable(*t)),
            duration_seconds,
            requested_frequency_hz: session.frequency_hz,
            measured_frequency_hz: measured.then(|| finite_or_zero(profile.measured_frequency_hz)),
            cpu_seconds,
            host_steal_percent: finite_or_zero(profile.host_steal_percent).clamp(0.0, 100.0),
            busy_cpus,
            total_samples: total,
            vm_samples,
            vm_percent_of_total: percent(vm_samples, total),
            lost_samples: profile.lost_samples,
            taken_frequency_hz: finite_or_zero(profile.taken_frequency_hz),
            throttled: profile.throttled,
            lost_samples_per_cpu: profile.lost_samples_per_cpu.clone(),
            complete: profile.complete,
            stop_reason: (!session.stop_reason.is_empty()).then(|| session.stop_reason.clone()),
            incomplete_reason: (!profile.incomplete_reason.is_empty())
                .then(|| profile.incomplete_reason.clone()),
            jit_samples_before_code_map: profile.jit_samples_before_code_map,
            jit_samples_awaiting_code_map: profile.jit_samples_awaiting_code_map,
            jit_samples_caught_up: profile.jit_samples_caught_up,
            jit_samples_from_later_snapshot: profile.jit_samples_from_later_snapshot,
            processes: profile.processes,
            process_totals: process_totals(profile),
            vm_modules,
            vm_module_hint,
            sections,
            issues: merge_issues(profile),
            call_graph,
            call_graph_mode,
            dwarf_stack_bytes,
            truncated_stacks: profile.truncated_stacks,
            early_stack_ends: profile
                .stack_ends
                .iter()
                .filter(|e| e.end != StackEnd::Complete)
                .map(|e| (e.end, e.samples))
                .collect(),
            v8_interpreted_frames: call_graph.then(|| v8_interpreted_frames(profile)).flatten(),
            kernel_events: KernelEventsReport::from_profile(profile),
            vm_statistics: VmStatsReport::from_profile(profile),
            call_counts: profile.call_counts.clone(),
            mode: session.mode,
            off_cpu: OffCpuReport::from_profile(profile, options),
            thread_filter: (!profile.thread_filter.is_empty())
                .then(|| profile.thread_filter.clone()),
            label_filter: (!profile.label_filter.is_empty()).then(|| profile.label_filter.clone()),
            label_limit_samples: session.label_limit_samples,
        }
    }
}

/// A report's sections, and what they say of the VM.
pub(crate) struct Sections {
    /// Generated (when it has rows), vanilla, other.
    pub(crate) sections: Vec<SectionReport>,
    /// Of the grand total, what is in generated and vanilla code.
    pub(crate) vm_samples: u64,
    /// Modules counted as the VM's.
    pub(crate) vm_modules: Vec<VmModule>,
    /// A module of other code that may be the VM's.
    pub(crate) vm_module_hint: Option<(String, f64)>,
}

/// The sections of `rows`, whose counts add up to `total` (samples, or nanoseconds off the CPU:
/// the arithmetic is the same): sorted, folded and shared out as `options` asks; `labels` are
/// the profile's, that rows' label sets index.
pub(crate) fn sections(
    (rows, labels): (&[ProfileRow], &[vmscope_model::Label]),
    total: u64,
    session: &Session,
    call_graph: bool,
    options: &ReportOptions,
) -> Sections {
    let (mut by_section, vm_modules) = rows_by_section(rows, options);
    // System-wide, other code is every other program's: no hint about the VM there.
    let vm_module_hint = (!session.system_wide)
        .then(|| vm_module_hint(&by_section[Section::Other.index()], total))
        .flatten();
    // Split by process or module (`--sort`) before anything is summed, too.
    let grouped: Option<[Vec<ProfileRow>; 3]> =
        (!sort_keys::is_by_symbol(&options.sort)).then(|| {
            by_section
                .each_ref()
                .map(|rows| sort_keys::group(rows, &options.sort, labels))
        });
    if let Some(grouped) = &grouped {
        by_section = grouped.each_ref().map(|rows| rows.iter().collect());
    }
    let section_samples = |kind: Section| sum_samples(&by_section[kind.index()]);
    let vm_samples =
        section_samples(Section::Generated).saturating_add(section_samples(Section::Vanilla));

    let vanilla_title = if session.system_wide {
        "main executables"
    } else {
        "vanilla vm code"
    };
    // A section of generated code with nothing in it says nothing (CPython's perf
    // trampolines are JIT code that no sample may land in).
    let show_generated = section_samples(Section::Generated) > 0;
    let sections = [
        (Section::Generated, "generated vm code"),
        (Section::Vanilla, vanilla_title),
        (Section::Other, "other code (libraries, kernel)"),
    ]
    .into_iter()
    .filter(|&(kind, _)| kind != Section::Generated || show_generated)
    .map(|(kind, title)| {
        build_section(
            kind,
            title,
            &by_section[kind.index()],
            total,
            vm_samples,
            call_graph,
            options,
        )
    })
    .collect();
    Sections {
        sections,
        vm_samples,
        vm_modules,
        vm_module_hint,
    }
}

/// Share of all samples (percent) below which stacks that ended early for one reason get no
/// note of their own: a reason that rare changes no share a reader would act on (JSON and the
/// API keep every count). The rarer reasons together get one note when they reach it.
pub const STACK_END_NOTE_PERCENT: f64 = 1.0;

/// Why stacks that ended `end` miss callers, and what to do about it, for a report's notes,
/// with the advice that fits the call graph mode (`dwarf` stacks were unwound from copies).
pub fn stack_end_reason(end: StackEnd, dwarf: bool) -> &'static str {
    match end {
        StackEnd::Complete => "whole",
        StackEnd::DepthLimit => "cut at the depth limit (kernel.perf_event_max_stack)",
        StackEnd::NoFramePointer if dwarf => {
            "stopped at a caller with neither unwind information nor a frame pointer"
        }
        StackEnd::NoFramePointer => {
            "stopped at a caller built without frame pointers (--call-graph dwarf unwinds it)"
        }
        StackEnd::UnmappedReturn if dwarf => {
            "stopped at a return address outside every mapping (unwound through code with \
             neither unwind information nor frame pointers, or code unmapped since)"
        }
        StackEnd::UnmappedReturn => {
            "stopped at a return address outside every mapping (code without frame pointers: \
             --call-graph dwarf unwinds it)"
        }
        StackEnd::CopyTooSmall => {
            "went past the stack copy (a bigger --call-graph dwarf,SIZE goes further)"
        }
        StackEnd::CopyFaulted => "went past a stack copy cut by unreadable memory",
        StackEnd::UnwindFailed => {
            "stopped where neither unwind information nor a frame pointer led further"
        }
        StackEnd::JitNoFramePointer => {
            "stopped at Java code compiled without frame pointers (run the JVM with \
             -XX:+PreserveFramePointer for whole Java stacks)"
        }
        StackEnd::StackLimit => {
            "new once the session held its most distinct stacks: counted by leaf alone under \
             [truncated: stack limit] (vmscoped --max-stacks-per-session)"
        }
    }
}

impl Report {
    /// The report's notes on stacks that ended before their thread's entry point, other than
    /// at the depth limit (said on its own): samples, and why in words. One per reason that
    /// holds at least [`STACK_END_NOTE_PERCENT`] of all samples, most first; the rarer ones
    /// together in one more when they reach it too.
    pub fn stack_end_notes(&self) -> Vec<(u64, String)> {
        if !self.call_graph {
            return Vec::new();
        }
        let dwarf = self.call_graph_mode == "dwarf";
        let worth = |samples: u64| percent(samples, self.total_samples) >= STACK_END_NOTE_PERCENT;
        let mut notes = Vec::new();
        let mut rare = 0;
        for &(end, samples) in &self.early_stack_ends {
            if end == StackEnd::DepthLimit {
                continue;
            }
            if worth(samples) {
                notes.push((samples, stack_end_reason(end, dwarf).to_owned()));
            } else {
                rare += samples;
            }
        }
        if worth(rare) {
            notes.push((
                rare,
                "ended early for rarer reasons (each under 1% of samples; JSON's stack_ends \
                 counts them)"
                    .to_owned(),
            ));
        }
        notes
    }
}

/// Rounds a percentage (or any value) to two decimals, half away from zero. Both renderers
/// go through it so that text and JSON agree to the last digit; `format!("{:.2}")` alone
/// rounds half to even on the binary value and could differ from the JSON by 0.01.
pub fn round2(value: f64) -> f64 {
    if !value.is_finite() {
        return value;
    }
    (value * 100.0).round() / 100.0
}

/// `started_at` as RFC 3339 UTC to the second ("2026-11-22T10:00:00Z"), or `None` outside the
/// years 1970..=9999, where humantime would panic or fail.
pub fn rfc3339_seconds(time: SystemTime) -> Option<String> {
    use std::fmt::Write as _;
    if !is_formattable(time) {
        return None;
    }
    let mut formatted = String::new();
    write!(formatted, "{}", humantime::format_rfc3339_seconds(time)).ok()?;
    Some(formatted)
}

fn is_formattable(time: SystemTime) -> bool {
    time.duration_since(UNIX_EPOCH)
        .is_ok_and(|since| since.as_secs() < FORMATTABLE_UNTIL_SECS)
}

/// `part / whole * 100`, or 0 when `whole` is 0: an empty profile shows 0.00%, never NaN.
pub(crate) fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64 * 100.0
    }
}

/// A daemon bug must not turn into NaN or inf all over the report.
fn finite_or_zero(value: f64) -> f64 {
    if value.is_finite() { value } else { 0.0 }
}

/// Saturating: absurd counts from a broken daemon must not overflow into a panic.
fn sum_samples(rows: &[&ProfileRow]) -> u64 {
    rows.iter()
        .fold(0, |sum, row| sum.saturating_add(row.samples))
}

/// Whether a row is under the fold threshold. Compares `samples * 100` with
/// `min_percent * total` rather than dividing, so that a row exactly at the threshold (1 sample
/// of 10000 at 0.01%) compares equal and stays.
fn is_small(samples: u64, total: u64, min_percent: f64) -> bool {
    (samples as f64) * 100.0 < min_percent * total as f64
}

/// The rows of a profile by section, with no-self-time rows (callers only, in sessions with
/// stacks: they carry inclusive time for trees and formats) left out, and rows of modules
/// `--vm-module` or a known runtime makes the VM's moved to vanilla VM code before anything is
/// summed, so that every number agrees with the move; with those modules, most samples first.
fn rows_by_section<'a>(
    rows: &'a [ProfileRow],
    options: &ReportOptions,
) -> ([Vec<&'a ProfileRow>; 3], Vec<VmModule>) {
    let mut by_section: [Vec<&ProfileRow>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let mut vm_modules: BTreeMap<&str, VmModule> = BTreeMap::new();
    for row in rows
        .iter()
        .filter(|r| r.samples > 0 || r.inclusive_samples == 0)
    {
        let mut kind = row.section;
        if kind == Section::Other
            && let Some(runtime) = vm_module(options, &row.module)
        {
            kind = Section::Vanilla;
            let module = vm_modules.entry(&row.module).or_insert_with(|| VmModule {
                module: file_name(&row.module).to_owned(),
                runtime,
                samples: 0,
            });
            module.samples = module.samples.saturating_add(row.samples);
        }
        by_section[kind.index()].push(row);
    }
    let mut vm_modules: Vec<VmModule> = vm_modules.into_values().collect();
    rank(
        &mut vm_modules,
        |m| m.samples,
        |a, b| a.module.cmp(&b.module),
    );
    (by_section, vm_modules)
}

fn build_section(
    kind: Section,
    title: &str,
    rows: &[&ProfileRow],
    total: u64,
    vm_samples: u64,
    call_graph: bool,
    options: &ReportOptions,
) -> SectionReport {
    let samples = sum_samples(rows);
    let (mut kept, folded): (Vec<&ProfileRow>, Vec<&ProfileRow>) = rows
        .iter()
        .copied()
        .partition(|row| !is_small(row.samples, total, options.min_percent));
    // Rows regrouped by `--sort` come in their groups' order, and a daemon's order is not
    // trusted: the model's one order, again.
    kept.sort_by(|a, b| ProfileRow::order(a, b));

    let mut out = Vec::with_capacity(kept.len() + 1);
    // Cumulative percentages come from the running sum of samples, not of rounded
    // percentages, so that the last row is exactly 100.
    let mut running: u64 = 0;
    let mut push = |row: ReportRow| {
        running = running.saturating_add(row.samples);
        let sole = match row.processes.as_slice() {
            [only] => Some(only),
            _ => None,
        };
        out.push(ReportRow {
            pid: sole.map(|p| p.pid),
            command: sole.map(|p| p.command.clone()),
            percent_of_section: percent(row.samples, samples),
            percent_of_total: percent(row.samples, total),
            cumulative_percent: percent(running, samples),
            inclusive_percent_of_total: row.inclusive_samples.map(|n| percent(n, total)),
            ..row
        });
    };
    for row in &kept {
        let generated = kind == Section::Generated;
        let ranges = range_rows(row);
        let inlined = inlined_rows(row);
        let show_details = generated
            && (!ranges.is_empty() || !inlined.is_empty())
            && !is_small(row.samples, total, options.min_range_percent);
        push(ReportRow {
            name: row.name.clone(),
            module: row.module.clone(),
            section: kind,
            symbolized: row.symbolized,
            samples: row.samples,
            // 0 is what `sort_keys` gives rows whose inclusive time is unknown; a real row's is
            // at least its own samples.
            inclusive_samples: (call_graph && row.inclusive_samples > 0)
                .then_some(row.inclusive_samples),
            inclusive_percent_of_total: None,
            percent_of_section: 0.0,
            percent_of_total: 0.0,
            cumulative_percent: 0.0,
            folded_rows: 0,
            kind: if generated { row.kind } else { None },
            code_map: row.code_map.clone(),
            optimised: generated && row.optimised,
            ranges,
            inlined,
            pid: None,
            command: None,
            processes: row
                .processes
                .iter()
                .map(|p| ProcessShare {
                    pid: p.pid,
                    command: p.command.clone(),
                    samples: p.samples,
                })
                .collect(),
            show_details,
            srcline: row.srcline.clone(),
            later_snapshot_samples: row.later_snapshot_samples,
        });
    }
    // Even a single small row folds, as VMProfiler does: the fold marks where detail stops.
    if !folded.is_empty() {
        push(ReportRow {
            name: OTHERS_NAME.to_owned(),
            module: String::new(),
            section: kind,
            symbolized: false,
            samples: sum_samples(&folded),
            inclusive_samples: None,
            inclusive_percent_of_total: None,
            percent_of_section: 0.0,
            percent_of_total: 0.0,
            cumulative_percent: 0.0,
            folded_rows: folded.len(),
            kind: None,
            code_map: String::new(),
            optimised: false,
            ranges: Vec::new(),
            inlined: Vec::new(),
            pid: None,
            command: None,
            processes: fold_processes(&folded),
            show_details: false,
            srcline: String::new(),
            later_snapshot_samples: folded.iter().map(|r| r.later_snapshot_samples).sum(),
        });
    }

    SectionReport {
        section: kind,
        title: title.to_owned(),
        samples,
        percent_of_vm: (kind != Section::Other).then(|| percent(samples, vm_samples)),
        percent_of_total: percent(samples, total),
        rows: out,
    }
}

/// The processes of the folded rows, their samples summed, most first.
fn fold_processes(folded: &[&ProfileRow]) -> Vec<ProcessShare> {
    sort_keys::sum_by_process(folded.iter().flat_map(|row| &row.processes))
        .into_iter()
        .map(|p| ProcessShare {
            pid: p.pid,
            command: p.command,
            samples: p.samples,
        })
        .collect()
}

/// Percentages of a method's samples. A broken daemon could send parts that add up to more
/// than the method: they are then shares of their own sum, never above 100%.
fn method_whole(row: &ProfileRow, parts: u64) -> u64 {
    row.samples.max(parts)
}

/// The row's ranges in the daemon's (code) order, without empty ones. Cumulative percentages
/// come from running sums of samples, like the rows', so that ranges covering the whole method
/// end on exactly 100; ranges that cover only part of it (some of its samples fell in code
/// without a pc map) end below, which is the truth.
fn range_rows(row: &ProfileRow) -> Vec<RangeRow> {
    let ranges: Vec<_> = row.ranges.iter().filter(|r| r.samples > 0).collect();
    let whole = method_whole(
        row,
        ranges
            .iter()
            .fold(0u64, |sum, r| sum.saturating_add(r.samples)),
    );
    let mut running: u64 = 0;
    ranges
        .into_iter()
        .map(|range| {
            running = running.saturating_add(range.samples);
            RangeRow {
                label: range.label.clone(),
                samples: range.samples,
                percent_of_method: percent(range.samples, whole),
                cumulative_percent: percent(running, whole),
            }
        })
        .collect()
}

/// The row's inlined methods, most samples first (then by name, whatever the daemon's order),
/// without empty ones.
fn inlined_rows(row: &ProfileRow) -> Vec<InlinedRow> {
    let mut inlined: Vec<_> = row.inlined.iter().filter(|i| i.samples > 0).collect();
    inlined.sort_by(|a, b| InlinedMethod::order(a, b));
    let whole = method_whole(
        row,
        inlined
            .iter()
            .fold(0u64, |sum, i| sum.saturating_add(i.samples)),
    );
    inlined
        .into_iter()
        .map(|method| InlinedRow {
            name: method.name.clone(),
            samples: method.samples,
            percent_of_method: percent(method.samples, whole),
        })
        .collect()
}

/// The daemon already groups issues by (module, kind, reason); merging again costs nothing and
/// keeps the "one row per issue" promise even if it did not.
fn merge_issues(profile: &Profile) -> Vec<IssueRow> {
    let mut merged: BTreeMap<(&str, Option<IssueKind>, &str), u64> = BTreeMap::new();
    for issue in &profile.symbolization_issues {
        let entry = merged
            .entry((issue.module.as_str(), issue.kind, issue.reason.as_str()))
            .or_default();
        *entry = entry.saturating_add(issue.samples);
    }
    let mut issues: Vec<IssueRow> = merged
        .into_iter()
        .map(|((module, kind, reason), samples)| IssueRow {
            module: module.to_owned(),
            kind,
            reason: reason.to_owned(),
            samples,
        })
        .collect();
    // Stable sort over the map's (module, kind, reason) order: ties stay alphabetical.
    rank(&mut issues, |i| i.samples, |_, _| std::cmp::Ordering::Equal);
    issues
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use vmscope_model::Section::{Generated as G, Other as O, Vanilla as V};
    use vmscope_model::{CallGraph, SymbolizationIssue};

    use vmscope_model::{CodeKind, CodeRange, InlinedMethod};

    use super::*;
    use crate::fixtures::{
        BENCH_FIB_RANGES, STARTED_AT_SECS, jit_plain, jit_profile, jit_row, node_profile,
        profile_with, row, stacks_profile,
    };

    const OPTIONS: ReportOptions = ReportOptions::DEFAULT;

    #[test]
    fn default_options_are_vmprofilers() {
        assert_eq!(ReportOptions::default(), OPTIONS);
    }

    fn section(report: &Report, kind: Section) -> &SectionReport {
        report
            .sections
            .iter()
            .find(|s| s.section == kind)
            .unwrap_or_else(|| panic!("no {kind:?} section in {report:#?}"))
    }

    fn names(section: &SectionReport) -> Vec<&str> {
        section.rows.iter().map(|r| r.name.as_str()).collect()
    }

    fn assert_close(actual: f64, expected: f64) {
        assert!(
            (actual - expected).abs() < 1e-9,
            "expected {expected}, got {actual}"
        );
    }

    #[test]
    fn percentages_and_cumulative_of_a_hand_computed_section() {
        let profile = profile_with(vec![
            row(V, "b", "vm", 3000),
            row(V, "c", "vm", 1000),
            row(V, "a", "vm", 6000),
        ]);
        let report = Report::from_profile(&profile, &OPTIONS);
        let vanilla = section(&report, Section::Vanilla);
        assert_eq!(vanilla.samples, 10_000);
        assert_eq!(names(vanilla), ["a", "b", "c"]);
        let expected = [(60.0, 60.0), (30.0, 90.0), (10.0, 100.0)];
        for (row, (pct, cumulative)) in vanilla.rows.iter().zip(expected) {
            assert_close(row.percent_of_section, pct);
            assert_close(row.percent_of_total, pct);
            assert_close(row.cumulative_percent, cumulative);
            assert_eq!(row.folded_rows, 0);
        }
        assert_eq!(vanilla.rows[2].cumulative_percent, 100.0);
    }

    #[test]
    fn rows_under_the_threshold_fold_and_rows_at_it_stay() {
        // 20000 samples: 0.01% is 2 samples. 2 stays, 1 folds.
        let profile = profile_with(vec![
            row(V, "big", "vm", 19_993),
            row(V, "at_threshold", "vm", 2),
            row(V, "small_a", "vm", 1),
            row(V, "small_b", "vm", 1),
            row(O, "lib", "libc.so.6", 3),
        ]);
        let report = Report::from_profile(&profile, &OPTIONS);
        let vanilla = section(&report, Section::Vanilla);
        assert_eq!(names(vanilla), ["big", "at_threshold", OTHERS_NAME]);
        let others = &vanilla.rows[2];
        assert_eq!(others.samples, 2);
        assert_eq!(others.folded_rows, 2);
        assert_eq!(others.module, "");
        assert!(!others.symbolized);
        assert_eq!(others.section, Section::Vanilla);
        assert_eq!(others.cumulative_percent, 100.0);
        assert_close(others.percent_of_total, 0.01);
        // The section still counts what was folded.
        assert_eq!(vanilla.samples, 19_997);
        assert_eq!(names(section(&report, Section::Other)), ["lib"]);
    }

    #[test]
    fn a_row_exactly_at_a_tenth_of_a_permille_of_ten_thousand_stays() {
        let profile = profile_with(vec![row(V, "big", "vm", 9_999), row(V, "one", "vm", 1)]);
        let report = Report::from_profile(&profile, &OPTIONS);
        assert_eq!(names(section(&report, Section::Vanilla)), ["big", "one"]);
    }

    #[test]
    fn a_single_small_row_still_folds() {
        let profile = profile_with(vec![row(V, "big", "vm", 99_999), row(V, "tiny", "vm", 1)]);
        let report = Report::from_profile(&profile, &OPTIONS);
        let vanilla = section(&report, Section::Vanilla);
        assert_eq!(names(vanilla), ["big", OTHERS_NAME]);
        assert_eq!(vanilla.rows[1].folded_rows, 1);
        assert_eq!(vanilla.rows[1].samples, 1);
    }

    #[test]
    fn zero_threshold_keeps_every_row() {
        let profile = profile_with(vec![row(V, "big", "vm", 99_999), row(V, "tiny", "vm", 1)]);
        let options = ReportOptions {
            min_percent: 0.0,
            ..OPTIONS
        };
        let report = Report::from_profile(&profile, &options);
        assert_eq!(names(section(&report, Section::Vanilla)), ["big", "tiny"]);
    }

    #[test]
    fn a_section_where_everything_folds_is_one_others_row_at_100_percent() {
        let profile = profile_with(vec![
            row(V, "a", "vm", 1),
            row(V, "b", "vm", 2),
            row(V, "c", "vm", 3),
            row(O, "rest", "libc.so.6", 999_994),
        ]);
        let report = Report::from_profile(&profile, &OPTIONS);
        let vanilla = section(&report, Section::Vanilla);
        assert_eq!(vanilla.rows.len(), 1);
        let others = &vanilla.rows[0];
        assert_eq!(others.name, OTHERS_NAME);
        assert_eq!((others.samples, others.folded_rows), (6, 3));
        assert_eq!(others.percent_of_section, 100.0);
        assert_eq!(others.cumulative_percent, 100.0);
    }

    #[test]
    fn a_rate_is_measured_only_against_enough_cpu_time() {
        // A short run: samples, but the kernel counted less CPU time than a tick.
        let mut short = profile_with(vec![row(V, "main", "vm", 3)]);
        short.cpu_seconds = 0.0;
        short.measured_frequency_hz = 0.0;
        let report = Report::from_profile(&short, &OPTIONS);
        assert_eq!(report.measured_frequency_hz, None);
        assert_eq!(report.busy_cpus, None);
        short.cpu_seconds = 0.03;
        short.measured_frequency_hz = 100.0;
        assert_eq!(
            Report::from_profile(&short, &OPTIONS).measured_frequency_hz,
            None,
            "3 ticks are too coarse"
        );
        short.cpu_seconds = 0.5;
        let report = Report::from_profile(&short, &OPTIONS);
        assert_eq!(report.measured_frequency_hz, Some(100.0));
        assert!(report.busy_cpus.is_some_and(|b| b > 0.0));
    }

    #[test]
    fn every_process_gets_its_total_most_first() {
        let mut profile = profile_with(vec![row(V, "main", "vm", 10)]);
        let stack = |pid, samples| vmscope_model::Stack {
            pid,
            values: vec![samples],
            ..Default::default()
        };
        profile.total_samples = 10;
        profile.stacks = vec![
            stack(7, 2),
            stack(9, 5),
            stack(7, 1),
            stack(8, 2),
            stack(6, 0),
        ];
        if let Some(session) = profile.session.as_mut() {
            session.targets[0].pid = 9;
            session.targets[0].command = "node".into();
        }
        let totals = Report::from_profile(&profile, &OPTIONS).process_totals;
        let got: Vec<(u32, &str, u64)> = totals
            .iter()
            .map(|p| (p.pid, p.command.as_str(), p.samples))
            .collect();
        assert_eq!(got, [(9, "node", 5), (7, "", 3), (8, "", 2)]);
        assert_close(totals[0].percent_of_total, 50.0);
    }

    #[test]
    fn zero_total_samples_gives_zeros_not_nan() {
        let mut profile = profile_with(vec![row(V, "never_ran", "vm", 0)]);
        profile.duration_seconds = 0.0;
        profile.cpu_seconds = 0.0;
        profile.measured_frequency_hz = f64::NAN;
        let report = Report::from_profile(&profile, &OPTIONS);
        assert_eq!(report.total_samples, 0);
        assert_eq!(report.busy_cpus, None);
        assert_eq!(report.measured_frequency_hz, None);
        assert_eq!(report.vm_percent_of_total, 0.0);
        for section in &report.sections {
            assert_eq!(section.percent_of_total, 0.0);
            assert!(section.percent_of_vm.is_none_or(|p| p == 0.0));
            for row in &section.rows {
                for value in [
                    row.percent_of_section,
                    row.percent_of_total,
                    row.cumulative_percent,
                ] {
                    assert_eq!(value, 0.0, "{row:?}");
                }
            }
        }
        // Nothing is under 0% of nothing: the zero row stays visible rather than folding.
        assert_eq!(names(section(&report, Section::Vanilla)), ["never_ran"]);
    }

    #[test]
    fn an_empty_profile_still_has_vanilla_and_other_sections() {
        let report = Report::from_profile(&Profile::default(), &OPTIONS);
        let kinds: Vec<_> = report.sections.iter().map(|s| s.section).collect();
        assert_eq!(kinds, [Section::Vanilla, Section::Other]);
        assert!(report.sections.iter().all(|s| s.rows.is_empty()));
        assert_eq!(report.started_at, None);
        assert_eq!(report.stop_reason, None);
        assert_eq!(report.session_id, 0);
    }

    #[test]
    fn ties_sort_by_name_then_module_whatever_the_input_order() {
        let profile = profile_with(vec![
            row(V, "b", "vm", 5),
            row(V, "a", "vm2", 5),
            row(V, "c", "vm", 7),
            row(V, "a", "vm1", 5),
        ]);
        let report = Report::from_profile(&profile, &OPTIONS);
        let vanilla = section(&report, Section::Vanilla);
        let order: Vec<_> = vanilla
            .rows
            .iter()
            .map(|r| (r.name.as_str(), r.module.as_str()))
            .collect();
        assert_eq!(
            order,
            [("c", "vm"), ("a", "vm1"), ("a", "vm2"), ("b", "vm")]
        );
    }

    #[test]
    fn percent_of_vm_counts_generated_and_vanilla_only() {
        let profile = profile_with(vec![
            row(G, "jit", "[anon]", 300),
            row(V, "interp", "vm", 100),
            row(O, "memcpy", "libc.so.6", 600),
        ]);
        let report = Report::from_profile(&profile, &OPTIONS);
        assert_eq!((report.vm_samples, report.total_samples), (400, 1000));
        assert_close(report.vm_percent_of_total, 40.0);
        let generated = section(&report, Section::Generated);
        assert_close(generated.percent_of_vm.unwrap_or(f64::NAN), 75.0);
        assert_close(generated.percent_of_total, 30.0);
        let vanilla = section(&report, Section::Vanilla);
        assert_close(vanilla.percent_of_vm.unwrap_or(f64::NAN), 25.0);
        let other = section(&report, Section::Other);
        assert_eq!(other.percent_of_vm, None);
        assert_close(other.percent_of_total, 60.0);
    }

    #[test]
    fn last_cumulative_is_exactly_100_with_thirds() {
        let profile = profile_with(vec![
            row(V, "a", "vm", 1),
            row(V, "b", "vm", 1),
            row(V, "c", "vm", 1),
        ]);
        let report = Report::from_profile(&profile, &OPTIONS);
        let vanilla = section(&report, Section::Vanilla);
        let rounded: Vec<_> = vanilla
            .rows
            .iter()
            .map(|r| (round2(r.percent_of_section), round2(r.cumulative_percent)))
            .collect();
        assert_eq!(rounded, [(33.33, 33.33), (33.33, 66.67), (33.33, 100.0)]);
        assert_eq!(vanilla.rows[2].cumulative_percent, 100.0);
    }

    #[test]
    fn last_cumulative_is_exactly_100_with_awkward_counts() {
        let counts = [2, 1, 1, 1, 1, 1];
        let profile = profile_with(
            counts
                .iter()
                .enumerate()
                .map(|(i, &n)| row(O, &format!("f{i}"), "libx.so", n))
                .collect(),
        );
        let report = Report::from_profile(&profile, &OPTIONS);
        let other = section(&report, Section::Other);
        let last = other.rows.last().map(|r| r.cumulative_percent);
        assert_eq!(last, Some(100.0));
        // The naive running sum of rounded percentages would not land on 100.
        let naive: f64 = other
            .rows
            .iter()
            .map(|r| round2(r.percent_of_section))
            .sum();
        assert_ne!(round2(naive), 100.0);
    }

    #[test]
    fn generated_section_only_when_samples_landed_in_generated_code() {
        let plain = profile_with(vec![row(V, "main", "vm", 10)]);
        let report = Report::from_profile(&plain, &OPTIONS);
        assert!(
            report
                .sections
                .iter()
                .all(|s| s.section != Section::Generated)
        );

        // JIT code that no sample landed in (CPython's perf trampolines): no empty section.
        let mut jit_idle = plain.clone();
        jit_idle.has_generated_code = true;
        let report = Report::from_profile(&jit_idle, &OPTIONS);
        assert!(
            report
                .sections
                .iter()
                .all(|s| s.section != Section::Generated),
            "{:?}",
            report.sections
        );

        let jit_rows = profile_with(vec![row(G, "jit", "[anon]", 10)]);
        let report = Report::from_profile(&jit_rows, &OPTIONS);
        assert_eq!(section(&report, Section::Generated).rows.len(), 1);
    }

    #[test]
    fn titles_and_system_wide_title() {
        let mut profile = profile_with(vec![row(G, "jit", "[anon]", 10)]);
        let titles = |p: &Profile| {
            Report::from_profile(p, &OPTIONS)
                .sections
                .into_iter()
                .map(|s| s.title)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            titles(&profile),
            [
                "generated vm code",
                "vanilla vm code",
                "other code (libraries, kernel)"
            ]
        );
        if let Some(session) = profile.session.as_mut() {
            session.system_wide = true;
            session.targets.clear();
        }
        assert_eq!(
            titles(&profile),
            [
                "generated vm code",
                "main executables",
                "other code (libraries, kernel)"
            ]
        );
    }

    #[test]
    fn issues_merge_by_module_and_reason_most_samples_first() {
        let mut profile = profile_with(vec![row(O, "x", "libx.so", 1)]);
        let issue = |module: &str, reason: &str, samples| SymbolizationIssue {
            module: module.to_owned(),
            reason: reason.to_owned(),
            samples,
            kind: Some(IssueKind::NoSymbol),
        };
        profile.symbolization_issues = vec![
            issue("liba.so", "stripped", 3),
            issue("libb.so", "malformed ELF: bad magic", 5),
            issue("liba.so", "stripped", 4),
            issue("liba.so", "no symbol covers the address", 7),
        ];
        let report = Report::from_profile(&profile, &OPTIONS);
        let got: Vec<_> = report
            .issues
            .iter()
            .map(|i| (i.module.as_str(), i.reason.as_str(), i.samples))
            .collect();
        assert_eq!(
            got,
            [
                ("liba.so", "no symbol covers the address", 7),
                ("liba.so", "stripped", 7),
                ("libb.so", "malformed ELF: bad magic", 5),
            ]
        );
    }

    #[test]
    fn header_numbers() {
        let report = Report::from_profile(&node_profile(), &OPTIONS);
        assert_eq!(report.session_id, 7);
        assert_eq!(report.total_samples, 14_000);
        assert_eq!(report.vm_samples, 13_000);
        assert_close(report.busy_cpus.unwrap(), 10.012 / 5.002);
        assert_eq!(report.requested_frequency_hz, 1400);
        assert_eq!(report.stop_reason.as_deref(), Some("all targets exited"));
        assert_eq!(
            report.started_at,
            Some(UNIX_EPOCH + Duration::from_secs(STARTED_AT_SECS))
        );
        assert_eq!(
            report.targets,
            [ReportTarget {
                pid: 4242,
                command: "node".into(),
                executable: "/usr/bin/node".into(),
                exited: false,
                note: String::new(),
            }]
        );
        // The sections' samples add up to the grand total.
        let sum: u64 = report.sections.iter().map(|s| s.samples).sum();
        assert_eq!(sum, report.total_samples);
    }

    #[test]
    fn unformattable_start_times_become_unknown() {
        let far = |seconds: u64| UNIX_EPOCH.checked_add(Duration::from_secs(seconds));
        let times = [
            UNIX_EPOCH.checked_sub(Duration::from_secs(1)),
            far(253_402_300_800),
            far(i64::MAX as u64),
        ];
        for time in times.into_iter().flatten() {
            let mut profile = profile_with(vec![]);
            if let Some(session) = profile.session.as_mut() {
                session.started_at = Some(time);
            }
            let report = Report::from_profile(&profile, &OPTIONS);
            assert_eq!(report.started_at, None, "{time:?}");
        }
        assert_eq!(rfc3339_seconds(UNIX_EPOCH - Duration::from_secs(1)), None);
        assert_eq!(
            rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(STARTED_AT_SECS)).as_deref(),
            Some("2026-11-22T10:00:00Z")
        );
    }

    fn find<'a>(report: &'a Report, name: &str) -> &'a ReportRow {
        report
            .sections
            .iter()
            .flat_map(|s| &s.rows)
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no row {name} in {report:#?}"))
    }

    #[test]
    fn stacks_give_rows_inclusive_time_beside_self_time() {
        let options = ReportOptions {
            min_percent: 0.5,
            ..OPTIONS
        };
        let report = Report::from_profile(&stacks_profile(), &options);
        assert!(report.call_graph);
        assert_eq!(report.total_samples, 2010);
        assert_eq!(report.truncated_stacks, 10);
        // benchmark: 150 samples of its own, 1904 with everything it called (all but the
        // interpreter's own 30, the truncated 10, the file write's 60 and clock_gettime's 6).
        let benchmark = find(&report, "Integer>>benchmark");
        assert_eq!(benchmark.samples, 150);
        assert_eq!(benchmark.inclusive_samples, Some(1904));
        assert_eq!(
            benchmark.inclusive_percent_of_total.map(round2),
            Some(94.73)
        );
        // Recursion counts once per sample: 1010 own samples plus SmallInteger>>+'s 4.
        let fib = find(&report, "Integer>>benchFib");
        assert_eq!((fib.samples, fib.inclusive_samples), (1010, Some(1014)));
        let interpret = find(&report, "interpret");
        assert_eq!(
            (interpret.samples, interpret.inclusive_samples),
            (30, Some(2000))
        );
        // The folds of generated code (SmallInteger>>+) and other code (clock_gettime).
        let folds: Vec<&ReportRow> = report
            .sections
            .iter()
            .flat_map(|s| &s.rows)
            .filter(|r| r.folded_rows > 0)
            .collect();
        assert_eq!(folds.len(), 2);
        assert!(
            folds
                .iter()
                .all(|r| r.inclusive_samples.is_none() && r.inclusive_percent_of_total.is_none())
        );
    }

    #[test]
    fn inclusive_time_needs_stacks_and_whole_rows() {
        let mut profile = stacks_profile();
        // Grouped by module, a row is several functions: its inclusive time is unknown.
        let by_dso = ReportOptions {
            sort: vec![SortKey::Dso],
            ..OPTIONS
        };
        let report = Report::from_profile(&profile, &by_dso);
        assert!(
            report
                .sections
                .iter()
                .flat_map(|s| &s.rows)
                .all(|r| r.inclusive_samples.is_none()),
            "{report:#?}"
        );
        // By process and function, each row is one function of one process: kept.
        let by_pid = ReportOptions {
            sort: vec![SortKey::Pid, SortKey::Sym],
            ..OPTIONS
        };
        let report = Report::from_profile(&profile, &by_pid);
        let benchmark = find(&report, "jitvm[4242]  Integer>>benchmark");
        assert_eq!(benchmark.inclusive_samples, Some(1904));
        // A session without stacks (or a daemon that does not say) shows none, whatever its
        // rows carry.
        for call_graph in [Some(CallGraph::None), None] {
            if let Some(session) = profile.session.as_mut() {
                session.call_graph = call_graph;
            }
            let report = Report::from_profile(&profile, &OPTIONS);
            assert!(!report.call_graph);
            assert_eq!(find(&report, "Integer>>benchmark").inclusive_samples, None);
        }
        // DWARF stacks are stacks too, and the header says how much stack was copied.
        if let Some(session) = profile.session.as_mut() {
            session.call_graph = Some(CallGraph::Dwarf);
            session.dwarf_stack_bytes = 16384;
        }
        let report = Report::from_profile(&profile, &OPTIONS);
        assert!(report.call_graph);
        assert_eq!(report.call_graph_mode, "dwarf");
        assert_eq!(report.call_graph_label(), "dwarf (16384 bytes of stack)");
        assert_eq!(report.dwarf_stack_bytes, Some(16384));
        assert_eq!(
            find(&report, "Integer>>benchmark").inclusive_samples,
            Some(1904)
        );
    }

    /// The demo once said "5656 samples (99.67%) have stacks that stopped at a caller built
    /// without frame pointers", and a dwarf session told its reader to use dwarf: notes speak
    /// of what matters, in the words of the mode the stacks were taken in.
    #[test]
    fn stack_end_notes_fold_rare_reasons_and_fit_the_call_graph_mode() {
        let mut profile = stacks_profile();
        profile.total_samples = 10_000;
        let ends = |list: &[(StackEnd, u64)]| {
            list.iter()
                .map(|&(end, samples)| vmscope_model::StackEndSamples { end, samples })
                .collect()
        };
        profile.stack_ends = ends(&[
            (StackEnd::Complete, 9_000),
            (StackEnd::UnmappedReturn, 800),
            (StackEnd::DepthLimit, 150),
            (StackEnd::CopyTooSmall, 30),
            (StackEnd::UnwindFailed, 20),
        ]);
        let fp = Report::from_profile(&profile, &OPTIONS);
        let notes = fp.stack_end_notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].0, 800);
        assert!(
            notes[0].1.contains("--call-graph dwarf unwinds it"),
            "{notes:?}"
        );
        if let Some(session) = profile.session.as_mut() {
            session.call_graph = Some(CallGraph::Dwarf);
        }
        let dwarf = Report::from_profile(&profile, &OPTIONS);
        let notes = dwarf.stack_end_notes();
        assert!(!notes[0].1.contains("--call-graph dwarf"), "{notes:?}");
        // Rare reasons fold into one note once they reach the threshold together.
        profile.stack_ends = ends(&[
            (StackEnd::Complete, 9_900),
            (StackEnd::CopyTooSmall, 60),
            (StackEnd::UnwindFailed, 40),
        ]);
        let notes = Report::from_profile(&profile, &OPTIONS).stack_end_notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].0, 100);
        assert!(notes[0].1.contains("rarer reasons"), "{notes:?}");
        profile.stack_ends = ends(&[(StackEnd::Complete, 9_990), (StackEnd::CopyTooSmall, 10)]);
        assert!(
            Report::from_profile(&profile, &OPTIONS)
                .stack_end_notes()
                .is_empty()
        );
    }

    #[test]
    fn figure_7_bench_fib_ranges_percentages_and_cumulative() {
        let report = Report::from_profile(&jit_profile(), &OPTIONS);
        let fib = find(&report, "Integer>>benchFib");
        assert_eq!(fib.samples, 4735);
        let got: Vec<_> = fib
            .ranges
            .iter()
            .map(|r| {
                (
                    r.label.as_str(),
                    r.samples,
                    round2(r.percent_of_method),
                    round2(r.cumulative_percent),
                )
            })
            .collect();
        // Figure 7's numbers (its "100.0%" and "38->6667" aside), worked out by hand:
        // 2744/4735 = 57.95%, 3160/4735 = 66.74%, 4167/4735 = 88.00%...
        assert_eq!(
            got,
            [
                ("1->23", 2744, 57.95, 57.95),
                ("24->30", 279, 5.89, 63.84),
                ("30->31", 137, 2.89, 66.74),
                ("31->34", 390, 8.24, 74.97),
                ("34->35", 160, 3.38, 78.35),
                ("35->36", 312, 6.59, 84.94),
                ("36->38", 145, 3.06, 88.00),
                ("38->end", 568, 12.00, 100.00),
            ]
        );
        assert_eq!(fib.ranges[7].cumulative_percent, 100.0);
        let sent: Vec<_> = fib
            .ranges
            .iter()
            .map(|r| (r.label.as_str(), r.samples))
            .collect();
        assert_eq!(sent, BENCH_FIB_RANGES, "the daemon's order, untouched");
        assert_close(fib.ranges[0].percent_of_method, 2744.0 / 4735.0 * 100.0);
        assert!(fib.show_details);
        assert_eq!(fib.kind, Some(CodeKind::Method));
        assert_eq!(fib.code_map, "vm");
        assert!(fib.inlined.is_empty());
    }

    #[test]
    fn ranges_keep_code_order_not_sample_order() {
        let profile = profile_with(vec![jit_row(
            "m",
            CodeKind::Method,
            &[("1->5", 10), ("5->9", 70), ("9->end", 20)],
            &[],
        )]);
        let report = Report::from_profile(&profile, &OPTIONS);
        let m = find(&report, "m");
        let labels: Vec<_> = m.ranges.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["1->5", "5->9", "9->end"]);
        let cumulative: Vec<_> = m.ranges.iter().map(|r| r.cumulative_percent).collect();
        assert_eq!(cumulative, [10.0, 80.0, 100.0]);
    }

    #[test]
    fn last_range_cumulative_is_exactly_100_with_thirds() {
        let profile = profile_with(vec![jit_row(
            "m",
            CodeKind::Method,
            &[("1->2", 1), ("2->3", 1), ("3->end", 1)],
            &[],
        )]);
        let report = Report::from_profile(&profile, &OPTIONS);
        let m = find(&report, "m");
        let rounded: Vec<_> = m
            .ranges
            .iter()
            .map(|r| (round2(r.percent_of_method), round2(r.cumulative_percent)))
            .collect();
        assert_eq!(rounded, [(33.33, 33.33), (33.33, 66.67), (33.33, 100.0)]);
        assert_eq!(m.ranges[2].cumulative_percent, 100.0);
    }

    #[test]
    fn ranges_of_part_of_a_method_or_too_many_samples_stay_within_100() {
        let mut partial = jit_row("m", CodeKind::Method, &[("1->2", 30), ("2->end", 10)], &[]);
        // 60 more samples fell in code of the same name without a pc map.
        partial.samples = 100;
        let mut broken = jit_row("b", CodeKind::Method, &[("1->2", 30), ("2->end", 10)], &[]);
        broken.samples = 20;
        let mut empty_range = jit_row("e", CodeKind::Method, &[("1->2", 5)], &[]);
        empty_range.ranges.push(CodeRange {
            label: "2->end".into(),
            samples: 0,
        });
        let report =
            Report::from_profile(&profile_with(vec![partial, broken, empty_range]), &OPTIONS);
        let m = find(&report, "m");
        assert_eq!(m.ranges[0].percent_of_method, 30.0);
        assert_eq!(m.ranges[1].cumulative_percent, 40.0);
        let b = find(&report, "b");
        assert_close(b.ranges[0].percent_of_method, 75.0);
        assert_eq!(b.ranges[1].cumulative_percent, 100.0);
        let e = find(&report, "e");
        assert_eq!(e.ranges.len(), 1, "{e:?}");
        assert_eq!(e.ranges[0].cumulative_percent, 100.0);
    }

    #[test]
    fn inlined_methods_percentages_most_first() {
        let report = Report::from_profile(&jit_profile(), &OPTIONS);
        let bench = find(&report, "Inline>>bench");
        let got: Vec<_> = bench
            .inlined
            .iter()
            .map(|i| (i.name.as_str(), i.samples, round2(i.percent_of_method)))
            .collect();
        // Of 1809 samples: 1234 = 68.21%, 400 = 22.11%, 175 = 9.67%.
        assert_eq!(
            got,
            [
                ("Inline>>heavy", 1234, 68.21),
                ("Inline>>bench", 400, 22.11),
                ("Inline>>light", 175, 9.67),
            ]
        );
        assert_eq!(bench.ranges.len(), 11);
        assert!(bench.show_details);

        // Whatever order the daemon sent them in, ties by name.
        let mut shuffled = jit_row("o", CodeKind::Method, &[], &[("b", 1), ("z", 2), ("a", 1)]);
        shuffled.inlined.push(InlinedMethod {
            name: "never".into(),
            samples: 0,
        });
        let report = Report::from_profile(&profile_with(vec![shuffled]), &OPTIONS);
        let o = find(&report, "o");
        let names: Vec<_> = o.inlined.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["z", "a", "b"]);
        assert_eq!(o.inlined[0].percent_of_method, 50.0);
        assert!(o.show_details, "inlined methods alone are details too");
    }

    #[test]
    fn only_generated_rows_of_enough_samples_show_details() {
        let report = Report::from_profile(&jit_profile(), &OPTIONS);
        let shown = |name: &str| find(&report, name).show_details;
        // 10000 samples: 1% is 100.
        assert!(shown("Integer>>benchFib"));
        assert!(shown("Integer>>benchmark"));
        assert!(shown("[] in Integer>>benchmark"), "130 samples, 1.3%");
        // 50 samples, 0.5%: its ranges stay in the model (and the JSON), not in the text.
        assert!(!shown("SmallInteger>>-"));
        assert_eq!(find(&report, "SmallInteger>>-").ranges.len(), 2);
        // Nothing to show.
        assert!(!shown("at:put:"));
        assert!(!shown("primitiveStringReplace"));

        let everything = ReportOptions {
            min_range_percent: 0.0,
            ..OPTIONS
        };
        let report = Report::from_profile(&jit_profile(), &everything);
        assert!(find(&report, "SmallInteger>>-").show_details);

        // A row exactly at the threshold shows them.
        let at = profile_with(vec![
            jit_row("at", CodeKind::Method, &[("1->end", 1)], &[]),
            row(V, "rest", "vm", 99),
        ]);
        assert!(find(&Report::from_profile(&at, &OPTIONS), "at").show_details);

        // Ranges the daemon would put on a row outside generated code are not shown.
        let mut odd = jit_row("odd", CodeKind::Method, &[("1->end", 10)], &[]);
        odd.section = V;
        let report = Report::from_profile(&profile_with(vec![odd]), &OPTIONS);
        let odd = find(&report, "odd");
        assert!(!odd.show_details);
        assert_eq!(odd.kind, None);
    }

    #[test]
    fn the_fold_carries_no_ranges_kind_or_code_map() {
        let profile = profile_with(vec![
            jit_row("big", CodeKind::Method, &[("1->end", 99_999)], &[]),
            jit_row("tiny", CodeKind::ClosedPic, &[("1->end", 1)], &[("x", 1)]),
        ]);
        let report = Report::from_profile(&profile, &OPTIONS);
        let generated = section(&report, Section::Generated);
        assert_eq!(names(generated), ["big", OTHERS_NAME]);
        let others = &generated.rows[1];
        assert!(others.ranges.is_empty() && others.inlined.is_empty());
        assert_eq!((others.kind, others.code_map.as_str()), (None, ""));
        assert!(!others.show_details);
    }

    #[test]
    fn kinds_of_generated_rows() {
        let report = Report::from_profile(&jit_profile(), &OPTIONS);
        let kind = |name: &str| find(&report, name).kind;
        assert_eq!(kind("at:put:"), Some(CodeKind::ClosedPic));
        assert_eq!(kind("area"), Some(CodeKind::OpenPic));
        assert_eq!(kind("ceSendMissTrampoline"), Some(CodeKind::Trampoline));
        assert_eq!(
            kind("ceEnterCogCodePopReceiverReg"),
            Some(CodeKind::Enilopmart)
        );
        assert_eq!(kind("[] in Integer>>benchmark"), Some(CodeKind::Block));
        assert_eq!(kind("primitiveStringReplace"), None);
        assert_eq!(kind("entry_SYSCALL_64"), None);

        // What a daemon did not say (or said in a newer API) is no kind: vmscope-proto's
        // model_code_kind, tested there.
        let mut unspecified = jit_plain("unspecified", CodeKind::Method, 5);
        unspecified.kind = None;
        let perf_map = jit_plain("perf", CodeKind::Unknown, 5);
        let report = Report::from_profile(&profile_with(vec![unspecified, perf_map]), &OPTIONS);
        assert_eq!(find(&report, "unspecified").kind, None);
        assert_eq!(find(&report, "perf").kind, Some(CodeKind::Unknown));

        let labels: Vec<_> = [
            CodeKind::Method,
            CodeKind::ClosedPic,
            CodeKind::OpenPic,
            CodeKind::Unknown,
        ]
        .map(|k| (k.as_str(), k.text_tag()))
        .into();
        assert_eq!(
            labels,
            [
                ("method", None),
                ("closed_pic", Some("closed PIC")),
                ("open_pic", Some("open PIC")),
                ("unknown", None),
            ]
        );
    }

    #[test]
    fn vm_modules_move_other_code_into_vanilla_before_any_sum() {
        let plain = Report::from_profile(&jit_profile(), &OPTIONS);
        assert_eq!(plain.vm_samples, 9788);
        assert_eq!(section(&plain, Section::Vanilla).samples, 256);
        assert_eq!(section(&plain, Section::Other).samples, 212);

        let options = ReportOptions {
            vm_modules: vec!["lib*Plugin.so".into()],
            ..OPTIONS
        };
        let report = Report::from_profile(&jit_profile(), &options);
        assert_eq!(report.vm_samples, 9858);
        assert_close(report.vm_percent_of_total, 98.58);
        let vanilla = section(&report, Section::Vanilla);
        assert_eq!(vanilla.samples, 326);
        assert_eq!(
            names(vanilla),
            [
                "primitiveStringReplace",
                "instantiateClassindexableSize",
                "primitiveSocketReceiveDataBufCount",
                "primitiveFileWrite",
                "scavengeReferentsOf",
            ]
        );
        assert_close(vanilla.percent_of_total, 3.26);
        assert_close(
            vanilla.percent_of_vm.unwrap_or(f64::NAN),
            326.0 / 9858.0 * 100.0,
        );
        assert_close(vanilla.rows[2].percent_of_section, 40.0 / 326.0 * 100.0);
        assert_eq!(vanilla.rows[2].section, Section::Vanilla);
        assert_eq!(vanilla.rows[2].module, "libSocketPlugin.so");
        let generated = section(&report, Section::Generated);
        assert_close(
            generated.percent_of_vm.unwrap_or(f64::NAN),
            9532.0 / 9858.0 * 100.0,
        );
        let other = section(&report, Section::Other);
        assert_eq!(other.samples, 142);
        assert_eq!(
            names(other),
            ["entry_SYSCALL_64", "__memmove_avx_unaligned_erms"]
        );
        assert_close(other.rows[0].percent_of_section, 82.0 / 142.0 * 100.0);
        let sum: u64 = report.sections.iter().map(|s| s.samples).sum();
        assert_eq!(sum, report.total_samples);

        // Only other code moves: a pattern matching everything leaves generated code alone.
        let all = ReportOptions {
            vm_modules: vec!["*".into()],
            ..OPTIONS
        };
        let report = Report::from_profile(&jit_profile(), &all);
        assert_eq!(section(&report, Section::Generated).samples, 9532);
        assert_eq!(section(&report, Section::Vanilla).samples, 468);
        assert!(section(&report, Section::Other).rows.is_empty());
        assert_eq!(report.vm_samples, 10_000);
    }

    #[test]
    fn known_runtime_libraries_are_the_vm_and_the_header_says_so() {
        // `java`: a launcher executable, HotSpot in libjvm.so.
        let profile = profile_with(vec![
            row(
                O,
                "G1ParScanThreadState::trim_queue_partially",
                "libjvm.so",
                700,
            ),
            row(O, "Interpreter", "libjvm.so", 200),
            row(O, "__memmove_avx_unaligned_erms", "libc.so.6", 90),
            row(V, "JavaMain", "java", 10),
        ]);
        let report = Report::from_profile(&profile, &OPTIONS);
        assert_eq!(report.vm_samples, 910);
        assert_eq!(section(&report, Section::Vanilla).samples, 910);
        assert_eq!(
            report.vm_modules,
            [VmModule {
                module: "libjvm.so".into(),
                runtime: Some("HotSpot"),
                samples: 900
            }]
        );
        assert_eq!(report.vm_module_hint, None);
        // Switched off, HotSpot is other code again, and the report hints at it.
        let off = ReportOptions {
            runtime_modules: false,
            ..OPTIONS
        };
        let report = Report::from_profile(&profile, &off);
        assert_eq!(report.vm_samples, 10);
        assert!(report.vm_modules.is_empty());
        assert_eq!(report.vm_module_hint, Some(("libjvm.so".into(), 90.0)));
        // A pattern names the module, and the header says so.
        let named = ReportOptions {
            runtime_modules: false,
            vm_modules: vec!["libjvm*".into()],
            ..OPTIONS
        };
        let report = Report::from_profile(&profile, &named);
        assert_eq!(report.vm_modules[0].runtime, None);
        assert_eq!(report.vm_samples, 910);
    }

    #[test]
    fn a_big_library_that_is_no_runtime_gets_a_hint_but_system_libraries_do_not() {
        let embedded = profile_with(vec![
            row(O, "tcl_eval_bytecode", "libmyinterp.so.2", 800),
            row(O, "memcpy", "libc.so.6", 150),
            row(V, "main", "app", 50),
        ]);
        let report = Report::from_profile(&embedded, &OPTIONS);
        assert_eq!(
            report.vm_module_hint,
            Some(("libmyinterp.so.2".into(), 80.0))
        );
        let libc = profile_with(vec![
            row(O, "memcpy", "libc.so.6", 800),
            row(O, "clear_page_erms", "[kernel.kallsyms]", 150),
            row(V, "main", "cp", 50),
        ]);
        assert_eq!(Report::from_profile(&libc, &OPTIONS).vm_module_hint, None);
        // Under the threshold: no hint.
        let small = profile_with(vec![
            row(O, "tcl_eval_bytecode", "libmyinterp.so.2", 10),
            row(V, "main", "app", 90),
        ]);
        assert_eq!(Report::from_profile(&small, &OPTIONS).vm_module_hint, None);
    }

    #[test]
    fn sort_keys_split_sections_by_process_and_keep_every_sample() {
        use vmscope_model::ProcessSamples;
        let with = |mut r: ProfileRow, processes: &[(u32, &str, u64)]| {
            r.processes = processes
                .iter()
                .map(|&(pid, command, samples)| ProcessSamples {
                    pid,
                    command: command.into(),
                    samples,
                })
                .collect();
            r
        };
        let profile = profile_with(vec![
            with(
                row(V, "poll_loop", "vmscoped", 60),
                &[(1, "vmscoped", 40), (2, "vmscoped", 20)],
            ),
            with(
                row(O, "memcpy", "libc.so.6", 40),
                &[(2, "vmscoped", 30), (3, "node", 10)],
            ),
        ]);
        let by_pid = ReportOptions {
            sort: vec![SortKey::Pid],
            ..OPTIONS
        };
        let report = Report::from_profile(&profile, &by_pid);
        assert_eq!(
            names(section(&report, Section::Vanilla)),
            ["vmscoped[1]", "vmscoped[2]"]
        );
        assert_eq!(
            names(section(&report, Section::Other)),
            ["vmscoped[2]", "node[3]"]
        );
        let sum: u64 = report.sections.iter().map(|s| s.samples).sum();
        assert_eq!(sum, report.total_samples);
        // By function (the default), rows keep their processes.
        let report = Report::from_profile(&profile, &OPTIONS);
        let poll = find(&report, "poll_loop");
        let processes: Vec<(u32, u64)> =
            poll.processes.iter().map(|p| (p.pid, p.samples)).collect();
        assert_eq!(processes, [(1, 40), (2, 20)]);
        assert_eq!(
            (poll.pid, poll.command.as_deref()),
            (None, None),
            "two processes"
        );
        // Split by process, each row is one process's, and says which.
        let report = Report::from_profile(&profile, &by_pid);
        let node = find(&report, "node[3]");
        assert_eq!((node.pid, node.command.as_deref()), (Some(3), Some("node")));
    }

    #[test]
    fn round2_rounds_half_away_from_zero() {
        assert_eq!(round2(33.333_333), 33.33);
        assert_eq!(round2(66.666_666), 66.67);
        assert_eq!(round2(0.125), 0.13);
        assert_eq!(round2(100.0), 100.0);
        assert!(round2(f64::NAN).is_nan());
    }

    #[test]
    fn stacks_through_v8s_interpreter_entry_get_a_hint() {
        use vmscope_model::{Frame, Stack};
        let mut profile = stacks_profile();
        let base = profile.frames.len() as u32;
        profile.frames.push(Frame {
            name: V8_INTERPRETER_ENTRY.into(),
            module: "/usr/bin/node".into(),
            ..Frame::default()
        });
        let share =
            |profile: &Profile| Report::from_profile(profile, &OPTIONS).v8_interpreted_frames;
        assert_eq!(share(&profile), None, "no stack holds it yet");
        let extra = profile.total_samples / 10;
        crate::fixtures::push_stack(
            &mut profile,
            &[0, base],
            Stack {
                pid: 1,
                tid: 1,
                values: vec![extra],
                end: Some(vmscope_model::StackEnd::Complete),
                ..Stack::default()
            },
        );
        profile.total_samples += extra;
        let expected = percent(extra, profile.total_samples);
        assert_eq!(share(&profile), Some(expected));
        assert!(expected >= INTERPRETED_FRAMES_HINT_PERCENT);
    }
}
