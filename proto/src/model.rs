//! The profile model ([`vmscope_model`]) carried as `vmscope.v1` messages, both ways: the
//! daemon turns its [`vmscope_model::Profile`] into a [`v1::Profile`] at the gRPC boundary, a
//! client turns what it received back. The only place the two meet.
//!
//! Both ways are total. A value this build does not know (an enum from a newer daemon) becomes
//! what the model says of unknowns: the section `Other`, no code kind, no stack end, no issue
//! kind, an interval kind known by its name.

use std::time::{Duration, SystemTime};

use vmscope_model as m;

use crate::v1;

mod vm_statistics;

impl From<m::Profile> for v1::Profile {
    fn from(p: m::Profile) -> Self {
        // The API gives each stack its frames as a list (pprof's way): a client reads a stack
        // without walking a tree.
        let stacks = p
            .stacks
            .iter()
            .map(|s| api_stack(s, p.stack_frames(s).collect()))
            .collect();
        v1::Profile {
            session: p.session.map(Into::into),
            vm_executable: p.vm_executable,
            total_samples: p.total_samples,
            lost_samples: p.lost_samples,
            lost_samples_per_cpu: p.lost_samples_per_cpu,
            duration_seconds: p.duration_seconds,
            cpu_seconds: p.cpu_seconds,
            measured_frequency_hz: p.measured_frequency_hz,
            rows: p.rows.into_iter().map(Into::into).collect(),
            symbolization_issues: p.symbolization_issues.into_iter().map(Into::into).collect(),
            has_generated_code: p.has_generated_code,
            complete: p.complete,
            samples: p.samples.into_iter().map(Into::into).collect(),
            samples_not_kept: p.samples_not_kept,
            host_steal_percent: p.host_steal_percent,
            incomplete_reason: p.incomplete_reason,
            jit_samples_before_code_map: p.jit_samples_before_code_map,
            processes: p.processes,
            frames: p.frames.into_iter().map(Into::into).collect(),
            stacks,
            sample_types: p
                .sample_types
                .into_iter()
                .map(|t| sample_type(t) as i32)
                .collect(),
            threads: p.threads.into_iter().map(Into::into).collect(),
            truncated_stacks: p.truncated_stacks,
            stack_ends: p
                .stack_ends
                .into_iter()
                .map(|e| v1::StackEndSamples {
                    end: stack_end(Some(e.end)) as i32,
                    samples: e.samples,
                })
                .collect(),
            pprof: Vec::new(),
            jit_samples_awaiting_code_map: p.jit_samples_awaiting_code_map,
            jit_samples_caught_up: p.jit_samples_caught_up,
            jit_samples_from_later_snapshot: p.jit_samples_from_later_snapshot,
            kernel_events: p.kernel_events.map(Into::into),
            vm_statistics: p.vm_statistics.into_iter().map(Into::into).collect(),
            vm_interval_kinds: p
                .vm_interval_kinds
                .iter()
                .map(|kind| {
                    let (kind, name) = interval_kind(kind);
                    v1::VmIntervalKind {
                        kind: kind as i32,
                        name,
                    }
                })
                .collect(),
            taken_frequency_hz: p.taken_frequency_hz,
            throttled: p.throttled,
            off_cpu: p.off_cpu.map(Into::into),
            thread_filter: p.thread_filter,
            labels: p
                .labels
                .into_iter()
                .map(|l| v1::Label {
                    key: l.key,
                    value: l.value,
                })
                .collect(),
            label_filter: p.label_filter,
            call_counts: p
                .call_counts
                .into_iter()
                .map(|c| v1::CallCount {
                    function: c.function,
                    pid: c.pid,
                    path: c.path,
                    calls: c.calls,
                    note: c.note,
                })
                .collect(),
        }
    }
}

impl From<v1::Profile> for m::Profile {
    /// The profile a daemon sent; its `pprof` bytes, an encoding of the same profile, are left
    /// behind.
    fn from(p: v1::Profile) -> Self {
        let (sample_types, stack_nodes, stacks) = model_stacks(&p.sample_types, p.stacks);
        m::Profile {
            session: p.session.map(Into::into),
            vm_executable: p.vm_executable,
            total_samples: p.total_samples,
            lost_samples: p.lost_samples,
            lost_samples_per_cpu: p.lost_samples_per_cpu,
            duration_seconds: p.duration_seconds,
            cpu_seconds: p.cpu_seconds,
            measured_frequency_hz: p.measured_frequency_hz,
            taken_frequency_hz: p.taken_frequency_hz,
            throttled: p.throttled,
            rows: p.rows.into_iter().map(Into::into).collect(),
            symbolization_issues: p.symbolization_issues.into_iter().map(Into::into).collect(),
            has_generated_code: p.has_generated_code,
            complete: p.complete,
            incomplete_reason: p.incomplete_reason,
            samples: p.samples.into_iter().map(Into::into).collect(),
            samples_not_kept: p.samples_not_kept,
            host_steal_percent: p.host_steal_percent,
            jit_samples_before_code_map: p.jit_samples_before_code_map,
            jit_samples_awaiting_code_map: p.jit_samples_awaiting_code_map,
            jit_samples_caught_up: p.jit_samples_caught_up,
            jit_samples_from_later_snapshot: p.jit_samples_from_later_snapshot,
            processes: p.processes,
            frames: p.frames.into_iter().map(Into::into).collect(),
            stack_nodes,
            sample_types,
            stacks,
            threads: p.threads.into_iter().map(Into::into).collect(),
            truncated_stacks: p.truncated_stacks,
            stack_ends: p
                .stack_ends
                .into_iter()
                .filter_map(|e| {
                    Some(m::StackEndSamples {
                        end: model_stack_end(e.end)?,
                        samples: e.samples,
                    })
                })
                .collect(),
            kernel_events: p.kernel_events.map(Into::into),
            vm_statistics: p.vm_statistics.into_iter().map(Into::into).collect(),
            vm_interval_kinds: p
                .vm_interval_kinds
                .into_iter()
                .map(|k| model_interval_kind(k.kind, k.name))
                .collect(),
            off_cpu: p.off_cpu.map(Into::into),
            thread_filter: p.thread_filter,
            labels: p
                .labels
                .into_iter()
                .map(|l| m::Label::new(l.key, l.value))
                .collect(),
            label_filter: p.label_filter,
            call_counts: p
                .call_counts
                .into_iter()
                .map(|c| m::CallCount {
                    function: c.function,
                    pid: c.pid,
                    path: c.path,
                    calls: c.calls,
                    note: c.note,
                })
                .collect(),
        }
    }
}

