//! The optimising tier: recompiles hot methods, inlining their small monomorphic callees.
//!
//! A send is inlined when its receiver's class is known, either statically (the receiver is
//! `self`, and classes have no subclasses) or from the inline cache of the baseline code's
//! site (linked monomorphic), and the callee is a small bytecode method without sends of its
//! own (loops welcome; see [`Program::inlinable`](crate::program::Program::inlinable)). The
//! inlined body is guarded by a class check whose failure makes an ordinary send.
//!
//! Hotness is the method's call counter, which its code increments on entry; the tier looks
//! at counters at safepoints, so a method becomes optimised between two calls of the driver.
//! The optimised code is published as a load, every site is unlinked (so that callers relink
//! to the new code) and the baseline code, which nothing calls any more and no frame runs, is
//! freed. With `--opt`, methods are compiled by this tier in the first place (static
//! knowledge only, there is no feedback yet).

use crate::bytecode::Insn;
use crate::codezone::{EntryKind, Link};
use crate::jit::x64::{Inline, InlinePlan};
use crate::program::MethodId;
use crate::runtime::Vm;

impl Vm {
    /// What the optimising tier would inline in `method`, with the feedback of its current
    /// code's inline caches.
    pub(crate) fn inline_plan(&self, method: MethodId) -> InlinePlan {
        let m = self.prog.method(method);
        let current = self.methods[method.0 as usize]
            .code
            .and_then(|id| self.entries.get(id));
        let mut plan = InlinePlan::new();
        for (pc, insn, _) in m.info.instructions(&m.code) {
            let Insn::Send(sel, _) = insn else {
                continue;
            };
            let bcpc = u32::try_from(pc).unwrap_or(u32::MAX);
            let class = if m.info.self_sends[pc] {
                Some(m.class)
            } else {
                current.and_then(|e| {
                    e.sites.iter().find_map(|s| match s.link {
                        Link::Mono { class, .. }
                            if s.info.bcpc == bcpc && !s.info.arith && !s.info.inlined =>
                        {
                            Some(class)
                        }
                        _ => None,
                    })
                })
            };
            let Some(class) = class else {
                continue;
            };
            if let Some(callee) = self.prog.lookup(class, sel)
                && callee != method
                && self.prog.inlinable(callee)
            {
                plan.insert(bcpc, Inline { class, callee });
            }
        }
        plan
    }

    /// Recompiles, with inlining, the baseline methods called more than `hot_calls` times.
    /// Plans are made first, all with the feedback of the current inline caches; then the
    /// methods are compiled, every site unlinked once, and the baseline code freed.
    pub(crate) fn tier_up(&mut self) {
        if self.config.hot_calls == u64::MAX {
            return;
        }
        let mut plans = Vec::new();
        for i in 0..self.methods.len() {
            let method = MethodId(i as u32);
            let state = &self.methods[i];
            let Some(old) = state.code else {
                continue;
            };
            let baseline = matches!(
                self.entries.get(old).map(|e| &e.kind),
                Some(EntryKind::Method {
                    optimised: false,
                    ..
                })
            );
            if !baseline || state.tier_considered || self.calls_of(method) < self.config.hot_calls {
                continue;
            }
            self.methods[i].tier_considered = true;
            let plan = self.inline_plan(method);
            if !plan.is_empty() {
                plans.push((method, old, plan));
            }
        }
        let mut replaced = Vec::new();
        for (method, old, plan) in plans {
            match self.compile_code(method, true, false, &plan, None) {
                Ok(Some(new)) => {
                    self.methods[method.0 as usize].code = Some(new);
                    self.stats.optimised += 1;
                    replaced.push(old);
                }
                Ok(None) => {
                    // No room: compact at this safepoint, try again at the next one.
                    self.methods[method.0 as usize].tier_considered = false;
                    self.compaction_wanted = true;
                }
                Err(e) => eprintln!(
                    "jitvm: cannot optimise {}: {e}",
                    self.prog.method(method).name
                ),
            }
        }
        if !replaced.is_empty() {
            self.unlink_all();
            for old in replaced {
                self.free_entry(old);
            }
        }
    }
}
