//! VMs that count their own heap: each keeps a `CodeMap.ServeHeap` stream open, and answers the
//! requests sent down it at its next safepoint (see "Heap" in `proto/CODE-MAPS.md`).
//!
//! A link is registered for the peer's own process, checked by start time and by user, as a
//! publication is; a request goes down the stream of the link registered for the pid at the time it is
//! asked, and waits for the answer of its id. A VM that never answers costs its caller the
//! timeout and nothing else: the wait holds one of the caller's in-flight shares, and the
//! answer slot goes with the wait.
//!
//! This file is the daemon's edge with the VMs' side of the protocol: it speaks the API's
//! messages with them, and answers the rest of the daemon in its own types.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::Relaxed},
        mpsc,
    },
    time::{Duration, Instant},
};

use tokio::sync::mpsc::UnboundedSender;
use vmscope_model::heap::{ClassCount, StructureCount};
use vmscope_proto::v1 as pb;

use super::HeapError;

/// A structure query as the API carries it, handed to the VM as it came (the VM judges it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Query(pb::StructureQuery);

impl From<pb::StructureQuery> for Query {
    fn from(query: pb::StructureQuery) -> Query {
        Query(query)
    }
}

/// What a VM answered, and how long it took.
#[derive(Debug)]
pub struct Answered<T> {
    /// The VM's name.
    pub vm: String,
    /// From the request to the answer.
    pub elapsed: Duration,
    /// How long the VM's threads were stopped for it, as it measured.
    pub pause: Duration,
    /// The answer.
    pub value: T,
}

/// A VM's open stream.
#[derive(Debug)]
struct Link {
    /// Tells this link from a later one of the same pid.
    serial: u64,
    /// The process's start time when the stream opened: a process found later with another
    /// one is not the VM that opened it.
    start_time: u64,
    /// The user whose stream it is, unless root's: a process that runs as another user since
    /// (a setuid program it exec'd, the stream kept by a child) is not served by it.
    owner: Option<u32>,
    /// The VM's name, from its HeapReady.
    vm: String,
    requests: UnboundedSender<pb::HeapRequest>,
    /// Answers awaited, by request id.
    waiting: Arc<Mutex<HashMap<u64, mpsc::SyncSender<pb::HeapAnswer>>>>,
}

/// What a VM answered, and how long it took, as it came.
#[derive(Debug)]
struct VmAnswer {
    vm: String,
    elapsed: Duration,
    answer: pb::HeapAnswer,
}

/// The VMs serving their heap, by pid.
#[derive(Debug, Default)]
pub struct VmLinks {
    links: Mutex<HashMap<u32, Link>>,
    next: AtomicU64,
    /// Answers no request waited for (late, or made up), dropped.
    pub unexpected_answers: AtomicU64,
}

/// Removes a link when its stream ends, unless a later one replaced it.
#[derive(Debug)]
pub struct Registration {
    links: Arc<VmLinks>,
    pid: u32,
    serial: u64,
    waiting: Arc<Mutex<HashMap<u64, mpsc::SyncSender<pb::HeapAnswer>>>>,
}

