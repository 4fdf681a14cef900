//! What reading a JVM's performance data costs the daemon: a JVM started with no flags
//! (`tests/fixtures/java/Allocates.java`, collecting all the while), its file found among its
//! mappings as a session finds it, then read many times over: the `pread` alone, the read and
//! parse, both plus the heap's levels (what a running session does every 100 ms), and both plus
//! the statistics a profile gets. Prints a table of the time per read;
//! each row's ratio is to the `pread` alone, measured in the same run. Needs root and a JDK:
//! `cargo bench -p vmscoped --bench hsperfdata`.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use vmscoped::stats::hotspot::{LevelRanges, PerfDataFile, statistics};

const READS: u32 = 2_000;
const ROUNDS: usize = 5;

struct Jvm(Child);

impl Drop for Jvm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() {
    let program =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/java/Allocates.java");
    let jvm = Jvm(Command::new("java")
        .arg(&program)
        .arg("60")
        .stdout(Stdio::null())
        .spawn()
        .expect("run java (cargo xtask setup installs a JDK)"));
    let pid = jvm.0.id();
    let started = Instant::now();
    let file = loop {
        if let Some(file) = PerfDataFile::find(pid).expect("the JVM's maps") {
            break file;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no performance data file"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let first = file.read().expect("the JVM's file parses");
    println!(
        "{}: {} entries; time per read, median of {ROUNDS} rounds of {READS}",
        file.path,
        first.entries.len()
    );
    println!("| what | per read | ratio |");
    println!("|---|---|---|");
    let bytes = std::fs::metadata(format!("/proc/{pid}/root{}", file.path)).map_or(0, |m| m.len());
    let pread = median(|| {
        let mut buf = vec![0u8; bytes as usize];
        let f = std::fs::File::open(format!("/proc/{pid}/root{}", file.path)).unwrap();
        let start = Instant::now();
        for _ in 0..READS {
            std::os::unix::fs::FileExt::read_at(&f, &mut buf, 0).unwrap();
        }
        start.elapsed()
    });
    let parsed = median(|| {
        let start = Instant::now();
        for _ in 0..READS {
            std::hint::black_box(file.read().unwrap());
        }
        start.elapsed()
    });
    let mut ranges = LevelRanges::default();
    let levels = median(|| {
        let start = Instant::now();
        for _ in 0..READS {
            ranges.widen(&file.read().unwrap());
        }
        start.elapsed()
    });
    std::hint::black_box(&ranges);
    let with_statistics = median(|| {
        let start = Instant::now();
        for _ in 0..READS {
            let last = file.read().unwrap();
            std::hint::black_box(statistics(pid, &first, &last, &ranges, 1));
        }
        start.elapsed()
    });
    for (what, time) in [
        (format!("pread of {bytes} bytes"), pread),
        ("read and parse".to_owned(), parsed),
        ("read, parse and heap levels".to_owned(), levels),
        ("read, parse and statistics".to_owned(), with_statistics),
    ] {
        println!(
            "| {what} | {:.1} µs | {:.1}x |",
            time.as_secs_f64() * 1e6 / f64::from(READS),
            time.as_secs_f64() / pread.as_secs_f64()
        );
    }
    drop(jvm);
}

fn median(mut round: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..ROUNDS).map(|_| round()).collect();
    times.sort();
    times[ROUNDS / 2]
}
