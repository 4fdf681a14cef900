//! The `jitvm` binary: results in every mode, and its code log checked against the rules.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::{jitvm, read_events, run, run_logged, summary};
use jitvm::benchmarks;
use vmscope_proto::v1::{CodeKind, code_map_event::Event};

fn expected(workload: &str) -> i64 {
    match workload {
        "fib" => benchmarks::FIB_25,
        "sieve" => benchmarks::SIEVE_COUNT,
        "loop" => benchmarks::loop_reference(),
        "inline" => benchmarks::inline_reference(),
        "poly" => benchmarks::poly_reference(),
        w => panic!("{w}"),
    }
}

#[test]
fn results_are_right_in_every_mode() {
    // The references are Rust computations (the interpreter agrees, see the unit tests).
    assert_eq!(benchmarks::fib_reference(25), 242_785);
    let modes: [&[&str]; 3] = [&[], &["--opt"], &["--compact-every-ms", "1"]];
    std::thread::scope(|s| {
        let mut runs = Vec::new();
        for w in ["fib", "sieve", "loop", "inline", "poly"] {
            for mode in modes {
                runs.push((w, mode, s.spawn(move || run(w, 0.4, mode))));
            }
        }
        for (w, mode, r) in runs {
            let s = r.join().unwrap();
            let want = expected(w);
            assert_eq!(s.num("mismatches"), 0, "{w} {mode:?}");
            assert_eq!(s.num("result"), want, "{w} {mode:?}");
            assert!(s.num("iterations") >= 1);
            assert_eq!(
                s.num("checksum"),
                want.wrapping_mul(s.num("iterations")),
                "{w} {mode:?}"
            );
            if mode.contains(&"--compact-every-ms") {
                assert!(s.num("compactions") > 0, "{w} {mode:?}: no compaction");
            }
        }
    });
}

#[test]
fn forced_compactions_move_code_that_still_runs_right() {
    // fib and the sieve in turn, compacting every millisecond: the methods of the other half
    // go cold, are freed, and the survivors move down under running benchmarks.
    let (s, h, _) = run_logged("tiny", 1.0, &["--compact-every-ms", "1"]);
    assert_eq!(s.num("mismatches"), 0);
    assert!(s.num("compactions") > 20, "{:?}", s.0);
    assert!(
        h.moves > 0 && h.frees > 0,
        "moves {} frees {}",
        h.moves,
        h.frees
    );
    assert_eq!(s.num("moves"), h.moves as i64);
    assert_eq!(s.num("frees"), h.frees as i64);
    let fib_moved = h.named("SmallInteger>>benchFib").any(|p| p.moves > 0);
    let sieve_moved = h.named("SmallInteger>>benchmark").any(|p| p.moves > 0);
    assert!(fib_moved || sieve_moved, "a benchmark method moved");
}

#[test]
fn compaction_workload_log_reuses_hot_addresses_for_decoys() {
    let (s, h, events) = run_logged("compact", 1.5, &[]);
    assert_eq!(s.num("mismatches"), 0);
    assert!(s.num("compactions") > 20, "{:?}", s.0);
    assert!(h.pid > 0);
    assert!(h.moves > 0 && h.frees > 0);
    assert!(s.num("decoys") > 0);
    let reused = h.decoys_on_method_starts();
    assert!(!reused.is_empty(), "no decoy at an old method address");
    // Every kind of code is published.
    let kinds: Vec<CodeKind> = h.placements.iter().map(|p| p.kind()).collect();
    for k in [
        CodeKind::Trampoline,
        CodeKind::Enilopmart,
        CodeKind::Method,
        CodeKind::ClosedPic,
        CodeKind::OpenPic,
    ] {
        assert!(kinds.contains(&k), "no {k:?}");
    }
    for name in [
        "ceSendMissTrampoline",
        "ceEnterJITMethod",
        "ceNewArrayTrampoline",
    ] {
        assert_eq!(h.named(name).count(), 1, "{name}");
    }
    // The zone is announced after each compaction.
    assert!(h.zones as i64 > s.num("compactions"));
    assert!(events.len() > h.loads + h.moves + h.frees);
}

#[test]
fn optimised_run_maps_inlined_heavy_and_light() {
    for args in [&[][..], &["--opt"][..]] {
        let (s, h, _) = run_logged("inline", 0.5, args);
        assert_eq!(s.num("mismatches"), 0);
        let runs: Vec<_> = h.named("Inline>>run").collect();
        let optimised = runs
            .iter()
            .find(|p| p.entry.pc_map.iter().any(|m| !m.inlined.is_empty()))
            .unwrap_or_else(|| panic!("{args:?}: no optimised Inline>>run"));
        for callee in ["Inline>>heavy", "Inline>>light"] {
            let frames: Vec<_> = optimised
                .entry
                .pc_map
                .iter()
                .filter(|m| m.inlined.last().is_some_and(|f| f.method == callee))
                .collect();
            assert!(frames.len() >= 4, "{callee}: {frames:?}");
            assert!(
                frames.iter().any(|m| m.inlined[0].bcpc == 0),
                "{callee} starts at bcpc 0"
            );
        }
        if args.is_empty() {
            // Warm-up: baseline first, then replaced and freed.
            assert!(runs.len() >= 2);
            assert!(runs[0].entry.pc_map.iter().all(|m| m.inlined.is_empty()));
            // The optimised code is loaded, then the baseline code, which no longer runs, freed.
            assert!(optimised.from <= runs[0].until && runs[0].until < u64::MAX);
            assert!(s.num("optimised") >= 1);
        } else {
            assert!(
                runs.iter()
                    .all(|p| p.entry.pc_map.iter().any(|m| !m.inlined.is_empty()))
            );
        }
    }
}

