//! Turning a session [`Snapshot`] into the API's [`Profile`]: symbolise each distinct location
//! once, expand it into the frames a stack shows (a JIT frame of optimised code into its
//! inlined methods, a native frame into the functions inlined at its address, with their source
//! lines, from DWARF), then aggregate:
//!
//! - rows by (section, module, name), from each stack's leaf (self time), each with its samples
//!   per process, its ranges and inlined methods, its samples per source line of the leaf, and
//!   its inclusive samples (stacks holding it anywhere, once per stack);
//! - stacks of frames per process;
//! - problems by (module, reason).
//!
//! Rows are sent unfolded and sorted, most samples first; folding small rows into
//! `...others...` and percentages are the report's business (vmscope-report), so that every
//! client gets every number.

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap, HashSet},
};

use vmscope_proto::v1::{
    self as pb, AttributedSample, CodeKind, CodeRange, Frame, InlinedMethod, ProcessSamples,
    Profile, ProfileRow, Section, SourceLineSamples, Stack, StackEndSamples, StackFrame,
    SymbolizationIssue,
};

use vmscope_report::rank::{most_first, rank};

use crate::{
    cancel::Cancel,
    codemap::code::Code,
    session::{DuringId, LocationId, Snapshot, StackSnapshot},
    stats::{
        kernel::{Counts, KernelEvents},
        summary::VmStatistics,
        vm::{ConfigValue, IntervalKind},
    },
    symbolize::{Issue, KERNEL_MODULE, Resolved, SourceFrame, Symbolizer},
    vocab::{Location, StackEnd, UnmappedReason},
};

/// Functions a thread starts in: a stack whose outermost frame is one of them is whole. A
/// frame-pointer walk ending anywhere else was cut by code without frame pointers. With glibc,
/// the main thread's walk ends at `__libc_start_call_main` (libc keeps no frame pointer, so
/// the walk stops in the frame that called `main`), other threads' at `start_thread` or
/// `clone3`.
const THREAD_ENTRY_POINTS: [&str; 9] = [
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

/// How the API says a stack ended. A frame-pointer walk that simply ended is whole when its
/// outermost frame is a thread's entry point (or kernel code: a kernel thread), and was cut by
/// code without frame pointers otherwise.
fn stack_end(end: Option<StackEnd>, outermost: Option<&Placed>) -> pb::StackEnd {
    if outermost.is_some_and(|p| p.stack_limit) {
        return pb::StackEnd::StackLimit;
    }
    let Some(end) = end else {
        return pb::StackEnd::Unspecified;
    };
    match end {
        StackEnd::Complete => pb::StackEnd::Complete,
        StackEnd::FrameLimit => pb::StackEnd::DepthLimit,
        StackEnd::NoFramePointer => pb::StackEnd::NoFramePointer,
        StackEnd::JitWithoutFramePointer => pb::StackEnd::JitNoFramePointer,
        StackEnd::Unmapped => pb::StackEnd::UnmappedReturn,
        StackEnd::CopyTooSmall => pb::StackEnd::CopyTooSmall,
        StackEnd::CopyFaulted => pb::StackEnd::CopyFaulted,
        StackEnd::NoProgress
        | StackEnd::NullReturnAddress
        | StackEnd::FramePointerBackwards
        | StackEnd::BadAddress => pb::StackEnd::UnwindFailed,
        StackEnd::FramePointerChainEnded => match outermost {
            Some(p)
                if p.resolved.module == KERNEL_MODULE
                    || THREAD_ENTRY_POINTS.contains(&p.resolved.name.as_str()) =>
            {
                pb::StackEnd::Complete
            }
            _ => pb::StackEnd::NoFramePointer,
        },
    }
}

/// What a profile may show its reader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileOptions {
    /// Name kernel functions. When false, kernel samples are one `[kernel]` row, with this
    /// reason.
    pub hide_kernel: Option<String>,
}

/// What one row accumulates.
#[derive(Debug, Default)]
struct RowSum {
    samples: u64,
    inclusive: u64,
    symbolized: bool,
    kind: CodeKind,
    code_map: &'static str,
    /// Samples per range, in code order (range index, then label).
    ranges: BTreeMap<(usize, String), u64>,
    /// Samples per inlined method (optimised code).
    inlined: BTreeMap<String, u64>,
    /// Samples per process.
    processes: HashMap<u32, u64>,
    /// Samples per (source line of the leaf, as an index into [`SourceLinesTable`], process).
    lines: HashMap<(u32, u32), u64>,
    /// Samples named from a perf map read after them.
    later_snapshot: u64,
}

/// Distinct (file, line) pairs of leaf frames, each stored once.
#[derive(Debug, Default)]
struct SourceLinesTable {
    lines: Vec<(String, u32)>,
    index: HashMap<(String, u32), u32>,
}

impl SourceLinesTable {
    fn id(&mut self, file: &str, line: u32) -> u32 {
        let key = (file.to_owned(), line);
        if let Some(&id) = self.index.get(&key) {
            return id;
        }
        let id = self.lines.len() as u32;
        self.lines.push(key.clone());
        self.index.insert(key, id);
        id
    }
}

/// A row's identity: (section, module, name, optimised).
type RowKey = (Section, String, String, bool);

/// A distinct location, symbolised once.
#[derive(Debug)]
struct Placed {
    resolved: Resolved,
    /// Generated code a code map names: what its row shows of it.
    code: Option<CodeDetail>,
    /// Its row.
    row: usize,
    /// Its frames, leaf first, as indices into the profile's frames: one, or for optimised
    /// code the inlined methods at its pc then the compiled method.
    frames: Vec<u32>,
    /// The frame its address belongs to: the compiled method's for optimised code, the
    /// containing function's for native code with inlined functions.
    own_frame: u32,
    /// The source line of its address (innermost inlined function's), from DWARF.
    line: Option<u32>,
    /// Generated code named from a perf map read after the sample.
    later_snapshot: bool,
    /// The caller of stacks cut at the session's stack limit.
    stack_limit: bool,
}

/// What a row shows of a location in generated code a code map names: derived once per
/// location, not once per stack it is the leaf of.
#[derive(Debug)]
struct CodeDetail {
    kind: CodeKind,
    code_map: &'static str,
    /// The range the location is in: its index among the code's ranges, and its label.
    range: Option<(usize, String)>,
    /// Optimised code: the method the location's time belongs to.
    inlined_method: Option<String>,
}

/// Distinct frames, each stored once.
#[derive(Debug, Default)]
struct Frames {
    frames: Vec<Frame>,
    index: HashMap<Frame, u32>,
}

impl Frames {
    fn id(&mut self, frame: Frame) -> u32 {
        if let Some(&id) = self.index.get(&frame) {
            return id;
        }
        let id = self.frames.len() as u32;
        self.frames.push(frame.clone());
        self.index.insert(frame, id);
        id
    }
}

