//! Processes in other pid and mount namespaces, as containers run them (made here with
//! `unshare`): the daemon samples them by their host pid, and names their JIT code from the
//! perf map they wrote in their own `/tmp` under their own pid, which the host cannot see at
//! `/tmp/perf-PID.map`: it reads it through `/proc/PID/root`. Their continuous windows,
//! exported over OTLP, say their container id, service name and namespace pid.

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

/// A cgroup of the unified hierarchy made for a test, removed when dropped (once its processes
/// are gone).
struct Cgroup(std::path::PathBuf);

impl Cgroup {
    /// `path` under the cgroup2 mount (`/sys/fs/cgroup` on unified hosts, its `unified`
    /// directory on hybrid ones).
    fn make(path: &str) -> Cgroup {
        let mounts = std::fs::read_to_string("/proc/self/mounts").expect("/proc/self/mounts");
        let root = mounts
            .lines()
            .find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields.get(2) == Some(&"cgroup2")).then(|| fields[1].to_owned())
            })
            .expect("a cgroup2 hierarchy is mounted: the test puts processes in cgroups of it");
        let dir = std::path::Path::new(&root).join(path);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot make the cgroup {}: {e}", dir.display()));
        Cgroup(dir)
    }

    fn procs(&self) -> String {
        self.0.join("cgroup.procs").display().to_string()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Innermost first: the test's cgroups are a path of directories. A process just
        // reaped may keep its cgroup busy for a moment.
        let mut dir = self.0.as_path();
        let deadline = Instant::now() + Duration::from_secs(2);
        while dir
            .file_name()
            .is_some_and(|n| n != "unified" && n != "cgroup")
        {
            match std::fs::remove_dir(dir) {
                Ok(()) => dir = dir.parent().unwrap(),
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(_) => break,
            }
        }
    }
}

/// Continuous windows exported over OTLP say where each process runs: a process in a
/// container's cgroup and pid namespace has its `container.id`, the `service.name` its
/// environment declares (`OTEL_SERVICE_NAME`) and its namespace pid (`process.vpid`) beside its
/// host pid; a process in a systemd service's cgroup is named after the service.
#[test]
fn exported_processes_say_their_container_service_and_namespace_pid() {
    use vmscope_tests::{
        otlp::{Receiver, exporting_daemon},
        shared_tempdir,
    };
    const ID: &str = "5e1f0c0ffee0d15ea5e0badcafe0f00d5e1f0c0ffee0d15ea5e0badcafe0f00d";
    let dir = shared_tempdir();
    let receiver = Receiver::start(dir.path(), None, 0.0);
    let daemon = exporting_daemon(receiver.port, 199, &[]);
    let container = Cgroup::make(&format!("docker-{ID}.scope"));
    let service = Cgroup::make(&format!(
        "vmscope-test-{}.slice/billing.service",
        std::process::id()
    ));
    let fixture = fixtures().hotspots_pie.display().to_string();
    // Each enters its cgroup before it runs the fixture, whose children stay in it.
    let contained = Command::new("sh")
        .args([
            "-c",
            "echo $$ > \"$1\" && exec unshare --pid --fork --kill-child --mount-proc \
             env OTEL_SERVICE_NAME=checkout \"$2\" 2",
            "sh",
            &container.procs(),
            &fixture,
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("run the fixture in a container's cgroup and pid namespace");
    let contained = Contained(contained);
    let host_pid = host_pid_of_init(contained.0.id());
    let served = Command::new("sh")
        .args([
            "-c",
            "echo $$ > \"$1\" && exec \"$2\" 2",
            "sh",
            &service.procs(),
            &fixture,
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("run the fixture in a service's cgroup");
    let served = Contained(served);
    let served_pid = served.0.id();

    let resource_of = |pid: u32| {
        receiver
            .requests()
            .iter()
            .flat_map(|r| r["resources"].as_array().cloned().unwrap_or_default())
            .map(|r| r["resource"].clone())
            .find(|r| r["process.pid"] == pid)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let (inside, beside) = loop {
        if let (Some(inside), Some(beside)) = (resource_of(host_pid), resource_of(served_pid)) {
            break (inside, beside);
        }
        assert!(
            Instant::now() < deadline,
            "the fixtures' windows did not arrive: {} requests\n{}",
            receiver.requests().len(),
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        inside["process.executable.name"], "hotspots-pie",
        "{inside}"
    );
    assert_eq!(inside["container.id"], ID, "{inside}");
    assert_eq!(inside["service.name"], "checkout", "{inside}");
    assert_eq!(
        inside["process.vpid"], 1,
        "the namespace's first process: {inside}"
    );
    assert_eq!(beside["service.name"], "billing", "{beside}");
    for absent in ["container.id", "process.vpid"] {
        assert!(beside.get(absent).is_none(), "{absent}: {beside}");
    }
    // Both end on their own, leaving their cgroups empty to remove.
    for mut fixture in [contained, served] {
        let _ = fixture.0.wait();
    }
}
