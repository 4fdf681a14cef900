//! Support for vmscope's end-to-end tests: the real `vmscoped` on a private socket, the real
//! `vmscope` CLI, and C fixture programs whose time split is known by construction.
//!
//! These tests load real BPF programs, so they run as root (CI is root). When the daemon cannot
//! start, [`Daemon::start`] panics with the daemon's own explanation: a test never passes by
//! skipping.

use std::{
    io::{BufRead, BufReader},
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};
use vmscope_proto::v1::{Profile, ProfileRow, Section, profiler_client::ProfilerClient};

pub mod fuse;
pub mod java;
pub mod off_cpu;
pub mod otlp;
pub mod srclines;
pub mod stacks;
pub mod tree_text;

/// A client of the daemon.
pub type Client = ProfilerClient<Channel>;

/// Uid of `nobody`, used for the unprivileged-client tests.
pub const NOBODY: u32 = 65534;

/// The workspace's target directory and profile directory of this test binary
/// (`target/debug/deps/test-xxxx` -> `target/debug`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binaries live in target/<profile>/deps")
        .to_path_buf()
}

/// The demo VM's code log (`jitvm --publish file`), replayed: which code was where, when. The
/// ground truth the daemon's attribution is checked against.
pub fn read_code_log(path: &Path) -> jitvm::codelog::History {
    use vmscope_parse::codemap_file;
    let bytes = std::fs::read(path).expect("the VM's code log");
    let mut at = codemap_file::parse_header(&bytes)
        .expect("header")
        .expect("complete header");
    let mut events = Vec::new();
    while let Some((event, used)) = codemap_file::next_event(&bytes[at..]).expect("record") {
        at += used;
        events.push(event);
    }
    jitvm::codelog::replay(&events).expect("a log that follows the protocol")
}

/// Path of a workspace binary (`vmscoped`, `vmscope`, `jitvm`), built on first use with the same cargo
/// and profile as the tests, so that `cargo test` alone is enough.
///
/// Built as `cargo test --workspace` builds them (every member, its tests too): cargo unifies
/// the dependencies' features over the packages and targets it builds, so `-p vmscoped -p
/// vmscope -p jitvm` made a second set of most crates, 110 s of a fresh clone's CI; built so,
/// they are the units the test run has already built.
pub fn binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let dir = profile_dir();
        let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
        let profile = if profile == "debug" { "dev" } else { profile };
        let status = Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "--profile",
                profile,
                "--workspace",
                "--bins",
                "--tests",
            ])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("cargo build of the binaries failed: {status}"))
        }
    });
    if let Err(e) = built {
        panic!("{e}");
    }
    profile_dir().join(name)
}

