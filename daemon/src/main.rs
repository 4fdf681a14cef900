//! `vmscoped`: the vmscope daemon. See the library documentation for how it works.

use std::{io::IsTerminal as _, path::PathBuf};

use clap::Parser;
use vmscope_proto::{DEFAULT_SOCKET, SOCKET_ENV};
use vmscoped::{DaemonConfig, server::ConnectionLimits, session::ManagerConfig};

/// Samples language-VM processes with eBPF and serves symbolised profiles over gRPC.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Signals: SIGTERM or SIGINT stops the daemon within 3 s (running sessions end \
                  and clients still connected get their final profiles); SIGHUP is logged and \
                  changes nothing, there being no configuration file to reload."
)]
struct Args {
    /// Configuration file: TOML whose keys are these long flags (`continuous = true`,
    /// `http = "127.0.0.1:6060"`); a flag on the command line wins over the file's. Read from
    /// /etc/vmscope/vmscoped.toml when that exists and this is not given.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Unix socket to serve on.
    #[arg(long, env = SOCKET_ENV, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Give the socket to this group, mode 0660: only its members (and root) may connect. By
    /// default the socket is 0666 and every local user may profile its own processes.
    #[arg(long, value_name = "GROUP")]
    socket_group: Option<String>,
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `vmscoped=debug`.
    #[arg(long, env = "VMSCOPE_LOG", default_value = "info")]
    log: String,
    /// Stopped sessions kept per user for later reports.
    #[arg(long, default_value_t = ManagerConfig::default().max_stopped_per_user)]
    keep_sessions: usize,
    /// Size of the BPF ring buffer in KiB (a power of two). The default holds a second of
    /// 1400 Hz sampling on 120 busy CPUs; raise it for bigger machines or higher frequencies.
    #[arg(long, default_value_t = vmscope_common::RING_BUFFER_BYTES / 1024)]
    ring_buffer_kib: u32,
    /// Memory for JIT code descriptions (names, pc maps, source positions) from every code
    /// map, in MiB. Codes stay while a live process's map or a session refers to them; new
    /// ones beyond this are refused (counted, logged) and their samples show as unnamed
    /// generated code.
    #[arg(long, default_value_t = vmscoped::codemap::code::DEFAULT_BUDGET_BYTES >> 20)]
    code_store_mib: usize,
    /// The most of the code store one user other than root may hold, in MiB (its processes'
    /// maps and its publications together). Default: a quarter of --code-store-mib.
    #[arg(long)]
    code_store_per_user_mib: Option<usize>,
    /// The most of the code store users other than root may hold together, in MiB; root keeps
    /// the rest. Default: three quarters of --code-store-mib.
    #[arg(long)]
    code_store_non_root_mib: Option<usize>,
    /// Directory of separate debug files (`.build-id/xx/rest.debug`, and `.gnu_debuglink` files
    /// under the binary's path), for symbols and source lines of stripped binaries; repeat for
    /// several, searched in order. Given, it replaces the default.
    #[arg(long = "debug-dir", value_name = "DIR", default_value = vmscope_parse::elf::GLOBAL_DEBUG_DIR)]
    debug_dirs: Vec<PathBuf>,
    /// Memory for DWARF line tables (source lines and inlined functions of native code), in
    /// MiB. Tables are loaded per binary on first use and read lazily (the sections stay in
    /// the file, and only the compilation units asked about are parsed); the least recently
    /// used are dropped beyond this, a binary whose compressed sections alone need more gets
    /// no lines, and every table goes once no session runs.
    #[arg(long, default_value_t = vmscoped::symbolize::lines::DEFAULT_DWARF_CACHE_BYTES >> 20)]
    dwarf_cache_mib: u64,
    /// Highest sampling frequency a session may ask for, in Hz (the kernel's
    /// kernel.perf_event_max_sample_rate still applies when it is lower). Every online CPU takes
    /// a timer interrupt at a session's rate, whatever runs on it: past about 10,000 Hz that
    /// slows the targets and the host many times over.
    #[arg(long, value_name = "HZ", default_value_t = ManagerConfig::default().max_frequency_hz,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_frequency: u32,
    /// Most distinct call stacks a session keeps. A sample whose stack is new beyond that is
    /// counted with its leaf alone under a "[truncated: stack limit]" caller (self time and
    /// totals stay whole; the session and its profile say how many samples). Memory for a
    /// session's stacks, and for each profile built from them, grows with this.
    #[arg(long, default_value_t = ManagerConfig::default().max_stacks_per_session,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_stacks_per_session: usize,
    /// The sum of the distinct frequencies that the running sessions of one user other than
    /// root may sample at, in Hz: each is a timer interrupt on every busy CPU. Root's sessions
    /// are not held to it.
    #[arg(long, value_name = "HZ",
          default_value_t = vmscoped::session::shares::DEFAULT_FREQUENCY_HZ,
          value_parser = clap::value_parser!(u32).range(1..))]
    frequency_per_user: u32,
    /// The user stack that the running DWARF sessions (`--call-graph dwarf`) of one user other
    /// than root may copy, in MiB per second on each busy CPU: frequency times copied bytes,
    /// summed over the distinct frequencies. Root's sessions are not held to it.
    #[arg(long, value_name = "MIB",
          default_value_t = vmscoped::session::shares::DEFAULT_STACK_COPY_BYTES_PER_SECOND >> 20)]
    stack_copy_per_user_mib: u64,
    /// Never ask HotSpot JVMs for their perf map (no trigger file in their /tmp, no SIGQUIT),
    /// whatever sessions ask: Java code is then named only by perf maps the JVMs write on
    /// their own (`jcmd PID Compiler.perfmap`, `-XX:+DumpPerfMapAtExit`).
    #[arg(long)]
    no_jvm_attach: bool,
    /// Leave HotSpot JVMs' Java frames to frame pointers: their stacks then end at the first
    /// compiled Java frame (unless `-XX:+PreserveFramePointer`). By default the daemon reads
    /// each JVM's vmStructs to unwind and name its compiled and interpreted frames, and copies
    /// the stacks of JVM targets of frame-pointer sessions to do so.
    #[arg(long)]
    no_java_frames: bool,
    /// Most connections one user other than root may hold at once.
    #[arg(long, default_value_t = ConnectionLimits::default().per_user)]
    max_connections_per_user: usize,
    /// Most connections all users other than root may hold together; root keeps the rest.
    #[arg(long, default_value_t = ConnectionLimits::default().non_root)]
    max_connections_non_root: usize,
    /// Most connections in all (lowered to half the descriptor limit if above it).
    #[arg(long, default_value_t = ConnectionLimits::default().total)]
    max_connections: usize,
    /// Time a new connection has to send the HTTP/2 preface before it is closed, in ms.
    #[arg(long, default_value_t = ConnectionLimits::default().handshake.as_millis() as u64)]
    handshake_ms: u64,
    /// The daemon's nice value (-20 to 19), set before it starts any thread: a host busy with
    /// tens of runnable programs would otherwise starve the reading of the ring buffer and the
    /// building of reports (at 0, a loaded host's 5 s system-wide session was reported 19 s
    /// after it ended). Left as it is if it cannot be set (not root, `RLIMIT_NICE`).
    #[arg(long, default_value_t = DEFAULT_NICE, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-20..=19))]
    nice: i32,
    /// Serve pprof profiles, metrics and a health check over HTTP on this TCP address
    /// (`127.0.0.1:6060`): `/debug/pprof/profile?seconds=N` (Go's net/http/pprof, which Parca,
    /// Grafana Alloy and `go tool pprof` read), `/metrics` (Prometheus), `/healthz`. Whoever
    /// reaches it may profile every process of the host, as root: keep it on loopback or a
    /// network only your scrapers reach. Nothing listens on TCP without it.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// Longest profile an HTTP request may ask for, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = vmscoped::http::DEFAULT_MAX_SECONDS,
          value_parser = clap::value_parser!(u32).range(1..=86_400))]
    http_max_seconds: u32,
    /// Sampling frequency of HTTP profiles, in Hz (Go's CPU profiler rate by default).
    #[arg(long, value_name = "HZ", default_value_t = vmscoped::http::DEFAULT_FREQUENCY_HZ,
          value_parser = clap::value_parser!(u32).range(1..))]
    http_frequency: u32,
    /// Profile every process of the host continuously, at a low rate, in windows kept in
    /// memory (`vmscope continuous` reads them; `--continuous-*` tune it).
    #[arg(long)]
    continuous: bool,
    /// Sampling frequency of continuous profiling, in Hz per CPU.
    #[arg(long, value_name = "HZ", default_value_t = vmscoped::continuous::DEFAULT_FREQUENCY_HZ,
          value_parser = clap::value_parser!(u32).range(1..))]
    continuous_frequency: u32,
    /// Length of a continuous profiling window, in seconds.
    #[arg(long, value_name = "SECONDS",
          default_value_t = vmscoped::continuous::DEFAULT_WINDOW.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    continuous_window: u64,
    /// Memory for kept continuous windows, in MiB; the oldest go first beyond it.
    #[arg(long, value_name = "MIB",
          default_value_t = (vmscoped::continuous::DEFAULT_BUDGET_BYTES >> 20) as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    continuous_budget_mib: u64,
    /// Export each continuous window as OTLP profiles to this collector's gRPC endpoint
    /// (`http://HOST:4317`): one resource per process, gzipped. A collector that is down or
    /// slow costs a bounded queue (--otlp-queue-mib), never sampling; drops are counted.
    #[arg(long, value_name = "URL", requires = "continuous")]
    otlp_endpoint: Option<String>,
    /// Memory for OTLP requests waiting for the collector, in MiB; the oldest go first beyond.
    #[arg(long, value_name = "MIB",
          default_value_t = (vmscoped::continuous::export::DEFAULT_QUEUE_BYTES >> 20) as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    otlp_queue_mib: u64,
    /// Fault injection for tests: the OTLP export's timeout (ms), 10 s by default.
    #[arg(long, default_value_t = vmscoped::continuous::export::DEFAULT_TIMEOUT.as_millis() as u64,
          hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    otlp_timeout_ms: u64,
    /// Fault injection for tests: delay the first drain of the ring buffer (ms) so that it
    /// fills and losses can be checked.
    #[arg(long, default_value_t = 0, hide = true)]
    stall_reader_ms: u64,
    /// Fault injection for tests: the session manager's housekeeping period (ms), 100 by
    /// default; a long one stands for a manager held up by other work.
    #[arg(long, default_value_t = 100, hide = true,
          value_parser = clap::value_parser!(u64).range(1..))]
    tick_ms: u64,
}

