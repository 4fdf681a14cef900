//! A batch of events from the ring buffer: each sample routed to the sessions that want it,
//! its frames built (kernel, user by frame pointers or unwound from a copy, generated code),
//! and counted, or held until its code map is known.

use super::*;
use crate::unwind::JavaName;

impl Manager {
    pub(super) fn ingest(&mut self, batch: Batch) {
        self.counters.batches += 1;
        self.unwinder.begin_batch(&mut self.process_memory);
        self.counters.events += batch.events.len() as u64;
        self.counters.malformed_events += batch.malformed;
        // The mappings made up to now, before the batch's samples and exec events look for them.
        self.read_mapping_records();
        // Sessions whose duration elapsed stop first: a batch's samples past the end of a
        // continuous window then find its successor, not nothing.
        if self
            .next_deadline()
            .is_some_and(|deadline| deadline <= sys::monotonic_ns())
        {
            self.end_elapsed();
        }
        let now = batch.watermark_ns;
        for (i, event) in batch.events.iter().enumerate() {
            match event.kind {
                EVENT_SAMPLE => {
                    let (kernel, user) = batch.stack(i);
                    self.route(event, kernel, user, batch.user_copy(i), now)
                }
                EVENT_OFF_CPU => {
                    let (kernel, user) = batch.stack(i);
                    self.route_block(event, kernel, user, batch.user_copy(i), now)
                }
                EVENT_EXEC => self.exec(event),
                EVENT_RENAME => self.rename(event),
                EVENT_EXIT => self.exit(event),
                _ => self.counters.unknown_events += 1,
            }
        }
        self.watermark_ns = self.watermark_ns.max(batch.watermark_ns);
        // After the batch's exec events, which check their processes first.
        self.check_changed_creds();
        let now = sys::monotonic_ns();
        // Processes whose samples only wait for their perf map to change are read on the
        // tick: a batch comes every few milliseconds, and under process churn they would
        // be revisited, each, at every one.
        for pid in self.codemaps.counting() {
            self.advance_code_maps(pid, now);
        }
        self.apply_thread_counters();
        self.finalize_ready(now);
    }

    /// Hands the kernel's mapping records read since the last call to the process table.
    pub(super) fn read_mapping_records(&mut self) {
        if let Some(events) = &mut self.mmap_events {
            let records = events.drain();
            self.processes.record(records, sys::monotonic_ns());
        }
    }

