//! Off-CPU profiles of the `offcpu` fixture (`tests/fixtures/offcpu.c`), whose waits it
//! measures itself: recording it, reading what it measured, and comparing the two.

use std::{collections::BTreeMap, path::Path};

use serde_json::Value;

use crate::{Daemon, shared_tempdir};

/// Rounds of the fixture: 150 of the sleeper's 10 ms, 50 of the holder's 25 ms.
pub const ROUNDS: &str = "150";

/// What the fixture measured of one thread.
#[derive(Debug)]
pub struct Life {
    /// Its thread id.
    pub tid: u64,
    /// Its life.
    pub elapsed_ns: u64,
    /// Its naps.
    pub slept_ns: u64,
    /// Its waits for the mutex.
    pub waited_ns: u64,
}

/// Records the fixture `program` with `args` (`--mode`, `--call-graph`...) into a JSON report;
/// the report and what the fixture measured, by thread name.
pub fn record(daemon: &Daemon, program: &Path, args: &[&str]) -> (Value, BTreeMap<String, Life>) {
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
pub fn value_index(report: &Value, kind: &str) -> usize {
    report["sample_types"]
        .as_array()
        .unwrap()
        .iter()
        .position(|t| t == kind)
        .unwrap_or_else(|| panic!("no {kind} in {}", report["sample_types"]))
}

/// The time off the CPU of thread `tid` in stacks holding a frame named `function`.
pub fn time_under(report: &Value, tid: u64, function: &str) -> u64 {
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
pub fn within_5_percent(what: &str, measured: u64, known: u64) {
    let error = measured.abs_diff(known) as f64 / known.max(1) as f64;
    assert!(
        error <= 0.05,
        "{what}: {measured} ns in the profile for {known} ns measured ({:.1}% off)",
        error * 100.0
    );
}

/// The waits of each thread under its call chain, within 5% of the fixture's own measure.
pub fn check_waits(report: &Value, lives: &BTreeMap<String, Life>, chains: &[(&str, &[&str])]) {
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
