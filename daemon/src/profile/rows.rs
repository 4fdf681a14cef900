//! Rows by (section, module, name), from each stack's leaf (self time), each with its samples
//! per process, its ranges and inlined methods, its samples per source line of the leaf, and
//! its inclusive samples (stacks holding it anywhere, once per stack); and the symbolisation
//! issues of the leaves, by (module, kind, reason).

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
};

use vmscope_model::{
    CodeKind, CodeRange, InlinedMethod, IssueKind, LabelSetSamples, ProcessSamples, ProfileRow,
    SourceLineSamples, SymbolizationIssue, ThreadSamples, rank::rank,
};

use super::placed::{Placed, Placement};
use crate::{
    session::{LabelsId, StackId, StackSnapshot},
    vocab::{Location, Task},
};

/// What one row accumulates.
#[derive(Debug, Default)]
pub(super) struct RowSum {
    pub(super) samples: u64,
    pub(super) inclusive: u64,
    pub(super) symbolized: bool,
    /// Generated code a code map names: its kind; none for native code.
    pub(super) kind: Option<CodeKind>,
    pub(super) code_map: &'static str,
    /// Samples per range, in code order (range index, then label).
    pub(super) ranges: BTreeMap<(usize, String), u64>,
    /// Samples per inlined method (optimised code).
    pub(super) inlined: BTreeMap<String, u64>,
    /// Samples per process.
    pub(super) processes: HashMap<u32, u64>,
    /// Samples per thread.
    pub(super) threads: HashMap<Task, u64>,
    /// Labelled samples per (process, label set).
    pub(super) labels: HashMap<(u32, LabelsId), u64>,
    /// Samples per (source line of the leaf, as an index into [`SourceLinesTable`], process).
    pub(super) lines: HashMap<(u32, u32), u64>,
    /// Samples named from a perf map read after them.
    pub(super) later_snapshot: u64,
}

