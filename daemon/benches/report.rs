//! Time to build a report from 1,000,000 samples with call stacks.
//!
//! * `ingest`: one million sample events with stacks through the session manager (routing,
//!   normalisation of every frame to (binary, offset), stack interning, aggregation), in
//!   ring-buffer-sized batches, over a fake kernel.
//! * `profile_cold`: symbolising the resulting snapshot with an empty symbol cache (the binary
//!   is parsed) and building the API's Profile.
//! * `profile_warm`: the same with the symbol table already parsed (every later snapshot, e.g.
//!   each message of a watch).
//! * `pprof`: encoding that profile as gzipped pprof (GetProfile with `pprof`, `--format
//!   pprof`).
//!
//! Samples fall on 4096 distinct stacks through this benchmark's own executable code, plus some
//! kernel addresses: many samples, few distinct locations and stacks, as in real profiles.

use std::{hint::black_box, sync::Arc, time::Duration};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tokio::sync::mpsc;
use vmscope_common::{EVENT_SAMPLE, Event, FLAG_KERNEL_MODE, FLAG_STACK, FLAG_TARGET};
use vmscope_parse::{kallsyms, maps};
use vmscoped::{
    bpf::{Batch, fake::FakeSampler, period_of},
    profile::{ProfileOptions, build_profile},
    session::{Caller, ManagerConfig, ManagerHandle, SessionRequest, Snapshot, spawn_manager},
    symbolize::{Modules, Symbolizer},
    sys,
};

const SAMPLES: usize = 1_000_000;
const HZ: u32 = 1400;
const ROOT: Caller = Caller { uid: 0, pid: None };
const SHOW_ALL: ProfileOptions = ProfileOptions { hide_kernel: None };

/// Start and end of this executable's first code mapping.
fn own_code() -> (u64, u64) {
    let exe = std::env::current_exe().unwrap();
    let text = std::fs::read("/proc/self/maps").unwrap();
    maps::parse_maps(&text)
        .entries
        .into_iter()
        .find(|e| {
            e.perms.exec && matches!(&e.path, maps::MapPath::File { path, .. } if *path == exe)
        })
        .map(|e| (e.start, e.end))
        .expect("own code mapping")
}

/// The benchmark's samples in ring-buffer-sized batches: each with a call stack 8 to 23 frames
/// deep, on one of 512 call paths through the code, each ending on one of 8 addresses: 4096
/// distinct user stacks (kernel samples have a kernel frame over the user stack).
fn batches() -> Vec<Batch> {
    let (start, end) = own_code();
    let pid = std::process::id();
    let span = (end - start).min(4096 * 64);
    let slot = |n: u64| start + (n % (span / 64)) * 64;
    // Stamped hours ahead, so that sessions started at any point of the benchmark want them.
    let now = sys::monotonic_ns() + 10_000_000_000_000;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut batches = Vec::new();
    let mut batch = Batch::default();
    let mut user = Vec::with_capacity(32);
    for i in 0..SAMPLES {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let kernel = i % 50 == 0;
        // A path's leaf is one of 8 addresses in the function it ends in.
        let path = (state >> 20) % 512;
        let leaf = slot(path * 8 + state % 8);
        user.clear();
        user.push(leaf);
        user.extend((0..8 + path % 16).map(|depth| slot(path * 31 + depth * 7919) + 5));
        let ip = if kernel {
            0xffff_ffff_8100_0000 + (state % 64) * 16
        } else {
            leaf
        };
        let event = Event {
            kind: EVENT_SAMPLE,
            cpu: (i % 2) as u32,
            tgid: pid,
            tid: pid,
            timestamp_ns: now + i as u64,
            ip,
            period_ns: period_of(HZ),
            flags: FLAG_TARGET | FLAG_STACK | if kernel { FLAG_KERNEL_MODE } else { 0 },
            ..Event::default()
        };
        let kernel_frames: &[u64] = if kernel { &[ip] } else { &[] };
        batch.push(event, kernel_frames, &user);
        if batch.events.len() == 16 * 1024 {
            batches.push(std::mem::take(&mut batch));
        }
    }
    batches.push(batch);
    batches
}

/// A manager over a fake kernel, sharing `modules` with whoever symbolises its snapshots.
struct Harness {
    manager: ManagerHandle,
    batches: mpsc::Sender<Batch>,
}

