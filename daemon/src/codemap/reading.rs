//! One read of a process's code map files: its perf map, looked for at its path, and the
//! jitdump and code map files found in its mappings.
//!
//! Everything that does I/O for a process's code map is here, apart from the timelines that
//! the changes read feed ([`super::registry`]): a read takes the sources, the files newly
//! mapped and a budget, and gives back changes and what it found, touching nothing else. A
//! read is bounded in bytes by the budget, but not in time: a file on a slow or hostile
//! filesystem can take as long as it likes, which is why reads run on their own threads
//! ([`super::reader`]), and the manager goes by the [`Status`] of the last read meanwhile.

use std::{
    collections::HashSet,
    fs::File,
    os::fd::{AsFd, OwnedFd},
};

use super::registry::{MAX_FILES_PER_PROCESS, PERF_MAP_RECHECK_NS};
use super::{
    code::CodeStore,
    refusals::Refusals,
    sources::{CodeMapFileSource, ExecCheck, JitdumpSource, PerfMapSource},
    timeline::Change,
};
use crate::{
    stats::vm::StatEvent,
    sys::FileId,
    vocab::{ExecRanges, MappedCodeMapFile, MappedFileKind},
};

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

/// What the manager knows of a process's sources while they are being read: what the last
/// read left them saying.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// A perf map was found.
    pub perf_map: bool,
    /// Jitdump files are read.
    pub jitdumps: bool,
    /// Code map files are read.
    pub files: bool,
    /// When the perf map's content last changed (0: never).
    pub perf_map_changed_ns: u64,
    /// Up to when the code map files that still read tell the map (the least of them).
    pub files_known_until: Option<u64>,
    /// The latest record of the jitdump files that still read (the least of them).
    pub jitdumps_last_ns: Option<u64>,
}

impl Status {
    /// Whether there is any file source.
    pub fn any(&self) -> bool {
        self.perf_map || self.jitdumps || self.files
    }
}

/// What one read found.
#[derive(Debug, Default)]
pub struct ReadOutcome {
    /// Changes read, the perf map's first.
    pub changes: Vec<(u64, Change)>,
    /// How many of `changes` are the perf map's (they also make its content).
    pub perf_map_changes: usize,
    /// The VMs' statistics read from code map files.
    pub stats: Vec<(u64, StatEvent)>,
    /// Address ranges of entries found outside executable mappings (held or refused).
    pub refused_ranges: Vec<(u64, u64)>,
    /// Entries held outside the executable mappings by earlier reads that this one accepted.
    pub mapped_late: u64,
    /// Sources opened.
    pub opened: u64,
    /// Sources that could not be opened, or were read no more.
    pub failures: u64,
    /// What the sources this read dropped refused: counted now or never.
    pub dropped: Vec<Refusals>,
    /// The read panicked: the sources were lost (a bug, said in the log).
    pub panicked: bool,
    /// The budget ran out with bytes left to read: the rest waits for a later read.
    pub cut_short: bool,
}

impl Sources {
    /// Sources of a process not read yet, holding its root directory.
    pub fn new(root: Option<OwnedFd>) -> Sources {
        Sources {
            root,
            ..Sources::default()
        }
    }

    /// What the sources say now.
    pub fn status(&self) -> Status {
        Status {
            perf_map: self.perf_map.is_some(),
            jitdumps: !self.jitdumps.is_empty(),
            files: !self.files.is_empty(),
            perf_map_changed_ns: self.perf_map.as_ref().map_or(0, |p| p.changed_ns),
            files_known_until: self
                .files
                .iter()
                .filter(|f| !f.broken.is_broken())
                .map(|f| f.known_until())
                .min(),
            jitdumps_last_ns: self
                .jitdumps
                .iter()
                .filter(|j| !j.broken.is_broken())
                .map(|j| j.last_ns)
                .min(),
        }
    }

    /// Whether the mapped file `id` was opened (or refused) already.
    pub fn knows(&self, id: &FileId) -> bool {
        self.known_files.contains(id)
    }

