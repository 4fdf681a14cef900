//! Call trees over a profile's stacks, in the spirit of Pharo's MessageTally: who called what,
//! with inclusive and self time at every node.
//!
//! Three views of one [`Profile`]'s stacks ([`Profile::stacks`], frames leaf first, indices
//! into [`Profile::frames`]), chosen by [`TreeView`]:
//!
//! - **top-down** ([`TreeView::TopDown`]): the outermost callers at the roots, what they called
//!   under them, down to the interrupted functions. A node is a *call path*: `main > a > leaf`
//!   and `main > b > leaf` are two nodes of `leaf`. Its inclusive samples are those of the
//!   stacks passing through that path, its self samples those whose leaf it is. Children of a
//!   node are disjoint sets of stacks, so they add up to at most their parent, and recursion
//!   (`f > f > f`) never counts a sample twice: each level is a longer path.
//! - **callees of NAME** ([`TreeView::Callees`]): top-down from every occurrence of the
//!   function NAME, merged. A stack holding NAME several times (recursion) counts once, from its
//!   *outermost* occurrence, so that the root's inclusive samples are exactly the samples of
//!   stacks holding NAME.
//! - **callers of NAME** ([`TreeView::Callers`]): bottom-up, NAME at the root and under each node
//!   the functions that called it, from the outermost occurrence of NAME in each stack outwards.
//!   A node's inclusive samples are those of stacks holding NAME and reaching it through that
//!   chain of callers; its self samples are those of them whose leaf is NAME itself (NAME's own
//!   time that the chain led to).
//!
//! Nodes are keyed by function (section, module, name, optimised, inlined), never by the
//! frame's code range: a JIT method called from two sites of one caller is one node. Where the
//! caller is generated code whose frame carries a range (its call site, `74->78`), the node
//! lists the call sites that led to it with their samples ([`TreeNode::call_sites`]): in the
//! top-down views, ranges in the node's parent; in the callers view, ranges in the node itself
//! (where it calls its parent in the tree).
//!
//! A stack cut at the depth limit ([`Stack::truncated`]) has lost its outermost callers: in the
//! top-down view it hangs under a `[truncated stacks]` root rather than pass its outermost
//! surviving frame off as a root, and in the callers view the chain ends on that node.
//!
//! Processes are merged: a function is one node whatever process ran it.
//!
//! With [`TreeOptions::labels`] (`--sort label:KEY`), each stack first goes under the values
//! of those labels that its sample was taken with (`[phase=a]`, `[phase unset]`): the
//! top-down views' roots, and the callers view's outermost nodes.
//!
//! A tree shows the stacks it is given: clients give it the stacks as they show them
//! ([`crate::stack_view::ShownStacks`]: the language view by default, recursion collapsed on
//! request), so that the tree and the stack formats agree.
//!
//! Nodes with less than [`TreeOptions::fold_percent`] of the profile's samples fold into one
//! `...others...` node per parent (children of one node are disjoint, so the fold's inclusive
//! samples are exactly their sum), as the flat report folds its rows; the `[truncated stacks]`
//! node never does, so that cut stacks are always in sight.
//!
//! The tree is a flat arena ([`CallTree::nodes`], children by index) and is built and walked
//! without recursion, so that a deep (or hostile) stack cannot overflow the thread's stack.

use std::collections::{BTreeMap, HashMap, HashSet};

use vmscope_model::{CodeKind, Profile, Section, Stack};

use crate::{
    functions::Functions,
    model::{OTHERS_NAME, percent},
    sort_keys::LabelValues,
};

/// Name of the pseudo-node under which the top-down view puts stacks cut at the depth limit,
/// and which ends their chains in the callers view.
pub const TRUNCATED_NAME: &str = "[truncated stacks]";

/// Which tree to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeView {
    /// Outermost callers first, down to the interrupted functions.
    TopDown,
    /// Top-down from every occurrence of the function of this exact name, merged.
    Callees(String),
    /// Bottom-up: the function of this exact name, then who called it, and so on outwards.
    Callers(String),
}

/// How to build a call tree.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeOptions {
    /// The view.
    pub view: TreeView,
    /// Nodes with fewer inclusive samples than this percentage of the profile's samples fold
    /// into one `...others...` node per parent; 0 keeps every node.
    pub fold_percent: f64,
    /// Label keys whose values each stack goes under (see the module docs); empty for none.
    pub labels: Vec<String>,
}

impl Default for TreeOptions {
    /// The top-down tree, folded below 0.5% of the samples: a tree repeats each function
    /// under every path that reaches it, so the flat report's 0.01% would keep thousands of
    /// one-sample paths that say nothing at a 1400 Hz cadence, while 0.5% (7 samples a second
    /// of a busy CPU) keeps every path that a person reading a tree would act on.
    fn default() -> Self {
        TreeOptions {
            view: TreeView::TopDown,
            fold_percent: DEFAULT_FOLD_PERCENT,
            labels: Vec::new(),
        }
    }
}

/// The default of [`TreeOptions::fold_percent`] (see [`TreeOptions::default`]).
pub const DEFAULT_FOLD_PERCENT: f64 = 0.5;

/// Why a tree could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// `--callers`/`--callees` named a function that no frame of the profile has.
    #[error("no function named {name:?} in the profile's stacks{}", close_names_suffix(.close))]
    NoSuchFunction {
        /// The name asked for.
        name: String,
        /// Names of the profile's functions that look like it (same letters in another case,
        /// containing it, or a few edits away), closest first; at most [`MAX_CLOSE_NAMES`].
        close: Vec<String>,
    },
}

/// At most this many close names are suggested.
pub const MAX_CLOSE_NAMES: usize = 10;

