//! The thread that drains the BPF ring buffer.
//!
//! It decodes events into batches and hands them to the session manager with a *watermark*: the
//! CLOCK_MONOTONIC time at which the drain began. Every event stamped before the watermark was
//! either in this batch or an earlier one, except for programs still in flight on another CPU,
//! which take well under a millisecond; the manager therefore finalises a stopped session only
//! once a watermark passes its stop time plus a small slack. A quiet ring still produces empty
//! batches every [`IDLE_WAKEUP`], so that stops complete promptly.
//!
//! When the manager falls behind, the channel fills, this thread blocks, the ring buffer fills
//! and the kernel counts what it drops: back-pressure ends in counted losses, never in unbounded
//! memory.

use std::{os::fd::AsRawFd, thread::JoinHandle, time::Duration};

use aya::maps::{MapData, RingBuf};
use tokio::sync::mpsc;
use vmscope_common::Event;

use crate::sys;

/// How long the reader sleeps when the ring buffer is quiet.
pub const IDLE_WAKEUP: Duration = Duration::from_millis(10);

/// Upper bound of events per batch, so that one batch never holds the manager for long.
const MAX_BATCH: usize = 16 * 1024;

/// Events read from the ring buffer in one drain.
#[derive(Debug, Default)]
pub struct Batch {
    /// Decoded events in ring order.
    pub events: Vec<Event>,
    /// CLOCK_MONOTONIC time (ns) at which the drain began.
    pub watermark_ns: u64,
    /// Records too short to be an event (a build mismatch between daemon and program).
    pub malformed: u64,
}

/// Starts the reader thread. It stops when the receiving side of `tx` is dropped.
pub fn spawn_reader(
    mut ring: RingBuf<MapData>,
    tx: mpsc::Sender<Batch>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("vmscope-ring".into())
        .spawn(move || {
            let fd = ring.as_raw_fd();
            loop {
                wait_readable(fd, IDLE_WAKEUP);
                let mut batch = Batch {
                    watermark_ns: sys::monotonic_ns(),
                    ..Batch::default()
                };
                loop {
                    while batch.events.len() < MAX_BATCH {
                        let Some(item) = ring.next() else { break };
                        match Event::from_bytes(&item) {
                            Some(event) => batch.events.push(event),
                            None => batch.malformed += 1,
                        }
                    }
                    let full = batch.events.len() >= MAX_BATCH;
                    let watermark_ns = batch.watermark_ns;
                    if tx.blocking_send(std::mem::take(&mut batch)).is_err() {
                        return;
                    }
                    if !full {
                        break;
                    }
                    // A full batch may have left events behind: keep draining under the same
                    // watermark.
                    batch.watermark_ns = watermark_ns;
                }
            }
        })
}

fn wait_readable(fd: i32, timeout: Duration) {
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll reads and writes the single pollfd we own; the fd stays open for the life of
    // the ring buffer, which this thread owns.
    unsafe { libc::poll(&mut pollfd, 1, timeout.as_millis() as i32) };
}