    /// Opens the jitdump and code map files of `files` not known yet, at most
    /// [`MAX_FILES_PER_PROCESS`]; `open` opens a mapped file (through /proc/PID/map_files).
    /// Counts in `out` what was opened and what failed.
    pub fn open_files(
        &mut self,
        job: &ReadJob,
        files: &[MappedCodeMapFile],
        open: &dyn Fn(&MappedCodeMapFile) -> std::io::Result<File>,
        out: &mut ReadOutcome,
    ) {
        let pid = job.pid;
        let Some(uid) = job.uid else { return };
        for mapped in files {
            if self.known_files.contains(&mapped.id) {
                continue;
            }
            if self.known_files.len() >= MAX_FILES_PER_PROCESS {
                let problem = format!("it maps more than {MAX_FILES_PER_PROCESS} code map files");
                if self.reported.insert(problem.clone()) {
                    out.failures += 1;
                    tracing::warn!(pid, "code map {} refused: {problem}", mapped.path.display());
                }
                continue;
            }
            self.known_files.insert(mapped.id);
            let source = open(mapped)
                .map_err(|e| format!("cannot open {}: {e}", mapped.path.display()))
                .and_then(|file| match mapped.kind {
                    MappedFileKind::Jitdump => JitdumpSource::new(file, &mapped.path, pid, uid)
                        .map(|s| self.jitdumps.push(s)),
                    MappedFileKind::CodeMap => CodeMapFileSource::new(file, &mapped.path, pid, uid)
                        .map(|s| self.files.push(s)),
                });
            match source {
                Ok(()) => {
                    out.opened += 1;
                    tracing::info!(pid, file = %mapped.path.display(), "reading code map");
                }
                Err(e) => {
                    out.failures += 1;
                    tracing::warn!(pid, "code map refused: {e}");
                }
            }
        }
    }

    /// Refuses what the sources hold outside the executable mappings: they are let go (the
    /// process replaced its program, or is forgotten), and nothing will read it again.
    pub fn give_up_held(&mut self) {
        if let Some(perf_map) = &mut self.perf_map {
            perf_map.give_up_held();
        }
        for jitdump in &mut self.jitdumps {
            jitdump.give_up_held();
        }
    }

    /// Entries held outside the executable mappings, waiting for a later read.
    pub fn held(&self) -> usize {
        self.perf_map.as_ref().map_or(0, |p| p.held())
            + self.jitdumps.iter().map(|j| j.held()).sum::<usize>()
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
    /// it), looking for the perf map if it is time to; adds what it found to `out`. `check`
    /// says which address ranges are executable in the process.
    pub fn read(
        &mut self,
        job: &ReadJob,
        store: &CodeStore,
        check: ExecCheck<'_>,
        budget: &mut u64,
        out: &mut ReadOutcome,
    ) {
        let ReadJob {
            pid,
            nspid,
            now_ns,
            exited,
            ..
        } = *job;
        let mapped_late_before = self.mapped_late();
        let mut check = Recording {
            check,
            outside: &mut out.refused_ranges,
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
                    out.dropped.extend(self.perf_map.take().map(|mut s| {
                        s.give_up_held();
                        s.refusals
                    }));
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
            out.stats.extend(file.take_stats());
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
        out.mapped_late += self.mapped_late().saturating_sub(mapped_late_before);
        out.cut_short = *budget == 0 && self.behind();
    }

    /// Whether a source's last read stopped short of its file's end.
    fn behind(&self) -> bool {
        self.perf_map.as_ref().is_some_and(PerfMapSource::behind)
            || self.jitdumps.iter().any(JitdumpSource::behind)
            || self.files.iter().any(CodeMapFileSource::behind)
    }

    fn mapped_late(&self) -> u64 {
        self.perf_map.as_ref().map_or(0, |p| p.counters.mapped_late)
            + self
                .jitdumps
                .iter()
                .map(|j| j.counters.mapped_late)
                .sum::<u64>()
    }
}

/// An [`ExecRanges`] that notes the ranges it finds outside, for the registry to say why a
/// sample there is unexplained.
struct Recording<'a, 'b> {
    check: ExecCheck<'a>,
    outside: &'b mut Vec<(u64, u64)>,
}

impl ExecRanges for Recording<'_, '_> {
    fn contains(&mut self, start: u64, end: u64) -> bool {
        let inside = self.check.contains(start, end);
        if !inside {
            self.outside.push((start, end));
        }
        inside
    }

    fn known_to_contain(&mut self, start: u64, end: u64) -> bool {
        self.check.known_to_contain(start, end)
    }
}
