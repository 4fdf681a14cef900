//! vmscope's developer tasks: `cargo xtask setup | demo | test | lint | module-graph | bench |
//! fuzz`.
//!
//! `setup` installs what a fresh machine lacks to build the eBPF program and run the tests
//! (the nightly `rust-src` component, `bpf-linker` 0.10.0, gcc, a virtualenv with Python's
//! grpcio, and the runtimes the tests profile: Node.js, a JDK, sqlite3, a shared CPython 3.12
//! under pyenv), saying what it does and skipping what is present; `demo`, `test` and `bench`
//! run it first.

mod bench;
mod bench_attacks;
mod bench_continuous;
mod bench_counts;
mod bench_daemon_cpu;
mod bench_exit;
mod bench_heap;
mod bench_java;
mod bench_jvm;
mod bench_labels;
mod bench_late;
mod bench_lines;
mod bench_memory;
mod bench_off_cpu;
mod bench_stop;
mod demo;
/// The tests' FUSE server whose reads can be made to hang, for `bench --attacks`.
#[path = "../../tests/src/fuse.rs"]
#[allow(dead_code)] // The tests use all of it; the bench only hangs reads.
mod fuse;
mod module_graph;
mod package;
mod setup;

use std::{
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Install what building and testing need (idempotent).
    Setup,
    /// Build the daemon and the CLI in release mode.
    Build,
    /// Build the Debian package (cargo-deb) into target/debian; with --check, install it, verify
    /// its systemd unit, run its daemon from its configuration, and remove it (root).
    Package {
        /// Install, verify, run and remove the package.
        #[arg(long)]
        check: bool,
    },
    /// Run the daemon (or use a running one), record a fixture for a few seconds, print the
    /// report.
    Demo {
        /// Seconds to record.
        #[arg(long, default_value_t = 4.0)]
        seconds: f64,
    },
    /// Run every test (unit, integration against real BPF: needs root).
    Test,
    /// rustfmt, clippy, and the daemon's module graph (no import circle across top-level
    /// modules, the API crate named only at the edges), as CI checks them.
    Lint,
    /// Print which of the daemon's top-level modules import which, their layers, and the
    /// circles between them; fails if a circle spans more than one top-level module, or if
    /// the API crate is named outside the daemon's edges (`API_EDGES`) and its tests.
    ModuleGraph {
        /// Every place an edge of a circle is made, not only the first.
        #[arg(long)]
        sites: bool,
    },
    /// Measure the profiler's cost and speed and print a table.
    Bench {
        /// Instead, run one session of this many seconds and print the daemon's memory over
        /// it (flat once every distinct stack has been seen).
        #[arg(long, value_name = "SECONDS")]
        soak: Option<u64>,
        /// Instead, time and memory to load a large binary's DWARF line tables and resolve
        /// 10,000 addresses, against binutils' addr2line on the same addresses.
        #[arg(long, conflicts_with = "soak")]
        lines: bool,
        /// Instead, ask a JVM with 10,000 compiled methods for its perf map ten times: the
        /// map's size, the request times and a Java thread's longest stall with and without.
        #[arg(long, conflicts_with_all = ["soak", "lines"])]
        jvm_perfmap: bool,
        /// Instead, record the demo VM for SECONDS while it holds its code map until exit,
        /// and with it written at once: the daemon's memory for samples awaiting their map.
        #[arg(long, value_name = "SECONDS", conflicts_with_all = ["soak", "lines", "jvm_perfmap"])]
        late_maps: Option<u64>,
        /// Instead, time 10,000 fork+exit+wait with no daemon, the daemon idle, a session on
        /// another process and a system-wide one: what the exit tracepoint costs an exit.
        #[arg(long, conflicts_with_all = ["soak", "lines", "jvm_perfmap", "late_maps"])]
        exit_cost: bool,
        /// Instead, attack the daemon as another local user would (connection flood, sparse
        /// and huge perf maps, code flood) and print its descriptors, memory and CPU before,
        /// during and after each.
        #[arg(long, conflicts_with_all = ["soak", "lines", "jvm_perfmap", "late_maps", "exit_cost"])]
        attacks: bool,
        /// Instead, record ten varied sessions (the demo VM, CPython, node, a JVM, the whole
        /// system, C fixtures; fp and dwarf stacks) on a fresh daemon, then leave it idle for
        /// 60 s: its RSS after each, idle, and its peak.
        #[arg(long, conflicts_with_all = ["soak", "lines", "jvm_perfmap", "late_maps", "exit_cost", "attacks"])]
        memory: bool,
        /// Instead, time the first system-wide session of a fresh daemon (--duration 5), on
        /// a quiet host and with 60 busy programs: how long after its duration it is reported.
        #[arg(long, conflicts_with_all = ["soak", "lines", "jvm_perfmap", "late_maps", "exit_cost", "attacks", "memory"])]
        stop: bool,
        /// Instead, the daemon's CPU time per 1,000 samples and per session in each
        /// call-graph mode (stackloop in rounds of none, fp and dwarf, after a warm-up round),
        /// and its peak RSS.
        #[arg(long, conflicts_with_all = ["soak", "lines", "jvm_perfmap", "late_maps", "exit_cost", "attacks", "memory", "stop"])]
        daemon_cpu: bool,
        /// With --daemon-cpu, sessions six times as long (about 8 s instead of 1.4 s), so that
        /// what a session costs once (its start, stop and profile) weighs less against its
        /// samples and its time.
        #[arg(long, requires = "daemon_cpu")]
        long_sessions: bool,
        /// Instead, continuous profiling's steady cost: `vmscoped --continuous` at its defaults
        /// with 100 idle and 2 busy processes, for MINUTES (10 by default): the daemon's CPU
        /// and RSS every 30 s, what it keeps, and what it lost.
        #[arg(long, value_name = "MINUTES", num_args = 0..=1, default_missing_value = "10",
              conflicts_with_all = ["soak", "lines", "jvm_perfmap", "late_maps", "exit_cost", "attacks", "memory", "stop", "daemon_cpu"])]
        continuous: Option<u64>,
        /// With --continuous, a compiler passes by after the first minute (a release build of
        /// vmscope-parse in a scratch target directory): the table shows the RSS its binaries
        /// cost the daemon, and whether it comes back down once they are gone.
        #[arg(long, requires = "continuous")]
        compile_burst: bool,
        /// Instead, what off-CPU profiling costs the host's context switches: a pair of
        /// threads ping-ponging through pipes with no daemon, the daemon idle, an off-CPU
        /// session on another process, and sessions on it (fp, --min-block 1ms, dwarf).
        #[arg(long, conflicts_with_all = ["soak", "lines", "jvm_perfmap", "late_maps", "exit_cost", "attacks", "memory", "stop", "daemon_cpu", "continuous", "baseline"])]
        off_cpu: bool,
        /// Instead, how steady exact counts are beside samples over ten runs of `jitvm tiny`
        /// (Compteur's ψ₁₀ and coefficients of variation), what the demo VM's counters cost it,
        /// and what one uprobe hit of `record --count` costs.
        #[arg(long, conflicts_with_all = ["soak", "lines", "jvm_perfmap", "late_maps", "exit_cost", "attacks", "memory", "stop", "daemon_cpu", "continuous", "baseline", "off_cpu"])]
        counts: bool,
        /// Instead, what domain labels cost: the labels fixture changing its label a million
        /// times a second against never, sampled, its work per second and the sampler's BPF
        /// time per run.
        #[arg(long, conflicts_with_all = ["soak", "lines", "jvm_perfmap", "late_maps", "exit_cost", "attacks", "memory", "stop", "daemon_cpu", "continuous", "baseline", "off_cpu", "counts"])]
        labels: bool,
        /// Instead, what unwinding HotSpot's Java frames costs: a 70/30 Java fixture with no
        /// JVM flags, not recorded and recorded by fp without Java frames, fp and dwarf, for
        /// each JDK under /usr/lib/jvm: the daemon's CPU per 1,000 samples, the target's speed
        /// and the stacks that reach the thread's start.
        #[arg(long, conflicts_with_all = ["soak", "lines", "jvm_perfmap", "late_maps", "exit_cost", "attacks", "memory", "stop", "daemon_cpu", "continuous", "baseline", "off_cpu", "counts", "labels"])]
        java_stacks: bool,
        /// Instead, what a heap histogram costs the JVM it counts: Leaky.java holding 123,457,
        /// 1,234,567 and 3,999,999 objects, `vmscope heap` after a full GC and with --all, the
        /// JVM's pause and the round trip, and `jmap -histo:live` beside them; then the demo
        /// VM's pauses for structure queries and histograms, lists of 3,500 to 1,000,000 nodes.
        #[arg(long, conflicts_with_all = ["soak", "lines", "jvm_perfmap", "late_maps", "exit_cost", "attacks", "memory", "stop", "daemon_cpu", "continuous", "baseline", "off_cpu", "counts", "labels", "java_stacks"])]
        heap: bool,
        /// With --off-cpu, instead one off-CPU session of MINUTES on the pair of threads: the
        /// daemon's RSS and CPU every minute.
        #[arg(long, value_name = "MINUTES", requires = "off_cpu")]
        minutes: Option<u64>,
        /// With --memory, --stop or --daemon-cpu, run the same against this `vmscoped` binary
        /// (an earlier build) too and print both, measured in one run.
        #[arg(long, value_name = "VMSCOPED")]
        baseline: Option<PathBuf>,
    },
    /// Run each fuzz target for a bounded time (installs cargo-fuzz if needed).
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup::run(),
        Task::Build => build_release(),
        Task::Package { check } => package::run(check),
        Task::Demo { seconds } => setup::run().and_then(|()| demo::run(seconds)),
        Task::Test => setup::run().and_then(|()| test()),
        Task::Lint => setup::run().and_then(|()| lint()),
        Task::ModuleGraph { sites } => module_graph::run(sites),
        Task::Bench { lines: true, .. } => setup::run().and_then(|()| bench_lines::run()),
        Task::Bench {
            jvm_perfmap: true, ..
        } => setup::run().and_then(|()| bench_jvm::run()),
        Task::Bench {
            late_maps: Some(seconds),
            ..
        } => setup::run().and_then(|()| bench_late::run(seconds)),
        Task::Bench {
            exit_cost: true, ..
        } => setup::run().and_then(|()| bench_exit::run()),
        Task::Bench {
            off_cpu: true,
            minutes: Some(minutes),
            ..
        } => setup::run().and_then(|()| bench_off_cpu::soak(minutes)),
        Task::Bench { off_cpu: true, .. } => setup::run().and_then(|()| bench_off_cpu::run()),
        Task::Bench { counts: true, .. } => setup::run().and_then(|()| bench_counts::run()),
        Task::Bench { labels: true, .. } => setup::run().and_then(|()| bench_labels::run()),
        Task::Bench {
            java_stacks: true, ..
        } => setup::run().and_then(|()| bench_java::run()),
        Task::Bench { heap: true, .. } => setup::run().and_then(|()| bench_heap::run()),
        Task::Bench { attacks: true, .. } => setup::run().and_then(|()| bench_attacks::run()),
        Task::Bench {
            continuous: Some(minutes),
            compile_burst,
            ..
        } => setup::run().and_then(|()| bench_continuous::run(minutes, compile_burst)),
        Task::Bench {
            daemon_cpu: true,
            baseline,
            long_sessions,
            ..
        } => setup::run().and_then(|()| bench_daemon_cpu::run(baseline, long_sessions)),
        Task::Bench {
            memory: true,
            baseline,
            ..
        } => setup::run().and_then(|()| bench_memory::run(baseline)),
        Task::Bench {
            stop: true,
            baseline,
            ..
        } => setup::run().and_then(|()| bench_stop::run(baseline)),
        Task::Bench { soak, .. } => setup::run().and_then(|()| bench::run(soak)),
        Task::Fuzz { seconds } => fuzz(seconds),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// The cargo that runs us.