// Time off the CPU.

impl From<m::OffCpu> for v1::OffCpu {
    fn from(o: m::OffCpu) -> Self {
        v1::OffCpu {
            blocks: o.blocks,
            total_ns: o.total_ns,
            rows: o.rows.into_iter().map(Into::into).collect(),
            states: o
                .states
                .into_iter()
                .map(|s| v1::StateTime {
                    state: block_state(Some(s.state)) as i32,
                    blocks: s.blocks,
                    ns: s.ns,
                })
                .collect(),
            short_blocks: o.short_blocks,
            short_ns: o.short_ns,
            lost_blocks: o.lost_blocks,
            unfollowed: o.unfollowed,
            still_blocked_ns: o.still_blocked_ns,
            still_blocked_threads: o.still_blocked_threads,
        }
    }
}

impl From<v1::OffCpu> for m::OffCpu {
    fn from(o: v1::OffCpu) -> Self {
        m::OffCpu {
            blocks: o.blocks,
            total_ns: o.total_ns,
            rows: o.rows.into_iter().map(Into::into).collect(),
            states: o
                .states
                .into_iter()
                .map(|s| m::StateTime {
                    state: model_block_state(s.state).unwrap_or_default(),
                    blocks: s.blocks,
                    ns: s.ns,
                })
                .collect(),
            short_blocks: o.short_blocks,
            short_ns: o.short_ns,
            lost_blocks: o.lost_blocks,
            unfollowed: o.unfollowed,
            still_blocked_ns: o.still_blocked_ns,
            still_blocked_threads: o.still_blocked_threads,
        }
    }
}

/// A block state as the API says it; `None` (on the CPU) is UNSPECIFIED.
pub fn block_state(state: Option<m::BlockState>) -> v1::BlockState {
    match state {
        None => v1::BlockState::Unspecified,
        Some(m::BlockState::Preempted) => v1::BlockState::Preempted,
        Some(m::BlockState::Sleeping) => v1::BlockState::Sleeping,
        Some(m::BlockState::Uninterruptible) => v1::BlockState::Uninterruptible,
        Some(m::BlockState::Stopped) => v1::BlockState::Stopped,
        Some(m::BlockState::Idle) => v1::BlockState::Idle,
        Some(m::BlockState::Other) => v1::BlockState::Other,
    }
}

/// A block state as a daemon said it: `None` for UNSPECIFIED (on the CPU); a state this build
/// does not know is `Other`.
pub fn model_block_state(state: i32) -> Option<m::BlockState> {
    Some(match v1::BlockState::try_from(state) {
        Ok(v1::BlockState::Unspecified) => return None,
        Ok(v1::BlockState::Preempted) => m::BlockState::Preempted,
        Ok(v1::BlockState::Sleeping) => m::BlockState::Sleeping,
        Ok(v1::BlockState::Uninterruptible) => m::BlockState::Uninterruptible,
        Ok(v1::BlockState::Stopped) => m::BlockState::Stopped,
        Ok(v1::BlockState::Idle) => m::BlockState::Idle,
        Ok(v1::BlockState::Other) | Err(_) => m::BlockState::Other,
    })
}

/// A mode as the API says it.
pub fn profile_mode(mode: m::ProfileMode) -> v1::ProfileMode {
    match mode {
        m::ProfileMode::Cpu => v1::ProfileMode::Cpu,
        m::ProfileMode::OffCpu => v1::ProfileMode::OffCpu,
        m::ProfileMode::Wall => v1::ProfileMode::Wall,
    }
}

/// A mode as a request or a daemon said it: unspecified is the default, CPU; `None` for a
/// value this build does not know.
pub fn model_profile_mode(mode: i32) -> Option<m::ProfileMode> {
    match v1::ProfileMode::try_from(mode).ok()? {
        v1::ProfileMode::Unspecified | v1::ProfileMode::Cpu => Some(m::ProfileMode::Cpu),
        v1::ProfileMode::OffCpu => Some(m::ProfileMode::OffCpu),
        v1::ProfileMode::Wall => Some(m::ProfileMode::Wall),
    }
}

// Sessions.

impl From<m::Session> for v1::Session {
    fn from(s: m::Session) -> Self {
        v1::Session {
            id: s.id,
            state: s
                .state
                .map_or(v1::SessionState::Unspecified, |state| match state {
                    m::SessionState::Running => v1::SessionState::Running,
                    m::SessionState::Stopping => v1::SessionState::Stopping,
                    m::SessionState::Stopped => v1::SessionState::Stopped,
                }) as i32,
            targets: s.targets.into_iter().map(Into::into).collect(),
            system_wide: s.system_wide,
            frequency_hz: s.frequency_hz,
            started_at: s.started_at.map(Into::into),
            elapsed: s
                .elapsed
                .and_then(|d| prost_types::Duration::try_from(d).ok()),
            duration_limit: s
                .duration_limit
                .and_then(|d| prost_types::Duration::try_from(d).ok()),
            stop_reason: s.stop_reason,
            owner_uid: s.owner_uid,
            samples: s.samples,
            call_graph: s
                .call_graph
                .map_or(v1::CallGraph::Unspecified, |c| match c {
                    m::CallGraph::None => v1::CallGraph::None,
                    m::CallGraph::Fp => v1::CallGraph::Fp,
                    m::CallGraph::Dwarf => v1::CallGraph::Dwarf,
                }) as i32,
            dwarf_stack_bytes: s.dwarf_stack_bytes,
            awaiting_code_map_samples: s.awaiting_code_map_samples,
            max_stacks: s.max_stacks,
            stack_limit_samples: s.stack_limit_samples,
            label_limit_samples: s.label_limit_samples,
            mode: profile_mode(s.mode) as i32,
            min_block_ns: s.min_block_ns,
            params: s
                .params
                .into_iter()
                .map(|(key, value)| v1::Param { key, value })
                .collect(),
            counts: s.counts,
        }
    }
}

