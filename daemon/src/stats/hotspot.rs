//! HotSpot's own statistics with no JVM flags: its performance data file
//! (`/tmp/hsperfdata_<user>/<pid>`, what `jstat` reads), read at a session's start and when the
//! session stops sampling the JVM, and turned into the same [`VmStatistics`] a VM that
//! publishes its statistics gets: collections (`sun.gc.collector.0` young, `.1` full, others by
//! their name), safepoints, JIT compilations, heap generations in use. In between, it is read
//! every [`GAUGE_PERIOD_NS`] for the heap's levels alone: their lowest and highest values, which
//! the two ends miss when a generation fills and empties between them.
//!
//! The JVM maps the file shared and writes its counters in place, so the daemon finds it
//! among the JVM's mappings and opens it through `/proc/PID/map_files`: the very file the JVM
//! maps, inside a container too, with no user name to guess. The JVM unlinks the file as it
//! exits; the descriptor held from the first read keeps its last values readable after that.
//! The file must belong to the JVM's user, and is read whole (at most [`MAX_FILE_BYTES`]) with
//! `pread`, never mapped by the daemon.

use std::{fs::File, os::unix::fs::FileExt as _, os::unix::fs::MetadataExt as _, path::Path};

use crate::sys;
use vmscope_model::{
    ConfigValue, Configuration, CounterDelta, GaugeDelta, IntervalKind, IntervalTotals,
    VmStatistics,
};
use vmscope_parse::{
    hsperfdata::{PerfData, parse_hsperfdata},
    maps::{MapPath, parse_maps},
};

/// Largest performance data file read: HotSpot's default is 64 KiB (`-XX:PerfDataMemorySize`).
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// Most generations, spaces of a generation, and collectors looked for: HotSpot has at most
/// 3, 5 and 4; the JVM's user writes the file, and each is a look-up among its entries.
const MAX_NUMBERED: usize = 16;

/// How often a running session reads its JVMs' files for the heap's levels: HotSpot updates
/// the generations' sizes every 50 ms (`-XX:PerfDataSamplingInterval`) and after each
/// collection; a read and parse costs some 17 µs (`cargo bench --bench hsperfdata`), so 10 a
/// second cost a JVM target 0.02% of the daemon's core.
pub const GAUGE_PERIOD_NS: u64 = 100_000_000;

/// Why a JVM's performance data could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HotspotError {
    /// The process is gone.
    #[error("the process exited")]
    Gone,
    /// Reading it failed.
    #[error("{0}")]
    Io(String),
    /// The file is not the JVM's user's, or not a plain file of a sane size.
    #[error("{0}")]
    Untrusted(String),
    /// It does not parse.
    #[error("{0}")]
    Malformed(String),
}

/// A JVM's performance data file, held open.
#[derive(Debug)]
pub struct PerfDataFile {
    file: File,
    /// The path the JVM mapped, for messages.
    pub path: String,
}

impl PerfDataFile {
    /// The performance data file process `pid` maps, if it maps one (a HotSpot JVM without
    /// `-XX:-UsePerfData`).
    pub fn find(pid: u32) -> Result<Option<PerfDataFile>, HotspotError> {
        let gone = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound => HotspotError::Gone,
            _ => HotspotError::Io(format!("/proc/{pid}: {e}")),
        };
        let maps = parse_maps(&sys::read_proc(pid, "maps").map_err(gone)?);
        let Some(entry) = maps.entries.iter().find(|e| match &e.path {
            MapPath::File { path, .. } => is_perf_data_path(path),
            _ => false,
        }) else {
            return Ok(None);
        };
        let MapPath::File { path, .. } = &entry.path else {
            unreachable!("found above")
        };
        let path = path.display().to_string();
        let map_file = sys::proc_path(pid, &format!("map_files/{:x}-{:x}", entry.start, entry.end));
        let file = File::open(&map_file).map_err(|e| HotspotError::Io(format!("{path}: {e}")))?;
        let uid = sys::read_status(pid).map_err(gone)?.uids.effective;
        let meta = file
            .metadata()
            .map_err(|e| HotspotError::Io(format!("{path}: {e}")))?;
        if meta.uid() != uid {
            return Err(HotspotError::Untrusted(format!(
                "{path} belongs to uid {}, not to the JVM's uid {uid}: not read",
                meta.uid()
            )));
        }
        if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
            return Err(HotspotError::Untrusted(format!(
                "{path}: not a file of at most {MAX_FILE_BYTES} bytes"
            )));
        }
        Ok(Some(PerfDataFile { file, path }))
    }

    /// Reads and parses the file as it is now.
    pub fn read(&self) -> Result<PerfData, HotspotError> {
        let len = self
            .file
            .metadata()
            .map_err(|e| HotspotError::Io(format!("{}: {e}", self.path)))?
            .len()
            .min(MAX_FILE_BYTES);
        let mut bytes = vec![0; len as usize];
        let mut at = 0;
        while at < bytes.len() {
            match self.file.read_at(&mut bytes[at..], at as u64) {
                Ok(0) => break,
                Ok(n) => at += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(HotspotError::Io(format!("{}: {e}", self.path))),
            }
        }
        bytes.truncate(at);
        parse_hsperfdata(&bytes).map_err(|e| HotspotError::Malformed(format!("{}: {e}", self.path)))
    }
}

