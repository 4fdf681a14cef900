//! A profile cut to some threads (`vmscope report --tid N --thread NAME`): the snapshot keeps
//! only their samples and blocks, so that every number the profile is built from, its rows and
//! their bytecode ranges included, is theirs alone.

use vmscope_report::module_matches;

use super::{SessionError, Snapshot};
use crate::vocab::{Location, Task};

/// Most thread ids one request may name.
pub const MAX_TIDS: usize = 1024;
/// Most thread name patterns one request may give.
pub const MAX_NAMES: usize = 64;
/// Longest thread name pattern.
pub const MAX_NAME_BYTES: usize = 256;

/// Which threads a profile is of: those with one of `tids`, and those whose name matches one
/// of `names` (shell-style patterns); every thread when both are empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadFilter {
    /// Thread ids.
    pub tids: Vec<u32>,
    /// Name patterns (`*` any characters, `?` one).
    pub names: Vec<String>,
}

impl ThreadFilter {
    /// A filter from a request, refused beyond its bounds.
    pub fn new(tids: Vec<u32>, names: Vec<String>) -> Result<ThreadFilter, SessionError> {
        let invalid = |m: String| Err(SessionError::InvalidArgument(m));
        if tids.len() > MAX_TIDS {
            return invalid(format!(
                "{} thread ids; a profile takes at most {MAX_TIDS}",
                tids.len()
            ));
        }
        if names.len() > MAX_NAMES {
            return invalid(format!(
                "{} thread names; a profile takes at most {MAX_NAMES}",
                names.len()
            ));
        }
        if let Some(long) = names.iter().find(|n| n.len() > MAX_NAME_BYTES) {
            return invalid(format!(
                "a thread name pattern of {} bytes; at most {MAX_NAME_BYTES}",
                long.len()
            ));
        }
        if names.iter().any(String::is_empty) {
            return invalid("an empty thread name pattern matches no thread".to_owned());
        }
        Ok(ThreadFilter { tids, names })
    }

    /// Whether it keeps every thread.
    pub fn is_empty(&self) -> bool {
        self.tids.is_empty() && self.names.is_empty()
    }

    /// Whether it keeps the thread `task`, named `name` (`None` when unknown).
    pub fn keeps(&self, task: Task, name: Option<&str>) -> bool {
        self.is_empty()
            || self.tids.contains(&task.tid)
            || name.is_some_and(|name| self.names.iter().any(|p| module_matches(p, name)))
    }

    /// What it keeps, for a person: `tid 4243, threads named GC*`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.tids.is_empty() {
            let tids: Vec<String> = self.tids.iter().map(u32::to_string).collect();
            parts.push(format!("tid {}", tids.join(", ")));
        }
        if !self.names.is_empty() {
            parts.push(format!("threads named {}", self.names.join(", ")));
        }
        parts.join(", ")
    }
}

impl Snapshot {
    /// The snapshot of the threads `filter` keeps alone: their samples, blocks, kept samples,
    /// names and time in their VM's intervals. Its CPU time is what its samples stand for (the
    /// kernel counts the process's, not each thread's); what the kernel counted per process or
    /// host-wide (lost samples, short blocks) stays as it was, for the whole session.
    pub fn only_threads(mut self, filter: &ThreadFilter) -> Snapshot {
        if filter.is_empty() {
            return self;
        }
        let names = &self.thread_names;
        let keeps = |task: &Task| filter.keeps(*task, names.get(task).map(String::as_str));
        self.stacks.counts.retain(|(task, ..)| keeps(task));
        self.stacks.blocks.retain(|(task, ..)| keeps(task));
        self.stacks.sends.retain(|(task, ..)| keeps(task));
        self.kept = self
            .kept
            .iter()
            .map(|chunk| {
                chunk
                    .iter()
                    .filter(|s| keeps(&Task::new(s.pid, s.tid)))
                    .cloned()
                    .collect()
            })
            .collect();
        if let Some(tally) = &mut self.off_cpu {
            tally.during.retain(|(task, _), _| keeps(task));
        }
        let kept: Vec<Task> = self
            .thread_names
            .keys()
            .copied()
            .filter(|task| keeps(task))
            .collect();
        self.thread_names.retain(|task, _| kept.contains(task));
        self.recount();
        self.thread_filter = Some(filter.describe());
        self
    }

    /// Sums again what a cut of the snapshot changed: its samples, those truncated, the CPU
    /// time they stand for, and its blocks off the CPU (those still blocked included).
    pub(super) fn recount(&mut self) {
        if let Some(tally) = &mut self.off_cpu {
            tally.blocks = self.stacks.blocks.iter().map(|b| b.3.count).sum();
            tally.ns = self.stacks.blocks.iter().map(|b| b.3.ns).sum();
            let still: Vec<u64> = self
                .stacks
                .blocks
                .iter()
                .filter(|(_, stack, ..)| {
                    self.stacks
                        .ids_of(*stack)
                        .first()
                        .map(|&l| self.stacks.location(l))
                        == Some(Location::StillOffCpu)
                })
                .map(|b| b.3.ns)
                .collect();
            tally.still_blocked = (still.len() as u32, still.iter().sum());
        }
        let stacks = &self.stacks;
        self.total_samples = stacks.counts.iter().map(|&(.., n)| n).sum();
        self.truncated = stacks
            .counts
            .iter()
            .filter(|&&(_, stack, _)| stacks.stacks[stack.0 as usize].truncated())
            .map(|&(.., n)| n)
            .sum();
        self.cpu_seconds = self.total_samples as f64 * self.period_ns as f64 / 1e9;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_are_kept_by_id_or_name() {
        let filter = ThreadFilter::new(vec![43], vec!["GC Thread*".into()]).unwrap();
        assert!(filter.keeps(Task::new(42, 43), None));
        assert!(filter.keeps(Task::new(42, 44), Some("GC Thread#0")));
        assert!(!filter.keeps(Task::new(42, 45), Some("C2 CompilerThread0")));
        assert!(
            !filter.keeps(Task::new(42, 46), None),
            "an unnamed thread by id only"
        );
        assert_eq!(filter.describe(), "tid 43, threads named GC Thread*");
        assert!(ThreadFilter::default().keeps(Task::new(1, 2), None));
        assert!(ThreadFilter::new(vec![1; MAX_TIDS + 1], vec![]).is_err());
        assert!(ThreadFilter::new(vec![], vec!["x".repeat(MAX_NAME_BYTES + 1)]).is_err());
        assert!(ThreadFilter::new(vec![], vec![String::new()]).is_err());
    }
}
