//! The flame graph and folded stacks the CLI writes, from a hand-built profile: the SVG is
//! well-formed XML with a box per frame named as the profile names it (without the folded format's
//! separators), and generated (JIT) code is coloured apart from native and kernel code. Both
//! show the language view by default (the VM's frames above the JIT frames hidden) and every
//! frame with `--native`.

use std::collections::BTreeMap;

use quick_xml::{escape::resolve_predefined_entity, events::Event};
use vmscope::report::{Format, ReportOptions, render};
use vmscope_model::{Frame, Section};
use vmscope_report::{
    folded::sanitize,
    stack_fixture,
    stack_view::{FrameView, StackOptions},
};

/// Each frame box of the SVG: its `<title>` and the fill of its `<rect>`, parsed with an XML
/// reader that fails on anything malformed (unbalanced or mismatched tags, bad references).
fn boxes(svg: &str) -> Vec<(String, String)> {
    let mut reader = quick_xml::Reader::from_str(svg);
    reader.config_mut().check_end_names = true;
    let mut open: Vec<String> = Vec::new();
    let mut boxes = Vec::new();
    let mut title: Option<String> = None;
    let mut saw_svg = false;
    loop {
        let event = reader
            .read_event()
            .unwrap_or_else(|e| panic!("not well-formed at {}: {e}", reader.buffer_position()));
        match event {
            Event::Start(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                saw_svg |= name == "svg" && open.is_empty();
                if name == "title" {
                    title = Some(String::new());
                }
                open.push(name);
            }
            Event::End(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                assert_eq!(
                    open.pop().as_deref(),
                    Some(name.as_str()),
                    "mismatched </{name}>"
                );
            }
            Event::Text(t) if open.last().is_some_and(|n| n == "title") => {
                let text = t.decode().expect("UTF-8 title");
                title.get_or_insert_default().push_str(&text);
            }
            Event::GeneralRef(r) if open.last().is_some_and(|n| n == "title") => {
                let name = r.decode().expect("UTF-8 reference");
                let text = match r.resolve_char_ref().expect("a valid character reference") {
                    Some(c) => c.to_string(),
                    None => resolve_predefined_entity(&name)
                        .unwrap_or_else(|| panic!("unknown entity &{name};"))
                        .to_owned(),
                };
                title.get_or_insert_default().push_str(&text);
            }
            Event::Empty(e) if e.name().as_ref() == b"rect" => {
                if let Some(title) = title.take() {
                    let fill = e
                        .try_get_attribute("fill")
                        .expect("well-formed attributes")
                        .map(|a| String::from_utf8_lossy(&a.value).into_owned())
                        .unwrap_or_default();
                    boxes.push((title, fill));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert!(open.is_empty(), "unclosed elements: {open:?}");
    assert!(saw_svg, "the root element is <svg>");
    boxes
}

/// `rgb(r,g,b)` as numbers.
fn rgb(fill: &str) -> (u8, u8, u8) {
    let inner = fill
        .strip_prefix("rgb(")
        .and_then(|f| f.strip_suffix(')'))
        .unwrap_or_else(|| panic!("fill {fill:?} is not rgb(...)"));
    let parts: Vec<u8> = inner
        .split(',')
        .map(|p| p.trim().parse().expect("a colour component"))
        .collect();
    (parts[0], parts[1], parts[2])
}

fn render_to_string(format: Format, frames: FrameView) -> String {
    let options = ReportOptions {
        stacks: StackOptions {
            frames,
            collapse_recursion: false,
        },
        ..ReportOptions::default()
    };
    let mut out = Vec::new();
    render(&stack_fixture::profile(), &options, format, &mut out).expect("render");
    String::from_utf8(out).expect("UTF-8")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Code {
    Jit,
    Inlined,
    Kernel,
    Native,
}

fn code(frame: &Frame) -> Code {
    if frame.kernel {
        Code::Kernel
    } else if frame.inlined {
        Code::Inlined
    } else if frame.section == Section::Generated {
        Code::Jit
    } else {
        Code::Native
    }
}

#[test]
fn flame_graph_is_svg_with_every_frame_and_jit_coloured_apart() {
    let profile = stack_fixture::profile();
    let svg = render_to_string(Format::Flamegraph, FrameView::Native);
    assert!(
        svg.contains("vmscope: jitvm (pid 100), 1000 samples"),
        "the title names the target and the samples"
    );
    assert!(
        svg.contains("native view: every frame"),
        "the subtitle says which view"
    );
    let boxes = boxes(&svg);

    // The fill of each frame's box(es), by frame: titles read "name (N samples, P%)".
    let mut fills: BTreeMap<&str, Vec<(u8, u8, u8)>> = BTreeMap::new();
    for frame in &profile.frames {
        let prefix = format!("{} (", sanitize(&frame.name));
        let found: Vec<(u8, u8, u8)> = boxes
            .iter()
            .filter(|(title, _)| title.starts_with(&prefix))
            .map(|(_, fill)| rgb(fill))
            .collect();
        assert!(!found.is_empty(), "no box titled {prefix}…: {boxes:?}");
        fills.insert(&frame.name, found);
    }
    assert!(
        boxes
            .iter()
            .any(|(t, _)| t.starts_with("[truncated] (10 samples")),
        "truncated stacks show under their own root"
    );
    assert!(
        boxes.iter().any(|(t, _)| t == "main (990 samples, 99.00%)"),
        "box widths are inclusive samples: {boxes:?}"
    );

    let mut kinds_seen = Vec::new();
    for frame in &profile.frames {
        let kind = code(frame);
        kinds_seen.push(kind);
        for &(r, g, b) in &fills[frame.name.as_str()] {
            let name = &frame.name;
            match kind {
                // Green: the java palette's JIT hue.
                Code::Jit => assert!(g > r && g > b, "JIT {name}: rgb({r},{g},{b})"),
                // Aqua: green and blue over red.
                Code::Inlined => assert!(g > r && b > r, "inlined {name}: rgb({r},{g},{b})"),
                // Orange: red over green, no blue.
                Code::Kernel => assert!(r > g && g > b, "kernel {name}: rgb({r},{g},{b})"),
                // Red, even for names the java palette would take for Java.
                Code::Native => assert!(r > g && g == b, "native {name}: rgb({r},{g},{b})"),
            }
        }
    }
    for kind in [Code::Jit, Code::Inlined, Code::Kernel, Code::Native] {
        assert!(
            kinds_seen.contains(&kind),
            "the fixture has {kind:?} frames"
        );
    }
    let jit: Vec<_> = profile
        .frames
        .iter()
        .filter(|f| code(f) == Code::Jit)
        .flat_map(|f| fills[f.name.as_str()].clone())
        .collect();
    let native: Vec<_> = profile
        .frames
        .iter()
        .filter(|f| code(f) == Code::Native)
        .flat_map(|f| fills[f.name.as_str()].clone())
        .collect();
    assert!(
        jit.iter().all(|c| !native.contains(c)),
        "{jit:?} {native:?}"
    );
}

#[test]
fn the_flame_graph_shows_the_language_view_by_default() {
    let boxes = boxes(&render_to_string(Format::Flamegraph, FrameView::Language));
    let titles: Vec<&str> = boxes.iter().map(|(t, _)| t.as_str()).collect();
    // benchmark's callers were the VM's: it is a root, as wide as its samples; main and
    // Interpreter remain for the stack without JIT code, and the truncated one.
    assert!(
        titles.contains(&"benchmark (940 samples, 94.00%)"),
        "{titles:?}"
    );
    assert!(titles.contains(&"main (50 samples, 5.00%)"), "{titles:?}");
    assert!(
        titles.contains(&"Interpreter (50 samples, 5.00%)"),
        "{titles:?}"
    );
    assert!(
        titles.contains(&"Interpreter (10 samples, 1.00%)"),
        "{titles:?}"
    );
    let svg = render_to_string(Format::Flamegraph, FrameView::Language);
    let at = svg
        .find("id=\"subtitle\"")
        .unwrap_or_else(|| panic!("a subtitle in {svg}"));
    let subtitle = &svg[at..at + svg[at..].find("</text>").expect("the subtitle ends")];
    assert!(subtitle.contains("language view: the VM"), "{subtitle}");
}

#[test]
fn folded_output_is_what_inferno_reads() {
    let profile = stack_fixture::profile();
    let language = render_to_string(Format::Folded, FrameView::Language);
    assert!(
        language.contains("benchmark_[j];Inline>>bench_[j];Inline>>heavy_[i] 200\n"),
        "{language}"
    );
    assert!(
        language.contains("main;Interpreter;write;ksys_write_[k] 50\n"),
        "{language}"
    );
    let text = render_to_string(Format::Folded, FrameView::Native);
    let mut total = 0;
    for line in text.lines() {
        let (frames, count) = line.rsplit_once(' ').expect("frames and a count");
        total += count.parse::<u64>().expect("the count is a number");
        assert!(!frames.split(';').any(str::is_empty), "{line}");
    }
    assert_eq!(total, profile.total_samples);
    assert!(
        text.contains("main;Interpreter;benchmark_[j];Inline>>bench_[j];Inline>>heavy_[i] 200\n"),
        "{text}"
    );
    assert!(
        text.contains("main;Interpreter;write;ksys_write_[k] 50\n"),
        "{text}"
    );
    // pid 100's 700 and pid 200's 40 are different stacks (recursion): not merged; the
    // single benchFib under benchmark is pid 200's.
    assert!(
        text.contains("main;Interpreter;benchmark_[j];Integer>>benchFib_[j] 40\n"),
        "{text}"
    );
}
