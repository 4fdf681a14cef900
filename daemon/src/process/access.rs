//! Reads of another process that can wait on its memory lock: on a thread per user, with a
//! deadline.
//!
//! Opening `/proc/PID/map_files/…`, reading `/proc/PID/maps` (always before Linux 6.17, and
//! after it while a mapping changes) and `process_vm_readv` all take the target's mmap lock
//! for reading. Any process can hold its own lock for good: a thread that reads its own
//! memory through `/proc/self/mem` at a page of a file whose reads never answer (a FUSE server
//! of its own) holds it over the fault, and an `mmap` by another thread then queues for the
//! write side, behind which every later reader waits. Made on the manager's thread, such a
//! read stalled every session of every user.
//!
//! Here the reads of each user's processes (by real uid, which no process of a user can give
//! away to another) run on a thread of that user's. The manager waits for an answer at most
//! [`READ_DEADLINE`]; a read that has not answered by then is abandoned (its answer, if it
//! ever comes, is dropped), and while it is stuck the same user's next reads are refused at
//! once: one user's stuck process costs the others one deadline, not one per read.

use std::{
    collections::HashMap,
    panic::AssertUnwindSafe,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use crate::sys;

/// How long the manager waits for a read of a process. Reads that answer take microseconds
/// (a few milliseconds for a JVM's thousands of mappings); this leaves room for a loaded host.
pub const READ_DEADLINE: Duration = Duration::from_millis(200);

/// Most reader threads kept; idle ones go first when more users come.
const MAX_WORKERS: usize = 64;

/// A reader thread unused this long exits.
const IDLE_WORKER: Duration = Duration::from_secs(60);

/// Why a read of a process was not made, or not waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Stalled {
    /// The read did not answer in time; it is abandoned.
    #[error(
        "a read of a process of user {uid} did not answer within {:?}",
        READ_DEADLINE
    )]
    Abandoned {
        /// The process's real uid.
        uid: u32,
    },
    /// A read abandoned before has not answered yet: this one was not made.
    #[error("reads of processes of user {uid} are refused while an earlier one does not answer")]
    Refused {
        /// The process's real uid.
        uid: u32,
    },
    /// No thread could be started for the read.
    #[error("no thread for reads of processes of user {uid}: {MAX_WORKERS} are stuck or busy")]
    NoThread {
        /// The process's real uid.
        uid: u32,
    },
}

/// Counters of [`ProcessAccess`], reported by the daemon.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessCounters {
    /// Reads that did not answer within [`READ_DEADLINE`].
    pub abandoned: u64,
    /// Reads refused at once because an earlier read of the same user's was stuck.
    pub refused: u64,
    /// Reads that found no thread to run on.
    pub no_thread: u64,
    /// Reader threads now.
    pub threads: u64,
    /// Reader threads stuck in a read now.
    pub stuck: u64,
}

type Job = Box<dyn FnOnce() + Send>;

#[derive(Debug)]
struct Worker {
    jobs: mpsc::Sender<Job>,
    /// Set while a job runs; cleared by the thread when it ends.
    busy: Arc<AtomicBool>,
    last_used: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    workers: HashMap<u32, Worker>,
    counters: AccessCounters,
}

/// Runs reads of processes on their users' threads, with [`READ_DEADLINE`] (see the module's
/// doc). Shared by whatever reads processes on the manager's thread.
#[derive(Debug)]
pub struct ProcessAccess {
    inner: Mutex<Inner>,
    deadline: Duration,
}

impl Default for ProcessAccess {
    fn default() -> ProcessAccess {
        ProcessAccess::new(READ_DEADLINE)
    }
}

impl ProcessAccess {
    /// No threads yet; reads wait at most `deadline`.
    pub fn new(deadline: Duration) -> ProcessAccess {
        ProcessAccess {
            inner: Mutex::new(Inner::default()),
            deadline,
        }
    }

    /// Runs `read`, a read of process `pid`, on the thread of the process's user, and waits for
    /// its answer at most the deadline. A process whose user cannot be read (gone) has its
    /// read run on a thread shared by such processes.
    pub fn run<T: Send + 'static>(
        &self,
        pid: u32,
        read: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Stalled> {
        self.run_as(Self::uid_of(pid), read)
    }

    /// The user whose thread reads of `pid` run on: its real uid, or `u32::MAX` (a thread
    /// shared by such processes) when it cannot be read.
    pub fn uid_of(pid: u32) -> u32 {
        sys::read_status(pid).map_or(u32::MAX, |s| s.uids.real)
    }

