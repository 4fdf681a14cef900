//! The gRPC face of the daemon: `vmscope.v1.Profiler`, gRPC health and reflection, on a Unix
//! socket.
//!
//! Handlers are thin: they learn who the caller is from the socket's peer credentials, pass the
//! request to the session manager, and turn its typed errors into status codes. Profiles are
//! symbolised on blocking threads. Connections reach h2 through [`authority`], so that any
//! client's `:authority` is accepted.

pub mod authority;
pub mod builds;
pub mod connections;
pub mod convert;
mod heap_stream;
mod listen;
mod publish;
pub(crate) mod status;
mod watches;

use std::{
    collections::BTreeMap,
    pin::Pin,
    sync::{Arc, atomic::Ordering::Relaxed},
    time::Duration,
};

use crate::shares::{ShareLimits, Shares};
pub use builds::BUILDS;
use builds::Builds;
pub use connections::{ConnectionLimits, Connections};
pub use listen::{bind_socket, restrict_socket};
pub use publish::CodeMapService;
use status::{heap_status, to_status};
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, transport::server::UdsConnectInfo};
use vmscope_proto::{DEFAULT_FREQUENCY_HZ, v1 as pb};
pub use watches::WATCH_UNREAD_LIMIT;

use crate::{
    cancel::CancelOnDrop,
    continuous::{Continuous, store::Selection},
    heap::Heaps,
    profile::{ProfileOptions, build_profile_unless},
    session::{
        Caller, ManagerHandle, labels::label_filter, request::FrequencyLimits,
        threads::ThreadFilter,
    },
    symbolize::Symbolizer,
    sys,
};

/// Which of a session's samples a profile is built from: `GetProfileRequest`'s threads and
/// labels; everything by default.
#[derive(Clone, Debug, Default)]
pub(crate) struct ProfileCut {
    /// The threads.
    pub(crate) threads: ThreadFilter,
    /// The labels.
    pub(crate) labels: vmscope_model::LabelFilter,
}

/// Shortest interval between watch snapshots.
pub const MIN_WATCH_INTERVAL: Duration = Duration::from_millis(100);
/// Interval between watch snapshots when the request names none.
pub const DEFAULT_WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// Most watch streams open at once: each takes a snapshot per interval. A user other than
/// root may hold a share of them, all such users together most of them, and root the rest.
pub const WATCHES: ShareLimits = ShareLimits {
    per_user: 16,
    non_root: 192,
    total: 256,
};

/// The name of the daemon's own frequency ceiling among the limits `GetDaemonInfo` shows.
pub const MAX_FREQUENCY_LIMIT: &str = "max_frequency_hz";

/// Implementation of `vmscope.v1.Profiler`.
#[derive(Debug, Clone)]
pub struct ProfilerService {
    manager: ManagerHandle,
    symbolizer: Symbolizer,
    online_cpus: u32,
    watches: Arc<Shares>,
    builds: Arc<Builds>,
    shutdown: watch::Receiver<bool>,
    connections: Arc<Connections>,
    limits: Arc<BTreeMap<&'static str, u64>>,
    continuous: Option<Continuous>,
    heaps: Arc<Heaps>,
}

impl ProfilerService {
    /// A service over a running manager. Watch streams send their session's profile once more
    /// and end when `shutdown` turns true. `limits` are shown in `GetDaemonInfo`, with the
    /// counters of `connections`.
    pub fn new(
        manager: ManagerHandle,
        symbolizer: Symbolizer,
        online_cpus: u32,
        shutdown: watch::Receiver<bool>,
        connections: Arc<Connections>,
        limits: BTreeMap<&'static str, u64>,
    ) -> Self {
        ProfilerService {
            manager,
            symbolizer,
            online_cpus,
            watches: Shares::new(WATCHES),
            builds: Builds::new(BUILDS),
            shutdown,
            connections,
            limits: Arc::new(limits),
            continuous: None,
            heaps: Heaps::new(),
        }
    }

    /// The service with continuous profiling's windows to serve.
    pub fn with_continuous(self, continuous: Continuous) -> Self {
        ProfilerService {
            continuous: Some(continuous),
            ..self
        }
    }

    /// The heaps it serves, which VMs' streams reach (see [`CodeMapService`]).
    pub fn heaps(&self) -> Arc<Heaps> {
        self.heaps.clone()
    }

    /// The session manager it serves.
    pub fn manager(&self) -> &ManagerHandle {
        &self.manager
    }

