//! Call stacks without frame pointers (`--call-graph dwarf`), end to end: real BPF, the real
//! daemon over gRPC, fixtures whose call structure and time split are known by construction,
//! and real runtimes (CPython 3.12 `-X perf`, 3.13 `-X perf_jit`, node `--perf-prof`). Only the
//! API's contract is read (Profile.frames, Profile.stacks leaf first, Stack.end).

use std::{collections::HashMap, path::PathBuf, process::Command, time::Duration};

use vmscope_proto::v1::{CallGraph, Frame, Profile, StackEnd};
use vmscope_tests::{
    Daemon, Running, counters, dump, json_report_file, pyenv_python_version, pyenv_shim,
    stacks::*,
    stop_and_profile,
    tree_text::{TreeLine, run_report, tree_lines},
};

/// Frames whose name starts with `prefix` (perf map names such as `py::hot:/path/x.py`).
fn starting(prefix: &str) -> impl Fn(&Frame) -> bool + '_ {
    move |f: &Frame| f.name.starts_with(prefix)
}

/// The 70/30 callers fixture built `-O2 -fomit-frame-pointer`: with `dwarf` each caller gets
/// its share of leaf within 3 points and stacks reach `main` and `_start`; with `fp` the same
/// binary's stacks stop at the leaf, and the profile says why. Both sessions run at once on
/// the same process, and each gets the stacks it asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dwarf_unwinds_code_without_frame_pointers_and_fp_says_it_cannot() {
    let daemon = Daemon::start();
    let target = Running::start(Command::new(&no_fp_fixtures().callers).arg("30"));
    let mut client = daemon.client().await;

    let fp_session = start_stacks_session(&mut client, target.pid(), CallGraph::Fp, 0).await;
    let profile = record_stacks(&mut client, target.pid(), CallGraph::Dwarf, 0, 3.0).await;
    let report = format!("{}{}", dump(&profile), dump_stacks(&profile, 12));
    assert_eq!(
        profile.session.as_ref().unwrap().call_graph(),
        CallGraph::Dwarf,
        "{report}"
    );
    let total = profile.total_samples as f64;
    assert!(total > 800.0, "too few samples:\n{report}");
    let a = called_from(&profile, named("leaf"), named("caller_a")) as f64;
    let b = called_from(&profile, named("leaf"), named("caller_b")) as f64;
    let leaf = inclusive(&profile, named("leaf")) as f64;
    assert!(
        a + b >= 0.95 * leaf && leaf >= 0.9 * total,
        "leaf ({leaf} of {total}) from caller_a ({a}) or caller_b ({b}):\n{report}"
    );
    for (name, samples, expected) in [("caller_a", a, 70.0), ("caller_b", b, 30.0)] {
        let share = 100.0 * samples / (a + b);
        assert!(
            (share - expected).abs() <= 3.0,
            "{name} calls {share:.2}% of leaf's time, {expected}% by construction:\n{report}"
        );
    }
    let main = inclusive(&profile, named("main")) as f64;
    assert!(main >= 0.97 * total, "main in {main} of {total}:\n{report}");
    let complete = ended(&profile, StackEnd::Complete) as f64;
    assert!(
        complete >= 0.97 * total,
        "{complete} of {total} stacks complete:\n{report}"
    );
    eprintln!(
        "dwarf: caller_a {:.2}% caller_b {:.2}%, main {:.2}%, complete {:.2}%",
        100.0 * a / (a + b),
        100.0 * b / (a + b),
        100.0 * main / total,
        100.0 * complete / total
    );

    // Frame pointers on the same process at the same time: stacks end at the leaf, and the
    // profile says why.
    let profile = stop_and_profile(&mut client, fp_session).await;
    let report = format!("{}{}", dump(&profile), dump_stacks(&profile, 5));
    let total = profile.total_samples as f64;
    let no_fp = ended(&profile, StackEnd::NoFramePointer) as f64;
    assert!(
        no_fp >= 0.9 * total,
        "only {no_fp} of {total} stacks said a caller had no frame pointer:\n{report}"
    );
    let reported = profile
        .stack_ends
        .iter()
        .find(|e| e.end() == StackEnd::NoFramePointer)
        .map_or(0, |e| e.samples) as f64;
    assert_eq!(reported, no_fp, "Profile.stack_ends disagrees:\n{report}");
    assert_eq!(
        called_from(&profile, named("leaf"), named("caller_a")),
        0,
        "fp found a caller through code without frame pointers?\n{report}"
    );
}

