//! A profile as pprof: gzipped google/pprof `profile.proto`, for `go tool pprof`, Pyroscope,
//! Parca and speedscope.
//!
//! The mapping from a [`model::Profile`]:
//!
//! - The profile's sample types ([`model::Profile::sample_types`]) in its order, named as pprof
//!   names them: `samples/count` and `cpu/nanoseconds` from the daemon (the default, being
//!   last), each sample's values its stack's. One period is `1e9 / frequency` nanoseconds of
//!   CPU, the sampling interval the session asked for; `period_type` is `cpu/nanoseconds`.
//! - One pprof `Sample` per [`model::Stack`], its locations leaf first as both formats want, with
//!   the labels `pid` (number), `comm` (the process's name, when known), `thread.id` (number)
//!   and `thread.name` (when known), `truncated` = `true`
//!   for stacks cut at the depth limit, and `attribution` = `later_snapshot` for stacks with
//!   generated code named from a perf map read after the sample (not time-correct), and one
//!   `vm_interval` label per kind of interval its VM had under way when the samples were
//!   taken (`scavenge`, `full_gc`, `code_compaction`, `safepoint`, or the VM's own name of
//!   the kind), so that `-tagfocus vm_interval=scavenge` cuts a flame graph to the GC's time;
//!   and the labels its thread had set (codemap.proto's `LabelSet`), each under its own key
//!   (`-tagfocus phase=compile`), or `label.KEY` for a key that is one of the above.
//! - One `Mapping` per module (and build id): file name (the target's executable path for the
//!   main executable, else the module's name as reports show it) and build id. The profile
//!   aggregates by frame, not by address, so mappings have no address range and locations
//!   have address 0; every mapping says it has functions, so pprof never tries to symbolise
//!   them again from the local disk.
//! - One `Function` per (name, module): `name` and `system_name` are the frame's name,
//!   `filename` its source file where DWARF gave one ([`model::Frame::file`], so that `-list`
//!   finds the source), else the module (or for generated code the code map that named it:
//!   `vm`, `jitdump`, `perf map`).
//! - One `Location` per frame, whose `Line.line` is where in the function the frame is: the
//!   source line DWARF gave ([`model::Frame::line`]), or the first bytecode pc of its range
//!   (`74->78` gives 74, so `-lines` shows call sites), or a source position's line and column
//!   (`app.js:12:5`). Inlined functions are folded the way pprof represents inlining: a run of
//!   frames marked [`model::Frame::inlined`] (methods inlined into optimised JIT code, C functions
//!   inlined by the compiler) and the frame after them that holds them become **one**
//!   `Location` with one `Line` per function, innermost first, holder last. So pprof's
//!   inclusive time counts a function and those inlined into it the way it does for C.
//! - Off-CPU and wall profiles add the sample types `off_cpu_blocks/count`, `off_cpu/nanoseconds`
//!   and (wall) `wall/nanoseconds`, with `default_sample_type` the profile's main measure (from
//!   a client's view, [`encode_shown`], it comes first); a stack of blocks is labelled
//!   `thread.state` (`sleeping`, `uninterruptible`, `preempted`...). An off-CPU profile's
//!   `period_type` is `off_cpu/nanoseconds`, its period 1.
//! - The session's workload parameters (`record --param n=1000`) are comments `vmscope param
//!   n=1000` ([`crate::diff::PARAM_COMMENT`]), and the calls it counted (`record --count`)
//!   comments `vmscope calls libc.so.6:malloc pid 42: 1000000` ([`crate::diff::CALLS_COMMENT`]),
//!   which `vmscope diff` and `check` read back.
//! - `time_nanos` is the session's start, `duration_nanos` its sampled time; a few comments say
//!   which session, at what frequency, and what was lost or truncated, and, from a client that
//!   chose how to show the stacks ([`encode_shown`]), which view they are in.

use std::{
    collections::HashMap,
    io::{self, Write as _},
    path::Path,
    sync::LazyLock,
};

use crate::{processes::process_names, stack_view::ShownStacks};
use flate2::{Compression, write::GzEncoder};
use prost::Message as _;
use vmscope_model::{self as model, SampleType};
use vmscope_proto::{DEFAULT_FREQUENCY_HZ, pprof as pp};

/// The label keys vmscope writes itself: a program's label of one of these keys is written as
/// `label.KEY`.
pub const RESERVED_LABEL_KEYS: &[&str] = &[
    "pid",
    "comm",
    "thread.id",
    "thread.name",
    "thread.state",
    "truncated",
    "attribution",
    "vm_interval",
];