/// A directory every user can traverse: the unprivileged tests reach sockets and fixtures in
/// it as `nobody`.
pub fn shared_tempdir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("vmscope-test-")
        .tempdir()
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// The compiled fixture programs.
#[derive(Debug)]
pub struct Fixtures {
    _dir: tempfile::TempDir,
    /// `hotspots` built as a position-independent executable.
    pub hotspots_pie: PathBuf,
    /// `hotspots` built at a fixed address (`-no-pie`).
    pub hotspots_nopie: PathBuf,
    /// `libhot.so`, for the dlopen test.
    pub libhot: PathBuf,
    /// `fakejit`: a spin loop in anonymous executable memory with a code map, good or broken.
    pub fakejit: PathBuf,
    /// `lookalikes`: hot functions with long V8 names that look alike when elided.
    pub lookalikes: PathBuf,
    /// `waiter`: prints "ready" and exits when its standard input closes, using no CPU.
    pub waiter: PathBuf,
    /// `events`: known counts for the kernel (`sleeps N THREADS`: N nanosleeps; `touch MIB`:
    /// MIB * 256 fresh pages).
    pub events: PathBuf,
    /// `stubs FILE SECONDS [THREADS [STUBS]]`: random call paths 24 deep through (65,536)
    /// file-backed stubs, so that nearly every sample is a stack never seen before.
    pub stubs: PathBuf,
    /// `threads SECONDS`: threads `spin-two` and `spin-one` take turns burning 8 ms in
    /// `hot_two` and 4 ms in `hot_one` of their own CPU time: 2/3 and 1/3 of the samples.
    pub threads: PathBuf,
    /// `offcpu ROUNDS`: known time off the CPU by thread and call chain (a 70/30 sleeper, a
    /// mutex holder and its waiter), each measured by the fixture itself; frame pointers.
    pub offcpu: PathBuf,
    /// `offcpu` built without frame pointers, for DWARF stacks.
    pub offcpu_nofp: PathBuf,
    /// `switches SECONDS [PAIRS]`: pairs of threads passing a byte through pipes, blocking
    /// a few microseconds at a time, as fast as the machine switches.
    pub switches: PathBuf,
    /// `cost N`: (N² + 3N)·0.5 µs of CPU in `quadratic`, N·0.25 ms in `linear`, for the cost
    /// models of `vmscope fit`.
    pub cost: PathBuf,
    /// `mallocs N [THREADS]`: exactly N calls of malloc, split among THREADS threads.
    pub mallocs: PathBuf,
    /// `labels SECONDS [phases|threads|events]`: labels and domain events by construction,
    /// through proto/vmscope_labels.h (see the source's header).
    pub labels: PathBuf,
    /// Where the fixtures live, for tests that make copies.
    pub dir: PathBuf,
}

/// Builds the fixtures once per test process (gcc is installed by `cargo xtask setup`).
pub fn fixtures() -> &'static Fixtures {
    static FIXTURES: OnceLock<Fixtures> = OnceLock::new();
    FIXTURES.get_or_init(|| build_fixtures().unwrap_or_else(|e| panic!("{e:#}")))
}

