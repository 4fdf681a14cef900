//! One recorded profile, rendered in every format the CLI writes and read back from each: the
//! gRPC `Profile`, the text report, JSON, pprof (read by `go tool pprof -top`), folded stacks,
//! the SVG flame graph and the call tree. Every format must tell the same totals and the same
//! top functions with the same counts: they are renderings of one profile, and a number
//! computed twice, differently, shows here as a mismatch.
//!
//! The fixture is `hotspots`, whose split is known by construction (hot_a, hot_b and hot_c take
//! 60%, 30% and 10% of its loop), so the top three rows and their order are fixed.
//!
//! The second records `threads`, whose two named threads take turns burning 8 ms and 4 ms of
//! their own CPU time each in a function of their own: each sample must be under its thread,
//! with its name, in the gRPC profile, JSON and pprof alike, and the threads' split 2:1.
//!
//! The third test makes the kernel throttle sampling for real: it lowers
//! `kernel.perf_event_max_sample_rate` under a running session, as the kernel itself does when
//! interrupts take too long, and checks that the warning reaches gRPC and JSON clients, not
//! only the text report. The sysctl is global, so the two tests take turns.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use vmscope_proto::v1::{Profile, Section, StartSessionRequest};
use vmscope_tests::{Daemon, Running, fixtures, go_pprof, rows, stop_and_profile};

/// The top functions of `hotspots`, most samples first.
const TOP: [&str; 3] = ["hot_a", "hot_b", "hot_c"];

/// Held by each test for its whole run: the throttling test lowers a global sysctl, which would
/// throttle the other test's session too.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const MAX_SAMPLE_RATE: &str = "/proc/sys/kernel/perf_event_max_sample_rate";

/// Puts `kernel.perf_event_max_sample_rate` back as it was when dropped, even when the test
/// panics.
struct MaxSampleRate(String);

impl MaxSampleRate {
    fn lower_to(rate: u32) -> MaxSampleRate {
        let was = std::fs::read_to_string(MAX_SAMPLE_RATE).expect("read the sysctl");
        std::fs::write(MAX_SAMPLE_RATE, rate.to_string())
            .unwrap_or_else(|e| panic!("lowering {MAX_SAMPLE_RATE} needs root: {e}"));
        MaxSampleRate(was.trim().to_owned())
    }
}

impl Drop for MaxSampleRate {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(MAX_SAMPLE_RATE, &self.0) {
            eprintln!("could not restore {MAX_SAMPLE_RATE} to {}: {e}", self.0);
        }
    }
}

/// Records `program` (a fixture run for 30 s) at 1400 Hz with frame-pointer stacks for
/// `seconds`, lowering the kernel's sampling ceiling to `throttle_to` Hz after the first 0.3 s
/// when given, and returns the session's id and its final gRPC profile.
async fn record(
    daemon: &Daemon,
    program: &Path,
    seconds: f64,
    throttle_to: Option<u32>,
) -> (u64, Profile) {
    let target = Running::start(Command::new(program).arg("30"));
    let mut client = daemon.client().await;
    let session = client
        .start_session(StartSessionRequest {
            pids: vec![target.pid()],
            frequency_hz: Some(1400),
            call_graph: vmscope_proto::v1::CallGraph::Fp as i32,
            ..Default::default()
        })
        .await
        .expect("start a session")
        .into_inner();
    let _ceiling = match throttle_to {
        Some(rate) => {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let ceiling = MaxSampleRate::lower_to(rate);
            tokio::time::sleep(Duration::from_secs_f64(seconds - 0.3)).await;
            Some(ceiling)
        }
        None => {
            tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
            None
        }
    };
    let profile = stop_and_profile(&mut client, session.id).await;
    (session.id, profile)
}

