//! Source lines and inlined functions of native code from DWARF, end to end: real BPF, the real
//! daemon, and a fixture (tests/fixtures/srclines.c) whose hot loop is a static inline function
//! forced inline into its caller, built `-g -O2` four ways: DWARF 4, DWARF 5, split into a
//! debuglink file, and stripped with its debug file under a `--debug-dir`. Each must give the
//! hot loop's line (found by its marker comment) in a frame marked inlined over its caller at
//! the line of the inlined call, put that line first with `--sort srcline`, and name it in
//! `go tool pprof -lines -top`.

use std::{path::Path, process::Command};

use vmscope_proto::v1::{Frame, GetDaemonInfoRequest, GetProfileRequest, Section};
use vmscope_tests::{
    Client, Daemon, Running, dump, go_pprof, json_report, record,
    srclines::{DebugInfo, marker_line, srcline_fixtures},
    stacks::dump_stacks,
};

/// The file name of a frame's source file.
fn file_name(frame: &Frame) -> &str {
    Path::new(&frame.file)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
}

/// Records the fixture of `shape` and checks everything the daemon says about its lines.
async fn check_shape(daemon: &Daemon, client: &mut Client, shape: DebugInfo) {
    let hot = marker_line("HOT-LOOP");
    let call = marker_line("INLINED-CALL");
    let binary = srcline_fixtures().binary(shape);
    let target = Running::start(Command::new(&binary).arg("30"));
    let profile = record(client, target.pid(), Some(1400), 2.5).await;
    drop(target);
    let report = format!("{shape:?}:\n{}{}", dump(&profile), dump_stacks(&profile, 5));
    assert!(profile.total_samples > 500, "the fixture ran: {report}");

    // The frames: hot_loop (inlined) at the loop's line over hot_caller at the call's line.
    let frames = &profile.frames;
    let in_loop: u64 = profile
        .stacks
        .iter()
        .filter(|s| {
            let [leaf, caller, ..] = s.frames[..] else {
                return false;
            };
            let (leaf, caller) = (&frames[leaf as usize], &frames[caller as usize]);
            leaf.name == "hot_loop"
                && leaf.inlined
                && file_name(leaf) == "srclines.c"
                && leaf.line == hot
                && caller.name == "hot_caller"
                && !caller.inlined
                && file_name(caller) == "srclines.c"
                && caller.line == call
        })
        .map(|s| s.samples)
        .sum();
    assert!(
        in_loop * 100 >= profile.total_samples * 80,
        "at least 80% of the samples in hot_loop:{hot} inlined into hot_caller:{call}, \
         {in_loop} of {}: {report}",
        profile.total_samples
    );

    // The row stays the function's (its ELF symbol); its lines say where its samples fell.
    let row = profile
        .rows
        .iter()
        .find(|r| r.name == "hot_caller")
        .unwrap_or_else(|| panic!("a hot_caller row: {report}"));
    assert_eq!(row.section(), Section::Vanilla, "{report}");
    let top = row.source_lines.first().expect("the row's lines");
    assert!(
        top.file.ends_with("/srclines.c") && top.line == hot,
        "{:?}: {report}",
        row.source_lines
    );

    // `--sort srcline`: the loop's line is the first row of the vanilla vm code.
    let session = profile.session.as_ref().expect("a session").id.to_string();
    let out = daemon
        .cli()
        .args(["report", &session, "--sort", "srcline", "--format", "json"])
        .output()
        .expect("run vmscope report");
    let json = json_report(&out);
    let vanilla = json["sections"]
        .as_array()
        .expect("sections")
        .iter()
        .find(|s| s["section"] == "vanilla")
        .expect("a vanilla section");
    let first = &vanilla["rows"][0];
    assert_eq!(first["srcline"], format!("srclines.c:{hot}"), "{vanilla:#}");
    assert_eq!(first["name"], format!("srclines.c:{hot}"), "{vanilla:#}");

    // The text call tree: each function with its line, the inlined one marked.
    let module = binary.file_name().unwrap().to_str().unwrap();
    let out = daemon
        .cli()
        .args(["report", &session, "--tree"])
        .output()
        .expect("run vmscope report --tree");
    let tree = String::from_utf8_lossy(&out.stdout);
    for expected in [
        format!("hot_loop [{module}] (inlined) srclines.c:{hot}"),
        format!("hot_caller [{module}] srclines.c:{call}"),
    ] {
        assert!(tree.contains(&expected), "{expected:?} in:\n{tree}");
    }

    // pprof: `go tool pprof -lines -top` names the loop's line first.
    let with_pprof = client
        .get_profile(GetProfileRequest {
            session_id: profile.session.as_ref().unwrap().id,
            pprof: true,
            ..Default::default()
        })
        .await
        .expect("GetProfile with pprof")
        .into_inner();
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("profile.pb.gz");
    std::fs::write(&file, &with_pprof.pprof).expect("write the pprof file");
    let top = go_pprof(&["-lines", "-top", "-nodefraction=0"], &file);
    let first_row = top
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat "))
        .nth(1)
        .unwrap_or_else(|| panic!("a -top row:\n{top}"));
    assert!(
        first_row.contains("hot_loop") && first_row.contains(&format!("srclines.c:{hot}")),
        "{shape:?}: the first row of -lines -top:\n{top}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_frames_get_their_line_and_inlined_functions_in_every_debug_info_shape() {
    let fixtures = srcline_fixtures();
    let debug_dir = fixtures.debug_dir.to_str().expect("UTF-8 path");
    let daemon = Daemon::start_with(&["--debug-dir", debug_dir]);
    let mut client = daemon.client().await;
    for shape in DebugInfo::ALL {
        check_shape(&daemon, &mut client, shape).await;
    }
    let info = client
        .get_daemon_info(GetDaemonInfoRequest {})
        .await
        .expect("daemon info")
        .into_inner();
    let counter = |name: &str| info.counters.get(name).copied().unwrap_or(0);
    // Four binaries (four build ids), two of them from debug files; libc and the loader may
    // add theirs, with their own debug files if installed.
    assert!(counter("dwarf_loaded") >= 4, "{:?}", info.counters);
    assert!(
        counter("dwarf_from_debug_files") >= 2,
        "{:?}",
        info.counters
    );
    assert_eq!(counter("modules_build_id_hits"), 0, "{:?}", info.counters);
    assert_eq!(counter("dwarf_failures"), 0, "{:?}", info.counters);
}
