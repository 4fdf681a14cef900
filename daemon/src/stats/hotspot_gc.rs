//! HotSpot's collections through time, from its performance data file read every few
//! milliseconds, for off-CPU profiles of JVMs: how much of a thread's time off the CPU fell
//! inside a collection (a mutator stopped for the collector), with no JVM flags.
//!
//! Each collector `N` has `sun.gc.collector.N.invocations` (counted as a collection starts),
//! `lastEntryTime` (when the latest began) and `lastExitTime` (when it ended), written in that
//! order with plain stores, in ticks of `sun.os.hrt.frequency` (nanoseconds on Linux) counted
//! from the JVM's start, not from the machine's: measured on OpenJDK 17, ticks are
//! CLOCK_MONOTONIC minus a value the JVM fixed once as it started, which the file does not
//! hold. So:
//!
//! - **Stitching**: a read that finds `lastEntryTime > lastExitTime` sees a collection under way
//!   since its entry (the exit still the last one's); a later read closes it at its exit. A read
//!   with `entry <= exit` names one collection whole. Collections that begin and end between two
//!   reads, behind another, are not seen: [`GcTimeline::seen`] against
//!   [`GcTimeline::invocations`] says how many. At 16 collections a second (a small heap),
//!   reads every 10 ms see every one; at thousands a second only the totals are exact.
//! - **The clock**: every tick value a read finds was written before the read finished, so the
//!   offset is at most the read's end minus it; a value that changed since the read before was
//!   written after that read began, so the offset is at least that read's start minus it.
//!   Bracketed so over every read (some 20 to 70 µs wide after a few seconds of 10 ms reads),
//!   the middle is the offset's estimate, [`GcClock::offset_ns`].
//!
//! Pure: the readings are made by the caller, which times them.

use std::collections::VecDeque;

use vmscope_model::IntervalKind;
use vmscope_parse::hsperfdata::PerfData;

/// Most collectors read: HotSpot has at most 4 (G1's young, full and concurrent cycle pauses).
const MAX_COLLECTORS: usize = 8;

/// How far back closed collections are kept: far more than a block waits to be placed.
pub const KEEP_NS: u64 = 60_000_000_000;

/// Most closed collections kept, every collector together (24 bytes each).
pub const MAX_KEPT: usize = 65_536;

/// One collector's counters in one read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectorState {
    /// Its index `N` in `sun.gc.collector.N`.
    pub index: usize,
    /// Its name (`G1 young collection pauses`).
    pub name: String,
    /// Collections begun.
    pub invocations: i64,
    /// When the latest began, in ticks.
    pub entry: i64,
    /// When the latest before the one under way (if any) ended, in ticks.
    pub exit: i64,
}

/// One read of a JVM's file: its collectors, the JVM's clock, and when the read began and
/// ended on CLOCK_MONOTONIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcReading {
    /// CLOCK_MONOTONIC ns as the read began.
    pub started_ns: u64,
    /// CLOCK_MONOTONIC ns as it ended.
    pub finished_ns: u64,
    /// `sun.os.hrt.ticks`, which the JVM rewrites every 50 ms.
    pub hrt_ticks: Option<i64>,
    /// Ticks per second (`sun.os.hrt.frequency`).
    pub frequency: i64,
    /// Its collectors.
    pub collectors: Vec<CollectorState>,
}

impl GcReading {
    /// The reading `data` holds, read between `started_ns` and `finished_ns`; `None` for a file
    /// with no collector or no clock.
    pub fn from_data(data: &PerfData, started_ns: u64, finished_ns: u64) -> Option<GcReading> {
        let frequency = data.long("sun.os.hrt.frequency").filter(|&f| f > 0)?;
        let collectors: Vec<CollectorState> = (0..MAX_COLLECTORS)
            .map_while(|n| {
                let prefix = format!("sun.gc.collector.{n}");
                Some(CollectorState {
                    index: n,
                    name: data.string(&format!("{prefix}.name"))?.to_owned(),
                    invocations: data.long(&format!("{prefix}.invocations"))?,
                    entry: data.long(&format!("{prefix}.lastEntryTime"))?,
                    exit: data.long(&format!("{prefix}.lastExitTime"))?,
                })
            })
            .collect();
        (!collectors.is_empty()).then(|| GcReading {
            started_ns,
            finished_ns,
            hrt_ticks: data.long("sun.os.hrt.ticks"),
            frequency,
            collectors,
        })
    }

    /// Ticks as nanoseconds.
    fn ns(&self, ticks: i64) -> i64 {
        if self.frequency == 1_000_000_000 {
            ticks
        } else {
            (ticks as i128 * 1_000_000_000 / i128::from(self.frequency)) as i64
        }
    }
}

