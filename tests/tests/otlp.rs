//! Continuous windows exported as OTLP profiles (`--otlp-endpoint`), received by an OTLP
//! receiver built from the OpenTelemetry project's own Python messages and service
//! (tests/clients/otlp_receiver.py on grpcio): each process a resource with the attributes the
//! OTel eBPF profiler sends, the ground-truth fixture's 60/30/10 split within 2 points, the
//! demo VM's JIT frames named with their bytecode ranges. A collector's faults are
//! tests/tests/otlp_faults.rs.

use std::{
    collections::HashMap,
    process::{Command, Stdio},
    time::{Duration, Instant, SystemTime},
};

use serde_json::Value;
use vmscope_tests::{
    binary, fixtures,
    otlp::{Receiver, exporting_daemon},
    shared_tempdir,
};

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
    // 1999 Hz (prime: no beat with the fixture's 10 ms cycle): up to 16,000 samples of the
    // fixture, for a split within 2 points.
    let daemon = exporting_daemon(receiver.port, 1999, &[]);
    // The demo VM publishes its code map to the daemon: its JIT frames are ours to name.
    let mut vm = Command::new(binary("jitvm"))
        .args(["tiny", "--seconds", "4", "--ready"])
        .env("VMSCOPE_SOCKET", &daemon.socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start jitvm");
    let program = Command::new(&fixtures().hotspots_pie)
        .arg("8")
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the fixture");
    let pid = program.id();
    program.wait_with_output().expect("the fixture ends");
    let ended = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let _ = vm.wait();
    // Every window the fixture ran in, built and sent: the windows come in order, so once one
    // that started after the fixture ended is here, the others are. How long that takes is
    // the daemon's pace building windows (an unoptimised one takes longer than a window to
    // build one while profiling itself); the deadline is only for a daemon that sends none.
    let deadline = Instant::now() + Duration::from_secs(90);
    let requests = loop {
        let requests = receiver.requests();
        if requests.iter().any(|r| r["start"].as_u64() > Some(ended)) {
            break requests;
        }
        assert!(
            Instant::now() < deadline,
            "{} requests received, none of a window after the fixture; its samples in each: {:?}",
            requests.len(),
            requests
                .iter()
                .map(|r| samples_of(std::slice::from_ref(r), pid).1.len())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        !samples_of(&requests, pid).1.is_empty(),
        "no window has the fixture's samples"
    );

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
            (500_000..501_000).contains(&period),
            "ns per sample at 1999 Hz: {period}"
        );
        assert_eq!(sample["attributes"]["thread.id"], pid, "{sample}");
        assert_eq!(sample["attributes"]["thread.name"], "hotspots-pie");
        let leaf = sample["frames"][0]["name"].as_str().unwrap().to_owned();
        *by_leaf.entry(leaf).or_insert(0) += sample["value"][0].as_i64().unwrap();
    }
    let hot = |name: &str| by_leaf.get(name).copied().unwrap_or(0) as f64;
    let sum = hot("hot_a") + hot("hot_b") + hot("hot_c");
    // 6,000 samples put the 2-point tolerance at 3.2 standard deviations of the 60% share,
    // more of the others; a loaded host gives the fixture less than its 8 s of CPU.
    assert!(
        sum > 6000.0,
        "up to 16,000 samples in 8 s at 1999 Hz: {by_leaf:?}"
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
