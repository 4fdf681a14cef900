//! When to ask the HotSpot JVMs among the targets for their perf map, and what came of it.
//!
//! HotSpot writes `/tmp/perf-<nspid>.map` only when asked ([`crate::jvm`] asks the way jcmd
//! does). A snapshot holds the code compiled so far, so the manager asks at a session's start,
//! again when samples in code no map explains pile up, and at the stop, whose end waits for the
//! answer. Samples taken before a snapshot are named from it as a later snapshot (see
//! [`crate::codemap::registry`]). Each request runs on a thread of its own: it may wait seconds
//! for a JVM to open its socket, and the manager must go on routing samples meanwhile.
//!
//! How often to ask again: a snapshot names only the code alive when it is written, a JVM
//! warming up replaces its code fast (a method's profiled C1 code runs for a fraction of a
//! second before C2's replaces it and it is freed), and a JVM that exits by itself is never
//! asked at its end. So once unexplained samples pile up, the next snapshot is asked for
//! [`SOON_NS`] after the last. A snapshot late for short-lived code names nothing, so the wait
//! grows only after [`FRUITLESS_BEFORE_WAITING`] snapshots in a row named nothing (the samples
//! are in code no perf map names): from 1 s, twice as long each time, up to
//! [`MAX_INTERVAL_NS`]. Either way the JVM spends at most 1/[`COST_FACTOR`] of the wall time
//! answering.
//!
//! A JVM is asked only for sessions that name it as a target (not system-wide ones) and that
//! did not opt out, and never when asking could harm it (see [`AttachError::is_refusal`]):
//! such a refusal is final for that process.
//!
//! What the requests leave: before its first request to a JVM, the daemon looks whether its
//! perf map is there. If it is not, and the JVM does not write one at exit by itself
//! (`-XX:+DumpPerfMapAtExit`), the file the requests make it write is the daemon's doing, and
//! [`JvmSnapshots::remove_perf_maps`] removes it once no session needs it (see
//! [`crate::jvm::perf_map_file`]); a file that was there before is the user's, left alone.

use std::{collections::HashMap, time::Duration};

use tokio::sync::mpsc::UnboundedSender;

use crate::jvm::{self, AttachError, JvmOptions, JvmTarget, PerfMapFile, Snapshot};

/// Longest one request may take, socket wait included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Shortest wait between two requests caused by unexplained samples.
pub const SOON_NS: u64 = 250_000_000;

/// Snapshots in a row that named nothing after which the wait grows.
pub const FRUITLESS_BEFORE_WAITING: u32 = 3;

/// Wait after [`FRUITLESS_BEFORE_WAITING`] fruitless snapshots in a row; doubles with each
/// further one.
const FIRST_INTERVAL_NS: u64 = 1_000_000_000;

/// Longest wait between two requests caused by unexplained samples.
pub const MAX_INTERVAL_NS: u64 = 16_000_000_000;

/// The wait between two requests caused by unexplained samples is at least this many times as
/// long as the JVM took to answer the last one: a JVM that writes its map in 10 ms is asked at
/// most every 250 ms, one with a code cache so large that it takes 100 ms at most every 2 s.
pub const COST_FACTOR: u64 = 20;

/// Samples in unexplained generated code since the last snapshot that make it worth another.
pub const UNEXPLAINED_BEFORE_ASKING: u64 = 20;

/// The answer to one request, for the manager's loop.
#[derive(Debug)]
pub struct JvmReply {
    /// The JVM.
    pub pid: u32,
    /// The perf map written, or why not.
    pub result: Result<Snapshot, AttachError>,
    /// The perf map's file, and whether it was there before the request (`None` when the JVM's
    /// /tmp could not be looked at).
    pub perf_map: Option<(PerfMapFile, bool)>,
}

/// Counters of perf map requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JvmCounters {
    /// JVMs found among targets.
    pub jvms: u64,
    /// Requests sent.
    pub requests: u64,
    /// Perf maps written on request.
    pub snapshots: u64,
    /// Requests that failed (timeout, an error from the JVM...).
    pub failures: u64,
    /// JVMs never asked because asking could harm them (no SIGQUIT handler, -Xrs, attach
    /// disabled).
    pub refused: u64,
    /// Time from request to answer, in all (ms).
    pub request_ms: u64,
    /// Perf maps the requests made JVMs write, removed once no session needed them.
    pub perf_maps_removed: u64,
}

