//! Linking send sites: monomorphic inline cache, then closed PIC (up to 6 classes), then the
//! selector's open PIC; and unlinking every site, which compaction and the optimising tier do
//! before they free or move code.
//!
//! Invariant: a link only ever points to live code. Methods are freed only right after
//! `Vm::unlink_all` (which also frees every PIC), and a closed PIC is freed only when the
//! one site that uses it is relinked to its replacement.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::bytecode::SelId;
use crate::codezone::{EntryId, EntryKind, Link};
use crate::jit::encoding::{MOV_R11_IMM64, MOV_RAX_IMM64};
use crate::jit::x64::{self, CLOSED_PIC_MAX_CASES, OPEN_PIC_SLOTS};
use crate::program::ClassId;
use crate::runtime::Vm;

impl Vm {
    /// Unchecked entry of a method entry.
    fn nocheck(&self, id: EntryId) -> u64 {
        self.entries.get(id).map_or(self.addrs.send_miss, |e| {
            e.start + u64::from(e.nocheck_entry)
        })
    }

    /// Patches site `site` of entry `eid` to call `target` with class tag `tag`.
    fn patch_site(&mut self, eid: EntryId, site: usize, tag: u64, target: u64, link: Link) {
        let Some(e) = self.entries.get_mut(eid) else {
            return;
        };
        let s = &mut e.sites[site];
        s.link = link;
        let (tag_at, target_at) = (
            e.start + u64::from(s.info.tag_imm),
            e.start + u64::from(s.info.target_imm),
        );
        self.zone.patch_imm64(tag_at, MOV_RAX_IMM64, tag);
        self.zone.patch_imm64(target_at, MOV_R11_IMM64, target);
    }

    /// Relinks a site that missed for `class`, whose method is compiled as `target`.
    pub(crate) fn relink(&mut self, eid: EntryId, site: usize, class: ClassId, target: EntryId) {
        let Some(e) = self.entries.get(eid) else {
            return;
        };
        let (link, selector) = (e.sites[site].link, e.sites[site].info.selector);
        let mono = |vm: &mut Vm| {
            let entry = vm
                .entries
                .get(target)
                .map_or(vm.addrs.send_miss, |t| t.start + u64::from(t.check_entry));
            vm.patch_site(
                eid,
                site,
                u64::from(class.0),
                entry,
                Link::Mono { class, target },
            );
        };
        match link {
            Link::Unlinked => mono(self),
            Link::Mono { class: c0, .. } if c0 == class => mono(self),
            Link::Mono {
                class: c0,
                target: t0,
            } => match self.closed_pic(selector, vec![(c0, t0), (class, target)]) {
                Some(p) => self.link_to_pic(eid, site, p, Link::Closed(p)),
                None => mono(self),
            },
            Link::Closed(p) => {
                let mut cases = match self.entries.get(p).map(|e| &e.kind) {
                    Some(EntryKind::ClosedPic { cases, .. }) => cases.clone(),
                    _ => Vec::new(),
                };
                cases.retain(|&(c, _)| c != class);
                cases.push((class, target));
                let new = if cases.len() <= CLOSED_PIC_MAX_CASES {
                    self.closed_pic(selector, cases).map(Link::Closed)
                } else {
                    self.open_pic(selector).map(|o| {
                        for &(c, t) in &cases {
                            self.open_pic_add(o, c, t);
                        }
                        Link::Open(o)
                    })
                };
                match new {
                    Some(l @ (Link::Closed(q) | Link::Open(q))) => {
                        self.link_to_pic(eid, site, q, l);
                        // The old PIC served only this site, which no longer calls it.
                        self.free_entry(p);
                    }
                    _ => mono(self),
                }
            }
            Link::Open(o) => self.open_pic_add(o, class, target),
        }
    }

    fn link_to_pic(&mut self, eid: EntryId, site: usize, pic: EntryId, link: Link) {
        let start = self
            .entries
            .get(pic)
            .map_or(self.addrs.send_miss, |e| e.start);
        self.patch_site(eid, site, 0, start, link);
    }

    /// A new closed PIC for `cases`; `None` (and a compaction requested) if the zone is full.
    fn closed_pic(&mut self, selector: SelId, cases: Vec<(ClassId, EntryId)>) -> Option<EntryId> {
        let targets: Vec<(ClassId, u64)> =
            cases.iter().map(|&(c, t)| (c, self.nocheck(t))).collect();
        let code = x64::compile_closed_pic(&targets, &self.addrs).ok()?;
        let name = self.prog.selectors.name(selector).to_owned();
        let id = self.install_stub(EntryKind::ClosedPic { selector, cases }, name, &code);
        match id {
            Some(_) => self.stats.closed_pics += 1,
            None => self.compaction_wanted = true,
        }
        id
    }

    /// The open PIC of `selector`, made if needed.
    fn open_pic(&mut self, selector: SelId) -> Option<EntryId> {
        if let Some(&id) = self.open_pics.get(&selector) {
            return Some(id);
        }
        let table: Box<[AtomicU64]> = (0..2 * OPEN_PIC_SLOTS).map(|_| AtomicU64::new(0)).collect();
        let code = x64::compile_open_pic(table.as_ptr() as u64, &self.addrs).ok()?;
        let name = self.prog.selectors.name(selector).to_owned();
        let id = self.install_stub(EntryKind::OpenPic { selector, table }, name, &code);
        match id {
            Some(id) => {
                self.open_pics.insert(selector, id);
                self.stats.open_pics += 1;
            }
            None => self.compaction_wanted = true,
        }
        id
    }

    /// Adds (or replaces) a class in an open PIC's table: its first slot, else the next,
    /// else evicts the first.
    fn open_pic_add(&mut self, pic: EntryId, class: ClassId, target: EntryId) {
        let entry = self.nocheck(target);
        let Some(EntryKind::OpenPic { table, .. }) = self.entries.get(pic).map(|e| &e.kind) else {
            return;
        };
        let tag = u64::from(class.0);
        let first = x64::open_pic_slot(class);
        let slot = [first, (first + 1) % OPEN_PIC_SLOTS]
            .into_iter()
            .find(|&s| {
                matches!(table[2 * s].load(Ordering::Relaxed), 0)
                    || table[2 * s].load(Ordering::Relaxed) == tag
            })
            .unwrap_or(first);
        table[2 * slot + 1].store(entry, Ordering::Relaxed);
        table[2 * slot].store(tag, Ordering::Relaxed);
    }

    /// Resets every send site to the send-miss trampoline and frees every PIC. After this no
    /// generated code refers to a method's address, so methods can be freed and moved.
    pub(crate) fn unlink_all(&mut self) {
        let mut patches = Vec::new();
        let mut pics = Vec::new();
        for (id, e) in self.entries.iter() {
            match e.kind {
                EntryKind::ClosedPic { .. } | EntryKind::OpenPic { .. } => pics.push((e.start, id)),
                _ => {}
            }
            for (i, s) in e.sites.iter().enumerate() {
                if s.link != Link::Unlinked {
                    patches.push((id, i));
                }
            }
        }
        let miss = self.addrs.send_miss;
        for (id, i) in patches {
            self.patch_site(id, i, 0, miss, Link::Unlinked);
        }
        pics.sort();
        for (_, id) in pics {
            self.free_entry(id);
        }
        self.open_pics.clear();
    }
}
