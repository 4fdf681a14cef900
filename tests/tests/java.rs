//! HotSpot with no JVM flags: the daemon asks the JVM for its perf map (jcmd's attach
//! mechanism), at the start, when unnamed Java code piles up and at the stop; a map written at
//! exit names the samples before it, marked as a later snapshot; `--no-jvm-attach` leaves the
//! JVM alone; and Java stacks by frame pointers are whole with -XX:+PreserveFramePointer and
//! without it (then unwound from a copy by the JVM's frame layout: see java_stacks.rs).
//!
//! The fixture is tests/fixtures/java/Hot.java: `hot` (C2-compiled, not inlined) holds nearly
//! all the CPU, called by `caller`.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use vmscope_proto::v1::{CallGraph, Profile, Section, StackEnd};
use vmscope_tests::{
    Daemon, Running, connect,
    java::{clean_jvm, java_fixture},
    json_report, rows, shared_tempdir,
    stacks::record_stacks,
};

fn hot_java() -> PathBuf {
    java_fixture("Hot.java")
}

/// `java [FLAGS] Hot.java SECONDS`, started and warmed up ("ready").
fn start_java(flags: &[&str], seconds: &str) -> Running {
    vmscope_tests::java::start_java("Hot.java", flags, seconds)
}

fn n(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// `vmscope record --format json ARGS`: its report.
fn record(daemon: &Daemon, args: &[&str]) -> serde_json::Value {
    let dir = shared_tempdir();
    let out = daemon
        .cli()
        .args(["record", "--format", "json"])
        .args(args)
        .current_dir(dir.path())
        .output()
        .expect("run vmscope");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    json_report(&out)
}

/// The report's rows of generated code.
fn generated_rows(report: &serde_json::Value) -> impl Iterator<Item = &serde_json::Value> {
    report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["section"] == "generated")
        .flat_map(|s| s["rows"].as_array().unwrap())
}

/// The generated row naming `Hot.hot`: (samples, of them from a later snapshot).
fn hot_row(report: &serde_json::Value) -> (u64, u64) {
    let rows = generated_rows(report).filter(|r| r["name"].as_str().unwrap().contains("Hot.hot("));
    rows.fold((0, 0), |(all, later), r| {
        (
            all + n(r, "samples"),
            later + n(r, "later_snapshot_samples"),
        )
    })
}

#[test]
fn a_running_jvm_without_flags_gets_its_java_methods_named() {
    let daemon = Daemon::start();
    let jvm = start_java(&[], "8");
    let pid = jvm.pid();
    let report = record(&daemon, &["--pid", &pid.to_string(), "--duration", "3"]);
    clean_jvm(pid);
    let total = n(&report, "total_samples");
    let (hot, later) = hot_row(&report);
    assert!(
        hot * 2 >= total,
        "Hot.hot holds {hot} of {total} samples: {report}"
    );
    // Asked at the start: what was compiled then is named on time.
    assert!(later * 10 <= hot, "{later} of {hot} from a later snapshot");
}

