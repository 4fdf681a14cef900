//! The `vmscope` report: a profile from the daemon, shown the way VM engineers know from Cog's
//! VMProfiler.
//!
//! A header (targets, date, duration, measured against requested sampling frequency, samples in
//! the VM against samples in the entire program, lost samples), then three sections:
//!
//! - **generated vm code**: code the VM produced at run time (JIT code). Shown when the targets
//!   have any, even if no sample landed there, since "no time in JIT code" is an answer.
//! - **vanilla vm code**: the VM executable itself (interpreter, GC, primitives); for a
//!   system-wide session, each process's main executable ("main executables"). Libraries that
//!   are part of the VM (`libv8.so`, a VM's plugins) join it when named by
//!   [`ReportOptions::vm_modules`].
//! - **other code (libraries, kernel)**: everything else.
//!
//! Each row reads: % of its section, (% of the grand total), name, (samples), (cumulative % of
//! the section). Rows under [`ReportOptions::min_percent`] of the grand total fold into one
//! `...others...` row per section: a sampling profile has a long tail of functions hit once or
//! twice, which are noise at this cadence and would bury the rows that matter; the fold keeps
//! their samples counted, so every section still adds up to 100%.
//!
//! Generated code rows are tagged with their kind when it is not a method (`[closed PIC]`,
//! `[trampoline]`...). Under each one holding at least [`ReportOptions::min_range_percent`] of
//! the grand total, the text lists where its samples fell, after the "accurate profiler report"
//! of Béra et al.'s detailed VMProfiler: its bytecode (or source) ranges in code order, with %
//! of the method, (samples) and (cumulative % of the method), then for optimised code the
//! methods inlined into it. The JSON carries the ranges and inlined methods of every row.
//!
//! The daemon sends every row unfolded ([`vmscope_model::Profile`]); the CLI decides the
//! presentation (threshold, name width, text or JSON). [`Report::from_profile`] (in the shared
//! `vmscope-report` crate, so that every client computes the same numbers) does all the
//! arithmetic once, then [`render_text`] or [`render_json`] only formats it.
//!
//! The formats on call stacks (call trees, pprof, folded stacks, the flame graph and JSON's
//! stack table) are drawn from the profile's stacks as [`ReportOptions::stacks`] shows them
//! ([`ShownStacks`]: the language view unless `--native`, recursion collapsed with
//! `--collapse-recursion`), computed once by [`vmscope_report`]: pprof and folded stacks
//! encoded there, the flame graph by [`render_flamegraph`].

mod flamegraph;
pub mod groups;
mod json;
mod names;
pub(crate) mod text;

use std::io::{self, Write};

use anyhow::Context as _;
use vmscope_model::Profile;
use vmscope_report::stack_view::{FrameView, ShownStacks};
use vmscope_report::{
    folded::{self, FoldedOptions},
    pprof,
};

pub use flamegraph::render_flamegraph;
pub use json::{JsonReport, render_json, render_json_with_stacks};
pub use names::{elide_middle, shorten, shorten_all};
pub use text::{render_stats_text, render_text, render_tree_text};
pub use vmscope_report::tree::{self, CallTree, DEFAULT_FOLD_PERCENT, TreeOptions, TreeView};
pub use vmscope_report::{
    CodeKind, InlinedRow, IssueRow, OTHERS_NAME, ProcessShare, RangeRow, Report, ReportOptions,
    ReportRow, ReportTarget, Section, SectionReport, VmModule, module_matches, round2, runtimes,
    sort_keys, stack_view,
};

/// Output format of the report, as the CLI's `--format` chooses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// VMProfiler-style text for people.
    #[default]
    Text,
    /// Pretty-printed JSON with the same numbers and the stack table, for scripts.
    Json,
    /// Gzipped google/pprof `profile.proto`, for `go tool pprof`, Pyroscope, Parca, speedscope.
    /// Binary.
    Pprof,
    /// Folded stacks, one `root;...;leaf count` line per stack, for inferno, flamegraph.pl and
    /// speedscope.
    Folded,
    /// An SVG flame graph.
    Flamegraph,
}

impl Format {
    /// Whether the format is binary, and so not for a terminal.
    pub fn is_binary(self) -> bool {
        self == Format::Pprof
    }
}

