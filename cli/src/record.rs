//! `vmscope record`: start a session, wait for its end, print its report.
//!
//! The session ends when its duration elapses, when the recorded command exits, when every
//! target process exited, or on Ctrl-C, whichever comes first. A recorded command is registered
//! with the daemon before it execs (see [`crate::spawn`]), finds the daemon through
//! `VMSCOPE_SOCKET` in its environment (a VM publishing its code map must reach the daemon
//! vmscope talks to), and its exit status becomes vmscope's.
//!
//! SIGINT, SIGTERM and SIGHUP end a recording of running processes or of the whole system. With
//! a command they are the command's business, as with a shell: a signal another process sent
//! vmscope is passed on to the command, one from the terminal reached it already (see
//! [`crate::signals`]), and the recording goes on until the command exits, so that the report
//! covers all it did and vmscope exits with its status (128 + signal when it died of one). A
//! command that ignores the terminal's signals is killed at the third (Ctrl-C three times).

use std::{
    ffi::{OsStr, OsString},
    io::Write,
    path::Path,
    time::Duration,
};

use anyhow::Context as _;
use tonic::Code;
use vmscope_model::heap::HeapHistogram;
use vmscope_proto::{
    SOCKET_ENV,
    v1::{self as pb, SessionState},
};

use crate::{
    client::{self, Client},
    report::{Format, ReportOptions},
    signals::{self, Signals},
    spawn::{self, ExitStatus, HeldChild},
};

/// What to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Running processes.
    Pids(Vec<u32>),
    /// Every process.
    System,
    /// A command to run.
    Command(Vec<OsString>),
}

/// Options of `vmscope record`.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// What to record.
    pub target: Target,
    /// Sampling frequency; the daemon's default (1400 Hz) when unset.
    pub frequency_hz: Option<u32>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Call stacks to record with each sample.
    pub call_graph: pb::CallGraph,
    /// With [`pb::CallGraph::Dwarf`], bytes of user stack to copy per sample; the daemon's
    /// default (8192) when unset.
    pub dwarf_stack_bytes: Option<u32>,
    /// Leave HotSpot targets alone (no perf map requests).
    pub no_jvm_attach: bool,
    /// What to measure.
    pub mode: pb::ProfileMode,
    /// Off-CPU and wall modes: the shortest block recorded with its stacks.
    pub min_block: Option<Duration>,
    /// The workload's parameters (`--param n=1000`), kept with the session.
    pub params: Vec<(String, String)>,
    /// Native functions whose calls to count (`--count libc.so.6:malloc`).
    pub counts: Vec<String>,
    /// Heap histograms of the targets before and after (`--heap`, running processes only).
    pub heap: bool,
    /// The threads the report is of.
    pub threads: crate::sessions::Threads,
    /// Report format.
    pub format: Format,
    /// Report options.
    pub report: ReportOptions,
}

/// How often the CLI checks whether the daemon ended the session by itself (its targets
/// exited or were dropped): each check is a request the daemon serves, and at 5 a second they
/// were a third of what an idle session cost it.
const POLL: Duration = Duration::from_secs(1);

/// How often it checks once the session's duration has elapsed, until the daemon says it
/// stopped.
const POLL_AT_END: Duration = Duration::from_millis(50);

/// The stop reason of a recording that ended with its command.
const COMMAND_EXITED: &str = "the recorded command exited";