    /// Counts a sample in the sessions that want it: its stack (leaf first) for those that
    /// asked for stacks, its leaf alone for the others. A sample with a frame in anonymous
    /// executable memory waits for its process's code maps to be known up to its time.
    fn route(
        &mut self,
        event: &Event,
        kernel: &[u64],
        user: &[u64],
        copy: Option<UserCopy<'_>>,
        now_ns: u64,
    ) {
        // Whether a session that wants it keeps samples one by one (placements serve none).
        let mut kept_one_by_one = false;
        let wanting: Vec<(u64, Wanted)> = self
            .by_period
            .get(&event.period_ns)
            .into_iter()
            .flatten()
            .filter_map(|id| {
                let session = self.sessions.get(id)?;
                // A target session counts only what the kernel kept for target sessions: not a
                // sample taken for system-wide ones of a process whose guard refused it.
                let wants = session.wants(event.tgid, event.timestamp_ns)
                    && (session.spec.system_wide || event.flags & FLAG_TARGET != 0);
                kept_one_by_one |= wants && session.keeps_samples();
                wants.then_some((*id, session.spec.call_graph.wanted()))
            })
            .collect();
        if wanting.is_empty() {
            self.counters.samples_unrouted += 1;
            return;
        }
        self.counters.samples_routed += 1;
        let pid = event.tgid;
        // A sample stamped after the known process under its pid ended is another's.
        self.processes.sampled(pid, event.timestamp_ns, now_ns);
        let task = Task::new(pid, event.tid);
        for (id, _) in &wanting {
            if let Some(session) = self.sessions.get_mut(id) {
                session.total += 1;
            }
        }
        // In the order the thread's samples come (the ring keeps it), whenever each is
        // counted: a sample parked for its code map is counted after later ones.
        let sends: Vec<u64> = if event.flags & FLAG_COUNT != 0 {
            self.counters.samples_with_sends += 1;
            wanting
                .iter()
                .map(|(id, _)| {
                    let session = self.sessions.get_mut(id)?;
                    let sends = session.sends_since(task, event.count, event.timestamp_ns);
                    if sends.is_none() {
                        self.counters.sends_implausible += 1;
                    }
                    sends
                })
                .map(|sends| sends.unwrap_or(0))
                .collect()
        } else {
            Vec::new()
        };
        let labels = if event.flags & FLAG_LABELS != 0 {
            self.counters.samples_with_labels += 1;
            event.labels
        } else {
            0
        };
        self.note_names(&wanting, task, now_ns);
        let whole = wanting.iter().any(|&(_, w)| w != Wanted::Leaf);
        let fp_too = wanting.iter().any(|&(_, w)| w == Wanted::FramePointers);
        // A stack the kernel walked, of a process whose samples need nothing of their time,
        // for sessions that keep no samples one by one: placed as before if seen before.
        let placeable = copy.is_none() && !kept_one_by_one && !self.vms.holds(pid) && labels == 0;
        let generation = if placeable {
            self.placements.note(event, kernel, user, whole);
            self.processes.placed_generation(pid, now_ns)
        } else {
            None
        };
        if let Some(generation) = generation
            && let Some(placement) = self.placements.find(pid, generation)
        {
            self.counters.stacks_placed_before += 1;
            count_stack_flags(&mut self.counters, event, whole);
            for (i, &(id, wanted)) in wanting.iter().enumerate() {
                if let Some(session) = self.sessions.get_mut(&id) {
                    session.count_placed(
                        task,
                        placement.id,
                        wanted == Wanted::Leaf,
                        &placement.locations,
                        placement.end,
                        sends.get(i).copied().unwrap_or(0),
                    );
                }
            }
            return;
        }
        let unwound = copy.is_some();
        let (mut frames, mut end, mut fp) =
            self.frames_of(event, kernel, user, copy, (whole, fp_too), now_ns);
        // Past Java code compiled without frame pointers, a frame-pointer walk reads garbage;
        // a stack unwound from its copy by the JVM's own frame layout does not.
        if whole && self.jvms.cuts_stacks(pid) {
            if !(unwound && self.unwinder.follows_java(pid)) {
                end_at_generated_code(&mut frames, &mut end);
            }
            if let Some((fp, fp_end)) = &mut fp {
                end_at_generated_code(fp, fp_end);
            }
        }
        let routed = RoutedSample {
            tid: event.tid,
            kernel: event.is_kernel(),
            end,
            frames,
            fp,
            sessions: wanting,
            sends,
            labels,
            block: None,
        };
        self.count_or_park(pid, event.timestamp_ns, routed, generation, now_ns);
    }

    /// Each session of `wanting` names the process and the thread of `task` from its first
    /// sample or block on (the thread as long as it has room); a name is read once for all.
    pub(super) fn note_names(&mut self, wanting: &[(u64, Wanted)], task: Task, now_ns: u64) {
        let pid = task.pid;
        let mut thread_name: Option<String> = None;
        for (id, _) in wanting {
            if let Some(session) = self.sessions.get_mut(id) {
                if let std::collections::hash_map::Entry::Vacant(name) = session.commands.entry(pid)
                {
                    let process = self.processes.observe(pid, now_ns);
                    name.insert(process.command.clone());
                    if let Some(executable) = &process.executable {
                        session
                            .executables
                            .insert(pid, executable.to_string_lossy().into_owned());
                    }
                }
                if session.thread_names.len() < MAX_THREAD_NAMES
                    && !session.thread_names.contains_key(&task)
                {
                    let name = thread_name
                        .get_or_insert_with(|| match self.thread_renames.get(task) {
                            Some(name) => name.clone(),
                            None => {
                                self.counters.thread_names_read += 1;
                                name_thread(&mut self.processes, task, now_ns)
                            }
                        })
                        .clone();
                    session.thread_names.insert(task, name);
                }
            }
        }
    }

