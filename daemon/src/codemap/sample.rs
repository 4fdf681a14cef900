//! A sample as the code maps hold it while its frames in generated code wait for their map:
//! its frames ([`RoutedSample`], [`SampleFrame`]), where each was placed ([`Placement`]), the
//! sessions it was counted in ([`Counted`]), and the [`Sink`] that counts and moves it. The
//! registry ([`super::registry`]) drives these; the session manager routes samples in and
//! implements the sink.

use vmscope_model::BlockState;

use super::live::LiveMap;
use crate::{
    stats::vm::StatEvent,
    vocab::{CodeId, Location, StackEnd, Unexplained},
};

/// Where a session counted a sample, so that it can move it when the sample's attribution
/// changes: which session, its stack there, and the index of the kept sample, if kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    /// The session.
    pub session: u64,
    /// The sample's thread, which its count is under.
    pub tid: u32,
    /// Which of the sample's stacks the session counted.
    pub wanted: Wanted,
    /// The stack it was counted in (the session's stack table's id).
    pub stack: u32,
    /// Its index among the session's kept samples.
    pub kept: Option<u32>,
    /// A block off the CPU: why, and the session's share of its time (what moves with it).
    pub block: Option<(BlockState, u64)>,
    /// The sends counted with the sample in the session (what moves with it too).
    pub sends: u64,
}

impl Counted {
    /// Whether `frame`, of a sample with a frame-pointer stack beside its own when `has_fp`,
    /// is in the stack this session counted (and at which index).
    pub fn counts(&self, frame: &ParkedFrame, has_fp: bool) -> Option<usize> {
        let counted = match (self.wanted, has_fp) {
            (Wanted::Leaf, _) => frame.stack == StackOf::Frames && frame.index == 0,
            (Wanted::FramePointers, true) => frame.stack == StackOf::Fp,
            _ => frame.stack == StackOf::Frames,
        };
        counted.then_some(usize::from(frame.index))
    }
}

/// Why a counted sample is placed again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recount {
    /// Its code map caught up with its time: the answer is time-correct now (it may be the
    /// provisional one).
    CaughtUp,
    /// No time-correct answer will come (parked too long, or too many parked): it stays
    /// provisional.
    Expired,
    /// A perf map read after it named some of its frames (marked so).
    LaterSnapshot,
}

/// What the session manager does with attributed samples.
pub trait Sink {
    /// Counts a sample whose frames are placed in each of its sessions; `provisional` when its
    /// code map was not known up to its time. Returns where each session counted it.
    fn count(
        &mut self,
        pid: u32,
        timestamp_ns: u64,
        sample: &RoutedSample,
        provisional: bool,
    ) -> Vec<Counted>;

    /// Frames in generated code of a counted sample (with a frame-pointer stack beside its own
    /// when `has_fp`) were placed again: moves it in the sessions of `counted` (updated) whose
    /// stacks changed. `placed` is empty for [`Recount::Expired`].
    fn recount(
        &mut self,
        pid: u32,
        has_fp: bool,
        placed: &[(ParkedFrame, Placement)],
        counted: &mut [Counted],
        why: Recount,
    );

    /// Whether the session may still take names from a perf map read later (it has not
    /// finished stopping).
    fn takes_snapshots(&self, session: u64) -> bool;

    /// Statistics a VM published in its code map files, in their order: handed over before
    /// any sample they may concern is counted (a sample in a GC is tagged with it).
    fn statistics(&mut self, pid: u32, stats: Vec<(u64, StatEvent)>);
}

/// Which of a sample's stacks a frame is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackOf {
    /// [`RoutedSample::frames`].
    Frames,
    /// The frame-pointer stack beside it ([`RoutedSample::fp`]).
    Fp,
}

/// A frame in generated code of a parked sample: where it is in the sample's stacks, and the
/// address it is placed by. The rest of the frame is in the stacks its sessions counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParkedFrame {
    /// Which stack.
    pub stack: StackOf,
    /// Its index there (leaf 0).
    pub index: u16,
    /// The address it is placed by ([`SampleFrame::lookup`]).
    pub lookup: u64,
}

