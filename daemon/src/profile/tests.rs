use std::time::Duration;

use vmscope_model::{self as model, CodeKind, IntervalKind, IssueKind, Section};

use super::{
    kernel::kernel_counts,
    placed::{Frames, native_frames},
    *,
};
use crate::{
    session::{DuringId, StackSnapshot, StackTable},
    stats::kernel::Counts,
    symbolize::{Resolved, SourceFrame, tests::symbolizer},
    vocab::{Location, StackEnd, Task, UnmappedReason},
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
            label_limit_samples: 0,
            mode: vmscope_model::ProfileMode::Cpu,
            min_block_ns: 0,
            params: Vec::new(),
            counts: Vec::new(),
        },
        total_samples: counts.iter().map(|(_, n)| n).sum(),
        stacks: leaves(counts.into_iter().map(|(l, n)| (7, l, n))),
        truncated: 0,
        commands: [(7, "vm".to_owned())].into_iter().collect(),
        executables: Default::default(),
        thread_names: [(Task::from(7), "vm".to_owned())].into_iter().collect(),
        period_ns: 1_000_000,
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
        off_cpu: None,
        thread_filter: None,
        label_filter: None,
        call_counts: Vec::new(),
        vm_statistics: Vec::new(),
    }
}

/// Each thread's samples are a stack of their own with its thread, valued in samples and the
/// CPU time they stand for; the threads are listed with the names the session noted, most
/// samples first, and rows and processes are the threads' together.
#[test]
fn stacks_are_per_thread_with_their_samples_and_cpu_time() {
    let kernel = Location::Kernel {
        ip: 0xffff_ffff_8100_0101,
    };
    let mut table = StackTable::default();
    for (task, n) in [
        (Task::from(7), 2),
        (Task::new(7, 9), 5),
        (Task::new(7, 8), 1),
    ] {
        for _ in 0..n {
            table.count(task, [kernel], None, DuringId(0));
        }
    }
    let mut snap = snapshot(Vec::new());
    snap.stacks = table.snapshot();
    snap.total_samples = 8;
    snap.thread_names
        .insert(Task::new(7, 9), "GC Thread#0".into());
    let profile = build_profile(snap, &symbolizer(), &ProfileOptions { hide_kernel: None });
    assert_eq!(
        profile.sample_types,
        [model::SampleType::Samples, model::SampleType::CpuTime]
    );
    let stacks: Vec<(u32, u32, &[u64])> = profile
        .stacks
        .iter()
        .map(|s| (s.pid, s.tid, s.values.as_slice()))
        .collect();
    assert_eq!(
        stacks,
        [
            (7, 9, &[5, 5_000_000][..]),
            (7, 7, &[2, 2_000_000][..]),
            (7, 8, &[1, 1_000_000][..]),
        ],
        "one period (1 ms here) of CPU per sample"
    );
    let threads: Vec<(u32, &str, u64)> = profile
        .threads
        .iter()
        .map(|t| (t.tid, t.name.as_str(), t.samples))
        .collect();
    assert_eq!(threads, [(9, "GC Thread#0", 5), (7, "vm", 2), (8, "", 1)]);
    assert_eq!(profile.processes, 1);
    assert_eq!(profile.rows[0].samples, 8);
    assert_eq!(profile.rows[0].processes[0].samples, 8);
}

/// Sends counted with the samples are a sample type after the mode's: each stack carries the
/// sum of its samples' sends, and a stack whose samples had none carries 0.
#[test]
fn sends_counted_with_samples_are_a_sample_type_of_their_own() {
    let kernel = Location::Kernel {
        ip: 0xffff_ffff_8100_0101,
    };
    let (busy, idle) = (Task::from(7), Task::new(7, 8));
    let mut table = StackTable::default();
    for sends in [100, 250, 50] {
        let stack = table.count(busy, [kernel], None, DuringId(0));
        table.add_sends(busy, stack, sends);
    }
    let stack = table.count(idle, [kernel], None, DuringId(0));
    table.add_sends(idle, stack, 0);
    let mut snap = snapshot(Vec::new());
    snap.stacks = table.snapshot();
    snap.total_samples = 4;
    let profile = build_profile(snap, &symbolizer(), &ProfileOptions { hide_kernel: None });
    assert_eq!(
        profile.sample_types,
        [
            model::SampleType::Samples,
            model::SampleType::CpuTime,
            model::SampleType::Sends
        ]
    );
    let values: Vec<&[u64]> = profile.stacks.iter().map(|s| s.values.as_slice()).collect();
    assert_eq!(values, [&[3, 3_000_000, 400][..], &[1, 1_000_000, 0][..]]);
}

