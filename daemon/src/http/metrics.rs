//! `GET /metrics`: the daemon's counters and gauges (those `vmscope info` shows), the HTTP
//! endpoint's own, and the process's memory and CPU time, in the Prometheus text exposition
//! format (0.0.4), which Prometheus scrapes and `promtool check metrics` checks.
//!
//! Every counter `NAME` of `vmscope info` is `vmscoped_NAME_total`, every gauge
//! `vmscoped_NAME` ([`metric`] says the exceptions: a name ending in `_total` or in `_ms`); the
//! process's figures take the names every Prometheus client gives them
//! (`process_resident_memory_bytes`, `process_cpu_seconds_total`, `process_open_fds`), so that
//! dashboards made for other daemons read them.
//!
//! Written here rather than with `prometheus-client`: that crate writes OpenMetrics only, whose
//! counter families (`# TYPE x counter` over samples `x_total`) the text format's readers,
//! `promtool` among them, take for untyped metrics without help; and the page is a few lines
//! of text.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    sync::atomic::{AtomicU64, Ordering::Relaxed},
};

use axum::{
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};

use super::HttpState;

/// What the HTTP endpoint counts of its own profiles.
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// Profiles answered.
    pub profiles_served: AtomicU64,
    /// Profile requests refused for what they asked (a 4xx: bad parameters, no such process,
    /// too many under way...).
    pub profiles_refused: AtomicU64,
    /// Profile requests that failed on the daemon's side (a 5xx).
    pub profiles_failed: AtomicU64,
}

impl HttpCounters {
    /// Name and value of each.
    pub fn values(&self) -> [(&'static str, u64); 3] {
        [
            ("http_profiles_served", self.profiles_served.load(Relaxed)),
            ("http_profiles_refused", self.profiles_refused.load(Relaxed)),
            ("http_profiles_failed", self.profiles_failed.load(Relaxed)),
        ]
    }
}

/// The process's own figures, from `/proc/self`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessFigures {
    /// Resident memory, in bytes.
    pub resident_bytes: u64,
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
}

impl ProcessFigures {
    /// The daemon's own, now; a figure that cannot be read is 0.
    pub fn read() -> ProcessFigures {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let cpu_ticks = std::fs::read("/proc/self/stat")
            .ok()
            .and_then(|stat| vmscope_parse::stat::parse_stat(&stat).ok())
            .map_or(0, |stat| stat.utime_ticks + stat.stime_ticks);
        let ticks = crate::sys::clock_ticks_per_second().max(1) as f64;
        ProcessFigures {
            resident_bytes: resident_kib(&status) * 1024,
            cpu_seconds: cpu_ticks as f64 / ticks,
            open_fds: std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64),
        }
    }
}

/// `VmRSS` of a `/proc/PID/status`, in KiB; 0 when absent.
fn resident_kib(status: &str) -> u64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The metrics page for `counters` and `gauges` (by `vmscope info`'s names) and the process's
/// `figures`.
pub fn render(
    counters: &BTreeMap<&'static str, u64>,
    gauges: &BTreeMap<&'static str, u64>,
    figures: ProcessFigures,
) -> String {
    let mut page = String::new();
    for (&name, &value) in counters {
        let (name, value) = metric(name, value);
        family(
            &mut page,
            &format!("vmscoped_{name}_total"),
            Kind::Counter,
            &format!("vmscope info's counter {name}"),
            &value,
        );
    }
    for (&name, &value) in gauges {
        let (name, value) = metric(name, value);
        family(
            &mut page,
            &format!("vmscoped_{name}"),
            Kind::Gauge,
            &format!("vmscope info's gauge {name}"),
            &value,
        );
    }
    family(
        &mut page,
        "process_resident_memory_bytes",
        Kind::Gauge,
        "Resident memory of the daemon in bytes",
        &figures.resident_bytes,
    );
    family(
        &mut page,
        "process_cpu_seconds_total",
        Kind::Counter,
        "User and system CPU time the daemon used in seconds",
        &figures.cpu_seconds,
    );
    family(
        &mut page,
        "process_open_fds",
        Kind::Gauge,
        "File descriptors the daemon holds open",
        &figures.open_fds,
    );
    page
}

/// A metric's type, as the format's `# TYPE` line says it.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

/// Writes one metric family of one sample: its help, its type and its value.
fn family(page: &mut String, name: &str, kind: Kind, help: &str, value: &dyn std::fmt::Display) {
    let kind = match kind {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
    };
    // Help text escapes `\` and line feeds; the names are ours, already in the format's alphabet.
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = write!(
        page,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
    );
}

/// A counter's or gauge's metric name (before `vmscoped_` and a counter's `_total`) and value,
/// from its `vmscope info` name and value: the same, except that a name ending in `_total`
/// (the daemon's total limit, as in `connections_refused_total`) ends in `_overall`, since
/// the format keeps that suffix for a counter's own, and milliseconds (`_ms`) are seconds, the
/// format's unit of time.
pub fn metric(name: &str, value: u64) -> (String, MetricValue) {
    if let Some(stem) = name.strip_suffix("_ms") {
        return (
            format!("{stem}_seconds"),
            MetricValue::Seconds(value as f64 / 1000.0),
        );
    }
    let name = match name.strip_suffix("_total") {
        Some(stem) => format!("{stem}_overall"),
        None => name.to_owned(),
    };
    (name, MetricValue::Count(value))
}

/// A metric's value: a count, or a time in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MetricValue {
    /// A whole number of things.
    Count(u64),
    /// Seconds.
    Seconds(f64),
}

