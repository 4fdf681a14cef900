//! Processes in other pid and mount namespaces, as containers run them (made here with
//! `unshare`): the daemon samples them by their host pid, and names their JIT code from the
//! perf map they wrote in their own `/tmp` under their own pid, which the host cannot see at
//! `/tmp/perf-PID.map`: it reads it through `/proc/PID/root`.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use vmscope_tests::{Daemon, fixtures, json_report};

/// Kills the namespace's processes when dropped.
struct Contained(std::process::Child);

impl Drop for Contained {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The host pid of the process the namespace runs as its pid 1: the child of `unshare`.
fn host_pid_of_init(unshare: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
            .unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            return pid.parse().expect("a pid");
        }
        assert!(Instant::now() < deadline, "unshare forked no child");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_jit_in_its_own_pid_and_mount_namespaces_is_named_from_its_own_tmp() {
    let daemon = Daemon::start();
    // Pid 1 of a new pid namespace, with a /tmp of its own: its perf map is
    // /tmp/perf-1.map in its root only. The fixture is run from a descriptor opened before
    // the new /tmp hides the host's (where the fixtures are built).
    let mut contained = Contained(
        Command::new("unshare")
            .args(["--pid", "--fork", "--mount", "--mount-proc", "sh", "-c"])
            .arg(r#"exec 3<"$0" && mount -t tmpfs vmscope-test /tmp && exec /proc/self/fd/3 "$@""#)
            .arg(&fixtures().fakejit)
            .args(["6", "/tmp", "perfmap"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux) runs"),
    );
    let mut line = String::new();
    BufReader::new(contained.0.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the contained fixture started");
    let pid = host_pid_of_init(contained.0.id());
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .expect("NSpid");
    assert_eq!(
        nspid.split_whitespace().collect::<Vec<_>>(),
        [pid.to_string().as_str(), "1"],
        "pid 1 of its own namespace"
    );
    assert!(
        !std::path::Path::new("/tmp/perf-1.map").exists()
            || std::fs::read_to_string("/tmp/perf-1.map")
                .is_ok_and(|map| !map.contains("fake_jit_spin")),
        "the host's /tmp does not hold its perf map"
    );

    let out = daemon
        .cli()
        .args(["record", "--format", "json", "--duration", "2", "--pid"])
        .arg(pid.to_string())
        .output()
        .expect("vmscope record");
    let report = json_report(&out);
    assert_eq!(report["targets"][0]["pid"], pid, "sampled by its host pid");
    let generated = report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["section"] == "generated")
        .unwrap_or_else(|| panic!("no generated section: {report}"));
    let spin = generated["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "fake_jit_spin")
        .unwrap_or_else(|| panic!("its JIT code unnamed: {generated}"));
    let samples = spin["samples"].as_u64().unwrap();
    let total = report["total_samples"].as_u64().unwrap();
    assert!(
        samples * 10 >= total * 9,
        "fake_jit_spin holds {samples} of {total} samples"
    );
    assert_eq!(spin["code_map"], "perf map");
}
