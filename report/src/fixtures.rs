//! Profiles shared by the tests of the model and of the renderers (the CLI's golden reports):
//! hand-built, so that every number a report prints is known.
#![allow(missing_docs)]

use std::time::{Duration, UNIX_EPOCH};

use vmscope_model::{
    CallGraph, CodeKind, CodeRange, Frame, InlinedMethod, IssueKind, ProcessSamples, Profile,
    ProfileRow, SampleType, Section, Session, SessionState, Stack, StackNode, StackTreeBuilder,
    SymbolizationIssue, TargetProcess,
};

/// 2026-11-22T10:00:00Z.
pub const STARTED_AT_SECS: u64 = 1_795_341_600;

pub fn row(section: Section, name: &str, module: &str, samples: u64) -> ProfileRow {
    ProfileRow {
        section,
        name: name.to_owned(),
        module: module.to_owned(),
        samples,
        symbolized: !name.contains("+0x") && name != "[unknown]",
        ..ProfileRow::default()
    }
}

/// A generated code row of `kind` named by the VM's code map, with `ranges` (label,
/// samples) in code order and `inlined` (name, samples); its samples are the ranges' sum,
/// or the inlined methods' when it has no ranges.
pub fn jit_row(
    name: &str,
    kind: CodeKind,
    ranges: &[(&str, u64)],
    inlined: &[(&str, u64)],
) -> ProfileRow {
    let sum = |parts: &[(&str, u64)]| parts.iter().map(|&(_, n)| n).sum::<u64>();
    let samples = if ranges.is_empty() {
        sum(inlined)
    } else {
        sum(ranges)
    };
    ProfileRow {
        kind: Some(kind),
        code_map: "vm".to_owned(),
        optimised: !inlined.is_empty(),
        ranges: ranges
            .iter()
            .map(|&(label, samples)| CodeRange {
                label: label.to_owned(),
                samples,
            })
            .collect(),
        inlined: inlined
            .iter()
            .map(|&(name, samples)| InlinedMethod {
                name: name.to_owned(),
                samples,
            })
            .collect(),
        ..row(Section::Generated, name, "[anon]", samples)
    }
}

/// A generated code row of `kind` with `samples` and neither ranges nor inlined methods.
pub fn jit_plain(name: &str, kind: CodeKind, samples: u64) -> ProfileRow {
    ProfileRow {
        samples,
        ..jit_row(name, kind, &[], &[])
    }
}

/// Integer>>benchFib's bytecode ranges in Figure 7 of "A Detailed VM Profiler for the Cog
/// VM" (4735 samples), its last range ending the method.
pub const BENCH_FIB_RANGES: [(&str, u64); 8] = [
    ("1->23", 2744),
    ("24->30", 279),
    ("30->31", 137),
    ("31->34", 390),
    ("34->35", 160),
    ("35->36", 312),
    ("36->38", 145),
    ("38->end", 568),
];

