//! One process's code maps: its timelines (the map through time, and the replay of samples
//! counted provisionally), samples parked for a later snapshot, its sources and how far they
//! are known.

use super::{
    live::LiveMap,
    reading::{Sources, Status},
    refusals::Refusals,
    registry::{
        CodeMapCounters, DISCOVERY_WAIT_NS, JITDUMP_MAX_WAIT_NS, MAX_FUTURE_NS,
        PUBLICATION_GRACE_NS, READ_GRACE_NS, count_refusals,
    },
    sample::{Parked, RoutedSample},
    timeline::{Change, Timeline},
};
use crate::vocab::{CodeMapKinds, MappedCodeMapFile};

#[derive(Debug)]
pub(super) struct ProcessCode {
    pub(super) timeline: Timeline<RoutedSample>,
    /// Samples counted provisionally, in a timeline that moves only as far as the sources
    /// vouch (see [the registry's doc](super::registry)); their frames as normalised, before any placement.
    pub(super) replay: Timeline<Parked>,
    /// Samples the map of their time left unexplained, waiting for the perf map to change
    /// after their time: (time, sample).
    pub(super) snapshot_parked: Vec<Parked>,
    /// The perf map's entries as last read, for samples named from a later snapshot.
    pub(super) perf_content: LiveMap,
    /// Ranges of entries refused for lying outside executable mappings.
    pub(super) refused_ranges: std::collections::VecDeque<(u64, u64)>,
    /// When each kind of code map was first found, by kind bit.
    pub(super) found_ns: [u64; 4],
    /// Samples left unexplained by the map of their time since the perf map was last
    /// rewritten by request: what makes asking a JVM again worth it.
    pub(super) unexplained_since_snapshot: u64,
    /// Samples a perf map read after their time named: whether asking a JVM again is worth
    /// it.
    pub(super) named_by_snapshots: u64,
    pub(super) uid: Option<u32>,
    pub(super) nspid: u32,
    /// Its files, and the state of reading them; `None` while out to a reader.
    pub(super) sources: Option<Sources>,
    /// What the sources said when they last came back from a read.
    pub(super) status: Status,
    /// The time of the last read taken back (0: none yet): what the sources are known up to.
    pub(super) read_ns: u64,
    /// A read made after the process exited was taken back: its map is complete.
    pub(super) read_after_exit: bool,
    /// The current checkout of the sources: replies of another are stale.
    pub(super) generation: u64,
    /// Files it maps that may be new, to be opened by the next read.
    pub(super) new_files: Vec<MappedCodeMapFile>,
    /// Its perf map was rewritten while its sources were out: read it again, whole.
    pub(super) reread_perf_map: bool,
    /// Its perf map changed since samples waiting for a later snapshot were last settled.
    pub(super) perf_map_changed: bool,
    /// The process's start time (`/proc/PID/stat`): what tells it from a later one at its pid.
    pub(super) start_time_ticks: Option<u64>,
    /// gRPC publications open, and how far they are known.
    pub(super) streams: u32,
    pub(super) published_until_ns: u64,
    pub(super) exited: bool,
    /// When [`CodeMaps::forget_gone`] first found it gone.
    pub(super) gone_ns: Option<u64>,
}

impl ProcessCode {
    /// Whether samples of it wait, are parked, or are provisional.
    pub(super) fn busy(&self) -> bool {
        self.counting() || !self.snapshot_parked.is_empty()
    }

    /// Whether samples of it wait for their map, or are provisional: samples that the next
    /// read or the reader's watermark may let through. (Parked samples wait for the perf map
    /// to change, which a read now and then finds as well as one per batch.)
    pub(super) fn counting(&self) -> bool {
        self.timeline.pending_samples() > 0 || self.replay.pending_samples() > 0
    }

    /// The kinds of code map it has.
    pub(super) fn kinds(&self) -> CodeMapKinds {
        let mut kinds = CodeMapKinds::default();
        if self.status.perf_map {
            kinds = kinds.with(CodeMapKinds::PERF_MAP);
        }
        if self.status.jitdumps {
            kinds = kinds.with(CodeMapKinds::JITDUMP);
        }
        if self.status.files {
            kinds = kinds.with(CodeMapKinds::CODE_MAP_FILE);
        }
        if self.streams > 0 || self.published_until_ns > 0 {
            kinds = kinds.with(CodeMapKinds::PUBLICATION);
        }
        kinds
    }

