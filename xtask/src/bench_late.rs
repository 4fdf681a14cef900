//! `cargo xtask bench --late-maps`: what samples waiting for a code map cost the daemon, when
//! the map is written only at exit.
//!
//! The demo VM runs `tiny` with `--publish file-at-exit` (its code map file's records held in
//! memory until it exits, as V8 holds its jitdump) and, for comparison, `--publish file` (each
//! record written at once, with a `Sync` every 20 ms). A session records it with `--pid` for
//! SECONDS; one second before the stop the daemon's RSS is read with the samples it holds
//! provisionally (`jit_samples_awaiting_code_map`), then, once the VM exits, how many were
//! placed again in the map of their time. Each mode gets a daemon of its own, so that both
//! start from the same memory.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, bail};

use crate::{
    bench::proc_field,
    demo::{self, Built, Daemon},
};

/// Runs the benchmark for a session of `seconds` and prints the table.
pub fn run(seconds: u64) -> anyhow::Result<()> {
    if seconds < 5 {
        bail!("--late-maps needs a session of at least 5 s");
    }
    let built: Built = demo::build()?;
    let mut rows = Vec::new();
    for mode in ["file-at-exit", "file"] {
        rows.push(measure(&built, mode, seconds)?);
    }
    println!();
    println!("Samples waiting {seconds} s for a code map written at exit (jitvm tiny, --pid):");
    println!(
        "| --publish    | awaiting at {:>3} s | RSS before (MiB) | RSS at {:>3} s (MiB) | caught up after exit |",
        seconds - 1,
        seconds - 1
    );
    println!(
        "|--------------|-------------------|------------------|--------------------|----------------------|"
    );
    for r in &rows {
        println!(
            "| {:12} | {:17} | {:16.1} | {:18.1} | {:20} |",
            r.mode,
            r.awaiting,
            r.rss_before_kib as f64 / 1024.0,
            r.rss_kib as f64 / 1024.0,
            r.caught_up
        );
    }
    if let [late, on_time] = &rows[..]
        && late.awaiting > 0
    {
        let extra = late.rss_kib.saturating_sub(late.rss_before_kib) as f64
            - on_time.rss_kib.saturating_sub(on_time.rss_before_kib) as f64;
        println!(
            "bench: {:.0} bytes of daemon RSS per awaiting sample ({:.1} MiB more than `file`)",
            extra * 1024.0 / late.awaiting as f64,
            extra / 1024.0
        );
    }
    Ok(())
}

struct Row {
    mode: &'static str,
    awaiting: u64,
    rss_before_kib: u64,
    rss_kib: u64,
    caught_up: u64,
}

fn measure(built: &Built, mode: &'static str, seconds: u64) -> anyhow::Result<Row> {
    let daemon = Daemon::start_or_reuse(built, false)?;
    let pid = daemon
        .pid()
        .context("the benchmark needs a daemon of its own")?;
    let mut vm = Command::new(&built.jitvm)
        .args(["tiny", "--seconds", &(seconds + 6).to_string()])
        .args(["--publish", mode, "--codemap-dir"])
        .arg(&built.dir)
        .stdout(Stdio::null())
        .spawn()
        .context("cannot start jitvm")?;
    std::thread::sleep(Duration::from_secs(1));
    let rss_before_kib = proc_field(pid, "status", "VmRSS:").unwrap_or(0);
    let mut record = Command::new(&built.cli)
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["record", "--duration", &seconds.to_string(), "--pid"])
        .arg(vm.id().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start vmscope")?;
    println!("bench: --publish {mode}: recording jitvm for {seconds} s");
    std::thread::sleep(Duration::from_secs(seconds - 1));
    let rss_kib = proc_field(pid, "status", "VmRSS:").unwrap_or(0);
    let awaiting = counter(built, &daemon.socket, "jit_samples_awaiting_code_map")?;
    if !record.wait()?.success() {
        bail!("vmscope record failed");
    }
    if !vm.wait()?.success() {
        bail!("jitvm failed");
    }
    // The daemon notices the exit at its next tick.
    std::thread::sleep(Duration::from_millis(500));
    let caught_up = counter(built, &daemon.socket, "jit_samples_caught_up")?;
    let _ = std::fs::remove_file(built.dir.join(format!("vmscope-{}.codemap", vm.id())));
    Ok(Row {
        mode,
        awaiting,
        rss_before_kib,
        rss_kib,
        caught_up,
    })
}

/// One counter (or gauge) of `vmscope info`.
pub(crate) fn counter(built: &Built, socket: &Path, name: &str) -> anyhow::Result<u64> {
    let out = Command::new(&built.cli)
        .arg("--socket")
        .arg(socket)
        .arg("info")
        .output()
        .context("vmscope info")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(name)).then(|| words.next()?.parse().ok())?
        })
        .with_context(|| format!("vmscope info has no {name}"))
}