/// Builds the profile of a snapshot. Runs on a blocking thread: the first profile of a session
/// may parse binaries.
pub fn build_profile(
    snapshot: Snapshot,
    symbolizer: &Symbolizer,
    options: &ProfileOptions,
) -> Profile {
    build_profile_unless(snapshot, symbolizer, options, &Cancel::never()).expect("never cancelled")
}

/// Locations or stacks handled between two looks at the cancellation flag.
const CANCEL_CHECK_EVERY: usize = 1024;

/// [`build_profile`], given up (`None`) soon after `cancel` is set: nobody waits for it.
pub fn build_profile_unless(
    snapshot: Snapshot,
    symbolizer: &Symbolizer,
    options: &ProfileOptions,
    cancel: &Cancel,
) -> Option<Profile> {
    let cancelled = |i: usize| i.is_multiple_of(CANCEL_CHECK_EVERY) && cancel.is_set();
    let stacks = &snapshot.stacks;
    let mut frames = Frames::default();
    let mut source_lines = SourceLinesTable::default();
    let mut row_keys: Vec<RowKey> = Vec::new();
    let mut row_index: HashMap<RowKey, usize> = HashMap::new();
    let placed: Vec<Placed> = stacks
        .locations
        .iter()
        .enumerate()
        .map(|(i, location)| {
            if cancelled(i) {
                return None;
            }
            let resolved = resolve(symbolizer, location, options);
            let code = match location {
                Location::Jit { code, offset, .. } => {
                    symbolizer.codes().get(*code).map(|c| (c, *offset))
                }
                _ => None,
            };
            let optimised = code.as_ref().is_some_and(|(c, _)| c.is_optimised());
            let key = (
                resolved.section,
                resolved.module.clone(),
                resolved.name.clone(),
                optimised,
            );
            let row = *row_index.entry(key.clone()).or_insert_with(|| {
                row_keys.push(key);
                row_keys.len() - 1
            });
            let detail = code.as_ref().map(|(code, offset)| CodeDetail {
                kind: code_kind(code.kind),
                code_map: code.source.label(),
                range: code.range_label(*offset),
                inlined_method: optimised.then(|| code.attributed_method(*offset).to_owned()),
            });
            let mut line = None;
            let (frame_ids, own_frame) = match (&code, &detail) {
                (Some((code, offset)), Some(detail)) => {
                    let label = detail.range.as_ref().map(|(_, label)| label.as_str());
                    let later = matches!(
                        location,
                        Location::Jit {
                            later_snapshot: true,
                            ..
                        }
                    );
                    jit_frames(&mut frames, &resolved, code, *offset, label, later)
                }
                _ => {
                    let sources = symbolizer.source_frames(location);
                    line = sources
                        .first()
                        .and_then(|leaf| Some((leaf.file.as_deref()?, leaf.line)))
                        .filter(|&(_, line)| line > 0)
                        .map(|(file, line)| source_lines.id(file, line));
                    native_frames(&mut frames, &resolved, location, &sources)
                }
            };
            Some(Placed {
                resolved,
                code: detail,
                row,
                frames: frame_ids,
                own_frame,
                line,
                later_snapshot: matches!(
                    location,
                    Location::Jit {
                        later_snapshot: true,
                        ..
                    }
                ),
                stack_limit: *location == Location::StackLimit,
            })
        })
        .collect::<Option<_>>()?;

    // Rows: self time from each stack's leaf, inclusive time from every location in it.
    let mut rows: Vec<RowSum> = (0..row_keys.len()).map(|_| RowSum::default()).collect();
    // Samples of each distinct leaf location with an issue: its issue is worded once, after.
    let mut issue_samples: Vec<u64> = vec![0; placed.len()];
    let mut stack_rows: Vec<usize> = Vec::new();
    for (i, &(pid, stack, samples)) in stacks.counts.iter().enumerate() {
        if cancelled(i) {
            return None;
        }
        let ids = stacks.ids_of(stack);
        let Some(&leaf_id) = ids.first() else {
            continue;
        };
        let leaf = &placed[leaf_id.0 as usize];
        let row = &mut rows[leaf.row];
        row.samples += samples;
        if leaf.later_snapshot {
            row.later_snapshot += samples;
        }
        *row.processes.entry(pid).or_insert(0) += samples;
        if let Some(line) = leaf.line {
            *row.lines.entry((line, pid)).or_insert(0) += samples;
        }
        row.symbolized = leaf.resolved.symbolized;
        if let Some(code) = &leaf.code {
            row.kind = code.kind;
            row.code_map = code.code_map;
            if let Some(range) = &code.range {
                add(&mut row.ranges, range, samples);
            }
            if let Some(method) = &code.inlined_method {
                add(&mut row.inlined, method, samples);
            }
        }
        if leaf.resolved.issue.is_some() {
            issue_samples[leaf_id.0 as usize] += samples;
        }
        stack_rows.clear();
        stack_rows.extend(ids.iter().map(|id| placed[id.0 as usize].row));
        stack_rows.sort_unstable();
        stack_rows.dedup();
        for &row in &stack_rows {
            rows[row].inclusive += samples;
        }
    }

    // Stacks of frames, merged where distinct locations name the same frames.
    let hidden_kernel = options.hide_kernel.is_some();
    let (vm_interval_kinds, during) = interval_kinds(stacks);
    let mut by_frames: HashMap<(u32, Vec<u32>, pb::StackEnd, DuringId), u64> = HashMap::new();
    let mut ends: BTreeMap<pb::StackEnd, u64> = BTreeMap::new();
    for (i, &(pid, stack, samples)) in stacks.counts.iter().enumerate() {
        if cancelled(i) {
            return None;
        }
        let ids = stacks.ids_of(stack);
        let frame_ids = stack_frames(ids, &placed, hidden_kernel);
        let outermost = ids.last().map(|id| &placed[id.0 as usize]);
        let span = &stacks.stacks[stack.0 as usize];
        let end = stack_end(span.end, outermost);
        if end != pb::StackEnd::Unspecified {
            *ends.entry(end).or_insert(0) += samples;
        }
        *by_frames
            .entry((pid, frame_ids, end, span.during))
            .or_insert(0) += samples;
    }
    let mut profile_stacks: Vec<Stack> = by_frames
        .into_iter()
        .map(|((pid, frames, end, during_id), samples)| Stack {
            frames,
            pid,
            samples,
            truncated: end == pb::StackEnd::DepthLimit,
            end: end as i32,
            during: during[during_id.0 as usize].clone(),
        })
        .collect();
    let mut stack_ends: Vec<StackEndSamples> = ends
        .into_iter()
        .map(|(end, samples)| StackEndSamples {
            end: end as i32,
            samples,
        })
        .collect();
    rank(&mut stack_ends, |e| e.samples, |a, b| a.end.cmp(&b.end));
    rank(
        &mut profile_stacks,
        |s| s.samples,
        |a, b| (a.pid, &a.frames, a.end, &a.during).cmp(&(b.pid, &b.frames, b.end, &b.during)),
    );

    let mut rows: Vec<ProfileRow> = rows
        .into_iter()
        .zip(row_keys)
        .filter(|(sum, _)| sum.samples > 0 || sum.inclusive > 0)
        .map(|(sum, (section, module, name, optimised))| {
            let mut inlined: Vec<InlinedMethod> = sum
                .inlined
                .into_iter()
                .map(|(name, samples)| InlinedMethod { name, samples })
                .collect();
            rank(&mut inlined, |i| i.samples, |a, b| a.name.cmp(&b.name));
            let mut processes: Vec<ProcessSamples> = sum
                .processes
                .into_iter()
                .map(|(pid, samples)| ProcessSamples {
                    pid,
                    command: snapshot.commands.get(&pid).cloned().unwrap_or_default(),
                    samples,
                })
                .collect();
            rank(&mut processes, |p| p.samples, |a, b| a.pid.cmp(&b.pid));
            let mut lines: Vec<SourceLineSamples> = sum
                .lines
                .into_iter()
                .map(|((line, pid), samples)| {
                    let (file, line) = &source_lines.lines[line as usize];
                    SourceLineSamples {
                        file: file.clone(),
                        line: *line,
                        pid,
                        samples,
                    }
                })
                .collect();
            rank(
                &mut lines,
                |l| l.samples,
                |a, b| (&a.file, a.line, a.pid).cmp(&(&b.file, b.line, b.pid)),
            );
            ProfileRow {
                section: section as i32,
                name,
                module,
                samples: sum.samples,
                later_snapshot_samples: sum.later_snapshot,
                symbolized: sum.symbolized,
                kind: sum.kind as i32,
                ranges: sum
                    .ranges
                    .into_iter()
                    .map(|((_, label), samples)| CodeRange { label, samples })
                    .collect(),
                inlined,
                code_map: sum.code_map.to_owned(),
                optimised,
                processes,
                inclusive_samples: sum.inclusive,
                srcline: String::new(),
                source_lines: lines,
            }
        })
        .collect();
    // Callers only (no self time) are rows too, with 0 samples: after every row with some.
    rank(
        &mut rows,
        |r| r.samples,
        |a, b| {
            most_first(a.inclusive_samples, b.inclusive_samples)
                .then_with(|| a.section.cmp(&b.section))
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| a.module.cmp(&b.module))
        },
    );
    let mut issues: HashMap<(&str, pb::SymbolizationIssueKind, Cow<'_, str>), u64> = HashMap::new();
    for (leaf, samples) in placed.iter().zip(issue_samples) {
        if let (Some(issue), 1..) = (&leaf.resolved.issue, samples) {
            *issues
                .entry((&leaf.resolved.module, issue_kind(issue), issue.describe()))
                .or_insert(0) += samples;
        }
    }
    let mut issues: Vec<SymbolizationIssue> = issues
        .into_iter()
        .map(|((module, kind, reason), samples)| SymbolizationIssue {
            module: module.to_owned(),
            reason: reason.into_owned(),
            samples,
            kind: kind as i32,
        })
        .collect();
    rank(
        &mut issues,
        |i| i.samples,
        |a, b| (&a.module, a.kind, &a.reason).cmp(&(&b.module, b.kind, &b.reason)),
    );

    let mut kept: Vec<&crate::session::KeptSample> = snapshot
        .kept
        .iter()
        .flat_map(|chunk| chunk.iter())
        .collect();
    kept.sort_by_key(|k| k.timestamp_ns);
    let samples = kept
        .into_iter()
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
                section: leaf.map_or(Section::Other, |r| r.section) as i32,
                name: leaf.map(|r| r.name.clone()).unwrap_or_default(),
                module: leaf.map(|r| r.module.clone()).unwrap_or_default(),
                code_start: kept.frames.first().map_or(0, |f| f.code_start),
                stack,
                truncated: stacks.stacks[kept.stack.0 as usize].truncated(),
                during: during[stacks.stacks[kept.stack.0 as usize].during.0 as usize].clone(),
            }
        })
        .collect();

    let processes = stacks
        .counts
        .iter()
        .map(|&(pid, _, _)| pid)
        .collect::<HashSet<_>>()
        .len() as u32;
    let duration_seconds = snapshot.duration.as_secs_f64();
    let measured_frequency_hz = if snapshot.cpu_seconds > 0.0 {
        snapshot.total_samples as f64 / snapshot.cpu_seconds
    } else {
        0.0
    };
    let lost_samples = snapshot.lost_per_cpu.iter().sum();
    let (taken_frequency_hz, throttled) = taken_rate(
        snapshot.total_samples + lost_samples,
        snapshot.cpu_seconds,
        snapshot.session.frequency_hz,
    );
    Some(Profile {
        // The server shows the session as the API does, beside the profile.
        session: None,
        vm_executable: snapshot.vm_executable,
        total_samples: snapshot.total_samples,
        lost_samples,
        lost_samples_per_cpu: snapshot.lost_per_cpu,
        duration_seconds,
        cpu_seconds: snapshot.cpu_seconds,
        measured_frequency_hz,
        rows,
        symbolization_issues: issues,
        has_generated_code: snapshot.has_generated_code,
        complete: snapshot.complete,
        samples,
        samples_not_kept: snapshot.not_kept,
        host_steal_percent: snapshot.host_steal_percent,
        incomplete_reason: snapshot.incomplete_reason.unwrap_or_default(),
        kernel_events: snapshot.kernel_events.map(kernel_events),
        vm_statistics: snapshot
            .vm_statistics
            .into_iter()
            .map(vm_statistics)
            .collect(),
        vm_interval_kinds,
        jit_samples_before_code_map: snapshot.jit.provisional,
        jit_samples_awaiting_code_map: snapshot.jit.awaiting,
        jit_samples_caught_up: snapshot.jit.caught_up,
        jit_samples_from_later_snapshot: snapshot.jit.later_snapshot,
        processes,
        frames: frames.frames,
        stacks: profile_stacks,
        truncated_stacks: snapshot.truncated,
        stack_ends,
        pprof: Vec::new(),
        taken_frequency_hz,
        throttled,
    })
}

