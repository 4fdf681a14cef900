//! Which frames of each stack the stack outputs show: the program as its language sees it, or
//! every frame; and recursion as recorded, or collapsed to one level.
//!
//! Computed once here, from the daemon's whole stacks, into a profile whose stacks are the
//! ones shown ([`ShownStacks`]): the call trees, folded stacks, flame graphs, pprof and JSON's
//! stack table are all drawn from it, so that they agree. The flat report is not: its rows are
//! about functions, and their self and inclusive times do not depend on the view.
//!
//! **The language view** ([`FrameView::Language`], the default, as py-spy's and
//! async-profiler's) hides the VM's own frames where they stand between the language's: every
//! Python call under CPython 3.12 `-X perf` costs four native levels of libpython (the
//! interpreter's loop, the call, the trampoline's evaluator), a Java call through the
//! interpreter as many of libjvm. In a stack that holds a *language frame*:
//!
//! - the frames from the leaf to the innermost language frame stay as recorded: where the time
//!   went, in native code too (a C function called from Python, the VM's primitive, the
//!   kernel under them);
//! - above it, the VM's own frames are hidden; language frames stay, and so do native frames
//!   that are not the VM's (a library calling back into the language, libc's start code, an
//!   `[unknown]` frame where the walk lost its way).
//!
//! A stack without a language frame (a C program, the VM's own threads, its GC) stays whole.
//!
//! *Language frames* are generated code that is a function of the program: a JIT's methods and
//! blocks, and code a perf map or jitdump names (`py::hot:app.py`, JavaScript functions, Java
//! methods), or that nothing names. V8's `Builtins_InterpreterEntryTrampoline` counts as one
//! too, although it is the VM's code: it is how an interpreted JavaScript function appears,
//! and hiding it would show its callee as called by its caller. *The VM's own frames* are
//! vanilla vm code as the flat report counts it (the VM executable, the known runtime
//! libraries such as `libpython3.x.so` and `libjvm.so` unless `--no-runtime-modules`, and the
//! modules `--vm-module` names), and generated code that is the VM's glue rather than the
//! program's: trampolines, enilopmarts, PICs and stubs. The view assumes that the VM's frames
//! run no language function of their own; a VM whose interpreter runs methods without a frame
//! each (besides V8's entry above) shows them under their nearest language caller.
//!
//! **Collapsing recursion** ([`StackOptions::collapse_recursion`], perf's and inferno's
//! "collapse recursive") makes a run of the same function calling itself one level, and a
//! cycle of functions calling each other (`a > b > a > b`) one turn of the cycle, for cycles of
//! up to [`MAX_RECURSION_CYCLE`] functions: wherever a stack, read from its root, repeats the
//! functions just before, the outer copy is dropped. Every function of the stack stays in it
//! (only repeated copies go), so each sample still counts once in the inclusive time of every
//! function it holds, and the innermost copy's frames stay, so that call sites and source
//! lines are those of the calls that led to the leaf. Functions are those of the call trees
//! (see [`crate::tree`]): the same name at another call site is the same function.
//!
//! Stacks that become the same are merged (their samples added), most samples first as the
//! daemon sends them. Frame indices outside the frame table are kept as they are, for the
//! renderers to skip as before.

use std::{
    borrow::Cow,
    collections::{HashMap, hash_map::Entry},
};

use serde::Serialize;
use vmscope_model::{
    CodeKind, Frame, Profile, SampleType, Section, Stack, StackKey, StackTreeBuilder,
};

use crate::{
    functions::Functions,
    model::{ReportOptions, V8_INTERPRETER_ENTRY, percent},
    vm_modules::vm_module,
};

/// The longest cycle of functions that collapsing recursion recognises: enough for a language
/// function and the VM's frames around each of its calls in the native view (five frames a
/// Python call under 3.12 `-X perf`), while checking a stack costs at most this many
/// comparisons per frame.
pub const MAX_RECURSION_CYCLE: usize = 16;

/// Which frames of each stack are shown. JSON spells it as [`FrameView::as_str`] does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "&'static str")]
pub enum FrameView {
    /// The language's frames and the native frames under the innermost of them; the VM's own
    /// frames above it hidden (see the module docs).
    #[default]
    Language,
    /// Every frame, as recorded (`--native`).
    Native,
}

impl FrameView {
    /// Short stable identifier used in JSON: `language` or `native`.
    pub fn as_str(self) -> &'static str {
        match self {
            FrameView::Language => "language",
            FrameView::Native => "native",
        }
    }
}