impl From<v1::Session> for m::Session {
    fn from(s: v1::Session) -> Self {
        m::Session {
            id: s.id,
            state: match v1::SessionState::try_from(s.state) {
                Ok(v1::SessionState::Running) => Some(m::SessionState::Running),
                Ok(v1::SessionState::Stopping) => Some(m::SessionState::Stopping),
                Ok(v1::SessionState::Stopped) => Some(m::SessionState::Stopped),
                _ => None,
            },
            targets: s.targets.into_iter().map(Into::into).collect(),
            system_wide: s.system_wide,
            frequency_hz: s.frequency_hz,
            started_at: s.started_at.and_then(|t| SystemTime::try_from(t).ok()),
            elapsed: s.elapsed.and_then(|d| Duration::try_from(d).ok()),
            duration_limit: s.duration_limit.and_then(|d| Duration::try_from(d).ok()),
            stop_reason: s.stop_reason,
            owner_uid: s.owner_uid,
            samples: s.samples,
            call_graph: match v1::CallGraph::try_from(s.call_graph) {
                Ok(v1::CallGraph::None) => Some(m::CallGraph::None),
                Ok(v1::CallGraph::Fp) => Some(m::CallGraph::Fp),
                Ok(v1::CallGraph::Dwarf) => Some(m::CallGraph::Dwarf),
                _ => None,
            },
            dwarf_stack_bytes: s.dwarf_stack_bytes,
            awaiting_code_map_samples: s.awaiting_code_map_samples,
            max_stacks: s.max_stacks,
            stack_limit_samples: s.stack_limit_samples,
            label_limit_samples: s.label_limit_samples,
            // A mode this build does not know measured something it cannot show as such.
            mode: model_profile_mode(s.mode).unwrap_or_default(),
            min_block_ns: s.min_block_ns,
            params: s.params.into_iter().map(|p| (p.key, p.value)).collect(),
            counts: s.counts,
        }
    }
}

impl From<m::TargetProcess> for v1::TargetProcess {
    fn from(t: m::TargetProcess) -> Self {
        v1::TargetProcess {
            pid: t.pid,
            command: t.command,
            executable: t.executable,
            exited: t.exited,
            note: t.note,
        }
    }
}

impl From<v1::TargetProcess> for m::TargetProcess {
    fn from(t: v1::TargetProcess) -> Self {
        m::TargetProcess {
            pid: t.pid,
            command: t.command,
            executable: t.executable,
            exited: t.exited,
            note: t.note,
        }
    }
}

// Frames, stacks, kept samples.

/// A section as the API says it.
pub fn section(section: m::Section) -> v1::Section {
    match section {
        m::Section::Generated => v1::Section::Generated,
        m::Section::Vanilla => v1::Section::Vanilla,
        m::Section::Other => v1::Section::Other,
    }
}

/// The section of a row or frame as a daemon labelled it: unspecified (or unknown, from a
/// newer daemon) goes to `Other`, whose definition is "everything else", rather than vanish.
pub fn model_section(section: i32) -> m::Section {
    match v1::Section::try_from(section) {
        Ok(v1::Section::Generated) => m::Section::Generated,
        Ok(v1::Section::Vanilla) => m::Section::Vanilla,
        _ => m::Section::Other,
    }
}

/// A kind of code as the API says it; native code has none.
pub fn code_kind(kind: Option<m::CodeKind>) -> v1::CodeKind {
    match kind {
        None => v1::CodeKind::Unspecified,
        Some(m::CodeKind::Method) => v1::CodeKind::Method,
        Some(m::CodeKind::Block) => v1::CodeKind::Block,
        Some(m::CodeKind::Trampoline) => v1::CodeKind::Trampoline,
        Some(m::CodeKind::Enilopmart) => v1::CodeKind::Enilopmart,
        Some(m::CodeKind::ClosedPic) => v1::CodeKind::ClosedPic,
        Some(m::CodeKind::OpenPic) => v1::CodeKind::OpenPic,
        Some(m::CodeKind::Stub) => v1::CodeKind::Stub,
        Some(m::CodeKind::Unknown) => v1::CodeKind::Unknown,
    }
}

/// The kind of code a daemon said; `None` when it did not say, or said something this build
/// does not know.
pub fn model_code_kind(kind: i32) -> Option<m::CodeKind> {
    Some(match v1::CodeKind::try_from(kind).ok()? {
        v1::CodeKind::Unspecified => return None,
        v1::CodeKind::Method => m::CodeKind::Method,
        v1::CodeKind::Block => m::CodeKind::Block,
        v1::CodeKind::Trampoline => m::CodeKind::Trampoline,
        v1::CodeKind::Enilopmart => m::CodeKind::Enilopmart,
        v1::CodeKind::ClosedPic => m::CodeKind::ClosedPic,
        v1::CodeKind::OpenPic => m::CodeKind::OpenPic,
        v1::CodeKind::Stub => m::CodeKind::Stub,
        v1::CodeKind::Unknown => m::CodeKind::Unknown,
    })
}

impl From<m::Frame> for v1::Frame {
    fn from(f: m::Frame) -> Self {
        v1::Frame {
            section: section(f.section) as i32,
            name: f.name,
            module: f.module,
            symbolized: f.symbolized,
            kind: code_kind(f.kind) as i32,
            range: f.range,
            inlined: f.inlined,
            code_map: f.code_map,
            optimised: f.optimised,
            build_id: f.build_id,
            kernel: f.kernel,
            file: f.file,
            line: f.line,
            later_snapshot: f.later_snapshot,
        }
    }
}

impl From<v1::Frame> for m::Frame {
    fn from(f: v1::Frame) -> Self {
        m::Frame {
            section: model_section(f.section),
            name: f.name,
            module: f.module,
            symbolized: f.symbolized,
            kind: model_code_kind(f.kind),
            range: f.range,
            inlined: f.inlined,
            code_map: f.code_map,
            optimised: f.optimised,
            build_id: f.build_id,
            kernel: f.kernel,
            file: f.file,
            line: f.line,
            later_snapshot: f.later_snapshot,
        }
    }
}