fn close_names_suffix(close: &[String]) -> String {
    if close.is_empty() {
        String::new()
    } else {
        format!("; did you mean one of: {}", close.join(", "))
    }
}

/// A function as a node of the tree shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeFunction {
    /// The function's name, as [`Frame::name`](vmscope_model::Frame::name).
    pub name: String,
    /// File name of its module.
    pub module: String,
    /// Section of its code.
    pub section: Section,
    /// Whether `name` is a real symbol.
    pub symbolized: bool,
    /// Generated code: what kind of code it is (as the first of its frames says); `None`
    /// elsewhere and when unknown.
    pub kind: Option<CodeKind>,
    /// Part of optimised code.
    pub optimised: bool,
    /// A method inlined into the compiled code of its caller.
    pub inlined: bool,
    /// Kernel code.
    pub kernel: bool,
}

/// What a node stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeLabel {
    /// A function.
    Function(TreeFunction),
    /// Nodes folded away under the threshold; how many.
    Others(usize),
    /// Stacks cut at the depth limit, whose outermost callers are unknown ([`TRUNCATED_NAME`]).
    Truncated,
    /// The values of [`TreeOptions::labels`] that its stacks were taken with: `[phase=a]`.
    Label(String),
}

impl NodeLabel {
    /// The name to show: the function's, [`OTHERS_NAME`] or [`TRUNCATED_NAME`].
    pub fn name(&self) -> &str {
        match self {
            NodeLabel::Function(function) => &function.name,
            NodeLabel::Others(_) => OTHERS_NAME,
            NodeLabel::Truncated => TRUNCATED_NAME,
            NodeLabel::Label(name) => name,
        }
    }

    /// The function, if the node is one.
    pub fn function(&self) -> Option<&TreeFunction> {
        match self {
            NodeLabel::Function(function) => Some(function),
            _ => None,
        }
    }
}

/// Samples of one call site: a range of a generated code caller's frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSite {
    /// The range as [`Frame::range`](vmscope_model::Frame::range) labels it (`74->78`,
    /// `app.js:12:5`).
    pub range: String,
    /// Samples that went through it.
    pub samples: u64,
}

/// One node of a [`CallTree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeNode {
    /// What the node stands for.
    pub label: NodeLabel,
    /// Samples of the stacks through this node (see the module docs for each view).
    pub inclusive_samples: u64,
    /// Top-down: samples whose leaf is this node. Callers view: samples whose leaf is the root
    /// function, reached through this node. 0 for [`NodeLabel::Others`], where it means
    /// nothing (renderers leave it blank).
    pub self_samples: u64,
    /// Call sites (ranges of a generated code caller's frame) that led to this node, most
    /// samples first; empty when the caller's frames carry no range.
    pub call_sites: Vec<CallSite>,
    /// Native code with DWARF: the source lines of the node's own frames (`hot.c:12`: where
    /// its samples fell, or the calls it made towards its children), most samples first;
    /// empty when unknown.
    pub lines: Vec<CallSite>,
    /// Indices in [`CallTree::nodes`], most inclusive samples first, then by name; a fold last.
    pub children: Vec<usize>,
}

/// A call tree of a profile, ready to render.
#[derive(Debug, Clone, PartialEq)]
pub struct CallTree {
    /// The view it is.
    pub view: TreeView,
    /// Every sample of the profile: the denominator of the tree's percentages, as of the flat
    /// report's.
    pub total_samples: u64,
    /// Samples in the tree: every stack's for the top-down view, those of stacks holding the
    /// function for the callers and callees views.
    pub tree_samples: u64,
    /// Of `tree_samples`, those of stacks cut at the depth limit.
    pub truncated_samples: u64,
    /// Every node; [`CallTree::roots`] and [`TreeNode::children`] index it.
    pub nodes: Vec<TreeNode>,
    /// The roots, most inclusive samples first, then by name; a fold last.
    pub roots: Vec<usize>,
    /// The fold threshold it was built with, in percent of `total_samples`.
    pub fold_percent: f64,
}

impl CallTree {
    /// `samples` as a percentage of the profile's samples (0 for an empty profile).
    pub fn percent(&self, samples: u64) -> f64 {
        percent(samples, self.total_samples)
    }

    /// The nodes in display order (depth first, children in order) with their depth (roots
    /// at 0), computed without recursion.
    pub fn walk(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut todo: Vec<(usize, usize)> = self.roots.iter().rev().map(|&r| (r, 0)).collect();
        while let Some((node, depth)) = todo.pop() {
            out.push((node, depth));
            todo.extend(
                self.nodes[node]
                    .children
                    .iter()
                    .rev()
                    .map(|&child| (child, depth + 1)),
            );
        }
        out
    }

