//! What the kernel says of target processes: `execve`, exits, credentials that changed; the
//! kernel filter armed and released as a target's process calls for.

use super::*;

impl Manager {
    /// A process replaced its program: its mappings are all new, and it may now belong to
    /// another user (a setuid program).
    /// A thread of a process the kernel follows was given a name: the sessions that watch it
    /// name it so from now on, and a thread gone before its name could be read from `/proc`
    /// keeps it (see [`Manager::note_names`]).
    pub(super) fn rename(&mut self, event: &Event) {
        self.counters.rename_events += 1;
        let task = Task::new(event.tgid, event.tid);
        let name = comm_name(&event.exec_comm());
        for session in self.sessions.values_mut() {
            if session.state != State::Stopped
                && session.watches(task.pid, event.timestamp_ns)
                && let Some(known) = session.thread_names.get_mut(&task)
            {
                known.clone_from(&name);
            }
        }
        // Bounded as the sessions' names are; a process's go with its exit.
        if self.thread_renames.len() >= MAX_THREAD_NAMES {
            self.thread_renames.clear();
        }
        self.thread_renames.insert(task, name);
    }

    pub(super) fn exec(&mut self, event: &Event) {
        self.counters.exec_events += 1;
        let pid = event.tgid;
        // Another program: its code and its user are read again.
        self.process_memory.forget(pid);
        // Sessions that sample the process at the exec's time: stopping ones too, since a
        // program that exits at once can be seen to exit (and its session to stop) before its
        // exec is read from the ring.
        let targeted: Vec<u64> = self
            .sessions
            .values()
            .filter(|s| {
                s.state != State::Stopped && !s.spec.system_wide && s.wants(pid, event.timestamp_ns)
            })
            .map(|s| s.id)
            .collect();
        // The old program's code map ends at the exec; what the new one published stays.
        self.codemaps.exec(pid, event.timestamp_ns);
        let comm = comm_name(&event.exec_comm());
        for session in self.sessions.values_mut() {
            // Only sessions that sample the process at the exec: a session whose target under
            // this pid ended before keeps its name.
            if session.state != State::Stopped
                && session.wants(pid, event.timestamp_ns)
                && let Some(command) = session.commands.get_mut(&pid)
            {
                command.clone_from(&comm);
                // The thread that exec'd is the leader now, and named after the new program:
                // a main thread first seen as the launcher (vmscope's own child before its
                // exec) is named after what it ran.
                if let Some(name) = session.thread_names.get_mut(&Task::from(pid)) {
                    name.clone_from(&comm);
                }
            }
        }
        if targeted.is_empty() {
            // Some process seen by a system-wide session: read it again when it is next
            // sampled, not now, so that a host busy with execs costs nothing for processes
            // that are never sampled.
            self.processes.forget(pid);
            return;
        }
        // A named target: read it now, while it may still live, as at session start. A short
        // program may be gone already: its name came with the event.
        let process = self.processes.exec(pid, event.timestamp_ns, &comm);
        let (start_time, command, executable) = (
            process.start_time,
            process.command.clone(),
            process
                .executable
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        );
        for id in &targeted {
            let Some(session) = self.sessions.get_mut(id) else {
                continue;
            };
            for target in session
                .targets
                .iter_mut()
                .filter(|t| t.pid == pid && t.until_ns.is_none_or(|u| event.timestamp_ns < u))
            {
                if target.start_time == start_time {
                    target.command.clone_from(&command);
                    // The old program's path would be wrong; an unknown one is said as such.
                    target.executable.clone_from(&executable);
                } else {
                    // The program is gone already, or another process holds the pid by now:
                    // the exec event's name is all that is known of the target's new program.
                    if start_time.is_some() {
                        self.counters.pid_reuses += 1;
                    }
                    target.command.clone_from(&comm);
                    target.executable.clear();
                }
                session.commands.insert(pid, target.command.clone());
            }
        }
        // The new program may belong to another user (setuid), another group or hold
        // capabilities: the kernel keeps the owners' samples to the credentials checked before
        // (see `Guard`), and the process is checked again now; an owner who may not profile the
        // new program has nothing of it from the exec on.
        self.arm_checking(pid, sys::monotonic_ns(), event.timestamp_ns);
    }