/// The profile as a gzipped pprof file. Fails only if gzip fails to write into memory, which
/// it does not in practice; the error is kept rather than hidden behind a panic.
pub fn encode(profile: &model::Profile) -> io::Result<Vec<u8>> {
    gzip(&to_pprof(profile))
}

/// [`encode`] of the stacks as a client shows them ([`ShownStacks`]: the language view, or
/// every frame; recursion collapsed or not), with a comment that says which.
pub fn encode_shown(shown: &ShownStacks<'_>) -> io::Result<Vec<u8>> {
    let mut pprof = to_pprof(&shown.profile);
    pprof.comment.push(pprof.string_table.len() as i64);
    pprof
        .string_table
        .push(format!("stacks: {}", shown.describe()));
    gzip(&pprof)
}

fn gzip(pprof: &pp::Profile) -> io::Result<Vec<u8>> {
    let raw = pprof.encode_to_vec();
    let mut gzip = GzEncoder::new(
        Vec::with_capacity(raw.len() / 4 + 64),
        Compression::default(),
    );
    gzip.write_all(&raw)?;
    gzip.finish()
}

/// The profile as pprof's message, before gzip: what [`encode`] writes, for callers that embed
/// it or check it.
pub fn to_pprof(profile: &model::Profile) -> pp::Profile {
    Builder::new(profile).build()
}

/// Nanoseconds of CPU time one sample stands for: the interval of the session's frequency
/// (1400 Hz when the profile does not say).
pub fn period_nanos(profile: &model::Profile) -> i64 {
    let hz = profile
        .session
        .as_ref()
        .map(|s| s.frequency_hz)
        .filter(|&hz| hz > 0)
        .unwrap_or(DEFAULT_FREQUENCY_HZ);
    (1_000_000_000.0 / f64::from(hz)).round() as i64
}

/// Where in its function a frame is, from its range label: `(line, column)`, 0 when unknown.
/// Bytecode ranges (`74->78`, `38->end`) give their first pc; `start->3` has none. Source
/// positions (`app.js:12:5`, `app.js:12`) give their line and column.
pub fn range_position(range: &str) -> (i64, i64) {
    // Most frames are native, with no range: they skip the searches below.
    if range.is_empty() {
        return (0, 0);
    }
    if let Some((first, _)) = range.split_once("->") {
        return (first.trim().parse().unwrap_or(0), 0);
    }
    let mut parts = range.rsplitn(3, ':');
    let (last, middle) = (parts.next(), parts.next());
    let file = parts.next();
    match (file, middle, last) {
        (Some(_), Some(line), Some(column)) => match (line.parse(), column.parse()) {
            (Ok(line), Ok(column)) => (line, column),
            _ => (column.parse().unwrap_or(0), 0),
        },
        (None, Some(_), Some(line)) => (line.parse().unwrap_or(0), 0),
        _ => (0, 0),
    }
}

/// Interns strings, functions, mappings and locations while the samples are written.
struct Builder<'a> {
    profile: &'a model::Profile,
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    mappings: Vec<pp::Mapping>,
    mapping_ids: HashMap<(&'a str, &'a str), u64>,
    functions: Vec<pp::Function>,
    function_ids: HashMap<(&'a str, &'a str), u64>,
    /// Functions whose `filename` is a source file (not a module's name).
    function_has_source: Vec<bool>,
    locations: Vec<pp::Location>,
    /// A location per run of frame indices: one frame, or inlined frames and their compiled
    /// method's frame.
    location_ids: HashMap<Vec<u32>, u64>,
    /// Executable path per module file name, from the session's targets.
    executables: HashMap<&'a str, &'a str>,
    /// Process names by pid.
    commands: HashMap<u32, &'a str>,
}

