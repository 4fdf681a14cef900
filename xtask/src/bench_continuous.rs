//! `cargo xtask bench --continuous [MINUTES] [--compile-burst]`: what continuous profiling costs
//! steady state, on this machine.
//!
//! The workload is a host as the issue describes one: about 100 idle processes (`sleep`) and
//! two CPU-bound ones (`stackloop`, 34-frame call chains, until killed), with the release
//! daemon started with `--continuous` at its defaults (19 Hz, 10 s windows, 32 MiB), exporting
//! every window to an OTLP receiver (tests/clients/otlp_receiver.py, from `cargo xtask setup`'s
//! grpcio virtualenv). Every 30 s the table gives the daemon's CPU time over the last interval
//! (in % of one CPU, all its threads, exited ones included), its RSS, what it keeps (windows
//! stored, bytes kept and dropped) and what it exported. At the end, the merged profile of
//! every kept window gives the samples and the lost samples, and the daemon's peak RSS; the
//! receiver's count of requests checks the exporter's. With `--compile-burst`, a release build
//! of vmscope-parse runs after the first minute, as a compiler passing by: its rows show what
//! its binaries cost the daemon, and are left out of the steady state.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context;

use crate::{
    bench::{json_u64, proc_field, stackloop},
    demo::{self, Daemon},
};

/// Idle processes beside the two busy ones.
const IDLE: usize = 100;

/// Time between two rows of the table.
const INTERVAL: Duration = Duration::from_secs(30);

