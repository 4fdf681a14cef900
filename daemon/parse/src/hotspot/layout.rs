//! What the Java unwinder needs of a JVM's vmStructs: where the code cache and the interpreter
//! are, how a code blob's header is laid out, and the interpreter's frame layout.
//!
//! Every number comes from the JVM's own tables. Two generations of layout are known: JDK 17's
//! code blob keeps pointers to its code (`_code_begin`, `_code_end`), JDK 23 and later keep
//! offsets from the blob (`_code_offset`, `_data_offset`); whichever the tables describe is
//! used. What the tables lack is listed by name in [`LayoutError`], not guessed.
//!
//! The interpreter's frame slots are the one derivation: the tables export
//! `frame::interpreter_frame_sender_sp_offset` and `..._last_sp_offset`, and, as the
//! serviceability agent does (`X86Frame.java`), the method slot is the one below `last_sp` and
//! the bytecode pointer five below the method (mirror, mdp, cache, locals, bcp), which has held
//! on x86_64 since JDK 9.

use thiserror::Error;

use super::vm_structs::VmStructs;

/// A field of a HotSpot object: where it is in the object, and how wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldAt {
    /// Offset from the start of the object.
    pub offset: u64,
    /// Bytes: 1, 2, 4 or 8.
    pub width: u8,
    /// Whether it is a signed integer.
    pub signed: bool,
}

impl FieldAt {
    /// The field's value in `object` (the object's bytes from its start), sign-extended.
    pub fn get(&self, object: &[u8]) -> Option<i64> {
        let start = usize::try_from(self.offset).ok()?;
        let bytes = object.get(start..start.checked_add(usize::from(self.width))?)?;
        let mut b = [0u8; 8];
        b[..bytes.len()].copy_from_slice(bytes);
        let raw = u64::from_le_bytes(b);
        let bits = u32::from(self.width) * 8;
        Some(if self.signed && bits < 64 {
            let shift = 64 - bits;
            ((raw << shift) as i64) >> shift
        } else {
            raw as i64
        })
    }

    /// The field's value as an address or unsigned count.
    pub fn get_u64(&self, object: &[u8]) -> Option<u64> {
        self.get(object).map(|v| v as u64)
    }

    /// The first byte after the field.
    pub fn end(&self) -> u64 {
        self.offset + u64::from(self.width)
    }
}

/// How a code blob says where its instructions are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeBounds {
    /// JDK 17 to 22: `_code_begin` and `_code_end` are addresses.
    Pointers {
        /// `CodeBlob::_code_begin`.
        begin: FieldAt,
        /// `CodeBlob::_code_end`.
        end: FieldAt,
    },
    /// JDK 23 and later: `_code_offset` and `_data_offset` are offsets from the blob.
    Offsets {
        /// `CodeBlob::_code_offset`.
        code: FieldAt,
        /// `CodeBlob::_data_offset`: the code ends where the data starts.
        data: FieldAt,
    },
}

/// The layout of a code blob's header, and of an nmethod's beyond it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobLayout {
    /// `CodeBlob::_name`, a `const char*`.
    pub name: FieldAt,
    /// `CodeBlob::_size`: bytes of the whole blob.
    pub size: FieldAt,
    /// `CodeBlob::_frame_complete_offset`: from the code's start, where the frame is built.
    pub frame_complete_offset: FieldAt,
    /// `CodeBlob::_frame_size`: in words, return address included; 0 for blobs without a
    /// frame of their own.
    pub frame_size: FieldAt,
    /// Where the instructions are.
    pub code: CodeBounds,
    /// `nmethod::_compile_id` (`CompiledMethod`'s subclass in JDK 17).
    pub compile_id: FieldAt,
    /// `nmethod::_method` (`CompiledMethod::_method` in JDK 17), a `Method*`.
    pub method: FieldAt,
    /// Bytes of a header worth reading: past every field above (an nmethod's).
    pub read_size: u64,
}

/// The layout of a code heap and of the blocks in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapLayout {
    /// `CodeHeap::_memory._low`: the heap's first byte.
    pub memory_low: FieldAt,
    /// `CodeHeap::_memory._high`: the end of its committed part.
    pub memory_high: FieldAt,
    /// `CodeHeap::_segmap._low`: its segment map, one byte per segment.
    pub segmap_low: FieldAt,
    /// `CodeHeap::_log2_segment_size`.
    pub log2_segment_size: FieldAt,
    /// Bytes of a `CodeHeap` worth reading.
    pub read_size: u64,
    /// `sizeof(HeapBlock)`: the block header before each blob.
    pub block_header: u64,
    /// `HeapBlock::Header::_length`: the block's length in segments.
    pub block_length: FieldAt,
    /// `HeapBlock::Header::_used`.
    pub block_used: FieldAt,
}