/// A Cog-like JIT VM run of 10000 samples with a published code map: Figure 7's benchFib
/// and benchmark methods with their bytecode ranges, an optimised method with inlined
/// methods (its ranges named after them where their code is), PICs, a trampoline, an enilopmart, a block, a stub, a method under 1% whose
/// ranges the text leaves out, and plugins in "other code" for `--vm-module`: the second
/// golden report's input.
pub fn jit_profile() -> Profile {
    use CodeKind::{Block, ClosedPic, Enilopmart, Method, OpenPic, Stub, Trampoline};
    use Section::{Other as O, Vanilla as V};
    let mut profile = profile_with(vec![
        jit_row("Integer>>benchFib", Method, &BENCH_FIB_RANGES, &[]),
        jit_row(
            "Integer>>benchmark",
            Method,
            &[
                ("44->50", 1),
                ("52->60", 235),
                ("61->65", 81),
                ("65->66", 84),
                ("66->70", 128),
                ("70->74", 61),
                ("74->78", 734),
                ("79->84", 171),
                ("84->88", 179),
                ("88->90", 180),
                ("90->94", 44),
                ("94->98", 107),
                ("98->100", 70),
                ("100->104", 1),
            ],
            &[],
        ),
        jit_row(
            "Inline>>bench",
            Method,
            // heavy inlined at the send at 12, light at 30.
            &[
                ("1->12", 250),
                ("12->12", 10),
                ("Inline>>heavy 1->15", 34),
                ("Inline>>heavy 15->33", 100),
                ("Inline>>heavy 33->70", 1000),
                ("Inline>>heavy 70->83", 90),
                ("Inline>>heavy 83->end", 10),
                ("12->30", 60),
                ("Inline>>light 1->33", 25),
                ("Inline>>light 33->70", 150),
                ("30->end", 80),
            ],
            &[
                ("Inline>>heavy", 1234),
                ("Inline>>bench", 400),
                ("Inline>>light", 175),
            ],
        ),
        jit_plain("at:put:", ClosedPic, 420),
        jit_plain("area", OpenPic, 150),
        jit_row(
            "[] in Integer>>benchmark",
            Block,
            &[("1->4", 90), ("4->end", 40)],
            &[],
        ),
        jit_plain("ceSendMissTrampoline", Trampoline, 120),
        jit_row(
            "SmallInteger>>-",
            Method,
            &[("1->3", 30), ("3->end", 20)],
            &[],
        ),
        jit_plain("ceEnterCogCodePopReceiverReg", Enilopmart, 40),
        jit_plain("Object>>at:", Method, 1),
        jit_plain("cePrimReturnEnterCogCode", Stub, 1),
        row(V, "primitiveStringReplace", "pharo", 136),
        row(V, "instantiateClassindexableSize", "pharo", 92),
        row(V, "scavengeReferentsOf", "pharo", 28),
        row(O, "entry_SYSCALL_64", "[kernel.kallsyms]", 82),
        row(O, "__memmove_avx_unaligned_erms", "libc.so.6", 60),
        row(
            O,
            "primitiveSocketReceiveDataBufCount",
            "libSocketPlugin.so",
            40,
        ),
        row(O, "primitiveFileWrite", "libFilePlugin.so", 30),
    ]);
    profile.has_generated_code = true;
    // 10000 samples at 1400 Hz per busy CPU: not throttled.
    profile.cpu_seconds = 7.15;
    profile.measured_frequency_hz = 10_000.0 / 7.15;
    profile.vm_executable = "/usr/lib/pharo/pharo".to_owned();
    if let Some(session) = profile.session.as_mut() {
        session.targets[0].command = "pharo".to_owned();
        session.targets[0].executable = "/usr/lib/pharo/pharo".to_owned();
    }
    profile
}

/// A profile holding `rows`, with `total_samples` their sum and a stopped one-target session.
pub fn profile_with(rows: Vec<ProfileRow>) -> Profile {
    let total = rows.iter().map(|r| r.samples).sum();
    Profile {
        session: Some(Session {
            id: 7,
            state: Some(SessionState::Stopped),
            targets: vec![TargetProcess {
                pid: 4242,
                command: "node".to_owned(),
                executable: "/usr/bin/node".to_owned(),
                exited: false,
                note: String::new(),
            }],
            frequency_hz: 1400,
            started_at: Some(UNIX_EPOCH + Duration::from_secs(STARTED_AT_SECS)),
            stop_reason: "all targets exited".to_owned(),
            samples: total,
            ..Session::default()
        }),
        vm_executable: "/usr/bin/node".to_owned(),
        total_samples: total,
        duration_seconds: 5.002,
        cpu_seconds: 10.012,
        measured_frequency_hz: total as f64 / 10.012,
        rows,
        complete: true,
        ..Profile::default()
    }
}

