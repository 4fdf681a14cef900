//! The demo JIT VM (tests/jitvm) under the profiler: the full VMProfiler report with bytecode
//! ranges, inlined time, PIC kinds, both ways of publishing, and attribution checked sample by
//! sample against the VM's own log while compaction moves code and reuses its addresses.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

use vmscope_proto::v1::{Section, StartSessionRequest};
use vmscope_tests::{Daemon, binary, json_report, read_code_log, shared_tempdir, stop_and_profile};

/// `vmscope --socket S record --format json -- jitvm ARGS`: the generated section's rows.
///
/// The socket is given as an option only, never in the environment: the VM must learn it from
/// vmscope (VMSCOPE_SOCKET in the recorded command's environment), or it runs unprofiled and
/// every test here finds anonymous code instead of its methods.
fn record(daemon: &Daemon, args: &[&str]) -> Vec<serde_json::Value> {
    let out = daemon
        .cli()
        .env_remove("VMSCOPE_SOCKET")
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["record", "--format", "json", "--"])
        .arg(binary("jitvm"))
        .args(args)
        .output()
        .expect("run vmscope");
    let report = json_report(&out);
    // What vmscope and the VM said, for failure messages.
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["section"] == "generated")
        .unwrap_or_else(|| panic!("no generated vm code: {report}"))["rows"]
        .as_array()
        .unwrap()
        .clone()
}

fn row<'a>(rows: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no row {name}: {rows:#?}"))
}

fn samples(v: &serde_json::Value) -> u64 {
    v["samples"].as_u64().unwrap()
}

#[test]
fn tiny_benchmarks_read_like_vmprofiler() {
    let daemon = Daemon::start();
    let rows = record(&daemon, &["tiny", "--seconds", "2"]);
    let all: u64 = rows.iter().map(samples).sum();
    let fib = row(&rows, "SmallInteger>>benchFib");
    assert_eq!(fib["kind"], "method");
    assert_eq!(fib["code_map"], "vm");
    assert!(samples(fib) * 2 > all, "benchFib should lead: {rows:#?}");
    let ranges = fib["ranges"].as_array().unwrap();
    assert!(ranges.len() >= 5, "benchFib's bytecode ranges: {ranges:?}");
    assert!(ranges[0]["label"].as_str().unwrap().starts_with("1->"));
    let sum: u64 = ranges.iter().map(samples).sum();
    assert_eq!(sum, samples(fib), "ranges add up to the method");
    let sieve = row(&rows, "SmallInteger>>benchmark");
    assert!(!sieve["ranges"].as_array().unwrap().is_empty());
    assert!(samples(row(&rows, "Array>>at:put:")) > 0);
}

#[test]
fn a_hot_loop_lands_in_its_bytecode_range() {
    // The loop's span from the VM's own listing: from the back jump's target to the back jump.
    let listing = Command::new(binary("jitvm"))
        .args(["loop", "--listing"])
        .output()
        .unwrap();
    let listing = String::from_utf8(listing.stdout).unwrap();
    let (back, head) = listing
        .lines()
        .find_map(|l| {
            let l = l.trim();
            let rest = l.strip_suffix("(back jump)")?;
            let mut words = rest.split_whitespace();
            let pc: u32 = words.next()?.parse().ok()?;
            let target: u32 = words.nth(1)?.parse().ok()?;
            Some((pc, target))
        })
        .expect("a back jump in Loop>>hot");

    let daemon = Daemon::start();
    let rows = record(&daemon, &["loop", "--seconds", "2"]);
    let hot = row(&rows, "Loop>>hot");
    let in_loop = |label: &str| -> bool {
        // Labels print pcs 1-based: "a->b"; a range inside the loop starts at or after its head
        // and before the back jump, and does not run to the end of the method.
        let (from, to) = label.split_once("->").expect("a bytecode range");
        let from: u32 = from.parse().expect("a pc");
        to != "end" && from > head && from <= back + 1
    };
    assert!(samples(hot) > 300, "too few samples in Loop>>hot: {hot:#}");
    let ranges = hot["ranges"].as_array().unwrap();
    let looping: u64 = ranges
        .iter()
        .filter(|r| in_loop(r["label"].as_str().unwrap()))
        .map(samples)
        .sum();
    assert!(
        looping * 10 >= samples(hot) * 8,
        "{looping} of {} samples in the loop (pcs {head}..{back}): {ranges:#?}",
        samples(hot)
    );
}

