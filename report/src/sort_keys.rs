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

use std::collections::{BTreeMap, HashMap};

#[cfg(test)]
use vmscope_model::ThreadSamples;
use vmscope_model::{ProcessSamples, ProfileRow, SourceLineSamples};

/// A key that rows are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
}

/// How perf writes a line it does not know.
pub const UNKNOWN_SRCLINE: &str = "??:0";

impl SortKey {
    /// Every key, as `--sort` spells them.
    pub const ALL: [SortKey; 6] = [
        SortKey::Comm,
        SortKey::Pid,
        SortKey::Tid,
        SortKey::Dso,
        SortKey::Sym,
        SortKey::Srcline,
    ];

    /// The key's name in `--sort`.
    pub fn as_str(self) -> &'static str {
        match self {
            SortKey::Comm => "comm",
            SortKey::Pid => "pid",
            SortKey::Dso => "dso",
            SortKey::Sym => "sym",
            SortKey::Srcline => "srcline",
            SortKey::Tid => "tid",
        }
    }

    /// Parses one key.
    pub fn parse(key: &str) -> Result<SortKey, String> {
        SortKey::ALL
            .into_iter()
            .find(|k| k.as_str() == key)
            .ok_or_else(|| {
                format!(
                    "unknown sort key `{key}`: use comm, pid, tid, dso, sym or srcline \
                     (e.g. --sort pid,sym)"
                )
            })
    }
}

/// Why `keys` cannot go together, if they cannot: a row's source lines are counted per process,
/// not per thread.
pub fn check(keys: &[SortKey]) -> Result<(), String> {
    if keys.contains(&SortKey::Tid) && keys.contains(&SortKey::Srcline) {
        return Err(
            "--sort tid and srcline do not go together: source lines are counted per process, \
             not per thread"
                .to_owned(),
        );
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
/// all) at one source line (or at none or any).
struct Part<'a> {
    pid: u32,
    command: &'a str,
    /// The thread (id, name); `None` for every thread of the part's process.
    thread: Option<(u32, &'a str)>,
    line: Option<&'a SourceLineSamples>,
    samples: u64,
}

/// The parts of `row` that the keys tell apart: by thread (and so by process), or by process
/// and source line.
fn parts(row: &ProfileRow, by_process: bool, by_thread: bool, by_line: bool) -> Vec<Part<'_>> {
    let whole = |pid, command, samples| Part {
        pid,
        command,
        thread: None,
        line: None,
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

#[derive(Debug, Default)]
struct Group<'a> {
    samples: u64,
    /// The daemon's rows in the group, each once.
    sources: Vec<&'a ProfileRow>,
    /// Its processes' samples, not summed yet.
    processes: Vec<ProcessSamples>,
}

/// One section's rows grouped by `keys` (not the usual ones: see [`is_by_symbol`]).
///
/// A grouped row's name says its keys (`node[4242]  hotLoop`); it keeps its module when
/// grouped by module or function, and its kind, code map, ranges and inlined methods when
/// grouped by function and made of exactly one of the daemon's rows, whole (ranges cannot be
/// split by process). Rows from a daemon that sends no samples per process are one group of
/// an unknown process.
pub fn group(rows: &[&ProfileRow], keys: &[SortKey]) -> Vec<ProfileRow> {
    let has = |key| keys.contains(&key);
    let by_thread = has(SortKey::Tid);
    let by_process = has(SortKey::Comm) || has(SortKey::Pid);
    let by_line = has(SortKey::Srcline) && !by_thread;
    // Lines are per process: a row is split by process to split it by line, whether or not
    // processes are keys.
    let split = by_process || by_line || by_thread;
    let mut order: Vec<GroupKey<'_>> = Vec::new();
    let mut groups: HashMap<GroupKey<'_>, Group<'_>> = HashMap::new();
    for &row in rows {
        for part in parts(row, split, by_thread, by_line) {
            let key = GroupKey {
                command: by_process.then_some(part.command),
                pid: has(SortKey::Pid).then_some(part.pid),
                // A row from a daemon that sends no threads is one group of an unknown thread.
                thread: by_thread.then_some(part.thread.unwrap_or((0, ""))),
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
            if !split {
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
            grouped_row(&key, group, keys)
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

fn grouped_row(key: &GroupKey<'_>, group: Group<'_>, keys: &[SortKey]) -> ProfileRow {
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
        let grouped = group(&refs[..2], &[SortKey::Tid]);
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
        let with_process = group(&refs[1..2], &[SortKey::Pid, SortKey::Tid, SortKey::Sym]);
        assert_eq!(with_process[0].name, "node[12]  V8 Worker[14]  poll");
        // A row with no threads (an older daemon's) is one unknown thread.
        assert_eq!(
            group(&refs[2..], &[SortKey::Tid])[0].name,
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
            summary(&group(&refs, &[SortKey::Pid])),
            [
                ("vmscoped[10]", "", 37, 0),
                ("vmscoped[11]", "", 5, 0),
                ("node[12]", "", 21, 0)
            ]
        );
        assert_eq!(
            summary(&group(&refs, &[SortKey::Comm])),
            [("vmscoped", "", 42, 0), ("node", "", 21, 0)]
        );
        assert_eq!(
            summary(&group(&refs, &[SortKey::Dso])),
            [
                ("libc.so.6", "libc.so.6", 55, 0),
                ("[kernel.kallsyms]", "[kernel.kallsyms]", 8, 0)
            ]
        );
        // Function and process: a row that is one process's whole keeps its ranges.
        assert_eq!(
            summary(&group(&refs, &[SortKey::Comm, SortKey::Sym])),
            [
                ("vmscoped  memcpy", "libc.so.6", 35, 1),
                ("node  poll", "libc.so.6", 20, 1),
                ("vmscoped  schedule", "[kernel.kallsyms]", 7, 0),
                ("node  schedule", "[kernel.kallsyms]", 1, 0)
            ]
        );
        let by_pid = group(&refs, &[SortKey::Pid]);
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
            let total: u64 = group(&refs, keys).iter().map(|r| r.samples).sum();
            assert_eq!(total, 63, "{keys:?}");
        }
    }

    #[test]
    fn rows_without_processes_are_an_unknown_process() {
        let mut old = row("f", "m", &[]);
        old.samples = 9;
        let grouped = group(&[&old], &[SortKey::Pid]);
        assert_eq!(summary(&grouped), [("[unknown process]", "", 9, 0)]);
    }

    #[test]
    fn keys_parse_as_perf_spells_them() {
        assert_eq!(SortKey::parse("pid"), Ok(SortKey::Pid));
        let err = SortKey::parse("symbol").unwrap_err();
        assert!(err.contains("comm, pid, tid, dso, sym or srcline"), "{err}");
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
        let by_line = group(&refs, &[SortKey::Srcline]);
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

        let by_pid_line = group(&refs, &[SortKey::Pid, SortKey::Srcline]);
        let names: Vec<(&str, u64)> = by_pid_line
            .iter()
            .map(|r| (r.name.as_str(), r.samples))
            .collect();
        assert_eq!(names[0], ("fixture[10]  hot.c:19", 70));
        assert!(names.contains(&("fixture[11]  hot.c:19", 10)), "{names:?}");
        let by_dso_line = group(&refs, &[SortKey::Dso, SortKey::Srcline]);
        assert_eq!(by_dso_line[0].name, "fixture  hot.c:19");
    }
}
