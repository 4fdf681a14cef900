//! `cargo xtask bench --off-cpu`: what off-CPU profiling costs the host's context switches.
//!
//! The load is the `switches` test fixture with one pair of threads passing a byte back and
//! forth through pipes for 2 s: every round trip is two blocks of a few microseconds, and four
//! or so context switches on this machine's CPUs. It runs in rounds, each of which runs it in
//! every mode in turn, so that a change in the shared machine's load falls on all of them:
//!
//! * with no daemon;
//! * with the daemon loaded and no session: `vmscope_switch` is loaded but attached only while
//!   an off-CPU or wall session runs, so it should cost nothing;
//! * with an off-CPU session on another, idle process (`sleep`): the program is attached and
//!   runs at every switch of the host, the fixture's included, finds neither the thread leaving
//!   nor the one coming back among its targets and returns: what any process pays while
//!   someone profiles another's time off the CPU;
//! * with an off-CPU session on the fixture itself, stacks by frame pointers: every block is
//!   noted with its user stack as the thread leaves and sent with its kernel stack as it comes
//!   back;
//! * the same with `--min-block 1ms`: the fixture's blocks are far shorter, so they are noted
//!   and counted but not sent;
//! * the same with `--call-graph dwarf`: each thread leaving also copies the top 8 KiB of its
//!   stack, and each record carries the copy to the daemon, which unwinds it;
//! * under `perf record -e sched:sched_switch -g` with no daemon, the kernel's own way to the
//!   same stacks: every switch of the fixture's written to a file with its kernel and user
//!   stacks. (bcc's `offcputime` would be the other yardstick: it needs the kernel's headers
//!   and kprobes, which this machine's kernel has neither of.)
//!
//! The table shows, as medians over the rounds: the fixture's round trips per second and their
//! ratio to the run with no daemon (the whole cost to the load, the daemon's work in the modes
//! that send it blocks included: it shares the machine's CPUs); the switch program's own time
//! per run and its runs per second, from the kernel's BPF statistics (`kernel.bpf_stats_enabled`,
//! set for the run and restored after: `run_time_ns` and `run_cnt` of the daemon's one tracing
//! program, from its file descriptor's fdinfo, read when the fixture says `ready` and when it
//! reports), and their product as a share of one CPU; and for the sessions on the fixture the
//! blocks its JSON report recorded, counted as short, and lost (the ring buffer was full), and
//! the daemon's CPU time over the run (all its threads' `schedstat`) per 100,000 blocks it was
//! sent: what routing a block to its session, placing its stack and counting it costs.
//! Sessions on the fixture also open the kernel counters the report's Events show on its
//! threads (context switches among them), which every session on a process does, off-CPU or
//! not: part of the cost of those three modes is theirs, not the switch program's.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Instant,
};

use anyhow::{Context, bail};

use crate::{
    bench::{daemon_cpu_ns, json_u64, proc_field},
    bench_exit::{BpfStats, Recording, median, program_stats},
    demo::{self, Built, Daemon},
    root, run_checked,
};

const ROUNDS: usize = 5;
/// How long the fixture runs in each mode, in seconds (its argument), and its pairs of threads.
const SECONDS: &str = "2";
const PAIRS: &str = "1";
/// Far longer than the fixture's blocks, which are microseconds.
const MIN_BLOCK: &str = "1ms";
/// `BPF_PROG_TYPE_TRACING` in fdinfo's `prog_type`: `tp_btf/sched_switch` is one.
const TRACING: u64 = 26;

/// How the fixture runs.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    NoDaemon,
    Idle,
    OtherProcess,
    Target,
    TargetMinBlock,
    TargetDwarf,
    Perf,
}

impl Mode {
    const ALL: [Mode; 7] = [
        Mode::NoDaemon,
        Mode::Idle,
        Mode::OtherProcess,
        Mode::Target,
        Mode::TargetMinBlock,
        Mode::TargetDwarf,
        Mode::Perf,
    ];

