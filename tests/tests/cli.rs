//! The `vmscope` command line against a real daemon: `record -- CMD` (first samples kept, exit
//! status passed through), the text and JSON reports, and the session commands.

use vmscope_tests::{Daemon, fixtures, json_report, rate_tolerance};

#[test]
fn record_a_command_from_its_first_instruction() {
    let daemon = Daemon::start();
    let out = daemon
        .cli()
        .args(["record", "--format", "json", "--"])
        .arg(&fixtures().hotspots_pie)
        .arg("2")
        .output()
        .expect("run vmscope");
    let report = json_report(&out);
    // The fixture's own output, all of stdout.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let cpu_seconds: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("cpu_seconds="))
        .expect("the fixture reports its CPU time")
        .parse()
        .unwrap();

    // Every sample of the command's life is there: from exec to exit, at 1400 Hz.
    let total = report["total_samples"].as_u64().unwrap() as f64;
    let expected = 1400.0 * cpu_seconds;
    let steal = report["host_steal_percent"].as_f64().unwrap();
    let tolerance = rate_tolerance(steal);
    assert!(
        (total - expected).abs() <= tolerance * expected,
        "{total} samples for {cpu_seconds} s of CPU, expected {expected:.0} +- {:.0}% \
         (host steal {steal}%)",
        tolerance * 100.0
    );
    assert_eq!(report["lost_samples"], 0);
    assert_eq!(report["complete"], true);
    // The CLI notices the exit at once; the daemon may notice it first on its own tick.
    let reason = report["stop_reason"].as_str().unwrap();
    assert!(
        ["the recorded command exited", "all targets exited"].contains(&reason),
        "{reason}"
    );
    let measured = report["measured_frequency_hz"].as_f64().unwrap();
    assert!(
        (measured - 1400.0).abs() <= tolerance * 1400.0,
        "{measured} Hz: {total} samples, the daemon saw {} s of CPU, the command {cpu_seconds} s \
         (host steal {steal}%)",
        report["cpu_seconds"]
    );

    let sections = report["sections"].as_array().unwrap();
    let vanilla = sections
        .iter()
        .find(|s| s["section"] == "vanilla")
        .expect("a vanilla section");
    let rows = vanilla["rows"].as_array().unwrap();
    for row in rows {
        for field in ["name", "module", "section", "samples"] {
            assert!(!row[field].is_null(), "row without {field}: {row}");
        }
    }
    // The constructor's 50 ms before main: about 70 samples if none of the first were lost.
    let startup = rows
        .iter()
        .find(|r| r["name"] == "startup_burn")
        .expect("startup_burn, run before main, is in the profile")["samples"]
        .as_u64()
        .unwrap();
    assert!(
        (50..=90).contains(&startup),
        "startup_burn has {startup} samples, expected about 70"
    );
    let hot_a = rows.iter().find(|r| r["name"] == "hot_a").expect("hot_a");
    assert_eq!(hot_a["module"], "hotspots-pie");
    assert_eq!(hot_a["section"], "vanilla");
    let share = hot_a["percent_of_section"].as_f64().unwrap();
    assert!(
        (share - 60.0).abs() < 5.0,
        "hot_a holds {share}% of vanilla"
    );
}

#[test]
fn system_wide_sessions_see_every_process() {
    let daemon = Daemon::start();
    let _target = vmscope_tests::Running::start(
        std::process::Command::new(&fixtures().hotspots_pie).arg("30"),
    );
    let out = daemon
        .cli()
        .args([
            "record",
            "--system",
            "--duration",
            "1.5",
            "--format",
            "json",
        ])
        .output()
        .expect("run vmscope");
    let report = json_report(&out);
    assert_eq!(report["system_wide"], true);
    let sections = report["sections"].as_array().unwrap();
    let main = sections
        .iter()
        .find(|s| s["section"] == "vanilla")
        .expect("a section of main executables");
    assert_eq!(main["title"], "main executables");
    let hot_a = main["rows"]
        .as_array()
        .unwrap()
        .iter()
        // Other tests' processes are on the system too: the nopie build has a hot_a of its own.
        .find(|r| r["name"] == "hot_a" && r["module"] == "hotspots-pie")
        .unwrap_or_else(|| panic!("hotspots-pie's hot_a missing from {main}"));
    assert_eq!(hot_a["module"], "hotspots-pie");
    // The fixture keeps a CPU busy (1.5 s x 1400 Hz x 60% in hot_a when it gets one to
    // itself); the bound leaves room for a shared, stolen-from host.
    assert!(hot_a["samples"].as_u64().unwrap() > 300, "{hot_a}");
    let measured = report["measured_frequency_hz"].as_f64().unwrap();
    let steal = report["host_steal_percent"].as_f64().unwrap();
    assert!(
        (measured - 1400.0).abs() < rate_tolerance(steal) * 1400.0,
        "{measured} Hz (host steal {steal}%)"
    );
}