/// See `--nice`.
const DEFAULT_NICE: i32 = -10;

/// The command line with the configuration file's settings ahead of its own (see
/// `vmscoped::config`).
fn command_line() -> Result<Vec<std::ffi::OsString>, String> {
    let given: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let flags: Vec<String> = given
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str()?.strip_prefix("--"))
        .map(|a| a.split('=').next().unwrap_or(a).to_owned())
        .collect();
    let explicit = given
        .iter()
        .position(|a| a == "--config")
        .and_then(|i| given.get(i + 1))
        .map(PathBuf::from)
        .or_else(|| {
            given
                .iter()
                .find_map(|a| a.to_str()?.strip_prefix("--config="))
                .map(PathBuf::from)
        });
    let path = match explicit {
        Some(path) => path,
        None if std::path::Path::new(vmscoped::config::DEFAULT_PATH).exists() => {
            PathBuf::from(vmscoped::config::DEFAULT_PATH)
        }
        None => return Ok(given),
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read the configuration {}: {e}", path.display()))?;
    let settings = vmscoped::config::arguments(&text, |key| {
        key == "config" || flags.iter().any(|f| f == key)
    })
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut args = vec![given[0].clone()];
    args.extend(settings);
    args.extend(given.into_iter().skip(1));
    Ok(args)
}