/// How a stack ended as the API says it; unknown is unspecified.
pub fn stack_end(end: Option<m::StackEnd>) -> v1::StackEnd {
    match end {
        None => v1::StackEnd::Unspecified,
        Some(m::StackEnd::Complete) => v1::StackEnd::Complete,
        Some(m::StackEnd::DepthLimit) => v1::StackEnd::DepthLimit,
        Some(m::StackEnd::NoFramePointer) => v1::StackEnd::NoFramePointer,
        Some(m::StackEnd::UnmappedReturn) => v1::StackEnd::UnmappedReturn,
        Some(m::StackEnd::CopyTooSmall) => v1::StackEnd::CopyTooSmall,
        Some(m::StackEnd::CopyFaulted) => v1::StackEnd::CopyFaulted,
        Some(m::StackEnd::UnwindFailed) => v1::StackEnd::UnwindFailed,
        Some(m::StackEnd::JitNoFramePointer) => v1::StackEnd::JitNoFramePointer,
        Some(m::StackEnd::StackLimit) => v1::StackEnd::StackLimit,
    }
}

/// How a stack ended as a daemon said it; `None` when it did not say, or said something this
/// build does not know.
pub fn model_stack_end(end: i32) -> Option<m::StackEnd> {
    Some(match v1::StackEnd::try_from(end).ok()? {
        v1::StackEnd::Unspecified => return None,
        v1::StackEnd::Complete => m::StackEnd::Complete,
        v1::StackEnd::DepthLimit => m::StackEnd::DepthLimit,
        v1::StackEnd::NoFramePointer => m::StackEnd::NoFramePointer,
        v1::StackEnd::UnmappedReturn => m::StackEnd::UnmappedReturn,
        v1::StackEnd::CopyTooSmall => m::StackEnd::CopyTooSmall,
        v1::StackEnd::CopyFaulted => m::StackEnd::CopyFaulted,
        v1::StackEnd::UnwindFailed => m::StackEnd::UnwindFailed,
        v1::StackEnd::JitNoFramePointer => m::StackEnd::JitNoFramePointer,
        v1::StackEnd::StackLimit => m::StackEnd::StackLimit,
    })
}

/// `s` as the API carries it, with its `frames` (leaf first).
fn api_stack(s: &m::Stack, frames: Vec<u32>) -> v1::Stack {
    v1::Stack {
        samples: s.samples(),
        frames,
        pid: s.pid,
        tid: s.tid,
        values: s.values.clone(),
        truncated: s.truncated,
        end: stack_end(s.end) as i32,
        during: s.during.clone(),
        state: block_state(s.state) as i32,
        labels: s.labels.clone(),
    }
}

/// The API's spelling of a sample type.
pub fn sample_type(kind: m::SampleType) -> v1::SampleType {
    match kind {
        m::SampleType::Samples => v1::SampleType::Samples,
        m::SampleType::CpuTime => v1::SampleType::CpuTime,
        m::SampleType::OffCpuBlocks => v1::SampleType::OffCpuBlocks,
        m::SampleType::OffCpuTime => v1::SampleType::OffCpuTime,
        m::SampleType::WallTime => v1::SampleType::WallTime,
        m::SampleType::Sends => v1::SampleType::Sends,
    }
}

/// A sample type as a daemon said it; `None` when unspecified or unknown to this build.
pub fn model_sample_type(kind: i32) -> Option<m::SampleType> {
    match v1::SampleType::try_from(kind).ok()? {
        v1::SampleType::Unspecified => None,
        v1::SampleType::Samples => Some(m::SampleType::Samples),
        v1::SampleType::CpuTime => Some(m::SampleType::CpuTime),
        v1::SampleType::OffCpuBlocks => Some(m::SampleType::OffCpuBlocks),
        v1::SampleType::OffCpuTime => Some(m::SampleType::OffCpuTime),
        v1::SampleType::WallTime => Some(m::SampleType::WallTime),
        v1::SampleType::Sends => Some(m::SampleType::Sends),
    }
}

/// The sample types, stack tree and stacks a daemon sent, as the model holds them: values of a
/// type this build does not know are dropped with their type, and a daemon that sent no types
/// (older than sample types) measured samples alone, in `Stack.samples`. What the profile
/// counted is first: its samples, or an off-CPU profile's blocks; where the known types lack
/// both, samples (`Stack.samples`) are put first.
fn model_stacks(
    types: &[i32],
    stacks: Vec<v1::Stack>,
) -> (Vec<m::SampleType>, Vec<m::StackNode>, Vec<m::Stack>) {
    let known: Vec<(usize, m::SampleType)> = types
        .iter()
        .enumerate()
        .filter_map(|(i, &t)| Some((i, model_sample_type(t)?)))
        .collect();
    let counted =
        |t: m::SampleType| matches!(t, m::SampleType::Samples | m::SampleType::OffCpuBlocks);
    let first = known
        .iter()
        .position(|&(_, t)| t == m::SampleType::Samples)
        .or_else(|| known.iter().position(|&(_, t)| counted(t)));
    let head = match first {
        Some(k) => (Some(known[k].0), known[k].1),
        None => (None, m::SampleType::Samples),
    };
    // What was counted first, the other known types in the daemon's order.
    let columns: Vec<(Option<usize>, m::SampleType)> = std::iter::once(head)
        .chain(
            known
                .iter()
                .filter(|&&(i, _)| Some(i) != head.0)
                .map(|&(i, t)| (Some(i), t)),
        )
        .collect();
    let mut tree = m::StackTreeBuilder::new();
    let stacks = stacks
        .into_iter()
        .map(|s| {
            let values = columns
                .iter()
                .map(|&(at, kind)| match at.and_then(|i| s.values.get(i)) {
                    Some(&value) => value,
                    None if kind == m::SampleType::Samples => s.samples,
                    None => 0,
                })
                .collect();
            m::Stack {
                node: tree.intern(&s.frames),
                pid: s.pid,
                tid: s.tid,
                values,
                truncated: s.truncated,
                end: model_stack_end(s.end),
                during: s.during,
                state: model_block_state(s.state),
                labels: s.labels,
            }
        })
        .collect();
    (
        columns.into_iter().map(|(_, t)| t).collect(),
        tree.finish(),
        stacks,
    )
}

impl From<m::Thread> for v1::Thread {
    fn from(t: m::Thread) -> Self {
        v1::Thread {
            pid: t.pid,
            tid: t.tid,
            name: t.name,
            samples: t.samples,
            cpu_ns: t.cpu_ns,
            off_cpu_blocks: t.off_cpu_blocks,
            off_cpu_ns: t.off_cpu_ns,
            off_cpu_during: t
                .off_cpu_during
                .into_iter()
                .map(|d| v1::IntervalTime {
                    kind: d.kind,
                    ns: d.ns,
                })
                .collect(),
        }
    }
}

