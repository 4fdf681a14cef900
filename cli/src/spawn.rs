//! Starting the command of `vmscope record -- CMD` so that no sample is lost.
//!
//! The command is forked first and held before `exec`, blocked on a pipe; the caller registers
//! its pid with the daemon, then releases it. Its very first instruction is therefore sampled.
//! (`std::process::Command` cannot do this: its `spawn` returns only after `exec`.)
//!
//! Between `fork` and `exec` the child of a multi-threaded process may only make
//! async-signal-safe calls (another thread may have held the allocator's lock at the fork), so
//! everything (path lookup, argument strings) is prepared before the fork, and the child only
//! reads, execs, writes and exits. That makes [`HeldChild::spawn`] safe to call from any thread.
//!
//! Waiting uses `WNOWAIT` first: the exited command stays a zombie, whose CPU time the daemon
//! can still read, until the session is stopped; only then is it reaped.
//!
//! The command gets vmscope's environment, plus the variables the caller adds (the daemon's
//! socket, so that a VM that publishes its code map finds the daemon vmscope talks to).

use std::{
    ffi::{CString, OsStr, OsString},
    io,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::{Path, PathBuf},
};

/// A forked command waiting for [`HeldChild::release`] before it execs.
#[derive(Debug)]
pub struct HeldChild {
    pid: libc::pid_t,
    go: Option<OwnedFd>,
    program: PathBuf,
    /// A pidfd of the child: signals sent through it can never reach another process that
    /// reused the pid after the child was reaped.
    pidfd: Option<OwnedFd>,
}

/// Sends signals to a child through its pidfd (or its pid, on kernels without pidfds).
#[derive(Debug)]
pub struct Signaller {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
}

impl Signaller {
    /// Sends `signal`; a child that is gone (reaped) gets nothing, and nothing else does.
    pub fn send(&self, signal: i32) -> io::Result<()> {
        // SAFETY: both calls only send a signal; the pidfd is ours and open.
        let r = unsafe {
            match &self.pidfd {
                Some(fd) => libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    signal,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                ),
                None => libc::kill(self.pid, signal) as libc::c_long,
            }
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// How a command ended, as a shell would report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

impl ExitStatus {
    /// The exit code to pass on: the code itself, or 128 + signal like a shell.
    pub fn as_exit_code(self) -> i32 {
        match self {
            ExitStatus::Code(code) => code,
            ExitStatus::Signal(signal) => 128 + signal,
        }
    }
}

/// Finds `program` the way a shell does: as a path when it contains a slash, otherwise in
/// `$PATH`.
pub fn resolve_program(program: &OsStr) -> io::Result<PathBuf> {
    let is_executable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        })
    };
    if program.as_bytes().contains(&b'/') {
        let path = PathBuf::from(program);
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is not an executable file", path.display()),
            ))
        };
    }
    let path_var = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path_var)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("command not found: {}", program.to_string_lossy()),
            )
        })
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("argument contains a NUL byte: {}", s.to_string_lossy()),
        )
    })
}

/// `NAME=value` strings of vmscope's environment with `overrides` set, in a stable order.
fn environment(overrides: &[(&OsStr, &OsStr)]) -> io::Result<Vec<CString>> {
    let inherited =
        std::env::vars_os().filter(|(name, _)| !overrides.iter().any(|(n, _)| n == name));
    let mut pairs: Vec<(OsString, OsString)> = inherited.collect();
    pairs.extend(
        overrides
            .iter()
            .map(|&(name, value)| (name.to_owned(), value.to_owned())),
    );
    pairs
        .into_iter()
        .map(|(name, value)| {
            let mut entry = name;
            entry.push("=");
            entry.push(value);
            cstring(&entry)
        })
        .collect()
}

