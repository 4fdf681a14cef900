//! Reads of code map files, away from the session manager's thread.
//!
//! A read is bounded in bytes ([`super::budget`]) but not in time: a user's file on FUSE or
//! NFS, in its own mount namespace, can take as long as its server likes to open or read.
//! The manager, which stops every user's sessions, must never wait for one. So it checks a
//! process's [`Sources`] out in a [`ReadRequest`], goes on with what the last read said, and
//! takes them back with the [`ReadReply`].
//!
//! Each uid has its own reader thread, up to [`MAX_READER_THREADS`]: a read that hangs holds
//! up only reads of its own user's processes. A thread with nothing to read for
//! [`READER_IDLE_NS`] is let go; one that hangs is kept (it is counted in flight) and never
//! handed another user's reads. The threads intern what they read into the shared code
//! store, under a [`Hold`] that keeps it from the sweeps until the manager has it.

use std::{
    collections::{HashMap, VecDeque},
    fs::File,
    sync::{Arc, mpsc},
};

use tokio::sync::mpsc as tokio_mpsc;

use super::{
    code::{CodeStore, Hold},
    reading::{ReadJob, ReadOutcome, Sources},
};
use crate::{
    sys,
    vocab::{Executable, MappedCodeMapFile},
};

/// Most reader threads at once (root's aside); beyond, other users share the least busy one.
pub const MAX_READER_THREADS: usize = 64;

/// How long a reader thread with nothing to read is kept.
pub const READER_IDLE_NS: u64 = 30_000_000_000;

/// Opens a file a process maps (through /proc/PID/map_files); tests put theirs in.
pub type Opener = Arc<dyn Fn(u32, &MappedCodeMapFile) -> std::io::Result<File> + Send + Sync>;

/// The opener of the daemon: `/proc/PID/map_files`, checked against the mapping.
pub fn open_mapped(pid: u32, file: &MappedCodeMapFile) -> std::io::Result<File> {
    sys::open_mapped_file(pid, file.start, file.end, &file.path, file.id)
}

/// A process's sources, out to be read.
#[derive(Debug)]
pub struct ReadRequest {
    /// Which checkout of the process's sources this is: a reply whose generation is not the
    /// process's any more (it exec'd, or was forgotten) is dropped.
    pub generation: u64,
    /// Whom and when for.
    pub job: ReadJob,
    /// The sources, moved out.
    pub sources: Sources,
    /// Files the process maps that may be new, to open first.
    pub files: Vec<MappedCodeMapFile>,
    /// Its executable ranges, to check entries against.
    pub executable: Executable,
    /// Bytes it may read.
    pub budget: u64,
    /// Keeps the codes it interns until the manager has them.
    pub hold: Hold,
}

/// A read done: the sources coming back, with what they found.
#[derive(Debug)]
pub struct ReadReply {
    /// The request's generation.
    pub generation: u64,
    /// The request's job.
    pub job: ReadJob,
    /// The sources, back.
    pub sources: Sources,
    /// What the read found.
    pub outcome: ReadOutcome,
    /// Bytes of the budget left.
    pub budget_left: u64,
    /// Dropped once the changes are in their timeline.
    pub hold: Hold,
    /// The thread it was read on.
    reader: u32,
}

/// Serves one request: opens the new files, then reads every source.
fn serve(request: ReadRequest, store: &CodeStore, open: &Opener, reader: u32) -> ReadReply {
    let ReadRequest {
        generation,
        job,
        mut sources,
        files,
        mut executable,
        mut budget,
        hold,
    } = request;
    let mut outcome = ReadOutcome::default();
    sources.open_files(&job, &files, &|f| open(job.pid, f), &mut outcome);
    sources.read(&job, store, &mut executable, &mut budget, &mut outcome);
    ReadReply {
        generation,
        job,
        sources,
        outcome,
        budget_left: budget,
        hold,
        reader,
    }
}

struct ReaderThread {
    requests: mpsc::Sender<ReadRequest>,
    in_flight: usize,
    last_used_ns: u64,
}

enum Mode {
    /// Reads run at once on the caller's thread (unit tests of the registry).
    Inline(VecDeque<ReadReply>),
    /// One thread per uid; replies come back on the channel.
    Threads {
        replies: tokio_mpsc::UnboundedSender<ReadReply>,
        threads: HashMap<u32, ReaderThread>,
    },
}

