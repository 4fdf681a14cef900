//! `cargo xtask bench --counts`: how steady exact counts are beside sampled time, and what
//! counting costs (after Compteur's measurements).
//!
//! - **Stability.** Ten recordings of the same fixed workload (`jitvm tiny --iterations`): per
//!   generated-code method, its samples (self, from the folded stacks) and its activations
//!   (the report's Counts). Compteur's ψ₁₀: how many positions the top-10 methods move between
//!   each run and the first, ranked by samples and by counts; and each method's coefficient of
//!   variation over the runs, by samples and by counts.
//! - **Cost to the VM.** The demo VM with and without its counters (`--no-counters`; the
//!   optimising tier off in both, as it goes by the counters), no daemon: iterations per second,
//!   runs alternated, medians.
//! - **Cost of a uprobe hit.** `mallocs 1000000` recorded with and without `--count
//!   libc.so.6:malloc`: the difference of wall times over a million calls.
//! - **Cost of counts per stack to each sample.** The sampler's BPF program's own time per run
//!   (the kernel's `bpf_stats_enabled` accounting, from the daemon's program descriptor's
//!   fdinfo) while a session samples `jitvm tiny` with its thread's send counter published,
//!   and with `--no-counters` (none published): runs alternated, medians.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context, bail};

use crate::{
    bench_exit::{BpfStats, median, program_stats},
    demo::{self, Built, Daemon},
    root,
};

/// Recordings of the workload.
const RUNS: usize = 10;
/// Calls of tiny's workload per run: about 2 s on this machine.
const ITERATIONS: &str = "3000";
/// Alternated runs of each side of a cost measurement.
const COST_RUNS: usize = 5;

/// Runs the tables.
pub fn run() -> anyhow::Result<()> {
    let built = demo::build()?;
    let daemon = Daemon::start_binary(&built.daemon, &built.dir, "counts-bench")?;
    stability(&built, &daemon)?;
    vm_cost(&built)?;
    uprobe_cost(&built, &daemon)?;
    sample_read_cost(&built, &daemon)?;
    Ok(())
}

fn stability(built: &Built, daemon: &Daemon) -> anyhow::Result<()> {
    let mut samples: Vec<BTreeMap<String, u64>> = Vec::new();
    let mut counts: Vec<BTreeMap<String, u64>> = Vec::new();
    for run in 1..=RUNS {
        let folded = built.dir.join(format!("counts-{run}.folded"));
        let out = Command::new(&built.cli)
            .arg("--socket")
            .arg(&daemon.socket)
            .args(["record", "--format", "folded", "-o"])
            .arg(&folded)
            .arg("--")
            .arg(&built.jitvm)
            .args(["tiny", "--iterations", ITERATIONS])
            .stdout(Stdio::null())
            .output()
            .context("vmscope record")?;
        if !out.status.success() {
            bail!("vmscope record: {}", String::from_utf8_lossy(&out.stderr));
        }
        let id = session_id(&String::from_utf8_lossy(&out.stderr))?;
        samples.push(leaf_samples(&std::fs::read_to_string(&folded)?));
        let report = Command::new(&built.cli)
            .arg("--socket")
            .arg(&daemon.socket)
            .args(["report", &id, "--stats"])
            .output()?;
        counts.push(activations(&String::from_utf8_lossy(&report.stdout)));
        println!(
            "bench: counts: run {run}: {} methods sampled, {} counted",
            samples[run - 1].len(),
            counts[run - 1].len()
        );
    }
    println!();
    println!(
        "| over {RUNS} runs of `jitvm tiny --iterations {ITERATIONS}` | by samples | by counts |"
    );
    println!("|---|---|---|");
    let (ps, pc) = (psi10(&samples), psi10(&counts));
    println!(
        "| top-10 positions moved against run 1 (ψ₁₀), min–max | {}–{} | {}–{} |",
        ps.0, ps.1, pc.0, pc.1
    );
    println!();
    println!("| method | mean samples | CV of samples | mean activations | CV of activations |");
    println!("|---|---|---|---|---|");
    let mut methods: Vec<&String> = samples[0].keys().collect();
    methods.sort_by_key(|m| std::cmp::Reverse(samples[0][*m]));
    for method in methods.into_iter().take(10) {
        let s: Vec<f64> = samples
            .iter()
            .map(|r| r.get(method).copied().unwrap_or(0) as f64)
            .collect();
        let c: Vec<f64> = counts
            .iter()
            .map(|r| r.get(method).copied().unwrap_or(0) as f64)
            .collect();
        let (sm, sv) = mean_cv(&s);
        let (cm, cv) = mean_cv(&c);
        println!(
            "| {method} | {sm:.0} | {:.2}% | {cm:.0} | {} |",
            sv * 100.0,
            if cm > 0.0 {
                format!("{:.4}%", cv * 100.0)
            } else {
                "(not counted: a primitive, or no activation)".to_owned()
            }
        );
    }
    Ok(())
}

