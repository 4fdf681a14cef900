//! Continuous profiling (`vmscoped --continuous`): every process of the host, always, at a low
//! rate, in fixed windows kept in memory under a byte budget and merged on request.
//!
//! The session manager takes the windows (`session/manager/windows.rs`): root's system-wide
//! sessions back to back, each ending where the next begins, with stacks by frame pointers.
//! Each final window comes here as a [`Snapshot`]; it is split by process and each process's
//! share is built into a profile of its own on a blocking thread, with the same symbolisation
//! as every session (JIT frames named from the code maps of their time, with their ranges), and
//! kept in the [`store::WindowStore`]. A query ([`Continuous::profile`]) selects windows by time,
//! process or executable and merges them ([`vmscope_model::merge`]); interactive sessions run
//! beside the windows at their own rates.

pub mod export;
mod process_facts;
pub mod store;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use tokio::sync::mpsc;
use vmscope_model::Profile;

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use vmscope_report::otlp::{ProcessProfile, export_request};

use crate::{
    cancel::Cancel,
    profile::{ProfileOptions, build_profile_unless},
    session::{CallGraphMode, ManagerHandle, SessionError, Snapshot, request::SessionRequest},
    symbolize::Symbolizer,
};
use process_facts::ProcessFacts;
use store::{Entry, Selection, WindowStore};

/// Sampling frequency of continuous profiling unless `--continuous-frequency` says otherwise:
/// 19 Hz per CPU, as Parca Agent and the OpenTelemetry eBPF profiler sample. Low enough that
/// a timer interrupt per CPU costs nothing measurable, high enough that a 10 s window of one
/// busy CPU holds 190 samples; and prime, so that it does not beat with work that runs at a
/// round rate (a 10 ms or 100 ms timer).
pub const DEFAULT_FREQUENCY_HZ: u32 = 19;

/// Length of a window unless `--continuous-window` says otherwise: the OTel eBPF profiler
/// reports every 5 s, Parca Agent every 10 s; 10 s windows halve the per-window cost.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);

/// Memory for kept windows (packed, see [`store`]) unless `--continuous-budget-mib` says
/// otherwise.
pub const DEFAULT_BUDGET_BYTES: usize = 32 << 20;

/// How far window building may fall behind before the manager drops the next final window
/// (counted) rather than hold it: a daemon further behind is starved. A busy host's first
/// windows look up the source lines of every binary they name, and take longer than later
/// ones: 1 s windows of 2,400 samples build in 40 to 180 ms in a release build, and of 3,700
/// samples (the debug daemon sampling itself too) in 0.3 s once warm but up to 1.1 s in the
/// first ten.
const MOST_BEHIND: Duration = Duration::from_secs(30);

/// Final windows of `window` that may wait to be built: [`MOST_BEHIND`]'s worth, and at least
/// four.
fn windows_queued(window: Duration) -> usize {
    let windows = MOST_BEHIND.as_secs_f64() / window.as_secs_f64().max(1.0);
    (windows.ceil() as usize).max(4)
}

/// How continuous profiling runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuousConfig {
    /// Sampling frequency.
    pub frequency_hz: u32,
    /// Length of a window.
    pub window: Duration,
    /// Most bytes of kept profiles.
    pub budget_bytes: usize,
    /// Where each window is exported as OTLP profiles, if anywhere.
    pub otlp: Option<export::OtlpConfig>,
}

impl Default for ContinuousConfig {
    fn default() -> Self {
        ContinuousConfig {
            frequency_hz: DEFAULT_FREQUENCY_HZ,
            window: DEFAULT_WINDOW,
            budget_bytes: DEFAULT_BUDGET_BYTES,
            otlp: None,
        }
    }
}

/// Continuous profiling under way: its kept windows, shared with the server.
#[derive(Debug, Clone)]
pub struct Continuous {
    config: ContinuousConfig,
    store: Arc<Mutex<WindowStore>>,
    exporter: Option<export::Exporter>,
}

