//! What fills a process's heap: class histograms, taken on request and kept under an id.
//!
//! A sampler cannot walk a moving heap from outside, but a VM can count its objects at a
//! safepoint. HotSpot does it for `GC.class_histogram` through the attach mechanism the daemon
//! already uses for perf maps ([`hotspot`]). A histogram is taken on a blocking thread of its
//! own, with the requesting user's rights over the process checked first (the same rule as a
//! session's: [`crate::session::request::may_profile`]), at most one per process at a time
//! (a second full GC queued behind the first would double the pause) and at most
//! [`IN_FLIGHT`] per user. Each user's newest [`KEPT_PER_USER`] histograms are kept for
//! [`Heaps::get`], so that growth between two of them can be asked for by id.

pub mod hotspot;
pub mod vm;

use std::{
    collections::{HashSet, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, SystemTime},
};

use vmscope_model::heap::{HeapHistogram, HeapStructures};

use crate::{
    session::{Caller, request::may_profile},
    shares::{ShareLimits, Shares},
    sys,
};

/// Histograms one user may wait for at once, all users together, everyone.
pub const IN_FLIGHT: ShareLimits = ShareLimits {
    per_user: 2,
    non_root: 16,
    total: 24,
};

/// Histograms kept per user (its newest), and in all.
pub const KEPT_PER_USER: usize = 64;
const KEPT_TOTAL: usize = 1024;
/// Memory the histograms kept may hold, per user and in all: a histogram of a large
/// application (20,000 classes) holds some 2 MB.
pub const KEPT_BYTES_PER_USER: usize = 64 << 20;
const KEPT_BYTES_TOTAL: usize = 512 << 20;

/// How long a histogram is waited for unless the request says, and at most.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest wait a request may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// A histogram kept, with who asked for it: only they (and root) may get it again.
#[derive(Debug)]
struct KeptHistogram {
    owner_uid: u32,
    /// What it holds of the daemon's memory, about ([`footprint`]).
    bytes: usize,
    histogram: Arc<HeapHistogram>,
}

/// About what a histogram holds of the daemon's memory: its names and a row's fixed size.
fn footprint(histogram: &HeapHistogram) -> usize {
    let row = std::mem::size_of::<vmscope_model::heap::ClassCount>();
    histogram
        .classes
        .iter()
        .map(|c| row + c.name.len() + c.module.len())
        .sum::<usize>()
        + std::mem::size_of::<HeapHistogram>()
        + histogram.command.len()
}

/// What a histogram request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistogramRequest {
    /// The process.
    pub pid: u32,
    /// Every object, unreachable ones too, with no full collection first.
    pub all: bool,
    /// How long to wait for the answer.
    pub timeout: Duration,
}

/// Why no histogram was taken or found.
#[derive(Debug, thiserror::Error)]
pub enum HeapError {
    /// A request out of bounds.
    #[error("{0}")]
    InvalidArgument(String),
    /// No such process, or no such histogram.
    #[error("{0}")]
    NotFound(String),
    /// Another user's process or histogram.
    #[error("{0}")]
    PermissionDenied(String),
    /// The process cannot answer: not a VM vmscope can ask, or one that refuses.
    #[error("{0}")]
    CannotAnswer(String),
    /// The VM did not answer in time.
    #[error("{0}")]
    Timeout(String),
    /// Too many histograms waited for.
    #[error("{0}")]
    Busy(String),
    /// The VM answered with something that is not a histogram, or a system call failed.
    #[error("{0}")]
    Failed(String),
}

/// Counters of the histograms asked for (`vmscope info`).
#[derive(Debug, Default)]
pub struct HeapCounters {
    /// Histograms taken.
    pub taken: AtomicU64,
    /// Requests refused before anything was sent (permissions, limits, not a JVM, a JVM
    /// that refuses attach).
    pub refused: AtomicU64,
    /// Requests sent whose answer failed (timeouts, malformed answers, the process exited).
    pub failed: AtomicU64,
    /// Structure queries answered.
    pub queries: AtomicU64,
    /// Microseconds the targets' threads were stopped for them (and for queries), in all (`heap_pause_ms`: each
    /// pause added whole, not rounded to milliseconds first).
    pub pause_us: AtomicU64,
}