/// A kind of interval as the API says it: its kind, and the name a VM gave its own.
fn interval_kind(kind: &IntervalKind) -> (pb::IntervalKind, String) {
    match kind {
        IntervalKind::Scavenge => (pb::IntervalKind::Scavenge, String::new()),
        IntervalKind::FullGc => (pb::IntervalKind::FullGc, String::new()),
        IntervalKind::CodeCompaction => (pb::IntervalKind::CodeCompaction, String::new()),
        IntervalKind::Safepoint => (pb::IntervalKind::Safepoint, String::new()),
        IntervalKind::Named(name) => (pb::IntervalKind::Named, name.clone()),
    }
}

/// A VM's statistics as the API carries them.
fn vm_statistics(stats: VmStatistics) -> pb::VmStatistics {
    pb::VmStatistics {
        pid: stats.pid,
        vm: stats.vm,
        configuration: stats
            .configuration
            .into_iter()
            .map(|setting| pb::Configuration {
                name: setting.name,
                value: Some(match setting.value {
                    ConfigValue::Number(n) => pb::configuration::Value::Number(n),
                    ConfigValue::Text(t) => pb::configuration::Value::Text(t),
                }),
                unit: setting.unit,
            })
            .collect(),
        counters: stats
            .counters
            .into_iter()
            .map(|c| pb::CounterDelta {
                name: c.name,
                unit: c.unit,
                delta: c.delta,
                last: c.last,
            })
            .collect(),
        gauges: stats
            .gauges
            .into_iter()
            .map(|g| pb::GaugeDelta {
                name: g.name,
                unit: g.unit,
                delta: g.delta,
                last: g.last,
                low: g.low,
                high: g.high,
            })
            .collect(),
        intervals: stats
            .intervals
            .into_iter()
            .map(|t| {
                let (kind, name) = interval_kind(&t.kind);
                pb::IntervalTotals {
                    kind: kind as i32,
                    name,
                    count: t.count,
                    total_ns: t.total_ns,
                    longest_ns: t.longest_ns,
                    sampled: t.sampled,
                }
            })
            .collect(),
        window_ns: stats.window_ns,
        samples: stats.samples,
    }
}