/// The offset from a JVM's clock to CLOCK_MONOTONIC, bracketed by its readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcClock {
    /// The offset is at least this (ns).
    low: Option<i64>,
    /// The offset is at most this (ns).
    high: Option<i64>,
}

impl GcClock {
    /// Narrows the bracket with `reading`'s values (`previous` the read before it, if any).
    pub fn take(&mut self, reading: &GcReading, previous: Option<&GcReading>) {
        let finished = reading.finished_ns as i64;
        let values = reading
            .collectors
            .iter()
            .flat_map(|c| [c.entry, c.exit])
            .chain(reading.hrt_ticks)
            .filter(|&v| v > 0);
        for value in values {
            let bound = finished - reading.ns(value);
            self.high = Some(self.high.map_or(bound, |h| h.min(bound)));
        }
        let Some(previous) = previous else {
            return;
        };
        // A value the read before did not find was written after that read began (less the
        // microsecond between the JVM's clock read and its store, which errs low).
        let mut changed: Vec<i64> = Vec::new();
        for (now, then) in reading.collectors.iter().zip(&previous.collectors) {
            for (v, was) in [(now.entry, then.entry), (now.exit, then.exit)] {
                if v > 0 && v != was {
                    changed.push(v);
                }
            }
        }
        if let (Some(v), Some(was)) = (reading.hrt_ticks, previous.hrt_ticks)
            && v != was
        {
            changed.push(v);
        }
        for value in changed {
            let bound = previous.started_ns as i64 - reading.ns(value) - 1_000;
            self.low = Some(self.low.map_or(bound, |l| l.max(bound)));
        }
    }

    /// The offset's estimate: the bracket's middle, or its upper end alone.
    pub fn offset_ns(&self) -> Option<i64> {
        match (self.low, self.high) {
            (Some(low), Some(high)) if low <= high => Some(low + (high - low) / 2),
            (_, Some(high)) => Some(high),
            _ => None,
        }
    }

    /// How wide the bracket is, in ns, when it has both ends.
    pub fn width_ns(&self) -> Option<i64> {
        Some(self.high? - self.low?)
    }
}

/// A collection seen under way.
#[derive(Clone, Copy, Debug)]
struct Open {
    /// When it began, on the JVM's clock (ns).
    entry: i64,
    /// The collector's invocations as it was first seen.
    invocations: i64,
    /// When a read last saw it under way (CLOCK_MONOTONIC ns): it lasted at least that long.
    seen_ns: u64,
}

/// One collector as stitched so far.
#[derive(Clone, Debug, Default)]
struct Collector {
    kind: Option<IntervalKind>,
    /// The collection under way, if one is.
    open: Option<Open>,
    /// The entry of the latest collection closed (JVM ns).
    closed_entry: i64,
    /// Invocations when first read, and last read.
    first_invocations: Option<i64>,
    invocations: i64,
}

/// A JVM's collections through time, stitched from reads of its file.
#[derive(Clone, Debug, Default)]
pub struct GcTimeline {
    clock: GcClock,
    collectors: Vec<Collector>,
    /// Closed collections on the JVM's clock (ns): (collector, begin, end), oldest first.
    closed: VecDeque<(usize, i64, i64)>,
    /// Collections seen whole, or begun, since the first read.
    seen: u64,
    last: Option<GcReading>,
}

impl GcTimeline {
    /// Takes one more read (reads come in time order).
    pub fn take(&mut self, reading: GcReading) {
        self.clock.take(&reading, self.last.as_ref());
        let offset = self.clock.offset_ns();
        for state in &reading.collectors {
            if self.collectors.len() <= state.index {
                self.collectors
                    .resize_with(state.index + 1, Collector::default);
            }
            let collector = &mut self.collectors[state.index];
            collector.kind.get_or_insert_with(|| kind_of(state));
            collector.first_invocations.get_or_insert(state.invocations);
            collector.invocations = state.invocations;
            if state.entry <= 0 {
                continue;
            }
            let (entry, exit) = (reading.ns(state.entry), reading.ns(state.exit));
            let under_way = entry > exit;
            if let Some(open) = collector.open {
                if open.entry == entry {
                    if under_way {
                        collector.open = Some(Open {
                            seen_ns: reading.started_ns,
                            ..open
                        });
                    } else {
                        self.closed.push_back((state.index, entry, exit));
                        collector.closed_entry = entry;
                        collector.open = None;
                    }
                    continue;
                }
                // Another began since: the exit read is this one's only if it was the last
                // before the one under way now; else it lasted at least until last seen.
                let end = if under_way && state.invocations == open.invocations + 1 {
                    exit
                } else {
                    offset.map_or(open.entry, |o| open.seen_ns as i64 - o)
                };
                self.closed
                    .push_back((state.index, open.entry, end.max(open.entry)));
                collector.closed_entry = open.entry;
                collector.open = None;
            }
            if entry == collector.closed_entry {
                continue;
            }
            self.seen += 1;
            if under_way {
                collector.open = Some(Open {
                    entry,
                    invocations: state.invocations,
                    seen_ns: reading.started_ns,
                });
            } else {
                self.closed.push_back((state.index, entry, exit));
                collector.closed_entry = entry;
            }
        }
        self.last = Some(reading);
        self.prune();
    }

