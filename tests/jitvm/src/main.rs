//! `jitvm`: runs a workload of the demo JIT VM for some seconds and prints one summary line.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use jitvm::benchmarks::{self, Workload};
use jitvm::cpu_time::CpuClock;
use jitvm::driver::{self, RunConfig};
use jitvm::gc::GcConfig;
use jitvm::heap::Heap;
use jitvm::publish::{self, Mode};
use jitvm::runtime::{Config, Vm};

/// The demo JIT VM of vmscope: a small Smalltalk-flavoured bytecode VM with a template JIT
/// to x86-64, inline caches and PICs, an inlining tier and code compaction, which publishes
/// its code map to vmscope.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// tiny, fib, sieve, loop, inline, poly or compact.
    workload: Workload,
    /// Run the workload repeatedly for this many seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Make exactly this many calls of the workload instead, however long they take.
    #[arg(long)]
    iterations: Option<u64>,
    /// The fib and tiny workloads: the receiver of `benchFib` (25 by default). benchFib
    /// answers the number of its own activations.
    #[arg(long)]
    fib_n: Option<i64>,
    /// Compact the code zone every N ms (default 5 for `compact`, never for the others).
    #[arg(long)]
    compact_every_ms: Option<u64>,
    /// Where to publish the code map: grpc (to the vmscope daemon), file, file-at-exit (the file's
    /// records held until the VM finishes, as V8 buffers its jitdump) or none.
    #[arg(long, default_value = "grpc")]
    publish: Mode,
    /// Directory of the vmscope-<pid>.codemap file (default: the temporary directory).
    #[arg(long)]
    codemap_dir: Option<PathBuf>,
    /// Also append every code map event to this file (code map file format).
    #[arg(long)]
    code_log: Option<PathBuf>,
    /// Compile every method with the optimising tier from the start.
    #[arg(long)]
    opt: bool,
    /// Calls after which a method is recompiled by the optimising tier (0: never).
    #[arg(long, default_value_t = 1000)]
    hot_calls: u64,
    /// GC-heavy mode: young objects pile up to this many KiB, then a collection (published
    /// as an interval, like compactions) traces and clears them. Without it, they are freed
    /// at every safepoint, at no cost.
    #[arg(long)]
    eden_kb: Option<usize>,
    /// In the GC-heavy mode, every N-th collection is a full one (0: never).
    #[arg(long, default_value_t = 8)]
    full_gc_every: u64,
    /// In the GC-heavy mode, collections trace on a thread of their own (`gc`) while the VM
    /// thread waits for them, off its CPU, as a stop-the-world collector's mutators do.
    #[arg(long, requires = "eden_kb")]
    gc_thread: bool,
    /// Count nothing: no activation counters in compiled code, inlined bodies or the
    /// interpreter, none published (and so no optimising tier, which goes by them): what
    /// exact counts cost, measured against this.
    #[arg(long)]
    no_counters: bool,
    /// Size of the code zone in KiB.
    #[arg(long, default_value_t = 1024)]
    zone_kb: usize,
    /// Print the bytecode listings of the workload's methods and exit.
    #[arg(long)]
    listing: bool,
    /// Print "ready" once the VM is up, before running (for test harnesses).
    #[arg(long)]
    ready: bool,
    /// Before running, publish this many made-up methods (about 10 KiB each in the daemon's
    /// code store, 256 bytes each in the upper half of the code zone): a VM hogging the
    /// store, for tests of its per-user shares.
    #[arg(long, default_value_t = 0)]
    flood_codes: u64,
    /// Serve the heap to the vmscope daemon (CodeMap.ServeHeap): class histograms and
    /// structure queries, answered at safepoints. Needs --publish grpc.
    #[arg(long)]
    serve_heap: bool,
    /// Hold a heap of known structures as globals (lists of Nodes, a doubly linked decoy, an
    /// Order): see `heap_demo.rs`. Implies --serve-heap; `release` on standard input lets the
    /// Order go.
    #[arg(long)]
    heap_demo: bool,
    /// With --heap-demo: the lengths of the singly linked lists.
    #[arg(long, value_delimiter = ',', default_values_t = [1000, 2500])]
    heap_demo_lists: Vec<usize>,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("jitvm: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (prog, methods) = benchmarks::program()?;
    if args.listing {
        let mut out = std::io::stdout().lock();
        for m in benchmarks::listed(args.workload, &methods) {
            writeln!(out, "{}", prog.listing(m))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let compact = args.workload == Workload::Compact;
    let config = Config {
        zone_size: args.zone_kb * 1024,
        opt: args.opt,
        hot_calls: if args.hot_calls == 0 {
            u64::MAX
        } else {
            args.hot_calls
        },
        decoys: compact,
        publish: publish::Config {
            mode: args.publish,
            codemap_dir: args.codemap_dir,
            code_log: args.code_log,
            socket: None,
            serve_heap: args.serve_heap || args.heap_demo,
        },
        gc: args.eden_kb.map(|kb| GcConfig {
            eden_bytes: kb * 1024,
            full_every: args.full_gc_every,
            thread: args.gc_thread,
        }),
        counters: !args.no_counters,
        ..Config::default()
    };
    let mut heap = Heap::new(config.heap_size).context("object heap")?;
    let mut prog = prog;
    // Before the workload's receivers, which make everything so far permanent.
    let globals = if args.heap_demo {
        let demo = jitvm::heap_demo::Demo {
            lists: args.heap_demo_lists.clone(),
            ..Default::default()
        };
        demo.build(&mut prog, &mut heap)
            .context("object heap too small for --heap-demo")?
    } else {
        Vec::new()
    };
    let mut calls = benchmarks::calls(args.workload, &methods, &mut heap)
        .context("object heap too small for the workload")?;
    if let Some(n) = args.fib_n {
        anyhow::ensure!(
            matches!(args.workload, Workload::Fib | Workload::Tiny) && (0..=32).contains(&n),
            "--fib-n goes with the fib and tiny workloads, from 0 to 32"
        );
        calls[0].receiver = jitvm::value::Value::small(n);
        calls[0].expected = benchmarks::fib_reference(n);
    }
    let mut vm = Vm::new(prog, heap, config)?;
    vm.globals = globals;
    if args.heap_demo {
        let release = vm.release_order.clone();
        std::thread::Builder::new()
            .name("stdin".into())
            .spawn(move || {
                for line in std::io::stdin().lines() {
                    if line.is_ok_and(|l| l.trim() == "release") {
                        release.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
            .context("stdin thread")?;
    }
    let every = args.compact_every_ms.or(compact.then_some(5));
    let cfg = RunConfig {
        workload: args.workload,
        duration: Duration::from_secs_f64(args.seconds.max(0.0)),
        compact_every: every.filter(|&ms| ms > 0).map(Duration::from_millis),
        iterations: args.iterations,
    };
    let flooded = vm.flood(args.flood_codes);
    anyhow::ensure!(
        flooded == args.flood_codes,
        "the code zone holds only {flooded} flood codes: raise --zone-kb"
    );
    if args.ready {
        println!("ready");
        std::io::stdout().flush()?;
    }
    let summary = driver::run(&mut vm, &calls, &cfg);
    let sends = vm.sends();
    let bench_fib_calls = vm.calls_of(methods.bench_fib);
    let (start, free, end) = vm.zone_bounds();
    // Its last levels are published as it finishes.
    let st = vm.finish();
    // The VM runs on this thread: its CPU time, and the process's, over their whole lives,
    // as a sampler covering the process's life sees them.
    let (thread_cpu_ns, process_cpu_ns) = (CpuClock::Thread.now_ns(), CpuClock::Process.now_ns());
    let s = summary.context("running the workload")?;
    let secs = s.elapsed.as_secs_f64().max(1e-9);
    let (young_low, young_high) = st.young_published.unwrap_or_default();
    println!(
        "jitvm {:?}: iterations={} iter_per_sec={:.1} result={} checksum={} mismatches={} \
         compactions={} compiled={} optimised={} decoys={} closed_pics={} open_pics={} moves={} \
         frees={} interpreted={} zone_used={} zone_size={} scavenges={} full_gcs={} gc_ms={:.3} \
         compaction_ms={:.3} sends={} stack_overflows={} young_low={} young_high={} \
         seconds={:.3} gc_thread_cpu_ms={:.3} thread_cpu_ms={:.3} gc_process_cpu_ms={:.3} \
         process_cpu_ms={:.3} bench_fib_calls={} phase_cpu_ms={} receiver_cpu_ms={} method_moves={}",
        args.workload,
        s.iterations,
        s.iterations as f64 / secs,
        s.last,
        s.checksum,
        s.mismatches,
        st.compactions,
        st.compiled,
        st.optimised,
        st.decoys,
        st.closed_pics,
        st.open_pics,
        st.moves,
        st.frees,
        st.interpreted,
        free - start,
        end - start,
        st.scavenges,
        st.full_gcs,
        st.gc_ns as f64 / 1e6,
        st.compaction_ns as f64 / 1e6,
        sends,
        st.stack_overflows,
        young_low,
        young_high,
        secs,
        st.gc_thread_cpu_ns as f64 / 1e6,
        thread_cpu_ns as f64 / 1e6,
        st.gc_process_cpu_ns as f64 / 1e6,
        process_cpu_ns as f64 / 1e6,
        bench_fib_calls,
        s.cpu_ms_by("phase"),
        s.cpu_ms_by("receiver"),
        st.method_moves,
    );
    Ok(if s.mismatches == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
