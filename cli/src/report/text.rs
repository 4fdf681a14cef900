//! The text report, laid out like VMProfiler's (Figure 7 of "A Detailed VM Profiler for the
//! Cog VM"), with columns aligned across all sections so that reports diff and scan well.
//!
//! ```text
//! % of generated vm code (% of total)                          (samples) (cumulative)
//!  49.67% (47.35%)  Integer>>benchFib                             (4735)     (49.67%)
//!                      57.95%  1->23                              (2744)     (57.95%)
//!                      ...
//!                      12.00%  38->end                             (568)    (100.00%)
//!  18.98% (18.09%)  Inline>>bench [optimised]                     (1809)     (90.43%)
//!                      13.82%  1->12                               (250)     (13.82%)
//!                       1.88%  Inline>>heavy 1->15                  (34)     (16.25%)
//!                      ...
//!                     inlined:
//!                      68.21%  Inline>>heavy (inlined)            (1234)
//!                      22.11%  Inline>>bench                       (400)
//!   4.41%  (4.20%)  at:put: [closed PIC]                           (420)     (94.84%)
//! ```
//!
//! Under a generated code row with enough samples
//! ([`ReportOptions::min_range_percent`](super::ReportOptions)), one line per code range in code
//! order: % of the method, range, (samples), (cumulative % of the method), aligned with the
//! row's columns; then for optimised code `inlined:` and one line per method inlined into it,
//! most samples first, with % of the method and (samples) (the method's own code is listed
//! under its own name, without "(inlined)"). Rows of generated code that are not methods carry
//! their kind in brackets (`[trampoline]`, `[closed PIC]`, `[open PIC]`...), and a method's
//! optimised version, a row apart from its baseline, `[optimised]`. Vanilla rows moved
//! there by `--vm-module` name their module, as other code's rows do.
//!
//! Names longer than [`ReportOptions::name_width`](super::ReportOptions) are shortened
//! structurally, then elided (see [`super::names`]), and never so that two different names, or
//! two of a row's range labels, read the same. A name width of 0 prints them whole in the wide
//! layout ([`wide`]), names last.
//!
//! A session that recorded call stacks ([`Report::call_graph`]) adds an `(inclusive)` column
//! after `(cumulative)`: each row's inclusive time (its samples and its callees', perf's
//! "children") as a share of the total. It is blank for `...others...`, whose rows' stacks
//! overlap so that no sum is right, and for rows grouped by `--sort` other than by function.
//! Reports of sessions without stacks keep their layout to the byte.
//!
//! Every percentage goes through [`round2`] before `{:.2}`, like the JSON, so both show the same
//! digits.

use std::io::{self, Write};

use vmscope_model::ProfileMode;
use vmscope_report::{
    OTHERS_NAME, Report, ReportOptions, ReportRow, Section, SectionReport, VmModule,
    rfc3339_seconds, round2,
};
mod off_cpu;
mod stats;
mod tree;
mod wide;

pub(crate) use stats::grouped;
pub use stats::render_stats_text;
use stats::{milliseconds, settings_line, write_statistics};
pub use tree::render_tree_text;

use super::names::shorten_all;

/// Column headings at the right of each section heading.
const SAMPLES_HEADING: &str = "(samples)";
/// Heading of the count column of the off-CPU tables, whose counts are times.
const TIME_HEADING: &str = "(time off)";
const CUMULATIVE_HEADING: &str = "(cumulative)";
/// Heading of the inclusive time column (% of total), shown when the session recorded stacks.
const INCLUSIVE_HEADING: &str = "(inclusive)";
/// Narrowest percentage columns ("100.00%" and "(99.99%)"), so that small reports keep the
/// familiar shape.
const MIN_PERCENT_WIDTH: usize = 7;
const MIN_TOTAL_WIDTH: usize = 8;
/// Blanks between the row's name column and a detail line's percentage, and between that
/// percentage and the range or method name.
const DETAIL_MARGIN: &str = "  ";
const DETAIL_GAP: &str = "  ";
/// Where a detail line's label starts, from the row's name column, when the percentages have
/// their usual width: range labels are elided to fit the name width minus this.
const DETAIL_INDENT: usize = DETAIL_MARGIN.len() + MIN_PERCENT_WIDTH + DETAIL_GAP.len();
/// Narrowest a detail label is elided to, however small the name width.
const MIN_DETAIL_NAME_WIDTH: usize = 8;
/// The line that introduces the methods inlined into an optimised method.
const INLINED_HEADING: &str = "inlined:";

/// Writes `report` as text: header, per-section summary, one table per section, then lost
/// samples per CPU and symbolisation issues when there are any.
pub fn render_text(
    report: &Report,
    options: &ReportOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    write_header(report, out)?;
    writeln!(out)?;
    if report.mode.on_cpu() {
        write_summary(report, out)?;
        write_processes(report, out)?;
        write_tables(&Tables::of_samples(report), options, out)?;
    }
    if let Some(off) = &report.off_cpu {
        off_cpu::write(report, off, options, out)?;
    }
    write_statistics(report, out)?;

    let lost: Vec<String> = report
        .lost_samples_per_cpu
        .iter()
        .enumerate()
        .filter(|&(_, &lost)| lost > 0)
        .map(|(cpu, lost)| format!("cpu{cpu} {lost}"))
        .collect();
    if !lost.is_empty() {
        writeln!(out)?;
        writeln!(out, "lost samples per cpu: {}", lost.join(", "))?;
    }

    if !report.issues.is_empty() {
        writeln!(out)?;
        writeln!(out, "symbolisation issues")?;
        for issue in &report.issues {
            writeln!(
                out,
                "  {}: {} ({})",
                issue.module,
                issue.reason,
                count(issue.samples, "sample")
            )?;
        }
    }
    Ok(())
}