    /// Checks again the processes whose threads the kernel found running with credentials
    /// other than their guard's, which kept those samples from their target sessions: every
    /// such change is seen here, whether or not its exec event was.
    pub(super) fn check_changed_creds(&mut self) {
        for (pid, first_ns) in self.sampler.take_creds_changed() {
            self.counters.target_creds_changed += 1;
            self.arm_checking(pid, sys::monotonic_ns(), first_ns);
        }
    }

    /// Checks who process `pid` runs as against the owners of the running sessions that hold
    /// it: those that may not profile it ([`request::may_profile`]) are released from
    /// `until_ns` on and counted as revoked. Returns the guard the others need: open for root's
    /// sessions alone, else the credentials just checked; held when they could not be read
    /// (the process is ending: its exit releases it).
    ///
    /// The kernel compares every sampled thread with the guard, so the check and the
    /// credentials it is held to are one reading: nothing that changes after it is sampled for
    /// a user's session.
    fn check_owners(&mut self, pid: u32, until_ns: u64) -> Guard {
        let status = sys::read_status(pid).ok();
        let mut guarded = false;
        for (id, _) in self.holders(pid, u64::MAX) {
            let owner = self.sessions[&id].owner_uid;
            if owner == 0 {
                continue;
            }
            let Some(status) = &status else {
                guarded = true;
                continue;
            };
            match request::may_profile(owner, status) {
                Ok(()) => guarded = true,
                Err(why) => {
                    self.counters.targets_revoked += 1;
                    tracing::info!(id, pid, owner, "target {why}: no longer sampled");
                    let note = format!("now {why}, another user's process: no longer sampled");
                    self.release_target(id, pid, until_ns, &note);
                }
            }
        }
        match (guarded, status.as_ref().and_then(request::creds_of)) {
            (false, _) => Guard::Open,
            (true, Some(creds)) => Guard::Creds(creds),
            (true, None) => Guard::Held,
        }
    }

    /// Stops sampling one target of a running session from `until_ns` on.
    pub(super) fn release_target(&mut self, id: u64, pid: u32, until_ns: u64, note: &str) {
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        let Some(target) = session.held_target_mut(pid) else {
            return;
        };
        target.until_ns = Some(until_ns);
        target.note = Some(note.to_owned());
        if let Some(kernel) = &mut session.kernel {
            kernel.freeze(pid);
        }
        if let Some(hotspot) = &mut session.hotspot {
            hotspot.freeze(pid);
        }
        self.routes
            .release_target(self.sampler.as_mut(), &session.spec, pid);
    }

    /// The running sessions' targets under `pid` that still hold their filters, as (session,
    /// start time), in sessions started by `started_by_ns`.
    fn holders(&self, pid: u32, started_by_ns: u64) -> Vec<(u64, Option<u64>)> {
        self.running()
            .filter(|s| !s.spec.system_wide && s.start_ns <= started_by_ns)
            .flat_map(|s| {
                s.targets
                    .iter()
                    .filter(|t| t.pid == pid && t.until_ns.is_none())
                    .map(|t| (s.id, t.start_time))
            })
            .collect()
    }

    /// A target of a running session ended: it is marked exited (with its last CPU time when it
    /// could still be read), no longer sampled from `until_ns` on, and its session stops there
    /// if it was the last.
    fn target_exited(&mut self, id: u64, pid: u32, until_ns: u64, cpu_ticks: Option<u64>) {
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        if session.state != State::Running {
            return;
        }
        let Some(target) = session.held_target_mut(pid) else {
            return;
        };
        target.exited = true;
        if let Some(ticks) = cpu_ticks {
            target.cpu_ticks_last = ticks.max(target.cpu_ticks_last);
        }
        let all_exited = session.targets.iter().all(|t| t.exited);
        let stop_ns = until_ns.max(session.start_ns);
        // Its code maps are read one last time, and change no more.
        self.codemaps.exited(pid);
        if all_exited {
            self.begin_stop(id, STOPPED_ALL_TARGETS_EXITED, stop_ns);
        } else {
            self.release_target(id, pid, until_ns, "exited");
        }
    }

