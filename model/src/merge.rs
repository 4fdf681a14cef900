//! Profiles of disjoint samples merged into one: the windows of continuous profiling, each
//! process's own, added up over a time range (pprof's `-proto a b`, for our model).
//!
//! Because no sample is in two of the parts, every count adds: rows' self *and* inclusive
//! samples, their ranges, inlined methods, processes, threads and source lines; stacks' values;
//! threads;
//! issues; how stacks ended. Frames, stacks and interval kinds are interned again, so that the
//! merged profile names each once. What is about one part alone and has no sum (a session's
//! own state, the kernel's counts of a session's targets, the VMs' published statistics, kept
//! samples) is left out; the caller sets the session it stands for.

use std::collections::HashMap;

use crate::{
    Frame, IntervalKind, ProcessSamples, Profile, ProfileRow, Stack, StackEndSamples, StackKey,
    StackTreeBuilder, SymbolizationIssue, Thread,
    profile::taken_rate,
    rank::rank,
    row::{CodeRange, InlinedMethod, LabelSetSamples, SourceLineSamples, ThreadSamples},
};

/// The maps that intern by value a frame, a stack and a row of every part of every window:
/// foldhash, as the stack tree.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// `parts` as one profile (see the module docs), its throttling judged again over the sum
/// at `requested_hz`. The session is `None`, the duration the sum of the parts'.
pub fn merge(parts: &[&Profile], requested_hz: u32) -> Profile {
    let mut merged = Profile::default();
    let mut frames: Map<&Frame, u32> = Map::default();
    let mut kinds: Map<&IntervalKind, u32> = Map::default();
    let mut labels: Map<&crate::Label, u32> = Map::default();
    let mut tree = StackTreeBuilder::new();
    let mut stacks: Map<StackKey, usize> = Map::default();
    let mut rows: Map<RowKey<'_>, ProfileRow> = Map::default();
    let mut threads: Map<(u32, u32), Thread> = Map::default();
    let mut issues: Map<IssueKey, SymbolizationIssue> = Map::default();
    let mut ends: Map<crate::StackEnd, u64> = Map::default();
    let mut scratch: Vec<u32> = Vec::new();
    for part in parts {
        if merged.sample_types.len() < part.sample_types.len() {
            merged.sample_types = part.sample_types.clone();
        }
        let frame_ids: Vec<u32> = part
            .frames
            .iter()
            .map(|frame| {
                *frames.entry(frame).or_insert_with(|| {
                    merged.frames.push(frame.clone());
                    (merged.frames.len() - 1) as u32
                })
            })
            .collect();
        let kind_ids: Vec<u32> = part
            .vm_interval_kinds
            .iter()
            .map(|kind| {
                *kinds.entry(kind).or_insert_with(|| {
                    merged.vm_interval_kinds.push(kind.clone());
                    (merged.vm_interval_kinds.len() - 1) as u32
                })
            })
            .collect();
        let label_ids: Vec<u32> = part
            .labels
            .iter()
            .map(|label| {
                *labels.entry(label).or_insert_with(|| {
                    merged.labels.push(label.clone());
                    (merged.labels.len() - 1) as u32
                })
            })
            .collect();
        for stack in &part.stacks {
            scratch.clear();
            scratch.extend(
                part.stack_frames(stack)
                    .filter_map(|f| frame_ids.get(f as usize).copied()),
            );
            let mut during: Vec<u32> = stack
                .during
                .iter()
                .filter_map(|&k| kind_ids.get(k as usize).copied())
                .collect();
            during.sort_unstable();
            let mut stack_labels: Vec<u32> = stack
                .labels
                .iter()
                .filter_map(|&l| label_ids.get(l as usize).copied())
                .collect();
            stack_labels.sort_unstable();
            let mut key = stack.key(tree.intern(&scratch), during.clone());
            key.labels = stack_labels.clone();
            match stacks.get(&key) {
                Some(&at) => merged.stacks[at].add_values(&stack.values),
                None => {
                    merged.stacks.push(Stack {
                        node: key.node,
                        during,
                        labels: stack_labels,
                        ..stack.clone()
                    });
                    stacks.insert(key, merged.stacks.len() - 1);
                }
            }
        }
        for row in &part.rows {
            let key = RowKey::of(row);
            match rows.get_mut(&key) {
                Some(sum) => add_row(sum, row, &label_ids),
                None => {
                    let mut sum = row.clone();
                    sum.labels.clear();
                    add_label_sets(&mut sum, row, &label_ids);
                    rows.insert(key, sum);
                }
            }
        }
        for thread in &part.threads {
            let sum = threads
                .entry((thread.pid, thread.tid))
                .or_insert_with(|| Thread {
                    samples: 0,
                    cpu_ns: 0,
                    off_cpu_blocks: 0,
                    off_cpu_ns: 0,
                    off_cpu_during: Vec::new(),
                    ..thread.clone()
                });
            sum.samples = sum.samples.saturating_add(thread.samples);
            sum.cpu_ns = sum.cpu_ns.saturating_add(thread.cpu_ns);
            // Windows are CPU profiles: their threads have no time off the CPU to add.
            sum.off_cpu_blocks = sum.off_cpu_blocks.saturating_add(thread.off_cpu_blocks);
            sum.off_cpu_ns = sum.off_cpu_ns.saturating_add(thread.off_cpu_ns);
            if sum.name.is_empty() {
                sum.name = thread.name.clone();
            }
        }
        for issue in &part.symbolization_issues {
            let key = (issue.module.clone(), issue.kind, issue.reason.clone());
            let sum = issues.entry(key).or_insert_with(|| SymbolizationIssue {
                samples: 0,
                ..issue.clone()
            });
            sum.samples = sum.samples.saturating_add(issue.samples);
        }
        for end in &part.stack_ends {
            *ends.entry(end.end).or_insert(0) += end.samples;
        }
        add_totals(&mut merged, part);
    }
    merged.stack_nodes = tree.finish();
    rank(&mut merged.stacks, Stack::samples, |_, _| {
        std::cmp::Ordering::Equal
    });
    merged.rows = rows.into_values().map(coalesce_row).collect();
    merged.rows.sort_by(ProfileRow::order);
    merged.threads = threads.into_values().collect();
    merged.threads.sort_by(Thread::order);
    merged.symbolization_issues = issues.into_values().collect();
    rank(
        &mut merged.symbolization_issues,
        |i| i.samples,
        |a, b| (&a.module, a.kind, &a.reason).cmp(&(&b.module, b.kind, &b.reason)),
    );
    merged.stack_ends = ends
        .into_iter()
        .map(|(end, samples)| StackEndSamples { end, samples })
        .collect();
    rank(
        &mut merged.stack_ends,
        |e| e.samples,
        |a, b| a.end.cmp(&b.end),
    );
    let mut pids: Vec<u32> = merged.threads.iter().map(|t| t.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    merged.processes = pids.len() as u32;
    merged.complete = !parts.is_empty() && parts.iter().all(|p| p.complete);
    if merged.cpu_seconds > 0.0 {
        merged.measured_frequency_hz = merged.total_samples as f64 / merged.cpu_seconds;
    }
    (merged.taken_frequency_hz, merged.throttled) = taken_rate(
        merged.total_samples.saturating_add(merged.lost_samples),
        merged.cpu_seconds,
        requested_hz,
    );
    merged
}

/// What identifies a row, as the daemon makes them: one per (section, module, name), a
/// method's optimised and baseline code apart.
#[derive(Debug, PartialEq, Eq, Hash)]
struct RowKey<'a> {
    section: crate::Section,
    module: &'a str,
    name: &'a str,
    optimised: bool,
}