/// Compiles a fixture in `src` with gcc: optimised as a real program is, with debug info, a build
/// id, frame pointers and no inlining, so that its functions and call chains are what its
/// source says; `args` name the sources and the output.
pub fn gcc_fixture(src: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("gcc")
        .args([
            "-O1",
            "-g",
            "-fno-inline",
            "-fno-omit-frame-pointer",
            "-Wl,--build-id",
        ])
        .args(args)
        .current_dir(src)
        .output()
        .context("cannot run gcc (install it, or run `cargo xtask setup`)")?;
    if !out.status.success() {
        bail!(
            "gcc {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn build_fixtures() -> anyhow::Result<Fixtures> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let dir = shared_tempdir();
    let gcc = |args: &[&str]| gcc_fixture(&src, args);
    let p = |name: &str| dir.path().join(name);
    let s = |path: &Path| path.to_str().expect("utf-8 temp path").to_owned();
    gcc(&[
        "-fPIE",
        "-pie",
        "-o",
        &s(&p("hotspots-pie")),
        "hotspots.c",
        "-ldl",
    ])?;
    gcc(&[
        "-fno-pie",
        "-no-pie",
        "-o",
        &s(&p("hotspots-nopie")),
        "hotspots.c",
        "-ldl",
    ])?;
    gcc(&["-fPIC", "-shared", "-o", &s(&p("libhot.so")), "libhot.c"])?;
    gcc(&["-o", &s(&p("fakejit")), "fakejit.c"])?;
    gcc(&["-o", &s(&p("lookalikes")), "lookalikes.c"])?;
    gcc(&["-o", &s(&p("waiter")), "waiter.c"])?;
    gcc(&["-pthread", "-o", &s(&p("events")), "events.c"])?;
    gcc(&["-pthread", "-o", &s(&p("stubs")), "stubs.c"])?;
    gcc(&["-pthread", "-o", &s(&p("threads")), "threads.c"])?;
    gcc(&["-pthread", "-o", &s(&p("offcpu")), "offcpu.c"])?;
    // Later arguments win: the same program with no frame pointer anywhere.
    gcc(&[
        "-pthread",
        "-fomit-frame-pointer",
        "-o",
        &s(&p("offcpu-nofp")),
        "offcpu.c",
    ])?;
    gcc(&["-pthread", "-o", &s(&p("switches")), "switches.c"])?;
    gcc(&["-o", &s(&p("cost")), "cost.c"])?;
    // Every call a real call of libc's malloc: no builtin for the compiler to fold away.
    gcc(&[
        "-pthread",
        "-fno-builtin",
        "-o",
        &s(&p("mallocs")),
        "mallocs.c",
    ])?;
    gcc(&[
        "-pthread",
        "-Wall",
        "-Werror",
        "-o",
        &s(&p("labels")),
        "labels.c",
    ])?;
    Ok(Fixtures {
        hotspots_pie: p("hotspots-pie"),
        hotspots_nopie: p("hotspots-nopie"),
        libhot: p("libhot.so"),
        fakejit: p("fakejit"),
        lookalikes: p("lookalikes"),
        waiter: p("waiter"),
        events: p("events"),
        stubs: p("stubs"),
        threads: p("threads"),
        offcpu: p("offcpu"),
        offcpu_nofp: p("offcpu-nofp"),
        switches: p("switches"),
        cost: p("cost"),
        mallocs: p("mallocs"),
        labels: p("labels"),
        dir: dir.path().to_path_buf(),
        _dir: dir,
    })
}

/// A running `vmscoped` on a private socket, stopped (SIGTERM) when dropped.
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    /// Its socket.
    pub socket: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts the daemon and waits until it serves. Panics, with the daemon's own words, when it
    /// cannot (not root, BPF refused...).
    pub fn start() -> Daemon {
        Daemon::start_with(&[])
    }

    /// [`Daemon::start`] with extra command-line arguments.
    pub fn start_with(args: &[&str]) -> Daemon {
        let dir = shared_tempdir();
        let socket = dir.path().join("run/vmscoped.sock");
        let log = dir.path().join("vmscoped.log");
        let log_file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(binary("vmscoped"))
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .env("VMSCOPE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("cannot spawn vmscoped");
        let mut daemon = Daemon {
            child,
            socket,
            log,
            _dir: dir,
        };
        daemon.wait_ready();
        daemon
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "vmscoped exited ({status}) before serving; BPF tests need root and a kernel \
                     with BPF ring buffers. Its log:\n{}",
                    self.log()
                );
            }
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "vmscoped did not serve within 60 s. Its log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it still runs.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its exit status, if it exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends SIGTERM and waits up to `within` for the daemon to exit; its exit status, or
    /// `None` if it did not exit in time.
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        // SAFETY: kill only sends a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// A gRPC client connected to it.
    pub async fn client(&self) -> Client {
        connect(&self.socket).await.expect("connect to vmscoped")
    }

    /// A `vmscope` command pointed at this daemon.
    pub fn cli(&self) -> Command {
        let mut command = Command::new(binary("vmscope"));
        command.env("VMSCOPE_SOCKET", &self.socket);
        command
    }

    /// `vmscope heap ARGS --format json` as root: what it did.
    pub fn heap_output(&self, args: &[&str]) -> std::process::Output {
        self.cli()
            .arg("heap")
            .args(args)
            .args(["--format", "json"])
            .output()
            .expect("run vmscope heap")
    }

    /// `vmscope heap ARGS --format json` as root, which must succeed: its JSON.
    pub fn heap_json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.heap_output(args);
        assert!(
            out.status.success(),
            "vmscope heap {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("vmscope heap's JSON")
    }

    /// `vmscope check ARGS` as root: its exit code, and its standard output then error.
    pub fn check(&self, args: &[&str]) -> (i32, String) {
        let out = self
            .cli()
            .arg("check")
            .args(args)
            .output()
            .expect("run vmscope check");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }
}

/// A child whose standard input and output a test talks to, line by line; killed when
/// dropped.
#[derive(Debug)]
pub struct Conversation {
    /// The child.
    pub child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Conversation {
    /// Spawns `command` with its input and output piped.
    pub fn spawn(command: &mut Command) -> Conversation {
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {command:?}: {e}"));
        let stdin = child.stdin.take().expect("stdin");
        let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        Conversation {
            child,
            stdin,
            stdout,
        }
    }

    /// Its next line, without the line end (empty once it ended).
    pub fn line(&mut self) -> String {
        use std::io::BufRead as _;
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read the child");
        line.trim_end().to_owned()
    }

    /// Sends it `line`.
    pub fn say(&mut self, line: &str) {
        use std::io::Write as _;
        writeln!(self.stdin, "{line}").expect("write to the child");
    }

    /// Kills it and waits for it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Conversation {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill only sends a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gRPC channel to a daemon socket, for any of its services.
pub async fn channel(socket: &Path) -> anyhow::Result<Channel> {
    let path = socket.to_path_buf();
    Ok(Endpoint::try_from("http://vmscoped.invalid")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await?)
}

/// Connects to `socket` as user `uid` would: from a thread that takes `uid` as its effective
/// user alone (the raw system call: libc's wrapper would change every thread of the test),
/// connects, and takes root back. The daemon reads the connecting thread's credentials.
fn connect_as(socket: &Path, uid: u32) -> std::io::Result<std::os::unix::net::UnixStream> {
    let socket = socket.to_path_buf();
    std::thread::spawn(move || {
        let set_euid = |euid: u32| {
            // SAFETY: setresuid with -1 for the real and saved ids changes only this thread's
            // effective uid; the saved uid stays root, so root can be taken back.
            let rc = unsafe { libc::syscall(libc::SYS_setresuid, -1i64, i64::from(euid), -1i64) };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        set_euid(uid)?;
        let connected = std::os::unix::net::UnixStream::connect(&socket);
        set_euid(0)?;
        connected
    })
    .join()
    .expect("the connecting thread")
}

/// A client of the daemon at `socket` that the daemon sees as user `uid`'s (the test runs as
/// root).
pub async fn client_as(socket: &Path, uid: u32) -> anyhow::Result<Client> {
    let path = socket.to_path_buf();
    let channel = Endpoint::try_from("http://vmscoped.invalid")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = connect_as(&path, uid)?;
                stream.set_nonblocking(true)?;
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::from_std(stream)?))
            }
        }))
        .await?;
    Ok(ProfilerClient::new(channel))
}