    fn label(self) -> &'static str {
        match self {
            Mode::NoDaemon => "no daemon",
            Mode::Idle => "daemon loaded, no session",
            Mode::OtherProcess => "session on another process",
            Mode::Target => "session on it, fp",
            Mode::TargetMinBlock => "session on it, --min-block 1ms",
            Mode::TargetDwarf => "session on it, dwarf",
            Mode::Perf => "perf record sched_switch -g",
        }
    }

    /// The `vmscope record` options of a session on the fixture, after `--mode off-cpu`.
    fn target_options(self) -> Option<&'static [&'static str]> {
        match self {
            Mode::Target => Some(&["--call-graph", "fp"]),
            Mode::TargetMinBlock => Some(&["--call-graph", "fp", "--min-block", MIN_BLOCK]),
            Mode::TargetDwarf => Some(&["--call-graph", "dwarf"]),
            _ => None,
        }
    }
}

/// `(run_time_ns, run_cnt)` of the one tracing program `pid` holds, by file descriptor, from
/// fdinfo (0 unless `kernel.bpf_stats_enabled` is set): the switch program, loaded with the
/// daemon and counting only while attached. fdinfo does not name programs, so a second tracing
/// program is an error rather than a guess.
fn switch_program_stats(pid: u32) -> anyhow::Result<(u64, u64)> {
    let found: Vec<(u64, u64)> = program_stats(pid, TRACING)?
        .into_iter()
        .map(|(_, time, count)| (time, count))
        .collect();
    match found[..] {
        [one] => Ok(one),
        [] => bail!("the daemon holds no tracing program (vmscope_switch)"),
        _ => bail!(
            "the daemon holds {} tracing programs: which is vmscope_switch?",
            found.len()
        ),
    }
}

/// Builds the `switches` fixture into the build's directory, with the tests' flags.
fn build_switches(built: &Built) -> anyhow::Result<PathBuf> {
    let switches = built.dir.join("switches");
    run_checked(
        Command::new("gcc")
            .args([
                "-O1",
                "-g",
                "-fno-inline",
                "-fno-omit-frame-pointer",
                "-Wl,--build-id",
                "-pthread",
                "-o",
            ])
            .arg(&switches)
            .arg(root().join("tests/fixtures/switches.c")),
    )?;
    Ok(switches)
}

/// A child killed when dropped, however the benchmark ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one run of the fixture measured.
struct Run {
    round_trips_per_s: f64,
    /// The switch program's run time and runs while the fixture's threads ran, and that time
    /// in seconds; `None` with no daemon.
    program: Option<(u64, u64, f64)>,
    /// The daemon's CPU time over that span, in nanoseconds.
    daemon_cpu_ns: Option<u64>,
}

/// Reads lines from `out` until one starts with `prefix`, and returns it.
fn read_until(out: &mut impl BufRead, prefix: &str) -> anyhow::Result<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line)? == 0 {
            bail!("the fixture ended before saying `{prefix}`");
        }
        if line.starts_with(prefix) {
            return Ok(line.trim_end().to_owned());
        }
    }
}

/// Runs `command`, the fixture or a `vmscope record` of it (which gives it its standard
/// output), to its end: its round trips per second, and with `daemon_pid`, what the daemon's
/// switch program did from its `ready` to its report, the span its round trips are counted in.
fn run_fixture(command: &mut Command, daemon_pid: Option<u32>) -> anyhow::Result<Run> {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {command:?}"))?;
    let mut out = BufReader::new(child.stdout.take().context("piped stdout")?);
    read_until(&mut out, "ready")?;
    let before = daemon_pid.map(switch_program_stats).transpose()?;
    let cpu_before = daemon_pid.map(daemon_cpu_ns).transpose()?;
    let start = Instant::now();
    let report = read_until(&mut out, "round_trips=")?;
    let seconds = start.elapsed().as_secs_f64();
    let after = daemon_pid.map(switch_program_stats).transpose()?;
    let cpu_after = daemon_pid.map(daemon_cpu_ns).transpose()?;
    let status = child.wait()?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    // round_trips=N seconds=S
    let field = |key: &str| {
        report
            .split_whitespace()
            .find_map(|f| f.strip_prefix(key))
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("no {key} in the fixture's `{report}`"))
    };
    let round_trips_per_s = field("round_trips=")? / field("seconds=")?;
    let program = before
        .zip(after)
        .map(|((time0, count0), (time, count))| (time - time0, count - count0, seconds));
    Ok(Run {
        round_trips_per_s,
        program,
        daemon_cpu_ns: cpu_before
            .zip(cpu_after)
            .map(|(before, after)| after.saturating_sub(before)),
    })
}

