//! A gRPC C-core client talks to the daemon: Python's grpcio, with no channel options, as users
//! write it. Over a Unix socket, C-core (>= 1.57; Python, Ruby, C++, PHP alike) sends the socket
//! path, percent-encoded, as `:authority` (`tmp%2Fvmscope-test-x%2Frun%2Fvmscoped.sock`), which
//! h2 refuses on its own; the daemon must accept it. The client finds everything through server
//! reflection, without the project's .proto files: tests/clients/grpcio_client.py.

use std::{path::Path, process::Command};

use vmscope_tests::{Daemon, Running, fixtures, grpcio_python};

#[test]
fn grpcio_without_options_reflects_checks_health_records_and_watches() {
    let python = grpcio_python();
    let daemon = Daemon::start();
    let target = Running::start(Command::new(&fixtures().hotspots_pie).arg("30"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/grpcio_client.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(&daemon.socket)
        .arg(target.pid().to_string())
        .output()
        .expect("run the grpcio client");
    assert!(
        out.status.success(),
        "the grpcio client failed ({}):\n{}\ndaemon log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    let facts: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the grpcio client printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    });

    let services = facts["services"].as_array().expect("services");
    for expected in [
        "vmscope.v1.Profiler",
        "vmscope.v1.CodeMap",
        "grpc.health.v1.Health",
    ] {
        assert!(
            services.iter().any(|s| s == expected),
            "{expected} not listed: {facts}"
        );
    }
    let methods = facts["profiler_methods"].as_array().expect("methods");
    for expected in ["StartSession", "WatchSession", "GetProfile"] {
        assert!(
            methods.iter().any(|m| m == expected),
            "vmscope.v1.Profiler resolved without {expected}: {facts}"
        );
    }
    assert_eq!(facts["health"], "SERVING", "{facts}");

    // The 2 s session ends by itself: snapshots, then the final profile, then the end.
    let watch = facts["watch"].as_array().expect("watch");
    let (last, before) = watch.split_last().expect("the watch sent snapshots");
    assert_eq!(
        last["complete"], true,
        "the watch ended unfinished: {facts}"
    );
    assert!(
        before.iter().all(|s| s["complete"] == false),
        "only the last snapshot is complete: {facts}"
    );

    let profile = &facts["profile"];
    assert_eq!(profile["complete"], true, "{facts}");
    let total = profile["total_samples"].as_u64().expect("total_samples");
    assert!(total > 0, "no samples: {facts}");
    assert_eq!(
        last["samples"], total,
        "the watch's end is the profile: {facts}"
    );
    let hot_a = profile["rows"]["hot_a"].as_u64().unwrap_or(0);
    assert!(
        hot_a > total / 4,
        "hot_a burns 60% of the fixture's time, yet holds {hot_a} of {total}: {facts}"
    );
}
