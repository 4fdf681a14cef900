//! `cargo xtask bench --labels`: what domain labels cost, to the program that sets them and to
//! each sample (issue 28's figures).
//!
//! The labels fixture (`tests/fixtures/labels.c rate`) does units of a few hundred ns of work
//! and, with labels `on`, changes its label after each (millions of changes a second); `off`
//! runs the same loop and never publishes a label word. Each run is sampled by a session of
//! the bench's daemon (997 Hz), runs alternated, medians:
//!
//! - **Cost to the program**: its units per second, on against off (a change is one store; the
//!   sampler's read of the word is on the sampled thread too).
//! - **Cost to each sample**: the sampler's BPF program's own time per run (the kernel's
//!   `bpf_stats_enabled` accounting), labels read with each sample against none published.

use std::{
    io::{BufRead, BufReader, Read},
    process::{Command, Stdio},
};

use anyhow::{Context, bail};

use crate::{
    bench_counts::sampler_ns_per_run,
    bench_exit::{BpfStats, median},
    demo::{self, Built, Daemon},
    root,
};

/// Alternated runs of each side.
const RUNS: usize = 5;
/// Seconds each run of the fixture lasts; its session samples the first `SAMPLED`.
const SECONDS: u32 = 4;
const SAMPLED: u32 = 3;

/// Runs the table.
pub fn run() -> anyhow::Result<()> {
    let built = demo::build()?;
    let fixture = built.dir.join("labels-fixture");
    let status = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o"])
        .arg(&fixture)
        .arg(root().join("tests/fixtures/labels.c"))
        .status()
        .context("cannot run gcc (cargo xtask setup installs it)")?;
    if !status.success() {
        bail!("gcc of tests/fixtures/labels.c failed");
    }
    let daemon = Daemon::start_binary(&built.daemon, &built.dir, "labels-bench")?;
    let pid = daemon.pid().context("the bench's own daemon")?;
    let stats = BpfStats::enable()?;
    let (mut on, mut off) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for _ in 0..RUNS {
        for (labels, into) in [(true, &mut on), (false, &mut off)] {
            let (rate, ns) = sampled_run(&built, &daemon, pid, &fixture, labels)?;
            into.0.push(rate);
            into.1.push(ns);
        }
    }
    drop(stats);
    // This machine's BPF run times are bimodal (about 850 or 1,600 ns either way): the range
    // says which mode the runs fell in.
    let range = |v: &[f64]| {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        format!("{min:.0}–{max:.0}")
    };
    let ranges = [range(&on.0), range(&off.0), range(&on.1), range(&off.1)];
    let (rate_on, rate_off) = (median(on.0), median(off.0));
    let (ns_on, ns_off) = (median(on.1), median(off.1));
    println!();
    println!(
        "| labels fixture, {RUNS} alternated runs of {SECONDS} s, sampled at 997 Hz, medians \
         (min–max) | labels on: changed after every unit | off: none published | ratio on/off |"
    );
    println!("|---|---|---|---|");
    println!(
        "| units of work per second (= label changes per second, on) | {rate_on:.0} ({}) | \
         {rate_off:.0} ({}) | {:.4} |",
        ranges[0],
        ranges[1],
        rate_on / rate_off
    );
    println!(
        "| the sampler's BPF ns per run | {ns_on:.0} ({}) | {ns_off:.0} ({}) | {:.3} |",
        ranges[2],
        ranges[3],
        ns_on / ns_off
    );
    Ok(())
}

/// One run of the fixture, sampled: its units per second and the sampler's ns per run.
fn sampled_run(
    built: &Built,
    daemon: &Daemon,
    daemon_pid: u32,
    fixture: &std::path::Path,
    labels: bool,
) -> anyhow::Result<(f64, f64)> {
    let mut child = Command::new(fixture)
        .arg(SECONDS.to_string())
        .args(["rate", if labels { "on" } else { "off" }])
        .env("VMSCOPE_CODEMAP_DIR", &built.dir)
        .stdout(Stdio::piped())
        .spawn()
        .context("start the labels fixture")?;
    let mut stdout = BufReader::new(child.stdout.take().context("its stdout")?);
    stdout.read_line(&mut String::new())?;
    let ns = sampler_ns_per_run(built, daemon, daemon_pid, child.id(), SAMPLED)?;
    let mut rest = String::new();
    stdout.read_to_string(&mut rest)?;
    child.wait()?;
    let units: f64 = rest
        .trim()
        .strip_prefix("units=")
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("the fixture's units in {rest:?}"))?;
    Ok((units / f64::from(SECONDS), ns))
}
