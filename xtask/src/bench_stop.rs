//! `cargo xtask bench --stop`: how long after its duration a system-wide session is reported,
//! the first of a fresh daemon, on a quiet host and on a busy one.
//!
//! Each run starts a fresh daemon, records `vmscope record --system --duration 5`, and takes
//! the wall time of the command and the daemon's CPU time over it. The busy host runs 60
//! programs of three runtimes (CPython, perl, node), each busy 2 ms in 20 (about six CPUs of
//! demand on two): the load under which the first such session once took 19.4 s.
//!
//! `--baseline PATH` runs the same against another `vmscoped` (an earlier build) in the same
//! run.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::{bench::daemon_cpu_ns, demo};

/// Runs per daemon and host.
const RUNS: usize = 3;

/// Seconds each session records.
const SECONDS: &str = "5";

/// Runs the table.
pub fn run(baseline: Option<PathBuf>) -> anyhow::Result<()> {
    let built = demo::build()?;
    let mut daemons = Vec::new();
    if let Some(old) = baseline {
        daemons.push(("baseline".to_owned(), old));
    }
    daemons.push(("this build".to_owned(), built.daemon.clone()));
    let mut rows = Vec::new();
    for busy in [false, true] {
        let mut load = if busy { busy_programs()? } else { Vec::new() };
        if busy {
            std::thread::sleep(Duration::from_secs(3));
        }
        for (name, daemon) in &daemons {
            for run in 1..=RUNS {
                let (wall, cpu) = session(&built.cli, daemon, &built.dir)?;
                println!(
                    "bench: stop: {name}, {} host, run {run}: {wall:.2} s wall, daemon CPU {cpu:.2} s",
                    if busy { "busy" } else { "quiet" }
                );
                rows.push((busy, name.clone(), wall, cpu));
            }
        }
        for program in &mut load {
            let _ = program.kill();
            let _ = program.wait();
        }
    }
    println!();
    println!(
        "| first system-wide session, --duration {SECONDS} | host | wall (median of {RUNS}) | daemon CPU |"
    );
    println!("|---|---|---|---|");
    for busy in [false, true] {
        for (name, _) in &daemons {
            let mut walls: Vec<f64> = Vec::new();
            let mut cpus: Vec<f64> = Vec::new();
            for (b, n, wall, cpu) in &rows {
                if *b == busy && n == name {
                    walls.push(*wall);
                    cpus.push(*cpu);
                }
            }
            walls.sort_by(f64::total_cmp);
            cpus.sort_by(f64::total_cmp);
            println!(
                "| {name} | {} | {:.2} s | {:.2} s |",
                if busy { "busy (60 programs)" } else { "quiet" },
                walls[walls.len() / 2],
                cpus[cpus.len() / 2]
            );
        }
    }
    Ok(())
}

/// A fresh `daemon`, one system-wide session: the command's wall time, the daemon's CPU time.
fn session(cli: &Path, daemon: &Path, dir: &Path) -> anyhow::Result<(f64, f64)> {
    let socket = dir.join("stop-bench.sock");
    let _ = std::fs::remove_file(&socket);
    let mut child = Command::new(daemon)
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", daemon.display()))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if Instant::now() > deadline || child.try_wait()?.is_some() {
            bail!("{} did not serve", daemon.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = daemon_cpu_ns(child.id())?;
    let started = Instant::now();
    let status = Command::new(cli)
        .arg("--socket")
        .arg(&socket)
        .args([
            "record",
            "--system",
            "--duration",
            SECONDS,
            "-o",
            "/dev/null",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    let wall = started.elapsed().as_secs_f64();
    let cpu = daemon_cpu_ns(child.id())?.saturating_sub(before) as f64 / 1e9;
    // SAFETY: kill only sends a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait()?;
    if !status.success() {
        bail!(
            "vmscope record --system failed against {}",
            daemon.display()
        );
    }
    Ok((wall, cpu))
}

/// Sixty programs of three runtimes, each busy 2 ms in 20.
fn busy_programs() -> anyhow::Result<Vec<Child>> {
    let spin_py = "import time\nwhile True:\n    t = time.time()\n    while time.time() - t < 0.002: pass\n    time.sleep(0.018)";
    let spin_pl = "use Time::HiRes qw(time sleep); while (1) { my $t = time; while (time - $t < 0.002) {} sleep(0.018) }";
    let spin_js = "function f() { const t = Date.now(); while (Date.now() - t < 2) {} setTimeout(f, 18) } f()";
    let mut programs = Vec::new();
    for i in 0..60 {
        let (program, flag, code) = match i % 3 {
            0 => ("python3", "-c", spin_py),
            1 => ("perl", "-e", spin_pl),
            _ => ("node", "-e", spin_js),
        };
        programs.push(
            Command::new(program)
                .args([flag, code])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("cannot start {program}"))?,
        );
    }
    Ok(programs)
}
