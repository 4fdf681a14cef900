//! Off-CPU and wall profiles against real BPF, on a fixture whose waits are known by
//! construction and measured by the fixture itself (`tests/fixtures/offcpu.c`): a thread that
//! burns 70% and sleeps 30% in `sleeper_path > nap > nanosleep`, one that holds a mutex asleep
//! in `holder_path`, one that waits for it in `waiter_path > take_lock`, and the main thread
//! joining them. Each wait must be under its call chain within 5% of what the fixture
//! measured; in wall mode each thread's total must be its elapsed time within 5%.

use std::{collections::BTreeMap, path::Path};

use serde_json::Value;
use vmscope_tests::{Daemon, fixtures, shared_tempdir};

/// Rounds of the fixture: 150 of the sleeper's 10 ms, 50 of the holder's 25 ms.
const ROUNDS: &str = "150";

/// What the fixture measured of one thread.
#[derive(Debug)]
struct Life {
    tid: u64,
    elapsed_ns: u64,
    slept_ns: u64,
    waited_ns: u64,
}

/// Records the fixture `program` with `args` (`--mode`, `--call-graph`...) into a JSON report;
/// the report and what the fixture measured, by thread name.
fn record(daemon: &Daemon, program: &Path, args: &[&str]) -> (Value, BTreeMap<String, Life>) {
    let dir = shared_tempdir();
    let file = dir.path().join("report.json");
    let out = daemon
        .cli()
        .arg("record")
        .args(args)
        .args(["--format", "json", "-o"])
        .arg(&file)
        .arg("--")
        .arg(program)
        .arg(ROUNDS)
        .output()
        .expect("run vmscope record");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(&file).expect("the report")).expect("JSON");
    let lives = said
        .lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("thread ")?.split_whitespace();
            let name = words.next()?.to_owned();
            let field: BTreeMap<&str, u64> = words
                .filter_map(|w| {
                    let (key, value) = w.split_once('=')?;
                    Some((key, value.parse().ok()?))
                })
                .collect();
            Some((
                name,
                Life {
                    tid: field["tid"],
                    elapsed_ns: field["elapsed_ns"],
                    slept_ns: field["slept_ns"],
                    waited_ns: field["waited_ns"],
                },
            ))
        })
        .collect::<BTreeMap<_, _>>();
    assert_eq!(lives.len(), 4, "the fixture said: {said}");
    (report, lives)
}

/// Where the report's stacks have values of `kind`.
fn value_index(report: &Value, kind: &str) -> usize {
    report["sample_types"]
        .as_array()
        .unwrap()
        .iter()
        .position(|t| t == kind)
        .unwrap_or_else(|| panic!("no {kind} in {}", report["sample_types"]))
}