fn vm_cost(built: &Built) -> anyhow::Result<()> {
    let mut with = Vec::new();
    let mut without = Vec::new();
    for _ in 0..COST_RUNS {
        for (counting, into) in [(true, &mut with), (false, &mut without)] {
            let mut command = Command::new(&built.jitvm);
            command.args([
                "fib",
                "--seconds",
                "1.5",
                "--hot-calls",
                "0",
                "--publish",
                "none",
            ]);
            if !counting {
                command.arg("--no-counters");
            }
            let out = command.output()?;
            let line = String::from_utf8_lossy(&out.stdout);
            let rate: f64 = line
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix("iter_per_sec="))
                .context("jitvm's iter_per_sec")?
                .parse()?;
            into.push(rate);
        }
    }
    let (w, wo) = (median(with), median(without));
    println!();
    println!("| `jitvm fib`, tier off, median of {COST_RUNS} alternated runs | iterations/s |");
    println!("|---|---|");
    println!("| without counters | {wo:.1} |");
    println!("| with counters (a counter bump per activation) | {w:.1} |");
    println!("| ratio with/without | {:.4} |", w / wo);
    Ok(())
}

fn uprobe_cost(built: &Built, daemon: &Daemon) -> anyhow::Result<()> {
    let mallocs = built.dir.join("mallocs");
    let status = Command::new("gcc")
        .args(["-O1", "-pthread", "-fno-builtin", "-o"])
        .arg(&mallocs)
        .arg(root().join("tests/fixtures/mallocs.c"))
        .status()?;
    if !status.success() {
        bail!("gcc mallocs.c failed");
    }
    let time = |count: bool| -> anyhow::Result<f64> {
        let mut command = Command::new(&built.cli);
        command.arg("--socket").arg(&daemon.socket).args([
            "record",
            "-o",
            "/dev/null",
            "--call-graph",
            "none",
        ]);
        if count {
            command.args(["--count", "libc.so.6:malloc"]);
        }
        let started = Instant::now();
        let status = command
            .arg("--")
            .arg(&mallocs)
            .arg("1000000")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("vmscope record mallocs failed");
        }
        Ok(started.elapsed().as_secs_f64())
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..COST_RUNS {
        with.push(time(true)?);
        without.push(time(false)?);
    }
    let (w, wo) = (median(with), median(without));
    println!();
    println!("| `mallocs 1000000` recorded, median of {COST_RUNS} | wall |");
    println!("|---|---|");
    println!("| without --count | {wo:.3} s |");
    println!("| with --count libc.so.6:malloc | {w:.3} s |");
    println!("| per uprobe hit | {:.2} µs |", (w - wo) / 1e6 * 1e6);
    Ok(())
}

/// `BPF_PROG_TYPE_PERF_EVENT` in fdinfo's `prog_type`: the sampler, the daemon's only one.
const PERF_EVENT: u64 = 7;

fn sample_read_cost(built: &Built, daemon: &Daemon) -> anyhow::Result<()> {
    let pid = daemon.pid().context("the bench's own daemon")?;
    let stats = BpfStats::enable()?;
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..COST_RUNS {
        for (counting, into) in [(true, &mut with), (false, &mut without)] {
            into.push(ns_per_sampler_run(built, daemon, pid, counting)?);
        }
    }
    drop(stats);
    let range = |v: &[f64]| {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        format!("{min:.0}–{max:.0}")
    };
    let (w_range, wo_range) = (range(&with), range(&without));
    let (w, wo) = (median(with), median(without));
    println!();
    println!(
        "| the sampler's BPF program sampling `jitvm tiny`, {COST_RUNS} alternated runs | ns \
         per run, median | min–max |"
    );
    println!("|---|---|---|");
    println!("| no thread counter published (`--no-counters`) | {wo:.0} | {wo_range} |");
    println!("| its send counter read with each sample | {w:.0} | {w_range} |");
    println!("| ratio with/without | {:.3} | |", w / wo);
    Ok(())
}

