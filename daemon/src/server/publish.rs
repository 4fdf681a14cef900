//! `vmscope.v1.CodeMap`: VMs publishing their code maps as they change.
//!
//! A process publishes its own map only: the daemon takes the pid from the socket's peer
//! credentials; root may publish for the pid its Hello names. Events are checked one by one
//! ([`crate::codemap::vm::Publication`]) and handed to the session manager in small batches; a
//! refused event is counted and reported in the summary, never fatal to the stream.

use std::{sync::Arc, time::Duration};

use tokio_stream::StreamExt as _;
use tonic::{Request, Response, Status, Streaming};
use vmscope_proto::v1::{self as pb, CodeMapEvent, PublishSummary};

use super::{caller, status::to_status};
use crate::{
    codemap::{
        code::CodeStore,
        refusals::Reason,
        vm::{Accepted, Publication as Checked, Refused},
    },
    heap::Heaps,
    session::{ManagerHandle, Publication},
    sys,
};

/// Most events handed to the manager at once.
const BATCH: usize = 512;
/// How often a publication checks that its process is still the same and its user's: two
/// /proc reads, which a batch every 2 ms would otherwise pay each time.
const IDENTITY_RECHECK: Duration = Duration::from_millis(20);
/// Longest an event waits to be batched.
const BATCH_WAIT: Duration = Duration::from_millis(2);

/// Implementation of `vmscope.v1.CodeMap`.
#[derive(Debug, Clone)]
pub struct CodeMapService {
    manager: ManagerHandle,
    codes: Arc<CodeStore>,
    heaps: Arc<Heaps>,
}

impl CodeMapService {
    /// A service handing publications to `manager`, interning codes in `codes`.
    pub fn new(manager: ManagerHandle, codes: Arc<CodeStore>, heaps: Arc<Heaps>) -> CodeMapService {
        CodeMapService {
            manager,
            codes,
            heaps,
        }
    }

    /// Ends the intervals a closing publication left open, and counts each as refused.
    async fn close(&self, pid: u32, checked: &mut Checked) -> Result<(), Status> {
        let stats = checked.close();
        if stats.is_empty() {
            return Ok(());
        }
        tracing::info!(
            pid,
            open = stats.len(),
            "code map publication closed with intervals open"
        );
        let refused = vec![Reason::Unmatched; stats.len()];
        self.manager
            .publish(
                pid,
                Publication::Changes {
                    changes: Vec::new(),
                    stats,
                    until_ns: checked.until_ns,
                    refused,
                },
            )
            .await
            .map_err(to_status)
    }
}

/// Which process a publication is for: a pid is only the same process while its start time
/// is, and only the publisher's while its effective uid is.
struct Identity {
    start_time_ticks: u64,
}

impl Identity {
    fn of(pid: u32) -> Option<Identity> {
        let text = sys::read_proc(pid, "stat").ok()?;
        let stat = vmscope_parse::stat::parse_stat(&text).ok()?;
        Some(Identity {
            start_time_ticks: stat.start_time_ticks,
        })
    }

    /// Whether `pid` is still this process, and (with `owner`) still runs as that user. A
    /// process gone altogether passes: what it sent before it exited still counts, and its
    /// stream ends with it.
    fn still(&self, pid: u32, owner: Option<u32>) -> bool {
        let Some(now) = Identity::of(pid) else {
            return true;
        };
        let theirs = owner.is_none_or(|uid| {
            sys::read_status(pid)
                .ok()
                .is_none_or(|s| s.uids.effective == uid)
        });
        now.start_time_ticks == self.start_time_ticks && theirs
    }
}

/// Tells the manager the stream ended, however the handler returns.
struct OpenStream {
    manager: ManagerHandle,
    pid: u32,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        let manager = self.manager.clone();
        let pid = self.pid;
        tokio::spawn(async move {
            let _ = manager.publish(pid, Publication::Closed).await;
        });
    }
}

#[tonic::async_trait]
impl pb::code_map_server::CodeMap for CodeMapService {
    type ServeHeapStream = super::heap_stream::Requests;

    async fn serve_heap(
        &self,
        request: Request<Streaming<pb::HeapAnswer>>,
    ) -> Result<Response<Self::ServeHeapStream>, Status> {
        super::heap_stream::serve(&self.heaps, request).await
    }

