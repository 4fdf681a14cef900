//! Bad requests get a status with a message a person can act on, and the daemon keeps serving:
//! every refusal is followed by a call that must succeed.

use std::{os::unix::process::CommandExt, process::Command, time::Duration};

use tokio_stream::StreamExt as _;
use tonic::Code;
use vmscope_proto::v1::{
    GetDaemonInfoRequest, GetProfileRequest, ListSessionsRequest, StartSessionRequest,
    StopSessionRequest, WatchSessionRequest,
};
use vmscope_tests::{Client, Daemon, NOBODY, Running, fixtures};

fn start(pids: Vec<u32>, hz: Option<u32>) -> StartSessionRequest {
    StartSessionRequest {
        pids,
        system_wide: false,
        frequency_hz: hz,
        duration: None,
        keep_samples: 0,
        ..Default::default()
    }
}

async fn still_serving(client: &mut Client, daemon: &mut Daemon) {
    client
        .list_sessions(ListSessionsRequest {})
        .await
        .expect("the daemon must keep serving");
    assert!(daemon.is_alive(), "vmscoped died:\n{}", daemon.log());
}

fn assert_status(result: Result<impl std::fmt::Debug, tonic::Status>, code: Code, words: &[&str]) {
    let status = result.expect_err("the request should be refused");
    assert_eq!(status.code(), code, "{status:?}");
    for word in words {
        assert!(
            status.message().contains(word),
            "{:?} should mention {word:?}",
            status.message()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_clear_and_harmless() {
    let mut daemon = Daemon::start();
    let mut client = daemon.client().await;
    let target = Running::start(Command::new(&fixtures().hotspots_pie).arg("30"));
    let max = client
        .get_daemon_info(GetDaemonInfoRequest {})
        .await
        .unwrap()
        .into_inner()
        .max_frequency_hz;

    assert_status(
        client.start_session(start(vec![4_194_305], None)).await,
        Code::NotFound,
        &["no process with pid 4194305"],
    );
    still_serving(&mut client, &mut daemon).await;
    assert_status(
        client.start_session(start(vec![0], None)).await,
        Code::InvalidArgument,
        &["pid 0"],
    );
    still_serving(&mut client, &mut daemon).await;
    assert_status(
        client
            .start_session(start(vec![target.pid()], Some(0)))
            .await,
        Code::InvalidArgument,
        &["at least 1 Hz"],
    );
    still_serving(&mut client, &mut daemon).await;
    assert_status(
        client
            .start_session(start(vec![target.pid()], Some(max + 1)))
            .await,
        Code::InvalidArgument,
        &["perf_event_max_sample_rate", &format!("{max} Hz")],
    );
    still_serving(&mut client, &mut daemon).await;
    assert_status(
        client.start_session(start(vec![], None)).await,
        Code::InvalidArgument,
        &["no target"],
    );
    assert_status(
        client
            .get_profile(GetProfileRequest {
                session_id: 987_654,
                ..Default::default()
            })
            .await,
        Code::NotFound,
        &["no session 987654"],
    );
    assert_status(
        client
            .stop_session(StopSessionRequest {
                session_id: 987_654,
                ..Default::default()
            })
            .await,
        Code::NotFound,
        &["no session 987654"],
    );
    still_serving(&mut client, &mut daemon).await;

    // Stopping twice.
    let session = client
        .start_session(start(vec![target.pid()], None))
        .await
        .unwrap()
        .into_inner();
    client
        .stop_session(StopSessionRequest {
            session_id: session.id,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_status(
        client
            .stop_session(StopSessionRequest {
                session_id: session.id,
                ..Default::default()
            })
            .await,
        Code::FailedPrecondition,
        &["already stopped"],
    );
    still_serving(&mut client, &mut daemon).await;

    // A client that goes away in the middle of a watch.
    let session = client
        .start_session(start(vec![target.pid()], None))
        .await
        .unwrap()
        .into_inner();
    {
        let mut watcher = daemon.client().await;
        let mut stream = watcher
            .watch_session(WatchSessionRequest {
                session_id: session.id,
                interval: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 100_000_000,
                }),
            })
            .await
            .unwrap()
            .into_inner();
        stream.next().await.expect("a first snapshot").unwrap();
        // Dropping the stream and its channel disconnects mid-watch.
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    still_serving(&mut client, &mut daemon).await;
    let stopped = client
        .stop_session(StopSessionRequest {
            session_id: session.id,
            ..Default::default()
        })
        .await
        .expect("the watched session can still be stopped")
        .into_inner();
    assert!(stopped.samples > 0);

    // A watch with a silly interval.
    assert_status(
        client
            .watch_session(WatchSessionRequest {
                session_id: session.id,
                interval: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 1_000,
                }),
            })
            .await,
        Code::InvalidArgument,
        &["interval"],
    );
    still_serving(&mut client, &mut daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unprivileged_clients_only_profile_their_own_processes() {
    let mut daemon = Daemon::start();
    let mut client = daemon.client().await;
    // A root-owned target, and one owned by nobody.
    let root_target = Running::start(Command::new(&fixtures().hotspots_pie).arg("30"));
    let own_target = Running::start(Command::new(&fixtures().hotspots_pie).arg("30").uid(NOBODY));

    let refused = daemon
        .cli()
        .args(["record", "--duration", "1", "--pid"])
        .arg(root_target.pid().to_string())
        .uid(NOBODY)
        .output()
        .expect("run vmscope as nobody");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("PermissionDenied"), "{stderr}");
    assert!(
        stderr.contains("may only profile your own processes"),
        "{stderr}"
    );
    still_serving(&mut client, &mut daemon).await;

    let system = daemon
        .cli()
        .args(["record", "--duration", "1", "--system"])
        .uid(NOBODY)
        .output()
        .expect("run vmscope as nobody");
    let stderr = String::from_utf8_lossy(&system.stderr);
    assert!(!system.status.success());
    assert!(stderr.contains("need root"), "{stderr}");

    let allowed = daemon
        .cli()
        .args(["record", "--duration", "1", "--format", "json", "--pid"])
        .arg(own_target.pid().to_string())
        .uid(NOBODY)
        .output()
        .expect("run vmscope as nobody");
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&allowed.stdout).expect("JSON report");
    assert!(report["total_samples"].as_u64().unwrap() > 300, "{report}");

    // Root sees nobody's session; nobody does not see root's.
    let sessions = client
        .list_sessions(ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert!(sessions.iter().any(|s| s.owner_uid == NOBODY));
    let root_session = client
        .start_session(start(vec![root_target.pid()], None))
        .await
        .unwrap()
        .into_inner();
    let listed = daemon
        .cli()
        .arg("sessions")
        .uid(NOBODY)
        .output()
        .expect("run vmscope as nobody");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        !listed
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{} ", root_session.id))),
        "{listed}"
    );
    still_serving(&mut client, &mut daemon).await;
}
