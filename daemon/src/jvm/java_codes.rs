//! The codes that HotSpot's frames are named by, interned once per nmethod or interpreted
//! method.
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

/// What a code was made from, kept alive while it is a key (so that its address is not
/// another's): an nmethod as the unwinder read it, or an interpreted method.
#[derive(Debug)]
#[expect(dead_code, reason = "held alive as the key's owner, never read")]
enum Source {
    Compiled(Arc<CompiledCode>),
    Interpreted(Arc<JavaMethod>),
    Stub(Arc<str>),
}

/// A code as interned: what it was made from, its id, and the code the store holds under it.
type Interned = (Source, CodeId, Arc<Code>);

/// Interned codes of nmethods, by process and nmethod.
#[derive(Debug, Default)]
pub struct JavaCodes {
    /// (pid, the address of what the code was made from) -> its id and code.
    codes: HashMap<(u32, usize), Interned>,
}

impl JavaCodes {
    /// The id of `compiled`'s code in `store`, interned for `owner` when it is not held.
    pub fn compiled(
        &mut self,
        store: &CodeStore,
        pid: u32,
        owner: u32,
        compiled: &Arc<CompiledCode>,
    ) -> Option<CodeId> {
        let key = (pid, Arc::as_ptr(compiled) as usize);
        self.code(store, key, owner, || {
            let code = Code {
                pc_map: compiled.pc_map.clone(),
                ..Code::named(CodeKind::Method, &*compiled.name, CodeSource::HotSpot)
            };
            (code, Source::Compiled(compiled.clone()))
        })
    }

    /// The id of the code that names the interpreted frames of `method`: its offsets are
    /// bytecode indices, cut into ranges by its line number table (`5->12 Callers.java:20`)
    /// where it has one.
    pub fn interpreted(
        &mut self,
        store: &CodeStore,
        pid: u32,
        owner: u32,
        method: &Arc<JavaMethod>,
    ) -> Option<CodeId> {
        let key = (pid, Arc::as_ptr(method) as usize);
        self.code(store, key, owner, || {
            let code = Code {
                pc_map: interpreted_pc_map(method),
                ..Code::named(CodeKind::Method, &*method.name, CodeSource::HotSpot)
            };
            (code, Source::Interpreted(method.clone()))
        })
    }

    /// The id of the code that names a stub's frames (by its blob's name).
    pub fn stub(
        &mut self,
        store: &CodeStore,
        pid: u32,
        owner: u32,
        name: &Arc<str>,
    ) -> Option<CodeId> {
        let key = (pid, Arc::as_ptr(name) as *const u8 as usize);
        self.code(store, key, owner, || {
            let code = Code::named(CodeKind::Stub, &**name, CodeSource::HotSpot);
            (code, Source::Stub(name.clone()))
        })
    }

    fn code(
        &mut self,
        store: &CodeStore,
        key: (u32, usize),
        owner: u32,
        make: impl FnOnce() -> (Code, Source),
    ) -> Option<CodeId> {
        if let Some((_, id, code)) = self.codes.get(&key)
            && store.get(*id).is_some_and(|held| Arc::ptr_eq(&held, code))
        {
            return Some(*id);
        }
        let (code, source) = make();
        let id = store.intern(code, owner).ok()?;
        let held = store.get(id)?;
        if self.codes.len() >= MAX_JAVA_CODES {
            self.codes.clear();
        }
        self.codes.insert(key, (source, id, held));
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
        let id = codes.interpreted(&store, 1, 0, &method).unwrap();
        assert_eq!(
            codes.interpreted(&store, 1, 0, &method),
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
        let id = codes.interpreted(&store, 1, 0, &bare).unwrap();
        assert_eq!(
            store.get(id).unwrap().range_label(5),
            None,
            "no table, no ranges"
        );
    }
}