/// Connects to a daemon socket.
pub async fn connect(socket: &Path) -> anyhow::Result<Client> {
    Ok(ProfilerClient::new(channel(socket).await?))
}

/// A fixture process, killed when dropped.
#[derive(Debug)]
pub struct Running {
    /// The process.
    pub child: Child,
}

impl Running {
    /// Starts `program args...`, waiting until it prints "ready".
    pub fn start(command: &mut Command) -> Running {
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn fixture");
        let stdout = child.stdout.as_mut().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read fixture output");
        assert_eq!(line.trim(), "ready", "fixture did not start");
        Running { child }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Number of file descriptors process `pid` holds open now (entries of /proc/PID/fd).
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("cannot list /proc/{pid}/fd: {e}"))
        .count()
}

/// What process `pid`'s open file descriptors point to (their /proc/PID/fd links), sorted: for
/// assertion messages.
pub fn open_fd_targets(pid: u32) -> Vec<String> {
    let mut targets: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| match std::fs::read_link(e.path()) {
                    Ok(target) => target.display().to_string(),
                    Err(e) => format!("({e})"),
                })
                .collect()
        })
        .unwrap_or_default();
    targets.sort();
    targets
}

/// `n` copies of the ELF `binary` in `dir`, each a distinct file (its own inode) with a distinct
/// GNU build id: the last four bytes of the build id hold the copy's number. To the daemon they
/// are `n` different binaries, as `n` builds of a program would be.
pub fn distinct_copies(binary: &Path, dir: &Path, n: u32) -> Vec<PathBuf> {
    let bytes = std::fs::read(binary).expect("read the binary");
    let symbols = vmscope_parse::elf::ElfSymbols::parse(&bytes[..]).expect("an ELF binary");
    let id = symbols.build_id().expect("a build id").to_vec();
    assert!(id.len() >= 4, "build id too short to number copies");
    let at = bytes
        .windows(id.len())
        .position(|w| w == id)
        .expect("the build id's bytes in the file");
    let name = binary.file_name().expect("a file name").to_string_lossy();
    (0..n)
        .map(|i| {
            let mut copy = bytes.clone();
            copy[at + id.len() - 4..at + id.len()].copy_from_slice(&i.to_be_bytes());
            let path = dir.join(format!("{name}-{i}"));
            std::fs::write(&path, &copy).expect("write a copy");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            path
        })
        .collect()
}

