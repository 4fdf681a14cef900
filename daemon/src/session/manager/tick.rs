//! The manager's housekeeping tick: targets' CPU time and exits, JVMs, code maps, sweeps of
//! binaries and codes, symbols looked up ahead, memory given back.

use tokio::io::{Interest, unix::AsyncFd};

use super::*;

/// Every how many ticks the targets' `/proc/PID/stat` is read (CPU times, exits and leaders
/// the ring had no room to report, pids reused): a read is tens of microseconds, the tick's
/// largest cost. A target's exit and its leader's come as events; its CPU time from the
/// kernel's counters, where they could be opened; and a session's start, snapshots and stop
/// read it afresh.
pub(super) const PROBE_EVERY_TICKS: u64 = 4;

/// How often the tick reads the host's CPU times (`/proc/stat`, whose interrupt counts make it
/// long to generate: it was 9% of the daemon's CPU at a read per tick).
const HOST_CPU_EVERY_NS: u64 = 1_000_000_000;

/// When the housekeeping tick is due, and what wakes the manager for it.
///
/// Every wakeup costs the manager tens of microseconds of scheduling, about what a tick's
/// work costs: while samples flow, the tick rides on a batch of them rather than on a wakeup
/// of its own. A batch ticks when the next one, expected after the same gap as this one, would
/// come after the tick is due, so the tick is never late and, with batches every 10 ms, at
/// most 10 ms early. Without batches a kernel timer wakes the manager when the tick is due
/// ([`sys::DeadlineTimer`]: tokio's timers cost two wakeups for a period of 100 ms).
pub(super) struct Ticker {
    period_ns: u64,
    due_ns: u64,
    last_batch_ns: u64,
    timer: Option<AsyncFd<sys::DeadlineTimer>>,
}

impl Ticker {
    /// The first tick one period from now, not at once: there is nothing to look after at
    /// start, and a test that sets a long tick then has none at all.
    pub(super) fn new(period: Duration) -> Ticker {
        let now = sys::monotonic_ns();
        let timer = sys::DeadlineTimer::new()
            .and_then(|timer| {
                // SAFETY: the timer owns its descriptor, which stays open and the same until
                // the timer is dropped with the AsyncFd.
                unsafe { AsyncFd::register_with_interest(timer, Interest::READABLE) }
                    .map_err(|e| e.into())
            })
            .map_err(|e| tracing::warn!("no timer of the kernel's for the tick, tokio's: {e}"))
            .ok();
        let mut ticker = Ticker {
            period_ns: u64::try_from(period.as_nanos()).unwrap_or(u64::MAX),
            due_ns: 0,
            last_batch_ns: now,
            timer,
        };
        ticker.ticked(now);
        ticker
    }

    /// Sets the next tick one period after `now_ns`.
    pub(super) fn ticked(&mut self, now_ns: u64) {
        self.due_ns = now_ns.saturating_add(self.period_ns);
        self.arm();
    }

    /// Sets the timer to the tick's due time.
    pub(super) fn arm(&mut self) {
        if let Some(timer) = &self.timer
            && let Err(e) = timer.get_ref().set_at(self.due_ns)
        {
            tracing::warn!("the tick's timer cannot be set, tokio's instead: {e}");
            self.timer = None;
        }
    }

    /// Whether the tick is due at `now_ns`.
    pub(super) fn due(&self, now_ns: u64) -> bool {
        now_ns >= self.due_ns
    }

    /// Notes a batch at `now_ns`: whether it should tick (see [`Ticker`]).
    pub(super) fn batch(&mut self, now_ns: u64) -> bool {
        let gap = now_ns.saturating_sub(self.last_batch_ns);
        self.last_batch_ns = now_ns;
        now_ns.saturating_add(gap.min(self.period_ns)) > self.due_ns
    }

    /// Waits until the timer expires: at the tick's due time, unless a batch ticked since.
    pub(super) async fn expired(&self) {
        let Some(timer) = &self.timer else {
            return sleep_until_ns(Some(self.due_ns)).await;
        };
        loop {
            let Ok(mut ready) = timer.readable().await else {
                return sleep_until_ns(Some(self.due_ns)).await;
            };
            if ready.get_inner().clear() {
                return;
            }
            // Readiness from before the timer was set again.
            ready.clear_ready();
        }
    }
}

