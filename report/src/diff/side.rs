//! One side of a diff: a profile's sampled stacks as `vmscope diff` compares them, read from a
//! session's profile or from a pprof file vmscope wrote.
//!
//! Two profiles name the same function the same way only up to where they were recorded: the
//! main executable of one build is `./vm-old`, of the other `./vm-new`, and a pprof file keeps
//! the executable's path where a profile keeps its file name. So a frame's module is its file
//! name, and the main executable of each side is [`MAIN_MODULE`], whatever its name: the VM's
//! `interpret` is the same function in both builds.

use std::{collections::HashMap, io::Read as _, path::Path};

use flate2::read::GzDecoder;
use prost::Message as _;
use vmscope_model::{Profile, SampleType, Section};
use vmscope_proto::pprof as pp;

use crate::{
    model::ReportOptions,
    pprof::{period_nanos, range_position},
    stack_view::ShownStacks,
};

/// The module key of each side's main executable (the VM), so that two builds of it with
/// different file names are compared function by function.
pub const MAIN_MODULE: &str = "[main]";

/// The code maps vmscope's pprof names as the file of generated code's functions: how a pprof
/// reader tells JIT code, whose lines are bytecode pcs, from native code, whose lines are
/// source lines.
const CODE_MAP_FILES: [&str; 3] = ["vm", "jitdump", "perf map"];

/// How finely positions inside generated code are told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// By range label, as the text report prints them (`8->23`, `app.js:12:5`): what a
    /// session's profile knows.
    Ranges,
    /// By the first bytecode pc or the line of the range (`@8`): what a pprof file keeps of a
    /// range (its `Line.line`), so that both sides are cut alike when one is a pprof file.
    Lines,
}

/// A frame as a diff compares it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameKey {
    /// The function's name.
    pub name: String,
    /// Its module's file name, [`MAIN_MODULE`] for the side's main executable.
    pub module: String,
    /// Where in generated code the frame is (a bytecode range, `@PC`, a source position);
    /// empty for native code and code without a pc map.
    pub position: String,
}

/// A stack and its samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideStack {
    /// Frames, leaf first.
    pub frames: Vec<FrameKey>,
    /// CPU samples.
    pub samples: u64,
}

/// A profile as a diff compares it: sampled CPU stacks, and what one sample stands for.
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    /// What the side is, for the output: `session 3`, `base.pb.gz`.
    pub label: String,
    /// Nanoseconds of CPU one sample stands for (the sampling period).
    pub period_ns: f64,
    /// Every sample of the side.
    pub total_samples: u64,
    /// The stacks, as the side's view shows them.
    pub stacks: Vec<SideStack>,
    /// The main executable's file name, empty when unknown.
    pub main_executable: String,
    /// The workload parameters the profile was recorded with (`record --param n=1000`).
    pub params: Vec<(String, String)>,
    /// The calls counted of native functions (`record --count`), summed over the targets, in
    /// the order asked; a function not counted (its reason in the profile) is left out.
    pub calls: Vec<(String, u64)>,
}

/// Calls per function of `counts`, summed over targets, leaving out what was not counted.
fn calls_of<'a>(counts: impl Iterator<Item = (&'a str, u64, bool)>) -> Vec<(String, u64)> {
    let mut calls: Vec<(String, u64)> = Vec::new();
    for (function, n, counted) in counts {
        if !counted {
            continue;
        }
        match calls.iter_mut().find(|(f, _)| f == function) {
            Some((_, total)) => *total += n,
            None => calls.push((function.to_owned(), n)),
        }
    }
    calls
}

/// Why a side cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SideError {
    /// The profile sampled no CPU (an off-CPU profile).
    #[error(
        "{0} has no CPU samples (an off-CPU profile): diff, check and fit compare sampled CPU \
         time"
    )]
    NoCpuSamples(String),
    /// The file is not gzipped pprof.
    #[error("{label} is not a pprof file: {reason}")]
    NotPprof {
        /// The file.
        label: String,
        /// What failed.
        reason: String,
    },
    /// A pprof file without vmscope's `samples/count` type.
    #[error(
        "{0} has no samples/count sample type: only pprof files of CPU profiles (as vmscope \
         writes them) can be compared"
    )]
    NoSampleCounts(String),
}