/// The sampler program's time per run over a 3 s session of `jitvm tiny`, its send counter
/// published or not.
fn ns_per_sampler_run(
    built: &Built,
    daemon: &Daemon,
    daemon_pid: u32,
    counting: bool,
) -> anyhow::Result<f64> {
    let mut vm = Command::new(&built.jitvm);
    vm.env("VMSCOPE_SOCKET", &daemon.socket)
        .args(["tiny", "--seconds", "4", "--ready"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if !counting {
        vm.arg("--no-counters");
    }
    let mut vm = vm.spawn().context("start jitvm")?;
    // Its code map and counter published, it says so.
    BufReader::new(vm.stdout.as_mut().context("jitvm's stdout")?).read_line(&mut String::new())?;
    let ns = sampler_ns_per_run(built, daemon, daemon_pid, vm.id(), 3);
    let _ = vm.wait();
    ns
}

/// The sampler program's time per run over a `seconds` session of process `target`
/// (`vmscope record -p`).
pub(crate) fn sampler_ns_per_run(
    built: &Built,
    daemon: &Daemon,
    daemon_pid: u32,
    target: u32,
    seconds: u32,
) -> anyhow::Result<f64> {
    let (time0, runs0) = sampler_stats(daemon_pid)?;
    let status = Command::new(&built.cli)
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["record", "-o", "/dev/null", "--duration"])
        .arg(seconds.to_string())
        .arg("-p")
        .arg(target.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    let (time1, runs1) = sampler_stats(daemon_pid)?;
    if !status.success() {
        bail!("vmscope record -p {target} failed");
    }
    let runs = runs1.saturating_sub(runs0);
    if runs == 0 {
        bail!("the sampler did not run: is BPF run-time accounting on?");
    }
    Ok(time1.saturating_sub(time0) as f64 / runs as f64)
}

/// The sampler's run time and run count so far.
fn sampler_stats(daemon_pid: u32) -> anyhow::Result<(u64, u64)> {
    match program_stats(daemon_pid, PERF_EVENT)?[..] {
        [(_, time, runs)] => Ok((time, runs)),
        ref found => bail!(
            "the daemon holds {} perf-event programs, not one",
            found.len()
        ),
    }
}

/// The session id `vmscope record` names on standard error.
fn session_id(stderr: &str) -> anyhow::Result<String> {
    stderr
        .split_once("session ")
        .and_then(|(_, rest)| rest.split(':').next())
        .map(str::to_owned)
        .context("no session id in vmscope's output")
}

/// Self samples per generated-code function (`_[j]` leaves) of folded stacks.
fn leaf_samples(folded: &str) -> BTreeMap<String, u64> {
    let mut leaves = BTreeMap::new();
    for line in folded.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let leaf = stack.rsplit(';').next().unwrap_or(stack);
        if let Some(name) = leaf.strip_suffix("_[j]") {
            *leaves.entry(name.to_owned()).or_insert(0) += n.parse::<u64>().unwrap_or(0);
        }
    }
    leaves
}

/// Activations per method from a text report's Counts section.
fn activations(report: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    let mut inside = false;
    for line in report.lines() {
        if line.starts_with("**Counts**") {
            inside = line.contains("activations");
            continue;
        }
        if !inside || !line.starts_with("  ") {
            inside = inside && line.starts_with("  ");
            continue;
        }
        // `  NAME   1,234   12.34%`
        let mut fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 3 {
            continue;
        }
        fields.pop();
        let n: u64 = fields
            .pop()
            .unwrap_or("")
            .replace(',', "")
            .parse()
            .unwrap_or(0);
        counts.insert(fields.join(" "), n);
    }
    counts
}

/// Compteur's ψ₁₀ of each run against the first: the positions its top-10 moved, min and max.
fn psi10(runs: &[BTreeMap<String, u64>]) -> (usize, usize) {
    let rank = |run: &BTreeMap<String, u64>| -> Vec<String> {
        let mut names: Vec<(&String, &u64)> = run.iter().filter(|(_, n)| **n > 0).collect();
        names.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        names.into_iter().take(10).map(|(n, _)| n.clone()).collect()
    };
    let first = rank(&runs[0]);
    let moved: Vec<usize> = runs[1..]
        .iter()
        .map(|run| {
            let ranked = rank(run);
            first
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let j = ranked.iter().position(|n| n == name).unwrap_or(10);
                    i.abs_diff(j)
                })
                .sum()
        })
        .collect();
    (
        moved.iter().copied().min().unwrap_or(0),
        moved.iter().copied().max().unwrap_or(0),
    )
}

fn mean_cv(values: &[f64]) -> (f64, f64) {
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len().max(1) as f64;
    (mean, if mean > 0.0 { var.sqrt() / mean } else { 0.0 })
}
