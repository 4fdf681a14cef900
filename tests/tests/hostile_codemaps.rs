//! Code maps good and broken on purpose, from a tiny JIT (tests/fixtures/fakejit.c): broken ones
//! are refused with a counted, logged reason, their samples still count (as unnamed generated
//! code), and the daemon serves on.

use vmscope_tests::{Daemon, fixtures, json_report, shared_tempdir};

/// Records `fakejit 1 DIR MODE`; returns the generated section's rows as (name, samples).
fn record(daemon: &Daemon, mode: &str) -> Vec<(String, u64)> {
    let dir = shared_tempdir();
    let out = daemon
        .cli()
        .args(["record", "--format", "json", "--"])
        .arg(&fixtures().fakejit)
        .arg("1")
        .arg(dir.path())
        .arg(mode)
        .output()
        .expect("run vmscope");
    assert!(
        out.status.success(),
        "{mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json_report(&out);
    if let Some(pid) = report["targets"][0]["pid"].as_u64() {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    let generated = report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["section"] == "generated")
        .unwrap_or_else(|| panic!("{mode}: no generated section: {report}"));
    generated["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["samples"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Publishes `events` for this process on one `CodeMap.Publish` stream.
async fn publish(
    daemon: &Daemon,
    events: impl IntoIterator<Item = vmscope_proto::v1::CodeMapEvent, IntoIter: Send + 'static>,
) -> Result<tonic::Response<vmscope_proto::v1::PublishSummary>, tonic::Status> {
    let channel = vmscope_tests::channel(&daemon.socket)
        .await
        .expect("connect");
    vmscope_proto::v1::code_map_client::CodeMapClient::new(channel)
        .publish(tokio_stream::iter(events))
        .await
}

async fn counter(daemon: &Daemon, name: &str) -> u64 {
    vmscope_tests::counters(&mut daemon.client().await).await[name]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_maps_name_the_code_and_broken_ones_are_refused() {
    let mut daemon = Daemon::start();
    for good in ["perfmap", "jitdump"] {
        let rows = record(&daemon, good);
        let all: u64 = rows.iter().map(|(_, n)| n).sum();
        let named: u64 = rows
            .iter()
            .filter(|(name, _)| name == "fake_jit_spin")
            .map(|(_, n)| n)
            .sum();
        assert!(all > 300 && named * 10 >= all * 9, "{good}: {rows:?}");
    }
    // Broken files stop being read (a source failure); broken entries are refused one by one.
    // Each with the reason its own part of the log must give.
    let cases = [
        (
            "jitdump-magic",
            "code_map_source_failures",
            "not a jitdump file",
        ),
        (
            "jitdump-size0",
            "code_map_source_failures",
            "less than its header",
        ),
        (
            "jitdump-huge",
            "code_map_source_failures",
            "larger than the 16 MiB limit",
        ),
        (
            "jitdump-truncated",
            "code_map_source_failures",
            "ends in its header",
        ),
        (
            "codemap-garbage",
            "code_map_source_failures",
            "not a vmscope code map file",
        ),
        ("jitdump-outside", "code_map_entries_refused", "outside"),
        ("jitdump-utf8", "code_map_entries_refused", "not UTF-8"),
    ];
    for (mode, counted_in, reason) in cases {
        let before = counter(&daemon, counted_in).await;
        let logged_before = daemon.log().len();
        let rows = record(&daemon, mode);
        let all: u64 = rows.iter().map(|(_, n)| n).sum();
        assert!(all > 300, "{mode}: the samples must still count: {rows:?}");
        assert!(
            rows.iter()
                .all(|(name, _)| name.starts_with("[anonymous code")),
            "{mode}: nothing may be named from a broken map: {rows:?}"
        );
        let after = counter(&daemon, counted_in).await;
        assert!(after > before, "{mode}: {counted_in} stayed at {after}");
        assert!(
            daemon.is_alive(),
            "{mode}: vmscoped died:\n{}",
            daemon.log()
        );
        let log = daemon.log();
        assert!(
            log.get(logged_before..)
                .is_some_and(|new| new.contains(reason)),
            "{mode}: no {reason:?} in its part of the log:\n{}",
            log.get(logged_before..).unwrap_or(&log)
        );
    }
}

/// A publisher that never repeats itself (a new name and pc map every event) cannot exhaust
/// the daemon's memory: past the code store's budget new code is refused, counted and said in
/// the summary, code already known is still named, and the daemon serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_past_the_store_budget_is_refused() {
    use vmscope_proto::v1::{
        CodeEntry, CodeKind, CodeMapEvent, Hello, PcMapping, code_map_event::Event,
    };
    let mut daemon = Daemon::start_with(&["--code-store-mib", "1"]);
    const LOADS: u64 = 2000;
    let base = 0x7f00_0000_0000u64;
    let now = jitvm::publish::monotonic_ns();
    let events = std::iter::once(Event::Hello(Hello {
        pid: std::process::id(),
        vm: "greedy".into(),
    }))
    .chain((0..LOADS).map(move |i| {
        let start = base + i * 0x1000;
        Event::Load(CodeEntry {
            kind: CodeKind::Method as i32,
            name: format!("Greedy>>method{i}"),
            start,
            size: 0x800,
            // About 2.5 KiB in the store each: 2000 of them are 5 MiB.
            pc_map: (0..64)
                .map(|pc| PcMapping {
                    mcpc: start + pc * 16,
                    bcpc: pc as u32,
                    inlined: Vec::new(),
                })
                .collect(),
            cases: Vec::new(),
        })
    }))
    .enumerate()
    .map(move |(i, event)| CodeMapEvent {
        timestamp_ns: now + i as u64,
        event: Some(event),
    });
    let summary = publish(&daemon, events)
        .await
        .expect("the publication is answered")
        .into_inner();
    assert!(
        summary.refused > LOADS / 2 && summary.accepted > 100,
        "{summary:?}"
    );
    assert!(
        summary
            .problems
            .iter()
            .any(|p| p.contains("code store is full")),
        "{summary:?}"
    );
    let stored = vmscope_tests::gauges(&mut daemon.client().await).await["code_store_bytes"];
    assert!(stored > 0 && stored <= 1 << 20, "code_store_bytes {stored}");
    assert!(daemon.is_alive(), "vmscoped died:\n{}", daemon.log());
}

/// Events a publication stream refuses (timestamps going back, code wrapping around the
/// address space, a message over the size limit) are counted in `vmscope info`, and the
/// counts stay after the stream and the process are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_refusals_are_counted() {
    use vmscope_proto::v1::{CodeEntry, CodeKind, CodeMapEvent, Hello, code_map_event::Event};
    let daemon = Daemon::start();
    let now = jitvm::publish::monotonic_ns();
    let load = |ts: u64, start: u64, name: String| CodeMapEvent {
        timestamp_ns: ts,
        event: Some(Event::Load(CodeEntry {
            kind: CodeKind::Method as i32,
            name,
            start,
            size: 0x100,
            pc_map: Vec::new(),
            cases: Vec::new(),
        })),
    };
    let hello = CodeMapEvent {
        timestamp_ns: now,
        event: Some(Event::Hello(Hello {
            pid: std::process::id(),
            vm: "hostile".into(),
        })),
    };
    let summary = publish(
        &daemon,
        vec![
            hello.clone(),
            load(now + 10, 0x7f00_0000_0000, "good".into()),
            load(now + 5, 0x7f00_0000_1000, "backwards".into()),
            load(now + 20, u64::MAX - 0x10, "wraps".into()),
        ],
    )
    .await
    .expect("answered")
    .into_inner();
    assert_eq!((summary.accepted, summary.refused), (2, 2), "{summary:?}");
    // A name of 5 MiB: the message is over the decoding limit (4 MiB), and ends the stream.
    let huge = publish(
        &daemon,
        vec![hello, load(now + 30, 0x7f00_0000_2000, "x".repeat(5 << 20))],
    )
    .await;
    assert!(huge.is_err() || huge.unwrap().into_inner().refused == 1);
    let invalid = counter(&daemon, "code_map_refused_invalid").await;
    assert_eq!(invalid, 2, "the wrapping code and the oversized message");
    let backwards = counter(&daemon, "code_map_refused_time_backwards").await;
    assert_eq!(backwards, 1);
}

/// A VM's statistics that break the protocol: intervals of unknown kinds, ends before their
/// begins, a kind of its own under a key of the protocol's, a million counters, time going
/// back, a statistic from the future, a collection still open when the stream ends. Each is
/// refused with its reason, counted, and the daemon serves on; the publication's good
/// statistics still reach a session, and the open collection ends with the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_statistics_are_refused_with_their_reasons() {
    use vmscope_proto::v1::{
        CodeMapEvent, CounterValue, Hello, IntervalBegin, IntervalEnd, IntervalKind,
        StartSessionRequest, code_map_event::Event,
    };
    const COUNTERS: u64 = 1_000_000;
    let mut daemon = Daemon::start();
    let mut client = daemon.client().await;
    let session = client
        .start_session(StartSessionRequest {
            pids: vec![std::process::id()],
            frequency_hz: Some(99),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let now = jitvm::publish::monotonic_ns();
    let at = |ts: u64, event: Event| CodeMapEvent {
        timestamp_ns: ts,
        event: Some(event),
    };
    let count = |name: String, value: u64| {
        Event::Counter(CounterValue {
            name,
            unit: String::new(),
            value,
        })
    };
    let interval = |kind: i32, id: u64, begin: bool| {
        if begin {
            Event::Begin(IntervalBegin {
                kind,
                name: if kind == IntervalKind::Named as i32 {
                    "scavenge".into()
                } else {
                    String::new()
                },
                id,
            })
        } else {
            Event::End(IntervalEnd {
                kind,
                name: String::new(),
                id,
            })
        }
    };
    let scavenge = IntervalKind::Scavenge as i32;
    let head = vec![
        at(
            now,
            Event::Hello(Hello {
                pid: std::process::id(),
                vm: "hostile".into(),
            }),
        ),
        at(now + 1, count("sends".into(), 10)),
        at(now + 2, interval(42, 0, true)),
        at(now + 3, interval(scavenge, 7, false)),
        at(now + 4, interval(scavenge, 1, true)),
        at(now + 5, interval(scavenge, 1, false)),
        at(now + 4, count("sends".into(), 20)),
        at(now + 6, count("sends".into(), 5)),
        at(now + 7, count("sends".into(), 30)),
        at(now + 7, interval(IntervalKind::Named as i32, 0, true)),
        at(now + 60_000_000_000, count("sends".into(), 40)),
        at(now + 8, interval(IntervalKind::FullGc as i32, 3, true)),
    ];
    let flood = (0..COUNTERS).map(move |i| at(now + 10 + i, count(format!("c{i}"), i)));
    let events = head.into_iter().chain(flood);
    let summary = publish(&daemon, events)
        .await
        .expect("answered")
        .into_inner();
    // Accepted: the Hello, sends at 10 and 30, the scavenge's begin and end, the full GC's
    // begin, and the first 255 of the flood (256 names in all with "sends").
    assert_eq!(summary.accepted, 6 + 255, "{summary:?}");
    // Refused: the 6 broken ones, the flood's rest, and the full GC left open.
    assert_eq!(summary.refused, 6 + COUNTERS - 255 + 1, "{summary:?}");
    for (reason, expected) in [
        ("code_map_refused_unknown_kind", 1),
        ("code_map_refused_unmatched_interval", 2),
        ("code_map_refused_time_backwards", 1),
        ("code_map_refused_invalid", 2),
        ("code_map_refused_unapplicable", 1),
        ("code_map_refused_too_many_statistics", COUNTERS - 255),
    ] {
        assert_eq!(counter(&daemon, reason).await, expected, "{reason}");
    }
    assert!(daemon.is_alive(), "vmscoped died:\n{}", daemon.log());
    let profile = vmscope_tests::stop_and_profile(&mut client, session.id).await;
    let [vm] = profile.vm_statistics.as_slice() else {
        panic!("one VM's statistics: {:?}", profile.vm_statistics.len());
    };
    let sends = vm
        .counters
        .iter()
        .find(|c| c.name == "sends")
        .expect("sends");
    assert_eq!((sends.delta, sends.last), (20, 30));
    assert_eq!(vm.counters.len(), 256);
    assert_eq!(vm.intervals.len(), 2, "{:?}", vm.intervals);
    assert_eq!((vm.intervals[0].count, vm.intervals[0].total_ns), (1, 1));
    // Ended where the stream was known up to, its last accepted event (the flood's 255th),
    // not at the session's stop.
    let full = &vm.intervals[1];
    assert_eq!(full.kind, IntervalKind::FullGc as i32);
    assert_eq!((full.count, full.total_ns), (1, (10 + 254) - 8));
}
