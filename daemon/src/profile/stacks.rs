//! Stacks of frames per process, merged where distinct locations name the same frames, with how
//! each ended; and the samples a session kept, each with its stack.

use std::collections::{BTreeMap, HashMap};

use vmscope_model::{
    self as model, AttributedSample, BlockState, IntervalKind, IntervalTime, Label, ProfileMode,
    Section, Stack, StackEndSamples, StackFrame, StackNode, StackTreeBuilder, Thread, rank::rank,
};

use super::placed::Placed;
use crate::{
    session::{LocationId, OffCpuTally, Snapshot, StackSnapshot, StackTags},
    symbolize::{Issue, KERNEL_MODULE},
    vocab::{Location, StackEnd, Task},
};

/// What a stack of a profile holds before its values are laid out in the mode's sample types:
/// samples, and blocks with their time, and the sends counted with the samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    samples: u64,
    blocks: u64,
    ns: u64,
    sends: u64,
}

impl Tally {
    /// The values of [`SampleType::of_mode`]`(mode)`, one sample standing for `period_ns` of
    /// CPU time, then its sends when the profile has them (`with_sends`).
    fn values(self, mode: ProfileMode, period_ns: u64, with_sends: bool) -> Vec<u64> {
        let mut values = self.mode_values(mode, period_ns);
        if with_sends {
            values.push(self.sends);
        }
        values
    }

    fn mode_values(self, mode: ProfileMode, period_ns: u64) -> Vec<u64> {
        let cpu = self.samples.saturating_mul(period_ns);
        match mode {
            ProfileMode::Cpu => vec![self.samples, cpu],
            ProfileMode::OffCpu => vec![self.blocks, self.ns],
            ProfileMode::Wall => vec![
                self.samples,
                cpu,
                self.blocks,
                self.ns,
                cpu.saturating_add(self.ns),
            ],
        }
    }

    /// What it is ranked by: its time on and off the CPU.
    fn rank(self, period_ns: u64) -> u64 {
        self.samples
            .saturating_mul(period_ns)
            .saturating_add(self.ns)
    }
}

/// Functions a thread starts in: a stack whose outermost frame is one of them is whole. A
/// frame-pointer walk ending anywhere else was cut by code without frame pointers. With glibc,
/// the main thread's walk ends at `__libc_start_call_main` (libc keeps no frame pointer, so
/// the walk stops in the frame that called `main`), other threads' at `start_thread` or
/// `clone3`.
pub(super) const THREAD_ENTRY_POINTS: [&str; 9] = [
    "_start",
    "__libc_start_call_main",
    "__libc_start_main",
    "__libc_start_main_impl",
    "start_thread",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
];

/// How a profile says a stack ended, as reports group stacks; `None` without a call graph. A
/// frame-pointer walk that simply ended is whole when its outermost frame is a thread's entry
/// point (or kernel code: a kernel thread), and was cut by code without frame pointers
/// otherwise.
pub(super) fn stack_end(
    end: Option<StackEnd>,
    outermost: Option<&Placed>,
) -> Option<model::StackEnd> {
    if outermost.is_some_and(|p| p.stack_limit) {
        return Some(model::StackEnd::StackLimit);
    }
    // A block's user stack never taken: no walk ended, there was none.
    if outermost.is_some_and(|p| p.since_start) {
        return None;
    }
    Some(match end? {
        StackEnd::Complete => model::StackEnd::Complete,
        StackEnd::FrameLimit => model::StackEnd::DepthLimit,
        StackEnd::NoFramePointer => model::StackEnd::NoFramePointer,
        StackEnd::JitWithoutFramePointer => model::StackEnd::JitNoFramePointer,
        StackEnd::Unmapped => model::StackEnd::UnmappedReturn,
        StackEnd::CopyTooSmall => model::StackEnd::CopyTooSmall,
        StackEnd::CopyFaulted => model::StackEnd::CopyFaulted,
        StackEnd::NoProgress
        | StackEnd::NullReturnAddress
        | StackEnd::FramePointerBackwards
        | StackEnd::BadAddress => model::StackEnd::UnwindFailed,
        StackEnd::FramePointerChainEnded => match outermost {
            Some(p)
                if p.resolved.module == KERNEL_MODULE
                    || THREAD_ENTRY_POINTS.contains(&p.resolved.name.as_str()) =>
            {
                model::StackEnd::Complete
            }
            _ => model::StackEnd::NoFramePointer,
        },
    })
}

