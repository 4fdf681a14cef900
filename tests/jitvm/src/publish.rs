//! Publication of the code map: to the daemon over gRPC, to a `vmscope-<pid>.codemap` file,
//! and to the VM's own code log.
//!
//! Every event gets its CLOCK_MONOTONIC timestamp and goes to every sink under one lock, so
//! that no sink ever sees a timestamp earlier than one it already has. The gRPC sink is a
//! channel drained by a background thread with its own current-thread tokio runtime: the VM
//! thread never waits for the network, but once, as it starts, for its Hello to be sent (at
//! most [`HELLO_WAIT`]). That thread also sends a `Sync` every 20 ms, taking its
//! timestamp and enqueuing it under the same lock. Files get each record with one `write()`,
//! so that a reader of a growing file sees at most its last record torn; the code map file
//! also gets a `Sync` every 20 ms from a thread of its own, so that the daemon knows it is
//! up to date. `file-at-exit` keeps the code map file's records in memory until the VM
//! finishes, as V8 buffers its jitdump: the daemon then learns the map only at exit.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::{Channel, Endpoint, Uri};
use vmscope_proto::v1::code_map_client::CodeMapClient;
use vmscope_proto::v1::code_map_event::Event;
use vmscope_proto::v1::{CodeMapEvent, HeapAnswer, HeapReady, HeapRequest, Hello, Sync};

use crate::codemap_file;

/// Name and version the VM gives in its Hello.
pub const VM_NAME: &str = "jitvm 0.1";
/// Period of `Sync` events on the gRPC stream.
pub const SYNC_PERIOD: Duration = Duration::from_millis(20);
/// Longest the VM waits, as it starts, for its Hello to be sent to the daemon.
pub const HELLO_WAIT: Duration = Duration::from_secs(2);

/// Where the code map goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `vmscope.v1.CodeMap/Publish` on the daemon's socket.
    Grpc,
    /// A `vmscope-<pid>.codemap` file, mapped executable so that the daemon finds it.
    File,
    /// The same file, its records (after the header) held in memory until the VM finishes.
    FileAtExit,
    /// Nowhere (the code log may still be written).
    None,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "grpc" => Ok(Mode::Grpc),
            "file" => Ok(Mode::File),
            "file-at-exit" => Ok(Mode::FileAtExit),
            "none" => Ok(Mode::None),
            _ => Err(format!(
                "unknown publication {s:?} (grpc, file, file-at-exit or none)"
            )),
        }
    }
}

/// Publication settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where to publish.
    pub mode: Mode,
    /// Directory of the code map file (default: the temporary directory).
    pub codemap_dir: Option<PathBuf>,
    /// The VM's own log of every event, in the code map file format.
    pub code_log: Option<PathBuf>,
    /// The daemon's socket (default: `VMSCOPE_SOCKET`, else `/run/vmscope/vmscoped.sock`).
    pub socket: Option<PathBuf>,
    /// Also serve the heap to the daemon (`CodeMap.ServeHeap`), with the gRPC publication.
    pub serve_heap: bool,
}

/// The VM thread's end of `CodeMap.ServeHeap`: the daemon's requests, and where answers go.
#[derive(Debug)]
pub struct HeapService {
    /// Requests, read at safepoints.
    pub requests: mpsc::Receiver<HeapRequest>,
    /// Answers, sent on the stream by the publisher's thread.
    pub answers: UnboundedSender<HeapAnswer>,
}

impl Config {
    /// No publication, no log.
    pub fn none() -> Config {
        Config {
            mode: Mode::None,
            codemap_dir: None,
            code_log: None,
            socket: None,
            serve_heap: false,
        }
    }
}

/// CLOCK_MONOTONIC now, in ns: the clock of jitdump and of the daemon's samples.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is; CLOCK_MONOTONIC always exists.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// A file of records: the code map file or the code log.
#[derive(Debug)]
struct RecordFile {
    file: File,
    path: PathBuf,
    failed: bool,
    /// Takes the periodic `Sync`s (the code map file, not the code log).
    syncs: bool,
    /// Records held until [`RecordFile::flush_held`] (`file-at-exit`).
    held: Option<Vec<u8>>,
}

