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
//!
//! Then the demo VM serving its heap (`jitvm --heap-demo`) with lists of 3,500 to 1,000,000
//! nodes: the pause it measured for a structure query (`Node from globals per root`, after its
//! full GC), a histogram after a full GC, and one with `--all`, medians of three.

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
            let taken = histogram(&built, &daemon, pid, &[])?;
            sizes = (taken.bytes, taken.classes);
            live.push(taken);
            all.push(histogram(&built, &daemon, pid, &["--all"])?);
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
    let vm_rows = demo_vm_rows(&built, &daemon)?;
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
    println!();
    println!(
        "| demo VM lists | heap | pause, query (full GC) | pause, histogram (full GC) | pause, --all |"
    );
    println!("|---|---|---|---|---|");
    for (lists, bytes, query, live, all) in vm_rows {
        let pause = |h: &[Taken]| median(h.iter().map(|t| t.pause_ms).collect());
        println!(
            "| {lists} | {:.1} MB | {:.1} ms | {:.1} ms | {:.1} ms |",
            bytes as f64 / 1e6,
            pause(&query),
            pause(&live),
            pause(&all)
        );
    }
    Ok(())
}

/// The demo VM's lists, per row.
const DEMO_LISTS: [&str; 4] = ["1000,2500", "10000,25000", "100000,250000", "300000,700000"];

type VmRow = (&'static str, u64, Vec<Taken>, Vec<Taken>, Vec<Taken>);

/// The demo VM's pauses for each of [`DEMO_LISTS`].
fn demo_vm_rows(built: &Built, daemon: &Daemon) -> anyhow::Result<Vec<VmRow>> {
    let mut rows = Vec::new();
    for lists in DEMO_LISTS {
        let mut vm = Command::new(&built.jitvm)
            .args(["loop", "--seconds", "120", "--heap-demo", "--ready"])
            .args(["--heap-demo-lists", lists])
            .env("VMSCOPE_SOCKET", &daemon.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("run jitvm")?;
        let mut out = BufReader::new(vm.stdout.take().context("piped stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("jitvm said {line:?}");
        }
        let pid = vm.id();
        // Its heap stream registers a moment after it is ready.
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        let first = loop {
            match histogram(built, daemon, pid, &[]) {
                Ok(taken) => break taken,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        };
        let query = ["--query", "Node from globals per root"];
        let (mut q, mut live, mut all) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..REPEATS {
            q.push(histogram(built, daemon, pid, &query)?);
            live.push(histogram(built, daemon, pid, &[])?);
            all.push(histogram(built, daemon, pid, &["--all"])?);
        }
        let _ = vm.kill();
        let _ = vm.wait();
        println!("bench: heap answers of the demo VM, lists {lists}: done");
        rows.push((lists, first.bytes, q, live, all));
    }
    Ok(rows)
}

/// One histogram's figures.
struct Taken {
    pause_ms: f64,
    elapsed_ms: f64,
    bytes: u64,
    classes: usize,
}

/// `vmscope heap --pid PID --format json ARGS`'s figures: of its histogram, or of its answer
/// to `--query`.
fn histogram(built: &Built, daemon: &Daemon, pid: u32, args: &[&str]) -> anyhow::Result<Taken> {
    let mut command = Command::new(&built.cli);
    command.arg("--socket").arg(&daemon.socket).args([
        "heap",
        "--pid",
        &pid.to_string(),
        "--format",
        "json",
    ]);
    command.args(args);
    let output = command.output().context("run vmscope heap")?;
    if !output.status.success() {
        bail!(
            "vmscope heap failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let h = json.get("histogram").unwrap_or(&json);
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