impl HeldChild {
    /// Forks `program args...`, held before exec, with vmscope's environment where `env` sets
    /// or overrides variables.
    pub fn spawn(
        program: &OsStr,
        args: &[OsString],
        env: &[(&OsStr, &OsStr)],
    ) -> io::Result<HeldChild> {
        let path = resolve_program(program)?;
        let c_path = cstring(path.as_os_str())?;
        let c_args: Vec<CString> = std::iter::once(program)
            .chain(args.iter().map(OsString::as_os_str))
            .map(cstring)
            .collect::<io::Result<_>>()?;
        let mut argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let c_env = environment(env)?;
        let mut envp: Vec<*const libc::c_char> = c_env.iter().map(|v| v.as_ptr()).collect();
        envp.push(std::ptr::null());
        let exec_failed = b"vmscope: exec failed\n";
        // SAFETY: sigemptyset initialises the set we own.
        let empty_mask = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            set
        };

        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array we own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };

        // The signals vmscope passes on are blocked across the fork: the child inherits the
        // parent's handlers (which would swallow a signal meant for the command) until it has
        // reset them, and a signal sent meanwhile waits, then acts as on the command.
        // SAFETY: the set is ours, initialised by sigemptyset; pthread_sigmask writes `parent`.
        let (passed_on, mut parent) = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut set, signal);
            }
            (set, std::mem::zeroed::<libc::sigset_t>())
        };
        // SAFETY: as above.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &passed_on, &mut parent) };
        // SAFETY: the child below only calls async-signal-safe functions on memory prepared
        // before the fork, which is sound even if other threads exist.
        let pid = unsafe { libc::fork() };
        if pid != 0 {
            // SAFETY: restores the mask saved above.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &parent, std::ptr::null_mut()) };
        }
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // Child.
            // SAFETY: async-signal-safe calls only; argv and path outlive the exec attempt.
            unsafe {
                // Rust ignores SIGPIPE and an ignored signal stays ignored across exec: give the
                // command the dispositions and mask it would get from a shell. The handlers
                // inherited from vmscope would otherwise run until the exec.
                for signal in [libc::SIGPIPE, libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(signal, libc::SIG_DFL);
                }
                libc::close(write_end.as_raw_fd());
                let mut byte = 0u8;
                let n = loop {
                    let n = libc::read(read_end.as_raw_fd(), (&mut byte as *mut u8).cast(), 1);
                    if n >= 0 || *libc::__errno_location() != libc::EINTR {
                        break n;
                    }
                };
                if n != 1 {
                    // The parent gave up (no daemon, refused session): leave without running.
                    libc::_exit(127);
                }
                libc::sigprocmask(libc::SIG_SETMASK, &empty_mask, std::ptr::null_mut());
                libc::execve(c_path.as_ptr(), argv.as_ptr(), envp.as_ptr());
                libc::write(2, exec_failed.as_ptr().cast(), exec_failed.len());
                libc::_exit(127);
            }
        }
        drop(read_end);
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        Ok(HeldChild {
            pid,
            go: Some(write_end),
            program: path,
            // SAFETY: a descriptor just returned to us by the kernel.
            pidfd: (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd as i32) }),
        })
    }

    /// A handle that signals the child, usable while another thread waits for it.
    pub fn signaller(&self) -> io::Result<Signaller> {
        Ok(Signaller {
            pid: self.pid,
            pidfd: self.pidfd.as_ref().map(OwnedFd::try_clone).transpose()?,
        })
    }

    /// The child's pid, valid before and after exec.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// The resolved program path.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Lets the child exec.
    pub fn release(&mut self) -> io::Result<()> {
        let Some(go) = self.go.take() else {
            return Ok(());
        };
        // SAFETY: writes one byte from a local to a descriptor we own.
        let n = unsafe { libc::write(go.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        if n == 1 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Makes a held child exit without running the command, and reaps it.
    pub fn abort(mut self) {
        drop(self.go.take());
        let _ = self.reap();
    }

    /// Blocks until the child has exited, without reaping it: see [`wait_exited`].
    pub fn wait_exited(&self) -> io::Result<()> {
        wait_exited(self.pid())
    }

    /// Reaps the child (blocking until it exits) and returns how it ended.
    pub fn reap(&mut self) -> io::Result<ExitStatus> {
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes into the int we own.
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r == self.pid {
                return Ok(if libc::WIFSIGNALED(status) {
                    ExitStatus::Signal(libc::WTERMSIG(status))
                } else {
                    ExitStatus::Code(libc::WEXITSTATUS(status))
                });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Blocks until process `pid` (a child of ours) has exited, without reaping it: the zombie keeps
/// its final CPU time readable in /proc for the daemon. Free-standing so that a blocking thread
/// can wait while the [`HeldChild`] stays with its owner.
pub fn wait_exited(pid: u32) -> io::Result<()> {
    loop {
        // SAFETY: waitid writes into the siginfo we own.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_child_runs_only_when_released_and_reports_its_status() {
        let dir = tempfile_dir();
        let marker = dir.join("ran");
        let script = format!("touch {}; exit 7", marker.display());
        let mut child =
            HeldChild::spawn(OsStr::new("sh"), &["-c".into(), script.into()], &[]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!marker.exists(), "the command must wait to be released");
        child.release().unwrap();
        child.wait_exited().unwrap();
        // Not reaped yet: still a zombie with a /proc entry.
        assert!(Path::new(&format!("/proc/{}/stat", child.pid())).exists());
        assert_eq!(child.reap().unwrap(), ExitStatus::Code(7));
        assert!(marker.exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_command_gets_default_signal_dispositions() {
        let dir = tempfile_dir();
        let out = dir.join("status");
        let script = format!(
            "grep -E '^Sig(Ign|Blk)' /proc/self/status > {}",
            out.display()
        );
        let mut child =
            HeldChild::spawn(OsStr::new("sh"), &["-c".into(), script.into()], &[]).unwrap();
        child.release().unwrap();
        assert_eq!(child.reap().unwrap(), ExitStatus::Code(0));
        let status = std::fs::read_to_string(&out).unwrap();
        for line in status.lines() {
            let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
            assert_eq!(mask & (1 << (libc::SIGPIPE - 1)), 0, "SIGPIPE in {line}");
        }
        assert_eq!(status.lines().count(), 2, "{status}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_command_gets_our_environment_with_overrides() {
        let dir = tempfile_dir();
        let out = dir.join("env");
        let script = format!("env > {}", out.display());
        let mut child = HeldChild::spawn(
            OsStr::new("sh"),
            &["-c".into(), script.into()],
            &[
                (OsStr::new("VMSCOPE_SOCKET"), OsStr::new("/tmp/x y/s")),
                (OsStr::new("PATH"), OsStr::new("/usr/bin:/bin")),
            ],
        )
        .unwrap();
        child.release().unwrap();
        assert_eq!(child.reap().unwrap(), ExitStatus::Code(0));
        let env = std::fs::read_to_string(&out).unwrap();
        let lines: Vec<&str> = env.lines().collect();
        assert!(lines.contains(&"VMSCOPE_SOCKET=/tmp/x y/s"), "{env}");
        // Cargo runs tests with this set: inherited variables are passed on.
        let inherited = format!("CARGO_MANIFEST_DIR={}", env!("CARGO_MANIFEST_DIR"));
        assert!(lines.contains(&inherited.as_str()), "{env}");
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with("PATH="))
                .collect::<Vec<_>>(),
            [&"PATH=/usr/bin:/bin"],
            "an override replaces the inherited value"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_reaped_child_gets_no_more_signals() {
        let mut child =
            HeldChild::spawn(OsStr::new("sh"), &["-c".into(), "sleep 30".into()], &[]).unwrap();
        child.release().unwrap();
        let signaller = child.signaller().unwrap();
        signaller.send(libc::SIGTERM).unwrap();
        assert_eq!(child.reap().unwrap(), ExitStatus::Signal(libc::SIGTERM));
        let err = signaller.send(libc::SIGTERM).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ESRCH), "{err}");
    }

    #[test]
    fn aborted_child_never_runs() {
        let dir = tempfile_dir();
        let marker = dir.join("ran");
        let script = format!("touch {}", marker.display());
        let child = HeldChild::spawn(OsStr::new("sh"), &["-c".into(), script.into()], &[]).unwrap();
        child.abort();
        assert!(!marker.exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn signals_map_to_shell_codes() {
        let mut child =
            HeldChild::spawn(OsStr::new("sh"), &["-c".into(), "kill -9 $$".into()], &[]).unwrap();
        child.release().unwrap();
        let status = child.reap().unwrap();
        assert_eq!(status, ExitStatus::Signal(9));
        assert_eq!(status.as_exit_code(), 137);
    }

    #[test]
    fn unknown_commands_are_refused_before_forking() {
        let err = HeldChild::spawn(OsStr::new("no-such-command-vmscope"), &[], &[]).unwrap_err();
        assert!(err.to_string().contains("command not found"), "{err}");
        let dir = tempfile_dir();
        let plain = dir.join("not-executable");
        std::fs::write(&plain, b"#!/bin/sh\n").unwrap();
        let err = resolve_program(plain.as_os_str()).unwrap_err();
        assert!(err.to_string().contains("not an executable"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "vmscope-spawn-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
