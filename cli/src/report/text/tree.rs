//! The text call tree (`--tree`, `--callers NAME`, `--callees NAME`), after Pharo's
//! MessageTally: the flat report's header, a line on what the tree holds and one on how its
//! stacks are shown ([`ShownStacks::describe`]: the language view, or every frame; recursion
//! collapsed), then one line per node of the
//! [`CallTree`](vmscope_report::tree::CallTree), indented two blanks per level:
//!
//! ```text
//!  incl.%   self%  (samples)  call tree (top-down)
//! 100.00%   0.00%     (2000)  main [jitvm]
//! 100.00%   1.50%     (2000)    interpret [jitvm]
//!  95.20%   7.50%     (1904)      Integer>>benchmark
//!  50.70%   0.00%     (1014)        Integer>>benchFib [74->78]
//! ```
//!
//! Numbers first, in aligned columns, names last and whole (a tree's indentation already
//! takes the room a name column would need): inclusive % of all samples, self % of all
//! samples, (inclusive samples). Native code names its module (`[libc.so.6]`,
//! `[kernel.kallsyms]`), generated code its kind when it is not a method (`[closed PIC]`),
//! `[optimised]` and `(inlined)` frames, and the call sites that led to it: ranges of the
//! generated code caller (`[74->78]`, or `[74->78 (600), 24->30 (404)]` when several did, most
//! samples first). Native code with DWARF shows its source line after its name (`hot_loop
//! (inlined) hot.c:19`; for a caller, the line of its call; `hot.c:40 (600), hot.c:44 (400)`
//! when several, at most three). In the callers view the sites are those in the caller itself, where it
//! called the line above. A fold reads `...others... (N nodes)` with its self % blank, since
//! it stands for whole subtrees.

use std::io::{self, Write};

use vmscope_model::SampleType;
use vmscope_report::{
    Report, Section,
    stack_view::ShownStacks,
    tree::{CallTree, NodeLabel, TreeFunction, TreeNode, TreeView},
};

use super::{count, percent, write_header, write_summary};

/// Column headings; the last one is followed by the view's title.
const INCLUSIVE_HEADING: &str = "incl.%";
const SELF_HEADING: &str = "self%";
const SAMPLES_HEADING: &str = "(samples)";
/// The count column's heading when the counts are times.
const TIME_HEADING: &str = "(time)";
/// The count column's heading when the counts are sends (`--weight sends`).
const SENDS_HEADING: &str = "(sends)";
/// Narrowest percentage column ("100.00%").
const MIN_PERCENT_WIDTH: usize = 7;
/// Blanks per level of the tree.
const INDENT: &str = "  ";
/// Source lines shown after a node's name, at most (most samples first).
const MAX_LINES: usize = 3;

/// Writes `tree`, built from the `shown` stacks, as text under `report`'s header and section
/// summary.
pub fn render_tree_text(
    report: &Report,
    tree: &CallTree,
    shown: &ShownStacks<'_>,
    out: &mut impl Write,
) -> io::Result<()> {
    write_header(report, out)?;
    writeln!(out)?;
    if report.mode.on_cpu() {
        write_summary(report, out)?;
        writeln!(out)?;
    }
    let measure = Measure::of(shown);
    writeln!(out, "{}", view_line(tree, measure))?;
    writeln!(out, "{}", shown.describe())?;

    let walk = tree.walk();
    let cells: Vec<(String, String, String)> = walk
        .iter()
        .map(|&(node, _)| {
            let node = &tree.nodes[node];
            let self_cell = if matches!(node.label, NodeLabel::Others(_)) {
                String::new()
            } else {
                percent(tree.percent(node.self_samples))
            };
            (
                percent(tree.percent(node.inclusive_samples)),
                self_cell,
                format!("({})", measure.amount(node.inclusive_samples)),
            )
        })
        .collect();
    let width = |heading: &str, cell: fn(&(String, String, String)) -> &String| {
        cells
            .iter()
            .map(|c| cell(c).chars().count())
            .fold(heading.len().max(MIN_PERCENT_WIDTH), usize::max)
    };
    let inclusive_width = width(INCLUSIVE_HEADING, |c| &c.0);
    let self_width = width(SELF_HEADING, |c| &c.1);
    let samples_heading = measure.heading();
    let samples_width = width(samples_heading, |c| &c.2);

    writeln!(out)?;
    writeln!(
        out,
        "{INCLUSIVE_HEADING:>inclusive_width$} {SELF_HEADING:>self_width$}  \
         {samples_heading:>samples_width$}  {}",
        title(&tree.view)
    )?;
    if walk.is_empty() {
        writeln!(out, "  (no stacks)")?;
    }
    for (&(node, depth), (inclusive, self_cell, samples)) in walk.iter().zip(&cells) {
        writeln!(
            out,
            "{inclusive:>inclusive_width$} {self_cell:>self_width$}  \
             {samples:>samples_width$}  {}{}",
            INDENT.repeat(depth),
            label(&tree.nodes[node])
        )?;
    }
    Ok(())
}

