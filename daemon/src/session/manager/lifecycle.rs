//! A session's life in the manager: its start (checks, targets, kernel filters and counters),
//! its stop, when its samples are all read and it becomes final, and the eviction of old ones.

use super::*;

impl Manager {
    /// Why `uid` may not run `spec` beside its running sessions (but `instead_of`, the session
    /// `spec` would replace): its sampling share (frequency, stack bytes copied) would be
    /// passed.
    pub(super) fn share_refusal(
        &self,
        uid: u32,
        spec: &request::SessionSpec,
        instead_of: Option<u64>,
    ) -> Option<String> {
        let specs: Vec<&request::SessionSpec> = self
            .running()
            .filter(|s| s.owner_uid == uid && Some(s.id) != instead_of)
            .map(|s| &s.spec)
            .collect();
        self.config
            .sampling_share
            .refusal(uid, specs.iter().copied(), spec)
    }

    pub(super) fn start(
        &mut self,
        caller: Caller,
        request: &SessionRequest,
    ) -> Result<SessionInfo, SessionError> {
        self.start_at(caller, request, None)
    }

    /// [`Manager::start`], the session's samples taken from `start_ns` (a continuous window
    /// starts where the last one ended) or from now.
    pub(super) fn start_at(
        &mut self,
        caller: Caller,
        request: &SessionRequest,
        start_ns: Option<u64>,
    ) -> Result<SessionInfo, SessionError> {
        let (mut spec, named) = self.admit(&caller, request)?;
        let now = sys::monotonic_ns();
        self.check_unfetched(&caller, now)?;
        let targets = self.identify_targets(&spec, &named, now)?;
        let jvms_decided = self.jvm_targets(&spec);
        spec.java_copies = self.java_copy_targets(&spec, &jvms_decided);
        if !spec.java_copies.is_empty()
            && !caller.is_root()
            && let Some(refusal) = self.share_refusal(caller.uid, &spec, None)
        {
            tracing::info!(
                uid = caller.uid,
                "a session's JVM targets keep their frame-pointer walk, without Java frames: \
                 copying their stacks would pass the user's share: {refusal}"
            );
            spec.java_copies.clear();
        }
        self.scan_jvm_targets(&spec);
        self.routes
            .acquire(self.sampler.as_mut(), &spec)
            .map_err(|e| {
                if e.is_map_full() {
                    SessionError::ResourceExhausted(format!(
                        "the kernel filter is full ({} processes sampled at once across all \
                         sessions): stop a session first",
                        vmscope_common::MAX_TARGETS
                    ))
                } else {
                    SessionError::Kernel(e)
                }
            })?;
        let period_ns = period_of(spec.frequency_hz);
        let lost = self
            .sampler
            .lost()
            .inspect_err(|e| tracing::warn!("cannot read lost-sample counters: {e}"))
            .ok();
        let lost_baseline = match &lost {
            Some(lost) if spec.mode.on_cpu() => {
                lost_for(lost, period_ns, spec.system_wide, &spec.pids)
            }
            _ => Vec::new(),
        };
        let off_cpu = off_cpu::new_tally(lost.as_ref(), &spec);
        let host = read_host_cpu();
        let id = self.next_id;
        self.next_id += 1;
        let commands = targets.iter().map(|t| (t.pid, t.command.clone())).collect();
        let kernel = (!spec.system_wide).then(|| self.open_kernel_counters(&targets));
        let hotspot = (!spec.system_wide).then(|| {
            let started_ms = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let mut perf_data = SessionPerfData::new(targets.iter().map(|t| t.pid), started_ms);
            count_perf_data(&mut self.counters, perf_data.look_again());
            perf_data
        });
        let now_ns = sys::monotonic_ns();
        let start_ns = start_ns.unwrap_or(now_ns).min(now_ns);
        let mut session = Session {
            id,
            owner_uid: caller.uid,
            period_ns,
            started_at: SystemTime::now() - Duration::from_nanos(now_ns - start_ns),
            start_ns,
            stop_ns: None,
            state: State::Running,
            stop_reason: None,
            targets,
            stacks: crate::session::StackTable::with_limit(self.config.max_stacks_per_session),
            commands,
            executables: Default::default(),
            thread_names: Default::default(),
            sends_last: Default::default(),
            total: 0,
            host_cpu: (host, host),
            lost: vec![0; lost_baseline.len()],
            lost_baseline,
            waiting: 0,
            jit: Default::default(),
            warmed: 0,
            incomplete: None,
            fetched: false,
            kept: KeptSamples::new(spec.keep_samples as usize),
            truncated: 0,
            kernel,
            hotspot,
            vm: Default::default(),
            off_cpu,
            call_counts: Default::default(),
            jvms_decided,
            spec,
        };
        // VMs publishing already: the session takes over their state (baselines, intervals
        // open now).
        for (pid, state) in self.vms.iter() {
            if session.watches(pid, session.start_ns) {
                session.vm.insert(pid, state.window(session.start_ns));
            }
        }
        tracing::info!(
            id,
            uid = caller.uid,
            pids = ?session.spec.pids,
            system_wide = session.spec.system_wide,
            frequency_hz = session.spec.frequency_hz,
            "session started"
        );
        let start_ns = session.start_ns;
        let pids = session.spec.pids.clone();
        for channel in session.spec.channels() {
            self.by_period.entry(channel).or_default().push(id);
        }
        let spec = session.spec.clone();
        self.sessions.insert(id, session);
        self.reader.set_active(true);
        self.counters.sessions_started += 1;
        // The filters are in place: arm each target for its own exit, and check it still lives.
        // One that ended meanwhile is released with no sample, whoever took its pid: the reply
        // says so.
        for &pid in &pids {
            self.arm(pid, start_ns);
        }
        self.note_blocked_threads(&spec, start_ns);
        self.watch_gcs(id);
        self.start_counts(id, &spec, &pids);
        let reply = self.sessions[&id].info(start_ns);
        self.after_start(id, &pids);
        Ok(reply)
    }

