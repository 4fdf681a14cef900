//! Rows split by process, command, module or source line, after `perf report --sort`.
//!
//! The daemon sends one row per function (section, module, name), each with its samples per
//! process and, for native code with DWARF, per source line of the leaf. A system-wide or
//! multi-target profile is often read the other way round: which process, which of three
//! `vmscoped`s, which library, which line. `--sort comm,pid,dso,sym,srcline` (any subset, in any
//! order; `sym` alone is the usual report) groups each section's rows by the chosen keys before
//! anything is summed, so that every percentage of the report holds for the grouped rows.
//!
//! `srcline` is perf's: the file name and line of the sample's leaf (`hot.c:12`; the innermost
//! inlined function's line where code was inlined). Samples without a known line are grouped
//! per function, shown as `NAME ??:0` (perf's spelling of an unknown line).
//!
//! `label:KEY` is ours: the value of the label KEY that the program's thread had set when the
//! sample was taken (`phase=a`), or `phase unset`. The daemon counts each row's labelled
//! samples per label set and process, so labels group with processes and functions, not with
//! threads or source lines.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
};

#[cfg(test)]
use vmscope_model::ThreadSamples;
use vmscope_model::{Label, ProcessSamples, ProfileRow, SourceLineSamples};

/// A key that rows are grouped by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SortKey {
    /// The process's name (comm): every process of one program together.
    Comm,
    /// The process: `comm[pid]`.
    Pid,
    /// The module (executable, library, `[kernel.kallsyms]`).
    Dso,
    /// The function: the report's usual rows.
    Sym,
    /// The source line of the leaf (`hot.c:12`).
    Srcline,
    /// The thread: `name[tid]`.
    Tid,
    /// The value of the program's label of this key (`label:phase`): `phase=a`, or `phase
    /// unset` for the samples taken without one.
    Label(String),
}

/// How perf writes a line it does not know.
pub const UNKNOWN_SRCLINE: &str = "??:0";

impl SortKey {
    /// Every key but `label:KEY`, as `--sort` spells them.
    pub const ALL: [SortKey; 6] = [
        SortKey::Comm,
        SortKey::Pid,
        SortKey::Tid,
        SortKey::Dso,
        SortKey::Sym,
        SortKey::Srcline,
    ];

    /// Parses one key.
    pub fn parse(key: &str) -> Result<SortKey, String> {
        if let Some(label) = key.strip_prefix("label:") {
            if label.is_empty() || label.contains('=') {
                return Err(format!(
                    "sort key `{key}`: label:KEY names a label's key, e.g. label:phase"
                ));
            }
            return Ok(SortKey::Label(label.to_owned()));
        }
        SortKey::ALL
            .into_iter()
            .find(|k| k.to_string() == key)
            .ok_or_else(|| {
                format!(
                    "unknown sort key `{key}`: use comm, pid, tid, dso, sym, srcline or \
                     label:KEY (e.g. --sort pid,sym)"
                )
            })
    }
}

impl fmt::Display for SortKey {
    /// As `--sort` spells it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SortKey::Comm => "comm",
            SortKey::Pid => "pid",
            SortKey::Dso => "dso",
            SortKey::Sym => "sym",
            SortKey::Srcline => "srcline",
            SortKey::Tid => "tid",
            SortKey::Label(key) => return write!(f, "label:{key}"),
        })
    }
}

/// The label keys among `keys`, in their order.
pub fn label_keys(keys: &[SortKey]) -> Vec<&str> {
    keys.iter()
        .filter_map(|k| match k {
            SortKey::Label(key) => Some(key.as_str()),
            _ => None,
        })
        .collect()
}

/// How one label key reads for a sample: `phase=a`, or `phase unset` without it.
pub fn label_value_name(key: &str, value: Option<&str>) -> String {
    match value {
        Some(value) => format!("{key}={value}"),
        None => format!("{key} unset"),
    }
}

