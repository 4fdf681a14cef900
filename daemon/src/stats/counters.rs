//! Counters a VM keeps in its own memory (`codemap.proto`'s `CounterRegion`), and a session's
//! exact counts from them.
//!
//! A VM bumps a counter per compiled method in the method's prologue; the daemon reads the
//! whole region (`process_vm_readv`) at a session's start and stop, and when a profile is
//! asked for, so each method's activations over the session are the difference of two reads:
//! exact, whatever the sampling did. The reads are the manager's (this file is pure); a window
//! here keeps, per region, the values at its start and the best values known at its end:
//!
//! - start: read at the session's start ([`Source::Read`]); a region published during the
//!   session counts from zero ([`Source::Zero`]), as the protocol says counters are then.
//! - end: read at the stop or the profile ([`Source::Read`]); when the VM exited first, its
//!   memory is gone, and the values it published as it exited stand ([`Source::Published`]).
//!
//! What is neither is said: a read that failed, a VM that exited without its last values.

use std::sync::Arc;

use vmscope_model::{ExactCounts, NamedCount};

/// Most counter regions one publication may have.
pub const MAX_REGIONS: usize = 16;
/// Most counters in one region.
pub const MAX_COUNTERS: usize = 65_536;
/// Widest stride between counters, in bytes: a region spans at most
/// `MAX_COUNTERS * MAX_STRIDE` bytes, and is read whole.
pub const MAX_STRIDE: u32 = 64;

/// What a region's counters count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountKind {
    /// Activations of methods.
    Activations,
}

impl CountKind {
    /// How reports name it.
    pub fn as_str(self) -> &'static str {
        match self {
            CountKind::Activations => "activations",
        }
    }
}

/// A region as its VM published it, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterRegion {
    /// Its id in the publication.
    pub id: u32,
    /// What it counts.
    pub kind: CountKind,
    /// Address of counter 0 in the VM.
    pub address: u64,
    /// Bytes between counters.
    pub stride: u32,
    /// The counters' names.
    pub names: Vec<String>,
}

impl CounterRegion {
    /// Bytes a read of the whole region covers.
    pub fn span(&self) -> usize {
        match self.names.len() {
            0 => 0,
            n => (n - 1) * self.stride as usize + 8,
        }
    }

    /// The counters' values in `bytes`, a read of [`CounterRegion::span`] bytes at its address
    /// (native byte order); `None` when the read came short.
    pub fn values(&self, bytes: &[u8]) -> Option<Vec<u64>> {
        if bytes.len() < self.span() {
            return None;
        }
        Some(
            (0..self.names.len())
                .map(|i| {
                    let at = i * self.stride as usize;
                    u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
                })
                .collect(),
        )
    }
}

/// Where a window's values come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Read from the VM's memory.
    Read,
    /// Zero: the region was published inside the window.
    Zero,
    /// Published by the VM as it exited.
    Published,
}

impl Source {
    /// How the model spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Read => "read",
            Source::Zero => "zero",
            Source::Published => "published",
        }
    }
}

/// One region in one window.
#[derive(Clone, Debug)]
struct RegionWindow {
    region: Arc<CounterRegion>,
    start: Result<(Vec<u64>, Source), String>,
    /// The latest read, or the VM's last published values, whichever is later.
    end: Option<(u64, Vec<u64>, Source)>,
    /// Why the last read at an end failed, if it did.
    end_failed: Option<String>,
}

/// The counter regions of one VM over a window.
#[derive(Clone, Debug, Default)]
pub struct CountWindow {
    regions: Vec<RegionWindow>,
}

/// Why a region's start is not known yet: the manager is to read it.
const UNREAD: &str = "not read at the session's start";

impl CountWindow {
    /// A region published at `ts` inside the window: it counts from zero.
    pub fn published(&mut self, region: &Arc<CounterRegion>) {
        if self.regions.iter().any(|r| r.region.id == region.id) {
            return;
        }
        self.regions.push(RegionWindow {
            region: region.clone(),
            start: Ok((vec![0; region.names.len()], Source::Zero)),
            end: None,
            end_failed: None,
        });
    }