    /// Forgets collections older than [`KEEP_NS`] before the latest read, and the oldest past
    /// [`MAX_KEPT`].
    fn prune(&mut self) {
        let Some(last) = &self.last else { return };
        let horizon = last.ns(last.hrt_ticks.unwrap_or(0)) - KEEP_NS as i64;
        while self
            .closed
            .front()
            .is_some_and(|&(_, _, end)| end < horizon)
            || self.closed.len() > MAX_KEPT
        {
            self.closed.pop_front();
        }
    }

    /// CLOCK_MONOTONIC ns up to which every collection read so far is known: the latest read's
    /// start, less the clock's uncertainty. `None` before the first read.
    pub fn known_until(&self) -> Option<u64> {
        let last = self.last.as_ref()?;
        let margin = self.clock.width_ns().unwrap_or(0).max(0) as u64;
        Some(last.started_ns.saturating_sub(margin))
    }

    /// How much of `[begin, end)` (CLOCK_MONOTONIC ns) each kind of collection covers, for
    /// the kinds that cover any; `None` while the collections are not known up to `end`, or the
    /// clock not at all.
    pub fn overlaps(&self, begin: u64, end: u64) -> Option<Vec<(IntervalKind, u64)>> {
        if self.known_until()? < end {
            return None;
        }
        self.overlaps_so_far(begin, end)
    }

    /// [`GcTimeline::overlaps`] with the collections read so far, known up to `end` or not:
    /// for a session that ends before the next read.
    pub fn overlaps_so_far(&self, begin: u64, end: u64) -> Option<Vec<(IntervalKind, u64)>> {
        let offset = self.clock.offset_ns()?;
        let to_mono = |ns: i64| (ns + offset).max(0) as u64;
        let mut covered = vec![0u64; self.collectors.len()];
        let overlap = |b: u64, e: u64| e.min(end).saturating_sub(b.max(begin));
        for &(index, b, e) in &self.closed {
            covered[index] += overlap(to_mono(b), to_mono(e));
        }
        for (index, collector) in self.collectors.iter().enumerate() {
            // Under way when last read: it lasted at least until then.
            if let Some(open) = collector.open {
                covered[index] += overlap(to_mono(open.entry), open.seen_ns);
            }
        }
        Some(
            self.collectors
                .iter()
                .zip(covered)
                .filter(|&(_, ns)| ns > 0)
                .filter_map(|(c, ns)| Some((c.kind.clone()?, ns)))
                .collect(),
        )
    }

    /// Collections seen (whole, or under way) since the first read.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Collections begun since the first read, by the JVM's count.
    pub fn invocations(&self) -> u64 {
        self.collectors
            .iter()
            .map(|c| (c.invocations - c.first_invocations.unwrap_or(c.invocations)).max(0) as u64)
            .sum()
    }

    /// The clock's bracket.
    pub fn clock(&self) -> GcClock {
        self.clock
    }
}