impl RecordFile {
    /// Creates (truncates) `path` and writes the header; with `map_exec`, maps its first page
    /// with PROT_READ|PROT_EXEC for the life of the process, so that it shows in
    /// /proc/PID/maps (as jitdump files do).
    fn create(path: &Path, map_exec: bool) -> io::Result<RecordFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(path)?;
        let mut f = RecordFile {
            file,
            path: path.to_owned(),
            failed: false,
            syncs: false,
            held: None,
        };
        f.write_record(&codemap_file::header())?;
        if map_exec {
            // SAFETY: maps one page of our own file, read-only and private; the mapping is
            // never dereferenced and deliberately never unmapped (it must stay in
            // /proc/PID/maps until the process exits).
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ | libc::PROT_EXEC,
                    libc::MAP_PRIVATE,
                    f.file.as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(f)
    }

    /// One record with one write() (a regular file takes it whole; a short write is finished
    /// with more writes rather than lost).
    fn write_record(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)
    }

    fn append(&mut self, event: &CodeMapEvent) {
        if self.failed {
            return;
        }
        let record = codemap_file::encode_event(event);
        if let Some(held) = &mut self.held {
            held.extend_from_slice(&record);
            return;
        }
        if let Err(e) = self.write_record(&record) {
            eprintln!(
                "jitvm: cannot write {}: {e}; giving up on it",
                self.path.display()
            );
            self.failed = true;
        }
    }

    /// Writes the records held until now, at once.
    fn flush_held(&mut self) {
        if let Some(held) = self.held.take()
            && let Err(e) = self.write_record(&held)
        {
            eprintln!("jitvm: cannot write {}: {e}", self.path.display());
        }
        let _ = self.file.flush();
    }
}

#[derive(Debug)]
struct Shared {
    last_ts: u64,
    stream: Option<UnboundedSender<CodeMapEvent>>,
    files: Vec<RecordFile>,
    events: u64,
    /// Set at the end: the file `Sync` thread stops.
    finished: bool,
}

impl Shared {
    /// Timestamps and sends one event everywhere; the caller holds the lock.
    fn send(&mut self, event: Event, to_files: bool) -> u64 {
        let ts = monotonic_ns().max(self.last_ts);
        self.last_ts = ts;
        let ev = CodeMapEvent {
            timestamp_ns: ts,
            event: Some(event),
        };
        if to_files {
            for f in &mut self.files {
                f.append(&ev);
            }
        }
        self.events += 1;
        self.stream_send(ev);
        ts
    }

    /// A `Sync` to the files that take them.
    fn sync_files(&mut self) {
        let ts = monotonic_ns().max(self.last_ts);
        self.last_ts = ts;
        let ev = CodeMapEvent {
            timestamp_ns: ts,
            event: Some(Event::Sync(Sync {})),
        };
        for f in self.files.iter_mut().filter(|f| f.syncs) {
            f.append(&ev);
        }
    }

    fn stream_send(&mut self, ev: CodeMapEvent) {
        if let Some(tx) = &self.stream
            && tx.send(ev).is_err()
        {
            self.stream = None;
        }
    }
}

#[derive(Debug)]
struct GrpcThread {
    handle: JoinHandle<()>,
    done: mpsc::Receiver<()>,
}

/// The publisher: one per VM.
#[derive(Debug)]
pub struct Publisher {
    shared: Arc<Mutex<Shared>>,
    grpc: Option<GrpcThread>,
    codemap_path: Option<PathBuf>,
    heap: Option<HeapService>,
}

