//! `vmscope record -- CMD` behaves like `time` or `strace`: the command keeps its standard
//! output (the report goes to stderr or `-o FILE`), signals reach the command, and vmscope
//! exits with the command's status.

use std::{
    io::{BufRead, BufReader, Read, Write},
    process::{Command, Stdio},
};

use vmscope_tests::{Daemon, shared_tempdir};

/// A few MiB of text that compresses neither trivially nor instantly.
fn compressible_input(path: &std::path::Path) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..200_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        writeln!(file, "line {i} value {} tag {}", x % 100_000, x % 7).unwrap();
    }
    file.flush().unwrap();
}

#[test]
fn a_recorded_commands_stdout_is_its_own() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let input = dir.path().join("input.txt");
    compressible_input(&input);

    // `vmscope record -- gzip -9 -c f > f.gz` must leave a gzip stream that decompresses to f.
    let out = daemon
        .cli()
        .args(["record", "--", "gzip", "-9", "-c"])
        .arg(&input)
        .output()
        .expect("run vmscope");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut gunzip = Command::new("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = gunzip.stdin.take().unwrap();
    let compressed = out.stdout.clone();
    let feeder = std::thread::spawn(move || stdin.write_all(&compressed));
    let mut decompressed = Vec::new();
    gunzip
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut decompressed)
        .unwrap();
    feeder.join().unwrap().unwrap();
    assert!(
        gunzip.wait().unwrap().success(),
        "gzip -d refused the output"
    );
    assert!(
        decompressed == std::fs::read(&input).unwrap(),
        "the decompressed output differs from the input"
    );
    // The report went to stderr.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("samples in the VM"), "{stderr}");
    assert!(stderr.contains("(gzip)"), "{stderr}");

    // JSON to a file, with a command that prints: the file is the JSON, stdout the command's.
    let json = dir.path().join("p.json");
    let out = daemon
        .cli()
        .args(["record", "--format", "json", "-o"])
        .arg(&json)
        .args([
            "--",
            "sh",
            "-c",
            "echo first; gzip -9 -c \"$0\" > /dev/null; echo last",
        ])
        .arg(&input)
        .output()
        .expect("run vmscope");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "first\nlast\n");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).expect("p.json is JSON");
    assert!(report["total_samples"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["complete"], true);

    // `report -o` writes the same numbers.
    let id = report["session_id"].as_u64().unwrap().to_string();
    let again = dir.path().join("again.json");
    let out = daemon
        .cli()
        .args(["report", &id, "--format", "json", "-o"])
        .arg(&again)
        .output()
        .unwrap();
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    let again: serde_json::Value = serde_json::from_slice(&std::fs::read(&again).unwrap()).unwrap();
    assert_eq!(again["total_samples"], report["total_samples"]);

    // Without a command, the report has stdout to itself.
    let text = daemon.cli().args(["report", &id]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("samples in the VM"));
    // A report file that cannot be written fails before anything is recorded.
    let out = daemon
        .cli()
        .args([
            "record",
            "-o",
            "/nonexistent-dir/r.txt",
            "--",
            "sh",
            "-c",
            "echo ran",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "the command must not run");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write the report"));
}

/// Runs `vmscope record -o FILE -- sh -c SCRIPT`, sends `signal` to vmscope once it records,
/// and returns vmscope's exit status, its report and the command's pid.
fn record_then_signal(daemon: &Daemon, script: &str, signal: i32) -> (Option<i32>, String, u32) {
    let dir = shared_tempdir();
    let report = dir.path().join("report.txt");
    let mut vmscope = daemon
        .cli()
        .args(["record", "-o"])
        .arg(&report)
        .args(["--", "sh", "-c", script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(vmscope.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    // "vmscope: session N: recording `sh -c ...` (pid P) at 1400 Hz; ..."
    let pid: u32 = first
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {first:?}"));
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: kill only sends a signal.
    unsafe { libc::kill(vmscope.id() as i32, signal) };
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let status = vmscope.wait().unwrap();
    let text = std::fs::read_to_string(&report).unwrap_or_default();
    assert!(
        text.contains("samples in the VM"),
        "no report after the signal; vmscope said:\n{first}{rest}"
    );
    (status.code(), text, pid)
}

fn gone(pid: u32) -> bool {
    // Reaped by vmscope: no /proc entry, not even a zombie.
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn signals_to_vmscope_reach_the_command() {
    let daemon = Daemon::start();
    let busy = "while :; do :; done";
    for (signal, code) in [(libc::SIGINT, 130), (libc::SIGHUP, 129)] {
        let (status, text, pid) = record_then_signal(&daemon, busy, signal);
        assert_eq!(status, Some(code), "signal {signal}:\n{text}");
        assert!(gone(pid), "the command (pid {pid}) was left running");
        assert!(text.contains("(sh)"), "{text}");
        assert!(text.contains("the recorded command exited"), "{text}");
    }
    // A command that handles the signal: its own exit status is vmscope's.
    let (status, text, pid) = record_then_signal(
        &daemon,
        "trap 'echo bye; exit 3' TERM; while :; do :; done",
        libc::SIGTERM,
    );
    assert_eq!(status, Some(3), "{text}");
    assert!(gone(pid));
}