/// What the kernel counted as the API carries it.
fn kernel_events(events: KernelEvents) -> pb::KernelEvents {
    pb::KernelEvents {
        total: Some(kernel_counts(&events.total)),
        processes: events
            .processes
            .into_iter()
            .map(|p| pb::ProcessKernelCounts {
                pid: p.pid,
                command: p.command,
                counts: Some(kernel_counts(&p.counts)),
                threads: p.threads,
                note: p.note.unwrap_or_default(),
            })
            .collect(),
        unavailable: events.unavailable,
    }
}

/// One set of kernel counts as the API carries it.
fn kernel_counts(counts: &Counts) -> pb::KernelCounts {
    let switches = counts.switches();
    pb::KernelCounts {
        context_switches: counts.context_switches,
        voluntary_context_switches: switches.map(|(voluntary, _)| voluntary),
        involuntary_context_switches: switches.map(|(_, involuntary)| involuntary),
        cpu_migrations: counts.cpu_migrations,
        minor_faults: counts.minor_faults,
        major_faults: counts.major_faults,
        cycles: counts.cycles,
        instructions: counts.instructions,
        cache_misses: counts.cache_misses,
    }
}

/// A kind of generated code as the API says it.
fn code_kind(kind: crate::vocab::CodeKind) -> CodeKind {
    use crate::vocab::CodeKind as Kind;
    match kind {
        Kind::Method => CodeKind::Method,
        Kind::Block => CodeKind::Block,
        Kind::Trampoline => CodeKind::Trampoline,
        Kind::Enilopmart => CodeKind::Enilopmart,
        Kind::ClosedPic => CodeKind::ClosedPic,
        Kind::OpenPic => CodeKind::OpenPic,
        Kind::Stub => CodeKind::Stub,
        Kind::Unknown => CodeKind::Unknown,
    }
}

/// What kind of issue a symbolisation issue is, for clients that group them.
fn issue_kind(issue: &Issue) -> pb::SymbolizationIssueKind {
    use pb::SymbolizationIssueKind as Kind;
    match issue {
        Issue::Binary(_) => Kind::BinaryUnreadable,
        Issue::OutsideSegments => Kind::OutsideSegments,
        Issue::Stripped => Kind::Stripped,
        Issue::NoSymbol => Kind::NoSymbol,
        Issue::ModuleClosed => Kind::BinaryClosed,
        Issue::KernelAddressesHidden => Kind::KernelAddressesHidden,
        Issue::NotInKallsyms => Kind::NotInKallsyms,
        Issue::KernelHidden(_) => Kind::KernelNotShown,
        Issue::Unexplained(_) => Kind::JitUnexplained,
        Issue::Unmapped(UnmappedReason::ProcessGone) => Kind::ProcessGone,
        Issue::Unmapped(UnmappedReason::NoMapping) => Kind::Unmapped,
        Issue::Unmapped(UnmappedReason::Unreadable) => Kind::MappingsUnreadable,
        Issue::Unmapped(UnmappedReason::Pseudo) => Kind::PseudoMapping,
        Issue::UnregisteredModule | Issue::UnknownCode => Kind::DaemonBug,
    }
}

/// Below this share of the requested rate, samples taken (delivered plus lost) say the kernel
/// throttled sampling: the rate a cpu-clock event keeps, bunched or stolen ticks included, is
/// well above it.
const THROTTLED_BELOW: f64 = 0.9;

/// Least CPU time a throttling judgement is made over: below it, ticks are too few.
const THROTTLE_MIN_CPU_SECONDS: f64 = 0.5;

/// The rate the kernel took `taken` samples at, per busy CPU-second of `cpu_seconds`, and
/// whether it throttled sampling below `requested_hz`: the kernel lowers
/// `kernel.perf_event_max_sample_rate` when interrupts take too long, and no counter says so.
fn taken_rate(taken: u64, cpu_seconds: f64, requested_hz: u32) -> (f64, bool) {
    if cpu_seconds <= 0.0 {
        return (0.0, false);
    }
    let rate = taken as f64 / cpu_seconds;
    let throttled = requested_hz > 0
        && cpu_seconds >= THROTTLE_MIN_CPU_SECONDS
        && rate < THROTTLED_BELOW * f64::from(requested_hz);
    (rate, throttled)
}

/// The kinds of interval the stacks were taken during, each once (in the order reports list
/// them: scavenges, full GCs, compactions, safepoints, then the VMs' own by name), and each of
/// the snapshot's sets of kinds as indices into them.
fn interval_kinds(stacks: &StackSnapshot) -> (Vec<pb::VmIntervalKind>, Vec<Vec<u32>>) {
    let mut kinds: Vec<&IntervalKind> = stacks.during.iter().flatten().collect();
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
    let table = kinds
        .into_iter()
        .map(|kind| {
            let (kind, name) = interval_kind(kind);
            pb::VmIntervalKind {
                kind: kind as i32,
                name,
            }
        })
        .collect();
    // A snapshot with no interval has no sets at all: every stack is in none.
    let sets = if sets.is_empty() {
        vec![Vec::new()]
    } else {
        sets
    };
    (table, sets)
}