/// A comparator called by libc's qsort (Debian's libc keeps no frame pointers): DWARF unwinding
/// finds `sort_once` and `main` under qsort's frames (perf --call-graph dwarf: 2807 of 2807).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_through_libc_qsort_are_recovered() {
    let daemon = Daemon::start();
    let target = Running::start(Command::new(&no_fp_fixtures().qsort).arg("30"));
    let mut client = daemon.client().await;
    let profile = record_stacks(&mut client, target.pid(), CallGraph::Dwarf, 0, 2.0).await;
    let report = format!("{}{}", dump(&profile), dump_stacks(&profile, 5));
    let comparator = inclusive(&profile, named("by_weight")) as f64;
    let total = profile.total_samples as f64;
    assert!(
        comparator >= 0.8 * total,
        "{comparator} of {total}:\n{report}"
    );
    let through = profile
        .stacks
        .iter()
        .filter(|s| {
            let names: Vec<&str> = frames_of(&profile, s)
                .iter()
                .map(|f| f.name.as_str())
                .collect();
            let at = |name: &str| names.iter().position(|n| *n == name);
            let qsort = names
                .iter()
                .position(|n| n.contains("qsort") || n.contains("msort"));
            matches!(
                (at("by_weight"), qsort, at("sort_once"), at("main")),
                (Some(c), Some(q), Some(s), Some(m)) if c < q && q < s && s < m
            )
        })
        .map(|s| s.samples)
        .sum::<u64>() as f64;
    assert!(
        through >= 0.95 * comparator,
        "only {through} of the comparator's {comparator} samples reach main through qsort:\n{report}"
    );
    eprintln!(
        "qsort: {:.2}% of the comparator's samples reach main",
        100.0 * through / comparator
    );
}

/// Samples whose stack has a Python frame `callee` whose nearest Python caller (the next
/// `py::` frame rootwards, past the interpreter's own C frames) is `caller`.
fn python_called_from(profile: &Profile, callee: &str, caller: &str) -> u64 {
    profile
        .stacks
        .iter()
        .filter(|s| {
            let python: Vec<&str> = frames_of(profile, s)
                .into_iter()
                .map(|f| f.name.as_str())
                .filter(|n| n.starts_with("py::"))
                .collect();
            python
                .windows(2)
                .any(|pair| pair[0].starts_with(callee) && pair[1].starts_with(caller))
        })
        .map(|s| s.samples)
        .sum()
}