    /// Checks a start request against the frequency limits, the daemon's and the caller's
    /// shares, and the caller's right to profile its targets. Answers the validated request
    /// and the start times of the processes it names, read before the authorization: the
    /// targets read after must be these, not others given their pids in between.
    fn admit(
        &self,
        caller: &Caller,
        request: &SessionRequest,
    ) -> Result<(request::SessionSpec, Vec<Option<u64>>), SessionError> {
        let kernel_hz = (self.max_frequency_hz)().map_err(|e| {
            SessionError::Internal(format!("cannot read {}: {e}", sys::MAX_SAMPLE_RATE_SYSCTL))
        })?;
        let limits = request::FrequencyLimits {
            kernel_hz,
            daemon_hz: self.config.max_frequency_hz,
        };
        let mut spec = request::validate(request, limits)?;
        spec.root = caller.is_root();
        let running = self.running().count();
        if running >= self.config.max_running_sessions {
            return Err(SessionError::ResourceExhausted(format!(
                "{running} sessions are running, the most this daemon allows; stop one first"
            )));
        }
        let mine = self.running().filter(|s| s.owner_uid == caller.uid).count();
        if !caller.is_root() && mine >= self.config.max_running_per_user {
            return Err(SessionError::ResourceExhausted(format!(
                "you (uid {}) already run {mine} sessions, the most one user may; stop one first",
                caller.uid
            )));
        }
        if !caller.is_root()
            && let Some(refusal) = self.share_refusal(caller.uid, &spec, None)
        {
            return Err(SessionError::ResourceExhausted(refusal));
        }
        // The processes named, by start time, before the caller is authorized for them: the
        // targets read after must be these, not others given their pids in between.
        let named: Vec<Option<u64>> = spec
            .pids
            .iter()
            .map(|&pid| life::probe(pid, None).start_time())
            .collect();
        request::authorize(caller, &spec)?;
        Ok((spec, named))
    }

    /// Refuses a user who left too many stopped sessions whose profiles nobody took.
    fn check_unfetched(&self, caller: &Caller, now: u64) -> Result<(), SessionError> {
        let unfetched = self
            .sessions
            .values()
            .filter(|s| s.owner_uid == caller.uid && self.protected(s, now))
            .count();
        if !caller.is_root() && unfetched >= self.config.max_stopped_per_user {
            return Err(SessionError::ResourceExhausted(format!(
                "you (uid {}) have {unfetched} stopped sessions whose profiles nobody took, the \
                 most one user may: take them (vmscope report ID) or wait until they are {} s \
                 old",
                caller.uid,
                self.config.unfetched_kept_for.as_secs()
            )));
        }

        Ok(())
    }