/// The header's first lines: what was sampled, when, its state, and for how long. The
/// statistics alone (`--stats`) start with them too.
fn write_title(report: &Report, out: &mut impl Write) -> io::Result<()> {
    let started = report
        .started_at
        .and_then(rfc3339_seconds)
        .map_or_else(|| "start time unknown".to_owned(), |s| utc_date(&s));
    writeln!(
        out,
        "{}  {}  session {}",
        targets_label(report),
        started,
        report.session_id
    )?;
    writeln!(out, "{}", state_line(report))?;
    if let Some(threads) = &report.thread_filter {
        writeln!(
            out,
            "only {threads}: every number below is of their samples and blocks alone"
        )?;
    }
    if let Some(labels) = &report.label_filter {
        writeln!(
            out,
            "only samples labelled {labels}: every number below is of them alone"
        )?;
    }
    if report.mode == ProfileMode::OffCpu {
        writeln!(
            out,
            "{:.3} seconds; time off the CPU: {}",
            report.duration_seconds,
            off_cpu::min_block_label(report)
        )?;
        for line in report.vm_statistics.iter().filter_map(settings_line) {
            writeln!(out, "{line}")?;
        }
        return Ok(());
    }
    if report.mode == ProfileMode::Wall {
        writeln!(
            out,
            "wall-clock time: samples of the CPU clock, each standing for its period, and the \
             time off the CPU ({})",
            off_cpu::min_block_label(report)
        )?;
    }
    match (report.measured_frequency_hz, report.busy_cpus) {
        (Some(measured), Some(busy)) => writeln!(
            out,
            "{:.3} seconds; sampling frequency {measured:.0} hz per busy CPU ({} hz requested; \
             {:.2} busy CPUs)",
            report.duration_seconds,
            report.requested_frequency_hz,
            round2(busy)
        )?,
        // The kernel's CPU time, in 10 ms ticks, is too coarse to divide the samples by.
        _ => writeln!(
            out,
            "{:.3} seconds; sampling frequency {} hz requested (not measured: the targets \
             used {:.2} s of CPU time as the kernel counts it, too little to measure against)",
            report.duration_seconds, report.requested_frequency_hz, report.cpu_seconds
        )?,
    }
    for line in report.vm_statistics.iter().filter_map(settings_line) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn write_header(report: &Report, out: &mut impl Write) -> io::Result<()> {
    write_title(report, out)?;
    if report.mode == ProfileMode::OffCpu {
        // No sample was taken: the off-CPU part says what was recorded and left out.
        return writeln!(out, "call graph: {}", report.call_graph_label());
    }
    if report.system_wide {
        // Every process is a target: "in the VM" would only mean "in a main executable or
        // JIT code", which the sections say; the processes' shares follow the summary.
        let processes = match report.process_totals.len() {
            0 => report.processes as usize,
            n => n,
        };
        writeln!(
            out,
            "{} in {}",
            count(report.total_samples, "sample"),
            count(processes as u64, "process")
        )?;
    } else {
        writeln!(
            out,
            "{} samples in the VM ({} samples in the entire program) {} of total",
            report.vm_samples,
            report.total_samples,
            percent(report.vm_percent_of_total)
        )?;
    }
    writeln!(out, "{} samples lost", report.lost_samples)?;
    writeln!(out, "call graph: {}", report.call_graph_label())?;
    if !report.vm_modules.is_empty() {
        let modules: Vec<String> = report
            .vm_modules
            .iter()
            .map(|m| match m.runtime {
                Some(runtime) => format!("{} ({runtime})", m.module),
                None => format!("{} (--vm-module)", m.module),
            })
            .collect();
        writeln!(out, "vanilla vm code also in: {}", modules.join(", "))?;
    }
    if report.label_limit_samples > 0 {
        writeln!(
            out,
            "note: {} counted unlabelled: their label set was new once the session told apart \
             as many as it keeps",
            count(report.label_limit_samples, "sample")
        )?;
    }
    if report.jit_samples_before_code_map > 0 {
        writeln!(
            out,
            "note: {} in generated code were attributed before their code map caught up (a VM \
             that buffers its jitdump, as V8 does): they may show as anonymous code",
            count(report.jit_samples_before_code_map, "sample")
        )?;
    }
    if report.jit_samples_awaiting_code_map > 0 {
        writeln!(
            out,
            "note: the profile may still change: {} wait for their code map to catch up (at \
             the latest when the process exits); `vmscope report {}` then shows them named",
            count(report.jit_samples_awaiting_code_map, "sample"),
            report.session_id
        )?;
    }
    if report.jit_samples_caught_up > 0 {
        writeln!(
            out,
            "note: {} in generated code were named once their code map caught up with them, \
             in the map of their time",
            count(report.jit_samples_caught_up, "sample")
        )?;
    }
    if report.jit_samples_from_later_snapshot > 0 {
        writeln!(
            out,
            "note: {} ({}) in generated code were named from a perf map read after them, as \
             perf names samples at report time: not time-correct (rows say [later snapshot])",
            count(report.jit_samples_from_later_snapshot, "sample"),
            percent(
                100.0 * report.jit_samples_from_later_snapshot as f64
                    / report.total_samples.max(1) as f64
            )
        )?;
    }
    if report.call_graph && report.truncated_stacks > 0 {
        writeln!(
            out,
            "note: {} have stacks cut at the depth limit (kernel.perf_event_max_stack): their \
             outermost callers are missing",
            count(report.truncated_stacks, "sample")
        )?;
    }
    for (samples, reason) in report.stack_end_notes() {
        writeln!(
            out,
            "note: {} ({}) have stacks that {reason}",
            count(samples, "sample"),
            percent(100.0 * samples as f64 / report.total_samples.max(1) as f64),
        )?;
    }
    if let Some(note) = steal_note(report) {
        writeln!(out, "{note}")?;
    }
    if let Some(warning) = rate_warning(report) {
        writeln!(out, "{warning}")?;
    }
    if let Some(share) = report.v8_interpreted_frames {
        writeln!(
            out,
            "hint: {} of all samples run through V8's interpreter ({}), which hides the \
             JavaScript callers it runs; run node with --interpreted-frames-native-stack (and \
             --perf-basic-prof) to name them",
            percent(share),
            vmscope_report::model::V8_INTERPRETER_ENTRY
        )?;
    }
    if let Some((module, share)) = &report.vm_module_hint {
        writeln!(
            out,
            "hint: {} of all samples are in {module}; if it is part of the VM, count it as vm \
             code with --vm-module '{module}'",
            percent(*share)
        )?;
    }
    Ok(())
}

/// Steal below this share of the host's CPU time is not worth a line.
const STEAL_NOTE_PERCENT: f64 = 2.0;

/// A note when a hypervisor took a noticeable share of the host's CPUs: cpu-clock samples on
/// timer ticks, which a stolen virtual CPU misses or delivers late, so the rate strays from
/// the requested one and short sessions are noisier.
pub fn steal_note(report: &Report) -> Option<String> {
    (report.host_steal_percent >= STEAL_NOTE_PERCENT).then(|| {
        format!(
            "note: the hypervisor stole {:.1}% of this host's CPU time meanwhile: timer-driven \
             samples come less evenly, so rates and small shares are less exact",
            report.host_steal_percent
        )
    })
}

/// A warning when the daemon judged that the kernel took clearly fewer samples than asked,
/// beyond those lost (`Profile.throttled`): it throttles sampling when interrupts take too long
/// (lowering `kernel.perf_event_max_sample_rate`), which no counter reports.
pub fn rate_warning(report: &Report) -> Option<String> {
    report.throttled.then(|| {
        format!(
            "warning: {:.0} samples per busy CPU-second were taken, {} were asked: the kernel \
             throttled sampling (see kernel.perf_event_max_sample_rate and dmesg)",
            report.taken_frequency_hz, report.requested_frequency_hz
        )
    })
}

/// "2026-11-22T10:00:00Z" -> "2026-11-22 10:00:00 UTC": VMProfiler's date shape, with the zone
/// said since the daemon and the reader may not share one.
fn utc_date(rfc3339: &str) -> String {
    let without_zone = rfc3339.strip_suffix('Z').unwrap_or(rfc3339);
    format!("{} UTC", without_zone.replacen('T', " ", 1))
}

fn targets_label(report: &Report) -> String {
    if report.system_wide {
        return if report.processes > 0 {
            format!(
                "system-wide ({})",
                count(report.processes.into(), "process")
            )
        } else {
            "system-wide".to_owned()
        };
    }
    if report.targets.is_empty() {
        return if report.vm_executable.is_empty() {
            "unknown target".to_owned()
        } else {
            report.vm_executable.clone()
        };
    }
    let labels: Vec<String> = report
        .targets
        .iter()
        .map(|target| {
            let mut label = format!("pid {}", target.pid);
            if !target.command.is_empty() {
                label.push_str(&format!(" ({})", target.command));
            }
            if !target.executable.is_empty() {
                label.push(' ');
                label.push_str(&target.executable);
            }
            if !target.note.is_empty() {
                label.push_str(&format!(" ({})", target.note));
            }
            if target.exited {
                label.push_str(" (exited)");
            }
            label
        })
        .collect();
    labels.join(", ")
}

fn state_line(report: &Report) -> String {
    if let Some(incomplete) = &report.incomplete_reason {
        let reason = report.stop_reason.as_deref().unwrap_or("stopped");
        return format!("stopped: {reason}; INCOMPLETE: {incomplete}");
    }
    match (report.complete, report.stop_reason.as_deref()) {
        (false, None) => "session running; numbers are a snapshot".to_owned(),
        // Stopped but not drained yet: a later fetch will have a few more samples.
        (false, Some(reason)) => format!("stopped: {reason}; numbers are a snapshot, not final"),
        (true, Some(reason)) => format!("stopped: {reason}"),
        (true, None) => "stopped".to_owned(),
    }
}

/// Processes listed by [`write_processes`] before the rest fold into one line.
const PROCESS_ROWS: usize = 10;

/// Each process's share of all samples, most first, when there are several (a system-wide
/// profile splits a process's samples over its sections): "  45.00%  (6300)  pid 4242 (node)",
/// then `...others...` for the processes beyond [`PROCESS_ROWS`].
fn write_processes(report: &Report, out: &mut impl Write) -> io::Result<()> {
    let totals = &report.process_totals;
    if totals.len() < 2 {
        return Ok(());
    }
    let shown = if totals.len() > PROCESS_ROWS {
        PROCESS_ROWS - 1
    } else {
        totals.len()
    };
    let mut lines: Vec<(String, String, String)> = totals[..shown]
        .iter()
        .map(|p| {
            let who = if p.command.is_empty() {
                format!("pid {}", p.pid)
            } else {
                format!("pid {} ({})", p.pid, p.command)
            };
            (percent(p.percent_of_total), format!("({})", p.samples), who)
        })
        .collect();
    let rest = &totals[shown..];
    if !rest.is_empty() {
        let samples: u64 = rest.iter().map(|p| p.samples).sum();
        let share: f64 = rest.iter().map(|p| p.percent_of_total).sum();
        lines.push((
            percent(share),
            format!("({samples})"),
            format!("{OTHERS_NAME} ({})", count(rest.len() as u64, "process")),
        ));
    }
    let share_width = lines.iter().map(|l| l.0.len()).max().unwrap_or(0);
    let samples_width = lines.iter().map(|l| l.1.len()).max().unwrap_or(0);
    writeln!(out)?;
    writeln!(out, "samples by process")?;
    for (share, samples, who) in lines {
        writeln!(
            out,
            "{share:>share_width$}  {samples:>samples_width$}  {who}"
        )?;
    }
    Ok(())
}

fn write_summary(report: &Report, out: &mut impl Write) -> io::Result<()> {
    for section in &report.sections {
        match section.percent_of_vm {
            Some(of_vm) => writeln!(
                out,
                "{} samples in {} {} of entire vm ({} of total)",
                section.samples,
                section.title,
                percent(of_vm),
                percent(section.percent_of_total)
            )?,
            // The full title's "(libraries, kernel)" would clash with the "(% of total)" after it.
            None => writeln!(
                out,
                "{} samples in other code ({} of total)",
                section.samples,
                percent(section.percent_of_total)
            )?,
        }
    }
    Ok(())
}

/// One row's cells, formatted before any is written so that column widths fit them all.
struct Cells {
    of_section: String,
    of_total: String,
    label: String,
    samples: String,
    cumulative: String,
    /// Inclusive time as a share of the total, `(99.50%)`; empty when unknown (the fold,
    /// rows grouped by `--sort`) or when the session recorded no stacks.
    inclusive: String,
    /// Lines under the row: its ranges, then its inlined methods.
    details: Vec<Detail>,
}

/// A line under a row.
enum Detail {
    /// A code range: % of the method, label, (samples), (cumulative % of the method).
    Range {
        percent: String,
        label: String,
        samples: String,
        cumulative: String,
    },
    /// [`INLINED_HEADING`].
    InlinedHeading,
    /// A method inlined into an optimised method: % of the method, name, (samples).
    Inlined {
        percent: String,
        label: String,
        samples: String,
    },
}

impl Detail {
    fn percent(&self) -> Option<&String> {
        match self {
            Detail::Range { percent, .. } | Detail::Inlined { percent, .. } => Some(percent),
            Detail::InlinedHeading => None,
        }
    }

    fn label(&self) -> Option<&String> {
        match self {
            Detail::Range { label, .. } | Detail::Inlined { label, .. } => Some(label),
            Detail::InlinedHeading => None,
        }
    }

    fn samples(&self) -> Option<&String> {
        match self {
            Detail::Range { samples, .. } | Detail::Inlined { samples, .. } => Some(samples),
            Detail::InlinedHeading => None,
        }
    }

    fn cumulative(&self) -> Option<&String> {
        match self {
            Detail::Range { cumulative, .. } => Some(cumulative),
            Detail::InlinedHeading | Detail::Inlined { .. } => None,
        }
    }
}

/// Widths of the number columns, fitting every row and detail line of every table, so that
/// columns line up across sections (both layouts use them).
struct NumberWidths {
    of_section: usize,
    of_total: usize,
    samples: usize,
    cumulative: usize,
    /// The inclusive column; 0 when the report has none ([`Report::call_graph`] false).
    inclusive: usize,
    /// A detail line's % of the method.
    detail_percent: usize,
}

impl NumberWidths {
    /// The widths for `tables`, the % of total column at least `min_of_total` wide, with an
    /// inclusive column if `inclusive`, the count column headed `count_heading`.
    fn of(
        tables: &[(String, Vec<Cells>)],
        min_of_total: usize,
        inclusive: bool,
        count_heading: &str,
    ) -> NumberWidths {
        let all_cells = || tables.iter().flat_map(|(_, cells)| cells);
        let all_details = || all_cells().flat_map(|c| &c.details);
        let width =
            |min: usize, cell: fn(&Cells) -> &String, detail: fn(&Detail) -> Option<&String>| {
                let rows = all_cells().map(|c| cell(c).chars().count());
                let details = all_details().filter_map(detail).map(|d| d.chars().count());
                rows.chain(details).fold(min, usize::max)
            };
        NumberWidths {
            of_section: width(MIN_PERCENT_WIDTH, |c| &c.of_section, |_| None),
            of_total: width(min_of_total, |c| &c.of_total, |_| None),
            samples: width(count_heading.len(), |c| &c.samples, Detail::samples),
            cumulative: width(
                CUMULATIVE_HEADING.len(),
                |c| &c.cumulative,
                Detail::cumulative,
            ),
            inclusive: if inclusive {
                width(INCLUSIVE_HEADING.len(), |c| &c.inclusive, |_| None)
            } else {
                0
            },
            detail_percent: width(MIN_PERCENT_WIDTH, |_| &EMPTY, Detail::percent),
        }
    }
}

/// A cell with nothing in it, for columns a row does not have.
static EMPTY: String = String::new();

/// The tables to write: one report's sections (its samples', or its time off the CPU), and
/// how their counts read.
pub(super) struct Tables<'a> {
    /// The sections, one table each.
    pub(super) sections: &'a [SectionReport],
    /// Rows have inclusive time (the session recorded stacks).
    pub(super) call_graph: bool,
    /// Every process was sampled: modules say where symbols live.
    pub(super) system_wide: bool,
    /// Modules counted as the VM's.
    pub(super) vm_modules: &'a [VmModule],
    /// Counts are nanoseconds off the CPU, shown as times, not samples.
    pub(super) time: bool,
}

