//! Call stacks of a [`Profile`], read the way a call tree reads them, and the fixtures whose
//! call structure is known by construction (callers 70/30, syscalls, 300-deep recursion).
//!
//! The helpers read only the gRPC contract (`Profile.frames`, `Profile.stacks`, leaf first), so
//! that the tests that use them hold whatever the CLI's report formats become.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
    time::Duration,
};

use anyhow::{Context, bail};
use vmscope_proto::v1::{
    CallGraph, CodeEntry, Frame, Profile, Stack, StackEnd, StartSessionRequest,
};

use crate::{Client, shared_tempdir, stop_and_profile};

/// The frames of `stack`, leaf first. Panics on an index outside `Profile.frames`: the
/// contract says stacks name frames by index into it.
pub fn frames_of<'a>(profile: &'a Profile, stack: &'a Stack) -> Vec<&'a Frame> {
    stack
        .frames
        .iter()
        .map(|&i| {
            profile.frames.get(i as usize).unwrap_or_else(|| {
                panic!(
                    "stack frame index {i} outside Profile.frames ({} frames)",
                    profile.frames.len()
                )
            })
        })
        .collect()
}

/// Every stack as frame names, root first (as a call tree or folded stacks read), with its
/// samples.
pub fn named_stacks(profile: &Profile) -> Vec<(Vec<String>, u64)> {
    profile
        .stacks
        .iter()
        .map(|s| {
            let mut names: Vec<String> = frames_of(profile, s)
                .iter()
                .map(|f| f.name.clone())
                .collect();
            names.reverse();
            (names, s.samples)
        })
        .collect()
}

/// Inclusive samples of the frames matching `is`: samples whose stack holds one anywhere,
/// counted once per sample however often recursion repeats it.
pub fn inclusive(profile: &Profile, is: impl Fn(&Frame) -> bool) -> u64 {
    profile
        .stacks
        .iter()
        .filter(|s| frames_of(profile, s).into_iter().any(&is))
        .map(|s| s.samples)
        .sum()
}

/// Samples whose stack has a frame matching `callee` directly called from a frame matching
/// `caller` (the frame right after it, rootwards), counted once per sample.
pub fn called_from(
    profile: &Profile,
    callee: impl Fn(&Frame) -> bool,
    caller: impl Fn(&Frame) -> bool,
) -> u64 {
    profile
        .stacks
        .iter()
        .filter(|s| {
            frames_of(profile, s)
                .windows(2)
                .any(|pair| callee(pair[0]) && caller(pair[1]))
        })
        .map(|s| s.samples)
        .sum()
}

/// A frame predicate: the frame's name is `name`.
pub fn named(name: &str) -> impl Fn(&Frame) -> bool + '_ {
    move |f: &Frame| f.name == name
}

/// Samples whose stack ended `end` (Stack.end).
pub fn ended(profile: &Profile, end: StackEnd) -> u64 {
    profile
        .stacks
        .iter()
        .filter(|s| s.end() == end)
        .map(|s| s.samples)
        .sum()
}

/// A readable dump of the `n` heaviest stacks, root first, for assertion messages.
pub fn dump_stacks(profile: &Profile, n: usize) -> String {
    let mut text = format!(
        "total {} in {} stacks, truncated {}, frames {}\n",
        profile.total_samples,
        profile.stacks.len(),
        profile.truncated_stacks,
        profile.frames.len()
    );
    let mut stacks: Vec<&Stack> = profile.stacks.iter().collect();
    stacks.sort_by_key(|s| std::cmp::Reverse(s.samples));
    for s in stacks.into_iter().take(n) {
        let frames = frames_of(profile, s);
        let shown: Vec<String> = frames
            .iter()
            .rev()
            .take(40)
            .map(|f| {
                let mut label = f.name.clone();
                if f.kernel {
                    label += "[k]";
                }
                if f.inlined {
                    label += "[inl]";
                }
                if !f.range.is_empty() {
                    label += &format!(" {}", f.range);
                }
                if f.line > 0 {
                    let file = f.file.rsplit('/').next().unwrap_or(&f.file);
                    label += &format!(" {file}:{}", f.line);
                }
                label
            })
            .collect();
        text += &format!(
            "  {:>6} pid {} {}{}{}\n",
            s.samples,
            s.pid,
            if s.truncated { "(truncated) " } else { "" },
            shown.join(";"),
            if frames.len() > 40 {
                format!(";... ({} frames)", frames.len())
            } else {
                String::new()
            }
        );
    }
    text
}

