//! `vmscope`: drives the vmscoped daemon and prints VMProfiler-style reports.

use std::{ffi::OsString, io::Write, path::PathBuf, process::ExitCode, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};
use vmscope::{
    output::Destination,
    record::{RecordOptions, Target},
    report::{
        DEFAULT_FOLD_PERCENT, Format, ReportOptions, TreeOptions, TreeView, check_stats_format,
        check_tree_format,
        sort_keys::SortKey,
        stack_view::{FrameView, StackOptions},
    },
    sessions,
};
use vmscope_proto::{
    DEFAULT_DWARF_STACK_BYTES, DEFAULT_SOCKET, MAX_DWARF_STACK_BYTES, SOCKET_ENV,
    v1::{CallGraph, ProfileMode},
};

/// Profile language VMs (JIT code, interpreter, libraries, kernel) through the vmscoped daemon.
#[derive(Debug, Parser)]
#[command(name = "vmscope", version)]
struct Cli {
    /// The daemon's Unix socket.
    #[arg(long, env = SOCKET_ENV, default_value = DEFAULT_SOCKET, global = true)]
    socket: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Record processes, a command, or the whole system, then print the report.
    ///
    /// Stops when --duration elapses, the command exits, every target exits, or on Ctrl-C.
    ///
    /// With `-- CMD`, the command keeps its standard output: the report goes to standard error,
    /// or to the file `-o` names. SIGINT, SIGTERM and SIGHUP are passed on to the command (the
    /// terminal's Ctrl-C reaches it directly; a third one kills it), the recording lasts until
    /// it exits, and its exit status (128 + signal when a signal killed it) becomes vmscope's. The command finds the
    /// daemon through VMSCOPE_SOCKET, set to the socket vmscope uses. Without a command, the
    /// report goes to standard output.
    #[command(after_help = "Examples:\n  vmscope record --duration 5 --pid 4242\n  \
                            vmscope record -o node.txt -- node --perf-basic-prof app.js\n  \
                            vmscope record -- gzip -9 -c big > big.gz   # report on stderr\n  \
                            sudo vmscope record --system --duration 10 --format json")]
    Record(RecordArgs),
    /// List your sessions (all sessions, for root).
    Sessions,
    /// Stop a running session.
    Stop {
        /// Session id.
        id: u64,
    },
    /// Print a session's report (a snapshot while it runs).
    Report {
        /// Session id.
        id: u64,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Print the continuous profile (`vmscoped --continuous`): the windows the daemon kept,
    /// merged, for the whole host or one process or executable. Root only.
    #[command(after_help = "Examples:\n  sudo vmscope continuous --since 300\n  \
                            sudo vmscope continuous --exe node --format pprof -o node.pb.gz")]
    Continuous {
        /// The windows of the last this many seconds (fractions allowed) [default: every kept
        /// window].
        #[arg(long, value_parser = parse_seconds)]
        since: Option<Duration>,
        /// One process only.
        #[arg(short, long, conflicts_with = "exe")]
        pid: Option<u32>,
        /// The processes running this executable only: its path, its file name, or the
        /// process's command.
        #[arg(long)]
        exe: Option<String>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Compare two profiles: per function and per bytecode range, self and inclusive CPU time
    /// in both, the change, and whether it is more than sampling noise.
    ///
    /// BASE and NEW are session ids or pprof files vmscope wrote (`--format pprof`). The test:
    /// an exact binomial test of the two sample counts given their sum, at 1% shared among the
    /// rows that could reach it (Bonferroni after Tarone), stated in the output. Times are compared as they are (runs of
    /// the same work); --normalize compares shares of each side's samples (runs of the same
    /// length).
    #[command(after_help = "Examples:\n  vmscope diff 3 4\n  \
                            vmscope diff base.pb.gz new.pb.gz --format json\n  \
                            vmscope diff 3 4 --format flamegraph -o diff.svg   # red grew, blue shrank")]
    Diff {
        /// The base profile: a session id or a pprof file.
        #[arg(value_parser = vmscope::diff::Input::parse)]
        base: vmscope::diff::Input,
        /// The new profile: a session id or a pprof file.
        #[arg(value_parser = vmscope::diff::Input::parse)]
        new: vmscope::diff::Input,
        #[command(flatten)]
        compare: CompareArgs,
        /// text, json, or flamegraph (a differential flame graph: widths of NEW, red where it
        /// grew, blue where it shrank).
        #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
        format: DiffFormat,
        /// Fold rows under this percentage of both sides' samples (they are still tested)
        /// [default: 0.5; 0 shows every row].
        #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
        fold: Option<f64>,
        /// Write to FILE (`-` for standard output).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Assert that a profile is not slower than a baseline, for CI: exits 1 with a one-line
    /// reason per failed assertion, 0 when all hold, 2 when the check cannot be made.
    ///
    /// An assertion fails when the time grew by more than --max-increase and the growth is
    /// more than sampling noise (the test of `vmscope diff`, its 1% level shared among the
    /// assertions), so that a rerun of the same build passes.
    #[command(after_help = "Examples:\n  \
                            vmscope check new.pb.gz --baseline base.pb.gz --max-increase 5% 'SmallInteger>>benchFib'\n  \
                            vmscope check 4 --baseline 3 --max-increase 10%   # the whole profile\n  \
                            vmscope check --heap 'Order: count == 0' --pid $(pgrep java)   # after a full GC")]
    Check {
        /// The profile to check: a session id or a pprof file (none for --heap alone).
        #[arg(value_parser = vmscope::diff::Input::parse, required_unless_present = "heap")]
        new: Option<vmscope::diff::Input>,
        /// The functions to check, by exact name (inclusive time, or --self); the whole
        /// profile when none is given.
        functions: Vec<String>,
        /// The baseline: a session id or a pprof file (for --max-increase).
        #[arg(long, value_parser = vmscope::diff::Input::parse, requires = "max_increase")]
        baseline: Option<vmscope::diff::Input>,
        /// The largest growth of time allowed against the baseline: `5%` or `5`.
        #[arg(long, value_name = "PERCENT", value_parser = parse_increase, requires = "baseline")]
        max_increase: Option<f64>,
        /// The most calls of a counted function allowed, FUNCTION=N (`libc.so.6:malloc=1e6`),
        /// as `record --count FUNCTION` counted them in NEW: compared exactly. Repeat for
        /// several.
        #[arg(long = "max-count", value_name = "FUNCTION=N", value_parser = parse_max_count)]
        max_counts: Vec<(String, u64)>,
        /// Check self time rather than inclusive time.
        #[arg(long = "self")]
        self_time: bool,
        #[command(flatten)]
        compare: CompareArgs,
        /// A heap assertion, `CLASS: count|bytes [growth] OP N` (`'Leaky: count == 0'`,
        /// `'Order: count growth <= 0'`; OP one of == != < <= > >=), on a new heap histogram of
        /// --pid (after a full GC) or on the kept --heap-id; growth is since --since. A class
        /// the histogram lists not has no instances. Repeat for several.
        #[arg(long = "heap", value_name = "ASSERTION", value_parser = vmscope::heap_check::parse)]
        heap: Vec<vmscope::heap_check::HeapAssertion>,
        /// The process whose heap --heap checks: a new histogram (`vmscope heap --pid`).
        #[arg(long, requires = "heap", conflicts_with = "heap_id")]
        pid: Option<u32>,
        /// A heap histogram taken earlier for --heap to check.
        #[arg(long, value_name = "ID", requires = "heap")]
        heap_id: Option<u64>,
        /// The earlier heap histogram that growth assertions compare with.
        #[arg(long, value_name = "ID", requires = "heap")]
        since: Option<u64>,
    },
    /// Fit each function's CPU time against a workload parameter: constant, n, n log n, n² or
    /// n³, chosen by cross-validated error, with its coefficients and R² (after Beagle).
    ///
    /// PROFILES are session ids or pprof files, each recorded with `vmscope record --param
    /// KEY=VALUE` at a different value.
    #[command(after_help = "Example:\n  \
                            for n in 16 32 64 128 256 512 1024; do\n    \
                            vmscope record --param n=$n --format pprof -o sort-$n.pb.gz -- ./sort $n\n  \
                            done\n  \
                            vmscope fit sort-*.pb.gz --function quicksort")]
    Fit {
        /// The profiles: session ids or pprof files, at least three.
        #[arg(value_parser = vmscope::diff::Input::parse, required = true)]
        profiles: Vec<vmscope::diff::Input>,
        /// The parameter to fit against [default: the one every profile has].
        #[arg(long, value_name = "KEY")]
        param: Option<String>,
        /// Only this function (exact name); repeat for several. Default: every function with
        /// at least --min-percent of some profile's samples.
        #[arg(long = "function", value_name = "NAME")]
        functions: Vec<String>,
        /// See --function [default: 1].
        #[arg(long, value_name = "PERCENT", value_parser = parse_percent, default_value = "1")]
        min_percent: f64,
        /// Fit self time rather than inclusive time.
        #[arg(long = "self")]
        self_time: bool,
        /// text or json.
        #[arg(long, value_enum, default_value_t = FitFormat::Text)]
        format: FitFormat,
        /// Compare every frame of session profiles' stacks, not the language view.
        #[arg(long)]
        native: bool,
    },
    /// What fills a process's heap: instances and bytes per class, and the classes that grew
    /// since an earlier histogram (--since).
    ///
    /// A HotSpot JVM answers through its attach mechanism (GC.class_histogram, what `jmap
    /// -histo:live` asks; no JVM flag needed): it runs a full GC first, unless --all, and
    /// stops its threads at a safepoint to count; the report says for how long. The daemon
    /// keeps each histogram under its id (each user's newest 64) for --id and --since.
    #[command(after_help = "Examples:\n  \
                            vmscope heap --pid $(pgrep java)            # histogram 1\n  \
                            vmscope heap --pid $(pgrep java) --since 1  # what grew since\n  \
                            vmscope heap --id 2 --since 1 --format json")]
    Heap {
        /// Take a new histogram of this process.
        #[arg(short, long, required_unless_present = "id", conflicts_with = "id")]
        pid: Option<u32>,
        /// Show a histogram taken earlier.
        #[arg(long)]
        id: Option<u64>,
        /// Show the growth since this earlier histogram (of the same process).
        #[arg(long, value_name = "ID", conflicts_with = "query")]
        since: Option<u64>,
        /// Ask a VM that serves its heap for structures instead of a histogram: `CLASSES [where
        /// FIELD == N [and ...]] from globals|global NAME|instances of CLASS [per root]`, e.g.
        /// 'Node from globals per root' (see docs/heap.md).
        #[arg(long, requires = "pid", value_name = "QUERY")]
        query: Option<String>,
        /// Count every object, unreachable ones too, with no full GC first (jmap -histo
        /// without :live): a shorter pause, garbage counted.
        #[arg(long, requires = "pid")]
        all: bool,
        /// How long to wait for the VM's answer, in seconds [default: 60, at most 600].
        #[arg(long, value_parser = parse_seconds, requires = "pid")]
        timeout: Option<Duration>,
        /// The classes shown, largest first, and of those that grew (0: all).
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// text or json (every class, whatever --top).
        #[arg(long, value_enum, default_value_t = HeapFormat::Text)]
        format: HeapFormat,
        /// Write to FILE (`-` for standard output).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Show the daemon's limits, what it holds now (gauges) and its counters.
    Info {
        /// Print them as one JSON object (`version`, `online_cpus`, `default_frequency_hz`,
        /// `max_frequency_hz`, `hardware_events`, `counters`, `gauges`, `limits`).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
struct RecordArgs {
    /// Processes to record (all their threads); repeat or separate with commas.
    #[arg(short, long = "pid", value_delimiter = ',', conflicts_with = "system")]
    pids: Vec<u32>,
    /// Record every process on the machine (root only).
    #[arg(short = 'a', long)]
    system: bool,
    /// Samples per second per busy CPU [default: 1400, the daemon's]. At most the daemon's
    /// ceiling (10000 Hz unless `vmscoped --max-frequency` says otherwise, and never above
    /// kernel.perf_event_max_sample_rate; `vmscope info` shows it): the daemon refuses more.
    #[arg(short = 'F', long = "freq")]
    frequency: Option<u32>,
    /// Stop after this many seconds (fractions allowed).
    #[arg(short, long, value_parser = parse_seconds)]
    duration: Option<Duration>,
    /// Call stacks to record with each sample (perf's option). `fp`: the kernel stack when the
    /// tick lands in the kernel and the user stack, walked by frame pointers, each up to
    /// kernel.perf_event_max_stack (127) frames; it is what call trees, callers and flame
    /// graphs are made of. At 1400 Hz it costs the target about 1% more CPU time than `none`
    /// with 100-frame stacks (2.3% in all, as much as `perf record -g`). Code built without
    /// frame pointers (most distributions' -O2 libraries, HotSpot without
    /// -XX:+PreserveFramePointer, CPython) ends a stack early or skips its caller.
    /// `dwarf[,SIZE]`: the kernel stack, and the user registers with a copy of the top SIZE
    /// bytes of the user stack (8192 unless given, at most 65528, rounded up to a multiple of
    /// 8, as perf does), unwound by the daemon from the binaries' DWARF call frame
    /// information: complete stacks through code without frame pointers. `none`: the
    /// interrupted instruction only, for the flat report alone.
    #[arg(
        long = "call-graph",
        value_name = "MODE",
        value_parser = CallGraphArg::parse,
        default_value = "fp"
    )]
    call_graph: CallGraphArg,
    /// Same as --call-graph fp, as in perf.
    #[arg(short = 'g')]
    g: bool,
    /// What to measure. `cpu`: where the CPU time goes, by samples of the CPU clock (-F per
    /// busy CPU). `off-cpu`: where the time off the CPU goes: every block of a target's thread
    /// (a sleep, a lock, I/O, a wait for a CPU) with the stack it blocked in, how long and why
    /// (sleeping, uninterruptible, preempted). `wall`: both in one profile, each sample
    /// weighted by the sampling period, so that a thread's total is its elapsed time. The
    /// off-CPU modes need call stacks (fp or dwarf) and Linux 5.18 or later.
    #[arg(long, value_enum, default_value_t = ModeArg::Cpu)]
    mode: ModeArg,
    /// Off-CPU and wall modes: blocks shorter than this are counted but not recorded with
    /// their stacks (bcc offcputime's -m), which bounds the work at high switch rates: `50us`,
    /// `1ms`, `0.5s`, or seconds. Default: every block.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    min_block: Option<Duration>,
    /// Leave HotSpot JVMs among the targets alone. Without it, the daemon asks them for their
    /// perf map (as `jcmd PID Compiler.perfmap` does: a trigger file in their /tmp, then a
    /// SIGQUIT), at the start, when samples in unnamed Java code pile up, and at the stop, so
    /// that Java methods are named with no JVM flags.
    #[arg(long)]
    no_jvm_attach: bool,
    /// A parameter of the workload, KEY=VALUE (`n=1000`), kept with the session and written
    /// into its pprof file, for `vmscope fit` to fit costs against; repeat for several.
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
    params: Vec<(String, String)>,
    /// Count the calls of a native function exactly, MODULE:FUNCTION (`libc.so.6:malloc`,
    /// `./vm:gc_scavenge`): a uprobe at its entry in each target, every thread, counted in the
    /// kernel; the report lists them under Counts. MODULE is a library's file name or a path
    /// (made absolute here). Repeat for several, at most 16; not with --system.
    #[arg(long = "count", value_name = "MODULE:FUNCTION", value_parser = parse_count)]
    counts: Vec<String>,
    /// Take a heap histogram of each --pid target (a HotSpot JVM) before the recording and
    /// another after it, and print the classes that grew between them after the report (on
    /// standard error for formats other than text). Each runs a full GC, outside the samples;
    /// see `vmscope heap`.
    #[arg(long, requires = "pids")]
    heap: bool,
    #[command(flatten)]
    output: OutputArgs,
    /// The command to run and record, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

#[derive(Debug, Args)]
struct OutputArgs {
    /// Report format. The stack formats (pprof, folded, flamegraph) ignore the options that
    /// shape the flat report (--fold, --wide, --sort); --vm-module says which frames are the
    /// VM's for their language view (see --native).
    #[arg(long, value_enum, default_value_t = FormatArg::Text)]
    format: FormatArg,
    /// Fold rows under this percentage of all samples into `...others...` (0 keeps every row)
    /// [default: 0.01, VMProfiler's; 0.5 for call trees, where each function repeats under
    /// every path to it].
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent)]
    fold: Option<f64>,
    /// Print the call tree of the recorded stacks instead of the flat report: top-down, each
    /// function under its caller with inclusive and self time, as Pharo's MessageTally does.
    #[arg(long)]
    tree: bool,
    /// Print who called the function named NAME (exactly), bottom-up: NAME, then its callers,
    /// theirs under them. A close match is suggested when no function has that name.
    #[arg(long, value_name = "NAME", conflicts_with = "tree")]
    callers: Option<String>,
    /// Print what the function named NAME (exactly) called, top-down from every place it ran,
    /// merged; recursion counts each sample once.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["tree", "callers"])]
    callees: Option<String>,
    /// Show every frame of the stacks in call trees and stack formats (JSON's stacks, pprof,
    /// folded, flame graph). By default they show the language view, as py-spy does: in a
    /// stack holding JIT or perf map code, the VM's own frames (its executable, its runtime
    /// library, trampolines, PICs) above the innermost language frame are hidden.
    #[arg(long)]
    native: bool,
    /// Collapse recursion in call trees and stack formats: a function calling itself,
    /// directly or through a cycle of functions (a > b > a > b), is one level, and each sample
    /// still counts once in every function it holds.
    #[arg(long)]
    collapse_recursion: bool,
    /// Weigh the call trees and the stack formats (JSON's stacks, pprof's default type,
    /// folded, flame graph) by another of the profile's measures: `sends`, the work the VM's
    /// threads counted between samples (a VM that publishes per-thread send counters: see
    /// docs/recording.md), or `samples`, `cpu`, `off_cpu`, `off_cpu_blocks`, `wall`. Default:
    /// samples, or the time off the CPU (--mode off-cpu), or the wall-clock time (--mode wall).
    #[arg(long, value_name = "MEASURE", value_parser = parse_weight)]
    weight: Option<vmscope_model::SampleType>,
    /// Print only the statistics after the code: what the VMs published of themselves (their
    /// settings, Memory, GCs, Compiled Code Compactions, counters) and the events the kernel
    /// counted for the targets (context switches, voluntary and not, CPU migrations, page
    /// faults, and hardware counters where the machine has a PMU), with their rates.
    #[arg(long, conflicts_with_all = ["tree", "callers", "callees"])]
    stats: bool,
    /// Print names whole in the text report, each last on its line after the numbers (as
    /// perf does), instead of shortening long ones to the name column.
    #[arg(long)]
    wide: bool,
    /// Write the report to FILE (`-` for standard output). Default: standard output, or
    /// standard error when recording a command, whose standard output is its own.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Count other code in modules whose file name matches PATTERN as vanilla vm code (e.g.
    /// 'libv8*', or '*Plugin.so' for a VM's plugins); repeat for several. A shell-style glob
    /// with `*` (any characters) and `?` (one character) only, matched against the whole file
    /// name as the report shows it, never a directory.
    #[arg(long = "vm-module", value_name = "PATTERN", value_parser = parse_vm_module)]
    vm_modules: Vec<String>,
    /// Count the libraries of known language runtimes (libjvm.so, libpython3.x.so,
    /// libnode.so, libruby, libluajit, libmono...) as other code. By default they are vanilla
    /// vm code, and the report's header names them.
    #[arg(long)]
    no_runtime_modules: bool,
    /// Group each section's rows by KEYS, as `perf report --sort` does: `comm` (process name),
    /// `pid` (process), `tid` (thread, `name[tid]`: a JVM's `C2 CompilerThread0`, `GC
    /// Thread#0`), `dso` (module), `sym` (function), `srcline` (the source line the samples
    /// fell in, `hot.c:12`, from DWARF; not with `tid`), `label:KEY` (the value of the
    /// program's label KEY, `phase=a` or `phase unset`; not with `tid` or `srcline`). `--sort
    /// pid` tells processes apart in a system-wide profile; `--sort comm,sym` shows functions
    /// per program; `--sort tid,sym` functions per thread; `--sort srcline` the hot lines;
    /// `--sort label:phase,sym` functions per phase. With --tree, --callers or --callees, the
    /// label keys root each stack under its values.
    #[arg(
        long,
        value_name = "KEYS",
        value_delimiter = ',',
        value_parser = SortKey::parse,
        default_value = "sym"
    )]
    sort: Vec<SortKey>,
    /// Only these threads (kernel task ids; repeat or separate with commas): the daemon builds
    /// the report from their samples and blocks alone, rows and bytecode ranges included.
    #[arg(long = "tid", value_name = "TID", value_delimiter = ',')]
    tids: Vec<u32>,
    /// Only the threads whose name matches PATTERN (`*` any characters, `?` one): 'GC
    /// Thread*', 'C2 CompilerThread0', mutator; repeat for several. With --tid, the threads
    /// either names.
    #[arg(long = "thread", value_name = "PATTERN")]
    thread_names: Vec<String>,
    /// Only the samples whose thread had label KEY set to VALUE when they were taken (labels
    /// a program sets with proto/vmscope_labels.h or the code map protocol); `KEY=` for those
    /// without a label of KEY. Repeat for several: samples with all of them.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<String>,
    /// One report block per value of label KEY (`label:KEY`), most samples first, then one
    /// for the samples without it: each with the usual sections, ranges and trees of its
    /// samples alone. Text and JSON.
    #[arg(long = "group-by", value_name = "label:KEY", value_parser = parse_group_by)]
    group_by: Option<String>,
}

/// `--label KEY=VALUE` (the daemon checks the sizes).
fn parse_label(s: &str) -> Result<String, String> {
    vmscope_model::LabelFilter::parse(&[s])
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

/// `--group-by label:KEY`: the key.
fn parse_group_by(s: &str) -> Result<String, String> {
    match s.strip_prefix("label:") {
        Some(key) if !key.is_empty() && !key.contains('=') => Ok(key.to_owned()),
        _ => Err(format!(
            "`{s}` is not label:KEY (reports group by a label's values: label:phase)"
        )),
    }
}

/// How `diff` and `check` read and compare their profiles.
#[derive(Debug, Args)]
struct CompareArgs {
    /// Compare each function's share of its side's samples instead of its time: for runs of
    /// the same length (`record --duration`) rather than of the same work.
    #[arg(long)]
    normalize: bool,
    /// Compare every frame of session profiles' stacks, not the language view (see `report
    /// --native`); pprof files are read as they were written.
    #[arg(long)]
    native: bool,
    /// Compare only the samples labelled KEY=VALUE on both sides (`KEY=` for those without a
    /// label of KEY; repeat for several): the daemon builds each session's profile from them
    /// alone. For sessions; cut a pprof file with `go tool pprof -tagfocus`.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<String>,
}

impl CompareArgs {
    /// The samples each session's side is of, refused for pprof files, which the daemon does
    /// not cut.
    fn samples(&self, inputs: &[&vmscope::diff::Input]) -> anyhow::Result<sessions::Threads> {
        if !self.labels.is_empty()
            && inputs
                .iter()
                .any(|i| matches!(i, vmscope::diff::Input::File(_)))
        {
            anyhow::bail!(
                "--label cuts sessions; cut a pprof file with go tool pprof -tagfocus KEY=VALUE"
            );
        }
        Ok(sessions::Threads {
            labels: self.labels.clone(),
            ..Default::default()
        })
    }

    fn report_options(&self) -> ReportOptions {
        let mut options = ReportOptions::default();
        if self.native {
            options.stacks.frames = FrameView::Native;
        }
        options
    }
}

/// `heap --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum HeapFormat {
    /// The growth, then the largest classes.
    Text,
    /// The histogram and its growth, every class, for scripts.
    Json,
}

/// `fit --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FitFormat {
    /// One block per function.
    Text,
    /// The fits' numbers, for scripts.
    Json,
}

