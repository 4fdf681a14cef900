//! A small hand-built profile with call stacks through native, JIT (with inlining) and kernel
//! code, as the daemon would send it, for the tests of the stack formats: this crate's pprof and
//! folded unit tests and (with the `fixtures` feature) the end-to-end tests that need no daemon
//! (pprof read back by `go tool pprof`, flame graphs). Numbers are chosen so that sums are easy
//! to check by hand.

use vmscope_model::{
    CallGraph, CodeKind, Frame, ProcessSamples, Profile, ProfileRow, SampleType, Section, Session,
    Stack, StackEnd, StackTreeBuilder, TargetProcess,
};

/// 2026-11-22T10:00:00Z.
pub const STARTED_AT_SECS: u64 = 1_795_341_600;
/// 1000 Hz: one sample is 1 ms of CPU.
pub const FREQUENCY_HZ: u32 = 1000;

/// Index into [`profile`]'s frames: `main`, native, the root of every whole stack.
pub const MAIN: u32 = 0;
/// Index into [`profile`]'s frames: `Interpreter`, native.
pub const INTERPRETER: u32 = 1;
/// Index into [`profile`]'s frames: `benchmark`, JIT, called from 74->78.
pub const BENCHMARK: u32 = 2;
/// Index into [`profile`]'s frames: `Integer>>benchFib`, JIT.
pub const BENCH_FIB: u32 = 3;
/// Index into [`profile`]'s frames: `Inline>>heavy`, JIT, inlined into [`INLINE_BENCH`].
pub const HEAVY_INLINED: u32 = 4;
/// Index into [`profile`]'s frames: `Inline>>bench`, JIT, optimised.
pub const INLINE_BENCH: u32 = 5;
/// Index into [`profile`]'s frames: libc's `write`.
pub const WRITE: u32 = 6;
/// Index into [`profile`]'s frames: the kernel's `ksys_write`.
pub const KSYS_WRITE: u32 = 7;
/// Index into [`profile`]'s frames: a native function named [`HOSTILE_NAME`].
pub const HOSTILE: u32 = 8;

/// The hostile name of frame [`HOSTILE`]: separators of the folded format inside.
pub const HOSTILE_NAME: &str = "weird;name\nwith\rbreaks";

fn native(name: &str, module: &str, section: Section, build_id: &str) -> Frame {
    Frame {
        section,
        name: name.into(),
        module: module.into(),
        symbolized: true,
        build_id: build_id.into(),
        ..Default::default()
    }
}

fn jit(name: &str, range: &str, inlined: bool, optimised: bool) -> Frame {
    Frame {
        section: Section::Generated,
        name: name.into(),
        module: "[anon]".into(),
        symbolized: true,
        kind: Some(CodeKind::Method),
        range: range.into(),
        inlined,
        code_map: "vm".into(),
        optimised,
        ..Default::default()
    }
}

fn stack(
    tree: &mut StackTreeBuilder,
    frames: &[u32],
    pid: u32,
    samples: u64,
    truncated: bool,
) -> Stack {
    Stack {
        node: tree.intern(frames),
        pid,
        tid: pid,
        values: vec![samples, samples * 1_000_000],
        truncated,
        end: Some(if truncated {
            StackEnd::DepthLimit
        } else {
            StackEnd::Complete
        }),
        during: Vec::new(),
        state: None,
        labels: Vec::new(),
    }
}

/// 1000 samples of two processes of the jitvm:
///
/// | stack (root first)                                  | pid | samples |
/// |-----------------------------------------------------|-----|---------|
/// | main Interpreter benchmark benchFib benchFib        | 100 | 700     |
/// | main Interpreter benchmark Inline>>bench (+heavy)   | 100 | 200     |
/// | main Interpreter write ksys_write                   | 100 | 50      |
/// | main Interpreter benchmark benchFib                 | 200 | 40      |
/// | Interpreter weird;name… (truncated)                 | 100 | 10      |
pub fn profile() -> Profile {
    let kernel = Frame {
        kernel: true,
        ..native("ksys_write", "[kernel.kallsyms]", Section::Other, "")
    };
    let frames = vec![
        native("main", "jitvm", Section::Vanilla, "abcd01"),
        // Capitalised: inferno's java palette would take it for Java (green) unless pinned.
        native("Interpreter", "jitvm", Section::Vanilla, "abcd01"),
        jit("benchmark", "74->78", false, false),
        jit("Integer>>benchFib", "12->15", false, false),
        jit("Inline>>heavy", "33->70", true, true),
        jit("Inline>>bench", "5->9", false, true),
        native("write", "libc.so.6", Section::Other, "ef02"),
        kernel,
        native(HOSTILE_NAME, "libfoo.so", Section::Other, ""),
    ];
    let mut tree = StackTreeBuilder::new();
    let stacks = vec![
        stack(
            &mut tree,
            &[BENCH_FIB, BENCH_FIB, BENCHMARK, INTERPRETER, MAIN],
            100,
            700,
            false,
        ),
        stack(
            &mut tree,
            &[HEAVY_INLINED, INLINE_BENCH, BENCHMARK, INTERPRETER, MAIN],
            100,
            200,
            false,
        ),
        stack(
            &mut tree,
            &[KSYS_WRITE, WRITE, INTERPRETER, MAIN],
            100,
            50,
            false,
        ),
        stack(
            &mut tree,
            &[BENCH_FIB, BENCHMARK, INTERPRETER, MAIN],
            200,
            40,
            false,
        ),
        stack(&mut tree, &[HOSTILE, INTERPRETER], 100, 10, true),
    ];
    let rows = vec![ProfileRow {
        section: Section::Generated,
        name: "Integer>>benchFib".into(),
        module: "[anon]".into(),
        samples: 740,
        processes: vec![
            ProcessSamples {
                pid: 100,
                command: "jitvm".into(),
                samples: 700,
            },
            ProcessSamples {
                pid: 200,
                command: "jitvm2".into(),
                samples: 40,
            },
        ],
        ..Default::default()
    }];
    Profile {
        session: Some(Session {
            id: 7,
            frequency_hz: FREQUENCY_HZ,
            started_at: Some(
                std::time::UNIX_EPOCH + std::time::Duration::new(STARTED_AT_SECS, 500),
            ),
            targets: vec![TargetProcess {
                pid: 100,
                command: "jitvm".into(),
                executable: "/opt/jitvm/bin/jitvm".into(),
                ..Default::default()
            }],
            samples: 1000,
            call_graph: Some(CallGraph::Fp),
            ..Default::default()
        }),
        vm_executable: "/opt/jitvm/bin/jitvm".into(),
        total_samples: 1000,
        lost_samples: 3,
        duration_seconds: 2.5,
        rows,
        frames,
        stack_nodes: tree.finish(),
        sample_types: vec![SampleType::Samples, SampleType::CpuTime],
        stacks,
        truncated_stacks: 10,
        processes: 2,
        ..Default::default()
    }
}