impl From<FrameView> for &'static str {
    /// [`FrameView::as_str`]: how JSON spells it.
    fn from(view: FrameView) -> Self {
        view.as_str()
    }
}

/// How stacks are shown; chosen by the client, as the rest of [`ReportOptions`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub struct StackOptions {
    /// Which frames: `language` (the VM's own frames above each stack's innermost language
    /// frame hidden, the default) or `native` (every frame, `--native`).
    pub frames: FrameView,
    /// Recursion collapsed to one level (one turn of a cycle; `--collapse-recursion`): a
    /// function calling itself, directly or through a cycle, is one level.
    pub collapse_recursion: bool,
}

impl StackOptions {
    /// The language view, recursion as recorded.
    pub const DEFAULT: StackOptions = StackOptions {
        frames: FrameView::Language,
        collapse_recursion: false,
    };
}

/// A profile with its stacks as [`StackOptions`] show them, and what the showing changed.
///
/// Serialised, the JSON's `stack_view` (`frames`, `collapse_recursion`,
/// `samples_with_hidden_frames`, `samples_with_collapsed_recursion`): how the stacks are shown
/// and what that changed. The stacks themselves are written by
/// [`StackTable`](crate::json::StackTable).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShownStacks<'a> {
    /// The profile, its stacks replaced by the shown ones (borrowed when none changed). The
    /// frame table is the same: hidden frames stay in it, no stack names them.
    #[serde(skip)]
    pub profile: Cow<'a, Profile>,
    /// How they are shown.
    #[serde(flatten)]
    pub options: StackOptions,
    /// Samples whose stacks hold a language frame: those the language view can change.
    #[serde(skip)]
    pub language_samples: u64,
    /// Samples whose stacks lost frames of the VM to the language view. JSON's
    /// `samples_with_hidden_frames`.
    #[serde(rename = "samples_with_hidden_frames")]
    pub hidden_samples: u64,
    /// Samples whose stacks had recursion collapsed. JSON's
    /// `samples_with_collapsed_recursion`.
    #[serde(rename = "samples_with_collapsed_recursion")]
    pub collapsed_samples: u64,
}