/// Samples `pid` at `frequency_hz` (the daemon's default when `None`) for `seconds`, stops the
/// session (it may have stopped by itself: the target exited) and returns the final profile.
pub async fn record(
    client: &mut Client,
    pid: u32,
    frequency_hz: Option<u32>,
    seconds: f64,
) -> Profile {
    use vmscope_proto::v1::StartSessionRequest;
    let session = client
        .start_session(StartSessionRequest {
            pids: vec![pid],
            system_wide: false,
            frequency_hz,
            duration: None,
            keep_samples: 0,
            ..Default::default()
        })
        .await
        .expect("start a session")
        .into_inner();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop_and_profile(client, session.id).await
}

/// The daemon's counters, by name (`GetDaemonInfo`).
pub async fn counters(client: &mut Client) -> std::collections::HashMap<String, u64> {
    daemon_info(client).await.counters
}

/// What the daemon holds now (its gauges), by name (`GetDaemonInfo`).
pub async fn gauges(client: &mut Client) -> std::collections::HashMap<String, u64> {
    daemon_info(client).await.gauges
}

async fn daemon_info(client: &mut Client) -> vmscope_proto::v1::DaemonInfo {
    client
        .get_daemon_info(vmscope_proto::v1::GetDaemonInfoRequest {})
        .await
        .expect("daemon info")
        .into_inner()
}

/// Stops a session (it may have stopped by itself: its targets exited) and returns its final
/// profile.
pub async fn stop_and_profile(client: &mut Client, session_id: u64) -> Profile {
    use vmscope_proto::v1::{GetProfileRequest, StopSessionRequest};
    let _ = client
        .stop_session(StopSessionRequest {
            session_id,
            ..Default::default()
        })
        .await;
    let profile = client
        .get_profile(GetProfileRequest {
            session_id,
            ..Default::default()
        })
        .await
        .expect("the daemon answers with the profile")
        .into_inner();
    // Final, unless samples await a code map its writer holds back (V8's jitdump, until exit).
    assert!(
        profile.complete || profile.jit_samples_awaiting_code_map > 0,
        "a stopped session's profile is final: {}",
        profile.incomplete_reason
    );
    profile
}

/// Samples of the row named `name` in `section` (0 if absent).
pub fn samples_of(profile: &Profile, section: Section, name: &str) -> u64 {
    rows(profile, section)
        .filter(|r| r.name == name)
        .map(|r| r.samples)
        .sum()
}

/// Rows of one section.
pub fn rows(profile: &Profile, section: Section) -> impl Iterator<Item = &ProfileRow> {
    profile.rows.iter().filter(move |r| r.section() == section)
}

/// The JSON report of a successful `vmscope ... --format json` run: on standard output, or, when
/// a command was recorded (it keeps standard output to itself), on standard error after
/// vmscope's own lines. Panics with vmscope's stderr when it failed.
pub fn json_report(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "vmscope failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    if stdout.starts_with('{') {
        return serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("bad JSON report ({e}):\n{stdout}"));
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    json_object_in(&stderr)
        .unwrap_or_else(|| panic!("no JSON report on stdout:\n{stdout}\nnor on stderr:\n{stderr}"))
}