    async fn publish(
        &self,
        request: Request<Streaming<CodeMapEvent>>,
    ) -> Result<Response<PublishSummary>, Status> {
        let caller = caller(&request)?;
        let mut stream = request.into_inner();
        let first = stream
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("an empty publication: send a Hello first"))?;
        let mut checked = Checked::owned_by(caller.uid);
        if !matches!(first.event, Some(pb::code_map_event::Event::Hello(_))) {
            return Err(Status::invalid_argument(
                "the first event of a publication must be a Hello",
            ));
        }
        // The VM's name, for its statistics: passed on with the first changes.
        let hello = match checked.accept(&first, &self.codes) {
            Ok(Accepted::Stat(ts, stat)) => Some((ts, stat)),
            Ok(_) => None,
            Err(refused) => return Err(Status::invalid_argument(refused.problem)),
        };
        let peer = caller
            .pid
            .and_then(|p| u32::try_from(p).ok())
            .filter(|&p| p != 0);
        let pid = if caller.is_root() {
            checked.hello_pid.or(peer)
        } else {
            // A process publishes its own map, whatever its Hello says.
            peer
        }
        .ok_or_else(|| {
            Status::invalid_argument("cannot tell which process this map is for: name it in Hello")
        })?;
        let identity = Identity::of(pid)
            .ok_or_else(|| Status::not_found(format!("no process with pid {pid}")))?;
        // What the publisher may write to: this process, while it is its user's (checked at
        // every IDENTITY_RECHECK: the process may exec a setuid program, or exit and leave its
        // pid to another, while a forked child keeps the stream open).
        let owner = (!caller.is_root()).then_some(caller.uid);
        if !identity.still(pid, owner) {
            return Err(Status::permission_denied(format!(
                "process {pid} is not yours"
            )));
        }
        tracing::info!(pid, vm = %checked.vm, uid = caller.uid, "code map publication opened");
        self.manager
            .publish(pid, Publication::Opened)
            .await
            .map_err(to_status)?;
        let _open = OpenStream {
            manager: self.manager.clone(),
            pid,
        };

        let batches = stream.chunks_timeout(BATCH, BATCH_WAIT);
        tokio::pin!(batches);
        let mut checked_at = std::time::Instant::now();
        let mut hello = hello;
        while let Some(events) = batches.next().await {
            if checked_at.elapsed() >= IDENTITY_RECHECK {
                checked_at = std::time::Instant::now();
                if !identity.still(pid, owner) {
                    tracing::warn!(
                        pid,
                        "code map publication ended: the process exited or changed user"
                    );
                    self.close(pid, &mut checked).await?;
                    return Err(Status::failed_precondition(format!(
                        "process {pid} exited or runs another user's program now: its code map is \
                         no longer yours to publish"
                    )));
                }
            }
            let mut changes = Vec::with_capacity(events.len());
            let mut stats: Vec<_> = hello.take().into_iter().collect();
            let mut ended = false;
            let mut refused = Vec::new();
            for event in events {
                match event {
                    Ok(event) => match checked.accept(&event, &self.codes) {
                        Ok(Accepted::Change(ts, change)) => changes.push((ts, change)),
                        Ok(Accepted::Stat(ts, stat)) => stats.push((ts, stat)),
                        Ok(Accepted::Nothing) => {}
                        Err(Refused { reason, problem }) => {
                            refused.push(reason);
                            tracing::debug!(pid, "code map event refused: {problem}")
                        }
                    },
                    // The VM went away mid-stream: keep what it sent. A message that could not
                    // be decoded (over the size limit, malformed) ends it too, and is refused.
                    Err(status) => {
                        if status.code() != tonic::Code::Cancelled
                            && status.code() != tonic::Code::Unknown
                        {
                            refused.push(Reason::Invalid);
                            checked.refused += 1;
                            checked.problems.push(status.message().to_owned());
                        }
                        tracing::debug!(pid, "code map publication broke off: {status}");
                        ended = true;
                        break;
                    }
                }
            }
            self.manager
                .publish(
                    pid,
                    Publication::Changes {
                        changes,
                        stats,
                        until_ns: checked.until_ns,
                        refused,
                    },
                )
                .await
                .map_err(to_status)?;
            if ended {
                break;
            }
        }
        self.close(pid, &mut checked).await?;
        if checked.refused > 0 {
            tracing::warn!(
                pid,
                refused = checked.refused,
                first = checked.problems.first().map(String::as_str).unwrap_or(""),
                "code map events refused"
            );
        }
        tracing::info!(
            pid,
            accepted = checked.accepted,
            "code map publication closed"
        );
        Ok(Response::new(PublishSummary {
            accepted: checked.accepted,
            refused: checked.refused,
            problems: checked.problems,
        }))
    }
}