/// Whether a mapped file is a performance data file: `.../hsperfdata_<user>/<pid>`.
fn is_perf_data_path(path: &Path) -> bool {
    let named = |p: Option<&std::ffi::OsStr>, test: &dyn Fn(&str) -> bool| {
        p.and_then(|n| n.to_str()).is_some_and(test)
    };
    named(path.file_name(), &|n| {
        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    }) && named(path.parent().and_then(Path::file_name), &|d| {
        d.starts_with("hsperfdata_")
    })
}

/// The heap's levels in a reading: each generation's bytes in use and its capacity, named
/// "young used", "young capacity"...
fn heap_levels(data: &PerfData) -> Vec<(String, i64)> {
    let long = |name: &str| data.long(name).unwrap_or(0);
    let mut levels = Vec::new();
    for n in 0..MAX_NUMBERED {
        let prefix = format!("sun.gc.generation.{n}");
        let Some(name) = data.string(&format!("{prefix}.name")) else {
            break;
        };
        let used = (0..long(&format!("{prefix}.spaces")).min(MAX_NUMBERED as i64))
            .map(|s| long(&format!("{prefix}.space.{s}.used")))
            .fold(0i64, i64::saturating_add);
        levels.push((format!("{name} used"), used));
        levels.push((
            format!("{name} capacity"),
            long(&format!("{prefix}.capacity")),
        ));
    }
    levels
}

/// The first, lowest and highest value of each heap level over the readings of a JVM's file.
#[derive(Clone, Debug, Default)]
pub struct LevelRanges(Vec<(String, i64, i64, i64)>);

impl LevelRanges {
    /// Takes the levels of one more reading.
    pub fn widen(&mut self, data: &PerfData) {
        for (name, value) in heap_levels(data) {
            match self.0.iter_mut().find(|(n, ..)| *n == name) {
                Some((_, _, low, high)) => {
                    *low = (*low).min(value);
                    *high = (*high).max(value);
                }
                None => self.0.push((name, value, value, value)),
            }
        }
    }

    /// First, lowest and highest values.
    fn get(&self, name: &str) -> Option<(i64, i64, i64)> {
        self.0
            .iter()
            .find(|(n, ..)| n == name)
            .map(|&(_, first, low, high)| (first, low, high))
    }
}