impl RowKey<'_> {
    fn of(row: &ProfileRow) -> RowKey<'_> {
        RowKey {
            section: row.section,
            module: &row.module,
            name: &row.name,
            optimised: row.optimised,
        }
    }
}

/// What identifies a symbolisation issue: its module, kind and reason.
type IssueKey = (String, Option<crate::IssueKind>, String);

/// Adds `row`'s samples to `sum`, the same code in another part. Its processes and source
/// lines are only appended: a row shared by every process of every window would otherwise be
/// searched and sorted again at each part, and [`coalesce_row`] sums them once at the end.
fn add_row(sum: &mut ProfileRow, row: &ProfileRow, label_ids: &[u32]) {
    sum.samples = sum.samples.saturating_add(row.samples);
    sum.inclusive_samples = sum.inclusive_samples.saturating_add(row.inclusive_samples);
    sum.later_snapshot_samples = sum
        .later_snapshot_samples
        .saturating_add(row.later_snapshot_samples);
    sum.symbolized |= row.symbolized;
    if sum.kind.is_none() {
        sum.kind = row.kind;
    }
    if sum.code_map.is_empty() {
        sum.code_map = row.code_map.clone();
    }
    // Ranges stay in code order: the first part's, then labels new in later ones.
    for range in &row.ranges {
        match sum.ranges.iter_mut().find(|r| r.label == range.label) {
            Some(r) => r.samples = r.samples.saturating_add(range.samples),
            None => sum.ranges.push(CodeRange::clone(range)),
        }
    }
    for method in &row.inlined {
        match sum.inlined.iter_mut().find(|m| m.name == method.name) {
            Some(m) => m.samples = m.samples.saturating_add(method.samples),
            None => sum.inlined.push(InlinedMethod::clone(method)),
        }
    }
    sum.processes.extend(row.processes.iter().cloned());
    sum.source_lines.extend(row.source_lines.iter().cloned());
    sum.threads.extend(row.threads.iter().cloned());
    add_label_sets(sum, row, label_ids);
}