    /// Counts a routed sample (or block) of `pid` taken at `timestamp_ns` in its sessions now,
    /// or parks it in its process's timeline until its code maps (and its VM's intervals) are
    /// known up to its time. A stack placed against mappings of `generation` is kept for the
    /// next samples of the same raw stack.
    pub(super) fn count_or_park(
        &mut self,
        pid: u32,
        timestamp_ns: u64,
        mut routed: RoutedSample,
        generation: Option<u64>,
        now_ns: u64,
    ) {
        let first_generated = routed.frames_mut().find(|f| f.is_generated()).copied();
        // A VM whose publication stream is open publishes even before its first statistics
        // are applied (they wait in its timeline): its native samples wait for them too, or a
        // sample in its first collections would be counted before the collection's begin.
        let publishes = self.vms.holds(pid)
            || self.codemaps.publishing_until(pid).is_some()
            || self.processes.get(pid).is_some_and(|p| {
                self.codemaps
                    .maps_unread_code_map_file(pid, &p.code_map_files)
            });
        if first_generated.is_none() && !publishes {
            let gc_read = routed.block.is_some() && self.vms.gcs.reads(pid);
            let labels = self.vms.labels(pid, routed.labels);
            if labels.is_none() && routed.labels != 0 {
                self.counters.labels_unknown += 1;
            }
            count_routed(
                &mut self.sessions,
                pid,
                timestamp_ns,
                &routed,
                SampleTags {
                    during: None,
                    labels,
                },
                &|_, _| Vec::new(),
                gc_read,
                |_| {},
            );
            // Placed against the mappings it was looked up in: not if they were read again
            // meanwhile.
            if let Some(generation) = generation
                && self.processes.placed_generation(pid, now_ns) == Some(generation)
            {
                self.placements
                    .keep(pid, generation, &routed.frames, routed.end);
            }
            return;
        }
        // Generated code is attributed once the code maps are known up to its time (its
        // binaries stay open meanwhile: see `CodeMaps::waiting_modules`); any sample of a VM
        // that publishes, once its intervals are.
        let ip = first_generated.map_or(0, |f| f.lookup);
        for (id, _) in &routed.sessions {
            if let Some(session) = self.sessions.get_mut(id) {
                session.waiting += 1;
            }
        }
        self.codemaps.push_sample(
            pid,
            PendingSample {
                timestamp_ns,
                ip,
                payload: routed,
            },
        );
    }

