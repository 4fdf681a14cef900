//! `cargo xtask bench --attacks`: the daemon's descriptors, memory and CPU before, during and
//! after each attack of a local user (issue 10), and how long root waits for `vmscope info`
//! meanwhile.
//!
//! Each attack gets a daemon of its own, so that each starts from the same state:
//!
//! * **connection flood**: nobody opens 19,000 connections that never speak, and holds them;
//! * **sparse perf map**: nobody records its own process, whose perf map is a 50 GB sparse file;
//! * **1,000,000-line perf map**: root records for 6 s a process whose perf map has a million
//!   entries (about 45 MB), then the process exits;
//! * **code flood**: nobody's demo VM publishes 30,000 made-up methods (about 300 MB of code
//!   descriptions) for itself, with no session, then exits;
//! * **held mmap lock**: nobody's process holds its own mmap lock for good (a read of its own
//!   memory faults on a page of a FUSE file whose reads hang, and an mmap queues behind it),
//!   and nobody records it: every read of its mappings waits on that lock (issue 23);
//! * **profile flood**: nobody records its own process of random stacks through 65,536 stubs,
//!   and 16 clients of nobody's take its profile over and over (issue 23);
//! * **stack copies**: nobody records its own spinning process, whose 100 KiB environment makes
//!   every DWARF copy whole, with 8 sessions that take its whole sampling share: 4 copying
//!   65528 bytes at about 250 Hz each (its 64 MiB/s of copies), 4 bare at about 2000 Hz;
//! * **process churn**: under root's system-wide session, nobody starts short-lived JIT
//!   processes one after another in two loops (each writes a perf map, spins 5 ms in its
//!   generated code and exits), for 20 s before "during" is read: the daemon's cost must
//!   follow the rate of new processes, not grow with those seen (issue 23).
//!
//! "During" is read once the attack is under way; "after", 4 s after it ended (its processes
//! killed: the daemon forgets a process's code maps once its last samples are read, and the
//! code store reclaims what nothing refers to within 2 s). CPU is the daemon's share of one
//! core over each phase, from its threads' `schedstat`. During each attack root also records a
//! spinning process of its own for 3 s: the rate it measured (per CPU-second of its target,
//! 1400 Hz asked) and the samples it lost.

