//! Driving the code maps: reads of a process's code map files, and the samples they let through.

use super::*;

impl Manager {
    /// Makes sure the code maps know `pid`; a process that left its pid to another takes its
    /// VM's statistics with its map.
    pub(super) fn touch_code_maps(&mut self, pid: u32) {
        if self.codemaps.touch(pid) {
            self.vms.retain(|known| known != pid);
        }
    }

    /// Reads a process's code maps and attributes its waiting samples in generated code.
    pub(super) fn advance_code_maps(&mut self, pid: u32, now_ns: u64) {
        self.advance_code_maps_with(pid, now_ns, None);
    }

    /// [`Manager::advance_code_maps`], optionally forcing the samples waiting up to
    /// `force_until` through.
    pub(super) fn advance_code_maps_with(
        &mut self,
        pid: u32,
        now_ns: u64,
        force_until: Option<u64>,
    ) {
        // Code map files are found through the process's mappings, which it may have changed
        // since they were read.
        self.processes
            .refresh_if_older(pid, CODE_MAP_FILES_RECHECK_NS, now_ns);
        if let Some(process) = self.processes.get(pid) {
            self.codemaps.observe_files(pid, &process.code_map_files);
        }
        let processes = &mut self.processes;
        let sessions = &mut self.sessions;
        let samples_until = self
            .watermark_ns
            .saturating_sub(self.config.stop_slack.as_nanos() as u64);
        self.codemaps.advance(
            pid,
            now_ns,
            samples_until,
            force_until,
            &mut || processes.executable(pid, now_ns),
            &mut SessionSink {
                sessions,
                vms: &mut self.vms,
                labels_unknown: &mut self.counters.labels_unknown,
            },
        );
    }

    /// A read of a process's code map files came back: the samples it lets through are
    /// attributed, and stops that waited for it may end.
    pub(super) fn read_done(&mut self, reply: ReadReply) {
        let now = sys::monotonic_ns();
        let pid = reply.job.pid;
        let samples_until = self
            .watermark_ns
            .saturating_sub(self.config.stop_slack.as_nanos() as u64);
        let mut sink = SessionSink {
            sessions: &mut self.sessions,
            vms: &mut self.vms,
            labels_unknown: &mut self.counters.labels_unknown,
        };
        let again = self
            .codemaps
            .read_done(reply, now, samples_until, &mut sink);
        if again {
            self.advance_code_maps(pid, now);
        }
        self.answer_snapshots(now);
        self.finalize_ready(now);
    }

    /// The processes a running session samples whose samples wait for their code map files
    /// to be read up to the samples' time: the reads are asked for now, and a profile taken
    /// now waits for them (a grace at most), or it would count samples it shows nowhere. A
    /// read that came back just before the samples arrived leaves them waiting for the next.
    pub(super) fn reads_holding_samples(&mut self, id: u64, now: u64) -> Vec<u32> {
        let Some(session) = self.sessions.get(&id) else {
            return Vec::new();
        };
        if session.state == State::Stopped {
            return Vec::new();
        }
        let waiting: Vec<u32> = self
            .codemaps
            .waiting()
            .into_iter()
            .filter(|&pid| session.watches(pid, now))
            .collect();
        let mut reading = Vec::new();
        for pid in waiting {
            self.advance_code_maps(pid, now);
            if self.codemaps.reading(pid) {
                reading.push(pid);
            }
        }
        reading
    }

    /// Code maps found only after a session say why its generated code is unexplained: a
    /// finished session's live targets with code no map explained are looked at again. Answers
    /// which (their reads may be under way).
    pub(super) fn look_again(&mut self, id: u64, now: u64) -> Vec<u32> {
        let Some(session) = self.sessions.get(&id) else {
            return Vec::new();
        };
        if session.state != State::Stopped {
            return Vec::new();
        }
        let unexplained: Vec<u32> = session
            .stacks
            .locations
            .iter()
            .filter_map(|l| match l {
                Location::Anonymous {
                    pid,
                    why: Unexplained::NoCodeMap | Unexplained::NotLookedUp,
                    ..
                } => Some(*pid),
                _ => None,
            })
            .collect();
        let look: Vec<(u32, Option<u64>)> = session
            .targets
            .iter()
            .filter(|t| unexplained.contains(&t.pid))
            .map(|t| (t.pid, t.start_time))
            .collect();
        let mut looked = Vec::new();
        for (pid, start_time) in look {
            // The target itself, not whoever has its pid now: another process's maps never
            // name the target's code.
            if self
                .processes
                .get(pid)
                .is_some_and(|p| !p.gone && p.start_time == start_time)
            {
                self.touch_code_maps(pid);
                self.advance_code_maps(pid, now);
                looked.push(pid);
            }
        }
        looked
    }
}
