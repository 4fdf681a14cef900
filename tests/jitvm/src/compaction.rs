//! Code compaction, after Cog's: at a safepoint (no generated frame exists), unlink every
//! send site, free every PIC, the decoys and the methods not called since the last compaction
//! (or every method, if that does not leave a quarter of the zone free), slide the live
//! entries down over the holes with memcpy, lower CCFree, and publish each free and move
//! before generated code runs again. New code then goes into the space given back, so
//! addresses that held one method soon hold another.
//!
//! Moving is safe because generated code is position independent except for send sites, and
//! those are all unlinked (they call the send-miss trampoline, which does not move, by
//! absolute address). The decoys of the compaction workload are compiled right after a
//! compaction at the old start addresses of methods, so that code that never runs sits where
//! hot code was. Each compaction is published as an `INTERVAL_KIND_CODE_COMPACTION` interval.

use vmscope_proto::v1::IntervalKind;

use crate::codezone::{ALIGN, EntryId, EntryKind};
use crate::jit::x64::InlinePlan;
use crate::program::MethodId;
use crate::runtime::Vm;

/// Decoys placed at old method addresses per compaction, at most.
const DECOY_TARGETS: usize = 3;

impl Vm {
    /// Compacts the code zone, freeing cold methods.
    pub fn compact(&mut self) {
        self.compact_with(false);
    }

    /// Compacts the code zone, freeing every method.
    pub fn compact_all(&mut self) {
        self.compact_with(true);
    }

    /// A compaction, published as an interval of its own.
    fn compact_with(&mut self, everything: bool) {
        let id = self.stats.compactions;
        let cost = self.interval(IntervalKind::CodeCompaction, id, |vm| {
            vm.compact_now(everything);
        });
        self.stats.compaction_ns += cost.ns;
    }

    fn compact_now(&mut self, everything: bool) {
        self.compaction_wanted = false;
        let old_method_starts: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| matches!(e.kind, EntryKind::Method { decoy: false, .. }))
            .map(|(_, e)| e.start)
            .collect();
        self.unlink_all();

        let counters: Vec<u64> = (0..self.methods.len())
            .map(|m| self.calls_of(MethodId(m as u32)))
            .collect();
        let mut victims: Vec<(u64, EntryId)> = Vec::new();
        let mut live_bytes = 0u64;
        for (id, e) in self.entries.iter() {
            let free = match e.kind {
                EntryKind::Method { decoy: true, .. } => true,
                EntryKind::Method { method, .. } => {
                    let m = method.0 as usize;
                    everything
                        || counters[m] == self.counters_then[m]
                        || self.methods[m].code != Some(id)
                }
                _ => false,
            };
            if free {
                victims.push((e.start, id));
            } else {
                live_bytes += e.size.next_multiple_of(ALIGN);
            }
        }
        if !everything && (live_bytes as usize) > self.zone.size() * 3 / 4 {
            return self.compact_with(true);
        }
        victims.sort();
        for (_, id) in victims {
            self.free_entry(id);
        }

        let mut dest = self.glue_end;
        for id in self.entries.in_address_order() {
            let Some(e) = self.entries.get(id) else {
                continue;
            };
            let (start, size) = (e.start, e.size);
            let method = match e.kind {
                EntryKind::Method {
                    method,
                    decoy: false,
                    ..
                } => Some(method),
                _ => None,
            };
            if start < self.glue_end {
                continue;
            }
            if start != dest {
                self.zone
                    .move_code(start, dest, usize::try_from(size).unwrap_or(0));
                self.entries.relocate(id, dest);
                self.publish_move(start, dest);
                self.stats.moves += 1;
                // A domain event of the VM's own: the method's code moved, named by the
                // method's id, which stays the method's however often its code moves.
                if let Some(method) = method {
                    self.publish_domain_event("method moved", u64::from(method.0) + 1);
                    self.stats.method_moves += 1;
                }
            }
            dest = (dest + size).next_multiple_of(ALIGN);
        }
        self.zone.shrink_to(dest);
        self.publish_zone();
        self.counters_then = counters;
        for m in &mut self.methods {
            m.tier_considered = m.tier_considered && m.code.is_some();
        }
        self.stats.compactions += 1;
        if self.config.decoys {
            self.place_decoys(old_method_starts);
        }
    }

    /// Compiles decoys (never run) so that some start exactly where methods started before
    /// the compaction: a filler padded up to the old address, then a decoy there.
    fn place_decoys(&mut self, mut old_starts: Vec<u64>) {
        old_starts.sort_unstable();
        old_starts.dedup();
        let free = self.zone.free_start();
        let targets: Vec<u64> = old_starts
            .into_iter()
            .filter(|&a| a >= free)
            .take(DECOY_TARGETS)
            .collect();
        for a in targets {
            let here = self.zone.free_start();
            if a < here {
                continue;
            }
            if a > here {
                let gap = usize::try_from(a - here).unwrap_or(usize::MAX);
                if !matches!(self.decoy(Some(gap)), Some(true)) {
                    continue;
                }
            }
            if self.zone.free_start() == a {
                self.decoy(None);
            }
        }
        // And one more, wherever it lands.
        self.decoy(None);
    }

    /// Compiles the next decoy; `Some(true)` if it was placed.
    fn decoy(&mut self, pad_to: Option<usize>) -> Option<bool> {
        let decoys = crate::benchmarks::decoy_methods(&self.prog);
        if decoys.is_empty() {
            return None;
        }
        // Fillers are the smallest decoy; the others take turns.
        let m = match pad_to {
            Some(_) => decoys[0],
            None => {
                self.next_decoy += 1;
                decoys[(self.next_decoy - 1) % decoys.len()]
            }
        };
        match self.compile_code(m, false, true, &InlinePlan::new(), pad_to) {
            Ok(Some(_)) => {
                self.stats.decoys += 1;
                Some(true)
            }
            _ => Some(false),
        }
    }
}
