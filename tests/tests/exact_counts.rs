//! Exact counts from the VM's own counters (`CounterRegion`): the demo VM bumps one counter
//! per method in its prologues (and in inlined bodies and the interpreter), publishes where
//! they are, and the daemon reads them at the session's start and stop. `benchFib` answers the
//! number of its own activations (Squeak's definition), so the count must equal the answers'
//! sum exactly, run after run, while code is compacted every 5 ms too.
//!
//! The VM's thread also keeps one send counter of its own (`ThreadCounter`), bumped beside
//! the per-method counters, which the kernel reads with each sample: the sends between two
//! samples weigh the second's stack.

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

/// The sends-weighted stacks of `jitvm tiny` (benchFib and the sieve in turn, phases of a few
/// milliseconds) add up to the activations the VM counted during the session, and put the
/// share of them under `benchFib` and `benchmark` that its per-method counts do.
///
/// A sample carries the sends since the thread's previous one: one that lands in the VM's
/// driver between two calls (its own Rust, unoptimised in the tests) carries the sends of the
/// call before it. `32 benchFib` (7 million activations a call rather than 25's 243,000)
/// makes those samples few enough for the 1-point bound: 1.7% of the samples, and as much of
/// the sends, at 25; 1.3% at 28; 0.5–0.8% at 30.
#[test]
fn sends_weigh_each_stack_as_the_vm_counted_them() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let file = dir.path().join("tiny.json");
    let out = daemon
        .cli()
        .args(["record", "--call-graph", "fp", "--format", "json", "-o"])
        .arg(&file)
        .arg("--")
        .arg(binary("jitvm"))
        .args(["tiny", "--fib-n", "32", "--seconds", "2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json_report_file(&out, &file);
    let types = report["sample_types"].as_array().expect("sample types");
    let at = |name: &str| types.iter().position(|t| t == name);
    let (sends_at, samples_at) = (
        at("sends").unwrap_or_else(|| panic!("no sends among {types:?}")),
        at("samples").unwrap(),
    );
    let frames = report["frames"].as_array().unwrap();
    let names_of = |stack: &serde_json::Value| -> Vec<String> {
        stack["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                frames[f.as_u64().unwrap() as usize]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned()
            })
            .collect()
    };
    let under = |wanted: &[&str], value_at: usize| -> (u64, u64) {
        let mut sum = (0, 0);
        for stack in report["stacks"].as_array().unwrap() {
            let value = stack["values"][value_at].as_u64().unwrap();
            sum.1 += value;
            if names_of(stack).iter().any(|n| wanted.contains(&n.as_str())) {
                sum.0 += value;
            }
        }
        sum
    };
    const FIB: &str = "SmallInteger>>benchFib";
    const SIEVE: &str = "SmallInteger>>benchmark";
    let (tiny_sends, all_sends) = under(&[FIB, SIEVE], sends_at);
    let (fib_sends, _) = under(&[FIB], sends_at);
    let (fib_samples, all_samples) = under(&[FIB], samples_at);
    // The VM's own count of the same session: activations per method.
    let (_, region) = bench_fib_count(&report);
    let counts: Vec<(String, u64)> = region["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["count"].as_u64().unwrap(),
            )
        })
        .collect();
    let counted: u64 = counts.iter().map(|(_, n)| n).sum();
    let counted_tiny: u64 = counts
        .iter()
        .filter(|(name, _)| name == FIB || name == SIEVE)
        .map(|(_, n)| n)
        .sum();
    // What holds the rest, for the failure message.
    let mut outside: Vec<(u64, u64, Vec<String>)> = report["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| !names_of(s).iter().any(|n| n == FIB || n == SIEVE))
        .map(|s| {
            let value = |at: usize| s["values"][at].as_u64().unwrap();
            (value(sends_at), value(samples_at), names_of(s))
        })
        .collect();
    outside.sort_by(|a, b| b.cmp(a));
    outside.truncate(8);
    let share = |part: u64, whole: u64| 100.0 * part as f64 / whole.max(1) as f64;
    let (tree, vm) = (share(tiny_sends, all_sends), share(counted_tiny, counted));
    let summary = format!(
        "sends under benchFib and benchmark {tree:.2}% (benchFib {:.2}%, samples under it \
         {:.2}%) of {all_sends} sends in stacks; the VM counted {vm:.2}% of {counted}; \
         the most sends outside (sends, samples, frames): {outside:#?}",
        share(fib_sends, all_sends),
        share(fib_samples, all_samples)
    );
    eprintln!("{summary}");
    assert!(tree >= 99.0, "{summary}");
    assert!((tree - vm).abs() <= 1.0, "{summary}");
    // Every send of the session is on some stack, but those before the daemon handed the
    // thread's counter to the kernel (the VM publishes it as it starts: a few tens of
    // milliseconds of its two seconds), before the first sample that read it, and after the
    // last.
    let whole = share(all_sends, counted);
    assert!((95.0..=100.0).contains(&whole), "{whole:.2}%: {summary}");

    // The text call tree weighs by them when asked.
    let id = report["session_id"].as_u64().unwrap().to_string();
    let text = daemon
        .cli()
        .args(["report", &id, "--tree", "--weight", "sends"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("(sends)") && text.contains(FIB), "{text}");
}

fn fib(n: u32) -> u64 {
    if n < 2 {
        1
    } else {
        fib(n - 1) + fib(n - 2) + 1
    }
}
