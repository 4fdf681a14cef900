//! What a code map says about one piece of generated code, wherever it sits.
//!
//! A [`Code`] holds a name, a kind, and positions *relative to the code's start*: the
//! machine-code pc to bytecode pc map (with inline stacks) from a VM, or source positions from
//! jitdump debug info. Relative positions make a method that moves (compaction, GC) the same
//! `Code`: the [`CodeStore`] interns descriptions, so samples of a method aggregate across all
//! the addresses it lived at, and memory grows with distinct methods, not with moves. How
//! reports label the ranges between positions is [`super::ranges`]' business.

use std::{
    hash::{BuildHasher, Hash},
    sync::{Arc, RwLock},
};

use hashbrown::HashTable;

use vmscope_proto::v1::CodeKind;

use super::ranges::MergedRanges;

/// Index of an interned [`Code`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeId(pub u32);

/// Which code map described the code.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CodeSource {
    /// Published by the VM (gRPC or code map file); the VM's name.
    Vm(String),
    /// A jitdump file.
    Jitdump,
    /// A perf map.
    PerfMap,
}

impl CodeSource {
    /// As reports name it.
    pub fn label(&self) -> &'static str {
        match self {
            CodeSource::Vm(_) => "vm",
            CodeSource::Jitdump => "jitdump",
            CodeSource::PerfMap => "perf map",
        }
    }
}

/// One mapped machine-code pc, relative to the code's start.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PcPoint {
    /// Offset of the machine-code pc from the code's start.
    pub offset: u64,
    /// Bytecode pc, 0-based.
    pub bcpc: u32,
    /// Inlined methods the code from here to the next point came from, outermost first, with
    /// their bytecode pcs; empty for the method's own code.
    pub inlined: Vec<(String, u32)>,
}

/// One source position (jitdump debug info), relative to the code's start.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SourcePoint {
    /// Offset of the first machine-code byte at this position.
    pub offset: u64,
    /// File name.
    pub file: Arc<str>,
    /// Line, 1-based.
    pub line: u32,
    /// Column (jitdump's discriminator, which V8 uses for the column).
    pub column: u32,
}

/// A piece of generated code, as its code map described it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Code {
    /// What kind of code it is.
    pub kind: CodeKind,
    /// Its name.
    pub name: String,
    /// The code map that described it.
    pub source: CodeSource,
    /// Mapped pcs, sorted by offset (empty when the map has none).
    pub pc_map: Vec<PcPoint>,
    /// Source positions, sorted by offset (empty when the map has none).
    pub lines: Vec<SourcePoint>,
    /// Where its ranges begin once adjacent ranges with equal labels are merged: derived from
    /// the points on first use, ignored by comparisons. Leave it `Default`.
    pub merged_ranges: MergedRanges,
}

impl Code {
    /// Code known by name only.
    pub fn named(kind: CodeKind, name: impl Into<String>, source: CodeSource) -> Code {
        Code {
            kind,
            name: name.into(),
            source,
            pc_map: Vec::new(),
            lines: Vec::new(),
            merged_ranges: MergedRanges::default(),
        }
    }

    /// Whether the code carries ranges (bytecode or source) to report under it.
    pub fn has_ranges(&self) -> bool {
        !self.pc_map.is_empty() || !self.lines.is_empty()
    }

    /// The method an offset's time belongs to: the innermost inlined method there, or the
    /// code's own name.
    pub fn attributed_method(&self, offset: u64) -> &str {
        let i = self.pc_map.partition_point(|p| p.offset <= offset);
        i.checked_sub(1)
            .and_then(|k| self.pc_map[k].inlined.last())
            .map_or(self.name.as_str(), |(method, _)| method.as_str())
    }

    /// Whether the code has inlined methods (optimised code).
    pub fn is_optimised(&self) -> bool {
        self.pc_map.iter().any(|p| !p.inlined.is_empty())
    }

    /// About how many bytes the code takes in the store, for its budget.
    pub fn approx_bytes(&self) -> usize {
        let inlined: usize = self
            .pc_map
            .iter()
            .flat_map(|p| &p.inlined)
            .map(|(name, _)| size_of::<(String, u32)>() + name.len())
            .sum();
        // A file name is shared by the points that name it; count it once per run of them.
        let files: usize = self
            .lines
            .iter()
            .enumerate()
            .filter(|(i, p)| *i == 0 || !Arc::ptr_eq(&self.lines[i - 1].file, &p.file))
            .map(|(_, p)| p.file.len())
            .sum();
        let vm_name = match &self.source {
            CodeSource::Vm(name) => name.len(),
            _ => 0,
        };
        size_of::<Code>()
            + size_of::<Arc<Code>>()
            + size_of::<CodeId>()
            + self.name.len()
            + vm_name
            + self.pc_map.len() * size_of::<PcPoint>()
            + inlined
            + self.lines.len() * size_of::<SourcePoint>()
            + files
            + MergedRanges::max_bytes(self)
    }
}

/// The default budget of a [`CodeStore`]: room for millions of named methods, or tens of
/// thousands with big pc maps, far beyond what real VMs publish, yet bounded so that a
/// publisher that never repeats itself cannot exhaust the daemon's memory.
pub const DEFAULT_BUDGET_BYTES: usize = 1 << 30;