#[test]
fn exit_status_is_passed_through() {
    let daemon = Daemon::start();
    let out = daemon
        .cli()
        .args(["record", "--", "sh", "-c", "exit 3"])
        .output()
        .expect("run vmscope");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The command keeps stdout; the report is on stderr.
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("vanilla vm code"), "{text}");
    // A program that lives a millisecond is named after itself, not after the vmscope it was
    // forked from.
    let header = text
        .lines()
        .find(|l| l.starts_with("pid "))
        .unwrap_or_default();
    assert!(header.contains(" (sh)"), "{header}\n{text}");
    assert!(!header.contains("vmscope"), "{header}");

    let missing = daemon
        .cli()
        .args(["record", "--", "no-such-command-for-vmscope"])
        .output()
        .expect("run vmscope");
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("command not found"));
}

/// Runs `program 30`, records it by pid for `seconds` with the text report, kills it, and
/// returns the report (stdout: no command of vmscope's owns it).
fn record_pid_text(daemon: &Daemon, program: &std::path::Path, seconds: &str) -> String {
    let mut target = std::process::Command::new(program)
        .arg("30")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out = daemon
        .cli()
        .args(["record", "--duration", seconds, "--pid"])
        .arg(target.id().to_string())
        .output()
        .expect("run vmscope");
    let _ = target.kill();
    let _ = target.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the report is UTF-8")
}

#[test]
fn text_report_and_session_commands() {
    let daemon = Daemon::start();
    let text = record_pid_text(&daemon, &fixtures().hotspots_nopie, "1.5");
    for expected in [
        "samples in the VM",
        "samples in the entire program",
        "sampling frequency",
        "% of vanilla vm code (% of total)",
        "hot_a",
        "duration elapsed",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }

    let sessions = daemon.cli().arg("sessions").output().unwrap();
    let listing = String::from_utf8_lossy(&sessions.stdout);
    assert!(listing.contains("stopped"), "{listing}");
    let id = listing
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().next())
        .expect("a session row")
        .to_owned();
    let report = daemon
        .cli()
        .args(["report", &id, "--fold", "0"])
        .output()
        .unwrap();
    assert!(report.status.success());
    assert!(String::from_utf8_lossy(&report.stdout).contains("hot_b"));
    let again = daemon.cli().args(["stop", &id]).output().unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already stopped"));
    let info = daemon.cli().arg("info").output().unwrap();
    assert!(String::from_utf8_lossy(&info.stdout).contains("perf_event_max_sample_rate"));
}

#[test]
fn jit_processes_get_a_generated_code_section() {
    // Node's JIT runs a hot loop from anonymous executable memory (no perf map asked for).
    // Date.now() runs in V8's C++ and the vDSO: called once per 1000 rounds of JIT code, not
    // every round, so that most of the time is in generated code even on a loaded host.
    let daemon = Daemon::start();
    let out = daemon
        .cli()
        .args(["record", "--format", "json", "--", "node", "-e"])
        .arg(
            "const end = Date.now() + 1500; let x = 0; \
             while (Date.now() < end) { for (let i = 0; i < 1000; i++) x += Math.sqrt(x + i); }",
        )
        .output()
        .expect("run vmscope (node must be installed)");
    let report = json_report(&out);
    let generated = report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["section"] == "generated")
        .unwrap_or_else(|| panic!("no generated vm code section in {report}"));
    assert_eq!(generated["title"], "generated vm code");
    let rows = generated["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .any(|r| r["name"].as_str().unwrap().starts_with("[anonymous code")),
        "{generated}"
    );
    assert!(generated["samples"].as_u64().unwrap() > 100, "{generated}");
}