    /// The VM's own values of `region` at `ts` (published as it exits).
    pub fn values_published(&mut self, ts: u64, region: u32, values: &[u64]) {
        if let Some(r) = self.regions.iter_mut().find(|r| r.region.id == region) {
            r.set_end(ts, values.to_vec(), Source::Published);
            // The VM's last values are its end however the reads went: a read that found it
            // gone before its publication was handled (the stop reads at once; the stream is
            // read later) failed as it must.
            if matches!(r.end, Some((_, _, Source::Published))) {
                r.end_failed = None;
            }
        }
    }

    /// The regions of the VM a window starting now takes over, their start to be read.
    pub fn carried(&self) -> CountWindow {
        CountWindow {
            regions: self
                .regions
                .iter()
                .map(|r| RegionWindow {
                    region: r.region.clone(),
                    start: Err(UNREAD.to_owned()),
                    end: None,
                    end_failed: None,
                })
                .collect(),
        }
    }

    /// The regions whose start is to be read.
    pub fn unread(&self) -> Vec<Arc<CounterRegion>> {
        self.regions
            .iter()
            .filter(|r| matches!(&r.start, Err(e) if e == UNREAD))
            .map(|r| r.region.clone())
            .collect()
    }

    /// Every region.
    pub fn regions(&self) -> impl Iterator<Item = &Arc<CounterRegion>> {
        self.regions.iter().map(|r| &r.region)
    }

    /// The start read of `region`: its values, or why there are none.
    pub fn read_at_start(&mut self, region: u32, values: Result<Vec<u64>, String>) {
        if let Some(r) = self.regions.iter_mut().find(|r| r.region.id == region) {
            r.start = values.map(|v| (v, Source::Read));
        }
    }

    /// A read of `region` at `ts`, for the window's end (a stop, or a profile while it runs).
    pub fn read_at(&mut self, ts: u64, region: u32, values: Result<Vec<u64>, String>) {
        if let Some(r) = self.regions.iter_mut().find(|r| r.region.id == region) {
            match values {
                Ok(values) => {
                    r.set_end(ts, values, Source::Read);
                    r.end_failed = None;
                }
                // The VM's own last values, published as it exited, are its end: a read
                // after that finds it gone, as it should.
                Err(_) if matches!(r.end, Some((_, _, Source::Published))) => {}
                Err(why) => r.end_failed = Some(why),
            }
        }
    }

