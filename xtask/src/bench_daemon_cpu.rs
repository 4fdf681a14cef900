//! `cargo xtask bench --daemon-cpu`: the daemon's CPU time per 1,000 samples in each call-graph
//! mode, with a session's one-time costs apart.
//!
//! The workload is the main benchmark's: `stackloop` (a CPU-bound loop under call chains up to
//! 34 frames deep, built with frame pointers), recorded by `vmscope record --format json` in
//! rounds of `none`, `fp` and `dwarf`. A first round warms the daemon up (symbols and DWARF of
//! the binaries, loaded once per daemon) and is not counted. Per mode the table gives the CPU
//! time of all the daemon's threads per 1,000 samples, and per session: most of it is the
//! session's own start and stop (perf events on every CPU, kernel counters, the profile), not
//! its samples.
//!
//! `--baseline VMSCOPED` starts an earlier build's daemon beside this build's and alternates
//! sessions between them, so that both columns come from one run on one machine.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

use crate::{
    bench::{daemon_cpu_ns, proc_field, stackloop},
    demo::{self, Built, Daemon},
};

/// Counted rounds, after the warm-up.
const ROUNDS: usize = 5;

const MODES: [&str; 3] = ["none", "fp", "dwarf"];

/// One daemon's totals per mode: CPU nanoseconds, samples, sessions.
#[derive(Default)]
struct Load {
    by_mode: BTreeMap<&'static str, (u64, u64, u64)>,
    peak_rss_kib: u64,
}

/// How much longer `--long-sessions` sessions are.
const LONG: u64 = 6;

/// Runs the rounds against this build's daemon, and the baseline's when given; with `long`,
/// sessions [`LONG`] times as long.
pub fn run(baseline: Option<PathBuf>, long: bool) -> anyhow::Result<()> {
    let built = demo::build()?;
    let stackloop = stackloop(&built)?;
    let work: u64 = crate::bench::WORK.parse()?;
    let work = (if long { work * LONG } else { work }).to_string();
    let mut daemons = Vec::new();
    if let Some(binary) = &baseline {
        daemons.push((
            "baseline",
            Daemon::start_binary(binary, &built.dir, "baseline")?,
        ));
    }
    daemons.push((
        "this build",
        Daemon::start_binary(&built.daemon, &built.dir, "this-build")?,
    ));
    let mut loads: Vec<Load> = daemons.iter().map(|_| Load::default()).collect();
    for round in 0..=ROUNDS {
        for mode in MODES {
            for ((_, daemon), load) in daemons.iter().zip(&mut loads) {
                let pid = daemon.pid().context("a daemon of our own")?;
                let before = daemon_cpu_ns(pid)?;
                let samples = record(&built, daemon, &stackloop, &work, mode)?;
                let spent = daemon_cpu_ns(pid)?.saturating_sub(before);
                if round > 0 {
                    let entry = load.by_mode.entry(mode).or_default();
                    *entry = (entry.0 + spent, entry.1 + samples, entry.2 + 1);
                }
            }
        }
        if round > 0 {
            println!("bench: daemon CPU: round {round} of {ROUNDS}");
        }
    }
    for ((_, daemon), load) in daemons.iter().zip(&mut loads) {
        let pid = daemon.pid().context("a daemon of our own")?;
        load.peak_rss_kib = proc_field(pid, "status", "VmHWM:").unwrap_or(0);
    }
    drop(daemons);

    let names: Vec<&str> = if baseline.is_some() {
        vec!["baseline", "this build"]
    } else {
        vec!["this build"]
    };
    println!();
    println!(
        "| daemon CPU, after a warm-up round | {} |",
        names.join(" | ")
    );
    println!("|---|{}", "---|".repeat(names.len()));
    for mode in MODES {
        let per_1000: Vec<String> = loads
            .iter()
            .map(|l| {
                let (ns, samples, sessions) = l.by_mode[mode];
                format!(
                    "{:.2} ms ({:.1} ms per session of {} samples)",
                    ns as f64 / 1e6 * 1000.0 / samples.max(1) as f64,
                    ns as f64 / 1e6 / sessions.max(1) as f64,
                    samples / sessions.max(1)
                )
            })
            .collect();
        println!(
            "| per 1000 samples, --call-graph {mode} | {} |",
            per_1000.join(" | ")
        );
    }
    let peaks: Vec<String> = loads
        .iter()
        .map(|l| format!("{:.1} MiB", l.peak_rss_kib as f64 / 1024.0))
        .collect();
    println!("| peak RSS (VmHWM) | {} |", peaks.join(" | "));
    Ok(())
}

/// Records stackloop (doing `work`) in `mode` against `daemon`: the samples the report
/// counted.
fn record(
    built: &Built,
    daemon: &Daemon,
    stackloop: &Path,
    work: &str,
    mode: &str,
) -> anyhow::Result<u64> {
    let json = built.dir.join("daemon-cpu.json");
    let output = Command::new(&built.cli)
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["record", "--call-graph", mode, "--format", "json", "-o"])
        .arg(&json)
        .arg("--")
        .arg(stackloop)
        .args([work, crate::bench::DEPTH])
        .output()?;
    if !output.status.success() {
        bail!(
            "vmscope record --call-graph {mode} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = std::fs::read_to_string(&json).context("no JSON report")?;
    crate::bench::total_samples(&text)
}