impl Tables<'_> {
    /// The samples' tables of `report`.
    fn of_samples(report: &Report) -> Tables<'_> {
        Tables {
            sections: &report.sections,
            call_graph: report.call_graph,
            system_wide: report.system_wide,
            vm_modules: &report.vm_modules,
            time: false,
        }
    }

    /// A count as its column shows it: `(3185)`, or a time, `(602.3 ms)`.
    fn count(&self, n: u64) -> String {
        if self.time {
            format!("({}ms)", milliseconds(n as f64 / 1e6))
        } else {
            format!("({n})")
        }
    }

    /// The heading of the count column.
    pub(super) fn count_heading(&self) -> &'static str {
        if self.time {
            TIME_HEADING
        } else {
            SAMPLES_HEADING
        }
    }

    /// What an empty table says.
    pub(super) fn empty(&self) -> &'static str {
        if self.time {
            "  (no time)"
        } else {
            "  (no samples)"
        }
    }
}

fn write_tables(
    tables: &Tables<'_>,
    options: &ReportOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    let mut labels = row_labels(tables, options).into_iter();
    let cells: Vec<(String, Vec<Cells>)> = tables
        .sections
        .iter()
        .map(|section| {
            let heading = format!("% of {} (% of total)", section.title);
            let cells = section
                .rows
                .iter()
                .map(|row| Cells {
                    of_section: percent(row.percent_of_section),
                    of_total: format!("({})", percent(row.percent_of_total)),
                    label: labels.next().unwrap_or_default(),
                    samples: tables.count(row.samples),
                    cumulative: format!("({})", percent(row.cumulative_percent)),
                    inclusive: row
                        .inclusive_percent_of_total
                        .filter(|_| tables.call_graph)
                        .map_or_else(String::new, |p| format!("({})", percent(p))),
                    details: details(row, options.name_width, tables),
                })
                .collect();
            (heading, cells)
        })
        .collect();
    let report_call_graph = tables.call_graph;
    let samples_heading = tables.count_heading();

    if options.name_width == 0 {
        return wide::write_tables(tables, &cells, out);
    }
    let tables_meta = tables;
    let tables = &cells;

    let NumberWidths {
        of_section: of_section_width,
        of_total: of_total_width,
        samples: samples_width,
        cumulative: cumulative_width,
        inclusive: inclusive_width,
        detail_percent: detail_percent_width,
    } = NumberWidths::of(tables, MIN_TOTAL_WIDTH, report_call_graph, samples_heading);
    // Only reports of sessions with stacks have the column: the others stay as they were.
    let inclusive = |cell: &str| {
        if report_call_graph {
            format!(" {cell:>inclusive_width$}")
        } else {
            String::new()
        }
    };
    let all_cells = || tables.iter().flat_map(|(_, cells)| cells);
    let all_details = || all_cells().flat_map(|c| &c.details);
    let detail_indent = DETAIL_MARGIN.len() + detail_percent_width + DETAIL_GAP.len();
    // Names are as wide as the longest one, or wider so that each section heading ends before
    // the "(samples)" heading and the numbers stay under it, and so that detail labels fit
    // after their indent.
    let prefix_width = of_section_width + 1 + of_total_width + 2;
    let heading_width = tables
        .iter()
        .map(|(heading, _)| heading.chars().count())
        .max()
        .unwrap_or(0);
    let detail_label_width = all_details()
        .filter_map(Detail::label)
        .map(|l| detail_indent + l.chars().count())
        .max()
        .unwrap_or(0);
    let label_width = all_cells().map(|c| c.label.chars().count()).fold(
        heading_width
            .saturating_sub(prefix_width)
            .max(detail_label_width),
        usize::max,
    );
    let left_width = prefix_width + label_width;
    let detail_width = label_width - detail_indent;
    let blank = "";

    for (heading, cells) in tables {
        writeln!(out)?;
        writeln!(
            out,
            "{heading:<left_width$}  {samples_heading:>samples_width$} \
             {CUMULATIVE_HEADING:>cumulative_width$}{}",
            inclusive(INCLUSIVE_HEADING)
        )?;
        if cells.is_empty() {
            writeln!(out, "{}", tables_meta.empty())?;
        }
        for c in cells {
            let line = format!(
                "{:>of_section_width$} {:>of_total_width$}  {:<label_width$}  \
                 {:>samples_width$} {:>cumulative_width$}{}",
                c.of_section,
                c.of_total,
                c.label,
                c.samples,
                c.cumulative,
                inclusive(&c.inclusive)
            );
            // A blank inclusive cell leaves no trailing blanks.
            writeln!(out, "{}", line.trim_end())?;
            for detail in &c.details {
                match detail {
                    Detail::Range {
                        percent,
                        label,
                        samples,
                        cumulative,
                    } => writeln!(
                        out,
                        "{blank:prefix_width$}{DETAIL_MARGIN}{percent:>detail_percent_width$}\
                         {DETAIL_GAP}{label:<detail_width$}  {samples:>samples_width$} \
                         {cumulative:>cumulative_width$}"
                    )?,
                    Detail::InlinedHeading => {
                        writeln!(out, "{blank:prefix_width$}{DETAIL_MARGIN}{INLINED_HEADING}")?
                    }
                    Detail::Inlined {
                        percent,
                        label,
                        samples,
                    } => writeln!(
                        out,
                        "{blank:prefix_width$}{DETAIL_MARGIN}{percent:>detail_percent_width$}\
                         {DETAIL_GAP}{label:<detail_width$}  {samples:>samples_width$}"
                    )?,
                }
            }
        }
    }
    Ok(())
}

