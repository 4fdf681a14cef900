//! Time off the CPU (`--mode off-cpu` and `wall`): each block the kernel reports routed to the
//! sessions whose window it overlaps, each counting its own share of the time with the stacks
//! the thread blocked in; the threads of a new session's targets noted as off their CPU (one
//! asleep at the start would never be seen leaving, and its wait would be lost); the threads
//! still off their CPU at a stop counted up to it; and the kernel's counts of what it left out
//! (blocks under the minimum, blocks lost, threads it could not follow), per session.

use vmscope_common::{
    BLOCK_IDLE, BLOCK_OTHER, BLOCK_PREEMPTED, BLOCK_SLEEPING, BLOCK_STOPPED, BLOCK_UNINTERRUPTIBLE,
    BLOCKED_NOTED, Blocked, OFF_CPU_PERIOD, OFF_CPU_UNFOLLOWED, ShortBlocks,
};
use vmscope_model::BlockState;

use super::{routing::end_at_generated_code, *};
use crate::{
    codemap::sample::RawBlock,
    session::{OffCpuTally, request::SessionSpec},
    stats::jvm_gcs::GcOverlap,
};

/// Why a thread left its CPU, from the kernel's `BLOCK_*` value (an unknown one is "other").
pub(super) fn block_state(value: u32) -> BlockState {
    match value {
        BLOCK_PREEMPTED => BlockState::Preempted,
        BLOCK_SLEEPING => BlockState::Sleeping,
        BLOCK_UNINTERRUPTIBLE => BlockState::Uninterruptible,
        BLOCK_STOPPED => BlockState::Stopped,
        BLOCK_IDLE => BlockState::Idle,
        _ => BlockState::Other,
    }
}

/// The `BLOCK_*` value of a thread's state letter in `/proc/PID/task/TID/stat`: what the
/// kernel's switch program would have noted had it seen the thread leave. `R` is a thread
/// runnable or running: one that runs is noted leaving again before it comes back.
fn state_of_letter(letter: char) -> u32 {
    match letter {
        'R' => BLOCK_PREEMPTED,
        'S' => BLOCK_SLEEPING,
        'D' => BLOCK_UNINTERRUPTIBLE,
        'T' | 't' => BLOCK_STOPPED,
        'I' => BLOCK_IDLE,
        _ => BLOCK_OTHER,
    }
}

/// The kernel's short blocks of the processes a session of `spec` watches.
fn short_blocks_for(lost: &LostCounts, spec: &SessionSpec) -> ShortBlocks {
    lost.short_blocks
        .iter()
        .filter(|(tgid, _)| spec.system_wide || spec.pids.contains(tgid))
        .fold(ShortBlocks::default(), |sum, (_, b)| ShortBlocks {
            count: sum.count + b.count,
            ns: sum.ns + b.ns,
        })
}

/// The blocks of the processes a session of `spec` watches that the kernel could not deliver.
fn lost_blocks_for(lost: &LostCounts, spec: &SessionSpec) -> u64 {
    lost_for(lost, OFF_CPU_PERIOD, spec.system_wide, &spec.pids)
        .iter()
        .sum::<u64>()
        // The unkeyed losses (exec events, a full table) are the samples' to report.
        .saturating_sub(lost.unkeyed.iter().sum::<u64>())
}

/// What a new session of `spec` starts with of time off the CPU: the kernel's counts now, which
/// its own are counted from. `None` for a CPU session.
pub(super) fn new_tally(lost: Option<&LostCounts>, spec: &SessionSpec) -> Option<OffCpuTally> {
    if !spec.mode.off_cpu() {
        return None;
    }
    let mut tally = OffCpuTally::default();
    if let Some(lost) = lost {
        let short = short_blocks_for(lost, spec);
        let blocks_lost = lost_blocks_for(lost, spec);
        let unfollowed = lost.off_cpu[OFF_CPU_UNFOLLOWED as usize];
        tally.kernel_short = (short, short);
        tally.lost = (blocks_lost, blocks_lost);
        tally.unfollowed = (unfollowed, unfollowed);
    }
    Some(tally)
}

/// Reads the kernel's counts of what it left out of a session's time off the CPU.
pub(super) fn refresh_off_cpu(session: &mut Session, lost: &LostCounts) {
    let spec = &session.spec;
    let (short, blocks_lost) = (short_blocks_for(lost, spec), lost_blocks_for(lost, spec));
    if let Some(tally) = &mut session.off_cpu {
        tally.kernel_short.1 = short;
        tally.lost.1 = blocks_lost;
        tally.unfollowed.1 = lost.off_cpu[OFF_CPU_UNFOLLOWED as usize];
    }
}