/// Writes `profile` to `out` in `format`. Text and JSON go through the [`Report`] model (with
/// `options`); the stacks (JSON's stack table and the stack formats) are shown as
/// [`ReportOptions::stacks`] says, with the VM's modules as `options` counts them, and ignore
/// the rest of `options`, which shapes the flat report. JSON ends with a newline like the text
/// does, so that shells and `jq` pipelines see a complete last line.
pub fn render(
    profile: &Profile,
    options: &ReportOptions,
    format: Format,
    out: &mut impl Write,
) -> io::Result<()> {
    let shown = || ShownStacks::new(profile, options);
    match format {
        Format::Text => render_text(&Report::from_profile(profile, options), options, out),
        Format::Json => {
            let report = Report::from_profile(profile, options);
            let shown = shown();
            serde_json::to_writer_pretty(&mut *out, &render_json_with_stacks(&report, &shown))?;
            writeln!(out)
        }
        Format::Pprof => out.write_all(&pprof::encode_shown(&shown())?),
        Format::Folded => folded::write(&shown().profile, FoldedOptions::default(), out),
        Format::Flamegraph => render_flamegraph(&shown(), out),
    }
}

/// Renders `profile` as `options` and `format` ask: the flat report, or with
/// [`ReportOptions::tree`] its call tree (text only), of the stacks as shown. Fails when the
/// tree names a function the stacks do not have (the error lists close names) or that the
/// language view hides in every stack holding it (the error says `--native`), when it is asked
/// for in another format than text, and when writing fails.
pub fn render_profile(
    profile: &Profile,
    options: &ReportOptions,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    stack_view::check_weight(profile, options.weight).map_err(anyhow::Error::msg)?;
    if options.stats {
        check_stats_format(format)?;
        render_stats_text(&Report::from_profile(profile, options), out)?;
        return Ok(());
    }
    let Some(tree_options) = &options.tree else {
        render(profile, options, format, out)?;
        return Ok(());
    };
    let report = Report::from_profile(profile, options);
    check_tree_format(format)?;
    if !report.call_graph {
        anyhow::bail!(
            "session {} recorded no call stacks (--call-graph none, or a daemon without \
             stacks): no call tree to show",
            report.session_id
        );
    }
    let shown = ShownStacks::new(profile, options);
    let tree = CallTree::from_profile(&shown.profile, tree_options)
        .with_context(|| format!("session {}'s call tree", report.session_id))?;
    if let TreeView::Callers(name) | TreeView::Callees(name) = &tree_options.view
        && tree.tree_samples == 0
        && shown.options.frames == FrameView::Language
        && CallTree::from_profile(profile, tree_options).is_ok_and(|all| all.tree_samples > 0)
    {
        anyhow::bail!(
            "session {}'s call tree: {name} is the VM's own code, which the language view hides \
             above the language frames in every stack holding it: add --native to see it",
            report.session_id
        );
    }
    render_tree_text(&report, &tree, &shown, out)?;
    Ok(())
}

/// `--stats` is text: refuses it in another format before anything is recorded.
pub fn check_stats_format(format: Format) -> anyhow::Result<()> {
    if format != Format::Text {
        anyhow::bail!(
            "--stats prints text only; the JSON report has the statistics under \
             `kernel_events`: drop --stats or --format"
        );
    }
    Ok(())
}

/// Call trees are text: refuses them in another format before anything is recorded.
pub fn check_tree_format(format: Format) -> anyhow::Result<()> {
    if format != Format::Text {
        anyhow::bail!("--tree, --callers and --callees print text only: drop them or --format");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_format_is_text() {
        assert_eq!(Format::default(), Format::Text);
    }

    #[test]
    fn render_text_format_matches_render_text() {
        let profile = vmscope_report::fixtures::node_profile();
        let report = Report::from_profile(&profile, &Default::default());
        let options = ReportOptions::default();
        let (mut via_render, mut direct) = (Vec::new(), Vec::new());
        render(&profile, &options, Format::Text, &mut via_render).expect("render");
        render_text(&report, &options, &mut direct).expect("render_text");
        assert_eq!(via_render, direct);
        assert!(via_render.ends_with(b"\n"));
    }
}
