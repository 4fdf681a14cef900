//! `vmscope heap`: class histograms of a real JVM, checked against what the program holds by
//! construction and against `jmap -histo:live` (the JDK's own client of the same count), the
//! growth between two of them, and the refusals that leave a JVM alone.
//!
//! The fixture is tests/fixtures/java/Leaky.java: 123,457 `Leaky` instances held, garbage
//! allocated beside them (of which the last 100 `Leaky$Garbage` stay reachable), and 1,000 more
//! `Leaky` on request.

use std::{
    io::{BufRead, BufReader},
    os::unix::process::CommandExt as _,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use vmscope_tests::{
    Conversation, Daemon, NOBODY, grpcio_facts,
    java::{clean_jvm, java, java_fixture},
};

/// Leaky.java running, its input and output held.
struct Leaky(Conversation);

impl Leaky {
    fn start(flags: &[&str]) -> Leaky {
        let mut leaky = Leaky(Conversation::spawn(
            Command::new(java())
                .args(flags)
                .arg(java_fixture("Leaky.java")),
        ));
        assert_eq!(leaky.line(), "ready 123457");
        leaky
    }

    fn pid(&self) -> u32 {
        self.0.child.id()
    }

    fn line(&mut self) -> String {
        self.0.line()
    }

    fn more(&mut self, n: u32) -> String {
        self.line_after(&format!("more {n}"))
    }

    /// Sends `command` and returns the fixture's answer.
    fn line_after(&mut self, command: &str) -> String {
        self.0.say(command);
        self.line()
    }

    fn alive(&mut self) -> bool {
        self.0.child.try_wait().expect("wait").is_none()
    }
}

impl Drop for Leaky {
    fn drop(&mut self) {
        self.0.stop();
        clean_jvm(self.0.child.id());
    }
}

/// Instances and bytes of `class` in a histogram's JSON.
fn class_of(histogram: &serde_json::Value, class: &str) -> (u64, u64) {
    histogram["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .find(|c| c["name"] == class)
        .map(|c| {
            (
                c["instances"].as_u64().unwrap(),
                c["bytes"].as_u64().unwrap(),
            )
        })
        .unwrap_or_else(|| panic!("no {class} in {histogram}"))
}

/// `class`'s row of `jmap -histo:live PID`: instances and bytes.
fn jmap_row(pid: u32, class: &str) -> (u64, u64) {
    let out = Command::new("jmap")
        .args(["-histo:live", &pid.to_string()])
        .output()
        .expect("run jmap");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "jmap: {text}");
    text.lines()
        .find_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            (words.len() >= 4 && words[3] == class)
                .then(|| (words[1].parse().unwrap(), words[2].parse().unwrap()))
        })
        .unwrap_or_else(|| panic!("no {class} row in jmap's histogram:\n{text}"))
}