/// The stacks of the profile, most time first, with their values of the sample types of
/// `mode` ([`SampleType::of_mode`]: one sample stands for `period_ns` of CPU time; then
/// [`SampleType::Sends`] when the snapshot has sends) and the
/// stack tree they name, and the samples (and blocks) per way they ended; `during` gives each
/// set of interval kinds as indices (see [`interval_kinds`]), `labels` each label set (see
/// [`profile_labels`]). Blocks are stacks apart from
/// samples, one per reason their thread was off its CPU. `None` once `cancelled` says so.
#[allow(clippy::too_many_arguments)]
pub(super) fn profile_stacks(
    stacks: &StackSnapshot,
    placed: &[Placed],
    hidden_kernel: bool,
    (during, labels): (&[Vec<u32>], &[Vec<u32>]),
    mode: ProfileMode,
    period_ns: u64,
    cancelled: impl Fn(usize) -> bool,
) -> Option<(Vec<StackNode>, Vec<Stack>, Vec<StackEndSamples>)> {
    type Key = (
        Task,
        Vec<u32>,
        Option<model::StackEnd>,
        StackTags,
        Option<BlockState>,
    );
    let mut by_frames: HashMap<Key, Tally, foldhash::fast::RandomState> = HashMap::default();
    let mut ends: BTreeMap<model::StackEnd, u64> = BTreeMap::new();
    let samples = stacks.counts.iter().map(|&(task, stack, samples)| {
        let tally = Tally {
            samples,
            ..Tally::default()
        };
        (task, stack, None, tally)
    });
    let blocks = stacks.blocks.iter().map(|&(task, stack, state, b)| {
        let tally = Tally {
            blocks: b.count,
            ns: b.ns,
            ..Tally::default()
        };
        (task, stack, Some(state), tally)
    });
    let sends = stacks.sends.iter().map(|&(task, stack, sends)| {
        let tally = Tally {
            sends,
            ..Tally::default()
        };
        (task, stack, None, tally)
    });
    let with_sends = !stacks.sends.is_empty();
    for (i, (task, stack, state, tally)) in samples.chain(blocks).chain(sends).enumerate() {
        if cancelled(i) {
            return None;
        }
        let ids = stacks.ids_of(stack);
        let frame_ids = stack_frames(ids, placed, hidden_kernel);
        let outermost = ids.last().map(|id| &placed[id.0 as usize]);
        let span = &stacks.stacks[stack.0 as usize];
        let end = stack_end(span.end, outermost);
        // How samples' stacks ended: what the report's notes weigh against its samples.
        if let Some(end) = end
            && tally.samples > 0
        {
            *ends.entry(end).or_insert(0) += tally.samples;
        }
        let sum = by_frames
            .entry((task, frame_ids, end, span.tags(), state))
            .or_default();
        sum.samples += tally.samples;
        sum.blocks += tally.blocks;
        sum.ns = sum.ns.saturating_add(tally.ns);
        sum.sends = sum.sends.saturating_add(tally.sends);
    }
    let mut merged: Vec<_> = by_frames.into_iter().collect();
    // Ranked before the tree is built, so that its nodes come in the order of the stacks.
    rank(
        &mut merged,
        |&(_, tally)| tally.rank(period_ns),
        |((a, a_frames, a_end, a_during, a_state), _),
         ((b, b_frames, b_end, b_during, b_state), _)| {
            (
                a.pid,
                a.tid,
                a_frames,
                a_end,
                &during[a_during.during.0 as usize],
                &labels[a_during.labels.0 as usize],
                a_state,
            )
                .cmp(&(
                    b.pid,
                    b.tid,
                    b_frames,
                    b_end,
                    &during[b_during.during.0 as usize],
                    &labels[b_during.labels.0 as usize],
                    b_state,
                ))
        },
    );
    let mut tree = StackTreeBuilder::new();
    let profile_stacks: Vec<Stack> = merged
        .into_iter()
        .map(|((task, frames, end, tags, state), tally)| Stack {
            node: tree.intern(&frames),
            pid: task.pid,
            tid: task.tid,
            values: tally.values(mode, period_ns, with_sends),
            truncated: end == Some(model::StackEnd::DepthLimit),
            end,
            during: during[tags.during.0 as usize].clone(),
            state,
            labels: labels[tags.labels.0 as usize].clone(),
        })
        .collect();
    let mut stack_ends: Vec<StackEndSamples> = ends
        .into_iter()
        .map(|(end, samples)| StackEndSamples { end, samples })
        .collect();
    rank(&mut stack_ends, |e| e.samples, |a, b| a.end.cmp(&b.end));

    Some((tree.finish(), profile_stacks, stack_ends))
}

