//! Each distinct location of a snapshot symbolised once: its row's identity, what a row shows of
//! generated code, the frames a stack shows of it (a JIT frame of optimised code expanded into
//! its inlined methods, a native frame into the functions inlined at its address, with their
//! source lines from DWARF) and the source line of its address.

use std::collections::HashMap;

use vmscope_model::{CodeKind, Frame, Section};

use super::ProfileOptions;
use crate::{
    codemap::code::{Code, PcPoint},
    session::StackSnapshot,
    symbolize::{Issue, KERNEL_MODULE, Resolved, SourceFrame, Symbolizer},
    vocab::Location,
};

#[derive(Debug, Default)]
pub(super) struct SourceLinesTable {
    pub(super) lines: Vec<(String, u32)>,
    pub(super) index: HashMap<(String, u32), u32>,
}

impl SourceLinesTable {
    pub(super) fn id(&mut self, file: &str, line: u32) -> u32 {
        let key = (file.to_owned(), line);
        if let Some(&id) = self.index.get(&key) {
            return id;
        }
        let id = self.lines.len() as u32;
        self.lines.push(key.clone());
        self.index.insert(key, id);
        id
    }
}

/// A row's identity: (section, module, name, optimised).
pub(super) type RowKey = (Section, String, String, bool);

/// A distinct location, symbolised once.
#[derive(Debug)]
pub(super) struct Placed {
    pub(super) resolved: Resolved,
    /// Generated code a code map names: what its row shows of it.
    pub(super) code: Option<CodeDetail>,
    /// Its row.
    pub(super) row: usize,
    /// Its frames, leaf first, as indices into the profile's frames: one, or for optimised
    /// code the inlined methods at its pc then the compiled method.
    pub(super) frames: Vec<u32>,
    /// The frame its address belongs to: the compiled method's for optimised code, the
    /// containing function's for native code with inlined functions.
    pub(super) own_frame: u32,
    /// The source line of its address (innermost inlined function's), from DWARF.
    pub(super) line: Option<u32>,
    /// Generated code named from a perf map read after the sample.
    pub(super) later_snapshot: bool,
    /// The caller of stacks cut at the session's stack limit.
    pub(super) stack_limit: bool,
    /// The caller of a block's kernel frames whose user stack was never taken.
    pub(super) since_start: bool,
}

/// What a row shows of a location in generated code a code map names: derived once per
/// location, not once per stack it is the leaf of.
#[derive(Debug)]
pub(super) struct CodeDetail {
    pub(super) kind: CodeKind,
    pub(super) code_map: &'static str,
    /// The range the location is in: its index among the code's ranges, and its label.
    pub(super) range: Option<(usize, String)>,
    /// Optimised code: the method the location's time belongs to.
    pub(super) inlined_method: Option<String>,
}

/// Distinct frames, each stored once.
#[derive(Debug, Default)]
pub(super) struct Frames {
    pub(super) frames: Vec<Frame>,
    pub(super) index: HashMap<Frame, u32>,
}

impl Frames {
    pub(super) fn id(&mut self, frame: Frame) -> u32 {
        if let Some(&id) = self.index.get(&frame) {
            return id;
        }
        let id = self.frames.len() as u32;
        self.frames.push(frame.clone());
        self.index.insert(frame, id);
        id
    }
}

/// The distinct locations of a snapshot, placed, with the rows, frames and source lines they
/// name.
#[derive(Debug, Default)]
pub(super) struct Placement {
    /// By location id.
    pub(super) placed: Vec<Placed>,
    /// The rows' identities, by row index.
    pub(super) row_keys: Vec<RowKey>,
    pub(super) frames: Frames,
    pub(super) source_lines: SourceLinesTable,
}

/// Places every distinct location of `stacks`; `None` once `cancelled` says so.
pub(super) fn place_locations(
    stacks: &StackSnapshot,
    symbolizer: &Symbolizer,
    options: &ProfileOptions,
    cancelled: impl Fn(usize) -> bool,
) -> Option<Placement> {
    let mut frames = Frames::default();
    let mut source_lines = SourceLinesTable::default();
    let mut row_keys: Vec<RowKey> = Vec::new();
    let mut row_index: HashMap<RowKey, usize> = HashMap::new();
    let placed: Vec<Placed> = stacks
        .locations
        .iter()
        .enumerate()
        .map(|(i, location)| {
            if cancelled(i) {
                return None;
            }
            let resolved = resolve(symbolizer, location, options);
            let code = match location {
                Location::Jit { code, offset, .. } => {
                    symbolizer.codes().get(*code).map(|c| (c, *offset))
                }
                _ => None,
            };
            let optimised = code.as_ref().is_some_and(|(c, _)| c.is_optimised());
            let key = (
                resolved.section,
                resolved.module.clone(),
                resolved.name.clone(),
                optimised,
            );
            let row = *row_index.entry(key.clone()).or_insert_with(|| {
                row_keys.push(key);
                row_keys.len() - 1
            });
            let detail = code.as_ref().map(|(code, offset)| CodeDetail {
                kind: code.kind,
                code_map: code.source.label(),
                range: code.range_label(*offset),
                inlined_method: optimised.then(|| code.attributed_method(*offset).to_owned()),
            });
            let mut line = None;
            let (frame_ids, own_frame) = match (&code, &detail) {
                (Some((code, offset)), Some(detail)) => {
                    let label = detail.range.as_ref().map(|(_, label)| label.as_str());
                    let later = matches!(
                        location,
                        Location::Jit {
                            later_snapshot: true,
                            ..
                        }
                    );
                    jit_frames(&mut frames, &resolved, code, *offset, label, later)
                }
                _ => {
                    let sources = symbolizer.source_frames(location);
                    line = sources
                        .first()
                        .and_then(|leaf| Some((leaf.file.as_deref()?, leaf.line)))
                        .filter(|&(_, line)| line > 0)
                        .map(|(file, line)| source_lines.id(file, line));
                    native_frames(&mut frames, &resolved, location, &sources)
                }
            };
            Some(Placed {
                resolved,
                code: detail,
                row,
                frames: frame_ids,
                own_frame,
                line,
                later_snapshot: matches!(
                    location,
                    Location::Jit {
                        later_snapshot: true,
                        ..
                    }
                ),
                stack_limit: *location == Location::StackLimit,
                since_start: *location == Location::OffCpuSinceStart,
            })
        })
        .collect::<Option<_>>()?;
    Some(Placement {
        placed,
        row_keys,
        frames,
        source_lines,
    })
}