/// What the Java unwinder needs of one JVM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Address of the static `CodeCache::_heaps` (a `GrowableArray<CodeHeap*>*`).
    pub heaps: u64,
    /// `GrowableArrayBase::_len`.
    pub array_len: FieldAt,
    /// `GrowableArray<int>::_data` (the same for every element type).
    pub array_data: FieldAt,
    /// Address of the static `CodeCache::_low_bound`.
    pub low_bound: u64,
    /// Address of the static `CodeCache::_high_bound`.
    pub high_bound: u64,
    /// Code heaps and their blocks.
    pub heap: HeapLayout,
    /// Code blobs.
    pub blob: BlobLayout,
    /// Address of the static `AbstractInterpreter::_code` (a `StubQueue*`).
    pub interpreter: u64,
    /// `StubQueue::_stub_buffer`: the interpreter's first byte.
    pub stub_buffer: FieldAt,
    /// `StubQueue::_buffer_limit`: its length.
    pub buffer_limit: FieldAt,
    /// Address of the static `StubRoutines::_call_stub_return_address`: where Java code called
    /// from the VM returns to, in the call stub that built the entry frame.
    pub call_stub_return_address: u64,
    /// The interpreter's frame, in words from its frame pointer.
    pub frame: InterpreterFrame,
    /// Methods, for naming the interpreted ones.
    pub method: MethodLayout,
    /// Where an nmethod keeps its debug information, for its inlined methods and lines; or
    /// what the tables lack for it (JDK 23 and 24 moved part of it, and are not read).
    pub scopes: Result<ScopesLayout, LayoutError>,
    /// Where methods keep their line number tables and classes their source file's name; or
    /// what the tables lack for them.
    pub lines: Result<LinesLayout, LayoutError>,
    /// Address of the static `Abstract_VM_Version::_vm_major_version` (an `int`): which JDK
    /// wrote the compressed streams ([`super::compressed::Unsigned5::for_jdk`]); `None` when
    /// the tables lack it, and then neither scopes nor lines are read.
    pub vm_major_version: Option<u64>,
}

/// Where a method's line number table and its class's source file name are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinesLayout {
    /// `ConstMethod::_flags` (JDK 17) or `ConstMethod::_flags._flags` (JDK 21 and later).
    pub flags: FieldAt,
    /// The bit of `flags` that says the table is there (`ConstMethod::_has_linenumber_table`,
    /// or `ConstMethodFlags::_misc_has_linenumber_table`): it follows the bytecodes.
    pub has_line_table: u64,
    /// `ConstantPool::_source_file_name_index`: the slot of the source file's `Symbol*`.
    pub source_file_index: FieldAt,
}

/// Where an nmethod's scopes, `PcDesc`s and metadata are, and how its `PcDesc`s are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopesLayout {
    /// Which fields say where they are.
    pub place: ScopesPlace,
    /// The `PcDesc` layout.
    pub pc_desc: super::scopes::PcDescLayout,
    /// Bytes of the nmethod header worth reading for these.
    pub read_size: u64,
}

/// The fields that place an nmethod's debug information: two generations are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopesPlace {
    /// JDK 17 to 22: inside the blob, after its code: the metadata, the scopes data, the
    /// `PcDesc`s, then the dependencies.
    InBlob {
        /// `CompiledMethod::_scopes_data_begin`: an address.
        scopes_data_begin: FieldAt,
        /// `nmethod::_scopes_pcs_offset`: from the blob; the scopes data ends there.
        scopes_pcs_offset: FieldAt,
        /// `nmethod::_dependencies_offset`: the `PcDesc`s end there.
        dependencies_offset: FieldAt,
        /// `nmethod::_metadata_offset`: the metadata table, up to the scopes data.
        metadata_offset: FieldAt,
    },
    /// JDK 25: outside the code heap. The `PcDesc`s and scopes data are in the nmethod's
    /// immutable data (`[dependencies] [null checks] [handlers] [PcDescs] [scopes] ...`), its
    /// metadata in its mutable data after the relocations (`nmethod::scopes_pcs_begin`,
    /// `metadata_begin` and their ends in HotSpot's nmethod.hpp; the serviceability agent's
    /// `NMethod.java` reads them in another order and is not the reference).
    OutOfBlob {
        /// `nmethod::_immutable_data`: an address.
        immutable_data: FieldAt,
        /// `nmethod::_immutable_data_size`.
        immutable_data_size: FieldAt,
        /// `nmethod::_scopes_pcs_offset`: from the immutable data.
        scopes_pcs_offset: FieldAt,
        /// `nmethod::_scopes_data_offset`: from the immutable data; the `PcDesc`s end there
        /// and the scopes data begins, up to what follows it (speculations, JVMCI's data:
        /// none for C1's and C2's code) or the immutable data's end.
        scopes_data_offset: FieldAt,
        /// `CodeBlob::_mutable_data`: an address.
        mutable_data: FieldAt,
        /// `CodeBlob::_mutable_data_size`: the metadata ends there (JVMCI's data would follow
        /// it, none for C1's and C2's code).
        mutable_data_size: FieldAt,
        /// `CodeBlob::_relocation_size`: the relocations come first, the metadata after.
        relocation_size: FieldAt,
    },
}