impl<'a> Builder<'a> {
    fn new(profile: &'a model::Profile) -> Self {
        let mut executables = HashMap::new();
        for target in profile.session.iter().flat_map(|s| &s.targets) {
            if let Some(name) = Path::new(&target.executable)
                .file_name()
                .and_then(|n| n.to_str())
            {
                executables.insert(name, target.executable.as_str());
            }
        }
        let commands = process_names(profile);
        Builder {
            profile,
            strings: vec![String::new()],
            string_ids: HashMap::from([(String::new(), 0)]),
            mappings: Vec::new(),
            mapping_ids: HashMap::new(),
            functions: Vec::new(),
            function_ids: HashMap::new(),
            function_has_source: Vec::new(),
            locations: Vec::new(),
            location_ids: HashMap::new(),
            executables,
            commands,
        }
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_owned());
        self.string_ids.insert(s.to_owned(), id);
        id
    }

    fn value_type(&mut self, kind: &str, unit: &str) -> pp::ValueType {
        pp::ValueType {
            r#type: self.string(kind),
            unit: self.string(unit),
        }
    }

    fn build(mut self) -> pp::Profile {
        let profile = self.profile;
        let mode = profile.mode();
        // Blocks are events of their own: an off-CPU profile's period is one block's time.
        let (period, period_type) = if mode == model::ProfileMode::OffCpu {
            (1, self.value_type("off_cpu", "nanoseconds"))
        } else {
            (period_nanos(profile), self.value_type("cpu", "nanoseconds"))
        };
        // A profile that names no type (built by hand) measured samples.
        let types: &[SampleType] = if profile.sample_types.is_empty() {
            &[SampleType::Samples]
        } else {
            &profile.sample_types
        };
        let sample_type: Vec<pp::ValueType> = types
            .iter()
            .map(|t| self.value_type(t.name(), t.unit()))
            .collect();
        let period_type = Some(period_type);
        // What `go tool pprof` shows unless told: the profile's main measure (its time off the
        // CPU, its wall-clock time); a CPU profile keeps pprof's default, its last type.
        let default_sample_type = if mode == model::ProfileMode::Cpu {
            0
        } else {
            self.string(profile.main_value().0.name())
        };
        let state_key = self.string("thread.state");
        let (pid_key, comm_key, truncated_key, true_value) = (
            self.string("pid"),
            self.string("comm"),
            self.string("truncated"),
            self.string("true"),
        );
        let (tid_key, thread_name_key) = (self.string("thread.id"), self.string("thread.name"));
        let thread_names: HashMap<(u32, u32), &str> = profile
            .threads
            .iter()
            .filter(|t| !t.name.is_empty())
            .map(|t| ((t.pid, t.tid), t.name.as_str()))
            .collect();
        let (attribution_key, later_snapshot_value) =
            (self.string("attribution"), self.string("later_snapshot"));
        let interval_key = self.string("vm_interval");
        let interval_values: Vec<i64> = profile
            .vm_interval_kinds
            .iter()
            .map(|k| self.string(k.key()))
            .collect();
        // The program's own labels, under their own keys, but for those that would be taken
        // for one of ours.
        let program_labels: Vec<(i64, i64)> = profile
            .labels
            .iter()
            .map(|l| {
                let key = if RESERVED_LABEL_KEYS.contains(&l.key.as_str()) {
                    self.string(&format!("label.{}", l.key))
                } else {
                    self.string(&l.key)
                };
                (key, self.string(&l.value))
            })
            .collect();

        // pprof takes the first mapping for the main binary ("File:" in its reports): the VM
        // executable's, when it has frames.
        let main_module = Path::new(&profile.vm_executable)
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| !n.is_empty());
        if let Some(main) = main_module.and_then(|m| profile.frames.iter().find(|f| f.module == m))
        {
            self.mapping(main);
        }

        let mut samples = Vec::with_capacity(profile.stacks.len());
        let mut frames: Vec<u32> = Vec::new();
        for stack in &profile.stacks {
            frames.clear();
            frames.extend(profile.stack_frames(stack));
            let location_id = self.stack_locations(&frames);
            let mut label = vec![pp::Label {
                key: pid_key,
                num: i64::from(stack.pid),
                ..Default::default()
            }];
            if let Some(&command) = self.commands.get(&stack.pid) {
                label.push(pp::Label {
                    key: comm_key,
                    str: self.string(command),
                    ..Default::default()
                });
            }
            label.push(pp::Label {
                key: tid_key,
                num: i64::from(stack.tid),
                ..Default::default()
            });
            if let Some(&name) = thread_names.get(&(stack.pid, stack.tid)) {
                label.push(pp::Label {
                    key: thread_name_key,
                    str: self.string(name),
                    ..Default::default()
                });
            }
            if stack.truncated {
                label.push(pp::Label {
                    key: truncated_key,
                    str: true_value,
                    ..Default::default()
                });
            }
            let later = frames.iter().any(|&f| {
                profile
                    .frames
                    .get(f as usize)
                    .is_some_and(|f| f.later_snapshot)
            });
            if later {
                label.push(pp::Label {
                    key: attribution_key,
                    str: later_snapshot_value,
                    ..Default::default()
                });
            }
            if let Some(state) = stack.state {
                label.push(pp::Label {
                    key: state_key,
                    str: self.string(state.as_str()),
                    ..Default::default()
                });
            }
            for &during in &stack.during {
                if let Some(&value) = interval_values.get(during as usize) {
                    label.push(pp::Label {
                        key: interval_key,
                        str: value,
                        ..Default::default()
                    });
                }
            }
            for &at in &stack.labels {
                if let Some(&(key, str)) = program_labels.get(at as usize) {
                    label.push(pp::Label {
                        key,
                        str,
                        ..Default::default()
                    });
                }
            }
            samples.push(pp::Sample {
                location_id,
                // One value per type, 0 where a stack has fewer than the profile's types.
                value: (0..types.len())
                    .map(|i| {
                        let value = stack.values.get(i).copied().unwrap_or(0);
                        i64::try_from(value).unwrap_or(i64::MAX)
                    })
                    .collect(),
                label,
            });
        }

        let session = profile.session.as_ref();
        let time_nanos = session
            .and_then(|s| s.started_at)
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |since| {
                i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
            });
        let duration_nanos = (profile.duration_seconds * 1e9).round() as i64;
        let comment = self.comments();

        pp::Profile {
            sample_type,
            sample: samples,
            mapping: self.mappings,
            location: self.locations,
            function: self.functions,
            string_table: self.strings,
            time_nanos,
            duration_nanos,
            period_type,
            period,
            comment,
            default_sample_type,
            ..Default::default()
        }
    }

    /// Lines for people reading the profile in pprof (`-comments`).
    fn comments(&mut self) -> Vec<i64> {
        let profile = self.profile;
        let mut lines = Vec::new();
        if let Some(session) = &profile.session {
            if session.mode.on_cpu() {
                let wall = if session.mode == model::ProfileMode::Wall {
                    " (wall)"
                } else {
                    ""
                };
                lines.push(format!(
                    "vmscope session {}{wall} at {} Hz: {} samples",
                    session.id, session.frequency_hz, profile.total_samples
                ));
            }
            if let Some(off) = &profile.off_cpu {
                lines.push(format!(
                    "vmscope session {} ({}): {} blocks off the CPU, {:.3} s (label \
                     thread.state says why)",
                    session.id,
                    session.mode.as_str(),
                    off.blocks,
                    off.total_ns as f64 / 1e9
                ));
                if off.short_blocks > 0 {
                    lines.push(format!(
                        "{} blocks shorter than --min-block left out ({:.3} s)",
                        off.short_blocks,
                        off.short_ns as f64 / 1e9
                    ));
                }
            }
        }
        for count in &profile.call_counts {
            lines.push(if count.note.is_empty() {
                format!(
                    "{}{} pid {}: {}",
                    crate::diff::CALLS_COMMENT,
                    count.function,
                    count.pid,
                    count.calls
                )
            } else {
                format!(
                    "{}{} pid {}: not counted: {}",
                    crate::diff::CALLS_COMMENT,
                    count.function,
                    count.pid,
                    count.note
                )
            });
        }
        for (key, value) in profile.session.iter().flat_map(|s| &s.params) {
            lines.push(format!("{}{key}={value}", crate::diff::PARAM_COMMENT));
        }
        if profile.lost_samples > 0 {
            lines.push(format!(
                "{} samples lost (ring buffer full, or past its share for users other than \
                 root): not in this profile",
                profile.lost_samples
            ));
        }
        if profile.truncated_stacks > 0 {
            lines.push(format!(
                "{} samples with stacks cut at the depth limit (label truncated=true)",
                profile.truncated_stacks
            ));
        }
        if profile.jit_samples_from_later_snapshot > 0 {
            lines.push(format!(
                "{} samples named from a perf map read after them, not time-correct (label \
                 attribution=later_snapshot)",
                profile.jit_samples_from_later_snapshot
            ));
        }
        lines.iter().map(|line| self.string(line)).collect()
    }

    /// Location ids of a stack, leaf first, each run of inlined frames folded with the
    /// compiled method's frame that follows it.
    fn stack_locations(&mut self, frames: &[u32]) -> Vec<u64> {
        let mut ids = Vec::with_capacity(frames.len());
        let mut start = 0;
        for (i, &index) in frames.iter().enumerate() {
            let inlined = self
                .profile
                .frames
                .get(index as usize)
                .is_some_and(|f| f.inlined);
            // A run ends at the first frame that is not inlined (the compiled method), or at
            // the end of a stack cut inside the run.
            if !inlined || i + 1 == frames.len() {
                ids.push(self.location(&frames[start..=i]));
                start = i + 1;
            }
        }
        ids
    }

    fn location(&mut self, run: &[u32]) -> u64 {
        if let Some(&id) = self.location_ids.get(run) {
            return id;
        }
        let profile = self.profile;
        let frame =
            |i: u32| -> &'a model::Frame { profile.frames.get(i as usize).unwrap_or(&MISSING) };
        // The compiled method's frame (the run's last) owns the code, hence the mapping.
        let outermost = frame(*run.last().expect("runs are never empty"));
        let mapping_id = self.mapping(outermost);
        let line = run
            .iter()
            .map(|&i| {
                let f = frame(i);
                let (line, column) = if f.line > 0 {
                    (i64::from(f.line), 0)
                } else {
                    range_position(&f.range)
                };
                pp::Line {
                    function_id: self.function(f),
                    line,
                    column,
                }
            })
            .collect();
        let id = self.locations.len() as u64 + 1;
        self.locations.push(pp::Location {
            id,
            mapping_id,
            address: 0,
            line,
            is_folded: false,
        });
        self.location_ids.insert(run.to_vec(), id);
        if run.len() > 1 && mapping_id > 0 {
            self.mappings[mapping_id as usize - 1].has_inline_frames = true;
        }
        id
    }

    /// The mapping of a frame's module, 0 (none) for a frame without one.
    fn mapping(&mut self, frame: &'a model::Frame) -> u64 {
        if frame.module.is_empty() {
            return 0;
        }
        let key = (frame.module.as_str(), frame.build_id.as_str());
        if let Some(&id) = self.mapping_ids.get(&key) {
            return id;
        }
        let path = self
            .executables
            .get(frame.module.as_str())
            .copied()
            .unwrap_or(&frame.module);
        let id = self.mappings.len() as u64 + 1;
        let mapping = pp::Mapping {
            id,
            filename: self.string(path),
            build_id: self.string(&frame.build_id),
            // Every location is named already: without this pprof would look for the file to
            // symbolise addresses we do not give.
            has_functions: true,
            ..Default::default()
        };
        self.mappings.push(mapping);
        self.mapping_ids.insert(key, id);
        id
    }

    /// The function of a frame: one per (name, module), named after its source file as soon as
    /// one of its frames has one.
    fn function(&mut self, frame: &'a model::Frame) -> u64 {
        let key = (frame.name.as_str(), frame.module.as_str());
        if let Some(&id) = self.function_ids.get(&key) {
            let index = id as usize - 1;
            if !frame.file.is_empty() && !self.function_has_source[index] {
                self.functions[index].filename = self.string(&frame.file);
                self.function_has_source[index] = true;
            }
            return id;
        }
        let file = if !frame.file.is_empty() {
            frame.file.as_str()
        } else if frame.section == model::Section::Generated && !frame.code_map.is_empty() {
            frame.code_map.as_str()
        } else {
            self.executables
                .get(frame.module.as_str())
                .copied()
                .unwrap_or(&frame.module)
        };
        let name = self.string(&frame.name);
        let id = self.functions.len() as u64 + 1;
        let function = pp::Function {
            id,
            name,
            system_name: name,
            filename: self.string(file),
            start_line: 0,
        };
        self.functions.push(function);
        self.function_has_source.push(!frame.file.is_empty());
        self.function_ids.insert(key, id);
        id
    }
}