/// `blocks`, `short_blocks` and `lost_blocks` of the `off_cpu` object of the JSON report at
/// `path` (`blocks` is its first field; the other two are found nowhere else).
fn off_cpu_blocks(path: &Path) -> anyhow::Result<[u64; 3]> {
    let json = std::fs::read_to_string(path)
        .with_context(|| format!("no JSON report at {}", path.display()))?;
    let off_cpu = json
        .split_once("\"off_cpu\":")
        .context("the report has no off_cpu object")?
        .1;
    let field = |key| json_u64(off_cpu, key).with_context(|| format!("no off_cpu.{key}"));
    Ok([
        field("blocks")?,
        field("short_blocks")?,
        field("lost_blocks")?,
    ])
}

/// A number for the table, or `-` where the mode has none.
fn cell(value: f64, decimals: usize) -> String {
    if value.is_nan() {
        "-".to_owned()
    } else {
        format!("{value:.decimals$}")
    }
}

/// One mode's measurements over the rounds.
#[derive(Clone, Default)]
struct Times {
    round_trips_per_s: Vec<f64>,
    program_ns: Vec<f64>,
    program_runs_per_s: Vec<f64>,
    /// Of one CPU, in percent.
    program_cpu: Vec<f64>,
    blocks: Vec<f64>,
    short_blocks: Vec<f64>,
    lost_blocks: Vec<f64>,
    /// The daemon's CPU milliseconds per 100,000 blocks sent to it.
    daemon_ms_per_100k: Vec<f64>,
}