/// The threads of the profile's stacks, most time first, each with the name it had when the
/// session first sampled it (where `names` has it), its samples and the CPU time they stand for
/// (`period_ns` each), its blocks and their time, and of that time how much fell inside each
/// kind of its VM's intervals (from `off_cpu`, as indices into `kinds`). Summed from the
/// snapshot's counts, which name each thread's samples and blocks once.
pub(super) fn threads(
    stacks: &StackSnapshot,
    names: &std::collections::HashMap<Task, String, foldhash::fast::RandomState>,
    period_ns: u64,
    off_cpu: Option<&OffCpuTally>,
    kinds: &[IntervalKind],
) -> Vec<Thread> {
    let mut sums: HashMap<Task, Tally> = HashMap::new();
    for &(task, _, samples) in &stacks.counts {
        sums.entry(task).or_default().samples += samples;
    }
    for &(task, _, _, b) in &stacks.blocks {
        let sum = sums.entry(task).or_default();
        sum.blocks += b.count;
        sum.ns = sum.ns.saturating_add(b.ns);
    }
    let mut during: HashMap<Task, Vec<IntervalTime>> = HashMap::new();
    for ((task, kind), &ns) in off_cpu.map(|o| &o.during).into_iter().flatten() {
        if let Some(index) = kinds.iter().position(|k| k == kind) {
            during.entry(*task).or_default().push(IntervalTime {
                kind: index as u32,
                ns,
            });
        }
    }
    let mut threads: Vec<Thread> = sums
        .into_iter()
        .filter(|&(_, t)| t.samples > 0 || t.blocks > 0)
        .map(|(task, tally)| {
            let mut off_cpu_during = during.remove(&task).unwrap_or_default();
            rank(&mut off_cpu_during, |d| d.ns, |a, b| a.kind.cmp(&b.kind));
            Thread {
                pid: task.pid,
                tid: task.tid,
                name: names.get(&task).cloned().unwrap_or_default(),
                samples: tally.samples,
                cpu_ns: tally.samples.saturating_mul(period_ns),
                off_cpu_blocks: tally.blocks,
                off_cpu_ns: tally.ns,
                off_cpu_during,
            }
        })
        .collect();
    threads.sort_by(Thread::order);
    threads
}