impl Continuous {
    /// Starts taking windows through `manager`, built with `symbolizer`, and exporting them
    /// when `config.otlp` says where. Fails as a session start fails (the kernel refusing the
    /// events, the frequency above a limit), or on an OTLP endpoint that is not a URI.
    pub async fn start(
        manager: &ManagerHandle,
        symbolizer: Symbolizer,
        config: ContinuousConfig,
    ) -> Result<Continuous, SessionError> {
        let exporter = match &config.otlp {
            Some(otlp) => Some(export::Exporter::start(otlp).map_err(|e| {
                SessionError::InvalidArgument(format!(
                    "the OTLP endpoint {:?} is not usable: {e}",
                    otlp.endpoint
                ))
            })?),
            None => None,
        };
        let host = host_name();
        let (out, mut windows) = mpsc::channel::<Snapshot>(windows_queued(config.window));
        let request = SessionRequest {
            system_wide: true,
            frequency_hz: config.frequency_hz,
            duration: Some(config.window),
            call_graph: CallGraphMode::FramePointers,
            ..SessionRequest::default()
        };
        manager.start_windows(request, out).await?;
        let continuous = Continuous {
            store: Arc::new(Mutex::new(WindowStore::new(config.budget_bytes))),
            config,
            exporter,
        };
        let store = continuous.store.clone();
        let exporter = continuous.exporter.clone();
        let manager = manager.clone();
        tokio::spawn(async move {
            while let Some(window) = windows.recv().await {
                let id = window.session.id;
                let symbolizer = symbolizer.clone();
                let host = host.clone();
                let export = exporter.is_some();
                let built = tokio::task::spawn_blocking(move || {
                    let began = std::time::Instant::now();
                    let built = entries(window, &symbolizer, export.then_some(host.as_str()));
                    tracing::debug!(
                        id,
                        processes = built.entries.len(),
                        took = ?began.elapsed(),
                        "a continuous window built"
                    );
                    built
                })
                .await;
                match built {
                    Ok(built) => {
                        if let (Some(exporter), Some(request)) = (&exporter, built.export) {
                            exporter.push(request);
                        }
                        lock(&store).push_window(built.entries, built.lost_per_cpu);
                    }
                    Err(e) => tracing::error!("a continuous window could not be built: {e}"),
                }
                // Built: the binaries and codes its samples are in may go now.
                let _ = manager.window_built(id).await;
            }
        });
        Ok(continuous)
    }

    /// How it runs.
    pub fn config(&self) -> &ContinuousConfig {
        &self.config
    }

    /// The windows `selection` takes, merged: `None` when it takes none. Merging is CPU work
    /// in proportion to what is selected: call it on a blocking thread.
    pub fn profile(&self, selection: &Selection) -> Option<(Profile, Span)> {
        let (entries, windows, lost) = {
            let store = lock(&self.store);
            let entries = store.select(selection);
            let mut windows: Vec<SystemTime> = entries.iter().map(|e| e.start).collect();
            windows.sort_unstable();
            windows.dedup();
            let lost = store.lost(&windows);
            (entries, windows, lost)
        };
        let start = entries.iter().map(|e| e.start).min()?;
        let end = entries.iter().map(|e| e.end).max()?;
        let unpacked: Vec<Profile> = entries
            .iter()
            .filter_map(|e| {
                store::unpack(&e.packed)
                    .inspect_err(|err| {
                        tracing::error!(pid = e.pid, "a kept window does not unpack: {err}")
                    })
                    .ok()
            })
            .collect();
        let parts: Vec<&Profile> = unpacked.iter().collect();
        let mut profile = vmscope_model::merge::merge(&parts, self.config.frequency_hz);
        // The windows' time, whatever processes they hold: a process's parts overlap in time
        // with other processes' and are not added.
        profile.duration_seconds = windows.len() as f64 * self.config.window.as_secs_f64();
        // Losses are the windows', not one process's: never hidden by a filter.
        profile.lost_samples = lost.iter().sum();
        profile.lost_samples_per_cpu = lost;
        Some((
            profile,
            Span {
                start,
                end,
                windows: windows.len(),
            },
        ))
    }

