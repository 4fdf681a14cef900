//! `cargo xtask bench`: what profiling costs, measured end to end against real BPF, plus the
//! criterion benchmark of report building.
//!
//! * slowdown: a fixed CPU-bound loop (`tests/fixtures/busyloop.c`) run alternately without and
//!   with `vmscope record -- ...` at 1400 Hz; the ratio of its own CPU times (median of pairs).
//!   The BPF program runs in the interrupt on the target's CPU, so its cost is in there.
//! * daemon CPU time per 1000 samples, and the daemon's peak RSS (VmHWM), over those runs.
//! * time to build a report from 1,000,000 samples: `cargo bench -p vmscoped --bench report`.
//! * the demo JIT VM's slowdown while it publishes its code map to the daemon (no session):
//!   `jitvm fib` (a few events at start) and `jitvm compact` (thousands of events a second),
//!   alternately with `--publish none` and `--publish grpc`, iterations per second.
//! * code maps: a 1,000,000-line perf map, lookups in 1,000,000 entries, 100,000 jitdump loads
//!   and moves: `cargo bench -p vmscoped --bench codemap`.
//!
//! Ratios come from one run on one machine; these machines are shared, so read them as such.

use std::process::Command;

use anyhow::{Context, bail};

use crate::{
    cargo, demo,
    demo::{Built, Daemon},
    root, run_checked,
};

const PAIRS: usize = 5;
/// Millions of steps per busyloop run (about 1.5 s here).
const WORK: &str = "1500";

fn cpu_seconds(stdout: &[u8]) -> anyhow::Result<f64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .find_map(|l| l.strip_prefix("cpu_seconds="))
        .context("busyloop printed no cpu_seconds")?
        .trim()
        .parse()
        .context("bad cpu_seconds")
}

fn proc_field(pid: u32, file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn daemon_cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("bad stat")?
        .1
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15; after "pid (comm)" they are at 11 and 12.
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs the benchmarks and prints the table.
pub fn run() -> anyhow::Result<()> {
    let built: Built = demo::build()?;
    let busyloop = built.dir.join("busyloop");
    run_checked(
        Command::new("gcc")
            .args(["-O1", "-o"])
            .arg(&busyloop)
            .arg(root().join("tests/fixtures/busyloop.c")),
    )?;
    let daemon = Daemon::start_or_reuse(&built, false)?;
    let pid = daemon
        .pid()
        .context("the benchmark needs a daemon of its own")?;
    let ticks_per_second = 100.0;

    let cpu_before = daemon_cpu_ticks(pid)?;
    let mut ratios = Vec::new();
    let (mut plain_times, mut profiled_times) = (Vec::new(), Vec::new());
    let mut samples = 0u64;
    for pair in 0..PAIRS {
        let plain = Command::new(&busyloop).arg(WORK).output()?;
        let json = built.dir.join("bench-report.json");
        let profiled = Command::new(&built.cli)
            .arg("--socket")
            .arg(&daemon.socket)
            .args(["record", "--format", "json", "-o"])
            .arg(&json)
            .arg("--")
            .arg(&busyloop)
            .arg(WORK)
            .output()?;
        if !profiled.status.success() {
            bail!(
                "vmscope record failed: {}",
                String::from_utf8_lossy(&profiled.stderr)
            );
        }
        let plain = cpu_seconds(&plain.stdout)?;
        let with = cpu_seconds(&profiled.stdout)?;
        let text = std::fs::read_to_string(&json).context("no JSON report")?;
        let report: serde_json_lite::Value = serde_json_lite::parse(&text)?;
        samples += report.total_samples;
        println!(
            "bench: pair {}: {plain:.3} s alone, {with:.3} s profiled, {} samples",
            pair + 1,
            report.total_samples
        );
        plain_times.push(plain);
        profiled_times.push(with);
        ratios.push(with / plain);
    }
    let cpu_after = daemon_cpu_ticks(pid)?;
    let daemon_cpu = (cpu_after - cpu_before) as f64 / ticks_per_second;
    let peak_rss_kib = proc_field(pid, "status", "VmHWM:").unwrap_or(0);

    let mut publishing = Vec::new();
    for workload in ["fib", "compact"] {
        let mut ratios = Vec::new();
        for _ in 0..PAIRS {
            let rate = |publish: &str| -> anyhow::Result<f64> {
                let out = Command::new(&built.jitvm)
                    .args([workload, "--seconds", "2", "--publish", publish])
                    .env("VMSCOPE_SOCKET", &daemon.socket)
                    .output()?;
                let text = String::from_utf8_lossy(&out.stdout);
                text.split_whitespace()
                    .find_map(|w| w.strip_prefix("iter_per_sec="))
                    .context("jitvm printed no iter_per_sec")?
                    .parse()
                    .context("bad iter_per_sec")
            };
            let (alone, published) = (rate("none")?, rate("grpc")?);
            ratios.push(alone / published);
        }
        publishing.push((workload, median(ratios)));
    }
    drop(daemon);

    println!();
    println!("| measure                                        | value |");
    println!("|------------------------------------------------|-------|");
    println!(
        "| busyloop CPU time alone (median of {PAIRS})             | {:.3} s |",
        median(plain_times)
    );
    println!(
        "| busyloop CPU time profiled at 1400 Hz (median)  | {:.3} s |",
        median(profiled_times)
    );
    println!(
        "| slowdown at 1400 Hz (median of paired ratios)   | {:.4}x |",
        median(ratios)
    );
    println!(
        "| daemon CPU per 1000 samples                     | {:.2} ms ({daemon_cpu:.2} s for {samples} samples, incl. symbolisation and gRPC) |",
        1000.0 * 1000.0 * daemon_cpu / samples.max(1) as f64
    );
    println!(
        "| daemon peak RSS (VmHWM)                         | {:.1} MiB |",
        peak_rss_kib as f64 / 1024.0
    );
    for (workload, ratio) in publishing {
        println!("| jitvm {workload:<7} slowdown publishing over gRPC (median) | {ratio:.4}x |");
    }
    println!();
    println!("bench: code maps (criterion):");
    run_checked(cargo().args([
        "bench", "-p", "vmscoped", "--bench", "codemap", "--", "--noplot",
    ]))?;
    println!();
    println!("bench: report building from 1,000,000 samples (criterion):");
    run_checked(cargo().args([
        "bench", "-p", "vmscoped", "--bench", "report", "--", "--noplot",
    ]))
}

/// Just enough JSON reading for one number, so that xtask stays free of serde.
mod serde_json_lite {
    use anyhow::Context;

    pub struct Value {
        pub total_samples: u64,
    }

    pub fn parse(text: &str) -> anyhow::Result<Value> {
        let after = text
            .split_once("\"total_samples\":")
            .context("no total_samples in the report")?
            .1;
        let digits: String = after
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        Ok(Value {
            total_samples: digits.parse().context("bad total_samples")?,
        })
    }
}