/// The lines under `row`: none unless the model says it shows its details.
fn details(row: &ReportRow, name_width: usize, tables: &Tables<'_>) -> Vec<Detail> {
    if !row.show_details {
        return Vec::new();
    }
    // Detail labels start further right than names: shorten them to what is left of the name
    // width, so that a long source range does not widen the table more than a long name would.
    let width = if name_width == 0 {
        0
    } else {
        name_width
            .saturating_sub(DETAIL_INDENT)
            .max(MIN_DETAIL_NAME_WIDTH)
    };
    // One row's lines tell its ranges and methods apart.
    let labels: Vec<(&str, &str)> = row
        .ranges
        .iter()
        .map(|range| (range.label.as_str(), ""))
        .chain(row.inlined.iter().map(|method| {
            // The optimised method's own code is not inlined into itself.
            let suffix = if method.name == row.name {
                ""
            } else {
                " (inlined)"
            };
            (method.name.as_str(), suffix)
        }))
        .collect();
    let mut labels = shorten_all(&labels, width).into_iter();
    let mut lines: Vec<Detail> = row
        .ranges
        .iter()
        .map(|range| Detail::Range {
            percent: percent(range.percent_of_method),
            label: labels.next().unwrap_or_default(),
            samples: tables.count(range.samples),
            cumulative: format!("({})", percent(range.cumulative_percent)),
        })
        .collect();
    if !row.inlined.is_empty() {
        lines.push(Detail::InlinedHeading);
        lines.extend(row.inlined.iter().map(|method| Detail::Inlined {
            percent: percent(method.percent_of_method),
            label: labels.next().unwrap_or_default(),
            samples: tables.count(method.samples),
        }));
    }
    lines
}

/// Other code mixes many modules, and a system-wide "main executables" section many
/// executables: there the module says where a symbol lives. So it does for vanilla rows of
/// libraries counted as the VM's ([`Report::vm_modules`]). Unsymbolised names (`module+0x...`)
/// already carry it.
fn shows_module(tables: &Tables<'_>, section: &SectionReport, row: &ReportRow) -> bool {
    match section.section {
        Section::Other => true,
        Section::Vanilla => {
            tables.system_wide || tables.vm_modules.iter().any(|m| m.module == row.module)
        }
        Section::Generated => false,
    }
}

/// Every row's label as the table shows it, in report order: names shortened to the name
/// width, and never two different labels shown alike anywhere in the report, whatever their
/// sections. The fold's label is short and its count is the point: never shortened.
fn row_labels(tables: &Tables<'_>, options: &ReportOptions) -> Vec<String> {
    let rows = || {
        tables
            .sections
            .iter()
            .flat_map(|section| section.rows.iter().map(move |row| (section, row)))
    };
    let suffixes: Vec<String> = rows()
        .map(|(section, row)| row_suffix(row, shows_module(tables, section, row)))
        .collect();
    let labels: Vec<(&str, &str)> = rows()
        .zip(&suffixes)
        .filter(|((_, row), _)| row.folded_rows == 0)
        .map(|((_, row), suffix)| (row.name.as_str(), suffix.as_str()))
        .collect();
    let mut short = shorten_all(&labels, options.name_width).into_iter();
    rows()
        .map(|(_, row)| {
            if row.folded_rows > 0 {
                format!("{OTHERS_NAME} ({})", count(row.folded_rows as u64, "row"))
            } else {
                short.next().unwrap_or_default()
            }
        })
        .collect()
}

/// What follows a row's name: its kind, or its module where that says where it lives.
fn row_suffix(row: &ReportRow, show_module: bool) -> String {
    let base = row_kind_suffix(row, show_module);
    if row.later_snapshot_samples == row.samples && row.samples > 0 {
        format!("{base} [later snapshot]")
    } else if row.later_snapshot_samples > 0 {
        format!("{base} [later snapshot: {}]", row.later_snapshot_samples)
    } else {
        base
    }
}

/// The kind or module part of [`row_suffix`].
fn row_kind_suffix(row: &ReportRow, show_module: bool) -> String {
    if let Some(tag) = row.kind.and_then(|kind| kind.text_tag()) {
        format!(" [{tag}]")
    } else if row.optimised {
        " [optimised]".to_owned()
    } else if show_module && row.symbolized && !row.module.is_empty() {
        // "[kernel.kallsyms]" and "[vdso]" come bracketed already.
        let bracketed = row.module.starts_with('[') && row.module.ends_with(']');
        if bracketed {
            format!(" {}", row.module)
        } else {
            format!(" [{}]", row.module)
        }
    } else {
        String::new()
    }
}

fn percent(value: f64) -> String {
    format!("{:.2}%", round2(value))
}

