//! `vmscoped`, the vmscope daemon, as a library with a thin `main`.
//!
//! The data path, from the kernel to the client:
//!
//! ```text
//! perf cpu-clock tick ─▶ BPF program (filter by period, pid) ─▶ ring buffer
//!   ─▶ reader thread (bpf::reader) ─▶ session manager (session::manager):
//!        route to sessions, normalise (pid, ip) to a Location while the process lives
//!   ─▶ GetProfile / WatchSession: snapshot ─▶ symbolise each distinct location once
//!        (symbolize::*) ─▶ Profile ─▶ gRPC on a Unix socket (server)
//! ```
//!
//! Folders follow that path: `bpf/` is all that talks to the kernel's BPF side, `process/` reads
//! `/proc`, `symbolize/` names code, `unwind/` walks user stack copies, `session/` owns sessions,
//! `jvm/` asks HotSpot JVMs for their perf maps, `heap/` for their class histograms, `server/` speaks gRPC, `http/` serves pprof and
//! metrics over HTTP when asked (`--http`); `vocab/` holds the types
//! they share, under all of them (`docs/architecture.md` has the layers). The parsers live in
//! their own crate, `vmscope-parse` (`daemon/parse`): pure functions over bytes, unit-tested and
//! fuzzed, with no I/O; here I/O stays at the edges, in [`sys`].
#![deny(missing_docs)]

pub mod bpf;
pub mod cancel;
pub mod codemap;
pub mod config;
pub mod continuous;
pub mod heap;
pub mod http;
pub mod jvm;
pub mod process;
pub mod profile;
pub mod server;
pub mod session;
pub mod shares;
pub mod signals;
pub mod stats;
pub mod symbolize;
pub mod sys;
pub mod unwind;
pub mod vocab;

use std::{path::PathBuf, sync::Arc};

use anyhow::Context as _;
use tokio::sync::mpsc;
use vmscope_parse::kallsyms;
use vmscope_proto::v1::{
    FILE_DESCRIPTOR_SET, code_map_server::CodeMapServer, profiler_server::ProfilerServer,
};

use crate::{
    bpf::Sampler,
    session::ManagerConfig,
    symbolize::{Modules, Symbolizer},
};

/// Largest /proc/kallsyms the daemon reads (a few MiB on distribution kernels).
const MAX_KALLSYMS_BYTES: u64 = 256 << 20;

/// How the daemon runs.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// Unix socket to serve on.
    pub socket: PathBuf,
    /// The group the socket is given to (mode 0660), if any; 0666 otherwise.
    pub socket_group: Option<String>,
    /// Session manager settings.
    pub manager: ManagerConfig,
    /// Size of the BPF ring buffer in bytes: a power of two, at least a page.
    pub ring_buffer_bytes: u32,
    /// Fault injection for tests: delay the first ring drain after sampling starts.
    pub stall_reader: std::time::Duration,
    /// Bytes of the code store (JIT code descriptions from every code map): per user other
    /// than root, for all of them together, and in all.
    pub code_store: shares::ShareLimits,
    /// Directories of separate debug files, searched in order.
    pub debug_dirs: Vec<PathBuf>,
    /// Budget of the DWARF line tables, in bytes.
    pub dwarf_cache_bytes: u64,
    /// Connections per user and in all; lowered to fit the descriptor limit at start.
    pub connections: server::ConnectionLimits,
    /// The HTTP endpoint (pprof, metrics, health), when asked for: none by default.
    pub http: Option<http::HttpConfig>,
    /// Continuous profiling, when asked for: none by default.
    pub continuous: Option<continuous::ContinuousConfig>,
}

/// Time from SIGTERM or SIGINT to the end of the daemon's wind-down, whatever clients do; the
/// process ends at most [`signals::EXIT_SLACK`] later, whatever its threads do.
pub const SHUTDOWN_WITHIN: std::time::Duration = std::time::Duration::from_millis(2000);

/// Part of [`SHUTDOWN_WITHIN`] spent stopping running sessions; the rest lets clients take
/// their final profiles.
const STOP_SESSIONS_WITHIN: std::time::Duration = std::time::Duration::from_millis(1200);

/// Time between the GOAWAY that ends the connections still open and the exit.
const GOAWAY_BEFORE_EXIT: std::time::Duration = std::time::Duration::from_millis(300);