    /// Builds the tree `options` asks for from `profile`'s stacks. Frame indices outside
    /// [`Profile::frames`] (a broken daemon) are skipped; a stack left with no frame adds to
    /// no node. Fails only when a callers/callees view names a function no frame has.
    pub fn from_profile(profile: &Profile, options: &TreeOptions) -> Result<CallTree, TreeError> {
        let functions = Functions::new(&profile.frames);
        let wanted: Option<HashSet<u32>> = match &options.view {
            TreeView::TopDown => None,
            TreeView::Callees(name) | TreeView::Callers(name) => {
                let ids = functions.named(name);
                if ids.is_empty() {
                    return Err(TreeError::NoSuchFunction {
                        name: name.clone(),
                        close: close_names(name, functions.names()),
                    });
                }
                Some(ids)
            }
        };

        // Each frame's source line as nodes show it, `hot.c:12`, made once.
        let line_labels: Vec<Option<String>> = profile
            .frames
            .iter()
            .map(|f| {
                (f.line > 0).then(|| {
                    let file = f.file.rsplit('/').next().unwrap_or(&f.file);
                    format!("{file}:{}", f.line)
                })
            })
            .collect();
        let mut arena = Arena::default();
        let mut label_values = LabelValues::new(", ");
        let (mut tree_samples, mut truncated_samples) = (0u64, 0u64);
        let stack_samples = profile
            .stacks
            .iter()
            .fold(0u64, |sum, s| sum.saturating_add(s.samples()));
        // The path of one stack, root of the view first: (function, frame index of the call
        // site in the caller that led to it, if any, the node's own frame).
        let mut path: Vec<(Key, Option<usize>, Option<usize>)> = Vec::new();
        for stack in &profile.stacks {
            if stack.samples() == 0 {
                continue;
            }
            let frames = valid_frames(profile, stack);
            path.clear();
            let label = (!options.labels.is_empty()).then(|| {
                (
                    Key::Label(label_values.of(
                        &profile.labels,
                        &options.labels,
                        Some(&stack.labels),
                    )),
                    None,
                    None,
                )
            });
            if let (Some(label), false) = (label, matches!(options.view, TreeView::Callers(_))) {
                path.push(label);
            }
            let leaf_is_self = match &options.view {
                TreeView::TopDown => {
                    if stack.truncated {
                        path.push((Key::Truncated, None, None));
                    }
                    // Outermost first; each frame's call site is in the frame under it.
                    for i in (0..frames.len()).rev() {
                        let caller = (i + 1 < frames.len()).then(|| frames[i + 1]);
                        let key = Key::Function(functions.of_frame[frames[i]]);
                        path.push((key, caller, Some(frames[i])));
                    }
                    true
                }
                TreeView::Callees(_) | TreeView::Callers(_) => {
                    let wanted = wanted.as_ref().expect("a named view has its functions");
                    // Leaf first: the outermost occurrence is the last.
                    let Some(outer) = frames
                        .iter()
                        .rposition(|&f| wanted.contains(&functions.of_frame[f]))
                    else {
                        continue;
                    };
                    if matches!(options.view, TreeView::Callees(_)) {
                        for i in (0..=outer).rev() {
                            let caller = (i < outer).then(|| frames[i + 1]);
                            let key = Key::Function(functions.of_frame[frames[i]]);
                            path.push((key, caller, Some(frames[i])));
                        }
                        true
                    } else {
                        // Each caller's own frame holds its call site towards its parent.
                        for (i, &frame) in frames.iter().enumerate().skip(outer) {
                            let site = (i > outer).then_some(frame);
                            let key = Key::Function(functions.of_frame[frame]);
                            path.push((key, site, Some(frame)));
                        }
                        if stack.truncated {
                            path.push((Key::Truncated, None, None));
                        }
                        path.extend(label);
                        frames
                            .first()
                            .is_some_and(|&leaf| wanted.contains(&functions.of_frame[leaf]))
                    }
                }
            };
            if path.len() <= usize::from(label.is_some()) {
                continue;
            }
            tree_samples = tree_samples.saturating_add(stack.samples());
            if stack.truncated {
                truncated_samples = truncated_samples.saturating_add(stack.samples());
            }
            let top_down = !matches!(options.view, TreeView::Callers(_));
            let mut parent = ROOT;
            for (depth, &(key, site, own)) in path.iter().enumerate() {
                let node = arena.child(parent, key);
                let raw = &mut arena.nodes[node];
                raw.inclusive = raw.inclusive.saturating_add(stack.samples());
                let is_leaf = depth + 1 == path.len();
                if (top_down && is_leaf) || (!top_down && leaf_is_self) {
                    raw.self_samples = raw.self_samples.saturating_add(stack.samples());
                }
                if let Some(range) = site
                    .map(|f| profile.frames[f].range.as_str())
                    .filter(|r| !r.is_empty())
                {
                    // Looked up by &str first: most stacks pass known sites, and a String per
                    // frame per stack would be most of the work on a million stacks.
                    match raw.call_sites.get_mut(range) {
                        Some(samples) => *samples = samples.saturating_add(stack.samples()),
                        None => {
                            raw.call_sites.insert(range.to_owned(), stack.samples());
                        }
                    }
                }
                if let Some(line) = own.and_then(|f| line_labels[f].as_deref()) {
                    match raw.lines.get_mut(line) {
                        Some(samples) => *samples = samples.saturating_add(stack.samples()),
                        None => {
                            raw.lines.insert(line.to_owned(), stack.samples());
                        }
                    }
                }
                parent = node;
            }
        }

        let total_samples = profile.total_samples.max(stack_samples);
        let label_nodes: Vec<String> = label_values
            .names
            .iter()
            .map(|name| format!("[{name}]"))
            .collect();
        let fold_percent = if options.fold_percent.is_finite() {
            options.fold_percent.max(0.0)
        } else {
            0.0
        };
        let (nodes, roots) = arena.finish(&functions, &label_nodes, total_samples, fold_percent);
        Ok(CallTree {
            view: options.view.clone(),
            total_samples,
            tree_samples,
            truncated_samples,
            nodes,
            roots,
            fold_percent,
        })
    }
}

/// The stack's frame indices that name a frame, leaf first.
fn valid_frames(profile: &Profile, stack: &Stack) -> Vec<usize> {
    profile
        .stack_frames(stack)
        .map(|f| f as usize)
        .filter(|&f| f < profile.frames.len())
        .collect()
}

