//! The thread that drains the BPF ring buffer.
//!
//! The BPF program submits events without waking anyone (`BPF_RB_NO_WAKEUP`): a wakeup per
//! sample would cost far more than the sample itself. This thread drains the ring on a timer
//! instead, every [`ACTIVE_INTERVAL`] while sessions run (backing off to
//! [`MAX_ACTIVE_INTERVAL`], then [`TRICKLE_INTERVAL`], while drains stay light) and every
//! [`IDLE_INTERVAL`] otherwise, and hands the events to the session manager in batches.
//!
//! Each batch carries a *watermark*: the CLOCK_MONOTONIC time at which the drain began. Every
//! event stamped before it was in this batch or an earlier one, except for programs still in
//! flight on another CPU, which take well under a millisecond. A drain larger than one batch
//! promises the new watermark only with its last batch. To finish a stop, the manager
//! asks for a batch whose watermark passes the stop time plus a slack
//! ([`ReaderControl::flush_at`]); the thread wakes exactly then, and sends that batch even if it
//! is empty. A quiet ring with no such request costs one cheap wakeup per interval and no
//! message at all.
//!
//! When the manager falls behind, the channel fills, this thread blocks, the ring buffer fills
//! and the kernel counts what it drops: back-pressure ends in counted losses, never in unbounded
//! memory.

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
    thread::{JoinHandle, Thread},
    time::Duration,
};

use aya::maps::{MapData, RingBuf};
use tokio::sync::mpsc;
use vmscope_common::{Event, FLAG_USER_COPY, FLAG_USER_COPY_FAULTED};

use super::user_copy::{UserCopies, UserCopy};
use crate::sys;

/// How often the ring is drained while sessions run and samples flow. 8 MiB of ring holds far
/// more than this much sampling on any machine.
pub const ACTIVE_INTERVAL: Duration = Duration::from_millis(10);

/// A drain that brought less than this lets the reader sleep twice as long next time, up to
/// [`MAX_ACTIVE_INTERVAL`]; a heavier one brings it back to [`ACTIVE_INTERVAL`]. A batch costs
/// the reader and the manager a wakeup each, whatever it holds: a target on one CPU sends
/// 14 samples per 10 ms, and its batches cost the daemon more than its samples.
const LIGHT_DRAIN_BYTES: usize = 64 << 10;

/// Longest sleep between drains while sessions run: four times [`ACTIVE_INTERVAL`]. Sampling
/// that grows from a trickle within one such sleep fills at most a fraction of the ring even at
/// the kernel's highest rate on a large host (64 CPUs at 1400 Hz of 600-byte stacks: 2 MiB).
pub const MAX_ACTIVE_INTERVAL: Duration = Duration::from_millis(40);

/// Drains in a row that brought less than [`LIGHT_DRAIN_BYTES`] after which the sampling is a
/// steady trickle (about a quarter of a second of it), and the reader sleeps up to
/// [`TRICKLE_INTERVAL`].
const STEADY_LIGHT_DRAINS: u32 = 8;

/// Longest sleep between drains while sessions run and their samples have trickled for a while
/// ([`STEADY_LIGHT_DRAINS`]): eight times [`ACTIVE_INTERVAL`]. A target on one CPU then costs
/// the reader and the manager about 12 wakeups a second, not 25. Sampling that grows from the
/// trickle within one such sleep fills at most half the ring even at the kernel's highest rate
/// on a large host (64 CPUs at 1400 Hz of 600-byte stacks: 4.3 MiB of 8 MiB).
pub const TRICKLE_INTERVAL: Duration = Duration::from_millis(80);

/// How often the ring is looked at while no session runs.
pub const IDLE_INTERVAL: Duration = Duration::from_millis(200);

/// Upper bound of events per batch, so that one batch never holds the manager for long.
const MAX_BATCH: usize = 16 * 1024;

/// Upper bound of copied user stack bytes per batch (`--call-graph dwarf`): a batch closes
/// once it holds this much, so that the batches waiting for the manager stay bounded in memory
/// (64 of them at most: 256 MiB) even when every sample copies 64 KiB.
const MAX_BATCH_COPY_BYTES: usize = 4 << 20;

