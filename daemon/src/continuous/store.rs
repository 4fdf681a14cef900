//! The windows continuous profiling keeps: one profile per (window, process), oldest dropped
//! first once their bytes pass the budget, selected by time, process or executable and merged
//! on request.
//!
//! Each profile is kept packed, as gzipped JSON of the model ([`pack`]): the frames of a window
//! repeat the same names, modules, build ids and source paths, and a process's profile packs
//! to about a tenth of what it takes unpacked. The budget counts the packed bytes, exactly.

use std::{
    collections::{BTreeMap, VecDeque},
    io::Read as _,
    io::Write as _,
    sync::Arc,
    time::SystemTime,
};

use vmscope_model::Profile;

/// A profile packed for keeping: gzipped JSON of the model.
pub fn pack(profile: &Profile) -> std::io::Result<Vec<u8>> {
    // Serialised whole, then compressed in one write: serde_json writes a few bytes at a time,
    // and flate2 zeroes its output's spare capacity at every write (a quarter of a continuous
    // daemon's time, in memset).
    let json = serde_json::to_vec(profile)?;
    let mut gzip = flate2::write::GzEncoder::new(
        Vec::with_capacity(json.len() / 8 + 64),
        flate2::Compression::fast(),
    );
    gzip.write_all(&json)?;
    gzip.finish()
}

/// A packed profile as it was.
pub fn unpack(packed: &[u8]) -> std::io::Result<Profile> {
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(packed).read_to_end(&mut json)?;
    Ok(serde_json::from_slice(&json)?)
}

/// One process's profile over one window.
#[derive(Debug, Clone)]
pub struct Entry {
    /// When the window began.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
    /// The process.
    pub pid: u32,
    /// Its command (`comm`).
    pub command: String,
    /// Its executable's path when the window was built (empty if the process was gone).
    pub executable: String,
    /// Its samples in the window.
    pub samples: u64,
    /// Its profile over the window, packed ([`pack`]): shared, so that a query takes the
    /// entries it selects out of the store's lock without copying their bytes.
    pub packed: Arc<[u8]>,
}

impl Entry {
    /// The bytes it takes in the budget.
    pub fn bytes(&self) -> usize {
        self.packed.len()
    }

    /// Whether its executable is `exe`: the path, the path's file name, or the command.
    pub fn runs(&self, exe: &str) -> bool {
        self.executable == exe
            || self.executable.rsplit('/').next() == Some(exe)
            || self.command == exe
    }
}

/// Which entries a query takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Windows that end after this; from the oldest kept when `None`.
    pub start: Option<SystemTime>,
    /// Windows that begin before this; up to the newest when `None`.
    pub end: Option<SystemTime>,
    /// This process only.
    pub pid: Option<u32>,
    /// The processes running this executable only (see [`Entry::runs`]).
    pub executable: Option<String>,
}

impl Selection {
    fn takes(&self, entry: &Entry) -> bool {
        self.start.is_none_or(|start| entry.end > start)
            && self.end.is_none_or(|end| entry.start < end)
            && self.pid.is_none_or(|pid| entry.pid == pid)
            && self.executable.as_deref().is_none_or(|exe| entry.runs(exe))
    }
}

/// What the store counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Windows stored.
    pub windows: u64,
    /// Entries dropped to stay within the budget (the oldest, or one larger than the budget).
    pub entries_dropped: u64,
    /// Their bytes.
    pub bytes_dropped: u64,
}

/// The kept windows, oldest first, within a byte budget.
#[derive(Debug)]
pub struct WindowStore {
    entries: VecDeque<Entry>,
    /// Samples each kept window lost, per CPU, by its start: the kernel counts losses per
    /// CPU, not per process, so they are the window's, whichever processes a query takes.
    lost: BTreeMap<SystemTime, Vec<u64>>,
    bytes: usize,
    budget: usize,
    /// What it counted so far.
    pub counters: StoreCounters,
}

impl WindowStore {
    /// An empty store of at most `budget` bytes of profiles.
    pub fn new(budget: usize) -> WindowStore {
        WindowStore {
            entries: VecDeque::new(),
            lost: BTreeMap::new(),
            bytes: 0,
            budget,
            counters: StoreCounters::default(),
        }
    }