/// Appends `row`'s label sets to `sum`'s, each label by its merged index (`label_ids`, the
/// part's index to the merged one), as its stacks are.
fn add_label_sets(sum: &mut ProfileRow, row: &ProfileRow, label_ids: &[u32]) {
    for set in &row.labels {
        let mut labels: Vec<u32> = set
            .labels
            .iter()
            .filter_map(|&l| label_ids.get(l as usize).copied())
            .collect();
        labels.sort_unstable();
        if !labels.is_empty() {
            sum.labels.push(LabelSetSamples {
                labels,
                ..set.clone()
            });
        }
    }
}

/// A merged row with its processes and source lines summed (one entry per process, per line
/// of a process) and everything in the order a row keeps.
fn coalesce_row(mut row: ProfileRow) -> ProfileRow {
    row.inlined.sort_by(InlinedMethod::order);
    row.processes.sort_by_key(|p| p.pid);
    row.processes.dedup_by(|later, kept| {
        let same = later.pid == kept.pid;
        if same {
            kept.samples = kept.samples.saturating_add(later.samples);
        }
        same
    });
    row.processes.sort_by(ProcessSamples::order);
    row.threads.sort_by_key(|t| (t.pid, t.tid));
    row.threads.dedup_by(|later, kept| {
        let same = (later.pid, later.tid) == (kept.pid, kept.tid);
        if same {
            kept.samples = kept.samples.saturating_add(later.samples);
            if kept.name.is_empty() {
                kept.name = std::mem::take(&mut later.name);
            }
        }
        same
    });
    row.threads.sort_by(ThreadSamples::order);
    row.labels
        .sort_by(|a, b| (a.pid, &a.labels).cmp(&(b.pid, &b.labels)));
    row.labels.dedup_by(|later, kept| {
        let same = (later.pid, &later.labels) == (kept.pid, &kept.labels);
        if same {
            kept.samples = kept.samples.saturating_add(later.samples);
        }
        same
    });
    row.labels.sort_by(LabelSetSamples::order);
    let line_key = |l: &SourceLineSamples| (l.file.clone(), l.line, l.pid);
    row.source_lines.sort_by_cached_key(line_key);
    row.source_lines.dedup_by(|later, kept| {
        let same = (&later.file, later.line, later.pid) == (&kept.file, kept.line, kept.pid);
        if same {
            kept.samples = kept.samples.saturating_add(later.samples);
        }
        same
    });
    rank(
        &mut row.source_lines,
        |l| l.samples,
        |a, b| (&a.file, a.line, a.pid).cmp(&(&b.file, b.line, b.pid)),
    );
    row
}

