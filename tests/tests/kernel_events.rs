//! The kernel's counts of a session's targets (VMProfiler's "Events"), against programs whose
//! counts are known by construction, and against `perf stat` on the same program.

use std::{path::Path, process::Command};

use vmscope_tests::{Daemon, fixtures, json_report};

/// `vmscope record --format json -- events ARGS`: the report, with the session's id.
fn record_events(daemon: &Daemon, args: &[&str]) -> serde_json::Value {
    let out = daemon
        .cli()
        .args(["record", "--format", "json", "--"])
        .arg(&fixtures().events)
        .args(args)
        .output()
        .expect("run vmscope");
    json_report(&out)
}

/// The count named `name` in the report's kernel events, all targets together.
fn total(report: &serde_json::Value, name: &str) -> u64 {
    let events = &report["kernel_events"];
    events["total"]
        .as_array()
        .unwrap_or_else(|| panic!("no kernel_events in the report: {events}"))
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {events}"))["count"]
        .as_u64()
        .unwrap()
}

/// `perf stat`'s counts of `events ARGS` (`perf stat -x,` lines are `value,unit,event,...`).
fn perf_stat(args: &[&str], events: &str) -> Vec<(String, u64)> {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("stat.csv");
    let status = Command::new("perf")
        .args(["stat", "-x,", "-e", events, "-o"])
        .arg(&out_file)
        .arg("--")
        .arg(&fixtures().events)
        .args(args)
        .status()
        .expect("run perf stat (installed by cargo xtask setup)");
    assert!(status.success(), "perf stat failed: {status}");
    let text = std::fs::read_to_string(&out_file).unwrap();
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(',');
            let value = fields.next()?.parse().ok()?;
            let event = fields.nth(1)?.to_owned();
            Some((event, value))
        })
        .collect()
}

fn perf_count(counts: &[(String, u64)], event: &str) -> u64 {
    counts
        .iter()
        .find(|(name, _)| name == event)
        .unwrap_or_else(|| panic!("perf stat gave no {event}: {counts:?}"))
        .1
}

/// Whether `ours` is within 5% (and a few events) of what perf counted for the same program.
fn near(ours: u64, perf: u64) -> bool {
    ours.abs_diff(perf) as f64 <= 0.05 * perf as f64 + 20.0
}

#[test]
fn sleeps_are_voluntary_switches_in_every_thread_and_perf_stat_agrees() {
    let daemon = Daemon::start();
    // 2,000 sleeps over 4 threads the program starts after its session began: counted with
    // the thread that started them.
    let args = ["sleeps", "2000", "4"];
    let report = record_events(&daemon, &args);
    let voluntary = total(&report, "voluntary_context_switches");
    let switches = total(&report, "context_switches");
    assert!(
        (2000..=2200).contains(&voluntary),
        "{voluntary} voluntary context switches for 2,000 sleeps: {}",
        report["kernel_events"]
    );
    assert_eq!(
        total(&report, "involuntary_context_switches"),
        switches - voluntary
    );
    let process = &report["kernel_events"]["processes"][0];
    assert_eq!(process["threads"], 1, "held before exec, it had one thread");
    assert_eq!(process["command"], "events", "named after its exec");
    assert_eq!(process["note"], serde_json::Value::Null);

    let perf = perf_stat(&args, "context-switches,minor-faults");
    let perf_switches = perf_count(&perf, "context-switches");
    eprintln!(
        "2,000 sleeps in 4 threads: {switches} context switches ({voluntary} voluntary), perf \
         stat {perf_switches}"
    );
    assert!(
        near(switches, perf_switches),
        "vmscope counted {switches} context switches, perf stat {perf_switches}"
    );

    // The PMU is said plainly: counted where it exists, named as missing where not.
    let has_pmu = Path::new("/sys/bus/event_source/devices/cpu/events/cpu-cycles").exists();
    let unavailable = report["kernel_events"]["unavailable"].to_string();
    assert_eq!(
        unavailable.contains("no hardware PMU"),
        !has_pmu,
        "PMU {has_pmu}, unavailable: {unavailable}"
    );
    // `vmscope info` says the same: one detection serves both.
    let info = daemon
        .cli()
        .args(["info", "--json"])
        .output()
        .expect("run vmscope info");
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).expect("info JSON");
    assert_eq!(info["hardware_events"], has_pmu, "{info}");

    // `vmscope report --stats` prints the same numbers alone, in VMProfiler's words.
    let id = report["session_id"].as_u64().unwrap();
    let out = daemon
        .cli()
        .args(["report", "--stats", &id.to_string()])
        .output()
        .expect("run vmscope report");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("**Events**"), "{text}");
    assert!(
        text.contains(&format!(
            "voluntary (went to sleep) {} (",
            grouped(voluntary)
        )),
        "{text}"
    );
    assert!(
        !text.contains("% of generated vm code"),
        "statistics alone: {text}"
    );
}

#[test]
fn fresh_memory_is_minor_faults_and_perf_stat_agrees() {
    let daemon = Daemon::start();
    let args = ["touch", "100"];
    let report = record_events(&daemon, &args);
    let minor = total(&report, "minor_faults");
    // 100 MiB of 4 KiB pages.
    assert!(minor >= 25_600, "{minor} minor faults for 100 MiB touched");
    let perf = perf_stat(&args, "minor-faults");
    let perf_minor = perf_count(&perf, "minor-faults");
    eprintln!("100 MiB touched: {minor} minor faults, perf stat {perf_minor}");
    assert!(
        near(minor, perf_minor),
        "vmscope counted {minor} minor faults, perf stat {perf_minor}"
    );
}

/// `n` as the text report writes counts: digits grouped by thousands with commas.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}