    /// Adds a window's entries and the samples it lost per CPU, dropping the oldest windows'
    /// entries until they fit. A window larger than the whole budget keeps its processes with
    /// the most samples, as many as fit.
    pub fn push_window(&mut self, mut entries: Vec<Entry>, lost_per_cpu: Vec<u64>) {
        self.counters.windows += 1;
        if let Some(first) = entries.first() {
            self.lost.insert(first.start, lost_per_cpu);
        }
        entries.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.pid.cmp(&b.pid)));
        let mut size = 0;
        let mut kept = Vec::with_capacity(entries.len());
        for entry in entries {
            if size + entry.bytes() <= self.budget {
                size += entry.bytes();
                kept.push(entry);
            } else {
                self.drop_counted(entry.bytes());
            }
        }
        while self.bytes + size > self.budget {
            let Some(oldest) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= oldest.bytes();
            self.drop_counted(oldest.bytes());
        }
        self.bytes += size;
        self.entries.extend(kept);
        // Losses of windows no entry is kept of any more go with them.
        match self.entries.front().map(|e| e.start) {
            Some(oldest) => self.lost.retain(|&start, _| start >= oldest),
            None => self.lost.clear(),
        }
    }

    /// The samples the windows starting at `starts` lost, per CPU.
    pub fn lost(&self, starts: &[SystemTime]) -> Vec<u64> {
        let mut sum: Vec<u64> = Vec::new();
        for lost in starts.iter().filter_map(|start| self.lost.get(start)) {
            if sum.len() < lost.len() {
                sum.resize(lost.len(), 0);
            }
            for (total, n) in sum.iter_mut().zip(lost) {
                *total = total.saturating_add(*n);
            }
        }
        sum
    }

    fn drop_counted(&mut self, bytes: usize) {
        self.counters.entries_dropped += 1;
        self.counters.bytes_dropped += bytes as u64;
    }

    /// The entries `selection` takes, oldest first.
    pub fn select(&self, selection: &Selection) -> Vec<Entry> {
        self.entries
            .iter()
            .filter(|e| selection.takes(e))
            .cloned()
            .collect()
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes the kept entries take, about.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// When the oldest kept window began.
    pub fn oldest(&self) -> Option<SystemTime> {
        self.entries.front().map(|e| e.start)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn entry(window: u64, pid: u32, bytes: usize) -> Entry {
        let start = UNIX_EPOCH + Duration::from_secs(10 * window);
        Entry {
            start,
            end: start + Duration::from_secs(10),
            pid,
            command: format!("cmd{pid}"),
            executable: format!("/usr/bin/prog{pid}"),
            samples: bytes as u64,
            packed: vec![0; bytes].into(),
        }
    }

    #[test]
    fn the_oldest_go_first_and_every_drop_is_counted() {
        let mut store = WindowStore::new(100);
        store.push_window(vec![entry(0, 1, 40), entry(0, 2, 40)], vec![1, 2]);
        store.push_window(vec![entry(1, 1, 40)], vec![0, 5]);
        assert_eq!((store.len(), store.bytes()), (2, 80));
        assert_eq!(
            store.select(&Selection::default())[0].start,
            entry(0, 2, 0).start
        );
        // Larger than the whole budget: dropped itself, the others stay.
        store.push_window(vec![entry(2, 3, 101)], Vec::new());
        assert_eq!(store.len(), 2);
        assert_eq!(
            store.counters,
            StoreCounters {
                windows: 3,
                entries_dropped: 2,
                bytes_dropped: 141
            }
        );
        // A window larger than the budget keeps its busiest processes (here, the most bytes
        // stand for the most samples), and replaces every older one.
        let window = |n| entry(n, 0, 0).start;
        assert_eq!(store.lost(&[window(0), window(1)]), [1, 7]);
        store.push_window(
            vec![entry(3, 4, 30), entry(3, 5, 60), entry(3, 6, 50)],
            vec![3],
        );
        let kept: Vec<u32> = store
            .select(&Selection::default())
            .iter()
            .map(|e| e.pid)
            .collect();
        assert_eq!(kept, [5, 4], "60 bytes; 50 more would pass 100, 30 do not");
        assert_eq!(store.bytes(), 90);
        // The losses of the windows that went, with them.
        assert_eq!(store.lost(&[window(0), window(1), window(3)]), [3]);
    }

    #[test]
    fn entries_are_selected_by_time_process_and_executable() {
        let mut store = WindowStore::new(1000);
        for window in 0..3 {
            store.push_window(vec![entry(window, 1, 10), entry(window, 2, 10)], Vec::new());
        }
        let pick = |selection: Selection| -> Vec<(u64, u32)> {
            store
                .select(&selection)
                .iter()
                .map(|e| {
                    let secs = e.start.duration_since(UNIX_EPOCH).unwrap().as_secs();
                    (secs / 10, e.pid)
                })
                .collect()
        };
        let at = |secs| Some(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(pick(Selection::default()).len(), 6);
        // [15 s, 20 s): window 1 only; a window that ends at the start is not taken.
        assert_eq!(
            pick(Selection {
                start: at(15),
                end: at(20),
                ..Selection::default()
            }),
            [(1, 1), (1, 2)]
        );
        assert_eq!(
            pick(Selection {
                start: at(20),
                pid: Some(2),
                ..Selection::default()
            }),
            [(2, 2)]
        );
        for exe in ["/usr/bin/prog1", "prog1", "cmd1"] {
            let picked = pick(Selection {
                executable: Some(exe.into()),
                ..Selection::default()
            });
            assert_eq!(picked, [(0, 1), (1, 1), (2, 1)], "{exe}");
        }
    }

    #[test]
    fn a_packed_profile_reads_back_as_it_was() {
        let mut profile = Profile {
            total_samples: 7,
            ..Profile::default()
        };
        for i in 0..100 {
            profile.frames.push(vmscope_model::Frame {
                name: format!("function_{i}"),
                module: "/usr/lib/x86_64-linux-gnu/libexample.so.1".into(),
                file: "/build/example/src/a_long_source_file_name.c".into(),
                ..Default::default()
            });
        }
        let packed = pack(&profile).unwrap();
        assert_eq!(unpack(&packed).unwrap(), profile);
        let json = serde_json::to_vec(&profile).unwrap().len();
        assert!(
            packed.len() * 5 < json,
            "{} packed, {json} as JSON",
            packed.len()
        );
        assert!(unpack(b"not gzip").is_err());
    }
}