/// The value of `key` in a label set given as indices into `labels`, if it has one.
pub fn value_of<'a>(labels: &'a [Label], set: &[u32], key: &str) -> Option<&'a str> {
    set.iter()
        .filter_map(|&i| labels.get(i as usize))
        .find(|l| l.key == key)
        .map(|l| l.value.as_str())
}

/// Why `keys` cannot go together, if they cannot: a row's source lines and labelled samples
/// are counted per process, not per thread, and not per line of each other.
pub fn check(keys: &[SortKey]) -> Result<(), String> {
    if keys.contains(&SortKey::Tid) && keys.contains(&SortKey::Srcline) {
        return Err(
            "--sort tid and srcline do not go together: source lines are counted per process, \
             not per thread"
                .to_owned(),
        );
    }
    if let Some(label) = keys.iter().find(|k| matches!(k, SortKey::Label(_)))
        && let Some(other) = keys
            .iter()
            .find(|k| matches!(k, SortKey::Tid | SortKey::Srcline))
    {
        return Err(format!(
            "--sort {label} and {other} do not go together: labelled samples are counted per \
             process and function, not per thread or source line"
        ));
    }
    Ok(())
}

/// Whether `keys` give the report's usual rows (one per function), which need no grouping.
pub fn is_by_symbol(keys: &[SortKey]) -> bool {
    keys.is_empty() || keys == [SortKey::Sym]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct GroupKey<'a> {
    command: Option<&'a str>,
    pid: Option<u32>,
    /// The thread: its id and name.
    thread: Option<(u32, &'a str)>,
    /// The values of the label keys, as an index into the grouping's [`LabelValues`].
    labels: Option<u32>,
    module: Option<&'a str>,
    symbol: Option<(&'a str, &'a str, bool)>,
    srcline: Option<Srcline<'a>>,
}

/// A source line as a key: the file whole (two `util.c` are two files), or, for samples without
/// a line, their function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Srcline<'a> {
    Known { file: &'a str, line: u32 },
    Unknown { name: &'a str, module: &'a str },
}

impl Srcline<'_> {
    /// As perf shows it: the file's name (not its directory) and the line.
    fn label(&self) -> String {
        match self {
            Srcline::Known { file, line } => {
                let name = file.rsplit('/').next().unwrap_or(file);
                format!("{name}:{line}")
            }
            Srcline::Unknown { .. } => UNKNOWN_SRCLINE.to_owned(),
        }
    }
}

/// One part of a row: samples of one process (or of all, pid 0), of one of its threads (or of
/// all) at one source line (or at none or any), with one label set (or none or any).
struct Part<'a> {
    pid: u32,
    command: &'a str,
    /// The thread (id, name); `None` for every thread of the part's process.
    thread: Option<(u32, &'a str)>,
    line: Option<&'a SourceLineSamples>,
    /// The label set, as indices into the profile's labels; `None` for no labels or any.
    labels: Option<&'a [u32]>,
    samples: u64,
}

/// How the keys split a row.
#[derive(Clone, Copy)]
struct Split {
    process: bool,
    thread: bool,
    line: bool,
    label: bool,
}

