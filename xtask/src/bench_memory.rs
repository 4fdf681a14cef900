//! `cargo xtask bench --memory`: the daemon's memory after a day's worth of varied sessions,
//! and what it gives back once idle.
//!
//! A fresh daemon records, one after the other, what a user of it records: the demo VM with
//! frame-pointer and DWARF stacks, CPython 3.12 `-X perf` with DWARF stacks, node
//! `--perf-basic-prof`, a JVM with no flags, the whole system with frame-pointer and DWARF
//! stacks, and two C fixtures (frame pointers, and DWARF through code without them). Each
//! `vmscope record` prints its report, so the daemon symbolises every session (DWARF lines
//! included). The table gives the daemon's RSS when it starts serving, after the sequence, after
//! 10 s and 60 s idle, its peak (VmHWM), and the DWARF tables it holds (`dwarf_bytes`).
//!
//! `--baseline PATH` runs the same sequence against another `vmscoped` binary first (an earlier
//! build) and prints both columns, measured in one run on one machine.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::{
    bench::proc_field,
    demo::{self, Built},
    root, run_checked,
};

/// Seconds each session records.
const SECONDS: &str = "2";

/// The daemon's memory at the points the table reports, in KiB.
#[derive(Debug, Default)]
struct Figures {
    serving: u64,
    after_sessions: u64,
    idle_10s: u64,
    idle_60s: u64,
    peak: u64,
    dwarf_after_sessions: u64,
    dwarf_idle: u64,
    sessions: usize,
}

/// Runs the sequence against the built daemon, and against `baseline` first when given.
pub fn run(baseline: Option<PathBuf>) -> anyhow::Result<()> {
    let built = demo::build()?;
    let fixtures = build_fixtures(&built)?;
    let mut columns = Vec::new();
    if let Some(old) = baseline {
        println!("bench: memory: the baseline daemon {}", old.display());
        columns.push(("baseline".to_owned(), sequence(&built, &old, &fixtures)?));
    }
    println!(
        "bench: memory: this build's daemon {}",
        built.daemon.display()
    );
    columns.push((
        "this build".to_owned(),
        sequence(&built, &built.daemon, &fixtures)?,
    ));

    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    println!();
    print!(
        "| daemon memory ({} sessions)      |",
        columns[0].1.sessions
    );
    for (name, _) in &columns {
        print!(" {name} |");
    }
    println!();
    print!("|----------------------------------|");
    for _ in &columns {
        print!("------|");
    }
    println!();
    type Row = (&'static str, fn(&Figures) -> u64);
    let rows: [Row; 7] = [
        ("RSS serving, before any session", |f| f.serving),
        ("RSS after the sessions", |f| f.after_sessions),
        ("RSS after 10 s idle", |f| f.idle_10s),
        ("RSS after 60 s idle", |f| f.idle_60s),
        ("peak RSS (VmHWM)", |f| f.peak),
        ("dwarf_bytes after the sessions", |f| f.dwarf_after_sessions),
        ("dwarf_bytes after 60 s idle", |f| f.dwarf_idle),
    ];
    for (label, value) in rows {
        print!("| {label:<32} |");
        for (_, figures) in &columns {
            print!(" {} |", mib(value(figures)));
        }
        println!();
    }
    Ok(())
}

/// The programs the sequence records, built once.
struct Fixtures {
    callers_fp: PathBuf,
    callers_no_fp: PathBuf,
    python: Option<PathBuf>,
}

fn build_fixtures(built: &Built) -> anyhow::Result<Fixtures> {
    let source = root().join("tests/fixtures/callers.c");
    let include = root().join("tests/fixtures");
    let callers_fp = built.dir.join("callers-fp");
    let callers_no_fp = built.dir.join("callers-no-fp");
    for (out, flags) in [
        (
            &callers_fp,
            &["-O1", "-g", "-fno-omit-frame-pointer", "-fno-inline"][..],
        ),
        (
            &callers_no_fp,
            &["-O2", "-g", "-fomit-frame-pointer", "-fno-inline"][..],
        ),
    ] {
        run_checked(
            Command::new("gcc")
                .args(flags)
                .arg("-I")
                .arg(&include)
                .arg("-o")
                .arg(out)
                .arg(&source),
        )?;
    }
    Ok(Fixtures {
        callers_fp,
        callers_no_fp,
        python: pyenv_python("3.12"),
    })
}

/// A pyenv CPython built as a shared library, as `cargo xtask setup` installs it.
fn pyenv_python(version: &str) -> Option<PathBuf> {
    let out = Command::new("pyenv").arg("root").output().ok()?;
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let mut builds: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
        .ok()?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{version}.")))
                && p.join(format!("lib/libpython{version}.so")).exists()
        })
        .collect();
    builds.sort();
    Some(builds.pop()?.join(format!("bin/python{version}")))
}