/// Stands in for a frame index beyond Profile.frames (a daemon bug), so that the sample still
/// counts and the gap shows.
static MISSING: LazyLock<model::Frame> = LazyLock::new(|| model::Frame {
    name: "[missing frame]".into(),
    ..Default::default()
});

#[cfg(test)]
mod tests {
    use std::{collections::HashSet, io::Read as _};

    use flate2::read::GzDecoder;

    use super::*;
    use crate::stack_fixture::{self as fixture, FREQUENCY_HZ, STARTED_AT_SECS};

    fn decode(bytes: &[u8]) -> pp::Profile {
        let mut raw = Vec::new();
        GzDecoder::new(bytes)
            .read_to_end(&mut raw)
            .expect("pprof bytes are gzip");
        pp::Profile::decode(raw.as_slice()).expect("gunzipped bytes are a pprof Profile")
    }

    fn string(p: &pp::Profile, i: i64) -> &str {
        &p.string_table[usize::try_from(i).expect("non-negative string index")]
    }

    fn location(p: &pp::Profile, id: u64) -> &pp::Location {
        p.location
            .iter()
            .find(|l| l.id == id)
            .unwrap_or_else(|| panic!("no location {id}"))
    }

    fn function(p: &pp::Profile, id: u64) -> &pp::Function {
        p.function
            .iter()
            .find(|f| f.id == id)
            .unwrap_or_else(|| panic!("no function {id}"))
    }