impl Manager {
    pub(super) fn tick(&mut self) {
        // Idle, the rings are read here only: they must not fill.
        self.read_mapping_records();
        self.keep_windows_going();
        let now = sys::monotonic_ns();
        let running: Vec<u64> = self.running().map(|s| s.id).collect();
        self.ticks += 1;
        let probe = self.ticks.is_multiple_of(PROBE_EVERY_TICKS);
        // An idle daemon reads nothing; a busy one the host's times once a second: a session's
        // start, its snapshots and its stop read them afresh, and its steal is measured between
        // those.
        let host = (!running.is_empty()
            && now.saturating_sub(self.host_cpu_read_ns) >= HOST_CPU_EVERY_NS)
            .then(|| {
                self.host_cpu_read_ns = now;
                read_host_cpu()
            });
        let mut leaderless = Vec::new();
        for id in running {
            let Some(session) = self.sessions.get_mut(&id) else {
                continue;
            };
            // JVM targets still starting: their performance data file comes within a second.
            if now.saturating_sub(session.start_ns) < hotspot::LOOK_FOR_NS
                && let Some(perf_data) = &mut session.hotspot
                && perf_data.look_due(now)
            {
                count_perf_data(&mut self.counters, perf_data.look_again());
            }
            if let Some(perf_data) = &mut session.hotspot {
                self.counters.hotspot_perf_data_failed += perf_data.read_levels(now);
            }
            if probe || host.is_some() {
                let update = update_cpu(session, host, probe);
                self.counters.pid_reuses += update.reused;
                leaderless.extend(update.leaderless);
            }
            let newly_exited: Vec<u32> = session
                .targets
                .iter()
                .filter(|t| t.exited && t.until_ns.is_none())
                .map(|t| t.pid)
                .collect();
            for target in &mut session.targets {
                // Only from the target's own process: not another one that has its pid now.
                if let Some(process) = self.processes.get(target.pid)
                    && !process.gone
                    && !target.exited
                    && target.until_ns.is_none()
                    && process.start_time == target.start_time
                {
                    target.command.clone_from(&process.command);
                    if let Some(exe) = &process.executable {
                        target.executable = exe.display().to_string();
                    }
                }
            }
            let all_exited = !session.spec.system_wide && session.targets.iter().all(|t| t.exited);
            // Its code maps are read one last time, and change no more.
            for &pid in &newly_exited {
                self.codemaps.exited(pid);
            }
            if all_exited {
                self.begin_stop(id, STOPPED_ALL_TARGETS_EXITED, now);
                continue;
            }
            // An exited target's pid may be reused by anyone: stop sampling it now. (Its exit
            // event, which the ring had no room for, would have done it at once.)
            for pid in newly_exited {
                self.release_target(id, pid, now, "exited");
            }
        }
        // Targets whose leader exited before their threads: their kernel filter goes with any
        // thread's exit, and is armed again while threads remain (an exit event lost to a full
        // ring would otherwise leave them unsampled).
        leaderless.sort_unstable();
        leaderless.dedup();
        for pid in leaderless {
            self.arm(pid, now);
        }
        // Processes whose samples wait for their code maps after every session that samples
        // them stopped: their exit is what flushes a buffered jitdump.
        self.codemaps.notice_exits();
        self.tick_jvms(now);
        self.place_gc_waits(None);
        for pid in self.codemaps.waiting() {
            self.advance_code_maps(pid, now);
        }
        // With nothing sampled, no sample can arrive: a VM publishing between sessions has its
        // changes applied as they come, rather than held until the reader's next batch.
        let sampling = self.sessions.values().any(|s| s.state != State::Stopped);
        let samples_until = if sampling {
            self.watermark_ns
                .saturating_sub(self.config.stop_slack.as_nanos() as u64)
        } else {
            now
        };
        self.codemaps.settle(now, samples_until);
        self.codemaps.retire_idle_readers(now);
        self.apply_thread_counters();
        self.answer_snapshots(now);
        self.end_elapsed();

        if now.saturating_sub(self.last_sweep_ns) >= self.config.sweep_modules.as_nanos() as u64 {
            self.last_sweep_ns = now;
            self.sweep_modules(now);
            self.sweep_codes(now);
            self.warm_symbols();
            self.give_memory_back(sampling);
        }

        if now.saturating_sub(self.last_forget_ns) > 5_000_000_000 {
            self.last_forget_ns = now;
            let keep: Vec<u32> = self
                .sessions
                .values()
                .filter(|s| s.state != State::Stopped)
                .flat_map(|s| s.spec.pids.iter().copied())
                .collect();
            let horizon = now.saturating_sub(self.config.forget_processes_after.as_nanos() as u64);
            self.processes
                .forget_idle(|pid| keep.contains(&pid), horizon);
            let processes = &self.processes;
            self.unwinder.retain(|pid| processes.get(pid).is_some());
            self.java_codes.retain(|pid| processes.get(pid).is_some());
            // Code bytes are read again when next asked: code may have been freed or moved.
            self.process_memory.clear();
            self.codemaps
                .retain(|pid| keep.contains(&pid) || processes.get(pid).is_some());
            self.jvms
                .retain(|pid| keep.contains(&pid) || processes.get(pid).is_some());
            // The perf maps the daemon made JVMs write go once no running session needs them.
            self.jvms.remove_perf_maps(|pid| keep.contains(&pid));
        }
    }