    /// Whether it holds any region.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// The counts, for a profile.
    pub fn summary(&self) -> Vec<ExactCounts> {
        self.regions
            .iter()
            .map(|r| {
                let mut note = Vec::new();
                let (start, start_source) = match &r.start {
                    Ok((values, source)) => (Some(values), source.as_str()),
                    Err(why) => {
                        note.push(format!("no values at the start: {why}"));
                        (None, "")
                    }
                };
                let (end, end_source) = match &r.end {
                    Some((_, values, source)) => (Some(values), source.as_str()),
                    None => (None, ""),
                };
                if let Some(why) = &r.end_failed {
                    note.push(match end {
                        Some(_) => format!("counted up to an earlier read: {why}"),
                        None => format!("no values at the end: {why}"),
                    });
                } else if end.is_none() {
                    note.push(
                        "no values at the end: the VM exited without publishing its last \
                         ones"
                            .to_owned(),
                    );
                }
                let counts = match (start, end) {
                    (Some(start), Some(end)) => r
                        .region
                        .names
                        .iter()
                        .zip(start.iter().zip(end))
                        .filter(|(_, (s, e))| e > s)
                        .map(|(name, (s, e))| NamedCount {
                            name: name.clone(),
                            count: e - s,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                ExactCounts {
                    kind: r.region.kind.as_str().to_owned(),
                    counts,
                    start_source: start_source.to_owned(),
                    end_source: end_source.to_owned(),
                    note: note.join("; "),
                }
            })
            .collect()
    }
}

impl RegionWindow {
    fn set_end(&mut self, ts: u64, values: Vec<u64>, source: Source) {
        if values.len() != self.region.names.len() {
            return;
        }
        if self.end.as_ref().is_none_or(|(at, ..)| ts >= *at) {
            self.end = Some((ts, values, source));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region() -> Arc<CounterRegion> {
        Arc::new(CounterRegion {
            id: 1,
            kind: CountKind::Activations,
            address: 0x1000,
            stride: 8,
            names: vec!["a".into(), "b".into(), "c".into()],
        })
    }

    fn counts(window: &CountWindow) -> Vec<(String, u64)> {
        window.summary()[0]
            .counts
            .iter()
            .map(|c| (c.name.clone(), c.count))
            .collect()
    }

    #[test]
    fn values_are_read_at_the_stride_in_native_order() {
        let mut r = (*region()).clone();
        r.stride = 16;
        assert_eq!(r.span(), 40);
        let mut bytes = vec![0u8; 40];
        for (i, v) in [7u64, 8, 9].iter().enumerate() {
            bytes[i * 16..i * 16 + 8].copy_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(r.values(&bytes), Some(vec![7, 8, 9]));
        assert_eq!(r.values(&bytes[..39]), None, "a short read is no values");
    }

    #[test]
    fn a_region_published_inside_counts_from_zero_to_the_last_read() {
        let mut w = CountWindow::default();
        w.published(&region());
        w.read_at(10, 1, Ok(vec![5, 0, 2]));
        w.read_at(20, 1, Ok(vec![6, 0, 3]));
        assert_eq!(counts(&w), [("a".into(), 6), ("c".into(), 3)]);
        let s = &w.summary()[0];
        assert_eq!(
            (s.start_source.as_str(), s.end_source.as_str()),
            ("zero", "read")
        );
        assert_eq!(s.note, "");
    }

    #[test]
    fn a_carried_region_counts_from_its_start_read_to_the_vms_last_values() {
        let mut since_ever = CountWindow::default();
        since_ever.published(&region());
        let mut w = since_ever.carried();
        assert_eq!(w.unread().len(), 1);
        w.read_at_start(1, Ok(vec![100, 50, 0]));
        assert!(w.unread().is_empty());
        w.read_at(10, 1, Ok(vec![150, 50, 1]));
        // The VM exited: its own last values, later than the read, stand, and the read after
        // its exit fails as it must.
        w.values_published(12, 1, &[160, 50, 1]);
        w.read_at(15, 1, Err("the process exited".into()));
        assert_eq!(counts(&w), [("a".into(), 60), ("c".into(), 1)]);
        let s = &w.summary()[0];
        assert_eq!(s.end_source, "published");
        assert_eq!(s.note, "");
        // The same, the stop's read handled before the VM's last values (CI: the stop reads at
        // once, the stream's publication comes after): they stand, and no note says otherwise.
        let mut w = CountWindow::default();
        w.published(&region());
        w.read_at(15, 1, Err("the process exited".into()));
        w.values_published(12, 1, &[160, 50, 1]);
        assert_eq!(
            counts(&w),
            [("a".into(), 160), ("b".into(), 50), ("c".into(), 1)]
        );
        let s = &w.summary()[0];
        assert_eq!(s.end_source, "published");
        assert_eq!(s.note, "", "{s:?}");
        // A read that fails while the VM lives: counted up to the read before.
        let mut w = since_ever.carried();
        w.read_at_start(1, Ok(vec![0, 0, 0]));
        w.read_at(10, 1, Ok(vec![4, 0, 0]));
        w.read_at(20, 1, Err("did not answer".into()));
        assert_eq!(counts(&w), [("a".into(), 4)]);
        assert!(
            w.summary()[0]
                .note
                .contains("counted up to an earlier read: did not answer")
        );
    }

    #[test]
    fn what_is_not_known_is_said_and_nothing_is_guessed() {
        let mut since_ever = CountWindow::default();
        since_ever.published(&region());
        let mut w = since_ever.carried();
        w.read_at_start(1, Err("permission denied".into()));
        w.read_at(10, 1, Ok(vec![1, 2, 3]));
        let s = &w.summary()[0];
        assert!(s.counts.is_empty());
        assert!(
            s.note.contains("no values at the start: permission denied"),
            "{}",
            s.note
        );
        let mut w = CountWindow::default();
        w.published(&region());
        let s = &w.summary()[0];
        assert!(s.note.contains("exited without publishing"), "{}", s.note);
        // Values of the wrong length are not taken.
        w.values_published(5, 1, &[1, 2]);
        assert!(w.summary()[0].counts.is_empty());
    }
}