    /// [`ProcessAccess::run`] for a read of a process of user `uid`.
    pub fn run_as<T: Send + 'static>(
        &self,
        uid: u32,
        read: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Stalled> {
        let (answer, answered) = mpsc::sync_channel(1);
        {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let Some(worker) = inner.worker(uid) else {
                inner.counters.no_thread += 1;
                return Err(Stalled::NoThread { uid });
            };
            if worker.busy.load(Ordering::Acquire) {
                inner.counters.refused += 1;
                return Err(Stalled::Refused { uid });
            }
            worker.last_used = Instant::now();
            worker.busy.store(true, Ordering::Release);
            let busy = worker.busy.clone();
            let job: Job = Box::new(move || {
                let result = std::panic::catch_unwind(AssertUnwindSafe(read));
                // Free before answering: the manager's next read of this user must find the
                // thread free once it has this answer.
                busy.store(false, Ordering::Release);
                if let Ok(value) = result {
                    let _ = answer.send(value);
                }
            });
            if worker.jobs.send(job).is_err() {
                // The thread is gone (it cannot panic: jobs are caught); start afresh next time.
                inner.workers.remove(&uid);
                inner.counters.no_thread += 1;
                return Err(Stalled::NoThread { uid });
            }
        }
        match answered.recv_timeout(self.deadline) {
            Ok(value) => Ok(value),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
                inner.counters.abandoned += 1;
                tracing::warn!(
                    uid,
                    "a read of a process of user {uid} did not answer within {:?}: abandoned; \
                     that user's reads are refused until it answers",
                    self.deadline
                );
                Err(Stalled::Abandoned { uid })
            }
            // The read panicked: what it read is lost, as if the process could not be read.
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(Stalled::Abandoned { uid }),
        }
    }

    /// The counters, with the threads now.
    pub fn counters(&self) -> AccessCounters {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut counters = inner.counters;
        counters.threads = inner.workers.len() as u64;
        counters.stuck = inner
            .workers
            .values()
            .filter(|w| w.busy.load(Ordering::Acquire))
            .count() as u64;
        counters
    }
}

impl Inner {
    /// The thread of `uid`'s reads, started if need be; `None` when none can be.
    fn worker(&mut self, uid: u32) -> Option<&mut Worker> {
        if !self.workers.contains_key(&uid) {
            let now = Instant::now();
            self.workers.retain(|_, w| {
                w.busy.load(Ordering::Acquire) || now.duration_since(w.last_used) < IDLE_WORKER
            });
            if self.workers.len() >= MAX_WORKERS {
                let idlest = self
                    .workers
                    .iter()
                    .filter(|(_, w)| !w.busy.load(Ordering::Acquire))
                    .min_by_key(|(_, w)| w.last_used)
                    .map(|(&uid, _)| uid)?;
                self.workers.remove(&idlest);
            }
            let (jobs, queue) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name(format!("proc-reads-{uid}"))
                .spawn(move || {
                    // Ends when the sender goes (the worker retired).
                    while let Ok(job) = queue.recv() {
                        job();
                    }
                })
                .ok()?;
            self.workers.insert(
                uid,
                Worker {
                    jobs,
                    busy: Arc::new(AtomicBool::new(false)),
                    last_used: now,
                },
            );
        }
        self.workers.get_mut(&uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_come_back_from_the_users_thread() {
        let access = ProcessAccess::new(Duration::from_secs(5));
        let on = access.run_as(1000, || std::thread::current().name().map(str::to_owned));
        assert_eq!(on, Ok(Some("proc-reads-1000".to_owned())));
        assert_eq!(access.counters().threads, 1);
    }

    /// A stuck read costs its user one deadline, then refusals until it answers; another user's
    /// reads go on meanwhile.
    #[test]
    fn a_stuck_read_is_abandoned_and_holds_up_only_its_user() {
        let access = ProcessAccess::new(Duration::from_millis(50));
        let (release, stuck) = mpsc::channel::<()>();
        let began = Instant::now();
        assert_eq!(
            access.run_as(1000, move || stuck.recv().is_ok()),
            Err(Stalled::Abandoned { uid: 1000 })
        );
        assert!(began.elapsed() >= Duration::from_millis(50));
        let began = Instant::now();
        assert_eq!(
            access.run_as(1000, || true),
            Err(Stalled::Refused { uid: 1000 })
        );
        assert!(began.elapsed() < Duration::from_millis(50));
        assert_eq!(access.run_as(0, || 7), Ok(7));
        let counters = access.counters();
        assert_eq!(
            (counters.abandoned, counters.refused, counters.stuck),
            (1, 1, 1)
        );

        // The read answers at last: the user is served again.
        release.send(()).unwrap();
        let began = Instant::now();
        while access.run_as(1000, || 8) != Ok(8) {
            assert!(
                began.elapsed() < Duration::from_secs(5),
                "never served again"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(access.counters().stuck, 0);
    }

    #[test]
    fn a_read_that_panics_leaves_its_thread_serving() {
        let access = ProcessAccess::new(Duration::from_secs(5));
        assert_eq!(
            access.run_as(1000, || -> u32 { panic!("a broken read") }),
            Err(Stalled::Abandoned { uid: 1000 })
        );
        assert_eq!(access.run_as(1000, || 9), Ok(9));
    }
}