impl Publisher {
    /// Opens the sinks `config` asks for and publishes the Hello.
    pub fn new(config: &Config) -> anyhow::Result<Publisher> {
        let pid = std::process::id();
        let mut files = Vec::new();
        let mut codemap_path = None;
        let to_file = matches!(config.mode, Mode::File | Mode::FileAtExit);
        if to_file {
            let dir = config
                .codemap_dir
                .clone()
                .unwrap_or_else(std::env::temp_dir);
            let path = dir.join(format!("vmscope-{pid}.codemap"));
            let mut file = RecordFile::create(&path, true)
                .with_context(|| format!("code map file {}", path.display()))?;
            file.syncs = true;
            if config.mode == Mode::FileAtExit {
                file.held = Some(Vec::new());
            }
            files.push(file);
            codemap_path = Some(path);
        }
        if let Some(log) = &config.code_log {
            files.push(
                RecordFile::create(log, false)
                    .with_context(|| format!("code log {}", log.display()))?,
            );
        }
        let shared = Arc::new(Mutex::new(Shared {
            last_ts: 0,
            stream: None,
            files,
            events: 0,
            finished: false,
        }));
        let mut grpc = None;
        let mut rx = None;
        if config.mode == Mode::Grpc {
            let (tx, receiver) = unbounded_channel();
            lock(&shared).stream = Some(tx);
            rx = Some(receiver);
        }
        // The Hello goes first, before the publisher thread exists: its Sync ticker must not
        // get ahead of it (the daemon refuses a publication that does not start with a Hello).
        lock(&shared).send(
            Event::Hello(Hello {
                pid,
                vm: VM_NAME.into(),
            }),
            true,
        );
        if to_file {
            let sync_shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("codemap-file-sync".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(SYNC_PERIOD);
                        let mut s = lock(&sync_shared);
                        if s.finished {
                            break;
                        }
                        s.sync_files();
                    }
                })
                .context("code map file sync thread")?;
        }
        let mut heap = None;
        let mut heap_thread_end = None;
        if rx.is_some() && config.serve_heap {
            let (requests_tx, requests) = mpsc::channel();
            let (answers, answers_rx) = unbounded_channel();
            // The first message: the daemon registers the stream once it comes.
            let _ = answers.send(HeapAnswer {
                answer: Some(vmscope_proto::v1::heap_answer::Answer::Ready(HeapReady {
                    vm: VM_NAME.into(),
                })),
                ..Default::default()
            });
            heap = Some(HeapService { requests, answers });
            heap_thread_end = Some((requests_tx, answers_rx));
        }
        if let Some(rx) = rx {
            let socket = config.socket.clone().unwrap_or_else(|| {
                std::env::var_os(vmscope_proto::SOCKET_ENV)
                    .map_or_else(|| vmscope_proto::DEFAULT_SOCKET.into(), PathBuf::from)
            });
            let (done_tx, done) = mpsc::channel();
            let (sent_tx, sent) = mpsc::channel();
            let thread_shared = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name("codemap-publisher".into())
                .spawn(move || {
                    grpc_thread(socket, rx, thread_shared, heap_thread_end, sent_tx);
                    let _ = done_tx.send(());
                })
                .context("publisher thread")?;
            // The VM runs once its Hello is on the wire (or the publisher gave up): a sample
            // the daemon takes before it knows of the publication cannot wait for its
            // intervals, and a collection in the VM's first milliseconds would go untagged.
            let _ = sent.recv_timeout(HELLO_WAIT);
            grpc = Some(GrpcThread { handle, done });
        }
        Ok(Publisher {
            shared,
            grpc,
            codemap_path,
            heap,
        })
    }

    /// The VM thread's end of the heap stream, once (`None` unless asked for in grpc mode).
    pub fn take_heap_service(&mut self) -> Option<HeapService> {
        self.heap.take()
    }

    /// Publishes one event now; answers its timestamp.
    pub fn publish(&self, event: Event) -> u64 {
        lock(&self.shared).send(event, true)
    }

    /// Events published so far.
    pub fn events(&self) -> u64 {
        lock(&self.shared).events
    }

    /// The code map file, with `--publish file`.
    pub fn codemap_path(&self) -> Option<&Path> {
        self.codemap_path.as_deref()
    }

    /// Ends the stream with a last Sync and waits (at most 2 s) for the daemon's summary.
    pub fn finish(self) {
        {
            let mut s = lock(&self.shared);
            if s.stream.is_some() {
                s.send(Event::Sync(Sync {}), false);
            }
            s.stream = None;
            s.finished = true;
            if s.files.iter().any(|f| f.held.is_some()) {
                s.sync_files();
            }
            for f in &mut s.files {
                f.flush_held();
            }
        }
        if let Some(t) = self.grpc {
            if t.done.recv_timeout(Duration::from_secs(2)).is_ok() {
                let _ = t.handle.join();
            } else {
                eprintln!(
                    "jitvm: the vmscope daemon did not answer the end of the code map stream"
                );
            }
        }
    }
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic while holding the lock leaves consistent data (each event is sent whole or not).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn connect(socket: PathBuf) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_static("http://vmscoped.invalid")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = socket.clone();
            async move {
                Ok::<_, io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
}

/// The publisher thread's end of the heap stream: where requests go, what answers come.
type HeapEnd = (
    mpsc::Sender<HeapRequest>,
    tokio::sync::mpsc::UnboundedReceiver<HeapAnswer>,
);

