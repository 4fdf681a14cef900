//! HotSpot's vmStructs tables, read from a live JVM.
//!
//! Each table is an array of entries ended by one whose name is null; the layout of an entry
//! (the offset of each of its members, and its stride) is itself exported, so nothing here
//! assumes the C++ compiler's layout: `gHotSpotVMStructEntryFieldNameOffset` says where a
//! struct entry keeps its field name, and so on (see HotSpot's `vmStructs.cpp`).
//!
//! - struct entries: `(type, field)` to the field's offset in its type, or a static field's
//!   address, with the field's C++ type as a string (`"int"`, `"address"`, `"u2"`);
//! - type entries: a type's size and superclass;
//! - int and long constants (`frame::interpreter_frame_sender_sp_offset`, `InvocationEntryBci`).

use std::collections::HashMap;

use thiserror::Error;

use super::Memory;

/// The exported symbols read, each holding a value: the address of a table, or a layout number.
pub const EXPORTS: [&str; 24] = [
    "gHotSpotVMStructs",
    "gHotSpotVMStructEntryArrayStride",
    "gHotSpotVMStructEntryTypeNameOffset",
    "gHotSpotVMStructEntryFieldNameOffset",
    "gHotSpotVMStructEntryTypeStringOffset",
    "gHotSpotVMStructEntryIsStaticOffset",
    "gHotSpotVMStructEntryOffsetOffset",
    "gHotSpotVMStructEntryAddressOffset",
    "gHotSpotVMTypes",
    "gHotSpotVMTypeEntryArrayStride",
    "gHotSpotVMTypeEntryTypeNameOffset",
    "gHotSpotVMTypeEntrySuperclassNameOffset",
    "gHotSpotVMTypeEntrySizeOffset",
    "gHotSpotVMTypeEntryIsOopTypeOffset",
    "gHotSpotVMTypeEntryIsIntegerTypeOffset",
    "gHotSpotVMTypeEntryIsUnsignedOffset",
    "gHotSpotVMIntConstants",
    "gHotSpotVMIntConstantEntryArrayStride",
    "gHotSpotVMIntConstantEntryNameOffset",
    "gHotSpotVMIntConstantEntryValueOffset",
    "gHotSpotVMLongConstants",
    "gHotSpotVMLongConstantEntryArrayStride",
    "gHotSpotVMLongConstantEntryNameOffset",
    "gHotSpotVMLongConstantEntryValueOffset",
];

/// Most entries read from one table: JDK 17 has about 1,300 struct entries, 600 types and 700
/// constants; a table without its terminator stops here instead of reading on.
pub const MAX_ENTRIES: usize = 20_000;

/// Longest name read (type names such as `GrowableArray<CodeHeap*>*` are far shorter).
pub const MAX_NAME: usize = 256;

/// Largest stride or member offset of an entry believed.
const MAX_ENTRY_BYTES: u64 = 256;