/// Records and writes the report to `out`. Returns the exit code vmscope should end with: the
/// recorded command's, or 0.
pub async fn record(
    socket: &Path,
    options: RecordOptions,
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    // Resolve and fork the command first, so that "command not found" is reported before a
    // session exists.
    let mut child = match &options.target {
        Target::Command(argv) => {
            let (program, args) = argv.split_first().context("no command given after --")?;
            // Absolute: the command may change directories before it connects.
            let socket = std::path::absolute(socket).unwrap_or_else(|_| socket.to_path_buf());
            let env = [(OsStr::new(SOCKET_ENV), socket.as_os_str())];
            Some(
                HeldChild::spawn(program, args, &env)
                    .with_context(|| format!("cannot start {}", program.to_string_lossy()))?,
            )
        }
        _ => None,
    };
    // The first histograms before the session: their full GCs are not in its samples.
    let heaps_before = match (&options.target, options.heap) {
        (Target::Pids(pids), true) => take_heaps(socket, pids).await?,
        _ => Vec::new(),
    };
    let started = start(socket, &options, child.as_ref()).await;
    let (mut client, session) = match started {
        Ok(started) => started,
        Err(e) => {
            if let Some(child) = child {
                child.abort();
            }
            return Err(e);
        }
    };
    let id = session.id;
    let ends_at = options.duration.map(|d| tokio::time::Instant::now() + d);
    // Signals are caught from here on: the session must be stopped (and the command, if any,
    // waited for) however vmscope is asked to end.
    let mut signals = Signals::new().context("cannot catch signals")?;
    if let Some(child) = &mut child {
        child
            .release()
            .context("cannot release the recorded command")?;
    }
    let what = match options.mode {
        pb::ProfileMode::OffCpu => "time off the CPU".to_owned(),
        pb::ProfileMode::Wall => format!("at {} Hz and off the CPU", session.frequency_hz),
        _ => format!("at {} Hz", session.frequency_hz),
    };
    eprintln!(
        "vmscope: session {id}: recording {} {what}{}; Ctrl-C to stop",
        describe(&options.target, &session),
        options
            .duration
            .map(|d| format!(" for {:.1} s", d.as_secs_f64()))
            .unwrap_or_default(),
    );

    let mut forwarder = match &child {
        Some(c) => Some(Forwarder::new(c)?),
        None => None,
    };
    let exited = child.as_ref().map(|c| {
        let pid = c.pid();
        tokio::task::spawn_blocking(move || spawn::wait_exited(pid))
    });
    let reported = async {
        let reason = wait_for_end(
            &mut client,
            id,
            exited,
            forwarder.as_mut(),
            &mut signals,
            ends_at,
        )
        .await?;
        stop(&mut client, id, reason).await?;
        let heaps = heap_growth(socket, &heaps_before).await;
        let mut profile: vmscope_model::Profile = client
            .get_profile(options.threads.request(id))
            .await
            .map_err(client::status_error)
            .context("fetching the profile")?
            .into_inner()
            .into();
        // The daemon sees the command's exit too (its exit tracepoint), and may stop the
        // session first; its only target is the command, so that is the same end, said as the
        // user knows it.
        if reason == COMMAND_EXITED
            && let Some(session) = &mut profile.session
            && session.stop_reason == vmscope_proto::STOPPED_ALL_TARGETS_EXITED
        {
            session.stop_reason = COMMAND_EXITED.to_owned();
        }
        crate::report::render_profile(&profile, &options.report, options.format, &mut &mut *out)?;
        if options.format == Format::Text {
            write_heaps(&heaps, &mut &mut *out)?;
        } else {
            write_heaps(&heaps, &mut std::io::stderr())?;
        }
        out.flush()?;
        anyhow::Ok(())
    }
    .await;
    let reported = reported.map_err(|e| {
        if e.chain().any(|c| c.is::<client::DaemonGone>()) {
            let command = if child.is_some() {
                "; the command runs on, and vmscope waits for it"
            } else {
                ""
            };
            e.context(format!(
                "session {id} was lost with the daemon, and its samples with it (the daemon \
                 keeps profiles in memory only){command}"
            ))
        } else {
            e
        }
    });
    if reported.is_err() {
        // Leave nothing running in the daemon on our behalf.
        let _ = stop(&mut client, id, "vmscope failed").await;
    }

    let status = match (child, forwarder) {
        (Some(child), Some(mut forwarder)) => {
            Some(reap(child, &mut forwarder, &mut signals).await?)
        }
        _ => None,
    };
    reported?;
    Ok(status.map_or(0, ExitStatus::as_exit_code))
}

/// How many classes that grew `--heap` shows per process.
const HEAP_TOP: usize = 10;