/// `diff --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DiffFormat {
    /// Tables of self and inclusive time.
    Text,
    /// The diff's numbers, for scripts.
    Json,
    /// A differential flame graph (SVG).
    Flamegraph,
}

/// `--count MODULE:FUNCTION`, a module given as a path made absolute: the daemon does not run
/// in the caller's directory.
fn parse_count(s: &str) -> Result<String, String> {
    let Some((module, function)) = s.rsplit_once(':') else {
        return Err(format!("`{s}` is not MODULE:FUNCTION (libc.so.6:malloc)"));
    };
    if module.is_empty() || function.is_empty() {
        return Err(format!("`{s}` is not MODULE:FUNCTION (libc.so.6:malloc)"));
    }
    if !module.contains('/') {
        return Ok(s.to_owned());
    }
    let path = std::path::absolute(module).map_err(|e| format!("{module}: {e}"))?;
    Ok(format!("{}:{function}", path.display()))
}

/// `--param KEY=VALUE` (the daemon checks the key's characters and the sizes).
fn parse_param(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

/// `--max-count FUNCTION=N`, N a whole number, in scientific notation too (`1e6`).
fn parse_max_count(s: &str) -> Result<(String, u64), String> {
    let (function, n) = s
        .rsplit_once('=')
        .filter(|(f, _)| !f.is_empty())
        .ok_or_else(|| format!("`{s}` is not FUNCTION=N (libc.so.6:malloc=1e6)"))?;
    let n: f64 = n
        .trim()
        .parse()
        .map_err(|_| format!("`{n}` is not a number of calls"))?;
    if !(0.0..=u64::MAX as f64).contains(&n) || n.fract() != 0.0 {
        return Err(format!("{n} is not a whole number of calls"));
    }
    Ok((function.to_owned(), n as u64))
}

/// `--max-increase`: a percentage, 0 or more.
fn parse_increase(s: &str) -> Result<f64, String> {
    let percent: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("`{s}` is not a percentage"))?;
    if !percent.is_finite() || percent < 0.0 {
        return Err(format!("an increase is 0% or more, not {s}"));
    }
    Ok(percent)
}