    /// Closes the binaries nothing needs any more: those no live process maps and no session
    /// that can still be reported (running, stopping, stopped and kept) has samples in; and
    /// forgets the code maps of processes gone.
    ///
    /// A process that died keeps its binaries until every sample it took has been read: while
    /// sessions sample, until the reader's watermark passes the time it was found dead (a flush
    /// is asked for, so that a quiet ring does not hold it up); with none, at once, since no
    /// sample would be counted anyway. The cost is one `kill(pid, 0)` per known process and a
    /// pass over the sessions' sets of binaries, not over their samples.
    fn sweep_modules(&mut self, now_ns: u64) {
        let slack = self.config.stop_slack.as_nanos() as u64;
        let sampling = !self.by_period.is_empty();
        let settled_ns = if sampling {
            self.watermark_ns.saturating_sub(slack)
        } else {
            now_ns
        };
        let mut keep: std::collections::HashSet<ModuleId, foldhash::fast::RandomState> =
            Default::default();
        for session in self.sessions.values().chain(self.windows_building()) {
            keep.extend(session.stacks.modules());
        }
        self.codemaps.waiting_modules(&mut keep);
        let unsettled =
            self.processes
                .modules_in_use(now_ns, settled_ns, sys::process_exists, &mut keep);
        // The code maps of processes gone go by the same rule (their codes with the next sweep
        // of the store).
        let maps_unsettled = self.codemaps.forget_gone(now_ns, settled_ns);
        // A VM's statistics go with its code map: sessions keep their own windows.
        let codemaps = &self.codemaps;
        self.vms.retain(|pid| codemaps.knows(pid));
        self.forget_thread_counters();
        if (unsettled || maps_unsettled) && sampling {
            self.reader.flush_at(now_ns + slack);
        }
        let closed = self.modules.retain(|module| keep.contains(&module));
        if closed > 0 {
            tracing::debug!(closed, held = self.modules.len(), "binaries closed");
        }
        // Their tables are free now, but stay in the RSS until the allocator returns them.
        self.closed_since_return += closed;
        if self.closed_since_return > 0 && self.returned_at.elapsed() >= RETURN_AFTER_CLOSING_EVERY
        {
            sys::return_free_memory();
            self.closed_since_return = 0;
            self.returned_at = Instant::now();
        }
    }