    /// The targets of `spec`, read now, while they surely live, each checked to be the
    /// process `named` (by start time) when the request came.
    fn identify_targets(
        &mut self,
        spec: &request::SessionSpec,
        named: &[Option<u64>],
        now: u64,
    ) -> Result<Vec<Target>, SessionError> {
        let mut targets = Vec::with_capacity(spec.pids.len());
        for (&pid, &named_start) in spec.pids.iter().zip(named) {
            // Read the process now, while it surely lives: a target that exits right away is
            // still symbolised. What the table knows of an earlier process under the pid is not
            // this one.
            let process = self.processes.identify(pid, now);
            if named_start.is_none() || process.start_time != named_start {
                if named_start.is_some() && process.start_time.is_some() {
                    self.counters.pid_reuses += 1;
                }
                return Err(SessionError::NoSuchProcess(pid));
            }
            let mut target = Target {
                pid,
                start_time: process.start_time,
                command: process.command.clone(),
                executable: process
                    .executable
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                exited: false,
                until_ns: None,
                note: None,
                cpu_ticks_start: 0,
                cpu_ticks_last: 0,
                code_maps_after: CodeMapKinds::default(),
            };
            match life::probe(pid, target.start_time) {
                Life::Alive { cpu_ticks, .. } | Life::Exited { cpu_ticks, .. } => {
                    target.cpu_ticks_start = cpu_ticks;
                    target.cpu_ticks_last = cpu_ticks;
                }
                Life::Gone | Life::Reused { .. } => return Err(SessionError::NoSuchProcess(pid)),
            }
            targets.push(target);
        }

        Ok(targets)
    }

    /// What follows a start once its targets are armed and its reply made: their code maps
    /// read, HotSpot targets asked for their perf map.
    fn after_start(&mut self, id: u64, pids: &[u32]) {
        // Read the targets' code maps now: entries present at the start count from the start.
        let now = sys::monotonic_ns();
        for &pid in pids {
            self.touch_code_maps(pid);
            self.advance_code_maps(pid, now);
        }
        // HotSpot targets write their perf map when asked: the code compiled so far, named
        // from the start.
        self.observe_jvms(id);
        if self.jvm_attach(id) {
            for pid in self.sessions[&id].held_pids() {
                self.ask_jvm(pid, now, true);
            }
        }
    }

    /// Opens the kernel counters of a new session's `targets`, within the daemon's share of
    /// descriptors for counters.
    fn open_kernel_counters(&mut self, targets: &[Target]) -> SessionCounters {
        let fds_left = self
            .config
            .max_kernel_counter_fds
            .saturating_sub(self.kernel_counter_fds());
        let opened = SessionCounters::open(
            targets.iter().map(|t| (t.pid, t.command.as_str())),
            &self.kernel_support,
            fds_left,
        );
        let failed = opened.failed() as u64;
        self.counters.kernel_counters_failed += failed;
        self.counters.kernel_counters_opened += targets.len() as u64 - failed;
        opened
    }

    /// Descriptors the sessions' kernel counters hold.
    pub(super) fn kernel_counter_fds(&self) -> usize {
        self.sessions
            .values()
            .filter_map(|s| s.kernel.as_ref())
            .map(SessionCounters::fds)
            .sum()
    }

    /// Fixes a running session's stop time and releases its kernel filters. It becomes final in
    /// [`Manager::finalize_ready`] once samples up to `stop_ns` have all been read.
    pub(super) fn begin_stop(&mut self, id: u64, reason: &str, stop_ns: u64) {
        let lost = self.sampler.lost().ok();
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        if session.state != State::Running {
            return;
        }
        let update = update_cpu(session, Some(read_host_cpu()), true);
        self.counters.pid_reuses += update.reused;
        let exited: Vec<u32> = session
            .targets
            .iter()
            .filter(|t| t.exited)
            .map(|t| t.pid)
            .collect();
        // Losses are counted in the kernel when they happen; read them before the release below
        // clears the counters of a period nobody samples at any more.
        if let Some(lost) = &lost {
            refresh_lost(session, lost);
            off_cpu::refresh_off_cpu(session, lost);
        }
        if let Some(kernel) = &mut session.kernel {
            kernel.freeze_all();
        }
        if let Some(hotspot) = &mut session.hotspot {
            // A JVM that mapped its file since the last look still has its statistics.
            if hotspot.missing() {
                count_perf_data(&mut self.counters, hotspot.look_again());
            }
            hotspot.freeze_all();
        }
        self.end_counts(id);
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        session.state = State::Stopping;
        session.stop_ns = Some(stop_ns);
        session.stop_reason = Some(reason.to_owned());
        tracing::info!(id, reason, samples = session.total, "session stopping");
        let held = request::SessionSpec {
            pids: session.held_pids(),
            ..session.spec.clone()
        };
        // Before the release: the last off-CPU session's forgets the threads the kernel follows.
        self.count_still_blocked(id, stop_ns, sys::monotonic_ns());
        self.routes.release(self.sampler.as_mut(), &held);
        self.reader
            .flush_at(stop_ns + self.config.stop_slack.as_nanos() as u64);
        // Targets that exited are read one last time now: their maps are complete.
        let now = sys::monotonic_ns();
        for &pid in &exited {
            self.codemaps.exited(pid);
            self.advance_code_maps(pid, now);
        }
        // Live HotSpot targets write their perf map once more: the stop waits for it.
        if self.jvm_attach(id) {
            let live: Vec<u32> = self.sessions[&id]
                .targets
                .iter()
                .map(|t| t.pid)
                .filter(|pid| !exited.contains(pid) && self.jvms.is_jvm(*pid))
                .collect();
            for pid in live {
                self.ask_jvm(pid, now, true);
            }
        }
    }

