//! The process table's identity rules, with this test process standing in for a process the
//! table knew under another start time (one that held the pid before).

use std::collections::HashSet;

use super::*;
use crate::vocab::ExecRanges;

fn table() -> ProcessTable {
    ProcessTable::new(Arc::new(Modules::new()))
}

fn me() -> u32 {
    std::process::id()
}

/// The table knows this process, but under an earlier start time: as if it had known the pid's
/// previous owner. Returns the real start time.
fn known_as_predecessor(table: &mut ProcessTable, now_ns: u64) -> u64 {
    let real = table
        .observe(me(), now_ns)
        .start_time
        .expect("own start time");
    table.processes.get_mut(&me()).unwrap().start_time = Some(real - 1);
    real
}

#[test]
fn a_refresh_that_finds_another_process_ends_the_known_one_without_replacing_it() {
    let mut table = table();
    let now = sys::monotonic_ns();
    let real = known_as_predecessor(&mut table, now);
    table.refresh_if_older(me(), 0, now + 1);
    let known = table.get(me()).unwrap();
    assert_eq!(known.start_time, Some(real - 1), "not replaced");
    assert!(known.gone);
    assert_eq!(known.exited_at_ns, Some(now + 1));
    assert_eq!(table.counters().pid_reuses, 1);

    // Samples stamped before its end are still its own; later ones read the pid afresh.
    table.sampled(me(), now, now + 2);
    assert_eq!(table.get(me()).unwrap().start_time, Some(real - 1));
    table.sampled(me(), now + 2, now + 3);
    let fresh = table.get(me()).unwrap();
    assert_eq!(fresh.start_time, Some(real));
    assert!(!fresh.gone && fresh.exited_at_ns.is_none());
    assert_eq!(table.counters().pid_reuses, 1, "one reuse, counted once");
}

#[test]
fn a_miss_never_places_a_sample_in_another_process_mappings() {
    let code = me as fn() -> u32 as usize as u64;
    let mut table = table();
    let now = sys::monotonic_ns();
    known_as_predecessor(&mut table, now);
    // The predecessor mapped nothing here: its mappings are read again (after the interval),
    // and are this process's, whose code is there.
    table.processes.get_mut(&me()).unwrap().mappings.clear();
    let later = now + 2 * MIN_REFRESH_INTERVAL_NS;
    // Another process's mappings vouch for nothing of the known one's code.
    assert!(!table.executable(me(), later).contains(code, code + 1));
    assert_eq!(
        table.normalize(me(), code, later),
        Location::Unmapped(UnmappedReason::ProcessGone)
    );
    assert!(table.get(me()).unwrap().gone);
    assert_eq!(table.counters().pid_reuses, 1);
}

#[test]
fn a_new_target_is_read_afresh_when_the_table_knew_another_process() {
    let mut table = table();
    let now = sys::monotonic_ns();
    let real = known_as_predecessor(&mut table, now);
    assert_eq!(table.identify(me(), now + 1).start_time, Some(real));
    assert_eq!(table.counters().pid_reuses, 1);
    // The same process is kept as known.
    let reads = table.counters().maps_reads;
    table.identify(me(), now + 2);
    assert_eq!(table.counters().maps_reads, reads);
    // One that exited while a leader runs under its pid now is another, whatever its start time
    // (a successor within the same clock tick).
    table.exited(me(), now + 3);
    assert_eq!(table.identify(me(), now + 4).exited_at_ns, None);
    assert_eq!(table.counters().maps_reads, reads + 1);
}

#[test]
fn an_exit_ends_only_a_process_read_before_it() {
    let mut table = table();
    let now = sys::monotonic_ns();
    table.observe(me(), now);
    // Read after the exit: whatever holds the pid after it.
    table.exited(me(), now - 1);
    assert!(!table.get(me()).unwrap().gone);
    table.exited(me(), now + 1);
    let known = table.get(me()).unwrap();
    assert!(known.gone && known.exited_at_ns == Some(now + 1));
    // A later sample of a running process under the pid reads it afresh.
    table.sampled(me(), now + 2, now + 3);
    assert!(!table.get(me()).unwrap().gone);
}