/// The parts of `row` that the keys tell apart: by thread (and so by process), by process and
/// source line, or by process and label set.
fn parts(row: &ProfileRow, split: Split) -> Vec<Part<'_>> {
    let Split {
        process: by_process,
        thread: by_thread,
        line: by_line,
        label: by_label,
    } = split;
    let whole = |pid, command, samples| Part {
        pid,
        command,
        thread: None,
        line: None,
        labels: None,
        samples,
    };
    if by_thread && !row.threads.is_empty() {
        return row
            .threads
            .iter()
            .map(|t| Part {
                pid: t.pid,
                command: row
                    .processes
                    .iter()
                    .find(|p| p.pid == t.pid)
                    .map_or("", |p| p.command.as_str()),
                thread: Some((t.tid, t.name.as_str())),
                line: None,
                labels: None,
                samples: t.samples,
            })
            .collect();
    }
    let processes: Vec<Part<'_>> = if by_process && !row.processes.is_empty() {
        row.processes
            .iter()
            .map(|p| whole(p.pid, p.command.as_str(), p.samples))
            .collect()
    } else {
        vec![whole(0, "", row.samples)]
    };
    if by_label {
        return label_parts(row, processes);
    }
    if !by_line || row.source_lines.is_empty() {
        return processes;
    }
    // Each process's samples at known lines, and the rest of its samples at none.
    let mut out = Vec::with_capacity(row.source_lines.len() + processes.len());
    for mut process in processes {
        for line in &row.source_lines {
            let ours = process.pid == 0 || line.pid == process.pid;
            if !ours || line.samples == 0 {
                continue;
            }
            // A broken daemon could send more at lines than in all: never more than there is.
            let samples = line.samples.min(process.samples);
            process.samples -= samples;
            out.push(Part {
                line: Some(line),
                samples,
                ..process
            });
        }
        if process.samples > 0 {
            out.push(process);
        }
    }
    out
}

/// Each process's labelled samples by label set, then the rest of its samples, unlabelled.
fn label_parts<'a>(row: &'a ProfileRow, processes: Vec<Part<'a>>) -> Vec<Part<'a>> {
    let mut out = Vec::with_capacity(row.labels.len() + processes.len());
    for mut process in processes {
        for set in &row.labels {
            let ours = process.pid == 0 || set.pid == process.pid;
            if !ours || set.samples == 0 || set.labels.is_empty() {
                continue;
            }
            // A broken daemon could send more labelled than in all: never more than there is.
            let samples = set.samples.min(process.samples);
            process.samples -= samples;
            out.push(Part {
                labels: Some(&set.labels),
                samples,
                ..process
            });
        }
        if process.samples > 0 {
            out.push(process);
        }
    }
    out
}

/// The distinct values of some label keys that rows' parts or stacks had, each given an index
/// and named once (`phase=a  tenant unset`, joined by `separator`): what rows and call trees
/// are grouped by.
#[derive(Debug)]
pub(crate) struct LabelValues<'a> {
    separator: &'static str,
    index: HashMap<Vec<Option<&'a str>>, u32>,
    /// The name of each index.
    pub(crate) names: Vec<String>,
}

impl<'a> LabelValues<'a> {
    /// No values yet; names join their keys' values with `separator`.
    pub(crate) fn new(separator: &'static str) -> LabelValues<'a> {
        LabelValues {
            separator,
            index: HashMap::new(),
            names: Vec::new(),
        }
    }

    /// The index of the values of `keys` in `set` (indices into `labels`; `None` for none).
    pub(crate) fn of<K: AsRef<str>>(
        &mut self,
        labels: &'a [Label],
        keys: &[K],
        set: Option<&[u32]>,
    ) -> u32 {
        let values: Vec<Option<&'a str>> = keys
            .iter()
            .map(|key| set.and_then(|set| value_of(labels, set, key.as_ref())))
            .collect();
        if let Some(&i) = self.index.get(&values) {
            return i;
        }
        let name = keys
            .iter()
            .zip(&values)
            .map(|(key, value)| label_value_name(key.as_ref(), *value))
            .collect::<Vec<_>>()
            .join(self.separator);
        let i = self.names.len() as u32;
        self.names.push(name);
        self.index.insert(values, i);
        i
    }
}

#[derive(Debug, Default)]
struct Group<'a> {
    samples: u64,
    /// The daemon's rows in the group, each once.
    sources: Vec<&'a ProfileRow>,
    /// Its processes' samples, not summed yet.
    processes: Vec<ProcessSamples>,
}