/// Where a parked frame was placed again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// In a code map entry.
    Named {
        /// The code.
        code: CodeId,
        /// Offset from its start.
        offset: u64,
        /// Its start.
        code_start: u64,
        /// Named from a perf map read after the sample.
        later_snapshot: bool,
    },
    /// In no entry, and why.
    Unexplained(Unexplained),
}

impl Placement {
    /// Where a frame is placed in `map`: the entry at `lookup`, or unexplained (why to be
    /// said by the caller).
    pub(super) fn in_map(map: &LiveMap, lookup: u64, later_snapshot: bool) -> Placement {
        match map.lookup(lookup) {
            Some((start, code)) => Placement::Named {
                code,
                offset: lookup - start,
                code_start: start,
                later_snapshot,
            },
            None => Placement::Unexplained(Unexplained::NotLookedUp),
        }
    }

    /// The location a frame counted at `old` (generated code) has now.
    pub fn apply(self, old: Location) -> Location {
        match (self, old) {
            (
                Placement::Named {
                    code,
                    offset,
                    later_snapshot,
                    ..
                },
                _,
            ) => Location::Jit {
                code,
                offset,
                later_snapshot,
            },
            (
                Placement::Unexplained(why),
                Location::Anonymous {
                    pid, start, end, ..
                },
            ) => Location::Anonymous {
                pid,
                start,
                end,
                why,
            },
            (Placement::Unexplained(_), old) => old,
        }
    }

    /// The start of the code it is in (0 when unexplained), for kept samples.
    pub fn code_start(self) -> u64 {
        match self {
            Placement::Named { code_start, .. } => code_start,
            Placement::Unexplained(_) => 0,
        }
    }
}

/// A counted sample whose attribution may still change. Only its frames in generated code
/// are kept (a sample waits minutes for a runtime that flushes its jitdump at exit, and a
/// stack is mostly native frames): its sessions' stacks hold the rest.
#[derive(Clone, Debug)]
pub struct Parked {
    /// Sample time.
    pub timestamp_ns: u64,
    /// Its frames in generated code: as normalised while parked for its code map, as placed
    /// (and unexplained) while parked for a later snapshot.
    pub frames: Vec<ParkedFrame>,
    /// Whether the sample has a frame-pointer stack beside its own.
    pub has_fp: bool,
    /// Where its sessions counted it.
    pub counted: Vec<Counted>,
}

impl Parked {
    /// The frames of `sample` that `which` picks, with the counts.
    pub(super) fn of(
        timestamp_ns: u64,
        sample: &RoutedSample,
        counted: Vec<Counted>,
        which: impl Fn(&SampleFrame) -> bool,
    ) -> Parked {
        let pick = |stack: StackOf, frames: &[SampleFrame]| -> Vec<ParkedFrame> {
            frames
                .iter()
                .enumerate()
                .filter(|(_, f)| which(f))
                .map(|(i, f)| ParkedFrame {
                    stack,
                    index: u16::try_from(i).unwrap_or(u16::MAX),
                    lookup: f.lookup,
                })
                .collect()
        };
        let mut frames = pick(StackOf::Frames, &sample.frames);
        if let Some((fp, _)) = &sample.fp {
            frames.extend(pick(StackOf::Fp, fp));
        }
        Parked {
            timestamp_ns,
            frames,
            has_fp: sample.fp.is_some(),
            counted,
        }
    }
}