impl<'a> ShownStacks<'a> {
    /// `profile`'s stacks as `options.stacks` asks, the VM's modules as `options` counts them,
    /// weighed by the profile's main measure ([`Profile::main_value`]): its samples, its time
    /// off the CPU (`--mode off-cpu`), its wall-clock time (`--mode wall`). The shown stacks
    /// have that measure first among their values, their sample types in the same order, and
    /// `total_samples` its sum, so that every stack output (trees, folded stacks, flame
    /// graphs, pprof's default) draws by it.
    ///
    /// With [`ReportOptions::weight`], the stacks are weighed by that type instead, where the
    /// profile has it ([`check_weight`] says when it has not).
    pub fn new(profile: &'a Profile, options: &ReportOptions) -> ShownStacks<'a> {
        match by_weight(profile, options.weight) {
            Some(weighed) => {
                let shown = ShownStacks::weighed(&weighed, options);
                ShownStacks {
                    profile: Cow::Owned(shown.profile.into_owned()),
                    ..shown
                }
            }
            None => ShownStacks::weighed(profile, options),
        }
    }

    /// Whether the shown stacks weigh time (nanoseconds) rather than count samples.
    pub fn weighs_time(&self) -> bool {
        self.profile
            .sample_types
            .first()
            .is_some_and(|t| t.is_time())
    }

    /// Whether the shown stacks weigh the sends counted with the samples (`--weight sends`).
    pub fn weighs_sends(&self) -> bool {
        self.profile.sample_types.first() == Some(&SampleType::Sends)
    }

    /// [`ShownStacks::new`] of a profile whose main measure is first already.
    fn weighed(profile: &'a Profile, options: &ReportOptions) -> ShownStacks<'a> {
        let stack_options = options.stacks;
        let roles: Vec<Role> = profile.frames.iter().map(|f| role(f, options)).collect();
        let functions = Functions::new(&profile.frames);
        let function_of = |frame: u32| -> u32 {
            // Past the table, a frame is a function of its own, never equal to a real one.
            match functions.of_frame.get(frame as usize) {
                Some(&id) => id,
                None => u32::MAX - (frame % 1024),
            }
        };
        let (mut language_samples, mut hidden_samples, mut collapsed_samples) = (0u64, 0u64, 0u64);
        let holds_language = |stack: &Stack| {
            profile
                .stack_frames(stack)
                .any(|f| roles.get(f as usize) == Some(&Role::Language))
        };
        if stack_options
            == (StackOptions {
                frames: FrameView::Native,
                collapse_recursion: false,
            })
        {
            // Nothing to change: only what the language view would have had to work on.
            let language_samples = profile
                .stacks
                .iter()
                .filter(|s| holds_language(s))
                .fold(0u64, |sum, s| sum.saturating_add(s.samples()));
            return ShownStacks {
                profile: Cow::Borrowed(profile),
                options: stack_options,
                language_samples,
                hidden_samples,
                collapsed_samples,
            };
        }
        let mut changed = false;
        let mut stacks: Vec<Stack> = Vec::with_capacity(profile.stacks.len());
        let mut index: HashMap<StackKey, usize> = HashMap::new();
        // The shown stacks' own tree: it holds exactly the stacks shown.
        let mut tree = StackTreeBuilder::new();
        let (mut recorded, mut viewed, mut collapsed) = (Vec::new(), Vec::new(), Vec::new());
        for stack in &profile.stacks {
            if holds_language(stack) {
                language_samples = language_samples.saturating_add(stack.samples());
            }
            recorded.clear();
            recorded.extend(profile.stack_frames(stack));
            let mut frames: &[u32] = &recorded;
            if stack_options.frames == FrameView::Language
                && language_view(frames, &roles, &mut viewed)
            {
                hidden_samples = hidden_samples.saturating_add(stack.samples());
                frames = &viewed;
            }
            if stack_options.collapse_recursion
                && collapse_recursion(frames, function_of, &mut collapsed)
            {
                collapsed_samples = collapsed_samples.saturating_add(stack.samples());
                frames = &collapsed;
            }
            changed |= frames.len() != recorded.len();
            let key = stack.key(tree.intern(frames), stack.during.clone());
            match index.entry(key) {
                Entry::Occupied(at) => {
                    let shown = &mut stacks[*at.get()];
                    shown.add_values(&stack.values);
                }
                Entry::Vacant(at) => {
                    stacks.push(Stack {
                        node: at.key().node,
                        ..stack.clone()
                    });
                    at.insert(stacks.len() - 1);
                }
            }
        }
        let profile = if changed {
            // Stable: stacks of equal samples keep the daemon's order.
            crate::rank::rank(
                &mut stacks,
                |s| s.samples(),
                |_, _| std::cmp::Ordering::Equal,
            );
            let mut shown = profile.clone();
            shown.stacks = stacks;
            shown.stack_nodes = tree.finish();
            Cow::Owned(shown)
        } else {
            Cow::Borrowed(profile)
        };
        ShownStacks {
            profile,
            options: stack_options,
            language_samples,
            hidden_samples,
            collapsed_samples,
        }
    }

    /// What the stacks show, in one line for people: the call tree's header, the flame graph's
    /// subtitle, pprof's comments.
    pub fn describe(&self) -> String {
        let total = self.profile.total_samples;
        let of = if self.weighs_time() {
            "of the time"
        } else if self.weighs_sends() {
            "of the sends"
        } else {
            "of the samples"
        };
        let mut line = match self.options.frames {
            FrameView::Native => "native view: every frame".to_owned(),
            FrameView::Language if self.language_samples == 0 => {
                "native view: no stack holds a language (generated code) frame, so every frame \
                 is shown"
                    .to_owned()
            }
            FrameView::Language => format!(
                "language view: the VM's own frames above the innermost language frame hidden \
                 in {:.2}% {of} (--native shows every frame)",
                percent(self.hidden_samples, total)
            ),
        };
        if self.options.collapse_recursion {
            line.push_str(&format!(
                "; recursion collapsed to one level in {:.2}% {of}",
                percent(self.collapsed_samples, total)
            ));
        }
        line
    }
}

/// Whether `profile` can be weighed by `weight` (`--weight`): it must be one of its sample
/// types. The error says which it has, and for sends what gives them.
pub fn check_weight(profile: &Profile, weight: Option<SampleType>) -> Result<(), String> {
    let Some(weight) = weight else {
        return Ok(());
    };
    if profile.value_index(weight).is_some() {
        return Ok(());
    }
    let has: Vec<&str> = profile.sample_types.iter().map(|t| t.as_str()).collect();
    let why = if weight == SampleType::Sends {
        ": no sampled thread had a send counter (a VM publishes one per thread: CODE-MAPS.md, \
         \"Counts per stack\")"
    } else {
        ""
    };
    Err(format!(
        "the profile has no {} to weigh stacks by{why}; it has {}",
        weight.as_str(),
        has.join(", ")
    ))
}

/// A copy of `profile` whose stacks have `weight` (its main measure when `None` or absent)
/// first among their values (and its sample types in that order), `total_samples` its sum;
/// `None` when it is first already.
fn by_weight(profile: &Profile, weight: Option<SampleType>) -> Option<Profile> {
    let main = match weight.and_then(|w| profile.value_index(w)) {
        Some(index) => index,
        None => profile.main_value().1,
    };
    if main == 0 {
        return None;
    }
    fn first<T>(values: &mut Vec<T>, main: usize) {
        if main < values.len() {
            let value = values.remove(main);
            values.insert(0, value);
        }
    }
    let mut weighed = profile.clone();
    first(&mut weighed.sample_types, main);
    let mut total = 0u64;
    for stack in &mut weighed.stacks {
        first(&mut stack.values, main);
        total = total.saturating_add(stack.samples());
    }
    weighed.total_samples = total;
    Some(weighed)
}

/// What a frame is to the language view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A function of the program in the language.
    Language,
    /// The VM's own code: hidden above the innermost language frame.
    Vm,
    /// Native code that is not the VM's: always shown.
    Other,
}

/// The role of `frame`, with the VM's modules as `options` counts them (see the module docs).
fn role(frame: &Frame, options: &ReportOptions) -> Role {
    match frame.section {
        Section::Generated => match frame.kind {
            Some(
                CodeKind::Trampoline
                | CodeKind::Enilopmart
                | CodeKind::ClosedPic
                | CodeKind::OpenPic
                | CodeKind::Stub,
            ) => Role::Vm,
            _ => Role::Language,
        },
        _ if frame.name == V8_INTERPRETER_ENTRY => Role::Language,
        Section::Vanilla => Role::Vm,
        Section::Other if !frame.kernel && vm_module(options, &frame.module).is_some() => Role::Vm,
        Section::Other => Role::Other,
    }
}

/// `frames` (leaf first) in the language view, into `out`: whether any frame was hidden.
fn language_view(frames: &[u32], roles: &[Role], out: &mut Vec<u32>) -> bool {
    let role = |frame: u32| roles.get(frame as usize).copied().unwrap_or(Role::Other);
    let Some(innermost) = frames.iter().position(|&f| role(f) == Role::Language) else {
        return false;
    };
    out.clear();
    out.extend_from_slice(&frames[..=innermost]);
    out.extend(
        frames[innermost + 1..]
            .iter()
            .filter(|&&f| role(f) != Role::Vm),
    );
    out.len() != frames.len()
}

/// `frames` (leaf first) with recursion collapsed, into `out`: whether any frame went.
///
/// Read from the root, each frame is pushed on a path; when the path then ends with two copies
/// of the same functions (a square of at most [`MAX_RECURSION_CYCLE`] functions), the outer
/// copy goes. The path so never holds a square: the one just made is the only one to look for,
/// and what is left after a removal has the functions of a path that held none.
fn collapse_recursion(
    frames: &[u32],
    function_of: impl Fn(u32) -> u32,
    out: &mut Vec<u32>,
) -> bool {
    let mut path: Vec<u32> = Vec::with_capacity(frames.len());
    let mut ids: Vec<u32> = Vec::with_capacity(frames.len());
    for &frame in frames.iter().rev() {
        path.push(frame);
        ids.push(function_of(frame));
        let n = ids.len();
        let last = ids[n - 1];
        if let Some(cycle) = (1..=MAX_RECURSION_CYCLE.min(n / 2))
            .find(|&c| ids[n - 1 - c] == last && ids[n - 2 * c..n - c] == ids[n - c..])
        {
            path.drain(n - 2 * cycle..n - cycle);
            ids.drain(n - 2 * cycle..n - cycle);
        }
    }
    if path.len() == frames.len() {
        return false;
    }
    out.clear();
    out.extend(path.iter().rev());
    true
}

#[cfg(test)]
mod tests {
    use vmscope_model::{CodeKind, Section, StackEnd};

