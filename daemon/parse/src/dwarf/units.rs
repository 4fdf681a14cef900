//! Compilation units found by address and parsed one at a time, only those lookups fall in.
//!
//! `addr2line`'s context parses every unit of a file when it is made: the unit's abbreviation
//! table and its line program's header, for the address ranges of each. For a Rust binary that
//! is thousands of units: 66 MB of parsed tables for the daemon's own DWARF, whatever was looked
//! up. Here a file keeps an index of which address ranges belong to which unit (from
//! `.debug_aranges` where it covers a unit, else from the unit's root entry, parsed and dropped),
//! and a unit is parsed when an address in it is first asked about: its line rows, its
//! functions, and a function's inlined calls when an address falls in that function. Parsed
//! units are kept, least recently used first out, up to a byte budget ([`UNITS_BUDGET_BYTES`]).
//!
//! The lookup follows `addr2line`'s rules (its `find_frames`), so that answers are the same:
//! the innermost inlined function first with the line row at the address, then each enclosing
//! function with the line of the call it inlined, the outermost function last; a name from
//! `DW_AT_linkage_name`, else `DW_AT_name`, else through `DW_AT_abstract_origin` or
//! `DW_AT_specification`, in this unit or another (`DW_FORM_ref_addr`), 16 references deep at
//! most.

use std::{cmp::Ordering, num::NonZeroU64};

use gimli::{AttributeValue, DebugInfoOffset, Reader as _, UnitOffset, UnitRef};

use super::{DwarfError, SourceFrame, paged::PagedReader};
use crate::demangle::demangle;

type Dwarf = gimli::Dwarf<PagedReader>;
type Unit = gimli::Unit<PagedReader>;

/// The most bytes of parsed units one file keeps (estimated: see [`Parsed::bytes`]).
pub const UNITS_BUDGET_BYTES: u64 = 16 << 20;

/// What a unit's abbreviation table costs parsed, about: gimli keeps a vector of attribute
/// specifications per abbreviation (17 KB per unit, measured on vmscoped's 3,000 units).
const ABBREVIATIONS_BYTES: u64 = 16 << 10;

/// Deepest chain of `DW_AT_abstract_origin` / `DW_AT_specification` followed for a name.
const NAME_REFERENCES: usize = 16;

/// Units parsed for the names other units' entries refer to (`DW_FORM_ref_addr`: an inlined
/// function's abstract origin in another unit), kept for the next references.
const OTHER_UNITS: usize = 8;

/// Names resolved through references to other units, kept; the map is emptied when full.
const MAX_REFERENCED_NAMES: usize = 1 << 14;

/// What name lookups across units need: where the units are, and what was parsed for them.
struct Refs<'a> {
    offsets: &'a [usize],
    others: &'a mut Others,
}

/// The units parsed for references from other units (most recently used last), and the names
/// found there, by the referenced entry's offset in `.debug_info`.
#[derive(Default)]
struct Others {
    units: Vec<(usize, Unit)>,
    names: std::collections::HashMap<usize, Option<String>>,
}

impl Others {
    fn bytes(&self) -> u64 {
        self.units.len() as u64 * ABBREVIATIONS_BYTES + self.names.len() as u64 * 64
    }
}

/// An address range of a unit.
#[derive(Clone, Copy, Debug)]
struct UnitRange {
    begin: u64,
    end: u64,
    /// Index into [`Units::offsets`].
    unit: usize,
    /// The lowest `begin` of this range and every range after it (ranges are sorted by
    /// `end`): where a search for the ranges holding an address can stop.
    min_begin: u64,
}

/// The units of one file: where they are, and those parsed.
pub struct Units {
    /// Compilation units' offsets in `.debug_info`, ascending.
    offsets: Vec<usize>,
    /// By `end`, then unit.
    ranges: Vec<UnitRange>,
    /// Parsed units, most recently used last.
    parsed: Vec<(usize, Parsed)>,
    /// What references from one unit to another needed.
    others: Others,
    /// Units parsed in all (again after eviction counts again).
    pub parses: u64,
}

