//! `CodeMap.ServeHeap`: a VM's stream of heap answers, and the requests sent back down it.
//!
//! A VM serves its own heap only: the stream is registered for the peer's pid (its start time
//! checked, and for a caller other than root, that the process runs as the caller), once its
//! first message, a `HeapReady`, came. Answers go to the requests waiting for them
//! ([`crate::heap::vm`]); the stream of requests ends when the VM's stream does.

use std::{pin::Pin, sync::Arc, time::Duration};

use tokio_stream::{Stream, StreamExt as _, wrappers::UnboundedReceiverStream};
use tonic::{Request, Response, Status, Streaming};
use vmscope_proto::v1 as pb;

use super::caller;
use crate::{heap::Heaps, sys};

/// How long a VM has to say it is ready once the stream is open.
const READY_WITHIN: Duration = Duration::from_secs(5);

/// The requests a VM is sent.
pub type Requests = Pin<Box<dyn Stream<Item = Result<pb::HeapRequest, Status>> + Send>>;

/// Registers the caller's process as serving its heap for as long as its stream lasts.
pub async fn serve(
    heaps: &Arc<Heaps>,
    request: Request<Streaming<pb::HeapAnswer>>,
) -> Result<Response<Requests>, Status> {
    let caller = caller(&request)?;
    let pid = caller
        .pid
        .and_then(|p| u32::try_from(p).ok())
        .filter(|&p| p != 0)
        .ok_or_else(|| Status::invalid_argument("cannot tell which process this stream is of"))?;
    let start_time = sys::read_start_time(pid)
        .ok_or_else(|| Status::not_found(format!("no process with pid {pid}")))?;
    if !caller.is_root()
        && sys::read_status(pid)
            .ok()
            .is_none_or(|s| s.uids.effective != caller.uid)
    {
        return Err(Status::permission_denied(format!(
            "process {pid} is not yours"
        )));
    }
    let mut answers = request.into_inner();
    let vm = match tokio::time::timeout(READY_WITHIN, answers.message()).await {
        Ok(Ok(Some(pb::HeapAnswer {
            answer: Some(pb::heap_answer::Answer::Ready(ready)),
            ..
        }))) => ready.vm,
        Ok(Ok(_)) => {
            return Err(Status::invalid_argument(
                "the first message of a heap stream must be a HeapReady",
            ));
        }
        Ok(Err(status)) => return Err(status),
        Err(_) => {
            return Err(Status::deadline_exceeded(format!(
                "no HeapReady within {} s",
                READY_WITHIN.as_secs()
            )));
        }
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tracing::info!(pid, vm = %vm, uid = caller.uid, "heap stream opened");
    let owner = (!caller.is_root()).then_some(caller.uid);
    let registration = heaps.vms.register(pid, start_time, owner, vm, tx);
    tokio::spawn(async move {
        while let Ok(Some(answer)) = answers.message().await {
            registration.answered(answer);
        }
        tracing::info!(pid, "heap stream closed");
        // The registration goes with this task, and with it the requests' sender.
    });
    let requests: Requests = Box::pin(UnboundedReceiverStream::new(rx).map(Ok));
    Ok(Response::new(requests))
}
