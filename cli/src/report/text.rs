//! The text report, laid out like VMProfiler's (Figure 7 of "A Detailed VM Profiler for the
//! Cog VM"), with columns aligned across all sections so that reports diff and scan well.
//!
//! ```text
//! % of vanilla vm code (% of total)          (samples) (cumulative)
//!  60.12% (60.02%)  hot_a                       (2527)     (60.12%)
//! ```
//!
//! Every percentage goes through [`round2`] before `{:.2}`, like the JSON, so both show the same
//! digits.

use std::borrow::Cow;
use std::io::{self, Write};

use super::model::{
    OTHERS_NAME, Report, ReportOptions, ReportRow, SectionKind, SectionReport, rfc3339_seconds,
    round2,
};

/// Column headings at the right of each section heading.
const SAMPLES_HEADING: &str = "(samples)";
const CUMULATIVE_HEADING: &str = "(cumulative)";
/// Narrowest percentage columns ("100.00%" and "(99.99%)"), so that small reports keep the
/// familiar shape.
const MIN_PERCENT_WIDTH: usize = 7;
const MIN_TOTAL_WIDTH: usize = 8;

/// Writes `report` as text: header, per-section summary, one table per section, then lost
/// samples per CPU and symbolisation issues when there are any.
pub fn render_text(
    report: &Report,
    options: &ReportOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    write_header(report, out)?;
    writeln!(out)?;
    write_summary(report, out)?;
    write_tables(report, options, out)?;

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

/// Shortens `name` to at most `width` characters by replacing its middle with "...", keeping
/// head and tail as VMProfiler does (`Sequenceab...m:to:put:`): the head says which class or
/// namespace, the tail which method. Counts chars, never splits one; `width` 0 disables.
pub fn elide_middle(name: &str, width: usize) -> Cow<'_, str> {
    let len = name.chars().count();
    if width == 0 || len <= width {
        return Cow::Borrowed(name);
    }
    // Too narrow for head + "..." to say anything: keep the head.
    if width < 4 {
        return Cow::Owned(name.chars().take(width).collect());
    }
    // Squeak's String>>contractTo:, which VMProfiler uses: the head gets the smaller half.
    let head = (width - 2) / 2;
    let tail = width - head - 3;
    let mut elided: String = name.chars().take(head).collect();
    elided.push_str("...");
    elided.extend(name.chars().skip(len - tail));
    Cow::Owned(elided)
}

fn write_header(report: &Report, out: &mut impl Write) -> io::Result<()> {
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
    writeln!(
        out,
        "{:.3} seconds; sampling frequency {:.0} hz per busy CPU ({} hz requested; {:.2} busy CPUs)",
        report.duration_seconds,
        report.measured_frequency_hz,
        report.requested_frequency_hz,
        round2(report.busy_cpus)
    )?;
    writeln!(
        out,
        "{} samples in the VM ({} samples in the entire program) {} of total",
        report.vm_samples,
        report.total_samples,
        percent(report.vm_percent_of_total)
    )?;
    writeln!(out, "{} samples lost", report.lost_samples)?;
    if let Some(warning) = rate_warning(report) {
        writeln!(out, "{warning}")?;
    }
    Ok(())
}