/// Where one nmethod's debug information is in its process: address ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeRegions {
    /// The `PcDesc`s.
    pub pcs: std::ops::Range<u64>,
    /// The scopes data, which the `PcDesc`s' decode offsets index.
    pub data: std::ops::Range<u64>,
    /// The metadata table (`Method*`s, one word each), which scopes index from 1.
    pub metadata: std::ops::Range<u64>,
}

impl ScopesLayout {
    /// Where the nmethod at `blob` (of `size` bytes), whose first [`ScopesLayout::read_size`]
    /// bytes are `header`, keeps its debug information; `None` when the fields contradict
    /// each other (a range that ends before it begins; in the blob, a range outside it).
    pub fn regions(&self, header: &[u8], blob: u64, size: u64) -> Option<ScopeRegions> {
        let end = blob.checked_add(size)?;
        let ordered = |from: u64, to: u64| (from <= to).then_some(from..to);
        match self.place {
            ScopesPlace::InBlob {
                scopes_data_begin,
                scopes_pcs_offset,
                dependencies_offset,
                metadata_offset,
            } => {
                let in_blob = |f: FieldAt| {
                    f.get_u64(header)
                        .and_then(|o| blob.checked_add(o))
                        .filter(|&a| a <= end)
                };
                let data = scopes_data_begin
                    .get_u64(header)
                    .filter(|&a| a >= blob && a <= end)?;
                let pcs = in_blob(scopes_pcs_offset)?;
                let pcs_end = in_blob(dependencies_offset)?;
                let metadata = in_blob(metadata_offset)?;
                Some(ScopeRegions {
                    pcs: ordered(pcs, pcs_end)?,
                    data: ordered(data, pcs)?,
                    metadata: ordered(metadata, data)?,
                })
            }
            ScopesPlace::OutOfBlob {
                immutable_data,
                immutable_data_size,
                scopes_pcs_offset,
                scopes_data_offset,
                mutable_data,
                mutable_data_size,
                relocation_size,
            } => {
                let at = |base: FieldAt, offset: FieldAt| {
                    base.get_u64(header)?
                        .checked_add(u64::try_from(offset.get(header)?).ok()?)
                };
                let pcs = at(immutable_data, scopes_pcs_offset)?;
                let data = at(immutable_data, scopes_data_offset)?;
                let data_end = at(immutable_data, immutable_data_size)?;
                let metadata = at(mutable_data, relocation_size)?;
                let metadata_end = at(mutable_data, mutable_data_size)?;
                Some(ScopeRegions {
                    pcs: ordered(pcs, data)?,
                    data: ordered(data, data_end)?,
                    metadata: ordered(metadata, metadata_end)?,
                })
            }
        }
    }
}

/// What names a `Method*`: its `ConstMethod`, its constant pool's holder class and symbols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodLayout {
    /// `Method::_constMethod`.
    pub const_method: FieldAt,
    /// `ConstMethod::_constants`, the `ConstantPool*`.
    pub constants: FieldAt,
    /// `ConstMethod::_name_index`, into the constant pool.
    pub name_index: FieldAt,
    /// `ConstMethod::_signature_index`.
    pub signature_index: FieldAt,
    /// `sizeof(ConstMethod)`: the bytecodes follow it.
    pub const_method_size: u64,
    /// `ConstMethod::_code_size`: bytes of bytecode.
    pub code_size: FieldAt,
    /// `ConstantPool::_pool_holder`, the `InstanceKlass*`.
    pub pool_holder: FieldAt,
    /// `sizeof(ConstantPool)`: its slots follow it, one word each.
    pub constant_pool_size: u64,
    /// `Klass::_name`, a `Symbol*`.
    pub klass_name: FieldAt,
    /// `Symbol::_length`.
    pub symbol_length: FieldAt,
    /// Offset of `Symbol::_body`, the bytes.
    pub symbol_body: u64,
}

/// Slots of an interpreted frame, in words from its saved frame pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterpreterFrame {
    /// The caller's stack pointer (before any extension by an adapter).
    pub sender_sp: i64,
    /// The `Method*` being interpreted.
    pub method: i64,
    /// The bytecode pointer, as last saved.
    pub bcp: i64,
}

/// What this JVM's tables lack that the unwinder needs.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("the JVM's vmStructs lack {}", .0.join(", "))]
pub struct LayoutError(pub Vec<String>);

/// Collects lookups, remembering every one that failed.
struct Lookup<'a> {
    tables: &'a VmStructs,
    missing: Vec<String>,
}

