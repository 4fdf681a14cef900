//! A live JVM's code cache, read from outside through its vmStructs: which code blob holds a
//! pc, and what the Java unwinder needs of it.
//!
//! [`CodeCache::attach`] reads the JVM's tables once (through [`Pages`]: a few dozen page
//! reads) and derives the [`Layout`]; a JVM whose tables lack something needed is refused
//! with the names of what it lacks. [`CodeCache::blob_at`] then finds a pc's blob the way
//! HotSpot's `CodeHeap::find_block_for` does (segment map walk back to the block start, block
//! header, blob header), reading only what the walk needs, and keeps what it read.
//!
//! What the code cache held at a sample's time: every header read is timestamped, and a blob
//! is known to have held a pc at the sample's time when the same blob (every field of its
//! header equal, its compile id among them, which is unique for the JVM's life) was read there
//! at or before that time and again at or after it. [`CodeCache::blob_at`] says whether that
//! holds ([`BlobAt::exact`]), reading an nmethod's header again when the last read is older
//! than the sample (once per nmethod per batch of samples, since a batch is unwound after its
//! samples were taken; stubs, which are not named from here, are read once). A blob read for the first time after the sample, or found replaced, may not be
//! what ran then: its frame is still unwound by it (the best there is), but not named by it;
//! the perf map path names it under its own time rules, and marks what it names late.
//!
//! [`CodeCache::compiled`] reads an nmethod's method name and, from its scopes, the methods
//! inlined at each of its pcs, once per nmethod.

use std::{
    collections::{BTreeMap, HashMap},
    ops::Range,
    sync::Arc,
};

use thiserror::Error;
use vmscope_parse::hotspot::{
    Memory, Pages,
    code_heap::{self, Blob, BlockError, Heap, Walk},
    compressed::Unsigned5,
    layout::{FieldAt, Layout, LayoutError, MethodLayout},
    lines::{LineTable, LinesError},
    method::external_name,
    vm_structs::{Exports, VmStructs, VmStructsError, read_c_string},
};

/// Most blob headers kept per JVM; the cache starts afresh when it fills up.
pub const MAX_CACHED_BLOBS: usize = 65_536;

/// Most methods whose names are kept per JVM; the cache starts afresh when it fills up.
pub const MAX_CACHED_METHODS: usize = 16_384;

/// How long a method's name read once is believed: a class unloaded frees its methods, and
/// their memory may come to hold another's.
pub const MAX_METHOD_AGE_NS: u64 = 10_000_000_000;

/// Most bytes of an nmethod's scopes, `PcDesc`s or metadata read.
pub const MAX_DEBUG_INFO: u64 = 1 << 20;

/// Most nmethods whose names and inlining are kept per JVM.
pub const MAX_CACHED_COMPILED: usize = 16_384;

/// Longest class, method, signature or source file symbol read.
const MAX_SYMBOL: u64 = 1024;

/// Most bytes of a method's line number table read (two or three bytes per line is usual).
pub const MAX_LINE_TABLE: u64 = 64 * 1024;

/// Bytes of a line number table read first.
const LINE_TABLE_FIRST_READ: u64 = 256;

/// Most segment map bytes read per step of a walk.
const SEGMAP_WINDOW: u64 = 512;

/// Most nmethods [`CodeCache::confirm_used`] reads again at once.
pub const MAX_CONFIRMED: usize = 256;

/// Most blocks one scan of the code heaps reads ([`CodeCache::scan`]): a large application's
/// code cache holds tens of thousands of blobs.
pub const MAX_SCANNED_BLOCKS: usize = MAX_CACHED_BLOBS;

/// Most steps of one segment map walk (a block of 64k segments, 8 MiB of code, is far beyond
/// HotSpot's largest).
const MAX_WALK_STEPS: usize = 128;

/// Most pages kept while the tables are read.
const TABLE_PAGES: usize = 1024;

/// How often the heaps' bounds may be read again when a pc in the code cache falls in none
/// of them (a heap committed more).
const HEAPS_REFRESH_NS: u64 = 100_000_000;