fn main() -> std::process::ExitCode {
    // Before any thread: an arena is taken at a thread's first allocation.
    vmscoped::sys::use_one_malloc_arena();
    let args = match command_line() {
        Ok(args) => Args::parse_from(args),
        Err(e) => {
            eprintln!("vmscoped: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    // Before any thread: threads start with their creator's nice value.
    let niced = vmscoped::sys::set_nice(args.nice);
    // Colours only for a person at a terminal: a log file or journald gets plain text.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&args.log))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Err(e) = niced {
        tracing::warn!(
            "the daemon's nice value stays as it was, not {}: {e}",
            args.nice
        );
    }
    let config = DaemonConfig {
        ring_buffer_bytes: args.ring_buffer_kib.saturating_mul(1024),
        stall_reader: std::time::Duration::from_millis(args.stall_reader_ms),
        code_store: {
            let mib = |n: usize| n.saturating_mul(1 << 20);
            let shares = vmscoped::codemap::code::default_shares(mib(args.code_store_mib));
            vmscoped::shares::ShareLimits {
                per_user: args.code_store_per_user_mib.map_or(shares.per_user, mib),
                non_root: args.code_store_non_root_mib.map_or(shares.non_root, mib),
                ..shares
            }
        },
        debug_dirs: args.debug_dirs,
        dwarf_cache_bytes: args.dwarf_cache_mib.saturating_mul(1 << 20),
        socket: args.socket,
        socket_group: args.socket_group,
        continuous: args
            .continuous
            .then(|| vmscoped::continuous::ContinuousConfig {
                frequency_hz: args.continuous_frequency,
                window: std::time::Duration::from_secs(args.continuous_window),
                budget_bytes: usize::try_from(args.continuous_budget_mib.saturating_mul(1 << 20))
                    .unwrap_or(usize::MAX),
                otlp: args.otlp_endpoint.clone().map(|endpoint| {
                    vmscoped::continuous::export::OtlpConfig {
                        endpoint,
                        queue_bytes: usize::try_from(args.otlp_queue_mib.saturating_mul(1 << 20))
                            .unwrap_or(usize::MAX),
                        timeout: std::time::Duration::from_millis(args.otlp_timeout_ms),
                    }
                }),
            }),
        http: args.http.map(|address| vmscoped::http::HttpConfig {
            address,
            max_seconds: args.http_max_seconds,
            frequency_hz: args.http_frequency,
        }),
        connections: ConnectionLimits {
            per_user: args.max_connections_per_user,
            non_root: args.max_connections_non_root,
            total: args.max_connections,
            handshake: std::time::Duration::from_millis(args.handshake_ms),
            ..ConnectionLimits::default()
        },
        manager: ManagerConfig {
            max_stopped_per_user: args.keep_sessions,
            jvm_attach: !args.no_jvm_attach,
            java_frames: !args.no_java_frames,
            max_frequency_hz: args.max_frequency,
            max_stacks_per_session: args.max_stacks_per_session,
            tick: std::time::Duration::from_millis(args.tick_ms),
            sampling_share: vmscoped::session::shares::SamplingShare {
                frequency_hz: args.frequency_per_user,
                stack_copy_bytes_per_second: args.stack_copy_per_user_mib.saturating_mul(1 << 20),
            },
            ..ManagerConfig::default()
        },
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("vmscoped: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(vmscoped::run(config));
    // Profiles still being built for clients that are gone must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vmscoped: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration file the package installs names only flags that exist, with values
    /// they take: every setting in it, uncommented, parses.
    #[test]
    fn the_shipped_configuration_names_real_flags() {
        let shipped = include_str!("../../packaging/vmscoped.toml");
        let uncommented: String = shipped
            .lines()
            .filter_map(|line| line.strip_prefix('#'))
            .filter(|line| line.contains(" = "))
            .map(|line| format!("{line}\n"))
            .collect();
        let settings = vmscoped::config::arguments(&uncommented, |_| false).expect("TOML");
        assert!(settings.len() > 20, "{settings:?}");
        let mut args = vec!["vmscoped".into()];
        args.extend(settings);
        if let Err(e) = Args::try_parse_from(args) {
            panic!("packaging/vmscoped.toml: {e}");
        }
        assert!(Args::try_parse_from(["vmscoped", "--no-such-flag"]).is_err());
    }
}