    /// The daemon's counters and gauges, by the names `GetDaemonInfo` gives them: the
    /// manager's, the connections' and the profile builds'.
    pub async fn daemon_counters(
        &self,
    ) -> Result<(BTreeMap<&'static str, u64>, BTreeMap<&'static str, u64>), Status> {
        let daemon = self.manager.counters().await.map_err(to_status)?;
        let mut counters = daemon.values;
        counters.extend(self.connections.counters.values());
        counters.extend(self.builds.counters.values());
        let mut gauges = daemon.gauges;
        gauges.insert("profile_builds", self.builds.in_flight() as u64);
        let heap = &self.heaps.counters;
        counters.extend([
            ("heap_histograms_taken", heap.taken.load(Relaxed)),
            ("heap_histograms_refused", heap.refused.load(Relaxed)),
            ("heap_histograms_failed", heap.failed.load(Relaxed)),
            ("heap_pause_ms", heap.pause_us.load(Relaxed) / 1000),
            ("heap_queries", heap.queries.load(Relaxed)),
            (
                "heap_answers_unexpected",
                self.heaps.vms.unexpected_answers.load(Relaxed),
            ),
        ]);
        gauges.insert("heap_histograms_kept", self.heaps.kept() as u64);
        gauges.insert("heap_serving_vms", self.heaps.vms.len() as u64);
        if let Some(continuous) = &self.continuous {
            counters.extend(continuous.counters());
            gauges.extend(continuous.gauges());
        }
        Ok((counters, gauges))
    }

    /// The kept continuous windows `selection` takes, merged on a blocking thread and carried
    /// as the API's profile (with `pprof`, also encoded as pprof). The windows hold every
    /// user's processes: callers let root alone ask.
    pub(crate) async fn continuous_profile(
        &self,
        selection: Selection,
        pprof: bool,
    ) -> Result<pb::Profile, Status> {
        let Some(continuous) = self.continuous.clone() else {
            return Err(Status::failed_precondition(
                "this daemon does not profile continuously: start it with --continuous",
            ));
        };
        tokio::task::spawn_blocking(move || {
            let Some((mut profile, span)) = continuous.profile(&selection) else {
                return Err(Status::not_found(
                    "no kept continuous window matches: the oldest may have been dropped, or \
                     the process or executable had no sample",
                ));
            };
            profile.session = Some(continuous_session(&continuous, &profile, span));
            api_profile(profile, pprof)
        })
        .await
        .map_err(|e| Status::internal(format!("merging the windows failed: {e}")))?
    }

    /// The session's profile, built on a blocking thread under one of the caller's shares of
    /// builds (waiting [`builds::BUILD_WAIT`] at most for one) and carried as the API's; with
    /// `pprof`, also encoded as pprof on that thread (gzip of a large profile takes
    /// milliseconds the async threads should not spend).
    pub(crate) async fn profile(
        &self,
        caller: Caller,
        id: u64,
        pprof: bool,
    ) -> Result<pb::Profile, Status> {
        self.profile_of_threads(caller, id, pprof, ProfileCut::default())
            .await
    }

    /// [`ProfilerService::profile`] of the samples `cut` keeps alone.
    pub(crate) async fn profile_of_threads(
        &self,
        caller: Caller,
        id: u64,
        pprof: bool,
        cut: ProfileCut,
    ) -> Result<pb::Profile, Status> {
        let share = self.builds.take(caller.uid, builds::BUILD_WAIT).await?;
        self.build(share, caller, id, pprof, cut).await
    }

    /// [`ProfilerService::profile`] with the share taken. The build is given up when this
    /// future is dropped (its client cancelled or went away); the share is held until the
    /// build thread lets go of it.
    async fn build(
        &self,
        share: builds::BuildShare,
        caller: Caller,
        id: u64,
        pprof: bool,
        cut: ProfileCut,
    ) -> Result<pb::Profile, Status> {
        let (guard, cancel) = CancelOnDrop::new();
        let snapshot = self
            .manager
            .snapshot(caller, id)
            .await
            .map_err(to_status)?
            .only_threads(&cut.threads)
            .only_labels(&cut.labels);
        let symbolizer = self.symbolizer.clone();
        let options = profile_options(caller);
        let builds = self.builds.clone();
        let built = tokio::task::spawn_blocking(move || {
            let _share = share;
            let in_use = symbolizer.modules().in_use();
            let profile = builds::at_user_priority(caller.uid, || {
                build_profile_unless(snapshot, &symbolizer, &options, &cancel)
            });
            drop(in_use);
            let Some(profile) = profile else {
                builds.counters.cancelled.fetch_add(1, Relaxed);
                return Err(Status::cancelled("the client went away"));
            };
            api_profile(profile, pprof)
        })
        .await;
        guard.disarm();
        built.map_err(|e| Status::internal(format!("building the profile failed: {e}")))?
    }
}

