//! `cargo xtask bench --lines`: loading DWARF line tables and resolving addresses to file:line
//! and inlined functions, vmscope's way (`vmscope-parse`'s dwarf module, on addr2line and gimli)
//! against binutils' `addr2line -a -f -i` on the same binary and the same addresses, in one run.
//!
//! The binary is libjvm.so under /usr/lib/jvm when it carries DWARF (Debian's does not: its
//! debug file is a separate package), else both the largest of pyenv's libpython builds (C,
//! ~30 MB) and our own debug `vmscoped` (Rust, ~130 MB). 10,000 addresses spread over its functions (`dwarf_lines pick`),
//! then each tool resolves them all from a cold start in a process of its own: wall time
//! (load + lookups, from outside), and peak RSS from `wait4`. Our worker also says how its time
//! splits between loading and lookups. The answers are compared address by address (file and
//! line of every frame, discriminators aside).

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context, bail};

use crate::{cargo, root, run_checked};

/// Addresses resolved per tool.
const ADDRESSES: usize = 10_000;

/// What one tool's run cost.
struct Cost {
    wall_seconds: f64,
    peak_rss_kib: i64,
}

/// Runs `command` with stdin from `input` and stdout to `output`; its wall time and peak RSS.
fn measure(command: &mut Command, input: &Path, output: &Path) -> anyhow::Result<Cost> {
    let start = Instant::now();
    let child = command
        .stdin(File::open(input)?)
        .stdout(File::create(output)?)
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {command:?}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills; the pid is our own child's.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; wait4 reaps the child, which we never wait for again.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall_seconds = start.elapsed().as_secs_f64();
    if waited != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr {
            use std::io::Read as _;
            let _ = pipe.read_to_string(&mut stderr);
        }
        bail!("{command:?} failed (status {status}): {stderr}");
    }
    Ok(Cost {
        wall_seconds,
        peak_rss_kib: usage.ru_maxrss,
    })
}

fn has_dwarf(binary: &Path) -> bool {
    Command::new("readelf")
        .arg("-S")
        .arg(binary)
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(".debug_info"))
}

/// libjvm if it has DWARF, else the largest libpython and vmscoped's debug build that do.
fn pick_binaries() -> anyhow::Result<Vec<PathBuf>> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    for dir in ["/usr/lib/jvm"] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                candidates.push(entry.path().join("lib/server/libjvm.so"));
            }
        }
    }
    let jvm: Vec<&PathBuf> = candidates.iter().filter(|p| p.exists()).collect();
    if let Some(jvm) = jvm.iter().find(|p| has_dwarf(p)) {
        return Ok(vec![(*jvm).clone()]);
    }
    for jvm in &jvm {
        println!(
            "bench --lines: {} has no DWARF (its debug file is not installed)",
            jvm.display()
        );
    }
    let mut others: Vec<PathBuf> = Vec::new();
    if let Some(home) = std::env::var_os("HOME")
        && let Ok(versions) = std::fs::read_dir(Path::new(&home).join(".pyenv/versions"))
    {
        for version in versions.flatten() {
            if let Ok(libs) = std::fs::read_dir(version.path().join("lib")) {
                others.extend(libs.flatten().map(|e| e.path()).filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("libpython") && n.ends_with(".so.1.0"))
                }));
            }
        }
    }
    let mut picked: Vec<PathBuf> = others
        .into_iter()
        .filter(|p| has_dwarf(p))
        .max_by_key(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .into_iter()
        .collect();
    let vmscoped = root().join("target/debug/vmscoped");
    if has_dwarf(&vmscoped) {
        picked.push(vmscoped);
    }
    if picked.is_empty() {
        bail!("no binary with DWARF found (libjvm, pyenv's libpython, target/debug/vmscoped)");
    }
    Ok(picked)
}

/// The answers of `addr2line -a -f -i` (or ours, in the same format) per address: the
/// frames' `file:line`, discriminators dropped.
fn answers(text: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("0x") {
            out.push(Vec::new());
            continue;
        }
        // A function name, then its location.
        if let (Some(location), Some(current)) = (lines.next(), out.last_mut()) {
            let location = location.split(" (discriminator").next().unwrap_or(location);
            current.push(format!("{line} {location}"));
        }
    }
    out
}