/// "1 sample", "3 samples", "57 processes".
fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else if noun.ends_with('s') {
        format!("{n} {noun}es")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use vmscope_model::{Profile, Section};

    use vmscope_model::{CodeKind, IntervalKind};

    use super::super::names::elide_middle;
    use super::*;
    use vmscope_report::fixtures::{
        jit_profile, jit_row, names_profile, node_profile, profile_with, row, stacks_profile,
    };

    const OPTIONS: ReportOptions = ReportOptions::DEFAULT;

    fn render(profile: &Profile, options: &ReportOptions) -> String {
        let report = Report::from_profile(profile, options);
        let mut out = Vec::new();
        render_text(&report, options, &mut out).expect("writing to a Vec cannot fail");
        String::from_utf8(out).expect("the report is UTF-8")
    }

    /// Compares `actual` with the golden file, or rewrites it when UPDATE_GOLDEN=1.
    pub(super) fn check_golden(name: &str, actual: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/report/testdata")
            .join(name);
        if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
            std::fs::write(&path, actual).expect("write golden file");
            return;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run with UPDATE_GOLDEN=1 to create it",
                path.display()
            )
        });
        assert!(
            actual == expected,
            "{} differs (rerun with UPDATE_GOLDEN=1 if the change is intended)\n\
             --- expected\n{expected}\n--- actual\n{actual}",
            path.display()
        );
    }

    /// The node profile with the kernel's counts of two targets, one counted in part, on a
    /// machine without PMU.
    fn profile_with_events() -> Profile {
        use vmscope_model::{KernelCounts, KernelEvents, ProcessKernelCounts};
        let counts = |switches, voluntary, faults| KernelCounts {
            context_switches: switches,
            voluntary_context_switches: Some(voluntary),
            involuntary_context_switches: Some(switches - voluntary),
            cpu_migrations: 3,
            minor_faults: faults,
            major_faults: 1,
            ..KernelCounts::default()
        };
        let mut profile = node_profile();
        profile.kernel_events = Some(KernelEvents {
            total: Some(counts(2110, 2004, 26_002)),
            processes: vec![
                ProcessKernelCounts {
                    pid: 4242,
                    command: "node".into(),
                    counts: Some(counts(2100, 2000, 26_000)),
                    threads: 7,
                    note: String::new(),
                },
                ProcessKernelCounts {
                    pid: 4243,
                    command: "worker".into(),
                    counts: Some(counts(10, 4, 2)),
                    threads: 1024,
                    note: "partial: 6 threads beyond the first 1024 were not counted".into(),
                },
            ],
            unavailable: vec![
                "cycles, instructions, cache misses: this machine exposes no hardware PMU to \
                 perf (perf_event_open of instructions: No such file or directory)"
                    .into(),
            ],
        });
        profile
    }

    /// VMProfiler's Figure 7 after the code: a VM's settings in the header, then Memory, GCs,
    /// Compiled Code Compactions, its other intervals, and its counters before the kernel's.
    #[test]
    fn golden_vm_statistics() {
        use vmscope_model::{
            ConfigValue, Configuration, CounterDelta, Frame, GaugeDelta, IntervalTotals, Stack,
            StackTreeBuilder, VmStatistics,
        };
        let mut profile = profile_with_events();
        // Samples taken during the VM's intervals: in the collector and in memcpy during
        // scavenges, in memcpy during compactions (far more than their time: flagged).
        let collector = profile.frames.len() as u32;
        for (name, module) in [("Heap::scavenge", "cog"), ("memcpy", "libc.so.6")] {
            profile.frames.push(Frame {
                name: name.into(),
                module: module.into(),
                ..Frame::default()
            });
        }
        profile.vm_interval_kinds = vec![IntervalKind::Scavenge, IntervalKind::CodeCompaction];
        let mut tree = StackTreeBuilder::from_nodes(std::mem::take(&mut profile.stack_nodes));
        for (frame, samples, during) in [
            (collector, 45, 0),
            (collector + 1, 18, 0),
            (collector + 1, 300, 1),
        ] {
            profile.stacks.push(Stack {
                node: tree.intern(&[frame]),
                pid: 4242,
                values: vec![samples],
                during: vec![during],
                ..Stack::default()
            });
        }
        profile.stack_nodes = tree.finish();
        let setting = |name: &str, n, unit: &str| Configuration {
            name: name.into(),
            value: Some(ConfigValue::Number(n)),
            unit: unit.into(),
        };
        let intervals = |kind: IntervalKind, count, total_ns, longest_ns| IntervalTotals {
            kind,
            count,
            total_ns,
            longest_ns,
            sampled: 0,
        };
        let sampled = |sampled, totals: IntervalTotals| IntervalTotals { sampled, ..totals };
        let counter = |name: &str, delta| CounterDelta {
            name: name.into(),
            unit: String::new(),
            delta,
            last: delta + 1000,
        };
        let gauge = |name: &str, delta, low, high| GaugeDelta {
            name: name.into(),
            unit: "bytes".into(),
            delta,
            last: 1 << 22,
            low,
            high,
        };
        profile.vm_statistics = vec![VmStatistics {
            pid: 4242,
            vm: "Cog 5.0".into(),
            configuration: vec![
                setting("eden size", 3_801_936, "bytes"),
                setting("stack pages", 50, ""),
                Configuration {
                    name: "collector".into(),
                    value: Some(ConfigValue::Text("generation scavenger".into())),
                    unit: String::new(),
                },
            ],
            counters: vec![
                counter("Process switches", 38),
                counter("Stack overflows", 209),
            ],
            gauges: vec![
                gauge("old", 157_616, 4_036_688, 4_500_000),
                gauge("free", 0, 1 << 22, 1 << 22),
                gauge("young", -2_048, 1 << 22, (1 << 22) + 2_048),
            ],
            intervals: vec![
                sampled(
                    63,
                    intervals(IntervalKind::Scavenge, 182, 57_000_000, 1_200_000),
                ),
                sampled(
                    300,
                    intervals(IntervalKind::CodeCompaction, 3, 2_400_000, 900_000),
                ),
                intervals(
                    IntervalKind::Named("JIT compile".into()),
                    12,
                    30_500_000,
                    4_000_000,
                ),
            ],
            window_ns: 5_002_000_000,
            samples: 7_000,
            exact_counts: vec![vmscope_model::ExactCounts {
                kind: "activations".into(),
                counts: vec![
                    vmscope_model::NamedCount {
                        name: "Array>>at:put:".into(),
                        count: 1_200,
                    },
                    vmscope_model::NamedCount {
                        name: "SmallInteger>>benchFib".into(),
                        count: 242_785,
                    },
                ],
                start_source: "read".into(),
                end_source: "published".into(),
                note: String::new(),
            }],
            domain_events: Vec::new(),
        }];
        let mut stats = Vec::new();
        render_stats_text(&Report::from_profile(&profile, &OPTIONS), &mut stats).unwrap();
        check_golden("vm_stats.txt", &String::from_utf8(stats).unwrap());
    }

    /// VMProfiler's "Events" after the code, and `--stats` alone.
    #[test]
    fn golden_events_report() {
        let profile = profile_with_events();
        check_golden("events.txt", &render(&profile, &OPTIONS));
        let mut stats = Vec::new();
        render_stats_text(&Report::from_profile(&profile, &OPTIONS), &mut stats).unwrap();
        check_golden("stats.txt", &String::from_utf8(stats).unwrap());
        // A profile without counts keeps its layout to the byte.
        assert!(!render(&node_profile(), &OPTIONS).contains("**Events**"));
    }

    #[test]
    fn golden_node_report() {
        check_golden("node.txt", &render(&node_profile(), &OPTIONS));
    }

    /// The golden JIT report's options: the plugins belong to the VM.
    fn jit_options() -> ReportOptions {
        ReportOptions {
            vm_modules: vec!["lib*Plugin.so".to_owned()],
            ..OPTIONS
        }
    }

    #[test]
    fn golden_jit_report() {
        check_golden("jit.txt", &render(&jit_profile(), &jit_options()));
    }

    /// Names that elision alone would mix up, and source ranges labelled by their position.
    #[test]
    fn golden_names_report() {
        check_golden("names.txt", &render(&names_profile(), &OPTIONS));
    }

    /// The issue's case: four V8 functions that VMProfiler's elision alone showed alike.
    #[test]
    fn lookalike_names_are_told_apart() {
        let profile = names_profile();
        let stringifier: Vec<&str> = profile
            .rows
            .iter()
            .map(|r| r.name.as_str())
            .filter(|n| n.starts_with("v8::internal::JsonStringifier::"))
            .collect();
        assert_eq!(stringifier.len(), 4);
        let elided = elide_middle(stringifier[0], 60);
        assert!(
            stringifier.iter().all(|n| elide_middle(n, 60) == elided),
            "{elided}"
        );
        let text = render(&profile, &OPTIONS);
        let mut shown: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                l.split("  ")
                    .find(|part| part.starts_with("v8::internal::JsonStringifier::"))
            })
            .collect();
        shown.sort_unstable();
        shown.dedup();
        assert_eq!(shown.len(), 4, "{text}");
        assert!(shown.iter().all(|s| s.ends_with("(...)")), "{shown:?}");
    }

    #[test]
    fn golden_report_reflects_the_model() {
        // Guards the golden file itself: its key lines must match numbers computed by hand.
        let text = render(&node_profile(), &OPTIONS);
        for line in [
            "pid 4242 (node) /usr/bin/node  2026-11-22 10:00:00 UTC  session 7",
            "stopped: all targets exited",
            "5.002 seconds; sampling frequency 1398 hz per busy CPU (1400 hz requested; 2.00 busy CPUs)",
            "13000 samples in the VM (14000 samples in the entire program) 92.86% of total",
            "9000 samples in generated vm code 69.23% of entire vm (64.29% of total)",
            "1000 samples in other code (7.14% of total)",
            "lost samples per cpu: cpu0 12, cpu3 4",
            "  libstdc++.so.6: no symbol covers the address (98 samples)",
            "  [unknown]: no mapping covers the address (1 sample)",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in\n{text}"
            );
        }
        assert!(text.contains("...others... (2 rows)"), "{text}");
        assert!(text.contains("__memmove_avx_unaligned_erms [libc.so.6]"));
        assert!(
            text.contains("entry_SYSCALL_64 [kernel.kallsyms]  "),
            "{text}"
        );
        // Unsymbolised rows already name their module; generated rows never show it.
        assert!(text.contains("libstdc++.so.6+0x9a1f0  "));
        assert!(!text.contains("[libstdc++.so.6]"));
        assert!(!text.contains("Builtin:ArrayPrototypePush [[anon]]"));
        assert!(!text.lines().any(|l| l.ends_with(' ')), "trailing blanks");
    }

    #[test]
    fn throttled_sampling_is_called_out() {
        // The fixture: 14000 samples + 16 lost over 10.012 CPU-seconds, 1400 Hz asked.
        let text = render(&node_profile(), &OPTIONS);
        assert!(!text.contains("throttled"), "{text}");
        // The daemon's judgement, on 14,016 samples taken over twice the CPU time.
        let mut throttled = node_profile();
        throttled.cpu_seconds *= 2.0;
        throttled.taken_frequency_hz = 14_016.0 / throttled.cpu_seconds;
        throttled.throttled = true;
        let text = render(&throttled, &OPTIONS);
        assert!(
            text.contains("warning: 700 samples per busy CPU-second were taken, 1400 were asked"),
            "{text}"
        );
    }

    #[test]
    fn host_steal_is_noted_when_it_matters() {
        let text = render(&node_profile(), &OPTIONS);
        assert!(!text.contains("stole"), "{text}");
        let mut stolen = node_profile();
        stolen.host_steal_percent = 1.5;
        assert!(!render(&stolen, &OPTIONS).contains("stole"));
        stolen.host_steal_percent = 12.25;
        let text = render(&stolen, &OPTIONS);
        assert!(
            text.contains("note: the hypervisor stole 12.2% of this host's CPU time meanwhile"),
            "{text}"
        );
    }

    #[test]
    fn samples_past_the_label_sets_limit_are_noted() {
        let text = render(&node_profile(), &OPTIONS);
        assert!(!text.contains("unlabelled"), "{text}");
        let mut full = node_profile();
        full.session
            .as_mut()
            .expect("a session")
            .label_limit_samples = 12;
        let text = render(&full, &OPTIONS);
        assert!(
            text.contains("note: 12 samples counted unlabelled: their label set was new once"),
            "{text}"
        );
    }

    #[test]
    fn every_table_line_has_the_same_width() {
        for (text, expected_lines) in [
            (render(&node_profile(), &OPTIONS), 17),
            // Rows, headings and range lines alike.
            (render(&jit_profile(), &jit_options()), 56),
        ] {
            let widths: Vec<usize> = text
                .lines()
                .filter(|l| l.starts_with("% of ") || l.ends_with("%)"))
                .filter(|l| !l.contains("samples in"))
                .map(|l| l.chars().count())
                .collect();
            assert_eq!(widths.len(), expected_lines, "{text}");
            assert!(
                widths.windows(2).all(|w| w[0] == w[1]),
                "{widths:?}\n{text}"
            );
            // Inlined methods' lines end under the samples column.
            let samples_end = text
                .lines()
                .find(|l| l.starts_with("% of "))
                .and_then(|l| l.find("(samples)"))
                .map(|at| at + "(samples)".len());
            for line in text.lines().filter(|l| l.contains("(inlined)")) {
                assert_eq!(Some(line.len()), samples_end, "{line:?}\n{text}");
            }
        }
    }

    #[test]
    fn golden_jit_report_reflects_the_model() {
        let text = render(&jit_profile(), &jit_options());
        let lines: Vec<&str> = text.lines().collect();
        let at = |start: &str| {
            lines
                .iter()
                .position(|l| l.trim_start().starts_with(start))
                .unwrap_or_else(|| panic!("no line starting {start:?} in\n{text}"))
        };
        // Figure 7's benchFib and its eight ranges, in code order, right under it.
        let fib = at("49.67% (47.35%)  Integer>>benchFib ");
        assert!(lines[fib].ends_with("  (4735)     (49.67%)"), "{text}");
        let ranges: Vec<Vec<&str>> = lines[fib + 1..fib + 9]
            .iter()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            ranges,
            [
                ["57.95%", "1->23", "(2744)", "(57.95%)"],
                ["5.89%", "24->30", "(279)", "(63.84%)"],
                ["2.89%", "30->31", "(137)", "(66.74%)"],
                ["8.24%", "31->34", "(390)", "(74.97%)"],
                ["3.38%", "34->35", "(160)", "(78.35%)"],
                ["6.59%", "35->36", "(312)", "(84.94%)"],
                ["3.06%", "36->38", "(145)", "(88.00%)"],
                ["12.00%", "38->end", "(568)", "(100.00%)"],
            ]
        );
        // Range labels start 11 columns right of row names, percentages end 2 columns before.
        let name_at = lines[fib].find("Integer").unwrap_or(0);
        assert_eq!(lines[fib + 1].find("1->23"), Some(name_at + 11), "{text}");
        assert_eq!(lines[fib + 1].find("57.95%"), Some(name_at + 3), "{text}");
        assert!(lines[fib + 9].contains("Integer>>benchmark "), "{text}");

        // The optimised method: its ranges, named after the inlined method where its code
        // is, then the methods inlined into it, most first.
        let bench = at("18.98% (18.09%)  Inline>>bench ");
        let detail: Vec<Vec<&str>> = lines[bench + 1..bench + 16]
            .iter()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            detail,
            [
                vec!["13.82%", "1->12", "(250)", "(13.82%)"],
                vec!["0.55%", "12->12", "(10)", "(14.37%)"],
                vec!["1.88%", "Inline>>heavy", "1->15", "(34)", "(16.25%)"],
                vec!["5.53%", "Inline>>heavy", "15->33", "(100)", "(21.78%)"],
                vec!["55.28%", "Inline>>heavy", "33->70", "(1000)", "(77.06%)"],
                vec!["4.98%", "Inline>>heavy", "70->83", "(90)", "(82.03%)"],
                vec!["0.55%", "Inline>>heavy", "83->end", "(10)", "(82.59%)"],
                vec!["3.32%", "12->30", "(60)", "(85.90%)"],
                vec!["1.38%", "Inline>>light", "1->33", "(25)", "(87.29%)"],
                vec!["8.29%", "Inline>>light", "33->70", "(150)", "(95.58%)"],
                vec!["4.42%", "30->end", "(80)", "(100.00%)"],
                vec!["inlined:"],
                vec!["68.21%", "Inline>>heavy", "(inlined)", "(1234)"],
                vec!["22.11%", "Inline>>bench", "(400)"],
                vec!["9.67%", "Inline>>light", "(inlined)", "(175)"],
            ]
        );
        assert_eq!(lines[bench + 12].find("inlined:"), Some(name_at + 2));

        // Kinds, and rows without details followed directly by the next row.
        for (row, next) in [
            (
                "4.41%  (4.20%)  at:put: [closed PIC] ",
                "1.57%  (1.50%)  area [open PIC] ",
            ),
            (
                "1.26%  (1.20%)  ceSendMissTrampoline [trampoline] ",
                // 0.5% of the total: under min_range_percent, its ranges stay out of the text.
                "0.52%  (0.50%)  SmallInteger>>- ",
            ),
            (
                "0.52%  (0.50%)  SmallInteger>>- ",
                "0.42%  (0.40%)  ceEnterCogCodePopReceiverReg [enilopmart] ",
            ),
            ("0.01%  (0.01%)  cePrimReturnEnterCogCode [stub] ", ""),
        ] {
            let after = lines[at(row) + 1].trim_start();
            assert!(
                after.starts_with(next) && (after.is_empty() == next.is_empty()),
                "after {row:?}\n{text}"
            );
        }
        let block = at("1.36%  (1.30%)  [] in Integer>>benchmark [block] ");
        assert!(
            lines[block + 1].trim_start().starts_with("69.23%  1->4 "),
            "{text}"
        );
        assert!(!text.contains("1->3 "), "{text}");
        assert!(
            !text.contains("[method]") && !text.contains("[unknown]"),
            "{text}"
        );

        // --vm-module moved the plugins, which name their module in vanilla vm code.
        for line in [
            "9858 samples in the VM (10000 samples in the entire program) 98.58% of total",
            "326 samples in vanilla vm code 3.31% of entire vm (3.26% of total)",
            "142 samples in other code (1.42% of total)",
        ] {
            assert!(lines.contains(&line), "no line {line:?} in\n{text}");
        }
        at("12.27%  (0.40%)  primitiveSocketReceiveDataBufCount [libSocketPlugin.so] ");
        at("9.20%  (0.30%)  primitiveFileWrite [libFilePlugin.so] ");
        at("41.72%  (1.36%)  primitiveStringReplace  ");
        assert!(!text.lines().any(|l| l.ends_with(' ')), "trailing blanks");
    }

    #[test]
    fn min_range_percent_and_the_fold_decide_which_rows_show_ranges() {
        let none = ReportOptions {
            min_range_percent: 100.0,
            ..jit_options()
        };
        let text = render(&jit_profile(), &none);
        assert!(
            !text.contains("1->23") && !text.contains("inlined"),
            "{text}"
        );
        let all = ReportOptions {
            min_range_percent: 0.0,
            ..jit_options()
        };
        let text = render(&jit_profile(), &all);
        assert!(text.contains("  1->3  "), "{text}");
        // A folded row's ranges are in no line.
        let folded = profile_with(vec![
            jit_row("big", CodeKind::Method, &[("1->end", 99_999)], &[]),
            jit_row("tiny", CodeKind::Method, &[("7->9", 1)], &[]),
        ]);
        let text = render(&folded, &all);
        assert!(
            text.contains("...others... (1 row)") && !text.contains("7->9"),
            "{text}"
        );
    }

    #[test]
    fn inlined_methods_without_ranges_follow_the_row() {
        let profile = profile_with(vec![jit_row(
            "Opt>>run",
            CodeKind::Method,
            &[],
            &[("Opt>>step", 3), ("Opt>>run", 1)],
        )]);
        let text = render(&profile, &OPTIONS);
        let lines: Vec<&str> = text.lines().collect();
        let row = lines
            .iter()
            .position(|l| l.contains("Opt>>run [optimised]"))
            .unwrap_or_else(|| panic!("{text}"));
        let detail: Vec<Vec<&str>> = lines[row + 1..]
            .iter()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            detail,
            [
                vec!["inlined:"],
                vec!["75.00%", "Opt>>step", "(inlined)", "(3)"],
                vec!["25.00%", "Opt>>run", "(1)"],
                vec![],
                vec![
                    "%",
                    "of",
                    "vanilla",
                    "vm",
                    "code",
                    "(%",
                    "of",
                    "total)",
                    "(samples)",
                    "(cumulative)"
                ],
                vec!["(no", "samples)"],
                vec![],
                vec![
                    "%",
                    "of",
                    "other",
                    "code",
                    "(libraries,",
                    "kernel)",
                    "(%",
                    "of",
                    "total)",
                    "(samples)",
                    "(cumulative)"
                ],
                vec!["(no", "samples)"],
            ]
        );
    }

    #[test]
    fn long_range_labels_are_elided_like_names() {
        let source = format!("/srv/app/{}/server.js:120:15", "deep/".repeat(12));
        let mut jitdump = jit_row(
            "LazyCompile:*handle /srv/app/server.js:118",
            CodeKind::Unknown,
            &[("start", 1), ("/srv/app/server.js:118:1", 1), (&source, 8)],
            &[],
        );
        jitdump.code_map = "jitdump".into();
        let profile = profile_with(vec![jitdump]);
        let text = render(&profile, &OPTIONS);
        // 60 columns of name, less the 11 that detail labels start further right.
        let elided = elide_middle(&source, 49);
        assert_eq!(elided.chars().count(), 49);
        assert!(text.contains(&format!("  {elided}  ")), "{text}");
        assert!(!text.contains(&source), "{text}");
        assert!(text.contains("  /srv/app/server.js:118:1  "), "{text}");
        assert!(text.contains("  start  "), "{text}");
        // Code known by name only gets no tag.
        assert!(
            text.contains("LazyCompile:*handle /srv/app/server.js:118  "),
            "{text}"
        );
    }

    /// `--wide`: names and labels whole, last on their lines, after numbers aligned in columns
    /// that a long name does not push right.
    #[test]
    fn wide_names_come_last_and_whole() {
        let long = format!("v8::internal::{}::Run(int)", "Deep".repeat(100));
        let mut profile = jit_profile();
        profile.rows.push(row(Section::Vanilla, &long, "pharo", 5));
        profile.total_samples += 5;
        let wide = ReportOptions {
            name_width: 0,
            ..jit_options()
        };
        let text = render(&profile, &wide);
        let lines: Vec<&str> = text.lines().collect();
        let table: Vec<&str> = lines
            .iter()
            .copied()
            .skip_while(|l| !l.contains("(samples)"))
            .filter(|l| !l.is_empty())
            .collect();
        // Every row's name, and every heading's title, starts in one column.
        let names_at = table[0].find("generated vm code").expect("a title");
        for line in table.iter().filter(|l| !l.contains("(no samples)")) {
            assert!(line[..names_at].ends_with("  "), "{line:?}\n{text}");
            assert!(!line[names_at..].trim().is_empty(), "{line:?}\n{text}");
        }
        assert!(
            lines.iter().any(|l| l.ends_with(&format!("  {long}"))),
            "{text}"
        );
        let row = lines.iter().find(|l| l.ends_with(&long)).unwrap();
        assert!(row.len() < names_at + long.len() + 3, "{row:?}");
        // Details: numbers in the row's columns, then % of the method and the label.
        let fib = lines
            .iter()
            .position(|l| l.ends_with("  Integer>>benchFib"))
            .unwrap_or_else(|| panic!("{text}"));
        assert_eq!(
            lines[fib + 1].split_whitespace().collect::<Vec<_>>(),
            ["(2744)", "(57.95%)", "57.95%", "1->23"]
        );
        assert_eq!(lines[fib + 1].find("1->23"), Some(names_at + 11), "{text}");
        assert!(!text.lines().any(|l| l.ends_with(' ')), "trailing blanks");
    }

    #[test]
    fn golden_wide_reports() {
        let wide = |options: ReportOptions| ReportOptions {
            name_width: 0,
            ..options
        };
        check_golden(
            "jit-wide.txt",
            &render(&jit_profile(), &wide(jit_options())),
        );
        check_golden("names-wide.txt", &render(&names_profile(), &wide(OPTIONS)));
        check_golden(
            "stacks-wide.txt",
            &render(&stacks_profile(), &wide(stacks_options())),
        );
    }

    /// The stacks golden report's options: rows under 0.5% fold, as a tree's would.
    fn stacks_options() -> ReportOptions {
        ReportOptions {
            min_percent: 0.5,
            ..OPTIONS
        }
    }

    /// A session with stacks: an inclusive column beside self time, blank for the folds.
    #[test]
    fn golden_stacks_report() {
        check_golden("stacks.txt", &render(&stacks_profile(), &stacks_options()));
    }

    #[test]
    fn golden_stacks_report_reflects_the_model() {
        let text = render(&stacks_profile(), &stacks_options());
        let line = |start: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(start))
                .unwrap_or_else(|| panic!("no line starting {start:?} in\n{text}"))
        };
        assert!(line("% of generated vm code").ends_with("(samples) (cumulative) (inclusive)"));
        // benchmark: 150 samples of its own of 1714 in generated code, 1904 of 2010 inclusive.
        let benchmark = line("8.75%  (7.46%)  Integer>>benchmark");
        assert!(
            benchmark.ends_with("(150)     (96.85%)    (94.73%)"),
            "{benchmark}"
        );
        // The fold's inclusive time is not the sum of its rows': blank.
        let fold = line("0.23%  (0.20%)  ...others... (1 row)");
        assert!(fold.ends_with("(4)    (100.00%)"), "{fold:?}");
        assert!(text.contains(
            "note: 10 samples have stacks cut at the depth limit (kernel.perf_event_max_stack)"
        ));
        // Without stacks, the same rows show no inclusive column at all.
        let mut profile = stacks_profile();
        if let Some(session) = profile.session.as_mut() {
            session.call_graph = Some(vmscope_model::CallGraph::None);
        }
        let text = render(&profile, &stacks_options());
        assert!(
            !text.contains("(inclusive)") && !text.contains("depth limit"),
            "{text}"
        );
    }

    #[test]
    fn empty_profile_renders_every_section_empty() {
        let text = render(&Profile::default(), &OPTIONS);
        let expected = "\
unknown target  start time unknown  session 0
session running; numbers are a snapshot
0.000 seconds; sampling frequency 0 hz requested (not measured: the targets used 0.00 s of CPU time as the kernel counts it, too little to measure against)
0 samples in the VM (0 samples in the entire program) 0.00% of total
0 samples lost
call graph: unknown

0 samples in vanilla vm code 0.00% of entire vm (0.00% of total)
0 samples in other code (0.00% of total)

% of vanilla vm code (% of total)                 (samples) (cumulative)
  (no samples)

% of other code (libraries, kernel) (% of total)  (samples) (cumulative)
  (no samples)
";
        assert_eq!(text, expected);
    }

    #[test]
    fn system_wide_several_targets_and_exited() {
        let mut profile = profile_with(vec![
            row(Section::Vanilla, "main", "python3.12", 6),
            row(Section::Vanilla, "main", "ruby", 4),
        ]);
        profile.complete = false;
        let session = profile.session.as_mut().expect("fixture has a session");
        session.stop_reason.clear();
        session.system_wide = true;
        let text = render(&profile, &OPTIONS);
        assert!(text.starts_with("system-wide  2026-11-22 10:00:00 UTC  session 7\n"));
        assert!(text.contains("\nsession running; numbers are a snapshot\n"));
        assert!(text.contains("10 samples in main executables 100.00% of entire vm"));
        assert!(text.contains("main [python3.12]"), "{text}");
        assert!(
            text.contains("% of main executables (% of total)"),
            "{text}"
        );

        let session = profile.session.as_mut().expect("fixture has a session");
        session.system_wide = false;
        session.targets[0].exited = true;
        session.targets.push(vmscope_model::TargetProcess {
            pid: 99,
            command: "worker".into(),
            executable: "/usr/bin/node".into(),
            exited: false,
            note: String::new(),
        });
        let text = render(&profile, &OPTIONS);
        assert!(
            text.starts_with(
                "pid 4242 (node) /usr/bin/node (exited), pid 99 (worker) /usr/bin/node  "
            ),
            "{text}"
        );
        assert!(!text.contains("main [python3.12]"), "{text}");
    }

    #[test]
    fn system_wide_reports_give_each_process_its_total() {
        let mut profile = profile_with(vec![row(Section::Vanilla, "main", "python3.12", 100)]);
        profile.total_samples = 100;
        // 12 processes: pid 1000 with 34 samples, then 11 with 6 each.
        profile.stacks = (0..12)
            .map(|i| vmscope_model::Stack {
                pid: 1000 + i,
                values: vec![if i == 0 { 34 } else { 6 }],
                ..Default::default()
            })
            .collect();
        let session = profile.session.as_mut().expect("fixture has a session");
        session.system_wide = true;
        session.targets.clear();
        profile.processes = 12;
        profile.rows[0].processes = vec![vmscope_model::ProcessSamples {
            pid: 1000,
            command: "python3.12".into(),
            samples: 34,
        }];
        let text = render(&profile, &OPTIONS);
        assert!(text.starts_with("system-wide (12 processes)  "), "{text}");
        assert!(text.contains("\n100 samples in 12 processes\n"), "{text}");
        assert!(!text.contains("in the VM"), "{text}");
        let listed: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "samples by process")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect();
        assert_eq!(listed.len(), 10, "{text}");
        assert_eq!(listed[0], "34.00%  (34)  pid 1000 (python3.12)");
        assert_eq!(listed[1], " 6.00%   (6)  pid 1001");
        assert_eq!(listed[9], "18.00%  (18)  ...others... (3 processes)");

        // One process: no list, and the header is the VM's.
        profile.stacks.truncate(1);
        profile.stacks[0].values = vec![100];
        let session = profile.session.as_mut().expect("fixture has a session");
        session.system_wide = false;
        let text = render(&profile, &OPTIONS);
        assert!(!text.contains("samples by process"), "{text}");
        assert!(text.contains("samples in the VM"), "{text}");
    }

    #[test]
    fn a_short_run_says_its_rate_was_not_measured() {
        let mut profile = profile_with(vec![row(Section::Vanilla, "main", "sleep", 2)]);
        profile.total_samples = 2;
        profile.cpu_seconds = 0.0;
        profile.measured_frequency_hz = 0.0;
        let text = render(&profile, &OPTIONS);
        assert!(!text.contains("0 hz per busy CPU"), "{text}");
        assert!(!text.contains("0.00 busy CPUs"), "{text}");
        assert!(
            text.contains("sampling frequency 1400 hz requested (not measured: the targets used 0.00 s of CPU time"),
            "{text}"
        );
    }

    #[test]
    fn unchanged_gauges_and_rates_read_like_their_counts() {
        let mut profile = profile_with(vec![row(Section::Vanilla, "main", "jitvm", 10)]);
        let gauge = |name: &str, level: i64| vmscope_model::GaugeDelta {
            name: name.into(),
            unit: "bytes".into(),
            delta: 0,
            last: level,
            low: level,
            high: level,
        };
        profile.vm_statistics = vec![vmscope_model::VmStatistics {
            pid: 4242,
            vm: "jitvm 0.1".into(),
            window_ns: 4_000_000_000,
            gauges: vec![
                gauge("old", 2448),
                gauge("free", 67_106_416),
                gauge("young", 0),
            ],
            counters: vec![vmscope_model::CounterDelta {
                name: "Sends".into(),
                delta: 274_780_028,
                last: 274_780_028,
                ..Default::default()
            }],
            ..Default::default()
        }];
        let text = render(&profile, &OPTIONS);
        assert!(!text.contains("**Memory**"), "nothing moved:\n{text}");
        assert!(!text.contains("+0 bytes"), "{text}");
        assert!(
            text.contains("Sends 274,780,028 (68,695,007 per second)"),
            "{text}"
        );
    }

    #[test]
    fn name_width_applies_to_the_rendered_report() {
        let long = format!("LazyCompile:*{}", "ω".repeat(80));
        let profile = profile_with(vec![row(Section::Generated, &long, "[anon]", 10)]);
        let narrow = ReportOptions {
            name_width: 30,
            ..OPTIONS
        };
        let text = render(&profile, &narrow);
        assert!(text.contains(&*elide_middle(&long, 30)), "{text}");
        assert!(!text.contains(&long));
        let whole = ReportOptions {
            name_width: 0,
            ..OPTIONS
        };
        assert!(render(&profile, &whole).contains(&long));
    }
}