    /// The frames of a sample, leaf first: the leaf alone unless `whole`, else the kernel
    /// frames (when the tick landed in the kernel) then the user frames
    /// ([`Manager::user_frames_of`]), each placed in its process now, while its mappings are
    /// known. Returns how the walk ended, and, when the user stack was unwound from a copy and
    /// `fp_too` (a session on the target asked for frame pointers), the frame-pointer stack
    /// too. Never empty: the leaf comes first whatever the stacks say.
    pub(super) fn frames_of(
        &mut self,
        event: &Event,
        kernel: &[u64],
        user_fp: &[u64],
        copy: Option<UserCopy<'_>>,
        (whole, fp_too): (bool, bool),
        now_ns: u64,
    ) -> (Vec<SampleFrame>, StackEnd, FpStack) {
        let pid = event.tgid;
        let stacked = whole && event.flags & FLAG_STACK != 0;
        let mut frames = Vec::with_capacity(if stacked {
            1 + kernel.len() + user_fp.len().max(1)
        } else {
            1
        });
        // The leaf is the interrupted instruction, whatever the walkers found.
        let kernel_frames = if stacked && event.is_kernel() {
            kernel
        } else {
            &[]
        };
        if event.is_kernel() {
            let kernel_frame = |address, lookup| SampleFrame {
                location: Location::Kernel { ip: lookup },
                address,
                lookup,
                code_start: 0,
            };
            frames.push(kernel_frame(event.ip, event.ip));
            // Callers hold return addresses: the call is the instruction before.
            for &address in kernel_frames.iter().skip(1) {
                frames.push(kernel_frame(address, address.saturating_sub(1)));
            }
        }
        if !stacked {
            if !event.is_kernel() {
                frames.push(self.user_frame(pid, event.ip, event.ip, now_ns));
            }
            return (frames, StackEnd::FramePointerChainEnded, None);
        }
        count_stack_flags(&mut self.counters, event, whole);
        let mut end = StackEnd::FramePointerChainEnded;
        if event.flags & (FLAG_KERNEL_TRUNCATED | FLAG_USER_TRUNCATED) != 0 {
            end = StackEnd::FrameLimit;
        }
        if let Some(copy) = &copy {
            self.counters.user_copies += 1;
            self.counters.user_copy_bytes += copy.stack.len() as u64;
            if copy.faulted {
                self.counters.user_copies_faulted += 1;
            }
        }
        let mut unwound = std::mem::take(&mut self.user_scratch);
        unwound.clear();
        let unwound_from_copy = copy.is_some();
        let dwarf_end = self.user_frames_of(event, user_fp, copy, now_ns, &mut unwound);
        // Sessions asking for frame-pointer stacks get the kernel's walk as it came, even when
        // another session on the target had the stack copied and unwound; but a JVM's stack
        // is copied for them too, and its unwound Java frames are what they get.
        let fp = (unwound_from_copy && fp_too && !self.unwinder.follows_java(pid)).then(|| {
            let mut fp_frames = frames.clone();
            let mut fp_end = end;
            if self.push_user_frames(pid, event, user_fp, &mut fp_frames, now_ns) {
                fp_end = StackEnd::Unmapped;
            }
            (fp_frames, fp_end)
        });
        if let Some(mut dwarf_end) = dwarf_end {
            // A return address the unwinder could not place may be new code (CPython maps its
            // trampolines as it goes): with the mappings read again, the unwind is done again,
            // since how a frame is stepped depends on what holds its address.
            let stray = unwound
                .iter()
                .skip(1)
                .find(|&&a| a != 0 && a < KERNEL_SPACE && !self.processes.maps_address(pid, a - 1));
            if let Some(&stray) = stray
                && self.processes.refresh_for_caller(pid, stray - 1, now_ns)
                && let Some(again) = self.user_frames_of(event, user_fp, copy, now_ns, &mut unwound)
            {
                dwarf_end = again;
            }
            end = dwarf_end;
        }
        let user_start = frames.len();
        if self.push_user_frames(pid, event, &unwound, &mut frames, now_ns) {
            end = StackEnd::Unmapped;
        }
        if unwound_from_copy {
            self.name_java_frames(pid, &unwound, &mut frames[user_start..]);
            // Counted as the profile says it ended: a walk framehop ended otherwise may show
            // an address outside every mapping last.
            self.unwinder.count_end(end);
        }
        self.user_scratch = unwound;
        (frames, end, fp)
    }

    /// Names the Java frames the unwinder found in `unwound` by the JVM's structures (the
    /// interpreted ones by their methods, the compiled ones by their nmethods' methods and
    /// scopes): `user` are the frames `unwound` became, in the same order.
    fn name_java_frames(&mut self, pid: u32, unwound: &[u64], user: &mut [SampleFrame]) {
        for java in self.unwinder.java_frames() {
            let Some(frame) = user.get_mut(java.index) else {
                continue;
            };
            if unwound.get(java.index) != Some(&frame.address) {
                continue;
            }
            let offset = match &java.name {
                JavaName::Interpreted { bci, .. } => bci.map_or(0, u64::from),
                JavaName::Compiled(compiled) => frame.lookup.saturating_sub(compiled.code_begin),
                JavaName::Stub(_) => 0,
            };
            let code = self
                .java_codes
                .code(self.codemaps.store(), pid, java.owner, &java.name);
            let Some(code) = code else {
                self.counters.java_frames_refused += 1;
                continue;
            };
            self.counters.java_frames_named += 1;
            frame.location = Location::Jit {
                code,
                offset,
                later_snapshot: false,
            };
        }
    }

