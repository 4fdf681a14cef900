//! Symbolisation end to end: PIE and non-PIE executables, a library loaded with dlopen after the
//! session started, and a target that exits (its binary deleted) in the middle of a session.

use std::{process::Command, time::Duration};

use vmscope_proto::v1::{GetProfileRequest, Profile, Section, StartSessionRequest};
use vmscope_tests::{Daemon, Running, dump, fixtures, record, rows, samples_of};

fn assert_split(profile: &Profile) {
    let report = dump(profile);
    let a = samples_of(profile, Section::Vanilla, "hot_a");
    let b = samples_of(profile, Section::Vanilla, "hot_b");
    let c = samples_of(profile, Section::Vanilla, "hot_c");
    assert!(
        a > b && b > c && c > 0,
        "expected hot_a > hot_b > hot_c > 0:\n{report}"
    );
    assert!(
        (a + b + c) as f64 > 0.9 * profile.total_samples as f64,
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pie_and_non_pie_executables_are_symbolised() {
    let daemon = Daemon::start();
    let mut client = daemon.client().await;
    for program in [&fixtures().hotspots_pie, &fixtures().hotspots_nopie] {
        let target = Running::start(Command::new(program).arg("30"));
        let profile = record(&mut client, target.pid(), None, 1.5).await;
        assert_split(&profile);
        let unknown: u64 = profile
            .rows
            .iter()
            .filter(|r| !r.symbolized)
            .map(|r| r.samples)
            .sum();
        assert!(
            (unknown as f64) < 0.05 * profile.total_samples as f64,
            "{}: too many unsymbolised samples:\n{}",
            program.display(),
            dump(&profile)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_loaded_after_start_is_symbolised() {
    let daemon = Daemon::start();
    let mut client = daemon.client().await;
    let f = fixtures();
    // dlopen 1.5 s in: well after the session starts, so the library is not in the first maps.
    let target = Running::start(
        Command::new(&f.hotspots_pie)
            .arg("30")
            .arg("--dlopen")
            .arg(&f.libhot)
            .arg("1500"),
    );
    let profile = record(&mut client, target.pid(), None, 4.0).await;
    let report = dump(&profile);
    let lib: u64 = rows(&profile, Section::Other)
        .filter(|r| r.name == "lib_hot" && r.module == "libhot.so")
        .map(|r| r.samples)
        .sum();
    assert!(lib > 0, "lib_hot from libhot.so is missing:\n{report}");
    // After the dlopen, lib_hot and hot_a alternate 4 ms slices: lib_hot is about half of the
    // samples from 1.5 s to 4 s, i.e. well above 20% of all.
    assert!(
        lib as f64 > 0.2 * profile.total_samples as f64,
        "lib_hot holds too few samples:\n{report}"
    );
    assert!(
        samples_of(&profile, Section::Vanilla, "hot_b") > 0,
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_that_exits_mid_session_stays_symbolised() {
    let daemon = Daemon::start();
    let mut client = daemon.client().await;
    // A private copy, deleted while the process runs: the daemon must rely on what it kept.
    let dir = vmscope_tests::shared_tempdir();
    let copy = dir.path().join("short-lived");
    std::fs::copy(&fixtures().hotspots_nopie, &copy).expect("copy fixture");
    let mut target = Running::start(Command::new(&copy).arg("1.5"));
    let pid = target.pid();
    let session = client
        .start_session(StartSessionRequest {
            pids: vec![pid],
            system_wide: false,
            frequency_hz: None,
            duration: Some(prost_types::Duration {
                seconds: 10,
                nanos: 0,
            }),
            keep_samples: 0,
            ..Default::default()
        })
        .await
        .expect("start")
        .into_inner();
    std::fs::remove_file(&copy).expect("delete the binary");
    let status = target.child.wait().expect("wait");
    assert!(status.success());

    // The daemon ends the session by itself once its only target is gone.
    let mut stopped = None;
    for _ in 0..50 {
        let s = client
            .get_session(vmscope_proto::v1::GetSessionRequest {
                session_id: session.id,
            })
            .await
            .expect("get")
            .into_inner();
        if s.state() == vmscope_proto::v1::SessionState::Stopped {
            stopped = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stopped = stopped.expect("the session should stop when its target exits");
    assert_eq!(stopped.stop_reason, "all targets exited");
    assert!(stopped.targets[0].exited);
    let profile = client
        .get_profile(GetProfileRequest {
            session_id: session.id,
            ..Default::default()
        })
        .await
        .expect("profile")
        .into_inner();
    assert!(profile.total_samples > 300, "{}", dump(&profile));
    assert_split(&profile);
}