/// Counters of the readers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderCounters {
    /// Reads sent out.
    pub reads: u64,
    /// Reader threads started.
    pub threads_started: u64,
    /// Reads served on the manager's thread because no reader thread could take them.
    pub served_inline: u64,
}

/// Where reads go.
pub struct Readers {
    store: Arc<CodeStore>,
    open: Opener,
    mode: Mode,
    counters: ReaderCounters,
}

impl std::fmt::Debug for Readers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readers")
            .field("threads", &self.threads())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Readers {
    /// Reads served at once, on the caller's thread, through `open`.
    pub fn inline(store: Arc<CodeStore>, open: Opener) -> Readers {
        Readers {
            store,
            open,
            mode: Mode::Inline(VecDeque::new()),
            counters: ReaderCounters::default(),
        }
    }

    /// Reads served by reader threads, through `open`; replies are sent to `replies`.
    pub fn threaded(
        store: Arc<CodeStore>,
        open: Opener,
        replies: tokio_mpsc::UnboundedSender<ReadReply>,
    ) -> Readers {
        Readers {
            store,
            open,
            mode: Mode::Threads {
                replies,
                threads: HashMap::new(),
            },
            counters: ReaderCounters::default(),
        }
    }

    /// The store codes are interned into.
    pub fn store(&self) -> &Arc<CodeStore> {
        &self.store
    }

    /// Counters so far.
    pub fn counters(&self) -> ReaderCounters {
        self.counters
    }

    /// Reader threads alive.
    pub fn threads(&self) -> usize {
        match &self.mode {
            Mode::Inline(_) => 0,
            Mode::Threads { threads, .. } => threads.len(),
        }
    }

    /// Sends `request` to be read on `uid`'s reader.
    pub fn send(&mut self, uid: u32, request: ReadRequest, now_ns: u64) {
        self.counters.reads += 1;
        let Mode::Threads { replies, threads } = &mut self.mode else {
            let reply = serve(request, &self.store, &self.open, uid);
            if let Mode::Inline(done) = &mut self.mode {
                done.push_back(reply);
            }
            return;
        };
        // Root always has a thread of its own, beyond the cap if need be; other users share
        // the least busy one once the cap is reached.
        let own = uid == 0 || threads.contains_key(&uid) || threads.len() < MAX_READER_THREADS;
        let key = if own {
            uid
        } else {
            threads
                .iter()
                .filter(|&(&k, _)| k != 0)
                .min_by_key(|(_, t)| t.in_flight)
                .map_or(uid, |(&k, _)| k)
        };
        let request = match threads.get_mut(&key) {
            Some(thread) => match thread.requests.send(request) {
                Ok(()) => {
                    thread.in_flight += 1;
                    thread.last_used_ns = now_ns;
                    return;
                }
                // Its thread is gone (it cannot be: it only ends when this side lets go).
                Err(mpsc::SendError(request)) => {
                    threads.remove(&key);
                    request
                }
            },
            None => request,
        };
        match spawn_reader(key, self.store.clone(), self.open.clone(), replies.clone()) {
            Ok(requests) => {
                self.counters.threads_started += 1;
                let request = match requests.send(request) {
                    Ok(()) => None,
                    Err(mpsc::SendError(request)) => Some(request),
                };
                if let Some(request) = request {
                    self.serve_here(request, key);
                } else {
                    threads.insert(
                        key,
                        ReaderThread {
                            requests,
                            in_flight: 1,
                            last_used_ns: now_ns,
                        },
                    );
                }
            }
            Err(e) => {
                tracing::warn!(
                    "cannot start a code map reader thread ({e}): reading on the manager's thread"
                );
                self.serve_here(request, key);
            }
        }
    }

    /// Serves a request on this thread, its reply sent as a thread's would be.
    fn serve_here(&mut self, request: ReadRequest, key: u32) {
        self.counters.served_inline += 1;
        let reply = serve(request, &self.store, &self.open, key);
        match &mut self.mode {
            Mode::Inline(done) => done.push_back(reply),
            Mode::Threads { replies, threads } => {
                // Counted in flight until it is taken back, like any reply.
                if let Some(thread) = threads.get_mut(&key) {
                    thread.in_flight += 1;
                }
                let _ = replies.send(reply);
            }
        }
    }

    /// The next reply served inline, if any.
    pub fn take_inline(&mut self) -> Option<ReadReply> {
        match &mut self.mode {
            Mode::Inline(done) => done.pop_front(),
            Mode::Threads { .. } => None,
        }
    }

    /// A reply was taken back: its thread has one read fewer in flight.
    pub fn returned(&mut self, reply: &ReadReply) {
        if let Mode::Threads { threads, .. } = &mut self.mode
            && let Some(thread) = threads.get_mut(&reply.reader)
        {
            thread.in_flight = thread.in_flight.saturating_sub(1);
        }
    }

    /// Lets go of the threads that had nothing to read for [`READER_IDLE_NS`].
    pub fn retire_idle(&mut self, now_ns: u64) {
        if let Mode::Threads { threads, .. } = &mut self.mode {
            threads.retain(|_, t| {
                t.in_flight > 0 || now_ns.saturating_sub(t.last_used_ns) < READER_IDLE_NS
            });
        }
    }
}

