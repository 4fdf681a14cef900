//! The statistics after the code, in VMProfiler's words and order: each VM's settings,
//! **Memory**, **GCs**, **Compiled Code Compactions** and the kinds of work it named, the exact
//! **Counts** (a VM's own counters, `record --count`'s calls), then **Events**: the VMs'
//! counters and what the kernel counted for the targets, with rates. `--stats` prints them
//! alone ([`render_stats_text`]), after the header's first lines.

use std::io::{self, Write};

use vmscope_model::{ConfigValue, IntervalKind};
use vmscope_report::{
    Report,
    stats::{DISAGREEMENT_POINTS, IntervalStats, VmStatsReport},
};

use super::{count, write_title};

/// Writes the statistics alone (`vmscope report --stats`): the header's first two lines, so
/// that the numbers say which session and how long, then the statistics sections.
pub fn render_stats_text(report: &Report, out: &mut impl Write) -> io::Result<()> {
    write_title(report, out)?;
    if report.kernel_events.is_none() && report.vm_statistics.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "no statistics: system-wide sessions have none, nor profiles from daemons that do \
             not count"
        )?;
    }
    write_statistics(report, out)
}

/// The sections after the code, in VMProfiler's words and order: each VM's **Memory**,
/// **GCs**, **Compiled Code Compactions** (then its safepoints and the kinds of work it named),
/// and **Events**: the VMs' counters, then what the kernel counted for the targets, with
/// rates, per target when there are several or one is partial.
pub(super) fn write_statistics(report: &Report, out: &mut impl Write) -> io::Result<()> {
    let several = report.vm_statistics.len() > 1;
    for vm in &report.vm_statistics {
        if several {
            writeln!(out)?;
            writeln!(out, "{} (pid {})", vm_name(vm), vm.pid)?;
        }
        write_vm_sections(vm, out)?;
    }
    write_exact_counts(report, out)?;
    write_domain_events(report, out)?;
    let vm_counters = report
        .vm_statistics
        .iter()
        .any(|vm| !vm.counters.is_empty());
    if !vm_counters && report.kernel_events.is_none() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "**Events**")?;
    for vm in &report.vm_statistics {
        let whose = if several {
            format!("pid {}: ", vm.pid)
        } else {
            String::new()
        };
        for counter in &vm.counters {
            writeln!(
                out,
                "{whose}{} {} ({} per second)",
                counter.name,
                grouped(counter.count as i128),
                per_second(counter.per_second)
            )?;
        }
    }
    let Some(events) = &report.kernel_events else {
        return Ok(());
    };
    for event in &events.total {
        writeln!(
            out,
            "{}{} {} ({} per second)",
            if event.part { "  " } else { "" },
            event.label,
            grouped(event.count.into()),
            per_second(event.per_second)
        )?;
    }
    for why in &events.unavailable {
        writeln!(out, "not counted: {why}")?;
    }
    let by_process =
        events.processes.len() > 1 || events.processes.iter().any(|p| p.note.is_some());
    if by_process {
        writeln!(out, "by process:")?;
        for process in &events.processes {
            let mut line = format!("  pid {} ({}", process.pid, process.command);
            if process.threads > 0 {
                line.push_str(&format!(", {}", count(process.threads.into(), "thread")));
            }
            line.push(')');
            let counts: Vec<String> = process
                .events
                .iter()
                .map(|e| {
                    format!(
                        "{} {}",
                        e.label.split(" (").next().unwrap_or(e.label),
                        grouped(e.count.into())
                    )
                })
                .collect();
            if !counts.is_empty() {
                line.push_str(": ");
                line.push_str(&counts.join(", "));
            }
            if let Some(note) = &process.note {
                line.push_str(&format!(" ({note})"));
            }
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// **Counts**: what the VMs counted exactly in their own memory over the session (each
/// method's activations), most first, with where the counts come from and, when they are not
/// exact, why.
fn write_exact_counts(report: &Report, out: &mut impl Write) -> io::Result<()> {
    write_call_counts(report, out)?;
    let several = report.vm_statistics.len() > 1;
    for vm in &report.vm_statistics {
        for region in &vm.exact_counts {
            writeln!(out)?;
            let whose = if several {
                format!(" of pid {}", vm.pid)
            } else {
                String::new()
            };
            let total: u64 = region.counts.iter().map(|c| c.count).sum();
            writeln!(
                out,
                "**Counts**{whose}: {} {} (exact: the VM's own counters, {} at the start, {} at \
                 the end)",
                grouped(total.into()),
                region.kind,
                known(&region.start_source),
                known(&region.end_source),
            )?;
            if !region.note.is_empty() {
                writeln!(out, "not exact: {}", region.note)?;
            }
            let width = name_width(region.counts.iter().map(|c| c.name.as_str()));
            for c in &region.counts {
                writeln!(
                    out,
                    "  {:<width$} {:>15}  {:>6.2}%",
                    c.name,
                    grouped(c.count.into()),
                    c.count as f64 * 100.0 / total.max(1) as f64
                )?;
            }
        }
    }
    Ok(())
}

/// Most objects and stacks listed under each type of domain event; JSON has them all.
const DOMAIN_EVENT_TOP: usize = 5;

/// **Domain events**: the events each VM published of its own domain (after MetaSpy), per
/// type with their rate (mean and busiest second), then each type's busiest objects and the
/// stacks that emitted it, when the VM named them.
fn write_domain_events(report: &Report, out: &mut impl Write) -> io::Result<()> {
    let several = report.vm_statistics.len() > 1;
    for vm in report
        .vm_statistics
        .iter()
        .filter(|vm| !vm.domain_events.is_empty())
    {
        writeln!(out)?;
        let whose = if several {
            format!(" of pid {}", vm.pid)
        } else {
            String::new()
        };
        let total: u64 = vm.domain_events.iter().map(|t| t.count).sum();
        writeln!(
            out,
            "**Domain events**{whose}: {} in {:.1} s (exact: each one the VM published)",
            grouped(total.into()),
            vm.seconds
        )?;
        let width = name_width(vm.domain_events.iter().map(|t| t.name.as_str()));
        for t in &vm.domain_events {
            let busiest = t.per_second.iter().copied().max().unwrap_or(0);
            writeln!(
                out,
                "  {:<width$} {:>15}  {:>10.1}/s  (busiest second {})",
                t.name,
                grouped(t.count.into()),
                t.count as f64 / vm.seconds.max(1e-9),
                grouped(busiest.into()),
            )?;
            for o in t.objects.iter().take(DOMAIN_EVENT_TOP) {
                writeln!(
                    out,
                    "      object {:<12} {:>15}",
                    o.object,
                    grouped(o.count.into())
                )?;
            }
            if t.objects.len() > DOMAIN_EVENT_TOP {
                writeln!(
                    out,
                    "      ... {} more objects",
                    t.objects.len() - DOMAIN_EVENT_TOP
                )?;
            }
            for e in t.stacks.iter().take(DOMAIN_EVENT_TOP) {
                writeln!(
                    out,
                    "      from {} {:>15}",
                    e.frames.join(" < "),
                    grouped(e.count.into())
                )?;
            }
        }
    }
    Ok(())
}

/// The calls `record --count` counted, each function's, per target when there are several.
fn write_call_counts(report: &Report, out: &mut impl Write) -> io::Result<()> {
    let counts = &report.call_counts;
    let Some(first) = counts.first() else {
        return Ok(());
    };
    writeln!(out)?;
    writeln!(
        out,
        "**Counts**: calls (exact: a uprobe at each function's entry, every thread)"
    )?;
    let width = name_width(counts.iter().map(|c| c.function.as_str()));
    let several = counts.iter().any(|c| c.pid != first.pid);
    for c in counts {
        let whose = if several {
            format!(" (pid {})", c.pid)
        } else {
            String::new()
        };
        if c.note.is_empty() {
            let calls = grouped(c.calls.into());
            writeln!(out, "  {:<width$} {calls:>15}{whose}", c.function)?;
        } else {
            writeln!(
                out,
                "  {:<width$} not counted{whose}: {}",
                c.function, c.note
            )?;
        }
    }
    Ok(())
}

/// A count's source as the Counts line says it: `unknown` when none.
fn known(source: &str) -> &str {
    if source.is_empty() { "unknown" } else { source }
}

/// The width of a column of counted names: the longest, at most 60 characters.
fn name_width<'a>(names: impl Iterator<Item = &'a str>) -> usize {
    names.map(|n| n.chars().count()).max().unwrap_or(0).min(60)
}

/// A VM's sections before the Events, each only when it published what it shows.
fn write_vm_sections(vm: &VmStatsReport, out: &mut impl Write) -> io::Result<()> {
    // A gauge that stayed at one level changed by nothing ("young +0 bytes"): the JSON keeps
    // its level; the Memory section, a list of changes, leaves it out, and is left out when
    // nothing moved.
    let moved: Vec<_> = vm.gauges.iter().filter(|g| g.moved()).collect();
    if !moved.is_empty() {
        writeln!(out)?;
        writeln!(out, "**Memory**")?;
        for gauge in moved {
            let sign = if gauge.delta < 0 { "-" } else { "+" };
            let mut line = format!(
                "{} {sign}{} {}",
                gauge.name,
                grouped(i128::from(gauge.delta).abs()),
                gauge.unit
            );
            // The ends alone hide a heap that filled and emptied between them.
            if gauge.low < gauge.high {
                line = format!(
                    "{} (low {}, high {})",
                    line.trim_end(),
                    grouped(i128::from(gauge.low)),
                    grouped(i128::from(gauge.high))
                );
            }
            writeln!(out, "{}", line.trim_end())?;
        }
    }
    let full = vm.kind(IntervalKind::FullGc);
    let scavenges = vm.kind(IntervalKind::Scavenge);
    if full.is_some() || scavenges.is_some() {
        writeln!(out)?;
        writeln!(out, "**GCs**")?;
        writeln!(out, "full {}", intervals_line(full, false))?;
        write_during(full, "full GCs", out)?;
        writeln!(out, "scavenges {}", intervals_line(scavenges, true))?;
        write_during(scavenges, "scavenges", out)?;
    }
    if let Some(compactions) = vm.kind(IntervalKind::CodeCompaction) {
        writeln!(out)?;
        writeln!(out, "**Compiled Code Compactions**")?;
        writeln!(out, "{}", intervals_line(Some(compactions), false))?;
        write_during(Some(compactions), "compactions", out)?;
    }
    if let Some(safepoints) = vm.kind(IntervalKind::Safepoint) {
        writeln!(out)?;
        writeln!(out, "**Safepoints**")?;
        writeln!(out, "{}", intervals_line(Some(safepoints), true))?;
        write_during(Some(safepoints), "safepoints", out)?;
    }
    let named: Vec<&IntervalStats> = vm
        .intervals
        .iter()
        .filter(|i| matches!(i.kind, IntervalKind::Named(_)))
        .collect();
    if !named.is_empty() {
        writeln!(out)?;
        writeln!(out, "**Other intervals**")?;
        for kind in named {
            writeln!(out, "{} {}", kind.label, intervals_line(Some(kind), true))?;
            write_during(Some(kind), &kind.label, out)?;
        }
    }
    if vm
        .intervals
        .iter()
        .any(|i| i.sampled.as_ref().is_some_and(|s| s.disagreement.is_some()))
    {
        writeln!(
            out,
            "(!) sampled and the VM's own shares differ by more than {DISAGREEMENT_POINTS} \
             points: the VM's clock counts an interval's wall time, on a CPU or not; the \
             samples count CPU time, of all the process's threads"
        )?;
    }
    Ok(())
}

/// The functions the samples taken during a kind were in, most first: "  during scavenges:
/// 62.0% gc_trace (jitvm), 21.0% memset (libc.so.6)".
fn write_during(stats: Option<&IntervalStats>, what: &str, out: &mut impl Write) -> io::Result<()> {
    let Some(sampled) = stats.and_then(|s| s.sampled.as_ref()) else {
        return Ok(());
    };
    if sampled.top.is_empty() {
        return Ok(());
    }
    let functions: Vec<String> = sampled
        .top
        .iter()
        .map(|f| {
            if f.module.is_empty() {
                format!("{:.1}% {}", f.percent, f.name)
            } else {
                format!("{:.1}% {} ({})", f.percent, f.name, f.module)
            }
        })
        .collect();
    writeln!(out, "  during {what}: {}", functions.join(", "))
}

/// "182 totalling 57ms (0.8% elapsed time), avg 0.313ms", as VMProfiler writes a kind of
/// interval; all zeros for a kind the VM published none of. Where samples are tagged, the
/// share of them taken during the kind follows ("; sampled 0.9%"), marked "(!)" when it
/// disagrees with the VM's own.
fn intervals_line(stats: Option<&IntervalStats>, average: bool) -> String {
    let (count, total, percent, avg) = stats.map_or((0, 0.0, 0.0, 0.0), |s| {
        (s.count, s.total_ms, s.percent_of_elapsed, s.average_ms)
    });
    // Small shares keep two decimals: a GC at 0.05% of the time is not none.
    let decimals = if percent < 1.0 && percent > 0.0 { 2 } else { 1 };
    let mut line = format!(
        "{} totalling {}ms ({percent:.decimals$}% elapsed time)",
        grouped(count.into()),
        milliseconds(total),
    );
    if average && count > 0 {
        line.push_str(&format!(", avg {avg:.3}ms"));
    }
    if let Some(sampled) = stats.and_then(|s| s.sampled.as_ref()) {
        let decimals = if sampled.percent < 1.0 && sampled.percent > 0.0 {
            2
        } else {
            1
        };
        line.push_str(&format!("; sampled {:.decimals$}%", sampled.percent));
        if let Some(points) = sampled.disagreement {
            line.push_str(&format!(" (!) {points:+.1} points"));
        }
    }
    line
}

/// A rate, whole and grouped like the counts beside it ("68,695,007").
fn per_second(rate: f64) -> String {
    if rate.is_finite() {
        grouped(rate.round() as i128)
    } else {
        "0".to_owned()
    }
}

/// Whole milliseconds as VMProfiler prints them ("57ms", "0ms"), with a decimal under 10.
pub(super) fn milliseconds(ms: f64) -> String {
    if ms >= 10.0 || ms == 0.0 {
        grouped(ms.round() as i128)
    } else {
        format!("{ms:.1}")
    }
}

/// The VM's name, or a placeholder for one that gave none.
fn vm_name(vm: &VmStatsReport) -> &str {
    if vm.vm.is_empty() { "a VM" } else { &vm.vm }
}

/// `n` with its thousands separated by commas ("3,801,936"), as VMProfiler's settings and
/// memory read.
pub(crate) fn grouped(n: i128) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A VM's settings on one line, as VMProfiler's header has them ("eden size: 3,801,936 stack
/// pages: 50"): after the VM's name and pid.
pub(super) fn settings_line(vm: &VmStatsReport) -> Option<String> {
    if vm.configuration.is_empty() {
        return None;
    }
    let settings: Vec<String> = vm
        .configuration
        .iter()
        .map(|s| {
            let value = match &s.value {
                Some(ConfigValue::Number(n)) => grouped((*n).into()),
                Some(ConfigValue::Text(t)) => t.clone(),
                None => String::new(),
            };
            format!("{}: {value} {}", s.name, s.unit)
                .trim_end()
                .to_owned()
        })
        .collect();
    Some(format!(
        "{} (pid {}): {}",
        vm_name(vm),
        vm.pid,
        settings.join("  ")
    ))
}
