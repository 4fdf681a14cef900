//! When to ask the HotSpot JVMs among the targets for their perf map, and what came of it.
//!
//! HotSpot writes `/tmp/perf-<nspid>.map` only when asked ([`crate::jvm`] asks the way jcmd
//! does). A snapshot holds the code compiled so far, so the manager asks at a session's start,
//! again when samples in code no map explains pile up (backing off: 1 s, then twice as long
//! each time, up to [`MAX_INTERVAL_NS`]), and at the stop, whose end waits for the answer.
//! Samples taken before a snapshot are named from it as a later snapshot (see
//! [`crate::codemap::registry`]). Each request runs on a thread of its own: it may wait seconds
//! for a JVM to open its socket, and the manager must go on routing samples meanwhile.
//!
//! A JVM is asked only for sessions that name it as a target (not system-wide ones) and that
//! did not opt out, and never when asking could harm it (see [`AttachError::is_refusal`]):
//! such a refusal is final for that process.

use std::{collections::HashMap, time::Duration};

use tokio::sync::mpsc::UnboundedSender;

use crate::jvm::{self, AttachError, JvmOptions, JvmTarget, Snapshot};

/// Longest one request may take, socket wait included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// First wait between two requests caused by unexplained samples.
const FIRST_INTERVAL_NS: u64 = 1_000_000_000;

/// Longest wait between two requests caused by unexplained samples.
pub const MAX_INTERVAL_NS: u64 = 16_000_000_000;

/// Samples in unexplained generated code since the last snapshot that make it worth another.
pub const UNEXPLAINED_BEFORE_ASKING: u64 = 20;

/// The answer to one request, for the manager's loop.
#[derive(Debug)]
pub struct JvmReply {
    /// The JVM.
    pub pid: u32,
    /// The perf map written, or why not.
    pub result: Result<Snapshot, AttachError>,
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
}

#[derive(Debug)]
struct Jvm {
    options: JvmOptions,
    in_flight: bool,
    last_request_ns: u64,
    interval_ns: u64,
    /// Asking could harm it: never again.
    refused: bool,
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
        self.jvms.insert(
            pid,
            Jvm {
                options,
                in_flight: false,
                last_request_ns: 0,
                interval_ns: FIRST_INTERVAL_NS,
                refused: false,
            },
        );
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
    /// (unless `now`) the back-off since the last request has passed. Whether it asked.
    pub fn request(&mut self, pid: u32, now_ns: u64, urgent: bool) -> bool {
        let Some(jvm) = self.jvms.get_mut(&pid) else {
            return false;
        };
        if jvm.in_flight
            || jvm.refused
            || (!urgent && now_ns.saturating_sub(jvm.last_request_ns) < jvm.interval_ns)
        {
            return false;
        }
        if !urgent && jvm.last_request_ns > 0 {
            jvm.interval_ns = (jvm.interval_ns * 2).min(MAX_INTERVAL_NS);
        }
        jvm.in_flight = true;
        jvm.last_request_ns = now_ns;
        self.counters.requests += 1;
        let replies = self.replies.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("jvm-attach-{pid}"))
            .spawn(move || {
                let result = JvmTarget::read(pid)
                    .map_err(|_| AttachError::Gone { pid })
                    .and_then(|target| jvm::request_perf_map(&target, REQUEST_TIMEOUT));
                let _ = replies.send(JvmReply { pid, result });
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
    pub fn answered(&mut self, reply: &JvmReply) -> bool {
        let Some(jvm) = self.jvms.get_mut(&reply.pid) else {
            return false;
        };
        jvm.in_flight = false;
        match &reply.result {
            Ok(snapshot) => {
                self.counters.snapshots += 1;
                self.counters.request_ms += snapshot.elapsed.as_millis() as u64;
                tracing::debug!(
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

    /// Forgets the JVMs `keep` does not name (and has nothing in flight for).
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.jvms.retain(|&pid, jvm| jvm.in_flight || keep(pid));
    }
}
