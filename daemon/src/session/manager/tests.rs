//! Session manager tests over a fake kernel: routing, stop semantics, reference counting,
//! permissions. Real processes (this test process, short-lived children) stand in as targets.

use std::{
    path::Path,
    process::{Child, Command},
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::mpsc;
use vmscope_common::{EVENT_EXEC, EVENT_SAMPLE, Event, FLAG_KERNEL_MODE, FLAG_TARGET, TargetKey};
use vmscope_model::IntervalKind;

use super::*;
use crate::{
    bpf::fake::{FakeKernel, FakeSampler},
    codemap::{code::CodeStore, timeline::Change},
    session::CallGraphMode,
};

const MAX_HZ: u32 = 10_000;

struct Harness {
    manager: ManagerHandle,
    modules: Arc<Modules>,
    batches: mpsc::Sender<Batch>,
    kernel: Arc<Mutex<FakeKernel>>,
    reader: Arc<crate::bpf::ReaderControl>,
}

fn harness_with(config: ManagerConfig) -> Harness {
    harness_with_config_and_store(config, Arc::new(CodeStore::new()))
}

fn harness_with_config_and_store(config: ManagerConfig, store: Arc<CodeStore>) -> Harness {
    let sampler = FakeSampler::default();
    let kernel = sampler.kernel.clone();
    let (batches, rx) = mpsc::channel(16);
    let reader = Arc::new(crate::bpf::ReaderControl::default());
    let modules = Arc::new(Modules::new());
    let (manager, _task) = spawn_manager(
        Box::new(sampler),
        rx,
        reader.clone(),
        modules.clone(),
        store,
        config,
        Box::new(|| Ok(MAX_HZ)),
    )
    .unwrap();
    Harness {
        manager,
        modules,
        batches,
        kernel,
        reader,
    }
}

fn ticking() -> ManagerConfig {
    ManagerConfig {
        tick: Duration::from_millis(20),
        ..ManagerConfig::default()
    }
}

fn harness() -> Harness {
    harness_with(ticking())
}

/// A harness whose manager attributes generated code with `store`, where the test registers it.
fn harness_with_store(store: Arc<CodeStore>) -> Harness {
    harness_with_config_and_store(ticking(), store)
}

const ROOT: Caller = Caller { uid: 0, pid: None };
const NOBODY_UID: u32 = 65534;

fn start_request(pids: &[u32], hz: u32) -> SessionRequest {
    SessionRequest {
        pids: pids.to_vec(),
        system_wide: false,
        frequency_hz: hz,
        duration: None,
        keep_samples: 0,
        ..Default::default()
    }
}

/// An instruction pointer inside this test binary.
fn code_address() -> u64 {
    code_address as fn() -> u64 as usize as u64
}

fn sample(tgid: u32, hz: u32, timestamp_ns: u64) -> Event {
    Event {
        kind: EVENT_SAMPLE,
        cpu: 0,
        tgid,
        tid: tgid,
        timestamp_ns,
        ip: code_address(),
        period_ns: period_of(hz),
        flags: FLAG_TARGET,
        ..Event::default()
    }
}

impl Harness {
    /// Sends a batch and waits until the manager has taken it in (commands and batches come on
    /// separate channels, so a command sent right after could otherwise overtake the batch).
    async fn send(&self, events: Vec<Event>, watermark_ns: u64) {
        let before = self.batches_seen().await;
        self.batches
            .send(Batch {
                events,
                watermark_ns,
                ..Batch::default()
            })
            .await
            .unwrap();
        while self.batches_seen().await == before {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Sends a batch built by hand (samples with stacks), like [`Harness::send`].
    async fn send_batch(&self, batch: Batch) {
        let before = self.batches_seen().await;
        self.batches.send(batch).await.unwrap();
        while self.batches_seen().await == before {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn batches_seen(&self) -> u64 {
        self.manager.counters().await.unwrap().values["batches"]
    }

    /// Sends an empty batch whose watermark passes every stop so far.
    async fn pass_watermark(&self) {
        self.send(Vec::new(), sys::monotonic_ns() + 1_000_000_000)
            .await;
    }

    async fn stop(&self, id: u64) -> Result<SessionInfo, SessionError> {
        let manager = self.manager.clone();
        let stop = tokio::spawn(async move { manager.stop(ROOT, id, "").await });
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.pass_watermark().await;
        stop.await.unwrap()
    }

    /// A session at 100 Hz on this process, whose publication stream then opens; answers the
    /// session's id and the time the stream opened.
    async fn session_on_a_publishing_vm(&self) -> (u64, u64) {
        let s = self
            .manager
            .start(ROOT, start_request(&[me()], 100))
            .await
            .unwrap();
        let t0 = sys::monotonic_ns();
        self.manager
            .publish(me(), Publication::Opened)
            .await
            .unwrap();
        (s.id, t0)
    }

    /// Ends this process's publication stream after a batch watermarked `watermark_ns`,
    /// stops session `id`, and answers its profile with its samples per set of interval
    /// kinds they were taken during (sorted).
    async fn close_stream_and_stop(
        &self,
        id: u64,
        watermark_ns: u64,
    ) -> (Snapshot, Vec<(Vec<IntervalKind>, u64)>) {
        self.manager.counters().await.unwrap();
        self.send(Vec::new(), watermark_ns).await;
        self.manager
            .publish(me(), Publication::Closed)
            .await
            .unwrap();
        self.stop(id).await.unwrap();
        let done = self.manager.snapshot(ROOT, id).await.unwrap();
        let mut during: Vec<(Vec<IntervalKind>, u64)> = done
            .stacks
            .counts
            .iter()
            .map(|&(_, stack, n)| (done.stacks.during_of(stack).to_vec(), n))
            .collect();
        during.sort();
        (done, during)
    }

    fn kernel(&self) -> FakeKernel {
        self.kernel.lock().unwrap().clone()
    }

    /// Two sessions on this process at 100 Hz: one with frame-pointer stacks that keeps
    /// `keep_samples` samples one by one, one of leaves alone.
    async fn stack_and_leaf_sessions(&self, keep_samples: u32) -> (SessionInfo, SessionInfo) {
        let start = async |call_graph, keep_samples| {
            let request = SessionRequest {
                keep_samples,
                call_graph,
                ..start_request(&[me()], 100)
            };
            self.manager.start(ROOT, request).await.unwrap()
        };
        (
            start(CallGraphMode::FramePointers, keep_samples).await,
            start(CallGraphMode::None, 0).await,
        )
    }
}

fn me() -> u32 {
    std::process::id()
}

fn sleeper(seconds: &str) -> Child {
    Command::new("sleep").arg(seconds).spawn().unwrap()
}

#[tokio::test]
async fn start_and_stop_set_and_clear_the_kernel_filters() {
    let h = harness();
    let session = h
        .manager
        .start(ROOT, start_request(&[me()], 1000))
        .await
        .unwrap();
    assert_eq!(session.state, State::Running);
    assert_eq!(session.frequency_hz, 1000);
    let k = h.kernel();
    assert_eq!(k.periods, [1_000_000].into());
    assert_eq!(k.targets, [(1_000_000, me())].into());
    assert_eq!(k.tracked, [me()].into());

    let stopped = h.stop(session.id).await.unwrap();
    assert_eq!(stopped.state, State::Stopped);
    assert_eq!(stopped.stop_reason.as_deref(), Some("stopped by client"));
    assert_eq!(
        h.kernel(),
        FakeKernel {
            starts: k.starts.clone(),
            ..FakeKernel::default()
        }
    );
}

/// Samples of two threads of one process are counted under each thread, and each session
/// notes each thread's name from its first sample, read once for all sessions.
#[tokio::test]
async fn samples_are_counted_by_thread_and_threads_are_named_once() {
    let h = harness();
    let worker = crate::sys::tests::NamedThread::start("vmscope-worker");
    let tid = worker.tid;
    let (a, b) = h.stack_and_leaf_sessions(0).await;
    let now = sys::monotonic_ns();
    let on_worker = |t| Event {
        tid,
        ..sample(me(), 100, t)
    };
    let read_before = h.manager.counters().await.unwrap().values["thread_names_read"];
    h.send(
        vec![on_worker(now), sample(me(), 100, now), on_worker(now + 1)],
        now,
    )
    .await;
    drop(worker);
    for s in [&a, &b] {
        let snapshot = h.manager.snapshot(ROOT, s.id).await.unwrap();
        let mut counts: Vec<(Task, u64)> = snapshot
            .stacks
            .counts
            .iter()
            .map(|&(task, _, n)| (task, n))
            .collect();
        counts.sort();
        let mut expected = vec![(Task::from(me()), 1), (Task::new(me(), tid), 2)];
        expected.sort();
        assert_eq!(counts, expected);
        assert_eq!(
            snapshot.thread_names[&Task::new(me(), tid)],
            "vmscope-worker"
        );
        assert_eq!(
            snapshot.thread_names[&Task::from(me())],
            snapshot.commands[&me()],
            "the main thread is named as its process"
        );
    }
    let read = h.manager.counters().await.unwrap().values["thread_names_read"] - read_before;
    assert_eq!(read, 2, "each thread read once, for both sessions");
}

#[tokio::test]
async fn samples_count_by_period_pid_and_time_window() {
    let h = harness();
    let child = sleeper("5");
    let other = child.id();
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 1000))
        .await
        .unwrap();
    let before = sys::monotonic_ns() - 1_000_000_000;
    let now = sys::monotonic_ns();
    let mut kernel_sample = sample(me(), 1000, now);
    kernel_sample.flags |= FLAG_KERNEL_MODE;
    kernel_sample.ip = 0xffff_ffff_8100_0000;
    h.send(
        vec![
            sample(me(), 1000, now),     // counted
            sample(me(), 1000, now + 1), // counted
            kernel_sample,               // counted, as kernel code
            sample(me(), 999, now),      // another period: not this session's
            sample(other, 1000, now),    // another process
            sample(me(), 1000, before),  // before the session started
        ],
        now,
    )
    .await;
    let snapshot = h.manager.snapshot(ROOT, s.id).await.unwrap();
    assert_eq!(snapshot.total_samples, 3);
    assert!(!snapshot.complete);
    let counts = snapshot.stacks.leaf_counts();
    let kernel = counts
        .iter()
        .find(|(_, l, _)| matches!(l, Location::Kernel { .. }))
        .map(|(_, _, n)| *n);
    assert_eq!(kernel, Some(1));
    let own = counts
        .iter()
        .find(|(pid, l, _)| {
            *pid == me()
                && matches!(
                    l,
                    Location::File {
                        main_executable: true,
                        ..
                    }
                )
        })
        .map(|(_, _, n)| *n);
    assert_eq!(own, Some(2), "{counts:?}");

    // Stop: samples stamped before the stop still count when they arrive late; later ones not.
    let manager = h.manager.clone();
    let stop = tokio::spawn(async move { manager.stop(ROOT, s.id, "").await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!stop.is_finished(), "stop must wait for samples in flight");
    let stop_time = sys::monotonic_ns();
    h.send(
        vec![
            sample(me(), 1000, now + 2),
            sample(me(), 1000, stop_time + 10_000_000),
        ],
        stop_time - 1,
    )
    .await;
    h.pass_watermark().await;
    let stopped = stop.await.unwrap().unwrap();
    assert_eq!(stopped.samples, 4);
    let snapshot = h.manager.snapshot(ROOT, s.id).await.unwrap();
    assert!(snapshot.complete);
    assert_eq!(snapshot.total_samples, 4);
    drop(child);
}

#[tokio::test]
async fn overlapping_sessions_each_get_every_sample_and_share_filters() {
    let h = harness();
    let a = h
        .manager
        .start(ROOT, start_request(&[me()], 1400))
        .await
        .unwrap();
    let b = h
        .manager
        .start(ROOT, start_request(&[me()], 1400))
        .await
        .unwrap();
    let c = h
        .manager
        .start(ROOT, start_request(&[me()], 700))
        .await
        .unwrap();
    assert_eq!(
        h.kernel().starts[&period_of(1400)],
        1,
        "one set of perf events per period"
    );
    let now = sys::monotonic_ns();
    let events = (0..100).map(|i| sample(me(), 1400, now + i)).collect();
    h.send(events, now).await;
    for id in [a.id, b.id] {
        assert_eq!(
            h.manager.snapshot(ROOT, id).await.unwrap().total_samples,
            100
        );
    }
    assert_eq!(
        h.manager.snapshot(ROOT, c.id).await.unwrap().total_samples,
        0
    );

    h.stop(a.id).await.unwrap();
    let k = h.kernel();
    assert!(
        k.targets.contains(&(period_of(1400), me())),
        "b still needs the filter"
    );
    assert!(k.periods.contains(&period_of(1400)));
    h.stop(b.id).await.unwrap();
    let k = h.kernel();
    assert!(!k.periods.contains(&period_of(1400)));
    assert!(k.tracked.contains(&me()), "c still tracks the process");
    h.stop(c.id).await.unwrap();
    assert!(h.kernel().tracked.is_empty());
}

#[tokio::test]
async fn clients_may_say_why_they_stop() {
    let h = harness();
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    let manager = h.manager.clone();
    let reason = format!("the recorded command exited\n{}", "x".repeat(500));
    let stop = tokio::spawn(async move { manager.stop(ROOT, s.id, &reason).await });
    tokio::time::sleep(Duration::from_millis(5)).await;
    h.pass_watermark().await;
    let stopped = stop.await.unwrap().unwrap();
    assert!(
        stopped
            .stop_reason
            .as_deref()
            .unwrap_or_default()
            .starts_with("the recorded command exitedxxx")
    );
    assert_eq!(
        stopped.stop_reason.unwrap_or_default().chars().count(),
        MAX_STOP_REASON_CHARS
    );
}

#[tokio::test]
async fn errors_are_typed_and_the_manager_keeps_serving() {
    let h = harness();
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    h.stop(s.id).await.unwrap();
    assert!(matches!(
        h.manager.stop(ROOT, s.id, "").await,
        Err(SessionError::AlreadyStopped(id)) if id == s.id
    ));
    assert!(matches!(
        h.manager.snapshot(ROOT, 999).await,
        Err(SessionError::NoSuchSession(999))
    ));
    assert!(matches!(
        h.manager
            .start(ROOT, start_request(&[me()], MAX_HZ + 1))
            .await,
        Err(SessionError::InvalidArgument(_))
    ));
    assert!(matches!(
        h.manager
            .start(ROOT, start_request(&[4_194_305], 100))
            .await,
        Err(SessionError::NoSuchProcess(4_194_305))
    ));
    // Another user sees neither the session nor, as non-root, our (root-owned) process.
    let stranger = Caller {
        uid: sys::effective_uid() + 4242,
        pid: None,
    };
    assert!(matches!(
        h.manager.snapshot(stranger, s.id).await,
        Err(SessionError::NoSuchSession(_))
    ));
    assert!(h.manager.list(stranger).await.unwrap().is_empty());
    assert!(matches!(
        h.manager.start(stranger, start_request(&[me()], 100)).await,
        Err(SessionError::PermissionDenied(_))
    ));
    assert_eq!(h.manager.list(ROOT).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_failed_start_leaves_nothing_behind() {
    let h = harness();
    h.kernel.lock().unwrap().fail_next_start = true;
    let err = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap_err();
    assert!(matches!(err, SessionError::Kernel(_)), "{err}");
    let k = h.kernel();
    assert!(
        k.targets.is_empty() && k.tracked.is_empty() && k.periods.is_empty(),
        "{k:?}"
    );
    assert!(h.manager.list(ROOT).await.unwrap().is_empty());
}

#[tokio::test]
async fn duration_and_exit_end_sessions_by_themselves() {
    let h = harness();
    let mut timed = start_request(&[me()], 100);
    timed.duration = Some(Duration::from_millis(100));
    let timed = h.manager.start(ROOT, timed).await.unwrap();
    let mut child = sleeper("0.2");
    let exiting = h
        .manager
        .start(ROOT, start_request(&[child.id()], 100))
        .await
        .unwrap();
    child.wait().unwrap();

    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let (mut timed_done, mut exit_done) = (None, None);
    while std::time::Instant::now() < deadline && (timed_done.is_none() || exit_done.is_none()) {
        h.pass_watermark().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let get = |id| h.manager.get(ROOT, id);
        let t = get(timed.id).await.unwrap();
        if t.state == State::Stopped {
            timed_done = Some(t);
        }
        let e = get(exiting.id).await.unwrap();
        if e.state == State::Stopped {
            exit_done = Some(e);
        }
    }
    let timed = timed_done.expect("the timed session stopped");
    assert_eq!(timed.stop_reason.as_deref(), Some("duration elapsed"));
    assert_eq!(
        timed.elapsed,
        Duration::from_millis(100),
        "a timed session covers exactly its duration"
    );
    let exited = exit_done.expect("the session of the exited process stopped");
    assert_eq!(exited.stop_reason.as_deref(), Some("all targets exited"));
    assert!(exited.targets[0].exited);
}

#[tokio::test]
async fn lost_samples_survive_the_stop() {
    let h = harness();
    let key = TargetKey {
        period_ns: period_of(100),
        tgid: me(),
        _pad: 0,
    };
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    h.kernel.lock().unwrap().lost.keyed.insert(key, vec![3, 4]);
    h.stop(s.id).await.unwrap();
    // The last session at this period is gone, so the kernel's counters were cleared...
    assert!(h.kernel().lost.keyed.is_empty());
    // ...but the session kept what it lost.
    let snapshot = h.manager.snapshot(ROOT, s.id).await.unwrap();
    assert!(snapshot.complete);
    assert_eq!(snapshot.lost_per_cpu, vec![3, 4]);
}

#[tokio::test]
async fn a_second_stop_waits_for_the_first() {
    let h = harness();
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    let (a, b) = (h.manager.clone(), h.manager.clone());
    let first = tokio::spawn(async move { a.stop(ROOT, s.id, "first").await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let stopping = h.manager.get(ROOT, s.id).await.unwrap();
    assert_eq!(stopping.state, State::Stopping);
    let second = tokio::spawn(async move { b.stop(ROOT, s.id, "second").await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!second.is_finished(), "the second stop must wait, not fail");
    h.pass_watermark().await;
    let (first, second) = (
        first.await.unwrap().unwrap(),
        second.await.unwrap().unwrap(),
    );
    assert_eq!(first.stop_reason.as_deref(), Some("first"));
    assert_eq!(second.stop_reason.as_deref(), Some("first"));
    assert_eq!(second.state, State::Stopped);
}

/// An address in the executable code of `pid`'s main binary, once the process is loaded: its
/// parent resumes from `vfork` before the kernel maps the program, and the C library is mapped
/// later still, by the loader.
fn main_binary_code(pid: u32) -> u64 {
    use vmscope_parse::maps::{MapPath, parse_maps};
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        let maps = parse_maps(&std::fs::read(format!("/proc/{pid}/maps")).unwrap());
        let code = |wanted: &dyn Fn(&Path) -> bool| {
            maps.entries.iter().find(|e| {
                e.perms.exec && matches!(&e.path, MapPath::File { path, .. } if wanted(path))
            })
        };
        let libc = code(&|p| p.to_string_lossy().contains("libc.so"));
        if let (Some(main), Some(_)) = (code(&|p| p == exe), libc) {
            return main.start + 0x10;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{pid} never mapped {} and the C library",
            exe.display()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits up to 5 s for `done`, polling.
async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "still not {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A binary stays open while a live process maps it, while a sample the process took before
/// it died may still be read, and while a kept session has samples in it; it is closed once
/// none of these holds.
#[tokio::test]
async fn binaries_stay_open_while_a_process_or_a_kept_session_needs_them() {
    let h = harness_with(ManagerConfig {
        // Every tick sweeps.
        sweep_modules: Duration::from_millis(1),
        max_stopped_per_user: 1,
        ..ticking()
    });
    let mut child = sleeper("30");
    let pid = child.id();
    let ip = main_binary_code(pid);
    // System-wide: no target whose exit would stop the session.
    let first = h
        .manager
        .start(
            ROOT,
            SessionRequest {
                system_wide: true,
                frequency_hz: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // A sample in the kernel makes the process known (its executable, the C library, the
    // loader are registered) without putting any of its binaries in the session.
    let taken = sys::monotonic_ns();
    let mut in_kernel = sample(pid, 1000, taken);
    in_kernel.flags |= FLAG_KERNEL_MODE;
    in_kernel.ip = 0xffff_ffff_8100_0000;
    h.send(vec![in_kernel], taken).await;
    let registered = h.modules.len();
    assert!(registered >= 3, "{registered} binaries");
    child.kill().unwrap();
    child.wait().unwrap();
    // A sweep finds it dead, but samples up to its death have not all been read.
    let exited = async || h.manager.counters().await.unwrap().values["processes_exited"] > 0;
    wait_for("found dead", exited).await;
    assert_eq!(
        h.modules.len(),
        registered,
        "closed before its samples were read"
    );
    // A sample it took before dying, read only now: placed in its still open executable.
    let mut late = sample(pid, 1000, taken + 1);
    late.ip = ip;
    h.send(vec![late], taken + 1).await;
    let snapshot = h.manager.snapshot(ROOT, first.id).await.unwrap();
    let exe = snapshot
        .stacks
        .locations
        .iter()
        .find_map(|l| match *l {
            Location::File {
                module,
                main_executable: true,
                ..
            } => Some(module),
            _ => None,
        })
        .expect("the late sample, in the executable");
    assert!(h.modules.get(exe).is_some());
    // Every sample read: what only the dead process mapped is closed; its executable, where
    // the session has a sample, stays.
    h.pass_watermark().await;
    wait_for("closed", async || h.modules.len() < registered).await;
    assert!(
        h.modules.get(exe).is_some(),
        "closed under a session's sample"
    );
    assert_eq!(h.modules.len(), 1);
    // Stopped, the session is kept: so is the binary. Its final profile is taken, so that it
    // may be evicted.
    h.stop(first.id).await.unwrap();
    h.manager.snapshot(ROOT, first.id).await.unwrap();

    // A second session's stop evicts the first: nothing needs the executable any more.
    let second = h
        .manager
        .start(ROOT, start_request(&[me()], 1000))
        .await
        .unwrap();
    assert!(
        h.modules.get(exe).is_some(),
        "closed while its session is kept"
    );
    h.stop(second.id).await.unwrap();
    assert!(h.manager.get(ROOT, first.id).await.is_err(), "evicted");
    wait_for("closed", async || h.modules.is_closed(exe)).await;
    let counters = h.manager.counters().await.unwrap();
    assert!(counters.values["modules_closed"] >= registered as u64);
    assert!(counters.gauges["modules_open_now"] <= h.modules.len() as u64);
}

#[tokio::test]
async fn a_stop_asks_again_for_its_flush_after_an_earlier_one_was_served() {
    let h = harness_with(ManagerConfig {
        tick: Duration::from_secs(3600),
        ..ManagerConfig::default()
    });
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    // An earlier flush is pending (the module sweep's, another stop's): the stop's request
    // gives way to it, as the reader keeps only the earliest.
    let earlier = sys::monotonic_ns();
    h.reader.flush_at(earlier);
    let manager = h.manager.clone();
    let stop = tokio::spawn(async move { manager.stop(ROOT, s.id, "").await });
    while h.manager.get(ROOT, s.id).await.unwrap().state != State::Stopping {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(h.reader.pending_flush(), earlier);
    // The reader serves it with a quiet ring: a batch short of the stop.
    assert!(h.reader.take_due_flush(earlier));
    h.send(Vec::new(), earlier).await;
    let stop_ns = sys::monotonic_ns();
    let pending = h.reader.pending_flush();
    assert!(
        pending > earlier && pending <= stop_ns + 2_000_000,
        "the stop's flush must be asked for again, or the stop waits for its timeout: {pending}"
    );
    h.pass_watermark().await;
    assert_eq!(stop.await.unwrap().unwrap().state, State::Stopped);
}

#[tokio::test]
async fn an_exited_target_stops_being_sampled_at_once() {
    let h = harness();
    let mut short = sleeper("0.1");
    let long = sleeper("5");
    let s = h
        .manager
        .start(ROOT, start_request(&[short.id(), long.id()], 100))
        .await
        .unwrap();
    short.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while h.kernel().targets.contains(&(period_of(100), short.id())) {
        assert!(
            std::time::Instant::now() < deadline,
            "the exited target keeps its filter"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(h.kernel().targets.contains(&(period_of(100), long.id())));
    // A sample under the dead pid, stamped after the exit was noticed, is nobody's.
    let now = sys::monotonic_ns();
    h.send(
        vec![sample(short.id(), 100, now), sample(long.id(), 100, now)],
        now,
    )
    .await;
    let session = h.manager.get(ROOT, s.id).await.unwrap();
    assert_eq!(session.state, State::Running);
    assert_eq!(session.samples, 1);
    assert_eq!(session.targets[0].note.as_deref(), Some("exited"));
    h.stop(s.id).await.unwrap();
    assert!(h.kernel().targets.is_empty(), "{:?}", h.kernel());
    drop(long);
}

/// A process of `NOBODY_UID` that execs a root-owned setuid copy of `sleep` once told to (a
/// line on its standard input), with the directory that holds the copy.
fn setuid_execer() -> (Child, tempfile::TempDir) {
    use std::{os::unix::fs::PermissionsExt, os::unix::process::CommandExt};
    // A root-owned setuid copy of sleep, in a directory nobody can reach.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let suid_sleep = dir.path().join("suid-sleep");
    std::fs::copy("/bin/sleep", &suid_sleep).unwrap();
    std::fs::set_permissions(&suid_sleep, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let child = Command::new("sh")
        .args(["-c", &format!("read go; exec {} 5", suid_sleep.display())])
        .uid(NOBODY_UID)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    (child, dir)
}

/// Tells a [`setuid_execer`] to exec, and waits until it runs as root.
async fn exec_setuid(child: &mut Child) {
    use std::io::Write;
    let pid = child.id();
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while request::owner_may_profile(NOBODY_UID, pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the exec did not happen"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const NOBODY: Caller = Caller {
    uid: NOBODY_UID,
    pid: None,
};

#[tokio::test]
async fn a_target_that_execs_a_setuid_program_is_dropped() {
    let h = harness();
    let (mut child, _dir) = setuid_execer();
    let pid = child.id();
    let s = h
        .manager
        .start(NOBODY, start_request(&[pid], 100))
        .await
        .unwrap();
    assert!(h.kernel().targets.contains(&(period_of(100), pid)));
    // The kernel samples the user's target only while it runs with the credentials checked.
    let checked = request::creds_of(&sys::read_status(pid).unwrap()).unwrap();
    assert_eq!(checked.ids[4], NOBODY_UID, "euid");
    assert_eq!(h.kernel().guards.get(&pid), Some(&Guard::Creds(checked)));

    exec_setuid(&mut child).await;
    let now = sys::monotonic_ns();
    let exec = Event {
        kind: EVENT_EXEC,
        tgid: pid,
        tid: pid,
        timestamp_ns: now,
        ..Event::default()
    };
    h.send(vec![exec, sample(pid, 100, now + 1)], now + 2).await;
    assert!(
        !h.kernel().targets.contains(&(period_of(100), pid)),
        "filter kept"
    );
    let session = h.manager.get(NOBODY, s.id).await.unwrap();
    assert_eq!(session.samples, 0, "a sample after the exec was counted");
    assert!(
        session.targets[0]
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("another user"),
        "{session:?}"
    );
    assert_eq!(
        h.manager.counters().await.unwrap().values["targets_revoked"],
        1
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// The exec event of a setuid program may be lost (a full ring); the kernel then keeps the
/// program's samples from the session by itself and reports the process, which is checked
/// again: the target is revoked all the same.
#[tokio::test]
async fn a_credentials_change_seen_by_the_kernel_alone_revokes_the_target() {
    let h = harness();
    let (mut child, _dir) = setuid_execer();
    let pid = child.id();
    let s = h
        .manager
        .start(NOBODY, start_request(&[pid], 100))
        .await
        .unwrap();
    exec_setuid(&mut child).await;
    let now = sys::monotonic_ns();
    h.kernel.lock().unwrap().creds_changed.push((pid, now));
    // No exec event: only samples before the change, which the kernel let through.
    h.send(vec![sample(pid, 100, now - 1)], now + 2).await;
    assert!(
        !h.kernel().targets.contains(&(period_of(100), pid)),
        "filter kept"
    );
    assert!(!h.kernel().tracked.contains(&pid), "{:?}", h.kernel());
    let session = h.manager.get(NOBODY, s.id).await.unwrap();
    assert_eq!(session.samples, 1, "the sample from before the change");
    assert!(
        session.targets[0]
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("runs as uid 0"),
        "{session:?}"
    );
    let counters = h.manager.counters().await.unwrap().values;
    assert_eq!(
        (
            counters["targets_revoked"],
            counters["target_creds_changed"]
        ),
        (1, 1)
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// Root's sessions need no guard, a user's joining the same process does, and root's session
/// keeps the process when the user's is revoked, with the guard open again.
#[tokio::test]
async fn guards_follow_the_owners_of_a_process() {
    let h = harness();
    let (mut child, _dir) = setuid_execer();
    let pid = child.id();
    let root = h
        .manager
        .start(ROOT, start_request(&[pid], 100))
        .await
        .unwrap();
    assert_eq!(h.kernel().guards.get(&pid), Some(&Guard::Open));
    let user = h
        .manager
        .start(NOBODY, start_request(&[pid], 100))
        .await
        .unwrap();
    assert!(matches!(h.kernel().guards.get(&pid), Some(Guard::Creds(_))));
    exec_setuid(&mut child).await;
    let now = sys::monotonic_ns();
    h.kernel.lock().unwrap().creds_changed.push((pid, now));
    // A sample the kernel kept from target sessions (no FLAG_TARGET): counted by none.
    let refused = Event {
        flags: 0,
        ..sample(pid, 100, now + 1)
    };
    h.send(vec![refused], now + 2).await;
    assert_eq!(h.kernel().guards.get(&pid), Some(&Guard::Open));
    assert!(h.kernel().targets.contains(&(period_of(100), pid)));
    h.send(vec![sample(pid, 100, now + 3)], now + 4).await;
    let root = h.manager.get(ROOT, root.id).await.unwrap();
    let user = h.manager.get(NOBODY, user.id).await.unwrap();
    assert_eq!((root.samples, user.samples), (1, 0));
    assert!(
        user.targets[0]
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("another user"),
        "{user:?}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// A sample the kernel took for system-wide sessions only (its process's guard refused it for
/// target sessions) is not counted by a session that targets the process.
#[tokio::test]
async fn target_sessions_count_only_what_the_kernel_kept_for_them() {
    let h = harness();
    let target = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    let everything = h
        .manager
        .start(
            ROOT,
            SessionRequest {
                pids: vec![],
                system_wide: true,
                ..start_request(&[], 100)
            },
        )
        .await
        .unwrap();
    let now = sys::monotonic_ns();
    let system_wide_only = Event {
        flags: 0,
        ..sample(me(), 100, now)
    };
    h.send(vec![system_wide_only, sample(me(), 100, now + 1)], now + 2)
        .await;
    let target = h.manager.get(ROOT, target.id).await.unwrap();
    let everything = h.manager.get(ROOT, everything.id).await.unwrap();
    assert_eq!((target.samples, everything.samples), (1, 2));
}

#[tokio::test]
async fn lost_samples_are_reported_per_cpu_since_start() {
    let h = harness();
    let key = TargetKey {
        period_ns: period_of(100),
        tgid: me(),
        _pad: 0,
    };
    h.kernel.lock().unwrap().lost.keyed.insert(key, vec![5, 1]);
    h.kernel.lock().unwrap().lost.unkeyed = vec![0, 0];
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    {
        let mut k = h.kernel.lock().unwrap();
        k.lost.keyed.insert(key, vec![7, 4]);
        // Another period's losses are not this session's.
        k.lost.keyed.insert(
            TargetKey {
                period_ns: period_of(200),
                ..key
            },
            vec![100, 100],
        );
    }
    let snapshot = h.manager.snapshot(ROOT, s.id).await.unwrap();
    assert_eq!(snapshot.lost_per_cpu, vec![2, 3]);
}

#[tokio::test]
async fn stopped_sessions_are_kept_until_their_profile_is_taken() {
    let h = harness_with(ManagerConfig {
        max_stopped_per_user: 2,
        tick: Duration::from_millis(20),
        ..ManagerConfig::default()
    });
    let mut ids = Vec::new();
    for _ in 0..3 {
        let s = h
            .manager
            .start(ROOT, start_request(&[me()], 100))
            .await
            .unwrap();
        h.stop(s.id).await.unwrap();
        ids.push(s.id);
    }
    // One too many, but nobody took their profiles yet: all kept.
    for &id in &ids {
        assert!(h.manager.get(ROOT, id).await.is_ok(), "session {id}");
    }
    // Taken, the oldest go at the next stop.
    for &id in &ids {
        h.manager.snapshot(ROOT, id).await.unwrap();
    }
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    h.stop(s.id).await.unwrap();
    for (id, kept) in [
        (ids[0], false),
        (ids[1], false),
        (ids[2], true),
        (s.id, true),
    ] {
        assert_eq!(h.manager.get(ROOT, id).await.is_ok(), kept, "session {id}");
    }

    // A user other than root with as many untaken profiles as it may keep starts no more.
    use std::os::unix::process::CommandExt as _;
    let mut theirs = Command::new("sleep")
        .arg("30")
        .uid(NOBODY_UID)
        .gid(NOBODY_UID)
        .spawn()
        .unwrap();
    let nobody = Caller {
        uid: NOBODY_UID,
        pid: None,
    };
    for _ in 0..2 {
        let s = h
            .manager
            .start(nobody, start_request(&[theirs.id()], 100))
            .await
            .unwrap();
        h.stop(s.id).await.unwrap();
    }
    let refused = h
        .manager
        .start(nobody, start_request(&[theirs.id()], 100))
        .await;
    let _ = theirs.kill();
    let _ = theirs.wait();
    match refused {
        Err(SessionError::ResourceExhausted(why)) => {
            assert!(why.contains("profiles nobody took"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn exec_events_reread_the_process() {
    let h = harness();
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    let now = sys::monotonic_ns();
    let exec = Event {
        kind: EVENT_EXEC,
        tgid: me(),
        tid: me(),
        timestamp_ns: now,
        ..Event::default()
    };
    h.send(vec![exec, sample(me(), 100, now + 1)], now + 2)
        .await;
    let counters = h.manager.counters().await.unwrap();
    assert_eq!(counters.values["exec_events"], 1);
    assert!(counters.values["maps_reads"] >= 2, "{counters:?}");
    assert_eq!(
        h.manager.snapshot(ROOT, s.id).await.unwrap().total_samples,
        1
    );
}

#[tokio::test]
async fn a_stop_the_reader_never_catches_up_with_is_marked_incomplete() {
    let h = harness_with(ManagerConfig {
        tick: Duration::from_millis(20),
        stop_timeout: Duration::from_millis(200),
        ..ManagerConfig::default()
    });
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    // No batch ever passes the stop time: the reader is stuck.
    let stopped = tokio::time::timeout(Duration::from_secs(5), h.manager.stop(ROOT, s.id, ""))
        .await
        .expect("the stop ends at its deadline")
        .unwrap();
    assert_eq!(stopped.state, State::Stopped);
    let snapshot = h.manager.snapshot(ROOT, s.id).await.unwrap();
    assert!(!snapshot.complete, "{snapshot:?}");
    let reason = snapshot.incomplete_reason.unwrap_or_default();
    assert!(
        reason.contains("ring buffer was not read past the stop"),
        "{reason}"
    );
    assert_eq!(
        h.manager.counters().await.unwrap().values["stop_timeouts"],
        1
    );
    // A stop that drains in time is whole.
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    h.stop(s.id).await.unwrap();
    let snapshot = h.manager.snapshot(ROOT, s.id).await.unwrap();
    assert!(snapshot.complete && snapshot.incomplete_reason.is_none());
}

#[tokio::test]
async fn an_exec_names_the_target_even_when_it_is_gone_already() {
    let h = harness();
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = child.id();
    let s = h
        .manager
        .start(ROOT, start_request(&[pid], 100))
        .await
        .unwrap();
    assert_eq!(s.targets[0].command, "sleep");
    let exec_ns = sys::monotonic_ns();
    // The program exits (and is reaped) before its exec is read: /proc has nothing left.
    child.kill().unwrap();
    child.wait().unwrap();
    let (ip, period_ns) = Event::comm_words(b"short-prog\0\0\0\0\0\0");
    let exec = Event {
        kind: EVENT_EXEC,
        tgid: pid,
        tid: pid,
        timestamp_ns: exec_ns,
        ip,
        period_ns,
        ..Event::default()
    };
    h.send(vec![exec], exec_ns + 1).await;
    let session = h.manager.get(ROOT, s.id).await.unwrap();
    assert_eq!(session.targets[0].command, "short-prog", "{session:?}");
    assert_eq!(
        session.targets[0].executable, "",
        "the old program's path must not stay"
    );
}

/// An anonymous executable page of this process: generated code, as far as the daemon knows.
struct JitPage(*mut libc::c_void);

impl JitPage {
    fn new() -> JitPage {
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(page, libc::MAP_FAILED);
        JitPage(page)
    }

    fn at(&self, offset: u64) -> u64 {
        self.0 as u64 + offset
    }
}

impl Drop for JitPage {
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped in new().
        unsafe { libc::munmap(self.0, 4096) };
    }
}

fn code(store: &CodeStore, name: &str, pcs: &[(u64, u32)]) -> CodeId {
    store
        .intern(crate::codemap::code::Code::method_with_pcs(name, pcs), 0)
        .expect("within the budget")
}

/// Publishes, for this process: `first` loaded at `page`+0x100 at t0+10 and moved to +0x800 at
/// t0+20, then `decoy` loaded at +0x100 at t0+30; the publication known up to `until_ns`.
async fn publish_load_move_load(
    h: &Harness,
    page: &JitPage,
    t0: u64,
    first: CodeId,
    decoy: CodeId,
    until_ns: u64,
) {
    h.manager
        .publish(
            me(),
            Publication::Changes {
                refused: Vec::new(),
                stats: Vec::new(),
                changes: vec![
                    (
                        t0 + 10,
                        Change::Load {
                            start: page.at(0x100),
                            size: Some(0x80),
                            code: first,
                        },
                    ),
                    (
                        t0 + 20,
                        Change::Move {
                            from: page.at(0x100),
                            to: page.at(0x800),
                        },
                    ),
                    (
                        t0 + 30,
                        Change::Load {
                            start: page.at(0x100),
                            size: Some(0x80),
                            code: decoy,
                        },
                    ),
                ],
                until_ns,
            },
        )
        .await
        .unwrap();
    // Publications are only queued: a round trip through the same queue makes sure the
    // manager applied them before the test's next batch, which comes on another channel
    // that the manager may serve first.
    h.manager.counters().await.unwrap();
}

#[tokio::test]
async fn samples_in_generated_code_are_attributed_at_their_time() {
    let store = Arc::new(CodeStore::new());
    let h = harness_with_store(store.clone());
    let page = JitPage::new();
    let hot = code(&store, "Integer>>benchFib", &[(0x10, 3)]);
    let decoy = code(&store, "Decoy>>neverRuns", &[]);
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    let t0 = sys::monotonic_ns();
    h.manager.publish(me(), Publication::Opened).await.unwrap();
    // benchFib at +0x100 from t0+10, moved to +0x800 at t0+20; a decoy at +0x100 from t0+30.
    publish_load_move_load(&h, &page, t0, hot, decoy, t0 + 30).await;
    let at = |ts: u64, offset: u64| Event {
        ip: page.at(offset),
        ..sample(me(), 100, ts)
    };
    h.send(
        vec![
            at(t0 + 15, 0x104), // benchFib, range 1->4
            at(t0 + 25, 0x814), // benchFib moved, range 4->end
            at(t0 + 35, 0x104), // the decoy
            at(t0 + 5, 0x104),  // before any code was there
        ],
        // The ring is drained well past the samples (beyond the in-flight slack).
        t0 + 40 + 10_000_000,
    )
    .await;
    // The publication is known up to t0+30 only: the sample at t0+35 waits for a Sync.
    let waiting = h.manager.snapshot(ROOT, s.id).await.unwrap();
    assert_eq!(waiting.total_samples, 4);
    let jit = |snapshot: &Snapshot| -> Vec<(String, u64, u64)> {
        let mut v: Vec<(String, u64, u64)> = snapshot
            .stacks
            .leaf_counts()
            .into_iter()
            .filter_map(|(_, l, n)| match l {
                Location::Jit { code, offset, .. } => {
                    Some((store.get(code).unwrap().name.clone(), offset, n))
                }
                Location::Anonymous { .. } => Some(("[anonymous]".into(), 0, n)),
                _ => None,
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        jit(&waiting),
        [
            ("Integer>>benchFib".into(), 0x4, 1),
            ("Integer>>benchFib".into(), 0x14, 1),
            ("[anonymous]".into(), 0, 1),
        ]
    );
    // A stop waits for the last sample: here until the grace period passes without a Sync.
    let stopped = h.stop(s.id).await.unwrap();
    assert_eq!(stopped.samples, 4);
    let done = h.manager.snapshot(ROOT, s.id).await.unwrap();
    // The sample past the last Sync was attributed before its map was known up to its time,
    // provisionally: the publication may still catch up, so the profile is not final.
    assert_eq!((done.jit.provisional, done.jit.awaiting), (1, 1));
    assert!(!done.complete);
    assert_eq!(
        jit(&done),
        [
            ("Decoy>>neverRuns".into(), 0x4, 1),
            ("Integer>>benchFib".into(), 0x4, 1),
            ("Integer>>benchFib".into(), 0x14, 1),
            ("[anonymous]".into(), 0, 1),
        ]
    );
    let counters = h.manager.counters().await.unwrap();
    assert_eq!(counters.values["jit_samples_attributed"], 3);
    assert_eq!(counters.values["jit_samples_unexplained"], 1);
}

/// A system-wide stop waits for code maps only so long: a sample whose VM never says its map
/// is known up to its time (a silent publication, a buffered jitdump) is attributed after
/// `system_wide_code_map_wait`, counted as such, and the profile is whole.
#[tokio::test]
async fn a_system_wide_stop_waits_for_code_maps_only_so_long() {
    let h = harness_with(ManagerConfig {
        tick: Duration::from_millis(20),
        system_wide_code_map_wait: Duration::from_millis(100),
        stop_timeout: Duration::from_secs(30),
        ..ManagerConfig::default()
    });
    let page = JitPage::new();
    let s = h
        .manager
        .start(
            ROOT,
            SessionRequest {
                system_wide: true,
                frequency_hz: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // The VM opened its publication and said nothing since: its samples wait for it.
    h.manager.publish(me(), Publication::Opened).await.unwrap();
    let now = sys::monotonic_ns();
    let mut jit = sample(me(), 100, now);
    jit.ip = page.at(0x10);
    h.send(vec![jit], now + 1).await;
    assert_eq!(
        h.manager.snapshot(ROOT, s.id).await.unwrap().total_samples,
        1
    );
    let started = std::time::Instant::now();
    h.stop(s.id).await.unwrap();
    // Well before the publication's own 1 s grace would have let the sample through.
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "the stop waited {:?}, not ~100 ms",
        started.elapsed()
    );
    let done = h.manager.snapshot(ROOT, s.id).await.unwrap();
    assert_eq!(done.incomplete_reason, None);
    assert_eq!(done.jit.provisional, 1);
    let counts = done.stacks.leaf_counts();
    assert!(
        counts
            .iter()
            .any(|(pid, l, n)| *pid == me() && matches!(l, Location::Anonymous { .. }) && *n == 1),
        "{counts:?}"
    );
    h.manager.publish(me(), Publication::Closed).await.unwrap();
}

/// Every frame of a stack is placed at the sample's time: a return address into generated code
/// is looked up (minus one, inside the call) in the code map as it was when the sample was
/// taken, not as it is when the sample is attributed. A session without call graph on the same
/// target at the same time gets the leaf alone.
#[tokio::test]
async fn every_frame_of_a_stack_is_attributed_at_the_samples_time() {
    use vmscope_common::{FLAG_STACK, FLAG_USER_TRUNCATED};
    let store = Arc::new(CodeStore::new());
    let h = harness_with_store(store.clone());
    let page = JitPage::new();
    let caller = code(&store, "Caller>>run", &[(0x10, 3), (0x20, 7)]);
    let decoy = code(&store, "Decoy>>neverRuns", &[]);
    let (with_stacks, leaf_only) = h.stack_and_leaf_sessions(10).await;
    let t0 = sys::monotonic_ns();
    h.manager.publish(me(), Publication::Opened).await.unwrap();
    // Caller>>run at +0x100 from t0+10, moved to +0x800 at t0+20; a decoy at +0x100 from t0+30.
    publish_load_move_load(&h, &page, t0, caller, decoy, u64::MAX / 2).await;
    // Native leaf, called from generated code (return address right after a call at +0x20),
    // called from native code.
    let leaf = code_address();
    let native_caller = sample as fn(u32, u32, u64) -> Event as usize as u64 + 1;
    let mut batch = Batch {
        watermark_ns: t0 + 40 + 10_000_000,
        ..Batch::default()
    };
    let stacked = |ts| Event {
        flags: FLAG_TARGET | FLAG_STACK,
        ip: leaf,
        ..sample(me(), 100, ts)
    };
    batch.push(
        stacked(t0 + 15),
        &[],
        &[leaf, page.at(0x121), native_caller],
    );
    batch.push(
        stacked(t0 + 35),
        &[],
        &[leaf, page.at(0x121), native_caller],
    );
    // Cut at the depth limit.
    batch.push(
        Event {
            flags: FLAG_TARGET | FLAG_STACK | FLAG_USER_TRUNCATED,
            ..stacked(t0 + 36)
        },
        &[],
        &[leaf, page.at(0x121)],
    );
    h.send_batch(batch).await;
    h.stop(with_stacks.id).await.unwrap();
    h.stop(leaf_only.id).await.unwrap();

    let done = h.manager.snapshot(ROOT, with_stacks.id).await.unwrap();
    assert!(done.complete, "{:?}", done.incomplete_reason);
    assert_eq!(done.total_samples, 3);
    assert_eq!(done.truncated, 1);
    let mut stacks: Vec<(Vec<String>, bool, u64)> = done
        .stacks
        .counts
        .iter()
        .map(|&(_, stack, n)| {
            let names = done
                .stacks
                .ids_of(stack)
                .iter()
                .map(|id| match done.stacks.location(*id) {
                    Location::Jit { code, offset, .. } => {
                        format!("{}+{offset:#x}", store.get(code).unwrap().name)
                    }
                    Location::File { .. } => "native".to_owned(),
                    other => format!("{other:?}"),
                })
                .collect();
            (names, done.stacks.stacks[stack.0 as usize].truncated(), n)
        })
        .collect();
    stacks.sort();
    assert_eq!(
        stacks,
        [
            (
                vec!["native".into(), "Caller>>run+0x20".into(), "native".into()],
                false,
                1
            ),
            (
                vec!["native".into(), "Decoy>>neverRuns+0x20".into()],
                true,
                1
            ),
            (
                vec![
                    "native".into(),
                    "Decoy>>neverRuns+0x20".into(),
                    "native".into()
                ],
                false,
                1
            ),
        ],
        "the sample at t0+15 is in Caller>>run, whose code moved away at t0+20; later ones in \
         the decoy loaded there at t0+30"
    );
    // Kept samples carry each frame's address and the code start at the sample's time.
    let kept: Vec<&KeptSample> = done.kept.iter().flat_map(|c| c.iter()).collect();
    let first = kept.iter().find(|k| k.timestamp_ns == t0 + 15).unwrap();
    assert_eq!(first.frames.len(), 3);
    assert_eq!(first.frames[1].address, page.at(0x121));
    assert_eq!(first.frames[1].code_start, page.at(0x100));

    let flat = h.manager.snapshot(ROOT, leaf_only.id).await.unwrap();
    assert_eq!(flat.total_samples, 3);
    assert_eq!(flat.truncated, 0, "no stack, nothing cut");
    assert!(
        flat.stacks.stacks.iter().all(|s| s.len == 1),
        "{:?}",
        flat.stacks
    );
}

/// A DWARF session's samples carry a user copy: until the unwinder is wired in, the user stack
/// is the copy's instruction pointer alone, under the kernel frames when the tick landed in the
/// kernel; the copy is counted.
#[tokio::test]
async fn samples_with_a_user_copy_get_the_user_ip_under_the_kernel_frames() {
    use vmscope_common::FLAG_STACK;
    let h = harness();
    let session = h
        .manager
        .start(
            ROOT,
            SessionRequest {
                call_graph: CallGraphMode::Dwarf,
                ..start_request(&[me()], 100)
            },
        )
        .await
        .unwrap();
    assert_eq!(session.call_graph.mode(), CallGraphMode::Dwarf);
    assert_eq!(session.call_graph.dwarf_stack_bytes(), 8192);
    let wants = h
        .kernel
        .lock()
        .unwrap()
        .copy_targets
        .values()
        .copied()
        .collect::<Vec<_>>();
    assert_eq!(
        wants,
        [8192],
        "the kernel copies 8 KiB of the target's stack"
    );

    let t0 = sys::monotonic_ns();
    let user_ip = code_address();
    let stack = [0u8; 64];
    let copy = |faulted| UserCopy {
        ip: user_ip,
        sp: 0x7ffd_0000_0000,
        bp: 0,
        stack: &stack,
        faulted,
    };
    let mut batch = Batch {
        watermark_ns: t0 + 10_000_000,
        ..Batch::default()
    };
    let kernel = [0xffff_ffff_8100_1000, 0xffff_ffff_8100_2000];
    batch.push_with_copy(
        Event {
            flags: FLAG_TARGET | FLAG_STACK | FLAG_KERNEL_MODE,
            ip: kernel[0],
            ..sample(me(), 100, t0 + 1)
        },
        &kernel,
        &[],
        Some(copy(true)),
    );
    batch.push_with_copy(
        Event {
            flags: FLAG_TARGET | FLAG_STACK,
            ip: user_ip,
            ..sample(me(), 100, t0 + 2)
        },
        &[],
        &[],
        Some(copy(false)),
    );
    h.send_batch(batch).await;
    h.stop(session.id).await.unwrap();

    let done = h.manager.snapshot(ROOT, session.id).await.unwrap();
    assert_eq!(done.total_samples, 2);
    let mut shapes: Vec<Vec<&'static str>> = done
        .stacks
        .counts
        .iter()
        .map(|&(_, stack, _)| {
            done.stacks
                .ids_of(stack)
                .iter()
                .map(|id| match done.stacks.location(*id) {
                    Location::Kernel { .. } => "kernel",
                    Location::File { .. } => "native",
                    _ => "other",
                })
                .collect()
        })
        .collect();
    shapes.sort();
    assert_eq!(
        shapes,
        [vec!["kernel", "kernel", "native"], vec!["native"]],
        "{:?}",
        done.stacks
    );
    let counters = h.manager.counters().await.unwrap();
    let counter = |name: &str| counters.values.get(name).copied();
    assert_eq!(counter("user_copies"), Some(2));
    assert_eq!(counter("user_copy_bytes"), Some(128));
    assert_eq!(counter("user_copies_faulted"), Some(1));
}

mod lifetimes;

/// A VM's statistics published for this process, as a stream would pass them on.
async fn publish_stats(h: &Harness, stats: Vec<(u64, StatEvent)>) {
    h.manager
        .publish(
            me(),
            Publication::Changes {
                changes: Vec::new(),
                stats,
                until_ns: 0,
                refused: Vec::new(),
            },
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn vm_statistics_are_taken_over_the_session_window() {
    use vmscope_model::IntervalKind::Scavenge;
    let h = harness();
    let counter = |value| StatEvent::Counter {
        name: "sends".into(),
        unit: String::new(),
        value,
    };
    let begin = |id| StatEvent::Begin { kind: Scavenge, id };
    let end = |id| StatEvent::End { kind: Scavenge, id };
    let t0 = sys::monotonic_ns();
    // Before the session: the counter's baseline, and a scavenge still running at its start.
    publish_stats(
        &h,
        vec![
            (t0, StatEvent::Vm("jitvm 0.1".into())),
            (t0 + 1, counter(100)),
            (t0 + 2, begin(1)),
        ],
    )
    .await;
    let s = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await;
    let t1 = sys::monotonic_ns();
    tokio::time::sleep(Duration::from_millis(2)).await;
    let t2 = sys::monotonic_ns();
    publish_stats(
        &h,
        vec![
            (t1, end(1)),
            (t1 + 10, counter(150)),
            (t1 + 20, begin(2)),
            (t2, end(2)),
        ],
    )
    .await;
    h.stop(s.id).await.unwrap();
    // After the stop: not the session's.
    let t3 = sys::monotonic_ns();
    publish_stats(&h, vec![(t3, counter(1_000)), (t3 + 1, begin(3))]).await;
    let snapshot = h.manager.snapshot(ROOT, s.id).await.unwrap();
    let [vm] = snapshot.vm_statistics.as_slice() else {
        panic!("one VM: {:?}", snapshot.vm_statistics);
    };
    assert_eq!((vm.pid, vm.vm.as_str()), (me(), "jitvm 0.1"));
    assert_eq!((vm.counters[0].delta, vm.counters[0].last), (50, 150));
    let [gc] = vm.intervals.as_slice() else {
        panic!("one kind: {:?}", vm.intervals);
    };
    // The second scavenge counts whole; the first, from the session's start only (which came
    // after t0 and 2 ms before t1), and not as one of the window's.
    assert_eq!(gc.count, 1);
    assert_eq!(gc.longest_ns, t2 - t1 - 20);
    let first = gc.total_ns - gc.longest_ns;
    assert!((2_000_000..t1 - t0).contains(&first), "{first} ns");
    assert_eq!(vm.window_ns, snapshot.duration.as_nanos() as u64);
    let counters = h.manager.counters().await.unwrap();
    assert_eq!(counters.values.get("vm_stats"), Some(&9));
}

/// A VM whose stream opened has its native samples wait before any of its statistics came:
/// a sample of its first collection, read before the VM's Hello and the collection's begin
/// reached the daemon, is counted in the collection (it was counted at once, untagged).
#[tokio::test]
async fn samples_wait_for_a_stream_that_has_published_nothing_yet() {
    use vmscope_model::IntervalKind::Scavenge;
    let h = harness();
    let (s, t0) = h.session_on_a_publishing_vm().await;
    let ms = 1_000_000;
    h.send(
        vec![
            sample(me(), 100, t0 + 10 * ms),
            sample(me(), 100, t0 + 25 * ms),
        ],
        t0 + 100 * ms,
    )
    .await;
    let (begin, end) = (
        StatEvent::Begin {
            kind: Scavenge,
            id: 1,
        },
        StatEvent::End {
            kind: Scavenge,
            id: 1,
        },
    );
    h.manager
        .publish(
            me(),
            Publication::Changes {
                changes: Vec::new(),
                stats: vec![
                    (t0, StatEvent::Vm("jitvm 0.1".into())),
                    (t0 + 20 * ms, begin),
                    (t0 + 30 * ms, end),
                ],
                until_ns: t0 + 50 * ms,
                refused: Vec::new(),
            },
        )
        .await
        .unwrap();
    let (_, during) = h.close_stream_and_stop(s, t0 + 110 * ms).await;
    assert_eq!(during, [(vec![], 1), (vec![Scavenge], 1)]);
}

/// A VM that publishes has its samples wait for its publication, native code included, and
/// each is tagged with the intervals under way at its time: a sample read from the kernel
/// before the scavenge's begin reached the daemon is still counted in it.
#[tokio::test]
async fn samples_of_a_publishing_vm_are_tagged_with_the_intervals_of_their_time() {
    use vmscope_model::IntervalKind::Scavenge;
    let h = harness();
    let (s, t0) = h.session_on_a_publishing_vm().await;
    let publish = |stats: Vec<(u64, StatEvent)>, until_ns| {
        h.manager.publish(
            me(),
            Publication::Changes {
                changes: Vec::new(),
                stats,
                until_ns,
                refused: Vec::new(),
            },
        )
    };
    publish(vec![(t0, StatEvent::Vm("jitvm 0.1".into()))], t0)
        .await
        .unwrap();
    h.manager.counters().await.unwrap();
    let ms = 1_000_000;
    let samples = [t0 + 10 * ms, t0 + 25 * ms, t0 + 40 * ms, t0 + 45 * ms];
    h.send(
        samples.iter().map(|&ts| sample(me(), 100, ts)).collect(),
        t0 + 100 * ms,
    )
    .await;
    let waiting = h.manager.snapshot(ROOT, s).await.unwrap();
    assert_eq!(waiting.total_samples, 4);
    assert!(
        waiting.stacks.counts.is_empty(),
        "the publication is known up to t0 only: every sample waits"
    );
    // The scavenge, published after its samples were read; a safepoint still open.
    publish(
        vec![
            (
                t0 + 20 * ms,
                StatEvent::Begin {
                    kind: Scavenge,
                    id: 1,
                },
            ),
            (
                t0 + 30 * ms,
                StatEvent::End {
                    kind: Scavenge,
                    id: 1,
                },
            ),
            (
                t0 + 44 * ms,
                StatEvent::Begin {
                    kind: IntervalKind::Safepoint,
                    id: 2,
                },
            ),
        ],
        t0 + 50 * ms,
    )
    .await
    .unwrap();
    let (done, during) = h.close_stream_and_stop(s, t0 + 110 * ms).await;
    assert_eq!(
        during,
        [
            (vec![], 2),
            (vec![Scavenge], 1),
            (vec![IntervalKind::Safepoint], 1)
        ]
    );
    let [vm] = done.vm_statistics.as_slice() else {
        panic!("one VM: {:?}", done.vm_statistics);
    };
    assert_eq!(vm.samples, 4);
    let sampled: Vec<(IntervalKind, u64)> = vm
        .intervals
        .iter()
        .map(|i| (i.kind.clone(), i.sampled))
        .collect();
    assert_eq!(
        sampled,
        [(IntervalKind::Scavenge, 1), (IntervalKind::Safepoint, 1)]
    );
}

/// A user's samples left out for root's reserve are lost in that user's session, never in
/// root's; only root's targets may use the reserve; and a user is held to its sampling share
/// while root is not.
#[tokio::test]
async fn shed_samples_are_the_users_own_and_shares_hold_users_only() {
    use std::os::unix::process::CommandExt as _;
    let h = harness();
    let mut theirs = Command::new("sleep")
        .arg("30")
        .uid(NOBODY_UID)
        .gid(NOBODY_UID)
        .spawn()
        .unwrap();
    let pid = theirs.id();
    let users = h
        .manager
        .start(NOBODY, start_request(&[pid], 100))
        .await
        .unwrap();
    let roots = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    assert_eq!(
        h.kernel().root_targets,
        [(period_of(100), me())].into(),
        "only root's target may use the reserve"
    );
    h.kernel.lock().unwrap().lost.shed.insert(
        TargetKey {
            period_ns: period_of(100),
            tgid: pid,
            _pad: 0,
        },
        vec![3, 4],
    );
    let their_snapshot = h.manager.snapshot(NOBODY, users.id).await.unwrap();
    let our_snapshot = h.manager.snapshot(ROOT, roots.id).await.unwrap();
    assert_eq!(their_snapshot.lost_per_cpu, [3, 4]);
    assert_eq!(our_snapshot.lost_per_cpu.iter().sum::<u64>(), 0);
    assert_eq!(
        h.manager.counters().await.unwrap().values["samples_shed_for_root"],
        7
    );

    // 100 Hz is used; 9900 more is the share of 10,000 Hz, one more is refused.
    let refused = h.manager.start(NOBODY, start_request(&[pid], 9901)).await;
    match refused {
        Err(SessionError::ResourceExhausted(why)) => {
            assert!(why.contains("share of 10000 Hz"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    h.manager
        .start(NOBODY, start_request(&[pid], 9900))
        .await
        .expect("within the share");
    h.manager
        .start(ROOT, start_request(&[me()], 9901))
        .await
        .expect("root is not held to the share");
    let _ = theirs.kill();
    let _ = theirs.wait();
}

/// A raw stack seen before is counted as it was placed, in every session, without a look at
/// its process; once the process's mappings are read again (an exec), it is placed afresh.
#[tokio::test]
async fn a_stack_seen_before_is_placed_as_before_until_the_mappings_are_read_again() {
    use vmscope_common::{FLAG_STACK, FLAG_USER_TRUNCATED};
    let h = harness();
    let (with_stacks, leaf_only) = h.stack_and_leaf_sessions(0).await;
    let leaf = code_address();
    let caller = sample as fn(u32, u32, u64) -> Event as usize as u64 + 1;
    let stacked = |ts, flags| Event {
        flags: FLAG_TARGET | FLAG_STACK | flags,
        ip: leaf,
        ..sample(me(), 100, ts)
    };
    let placed_before = async || h.manager.counters().await.unwrap().values["stacks_placed_before"];
    let t0 = sys::monotonic_ns();
    let mut batch = Batch {
        watermark_ns: t0 + 10,
        ..Batch::default()
    };
    for i in 0..3 {
        batch.push(stacked(t0 + i, 0), &[], &[leaf, caller]);
    }
    // The same addresses cut at the depth limit: another stack.
    batch.push(stacked(t0 + 3, FLAG_USER_TRUNCATED), &[], &[leaf, caller]);
    h.send_batch(batch).await;
    assert_eq!(placed_before().await, 2, "the 2nd and 3rd sample");

    let exec = Event {
        kind: EVENT_EXEC,
        tgid: me(),
        tid: me(),
        timestamp_ns: t0 + 20,
        ..Event::default()
    };
    let mut batch = Batch {
        watermark_ns: t0 + 40,
        ..Batch::default()
    };
    batch.push(exec, &[], &[]);
    batch.push(stacked(t0 + 30, 0), &[], &[leaf, caller]);
    batch.push(stacked(t0 + 31, 0), &[], &[leaf, caller]);
    h.send_batch(batch).await;
    assert_eq!(
        placed_before().await,
        3,
        "placed afresh after the exec, then as before"
    );

    h.stop(with_stacks.id).await.unwrap();
    h.stop(leaf_only.id).await.unwrap();
    let whole = h.manager.snapshot(ROOT, with_stacks.id).await.unwrap();
    assert_eq!((whole.total_samples, whole.truncated), (6, 1));
    let mut stacks: Vec<(usize, bool, u64)> = whole
        .stacks
        .counts
        .iter()
        .map(|&(_, stack, n)| {
            let ids = whole.stacks.ids_of(stack);
            assert!(
                ids.iter()
                    .all(|&id| matches!(whole.stacks.location(id), Location::File { .. })),
                "every frame is in this test's binary"
            );
            (
                ids.len(),
                whole.stacks.stacks[stack.0 as usize].truncated(),
                n,
            )
        })
        .collect();
    stacks.sort();
    assert_eq!(stacks, [(2, false, 5), (2, true, 1)]);
    let leaves = h.manager.snapshot(ROOT, leaf_only.id).await.unwrap();
    assert_eq!(leaves.total_samples, 6);
    assert_eq!(
        leaves.stacks.leaf_counts().len(),
        1,
        "one leaf, counted 6 times"
    );
}

/// A session that keeps samples one by one gets each with its frames: while it samples, no
/// sample of any session is placed from what was placed before.
#[tokio::test]
async fn samples_kept_one_by_one_are_never_placed_from_before() {
    use vmscope_common::FLAG_STACK;
    let h = harness();
    let (keeping, _leaves) = h.stack_and_leaf_sessions(10).await;
    let leaf = code_address();
    let caller = sample as fn(u32, u32, u64) -> Event as usize as u64 + 1;
    let t0 = sys::monotonic_ns();
    let mut batch = Batch {
        watermark_ns: t0 + 10,
        ..Batch::default()
    };
    for i in 0..3 {
        let event = Event {
            flags: FLAG_TARGET | FLAG_STACK,
            ip: leaf,
            ..sample(me(), 100, t0 + i)
        };
        batch.push(event, &[], &[leaf, caller]);
    }
    h.send_batch(batch).await;
    let counters = h.manager.counters().await.unwrap();
    assert_eq!(counters.values["stacks_placed_before"], 0);
    h.stop(keeping.id).await.unwrap();
    let kept = h.manager.snapshot(ROOT, keeping.id).await.unwrap();
    let frames: Vec<usize> = kept
        .kept
        .iter()
        .flat_map(|chunk| chunk.iter().map(|s| s.frames.len()))
        .collect();
    assert_eq!(frames, [2, 2, 2]);
}

/// Continuous windows follow one another with the kernel's events left open: the next window
/// takes the period before the elapsed one lets go of it, so that no sample falls between
/// them however long opening per-CPU events takes on a loaded host (CI lost a fifth of a
/// program's samples when each window closed them and the next opened them again).
#[tokio::test]
async fn windows_hand_over_without_closing_the_kernel_s_events() {
    let h = harness();
    let hz = 997;
    let (out, mut windows) = mpsc::channel(8);
    let request = SessionRequest {
        system_wide: true,
        frequency_hz: hz,
        duration: Some(Duration::from_millis(60)),
        ..Default::default()
    };
    let first = h.manager.start_windows(request, out).await.unwrap();
    let period = period_of(hz);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut started = vec![first.id];
    while started.len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "windows started: {started:?}"
        );
        for info in h.manager.list(ROOT).await.unwrap() {
            if !started.contains(&info.id) {
                started.push(info.id);
            }
        }
        // Windows become final at the reader's watermark: move it on, so they are handed over.
        h.send(Vec::new(), sys::monotonic_ns()).await;
        while windows.try_recv().is_ok() {}
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kernel = h.kernel.lock().unwrap();
    assert!(kernel.periods.contains(&period));
    assert_eq!(
        kernel.starts.get(&period),
        Some(&1),
        "the period's events were opened once for {} windows",
        started.len()
    );
}

/// Every sample stamped within the windows is in one window: a batch routed after a window's
/// end but before its stop is noticed gives its later samples to the successor, never to the
/// elapsed window and never to nobody.
#[tokio::test]
async fn samples_around_window_ends_are_each_in_one_window() {
    let h = harness();
    let hz = 997;
    let (out, mut windows) = mpsc::channel(64);
    let request = SessionRequest {
        system_wide: true,
        frequency_hz: hz,
        duration: Some(Duration::from_millis(15)),
        ..Default::default()
    };
    let first = h.manager.start_windows(request, out).await.unwrap();
    let mut sent = 0u64;
    let mut handed = Vec::new();
    let end = std::time::Instant::now() + Duration::from_millis(400);
    while std::time::Instant::now() < end {
        let now = sys::monotonic_ns();
        h.send(vec![sample(me(), hz, now)], now).await;
        sent += 1;
        while let Ok(window) = windows.try_recv() {
            handed.push(window);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // The elapsed windows become final once the watermark passes their ends.
    let settle = std::time::Instant::now() + Duration::from_millis(100);
    while std::time::Instant::now() < settle {
        h.send(Vec::new(), sys::monotonic_ns()).await;
        while let Ok(window) = windows.try_recv() {
            handed.push(window);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let running: Vec<u64> = h
        .manager
        .list(ROOT)
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.state != State::Stopped)
        .map(|s| s.id)
        .collect();
    let mut in_windows = 0;
    for id in running {
        in_windows += h.manager.snapshot(ROOT, id).await.unwrap().total_samples;
    }
    let handed_ids: Vec<u64> = handed.iter().map(|w| w.session.id).collect();
    in_windows += handed.iter().map(|w| w.total_samples).sum::<u64>();
    assert!(handed.len() >= 10, "{} windows handed over", handed.len());
    assert_eq!(handed_ids[0], first.id);
    assert_eq!(
        in_windows, sent,
        "{sent} samples sent, {in_windows} in the windows"
    );
}

/// A block of `tid` of process `tgid` off its CPU over `[begin, end)` for `state`, as the
/// switch program sends it: its duration in `period_ns`, taken for target sessions.
fn block(tgid: u32, tid: u32, begin: u64, end: u64, state: u32) -> Event {
    Event {
        kind: vmscope_common::EVENT_OFF_CPU,
        tgid,
        tid,
        timestamp_ns: end,
        ip: 0xffff_ffff_8100_0000,
        period_ns: end - begin,
        flags: FLAG_KERNEL_MODE | FLAG_TARGET | state << vmscope_common::FLAG_BLOCK_STATE_SHIFT,
        ..Event::default()
    }
}

fn mode_request(mode: vmscope_model::ProfileMode, min_block: Option<Duration>) -> SessionRequest {
    SessionRequest {
        mode: crate::session::ModeRequest::Known(mode),
        min_block,
        ..start_request(&[me()], 1000)
    }
}

/// A snapshot's blocks: (thread, state, count, ns) summed over stacks.
fn blocks_of(snapshot: &Snapshot) -> Vec<(u32, vmscope_model::BlockState, u64, u64)> {
    let mut sums: BTreeMap<(u32, vmscope_model::BlockState), (u64, u64)> = BTreeMap::new();
    for &(task, _, state, b) in &snapshot.stacks.blocks {
        let sum = sums.entry((task.tid, state)).or_default();
        sum.0 += b.count;
        sum.1 += b.ns;
    }
    sums.into_iter()
        .map(|((tid, state), (count, ns))| (tid, state, count, ns))
        .collect()
}

/// Off-CPU and wall sessions take the off-CPU channel (period 0) beside, for wall, their
/// sampling period; each counts a block for the part of it inside its window, a session whose
/// minimum a block is under counts it as short, and a CPU session counts no block.
#[tokio::test]
async fn blocks_count_for_their_share_of_each_off_cpu_session() {
    use vmscope_common::{BLOCK_PREEMPTED, BLOCK_SLEEPING, OFF_CPU_PERIOD};
    use vmscope_model::{BlockState, ProfileMode};
    let h = harness();
    let off = h
        .manager
        .start(
            ROOT,
            mode_request(ProfileMode::OffCpu, Some(Duration::from_millis(1))),
        )
        .await
        .unwrap();
    let wall = h
        .manager
        .start(ROOT, mode_request(ProfileMode::Wall, None))
        .await
        .unwrap();
    let cpu = h
        .manager
        .start(ROOT, start_request(&[me()], 1000))
        .await
        .unwrap();
    let k = h.kernel();
    assert_eq!(k.periods, [OFF_CPU_PERIOD, 1_000_000].into());
    assert_eq!(
        k.min_blocks.get(&(OFF_CPU_PERIOD, me())),
        None,
        "the kernel works to the least minimum: the wall session's, every block"
    );
    // When each started: its duration was measured between the clock reads around the
    // snapshot, however long a loaded machine takes to answer it (CI once took over 10 ms).
    let started = async |id| {
        let before = sys::monotonic_ns();
        let duration = h.manager.snapshot(ROOT, id).await.unwrap().duration;
        let after = sys::monotonic_ns();
        let duration = duration.as_nanos() as u64;
        (before - duration)..=(after - duration)
    };
    let (started_off, started_wall) = (started(off.id).await, started(wall.id).await);
    let t0 = sys::monotonic_ns();
    // The off-CPU session started before the wall one: a block begun before either counts
    // from each one's start.
    let begun_before = started_off.start() - 10_000_000;
    // A thread of this process that does not exist (me() + 1 is the test's own thread when
    // it runs alone).
    let tid = (me() + 1..)
        .find(|t| !std::path::Path::new(&format!("/proc/self/task/{t}")).exists())
        .unwrap();
    let mut untargeted = block(me(), tid, t0, t0 + 7_000_000, BLOCK_SLEEPING);
    untargeted.flags &= !FLAG_TARGET;
    h.send(
        vec![
            block(me(), tid, t0, t0 + 5_000_000, BLOCK_SLEEPING),
            block(me(), tid, begun_before, t0 + 6_000_000, BLOCK_SLEEPING),
            block(me(), tid, t0 + 7_000_000, t0 + 7_500_000, BLOCK_PREEMPTED),
            untargeted,
        ],
        t0 + 8_000_000,
    )
    .await;
    let off_snapshot = h.manager.snapshot(ROOT, off.id).await.unwrap();
    let wall_snapshot = h.manager.snapshot(ROOT, wall.id).await.unwrap();
    let off_blocks = blocks_of(&off_snapshot);
    assert_eq!(off_blocks.len(), 1, "{off_blocks:?}");
    let (_, state, count, ns) = off_blocks[0];
    assert_eq!((state, count), (BlockState::Sleeping, 2));
    // 5 ms, and the long block from the session's start on.
    let from = |started: &std::ops::RangeInclusive<u64>| {
        (t0 + 6_000_000 - started.end())..=(t0 + 6_000_000 - started.start())
    };
    let long = from(&started_off);
    assert!(
        (long.start() + 5_000_000..=long.end() + 5_000_000).contains(&ns),
        "{ns} for 5 ms and {long:?}"
    );
    let tally = off_snapshot.off_cpu.as_ref().expect("an off-CPU tally");
    assert_eq!((tally.short.count, tally.short.ns), (1, 500_000));
    let wall_blocks = blocks_of(&wall_snapshot);
    assert_eq!(
        wall_blocks.iter().map(|b| (b.1, b.2)).collect::<Vec<_>>(),
        [(BlockState::Preempted, 1), (BlockState::Sleeping, 2)]
    );
    let long = wall_blocks[1].3 - 5_000_000;
    let expected = from(&started_wall);
    assert!(
        expected.contains(&long),
        "clipped to the wall session's later start: {long} for {expected:?}"
    );
    let cpu_snapshot = h.manager.snapshot(ROOT, cpu.id).await.unwrap();
    assert!(cpu_snapshot.stacks.blocks.is_empty() && cpu_snapshot.off_cpu.is_none());
    assert_eq!(
        wall_snapshot.thread_names.get(&Task::new(me(), tid)),
        Some(&String::new()),
        "a thread is named from its first block (this one does not exist)"
    );
    for id in [off.id, wall.id, cpu.id] {
        h.stop(id).await.unwrap();
    }
    assert!(!h.kernel().periods.contains(&OFF_CPU_PERIOD));
}

/// A new off-CPU session notes its targets' threads off their CPU since its start (one asleep
/// since before would never be seen leaving); at its stop, the threads the kernel still follows
/// are counted up to the stop with no stack, and their block, should it come while the session
/// stops, is not counted again, while an earlier block of theirs that comes late is.
#[tokio::test]
async fn threads_asleep_at_the_start_and_still_off_the_cpu_at_the_stop_are_counted_once() {
    use vmscope_common::{BLOCK_SLEEPING, BLOCKED_NOTED};
    use vmscope_model::ProfileMode;
    let h = harness();
    let session = h
        .manager
        .start(ROOT, mode_request(ProfileMode::OffCpu, None))
        .await
        .unwrap();
    let noted = h.kernel().blocked;
    let threads = std::fs::read_dir(format!("/proc/{}/task", me()))
        .unwrap()
        .count();
    assert!(noted.len() >= threads.min(1), "{noted:?}");
    assert!(
        noted
            .values()
            .all(|b| b.tgid == me() && b.flags & BLOCKED_NOTED != 0)
    );
    let tid = *noted.keys().next().unwrap();
    let since = noted[&tid].since_ns;
    let manager = h.manager.clone();
    let stop = tokio::spawn(async move { manager.stop(ROOT, session.id, "").await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let after_stop = sys::monotonic_ns();
    h.send(
        vec![
            // The block still under way at the stop: counted there already.
            block(me(), tid, since, after_stop, BLOCK_SLEEPING),
            // Another thread's earlier block, read late.
            block(me(), me() + 77, since, since + 1_000_000, BLOCK_SLEEPING),
        ],
        after_stop,
    )
    .await;
    h.pass_watermark().await;
    stop.await.unwrap().unwrap();
    let snapshot = h.manager.snapshot(ROOT, session.id).await.unwrap();
    let tally = snapshot.off_cpu.as_ref().unwrap();
    assert_eq!(tally.still_blocked.0 as usize, noted.len());
    let still: Vec<&(
        Task,
        StackId,
        vmscope_model::BlockState,
        crate::session::Blocks,
    )> = snapshot
        .stacks
        .blocks
        .iter()
        .filter(|b| {
            let ids = snapshot.stacks.ids_of(b.1);
            ids.len() == 1 && snapshot.stacks.location(ids[0]) == Location::StillOffCpu
        })
        .collect();
    assert_eq!(still.len(), noted.len());
    let of_tid: u64 = still
        .iter()
        .filter(|b| b.0.tid == tid)
        .map(|b| b.3.count)
        .sum();
    assert_eq!(of_tid, 1, "its block counted once, at the stop");
    assert_eq!(
        tally.blocks,
        noted.len() as u64 + 1,
        "and the late earlier block"
    );
}

/// A thread named by the kernel's rename event keeps that name, read from no `/proc`: a thread
/// gone by its first sample is still named.
#[tokio::test]
async fn renamed_threads_are_named_from_the_event() {
    let h = harness();
    let session = h
        .manager
        .start(ROOT, start_request(&[me()], 100))
        .await
        .unwrap();
    let gone = 4_000_000; // no such thread
    let (ip, period_ns) = Event::comm_words(b"GC Thread#0\0\0\0\0\0");
    let now = sys::monotonic_ns();
    let read_before = h.manager.counters().await.unwrap().values["thread_names_read"];
    h.send(
        vec![
            Event {
                kind: vmscope_common::EVENT_RENAME,
                tgid: me(),
                tid: gone,
                timestamp_ns: now,
                ip,
                period_ns,
                ..Event::default()
            },
            Event {
                tid: gone,
                ..sample(me(), 100, now + 1)
            },
        ],
        now + 1,
    )
    .await;
    let snapshot = h.manager.snapshot(ROOT, session.id).await.unwrap();
    assert_eq!(snapshot.thread_names[&Task::new(me(), gone)], "GC Thread#0");
    let counters = h.manager.counters().await.unwrap().values;
    assert_eq!(counters["thread_names_read"], read_before);
    assert_eq!(counters["rename_events"], 1);
}

/// Every counter and gauge becomes a Prometheus metric (`--http`): promtool refuses a family
/// whose name holds its type (`..._counter_..._total`), as it refused `counter_region_reads`.
#[tokio::test]
async fn no_metric_name_holds_a_metric_type() {
    let h = harness();
    let counters = h.manager.counters().await.unwrap();
    for name in counters.values.keys().chain(counters.gauges.keys()) {
        for word in name.split('_') {
            assert!(
                !["counter", "gauge", "histogram", "summary"].contains(&word),
                "{name} holds the metric type {word}"
            );
        }
    }
}