/// `vmscope diff`.
async fn run_diff(
    socket: &std::path::Path,
    [base, new]: [vmscope::diff::Input; 2],
    compare: &CompareArgs,
    format: DiffFormat,
    fold: Option<f64>,
    output: Option<&std::path::Path>,
) -> anyhow::Result<i32> {
    let destination = Destination::choose(output, false);
    let mut out = destination.open()?;
    let sides = vmscope::diff::load(
        socket,
        &[&base, &new],
        &compare.report_options(),
        &compare.samples(&[&base, &new])?,
    )
    .await?;
    let options = vmscope_report::diff::DiffOptions {
        normalize: compare.normalize,
        min_percent: fold.unwrap_or(vmscope_report::diff::DiffOptions::default().min_percent),
    };
    let diff = vmscope::diff::compare(&sides[0], &sides[1], [&base, &new], &options);
    match format {
        DiffFormat::Text => vmscope::diff::render_text(&diff, &mut out)?,
        DiffFormat::Json => {
            serde_json::to_writer_pretty(&mut out, &diff)?;
            writeln!(out)?;
        }
        DiffFormat::Flamegraph => {
            vmscope::diff::render_flamegraph(&sides[0], &sides[1], &diff, &mut out)?
        }
    }
    out.flush()?;
    Ok(0)
}