/// `hot` called from `a` 70% and `b` 30% (thread CPU time), in a Python whose perf support
/// gives each Python function a frame of its own: both callers and `hot` in the stacks, each
/// caller's share within 5 points, under `main`.
async fn python_callers_split_70_30(version: &str, flag: &str) {
    let daemon = Daemon::start();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/callers.py");
    let work = tempfile::tempdir().expect("a temporary directory");
    let mut client = daemon.client().await;
    // CPython buffers its jitdump (-X perf_jit) and flushes it at exit: the run ends by itself
    // and the session with it, so that every name has arrived before the profile is built.
    let mut target = Running::start(
        Command::new(pyenv_python_version(version))
            .args(["-X", flag])
            .arg(&script)
            .arg("3")
            .current_dir(work.path()),
    );
    let session = start_stacks_session(&mut client, target.pid(), CallGraph::Dwarf, 0).await;
    for _ in 0..100 {
        if target.child.try_wait().expect("wait for python").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let profile = stop_and_profile(&mut client, session).await;
    let report = format!("{}{}", dump(&profile), dump_stacks(&profile, 8));
    let total = profile.total_samples as f64;
    assert!(total > 800.0, "too few samples:\n{report}");
    let hot = inclusive(&profile, starting("py::hot:")) as f64;
    let a = python_called_from(&profile, "py::hot:", "py::a:") as f64;
    let b = python_called_from(&profile, "py::hot:", "py::b:") as f64;
    assert!(hot >= 0.8 * total, "py::hot in {hot} of {total}:\n{report}");
    assert!(
        a + b >= 0.9 * hot,
        "hot ({hot}) from a ({a}) or b ({b}):\n{report}"
    );
    for (name, samples, expected) in [("a", a, 70.0), ("b", b, 30.0)] {
        let share = 100.0 * samples / (a + b);
        assert!(
            (share - expected).abs() <= 5.0,
            "{name} calls {share:.2}% of hot's time, {expected}% by construction:\n{report}"
        );
    }
    let main = python_called_from(&profile, "py::a:", "py::main:")
        + python_called_from(&profile, "py::b:", "py::main:");
    assert!(
        main as f64 >= 0.9 * (a + b),
        "a and b are called from main in {main} samples only:\n{report}"
    );
    eprintln!(
        "python {version} -X {flag}: a {:.2}% b {:.2}% of hot ({hot} of {total} samples)",
        100.0 * a / (a + b),
        100.0 * b / (a + b)
    );
}

/// CPython 3.12 `-X perf`: its trampolines have no unwind information and no frame pointer
/// (perf --call-graph dwarf stops at the first `py::` frame); vmscope recognises their bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpython_3_12_perf_trampolines_are_unwound() {
    python_callers_split_70_30("3.12", "perf").await;
}

/// CPython 3.13 `-X perf_jit`: jitdump names, trampolines with frame pointers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpython_3_13_perf_jit_frames_are_in_the_stacks() {
    python_callers_split_70_30("3.13", "perf_jit").await;
}

