//! `cargo xtask bench --exit-cost`: what the exit tracepoint costs each process exit.
//!
//! xtask itself forks 10,000 children that exit at once, and reaps each before the next, timed
//! in rounds:
//!
//! * with no daemon;
//! * with the daemon loaded and idle: its programs are attached, so every exit runs
//!   `vmscope_exit`, which looks the exiting process up in `TRACKED`, finds nothing and returns;
//! * with a session on an idle process: the same, `TRACKED` holding an entry;
//! * with a system-wide session: every leader's exit is also sent to the daemon as an event (and
//!   the loop is sampled at 1400 Hz, which costs what sampling costs).
//!
//! Each round runs the modes in turn, so that a change in the shared machine's load falls on
//! all of them; the table shows medians per exit, and their ratio to the run with no daemon: the
//! wall time of the loop, and the children's CPU time (their exit path, where the tracepoint
//! runs, is theirs). Both move with the shared machine's load far more than a tracepoint costs,
//! so the program's own cost comes from the kernel's BPF statistics (`kernel.bpf_stats_enabled`,
//! set for the run and restored after): `run_time_ns` and `run_cnt` of the daemon's exit
//! program, read from its file descriptor's fdinfo. Sessions also open perf events at 1400 Hz
//! on every CPU, whose sampler runs on every tick (and samples the loop system-wide): that is
//! the cost of sampling, not of exits.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::demo::{self, Built, Daemon};

const ROUNDS: usize = 5;
const EXITS: u32 = 10_000;
const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";
/// `BPF_PROG_TYPE_RAW_TRACEPOINT` in fdinfo's `prog_type`.
const RAW_TRACEPOINT: u64 = 17;

/// How the loop runs.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    NoDaemon,
    Idle,
    Session,
    SystemWide,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::NoDaemon, Mode::Idle, Mode::Session, Mode::SystemWide];

    fn label(self) -> &'static str {
        match self {
            Mode::NoDaemon => "no daemon",
            Mode::Idle => "daemon loaded, no session",
            Mode::Session => "session on another process",
            Mode::SystemWide => "system-wide session",
        }
    }
}

/// CPU time of the reaped children so far (user and system), in microseconds.
fn children_cpu_us() -> f64 {
    // SAFETY: getrusage writes into the struct we own.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// `(run_time_ns, run_cnt)` of every BPF program of type `prog_type` (fdinfo's `prog_type`)
/// that `pid` holds, by file descriptor, from fdinfo (the counts stay 0 unless
/// `kernel.bpf_stats_enabled` is set).
pub(crate) fn program_stats(pid: u32, prog_type: u64) -> anyhow::Result<Vec<(String, u64, u64)>> {
    let mut stats = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let fd = fd?;
        let is_prog = std::fs::read_link(fd.path())
            .is_ok_and(|target| target.to_string_lossy() == "anon_inode:bpf-prog");
        if !is_prog {
            continue;
        }
        let name = fd.file_name().to_string_lossy().into_owned();
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{name}"))?;
        let field = |key: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if field("prog_type:") == Some(prog_type) {
            stats.push((
                name,
                field("run_time_ns:").unwrap_or(0),
                field("run_cnt:").unwrap_or(0),
            ));
        }
    }
    Ok(stats)
}

/// The run time and count that the raw tracepoint program that ran most between `before` and
/// `after` gained: the exit program, which runs at every exit (the exec program at none here).
fn exit_program_runs(before: &[(String, u64, u64)], after: &[(String, u64, u64)]) -> (u64, u64) {
    after
        .iter()
        .filter_map(|(fd, time, count)| {
            let (_, time0, count0) = before.iter().find(|(fd0, ..)| fd0 == fd)?;
            Some((time - time0, count - count0))
        })
        .max_by_key(|&(_, count)| count)
        .unwrap_or((0, 0))
}

/// Turns the kernel's BPF run-time statistics on, and back to what they were when dropped.
pub(crate) struct BpfStats(String);

impl BpfStats {
    pub(crate) fn enable() -> anyhow::Result<BpfStats> {
        let before = std::fs::read_to_string(BPF_STATS).context("cannot read the BPF stats")?;
        std::fs::write(BPF_STATS, "1").context("cannot enable the BPF stats")?;
        Ok(BpfStats(before.trim().to_owned()))
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(BPF_STATS, &self.0);
    }
}

/// Forks `n` children that exit at once, reaping each: the time it took.
fn fork_exit_wait(n: u32) -> anyhow::Result<Duration> {
    let start = Instant::now();
    for _ in 0..n {
        // SAFETY: the child calls only _exit, which is async-signal-safe.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child, writing into a local.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
            bail!("waitpid: {}", std::io::Error::last_os_error());
        }
    }
    Ok(start.elapsed())
}

/// A `vmscope record` running in the background until dropped (SIGINT, then waited for).
pub(crate) struct Recording(Child);

