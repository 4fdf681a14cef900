//! Targets' lifetimes: exit events end a target at its exit's time, a process that runs on after
//! its leader's exit is armed again, and a target found ended when its filter is armed is never
//! sampled. The fake kernel stands for the exit tracepoint by dropping the `TRACKED` entry.

use std::{
    io::{BufRead, BufReader, Write},
    path::PathBuf,
    process::{ChildStdin, Stdio},
    sync::OnceLock,
};

use vmscope_common::EVENT_EXIT;

use super::*;

/// A manager whose tick never comes: only events may notice an exit.
fn harness_without_tick() -> Harness {
    harness_with(ManagerConfig {
        tick: Duration::from_secs(3600),
        ..ManagerConfig::default()
    })
}

fn exit_event(tgid: u32, tid: u32, timestamp_ns: u64) -> Event {
    Event {
        kind: EVENT_EXIT,
        tgid,
        tid,
        timestamp_ns,
        ..Event::default()
    }
}

impl Harness {
    /// What the exit tracepoint does in the kernel.
    fn kernel_exit(&self, tgid: u32) {
        self.kernel.lock().unwrap().tracked.remove(&tgid);
    }

    async fn counter(&self, name: &str) -> u64 {
        self.manager.counters().await.unwrap().values[name]
    }
}

fn state_of(pid: u32) -> Option<char> {
    let text = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    vmscope_parse::stat::parse_stat(&text).ok().map(|s| s.state)
}

/// Waits until `pid`'s leader is a zombie.
fn wait_for_zombie(pid: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while state_of(pid) != Some('Z') {
        assert!(std::time::Instant::now() < deadline, "{pid} is no zombie");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A program whose main thread leaves by `pthread_exit` on a line of input, while another
/// thread sleeps on until killed (or for 30 s, like the other sleepers, should a test fail
/// before it kills it).
fn leaderless_program() -> &'static PathBuf {
    static PROGRAM: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &PROGRAM
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let source = dir.path().join("leaderless.c");
            std::fs::write(
                &source,
                "#include <pthread.h>\n#include <stdio.h>\n#include <unistd.h>\n\
                 static void *sleeper(void *arg) { sleep(30); return arg; }\n\
                 int main(void) { pthread_t t; char line[8];\n\
                 if (pthread_create(&t, NULL, sleeper, NULL)) return 2;\n\
                 setvbuf(stdout, NULL, _IONBF, 0); printf(\"ready\\n\");\n\
                 if (!fgets(line, sizeof line, stdin)) return 2;\n\
                 pthread_exit(NULL); }\n",
            )
            .unwrap();
            let program = dir.path().join("leaderless");
            let status = Command::new("gcc")
                .args(["-pthread", "-o"])
                .arg(&program)
                .arg(&source)
                .status()
                .expect("gcc");
            assert!(status.success());
            (dir, program)
        })
        .1
}

/// Starts the leaderless program; its main thread leaves when a line is written to the stdin
/// returned.
fn leaderless() -> (Child, ChildStdin) {
    let mut child = Command::new(leaderless_program())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    let stdin = child.stdin.take().unwrap();
    (child, stdin)
}

#[tokio::test]
async fn an_exit_event_ends_the_target_at_its_time() {
    let h = harness_without_tick();
    let mut short = sleeper("30");
    let mut long = sleeper("30");
    let (short_pid, long_pid) = (short.id(), long.id());
    let s = h
        .manager
        .start(ROOT, start_request(&[short_pid, long_pid], 100))
        .await
        .unwrap();
    assert_eq!(h.kernel().tracked, [short_pid, long_pid].into());
    let before = sys::monotonic_ns();
    // The exit tracepoint runs before the process can be reaped.
    let at = sys::monotonic_ns();
    short.kill().unwrap();
    short.wait().unwrap();
    h.kernel_exit(short_pid);
    h.send(
        vec![
            sample(short_pid, 100, before),
            exit_event(short_pid, short_pid, at),
            // Whoever has the pid now, or the last of its threads: not the target.
            sample(short_pid, 100, at + 1),
            sample(long_pid, 100, at + 1),
        ],
        at + 2,
    )
    .await;
    let session = h.manager.get(ROOT, s.id).await.unwrap();
    assert_eq!(
        session.samples,
        2,
        "{session:?} {:?}",
        h.manager.counters().await.unwrap()
    );
    assert!(session.targets[0].exited && !session.targets[1].exited);
    assert_eq!(session.targets[0].note.as_deref(), Some("exited"));
    let k = h.kernel();
    assert_eq!(k.targets, [(period_of(100), long_pid)].into());
    assert_eq!(k.tracked, [long_pid].into());
    assert_eq!(h.counter("exit_events").await, 1);

    // The last target's exit stops the session at the exit's time.
    let at = sys::monotonic_ns();
    long.kill().unwrap();
    long.wait().unwrap();
    h.kernel_exit(long_pid);
    h.send(vec![exit_event(long_pid, long_pid, at)], at + 1)
        .await;
    let session = h.manager.get(ROOT, s.id).await.unwrap();
    assert_ne!(session.state, State::Running);
    assert_eq!(session.stop_reason.as_deref(), Some("all targets exited"));
    assert!(h.kernel().targets.is_empty() && h.kernel().tracked.is_empty());
}