    /// Hands the locations in binaries that running sessions met since the last time to the
    /// symbolisation warmer ([`Warmer`]), a batch at a time, for the profiles to find their
    /// names and lines ready. A batch the warmer's queue has no room for waits for the next
    /// sweep.
    fn warm_symbols(&mut self) {
        for session in self.sessions.values_mut() {
            if session.state == State::Stopped {
                continue;
            }
            let locations = &session.stacks.locations;
            while session.warmed < locations.len() {
                let end = (session.warmed + MAX_BATCH).min(locations.len());
                let batch: Vec<Location> = locations[session.warmed..end]
                    .iter()
                    .filter(|l| matches!(l, Location::File { .. }))
                    .copied()
                    .collect();
                if !batch.is_empty() && !self.warmer.offer(batch) {
                    return;
                }
                session.warmed = end;
            }
        }
    }

    /// With no session running or stopping, nothing asks for symbols or source lines but a
    /// report of a kept session, and no stack is unwound: once no session sampled and no
    /// profile was built for [`LINES_IDLE`], every DWARF table, symbol table and unwind table
    /// goes (the binaries stay
    /// open, to be parsed again when asked), and the allocator gives its free memory back to the
    /// kernel, once each time the daemon falls idle (a daemon that had run ten sessions held
    /// 373 MiB, idle).
    fn give_memory_back(&mut self, sampling: bool) {
        let now = Instant::now();
        if sampling {
            self.idle_since = None;
            self.memory_given_back = false;
            return;
        }
        // Sessions back to back keep what the last one parsed, and so does a report being
        // built (a final profile, or a kept session's).
        let idle_since = *self.idle_since.get_or_insert(now);
        if now.duration_since(idle_since) < LINES_IDLE || self.modules.in_use_within(LINES_IDLE) {
            return;
        }
        let lines = self.modules.lines().release();
        if lines > 0 || !self.memory_given_back {
            self.memory_given_back = true;
            self.unwinder.retain(|_| false);
            self.java_codes.retain(|_| false);
            let tables = self.modules.release_parsed();
            sys::return_free_memory();
            tracing::debug!(
                lines,
                tables,
                "idle: line, symbol and unwind tables let go, free memory given back"
            );
        }
    }

    /// Lets the code store reclaim the codes nothing refers to any more: no process's code
    /// map (live, or changes still to apply), no waiting sample, and no session that can still
    /// be reported. A process's codes thus go when it is forgotten and the last session that
    /// counted its samples is; the cost is a pass over the maps' entries and the sessions'
    /// distinct locations. That pass is skipped while no code was interned, no process's maps
    /// forgotten and no session evicted since the last one (a process with a million-line perf
    /// map would otherwise cost a tenth of a core), except every
    /// [`CODE_SWEEP_AT_LEAST_EVERY_NS`].
    fn sweep_codes(&mut self, now_ns: u64) {
        let store = self.codemaps.store().clone();
        if store.is_empty() {
            return;
        }
        let mark = [
            store.interned(),
            self.codemaps.forgotten(),
            self.counters.sessions_evicted,
            self.counters.continuous_windows_released,
        ];
        let last = self.code_sweep;
        // A code let go of is reclaimed by the second sweep after (the store's grace): one more
        // sweep follows a sweep for a change.
        let due = mark != last.mark
            || last.changed
            || now_ns.saturating_sub(last.at_ns) >= CODE_SWEEP_AT_LEAST_EVERY_NS;
        if !due {
            return;
        }
        self.code_sweep = CodeSweep {
            at_ns: now_ns,
            mark,
            changed: mark != last.mark,
        };
        let mut keep: std::collections::HashSet<CodeId, foldhash::fast::RandomState> =
            Default::default();
        for session in self.sessions.values().chain(self.windows_building()) {
            keep.extend(session.stacks.codes());
        }
        self.codemaps.codes_in_use(&mut keep);
        let swept = store.sweep(|code| keep.contains(&code));
        if swept.codes > 0 {
            tracing::debug!(
                codes = swept.codes,
                bytes = swept.bytes,
                held = store.len(),
                "codes reclaimed"
            );
        }
        if swept.bytes >= RETURN_MEMORY_AFTER {
            sys::return_free_memory();
        }
    }
}

/// The last sweep of the code store: when, what had been interned, forgotten, evicted and let go
/// by continuous windows by then, and whether that had changed since the sweep before.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct CodeSweep {
    at_ns: u64,
    mark: [u64; 4],
    changed: bool,
}
