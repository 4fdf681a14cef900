//! What a continuous window costs to export as OTLP profiles as the processes in it grow: 10,
//! 100 and 1,000 processes, each a profile of 40 distinct stacks of 24 frames (a busy process
//! at 19 Hz over 10 s), half its frames shared with every other process (libc, the kernel, the
//! runtime) as on a real host. The request is built (`report::otlp::export_request`, one
//! shared dictionary) and encoded as the exporter sends it, before gzip; the encoded and the
//! gzipped bytes are printed once per size.
//!
//! `window_split` times the step before: a system-wide window's counts split into each
//! process's share (`StackSnapshot::by_process`), for the same numbers of processes, 40
//! stacks of 12 frames each.
//!
//! `continuous_merge` times a query of the kept windows: `merge` of 60 windows (10 minutes at
//! the default 10 s) of 10, 100 and 1,000 such processes, each profile with rows as the daemon
//! makes them, one of which (libc's `memcpy`, 4 source lines) every process shares.
//!
//! `cargo bench -p vmscoped --bench export`

use std::{
    hint::black_box,
    io::Write as _,
    time::{Duration, SystemTime},
};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use prost::Message as _;
use vmscope_model::{
    Frame, Profile, SampleType, Section, Stack, StackEnd, StackTreeBuilder, Thread,
};
use vmscope_report::otlp::{ProcessProfile, export_request};

const STACKS: u32 = 40;
const DEPTH: u32 = 24;

/// Process `pid`'s profile: shared frames (`libc`, `[kernel]`) under its own.
fn process(pid: u32) -> Profile {
    let mut profile = Profile {
        sample_types: vec![SampleType::Samples, SampleType::CpuTime],
        ..Profile::default()
    };
    let shared = DEPTH / 2;
    for i in 0..shared {
        profile.frames.push(Frame {
            section: Section::Other,
            name: format!("shared_function_{i}"),
            module: "libc.so.6".into(),
            file: "/build/glibc/source/file.c".into(),
            line: i + 1,
            ..Frame::default()
        });
    }
    for i in 0..STACKS * (DEPTH - shared) {
        profile.frames.push(Frame {
            section: Section::Vanilla,
            name: format!("process_{pid}_function_{i}"),
            module: format!("program{pid}"),
            ..Frame::default()
        });
    }
    let mut tree = StackTreeBuilder::new();
    for s in 0..STACKS {
        let own = (0..DEPTH - shared).map(|d| shared + s * (DEPTH - shared) + d);
        let frames: Vec<u32> = own.chain(0..shared).collect();
        profile.stacks.push(Stack {
            node: tree.intern(&frames),
            pid,
            tid: pid,
            values: vec![5, 5 * 52_631_578],
            end: Some(StackEnd::Complete),
            ..Stack::default()
        });
    }
    profile.stack_nodes = tree.finish();
    profile.threads = vec![Thread {
        pid,
        tid: pid,
        name: format!("program{pid}"),
        samples: u64::from(STACKS) * 5,
        ..Thread::default()
    }];
    profile
}

fn export(c: &mut Criterion) {
    let mut group = c.benchmark_group("otlp_window");
    group.measurement_time(Duration::from_secs(5));
    for processes in [10u32, 100, 1_000] {
        let profiles: Vec<Profile> = (1..=processes).map(process).collect();
        let executables: Vec<String> = (1..=processes)
            .map(|p| format!("/usr/bin/program{p}"))
            .collect();
        let parts: Vec<ProcessProfile<'_>> = profiles
            .iter()
            .zip(&executables)
            .map(|(profile, executable)| ProcessProfile {
                profile,
                pid: profile.threads[0].pid,
                executable,
                command: "program",
                container_id: None,
                service_name: None,
                namespace_pid: None,
                start: SystemTime::UNIX_EPOCH,
                duration: Duration::from_secs(10),
                period_ns: 52_631_578,
            })
            .collect();
        let encoded = export_request(&parts, "host").encode_to_vec();
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(&encoded).unwrap();
        let gzipped = gzip.finish().unwrap().len();
        println!(
            "otlp_window/{processes}: {} KiB encoded, {} KiB gzipped",
            encoded.len() / 1024,
            gzipped / 1024
        );
        group.bench_with_input(
            BenchmarkId::from_parameter(processes),
            &parts,
            |b, parts| b.iter(|| black_box(export_request(parts, "host").encode_to_vec())),
        );
    }
    group.finish();
}

fn split(c: &mut Criterion) {
    use vmscoped::{
        session::{DuringId, StackTable},
        vocab::{Location, StackEnd as End},
    };
    let mut group = c.benchmark_group("window_split");
    group.measurement_time(Duration::from_secs(5));
    for processes in [10u32, 100, 1_000] {
        let mut table = StackTable::with_limit(usize::MAX);
        for pid in 1..=processes {
            for s in 0..STACKS {
                let frames = (0..12u64).map(|d| Location::Kernel {
                    ip: u64::from(pid) << 32 | u64::from(s) << 8 | d,
                });
                table.count(pid, frames, Some(End::Complete), DuringId(0));
            }
        }
        let snapshot = table.snapshot();
        group.bench_with_input(
            BenchmarkId::from_parameter(processes),
            &snapshot,
            |b, snapshot| b.iter(|| black_box(snapshot.by_process())),
        );
    }
    group.finish();
}

/// `process(pid)` with its rows: its own hottest function, and libc's `memcpy` shared by every
/// process, by four source lines.
fn process_with_rows(pid: u32) -> Profile {
    use vmscope_model::{ProcessSamples, ProfileRow, SourceLineSamples};
    let mut profile = process(pid);
    let own = ProfileRow {
        section: Section::Vanilla,
        name: format!("process_{pid}_function_0"),
        module: format!("program{pid}"),
        samples: 150,
        inclusive_samples: 200,
        processes: vec![ProcessSamples {
            pid,
            command: format!("program{pid}"),
            samples: 150,
        }],
        ..ProfileRow::default()
    };
    let shared = ProfileRow {
        section: Section::Other,
        name: "memcpy".into(),
        module: "libc.so.6".into(),
        samples: 50,
        inclusive_samples: 50,
        processes: vec![ProcessSamples {
            pid,
            command: format!("program{pid}"),
            samples: 50,
        }],
        source_lines: (0..4)
            .map(|line| SourceLineSamples {
                file: "/build/glibc/string/memcpy.S".into(),
                line: 100 + line,
                pid,
                samples: 12,
            })
            .collect(),
        ..ProfileRow::default()
    };
    profile.rows = vec![own, shared];
    profile.total_samples = 200;
    profile
}

fn merge(c: &mut Criterion) {
    let mut group = c.benchmark_group("continuous_merge");
    group.measurement_time(Duration::from_secs(5));
    group.sample_size(10);
    for processes in [10u32, 100, 1_000] {
        let window: Vec<Profile> = (1..=processes).map(process_with_rows).collect();
        let parts: Vec<&Profile> = (0..60).flat_map(|_| window.iter()).collect();
        group.bench_with_input(
            BenchmarkId::from_parameter(processes),
            &parts,
            |b, parts| b.iter(|| black_box(vmscope_model::merge::merge(parts, 19))),
        );
    }
    group.finish();
}

criterion_group!(benches, export, split, merge);
criterion_main!(benches);
