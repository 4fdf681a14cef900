//! Where inside a piece of code a sample fell, labelled as reports print it.
//!
//! A code's points (a VM's pc map, or jitdump's source positions) cut it into ranges: before
//! the first point, from each point to the next, and from the last point to the end. Each
//! range is labelled by what the code there came from:
//!
//! - **The method's own code**, by VMProfiler's rule: with mapped pcs (m1,b1)..(mn,bn),
//!   [start, m1) is `1->b1`, [mi, mi+1) is `bi->bi+1` and [mn, end) is `bn->end`, bytecode pcs
//!   printed 1-based.
//! - **An inlined method's code** (optimised code), by the innermost inlined method and *its*
//!   bytecode pcs, the same rule applied inside it: `Inline>>heavy 33->40`; the range that
//!   leaves the inlined method (returning into the method it was inlined into) ends in `end`.
//!   The compiled method's pc is the inlining send's throughout an inlined body, so labelling
//!   those ranges with it said `2->2` for each of them.
//! - **With line tables** (HotSpot's methods), either of the above followed by the line the
//!   range's code came from, the innermost method's: `Inline.inner 5->9 Inline.java:12`.
//! - **Source positions** (jitdump), by the range's own position, `file:line:col`: the code
//!   from a position to the next one was generated for that position. Positions are not
//!   monotonic in code order (V8 schedules code freely), so an interval between two of them,
//!   `21:40->21:13`, would mean nothing. The code before the first position is `start`.
//!
//! Adjacent ranges with equal labels are one range: two points in a row that say the same
//! thing do not split the code. The merged ranges are computed once per code, on first use.

use std::{
    hash::{Hash, Hasher},
    sync::OnceLock,
};

use super::code::{Code, PcPoint, SourcePoint};

/// The label of the code before a code's first source position.
pub const SOURCE_START: &str = "start";

/// Where a code's merged ranges begin: the index of the first unmerged range of each, in code
/// order. Derived from the code's points, so it takes no part in comparing or hashing codes.
#[derive(Clone, Debug, Default)]
pub struct MergedRanges(OnceLock<Box<[usize]>>);

impl PartialEq for MergedRanges {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for MergedRanges {}

impl Hash for MergedRanges {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}

impl MergedRanges {
    /// Bytes it may take once computed, at most: one index per unmerged range.
    pub fn max_bytes(code: &Code) -> usize {
        (code.pc_map.len() + code.lines.len() + 1) * size_of::<usize>()
    }
}

impl Code {
    /// The range an offset falls in, labelled as reports print it (see the [module](self)),
    /// with the range's index in code order among the code's merged ranges. `None` for code
    /// without ranges.
    pub fn range_label(&self, offset: u64) -> Option<(usize, String)> {
        if !self.has_ranges() {
            return None;
        }
        let range = self.unmerged_index(offset);
        let starts = self.merged_ranges.0.get_or_init(|| merged_starts(self));
        // starts[0] is 0, so at least one start is at or before `range`.
        let merged = starts.partition_point(|&start| start <= range) - 1;
        Some((merged, self.unmerged_label(range)))
    }

    /// Index of the unmerged range holding `offset`: how many points are at or before it.
    fn unmerged_index(&self, offset: u64) -> usize {
        if self.pc_map.is_empty() {
            self.lines.partition_point(|p| p.offset <= offset)
        } else {
            self.pc_map.partition_point(|p| p.offset <= offset)
        }
    }