/// Runs the benchmark and prints the table.
pub fn run() -> anyhow::Result<()> {
    let built = demo::build()?;
    let switches = build_switches(&built)?;
    let report = built.dir.join("off-cpu.json");
    let log = built.dir.join("off-cpu-record.log");
    let perf_data = built.dir.join("off-cpu-perf.data");
    let _stats = BpfStats::enable()?;
    // An idle process for the session on another process to follow.
    let idle = Killed(Command::new("sleep").arg("3600").spawn()?);
    let idle_pid = idle.0.id().to_string();
    let mut times = vec![Times::default(); Mode::ALL.len()];
    // One warm-up run, not counted: the page cache, the CPUs' clocks.
    run_fixture(Command::new(&switches).args(["1", PAIRS]), None)?;
    for round in 1..=ROUNDS {
        for (i, mode) in Mode::ALL.into_iter().enumerate() {
            // A daemon of its own for each mode, as bench --exit-cost has: none inherits what
            // the one before left (a dwarf session's unwinding, the fixture's symbols).
            let daemon = match mode {
                Mode::NoDaemon | Mode::Perf => None,
                _ => Some(Daemon::start_or_reuse(&built, false)?),
            };
            let daemon_pid = daemon.as_ref().and_then(Daemon::pid);
            // The session on another process starts before the fixture and stops after it
            // (SIGINT, not --duration, which would race its end): the program is attached for
            // every round trip counted.
            let recording = match (mode, &daemon) {
                (Mode::OtherProcess, Some(d)) => Some(Recording::start(
                    &built,
                    d,
                    &["--pid", &idle_pid, "--mode", "off-cpu", "--format", "json"],
                )?),
                _ => None,
            };
            let _ = std::fs::remove_file(&report);
            let run = match (mode.target_options(), &daemon) {
                // Sessions on the fixture record it as a command: `vmscope record -- CMD`
                // holds the fixture before exec until the session follows it, and stops when
                // it exits, so its every round trip is under the session. A session started
                // with --pid once it says `ready` would leave its first round trips, and the
                // time to start the session, unprofiled in the count.
                (Some(options), Some(d)) => run_fixture(
                    Command::new(&built.cli)
                        .arg("--socket")
                        .arg(&d.socket)
                        .args(["record", "--mode", "off-cpu"])
                        .args(options)
                        .args(["--format", "json", "-o"])
                        .arg(&report)
                        .arg("--")
                        .arg(&switches)
                        .args([SECONDS, PAIRS])
                        .stderr(std::fs::File::create(&log)?),
                    daemon_pid,
                )
                .with_context(|| {
                    let said = std::fs::read_to_string(&log).unwrap_or_default();
                    format!("{}: vmscope said:\n{said}", mode.label())
                })?,
                _ if mode == Mode::Perf => run_fixture(
                    Command::new("perf")
                        .args(["record", "-q", "-e", "sched:sched_switch", "-g", "-o"])
                        .arg(&perf_data)
                        .arg("--")
                        .arg(&switches)
                        .args([SECONDS, PAIRS])
                        .stderr(std::fs::File::create(&log)?),
                    None,
                )
                .with_context(|| {
                    let said = std::fs::read_to_string(&log).unwrap_or_default();
                    format!("perf record said:\n{said}")
                })?,
                _ => run_fixture(Command::new(&switches).args([SECONDS, PAIRS]), daemon_pid)?,
            };
            drop(recording);
            drop(daemon);
            let t = &mut times[i];
            t.round_trips_per_s.push(run.round_trips_per_s);
            let mut line = format!(
                "xtask: round {round}, {}: {:.0} round trips/s",
                mode.label(),
                run.round_trips_per_s
            );
            if let Some((run_ns, runs, seconds)) = run.program {
                // Attached, it runs at every switch of the host: at least once a round trip.
                let attached = mode != Mode::Idle;
                if attached && (runs as f64) < run.round_trips_per_s * seconds {
                    bail!(
                        "{}: the switch program ran {runs} times in {seconds:.1} s of {:.0} \
                         round trips a second: was it attached?",
                        mode.label(),
                        run.round_trips_per_s
                    );
                }
                let ns = if runs > 0 {
                    run_ns as f64 / runs as f64
                } else {
                    f64::NAN
                };
                let per_s = runs as f64 / seconds;
                let cpu = run_ns as f64 / seconds / 1e7;
                line += &format!(
                    ", switch program {} ns a run, {per_s:.0} runs/s, {cpu:.2}% of a CPU",
                    cell(ns, 0)
                );
                if !ns.is_nan() {
                    t.program_ns.push(ns);
                }
                t.program_runs_per_s.push(per_s);
                t.program_cpu.push(cpu);
            }
            if mode.target_options().is_some() {
                let [blocks, short, lost] = off_cpu_blocks(&report)?;
                line += &format!(", {blocks} blocks recorded, {short} short, {lost} lost");
                // Short blocks are counted in the kernel; the daemon is sent the rest. Of a few
                // blocks (--min-block), its CPU is the session's start and stop, not theirs.
                let sent = blocks + lost;
                if let Some(cpu_ns) = run.daemon_cpu_ns
                    && sent >= 1_000
                {
                    let ms = cpu_ns as f64 / 1e6 / sent as f64 * 100_000.0;
                    line += &format!(", daemon {ms:.1} ms of CPU per 100,000 blocks");
                    t.daemon_ms_per_100k.push(ms);
                }
                t.blocks.push(blocks as f64);
                t.short_blocks.push(short as f64);
                t.lost_blocks.push(lost as f64);
            }
            println!("{line}");
        }
    }
    drop(idle);

    let rate: Vec<f64> = times
        .iter()
        .map(|t| median(t.round_trips_per_s.clone()))
        .collect();
    println!();
    println!(
        "`switches {SECONDS} {PAIRS}` (one pair of threads, {SECONDS} s), medians of {ROUNDS} \
         rounds:"
    );
    println!(
        "| mode                           | round trips/s | ratio | switch ns/run | runs/s  | program CPU | blocks | short  | lost   | daemon ms/100k blocks |"
    );
    println!(
        "|--------------------------------|---------------|-------|---------------|---------|-------------|--------|--------|--------|-----------------------|"
    );
    for (i, mode) in Mode::ALL.into_iter().enumerate() {
        let t = &times[i];
        let m = |values: &Vec<f64>| median(values.clone());
        let cpu = m(&t.program_cpu);
        println!(
            "| {:30} | {:13.0} | {:5.2} | {:>13} | {:>7} | {:>11} | {:>6} | {:>6} | {:>6} | {:>21} |",
            mode.label(),
            rate[i],
            rate[i] / rate[0],
            cell(m(&t.program_ns), 0),
            cell(m(&t.program_runs_per_s), 0),
            if cpu.is_nan() {
                "-".to_owned()
            } else {
                format!("{cpu:.2}%")
            },
            cell(m(&t.blocks), 0),
            cell(m(&t.short_blocks), 0),
            cell(m(&t.lost_blocks), 0),
            cell(m(&t.daemon_ms_per_100k), 1),
        );
    }
    let ns = |mode: Mode| median(times[mode as usize].program_ns.clone());
    // Every mode's runs are all the host's switches, mostly the fixture's: an average over
    // them, not the cost of a target's switch alone.
    println!(
        "bench: attached, the switch program takes {} ns a context switch of the host with a \
         session on another process, {} ns with one on the fixture (fp), {} ns with \
         --min-block {MIN_BLOCK}, {} ns with dwarf",
        cell(ns(Mode::OtherProcess), 0),
        cell(ns(Mode::Target), 0),
        cell(ns(Mode::TargetMinBlock), 0),
        cell(ns(Mode::TargetDwarf), 0),
    );
    Ok(())
}