/// Why a JVM's tables could not be read.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum VmStructsError {
    /// The binary does not export a symbol (not a HotSpot JVM, or one without vmStructs).
    #[error("libjvm does not export {0}")]
    MissingExport(&'static str),
    /// Memory that had to be read could not be.
    #[error("cannot read {what} at {addr:#x}")]
    Unreadable {
        /// What was being read.
        what: &'static str,
        /// Where.
        addr: u64,
    },
    /// An entry layout number that cannot be right.
    #[error("{name} is {value}, not a plausible entry layout")]
    BadLayout {
        /// The exported symbol.
        name: &'static str,
        /// Its value.
        value: u64,
    },
    /// A table did not end within [`MAX_ENTRIES`].
    #[error("the {0} table has no end within {MAX_ENTRIES} entries")]
    NoEnd(&'static str),
}

/// Where each of [`EXPORTS`] is in the process (the symbol's address plus the load bias).
#[derive(Debug, Clone, Default)]
pub struct Exports {
    addresses: HashMap<&'static str, u64>,
}

impl Exports {
    /// Exports from `(name, address)` pairs; names not in [`EXPORTS`] are ignored.
    pub fn new<'a>(symbols: impl IntoIterator<Item = (&'a str, u64)>) -> Exports {
        let mut addresses = HashMap::new();
        for (name, address) in symbols {
            if let Some(known) = EXPORTS.iter().find(|&&e| e == name) {
                addresses.insert(*known, address);
            }
        }
        Exports { addresses }
    }

    fn value(&self, mem: &mut dyn Memory, name: &'static str) -> Result<u64, VmStructsError> {
        let addr = *self
            .addresses
            .get(name)
            .ok_or(VmStructsError::MissingExport(name))?;
        mem.read_u64(addr)
            .ok_or(VmStructsError::Unreadable { what: name, addr })
    }

    fn layout(&self, mem: &mut dyn Memory, name: &'static str) -> Result<u64, VmStructsError> {
        let value = self.value(mem, name)?;
        if value >= MAX_ENTRY_BYTES {
            return Err(VmStructsError::BadLayout { name, value });
        }
        Ok(value)
    }
}

/// The vmStructs symbols of a `libjvm.so` file, at their ELF virtual addresses, with its load
/// segments to place them in a process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElfExports {
    /// `(name, ELF virtual address)` of each of [`EXPORTS`] the file's dynamic symbol table has.
    pub symbols: Vec<(&'static str, u64)>,
    /// `(file offset, virtual address, file size)` of each `PT_LOAD` segment.
    pub segments: Vec<(u64, u64, u64)>,
}

impl ElfExports {
    /// Reads the dynamic symbols and load segments of an ELF file.
    pub fn parse<'data, R: object::ReadRef<'data>>(data: R) -> Result<ElfExports, String> {
        use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};
        let file = object::File::parse(data).map_err(|e| format!("not an ELF file: {e}"))?;
        let mut symbols = Vec::new();
        for symbol in file.dynamic_symbols() {
            let Ok(name) = symbol.name() else {
                continue;
            };
            if let Some(known) = EXPORTS.iter().find(|&&e| e == name) {
                symbols.push((*known, symbol.address()));
            }
        }
        let segments = file
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                (offset, s.address(), size)
            })
            .collect();
        Ok(ElfExports { symbols, segments })
    }

    /// Where the symbols are in a process that maps the file's offset `offset` at `start`.
    pub fn in_process(&self, start: u64, offset: u64) -> Option<Exports> {
        let &(seg_offset, seg_vaddr, _) = self
            .segments
            .iter()
            .find(|&&(o, _, size)| (o..o.saturating_add(size.max(1))).contains(&offset))?;
        let vaddr = seg_vaddr.checked_add(offset - seg_offset)?;
        let bias = start.wrapping_sub(vaddr);
        Some(Exports::new(
            self.symbols
                .iter()
                .map(|&(name, addr)| (name, addr.wrapping_add(bias))),
        ))
    }
}

/// A field of a HotSpot type, as its struct entry describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The field's C++ type (`"int"`, `"address"`, `"GrowableArray<CodeHeap*>*"`).
    pub type_string: String,
    /// Whether it is a static field: then `address` is where it is, `offset` is 0.
    pub is_static: bool,
    /// Offset in an instance of its type.
    pub offset: u64,
    /// Address of a static field.
    pub address: u64,
}

/// A HotSpot type, as its type entry describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Type {
    /// Its superclass, if it has one.
    pub superclass: Option<String>,
    /// `sizeof`.
    pub size: u64,
}

/// The tables of one JVM.
#[derive(Debug, Clone, Default)]
pub struct VmStructs {
    fields: HashMap<(String, String), Field>,
    types: HashMap<String, Type>,
    constants: HashMap<String, i64>,
}

