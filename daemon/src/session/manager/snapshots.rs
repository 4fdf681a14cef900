//! Profiles of a session: snapshots of its counts, taken when the reads its samples need are
//! done (or given up on).

use super::*;

impl Manager {
    /// Answers the profile requests that waited for reads, once they came back or waited
    /// long enough.
    pub(super) fn answer_snapshots(&mut self, now_ns: u64) {
        let waiters = std::mem::take(&mut self.snapshot_waiters);
        for waiter in waiters {
            let reading = waiter.pids.iter().any(|&pid| self.codemaps.reading(pid));
            if reading && now_ns < waiter.until_ns && !waiter.reply.is_closed() {
                self.snapshot_waiters.push(waiter);
                continue;
            }
            let result = match self.visible(waiter.caller, waiter.id) {
                Ok(_) => Ok(self.snapshot(waiter.id)),
                Err(e) => Err(e),
            };
            let _ = waiter.reply.send(result);
        }
    }

    pub(super) fn snapshot(&mut self, id: u64) -> Snapshot {
        let now = sys::monotonic_ns();
        let lost = self.sampler.lost().ok();
        if self.sessions[&id].state == State::Running {
            self.refresh_counts(id);
        }
        let session = self.sessions.get_mut(&id).expect("checked by visible()");
        if session.state == State::Running {
            let update = update_cpu(session, Some(read_host_cpu()), true);
            self.counters.pid_reuses += update.reused;
            if let Some(lost) = &lost {
                refresh_lost(session, lost);
                off_cpu::refresh_off_cpu(session, lost);
            }
        }
        let session = self.sessions.get_mut(&id).expect("checked by visible()");
        if let Some(stop) = session.stop_ns {
            for target in &mut session.targets {
                let found = self.codemaps.found(target.pid);
                if !found.is_empty() && found.iter().all(|&(_, at)| at >= stop) {
                    target.code_maps_after = found
                        .iter()
                        .fold(CodeMapKinds::default(), |all, &(kind, _)| all.with(kind));
                }
            }
        }
        let session = &self.sessions[&id];
        let mut stacks = session.stacks.snapshot();
        for location in &mut stacks.locations {
            if let Location::Anonymous { pid, why, .. } = location
                && matches!(why, Unexplained::NoCodeMap | Unexplained::NotLookedUp)
                && let Some(target) = session.targets.iter().find(|t| t.pid == *pid)
                && !target.code_maps_after.is_empty()
            {
                *why = Unexplained::MapAfterSession(target.code_maps_after);
            }
        }
        let has_generated_code = session.targets.iter().any(|t| {
            self.processes
                .get(t.pid)
                .is_some_and(|p| p.has_anonymous_code && p.start_time == t.start_time)
        }) || session
            .stacks
            .locations
            .iter()
            .any(|l| matches!(l, Location::Anonymous { .. }));
        Snapshot {
            session: session.info(now),
            stacks,
            truncated: session.truncated,
            commands: session.commands.clone(),
            executables: session.executables.clone(),
            thread_names: session.thread_names.clone(),
            period_ns: session.period_ns,
            total_samples: session.total,
            lost_per_cpu: session.lost.clone(),
            duration: session.elapsed(now),
            cpu_seconds: session.cpu_seconds(now, self.clock_ticks as f64, self.online_cpus),
            host_steal_percent: session.host_steal_percent(),
            vm_executable: session
                .targets
                .first()
                .map(|t| t.executable.clone())
                .unwrap_or_default(),
            has_generated_code,
            complete: session.state == State::Stopped
                && session.incomplete.is_none()
                && session.jit.awaiting == 0,
            incomplete_reason: session.incomplete.clone(),
            jit: session.jit,
            kept: session.kept.snapshot(),
            not_kept: session.kept.not_kept,
            kernel_events: session
                .kernel
                .as_ref()
                .map(|kernel| kernel.summary(|pid| session.commands.get(&pid).cloned())),
            vm_statistics: vm_statistics(session, now),
            off_cpu: session.off_cpu.clone(),
            thread_filter: None,
            label_filter: None,
            call_counts: session.call_counts.to_model(),
        }
    }
}