/// The label VMProfiler's rule gives the range of `entry`'s own code that holds `addr` (as
/// `Frame.range` writes it: bytecode pcs 1-based, `1->b1`, `bi->bi+1`, `bn->end`), from the
/// VM's own pc map (`mcpc` absolute, as a code log's placement holds it). `None` when the
/// range belongs to a method inlined there (its label names that method) or the entry has no
/// pc map. This is the tests' oracle, written from the proto's contract, not the daemon's code.
pub fn vm_range_label(entry: &CodeEntry, addr: u64) -> Option<String> {
    let points = &entry.pc_map;
    if points.is_empty() {
        return None;
    }
    let k = points.partition_point(|p| p.mcpc <= addr);
    let next = points
        .get(k)
        .map_or_else(|| "end".to_owned(), |p| (p.bcpc + 1).to_string());
    match k.checked_sub(1).map(|i| &points[i]) {
        None => Some(format!("1->{next}")),
        Some(here) if here.inlined.is_empty() => Some(format!("{}->{next}", here.bcpc + 1)),
        Some(_) => None,
    }
}

/// Starts a session sampling `pid` at 1400 Hz with the given call graph, keeping up to
/// `keep_samples` samples one by one; answers its id.
pub async fn start_stacks_session(
    client: &mut Client,
    pid: u32,
    call_graph: CallGraph,
    keep_samples: u32,
) -> u64 {
    client
        .start_session(StartSessionRequest {
            pids: vec![pid],
            frequency_hz: Some(1400),
            keep_samples,
            call_graph: call_graph as i32,
            ..Default::default()
        })
        .await
        .expect("start a session")
        .into_inner()
        .id
}

/// Samples `pid` at 1400 Hz for `seconds` with the given call graph (and kept samples), and
/// returns the final profile.
pub async fn record_stacks(
    client: &mut Client,
    pid: u32,
    call_graph: CallGraph,
    keep_samples: u32,
    seconds: f64,
) -> Profile {
    let session = start_stacks_session(client, pid, call_graph, keep_samples).await;
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop_and_profile(client, session).await
}

/// The C fixtures of the stack tests, built with frame pointers and without inlining.
#[derive(Debug)]
pub struct StackFixtures {
    _dir: tempfile::TempDir,
    /// `callers`: `leaf` called from `caller_a` 70% and `caller_b` 30% of the time.
    pub callers: PathBuf,
    /// `syscalls`: `make_syscalls` reads /dev/zero in a tight loop with the syscall
    /// instruction.
    pub syscalls: PathBuf,
    /// `recursion`: `recurse` 300 deep over `bottom`, which burns CPU.
    pub recursion: PathBuf,
}

/// Builds the stack fixtures once per test process (gcc is installed by `cargo xtask setup`).
pub fn stack_fixtures() -> &'static StackFixtures {
    static FIXTURES: OnceLock<StackFixtures> = OnceLock::new();
    FIXTURES.get_or_init(|| build_stack_fixtures().unwrap_or_else(|e| panic!("{e:#}")))
}

fn build_stack_fixtures() -> anyhow::Result<StackFixtures> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let dir = shared_tempdir();
    let build = |name: &str| -> anyhow::Result<PathBuf> {
        let out_path = dir.path().join(name);
        let out = out_path.to_str().context("non-UTF-8 temporary path")?;
        crate::gcc_fixture(&src, &["-o", out, &format!("{name}.c")])?;
        Ok(out_path)
    };
    Ok(StackFixtures {
        callers: build("callers")?,
        syscalls: build("syscalls")?,
        recursion: build("recursion")?,
        _dir: dir,
    })
}