/// Why a JVM's code cache cannot be followed.
#[derive(Debug, Error)]
pub enum CodeCacheError {
    /// The vmStructs tables could not be read.
    #[error("cannot read the JVM's vmStructs: {0}")]
    Tables(#[from] VmStructsError),
    /// The tables lack what the unwinder needs.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// Memory the tables point to could not be read.
    #[error("cannot read {0} of the JVM")]
    Unreadable(&'static str),
}

/// Counters of one JVM's code cache reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CodeCacheCounters {
    /// Blob headers read.
    pub blobs_read: u64,
    /// Lookups answered from the cache.
    pub cache_hits: u64,
    /// Lookups of a pc in the code cache that found no blob (free, unreadable, inconsistent).
    pub misses: u64,
    /// Blobs read by scans of the whole code cache.
    pub scanned: u64,
}

/// A blob header and when it was read.
#[derive(Debug, Clone, Copy)]
struct SeenBlob {
    blob: Blob,
    /// When this header was first read.
    first_ns: u64,
    /// When it was last read, unchanged.
    confirmed_ns: u64,
}

/// The blob that holds a pc, as [`CodeCache::blob_at`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobAt {
    /// Its header, as last read.
    pub blob: Blob,
    /// Whether it held the pc at the sample's time: read there before the sample and after.
    pub exact: bool,
}

/// An nmethod as reports show it: its method and the methods inlined at each of its pcs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledCode {
    /// The compiled method's external name.
    pub name: Arc<str>,
    /// Where its instructions start: offsets in `pc_map` are from here.
    pub code_begin: u64,
    /// From its `PcDesc`s: from each point's offset to the next, the compiled method's bci
    /// and the methods inlined there, outermost first, with theirs. Empty when nothing is
    /// known of its scopes.
    pub pc_map: Vec<crate::codemap::code::PcPoint>,
}

/// A Java method, as its `Method*` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JavaMethod {
    /// Its external name (`long Callers.hot(long)`), as the perf map spells it.
    pub name: Arc<str>,
    /// Where its bytecodes start: a bytecode pointer minus this is a bytecode index.
    pub code_base: u64,
    /// Bytes of bytecode.
    pub code_size: u64,
    /// Its line number table and its class's source file, when it has a table (javac writes
    /// one unless told `-g:none`) and this JVM's tables say where it is.
    pub lines: Option<MethodLines>,
}

/// Where a method's bytecodes came from in its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodLines {
    /// The class's source file, as its `SourceFile` attribute names it (`Callers.java`);
    /// empty when the class has none.
    pub file: Arc<str>,
    /// bci -> line.
    pub table: LineTable,
}

impl JavaMethod {
    /// The bytecode index that `bcp` points at, if it points into the method's bytecode.
    pub fn bci(&self, bcp: u64) -> Option<u32> {
        let bci = bcp.checked_sub(self.code_base)?;
        (bci < self.code_size).then_some(bci as u32)
    }

    /// The source line of the bytecode at `bci`: the file (empty if unknown) and the line (0
    /// if unknown).
    pub fn line_at(&self, bci: u32) -> (Arc<str>, u32) {
        match &self.lines {
            Some(lines) => (lines.file.clone(), lines.table.line_at(bci).unwrap_or(0)),
            None => (Arc::from(""), 0),
        }
    }
}

/// One JVM's code cache.
#[derive(Debug)]
pub struct CodeCache {
    layout: Layout,
    bounds: Range<u64>,
    heaps: Vec<Heap>,
    heaps_read_ns: u64,
    interpreter: Range<u64>,
    call_stub_return: u64,
    /// Name pointer -> whether it names an nmethod.
    nmethod_names: BTreeMap<u64, bool>,
    /// Blob start -> its header, and when it was first and last read the same.
    blobs: BTreeMap<u64, SeenBlob>,
    /// (blob start, compile id) -> the nmethod as reports show it.
    compiled: HashMap<(u64, i64), Option<Arc<CompiledCode>>>,
    /// A stub's name pointer -> its name (static strings of libjvm's).
    stub_names: HashMap<u64, Option<Arc<str>>>,
    /// `Method*` -> (the method, when it was read); `None` for one that could not be read.
    methods: HashMap<u64, (Option<Arc<JavaMethod>>, u64)>,
    /// How this JVM compresses scopes and line tables; `None` when its version is unknown,
    /// and then neither is read.
    coding: Option<Unsigned5>,
    /// The nmethods stacks went through since [`CodeCache::confirm_used`] last ran (blob
    /// starts), at most [`MAX_CONFIRMED`].
    used: std::collections::HashSet<u64>,
    counters: CodeCacheCounters,
}