impl std::fmt::Debug for Units {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Units")
            .field("units", &self.offsets.len())
            .field("ranges", &self.ranges.len())
            .field("parsed", &self.parsed.len())
            .field("parsed_bytes", &self.parsed_bytes())
            .finish()
    }
}

impl Units {
    /// Finds the units of `dwarf` and their address ranges, parsing (and dropping) the root
    /// entry of those `.debug_aranges` does not cover.
    pub fn index(dwarf: &Dwarf) -> Result<Units, DwarfError> {
        let mut aranges: Vec<(usize, gimli::DebugArangesOffset<usize>)> = Vec::new();
        let mut headers = dwarf.debug_aranges.headers();
        while let Some(header) = headers.next()? {
            aranges.push((header.debug_info_offset().0, header.offset()));
        }
        aranges.sort_unstable_by_key(|a| a.0);

        let mut offsets = Vec::new();
        let mut ranges = Vec::new();
        let mut units = dwarf.units();
        while let Some(header) = units.next()? {
            let Some(offset) = header.debug_info_offset() else {
                continue;
            };
            if matches!(
                header.type_(),
                gimli::UnitType::Type { .. }
                    | gimli::UnitType::SplitType { .. }
                    | gimli::UnitType::Partial
            ) {
                // Only names are taken from these, by reference: they have no addresses.
                offsets.push(offset.0);
                continue;
            }
            let unit = offsets.len();
            offsets.push(offset.0);
            let before = ranges.len();
            // Whether `.debug_aranges` gives the unit any range, kept or not: as for addr2line,
            // such a unit's own entries are not looked at. A unit whose code the linker
            // dropped has its ranges at 0 only, and its line program (parsed for nothing, a
            // third of a cold profile of a Rust binary) holds no more.
            let mut covered = false;
            let first = aranges.partition_point(|a| a.0 < offset.0);
            for &(_, at) in aranges[first..].iter().take_while(|a| a.0 == offset.0) {
                let mut entries = dwarf.debug_aranges.header(at)?.entries();
                while let Some(entry) = entries.next().transpose() {
                    // Entries that overflow are skipped, as addr2line does.
                    if let Ok(entry) = entry
                        && entry.length() != 0
                    {
                        covered = true;
                        let range = entry.range();
                        push_range(&mut ranges, range.begin, range.end, unit);
                    }
                }
            }
            if !covered && ranges.len() == before {
                // Parsed for its root entry's ranges, or its line rows', and dropped.
                let Ok(parsed) = dwarf.unit(header) else {
                    continue;
                };
                let unit_ref = UnitRef::new(dwarf, &parsed);
                if let Ok(mut found) = unit_ref.unit_ranges() {
                    while let Ok(Some(range)) = found.next() {
                        // Likewise for its root entry's ranges: any, kept or not, and the line
                        // program is not looked at.
                        covered |= range.begin < range.end;
                        push_range(&mut ranges, range.begin, range.end, unit);
                    }
                }
                if !covered
                    && ranges.len() == before
                    && let Ok(lines) = Lines::parse(unit_ref)
                {
                    for sequence in &lines.sequences {
                        push_range(&mut ranges, sequence.start, sequence.end, unit);
                    }
                }
            }
        }
        ranges.sort_unstable_by_key(|r| (r.end, r.unit));
        let mut min = u64::MAX;
        for range in ranges.iter_mut().rev() {
            min = min.min(range.begin);
            range.min_begin = min;
        }
        Ok(Units {
            offsets,
            ranges,
            parsed: Vec::new(),
            others: Others::default(),
            parses: 0,
        })
    }

    /// Bytes the index and the parsed units take, about.
    pub fn bytes(&self) -> u64 {
        self.index_bytes() + self.parsed_bytes()
    }