    use super::*;

    /// Frames of a CPython 3.12 `-X perf` process, by index.
    const LIBC_START: u32 = 0;
    const PY_START: u32 = 1; // python3.12's _start: the VM executable
    const RUN_MAIN: u32 = 2; // libpython
    const EVAL: u32 = 3; // libpython
    const TRAMPOLINE_EVALUATOR: u32 = 4; // libpython
    const MODULE: u32 = 5; // py::<module>
    const A: u32 = 6; // py::a
    const B: u32 = 7; // py::b
    const HOT: u32 = 8; // py::hot
    const MULTIPLY: u32 = 9; // libpython's _PyLong_Multiply, the leaf's C code
    const SQRT: u32 = 10; // libm
    const KERNEL: u32 = 11;
    const FFI_CALL: u32 = 12; // libffi, calling back into Python
    const GC: u32 = 13; // libpython's collector, no Python frame

    fn native(name: &str, module: &str, section: Section) -> Frame {
        Frame {
            section,
            name: name.to_owned(),
            module: module.to_owned(),
            symbolized: true,
            ..Frame::default()
        }
    }

    fn python(name: &str) -> Frame {
        Frame {
            section: Section::Generated,
            name: format!("py::{name}:app.py"),
            module: "[anon]".to_owned(),
            symbolized: true,
            kind: Some(CodeKind::Unknown),
            code_map: "perf map".to_owned(),
            ..Frame::default()
        }
    }

