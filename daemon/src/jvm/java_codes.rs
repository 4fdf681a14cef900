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

use super::code_cache::CompiledCode;
use crate::{
    codemap::code::{Code, CodeSource, CodeStore},
    vocab::CodeId,
};
use vmscope_model::CodeKind;

/// Most nmethods whose codes are kept; the cache starts afresh when it fills up.
pub const MAX_JAVA_CODES: usize = 16_384;

/// What a code was made from, kept alive while it is a key (so that its address is not
/// another's): an nmethod as the unwinder read it, or an interpreted method's name.
#[derive(Debug)]
#[expect(dead_code, reason = "held alive as the key's owner, never read")]
enum Source {
    Compiled(Arc<CompiledCode>),
    Interpreted(Arc<str>),
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

    /// The id of the code that names the interpreted frames of `method`.
    pub fn interpreted(
        &mut self,
        store: &CodeStore,
        pid: u32,
        owner: u32,
        method: &Arc<str>,
    ) -> Option<CodeId> {
        let key = (pid, Arc::as_ptr(method) as *const u8 as usize);
        self.code(store, key, owner, || {
            let code = Code::named(CodeKind::Method, &**method, CodeSource::HotSpot);
            (code, Source::Interpreted(method.clone()))
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