/// A Node.js run of 14000 samples with JIT code, folds in every section, a long Greek name,
/// lost samples and symbolisation issues: the golden report's input.
pub fn node_profile() -> Profile {
    use Section::{Generated as G, Other as O, Vanilla as V};
    let mut profile = profile_with(vec![
        row(
            G,
            "LazyCompile:*hotLoop /tmp/fixture/hot.js:12",
            "[anon]",
            5200,
        ),
        row(G, "Builtin:ArrayPrototypePush", "[anon]", 1900),
        row(
            G,
            "LazyCompile:*υπολογισμός_του_πολύ_μακρύ_ονόματος_μεθόδου /tmp/fixture/ελληνικά.js:3",
            "[anon]",
            1200,
        ),
        row(G, "Builtin:KeyedLoadIC_Megamorphic", "[anon]", 696),
        row(G, "[anon]+0x1c40", "[anon]", 2),
        row(G, "Stub:CEntry", "[anon]", 1),
        row(G, "Builtin:CallFunction", "[anon]", 1),
        row(V, "v8::internal::Heap::Scavenge()", "node", 1500),
        row(
            V,
            "v8::internal::Runtime_StringAdd(int, unsigned long*, v8::internal::Isolate*)",
            "node",
            1249,
        ),
        row(V, "Builtins_InterpreterEntryTrampoline", "node", 1249),
        row(V, "node::Start(int, char**)", "node", 1),
        row(V, "uv_run", "node", 1),
        row(O, "__memmove_avx_unaligned_erms", "libc.so.6", 600),
        row(O, "entry_SYSCALL_64", "[kernel.kallsyms]", 300),
        row(O, "libstdc++.so.6+0x9a1f0", "libstdc++.so.6", 98),
        row(O, "[unknown]", "[unknown]", 1),
        row(O, "clock_gettime", "[vdso]", 1),
    ]);
    profile.has_generated_code = true;
    profile.lost_samples = 16;
    profile.lost_samples_per_cpu = vec![12, 0, 0, 4];
    profile.symbolization_issues = vec![
        SymbolizationIssue {
            module: "[unknown]".to_owned(),
            reason: "no mapping covers the address".to_owned(),
            samples: 1,
            kind: Some(IssueKind::Unmapped),
        },
        SymbolizationIssue {
            module: "libstdc++.so.6".to_owned(),
            reason: "no symbol covers the address".to_owned(),
            samples: 98,
            kind: Some(IssueKind::NoSymbol),
        },
    ];
    profile
}