impl VmStructs {
    /// Reads the four tables from `mem`, the JVM's memory, where `exports` says they are.
    pub fn read(mem: &mut dyn Memory, exports: &Exports) -> Result<VmStructs, VmStructsError> {
        let mut names = Names::default();
        let mut tables = VmStructs::default();

        let base = exports.value(mem, "gHotSpotVMStructs")?;
        let stride = exports.layout(mem, "gHotSpotVMStructEntryArrayStride")?;
        let type_name = exports.layout(mem, "gHotSpotVMStructEntryTypeNameOffset")?;
        let field_name = exports.layout(mem, "gHotSpotVMStructEntryFieldNameOffset")?;
        let type_string = exports.layout(mem, "gHotSpotVMStructEntryTypeStringOffset")?;
        let is_static = exports.layout(mem, "gHotSpotVMStructEntryIsStaticOffset")?;
        let offset = exports.layout(mem, "gHotSpotVMStructEntryOffsetOffset")?;
        let address = exports.layout(mem, "gHotSpotVMStructEntryAddressOffset")?;
        for_entries(mem, "struct", base, stride, |mem, entry| {
            let Some(ty) = names.at(mem, entry.wrapping_add(type_name))? else {
                return Ok(false);
            };
            // A type's entry without fields (the SA's own bookkeeping) has no field name.
            let Some(field) = names.at(mem, entry.wrapping_add(field_name))? else {
                return Ok(true);
            };
            let type_string = names
                .at(mem, entry.wrapping_add(type_string))?
                .unwrap_or_default();
            let mut flag = [0u8; 4];
            let is_static =
                mem.read(entry.wrapping_add(is_static), &mut flag) && i32::from_le_bytes(flag) != 0;
            let offset = read_u64(mem, entry.wrapping_add(offset), "a struct entry's offset")?;
            let address = read_u64(mem, entry.wrapping_add(address), "a struct entry's address")?;
            tables.fields.insert(
                (ty, field),
                Field {
                    type_string,
                    is_static,
                    offset: if is_static { 0 } else { offset },
                    address: if is_static { address } else { 0 },
                },
            );
            Ok(true)
        })?;

        let base = exports.value(mem, "gHotSpotVMTypes")?;
        let stride = exports.layout(mem, "gHotSpotVMTypeEntryArrayStride")?;
        let type_name = exports.layout(mem, "gHotSpotVMTypeEntryTypeNameOffset")?;
        let superclass = exports.layout(mem, "gHotSpotVMTypeEntrySuperclassNameOffset")?;
        let size = exports.layout(mem, "gHotSpotVMTypeEntrySizeOffset")?;
        for_entries(mem, "type", base, stride, |mem, entry| {
            let Some(ty) = names.at(mem, entry.wrapping_add(type_name))? else {
                return Ok(false);
            };
            let superclass = names.at(mem, entry.wrapping_add(superclass))?;
            let size = read_u64(mem, entry.wrapping_add(size), "a type entry's size")?;
            tables.types.insert(ty, Type { superclass, size });
            Ok(true)
        })?;

        for (table, base, stride, name, value, width) in [
            (
                "int constant",
                "gHotSpotVMIntConstants",
                "gHotSpotVMIntConstantEntryArrayStride",
                "gHotSpotVMIntConstantEntryNameOffset",
                "gHotSpotVMIntConstantEntryValueOffset",
                4,
            ),
            (
                "long constant",
                "gHotSpotVMLongConstants",
                "gHotSpotVMLongConstantEntryArrayStride",
                "gHotSpotVMLongConstantEntryNameOffset",
                "gHotSpotVMLongConstantEntryValueOffset",
                8,
            ),
        ] {
            let base = exports.value(mem, base)?;
            let stride = exports.layout(mem, stride)?;
            let name = exports.layout(mem, name)?;
            let value = exports.layout(mem, value)?;
            for_entries(mem, table, base, stride, |mem, entry| {
                let Some(constant) = names.at(mem, entry.wrapping_add(name))? else {
                    return Ok(false);
                };
                let mut bytes = [0u8; 8];
                if !mem.read(entry.wrapping_add(value), &mut bytes[..width]) {
                    return Err(VmStructsError::Unreadable {
                        what: "a constant's value",
                        addr: entry.wrapping_add(value),
                    });
                }
                let v = if width == 4 {
                    i64::from(i32::from_le_bytes(bytes[..4].try_into().unwrap()))
                } else {
                    i64::from_le_bytes(bytes)
                };
                tables.constants.insert(constant, v);
                Ok(true)
            })?;
        }
        Ok(tables)
    }

