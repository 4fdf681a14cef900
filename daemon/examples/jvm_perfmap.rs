//! Asks a JVM for its perf map once per `request` line on stdin and answers each with one
//! line, `ok ELAPSED_NS LINES BYTES` (the perf map's size after the request) or `error
//! MESSAGE`. `cargo xtask bench --jvm-perfmap` drives it:
//!
//! ```text
//! cargo run --release -p vmscoped --example jvm_perfmap -- PID
//! ```

use std::{
    io::{BufRead, Write},
    time::Duration,
};

use vmscoped::jvm::{JvmTarget, request_perf_map};

fn main() {
    let pid: u32 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("usage: jvm_perfmap PID");
    let target = JvmTarget::read(pid).expect("cannot read /proc/PID/status");
    let map = format!("/proc/{pid}/root/tmp/perf-{}.map", target.nspid);
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() != "request" {
            continue;
        }
        let answer = match request_perf_map(&target, Duration::from_secs(30)) {
            Ok(snapshot) => match std::fs::read(&map) {
                Ok(text) => format!(
                    "ok {} {} {}",
                    snapshot.elapsed.as_nanos(),
                    text.iter().filter(|&&b| b == b'\n').count(),
                    text.len()
                ),
                Err(e) => format!("error {map}: {e}"),
            },
            Err(e) => format!("error {e}"),
        };
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
    }
}
