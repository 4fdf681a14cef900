//! The signals that end or interrupt `vmscope record`, with who sent them.
//!
//! `vmscope record -- CMD` stands between the user and the command, as `time` or `strace` do:
//! a SIGINT, SIGTERM or SIGHUP meant for vmscope is meant for the command. Whether to pass it
//! on depends on where it came from. The terminal (Ctrl-C, a hang-up) signals the whole
//! foreground process group, the command included: passing that on would deliver it twice,
//! and a program that handles a first Ctrl-C (Python's `KeyboardInterrupt`) could take the
//! second as a harder one. A signal another process sent to vmscope alone (`kill`, a
//! supervisor, a CI timeout) reaches the command only if vmscope passes it on. The kernel
//! tells the two apart in the signal's `si_code`, which `signal-hook` exposes; tokio's signal
//! streams do not, hence that crate. (A signal another process sent to the whole process
//! group, `kill -- -PGID` or `timeout` without `--foreground`, reaches the command directly
//! and once more through vmscope: nothing says it was meant for a group.)

use std::io;

use signal_hook::{
    consts::{SIGHUP, SIGINT, SIGTERM},
    iterator::{
        Handle, SignalsInfo,
        exfiltrator::{WithOrigin, origin::Origin},
    },
    low_level::siginfo::Cause,
};
use tokio::sync::mpsc;

/// A signal vmscope received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// The signal number.
    pub signal: i32,
    /// Whether another process sent it to vmscope (`kill`), rather than the terminal to the
    /// whole process group (Ctrl-C, hang-up), which the recorded command got as well.
    pub sent_by_process: bool,
}

impl Received {
    fn from_origin(origin: &Origin) -> Received {
        Received::new(origin.signal, origin.cause)
    }

    /// The terminal's signals (Ctrl-C, a hang-up) come from the kernel (`SI_KERNEL`); `kill`
    /// and its kin say which process sent them (`SI_USER`, `SI_QUEUE`, `SI_TKILL`).
    fn new(signal: i32, cause: Cause) -> Received {
        Received {
            signal,
            sent_by_process: !matches!(cause, Cause::Kernel),
        }
    }

    /// The signal's name, as `kill -l` spells it.
    pub fn name(&self) -> &'static str {
        match self.signal {
            SIGINT => "SIGINT",
            SIGTERM => "SIGTERM",
            SIGHUP => "SIGHUP",
            _ => "a signal",
        }
    }

    /// Why a recording that has no command to pass it to ends.
    pub fn stop_reason(&self) -> &'static str {
        match self.signal {
            SIGINT => "interrupted (SIGINT)",
            SIGTERM => "vmscope was terminated (SIGTERM)",
            SIGHUP => "the terminal went away (SIGHUP)",
            _ => "vmscope was signalled",
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught from creation until drop, as an async stream.
#[derive(Debug)]
pub struct Signals {
    rx: mpsc::UnboundedReceiver<Received>,
    handle: Handle,
}

impl Signals {
    /// Catches the signals from now on. A thread waits for them (signal-hook's iterator
    /// blocks) and hands them to the async side.
    pub fn new() -> io::Result<Signals> {
        let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP])?;
        let handle = signals.handle();
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("vmscope-signals".into())
            .spawn(move || {
                for origin in signals.forever() {
                    if tx.send(Received::from_origin(&origin)).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Signals { rx, handle })
    }

    /// The next signal. Pending forever once the stream is closed.
    pub async fn next(&mut self) -> Received {
        match self.rx.recv().await {
            Some(received) => received,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.handle.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_signal_sent_with_kill_is_told_apart_from_the_terminals() {
        let mut signals = Signals::new().unwrap();
        // SAFETY: sends a signal to this process, which catches it.
        assert_eq!(unsafe { libc::kill(libc::getpid(), SIGHUP) }, 0);
        let received = tokio::time::timeout(std::time::Duration::from_secs(5), signals.next())
            .await
            .expect("the signal arrives");
        assert_eq!(
            received,
            Received {
                signal: SIGHUP,
                sent_by_process: true
            }
        );
        assert_eq!(received.name(), "SIGHUP");
    }

    #[test]
    fn the_terminals_signals_are_not_passed_on() {
        use signal_hook::low_level::siginfo::Sent;
        assert!(!Received::new(SIGINT, Cause::Kernel).sent_by_process);
        assert!(Received::new(SIGINT, Cause::Sent(Sent::User)).sent_by_process);
        assert!(Received::new(SIGTERM, Cause::Sent(Sent::TKill)).sent_by_process);
    }
}