impl CodeCache {
    /// Reads the tables of the JVM whose `libjvm.so` exports are at `exports`, and where its
    /// code cache and interpreter are.
    pub fn attach(
        mem: &mut dyn Memory,
        exports: &Exports,
        now_ns: u64,
    ) -> Result<CodeCache, CodeCacheError> {
        let tables = {
            let mut pages = Pages::new(&mut *mem, TABLE_PAGES);
            VmStructs::read(&mut pages, exports)?
        };
        let layout = Layout::new(&tables)?;
        let word = |mem: &mut dyn Memory, addr, what| {
            mem.read_u64(addr).ok_or(CodeCacheError::Unreadable(what))
        };
        let low = word(mem, layout.low_bound, "CodeCache::_low_bound")?;
        let high = word(mem, layout.high_bound, "CodeCache::_high_bound")?;
        let queue = word(mem, layout.interpreter, "AbstractInterpreter::_code")?;
        let mut stub_queue = vec![0u8; 64];
        if queue == 0 || !mem.read(queue, &mut stub_queue) {
            return Err(CodeCacheError::Unreadable("the interpreter's StubQueue"));
        }
        let start = layout
            .stub_buffer
            .get_u64(&stub_queue)
            .ok_or(CodeCacheError::Unreadable("StubQueue::_stub_buffer"))?;
        let limit = layout
            .buffer_limit
            .get_u64(&stub_queue)
            .ok_or(CodeCacheError::Unreadable("StubQueue::_buffer_limit"))?;
        let call_stub_return = word(
            mem,
            layout.call_stub_return_address,
            "StubRoutines::_call_stub_return_address",
        )?;
        // JDK 8 is the oldest with these tables; a version past any JDK's is not believed.
        let coding = layout
            .vm_major_version
            .and_then(|at| {
                let mut bytes = [0u8; 4];
                mem.read(at, &mut bytes).then(|| i32::from_le_bytes(bytes))
            })
            .filter(|v| (8..1000).contains(v))
            .map(|v| Unsigned5::for_jdk(v as u32));
        // Once per JVM: a JDK whose layout is not known loses inlining and lines, not stacks.
        if let Err(e) = &layout.scopes {
            tracing::info!("a JVM's compiled frames go without inlined methods or lines: {e}");
        }
        if let Err(e) = &layout.lines {
            tracing::info!("a JVM's frames go without source lines: {e}");
        }
        if coding.is_none() {
            tracing::info!(
                "a JVM's version is unreadable: its frames go without inlined methods or lines"
            );
        }
        let mut cache = CodeCache {
            coding,
            used: std::collections::HashSet::new(),
            stub_names: HashMap::new(),
            layout,
            bounds: low..high,
            heaps: Vec::new(),
            heaps_read_ns: 0,
            interpreter: start..start.saturating_add(limit),
            call_stub_return,
            nmethod_names: BTreeMap::new(),
            blobs: BTreeMap::new(),
            compiled: HashMap::new(),
            methods: HashMap::new(),
            counters: CodeCacheCounters::default(),
        };
        cache.read_heaps(mem, now_ns);
        if cache.heaps.is_empty() {
            return Err(CodeCacheError::Unreadable("the code heaps"));
        }
        Ok(cache)
    }

    fn read_heaps(&mut self, mem: &mut dyn Memory, now_ns: u64) {
        self.heaps_read_ns = now_ns;
        let l = &self.layout;
        let Some(array) = mem.read_u64(l.heaps).filter(|&a| a != 0) else {
            return;
        };
        let mut head = [0u8; 16];
        if !mem.read(array, &mut head) {
            return;
        }
        let (Some(len), Some(data)) = (l.array_len.get(&head), l.array_data.get_u64(&head)) else {
            return;
        };
        let mut heaps = Vec::new();
        for i in 0..len.clamp(0, 16) as u64 {
            let Some(heap) = mem.read_u64(data + 8 * i) else {
                continue;
            };
            let mut bytes = vec![0u8; l.heap.read_size as usize];
            if mem.read(heap, &mut bytes)
                && let Some(h) = Heap::parse(&bytes, &l.heap)
            {
                heaps.push(h);
            }
        }
        if !heaps.is_empty() {
            self.heaps = heaps;
        }
    }