/// A new code did not fit in the store's budget; it is refused (its samples stay unnamed
/// generated code), and codes already known are still found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the code store is full ({used_mib} MiB of {budget_mib} MiB; vmscoped --code-store-mib): \
     new code is not named"
)]
pub struct StoreFull {
    /// MiB in use.
    pub used_mib: usize,
    /// The budget in MiB.
    pub budget_mib: usize,
}

/// Interned code descriptions, shared by the session manager (which interns) and profile
/// builders (which read). Codes stay for the daemon's life (sessions' counts refer to them),
/// within a budget of bytes.
#[derive(Debug)]
pub struct CodeStore {
    inner: RwLock<Store>,
    budget_bytes: usize,
}

impl Default for CodeStore {
    fn default() -> Self {
        CodeStore::with_budget(DEFAULT_BUDGET_BYTES)
    }
}

#[derive(Debug, Default)]
struct Store {
    codes: Vec<Arc<Code>>,
    bytes: usize,
    /// Ids by the hash of their code; equality is checked against `codes`.
    ids: HashTable<CodeId>,
    hasher: foldhash::fast::RandomState,
}

impl CodeStore {
    /// An empty store with the default budget.
    pub fn new() -> CodeStore {
        CodeStore::default()
    }

    /// An empty store that holds at most about `budget_bytes` of codes.
    pub fn with_budget(budget_bytes: usize) -> CodeStore {
        CodeStore {
            inner: RwLock::default(),
            budget_bytes,
        }
    }

    /// The id of `code`, interning it on first sight: one hash, no clone. A new code that
    /// does not fit in the budget is refused.
    pub fn intern(&self, code: Code) -> Result<CodeId, StoreFull> {
        let mut store = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let Store {
            codes,
            bytes,
            ids,
            hasher,
        } = &mut *store;
        let hash = hasher.hash_one(&code);
        if let Some(&id) = ids.find(hash, |id| *codes[id.0 as usize] == code) {
            return Ok(id);
        }
        let size = code.approx_bytes();
        let full = || StoreFull {
            used_mib: *bytes >> 20,
            budget_mib: self.budget_bytes >> 20,
        };
        if bytes.saturating_add(size) > self.budget_bytes {
            return Err(full());
        }
        let id = CodeId(u32::try_from(codes.len()).map_err(|_| full())?);
        *bytes += size;
        codes.push(Arc::new(code));
        ids.insert_unique(hash, id, |id| hasher.hash_one(&*codes[id.0 as usize]));
        Ok(id)
    }

    /// About how many bytes the codes take.
    pub fn bytes(&self) -> usize {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).bytes
    }

    /// An interned code.
    pub fn get(&self, id: CodeId) -> Option<Arc<Code>> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .codes
            .get(id.0 as usize)
            .cloned()
    }

    /// Number of distinct codes.
    pub fn len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .codes
            .len()
    }

    /// Whether nothing was interned.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn method(points: &[(u64, u32)]) -> Code {
        Code {
            pc_map: points
                .iter()
                .map(|&(offset, bcpc)| PcPoint {
                    offset,
                    bcpc,
                    inlined: Vec::new(),
                })
                .collect(),
            ..Code::named(
                CodeKind::Method,
                "Integer>>benchFib",
                CodeSource::Vm("t".into()),
            )
        }
    }

    #[test]
    fn inlined_time_goes_to_the_innermost_method() {
        let mut code = method(&[(0x10, 3), (0x20, 9), (0x30, 12)]);
        code.pc_map[0].inlined = vec![("Inline>>heavy".into(), 4)];
        code.pc_map[1].inlined = vec![("Inline>>light".into(), 2), ("SmallInteger>>+".into(), 0)];
        assert!(code.is_optimised());
        assert_eq!(code.attributed_method(0x5), "Integer>>benchFib");
        assert_eq!(code.attributed_method(0x15), "Inline>>heavy");
        assert_eq!(code.attributed_method(0x25), "SmallInteger>>+");
        assert_eq!(code.attributed_method(0x35), "Integer>>benchFib");
    }

    #[test]
    fn the_same_description_is_one_code() {
        let store = CodeStore::new();
        let a = store.intern(method(&[(0x10, 1)])).unwrap();
        let b = store.intern(method(&[(0x10, 1)])).unwrap();
        let c = store.intern(method(&[(0x11, 1)])).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(store.len(), 2);
        assert_eq!(store.get(c).unwrap().pc_map[0].offset, 0x11);
    }

    #[test]
    fn a_full_store_refuses_new_codes_and_still_finds_known_ones() {
        let one = method(&[(0x10, 1)]).approx_bytes();
        let store = CodeStore::with_budget(2 * one + one / 2);
        let a = store.intern(method(&[(0x10, 1)])).unwrap();
        store.intern(method(&[(0x11, 1)])).unwrap();
        let err = store.intern(method(&[(0x12, 1)])).unwrap_err();
        assert!(err.to_string().contains("code store is full"), "{err}");
        assert_eq!(
            store.intern(method(&[(0x10, 1)])),
            Ok(a),
            "known codes are found"
        );
        assert_eq!((store.len(), store.bytes()), (2, 2 * one));
    }
}