/// Runs the benchmark and prints its table.
pub fn run() -> anyhow::Result<()> {
    run_checked(cargo().args([
        "build",
        "--quiet",
        "--release",
        "-p",
        "vmscope-parse",
        "--example",
        "dwarf_lines",
    ]))?;
    let worker = root().join("target/release/examples/dwarf_lines");
    for binary in pick_binaries()? {
        bench_one(&worker, &binary)?;
    }
    Ok(())
}

/// Benchmarks one binary and prints its table.
fn bench_one(worker: &Path, binary: &Path) -> anyhow::Result<()> {
    let size = std::fs::metadata(binary)?.len();
    let dir = std::env::temp_dir().join(format!("vmscope-bench-lines-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let addresses = dir.join("addresses");
    let picked = Command::new(worker)
        .arg("pick")
        .arg(binary)
        .arg(ADDRESSES.to_string())
        .output()?;
    if !picked.status.success() {
        bail!(
            "dwarf_lines pick: {}",
            String::from_utf8_lossy(&picked.stderr)
        );
    }
    std::fs::write(&addresses, &picked.stdout)?;

    let ours_out = dir.join("ours");
    let theirs_out = dir.join("binutils");
    let mut ours_cmd = Command::new(worker);
    ours_cmd.arg("resolve").arg(binary);
    let ours = measure(&mut ours_cmd, &addresses, &ours_out)?;
    let mut theirs_cmd = Command::new("addr2line");
    theirs_cmd.args(["-a", "-f", "-i", "-e"]).arg(binary);
    let theirs = measure(&mut theirs_cmd, &addresses, &theirs_out)?;
    // Our split between loading and lookups, from a second run that keeps its stderr.
    let split = Command::new(worker)
        .arg("resolve")
        .arg(binary)
        .stdin(File::open(&addresses)?)
        .stdout(Stdio::null())
        .output()?;
    let split = String::from_utf8_lossy(&split.stderr).trim().to_owned();

    let ours_answers = answers(&std::fs::read_to_string(&ours_out)?);
    let theirs_answers = answers(&std::fs::read_to_string(&theirs_out)?);
    let same = ours_answers
        .iter()
        .zip(&theirs_answers)
        .filter(|(a, b)| {
            let locations = |frames: &Vec<String>| -> Vec<String> {
                frames
                    .iter()
                    .map(|f| f.rsplit(' ').next().unwrap_or("").to_owned())
                    .collect()
            };
            locations(a) == locations(b)
        })
        .count();
    let frames = |answers: &[Vec<String>]| answers.iter().map(Vec::len).sum::<usize>();

    println!();
    println!(
        "DWARF lines of {} ({:.1} MB), {ADDRESSES} addresses, one cold process each:",
        binary.display(),
        size as f64 / 1e6
    );
    println!(
        "  {:<34} {:>10} {:>13} {:>8}",
        "tool", "wall (ms)", "peak RSS (MB)", "frames"
    );
    for (name, cost, answers) in [
        ("vmscope (addr2line crate, gimli)", &ours, &ours_answers),
        ("binutils addr2line -a -f -i", &theirs, &theirs_answers),
    ] {
        println!(
            "  {:<34} {:>10.1} {:>13.1} {:>8}",
            name,
            cost.wall_seconds * 1e3,
            cost.peak_rss_kib as f64 / 1024.0,
            frames(answers)
        );
    }
    println!(
        "  ratio binutils/vmscope: time {:.2}x, memory {:.2}x",
        theirs.wall_seconds / ours.wall_seconds,
        theirs.peak_rss_kib as f64 / ours.peak_rss_kib as f64
    );
    println!(
        "  same file:line for every frame: {same} of {} addresses ({:.2}%)",
        ours_answers.len().min(theirs_answers.len()),
        100.0 * same as f64 / ours_answers.len().max(1) as f64
    );
    println!("  vmscope's own split: {split}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
