//! `vmscope diff BASE NEW`: two profiles compared, as text, JSON or a differential flame graph.
//!
//! Each side is a session (by id, its profile fetched from the daemon) or a pprof file vmscope
//! wrote. Sessions keep bytecode ranges whole (`8->23`); a pprof file keeps a range's first pc
//! only, so when either side is a file both are cut alike (`@8`) and the output says so. The
//! comparison itself is [`vmscope_report::diff`]'s.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    io::{self, Write},
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use inferno::flamegraph::{self, Options};
use vmscope_report::{
    ReportOptions,
    diff::{
        Diff, DiffOptions, FunctionDiff, Granularity, MAIN_MODULE, Measure, Side, diff, format_p,
    },
    folded,
};

use crate::sessions::{self, Threads};

/// One side as the command line names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A session of the daemon.
    Session(u64),
    /// A pprof file.
    File(PathBuf),
}

impl Input {
    /// A path that exists is a file; otherwise a number is a session id.
    pub fn parse(text: &str) -> Result<Input, String> {
        if Path::new(text).exists() {
            return Ok(Input::File(PathBuf::from(text)));
        }
        match text.parse() {
            Ok(id) => Ok(Input::Session(id)),
            Err(_) => Err(format!(
                "{text:?} is neither a session id nor a file that exists (give a session's \
                 number, or a pprof file written by `vmscope ... --format pprof`)"
            )),
        }
    }
}

