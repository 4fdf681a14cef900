//! A pid reused right after a target exits is never sampled for the old target's session, nor
//! named as its target; a target whose leader exits before its other threads is sampled to its
//! end.
//!
//! The race, 20 times: a session on two idle processes A and B; B exits, and a root process
//! (the racer) forks until a child gets B's pid, at once (it sets `ns_last_pid` to B-1 as soon
//! as it has reaped B: about 0.1 ms later here). The child spins in a function of its own for
//! 200 ms. Before the kernel removed an exited target from its filter by itself, the daemon
//! noticed the exit at its next housekeeping tick (up to 100 ms later), and the child's samples
//! landed in the session, under its target's name.

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use vmscope_proto::v1::{
    GetProfileRequest, GetSessionRequest, Session, SessionState, StartSessionRequest,
};
use vmscope_tests::{Client, Daemon, Running, dump, gcc_fixture, shared_tempdir, stop_and_profile};

/// The function the racer's child spins in.
const RACER_FUNCTION: &str = "racer_spin_in_reused_pid";
/// How long it spins, in ms: twice the daemon's housekeeping tick.
const SPIN_MS: u32 = 200;
const RUNS: usize = 20;

struct RaceFixtures {
    _dir: tempfile::TempDir,
    /// `pid_victim`: prints "ready" and waits for the end of its standard input.
    victim: PathBuf,
    /// `pid_racer`: runs a victim, lets it exit and forks into its pid.
    racer: PathBuf,
    /// `pid_leaderless`: its leader leaves by `pthread_exit`, a thread spins on.
    leaderless: PathBuf,
}

fn race_fixtures() -> &'static RaceFixtures {
    static FIXTURES: OnceLock<RaceFixtures> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let dir = shared_tempdir();
        let build = |name: &str| {
            let out = dir.path().join(name);
            let out_text = out.to_str().expect("UTF-8 temporary path");
            gcc_fixture(&src, &["-pthread", "-o", out_text, &format!("{name}.c")])
                .unwrap_or_else(|e| panic!("{e:#}"));
            out
        };
        RaceFixtures {
            victim: build("pid_victim"),
            racer: build("pid_racer"),
            leaderless: build("pid_leaderless"),
            _dir: dir,
        }
    })
}

/// A racer whose victim runs, waiting for the word to exit.
struct Racer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    victim: u32,
}

impl Racer {
    fn start() -> Racer {
        let fixtures = race_fixtures();
        let mut child = Command::new(&fixtures.racer)
            .arg(&fixtures.victim)
            .arg(SPIN_MS.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the racer");
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let line = read_line(&mut stdout);
        let victim = line
            .strip_prefix("victim ")
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("the racer said {line:?}"));
        Racer {
            child,
            stdin,
            stdout,
            victim,
        }
    }

    /// Lets the victim exit and races for its pid; returns how many forks it took and how
    /// long after the victim was reaped the winner was forked, in microseconds.
    fn race(&mut self) -> (u32, u32) {
        self.stdin.write_all(b"go\n").expect("tell the racer");
        let line = read_line(&mut self.stdout);
        let mut words = line.split(' ');
        match (words.next(), words.next(), words.next()) {
            (Some("reused"), Some(tries), Some(us)) => (
                tries.parse().expect("tries"),
                us.parse().expect("microseconds"),
            ),
            _ => panic!("the racer said {line:?}"),
        }
    }

    /// Waits until the child in the victim's pid has exited.
    fn done(&mut self) {
        assert_eq!(read_line(&mut self.stdout), "done");
        assert!(self.child.wait().expect("wait for the racer").success());
    }
}

impl Drop for Racer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_line(from: &mut impl BufRead) -> String {
    let mut line = String::new();
    from.read_line(&mut line).expect("read the racer's output");
    line.trim_end().to_owned()
}

async fn session(client: &mut Client, id: u64) -> Session {
    client
        .get_session(GetSessionRequest { session_id: id })
        .await
        .expect("get the session")
        .into_inner()
}

