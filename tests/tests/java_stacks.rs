//! Whole Java stacks with no JVM flags: HotSpot's compiled frames, which keep no frame pointer,
//! unwound by the frame layout the JVM describes in its vmStructs, through the call stub into
//! the VM's C++ frames and to the thread's start.
//!
//! The fixture is tests/fixtures/java/Callers.java: `main` calls `callerSeventy` and
//! `callerThirty`, which call `hot` 7 and 3 times a round, so 70% and 30% of `hot`'s time is
//! under each by construction.

use std::process::Command;

use vmscope_proto::v1::{CallGraph, Profile, StackEnd};
use vmscope_tests::{
    Daemon, Running, connect, counters, go_pprof,
    java::{clean_jvm, java, java_fixture, start_java},
    pprof_top_rows, shared_tempdir,
    stacks::{record_stacks, start_stacks_session},
    stop_and_profile,
    tree_text::run_report,
};

/// What the stacks whose leaf is `Callers.hot` say.
#[derive(Debug, Default)]
struct HotStacks {
    /// Samples in `hot`.
    hot: u64,
    /// Of them, under `callerSeventy` (its caller) and then `main`.
    seventy: u64,
    /// Of them, under `callerThirty` and then `main`.
    thirty: u64,
    /// Of them, whose walk reached the thread's start.
    complete: u64,
    /// Of those under a caller, whose caller's frame has the line of its call to `hot`
    /// (Callers.java's line number table, read from the JVM).
    call_lines: u64,
    /// Of them, whose own frame has a line of `hot`'s body.
    leaf_lines: u64,
}

/// Lines of Callers.java, found in its source: `hot`'s body, and the calls to it in
/// `callerSeventy` and `callerThirty`.
struct CallersLines {
    hot: std::ops::RangeInclusive<u32>,
    seventy_call: u32,
    thirty_call: u32,
}

fn callers_lines() -> CallersLines {
    let source = std::fs::read_to_string(java_fixture("Callers.java")).expect("Callers.java");
    let line = |text: &str| {
        source
            .lines()
            .position(|l| l.contains(text))
            .map(|i| i as u32 + 1)
            .unwrap_or_else(|| panic!("{text:?} in Callers.java"))
    };
    CallersLines {
        hot: line("static long hot(long seed)")..=line("return a ^ b ^ c ^ d;"),
        seventy_call: line("s += hot(s + i);"),
        thirty_call: line("s += hot(s - i);"),
    }
}

fn hot_stacks(profile: &Profile) -> HotStacks {
    let frame = |i: u32| &profile.frames[i as usize];
    let lines = callers_lines();
    let mut counts = HotStacks::default();
    for stack in &profile.stacks {
        let frames: Vec<&str> = stack
            .frames
            .iter()
            .map(|&f| frame(f).name.as_str())
            .collect();
        if !frames.first().is_some_and(|f| f.contains("Callers.hot(")) {
            continue;
        }
        counts.hot += stack.samples;
        let leaf = frame(stack.frames[0]);
        if leaf.file == "Callers.java" && lines.hot.contains(&leaf.line) {
            counts.leaf_lines += stack.samples;
        }
        let reaches_main = frames[1..].iter().any(|f| f.contains("Callers.main("));
        let caller_line = stack
            .frames
            .get(1)
            .map(|&f| (frame(f).file.as_str(), frame(f).line));
        let call_line = |line| caller_line == Some(("Callers.java", line));
        match frames.get(1) {
            Some(f) if reaches_main && f.contains("Callers.callerSeventy(") => {
                counts.seventy += stack.samples;
                if call_line(lines.seventy_call) {
                    counts.call_lines += stack.samples;
                }
            }
            Some(f) if reaches_main && f.contains("Callers.callerThirty(") => {
                counts.thirty += stack.samples;
                if call_line(lines.thirty_call) {
                    counts.call_lines += stack.samples;
                }
            }
            _ => {}
        }
        if stack.end == StackEnd::Complete as i32 {
            counts.complete += stack.samples;
        }
    }
    counts
}