/// The caller, from the peer credentials the kernel attached to the Unix socket.
fn caller<T>(request: &Request<T>) -> Result<Caller, Status> {
    request
        .extensions()
        .get::<UdsConnectInfo>()
        .and_then(|info| info.peer_cred)
        .map(|cred| Caller {
            uid: cred.uid(),
            pid: cred.pid(),
        })
        .ok_or_else(|| {
            Status::unauthenticated(
                "cannot tell who you are: the daemon only takes requests on its Unix socket",
            )
        })
}

/// `profile` as the API carries it; with `pprof`, also encoded as pprof.
fn api_profile(profile: vmscope_model::Profile, pprof: bool) -> Result<pb::Profile, Status> {
    let pprof = if pprof {
        vmscope_report::pprof::encode(&profile)
            .map_err(|e| Status::internal(format!("encoding the profile as pprof failed: {e}")))?
    } else {
        Vec::new()
    };
    Ok(pb::Profile {
        pprof,
        ..profile.into()
    })
}

/// The stand-in session of a merged continuous profile: id 0, root's, system-wide, at the
/// continuous rate, from its first window's start, for the windows' time.
fn continuous_session(
    continuous: &Continuous,
    profile: &vmscope_model::Profile,
    span: crate::continuous::Span,
) -> vmscope_model::Session {
    let config = continuous.config();
    vmscope_model::Session {
        id: 0,
        state: Some(vmscope_model::SessionState::Stopped),
        system_wide: true,
        frequency_hz: config.frequency_hz,
        started_at: Some(span.start),
        elapsed: Some(Duration::from_secs_f64(profile.duration_seconds)),
        stop_reason: format!(
            "continuous profile: {} windows of {} s merged",
            span.windows,
            config.window.as_secs()
        ),
        samples: profile.total_samples,
        call_graph: Some(vmscope_model::CallGraph::Fp),
        ..vmscope_model::Session::default()
    }
}

/// What `caller` may see: like perf, kernel functions only for root or when
/// `kernel.perf_event_paranoid` is at most 1.
fn profile_options(caller: Caller) -> ProfileOptions {
    if caller.is_root() {
        return ProfileOptions { hide_kernel: None };
    }
    match sys::perf_event_paranoid() {
        Ok(level) if level <= 1 => ProfileOptions { hide_kernel: None },
        Ok(level) => ProfileOptions {
            hide_kernel: Some(format!(
                "kernel functions are shown to root only (kernel.perf_event_paranoid = {level})"
            )),
        },
        Err(_) => ProfileOptions {
            hide_kernel: Some("kernel functions are shown to root only".into()),
        },
    }
}

type ProfileStream = Pin<Box<dyn Stream<Item = Result<pb::Profile, Status>> + Send>>;

#[tonic::async_trait]
impl pb::profiler_server::Profiler for ProfilerService {
    async fn start_session(
        &self,
        request: Request<pb::StartSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let caller = caller(&request)?;
        self.manager
            .start(caller, convert::session_request(request.into_inner()))
            .await
            .map(|session| Response::new(convert::session(&session)))
            .map_err(to_status)
    }