/// The C fixtures of the DWARF stack tests, built as distributions build: `-O2` without frame
/// pointers (but without inlining or cloning, so that the call structure is what the sources
/// say: `-fno-ipa-icf` keeps `caller_a` and `caller_b`, identical, apart).
#[derive(Debug)]
pub struct NoFpFixtures {
    _dir: tempfile::TempDir,
    /// `callers.c` without frame pointers: `leaf` under `caller_a` 70%, `caller_b` 30%.
    pub callers: PathBuf,
    /// `qsort.c`: `by_weight` burns CPU as libc's qsort's comparator, under `sort_once`.
    pub qsort: PathBuf,
}

/// Builds the frame-pointer-less fixtures once per test process.
pub fn no_fp_fixtures() -> &'static NoFpFixtures {
    static FIXTURES: OnceLock<NoFpFixtures> = OnceLock::new();
    FIXTURES.get_or_init(|| build_no_fp_fixtures().unwrap_or_else(|e| panic!("{e:#}")))
}

fn build_no_fp_fixtures() -> anyhow::Result<NoFpFixtures> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let dir = shared_tempdir();
    let build = |name: &str| -> anyhow::Result<PathBuf> {
        let out_path = dir.path().join(format!("{name}-nofp"));
        let out = Command::new("gcc")
            .args([
                "-O2",
                "-g",
                "-fomit-frame-pointer",
                "-fno-inline",
                "-fno-ipa-icf",
                "-fno-ipa-cp",
                "-fno-ipa-sra",
                "-Wl,--build-id",
                "-o",
            ])
            .arg(&out_path)
            .arg(format!("{name}.c"))
            .current_dir(&src)
            .output()
            .context("cannot run gcc (install it, or run `cargo xtask setup`)")?;
        if !out.status.success() {
            bail!(
                "gcc {name}.c failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(out_path)
    };
    Ok(NoFpFixtures {
        callers: build("callers")?,
        qsort: build("qsort")?,
        _dir: dir,
    })
}

/// `kernel.perf_event_max_stack`: the most frames of a user (or kernel) stack.
pub fn perf_event_max_stack() -> usize {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(127)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscope_proto::v1::{CodeKind, PcMapping};

    fn point(mcpc: u64, bcpc: u32) -> PcMapping {
        PcMapping {
            mcpc,
            bcpc,
            inlined: vec![],
        }
    }

    #[test]
    fn range_labels_follow_vmprofilers_rule() {
        let entry = CodeEntry {
            kind: CodeKind::Method as i32,
            name: "A>>f".into(),
            start: 0x100,
            size: 0x100,
            pc_map: vec![point(0x110, 2), point(0x130, 9), point(0x150, 20)],
            cases: vec![],
        };
        let label = |addr| vm_range_label(&entry, addr).unwrap();
        assert_eq!(label(0x100), "1->3");
        assert_eq!(label(0x10f), "1->3");
        assert_eq!(label(0x110), "3->10");
        // A return address at a point: the call is in the range before it.
        assert_eq!(label(0x130 - 1), "3->10");
        assert_eq!(label(0x130), "10->21");
        assert_eq!(label(0x1ff), "21->end");
    }

    #[test]
    fn inclusive_counts_a_recursive_stack_once() {
        let frame = |name: &str| Frame {
            name: name.into(),
            ..Default::default()
        };
        let profile = Profile {
            frames: vec![frame("leaf"), frame("rec"), frame("main")],
            stacks: vec![
                Stack {
                    frames: vec![0, 1, 1, 1, 2],
                    samples: 5,
                    ..Default::default()
                },
                Stack {
                    frames: vec![1, 2],
                    samples: 2,
                    ..Default::default()
                },
                Stack {
                    frames: vec![2],
                    samples: 1,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(inclusive(&profile, named("rec")), 7);
        assert_eq!(inclusive(&profile, named("main")), 8);
        assert_eq!(called_from(&profile, named("rec"), named("rec")), 5);
        assert_eq!(called_from(&profile, named("leaf"), named("main")), 0);
        assert_eq!(
            named_stacks(&profile)[0],
            (
                vec!["main", "rec", "rec", "rec", "leaf"]
                    .into_iter()
                    .map(String::from)
                    .collect(),
                5
            )
        );
    }
}