    /// Places a user stack (leaf first, as [`Manager::user_frames_of`] gives it) after the
    /// kernel frames in `frames`. Answers whether it ended at an address outside every mapping.
    fn push_user_frames(
        &mut self,
        pid: u32,
        event: &Event,
        addresses: &[u64],
        frames: &mut Vec<SampleFrame>,
        now_ns: u64,
    ) -> bool {
        // The user stack's first entry is where user code was interrupted (the leaf itself in
        // user mode, the instruction after the system call in kernel mode): looked up as is.
        let mut user = addresses.iter().copied().enumerate();
        if !event.is_kernel() {
            frames.push(self.user_frame(pid, event.ip, event.ip, now_ns));
            // The walker starts at the same instruction pointer.
            if user.clone().next().is_some_and(|(_, ip)| ip == event.ip) {
                user.next();
            }
        }
        for (i, address) in user {
            // A zero or kernel address ends a walk that went astray.
            if address == 0 || address >= KERNEL_SPACE {
                break;
            }
            let lookup = if i == 0 { address } else { address - 1 };
            let frame = self.user_frame(pid, address, lookup, now_ns);
            let unmapped = matches!(frame.location, Location::Unmapped(_));
            frames.push(frame);
            // Past code built without frame pointers, the walker reads whatever the frame
            // pointer register held: an address outside every mapping ends the stack there
            // (shown as one unknown frame) rather than adding the garbage after it.
            if unmapped {
                self.counters.stack_frames_unmapped += 1;
                return true;
            }
        }
        false
    }

    /// The user stack of a sample into `out`, leaf first: the user instruction pointer (where
    /// user code was interrupted, or will resume after the system call when the tick landed in
    /// the kernel), then return addresses.
    ///
    /// A sample with a [`UserCopy`] (`--call-graph dwarf`) is unwound here from its registers
    /// and stack copy ([`Unwinder`]): DWARF CFI for binaries, frame pointers for JIT code, the
    /// CPython trampoline rule; the answer says how that walk ended. Other samples get the
    /// kernel's frame-pointer walk as it came (`None`: the caller judges how it ended). A
    /// process that can no longer be read has no mappings left: its copy is walked by frame
    /// pointers alone, and says how far that got.
    fn user_frames_of(
        &mut self,
        event: &Event,
        user_fp: &[u64],
        copy: Option<UserCopy<'_>>,
        now_ns: u64,
        out: &mut Vec<u64>,
    ) -> Option<StackEnd> {
        let Some(copy) = copy else {
            out.extend_from_slice(user_fp);
            return None;
        };
        let process = self.processes.observe(event.tgid, now_ns);
        let end = self.unwinder.unwind(
            process,
            UserRegs {
                ip: copy.ip,
                sp: copy.sp,
                bp: copy.bp,
            },
            StackCopy {
                sp: copy.sp,
                bytes: copy.stack,
                faulted: copy.faulted,
                taken_ns: event.timestamp_ns,
            },
            &mut self.process_memory,
            out,
        );
        Some(end)
    }

    /// A user-space frame of `pid` at `address`, placed by `lookup` (the address itself, or a
    /// return address minus one).
    fn user_frame(&mut self, pid: u32, address: u64, lookup: u64, now_ns: u64) -> SampleFrame {
        let location = if address == lookup {
            self.processes.normalize(pid, lookup, now_ns)
        } else {
            self.processes.normalize_caller(pid, lookup, now_ns)
        };
        SampleFrame {
            location,
            address,
            lookup,
            code_start: 0,
        }
    }
}

