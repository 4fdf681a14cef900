//! Broken binaries under a live process: the daemon must not panic, must keep every sample, and
//! must say why it could not name them.

use std::{
    io::{Seek, SeekFrom, Write},
    process::Command,
    time::Duration,
};

use vmscope_proto::v1::{GetDaemonInfoRequest, Profile, StartSessionRequest};
use vmscope_tests::{Client, Daemon, Running, dump, fixtures, stop_and_profile};

/// When a test damages the library: before the daemon first sees it, or while a session
/// samples it (the daemon may have read it already: it looks up names while sessions run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    BeforeTheSession,
    DuringTheSession,
}

/// Starts the fixture with a private copy of libhot.so loaded after 200 ms, applies `damage` to
/// the library file `when` said, records for 2 s, and returns the profile.
async fn record_with_damaged_library(
    daemon: &mut Daemon,
    client: &mut Client,
    when: When,
    damage: impl FnOnce(&std::path::Path),
) -> Profile {
    let dir = vmscope_tests::shared_tempdir();
    let lib = dir.path().join("libhot.so");
    std::fs::copy(&fixtures().libhot, &lib).unwrap();
    let target = Running::start(
        Command::new(&fixtures().hotspots_pie)
            .arg("30")
            .arg("--dlopen")
            .arg(&lib)
            .arg("200"),
    );
    let mut damage = Some(damage);
    if when == When::BeforeTheSession {
        // Loaded and running: the process never reads the library's header again.
        tokio::time::sleep(Duration::from_millis(500)).await;
        (damage.take().expect("once"))(&lib);
    }
    let session = client
        .start_session(StartSessionRequest {
            pids: vec![target.pid()],
            system_wide: false,
            frequency_hz: None,
            duration: None,
            keep_samples: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    if let Some(damage) = damage {
        damage(&lib);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The daemon answers despite the broken binary.
    let profile = stop_and_profile(client, session.id).await;
    assert!(daemon.is_alive(), "vmscoped died:\n{}", daemon.log());
    drop(target);
    profile
}

fn library_rows(profile: &Profile) -> (u64, u64) {
    let rows = profile.rows.iter().filter(|r| r.module == "libhot.so");
    let unnamed: u64 = rows
        .clone()
        .filter(|r| !r.symbolized && r.name.starts_with("libhot.so+0x"))
        .map(|r| r.samples)
        .sum();
    (rows.map(|r| r.samples).sum(), unnamed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_truncated_binaries_become_counted_unknown_rows() {
    let mut daemon = Daemon::start();
    let mut client = daemon.client().await;

    // Garbage over the ELF header before the daemon saw it: the process runs on (it never reads
    // its header again), and the daemon can read no name from it.
    let profile =
        record_with_damaged_library(&mut daemon, &mut client, When::BeforeTheSession, |lib| {
            let mut file = std::fs::OpenOptions::new().write(true).open(lib).unwrap();
            file.seek(SeekFrom::Start(0)).unwrap();
            file.write_all(&[0x5a; 64]).unwrap();
        })
        .await;
    let report = dump(&profile);
    let (all, unnamed) = library_rows(&profile);
    assert!(all > 100, "the library's samples must be kept:\n{report}");
    assert_eq!(
        all, unnamed,
        "no name can come from a broken file:\n{report}"
    );
    let issue = profile
        .symbolization_issues
        .iter()
        .find(|i| i.module == "libhot.so")
        .unwrap_or_else(|| panic!("no issue reported for libhot.so:\n{report}"));
    assert!(issue.reason.contains("ELF"), "{report}");
    assert_eq!(issue.samples, all);
    assert!(
        profile
            .rows
            .iter()
            .any(|r| r.name == "hot_a" && r.symbolized)
    );

    // Truncated under the running process while the session samples: the process dies of
    // SIGBUS; the daemon does not, and keeps every sample. Its names are those it read before
    // the truncation, or none, said as such.
    let profile =
        record_with_damaged_library(&mut daemon, &mut client, When::DuringTheSession, |lib| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(lib)
                .unwrap()
                .set_len(100)
                .unwrap();
        })
        .await;
    let report = dump(&profile);
    let (all, unnamed) = library_rows(&profile);
    assert!(all > 100, "{report}");
    let named: u64 = profile
        .rows
        .iter()
        .filter(|r| r.module == "libhot.so" && r.symbolized)
        .map(|r| r.samples)
        .sum();
    assert_eq!(named + unnamed, all, "{report}");
    if unnamed > 0 {
        assert!(
            profile
                .symbolization_issues
                .iter()
                .any(|i| i.module == "libhot.so" && i.samples == unnamed),
            "{report}"
        );
    }

    let info = client
        .get_daemon_info(GetDaemonInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        info.counters["modules_parse_failures"] >= 1,
        "{:?}",
        info.counters
    );
}