    /// Bytes of the index: where the units are, and their ranges.
    pub fn index_bytes(&self) -> u64 {
        (self.offsets.len() * size_of::<usize>() + self.ranges.len() * size_of::<UnitRange>())
            as u64
    }

    fn parsed_bytes(&self) -> u64 {
        self.parsed.iter().map(|(_, p)| p.bytes()).sum::<u64>() + self.others.bytes()
    }

    /// Lets every parsed unit go, keeping the index: the next lookups parse the units they
    /// fall in again.
    pub fn shed(&mut self) {
        self.parsed.clear();
        self.others = Others::default();
    }

    /// Units known, and of them parsed now.
    pub fn counts(&self) -> (usize, usize) {
        (self.offsets.len(), self.parsed.len())
    }

    /// The frames at `probe`, innermost first (see the module's doc); empty when no unit has
    /// a function or a line there.
    pub fn lookup(&mut self, dwarf: &Dwarf, probe: u64) -> Result<Vec<SourceFrame>, DwarfError> {
        let start = self.ranges.partition_point(|r| r.end <= probe);
        let mut candidates: Vec<usize> = Vec::new();
        for range in &self.ranges[start..] {
            if range.min_begin > probe {
                break;
            }
            if range.begin <= probe && !candidates.contains(&range.unit) {
                candidates.push(range.unit);
            }
        }
        for unit in candidates {
            let index = self.parse(dwarf, unit)?;
            let mut refs = Refs {
                offsets: &self.offsets,
                others: &mut self.others,
            };
            let parsed = &mut self.parsed[index].1;
            let frames = parsed.frames(dwarf, &mut refs, probe)?;
            // The function's inlined calls parsed just now count too.
            self.make_room(0);
            if let Some(frames) = frames {
                return Ok(frames);
            }
        }
        Ok(Vec::new())
    }

    /// Drops the least recently used units until `more` bytes fit in [`UNITS_BUDGET_BYTES`],
    /// but the most recently used.
    fn make_room(&mut self, more: u64) {
        let mut bytes = self.parsed_bytes();
        while bytes + more > UNITS_BUDGET_BYTES && self.parsed.len() > 1 {
            let (_, old) = self.parsed.remove(0);
            bytes -= old.bytes();
        }
    }

    /// The index in `parsed` of unit `unit`, parsed now if it was not, and made the most
    /// recently used; least recently used units go to keep within [`UNITS_BUDGET_BYTES`].
    fn parse(&mut self, dwarf: &Dwarf, unit: usize) -> Result<usize, DwarfError> {
        if let Some(at) = self.parsed.iter().position(|(u, _)| *u == unit) {
            let entry = self.parsed.remove(at);
            self.parsed.push(entry);
            return Ok(self.parsed.len() - 1);
        }
        let header = dwarf
            .debug_info
            .header_from_offset(DebugInfoOffset(self.offsets[unit]))?;
        let parsed = Parsed::parse(dwarf.unit(header)?, dwarf)?;
        self.parses += 1;
        self.make_room(parsed.bytes());
        if self.parsed_bytes() + parsed.bytes() > UNITS_BUDGET_BYTES {
            // The one unit left is the last one used: it goes too.
            self.parsed.clear();
        }
        self.parsed.push((unit, parsed));
        Ok(self.parsed.len() - 1)
    }
}

/// Adds `[begin, end)` to `ranges`, unless it is empty or starts at 0: linkers leave the DWARF
/// of the functions they drop at address 0, where no code is (an ELF file's first page holds
/// its headers), and a range there would only make lookups parse unit after unit.
fn push_range(ranges: &mut Vec<UnitRange>, begin: u64, end: u64, unit: usize) {
    if begin > 0 && begin < end {
        ranges.push(UnitRange {
            begin,
            end,
            unit,
            min_begin: 0,
        });
    }
}