/// Loads the BPF sampler, serves the API on the socket until SIGINT or SIGTERM (SIGHUP is
/// logged, see [`signals`]), then removes the socket.
pub async fn run(config: DaemonConfig) -> anyhow::Result<()> {
    if sys::effective_uid() != 0 {
        anyhow::bail!(
            "vmscoped must run as root: it loads BPF programs and opens perf events for other \
             users' processes (you are uid {})",
            sys::effective_uid()
        );
    }
    let mut signals = signals::Signals::catch();
    let max_fds = raise_limits();
    let connection_limits = config.connections.fitted_to(max_fds);
    if connection_limits != config.connections {
        tracing::warn!(
            max_fds,
            total = connection_limits.total,
            non_root = connection_limits.non_root,
            "connection limits lowered to fit the descriptor limit"
        );
    }

    let page = 4096;
    if !config.ring_buffer_bytes.is_power_of_two() || config.ring_buffer_bytes < page {
        anyhow::bail!(
            "the ring buffer must be a power of two of at least {page} bytes, not {}",
            config.ring_buffer_bytes
        );
    }
    let (sampler, ring) = Sampler::load(config.ring_buffer_bytes).context(
        "loading the BPF sampler failed (vmscoped needs Linux 5.8+ with BPF ring buffers, \
         and root)",
    )?;
    let online_cpus = sampler.cpus().len() as u32;
    tracing::info!(cpus = online_cpus, "BPF sampler loaded");

    let kernel = kernel_symbols();
    let vdso = symbolize::vdso::load();
    if let Err(e) = &vdso {
        tracing::warn!("vDSO samples stay unnamed: {e}");
    }

    let modules = Arc::new(Modules::with_lines(symbolize::LineTables::new(
        config.dwarf_cache_bytes,
        config.debug_dirs.clone(),
    )));
    let codes = Arc::new(codemap::code::CodeStore::with_shares(config.code_store));
    let symbolizer = Symbolizer::new(
        modules.clone(),
        codes.clone(),
        Arc::new(kernel),
        Arc::new(vdso),
    );
    let (batch_tx, batch_rx) = mpsc::channel(64);
    let reader = Arc::new(bpf::ReaderControl::default());
    bpf::spawn_reader(ring, batch_tx, reader.clone(), config.stall_reader)
        .context("cannot start the ring-buffer reader thread")?;
    let manager_config = ManagerConfig {
        max_kernel_counter_fds: config
            .manager
            .max_kernel_counter_fds
            .min(usize::try_from(max_fds / 4).unwrap_or(usize::MAX)),
        ..config.manager.clone()
    };
    let kernel_counter_fds = manager_config.max_kernel_counter_fds;
    let (manager, _manager_thread) = session::spawn_manager(
        Box::new(sampler) as Box<dyn bpf::SamplerControl>,
        batch_rx,
        reader,
        modules,
        codes.clone(),
        manager_config,
        Box::new(sys::perf_event_max_sample_rate),
    )
    .context("cannot start the session manager")?;

    let listener = server::bind_socket(&config.socket)?;
    if let Some(group) = &config.socket_group {
        server::restrict_socket(&config.socket, group)?;
    }
    // Bound before anything is served, so that a taken or forbidden address fails the start.
    let http_listener = match &config.http {
        Some(http) => Some(
            tokio::net::TcpListener::bind(http.address)
                .await
                .with_context(|| format!("cannot listen on {} (--http)", http.address))?,
        ),
        None => None,
    };
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<ProfilerServer<server::ProfilerService>>()
        .await;
    health
        .set_serving::<CodeMapServer<server::CodeMapService>>()
        .await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let (shutdown, shutdown_rx) = tokio::sync::watch::channel(false);
    let (accepting, accepting_rx) = tokio::sync::watch::channel(true);
    let connections = server::Connections::new(connection_limits);
    let held = connections.clone();
    let limits = daemon_limits(&config, connection_limits, kernel_counter_fds);
    let mut service = server::ProfilerService::new(
        manager.clone(),
        symbolizer.clone(),
        online_cpus,
        shutdown_rx,
        connections.clone(),
        limits,
    );
    let code_maps = server::CodeMapService::new(manager.clone(), codes, service.heaps());
    if let Some(config) = config.continuous.clone() {
        tracing::info!(
            frequency_hz = config.frequency_hz,
            window_seconds = config.window.as_secs_f64(),
            budget_mib = config.budget_bytes >> 20,
            otlp = config.otlp.as_ref().map(|o| o.endpoint.as_str()),
            "profiling continuously"
        );
        let continuous = continuous::Continuous::start(&manager, symbolizer, config)
            .await
            .context("continuous profiling cannot start")?;
        service = service.with_continuous(continuous);
    }
    tracing::info!(socket = %config.socket.display(), "serving vmscope.v1");
    // systemd's Type=notify: the socket is bound and the service about to be served.
    if let Err(e) = sd_notify::notify(&[sd_notify::NotifyState::Ready]) {
        tracing::warn!("cannot tell systemd the daemon is ready: {e}");
    }
    if let (Some(http), Some(listener)) = (config.http, http_listener) {
        let state = http::HttpState::new(service.clone(), http);
        // New requests stop when the socket goes; those under way see their sessions stopped
        // with the others and get what was recorded, until the exit.
        let mut accepting = accepting_rx.clone();
        tracing::info!(address = %http.address, "serving pprof and metrics over HTTP");
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = accepting.wait_for(|&open| !open).await;
            };
            if let Err(e) = http::serve(listener, state, shutdown).await {
                tracing::error!("the HTTP endpoint stopped: {e}");
            }
        });
    }

    let (drained, drain) = tokio::sync::oneshot::channel::<()>();
    let served = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(connection_limits.streams_per_connection))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(ProfilerServer::new(service))
        .add_service(CodeMapServer::new(code_maps))
        // gRPC C-core clients send the socket path as :authority, which h2 refuses: the
        // accepted connections rewrite it.
        .serve_with_incoming_shutdown(
            server::connections::accept(listener, held, accepting_rx),
            async move {
                let _ = drain.await;
            },
        );
    tokio::pin!(served);
    tokio::select! {
        result = &mut served => {
            let _ = std::fs::remove_file(&config.socket);
            return result.context("the gRPC server failed");
        }
        () = signals.shutdown() => {}
    }
    shut_down(
        &config.socket,
        &manager,
        &accepting,
        &shutdown,
        &connections,
        drained,
        served,
    )
    .await;
    // Perf events, filters and maps are file descriptors: they go when the process exits.
    tracing::info!("vmscoped stopped");
    Ok(())
}