/// Whose a JVM's perf map is.
#[derive(Debug)]
enum PerfMapOwner {
    /// Not looked at yet.
    Unknown,
    /// There before the daemon first asked, or written at exit by the JVM itself: left alone.
    User,
    /// Written because the daemon asked: removed once no session needs it; the file, once a
    /// request succeeded (and until it is removed).
    Daemon(Option<PerfMapFile>),
}

#[derive(Debug)]
struct Jvm {
    options: JvmOptions,
    in_flight: bool,
    /// When it was last asked (0: never).
    last_request_ns: u64,
    /// How many snapshots in a row, ending with the one before the last, named nothing.
    fruitless_before: u32,
    /// Samples its snapshots had named (the code maps' count) when it was last asked: more
    /// now means the last snapshot named some.
    named_at_request: u64,
    /// How long it took to answer the last request that it answered (ns).
    answer_ns: u64,
    /// Asking could harm it: never again.
    refused: bool,
    /// Whose its perf map is.
    perf_map: PerfMapOwner,
}

impl Jvm {
    fn new(options: JvmOptions) -> Jvm {
        Jvm {
            options,
            in_flight: false,
            last_request_ns: 0,
            fruitless_before: 0,
            named_at_request: 0,
            answer_ns: 0,
            refused: false,
            perf_map: PerfMapOwner::Unknown,
        }
    }

    /// How many snapshots in a row, ending with the last, named nothing, `named` being the
    /// count of samples its snapshots have named so far (a request that failed counts as one
    /// that named nothing).
    fn fruitless(&self, named: u64) -> u32 {
        if self.last_request_ns == 0 || named > self.named_at_request {
            0
        } else {
            self.fruitless_before.saturating_add(1)
        }
    }

    /// How long after the last request the next one caused by unexplained samples may go.
    fn wait_ns(&self, named: u64) -> u64 {
        let wait = match self.fruitless(named).checked_sub(FRUITLESS_BEFORE_WAITING) {
            None => SOON_NS,
            Some(beyond) => FIRST_INTERVAL_NS
                .saturating_mul(1 << beyond.min(8))
                .min(MAX_INTERVAL_NS),
        };
        wait.max(self.answer_ns.saturating_mul(COST_FACTOR))
    }

    /// Whether it may be asked now: nothing in flight, never refused, and unless `urgent`, the
    /// wait since the last request has passed.
    fn may_ask(&self, now_ns: u64, urgent: bool, named: u64) -> bool {
        !self.in_flight
            && !self.refused
            && (urgent
                || self.last_request_ns == 0
                || now_ns.saturating_sub(self.last_request_ns) >= self.wait_ns(named))
    }

    /// It is asked now.
    fn asked(&mut self, now_ns: u64, named: u64) {
        self.fruitless_before = self.fruitless(named);
        self.in_flight = true;
        self.last_request_ns = now_ns;
        self.named_at_request = named;
    }
}

/// The JVMs the manager knows, and the requests in flight.
#[derive(Debug)]
pub struct JvmSnapshots {
    jvms: HashMap<u32, Jvm>,
    replies: UnboundedSender<JvmReply>,
    /// Counters.
    pub counters: JvmCounters,
}

impl JvmSnapshots {
    /// No JVMs yet; answers go to `replies`.
    pub fn new(replies: UnboundedSender<JvmReply>) -> JvmSnapshots {
        JvmSnapshots {
            jvms: HashMap::new(),
            replies,
            counters: JvmCounters::default(),
        }
    }

    /// Notes that `pid` is a HotSpot JVM (it maps libjvm.so), reading its flags.
    pub fn observe(&mut self, pid: u32) {
        if self.jvms.contains_key(&pid) {
            return;
        }
        let options = jvm::options::read(pid).unwrap_or_default();
        self.counters.jvms += 1;
        tracing::info!(
            pid,
            preserve_frame_pointer = options.preserve_frame_pointer,
            "HotSpot JVM"
        );
        self.jvms.insert(pid, Jvm::new(options));
    }

    /// Whether `pid` is a known JVM.
    pub fn is_jvm(&self, pid: u32) -> bool {
        self.jvms.contains_key(&pid)
    }

    /// Whether `pid` is a JVM whose compiled code keeps no frame pointer: a walk past its Java
    /// frames finds garbage.
    pub fn cuts_stacks(&self, pid: u32) -> bool {
        self.jvms
            .get(&pid)
            .is_some_and(|j| !j.options.preserve_frame_pointer)
    }