/// One unit, parsed: its line rows and its functions.
struct Parsed {
    unit: Unit,
    lines: Option<Lines>,
    functions: Vec<Function>,
    /// (range, index into `functions`), sorted by begin.
    addresses: Vec<(gimli::Range, usize)>,
    /// Bytes of the above as parsed, for [`Parsed::bytes`]: counted once, since every parse
    /// sums every parsed unit's (summed at each call, a debug daemon spent a tenth of its time
    /// there).
    parsed_bytes: u64,
    /// Bytes of the inlined calls parsed since.
    inlined_bytes: u64,
}

impl Parsed {
    fn parse(unit: Unit, dwarf: &Dwarf) -> Result<Parsed, DwarfError> {
        let unit_ref = UnitRef::new(dwarf, &unit);
        // A unit whose line program does not parse still names its functions.
        let lines = Lines::parse(unit_ref).ok();
        let mut functions = Vec::new();
        let mut addresses = Vec::new();
        let mut entries = unit_ref.entries_raw(None)?;
        while !entries.is_empty() {
            let offset = entries.next_offset();
            let Some(abbrev) = entries.read_abbreviation()? else {
                continue;
            };
            if abbrev.tag() != gimli::DW_TAG_subprogram {
                entries.skip_attributes(abbrev.attributes())?;
                continue;
            }
            let mut ranges = RangeAttributes::default();
            for spec in abbrev.attributes() {
                let attr = entries.read_attribute(*spec)?;
                ranges.note(unit_ref, &attr)?;
            }
            let index = functions.len();
            let any = ranges.for_each(unit_ref, |range| addresses.push((range, index)))?;
            if any {
                functions.push(Function {
                    offset,
                    detail: None,
                });
            }
        }
        addresses.sort_unstable_by_key(|(range, _)| range.begin);
        let lines_bytes = lines.as_ref().map_or(0, |l: &Lines| {
            l.sequences
                .iter()
                .map(|s| s.rows.len() as u64 * 16)
                .sum::<u64>()
                + l.files.iter().map(|f| f.len() as u64 + 24).sum::<u64>()
        });
        let parsed_bytes =
            ABBREVIATIONS_BYTES + lines_bytes + (functions.len() + addresses.len()) as u64 * 48;
        Ok(Parsed {
            unit,
            lines,
            functions,
            addresses,
            parsed_bytes,
            inlined_bytes: 0,
        })
    }

    /// Bytes it takes, about: the abbreviations, 16 bytes a line row, the file names, and
    /// 48 bytes a function and an inlined call.
    fn bytes(&self) -> u64 {
        self.parsed_bytes + self.inlined_bytes
    }

    /// The frames at `probe` if this unit has a function or a line row there.
    fn frames(
        &mut self,
        dwarf: &Dwarf,
        refs: &mut Refs<'_>,
        probe: u64,
    ) -> Result<Option<Vec<SourceFrame>>, DwarfError> {
        let unit_ref = UnitRef::new(dwarf, &self.unit);
        let location = self.lines.as_ref().and_then(|l| l.find(probe));
        let found = self
            .addresses
            .binary_search_by(|(range, _)| place(probe, range.begin, range.end))
            .ok()
            .map(|i| self.addresses[i].1);
        let Some(function) = found else {
            return Ok(location.map(|(file, line)| {
                vec![SourceFrame {
                    function: None,
                    file: file.map(str::to_owned),
                    line,
                    inlined: false,
                }]
            }));
        };
        let function = &mut self.functions[function];
        if function.detail.is_none() {
            let detail = FunctionDetail::parse(function.offset, unit_ref, refs)?;
            self.inlined_bytes += detail.inlined.len() as u64 * 96;
            function.detail = Some(detail);
        }
        let detail = function.detail.as_ref().expect("parsed above");
        let lines = self.lines.as_ref();
        let file_of = |index: Option<u64>| -> Option<String> {
            Some(lines?.files.get(usize::try_from(index?).ok()?)?.clone())
        };
        let mut frames = Vec::new();
        let mut next = location.map(|(file, line)| (file.map(str::to_owned), line));
        for inlined in detail.inlined_at(probe).into_iter().rev() {
            let (file, line) = next.take().unwrap_or((None, 0));
            frames.push(SourceFrame {
                function: inlined.name.as_deref().map(|n| demangle(n).into_owned()),
                file,
                line,
                inlined: true,
            });
            next = Some((file_of(inlined.call_file), inlined.call_line));
        }
        let (file, line) = next.unwrap_or((None, 0));
        frames.push(SourceFrame {
            function: detail.name.as_deref().map(|n| demangle(n).into_owned()),
            file,
            line,
            inlined: false,
        });
        Ok(Some(frames))
    }
}

