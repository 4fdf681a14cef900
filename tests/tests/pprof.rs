//! pprof files read back by a reader nobody on this project wrote: `go tool pprof` (Debian's
//! golang-go, installed by `cargo xtask setup`). Mostly from a hand-built profile, so that the
//! format is checked without depending on the daemon's stacks; one test asks a live daemon for
//! GetProfile's pprof bytes. A machine without Go fails these tests and says how to get it:
//! they never pass by skipping.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Read as _,
    process::Command,
    time::Duration,
};

use prost::Message as _;
use vmscope_model::{IntervalKind, Profile};
use vmscope_proto::{
    pprof,
    v1::{GetProfileRequest, StartSessionRequest},
};
use vmscope_report::stack_fixture;
use vmscope_tests::{Daemon, Running, fixtures, go_pprof, pprof_top_rows, stop_and_profile};

/// Writes `profile` as pprof into a fresh directory.
fn pprof_file(profile: &Profile) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("profile.pb.gz");
    let bytes = vmscope_report::pprof::encode(profile).expect("encode pprof");
    std::fs::write(&file, bytes).expect("write the pprof file");
    (dir, file)
}

/// The shared stack fixture with its hostile frame (the folded format's separators and line
/// breaks) given a plain name: go tool pprof's text reports are a row per line, which a line
/// break in a name would split. The folded and flame graph tests keep the hostile name.
fn profile() -> Profile {
    let mut profile = stack_fixture::profile();
    profile.frames[stack_fixture::HOSTILE as usize].name = "weird_name".into();
    profile
}

/// Self and inclusive samples per frame name, the way pprof counts them: self for the leaf,
/// inclusive once per sample for every name in its stack (recursion counts once).
fn samples_by_name(profile: &Profile) -> BTreeMap<String, (u64, u64)> {
    let mut by_name: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for stack in &profile.stacks {
        let names: Vec<&str> = profile
            .stack_frames(stack)
            .map(|i| profile.frames[i as usize].name.as_str())
            .collect();
        if let Some(leaf) = names.first() {
            by_name.entry((*leaf).to_owned()).or_default().0 += stack.samples();
        }
        for name in names.iter().collect::<BTreeSet<_>>() {
            by_name.entry((*name).to_owned()).or_default().1 += stack.samples();
        }
    }
    by_name
}

#[test]
fn go_tool_pprof_top_counts_self_and_inclusive_samples_like_the_profile() {
    let profile = profile();
    let (_dir, file) = pprof_file(&profile);
    let output = go_pprof(&["-top", "-sample_index=samples", "-nodefraction=0"], &file);
    assert!(
        output.contains("File: jitvm\n"),
        "the VM is the main binary:\n{output}"
    );
    assert!(
        output.contains(&format!("Total samples = {} ", profile.total_samples)),
        "{output}"
    );
    let rows = pprof_top_rows(&output);
    let expected = samples_by_name(&profile);
    assert_eq!(
        rows.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "every frame's function, and no other:\n{output}"
    );
    for (name, (flat, cum)) in &expected {
        let (top_flat, top_cum) = &rows[name];
        assert_eq!(top_flat, &flat.to_string(), "flat of {name}:\n{output}");
        assert_eq!(top_cum, &cum.to_string(), "cum of {name}:\n{output}");
    }
    // The hand-worked figures: 700 + 40 samples of benchFib at the leaf, main in every stack
    // but the truncated one.
    assert_eq!(expected["Integer>>benchFib"], (740, 740));
    assert_eq!(expected["main"], (0, 990));

    // CPU time: one sample is 1 ms at 1000 Hz.
    let cpu = go_pprof(
        &["-top", "-sample_index=cpu", "-unit=ms", "-nodefraction=0"],
        &file,
    );
    let cpu_rows = pprof_top_rows(&cpu);
    assert_eq!(cpu_rows["Integer>>benchFib"].0, "740ms", "{cpu}");
    assert_eq!(cpu_rows["Interpreter"].1, "1000ms", "{cpu}");
}

