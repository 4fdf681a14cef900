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
//! `jvm/` asks HotSpot JVMs for their perf maps, `server/` speaks gRPC. The parsers live in their own crate, `vmscope-parse` (`daemon/parse`):
//! pure functions over bytes, unit-tested and fuzzed, with no I/O; here I/O stays at the edges,
//! in [`sys`].
#![deny(missing_docs)]

pub mod bpf;
pub mod codemap;
pub mod jvm;
pub mod process;
pub mod profile;
pub mod server;
pub mod session;
pub mod symbolize;
pub mod sys;
pub mod unwind;

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
    /// Session manager settings.
    pub manager: ManagerConfig,
    /// Size of the BPF ring buffer in bytes: a power of two, at least a page.
    pub ring_buffer_bytes: u32,
    /// Fault injection for tests: delay the first ring drain after sampling starts.
    pub stall_reader: std::time::Duration,
    /// Budget of the code store (JIT code descriptions from every code map), in bytes.
    pub code_store_bytes: usize,
    /// Directories of separate debug files, searched in order.
    pub debug_dirs: Vec<PathBuf>,
    /// Budget of the DWARF line tables, in bytes.
    pub dwarf_cache_bytes: u64,
}

/// Loads the BPF sampler, serves the API on the socket until SIGINT or SIGTERM, then removes
/// the socket.
pub async fn run(config: DaemonConfig) -> anyhow::Result<()> {
    if sys::effective_uid() != 0 {
        anyhow::bail!(
            "vmscoped must run as root: it loads BPF programs and opens perf events for other \
             users' processes (you are uid {})",
            sys::effective_uid()
        );
    }
    for (resource, name) in [
        (libc::RLIMIT_NOFILE, "RLIMIT_NOFILE"),
        (libc::RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK"),
    ] {
        if let Err(e) = sys::raise_limit(resource) {
            tracing::warn!("cannot raise {name}: {e}");
        }
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
    let vdso = symbolize::vdso::load();
    if let Err(e) = &vdso {
        tracing::warn!("vDSO samples stay unnamed: {e}");
    }

    let modules = Arc::new(Modules::with_lines(symbolize::LineTables::new(
        config.dwarf_cache_bytes,
        config.debug_dirs.clone(),
    )));
    let codes = Arc::new(codemap::code::CodeStore::with_budget(
        config.code_store_bytes,
    ));
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
    let (manager, _manager_thread) = session::spawn_manager(
        Box::new(sampler) as Box<dyn bpf::SamplerControl>,
        batch_rx,
        reader,
        modules,
        codes.clone(),
        config.manager.clone(),
        Box::new(sys::perf_event_max_sample_rate),
    )
    .context("cannot start the session manager")?;

    let listener = server::bind_socket(&config.socket)?;
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
    let code_maps = server::CodeMapService::new(manager.clone(), codes);
    let service = server::ProfilerService::new(manager, symbolizer, online_cpus, shutdown_rx);
    tracing::info!(socket = %config.socket.display(), "serving vmscope.v1");

    let served = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(ProfilerServer::new(service))
        .add_service(CodeMapServer::new(code_maps))
        .serve_with_incoming_shutdown(
            // gRPC C-core clients send the socket path as :authority, which h2 refuses.
            server::authority::incoming(listener),
            async move {
                shutdown_signal().await;
                // Open watches would hold the graceful shutdown forever: end them.
                let _ = shutdown.send(true);
            },
        )
        .await;
    let _ = std::fs::remove_file(&config.socket);
    // Perf events, filters and maps are file descriptors: they go when the process exits.
    served.context("the gRPC server failed")?;
    tracing::info!("vmscoped stopped");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::warn!("cannot listen for SIGTERM: {e}");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}