/// `vmscope check`: 0 when every assertion holds, 1 when one fails, 2 when it cannot check.
async fn run_check(
    socket: &std::path::Path,
    base: Option<vmscope::diff::Input>,
    new: Option<vmscope::diff::Input>,
    compare: &CompareArgs,
    assertions: vmscope::check::Assertions,
    heap: vmscope::heap_check::HeapChecks,
) -> i32 {
    let checked = async {
        let mut outcomes = if heap.assertions.is_empty() {
            Vec::new()
        } else {
            heap.judge(socket).await?
        };
        let Some(new) = new else {
            return Ok(vmscope::check::report(
                &outcomes,
                &mut std::io::stdout().lock(),
            )?);
        };
        if assertions.max_increase.is_none() && assertions.max_counts.is_empty() {
            anyhow::bail!("nothing to check: give --baseline with --max-increase, or --max-count");
        }
        let inputs: Vec<&vmscope::diff::Input> = base.iter().chain([&new]).collect();
        let sides = vmscope::diff::load(
            socket,
            &inputs,
            &compare.report_options(),
            &compare.samples(&inputs)?,
        )
        .await?;
        let new_side = sides.last().expect("NEW is loaded");
        outcomes.extend(vmscope::check::judge_counts(new_side, &assertions)?);
        if let Some(base) = &base {
            let options = vmscope_report::diff::DiffOptions {
                normalize: compare.normalize,
                min_percent: 0.0,
            };
            let diff = vmscope::diff::compare(&sides[0], new_side, [base, &new], &options);
            outcomes.extend(vmscope::check::judge(&diff, &assertions)?);
        }
        Ok::<_, anyhow::Error>(vmscope::check::report(
            &outcomes,
            &mut std::io::stdout().lock(),
        )?)
    };
    match checked.await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vmscope: {}", vmscope::error_text::chain_text(&e));
            2
        }
    }
}