    /// Whether `pc` is in the code cache (generated code of this JVM).
    pub fn contains(&self, pc: u64) -> bool {
        self.bounds.contains(&pc)
    }

    /// Whether `pc` is in the template interpreter.
    pub fn in_interpreter(&self, pc: u64) -> bool {
        self.interpreter.contains(&pc)
    }

    /// Where Java code called from the VM's C++ code returns to (in the call stub).
    pub fn call_stub_return(&self) -> u64 {
        self.call_stub_return
    }

    /// The interpreter's frame layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The counters.
    pub fn counters(&self) -> CodeCacheCounters {
        self.counters
    }

    /// The blob whose instructions hold `pc`, if one does, and whether it held it at
    /// `sample_ns` (see the module's documentation); `now_ns` is the time of any read.
    pub fn blob_at(
        &mut self,
        mem: &mut dyn Memory,
        pc: u64,
        sample_ns: u64,
        now_ns: u64,
    ) -> Option<BlobAt> {
        let cached = self
            .blobs
            .range(..=pc)
            .next_back()
            .map(|(_, seen)| *seen)
            .filter(|seen| seen.blob.contains(pc));
        // Only an nmethod's frame is named from its blob, so only an nmethod needs the proof
        // that it was there after the sample; a stub's header read once serves to unwind (the
        // JVM keeps its stubs, adapters and interpreter for its life).
        if let Some(seen) = cached
            && seen.blob.method != 0
            && self.used.len() < MAX_CONFIRMED
        {
            self.used.insert(seen.blob.start);
        }
        if let Some(seen) = cached
            && (seen.confirmed_ns >= sample_ns || seen.blob.method == 0)
        {
            self.counters.cache_hits += 1;
            return Some(BlobAt {
                blob: seen.blob,
                exact: seen.first_ns <= sample_ns,
            });
        }
        // A blob known there is confirmed by reading its block again where it was (one read,
        // not the segment map walk); only a changed header needs the walk.
        let confirmed = cached
            .map(|seen| seen.blob)
            .filter(|known| self.reread(mem, known));
        let read = match confirmed {
            Some(blob) => Some(blob),
            None => self.read_blob_at(mem, pc, now_ns),
        };
        let Some(blob) = read else {
            self.counters.misses += 1;
            return None;
        };
        self.counters.blobs_read += 1;
        let seen = self.remember(blob, now_ns);
        Some(BlobAt {
            blob,
            exact: seen.first_ns <= sample_ns,
        })
    }

    /// The nmethod `blob` as reports show it: its method's name, and its inlining where its
    /// tables say where the scopes are. `None` for a blob that is not an nmethod, or whose
    /// method cannot be read.
    pub fn compiled(
        &mut self,
        mem: &mut dyn Memory,
        blob: &Blob,
        now_ns: u64,
    ) -> Option<Arc<CompiledCode>> {
        if blob.method == 0 {
            return None;
        }
        let key = (blob.start, blob.compile_id);
        if let Some(known) = self.compiled.get(&key) {
            return known.clone();
        }
        let read = self.read_compiled(mem, blob, now_ns).map(Arc::new);
        if self.compiled.len() >= MAX_CACHED_COMPILED {
            self.compiled.clear();
        }
        self.compiled.insert(key, read.clone());
        read
    }

    fn read_compiled(
        &mut self,
        mem: &mut dyn Memory,
        blob: &Blob,
        now_ns: u64,
    ) -> Option<CompiledCode> {
        let own = self.method(mem, blob.method, now_ns)?;
        let pc_map = self.read_pc_map(mem, blob, now_ns).unwrap_or_default();
        Some(CompiledCode {
            name: own.name.clone(),
            code_begin: blob.code_begin,
            pc_map,
        })
    }