    /// Label of unmerged range `range`, in `0..=points`.
    fn unmerged_label(&self, range: usize) -> String {
        if self.pc_map.is_empty() {
            return source_label(&self.lines, range);
        }
        let label = bytecode_label(&self.pc_map, range);
        // With line tables (HotSpot), the line the range's code came from too.
        match range
            .checked_sub(1)
            .and_then(|k| self.pc_map[k].innermost_line())
        {
            Some((file, line)) => format!("{label} {file}:{line}"),
            None => label,
        }
    }
}

/// The first unmerged range of each merged range.
fn merged_starts(code: &Code) -> Box<[usize]> {
    let ranges = code.pc_map.len().max(code.lines.len()) + 1;
    let mut starts = vec![0];
    let mut previous = code.unmerged_label(0);
    for range in 1..ranges {
        let label = code.unmerged_label(range);
        if label != previous {
            starts.push(range);
        }
        previous = label;
    }
    starts.into_boxed_slice()
}

/// Range `range` of a pc map (see the [module](self)).
fn bytecode_label(points: &[PcPoint], range: usize) -> String {
    let next = points.get(range);
    let end = |pc: Option<u32>| pc.map_or_else(|| "end".to_owned(), |pc| (pc + 1).to_string());
    let Some(here) = range.checked_sub(1).and_then(|k| points.get(k)) else {
        return format!("1->{}", end(next.map(|p| p.bcpc)));
    };
    let Some(((method, pc), outer)) = here.inlined.split_last() else {
        return format!("{}->{}", here.bcpc + 1, end(next.map(|p| p.bcpc)));
    };
    // The range goes on in the same inlined method when the next point is in the same
    // activation of it: same send in the compiled method, same frames around it.
    let depth = outer.len();
    let next_pc = next
        .filter(|n| n.bcpc == here.bcpc && n.inlined.get(..depth) == Some(outer))
        .and_then(|n| n.inlined.get(depth))
        .filter(|(next_method, _)| next_method == method)
        .map(|&(_, pc)| pc);
    format!("{method} {}->{}", pc + 1, end(next_pc))
}

/// Range `range` of source positions (see the [module](self)).
fn source_label(points: &[SourcePoint], range: usize) -> String {
    match range.checked_sub(1).and_then(|k| points.get(k)) {
        None => SOURCE_START.to_owned(),
        Some(p) => format!("{}:{}:{}", p.file, p.line, p.column),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use vmscope_model::CodeKind;

    use super::*;
    use crate::codemap::code::CodeSource;

    fn method(points: &[(u64, u32)]) -> Code {
        optimised(
            &points
                .iter()
                .map(|&(offset, bcpc)| (offset, bcpc, &[][..]))
                .collect::<Vec<_>>(),
        )
    }

    /// Inlined frames of a point, outermost first: (method, bytecode pc).
    type Frames<'a> = &'a [(&'a str, u32)];

    /// A method `Inline>>run` with points (offset, bcpc, inlined frames).
    fn optimised(points: &[(u64, u32, Frames)]) -> Code {
        Code {
            pc_map: points
                .iter()
                .map(|&(offset, bcpc, inlined)| PcPoint {
                    offset,
                    bcpc,
                    inlined: inlined
                        .iter()
                        .map(|&(method, pc)| (method.to_owned(), pc))
                        .collect(),
                    lines: Vec::new(),
                })
                .collect(),
            ..Code::named(CodeKind::Method, "Inline>>run", CodeSource::Vm("t".into()))
        }
    }

    /// Every merged range of `code`, in code order: (index, label) at each point and before
    /// the first, without repeats.
    fn labels(code: &Code) -> Vec<String> {
        let offsets = std::iter::once(0)
            .chain(code.pc_map.iter().map(|p| p.offset))
            .chain(code.lines.iter().map(|p| p.offset));
        let mut seen: Vec<(usize, String)> = Vec::new();
        for offset in offsets {
            let range = code.range_label(offset).expect("a range");
            if seen.last() != Some(&range) {
                assert_eq!(range.0, seen.len(), "indices count merged ranges: {seen:?}");
                seen.push(range);
            }
        }
        seen.into_iter().map(|(_, label)| label).collect()
    }

    #[test]
    fn bytecode_ranges_follow_vmprofilers_rule() {
        // Pairs (m1,b1)=(0x10,22), (0x20,29), (0x30,37): pcs printed 1-based.
        let code = method(&[(0x10, 22), (0x20, 29), (0x30, 37)]);
        let label = |offset| code.range_label(offset).unwrap().1;
        assert_eq!(label(0), "1->23");
        assert_eq!(label(0x0f), "1->23");
        assert_eq!(label(0x10), "23->30");
        assert_eq!(label(0x2f), "30->38");
        assert_eq!(label(0x30), "38->end");
        assert_eq!(label(0x9999), "38->end");
        assert_eq!(code.range_label(0x25).unwrap().0, 2);
        assert_eq!(
            Code::named(CodeKind::Unknown, "x", CodeSource::PerfMap).range_label(0),
            None
        );
    }

    #[test]
    fn adjacent_equal_ranges_merge_and_others_stay() {
        // 5, 5, 5 maps the same bytecode three times: `6->6` twice in a row is one range.
        let code = method(&[(0x10, 2), (0x20, 5), (0x30, 5), (0x40, 5), (0x50, 9)]);
        assert_eq!(labels(&code), ["1->3", "3->6", "6->6", "6->10", "10->end"]);
        assert_eq!(code.range_label(0x25), code.range_label(0x35));
        assert_eq!(code.range_label(0x45).unwrap(), (3, "6->10".to_owned()));
    }

    /// `Inline>>run` as tests/jitvm compiles it (`self heavy + self light`, both inlined): the
    /// compiled method's points carry the send's pc (1, then 6) throughout each inlined body,
    /// whose frames give the inlined method's own pcs.
    #[test]
    fn optimised_code_names_the_inlined_method_and_its_pcs() {
        let heavy = |pc| [("Inline>>heavy", pc)];
        let light = |pc| [("Inline>>light", pc)];
        let code = optimised(&[
            (0x10, 1, &[]), // the guarded send's fallback returns here
            (0x18, 1, &heavy(0)),
            (0x30, 1, &heavy(14)), // loop heads
            (0x40, 1, &heavy(32)),
            (0x60, 1, &heavy(69)), // after the back jump
            (0x61, 1, &heavy(69)),
            (0x70, 1, &heavy(82)),
            (0x80, 1, &[]), // back in run, after heavy's body
            (0x90, 6, &[]),
            (0x98, 6, &light(0)),
            (0xa0, 6, &light(32)),
            (0xb0, 6, &[]),
            (0xc0, 10, &[]),
        ]);
        assert_eq!(
            labels(&code),
            [
                "1->2",
                "2->2",
                "Inline>>heavy 1->15",
                "Inline>>heavy 15->33",
                "Inline>>heavy 33->70",
                "Inline>>heavy 70->70",
                "Inline>>heavy 70->83",
                "Inline>>heavy 83->end",
                "2->7",
                "7->7",
                "Inline>>light 1->33",
                "Inline>>light 33->end",
                "7->11",
                "11->end",
            ]
        );
        // Time per method still goes to the innermost one.
        assert_eq!(code.attributed_method(0x45), "Inline>>heavy");
        assert_eq!(code.attributed_method(0x85), "Inline>>run");
    }

    #[test]
    fn nested_inlining_follows_each_activation() {
        let code = optimised(&[
            (0x10, 3, &[("A>>f", 0)]),
            (0x20, 3, &[("A>>f", 4), ("B>>g", 0)]), // f sends g at 4, inlined
            (0x30, 3, &[("A>>f", 4), ("B>>g", 2)]),
            (0x40, 3, &[("A>>f", 4)]), // g returned into f
            (0x50, 3, &[("A>>f", 7)]),
            (0x60, 8, &[("A>>f", 0)]), // f inlined again, at another send
            (0x70, 8, &[]),
        ]);
        assert_eq!(
            labels(&code),
            [
                "1->4",
                "A>>f 1->5",
                "B>>g 1->3",
                "B>>g 3->end",
                "A>>f 5->8",
                "A>>f 8->end",
                "A>>f 1->end",
                "9->end",
            ]
        );
    }

    #[test]
    fn source_ranges_are_labelled_by_their_own_position() {
        let file: Arc<str> = "app.js".into();
        let point = |offset, line, column| SourcePoint {
            offset,
            file: file.clone(),
            line,
            column,
        };
        // V8 order: positions go back and forth in code order.
        let code = Code {
            lines: vec![
                point(0x8, 21, 40),
                point(0x20, 21, 13),
                point(0x28, 21, 13),
                point(0x40, 14, 1),
                point(0x50, 21, 40),
            ],
            ..Code::named(CodeKind::Unknown, "hot", CodeSource::Jitdump)
        };
        let label = |offset| code.range_label(offset).unwrap().1;
        assert_eq!(label(0), SOURCE_START);
        assert_eq!(label(0x10), "app.js:21:40");
        assert_eq!(label(0x30), "app.js:21:13");
        assert_eq!(label(0x99), "app.js:21:40");
        assert_eq!(
            labels(&code),
            [
                "start",
                "app.js:21:40",
                "app.js:21:13",
                "app.js:14:1",
                "app.js:21:40"
            ],
            "the same position twice in a row is one range; apart, two"
        );
    }

    #[test]
    fn merged_ranges_do_not_tell_codes_apart() {
        use std::hash::BuildHasher;
        let (a, b) = (method(&[(0x10, 1)]), method(&[(0x10, 1)]));
        a.range_label(0);
        assert_eq!(a, b);
        let state = std::hash::RandomState::new();
        assert_eq!(state.hash_one(&a), state.hash_one(&b));
    }
}