impl Manager {
    /// Counts a block off the CPU in the sessions whose window it overlaps: its stacks (taken
    /// as the thread came back) placed as a sample's are, each session's share of its time
    /// counted once its code maps are known up to its end. A session whose minimum it is under
    /// counts it as short, with no stack.
    pub(super) fn route_block(
        &mut self,
        event: &Event,
        kernel: &[u64],
        user: &[u64],
        copy: Option<UserCopy<'_>>,
        now_ns: u64,
    ) {
        let end_ns = event.timestamp_ns;
        let begin_ns = end_ns.saturating_sub(event.period_ns);
        let pid = event.tgid;
        let mut wanting: Vec<(u64, Wanted)> = Vec::new();
        for id in self.by_period.get(&OFF_CPU_PERIOD).into_iter().flatten() {
            let Some(session) = self.sessions.get_mut(id) else {
                continue;
            };
            // As for samples: a target session counts only what the kernel kept for target
            // sessions.
            if !(session.spec.system_wide || event.flags & FLAG_TARGET != 0) {
                continue;
            }
            let (from, to) = session.block_share(pid, begin_ns, end_ns);
            let stop = session.stop_ns;
            let (min_block, wanted) = (session.spec.min_block_ns, session.spec.call_graph.wanted());
            let Some(tally) = &mut session.off_cpu else {
                continue;
            };
            // Counted at the stop, the thread still off its CPU then: this is that block (its
            // earlier blocks, read after the stop, are counted as any other).
            let counted_at_stop = stop.is_some()
                && tally
                    .still_blocked_tids
                    .get(&event.tid)
                    .is_some_and(|&since| begin_ns >= since);
            if to <= from || counted_at_stop {
                continue;
            }
            if event.period_ns < min_block {
                tally.short.count += 1;
                tally.short.ns += to - from;
                continue;
            }
            wanting.push((*id, wanted));
        }
        if wanting.is_empty() {
            self.counters.blocks_unrouted += 1;
            return;
        }
        self.counters.blocks_routed += 1;
        self.processes.sampled(pid, end_ns, now_ns);
        self.note_names(&wanting, Task::new(pid, event.tid), now_ns);
        let fp_too = wanting.iter().any(|&(_, w)| w == Wanted::FramePointers);
        let (mut frames, mut end, mut fp) =
            self.frames_of(event, kernel, user, copy, (true, fp_too), now_ns);
        // Asleep since before the session: its user stack was never taken.
        if event.flags & BLOCKED_NOTED != 0 {
            let marker = SampleFrame {
                location: Location::OffCpuSinceStart,
                address: 0,
                lookup: 0,
                code_start: 0,
            };
            frames.push(marker);
            if let Some((fp, _)) = &mut fp {
                fp.push(marker);
            }
        }
        if self.jvms.cuts_stacks(pid) {
            end_at_generated_code(&mut frames, &mut end);
            if let Some((fp, fp_end)) = &mut fp {
                end_at_generated_code(fp, fp_end);
            }
        }
        let routed = RoutedSample {
            tid: event.tid,
            kernel: true,
            end,
            frames,
            fp,
            sessions: wanting,
            sends: Vec::new(),
            labels: 0,
            block: Some(RawBlock {
                begin_ns,
                end_ns,
                state: block_state(event.block_state()),
            }),
        };
        self.count_or_park(pid, end_ns, routed, None, now_ns);
    }

    /// Notes the threads of a new off-CPU session's targets (every process's, system-wide) as
    /// off their CPU since `now_ns`, in the state `/proc` gives, unless the kernel follows them
    /// already: a thread asleep since before the start is never seen leaving its CPU, and its
    /// wait up to its return would be lost. One that runs is noted leaving again before it
    /// comes back.
    pub(super) fn note_blocked_threads(&mut self, spec: &SessionSpec, now_ns: u64) {
        if !spec.mode.off_cpu() {
            return;
        }
        let pids: Vec<u32> = if spec.system_wide {
            sys::pids().unwrap_or_default()
        } else {
            spec.pids.clone()
        };
        for pid in pids {
            for thread in life::threads(pid) {
                let blocked = Blocked {
                    since_ns: now_ns,
                    tgid: pid,
                    state: state_of_letter(thread.state),
                    flags: BLOCKED_NOTED,
                    ..Blocked::default()
                };
                if self.sampler.note_blocked(thread.pid, blocked) {
                    self.counters.blocked_threads_noted += 1;
                }
            }
        }
    }

