//! Off-CPU and wall profiles against real BPF, on a fixture whose waits are known by
//! construction and measured by the fixture itself (`tests/fixtures/offcpu.c`): a thread that
//! burns 70% and sleeps 30% in `sleeper_path > nap > nanosleep`, one that holds a mutex asleep
//! in `holder_path`, one that waits for it in `waiter_path > take_lock`, and the main thread
//! joining them. Each wait must be under its call chain within 5% of what the fixture
//! measured; in wall mode each thread's total must be its elapsed time within 5%.

use vmscope_tests::{
    Daemon, fixtures,
    off_cpu::{check_waits, record, within_5_percent},
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