/// Long C++ names from a real binary (V8's, demangled): the text report tells apart names that
/// eliding their middle makes look alike, and `--wide` prints them whole, last on their lines,
/// without padding every row to the longest.
#[test]
fn long_names_are_told_apart_and_printed_whole_with_wide() {
    let daemon = Daemon::start();
    let text = record_pid_text(&daemon, &fixtures().lookalikes, "2");
    let (object, array, js_object) = (
        "v8::internal::Handle<v8::internal::Object>",
        "v8::internal::Handle<v8::internal::JSArray>",
        "v8::internal::Handle<v8::internal::JSObject>",
    );
    let names = [
        format!("void v8::internal::JsonStringifier::Serialize_<false>({object}, bool, {object})"),
        format!("void v8::internal::JsonStringifier::Serialize_<true>({object}, bool, {object})"),
        format!("v8::internal::JsonStringifier::SerializeJSArray({array}, {object})"),
        format!("v8::internal::JsonStringifier::SerializeJSObject({js_object}, {object})"),
    ];
    // Each row's label: the column between the percentages and the samples.
    let mut labels: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split("  ").find(|part| part.contains("JsonStringifier")))
        .map(str::trim)
        .collect();
    assert_eq!(labels.len(), 4, "{text}");
    assert!(labels.iter().all(|l| l.chars().count() <= 60), "{text}");
    labels.sort_unstable();
    labels.dedup();
    assert_eq!(labels.len(), 4, "two functions read the same:\n{text}");

    let id = text
        .lines()
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .expect("the header names the session");
    let wide = daemon
        .cli()
        .args(["report", id, "--wide"])
        .output()
        .unwrap();
    let wide = String::from_utf8_lossy(&wide.stdout);
    for name in &names {
        assert!(
            wide.lines().any(|l| l.ends_with(&format!("  {name}"))),
            "{name} is not whole at the end of a line:\n{wide}"
        );
    }
    // The numbers, then the name: a short name's line is not padded to the longest name.
    let short = wide
        .lines()
        .find(|l| l.ends_with("  short_one"))
        .unwrap_or_else(|| panic!("no line ends with short_one:\n{wide}"));
    assert!(short.chars().count() < 80, "{short:?}\n{wide}");
}

/// `-o` takes any file that can be written: `/dev/null`, a FIFO (each used to fail with
/// "Invalid argument (os error 22)", from emptying a file that has no length, after the
/// recording had succeeded). A file that cannot take the report is named, and the OS's reason
/// said once; so is the reason a daemon cannot be reached.
#[test]
fn reports_go_to_devices_and_fifos_and_errors_say_their_cause_once() {
    let daemon = Daemon::start();
    let stderr = |out: &std::process::Output| String::from_utf8_lossy(&out.stderr).into_owned();

    let null = daemon
        .cli()
        .args(["record", "-o", "/dev/null", "--", "true"])
        .output()
        .unwrap();
    assert!(null.status.success(), "{}", stderr(&null));

    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("report");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mkfifo only creates the FIFO.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let piped = daemon
        .cli()
        .args(["record", "-o"])
        .arg(&fifo)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(piped.status.success(), "{}", stderr(&piped));
    let text = reader.join().unwrap();
    assert!(text.contains("samples in the entire program"), "{text}");

    let full = daemon
        .cli()
        .args(["record", "-o", "/dev/full", "--", "true"])
        .output()
        .unwrap();
    assert!(!full.status.success());
    let said = stderr(&full);
    assert!(
        said.contains("cannot write the report to /dev/full: No space left on device"),
        "{said}"
    );
    assert_eq!(said.matches("(os error 28)").count(), 1, "{said}");

    let nowhere = daemon
        .cli()
        .args(["--socket"])
        .arg(dir.path().join("no.sock"))
        .arg("sessions")
        .output()
        .unwrap();
    let said = stderr(&nowhere);
    assert!(said.contains("cannot reach vmscoped at"), "{said}");
    assert_eq!(said.matches("(os error 2)").count(), 1, "{said}");
}