/// One section's rows grouped by `keys` (not the usual ones: see [`is_by_symbol`]), with
/// `labels` the profile's (what rows' label sets index).
///
/// A grouped row's name says its keys (`node[4242]  hotLoop`); it keeps its module when
/// grouped by module or function, and its kind, code map, ranges and inlined methods when
/// grouped by function and made of exactly one of the daemon's rows, whole (ranges cannot be
/// split by process). Rows from a daemon that sends no samples per process are one group of
/// an unknown process.
pub fn group<'a>(
    rows: &[&'a ProfileRow],
    keys: &[SortKey],
    labels: &'a [Label],
) -> Vec<ProfileRow> {
    let has = |key| keys.contains(&key);
    let by_thread = has(SortKey::Tid);
    let by_process = has(SortKey::Comm) || has(SortKey::Pid);
    let by_line = has(SortKey::Srcline) && !by_thread;
    let label_keys = label_keys(keys);
    let by_label = !label_keys.is_empty() && !by_thread && !by_line;
    // Lines and label sets are per process: a row is split by process to split it by either,
    // whether or not processes are keys.
    let split = Split {
        process: by_process || by_line || by_thread || by_label,
        thread: by_thread,
        line: by_line,
        label: by_label,
    };
    let mut values = LabelValues::new("  ");
    let mut order: Vec<GroupKey<'_>> = Vec::new();
    let mut groups: HashMap<GroupKey<'_>, Group<'_>> = HashMap::new();
    for &row in rows {
        for part in parts(row, split) {
            let key = GroupKey {
                command: by_process.then_some(part.command),
                pid: has(SortKey::Pid).then_some(part.pid),
                // A row from a daemon that sends no threads is one group of an unknown thread.
                thread: by_thread.then_some(part.thread.unwrap_or((0, ""))),
                labels: by_label.then(|| values.of(labels, &label_keys, part.labels)),
                module: has(SortKey::Dso).then_some(row.module.as_str()),
                symbol: has(SortKey::Sym).then_some((
                    row.name.as_str(),
                    row.module.as_str(),
                    row.optimised,
                )),
                srcline: by_line.then_some(match part.line {
                    Some(line) => Srcline::Known {
                        file: line.file.as_str(),
                        line: line.line,
                    },
                    None => Srcline::Unknown {
                        name: row.name.as_str(),
                        module: row.module.as_str(),
                    },
                }),
            };
            let group = groups.entry(key).or_insert_with_key(|key| {
                order.push(*key);
                Group::default()
            });
            group.samples = group.samples.saturating_add(part.samples);
            // A row's parts come one after the other: the last source is the only one it
            // can already be.
            if !group.sources.last().is_some_and(|s| std::ptr::eq(*s, row)) {
                group.sources.push(row);
            }
            if !split.process {
                group.processes.extend(row.processes.iter().cloned());
            } else if !row.processes.is_empty() {
                group.processes.push(ProcessSamples {
                    pid: part.pid,
                    command: part.command.to_owned(),
                    samples: part.samples,
                });
            }
        }
    }
    order
        .into_iter()
        .map(|key| {
            let group = groups.remove(&key).expect("every key has its group");
            grouped_row(&key, group, keys, &values.names)
        })
        .collect()
}

/// Samples of the same process summed (named as first seen), most first, then by pid.
pub fn sum_by_process<'a>(
    parts: impl IntoIterator<Item = &'a ProcessSamples>,
) -> Vec<ProcessSamples> {
    let mut by_pid: BTreeMap<u32, ProcessSamples> = BTreeMap::new();
    for part in parts {
        let sum = by_pid.entry(part.pid).or_insert_with(|| ProcessSamples {
            samples: 0,
            ..part.clone()
        });
        sum.samples = sum.samples.saturating_add(part.samples);
    }
    let mut processes: Vec<ProcessSamples> = by_pid.into_values().collect();
    processes.sort_by(ProcessSamples::order);
    processes
}