#[test]
fn a_histogram_counts_what_the_program_holds_as_jmap_does_and_growth_shows_what_it_added() {
    let daemon = Daemon::start();
    let mut leaky = Leaky::start(&[]);
    let pid = leaky.pid().to_string();

    let first = daemon.heap_json(&["--pid", &pid]);
    let histogram = &first["histogram"];
    let (instances, bytes) = class_of(histogram, "Leaky");
    assert_eq!(instances, 123_457, "{histogram}");
    assert_eq!(histogram["live"], true);
    // Only the reachable garbage is counted: the ring's 100 (101 with the one being stored).
    let (garbage, _) = class_of(histogram, "Leaky$Garbage");
    assert!((100..=101).contains(&garbage), "{garbage} Leaky$Garbage");
    let pause_ms = histogram["pause"]["secs"].as_f64().unwrap() * 1e3
        + histogram["pause"]["nanos"].as_f64().unwrap() / 1e6;
    eprintln!(
        "histogram of {} bytes in {} classes: the JVM stopped {pause_ms:.1} ms",
        histogram["total_bytes"],
        histogram["classes"].as_array().unwrap().len()
    );
    assert!(
        pause_ms > 0.0,
        "the safepoint time is the JVM's: {histogram}"
    );
    // jmap asks the same JVM the same question (after ours): the same counts.
    assert_eq!(jmap_row(leaky.pid(), "Leaky"), (instances, bytes));

    assert_eq!(leaky.more(1_000), "added 124457");
    let id = first["histogram"]["id"].as_u64().unwrap().to_string();
    let second = daemon.heap_json(&["--pid", &pid, "--since", &id]);
    let growth = &second["growth"];
    let top = &growth["classes"][0];
    assert_eq!(top["name"], "Leaky", "the top growth: {growth}");
    assert_eq!(top["instances"], serde_json::json!([123_457, 124_457]));
    assert_eq!(
        top["bytes"][1].as_u64().unwrap() - top["bytes"][0].as_u64().unwrap(),
        bytes / 123_457 * 1_000
    );

    // The text report of two kept histograms: growth first, Leaky on top.
    let second_id = second["histogram"]["id"].as_u64().unwrap().to_string();
    let out = daemon
        .cli()
        .args(["heap", "--id", &second_id, "--since", &id, "--top", "3"])
        .output()
        .expect("run vmscope heap");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let first_growth = text
        .lines()
        .skip_while(|l| !l.contains("INSTANCES BEFORE -> AFTER"))
        .nth(1)
        .unwrap_or_else(|| panic!("no growth rows:\n{text}"));
    assert!(
        first_growth.contains("+1,000") && first_growth.ends_with("  Leaky"),
        "{text}"
    );

    // Every object, with no GC: the live ones at least, and the histogram says it is not live.
    let all = daemon.heap_json(&["--pid", &pid, "--all"]);
    assert_eq!(all["histogram"]["live"], false);
    assert!(class_of(&all["histogram"], "Leaky").0 >= 124_457, "{all}");

    // Another user sees none of root's histograms, as if they never were.
    let out = daemon
        .cli()
        .args(["heap", "--id", &second_id])
        .uid(NOBODY)
        .output()
        .expect("run vmscope heap as nobody");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("no heap histogram {second_id} of yours")),
        "{stderr}"
    );
    assert!(leaky.alive());
}