    fn python_frames() -> Vec<Frame> {
        let libpython = |name: &str| native(name, "libpython3.12.so.1.0", Section::Other);
        vec![
            native("__libc_start_main", "libc.so.6", Section::Other),
            native("_start", "python3.12", Section::Vanilla),
            libpython("Py_RunMain"),
            libpython("_PyEval_EvalFrameDefault"),
            libpython("py_trampoline_evaluator"),
            python("<module>"),
            python("a"),
            python("b"),
            python("hot"),
            libpython("_PyLong_Multiply"),
            native("sqrt", "libm.so.6", Section::Other),
            Frame {
                kernel: true,
                ..native("do_syscall_64", "[kernel.kallsyms]", Section::Other)
            },
            native("ffi_call", "libffi.so.8", Section::Other),
            libpython("gc_collect_main"),
        ]
    }

    /// `frames` root first under the four libpython frames of each Python call.
    fn through_interpreter(python: &[u32]) -> Vec<u32> {
        let mut stack = vec![LIBC_START, PY_START, RUN_MAIN];
        for &f in python {
            stack.extend([EVAL, TRAMPOLINE_EVALUATOR, f]);
        }
        stack
    }

    /// A stack of `root_first`'s frames, for [`profile`]: its frames leaf first, and the rest.
    fn stack(root_first: &[u32], samples: u64) -> (Vec<u32>, Stack) {
        let frames = root_first.iter().rev().copied().collect();
        let stack = Stack {
            node: None,
            pid: 7,
            tid: 7,
            values: vec![samples],
            truncated: false,
            end: Some(StackEnd::Complete),
            during: Vec::new(),
            state: None,
            labels: Vec::new(),
        };
        (frames, stack)
    }

    fn profile(frames: Vec<Frame>, stacks: Vec<(Vec<u32>, Stack)>) -> Profile {
        let mut tree = StackTreeBuilder::new();
        let stacks: Vec<Stack> = stacks
            .into_iter()
            .map(|(frames, stack)| Stack {
                node: tree.intern(&frames),
                ..stack
            })
            .collect();
        Profile {
            total_samples: stacks.iter().map(|s| s.samples()).sum(),
            frames,
            stack_nodes: tree.finish(),
            stacks,
            ..Profile::default()
        }
    }

    fn options(frames: FrameView, collapse_recursion: bool) -> ReportOptions {
        ReportOptions {
            stacks: StackOptions {
                frames,
                collapse_recursion,
            },
            ..ReportOptions::default()
        }
    }

    /// The shown stacks as frame names root first, with their samples, in order.
    fn names(shown: &ShownStacks<'_>) -> Vec<(String, u64)> {
        let profile = &shown.profile;
        profile
            .stacks
            .iter()
            .map(|s| {
                let mut frames: Vec<u32> = profile.stack_frames(s).collect();
                frames.reverse();
                let names: Vec<&str> = frames
                    .into_iter()
                    .map(|f| {
                        profile
                            .frames
                            .get(f as usize)
                            .map_or("?", |f| f.name.as_str())
                    })
                    .collect();
                (names.join(";"), s.samples())
            })
            .collect()
    }

    fn python_profile() -> Profile {
        let mut hot_from_a = through_interpreter(&[MODULE, A, HOT]);
        hot_from_a.extend([EVAL, MULTIPLY]);
        let mut hot_from_b = through_interpreter(&[MODULE, B, HOT]);
        hot_from_b.extend([EVAL, MULTIPLY]);
        let mut sqrt = through_interpreter(&[MODULE, A, HOT]);
        sqrt.extend([EVAL, SQRT, KERNEL]);
        // b called back from C through libffi, called from a.
        let mut callback = through_interpreter(&[MODULE, A]);
        callback.extend([EVAL, FFI_CALL, EVAL, TRAMPOLINE_EVALUATOR, B]);
        profile(
            python_frames(),
            vec![
                stack(&hot_from_a, 70),
                stack(&hot_from_b, 30),
                stack(&sqrt, 5),
                stack(&callback, 3),
                stack(&[LIBC_START, PY_START, RUN_MAIN, GC], 2),
            ],
        )
    }

