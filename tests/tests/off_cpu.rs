//! Off-CPU and wall profiles against real BPF, on a fixture whose waits are known by
//! construction and measured by the fixture itself (`tests/fixtures/offcpu.c`): a thread that
//! burns 70% and sleeps 30% in `sleeper_path > nap > nanosleep`, one that holds a mutex asleep
//! in `holder_path`, one that waits for it in `waiter_path > take_lock`, and the main thread
//! joining them. Each wait must be under its call chain within 5% of what the fixture
//! measured; in wall mode each thread's total must be its elapsed time within 5%.

use vmscope_tests::{
    Daemon, fixtures, json_report_file,
    off_cpu::{check_waits, record, within_5_percent},
    shared_tempdir,
};

#[test]
fn off_cpu_profiles_put_each_wait_under_its_call_chain() {
    let daemon = Daemon::start();
    let (report, lives) = record(&daemon, &fixtures().offcpu, &["--mode", "off-cpu"]);
    assert_eq!(report["mode"], "off-cpu");
    assert_eq!(
        report["sample_types"],
        serde_json::json!(["off_cpu_time", "off_cpu_blocks"]),
        "the main measure first"
    );
    // By frame pointers, libc's nanosleep and pthread_mutex_lock keep none: the walk goes
    // from them to nap's caller and take_lock's.
    check_waits(
        &report,
        &lives,
        &[
            ("sleeper", &["sleeper_path"]),
            ("holder", &["holder_path", "holder_rest"]),
            ("waiter", &["waiter_path"]),
        ],
    );
    let threads = report["threads"].as_array().unwrap();
    for (name, life) in &lives {
        let thread = threads
            .iter()
            .find(|t| t["tid"] == life.tid)
            .unwrap_or_else(|| panic!("no thread {name} in {threads:?}"));
        assert_eq!(
            thread["name"],
            name.as_str(),
            "named as the fixture named it"
        );
    }
    // The waiter's waits are on the mutex's futex: sleeping, in libc's lock wait.
    let off = &report["off_cpu"];
    assert_eq!(off["states"][0]["state"], "sleeping", "{}", off["states"]);
    assert_eq!(off["lost_blocks"], 0);
    let rows: Vec<&str> = off["sections"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["rows"].as_array().unwrap())
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        rows.iter().any(|r| r.contains("lll_lock_wait")),
        "rows by the innermost user frame: {rows:?}"
    );
}

#[test]
fn wall_profiles_give_each_thread_its_elapsed_time() {
    let daemon = Daemon::start();
    let (report, lives) = record(&daemon, &fixtures().offcpu, &["--mode", "wall"]);
    assert_eq!(report["sample_types"][0], "wall_time");
    let threads = report["threads"].as_array().unwrap();
    for (name, life) in &lives {
        let thread = threads.iter().find(|t| t["tid"] == life.tid).unwrap();
        let total = thread["cpu_ns"].as_u64().unwrap() + thread["off_cpu_ns"].as_u64().unwrap();
        within_5_percent(&format!("{name}'s total"), total, life.elapsed_ns);
    }
    // The sleeper burns 7 ms of its own CPU time a round: 150 rounds.
    let sleeper = threads
        .iter()
        .find(|t| t["tid"] == lives["sleeper"].tid)
        .unwrap();
    within_5_percent(
        "the sleeper's CPU time",
        sleeper["cpu_ns"].as_u64().unwrap(),
        150 * 7_000_000,
    );
    check_waits(&report, &lives, &[("sleeper", &["sleeper_path"])]);
}