impl Side {
    /// A session's profile, its stacks as `options.stacks` shows them (the language view by
    /// default, as `vmscope report` writes pprof), positions cut at `granularity`.
    pub fn from_profile(
        label: impl Into<String>,
        profile: &Profile,
        options: &ReportOptions,
        granularity: Granularity,
    ) -> Result<Side, SideError> {
        let label = label.into();
        let Some(samples_at) = profile.value_index(SampleType::Samples) else {
            return Err(SideError::NoCpuSamples(label));
        };
        let main = Path::new(&profile.vm_executable)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let shown = ShownStacks::new(profile, options);
        // The shown profile puts its main measure first; find the samples again in its order.
        let shown_at = shown
            .profile
            .value_index(SampleType::Samples)
            .unwrap_or(samples_at);
        let keys: Vec<FrameKey> = shown
            .profile
            .frames
            .iter()
            .map(|frame| {
                let position = if frame.section != Section::Generated {
                    String::new()
                } else {
                    match granularity {
                        Granularity::Ranges if !frame.range.is_empty() => frame.range.clone(),
                        _ => {
                            let line = if frame.line > 0 {
                                i64::from(frame.line)
                            } else {
                                range_position(&frame.range).0
                            };
                            pc_label(line)
                        }
                    }
                };
                FrameKey {
                    name: display_name(&frame.name),
                    module: module_key(&frame.module, &main),
                    position,
                }
            })
            .collect();
        let missing = FrameKey {
            name: "[missing frame]".to_owned(),
            module: String::new(),
            position: String::new(),
        };
        let stacks = shown
            .profile
            .stacks
            .iter()
            .map(|stack| SideStack {
                frames: shown
                    .profile
                    .stack_frames(stack)
                    .map(|f| keys.get(f as usize).unwrap_or(&missing).clone())
                    .collect(),
                samples: stack.values.get(shown_at).copied().unwrap_or(0),
            })
            .filter(|s| s.samples > 0)
            .collect();
        Ok(Side {
            label,
            period_ns: period_nanos(profile) as f64,
            total_samples: profile.total_samples,
            stacks,
            main_executable: main,
            params: profile
                .session
                .as_ref()
                .map(|s| s.params.clone())
                .unwrap_or_default(),
            calls: calls_of(
                profile
                    .call_counts
                    .iter()
                    .map(|c| (c.function.as_str(), c.calls, c.note.is_empty())),
            ),
        })
    }