    pub(super) fn finalize_ready(&mut self, now_ns: u64) {
        let slack = self.config.stop_slack.as_nanos() as u64;
        let timeout = self.config.stop_timeout.as_nanos() as u64;
        let system_wide_wait = self.config.system_wide_code_map_wait.as_nanos() as u64;
        let ready: Vec<(u64, Finish)> = self
            .sessions
            .values()
            .filter(|s| s.state == State::Stopping)
            .filter_map(|s| {
                let stop = s.stop_ns?;
                let drained = self.watermark_ns >= stop + slack;
                // A target's files being read (its perf map rewritten for the stop, its last
                // read after exit) are waited for, as long as the stop's timeout allows.
                // So is a VM's publication of its statistics still open and behind the stop (the
                // last GC's end may be on its way), and for an off-CPU session the reads of a
                // JVM's collections, every 10 ms.
                let asking_jvm = s.targets.iter().any(|t| {
                    self.jvms.in_flight(t.pid)
                        || self.codemaps.reading(t.pid)
                        || (self.vms.get(t.pid).is_some_and(VmState::has_statistics)
                            && self
                                .codemaps
                                .publishing_until(t.pid)
                                .is_some_and(|until| until < stop))
                }) || self.waits_for_gc_reads(s.id);
                if drained && s.waiting == 0 && !asking_jvm {
                    Some((s.id, Finish::Whole))
                } else if drained && s.spec.system_wide && now_ns >= stop + system_wide_wait {
                    Some((s.id, Finish::WithoutCodeMaps))
                } else if now_ns >= stop + timeout {
                    Some((
                        s.id,
                        if drained {
                            Finish::WithoutCodeMaps
                        } else {
                            Finish::Undrained
                        },
                    ))
                } else {
                    None
                }
            })
            .collect();
        if ready.is_empty() {
            // The flush served may have been an earlier one (another stop's, the module
            // sweep's), which a stop's request gave way to: ask again, or a quiet ring would
            // hold the stop until its timeout.
            self.request_stop_flushes();
            return;
        }
        for &(id, finish) in &ready {
            if finish != Finish::Whole {
                self.attribute_waiting(id, now_ns);
            }
            if finish == Finish::Undrained {
                self.counters.stop_timeouts += 1;
                let reason = format!(
                    "the kernel's ring buffer was not read past the stop time within {:.1} s \
                     (the daemon was starved of CPU?): samples taken just before the stop are \
                     missing",
                    self.config.stop_timeout.as_secs_f64()
                );
                tracing::warn!(id, "session stopped incomplete: {reason}");
                if let Some(session) = self.sessions.get_mut(&id) {
                    session.incomplete = Some(reason);
                }
            }
            let Some(session) = self.sessions.get_mut(&id) else {
                continue;
            };
            session.state = State::Stopped;
            // Its samples waiting for a later perf map settle with what is known now, and its
            // blocks waiting for their JVM's collections with the reads so far.
            self.codemaps.session_final(
                id,
                &mut SessionSink {
                    sessions: &mut self.sessions,
                    vms: &mut self.vms,
                    labels_unknown: &mut self.counters.labels_unknown,
                },
            );
            self.place_gc_waits(Some(id));
            self.unwatch_gcs(id);
            let Some(session) = self.sessions.get_mut(&id) else {
                continue;
            };
            for channel in session.spec.channels() {
                if let Some(ids) = self.by_period.get_mut(&channel) {
                    ids.retain(|&other| other != id);
                    if ids.is_empty() {
                        self.by_period.remove(&channel);
                    }
                }
            }
            let reply = session.info(now_ns);
            tracing::info!(id, samples = session.total, "session stopped");
            for waiter in self.stop_waiters.remove(&id).unwrap_or_default() {
                let _ = waiter.send(Ok(reply.clone()));
            }
        }
        self.request_stop_flushes();
        self.hand_over_windows();
        self.reader.set_active(!self.by_period.is_empty());
        self.evict();
    }

