//! A real JIT: Node.js, recorded as a user would, with no extra steps. With
//! `--perf-basic-prof` V8 writes a perf map; with `--perf-prof` a jitdump file with source
//! positions. Node is part of the machines this runs on; its absence fails the test.

use std::path::Path;

use vmscope_tests::{Daemon, json_report, shared_tempdir};

fn hot_js() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/hot.js")
        .display()
        .to_string()
}

/// Records `node FLAG hot.js 3` in `dir` and returns the JSON report's generated rows.
fn record_node(daemon: &Daemon, flag: &str, dir: &Path) -> Vec<serde_json::Value> {
    let out = daemon
        .cli()
        .args(["record", "--format", "json", "--", "node", flag])
        .arg(hot_js())
        .arg("3")
        .current_dir(dir)
        .output()
        .expect("run vmscope (node must be installed)");
    generated_rows(&json_report(&out))
}

/// The generated section's rows; removes the perf map V8 leaves behind.
fn generated_rows(report: &serde_json::Value) -> Vec<serde_json::Value> {
    if let Some(pid) = report["targets"][0]["pid"].as_u64() {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["section"] == "generated")
        .unwrap_or_else(|| panic!("no generated vm code section: {report}"))["rows"]
        .as_array()
        .unwrap()
        .clone()
}

fn samples(rows: &[serde_json::Value], filter: impl Fn(&serde_json::Value) -> bool) -> u64 {
    rows.iter()
        .filter(|r| filter(r))
        .map(|r| r["samples"].as_u64().unwrap())
        .sum()
}

#[test]
fn perf_basic_prof_names_the_hot_function() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let rows = record_node(&daemon, "--perf-basic-prof", dir.path());
    let all = samples(&rows, |_| true);
    let hot = samples(&rows, |r| r["name"].as_str().unwrap().contains("hotLoop"));
    assert!(all > 500, "{rows:#?}");
    assert!(
        hot * 2 >= all,
        "hotLoop holds {hot} of {all} generated samples, less than half: {rows:#?}"
    );
    let named = rows
        .iter()
        .find(|r| r["name"].as_str().unwrap().contains("hotLoop"))
        .unwrap();
    assert_eq!(named["code_map"], "perf map");
}

#[test]
fn perf_prof_jitdump_gives_source_ranges() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let rows = record_node(&daemon, "--perf-prof", dir.path());
    let all = samples(&rows, |_| true);
    let hot: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| r["name"].as_str().unwrap().contains("hotLoop"))
        .collect();
    let hot_samples: u64 = hot.iter().map(|r| r["samples"].as_u64().unwrap()).sum();
    assert!(hot_samples * 2 >= all, "{rows:#?}");
    assert!(hot.iter().all(|r| r["code_map"] == "jitdump"), "{hot:#?}");
    // Source ranges: labels name hot.js lines inside hotLoop (lines 4 to 8).
    let ranges: Vec<&str> = hot
        .iter()
        .flat_map(|r| r["ranges"].as_array().unwrap())
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    assert!(
        ranges
            .iter()
            .any(|l| l.contains("hot.js:") && (4..=8).any(|line| l.contains(&format!(":{line}:")))),
        "no source range in hotLoop's lines: {ranges:?}"
    );
    // Each range is labelled by its own position in hot.js, inside hotLoop (lines 3 to 9),
    // never an interval between two positions (V8's are not in code order, so intervals ran
    // backwards: hot.js:6:34->5:3), and `start` for the code before the first.
    let file = hot_js();
    for label in &ranges {
        if *label == "start" {
            continue;
        }
        let position = label
            .strip_prefix(&file)
            .and_then(|rest| rest.strip_prefix(':'))
            .and_then(|rest| rest.split_once(':'))
            .and_then(|(line, column)| {
                Some((line.parse::<u32>().ok()?, column.parse::<u32>().ok()?))
            });
        assert!(
            position.is_some_and(|(line, _)| (3..=9).contains(&line)),
            "{label:?} is not one position in hotLoop: {ranges:?}"
        );
    }
}

/// Waits until process `pid` has used `seconds` of CPU time.
fn wait_for_cpu(pid: u32, seconds: f64) {
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let used = std::fs::read(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|text| vmscope_parse::stat::parse_stat(&text).ok())
            .map_or(0.0, |stat| stat.cpu_ticks() as f64 / ticks_per_second);
        if used >= seconds {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} used only {used} s of CPU in 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `--pid` on a node that has run for a while: the code it compiled before the session is
/// named from the perf map or jitdump as they already are. V8 buffers its jitdump (2 MB of
/// stdio): records of a running node reach the file when it exits, which the stop waits for.
#[test]
fn a_running_node_is_named_by_pid() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    for (flag, code_map) in [
        ("--perf-basic-prof", "perf map"),
        ("--perf-prof", "jitdump"),
    ] {
        let mut node = std::process::Command::new("node")
            .arg(flag)
            .arg(hot_js())
            .arg("3")
            .current_dir(dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("run node");
        // Until node has run hot for half a CPU-second (hotLoop compiled and in the map; on a
        // busy host, starting node alone can take seconds): then it exits within 3 s, and
        // flushes its buffered jitdump well within the 5 s samples wait for it.
        wait_for_cpu(node.id(), 0.5);
        let out = daemon
            .cli()
            .args(["record", "--format", "json", "--duration", "1", "--pid"])
            .arg(node.id().to_string())
            .output()
            .expect("run vmscope");
        let _ = node.wait();
        let rows = generated_rows(&json_report(&out));
        let all = samples(&rows, |_| true);
        let hot = samples(&rows, |r| {
            r["name"].as_str().unwrap().contains("hotLoop") && r["code_map"] == code_map
        });
        assert!(all > 300, "{flag}: {rows:#?}");
        assert!(
            hot * 2 >= all,
            "{flag}: hotLoop holds {hot} of {all} generated samples, less than half: {rows:#?}"
        );
    }
}

/// A map that keeps growing with entries the daemon refuses (V8 lists bytecode, which is not
/// executable) is said in the log once, with the count and an example, not a line per read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_perf_map_entries_are_summarised_once() {
    use vmscope_proto::v1::GetDaemonInfoRequest;
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/new_functions.js");
    let out = daemon
        .cli()
        .args([
            "record",
            "--format",
            "json",
            "--",
            "node",
            "--perf-basic-prof",
        ])
        .arg(script)
        .arg("1.5")
        .current_dir(dir.path())
        .output()
        .expect("run vmscope (node must be installed)");
    let report = json_report(&out);
    let pid = report["targets"][0]["pid"].as_u64().unwrap();
    generated_rows(&report);
    let log = daemon.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refused") && l.contains(&format!("perf-{pid}.map")))
        .collect();
    let refused = daemon
        .client()
        .await
        .get_daemon_info(GetDaemonInfoRequest {})
        .await
        .unwrap()
        .into_inner()
        .counters["code_map_refused_outside_executable"];
    assert!(refused >= 100, "{refused} entries refused; log:\n{log}");
    assert_eq!(
        lines.len(),
        1,
        "one summary line for the perf map:\n{}",
        lines.join("\n")
    );
    assert!(
        lines[0].contains(&format!("{refused} entries refused"))
            && lines[0].contains("outside the process's executable mappings (e.g. "),
        "{}",
        lines[0]
    );
}