    /// Counts the threads of a stopping off-CPU session still off their CPU at `stop_ns`, up
    /// to it, under [`Location::StillOffCpu`]: their stacks come only when they return, after
    /// the session. Their blocks are then left out if they come while it is stopping. Read
    /// before the session's filters are released (the last off-CPU session's release forgets
    /// the kernel's threads).
    pub(super) fn count_still_blocked(&mut self, id: u64, stop_ns: u64, now_ns: u64) {
        if self.sessions.get(&id).is_none_or(|s| s.off_cpu.is_none()) {
            return;
        }
        let blocked = self.sampler.blocked();
        let mut named: Vec<Task> = Vec::new();
        let Some(session) = self.sessions.get_mut(&id) else {
            return;
        };
        let mut tids: HashMap<u32, u64, foldhash::fast::RandomState> = HashMap::default();
        for (tid, b) in blocked {
            if b.since_ns >= stop_ns {
                continue;
            }
            let (from, to) = session.block_share(b.tgid, b.since_ns, stop_ns);
            if to <= from {
                continue;
            }
            let task = Task::new(b.tgid, tid);
            let overlaps = self.vms.overlaps(b.tgid, from, to);
            session.count_block(
                task,
                [Location::StillOffCpu],
                None,
                None,
                block_state(b.state),
                to - from,
                overlaps,
            );
            if self.vms.gcs.reads(b.tgid) {
                session.wait_for_gcs(task, from, to);
            }
            tids.insert(tid, b.since_ns);
            named.push(task);
            if let Some(tally) = &mut session.off_cpu {
                tally.still_blocked.0 += 1;
                tally.still_blocked.1 += to - from;
            }
        }
        if let Some(tally) = &mut session.off_cpu {
            tally.still_blocked_tids = tids;
        }
        for task in named {
            self.note_names(&[(id, Wanted::Stack)], task, now_ns);
        }
    }

    /// Places the time of blocks of JVM threads inside their JVM's collections, for the blocks
    /// whose JVM's reads have passed their end; with `last_word` for session `id`, that session's
    /// all, by the reads so far (it is final).
    pub(super) fn place_gc_waits(&mut self, last_word: Option<u64>) {
        let gcs = &self.vms.gcs;
        for (&id, session) in &mut self.sessions {
            let so_far = last_word == Some(id);
            let Some(tally) = &mut session.off_cpu else {
                continue;
            };
            if tally.gc_waits.is_empty() || (last_word.is_some() && !so_far) {
                continue;
            }
            let mut placed = Vec::new();
            tally.gc_waits.retain(|&(task, from, to)| {
                match gcs.overlaps(task.pid, from, to, so_far) {
                    GcOverlap::Pending => true,
                    GcOverlap::NotRead => false,
                    GcOverlap::Known(overlaps) => {
                        if !overlaps.is_empty() {
                            placed.push((task, overlaps));
                        }
                        false
                    }
                }
            });
            for (task, overlaps) in placed {
                session.add_during(task, overlaps);
            }
        }
    }

    /// Whether session `id` waits for a JVM target's collections to be read past its stop.
    pub(super) fn waits_for_gc_reads(&self, id: u64) -> bool {
        let Some(session) = self.sessions.get(&id) else {
            return false;
        };
        let Some(stop) = session.stop_ns else {
            return false;
        };
        session
            .off_cpu
            .as_ref()
            .is_some_and(|t| !t.gc_waits.is_empty())
            && session.targets.iter().any(|t| {
                self.vms
                    .gcs
                    .known_until(t.pid)
                    .is_some_and(|until| until < stop)
            })
    }

    /// Starts reading the collections of a new off-CPU session's JVM targets (every target:
    /// which are JVMs is found by the reading thread).
    pub(super) fn watch_gcs(&mut self, id: u64) {
        let Some(session) = self.sessions.get(&id) else {
            return;
        };
        if session.off_cpu.is_none() || session.spec.system_wide {
            return;
        }
        for target in &session.targets {
            self.vms.gcs.watch(target.pid);
        }
    }

    /// Stops reading them for a session now final.
    pub(super) fn unwatch_gcs(&mut self, id: u64) {
        let Some(session) = self.sessions.get(&id) else {
            return;
        };
        if session.off_cpu.is_none() || session.spec.system_wide {
            return;
        }
        for target in &session.targets {
            self.vms.gcs.unwatch(target.pid);
        }
    }
}
