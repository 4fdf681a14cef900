//! What the daemon does on the signals a service manager or an operator sends.
//!
//! * SIGTERM and SIGINT stop it: the caller winds down, and a watchdog thread ends the process
//!   at a hard deadline whatever the async runtime is doing ([`exit_by`]): a runtime whose
//!   threads are all busy fires its timers late, and the exit must not wait for them.
//! * SIGHUP, which daemons take as "reload your configuration", is logged and nothing else:
//!   vmscoped has no configuration file (its settings are its command line and environment,
//!   fixed at start) and logs to standard error, which it does not reopen. The signal's
//!   default action would end the daemon at once, leaving its socket and losing every session.

use std::time::{Duration, Instant};

use tokio::signal::unix::{Signal, SignalKind, signal};

/// The signals the daemon listens for, caught from its start on.
#[derive(Debug)]
pub struct Signals {
    terminate: Option<Signal>,
    interrupt: Option<Signal>,
    hangup: Option<Signal>,
}

impl Signals {
    /// Catches SIGTERM, SIGINT and SIGHUP from now on (each that cannot be caught is logged
    /// and keeps its default action). Must be called within the runtime.
    pub fn catch() -> Signals {
        let catch = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(signal) => Some(signal),
            Err(e) => {
                tracing::warn!("cannot catch {name}: {e}");
                None
            }
        };
        Signals {
            terminate: catch(SignalKind::terminate(), "SIGTERM"),
            interrupt: catch(SignalKind::interrupt(), "SIGINT"),
            hangup: catch(SignalKind::hangup(), "SIGHUP"),
        }
    }

    /// Waits for SIGTERM or SIGINT; logs each SIGHUP meanwhile and goes on.
    pub async fn shutdown(&mut self) {
        async fn next(signal: &mut Option<Signal>) {
            // None: the runtime is going away; a stream that ended must not spin.
            let received = match signal {
                Some(signal) => signal.recv().await,
                None => None,
            };
            if received.is_none() {
                std::future::pending::<()>().await;
            }
        }
        loop {
            tokio::select! {
                () = next(&mut self.terminate) => break,
                () = next(&mut self.interrupt) => break,
                () = next(&mut self.hangup) => tracing::info!(
                    "SIGHUP: nothing to reload (vmscoped has no configuration file; its \
                     settings are its command line and environment): going on"
                ),
            }
        }
        tracing::info!("shutting down");
    }
}

/// Ends the process at `deadline` with a success status, from a thread of its own, unless it
/// ended before: the bound on a shutdown that the async runtime cannot delay. `socket` is
/// removed first (the normal path removed it already; this is in case it did not get there).
pub fn exit_by(deadline: Instant, socket: std::path::PathBuf) {
    let spawned = std::thread::Builder::new()
        .name("exit-deadline".into())
        .spawn(move || {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            let _ = std::fs::remove_file(&socket);
            tracing::warn!("still shutting down at the deadline: exiting now");
            // SAFETY: _exit ends the process without running anything more of it: no atexit
            // handler or destructor can wait on what the other threads hold.
            unsafe { libc::_exit(0) };
        });
    if let Err(e) = spawned {
        tracing::warn!("no exit deadline, the shutdown may take longer: {e}");
    }
}

/// The slack between the shutdown's own deadline and [`exit_by`]'s: the runtime's own shutdown
/// and the process's exit.
pub const EXIT_SLACK: Duration = Duration::from_millis(600);
