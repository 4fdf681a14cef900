//! `cargo xtask bench --java-stacks`: what unwinding HotSpot's Java frames costs, per JDK.
//!
//! The JVM runs tests/fixtures/java/Callers.java (no JVM flags; `main` calls `callerSeventy`
//! and `callerThirty`, which call `hot`), compiled ahead with javac. After its warm-up it runs
//! 4 s and prints how many rounds it ran; each run is either not recorded, or recorded for
//! 3.5 s by `vmscope record --pid` in one of three ways: `--call-graph fp` on a daemon started
//! with `--no-java-frames` (the kernel's frame-pointer walk, which stops at the first compiled
//! Java frame), `--call-graph fp` on a default daemon (the JVM's stack copied and its Java
//! frames unwound by its vmStructs), and `--call-graph dwarf`. Modes alternate within each
//! of three rounds. Per mode the table gives the daemon's CPU per 1,000 samples, the target's
//! rounds per second against the unrecorded runs', and the share of samples whose stack
//! reached the thread's start (`Stack.end` complete), for every JDK found under /usr/lib/jvm.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context, bail};

use crate::{
    bench::daemon_cpu_ns,
    demo::{self, Built, Daemon},
};

/// Counted rounds of every mode.
const ROUNDS: usize = 3;

/// The ways a run is recorded: (label, daemon, call graph); `None` for not recorded.
const MODES: [(&str, Option<(usize, &str)>); 4] = [
    ("not recorded", None),
    ("fp, --no-java-frames", Some((1, "fp"))),
    ("fp", Some((0, "fp"))),
    ("dwarf", Some((0, "dwarf"))),
];

/// What the runs of one mode added up to.
#[derive(Default, Clone, Copy)]
struct Totals {
    daemon_ns: u64,
    samples: u64,
    complete: u64,
    rounds: u64,
    seconds: f64,
}

pub fn run() -> anyhow::Result<()> {
    let built = demo::build()?;
    let classes = compile_fixture(&built, "Callers.java")?;
    let daemons = [
        Daemon::start_binary(&built.daemon, &built.dir, "java-frames")?,
        Daemon::start_binary_with(
            &built.daemon,
            &built.dir,
            "no-java-frames",
            &["--no-java-frames"],
        )?,
    ];
    let mut tables = Vec::new();
    for java in jdks() {
        let version = jdk_version(&java);
        let mut totals = [Totals::default(); MODES.len()];
        for round in 1..=ROUNDS {
            for (i, (label, how)) in MODES.iter().enumerate() {
                let run = run_once(&built, &classes, &java, how.map(|(d, m)| (&daemons[d], m)))
                    .with_context(|| format!("{version}, {label}"))?;
                let t = &mut totals[i];
                t.daemon_ns += run.daemon_ns;
                t.samples += run.samples;
                t.complete += run.complete;
                t.rounds += run.rounds;
                t.seconds += run.seconds;
            }
            println!("bench: Java stacks: {version}: round {round} of {ROUNDS}");
        }
        tables.push((version, totals));
    }
    drop(daemons);
    println!();
    println!(
        "| JDK, Callers.java | daemon CPU per 1000 samples | target rounds/s (vs not recorded) | stacks reaching the thread's start |"
    );
    println!("|---|---|---|---|");
    for (version, totals) in tables {
        let base = totals[0].rounds as f64 / totals[0].seconds;
        for ((label, how), t) in MODES.iter().zip(totals) {
            let speed = t.rounds as f64 / t.seconds;
            let (cpu, complete) = if how.is_some() {
                (
                    format!(
                        "{:.2} ms",
                        t.daemon_ns as f64 / 1e6 * 1000.0 / t.samples.max(1) as f64
                    ),
                    format!(
                        "{:.2}% of {}",
                        100.0 * t.complete as f64 / t.samples.max(1) as f64,
                        t.samples
                    ),
                )
            } else {
                ("-".into(), "-".into())
            };
            println!(
                "| {version}, {label} | {cpu} | {speed:.0} ({:.3}) | {complete} |",
                speed / base
            );
        }
    }
    Ok(())
}