/// A node's function as the tree shows it: the first of its frames describes it.
fn describe(functions: &Functions<'_>, id: u32) -> TreeFunction {
    let frame = functions.frame(id);
    let section = frame.section;
    TreeFunction {
        name: frame.name.clone(),
        module: frame.module.clone(),
        section,
        symbolized: frame.symbolized,
        kind: if section == Section::Generated {
            frame.kind
        } else {
            None
        },
        optimised: frame.optimised,
        inlined: frame.inlined,
        kernel: frame.kernel,
    }
}

/// What a node of the arena is keyed by under its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Function(u32),
    Truncated,
    /// An index into the tree's label values' names.
    Label(u32),
}

/// The arena's invisible root, parent of the view's roots.
const ROOT: usize = 0;

#[derive(Debug, Default)]
struct RawNode {
    key: Option<Key>,
    inclusive: u64,
    self_samples: u64,
    call_sites: BTreeMap<String, u64>,
    lines: BTreeMap<String, u64>,
    children: HashMap<Key, usize>,
}

#[derive(Debug)]
struct Arena {
    nodes: Vec<RawNode>,
}

impl Default for Arena {
    fn default() -> Self {
        Arena {
            nodes: vec![RawNode::default()],
        }
    }
}

impl Arena {
    /// The child of `parent` keyed `key`, made if new.
    fn child(&mut self, parent: usize, key: Key) -> usize {
        if let Some(&child) = self.nodes[parent].children.get(&key) {
            return child;
        }
        let child = self.nodes.len();
        self.nodes.push(RawNode {
            key: Some(key),
            ..RawNode::default()
        });
        self.nodes[parent].children.insert(key, child);
        child
    }

    /// The tree's nodes and roots: children sorted, small ones folded, breadth first without
    /// recursion.
    fn finish(
        mut self,
        functions: &Functions<'_>,
        label_names: &[String],
        total: u64,
        fold_percent: f64,
    ) -> (Vec<TreeNode>, Vec<usize>) {
        let is_small = |samples: u64| (samples as f64) * 100.0 < fold_percent * total as f64;
        let mut nodes: Vec<TreeNode> = Vec::new();
        // (raw node, index of its TreeNode or None for the arena's root).
        let mut todo: Vec<(usize, Option<usize>)> = vec![(ROOT, None)];
        let mut roots = Vec::new();
        while let Some((raw, out)) = todo.pop() {
            let mut children: Vec<usize> = self.nodes[raw].children.values().copied().collect();
            let name = |raw: &RawNode| match raw.key {
                Some(Key::Function(id)) => functions.frame(id).name.as_str(),
                Some(Key::Label(i)) => label_names[i as usize].as_str(),
                _ => TRUNCATED_NAME,
            };
            children.sort_by(|&a, &b| {
                let (a, b) = (&self.nodes[a], &self.nodes[b]);
                crate::rank::most_first(a.inclusive, b.inclusive)
                    .then_with(|| name(a).cmp(name(b)))
                    .then_with(|| a.key_order().cmp(&b.key_order()))
            });
            // Truncated stacks never fold away: they are marked and counted, never hidden.
            let (kept, folded): (Vec<usize>, Vec<usize>) = children.into_iter().partition(|&c| {
                self.nodes[c].key == Some(Key::Truncated) || !is_small(self.nodes[c].inclusive)
            });
            let mut child_out = Vec::with_capacity(kept.len() + 1);
            for child in kept {
                let node = std::mem::take(&mut self.nodes[child]);
                let index = nodes.len();
                nodes.push(TreeNode {
                    label: match node.key {
                        Some(Key::Function(id)) => NodeLabel::Function(describe(functions, id)),
                        Some(Key::Label(i)) => NodeLabel::Label(label_names[i as usize].clone()),
                        _ => NodeLabel::Truncated,
                    },
                    inclusive_samples: node.inclusive,
                    self_samples: node.self_samples,
                    call_sites: sorted_sites(node.call_sites),
                    lines: sorted_sites(node.lines),
                    children: Vec::new(),
                });
                // Its children are still in the arena: keep them where the walk finds them.
                self.nodes[child].children = node.children;
                child_out.push(index);
                todo.push((child, Some(index)));
            }
            if !folded.is_empty() {
                let inclusive = folded.iter().fold(0u64, |sum, &child| {
                    sum.saturating_add(self.nodes[child].inclusive)
                });
                child_out.push(nodes.len());
                nodes.push(TreeNode {
                    label: NodeLabel::Others(folded.len()),
                    inclusive_samples: inclusive,
                    self_samples: 0,
                    // The sites of functions nobody sees would explain nothing.
                    call_sites: Vec::new(),
                    lines: Vec::new(),
                    children: Vec::new(),
                });
            }
            match out {
                Some(index) => nodes[index].children = child_out,
                None => roots = child_out,
            }
        }
        (nodes, roots)
    }
}

impl RawNode {
    /// Breaks ties between equally named functions (baseline and optimised versions, two
    /// modules' `memcpy`) by the function id, which follows the frame table's order.
    fn key_order(&self) -> (u8, u32) {
        match self.key {
            Some(Key::Function(id)) => (0, id),
            Some(Key::Label(i)) => (1, i),
            Some(Key::Truncated) => (2, 0),
            None => (3, 0),
        }
    }
}

/// Call sites most samples first, then by range.
fn sorted_sites(sites: BTreeMap<String, u64>) -> Vec<CallSite> {
    let mut sites: Vec<CallSite> = sites
        .into_iter()
        .map(|(range, samples)| CallSite { range, samples })
        .collect();
    // Stable over the map's order: ties stay sorted by range.
    crate::rank::rank(&mut sites, |s| s.samples, |_, _| std::cmp::Ordering::Equal);
    sites
}