/// The time off the CPU of thread `tid` in stacks holding a frame named `function`.
fn time_under(report: &Value, tid: u64, function: &str) -> u64 {
    let off = value_index(report, "off_cpu_time");
    let frames = report["frames"].as_array().unwrap();
    report["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["tid"] == tid)
        .filter(|s| {
            s["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| frames[f.as_u64().unwrap() as usize]["name"] == function)
        })
        .map(|s| s["values"][off].as_u64().unwrap())
        .sum()
}

/// Asserts `measured` within 5% of `known`.
fn within_5_percent(what: &str, measured: u64, known: u64) {
    let error = measured.abs_diff(known) as f64 / known.max(1) as f64;
    assert!(
        error <= 0.05,
        "{what}: {measured} ns in the profile for {known} ns measured ({:.1}% off)",
        error * 100.0
    );
}

/// The waits of each thread under its call chain, within 5% of the fixture's own measure.
fn check_waits(report: &Value, lives: &BTreeMap<String, Life>, chains: &[(&str, &[&str])]) {
    for (thread, functions) in chains {
        let life = &lives[*thread];
        let known = if *thread == "waiter" {
            life.waited_ns
        } else {
            life.slept_ns
        };
        let measured: u64 = functions
            .iter()
            .map(|f| time_under(report, life.tid, f))
            .sum();
        within_5_percent(&format!("{thread} under {functions:?}"), measured, known);
    }
}

#[test]
fn off_cpu_profiles_put_each_wait_under_its_call_chain() {
    let daemon = Daemon::start();
    let (report, lives) = record(&daemon, &fixtures().offcpu, &["--mode", "off-cpu"]);
    assert_eq!(report["mode"], "off-cpu");
    assert_eq!(
        report["sample_types"],
        serde_json::json!(["off_cpu_time", "off_cpu_blocks"]),
        "the main measure first"
    );
    // By frame pointers, libc's nanosleep and pthread_mutex_lock keep none: the walk goes
    // from them to nap's caller and take_lock's.
    check_waits(
        &report,
        &lives,
        &[
            ("sleeper", &["sleeper_path"]),
            ("holder", &["holder_path", "holder_rest"]),
            ("waiter", &["waiter_path"]),
        ],
    );
    let threads = report["threads"].as_array().unwrap();
    for (name, life) in &lives {
        let thread = threads
            .iter()
            .find(|t| t["tid"] == life.tid)
            .unwrap_or_else(|| panic!("no thread {name} in {threads:?}"));
        assert_eq!(thread["name"], name.as_str(), "named as the fixture named it");
    }
    // The waiter's waits are on the mutex's futex: sleeping, in libc's lock wait.
    let off = &report["off_cpu"];
    assert_eq!(off["states"][0]["state"], "sleeping", "{}", off["states"]);
    assert_eq!(off["lost_blocks"], 0);
    let rows: Vec<&str> = off["sections"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["rows"].as_array().unwrap())
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        rows.iter().any(|r| r.contains("lll_lock_wait")),
        "rows by the innermost user frame: {rows:?}"
    );
}

#[test]
fn wall_profiles_give_each_thread_its_elapsed_time() {
    let daemon = Daemon::start();
    let (report, lives) = record(&daemon, &fixtures().offcpu, &["--mode", "wall"]);
    assert_eq!(report["sample_types"][0], "wall_time");
    let threads = report["threads"].as_array().unwrap();
    for (name, life) in &lives {
        let thread = threads.iter().find(|t| t["tid"] == life.tid).unwrap();
        let total = thread["cpu_ns"].as_u64().unwrap() + thread["off_cpu_ns"].as_u64().unwrap();
        within_5_percent(&format!("{name}'s total"), total, life.elapsed_ns);
    }
    // The sleeper burns 7 ms of its own CPU time a round: 150 rounds.
    let sleeper = threads
        .iter()
        .find(|t| t["tid"] == lives["sleeper"].tid)
        .unwrap();
    within_5_percent(
        "the sleeper's CPU time",
        sleeper["cpu_ns"].as_u64().unwrap(),
        150 * 7_000_000,
    );
    check_waits(&report, &lives, &[("sleeper", &["sleeper_path"])]);
}

#[test]
fn dwarf_stacks_unwind_waits_through_code_without_frame_pointers() {
    let daemon = Daemon::start();
    let (report, lives) = record(
        &daemon,
        &fixtures().offcpu_nofp,
        &["--mode", "off-cpu", "--call-graph", "dwarf"],
    );
    // Every frame of the chain, libc's included, from the copies and the binaries' CFI.
    check_waits(
        &report,
        &lives,
        &[
            ("sleeper", &["nap"]),
            ("holder", &["nap"]),
            ("waiter", &["take_lock"]),
        ],
    );
    check_waits(
        &report,
        &lives,
        &[
            ("sleeper", &["sleeper_path"]),
            ("holder", &["holder_path", "holder_rest"]),
            ("waiter", &["waiter_path"]),
        ],
    );
    let ends = report["stack_ends"].as_array().unwrap();
    assert!(ends.is_empty(), "no samples, so no sample's stack: {ends:?}");
}