/// Samples in the JSON report `report` whose stack holds `py::hot`, and of them those where a
/// Python caller (`py::` frame) follows it rootwards.
fn hot_reaching_a_python_caller(report: &serde_json::Value) -> (u64, u64) {
    let frames = report["frames"].as_array().expect("frames");
    let name = |i: &serde_json::Value| {
        frames[i.as_u64().expect("a frame index") as usize]["name"]
            .as_str()
            .unwrap_or_default()
    };
    let (mut hot, mut reaching) = (0, 0);
    for stack in report["stacks"].as_array().expect("stacks") {
        let names: Vec<&str> = stack["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(name)
            .collect();
        let Some(at) = names.iter().position(|n| n.starts_with("py::hot:")) else {
            continue;
        };
        let samples = stack["samples"].as_u64().unwrap();
        hot += samples;
        if names[at + 1..].iter().any(|n| n.starts_with("py::")) {
            reaching += samples;
        }
    }
    (hot, reaching)
}

/// `vmscope record -- python3.12 -X perf` as a pyenv user types it, three times in a row on
/// one fresh daemon. The shim execs twice before Python starts, and Python maps its
/// trampolines after the daemon read its mappings at the last exec: those trampolines show up
/// only as callers (never as the interrupted instruction), and their perf map entries lay
/// outside every mapping the daemon knew. Every Python frame was lost in most such runs
/// (99.5% of stacks ended at `[unknown]` above `_PyEval_EvalFrameDefault`). 3.13 `-X
/// perf_jit` (jitdump, found through the process's mappings) lost them the same way.
///
/// The daemon's `unwind_ended_*` counters then count exactly what the profiles say of their
/// stacks' ends (they once counted framehop's end, `frame_pointer_backwards`, of stacks the
/// report said ended outside every mapping).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_pyenv_pythons_keep_their_python_frames_run_after_run() {
    let daemon = Daemon::start();
    let mut ends: HashMap<String, u64> = HashMap::new();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/callers.py");
    let work = tempfile::tempdir().expect("a temporary directory");
    for (version, flag, runs, least) in [("3.12", "perf", 3, 0.95), ("3.13", "perf_jit", 1, 0.99)] {
        for run in 1..=runs {
            let python = pyenv_shim(version);
            let json = work.path().join(format!("{version}-{run}.json"));
            let out = daemon
                .cli()
                .args(["record", "--call-graph", "dwarf", "--format", "json", "-o"])
                .arg(&json)
                .arg("--")
                .arg(python.get_program())
                .args(["-X", flag])
                .arg(&script)
                .arg("1.5")
                .envs(python.get_envs().filter_map(|(k, v)| Some((k, v?))))
                .current_dir(work.path())
                .output()
                .expect("run vmscope");
            let report = json_report_file(&out, &json);
            let (hot, reaching) = hot_reaching_a_python_caller(&report);
            let total = report["total_samples"].as_u64().unwrap();
            let summary = format!(
                "python{version} -X {flag}, run {run}: py::hot in {hot} of {total} samples, \
                 {reaching} with a Python caller; stack ends {}; daemon log:\n{}",
                report["stack_ends"],
                daemon.log()
            );
            assert!(hot as f64 >= 0.8 * total as f64, "{summary}");
            assert!(reaching as f64 >= least * hot as f64, "{summary}");
            eprintln!("{}", summary.lines().next().unwrap_or_default());
            for end in report["stack_ends"].as_array().expect("stack_ends") {
                *ends
                    .entry(end["end"].as_str().unwrap().to_owned())
                    .or_default() += end["samples"].as_u64().unwrap();
            }
        }
    }
    let daemon_counts = counters(&mut daemon.client().await).await;
    let counted = |names: &[&str]| -> u64 { names.iter().map(|n| daemon_counts[*n]).sum() };
    for (end, names) in [
        ("complete", &["unwind_ended_complete"][..]),
        ("unmapped_return", &["unwind_ended_unmapped"]),
        ("copy_too_small", &["unwind_ended_copy_too_small"]),
        ("copy_faulted", &["unwind_ended_copy_faulted"]),
        (
            "unwind_failed",
            &[
                "unwind_ended_no_progress",
                "unwind_ended_null_return_address",
                "unwind_ended_frame_pointer_backwards",
                "unwind_ended_bad_address",
            ],
        ),
    ] {
        assert_eq!(
            ends.get(end).copied().unwrap_or(0),
            counted(names),
            "{end}: the profiles' stack ends {ends:?}, the daemon's counters {daemon_counts:?}"
        );
    }
}

/// The line of each node's parent in a text tree (None for roots).
fn parents(lines: &[TreeLine]) -> Vec<Option<usize>> {
    let mut open: Vec<usize> = Vec::new();
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            open.truncate(line.depth);
            let parent = open.last().copied();
            open.push(i);
            parent
        })
        .collect()
}