/// Heap assertions for CI: true while the objects are held, false once they are let go and
/// the full GC before the count collected them, and the other way round; growth since an
/// earlier histogram; a typo is not a silent pass.
#[test]
fn heap_assertions_follow_what_the_program_holds() {
    let daemon = Daemon::start();
    let mut leaky = Leaky::start(&[]);
    let pid = leaky.pid().to_string();
    let (code, out) = daemon.check(&[
        "--pid",
        &pid,
        "--heap",
        "Leaky: count == 123457",
        "--heap",
        "Leaky: count > 0",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("ok: Leaky: 123457 instances, asked == 123457"),
        "{out}"
    );
    let (code, out) = daemon.check(&["--pid", &pid, "--heap", "Leaky: count == 0"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAILED: Leaky: 123457 instances, asked == 0"),
        "{out}"
    );
    let first = daemon.heap_json(&["--pid", &pid])["histogram"]["id"].to_string();

    assert_eq!(leaky.more(1_000), "added 124457");
    let (code, out) = daemon.check(&[
        "--pid",
        &pid,
        "--since",
        &first,
        "--heap",
        "Leaky: count growth <= 0",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("+1000 instances since histogram"), "{out}");

    assert_eq!(leaky.line_after("free"), "freed");
    let (code, out) = daemon.check(&[
        "--pid",
        &pid,
        "--heap",
        "Leaky: count == 0",
        "--heap",
        "Leaky: count > 0",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("ok: Leaky: 0 instances (no such class in the histogram"),
        "{out}"
    );
    assert!(out.contains("FAILED: Leaky: 0 instances"), "{out}");
    let (code, out) = daemon.check(&["--pid", &pid, "--heap", "Leaky: count growth == 0"]);
    assert_eq!(code, 2, "growth needs --since: {out}");
    assert!(out.contains("give --since"), "{out}");
    let (code, out) = daemon.check(&["--pid", &pid, "--heap", "Leaky count == 0"]);
    assert_eq!(code, 2, "a malformed assertion cannot be checked: {out}");
    assert!(out.contains("e.g. 'Leaky: count == 0'"), "{out}");
}

/// `vmscope record --heap`: a histogram before the recording and one after, and what grew
/// in between after the report; here the 1,000 `Leaky` added while it recorded.
#[test]
fn record_heap_shows_what_grew_while_it_recorded() {
    let daemon = Daemon::start();
    let mut leaky = Leaky::start(&[]);
    let mut record = daemon
        .cli()
        .args(["record", "--heap", "--duration", "2", "--pid"])
        .arg(leaky.pid().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vmscope record");
    // The first histogram is taken before the session starts, which stderr then says.
    let mut stderr = BufReader::new(record.stderr.take().expect("stderr"));
    let mut said = String::new();
    while !said.contains("recording") {
        said.clear();
        let read = stderr.read_line(&mut said).expect("vmscope's stderr");
        assert!(read > 0, "vmscope record ended before recording");
    }
    assert_eq!(leaky.more(1_000), "added 124457");
    let out = record.wait_with_output().expect("vmscope record");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    let profile_end = report
        .find("Heap histogram")
        .unwrap_or_else(|| panic!("{report}"));
    let heap = &report[profile_end..];
    let first_growth = heap
        .lines()
        .skip_while(|l| !l.contains("INSTANCES BEFORE -> AFTER"))
        .nth(1)
        .unwrap_or_else(|| panic!("no growth rows:\n{report}"));
    assert!(
        first_growth.contains("+1,000") && first_growth.contains("123,457 -> 124,457"),
        "{heap}"
    );
    assert!(
        report[..profile_end].contains("samples"),
        "the report comes first: {report}"
    );
}

/// Runs `vmscope heap --pid PID` as `uid` and returns its failure's message, checking that it
/// failed within `within`.
fn refused(daemon: &Daemon, pid: u32, uid: u32, within: Duration) -> String {
    let start = Instant::now();
    let out = daemon
        .cli()
        .args(["heap", "--pid", &pid.to_string(), "--timeout", "20"])
        .uid(uid)
        .output()
        .expect("run vmscope heap");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "answered: {stderr}");
    assert!(
        start.elapsed() < within,
        "refused after {:?}: {stderr}",
        start.elapsed()
    );
    stderr
}

#[test]
fn a_jvm_that_cannot_or_may_not_answer_is_refused_at_once_and_left_alone() {
    let daemon = Daemon::start();
    let mut closed = Leaky::start(&["-XX:+DisableAttachMechanism"]);
    let quick = Duration::from_secs(5);
    let stderr = refused(&daemon, closed.pid(), 0, quick);
    assert!(stderr.contains("DisableAttachMechanism"), "{stderr}");
    assert!(stderr.contains("FailedPrecondition"), "{stderr}");
    assert!(closed.alive(), "the JVM was left alone");

    // Root's JVM, asked by another user: refused before anything is sent to it.
    let mut roots = Leaky::start(&[]);
    let stderr = refused(&daemon, roots.pid(), NOBODY, quick);
    assert!(stderr.contains("PermissionDenied"), "{stderr}");
    assert!(
        stderr.contains("may only ask your own processes"),
        "{stderr}"
    );
    assert!(
        !std::path::Path::new(&format!("/tmp/.java_pid{}", roots.pid())).exists(),
        "the JVM was never asked: its attach listener's socket is not there"
    );
    assert!(roots.alive());

    // Not a JVM: never signalled (SIGQUIT would kill it).
    let mut sleeper = Command::new("sleep").arg("30").spawn().expect("sleep");
    let stderr = refused(&daemon, sleeper.id(), 0, quick);
    assert!(stderr.contains("not a HotSpot JVM"), "{stderr}");
    assert!(sleeper.try_wait().unwrap().is_none(), "sleep still runs");
    let _ = sleeper.kill();
    let _ = sleeper.wait();

    // Each refusal is counted, and nothing was taken.
    let info = daemon
        .cli()
        .args(["info", "--json"])
        .output()
        .expect("run vmscope info");
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).expect("info's JSON");
    assert_eq!(info["counters"]["heap_histograms_refused"], 3, "{info}");
    assert_eq!(info["counters"]["heap_histograms_taken"], 0, "{info}");
}

/// Python's grpcio, with the daemon's reflection alone, takes a histogram and gets it back.
#[test]
fn grpcio_takes_a_heap_histogram_and_gets_it_back_by_its_id() {
    let daemon = Daemon::start();
    let leaky = Leaky::start(&[]);
    let facts = grpcio_facts("heap", &daemon.socket, leaky.pid());
    assert_eq!(facts["classes"]["Leaky"][0], 123_457, "{facts}");
    assert_eq!(
        facts["same"], true,
        "GetHeapHistogram returns what was taken: {facts}"
    );
    assert_eq!(facts["live"], true);
    assert!(facts["pause_seconds"].as_f64().unwrap() > 0.0, "{facts}");
}