#[test]
fn inlined_methods_get_their_time() {
    let daemon = Daemon::start();
    let rows = record(&daemon, &["inline", "--opt", "--seconds", "3"]);
    let run = rows
        .iter()
        .find(|r| r["name"].as_str().unwrap().starts_with("Inline>>run") && r["optimised"] == true)
        .unwrap_or_else(|| panic!("no optimised Inline>>run: {rows:#?}"));
    let inlined = run["inlined"].as_array().unwrap();
    let of = |name: &str| {
        inlined
            .iter()
            .filter(|m| m["name"] == name)
            .map(samples)
            .sum::<u64>() as f64
    };
    let (heavy, light) = (of("Inline>>heavy"), of("Inline>>light"));
    assert!(heavy + light > 500.0, "{inlined:#?}");
    let share = 100.0 * heavy / (heavy + light);
    assert!(
        (share - 70.0).abs() <= 5.0,
        "heavy holds {share:.1}% of the inlined time, 70% by construction: {inlined:#?}"
    );
}

/// The span of `method`'s innermost loop in the VM's own listing of `workload`: from the
/// target of its back jump with the latest target to that back jump (0-based pcs).
fn inner_loop(workload: &str, method: &str) -> (u32, u32) {
    let listing = Command::new(binary("jitvm"))
        .args([workload, "--listing"])
        .output()
        .unwrap();
    let listing = String::from_utf8(listing.stdout).unwrap();
    listing
        .split("\n\n")
        .find(|m| m.starts_with(&format!("{method} ")))
        .unwrap_or_else(|| panic!("no {method} in the listing:\n{listing}"))
        .lines()
        .filter_map(|l| {
            let mut words = l.trim().strip_suffix("(back jump)")?.split_whitespace();
            let pc: u32 = words.next()?.parse().ok()?;
            let target: u32 = words.nth(1)?.parse().ok()?;
            Some((target, pc))
        })
        .max()
        .unwrap_or_else(|| panic!("no back jump in {method}"))
}