use std::{
    io::{BufRead, BufReader, Write as _},
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::{
    bench::{daemon_cpu_ns, proc_field},
    demo::{self, Built, Daemon},
};

const NOBODY: u32 = 65534;

/// Runs every attack and prints the table.
pub fn run() -> anyhow::Result<()> {
    let built = demo::build()?;
    let attacks: [(&str, Attack); 8] = [
        ("connection flood (19,000)", connection_flood),
        ("sparse 50 GB perf map", sparse_perf_map),
        ("1,000,000-line perf map", big_perf_map),
        ("code flood (30,000 codes)", code_flood),
        ("held mmap lock", held_mmap_lock),
        ("profile flood (16 clients)", profile_flood),
        ("stack copies (8 sessions)", stack_copies),
        ("process churn (20 s in)", process_churn),
    ];
    let mut rows = Vec::new();
    for (name, attack) in attacks {
        println!("bench: {name}");
        rows.push((name, measure(&built, attack)?));
    }
    println!();
    println!("The daemon under attack by another user (fds, RSS in MiB, CPU in % of a core):");
    println!(
        "| attack                      | fds before/during/after | RSS before/during/after | CPU before/during/after | root's info, slowest | root's rate, lost | codes held during |"
    );
    println!(
        "|-----------------------------|-------------------------|-------------------------|-------------------------|----------------------|-------------------|-------------------|"
    );
    for (name, m) in &rows {
        let fds = format!("{} / {} / {}", m.before.fds, m.during.fds, m.after.fds);
        let rss = format!(
            "{:.0} / {:.0} / {:.0}",
            m.before.rss_mib, m.during.rss_mib, m.after.rss_mib
        );
        let cpu = format!(
            "{:.1} / {:.1} / {:.1}",
            m.before.cpu_percent, m.during.cpu_percent, m.after.cpu_percent
        );
        let root = format!("{:.0} Hz, {}", m.root_hz, m.root_lost);
        println!(
            "| {name:27} | {fds:>23} | {rss:>23} | {cpu:>23} | {:>17.0} ms | {root:>17} | {:>17} |",
            m.slowest_info.as_secs_f64() * 1000.0,
            m.codes
        );
    }
    Ok(())
}

/// Starts an attack on the daemon at `socket`; answers what ends it: what to drop (first), and
/// the processes to kill.
type Attack = fn(&Built, &Path) -> anyhow::Result<Attackers>;

#[derive(Default)]
struct Attackers {
    /// Dropped before the processes are killed (a FUSE server that answers what it held).
    held: Vec<Box<dyn std::any::Any>>,
    processes: Vec<Child>,
}

impl From<Vec<Child>> for Attackers {
    fn from(processes: Vec<Child>) -> Attackers {
        Attackers {
            held: Vec::new(),
            processes,
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Phase {
    fds: usize,
    rss_mib: f64,
    cpu_percent: f64,
}

struct Measured {
    before: Phase,
    during: Phase,
    after: Phase,
    slowest_info: Duration,
    /// The rate root's 3 s session measured during the attack, and the samples it lost.
    root_hz: f64,
    root_lost: u64,
    /// Codes in the store during the attack.
    codes: u64,
}

/// The daemon's state over `seconds` from now.
fn phase(pid: u32, seconds: f64) -> anyhow::Result<Phase> {
    let began = Instant::now();
    let cpu = daemon_cpu_ns(pid)?;
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let used = daemon_cpu_ns(pid)?.saturating_sub(cpu) as f64;
    Ok(Phase {
        fds: std::fs::read_dir(format!("/proc/{pid}/fd"))?.count(),
        rss_mib: proc_field(pid, "status", "VmRSS:").unwrap_or(0) as f64 / 1024.0,
        cpu_percent: used / began.elapsed().as_nanos() as f64 * 100.0,
    })
}

fn measure(built: &Built, attack: Attack) -> anyhow::Result<Measured> {
    let daemon = Daemon::start_or_reuse(built, false)?;
    let pid = daemon
        .pid()
        .context("the benchmark needs a daemon of its own")?;
    let before = phase(pid, 2.0)?;
    let attackers = attack(built, &daemon.socket)?;
    let mut slowest_info = Duration::ZERO;
    for _ in 0..3 {
        let began = Instant::now();
        let out = Command::new(&built.cli)
            .arg("--socket")
            .arg(&daemon.socket)
            .arg("info")
            .output()?;
        if !out.status.success() {
            bail!("vmscope info: {}", String::from_utf8_lossy(&out.stderr));
        }
        slowest_info = slowest_info.max(began.elapsed());
    }
    let (root_hz, root_lost) = roots_session(built, &daemon.socket)?;
    let during = phase(pid, 2.0)?;
    let codes = crate::bench_late::counter(built, &daemon.socket, "code_store_codes")?;
    drop(attackers.held);
    for mut attacker in attackers.processes {
        let _ = attacker.kill();
        let _ = attacker.wait();
        let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", attacker.id()));
    }
    std::thread::sleep(Duration::from_secs(4));
    let after = phase(pid, 2.0)?;
    Ok(Measured {
        before,
        during,
        after,
        slowest_info,
        root_hz,
        root_lost,
        codes,
    })
}

/// Root records a spinning process of its own for 3 s: the rate measured, and samples lost.
fn roots_session(built: &Built, socket: &Path) -> anyhow::Result<(f64, u64)> {
    let mut spinner = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .context("sh")?;
    let out = Command::new(&built.cli)
        .arg("--socket")
        .arg(socket)
        .args(["record", "--format", "json", "--duration", "3", "--pid"])
        .arg(spinner.id().to_string())
        .output();
    let _ = spinner.kill();
    let _ = spinner.wait();
    let out = out.context("vmscope record")?;
    if !out.status.success() {
        bail!("root's record: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let number = |key: &str| -> f64 {
        let pattern = format!("\"{key}\":");
        text.find(&pattern)
            .map(|at| &text[at + pattern.len()..])
            .and_then(|rest| {
                let end = rest
                    .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ' '))
                    .unwrap_or(rest.len());
                rest[..end].trim().parse().ok()
            })
            .unwrap_or(f64::NAN)
    };
    Ok((
        number("measured_frequency_hz"),
        number("lost_samples") as u64,
    ))
}

/// `python3 ARGS` as nobody, once it printed its first line (answered with it).
fn python_as_nobody(args: &[&std::ffi::OsStr]) -> anyhow::Result<(Child, String)> {
    let mut child = Command::new("python3")
        .args(args)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("python3 as nobody")?;
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("piped"))
        .read_line(&mut line)
        .context("python3's first line")?;
    Ok((child, line.trim().to_owned()))
}

fn connection_flood(_: &Built, socket: &Path) -> anyhow::Result<Attackers> {
    let script = crate::root().join("tests/clients/hold_connections.py");
    let (child, held) =
        python_as_nobody(&[script.as_os_str(), socket.as_os_str(), "19000".as_ref()])?;
    println!("bench: nobody holds {held} connections");
    Ok(vec![child].into())
}

/// A process of nobody's with 512 MiB of anonymous executable memory, spinning in a jump to
/// itself past its first 256 MiB (where the perf maps here name nothing, so that its samples
/// keep the daemon reading the map); its address, and its perf map's path.
fn jit_like_process() -> anyhow::Result<(Child, u64, String)> {
    let (child, address) = python_as_nobody(&[
        "-c".as_ref(),
        r#"
import ctypes, mmap, sys, threading
m = mmap.mmap(-1, 1 << 29, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
start = ctypes.addressof(ctypes.c_char.from_buffer(m))
spin = (1 << 28) + 0x1000
m[spin:spin + 2] = b"\xeb\xfe"
threading.Thread(target=ctypes.CFUNCTYPE(None)(start + spin), daemon=True).start()
print(start, flush=True)
sys.stdin.read()
"#
        .as_ref(),
    ])?;
    let address = address.parse().context("the mapping's address")?;
    let map = format!("/tmp/perf-{}.map", child.id());
    Ok((child, address, map))
}

fn own_by_nobody(path: &str) -> anyhow::Result<()> {
    std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).with_context(|| path.to_owned())
}

fn record(built: &Built, socket: &Path, pid: u32, seconds: u32, as_nobody: bool) -> Child {
    let mut command = Command::new(&built.cli);
    command
        .arg("--socket")
        .arg(socket)
        .args(["record", "--duration", &seconds.to_string(), "--pid"])
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if as_nobody {
        command.uid(NOBODY).gid(NOBODY);
    }
    command.spawn().expect("run vmscope record")
}

fn sparse_perf_map(built: &Built, socket: &Path) -> anyhow::Result<Attackers> {
    let (process, _, map) = jit_like_process()?;
    std::fs::File::create(&map)?.set_len(50 << 30)?;
    own_by_nobody(&map)?;
    let recording = record(built, socket, process.id(), 8, true);
    std::thread::sleep(Duration::from_secs(1));
    Ok(vec![recording, process].into())
}

fn big_perf_map(built: &Built, socket: &Path) -> anyhow::Result<Attackers> {
    let (process, address, map) = jit_like_process()?;
    let mut file = std::io::BufWriter::new(std::fs::File::create(&map)?);
    for i in 0..1_000_000u64 {
        writeln!(file, "{:x} 100 JS:*f{i} a.js:1:1", address + i * 0x100)?;
    }
    file.flush()?;
    drop(file);
    own_by_nobody(&map)?;
    let mut recording = record(built, socket, process.id(), 6, false);
    recording.wait()?;
    Ok(vec![process].into())
}

fn code_flood(built: &Built, socket: &Path) -> anyhow::Result<Attackers> {
    let mut vm = Command::new(&built.jitvm)
        .args(["loop", "--seconds", "60", "--zone-kb", "16384"])
        .args(["--flood-codes", "30000", "--ready"])
        .env("VMSCOPE_SOCKET", socket)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::piped())
        .spawn()
        .context("jitvm as nobody")?;
    let mut line = String::new();
    BufReader::new(vm.stdout.as_mut().expect("piped")).read_line(&mut line)?;
    // The publication is sent by the VM's publisher thread: give it time to arrive.
    std::thread::sleep(Duration::from_secs(3));
    Ok(vec![vm].into())
}

/// Compiles the test fixture `source` (tests/fixtures) into the scratch directory.
fn fixture(built: &Built, source: &str, name: &str) -> anyhow::Result<std::path::PathBuf> {
    let fixtures = crate::root().join("tests/fixtures");
    let out = built.dir.join(name);
    let status = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread", "-o"])
        .arg(&out)
        .arg(fixtures.join(source))
        .arg("-I")
        .arg(&fixtures)
        .status()
        .context("gcc")?;
    if !status.success() {
        bail!("gcc {source} failed");
    }
    Ok(out)
}

/// A program of nobody's, once it printed "ready".
fn start_as_nobody(command: &mut Command) -> anyhow::Result<Child> {
    let mut child = command
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::piped())
        .spawn()
        .context("start as nobody")?;
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("piped")).read_line(&mut line)?;
    if line.trim() != "ready" {
        bail!("{command:?} did not start: {line:?}");
    }
    Ok(child)
}