/// `--call-graph`, spelt as perf spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallGraphArg {
    /// The interrupted instruction only.
    None,
    /// Kernel and user stacks by frame pointers.
    Fp,
    /// The kernel stack, and the user stack unwound from a copy of this many bytes of it.
    Dwarf(u32),
}

impl CallGraphArg {
    /// `none`, `fp`, `dwarf` or `dwarf,SIZE`. As in perf, SIZE is rounded up to a multiple of 8
    /// and must then be from 8 to 65528.
    fn parse(text: &str) -> Result<CallGraphArg, String> {
        let (mode, size) = match text.split_once(',') {
            Some((mode, size)) => (mode, Some(size)),
            None => (text, None),
        };
        match (mode, size) {
            ("none", None) => Ok(CallGraphArg::None),
            ("fp", None) => Ok(CallGraphArg::Fp),
            ("dwarf", None) => Ok(CallGraphArg::Dwarf(DEFAULT_DWARF_STACK_BYTES)),
            ("dwarf", Some(size)) => {
                let bad = || {
                    format!(
                        "stack dump size {size:?} is not a number of bytes from 1 to \
                         {MAX_DWARF_STACK_BYTES}"
                    )
                };
                let bytes: u32 = size.trim().parse().map_err(|_| bad())?;
                let bytes = bytes.checked_next_multiple_of(8).ok_or_else(bad)?;
                if bytes == 0 || bytes > MAX_DWARF_STACK_BYTES {
                    return Err(bad());
                }
                Ok(CallGraphArg::Dwarf(bytes))
            }
            ("none" | "fp", Some(_)) => Err(format!("{mode} takes no size")),
            _ => Err(format!(
                "unknown call graph mode {text:?}: give none, fp, dwarf or dwarf,SIZE"
            )),
        }
    }
}

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    /// CPU time, by samples.
    Cpu,
    /// Time off the CPU, by blocks.
    OffCpu,
    /// Both: wall-clock time.
    Wall,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    /// The VMProfiler-style report.
    Text,
    /// The report's numbers and the call stacks, for scripts.
    Json,
    /// Gzipped pprof (binary: give -o FILE), for go tool pprof, Pyroscope, Parca, speedscope.
    Pprof,
    /// Folded stacks, `root;...;leaf count`, for inferno, flamegraph.pl, speedscope.
    Folded,
    /// An SVG flame graph: JIT code green, inlined aqua, kernel orange, native red.
    Flamegraph,
}