    /// The field `field` of `ty`.
    pub fn field(&self, ty: &str, field: &str) -> Option<&Field> {
        self.fields.get(&(ty.to_owned(), field.to_owned()))
    }

    /// The type `ty`.
    pub fn type_(&self, ty: &str) -> Option<&Type> {
        self.types.get(ty)
    }

    /// The int or long constant `name`.
    pub fn constant(&self, name: &str) -> Option<i64> {
        self.constants.get(name).copied()
    }

    /// Entries read: (fields, types, constants).
    pub fn len(&self) -> (usize, usize, usize) {
        (self.fields.len(), self.types.len(), self.constants.len())
    }

    /// Whether nothing was read.
    pub fn is_empty(&self) -> bool {
        self.len() == (0, 0, 0)
    }

    /// Tables built by hand, for tests of what reads them.
    pub fn from_parts(
        fields: impl IntoIterator<Item = ((String, String), Field)>,
        types: impl IntoIterator<Item = (String, Type)>,
        constants: impl IntoIterator<Item = (String, i64)>,
    ) -> VmStructs {
        VmStructs {
            fields: fields.into_iter().collect(),
            types: types.into_iter().collect(),
            constants: constants.into_iter().collect(),
        }
    }
}

fn read_u64(mem: &mut dyn Memory, addr: u64, what: &'static str) -> Result<u64, VmStructsError> {
    mem.read_u64(addr)
        .ok_or(VmStructsError::Unreadable { what, addr })
}

/// Calls `each` with the address of every entry of a table, until it answers false (the
/// terminator), at most [`MAX_ENTRIES`].
fn for_entries(
    mem: &mut dyn Memory,
    table: &'static str,
    base: u64,
    stride: u64,
    mut each: impl FnMut(&mut dyn Memory, u64) -> Result<bool, VmStructsError>,
) -> Result<(), VmStructsError> {
    if stride == 0 {
        return Err(VmStructsError::BadLayout {
            name: "an entry stride",
            value: 0,
        });
    }
    for i in 0..MAX_ENTRIES as u64 {
        // The layout is the process's word: an entry past the end of the address space is no
        // entry.
        let entry = i
            .checked_mul(stride)
            .and_then(|at| base.checked_add(at))
            .ok_or(VmStructsError::NoEnd(table))?;
        if !each(mem, entry)? {
            return Ok(());
        }
    }
    Err(VmStructsError::NoEnd(table))
}

/// Strings read so far, by address: every type name is the same string in hundreds of entries.
#[derive(Default)]
struct Names {
    by_address: HashMap<u64, String>,
}

impl Names {
    /// The string that the pointer at `slot` points to; `None` for a null pointer.
    fn at(&mut self, mem: &mut dyn Memory, slot: u64) -> Result<Option<String>, VmStructsError> {
        let ptr = read_u64(mem, slot, "a name pointer")?;
        if ptr == 0 {
            return Ok(None);
        }
        if let Some(s) = self.by_address.get(&ptr) {
            return Ok(Some(s.clone()));
        }
        let s = read_c_string(mem, ptr, MAX_NAME).ok_or(VmStructsError::Unreadable {
            what: "a name",
            addr: ptr,
        })?;
        self.by_address.insert(ptr, s.clone());
        Ok(Some(s))
    }
}