/// A Node.js run of 10000 samples whose names VMProfiler's elision alone would mix up:
/// V8 functions that differ only in template arguments, overloads, a lambda, a Rust addon,
/// and a JS function with its jitdump source ranges (V8 positions are not in code order):
/// the names golden report's input.
pub fn names_profile() -> Profile {
    use Section::{Other as O, Vanilla as V};
    let handle = |class: &str| format!("v8::internal::Handle<v8::internal::{class}>");
    let stringifier = |method: &str, params: &[&str]| {
        format!(
            "v8::internal::JsonStringifier::{method}({})",
            params.join(", ")
        )
    };
    let (object, array, js_object) = (handle("Object"), handle("JSArray"), handle("JSObject"));
    let lambda = "v8::internal::Scanner::ScanIdentifierOrKeywordInner()::{lambda(unsigned int)#1}";
    let find_if = format!(
        "unsigned short const* std::find_if<unsigned short const*, unsigned int \
         v8::internal::Utf16CharacterStream::AdvanceUntil<{lambda}>({lambda})::\
         {{lambda(unsigned short)#1}}>(unsigned short const*, unsigned short const*, \
         unsigned int v8::internal::Utf16CharacterStream::AdvanceUntil<{lambda}>({lambda})\
         ::{{lambda(unsigned short)#1}})"
    );
    let vector = "v8::base::Vector<unsigned char const> const&";
    let mut hot = jit_row(
        "JS:*hotLoop /srv/app/hot.js:3:17",
        CodeKind::Unknown,
        &[
            ("start", 12),
            ("/srv/app/hot.js:5:21", 30),
            ("/srv/app/hot.js:6:26", 40),
            ("/srv/app/hot.js:6:19", 750),
            ("/srv/app/hot.js:6:34", 3990),
            ("/srv/app/hot.js:5:3", 670),
            ("/srv/app/hot.js:6:34", 8),
        ],
        &[],
    );
    hot.code_map = "jitdump".to_owned();
    let mut profile = profile_with(vec![
        hot,
        row(
            V,
            &stringifier("Serialize_<false>", &[&object, "bool", &object]),
            "node",
            900,
        ),
        row(
            V,
            &stringifier("Serialize_<true>", &[&object, "bool", &object]),
            "node",
            700,
        ),
        row(
            V,
            &stringifier("SerializeJSArray", &[&array, &object]),
            "node",
            500,
        ),
        row(
            V,
            &stringifier("SerializeJSObject", &[&js_object, &object]),
            "node",
            400,
        ),
        row(
            V,
            &format!(
                "v8::internal::Factory::NewStringFromOneByte({vector}, v8::internal::AllocationType)"
            ),
            "node",
            300,
        ),
        row(
            V,
            &format!("v8::internal::Factory::NewStringFromOneByte({vector})"),
            "node",
            250,
        ),
        row(V, &find_if, "node", 200),
        row(
            V,
            "v8::internal::InternalIndex v8::internal::StringTable::Data::FindEntry<v8::internal::Isolate, v8::internal::SequentialStringKey<unsigned char> >(v8::internal::Isolate*, v8::internal::SequentialStringKey<unsigned char>*, unsigned int) const [clone .isra.0]",
            "node",
            150,
        ),
        row(
            V,
            "v8::internal::(anonymous namespace)::InvokeWithTryCatch(v8::internal::Isolate*, v8::internal::(anonymous namespace)::InvokeParams const&)",
            "node",
            100,
        ),
        row(
            O,
            "<tokio_util::codec::framed_impl::FramedImpl<T,U,R> as futures_core::stream::Stream>::poll_next",
            "libquery_engine.so",
            700,
        ),
        row(
            O,
            "<hashbrown::raw::RawTable<T,A> as core::ops::drop::Drop>::drop",
            "libquery_engine.so",
            500,
        ),
        row(
            O,
            "query_engine::executor::execute_many::{{closure}}",
            "libquery_engine.so",
            300,
        ),
    ]);
    profile.has_generated_code = true;
    // 10500 samples at 1400 Hz per busy CPU: not throttled.
    profile.cpu_seconds = 7.5;
    profile.measured_frequency_hz = 1400.0;
    profile
}

/// A frame of `section` for the stacks fixture; generated code frames are methods of the
/// VM's code map unless `kind` says otherwise.
pub fn frame(section: Section, name: &str, module: &str, range: &str) -> Frame {
    let generated = section == Section::Generated;
    Frame {
        section,
        name: name.to_owned(),
        module: module.to_owned(),
        symbolized: true,
        kind: generated.then_some(CodeKind::Method),
        range: range.to_owned(),
        code_map: if generated {
            "vm".to_owned()
        } else {
            String::new()
        },
        kernel: module == "[kernel.kallsyms]",
        ..Frame::default()
    }
}