/// The JSON report a successful `vmscope ... --format json -o FILE` run wrote to `file`.
/// Panics with vmscope's stderr when it failed.
pub fn json_report_file(out: &std::process::Output, file: &Path) -> serde_json::Value {
    assert!(
        out.status.success(),
        "vmscope failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes =
        std::fs::read(file).unwrap_or_else(|e| panic!("no JSON report at {}: {e}", file.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("bad JSON report ({e})"))
}

/// The pretty-printed JSON object in `text` that starts at a line `{` and ends at the next line
/// `}` (nested braces are indented), among other lines.
pub fn json_object_in(text: &str) -> Option<serde_json::Value> {
    let start = if text.starts_with("{\n") {
        0
    } else {
        text.find("\n{\n")? + 1
    };
    let end = start + text[start..].find("\n}\n")? + 2;
    Some(
        serde_json::from_str(&text[start..end])
            .unwrap_or_else(|e| panic!("bad JSON report ({e}):\n{}", &text[start..end])),
    )
}

/// How far, as a fraction, a measured sampling rate may stray from the requested one: 10%,
/// plus the share of CPU time a hypervisor stole meanwhile. cpu-clock samples on timer ticks,
/// which a stolen virtual CPU misses or gets late and bunched; these test machines are shared
/// VMs whose steal comes in bursts (20% and more for a second), when the rate strays with it.
pub fn rate_tolerance(host_steal_percent: f64) -> f64 {
    0.10 + host_steal_percent / 100.0
}

/// A readable dump of a profile's rows, for assertion messages.
pub fn dump(profile: &Profile) -> String {
    let mut text = format!(
        "total {} lost {} cpu {:.3}s rate {:.1} Hz host steal {:.1}%\n",
        profile.total_samples,
        profile.lost_samples,
        profile.cpu_seconds,
        profile.measured_frequency_hz,
        profile.host_steal_percent
    );
    for row in profile.rows.iter().take(25) {
        text += &format!(
            "  {:>6} {:?} {} [{}]\n",
            row.samples,
            row.section(),
            row.name,
            row.module
        );
    }
    for issue in &profile.symbolization_issues {
        text += &format!(
            "  issue: {}: {} ({})\n",
            issue.module, issue.reason, issue.samples
        );
    }
    text
}

/// Pinned version of Python's grpcio (and grpcio-reflection) that `cargo xtask setup` installs:
/// a gRPC C-core client, which sends the socket path as `:authority` over a Unix socket.
/// xtask/src/setup.rs pins the same.
pub const GRPCIO_VERSION: &str = "1.85.1";

/// `tests/clients/grpcio_client.py MODE SOCKET PID`, Python's grpcio driving the daemon with its
/// reflection alone, which must succeed: the JSON object of facts it prints.
pub fn grpcio_facts(mode: &str, socket: &Path, pid: u32) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/grpcio_client.py");
    let out = Command::new(grpcio_python())
        .arg(&script)
        .arg(mode)
        .arg(socket)
        .arg(pid.to_string())
        .output()
        .expect("run the grpcio client");
    assert!(
        out.status.success(),
        "the grpcio client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("its JSON")
}

/// The Python of the virtualenv holding grpcio, installed by `cargo xtask setup`:
/// `$VMSCOPE_GRPCIO_VENV`, by default `$HOME/.cache/vmscope/grpcio-venv` (xtask/src/setup.rs
/// computes the same path). Panics, saying to run the setup, when it is missing or holds
/// another version: the test that needs it must not pass by skipping.
pub fn grpcio_python() -> PathBuf {
    let venv = match std::env::var_os("VMSCOPE_GRPCIO_VENV") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".cache/vmscope/grpcio-venv"),
    };
    let python = venv.join("bin/python");
    let version = Command::new(&python)
        .args([
            "-c",
            "import grpc, grpc_reflection; print(grpc.__version__)",
        ])
        .output();
    match version {
        Ok(out) if out.status.success() && out.stdout.trim_ascii() == GRPCIO_VERSION.as_bytes() => {
            python
        }
        Ok(out) => panic!(
            "{} does not import grpcio {GRPCIO_VERSION} with grpcio-reflection ({}{}); run \
             `cargo xtask setup`",
            python.display(),
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!(
            "cannot run {} ({e}): the Python gRPC client is missing; run `cargo xtask setup`",
            python.display()
        ),
    }
}

/// The CPython the runtime tests profile: a pyenv build whose VM is `libpython3.12.so`.
/// `cargo xtask setup` installs it (xtask/src/setup.rs, `PYENV_PYTHONS`).
pub fn pyenv_python() -> PathBuf {
    pyenv_python_version("3.12")
}

/// A pyenv CPython `version` ("3.12", "3.13") built as a shared library (its VM is
/// `libpython{version}.so`, without frame pointers); `cargo xtask setup` installs 3.12 and 3.13.
pub fn pyenv_python_version(version: &str) -> PathBuf {
    let root = Command::new("pyenv")
        .arg("root")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .unwrap_or_else(|| panic!("pyenv is missing: run `cargo xtask setup`"));
    let mut builds: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
        .map(|dir| dir.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    builds.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&format!("{version}.")))
            && p.join(format!("lib/libpython{version}.so")).exists()
    });
    builds.sort();
    builds
        .pop()
        .map(|p| p.join(format!("bin/python{version}")))
        .unwrap_or_else(|| {
            panic!("no shared CPython {version} under pyenv: run `cargo xtask setup`")
        })
}

