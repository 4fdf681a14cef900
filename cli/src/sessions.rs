//! `vmscope sessions`, `vmscope stop`, `vmscope report`, `vmscope info`: the commands that
//! look at or act on sessions that already exist.

use std::{io::Write, path::Path, time::Duration};

use anyhow::Context as _;
use vmscope_proto::v1 as pb;

use crate::client;

/// Prints the caller's sessions as a table.
pub async fn list(socket: &Path, out: &mut impl Write) -> anyhow::Result<()> {
    let mut client = client::connect(socket).await?;
    let sessions = client
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .map_err(client::status_error)?
        .into_inner()
        .sessions;
    if sessions.is_empty() {
        writeln!(out, "no sessions")?;
        return Ok(());
    }
    writeln!(
        out,
        "{:>4}  {:<8} {:>9} {:>9} {:>9}  {:<32} ENDED BECAUSE",
        "ID", "STATE", "SAMPLES", "ELAPSED", "FREQ", "TARGETS"
    )?;
    for s in &sessions {
        writeln!(
            out,
            "{:>4}  {:<8} {:>9} {:>8.1}s {:>6} Hz  {:<32} {}",
            s.id,
            state_name(s),
            s.samples,
            elapsed(s).as_secs_f64(),
            s.frequency_hz,
            targets(s),
            s.stop_reason
        )?;
    }
    Ok(())
}

/// Stops a session and prints what it collected.
pub async fn stop(socket: &Path, id: u64, out: &mut impl Write) -> anyhow::Result<()> {
    let mut client = client::connect(socket).await?;
    let session = client
        .stop_session(pb::StopSessionRequest {
            session_id: id,
            reason: String::new(),
        })
        .await
        .map_err(client::status_error)
        .with_context(|| format!("cannot stop session {id}"))?
        .into_inner();
    writeln!(
        out,
        "session {id} stopped: {} samples in {:.1} s; `vmscope report {id}` prints its report",
        session.samples,
        elapsed(&session).as_secs_f64()
    )?;
    Ok(())
}

/// The samples a report is of: its threads (`--tid`, `--thread`; every thread when both are
/// empty) and labels (`--label`; every sample when empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Threads {
    /// Thread ids.
    pub tids: Vec<u32>,
    /// Shell-style patterns of thread names.
    pub names: Vec<String>,
    /// `KEY=VALUE` labels the samples' threads had set (`KEY=`: no label of KEY).
    pub labels: Vec<String>,
}

impl Threads {
    /// The request for session `id`'s profile of these samples.
    pub fn request(&self, id: u64) -> pb::GetProfileRequest {
        pb::GetProfileRequest {
            session_id: id,
            pprof: false,
            tids: self.tids.clone(),
            thread_names: self.names.clone(),
            labels: self.labels.clone(),
        }
    }

    /// These samples, of those also with `label` (`KEY=VALUE`).
    pub fn with_label(&self, label: String) -> Threads {
        let mut cut = self.clone();
        cut.labels.push(label);
        cut
    }
}

/// A session's profile (a snapshot if it still runs), of the threads `threads` names.
pub async fn profile(
    socket: &Path,
    id: u64,
    threads: &Threads,
) -> anyhow::Result<vmscope_model::Profile> {
    let mut client = client::connect(socket).await?;
    Ok(client
        .get_profile(threads.request(id))
        .await
        .map_err(client::status_error)
        .with_context(|| format!("cannot get the profile of session {id}"))?
        .into_inner()
        .into())
}

/// The continuous profile `request` selects.
pub async fn continuous(
    socket: &Path,
    request: pb::GetContinuousProfileRequest,
) -> anyhow::Result<vmscope_model::Profile> {
    let mut client = client::connect(socket).await?;
    Ok(client
        .get_continuous_profile(request)
        .await
        .map_err(client::status_error)
        .context("cannot get the continuous profile")?
        .into_inner()
        .into())
}

/// Prints what the daemon and the kernel can do, the daemon's limits, what it holds now (gauges)
/// and its counters; as text, or as one JSON object.
pub async fn info(socket: &Path, json: bool, out: &mut impl Write) -> anyhow::Result<()> {
    let mut client = client::connect(socket).await?;
    let info = client
        .get_daemon_info(pb::GetDaemonInfoRequest {})
        .await
        .map_err(client::status_error)?
        .into_inner();
    if json {
        let sorted = |m: &std::collections::HashMap<String, u64>| {
            m.iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::from(*v)))
                .collect::<serde_json::Map<_, _>>()
        };
        let value = serde_json::json!({
            "version": info.version,
            "socket": socket.display().to_string(),
            "online_cpus": info.online_cpus,
            "default_frequency_hz": info.default_frequency_hz,
            "max_frequency_hz": info.max_frequency_hz,
            "hardware_events": info.hardware_events,
            "counters": sorted(&info.counters),
            "gauges": sorted(&info.gauges),
            "limits": sorted(&info.limits),
        });
        serde_json::to_writer_pretty(&mut *out, &value)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "vmscoped {} at {}", info.version, socket.display())?;
    writeln!(out, "online CPUs:          {}", info.online_cpus)?;
    writeln!(
        out,
        "frequency:            {} Hz by default, at most {} Hz (the lower of vmscoped \
         --max-frequency and kernel.perf_event_max_sample_rate)",
        info.default_frequency_hz, info.max_frequency_hz
    )?;
    writeln!(
        out,
        "hardware PMU:         {}",
        if info.hardware_events {
            "yes"
        } else {
            "no (sampling uses the software cpu-clock, which needs none)"
        }
    )?;
    for (title, values) in [
        ("limits:", info.limits),
        ("held now:", info.gauges),
        ("counters:", info.counters),
    ] {
        writeln!(out, "{title}")?;
        let mut values: Vec<_> = values.into_iter().collect();
        values.sort();
        let width = values.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
        for (name, value) in values {
            writeln!(out, "  {name:<width$} {value}")?;
        }
    }
    Ok(())
}

fn state_name(s: &pb::Session) -> &'static str {
    match s.state() {
        pb::SessionState::Running => "running",
        pb::SessionState::Stopped => "stopped",
        pb::SessionState::Stopping => "stopping",
        pb::SessionState::Unspecified => "unknown",
    }
}

fn elapsed(s: &pb::Session) -> Duration {
    s.elapsed
        .and_then(|d| Duration::try_from(d).ok())
        .unwrap_or_default()
}

fn targets(s: &pb::Session) -> String {
    if s.system_wide {
        return "system-wide".into();
    }
    let all: Vec<String> = s
        .targets
        .iter()
        .map(|t| format!("{} ({})", t.pid, t.command))
        .collect();
    let joined = all.join(", ");
    if joined.chars().count() > 32 {
        format!("{} processes", all.len())
    } else {
        joined
    }
}