/// A profile of `stacks` (leaf first: frames, samples, truncated) over `frames`, with the
/// rows the daemon derives from them: one per leaf function (section, module, name,
/// optimised) with its samples, its leaf ranges in first-seen order, and its inclusive
/// samples (stacks holding it anywhere, once each); a one-target session that recorded
/// stacks by frame pointers.
pub fn profile_of_stacks(frames: Vec<Frame>, stacks: &[(&[u32], u64, bool)]) -> Profile {
    type Key = (Section, String, String, bool);
    let key = |f: &Frame| (f.section, f.module.clone(), f.name.clone(), f.optimised);
    let mut rows: Vec<(Key, ProfileRow)> = Vec::new();
    let mut inclusive: Vec<(Key, u64)> = Vec::new();
    for &(stack, samples, _) in stacks {
        let leaf = &frames[stack[0] as usize];
        let index = match rows.iter().position(|(k, _)| *k == key(leaf)) {
            Some(index) => index,
            None => {
                rows.push((
                    key(leaf),
                    ProfileRow {
                        kind: leaf.kind,
                        code_map: leaf.code_map.clone(),
                        optimised: leaf.optimised,
                        ..row(leaf.section, &leaf.name, &leaf.module, 0)
                    },
                ));
                rows.len() - 1
            }
        };
        let row = &mut rows[index].1;
        row.samples += samples;
        if !leaf.range.is_empty() {
            match row.ranges.iter_mut().find(|r| r.label == leaf.range) {
                Some(range) => range.samples += samples,
                None => row.ranges.push(CodeRange {
                    label: leaf.range.clone(),
                    samples,
                }),
            }
        }
        let mut seen: Vec<Key> = Vec::new();
        for &f in stack {
            let k = key(&frames[f as usize]);
            if seen.contains(&k) {
                continue;
            }
            match inclusive.iter_mut().find(|(i, _)| *i == k) {
                Some((_, n)) => *n += samples,
                None => inclusive.push((k.clone(), samples)),
            }
            seen.push(k);
        }
    }
    let rows = rows
        .into_iter()
        .map(|(k, mut row)| {
            row.inclusive_samples = inclusive
                .iter()
                .find(|(i, _)| *i == k)
                .map_or(0, |&(_, n)| n);
            row.processes = vec![ProcessSamples {
                pid: 4242,
                command: "jitvm".to_owned(),
                samples: row.samples,
            }];
            row
        })
        .collect();
    let mut profile = profile_with(rows);
    profile.truncated_stacks = stacks.iter().filter(|s| s.2).map(|s| s.1).sum();
    profile.sample_types = vec![SampleType::Samples, SampleType::CpuTime];
    (profile.stack_nodes, profile.stacks) = stacks_of(stacks);
    profile.frames = frames;
    profile.has_generated_code = true;
    // 1400 Hz on one busy CPU: not throttled.
    profile.cpu_seconds = profile.total_samples as f64 / 1400.0;
    profile.measured_frequency_hz = 1400.0;
    profile.vm_executable = "/usr/bin/jitvm".to_owned();
    if let Some(session) = profile.session.as_mut() {
        session.call_graph = Some(CallGraph::Fp);
        session.targets[0].command = "jitvm".to_owned();
        session.targets[0].executable = "/usr/bin/jitvm".to_owned();
    }
    profile
}