/// The most frequent stacks, for a failure to show what the walks found.
fn top_stacks(profile: &Profile, n: usize) -> String {
    let mut stacks: Vec<_> = profile.stacks.iter().collect();
    stacks.sort_by_key(|s| std::cmp::Reverse(s.samples));
    stacks
        .iter()
        .take(n)
        .map(|s| {
            // Generated code with the map that named it and its range.
            let names: Vec<String> = s
                .frames
                .iter()
                .map(|&f| {
                    let f = &profile.frames[f as usize];
                    if f.code_map.is_empty() {
                        f.name.clone()
                    } else {
                        format!("{} [{} {}]", f.name, f.code_map, f.range)
                    }
                })
                .collect();
            format!(
                "{} samples, end {}: {}",
                s.samples,
                s.end,
                names.join(" <- ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Records Callers.java with no JVM flags after its warm-up and checks its stacks: `hot`
/// under its caller under `main` 70/30, the walks reaching the thread's start, and each frame
/// with its source line. Returns the daemon and session, for the reports.
async fn callers_stacks_are_whole(call_graph: CallGraph) -> (Daemon, u64, HotStacks) {
    let daemon = Daemon::start();
    let mut client = connect(&daemon.socket).await.unwrap();
    let jvm = start_java("Callers.java", &[], "8");
    let session = start_stacks_session(&mut client, jvm.pid(), call_graph, 0).await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let profile = stop_and_profile(&mut client, session).await;
    clean_jvm(jvm.pid());
    drop(jvm);
    let counts = hot_stacks(&profile);
    let stacks = top_stacks(&profile, 12);
    eprintln!("{call_graph:?}: {counts:?}\n{stacks}");
    assert_whole(&counts, &stacks);
    // C2's frames: the line of each scope's bci, from the method's line number table. The
    // code cache is read whole as the session starts, so even its first samples' frames are
    // named by their nmethods (else about 5% were left to the perf map, which has no lines).
    assert!(
        counts.leaf_lines * 100 >= counts.hot * 97,
        "{} of {} samples in hot at a line of its body\n{stacks}",
        counts.leaf_lines,
        counts.hot
    );
    assert_call_lines(&counts, &stacks);
    (daemon, session, counts)
}

/// At least 97% of the samples under a caller have the line of the caller's call to `hot`.
fn assert_call_lines(counts: &HotStacks, stacks: &str) {
    let under_callers = counts.seventy + counts.thirty;
    assert!(
        counts.call_lines * 100 >= under_callers * 97,
        "{} of {under_callers} samples under a caller have the line of its call\n{stacks}",
        counts.call_lines
    );
}

/// With dwarf, pprof's reading of the same session too: `go tool pprof -top -cum` splits the
/// callers 70/30, and `-lines` finds the calls at their lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_stacks_without_flags_reach_main_through_their_callers_70_30_dwarf() {
    let (daemon, session, _) = callers_stacks_are_whole(CallGraph::Dwarf).await;
    let dir = shared_tempdir();
    let pprof = dir.path().join("callers.pb.gz");
    let path = pprof.to_str().expect("a UTF-8 path");
    run_report(
        daemon.cli(),
        &[
            "report",
            &session.to_string(),
            "--format",
            "pprof",
            "-o",
            path,
        ],
    );
    let top = go_pprof(
        &["-top", "-cum", "-sample_index=samples", "-nodefraction=0"],
        &pprof,
    );
    let rows = pprof_top_rows(&top);
    let cum = |method: &str| -> f64 {
        let (_, cum) = rows
            .iter()
            .find(|(name, _)| name.contains(method))
            .unwrap_or_else(|| panic!("{method} in pprof's -top -cum:\n{top}"))
            .1;
        cum.parse().unwrap_or_else(|_| panic!("a count: {cum:?}"))
    };
    let (seventy, thirty) = (cum("Callers.callerSeventy("), cum("Callers.callerThirty("));
    let share = 100.0 * seventy / (seventy + thirty);
    eprintln!("pprof -top -cum: callerSeventy {seventy}, callerThirty {thirty}: {share:.1}%");
    assert!(
        (share - 70.0).abs() <= 3.0,
        "callerSeventy has {share:.1}% of the callers' cumulative samples in pprof\n{top}"
    );
    let lines = callers_lines();
    let by_line = go_pprof(
        &["-top", "-lines", "-sample_index=samples", "-nodefraction=0"],
        &pprof,
    );
    for call in [lines.seventy_call, lines.thirty_call] {
        assert!(
            by_line.contains(&format!("Callers.java:{call}")),
            "pprof -lines has no row at Callers.java:{call}\n{by_line}"
        );
    }
}

/// A JVM target of a frame-pointer session has its stack copied as well: the same stacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_stacks_without_flags_reach_main_through_their_callers_70_30_fp() {
    callers_stacks_are_whole(CallGraph::Fp).await;
}

/// `vmscope record --call-graph fp -- java ...`: the session starts before the JVM execs, so
/// the JVM is found once it maps libjvm.so, and its stacks are copied from then on: the whole
/// run's stacks reach `main` as a running JVM's do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jvm_recorded_from_its_start_gets_whole_stacks_with_fp() {
    let daemon = Daemon::start();
    let out = daemon
        .cli()
        .args(["record", "--call-graph", "fp", "-o", "/dev/null", "--"])
        .arg(java())
        .arg(java_fixture("Callers.java"))
        .arg("5")
        .output()
        .expect("run vmscope record");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "vmscope record failed: {stderr}");
    let session: u64 = stderr
        .split_once("session ")
        .and_then(|(_, rest)| rest.split(':').next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("a session id in {stderr:?}"));
    let mut client = connect(&daemon.socket).await.unwrap();
    let profile = stop_and_profile(&mut client, session).await;
    let counts = hot_stacks(&profile);
    let stacks = top_stacks(&profile, 12);
    let added = counters(&mut client).await["jvm_copies_added"];
    eprintln!("{counts:?}, {added} JVM copies added\n{stacks}");
    assert_whole(&counts, &stacks);
    assert_eq!(
        added, 1,
        "the JVM found after the start has its stack copied"
    );
}

/// Callers' stacks are whole: at least 1,000 samples in `hot`, split 70/30 under their callers
/// within 3 points, and 90% of them reaching the thread's start.
fn assert_whole(counts: &HotStacks, stacks: &str) {
    assert!(counts.hot >= 1000, "{counts:?}\n{stacks}");
    assert_split(counts, 3.0, stacks);
    assert!(
        counts.complete * 10 >= counts.hot * 9,
        "{} of {} stacks reach the thread's start\n{stacks}",
        counts.complete,
        counts.hot
    );
}

/// Checks the 70/30 split of `counts`: at least 90% of `hot`'s samples reach `main` through
/// their caller, 70 ± `points` under `callerSeventy`.
fn assert_split(counts: &HotStacks, points: f64, stacks: &str) {
    let reached = counts.seventy + counts.thirty;
    assert!(
        reached * 10 >= counts.hot * 9,
        "{reached} of {} samples in Callers.hot reach main through their caller\n{stacks}",
        counts.hot
    );
    let seventy = 100.0 * counts.seventy as f64 / reached as f64;
    assert!(
        (seventy - 70.0).abs() <= points,
        "callerSeventy has {seventy:.1}% of hot's samples, not 70 ± {points}\n{stacks}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_that_only_run_interpreted_are_named_in_their_frames() {
    // Compiled ahead: the source launcher's compiler would take seconds under -Xint.
    let classes = shared_tempdir();
    let javac = Command::new("javac")
        .arg("-d")
        .arg(classes.path())
        .arg(java_fixture("Callers.java"))
        .status()
        .expect("run javac");
    assert!(javac.success(), "javac failed");
    let daemon = Daemon::start();
    let mut client = connect(&daemon.socket).await.unwrap();
    let jvm = Running::start(
        Command::new(java())
            .args(["-Xint", "-cp"])
            .arg(classes.path())
            .args(["Callers", "7"]),
    );
    let profile = record_stacks(&mut client, jvm.pid(), CallGraph::Dwarf, 0, 2.5).await;
    clean_jvm(jvm.pid());
    drop(jvm);
    let total: u64 = profile.stacks.iter().map(|s| s.samples).sum();
    let counts = hot_stacks(&profile);
    let stacks = top_stacks(&profile, 6);
    eprintln!("{counts:?} of {total}\n{stacks}");
    // Nothing is compiled: every Java frame is the interpreter's, named by its method.
    assert!(
        counts.hot * 10 >= total * 8,
        "Callers.hot named in {} of {total} samples\n{stacks}",
        counts.hot
    );
    assert_split(&counts, 3.0, &stacks);
    // A caller's frame saved its bcp at the call: the line of the call. (The leaf's is the
    // last one it saved, not where it is: the interpreter keeps that in a register.)
    assert_call_lines(&counts, &stacks);
}

/// `java FLAGS FIXTURE SECONDS` started, its output up to "ready" (a compiler's log).
fn start_java_logging(fixture: &str, flags: &[&str], seconds: &str) -> (Running, Vec<String>) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(java())
        .args(flags)
        .arg(java_fixture(fixture))
        .arg(seconds)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn java");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read java's output");
        if line.trim() == "ready" {
            break;
        }
        lines.push(line);
    }
    (Running { child }, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_c2_inlined_shows_as_its_own_frame_under_its_caller() {
    let daemon = Daemon::start();
    let mut client = connect(&daemon.socket).await.unwrap();
    // PrintInlining only reports C2's decisions: the code is what it is without it.
    let (jvm, log) = start_java_logging(
        "Inline.java",
        &["-XX:+UnlockDiagnosticVMOptions", "-XX:+PrintInlining"],
        "8",
    );
    assert!(
        log.iter()
            .any(|l| l.contains("Inline::inner") && l.contains("inline (hot)")),
        "C2 did not say it inlined Inline::inner:\n{}",
        log.join("\n")
    );
    let profile = record_stacks(&mut client, jvm.pid(), CallGraph::Dwarf, 0, 3.0).await;
    clean_jvm(jvm.pid());
    drop(jvm);
    let name = |i: u32| profile.frames[i as usize].name.as_str();
    let (mut in_outer, mut inner_under_outer) = (0, 0);
    for stack in &profile.stacks {
        let frames: Vec<&str> = stack.frames.iter().map(|&f| name(f)).collect();
        let Some(outer) = frames.iter().position(|f| f.contains("Inline.outer(")) else {
            continue;
        };
        if !frames[outer..].iter().any(|f| f.contains("Inline.main(")) {
            continue;
        }
        in_outer += stack.samples;
        if outer > 0 && frames[outer - 1].contains("Inline.inner(") {
            inner_under_outer += stack.samples;
        }
    }
    let stacks = top_stacks(&profile, 6);
    eprintln!("{inner_under_outer} of {in_outer}\n{stacks}");
    assert!(
        in_outer >= 1000,
        "{in_outer} samples under Inline.outer\n{stacks}"
    );
    assert!(
        inner_under_outer * 10 >= in_outer * 9,
        "Inline.inner under Inline.outer in {inner_under_outer} of {in_outer} samples\n{stacks}"
    );
}

/// After a deoptimisation, the code compiled again is named by itself: no sample taken after
/// the switch is named by the nmethod the JVM made not entrant (and flushes), whose inlining
/// (`Square.area`) no longer runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_deoptimisation_no_sample_is_named_by_the_code_it_freed() {
    use std::io::{BufRead, BufReader, Write};
    let daemon = Daemon::start();
    let mut client = connect(&daemon.socket).await.unwrap();
    // No receiver type profile: C2 inlines `Square.area` on the class hierarchy alone, as on
    // JDK 17 by default. JDK 25 otherwise inlines it on the profile, behind a guard, and
    // after the switch inlines both shapes' `area` (the profile still counts squares), so
    // the new code would hold `Square.area` too.
    let mut child = Command::new(java())
        .arg("-XX:TypeProfileWidth=0")
        .arg(java_fixture("Deopt.java"))
        .arg("9")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn java");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut wait_for = |word: &str| {
        let mut line = String::new();
        while line.trim() != word {
            line.clear();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "no {word}");
        }
    };
    wait_for("ready");
    // Before the switch, Square.area is inlined into work and named so.
    let pid = child.id();
    // 2 s: the five tests of this file share two cores, a JVM gets about a third of one.
    let before = record_stacks(&mut client, pid, CallGraph::Dwarf, 0, 2.0).await;
    writeln!(child.stdin.as_mut().unwrap()).unwrap();
    wait_for("switched");
    let after = record_stacks(&mut client, pid, CallGraph::Dwarf, 0, 2.5).await;
    let jvm = Running { child };
    clean_jvm(pid);
    drop(jvm);
    let under_work = |profile: &Profile, method: &str| -> (u64, u64) {
        let name = |i: u32| profile.frames[i as usize].name.as_str();
        let mut counts = (0, 0);
        for stack in &profile.stacks {
            let frames: Vec<&str> = stack.frames.iter().map(|&f| name(f)).collect();
            let Some(work) = frames.iter().position(|f| f.contains("Deopt.work(")) else {
                continue;
            };
            counts.0 += stack.samples;
            if work > 0 && frames[work - 1].contains(method) {
                counts.1 += stack.samples;
            }
        }
        counts
    };
    // The session read the code cache whole as it started, so its first samples are named by
    // the nmethod too (without that scan, about 13% were left to the perf map, which knows
    // nothing of inlining).
    let (work, square) = under_work(&before, "Deopt$Square.area(");
    eprintln!("before: Square.area under work in {square} of {work}");
    assert!(
        work >= 500 && square * 100 >= work * 95,
        "before: Square.area under work in {square} of {work}\n{}",
        top_stacks(&before, 6)
    );
    let (work, circle) = under_work(&after, "Deopt$Circle.area(");
    let (_, square) = under_work(&after, "Deopt$Square.area(");
    let stacks = top_stacks(&after, 8);
    assert_eq!(
        square, 0,
        "after: samples named by the freed code\n{stacks}"
    );
    assert!(
        work >= 1000 && circle * 10 >= work * 8,
        "after: Circle.area under work in {circle} of {work}\n{stacks}"
    );
}
