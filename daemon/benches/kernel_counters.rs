//! What the kernel counters of a session cost the target: `tests/fixtures/events.c` (the
//! workloads the counters see most of: sleeps, i.e. context switches, and fresh pages, i.e.
//! minor faults) run alone and with a session's counters on it, alternately, in rounds; the
//! table gives the median wall time of each and their ratio. Needs root and gcc:
//! `cargo bench -p vmscoped --bench kernel_counters`.
//!
//! The process is held in a shell waiting for a line on its standard input while its counters
//! are opened, then execs the workload: the counters follow it through the exec, as a
//! session's follow `vmscope record -- CMD`.

use std::{
    io::Write,
    path::Path,
    process::{Command, Stdio},
    time::Instant,
};

use vmscoped::stats::kernel::{ProcessCounters, Support};

const ROUNDS: usize = 7;

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let events = dir.path().join("events");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/events.c");
    let built = Command::new("gcc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&events)
        .arg(&source)
        .status()
        .expect("run gcc");
    assert!(built.success(), "gcc failed");
    let support = Support::probe();

    println!("| workload | alone (median of {ROUNDS}) | counted | ratio |");
    println!("|---|---|---|---|");
    for args in [["sleeps", "20000", "4"], ["touch", "1000", ""]] {
        let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
        let (mut alone, mut counted) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            alone.push(run(&events, &args, None));
            counted.push(run(&events, &args, Some(&support)));
        }
        let (alone, counted) = (median(alone), median(counted));
        println!(
            "| events {} | {alone:.3} s | {counted:.3} s | {:.3}x |",
            args.join(" "),
            counted / alone
        );
    }
}

/// Runs `events ARGS` once, with the counters of `support` on it if given: its wall time
/// from its release to its exit.
fn run(events: &Path, args: &[&str], support: Option<&Support>) -> f64 {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("read go && exec \"$0\" \"$@\"")
        .arg(events)
        .args(args)
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let counters = support.map(|support| {
        ProcessCounters::open(child.id(), support, usize::MAX).expect("open counters")
    });
    let start = Instant::now();
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("release");
    let status = child.wait().expect("wait");
    let elapsed = start.elapsed().as_secs_f64();
    assert!(status.success(), "events {args:?}: {status}");
    if let Some(counters) = counters {
        // Read, so that the counters did count: the sleeps switch, the touches fault (and,
        // alone on a CPU, may never be switched out).
        let counts = counters.counts();
        assert!(
            counts.context_switches + counts.minor_faults > 0,
            "{counts:?}"
        );
    }
    elapsed
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