    #[test]
    fn the_language_view_hides_the_interpreter_between_and_above_python_frames() {
        let profile = python_profile();
        let shown = ShownStacks::new(&profile, &options(FrameView::Language, false));
        assert_eq!(
            names(&shown),
            [
                (
                    "__libc_start_main;py::<module>:app.py;py::a:app.py;py::hot:app.py;\
                     _PyEval_EvalFrameDefault;_PyLong_Multiply"
                        .to_owned(),
                    70
                ),
                (
                    "__libc_start_main;py::<module>:app.py;py::b:app.py;py::hot:app.py;\
                     _PyEval_EvalFrameDefault;_PyLong_Multiply"
                        .to_owned(),
                    30
                ),
                // The leaf's native frames stay, libm's and the kernel's with the
                // interpreter's under hot.
                (
                    "__libc_start_main;py::<module>:app.py;py::a:app.py;py::hot:app.py;\
                     _PyEval_EvalFrameDefault;sqrt;do_syscall_64"
                        .to_owned(),
                    5
                ),
                // A library between two Python frames is not the VM's: it stays.
                (
                    "__libc_start_main;py::<module>:app.py;py::a:app.py;ffi_call;py::b:app.py"
                        .to_owned(),
                    3
                ),
                // No Python frame: whole.
                (
                    "__libc_start_main;_start;Py_RunMain;gc_collect_main".to_owned(),
                    2
                ),
            ]
        );
        assert_eq!(
            (
                shown.language_samples,
                shown.hidden_samples,
                shown.collapsed_samples
            ),
            (108, 108, 0)
        );
        assert!(matches!(shown.profile, Cow::Owned(_)));
        assert_eq!(
            shown.profile.frames, profile.frames,
            "the frame table stays"
        );
        assert_eq!(
            shown.describe(),
            "language view: the VM's own frames above the innermost language frame hidden in \
             98.18% of the samples (--native shows every frame)"
        );
    }

    #[test]
    fn runtime_libraries_are_the_vm_only_when_the_report_counts_them() {
        let profile = python_profile();
        let options = ReportOptions {
            runtime_modules: false,
            ..options(FrameView::Language, false)
        };
        let shown = ShownStacks::new(&profile, &options);
        // libpython is other code then: only the executable's _start goes.
        assert_eq!(
            names(&shown)[0].0,
            "__libc_start_main;Py_RunMain;_PyEval_EvalFrameDefault;py_trampoline_evaluator;\
             py::<module>:app.py;_PyEval_EvalFrameDefault;py_trampoline_evaluator;py::a:app.py;\
             _PyEval_EvalFrameDefault;py_trampoline_evaluator;py::hot:app.py;\
             _PyEval_EvalFrameDefault;_PyLong_Multiply"
        );
        // And a module named as the VM's is, like a runtime library.
        let options = ReportOptions {
            runtime_modules: false,
            vm_modules: vec!["libpython*".to_owned()],
            ..options
        };
        let shown = ShownStacks::new(&profile, &options);
        assert!(
            names(&shown)[0]
                .0
                .starts_with("__libc_start_main;py::<module>:app.py;py::a")
        );
    }

    #[test]
    fn the_native_view_is_the_profile_itself() {
        let profile = python_profile();
        let shown = ShownStacks::new(&profile, &options(FrameView::Native, false));
        assert!(matches!(shown.profile, Cow::Borrowed(_)));
        assert_eq!(*shown.profile, profile);
        assert_eq!((shown.language_samples, shown.hidden_samples), (108, 0));
        assert_eq!(shown.describe(), "native view: every frame");
        // Nothing to hide: the language view says it shows every frame.
        let c = profile_of_c();
        let shown = ShownStacks::new(&c, &ReportOptions::default());
        assert!(matches!(shown.profile, Cow::Borrowed(_)));
        assert_eq!(
            shown.describe(),
            "native view: no stack holds a language (generated code) frame, so every frame is \
             shown"
        );
    }

    fn profile_of_c() -> Profile {
        profile(
            vec![
                native("main", "callers", Section::Vanilla),
                native("leaf", "callers", Section::Vanilla),
            ],
            vec![stack(&[0, 1], 10)],
        )
    }