impl OutputArgs {
    /// The threads the report is of.
    fn threads(&self) -> vmscope::sessions::Threads {
        vmscope::sessions::Threads {
            tids: self.tids.clone(),
            names: self.thread_names.clone(),
            labels: self.labels.clone(),
        }
    }

    fn format(&self) -> Format {
        match self.format {
            FormatArg::Text => Format::Text,
            FormatArg::Json => Format::Json,
            FormatArg::Pprof => Format::Pprof,
            FormatArg::Folded => Format::Folded,
            FormatArg::Flamegraph => Format::Flamegraph,
        }
    }

    /// The call tree asked for, if any, folded at `--fold` or its tree default.
    fn tree(&self) -> Option<TreeOptions> {
        let view = match (&self.callers, &self.callees) {
            (Some(name), _) => TreeView::Callers(name.clone()),
            (None, Some(name)) => TreeView::Callees(name.clone()),
            (None, None) if self.tree => TreeView::TopDown,
            (None, None) => return None,
        };
        Some(TreeOptions {
            view,
            fold_percent: self.fold.unwrap_or(DEFAULT_FOLD_PERCENT),
            labels: vmscope::report::sort_keys::label_keys(&self.sort)
                .into_iter()
                .map(str::to_owned)
                .collect(),
        })
    }

    /// The report options; fails before anything is recorded when they cannot be honoured.
    fn options(&self) -> anyhow::Result<ReportOptions> {
        let defaults = ReportOptions::default();
        let tree = self.tree();
        if tree.is_some() {
            check_tree_format(self.format())?;
        }
        if self.stats {
            check_stats_format(self.format())?;
        }
        vmscope::report::sort_keys::check(&self.sort).map_err(anyhow::Error::msg)?;
        if self.weight.is_some() && tree.is_none() && self.format() == Format::Text {
            anyhow::bail!(
                "--weight weighs the call trees and the stack formats, not the flat report's \
                 rows: add --tree (or --callers, --callees) or a stack --format"
            );
        }
        Ok(ReportOptions {
            min_percent: self.fold.unwrap_or(defaults.min_percent),
            name_width: if self.wide { 0 } else { defaults.name_width },
            vm_modules: self.vm_modules.clone(),
            runtime_modules: !self.no_runtime_modules,
            sort: self.sort.clone(),
            tree,
            stacks: StackOptions {
                frames: if self.native {
                    FrameView::Native
                } else {
                    FrameView::Language
                },
                collapse_recursion: self.collapse_recursion,
            },
            stats: self.stats,
            weight: self.weight,
            ..defaults
        })
    }
}

/// A measure to weigh stacks by (`--weight`), as JSON's `sample_types` or pprof name it.
fn parse_weight(name: &str) -> Result<vmscope_model::SampleType, String> {
    vmscope_model::SampleType::from_name(name).ok_or_else(|| {
        format!("no measure {name:?}: sends, samples, cpu, off_cpu, off_cpu_blocks or wall")
    })
}

/// Module patterns match file names: a path would never match, so it is refused rather than
/// silently moving nothing.
fn parse_vm_module(pattern: &str) -> Result<String, String> {
    if pattern.is_empty() {
        return Err("the pattern is empty".to_owned());
    }
    if pattern.contains('/') {
        let file_name = pattern.rsplit('/').next().unwrap_or_default();
        return Err(if file_name.is_empty() {
            format!(
                "`{pattern}` is a directory, but patterns match module file names only: \
                 name its libraries, e.g. 'lib*Plugin.so'"
            )
        } else {
            format!(
                "`{pattern}` is a path, but patterns match module file names only: \
                 give `{file_name}`"
            )
        });
    }
    Ok(pattern.to_owned())
}

/// A percentage of all samples: 0 to 100.
fn parse_percent(s: &str) -> Result<f64, String> {
    let percent: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("`{s}` is not a percentage"))?;
    if !(0.0..=100.0).contains(&percent) {
        return Err(format!("a percentage is 0 to 100, not {s}"));
    }
    Ok(percent)
}