/// What changed in a JVM between two readings of its performance data, `window_ns` apart:
/// the statistics of a session that started at the first and stopped at the second; `ranges`
/// are the heap's levels over every reading in between (the two ends included). Counters
/// missing from `first` count from zero (a JVM created during the session: all of it is
/// inside); levels missing from it, from their first reading, as a VM's published gauges do.
pub fn statistics(
    pid: u32,
    first: &PerfData,
    last: &PerfData,
    ranges: &LevelRanges,
    window_ns: u64,
) -> VmStatistics {
    let long = |data: &PerfData, name: &str| data.long(name).unwrap_or(0);
    let grown = |name: &str| long(last, name).saturating_sub(long(first, name)).max(0) as u64;
    // Times are in ticks of the high-resolution timer.
    let frequency = long(last, "sun.os.hrt.frequency").max(1) as u128;
    let ns = |ticks: u64| (u128::from(ticks) * 1_000_000_000 / frequency) as u64;
    let text = |name: &str| last.string(name).unwrap_or_default().to_owned();
    let mut configuration = Vec::new();
    let mut setting = |name: &str, value: String| {
        if !value.is_empty() {
            configuration.push(Configuration {
                name: name.into(),
                value: Some(ConfigValue::Text(value)),
                unit: String::new(),
            });
        }
    };
    setting("GC", text("sun.gc.policy.name"));
    let mut intervals = Vec::new();
    for n in 0..MAX_NUMBERED {
        let prefix = format!("sun.gc.collector.{n}");
        let Some(name) = last.string(&format!("{prefix}.name")) else {
            break;
        };
        let kind = match n {
            0 => IntervalKind::Scavenge,
            1 => IntervalKind::FullGc,
            _ => IntervalKind::Named(name.to_owned()),
        };
        match n {
            0 => setting("young collector", name.to_owned()),
            1 => setting("full collector", name.to_owned()),
            _ => {}
        }
        intervals.push(IntervalTotals {
            kind,
            count: grown(&format!("{prefix}.invocations")),
            total_ns: ns(grown(&format!("{prefix}.time"))),
            longest_ns: 0,
            sampled: 0,
        });
    }
    if last.long("sun.rt.safepoints").is_some() {
        intervals.push(IntervalTotals {
            kind: IntervalKind::Safepoint,
            count: grown("sun.rt.safepoints"),
            total_ns: ns(grown("sun.rt.safepointTime")),
            longest_ns: 0,
            sampled: 0,
        });
    }
    if last.long("sun.ci.totalCompiles").is_some() {
        intervals.push(IntervalTotals {
            kind: IntervalKind::Named("JIT compilations".into()),
            count: grown("sun.ci.totalCompiles"),
            total_ns: ns(grown("java.ci.totalTime")),
            longest_ns: 0,
            sampled: 0,
        });
    }
    let before = heap_levels(first);
    let gauges = heap_levels(last)
        .into_iter()
        .map(|(name, after)| {
            let (first, low, high) = ranges.get(&name).unwrap_or((after, after, after));
            let start = before
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(first, |&(_, v)| v);
            GaugeDelta {
                delta: after.saturating_sub(start),
                last: after,
                low: low.min(after),
                high: high.max(after),
                name,
                unit: "bytes".into(),
            }
        })
        .collect();
    let counters = [
        ("Classes loaded", "java.cls.loadedClasses"),
        ("Threads started", "java.threads.started"),
    ]
    .into_iter()
    .filter(|(_, name)| last.long(name).is_some())
    .map(|(label, name)| CounterDelta {
        name: label.into(),
        unit: String::new(),
        delta: grown(name),
        last: long(last, name).max(0) as u64,
    })
    .collect();
    let vm = [
        text("java.property.java.vm.name"),
        text("java.property.java.vm.version"),
    ]
    .join(" ")
    .trim()
    .to_owned();
    VmStatistics {
        pid,
        vm,
        configuration,
        counters,
        gauges,
        intervals,
        window_ns,
        // Its collections have no times: no sample is known to be in one.
        samples: 0,
        exact_counts: Vec::new(),
        domain_events: Vec::new(),
    }
}

/// A target's performance data over a session.
#[derive(Debug)]
struct Target {
    pid: u32,
    file: PerfDataFile,
    first: PerfData,
    /// The latest reading that succeeded.
    latest: PerfData,
    /// Read a last time: the session stopped sampling it.
    frozen: bool,
    /// The heap's levels over every reading.
    ranges: LevelRanges,
}

impl Target {
    /// Reads the file now; a reading that fails leaves the latest good one in place.
    fn read(&mut self) -> Result<(), HotspotError> {
        let now = self.file.read()?;
        self.ranges.widen(&now);
        self.latest = now;
        Ok(())
    }
}

/// How long after a session's start its targets that map no performance data file yet are
/// looked at again: a JVM started by `vmscope record` maps it during its first second.
pub const LOOK_FOR_NS: u64 = 30_000_000_000;

/// The wait after the first look again at targets with no performance data file; each look
/// that finds some still missing doubles it, up to [`MAX_LOOK_EVERY_NS`]. A look reads and
/// parses the target's whole `/proc/PID/maps`: at every tick for 30 s, a session on programs
/// that are not JVMs spent more on it than on their samples.
const FIRST_LOOK_EVERY_NS: u64 = 100_000_000;

/// The longest wait between two looks for a missing performance data file.
const MAX_LOOK_EVERY_NS: u64 = 1_600_000_000;