    #[test]
    fn the_vms_glue_and_v8s_interpreted_frames() {
        let jit = |name: &str, kind: CodeKind| Frame {
            section: Section::Generated,
            name: name.to_owned(),
            module: "[anon]".to_owned(),
            kind: Some(kind),
            ..Frame::default()
        };
        let frames = vec![
            native("main", "jitvm", Section::Vanilla),
            jit("ceEnterJITMethod", CodeKind::Enilopmart),
            jit("benchmark", CodeKind::Method),
            jit("at:put:", CodeKind::ClosedPic),
            jit("Array>>at:put:", CodeKind::Method),
            jit("ceSendMissTrampoline", CodeKind::Trampoline),
            native("send_miss", "jitvm", Section::Vanilla),
            native(V8_INTERPRETER_ENTRY, "node", Section::Vanilla),
            jit("JS:hot", CodeKind::Unknown),
            // Generated code nothing names is the program's as far as anyone knows.
            Frame {
                symbolized: false,
                kind: None,
                ..jit("[anonymous code]", CodeKind::Unknown)
            },
        ];
        let profile = profile(
            frames,
            vec![
                // The PIC between two methods goes; the trampoline at the leaf stays with the
                // VM's code it called.
                stack(&[0, 1, 2, 3, 4], 10),
                stack(&[0, 1, 2, 5, 6], 4),
                // An interpreted JS caller stays between its JIT callers.
                stack(&[0, 8, 7, 8], 3),
                stack(&[0, 9, 6], 1),
            ],
        );
        let shown = ShownStacks::new(&profile, &ReportOptions::default());
        assert_eq!(
            names(&shown),
            [
                ("benchmark;Array>>at:put:".to_owned(), 10),
                ("benchmark;ceSendMissTrampoline;send_miss".to_owned(), 4),
                (format!("JS:hot;{V8_INTERPRETER_ENTRY};JS:hot"), 3),
                ("[anonymous code];send_miss".to_owned(), 1),
            ]
        );
    }

    /// `main` calling `fib` 4 deep (at two call sites) and `even`/`odd` 3 turns deep.
    fn recursive_profile() -> Profile {
        let method = |name: &str, range: &str| Frame {
            section: Section::Generated,
            name: name.to_owned(),
            module: "[anon]".to_owned(),
            kind: Some(CodeKind::Method),
            range: range.to_owned(),
            ..Frame::default()
        };
        let frames = vec![
            native("main", "vm", Section::Vanilla), // 0
            method("fib", "1->5"),                  // 1: fib's first recursive call
            method("fib", "6->9"),                  // 2: its second
            method("fib", "10->12"),                // 3: where samples fall
            method("even", "3->4"),                 // 4
            method("odd", "3->4"),                  // 5
            method("work", "7->8"),                 // 6
            method("bench", "20->24"),              // 7: calls fib
        ];
        profile(
            frames,
            vec![
                stack(&[0, 7, 1, 2, 1, 3], 40),
                stack(&[0, 7, 2, 3], 20),
                stack(&[0, 7, 3], 10),
                stack(&[0, 4, 5, 4, 5, 4, 5, 6], 6),
                stack(&[0, 4, 5, 4], 4),
            ],
        )
    }

    #[test]
    fn recursion_collapses_to_one_level_and_a_cycle_to_one_turn() {
        let profile = recursive_profile();
        let shown = ShownStacks::new(&profile, &options(FrameView::Native, true));
        assert_eq!(
            names(&shown),
            [
                // 40 + 20: fib's innermost frame stays, where the samples fell.
                ("main;bench;fib".to_owned(), 70),
                ("main;even;odd;work".to_owned(), 6),
                // Ending inside a turn: even, odd, even.
                ("main;even;odd;even".to_owned(), 4),
            ]
        );
        let ranges: Vec<Vec<&str>> = shown
            .profile
            .stacks
            .iter()
            .map(|s| {
                shown
                    .profile
                    .stack_frames(s)
                    .map(|f| shown.profile.frames[f as usize].range.as_str())
                    .collect()
            })
            .collect();
        // bench's call site into the recursion stays; fib's frame is the innermost one.
        assert_eq!(ranges[0], ["10->12", "20->24", ""]);
        assert_eq!(shown.collapsed_samples, 66);
        assert!(
            shown
                .describe()
                .ends_with("; recursion collapsed to one level in 82.50% of the samples")
        );
    }