impl From<v1::Thread> for m::Thread {
    fn from(t: v1::Thread) -> Self {
        m::Thread {
            pid: t.pid,
            tid: t.tid,
            name: t.name,
            samples: t.samples,
            cpu_ns: t.cpu_ns,
            off_cpu_blocks: t.off_cpu_blocks,
            off_cpu_ns: t.off_cpu_ns,
            off_cpu_during: t
                .off_cpu_during
                .into_iter()
                .map(|d| m::IntervalTime {
                    kind: d.kind,
                    ns: d.ns,
                })
                .collect(),
        }
    }
}

impl From<m::AttributedSample> for v1::AttributedSample {
    fn from(s: m::AttributedSample) -> Self {
        v1::AttributedSample {
            timestamp_ns: s.timestamp_ns,
            pid: s.pid,
            tid: s.tid,
            ip: s.ip,
            kernel: s.kernel,
            section: section(s.section) as i32,
            name: s.name,
            module: s.module,
            code_start: s.code_start,
            stack: s
                .stack
                .into_iter()
                .map(|f| v1::StackFrame {
                    address: f.address,
                    kernel: f.kernel,
                    frame: f.frame,
                    code_start: f.code_start,
                })
                .collect(),
            truncated: s.truncated,
            during: s.during,
        }
    }
}

impl From<v1::AttributedSample> for m::AttributedSample {
    fn from(s: v1::AttributedSample) -> Self {
        m::AttributedSample {
            timestamp_ns: s.timestamp_ns,
            pid: s.pid,
            tid: s.tid,
            ip: s.ip,
            kernel: s.kernel,
            section: model_section(s.section),
            name: s.name,
            module: s.module,
            code_start: s.code_start,
            stack: s
                .stack
                .into_iter()
                .map(|f| m::StackFrame {
                    address: f.address,
                    kernel: f.kernel,
                    frame: f.frame,
                    code_start: f.code_start,
                })
                .collect(),
            truncated: s.truncated,
            during: s.during,
        }
    }
}

// Rows and issues.

impl From<m::ProfileRow> for v1::ProfileRow {
    fn from(r: m::ProfileRow) -> Self {
        v1::ProfileRow {
            section: section(r.section) as i32,
            name: r.name,
            module: r.module,
            samples: r.samples,
            symbolized: r.symbolized,
            kind: code_kind(r.kind) as i32,
            ranges: r
                .ranges
                .into_iter()
                .map(|c| v1::CodeRange {
                    label: c.label,
                    samples: c.samples,
                })
                .collect(),
            inlined: r
                .inlined
                .into_iter()
                .map(|i| v1::InlinedMethod {
                    name: i.name,
                    samples: i.samples,
                })
                .collect(),
            code_map: r.code_map,
            optimised: r.optimised,
            processes: r
                .processes
                .into_iter()
                .map(|p| v1::ProcessSamples {
                    pid: p.pid,
                    command: p.command,
                    samples: p.samples,
                })
                .collect(),
            inclusive_samples: r.inclusive_samples,
            srcline: r.srcline,
            source_lines: r
                .source_lines
                .into_iter()
                .map(|l| v1::SourceLineSamples {
                    file: l.file,
                    line: l.line,
                    pid: l.pid,
                    samples: l.samples,
                })
                .collect(),
            later_snapshot_samples: r.later_snapshot_samples,
            threads: r
                .threads
                .into_iter()
                .map(|t| v1::ThreadSamples {
                    pid: t.pid,
                    tid: t.tid,
                    name: t.name,
                    samples: t.samples,
                })
                .collect(),
            labels: r
                .labels
                .into_iter()
                .map(|l| v1::LabelSetSamples {
                    pid: l.pid,
                    labels: l.labels,
                    samples: l.samples,
                })
                .collect(),
        }
    }
}

impl From<v1::ProfileRow> for m::ProfileRow {
    fn from(r: v1::ProfileRow) -> Self {
        m::ProfileRow {
            section: model_section(r.section),
            name: r.name,
            module: r.module,
            samples: r.samples,
            symbolized: r.symbolized,
            kind: model_code_kind(r.kind),
            ranges: r
                .ranges
                .into_iter()
                .map(|c| m::CodeRange {
                    label: c.label,
                    samples: c.samples,
                })
                .collect(),
            inlined: r
                .inlined
                .into_iter()
                .map(|i| m::InlinedMethod {
                    name: i.name,
                    samples: i.samples,
                })
                .collect(),
            code_map: r.code_map,
            optimised: r.optimised,
            processes: r
                .processes
                .into_iter()
                .map(|p| m::ProcessSamples {
                    pid: p.pid,
                    command: p.command,
                    samples: p.samples,
                })
                .collect(),
            inclusive_samples: r.inclusive_samples,
            srcline: r.srcline,
            source_lines: r
                .source_lines
                .into_iter()
                .map(|l| m::SourceLineSamples {
                    file: l.file,
                    line: l.line,
                    pid: l.pid,
                    samples: l.samples,
                })
                .collect(),
            later_snapshot_samples: r.later_snapshot_samples,
            threads: r
                .threads
                .into_iter()
                .map(|t| m::ThreadSamples {
                    pid: t.pid,
                    tid: t.tid,
                    name: t.name,
                    samples: t.samples,
                })
                .collect(),
            labels: r
                .labels
                .into_iter()
                .map(|l| m::LabelSetSamples {
                    pid: l.pid,
                    labels: l.labels,
                    samples: l.samples,
                })
                .collect(),
        }
    }
}

/// A kind of symbolisation issue as the API says it.
pub fn issue_kind(kind: Option<m::IssueKind>) -> v1::SymbolizationIssueKind {
    use m::IssueKind as K;
    use v1::SymbolizationIssueKind as P;
    match kind {
        None => P::Unspecified,
        Some(K::BinaryUnreadable) => P::BinaryUnreadable,
        Some(K::OutsideSegments) => P::OutsideSegments,
        Some(K::Stripped) => P::Stripped,
        Some(K::NoSymbol) => P::NoSymbol,
        Some(K::BinaryClosed) => P::BinaryClosed,
        Some(K::KernelAddressesHidden) => P::KernelAddressesHidden,
        Some(K::NotInKallsyms) => P::NotInKallsyms,
        Some(K::KernelNotShown) => P::KernelNotShown,
        Some(K::JitUnexplained) => P::JitUnexplained,
        Some(K::ProcessGone) => P::ProcessGone,
        Some(K::Unmapped) => P::Unmapped,
        Some(K::MappingsUnreadable) => P::MappingsUnreadable,
        Some(K::PseudoMapping) => P::PseudoMapping,
        Some(K::DaemonBug) => P::DaemonBug,
    }
}