impl Registration {
    /// Hands an answer from the stream to the request waiting for it.
    pub fn answered(&self, answer: pb::HeapAnswer) {
        let waiter = lock(&self.waiting).remove(&answer.id);
        match waiter {
            Some(waiter) => {
                let _ = waiter.try_send(answer);
            }
            None => {
                self.links.unexpected_answers.fetch_add(1, Relaxed);
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut links = lock(&self.links.links);
        if links
            .get(&self.pid)
            .is_some_and(|l| l.serial == self.serial)
        {
            links.remove(&self.pid);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl VmLinks {
    /// Registers the stream of process `pid` (started at `start_time`), opened by `owner`
    /// (`None` for root), replacing an earlier one: requests go to `requests` until the
    /// registration is dropped.
    pub fn register(
        self: &Arc<Self>,
        pid: u32,
        start_time: u64,
        owner: Option<u32>,
        vm: String,
        requests: UnboundedSender<pb::HeapRequest>,
    ) -> Registration {
        let serial = self.next.fetch_add(1, Relaxed);
        let waiting = Arc::new(Mutex::new(HashMap::new()));
        lock(&self.links).insert(
            pid,
            Link {
                serial,
                start_time,
                owner,
                vm,
                requests,
                waiting: waiting.clone(),
            },
        );
        Registration {
            links: self.clone(),
            pid,
            serial,
            waiting,
        }
    }

    /// Whether process `pid`, started at `start_time` and running as `euid`, serves its heap.
    pub fn serves(&self, pid: u32, start_time: u64, euid: u32) -> bool {
        lock(&self.links)
            .get(&pid)
            .is_some_and(|l| l.is(start_time, euid))
    }

    /// VMs serving their heap now.
    pub fn len(&self) -> usize {
        lock(&self.links).len()
    }

    /// Whether none does.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Asks the VM of `pid` (started at `start_time`, running as `euid`) for its class
    /// histogram, after a full collection if `full_gc`. Blocks up to `timeout`.
    pub fn histogram(
        &self,
        (pid, start_time, euid): (u32, u64, u32),
        full_gc: bool,
        timeout: Duration,
    ) -> Result<Answered<Vec<ClassCount>>, HeapError> {
        let request = pb::heap_request::Request::Histogram(pb::HeapHistogramRequest {});
        let answered = self.ask_checked(pid, start_time, euid, request, full_gc, timeout)?;
        match answered.answer.answer {
            Some(pb::heap_answer::Answer::Histogram(h)) => Ok(Answered {
                vm: answered.vm,
                elapsed: answered.elapsed,
                pause: Duration::from_nanos(answered.answer.pause_ns),
                value: h
                    .classes
                    .into_iter()
                    .map(|c| ClassCount {
                        name: c.name,
                        module: String::new(),
                        instances: c.instances,
                        bytes: c.bytes,
                    })
                    .collect(),
            }),
            other => Err(wrong_answer(&answered.vm, pid, "a histogram", other)),
        }
    }

    /// Asks the VM of `pid` for the structures `query` describes, as [`VmLinks::histogram`].
    pub fn structures(
        &self,
        (pid, start_time, euid): (u32, u64, u32),
        query: Query,
        full_gc: bool,
        timeout: Duration,
    ) -> Result<Answered<Vec<StructureCount>>, HeapError> {
        let request = pb::heap_request::Request::Query(query.0);
        let answered = self.ask_checked(pid, start_time, euid, request, full_gc, timeout)?;
        match answered.answer.answer {
            Some(pb::heap_answer::Answer::Structures(s)) => Ok(Answered {
                vm: answered.vm,
                elapsed: answered.elapsed,
                pause: Duration::from_nanos(answered.answer.pause_ns),
                value: s
                    .structures
                    .into_iter()
                    .map(|s| StructureCount {
                        root: s.root,
                        objects: s.objects,
                        bytes: s.bytes,
                    })
                    .collect(),
            }),
            other => Err(wrong_answer(&answered.vm, pid, "structures", other)),
        }
    }

    /// [`VmLinks::ask`], then: the process must still be the one asked when the answer comes,
    /// and an answer that is the VM's error is its refusal.
    fn ask_checked(
        &self,
        pid: u32,
        start_time: u64,
        euid: u32,
        request: pb::heap_request::Request,
        full_gc: bool,
        timeout: Duration,
    ) -> Result<VmAnswer, HeapError> {
        let request = pb::HeapRequest {
            id: 0,
            full_gc,
            request: Some(request),
        };
        let answered = self.ask(pid, start_time, euid, request, timeout)?;
        if crate::sys::read_start_time(pid) != Some(start_time) {
            return Err(HeapError::NotFound(format!(
                "process {pid} exited during the request; the process now at its pid is another"
            )));
        }
        if let Some(pb::heap_answer::Answer::Error(why)) = &answered.answer.answer {
            return Err(HeapError::CannotAnswer(format!(
                "{} (pid {pid}) could not answer: {why}",
                answered.vm
            )));
        }
        Ok(answered)
    }

    /// Sends `request` (its id is set here) to the VM of `pid` started at `start_time` and
    /// running as `euid`, and waits up to `timeout` for its answer. Blocks: call it on a
    /// blocking thread.
    fn ask(
        &self,
        pid: u32,
        start_time: u64,
        euid: u32,
        mut request: pb::HeapRequest,
        timeout: Duration,
    ) -> Result<VmAnswer, HeapError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let id = self.next.fetch_add(1, Relaxed);
        request.id = id;
        let (vm, waiting) = {
            let links = lock(&self.links);
            let link = links
                .get(&pid)
                .filter(|l| l.is(start_time, euid))
                .ok_or_else(|| not_serving(pid))?;
            lock(&link.waiting).insert(id, tx);
            if link.requests.send(request).is_err() {
                lock(&link.waiting).remove(&id);
                return Err(not_serving(pid));
            }
            (link.vm.clone(), link.waiting.clone())
        };
        let asked = Instant::now();
        let answer = rx.recv_timeout(timeout);
        lock(&waiting).remove(&id);
        match answer {
            Ok(answer) => Ok(VmAnswer {
                vm,
                elapsed: asked.elapsed(),
                answer,
            }),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(HeapError::Timeout(format!(
                "{vm} (pid {pid}) did not answer within {} s: it reaches no safepoint, or \
                 its heap is larger than the timeout allows (--timeout)",
                timeout.as_secs_f64()
            ))),
            // The stream ended: the registration dropped the slot.
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(HeapError::Failed(format!(
                "{vm} (pid {pid}) closed its heap stream before it answered"
            ))),
        }
    }
}

impl Link {
    /// Whether the link serves the process started at `start_time`, running as `euid`.
    fn is(&self, start_time: u64, euid: u32) -> bool {
        self.start_time == start_time && self.owner.is_none_or(|owner| owner == euid)
    }
}

/// A VM that answered with something other than what was asked.
fn wrong_answer(
    vm: &str,
    pid: u32,
    asked: &str,
    answer: Option<pb::heap_answer::Answer>,
) -> HeapError {
    let what = match answer {
        None => "nothing",
        Some(pb::heap_answer::Answer::Ready(_)) => "a second HeapReady",
        Some(pb::heap_answer::Answer::Histogram(_)) => "a histogram",
        Some(pb::heap_answer::Answer::Structures(_)) => "structures",
        Some(pb::heap_answer::Answer::Error(_)) => "an error",
    };
    HeapError::Failed(format!(
        "{vm} (pid {pid}) was asked for {asked} and answered with {what}"
    ))
}

fn not_serving(pid: u32) -> HeapError {
    HeapError::CannotAnswer(format!(
        "pid {pid} does not serve its heap: not a HotSpot JVM, and no VM stream \
         (CodeMap.ServeHeap) is open for it"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reaches_the_vm_of_its_pid_and_gets_the_answer_of_its_id() {
        let links = Arc::new(VmLinks::default());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let registration = links.register(42, 7, Some(1000), "vm 1".into(), tx);
        assert!(links.serves(42, 7, 1000) && !links.serves(42, 8, 1000));
        // A setuid program the process exec'd: not served by the user's stream.
        assert!(!links.serves(42, 7, 0));
        let asking = std::thread::scope(|scope| {
            let asking = scope.spawn(|| {
                links.ask(
                    42,
                    7,
                    1000,
                    pb::HeapRequest::default(),
                    Duration::from_secs(10),
                )
            });
            let request = rx
                .blocking_recv()
                .expect("the request went down the stream");
            // Another id first: not the answer awaited.
            registration.answered(pb::HeapAnswer {
                id: request.id + 1000,
                ..Default::default()
            });
            registration.answered(pb::HeapAnswer {
                id: request.id,
                pause_ns: 5,
                ..Default::default()
            });
            asking.join().unwrap()
        });
        let answer = asking.unwrap();
        assert_eq!((answer.vm.as_str(), answer.answer.pause_ns), ("vm 1", 5));
        assert_eq!(links.unexpected_answers.load(Relaxed), 1);
        // Another start time: another process.
        let err = links
            .ask(
                42,
                8,
                1000,
                pb::HeapRequest::default(),
                Duration::from_secs(1),
            )
            .unwrap_err();
        assert!(matches!(err, HeapError::CannotAnswer(_)), "{err}");
        drop(registration);
        assert!(links.is_empty());
    }

    #[test]
    fn a_vm_that_never_answers_costs_the_timeout_and_a_later_link_survives_an_earlier_end() {
        let links = Arc::new(VmLinks::default());
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let first = links.register(42, 7, None, "vm".into(), tx.clone());
        let err = links
            .ask(
                42,
                7,
                0,
                pb::HeapRequest::default(),
                Duration::from_millis(50),
            )
            .unwrap_err();
        assert!(matches!(err, HeapError::Timeout(_)), "{err}");
        let second = links.register(42, 7, None, "vm".into(), tx);
        drop(first);
        assert!(links.serves(42, 7, 0), "the later stream stays");
        drop(second);
        assert!(!links.serves(42, 7, 0));
    }
}