    /// The pc map of an nmethod from its `PcDesc`s and scopes: a `PcDesc` at a pc describes
    /// the code up to it (a call's return address; a safepoint poll), so each becomes a point
    /// at the previous one's pc.
    fn read_pc_map(
        &mut self,
        mem: &mut dyn Memory,
        blob: &Blob,
        now_ns: u64,
    ) -> Option<Vec<crate::codemap::code::PcPoint>> {
        use vmscope_parse::hotspot::scopes::{pc_descs, scope_chain};
        let layout = self.layout.scopes.clone().ok()?;
        let coding = self.coding?;
        let mut header = vec![0u8; layout.read_size as usize];
        if !mem.read(blob.start, &mut header) {
            return None;
        }
        let regions = layout.regions(&header, blob.start, blob.size)?;
        let mut region = |range: std::ops::Range<u64>| -> Option<Vec<u8>> {
            let len = range.end - range.start;
            if len > MAX_DEBUG_INFO {
                return None;
            }
            let mut bytes = vec![0u8; len as usize];
            mem.read(range.start, &mut bytes).then_some(bytes)
        };
        let data = region(regions.data)?;
        let pcs = region(regions.pcs)?;
        let metadata = region(regions.metadata)?;
        let metadata: Vec<u64> = metadata
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
            .collect();
        let mut methods: HashMap<u32, Option<Arc<JavaMethod>>> = HashMap::new();
        let mut points: Vec<crate::codemap::code::PcPoint> = Vec::new();
        let mut previous = 0u64;
        for desc in pc_descs(&pcs, &layout.pc_desc) {
            let from = previous;
            previous = u64::from(desc.pc_offset);
            let Some(chain) = scope_chain(&data, desc.scope, coding) else {
                continue;
            };
            // Outermost (the compiled method's own) first.
            let named: Option<Vec<(Arc<JavaMethod>, u32)>> = chain
                .iter()
                .rev()
                .map(|scope| {
                    let method = methods
                        .entry(scope.method)
                        .or_insert_with(|| {
                            let method = *metadata.get((scope.method as usize).checked_sub(1)?)?;
                            self.method(mem, method, now_ns)
                        })
                        .clone()?;
                    Some((method, scope.bci.max(0) as u32))
                })
                .collect();
            let Some(named) = named else {
                continue;
            };
            let Some(((_, bcpc), inlined)) = named.split_first() else {
                continue;
            };
            let lines: Vec<(Arc<str>, u32)> = named
                .iter()
                .map(|(method, bci)| method.line_at(*bci))
                .collect();
            let point = crate::codemap::code::PcPoint {
                offset: from,
                bcpc: *bcpc,
                inlined: inlined
                    .iter()
                    .map(|(method, bci)| (method.name.to_string(), *bci))
                    .collect(),
                lines: if lines.iter().all(|(_, line)| *line == 0) {
                    Vec::new()
                } else {
                    lines
                },
            };
            match points.last_mut() {
                Some(last) if last.offset == point.offset => *last = point,
                Some(last)
                    if last.bcpc == point.bcpc
                        && last.inlined == point.inlined
                        && last.lines == point.lines => {}
                _ => points.push(point),
            }
        }
        Some(points)
    }

    /// The name of a stub blob (its `CodeBlob::_name`), read once: stubs are named by static
    /// strings of libjvm's.
    pub fn stub_name(&mut self, mem: &mut dyn Memory, name: u64) -> Option<Arc<str>> {
        if let Some(known) = self.stub_names.get(&name) {
            return known.clone();
        }
        let read: Option<Arc<str>> = read_c_string(mem, name, 128)
            .filter(|n| !n.is_empty())
            .map(Into::into);
        if self.stub_names.len() >= MAX_CACHED_METHODS {
            self.stub_names.clear();
        }
        self.stub_names.insert(name, read.clone());
        read
    }

    /// The method a `Method*` of this JVM names (from an interpreted frame's method slot).
    pub fn method(
        &mut self,
        mem: &mut dyn Memory,
        method: u64,
        now_ns: u64,
    ) -> Option<Arc<JavaMethod>> {
        if let Some((known, read_ns)) = self.methods.get(&method)
            && now_ns.saturating_sub(*read_ns) <= MAX_METHOD_AGE_NS
        {
            return known.clone();
        }
        let read = self.read_method(mem, method).map(Arc::new);
        if self.methods.len() >= MAX_CACHED_METHODS {
            self.methods.clear();
        }
        self.methods.insert(method, (read.clone(), now_ns));
        read
    }