/// Reads both sides, each cut at the granularity both can give.
pub async fn load(
    socket: &Path,
    inputs: &[&Input],
    options: &ReportOptions,
    threads: &Threads,
) -> anyhow::Result<Vec<Side>> {
    let granularity = if inputs.iter().all(|i| matches!(i, Input::Session(_))) {
        Granularity::Ranges
    } else {
        Granularity::Lines
    };
    let mut sides = Vec::with_capacity(inputs.len());
    for input in inputs {
        sides.push(match input {
            Input::Session(id) => {
                let profile = sessions::profile(socket, *id, threads).await?;
                Side::from_profile(format!("session {id}"), &profile, options, granularity)?
            }
            Input::File(path) => {
                let bytes = std::fs::read(path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                Side::from_pprof(path.display().to_string(), &bytes)?
            }
        });
    }
    Ok(sides)
}

/// Compares `base` and `new` as `options` says; positions are by first pc when either side is
/// a pprof file.
pub fn compare(base: &Side, new: &Side, inputs: [&Input; 2], options: &DiffOptions) -> Diff {
    let mut diff = diff(base, new, options);
    diff.positions_by_first_pc = inputs.iter().any(|i| matches!(i, Input::File(_)));
    diff
}

/// The diff as text: the header, the test, then self time and inclusive time, largest change
/// first, each function's ranges under it.
pub fn render_text(diff: &Diff, out: &mut impl Write) -> io::Result<()> {
    let side = |label: &str, s: &vmscope_report::diff::SideSummary| {
        let exe = if s.main_executable.is_empty() {
            String::new()
        } else {
            format!("{}, ", s.main_executable)
        };
        format!(
            "{label} {} ({exe}{} samples, {:.3} s of CPU at {:.0} Hz)",
            s.label,
            s.samples,
            s.cpu_seconds,
            1e9 / s.period_ns
        )
    };
    writeln!(out, "{}", side("base:", &diff.base))?;
    writeln!(out, "{}", side("new: ", &diff.new))?;
    writeln!(out, "compares {}", diff.test)?;
    if diff.positions_by_first_pc {
        writeln!(
            out,
            "a pprof file keeps each bytecode range's first pc only: ranges are shown as @PC \
             on both sides"
        )?;
    }
    writeln!(
        out,
        "total: {}",
        measure_line(&diff.total).trim_start().trim_end()
    )?;
    let main = main_names(diff);
    for (title, inclusive) in [("Self time", false), ("Inclusive time", true)] {
        writeln!(out)?;
        writeln!(out, "{title}")?;
        writeln!(
            out,
            "{:>11} {:>11} {:>8} {:>19} {:>9}   function",
            "base ms", "new ms", "change", "95% interval", "p"
        )?;
        let mut rows: Vec<&FunctionDiff> = diff.functions.iter().collect();
        let of = |f: &FunctionDiff| if inclusive { f.inclusive } else { f.self_time };
        rows.retain(|f| of(f).base_samples + of(f).new_samples > 0);
        rows.sort_by(|a, b| {
            of(b)
                .delta_ms()
                .abs()
                .partial_cmp(&of(a).delta_ms().abs())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        for function in rows {
            let module = if function.module == MAIN_MODULE {
                main.as_str()
            } else {
                function.module.as_str()
            };
            writeln!(
                out,
                "{}{} {}",
                measure_line(&of(function)),
                function.name,
                bracketed(module)
            )?;
            for position in &function.positions {
                let m = if inclusive {
                    position.inclusive
                } else {
                    position.self_time
                };
                if m.base_samples + m.new_samples > 0 {
                    writeln!(out, "{}    {}", measure_line(&m), position.position)?;
                }
            }
        }
    }
    if !diff.calls.is_empty() {
        writeln!(out)?;
        writeln!(out, "Calls counted (exact: uprobes, compared as they are)")?;
        writeln!(
            out,
            "{:>15} {:>15} {:>9}   function",
            "base", "new", "change"
        )?;
        for c in &diff.calls {
            let shown = |n: Option<u64>| n.map_or("-".to_owned(), |n| n.to_string());
            let change = match (c.base, c.new) {
                (Some(b), Some(n)) if b > 0 => {
                    format!("{:+.2}%", (n as f64 / b as f64 - 1.0) * 100.0)
                }
                (Some(b), Some(n)) if b == n => "+0.00%".to_owned(),
                _ => "-".to_owned(),
            };
            writeln!(
                out,
                "{:>15} {:>15} {change:>9}   {}",
                shown(c.base),
                shown(c.new),
                c.function
            )?;
        }
    }
    if diff.folded_rows > 0 {
        writeln!(out)?;
        writeln!(
            out,
            "{} rows under {}% of either side's samples not shown ({} of them changed more \
             than noise); --fold 0 shows every row",
            diff.folded_rows,
            vmscope_report::round2(diff.min_percent),
            diff.folded_significant
        )?;
    }
    Ok(())
}

/// `[libc.so.6]`, and `[kernel.kallsyms]` as it is.
fn bracketed(module: &str) -> String {
    if module.starts_with('[') {
        module.to_owned()
    } else {
        format!("[{module}]")
    }
}

fn main_names(diff: &Diff) -> String {
    match (
        diff.base.main_executable.as_str(),
        diff.new.main_executable.as_str(),
    ) {
        (a, b) if a == b => a.to_owned(),
        ("", b) => b.to_owned(),
        (a, "") => a.to_owned(),
        (a, b) => format!("{a} | {b}"),
    }
}

/// One measure's numbers, ending where the name goes: `base new change [interval] p *`.
fn measure_line(m: &Measure) -> String {
    let change = match m.change.percent() {
        Some(p) => format!("{p:+.1}%"),
        None if m.new_samples > 0 => "new".to_owned(),
        None => "-".to_owned(),
    };
    let bound = |r: f64| {
        if r.is_infinite() {
            "inf".to_owned()
        } else {
            format!("{:+.1}%", (r - 1.0) * 100.0)
        }
    };
    let interval = if m.base_samples == 0 {
        String::new()
    } else {
        format!(
            "[{}, {}]",
            bound(m.change.interval.0),
            bound(m.change.interval.1)
        )
    };
    let mut line = String::new();
    let _ = write!(
        line,
        "{:>11.1} {:>11.1} {change:>8} {interval:>19} {:>9} {} ",
        m.base_ms,
        m.new_ms,
        format_p(m.change.p_value),
        if m.change.significant { '*' } else { ' ' }
    );
    line
}

/// The diff as a differential flame graph (inferno): boxes as wide as the new side's time,
/// red where it grew, blue where it shrank, as Brendan Gregg's differential flame graphs.
pub fn render_flamegraph(
    base: &Side,
    new: &Side,
    diff: &Diff,
    out: &mut impl Write,
) -> io::Result<()> {
    // Microseconds of CPU (shares scaled to the base's total under --normalize): inferno counts
    // whole units, and both sides must count the same unit.
    let unit = |side: &Side, other_total: u64| -> f64 {
        if diff.normalized {
            base.period_ns / 1e3 * base.total_samples as f64 / other_total.max(1) as f64
        } else {
            side.period_ns / 1e3
        }
    };
    let (base_unit, new_unit) = (unit(base, base.total_samples), unit(new, new.total_samples));
    let mut lines: BTreeMap<String, [f64; 2]> = BTreeMap::new();
    for (index, (side, scale)) in [(base, base_unit), (new, new_unit)].into_iter().enumerate() {
        for stack in &side.stacks {
            let line = stack
                .frames
                .iter()
                .rev()
                .map(|f| folded::sanitize(&f.name))
                .collect::<Vec<_>>()
                .join(";");
            lines.entry(line).or_default()[index] += stack.samples as f64 * scale;
        }
    }
    if lines.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "neither profile has samples with stacks: there is no flame graph to draw",
        ));
    }
    let lines: Vec<String> = lines
        .iter()
        .map(|(stack, [b, n])| format!("{stack} {} {}", b.round(), n.round()))
        .collect();
    let mut options = Options::default();
    options.title = format!("{} vs {}", diff.new.label, diff.base.label);
    options.subtitle = Some(format!(
        "widths: {}; red grew, blue shrank from {}",
        diff.new.label, diff.base.label
    ));
    options.count_name = "us of CPU".to_owned();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
}