/// Samples taken during a VM's intervals are stacks of their own, which name the kinds by
/// the profile's table; the same frames outside any interval stay one stack.
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
    assert_eq!(
        profile.vm_interval_kinds,
        [
            IntervalKind::Scavenge,
            IntervalKind::Safepoint,
            IntervalKind::Named("JIT".into()),
        ],
        "in the reports' order, whatever the order first seen"
    );
    let stacks: Vec<(u64, &[u32])> = profile
        .stacks
        .iter()
        .map(|s| (s.samples(), s.during.as_slice()))
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
    let ends: Vec<(model::StackEnd, u64)> = profile
        .stack_ends
        .iter()
        .map(|e| (e.end, e.samples))
        .collect();
    assert_eq!(
        ends,
        [
            (model::StackEnd::Complete, 4),
            (model::StackEnd::StackLimit, 2)
        ]
    );
    let marker = profile
        .rows
        .iter()
        .find(|r| r.name == crate::symbolize::STACK_LIMIT_FRAME)
        .expect("a row for the cut stacks' caller");
    assert_eq!((marker.samples, marker.inclusive_samples), (0, 2));
    assert_eq!(profile.stacks.iter().map(|s| s.samples()).sum::<u64>(), 6);
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
    let issues: Vec<(Option<IssueKind>, &str, u64)> = profile
        .symbolization_issues
        .iter()
        .map(|i| (i.kind, i.reason.as_str(), i.samples))
        .collect();
    assert_eq!(
        issues,
        [
            (
                Some(IssueKind::ProcessGone),
                UnmappedReason::ProcessGone.describe(),
                5
            ),
            (
                Some(IssueKind::Unmapped),
                UnmappedReason::NoMapping.describe(),
                3
            )
        ]
    );
}