/// `cargo xtask bench --off-cpu --minutes N`: one off-CPU session (frame pointers) of `minutes`
/// on the fixture's pair of threads, on a fresh daemon: its RSS and CPU every minute, and what
/// the session recorded. Off-CPU sessions keep a table entry per distinct stack and thread and
/// state, not per block, so the RSS should settle once the fixture's stacks are all seen.
pub fn soak(minutes: u64) -> anyhow::Result<()> {
    let built = demo::build()?;
    let switches = build_switches(&built)?;
    let report = built.dir.join("off-cpu-soak.json");
    let log = built.dir.join("off-cpu-soak.log");
    let daemon = Daemon::start_or_reuse(&built, false)?;
    let pid = daemon.pid().context("the daemon's pid")?;
    let seconds = (minutes * 60).to_string();
    let mut child = Killed(
        Command::new(&built.cli)
            .arg("--socket")
            .arg(&daemon.socket)
            .args(["record", "--mode", "off-cpu", "--call-graph", "fp"])
            .args(["--format", "json", "-o"])
            .arg(&report)
            .arg("--")
            .arg(&switches)
            .args([seconds.as_str(), PAIRS])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("cannot run vmscope record")?,
    );
    println!("| minute | daemon RSS MiB | daemon CPU % (of one CPU, that minute) |");
    println!("|--------|----------------|----------------------------------------|");
    let rss = || proc_field(pid, "status", "VmRSS:").unwrap_or(0) as f64 / 1024.0;
    let mut cpu = daemon_cpu_ns(pid)?;
    let mut at = Instant::now();
    println!("| {:6} | {:14.1} | {:>38} |", 0, rss(), "-");
    for minute in 1..=minutes {
        std::thread::sleep(std::time::Duration::from_secs(60));
        let now = daemon_cpu_ns(pid)?;
        let share = (now - cpu) as f64 / at.elapsed().as_nanos() as f64 * 100.0;
        (cpu, at) = (now, Instant::now());
        println!("| {minute:6} | {:14.1} | {share:38.1} |", rss());
    }
    let status = child.0.wait()?;
    if !status.success() {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        bail!("vmscope record failed ({status}):\n{said}");
    }
    let [blocks, short, lost] = off_cpu_blocks(&report)?;
    println!(
        "bench: off-CPU soak of {minutes} min: {blocks} blocks recorded ({short} short, {lost} \
         lost); peak RSS (VmHWM) {:.1} MiB",
        proc_field(pid, "status", "VmHWM:").unwrap_or(0) as f64 / 1024.0
    );
    Ok(())
}