/// Samples of a process whose leader exited, stamped before a look at the pid found it still
/// the exiting process's, are its own without another look: a batch of its threads' samples
/// costs one read of the pid, not one per sample.
#[test]
fn an_exiting_process_is_looked_at_once_per_batch() {
    let mut table = table();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    let zombie = || {
        sys::read_proc(pid, "stat")
            .ok()
            .and_then(|t| stat::parse_stat(&t).ok())
            .is_some_and(|s| s.is_zombie())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !zombie() {
        assert!(std::time::Instant::now() < deadline, "no zombie");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let now = sys::monotonic_ns();
    let start_time = table.observe(pid, now).start_time;
    table.exited(pid, now + 1);
    // The batch up to now+3: the pid is still the zombie's.
    table.sampled(pid, now + 2, now + 3);
    let known = table.get(pid).unwrap();
    assert_eq!(
        (known.start_time, known.exiting_checked_ns),
        (start_time, now + 3)
    );
    child.wait().unwrap();
    // Stamped before that look: not looked at again.
    table.sampled(pid, now + 3, now + 4);
    assert_eq!(table.get(pid).unwrap().exiting_checked_ns, now + 3);
    // A later batch looks again (and finds the pid free).
    table.sampled(pid, now + 4, now + 5);
    let known = table.get(pid).unwrap();
    assert_eq!(
        (known.start_time, known.exiting_checked_ns),
        (start_time, now + 5)
    );
}

/// A live process keeps the binaries it maps; a dead one keeps them until every sample it
/// took has been read, then not even if its pid comes back.
#[test]
fn a_dead_process_holds_its_binaries_until_its_samples_are_read() {
    let modules = Arc::new(Modules::new());
    let mut table = ProcessTable::new(modules.clone());
    let me = std::process::id();
    table.observe(me, 100);
    let mine = modules.len();
    assert!(mine > 0, "this test binary, at least");
    let in_use = |table: &mut ProcessTable, now, settled, alive: bool| {
        let mut keep = HashSet::new();
        let unsettled = table.modules_in_use(now, settled, |_| alive, &mut keep);
        (keep.len(), unsettled)
    };
    assert_eq!(in_use(&mut table, 1_000, 900, true), (mine, false));
    // Found dead at 2000; samples are read up to 1500 only.
    assert_eq!(in_use(&mut table, 2_000, 1_500, false), (mine, true));
    assert_eq!(table.counters().exits_noticed, 1);
    assert_eq!(in_use(&mut table, 2_500, 1_999, false), (mine, true));
    // Read past its death: nothing of it is needed any more.
    assert_eq!(in_use(&mut table, 3_000, 2_000, false), (0, false));
    // Its pid reused: still the dead process's entry, whose binaries are gone.
    assert_eq!(in_use(&mut table, 4_000, 3_000, true), (0, false));
    assert_eq!(table.counters().exits_noticed, 1, "noticed once");
    // Read afresh (an exec, a forget and a new sample): alive again.
    table.forget(me);
    table.observe(me, 5_000);
    assert_eq!(in_use(&mut table, 5_000, 4_000, true), (mine, false));
}

/// New code can show first as a caller (CPython's trampolines run a few instructions per
/// call): a caller outside every known mapping reads the mappings again. Garbage that no read
/// maps backs the reads off, up to one a second; a read that finds new code resets them.
#[test]
fn callers_outside_every_mapping_read_the_mappings_again_with_back_off() {
    let mut table = table();
    let t0 = sys::monotonic_ns();
    let code = me as fn() -> u32 as usize as u64;
    table.observe(me(), t0);
    // As if the code had been mapped after the table read the process.
    table.processes.get_mut(&me()).unwrap().mappings.clear();
    let reads = |table: &ProcessTable| table.counters().caller_refreshes;
    assert_eq!(
        table.normalize_caller(me(), code, t0 + 1),
        Location::Unmapped(UnmappedReason::NoMapping),
        "too soon after the last read"
    );
    assert_eq!(reads(&table), 0);
    let t1 = t0 + MIN_REFRESH_INTERVAL_NS;
    assert!(matches!(
        table.normalize_caller(me(), code, t1),
        Location::File { .. }
    ));
    assert_eq!(reads(&table), 1);

    // Garbage a frame-pointer walk reads: a small integer, an address in the stack (a data
    // mapping). Never a read.
    let on_stack = 0u64;
    let data = &on_stack as *const u64 as u64;
    let later = t1 + MAX_CALLER_REFRESH_INTERVAL_NS;
    assert!(!table.refresh_for_caller(me(), 0x10, later));
    assert!(!table.refresh_for_caller(me(), data, later));
    assert_eq!(reads(&table), 1);

    // An address no mapping holds: each read that misses it doubles the wait for the next.
    let garbage = 0x1000_0000_0000;
    let mut at = t1;
    let mut interval = MIN_REFRESH_INTERVAL_NS;
    for expected_reads in 2..=9 {
        assert!(!table.refresh_for_caller(me(), garbage, at + interval - 1));
        assert!(!table.refresh_for_caller(me(), garbage, at + interval));
        assert_eq!(reads(&table), expected_reads);
        at += interval;
        interval = (interval * 2).min(MAX_CALLER_REFRESH_INTERVAL_NS);
    }
    assert_eq!(interval, MAX_CALLER_REFRESH_INTERVAL_NS);
    assert_eq!(
        table.get(me()).unwrap().caller_refresh_ns,
        MAX_CALLER_REFRESH_INTERVAL_NS
    );
    // New code found by such a read: back to the shortest wait.
    table.processes.get_mut(&me()).unwrap().mappings.clear();
    assert!(table.refresh_for_caller(me(), code, at + interval));
    assert_eq!(
        table.get(me()).unwrap().caller_refresh_ns,
        MIN_REFRESH_INTERVAL_NS
    );
}

/// A process gone before its first read (reaped here) is known by what the kernel recorded it
/// mapping: its main executable placed, opened by path and checked by device and inode, its
/// start time the one the table knew before its exec, its name the exec's.
#[test]
fn a_process_gone_before_it_was_read_is_placed_by_its_recorded_mappings() {
    use vmscope_parse::perf_record::{Mmap, RecordId};
    let mut child = std::process::Command::new("/bin/sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut table = table();
    let now = sys::monotonic_ns();
    let start_time = table.observe(pid, now).start_time.expect("alive");
    child.kill().unwrap();
    child.wait().unwrap();

    let exe = std::fs::canonicalize("/bin/true").unwrap();
    let meta = std::fs::metadata(&exe).unwrap();
    let id = FileId::from_metadata(&meta);
    let at = |t: u64| RecordId {
        pid,
        tid: pid,
        time_ns: now + t,
    };
    let mmap = |start: u64, path: &str, file: Option<FileId>, t: u64| {
        Record::Mmap(
            Mmap {
                pid,
                start,
                len: 0x1000,
                pgoff: 0x2000,
                file: file.map(|f| (f.dev_major, f.dev_minor, f.inode)),
                exec: true,
                filename: path.into(),
            },
            at(t),
        )
    };
    // As if it had exec'd /bin/true after the table read it.
    table.record(
        vec![
            Record::Comm {
                pid,
                tid: pid,
                name: "true".into(),
                exec: true,
                id: at(1),
            },
            mmap(0x10_0000, exe.to_str().unwrap(), Some(id), 2),
            mmap(0x20_0000, "//anon", None, 3),
        ],
        now + 4,
    );
    let process = table.exec(pid, now + 5, "true");
    assert!(process.gone && process.from_records);
    assert_eq!(process.start_time, Some(start_time));
    assert_eq!(process.command, "true");
    assert_eq!(process.executable.as_deref(), Some(exe.as_path()));
    assert!(process.has_anonymous_code);
    let Location::File {
        offset,
        main_executable,
        ..
    } = table.normalize(pid, 0x10_0010, now + 6)
    else {
        panic!("not placed in its executable");
    };
    assert_eq!((offset, main_executable), (0x2010, true));
    assert!(table.get(pid).unwrap().is_anonymous_code(0x20_0010));
    assert_eq!(
        table.normalize(pid, 0x30_0000, now + 7),
        Location::Unmapped(UnmappedReason::ProcessGone)
    );
    assert_eq!(table.counters().maps_from_records, 1);
}