/// What `entries` (a thread, its stack, a count: the snapshot's samples, or its blocks' time)
/// add up to per row, and the count of each distinct leaf location with an issue (its issue
/// is worded once, after); `None` once `cancelled` says so. With `user_leaf`, a stack's row of
/// self time is its innermost user frame's, and its kernel frames above it count nowhere: a
/// block's stack goes through the scheduler, where every thread off its CPU is, and what it
/// waited in is the code that called into the kernel.
pub(super) fn sum_rows(
    stacks: &StackSnapshot,
    placement: &Placement,
    entries: impl IntoIterator<Item = (Task, StackId, u64)>,
    user_leaf: bool,
    cancelled: impl Fn(usize) -> bool,
) -> Option<(Vec<RowSum>, Vec<u64>)> {
    let placed = &placement.placed;
    // Rows: self time from each stack's leaf, inclusive time from every location in it.
    let mut rows: Vec<RowSum> = (0..placement.row_keys.len())
        .map(|_| RowSum::default())
        .collect();
    let mut issue_samples: Vec<u64> = vec![0; placed.len()];
    let mut stack_rows: Vec<usize> = Vec::new();
    for (i, (task, stack, samples)) in entries.into_iter().enumerate() {
        if cancelled(i) {
            return None;
        }
        let mut ids = stacks.ids_of(stack);
        if user_leaf
            && let Some(user) = ids
                .iter()
                .position(|&id| !matches!(stacks.location(id), Location::Kernel { .. }))
        {
            ids = &ids[user..];
        }
        let Some(&leaf_id) = ids.first() else {
            continue;
        };
        let leaf = &placed[leaf_id.0 as usize];
        let row = &mut rows[leaf.row];
        row.samples += samples;
        if leaf.later_snapshot {
            row.later_snapshot += samples;
        }
        *row.processes.entry(task.pid).or_insert(0) += samples;
        *row.threads.entry(task).or_insert(0) += samples;
        let labels = stacks.stacks[stack.0 as usize].labels;
        if labels != LabelsId(0) {
            *row.labels.entry((task.pid, labels)).or_insert(0) += samples;
        }
        if let Some(line) = leaf.line {
            *row.lines.entry((line, task.pid)).or_insert(0) += samples;
        }
        row.symbolized = leaf.resolved.symbolized;
        if let Some(code) = &leaf.code {
            row.kind = Some(code.kind);
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

    Some((rows, issue_samples))
}

/// The rows of the profile, most samples first; rows of callers only (no self time) after
/// every row with some. `label_sets` names each label set by the profile's labels (see
/// `profile_labels`).
pub(super) fn profile_rows(
    rows: Vec<RowSum>,
    placement: &Placement,
    (commands, thread_names): (
        &HashMap<u32, String, foldhash::fast::RandomState>,
        &HashMap<Task, String, foldhash::fast::RandomState>,
    ),
    label_sets: &[Vec<u32>],
) -> Vec<ProfileRow> {
    let source_lines = &placement.source_lines;
    let mut rows: Vec<ProfileRow> = rows
        .into_iter()
        .zip(placement.row_keys.iter().cloned())
        .filter(|(sum, _)| sum.samples > 0 || sum.inclusive > 0)
        .map(|(sum, (section, module, name, optimised))| {
            let mut inlined: Vec<InlinedMethod> = sum
                .inlined
                .into_iter()
                .map(|(name, samples)| InlinedMethod { name, samples })
                .collect();
            inlined.sort_by(InlinedMethod::order);
            let mut processes: Vec<ProcessSamples> = sum
                .processes
                .into_iter()
                .map(|(pid, samples)| ProcessSamples {
                    pid,
                    command: commands.get(&pid).cloned().unwrap_or_default(),
                    samples,
                })
                .collect();
            processes.sort_by(ProcessSamples::order);
            let mut threads: Vec<ThreadSamples> = sum
                .threads
                .into_iter()
                .map(|(task, samples)| ThreadSamples {
                    pid: task.pid,
                    tid: task.tid,
                    name: thread_names.get(&task).cloned().unwrap_or_default(),
                    samples,
                })
                .collect();
            threads.sort_by(ThreadSamples::order);
            let mut labels: Vec<LabelSetSamples> = sum
                .labels
                .into_iter()
                .filter_map(|((pid, set), samples)| {
                    let labels = label_sets.get(set.0 as usize)?.clone();
                    (!labels.is_empty()).then_some(LabelSetSamples {
                        pid,
                        labels,
                        samples,
                    })
                })
                .collect();
            labels.sort_by(LabelSetSamples::order);
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
                section,
                name,
                module,
                samples: sum.samples,
                later_snapshot_samples: sum.later_snapshot,
                symbolized: sum.symbolized,
                kind: sum.kind,
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
                threads,
                labels,
            }
        })
        .collect();
    rows.sort_by(ProfileRow::order);
    rows
}

/// The symbolisation issues of the leaves, by (module, kind, reason), most samples first.
pub(super) fn issues(placed: &[Placed], issue_samples: Vec<u64>) -> Vec<SymbolizationIssue> {
    let mut issues: HashMap<(&str, IssueKind, Cow<'_, str>), u64> = HashMap::new();
    for (leaf, samples) in placed.iter().zip(issue_samples) {
        if let (Some(issue), 1..) = (&leaf.resolved.issue, samples) {
            *issues
                .entry((&leaf.resolved.module, issue.kind(), issue.describe()))
                .or_insert(0) += samples;
        }
    }
    let mut issues: Vec<SymbolizationIssue> = issues
        .into_iter()
        .map(|((module, kind, reason), samples)| SymbolizationIssue {
            module: module.to_owned(),
            reason: reason.into_owned(),
            samples,
            kind: Some(kind),
        })
        .collect();
    rank(
        &mut issues,
        |i| i.samples,
        |a, b| (&a.module, a.kind, &a.reason).cmp(&(&b.module, b.kind, &b.reason)),
    );

    issues
}

/// Adds `samples` to `key`'s count, cloning the key only the first time it is seen.
pub(super) fn add<K: Ord + Clone>(counts: &mut BTreeMap<K, u64>, key: &K, samples: u64) {
    match counts.get_mut(key) {
        Some(count) => *count += samples,
        None => {
            counts.insert(key.clone(), samples);
        }
    }
}