    /// Its counters (the exporter's with them), by the names `vmscope info` shows.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let store = lock(&self.store);
        let mut values = vec![
            ("continuous_windows_stored", store.counters.windows),
            ("continuous_entries_dropped", store.counters.entries_dropped),
            ("continuous_bytes_dropped", store.counters.bytes_dropped),
        ];
        if let Some(exporter) = &self.exporter {
            values.extend(exporter.counter_values());
        }
        values
    }

    /// What it holds now (gauges), by the names `vmscope info` shows.
    pub fn gauges(&self) -> Vec<(&'static str, u64)> {
        let store = lock(&self.store);
        let mut values = vec![
            ("continuous_entries", store.len() as u64),
            ("continuous_bytes", store.bytes() as u64),
        ];
        if let Some(exporter) = &self.exporter {
            let (requests, bytes) = exporter.queued();
            values.push(("otlp_queued", requests as u64));
            values.push(("otlp_queued_bytes", bytes as u64));
        }
        values
    }
}

/// The time a merged continuous profile covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// When its first window began.
    pub start: SystemTime,
    /// When its last window ended.
    pub end: SystemTime,
    /// How many windows it merges.
    pub windows: usize,
}

fn lock(store: &Mutex<WindowStore>) -> std::sync::MutexGuard<'_, WindowStore> {
    // A panic while pushing leaves a store that is still whole: entries are pushed one by one.
    store.lock().unwrap_or_else(|e| e.into_inner())
}

/// A final window, built.
struct BuiltWindow {
    /// One entry per process.
    entries: Vec<Entry>,
    /// Samples it lost per CPU.
    lost_per_cpu: Vec<u64>,
    /// Its OTLP export request, when asked for.
    export: Option<ExportProfilesServiceRequest>,
}

/// A final window as one entry per process, each built into its own profile; with its OTLP
/// export request from `host` when given.
fn entries(window: Snapshot, symbolizer: &Symbolizer, host: Option<&str>) -> BuiltWindow {
    let _in_use = symbolizer.modules().in_use();
    let start = window.session.started_at;
    let end = start + window.duration;
    // Kernel functions are root's to see, as every reader of continuous profiles is.
    let options = ProfileOptions { hide_kernel: None };
    let built: Vec<(Entry, Profile, ProcessFacts)> = window
        .by_process()
        .into_iter()
        .filter_map(|(pid, part)| {
            let command = part.commands.get(&pid).cloned().unwrap_or_default();
            let executable = part.executables.get(&pid).cloned().unwrap_or_default();
            let samples = part.total_samples;
            let profile = build_profile_unless(part, symbolizer, &options, &Cancel::never())?;
            let facts = if host.is_some() {
                ProcessFacts::read(pid)
            } else {
                ProcessFacts::default()
            };
            let packed = store::pack(&profile)
                .inspect_err(|e| tracing::error!(pid, "a window's profile does not pack: {e}"))
                .ok()?;
            let entry = Entry {
                start,
                end,
                pid,
                command,
                executable,
                samples,
                packed: packed.into(),
            };
            Some((entry, profile, facts))
        })
        .collect();
    let export = host.map(|host| {
        let processes: Vec<ProcessProfile<'_>> = built
            .iter()
            .map(|(entry, profile, facts)| ProcessProfile {
                profile,
                pid: entry.pid,
                executable: &entry.executable,
                command: &entry.command,
                container_id: facts.container_id.as_deref(),
                service_name: facts.service_name.as_deref(),
                namespace_pid: facts.namespace_pid,
                start,
                duration: window.duration,
                period_ns: window.period_ns,
            })
            .collect();
        export_request(&processes, host)
    });
    BuiltWindow {
        entries: built.into_iter().map(|(entry, ..)| entry).collect(),
        lost_per_cpu: window.lost_per_cpu,
        export,
    }
}

/// This host's name, as `host.name` says it.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_wait_for_thirty_seconds_of_building_and_four_at_least() {
        assert_eq!(windows_queued(Duration::from_secs(1)), 30);
        assert_eq!(windows_queued(Duration::from_secs(7)), 5);
        assert_eq!(windows_queued(DEFAULT_WINDOW), 4);
        assert_eq!(windows_queued(Duration::from_secs(600)), 4);
    }
}