    fn read_method(&self, mem: &mut dyn Memory, method: u64) -> Option<JavaMethod> {
        let m = &self.layout.method;
        let const_method = read_field(mem, method, m.const_method).filter(|&p| p != 0)?;
        let constants = read_field(mem, const_method, m.constants).filter(|&p| p != 0)?;
        let name_index = read_field(mem, const_method, m.name_index)?;
        let signature_index = read_field(mem, const_method, m.signature_index)?;
        let code_size = read_field(mem, const_method, m.code_size)?;
        let holder = read_field(mem, constants, m.pool_holder).filter(|&p| p != 0)?;
        let class_symbol = read_field(mem, holder, m.klass_name).filter(|&p| p != 0)?;
        let class = read_symbol(mem, m, class_symbol)?;
        let name_symbol = pool_symbol(mem, m, constants, name_index)?;
        let signature_symbol = pool_symbol(mem, m, constants, signature_index)?;
        let name = read_symbol(mem, m, name_symbol)?;
        let signature = read_symbol(mem, m, signature_symbol)?;
        let code_base = const_method + m.const_method_size;
        Some(JavaMethod {
            name: external_name(&class, &name, &signature).into(),
            code_base,
            code_size,
            lines: self.read_lines(mem, const_method, constants, code_base + code_size),
        })
    }

    /// A method's line number table (at `table_at`, after its bytecodes) and its class's
    /// source file, if it has a table and this JVM's tables say where.
    fn read_lines(
        &self,
        mem: &mut dyn Memory,
        const_method: u64,
        constants: u64,
        table_at: u64,
    ) -> Option<MethodLines> {
        let (lines, coding) = (self.layout.lines.as_ref().ok()?, self.coding?);
        let m = &self.layout.method;
        let flags = read_field(mem, const_method, lines.flags)?;
        if flags & lines.has_line_table == 0 {
            return None;
        }
        let table = read_line_table(mem, table_at, coding)?;
        let file = match read_field(mem, constants, lines.source_file_index)? {
            0 => Arc::from(""),
            index => {
                let symbol = pool_symbol(mem, m, constants, index)?;
                read_symbol(mem, m, symbol)?.into()
            }
        };
        Some(MethodLines { file, table })
    }

    /// Reads every blob of the code heaps now, block by block (one read each): the code a
    /// session finds when it starts is then known to have been there at its first samples,
    /// which [`CodeCache::blob_at`] would otherwise read only after them. Returns the blobs read;
    /// a block that cannot be read or contradicts itself ends its heap's scan.
    pub fn scan(&mut self, mem: &mut dyn Memory, now_ns: u64) -> usize {
        if now_ns.saturating_sub(self.heaps_read_ns) >= HEAPS_REFRESH_NS {
            self.read_heaps(mem, now_ns);
        }
        let (heap_layout, blob_layout) = (self.layout.heap, self.layout.blob);
        let read_size = heap_layout.block_header + blob_layout.read_size;
        let mut found = Vec::new();
        let mut blocks = 0;
        for heap in self.heaps.clone() {
            let mut block = heap.low;
            while block < heap.high && blocks < MAX_SCANNED_BLOCKS {
                blocks += 1;
                // The last block's header may end the heap's committed memory.
                let mut bytes = vec![0u8; read_size.min(heap.high - block) as usize];
                if !mem.read(block, &mut bytes) {
                    break;
                }
                let Some(segments) = code_heap::block_segments(&bytes, &heap_layout) else {
                    break;
                };
                match self.parse_block_at(mem, &heap, block, &bytes) {
                    Ok(blob) => found.push(blob),
                    Err(BlockError::Free | BlockError::Short) => {}
                    Err(BlockError::Inconsistent) => break,
                }
                let Some(next) = segments
                    .checked_shl(heap.log2_segment)
                    .and_then(|bytes| block.checked_add(bytes))
                else {
                    break;
                };
                block = next;
            }
        }
        for &blob in &found {
            self.remember(blob, now_ns);
        }
        self.counters.scanned += found.len() as u64;
        found.len()
    }