/// A JIT VM run of 2010 samples with call stacks, after the demo VM's `tiny` benchmark:
/// `Integer>>benchmark` (interpreted from `main`) calls the recursive
/// `Integer>>benchFib` from its bytecodes 74->78, `Array>>at:put:` through a closed PIC
/// from 79->84 and straight from 84->88, a primitive that copies with libc's memmove and
/// another that writes through the kernel; 10 samples of a deep recursion were cut at the
/// depth limit, and two small leaves fold at 0.5%. The stacks golden reports' input.
pub fn stacks_profile() -> Profile {
    use Section::{Generated as G, Other as O, Vanilla as V};
    let frames = vec![
        frame(V, "main", "jitvm", ""),                      // 0
        frame(V, "interpret", "jitvm", ""),                 // 1
        frame(G, "Integer>>benchmark", "[anon]", "74->78"), // 2
        frame(G, "Integer>>benchmark", "[anon]", "79->84"), // 3
        frame(G, "Integer>>benchmark", "[anon]", "84->88"), // 4
        frame(G, "Integer>>benchmark", "[anon]", "52->60"), // 5
        frame(G, "Integer>>benchmark", "[anon]", "90->94"), // 6
        frame(G, "Integer>>benchFib", "[anon]", "1->23"),   // 7
        frame(G, "Integer>>benchFib", "[anon]", "24->30"),  // 8
        frame(G, "Integer>>benchFib", "[anon]", "31->34"),  // 9
        frame(G, "Array>>at:put:", "[anon]", "1->5"),       // 10
        Frame {
            kind: Some(CodeKind::ClosedPic),
            ..frame(G, "at:put:", "[anon]", "")
        }, // 11
        Frame {
            kind: Some(CodeKind::Trampoline),
            ..frame(G, "ceSendMissTrampoline", "[anon]", "")
        }, // 12
        frame(V, "primitiveStringReplace", "jitvm", ""),    // 13
        frame(O, "__memmove_avx_unaligned_erms", "libc.so.6", ""), // 14
        frame(V, "primitiveFileWrite", "jitvm", ""),        // 15
        frame(O, "__write", "libc.so.6", ""),               // 16
        frame(O, "entry_SYSCALL_64", "[kernel.kallsyms]", ""), // 17
        frame(O, "ksys_write", "[kernel.kallsyms]", ""),    // 18
        frame(G, "SmallInteger>>+", "[anon]", "1->3"),      // 19
        frame(O, "clock_gettime", "[vdso]", ""),            // 20
    ];
    profile_of_stacks(
        frames,
        &[
            (&[7, 8, 8, 2, 1, 0], 600, false),
            (&[7, 2, 1, 0], 300, false),
            (&[9, 8, 2, 1, 0], 100, false),
            (&[10, 11, 3, 1, 0], 400, false),
            (&[10, 4, 1, 0], 100, false),
            (&[5, 1, 0], 150, false),
            (&[12, 2, 1, 0], 50, false),
            (&[13, 6, 1, 0], 120, false),
            (&[14, 13, 6, 1, 0], 80, false),
            (&[18, 17, 16, 15, 1, 0], 60, false),
            (&[1, 0], 30, false),
            (&[7, 8, 8, 8, 8], 10, true),
            (&[19, 8, 2, 1, 0], 4, false),
            (&[20, 1, 0], 6, false),
        ],
    )
}

/// Stacks of process 4242 from (frame indices leaf first, samples, truncated): complete, or
/// cut at the depth limit when truncated; each sample 1/1400 s of CPU time.
pub fn stacks_of(stacks: &[(&[u32], u64, bool)]) -> (Vec<StackNode>, Vec<Stack>) {
    let mut tree = StackTreeBuilder::new();
    let stacks = stacks
        .iter()
        .map(|&(frames, samples, truncated)| Stack {
            node: tree.intern(frames),
            pid: 4242,
            tid: 4242,
            values: vec![samples, samples * 714_286],
            truncated,
            end: Some(if truncated {
                vmscope_model::StackEnd::DepthLimit
            } else {
                vmscope_model::StackEnd::Complete
            }),
            during: Vec::new(),
            state: None,
            labels: Vec::new(),
        })
        .collect();
    (tree.finish(), stacks)
}

/// Adds `stack` to `profile` with the frames `frames` (leaf first), in the profile's stack tree.
pub fn push_stack(profile: &mut Profile, frames: &[u32], stack: Stack) {
    profile.stacks.push(stack);
    set_frames(profile, profile.stacks.len() - 1, frames);
}

/// Gives `profile`'s stack `i` the frames `frames` (leaf first), in the profile's stack tree.
pub fn set_frames(profile: &mut Profile, i: usize, frames: &[u32]) {
    let mut tree = StackTreeBuilder::from_nodes(std::mem::take(&mut profile.stack_nodes));
    profile.stacks[i].node = tree.intern(frames);
    profile.stack_nodes = tree.finish();
}

/// The frames of `profile`'s stack `i`, leaf first.
pub fn frames_of(profile: &Profile, i: usize) -> Vec<u32> {
    profile.stack_frames(&profile.stacks[i]).collect()
}
