//! A session's exact counts: the counter regions VMs publish (`stats/counters.rs`), read at the
//! session's start, at its stop and when its profile is asked for; and the calls of native
//! functions `record --count` counts (`session/call_counts.rs`), attached at the start, read at
//! a profile, read and detached at the stop.
//!
//! Each read of a region goes through the process-access threads (`process/access.rs`), as every read of
//! another process's memory does, and is made only of a target the session has not seen exit,
//! whose start time is the same before and after the read as when the session took it on: a
//! region's address is the VM's word, good in the VM only, never in a process that took its
//! pid after it.

use std::sync::Arc;

use super::{
    super::{
        call_counts::{CallCounts, ModuleFile},
        request::SessionSpec,
    },
    Manager,
};
use crate::{stats::counters::CounterRegion, sys};

impl Manager {
    /// Session `id`'s counts at its start: its VMs' regions read, its functions' counters
    /// attached in each of `pids`.
    pub(super) fn start_counts(&mut self, id: u64, spec: &SessionSpec, pids: &[u32]) {
        self.read_counts(id, true);
        if spec.counts.is_empty() {
            return;
        }
        let owner = self.sessions[&id].owner_uid;
        let (processes, modules) = (&self.processes, &self.modules);
        // A binary of that file name among the mappings the process table read.
        let mapped = |pid: u32, name: &str| {
            processes.get(pid)?.file_mappings().find_map(|(_, _, id)| {
                let module = modules.get(id).filter(|m| m.name == name)?;
                Some(ModuleFile {
                    open: module.held_path()?,
                    shown: module.path.display().to_string(),
                })
            })
        };
        let counts = CallCounts::start(
            &spec.counts,
            pids,
            owner,
            mapped,
            self.sampler.as_mut(),
            &mut self.count_slots,
        );
        if let Some(session) = self.sessions.get_mut(&id) {
            session.call_counts = counts;
        }
    }

    /// Session `id`'s counts so far, for a profile while it runs.
    pub(super) fn refresh_counts(&mut self, id: u64) {
        self.read_counts(id, false);
        if let Some(session) = self.sessions.get_mut(&id) {
            session.call_counts.refresh(self.sampler.as_ref());
        }
    }

    /// Session `id`'s counts as it stops (an exited VM's last values are its own), its
    /// functions' counters detached.
    pub(super) fn end_counts(&mut self, id: u64) {
        self.read_counts(id, false);
        if let Some(session) = self.sessions.get_mut(&id) {
            session
                .call_counts
                .stop(self.sampler.as_mut(), &mut self.count_slots);
        }
    }

    fn read_counts(&mut self, id: u64, start: bool) {
        let Some(session) = self.sessions.get(&id) else {
            return;
        };
        let mut reads: Vec<(u32, Arc<CounterRegion>, Option<u64>)> = Vec::new();
        for (&pid, window) in &session.vm {
            let regions: Vec<Arc<CounterRegion>> = if start {
                window.counts.unread()
            } else {
                window.counts.regions().cloned().collect()
            };
            if regions.is_empty() {
                continue;
            }
            let target = session.targets.iter().find(|t| t.pid == pid);
            let expected = match target {
                Some(t) if t.exited => None,
                Some(t) => t.start_time,
                // A system-wide session's VM: as the process table knows it.
                None => self.processes.get(pid).and_then(|p| p.start_time),
            };
            for region in regions {
                reads.push((pid, region, expected));
            }
        }
        let now = sys::monotonic_ns();
        let mut answers = Vec::with_capacity(reads.len());
        for (pid, region, expected) in reads {
            let values = match expected {
                None => Err("the process exited".to_owned()),
                Some(expected) => self.read_region(pid, expected, region.clone()),
            };
            if values.is_err() {
                self.counters.exact_count_reads_failed += 1;
            } else {
                self.counters.exact_count_reads += 1;
            }
            answers.push((pid, region.id, values));
        }
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        for (pid, region, values) in answers {
            if let Some(window) = session.vm.get_mut(&pid) {
                if start {
                    window.counts.read_at_start(region, values);
                } else {
                    window.counts.read_at(now, region, values);
                }
            }
        }
    }

    /// One region of `pid`, which must have started at `start_time` (clock ticks after boot).
    fn read_region(
        &self,
        pid: u32,
        start_time: u64,
        region: Arc<CounterRegion>,
    ) -> Result<Vec<u64>, String> {
        let answer = self.process_access.run(pid, move || {
            let same = || sys::read_start_time(pid) == Some(start_time);
            if !same() {
                return Err("the process exited".to_owned());
            }
            let mut bytes = vec![0u8; region.span()];
            let read = sys::read_process_memory(pid, region.address, &mut bytes)
                .map_err(|e| format!("reading its memory at {:#x}: {e}", region.address))?;
            if !same() {
                return Err("the process exited".to_owned());
            }
            bytes.truncate(read);
            region.values(&bytes).ok_or_else(|| {
                format!(
                    "its memory at {:#x} ends after {read} of the region's {} bytes",
                    region.address,
                    region.span()
                )
            })
        });
        answer.map_err(|stalled| stalled.to_string())?
    }
}