#[test]
fn poly_publishes_closed_and_open_pics() {
    let (s, h, _) = run_logged("poly", 0.3, &["--hot-calls", "0"]);
    assert_eq!(s.num("mismatches"), 0);
    let closed: Vec<_> = h
        .placements
        .iter()
        .filter(|p| p.kind() == CodeKind::ClosedPic)
        .collect();
    let open: Vec<_> = h
        .placements
        .iter()
        .filter(|p| p.kind() == CodeKind::OpenPic)
        .collect();
    assert!(
        closed
            .iter()
            .all(|p| p.entry.name == "area" && (2..=6).contains(&p.entry.cases.len()))
    );
    assert!(
        closed.iter().any(|p| p.entry.cases.len() == 3),
        "the 3-class site"
    );
    assert!(
        closed.iter().any(|p| p.entry.cases.len() == 6),
        "the 8-class site before it goes open"
    );
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].entry.name, "area");
    let shapes: Vec<String> = closed
        .iter()
        .flat_map(|p| p.entry.cases.iter().map(|c| c.class_name.clone()))
        .collect();
    assert!(
        shapes
            .iter()
            .all(|c| benchmarks::SHAPES.contains(&c.as_str())),
        "{shapes:?}"
    );
}

#[test]
fn loop_listing_shows_the_loop_span_and_the_map_covers_it() {
    let out = jitvm().args(["loop", "--listing"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("Loop>>hot"), "{text}");
    let insns: Vec<(u32, String)> = text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let (pc, rest) = l.trim().split_once("  ")?;
            Some((pc.parse().ok()?, rest.trim().to_owned()))
        })
        .collect();
    let (back_pc, head) = insns
        .iter()
        .find_map(|(pc, i)| {
            let t = i.strip_suffix("   (back jump)")?.strip_prefix("jump ")?;
            Some((*pc, t.parse::<u32>().ok()?))
        })
        .expect("a back jump");
    let last = insns.last().unwrap().0;
    assert!(
        head < 30 && last - back_pc < 20,
        "span {head}..={back_pc} of 0..={last}"
    );

    let (_, h, _) = run_logged("loop", 0.2, &[]);
    let hot = h.named("Loop>>hot").next().expect("Loop>>hot loaded");
    let map: Vec<u32> = hot.entry.pc_map.iter().map(|m| m.bcpc).collect();
    assert!(map.contains(&back_pc), "back jump mapped: {map:?}");
    assert!(map.contains(&head), "loop head mapped: {map:?}");
    assert!(
        map.iter().any(|&b| b > head && b < back_pc),
        "loop body mapped: {map:?}"
    );
}

#[test]
fn file_publication_is_mapped_and_matches_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("own.log");
    let mut child = jitvm()
        .args(["compact", "--seconds", "1", "--publish", "file", "--ready"])
        .arg("--codemap-dir")
        .arg(dir.path())
        .arg("--code-log")
        .arg(&log)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = child.id();
    let path = dir.path().join(format!("vmscope-{pid}.codemap"));
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mapping = maps
        .lines()
        .find(|l| l.ends_with(path.to_str().unwrap()))
        .unwrap_or_else(|| panic!("{} not in maps:\n{maps}", path.display()));
    assert!(
        mapping.split_whitespace().nth(1).unwrap().contains('x'),
        "{mapping}"
    );
    // Read while it grows: whole records, at most the last one torn.
    let growing = std::fs::read(&path).unwrap();
    let (partial, _) = jitvm::codemap_file::decode(&growing).unwrap();
    assert!(!partial.is_empty());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    // The file also gets a Sync every 20 ms (it tells the daemon the map is up to date); the
    // log does not.
    let mut file = read_events(&path);
    file.retain(|e| !matches!(e.event, Some(Event::Sync(_))));
    assert_eq!(
        file,
        read_events(&log),
        "the file and the code log hold the same events"
    );
    assert_eq!(file[..partial.len()], partial[..]);
    jitvm::codelog::replay(&file).unwrap();
}

#[test]
fn without_a_daemon_it_runs_unprofiled_and_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = jitvm()
        .args(["fib", "--seconds", "0.3"])
        .env("VMSCOPE_SOCKET", dir.path().join("none.sock"))
        .output()
        .unwrap();
    let s = summary(&out);
    assert_eq!(s.num("result"), benchmarks::FIB_25);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no vmscope daemon") && stderr.contains("unprofiled"),
        "{stderr}"
    );
}
