//! Domain labels and events (after MetaSpy), against real BPF: a C fixture sets labels through
//! proto/vmscope_labels.h, whose time split is fixed by construction, and the daemon's samples
//! carry them as they were at each sample's instant.

use std::{collections::BTreeMap, process::Command};

use vmscope_proto::v1::{GetProfileRequest, Profile, StartSessionRequest};
use vmscope_tests::{Daemon, Running, dump, fixtures, go_pprof, json_report, stop_and_profile};

/// Records the labels fixture in `mode` for `seconds`, its code map file in a directory of its
/// own.
async fn record_fixture(
    daemon: &Daemon,
    mode: &str,
    seconds: f64,
) -> (Profile, u64, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let target = Running::start(
        Command::new(&fixtures().labels)
            .args([&(seconds + 2.0).to_string(), mode])
            .env("VMSCOPE_CODEMAP_DIR", dir.path()),
    );
    let mut client = daemon.client().await;
    let session = client
        .start_session(StartSessionRequest {
            pids: vec![target.pid()],
            frequency_hz: Some(997),
            ..Default::default()
        })
        .await
        .expect("start a session")
        .into_inner();
    tokio::time::sleep(std::time::Duration::from_secs_f64(seconds)).await;
    let profile = stop_and_profile(&mut client, session.id).await;
    (profile, session.id, dir)
}

/// Samples per value of label `key` (`None`: without it).
fn samples_by(profile: &Profile, key: &str) -> BTreeMap<Option<String>, u64> {
    let mut by = BTreeMap::new();
    for stack in &profile.stacks {
        let value = stack
            .labels
            .iter()
            .map(|&i| &profile.labels[i as usize])
            .find(|l| l.key == key)
            .map(|l| l.value.clone());
        *by.entry(value).or_insert(0) += stack.samples;
    }
    by
}

