//! A hand-built profile with call stacks through native, JIT (with an inlined method) and kernel
//! code, as the daemon would send it: for the tests of the stack formats that need no daemon
//! (pprof read back by `go tool pprof`, flame graphs). Live profiles are checked by the
//! end-to-end tests.

use std::collections::{BTreeMap, BTreeSet};

use vmscope_proto::v1::{
    CallGraph, CodeKind, Frame, ProcessSamples, Profile, ProfileRow, Section, Session, Stack,
    TargetProcess,
};

fn native(name: &str, module: &str, section: Section) -> Frame {
    Frame {
        section: section as i32,
        name: name.into(),
        module: module.into(),
        symbolized: true,
        build_id: if module == "jitvm" {
            "5fe1c0de".into()
        } else {
            String::new()
        },
        ..Default::default()
    }
}

fn jit(name: &str, range: &str, inlined: bool) -> Frame {
    Frame {
        section: Section::Generated as i32,
        name: name.into(),
        module: "[anon]".into(),
        symbolized: true,
        kind: CodeKind::Method as i32,
        range: range.into(),
        inlined,
        code_map: "vm".into(),
        optimised: inlined || name == "Inline>>bench",
        ..Default::default()
    }
}

/// 1000 samples at 1000 Hz of the jitvm (pid 4100) and a second process (pid 4200):
///
/// | stack (root first)                                          | pid  | samples |
/// |-------------------------------------------------------------|------|---------|
/// | main Interpreter benchmark benchFib benchFib                  | 4100 | 600     |
/// | main Interpreter benchmark Inline>>bench Inline>>heavy(inl.)  | 4100 | 200     |
/// | main Interpreter benchmark Array>>at:put:                     | 4100 | 90      |
/// | main Interpreter write ksys_write                             | 4100 | 50      |
/// | main Interpreter benchmark benchFib                           | 4200 | 40      |
/// | Interpreter benchFib (truncated)                              | 4100 | 20      |
pub fn profile() -> Profile {
    let frames = vec![
        native("main", "jitvm", Section::Vanilla),
        // Capitalised: inferno's java palette would take it for Java (green) unless pinned.
        native("Interpreter", "jitvm", Section::Vanilla),
        jit("benchmark", "74->78", false),
        jit("Integer>>benchFib", "12->15", false),
        jit("Inline>>heavy", "33->70", true),
        jit("Inline>>bench", "5->9", false),
        jit("Array>>at:put:", "1->end", false),
        native("write", "libc.so.6", Section::Other),
        Frame {
            kernel: true,
            ..native("ksys_write", "[kernel.kallsyms]", Section::Other)
        },
    ];
    let stack = |frames: &[u32], pid, samples, truncated| Stack {
        frames: frames.to_vec(),
        pid,
        samples,
        truncated,
    };
    let stacks = vec![
        stack(&[3, 3, 2, 1, 0], 4100, 600, false),
        stack(&[4, 5, 2, 1, 0], 4100, 200, false),
        stack(&[6, 2, 1, 0], 4100, 90, false),
        stack(&[8, 7, 1, 0], 4100, 50, false),
        stack(&[3, 2, 1, 0], 4200, 40, false),
        stack(&[3, 1], 4100, 20, true),
    ];
    let process = |pid, command: &str, samples| ProcessSamples {
        pid,
        command: command.into(),
        samples,
    };
    let rows = vec![ProfileRow {
        section: Section::Generated as i32,
        name: "Integer>>benchFib".into(),
        module: "[anon]".into(),
        samples: 660,
        symbolized: true,
        processes: vec![
            process(4100, "jitvm", 620),
            process(4200, "jitvm-child", 40),
        ],
        ..Default::default()
    }];
    Profile {
        session: Some(Session {
            id: 12,
            frequency_hz: 1000,
            started_at: Some(prost_types::Timestamp {
                seconds: 1_795_341_600,
                nanos: 0,
            }),
            targets: vec![TargetProcess {
                pid: 4100,
                command: "jitvm".into(),
                executable: "/opt/jitvm/bin/jitvm".into(),
                ..Default::default()
            }],
            samples: 1000,
            call_graph: CallGraph::Fp as i32,
            ..Default::default()
        }),
        vm_executable: "/opt/jitvm/bin/jitvm".into(),
        total_samples: 1000,
        duration_seconds: 2.0,
        rows,
        frames,
        stacks,
        truncated_stacks: 20,
        processes: 2,
        ..Default::default()
    }
}

/// Self and inclusive samples per frame name, the way pprof counts them: self for the leaf,
/// inclusive once per sample for every name in its stack (recursion counts once).
pub fn samples_by_name(profile: &Profile) -> BTreeMap<String, (u64, u64)> {
    let mut by_name: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for stack in &profile.stacks {
        let names: Vec<&str> = stack
            .frames
            .iter()
            .map(|&i| profile.frames[i as usize].name.as_str())
            .collect();
        if let Some(leaf) = names.first() {
            by_name.entry((*leaf).to_owned()).or_default().0 += stack.samples;
        }
        for name in names.iter().collect::<BTreeSet<_>>() {
            by_name.entry((*name).to_owned()).or_default().1 += stack.samples;
        }
    }
    by_name
}