#[test]
fn go_tool_pprof_lines_show_call_sites() {
    let (_dir, file) = pprof_file(&profile());
    let output = go_pprof(
        &["-top", "-lines", "-sample_index=samples", "-nodefraction=0"],
        &file,
    );
    let rows = pprof_top_rows(&output);
    // benchmark calls at bytecode range 74->78; the inlined method's own range 33->70.
    assert_eq!(
        rows["benchmark vm:74"],
        ("0".into(), "940".into()),
        "{output}"
    );
    assert_eq!(rows["Inline>>heavy vm:33"].0, "200", "{output}");
}

/// One sample of `-traces`: its labels, samples and frames (leaf first).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Trace {
    labels: BTreeMap<String, String>,
    samples: u64,
    frames: Vec<String>,
}

fn traces(output: &str) -> Vec<Trace> {
    let mut traces = Vec::new();
    for block in output.split("-----------+").skip(1) {
        let mut trace = Trace {
            labels: BTreeMap::new(),
            samples: 0,
            frames: Vec::new(),
        };
        for line in block.lines().skip(1) {
            if line.trim().is_empty() || line.starts_with('-') {
                continue;
            }
            // Labels come first, `key:  value`, right-aligned on 11 columns unless a key is
            // longer (`thread.name:`).
            let label = line
                .split_once(":  ")
                .filter(|(key, _)| trace.frames.is_empty() && !key.trim().contains(' '));
            if let Some((key, value)) = label {
                trace
                    .labels
                    .insert(key.trim().to_owned(), value.trim().to_owned());
                continue;
            }
            let (left, right) = (line.get(..11).unwrap_or(line), line.get(11..).unwrap_or(""));
            let right = right.trim().trim_end_matches(" (inline)").to_owned();
            if !left.trim().is_empty() {
                trace.samples = left.trim().parse().expect("a sample count");
                trace.frames.push(right);
            } else {
                trace.frames.push(right);
            }
        }
        if trace.samples > 0 {
            traces.push(trace);
        }
    }
    traces
}

#[test]
fn go_tool_pprof_traces_are_the_profiles_stacks_with_their_labels() {
    let mut profile = profile();
    // Process 100's main thread has a name; process 200's has none.
    profile.threads = vec![vmscope_model::Thread {
        pid: 100,
        tid: 100,
        name: "VM Thread".into(),
        samples: 960,
        ..Default::default()
    }];
    let (_dir, file) = pprof_file(&profile);
    let output = go_pprof(&["-traces", "-sample_index=samples"], &file);
    let mut seen = traces(&output);
    let commands: BTreeMap<u32, &str> = [(100, "jitvm"), (200, "jitvm2")].into();
    let mut expected: Vec<Trace> = profile
        .stacks
        .iter()
        .map(|stack| {
            let mut labels = BTreeMap::from([
                ("pid".to_owned(), stack.pid.to_string()),
                ("comm".to_owned(), commands[&stack.pid].to_owned()),
            ]);
            labels.insert("thread.id".into(), stack.tid.to_string());
            if stack.pid == 100 {
                labels.insert("thread.name".into(), "VM Thread".into());
            }
            if stack.truncated {
                labels.insert("truncated".into(), "true".into());
            }
            Trace {
                labels,
                samples: stack.samples(),
                frames: profile
                    .stack_frames(stack)
                    .map(|i| profile.frames[i as usize].name.clone())
                    .collect(),
            }
        })
        .collect();
    seen.sort();
    expected.sort();
    assert_eq!(seen, expected, "{output}");
}

fn gunzip_pprof(bytes: &[u8]) -> pprof::Profile {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut raw)
        .expect("Profile.pprof is gzip");
    pprof::Profile::decode(raw.as_slice()).expect("Profile.pprof is a pprof Profile")
}