/// Adds `samples` to `key`'s count, cloning the key only the first time it is seen.
fn add<K: Ord + Clone>(counts: &mut BTreeMap<K, u64>, key: &K, samples: u64) {
    match counts.get_mut(key) {
        Some(count) => *count += samples,
        None => {
            counts.insert(key.clone(), samples);
        }
    }
}

/// Names a location, or says why it has no name.
fn resolve(symbolizer: &Symbolizer, location: &Location, options: &ProfileOptions) -> Resolved {
    match (location, &options.hide_kernel) {
        (Location::Kernel { .. }, Some(reason)) => Resolved {
            section: Section::Other,
            module: KERNEL_MODULE.to_owned(),
            name: "[kernel]".to_owned(),
            symbolized: false,
            issue: Some(Issue::KernelHidden(reason.clone())),
            build_id: None,
        },
        _ => symbolizer.resolve(location),
    }
}

/// The frame of a location outside generated code with a code map.
fn native_frame(resolved: &Resolved, location: &Location) -> Frame {
    Frame {
        section: resolved.section as i32,
        name: resolved.name.clone(),
        module: resolved.module.clone(),
        symbolized: resolved.symbolized,
        build_id: resolved.build_id.clone().unwrap_or_default(),
        kernel: matches!(location, Location::Kernel { .. }),
        ..Frame::default()
    }
}

/// The frames of a location outside generated code with a code map, leaf first, and the frame
/// its address belongs to. With DWARF `sources` (innermost first): a frame per function inlined
/// at the address (named from DWARF, `inlined`, each with its own line), then the location's
/// own frame with the line of the outermost call site; without, the location's frame alone.
fn native_frames(
    frames: &mut Frames,
    resolved: &Resolved,
    location: &Location,
    sources: &[SourceFrame],
) -> (Vec<u32>, u32) {
    let own = native_frame(resolved, location);
    let Some((outermost, inlined)) = sources.split_last() else {
        let id = frames.id(own);
        return (vec![id], id);
    };
    let mut ids = Vec::with_capacity(sources.len());
    for source in inlined {
        ids.push(
            frames.id(Frame {
                name: source
                    .function
                    .clone()
                    .unwrap_or_else(|| "[unknown inlined function]".to_owned()),
                symbolized: source.function.is_some(),
                inlined: true,
                file: source.file.clone().unwrap_or_default(),
                line: source.line,
                ..own.clone()
            }),
        );
    }
    let own = frames.id(Frame {
        file: outermost.file.clone().unwrap_or_default(),
        line: outermost.line,
        ..own
    });
    ids.push(own);
    (ids, own)
}

/// The frames of an offset in generated code, leaf first, and the compiled code's own frame:
/// in optimised code, the methods inlined at the offset (innermost first, each with its own
/// range: the innermost where the pc is, the outer ones the send that inlined the next, `@pc`),
/// then the compiled method (its range the inlining send's, `@pc`); otherwise the code alone,
/// with the range the offset is in. `label` is the offset's range label
/// ([`Code::range_label`]).
fn jit_frames(
    frames: &mut Frames,
    resolved: &Resolved,
    code: &Code,
    offset: u64,
    label: Option<&str>,
    later_snapshot: bool,
) -> (Vec<u32>, u32) {
    let optimised = code.is_optimised();
    let frame = |name: &str, range: String, inlined: bool| Frame {
        section: resolved.section as i32,
        name: name.to_owned(),
        module: resolved.module.clone(),
        symbolized: resolved.symbolized,
        kind: code_kind(code.kind) as i32,
        range,
        inlined,
        code_map: code.source.label().to_owned(),
        optimised,
        later_snapshot,
        ..Frame::default()
    };
    let point = code
        .pc_map
        .partition_point(|p| p.offset <= offset)
        .checked_sub(1)
        .map(|i| &code.pc_map[i]);
    let Some(point) = point.filter(|p| !p.inlined.is_empty()) else {
        let id = frames.id(frame(
            &code.name,
            label.unwrap_or_default().to_owned(),
            false,
        ));
        return (vec![id], id);
    };
    let mut ids = Vec::with_capacity(point.inlined.len() + 1);
    let last = point.inlined.len() - 1;
    for (depth, (method, pc)) in point.inlined.iter().enumerate().rev() {
        let range = if depth == last {
            // The label names the innermost method: "Inline>>heavy 33->70".
            label
                .and_then(|l| l.strip_prefix(method.as_str()))
                .map(|l| l.trim_start().to_owned())
                .unwrap_or_default()
        } else {
            format!("@{}", pc + 1)
        };
        ids.push(frames.id(frame(method, range, true)));
    }
    let own = frames.id(frame(&code.name, format!("@{}", point.bcpc + 1), false));
    ids.push(own);
    (ids, own)
}