/// Counts what the kernel's flags say of a sample's stacks, when sessions take them
/// (`whole`): a user stack not walked, stacks cut at the depth limit.
fn count_stack_flags(counters: &mut Counters, event: &Event, whole: bool) {
    if !whole || event.flags & FLAG_STACK == 0 {
        return;
    }
    if event.flags & FLAG_USER_STACK_FAILED != 0 {
        counters.user_stacks_failed += 1;
    }
    if event.flags & (FLAG_KERNEL_TRUNCATED | FLAG_USER_TRUNCATED) != 0 {
        counters.stacks_truncated += 1;
    }
}

/// Counts a routed sample of `pid`, its frames placed, in each of its sessions: the whole stack
/// for those that want stacks, the leaf for the others. Kept where a session keeps samples.
/// A block is counted for each session's share of its time, with its time inside each kind of
/// its VM's intervals (`overlaps` of a span); with `gc_read`, its process is a JVM whose
/// collections are read as they come, and the block's time inside them is placed once the reads
/// pass its end ([`Session::wait_for_gcs`]). `counted` is told where, in each session (samples
/// in native code need not know: they allocate nothing for it).
#[allow(clippy::too_many_arguments)]
fn count_routed(
    sessions: &mut BTreeMap<u64, Session>,
    pid: u32,
    timestamp_ns: u64,
    sample: &RoutedSample,
    tags: SampleTags<'_>,
    overlaps: &dyn Fn(u64, u64) -> Vec<(IntervalKind, u64)>,
    gc_read: bool,
    mut counted: impl FnMut(Counted),
) {
    for (i, &(id, wanted)) in sample.sessions.iter().enumerate() {
        let Some(session) = sessions.get_mut(&id) else {
            continue;
        };
        let sends = sample.sends.get(i).copied().unwrap_or(0);
        let (frames, end) = sample.stack_for(wanted);
        let locations = frames.iter().map(|f| f.location);
        let task = Task::new(pid, sample.tid);
        if let Some(block) = sample.block {
            let (from, to) = session.block_share(pid, block.begin_ns, block.end_ns);
            if to <= from {
                continue;
            }
            let ns = to - from;
            let stack = session.count_block(
                task,
                locations,
                end,
                tags.during,
                block.state,
                ns,
                overlaps(from, to),
            );
            if gc_read {
                session.wait_for_gcs(task, from, to);
            }
            counted(Counted {
                session: id,
                tid: sample.tid,
                wanted,
                stack: stack.0,
                kept: None,
                block: Some((block.state, ns)),
                sends: 0,
            });
            continue;
        }
        let (stack, kept) = session.count(task, locations, end, tags, sends, |stack| KeptSample {
            timestamp_ns,
            pid,
            tid: sample.tid,
            kernel: sample.kernel,
            stack,
            frames: kept_frames(frames),
        });
        counted(Counted {
            session: id,
            tid: sample.tid,
            wanted,
            stack: stack.0,
            kept: kept.map(|k| k as u32),
            block: None,
            sends,
        });
    }
}

/// The name of a sampled thread: its process's command for the main thread (read with the
/// process), else `/proc/PID/task/TID/comm`; empty once the thread is gone.
fn name_thread(processes: &mut ProcessTable, task: Task, now_ns: u64) -> String {
    if task.tid == task.pid {
        return processes.observe(task.pid, now_ns).command.clone();
    }
    sys::thread_name(task.pid, task.tid).unwrap_or_default()
}

fn kept_frames(frames: &[SampleFrame]) -> Box<[KeptFrame]> {
    frames
        .iter()
        .map(|f| KeptFrame {
            address: f.address,
            code_start: f.code_start,
        })
        .collect()
}

/// The sessions, as the code maps see them: where samples in generated code are counted once
/// placed, and moved when their attribution changes; and the VMs' statistics, which files
/// bring beside code maps.
pub(super) struct SessionSink<'a> {
    pub(super) sessions: &'a mut BTreeMap<u64, Session>,
    pub(super) vms: &'a mut Vms,
    /// Samples whose label set id their process never published (counted unlabelled).
    pub(super) labels_unknown: &'a mut u64,
}