/// One fresh daemon: the sessions one after the other, then idle.
fn sequence(built: &Built, daemon_binary: &Path, fixtures: &Fixtures) -> anyhow::Result<Figures> {
    let socket = built.dir.join("memory-bench.sock");
    let log = built.dir.join("memory-bench.log");
    let _ = std::fs::remove_file(&socket);
    let mut daemon = Command::new(daemon_binary)
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .with_context(|| format!("cannot start {}", daemon_binary.display()))?;
    let pid = daemon.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if Instant::now() > deadline || daemon.try_wait()?.is_some() {
            bail!("the daemon did not serve; its log: {}", log.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let rss = || proc_field(pid, "status", "VmRSS:").unwrap_or(0);
    let mut figures = Figures {
        serving: rss(),
        ..Figures::default()
    };

    let jitvm = built.jitvm.display().to_string();
    let java = root().join("tests/fixtures/java/Hot.java");
    let node = root().join("tests/fixtures/hot.js");
    let callers_py = root().join("tests/fixtures/callers.py");
    let mut sessions: Vec<Vec<String>> = vec![
        args(&["--", &jitvm, "tiny", "--seconds", SECONDS]),
        args(&[
            "--call-graph",
            "dwarf",
            "--",
            &jitvm,
            "tiny",
            "--seconds",
            SECONDS,
        ]),
        args(&["--", "node", "--perf-basic-prof"])
            .into_iter()
            .chain([node.display().to_string(), SECONDS.to_owned()])
            .collect(),
        args(&["--", "java"])
            .into_iter()
            .chain([java.display().to_string(), "3".to_owned()])
            .collect(),
        args(&["--system", "--duration", SECONDS]),
        args(&["--system", "--call-graph", "dwarf", "--duration", SECONDS]),
        args(&["--", &fixtures.callers_fp.display().to_string(), SECONDS]),
        args(&[
            "--call-graph",
            "dwarf",
            "--",
            &fixtures.callers_no_fp.display().to_string(),
            SECONDS,
        ]),
    ];
    if let Some(python) = &fixtures.python {
        let python = python.display().to_string();
        let script = callers_py.display().to_string();
        sessions.push(args(&[
            "--call-graph",
            "dwarf",
            "--",
            &python,
            "-X",
            "perf",
            &script,
            SECONDS,
        ]));
        sessions.push(args(&["--", &python, "-X", "perf", &script, SECONDS]));
    } else {
        println!("bench: memory: no pyenv CPython 3.12 (cargo xtask setup): its sessions skipped");
    }
    let work = built.dir.join("memory-bench");
    std::fs::create_dir_all(&work)?;
    for session in &sessions {
        let started = Instant::now();
        let out = Command::new(&built.cli)
            .arg("--socket")
            .arg(&socket)
            .arg("record")
            .args(session)
            .current_dir(&work)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        println!(
            "bench: memory: {:.1} s, RSS {:.1} MiB after `record {}`{}",
            started.elapsed().as_secs_f64(),
            rss() as f64 / 1024.0,
            session.join(" "),
            if out.success() { "" } else { " (failed)" }
        );
        figures.sessions += 1;
    }
    figures.after_sessions = rss();
    figures.dwarf_after_sessions = dwarf_kib(&built.cli, &socket);
    std::thread::sleep(Duration::from_secs(10));
    figures.idle_10s = rss();
    std::thread::sleep(Duration::from_secs(50));
    figures.idle_60s = rss();
    figures.dwarf_idle = dwarf_kib(&built.cli, &socket);
    figures.peak = proc_field(pid, "status", "VmHWM:").unwrap_or(0);
    // SAFETY: kill only sends a signal to our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    daemon.wait()?;
    Ok(figures)
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The daemon's `dwarf_bytes` gauge (`vmscope info`), in KiB.
fn dwarf_kib(cli: &Path, socket: &Path) -> u64 {
    let out = Command::new(cli)
        .arg("--socket")
        .arg(socket)
        .arg("info")
        .output();
    let Ok(out) = out else { return 0 };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next()? == "dwarf_bytes").then(|| words.next()?.replace(',', "").parse().ok())?
        })
        .map_or(0, |bytes: u64| bytes / 1024)
}