    /// Asks the reader for a batch past each stopping session's stop time. The reader keeps
    /// only the earliest request and serves it first, so this is asked again after every batch
    /// while a stop waits.
    fn request_stop_flushes(&self) {
        let slack = self.config.stop_slack.as_nanos() as u64;
        for session in self.sessions.values() {
            if let (State::Stopping, Some(stop)) = (session.state, session.stop_ns) {
                self.reader.flush_at(stop + slack);
            }
        }
    }

    /// Attributes a stopping session's samples that still wait for code maps with what is
    /// known now; they are counted as attributed before their code map caught up. Samples
    /// taken after its stop (other sessions') keep waiting.
    fn attribute_waiting(&mut self, id: u64, now_ns: u64) {
        let Some(session) = self.sessions.get(&id) else {
            return;
        };
        let stop_ns = session.stop_ns.unwrap_or(now_ns);
        let waiting = self.codemaps.waiting();
        let pids: Vec<u32> = if session.spec.system_wide {
            waiting
        } else {
            session
                .targets
                .iter()
                .map(|t| t.pid)
                .filter(|p| waiting.contains(p))
                .collect()
        };
        for pid in pids {
            self.advance_code_maps_with(pid, now_ns, Some(stop_ns));
        }
    }

    /// Keeps each user's most recent stopped sessions, and those whose final profile was not
    /// taken yet (for a while).
    fn evict(&mut self) {
        let now = sys::monotonic_ns();
        let mut kept: HashMap<u32, usize> = HashMap::new();
        let mut evict = Vec::new();
        for session in self.sessions.values().rev() {
            if session.state != State::Stopped {
                continue;
            }
            let count = kept.entry(session.owner_uid).or_insert(0);
            *count += 1;
            if *count > self.config.max_stopped_per_user && !self.protected(session, now) {
                evict.push(session.id);
            }
        }
        for id in evict {
            self.sessions.remove(&id);
            self.counters.sessions_evicted += 1;
        }
    }

    /// Whether a stopped session is kept whatever the count: its final profile was not taken,
    /// and it stopped less than `unfetched_kept_for` ago.
    fn protected(&self, session: &Session, now_ns: u64) -> bool {
        session.state == State::Stopped
            && !session.fetched
            && session.stop_ns.is_some_and(|stop| {
                now_ns.saturating_sub(stop) < self.config.unfetched_kept_for.as_nanos() as u64
            })
    }

    /// The earliest CLOCK_MONOTONIC time at which a running session's duration elapses.
    pub(super) fn next_deadline(&self) -> Option<u64> {
        self.running()
            .filter_map(|s| Some(s.start_ns + s.spec.duration?.as_nanos() as u64))
            .min()
    }

    /// Stops the sessions whose duration elapsed, exactly at their end.
    pub(super) fn end_elapsed(&mut self) {
        let now = sys::monotonic_ns();
        let elapsed: Vec<(u64, u64)> = self
            .running()
            .filter_map(|s| {
                let end = s.start_ns + s.spec.duration?.as_nanos() as u64;
                (end <= now).then_some((s.id, end))
            })
            .collect();
        for (id, end) in elapsed {
            // A continuous window's successor starts first: it holds the kernel's events
            // before the elapsed window releases them, so they are never closed in between.
            let window = self.is_window(id);
            if window {
                self.window_elapsed(id, end);
            }
            self.begin_stop(
                id,
                if window {
                    windows::WINDOW_ENDED
                } else {
                    "duration elapsed"
                },
                end,
            );
        }
        self.finalize_ready(now);
    }
}

/// The stop reason to record for a client's stop request.
pub(super) fn stop_reason(requested: &str) -> String {
    let requested = requested.trim();
    if requested.is_empty() {
        return "stopped by client".to_owned();
    }
    // Control characters would garble reports and logs.
    requested
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_STOP_REASON_CHARS)
        .collect()
}

/// How a stopping session comes to its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Finish {
    /// Every sample read, every sample in generated code attributed when its maps were known.
    Whole,
    /// Every sample read; those still waiting for code maps are attributed with what is known.
    WithoutCodeMaps,
    /// The reader did not pass the stop time in time: the last samples are missing.
    Undrained,
}