    /// Reads again, in one go, the blocks of the nmethods that stacks went through since the
    /// last call, and marks those still there confirmed at `now_ns`. Called as a batch of
    /// samples begins (every sample of it was taken before `now_ns`), it proves the nmethods
    /// the batch's stacks go through again were there after their samples with one round
    /// trip to the process, not one per nmethod. Returns the nmethods confirmed.
    pub fn confirm_used(&mut self, mem: &mut dyn Memory, now_ns: u64) -> usize {
        if self.used.is_empty() {
            return 0;
        }
        let known: Vec<Blob> = self
            .used
            .drain()
            .filter_map(|start| self.blobs.get(&start).map(|seen| seen.blob))
            .collect();
        let header = self.layout.heap.block_header;
        let size = (header + self.layout.blob.read_size) as usize;
        let mut buffers: Vec<Vec<u8>> = known.iter().map(|_| vec![0u8; size]).collect();
        let mut reads: Vec<(u64, &mut [u8])> = known
            .iter()
            .zip(buffers.iter_mut())
            .map(|(blob, buf)| (blob.start.saturating_sub(header), buf.as_mut_slice()))
            .collect();
        let filled = mem.read_many(&mut reads);
        drop(reads);
        let mut confirmed = 0;
        for ((blob, bytes), filled) in known.iter().zip(&buffers).zip(filled) {
            if filled
                && self.still_there(mem, blob, bytes)
                && let Some(seen) = self.blobs.get_mut(&blob.start)
            {
                seen.confirmed_ns = seen.confirmed_ns.max(now_ns);
                confirmed += 1;
            }
        }
        confirmed
    }

    /// Keeps `blob`, read at `now_ns`: confirmed if the same header was there, else new; the
    /// blobs it overlaps are gone (the heap has one blob per byte).
    fn remember(&mut self, blob: Blob, now_ns: u64) -> SeenBlob {
        let seen = match self.blobs.get(&blob.start) {
            Some(seen) if seen.blob == blob => SeenBlob {
                confirmed_ns: now_ns,
                ..*seen
            },
            _ => SeenBlob {
                blob,
                first_ns: now_ns,
                confirmed_ns: now_ns,
            },
        };
        if self.blobs.len() >= MAX_CACHED_BLOBS {
            self.blobs.clear();
        }
        let stale: Vec<u64> = self
            .blobs
            .range(..blob.start + blob.size)
            .rev()
            .take_while(|(_, s)| s.blob.start + s.blob.size > blob.start)
            .map(|(&s, _)| s)
            .collect();
        for s in stale {
            self.blobs.remove(&s);
        }
        self.blobs.insert(blob.start, seen);
        seen
    }

    /// Whether `known` is still there: its block read again (one read, not the segment map
    /// walk). The JVM clears a block's used flag when it frees it, and compile ids are never
    /// reused, so the same header read there again is the same blob, still there.
    fn reread(&mut self, mem: &mut dyn Memory, known: &Blob) -> bool {
        let header = self.layout.heap.block_header;
        let mut bytes = vec![0u8; (header + self.layout.blob.read_size) as usize];
        mem.read(known.start.saturating_sub(header), &mut bytes)
            && self.still_there(mem, known, &bytes)
    }

    /// Whether `bytes`, read at the block of `known`, hold `known` still.
    fn still_there(&mut self, mem: &mut dyn Memory, known: &Blob, bytes: &[u8]) -> bool {
        let Some(heap) = self.heaps.iter().find(|h| h.contains(known.start)).copied() else {
            return false;
        };
        let block = known.start.saturating_sub(self.layout.heap.block_header);
        self.parse_block_at(mem, &heap, block, bytes).ok() == Some(*known)
    }

    /// The blob in the block at `block` of `heap`, from `bytes` read there; nmethods told
    /// from other blobs by their name, read once per name.
    fn parse_block_at(
        &mut self,
        mem: &mut dyn Memory,
        heap: &Heap,
        block: u64,
        bytes: &[u8],
    ) -> Result<Blob, BlockError> {
        let names = &mut self.nmethod_names;
        let mut name_of = |name: u64| -> bool {
            *names.entry(name).or_insert_with(|| {
                read_c_string(mem, name, 64)
                    .is_some_and(|n| n == "nmethod" || n == "native nmethod")
            })
        };
        code_heap::parse_block(
            bytes,
            block,
            heap,
            &self.layout.heap,
            &self.layout.blob,
            &mut name_of,
        )
    }

