//! Which address ranges of a process hold executable mappings, as a read of its code map
//! files checks entries against them away from the process table.
//!
//! A perf map or jitdump entry outside every executable mapping names no code that can run,
//! yet. The session manager hands each read a copy of the mappings it knows; an entry outside
//! them may be code mapped since (a new JIT code zone), so the read looks at `/proc/PID/maps`
//! again, once, and believes it only if the pid is still the same process. What is still
//! outside is held for later reads ([`crate::codemap::outside`]), which check it against the ranges
//! they are handed, reading nothing more.

use vmscope_parse::maps::{self, MapPath};

use super::MappedFileKind;
use crate::sys;

/// Which address ranges a read of code map files takes for executable code.
pub trait ExecRanges {
    /// Whether `[start, end)` lies inside one executable mapping; may look at the process's
    /// mappings again to find out.
    fn contains(&mut self, start: u64, end: u64) -> bool;

    /// Whether it does by the ranges known already, reading nothing: the check of entries held
    /// from earlier reads, made at every read.
    fn known_to_contain(&mut self, start: u64, end: u64) -> bool {
        self.contains(start, end)
    }
}

/// A plain predicate, for tests and for reads whose ranges never change.
impl<F: FnMut(u64, u64) -> bool> ExecRanges for F {
    fn contains(&mut self, start: u64, end: u64) -> bool {
        self(start, end)
    }
}

/// The executable ranges of one process at one time, read again at most once on a miss.
#[derive(Clone, Debug)]
pub struct Executable {
    pid: u32,
    /// The process's start time: what tells it from a later process at its pid.
    start_time: Option<u64>,
    /// Sorted, disjoint `[start, end)` ranges; `None` in tests that check nothing.
    ranges: Option<Vec<(u64, u64)>>,
    /// Whether the ranges may still be read again (not yet, and the process was there).
    may_reread: bool,
}

impl Executable {
    /// The ranges of `pid` (started at `start_time`) as the process table knows them;
    /// `may_reread` when they may be stale enough to be read again on a miss.
    pub fn new(
        pid: u32,
        start_time: Option<u64>,
        ranges: Vec<(u64, u64)>,
        may_reread: bool,
    ) -> Executable {
        Executable {
            pid,
            start_time,
            ranges: Some(ranges),
            may_reread: may_reread && start_time.is_some(),
        }
    }

    /// Every range executable: for tests whose processes' maps do not matter.
    #[cfg(test)]
    pub fn anywhere() -> Executable {
        Executable {
            pid: 0,
            start_time: None,
            ranges: None,
            may_reread: false,
        }
    }

    fn inside(&self, start: u64, end: u64) -> bool {
        let Some(ranges) = &self.ranges else {
            return true;
        };
        let i = ranges.partition_point(|&(s, _)| s <= start);
        i.checked_sub(1)
            .is_some_and(|i| start < ranges[i].1 && end <= ranges[i].1)
    }

    /// The process's executable ranges now, if it is still the process they are for.
    fn read_again(&self) -> Option<Vec<(u64, u64)>> {
        let text = sys::read_proc(self.pid, "maps").ok()?;
        // Read after the maps: the same start time then means they were this process's.
        if sys::read_start_time(self.pid) != self.start_time {
            return None;
        }
        Some(executable_ranges(&text))
    }
}

impl ExecRanges for Executable {
    /// Whether `[start, end)` lies inside one executable mapping, reading the mappings again
    /// on the first miss if they may be stale.
    fn contains(&mut self, start: u64, end: u64) -> bool {
        if self.inside(start, end) {
            return true;
        }
        if !std::mem::replace(&mut self.may_reread, false) {
            return false;
        }
        match self.read_again() {
            Some(ranges) => {
                self.ranges = Some(ranges);
                self.inside(start, end)
            }
            None => false,
        }
    }

    fn known_to_contain(&mut self, start: u64, end: u64) -> bool {
        self.inside(start, end)
    }
}

/// The executable ranges of a `/proc/PID/maps` text, sorted, without the mappings of code map
/// files (markers that are never executed).
pub fn executable_ranges(maps_text: &[u8]) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = maps::parse_maps(maps_text)
        .entries
        .iter()
        .filter(|e| e.perms.exec)
        .filter(|e| !matches!(&e.path, MapPath::File { path, .. } if MappedFileKind::of(path).is_some()))
        .map(|e| (e.start, e.end))
        .collect();
    ranges.sort_unstable();
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_must_fit_in_one_executable_mapping() {
        let text = b"1000-2000 r-xp 00000000 00:00 0 \n\
                     2000-3000 rw-p 00000000 00:00 0 \n\
                     5000-6000 r-xp 00000000 08:01 42 /tmp/jit-7.dump\n\
                     7000-9000 rwxp 00000000 00:00 0 \n";
        let ranges = executable_ranges(text);
        assert_eq!(ranges, vec![(0x1000, 0x2000), (0x7000, 0x9000)]);
        // A pid no process holds: nothing is read again.
        let mut exec = Executable::new(u32::MAX, Some(1), ranges, true);
        assert!(exec.contains(0x1000, 0x2000));
        assert!(exec.contains(0x7800, 0x8000));
        assert!(!exec.contains(0x1800, 0x2800), "across into a data mapping");
        assert!(
            !exec.contains(0x5000, 0x5010),
            "a jitdump marker is not code"
        );
        assert!(!exec.contains(0x0, 0x10));
    }

    #[test]
    fn a_miss_reads_the_mappings_again_once_if_the_process_is_the_same() {
        let me = std::process::id();
        let start = sys::read_start_time(me);
        let text = sys::read_proc(me, "maps").unwrap();
        let (s, e) = executable_ranges(&text)[0];
        let mut stale = Executable::new(me, start, Vec::new(), true);
        assert!(stale.contains(s, e), "read again on the miss");
        // Another process's start time: its mappings vouch for nothing.
        let mut other = Executable::new(me, start.map(|t| t + 1), Vec::new(), true);
        assert!(!other.contains(s, e));
        let mut fresh = Executable::new(me, start, Vec::new(), false);
        assert!(!fresh.contains(s, e), "fresh ranges are not read again");
    }
}