fn grouped_row(
    key: &GroupKey<'_>,
    group: Group<'_>,
    keys: &[SortKey],
    label_names: &[String],
) -> ProfileRow {
    let first = group.sources[0];
    let by_symbol = keys.contains(&SortKey::Sym);
    let mut label: Vec<String> = Vec::new();
    let process_name = |command: &str| {
        if command.is_empty() {
            "[unknown]".to_owned()
        } else {
            command.to_owned()
        }
    };
    match (key.pid, key.command) {
        (Some(0), Some("")) => label.push("[unknown process]".to_owned()),
        (Some(pid), Some(command)) => label.push(format!("{}[{pid}]", process_name(command))),
        (None, Some(command)) => label.push(process_name(command)),
        _ => {}
    }
    match key.thread {
        Some((0, _)) => label.push("[unknown thread]".to_owned()),
        Some((tid, "")) => label.push(format!("[{tid}]")),
        Some((tid, name)) => label.push(format!("{name}[{tid}]")),
        None => {}
    }
    if let Some(name) = key.labels.and_then(|i| label_names.get(i as usize)) {
        label.push(name.clone());
    }
    if let (Some(module), false) = (key.module, by_symbol) {
        label.push(module.to_owned());
    }
    if by_symbol {
        label.push(first.name.clone());
    }
    let srcline = key.srcline.map(|line| line.label()).unwrap_or_default();
    match key.srcline {
        Some(Srcline::Unknown { name, .. }) if !by_symbol => {
            label.push(format!("{name} {srcline}"));
        }
        Some(_) => label.push(srcline.clone()),
        None => {}
    }
    // Ranges and inlined methods describe a whole row of the daemon's; a part of one (one
    // process's share) has no ranges of its own to show.
    let whole_source = by_symbol && group.sources.len() == 1 && group.samples == first.samples;
    let processes = sum_by_process(&group.processes);
    ProfileRow {
        section: first.section,
        name: label.join("  "),
        module: if by_symbol
            || key.module.is_some()
            || (key.srcline.is_some() && group.sources.iter().all(|r| r.module == first.module))
        {
            first.module.clone()
        } else {
            String::new()
        },
        samples: group.samples,
        symbolized: by_symbol && first.symbolized,
        kind: if by_symbol { first.kind } else { None },
        ranges: if whole_source {
            first.ranges.clone()
        } else {
            Vec::new()
        },
        inlined: if whole_source {
            first.inlined.clone()
        } else {
            Vec::new()
        },
        code_map: if by_symbol {
            first.code_map.clone()
        } else {
            String::new()
        },
        optimised: by_symbol && first.optimised,
        later_snapshot_samples: if whole_source {
            first.later_snapshot_samples
        } else {
            0
        },
        processes,
        // Inclusive time of a part of a row, or of rows grouped together, is not known.
        inclusive_samples: if whole_source {
            first.inclusive_samples
        } else {
            0
        },
        srcline,
        source_lines: if whole_source {
            first.source_lines.clone()
        } else {
            Vec::new()
        },
        threads: if whole_source {
            first.threads.clone()
        } else {
            Vec::new()
        },
        labels: if whole_source {
            first.labels.clone()
        } else {
            Vec::new()
        },
    }
}

#[cfg(test)]
mod tests {
    use vmscope_model::{CodeRange, Section};

    use super::*;

    fn row(name: &str, module: &str, processes: &[(u32, &str, u64)]) -> ProfileRow {
        ProfileRow {
            section: Section::Other,
            name: name.to_owned(),
            module: module.to_owned(),
            samples: processes.iter().map(|p| p.2).sum(),
            symbolized: true,
            ranges: vec![CodeRange {
                label: "1->end".into(),
                samples: processes.iter().map(|p| p.2).sum(),
            }],
            processes: processes
                .iter()
                .map(|&(pid, command, samples)| ProcessSamples {
                    pid,
                    command: command.to_owned(),
                    samples,
                })
                .collect(),
            ..ProfileRow::default()
        }
    }

    fn summary(rows: &[ProfileRow]) -> Vec<(&str, &str, u64, usize)> {
        rows.iter()
            .map(|r| {
                (
                    r.name.as_str(),
                    r.module.as_str(),
                    r.samples,
                    r.ranges.len(),
                )
            })
            .collect()
    }

