//! A profile as folded stacks (Brendan Gregg's format), which inferno, flamegraph.pl and
//! speedscope read: one line per distinct stack, frames root first separated by `;`, a space
//! and the samples, `main;Interpreter;benchmark_[j] 740`.
//!
//! Choices, so that a reader knows what a line means:
//!
//! - Stacks of different processes with the same frames are **merged** by default: a flame
//!   graph of one program run as several processes reads best as one. [`FoldedOptions::by_process`]
//!   puts the process's name (comm) first instead, as `stackcollapse-perf.pl` does, so that
//!   programs are told apart in a system-wide profile.
//! - Frames are named by function, without their bytecode range: a flame graph merges a method's
//!   call sites into one box (the text report and pprof keep the ranges).
//! - Frames are annotated the way inferno's and flamegraph.pl's `--colors=java` palette expects:
//!   `_[k]` kernel, `_[i]` a method inlined into the compiled code of its caller, `_[j]` other
//!   generated (JIT) code; native frames have no suffix.
//! - A stack cut at the depth limit gets a `[truncated]` root frame, so that its samples show
//!   apart instead of passing for a root's.
//! - The format has no escaping: `;` in a name becomes `:`, and line breaks and other control
//!   characters become spaces, so that no name can split a frame or a line.

use std::{
    collections::{BTreeMap, HashMap},
    io::{self, Write},
};

use vmscope_model as model;

use crate::processes::process_names;

/// Root frame of stacks cut at the depth limit.
pub const TRUNCATED_ROOT: &str = "[truncated]";

/// How stacks are folded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FoldedOptions {
    /// Start each stack with its process's name (comm, or `pid N` when unknown), keeping
    /// programs apart; by default stacks of every process are merged.
    pub by_process: bool,
}

/// The folded stacks of `profile`: each distinct line (without its count) and its samples, in
/// byte order of the lines.
pub fn fold(profile: &model::Profile, options: FoldedOptions) -> BTreeMap<String, u64> {
    let names: Vec<String> = profile.frames.iter().map(frame_name).collect();
    let commands = if options.by_process {
        process_names(profile)
    } else {
        HashMap::new()
    };
    let mut lines = BTreeMap::new();
    let mut line = String::new();
    let mut frames: Vec<u32> = Vec::new();
    for stack in profile.stacks.iter().filter(|s| s.samples() > 0) {
        line.clear();
        let mut push = |frame: &str| {
            if !line.is_empty() {
                line.push(';');
            }
            line.push_str(frame);
        };
        if options.by_process {
            match commands.get(&stack.pid) {
                Some(command) => push(&sanitize(command)),
                None => push(&format!("pid {}", stack.pid)),
            }
        }
        if stack.truncated {
            push(TRUNCATED_ROOT);
        }
        frames.clear();
        frames.extend(profile.stack_frames(stack));
        for &index in frames.iter().rev() {
            push(
                names
                    .get(index as usize)
                    .map_or("[missing frame]", String::as_str),
            );
        }
        *lines.entry(line.clone()).or_insert(0) += stack.samples();
    }
    lines
}

/// Writes `profile`'s folded stacks to `out`, one `frames count` line each.
pub fn write(
    profile: &model::Profile,
    options: FoldedOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    for (line, samples) in fold(profile, options) {
        writeln!(out, "{line} {samples}")?;
    }
    Ok(())
}

/// A frame as a folded stack names it: its name made safe for the format, and its annotation.
pub fn frame_name(frame: &model::Frame) -> String {
    let mut name = if frame.name.is_empty() {
        "[unknown]".to_owned()
    } else {
        sanitize(&frame.name)
    };
    if frame.kernel {
        name.push_str("_[k]");
    } else if frame.inlined {
        name.push_str("_[i]");
    } else if frame.section == model::Section::Generated {
        name.push_str("_[j]");
    }
    name
}