/// Optimised code's ranges name the method inlined there and give its own bytecode pcs
/// (`Inline>>heavy 33->41`), as the VM's pc map says, and neighbours never repeat a label. On
/// main, every range of heavy's inlined body read `2->2`, and light's `7->7`.
#[test]
fn optimised_ranges_name_the_inlined_methods() {
    let (head, back) = inner_loop("inline", "Inline>>heavy");
    let daemon = Daemon::start();
    let rows = record(&daemon, &["inline", "--seconds", "3"]);
    let run = rows
        .iter()
        .find(|r| r["name"] == "Inline>>run" && r["optimised"] == true)
        .unwrap_or_else(|| panic!("no optimised Inline>>run: {rows:#?}"));
    let ranges: Vec<(&str, u64)> = run["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["label"].as_str().unwrap(), samples(r)))
        .collect();
    for pair in ranges.windows(2) {
        assert_ne!(pair[0].0, pair[1].0, "a label repeats: {ranges:#?}");
    }
    // Each label is the method's own `a->b`, or an inlined method's.
    let pcs = |label: &str| -> Option<(u32, Option<u32>)> {
        let (from, to) = label.split_once("->")?;
        Some((from.parse().ok()?, to.parse().ok()))
    };
    for (label, _) in &ranges {
        let own = label
            .strip_prefix("Inline>>heavy ")
            .or_else(|| label.strip_prefix("Inline>>light "))
            .unwrap_or(label);
        assert!(pcs(own).is_some(), "{label:?}: {ranges:#?}");
    }
    // An inlined method's ranges hold exactly the time attributed to it.
    let inlined = |method: &str| -> u64 {
        run["inlined"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["name"] == method)
            .map(samples)
            .sum()
    };
    let in_ranges = |method: &str| -> Vec<(&str, u64)> {
        ranges
            .iter()
            .filter_map(|&(label, n)| Some((label.strip_prefix(method)?.strip_prefix(' ')?, n)))
            .collect()
    };
    for method in ["Inline>>heavy", "Inline>>light"] {
        let sum: u64 = in_ranges(method).iter().map(|&(_, n)| n).sum();
        assert!(inlined(method) > 200, "{method}: {run:#}");
        assert_eq!(sum, inlined(method), "{method}: {ranges:#?}");
    }
    // heavy's inner loop, from the VM's listing, holds most of heavy's time, in heavy's pcs
    // (1-based in labels).
    let heavy = in_ranges("Inline>>heavy");
    let looping: u64 = heavy
        .iter()
        .filter(|&&(label, _)| {
            pcs(label).is_some_and(|(from, to)| from > head && from <= back + 1 && to.is_some())
        })
        .map(|&(_, n)| n)
        .sum();
    assert!(
        looping * 10 >= inlined("Inline>>heavy") * 8,
        "{looping} samples in heavy's loop (pcs {head}..{back}): {heavy:#?}"
    );
}

#[test]
fn pics_are_reported_with_their_kind() {
    let daemon = Daemon::start();
    let rows = record(&daemon, &["poly", "--seconds", "2"]);
    for kind in ["closed_pic", "open_pic"] {
        assert!(
            rows.iter().any(|r| r["kind"] == kind && samples(r) > 0),
            "no sampled {kind}: {rows:#?}"
        );
    }
}

#[test]
fn code_map_files_work_like_the_stream() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let dir_arg = dir.path().to_str().unwrap();
    let rows = record(
        &daemon,
        &[
            "tiny",
            "--seconds",
            "2",
            "--publish",
            "file",
            "--codemap-dir",
            dir_arg,
        ],
    );
    let fib = row(&rows, "SmallInteger>>benchFib");
    assert_eq!(fib["code_map"], "vm");
    assert!(!fib["ranges"].as_array().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribution_is_right_at_every_sample_while_code_moves() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let log = dir.path().join("code.log");
    let vm_err = dir.path().join("jitvm.err");
    let mut vm = Command::new(binary("jitvm"))
        .stderr(std::fs::File::create(&vm_err).unwrap())
        .args([
            "compact",
            "--compact-every-ms",
            "5",
            "--seconds",
            "6",
            "--ready",
        ])
        .arg("--code-log")
        .arg(&log)
        .env("VMSCOPE_SOCKET", &daemon.socket)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start jitvm");
    let mut line = String::new();
    BufReader::new(vm.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");

    let mut client = daemon.client().await;
    let session = client
        .start_session(StartSessionRequest {
            pids: vec![vm.id()],
            frequency_hz: Some(1400),
            keep_samples: 1_000_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let profile = stop_and_profile(&mut client, session.id).await;
    let _ = vm.kill();
    let _ = vm.wait();
    let counters = client
        .get_daemon_info(vmscope_proto::v1::GetDaemonInfoRequest {})
        .await
        .unwrap()
        .into_inner()
        .counters;
    eprintln!(
        "code map counters: late {} refused {} changes {}",
        counters["code_map_changes_late"],
        counters["code_map_changes_refused"],
        counters["code_map_changes"]
    );
    assert_eq!(
        counters["jit_samples_late"], 0,
        "samples attributed ahead of their time"
    );
    assert_eq!(
        counters["code_map_changes_late"], 0,
        "changes applied after later samples"
    );
    assert_eq!(counters["code_map_changes_refused"], 0);
    let history = read_code_log(&log);
    assert!(
        history.moves > 100,
        "compaction should have moved code: {} moves",
        history.moves
    );

    let generated: Vec<_> = profile
        .samples
        .iter()
        .filter(|s| s.section() == Section::Generated)
        .collect();
    assert!(
        generated.len() > 1000,
        "{} samples in generated code",
        generated.len()
    );
    assert_eq!(profile.samples_not_kept, 0);
    let mut wrong = Vec::new();
    let mut snapshot_wrong = 0;
    let at_end: Vec<_> = history
        .placements
        .iter()
        .filter(|p| p.until == u64::MAX)
        .collect();
    for sample in &generated {
        let truth = history.lookup(sample.ip, sample.timestamp_ns);
        let truth_start = truth.map_or(0, |p| p.start);
        // Right place and right code: compaction slides other methods (and decoys) onto the
        // starts of earlier ones, so a start alone does not tell them apart.
        // (A closed PIC's name gets its cases: "area [Circle, Square]" for the VM's "area".)
        let same_code = |name: &str| {
            sample.name == name
                || sample
                    .name
                    .strip_prefix(name)
                    .is_some_and(|cases| cases.starts_with(" [") && cases.ends_with(']'))
        };
        if sample.code_start != truth_start || truth.is_some_and(|p| !same_code(&p.entry.name)) {
            wrong.push((
                sample.timestamp_ns,
                sample.ip,
                sample.name.clone(),
                truth.map(|p| p.entry.name.clone()),
            ));
        }
        // VMProfiler's way: one map, read at the end.
        let at_stop = at_end
            .iter()
            .find(|p| p.contains(sample.ip))
            .map(|p| &p.entry.name);
        if at_stop != truth.map(|p| &p.entry.name) {
            snapshot_wrong += 1;
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} samples misattributed, e.g. {:?}\njitvm said: {}\nvmscoped said: {}",
        wrong.len(),
        generated.len(),
        &wrong[..wrong.len().min(5)],
        std::fs::read_to_string(&vm_err).unwrap_or_default(),
        daemon.log()
    );
    // The contrast: a map read once at the end blames other code for many samples.
    let share = 100.0 * snapshot_wrong as f64 / generated.len() as f64;
    eprintln!(
        "time-correct attribution: 0 of {} wrong; a stop-time snapshot: {snapshot_wrong} wrong ({share:.1}%)",
        generated.len()
    );
    assert!(
        share >= 5.0,
        "the stop-time snapshot should misattribute: {share:.1}%"
    );
}

/// The demo's text report says only what happened: the VM's heap did not move, so no Memory
/// section of "+0 bytes" lines; its counters' rates are grouped like the counts ("Sends
/// 1,171,199,656 (233,982,503 per second)").
#[test]
fn the_demos_report_has_no_empty_sections_and_one_number_format() {
    let daemon = Daemon::start();
    let out = daemon
        .cli()
        .env_remove("VMSCOPE_SOCKET")
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["record", "-o", "-", "--"])
        .arg(binary("jitvm"))
        .args(["tiny", "--seconds", "2"])
        .output()
        .expect("run vmscope");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = text
        .split("**Events**\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section:\n{text}"));
    let sends = events
        .lines()
        .find(|l| l.starts_with("Sends "))
        .unwrap_or_else(|| panic!("no Sends line:\n{text}"));
    let rate = sends
        .split('(')
        .nth(1)
        .and_then(|r| r.strip_suffix(" per second)"))
        .unwrap_or_else(|| panic!("no rate in {sends:?}"));
    assert!(rate.len() > 3 && rate.contains(','), "{sends:?}");
    // A Memory section, if the heap moved at all, lists only what moved.
    if let Some(memory) = text.split("**Memory**\n").nth(1) {
        let lines: Vec<&str> = memory.lines().take_while(|l| !l.is_empty()).collect();
        assert!(!lines.is_empty(), "{text}");
        for line in lines {
            assert!(
                !line.contains(" +0 ") || line.contains("(low"),
                "a gauge that did not move: {line:?}\n{text}"
            );
        }
    }
    assert!(!text.contains(" 0 hz per busy CPU"), "{text}");
}