/// The view's heading, at the right of the column headings.
fn title(view: &TreeView) -> String {
    match view {
        TreeView::TopDown => "call tree (top-down)".to_owned(),
        TreeView::Callees(name) => format!("callees of {name}"),
        TreeView::Callers(name) => format!("callers of {name} (bottom-up)"),
    }
}

/// What a tree's counts are: samples, or a time (off-CPU and wall profiles, whose shown stacks
/// weigh nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Measure {
    Samples,
    /// Nanoseconds, of what (`time off the CPU`, `wall-clock time`).
    Time(&'static str),
    /// The sends counted with the samples (`--weight sends`).
    Sends,
}

impl Measure {
    fn of(shown: &ShownStacks<'_>) -> Measure {
        match shown.profile.sample_types.first() {
            Some(SampleType::OffCpuTime) => Measure::Time("time off the CPU"),
            Some(SampleType::WallTime) => Measure::Time("wall-clock time"),
            Some(SampleType::Sends) => Measure::Sends,
            Some(t) if t.is_time() => Measure::Time("time"),
            _ => Measure::Samples,
        }
    }

    /// A count: `1014`, or a time, `602ms`.
    fn amount(self, n: u64) -> String {
        match self {
            Measure::Samples | Measure::Sends => n.to_string(),
            Measure::Time(_) => super::off_cpu::duration(n),
        }
    }

    /// `1014 samples`, `0.602 s of time off the CPU`.
    fn total(self, n: u64) -> String {
        match self {
            Measure::Samples => count(n, "sample"),
            Measure::Sends => count(n, "send"),
            Measure::Time(what) => format!("{} of {what}", super::off_cpu::duration(n)),
        }
    }

    fn heading(self) -> &'static str {
        match self {
            Measure::Samples => SAMPLES_HEADING,
            Measure::Time(_) => TIME_HEADING,
            Measure::Sends => SENDS_HEADING,
        }
    }

    /// What the inclusive and self columns are: time, or sends.
    fn what(self) -> &'static str {
        match self {
            Measure::Sends => "sends",
            Measure::Samples | Measure::Time(_) => "time",
        }
    }

    /// What percentages are of: `all samples`, `all the time`.
    fn all(self) -> &'static str {
        match self {
            Measure::Samples => "all samples",
            Measure::Time(_) => "all the time",
            Measure::Sends => "all sends",
        }
    }
}

/// What the tree holds and how to read it, in one line.
fn view_line(tree: &CallTree, measure: Measure) -> String {
    let all = measure.all();
    let folded = if tree.fold_percent > 0.0 {
        format!(
            "; nodes under {}% of {all} folded",
            trim_float(tree.fold_percent)
        )
    } else {
        String::new()
    };
    let share = |what: &str| {
        format!(
            "{} {what} ({} of all)",
            measure.total(tree.tree_samples),
            percent(tree.percent(tree.tree_samples))
        )
    };
    match &tree.view {
        TreeView::TopDown => format!(
            "call tree of {}: inclusive and self {} in % of {all}{folded}",
            measure.total(tree.tree_samples),
            measure.what()
        ),
        TreeView::Callees(name) => format!(
            "callees of {name}: {}, each counted once from its outermost {name}{folded}",
            share("in stacks holding it")
        ),
        TreeView::Callers(name) => format!(
            "callers of {name}: {}; self is {name}'s own time through each caller{folded}",
            share("in stacks holding it")
        ),
    }
}