/// Takes a heap histogram of each of `pids`, before the session. A target that cannot answer
/// ends the recording before it starts, with the reason.
async fn take_heaps(socket: &Path, pids: &[u32]) -> anyhow::Result<Vec<HeapHistogram>> {
    let mut taken = Vec::with_capacity(pids.len());
    for &pid in pids {
        let which = crate::heap::Which::Take {
            pid,
            all: false,
            timeout: None,
        };
        taken.push(
            crate::heap::histogram(socket, which)
                .await
                .context("--heap: the histogram before the recording failed")?,
        );
    }
    Ok(taken)
}

/// After the session, a second histogram of each process `before` has one of, with its
/// growth since; a process that exited or cannot answer any more says so instead.
async fn heap_growth(
    socket: &Path,
    before: &[HeapHistogram],
) -> Vec<Result<crate::heap::HeapReport, (u64, anyhow::Error)>> {
    let mut reports = Vec::with_capacity(before.len());
    for first in before {
        let which = crate::heap::Which::Take {
            pid: first.pid,
            all: false,
            timeout: None,
        };
        let report = crate::heap::histogram(socket, which)
            .await
            .map(|after| crate::heap::HeapReport::new(after, Some(first.clone())));
        reports.push(report.map_err(|e| (first.id, e)));
    }
    reports
}

/// Writes each process's heap growth over the recording (or why there is none).
fn write_heaps(
    reports: &[Result<crate::heap::HeapReport, (u64, anyhow::Error)>],
    out: &mut impl Write,
) -> std::io::Result<()> {
    for report in reports {
        writeln!(out)?;
        match report {
            Ok(report) => crate::heap::render_text(report, HEAP_TOP, out)?,
            Err((id, e)) => writeln!(
                out,
                "Heap: no histogram after the recording to compare with histogram {id}: {e:#}"
            )?,
        }
    }
    Ok(())
}

/// Stops the session, unless the daemon already did.
async fn stop(client: &mut Client, id: u64, reason: &str) -> anyhow::Result<()> {
    match client
        .stop_session(pb::StopSessionRequest {
            session_id: id,
            reason: reason.to_owned(),
        })
        .await
    {
        Ok(_) => Ok(()),
        // The daemon ended it already (duration, targets gone): fine.
        Err(status) if status.code() == Code::FailedPrecondition => Ok(()),
        Err(status) => Err(client::status_error(status)).context("stopping the session"),
    }
}

/// Terminal signals after which a command that ignores them is killed.
const TERMINAL_SIGNALS_BEFORE_KILL: u32 = 3;

/// Passes the signals vmscope receives on to the recorded command.
struct Forwarder {
    pid: u32,
    signaller: spawn::Signaller,
    /// Signals from the terminal so far.
    from_terminal: u32,
}

impl Forwarder {
    fn new(child: &HeldChild) -> anyhow::Result<Forwarder> {
        Ok(Forwarder {
            pid: child.pid(),
            signaller: child
                .signaller()
                .context("cannot get a handle to signal the command")?,
            from_terminal: 0,
        })
    }

    /// Passes `received` on, unless the terminal sent it to the command too; kills a command
    /// that ignored [`TERMINAL_SIGNALS_BEFORE_KILL`] of the terminal's.
    fn pass_on(&mut self, received: signals::Received) {
        let pid = self.pid;
        let signal = if received.sent_by_process {
            eprintln!(
                "vmscope: passing {} on to the command (pid {pid}); recording until it exits",
                received.name()
            );
            received.signal
        } else {
            self.from_terminal += 1;
            if self.from_terminal < TERMINAL_SIGNALS_BEFORE_KILL {
                eprintln!(
                    "vmscope: {} from the terminal reached the command too; recording until it \
                     exits ({} more to kill it)",
                    received.name(),
                    TERMINAL_SIGNALS_BEFORE_KILL - self.from_terminal
                );
                return;
            }
            eprintln!("vmscope: the command (pid {pid}) is still running: killing it");
            libc::SIGKILL
        };
        // Through a pidfd: a command reaped meanwhile gets nothing, nor does its pid's next user.
        if let Err(e) = self.signaller.send(signal)
            && e.raw_os_error() != Some(libc::ESRCH)
        {
            eprintln!("vmscope: cannot signal the command: {e}");
        }
    }
}

