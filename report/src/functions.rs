//! The functions of a profile's frames: what makes two frames one function for call trees and
//! for recursion (a frame is a function at one place: its call site or where a sample fell).
//!
//! Two frames are one function when they agree on section, module, name, optimised and
//! inlined, never on their range: a JIT method called from two sites of its caller is one
//! function, its optimised version another. [`crate::tree`] makes one node per function under
//! each parent; [`crate::stack_view`] collapses recursion of the same functions.

use std::collections::{HashMap, HashSet};

use vmscope_model::Frame;

use vmscope_model::Section;

/// One id per function of a frame table, and each frame's id.
pub(crate) struct Functions<'a> {
    /// Function id of each frame.
    pub(crate) of_frame: Vec<u32>,
    /// Frame index of each function's first frame, which describes it.
    first_frame: Vec<usize>,
    frames: &'a [Frame],
}

impl<'a> Functions<'a> {
    /// The functions of `frames`, numbered in the order of their first frame.
    pub(crate) fn new(frames: &'a [Frame]) -> Self {
        type FunctionKey<'k> = (Section, &'k str, &'k str, bool, bool);
        let mut ids: HashMap<FunctionKey<'a>, u32> = HashMap::new();
        let mut first_frame = Vec::new();
        let of_frame = frames
            .iter()
            .enumerate()
            .map(|(index, frame)| {
                let key = (
                    frame.section,
                    frame.module.as_str(),
                    frame.name.as_str(),
                    frame.optimised,
                    frame.inlined,
                );
                *ids.entry(key).or_insert_with(|| {
                    first_frame.push(index);
                    (first_frame.len() - 1) as u32
                })
            })
            .collect();
        Functions {
            of_frame,
            first_frame,
            frames,
        }
    }

    /// Ids of the functions named exactly `name`.
    pub(crate) fn named(&self, name: &str) -> HashSet<u32> {
        (0..self.first_frame.len() as u32)
            .filter(|&id| self.frame(id).name == name)
            .collect()
    }

    /// Every distinct function name.
    pub(crate) fn names(&self) -> impl Iterator<Item = &'a str> + '_ {
        let mut seen = HashSet::new();
        self.first_frame
            .iter()
            .map(|&f| self.frames[f].name.as_str())
            .filter(move |name| seen.insert(*name))
    }

    /// The first frame of function `id`, which describes it.
    pub(crate) fn frame(&self, id: u32) -> &'a Frame {
        &self.frames[self.first_frame[id as usize]]
    }
}

#[cfg(test)]
mod tests {
    use vmscope_model::Section;

    use super::*;

    fn frame(name: &str, range: &str, optimised: bool) -> Frame {
        Frame {
            section: Section::Generated,
            name: name.to_owned(),
            module: "[anon]".to_owned(),
            range: range.to_owned(),
            optimised,
            ..Frame::default()
        }
    }

    #[test]
    fn frames_at_two_places_are_one_function_and_versions_are_two() {
        let frames = [
            frame("f", "1->5", false),
            frame("f", "6->9", false),
            frame("f", "1->5", true),
            frame("g", "", false),
        ];
        let functions = Functions::new(&frames);
        assert_eq!(functions.of_frame, [0, 0, 1, 2]);
        assert_eq!(functions.named("f"), HashSet::from([0, 1]));
        assert_eq!(functions.names().collect::<Vec<_>>(), ["f", "g"]);
        assert_eq!(functions.frame(1).range, "1->5");
        assert!(functions.frame(1).optimised);
    }
}