/// Compiles tests/fixtures/java/`name` with javac into the build's `java-classes` directory,
/// which it returns: the benchmarks run their JVMs without the source launcher's compile.
pub fn compile_fixture(built: &Built, name: &str) -> anyhow::Result<PathBuf> {
    let classes = built.dir.join("java-classes");
    std::fs::create_dir_all(&classes)?;
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/java")
        .join(name);
    let javac = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .arg(&source)
        .status()
        .context("run javac")?;
    if !javac.success() {
        bail!("javac {} failed", source.display());
    }
    Ok(classes)
}

/// What one run of the fixture gave.
struct Run {
    daemon_ns: u64,
    samples: u64,
    complete: u64,
    rounds: u64,
    seconds: f64,
}

fn run_once(
    built: &Built,
    classes: &Path,
    java: &Path,
    record: Option<(&Daemon, &str)>,
) -> anyhow::Result<Run> {
    let mut child = Command::new(java)
        .arg("-cp")
        .arg(classes)
        .args(["Callers", "6"])
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("run {}", java.display()))?;
    let mut out = BufReader::new(child.stdout.take().context("piped stdout")?);
    let mut line = String::new();
    out.read_line(&mut line)?;
    if line.trim() != "ready" {
        bail!("the JVM said {line:?}, not ready");
    }
    let ready = Instant::now();
    let (mut daemon_ns, mut samples, mut complete) = (0, 0, 0);
    if let Some((daemon, mode)) = record {
        let pid = daemon.pid().context("a daemon of our own")?;
        let json = built.dir.join("java-stacks.json");
        let before = daemon_cpu_ns(pid)?;
        let output = Command::new(&built.cli)
            .arg("--socket")
            .arg(&daemon.socket)
            .args([
                "record",
                "--pid",
                &child.id().to_string(),
                "--duration",
                "3.5",
            ])
            .args(["--call-graph", mode, "--format", "json", "-o"])
            .arg(&json)
            .output()?;
        daemon_ns = daemon_cpu_ns(pid)?.saturating_sub(before);
        if !output.status.success() {
            bail!(
                "vmscope record failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let text = std::fs::read_to_string(&json)?;
        samples = crate::bench::total_samples(&text)?;
        complete = complete_samples(&text);
    }
    line.clear();
    out.read_line(&mut line)?;
    let seconds = ready.elapsed().as_secs_f64();
    let _ = child.wait();
    let rounds = line
        .split_whitespace()
        .nth(2)
        .and_then(|r| r.parse().ok())
        .with_context(|| format!("the JVM ended with {line:?}"))?;
    Ok(Run {
        daemon_ns,
        samples,
        complete,
        rounds,
        seconds,
    })
}

/// The samples of the report's `stack_ends` entry `complete`.
fn complete_samples(json: &str) -> u64 {
    let compact: String = json.chars().filter(|c| !c.is_whitespace()).collect();
    compact
        .split_once("{\"end\":\"complete\",\"samples\":")
        .and_then(|(_, rest)| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// `java` on PATH (Debian's OpenJDK 17, which setup installs) and every other JDK under
/// /usr/lib/jvm.
fn jdks() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = vec![PathBuf::from("java")];
    let default = Command::new("readlink")
        .args(["-f", "/usr/bin/java"])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Ok(dir) = std::fs::read_dir("/usr/lib/jvm") {
        let mut others: Vec<PathBuf> = dir
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin/java"))
            .filter(|p| p.exists())
            .filter_map(|p| p.canonicalize().ok())
            .filter(|p| Some(p) != default.as_ref())
            .collect();
        others.sort();
        others.dedup();
        found.extend(others);
    }
    found
}

/// `java -version`'s first line's version ("17.0.15").
fn jdk_version(java: &Path) -> String {
    Command::new(java)
        .arg("-version")
        .output()
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stderr).into_owned();
            text.lines()
                .next()
                .and_then(|l| l.split('"').nth(1).map(|v| format!("JDK {v}")))
        })
        .unwrap_or_else(|| java.display().to_string())
}