/// Waits for the recorded command to end and reaps it, passing signals on meanwhile (the
/// session may have ended first, by its duration).
async fn reap(
    mut child: HeldChild,
    forwarder: &mut Forwarder,
    signals: &mut Signals,
) -> anyhow::Result<ExitStatus> {
    let mut reaped = tokio::task::spawn_blocking(move || child.reap());
    loop {
        tokio::select! {
            status = &mut reaped => {
                return status
                    .context("waiting for the recorded command")?
                    .context("waiting for the recorded command");
            }
            received = signals.next() => forwarder.pass_on(received),
        }
    }
}

async fn start(
    socket: &Path,
    options: &RecordOptions,
    child: Option<&HeldChild>,
) -> anyhow::Result<(Client, pb::Session)> {
    let mut client = client::connect(socket).await?;
    let request = pb::StartSessionRequest {
        pids: match (&options.target, child) {
            (Target::Pids(pids), _) => pids.clone(),
            (_, Some(child)) => vec![child.pid()],
            _ => Vec::new(),
        },
        system_wide: options.target == Target::System,
        frequency_hz: options.frequency_hz,
        duration: options
            .duration
            .map(prost_types::Duration::try_from)
            .transpose()
            .context("duration out of range")?,
        keep_samples: 0,
        call_graph: options.call_graph as i32,
        dwarf_stack_bytes: options.dwarf_stack_bytes,
        no_jvm_attach: options.no_jvm_attach,
        mode: options.mode as i32,
        min_block: options
            .min_block
            .map(prost_types::Duration::try_from)
            .transpose()
            .context("--min-block out of range")?,
        params: options
            .params
            .iter()
            .map(|(key, value)| pb::Param {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        counts: options.counts.clone(),
    };
    let session = client
        .start_session(request)
        .await
        .map_err(client::status_error)
        .context("the daemon refused to start the session")?
        .into_inner();
    Ok((client, session))
}

/// Waits until the session should end; returns the reason to give the daemon. `exited` is
/// the wait for the recorded command's exit, `forwarder` passes signals on to it.
async fn wait_for_end(
    client: &mut Client,
    id: u64,
    mut exited: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    mut forwarder: Option<&mut Forwarder>,
    signals: &mut Signals,
    ends_at: Option<tokio::time::Instant>,
) -> anyhow::Result<&'static str> {
    loop {
        // A session with a duration is looked at when it should have ended, not up to a poll
        // later.
        let pause = ends_at.map_or(POLL, |end| {
            end.saturating_duration_since(tokio::time::Instant::now())
                .clamp(POLL_AT_END, POLL)
        });
        tokio::select! {
            received = signals.next() => match forwarder.as_deref_mut() {
                Some(forwarder) => forwarder.pass_on(received),
                None => {
                    let reason = received.stop_reason();
                    eprintln!("vmscope: stopping: {reason}");
                    return Ok(reason);
                }
            },
            result = async { exited.as_mut().expect("guarded").await }, if exited.is_some() => {
                result.context("waiting for the command")?.context("waiting for the command")?;
                return Ok(COMMAND_EXITED);
            }
            _ = tokio::time::sleep(pause) => {
                let session = client
                    .get_session(pb::GetSessionRequest { session_id: id })
                    .await
                    .map_err(client::status_error)?
                    .into_inner();
                if session.state() == SessionState::Stopped {
                    return Ok("");
                }
            }
        }
    }
}

fn describe(target: &Target, session: &pb::Session) -> String {
    match target {
        Target::System => "all processes".into(),
        // Not yet exec'd: the daemon still sees a copy of vmscope under this pid.
        Target::Command(argv) => format!(
            "`{}` (pid {})",
            argv.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            session.targets.first().map_or(0, |t| t.pid)
        ),
        Target::Pids(_) => session
            .targets
            .iter()
            .map(|t| format!("pid {} ({})", t.pid, t.command))
            .collect::<Vec<_>>()
            .join(", "),
    }
}