/// The daemon's log lines on JVMs and their perf maps, for a failure to show when each was
/// asked.
fn jvm_lines(daemon: &Daemon) -> String {
    daemon
        .log()
        .lines()
        .filter(|l| l.contains("JVM") || l.contains("perf map") || l.contains("session"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The daemon's counters of its perf map requests to JVMs, and of samples in generated code,
/// for a failure to show whether a request went unanswered.
fn jvm_counters(daemon: &Daemon) -> String {
    let out = daemon
        .cli()
        .args(["info", "--json"])
        .output()
        .expect("run vmscope info");
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    info["counters"]
        .as_object()
        .map(|counters| {
            counters
                .iter()
                .filter(|(name, _)| name.starts_with("jvm") || name.starts_with("jit_samples"))
                .map(|(name, value)| format!("{name} {value}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// Samples in generated code: (all, in code no map named).
fn generated(report: &serde_json::Value) -> (u64, u64) {
    generated_rows(report).fold((0, 0), |(all, unnamed), r| {
        let samples = n(r, "samples");
        let named = r["symbolized"].as_bool().unwrap();
        (all + samples, unnamed + if named { 0 } else { samples })
    })
}

#[test]
fn a_jvm_recorded_from_its_start_without_flags_gets_its_java_methods_named() {
    let daemon = Daemon::start();
    let report = record(&daemon, &["--", "java", hot_java().to_str().unwrap(), "4"]);
    if let Some(pid) = report["targets"][0]["pid"].as_u64() {
        clean_jvm(pid as u32);
    }
    // The JVM's start (the source launcher compiling Hot.java, the JIT warming up) takes a
    // share of its CPU that grows on a busy machine: counted among the generated code only.
    let (jit, unnamed) = generated(&report);
    let (hot, _) = hot_row(&report);
    eprintln!(
        "generated code: {jit} samples, Hot.hot {hot}, unnamed {unnamed}; {}",
        jvm_counters(&daemon)
    );
    assert!(
        hot * 2 >= jit,
        "Hot.hot holds {hot} of {jit} samples in generated code: {report}"
    );
    // The JVM exits by itself: the last snapshot it wrote when asked must hold Hot.hot as it
    // ran at the end. Asked too seldom, the code C2 compiled after it stays unnamed.
    assert!(
        unnamed * 10 <= hot,
        "{unnamed} samples in unnamed generated code against {hot} in Hot.hot: {report}\n\
         the daemon's requests:\n{}\nits counters: {}",
        jvm_lines(&daemon),
        jvm_counters(&daemon)
    );
}

#[test]
fn a_perf_map_written_at_exit_names_the_samples_marked_as_a_later_snapshot() {
    let daemon = Daemon::start();
    let report = record(
        &daemon,
        &[
            "--no-jvm-attach",
            // The leaf alone: with stacks, the JVM's stack is copied and its compiled frames
            // are named by their nmethods (once the code cache is read), not by the perf map.
            "--call-graph",
            "none",
            "--",
            "java",
            "-XX:+UnlockDiagnosticVMOptions",
            "-XX:+DumpPerfMapAtExit",
            hot_java().to_str().unwrap(),
            "3",
        ],
    );
    if let Some(pid) = report["targets"][0]["pid"].as_u64() {
        clean_jvm(pid as u32);
    }
    // As recorded from its start: the start's share depends on the machine's load.
    let (jit, _) = generated(&report);
    let (hot, later) = hot_row(&report);
    assert!(
        hot * 2 >= jit,
        "Hot.hot holds {hot} of {jit} samples in generated code: {report}"
    );
    assert_eq!(later, hot, "all named from the map written at exit");
    assert!(n(&report, "jit_samples_from_later_snapshot") >= later);
}

#[test]
fn no_jvm_attach_leaves_the_jvm_alone() {
    let daemon = Daemon::start();
    let mut jvm = start_java(&[], "6");
    let pid = jvm.pid();
    // This JVM writes no perf map: one at its pid is an earlier process's, left behind by
    // whatever ran under that pid before (pids wrap at 32,768 here; CI once read one).
    clean_jvm(pid);
    let report = record(
        &daemon,
        &[
            "--no-jvm-attach",
            "--pid",
            &pid.to_string(),
            "--duration",
            "1.5",
        ],
    );
    // No attach listener was started (it makes /tmp/.java_pidPID), no trigger file left.
    let socket = format!("/tmp/.java_pid{pid}");
    let trigger = format!("/tmp/.attach_pid{pid}");
    let listener = Path::new(&socket).exists();
    let left = Path::new(&trigger).exists();
    // A SIGQUIT with no trigger file makes HotSpot print a thread dump on its standard output.
    let _ = jvm.child.kill();
    let mut output = String::new();
    if let Some(mut stdout) = jvm.child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut stdout, &mut output);
    }
    clean_jvm(pid);
    assert!(!listener, "the JVM was attached to: {socket} exists");
    assert!(!left, "{trigger} was made");
    assert!(
        !output.contains("Full thread dump"),
        "the JVM got a SIGQUIT: {output}"
    );
    // Its Java code is still named, from its own structures read from outside (its
    // vmStructs), which asks nothing of it: no perf map names any of it.
    let (hot, _) = hot_row(&report);
    assert!(hot > 0, "Hot.hot named from the JVM's structures: {report}");
    let perf_mapped: Vec<&serde_json::Value> = generated_rows(&report)
        .filter(|r| r["code_map"] == "perf map")
        .collect();
    assert!(
        perf_mapped.is_empty(),
        "named by a perf map: {perf_mapped:?}"
    );
}

/// The stacks whose leaf is `Hot.hot`: (samples, with `Hot.caller` under it, ended at Java
/// code without frame pointers).
fn hot_stacks(profile: &Profile) -> (u64, u64, u64) {
    let name = |i: u32| profile.frames[i as usize].name.as_str();
    let mut counts = (0, 0, 0);
    for stack in &profile.stacks {
        let Some(&leaf) = stack.frames.first() else {
            continue;
        };
        if !name(leaf).contains("Hot.hot(") {
            continue;
        }
        counts.0 += stack.samples;
        if stack
            .frames
            .get(1)
            .is_some_and(|&f| name(f).contains("Hot.caller("))
        {
            counts.1 += stack.samples;
        }
        if stack.end == StackEnd::JitNoFramePointer as i32 {
            counts.2 += stack.samples;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_stacks_by_frame_pointers_are_whole_with_or_without_preserve_frame_pointer() {
    let daemon = Daemon::start();
    let mut client = connect(&daemon.socket).await.unwrap();

    // With the flag, the kernel's frame-pointer walk goes through compiled Java.
    let jvm = start_java(&["-XX:+PreserveFramePointer"], "6");
    let profile = record_stacks(&mut client, jvm.pid(), CallGraph::Fp, 0, 2.5).await;
    clean_jvm(jvm.pid());
    drop(jvm);
    let total: u64 = rows(&profile, Section::Generated).map(|r| r.samples).sum();
    let (hot, called, cut) = hot_stacks(&profile);
    assert!(hot * 2 >= total, "Hot.hot leads: {hot} of {total}");
    assert!(
        called * 10 >= hot * 9,
        "Hot.caller under Hot.hot in {called} of {hot} stacks"
    );
    assert_eq!(cut, 0);

    // Without it, the JVM's stack is copied too and its Java frames unwound by their layout
    // (they used to end at the first Java frame).
    let jvm = start_java(&[], "6");
    let profile = record_stacks(&mut client, jvm.pid(), CallGraph::Fp, 0, 2.5).await;
    clean_jvm(jvm.pid());
    let (hot, called, cut) = hot_stacks(&profile);
    assert!(hot > 0);
    assert!(
        called * 10 >= hot * 9,
        "Hot.caller under Hot.hot in {called} of {hot} stacks without the flag"
    );
    assert_eq!(cut, 0, "stacks said to end at Java code");
}

/// The perf map that the daemon's requests made a JVM write goes once no session needs it
/// (it used to stay in /tmp for good); one that was there before the daemon asked (here from
/// `jcmd`) is the user's and stays.
#[test]
fn the_daemon_removes_the_perf_maps_it_caused_and_keeps_the_users() {
    let daemon = Daemon::start();
    let users = start_java(&[], "8");
    let users_pid = users.pid();
    let users_map = PathBuf::from(format!("/tmp/perf-{users_pid}.map"));
    let jcmd = Command::new("jcmd")
        .args([&users_pid.to_string(), "Compiler.perfmap"])
        .output()
        .expect("run jcmd");
    assert!(jcmd.status.success(), "{jcmd:?}");
    assert!(users_map.exists());
    record(
        &daemon,
        &["--pid", &users_pid.to_string(), "--duration", "1"],
    );

    let report = record(&daemon, &["--", "java", hot_java().to_str().unwrap(), "2"]);
    let pid = report["targets"][0]["pid"].as_u64().expect("the JVM's pid");
    let caused = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    let named = generated_rows(&report).any(|r| r["name"].as_str().unwrap().contains("Hot.hot("));
    // The daemon looks every 5 s for maps no session needs.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while caused.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let left = caused.exists();
    let users_kept = users_map.exists();
    clean_jvm(pid as u32);
    clean_jvm(users_pid);
    assert!(named, "the daemon's requests named Hot.hot: {report}");
    assert!(
        !left,
        "{} is still there:\n{}",
        caused.display(),
        jvm_lines(&daemon)
    );
    // The pass that removed the other had this one's session stopped too.
    assert!(
        users_kept,
        "the map jcmd wrote was removed:\n{}",
        jvm_lines(&daemon)
    );
}