/// The call tree a user reads of the 70/30 Python fixture (3.12 `-X perf`, DWARF): in the
/// language view (the default) `py::hot` sits directly under `py::a` and `py::b`, 70/30 within
/// 5 points, with no libpython frame between them and `py::main` directly over both; `--native`
/// keeps the interpreter's frames between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_tree_reads_like_the_program() {
    let daemon = Daemon::start();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/callers.py");
    let work = tempfile::tempdir().expect("a temporary directory");
    let target = Running::start(
        Command::new(pyenv_python_version("3.12"))
            .args(["-X", "perf"])
            .arg(&script)
            .arg("30")
            .current_dir(work.path()),
    );
    let mut client = daemon.client().await;
    let profile = record_stacks(&mut client, target.pid(), CallGraph::Dwarf, 0, 2.5).await;
    drop(target);
    let id = profile.session.as_ref().expect("a session").id.to_string();
    let hot = inclusive(&profile, starting("py::hot:"));
    let text = run_report(daemon.cli(), &["report", &id, "--tree", "--fold", "1"]);
    let report = format!("{text}\n{}", dump_stacks(&profile, 4));
    assert!(
        text.contains("\nlanguage view: the VM's own frames above the innermost language frame"),
        "{report}"
    );
    let lines = tree_lines(&text);
    let up = parents(&lines);
    let parent_of = |i: usize| up[i].map(|p| lines[p].label.as_str());
    let (mut from_a, mut from_b, mut elsewhere) = (0u64, 0u64, Vec::new());
    for (i, line) in lines.iter().enumerate() {
        if line.label.starts_with("py::hot:") {
            match parent_of(i) {
                Some(p) if p.starts_with("py::a:") => from_a += line.samples,
                Some(p) if p.starts_with("py::b:") => from_b += line.samples,
                other => elsewhere.push((other, line.samples)),
            }
        }
        if line.label.starts_with("py::a:") || line.label.starts_with("py::b:") {
            let parent = parent_of(i).unwrap_or_default();
            assert!(
                parent.starts_with("py::main:"),
                "{} under {parent:?}:\n{report}",
                line.label
            );
        }
    }
    assert!(
        (from_a + from_b) as f64 >= 0.9 * hot as f64 && hot > 1000,
        "py::hot ({hot} samples) directly under py::a ({from_a}) or py::b ({from_b}); \
         elsewhere {elsewhere:?}:\n{report}"
    );
    let a = 100.0 * from_a as f64 / (from_a + from_b) as f64;
    assert!(
        (a - 70.0).abs() <= 5.0,
        "py::a calls {a:.2}% of py::hot's time, 70% by construction:\n{report}"
    );

    // Every frame: the interpreter stands between py::a and py::hot.
    let native = run_report(
        daemon.cli(),
        &["report", &id, "--tree", "--fold", "1", "--native"],
    );
    let lines = tree_lines(&native);
    let parents_native = parents(&lines);
    let hot_parents: Vec<&str> = (0..lines.len())
        .filter(|&i| lines[i].label.starts_with("py::hot:"))
        .filter_map(|i| parents_native[i].map(|p| lines[p].label.as_str()))
        .collect();
    assert!(
        !hot_parents.is_empty() && hot_parents.iter().all(|p| p.contains("libpython")),
        "{hot_parents:?}:\n{native}"
    );
    eprintln!(
        "language view: py::hot directly under py::a {a:.2}%, py::b {:.2}% ({} of {hot} \
         samples)",
        100.0 - a,
        from_a + from_b
    );
}

/// node `--perf-prof`: a JS function and the V8 C++ it calls (JSON.stringify runs in
/// `v8::internal::JsonStringifier`) in one stack, the C++ frames above the JS one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_js_and_v8_cpp_frames_share_one_stack() {
    let daemon = Daemon::start();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/stringify.js");
    let work = tempfile::tempdir().expect("a temporary directory");
    let target = Running::start(
        Command::new("node")
            .arg("--perf-prof")
            .arg(&script)
            .arg("30")
            .current_dir(work.path()),
    );
    let mut client = daemon.client().await;
    let profile = record_stacks(&mut client, target.pid(), CallGraph::Dwarf, 0, 2.0).await;
    let report = format!("{}{}", dump(&profile), dump_stacks(&profile, 5));
    let total = profile.total_samples as f64;
    let mixed = profile
        .stacks
        .iter()
        .filter(|s| {
            let frames = frames_of(&profile, s);
            let cpp = frames
                .iter()
                .position(|f| f.name.contains("JsonStringifier"));
            let js = frames.iter().rposition(|f| f.name.contains("serializeAll"));
            matches!((cpp, js), (Some(c), Some(j)) if c < j)
        })
        .map(|s| s.samples)
        .sum::<u64>() as f64;
    assert!(
        mixed >= 0.5 * total,
        "JsonStringifier under serializeAll in {mixed} of {total} samples:\n{report}"
    );
    eprintln!(
        "node: JsonStringifier under serializeAll in {:.1}% of the samples",
        100.0 * mixed / total
    );
}