impl Harness {
    /// Must run inside the benchmark's runtime (the manager is a task).
    fn new(modules: Arc<Modules>) -> Harness {
        let (batches, rx) = mpsc::channel(128);
        let (manager, _task) = spawn_manager(
            Box::new(FakeSampler::default()),
            rx,
            Arc::new(vmscoped::bpf::ReaderControl::default()),
            modules,
            Arc::new(vmscoped::codemap::code::CodeStore::new()),
            ManagerConfig::default(),
            Box::new(|| Ok(100_000)),
        )
        .expect("manager thread");
        Harness { manager, batches }
    }

    async fn start(&self) -> u64 {
        let request = SessionRequest {
            pids: vec![std::process::id()],
            system_wide: false,
            frequency_hz: HZ,
            duration: None,
            keep_samples: 0,
            ..Default::default()
        };
        self.manager.start(ROOT, request).await.unwrap().id
    }

    /// Sends every batch to a new session and waits until the manager has routed them all.
    async fn ingest(&self, batches: Vec<Batch>) -> Snapshot {
        let id = self.start().await;
        let before = self.events_seen().await;
        for batch in batches {
            self.batches.send(batch).await.unwrap();
        }
        while self.events_seen().await < before + SAMPLES as u64 {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        self.manager.snapshot(ROOT, id).await.unwrap()
    }

    async fn events_seen(&self) -> u64 {
        self.manager.counters().await.unwrap().values["events"]
    }
}

fn symbolizer() -> Symbolizer {
    let kernel = sys::read_bounded("/proc/kallsyms".as_ref(), 256 << 20)
        .map(|t| kallsyms::parse_kallsyms(&t))
        .unwrap_or_else(|_| kallsyms::parse_kallsyms(b""));
    Symbolizer::new(
        Arc::new(Modules::new()),
        Arc::new(vmscoped::codemap::code::CodeStore::new()),
        Arc::new(kernel),
        Arc::new(Err("no vDSO in the benchmark".into())),
    )
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let batches = batches();
    let mut group = c.benchmark_group("report_1m_samples");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));

    // A fresh manager per iteration: one session, as in real use (sessions left running
    // would each count every sample).
    group.bench_function("ingest", |b| {
        b.iter_batched(
            || {
                let harness = runtime.block_on(async { Harness::new(Arc::new(Modules::new())) });
                (harness, batches.clone())
            },
            |(harness, batches)| black_box(runtime.block_on(harness.ingest(batches)).total_samples),
            BatchSize::PerIteration,
        )
    });

    // Locations name binaries by their index in one registry: symbolise with the registry the
    // manager filled. A cold run needs a fresh registry, hence a fresh manager per iteration.
    let cold = || {
        let symbolizer = symbolizer();
        let harness = runtime.block_on(async { Harness::new(symbolizer.modules().clone()) });
        let snapshot = runtime.block_on(harness.ingest(batches.clone()));
        assert_eq!(snapshot.total_samples, SAMPLES as u64);
        (snapshot, symbolizer)
    };
    group.bench_function("profile_cold", |b| {
        b.iter_batched(
            cold,
            |(snapshot, symbolizer)| {
                black_box(build_profile(snapshot, &symbolizer, &SHOW_ALL).rows.len())
            },
            BatchSize::PerIteration,
        )
    });
    let (snapshot, warm) = cold();
    let rows = build_profile(snapshot.clone(), &warm, &SHOW_ALL).rows.len();
    println!(
        "report_1m_samples: {} distinct locations, {} distinct stacks, {rows} profile rows",
        snapshot.stacks.locations.len(),
        snapshot.stacks.stacks.len()
    );
    group.bench_function("profile_warm", |b| {
        b.iter_batched(
            || snapshot.clone(),
            |snapshot| black_box(build_profile(snapshot, &warm, &SHOW_ALL).rows.len()),
            BatchSize::PerIteration,
        )
    });
    // TODO(model-port): encode the model itself once vmscope-report takes it.
    let profile: vmscope_proto::v1::Profile =
        build_profile(snapshot.clone(), &warm, &SHOW_ALL).into();
    group.bench_function("pprof", |b| {
        b.iter(|| black_box(vmscope_report::pprof::encode(&profile).unwrap().len()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
