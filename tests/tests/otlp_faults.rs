//! An OTLP collector that is down at the start, comes back, dies, then answers slower than the
//! export's timeout: counted failures and drops, windows stored all along, the queue within its
//! bound (tests/clients/otlp_receiver.py, PyPI's opentelemetry-proto on grpcio). Apart from
//! tests/tests/otlp.rs, whose split needs the CPUs to itself.

use std::time::Duration;

use vmscope_tests::{
    Daemon, gauges,
    otlp::{Receiver, exporting_daemon, wait_for},
    shared_tempdir,
};

/// Waits until one more export try failed than now, or panics after `within`.
fn another_failure(daemon: &Daemon, within: Duration) {
    let failed = wait_for(daemon, "otlp_exports_failed", 0, Duration::ZERO);
    wait_for(daemon, "otlp_exports_failed", failed + 1, within);
}

#[test]
fn a_collector_down_back_killed_or_slow_costs_counted_failures_never_sampling() {
    let dir = shared_tempdir();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Down at the start.
    let daemon = exporting_daemon(
        port,
        99,
        &["--otlp-queue-mib", "1", "--otlp-timeout-ms", "1000"],
    );
    // Windows are stored whatever runs: no busy program here, so that the test beside this
    // one (a split within 2 points) has the CPUs.
    wait_for(&daemon, "otlp_exports_failed", 1, Duration::from_secs(10));
    let stored = wait_for(
        &daemon,
        "continuous_windows_stored",
        3,
        Duration::from_secs(10),
    );
    assert_eq!(wait_for(&daemon, "otlp_exports_sent", 0, Duration::ZERO), 0);

    // Back: export resumes by itself, the waiting windows first.
    let receiver = Receiver::start(dir.path(), Some(port), 0.0);
    let sent = wait_for(&daemon, "otlp_exports_sent", 2, Duration::from_secs(30));
    assert!(receiver.requests().len() as u64 >= sent.min(2));

    // Killed mid-stream: tries fail again, windows go on, the queue stays within its MiB.
    drop(receiver);
    another_failure(&daemon, Duration::from_secs(15));
    wait_for(
        &daemon,
        "continuous_windows_stored",
        stored + 5,
        Duration::from_secs(15),
    );

    // Slow: a receiver that answers after the export's timeout (1 s here) fails every try.
    let _slow = Receiver::start(dir.path(), Some(port), 5.0);
    another_failure(&daemon, Duration::from_secs(40));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let held = runtime.block_on(async { gauges(&mut daemon.client().await).await });
    assert!(
        held["otlp_queued_bytes"] <= 1 << 20,
        "the queue stays within --otlp-queue-mib: {held:?}"
    );
}