/// A collector's kind, as HotSpot's statistics name them (see `super::hotspot`): collector 0
/// young, 1 full, the others by their name.
fn kind_of(state: &CollectorState) -> IntervalKind {
    match state.index {
        0 => IntervalKind::Scavenge,
        1 => IntervalKind::FullGc,
        _ => IntervalKind::Named(state.name.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JVM's clock: CLOCK_MONOTONIC minus this.
    const OFFSET: i64 = 5_000_000_000;

    /// A read at `at_ns` (CLOCK_MONOTONIC, 20 µs long) of one young collector in this state
    /// (ticks), the JVM's clock rewritten at `hrt` (ticks).
    fn read(at_ns: u64, invocations: i64, entry: i64, exit: i64, hrt: i64) -> GcReading {
        GcReading {
            started_ns: at_ns,
            finished_ns: at_ns + 20_000,
            hrt_ticks: Some(hrt),
            frequency: 1_000_000_000,
            collectors: vec![CollectorState {
                index: 0,
                name: "Serial young collection pauses".into(),
                invocations,
                entry,
                exit,
            }],
        }
    }

    /// Ticks of a CLOCK_MONOTONIC time.
    fn t(mono: u64) -> i64 {
        mono as i64 - OFFSET
    }

    #[test]
    fn the_clock_is_bracketed_by_the_reads() {
        let mut clock = GcClock::default();
        // A value written 30 µs before the read's end: the offset at most 30 µs more.
        let first = read(
            10_000_000_000,
            1,
            t(9_999_990_000),
            t(9_999_991_000),
            t(9_950_000_000),
        );
        clock.take(&first, None);
        assert_eq!(clock.offset_ns(), Some(OFFSET + 29_000));
        // The clock rewritten between two reads 10 ms apart: written after the first began.
        let second = read(
            10_010_000_000,
            1,
            t(9_999_990_000),
            t(9_999_991_000),
            t(10_005_000_000),
        );
        clock.take(&second, Some(&first));
        // At most 29 µs more (the first read's exit), at least 5 ms less (the clock written
        // 5 ms after the first read began at the latest), less the microsecond of slack.
        assert_eq!(clock.width_ns(), Some(29_000 + 5_001_000));
        let error = clock.offset_ns().unwrap() - OFFSET;
        assert!(error.abs() <= (29_000 + 5_001_000) / 2, "{error}");
        // Written 10 µs after the second read began: a bracket 40 µs wide.
        let third = read(
            10_020_000_000,
            1,
            t(9_999_990_000),
            t(9_999_991_000),
            t(10_010_010_000),
        );
        clock.take(&third, Some(&second));
        assert_eq!(clock.width_ns(), Some(29_000 + 11_000));
    }

    /// A collection seen under way, then closed by the next read; one seen whole in one read;
    /// one under way at the time of a block: the block's overlap with each, on
    /// CLOCK_MONOTONIC.
    #[test]
    fn collections_are_stitched_from_reads_and_overlap_blocks() {
        let ms = 1_000_000u64;
        let base = 100_000 * ms;
        let mut timeline = GcTimeline::default();
        // The JVM's clock is written 30 µs after each read began, 10 µs into the first: reads
        // bracket the clock's offset within 41 µs.
        let hrt = |k: u64| t(base + (k * 10 * ms).saturating_sub(10 * ms) + 30_000);
        timeline.take(read(base, 0, 0, 0, t(base + 10_000)));
        // Under way since base + 5 ms (the exit is the last one's: none yet).
        timeline.take(read(base + 10 * ms, 1, t(base + 5 * ms), 0, hrt(1)));
        // A second one whole, 14..15 ms: the first ended before it, at least 10 ms in (when
        // last seen under way), its own exit never read.
        timeline.take(read(
            base + 20 * ms,
            2,
            t(base + 14 * ms),
            t(base + 15 * ms),
            hrt(2),
        ));
        // One under way since 25 ms, after the second's exit.
        timeline.take(read(
            base + 30 * ms,
            3,
            t(base + 25 * ms),
            t(base + 15 * ms),
            hrt(3),
        ));
        // It ended, one more began and ended unseen, and one 33..34 ms is whole: the third's
        // exit is not its own, so it lasted at least until 30 ms.
        timeline.take(read(
            base + 40 * ms,
            5,
            t(base + 33 * ms),
            t(base + 34 * ms),
            hrt(4),
        ));
        assert_eq!(timeline.invocations(), 5);
        assert_eq!(timeline.seen(), 4, "one of five fell between two reads");
        let over = |b, e| timeline.overlaps(base + b * ms, base + e * ms).unwrap();
        let within = |got: &[(IntervalKind, u64)], want: u64| {
            let ns = got.iter().map(|(_, ns)| ns).sum::<u64>();
            assert!(ns.abs_diff(want) <= 200_000, "{ns} for {want}");
        };
        within(&over(0, 5), 0);
        within(&over(0, 13), 5 * ms);
        within(&over(14, 16), ms);
        within(&over(24, 32), 5 * ms);
        within(&over(32, 36), ms);
        assert!(
            timeline.overlaps(base, base + 45 * ms).is_none(),
            "not known yet"
        );
        within(
            &timeline.overlaps_so_far(base, base + 45 * ms).unwrap(),
            12 * ms,
        );
        assert_eq!(over(14, 16)[0].0, IntervalKind::Scavenge);
    }
}