    /// Whether a request to `pid` is in flight.
    pub fn in_flight(&self, pid: u32) -> bool {
        self.jvms.get(&pid).is_some_and(|j| j.in_flight)
    }

    /// Asks `pid` for its perf map if it is a JVM that may be asked, nothing is in flight, and
    /// (unless `urgent`) the wait since the last request has passed. `named` is how many of its
    /// samples snapshots have named so far ([`crate::codemap::registry::CodeMaps::named_by_snapshots`]):
    /// what tells whether the last one was worth it. Whether it asked.
    pub fn request(&mut self, pid: u32, now_ns: u64, urgent: bool, named: u64) -> bool {
        let Some(jvm) = self.jvms.get_mut(&pid) else {
            return false;
        };
        if !jvm.may_ask(now_ns, urgent, named) {
            return false;
        }
        jvm.asked(now_ns, named);
        self.counters.requests += 1;
        let replies = self.replies.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("jvm-attach-{pid}"))
            .spawn(move || {
                let (result, perf_map) = match JvmTarget::read(pid) {
                    Ok(target) => {
                        // Before the request: afterwards the file is there either way.
                        let perf_map = PerfMapFile::look(&target).ok();
                        (jvm::request_perf_map(&target, REQUEST_TIMEOUT), perf_map)
                    }
                    Err(_) => (Err(AttachError::Gone { pid }), None),
                };
                let _ = replies.send(JvmReply {
                    pid,
                    result,
                    perf_map,
                });
            });
        if let Err(e) = spawned {
            tracing::warn!(pid, "no thread to ask the JVM for its perf map: {e}");
            jvm.in_flight = false;
            self.counters.failures += 1;
            return false;
        }
        true
    }

    /// An answer came: whether the JVM wrote its perf map.
    pub fn answered(&mut self, reply: &mut JvmReply) -> bool {
        let Some(jvm) = self.jvms.get_mut(&reply.pid) else {
            return false;
        };
        jvm.in_flight = false;
        if let Some((file, there)) = reply.perf_map.take() {
            if matches!(jvm.perf_map, PerfMapOwner::Unknown) {
                jvm.perf_map = if there || jvm.options.dump_perf_map_at_exit {
                    PerfMapOwner::User
                } else {
                    PerfMapOwner::Daemon(None)
                };
            }
            if let PerfMapOwner::Daemon(held) = &mut jvm.perf_map
                && reply.result.is_ok()
            {
                *held = Some(file);
            }
        }
        match &reply.result {
            Ok(snapshot) => {
                jvm.answer_ns = u64::try_from(snapshot.elapsed.as_nanos()).unwrap_or(u64::MAX);
                self.counters.snapshots += 1;
                self.counters.request_ms += snapshot.elapsed.as_millis() as u64;
                tracing::info!(
                    pid = reply.pid,
                    ms = snapshot.elapsed.as_millis() as u64,
                    "JVM wrote its perf map"
                );
                true
            }
            Err(e) if e.is_refusal() => {
                // A JVM still starting has no handler yet: asked again later. Its flags do
                // not change.
                jvm.refused = matches!(
                    e,
                    AttachError::AttachDisabled { .. } | AttachError::ReducedSignals { .. }
                );
                self.counters.refused += 1;
                tracing::info!(pid = reply.pid, "JVM not asked for its perf map: {e}");
                false
            }
            Err(e) => {
                self.counters.failures += 1;
                tracing::warn!(pid = reply.pid, "JVM perf map request failed: {e}");
                false
            }
        }
    }

    /// Forgets the JVMs `keep` does not name (and has nothing in flight for), removing the
    /// perf maps the daemon made them write.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.remove_perf_maps(&keep);
        self.jvms.retain(|&pid, jvm| jvm.in_flight || keep(pid));
    }

    /// Removes the perf maps the daemon's requests made JVMs write, of the JVMs that `needed`
    /// does not name and that have no request in flight: on a thread each, since the JVM's
    /// /tmp may never answer. A later request writes the file again, and it is removed again.
    pub fn remove_perf_maps(&mut self, needed: impl Fn(u32) -> bool) {
        for (&pid, jvm) in &mut self.jvms {
            if jvm.in_flight || needed(pid) {
                continue;
            }
            let PerfMapOwner::Daemon(held) = &mut jvm.perf_map else {
                continue;
            };
            let Some(file) = held.take() else {
                continue;
            };
            self.counters.perf_maps_removed += 1;
            let spawned = std::thread::Builder::new()
                .name(format!("jvm-perf-map-{pid}"))
                .spawn(move || remove_perf_map(pid, &file));
            if let Err(e) = spawned {
                tracing::warn!(
                    pid,
                    "no thread to remove the perf map the daemon caused: {e}"
                );
            }
        }
    }
}