fn held_mmap_lock(built: &Built, socket: &Path) -> anyhow::Result<Attackers> {
    let holder = fixture(built, "mmap_lock_holder.c", "mmap_lock_holder")?;
    let fs = crate::fuse::HangingFs::mount(NOBODY);
    fs.hang_reads();
    let process = start_as_nobody(Command::new(&holder).arg(fs.file()).arg("60"))?;
    if fs.held_reads() != 1 {
        bail!("the holder's read of its page did not hang");
    }
    let recording = record(built, socket, process.id(), 8, true);
    std::thread::sleep(Duration::from_secs(1));
    Ok(Attackers {
        held: vec![Box::new(fs)],
        processes: vec![recording, process],
    })
}

fn profile_flood(built: &Built, socket: &Path) -> anyhow::Result<Attackers> {
    let stubs = fixture(built, "stubs.c", "stubs")?;
    let scratch = crate::shared_tempdir();
    // The stubs program writes its code file there, as nobody.
    std::os::unix::fs::chown(scratch.path(), Some(NOBODY), Some(NOBODY))?;
    let process = start_as_nobody(
        Command::new(&stubs)
            .arg(scratch.path().join("stubs.bin"))
            .arg("60"),
    )?;
    let recording = record(built, socket, process.id(), 30, true);
    let mut processes = vec![recording, process];
    std::thread::sleep(Duration::from_secs(3));
    let session = match nobodys_session(built, socket) {
        Ok(session) => session,
        Err(e) => {
            for mut process in processes {
                let _ = process.kill();
                let _ = process.wait();
            }
            return Err(e);
        }
    };
    for _ in 0..16 {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!(
                "while :; do {} --socket {} report {session} --format json >/dev/null 2>&1; done",
                built.cli.display(),
                socket.display()
            ))
            .uid(NOBODY)
            .gid(NOBODY);
        processes.push(command.spawn().context("a profile loop")?);
    }
    std::thread::sleep(Duration::from_secs(2));
    Ok(Attackers {
        held: vec![Box::new(scratch)],
        processes,
    })
}