#[derive(Debug, Default)]
struct Kept {
    histograms: VecDeque<KeptHistogram>,
    /// Processes whose histogram is being taken.
    in_progress: HashSet<u32>,
}

impl Kept {
    /// Histograms and bytes `uid` keeps.
    fn held_by(&self, uid: u32) -> (usize, usize) {
        self.histograms
            .iter()
            .filter(|h| h.owner_uid == uid)
            .fold((0, 0), |(n, b), h| (n + 1, b + h.bytes))
    }

    /// Whose oldest histogram must go: `owner`'s past its share, else the largest holder's
    /// past the daemon's; `None` when everything fits. A lone histogram past the share stays
    /// (it cannot be larger than an answer may be, [`crate::jvm::attach::MAX_HISTOGRAM_BYTES`]).
    fn over_share(&self, owner: u32) -> Option<u32> {
        let (n, bytes) = self.held_by(owner);
        if n > 1 && (n > KEPT_PER_USER || bytes > KEPT_BYTES_PER_USER) {
            return Some(owner);
        }
        let total_bytes: usize = self.histograms.iter().map(|h| h.bytes).sum();
        if self.histograms.len() <= KEPT_TOTAL && total_bytes <= KEPT_BYTES_TOTAL {
            return None;
        }
        let mut holders: Vec<u32> = self.histograms.iter().map(|h| h.owner_uid).collect();
        holders.sort_unstable();
        holders.dedup();
        holders.into_iter().max_by_key(|&uid| {
            let (n, bytes) = self.held_by(uid);
            (bytes, n)
        })
    }

    fn drop_oldest_of(&mut self, uid: u32) {
        if let Some(oldest) = self.histograms.iter().position(|h| h.owner_uid == uid) {
            self.histograms.remove(oldest);
        }
    }
}

/// A process the caller may ask for its heap: its status as checked, and its start time.
#[derive(Debug)]
pub struct Checked {
    /// The process.
    pub pid: u32,
    /// Its `/proc/PID/status` as checked.
    pub status: vmscope_parse::stat::ProcStatus,
    /// Its start time, read after the status.
    pub start_time: u64,
}

impl Checked {
    /// Pid, start time and effective uid: who a VM's stream must be of to answer for it.
    pub fn identity(&self) -> (u32, u64, u32) {
        (self.pid, self.start_time, self.status.uids.effective)
    }
}

/// Checks that `caller` may ask process `pid` for its heap: the same rule as a session's
/// ([`may_profile`]); a thread id is refused with its process's.
pub fn check_process(caller: Caller, pid: u32) -> Result<Checked, HeapError> {
    let gone = || HeapError::NotFound(format!("no process {pid}"));
    let status = sys::read_status(pid).map_err(|_| gone())?;
    if let Some(tgid) = status.tgid
        && tgid != pid
    {
        return Err(HeapError::InvalidArgument(format!(
            "{pid} is a thread of process {tgid}: give the process id {tgid}"
        )));
    }
    if !caller.is_root()
        && let Err(why) = may_profile(caller.uid, &status)
    {
        return Err(HeapError::PermissionDenied(format!(
            "pid {pid} ({}) {why}; you are uid {} and may only ask your own processes for \
             their heap (or run vmscope as root)",
            status.name, caller.uid
        )));
    }
    let start_time = sys::read_start_time(pid).ok_or_else(gone)?;
    Ok(Checked {
        pid,
        status,
        start_time,
    })
}

/// What a request waits for: a JVM's attach, or a VM's stream.
enum Source {
    Jvm(hotspot::Target),
    Vm(Checked),
}

fn check_timeout(timeout: Duration) -> Result<(), HeapError> {
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(HeapError::InvalidArgument(format!(
            "a timeout of {timeout:?}: give one above 0 and at most {} s",
            MAX_TIMEOUT.as_secs()
        )));
    }
    Ok(())
}