impl Drop for JvmSnapshots {
    /// The daemon stops: the perf maps it caused go with it, as far as a second allows.
    fn drop(&mut self) {
        let (done, finished) = std::sync::mpsc::channel();
        let mut removing = 0;
        for (&pid, jvm) in &mut self.jvms {
            if let PerfMapOwner::Daemon(held) = &mut jvm.perf_map
                && let Some(file) = held.take()
            {
                let done = done.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("jvm-perf-map-{pid}"))
                    .spawn(move || {
                        remove_perf_map(pid, &file);
                        let _ = done.send(());
                    });
                removing += usize::from(spawned.is_ok());
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        for _ in 0..removing {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if finished.recv_timeout(left).is_err() {
                break;
            }
        }
    }
}

/// Removes `file`, the perf map of JVM `pid` that the daemon caused, and says so.
fn remove_perf_map(pid: u32, file: &PerfMapFile) {
    let name = file.name().display();
    match file.remove() {
        Ok(true) => tracing::info!(
            pid,
            "removed /tmp/{name}: the daemon's requests had made the JVM write it"
        ),
        Ok(false) => {}
        Err(e) => tracing::warn!(
            pid,
            "cannot remove /tmp/{name}, which the daemon caused: {e}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// A JVM asked at 1 s (when a session started), its answer taking `answer_ms`.
    fn asked_at_start(answer_ms: u64) -> Jvm {
        let mut jvm = Jvm::new(JvmOptions::default());
        assert!(jvm.may_ask(S, true, 0));
        jvm.asked(S, 0);
        assert!(!jvm.may_ask(S + 1, true, 0), "one request at a time");
        jvm.in_flight = false;
        jvm.answer_ns = answer_ms * 1_000_000;
        jvm
    }

    /// Asks `jvm` again each time as soon as it may be, its snapshots naming `named` samples
    /// in all: the waits, in ms.
    fn waits(jvm: &mut Jvm, named: &[u64]) -> Vec<u64> {
        named
            .iter()
            .map(|&named| {
                let at = jvm.last_request_ns;
                let wait = jvm.wait_ns(named);
                assert!(!jvm.may_ask(at + wait - 1, false, named));
                assert!(jvm.may_ask(at + wait, false, named));
                jvm.asked(at + wait, named);
                jvm.in_flight = false;
                wait / 1_000_000
            })
            .collect()
    }

    #[test]
    fn snapshots_that_name_samples_keep_the_next_due_soon() {
        let mut jvm = asked_at_start(10);
        assert_eq!(waits(&mut jvm, &[50, 100, 150, 200]), [250; 4]);
    }

    #[test]
    fn the_wait_grows_only_after_snapshots_in_a_row_name_nothing() {
        let mut jvm = asked_at_start(10);
        // The start's and the next that named nothing (late for code already freed) change
        // nothing; from the third, the wait doubles up to its most.
        let named = [0; 9];
        assert_eq!(
            waits(&mut jvm, &named),
            [250, 250, 1000, 2000, 4000, 8000, 16000, 16000, 16000]
        );
        // One that names samples again makes the next due soon, and starts the count again.
        assert_eq!(waits(&mut jvm, &[1, 1, 1, 1]), [250, 250, 250, 1000]);
    }

    #[test]
    fn a_slow_answer_spaces_the_requests_by_its_cost() {
        // 400 ms to write the map: at most one request every 8 s, useful or not.
        let mut jvm = asked_at_start(400);
        assert_eq!(waits(&mut jvm, &[100, 200]), [8000, 8000]);
        // The start and the stop ask anyway.
        assert!(jvm.may_ask(S + 1, true, 200));
    }

    #[test]
    fn a_refused_jvm_is_never_asked() {
        let mut jvm = asked_at_start(10);
        jvm.refused = true;
        assert!(!jvm.may_ask(100 * S, true, 100));
        assert!(!jvm.may_ask(100 * S, false, 100));
    }
}