/// The frames of a stack of locations, leaf first; hidden kernel frames are one `[kernel]`.
fn stack_frames(ids: &[LocationId], placed: &[Placed], hidden_kernel: bool) -> Vec<u32> {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use vmscope_proto::v1 as pb;

    use super::*;
    use crate::{
        session::{StackSnapshot, StackTable},
        symbolize::tests::symbolizer,
        vocab::UnmappedReason,
    };

    /// Stacks of one location each, `n` samples per `(pid, location, n)`.
    fn leaves(counts: impl IntoIterator<Item = (u32, Location, u64)>) -> StackSnapshot {
        stacks(
            counts
                .into_iter()
                .map(|(pid, l, n)| (pid, vec![l], false, n)),
        )
    }

    /// Stacks (leaf first) with their samples.
    fn stacks(counts: impl IntoIterator<Item = (u32, Vec<Location>, bool, u64)>) -> StackSnapshot {
        let mut table = StackTable::default();
        for (pid, locations, truncated, n) in counts {
            for _ in 0..n {
                let end = if truncated {
                    StackEnd::FrameLimit
                } else {
                    StackEnd::Complete
                };
                table.count(pid, locations.iter().copied(), Some(end), DuringId(0));
            }
        }
        table.snapshot()
    }

    /// A snapshot of `counts` in process 7 (named "vm").
    fn snapshot(counts: Vec<(Location, u64)>) -> Snapshot {
        Snapshot {
            session: crate::session::SessionInfo {
                id: 1,
                state: crate::session::State::Stopped,
                targets: Vec::new(),
                system_wide: false,
                frequency_hz: 0,
                started_at: std::time::SystemTime::UNIX_EPOCH,
                elapsed: Duration::ZERO,
                duration_limit: None,
                stop_reason: None,
                owner_uid: 0,
                samples: 0,
                call_graph: Default::default(),
                awaiting_code_map_samples: 0,
                max_stacks: 0,
                stack_limit_samples: 0,
            },
            total_samples: counts.iter().map(|(_, n)| n).sum(),
            stacks: leaves(counts.into_iter().map(|(l, n)| (7, l, n))),
            truncated: 0,
            commands: [(7, "vm".to_owned())].into_iter().collect(),
            lost_per_cpu: vec![1, 0, 2],
            duration: Duration::from_secs(2),
            cpu_seconds: 2.5,
            host_steal_percent: 4.5,
            vm_executable: "/usr/bin/vm".into(),
            has_generated_code: false,
            complete: true,
            incomplete_reason: None,
            jit: Default::default(),
            kept: Vec::new(),
            not_kept: 0,
            kernel_events: None,
            vm_statistics: Vec::new(),
        }
    }

    /// Samples taken during a VM's intervals are stacks of their own, which name the kinds by
    /// the profile's table; the same frames outside any interval stay one stack.
    /// Throttling is judged once, here, for every report and client: samples taken (lost
    /// ones included) under 90% of the asked rate, over half a CPU-second or more.
    #[test]
    fn throttling_is_judged_on_the_samples_taken() {
        // 14,000 delivered + 16 lost over 10.012 CPU-seconds at 1400 Hz: the rate kept.
        let (rate, throttled) = taken_rate(14_016, 10.012, 1400);
        assert!((rate - 1400.0).abs() < 1.0 && !throttled, "{rate}");
        // The same samples over twice the CPU time: half the rate.
        let (rate, throttled) = taken_rate(14_016, 20.024, 1400);
        assert!((rate - 700.0).abs() < 1.0 && throttled, "{rate}");
        // Lost samples were taken: a full ring is not throttling.
        assert!(!taken_rate(700 + 700, 1.0, 1400).1);
        // Too little CPU time to judge, or none.
        assert!(!taken_rate(100, 0.4, 1400).1);
        assert_eq!(taken_rate(100, 0.0, 1400), (0.0, false));
    }

    #[test]
    fn stacks_say_which_intervals_their_samples_were_taken_during() {
        use crate::stats::intervals::IntervalLog;
        let kernel = Location::Kernel {
            ip: 0xffff_ffff_8100_0101,
        };
        let mut log = IntervalLog::default();
        let jit = IntervalKind::Named("JIT".into());
        log.begin(100, &jit, 0);
        log.begin(200, &IntervalKind::Safepoint, 0);
        log.begin(300, &IntervalKind::Scavenge, 0);
        let mut table = StackTable::default();
        for (ts, n) in [(50, 4), (150, 3), (250, 2), (350, 1), (60, 5)] {
            let during = table.during(Some(log.during(ts)).filter(|d| !d.set.is_empty()));
            for _ in 0..n {
                table.count(7, [kernel], None, during);
            }
        }
        let mut snap = snapshot(Vec::new());
        snap.stacks = table.snapshot();
        let profile = build_profile(snap, &symbolizer(), &ProfileOptions { hide_kernel: None });
        let kinds: Vec<(i32, &str)> = profile
            .vm_interval_kinds
            .iter()
            .map(|k| (k.kind, k.name.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                (pb::IntervalKind::Scavenge as i32, ""),
                (pb::IntervalKind::Safepoint as i32, ""),
                (pb::IntervalKind::Named as i32, "JIT"),
            ],
            "in the reports' order, whatever the order first seen"
        );
        let stacks: Vec<(u64, &[u32])> = profile
            .stacks
            .iter()
            .map(|s| (s.samples, s.during.as_slice()))
            .collect();
        assert_eq!(
            stacks,
            [
                (9, &[][..]),
                (3, &[2][..]),
                (2, &[1, 2][..]),
                (1, &[0, 1, 2][..])
            ]
        );
        assert_eq!(
            profile.rows[0].samples, 15,
            "rows are the frames', whatever the time"
        );
    }

    /// A build whose client went away gives up; stacks cut at the session's limit end as such,
    /// under their own row, and every sample is still in a stack.
    #[test]
    fn cancelled_builds_give_up_and_cut_stacks_say_so() {
        let kernel = |ip| Location::Kernel { ip };
        let mut snap = snapshot(vec![(kernel(1), 6)]);
        let mut table = StackTable::with_limit(4);
        for caller in [2, 6, 7, 8] {
            table.count(
                7,
                [kernel(1), kernel(caller)],
                Some(StackEnd::Complete),
                DuringId(0),
            );
        }
        table.count(
            7,
            [kernel(3), kernel(4)],
            Some(StackEnd::Complete),
            DuringId(0),
        );
        table.count(
            7,
            [kernel(3), kernel(5)],
            Some(StackEnd::Complete),
            DuringId(0),
        );
        snap.stacks = table.snapshot();
        let symbolizer = symbolizer();
        let options = ProfileOptions { hide_kernel: None };
        let (guard, cancel) = crate::cancel::CancelOnDrop::new();
        drop(guard);
        assert!(build_profile_unless(snap.clone(), &symbolizer, &options, &cancel).is_none());
        let profile = build_profile(snap, &symbolizer, &options);
        let ends: Vec<(i32, u64)> = profile
            .stack_ends
            .iter()
            .map(|e| (e.end, e.samples))
            .collect();
        assert_eq!(
            ends,
            [
                (pb::StackEnd::Complete as i32, 4),
                (pb::StackEnd::StackLimit as i32, 2)
            ]
        );
        let marker = profile
            .rows
            .iter()
            .find(|r| r.name == crate::symbolize::STACK_LIMIT_FRAME)
            .expect("a row for the cut stacks' caller");
        assert_eq!((marker.samples, marker.inclusive_samples), (0, 2));
        assert_eq!(profile.stacks.iter().map(|s| s.samples).sum::<u64>(), 6);
    }

    #[test]
    fn rows_and_issues_are_aggregated_and_ordered() {
        let kernel = |ip| Location::Kernel { ip };
        let counts = vec![
            (kernel(0xffff_ffff_8100_0101), 30),
            (kernel(0xffff_ffff_8100_0180), 20), // same function: one row of 50
            (kernel(0xffff_ffff_8100_0010), 7),
            (Location::Unmapped(UnmappedReason::ProcessGone), 5),
            (Location::Unmapped(UnmappedReason::NoMapping), 3),
        ];
        let profile = build_profile(
            snapshot(counts),
            &symbolizer(),
            &ProfileOptions { hide_kernel: None },
        );
        let rows: Vec<(&str, u64)> = profile
            .rows
            .iter()
            .map(|r| (r.name.as_str(), r.samples))
            .collect();
        assert_eq!(rows, [("do_work", 50), ("[unknown]", 8), ("_stext", 7)]);
        assert_eq!(profile.total_samples, 65);
        assert_eq!(profile.lost_samples, 3);
        assert!((profile.measured_frequency_hz - 26.0).abs() < 1e-9);
        assert_eq!(profile.host_steal_percent, 4.5);
        let issues: Vec<(pb::SymbolizationIssueKind, &str, u64)> = profile
            .symbolization_issues
            .iter()
            .map(|i| (i.kind(), i.reason.as_str(), i.samples))
            .collect();
        assert_eq!(
            issues,
            [
                (
                    pb::SymbolizationIssueKind::ProcessGone,
                    UnmappedReason::ProcessGone.describe(),
                    5
                ),
                (
                    pb::SymbolizationIssueKind::Unmapped,
                    UnmappedReason::NoMapping.describe(),
                    3
                )
            ]
        );
    }

    /// Switches the kernel tells apart show as voluntary and involuntary, never more than all;
    /// a VM's own kind of interval keeps its name.
    #[test]
    fn statistics_show_as_the_api_carries_them() {
        let counts = Counts {
            context_switches: 10,
            voluntary_switches: Some(12),
            ..Counts::default()
        };
        let shown = kernel_counts(&counts);
        assert_eq!(shown.voluntary_context_switches, Some(10));
        assert_eq!(shown.involuntary_context_switches, Some(0));
        let unknown = Counts {
            context_switches: 10,
            ..Counts::default()
        };
        assert_eq!(kernel_counts(&unknown).involuntary_context_switches, None);
        assert_eq!(
            interval_kind(&IntervalKind::Named("JIT".into())),
            (pb::IntervalKind::Named, "JIT".to_owned())
        );
        assert_eq!(
            interval_kind(&IntervalKind::Safepoint),
            (pb::IntervalKind::Safepoint, String::new())
        );
    }

    /// A kind a publication gives is the kind the profile shows; none, or one this daemon does
    /// not know, is unknown.
    #[test]
    fn code_kinds_come_back_as_published() {
        for kind in 1..=8 {
            assert_eq!(code_kind(crate::codemap::vm::code_kind(kind)) as i32, kind);
        }
        for unknown in [0, 9, -1] {
            assert_eq!(
                code_kind(crate::codemap::vm::code_kind(unknown)),
                CodeKind::Unknown
            );
        }
    }

    /// A method's baseline and optimised versions: separate rows, each with its own ranges in
    /// code order, the optimised one with its time per inlined method (its own code included).
    #[test]
    fn jit_versions_get_rows_of_their_own() {
        use crate::codemap::code::{Code, CodeSource, PcPoint};
        use crate::vocab::CodeKind as Kind;
        let symbolizer = symbolizer();
        let method = |pcs: &[(u64, u32, &str)]| Code {
            pc_map: pcs
                .iter()
                .map(|&(offset, bcpc, inlined)| PcPoint {
                    offset,
                    bcpc,
                    inlined: if inlined.is_empty() {
                        Vec::new()
                    } else {
                        vec![(inlined.to_owned(), 0)]
                    },
                })
                .collect(),
            ..Code::named(Kind::Method, "Foo>>bar", CodeSource::Vm("vm".into()))
        };
        let codes = symbolizer.codes();
        let baseline = codes
            .intern(method(&[(0x10, 0, ""), (0x20, 4, "")]), 0)
            .unwrap();
        let optimised = codes
            .intern(method(&[(0x10, 0, ""), (0x20, 4, "Foo>>inlined")]), 0)
            .unwrap();
        let jit = |code, offset| Location::Jit {
            code,
            offset,
            later_snapshot: false,
        };
        let counts = vec![
            (jit(baseline, 0x5), 10), // before the first pc: "1->1"
            (jit(baseline, 0x18), 20),
            (jit(optimised, 0x18), 7), // the method's own code
            (jit(optimised, 0x28), 3), // inlined
        ];
        let profile = build_profile(
            snapshot(counts),
            &symbolizer,
            &ProfileOptions { hide_kernel: None },
        );
        let rows: Vec<(&str, u64, bool)> = profile
            .rows
            .iter()
            .map(|r| (r.name.as_str(), r.samples, r.optimised))
            .collect();
        assert_eq!(rows, [("Foo>>bar", 30, false), ("Foo>>bar", 10, true)]);
        let base = &profile.rows[0];
        assert_eq!(base.kind(), CodeKind::Method);
        assert_eq!(base.code_map, "vm");
        let ranges: Vec<u64> = base.ranges.iter().map(|r| r.samples).collect();
        assert_eq!(ranges, [10, 20], "in code order: {:?}", base.ranges);
        assert!(base.inlined.is_empty());
        let inlined: Vec<(&str, u64)> = profile.rows[1]
            .inlined
            .iter()
            .map(|m| (m.name.as_str(), m.samples))
            .collect();
        assert_eq!(inlined, [("Foo>>bar", 7), ("Foo>>inlined", 3)]);
    }

    #[test]
    fn rows_carry_their_samples_per_process() {
        let kernel = Location::Kernel {
            ip: 0xffff_ffff_8100_0101,
        };
        let mut snap = snapshot(Vec::new());
        snap.stacks = leaves([(10, kernel, 3), (11, kernel, 5), (10, kernel, 1)]);
        snap.total_samples = 9;
        snap.commands = [(10, "vmscoped".to_owned()), (11, "vmscoped".to_owned())]
            .into_iter()
            .collect();
        let profile = build_profile(snap, &symbolizer(), &ProfileOptions { hide_kernel: None });
        assert_eq!(profile.processes, 2);
        assert_eq!(profile.rows.len(), 1);
        let by_process: Vec<(u32, &str, u64)> = profile.rows[0]
            .processes
            .iter()
            .map(|p| (p.pid, p.command.as_str(), p.samples))
            .collect();
        assert_eq!(by_process, [(11, "vmscoped", 5), (10, "vmscoped", 4)]);
    }

    #[test]
    fn kernel_functions_can_be_hidden_but_stay_counted() {
        let counts = vec![
            (
                Location::Kernel {
                    ip: 0xffff_ffff_8100_0101,
                },
                30,
            ),
            (
                Location::Kernel {
                    ip: 0xffff_ffff_8100_0010,
                },
                7,
            ),
        ];
        let reason = "kernel functions are shown to root only".to_owned();
        let profile = build_profile(
            snapshot(counts),
            &symbolizer(),
            &ProfileOptions {
                hide_kernel: Some(reason.clone()),
            },
        );
        assert_eq!(profile.rows.len(), 1);
        assert_eq!(profile.rows[0].name, "[kernel]");
        assert_eq!(profile.rows[0].samples, 37);
        assert_eq!(profile.symbolization_issues[0].reason, reason);
    }

    /// Stacks become frames: optimised code expands into its inlined methods (innermost
    /// first, each with its range), recursion counts once in inclusive time, and a caller
    /// with no time of its own still gets a row with its inclusive time.
    #[test]
    fn stacks_expand_into_frames_and_give_inclusive_time() {
        use crate::codemap::code::{Code, CodeSource, PcPoint};
        use crate::vocab::CodeKind as Kind;
        let symbolizer = symbolizer();
        let codes = symbolizer.codes();
        let point = |offset, bcpc, inlined: &[(&str, u32)]| PcPoint {
            offset,
            bcpc,
            inlined: inlined.iter().map(|&(m, pc)| (m.to_owned(), pc)).collect(),
        };
        let optimised = codes
            .intern(
                Code {
                    pc_map: vec![
                        point(0x10, 1, &[]),
                        point(0x20, 4, &[("Outer>>mid", 2), ("Inner>>leaf", 6)]),
                        point(0x30, 9, &[]),
                    ],
                    ..Code::named(Kind::Method, "Foo>>opt", CodeSource::Vm("vm".into()))
                },
                0,
            )
            .unwrap();
        let plain = codes
            .intern(
                Code {
                    pc_map: vec![point(0x10, 73, &[]), point(0x40, 77, &[])],
                    ..Code::named(Kind::Method, "Bar>>benchmark", CodeSource::Vm("vm".into()))
                },
                0,
            )
            .unwrap();
        let jit = |code, offset| Location::Jit {
            code,
            offset,
            later_snapshot: false,
        };
        let kernel = Location::Kernel {
            ip: 0xffff_ffff_8100_0101,
        };
        let snap = Snapshot {
            stacks: stacks([
                // Inside the inlined Inner>>leaf, called from benchmark's send at 74->78.
                (7, vec![jit(optimised, 0x24), jit(plain, 0x20)], false, 6),
                // Recursion: benchmark under benchmark counts once in its inclusive time.
                (7, vec![kernel, jit(plain, 0x44), jit(plain, 0x20)], true, 4),
            ]),
            total_samples: 10,
            truncated: 4,
            ..snapshot(Vec::new())
        };
        let profile = build_profile(snap, &symbolizer, &ProfileOptions { hide_kernel: None });
        let frame = |i: u32| {
            let f = &profile.frames[i as usize];
            format!(
                "{}{}{}",
                f.name,
                if f.range.is_empty() {
                    String::new()
                } else {
                    format!(" {}", f.range)
                },
                if f.inlined { " (inlined)" } else { "" }
            )
        };
        let mut stacks: Vec<(Vec<String>, bool, u64)> = profile
            .stacks
            .iter()
            .map(|s| {
                (
                    s.frames.iter().map(|&i| frame(i)).collect(),
                    s.truncated,
                    s.samples,
                )
            })
            .collect();
        stacks.sort();
        assert_eq!(
            stacks,
            [
                (
                    vec![
                        "Inner>>leaf 7->end (inlined)".to_owned(),
                        "Outer>>mid @3 (inlined)".into(),
                        "Foo>>opt @5".into(),
                        "Bar>>benchmark 74->78".into(),
                    ],
                    false,
                    6
                ),
                (
                    vec![
                        "do_work".to_owned(),
                        "Bar>>benchmark 78->end".into(),
                        "Bar>>benchmark 74->78".into(),
                    ],
                    true,
                    4
                ),
            ]
        );
        assert_eq!(profile.truncated_stacks, 4);
        let rows: Vec<(&str, u64, u64)> = profile
            .rows
            .iter()
            .map(|r| (r.name.as_str(), r.samples, r.inclusive_samples))
            .collect();
        assert_eq!(
            rows,
            [
                ("Foo>>opt", 6, 6),
                ("do_work", 4, 4),
                ("Bar>>benchmark", 0, 10)
            ]
        );
    }

    #[test]
    fn hidden_kernel_frames_are_one_frame() {
        let k = |ip| Location::Kernel { ip };
        let snap = Snapshot {
            stacks: stacks([(
                7,
                vec![
                    k(0xffff_ffff_8100_0101),
                    k(0xffff_ffff_8100_0010),
                    k(0xffff_ffff_8100_0020),
                ],
                false,
                2,
            )]),
            total_samples: 2,
            ..snapshot(Vec::new())
        };
        let profile = build_profile(
            snap,
            &symbolizer(),
            &ProfileOptions {
                hide_kernel: Some("root only".into()),
            },
        );
        assert_eq!(profile.stacks.len(), 1);
        let names: Vec<&str> = profile.stacks[0]
            .frames
            .iter()
            .map(|&i| profile.frames[i as usize].name.as_str())
            .collect();
        assert_eq!(names, ["[kernel]"]);
    }

    /// A native address in inlined code: the inlined functions (DWARF names, innermost first,
    /// each with its line) over the containing function (its ELF symbol, with the outermost
    /// call's line), which owns the address.
    #[test]
    fn native_inlined_functions_become_frames_over_their_holder() {
        use crate::vocab::ModuleId;
        let location = Location::File {
            module: ModuleId(0),
            offset: 0x1234,
            main_executable: true,
        };
        let resolved = Resolved {
            section: Section::Vanilla,
            module: "vm".into(),
            name: "interpret".into(),
            symbolized: true,
            issue: None,
            build_id: Some("abcd".into()),
        };
        let source = |function: &str, line, inlined| SourceFrame {
            function: Some(function.to_owned()),
            file: Some("/src/vm/interp.c".to_owned()),
            line,
            inlined,
        };
        let mut frames = Frames::default();
        let (ids, own) = native_frames(
            &mut frames,
            &resolved,
            &location,
            &[
                source("push", 40, true),
                source("send", 120, true),
                source("interpret_dwarf_name", 812, false),
            ],
        );
        assert_eq!(ids.len(), 3);
        assert_eq!(own, ids[2]);
        let shown: Vec<(&str, u32, bool, &str)> = ids
            .iter()
            .map(|&i| {
                let f = &frames.frames[i as usize];
                (f.name.as_str(), f.line, f.inlined, f.build_id.as_str())
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("push", 40, true, "abcd"),
                ("send", 120, true, "abcd"),
                ("interpret", 812, false, "abcd")
            ]
        );
        assert!(frames.frames.iter().all(|f| f.file == "/src/vm/interp.c"));
        // Without DWARF: the one frame of today, without a line.
        let (ids, own) = native_frames(&mut frames, &resolved, &location, &[]);
        assert_eq!(ids, [own]);
        assert_eq!(frames.frames[own as usize].line, 0);
    }
}
