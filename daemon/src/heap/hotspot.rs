//! HotSpot's class histogram, asked for through the attach mechanism (`GC.class_histogram`,
//! [`crate::jvm::attach`]) with no JVM flag, and timed by the JVM's own safepoint counter.
//!
//! `GC.class_histogram` runs a full collection first unless asked for all objects (`-all`),
//! then counts the heap at a safepoint: the JVM's threads are stopped for both. The pause is
//! the growth of `sun.rt.safepointTime` in the JVM's performance data over the request (what
//! `jstat` reads), so it is the JVM's figure, not the daemon's guess from the round trip; a
//! JVM without performance data (`-XX:-UsePerfData`) has none.

use std::time::Duration;

use vmscope_parse::{
    class_histogram::parse_class_histogram,
    hsperfdata::PerfData,
    maps::{MapPath, parse_maps},
};

use vmscope_model::heap::ClassCount;

use super::{Checked, HeapError, HistogramRequest};
use crate::{
    jvm::attach::{self, AttachError, JvmTarget},
    stats::hotspot::PerfDataFile,
    sys,
};

/// A JVM the caller may ask for its histogram.
#[derive(Debug)]
pub struct Target {
    /// As the checked `/proc/PID/status` describes it: the attach then trusts only a socket
    /// of that uid.
    jvm: JvmTarget,
    /// Its start time: a process found at the pid after the answer with another one is not
    /// the one checked, and its answer is not handed out.
    start_time: u64,
    /// Its command (comm), for the histogram.
    pub command: String,
}

/// What the JVM answered.
#[derive(Debug)]
pub struct Answer {
    /// From the request to the end of the answer.
    pub elapsed: Duration,
    /// Its safepoint time over the request.
    pub pause: Option<Duration>,
    /// The classes, most bytes first.
    pub classes: Vec<ClassCount>,
    /// The instances of all of them.
    pub total_instances: u64,
    /// Their bytes.
    pub total_bytes: u64,
    /// Who answered.
    pub runtime: String,
}

/// Checks that the process `caller` may ask (see [`super::check_process`]) is a HotSpot JVM
/// (it maps libjvm.so): nothing is sent to any other process, which a SIGQUIT could kill.
pub fn check(process: Checked) -> Result<Target, HeapError> {
    let Checked {
        pid,
        status,
        start_time,
    } = process;
    let gone = || HeapError::NotFound(format!("no process {pid}"));
    let maps = sys::read_proc(pid, "maps").map_err(|_| gone())?;
    let is_jvm = parse_maps(&maps).entries.iter().any(|e| match &e.path {
        MapPath::File { path, .. } => path.file_name().is_some_and(|n| n == "libjvm.so"),
        _ => false,
    });
    if !is_jvm {
        return Err(HeapError::CannotAnswer(format!(
            "pid {pid} ({}) is not a HotSpot JVM (it maps no libjvm.so) and serves no heap \
             stream (CodeMap.ServeHeap): heap histograms come from HotSpot JVMs and from VMs \
             that serve their heap",
            status.name
        )));
    }
    // The status checked above, not a new read: a process at the pid since is another's.
    let jvm = JvmTarget {
        pid,
        nspid: status.nspid.unwrap_or(pid),
        uid: status.uids.effective,
        gid: status.gids.effective,
    };
    // A process that started after the status was read is not the one checked.
    if sys::read_start_time(pid) != Some(start_time) {
        return Err(gone());
    }
    Ok(Target {
        jvm,
        start_time,
        command: status.name,
    })
}

/// Asks the JVM for its histogram and reads it. Blocking.
pub fn take(target: &Target, request: HistogramRequest) -> Result<Answer, HeapError> {
    let pid = target.jvm.pid;
    let perf_data = PerfDataFile::find(pid).ok().flatten();
    let read = || perf_data.as_ref().and_then(|f| f.read().ok());
    let before = read();
    let snapshot = attach::request_class_histogram(&target.jvm, request.timeout, request.all)
        .map_err(|e| attach_error(e, pid))?;
    if sys::read_start_time(pid) != Some(target.start_time) {
        return Err(HeapError::NotFound(format!(
            "process {pid} exited during the request; the process now at its pid is another"
        )));
    }
    let pause = before.zip(read()).and_then(|(b, a)| safepoint_time(&b, &a));
    let histogram = parse_class_histogram(&snapshot.output).map_err(|e| {
        HeapError::Failed(format!("JVM {pid} answered with no class histogram: {e}"))
    })?;
    Ok(Answer {
        elapsed: snapshot.elapsed,
        pause,
        classes: histogram
            .classes
            .into_iter()
            .map(|c| ClassCount {
                name: c.name,
                module: c.module,
                instances: c.instances,
                bytes: c.bytes,
            })
            .collect(),
        total_instances: histogram.total_instances,
        total_bytes: histogram.total_bytes,
        runtime: "hotspot".into(),
    })
}

/// The safepoint time the JVM counted between two readings of its performance data.
fn safepoint_time(before: &PerfData, after: &PerfData) -> Option<Duration> {
    let ticks = after
        .long("sun.rt.safepointTime")?
        .checked_sub(before.long("sun.rt.safepointTime")?)?;
    let frequency = after.long("sun.os.hrt.frequency").filter(|&f| f > 0)?;
    let ns = u128::try_from(ticks).ok()? * 1_000_000_000 / frequency as u128;
    Some(Duration::from_nanos(u64::try_from(ns).ok()?))
}

/// The error an attach that failed is: a JVM that refused, answered the command with an
/// error or cannot be asked safely (an untrusted socket, another process serving it) cannot
/// answer; a reply that breaks the protocol or a system call that failed is a failure.
fn attach_error(error: AttachError, pid: u32) -> HeapError {
    let message = error.to_string();
    match error {
        AttachError::Gone { .. } => HeapError::NotFound(format!("no process {pid}: {message}")),
        AttachError::Timeout { .. } => HeapError::Timeout(message),
        AttachError::Command { .. }
        | AttachError::Untrusted { .. }
        | AttachError::WrongPeer { .. } => HeapError::CannotAnswer(message),
        e if e.is_refusal() => HeapError::CannotAnswer(message),
        AttachError::BadReply { .. } | AttachError::Io { .. } => HeapError::Failed(message),
        _ => HeapError::Failed(message),
    }
}