/// `python{version}` as a pyenv user runs it: pyenv's shim (a bash script that execs pyenv,
/// which execs the interpreter), with `PYENV_VERSION` set to the shared build
/// [`pyenv_python_version`] finds. The program a recorded command starts is then bash, and
/// Python maps its code only after two more execs.
pub fn pyenv_shim(version: &str) -> Command {
    let python = pyenv_python_version(version);
    let build = python
        .ancestors()
        .nth(2)
        .and_then(|b| Some((b.parent()?.parent()?, b.file_name()?)))
        .unwrap_or_else(|| panic!("{} is not in a pyenv build", python.display()));
    let (root, name) = build;
    let mut command = Command::new(root.join(format!("shims/python{version}")));
    command.env("PYENV_VERSION", name);
    command
}

/// Runs `go tool pprof ARGS FILE` (the real pprof, nobody's code here) and returns its
/// standard output; panics with pprof's words when it fails.
pub fn go_pprof(args: &[&str], file: &Path) -> String {
    go_pprof_from(
        args,
        file.to_str().expect("a UTF-8 path"),
        file.parent().expect("a directory"),
    )
}

/// Runs `go tool pprof ARGS SOURCE`, SOURCE a file or a URL pprof fetches, with its fetched
/// profiles and symbol files kept in `scratch`; its standard output, or a panic with pprof's
/// words when it fails.
pub fn go_pprof_from(args: &[&str], source: &str, scratch: &Path) -> String {
    let output = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(source)
        // pprof keeps fetched profiles and symbol files here; keep it out of $HOME.
        .env("PPROF_TMPDIR", scratch)
        .output()
        .expect("`go` must run: install Go with `cargo xtask setup` (Debian's golang-go)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "go tool pprof {args:?} failed: {}\n{stdout}\n{stderr}",
        output.status
    );
    stdout
}

/// The rows of `go tool pprof -top`: name -> (flat, cum), names without pprof's ` (inline)`
/// mark.
pub fn pprof_top_rows(output: &str) -> std::collections::BTreeMap<String, (String, String)> {
    let mut rows = std::collections::BTreeMap::new();
    let mut in_table = false;
    for line in output.lines() {
        if line.trim_start().starts_with("flat ") {
            in_table = true;
            continue;
        }
        if !in_table || line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert!(fields.len() >= 6, "a -top row has 6 columns: {line:?}");
        let name = fields[5..].join(" ");
        let name = name.trim_end_matches(" (inline)").to_owned();
        let previous = rows.insert(name, (fields[0].to_owned(), fields[3].to_owned()));
        assert!(previous.is_none(), "each function once in -top: {line:?}");
    }
    assert!(in_table, "no table in -top's output:\n{output}");
    rows
}