#[test]
fn dwarf_stacks_unwind_waits_through_code_without_frame_pointers() {
    let daemon = Daemon::start();
    let (report, lives) = record(
        &daemon,
        &fixtures().offcpu_nofp,
        &["--mode", "off-cpu", "--call-graph", "dwarf"],
    );
    // Every frame of the chain, libc's included, from the copies and the binaries' CFI.
    check_waits(
        &report,
        &lives,
        &[
            ("sleeper", &["nap"]),
            ("holder", &["nap"]),
            ("waiter", &["take_lock"]),
        ],
    );
    check_waits(
        &report,
        &lives,
        &[
            ("sleeper", &["sleeper_path"]),
            ("holder", &["holder_path", "holder_rest"]),
            ("waiter", &["waiter_path"]),
        ],
    );
    let ends = report["stack_ends"].as_array().unwrap();
    assert!(
        ends.is_empty(),
        "no samples, so no sample's stack: {ends:?}"
    );
}

/// The JVM's collections, from its performance data file read every 10 ms with no JVM flag:
/// a mutator that stops only for the collector (`tests/fixtures/java/GcWaiter.java`: serial
/// collector, a young collection every 62 ms) spends its time off the CPU inside them, while
/// the main thread, joined on it all along, spends only the collections' share of its wait
/// there; the collector's thread is named.
#[test]
fn a_jvm_mutators_waits_for_its_collector_are_told_apart() {
    let daemon = Daemon::start();
    let dir = shared_tempdir();
    let file = dir.path().join("report.json");
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/java/GcWaiter.java");
    let out = daemon
        .cli()
        .args(["record", "--mode", "off-cpu", "--format", "json", "-o"])
        .arg(&file)
        .args([
            "--",
            "java",
            "-XX:+UseSerialGC",
            "-Xms40m",
            "-Xmx40m",
            "-Xmn24m",
        ])
        .args(["-XX:SurvivorRatio=1"])
        .arg(&fixture)
        .arg("5")
        .output()
        .expect("run vmscope record");
    let report = json_report_file(&out, &file);
    let said = String::from_utf8_lossy(&out.stdout);
    // What the JVM measured: its collections' time while its mutator ran.
    let gc_ms: u64 = said
        .lines()
        .find_map(|l| l.strip_prefix("gc_while_mutating ")?.parse().ok())
        .filter(|&ms| ms > 0)
        .unwrap_or_else(|| panic!("the fixture said: {said}"));

    let off = &report["off_cpu"]["threads"];
    let thread = |name: &str| {
        off.as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no thread {name} in {off}"))
    };
    let in_gcs = |t: &serde_json::Value| -> u64 {
        t["during"]
            .as_array()
            .map_or(0, |d| d.iter().map(|i| i["ns"].as_u64().unwrap()).sum())
    };
    let mutator = thread("mutator");
    let mutator_in_gcs = in_gcs(mutator);
    let mutator_off = mutator["off_cpu_ns"].as_u64().unwrap();
    eprintln!(
        "mutator: {mutator_off} ns off the CPU, {mutator_in_gcs} ns inside collections; the \
         JVM counts {gc_ms} ms of collections while it ran"
    );
    // Stopped for each collection from its begin to its end: its time inside them is theirs,
    // less what the reads every 10 ms miss (a collection seen only under way counts up to
    // the read), within the clock's uncertainty and the JVM's rounding to milliseconds.
    let gc_ns = gc_ms * 1_000_000;
    assert!(
        mutator_in_gcs as f64 >= 0.8 * gc_ns as f64
            && mutator_in_gcs <= gc_ns + gc_ns / 10 + 5_000_000,
        "the mutator's {mutator_in_gcs} ns inside collections against the JVM's {gc_ms} ms"
    );
    // The launcher's thread waits in `join` all along: only the collections' share of that
    // is theirs.
    let launcher = off
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == t["pid"])
        .expect("the launcher's thread");
    let launcher_off = launcher["off_cpu_ns"].as_u64().unwrap();
    assert!(
        (in_gcs(launcher) as f64) < 0.5 * launcher_off as f64,
        "the launcher's {} ns inside collections of its {launcher_off} ns off the CPU",
        in_gcs(launcher)
    );
    // The serial collector collects in the VM thread.
    thread("VM Thread");
    let kinds: Vec<&str> = mutator["during"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"scavenge"), "{kinds:?}");
}
