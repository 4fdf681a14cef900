//! The codes that HotSpot's compiled frames are named by, interned once per nmethod.
//!
//! An nmethod's code carries its whole pc map (hundreds of points for a large method): hashing
//! it into the code store for each frame of each sample would cost more than the unwinding.
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

/// An nmethod's code as interned: the nmethod (kept alive as the key's address), its id, and
/// the code the store holds under it.
type Interned = (Arc<CompiledCode>, CodeId, Arc<Code>);

/// Interned codes of nmethods, by process and nmethod.
#[derive(Debug, Default)]
pub struct JavaCodes {
    /// (pid, the nmethod as the unwinder read it) -> its id and code. The key holds the
    /// `CompiledCode` alive, so that its address is not another's while it is a key.
    codes: HashMap<(u32, usize), Interned>,
}

impl JavaCodes {
    /// The id of `compiled`'s code in `store`, interned for `owner` when it is not held.
    pub fn code(
        &mut self,
        store: &CodeStore,
        pid: u32,
        owner: u32,
        compiled: &Arc<CompiledCode>,
    ) -> Option<CodeId> {
        let key = (pid, Arc::as_ptr(compiled) as usize);
        if let Some((_, id, code)) = self.codes.get(&key)
            && store.get(*id).is_some_and(|held| Arc::ptr_eq(&held, code))
        {
            return Some(*id);
        }
        let code = Code {
            pc_map: compiled.pc_map.clone(),
            ..Code::named(CodeKind::Method, &*compiled.name, CodeSource::HotSpot)
        };
        let id = store.intern(code, owner).ok()?;
        let held = store.get(id)?;
        if self.codes.len() >= MAX_JAVA_CODES {
            self.codes.clear();
        }
        self.codes.insert(key, (compiled.clone(), id, held));
        Some(id)
    }

    /// Keeps only the processes `keep` says, as the process table forgets idle ones.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.codes.retain(|&(pid, _), _| keep(pid));
    }
}