/// What a structure query asks.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryRequest {
    /// The process.
    pub pid: u32,
    /// The structures.
    pub query: vm::Query,
    /// Count garbage too, with no full collection first.
    pub all: bool,
    /// How long to wait for the answer.
    pub timeout: Duration,
}

/// The daemon's histograms: taken on request, kept by id.
#[derive(Debug)]
pub struct Heaps {
    /// The VMs serving their heap over a stream.
    pub vms: Arc<vm::VmLinks>,
    kept: Mutex<Kept>,
    in_flight: Arc<Shares>,
    next_id: AtomicU64,
    /// What was asked and how it went.
    pub counters: HeapCounters,
}

impl Default for Heaps {
    fn default() -> Self {
        Heaps {
            vms: Arc::default(),
            kept: Mutex::default(),
            in_flight: Shares::new(IN_FLIGHT),
            next_id: AtomicU64::new(1),
            counters: HeapCounters::default(),
        }
    }
}

/// Takes a process out of [`Kept::in_progress`] when its histogram is done, however it ends.
struct InProgress<'a> {
    heaps: &'a Heaps,
    pid: u32,
}

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        self.heaps.lock().in_progress.remove(&self.pid);
    }
}

impl Heaps {
    /// A new, empty store.
    pub fn new() -> Arc<Heaps> {
        Arc::new(Heaps::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a histogram of `request.pid` for `caller`, and keeps it. Blocks for up to the
    /// request's timeout: call it on a blocking thread.
    pub fn take(
        &self,
        caller: Caller,
        request: HistogramRequest,
    ) -> Result<Arc<HeapHistogram>, HeapError> {
        let refused = |e: HeapError| {
            self.counters.refused.fetch_add(1, Relaxed);
            e
        };
        if request.pid == 0 {
            return Err(refused(HeapError::InvalidArgument(
                "pid 0 is no process: give the pid of a JVM".into(),
            )));
        }
        check_timeout(request.timeout).map_err(refused)?;
        let _share = self.in_flight.take(caller.uid).map_err(|refusal| {
            refused(HeapError::Busy(format!(
                "too many heap histograms are being taken ({refusal}): wait for yours to end"
            )))
        })?;
        let pid = request.pid;
        // The caller's rights first: another user's process is none of its business, not even
        // whether a histogram of it is under way.
        let process = check_process(caller, pid).map_err(refused)?;
        let command = process.status.name.clone();
        let (_, start_time, euid) = process.identity();
        let source = if self.vms.serves(pid, start_time, euid) {
            Source::Vm(process)
        } else {
            Source::Jvm(hotspot::check(process).map_err(refused)?)
        };
        let _in_progress = self.in_progress(pid).map_err(refused)?;
        let taken_at = SystemTime::now();
        let answer = match &source {
            Source::Jvm(target) => hotspot::take(target, request),
            Source::Vm(process) => self.vm_histogram(process, request),
        }
        .inspect_err(|e| self.count_failure(e))?;
        let histogram = Arc::new(HeapHistogram {
            id: self.next_id.fetch_add(1, Relaxed),
            pid,
            command,
            taken_at: Some(taken_at),
            elapsed: Some(answer.elapsed),
            pause: answer.pause,
            live: !request.all,
            runtime: answer.runtime,
            classes: answer.classes,
            total_instances: answer.total_instances,
            total_bytes: answer.total_bytes,
        });
        self.counters.taken.fetch_add(1, Relaxed);
        if let Some(pause) = histogram.pause {
            self.counters
                .pause_us
                .fetch_add(pause.as_micros() as u64, Relaxed);
        }
        tracing::info!(
            pid,
            id = histogram.id,
            classes = histogram.classes.len(),
            ms = answer.elapsed.as_millis() as u64,
            "heap histogram taken"
        );
        self.keep(caller.uid, histogram.clone());
        Ok(histogram)
    }

    /// Marks `pid` as being asked, until the guard goes: a second full GC queued behind the
    /// first would double the pause.
    fn in_progress(&self, pid: u32) -> Result<InProgress<'_>, HeapError> {
        if !self.lock().in_progress.insert(pid) {
            return Err(HeapError::Busy(format!(
                "the heap of pid {pid} is being counted: wait for it, its full GC would only \
                 be followed by another"
            )));
        }
        Ok(InProgress { heaps: self, pid })
    }

    fn count_failure(&self, e: &HeapError) {
        let counter = match e {
            HeapError::CannotAnswer(_) => &self.counters.refused,
            _ => &self.counters.failed,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// Asks a VM that serves its heap for its histogram.
    fn vm_histogram(
        &self,
        process: &Checked,
        request: HistogramRequest,
    ) -> Result<hotspot::Answer, HeapError> {
        let answered = self
            .vms
            .histogram(process.identity(), !request.all, request.timeout)?;
        let mut classes = answered.value;
        classes.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
        Ok(hotspot::Answer {
            elapsed: answered.elapsed,
            pause: Some(answered.pause),
            total_instances: classes.iter().map(|c| c.instances).sum(),
            total_bytes: classes.iter().map(|c| c.bytes).sum(),
            classes,
            runtime: answered.vm,
        })
    }

    /// Counts the structures `query` describes in the heap of `request.pid`, a VM that serves
    /// its heap, for `caller`. Blocks for up to the request's timeout.
    pub fn query(
        &self,
        caller: Caller,
        request: QueryRequest,
    ) -> Result<HeapStructures, HeapError> {
        let refused = |e: HeapError| {
            self.counters.refused.fetch_add(1, Relaxed);
            e
        };
        check_timeout(request.timeout).map_err(refused)?;
        let _share = self.in_flight.take(caller.uid).map_err(|refusal| {
            refused(HeapError::Busy(format!(
                "too many heap requests are being answered ({refusal}): wait for yours to end"
            )))
        })?;
        let pid = request.pid;
        let process = check_process(caller, pid).map_err(refused)?;
        let (_, start_time, euid) = process.identity();
        if !self.vms.serves(pid, start_time, euid) {
            return Err(refused(HeapError::CannotAnswer(format!(
                "pid {pid} ({}) does not serve its heap (CodeMap.ServeHeap): structure queries \
                 come from VMs that do; HotSpot JVMs answer histograms only",
                process.status.name
            ))));
        }
        let _in_progress = self.in_progress(pid).map_err(refused)?;
        let taken_at = SystemTime::now();
        let answered = self
            .vms
            .structures(
                process.identity(),
                request.query,
                !request.all,
                request.timeout,
            )
            .inspect_err(|e| self.count_failure(e))?;
        let pause = answered.pause;
        self.counters.queries.fetch_add(1, Relaxed);
        self.counters
            .pause_us
            .fetch_add(pause.as_micros() as u64, Relaxed);
        Ok(HeapStructures {
            pid,
            command: process.status.name,
            taken_at: Some(taken_at),
            elapsed: Some(answered.elapsed),
            pause: Some(pause),
            live: !request.all,
            runtime: answered.vm,
            structures: answered.value,
        })
    }

    /// Keeps `histogram` for `owner`. Past the owner's share ([`KEPT_PER_USER`] histograms,
    /// [`KEPT_BYTES_PER_USER`]) its oldest go; past the daemon's ([`KEPT_TOTAL`],
    /// [`KEPT_BYTES_TOTAL`]), the oldest of whoever holds the most, so that no user can push
    /// out another's while holding less.
    fn keep(&self, owner_uid: u32, histogram: Arc<HeapHistogram>) {
        let mut kept = self.lock();
        let bytes = footprint(&histogram);
        kept.histograms.push_back(KeptHistogram {
            owner_uid,
            bytes,
            histogram,
        });
        while let Some(uid) = kept.over_share(owner_uid) {
            kept.drop_oldest_of(uid);
        }
    }

    /// The histogram `id`, if `caller` may see it (its own; any for root).
    pub fn get(&self, caller: Caller, id: u64) -> Result<Arc<HeapHistogram>, HeapError> {
        let kept = self.lock();
        // Another user's histogram is as if absent, with the same message: which ids exist
        // is none of the caller's business.
        kept.histograms
            .iter()
            .find(|h| h.histogram.id == id && (caller.is_root() || h.owner_uid == caller.uid))
            .map(|h| h.histogram.clone())
            .ok_or_else(|| {
                HeapError::NotFound(format!(
                    "no heap histogram {id} of yours: the daemon keeps each user's newest \
                     {KEPT_PER_USER}"
                ))
            })
    }

    /// Histograms kept now.
    pub fn kept(&self) -> usize {
        self.lock().histograms.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(uid: u32) -> Caller {
        Caller { uid, pid: None }
    }

    fn keep(heaps: &Heaps, id: u64, owner_uid: u32) {
        let histogram = HeapHistogram {
            id,
            ..HeapHistogram::default()
        };
        heaps.keep(owner_uid, Arc::new(histogram));
    }

    #[test]
    fn a_user_sees_its_own_histograms_and_root_sees_all() {
        let heaps = Heaps::default();
        keep(&heaps, 1, 1000);
        let (user, other, root) = (caller(1000), caller(1001), caller(0));
        assert_eq!(heaps.get(user, 1).unwrap().id, 1);
        assert_eq!(heaps.get(root, 1).unwrap().id, 1);
        let err = heaps.get(other, 1).unwrap_err();
        assert!(matches!(err, HeapError::NotFound(_)), "{err}");
        assert!(matches!(heaps.get(user, 2), Err(HeapError::NotFound(_))));
    }

    #[test]
    fn each_user_keeps_its_newest_and_cannot_push_out_anothers() {
        let heaps = Heaps::default();
        keep(&heaps, 1, 1001);
        for id in 2..=(KEPT_PER_USER as u64 + 11) {
            keep(&heaps, id, 1000);
        }
        let user = caller(1000);
        assert!(heaps.get(user, 2).is_err(), "the oldest went");
        assert!(heaps.get(user, 11).is_err());
        assert!(heaps.get(user, 12).is_ok(), "the newest 64 stay: 12 to 75");
        assert!(heaps.get(caller(1001), 1).is_ok());
        assert_eq!(heaps.kept(), KEPT_PER_USER + 1);
    }

    #[test]
    fn a_users_bytes_are_bounded_and_its_oldest_go_first() {
        let heaps = Heaps::default();
        let big = |id, owner| {
            let class = vmscope_model::heap::ClassCount {
                name: "x".repeat(1 << 20),
                ..Default::default()
            };
            let histogram = HeapHistogram {
                id,
                classes: vec![class; 8],
                ..HeapHistogram::default()
            };
            heaps.keep(owner, Arc::new(histogram));
        };
        keep(&heaps, 1, 1001);
        // 8 MiB each: the user's 64 MiB hold 7 of them, and the oldest go first.
        for id in 2..=12 {
            big(id, 1000);
        }
        let user = caller(1000);
        assert!(heaps.get(user, 5).is_err(), "the oldest went");
        assert!(heaps.get(user, 6).is_ok() && heaps.get(user, 12).is_ok());
        assert!(heaps.get(caller(1001), 1).is_ok(), "another user's stays");
    }

    #[test]
    fn bad_requests_are_refused_and_counted() {
        let heaps = Heaps::default();
        let root = caller(0);
        let ask = |pid, timeout| HistogramRequest {
            pid,
            all: false,
            timeout,
        };
        for request in [
            ask(0, DEFAULT_TIMEOUT),
            ask(1, Duration::ZERO),
            ask(1, MAX_TIMEOUT + Duration::from_secs(1)),
        ] {
            let err = heaps.take(root, request).unwrap_err();
            assert!(matches!(err, HeapError::InvalidArgument(_)), "{err}");
        }
        assert_eq!(heaps.counters.refused.load(Relaxed), 3);
    }
}
