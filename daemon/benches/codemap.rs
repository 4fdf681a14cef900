//! Code map throughput, through the daemon's own code paths:
//!
//! * `perf_map_1m_lines`: parse a 1,000,000-line perf map, intern each entry's code and apply
//!   the loads to a timeline (what the daemon does when it first reads a big map; letting the
//!   map and codes go, later, is not timed).
//! * `lookups_1m_entries`: attribute samples at random addresses in a live map of 1,000,000
//!   entries (reported per lookup; the daemon does one per sample in generated code).
//! * `jitdump_100k_loads_and_moves`: parse a jitdump stream of 100,000 CODE_LOAD and 100,000
//!   CODE_MOVE records and apply them.
//! * `advance_100k_parked`: one advance of a process with 100,000 samples counted
//!   provisionally and parked for their map, none due (what every batch of samples costs while
//!   a VM holds its map back).

use std::{hint::black_box, time::Duration};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use vmscope_model::CodeKind;
use vmscope_parse::{jitdump, perf_map};
use vmscoped::{
    codemap::{
        code::{Code, CodeSource, CodeStore},
        live::LiveMap,
        registry::{CodeMaps, PUBLICATION_GRACE_NS},
        sample::{
            Counted, ParkedFrame, Placement, Recount, RoutedSample, SampleFrame, Sink, Wanted,
        },
        timeline::{Change, PendingSample, Timeline},
    },
    vocab::{Executable, Location, StackEnd, Unexplained},
};

const BASE: u64 = 0x7f00_0000_0000;

fn perf_map_text(lines: usize) -> Vec<u8> {
    let mut text = Vec::with_capacity(lines * 48);
    for i in 0..lines {
        let start = BASE + i as u64 * 0x100;
        text.extend_from_slice(
            format!(
                "{start:x} 80 JS:*fn{i} /srv/app.js:{}:{}\n",
                i % 5000,
                i % 80
            )
            .as_bytes(),
        );
    }
    text
}