/// The id of nobody's running session, from `vmscope sessions` as nobody.
fn nobodys_session(built: &Built, socket: &Path) -> anyhow::Result<u64> {
    let out = Command::new(&built.cli)
        .arg("--socket")
        .arg(socket)
        .arg("sessions")
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .context("vmscope sessions")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next()?.parse().ok())
        .next_back()
        .context("nobody has no session")
}

fn stack_copies(built: &Built, socket: &Path) -> anyhow::Result<Attackers> {
    let mut spinner = Command::new("sh")
        .args(["-c", "echo ready; while :; do :; done"])
        .env("PAD", "x".repeat(100 << 10))
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::piped())
        .spawn()
        .context("sh as nobody")?;
    let mut line = String::new();
    BufReader::new(spinner.stdout.as_mut().expect("piped")).read_line(&mut line)?;
    let mut children = Vec::new();
    for i in 0..8u32 {
        let (hz, call_graph) = if i % 2 == 0 {
            (250 - i, "dwarf,65528")
        } else {
            (2000 - i, "none")
        };
        let mut command = Command::new(&built.cli);
        command
            .arg("--socket")
            .arg(socket)
            .args(["record", "--duration", "8", "--call-graph", call_graph])
            .args(["-F", &hz.to_string(), "--pid", &spinner.id().to_string()])
            .uid(NOBODY)
            .gid(NOBODY)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        children.push(command.spawn().context("vmscope record as nobody")?);
    }
    std::thread::sleep(Duration::from_secs(1));
    children.push(spinner);
    Ok(children.into())
}

fn process_churn(built: &Built, socket: &Path) -> anyhow::Result<Attackers> {
    let jit = fixture(built, "fakejit.c", "fakejit")?;
    let scratch = crate::shared_tempdir();
    let system = Command::new(&built.cli)
        .arg("--socket")
        .arg(socket)
        .args([
            "record",
            "--system",
            "--duration",
            "300",
            "--format",
            "json",
            "-o",
        ])
        .arg(scratch.path().join("system.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("root's system-wide record")?;
    let mut processes = vec![system];
    std::thread::sleep(Duration::from_secs(1));
    // Each perf map goes 2 s after its process, read by then: /tmp does not fill up.
    let churn = format!(
        "while :; do {} 0.005 {} perfmap >/dev/null & p=$!; wait $p; \
         (sleep 2; rm -f /tmp/perf-$p.map) & done",
        jit.display(),
        scratch.path().display()
    );
    for _ in 0..2 {
        let mut command = Command::new("sh");
        command.arg("-c").arg(&churn).uid(NOBODY).gid(NOBODY);
        processes.push(command.spawn().context("a churn loop")?);
    }
    std::thread::sleep(Duration::from_secs(20));
    Ok(Attackers {
        held: vec![Box::new(scratch)],
        processes,
    })
}