impl std::fmt::Display for MetricValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetricValue::Count(n) => write!(f, "{n}"),
            MetricValue::Seconds(s) => write!(f, "{s}"),
        }
    }
}

/// The route's handler.
pub async fn metrics(State(state): State<HttpState>) -> Response {
    let (mut counters, gauges) = match state.service.daemon_counters().await {
        Ok(values) => values,
        Err(status) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the daemon's counters cannot be read: {}\n",
                    status.message()
                ),
            )
                .into_response();
        }
    };
    counters.extend(state.counters.values());
    let figures = tokio::task::spawn_blocking(ProcessFigures::read)
        .await
        .unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&counters, &gauges, figures),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_gauges_and_the_process_are_named_as_prometheus_expects() {
        let counters = BTreeMap::from([
            ("samples_routed", 7),
            ("http_profiles_served", 2),
            ("connections_refused_total", 3),
        ]);
        let gauges = BTreeMap::from([("sessions_running", 1)]);
        let figures = ProcessFigures {
            resident_bytes: 64 << 20,
            cpu_seconds: 1.5,
            open_fds: 12,
        };
        let page = render(&counters, &gauges, figures);
        for line in [
            "# TYPE vmscoped_samples_routed_total counter",
            "vmscoped_samples_routed_total 7",
            "vmscoped_http_profiles_served_total 2",
            "vmscoped_connections_refused_overall_total 3",
            "# TYPE vmscoped_sessions_running gauge",
            "vmscoped_sessions_running 1",
            "process_resident_memory_bytes 67108864",
            "process_cpu_seconds_total 1.5",
            "process_open_fds 12",
        ] {
            assert!(page.lines().any(|l| l == line), "{line:?} missing:\n{page}");
        }
        assert_eq!(
            metric("jvm_perf_map_request_ms", 1500),
            (
                "jvm_perf_map_request_seconds".into(),
                MetricValue::Seconds(1.5)
            )
        );
    }

    #[test]
    fn the_process_figures_are_read_from_proc() {
        assert_eq!(resident_kib("Name:\tx\nVmRSS:\t  2048 kB\n"), 2048);
        assert_eq!(resident_kib("Name:\tx\n"), 0);
        // A command with spaces and a parenthesis: the project's stat parser, which the CPU
        // time is read with, counts fields after the last ')'.
        let cpu_ticks = |stat: &str| {
            vmscope_parse::stat::parse_stat(stat.as_bytes())
                .map_or(0, |s| s.utime_ticks + s.stime_ticks)
        };
        let stat = "42 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100 0 0";
        assert_eq!(cpu_ticks(stat), 300);
        assert_eq!(cpu_ticks("garbage"), 0);
        let me = ProcessFigures::read();
        assert!(me.resident_bytes > 0 && me.open_fds > 0, "{me:?}");
    }
}