/// Adds `part`'s session-wide counts to `merged`'s.
fn add_totals(merged: &mut Profile, part: &Profile) {
    merged.total_samples = merged.total_samples.saturating_add(part.total_samples);
    merged.lost_samples = merged.lost_samples.saturating_add(part.lost_samples);
    if merged.lost_samples_per_cpu.len() < part.lost_samples_per_cpu.len() {
        merged
            .lost_samples_per_cpu
            .resize(part.lost_samples_per_cpu.len(), 0);
    }
    for (sum, lost) in merged
        .lost_samples_per_cpu
        .iter_mut()
        .zip(&part.lost_samples_per_cpu)
    {
        *sum = sum.saturating_add(*lost);
    }
    merged.duration_seconds += part.duration_seconds;
    merged.cpu_seconds += part.cpu_seconds;
    merged.truncated_stacks = merged
        .truncated_stacks
        .saturating_add(part.truncated_stacks);
    merged.has_generated_code |= part.has_generated_code;
    merged.jit_samples_before_code_map += part.jit_samples_before_code_map;
    merged.jit_samples_awaiting_code_map += part.jit_samples_awaiting_code_map;
    merged.jit_samples_caught_up += part.jit_samples_caught_up;
    merged.jit_samples_from_later_snapshot += part.jit_samples_from_later_snapshot;
    if merged.vm_executable.is_empty() {
        merged.vm_executable = part.vm_executable.clone();
    }
    // The steal of the host over the parts: weighted by their durations.
    let before = merged.duration_seconds - part.duration_seconds;
    if merged.duration_seconds > 0.0 {
        merged.host_steal_percent = (merged.host_steal_percent * before
            + part.host_steal_percent * part.duration_seconds)
            / merged.duration_seconds;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SampleType, Section, StackEnd};

    fn frame(name: &str) -> Frame {
        Frame {
            section: Section::Vanilla,
            name: name.into(),
            module: "vm".into(),
            ..Frame::default()
        }
    }

    /// A part with stacks of `frames` (names, leaf first) and their samples, one process.
    fn part(pid: u32, stacks: &[(&[&str], u64)]) -> Profile {
        let mut profile = Profile {
            sample_types: vec![SampleType::Samples, SampleType::CpuTime],
            duration_seconds: 10.0,
            complete: true,
            ..Profile::default()
        };
        let mut tree = StackTreeBuilder::new();
        let mut index: HashMap<String, u32> = HashMap::new();
        for &(names, samples) in stacks {
            let ids: Vec<u32> = names
                .iter()
                .map(|&n| {
                    *index.entry(n.to_owned()).or_insert_with(|| {
                        profile.frames.push(frame(n));
                        (profile.frames.len() - 1) as u32
                    })
                })
                .collect();
            profile.stacks.push(Stack {
                node: tree.intern(&ids),
                pid,
                tid: pid,
                values: vec![samples, samples * 1_000_000],
                end: Some(StackEnd::Complete),
                ..Stack::default()
            });
            profile.total_samples += samples;
            let leaf = names[0];
            match profile.rows.iter_mut().find(|r| r.name == leaf) {
                Some(row) => row.samples += samples,
                None => profile.rows.push(ProfileRow {
                    section: Section::Vanilla,
                    name: leaf.into(),
                    module: "vm".into(),
                    samples,
                    inclusive_samples: samples,
                    processes: vec![ProcessSamples {
                        pid,
                        command: "vm".into(),
                        samples,
                    }],
                    ..ProfileRow::default()
                }),
            }
        }
        profile.stack_nodes = tree.finish();
        profile.threads = vec![Thread {
            pid,
            tid: pid,
            name: "vm".into(),
            samples: profile.total_samples,
            ..Thread::default()
        }];
        profile.cpu_seconds = profile.total_samples as f64 / 100.0;
        profile
    }

    fn frames_by_name(profile: &Profile, stack: &Stack) -> Vec<String> {
        profile
            .stack_frames(stack)
            .map(|f| profile.frames[f as usize].name.clone())
            .collect()
    }

    #[test]
    fn windows_of_one_process_add_up() {
        let a = part(7, &[(&["hot", "main"], 60), (&["cold", "main"], 10)]);
        // Another window: frames in another order, one stack the same.
        let b = part(7, &[(&["warm", "main"], 30), (&["hot", "main"], 20)]);
        let merged = merge(&[&a, &b], 100);
        assert_eq!(merged.total_samples, 120);
        assert_eq!(
            merged.frames.len(),
            4,
            "each frame once: {:?}",
            merged.frames
        );
        let stacks: Vec<(Vec<String>, u64)> = merged
            .stacks
            .iter()
            .map(|s| (frames_by_name(&merged, s), s.samples()))
            .collect();
        assert_eq!(
            stacks,
            [
                (vec!["hot".to_owned(), "main".to_owned()], 80),
                (vec!["warm".to_owned(), "main".to_owned()], 30),
                (vec!["cold".to_owned(), "main".to_owned()], 10),
            ]
        );
        assert_eq!(merged.stacks[0].values, [80, 80_000_000]);
        let rows: Vec<(&str, u64, u64)> = merged
            .rows
            .iter()
            .map(|r| (r.name.as_str(), r.samples, r.processes[0].samples))
            .collect();
        assert_eq!(rows, [("hot", 80, 80), ("warm", 30, 30), ("cold", 10, 10)]);
        assert_eq!(merged.threads[0].samples, 120);
        assert_eq!((merged.duration_seconds, merged.processes), (20.0, 1));
        assert!(merged.complete && !merged.throttled);
        // main > hot is one node in the tree, whichever part named it.
        assert_eq!(merged.stack_nodes.len(), 4);
    }

    #[test]
    fn processes_stay_apart() {
        let a = part(7, &[(&["hot", "main"], 5)]);
        let b = part(8, &[(&["hot", "main"], 3)]);
        let merged = merge(&[&a, &b], 100);
        assert_eq!(merged.stacks.len(), 2);
        assert_eq!(merged.processes, 2);
        assert_eq!(merged.rows.len(), 1);
        let pids: Vec<(u32, u64)> = merged.rows[0]
            .processes
            .iter()
            .map(|p| (p.pid, p.samples))
            .collect();
        assert_eq!(pids, [(7, 5), (8, 3)]);
        assert_eq!(merge(&[], 100), Profile::default());
    }

    /// Windows that named their labels in other orders merge by label, not by index: the same
    /// labels add up, other labels stay apart.
    #[test]
    fn labelled_stacks_merge_by_their_labels() {
        let (a_label, b_label) = (
            crate::Label::new("phase", "a"),
            crate::Label::new("phase", "b"),
        );
        let mut first = part(7, &[(&["hot", "main"], 5), (&["hot", "main"], 2)]);
        first.labels = vec![a_label.clone(), b_label.clone()];
        first.stacks[0].labels = vec![0];
        first.stacks[1].labels = vec![1];
        let mut second = part(7, &[(&["hot", "main"], 3)]);
        second.labels = vec![b_label.clone(), a_label.clone()];
        second.stacks[0].labels = vec![1];
        // The row's labelled samples, as the daemon splits them: in the first window 5 with
        // a and 2 with b; in the second 3 with a (its index 1).
        let set = |labels: Vec<u32>, samples| LabelSetSamples {
            pid: 7,
            labels,
            samples,
        };
        first.rows[0].labels = vec![set(vec![0], 5), set(vec![1], 2)];
        second.rows[0].labels = vec![set(vec![1], 3)];
        let merged = merge(&[&first, &second], 100);
        let by_label: Vec<(Vec<&crate::Label>, u64)> = merged
            .stacks
            .iter()
            .map(|s| (merged.labels_of(s).collect(), s.samples()))
            .collect();
        assert_eq!(by_label, [(vec![&a_label], 8), (vec![&b_label], 2)]);
        let row: Vec<(&crate::Label, u64)> = merged.rows[0]
            .labels
            .iter()
            .map(|s| (&merged.labels[s.labels[0] as usize], s.samples))
            .collect();
        assert_eq!(row, [(&a_label, 8), (&b_label, 2)]);
    }
}