/// Where `[begin, end)` lies from `probe`, for a binary search of ranges sorted by begin:
/// `Equal` when it holds it.
fn place(probe: u64, begin: u64, end: u64) -> Ordering {
    if probe < begin {
        Ordering::Greater
    } else if probe >= end {
        Ordering::Less
    } else {
        Ordering::Equal
    }
}

/// A unit's line rows, by sequence, and its files' paths.
struct Lines {
    files: Vec<String>,
    /// Sorted by start.
    sequences: Vec<Sequence>,
}

struct Sequence {
    start: u64,
    end: u64,
    /// (address, file index, line), sorted by address.
    rows: Vec<(u64, u32, u32)>,
}

impl Lines {
    fn parse(unit: UnitRef<'_, PagedReader>) -> Result<Lines, DwarfError> {
        let Some(program) = unit.line_program.clone() else {
            return Ok(Lines {
                files: Vec::new(),
                sequences: Vec::new(),
            });
        };
        let mut sequences = Vec::new();
        let mut current: Vec<(u64, u32, u32)> = Vec::new();
        let mut rows = program.rows();
        while let Some((_, row)) = rows.next_row()? {
            if row.end_sequence() {
                if let Some(&(start, ..)) = current.first() {
                    let end = row.address();
                    let rows = std::mem::take(&mut current);
                    if start < end {
                        sequences.push(Sequence { start, end, rows });
                    }
                }
                continue;
            }
            let address = row.address();
            let file = u32::try_from(row.file_index()).unwrap_or(u32::MAX);
            let line = row.line().map(NonZeroU64::get).unwrap_or(0) as u32;
            match current.last_mut() {
                Some(last) if last.0 == address => *last = (address, file, line),
                _ => current.push((address, file, line)),
            }
        }
        sequences.sort_unstable_by_key(|s| s.start);
        let header = rows.header();
        let mut files = Vec::new();
        match header.file(0) {
            Some(file) => files.push(render_file(unit, file, header)?),
            // DWARF 4 and before have no file 0.
            None => files.push(String::new()),
        }
        let mut index = 1;
        while let Some(file) = header.file(index) {
            files.push(render_file(unit, file, header)?);
            index += 1;
        }
        Ok(Lines { files, sequences })
    }

    /// The file and line of the row that holds `probe`, if a sequence does.
    fn find(&self, probe: u64) -> Option<(Option<&str>, u32)> {
        let sequence = self
            .sequences
            .binary_search_by(|s| place(probe, s.start, s.end))
            .ok()?;
        let rows = &self.sequences[sequence].rows;
        let row = match rows.binary_search_by_key(&probe, |r| r.0) {
            Ok(i) => i,
            Err(0) => return None,
            Err(i) => i - 1,
        };
        let (_, file, line) = rows[row];
        Some((self.files.get(file as usize).map(String::as_str), line))
    }
}