#[tokio::test]
async fn a_target_whose_leader_exits_first_is_armed_for_any_threads_exit() {
    let h = harness_without_tick();
    let (mut child, mut stdin) = leaderless();
    let pid = child.id();
    let s = h
        .manager
        .start(ROOT, start_request(&[pid], 100))
        .await
        .unwrap();
    assert_eq!(h.kernel().tracked, [pid].into());
    assert!(h.kernel().tracked_any_thread.is_empty());

    stdin.write_all(b"\n").unwrap();
    wait_for_zombie(pid);
    let at = sys::monotonic_ns();
    h.kernel_exit(pid);
    h.send(
        vec![exit_event(pid, pid, at), sample(pid, 100, at + 1)],
        at + 2,
    )
    .await;
    let k = h.kernel();
    assert_eq!(k.tracked, [pid].into(), "armed again");
    assert_eq!(k.tracked_any_thread, [pid].into());
    let session = h.manager.get(ROOT, s.id).await.unwrap();
    assert_eq!(session.state, State::Running);
    assert!(!session.targets[0].exited);
    assert_eq!(session.samples, 1, "its thread runs on, sampled");
    assert_eq!(h.counter("exits_process_ran_on").await, 1);

    // Its last thread ends the process.
    let at = sys::monotonic_ns();
    child.kill().unwrap();
    child.wait().unwrap();
    h.kernel_exit(pid);
    h.send(vec![exit_event(pid, pid + 1, at)], at + 1).await;
    let session = h.manager.get(ROOT, s.id).await.unwrap();
    assert_eq!(session.stop_reason.as_deref(), Some("all targets exited"));
    assert!(session.targets[0].exited);
    assert!(h.kernel().tracked.is_empty());
}

#[tokio::test]
async fn a_target_that_ended_before_its_filter_was_armed_is_never_sampled() {
    let h = harness_without_tick();
    // A zombie: exited, its exit tracepoint long past, its pid not yet free.
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    wait_for_zombie(pid);
    let s = h
        .manager
        .start(ROOT, start_request(&[pid], 100))
        .await
        .unwrap();
    assert!(s.targets[0].exited, "{s:?}");
    assert_eq!(s.stop_reason.as_deref(), Some("all targets exited"));
    let k = h.kernel();
    assert!(
        k.tracked.is_empty() && k.targets.is_empty(),
        "nothing armed for the pid's next owner: {k:?}"
    );
    child.wait().unwrap();
    let now = sys::monotonic_ns();
    h.send(vec![sample(pid, 100, now)], now + 1).await;
    assert_eq!(h.manager.get(ROOT, s.id).await.unwrap().samples, 0);
}

#[tokio::test]
async fn a_leader_that_runs_on_after_its_exit_event_is_armed_again() {
    let h = harness_without_tick();
    let mut child = sleeper("30");
    let pid = child.id();
    let s = h
        .manager
        .start(ROOT, start_request(&[pid], 100))
        .await
        .unwrap();
    // What an execve from another thread looks like: the old leader's exit, then a leader with
    // the same start time under the pid, started clock ticks before the exit (a process forked
    // into the pid after the exit could not have). A successor within the same tick is judged
    // by life::after_exit.
    tokio::time::sleep(Duration::from_millis(30)).await;
    let at = sys::monotonic_ns();
    h.kernel_exit(pid);
    h.send(vec![exit_event(pid, pid, at)], at + 1).await;
    let session = h.manager.get(ROOT, s.id).await.unwrap();
    assert!(!session.targets[0].exited, "{session:?}");
    let k = h.kernel();
    assert_eq!(k.tracked, [pid].into(), "armed again");
    assert!(k.tracked_any_thread.is_empty(), "until its leader's exit");
    assert_eq!(h.counter("exits_process_ran_on").await, 1);
    assert_eq!(h.counter("pid_reuses").await, 0);
    child.kill().unwrap();
    child.wait().unwrap();
}
