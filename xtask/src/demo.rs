//! `cargo xtask demo`: a real profile of a real JIT, end to end.
//!
//! Builds the release binaries (the daemon, the CLI, and `jitvm`, the demo JIT VM), starts
//! `vmscoped` on a private socket unless one already serves the default socket, records
//! `jitvm tiny` (Squeak's tinyBenchmarks: benchFib and the sieve, JIT-compiled to x86-64, the
//! code map published to the daemon as it changes) with `vmscope record -- CMD`, prints the
//! VMProfiler report with bytecode ranges, and stops the daemon it started.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::{cargo, root, run_checked, setup};

/// The default socket of an installed daemon.
const DEFAULT_SOCKET: &str = "/run/vmscope/vmscoped.sock";

/// Release binaries, built.
pub struct Built {
    /// target/release/vmscoped
    pub daemon: PathBuf,
    /// target/release/vmscope
    pub cli: PathBuf,
    /// target/release/jitvm, the demo JIT VM.
    pub jitvm: PathBuf,
    /// Scratch directory (target/xtask).
    pub dir: PathBuf,
}

/// Builds the release binaries.
pub fn build() -> anyhow::Result<Built> {
    println!("xtask: building vmscoped, vmscope and jitvm (release)");
    run_checked(cargo().args([
        "build",
        "--release",
        "-p",
        "vmscoped",
        "-p",
        "vmscope",
        "-p",
        "jitvm",
    ]))?;
    let target = target_dir();
    let release = target.join("release");
    let dir = target.join("xtask");
    std::fs::create_dir_all(&dir)?;
    Ok(Built {
        daemon: release.join("vmscoped"),
        cli: release.join("vmscope"),
        jitvm: release.join("jitvm"),
        dir,
    })
}

/// Cargo's target directory: `CARGO_TARGET_DIR` when set (relative to the workspace, as cargo
/// reads it), else `target` in the workspace.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root().join(dir),
        None => root().join("target"),
    }
}

/// A daemon for the demo or the benchmark: one already running, or one we started.
pub struct Daemon {
    /// Its socket.
    pub socket: PathBuf,
    started: Option<Child>,
}

impl Daemon {
    /// Uses the daemon at the default socket if one answers, else starts one on a private
    /// socket.
    pub fn start_or_reuse(built: &Built, reuse: bool) -> anyhow::Result<Daemon> {
        let default = Path::new(DEFAULT_SOCKET);
        if reuse && std::os::unix::net::UnixStream::connect(default).is_ok() {
            println!("xtask: using the vmscoped already serving {DEFAULT_SOCKET}");
            return Ok(Daemon {
                socket: default.to_path_buf(),
                started: None,
            });
        }
        if !setup::is_root() {
            bail!("vmscoped loads BPF programs and needs root: run `sudo -E cargo xtask ...`");
        }
        Daemon::start_binary(&built.daemon, &built.dir, "vmscoped")
    }

    /// Starts the daemon `binary` on the socket `NAME.sock` in `dir`, its log in `NAME.log`,
    /// and waits until it serves.
    pub fn start_binary(binary: &Path, dir: &Path, name: &str) -> anyhow::Result<Daemon> {
        Daemon::start_binary_with(binary, dir, name, &[])
    }

    /// [`Daemon::start_binary`] with more arguments.
    pub fn start_binary_with(
        binary: &Path,
        dir: &Path,
        name: &str,
        args: &[&str],
    ) -> anyhow::Result<Daemon> {
        let socket = dir.join(format!("{name}.sock"));
        let log = dir.join(format!("{name}.log"));
        let _ = std::fs::remove_file(&socket);
        println!(
            "xtask: starting {} --socket {} (log: {})",
            binary.display(),
            socket.display(),
            log.display()
        );
        let child = Command::new(binary)
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let mut daemon = Daemon {
            socket,
            started: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&daemon.socket).is_err() {
            let exited = daemon
                .started
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                bail!("vmscoped did not start:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(daemon)
    }

    /// Pid of the daemon we started.
    pub fn pid(&self) -> Option<u32> {
        self.started.as_ref().map(Child::id)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(child) = &mut self.started {
            // SAFETY: kill only signals our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

/// The demo.
pub fn run(seconds: f64) -> anyhow::Result<()> {
    let built = build()?;
    let daemon = Daemon::start_or_reuse(&built, true)?;
    println!(
        "xtask: recording `jitvm tiny --seconds {seconds}`: tinyBenchmarks on the demo JIT VM, \
         which publishes its code map to the daemon as it compiles\n"
    );
    // The socket goes in the environment: the recorded VM inherits it and publishes there.
    let status = Command::new(&built.cli)
        .env("VMSCOPE_SOCKET", &daemon.socket)
        .args(["record", "--"])
        .arg(&built.jitvm)
        .args(["tiny", "--seconds", &seconds.to_string()])
        .status()
        .context("cannot run vmscope")?;
    if !status.success() {
        bail!("vmscope record failed: {status}");
    }
    Ok(())
}