/// Starts `uid`'s reader thread, which serves requests until the sender is dropped.
fn spawn_reader(
    uid: u32,
    store: Arc<CodeStore>,
    open: Opener,
    replies: tokio_mpsc::UnboundedSender<ReadReply>,
) -> std::io::Result<mpsc::Sender<ReadRequest>> {
    let (tx, requests) = mpsc::channel::<ReadRequest>();
    std::thread::Builder::new()
        .name(format!("vmscope-read-{uid}"))
        .spawn(move || {
            for request in requests {
                let (job, generation) = (request.job, request.generation);
                let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    serve(request, &store, &open, uid)
                }))
                .unwrap_or_else(|_| {
                    tracing::error!(pid = job.pid, "reading code map files panicked");
                    // The sources went with the panic: the process's are looked for afresh.
                    let outcome = ReadOutcome {
                        failures: 1,
                        panicked: true,
                        ..ReadOutcome::default()
                    };
                    ReadReply {
                        generation,
                        job,
                        sources: Sources::default(),
                        outcome,
                        budget_left: 0,
                        hold: store.hold(u32::MAX),
                        reader: uid,
                    }
                });
                if replies.send(reply).is_err() {
                    // The manager is gone: the daemon is exiting.
                    break;
                }
            }
        })?;
    Ok(tx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(store: &Arc<CodeStore>, uid: u32) -> ReadRequest {
        ReadRequest {
            generation: 1,
            job: ReadJob {
                pid: u32::MAX,
                nspid: u32::MAX,
                uid: None,
                now_ns: 1,
                exited: false,
            },
            sources: Sources::default(),
            files: Vec::new(),
            executable: Executable::anywhere(),
            budget: 0,
            hold: store.hold(uid),
        }
    }

    #[test]
    fn users_beyond_the_cap_share_threads_and_root_keeps_its_own() {
        let store = Arc::new(CodeStore::new());
        let (tx, mut replies) = tokio_mpsc::unbounded_channel();
        let open: Opener = Arc::new(|_, _| Err(std::io::Error::other("no files here")));
        let mut readers = Readers::threaded(store.clone(), open, tx);
        let users = 1000..1000 + MAX_READER_THREADS as u32;
        for uid in users.clone() {
            readers.send(uid, request(&store, uid), 1);
        }
        assert_eq!(readers.threads(), MAX_READER_THREADS);
        readers.send(5000, request(&store, 5000), 1);
        assert_eq!(readers.threads(), MAX_READER_THREADS, "shared");
        readers.send(0, request(&store, 0), 1);
        assert_eq!(readers.threads(), MAX_READER_THREADS + 1, "root's own");
        for _ in 0..MAX_READER_THREADS + 2 {
            let reply = replies.blocking_recv().expect("every read comes back");
            readers.returned(&reply);
        }
        // Idle long enough, every thread is let go.
        readers.retire_idle(1 + READER_IDLE_NS);
        assert_eq!(readers.threads(), 0);
        assert_eq!(
            readers.counters().threads_started,
            MAX_READER_THREADS as u64 + 1
        );
    }
}