    /// Notes the kinds of code map it has now, with when each was first seen.
    pub(super) fn note_found(&mut self, now_ns: u64) {
        let kinds = self.kinds();
        for (bit, found) in self.found_ns.iter_mut().enumerate() {
            if kinds.0 & (1 << bit) != 0 && *found == 0 {
                *found = now_ns.max(1);
            }
        }
    }

    /// What each of its sources (when not out to a reader), and its timeline, refused.
    pub(super) fn refusals(&mut self) -> impl Iterator<Item = &mut Refusals> {
        self.sources
            .iter_mut()
            .flat_map(|s| s.refusals())
            .chain(std::iter::once(&mut self.timeline.refusals))
    }

    /// Whether a read of its files is under way, or due at once (its perf map was rewritten).
    pub(super) fn reading(&self) -> bool {
        self.sources.is_none() || self.reread_perf_map
    }

    /// Hands what its sources refused since last time to the daemon's counters: before the
    /// sources go (their refusals would be lost with them).
    pub(super) fn count_refusals(&mut self, counters: &mut CodeMapCounters) {
        for refusals in self.refusals() {
            count_refusals(counters, refusals);
        }
    }

    /// Adds what the process counted to the registry's counters as it is forgotten: the
    /// daemon's counters only go up, whatever processes come and go.
    pub(super) fn retire(mut self, counters: &mut CodeMapCounters) {
        counters.forgotten += 1;
        if let Some(sources) = &mut self.sources {
            sources.give_up_held();
        }
        self.count_refusals(counters);
        let t = self.timeline.counters();
        counters.changes += t.applied;
        counters.changes_late += t.late;
        counters.samples_late += t.late_samples;
    }

    /// Up to when its sources vouch for the map themselves: [`ProcessCode::known_until`]
    /// without its bounded waits. A sample attributed later than this was attributed before
    /// its code map caught up (a buffered jitdump, a silent publication).
    pub(super) fn vouched_until(&self, now_ns: u64) -> u64 {
        self.until(now_ns, false)
    }

    /// Up to when every change of the process is known (see [the registry's doc](super::registry)).
    pub(super) fn known_until(&self, now_ns: u64) -> u64 {
        self.until(now_ns, true)
    }

    /// What the sources vouch for, and with `bounded`, no less than their bounded waits allow:
    /// a process with no source yet is waited for [`DISCOVERY_WAIT_NS`], a silent publication
    /// [`PUBLICATION_GRACE_NS`], a buffered jitdump [`JITDUMP_MAX_WAIT_NS`], a read under way
    /// [`READ_GRACE_NS`].
    pub(super) fn until(&self, now_ns: u64, bounded: bool) -> u64 {
        if self.exited && self.read_after_exit {
            return u64::MAX;
        }
        let at_least = |wait: u64| {
            if bounded {
                now_ns.saturating_sub(wait)
            } else {
                0
            }
        };
        let no_source_yet = !self.status.any() && self.streams == 0;
        // Without any source, nothing is vouched for and nothing waited for but the discovery.
        let mut until = if no_source_yet && bounded {
            now_ns.saturating_sub(DISCOVERY_WAIT_NS)
        } else {
            now_ns
        };
        if self.streams > 0 {
            until = until.min(self.published_until_ns.max(at_least(PUBLICATION_GRACE_NS)));
        }
        if let Some(file) = self.status.files_known_until {
            until = until.min(file.max(at_least(PUBLICATION_GRACE_NS)));
        }
        if let Some(jitdump) = self.status.jitdumps_last_ns {
            until = until.min(jitdump.max(at_least(JITDUMP_MAX_WAIT_NS)));
        }
        // Files are known up to the last read: what a read under way brings is not known yet.
        // (A process never read, only published for, is known as far as its publications.)
        if self.read_ns > 0 || self.sources.is_none() {
            until = until.min(self.read_ns.max(at_least(READ_GRACE_NS)));
        }
        until
    }

    /// Queues changes in both timelines, refusing those stamped further ahead than
    /// [`MAX_FUTURE_NS`].
    pub(super) fn push_changes(&mut self, now_ns: u64, changes: Vec<(u64, Change)>) {
        for (ts, change) in changes {
            if ts > now_ns.saturating_add(MAX_FUTURE_NS) {
                self.timeline.refuse(format!(
                    "a change stamped {:.1} s in the future",
                    (ts - now_ns) as f64 / 1e9
                ));
            } else {
                self.replay.push_change(ts, change.clone());
                self.timeline.push_change(ts, change);
            }
        }
    }
}