    fn rows() -> Vec<ProfileRow> {
        vec![
            row(
                "memcpy",
                "libc.so.6",
                &[(10, "vmscoped", 30), (11, "vmscoped", 5)],
            ),
            row("poll", "libc.so.6", &[(12, "node", 20)]),
            row(
                "schedule",
                "[kernel.kallsyms]",
                &[(10, "vmscoped", 7), (12, "node", 1)],
            ),
        ]
    }

    /// `--sort tid` splits rows by thread, each named `name[tid]` (or `[tid]` unnamed), and
    /// with `pid` after its process; it refuses source lines, which are per process.
    #[test]
    fn tid_splits_rows_by_thread() {
        let mut rows = rows();
        rows[0].threads = vec![
            ThreadSamples {
                pid: 10,
                tid: 10,
                name: "vmscoped".into(),
                samples: 25,
            },
            ThreadSamples {
                pid: 10,
                tid: 13,
                name: String::new(),
                samples: 5,
            },
            ThreadSamples {
                pid: 11,
                tid: 11,
                name: "vmscoped".into(),
                samples: 5,
            },
        ];
        rows[1].threads = vec![ThreadSamples {
            pid: 12,
            tid: 14,
            name: "V8 Worker".into(),
            samples: 20,
        }];
        let refs: Vec<&ProfileRow> = rows.iter().collect();
        let grouped = group(&refs[..2], &[SortKey::Tid], &[]);
        assert_eq!(
            summary(&grouped),
            [
                ("vmscoped[10]", "", 25, 0),
                ("[13]", "", 5, 0),
                ("vmscoped[11]", "", 5, 0),
                ("V8 Worker[14]", "", 20, 0)
            ]
        );
        assert_eq!(
            grouped[3].processes[0].pid, 12,
            "a thread's samples are its process's"
        );
        let with_process = group(
            &refs[1..2],
            &[SortKey::Pid, SortKey::Tid, SortKey::Sym],
            &[],
        );
        assert_eq!(with_process[0].name, "node[12]  V8 Worker[14]  poll");
        // A row with no threads (an older daemon's) is one unknown thread.
        assert_eq!(
            group(&refs[2..], &[SortKey::Tid], &[])[0].name,
            "[unknown thread]"
        );
        assert!(check(&[SortKey::Tid, SortKey::Srcline]).is_err());
        assert!(check(&[SortKey::Tid, SortKey::Sym]).is_ok());
        assert_eq!(SortKey::parse("tid"), Ok(SortKey::Tid));
    }

    #[test]
    fn keys_split_rows_by_process_command_or_module() {
        let rows = rows();
        let refs: Vec<&ProfileRow> = rows.iter().collect();
        assert_eq!(
            summary(&group(&refs, &[SortKey::Pid], &[])),
            [
                ("vmscoped[10]", "", 37, 0),
                ("vmscoped[11]", "", 5, 0),
                ("node[12]", "", 21, 0)
            ]
        );
        assert_eq!(
            summary(&group(&refs, &[SortKey::Comm], &[])),
            [("vmscoped", "", 42, 0), ("node", "", 21, 0)]
        );
        assert_eq!(
            summary(&group(&refs, &[SortKey::Dso], &[])),
            [
                ("libc.so.6", "libc.so.6", 55, 0),
                ("[kernel.kallsyms]", "[kernel.kallsyms]", 8, 0)
            ]
        );
        // Function and process: a row that is one process's whole keeps its ranges.
        assert_eq!(
            summary(&group(&refs, &[SortKey::Comm, SortKey::Sym], &[])),
            [
                ("vmscoped  memcpy", "libc.so.6", 35, 1),
                ("node  poll", "libc.so.6", 20, 1),
                ("vmscoped  schedule", "[kernel.kallsyms]", 7, 0),
                ("node  schedule", "[kernel.kallsyms]", 1, 0)
            ]
        );
        let by_pid = group(&refs, &[SortKey::Pid], &[]);
        let processes: Vec<(u32, &str, u64)> = by_pid[0]
            .processes
            .iter()
            .map(|p| (p.pid, p.command.as_str(), p.samples))
            .collect();
        assert_eq!(processes, [(10, "vmscoped", 37)]);
        // Every sample stays counted, whatever the keys.
        for keys in [
            &[SortKey::Pid][..],
            &[SortKey::Dso, SortKey::Comm],
            &[SortKey::Sym],
        ] {
            let total: u64 = group(&refs, keys, &[]).iter().map(|r| r.samples).sum();
            assert_eq!(total, 63, "{keys:?}");
        }
    }