/// A kind of symbolisation issue as a daemon said it; `None` when it did not say, or said
/// something this build does not know.
pub fn model_issue_kind(kind: i32) -> Option<m::IssueKind> {
    use m::IssueKind as K;
    use v1::SymbolizationIssueKind as P;
    Some(match P::try_from(kind).ok()? {
        P::Unspecified => return None,
        P::BinaryUnreadable => K::BinaryUnreadable,
        P::OutsideSegments => K::OutsideSegments,
        P::Stripped => K::Stripped,
        P::NoSymbol => K::NoSymbol,
        P::BinaryClosed => K::BinaryClosed,
        P::KernelAddressesHidden => K::KernelAddressesHidden,
        P::NotInKallsyms => K::NotInKallsyms,
        P::KernelNotShown => K::KernelNotShown,
        P::JitUnexplained => K::JitUnexplained,
        P::ProcessGone => K::ProcessGone,
        P::Unmapped => K::Unmapped,
        P::MappingsUnreadable => K::MappingsUnreadable,
        P::PseudoMapping => K::PseudoMapping,
        P::DaemonBug => K::DaemonBug,
    })
}

impl From<m::SymbolizationIssue> for v1::SymbolizationIssue {
    fn from(i: m::SymbolizationIssue) -> Self {
        v1::SymbolizationIssue {
            module: i.module,
            reason: i.reason,
            samples: i.samples,
            kind: issue_kind(i.kind) as i32,
        }
    }
}

impl From<v1::SymbolizationIssue> for m::SymbolizationIssue {
    fn from(i: v1::SymbolizationIssue) -> Self {
        m::SymbolizationIssue {
            module: i.module,
            reason: i.reason,
            samples: i.samples,
            kind: model_issue_kind(i.kind),
        }
    }
}

// The kernel's counts.

impl From<m::KernelEvents> for v1::KernelEvents {
    fn from(e: m::KernelEvents) -> Self {
        v1::KernelEvents {
            total: e.total.map(Into::into),
            processes: e
                .processes
                .into_iter()
                .map(|p| v1::ProcessKernelCounts {
                    pid: p.pid,
                    command: p.command,
                    counts: p.counts.map(Into::into),
                    threads: p.threads,
                    note: p.note,
                })
                .collect(),
            unavailable: e.unavailable,
        }
    }
}

impl From<v1::KernelEvents> for m::KernelEvents {
    fn from(e: v1::KernelEvents) -> Self {
        m::KernelEvents {
            total: e.total.map(Into::into),
            processes: e
                .processes
                .into_iter()
                .map(|p| m::ProcessKernelCounts {
                    pid: p.pid,
                    command: p.command,
                    counts: p.counts.map(Into::into),
                    threads: p.threads,
                    note: p.note,
                })
                .collect(),
            unavailable: e.unavailable,
        }
    }
}

impl From<m::KernelCounts> for v1::KernelCounts {
    fn from(c: m::KernelCounts) -> Self {
        v1::KernelCounts {
            context_switches: c.context_switches,
            voluntary_context_switches: c.voluntary_context_switches,
            involuntary_context_switches: c.involuntary_context_switches,
            cpu_migrations: c.cpu_migrations,
            minor_faults: c.minor_faults,
            major_faults: c.major_faults,
            cycles: c.cycles,
            instructions: c.instructions,
            cache_misses: c.cache_misses,
        }
    }
}

impl From<v1::KernelCounts> for m::KernelCounts {
    fn from(c: v1::KernelCounts) -> Self {
        m::KernelCounts {
            context_switches: c.context_switches,
            voluntary_context_switches: c.voluntary_context_switches,
            involuntary_context_switches: c.involuntary_context_switches,
            cpu_migrations: c.cpu_migrations,
            minor_faults: c.minor_faults,
            major_faults: c.major_faults,
            cycles: c.cycles,
            instructions: c.instructions,
            cache_misses: c.cache_misses,
        }
    }
}

// VM statistics.

/// A kind of interval as the API says it: its kind, and the name a VM gave its own.
pub fn interval_kind(kind: &m::IntervalKind) -> (v1::IntervalKind, String) {
    match kind {
        m::IntervalKind::Scavenge => (v1::IntervalKind::Scavenge, String::new()),
        m::IntervalKind::FullGc => (v1::IntervalKind::FullGc, String::new()),
        m::IntervalKind::CodeCompaction => (v1::IntervalKind::CodeCompaction, String::new()),
        m::IntervalKind::Safepoint => (v1::IntervalKind::Safepoint, String::new()),
        m::IntervalKind::Named(name) => (v1::IntervalKind::Named, name.clone()),
    }
}

/// A kind of interval as a daemon said it: a kind this build does not know goes by its name,
/// as reports key it.
pub fn model_interval_kind(kind: i32, name: String) -> m::IntervalKind {
    match v1::IntervalKind::try_from(kind) {
        Ok(v1::IntervalKind::Scavenge) => m::IntervalKind::Scavenge,
        Ok(v1::IntervalKind::FullGc) => m::IntervalKind::FullGc,
        Ok(v1::IntervalKind::CodeCompaction) => m::IntervalKind::CodeCompaction,
        Ok(v1::IntervalKind::Safepoint) => m::IntervalKind::Safepoint,
        _ => m::IntervalKind::Named(name),
    }
}