impl Lookup<'_> {
    fn has(&self, ty: &str, field: &str) -> bool {
        self.tables.field(ty, field).is_some()
    }

    fn field(&mut self, ty: &str, field: &str) -> FieldAt {
        self.field_plus(ty, field, 0)
    }

    /// A field of a member (`CodeHeap::_memory` then `VirtualSpace::_low`): `extra` added.
    fn field_plus(&mut self, ty: &str, field: &str, extra: u64) -> FieldAt {
        match self.tables.field(ty, field) {
            Some(f) if !f.is_static => match width_of(&f.type_string) {
                Some((width, signed)) => FieldAt {
                    offset: f.offset + extra,
                    width,
                    signed,
                },
                None => {
                    self.missing.push(format!(
                        "{ty}::{field} of a known width ({})",
                        f.type_string
                    ));
                    FieldAt::default_missing()
                }
            },
            _ => {
                self.missing.push(format!("{ty}::{field}"));
                FieldAt::default_missing()
            }
        }
    }

    /// The offset of a member (`CodeHeap::_memory`), whatever its type.
    fn member(&mut self, ty: &str, field: &str) -> u64 {
        match self.tables.field(ty, field) {
            Some(f) if !f.is_static => f.offset,
            _ => {
                self.missing.push(format!("{ty}::{field}"));
                0
            }
        }
    }

    fn static_(&mut self, ty: &str, field: &str) -> u64 {
        match self.tables.field(ty, field) {
            Some(f) if f.is_static => f.address,
            _ => {
                self.missing.push(format!("static {ty}::{field}"));
                0
            }
        }
    }

    fn size(&mut self, ty: &str) -> u64 {
        match self.tables.type_(ty) {
            Some(t) => t.size,
            None => {
                self.missing.push(format!("type {ty}"));
                0
            }
        }
    }

    fn constant(&mut self, name: &str) -> i64 {
        self.tables.constant(name).unwrap_or_else(|| {
            self.missing.push(format!("constant {name}"));
            0
        })
    }

    /// `nmethod`'s field, or `CompiledMethod`'s where JDK 17 keeps it.
    fn nmethod_field(&mut self, field: &str) -> FieldAt {
        if !self.has("nmethod", field) && self.has("CompiledMethod", field) {
            self.field("CompiledMethod", field)
        } else {
            self.field("nmethod", field)
        }
    }
}

impl FieldAt {
    fn default_missing() -> FieldAt {
        FieldAt {
            offset: 0,
            width: 8,
            signed: false,
        }
    }
}

/// The width and signedness of a C++ type as vmStructs spells it; `None` for a type that is
/// not a scalar this module reads.
fn width_of(type_string: &str) -> Option<(u8, bool)> {
    let t = type_string.trim_start_matches("volatile ").trim();
    if t.ends_with('*') {
        return Some((8, false));
    }
    Some(match t {
        "address" | "size_t" | "uintptr_t" | "uint64_t" | "julong" | "u8" => (8, false),
        "intptr_t" | "int64_t" | "jlong" | "long" => (8, true),
        "int" | "jint" | "int32_t" => (4, true),
        "uint" | "unsigned int" | "juint" | "uint32_t" | "u4" => (4, false),
        "short" | "jshort" | "int16_t" => (2, true),
        "u2" | "jushort" | "uint16_t" | "unsigned short" => (2, false),
        "bool" | "u1" | "jubyte" | "uint8_t" | "unsigned char" | "CodeBlobKind" => (1, false),
        "signed char" | "jbyte" | "int8_t" | "char" => (1, true),
        _ => return None,
    })
}

