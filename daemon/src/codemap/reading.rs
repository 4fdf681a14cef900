//! One read of a process's code map files: its perf map, looked for at its path, and the
//! jitdump and code map files found in its mappings.
//!
//! Everything that does I/O for a process's code map is here, apart from the timelines that
//! the changes read feed ([`super::registry`]): a read takes the sources and a budget, and
//! gives back changes and what it found, touching nothing else. A read is bounded in bytes by
//! the budget, but not in time: a file on a slow or hostile filesystem can take as long as it
//! likes, which is why the sources are kept to themselves, ready to be read away from the
//! thread that stops sessions.

use std::{
    collections::HashSet,
    os::fd::{AsFd, OwnedFd},
};

use super::registry::PERF_MAP_RECHECK_NS;
use super::{
    code::CodeStore,
    refusals::Refusals,
    sources::{CodeMapFileSource, JitdumpSource, PerfMapSource},
    timeline::Change,
};
use crate::sys::FileId;

/// The code map files of one process, and the state of reading them.
#[derive(Debug, Default)]
pub struct Sources {
    /// Its root directory, held so that a perf map it writes as it exits can still be read;
    /// closed after that last look, when nothing opens through it any more.
    pub root: Option<OwnedFd>,
    /// Whether the perf map was looked for once more after the process exited.
    pub looked_after_exit: bool,
    /// `/tmp/perf-PID.map` as the process sees it, once found.
    pub perf_map: Option<PerfMapSource>,
    /// When the perf map was last looked for (`u64::MAX`: never again).
    pub perf_map_checked_ns: u64,
    /// Jitdump files it maps.
    pub jitdumps: Vec<JitdumpSource>,
    /// vmscope code map files it maps.
    pub files: Vec<CodeMapFileSource>,
    /// The mapped files already opened (or refused), not to be opened again.
    pub known_files: HashSet<FileId>,
    /// Problems already logged, each said once.
    pub reported: HashSet<String>,
}

/// Whom and when a read is for.
#[derive(Clone, Copy, Debug)]
pub struct ReadJob {
    /// The process.
    pub pid: u32,
    /// The pid in the process's own pid namespace, which names its perf map.
    pub nspid: u32,
    /// Its effective uid: the owner its files must have. Unknown: no perf map is opened.
    pub uid: Option<u32>,
    /// When the read is made: the time of a perf map's entries.
    pub now_ns: u64,
    /// The process exited: this is the last read, and what cannot be read any more is said.
    pub exited: bool,
}

/// What one read found.
#[derive(Debug, Default)]
pub struct ReadOutcome {
    /// Changes read, the perf map's first.
    pub changes: Vec<(u64, Change)>,
    /// How many of `changes` are the perf map's (they also make its content).
    pub perf_map_changes: usize,
    /// Address ranges of entries refused for lying outside executable mappings.
    pub refused_ranges: Vec<(u64, u64)>,
    /// Sources opened.
    pub opened: u64,
    /// Sources that could not be opened, or were read no more.
    pub failures: u64,
    /// What the sources this read dropped refused: counted now or never.
    pub dropped: Vec<Refusals>,
}

impl Sources {
    /// Sources of a process not read yet, holding its root directory.
    pub fn new(root: Option<OwnedFd>) -> Sources {
        Sources {
            root,
            ..Sources::default()
        }
    }

    /// Whether it has any file source.
    pub fn any(&self) -> bool {
        self.perf_map.is_some() || !self.jitdumps.is_empty() || !self.files.is_empty()
    }

    /// What each source refused.
    pub fn refusals(&mut self) -> impl Iterator<Item = &mut Refusals> {
        self.perf_map
            .iter_mut()
            .map(|s| &mut s.refusals)
            .chain(self.jitdumps.iter_mut().map(|s| &mut s.refusals))
            .chain(self.files.iter_mut().map(|s| &mut s.refusals))
    }

    /// Reads what the sources added since the last read, at most `budget` bytes (taken from
    /// it), looking for the perf map if it is time to. `check` says which address ranges are
    /// executable in the process.
    pub fn read(
        &mut self,
        job: ReadJob,
        store: &CodeStore,
        check: &mut dyn FnMut(u64, u64) -> bool,
        budget: &mut u64,
    ) -> ReadOutcome {
        let ReadJob {
            pid,
            nspid,
            now_ns,
            exited,
            ..
        } = job;
        let mut out = ReadOutcome::default();
        let refused = &mut out.refused_ranges;
        let mut check = |start: u64, end: u64| {
            let ok = check(start, end);
            if !ok {
                refused.push((start, end));
            }
            ok
        };

        // A JVM writes its map as it exits (-XX:+DumpPerfMapAtExit): looked for once more then.
        let last_look = exited && !std::mem::replace(&mut self.looked_after_exit, true);
        if self.perf_map.is_none()
            && let Some(uid) = job.uid
            && (last_look
                || (!exited
                    && now_ns.saturating_sub(self.perf_map_checked_ns) >= PERF_MAP_RECHECK_NS))
        {
            self.perf_map_checked_ns = now_ns;
            let root = self.root.as_ref().map(|r| r.as_fd());
            match PerfMapSource::open(pid, nspid, uid, root) {
                Ok(Some(source)) => {
                    tracing::info!(pid, "reading perf map");
                    out.opened += 1;
                    self.perf_map = Some(source);
                }
                Ok(None) => {}
                Err(e) => {
                    if self.reported.insert(e.clone()) {
                        out.failures += 1;
                        tracing::warn!(pid, "perf map refused: {e}");
                    }
                }
            }
        }
        if self.looked_after_exit {
            self.root = None;
        }
        if let Some(perf_map) = &mut self.perf_map {
            match perf_map.read(now_ns, store, &mut check, exited, budget) {
                Ok(read) => {
                    out.perf_map_changes = read.len();
                    out.changes.extend(read);
                }
                Err(e) => {
                    out.failures += 1;
                    tracing::warn!(pid, "perf map read no more: {e}");
                    out.dropped.extend(self.perf_map.take().map(|s| s.refusals));
                    self.perf_map_checked_ns = u64::MAX;
                }
            }
        }
        for jitdump in &mut self.jitdumps {
            out.changes
                .extend(jitdump.read(now_ns, store, &mut check, exited, budget));
        }
        for file in &mut self.files {
            out.changes.extend(file.read(store, exited, budget));
        }
        let failures = self
            .jitdumps
            .iter_mut()
            .filter_map(|s| s.take_failure())
            .chain(self.files.iter_mut().filter_map(|s| s.take_failure()));
        for failure in failures {
            out.failures += 1;
            tracing::warn!(pid, "code map read no more: {failure}");
        }
        out
    }
}
