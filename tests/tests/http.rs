//! The daemon's opt-in HTTP endpoint (`vmscoped --http`), read by clients nobody here wrote:
//! `go tool pprof` fetches `/debug/pprof/profile` as it fetches a Go server's, `promtool check
//! metrics` (Prometheus's own checker) reads `/metrics`, and curl makes the bad requests.
//! Nothing listens on TCP without the flag.

use std::{
    collections::HashSet,
    net::TcpListener,
    process::Command,
    time::{Duration, Instant},
};

use vmscope_tests::{Daemon, Running, fixtures, go_pprof_from, pprof_top_rows, shared_tempdir};

/// A TCP port free on loopback now (the daemon binds it a moment later).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A daemon serving HTTP on a free loopback port, at 997 Hz (prime: no beat with the fixture's 10 ms cycle) so that a 2 s profile of one busy
/// thread holds about 2,000 samples; and its base URL.
fn daemon_with_http(extra: &[&str]) -> (Daemon, String) {
    let address = format!("127.0.0.1:{}", free_port());
    let mut args = vec!["--http", &address, "--http-frequency", "997"];
    args.extend_from_slice(extra);
    let daemon = Daemon::start_with(&args);
    (daemon, format!("http://{address}"))
}

/// `curl` of `url`: its status code and body.
fn curl(url: &str, max_seconds: f64) -> (u16, String) {
    let output = Command::new("curl")
        .args([
            "-s",
            "--max-time",
            &max_seconds.to_string(),
            "-w",
            "\n%{http_code}",
        ])
        .arg(url)
        .output()
        .expect("curl runs (cargo xtask setup installs it)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// A counter of `/metrics`, by its full metric name.
fn metric(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn go_tool_pprof_profiles_a_program_over_http_and_promtool_reads_the_metrics() {
    let (daemon, base) = daemon_with_http(&[]);
    let target = Running::start(Command::new(&fixtures().hotspots_pie).arg("20"));
    let scratch = shared_tempdir();
    // By the executable's file name, as a scraper configured per program asks.
    let url = format!("{base}/debug/pprof/profile?seconds=2&exe=hotspots-pie");
    let output = go_pprof_from(
        &["-top", "-sample_index=samples", "-nodefraction=0"],
        &url,
        scratch.path(),
    );
    let rows = pprof_top_rows(&output);
    let flat = |name: &str| -> f64 {
        rows.get(name)
            .and_then(|(flat, _)| flat.parse().ok())
            .unwrap_or(0.0)
    };
    let (a, b, c) = (flat("hot_a"), flat("hot_b"), flat("hot_c"));
    let sum = a + b + c;
    assert!(
        sum > 1000.0,
        "about 2,000 samples in 2 s at 997 Hz:\n{output}"
    );
    // 60/30/10 by construction; 2,000 samples put the shares within a few points.
    for (share, expected, name) in [(a, 60.0, "hot_a"), (b, 30.0, "hot_b"), (c, 10.0, "hot_c")] {
        let percent = 100.0 * share / sum;
        assert!(
            (percent - expected).abs() < 6.0,
            "{name} holds {percent:.1}% of the hot samples, not {expected}%:\n{output}"
        );
    }
    drop(target);

    let (code, page) = curl(&format!("{base}/metrics"), 10.0);
    assert_eq!(code, 200, "{page}");
    let check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool runs (Debian's prometheus; cargo xtask setup installs it)");
    use std::io::Write as _;
    check
        .stdin
        .as_ref()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics refused the page: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert_eq!(
        metric(&page, "vmscoped_http_profiles_served_total"),
        Some(1.0),
        "{page}"
    );
    assert!(
        metric(&page, "vmscoped_samples_routed_total") > Some(1000.0),
        "{page}"
    );
    let rss = metric(&page, "process_resident_memory_bytes").unwrap_or(0.0);
    assert!(rss > 1e6, "the daemon's resident memory: {rss}");
    assert!(
        metric(&page, "process_cpu_seconds_total") > Some(0.0),
        "{page}"
    );
    assert_eq!(curl(&format!("{base}/healthz"), 10.0), (200, "ok\n".into()));
    drop(daemon);
}

#[test]
fn bad_requests_get_their_reason_and_a_client_that_leaves_stops_its_profile() {
    let (mut daemon, base) = daemon_with_http(&["--http-max-seconds", "60"]);
    let profile = |query: &str| curl(&format!("{base}/debug/pprof/profile?{query}"), 10.0);
    for (query, code, reason) in [
        ("seconds=0", 400, "positive whole number"),
        ("seconds=61", 400, "limit of 60 s"),
        ("seconds=x", 400, "positive whole number"),
        ("seconds=1&pdi=1", 400, "unknown parameter \"pdi\""),
        ("seconds=1&pid=1&exe=x", 400, "name one target"),
        ("seconds=1&exe=no-such-program", 404, "no process runs"),
        ("seconds=1&pid=4000000000", 404, ""),
        ("seconds=1&retained=1", 400, "does not profile continuously"),
    ] {
        let (got, body) = profile(query);
        assert_eq!(got, code, "{query}: {body}");
        assert!(body.contains(reason), "{query}: {body}");
    }
    let (code, body) = curl(&format!("{base}/debug/pprof/heap"), 10.0);
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("/debug/pprof/profile"), "{body}");

    // A client that gives up after a second of a 30 s profile: its session stops, it does not
    // sample on for the 29 s nobody waits for.
    let target = Running::start(Command::new(&fixtures().hotspots_pie).arg("20"));
    let (code, _) = curl(
        &format!("{base}/debug/pprof/profile?seconds=30&pid={}", target.pid()),
        1.0,
    );
    assert_eq!(code, 0, "curl gave up before an answer");
    let deadline = Instant::now() + Duration::from_secs(10);
    let out = loop {
        let out = daemon
            .cli()
            .args(["sessions"])
            .output()
            .expect("vmscope sessions");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("the HTTP client went away") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        out.contains("the HTTP client went away"),
        "the session stopped when its client left:\n{out}\n{}",
        daemon.log()
    );
    let (code, page) = curl(&format!("{base}/metrics"), 10.0);
    assert_eq!(code, 200);
    assert_eq!(
        metric(&page, "vmscoped_http_profiles_refused_total"),
        Some(8.0),
        "every refusal counted:\n{page}"
    );
    assert!(daemon.is_alive(), "{}", daemon.log());
}

/// The inodes of the listening TCP sockets of the host (`/proc/net/tcp` and `tcp6`, state 0A).
fn listening_inodes() -> HashSet<String> {
    let mut inodes = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(3) == Some(&"0A") {
                inodes.extend(fields.get(9).map(|s| s.to_string()));
            }
        }
    }
    inodes
}

/// How many listening TCP sockets `pid` holds.
fn tcp_listeners(pid: u32) -> usize {
    let listening = listening_inodes();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the daemon's descriptors")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .filter(|inode| listening.contains(inode))
        .count()
}

#[test]
fn nothing_listens_on_tcp_without_the_flag() {
    let plain = Daemon::start();
    assert_eq!(tcp_listeners(plain.pid()), 0, "a daemon without --http");
    drop(plain);
    let (with_http, _) = daemon_with_http(&[]);
    assert_eq!(tcp_listeners(with_http.pid()), 1, "a daemon with --http");
}