/// Events read from the ring buffer in one drain.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// Decoded events in ring order.
    pub events: Vec<Event>,
    /// The stack frames of every event, in event order, each event's leaf first: kernel frames
    /// then user frames, as many as its `kernel_frames` and `user_frames` say. One vector for
    /// the whole batch, so that a sample costs no allocation of its own.
    pub frames: Vec<u64>,
    /// Where each event's frames start in `frames`.
    pub frame_start: Vec<u32>,
    /// The user registers and stack copies of the events that have one (`--call-graph
    /// dwarf`): see [`Batch::user_copy`].
    pub user_copies: UserCopies,
    /// CLOCK_MONOTONIC time (ns) at which the drain began.
    pub watermark_ns: u64,
    /// Records that are not a well-formed event: too short to be one (a build mismatch between
    /// daemon and program), shorter than their frame counts or their user copy say, with a
    /// count above [`MAX_STACK_FRAMES`](vmscope_common::MAX_STACK_FRAMES) or a copy above
    /// [`MAX_USER_COPY`](vmscope_common::MAX_USER_COPY). They are dropped, never trusted.
    pub malformed: u64,
}

impl Batch {
    /// About how many bytes of ring its events took: their records, stacks and user copies.
    pub fn approx_bytes(&self) -> usize {
        self.events.len() * std::mem::size_of::<Event>()
            + self.frames.len() * 8
            + self.user_copies.bytes_len()
    }

    /// Appends an event with its stack (both empty for an event without one), setting the
    /// event's frame counts from them.
    pub fn push(&mut self, event: Event, kernel: &[u64], user: &[u64]) {
        self.push_with_copy(event, kernel, user, None);
    }

    /// [`Batch::push`] with a user copy, setting the event's copy flags from it.
    pub fn push_with_copy(
        &mut self,
        mut event: Event,
        kernel: &[u64],
        user: &[u64],
        copy: Option<UserCopy<'_>>,
    ) {
        event.kernel_frames = kernel.len() as u16;
        event.user_frames = user.len() as u16;
        event.flags &= !(FLAG_USER_COPY | FLAG_USER_COPY_FAULTED);
        if let Some(copy) = &copy {
            event.flags |= FLAG_USER_COPY;
            if copy.faulted {
                event.flags |= FLAG_USER_COPY_FAULTED;
            }
        }
        self.frame_start.push(self.frames.len() as u32);
        self.frames.extend_from_slice(kernel);
        self.frames.extend_from_slice(user);
        self.user_copies.push(copy);
        self.events.push(event);
    }

    /// Decodes one ring-buffer record (an event, its frames, its user copy) into the batch,
    /// or counts it in [`Batch::malformed`].
    pub fn push_record(&mut self, record: &[u8]) {
        let Some(event) = Event::from_bytes(record) else {
            self.malformed += 1;
            return;
        };
        let Some(frames) = event.frames_from_bytes(record) else {
            self.malformed += 1;
            return;
        };
        let Ok(copy) = event.user_copy_from_bytes(record) else {
            self.malformed += 1;
            return;
        };
        // Straight into the arenas: no vector per sample.
        self.frame_start.push(self.frames.len() as u32);
        self.frames.extend(frames);
        self.user_copies.push(copy.map(|(header, stack)| {
            UserCopy::from_header(&header, stack, event.flags & FLAG_USER_COPY_FAULTED != 0)
        }));
        self.events.push(event);
    }

    /// The user registers and stack copy of event `i`, if it has one (`--call-graph dwarf`).
    pub fn user_copy(&self, i: usize) -> Option<UserCopy<'_>> {
        self.user_copies.get(i)
    }

    /// The stack of event `i`: (kernel frames, user frames), each leaf first.
    pub fn stack(&self, i: usize) -> (&[u64], &[u64]) {
        let event = &self.events[i];
        let start = self.frame_start.get(i).map_or(0, |&s| s as usize);
        let k = usize::from(event.kernel_frames);
        let u = usize::from(event.user_frames);
        match self.frames.get(start..start + k + u) {
            Some(frames) => frames.split_at(k),
            None => (&[], &[]),
        }
    }
}

/// How the session manager steers the reader thread.
#[derive(Debug, Default)]
pub struct ReaderControl {
    active: AtomicBool,
    /// Drains in a row that brought less than [`LIGHT_DRAIN_BYTES`].
    light_drains: AtomicU32,
    /// Earliest watermark someone waits for; 0 when nobody waits.
    flush_at_ns: AtomicU64,
    thread: OnceLock<Thread>,
}

