//! Continuous windows exported as OTLP profiles (`--otlp-endpoint`), received by an OTLP
//! receiver built from the OpenTelemetry project's own Python messages and service
//! (tests/clients/otlp_receiver.py on grpcio): each process a resource with the attributes the
//! OTel eBPF profiler sends, the ground-truth fixture's 60/30/10 split within 2 points, the
//! demo VM's JIT frames named with their bytecode ranges; and a collector that is down, comes
//! back, dies or answers slowly costs counted drops and failures, never sampling.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use vmscope_tests::{Daemon, binary, counters, fixtures, gauges, grpcio_python, shared_tempdir};

/// The test's OTLP receiver, killed when dropped.
struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl Receiver {
    /// Starts the receiver on `port` (any free one when `None`), answering each export after
    /// `delay_seconds`.
    fn start(dir: &Path, port: Option<u16>, delay_seconds: f64) -> Receiver {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/otlp_receiver.py");
        let port_file = dir.join(format!("port-{}", port.unwrap_or(0)));
        let _ = std::fs::remove_file(&port_file);
        let out = dir.join("received.jsonl");
        let child = Command::new(grpcio_python())
            .arg(&script)
            .arg(&port_file)
            .arg(&out)
            .args(["--port", &port.unwrap_or(0).to_string()])
            .args(["--delay", &delay_seconds.to_string()])
            // The processes the tests look into; others' samples cost the receiver nothing.
            .args(["--keep", "hotspots-pie,jitvm"])
            .stdout(Stdio::null())
            .spawn()
            .expect("start the OTLP receiver");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                break text.trim().parse().expect("a port");
            }
            assert!(Instant::now() < deadline, "the OTLP receiver did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        Receiver { child, port, out }
    }

    /// Every request received so far.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A daemon exporting 1 s windows at `hz` to the receiver on `port`.
fn exporting_daemon(port: u16, hz: u32, extra: &[&str]) -> Daemon {
    let endpoint = format!("http://127.0.0.1:{port}");
    let hz = hz.to_string();
    let mut args = vec![
        "--continuous",
        "--continuous-window",
        "1",
        "--continuous-frequency",
        &hz,
        "--otlp-endpoint",
        &endpoint,
    ];
    args.extend_from_slice(extra);
    Daemon::start_with(&args)
}

/// Every sample of process `pid` in `requests`: its resource's attributes, and the samples.
fn samples_of(requests: &[Value], pid: u32) -> (Option<Value>, Vec<Value>) {
    let mut resource = None;
    let mut samples = Vec::new();
    for request in requests {
        for r in request["resources"].as_array().unwrap() {
            if r["resource"]["process.pid"] == pid {
                resource = Some(r["resource"].clone());
                samples.extend(r["samples"].as_array().unwrap().iter().cloned());
            }
        }
    }
    (resource, samples)
}

#[test]
fn a_receiver_gets_each_process_with_its_attributes_split_and_jit_ranges() {
    let dir = shared_tempdir();
    let receiver = Receiver::start(dir.path(), None, 0.0);
    // 997 Hz: about 6,000 samples of the fixture, for a split within 2 points.
    let daemon = exporting_daemon(receiver.port, 997, &[]);
    // The demo VM publishes its code map to the daemon: its JIT frames are ours to name.
    let mut vm = Command::new(binary("jitvm"))
        .args(["tiny", "--seconds", "4", "--ready"])
        .env("VMSCOPE_SOCKET", &daemon.socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start jitvm");
    let program = Command::new(&fixtures().hotspots_pie)
        .arg("6")
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the fixture");
    let pid = program.id();
    program.wait_with_output().expect("the fixture ends");
    let _ = vm.wait();
    // The windows of its last second, built and sent.
    let deadline = Instant::now() + Duration::from_secs(20);
    let requests = loop {
        let requests = receiver.requests();
        // Its windows arrived, and then three without it: its last one too.
        let seen = !samples_of(&requests, pid).1.is_empty();
        let after = requests
            .iter()
            .rev()
            .take(3)
            .all(|r| samples_of(std::slice::from_ref(r), pid).1.is_empty());
        if seen && requests.len() > 3 && after {
            break requests;
        }
        assert!(
            Instant::now() < deadline,
            "{} requests received",
            requests.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    };

    let (resource, samples) = samples_of(&requests, pid);
    let resource = resource.expect("the fixture is a resource");
    assert_eq!(
        resource["process.executable.name"], "hotspots-pie",
        "{resource}"
    );
    assert_eq!(
        resource["process.executable.path"],
        fixtures().hotspots_pie.display().to_string()
    );
    assert!(
        resource["host.name"]
            .as_str()
            .is_some_and(|h| !h.is_empty()),
        "{resource}"
    );
    let mut by_leaf: HashMap<String, i64> = HashMap::new();
    for sample in &samples {
        assert_eq!(
            sample["kinds"],
            serde_json::json!(["samples", "count", "cpu", "nanoseconds"])
        );
        let period = sample["period"].as_i64().unwrap();
        assert!(
            (1_002_000..1_004_000).contains(&period),
            "ns per sample at 997 Hz: {period}"
        );
        assert_eq!(sample["attributes"]["thread.id"], pid, "{sample}");
        assert_eq!(sample["attributes"]["thread.name"], "hotspots-pie");
        let leaf = sample["frames"][0]["name"].as_str().unwrap().to_owned();
        *by_leaf.entry(leaf).or_insert(0) += sample["value"][0].as_i64().unwrap();
    }
    let hot = |name: &str| by_leaf.get(name).copied().unwrap_or(0) as f64;
    let sum = hot("hot_a") + hot("hot_b") + hot("hot_c");
    assert!(
        sum > 3000.0,
        "about 6,000 samples in 6 s at 997 Hz: {by_leaf:?}"
    );
    for (name, expected) in [("hot_a", 60.0), ("hot_b", 30.0), ("hot_c", 10.0)] {
        let percent = 100.0 * hot(name) / sum;
        assert!(
            (percent - expected).abs() <= 2.0,
            "{name}: {percent:.1}% of {sum} hot samples, not {expected}% within 2 points"
        );
    }
    let native: Vec<&Value> = samples
        .iter()
        .flat_map(|s| s["frames"].as_array().unwrap())
        .collect();
    assert!(
        native
            .iter()
            .all(|f| ["native", "kernel"].contains(&f["type"].as_str().unwrap()))
    );

    // The demo VM's JIT frames: named from its code map, with their bytecode ranges.
    let jit: Vec<&Value> = requests
        .iter()
        .flat_map(|r| r["resources"].as_array().unwrap())
        .filter(|r| r["resource"]["process.executable.name"] == "jitvm")
        .flat_map(|r| r["samples"].as_array().unwrap())
        .flat_map(|s| s["frames"].as_array().unwrap())
        .filter(|f| f["type"] == "vmscope")
        .collect();
    assert!(!jit.is_empty(), "the demo VM's JIT frames arrive");
    assert!(
        jit.iter()
            .any(|f| f["range"].as_str().is_some_and(|r| r.contains("->"))),
        "with their bytecode ranges: {:?}",
        &jit[..jit.len().min(5)]
    );
    for request in &requests {
        assert_eq!(
            request["zero"],
            serde_json::json!({"string": "", "location": 0, "function": 0, "mapping": 0,
                               "stack": 0, "attribute": 0, "link": 0}),
            "every dictionary table starts with its zero value"
        );
    }
}

/// Waits until `counter` passes `at_least`, or panics after `within`.
fn wait_for(daemon: &Daemon, counter: &str, at_least: u64, within: Duration) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = daemon.client().await;
        let deadline = Instant::now() + within;
        loop {
            let value = counters(&mut client)
                .await
                .get(counter)
                .copied()
                .unwrap_or(0);
            if value >= at_least {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "{counter} is {value}, not {at_least}, after {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

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
    let busy = vmscope_tests::Running::start(Command::new(&fixtures().hotspots_pie).arg("60"));
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
    drop(busy);
}