/// Switches the kernel tells apart show as voluntary and involuntary, never more than all;
/// a VM's own kind of interval keeps its name as the API carries it.
#[test]
fn statistics_show_as_the_api_carries_them() {
    use vmscope_proto::{model::interval_kind, v1 as pb};
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

/// A method's baseline and optimised versions: separate rows, each with its own ranges in
/// code order, the optimised one with its time per inlined method (its own code included).
#[test]
fn jit_versions_get_rows_of_their_own() {
    use crate::codemap::code::{Code, CodeSource, PcPoint};
    use vmscope_model::CodeKind as Kind;
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
                lines: Vec::new(),
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
    assert_eq!(base.kind, Some(CodeKind::Method));
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
    use vmscope_model::CodeKind as Kind;
    let symbolizer = symbolizer();
    let codes = symbolizer.codes();
    let point = |offset, bcpc, inlined: &[(&str, u32)]| PcPoint {
        offset,
        bcpc,
        inlined: inlined.iter().map(|&(m, pc)| (m.to_owned(), pc)).collect(),
        lines: Vec::new(),
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
                profile.stack_frames(s).map(frame).collect(),
                s.truncated,
                s.samples(),
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
    let names: Vec<&str> = profile
        .stack_frames(&profile.stacks[0])
        .map(|i| profile.frames[i as usize].name.as_str())
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

/// A wall profile's stacks hold samples and blocks apart (a block's stack is its thread's,
/// with why it waited), valued in the wall mode's five types; its off-CPU rows count the
/// blocks' nanoseconds by the innermost user frame (the kernel's frames above it count in no
/// row); its threads add their CPU and off-CPU time; the time inside the VM's intervals is
/// each thread's.
#[test]
fn a_wall_profile_holds_samples_and_blocks_with_their_times() {
    use crate::session::OffCpuTally;
    let kernel = Location::Kernel {
        ip: 0xffff_ffff_8100_0101,
    };
    let user = Location::Unmapped(UnmappedReason::NoMapping);
    let mut table = StackTable::default();
    for _ in 0..3 {
        table.count(Task::new(7, 8), [user], None, DuringId(0));
    }
    let waiting = table.intern([kernel, user], Some(StackEnd::Complete), DuringId(0));
    table.add_block(
        Task::new(7, 8),
        waiting,
        model::BlockState::Sleeping,
        20_000_000,
    );
    table.add_block(
        Task::new(7, 8),
        waiting,
        model::BlockState::Sleeping,
        10_000_000,
    );
    table.add_block(
        Task::new(7, 9),
        waiting,
        model::BlockState::Preempted,
        1_000_000,
    );
    let mut snap = snapshot(Vec::new());
    snap.session.mode = model::ProfileMode::Wall;
    snap.stacks = table.snapshot();
    snap.total_samples = 3;
    let mut during = std::collections::HashMap::default();
    during.insert((Task::new(7, 8), IntervalKind::Scavenge), 12_000_000);
    snap.off_cpu = Some(OffCpuTally {
        blocks: 3,
        ns: 31_000_000,
        during,
        ..OffCpuTally::default()
    });
    let profile = build_profile(snap, &symbolizer(), &ProfileOptions { hide_kernel: None });
    assert_eq!(
        profile.sample_types,
        model::SampleType::of_mode(model::ProfileMode::Wall)
    );
    let stacks: Vec<(u32, Option<model::BlockState>, &[u64])> = profile
        .stacks
        .iter()
        .map(|s| (s.tid, s.state, s.values.as_slice()))
        .collect();
    assert_eq!(
        stacks,
        [
            (
                8,
                Some(model::BlockState::Sleeping),
                &[0, 0, 2, 30_000_000, 30_000_000][..]
            ),
            (8, None, &[3, 3_000_000, 0, 0, 3_000_000][..]),
            (
                9,
                Some(model::BlockState::Preempted),
                &[0, 0, 1, 1_000_000, 1_000_000][..]
            ),
        ],
        "most time first, a sample standing for 1 ms"
    );
    let off = profile.off_cpu.as_ref().expect("off-CPU");
    assert_eq!((off.blocks, off.total_ns), (3, 31_000_000));
    assert_eq!(
        off.rows.len(),
        1,
        "the kernel's frame is no row: {:?}",
        off.rows
    );
    assert_eq!(off.rows[0].name, "[unknown]");
    assert_eq!(
        (off.rows[0].samples, off.rows[0].inclusive_samples),
        (31_000_000, 31_000_000)
    );
    assert_eq!(off.rows[0].threads.len(), 2);
    let states: Vec<(model::BlockState, u64)> =
        off.states.iter().map(|s| (s.state, s.ns)).collect();
    assert_eq!(
        states,
        [
            (model::BlockState::Sleeping, 30_000_000),
            (model::BlockState::Preempted, 1_000_000)
        ]
    );
    let threads: Vec<(u32, u64, u64, u64)> = profile
        .threads
        .iter()
        .map(|t| (t.tid, t.cpu_ns, t.off_cpu_blocks, t.off_cpu_ns))
        .collect();
    assert_eq!(
        threads,
        [(8, 3_000_000, 2, 30_000_000), (9, 0, 1, 1_000_000)]
    );
    assert_eq!(profile.vm_interval_kinds, [IntervalKind::Scavenge]);
    assert_eq!(
        profile.threads[0].off_cpu_during,
        [model::IntervalTime {
            kind: 0,
            ns: 12_000_000
        }]
    );
    assert_eq!(
        profile.stack_ends.iter().map(|e| e.samples).sum::<u64>(),
        0,
        "how samples' stacks ended, blocks apart (these samples have no call graph)"
    );
}

/// A profile cut to some threads is built from their counts alone, rows included, and says
/// which.
#[test]
fn a_profile_of_some_threads_has_their_counts_alone() {
    use crate::session::threads::ThreadFilter;
    let kernel = |ip| Location::Kernel { ip };
    let mut table = StackTable::default();
    for (tid, ip, n) in [(8, 1, 5), (9, 2, 3)] {
        for _ in 0..n {
            table.count(Task::new(7, tid), [kernel(ip)], None, DuringId(0));
        }
    }
    let mut snap = snapshot(Vec::new());
    snap.stacks = table.snapshot();
    snap.total_samples = 8;
    snap.thread_names
        .insert(Task::new(7, 9), "GC Thread#0".into());
    let only_gc = ThreadFilter::new(Vec::new(), vec!["GC*".into()]).unwrap();
    let profile = build_profile(
        snap.only_threads(&only_gc),
        &symbolizer(),
        &ProfileOptions { hide_kernel: None },
    );
    assert_eq!(profile.total_samples, 3);
    assert_eq!(profile.rows.len(), 1);
    assert_eq!(profile.rows[0].samples, 3);
    assert_eq!(profile.threads.len(), 1);
    assert_eq!(profile.thread_filter, "threads named GC*");
}

/// A profile cut to a label is built from its samples alone, and its blocks off the CPU
/// (which carry no labels) go with the cut, those still blocked at the stop included.
#[test]
fn a_profile_of_a_label_has_its_samples_alone_and_no_blocks() {
    use crate::session::{OffCpuTally, StackTags};
    use vmscope_model::{Label, LabelFilter};
    let kernel = |ip| Location::Kernel { ip };
    let mut table = StackTable::default();
    let phase_b: std::sync::Arc<[Label]> = vec![Label::new("phase", "b")].into();
    let labelled = StackTags {
        during: DuringId(0),
        labels: table.labels(Some(&phase_b)),
    };
    for _ in 0..4 {
        table.count(Task::new(7, 8), [kernel(1)], None, labelled);
    }
    for _ in 0..2 {
        table.count(Task::new(7, 8), [kernel(2)], None, DuringId(0));
    }
    let still = table.intern([Location::StillOffCpu], None, DuringId(0));
    table.add_block(
        Task::new(7, 9),
        still,
        model::BlockState::Sleeping,
        5_000_000,
    );
    let mut snap = snapshot(Vec::new());
    snap.stacks = table.snapshot();
    snap.total_samples = 6;
    snap.off_cpu = Some(OffCpuTally {
        blocks: 1,
        ns: 5_000_000,
        still_blocked: (1, 5_000_000),
        ..OffCpuTally::default()
    });
    let cut = LabelFilter::parse(&["phase=b"]).unwrap();
    let profile = build_profile(
        snap.only_labels(&cut),
        &symbolizer(),
        &ProfileOptions { hide_kernel: None },
    );
    assert_eq!(profile.total_samples, 4);
    assert_eq!(profile.rows.len(), 1);
    assert_eq!(profile.rows[0].samples, 4);
    let off_cpu = profile.off_cpu.as_ref().expect("the tally stays, emptied");
    assert_eq!(
        (
            off_cpu.blocks,
            off_cpu.still_blocked_threads,
            off_cpu.still_blocked_ns
        ),
        (0, 0, 0)
    );
    assert_eq!(profile.label_filter, "phase=b");
}

/// Each row counts its labelled samples per process and label set, as indices into the
/// profile's labels (what `--sort label:KEY` splits rows by); unlabelled samples are the rest.
#[test]
fn rows_count_their_labelled_samples_per_process_and_set() {
    use crate::session::StackTags;
    use vmscope_model::{Label, LabelSetSamples};
    let kernel = |ip| Location::Kernel { ip };
    let mut table = StackTable::default();
    let a: std::sync::Arc<[Label]> = vec![Label::new("phase", "a")].into();
    let b: std::sync::Arc<[Label]> =
        vec![Label::new("phase", "b"), Label::new("tenant", "x")].into();
    let tags = |table: &mut StackTable, set| StackTags {
        during: DuringId(0),
        labels: table.labels(Some(set)),
    };
    let (with_a, with_b) = (tags(&mut table, &a), tags(&mut table, &b));
    for (pid, tags, n) in [(7, with_a, 3), (7, with_b, 2), (9, with_a, 1)] {
        for _ in 0..n {
            table.count(Task::new(pid, pid), [kernel(1)], None, tags);
        }
    }
    table.count(Task::new(7, 7), [kernel(1)], None, DuringId(0));
    let mut snap = snapshot(Vec::new());
    snap.stacks = table.snapshot();
    snap.total_samples = 7;
    let profile = build_profile(snap, &symbolizer(), &ProfileOptions { hide_kernel: None });
    assert_eq!(
        profile.labels,
        [
            Label::new("phase", "a"),
            Label::new("phase", "b"),
            Label::new("tenant", "x")
        ]
    );
    assert_eq!(profile.rows.len(), 1);
    assert_eq!(profile.rows[0].samples, 7);
    let set = |pid, labels: &[u32], samples| LabelSetSamples {
        pid,
        labels: labels.to_vec(),
        samples,
    };
    assert_eq!(
        profile.rows[0].labels,
        [set(7, &[0], 3), set(7, &[1, 2], 2), set(9, &[0], 1)]
    );
}