/// A file's path as addr2line renders it: the unit's directory, the file's directory, its
/// name, each absolute one starting over.
fn render_file(
    unit: UnitRef<'_, PagedReader>,
    file: &gimli::FileEntry<PagedReader, usize>,
    header: &gimli::LineProgramHeader<PagedReader, usize>,
) -> Result<String, DwarfError> {
    let mut path = match &unit.comp_dir {
        Some(dir) => dir.to_string_lossy()?.into_owned(),
        None => String::new(),
    };
    if file.directory_index() != 0
        && let Some(directory) = file.directory(header)
    {
        push_path(&mut path, &unit.attr_string(directory)?.to_string_lossy()?);
    }
    push_path(
        &mut path,
        &unit.attr_string(file.path_name())?.to_string_lossy()?,
    );
    Ok(path)
}

fn push_path(path: &mut String, part: &str) {
    if part.starts_with('/') {
        *path = part.to_owned();
        return;
    }
    if !path.is_empty() && !path.ends_with('/') {
        path.push('/');
    }
    path.push_str(part);
}

/// A function of a unit: where its entry is, and once asked about, its name and inlined calls.
struct Function {
    offset: UnitOffset<usize>,
    detail: Option<FunctionDetail>,
}

struct FunctionDetail {
    name: Option<String>,
    inlined: Vec<Inlined>,
    /// (range, call depth, index into `inlined`), sorted by depth then begin (see
    /// [`FunctionDetail::inlined_at`]).
    addresses: Vec<(gimli::Range, usize, usize)>,
}

struct Inlined {
    name: Option<String>,
    call_file: Option<u64>,
    call_line: u32,
}

impl FunctionDetail {
    fn parse(
        offset: UnitOffset<usize>,
        unit: UnitRef<'_, PagedReader>,
        refs: &mut Refs<'_>,
    ) -> Result<FunctionDetail, DwarfError> {
        let mut entries = unit.entries_raw(Some(offset))?;
        let depth = entries.next_depth();
        let Some(abbrev) = entries.read_abbreviation()? else {
            return Err(gimli::Error::NoEntryAtGivenOffset(offset.0 as u64).into());
        };
        let mut name = None;
        for spec in abbrev.attributes() {
            let attr = entries.read_attribute(*spec)?;
            note_name(unit, refs, &attr, &mut name)?;
        }
        let mut detail = FunctionDetail {
            name,
            inlined: Vec::new(),
            addresses: Vec::new(),
        };
        detail.parse_children(&mut entries, unit, refs, depth, 0)?;
        // By depth first: an address is looked up one depth at a time (addr2line's order).
        detail
            .addresses
            .sort_unstable_by_key(|(range, depth, _)| (*depth, range.begin));
        Ok(detail)
    }

    fn parse_children(
        &mut self,
        entries: &mut gimli::EntriesRaw<'_, PagedReader>,
        unit: UnitRef<'_, PagedReader>,
        refs: &mut Refs<'_>,
        depth: isize,
        call_depth: usize,
    ) -> Result<(), DwarfError> {
        loop {
            let next_depth = entries.next_depth();
            if next_depth <= depth {
                return Ok(());
            }
            let Some(abbrev) = entries.read_abbreviation()? else {
                continue;
            };
            match abbrev.tag() {
                gimli::DW_TAG_subprogram => {
                    // A nested function is a function of its own: skipped with its children.
                    entries.skip_attributes(abbrev.attributes())?;
                    while entries.next_depth() > next_depth {
                        if let Some(abbrev) = entries.read_abbreviation()? {
                            entries.skip_attributes(abbrev.attributes())?;
                        }
                    }
                }
                gimli::DW_TAG_inlined_subroutine => {
                    let mut ranges = RangeAttributes::default();
                    let mut inlined = Inlined {
                        name: None,
                        call_file: None,
                        call_line: 0,
                    };
                    for spec in abbrev.attributes() {
                        let attr = entries.read_attribute(*spec)?;
                        ranges.note(unit, &attr)?;
                        note_name(unit, refs, &attr, &mut inlined.name)?;
                        match attr.name() {
                            gimli::DW_AT_call_file => {
                                // DWARF 5 numbers files from 0; before, 0 meant none.
                                if let AttributeValue::FileIndex(file) = attr.value()
                                    && (file > 0 || unit.header.version() >= 5)
                                {
                                    inlined.call_file = Some(file);
                                }
                            }
                            gimli::DW_AT_call_line => {
                                inlined.call_line = attr.udata_value().unwrap_or(0) as u32;
                            }
                            _ => {}
                        }
                    }
                    let index = self.inlined.len();
                    self.inlined.push(inlined);
                    let addresses = &mut self.addresses;
                    ranges.for_each(unit, |range| addresses.push((range, call_depth, index)))?;
                    self.parse_children(entries, unit, refs, next_depth, call_depth + 1)?;
                }
                _ => entries.skip_attributes(abbrev.attributes())?,
            }
        }
    }