/// Names among `names` that look like `wanted`, closest first, at most [`MAX_CLOSE_NAMES`]:
/// the same name in another case, names containing it or contained in it (case ignored), and
/// names a few edits away (a quarter of its length, at least 2).
pub fn close_names<'a>(wanted: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let lower = wanted.to_lowercase();
    let budget = (wanted.chars().count() / 4).max(2);
    let mut close: Vec<(usize, &str)> = names
        .filter_map(|name| {
            let candidate = name.to_lowercase();
            let score = if candidate == lower {
                0
            } else if candidate.contains(&lower)
                || (!candidate.is_empty() && lower.contains(&candidate))
            {
                1 + name.chars().count().abs_diff(wanted.chars().count())
            } else {
                let distance = edit_distance(&lower, &candidate, budget)?;
                // After every containment, which is what a user typing part of a name means.
                1000 + distance
            };
            Some((score, name))
        })
        .collect();
    close.sort();
    close.dedup();
    close
        .into_iter()
        .take(MAX_CLOSE_NAMES)
        .map(|(_, name)| name.to_owned())
        .collect()
}

/// Levenshtein distance over chars, or `None` when it is more than `budget` (decided early
/// from the lengths, so that long C++ names cost nothing).
fn edit_distance(a: &str, b: &str, budget: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > budget {
        return None;
    }
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    let distance = previous[b.len()];
    (distance <= budget).then_some(distance)
}

#[cfg(test)]
mod tests {
    use vmscope_model::{CodeKind, Frame, Section};

    use super::*;
    use crate::stack_view::{FrameView, ShownStacks, StackOptions};

    /// A native frame of the `fixture` executable.
    fn native(name: &str) -> Frame {
        Frame {
            section: Section::Vanilla,
            name: name.to_owned(),
            module: "fixture".to_owned(),
            symbolized: true,
            ..Frame::default()
        }
    }

    /// A JIT method's frame whose pc is in `range`.
    fn jit(name: &str, range: &str) -> Frame {
        Frame {
            section: Section::Generated,
            name: name.to_owned(),
            module: "[anon]".to_owned(),
            symbolized: true,
            kind: Some(CodeKind::Method),
            range: range.to_owned(),
            code_map: "vm".to_owned(),
            ..Frame::default()
        }
    }

    /// A profile of `frames` and `stacks` (frame indices leaf first, samples, truncated),
    /// whose total is the stacks' sum.
    fn profile(frames: Vec<Frame>, stacks: &[(&[u32], u64, bool)]) -> Profile {
        let (stack_nodes, stacks) = crate::fixtures::stacks_of(stacks);
        Profile {
            total_samples: stacks.iter().map(|s| s.samples()).sum(),
            frames,
            stack_nodes,
            stacks,
            ..Profile::default()
        }
    }

    fn build(profile: &Profile, view: TreeView, fold_percent: f64) -> CallTree {
        let tree = CallTree::from_profile(
            profile,
            &TreeOptions {
                view,
                fold_percent,
                labels: Vec::new(),
            },
        )
        .expect("the tree builds");
        check_invariants(&tree);
        tree
    }

    /// What holds of every tree: children add up to at most their parent (they are disjoint
    /// sets of its stacks), are sorted, and self never exceeds inclusive.
    fn check_invariants(tree: &CallTree) {
        let sum = |children: &[usize]| -> u64 {
            children
                .iter()
                .map(|&c| tree.nodes[c].inclusive_samples)
                .sum()
        };
        assert_eq!(
            sum(&tree.roots),
            tree.tree_samples,
            "roots hold the tree's samples"
        );
        for node in &tree.nodes {
            assert!(node.self_samples <= node.inclusive_samples, "{node:?}");
            if !matches!(tree.view, TreeView::Callers(_)) {
                assert!(sum(&node.children) + node.self_samples <= node.inclusive_samples);
            }
            let samples: Vec<u64> = node
                .children
                .iter()
                .filter(|&&c| !matches!(tree.nodes[c].label, NodeLabel::Others(_)))
                .map(|&c| tree.nodes[c].inclusive_samples)
                .collect();
            assert!(
                samples.windows(2).all(|w| w[0] >= w[1]),
                "sorted: {samples:?}"
            );
        }
    }

    /// The tree as lines `depth name inclusive/self`, in display order, for whole-tree
    /// comparisons.
    fn lines(tree: &CallTree) -> Vec<String> {
        tree.walk()
            .into_iter()
            .map(|(node, depth)| {
                let node = &tree.nodes[node];
                let sites: Vec<String> = node
                    .call_sites
                    .iter()
                    .map(|s| format!("{}:{}", s.range, s.samples))
                    .collect();
                format!(
                    "{}{} {}/{}{}",
                    "  ".repeat(depth),
                    node.label.name(),
                    node.inclusive_samples,
                    node.self_samples,
                    if sites.is_empty() {
                        String::new()
                    } else {
                        format!(" [{}]", sites.join(" "))
                    }
                )
            })
            .collect()
    }

    /// `leaf` called by `caller_a` for 70 samples and `caller_b` for 30, both called by
    /// `main`, which has 2 of its own: the C fixture of the issue, by hand.
    fn callers_profile() -> Profile {
        let frames = ["main", "caller_a", "caller_b", "leaf"]
            .map(native)
            .to_vec();
        profile(
            frames,
            &[
                (&[3, 1, 0], 70, false),
                (&[3, 2, 0], 30, false),
                (&[0], 2, false),
            ],
        )
    }