    /// Each location of a sample as the names of its lines, innermost first.
    fn names(p: &pp::Profile, sample: &pp::Sample) -> Vec<Vec<String>> {
        sample
            .location_id
            .iter()
            .map(|&id| {
                location(p, id)
                    .line
                    .iter()
                    .map(|l| string(p, function(p, l.function_id).name).to_owned())
                    .collect()
            })
            .collect()
    }

    fn label<'p>(p: &'p pp::Profile, sample: &'p pp::Sample, key: &str) -> Option<&'p pp::Label> {
        sample.label.iter().find(|l| string(p, l.key) == key)
    }

    #[test]
    fn decodes_back_with_pprofs_invariants() {
        let profile = fixture::profile();
        let p = decode(&encode(&profile).expect("encode"));
        assert_eq!(p.string_table[0], "");
        let strings: HashSet<&String> = p.string_table.iter().collect();
        assert_eq!(
            strings.len(),
            p.string_table.len(),
            "strings are interned once"
        );

        let ids = |ids: Vec<u64>| {
            assert!(ids.iter().all(|&id| id != 0), "ids are non-zero: {ids:?}");
            let unique: HashSet<u64> = ids.iter().copied().collect();
            assert_eq!(unique.len(), ids.len(), "ids are unique: {ids:?}");
            unique
        };
        let mappings = ids(p.mapping.iter().map(|m| m.id).collect());
        let functions = ids(p.function.iter().map(|f| f.id).collect());
        let locations = ids(p.location.iter().map(|l| l.id).collect());
        for l in &p.location {
            assert!(
                l.mapping_id == 0 || mappings.contains(&l.mapping_id),
                "{l:?}"
            );
            assert!(!l.line.is_empty(), "every location is named: {l:?}");
            for line in &l.line {
                assert!(functions.contains(&line.function_id), "{l:?}");
            }
        }
        for s in &p.sample {
            assert_eq!(s.value.len(), p.sample_type.len());
            assert!(
                s.location_id.iter().all(|id| locations.contains(id)),
                "{s:?}"
            );
        }
        let len = p.string_table.len() as i64;
        for f in &p.function {
            for i in [f.name, f.system_name, f.filename] {
                assert!((0..len).contains(&i), "{f:?}");
            }
        }
    }