/// The samples the session kept, oldest first, each with its stack.
pub(super) fn kept_samples(
    snapshot: &Snapshot,
    placed: &[Placed],
    during: &[Vec<u32>],
) -> Vec<AttributedSample> {
    let stacks = &snapshot.stacks;
    let mut kept: Vec<&crate::session::KeptSample> = snapshot
        .kept
        .iter()
        .flat_map(|chunk| chunk.iter())
        .collect();
    kept.sort_by_key(|k| k.timestamp_ns);
    kept.into_iter()
        .map(|kept| {
            let ids = stacks.ids_of(kept.stack);
            let stack: Vec<StackFrame> = ids
                .iter()
                .zip(kept.frames.iter())
                .map(|(id, frame)| StackFrame {
                    address: frame.address,
                    kernel: matches!(stacks.location(*id), Location::Kernel { .. }),
                    frame: placed[id.0 as usize].own_frame,
                    code_start: frame.code_start,
                })
                .collect();
            let leaf = ids.first().map(|id| &placed[id.0 as usize].resolved);
            AttributedSample {
                timestamp_ns: kept.timestamp_ns,
                pid: kept.pid,
                tid: kept.tid,
                ip: kept.frames.first().map_or(0, |f| f.address),
                kernel: kept.kernel,
                section: leaf.map_or(Section::Other, |r| r.section),
                name: leaf.map(|r| r.name.clone()).unwrap_or_default(),
                module: leaf.map(|r| r.module.clone()).unwrap_or_default(),
                code_start: kept.frames.first().map_or(0, |f| f.code_start),
                stack,
                truncated: stacks.stacks[kept.stack.0 as usize].truncated(),
                during: during[stacks.stacks[kept.stack.0 as usize].during.0 as usize].clone(),
            }
        })
        .collect()
}

/// The kinds of interval the stacks were taken during, each once (in the order reports list
/// them: scavenges, full GCs, compactions, safepoints, then the VMs' own by name), and each of
/// the snapshot's sets of kinds as indices into them.
pub(super) fn interval_kinds(
    stacks: &StackSnapshot,
    off_cpu: Option<&OffCpuTally>,
) -> (Vec<IntervalKind>, Vec<Vec<u32>>) {
    let off_cpu_kinds = off_cpu
        .into_iter()
        .flat_map(|o| o.during.keys().map(|(_, k)| k));
    let mut kinds: Vec<&IntervalKind> = stacks
        .during
        .iter()
        .flatten()
        .chain(off_cpu_kinds)
        .collect();
    kinds.sort_by_key(|kind| (kind.rank(), *kind));
    kinds.dedup();
    let sets = stacks
        .during
        .iter()
        .map(|set| {
            let mut indices: Vec<u32> = set
                .iter()
                .filter_map(|kind| kinds.iter().position(|k| *k == kind))
                .map(|i| i as u32)
                .collect();
            indices.sort_unstable();
            indices
        })
        .collect::<Vec<_>>();
    let table = kinds.into_iter().cloned().collect();
    // A snapshot with no interval has no sets at all: every stack is in none.
    let sets = if sets.is_empty() {
        vec![Vec::new()]
    } else {
        sets
    };
    (table, sets)
}

/// The labels the stacks were taken with, each distinct (key, value) once, in order, and each
/// of the snapshot's label sets as indices into them.
pub(super) fn profile_labels(stacks: &StackSnapshot) -> (Vec<Label>, Vec<Vec<u32>>) {
    let mut labels: Vec<&Label> = stacks.labels.iter().flat_map(|set| set.iter()).collect();
    labels.sort();
    labels.dedup();
    let sets: Vec<Vec<u32>> = stacks
        .labels
        .iter()
        .map(|set| {
            set.iter()
                .filter_map(|l| labels.binary_search(&l).ok())
                .map(|i| i as u32)
                .collect()
        })
        .collect();
    let table = labels.into_iter().cloned().collect();
    // A snapshot with no labels has no sets at all: every stack has none.
    let sets = if sets.is_empty() {
        vec![Vec::new()]
    } else {
        sets
    };
    (table, sets)
}

/// The frames of a stack of locations, leaf first; hidden kernel frames are one `[kernel]`.
pub(super) fn stack_frames(ids: &[LocationId], placed: &[Placed], hidden_kernel: bool) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::with_capacity(ids.len());
    let mut previous_hidden = false;
    for id in ids {
        let placed = &placed[id.0 as usize];
        let hidden = hidden_kernel && matches!(placed.resolved.issue, Some(Issue::KernelHidden(_)));
        if hidden && previous_hidden {
            continue;
        }
        previous_hidden = hidden;
        out.extend_from_slice(&placed.frames);
    }
    out
}
