//! The codes that HotSpot's frames are named by, interned once per nmethod, interpreted
//! method or stub.
//!
//! An nmethod's code carries its whole pc map (hundreds of points for a large method): hashing
//! it into the code store for each frame of each sample would cost more than the unwinding,
//! and even an interpreted method's name would be hashed and the store locked per frame.
//! [`JavaCodes`] keeps the id it was given, with the code itself, and checks that the store
//! still holds that very code before using the id again (the store lets go of codes that no
//! session refers to, and may give their ids to others).

use std::{collections::HashMap, sync::Arc};

use super::code_cache::{CompiledCode, JavaMethod};
use crate::{
    codemap::code::{Code, CodeSource, CodeStore, PcPoint},
    vocab::CodeId,
};
use vmscope_model::CodeKind;

/// Most nmethods whose codes are kept; the cache starts afresh when it fills up.
pub const MAX_JAVA_CODES: usize = 16_384;

/// What names a Java frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JavaName {
    /// An interpreted frame.
    Interpreted {
        /// The method being interpreted.
        method: Arc<JavaMethod>,
        /// The bytecode index its frame last saved (for the leaf frame, the one of the last
        /// call or safepoint: the interpreter keeps the current one in a register).
        bci: Option<u32>,
    },
    /// A compiled frame whose nmethod held its pc at the sample's time.
    Compiled(Arc<CompiledCode>),
    /// A stub's frame, by its blob's name (`StubRoutines (1)`, the call stub).
    Stub(Arc<str>),
}

impl JavaName {
    /// The address of what the name was made from: one code per nmethod, interpreted method
    /// or stub name, whatever the bci.
    fn address(&self) -> usize {
        match self {
            JavaName::Interpreted { method, .. } => Arc::as_ptr(method) as usize,
            JavaName::Compiled(compiled) => Arc::as_ptr(compiled) as usize,
            JavaName::Stub(name) => Arc::as_ptr(name) as *const u8 as usize,
        }
    }

    /// The code that names its frames: an nmethod's with its pc map (inlined methods and
    /// lines); an interpreted method's, whose offsets are bytecode indices cut into ranges by
    /// its line number table (`5->12 Callers.java:20`); a stub's, by name.
    fn code(&self) -> Code {
        match self {
            JavaName::Compiled(compiled) => Code {
                pc_map: compiled.pc_map.clone(),
                ..Code::named(CodeKind::Method, &*compiled.name, CodeSource::HotSpot)
            },
            JavaName::Interpreted { method, .. } => Code {
                pc_map: interpreted_pc_map(method),
                ..Code::named(CodeKind::Method, &*method.name, CodeSource::HotSpot)
            },
            JavaName::Stub(name) => Code::named(CodeKind::Stub, &**name, CodeSource::HotSpot),
        }
    }
}

/// A code as interned: the name it was made from (kept alive while it is a key, so that its
/// address is not another's), its id, and the code the store holds under it.
type Interned = (JavaName, CodeId, Arc<Code>);

/// Interned codes of Java frames, by process and what named them.
#[derive(Debug, Default)]
pub struct JavaCodes {
    /// (pid, [`JavaName::address`]) -> its id and code.
    codes: HashMap<(u32, usize), Interned>,
}

impl JavaCodes {
    /// The id in `store` of the code that names frames named `name`, interned for `owner`
    /// when it is not held.
    pub fn code(
        &mut self,
        store: &CodeStore,
        pid: u32,
        owner: u32,
        name: &JavaName,
    ) -> Option<CodeId> {
        let key = (pid, name.address());
        if let Some((_, id, code)) = self.codes.get(&key)
            && store.get(*id).is_some_and(|held| Arc::ptr_eq(&held, code))
        {
            return Some(*id);
        }
        let id = store.intern(name.code(), owner).ok()?;
        let held = store.get(id)?;
        if self.codes.len() >= MAX_JAVA_CODES {
            self.codes.clear();
        }
        self.codes.insert(key, (name.clone(), id, held));
        Some(id)
    }

    /// Keeps only the processes `keep` says, as the process table forgets idle ones.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.codes.retain(|&(pid, _), _| keep(pid));
    }
}

/// An interpreted method's pc map, whose offsets are bytecode indices: a point where each
/// line's bytecodes begin. Empty without a line number table.
fn interpreted_pc_map(method: &JavaMethod) -> Vec<PcPoint> {
    let Some(lines) = &method.lines else {
        return Vec::new();
    };
    let mut starts: Vec<(u32, u32)> = lines.table.pairs().to_vec();
    starts.sort_unstable();
    starts.dedup_by_key(|&mut (bci, _)| bci);
    starts
        .into_iter()
        .filter(|&(_, line)| line > 0)
        .map(|(bci, line)| PcPoint {
            offset: u64::from(bci),
            bcpc: bci,
            inlined: Vec::new(),
            lines: vec![(lines.file.clone(), line)],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use vmscope_parse::hotspot::{compressed::Unsigned5, lines};

    use super::*;
    use crate::jvm::code_cache::MethodLines;

    #[test]
    fn interpreted_frames_are_cut_by_their_lines() {
        let coding = Unsigned5::for_jdk(17);
        let table =
            lines::LineTable::parse(&lines::write(&[(0, 7), (4, 8), (9, 7)], coding), coding)
                .unwrap();
        let method = Arc::new(JavaMethod {
            name: "long Callers.hot(long)".into(),
            code_base: 0x1000,
            code_size: 20,
            lines: Some(MethodLines {
                file: "Callers.java".into(),
                table,
            }),
        });
        let store = CodeStore::new();
        let mut codes = JavaCodes::default();
        let name = |method: &Arc<JavaMethod>, bci| JavaName::Interpreted {
            method: method.clone(),
            bci,
        };
        let id = codes.code(&store, 1, 0, &name(&method, Some(3))).unwrap();
        assert_eq!(
            codes.code(&store, 1, 0, &name(&method, Some(9))),
            Some(id),
            "interned once"
        );
        let code = store.get(id).unwrap();
        let label = |bci| code.range_label(bci).unwrap().1;
        assert_eq!(label(0), "1->5 Callers.java:7");
        assert_eq!(label(5), "5->10 Callers.java:8");
        assert_eq!(label(19), "10->end Callers.java:7");
        let bare = Arc::new(JavaMethod {
            lines: None,
            ..(*method).clone()
        });
        let id = codes.code(&store, 1, 0, &name(&bare, None)).unwrap();
        assert_eq!(
            store.get(id).unwrap().range_label(5),
            None,
            "no table, no ranges"
        );
    }
}