    /// The inlined calls that hold `probe`, outermost first.
    fn inlined_at(&self, probe: u64) -> Vec<&Inlined> {
        let mut found = Vec::new();
        let mut rest = &self.addresses[..];
        loop {
            let depth = found.len();
            let at = rest.binary_search_by(|(range, d, _)| {
                d.cmp(&depth)
                    .then_with(|| place(probe, range.begin, range.end))
            });
            let Ok(at) = at else {
                return found;
            };
            found.push(&self.inlined[rest[at].2]);
            rest = &rest[at + 1..];
        }
    }
}

/// Takes a function's name from `attr`, by addr2line's preference: a linkage name always, a
/// plain name or a referenced entry's name only while none was found.
fn note_name(
    unit: UnitRef<'_, PagedReader>,
    refs: &mut Refs<'_>,
    attr: &gimli::Attribute<PagedReader>,
    name: &mut Option<String>,
) -> Result<(), DwarfError> {
    match attr.name() {
        gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
            if let Ok(value) = unit.attr_string(attr.value()) {
                *name = Some(value.to_string_lossy()?.into_owned());
            }
        }
        gimli::DW_AT_name if name.is_none() => {
            if let Ok(value) = unit.attr_string(attr.value()) {
                *name = Some(value.to_string_lossy()?.into_owned());
            }
        }
        gimli::DW_AT_abstract_origin | gimli::DW_AT_specification if name.is_none() => {
            *name = referenced_name(unit, refs, attr.value(), NAME_REFERENCES)?;
        }
        _ => {}
    }
    Ok(())
}

/// The name of the entry `value` refers to, in this unit or another.
fn referenced_name(
    unit: UnitRef<'_, PagedReader>,
    refs: &mut Refs<'_>,
    value: AttributeValue<PagedReader>,
    depth: usize,
) -> Result<Option<String>, DwarfError> {
    if depth == 0 {
        return Ok(None);
    }
    match value {
        AttributeValue::UnitRef(offset) => entry_name(unit, refs, offset, depth),
        AttributeValue::DebugInfoRef(offset) => {
            let at = refs.offsets.partition_point(|&o| o <= offset.0);
            let Some(&start) = at.checked_sub(1).and_then(|i| refs.offsets.get(i)) else {
                return Ok(None);
            };
            if unit
                .header
                .debug_info_offset()
                .is_some_and(|o| o.0 == start)
            {
                return entry_name(unit, refs, UnitOffset(offset.0 - start), depth);
            }
            if let Some(name) = refs.others.names.get(&offset.0) {
                return Ok(name.clone());
            }
            // The unit that holds it: parsed for names, and kept for the next references.
            let other = match refs.others.units.iter().position(|(s, _)| *s == start) {
                Some(i) => refs.others.units.remove(i).1,
                None => {
                    let header = unit
                        .dwarf
                        .debug_info
                        .header_from_offset(DebugInfoOffset(start))?;
                    unit.dwarf.unit(header)?
                }
            };
            let name = entry_name(
                UnitRef::new(unit.dwarf, &other),
                refs,
                UnitOffset(offset.0 - start),
                depth,
            );
            if refs.others.units.len() >= OTHER_UNITS {
                refs.others.units.remove(0);
            }
            refs.others.units.push((start, other));
            let name = name?;
            if refs.others.names.len() >= MAX_REFERENCED_NAMES {
                refs.others.names.clear();
            }
            refs.others.names.insert(offset.0, name.clone());
            Ok(name)
        }
        _ => Ok(None),
    }
}