/// A sample routed to its sessions, with its stack. One with a frame in generated code waits in
/// its process's timeline until the code maps are known up to its time, then has those frames
/// placed ([`SampleFrame::place`]) before it is counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutedSample {
    /// Thread.
    pub tid: u32,
    /// Whether the tick landed in the kernel.
    pub kernel: bool,
    /// How the stack's walk ended (for the sessions that want stacks).
    pub end: StackEnd,
    /// The stack, leaf first (the leaf alone when no session wants stacks): unwound from the
    /// sample's stack copy when it has one, else the kernel's frame-pointer walk.
    pub frames: Vec<SampleFrame>,
    /// The kernel's frame-pointer stack and how it ended, when `frames` was unwound from a copy
    /// and some session asked for frame pointers: each session gets the stack it asked for.
    pub fp: FpStack,
    /// The sessions that counted it, and which of its stacks each counts.
    pub sessions: Vec<(u64, Wanted)>,
    /// The sends its thread executed since its previous sample in each of `sessions`, in
    /// their order (`--weight sends`); empty when its thread has no send counter.
    pub sends: Vec<u64>,
    /// The id of the label set its thread had set when it was taken, as its process published
    /// it (`LabelSet`); 0 for none. Looked up as it is counted, once its process's
    /// publication is known up to its time.
    pub labels: u64,
    /// A thread's block off its CPU rather than a sample: its stacks were taken as it came
    /// back.
    pub block: Option<RawBlock>,
}

/// A block of a thread off its CPU, as the kernel reported it: each session counts its own
/// share of the time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawBlock {
    /// When it left its CPU (CLOCK_MONOTONIC).
    pub begin_ns: u64,
    /// When it came back.
    pub end_ns: u64,
    /// Why it left.
    pub state: BlockState,
}

/// A sample's frame-pointer stack beside the stack unwound from its copy, and how it ended.
pub type FpStack = Option<(Vec<SampleFrame>, StackEnd)>;

/// Which of a sample's stacks a session counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// The leaf alone (no call graph).
    Leaf,
    /// [`RoutedSample::frames`] (`--call-graph dwarf`, or frame pointers when nothing was
    /// copied).
    Stack,
    /// The frame-pointer stack: [`RoutedSample::fp`] when there is one, else `frames`.
    FramePointers,
}

impl RoutedSample {
    /// The frames a session wanting `wanted` counts, and how that stack ended (`None` for the
    /// leaf alone).
    pub fn stack_for(&self, wanted: Wanted) -> (&[SampleFrame], Option<StackEnd>) {
        match (wanted, &self.fp) {
            (Wanted::Leaf, _) => (&self.frames[..1], None),
            (Wanted::FramePointers, Some((fp, end))) => (fp, Some(*end)),
            _ => (&self.frames, Some(self.end)),
        }
    }

    /// Every frame of the sample, in all its stacks: each is placed in the code-map timeline.
    pub fn frames_mut(&mut self) -> impl Iterator<Item = &mut SampleFrame> {
        let fp = self.fp.iter_mut().flat_map(|(fp, _)| fp.iter_mut());
        self.frames.iter_mut().chain(fp)
    }
}

/// A frame of a sample, placed while its process lived; a frame in generated code is placed
/// again once the code map is known up to the sample's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleFrame {
    /// Where it is: [`Location::Anonymous`] for generated code no code map has placed (yet).
    pub location: Location,
    /// The address as the stack held it.
    pub address: u64,
    /// The address it is placed by: the instruction pointer itself for the leaf, the return
    /// address minus one (inside the call) for callers.
    pub lookup: u64,
    /// Generated code: the start of the code entry it fell in, at the sample's time; else 0.
    pub code_start: u64,
}

impl SampleFrame {
    /// Whether it is in generated code no code map has named (yet): before placement, every
    /// frame a code map may name; after, those it left unexplained.
    pub fn is_generated(&self) -> bool {
        matches!(self.location, Location::Anonymous { .. })
    }

    /// Places a frame in generated code with `map`, the code map as it was at the sample's
    /// time; other frames, and code the map does not explain, stay as they are (why it is
    /// unexplained is for the caller to say).
    pub fn place(&mut self, map: &LiveMap) {
        if self.is_generated()
            && let placed @ Placement::Named { .. } = Placement::in_map(map, self.lookup, false)
        {
            self.location = placed.apply(self.location);
            self.code_start = placed.code_start();
        }
    }
}

impl RoutedSample {
    /// Whether a frame of it is generated code no code map explained.
    pub fn has_unexplained(&self) -> bool {
        self.frames.iter().any(SampleFrame::is_generated)
            || self
                .fp
                .iter()
                .any(|(fp, _)| fp.iter().any(SampleFrame::is_generated))
    }
}