    /// With label keys, each stack goes under its values: the roots of the top-down views, the
    /// outermost nodes of the callers view; stacks without the label under `[KEY unset]`.
    #[test]
    fn label_keys_root_the_stacks_under_their_values() {
        let mut profile = callers_profile();
        profile.labels = vec![
            vmscope_model::Label::new("phase", "a"),
            vmscope_model::Label::new("tenant", "x"),
        ];
        // caller_a's stack had phase a (and tenant x), caller_b's none, main's tenant x only.
        profile.stacks[0].labels = vec![0, 1];
        profile.stacks[2].labels = vec![1];
        let with = |view, labels: &[&str]| {
            let tree = CallTree::from_profile(
                &profile,
                &TreeOptions {
                    view,
                    fold_percent: 0.0,
                    labels: labels.iter().map(|l| l.to_string()).collect(),
                },
            )
            .expect("the tree builds");
            check_invariants(&tree);
            lines(&tree)
        };
        assert_eq!(
            with(TreeView::TopDown, &["phase"]),
            [
                "[phase=a] 70/0",
                "  main 70/0",
                "    caller_a 70/0",
                "      leaf 70/70",
                "[phase unset] 32/0",
                "  main 32/2",
                "    caller_b 30/0",
                "      leaf 30/30",
            ]
        );
        assert_eq!(
            with(TreeView::Callers("leaf".into()), &["phase", "tenant"]),
            [
                "leaf 100/100",
                "  caller_a 70/70",
                "    main 70/70",
                "      [phase=a, tenant=x] 70/70",
                "  caller_b 30/30",
                "    main 30/30",
                "      [phase unset, tenant unset] 30/30",
            ]
        );
        assert_eq!(
            with(TreeView::Callees("caller_b".into()), &["phase"]),
            ["[phase unset] 30/0", "  caller_b 30/0", "    leaf 30/30",]
        );
    }

    #[test]
    fn top_down_splits_a_leaf_by_caller() {
        let tree = build(&callers_profile(), TreeView::TopDown, 0.0);
        assert_eq!(tree.total_samples, 102);
        assert_eq!(tree.tree_samples, 102);
        assert_eq!(
            lines(&tree),
            [
                "main 102/2",
                "  caller_a 70/0",
                "    leaf 70/70",
                "  caller_b 30/0",
                "    leaf 30/30",
            ]
        );
        let main = &tree.nodes[tree.roots[0]];
        assert_eq!(tree.percent(main.inclusive_samples), 100.0);
        let function = main.label.function().expect("a function");
        assert_eq!(
            (function.section, function.module.as_str(), function.kind),
            (Section::Vanilla, "fixture", None)
        );
    }

    #[test]
    fn callers_of_a_function_are_inverted() {
        let tree = build(
            &callers_profile(),
            TreeView::Callers("leaf".to_owned()),
            0.0,
        );
        assert_eq!(tree.tree_samples, 100, "only stacks holding leaf");
        assert_eq!(
            lines(&tree),
            [
                "leaf 100/100",
                "  caller_a 70/70",
                "    main 70/70",
                "  caller_b 30/30",
                "    main 30/30",
            ]
        );
    }

    #[test]
    fn callees_of_a_function_merge_its_occurrences() {
        // leaf is also called straight from main: both occurrences merge under one root.
        let mut profile = callers_profile();
        crate::fixtures::push_stack(
            &mut profile,
            &[3, 0],
            Stack {
                pid: 1,
                tid: 1,
                values: vec![5, 5_000_000],
                end: Some(vmscope_model::StackEnd::Complete),
                ..Stack::default()
            },
        );
        profile.total_samples += 5;
        let tree = build(&profile, TreeView::Callees("caller_a".to_owned()), 0.0);
        assert_eq!(lines(&tree), ["caller_a 70/0", "  leaf 70/70"]);
        let tree = build(&profile, TreeView::Callees("leaf".to_owned()), 0.0);
        assert_eq!(lines(&tree), ["leaf 105/105"]);
        assert_eq!(tree.total_samples, 107);
    }

    /// `f` recursing: main>f>f>f (10), main>f>g (5), main>f (3).
    fn recursive_profile() -> Profile {
        let frames = ["main", "f", "g"].map(native).to_vec();
        profile(
            frames,
            &[
                (&[1, 1, 1, 0], 10, false),
                (&[2, 1, 0], 5, false),
                (&[1, 0], 3, false),
            ],
        )
    }

    #[test]
    fn recursion_is_a_path_per_level_top_down() {
        let tree = build(&recursive_profile(), TreeView::TopDown, 0.0);
        assert_eq!(
            lines(&tree),
            [
                "main 18/0",
                "  f 18/3",
                "    f 10/0",
                "      f 10/10",
                "    g 5/5",
            ]
        );
    }

    #[test]
    fn recursion_counts_a_stack_once_from_its_outermost_occurrence() {
        let tree = build(&recursive_profile(), TreeView::Callees("f".to_owned()), 0.0);
        assert_eq!(
            lines(&tree),
            ["f 18/3", "  f 10/0", "    f 10/10", "  g 5/5"],
            "18 samples hold f, not 10 * 3 + 5 + 3"
        );
        let tree = build(&recursive_profile(), TreeView::Callers("f".to_owned()), 0.0);
        // f is the leaf of 13 of them (its own time), g's 5 are its callees'.
        assert_eq!(lines(&tree), ["f 18/13", "  main 18/13"]);
    }

    /// The tree of `profile`'s stacks as `stacks` shows them.
    fn build_shown(profile: &Profile, stacks: StackOptions, view: TreeView) -> CallTree {
        let options = crate::ReportOptions {
            stacks,
            ..crate::ReportOptions::default()
        };
        build(&ShownStacks::new(profile, &options).profile, view, 0.0)
    }

