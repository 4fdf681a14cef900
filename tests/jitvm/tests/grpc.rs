//! Publication over gRPC, against a stand-in for the daemon's CodeMap service.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{jitvm, read_events, summary};
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status, Streaming};
use vmscope_proto::v1::code_map_event::Event;
use vmscope_proto::v1::code_map_server::{CodeMap, CodeMapServer};
use vmscope_proto::v1::{CodeMapEvent, PublishSummary};

/// Collects every stream it gets; or refuses them all as UNIMPLEMENTED.
#[derive(Clone, Default)]
struct Daemon {
    streams: Arc<Mutex<Vec<Vec<CodeMapEvent>>>>,
    unimplemented: bool,
}

#[tonic::async_trait]
impl CodeMap for Daemon {
    type ServeHeapStream = tokio_stream::Empty<Result<vmscope_proto::v1::HeapRequest, Status>>;

    /// Not asked for by these runs (no --serve-heap).
    async fn serve_heap(
        &self,
        _request: Request<Streaming<vmscope_proto::v1::HeapAnswer>>,
    ) -> Result<Response<Self::ServeHeapStream>, Status> {
        Err(Status::unimplemented("CodeMap.ServeHeap is not here"))
    }

    async fn publish(
        &self,
        request: Request<Streaming<CodeMapEvent>>,
    ) -> Result<Response<PublishSummary>, Status> {
        if self.unimplemented {
            return Err(Status::unimplemented("CodeMap.Publish is not here yet"));
        }
        let mut stream = request.into_inner();
        let mut events = Vec::new();
        while let Some(e) = stream.message().await? {
            events.push(e);
        }
        let accepted = events.len() as u64;
        self.streams.lock().unwrap().push(events);
        Ok(Response::new(PublishSummary {
            accepted,
            refused: 0,
            problems: vec![],
        }))
    }
}

/// Serves `daemon` on a socket in a fresh directory, runs jitvm against it.
fn run_against(daemon: Daemon, args: &[&str]) -> (std::process::Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("vmscoped.sock");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = rt.block_on(async { UnixListener::bind(&socket) }).unwrap();
    rt.spawn(
        tonic::transport::Server::builder()
            .add_service(CodeMapServer::new(daemon))
            .serve_with_incoming(UnixListenerStream::new(listener)),
    );
    let out = jitvm()
        .args(args)
        .arg("--code-log")
        .arg(dir.path().join("own.log"))
        .env("VMSCOPE_SOCKET", &socket)
        .output()
        .unwrap();
    rt.shutdown_timeout(Duration::from_secs(1));
    (out, dir)
}

#[test]
fn streams_the_code_map_with_syncs_in_time_order() {
    let daemon = Daemon::default();
    let (out, dir) = run_against(daemon.clone(), &["compact", "--seconds", "0.5"]);
    let s = summary(&out);
    assert_eq!(s.num("mismatches"), 0);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let streams = daemon.streams.lock().unwrap();
    assert_eq!(streams.len(), 1, "one stream for the VM's life");
    let events = &streams[0];
    assert!(matches!(&events[0].event, Some(Event::Hello(h)) if h.vm == "jitvm 0.1" && h.pid > 0));
    assert!(
        events
            .windows(2)
            .all(|w| w[0].timestamp_ns <= w[1].timestamp_ns),
        "timestamps never go back, Syncs included"
    );
    let syncs: Vec<u64> = events
        .iter()
        .filter(|e| matches!(e.event, Some(Event::Sync(_))))
        .map(|e| e.timestamp_ns)
        .collect();
    assert!(syncs.len() >= 10, "{} syncs in 0.5 s", syncs.len());
    let longest = syncs.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    assert!(
        longest < 100_000_000,
        "a Sync at least every 100 ms, longest gap {longest} ns"
    );
    // Everything but the Syncs is exactly the VM's own log.
    let without_syncs: Vec<CodeMapEvent> = events
        .iter()
        .filter(|e| !matches!(e.event, Some(Event::Sync(_))))
        .cloned()
        .collect();
    assert_eq!(without_syncs, read_events(&dir.path().join("own.log")));
    jitvm::codelog::replay(events).unwrap();
}

#[test]
fn unimplemented_publish_means_unprofiled() {
    let daemon = Daemon {
        unimplemented: true,
        ..Daemon::default()
    };
    let (out, _dir) = run_against(daemon, &["fib", "--seconds", "0.3"]);
    let s = summary(&out);
    assert_eq!(s.num("result"), jitvm::benchmarks::FIB_25);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("UNIMPLEMENTED") && stderr.contains("unprofiled"),
        "{stderr}"
    );
}
