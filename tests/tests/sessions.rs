//! Several sessions at once, and watching a session as it runs.

use std::{process::Command, time::Duration};

use tokio_stream::StreamExt as _;
use vmscope_proto::v1::{
    ListSessionsRequest, Section, SessionState, StartSessionRequest, WatchSessionRequest,
};
use vmscope_tests::{
    Daemon, Running, dump, fixtures, rate_tolerance, samples_of, stop_and_profile,
};

fn start(pid: u32, hz: u32) -> StartSessionRequest {
    StartSessionRequest {
        pids: vec![pid],
        system_wide: false,
        frequency_hz: Some(hz),
        duration: None,
        keep_samples: 0,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sessions_each_get_the_full_rate() {
    let daemon = Daemon::start();
    let target = Running::start(Command::new(&fixtures().hotspots_pie).arg("30"));
    let mut client = daemon.client().await;

    let a = client
        .start_session(start(target.pid(), 1400))
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = client
        .start_session(start(target.pid(), 1400))
        .await
        .unwrap()
        .into_inner();
    // A third at another frequency: its own perf events, its own rate.
    let c = client
        .start_session(start(target.pid(), 700))
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut profiles = Vec::new();
    for id in [b.id, c.id, a.id] {
        profiles.push(stop_and_profile(&mut client, id).await);
    }
    for (profile, hz) in profiles.iter().zip([1400.0, 700.0, 1400.0]) {
        let rate = profile.measured_frequency_hz;
        let tolerance = rate_tolerance(profile.host_steal_percent);
        assert!(
            (rate - hz).abs() <= tolerance * hz,
            "session {} measured {rate:.1} Hz, expected {hz} +- {:.0}%:\n{}",
            profile.session.as_ref().unwrap().id,
            tolerance * 100.0,
            dump(profile)
        );
        assert_eq!(profile.lost_samples, 0);
        assert!(samples_of(profile, Section::Vanilla, "hot_a") > 0);
    }
    // a ran longer than b, so it has more samples.
    assert!(profiles[2].total_samples > profiles[0].total_samples);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_watches() {
    let mut daemon = Daemon::start();
    let target = Running::start(Command::new(&fixtures().hotspots_pie).arg("30"));
    let mut client = daemon.client().await;
    let session = client
        .start_session(start(target.pid(), 1400))
        .await
        .unwrap()
        .into_inner();
    let mut stream = client
        .watch_session(WatchSessionRequest {
            session_id: session.id,
            interval: None,
        })
        .await
        .unwrap()
        .into_inner();
    stream.next().await.unwrap().unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let status = daemon.terminate(Duration::from_secs(10));
        (status, daemon.log())
    })
    .await
    .unwrap();
    let (status, log) = status;
    assert!(
        status.is_some_and(|s| s.success()),
        "vmscoped did not exit cleanly with a watch open ({status:?}):\n{log}"
    );
    let end = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the watch should end");
    if let Some(Err(status)) = end {
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_snapshots_then_the_final_profile() {
    let daemon = Daemon::start();
    let target = Running::start(Command::new(&fixtures().hotspots_pie).arg("30"));
    let mut client = daemon.client().await;
    let mut request = start(target.pid(), 1400);
    request.duration = Some(prost_types::Duration {
        seconds: 1,
        nanos: 500_000_000,
    });
    let session = client.start_session(request).await.unwrap().into_inner();
    let mut stream = client
        .watch_session(WatchSessionRequest {
            session_id: session.id,
            interval: Some(prost_types::Duration {
                seconds: 0,
                nanos: 300_000_000,
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let mut snapshots = Vec::new();
    while let Some(profile) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the watch should end on its own")
    {
        snapshots.push(profile.unwrap());
    }
    assert!(snapshots.len() >= 3, "got {} snapshots", snapshots.len());
    let last = snapshots.last().unwrap();
    assert!(last.complete);
    assert_eq!(
        last.session.as_ref().unwrap().state(),
        SessionState::Stopped
    );
    assert!(snapshots[..snapshots.len() - 1].iter().all(|p| !p.complete));
    let totals: Vec<u64> = snapshots.iter().map(|p| p.total_samples).collect();
    assert!(totals.windows(2).all(|w| w[0] <= w[1]), "{totals:?}");
    assert!(last.total_samples > 300, "{}", dump(last));

    let list = client
        .list_sessions(ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(list.sessions.iter().any(|s| s.id == session.id));
}
