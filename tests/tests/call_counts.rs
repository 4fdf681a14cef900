//! Exact call counts of native functions (`record --count MODULE:FUNCTION`): a uprobe at the
//! function's entry in each target, counting every thread in the kernel. `mallocs N [THREADS]`
//! calls malloc exactly N times, so the count must be N, whatever the threads; `check
//! --max-count` compares it exactly.

use std::os::unix::process::CommandExt as _;

use vmscope_tests::{Daemon, NOBODY, fixtures, json_report};

fn calls(report: &serde_json::Value, function: &str) -> serde_json::Value {
    report["call_counts"]
        .as_array()
        .unwrap_or_else(|| panic!("call_counts in {report:#}"))
        .iter()
        .find(|c| c["function"] == function)
        .unwrap_or_else(|| panic!("{function} in {:#}", report["call_counts"]))
        .clone()
}

#[test]
fn malloc_is_counted_exactly_in_every_thread_and_checked_exactly() {
    let daemon = Daemon::start();
    let mut sessions = Vec::new();
    for threads in ["1", "4"] {
        let out = daemon
            .cli()
            .args([
                "record",
                "--format",
                "json",
                "--count",
                "libc.so.6:malloc",
                "--count",
                "libc.so.6:no_such_function",
                "--",
            ])
            .arg(&fixtures().mallocs)
            .args(["1000000", threads])
            .output()
            .expect("vmscope record");
        let report = json_report(&out);
        let malloc = calls(&report, "libc.so.6:malloc");
        assert_eq!(malloc["calls"], 1_000_000, "{threads} threads: {malloc:#}");
        assert_eq!(malloc["note"], "");
        assert!(
            malloc["path"].as_str().unwrap().ends_with("/libc.so.6"),
            "{malloc:#}"
        );
        // A function the library does not have: said so, the rest counted as asked.
        let missing = calls(&report, "libc.so.6:no_such_function");
        assert_eq!(missing["calls"], 0);
        assert!(
            missing["note"]
                .as_str()
                .unwrap()
                .contains("no function no_such_function in"),
            "{missing:#}"
        );
        sessions.push(report["session_id"].as_u64().unwrap().to_string());
    }

    // The text report lists them under Counts.
    let text = daemon
        .cli()
        .args(["report", &sessions[1], "--stats"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("**Counts**: calls (exact"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("libc.so.6:malloc") && l.ends_with("1,000,000")),
        "{text}"
    );

    // check: exactly.
    let check = |max: &str| {
        daemon
            .cli()
            .args(["check", &sessions[1], "--max-count"])
            .arg(format!("libc.so.6:malloc={max}"))
            .output()
            .unwrap()
    };
    let held = check("1e6");
    assert_eq!(
        held.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&held.stdout)
    );
    let failed = check("999999");
    assert_eq!(failed.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&failed.stdout),
        "FAILED: libc.so.6:malloc 1000000 calls (exact): more than the allowed 999999, by 1\n"
    );
    // A function the profile did not count cannot be checked.
    let out = daemon
        .cli()
        .args(["check", &sessions[1], "--max-count", "libc.so.6:free=1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("counted no calls of libc.so.6:free"));

    // diff shows both sides' counts.
    let diff = daemon
        .cli()
        .args(["diff", &sessions[0], &sessions[1], "--format", "json"])
        .output()
        .unwrap();
    let diff: serde_json::Value = serde_json::from_slice(&diff.stdout).unwrap();
    assert_eq!(
        diff["calls"][0],
        serde_json::json!({"function": "libc.so.6:malloc", "base": 1000000, "new": 1000000})
    );
}

#[test]
fn a_user_counts_only_in_files_it_may_read() {
    let daemon = Daemon::start();
    // /etc/shadow: no ELF and not nobody's to read; the daemon must not even parse it for them.
    let out = daemon
        .cli()
        .args([
            "record",
            "--format",
            "json",
            "--count",
            "/etc/shadow:main",
            "--count",
            "libc.so.6:malloc",
            "--",
        ])
        .arg(&fixtures().mallocs)
        .arg("1000")
        .uid(NOBODY)
        .output()
        .expect("vmscope record as nobody");
    let report = json_report(&out);
    let refused = calls(&report, "/etc/shadow:main");
    assert_eq!(
        refused["note"], "/etc/shadow is not a file its owner's session may read",
        "{refused:#}"
    );
    assert_eq!(calls(&report, "libc.so.6:malloc")["calls"], 1000);
}