/// Kills its children when dropped.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs the workload for `minutes`; with `compile_burst`, a compiler passes by after the first
/// minute.
pub fn run(minutes: u64, compile_burst: bool) -> anyhow::Result<()> {
    let built = demo::build()?;
    let stackloop = stackloop(&built)?;
    let mut children = Children(Vec::new());
    let (port, received) = start_receiver(&built.dir, &mut children)?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let daemon = Daemon::start_binary_with(
        &built.daemon,
        &built.dir,
        "continuous",
        &["--continuous", "--otlp-endpoint", &endpoint],
    )?;
    let pid = daemon.pid().context("a daemon of our own")?;
    for _ in 0..IDLE {
        children.0.push(
            Command::new("sleep")
                .arg("100000")
                .spawn()
                .context("cannot start sleep")?,
        );
    }
    for _ in 0..2 {
        children.0.push(
            Command::new(&stackloop)
                .args(["0", "32"])
                .stdout(Stdio::null())
                .spawn()
                .context("cannot start stackloop")?,
        );
    }
    let info = |key: &str| -> anyhow::Result<u64> {
        let out = Command::new(&built.cli)
            .args(["info", "--json"])
            .env("VMSCOPE_SOCKET", &daemon.socket)
            .output()?;
        Ok(json_u64(&String::from_utf8_lossy(&out.stdout), key).unwrap_or(0))
    };
    let ticks = crate::bench::clock_ticks() as f64;
    let cpu = || -> f64 { process_cpu_ticks(pid) as f64 / ticks };
    println!(
        "bench: continuous profiling for {minutes} min: {IDLE} idle processes, 2 busy ones \
         (stackloop), vmscoped --continuous at its defaults, exporting to {endpoint}"
    );
    println!(
        "| minute | daemon CPU (% of a CPU) | RSS (MiB) | windows stored | kept (KiB) | dropped \
         (KiB) | exported (KiB) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let scratch = built.dir.join("continuous-burst-target");
    let mut burst: Option<Child> = None;
    let mut burst_done = !compile_burst;
    let started = Instant::now();
    let (mut last_cpu, mut last_at) = (cpu(), Instant::now());
    let mut steady_cpu = Vec::new();
    while started.elapsed() < Duration::from_secs(minutes * 60) {
        std::thread::sleep(INTERVAL);
        let (now_cpu, now) = (cpu(), Instant::now());
        let percent = 100.0 * (now_cpu - last_cpu) / now.duration_since(last_at).as_secs_f64();
        (last_cpu, last_at) = (now_cpu, now);
        // A burst that ended frees what it cost: its rows are not the steady state.
        let bursting = match burst.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                burst = None;
                println!("bench: the compiler is gone");
                true
            }
            None => false,
        };
        // The first minute holds the start: symbols of every binary on the host parsed once.
        if started.elapsed() > Duration::from_secs(60) && !bursting {
            steady_cpu.push(percent);
        }
        if !burst_done && started.elapsed() > Duration::from_secs(60) {
            let _ = std::fs::remove_dir_all(&scratch);
            println!("bench: a compiler passes by (cargo build --release -p vmscope-parse)");
            burst = Some(
                Command::new("cargo")
                    .args(["build", "-q", "--release", "-p", "vmscope-parse"])
                    .env("CARGO_TARGET_DIR", &scratch)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("cannot start cargo")?,
            );
            burst_done = true;
        }
        println!(
            "| {:.1} | {percent:.2} | {:.1} | {} | {} | {} | {} |",
            started.elapsed().as_secs_f64() / 60.0,
            proc_field(pid, "status", "VmRSS:").unwrap_or(0) as f64 / 1024.0,
            info("continuous_windows_stored")?,
            info("continuous_bytes")? / 1024,
            info("continuous_bytes_dropped")? / 1024,
            info("otlp_bytes_sent")? / 1024,
        );
    }
    let sent = info("otlp_bytes_sent")?;
    let per_minute = |bytes: u64| bytes as f64 / 1024.0 / started.elapsed().as_secs_f64() * 60.0;
    let received = std::fs::read_to_string(&received).unwrap_or_default();
    let gzipped: u64 = received
        .lines()
        .filter_map(|line| json_u64(line.rsplit_once("\"bytes\"")?.1, "gzipped"))
        .sum();
    println!(
        "bench: exported {:.1} KiB a minute encoded, {:.1} KiB gzipped (as the receiver \
         compressed them), in {} requests, {} failed, {} windows dropped; the receiver took {}",
        per_minute(sent),
        per_minute(gzipped),
        info("otlp_exports_sent")?,
        info("otlp_exports_failed")?,
        info("otlp_windows_dropped")?,
        received.lines().count(),
    );
    let out = Command::new(&built.cli)
        .args(["continuous", "--format", "json"])
        .env("VMSCOPE_SOCKET", &daemon.socket)
        .output()?;
    let json = String::from_utf8_lossy(&out.stdout);
    let mean = steady_cpu.iter().sum::<f64>() / steady_cpu.len().max(1) as f64;
    println!(
        "bench: steady state (after the first minute): {mean:.2}% of one CPU on average; peak \
         RSS (VmHWM) {:.1} MiB; kept windows: {} samples, {} lost, over {} s",
        proc_field(pid, "status", "VmHWM:").unwrap_or(0) as f64 / 1024.0,
        json_u64(&json, "total_samples").context("vmscope continuous --format json")?,
        json_u64(&json, "lost_samples").unwrap_or(0),
        json_u64(&json, "duration_seconds").unwrap_or(0),
    );
    drop(children);
    if let Some(mut burst) = burst {
        let _ = burst.kill();
        let _ = burst.wait();
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// Starts the OTLP receiver of the tests on a port of the kernel's choice: its port, and the
/// file it writes a line to per request.
fn start_receiver(dir: &Path, children: &mut Children) -> anyhow::Result<(u16, PathBuf)> {
    let python = crate::setup::grpcio_venv()?.join("bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients/otlp_receiver.py");
    let port_file = dir.join("otlp-port");
    let received = dir.join("otlp-received.jsonl");
    let _ = std::fs::remove_file(&port_file);
    let _ = std::fs::remove_file(&received);
    children.0.push(
        Command::new(&python)
            .arg(&script)
            .arg(&port_file)
            .arg(&received)
            // Only the busy processes' samples written out in full: the receiver's own cost
            // stays small beside the daemon's.
            .args(["--keep", "stackloop"])
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| {
                format!("cannot start {} (run cargo xtask setup)", python.display())
            })?,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(&port_file) {
            return Ok((text.trim().parse()?, received));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the OTLP receiver did not start within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `utime + stime` of a process, in clock ticks: its exited threads' time included.
fn process_cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some((_, after)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After ")", field 3 is the state: utime is field 14, stime 15.
    let field = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(14) + field(15)
}
