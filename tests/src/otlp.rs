//! The tests' OTLP receiver (tests/clients/otlp_receiver.py: PyPI's opentelemetry-proto on
//! grpcio) and a daemon exporting to it.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{Daemon, counters, grpcio_python};

/// The test's OTLP receiver, killed when dropped.
#[derive(Debug)]
pub struct Receiver {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    out: PathBuf,
}

impl Receiver {
    /// Starts the receiver on `port` (any free one when `None`), answering each export after
    /// `delay_seconds`.
    pub fn start(dir: &Path, port: Option<u16>, delay_seconds: f64) -> Receiver {
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
    pub fn requests(&self) -> Vec<Value> {
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
pub fn exporting_daemon(port: u16, hz: u32, extra: &[&str]) -> Daemon {
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

/// Waits until `counter` passes `at_least`, or panics after `within`.
pub fn wait_for(daemon: &Daemon, counter: &str, at_least: u64, within: Duration) -> u64 {
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
