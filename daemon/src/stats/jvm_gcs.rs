//! The collections of the JVMs off-CPU sessions watch, read from their performance data files
//! every [`READ_EVERY`] on a thread of their own (the manager's tick is ten times slower, and a
//! collection of a few milliseconds falls between two of its ticks): what tells a mutator
//! waiting for the collector from one waiting for a lock. See [`super::hotspot_gc`] for what
//! a read gives.
//!
//! The thread runs only while some JVM is watched. The manager asks, per block, whether its
//! process is a JVM being read ([`JvmGcs::reads`]), and later how much of the block fell
//! inside its collections ([`JvmGcs::overlaps`]), once the reads have passed its end.

use std::{
    collections::HashMap,
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread::JoinHandle,
    time::Duration,
};

use vmscope_model::IntervalKind;

use super::{
    hotspot::{HotspotError, PerfDataFile},
    hotspot_gc::{GcReading, GcTimeline},
};
use crate::sys;

/// How often each watched JVM's file is read: a read and parse costs some 17 µs
/// (`cargo bench --bench hsperfdata`), 0.2% of a core per JVM; HotSpot's young collections
/// of a small heap last a few milliseconds and come some 60 ms apart.
pub const READ_EVERY: Duration = Duration::from_millis(10);

/// How long a watched process that maps no performance data file is looked at again (a JVM
/// still starting maps it in its first second), at 0.1 s, then twice as long each time up to
/// 1.6 s apart: each look parses its `/proc/PID/maps`.
const LOOK_FOR_NS: u64 = 30_000_000_000;
const FIRST_LOOK_EVERY_NS: u64 = 100_000_000;
const MAX_LOOK_EVERY_NS: u64 = 1_600_000_000;

/// Most processes watched at once: beyond, a process's collections are not read (counted).
pub const MAX_WATCHED: usize = 1024;

/// What is known of a block's time inside its JVM's collections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcOverlap {
    /// Its process is no JVM being read.
    NotRead,
    /// The reads have not passed its end yet.
    Pending,
    /// Its time inside each kind of collection (none for a block outside them all).
    Known(Vec<(IntervalKind, u64)>),
}

/// The JVMs watched and their collections so far, shared with the reading thread.
#[derive(Debug, Default)]
struct Watched {
    jvms: HashMap<u32, Jvm>,
    stop: bool,
    /// Reads that failed (the file went unreadable or malformed), reads made.
    failed: u64,
    reads: u64,
    /// Processes not watched for want of room ([`MAX_WATCHED`]).
    refused: u64,
}

#[derive(Debug)]
struct Jvm {
    /// Sessions watching it.
    watchers: u32,
    file: Option<Arc<PerfDataFile>>,
    timeline: GcTimeline,
    /// When it was first watched, when to look for its file next, the wait after that
    /// (CLOCK_MONOTONIC ns); looks stop once the file is found or after [`LOOK_FOR_NS`].
    since_ns: u64,
    next_look_ns: u64,
    look_every_ns: u64,
    /// Its file could not be read: it is read no more.
    failed: bool,
}

impl Jvm {
    fn looks(&self, now_ns: u64) -> bool {
        self.file.is_none()
            && !self.failed
            && now_ns >= self.next_look_ns
            && now_ns.saturating_sub(self.since_ns) < LOOK_FOR_NS
    }
}

#[derive(Debug, Default)]
struct Shared {
    watched: Mutex<Watched>,
    wake: Condvar,
}

/// The JVMs' collections through time, for the off-CPU sessions that watch them.
#[derive(Debug, Default)]
pub struct JvmGcs {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl JvmGcs {
    /// Starts reading `pid`'s collections for one more session (its file looked for at once,
    /// and again while it has none).
    pub fn watch(&mut self, pid: u32) {
        let mut watched = self.lock();
        let room = watched.jvms.len() < MAX_WATCHED;
        match watched.jvms.get_mut(&pid) {
            Some(jvm) => jvm.watchers += 1,
            None if room => {
                let now = sys::monotonic_ns();
                watched.jvms.insert(
                    pid,
                    Jvm {
                        watchers: 1,
                        file: None,
                        timeline: GcTimeline::default(),
                        since_ns: now,
                        next_look_ns: now,
                        look_every_ns: FIRST_LOOK_EVERY_NS,
                        failed: false,
                    },
                );
            }
            None => watched.refused += 1,
        }
        drop(watched);
        self.shared.wake.notify_one();
        if self.thread.is_none() {
            let shared = self.shared.clone();
            match std::thread::Builder::new()
                .name("vmscoped-jvm-gcs".into())
                .spawn(move || read_loop(&shared))
            {
                Ok(thread) => self.thread = Some(thread),
                Err(e) => tracing::warn!("no thread to read the JVMs' collections: {e}"),
            }
        }
    }

    /// One session less watches `pid`: the last one's going forgets it.
    pub fn unwatch(&mut self, pid: u32) {
        let mut watched = self.lock();
        if let Some(jvm) = watched.jvms.get_mut(&pid) {
            jvm.watchers = jvm.watchers.saturating_sub(1);
            if jvm.watchers == 0 {
                if jvm.file.is_some() {
                    // How many fell between two reads, seen neither whole nor under way.
                    tracing::debug!(
                        pid,
                        seen = jvm.timeline.seen(),
                        begun = jvm.timeline.invocations(),
                        "JVM collections no longer read"
                    );
                }
                watched.jvms.remove(&pid);
            }
        }
    }