    /// A pprof file vmscope wrote (gzipped or not), at the granularity pprof keeps:
    /// [`Granularity::Lines`].
    pub fn from_pprof(label: impl Into<String>, bytes: &[u8]) -> Result<Side, SideError> {
        let label = label.into();
        let not_pprof = |reason: String| SideError::NotPprof {
            label: label.clone(),
            reason,
        };
        let raw;
        let bytes = if bytes.starts_with(&[0x1f, 0x8b]) {
            let mut inflated = Vec::new();
            GzDecoder::new(bytes)
                .read_to_end(&mut inflated)
                .map_err(|e| not_pprof(format!("gzip: {e}")))?;
            raw = inflated;
            &raw[..]
        } else {
            bytes
        };
        let profile =
            pp::Profile::decode(bytes).map_err(|e| not_pprof(format!("protobuf: {e}")))?;
        let string = |index: i64| -> &str {
            usize::try_from(index)
                .ok()
                .and_then(|i| profile.string_table.get(i))
                .map_or("", String::as_str)
        };
        let Some(samples_at) = profile
            .sample_type
            .iter()
            .position(|t| string(t.r#type) == "samples" && string(t.unit) == "count")
        else {
            return Err(SideError::NoSampleCounts(label));
        };
        let period_ns = match profile.period_type.as_ref() {
            Some(t) if string(t.unit) == "nanoseconds" && profile.period > 0 => {
                profile.period as f64
            }
            _ => return Err(SideError::NoSampleCounts(label)),
        };
        let basename = |path: &str| -> String {
            Path::new(path)
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or(path)
                .to_owned()
        };
        let mapping_files: HashMap<u64, String> = profile
            .mapping
            .iter()
            .map(|m| (m.id, basename(string(m.filename))))
            .collect();
        // pprof's first mapping is the main binary (vmscope puts the VM's there).
        let main = profile
            .mapping
            .first()
            .map(|m| basename(string(m.filename)))
            .unwrap_or_default();
        let functions: HashMap<u64, &pp::Function> =
            profile.function.iter().map(|f| (f.id, f)).collect();
        let mut locations: HashMap<u64, Vec<FrameKey>> = HashMap::new();
        for location in &profile.location {
            let module = mapping_files
                .get(&location.mapping_id)
                .map(|m| module_key(m, &main))
                .unwrap_or_default();
            // Lines are innermost first, as frames are leaf first.
            let frames = location
                .line
                .iter()
                .map(|line| {
                    let function = functions.get(&line.function_id);
                    let name = function.map_or("", |f| string(f.name));
                    let generated =
                        function.is_some_and(|f| CODE_MAP_FILES.contains(&string(f.filename)));
                    FrameKey {
                        name: display_name(name),
                        module: module.clone(),
                        position: if generated {
                            pc_label(line.line)
                        } else {
                            String::new()
                        },
                    }
                })
                .collect();
            locations.insert(location.id, frames);
        }
        let mut total_samples = 0u64;
        let stacks = profile
            .sample
            .iter()
            .filter_map(|sample| {
                let samples = u64::try_from(*sample.value.get(samples_at)?).ok()?;
                total_samples += samples;
                (samples > 0).then(|| SideStack {
                    frames: sample
                        .location_id
                        .iter()
                        .flat_map(|id| locations.get(id).cloned().unwrap_or_default())
                        .collect(),
                    samples,
                })
            })
            .collect();
        let params = profile
            .comment
            .iter()
            .filter_map(|&c| string(c).strip_prefix(PARAM_COMMENT))
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        // `vmscope calls MODULE:FUNCTION pid PID: CALLS` (or `...: not counted: why`).
        let calls = calls_of(profile.comment.iter().filter_map(|&c| {
            let rest = string(c).strip_prefix(CALLS_COMMENT)?;
            let (head, calls) = rest.split_once(": ")?;
            let (function, _pid) = head.rsplit_once(" pid ")?;
            match calls.parse::<u64>() {
                Ok(n) => Some((function, n, true)),
                Err(_) => Some((function, 0, false)),
            }
        }));
        Ok(Side {
            label,
            period_ns,
            total_samples,
            stacks,
            main_executable: main,
            params,
            calls,
        })
    }

    /// The CPU time the side sampled, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        self.total_samples as f64 * self.period_ns / 1e9
    }
}

/// How a pprof file vmscope writes carries a workload parameter: a comment `vmscope param
/// KEY=VALUE`.
pub const PARAM_COMMENT: &str = "vmscope param ";

/// How a pprof file vmscope writes carries a function's counted calls (`record --count`): a
/// comment `vmscope calls MODULE:FUNCTION pid PID: CALLS`.
pub const CALLS_COMMENT: &str = "vmscope calls ";

fn pc_label(line: i64) -> String {
    if line > 0 {
        format!("@{line}")
    } else {
        String::new()
    }
}

fn display_name(name: &str) -> String {
    if name.is_empty() {
        "[unknown]".to_owned()
    } else {
        name.to_owned()
    }
}

fn module_key(module: &str, main: &str) -> String {
    let file = Path::new(module)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(module);
    if !main.is_empty() && file == main {
        MAIN_MODULE.to_owned()
    } else {
        file.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{pprof, stack_fixture};

    fn sorted(side: &Side) -> Vec<(Vec<FrameKey>, u64)> {
        let mut stacks: Vec<_> = side
            .stacks
            .iter()
            .map(|s| (s.frames.clone(), s.samples))
            .collect();
        stacks.sort();
        stacks
    }

    #[test]
    fn a_pprof_file_reads_back_as_its_profile_at_pprofs_granularity() {
        let mut profile = stack_fixture::profile();
        if let Some(session) = profile.session.as_mut() {
            session.params = vec![("n".to_owned(), "1000".to_owned())];
        }
        profile.call_counts = vec![
            vmscope_model::CallCount {
                function: "libc.so.6:malloc".into(),
                pid: 1,
                calls: 7,
                ..Default::default()
            },
            vmscope_model::CallCount {
                function: "libc.so.6:malloc".into(),
                pid: 2,
                calls: 5,
                ..Default::default()
            },
            vmscope_model::CallCount {
                function: "libc.so.6:nosuch".into(),
                pid: 2,
                note: "no function".into(),
                ..Default::default()
            },
        ];
        let options = ReportOptions::default();
        let from_profile =
            Side::from_profile("session", &profile, &options, Granularity::Lines).unwrap();
        let bytes = pprof::encode_shown(&ShownStacks::new(&profile, &options)).unwrap();
        let from_pprof = Side::from_pprof("file", &bytes).unwrap();
        assert_eq!(sorted(&from_pprof), sorted(&from_profile));
        assert_eq!(from_pprof.total_samples, from_profile.total_samples);
        assert_eq!(from_pprof.period_ns, from_profile.period_ns);
        assert_eq!(from_pprof.params, [("n".to_owned(), "1000".to_owned())]);
        assert_eq!(from_pprof.calls, [("libc.so.6:malloc".to_owned(), 12)]);
        assert_eq!(from_pprof.calls, from_profile.calls);
        // Generated code keeps where it ran; the main executable is [main] on both sides.
        assert!(
            from_pprof
                .stacks
                .iter()
                .flat_map(|s| &s.frames)
                .any(|f| f.name == "Integer>>benchFib" && f.position.starts_with('@'))
        );
        assert!(
            from_pprof
                .stacks
                .iter()
                .flat_map(|s| &s.frames)
                .any(|f| f.module == MAIN_MODULE)
        );
    }

    #[test]
    fn what_is_not_a_cpu_pprof_file_is_refused_with_the_reason() {
        let error = Side::from_pprof("x.pb.gz", b"\x1f\x8bnot gzip").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("x.pb.gz is not a pprof file: gzip"),
            "{error}"
        );
        let error = Side::from_pprof("x.pb", &[0xff, 0xff, 0xff]).unwrap_err();
        assert!(error.to_string().contains("protobuf"), "{error}");
        // A valid pprof without samples/count (an off-CPU profile, another profiler's heap).
        let empty = pp::Profile::default().encode_to_vec();
        let error = Side::from_pprof("heap.pb", &empty).unwrap_err();
        assert!(matches!(error, SideError::NoSampleCounts(_)), "{error}");
    }
}