/// The daemon's exit after SIGINT or SIGTERM, within [`SHUTDOWN_WITHIN`] whatever happens: new
/// clients find no socket, running sessions stop, clients take their final profiles, then the
/// connections still open get a GOAWAY and are closed at the deadline.
async fn shut_down<F: std::future::Future>(
    socket: &std::path::Path,
    manager: &session::ManagerHandle,
    accepting: &tokio::sync::watch::Sender<bool>,
    shutdown: &tokio::sync::watch::Sender<bool>,
    connections: &server::Connections,
    drained: tokio::sync::oneshot::Sender<()>,
    served: std::pin::Pin<&mut F>,
) {
    let deadline = tokio::time::Instant::now() + SHUTDOWN_WITHIN;
    signals::exit_by(
        deadline.into_std() + signals::EXIT_SLACK,
        socket.to_path_buf(),
    );
    // New clients find no socket; those connected keep their connection for now.
    let _ = accepting.send(false);
    let _ = std::fs::remove_file(socket);
    let stopped = tokio::time::timeout(STOP_SESSIONS_WITHIN, stop_sessions(manager)).await;
    if stopped.is_err() {
        tracing::warn!("sessions still stopping after {STOP_SESSIONS_WITHIN:?}: exiting anyway");
    }
    // Watches send their session's final profile and end. Clients polling their session see
    // it stopped and take its final profile: serve them while they stay connected, then h2
    // says GOAWAY and requests in flight may finish until the deadline. Streams that never end
    // (a VM publishing its code map) and sockets that never spoke are cut there.
    let _ = shutdown.send(true);
    let goaway_at = deadline - GOAWAY_BEFORE_EXIT;
    while connections.held() > 0 && tokio::time::Instant::now() < goaway_at {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let _ = drained.send(());
    if tokio::time::timeout_at(deadline, served).await.is_err() {
        tracing::info!("connections still open at the shutdown deadline: closing them");
    }
}

/// Raises the limits on open files and locked memory as far as the daemon may (perf events and
/// BPF maps need both); answers the open-file limit.
fn raise_limits() -> u64 {
    let mut max_fds = 1024;
    for (resource, name) in [
        (libc::RLIMIT_NOFILE, "RLIMIT_NOFILE"),
        (libc::RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK"),
    ] {
        match sys::raise_limit(resource) {
            Ok(limit) if resource == libc::RLIMIT_NOFILE => max_fds = limit,
            Ok(_) => {}
            Err(e) => tracing::warn!("cannot raise {name}: {e}"),
        }
    }
    max_fds
}

/// The kernel's symbols from `/proc/kallsyms`; none (kernel samples stay unnamed, and the log
/// says why) when it cannot be read or hides its addresses.
fn kernel_symbols() -> kallsyms::KernelSymbols {
    let kernel = match sys::read_bounded("/proc/kallsyms".as_ref(), MAX_KALLSYMS_BYTES) {
        Ok(text) => kallsyms::parse_kallsyms(&text),
        Err(e) => {
            tracing::warn!("cannot read /proc/kallsyms, kernel samples stay unnamed: {e}");
            kallsyms::parse_kallsyms(b"")
        }
    };
    if kernel.addresses_hidden() {
        tracing::warn!(
            "/proc/kallsyms hides addresses (kernel.kptr_restrict); kernel samples stay unnamed"
        );
    }
    tracing::info!(symbols = kernel.len(), "kernel symbols read");
    kernel
}

/// Stops every running session, as a client's StopSession would, with the reason clients see.
async fn stop_sessions(manager: &session::ManagerHandle) {
    let root = session::Caller { uid: 0, pid: None };
    let Ok(sessions) = manager.list(root).await else {
        return;
    };
    let running = sessions
        .into_iter()
        .filter(|s| s.state != session::State::Stopped)
        .map(|s| {
            let manager = manager.clone();
            tokio::spawn(async move {
                let _ = manager
                    .stop(
                        root,
                        s.id,
                        "the daemon is shutting down (SIGTERM or SIGINT)",
                    )
                    .await;
            })
        })
        .collect::<Vec<_>>();
    for stop in running {
        let _ = stop.await;
    }
}

/// The limits `GetDaemonInfo` shows, by name.
fn daemon_limits(
    config: &DaemonConfig,
    connections: server::ConnectionLimits,
    kernel_counter_fds: usize,
) -> std::collections::BTreeMap<&'static str, u64> {
    let m = &config.manager;
    [
        ("connections_per_user", connections.per_user as u64),
        ("connections_non_root", connections.non_root as u64),
        ("connections_total", connections.total as u64),
        ("handshake_ms", connections.handshake.as_millis() as u64),
        (
            "streams_per_connection",
            u64::from(connections.streams_per_connection),
        ),
        ("running_sessions_per_user", m.max_running_per_user as u64),
        ("running_sessions_total", m.max_running_sessions as u64),
        ("stopped_sessions_per_user", m.max_stopped_per_user as u64),
        (server::MAX_FREQUENCY_LIMIT, u64::from(m.max_frequency_hz)),
        (
            "frequency_hz_per_user",
            u64::from(m.sampling_share.frequency_hz),
        ),
        (
            "stack_copy_bytes_per_second_per_user",
            m.sampling_share.stack_copy_bytes_per_second,
        ),
        ("kernel_event_fds", kernel_counter_fds as u64),
        ("watches_per_user", server::WATCHES.per_user as u64),
        ("watches_non_root", server::WATCHES.non_root as u64),
        ("watches_total", server::WATCHES.total as u64),
        (
            "watch_unread_ms",
            server::WATCH_UNREAD_LIMIT.as_millis() as u64,
        ),
        ("profile_builds_per_user", server::BUILDS.per_user as u64),
        ("profile_builds_non_root", server::BUILDS.non_root as u64),
        ("profile_builds_total", server::BUILDS.total as u64),
        ("stacks_per_session", m.max_stacks_per_session as u64),
        ("code_store_bytes", config.code_store.total as u64),
        (
            "code_store_bytes_per_user",
            config.code_store.per_user as u64,
        ),
        (
            "code_store_bytes_non_root",
            config.code_store.non_root as u64,
        ),
    ]
    .into_iter()
    .collect()
}
