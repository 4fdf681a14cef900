//! Ground truth: a fixture whose time split is fixed by construction (6/3/1 ms slices of thread
//! CPU time in hot_a, hot_b, hot_c), profiled through the daemon over gRPC against real BPF.

use std::process::Command;

use vmscope_proto::v1::Section;
use vmscope_tests::{Daemon, Running, dump, fixtures, rate_tolerance, record, samples_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_rate_and_losses_match_construction() {
    let daemon = Daemon::start();
    let fixtures = fixtures();
    let target = Running::start(Command::new(&fixtures.hotspots_pie).arg("30"));
    let mut client = daemon.client().await;

    let profile = record(&mut client, target.pid(), Some(1400), 4.0).await;
    let report = dump(&profile);
    assert!(profile.complete, "{report}");

    let a = samples_of(&profile, Section::Vanilla, "hot_a") as f64;
    let b = samples_of(&profile, Section::Vanilla, "hot_b") as f64;
    let c = samples_of(&profile, Section::Vanilla, "hot_c") as f64;
    let hot = a + b + c;
    assert!(
        hot > 0.9 * profile.total_samples as f64,
        "the three functions should hold nearly all samples:\n{report}"
    );
    for (name, samples, expected) in [("hot_a", a, 60.0), ("hot_b", b, 30.0), ("hot_c", c, 10.0)] {
        let share = 100.0 * samples / hot;
        assert!(
            (share - expected).abs() <= 3.0,
            "{name}: {share:.2}% of the hot samples, expected {expected}% +- 3:\n{report}"
        );
    }

    // The rate per busy CPU: samples over the CPU time the target used while sampled.
    let rate = profile.measured_frequency_hz;
    let tolerance = rate_tolerance(profile.host_steal_percent);
    assert!(
        (rate - 1400.0).abs() <= tolerance * 1400.0,
        "measured {rate:.1} Hz per busy CPU, expected 1400 +- {:.0}%:\n{report}",
        tolerance * 100.0
    );
    assert!(
        profile.cpu_seconds > 1.0,
        "the target should have been busy most of the 4 s:\n{report}"
    );
    assert_eq!(profile.lost_samples, 0, "{report}");
    assert!(
        profile.lost_samples_per_cpu.iter().all(|&n| n == 0),
        "{report}"
    );
    assert!(
        (profile.duration_seconds - 4.0).abs() < 0.5,
        "duration {:.3}",
        profile.duration_seconds
    );
    assert_eq!(
        profile.vm_executable,
        fixtures.hotspots_pie.display().to_string()
    );
}