/// `0.5` rather than `0.50`, `1` rather than `1.00`: the threshold as the user would type it.
fn trim_float(value: f64) -> String {
    let text = format!("{value:.4}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A node's name with what tells it apart: module, kind, inlined, call sites.
fn label(node: &TreeNode) -> String {
    let mut label = match &node.label {
        NodeLabel::Others(nodes) => {
            format!("{} ({})", node.label.name(), count(*nodes as u64, "node"))
        }
        NodeLabel::Truncated | NodeLabel::Label(_) => node.label.name().to_owned(),
        NodeLabel::Function(function) => format!("{}{}", function.name, suffix(function)),
    };
    // Source lines right after the name, as perf shows them: the one line, or the first few
    // with their samples.
    match node.lines.as_slice() {
        [] => {}
        [line] => label.push_str(&format!(" {}", line.range)),
        lines => {
            let shown: Vec<String> = lines
                .iter()
                .take(MAX_LINES)
                .map(|l| format!("{} ({})", l.range, l.samples))
                .collect();
            let more = if lines.len() > MAX_LINES {
                format!(", +{} lines", lines.len() - MAX_LINES)
            } else {
                String::new()
            };
            label.push_str(&format!(" {}{more}", shown.join(", ")));
        }
    }
    match node.call_sites.as_slice() {
        [] => {}
        [site] => label.push_str(&format!(" [{}]", site.range)),
        sites => {
            let sites: Vec<String> = sites
                .iter()
                .map(|s| format!("{} ({})", s.range, s.samples))
                .collect();
            label.push_str(&format!(" [{}]", sites.join(", ")));
        }
    }
    label
}

/// Generated code: its kind when not a method, `[optimised]`, `(inlined)`. Native code: its
/// module, unless its name already says it (`libfoo.so+0x1f0`), and `(inlined)` for a function
/// the compiler inlined into its caller.
fn suffix(function: &TreeFunction) -> String {
    if function.section == Section::Generated {
        let mut suffix = String::new();
        if let Some(tag) = function.kind.and_then(|kind| kind.text_tag()) {
            suffix.push_str(&format!(" [{tag}]"));
        }
        if function.inlined {
            suffix.push_str(" (inlined)");
        } else if function.optimised {
            suffix.push_str(" [optimised]");
        }
        suffix
    } else {
        let mut suffix = String::new();
        if function.symbolized && !function.module.is_empty() {
            let bracketed = function.module.starts_with('[') && function.module.ends_with(']');
            if bracketed {
                suffix.push_str(&format!(" {}", function.module));
            } else {
                suffix.push_str(&format!(" [{}]", function.module));
            }
        }
        if function.inlined {
            suffix.push_str(" (inlined)");
        }
        suffix
    }
}

#[cfg(test)]
mod tests {
    use vmscope_model::{CallGraph, Profile};
    use vmscope_report::{
        ReportOptions,
        fixtures::stacks_profile,
        stack_view::{FrameView, StackOptions},
    };

    use super::super::tests::check_golden;
    use crate::report::{
        DEFAULT_FOLD_PERCENT, Format, TreeOptions, TreeView, check_tree_format, render_profile,
    };

    /// Every frame, recursion as recorded: the stacks as the daemon sent them.
    const NATIVE: StackOptions = StackOptions {
        frames: FrameView::Native,
        collapse_recursion: false,
    };

    fn options(view: TreeView, stacks: StackOptions) -> ReportOptions {
        ReportOptions {
            tree: Some(TreeOptions {
                view,
                fold_percent: DEFAULT_FOLD_PERCENT,
                labels: Vec::new(),
            }),
            stacks,
            ..ReportOptions::default()
        }
    }

    fn render_with(
        profile: &Profile,
        view: TreeView,
        stacks: StackOptions,
    ) -> anyhow::Result<String> {
        let mut out = Vec::new();
        render_profile(profile, &options(view, stacks), Format::Text, &mut out)?;
        Ok(String::from_utf8(out).expect("the report is UTF-8"))
    }

    fn render(profile: &Profile, view: TreeView) -> anyhow::Result<String> {
        render_with(profile, view, NATIVE)
    }

    /// The stacks fixture's tree with every frame.
    fn tree_text(view: TreeView) -> String {
        render(&stacks_profile(), view).expect("the tree renders")
    }

    #[test]
    fn golden_trees() {
        check_golden("tree.txt", &tree_text(TreeView::TopDown));
        check_golden(
            "tree-callers.txt",
            &tree_text(TreeView::Callers("Integer>>benchFib".to_owned())),
        );
        check_golden(
            "tree-callees.txt",
            &tree_text(TreeView::Callees("Integer>>benchmark".to_owned())),
        );
    }

    /// The line of the tree whose name (after the indentation) starts with `name`.
    fn node_line<'a>(text: &'a str, name: &str) -> &'a str {
        text.lines()
            .find(|l| {
                l.split("  ")
                    .any(|part| part.trim_start().starts_with(name))
            })
            .unwrap_or_else(|| panic!("no node {name:?} in\n{text}"))
    }

    #[test]
    fn golden_tree_reflects_the_model() {
        // Numbers by hand from the fixture's stacks (2010 samples).
        let text = tree_text(TreeView::TopDown);
        // main holds every stack but the 10 truncated ones: 2000 = 99.50%.
        assert!(
            node_line(&text, "main [jitvm]").starts_with(" 99.50%   0.00%     (2000)  main"),
            "{text}"
        );
        // benchmark: 1904 inclusive (94.73%), 150 of its own (7.46%), two levels down.
        assert!(
            node_line(&text, "Integer>>benchmark")
                .starts_with(" 94.73%   7.46%     (1904)      Integer>>benchmark"),
            "{text}"
        );
        // benchFib called from benchmark's 74->78: 600 + 300 + 100 + 4 = 1004, of which 300
        // are its own at this level (the others are in its recursive calls).
        let fib = node_line(&text, "Integer>>benchFib [74->78]");
        assert!(fib.starts_with(" 49.95%  14.93%     (1004)"), "{fib}");
        // at:put: reached through the PIC from 79->84 (the PIC's frame has no range to show)
        // and straight from 84->88.
        assert!(text.contains("at:put: [closed PIC] [79->84]\n"), "{text}");
        assert!(text.contains("  Array>>at:put:\n"), "{text}");
        assert!(text.contains("Array>>at:put: [84->88]"), "{text}");
        // Kernel frames under the user frame that made the syscall.
        let write = text
            .lines()
            .position(|l| l.ends_with("__write [libc.so.6]"))
            .expect("__write");
        assert!(
            text.lines()
                .nth(write + 1)
                .unwrap()
                .ends_with("      entry_SYSCALL_64 [kernel.kallsyms]")
        );
        // The truncated stacks apart, and clock_gettime (6 = 0.30%) folded.
        assert!(
            text.contains("  0.50%   0.00%       (10)  [truncated stacks]\n"),
            "{text}"
        );
        assert!(text.contains("...others... (1 node)"), "{text}");
        assert!(!text.contains("clock_gettime"), "{text}");
        // The flat report's header.
        assert!(text.starts_with("pid 4242 (jitvm) /usr/bin/jitvm  2026-11-22 10:00:00 UTC"));
    }

    #[test]
    fn callers_and_callees_views() {
        let text = tree_text(TreeView::Callers("Integer>>benchFib".to_owned()));
        // 1014 samples hold benchFib, 1010 of them in its own code.
        assert!(
            node_line(&text, "Integer>>benchFib").starts_with(" 50.45%  50.25%     (1014)"),
            "{text}"
        );
        assert!(
            text.contains("1014 samples in stacks holding it (50.45% of all)"),
            "{text}"
        );
        let text = tree_text(TreeView::Callees("Integer>>benchmark".to_owned()));
        assert!(
            node_line(&text, "Integer>>benchmark").starts_with(" 94.73%   7.46%     (1904)"),
            "{text}"
        );
        // No interpret or main above it.
        assert!(!text.contains("interpret"), "{text}");
    }

    #[test]
    fn the_language_view_hides_the_vm_between_jit_frames() {
        let text = render_with(&stacks_profile(), TreeView::TopDown, StackOptions::DEFAULT)
            .expect("the tree renders");
        check_golden("tree-language.txt", &text);
        // benchmark is a root: main and interpret (the VM's) went from above it; the VM's own
        // time (no JIT frame) keeps them.
        assert!(
            node_line(&text, "Integer>>benchmark")
                .starts_with(" 94.73%   7.46%     (1904)  Integer"),
            "{text}"
        );
        assert!(
            node_line(&text, "main [jitvm]").contains("(96)  main"),
            "{text}"
        );
        // at:put: reached through the PIC and straight: one node, both call sites.
        assert!(
            text.contains("Array>>at:put: [79->84 (400), 84->88 (100)]\n"),
            "{text}"
        );
        assert!(!text.contains("[closed PIC]"), "{text}");
        assert!(
            text.contains(
                "language view: the VM's own frames above the innermost language frame hidden \
                 in 94.73% of the samples (--native shows every frame)"
            ),
            "{text}"
        );
    }

    #[test]
    fn collapsed_recursion_reads_at_one_level_with_its_inclusive_time() {
        let collapsed = StackOptions {
            collapse_recursion: true,
            ..StackOptions::DEFAULT
        };
        let text =
            render_with(&stacks_profile(), TreeView::TopDown, collapsed).expect("the tree renders");
        let fib: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("Integer>>benchFib"))
            .collect();
        // One level under benchmark (the 10 cut samples fold under the truncated stacks),
        // holding all 1004 samples of benchFib called from benchmark as the uncollapsed
        // tree's outermost benchFib does, and their time in benchFib's own code as its self.
        assert_eq!(
            fib,
            [" 49.95%  49.75%     (1004)    Integer>>benchFib [74->78]"],
            "{text}"
        );
        let native = tree_text(TreeView::TopDown);
        assert!(
            node_line(&native, "Integer>>benchFib [74->78]")
                .starts_with(" 49.95%  14.93%     (1004)"),
            "{native}"
        );
        // Callers count each stack once with or without collapsing.
        let callers = TreeView::Callers("Integer>>benchFib".to_owned());
        let collapsed_callers =
            render_with(&stacks_profile(), callers.clone(), collapsed).expect("renders");
        for text in [&collapsed_callers, &tree_text(callers)] {
            assert!(
                node_line(text, "Integer>>benchFib").starts_with(" 50.45%  50.25%     (1014)"),
                "{text}"
            );
        }
        assert!(
            text.contains("; recursion collapsed to one level in 35.32% of the samples\n"),
            "{text}"
        );
    }

    #[test]
    fn a_function_the_language_view_hides_everywhere_says_so() {
        let error = render_with(
            &stacks_profile(),
            TreeView::Callers("at:put:".to_owned()),
            StackOptions::DEFAULT,
        )
        .expect_err("the PIC is hidden in every stack holding it");
        assert_eq!(
            error.to_string(),
            "session 7's call tree: at:put: is the VM's own code, which the language view hides \
             above the language frames in every stack holding it: add --native to see it"
        );
        assert!(
            render_with(
                &stacks_profile(),
                TreeView::Callers("at:put:".to_owned()),
                NATIVE
            )
            .is_ok()
        );
    }

    #[test]
    fn trees_fail_clearly() {
        let error = render(&stacks_profile(), TreeView::Callers("benchFib".to_owned()))
            .expect_err("not an exact name");
        assert_eq!(
            format!("{error:#}"),
            "session 7's call tree: no function named \"benchFib\" in the profile's stacks; \
             did you mean one of: Integer>>benchFib"
        );
        let mut profile = stacks_profile();
        if let Some(session) = profile.session.as_mut() {
            session.call_graph = Some(CallGraph::None);
        }
        let error = render(&profile, TreeView::TopDown).expect_err("no stacks");
        assert!(
            error.to_string().contains("recorded no call stacks"),
            "{error}"
        );
        assert!(check_tree_format(Format::Json).is_err());
        assert!(check_tree_format(Format::Text).is_ok());
    }
}
