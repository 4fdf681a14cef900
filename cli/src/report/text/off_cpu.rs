//! The text report's time off the CPU (`--mode off-cpu` and `wall`): what was recorded and
//! left out, why the threads waited, the sections of where they waited (the samples' tables,
//! their counts times), and each thread's time on and off the CPU.
//!
//! ```text
//! time off the CPU: 21 blocks, 0.608 s (every block recorded)
//!   98.99%   0.602 s  sleeping (timers, locks, futexes, sockets, pipes)  (20 blocks)
//!    1.01%   0.006 s  waiting for a CPU (preempted, runnable)  (1 block)
//!
//! % of vanilla vm code (% of total)     (time off) (cumulative) (inclusive)
//!  99.01% (99.01%)  sleeper_path           (602ms)     (99.01%)   (99.01%)
//!
//! threads: time on and off the CPU (of 2.001 s)
//!       on CPU     off CPU       total  % of duration  thread
//!      1.399 s     0.602 s     2.001 s        100.00%  4162 sleeper
//! ```

use std::io::{self, Write};

use vmscope_model::ProfileMode;
use vmscope_report::{Report, ReportOptions, off_cpu::OffCpuReport};

use super::{Tables, count, milliseconds, percent, write_tables};

/// The session's minimum block, as the header says it: `every block recorded`, or
/// `blocks of 1ms or more recorded`.
pub(super) fn min_block_label(report: &Report) -> String {
    match report.off_cpu.as_ref().map_or(0, |o| o.min_block_ns) {
        0 => "every block recorded".to_owned(),
        ns => format!("blocks of {} or more recorded", duration(ns)),
    }
}

/// A duration for people: `30.1ms`, `1.234 s`, `12us`.
pub(super) fn duration(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms >= 1000.0 {
        format!("{:.3} s", ms / 1000.0)
    } else if ms >= 1.0 {
        format!("{}ms", milliseconds(ms))
    } else {
        format!("{}us", (ns as f64 / 1e3).round())
    }
}

/// Seconds with three decimals, for the columns of the threads' table.
fn seconds(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// Writes the off-CPU part of `report`.
pub(super) fn write(
    report: &Report,
    off: &OffCpuReport,
    options: &ReportOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    // After the samples' tables; right after the header's blank line in an off-CPU report.
    if report.mode != ProfileMode::OffCpu {
        writeln!(out)?;
    }
    writeln!(
        out,
        "time off the CPU: {}, {} ({})",
        count(off.blocks, "block"),
        seconds(off.total_ns),
        min_block_label(report)
    )?;
    for state in &off.states {
        writeln!(
            out,
            "  {:>7}  {:>9}  {}  ({})",
            percent(state.percent),
            seconds(state.ns),
            state.state.describe(),
            count(state.blocks, "block")
        )?;
    }
    for note in notes(off) {
        writeln!(out, "note: {note}")?;
    }
    for section in &off.sections {
        match section.percent_of_vm {
            Some(of_vm) => writeln!(
                out,
                "{} in {} {} of entire vm ({} of total)",
                seconds(section.samples),
                section.title,
                percent(of_vm),
                percent(section.percent_of_total)
            )?,
            None => writeln!(
                out,
                "{} in other code ({} of total)",
                seconds(section.samples),
                percent(section.percent_of_total)
            )?,
        }
    }
    let tables = Tables {
        sections: &off.sections,
        call_graph: true,
        system_wide: report.system_wide,
        vm_modules: &off.vm_modules,
        time: true,
    };
    write_tables(&tables, options, out)?;
    write_threads(report, off, out)
}

/// What the off-CPU part must say it left out or could not know.
fn notes(off: &OffCpuReport) -> Vec<String> {
    let mut notes = Vec::new();
    if off.short_blocks > 0 {
        notes.push(format!(
            "{} shorter than the minimum ({} in all) are in no number below",
            count(off.short_blocks, "block"),
            duration(off.short_ns)
        ));
    }
    if off.lost_blocks > 0 {
        notes.push(format!(
            "{} lost: the kernel's ring buffer (or this user's share of it) was full",
            count(off.lost_blocks, "block")
        ));
    }
    if off.unfollowed > 0 {
        notes.push(format!(
            "{} left their CPU while the kernel followed its most threads off the CPU at once: \
             their blocks are missing",
            count(off.unfollowed, "thread")
        ));
    }
    if off.still_blocked_threads > 0 {
        notes.push(format!(
            "{} still off the CPU at the stop ({}): counted up to the stop under \"{}\", their \
             stacks being taken only as they come back",
            count(u64::from(off.still_blocked_threads), "thread"),
            duration(off.still_blocked_ns),
            vmscope_model::off_cpu::STILL_BLOCKED_FRAME
        ));
    }
    notes
}

/// Most threads the threads' table lists; the rest fold into one line.
const THREAD_ROWS: usize = 20;

/// Each thread's time on and off the CPU, most first; under each, its time off the CPU inside
/// its VM's intervals (waiting for a GC).
fn write_threads(report: &Report, off: &OffCpuReport, out: &mut impl Write) -> io::Result<()> {
    if off.threads.is_empty() {
        return Ok(());
    }
    let wall = report.mode == ProfileMode::Wall;
    let duration_ns = (report.duration_seconds.max(0.0) * 1e9) as u64;
    writeln!(out)?;
    if wall {
        writeln!(
            out,
            "threads: time on and off the CPU (of {}: a thread that lived the whole session \
             adds up to about 100%)",
            seconds(duration_ns)
        )?;
        writeln!(
            out,
            "{:>11} {:>11} {:>11}  {:>13}  thread",
            "on CPU", "off CPU", "total", "% of duration"
        )?;
    } else {
        writeln!(
            out,
            "threads: time off the CPU (of {})",
            seconds(duration_ns)
        )?;
        writeln!(out, "{:>11}  {:>13}  thread", "off CPU", "% of duration")?;
    }
    for thread in off.threads.iter().take(THREAD_ROWS) {
        let who = if thread.name.is_empty() {
            format!("{} (pid {})", thread.tid, thread.pid)
        } else {
            format!("{} {} (pid {})", thread.tid, thread.name, thread.pid)
        };
        if wall {
            writeln!(
                out,
                "{:>11} {:>11} {:>11}  {:>13}  {who}",
                seconds(thread.cpu_ns),
                seconds(thread.off_cpu_ns),
                seconds(thread.total_ns),
                percent(thread.percent_of_duration)
            )?;
        } else {
            writeln!(
                out,
                "{:>11}  {:>13}  {who}",
                seconds(thread.off_cpu_ns),
                percent(thread.percent_of_duration)
            )?;
        }
        for during in &thread.during {
            writeln!(
                out,
                "             of which inside {}: {} ({} of its time off the CPU)",
                during.kind,
                duration(during.ns),
                percent(during.percent_of_off_cpu)
            )?;
        }
    }
    if off.threads.len() > THREAD_ROWS {
        let rest = &off.threads[THREAD_ROWS..];
        writeln!(
            out,
            "{:>11}  ...others... ({})",
            seconds(rest.iter().map(|t| t.off_cpu_ns).sum()),
            count(rest.len() as u64, "thread")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_the_unit_that_fits() {
        assert_eq!(duration(12_345), "12us");
        assert_eq!(duration(30_123_456), "30ms");
        assert_eq!(duration(6_543_210), "6.5ms");
        assert_eq!(duration(1_234_567_890), "1.235 s");
    }
}