pub fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(root());
    command
}

/// Runs a command, failing with its name when it fails.
pub fn run_checked(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}

fn build_release() -> anyhow::Result<()> {
    setup::run()?;
    println!("xtask: building vmscoped and vmscope (release)");
    run_checked(cargo().args(["build", "--release", "-p", "vmscoped", "-p", "vmscope"]))
}

fn test() -> anyhow::Result<()> {
    if !setup::is_root() {
        bail!(
            "the integration tests load BPF programs and need root: run `sudo -E cargo xtask \
             test` (unit tests alone: `cargo test --workspace --lib`)"
        );
    }
    println!("xtask: running every test (unit and end-to-end against real BPF)");
    run_checked(cargo().args(["test", "--workspace", "--no-fail-fast"]))
}

fn lint() -> anyhow::Result<()> {
    run_checked(cargo().args(["fmt", "--all", "--", "--check"]))?;
    run_checked(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    module_graph::run(false)
}

fn fuzz(seconds: u64) -> anyhow::Result<()> {
    setup::run()?;
    setup::ensure_cargo_fuzz()?;
    let dir = root().join("daemon/fuzz");
    let listing = Command::new("cargo")
        .args(["+nightly", "fuzz", "list"])
        .current_dir(&dir)
        .output()
        .context("cargo fuzz list")?;
    let targets = String::from_utf8(listing.stdout)?;
    for target in targets.lines().filter(|l| !l.is_empty()) {
        println!("xtask: fuzzing {target} for {seconds} s");
        run_checked(
            Command::new("cargo")
                .args([
                    "+nightly",
                    "fuzz",
                    "run",
                    target,
                    "--",
                    &format!("-max_total_time={seconds}"),
                ])
                .current_dir(&dir),
        )?;
    }
    Ok(())
}

/// A temporary directory every user can traverse (the FUSE server mounts in one that nobody
/// reaches).
fn shared_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::Builder::new()
        .prefix("vmscope-bench-")
        .tempdir()
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}