    /// `--sort label:KEY` splits rows by the label's value per process, the rest of each
    /// process's samples unset, every sample still counted; it goes with processes and
    /// functions, not with threads or lines.
    #[test]
    fn label_splits_rows_by_the_labels_value() {
        use vmscope_model::LabelSetSamples;
        let labels = [
            Label::new("phase", "a"),
            Label::new("phase", "b"),
            Label::new("tenant", "x"),
        ];
        let set = |pid, labels: &[u32], samples| LabelSetSamples {
            pid,
            labels: labels.to_vec(),
            samples,
        };
        let mut rows = rows();
        // memcpy: pid 10 has 30 (20 a with tenant x, 6 b, 4 unset), pid 11 has 5 (all a).
        rows[0].labels = vec![set(10, &[0, 2], 20), set(10, &[1], 6), set(11, &[0], 5)];
        // poll: none labelled.
        let refs: Vec<&ProfileRow> = rows.iter().collect();
        let phase = SortKey::parse("label:phase").unwrap();
        assert_eq!(phase, SortKey::Label("phase".into()));
        assert_eq!(phase.to_string(), "label:phase");
        let by_phase = group(&refs, &[phase.clone(), SortKey::Sym], &labels);
        assert_eq!(
            summary(&by_phase),
            [
                ("phase=a  memcpy", "libc.so.6", 25, 0),
                ("phase=b  memcpy", "libc.so.6", 6, 0),
                ("phase unset  memcpy", "libc.so.6", 4, 0),
                ("phase unset  poll", "libc.so.6", 20, 1),
                // Rows whole in one value keep their ranges.
                ("phase unset  schedule", "[kernel.kallsyms]", 8, 1),
            ]
        );
        let processes: Vec<(u32, u64)> = by_phase[0]
            .processes
            .iter()
            .map(|p| (p.pid, p.samples))
            .collect();
        assert_eq!(processes, [(10, 20), (11, 5)]);
        // Two label keys and the process.
        let tenant = SortKey::Label("tenant".into());
        let by_both = group(&refs[..1], &[SortKey::Pid, phase.clone(), tenant], &labels);
        assert_eq!(
            summary(&by_both),
            [
                ("vmscoped[10]  phase=a  tenant=x", "", 20, 0),
                ("vmscoped[10]  phase=b  tenant unset", "", 6, 0),
                ("vmscoped[10]  phase unset  tenant unset", "", 4, 0),
                ("vmscoped[11]  phase=a  tenant unset", "", 5, 0),
            ]
        );
        let total: u64 = group(&refs, std::slice::from_ref(&phase), &labels)
            .iter()
            .map(|r| r.samples)
            .sum();
        assert_eq!(total, 63, "every sample stays counted");
        // A broken daemon's labelled samples beyond the process's are never counted twice.
        let mut broken = row("f", "m", &[(10, "x", 3)]);
        broken.labels = vec![set(10, &[0], 9)];
        assert_eq!(
            summary(&group(&[&broken], std::slice::from_ref(&phase), &labels)),
            [("phase=a", "", 3, 0)]
        );
        assert!(check(&[phase.clone(), SortKey::Tid]).is_err());
        assert!(check(&[SortKey::Srcline, phase.clone()]).is_err());
        assert!(check(&[phase, SortKey::Pid, SortKey::Sym]).is_ok());
        assert!(SortKey::parse("label:").is_err());
        assert!(SortKey::parse("label:phase=a").is_err());
    }