impl From<m::heap::HeapHistogram> for v1::HeapHistogram {
    fn from(h: m::heap::HeapHistogram) -> Self {
        v1::HeapHistogram {
            id: h.id,
            pid: h.pid,
            command: h.command,
            taken_at: h.taken_at.map(prost_types::Timestamp::from),
            elapsed: h
                .elapsed
                .and_then(|d| prost_types::Duration::try_from(d).ok()),
            pause: h
                .pause
                .and_then(|d| prost_types::Duration::try_from(d).ok()),
            live: h.live,
            runtime: h.runtime,
            classes: h
                .classes
                .into_iter()
                .map(|c| v1::ClassCount {
                    name: c.name,
                    module: c.module,
                    instances: c.instances,
                    bytes: c.bytes,
                })
                .collect(),
            total_instances: h.total_instances,
            total_bytes: h.total_bytes,
        }
    }
}

impl From<v1::HeapHistogram> for m::heap::HeapHistogram {
    fn from(h: v1::HeapHistogram) -> Self {
        m::heap::HeapHistogram {
            id: h.id,
            pid: h.pid,
            command: h.command,
            taken_at: h.taken_at.and_then(|t| SystemTime::try_from(t).ok()),
            elapsed: h.elapsed.and_then(|d| Duration::try_from(d).ok()),
            pause: h.pause.and_then(|d| Duration::try_from(d).ok()),
            live: h.live,
            runtime: h.runtime,
            classes: h
                .classes
                .into_iter()
                .map(|c| m::heap::ClassCount {
                    name: c.name,
                    module: c.module,
                    instances: c.instances,
                    bytes: c.bytes,
                })
                .collect(),
            total_instances: h.total_instances,
            total_bytes: h.total_bytes,
        }
    }
}

impl From<m::heap::HeapStructures> for v1::HeapQueryResult {
    fn from(h: m::heap::HeapStructures) -> Self {
        v1::HeapQueryResult {
            pid: h.pid,
            command: h.command,
            taken_at: h.taken_at.map(prost_types::Timestamp::from),
            elapsed: h
                .elapsed
                .and_then(|d| prost_types::Duration::try_from(d).ok()),
            pause: h
                .pause
                .and_then(|d| prost_types::Duration::try_from(d).ok()),
            live: h.live,
            runtime: h.runtime,
            structures: h
                .structures
                .into_iter()
                .map(|s| v1::Structure {
                    root: s.root,
                    objects: s.objects,
                    bytes: s.bytes,
                })
                .collect(),
        }
    }
}