/// The NUL-terminated string at `addr`, at most `max` bytes, read in pieces that do not cross a
/// page (the string may end just before an unmapped one). `None` if unreadable, unterminated
/// within `max`, or not UTF-8.
pub fn read_c_string(mem: &mut dyn Memory, addr: u64, max: usize) -> Option<String> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < max {
        let to_page = 4096 - (at % 4096) as usize;
        let mut chunk = vec![0u8; to_page.min(64).min(max - out.len())];
        // Memory that ends within the page (a test's, a short region) is read byte by byte.
        if !mem.read(at, &mut chunk) {
            chunk.truncate(1);
            if !mem.read(at, &mut chunk) {
                return None;
            }
        }
        if let Some(nul) = chunk.iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..nul]);
            return String::from_utf8(out).ok();
        }
        out.extend_from_slice(&chunk);
        at = at.checked_add(chunk.len() as u64)?;
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::hotspot::Regions;

    /// A fuzzer's input (CI, fuzz target `hotspot`): the exports' words give a struct entry's
    /// type name offset of 2^64 - 1, whose sum with the entry's address overflowed.
    #[test]
    fn offsets_past_the_address_space_read_nothing_and_panic_not() {
        const BASE: u64 = 0x1000;
        let data: &[u8] = &[
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x6d,
        ];
        let mut mem = Regions::default();
        mem.add(BASE, data.to_vec());
        let exports = Exports::new(
            EXPORTS
                .iter()
                .enumerate()
                .map(|(i, &name)| (name, BASE + 8 * i as u64)),
        );
        assert!(VmStructs::read(&mut mem, &exports).is_err());
    }

    /// Builds tables in memory the way libjvm lays them out, with strides and offsets of its
    /// own choosing, so that the reader is seen to follow the exported layout.
    pub(crate) struct Builder {
        pub mem: Regions,
        strings: Vec<u8>,
        string_base: u64,
        symbols: Vec<(&'static str, u64)>,
        next_symbol: u64,
    }

    impl Builder {
        pub(crate) fn new() -> Builder {
            Builder {
                mem: Regions::default(),
                strings: vec![0],
                string_base: 0x7000_0000,
                symbols: Vec::new(),
                next_symbol: 0x6000_0000,
            }
        }

        fn string(&mut self, s: &str) -> u64 {
            let at = self.string_base + self.strings.len() as u64;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            at
        }

        fn symbol(&mut self, name: &'static str, value: u64) {
            let at = self.next_symbol;
            self.next_symbol += 8;
            self.mem.add(at, value.to_le_bytes().to_vec());
            self.symbols.push((name, at));
        }

        /// Writes the tables: `fields` as (type, field, type string, static, offset or address).
        pub(crate) fn tables(
            mut self,
            fields: &[(&str, &str, &str, bool, u64)],
            types: &[(&str, u64)],
            ints: &[(&str, i32)],
        ) -> (Regions, Exports) {
            // Struct entries: stride 56, members shuffled from HotSpot's order.
            let stride = 56u64;
            let mut table = Vec::new();
            for &(ty, field, ts, is_static, value) in fields
                .iter()
                .chain(std::iter::once(&("", "", "", false, 0)))
            {
                let mut e = vec![0u8; stride as usize];
                if !ty.is_empty() {
                    let (t, f, s) = (self.string(ty), self.string(field), self.string(ts));
                    e[0..8].copy_from_slice(&f.to_le_bytes());
                    e[8..16].copy_from_slice(&t.to_le_bytes());
                    e[16..24].copy_from_slice(&s.to_le_bytes());
                    e[24..28].copy_from_slice(&i32::from(is_static).to_le_bytes());
                    let (offset, address) = if is_static { (0, value) } else { (value, 0) };
                    e[32..40].copy_from_slice(&offset.to_le_bytes());
                    e[40..48].copy_from_slice(&address.to_le_bytes());
                }
                table.extend_from_slice(&e);
            }
            self.mem.add(0x5000_0000, table);
            self.symbol("gHotSpotVMStructs", 0x5000_0000);
            self.symbol("gHotSpotVMStructEntryArrayStride", stride);
            self.symbol("gHotSpotVMStructEntryFieldNameOffset", 0);
            self.symbol("gHotSpotVMStructEntryTypeNameOffset", 8);
            self.symbol("gHotSpotVMStructEntryTypeStringOffset", 16);
            self.symbol("gHotSpotVMStructEntryIsStaticOffset", 24);
            self.symbol("gHotSpotVMStructEntryOffsetOffset", 32);
            self.symbol("gHotSpotVMStructEntryAddressOffset", 40);

            let stride = 48u64;
            let mut table = Vec::new();
            for &(ty, size) in types.iter().chain(std::iter::once(&("", 0))) {
                let mut e = vec![0u8; stride as usize];
                if !ty.is_empty() {
                    let t = self.string(ty);
                    e[0..8].copy_from_slice(&t.to_le_bytes());
                    e[16..24].copy_from_slice(&size.to_le_bytes());
                }
                table.extend_from_slice(&e);
            }
            self.mem.add(0x5100_0000, table);
            self.symbol("gHotSpotVMTypes", 0x5100_0000);
            self.symbol("gHotSpotVMTypeEntryArrayStride", stride);
            self.symbol("gHotSpotVMTypeEntryTypeNameOffset", 0);
            self.symbol("gHotSpotVMTypeEntrySuperclassNameOffset", 8);
            self.symbol("gHotSpotVMTypeEntrySizeOffset", 16);
            self.symbol("gHotSpotVMTypeEntryIsOopTypeOffset", 24);
            self.symbol("gHotSpotVMTypeEntryIsIntegerTypeOffset", 28);
            self.symbol("gHotSpotVMTypeEntryIsUnsignedOffset", 32);

            for (kind, base) in [("Int", 0x5200_0000u64), ("Long", 0x5300_0000)] {
                let mut table = Vec::new();
                let rows: Vec<(&str, i32)> = if kind == "Int" { ints.to_vec() } else { vec![] };
                for &(name, v) in rows.iter().chain(std::iter::once(&("", 0))) {
                    let mut e = vec![0u8; 16];
                    if !name.is_empty() {
                        let n = self.string(name);
                        e[0..8].copy_from_slice(&n.to_le_bytes());
                        e[8..12].copy_from_slice(&v.to_le_bytes());
                    }
                    table.extend_from_slice(&e);
                }
                self.mem.add(base, table);
                let names: [&'static str; 4] = if kind == "Int" {
                    [
                        "gHotSpotVMIntConstants",
                        "gHotSpotVMIntConstantEntryArrayStride",
                        "gHotSpotVMIntConstantEntryNameOffset",
                        "gHotSpotVMIntConstantEntryValueOffset",
                    ]
                } else {
                    [
                        "gHotSpotVMLongConstants",
                        "gHotSpotVMLongConstantEntryArrayStride",
                        "gHotSpotVMLongConstantEntryNameOffset",
                        "gHotSpotVMLongConstantEntryValueOffset",
                    ]
                };
                self.symbol(names[0], base);
                self.symbol(names[1], 16);
                self.symbol(names[2], 0);
                self.symbol(names[3], 8);
            }
            let strings = std::mem::take(&mut self.strings);
            self.mem.add(self.string_base, strings);
            (self.mem, Exports::new(self.symbols.iter().copied()))
        }
    }

    #[test]
    fn tables_are_read_through_their_exported_layout() {
        let (mut mem, exports) = Builder::new().tables(
            &[
                ("CodeBlob", "_frame_size", "int", false, 28),
                ("CodeCache", "_low_bound", "address", true, 0x1234_5678),
            ],
            &[("HeapBlock", 16), ("nmethod", 352)],
            &[("frame::interpreter_frame_sender_sp_offset", -1)],
        );
        let tables = VmStructs::read(&mut mem, &exports).unwrap();
        assert_eq!(tables.len(), (2, 2, 1));
        let f = tables.field("CodeBlob", "_frame_size").unwrap();
        assert_eq!(
            (f.offset, f.is_static, f.type_string.as_str()),
            (28, false, "int")
        );
        let s = tables.field("CodeCache", "_low_bound").unwrap();
        assert_eq!((s.address, s.is_static), (0x1234_5678, true));
        assert_eq!(tables.type_("nmethod").unwrap().size, 352);
        assert_eq!(
            tables.constant("frame::interpreter_frame_sender_sp_offset"),
            Some(-1)
        );
        assert!(tables.field("CodeBlob", "_nope").is_none());
    }

    #[test]
    fn a_missing_export_or_a_table_without_end_is_an_error() {
        let (mut mem, _) = Builder::new().tables(&[], &[], &[]);
        assert_eq!(
            VmStructs::read(&mut mem, &Exports::default()).unwrap_err(),
            VmStructsError::MissingExport("gHotSpotVMStructs")
        );

        // A table of entries that all point at one name never ends.
        let mut mem = Regions::default();
        mem.add(0x1000, b"CodeBlob\0".to_vec());
        mem.add(0x2000, 0x3000u64.to_le_bytes().to_vec());
        mem.add(0x2008, 8u64.to_le_bytes().to_vec());
        mem.add(0x2010, 0u64.to_le_bytes().to_vec());
        let entries: Vec<u8> = std::iter::repeat_n(0x1000u64.to_le_bytes(), MAX_ENTRIES + 2)
            .flatten()
            .collect();
        mem.add(0x3000, entries);
        let exports = Exports::new(
            [
                ("gHotSpotVMStructs", 0x2000),
                ("gHotSpotVMStructEntryArrayStride", 0x2008),
            ]
            .into_iter()
            .chain(EXPORTS[2..8].iter().map(|&n| (n, 0x2010))),
        );
        assert_eq!(
            VmStructs::read(&mut mem, &exports).unwrap_err(),
            VmStructsError::NoEnd("struct")
        );
    }

    #[test]
    fn a_real_libjvm_exports_every_table_and_places_them_by_its_segments() {
        let path = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
        let bytes = std::fs::read(path).unwrap_or_else(|e| {
            panic!(
                "{path}: {e} (Debian's openjdk-17-jdk-headless, which cargo xtask setup installs)"
            )
        });
        let exports = ElfExports::parse(&*bytes).unwrap();
        assert_eq!(
            exports.symbols.len(),
            EXPORTS.len(),
            "{:?}",
            exports.symbols
        );
        let (_, structs) = exports
            .symbols
            .iter()
            .find(|s| s.0 == "gHotSpotVMStructs")
            .unwrap();
        let placed = exports.in_process(0x7f00_0000_0000, 0).unwrap();
        assert_eq!(
            placed.addresses["gHotSpotVMStructs"],
            0x7f00_0000_0000 + structs,
            "a shared object's first segment is at vaddr 0"
        );
    }

    #[test]
    fn strings_end_before_an_unreadable_page_and_are_bounded() {
        let mut mem = Regions::default();
        // "hi" ends 3 bytes before the region's end, which is a page end.
        mem.add(0x0ffd, b"hi\0".to_vec());
        assert_eq!(read_c_string(&mut mem, 0x0ffd, 16).as_deref(), Some("hi"));
        mem.add(0x2000, vec![b'a'; 600]);
        assert_eq!(read_c_string(&mut mem, 0x2000, MAX_NAME), None);
        assert_eq!(read_c_string(&mut mem, 0x9000, 16), None);
    }
}
