//! Whole Java stacks with no JVM flags: HotSpot's compiled frames, which keep no frame pointer,
//! unwound by the frame layout the JVM describes in its vmStructs, through the call stub into
//! the VM's C++ frames and to the thread's start.
//!
//! The fixture is tests/fixtures/java/Callers.java: `main` calls `callerSeventy` and
//! `callerThirty`, which call `hot` 7 and 3 times a round, so 70% and 30% of `hot`'s time is
//! under each by construction.

use vmscope_proto::v1::{CallGraph, Profile, StackEnd};
use vmscope_tests::{
    Daemon, connect,
    java::{clean_jvm, start_java},
    stacks::record_stacks,
};

/// What the stacks whose leaf is `Callers.hot` say.
#[derive(Debug, Default)]
struct HotStacks {
    /// Samples in `hot`.
    hot: u64,
    /// Of them, under `callerSeventy` (its caller) and then `main`.
    seventy: u64,
    /// Of them, under `callerThirty` and then `main`.
    thirty: u64,
    /// Of them, whose walk reached the thread's start.
    complete: u64,
}

fn hot_stacks(profile: &Profile) -> HotStacks {
    let name = |i: u32| profile.frames[i as usize].name.as_str();
    let mut counts = HotStacks::default();
    for stack in &profile.stacks {
        let frames: Vec<&str> = stack.frames.iter().map(|&f| name(f)).collect();
        if !frames.first().is_some_and(|f| f.contains("Callers.hot(")) {
            continue;
        }
        counts.hot += stack.samples;
        let reaches_main = frames[1..].iter().any(|f| f.contains("Callers.main("));
        match frames.get(1) {
            Some(f) if reaches_main && f.contains("Callers.callerSeventy(") => {
                counts.seventy += stack.samples
            }
            Some(f) if reaches_main && f.contains("Callers.callerThirty(") => {
                counts.thirty += stack.samples
            }
            _ => {}
        }
        if stack.end == StackEnd::Complete as i32 {
            counts.complete += stack.samples;
        }
    }
    counts
}

/// The most frequent stacks, for a failure to show what the walks found.
fn top_stacks(profile: &Profile, n: usize) -> String {
    let mut stacks: Vec<_> = profile.stacks.iter().collect();
    stacks.sort_by_key(|s| std::cmp::Reverse(s.samples));
    stacks
        .iter()
        .take(n)
        .map(|s| {
            let names: Vec<&str> = s
                .frames
                .iter()
                .map(|&f| profile.frames[f as usize].name.as_str())
                .collect();
            format!(
                "{} samples, end {}: {}",
                s.samples,
                s.end,
                names.join(" <- ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_stacks_without_flags_reach_main_through_their_callers_70_30() {
    let daemon = Daemon::start();
    let mut client = connect(&daemon.socket).await.unwrap();
    let jvm = start_java("Callers.java", &[], "8");
    let profile = record_stacks(&mut client, jvm.pid(), CallGraph::Dwarf, 0, 3.0).await;
    clean_jvm(jvm.pid());
    drop(jvm);
    let counts = hot_stacks(&profile);
    let stacks = top_stacks(&profile, 12);
    eprintln!("{counts:?}\n{stacks}");
    assert!(counts.hot >= 1000, "{counts:?}\n{stacks}");
    let reached = counts.seventy + counts.thirty;
    assert!(
        reached * 10 >= counts.hot * 9,
        "{reached} of {} samples in Callers.hot reach main through their caller\n{stacks}",
        counts.hot
    );
    let seventy = 100.0 * counts.seventy as f64 / reached as f64;
    assert!(
        (seventy - 70.0).abs() <= 3.0,
        "callerSeventy has {seventy:.1}% of hot's samples, not 70 ± 3\n{stacks}"
    );
    assert!(
        counts.complete * 10 >= counts.hot * 9,
        "{} of {} stacks reach the thread's start\n{stacks}",
        counts.complete,
        counts.hot
    );
}