impl ReaderControl {
    /// Whether sessions run (drain often) or not (look rarely).
    pub fn set_active(&self, active: bool) {
        if self.active.swap(active, Ordering::Relaxed) != active {
            self.wake();
        }
    }

    /// Asks for a batch, empty or not, whose watermark is at least `at_ns`. Requests for
    /// different times are served earliest first.
    pub fn flush_at(&self, at_ns: u64) {
        let at_ns = at_ns.max(1);
        let mut current = self.flush_at_ns.load(Ordering::Relaxed);
        loop {
            if current != 0 && current <= at_ns {
                return;
            }
            match self.flush_at_ns.compare_exchange_weak(
                current,
                at_ns,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
        self.wake();
    }

    fn wake(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// Notes what a drain brought, for the next sleep.
    fn drained(&self, bytes: usize) {
        let light = if bytes < LIGHT_DRAIN_BYTES {
            self.light_drains.load(Ordering::Relaxed).saturating_add(1)
        } else {
            0
        };
        self.light_drains.store(light, Ordering::Relaxed);
    }

    /// How long the reader may sleep from `now_ns`.
    fn sleep_from(&self, now_ns: u64) -> Duration {
        let interval = if self.active.load(Ordering::Relaxed) {
            let light = self.light_drains.load(Ordering::Relaxed);
            let longest = if light >= STEADY_LIGHT_DRAINS {
                TRICKLE_INTERVAL
            } else {
                MAX_ACTIVE_INTERVAL
            };
            (ACTIVE_INTERVAL * (1 << light.min(8))).min(longest)
        } else {
            IDLE_INTERVAL
        };
        match self.flush_at_ns.load(Ordering::Relaxed) {
            0 => interval,
            at => interval.min(Duration::from_nanos(at.saturating_sub(now_ns))),
        }
    }

    /// The earliest watermark asked for, 0 when none (for tests).
    #[cfg(test)]
    pub(crate) fn pending_flush(&self) -> u64 {
        self.flush_at_ns.load(Ordering::Relaxed)
    }

    /// Whether a requested flush is due at `watermark_ns`; clears the request if so.
    pub(crate) fn take_due_flush(&self, watermark_ns: u64) -> bool {
        let at = self.flush_at_ns.load(Ordering::Relaxed);
        at != 0
            && at <= watermark_ns
            && self
                .flush_at_ns
                .compare_exchange(at, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// Starts the reader thread. It stops when the receiving side of `tx` is dropped.
///
/// `stall` delays the first drain after sampling starts: fault injection for tests, which fill
/// the ring buffer this way to check that losses are counted (zero in normal use).
pub fn spawn_reader(
    mut ring: RingBuf<MapData>,
    tx: mpsc::Sender<Batch>,
    control: Arc<ReaderControl>,
    stall: Duration,
) -> std::io::Result<JoinHandle<()>> {
    let handle = std::thread::Builder::new()
        .name("vmscope-ring".into())
        .spawn({
            let control = control.clone();
            move || {
                let mut previous_ns = 0;
                let mut stall = Some(stall).filter(|s| !s.is_zero());
                loop {
                    let sleep = control.sleep_from(sys::monotonic_ns());
                    if !sleep.is_zero() {
                        std::thread::park_timeout(sleep);
                    }
                    if control.active.load(Ordering::Relaxed)
                        && let Some(stall) = stall.take()
                    {
                        tracing::warn!(?stall, "stalling the ring-buffer reader (fault injection)");
                        std::thread::sleep(stall);
                    }
                    let watermark_ns = sys::monotonic_ns();
                    let batches = drain(
                        |batch| match ring.next() {
                            Some(record) => {
                                batch.push_record(&record);
                                true
                            }
                            None => false,
                        },
                        watermark_ns,
                        previous_ns,
                        || control.take_due_flush(watermark_ns),
                    );
                    control.drained(batches.iter().map(Batch::approx_bytes).sum());
                    for batch in batches {
                        previous_ns = batch.watermark_ns;
                        if tx.blocking_send(batch).is_err() {
                            return;
                        }
                    }
                }
            }
        })?;
    let _ = control.thread.set(handle.thread().clone());
    Ok(handle)
}

/// Drains a ring once, into batches of at most [`MAX_BATCH`] events.
///
/// `next` decodes the next record into the batch it is given (with [`Batch::push_record`]) and
/// returns `false` once the ring is empty: ring records are borrowed from the ring, so they are
/// decoded where they are read. Only the last batch carries `watermark_ns`: until the ring is
/// empty, events stamped before it may still be unread, so earlier batches carry
/// `previous_ns`, the watermark already promised. Nothing is returned for an empty ring unless
/// `flush_due` (asked only once the ring is empty) says a batch is awaited.
fn drain(
    mut next: impl FnMut(&mut Batch) -> bool,
    watermark_ns: u64,
    previous_ns: u64,
    flush_due: impl FnOnce() -> bool,
) -> Vec<Batch> {
    let mut batches = Vec::new();
    let mut batch = Batch::default();
    while next(&mut batch) {
        if batch.events.len() >= MAX_BATCH || batch.user_copies.bytes_len() >= MAX_BATCH_COPY_BYTES
        {
            batch.watermark_ns = previous_ns;
            batches.push(std::mem::take(&mut batch));
        }
    }
    let flush = flush_due();
    if flush || !batch.events.is_empty() || batch.malformed > 0 || !batches.is_empty() {
        batch.watermark_ns = watermark_ns;
        batches.push(batch);
    }
    batches
}

#[cfg(test)]
mod tests {
    use vmscope_common::{
        FLAG_KERNEL_MODE, FLAG_STACK, MAX_STACK_FRAMES, MAX_USER_COPY, UserCopyHeader,
    };

    use super::*;

    /// A ring holding `records`, read in order as the reader thread reads a real one.
    fn ring(records: Vec<Vec<u8>>) -> impl FnMut(&mut Batch) -> bool {
        let mut records = records.into_iter();
        move |batch| match records.next() {
            Some(record) => {
                batch.push_record(&record);
                true
            }
            None => false,
        }
    }

    /// `events` plain 64-byte sample records, the one at `malformed_at` cut short.
    fn source(events: usize, malformed_at: Option<usize>) -> impl FnMut(&mut Batch) -> bool {
        ring(
            (0..events)
                .map(|i| {
                    let mut record = Event {
                        timestamp_ns: i as u64 + 1,
                        ..Event::default()
                    }
                    .to_bytes()
                    .to_vec();
                    if Some(i) == malformed_at {
                        record.truncate(Event::SIZE - 1);
                    }
                    record
                })
                .collect(),
        )
    }

    /// A sample record with these stacks, as the kernel writes it.
    fn stack_record(tid: u32, kernel: &[u64], user: &[u64]) -> Vec<u8> {
        let event = Event {
            tid,
            flags: FLAG_STACK
                | if kernel.is_empty() {
                    0
                } else {
                    FLAG_KERNEL_MODE
                },
            kernel_frames: kernel.len() as u16,
            user_frames: user.len() as u16,
            ..Event::default()
        };
        let mut record = event.to_bytes().to_vec();
        for frame in kernel.iter().chain(user) {
            record.extend(frame.to_ne_bytes());
        }
        record
    }

    #[test]
    fn only_the_last_batch_of_a_drain_promises_the_new_watermark() {
        let batches = drain(source(2 * MAX_BATCH + 5, None), 900, 100, || false);
        let shape: Vec<(usize, u64)> = batches
            .iter()
            .map(|b| (b.events.len(), b.watermark_ns))
            .collect();
        assert_eq!(shape, [(MAX_BATCH, 100), (MAX_BATCH, 100), (5, 900)]);
        // Exactly full: the last batch is empty but still carries the watermark.
        let batches = drain(source(MAX_BATCH, None), 900, 100, || false);
        let shape: Vec<(usize, u64)> = batches
            .iter()
            .map(|b| (b.events.len(), b.watermark_ns))
            .collect();
        assert_eq!(shape, [(MAX_BATCH, 100), (0, 900)]);
    }

    #[test]
    fn quiet_rings_send_nothing_unless_a_flush_is_awaited() {
        assert!(drain(source(0, None), 900, 100, || false).is_empty());
        let flushed = drain(source(0, None), 900, 100, || true);
        assert_eq!(flushed.len(), 1);
        assert!(flushed[0].events.is_empty());
        assert_eq!(flushed[0].watermark_ns, 900);
        let mut asked = false;
        let _ = drain(source(3, None), 900, 100, || {
            asked = true;
            false
        });
        assert!(asked, "the flush is decided once the ring is empty");
    }

    #[test]
    fn short_records_are_counted_not_lost_silently() {
        let batches = drain(source(4, Some(2)), 900, 100, || false);
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].events.len(), 3);
        assert_eq!(batches[0].malformed, 1);
    }

    #[test]
    fn stacks_are_decoded_into_the_arena_beside_plain_events() {
        let kernel = [0xffff_ffff_8100_1234, 0xffff_ffff_8100_5678];
        let user = [0x40_1000, 0x40_2000, 0x40_3000];
        let batches = drain(
            ring(vec![
                stack_record(1, &kernel, &user),
                Event {
                    tid: 2,
                    ..Event::default()
                }
                .to_bytes()
                .to_vec(),
                stack_record(3, &[], &user[1..]),
            ]),
            900,
            100,
            || false,
        );
        assert_eq!(batches.len(), 1);
        let batch = &batches[0];
        let tids: Vec<u32> = batch.events.iter().map(|e| e.tid).collect();
        assert_eq!(tids, [1, 2, 3]);
        assert_eq!(batch.stack(0), (&kernel[..], &user[..]));
        assert_eq!(batch.stack(1), (&[][..], &[][..]));
        assert_eq!(batch.stack(2), (&[][..], &user[1..]));
        assert_eq!(batch.frames.len(), 2 + 3 + 2);
        assert_eq!(batch.malformed, 0);
    }

    #[test]
    fn records_that_lie_about_their_frames_are_dropped_and_counted() {
        let good = stack_record(1, &[], &[0x40_1000, 0x40_2000]);
        // One byte short of its second frame.
        let short = good[..good.len() - 1].to_vec();
        // Counts above MAX_STACK_FRAMES, with bytes enough for them: still refused.
        let too_deep = {
            let frames = vec![0x40_1000; MAX_STACK_FRAMES + 1];
            stack_record(2, &[], &frames)
        };
        let too_deep_kernel = {
            let frames = vec![0xffff_ffff_8100_0000; MAX_STACK_FRAMES + 1];
            stack_record(3, &frames, &[0x40_1000])
        };
        let batches = drain(
            ring(vec![short, too_deep, good.clone(), too_deep_kernel]),
            900,
            100,
            || false,
        );
        let batch = &batches[0];
        assert_eq!(batch.malformed, 3);
        assert_eq!(batch.events.len(), 1);
        assert_eq!(batch.events[0].tid, 1);
        assert_eq!(batch.stack(0), (&[][..], &[0x40_1000, 0x40_2000][..]));
        assert_eq!(batch.frames.len(), 2, "nothing of a dropped record is kept");
        // A full-depth stack on both sides is the largest record the kernel writes: accepted.
        let deepest = stack_record(
            4,
            &[0xffff_ffff_8100_0000; MAX_STACK_FRAMES],
            &[0x40_1000; MAX_STACK_FRAMES],
        );
        let mut batch = Batch::default();
        batch.push_record(&deepest);
        assert_eq!(batch.malformed, 0);
        assert_eq!(batch.stack(0).0.len(), MAX_STACK_FRAMES);
        assert_eq!(batch.stack(0).1.len(), MAX_STACK_FRAMES);
    }

    /// A sample record with user frames and a copy of `stack` from `sp`, as the kernel writes
    /// it; the header says `len`.
    fn copy_record(
        tid: u32,
        user: &[u64],
        sp: u64,
        len: u32,
        stack: &[u8],
        faulted: bool,
    ) -> Vec<u8> {
        let mut record = stack_record(tid, &[], user);
        let mut event = Event::from_bytes(&record).unwrap();
        event.flags |= FLAG_USER_COPY | if faulted { FLAG_USER_COPY_FAULTED } else { 0 };
        record[..Event::SIZE].copy_from_slice(&event.to_bytes());
        let header = UserCopyHeader {
            ip: 0x40_1234,
            sp,
            bp: sp + 0x40,
            len,
            _pad: 0,
        };
        record.extend(header.to_bytes());
        record.extend(stack);
        record
    }

    #[test]
    fn user_copies_are_decoded_into_the_arena_beside_frames() {
        let stack: Vec<u8> = (0..64).collect();
        let batches = drain(
            ring(vec![
                copy_record(1, &[], 0x7ffd_1000, 64, &stack, false),
                stack_record(2, &[], &[0x40_1000]),
                copy_record(
                    3,
                    &[0x40_1000, 0x40_2000],
                    0x7ffd_2000,
                    16,
                    &stack[..16],
                    true,
                ),
            ]),
            900,
            100,
            || false,
        );
        let batch = &batches[0];
        assert_eq!(batch.malformed, 0);
        assert_eq!(batch.events.len(), 3);
        let first = batch.user_copy(0).unwrap();
        assert_eq!(
            (first.ip, first.sp, first.bp, first.faulted),
            (0x40_1234, 0x7ffd_1000, 0x7ffd_1040, false)
        );
        assert_eq!(first.stack, &stack[..]);
        assert_eq!(batch.user_copy(1), None);
        let third = batch.user_copy(2).unwrap();
        assert_eq!(
            (third.sp, third.stack, third.faulted),
            (0x7ffd_2000, &stack[..16], true)
        );
        assert_eq!(batch.stack(2), (&[][..], &[0x40_1000, 0x40_2000][..]));
        assert_eq!(batch.user_copies.bytes_len(), 80);
    }

    #[test]
    fn user_copies_that_lie_about_their_length_are_dropped_and_counted() {
        let stack = vec![0xaa; 256];
        let good = copy_record(1, &[0x40_1000], 0x7ffd_1000, 256, &stack, false);
        // The header says more bytes than the record holds.
        let short = copy_record(2, &[0x40_1000], 0x7ffd_1000, 256, &stack[..248], false);
        // Above the most the kernel copies, with bytes enough for it.
        let too_long = copy_record(
            3,
            &[],
            0x7ffd_1000,
            MAX_USER_COPY + 8,
            &vec![0; 65_536],
            false,
        );
        // Cut inside the header.
        let cut = good[..Event::SIZE + 8 + 10].to_vec();
        let batches = drain(ring(vec![short, too_long, cut, good]), 900, 100, || false);
        let batch = &batches[0];
        assert_eq!(batch.malformed, 3);
        assert_eq!(batch.events.len(), 1);
        assert_eq!(batch.events[0].tid, 1);
        assert_eq!(batch.frames.len(), 1, "nothing of a dropped record is kept");
        assert_eq!(batch.user_copy(0).unwrap().stack.len(), 256);
        assert_eq!(batch.user_copies.bytes_len(), 256);
    }

    #[test]
    fn a_batch_closes_once_it_holds_enough_copied_stack() {
        let stack = vec![0u8; 65_528];
        let per_batch = MAX_BATCH_COPY_BYTES.div_ceil(stack.len());
        let records = (0..per_batch + 3)
            .map(|i| copy_record(i as u32, &[], 0x7ffd_0000, 65_528, &stack, true))
            .collect();
        let batches = drain(ring(records), 900, 100, || false);
        let sizes: Vec<usize> = batches.iter().map(|b| b.events.len()).collect();
        assert_eq!(sizes, [per_batch, 3]);
        assert_eq!(batches[0].watermark_ns, 100);
    }

    #[test]
    fn flush_requests_keep_the_earliest_and_clear_when_served() {
        let control = ReaderControl::default();
        control.set_active(true);
        assert_eq!(control.sleep_from(0), ACTIVE_INTERVAL);
        control.flush_at(5_000_000);
        control.flush_at(9_000_000);
        assert_eq!(control.sleep_from(1_000_000), Duration::from_millis(4));
        assert!(!control.take_due_flush(4_999_999), "not due yet");
        assert!(control.take_due_flush(5_000_000));
        assert!(!control.take_due_flush(6_000_000), "served once");
        control.set_active(false);
        assert_eq!(control.sleep_from(0), IDLE_INTERVAL);
        control.flush_at(1);
        assert!(control.sleep_from(100).is_zero(), "overdue: no sleep");
    }

    #[test]
    fn light_drains_lengthen_the_sleep_and_a_heavy_one_shortens_it_at_once() {
        let control = ReaderControl::default();
        control.set_active(true);
        let sleeps: Vec<u128> = [100, 0, 5_000, 60_000, 64 << 10, 10]
            .into_iter()
            .map(|bytes| {
                control.drained(bytes);
                control.sleep_from(0).as_millis()
            })
            .collect();
        assert_eq!(sleeps, [20, 40, 40, 40, 10, 20]);
        // A flush asked for still comes when due.
        control.flush_at(3_000_000);
        assert_eq!(control.sleep_from(0), Duration::from_millis(3));
    }
}