/// A warning when the kernel took clearly fewer samples than asked, beyond those lost: it
/// throttles sampling when interrupts take too long (lowering
/// `kernel.perf_event_max_sample_rate`), which no counter reports.
pub fn rate_warning(report: &Report) -> Option<String> {
    if report.cpu_seconds < 0.5 || report.requested_frequency_hz == 0 {
        return None;
    }
    let taken = (report.total_samples + report.lost_samples) as f64 / report.cpu_seconds;
    let requested = f64::from(report.requested_frequency_hz);
    (taken < 0.9 * requested).then(|| {
        format!(
            "warning: {taken:.0} samples per busy CPU-second were taken, {requested:.0} were asked: \
             the kernel throttled sampling (see kernel.perf_event_max_sample_rate and dmesg)"
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
        return "system-wide".to_owned();
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
    match (report.complete, report.stop_reason.as_deref()) {
        (false, None) => "session running; numbers are a snapshot".to_owned(),
        // Stopped but not drained yet: a later fetch will have a few more samples.
        (false, Some(reason)) => format!("stopped: {reason}; numbers are a snapshot, not final"),
        (true, Some(reason)) => format!("stopped: {reason}"),
        (true, None) => "stopped".to_owned(),
    }
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
}

fn write_tables(report: &Report, options: &ReportOptions, out: &mut impl Write) -> io::Result<()> {
    let tables: Vec<(String, Vec<Cells>)> = report
        .sections
        .iter()
        .map(|section| {
            let heading = format!("% of {} (% of total)", section.title);
            let show_module = shows_module(report, section);
            let cells = section
                .rows
                .iter()
                .map(|row| Cells {
                    of_section: percent(row.percent_of_section),
                    of_total: format!("({})", percent(row.percent_of_total)),
                    label: row_label(row, show_module, options.name_width),
                    samples: format!("({})", row.samples),
                    cumulative: format!("({})", percent(row.cumulative_percent)),
                })
                .collect();
            (heading, cells)
        })
        .collect();

    let all_cells = || tables.iter().flat_map(|(_, cells)| cells);
    let width = |min: usize, cell: fn(&Cells) -> &String| {
        all_cells()
            .map(|c| cell(c).chars().count())
            .fold(min, usize::max)
    };
    let of_section_width = width(MIN_PERCENT_WIDTH, |c| &c.of_section);
    let of_total_width = width(MIN_TOTAL_WIDTH, |c| &c.of_total);
    let samples_width = width(SAMPLES_HEADING.len(), |c| &c.samples);
    let cumulative_width = width(CUMULATIVE_HEADING.len(), |c| &c.cumulative);
    // Names are as wide as the longest one, or wider so that each section heading ends before
    // the "(samples)" heading and the numbers stay under it.
    let prefix_width = of_section_width + 1 + of_total_width + 2;
    let heading_width = tables
        .iter()
        .map(|(heading, _)| heading.chars().count())
        .max()
        .unwrap_or(0);
    let label_width = width(heading_width.saturating_sub(prefix_width), |c| &c.label);
    let left_width = prefix_width + label_width;

    for (heading, cells) in &tables {
        writeln!(out)?;
        writeln!(
            out,
            "{heading:<left_width$}  {SAMPLES_HEADING:>samples_width$} \
             {CUMULATIVE_HEADING:>cumulative_width$}"
        )?;
        if cells.is_empty() {
            writeln!(out, "  (no samples)")?;
        }
        for c in cells {
            writeln!(
                out,
                "{:>of_section_width$} {:>of_total_width$}  {:<label_width$}  \
                 {:>samples_width$} {:>cumulative_width$}",
                c.of_section, c.of_total, c.label, c.samples, c.cumulative
            )?;
        }
    }
    Ok(())
}

/// Other code mixes many modules, and a system-wide "main executables" section many
/// executables: there the module says where a symbol lives. Unsymbolised names
/// (`module+0x...`) already carry it.
fn shows_module(report: &Report, section: &SectionReport) -> bool {
    match section.section {
        SectionKind::Other => true,
        SectionKind::Vanilla => report.system_wide,
        SectionKind::Generated => false,
    }
}

fn row_label(row: &ReportRow, show_module: bool, name_width: usize) -> String {
    if row.folded_rows > 0 {
        // Not elided: it is short, and its count is the point.
        return format!("{OTHERS_NAME} ({})", count(row.folded_rows as u64, "row"));
    }
    let label = if show_module && row.symbolized && !row.module.is_empty() {
        // "[kernel.kallsyms]" and "[vdso]" come bracketed already.
        let bracketed = row.module.starts_with('[') && row.module.ends_with(']');
        Cow::Owned(if bracketed {
            format!("{} {}", row.name, row.module)
        } else {
            format!("{} [{}]", row.name, row.module)
        })
    } else {
        Cow::Borrowed(row.name.as_str())
    };
    elide_middle(&label, name_width).into_owned()
}

fn percent(value: f64) -> String {
    format!("{:.2}%", round2(value))
}

fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use vmscope_proto::v1::{Profile, Section};

    use super::super::model::fixtures::{node_profile, profile_with, row};
    use super::*;

    const OPTIONS: ReportOptions = ReportOptions {
        min_percent: 0.01,
        name_width: 60,
    };

    fn render(profile: &Profile, options: &ReportOptions) -> String {
        let report = Report::from_profile(profile, options);
        let mut out = Vec::new();
        render_text(&report, options, &mut out).expect("writing to a Vec cannot fail");
        String::from_utf8(out).expect("the report is UTF-8")
    }

    /// Compares `actual` with the golden file, or rewrites it when UPDATE_GOLDEN=1.
    fn check_golden(name: &str, actual: &str) {
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

    #[test]
    fn golden_node_report() {
        check_golden("node.txt", &render(&node_profile(), &OPTIONS));
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
        let mut throttled = node_profile();
        throttled.cpu_seconds *= 2.0;
        let text = render(&throttled, &OPTIONS);
        assert!(
            text.contains("warning: 700 samples per busy CPU-second were taken, 1400 were asked"),
            "{text}"
        );
    }

    #[test]
    fn every_table_line_has_the_same_width() {
        let text = render(&node_profile(), &OPTIONS);
        let widths: Vec<usize> = text
            .lines()
            .filter(|l| l.starts_with("% of ") || l.ends_with("%)"))
            .filter(|l| !l.contains("samples in"))
            .map(|l| l.chars().count())
            .collect();
        assert!(widths.len() > 10, "{text}");
        assert!(
            widths.windows(2).all(|w| w[0] == w[1]),
            "{widths:?}\n{text}"
        );
    }

    #[test]
    fn empty_profile_renders_every_section_empty() {
        let text = render(&Profile::default(), &OPTIONS);
        let expected = "\
unknown target  start time unknown  session 0
session running; numbers are a snapshot
0.000 seconds; sampling frequency 0 hz per busy CPU (0 hz requested; 0.00 busy CPUs)
0 samples in the VM (0 samples in the entire program) 0.00% of total
0 samples lost

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
        session.targets.push(vmscope_proto::v1::TargetProcess {
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
    fn elides_ascii_like_vmprofiler() {
        assert_eq!(
            elide_middle("SequenceableCollection>>from:to:put:", 22),
            "Sequenceab...m:to:put:"
        );
        assert_eq!(
            elide_middle("Array>>replaceFrom:to:with:startingAt:", 26),
            "Array>>repla...startingAt:"
        );
        assert_eq!(elide_middle("short", 5), "short");
        assert_eq!(elide_middle("abcdef", 5), "a...f");
        assert_eq!(elide_middle("abcdef", 4), "a...");
        assert_eq!(elide_middle("abcdef", 2), "ab");
        assert_eq!(elide_middle("abcdef", 0), "abcdef");
        let long = "x".repeat(500);
        assert_eq!(elide_middle(&long, 0), long);
        assert_eq!(elide_middle(&long, 60).chars().count(), 60);
    }

    #[test]
    fn elides_multibyte_names_on_char_boundaries() {
        let greek = "Παράδειγμα>>υπολογισμός:μακρύ:όνομα:";
        let elided = elide_middle(greek, 20);
        assert_eq!(elided, "Παράδειγμ...ύ:όνομα:");
        assert_eq!(elided.chars().count(), 20);
        let mixed = "日本語のクラス>>メソッド🦀:引数:";
        let elided = elide_middle(mixed, 11);
        assert_eq!(elided, "日本語の...:引数:");
        for width in 0..=mixed.chars().count() + 1 {
            let elided = elide_middle(mixed, width);
            let expected = if width == 0 {
                mixed.chars().count()
            } else {
                width.min(mixed.chars().count())
            };
            assert_eq!(elided.chars().count(), expected, "width {width}");
        }
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
