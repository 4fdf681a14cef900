//! The daemon holds a binary open only while something needs it: a live process that maps it, or
//! a session that can still be reported with samples in it. Short-lived programs must not leave
//! their binaries open behind them (issue 10, item 6).

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use vmscope_proto::v1::{GetSessionRequest, StartSessionRequest, StopSessionRequest};
use vmscope_tests::{
    Daemon, Running, distinct_copies, fixtures, open_fd_targets, open_fds, stop_and_profile,
};

/// Distinct binaries run, as in the report.
const PROGRAMS: u32 = 400;

/// File descriptors the daemon may hold beyond its idle count once the programs are gone: the
/// second session's target (its binary, the C library, the loader) and gRPC connections.
const SLACK_FDS: usize = 16;

fn session(pids: Vec<u32>) -> StartSessionRequest {
    StartSessionRequest {
        pids,
        ..Default::default()
    }
}

/// `targets` counted by kind, one a line: files by directory, other descriptors (sockets,
/// pipes, BPF objects) by type.
fn summary(targets: &[String]) -> String {
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for target in targets {
        let kind = match target.rsplit_once('/') {
            Some((dir, _)) if target.starts_with('/') => format!("{dir}/*"),
            _ => target.split('[').next().unwrap_or(target).to_owned(),
        };
        *kinds.entry(kind).or_default() += 1;
    }
    kinds
        .iter()
        .map(|(kind, n)| format!("{n:>6} {kind}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// 400 programs, each a distinct binary, are read by a session while they run, then exit; once
/// that session is evicted, the daemon's open files come back to what they were before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binaries_of_exited_programs_are_closed_once_no_session_needs_them() {
    // One stopped session kept: the second session's stop evicts the first, whose report was
    // taken.
    let daemon = Daemon::start_with(&["--keep-sessions", "1"]);
    let mut client = daemon.client().await;
    let baseline = open_fds(daemon.pid());

    let dir = vmscope_tests::shared_tempdir();
    let copies = distinct_copies(&fixtures().waiter, dir.path(), PROGRAMS);
    let mut programs: Vec<Running> = copies
        .iter()
        .map(|path| Running::start(Command::new(path).stdin(Stdio::piped())))
        .collect();
    let pids = programs.iter().map(Running::pid).collect();
    // The session reads every target's mappings at its start, which registers its binary.
    let first = client
        .start_session(session(pids))
        .await
        .expect("start a session on every program")
        .into_inner();
    let held = open_fds(daemon.pid());
    assert!(
        held >= baseline + PROGRAMS as usize,
        "the daemon holds {held} fds with {PROGRAMS} distinct binaries running, from \
         {baseline}: it should hold each one open while its process lives"
    );

    for program in &mut programs {
        drop(program.child.stdin.take());
    }
    for program in &mut programs {
        program.child.wait().expect("the program exits");
    }
    // All its targets exited: the session stops, and is kept until its report is taken.
    stop_and_profile(&mut client, first.id).await;

    let other = Running::start(Command::new(&fixtures().waiter).stdin(Stdio::piped()));
    let second = client
        .start_session(session(vec![other.pid()]))
        .await
        .expect("start a second session")
        .into_inner();
    client
        .stop_session(StopSessionRequest {
            session_id: second.id,
            ..Default::default()
        })
        .await
        .expect("stop the second session");
    let evicted = client
        .get_session(GetSessionRequest {
            session_id: first.id,
        })
        .await;
    assert!(
        evicted.is_err(),
        "--keep-sessions 1: the first session is evicted by the second's stop"
    );

    // The registry is swept every second; a dead process's binaries go once the samples it
    // took before exiting have all been read. Processes found dead in different sweeps close
    // in different sweeps: wait for the last.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (now_open, counters) = loop {
        let now_open = open_fds(daemon.pid());
        let counters = vmscope_tests::counters(&mut client).await;
        let closed = counters.get("modules_closed").copied().unwrap_or(0);
        let done = now_open <= baseline + SLACK_FDS && closed >= u64::from(PROGRAMS);
        if done || Instant::now() > deadline {
            break (now_open, counters);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        now_open <= baseline + SLACK_FDS,
        "the daemon still holds {now_open} fds 5 s after the programs exited and their session \
         was evicted; it held {baseline} before they ran (at most {SLACK_FDS} more allowed). \
         By kind:\n{}",
        summary(&open_fd_targets(daemon.pid()))
    );
    let closed = counters.get("modules_closed").copied();
    assert!(
        closed.is_some_and(|n| n >= u64::from(PROGRAMS)),
        "modules_closed {closed:?}, expected at least {PROGRAMS}"
    );
    let open = vmscope_tests::gauges(&mut client)
        .await
        .get("modules_open_now")
        .copied();
    assert!(
        open.is_some_and(|n| n <= SLACK_FDS as u64),
        "modules_open_now {open:?} with one waiter left"
    );
    drop(other);
}