/// Keeps `CodeMap.ServeHeap` open: answers go up as the VM thread makes them, requests down
/// to its next safepoint.
async fn serve_heap(
    channel: Channel,
    requests: mpsc::Sender<HeapRequest>,
    answers: tokio::sync::mpsc::UnboundedReceiver<HeapAnswer>,
) {
    let response = CodeMapClient::new(channel)
        .serve_heap(UnboundedReceiverStream::new(answers))
        .await;
    match response {
        Ok(response) => {
            let mut stream = response.into_inner();
            while let Ok(Some(request)) = stream.message().await {
                if requests.send(request).is_err() {
                    break;
                }
            }
        }
        Err(status) => eprintln!(
            "jitvm: the vmscope daemon takes no heap requests from this VM: {:?}: {}",
            status.code(),
            status.message()
        ),
    }
}

/// The publisher thread: connect, stream the channel with a Sync every 20 ms, report.
fn grpc_thread(
    socket: PathBuf,
    rx: tokio::sync::mpsc::UnboundedReceiver<CodeMapEvent>,
    shared: Arc<Mutex<Shared>>,
    heap: Option<HeapEnd>,
    sent: mpsc::Sender<()>,
) {
    let stop = |why: String| {
        eprintln!("jitvm: {why}; running unprofiled");
        lock(&shared).stream = None;
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return stop(format!("no tokio runtime for code map publication: {e}")),
    };
    rt.block_on(async {
        let channel = match connect(socket.clone()).await {
            Ok(c) => c,
            Err(e) => {
                let cause =
                    std::error::Error::source(&e).map_or(String::new(), |s| format!(": {s}"));
                return stop(format!("no vmscope daemon at {}{cause}", socket.display()));
            }
        };
        if let Some((requests, answers)) = heap {
            tokio::spawn(serve_heap(channel.clone(), requests, answers));
        }
        let ticker_shared = Arc::clone(&shared);
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(SYNC_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let mut s = lock(&ticker_shared);
                if s.stream.is_none() {
                    break;
                }
                s.send(Event::Sync(Sync {}), false);
            }
        });
        // Told when the transport takes the first event, the Hello.
        let mut sent = Some(sent);
        let events = UnboundedReceiverStream::new(rx).map(move |event| {
            if let Some(sent) = sent.take() {
                let _ = sent.send(());
            }
            event
        });
        let result = CodeMapClient::new(channel).publish(events).await;
        match result {
            Ok(summary) => {
                let s = summary.into_inner();
                if s.refused > 0 {
                    eprintln!(
                        "jitvm: the vmscope daemon accepted {} code map events and refused {}: {}",
                        s.accepted,
                        s.refused,
                        s.problems.join("; ")
                    );
                }
                lock(&shared).stream = None;
            }
            Err(status) if status.code() == tonic::Code::Unimplemented => stop(format!(
                "the vmscope daemon at {} does not take code maps (UNIMPLEMENTED)",
                socket.display()
            )),
            Err(status) => stop(format!(
                "the vmscope daemon at {} ended code map publication: {:?}: {}",
                socket.display(),
                status.code(),
                status.message()
            )),
        }
        ticker.abort();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codemap_file::decode;
    use vmscope_proto::v1::CodeFree;

    #[test]
    fn file_and_log_get_every_event_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log.codemap");
        let cfg = Config {
            mode: Mode::File,
            codemap_dir: Some(dir.path().to_owned()),
            code_log: Some(log.clone()),
            socket: None,
            serve_heap: false,
        };
        let p = Publisher::new(&cfg).unwrap();
        let path = p.codemap_path().unwrap().to_owned();
        for i in 0..10 {
            p.publish(Event::Free(CodeFree { start: i }));
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(maps.contains(&path.display().to_string()), "mapped: {maps}");
        p.finish();
        for file in [path, log] {
            let (events, torn) = decode(&std::fs::read(&file).unwrap()).unwrap();
            assert_eq!(torn, 0);
            assert_eq!(events.len(), 11);
            assert!(
                matches!(events[0].event, Some(Event::Hello(ref h)) if h.pid == std::process::id())
            );
            assert!(
                events
                    .windows(2)
                    .all(|w| w[0].timestamp_ns <= w[1].timestamp_ns)
            );
        }
    }

    #[test]
    fn no_daemon_means_unprofiled_not_stuck() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            mode: Mode::Grpc,
            codemap_dir: None,
            code_log: None,
            socket: Some(dir.path().join("nobody.sock")),
            serve_heap: false,
        };
        let p = Publisher::new(&cfg).unwrap();
        for i in 0..1000 {
            p.publish(Event::Free(CodeFree { start: i }));
        }
        p.finish();
    }
}
