//! Samples a session keeps one by one (StartSessionRequest.keep_samples), with the addresses of
//! their stacks and where each was attributed at the sample's time.
//!
//! A session may keep a million samples, and a watching client asks for a snapshot every
//! second: copying them all on the manager thread each time would stall sampling. They are kept
//! in sealed chunks shared by reference, so a snapshot copies only the open chunk; sorting them
//! by time is the profile builder's job, off the manager thread.

use std::sync::Arc;

use super::StackId;

/// Samples per sealed chunk.
const CHUNK: usize = 4096;

/// One frame of a kept sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeptFrame {
    /// Instruction pointer (leaf) or return address (callers), as the stack held it.
    pub address: u64,
    /// Start of the code map entry it fell in (generated code), else 0.
    pub code_start: u64,
}

/// A sample kept one by one, with where it was attributed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptSample {
    /// CLOCK_MONOTONIC time.
    pub timestamp_ns: u64,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Kernel mode.
    pub kernel: bool,
    /// The stack it was counted in, in its session's stack table.
    pub stack: StackId,
    /// The addresses of the stack's locations, leaf first, one per location.
    pub frames: Box<[KeptFrame]>,
}

/// A session's kept samples.
#[derive(Debug, Default)]
pub struct KeptSamples {
    sealed: Vec<Arc<[KeptSample]>>,
    open: Vec<KeptSample>,
    limit: usize,
    kept: usize,
    /// Samples beyond the limit.
    pub not_kept: u64,
}

impl KeptSamples {
    /// Room for `limit` samples.
    pub fn new(limit: usize) -> KeptSamples {
        KeptSamples {
            limit,
            ..KeptSamples::default()
        }
    }

    /// Most samples it keeps: 0 when it keeps none.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Keeps a sample while there is room (making it only then), else counts it as not kept.
    /// Returns its index when kept.
    pub fn keep(&mut self, sample: impl FnOnce() -> KeptSample) -> Option<usize> {
        if self.kept < self.limit {
            self.open.push(sample());
            self.kept += 1;
            if self.open.len() == CHUNK {
                self.sealed.push(std::mem::take(&mut self.open).into());
            }
            Some(self.kept - 1)
        } else {
            if self.limit > 0 {
                self.not_kept += 1;
            }
            None
        }
    }

    /// Changes the kept sample at `index` (its attribution changed). A sealed chunk a snapshot
    /// still shares is copied first: snapshots never change.
    pub fn update(&mut self, index: usize, change: impl FnOnce(&mut KeptSample)) {
        let (chunk, at) = (index / CHUNK, index % CHUNK);
        let sample = if chunk < self.sealed.len() {
            Arc::make_mut(&mut self.sealed[chunk]).get_mut(at)
        } else {
            self.open.get_mut(at)
        };
        if let Some(sample) = sample {
            change(sample);
        }
    }

    /// How many are kept.
    pub fn len(&self) -> usize {
        self.kept
    }

    /// Whether none are kept.
    pub fn is_empty(&self) -> bool {
        self.kept == 0
    }

    /// The kept samples as shared chunks: the sealed ones by reference, the open one copied.
    pub fn snapshot(&self) -> Vec<Arc<[KeptSample]>> {
        let mut chunks = self.sealed.clone();
        if !self.open.is_empty() {
            chunks.push(self.open.as_slice().into());
        }
        chunks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(timestamp_ns: u64) -> KeptSample {
        KeptSample {
            timestamp_ns,
            pid: 1,
            tid: 1,
            kernel: false,
            stack: StackId(0),
            frames: Box::new([]),
        }
    }

    #[test]
    fn keeps_up_to_the_limit_and_counts_the_rest() {
        let mut kept = KeptSamples::new(CHUNK + 10);
        for i in 0..CHUNK as u64 + 15 {
            kept.keep(|| sample(i));
        }
        assert_eq!(kept.len(), CHUNK + 10);
        assert_eq!(kept.not_kept, 5);
        let chunks = kept.snapshot();
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks.iter().map(|c| c.len()).sum::<usize>(), CHUNK + 10);
        // The sealed chunk is shared, not copied.
        assert!(Arc::ptr_eq(&chunks[0], &kept.snapshot()[0]));
    }

    #[test]
    fn updates_copy_what_a_snapshot_shares() {
        let mut kept = KeptSamples::new(CHUNK + 10);
        for i in 0..CHUNK as u64 + 5 {
            assert_eq!(kept.keep(|| sample(i)), Some(i as usize));
        }
        let before = kept.snapshot();
        kept.update(3, |s| s.stack = StackId(7));
        kept.update(CHUNK + 1, |s| s.stack = StackId(8));
        let after = kept.snapshot();
        assert_eq!(before[0][3].stack, StackId(0), "a snapshot never changes");
        assert_eq!(after[0][3].stack, StackId(7));
        assert_eq!(after[1][1].stack, StackId(8));
    }

    #[test]
    fn no_limit_keeps_nothing_and_counts_nothing() {
        let mut kept = KeptSamples::new(0);
        assert_eq!(kept.keep(|| unreachable!("not made when not kept")), None);
        assert!(kept.is_empty());
        assert_eq!(kept.not_kept, 0);
    }
}