fn jitdump_stream(loads: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let header = [0x4A69_5444u32, 1, 40, 62, 0, 4242, 0, 0, 0, 0];
    for word in header {
        out.extend_from_slice(&word.to_le_bytes());
    }
    let record = |out: &mut Vec<u8>, id: u32, ts: u64, body: &[u8]| {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
        out.extend_from_slice(&ts.to_le_bytes());
        out.extend_from_slice(body);
    };
    let code = [0x90u8; 64];
    for i in 0..loads {
        let addr = BASE + i as u64 * 0x100;
        let mut body = Vec::with_capacity(128);
        body.extend_from_slice(&4242u32.to_le_bytes());
        body.extend_from_slice(&4242u32.to_le_bytes());
        for v in [addr, addr, code.len() as u64, i as u64] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend_from_slice(format!("JS:*fn{i} /srv/app.js:1:1\0").as_bytes());
        body.extend_from_slice(&code);
        record(&mut out, 0, 1000 + 2 * i as u64, &body);
        let mut body = Vec::with_capacity(56);
        body.extend_from_slice(&4242u32.to_le_bytes());
        body.extend_from_slice(&4242u32.to_le_bytes());
        let to = addr + 0x80;
        for v in [to, addr, to, code.len() as u64, i as u64] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        record(&mut out, 1, 1001 + 2 * i as u64, &body);
    }
    out
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("codemap");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(15));

    let text = perf_map_text(1_000_000);
    group.throughput(Throughput::Elements(1_000_000));
    group.bench_function("perf_map_1m_lines", |b| {
        b.iter_batched(
            CodeStore::new,
            |store| {
                let chunk = perf_map::parse_perf_map(&text, true);
                let mut timeline = Timeline::<()>::default();
                for entry in chunk.entries {
                    let code = store
                        .intern(
                            Code::named(CodeKind::Unknown, entry.name, CodeSource::PerfMap),
                            0,
                        )
                        .expect("within the budget");
                    timeline.push_change(
                        0,
                        Change::Load {
                            start: entry.start,
                            size: Some(entry.size),
                            code,
                        },
                    );
                }
                timeline.advance(1, |_, _, _| {});
                black_box(timeline.map().len());
                // Dropped untimed: the daemon lets a map go when its process is forgotten,
                // not as it reads it.
                (store, timeline)
            },
            BatchSize::PerIteration,
        )
    });

    let store = CodeStore::new();
    let mut map = LiveMap::default();
    for i in 0..1_000_000u64 {
        let code = store
            .intern(
                Code::named(CodeKind::Method, format!("m{i}"), CodeSource::PerfMap),
                0,
            )
            .expect("within the budget");
        map.load(BASE + i * 0x100, Some(0x80), code).unwrap();
    }
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let addresses: Vec<u64> = (0..1_000_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            BASE + state % (1_000_000 * 0x100)
        })
        .collect();
    group.throughput(Throughput::Elements(addresses.len() as u64));
    group.bench_function("lookups_1m_entries", |b| {
        b.iter(|| {
            let hits = addresses
                .iter()
                .filter(|&&a| map.lookup(a).is_some())
                .count();
            black_box(hits)
        })
    });
    // The same through a timeline, as samples are attributed.
    group.bench_function("timeline_attribution_1m_samples", |b| {
        b.iter_batched(
            || {
                let mut timeline = Timeline::<()>::default();
                for i in 0..1_000u64 {
                    let code = store
                        .intern(
                            Code::named(CodeKind::Method, format!("t{i}"), CodeSource::PerfMap),
                            0,
                        )
                        .expect("within the budget");
                    timeline.push_change(
                        i,
                        Change::Load {
                            start: BASE + i * 0x100,
                            size: Some(0x80),
                            code,
                        },
                    );
                }
                for (i, &a) in addresses.iter().enumerate() {
                    timeline.push_sample(PendingSample {
                        timestamp_ns: 1_000 + i as u64,
                        ip: BASE + (a - BASE) % (1_000 * 0x100),
                        payload: (),
                    });
                }
                timeline
            },
            |mut timeline| {
                let mut found = 0usize;
                timeline.advance(u64::MAX, |_, hit, _| found += usize::from(hit.is_some()));
                black_box(found)
            },
            BatchSize::PerIteration,
        )
    });

    let stream = jitdump_stream(100_000);
    group.throughput(Throughput::Elements(200_000));
    group.bench_function("jitdump_100k_loads_and_moves", |b| {
        b.iter_batched(
            CodeStore::new,
            |store| {
                let header = jitdump::parse_header(&stream).unwrap().unwrap();
                let mut at = header.header_size as usize;
                let mut timeline = Timeline::<()>::default();
                while let Some((record, used)) =
                    jitdump::next_record(&stream[at..], header.endian).unwrap()
                {
                    at += used;
                    match record {
                        jitdump::Record::CodeLoad {
                            timestamp,
                            code_addr,
                            code_size,
                            name,
                            ..
                        } => {
                            let code = store
                                .intern(
                                    Code::named(
                                        CodeKind::Unknown,
                                        name.into_owned(),
                                        CodeSource::Jitdump,
                                    ),
                                    0,
                                )
                                .expect("within the budget");
                            timeline.push_change(
                                timestamp,
                                Change::Load {
                                    start: code_addr,
                                    size: Some(code_size),
                                    code,
                                },
                            );
                        }
                        jitdump::Record::CodeMove {
                            timestamp,
                            old_code_addr,
                            new_code_addr,
                            ..
                        } => timeline.push_change(
                            timestamp,
                            Change::Move {
                                from: old_code_addr,
                                to: new_code_addr,
                            },
                        ),
                        _ => {}
                    }
                }
                timeline.advance(u64::MAX, |_, _, _| {});
                assert_eq!(timeline.counters().refused, 0);
                black_box(timeline.map().len())
            },
            BatchSize::PerIteration,
        )
    });

    // A process whose VM holds its map back: its samples are parked, and every batch advances
    // it again.
    let pid = std::process::id();
    let mut maps = CodeMaps::new(std::sync::Arc::new(CodeStore::new()));
    maps.stream_opened(pid);
    let parked = 100_000u64;
    for i in 0..parked {
        maps.push_sample(pid, generated_sample(pid, 1_000 + i));
    }
    let now = 1_000 + parked + PUBLICATION_GRACE_NS;
    let nowhere = || Executable::new(pid, None, Vec::new(), false);
    maps.advance(pid, now, now, None, &mut { nowhere }, &mut Counting);
    assert_eq!(maps.provisional(), parked as usize);
    group.throughput(Throughput::Elements(1));
    group.bench_function("advance_100k_parked", |b| {
        b.iter(|| {
            maps.advance(pid, now, now, None, &mut { nowhere }, &mut Counting);
            black_box(maps.provisional())
        })
    });
    assert_eq!(maps.provisional(), parked as usize);
    group.finish();
}

/// A sample in generated code no map names, counted by one session.
fn generated_sample(pid: u32, timestamp_ns: u64) -> PendingSample<RoutedSample> {
    let ip = BASE + timestamp_ns % 0x1000;
    PendingSample {
        timestamp_ns,
        ip,
        payload: RoutedSample {
            tid: pid,
            kernel: false,
            end: StackEnd::Complete,
            frames: vec![SampleFrame {
                location: Location::Anonymous {
                    pid,
                    start: BASE,
                    end: BASE + 0x1000,
                    why: Unexplained::NotLookedUp,
                },
                address: ip,
                lookup: ip,
                code_start: 0,
            }],
            fp: None,
            sessions: vec![(1, Wanted::Leaf)],
            sends: Vec::new(),
            labels: 0,
            block: None,
        },
    }
}

/// A sink that counts in one session and moves nothing.
struct Counting;

impl Sink for Counting {
    fn count(&mut self, _: u32, _: u64, sample: &RoutedSample, _: bool) -> Vec<Counted> {
        sample
            .sessions
            .iter()
            .map(|&(session, wanted)| Counted {
                session,
                tid: sample.tid,
                wanted,
                stack: 0,
                kept: None,
                block: None,
                sends: 0,
            })
            .collect()
    }

    fn recount(
        &mut self,
        _: u32,
        _: bool,
        _: &[(ParkedFrame, Placement)],
        _: &mut [Counted],
        _: Recount,
    ) {
    }

    fn takes_snapshots(&self, _: u64) -> bool {
        true
    }

    fn statistics(&mut self, _: u32, _: Vec<(u64, vmscoped::stats::vm::StatEvent)>) {}
}

criterion_group!(benches, bench);
criterion_main!(benches);