    #[test]
    fn samples_and_cpu_time_add_up() {
        let profile = fixture::profile();
        let p = to_pprof(&profile);
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (string(&p, t.r#type), string(&p, t.unit)))
            .collect();
        assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
        let period_type = p.period_type.expect("period type");
        assert_eq!(
            (string(&p, period_type.r#type), string(&p, period_type.unit)),
            ("cpu", "nanoseconds")
        );
        assert_eq!(p.period, 1_000_000_000 / i64::from(FREQUENCY_HZ));
        assert_eq!(p.sample.len(), profile.stacks.len());
        for (sample, stack) in p.sample.iter().zip(&profile.stacks) {
            assert_eq!(sample.value[0], stack.samples() as i64);
            assert_eq!(sample.value[1], stack.samples() as i64 * p.period);
        }
        let total: i64 = p.sample.iter().map(|s| s.value[0]).sum();
        assert_eq!(total, profile.total_samples as i64);
        assert_eq!(
            p.time_nanos,
            STARTED_AT_SECS as i64 * 1_000_000_000 + 500,
            "session start"
        );
        assert_eq!(p.duration_nanos, 2_500_000_000);
        let comments: Vec<&str> = p.comment.iter().map(|&c| string(&p, c)).collect();
        assert!(
            comments[0].contains("session 7 at 1000 Hz: 1000 samples"),
            "{comments:?}"
        );
        assert!(
            comments
                .iter()
                .any(|c| c.starts_with("10 samples with stacks cut"))
        );
    }

    #[test]
    fn shown_stacks_are_encoded_and_say_their_view() {
        use crate::{ReportOptions, stack_view::ShownStacks};
        let profile = fixture::profile();
        let shown = ShownStacks::new(&profile, &ReportOptions::default());
        let p = decode(&encode_shown(&shown).expect("encode"));
        // The language view: main and Interpreter (the VM's) go above benchmark.
        assert_eq!(
            names(&p, &p.sample[0]),
            [
                vec!["Integer>>benchFib".to_owned()],
                vec!["Integer>>benchFib".to_owned()],
                vec!["benchmark".to_owned()],
            ]
        );
        let comments: Vec<&str> = p.comment.iter().map(|&c| string(&p, c)).collect();
        assert_eq!(
            comments.last(),
            Some(&format!("stacks: {}", shown.describe()).as_str()),
            "{comments:?}"
        );
        assert!(
            comments
                .last()
                .unwrap()
                .starts_with("stacks: language view")
        );
        let total: i64 = p.sample.iter().map(|s| s.value[0]).sum();
        assert_eq!(total, profile.total_samples as i64);
    }

    #[test]
    fn stacks_are_leaf_first_with_inlined_methods_folded_into_one_location() {
        let profile = fixture::profile();
        let p = to_pprof(&profile);
        let one = |name: &str| vec![name.to_owned()];
        assert_eq!(
            names(&p, &p.sample[0]),
            [
                one("Integer>>benchFib"),
                one("Integer>>benchFib"),
                one("benchmark"),
                one("Interpreter"),
                one("main")
            ]
        );
        // Recursion is the same location twice, not two locations.
        assert_eq!(p.sample[0].location_id[0], p.sample[0].location_id[1]);
        // Inline>>heavy inlined into Inline>>bench: one location, innermost line first.
        assert_eq!(
            names(&p, &p.sample[1]),
            [
                vec!["Inline>>heavy".to_owned(), "Inline>>bench".to_owned()],
                one("benchmark"),
                one("Interpreter"),
                one("main")
            ]
        );
        let folded = location(&p, p.sample[1].location_id[0]);
        let lines: Vec<i64> = folded.line.iter().map(|l| l.line).collect();
        assert_eq!(lines, [33, 5], "first pcs of 33->70 and 5->9");
        let anon = p
            .mapping
            .iter()
            .find(|m| m.id == folded.mapping_id)
            .expect("mapping");
        assert_eq!(string(&p, anon.filename), "[anon]");
        assert!(anon.has_inline_frames && anon.has_functions);
        // Kernel frames under (leaf-side of) the user frame that made the system call.
        assert_eq!(
            names(&p, &p.sample[2]),
            [
                one("ksys_write"),
                one("write"),
                one("Interpreter"),
                one("main")
            ]
        );
        // Every frame of the profile is reachable, each location counted once.
        assert_eq!(
            p.location.len(),
            profile.frames.len() - 1,
            "two frames folded into one"
        );
    }

    #[test]
    fn call_sites_are_lines_and_jit_functions_name_their_code_map() {
        let p = to_pprof(&fixture::profile());
        let benchmark_location = location(&p, p.sample[0].location_id[2]);
        assert_eq!(benchmark_location.line[0].line, 74, "call site 74->78");
        let benchmark = function(&p, benchmark_location.line[0].function_id);
        assert_eq!(string(&p, benchmark.name), "benchmark");
        assert_eq!(string(&p, benchmark.system_name), "benchmark");
        assert_eq!(string(&p, benchmark.filename), "vm");
        let main = location(&p, *p.sample[0].location_id.last().expect("root"));
        let main_function = function(&p, main.line[0].function_id);
        assert_eq!(string(&p, main_function.filename), "/opt/jitvm/bin/jitvm");
        let mapping = p
            .mapping
            .iter()
            .find(|m| m.id == main.mapping_id)
            .expect("main's mapping");
        assert_eq!(string(&p, mapping.filename), "/opt/jitvm/bin/jitvm");
        assert_eq!(string(&p, mapping.build_id), "abcd01");
        assert_eq!(
            p.mapping[0].id, main.mapping_id,
            "the main binary's mapping comes first"
        );
        // One mapping per module: jitvm, [anon], libc, kernel, libfoo.
        let files: HashSet<&str> = p.mapping.iter().map(|m| string(&p, m.filename)).collect();
        assert_eq!(files.len(), 5, "{files:?}");
        assert_eq!(p.mapping.len(), 5);
    }

    #[test]
    fn labels_say_pid_comm_and_truncation() {
        let profile = fixture::profile();
        let p = to_pprof(&profile);
        for (sample, stack) in p.sample.iter().zip(&profile.stacks) {
            let pid = label(&p, sample, "pid").expect("pid label");
            assert_eq!(pid.num, i64::from(stack.pid));
            let comm = label(&p, sample, "comm").expect("comm label");
            let expected = if stack.pid == 100 { "jitvm" } else { "jitvm2" };
            assert_eq!(string(&p, comm.str), expected);
            match label(&p, sample, "truncated") {
                Some(l) => {
                    assert!(stack.truncated);
                    assert_eq!(string(&p, l.str), "true");
                }
                None => assert!(!stack.truncated),
            }
        }
        assert!(p.sample.iter().any(|s| label(&p, s, "truncated").is_some()));
        assert!(
            p.sample
                .iter()
                .all(|s| label(&p, s, "vm_interval").is_none())
        );
    }

    /// A program's labels are each sample's pprof labels under their own keys, but for a key
    /// vmscope writes itself, which becomes `label.KEY`.
    #[test]
    fn program_labels_are_pprof_labels() {
        let mut profile = fixture::profile();
        profile.labels = vec![
            model::Label::new("phase", "parse"),
            model::Label::new("pid", "7"),
        ];
        profile.stacks[0].labels = vec![0, 1];
        let p = to_pprof(&profile);
        let phase = label(&p, &p.sample[0], "phase").expect("the phase label");
        assert_eq!(string(&p, phase.str), "parse");
        let theirs = label(&p, &p.sample[0], "label.pid").expect("their pid, renamed");
        assert_eq!(string(&p, theirs.str), "7");
        assert_eq!(
            label(&p, &p.sample[0], "pid").unwrap().num,
            100,
            "ours untouched"
        );
        assert!(label(&p, &p.sample[1], "phase").is_none());
    }

    /// Each sample's values are its stack's, type by type (not derived here), and it is
    /// labelled with its thread, named where the profile knows the name.
    #[test]
    fn values_and_threads_come_from_the_model() {
        let mut profile = fixture::profile();
        profile.stacks[0].tid = 101;
        profile.stacks[0].values = vec![7, 123];
        profile.threads = vec![model::Thread {
            pid: 100,
            tid: 101,
            name: "C2 CompilerThre".into(),
            samples: 7,
            ..Default::default()
        }];
        let p = to_pprof(&profile);
        assert_eq!(p.sample[0].value, [7, 123]);
        let tid = label(&p, &p.sample[0], "thread.id").expect("thread.id");
        assert_eq!(tid.num, 101);
        let name = label(&p, &p.sample[0], "thread.name").expect("thread.name");
        assert_eq!(string(&p, name.str), "C2 CompilerThre");
        // A thread the profile has no name for has its id alone.
        assert_eq!(
            label(&p, &p.sample[1], "thread.id").map(|l| l.num),
            Some(i64::from(profile.stacks[1].tid))
        );
        assert!(label(&p, &p.sample[1], "thread.name").is_none());

        // A profile built by hand that names no type measured samples.
        profile.sample_types.clear();
        let p = to_pprof(&profile);
        assert_eq!(p.sample_type.len(), 1);
        assert_eq!(p.sample[0].value, [7]);
    }

    /// A stack taken during a VM's intervals has one `vm_interval` label per kind.
    #[test]
    fn stacks_taken_during_intervals_are_labelled_with_their_kinds() {
        let mut profile = fixture::profile();
        profile.vm_interval_kinds = vec![
            model::IntervalKind::Safepoint,
            model::IntervalKind::Named("JIT compile".into()),
        ];
        profile.stacks[0].during = vec![0, 1];
        profile.stacks[1].during = vec![1];
        let p = to_pprof(&profile);
        let kinds = |sample: &pp::Sample| -> Vec<&str> {
            sample
                .label
                .iter()
                .filter(|l| string(&p, l.key) == "vm_interval")
                .map(|l| string(&p, l.str))
                .collect()
        };
        assert_eq!(kinds(&p.sample[0]), ["safepoint", "JIT compile"]);
        assert_eq!(kinds(&p.sample[1]), ["JIT compile"]);
        assert!(kinds(&p.sample[2]).is_empty());
    }

    #[test]
    fn range_positions() {
        for (range, expected) in [
            ("74->78", (74, 0)),
            ("38->end", (38, 0)),
            ("start->3", (0, 0)),
            ("app.js:12:5", (12, 5)),
            ("/a:b/app.js:12:5", (12, 5)),
            ("app.js:12", (12, 0)),
            ("", (0, 0)),
            ("start", (0, 0)),
            ("weird:x:y", (0, 0)),
        ] {
            assert_eq!(range_position(range), expected, "{range}");
        }
    }

    #[test]
    fn period_follows_the_frequency_and_defaults_to_1400_hz() {
        assert_eq!(period_nanos(&fixture::profile()), 1_000_000);
        assert_eq!(period_nanos(&model::Profile::default()), 714_286);
    }

    #[test]
    fn a_bad_frame_index_still_counts_its_samples() {
        let mut profile = fixture::profile();
        let mut frames = crate::fixtures::frames_of(&profile, 3);
        frames[0] = 999;
        crate::fixtures::set_frames(&mut profile, 3, &frames);
        let p = to_pprof(&profile);
        assert_eq!(names(&p, &p.sample[3])[0], ["[missing frame]"]);
        assert_eq!(p.sample[3].value[0], 40);
    }

    #[test]
    fn an_empty_profile_is_a_valid_empty_pprof() {
        let p = decode(&encode(&model::Profile::default()).expect("encode"));
        assert_eq!(p.string_table[0], "");
        assert!(p.sample.is_empty() && p.location.is_empty());
        // It names no sample type: samples alone (the CPU time is the daemon's to say).
        assert_eq!(p.sample_type.len(), 1);
    }
}