/// Phase a, b, c for 5, 3 and 2 ms of thread CPU time, then 1 ms unlabelled, in one function:
/// the labelled samples split 50/30/20 within 2 points, the unlabelled are 1/11 of all, counted
/// not lost; the daemon cuts a profile to one phase (rows included), and `go tool pprof
/// -tagfocus` reads the same split from the pprof labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_carry_the_phase_their_thread_was_in() {
    let daemon = Daemon::start();
    let (profile, id, _dir) = record_fixture(&daemon, "phases", 4.0).await;
    let report = dump(&profile);
    let by = samples_by(&profile, "phase");
    let total: u64 = by.values().sum();
    assert_eq!(
        total, profile.total_samples,
        "every sample is in a stack once"
    );
    let labelled: u64 = by.iter().filter(|(v, _)| v.is_some()).map(|(_, n)| n).sum();
    assert!(total > 2000, "{total} samples:\n{report}");
    println!("samples by phase: {by:?}");
    for (phase, expected) in [("a", 50.0), ("b", 30.0), ("c", 20.0)] {
        let n = by.get(&Some(phase.to_owned())).copied().unwrap_or(0);
        let share = 100.0 * n as f64 / labelled as f64;
        assert!(
            (share - expected).abs() <= 2.0,
            "phase {phase}: {share:.2}% of the labelled samples, expected {expected} +- 2: {by:?}"
        );
    }
    // The unlabelled 1 ms slices carry more of the loop's clock reads than the others: 3
    // points (10.6% measured for 9.1%).
    let unlabelled = 100.0 * by.get(&None).copied().unwrap_or(0) as f64 / total as f64;
    assert!(
        (unlabelled - 100.0 / 11.0).abs() <= 3.0,
        "{unlabelled:.2}% unlabelled, expected 9.09 +- 3: {by:?}"
    );

    // The daemon's cut: phase=b's samples alone, its rows too.
    let mut client = daemon.client().await;
    let cut = |labels: Vec<String>| GetProfileRequest {
        session_id: id,
        labels,
        pprof: true,
        ..Default::default()
    };
    let b = client
        .get_profile(cut(vec!["phase=b".into()]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(b.total_samples, by[&Some("b".to_owned())]);
    assert_eq!(b.label_filter, "phase=b");
    let row_samples: u64 = b
        .rows
        .iter()
        .filter(|r| r.name == "spin")
        .map(|r| r.samples)
        .sum();
    assert!(row_samples * 10 >= b.total_samples * 9, "{}", dump(&b));
    let none = client
        .get_profile(cut(vec!["phase=".into()]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(none.total_samples, by[&None]);
    assert!(
        client.get_profile(cut(vec!["phase".into()])).await.is_err(),
        "a filter without = is refused"
    );

    // `vmscope report --group-by label:phase`: one block per phase, most samples first, then
    // the unlabelled, each the daemon's cut; the text says each block's share.
    let out = daemon
        .cli()
        .args([
            "report",
            &id.to_string(),
            "--group-by",
            "label:phase",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let grouped = json_report(&out);
    let groups: Vec<(Option<String>, u64, u64)> = grouped["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["value"].as_str().map(str::to_owned),
                g["weight"].as_u64().unwrap(),
                g["report"]["total_samples"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(Option<String>, u64, u64)> = ["a", "b", "c"]
        .iter()
        .map(|p| Some(p.to_string()))
        .chain([None])
        .map(|v| (v.clone(), by[&v], by[&v]))
        .collect();
    assert_eq!(groups, expected);
    let text = daemon
        .cli()
        .args(["report", &id.to_string(), "--group-by", "label:phase"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    for title in [
        "=== label phase=a: ",
        "=== label phase unset: ",
        "only samples labelled phase=c",
    ] {
        assert!(text.contains(title), "{title:?} in:\n{text}");
    }

    // `--sort label:phase,sym`: rows split by phase, adding up to each phase's samples; and
    // `--tree` with it: the call tree's roots are the phases.
    let out = daemon
        .cli()
        .args([
            "report",
            &id.to_string(),
            "--sort",
            "label:phase,sym",
            "--fold",
            "0",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let sorted = json_report(&out);
    let mut by_row_name: BTreeMap<Option<String>, u64> = BTreeMap::new();
    for row in sorted["sections"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["rows"].as_array().unwrap())
    {
        let name = row["name"].as_str().unwrap();
        let value = if let Some(rest) = name.strip_prefix("phase=") {
            Some(
                rest.split_once("  ")
                    .expect("value then function")
                    .0
                    .to_owned(),
            )
        } else {
            assert!(name.starts_with("phase unset  "), "{name}");
            None
        };
        *by_row_name.entry(value).or_default() += row["samples"].as_u64().unwrap();
    }
    assert_eq!(by_row_name, by, "rows by phase against stacks by phase");
    let tree = daemon
        .cli()
        .args(["report", &id.to_string(), "--tree", "--sort", "label:phase"])
        .output()
        .unwrap();
    let tree = String::from_utf8_lossy(&tree.stdout);
    for root in ["[phase=a]", "[phase=b]", "[phase=c]", "[phase unset]"] {
        assert!(
            tree.lines().any(|l| l.trim_end().ends_with(root)),
            "{root} a node of:\n{tree}"
        );
    }

    // `vmscope diff --label`: both sides cut to one phase by the daemon.
    let out = daemon
        .cli()
        .args([
            "diff",
            &id.to_string(),
            &id.to_string(),
            "--label",
            "phase=c",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let diff = json_report(&out);
    let c = by[&Some("c".to_owned())];
    assert_eq!(diff["base"]["samples"], c, "{diff:#}");
    assert_eq!(diff["new"]["samples"], c);

    // go tool pprof reads the labels: -tagfocus keeps each phase's samples.
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("labels.pb.gz");
    let whole = client
        .get_profile(cut(Vec::new()))
        .await
        .unwrap()
        .into_inner();
    std::fs::write(&file, &whole.pprof).unwrap();
    for phase in ["a", "b", "c"] {
        let top = go_pprof(
            &[
                "-top",
                "-sample_index=samples",
                "-nodefraction=0",
                &format!("-tagfocus=phase={phase}"),
            ],
            &file,
        );
        let expected = by[&Some(phase.to_owned())];
        assert!(
            top.contains(&format!("Showing nodes accounting for {expected},")),
            "-tagfocus=phase={phase} should keep {expected} samples:\n{top}"
        );
    }
}

/// Two threads labelled at once, each flipping its phase every 0.5 ms: each sample carries
/// its own thread's owner, never the other's (0 wrong of all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sample_takes_another_thread_s_labels() {
    let daemon = Daemon::start();
    let (profile, _, _dir) = record_fixture(&daemon, "threads", 3.0).await;
    let report = dump(&profile);
    let mut owner_of_tid: BTreeMap<u32, BTreeMap<String, u64>> = BTreeMap::new();
    for stack in &profile.stacks {
        let owner = stack
            .labels
            .iter()
            .map(|&i| &profile.labels[i as usize])
            .find(|l| l.key == "owner")
            .map_or("(none)".to_owned(), |l| l.value.clone());
        *owner_of_tid
            .entry(stack.tid)
            .or_default()
            .entry(owner)
            .or_insert(0) += stack.samples;
    }
    println!("owners per thread: {owner_of_tid:?}");
    let labelled: Vec<_> = owner_of_tid
        .values()
        .filter(|owners| owners.keys().any(|o| o != "(none)"))
        .collect();
    assert_eq!(
        labelled.len(),
        2,
        "two labelled threads: {owner_of_tid:?}\n{report}"
    );
    let mut wrong = 0;
    let mut all = 0;
    for owners in &labelled {
        let (own, _) = owners
            .iter()
            .filter(|(o, _)| *o != "(none)")
            .max_by_key(|(_, n)| **n)
            .unwrap();
        for (owner, n) in owners.iter() {
            all += n;
            if owner != own && owner != "(none)" {
                wrong += n;
            }
        }
        assert!(owners[own] > 500, "{owners:?}");
    }
    assert_eq!(
        wrong, 0,
        "{wrong} of {all} samples carry the other thread's owner"
    );
}

/// Domain events: type tI published exactly I² times for I = 1..20, on objects 1..I, each from
/// the same two frames: the session counts each type exactly, per object (I² / I each), per
/// second, and by stack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domain_events_are_counted_exactly_by_type_object_and_stack() {
    let daemon = Daemon::start();
    let (profile, _, _dir) = record_fixture(&daemon, "events", 2.5).await;
    let vm = profile
        .vm_statistics
        .iter()
        .find(|s| s.vm == "labels fixture 1")
        .unwrap_or_else(|| panic!("the fixture's statistics:\n{}", dump(&profile)));
    let counts: BTreeMap<&str, &vmscope_proto::v1::DomainEventType> = vm
        .domain_events
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect();
    assert_eq!(counts.len(), 20, "{:?}", vm.domain_events);
    for i in 1..=20u64 {
        let t = counts[format!("t{i}").as_str()];
        assert_eq!(t.count, i * i, "t{i}");
        assert_eq!(t.per_second.iter().sum::<u64>(), i * i, "t{i} per second");
        assert_eq!(t.objects.len() as u64, i, "t{i}'s objects");
        assert!(
            t.objects
                .iter()
                .all(|o| o.count == i && (1..=i).contains(&o.object))
        );
        assert_eq!(t.stacks.len(), 1);
        assert_eq!(t.stacks[0].frames, ["emit", "main"]);
        assert_eq!(t.stacks[0].count, i * i);
    }
    assert_eq!(vm.domain_events[0].name, "t20", "most first");
}

/// The values of a `KEY=a:1.5,b:2.5` field of the demo VM's line, in ms (values may hold
/// colons: `Poly>>run:with:with:`).
fn cpu_ms(line: &str, key: &str) -> BTreeMap<String, f64> {
    let field = line
        .split(' ')
        .find_map(|f| f.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} in {line}"));
    field
        .split(',')
        .map(|part| {
            let (value, ms) = part.rsplit_once(':').expect("VALUE:MS");
            (value.to_owned(), ms.parse().expect("ms"))
        })
        .collect()
}

/// The demo VM labels each call with its benchmark phase and its receiver's class, and
/// accounts each call's thread CPU time to them itself: a whole-life profile's samples split
/// by either label as the VM's accounting does, within 2 points, while the VM compacts its
/// code zone every 5 ms. Each move of a method's code is a domain event named by the method's
/// id: counted exactly, and each method one object however often its code moved.
#[test]
fn the_demo_vm_s_phases_and_receiver_classes_split_as_its_own_accounting() {
    let daemon = Daemon::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("compact.json");
    let out = daemon
        .cli()
        .args(["record", "--format", "json", "-o"])
        .arg(&file)
        .arg("--")
        .arg(vmscope_tests::binary("jitvm"))
        .args(["compact", "--seconds", "4"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("jitvm Compact:"))
        .unwrap_or_else(|| panic!("the VM's line: {stdout}"));
    let report = vmscope_tests::json_report_file(&out, &file);
    let stacks = report["stacks"].as_array().expect("stacks");
    for key in ["phase", "receiver"] {
        let vm = cpu_ms(line, &format!("{key}_cpu_ms"));
        let vm_total: f64 = vm.values().sum();
        let mut sampled: BTreeMap<String, u64> = BTreeMap::new();
        for stack in stacks {
            if let Some(value) = stack["labels"][key].as_str() {
                *sampled.entry(value.to_owned()).or_insert(0) += stack["samples"].as_u64().unwrap();
            }
        }
        let sampled_total: u64 = sampled.values().sum();
        assert!(sampled_total > 1000, "{key}: {sampled:?}");
        println!("{key}: sampled {sampled:?}, the VM's ms {vm:?}");
        for (value, ms) in &vm {
            let vm_share = 100.0 * ms / vm_total;
            let share =
                100.0 * sampled.get(value).copied().unwrap_or(0) as f64 / sampled_total as f64;
            assert!(
                (share - vm_share).abs() <= 2.0,
                "{key}={value}: {share:.2}% of the labelled samples, the VM accounts \
                 {vm_share:.2}%: {sampled:?} against {vm:?}"
            );
        }
    }
    let field = |key: &str| -> u64 {
        line.split(' ')
            .find_map(|f| f.strip_prefix(&format!("{key}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {line}"))
    };
    let vm_stats = report["vm_statistics"].as_array().expect("vm statistics");
    let moved = vm_stats
        .iter()
        .flat_map(|vm| vm["domain_events"].as_array().into_iter().flatten())
        .find(|t| t["name"] == "method moved")
        .unwrap_or_else(|| panic!("no method moved events: {vm_stats:?}"));
    let count = moved["count"].as_u64().unwrap();
    assert_eq!(count, field("method_moves"), "{moved:#}\n{line}");
    assert!(count > 100 && field("compactions") > 10, "{line}");
    let objects = moved["objects"].as_array().unwrap();
    let by_object: u64 = objects.iter().map(|o| o["count"].as_u64().unwrap()).sum();
    assert_eq!(by_object, count, "every move names its method");
    let most = objects[0]["count"].as_u64().unwrap();
    println!(
        "method moved: {count} events, {} objects, the most moved {most} times",
        objects.len()
    );
    assert!(
        objects.len() < 64 && most > 10,
        "a few methods, each moved many times under one id: {objects:?}"
    );
    let per_second: u64 = moved["per_second"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(per_second, count);
}