/// A frequency the host cannot bear is refused by the daemon before anything runs, and the
/// CLI says why: `record -F 100000` (what kernel.perf_event_max_sample_rate allows by default)
/// used to be accepted, and made 0.66 s of work take 28 s.
#[test]
fn a_frequency_above_the_ceiling_is_refused_and_the_command_never_runs() {
    let daemon = Daemon::start();
    let kernel: u32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let daemon_ceiling = 10_000;
    let (asked, words) = if kernel > daemon_ceiling {
        (kernel, "above this daemon's ceiling of 10000 Hz")
    } else {
        (kernel + 1, "above the kernel's limit")
    };
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let out = daemon
        .cli()
        .args(["record", "-F", &asked.to_string(), "--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    for expected in [
        words,
        &format!("kernel.perf_event_max_sample_rate is {kernel}"),
        "InvalidArgument",
    ] {
        assert!(said.contains(expected), "{expected:?} not in {said}");
    }
    assert!(!marker.exists(), "the command ran although refused");

    let info = daemon.cli().args(["info", "--json"]).output().unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(info["max_frequency_hz"], kernel.min(daemon_ceiling));
    assert_eq!(info["limits"]["max_frequency_hz"], daemon_ceiling);
}

/// The daemon's log, sent to a file (as the harness does, as journald or `2> log` do), is
/// plain text: no terminal colour codes around its fields.
#[test]
fn the_daemon_logs_plain_text_to_a_file() {
    let daemon = Daemon::start();
    let out = daemon
        .cli()
        .args(["record", "-o", "/dev/null", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let log = daemon.log();
    assert!(log.contains("serving vmscope.v1"), "{log}");
    assert!(log.contains("session stopping"), "{log}");
    assert!(!log.contains('\x1b'), "colour codes in the log:\n{log:?}");
}

/// A run too short for the kernel's CPU time (counted in 10 ms ticks) has samples but no
/// measurable rate: the header says so, instead of "0 hz per busy CPU (0.00 busy CPUs)".
#[test]
fn a_short_run_says_its_rate_was_not_measured() {
    let daemon = Daemon::start();
    let out = daemon
        .cli()
        .args(["record", "-o", "-", "--", "sleep", "0.2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains(" 0 hz per busy CPU"), "{text}");
    assert!(!text.contains("0.00 busy CPUs"), "{text}");
    assert!(text.contains("hz requested (not measured"), "{text}");
}

/// A program that runs for 4 ms is gone before the daemon reads its exec event from the ring
/// (tens of milliseconds later), so `/proc` no longer has its mappings: they come from what
/// the kernel recorded it mapping. Two at a time, as `vmscope fit`'s runs are; CI saw 6 of 7
/// samples `[unknown]` and the executable unknown before.
#[test]
fn a_program_that_ran_for_milliseconds_has_its_samples_named() {
    let daemon = Daemon::start();
    for _ in 0..3 {
        let children: Vec<_> = (0..2)
            .map(|_| {
                daemon
                    .cli()
                    .args(["record", "--format", "json", "--"])
                    .arg(&fixtures().cost)
                    .arg("16")
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("vmscope record")
            })
            .collect();
        for child in children {
            let report = json_report(&child.wait_with_output().unwrap());
            let executable = report["vm_executable"].as_str().unwrap();
            assert!(executable.ends_with("/cost"), "executable {executable:?}");
            let total = report["total_samples"].as_u64().unwrap();
            let rows = report["sections"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|s| s["rows"].as_array().unwrap())
                .collect::<Vec<_>>();
            let samples_of = |name: &str| {
                rows.iter()
                    .filter(|r| r["name"] == name)
                    .map(|r| r["samples"].as_u64().unwrap())
                    .sum::<u64>()
            };
            let linear = samples_of("burn_linear");
            // 4 ms at 1400 Hz: about 6 samples, a few of them in the loader and in exit.
            assert!(
                linear >= 3 && linear * 2 >= total,
                "{linear} of {total} samples in burn_linear: {rows:#?}"
            );
            let unplaced: Vec<_> = rows
                .iter()
                .filter(|r| {
                    r["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with('[') && n != "[kernel]")
                })
                .collect();
            assert!(unplaced.is_empty(), "unplaced samples: {unplaced:#?}");
        }
    }
}
