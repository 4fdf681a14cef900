//! The daemon's opt-in HTTP endpoint (`vmscoped --http ADDR`), for the tools a fleet already
//! runs:
//!
//! - `GET /debug/pprof/profile?seconds=N` ([`pprof`]): Go's `net/http/pprof` contract, which
//!   Parca's scraper, Grafana Alloy's `pyroscope.scrape` and `go tool pprof` speak: a gzipped
//!   pprof of the next N seconds, system-wide or of `pid=`/`exe=`;
//! - `GET /metrics` ([`metrics`]): the daemon's counters and gauges, its memory and CPU time,
//!   in the OpenMetrics text format Prometheus scrapes;
//! - `GET /healthz`: `ok` while the session manager answers.
//!
//! Nothing listens on TCP unless `--http` says where. Whoever reaches that address profiles
//! every process of the host as root would (there are no peer credentials on TCP to tell
//! users apart): bind it to loopback, or to a network only the operators' scrapers reach.

pub mod metrics;
pub mod pprof;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{Router, http::StatusCode, routing::get};
use tokio::sync::Semaphore;

use crate::{server::ProfilerService, session::Caller};

/// Most HTTP profiles under way at once: each is a session of its own, a timer interrupt on
/// every CPU at its rate. Beyond it, a request is answered 503 at once.
pub const MAX_PROFILES_IN_FLIGHT: usize = 4;

/// Longest profile a request may ask for unless `--http-max-seconds` says otherwise.
pub const DEFAULT_MAX_SECONDS: u32 = 300;

/// Frequency of HTTP profiles unless `--http-frequency` says otherwise: Go's own CPU profiler
/// rate, which `go tool pprof` users and scrapers expect, and cheap enough system-wide on a
/// big host (100 timer interrupts per second per CPU).
pub const DEFAULT_FREQUENCY_HZ: u32 = 100;

/// Where and how the HTTP endpoint serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpConfig {
    /// The TCP address to listen on.
    pub address: SocketAddr,
    /// Longest profile a request may ask for.
    pub max_seconds: u32,
    /// Sampling frequency of its profiles.
    pub frequency_hz: u32,
}

/// What every handler shares: the gRPC service's manager and profile builds, and the HTTP
/// endpoint's own limits and counters.
#[derive(Debug, Clone)]
pub struct HttpState {
    service: ProfilerService,
    config: HttpConfig,
    in_flight: Arc<Semaphore>,
    counters: Arc<metrics::HttpCounters>,
}

impl HttpState {
    /// The state of an endpoint serving `service`'s profiles as `config` says.
    pub fn new(service: ProfilerService, config: HttpConfig) -> HttpState {
        HttpState {
            service,
            config,
            in_flight: Arc::new(Semaphore::new(MAX_PROFILES_IN_FLIGHT)),
            counters: Arc::default(),
        }
    }
}

/// Who an HTTP request acts as: root, the operator who opened the endpoint (see the module
/// docs).
const OPERATOR: Caller = Caller { uid: 0, pid: None };

/// The endpoint's routes.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/debug/pprof/profile", get(pprof::profile))
        .route("/metrics", get(metrics::metrics))
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .with_state(state)
}

/// Serves the endpoint on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: HttpState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// How long `/healthz` waits for the session manager before it says the daemon is unwell.
const HEALTH_WAIT: Duration = Duration::from_secs(2);

async fn healthz(
    axum::extract::State(state): axum::extract::State<HttpState>,
) -> (StatusCode, &'static str) {
    match tokio::time::timeout(HEALTH_WAIT, state.service.manager().counters()).await {
        Ok(Ok(_)) => (StatusCode::OK, "ok\n"),
        Ok(Err(_)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the session manager has stopped\n",
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the session manager did not answer within 2 s\n",
        ),
    }
}

async fn not_found(uri: axum::http::Uri) -> (StatusCode, String) {
    (
        StatusCode::NOT_FOUND,
        format!(
            "no such page: {}; this endpoint serves /debug/pprof/profile?seconds=N, /metrics \
             and /healthz\n",
            uri.path()
        ),
    )
}
