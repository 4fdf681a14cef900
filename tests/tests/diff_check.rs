//! `vmscope diff` and `vmscope check` on profiles whose difference is known by construction:
//! `hotspots --rounds 100` runs a fixed workload of 6, 3 and 1 ms of thread CPU time per round
//! in hot_a, hot_b and hot_c; `hotspots --rounds 100 7.2` is the same program with 20% more
//! work in hot_a. Reruns of the first must show no change and pass `check`; the second must
//! flag hot_a alone, by about +20%, and fail `check`, in every try.

use std::{path::Path, process::Output};

use vmscope_tests::{Daemon, fixtures, shared_tempdir};

const ROUNDS: &str = "150";
const TRIES: usize = 10;

/// Records the fixture's fixed workload (`a_ms` of hot_a a round) into a pprof file.
fn record(daemon: &Daemon, out: &Path, a_ms: &str, param: Option<&str>) -> std::process::Child {
    let mut command = daemon.cli();
    command.args(["record", "--format", "pprof", "-o"]).arg(out);
    if let Some(param) = param {
        command.args(["--param", param]);
    }
    command
        .arg("--")
        .arg(&fixtures().hotspots_pie)
        .args(["--rounds", ROUNDS, a_ms])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run vmscope record")
}

fn finished(child: std::process::Child) {
    let out = child.wait_with_output().expect("vmscope record");
    assert!(
        out.status.success(),
        "vmscope record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn diff_json(daemon: &Daemon, base: &str, new: &str) -> serde_json::Value {
    let out = daemon
        .cli()
        .args(["diff", base, new, "--format", "json"])
        .output()
        .expect("vmscope diff");
    assert!(
        out.status.success(),
        "vmscope diff failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("diff JSON")
}

/// The names of the program's functions whose self time changed more than noise. Not the
/// kernel's: interrupts that land on the program (a softirq's `handle_softirqs`, 0 samples in
/// one run and 15 in the next) change with the machine, and diff rightly says so, but they
/// are not the program's doing.
fn flagged(diff: &serde_json::Value) -> Vec<String> {
    diff["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["module"] != "[kernel.kallsyms]")
        .filter(|f| f["self"]["change"]["significant"] == true)
        .map(|f| f["name"].as_str().unwrap().to_owned())
        .collect()
}

fn self_change_percent(diff: &serde_json::Value, name: &str) -> f64 {
    let function = diff["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("{name} in the diff: {diff:#}"));
    (function["self"]["change"]["ratio"].as_f64().unwrap() - 1.0) * 100.0
}

fn check(daemon: &Daemon, new: &Path, base: &Path) -> Output {
    daemon
        .cli()
        .arg("check")
        .arg(new)
        .arg("--baseline")
        .arg(base)
        .args(["--max-increase", "5%", "hot_a", "hot_b"])
        .output()
        .expect("vmscope check")
}

#[test]
fn diff_and_check_tell_a_planted_regression_from_a_rerun() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let base = dir.path().join("base.pb.gz");
    finished(record(&daemon, &base, "6", Some("n=100")));

    for attempt in 0..TRIES {
        let rerun = dir.path().join(format!("rerun-{attempt}.pb.gz"));
        let slower = dir.path().join(format!("slower-{attempt}.pb.gz"));
        // Both at once: one fixture thread each on the machine's two cores.
        let (a, b) = (
            record(&daemon, &rerun, "6", None),
            record(&daemon, &slower, "7.2", None),
        );
        finished(a);
        finished(b);

        let passed = check(&daemon, &rerun, &base);
        let stdout = String::from_utf8_lossy(&passed.stdout);
        assert_eq!(
            passed.status.code(),
            Some(0),
            "try {attempt}: a rerun of the baseline failed the check:\n{stdout}{}",
            String::from_utf8_lossy(&passed.stderr)
        );
        assert_eq!(
            stdout.lines().filter(|l| l.starts_with("ok: ")).count(),
            2,
            "{stdout}"
        );

        let failed = check(&daemon, &slower, &base);
        let stdout = String::from_utf8_lossy(&failed.stdout);
        assert_eq!(
            failed.status.code(),
            Some(1),
            "try {attempt}: the planted regression passed the check:\n{stdout}{}",
            String::from_utf8_lossy(&failed.stderr)
        );
        let failures: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAILED")).collect();
        assert_eq!(failures.len(), 1, "only hot_a fails: {stdout}");
        assert!(
            failures[0].starts_with("FAILED: hot_a inclusive CPU time +"),
            "{stdout}"
        );

        if attempt == 0 {
            let (base, rerun, slower) = (
                base.to_str().unwrap(),
                rerun.to_str().unwrap(),
                slower.to_str().unwrap(),
            );
            let same = diff_json(&daemon, base, rerun);
            assert_eq!(flagged(&same), Vec::<String>::new(), "{same:#}");
            let diff = diff_json(&daemon, base, slower);
            assert_eq!(flagged(&diff), ["hot_a"], "{diff:#}");
            let change = self_change_percent(&diff, "hot_a");
            assert!(
                (15.0..=25.0).contains(&change),
                "hot_a {change:+.1}%, planted +20%"
            );
            let b = self_change_percent(&diff, "hot_b");
            assert!(b.abs() < 5.0, "hot_b {b:+.1}%, planted 0");

            // The differential flame graph: hot_a red, as it grew.
            let svg = dir.path().join("diff.svg");
            let out = daemon
                .cli()
                .args(["diff", base, slower, "--format", "flamegraph", "-o"])
                .arg(&svg)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let svg = std::fs::read_to_string(&svg).unwrap();
            let hot_a = svg
                .split("<g>")
                .find(|g| g.contains("<title>hot_a "))
                .unwrap_or_else(|| panic!("a box for hot_a: {svg}"));
            let fill = hot_a
                .split("fill=\"rgb(")
                .nth(1)
                .and_then(|s| s.split(')').next())
                .expect("hot_a's fill");
            let rgb: Vec<u32> = fill.split(',').map(|c| c.trim().parse().unwrap()).collect();
            assert!(
                rgb[0] == 255 && rgb[1] < 255 && rgb[1] == rgb[2],
                "hot_a is red: {fill}"
            );
            assert!(hot_a.contains("+"), "its title says it grew: {hot_a}");
        }
    }
}

#[test]
fn diff_compares_sessions_by_id_and_check_refuses_a_name_in_neither() {
    let daemon = Daemon::start();
    let mut ids = Vec::new();
    for a_ms in ["6", "7.2"] {
        let out = daemon
            .cli()
            .args(["record", "--format", "json", "--"])
            .arg(&fixtures().hotspots_pie)
            .args(["--rounds", ROUNDS, a_ms])
            .output()
            .expect("vmscope record");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report = vmscope_tests::json_report(&out);
        ids.push(
            report["session_id"]
                .as_u64()
                .expect("session_id")
                .to_string(),
        );
    }
    let diff = diff_json(&daemon, &ids[0], &ids[1]);
    assert_eq!(flagged(&diff), ["hot_a"], "{diff:#}");
    assert_eq!(diff["base"]["label"], format!("session {}", ids[0]));
    assert_eq!(diff["positions_by_first_pc"], false);

    let text = daemon
        .cli()
        .args(["diff", &ids[0], &ids[1]])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let hot_a = text
        .lines()
        .find(|l| l.ends_with("hot_a [hotspots-pie]"))
        .unwrap_or_else(|| panic!("hot_a's row: {text}"));
    assert!(hot_a.contains(" * "), "marked as more than noise: {hot_a}");
    assert!(text.contains("exact two-sided binomial test"), "{text}");

    let out = daemon
        .cli()
        .args([
            "check",
            &ids[1],
            "--baseline",
            &ids[0],
            "--max-increase",
            "5",
            "hot_x",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a name in neither profile cannot be checked"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no function named \"hot_x\""), "{stderr}");
    let out = daemon
        .cli()
        .args(["diff", "999999", &ids[0]])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("999999"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `vmscope fit` over the `cost` fixture at ten sizes: `quadratic` costs 0.5 µs·(n² + 3n) and
/// `linear` 0.25 ms·n by construction (thread CPU time), and the fits must say so.
#[test]
fn fit_recovers_a_quadratic_and_a_linear_cost() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let sizes = [16, 32, 64, 128, 256, 384, 512, 640, 768, 1024];
    let mut files = Vec::new();
    for pair in sizes.chunks(2) {
        let children: Vec<_> = pair
            .iter()
            .map(|n| {
                let file = dir.path().join(format!("cost-{n}.pb.gz"));
                files.push(file.clone());
                daemon
                    .cli()
                    .args([
                        "record",
                        "--param",
                        &format!("n={n}"),
                        "--format",
                        "pprof",
                        "-o",
                    ])
                    .arg(&file)
                    .arg("--")
                    .arg(&fixtures().cost)
                    .arg(n.to_string())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("vmscope record")
            })
            .collect();
        for child in children {
            finished(child);
        }
    }
    let out = daemon
        .cli()
        .arg("fit")
        .args(&files)
        .args([
            "--function",
            "quadratic",
            "--function",
            "linear",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fits: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(fits["param"], "n");
    let fit_of = |name: &str| {
        fits["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {fits:#}"))["fit"]["chosen"]
            .clone()
    };
    let quadratic = fit_of("quadratic");
    assert_eq!(quadratic["model"], "quadratic", "{fits:#}");
    // ms per n²: 0.5 µs.
    let c = quadratic["coefficients"][2].as_f64().unwrap();
    assert!(
        (c - 0.5e-3).abs() <= 0.05 * 0.5e-3,
        "c = {c} ms, built 0.0005: {quadratic:#}"
    );
    assert!(
        quadratic["r_squared"].as_f64().unwrap() >= 0.99,
        "{quadratic:#}"
    );
    let linear = fit_of("linear");
    assert_eq!(linear["model"], "linear", "{fits:#}");
    let b = linear["coefficients"][1].as_f64().unwrap();
    assert!(
        (b - 0.25).abs() <= 0.05 * 0.25,
        "b = {b} ms, built 0.25: {linear:#}"
    );

    // Fewer than three profiles, or profiles without the parameter: said so.
    let out = daemon.cli().arg("fit").args(&files[..2]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 3"));
    let out = daemon
        .cli()
        .arg("fit")
        .args(&files)
        .args(["--param", "m"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no numeric parameter m"));
}

/// The demo VM's methods are compared per bytecode range: whole ranges between sessions
/// (`8->23`), first pcs when a side is a pprof file (`@8`), each range's self time adding up to
/// its method's.
#[test]
fn diff_compares_jit_methods_per_bytecode_range() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let mut ids = Vec::new();
    let pprof = dir.path().join("fib.pb.gz");
    for run in 0..2 {
        let mut command = daemon.cli();
        command.args(["record", "--format"]);
        if run == 0 {
            command.arg("json");
        } else {
            command.args(["pprof", "-o"]).arg(&pprof);
        }
        let out = command
            .arg("--")
            .arg(vmscope_tests::binary("jitvm"))
            .args(["fib", "--fib-n", "20", "--iterations", "400"])
            .output()
            .expect("vmscope record");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if run == 0 {
            ids.push(
                vmscope_tests::json_report(&out)["session_id"]
                    .as_u64()
                    .unwrap()
                    .to_string(),
            );
        } else {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let id = stderr
                .split_once("session ")
                .and_then(|(_, rest)| rest.split(':').next())
                .expect("the session's id on stderr");
            ids.push(id.to_owned());
        }
    }
    let bench_fib = |diff: &serde_json::Value| {
        diff["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "SmallInteger>>benchFib")
            .unwrap_or_else(|| panic!("benchFib in {diff:#}"))
            .clone()
    };
    let diff = diff_json(&daemon, &ids[0], &ids[1]);
    let function = bench_fib(&diff);
    let positions = function["positions"].as_array().unwrap();
    assert!(positions.len() >= 3, "{function:#}");
    for p in positions {
        assert!(p["position"].as_str().unwrap().contains("->"), "{p:#}");
    }
    // Folding drops no self time of a row it shows.
    let diff = daemon
        .cli()
        .args(["diff", &ids[0], &ids[1], "--format", "json", "--fold", "0"])
        .output()
        .unwrap();
    let diff: serde_json::Value = serde_json::from_slice(&diff.stdout).unwrap();
    let function = bench_fib(&diff);
    let of_positions: u64 = function["positions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["self"]["base_samples"].as_u64().unwrap())
        .sum();
    assert_eq!(
        of_positions,
        function["self"]["base_samples"].as_u64().unwrap()
    );

    let diff = diff_json(&daemon, &ids[0], pprof.to_str().unwrap());
    assert_eq!(diff["positions_by_first_pc"], true);
    for p in bench_fib(&diff)["positions"].as_array().unwrap() {
        assert!(p["position"].as_str().unwrap().starts_with('@'), "{p:#}");
    }
}