    async fn stop_session(
        &self,
        request: Request<pb::StopSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        self.manager
            .stop(caller, request.session_id, &request.reason)
            .await
            .map(|session| Response::new(convert::session(&session)))
            .map_err(to_status)
    }

    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let caller = caller(&request)?;
        let sessions = self.manager.list(caller).await.map_err(to_status)?;
        Ok(Response::new(pb::ListSessionsResponse {
            sessions: sessions.iter().map(convert::session).collect(),
        }))
    }

    async fn get_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let caller = caller(&request)?;
        self.manager
            .get(caller, request.get_ref().session_id)
            .await
            .map(|session| Response::new(convert::session(&session)))
            .map_err(to_status)
    }

    async fn get_profile(
        &self,
        request: Request<pb::GetProfileRequest>,
    ) -> Result<Response<pb::Profile>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let cut = ProfileCut {
            threads: ThreadFilter::new(request.tids, request.thread_names).map_err(to_status)?,
            labels: label_filter(&request.labels).map_err(to_status)?,
        };
        self.profile_of_threads(caller, request.session_id, request.pprof, cut)
            .await
            .map(Response::new)
    }

    type WatchSessionStream = ProfileStream;

    async fn watch_session(
        &self,
        request: Request<pb::WatchSessionRequest>,
    ) -> Result<Response<Self::WatchSessionStream>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let interval = match request.interval {
            None => DEFAULT_WATCH_INTERVAL,
            Some(d) => {
                let d = Duration::try_from(d).map_err(|_| {
                    Status::invalid_argument("interval must be a positive duration")
                })?;
                if d < MIN_WATCH_INTERVAL {
                    return Err(Status::invalid_argument(format!(
                        "interval {d:?} is shorter than the {MIN_WATCH_INTERVAL:?} minimum"
                    )));
                }
                d
            }
        };
        // Fail now, not in the stream, when the session is not there.
        self.manager
            .get(caller, request.session_id)
            .await
            .map_err(to_status)?;
        let permit = self.watches.take(caller.uid).map_err(|refusal| {
            Status::resource_exhausted(format!(
                "watches: {refusal}; poll GetProfile, or close a watch"
            ))
        })?;
        Ok(Response::new(self.watch(
            caller,
            request.session_id,
            interval,
            permit,
        )))
    }

    async fn get_continuous_profile(
        &self,
        request: Request<pb::GetContinuousProfileRequest>,
    ) -> Result<Response<pb::Profile>, Status> {
        let caller = caller(&request)?;
        if !caller.is_root() {
            return Err(Status::permission_denied(
                "continuous profiles are root's: their windows hold every user's processes",
            ));
        }
        let request = request.into_inner();
        let time = |t: Option<prost_types::Timestamp>, name: &str| -> Result<_, Status> {
            t.map(|t| {
                std::time::SystemTime::try_from(t)
                    .map_err(|_| Status::invalid_argument(format!("{name} is not a valid time")))
            })
            .transpose()
        };
        let selection = Selection {
            start: time(request.start, "start")?,
            end: time(request.end, "end")?,
            pid: (request.pid != 0).then_some(request.pid),
            executable: (!request.executable.is_empty()).then_some(request.executable),
        };
        self.continuous_profile(selection, request.pprof)
            .await
            .map(Response::new)
    }

    async fn take_heap_histogram(
        &self,
        request: Request<pb::TakeHeapHistogramRequest>,
    ) -> Result<Response<pb::HeapHistogram>, Status> {
        let caller = caller(&request)?;
        let ask = convert::heap_request(request.get_ref());
        let heaps = self.heaps.clone();
        // The attach waits for the JVM's safepoint and full GC: a blocking thread's work.
        tokio::task::spawn_blocking(move || heaps.take(caller, ask))
            .await
            .map_err(|e| Status::internal(format!("the heap histogram's thread failed: {e}")))?
            .map(|h| Response::new(pb::HeapHistogram::from(h.as_ref().clone())))
            .map_err(heap_status)
    }

    async fn query_heap(
        &self,
        request: Request<pb::QueryHeapRequest>,
    ) -> Result<Response<pb::HeapQueryResult>, Status> {
        let caller = caller(&request)?;
        let ask = convert::query_request(request.into_inner());
        let heaps = self.heaps.clone();
        // The VM answers at its next safepoint, after its full GC: a blocking thread's wait.
        tokio::task::spawn_blocking(move || heaps.query(caller, ask))
            .await
            .map_err(|e| Status::internal(format!("the heap query's thread failed: {e}")))?
            .map(|s| Response::new(pb::HeapQueryResult::from(s)))
            .map_err(heap_status)
    }

    async fn get_heap_histogram(
        &self,
        request: Request<pb::GetHeapHistogramRequest>,
    ) -> Result<Response<pb::HeapHistogram>, Status> {
        let caller = caller(&request)?;
        self.heaps
            .get(caller, request.get_ref().id)
            .map(|h| Response::new(pb::HeapHistogram::from(h.as_ref().clone())))
            .map_err(heap_status)
    }

    async fn get_daemon_info(
        &self,
        _request: Request<pb::GetDaemonInfoRequest>,
    ) -> Result<Response<pb::DaemonInfo>, Status> {
        let daemon_hz = self
            .limits
            .get(MAX_FREQUENCY_LIMIT)
            .map_or(u32::MAX, |&hz| u32::try_from(hz).unwrap_or(u32::MAX));
        let max_frequency_hz = FrequencyLimits::read(daemon_hz)
            .map_err(|e| {
                Status::internal(format!("cannot read {}: {e}", sys::MAX_SAMPLE_RATE_SYSCTL))
            })?
            .ceiling();
        let (counters, gauges) = self.daemon_counters().await?;
        Ok(Response::new(pb::DaemonInfo {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            max_frequency_hz,
            default_frequency_hz: DEFAULT_FREQUENCY_HZ,
            online_cpus: self.online_cpus,
            hardware_events: crate::stats::kernel::hardware().is_ok(),
            counters: counters
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            limits: self
                .limits
                .iter()
                .map(|(&k, &v)| (k.to_owned(), v))
                .collect(),
            gauges: gauges.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        }))
    }
}