/// The performance data of a session's JVM targets.
#[derive(Debug, Default)]
pub struct SessionPerfData {
    /// The session's wall-clock start, in ms since the epoch (HotSpot's clock for
    /// `sun.rt.createVmBeginTime`).
    started_ms: i64,
    targets: Vec<Target>,
    /// Targets with no performance data file yet.
    missing: Vec<u32>,
    /// When the heap's levels were last read (CLOCK_MONOTONIC).
    levels_read_ns: u64,
    /// When missing files are looked for next (CLOCK_MONOTONIC; 0: at the next tick), and the
    /// wait after that.
    next_look_ns: u64,
    look_every_ns: u64,
}

impl SessionPerfData {
    /// The performance data of targets `pids`, for a session that started at `started_ms`
    /// (wall clock, ms since the epoch): none read until [`SessionPerfData::look_again`].
    pub fn new(pids: impl IntoIterator<Item = u32>, started_ms: i64) -> SessionPerfData {
        SessionPerfData {
            started_ms,
            missing: pids.into_iter().collect(),
            ..SessionPerfData::default()
        }
    }

    /// Looks for the files of the targets that have none yet (a JVM still starting); answers
    /// how many were found and how many failed. A JVM created after the session started has
    /// its counters measured from zero, the rest from their first reading; a file the JVM is
    /// still setting up (not yet `accessible`) is looked at again.
    pub fn look_again(&mut self) -> (u64, u64) {
        let (mut found, mut failed) = (0, 0);
        let started_ms = self.started_ms;
        let mut still = Vec::new();
        for pid in std::mem::take(&mut self.missing) {
            let read = PerfDataFile::find(pid).and_then(|file| match file {
                Some(file) => file.read().map(|now| Some((file, now))),
                None => Ok(None),
            });
            match read {
                // Still setting its counters up (jvmstat waits for this too): look again.
                Ok(Some((_, now))) if !now.accessible => still.push(pid),
                Ok(Some((file, now))) => {
                    let mut ranges = LevelRanges::default();
                    ranges.widen(&now);
                    let created_ms = now.long("sun.rt.createVmBeginTime").unwrap_or(0);
                    let first = if created_ms >= started_ms {
                        PerfData {
                            version: now.version,
                            accessible: true,
                            entries: Vec::new(),
                            unwritten: 0,
                        }
                    } else {
                        now.clone()
                    };
                    found += 1;
                    self.targets.push(Target {
                        pid,
                        file,
                        first,
                        latest: now,
                        frozen: false,
                        ranges,
                    });
                }
                Ok(None) => still.push(pid),
                Err(HotspotError::Gone) => {}
                Err(e) => {
                    tracing::info!(pid, "HotSpot performance data not read: {e}");
                    failed += 1;
                }
            }
        }
        self.missing = still;
        (found, failed)
    }

    /// Whether some targets have no file yet.
    pub fn missing(&self) -> bool {
        !self.missing.is_empty()
    }

    /// Whether some targets have no file yet and it is time to look for them again at `now_ns`:
    /// at the first tick, then 0.1 s later, 0.2 s after that, 0.4... up to every 1.6 s.
    pub fn look_due(&mut self, now_ns: u64) -> bool {
        if self.missing.is_empty() || now_ns < self.next_look_ns {
            return false;
        }
        self.look_every_ns = match self.look_every_ns {
            0 => FIRST_LOOK_EVERY_NS,
            every => (every * 2).min(MAX_LOOK_EVERY_NS),
        };
        self.next_look_ns = now_ns + self.look_every_ns;
        true
    }

    /// Stops looking for `pid`'s file: the session no longer samples it.
    pub fn forget_missing(&mut self, pid: u32) {
        self.missing.retain(|&p| p != pid);
    }

    /// Reads `pid`'s file a last time: the session stops sampling it.
    pub fn freeze(&mut self, pid: u32) {
        self.forget_missing(pid);
        for target in self.targets.iter_mut().filter(|t| t.pid == pid) {
            freeze(target);
        }
    }

    /// Reads the files of the JVMs still sampled for their heap's levels, if
    /// [`GAUGE_PERIOD_NS`] went by since the last time (`now_ns` is CLOCK_MONOTONIC); answers
    /// how many reads failed.
    pub fn read_levels(&mut self, now_ns: u64) -> u64 {
        if now_ns.saturating_sub(self.levels_read_ns) < GAUGE_PERIOD_NS {
            return 0;
        }
        self.levels_read_ns = now_ns;
        let mut failed = 0;
        for target in self.targets.iter_mut().filter(|t| !t.frozen) {
            match target.read() {
                Ok(()) => {}
                Err(e) => {
                    tracing::debug!(pid = target.pid, "HotSpot performance data: {e}");
                    failed += 1;
                }
            }
        }
        failed
    }

