//! Pushing continuous windows to an OTLP collector (`--otlp-endpoint http://HOST:PORT`): each
//! window's per-process profiles as one `ProfilesService/Export` request, gzipped.
//!
//! Requests wait in a queue bounded by bytes: a collector that is down, slow or refusing never
//! blocks sampling or the windows, and never grows memory past the bound. When the queue is
//! full the oldest request goes (counted: `otlp_windows_dropped`). The sender retries the
//! oldest request with exponential backoff (1 s, doubling, at most 30 s) until it is accepted
//! or dropped, so windows arrive in order and export resumes by itself when the collector comes
//! back.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesServiceRequest, profiles_service_client::ProfilesServiceClient,
};
use prost::Message as _;
use tokio::sync::Notify;
use tonic::{codec::CompressionEncoding, transport::Endpoint};

/// Bytes of requests waiting for the collector unless `--otlp-queue-mib` says otherwise: a
/// few minutes of windows of a busy host.
pub const DEFAULT_QUEUE_BYTES: usize = 16 << 20;

/// Longest an export may take, connection included, before it counts as failed (unless the
/// configuration says otherwise).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// First wait after a failed export; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// Longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Where and how windows are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The collector's gRPC endpoint, `http://HOST:PORT`.
    pub endpoint: String,
    /// Most bytes of requests waiting.
    pub queue_bytes: usize,
    /// Longest an export may take before it counts as failed.
    pub timeout: Duration,
}

/// What the exporter counts.
#[derive(Debug, Default)]
pub struct ExportCounters {
    /// Requests the collector accepted.
    pub sent: AtomicU64,
    /// Their bytes (encoded, before gzip).
    pub bytes_sent: AtomicU64,
    /// Tries that failed (collector down, slow, refusing): each retried until dropped.
    pub failed: AtomicU64,
    /// Requests dropped unsent because the queue was full.
    pub dropped: AtomicU64,
}

/// Requests waiting, oldest first (each with its number and size), and their bytes.
#[derive(Debug, Default)]
struct Queue {
    requests: VecDeque<(u64, ExportProfilesServiceRequest, usize)>,
    bytes: usize,
    pushed: u64,
}

/// The exporter: a bounded queue and the task that sends it.
#[derive(Debug, Clone)]
pub struct Exporter {
    queue: Arc<Mutex<Queue>>,
    ready: Arc<Notify>,
    limit: usize,
    /// What it counted.
    pub counters: Arc<ExportCounters>,
}

impl Exporter {
    /// An exporter to `config.endpoint`, its sender started on the current runtime. Fails only
    /// on an endpoint that is not a URI; the collector need not be up.
    pub fn start(config: &OtlpConfig) -> Result<Exporter, tonic::transport::Error> {
        let channel = Endpoint::from_shared(config.endpoint.clone())?
            .connect_timeout(config.timeout)
            .timeout(config.timeout)
            .connect_lazy();
        let client = ProfilesServiceClient::new(channel)
            .send_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Gzip);
        let exporter = Exporter {
            queue: Arc::default(),
            ready: Arc::new(Notify::new()),
            limit: config.queue_bytes,
            counters: Arc::default(),
        };
        tokio::spawn(send(exporter.clone(), client));
        Ok(exporter)
    }

    /// Queues a window's request, dropping the oldest ones beyond the queue's bytes.
    pub fn push(&self, request: ExportProfilesServiceRequest) {
        let size = request.encoded_len();
        let mut queue = lock(&self.queue);
        queue.bytes += size;
        queue.pushed += 1;
        let number = queue.pushed;
        queue.requests.push_back((number, request, size));
        // The newest always stays, even alone over the limit: it is the one worth sending.
        while queue.bytes > self.limit && queue.requests.len() > 1 {
            if let Some((_, _, dropped)) = queue.requests.pop_front() {
                queue.bytes -= dropped;
                self.counters.dropped.fetch_add(1, Relaxed);
            }
        }
        drop(queue);
        self.ready.notify_one();
    }

    /// Requests waiting, and their bytes.
    pub fn queued(&self) -> (usize, usize) {
        let queue = lock(&self.queue);
        (queue.requests.len(), queue.bytes)
    }

    /// Its counters, by the names `vmscope info` shows.
    pub fn counter_values(&self) -> [(&'static str, u64); 4] {
        let c = &self.counters;
        [
            ("otlp_exports_sent", c.sent.load(Relaxed)),
            ("otlp_bytes_sent", c.bytes_sent.load(Relaxed)),
            ("otlp_exports_failed", c.failed.load(Relaxed)),
            ("otlp_windows_dropped", c.dropped.load(Relaxed)),
        ]
    }
}

fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sends the queue, oldest first, retrying with backoff; runs as long as the daemon.
async fn send(exporter: Exporter, mut client: ProfilesServiceClient<tonic::transport::Channel>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let next = lock(&exporter.queue).requests.front().cloned();
        let Some((number, request, size)) = next else {
            exporter.ready.notified().await;
            continue;
        };
        match client.export(request).await {
            Ok(_) => {
                backoff = FIRST_BACKOFF;
                exporter.counters.sent.fetch_add(1, Relaxed);
                exporter.counters.bytes_sent.fetch_add(size as u64, Relaxed);
                let mut queue = lock(&exporter.queue);
                // Sent: unless the queue dropped it meanwhile and the front is another.
                if queue.requests.front().is_some_and(|(n, ..)| *n == number) {
                    queue.requests.pop_front();
                    queue.bytes -= size;
                }
            }
            Err(status) => {
                let failed = exporter.counters.failed.fetch_add(1, Relaxed);
                // The first failure of a run is worth a line; the rest are counted.
                if backoff == FIRST_BACKOFF || failed.is_multiple_of(100) {
                    tracing::warn!(
                        "OTLP export failed ({}), retrying in {backoff:?}: {}",
                        status.code(),
                        status.message()
                    );
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::profiles::v1development::{
        ProfilesDictionary, ResourceProfiles,
    };

    fn request(strings: usize) -> ExportProfilesServiceRequest {
        ExportProfilesServiceRequest {
            resource_profiles: vec![ResourceProfiles::default()],
            dictionary: Some(ProfilesDictionary {
                string_table: vec!["x".repeat(100); strings],
                ..ProfilesDictionary::default()
            }),
        }
    }

    /// Nothing listens at the endpoint: the queue keeps the newest within its bytes, counts
    /// what it dropped, and the sender counts its failed tries.
    #[tokio::test]
    async fn a_collector_that_is_down_costs_a_bounded_queue() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let exporter = Exporter::start(&OtlpConfig {
            endpoint: format!("http://127.0.0.1:{port}"),
            queue_bytes: 2_500,
            timeout: DEFAULT_TIMEOUT,
        })
        .unwrap();
        for _ in 0..10 {
            exporter.push(request(10));
        }
        let (waiting, bytes) = exporter.queued();
        assert!(bytes <= 2_500, "{bytes} bytes queued");
        assert_eq!(waiting, 2, "about 1,000 bytes each");
        assert_eq!(exporter.counters.dropped.load(Relaxed), 8);
        // Alone over the limit, the newest stays.
        exporter.push(request(100));
        assert_eq!(exporter.queued().0, 1);
        // A refused connection fails the first try at once.
        for _ in 0..100 {
            if exporter.counters.failed.load(Relaxed) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(exporter.counters.failed.load(Relaxed) >= 1);
        assert_eq!(exporter.counters.sent.load(Relaxed), 0);
        assert!(
            Exporter::start(&OtlpConfig {
                endpoint: "not a uri".into(),
                queue_bytes: 1,
                timeout: DEFAULT_TIMEOUT,
            })
            .is_err()
        );
    }
}
