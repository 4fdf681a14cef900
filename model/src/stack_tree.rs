//! Stacks as a prefix tree: every distinct (caller, frame) once, as samply's processed profile
//! and the Firefox profiler hold them.
//!
//! Stacks of one program share their callers: a thousand stacks under `main > run > loop`
//! hold that prefix once here instead of a thousand times, and two stacks are the same exactly
//! when they end at the same node, so merging stacks compares one index, not two lists.
//!
//! A node's caller is always an earlier node ([`StackTreeBuilder`] interns callers first), so
//! one pass over the nodes in order visits every caller before its callees, and walking from
//! a leaf always ends. [`StackFrames`] stops at a node that breaks that order (a hostile or
//! broken profile) rather than loop or panic.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// One node of a profile's stack tree: a frame, called from the stack that ends at `caller`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StackNode {
    /// The frame, as an index into [`crate::Profile::frames`].
    pub frame: u32,
    /// The node of its caller, always an earlier one; `None` for an outermost frame.
    pub caller: Option<u32>,
}

/// Builds a stack tree: each stack, given leaf first, becomes the node of its leaf, and each
/// distinct (caller, frame) is one node.
#[derive(Debug, Default, Clone)]
pub struct StackTreeBuilder {
    nodes: Vec<StackNode>,
    index: HashMap<StackNode, u32, foldhash::fast::RandomState>,
}

impl StackTreeBuilder {
    /// An empty tree.
    pub fn new() -> StackTreeBuilder {
        StackTreeBuilder::default()
    }

    /// A tree that goes on from `nodes` (a profile's [`crate::Profile::stack_nodes`]): stacks
    /// already in it keep their nodes.
    pub fn from_nodes(nodes: Vec<StackNode>) -> StackTreeBuilder {
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, &node)| (node, i as u32))
            .collect();
        StackTreeBuilder { nodes, index }
    }

    /// The node of the stack of `frames`, leaf first, added with its callers where new; `None`
    /// for a stack without frames.
    pub fn intern(&mut self, frames: &[u32]) -> Option<u32> {
        frames
            .iter()
            .rev()
            .fold(None, |caller, &frame| Some(self.node(caller, frame)))
    }

    /// The node of `frame` called from `caller`, added if new.
    pub fn node(&mut self, caller: Option<u32>, frame: u32) -> u32 {
        let node = StackNode { frame, caller };
        *self.index.entry(node).or_insert_with(|| {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        })
    }

    /// How many nodes the tree has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The tree's nodes, for [`crate::Profile::stack_nodes`].
    pub fn finish(self) -> Vec<StackNode> {
        self.nodes
    }
}

/// The frames of the stack that ends at a node, leaf first ([`crate::Profile::stack_frames`]).
#[derive(Debug, Clone)]
pub struct StackFrames<'a> {
    nodes: &'a [StackNode],
    next: Option<u32>,
}

impl<'a> StackFrames<'a> {
    /// The frames of the stack ending at `node` in `nodes`; none for `None`.
    pub fn new(nodes: &'a [StackNode], node: Option<u32>) -> StackFrames<'a> {
        StackFrames { nodes, next: node }
    }
}

impl Iterator for StackFrames<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let at = self.next?;
        let Some(node) = self.nodes.get(at as usize) else {
            self.next = None;
            return None;
        };
        // A caller at or after its callee breaks the tree's order: stop there, so that a
        // broken profile cannot make the walk loop.
        self.next = node.caller.filter(|&caller| caller < at);
        Some(node.frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_share_their_callers_and_read_back_leaf_first() {
        let mut tree = StackTreeBuilder::new();
        let a = tree.intern(&[3, 2, 1]);
        let b = tree.intern(&[4, 2, 1]);
        let again = tree.intern(&[3, 2, 1]);
        assert_eq!(a, again, "the same stack is the same node");
        assert_ne!(a, b);
        // 1, 1>2, 1>2>3, 1>2>4: the shared callers once.
        assert_eq!(tree.len(), 4);
        assert_eq!(tree.intern(&[]), None);
        let nodes = tree.finish();
        let frames = |node| StackFrames::new(&nodes, node).collect::<Vec<u32>>();
        assert_eq!(frames(a), [3, 2, 1]);
        assert_eq!(frames(b), [4, 2, 1]);
        assert_eq!(frames(None), [0u32; 0]);
        assert!(
            nodes
                .iter()
                .enumerate()
                .all(|(i, n)| n.caller.is_none_or(|c| (c as usize) < i)),
            "callers come first: {nodes:?}"
        );
    }

    #[test]
    fn a_tree_goes_on_from_its_nodes() {
        let mut tree = StackTreeBuilder::new();
        let a = tree.intern(&[2, 1]);
        let mut more = StackTreeBuilder::from_nodes(tree.finish());
        assert_eq!(more.intern(&[2, 1]), a);
        assert_eq!(more.len(), 2);
        more.intern(&[5, 1]);
        assert_eq!(more.len(), 3);
    }

    /// A broken profile (a caller after its callee, a node past the table) reads as the
    /// frames up to the break, never as a loop or a panic.
    #[test]
    fn a_broken_tree_ends_the_walk() {
        let cycle = [
            StackNode {
                frame: 7,
                caller: Some(1),
            },
            StackNode {
                frame: 8,
                caller: Some(0),
            },
        ];
        assert_eq!(
            StackFrames::new(&cycle, Some(1)).collect::<Vec<_>>(),
            [8, 7]
        );
        assert_eq!(StackFrames::new(&cycle, Some(0)).collect::<Vec<_>>(), [7]);
        assert_eq!(StackFrames::new(&cycle, Some(9)).count(), 0);
    }
}