    fn read_blob_at(&mut self, mem: &mut dyn Memory, pc: u64, now_ns: u64) -> Option<Blob> {
        let mut heap = self.heaps.iter().find(|h| h.contains(pc)).copied();
        if heap.is_none() && now_ns.saturating_sub(self.heaps_read_ns) >= HEAPS_REFRESH_NS {
            self.read_heaps(mem, now_ns);
            heap = self.heaps.iter().find(|h| h.contains(pc)).copied();
        }
        let heap = heap?;
        let mut segment = heap.segment_of(pc);
        let mut start = None;
        for _ in 0..MAX_WALK_STEPS {
            let first = segment.saturating_sub(SEGMAP_WINDOW - 1);
            let mut window = vec![0u8; (segment - first + 1) as usize];
            if !mem.read(heap.segmap + first, &mut window) {
                return None;
            }
            match code_heap::walk_segmap(&window, first, segment) {
                Walk::Start(s) => {
                    start = Some(s);
                    break;
                }
                Walk::Free => return None,
                Walk::Before(s) => segment = s,
            }
        }
        let block = heap.segment_start(start?);
        let (heap_layout, blob_layout) = (self.layout.heap, self.layout.blob);
        let mut bytes = vec![0u8; (heap_layout.block_header + blob_layout.read_size) as usize];
        if !mem.read(block, &mut bytes) {
            return None;
        }
        match self.parse_block_at(mem, &heap, block, &bytes) {
            Ok(blob) if blob.contains(pc) => Some(blob),
            Ok(_) | Err(BlockError::Free | BlockError::Inconsistent | BlockError::Short) => None,
        }
    }
}

/// One field of an object, read alone.
fn read_field(mem: &mut dyn Memory, object: u64, f: FieldAt) -> Option<u64> {
    let mut bytes = [0u8; 8];
    let at = object.checked_add(f.offset)?;
    if !mem.read(at, &mut bytes[..usize::from(f.width)]) {
        return None;
    }
    FieldAt { offset: 0, ..f }.get_u64(&bytes)
}

/// The `Symbol*` in slot `index` of a constant pool.
fn pool_symbol(mem: &mut dyn Memory, m: &MethodLayout, constants: u64, index: u64) -> Option<u64> {
    let slot = constants
        .checked_add(m.constant_pool_size)?
        .checked_add(index.checked_mul(8)?)?;
    mem.read_u64(slot).filter(|&p| p != 0)
}

/// A symbol's text (at most [`MAX_SYMBOL`] bytes).
fn read_symbol(mem: &mut dyn Memory, m: &MethodLayout, symbol: u64) -> Option<String> {
    let length = read_field(mem, symbol, m.symbol_length)?.min(MAX_SYMBOL);
    let mut bytes = vec![0u8; length as usize];
    mem.read(symbol.checked_add(m.symbol_body)?, &mut bytes)
        .then(|| String::from_utf8(bytes).ok())
        .flatten()
}

/// The line number table at `at`, read a page at a time (the first read a little of it) until
/// its terminator, at most [`MAX_LINE_TABLE`] bytes: the table's length is only known by
/// decoding it, and the memory after it may not be mapped.
fn read_line_table(mem: &mut dyn Memory, at: u64, coding: Unsigned5) -> Option<LineTable> {
    const PAGE: u64 = 4096;
    let page_end = |a: u64| (a | (PAGE - 1)).checked_add(1);
    let mut end = at.checked_add(LINE_TABLE_FIRST_READ)?.min(page_end(at)?);
    loop {
        let mut bytes = vec![0u8; (end - at) as usize];
        if !mem.read(at, &mut bytes) {
            return None;
        }
        match LineTable::parse(&bytes, coding) {
            Ok(table) => return Some(table),
            Err(LinesError::Invalid) => return None,
            Err(LinesError::Truncated) if end - at >= MAX_LINE_TABLE => return None,
            Err(LinesError::Truncated) => {
                end = page_end(end)?.min(at.checked_add(MAX_LINE_TABLE)?);
            }
        }
    }
}