    /// Whether `pid` is a JVM whose collections are read: its blocks wait for
    /// [`JvmGcs::overlaps`].
    pub fn reads(&self, pid: u32) -> bool {
        self.lock()
            .jvms
            .get(&pid)
            .is_some_and(|jvm| jvm.file.is_some() && !jvm.failed)
    }

    /// How much of `[begin, end)` (CLOCK_MONOTONIC ns) fell inside `pid`'s collections; with
    /// `so_far`, by the reads made so far even if they have not passed `end` (a session's last
    /// word).
    pub fn overlaps(&self, pid: u32, begin: u64, end: u64, so_far: bool) -> GcOverlap {
        let watched = self.lock();
        let Some(jvm) = watched.jvms.get(&pid).filter(|j| j.file.is_some()) else {
            return GcOverlap::NotRead;
        };
        let known = if so_far || jvm.failed {
            jvm.timeline.overlaps_so_far(begin, end)
        } else {
            jvm.timeline.overlaps(begin, end)
        };
        match known {
            Some(overlaps) => GcOverlap::Known(overlaps),
            None if so_far || jvm.failed => GcOverlap::Known(Vec::new()),
            None => GcOverlap::Pending,
        }
    }

    /// CLOCK_MONOTONIC ns up to which `pid`'s collections are known, if they are read.
    pub fn known_until(&self, pid: u32) -> Option<u64> {
        let watched = self.lock();
        let jvm = watched.jvms.get(&pid)?;
        jvm.file.as_ref()?;
        jvm.timeline.known_until()
    }

    /// Reads made and failed, processes refused for want of room, since the daemon started.
    pub fn counts(&self) -> (u64, u64, u64) {
        let watched = self.lock();
        (watched.reads, watched.failed, watched.refused)
    }

    fn lock(&self) -> MutexGuard<'_, Watched> {
        // The reading thread holds the lock for no panicking work: a poisoned lock still holds
        // consistent timelines.
        self.shared
            .watched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for JvmGcs {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The reading thread: every [`READ_EVERY`], each watched JVM's file is read outside the lock
/// (the manager asks while it reads), then its timeline takes the reading.
fn read_loop(shared: &Shared) {
    let mut watched = shared
        .watched
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    loop {
        if watched.stop {
            return;
        }
        if watched.jvms.is_empty() {
            watched = shared
                .wake
                .wait(watched)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            continue;
        }
        let now = sys::monotonic_ns();
        let files: Vec<(u32, Arc<PerfDataFile>)> = watched
            .jvms
            .iter()
            .filter(|(_, jvm)| !jvm.failed)
            .filter_map(|(&pid, jvm)| Some((pid, jvm.file.clone()?)))
            .collect();
        let look: Vec<u32> = watched
            .jvms
            .iter()
            .filter(|(_, jvm)| jvm.looks(now))
            .map(|(&pid, _)| pid)
            .collect();
        drop(watched);

        let found: Vec<(u32, Result<Option<PerfDataFile>, HotspotError>)> = look
            .into_iter()
            .map(|pid| (pid, PerfDataFile::find(pid)))
            .collect();
        let readings: Vec<(u32, Result<Option<GcReading>, HotspotError>)> = files
            .into_iter()
            .map(|(pid, file)| {
                let started_ns = sys::monotonic_ns();
                let data = file.read();
                let finished_ns = sys::monotonic_ns();
                let reading = data.map(|data| GcReading::from_data(&data, started_ns, finished_ns));
                (pid, reading)
            })
            .collect();

        watched = shared
            .watched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (pid, found) in found {
            let Some(jvm) = watched.jvms.get_mut(&pid) else {
                continue;
            };
            match found {
                Ok(Some(file)) => {
                    tracing::debug!(pid, path = file.path, "reading the JVM's collections");
                    jvm.file = Some(Arc::new(file));
                }
                Ok(None) => {
                    jvm.next_look_ns = now + jvm.look_every_ns;
                    jvm.look_every_ns = (jvm.look_every_ns * 2).min(MAX_LOOK_EVERY_NS);
                }
                // Gone, or a file not its own: not looked at again.
                Err(e) => {
                    tracing::debug!(pid, "JVM collections not read: {e}");
                    jvm.failed = true;
                }
            }
        }
        for (pid, reading) in readings {
            watched.reads += 1;
            let Some(jvm) = watched.jvms.get_mut(&pid) else {
                continue;
            };
            match reading {
                Ok(Some(reading)) => jvm.timeline.take(reading),
                // A JVM with no collector counters yet (still starting): read again.
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(pid, "JVM collections no longer read: {e}");
                    jvm.failed = true;
                    watched.failed += 1;
                }
            }
        }
        // A watch or the stop wakes it early.
        let (guard, _) = shared
            .wake
            .wait_timeout(watched, READ_EVERY)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        watched = guard;
    }
}
