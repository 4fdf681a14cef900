//! `cargo xtask bench`: what profiling costs, measured end to end against real BPF, plus the
//! criterion benchmarks of report building and code maps.
//!
//! * slowdown: a fixed CPU-bound loop at the bottom of call chains up to 34 frames deep
//!   (`tests/fixtures/stackloop.c`, built with frame pointers) run in rounds: alone, under
//!   `vmscope record --call-graph none`, under `--call-graph fp` and `dwarf`, and under
//!   `perf record --call-graph fp|dwarf -F 1400` when perf is installed; the ratios of its own
//!   CPU times to the round's run alone (medians). The BPF program runs in the interrupt on the target's CPU, so
//!   its cost, stack walks included, is in there.
//! * daemon CPU time per 1000 samples in each vmscope mode (dwarf: unwinding included), and the
//!   daemon's peak RSS (VmHWM), over those runs.
//! * `cargo xtask bench --soak SECONDS`: one session of SECONDS on the same workload, printing
//!   the daemon's RSS every tenth of it: memory follows distinct stacks, so it must be flat
//!   once they have all been seen.
//! * time to build a report from 1,000,000 samples: `cargo bench -p vmscoped --bench report`.
//! * the demo JIT VM's slowdown while it publishes its code map to the daemon (no session):
//!   `jitvm fib` (a few events at start) and `jitvm compact` (thousands of events a second),
//!   alternately with `--publish none` and `--publish grpc`, iterations per second.
//! * the kernel counters' cost to a target (context switches and minor faults are what they
//!   count): `cargo bench -p vmscoped --bench kernel_counters`.
//! * reading a JVM's performance data (hsperfdata), as sessions do at their start and stop
//!   (and every 100 ms for the heap's levels):
//!   `cargo bench -p vmscoped --bench hsperfdata`.
//! * tagging samples with the VM's intervals under way at their time: 1,000,000 samples
//!   against 10,000 intervals, the lookup alone and counted in a session with and without it:
//!   `cargo bench -p vmscoped --bench intervals`.
//! * code maps: a 1,000,000-line perf map, lookups in 1,000,000 entries, 100,000 jitdump loads
//!   and moves: `cargo bench -p vmscoped --bench codemap`.
//!
//! Ratios come from one run on one machine; these machines are shared, so read them as such.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, bail};

use crate::{
    cargo, demo,
    demo::{Built, Daemon},
    root, run_checked,
};

const ROUNDS: usize = 5;
/// Millions of steps per stackloop run (about 1.4 s here).
pub(crate) const WORK: &str = "1500";
/// Depth of the call chains of stackloop: stacks of up to DEPTH + 3 frames.
pub(crate) const DEPTH: &str = "32";

fn cpu_seconds(stdout: &[u8]) -> anyhow::Result<f64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .find_map(|l| l.strip_prefix("cpu_seconds="))
        .context("stackloop printed no cpu_seconds")?
        .trim()
        .parse()
        .context("bad cpu_seconds")
}