/// Panics if a target of the session is shown with the racer's executable.
fn assert_not_named_racer(session: &Session, run: usize, when: &str) {
    let racer = race_fixtures().racer.display().to_string();
    for target in &session.targets {
        assert!(
            target.executable != racer && target.command != "pid_racer",
            "run {run}, {when}: target {} is shown as the racer: {target:?}",
            target.pid
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_pid_is_never_sampled_for_the_old_targets_session() {
    let daemon = Daemon::start();
    let mut client = daemon.client().await;
    // A lives through every run, idle, so that each session runs on after B exits.
    let a = Running::start(Command::new(&race_fixtures().victim).stdin(Stdio::piped()));
    let started = Instant::now();
    let mut windows = Vec::new();
    for run in 1..=RUNS {
        let mut racer = Racer::start();
        let b = racer.victim;
        let id = client
            .start_session(StartSessionRequest {
                pids: vec![a.pid(), b],
                ..Default::default()
            })
            .await
            .expect("start a session on A and B")
            .into_inner()
            .id;
        let (tries, us) = racer.race();
        windows.push((tries, us));
        // While the child spins in B's pid: the targets are A and B, never the racer.
        let spin_ends = Instant::now() + Duration::from_millis(u64::from(SPIN_MS));
        while Instant::now() < spin_ends {
            assert_not_named_racer(&session(&mut client, id).await, run, "during the spin");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        racer.done();
        assert_not_named_racer(&session(&mut client, id).await, run, "after the spin");
        let profile = stop_and_profile(&mut client, id).await;
        let stopped = profile.session.as_ref().expect("the session");
        assert_not_named_racer(stopped, run, "once stopped");
        let b_target = stopped
            .targets
            .iter()
            .find(|t| t.pid == b)
            .expect("B is a target");
        assert!(b_target.exited, "run {run}: B exited: {b_target:?}");
        let racer_samples: u64 = profile
            .rows
            .iter()
            .filter(|r| r.name == RACER_FUNCTION)
            .map(|r| r.samples)
            .sum();
        assert_eq!(
            racer_samples,
            0,
            "run {run}: the racer's child, forked into B's pid {us} us after B was reaped, was \
             sampled for B's session:\n{}",
            dump(&profile)
        );
    }
    let elapsed = started.elapsed();
    eprintln!(
        "{RUNS} races in {:.1} s; (forks, us from reaping to the winning fork): {windows:?}",
        elapsed.as_secs_f64()
    );
    assert!(
        elapsed < Duration::from_secs(20),
        "{RUNS} races took {elapsed:?}"
    );
}

/// The thread of `pid_leaderless` that outlives its leader.
const AFTER_LEADER_FUNCTION: &str = "spin_after_leader";
/// Its CPU time after the leader left, in ms.
const AFTER_LEADER_MS: u32 = 600;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_whose_leader_exits_first_is_sampled_to_its_end() {
    let daemon = Daemon::start();
    let mut client = daemon.client().await;
    let mut target = Running::start(
        Command::new(&race_fixtures().leaderless)
            .arg(AFTER_LEADER_MS.to_string())
            .stdin(Stdio::piped()),
    );
    let hz = 1000;
    let id = client
        .start_session(StartSessionRequest {
            pids: vec![target.pid()],
            frequency_hz: Some(hz),
            ..Default::default()
        })
        .await
        .expect("start a session")
        .into_inner()
        .id;
    // The leader leaves; its thread spins on, then ends the process.
    let mut stdin = target.child.stdin.take().expect("piped stdin");
    stdin.write_all(b"go\n").expect("tell the leader");
    assert!(target.child.wait().expect("wait").success());
    // The session ends by itself, when the last thread does.
    let deadline = Instant::now() + Duration::from_secs(5);
    let stopped = loop {
        let s = session(&mut client, id).await;
        if s.state() == SessionState::Stopped {
            break s;
        }
        assert!(Instant::now() < deadline, "the session did not stop: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(stopped.stop_reason, "all targets exited", "{stopped:?}");
    assert!(stopped.targets[0].exited);
    let profile = client
        .get_profile(GetProfileRequest {
            session_id: id,
            ..Default::default()
        })
        .await
        .expect("profile")
        .into_inner();
    let spun: u64 = profile
        .rows
        .iter()
        .filter(|r| r.name == AFTER_LEADER_FUNCTION)
        .map(|r| r.samples)
        .sum();
    // Samples follow CPU time: the thread's 600 ms at 1000 Hz are 600 samples. What is lost is
    // the time between the leader's exit and the daemon arming the filter again.
    let expected = u64::from(AFTER_LEADER_MS * hz / 1000);
    eprintln!("{spun} samples of {AFTER_LEADER_FUNCTION} after its leader left, of {expected}");
    assert!(
        spun * 10 >= expected * 8,
        "{spun} samples of {AFTER_LEADER_FUNCTION}, expected about {expected}:\n{}",
        dump(&profile)
    );
    let counters = vmscope_tests::counters(&mut client).await;
    assert_eq!(counters["exits_process_ran_on"], 1, "{counters:?}");
    assert!(counters["exit_events"] >= 2, "{counters:?}");
}