/// Names a location, or says why it has no name.
pub(super) fn resolve(
    symbolizer: &Symbolizer,
    location: &Location,
    options: &ProfileOptions,
) -> Resolved {
    match (location, &options.hide_kernel) {
        (Location::Kernel { .. }, Some(reason)) => Resolved {
            section: Section::Other,
            module: KERNEL_MODULE.to_owned(),
            name: "[kernel]".to_owned(),
            symbolized: false,
            issue: Some(Issue::KernelHidden(reason.clone())),
            build_id: None,
        },
        _ => symbolizer.resolve(location),
    }
}

/// The frame of a location outside generated code with a code map.
pub(super) fn native_frame(resolved: &Resolved, location: &Location) -> Frame {
    Frame {
        section: resolved.section,
        name: resolved.name.clone(),
        module: resolved.module.clone(),
        symbolized: resolved.symbolized,
        build_id: resolved.build_id.clone().unwrap_or_default(),
        kernel: matches!(location, Location::Kernel { .. }),
        ..Frame::default()
    }
}

/// The frames of a location outside generated code with a code map, leaf first, and the frame
/// its address belongs to. With DWARF `sources` (innermost first): a frame per function inlined
/// at the address (named from DWARF, `inlined`, each with its own line), then the location's
/// own frame with the line of the outermost call site; without, the location's frame alone.
pub(super) fn native_frames(
    frames: &mut Frames,
    resolved: &Resolved,
    location: &Location,
    sources: &[SourceFrame],
) -> (Vec<u32>, u32) {
    let own = native_frame(resolved, location);
    let Some((outermost, inlined)) = sources.split_last() else {
        let id = frames.id(own);
        return (vec![id], id);
    };
    let mut ids = Vec::with_capacity(sources.len());
    for source in inlined {
        ids.push(
            frames.id(Frame {
                name: source
                    .function
                    .clone()
                    .unwrap_or_else(|| "[unknown inlined function]".to_owned()),
                symbolized: source.function.is_some(),
                inlined: true,
                file: source.file.clone().unwrap_or_default(),
                line: source.line,
                ..own.clone()
            }),
        );
    }
    let own = frames.id(Frame {
        file: outermost.file.clone().unwrap_or_default(),
        line: outermost.line,
        ..own
    });
    ids.push(own);
    (ids, own)
}

/// The frames of an offset in generated code, leaf first, and the compiled code's own frame:
/// in optimised code, the methods inlined at the offset (innermost first, each with its own
/// range: the innermost where the pc is, the outer ones the send that inlined the next, `@pc`),
/// then the compiled method (its range the inlining send's, `@pc`); otherwise the code alone,
/// with the range the offset is in. `label` is the offset's range label
/// ([`Code::range_label`]).
pub(super) fn jit_frames(
    frames: &mut Frames,
    resolved: &Resolved,
    code: &Code,
    offset: u64,
    label: Option<&str>,
    later_snapshot: bool,
) -> (Vec<u32>, u32) {
    let optimised = code.is_optimised();
    let frame = |name: &str, range: String, inlined: bool, (file, line): (&str, u32)| Frame {
        section: resolved.section,
        name: name.to_owned(),
        module: resolved.module.clone(),
        symbolized: resolved.symbolized,
        kind: Some(code.kind),
        range,
        inlined,
        code_map: code.source.label().to_owned(),
        optimised,
        later_snapshot,
        file: file.to_owned(),
        line,
        ..Frame::default()
    };
    let point = code
        .pc_map
        .partition_point(|p| p.offset <= offset)
        .checked_sub(1)
        .map(|i| &code.pc_map[i]);
    let Some(point) = point.filter(|p| !p.inlined.is_empty()) else {
        let id = frames.id(frame(
            &code.name,
            label.unwrap_or_default().to_owned(),
            false,
            point.map_or(("", 0), |p| line_of(p, 0)),
        ));
        return (vec![id], id);
    };
    let mut ids = Vec::with_capacity(point.inlined.len() + 1);
    let last = point.inlined.len() - 1;
    for (depth, (method, pc)) in point.inlined.iter().enumerate().rev() {
        let range = if depth == last {
            // The label names the innermost method: "Inline>>heavy 33->70".
            label
                .and_then(|l| l.strip_prefix(method.as_str()))
                .map(|l| l.trim_start().to_owned())
                .unwrap_or_default()
        } else {
            format!("@{}", pc + 1)
        };
        ids.push(frames.id(frame(method, range, true, line_of(point, depth + 1))));
    }
    let own = frames.id(frame(
        &code.name,
        format!("@{}", point.bcpc + 1),
        false,
        line_of(point, 0),
    ));
    ids.push(own);
    (ids, own)
}

/// The source line of the frame at `depth` of a point (0 the compiled method's own), where
/// known: `("", 0)` otherwise.
fn line_of(point: &PcPoint, depth: usize) -> (&str, u32) {
    point
        .lines
        .get(depth)
        .map_or(("", 0), |(file, line)| (&**file, *line))
}