pub(crate) fn proc_field(pid: u32, file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// CPU time of all of the daemon's threads, in nanoseconds: the first field of each thread's
/// `schedstat` (the scheduler's own accounting, where `stat`'s utime and stime count 10 ms
/// ticks, too coarse for the 0.1 s a mode costs the daemon here).
/// Clock ticks per second, the unit of `/proc/PID/stat`'s CPU times.
pub(crate) fn clock_ticks() -> u64 {
    // SAFETY: sysconf reads a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).unwrap_or(100).max(1)
}

pub(crate) fn daemon_cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        // A thread may end between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(task?.path().join("schedstat")) else {
            continue;
        };
        total += stat
            .split_whitespace()
            .next()
            .context("empty schedstat")?
            .parse::<u64>()?;
    }
    Ok(total)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// How the workload runs in one measurement.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Alone,
    /// `vmscope record --call-graph MODE`.
    Vmscope(&'static str),
    /// `perf record --call-graph MODE -F 1400`.
    Perf(&'static str),
}

impl Mode {
    fn label(self) -> String {
        match self {
            Mode::Alone => "alone".to_owned(),
            Mode::Vmscope(call_graph) => format!("vmscope --call-graph {call_graph}"),
            Mode::Perf(call_graph) => format!("perf record --call-graph {call_graph}"),
        }
    }
}

/// Runs stackloop once in `mode`: its CPU seconds, and the samples vmscope took.
fn run_once(
    mode: Mode,
    built: &Built,
    daemon: &Daemon,
    stackloop: &Path,
) -> anyhow::Result<(f64, u64)> {
    let json = built.dir.join("bench-report.json");
    let output = match mode {
        Mode::Alone => Command::new(stackloop).args([WORK, DEPTH]).output()?,
        Mode::Vmscope(call_graph) => Command::new(&built.cli)
            .arg("--socket")
            .arg(&daemon.socket)
            .args([
                "record",
                "--call-graph",
                call_graph,
                "--format",
                "json",
                "-o",
            ])
            .arg(&json)
            .arg("--")
            .arg(stackloop)
            .args([WORK, DEPTH])
            .output()?,
        Mode::Perf(call_graph) => Command::new("perf")
            .args([
                "record",
                "-q",
                "--call-graph",
                call_graph,
                "-F",
                "1400",
                "-o",
            ])
            .arg(built.dir.join("bench-perf.data"))
            .arg("--")
            .arg(stackloop)
            .args([WORK, DEPTH])
            .output()?,
    };
    if !output.status.success() {
        bail!(
            "{} failed: {}",
            mode.label(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let samples = match mode {
        Mode::Vmscope(_) => {
            let text = std::fs::read_to_string(&json).context("no JSON report")?;
            serde_json_lite::parse(&text)?.total_samples
        }
        _ => 0,
    };
    Ok((cpu_seconds(&output.stdout)?, samples))
}

/// Builds `stackloop` (with frame pointers) into the build's directory.
pub(crate) fn stackloop(built: &Built) -> anyhow::Result<PathBuf> {
    let stackloop = built.dir.join("stackloop");
    run_checked(
        Command::new("gcc")
            .args(["-O1", "-fno-omit-frame-pointer", "-o"])
            .arg(&stackloop)
            .arg(root().join("tests/fixtures/stackloop.c")),
    )?;
    Ok(stackloop)
}

/// The `total_samples` of a JSON report.
pub(crate) fn total_samples(json: &str) -> anyhow::Result<u64> {
    Ok(serde_json_lite::parse(json)?.total_samples)
}

/// The first whole number under `"key"` in a JSON text, wherever it is; `None` when absent or
/// not a whole number.
pub(crate) fn json_u64(json: &str, key: &str) -> Option<u64> {
    let after = json.split_once(&format!("\"{key}\""))?.1;
    let after = after.trim_start().strip_prefix(':')?.trim_start();
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Runs the benchmarks and prints the table; with `soak_seconds`, the soak test instead.
pub fn run(soak_seconds: Option<u64>) -> anyhow::Result<()> {
    let built: Built = demo::build()?;
    let stackloop = stackloop(&built)?;
    let daemon = Daemon::start_or_reuse(&built, false)?;
    let pid = daemon
        .pid()
        .context("the benchmark needs a daemon of its own")?;
    if let Some(seconds) = soak_seconds {
        return soak(&built, &daemon, pid, &stackloop, seconds);
    }

    let perf = Command::new("perf")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let mut modes = vec![
        Mode::Vmscope("none"),
        Mode::Vmscope("fp"),
        Mode::Vmscope("dwarf"),
    ];
    if perf {
        modes.extend([Mode::Perf("fp"), Mode::Perf("dwarf")]);
    } else {
        println!("bench: perf is not installed: no comparison with perf record");
    }
    let mut alone_times = Vec::new();
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    // Per mode: the daemon's CPU time (ns) and the samples it took.
    let mut daemon_load = vec![(0u64, 0u64); modes.len()];
    for round in 0..ROUNDS {
        let (alone, _) = run_once(Mode::Alone, &built, &daemon, &stackloop)?;
        alone_times.push(alone);
        let mut line = format!("bench: round {}: {alone:.3} s alone", round + 1);
        for (i, &mode) in modes.iter().enumerate() {
            let before = daemon_cpu_ns(pid)?;
            let (with, n) = run_once(mode, &built, &daemon, &stackloop)?;
            daemon_load[i].0 += daemon_cpu_ns(pid)?.saturating_sub(before);
            daemon_load[i].1 += n;
            ratios[i].push(with / alone);
            line += &format!(", {with:.3} s {}", mode.label());
        }
        println!("{line}");
    }
    let peak_rss_kib = proc_field(pid, "status", "VmHWM:").unwrap_or(0);

    let mut publishing = Vec::new();
    for workload in ["fib", "compact"] {
        let mut ratios = Vec::new();
        for _ in 0..ROUNDS {
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
        "| stackloop CPU time alone (median of {ROUNDS})            | {:.3} s |",
        median(alone_times)
    );
    for (mode, ratios) in modes.iter().zip(ratios) {
        println!(
            "| slowdown under {:<35} | {:.4}x |",
            mode.label(),
            median(ratios)
        );
    }
    for (mode, (nanos, samples)) in modes.iter().zip(&daemon_load) {
        if let Mode::Vmscope(call_graph) = mode {
            let seconds = *nanos as f64 / 1e9;
            println!(
                "| daemon CPU per 1000 samples, {call_graph:<5}             | {:.2} ms ({seconds:.3} s for {samples} samples, incl. symbolisation and gRPC) |",
                1000.0 * 1000.0 * seconds / (*samples).max(1) as f64
            );
        }
    }
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
    println!("bench: the kernel counters' cost to the target:");
    run_checked(cargo().args(["bench", "-p", "vmscoped", "--bench", "kernel_counters"]))?;
    run_checked(cargo().args(["bench", "-p", "vmscoped", "--bench", "hsperfdata"]))?;
    println!();
    println!("bench: tagging 1,000,000 samples with 10,000 VM intervals (criterion):");
    run_checked(cargo().args([
        "bench",
        "-p",
        "vmscoped",
        "--bench",
        "intervals",
        "--",
        "--noplot",
    ]))?;
    println!();
    println!("bench: report building from 1,000,000 samples (criterion):");
    run_checked(cargo().args([
        "bench", "-p", "vmscoped", "--bench", "report", "--", "--noplot",
    ]))
}

/// One session of `seconds` on stackloop, printing the daemon's RSS every tenth of it.
fn soak(
    built: &Built,
    daemon: &Daemon,
    daemon_pid: u32,
    stackloop: &Path,
    seconds: u64,
) -> anyhow::Result<()> {
    let mut target = Command::new(stackloop)
        .args(["0", DEPTH])
        .stdout(Stdio::null())
        .spawn()?;
    let json = built.dir.join("soak-report.json");
    let mut record = Command::new(&built.cli)
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["record", "--call-graph", "fp", "--duration"])
        .arg(seconds.to_string())
        .args(["--format", "json", "-o"])
        .arg(&json)
        .arg("--pid")
        .arg(target.id().to_string())
        .spawn()?;
    println!("| seconds | daemon RSS (MiB) |");
    println!("|---------|------------------|");
    let step = Duration::from_secs(seconds).div_f64(10.0);
    for tenth in 0..=10 {
        let rss = proc_field(daemon_pid, "status", "VmRSS:").unwrap_or(0);
        println!(
            "| {:7.0} | {:16.1} |",
            step.as_secs_f64() * tenth as f64,
            rss as f64 / 1024.0
        );
        if tenth < 10 {
            std::thread::sleep(step);
        }
    }
    let status = record.wait()?;
    let _ = target.kill();
    let _ = target.wait();
    if !status.success() {
        bail!("vmscope record failed");
    }
    let text = std::fs::read_to_string(&json).context("no soak report")?;
    println!(
        "bench: soak: {} samples; peak RSS (VmHWM) {:.1} MiB",
        serde_json_lite::parse(&text)?.total_samples,
        proc_field(daemon_pid, "status", "VmHWM:").unwrap_or(0) as f64 / 1024.0
    );
    Ok(())
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