impl Layout {
    /// The layout `tables` describe, or every name they lack.
    pub fn new(tables: &VmStructs) -> Result<Layout, LayoutError> {
        let mut l = Lookup {
            tables,
            missing: Vec::new(),
        };
        let memory = l.member("CodeHeap", "_memory");
        let segmap = l.member("CodeHeap", "_segmap");
        let heap = HeapLayout {
            memory_low: l.field_plus("VirtualSpace", "_low", memory),
            memory_high: l.field_plus("VirtualSpace", "_high", memory),
            segmap_low: l.field_plus("VirtualSpace", "_low", segmap),
            log2_segment_size: l.field("CodeHeap", "_log2_segment_size"),
            read_size: 0,
            block_header: l.size("HeapBlock"),
            block_length: l.field("HeapBlock::Header", "_length"),
            block_used: l.field("HeapBlock::Header", "_used"),
        };
        let heap = HeapLayout {
            read_size: [
                heap.memory_low,
                heap.memory_high,
                heap.segmap_low,
                heap.log2_segment_size,
            ]
            .iter()
            .map(FieldAt::end)
            .max()
            .unwrap_or(0),
            ..heap
        };
        let code = if l.has("CodeBlob", "_code_begin") {
            CodeBounds::Pointers {
                begin: l.field("CodeBlob", "_code_begin"),
                end: l.field("CodeBlob", "_code_end"),
            }
        } else {
            CodeBounds::Offsets {
                code: l.field("CodeBlob", "_code_offset"),
                data: l.field("CodeBlob", "_data_offset"),
            }
        };
        let blob = BlobLayout {
            name: l.field("CodeBlob", "_name"),
            size: l.field("CodeBlob", "_size"),
            frame_complete_offset: l.field("CodeBlob", "_frame_complete_offset"),
            frame_size: l.field("CodeBlob", "_frame_size"),
            code,
            compile_id: l.nmethod_field("_compile_id"),
            method: l.nmethod_field("_method"),
            read_size: 0,
        };
        let code_fields = match blob.code {
            CodeBounds::Pointers { begin, end } => [begin, end],
            CodeBounds::Offsets { code, data } => [code, data],
        };
        let blob = BlobLayout {
            read_size: [
                blob.name,
                blob.size,
                blob.frame_complete_offset,
                blob.frame_size,
                blob.compile_id,
                blob.method,
            ]
            .iter()
            .chain(&code_fields)
            .map(FieldAt::end)
            .max()
            .unwrap_or(0),
            ..blob
        };
        let method = MethodLayout {
            const_method: l.field("Method", "_constMethod"),
            constants: l.field("ConstMethod", "_constants"),
            name_index: l.field("ConstMethod", "_name_index"),
            signature_index: l.field("ConstMethod", "_signature_index"),
            const_method_size: l.size("ConstMethod"),
            code_size: l.field("ConstMethod", "_code_size"),
            pool_holder: l.field("ConstantPool", "_pool_holder"),
            constant_pool_size: l.size("ConstantPool"),
            klass_name: l.field("Klass", "_name"),
            symbol_length: l.field("Symbol", "_length"),
            symbol_body: l.member("Symbol", "_body"),
        };
        let scopes = {
            let mut s = Lookup {
                tables,
                missing: Vec::new(),
            };
            let place = if s.has("nmethod", "_immutable_data") {
                ScopesPlace::OutOfBlob {
                    immutable_data: s.field("nmethod", "_immutable_data"),
                    immutable_data_size: s.field("nmethod", "_immutable_data_size"),
                    scopes_pcs_offset: s.field("nmethod", "_scopes_pcs_offset"),
                    scopes_data_offset: s.field("nmethod", "_scopes_data_offset"),
                    mutable_data: s.field("CodeBlob", "_mutable_data"),
                    mutable_data_size: s.field("CodeBlob", "_mutable_data_size"),
                    relocation_size: s.field("CodeBlob", "_relocation_size"),
                }
            } else {
                ScopesPlace::InBlob {
                    scopes_data_begin: s.nmethod_field("_scopes_data_begin"),
                    scopes_pcs_offset: s.field("nmethod", "_scopes_pcs_offset"),
                    dependencies_offset: s.field("nmethod", "_dependencies_offset"),
                    metadata_offset: s.field("nmethod", "_metadata_offset"),
                }
            };
            let fields: Vec<FieldAt> = match place {
                ScopesPlace::InBlob {
                    scopes_data_begin,
                    scopes_pcs_offset,
                    dependencies_offset,
                    metadata_offset,
                } => vec![
                    scopes_data_begin,
                    scopes_pcs_offset,
                    dependencies_offset,
                    metadata_offset,
                ],
                ScopesPlace::OutOfBlob {
                    immutable_data,
                    immutable_data_size,
                    scopes_pcs_offset,
                    scopes_data_offset,
                    mutable_data,
                    mutable_data_size,
                    relocation_size,
                } => vec![
                    immutable_data,
                    immutable_data_size,
                    scopes_pcs_offset,
                    scopes_data_offset,
                    mutable_data,
                    mutable_data_size,
                    relocation_size,
                ],
            };
            let layout = ScopesLayout {
                place,
                pc_desc: super::scopes::PcDescLayout {
                    size: s.size("PcDesc"),
                    pc_offset: s.field("PcDesc", "_pc_offset"),
                    scope: s.field("PcDesc", "_scope_decode_offset"),
                },
                read_size: fields.iter().map(FieldAt::end).max().unwrap_or(0),
            };
            if s.missing.is_empty() {
                Ok(layout)
            } else {
                Err(LayoutError(s.missing))
            }
        };
        let lines = {
            let mut s = Lookup {
                tables,
                missing: Vec::new(),
            };
            let (flags, bit) = if s.has("ConstMethod", "_flags._flags") {
                (
                    s.field("ConstMethod", "_flags._flags"),
                    s.constant("ConstMethodFlags::_misc_has_linenumber_table"),
                )
            } else {
                (
                    s.field("ConstMethod", "_flags"),
                    s.constant("ConstMethod::_has_linenumber_table"),
                )
            };
            let layout = LinesLayout {
                flags,
                has_line_table: bit as u64,
                source_file_index: s.field("ConstantPool", "_source_file_name_index"),
            };
            if s.missing.is_empty() {
                Ok(layout)
            } else {
                Err(LayoutError(s.missing))
            }
        };
        let vm_major_version = tables
            .field("Abstract_VM_Version", "_vm_major_version")
            .filter(|f| f.is_static)
            .map(|f| f.address);
        let last_sp = l.constant("frame::interpreter_frame_last_sp_offset");
        let layout = Layout {
            heaps: l.static_("CodeCache", "_heaps"),
            array_len: l.field("GrowableArrayBase", "_len"),
            array_data: l.field("GrowableArray<int>", "_data"),
            low_bound: l.static_("CodeCache", "_low_bound"),
            high_bound: l.static_("CodeCache", "_high_bound"),
            heap,
            blob,
            interpreter: l.static_("AbstractInterpreter", "_code"),
            stub_buffer: l.field("StubQueue", "_stub_buffer"),
            buffer_limit: l.field("StubQueue", "_buffer_limit"),
            call_stub_return_address: l.static_("StubRoutines", "_call_stub_return_address"),
            frame: InterpreterFrame {
                sender_sp: l.constant("frame::interpreter_frame_sender_sp_offset"),
                method: last_sp - 1,
                bcp: last_sp - 6,
            },
            method,
            scopes,
            lines,
            vm_major_version,
        };
        if l.missing.is_empty() {
            Ok(layout)
        } else {
            Err(LayoutError(l.missing))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::hotspot::vm_structs::{Field, Type};

    fn f(ty: &str, name: &str, ts: &str, offset: u64) -> ((String, String), Field) {
        (
            (ty.into(), name.into()),
            Field {
                type_string: ts.into(),
                is_static: false,
                offset,
                address: 0,
            },
        )
    }

    fn s(ty: &str, name: &str, address: u64) -> ((String, String), Field) {
        (
            (ty.into(), name.into()),
            Field {
                type_string: "address".into(),
                is_static: true,
                offset: 0,
                address,
            },
        )
    }

    /// JDK 17.0.15's tables as Debian builds it (the numbers read from a live JVM), as far as
    /// the layout uses them.
    pub(crate) fn jdk17() -> VmStructs {
        let (fields, types, constants) = jdk17_parts();
        VmStructs::from_parts(fields, types, constants)
    }

    type Parts = (
        Vec<((String, String), Field)>,
        Vec<(String, Type)>,
        Vec<(String, i64)>,
    );

    fn jdk17_parts() -> Parts {
        (
            vec![
                s("CodeCache", "_heaps", 0x10),
                s("CodeCache", "_low_bound", 0x18),
                s("CodeCache", "_high_bound", 0x20),
                s("AbstractInterpreter", "_code", 0x28),
                s("StubRoutines", "_call_stub_return_address", 0x30),
                f("GrowableArrayBase", "_len", "int", 0),
                f("GrowableArray<int>", "_data", "int*", 8),
                f("CodeHeap", "_memory", "VirtualSpace", 8),
                f("CodeHeap", "_segmap", "VirtualSpace", 120),
                f("CodeHeap", "_log2_segment_size", "int", 256),
                f("VirtualSpace", "_low", "char*", 16),
                f("VirtualSpace", "_high", "char*", 24),
                f("HeapBlock::Header", "_length", "size_t", 0),
                f("HeapBlock::Header", "_used", "bool", 8),
                f("CodeBlob", "_name", "const char*", 96),
                f("CodeBlob", "_size", "int", 12),
                f("CodeBlob", "_frame_complete_offset", "int", 20),
                f("CodeBlob", "_frame_size", "int", 28),
                f("CodeBlob", "_code_begin", "address", 32),
                f("CodeBlob", "_code_end", "address", 40),
                f("CompiledMethod", "_method", "Method*", 112),
                f("nmethod", "_compile_id", "int", 304),
                f("StubQueue", "_stub_buffer", "address", 8),
                f("StubQueue", "_buffer_limit", "int", 20),
                f("Method", "_constMethod", "ConstMethod*", 8),
                f("ConstMethod", "_constants", "ConstantPool*", 8),
                f("ConstMethod", "_name_index", "u2", 34),
                f("ConstMethod", "_code_size", "u2", 32),
                f("ConstMethod", "_signature_index", "u2", 36),
                f("ConstantPool", "_pool_holder", "InstanceKlass*", 24),
                f("Klass", "_name", "Symbol*", 24),
                f("Symbol", "_length", "u2", 4),
                f("Symbol", "_body", "None", 6),
                f("CompiledMethod", "_scopes_data_begin", "address", 120),
                f("nmethod", "_scopes_pcs_offset", "int", 268),
                f("nmethod", "_dependencies_offset", "int", 272),
                f("nmethod", "_metadata_offset", "int", 260),
                f("PcDesc", "_pc_offset", "int", 0),
                f("PcDesc", "_scope_decode_offset", "int", 4),
                f("ConstMethod", "_flags", "u2", 28),
                f("ConstantPool", "_source_file_name_index", "u2", 54),
                (
                    ("Abstract_VM_Version".into(), "_vm_major_version".into()),
                    Field {
                        type_string: "int".into(),
                        is_static: true,
                        offset: 0,
                        address: 0x38,
                    },
                ),
            ],
            [
                ("HeapBlock", 16),
                ("ConstMethod", 48),
                ("ConstantPool", 72),
                ("PcDesc", 16),
            ]
            .map(|(name, size)| {
                (
                    name.to_string(),
                    Type {
                        superclass: None,
                        size,
                    },
                )
            })
            .to_vec(),
            vec![
                ("frame::interpreter_frame_sender_sp_offset".to_string(), -1),
                ("frame::interpreter_frame_last_sp_offset".to_string(), -2),
                ("ConstMethod::_has_linenumber_table".to_string(), 1),
            ],
        )
    }

    #[test]
    fn jdk17s_tables_give_its_layout() {
        let l = Layout::new(&jdk17()).unwrap();
        assert_eq!(l.heap.memory_low.offset, 24);
        assert_eq!(l.heap.segmap_low.offset, 136);
        assert_eq!(l.heap.block_header, 16);
        assert_eq!(l.blob.method.offset, 112, "CompiledMethod's in JDK 17");
        assert!(matches!(l.blob.code, CodeBounds::Pointers { .. }));
        assert_eq!(l.blob.read_size, 308);
        assert_eq!(l.scopes.unwrap().read_size, 276);
        let lines = l.lines.unwrap();
        assert_eq!((lines.flags.offset, lines.flags.width), (28, 2));
        assert_eq!(lines.has_line_table, 1);
        assert_eq!(lines.source_file_index.offset, 54);
        assert_eq!(l.vm_major_version, Some(0x38));
        assert_eq!(
            l.frame,
            InterpreterFrame {
                sender_sp: -1,
                method: -3,
                bcp: -8
            },
            "frame_x86.hpp's interpreter_frame_{{sender_sp,method,bcp}}_offset"
        );
    }

    /// A header of `size` bytes with `values` at their fields.
    fn header(size: u64, values: &[(FieldAt, u64)]) -> Vec<u8> {
        let mut bytes = vec![0u8; size as usize];
        for (field, value) in values {
            let at = field.offset as usize;
            let width = usize::from(field.width);
            bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        }
        bytes
    }

    #[test]
    fn jdk17s_scopes_are_inside_the_blob() {
        let scopes = Layout::new(&jdk17()).unwrap().scopes.unwrap();
        let ScopesPlace::InBlob {
            scopes_data_begin,
            scopes_pcs_offset,
            dependencies_offset,
            metadata_offset,
        } = scopes.place
        else {
            panic!("{scopes:?}");
        };
        let blob = 0x7f00_0000_0000;
        let h = |data: u64| {
            header(
                scopes.read_size,
                &[
                    (scopes_data_begin, blob + data),
                    (scopes_pcs_offset, 0x300),
                    (dependencies_offset, 0x380),
                    (metadata_offset, 0x200),
                ],
            )
        };
        assert_eq!(
            scopes.regions(&h(0x240), blob, 0x400),
            Some(ScopeRegions {
                pcs: blob + 0x300..blob + 0x380,
                data: blob + 0x240..blob + 0x300,
                metadata: blob + 0x200..blob + 0x240,
            })
        );
        assert_eq!(
            scopes.regions(&h(0x240), blob, 0x340),
            None,
            "past the blob"
        );
        assert_eq!(
            scopes.regions(&h(0x1f0), blob, 0x400),
            None,
            "metadata after data"
        );
    }

    #[test]
    fn jdk25s_scopes_are_in_its_immutable_and_mutable_data() {
        // JDK 25.0.3's numbers (Temurin), read from a live JVM (`jhsdb clhsdb`'s
        // vmstructsdump): CompiledMethod is gone, the offsets are from the two data blocks.
        let (fields, types, constants) = jdk17_parts();
        let gone = [
            "_scopes_data_begin",
            "_dependencies_offset",
            "_metadata_offset",
            "_scopes_pcs_offset",
        ];
        let mut fields: Vec<_> = fields
            .into_iter()
            .filter(|((_, name), _)| !gone.contains(&name.as_str()))
            .collect();
        fields.extend([
            f("nmethod", "_immutable_data", "address", 96),
            f("nmethod", "_immutable_data_size", "int", 160),
            f("nmethod", "_scopes_pcs_offset", "int", 196),
            f("nmethod", "_scopes_data_offset", "int", 200),
        ]);
        // JDK 24 has the immutable data, not yet the mutable one: named, not guessed.
        let jdk24 = VmStructs::from_parts(fields.clone(), types.clone(), constants.clone());
        let missing = Layout::new(&jdk24).unwrap().scopes.unwrap_err();
        assert!(
            missing.0.contains(&"CodeBlob::_mutable_data".to_string()),
            "{missing}"
        );
        fields.extend([
            f("CodeBlob", "_mutable_data", "address", 16),
            f("CodeBlob", "_relocation_size", "int", 28),
            f("CodeBlob", "_mutable_data_size", "int", 48),
        ]);
        let scopes = Layout::new(&VmStructs::from_parts(fields, types, constants))
            .unwrap()
            .scopes
            .unwrap();
        assert_eq!(scopes.read_size, 204);
        let ScopesPlace::OutOfBlob {
            immutable_data,
            immutable_data_size,
            scopes_pcs_offset,
            scopes_data_offset,
            mutable_data,
            mutable_data_size,
            relocation_size,
        } = scopes.place
        else {
            panic!("{scopes:?}");
        };
        let (immutable, mutable) = (0x5600_0000_1000, 0x5600_0008_0000);
        let h = |pcs: u64, data: u64| {
            header(
                scopes.read_size,
                &[
                    (immutable_data, immutable),
                    (immutable_data_size, 0x300),
                    (scopes_pcs_offset, pcs),
                    (scopes_data_offset, data),
                    (mutable_data, mutable),
                    (relocation_size, 0x40),
                    (mutable_data_size, 0x90),
                ],
            )
        };
        // The blob's own bounds do not matter: the data are not in it.
        assert_eq!(
            scopes.regions(&h(0x100, 0x180), 0x7f00_0000_0000, 0x200),
            Some(ScopeRegions {
                pcs: immutable + 0x100..immutable + 0x180,
                data: immutable + 0x180..immutable + 0x300,
                metadata: mutable + 0x40..mutable + 0x90,
            })
        );
        assert_eq!(
            scopes.regions(&h(0x180, 0x100), 0x7f00_0000_0000, 0x200),
            None,
            "PcDescs that end before they begin"
        );
        assert_eq!(
            scopes.regions(&h(0x100, 0x400), 0x7f00_0000_0000, 0x200),
            None,
            "scopes past the immutable data"
        );
    }

    #[test]
    fn jdk21s_method_flags_are_found_where_it_moved_them() {
        // JDK 25.0.3's numbers (Temurin), read from a live JVM: the flags became a
        // `ConstMethodFlags` member, and their constants moved with them.
        let (fields, types, mut constants) = jdk17_parts();
        let mut fields: Vec<_> = fields
            .into_iter()
            .filter(|((ty, name), _)| (ty.as_str(), name.as_str()) != ("ConstMethod", "_flags"))
            .collect();
        fields.push(f("ConstMethod", "_flags._flags", "u4", 28));
        constants.retain(|(name, _)| !name.starts_with("ConstMethod::"));
        let without_bit = VmStructs::from_parts(fields.clone(), types.clone(), constants.clone());
        let missing = Layout::new(&without_bit).unwrap().lines.unwrap_err();
        assert_eq!(
            missing.0,
            ["constant ConstMethodFlags::_misc_has_linenumber_table"]
        );
        constants.push(("ConstMethodFlags::_misc_has_linenumber_table".into(), 1));
        let lines = Layout::new(&VmStructs::from_parts(fields, types, constants))
            .unwrap()
            .lines
            .unwrap();
        assert_eq!((lines.flags.offset, lines.flags.width), (28, 4));
    }

    #[test]
    fn what_the_tables_lack_is_named() {
        let tables = VmStructs::from_parts(
            [f("CodeBlob", "_size", "int", 12)],
            [],
            [("frame::interpreter_frame_last_sp_offset".to_string(), -2)],
        );
        let err = Layout::new(&tables).unwrap_err();
        let text = err.to_string();
        for needed in [
            "CodeHeap::_memory",
            "type HeapBlock",
            "CodeBlob::_code_offset",
            "static StubRoutines::_call_stub_return_address",
            "constant frame::interpreter_frame_sender_sp_offset",
        ] {
            assert!(text.contains(needed), "{needed} in {text}");
        }
        assert!(!text.contains("CodeBlob::_size"), "{text}");
    }

    #[test]
    fn fields_are_read_at_their_width_and_sign() {
        let bytes = [0xfe, 0xff, 0xff, 0xff, 0x34, 0x12, 0, 0, 0xff];
        let at = |offset, width, signed| FieldAt {
            offset,
            width,
            signed,
        };
        assert_eq!(at(0, 4, true).get(&bytes), Some(-2));
        assert_eq!(at(0, 4, false).get(&bytes), Some(0xffff_fffe));
        assert_eq!(at(4, 2, false).get(&bytes), Some(0x1234));
        assert_eq!(at(8, 1, true).get(&bytes), Some(-1));
        assert_eq!(at(8, 2, false).get(&bytes), None, "past the end");
        assert_eq!(width_of("volatile signed char"), Some((1, true)));
        assert_eq!(width_of("GrowableArray<CodeHeap*>*"), Some((8, false)));
        assert_eq!(width_of("VirtualSpace"), None);
    }
}