    #[test]
    fn collapsing_keeps_every_function_of_each_stack() {
        // Each sample counts once in every function it holds, as before collapsing.
        let profile = recursive_profile();
        let shown = ShownStacks::new(&profile, &options(FrameView::Native, true));
        let functions = |p: &Profile, s: &Stack| -> std::collections::BTreeSet<String> {
            p.stack_frames(s)
                .map(|f| p.frames[f as usize].name.clone())
                .collect()
        };
        let inclusive = |p: &Profile| {
            let mut by_name = std::collections::BTreeMap::<String, u64>::new();
            for s in &p.stacks {
                for name in functions(p, s) {
                    *by_name.entry(name).or_default() += s.samples();
                }
            }
            by_name
        };
        assert_eq!(inclusive(&shown.profile), inclusive(&profile));
    }

    #[test]
    fn python_recursion_collapses_in_both_views() {
        // fib calling itself through the interpreter: five frames a call in the native view,
        // one in the language view.
        let mut frames = python_frames();
        frames.push(python("fib"));
        let fib = frames.len() as u32 - 1;
        let mut root_first = through_interpreter(&[MODULE, fib, fib, fib, fib]);
        root_first.extend([EVAL, MULTIPLY]);
        let profile = profile(frames, vec![stack(&root_first, 9)]);
        let native = ShownStacks::new(&profile, &options(FrameView::Native, true));
        assert_eq!(
            names(&native)[0].0,
            "__libc_start_main;_start;Py_RunMain;_PyEval_EvalFrameDefault;\
             py_trampoline_evaluator;py::<module>:app.py;_PyEval_EvalFrameDefault;\
             py_trampoline_evaluator;py::fib:app.py;_PyEval_EvalFrameDefault;_PyLong_Multiply"
        );
        let language = ShownStacks::new(&profile, &options(FrameView::Language, true));
        assert_eq!(
            names(&language)[0].0,
            "__libc_start_main;py::<module>:app.py;py::fib:app.py;_PyEval_EvalFrameDefault;\
             _PyLong_Multiply"
        );
        assert_eq!(
            (language.hidden_samples, language.collapsed_samples),
            (9, 9)
        );
    }

    #[test]
    fn stacks_that_become_one_keep_their_apart_fields() {
        let mut profile = recursive_profile();
        // The same frames in another process, cut at the depth limit, or during a GC.
        let base = profile.stacks[1].clone();
        profile.stacks.push(Stack {
            pid: 8,
            ..base.clone()
        });
        profile.stacks.push(Stack {
            truncated: true,
            end: Some(StackEnd::DepthLimit),
            ..base.clone()
        });
        profile.stacks.push(Stack {
            during: vec![0],
            ..base.clone()
        });
        profile.total_samples += 3 * base.samples();
        let shown = ShownStacks::new(&profile, &options(FrameView::Native, true));
        let fib: Vec<&Stack> = shown
            .profile
            .stacks
            .iter()
            .filter(|s| shown.profile.stack_frames(s).count() == 3 && s.samples() >= 20)
            .collect();
        assert_eq!(
            fib.iter()
                .map(|s| (s.samples(), s.pid, s.truncated, s.during.len()))
                .collect::<Vec<_>>(),
            [
                (70, 7, false, 0),
                (20, 8, false, 0),
                (20, 7, true, 0),
                (20, 7, false, 1)
            ]
        );
        let samples: u64 = shown.profile.stacks.iter().map(|s| s.samples()).sum();
        assert_eq!(samples, profile.total_samples);
    }

    #[test]
    fn broken_and_hostile_stacks() {
        // Indices past the frame table are kept and never taken for a function; a stack of
        // 100,000 frames of one function collapses to one, quickly.
        let frames = vec![native("f", "vm", Section::Vanilla)];
        let mut deep = vec![0u32; 100_000];
        deep.extend([99, 99, 0]);
        let profile = profile(frames, vec![stack(&deep, 1), stack(&[], 2)]);
        let shown = ShownStacks::new(&profile, &options(FrameView::Language, true));
        let frames = |i| crate::fixtures::frames_of(&shown.profile, i);
        assert!(frames(0).is_empty(), "most samples first");
        assert_eq!(frames(1), [0, 99, 0]);
        // Two interleaved cycles that never repeat within 16 frames: every check fails late.
        let hostile: Vec<u32> = (0..100_000u32)
            .map(|i| {
                if i % 2 == 0 {
                    i / 2 % 17
                } else {
                    100 + i / 2 % 19
                }
            })
            .collect();
        let started = std::time::Instant::now();
        let mut out = Vec::new();
        assert!(!collapse_recursion(&hostile, |f| f, &mut out));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn an_empty_profile_shows_nothing_and_divides_by_nothing() {
        let profile = Profile::default();
        let shown = ShownStacks::new(&profile, &options(FrameView::Language, true));
        assert!(shown.profile.stacks.is_empty());
        assert!(shown.describe().contains("0.00% of the samples"));
    }
}
