//! Exact counts from the VM's own counters (`CounterRegion`): the demo VM bumps one counter
//! per method in its prologues (and in inlined bodies and the interpreter), publishes where
//! they are, and the daemon reads them at the session's start and stop. `benchFib` answers the
//! number of its own activations (Squeak's definition), so the count must equal the answers'
//! sum exactly, run after run, while code is compacted every 5 ms too.

use std::process::{Child, Command, Stdio};

use vmscope_tests::{Daemon, binary, json_report_file, shared_tempdir};

/// `key=value` of the demo VM's end-of-run line.
fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} in {line}"))
        .parse()
        .unwrap()
}

fn bench_fib_count(report: &serde_json::Value) -> (u64, serde_json::Value) {
    let vm = &report["vm_statistics"][0];
    let region = vm["exact_counts"][0].clone();
    let count = region["counts"]
        .as_array()
        .unwrap_or_else(|| panic!("exact counts in {vm:#}"))
        .iter()
        .find(|c| c["name"] == "SmallInteger>>benchFib")
        .map_or(0, |c| c["count"].as_u64().unwrap());
    (count, region)
}

#[test]
fn bench_fib_activations_are_counted_exactly_in_every_run() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    // n, calls, compacting: small n with many calls, so that code is compacted every 5 ms
    // through the run; large n in a call or two.
    let runs: Vec<(u32, u64, bool)> = (20..=30)
        .map(|n| {
            let activations = fib(n);
            let calls = (3_000_000 / activations).max(1);
            (n, calls, n % 2 == 0)
        })
        .collect();
    let start = |(n, calls, compacting): (u32, u64, bool)| -> (Child, std::path::PathBuf) {
        let report = dir.path().join(format!("fib-{n}.json"));
        let mut command = daemon.cli();
        command
            .args(["record", "--format", "json", "-o"])
            .arg(&report)
            .arg("--")
            .arg(binary("jitvm"))
            .args([
                "fib",
                "--fib-n",
                &n.to_string(),
                "--iterations",
                &calls.to_string(),
            ]);
        if compacting {
            command.args(["--compact-every-ms", "5"]);
        }
        let child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("vmscope record");
        (child, report)
    };
    let mut compacted = 0;
    for pair in runs.chunks(2) {
        let started: Vec<_> = pair.iter().map(|&run| (run, start(run))).collect();
        for ((n, calls, compacting), (child, report)) in started {
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let line = stdout
                .lines()
                .find(|l| l.starts_with("jitvm Fib:"))
                .unwrap_or_else(|| panic!("the VM's line: {stdout}"));
            let answers = field(line, "checksum");
            assert_eq!(answers, calls * fib(n), "{line}");
            assert_eq!(field(line, "bench_fib_calls"), answers, "{line}");
            let report = json_report_file(&out, &report);
            let (count, region) = bench_fib_count(&report);
            assert_eq!(
                count, answers,
                "n = {n}, {calls} calls, compacting {compacting}: {region:#}\n{line}"
            );
            assert_eq!(region["note"], "", "{region:#}");
            assert_eq!(region["kind"], "activations");
            if compacting && field(line, "compactions") > 0 {
                compacted += 1;
            }
        }
    }
    assert!(compacted >= 3, "runs compacted while counted: {compacted}");
}

#[test]
fn a_running_vm_is_counted_between_reads_at_the_start_and_the_stop() {
    let daemon = Daemon::start();
    let mut vm = Command::new(binary("jitvm"))
        .args(["fib", "--seconds", "30", "--ready"])
        .env("VMSCOPE_SOCKET", &daemon.socket)
        .stdout(Stdio::piped())
        .spawn()
        .expect("jitvm");
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(vm.stdout.as_mut().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");
    // Its publication reaches the daemon before the session starts.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let dir = shared_tempdir();
    let file = dir.path().join("r.json");
    let out = daemon
        .cli()
        .args(["record", "--format", "json", "-d", "1", "-o"])
        .arg(&file)
        .args(["--pid", &vm.id().to_string()])
        .output()
        .unwrap();
    let _ = vm.kill();
    let _ = vm.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json_report_file(&out, &file);
    let (count, region) = bench_fib_count(&report);
    assert_eq!(region["start_source"], "read", "{region:#}");
    assert_eq!(region["end_source"], "read", "{region:#}");
    assert_eq!(region["note"], "", "{region:#}");
    // A second of benchFib: millions of activations, not the VM's whole life (30 s).
    let sends = report["vm_statistics"][0]["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "Sends")
        .map(|c| c["count"].as_u64().unwrap())
        .expect("the VM's Sends counter");
    assert!(
        count > 1_000_000,
        "{count} activations in a second: {region:#}"
    );
    // Its published Sends counter grew by as much, give or take its 20 ms publishing period.
    let ratio = count as f64 / sends as f64;
    assert!(
        (0.9..1.1).contains(&ratio),
        "{count} counted, {sends} published"
    );
}

fn fib(n: u32) -> u64 {
    if n < 2 {
        1
    } else {
        fib(n - 1) + fib(n - 2) + 1
    }
}