    #[test]
    fn collapsed_recursion_is_one_node_with_its_inclusive_time() {
        let collapsed = StackOptions {
            frames: FrameView::Native,
            collapse_recursion: true,
        };
        let tree = build_shown(&recursive_profile(), collapsed, TreeView::TopDown);
        assert_eq!(lines(&tree), ["main 18/0", "  f 18/13", "    g 5/5"]);
        // The callers and callees views agree with the uncollapsed ones, which count each
        // stack once from its outermost f.
        let tree = build_shown(
            &recursive_profile(),
            collapsed,
            TreeView::Callees("f".to_owned()),
        );
        assert_eq!(lines(&tree), ["f 18/13", "  g 5/5"]);
        let tree = build_shown(
            &recursive_profile(),
            collapsed,
            TreeView::Callers("f".to_owned()),
        );
        assert_eq!(lines(&tree), ["f 18/13", "  main 18/13"]);
    }

    #[test]
    fn the_language_view_puts_jit_callees_under_their_jit_callers() {
        let mut pic = jit("at:put:", "");
        pic.kind = Some(CodeKind::ClosedPic);
        let frames = vec![
            native("main"),
            native("interpret"),
            jit("benchmark", "74->78"),
            pic,
            jit("Array>>at:put:", "1->5"),
            native("primitiveFileWrite"),
        ];
        let profile = profile(
            frames,
            &[
                (&[4, 3, 2, 1, 0], 7, false),
                (&[5, 2, 1, 0], 3, false),
                (&[5, 1, 0], 2, false),
            ],
        );
        let language = StackOptions::DEFAULT;
        let tree = build_shown(&profile, language, TreeView::TopDown);
        assert_eq!(
            lines(&tree),
            [
                "benchmark 10/0",
                "  Array>>at:put: 7/7 [74->78:7]",
                "  primitiveFileWrite 3/3 [74->78:3]",
                // The VM's own time, with no JIT frame, stays whole.
                "main 2/0",
                "  interpret 2/0",
                "    primitiveFileWrite 2/2",
            ]
        );
        let tree = build_shown(
            &profile,
            language,
            TreeView::Callers("Array>>at:put:".to_owned()),
        );
        assert_eq!(
            lines(&tree),
            ["Array>>at:put: 7/7", "  benchmark 7/7 [74->78:7]"]
        );
    }

    #[test]
    fn truncated_stacks_hang_under_their_own_root() {
        let frames = ["main", "a", "b", "leaf"].map(native).to_vec();
        // b's callers were cut off at the depth limit.
        let profile = profile(frames, &[(&[3, 1, 2], 4, true), (&[3, 1, 0], 6, false)]);
        let tree = build(&profile, TreeView::TopDown, 0.0);
        assert_eq!(tree.truncated_samples, 4);
        assert_eq!(
            lines(&tree),
            [
                "main 6/0",
                "  a 6/0",
                "    leaf 6/6",
                "[truncated stacks] 4/0",
                "  b 4/0",
                "    a 4/0",
                "      leaf 4/4",
            ]
        );
        let tree = build(&profile, TreeView::Callers("leaf".to_owned()), 0.0);
        assert_eq!(
            lines(&tree),
            [
                "leaf 10/10",
                "  a 10/10",
                "    main 6/6",
                "    b 4/4",
                "      [truncated stacks] 4/4",
            ]
        );
        assert!(matches!(
            tree.nodes[tree.walk()[4].0].label,
            NodeLabel::Truncated
        ));
        // However small, the cut stacks stay in sight.
        let tree = build(&profile, TreeView::TopDown, 50.0);
        assert_eq!(
            lines(&tree),
            [
                "main 6/0",
                "  a 6/0",
                "    leaf 6/6",
                "[truncated stacks] 4/0",
                "  ...others... 4/0",
            ]
        );
        // Callees of a: the cut is above it and changes nothing.
        let tree = build(&profile, TreeView::Callees("a".to_owned()), 0.0);
        assert_eq!(lines(&tree), ["a 10/0", "  leaf 10/10"]);
        assert_eq!(tree.truncated_samples, 4);
    }

    #[test]
    fn jit_nodes_are_keyed_by_function_and_list_their_call_sites() {
        let frames = vec![
            native("main"),
            jit("Integer>>benchmark", "74->78"),
            jit("Integer>>benchmark", "79->84"),
            jit("Integer>>benchmark", "52->60"),
            jit("Array>>at:put:", "1->5"),
        ];
        let profile = profile(
            frames,
            &[
                (&[4, 1, 0], 5, false),
                (&[4, 2, 0], 3, false),
                // A leaf range is where the sample fell, not a call site.
                (&[3, 0], 2, false),
            ],
        );
        let tree = build(&profile, TreeView::TopDown, 0.0);
        assert_eq!(
            lines(&tree),
            [
                "main 10/0",
                "  Integer>>benchmark 10/2",
                "    Array>>at:put: 8/8 [74->78:5 79->84:3]",
            ]
        );
        let at_put = tree.walk()[2].0;
        let function = tree.nodes[at_put].label.function().expect("a function");
        assert_eq!(function.kind, Some(CodeKind::Method));
        assert_eq!(function.section, Section::Generated);
        // Bottom-up, the caller's own frame holds the site where it calls its parent.
        let tree = build(
            &profile,
            TreeView::Callers("Array>>at:put:".to_owned()),
            0.0,
        );
        assert_eq!(
            lines(&tree),
            [
                "Array>>at:put: 8/8",
                "  Integer>>benchmark 8/8 [74->78:5 79->84:3]",
                "    main 8/8",
            ]
        );
    }