impl Recording {
    pub(crate) fn start(
        built: &Built,
        daemon: &Daemon,
        target: &[&str],
    ) -> anyhow::Result<Recording> {
        let mut child = Command::new(&built.cli)
            .arg("--socket")
            .arg(&daemon.socket)
            .arg("record")
            .args(target)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot run vmscope")?;
        let mut stderr = BufReader::new(child.stderr.take().context("piped stderr")?);
        let mut line = String::new();
        while !line.contains(": recording ") {
            line.clear();
            if stderr.read_line(&mut line)? == 0 {
                bail!("vmscope record {target:?} did not start");
            }
        }
        // Drain what else it says, so that it never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Ok(Recording(child))
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        // SAFETY: kill only signals our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let _ = self.0.wait();
    }
}

/// The median of `values`; NaN for none.
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One mode's measurements, per exit, over the rounds.
#[derive(Clone, Default)]
struct Times {
    wall_us: Vec<f64>,
    children_cpu_us: Vec<f64>,
    program_ns: Vec<f64>,
}

/// Runs the benchmark and prints the table.
pub fn run() -> anyhow::Result<()> {
    let built = demo::build()?;
    let _stats = BpfStats::enable()?;
    // An idle process for the session to track.
    let mut idle = Command::new("sleep").arg("3600").spawn()?;
    let idle_pid = idle.id().to_string();
    let mut times = vec![Times::default(); Mode::ALL.len()];
    // One warm-up pass, not counted: page cache, the pid allocator, the daemon's binary.
    fork_exit_wait(EXITS / 10)?;
    for round in 1..=ROUNDS {
        for (i, mode) in Mode::ALL.into_iter().enumerate() {
            let daemon = match mode {
                Mode::NoDaemon => None,
                _ => Some(Daemon::start_or_reuse(&built, false)?),
            };
            let recording = match (mode, &daemon) {
                (Mode::Session, Some(d)) => {
                    Some(Recording::start(&built, d, &["--pid", &idle_pid])?)
                }
                (Mode::SystemWide, Some(d)) => Some(Recording::start(&built, d, &["--system"])?),
                _ => None,
            };
            let daemon_pid = daemon.as_ref().and_then(Daemon::pid);
            let programs = daemon_pid
                .map(|pid| program_stats(pid, RAW_TRACEPOINT))
                .transpose()?;
            let cpu = children_cpu_us();
            let took = fork_exit_wait(EXITS)?;
            let cpu = children_cpu_us() - cpu;
            if let (Some(pid), Some(before)) = (daemon_pid, &programs) {
                let (run_ns, runs) =
                    exit_program_runs(before, &program_stats(pid, RAW_TRACEPOINT)?);
                if runs < u64::from(EXITS) {
                    bail!("the exit program ran {runs} times for {EXITS} exits");
                }
                times[i].program_ns.push(run_ns as f64 / runs as f64);
            }
            drop(recording);
            drop(daemon);
            let wall_us = took.as_secs_f64() * 1e6 / f64::from(EXITS);
            let cpu_us = cpu / f64::from(EXITS);
            println!(
                "xtask: round {round}, {}: {wall_us:.1} us per fork+exit+wait, children's CPU \
                 {cpu_us:.1} us, exit program {:.0} ns a run",
                mode.label(),
                times[i].program_ns.last().copied().unwrap_or(0.0)
            );
            times[i].wall_us.push(wall_us);
            times[i].children_cpu_us.push(cpu_us);
        }
    }
    let _ = idle.kill();
    let _ = idle.wait();

    let wall: Vec<f64> = times.iter().map(|t| median(t.wall_us.clone())).collect();
    let cpu: Vec<f64> = times
        .iter()
        .map(|t| median(t.children_cpu_us.clone()))
        .collect();
    println!();
    println!("{EXITS} fork + exit + wait, medians of {ROUNDS} rounds:");
    println!(
        "| mode                        | wall us per exit | ratio | children's CPU us | ratio | exit program ns per run |"
    );
    println!(
        "|-----------------------------|------------------|-------|-------------------|-------|-------------------------|"
    );
    for (i, mode) in Mode::ALL.into_iter().enumerate() {
        let program = median(times[i].program_ns.clone());
        println!(
            "| {:27} | {:16.1} | {:5.2} | {:17.1} | {:5.2} | {:>23} |",
            mode.label(),
            wall[i],
            wall[i] / wall[0],
            cpu[i],
            cpu[i] / cpu[0],
            if program.is_nan() {
                "-".to_owned()
            } else {
                format!("{program:.0}")
            }
        );
    }
    println!(
        "bench: the exit program takes {:.0} ns a process exit ({:.3}% of a fork+exit+wait here)",
        median(times[1].program_ns.clone()),
        median(times[1].program_ns.clone()) / 10.0 / wall[0]
    );
    Ok(())
}