/// A duration with a unit (`ns`, `us`, `ms`, `s`) or in seconds without one: 0 or more.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let units = [
        ("ns", 1e-9),
        ("us", 1e-6),
        ("µs", 1e-6),
        ("ms", 1e-3),
        ("s", 1.0),
    ];
    let (number, scale) = units
        .iter()
        .find_map(|&(unit, scale)| s.strip_suffix(unit).map(|n| (n, scale)))
        .unwrap_or((s, 1.0));
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (give 50us, 1ms, 0.5s...)"))?;
    if !(value >= 0.0 && value.is_finite()) {
        return Err(format!("a duration is 0 or more, not {s}"));
    }
    Duration::try_from_secs_f64(value * scale).map_err(|e| e.to_string())
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let seconds: f64 = s
        .trim_end_matches('s')
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(seconds > 0.0 && seconds.is_finite()) {
        return Err(format!("duration must be positive, not {s}"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

fn record_options(args: RecordArgs) -> anyhow::Result<RecordOptions> {
    let target = match (args.pids.is_empty(), args.system, args.command.is_empty()) {
        (false, false, true) => Target::Pids(args.pids),
        (true, true, true) => Target::System,
        (true, false, false) => Target::Command(args.command),
        (true, false, true) => {
            anyhow::bail!("nothing to record: give --pid PID, --system, or -- CMD ARGS...")
        }
        _ => anyhow::bail!("give only one of --pid, --system and -- CMD"),
    };
    if args.g && args.call_graph == CallGraphArg::None {
        anyhow::bail!("-g means --call-graph fp: give either -g or --call-graph none");
    }
    if args.mode != ModeArg::Cpu && args.call_graph == CallGraphArg::None {
        anyhow::bail!(
            "--mode {} needs call stacks: a thread off its CPU is always in the scheduler, and \
             only its stack says what it waited in; give --call-graph fp or dwarf",
            if args.mode == ModeArg::Wall {
                "wall"
            } else {
                "off-cpu"
            }
        );
    }
    if args.mode == ModeArg::Cpu && args.min_block.is_some() {
        anyhow::bail!("--min-block goes with --mode off-cpu or wall: a CPU profile has no blocks");
    }
    Ok(RecordOptions {
        target,
        frequency_hz: args.frequency,
        duration: args.duration,
        call_graph: match args.call_graph {
            CallGraphArg::None => CallGraph::None,
            CallGraphArg::Fp => CallGraph::Fp,
            CallGraphArg::Dwarf(_) => CallGraph::Dwarf,
        },
        dwarf_stack_bytes: match args.call_graph {
            CallGraphArg::Dwarf(bytes) => Some(bytes),
            _ => None,
        },
        no_jvm_attach: args.no_jvm_attach,
        mode: match args.mode {
            ModeArg::Cpu => ProfileMode::Cpu,
            ModeArg::OffCpu => ProfileMode::OffCpu,
            ModeArg::Wall => ProfileMode::Wall,
        },
        min_block: args.min_block,
        params: args.params,
        counts: args.counts,
        heap: args.heap,
        threads: args.output.threads(),
        format: args.output.format(),
        report: args.output.options()?,
    })
}

async fn run(cli: Cli) -> anyhow::Result<i32> {
    let stdout = || -> Box<dyn Write> { Box::new(std::io::stdout().lock()) };
    match cli.command {
        Command::Record(args) => {
            let destination =
                Destination::choose(args.output.output.as_deref(), !args.command.is_empty());
            destination.check_format(args.output.format())?;
            let options = record_options(args)?;
            let mut out = destination.open()?;
            let code = vmscope::record::record(&cli.socket, options, &mut out).await?;
            out.flush()?;
            Ok(code)
        }
        Command::Sessions => sessions::list(&cli.socket, &mut stdout()).await.map(|()| 0),
        Command::Stop { id } => sessions::stop(&cli.socket, id, &mut stdout())
            .await
            .map(|()| 0),
        Command::Report { id, output } => {
            let threads = output.threads();
            if let Some(key) = &output.group_by {
                return print_groups(&cli.socket, id, &threads, key, &output).await;
            }
            print_profile(&output, sessions::profile(&cli.socket, id, &threads)).await
        }
        Command::Continuous {
            since,
            pid,
            exe,
            output,
        } => {
            let request = vmscope_proto::v1::GetContinuousProfileRequest {
                start: since.map(|since| (std::time::SystemTime::now() - since).into()),
                pid: pid.unwrap_or(0),
                executable: exe.unwrap_or_default(),
                ..Default::default()
            };
            print_profile(&output, sessions::continuous(&cli.socket, request)).await
        }
        Command::Diff {
            base,
            new,
            compare,
            format,
            fold,
            output,
        } => {
            run_diff(
                &cli.socket,
                [base, new],
                &compare,
                format,
                fold,
                output.as_deref(),
            )
            .await
        }
        Command::Check {
            new,
            functions,
            baseline,
            max_increase,
            max_counts,
            self_time,
            compare,
            heap,
            pid,
            heap_id,
            since,
        } => Ok(run_check(
            &cli.socket,
            baseline,
            new,
            &compare,
            vmscope::check::Assertions {
                max_increase,
                functions,
                self_time,
                max_counts,
            },
            vmscope::heap_check::HeapChecks {
                assertions: heap,
                pid,
                id: heap_id,
                since,
            },
        )
        .await),
        Command::Fit {
            profiles,
            param,
            functions,
            min_percent,
            self_time,
            format,
            native,
        } => {
            let compare = CompareArgs {
                normalize: false,
                native,
                labels: Vec::new(),
            };
            let inputs: Vec<&vmscope::diff::Input> = profiles.iter().collect();
            let sides = vmscope::diff::load(
                &cli.socket,
                &inputs,
                &compare.report_options(),
                &Default::default(),
            )
            .await?;
            let fits = vmscope::fit::fits(
                &sides,
                &vmscope::fit::FitOptions {
                    param,
                    self_time,
                    functions,
                    min_percent,
                },
            )?;
            let mut out = stdout();
            match format {
                FitFormat::Text => {
                    vmscope::fit::render_text(&fits, &sides[0].main_executable, &mut out)?
                }
                FitFormat::Json => {
                    serde_json::to_writer_pretty(&mut out, &fits)?;
                    writeln!(out)?;
                }
            }
            out.flush()?;
            Ok(0)
        }
        Command::Heap {
            pid: Some(pid),
            query: Some(query),
            all,
            timeout,
            format,
            output,
            ..
        } => {
            let json = format == HeapFormat::Json;
            let ask = vmscope::heap_query::Ask {
                pid,
                query: &query,
                all,
                timeout,
            };
            vmscope::heap_query::run(&cli.socket, ask, json, output.as_deref()).await?;
            Ok(0)
        }
        Command::Heap {
            pid,
            id,
            since,
            query: _,
            all,
            timeout,
            top,
            format,
            output,
        } => {
            let which = match (pid, id) {
                (Some(pid), _) => vmscope::heap::Which::Take { pid, all, timeout },
                (None, Some(id)) => vmscope::heap::Which::Kept(id),
                (None, None) => unreachable!("clap requires --pid or --id"),
            };
            let json = format == HeapFormat::Json;
            vmscope::heap::run(&cli.socket, which, since, top, json, output.as_deref()).await?;
            Ok(0)
        }
        Command::Info { json } => sessions::info(&cli.socket, json, &mut stdout())
            .await
            .map(|()| 0),
    }
}

/// Writes the profile `profile` fetches where and as `output` says.
async fn print_profile(
    output: &OutputArgs,
    profile: impl std::future::Future<Output = anyhow::Result<vmscope_model::Profile>>,
) -> anyhow::Result<i32> {
    let destination = Destination::choose(output.output.as_deref(), false);
    destination.check_format(output.format())?;
    let mut out = destination.open()?;
    let options = output.options()?;
    vmscope::report::render_profile(&profile.await?, &options, output.format(), &mut out)?;
    out.flush()?;
    Ok(0)
}

/// `report --group-by label:KEY`: one report per value of `key` among the samples `threads`
/// keeps, then one of those without it.
async fn print_groups(
    socket: &std::path::Path,
    id: u64,
    threads: &sessions::Threads,
    key: &str,
    output: &OutputArgs,
) -> anyhow::Result<i32> {
    let format = output.format();
    if !matches!(format, Format::Text | Format::Json) {
        anyhow::bail!(
            "--group-by draws text or json; pprof, folded stacks and flame graphs carry the \
             labels themselves (pprof: -tagfocus {key}=VALUE), or cut one with --label"
        );
    }
    let destination = Destination::choose(output.output.as_deref(), false);
    let options = output.options()?;
    let whole = sessions::profile(socket, id, threads).await?;
    let mut groups = Vec::new();
    for group in vmscope::report::groups::label_groups(&whole, key) {
        let cut = threads.with_label(group.filter());
        groups.push((group, sessions::profile(socket, id, &cut).await?));
    }
    let mut out = destination.open()?;
    vmscope::report::groups::render_groups(&whole, key, &groups, &options, format, &mut out)?;
    out.flush()?;
    Ok(0)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("vmscope: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            if vmscope::output::closed_by_reader(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("vmscope: {}", vmscope::error_text::chain_text(&e));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call_graph(args: &[&str]) -> anyhow::Result<CallGraph> {
        Ok(call_graph_and_size(args)?.0)
    }

    fn call_graph_and_size(args: &[&str]) -> anyhow::Result<(CallGraph, Option<u32>)> {
        let cli = Cli::try_parse_from(["vmscope", "record", "-p", "1"].iter().chain(args))?;
        let Command::Record(args) = cli.command else {
            panic!("not a record command");
        };
        let options = record_options(args)?;
        Ok((options.call_graph, options.dwarf_stack_bytes))
    }

    #[test]
    fn dwarf_call_graphs_parse_as_in_perf() {
        let dwarf = |arg: &str| call_graph_and_size(&["--call-graph", arg]);
        assert_eq!(dwarf("dwarf").unwrap(), (CallGraph::Dwarf, Some(8192)));
        assert_eq!(
            dwarf("dwarf,16384").unwrap(),
            (CallGraph::Dwarf, Some(16384))
        );
        assert_eq!(
            dwarf("dwarf,65528").unwrap(),
            (CallGraph::Dwarf, Some(65528))
        );
        assert_eq!(
            dwarf("dwarf,100").unwrap(),
            (CallGraph::Dwarf, Some(104)),
            "rounded up to 8 bytes, as perf does"
        );
        for bad in [
            "dwarf,0",
            "dwarf,65529",
            "dwarf,65536",
            "dwarf,",
            "dwarf,8k",
            "fp,8",
            "lbr",
        ] {
            assert!(dwarf(bad).is_err(), "{bad}");
        }
        assert_eq!(call_graph_and_size(&["-g"]).unwrap(), (CallGraph::Fp, None));
    }

    #[test]
    fn modes_and_minimum_blocks_parse_and_need_what_they_need() {
        let options = |args: &[&str]| -> anyhow::Result<RecordOptions> {
            let cli = Cli::try_parse_from(["vmscope", "record", "-p", "1"].iter().chain(args))?;
            let Command::Record(args) = cli.command else {
                panic!("not a record command");
            };
            record_options(args)
        };
        assert_eq!(options(&[]).unwrap().mode, ProfileMode::Cpu);
        let off = options(&["--mode", "off-cpu", "--min-block", "50us"]).unwrap();
        assert_eq!(off.mode, ProfileMode::OffCpu);
        assert_eq!(off.min_block, Some(Duration::from_micros(50)));
        let wall = options(&["--mode", "wall", "--min-block", "1.5ms"]).unwrap();
        assert_eq!(
            (wall.mode, wall.min_block),
            (ProfileMode::Wall, Some(Duration::from_micros(1500)))
        );
        assert_eq!(
            options(&["--mode", "wall", "--min-block", "2"])
                .unwrap()
                .min_block,
            Some(Duration::from_secs(2)),
            "seconds without a unit"
        );
        for bad in ["-1ms", "fast", "1h"] {
            assert!(
                options(&["--mode", "wall", "--min-block", bad]).is_err(),
                "{bad}"
            );
        }
        let none = options(&["--mode", "off-cpu", "--call-graph", "none"]).unwrap_err();
        assert!(none.to_string().contains("needs call stacks"), "{none}");
        let cpu = options(&["--min-block", "1ms"]).unwrap_err();
        assert!(
            cpu.to_string().contains("goes with --mode off-cpu or wall"),
            "{cpu}"
        );
    }

    #[test]
    fn call_graph_is_fp_unless_none_is_asked_for() {
        assert_eq!(call_graph(&[]).unwrap(), CallGraph::Fp);
        assert_eq!(call_graph(&["-g"]).unwrap(), CallGraph::Fp);
        assert_eq!(call_graph(&["--call-graph", "fp"]).unwrap(), CallGraph::Fp);
        assert_eq!(
            call_graph(&["--call-graph", "none"]).unwrap(),
            CallGraph::None
        );
        assert!(call_graph(&["-g", "--call-graph", "none"]).is_err());
    }

    #[test]
    fn stacks_show_the_language_view_unless_native_and_collapse_on_request() {
        let stacks = |args: &[&str]| -> StackOptions {
            let cli = Cli::try_parse_from(["vmscope", "record", "-p", "1"].iter().chain(args))
                .expect("parses");
            let Command::Record(args) = cli.command else {
                panic!("not a record command");
            };
            record_options(args).expect("options").report.stacks
        };
        assert_eq!(stacks(&[]), StackOptions::DEFAULT);
        assert_eq!(stacks(&["--tree"]).frames, FrameView::Language);
        assert_eq!(
            stacks(&["--native", "--collapse-recursion", "--format", "folded"]),
            StackOptions {
                frames: FrameView::Native,
                collapse_recursion: true,
            }
        );
    }
}