    #[test]
    fn inlined_and_optimised_frames_are_functions_of_their_own() {
        let mut optimised = jit("Inline>>bench", "12->30");
        optimised.optimised = true;
        let mut inlined = jit("Inline>>heavy", "33->70");
        inlined.inlined = true;
        inlined.optimised = true;
        let baseline = jit("Inline>>heavy", "33->70");
        let profile = profile(
            vec![native("main"), optimised, inlined, baseline],
            &[(&[2, 1, 0], 7, false), (&[3, 1, 0], 4, false)],
        );
        let tree = build(&profile, TreeView::TopDown, 0.0);
        assert_eq!(
            lines(&tree),
            [
                "main 11/0",
                "  Inline>>bench 11/0",
                "    Inline>>heavy 7/7 [12->30:7]",
                "    Inline>>heavy 4/4 [12->30:4]",
            ]
        );
        let walk = tree.walk();
        let heavy = tree.nodes[walk[2].0].label.function().expect("a function");
        assert!(heavy.inlined && heavy.optimised);
        let heavy = tree.nodes[walk[3].0].label.function().expect("a function");
        assert!(!heavy.inlined && !heavy.optimised);
        // Both versions of a name are its occurrences.
        let tree = build(&profile, TreeView::Callees("Inline>>heavy".to_owned()), 0.0);
        assert_eq!(tree.tree_samples, 11);
        assert_eq!(tree.roots.len(), 2);
    }

    #[test]
    fn small_nodes_fold_into_others_per_parent() {
        let frames = ["main", "big", "small1", "small2", "leaf"]
            .map(native)
            .to_vec();
        let profile = profile(
            frames,
            &[
                (&[4, 1, 0], 95, false),
                (&[2, 0], 3, false),
                (&[4, 3, 0], 2, false),
            ],
        );
        // 5% of 100: small1 (3) and small2 (2) fold, with small2's callee.
        let tree = build(&profile, TreeView::TopDown, 5.0);
        assert_eq!(
            lines(&tree),
            [
                "main 100/0",
                "  big 95/0",
                "    leaf 95/95",
                "  ...others... 5/0"
            ]
        );
        assert_eq!(tree.nodes[tree.walk()[3].0].label, NodeLabel::Others(2));
        // At exactly the threshold a node stays.
        let tree = build(&profile, TreeView::TopDown, 3.0);
        assert_eq!(
            lines(&tree),
            [
                "main 100/0",
                "  big 95/0",
                "    leaf 95/95",
                "  small1 3/3",
                "  ...others... 2/0",
            ]
        );
        // A bad threshold keeps everything rather than folding everything.
        let tree = build(&profile, TreeView::TopDown, f64::NAN);
        assert_eq!(tree.nodes.len(), 6);
    }

    #[test]
    fn an_unknown_name_lists_close_ones() {
        let profile = callers_profile();
        let error = CallTree::from_profile(
            &profile,
            &TreeOptions {
                view: TreeView::Callers("Leaf".to_owned()),
                fold_percent: 0.0,
                labels: Vec::new(),
            },
        )
        .expect_err("no exact match");
        assert_eq!(
            error,
            TreeError::NoSuchFunction {
                name: "Leaf".to_owned(),
                close: vec!["leaf".to_owned()],
            }
        );
        let error = CallTree::from_profile(
            &profile,
            &TreeOptions {
                view: TreeView::Callees("caller".to_owned()),
                fold_percent: 0.0,
                labels: Vec::new(),
            },
        )
        .expect_err("no exact match");
        assert_eq!(
            error.to_string(),
            "no function named \"caller\" in the profile's stacks; did you mean one of: \
             caller_a, caller_b"
        );
        let error = CallTree::from_profile(
            &profile,
            &TreeOptions {
                view: TreeView::Callees("zzzzzzzzzz".to_owned()),
                fold_percent: 0.0,
                labels: Vec::new(),
            },
        )
        .expect_err("no match");
        assert_eq!(
            error.to_string(),
            "no function named \"zzzzzzzzzz\" in the profile's stacks"
        );
        assert_eq!(close_names("mian", ["main", "leaf"].into_iter()), ["main"]);
    }

    #[test]
    fn broken_stacks_are_skipped_not_fatal() {
        let frames = ["main", "leaf"].map(native).to_vec();
        let mut profile = profile(
            frames,
            &[
                (&[1, 99, 0], 4, false),
                (&[77], 3, false),
                (&[1, 0], 0, false),
            ],
        );
        profile.total_samples = 7;
        let tree = build(&profile, TreeView::TopDown, 0.0);
        assert_eq!(lines(&tree), ["main 4/0", "  leaf 4/4"]);
        assert_eq!(tree.total_samples, 7);
        assert_eq!(tree.tree_samples, 4);
        // Nothing at all: an empty tree, no NaN.
        let tree = build(&Profile::default(), TreeView::TopDown, 0.5);
        assert!(tree.roots.is_empty());
        assert_eq!(tree.percent(0), 0.0);
    }

    #[test]
    fn a_deep_stack_builds_and_walks_without_recursion() {
        let frames = ["main", "f"].map(native).to_vec();
        let mut stack = vec![1u32; 100_000];
        stack.push(0);
        let profile = profile(frames, &[(&stack, 1, true)]);
        let tree = build(&profile, TreeView::TopDown, 0.0);
        assert_eq!(tree.walk().len(), 100_002);
        let tree = build(&profile, TreeView::Callees("f".to_owned()), 0.0);
        assert_eq!(tree.walk().len(), 100_000);
    }
}