/// `name` without the folded format's separators: `;` becomes `:`, control characters (line
/// breaks, tabs) spaces.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack_fixture as fixture;

    fn text(profile: &model::Profile, options: FoldedOptions) -> String {
        let mut out = Vec::new();
        write(profile, options, &mut out).expect("write to memory");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn one_line_per_stack_root_first_merged_across_processes() {
        let text = text(&fixture::profile(), FoldedOptions::default());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "[truncated];Interpreter;weird:name with breaks 10",
                "main;Interpreter;benchmark_[j];Inline>>bench_[j];Inline>>heavy_[i] 200",
                // pid 100's 700 and pid 200's 40, merged.
                "main;Interpreter;benchmark_[j];Integer>>benchFib_[j] 40",
                "main;Interpreter;benchmark_[j];Integer>>benchFib_[j];Integer>>benchFib_[j] 700",
                "main;Interpreter;write;ksys_write_[k] 50",
            ]
        );
        let total: u64 = lines
            .iter()
            .map(|l| {
                l.rsplit_once(' ')
                    .expect("count")
                    .1
                    .parse::<u64>()
                    .expect("number")
            })
            .sum();
        assert_eq!(total, fixture::profile().total_samples);
    }

    #[test]
    fn by_process_puts_the_command_first() {
        let mut profile = fixture::profile();
        crate::fixtures::push_stack(
            &mut profile,
            &[fixture::MAIN],
            model::Stack {
                pid: 300,
                tid: 300,
                values: vec![1, 1_000_000],
                end: Some(vmscope_model::StackEnd::Complete),
                ..model::Stack::default()
            },
        );
        let folded = fold(&profile, FoldedOptions { by_process: true });
        assert_eq!(
            folded.get(
                "jitvm;main;Interpreter;benchmark_[j];Integer>>benchFib_[j];Integer>>benchFib_[j]"
            ),
            Some(&700)
        );
        assert_eq!(
            folded.get("jitvm2;main;Interpreter;benchmark_[j];Integer>>benchFib_[j]"),
            Some(&40)
        );
        assert_eq!(folded.get("pid 300;main"), Some(&1));
        assert_eq!(folded.values().sum::<u64>(), profile.total_samples + 1);
    }

    #[test]
    fn separators_in_names_cannot_break_the_format() {
        let mut profile = fixture::profile();
        profile.frames[fixture::MAIN as usize].name = "a;b\nc\td".into();
        profile.frames[fixture::INTERPRETER as usize].name = String::new();
        let text = text(&profile, FoldedOptions::default());
        assert_eq!(text.lines().count(), 5, "{text}");
        for line in text.lines() {
            let (frames, count) = line.rsplit_once(' ').expect("frames, space, count");
            count.parse::<u64>().expect("the count is last");
            let frames: Vec<&str> = frames.split(';').collect();
            assert!(!frames.contains(&""), "{line}");
            if frames[0] != TRUNCATED_ROOT {
                assert_eq!(frames[0], "a:b c d", "{line}");
                assert_eq!(frames[1], "[unknown]", "{line}");
            }
        }
        assert!(!text.contains(fixture::HOSTILE_NAME));
    }

    #[test]
    fn annotations_follow_the_java_palette() {
        let profile = fixture::profile();
        let name = |i: u32| frame_name(&profile.frames[i as usize]);
        assert_eq!(name(fixture::MAIN), "main");
        assert_eq!(name(fixture::WRITE), "write");
        assert_eq!(name(fixture::KSYS_WRITE), "ksys_write_[k]");
        assert_eq!(name(fixture::BENCHMARK), "benchmark_[j]");
        assert_eq!(name(fixture::HEAVY_INLINED), "Inline>>heavy_[i]");
    }

    #[test]
    fn an_empty_profile_folds_to_nothing() {
        assert!(text(&model::Profile::default(), FoldedOptions::default()).is_empty());
    }
}