impl From<v1::HeapQueryResult> for m::heap::HeapStructures {
    fn from(h: v1::HeapQueryResult) -> Self {
        m::heap::HeapStructures {
            pid: h.pid,
            command: h.command,
            taken_at: h.taken_at.and_then(|t| SystemTime::try_from(t).ok()),
            elapsed: h.elapsed.and_then(|d| Duration::try_from(d).ok()),
            pause: h.pause.and_then(|d| Duration::try_from(d).ok()),
            live: h.live,
            runtime: h.runtime,
            structures: h
                .structures
                .into_iter()
                .map(|s| m::heap::StructureCount {
                    root: s.root,
                    objects: s.objects,
                    bytes: s.bytes,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile with one of everything, every enum away from its default.
    fn everything() -> m::Profile {
        let started = SystemTime::UNIX_EPOCH + Duration::new(1_795_341_600, 500);
        m::Profile {
            session: Some(m::Session {
                id: 7,
                state: Some(m::SessionState::Stopping),
                targets: vec![m::TargetProcess {
                    pid: 42,
                    command: "jitvm".into(),
                    executable: "/usr/bin/jitvm".into(),
                    exited: true,
                    note: "gone".into(),
                }],
                frequency_hz: 997,
                started_at: Some(started),
                elapsed: Some(Duration::from_millis(1500)),
                duration_limit: Some(Duration::from_secs(3)),
                stop_reason: "asked".into(),
                call_graph: Some(m::CallGraph::Dwarf),
                dwarf_stack_bytes: 16384,
                mode: m::ProfileMode::Wall,
                min_block_ns: 20_000,
                ..m::Session::default()
            }),
            total_samples: 10,
            throttled: true,
            taken_frequency_hz: 300.5,
            frames: vec![m::Frame {
                section: m::Section::Generated,
                name: "at:put:".into(),
                kind: Some(m::CodeKind::ClosedPic),
                range: "@12".into(),
                line: 3,
                later_snapshot: true,
                ..m::Frame::default()
            }],
            sample_types: m::SampleType::of_mode(m::ProfileMode::Wall).to_vec(),
            threads: vec![m::Thread {
                pid: 42,
                tid: 43,
                name: "GC Thread#0".into(),
                samples: 10,
                cpu_ns: 10_030_090,
                off_cpu_blocks: 4,
                off_cpu_ns: 7_000,
                off_cpu_during: vec![m::IntervalTime { kind: 0, ns: 6_000 }],
            }],
            off_cpu: Some(m::OffCpu {
                blocks: 4,
                total_ns: 7_000,
                rows: vec![m::ProfileRow {
                    name: "futex_wait".into(),
                    samples: 7_000,
                    ..m::ProfileRow::default()
                }],
                states: vec![m::StateTime {
                    state: m::BlockState::Uninterruptible,
                    blocks: 4,
                    ns: 7_000,
                }],
                short_blocks: 9,
                short_ns: 900,
                lost_blocks: 1,
                unfollowed: 2,
                still_blocked_ns: 3_000,
                still_blocked_threads: 1,
            }),
            thread_filter: "tid 43".into(),
            // A stack, one that recurses once under it (sharing its node), and one without
            // frames.
            stack_nodes: vec![
                m::StackNode {
                    frame: 0,
                    caller: None,
                },
                m::StackNode {
                    frame: 0,
                    caller: Some(0),
                },
            ],
            stacks: vec![
                m::Stack {
                    node: Some(0),
                    pid: 42,
                    tid: 43,
                    values: vec![10, 10_030_090, 0, 0, 10_030_090],
                    end: Some(m::StackEnd::JitNoFramePointer),
                    during: vec![0],
                    ..m::Stack::default()
                },
                m::Stack {
                    node: Some(1),
                    values: vec![0, 0, 4, 7_000, 7_000],
                    state: Some(m::BlockState::Uninterruptible),
                    ..m::Stack::default()
                },
                m::Stack {
                    node: None,
                    values: vec![1, 0, 0, 0, 0],
                    ..m::Stack::default()
                },
            ],
            stack_ends: vec![m::StackEndSamples {
                end: m::StackEnd::CopyFaulted,
                samples: 10,
            }],
            rows: vec![m::ProfileRow {
                section: m::Section::Vanilla,
                name: "main".into(),
                kind: Some(m::CodeKind::Stub),
                ranges: vec![m::CodeRange {
                    label: "1->end".into(),
                    samples: 10,
                }],
                processes: vec![m::ProcessSamples {
                    pid: 42,
                    command: "jitvm".into(),
                    samples: 10,
                }],
                source_lines: vec![m::SourceLineSamples {
                    file: "a.c".into(),
                    line: 2,
                    pid: 42,
                    samples: 4,
                }],
                threads: vec![m::ThreadSamples {
                    pid: 42,
                    tid: 43,
                    name: "GC Thread#0".into(),
                    samples: 10,
                }],
                labels: vec![m::LabelSetSamples {
                    pid: 42,
                    labels: vec![0],
                    samples: 6,
                }],
                ..m::ProfileRow::default()
            }],
            symbolization_issues: vec![m::SymbolizationIssue {
                module: "libx.so".into(),
                reason: "stripped".into(),
                samples: 3,
                kind: Some(m::IssueKind::PseudoMapping),
            }],
            samples: vec![m::AttributedSample {
                section: m::Section::Generated,
                stack: vec![m::StackFrame {
                    address: 0x1000,
                    kernel: true,
                    frame: 0,
                    code_start: 0xf00,
                }],
                ..m::AttributedSample::default()
            }],
            kernel_events: Some(m::KernelEvents {
                total: Some(m::KernelCounts {
                    cycles: Some(5),
                    ..m::KernelCounts::default()
                }),
                processes: vec![m::ProcessKernelCounts {
                    pid: 42,
                    counts: None,
                    note: "not counted".into(),
                    ..m::ProcessKernelCounts::default()
                }],
                unavailable: vec!["no PMU".into()],
            }),
            vm_statistics: vec![m::VmStatistics {
                pid: 42,
                configuration: vec![
                    m::Configuration {
                        name: "eden".into(),
                        value: Some(m::ConfigValue::Number(-1)),
                        unit: "bytes".into(),
                    },
                    m::Configuration {
                        name: "unset".into(),
                        value: None,
                        unit: String::new(),
                    },
                ],
                gauges: vec![m::GaugeDelta {
                    name: "old".into(),
                    delta: -5,
                    ..m::GaugeDelta::default()
                }],
                intervals: vec![m::IntervalTotals {
                    kind: m::IntervalKind::Named("marking".into()),
                    count: 1,
                    total_ns: 2,
                    longest_ns: 2,
                    sampled: 1,
                }],
                ..m::VmStatistics::default()
            }],
            vm_interval_kinds: vec![
                m::IntervalKind::Safepoint,
                m::IntervalKind::Named("marking".into()),
            ],
            ..m::Profile::default()
        }
    }

    #[test]
    fn a_profile_crosses_the_api_and_back_unchanged() {
        let profile = everything();
        let sent = v1::Profile::from(profile.clone());
        assert_eq!(sent.frames[0].kind, v1::CodeKind::ClosedPic as i32);
        let frames: Vec<&[u32]> = sent.stacks.iter().map(|s| &s.frames[..]).collect();
        assert_eq!(
            frames,
            [&[0][..], &[0, 0], &[]],
            "each stack's frames, leaf first"
        );
        assert_eq!(
            sent.vm_interval_kinds[1].kind,
            v1::IntervalKind::Named as i32
        );
        assert_eq!(m::Profile::from(sent), profile);
    }

    /// What a newer daemon may say that this build does not know: never lost, never a panic.
    #[test]
    fn a_heap_histogram_crosses_the_api_and_back_unchanged() {
        let histogram = m::heap::HeapHistogram {
            id: 3,
            pid: 77,
            command: "java".into(),
            taken_at: Some(SystemTime::UNIX_EPOCH + Duration::new(1_795_341_600, 500)),
            elapsed: Some(Duration::from_millis(312)),
            pause: Some(Duration::from_micros(287_123)),
            live: true,
            runtime: "hotspot".into(),
            classes: vec![m::heap::ClassCount {
                name: "[B".into(),
                module: "java.base@17.0.15".into(),
                instances: 13_028,
                bytes: 793_848,
            }],
            total_instances: 13_028,
            total_bytes: 793_848,
        };
        let api: v1::HeapHistogram = histogram.clone().into();
        assert_eq!(m::heap::HeapHistogram::from(api), histogram);
    }

    #[test]
    fn unknown_values_become_what_the_model_says_of_unknowns() {
        assert_eq!(model_section(0), m::Section::Other);
        assert_eq!(model_section(99), m::Section::Other);
        assert_eq!(model_code_kind(0), None);
        assert_eq!(model_code_kind(99), None);
        assert_eq!(model_stack_end(0), None);
        assert_eq!(model_stack_end(99), None);
        assert_eq!(model_issue_kind(99), None);
        assert_eq!(
            model_interval_kind(99, "future".into()),
            m::IntervalKind::Named("future".into())
        );
        let session = m::Session::from(v1::Session {
            state: 99,
            call_graph: 99,
            ..v1::Session::default()
        });
        assert_eq!((session.state, session.call_graph), (None, None));
    }

    /// A newer daemon's sample type is dropped with its values, and samples come first
    /// wherever the daemon put them; a daemon older than sample types measured samples alone.
    #[test]
    fn values_of_unknown_sample_types_are_dropped_with_their_type() {
        let stack = |values: Vec<u64>, samples| v1::Stack {
            values,
            samples,
            ..v1::Stack::default()
        };
        let newer = m::Profile::from(v1::Profile {
            sample_types: vec![
                99,
                v1::SampleType::CpuTime as i32,
                v1::SampleType::Samples as i32,
            ],
            stacks: vec![stack(vec![7, 2_000, 2], 2)],
            ..v1::Profile::default()
        });
        assert_eq!(
            newer.sample_types,
            [m::SampleType::Samples, m::SampleType::CpuTime]
        );
        assert_eq!(newer.stacks[0].values, [2, 2_000]);
        let older = m::Profile::from(v1::Profile {
            stacks: vec![stack(Vec::new(), 5)],
            ..v1::Profile::default()
        });
        assert_eq!(older.sample_types, [m::SampleType::Samples]);
        assert_eq!(older.stacks[0].values, [5]);
        assert_eq!(older.stacks[0].samples(), 5);
    }
}