/// GetProfile's pprof bytes describe the profile of the same reply: one pprof sample per stack
/// with its samples, read by go tool pprof. A watch or a GetProfile without the flag has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_profile_returns_pprof_bytes_on_request() {
    let daemon = Daemon::start();
    let mut client = daemon.client().await;
    let target = Running::start(Command::new(&fixtures().hotspots_pie).arg("30"));
    let session = client
        .start_session(StartSessionRequest {
            pids: vec![target.pid()],
            frequency_hz: Some(1000),
            ..Default::default()
        })
        .await
        .expect("start a session")
        .into_inner();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let plain = stop_and_profile(&mut client, session.id).await;
    assert!(plain.pprof.is_empty(), "no pprof unless asked");
    assert!(plain.total_samples > 0, "the fixture was sampled");

    let profile = client
        .get_profile(GetProfileRequest {
            session_id: session.id,
            pprof: true,
            ..Default::default()
        })
        .await
        .expect("GetProfile with pprof")
        .into_inner();
    assert!(!profile.pprof.is_empty(), "pprof was asked for");
    let p = gunzip_pprof(&profile.pprof);
    assert_eq!(p.string_table[0], "");
    assert_eq!(p.period, 1_000_000, "1000 Hz: 1 ms per sample");
    assert_eq!(p.sample.len(), profile.stacks.len());
    let stack_samples: u64 = profile.stacks.iter().map(|s| s.samples).sum();
    assert_eq!(
        stack_samples, profile.total_samples,
        "every sample is in exactly one stack"
    );
    assert!(
        profile.stacks.iter().any(|s| s.frames.len() > 1),
        "the session recorded call stacks by default"
    );
    let pprof_samples: i64 = p.sample.iter().map(|s| s.value[0]).sum();
    assert_eq!(pprof_samples, stack_samples as i64);
    for (sample, stack) in p.sample.iter().zip(&profile.stacks) {
        // Inlined frames fold into their compiled method's location: never more locations.
        let locations = sample.location_id.len();
        assert!(locations <= stack.frames.len(), "{sample:?} {stack:?}");
        assert_eq!(
            locations > 0,
            !stack.frames.is_empty(),
            "{sample:?} {stack:?}"
        );
        assert_eq!(sample.value[1], sample.value[0] * p.period);
    }

    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("live.pb.gz");
    std::fs::write(&file, &profile.pprof).expect("write the pprof file");
    let top = go_pprof(&["-top", "-sample_index=samples", "-nodefraction=0"], &file);
    assert!(
        top.contains(&format!("Total samples = {stack_samples} ")),
        "{top}"
    );
    drop(target);
}

/// Stacks taken during a VM's intervals carry `vm_interval` labels that pprof itself can cut
/// by: `-tagfocus vm_interval=scavenge` keeps exactly the samples taken during scavenges (the
/// flame graph "during GC"), `-tagignore` the others.
#[test]
fn go_tool_pprof_cuts_a_profile_to_a_vms_intervals() {
    let mut profile = profile();
    profile.vm_interval_kinds = vec![IntervalKind::Scavenge, IntervalKind::Safepoint];
    // The write to the kernel (50) during a scavenge inside a safepoint; benchFib of the
    // second process (40) during a safepoint alone.
    profile.stacks[2].during = vec![0, 1];
    profile.stacks[3].during = vec![1];
    let (_dir, file) = pprof_file(&profile);
    // "Showing nodes accounting for 50, 5.00% of 1000 total": the samples kept.
    let kept = |args: &[&str]| -> u64 {
        let mut all = vec!["-top", "-sample_index=samples", "-nodefraction=0"];
        all.extend_from_slice(args);
        let output = go_pprof(&all, &file);
        output
            .lines()
            .find_map(|l| {
                l.strip_prefix("Showing nodes accounting for ")?
                    .split(',')
                    .next()
            })
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no total in:\n{output}"))
    };
    assert_eq!(kept(&["-tagfocus=vm_interval=scavenge"]), 50);
    assert_eq!(kept(&["-tagfocus=vm_interval=safepoint"]), 90);
    assert_eq!(kept(&["-tagignore=vm_interval=safepoint"]), 910);
    let tags = go_pprof(&["-tags"], &file);
    assert!(
        tags.contains("vm_interval") && tags.contains("scavenge"),
        "{tags}"
    );
}