    /// A tracked process exited (its leader, or a thread of a process whose leader had): the
    /// kernel stopped sampling its pid for target sessions when it did. Its targets are released
    /// at that time, unless the process runs on ([`life::after_exit`]): then its filter is armed
    /// again.
    ///
    /// Targets of sessions started after the exit are not concerned: they were read, and their
    /// filters armed and checked, after it.
    pub(super) fn exit(&mut self, event: &Event) {
        self.counters.exit_events += 1;
        let (pid, at) = (event.tgid, event.timestamp_ns);
        self.thread_renames.forget(pid);
        self.process_memory.forget(pid);
        let concerned = self.holders(pid, at);
        if concerned.is_empty() {
            // A process a system-wide session saw, or a target released already.
            self.processes.exited(pid, at);
            return;
        }
        let now = life::probe(pid, None);
        let mut reused = false;
        let mut ran_on = None;
        for (id, start_time) in concerned {
            match life::after_exit(now, start_time, at, self.start_clock) {
                AfterExit::RunsOn { leader } => ran_on = Some(leader),
                AfterExit::Ended {
                    cpu_ticks,
                    reused: other,
                } => {
                    reused |= other;
                    self.target_exited(id, pid, at, cpu_ticks);
                }
            }
        }
        if reused {
            self.counters.pid_reuses += 1;
        }
        let Some(leader) = ran_on else {
            self.processes.exited(pid, at);
            return;
        };
        self.counters.exits_process_ran_on += 1;
        if leader {
            // An execve from another thread replaced the program: its exec event found the
            // filter gone, so its mappings are read again here.
            self.processes.refresh_if_older(pid, 0, sys::monotonic_ns());
        }
        self.arm(pid, sys::monotonic_ns());
    }

    /// Arms the kernel's `TRACKED` entry of `pid` for the targets of running sessions that hold
    /// its filters, as the process that holds the pid calls for: removed at its leader's exit,
    /// or at any thread's once the leader is gone. Then checks that it still lives: an exit
    /// before the entry was in place removed nothing, and would leave the pid sampled for
    /// whoever gets it next. A thread seen alive after the entry was written has its exit
    /// tracepoint still to run (see [`crate::process::life`]).
    ///
    /// Targets whose process is found gone, or whose start time is not that of the process
    /// found, are released from `until_ns` on (a time before the entry was written): no sample
    /// after that is theirs. So are targets whose owner may not profile the process as it runs
    /// now, and the entry's guard is set for the others ([`Manager::check_owners`]).
    pub(super) fn arm(&mut self, pid: u32, until_ns: u64) {
        self.arm_checking(pid, until_ns, until_ns);
    }

    /// [`Manager::arm`], releasing the targets whose owner may not profile the process from
    /// `revoked_ns` on: the time its credentials changed, when known.
    fn arm_checking(&mut self, pid: u32, until_ns: u64, revoked_ns: u64) {
        // A process only goes from running with its leader, to running without, to gone: three
        // rounds see it settle.
        for _ in 0..3 {
            let holders = self.holders(pid, u64::MAX);
            if holders.is_empty() {
                return;
            }
            let life = life::probe(pid, None);
            let tracking = match life {
                Life::Alive { leader: true, .. } => Tracking::Leader,
                Life::Alive { leader: false, .. } => Tracking::AnyThread,
                _ => Tracking::Off,
            };
            let mut live = false;
            for (id, start_time) in holders {
                if tracking != Tracking::Off
                    && start_time.is_some()
                    && start_time == life.start_time()
                {
                    live = true;
                    continue;
                }
                let cpu_ticks = match life {
                    Life::Exited {
                        cpu_ticks,
                        start_time: now,
                    } if start_time == Some(now) => Some(cpu_ticks),
                    _ => {
                        if life.start_time().is_some() {
                            self.counters.pid_reuses += 1;
                        }
                        None
                    }
                };
                self.target_exited(id, pid, until_ns, cpu_ticks);
            }
            if !live {
                // The last holder's release took the entry away.
                return;
            }
            let guard = self.check_owners(pid, revoked_ns);
            if self.holders(pid, u64::MAX).is_empty() {
                // Revoked for every session: the last release took the entry away.
                return;
            }
            self.sampler.set_tracking(pid, tracking, guard);
            let after = life::probe(pid, life.start_time());
            let holds = match after {
                Life::Alive { leader, .. } => leader || tracking == Tracking::AnyThread,
                _ => false,
            };
            if holds {
                return;
            }
        }
        // Not settled (it cannot happen, by the order above): nothing is sampled for them.
        for (id, _) in self.holders(pid, u64::MAX) {
            self.target_exited(id, pid, until_ns, None);
        }
    }
}

/// A kernel `comm` (NUL-padded) as text.
fn comm_name(comm: &[u8]) -> String {
    let len = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..len]).into_owned()
}