    /// Reads every file a last time: the session stops.
    pub fn freeze_all(&mut self) {
        self.missing.clear();
        for target in &mut self.targets {
            freeze(target);
        }
    }

    /// The statistics of each JVM from the session's start to its last reading, or to now
    /// while it is still sampled; `window_ns` is the session's time sampled.
    pub fn summary(&self, window_ns: u64) -> Vec<VmStatistics> {
        self.targets
            .iter()
            .map(|t| {
                let now = (!t.frozen).then(|| t.file.read().ok()).flatten();
                match &now {
                    Some(now) => {
                        let mut ranges = t.ranges.clone();
                        ranges.widen(now);
                        statistics(t.pid, &t.first, now, &ranges, window_ns)
                    }
                    None => statistics(t.pid, &t.first, &t.latest, &t.ranges, window_ns),
                }
            })
            .collect()
    }
}

/// Reads a target's file a last time, once: a reading that fails leaves the statistics at
/// the latest that succeeded.
fn freeze(target: &mut Target) {
    if target.frozen {
        return;
    }
    target.frozen = true;
    if let Err(e) = target.read() {
        tracing::info!(
            pid = target.pid,
            "HotSpot performance data, its last reading: {e}"
        );
    }
}

#[cfg(test)]
mod tests {
    use vmscope_parse::hsperfdata::{Entry, Units, Value, Variability};

    use super::*;

    #[test]
    fn missing_files_are_looked_for_less_and_less_often() {
        let mut data = SessionPerfData::new([1, 2], 0);
        let ms = 1_000_000;
        let due: Vec<u64> = (1..=60)
            .map(|tick| tick * 100 * ms)
            .filter(|&now| data.look_due(now))
            .map(|now| now / ms)
            .collect();
        assert_eq!(due, [100, 200, 400, 800, 1600, 3200, 4800]);
        data.forget_missing(1);
        data.forget_missing(2);
        assert!(!data.look_due(10_000 * ms), "nothing missing: no look");
    }

    fn data(entries: &[(&str, Value)]) -> PerfData {
        PerfData {
            version: (2, 0),
            accessible: true,
            entries: entries
                .iter()
                .map(|(name, value)| Entry {
                    name: (*name).into(),
                    units: Units::None,
                    variability: Variability::Monotonic,
                    value: value.clone(),
                })
                .collect(),
            unwritten: 0,
        }
    }

    /// The JVM's user writes the file: counts of spaces and sizes are not trusted to bound
    /// a loop or to add up without overflow.
    #[test]
    fn hostile_levels_neither_hang_nor_overflow() {
        let text = |s: &str| Value::String(s.into());
        let mut entries = vec![
            ("sun.gc.generation.0.name", text("young")),
            ("sun.gc.generation.0.spaces", Value::Long(i64::MAX)),
            ("sun.gc.generation.0.capacity", Value::Long(i64::MIN)),
        ];
        let names: Vec<String> = (0..3)
            .map(|s| format!("sun.gc.generation.0.space.{s}.used"))
            .collect();
        entries.extend(names.iter().map(|n| (n.as_str(), Value::Long(i64::MAX))));
        let hostile = data(&entries);
        assert_eq!(
            heap_levels(&hostile),
            [
                ("young used".to_owned(), i64::MAX),
                ("young capacity".to_owned(), i64::MIN)
            ]
        );
        let mut ranges = LevelRanges::default();
        ranges.widen(&hostile);
        let stats = statistics(7, &data(&[]), &hostile, &ranges, 1);
        assert_eq!(stats.gauges[0].delta, 0, "from its first reading");
        let before = data(&[
            ("sun.gc.generation.0.name", text("young")),
            ("sun.gc.generation.0.capacity", Value::Long(i64::MAX)),
        ]);
        let stats = statistics(7, &before, &hostile, &ranges, 1);
        assert_eq!(
            stats.gauges[1].delta,
            i64::MIN,
            "i64::MIN - i64::MAX, saturated"
        );
    }