/// Runs `vmscope report ID ARGS -o FILE` and returns what it wrote.
fn report_file(daemon: &Daemon, id: u64, args: &[&str], file: &Path) -> Vec<u8> {
    let out = daemon
        .cli()
        .args(["report", &id.to_string()])
        .args(args)
        .arg("-o")
        .arg(file)
        .output()
        .expect("run vmscope");
    assert!(
        out.status.success(),
        "vmscope report {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

fn report_text(daemon: &Daemon, id: u64, args: &[&str], dir: &Path, name: &str) -> String {
    String::from_utf8(report_file(daemon, id, args, &dir.join(name))).expect("UTF-8 report")
}

/// The number in the first `(N)` on `line`.
fn parenthesised_count(line: &str) -> Option<u64> {
    line.split('(')
        .skip(1)
        .find_map(|part| part.split(')').next()?.trim().parse().ok())
}

/// The text report's flat rows: name -> samples, from lines `pct (pct)  name  (N) ...`.
fn text_rows(text: &str) -> BTreeMap<String, u64> {
    let mut rows = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() >= 3 && fields[0].ends_with('%') && TOP.contains(&fields[2]) {
            let samples = parenthesised_count(&fields[3..].join(" "))
                .unwrap_or_else(|| panic!("a row's samples: {line:?}"));
            rows.insert(fields[2].to_owned(), samples);
        }
    }
    rows
}

/// The number before `words` in `text` ("2096 samples in the entire program").
fn count_before(text: &str, words: &str) -> u64 {
    let at = text
        .find(words)
        .unwrap_or_else(|| panic!("{words:?} not in:\n{text}"));
    let digits: String = text[..at]
        .trim_end()
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(|c| *c != ',')
        .collect::<String>()
        .chars()
        .rev()
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no count before {words:?} in:\n{text}"))
}

/// The flame graph's boxes for `name`: the samples in each title `name (N samples, P%)`.
fn svg_boxes(svg: &str, name: &str) -> Vec<u64> {
    let prefix = format!("<title>{name} (");
    svg.match_indices(&prefix)
        .map(|(at, _)| {
            let rest = &svg[at + prefix.len()..];
            let number = rest.split(' ').next().expect("a count").replace(',', "");
            number.parse().expect("a sample count in the title")
        })
        .collect()
}

/// pprof's `-top` rows: name -> (flat, cum), in the order printed.
fn pprof_top(output: &str) -> Vec<(String, u64, u64)> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in output.lines() {
        if line.trim_start().starts_with("flat ") {
            in_table = true;
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if in_table && fields.len() >= 6 {
            let count = |s: &str| s.parse().unwrap_or_else(|_| panic!("a count: {line:?}"));
            rows.push((fields[5..].join(" "), count(fields[0]), count(fields[3])));
        }
    }
    rows
}

#[tokio::test]
async fn every_format_tells_the_same_totals_and_top_rows() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let daemon = Daemon::start();
    let (id, profile) = record(&daemon, &fixtures().hotspots_pie, 1.5, None).await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let dir = dir.path();

    // gRPC: the profile itself.
    let total = profile.total_samples;
    // A loaded machine gives the fixture less CPU than 1.5 s: enough to rank three functions.
    assert!(total > 300, "1.5 s at 1400 Hz: {total} samples");
    let stack_total: u64 = profile.stacks.iter().map(|s| s.samples).sum();
    assert_eq!(stack_total, total, "every sample has its stack");
    let vanilla: Vec<_> = rows(&profile, Section::Vanilla).collect();
    let grpc_top: Vec<&str> = vanilla.iter().take(3).map(|r| r.name.as_str()).collect();
    assert_eq!(grpc_top, TOP, "gRPC rows, most samples first");
    let grpc: BTreeMap<&str, (u64, u64)> = vanilla
        .iter()
        .map(|r| (r.name.as_str(), (r.samples, r.inclusive_samples)))
        .collect();
    assert!(
        !profile.throttled,
        "an unthrottled session is not called throttled"
    );

    // Text: the header's totals and the rows' samples.
    let text = report_text(&daemon, id, &["--fold", "0"], dir, "report.txt");
    assert_eq!(count_before(&text, "samples in the entire program"), total);
    let text_rows = text_rows(&text);

    // JSON: totals, rows in order, and the stack table's sum.
    let json: serde_json::Value = serde_json::from_slice(&report_file(
        &daemon,
        id,
        &["--format", "json", "--fold", "0"],
        &dir.join("report.json"),
    ))
    .expect("JSON");
    assert_eq!(json["total_samples"], total);
    assert_eq!(json["throttled"], false);
    let json_rows = json["sections"]
        .as_array()
        .expect("sections")
        .iter()
        .find(|s| s["section"] == "vanilla")
        .expect("the vanilla section")["rows"]
        .as_array()
        .expect("rows")
        .clone();
    let json_top: Vec<&str> = json_rows[..3]
        .iter()
        .map(|r| r["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(json_top, TOP, "JSON rows, most samples first");
    let json_stack_total: u64 = json["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .map(|s| s["samples"].as_u64().expect("samples"))
        .sum();
    assert_eq!(json_stack_total, total, "JSON's stack table");

    // pprof, read by go tool pprof.
    let pprof = dir.join("profile.pb.gz");
    report_file(&daemon, id, &["--format", "pprof"], &pprof);
    let top = go_pprof(
        &["-top", "-sample_index=samples", "-nodefraction=0"],
        &pprof,
    );
    assert!(
        top.contains(&format!("Total samples = {total} ")),
        "pprof's total:\n{top}"
    );
    let pprof_rows = pprof_top(&top);
    let pprof_names: Vec<&str> = pprof_rows.iter().take(3).map(|r| r.0.as_str()).collect();
    assert_eq!(pprof_names, TOP, "go tool pprof -top:\n{top}");

    // Folded stacks: the total, and each function's self samples from the lines it ends.
    let folded = report_text(&daemon, id, &["--format", "folded"], dir, "stacks.folded");
    let mut folded_total = 0;
    let mut folded_self: BTreeMap<&str, u64> = BTreeMap::new();
    for line in folded.lines() {
        let (stack, count) = line.rsplit_once(' ').expect("STACK COUNT");
        let count: u64 = count.parse().expect("a count");
        folded_total += count;
        let leaf = stack.rsplit(';').next().expect("a leaf");
        *folded_self.entry(leaf).or_default() += count;
    }
    assert_eq!(folded_total, total, "folded stacks' sum");

    // The flame graph: its root, and each function's one box (hotspots calls each from main).
    let svg = report_text(&daemon, id, &["--format", "flamegraph"], dir, "flame.svg");
    assert_eq!(svg_boxes(&svg, "all"), [total], "the flame graph's root");

    // The call tree: its total and each function's inclusive samples.
    let tree = report_text(&daemon, id, &["--tree", "--fold", "0"], dir, "tree.txt");
    assert_eq!(count_before(&tree, "samples:"), total, "{tree}");

    for name in TOP {
        let (samples, inclusive) = grpc[name];
        assert!(
            samples > 0 && inclusive >= samples,
            "{name}: {samples}/{inclusive}"
        );
        let json_row = json_rows
            .iter()
            .find(|r| r["name"] == name)
            .expect("a JSON row");
        assert_eq!(json_row["samples"], samples, "JSON's {name}");
        assert_eq!(text_rows.get(name), Some(&samples), "text's {name}");
        let (_, flat, cum) = pprof_rows
            .iter()
            .find(|r| r.0 == name)
            .expect("a pprof row");
        assert_eq!(
            (*flat, *cum),
            (samples, inclusive),
            "pprof's {name}:\n{top}"
        );
        assert_eq!(folded_self.get(name), Some(&samples), "folded's {name}");
        assert_eq!(
            svg_boxes(&svg, name),
            [inclusive],
            "the flame graph's {name}"
        );
        let tree_line = tree
            .lines()
            .find(|l| l.contains(&format!(" {name} [")))
            .unwrap_or_else(|| panic!("{name} in the tree:\n{tree}"));
        assert_eq!(
            parenthesised_count(tree_line),
            Some(inclusive),
            "the tree's {name}: {tree_line}"
        );
    }
}

#[tokio::test]
async fn every_sample_is_under_its_thread_in_every_format() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let daemon = Daemon::start();
    let (id, profile) = record(&daemon, &fixtures().threads, 1.5, None).await;
    let total = profile.total_samples;
    assert!(total > 300, "1.5 s at 1400 Hz: {total} samples");

    // gRPC: what each stack measures, and each thread's samples and name.
    use vmscope_proto::v1::SampleType;
    assert_eq!(
        profile.sample_types,
        [SampleType::Samples as i32, SampleType::CpuTime as i32]
    );
    let period = 1_000_000_000u64.div_ceil(1400);
    for stack in &profile.stacks {
        assert_eq!(stack.values[0], stack.samples);
        let cpu = stack.values[1];
        assert!(
            cpu.abs_diff(stack.samples * period) <= stack.samples,
            "one period of CPU per sample: {stack:?}"
        );
    }
    let named = |name: &str| {
        profile
            .threads
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("thread {name} in {:?}", profile.threads))
    };
    let (two, one) = (named("spin-two"), named("spin-one"));
    let ratio = two.samples as f64 / one.samples as f64;
    eprintln!(
        "{total} samples: spin-two {}, spin-one {} ({ratio:.2} to 1), others {}",
        two.samples,
        one.samples,
        total - two.samples - one.samples
    );
    assert!(
        (1.6..2.5).contains(&ratio),
        "8 ms against 4 ms of CPU per turn: {} against {} samples",
        two.samples,
        one.samples
    );
    let thread_total: u64 = profile.threads.iter().map(|t| t.samples).sum();
    assert_eq!(thread_total, total, "every sample has its thread");
    // Each thread's samples are in its own function, never in the other's.
    let holds = |stack: &vmscope_proto::v1::Stack, function: &str| {
        stack
            .frames
            .iter()
            .any(|&f| profile.frames[f as usize].name == function)
    };
    for stack in &profile.stacks {
        if stack.tid == two.tid {
            assert!(!holds(stack, "hot_one"), "spin-two in hot_one: {stack:?}");
        }
        if stack.tid == one.tid {
            assert!(!holds(stack, "hot_two"), "spin-one in hot_two: {stack:?}");
        }
    }
    let in_function = |tid: u32, function: &str| -> u64 {
        profile
            .stacks
            .iter()
            .filter(|s| s.tid == tid && holds(s, function))
            .map(|s| s.samples)
            .sum()
    };
    assert!(in_function(two.tid, "hot_two") * 10 >= two.samples * 9);
    assert!(in_function(one.tid, "hot_one") * 10 >= one.samples * 9);

    // JSON: the same threads, names and samples, and the stacks' threads and values.
    let dir = tempfile::tempdir().expect("temporary directory");
    let dir = dir.path();
    let json: serde_json::Value = serde_json::from_slice(&report_file(
        &daemon,
        id,
        &["--format", "json", "--native"],
        &dir.join("report.json"),
    ))
    .expect("JSON");
    assert_eq!(
        json["sample_types"],
        serde_json::json!(["samples", "cpu_time"])
    );
    for thread in [two, one] {
        let listed = json["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .find(|t| t["tid"] == thread.tid)
            .unwrap_or_else(|| panic!("thread {} in JSON", thread.tid));
        assert_eq!(listed["name"], thread.name.as_str());
        assert_eq!(listed["samples"], thread.samples);
        let in_stacks: u64 = json["stacks"]
            .as_array()
            .expect("stacks")
            .iter()
            .filter(|s| s["tid"] == thread.tid)
            .map(|s| s["values"][0].as_u64().expect("a value"))
            .sum();
        assert_eq!(
            in_stacks, thread.samples,
            "JSON's stacks of {}",
            thread.name
        );
    }

    // The text report by thread: a row per thread, `name[tid]`, with its samples in its
    // section (the thread's samples in its own function, vanilla vm code with --native).
    let by_thread = report_text(
        &daemon,
        id,
        &["--native", "--sort", "tid"],
        dir,
        "by-tid.txt",
    );
    for thread in [two, one] {
        let label = format!("{}[{}]", thread.name, thread.tid);
        let samples: u64 = by_thread
            .lines()
            .filter(|l| l.split_whitespace().any(|w| w == label))
            .filter_map(parenthesised_count)
            .sum();
        assert_eq!(
            samples, thread.samples,
            "{label}'s rows in --sort tid:\n{by_thread}"
        );
    }

    // pprof, read by go tool pprof: cut to each thread by its name label.
    let pprof = dir.join("profile.pb.gz");
    report_file(&daemon, id, &["--format", "pprof"], &pprof);
    for thread in [two, one] {
        let focus = format!("-tagfocus=thread.name={}", thread.name);
        let top = go_pprof(
            &["-top", "-sample_index=samples", "-nodefraction=0", &focus],
            &pprof,
        );
        // With -nodefraction=0, every node of the thread's samples is shown.
        assert!(
            top.contains(&format!("accounting for {}, ", thread.samples))
                && top.contains(&format!(" of {total} total")),
            "pprof cut to {} ({} samples):\n{top}",
            thread.name,
            thread.samples
        );
    }
}

#[tokio::test]
async fn a_throttled_session_says_so_to_grpc_and_json_clients() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let daemon = Daemon::start();
    // 300 Hz from 0.3 s on: about 0.3 * 1400 + 1.7 * 300 = 930 samples for 2 s of CPU time, so
    // under half the rate asked for.
    let (id, profile) = record(&daemon, &fixtures().hotspots_pie, 2.0, Some(300)).await;
    assert!(
        profile.throttled,
        "gRPC: {} Hz taken of 1400 over {:.2} CPU seconds is throttled",
        profile.taken_frequency_hz, profile.cpu_seconds
    );
    assert!(profile.taken_frequency_hz < 0.9 * 1400.0);

    let dir = tempfile::tempdir().expect("temporary directory");
    let file: PathBuf = dir.path().join("report.json");
    let json: serde_json::Value =
        serde_json::from_slice(&report_file(&daemon, id, &["--format", "json"], &file))
            .expect("JSON");
    assert_eq!(
        json["throttled"], true,
        "JSON: {}",
        json["taken_frequency_hz"]
    );
    assert_eq!(
        json["taken_frequency_hz"].as_f64(),
        Some(profile.taken_frequency_hz),
        "one rate, computed once"
    );
    let text = report_text(&daemon, id, &[], dir.path(), "report.txt");
    assert!(text.contains("throttled sampling"), "{text}");
}
