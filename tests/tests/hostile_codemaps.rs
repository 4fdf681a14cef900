//! Code maps good and broken on purpose, from a tiny JIT (tests/fixtures/fakejit.c): broken ones
//! are refused with a counted, logged reason, their samples still count (as unnamed generated
//! code), and the daemon serves on.

use vmscope_proto::v1::GetDaemonInfoRequest;
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

async fn counter(daemon: &Daemon, name: &str) -> u64 {
    let info = daemon
        .client()
        .await
        .get_daemon_info(GetDaemonInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    info.counters[name]
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
        assert!(all > 500 && named * 10 >= all * 9, "{good}: {rows:?}");
    }
    // Broken files stop being read (a source failure); broken entries are refused one by one.
    let cases = [
        ("jitdump-magic", "code_map_source_failures"),
        ("jitdump-size0", "code_map_source_failures"),
        ("jitdump-huge", "code_map_source_failures"),
        ("jitdump-truncated", "code_map_source_failures"),
        ("codemap-garbage", "code_map_source_failures"),
        ("jitdump-outside", "code_map_entries_refused"),
        ("jitdump-utf8", "code_map_entries_refused"),
    ];
    for (mode, counted_in) in cases {
        let before = counter(&daemon, counted_in).await;
        let rows = record(&daemon, mode);
        let all: u64 = rows.iter().map(|(_, n)| n).sum();
        assert!(all > 500, "{mode}: the samples must still count: {rows:?}");
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
    }
    let log = daemon.log();
    for reason in ["magic", "ends in its header", "not UTF-8", "outside"] {
        assert!(log.contains(reason), "no {reason:?} in the log:\n{log}");
    }
}