impl Sink for SessionSink<'_> {
    fn count(
        &mut self,
        pid: u32,
        timestamp_ns: u64,
        sample: &RoutedSample,
        provisional: bool,
    ) -> Vec<Counted> {
        for (id, _) in &sample.sessions {
            if let Some(session) = self.sessions.get_mut(id) {
                session.waiting = session.waiting.saturating_sub(1);
                if provisional {
                    session.jit.provisional += 1;
                    session.jit.awaiting += 1;
                }
            }
        }
        // Where the sample was counted, for the code maps to move it if it is placed again.
        let mut counted = Vec::with_capacity(sample.sessions.len());
        let vms = &*self.vms;
        // A block is tagged with the intervals under way as it ended: it counts its time
        // inside each apart.
        let during = vms.during(pid, timestamp_ns);
        let labels = vms.labels(pid, sample.labels);
        if labels.is_none() && sample.labels != 0 {
            *self.labels_unknown += 1;
        }
        let gc_read = sample.block.is_some() && vms.gcs.reads(pid);
        count_routed(
            self.sessions,
            pid,
            timestamp_ns,
            sample,
            SampleTags { during, labels },
            &|from, to| vms.overlaps(pid, from, to),
            gc_read,
            |c| counted.push(c),
        );
        counted
    }

    fn statistics(&mut self, pid: u32, stats: Vec<(u64, StatEvent)>) {
        self.vms.apply(pid, stats, self.sessions);
    }

    fn recount(
        &mut self,
        pid: u32,
        has_fp: bool,
        placed: &[(ParkedFrame, Placement)],
        counted: &mut [Counted],
        why: Recount,
    ) {
        for c in counted {
            let Some(session) = self.sessions.get_mut(&c.session) else {
                continue;
            };
            match why {
                Recount::Expired => {
                    session.jit.awaiting = session.jit.awaiting.saturating_sub(1);
                    continue;
                }
                Recount::CaughtUp => {
                    session.jit.awaiting = session.jit.awaiting.saturating_sub(1);
                    session.jit.provisional = session.jit.provisional.saturating_sub(1);
                    session.jit.caught_up += 1;
                }
                Recount::LaterSnapshot => session.jit.later_snapshot += 1,
            }
            // The stack as counted, its frames in generated code placed anew.
            let from = StackId(c.stack);
            let mut locations = session.stacks.locations_of(from);
            let mut moved: Vec<(usize, u64)> = Vec::new();
            for (frame, placement) in placed {
                if let Some(index) = c.counts(frame, has_fp)
                    && let Some(location) = locations.get_mut(index)
                {
                    let now = placement.apply(*location);
                    if now != *location {
                        *location = now;
                        moved.push((index, placement.code_start()));
                    }
                }
            }
            if moved.is_empty() {
                continue;
            }
            if let Some((state, ns)) = c.block {
                let to = session.recount_block(Task::new(pid, c.tid), from, locations, state, ns);
                c.stack = to.0;
                continue;
            }
            let kept = c.kept.map(|k| k as usize);
            let (task, sends) = (Task::new(pid, c.tid), c.sends);
            let to = session.recount(task, from, locations, kept, sends, |sample| {
                for &(index, code_start) in &moved {
                    if let Some(kept) = sample.frames.get_mut(index) {
                        kept.code_start = code_start;
                    }
                }
            });
            c.stack = to.0;
        }
    }

    fn takes_snapshots(&self, session: u64) -> bool {
        self.sessions
            .get(&session)
            .is_some_and(|s| s.state != State::Stopped)
    }
}

/// Ends a stack at its first frame in generated code: a JIT that keeps no frame pointer
/// (HotSpot without -XX:+PreserveFramePointer) leaves nothing a walk can trust beyond, and
/// the stack says why it ends there.
pub(super) fn end_at_generated_code(frames: &mut Vec<SampleFrame>, end: &mut StackEnd) {
    if let Some(first) = frames.iter().position(SampleFrame::is_generated) {
        frames.truncate(first + 1);
        *end = StackEnd::JitWithoutFramePointer;
    }
}
