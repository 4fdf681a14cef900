//! Code maps that come late, and generated code no map explains.
//!
//! A timestamped map that arrives late (a jitdump V8 flushes at exit, a code map file written at
//! exit) still names the samples taken before, in the map of their time; a perf map read after
//! samples that nothing else explained names them too, marked as a later snapshot; and what
//! stays unexplained says why.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use vmscope_tests::{Daemon, binary, fixtures, json_report, shared_tempdir};

fn generated_rows(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["section"] == "generated")
        .map(|s| s["rows"].as_array().unwrap().clone())
        .unwrap_or_default()
}

fn n(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// Samples of the generated rows whose name contains `name`.
fn samples_named(rows: &[serde_json::Value], name: &str) -> u64 {
    rows.iter()
        .filter(|r| r["name"].as_str().unwrap().contains(name))
        .map(|r| n(r, "samples"))
        .sum()
}

/// `vmscope record --format json ARGS`, its report.
fn record(daemon: &Daemon, args: &[&str], dir: &Path) -> serde_json::Value {
    let out = daemon
        .cli()
        .args(["record", "--format", "json"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run vmscope");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    json_report(&out)
}

/// `vmscope report ID --format json`.
fn report(daemon: &Daemon, id: u64) -> serde_json::Value {
    let out = daemon
        .cli()
        .args(["report", &id.to_string(), "--format", "json"])
        .output()
        .expect("run vmscope");
    json_report(&out)
}

/// `fakejit SECONDS DIR MODE` recorded to its end: its report.
fn record_fakejit(daemon: &Daemon, seconds: &str, mode: &str) -> serde_json::Value {
    let dir = shared_tempdir();
    let fakejit = fixtures().fakejit.to_str().unwrap().to_owned();
    let dir_arg = dir.path().to_str().unwrap().to_owned();
    let report = record(
        daemon,
        &["--", &fakejit, seconds, &dir_arg, mode],
        dir.path(),
    );
    if let Some(pid) = report["targets"][0]["pid"].as_u64() {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    report
}

/// The samples of unexplained generated code ("[anon]") and why, as the report says.
fn unexplained(report: &serde_json::Value) -> Vec<(String, u64)> {
    report["symbolization_issues"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["module"] == "[anon]")
        .map(|i| (i["reason"].as_str().unwrap().to_owned(), n(i, "samples")))
        .collect()
}

#[test]
fn unexplained_generated_code_says_why() {
    let daemon = Daemon::start();
    for (mode, why) in [
        ("none", "no code map (perf map, jitdump or VM publication)"),
        ("perfmap-other", "code map (perf map) has no entry for"),
        (
            "perfmap-outside",
            "entry was refused: outside every executable mapping",
        ),
    ] {
        let report = record_fakejit(&daemon, "1", mode);
        let total = n(&report, "total_samples");
        let issues = unexplained(&report);
        let said: u64 = issues
            .iter()
            .filter(|(reason, _)| reason.contains(why))
            .map(|(_, samples)| samples)
            .sum();
        assert!(
            said * 10 >= total * 8,
            "{mode}: {said} of {total} samples say {why:?}: {issues:?}"
        );
    }
}

/// A perf map written while the session runs names the samples taken before it, marked as a
/// later snapshot, and those after it on time.
#[test]
fn a_perf_map_written_later_names_earlier_samples_marked_as_such() {
    let daemon = Daemon::start();
    let report = record_fakejit(&daemon, "2", "perfmap-late:0.8");
    let total = n(&report, "total_samples");
    let rows = generated_rows(&report);
    let spin = rows
        .iter()
        .find(|r| r["name"] == "fake_jit_spin")
        .unwrap_or_else(|| panic!("fake_jit_spin not named: {rows:#?}"));
    let (named, later) = (n(spin, "samples"), n(spin, "later_snapshot_samples"));
    assert!(named * 10 >= total * 9, "{named} of {total} named");
    // About 0.8 s of 2 s before the map: 40%, with room for the daemon's discovery wait.
    assert!(
        later * 100 >= named * 20 && later * 100 <= named * 70,
        "{later} of {named} named from a later snapshot, expected about 40%"
    );
    // Every sample named so, as leaf or caller.
    assert!(n(&report, "jit_samples_from_later_snapshot") >= later);
}

/// A perf map that appears only after the session is said to have, not "no code map".
#[test]
fn a_code_map_after_the_session_is_said() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let mut jit = vmscope_tests::Running::start(
        Command::new(&fixtures().fakejit)
            .arg("6")
            .arg(dir.path())
            .arg("perfmap-late:2.5"),
    );
    let pid = jit.pid();
    let report1 = record(
        &daemon,
        &["--pid", &pid.to_string(), "--duration", "1"],
        dir.path(),
    );
    let id = n(&report1, "session_id");
    assert!(
        unexplained(&report1)
            .iter()
            .any(|(reason, _)| reason.contains("no code map")),
        "{:?}",
        unexplained(&report1)
    );
    std::thread::sleep(Duration::from_secs(3));
    let later = report(&daemon, id);
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    let issues = unexplained(&later);
    assert!(
        issues
            .iter()
            .any(|(reason, _)| reason.contains("(perf map) appeared only after the session")),
        "{issues:?}"
    );
    let _ = jit.child.kill();
}

/// Polls `vmscope report ID` until no sample awaits its code map (at most 5 s).
fn report_when_final(daemon: &Daemon, id: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let last = report(daemon, id);
        if n(&last, "jit_samples_awaiting_code_map") == 0 || Instant::now() > deadline {
            return last;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// jitvm holding its code map file's records until it exits, recorded with `--pid` for part of
/// its run: the session stops with its samples awaiting their map, and once jitvm exits they
/// are named, in the map of their time (no later-snapshot mark).
#[test]
fn a_code_map_file_written_at_exit_names_a_finished_sessions_samples_on_time() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let mut vm = Command::new(binary("jitvm"))
        .args(["tiny", "--seconds", "5", "--publish", "file-at-exit"])
        .arg("--codemap-dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("start jitvm");
    std::thread::sleep(Duration::from_millis(500));
    let first = record(
        &daemon,
        &["--pid", &vm.id().to_string(), "--duration", "2"],
        dir.path(),
    );
    let id = n(&first, "session_id");
    assert!(
        n(&first, "jit_samples_awaiting_code_map") > 0,
        "nothing awaits the map jitvm holds until it exits: {first}"
    );
    assert_eq!(first["complete"], false, "it may still change");
    assert!(vm.wait().unwrap().success());
    let last = report_when_final(&daemon, id);
    assert_eq!(n(&last, "jit_samples_awaiting_code_map"), 0, "{last}");
    assert_eq!(last["complete"], true);
    let rows = generated_rows(&last);
    let all: u64 = rows.iter().map(|r| n(r, "samples")).sum();
    let fib = samples_named(&rows, "SmallInteger>>benchFib");
    assert!(fib * 2 > all, "benchFib should lead: {rows:#?}");
    assert!(n(&last, "jit_samples_caught_up") > 0);
    assert_eq!(n(&last, "jit_samples_from_later_snapshot"), 0);
    assert_eq!(n(&last, "jit_samples_before_code_map"), 0);
}

/// `--pid --duration` on `node --perf-prof`, whose jitdump V8 buffers until it exits: the
/// session stops with its JIT samples awaiting their map, and once node exits its report names
/// the hot function, on time.
#[test]
fn a_jitdump_flushed_at_exit_names_a_finished_sessions_samples() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let hot_js = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/hot.js");
    let mut node = Command::new("node")
        .arg("--perf-prof")
        .arg(&hot_js)
        .arg("7")
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("node must be installed");
    std::thread::sleep(Duration::from_millis(1500));
    let first = record(
        &daemon,
        &["--pid", &node.id().to_string(), "--duration", "4"],
        dir.path(),
    );
    let id = n(&first, "session_id");
    // V8 writes its jitdump 2 MB at a time: usually after the session (at exit), sometimes
    // during it.
    if n(&first, "jit_samples_awaiting_code_map") > 0 {
        assert_eq!(first["complete"], false, "it may still change");
    }
    node.wait().expect("node exits");
    let last = report_when_final(&daemon, id);
    let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", node.id()));
    assert_eq!(n(&last, "jit_samples_awaiting_code_map"), 0, "{last}");
    assert_eq!(last["complete"], true);
    let total = n(&last, "total_samples");
    let rows = generated_rows(&last);
    let hot = samples_named(&rows, "hotLoop");
    assert!(
        hot * 2 >= total,
        "hotLoop holds {hot} of {total} samples: {rows:#?}"
    );
    assert!(n(&last, "jit_samples_caught_up") > 0);
    assert_eq!(n(&last, "jit_samples_from_later_snapshot"), 0);
}