    #[test]
    fn perf_data_files_are_told_by_their_path() {
        assert!(is_perf_data_path(Path::new("/tmp/hsperfdata_root/4242")));
        assert!(is_perf_data_path(Path::new("/tmp/hsperfdata_app user/7")));
        assert!(!is_perf_data_path(Path::new("/tmp/hsperfdata_root/x42")));
        assert!(!is_perf_data_path(Path::new("/tmp/perf-42.map")));
        assert!(!is_perf_data_path(Path::new("/42")));
    }

    #[test]
    fn collections_safepoints_and_compilations_are_the_counters_growth() {
        let text = |s: &str| Value::String(s.into());
        let reading = |young: i64, young_ticks: i64, used: i64| {
            data(&[
                ("sun.os.hrt.frequency", Value::Long(1_000_000)),
                ("sun.gc.policy.name", text("GarbageFirst")),
                (
                    "sun.gc.collector.0.name",
                    text("G1 young collection pauses"),
                ),
                ("sun.gc.collector.0.invocations", Value::Long(young)),
                ("sun.gc.collector.0.time", Value::Long(young_ticks)),
                ("sun.gc.collector.1.name", text("G1 full collection pauses")),
                ("sun.gc.collector.1.invocations", Value::Long(0)),
                ("sun.gc.collector.1.time", Value::Long(0)),
                (
                    "sun.gc.collector.2.name",
                    text("G1 concurrent cycle pauses"),
                ),
                ("sun.gc.collector.2.invocations", Value::Long(1)),
                ("sun.gc.collector.2.time", Value::Long(10)),
                ("sun.rt.safepoints", Value::Long(young + 2)),
                ("sun.rt.safepointTime", Value::Long(young_ticks * 2)),
                ("sun.ci.totalCompiles", Value::Long(100 + young)),
                ("java.ci.totalTime", Value::Long(5_000)),
                ("sun.gc.generation.0.name", text("young")),
                ("sun.gc.generation.0.spaces", Value::Long(2)),
                ("sun.gc.generation.0.capacity", Value::Long(1 << 20)),
                ("sun.gc.generation.0.space.0.used", Value::Long(used)),
                ("sun.gc.generation.0.space.1.used", Value::Long(1000)),
                (
                    "java.property.java.vm.name",
                    text("OpenJDK 64-Bit Server VM"),
                ),
                ("java.property.java.vm.version", text("17.0.15")),
            ])
        };
        let (first, last) = (reading(3, 2_000, 5_000), reading(10, 9_000, 2_000));
        let mut ranges = LevelRanges::default();
        // Read between the ends: the young generation filled up to 60,000 bytes in use.
        for reading in [&first, &reading(5, 4_000, 60_000), &last] {
            ranges.widen(reading);
        }
        let stats = statistics(7, &first, &last, &ranges, 1);
        assert_eq!(stats.vm, "OpenJDK 64-Bit Server VM 17.0.15");
        let kinds: Vec<(IntervalKind, u64, u64)> = stats
            .intervals
            .iter()
            .map(|i| (i.kind.clone(), i.count, i.total_ns))
            .collect();
        let named = |name: &str| IntervalKind::Named(name.into());
        assert_eq!(
            kinds,
            [
                (IntervalKind::Scavenge, 7, 7_000_000),
                (IntervalKind::FullGc, 0, 0),
                (named("G1 concurrent cycle pauses"), 0, 0),
                (IntervalKind::Safepoint, 7, 14_000_000),
                (named("JIT compilations"), 7, 0),
            ]
        );
        let used = &stats.gauges[0];
        assert_eq!(
            (used.name.as_str(), used.delta, used.last),
            ("young used", -3_000, 3_000)
        );
        assert_eq!((used.low, used.high), (3_000, 61_000));
        let capacity = &stats.gauges[1];
        assert_eq!(
            (
                capacity.name.as_str(),
                capacity.delta,
                capacity.low,
                capacity.high
            ),
            ("young capacity", 0, 1 << 20, 1 << 20)
        );
        // A JVM created during the session: its collections all count, its heap's levels
        // from its first reading.
        let empty = data(&[]);
        let stats = statistics(7, &empty, &last, &ranges, 1);
        assert_eq!(stats.intervals[0].count, 10);
        let used = &stats.gauges[0];
        assert_eq!((used.delta, used.low, used.high), (-3_000, 3_000, 61_000));
        let capacity = &stats.gauges[1];
        assert_eq!(capacity.delta, 0);
        assert_eq!(stats.configuration[0].name, "GC");
        assert_eq!(stats.configuration[1].name, "young collector");
    }
}
