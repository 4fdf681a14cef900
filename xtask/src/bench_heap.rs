//! `cargo xtask bench --heap`: what a heap histogram costs the JVM it counts, against the
//! heap's size.
//!
//! The JVM runs tests/fixtures/java/Leaky.java (compiled ahead with javac), holding 123,457,
//! 1,234,567 and 3,999,999 objects in turn, with garbage allocated beside them. For each, three
//! `vmscope heap --pid` (after a full GC, the default) and three `--all` (no GC), alternating;
//! the table gives the medians of the JVM's own pause (its safepoint time over the request, as
//! the histogram reports it) and of the request's round trip, with `jmap -histo:live`'s wall
//! time for the same heap beside them: the JDK's own client of the same count, which starts a
//! JVM of its own to ask.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context, bail};

use crate::demo::{self, Built, Daemon};

/// The objects the fixture holds, per row.
const HELD: [u32; 3] = [123_457, 1_234_567, 3_999_999];
/// Histograms of each kind per heap.
const REPEATS: usize = 3;

pub fn run() -> anyhow::Result<()> {
    let built = demo::build()?;
    let classes = crate::bench_java::compile_fixture(&built, "Leaky.java")?;
    let daemon = Daemon::start_binary(&built.daemon, &built.dir, "heap")?;
    let mut rows = Vec::new();
    for held in HELD {
        let mut jvm = Command::new("java")
            .arg("-cp")
            .arg(&classes)
            .args(["Leaky", &held.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("run java")?;
        let mut out = BufReader::new(jvm.stdout.take().context("piped stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if line.trim() != format!("ready {held}") {
            bail!("the JVM said {line:?}");
        }
        let pid = jvm.id();
        let (mut live, mut all, mut jmap) = (Vec::new(), Vec::new(), Vec::new());
        let mut sizes = (0, 0);
        for _ in 0..REPEATS {
            let taken = histogram(&built, &daemon, pid, false)?;
            sizes = (taken.bytes, taken.classes);
            live.push(taken);
            all.push(histogram(&built, &daemon, pid, true)?);
            let start = Instant::now();
            let status = Command::new("jmap")
                .args(["-histo:live", &pid.to_string()])
                .stdout(Stdio::null())
                .status()
                .context("run jmap")?;
            if !status.success() {
                bail!("jmap -histo:live {pid} failed");
            }
            jmap.push(start.elapsed().as_secs_f64() * 1e3);
        }
        let _ = jvm.kill();
        let _ = jvm.wait();
        println!("bench: heap histograms: {held} objects held: done");
        rows.push((held, sizes, live, all, jmap));
    }
    drop(daemon);
    println!();
    println!(
        "| Leaky held | live heap | classes | pause, live (full GC) | round trip, live | pause, --all | round trip, --all | jmap -histo:live |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (held, (bytes, classes), live, all, jmap) in rows {
        let pause = |h: &[Taken]| median(h.iter().map(|t| t.pause_ms).collect());
        let trip = |h: &[Taken]| median(h.iter().map(|t| t.elapsed_ms).collect());
        println!(
            "| {held} | {:.1} MB | {classes} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.0} ms |",
            bytes as f64 / 1e6,
            pause(&live),
            trip(&live),
            pause(&all),
            trip(&all),
            median(jmap)
        );
    }
    Ok(())
}

/// One histogram's figures.
struct Taken {
    pause_ms: f64,
    elapsed_ms: f64,
    bytes: u64,
    classes: usize,
}

fn histogram(built: &Built, daemon: &Daemon, pid: u32, all: bool) -> anyhow::Result<Taken> {
    let mut command = Command::new(&built.cli);
    command.arg("--socket").arg(&daemon.socket).args([
        "heap",
        "--pid",
        &pid.to_string(),
        "--format",
        "json",
    ]);
    if all {
        command.arg("--all");
    }
    let output = command.output().context("run vmscope heap")?;
    if !output.status.success() {
        bail!(
            "vmscope heap failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let h = &json["histogram"];
    let ms = |d: &serde_json::Value| {
        d["secs"].as_f64().unwrap_or(0.0) * 1e3 + d["nanos"].as_f64().unwrap_or(0.0) / 1e6
    };
    Ok(Taken {
        pause_ms: ms(&h["pause"]),
        elapsed_ms: ms(&h["elapsed"]),
        bytes: h["total_bytes"].as_u64().unwrap_or(0),
        classes: h["classes"].as_array().map_or(0, Vec::len),
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