fn entry_name(
    unit: UnitRef<'_, PagedReader>,
    refs: &mut Refs<'_>,
    offset: UnitOffset<usize>,
    depth: usize,
) -> Result<Option<String>, DwarfError> {
    let mut entries = unit.entries_raw(Some(offset))?;
    let Some(abbrev) = entries.read_abbreviation()? else {
        return Err(gimli::Error::NoEntryAtGivenOffset(offset.0 as u64).into());
    };
    let mut name = None;
    let mut next = None;
    for spec in abbrev.attributes() {
        let attr = entries.read_attribute(*spec)?;
        match attr.name() {
            gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                if let Ok(value) = unit.attr_string(attr.value()) {
                    return Ok(Some(value.to_string_lossy()?.into_owned()));
                }
            }
            gimli::DW_AT_name => {
                if let Ok(value) = unit.attr_string(attr.value()) {
                    name = Some(value.to_string_lossy()?.into_owned());
                }
            }
            gimli::DW_AT_abstract_origin | gimli::DW_AT_specification => {
                next = Some(attr.value());
            }
            _ => {}
        }
    }
    if name.is_some() {
        return Ok(name);
    }
    match next {
        Some(next) => referenced_name(unit, refs, next, depth - 1),
        None => Ok(None),
    }
}

/// Where a function or inlined call is: `DW_AT_ranges`, or `DW_AT_low_pc` with
/// `DW_AT_high_pc` (an address, or a size).
#[derive(Default)]
struct RangeAttributes {
    low_pc: Option<u64>,
    high_pc: Option<u64>,
    size: Option<u64>,
    ranges: Option<gimli::RangeListsOffset<usize>>,
}

impl RangeAttributes {
    fn note(
        &mut self,
        unit: UnitRef<'_, PagedReader>,
        attr: &gimli::Attribute<PagedReader>,
    ) -> Result<(), DwarfError> {
        match (attr.name(), attr.value()) {
            (gimli::DW_AT_low_pc, AttributeValue::Addr(address)) => self.low_pc = Some(address),
            (gimli::DW_AT_low_pc, AttributeValue::DebugAddrIndex(index)) => {
                self.low_pc = Some(unit.address(index)?);
            }
            (gimli::DW_AT_high_pc, AttributeValue::Addr(address)) => self.high_pc = Some(address),
            (gimli::DW_AT_high_pc, AttributeValue::DebugAddrIndex(index)) => {
                self.high_pc = Some(unit.address(index)?);
            }
            (gimli::DW_AT_high_pc, AttributeValue::Udata(size)) => self.size = Some(size),
            (gimli::DW_AT_ranges, value) => self.ranges = unit.attr_ranges_offset(value)?,
            _ => {}
        }
        Ok(())
    }

    /// Calls `f` with each non-empty range; answers whether there was one.
    fn for_each(
        &self,
        unit: UnitRef<'_, PagedReader>,
        mut f: impl FnMut(gimli::Range),
    ) -> Result<bool, DwarfError> {
        let mut any = false;
        let mut add = |range: gimli::Range| {
            if range.begin < range.end {
                f(range);
                any = true;
            }
        };
        if let Some(offset) = self.ranges {
            let mut list = unit.ranges(offset)?;
            while let Some(range) = list.next()? {
                add(range);
            }
        } else if let (Some(begin), Some(end)) = (self.low_pc, self.high_pc) {
            add(gimli::Range { begin, end });
        } else if let (Some(begin), Some(size)) = (self.low_pc, self.size) {
            // A -1 tombstone overflows, and is not a range.
            add(gimli::Range {
                begin,
                end: begin.wrapping_add(size),
            });
        }
        Ok(any)
    }
}