    #[test]
    fn rows_without_processes_are_an_unknown_process() {
        let mut old = row("f", "m", &[]);
        old.samples = 9;
        let grouped = group(&[&old], &[SortKey::Pid], &[]);
        assert_eq!(summary(&grouped), [("[unknown process]", "", 9, 0)]);
    }

    #[test]
    fn keys_parse_as_perf_spells_them() {
        assert_eq!(SortKey::parse("pid"), Ok(SortKey::Pid));
        let err = SortKey::parse("symbol").unwrap_err();
        assert!(
            err.contains("comm, pid, tid, dso, sym, srcline or label:KEY"),
            "{err}"
        );
        assert_eq!(SortKey::parse("srcline"), Ok(SortKey::Srcline));
        assert!(is_by_symbol(&[]) && is_by_symbol(&[SortKey::Sym]));
        assert!(!is_by_symbol(&[SortKey::Sym, SortKey::Pid]));
    }

    fn line(file: &str, line: u32, pid: u32, samples: u64) -> SourceLineSamples {
        SourceLineSamples {
            file: file.to_owned(),
            line,
            pid,
            samples,
        }
    }

    /// Rows split by the line of their leaf, per process; samples without a line stay per
    /// function; every sample stays counted.
    #[test]
    fn srcline_splits_rows_by_source_line() {
        let mut hot = row(
            "hot_caller",
            "fixture",
            &[(10, "fixture", 90), (11, "fixture", 10)],
        );
        hot.source_lines = vec![
            line("/src/a/hot.c", 19, 10, 70),
            line("/src/a/hot.c", 27, 10, 15),
            line("/src/a/hot.c", 19, 11, 10),
        ];
        // Same file name in another directory: another file.
        let mut other = row("util", "libutil.so", &[(10, "fixture", 8)]);
        other.source_lines = vec![line("/src/b/hot.c", 19, 10, 8)];
        let nolines = row("memcpy", "libc.so.6", &[(10, "fixture", 4)]);
        let refs = [&hot, &other, &nolines];
        let by_line = group(&refs, &[SortKey::Srcline], &[]);
        let got: Vec<(&str, &str, u64, &str)> = by_line
            .iter()
            .map(|r| {
                (
                    r.name.as_str(),
                    r.srcline.as_str(),
                    r.samples,
                    r.module.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("hot.c:19", "hot.c:19", 80, "fixture"),
                ("hot.c:27", "hot.c:27", 15, "fixture"),
                // hot_caller's 5 samples of pid 10 without a line.
                ("hot_caller ??:0", "??:0", 5, "fixture"),
                ("hot.c:19", "hot.c:19", 8, "libutil.so"),
                ("memcpy ??:0", "??:0", 4, "libc.so.6"),
            ]
        );
        let processes: Vec<(u32, u64)> = by_line[0]
            .processes
            .iter()
            .map(|p| (p.pid, p.samples))
            .collect();
        assert_eq!(processes, [(10, 70), (11, 10)]);
        let total: u64 = by_line.iter().map(|r| r.samples).sum();
        assert_eq!(total, 112, "every sample stays counted");

        let by_pid_line = group(&refs, &[SortKey::Pid, SortKey::Srcline], &[]);
        let names: Vec<(&str, u64)> = by_pid_line
            .iter()
            .map(|r| (r.name.as_str(), r.samples))
            .collect();
        assert_eq!(names[0], ("fixture[10]  hot.c:19", 70));
        assert!(names.contains(&("fixture[11]  hot.c:19", 10)), "{names:?}");
        let by_dso_line = group(&refs, &[SortKey::Dso, SortKey::Srcline], &[]);
        assert_eq!(by_dso_line[0].name, "fixture  hot.c:19");
    }
}
