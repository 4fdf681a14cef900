//! The code zone: one read-write-execute mapping, bump-allocated from the start like Cog's
//! machine code zone, and the table of what lives where.
//!
//! Layout: the trampolines and the enilopmart at `start` (CogCode), then methods and PICs in
//! allocation order up to `free_start` (CCFree), then unused space up to `end` (CCEnd). Freed
//! code stays where it is, as a hole, until a compaction slides the live entries down over the
//! holes and lowers `free_start`; new code always goes at `free_start`.
//!
//! Every access to the mapping is here, bounds-checked: writes of new code, patches of `imm64`
//! operands (checked against the instruction they belong to), moves, and `int3` fills of space
//! that no longer holds code.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use crate::bytecode::SelId;
use crate::jit::encoding::INT3;
use crate::jit::{MapEntry, SiteInfo};
use crate::program::{ClassId, MethodId};

/// Alignment of entries: a cache line, so that code aligned within an entry (loop heads, see
/// [`crate::jit::x64::LOOP_ALIGN`]) stays aligned in the zone wherever compaction moves it. With
/// 16, two copies of the same loop ran at different speeds depending on where they fell (one
/// range of `Inline>>light` took 3.9 times its share), and the inline workload's 70/30 split by
/// construction measured 66/34.
pub const ALIGN: u64 = 64;

/// The executable mapping.
#[derive(Debug)]
pub struct CodeZone {
    base: NonNull<u8>,
    size: usize,
    /// Offset of CCFree.
    free: usize,
}

impl CodeZone {
    /// Maps a zone of `size` bytes (rounded up to pages), filled with `int3`.
    pub fn new(size: usize) -> io::Result<CodeZone> {
        let size = size.div_ceil(4096) * 4096;
        // SAFETY: a fresh private anonymous mapping that only this CodeZone refers to, unmapped
        // in Drop. Writable and executable at once, like Cog's zone: code is patched in place.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        let mut z = CodeZone {
            base,
            size,
            free: 0,
        };
        z.fill_range(0, size);
        Ok(z)
    }

    /// CogCode: the first address.
    pub fn start(&self) -> u64 {
        self.base.as_ptr() as u64
    }

    /// CCEnd: the address after the last byte.
    pub fn end(&self) -> u64 {
        self.start() + self.size as u64
    }

    /// CCFree: the start of the unused part.
    pub fn free_start(&self) -> u64 {
        self.start() + self.free as u64
    }

    /// Bytes left after CCFree.
    pub fn free_bytes(&self) -> usize {
        self.size - self.free
    }

    /// Size of the zone.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Reserves `len` bytes at CCFree ([`ALIGN`]-aligned); `None` if they do not fit.
    pub fn alloc(&mut self, len: usize) -> Option<u64> {
        let at = self.free;
        let end = at.checked_add(len)?.next_multiple_of(ALIGN as usize);
        if end > self.size {
            return None;
        }
        self.free = end;
        Some(self.start() + at as u64)
    }

    /// Offset of `[addr, addr + len)` in the allocated part, or panics: a caller computing an
    /// address outside its own code is a VM bug that must not become a wild write.
    fn offset_of(&self, addr: u64, len: usize) -> usize {
        addr.checked_sub(self.start())
            .and_then(|o| usize::try_from(o).ok())
            .filter(|&o| o.checked_add(len).is_some_and(|e| e <= self.free))
            .unwrap_or_else(|| {
                panic!("code zone access {addr:#x}+{len} outside the allocated part")
            })
    }

    /// Copies `bytes` to `addr`, inside space returned by [`CodeZone::alloc`].
    pub fn write(&mut self, addr: u64, bytes: &[u8]) {
        let off = self.offset_of(addr, bytes.len());
        // SAFETY: [off, off + len) is inside the mapping (checked) and `bytes` is a separate
        // Rust allocation. No generated code runs while we write: the VM is single-threaded
        // and only writes from the runtime.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.as_ptr().add(off), bytes.len());
        }
    }

    /// Reads `len` bytes at `addr`.
    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let off = self.offset_of(addr, len);
        // SAFETY: inside the mapping (checked); readable.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off), len).to_vec() }
    }

    /// Sets the `imm64` at `imm` to `value`, after checking that the two bytes before it are
    /// the `opcode` the site was generated with (`mov rax, imm64` or `mov r11, imm64`).
    pub fn patch_imm64(&mut self, imm: u64, opcode: [u8; 2], value: u64) {
        let off = self.offset_of(imm - 2, 10);
        let found = self.read(imm - 2, 2);
        assert_eq!(
            found, opcode,
            "patch at {imm:#x}: not the expected instruction"
        );
        // SAFETY: the 8 bytes are inside the mapping (checked above). The patched instruction
        // is not executing concurrently: generated code runs on this thread only, and the
        // runtime patches from a call out of generated code or at a safepoint.
        unsafe {
            std::ptr::write_unaligned(self.base.as_ptr().add(off + 2).cast::<u64>(), value);
        }
    }

    /// Moves `len` bytes of code from `from` down to `to` (the ranges may overlap).
    pub fn move_code(&mut self, from: u64, to: u64, len: usize) {
        assert!(to <= from, "code only moves down");
        let src = self.offset_of(from, len);
        let dst = self.offset_of(to, len);
        // SAFETY: both ranges are inside the mapping (checked); `copy` handles overlap. Runs
        // at a safepoint, when no generated code is active.
        unsafe {
            std::ptr::copy(
                self.base.as_ptr().add(src),
                self.base.as_ptr().add(dst),
                len,
            );
        }
    }

    fn fill_range(&mut self, from: usize, to: usize) {
        assert!(from <= to && to <= self.size, "fill outside the zone");
        // SAFETY: [from, to) is inside the mapping (checked).
        unsafe { std::ptr::write_bytes(self.base.as_ptr().add(from), INT3, to - from) }
    }

    /// Lowers CCFree to `addr` after a compaction and fills the space given up with `int3`,
    /// so that a stale jump into it traps instead of running whatever was there.
    pub fn shrink_to(&mut self, addr: u64) {
        let new = self.offset_of(addr, 0);
        let old = self.free;
        self.fill_range(new, old);
        self.free = new;
    }

    /// Fills `[addr, addr + len)` with `int3` (freed code).
    pub fn fill(&mut self, addr: u64, len: usize) {
        let off = self.offset_of(addr, len);
        self.fill_range(off, off + len);
    }
}

impl Drop for CodeZone {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the VM owns the zone and no code runs after the
        // VM is dropped.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.size);
        }
    }
}

/// Identifies an entry for its whole life (addresses change when code moves).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId(pub u64);

/// What an entry is.
#[derive(Debug)]
pub enum EntryKind {
    /// A trampoline.
    Trampoline,
    /// An enilopmart.
    Enilopmart,
    /// A compiled method.
    Method {
        /// The method.
        method: MethodId,
        /// Compiled by the optimising tier.
        optimised: bool,
        /// A decoy, compiled to occupy space and never run.
        decoy: bool,
    },
    /// A closed PIC.
    ClosedPic {
        /// Its selector.
        selector: SelId,
        /// Its cases: class and target method entry.
        cases: Vec<(ClassId, EntryId)>,
    },
    /// An open PIC, with its hashed table (pairs of class tag and unchecked entry).
    OpenPic {
        /// Its selector.
        selector: SelId,
        /// The table the generated probe reads (atomics: written by the runtime, read by
        /// generated code through its address).
        table: Box<[AtomicU64]>,
    },
}

/// How a send site is linked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Calls the send-miss trampoline.
    Unlinked,
    /// Calls a method's checked entry with its class tag.
    Mono {
        /// The cached class.
        class: ClassId,
        /// The method entry.
        target: EntryId,
    },
    /// Calls a closed PIC.
    Closed(EntryId),
    /// Calls an open PIC.
    Open(EntryId),
}

/// A send site and its link.
#[derive(Debug, Clone)]
pub struct Site {
    /// Where it is.
    pub info: SiteInfo,
    /// What it calls.
    pub link: Link,
}

/// A piece of code in the zone.
#[derive(Debug)]
pub struct Entry {
    /// What it is.
    pub kind: EntryKind,
    /// Published name.
    pub name: String,
    /// First byte.
    pub start: u64,
    /// Bytes.
    pub size: u64,
    /// Offset of the checked entry (methods).
    pub check_entry: u32,
    /// Offset of the unchecked entry (methods).
    pub nocheck_entry: u32,
    /// Send sites, sorted by return address.
    pub sites: Vec<Site>,
    /// pc map, sorted by offset.
    pub pc_map: Vec<MapEntry>,
}

impl Entry {
    /// Whether `addr` is inside.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.start + self.size).contains(&addr)
    }

    /// The site whose return address is `ret`.
    pub fn site_at(&self, ret: u64) -> Option<usize> {
        let off = u32::try_from(ret.checked_sub(self.start)?).ok()?;
        self.sites.binary_search_by_key(&off, |s| s.info.ret).ok()
    }

    /// The method, for method entries.
    pub fn method(&self) -> Option<MethodId> {
        match self.kind {
            EntryKind::Method { method, .. } => Some(method),
            _ => None,
        }
    }
}

/// The entries of the zone, by id and by address.
#[derive(Debug, Default)]
pub struct Entries {
    by_id: HashMap<EntryId, Entry>,
    by_start: BTreeMap<u64, EntryId>,
    next: u64,
}

impl Entries {
    /// Adds an entry; answers its id.
    pub fn insert(&mut self, e: Entry) -> EntryId {
        let id = EntryId(self.next);
        self.next += 1;
        let previous = self.by_start.insert(e.start, id);
        assert!(previous.is_none(), "two entries at {:#x}", e.start);
        self.by_id.insert(id, e);
        id
    }

    /// Removes an entry.
    pub fn remove(&mut self, id: EntryId) -> Option<Entry> {
        let e = self.by_id.remove(&id)?;
        self.by_start.remove(&e.start);
        Some(e)
    }

    /// An entry.
    pub fn get(&self, id: EntryId) -> Option<&Entry> {
        self.by_id.get(&id)
    }

    /// An entry, mutably.
    pub fn get_mut(&mut self, id: EntryId) -> Option<&mut Entry> {
        self.by_id.get_mut(&id)
    }

    /// The entry containing `addr`.
    pub fn containing(&self, addr: u64) -> Option<EntryId> {
        let (_, &id) = self.by_start.range(..=addr).next_back()?;
        self.by_id[&id].contains(addr).then_some(id)
    }

    /// Ids in address order.
    pub fn in_address_order(&self) -> Vec<EntryId> {
        self.by_start.values().copied().collect()
    }

    /// Moves an entry to a new start address (the code has been moved).
    pub fn relocate(&mut self, id: EntryId, to: u64) {
        let e = self.by_id.get_mut(&id).expect("relocating a live entry");
        self.by_start.remove(&e.start);
        e.start = to;
        let previous = self.by_start.insert(to, id);
        assert!(previous.is_none(), "two entries at {to:#x}");
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// All entries, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (EntryId, &Entry)> {
        self.by_id.iter().map(|(&id, e)| (id, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_write_patch_move_shrink() {
        let mut z = CodeZone::new(8192).unwrap();
        let a = z.alloc(20).unwrap();
        assert_eq!(a, z.start());
        assert_eq!(z.free_start(), a + ALIGN);
        let mut code = vec![0x90; 20];
        code[4..6].copy_from_slice(&[0x49, 0xbb]);
        z.write(a, &code);
        z.patch_imm64(a + 6, [0x49, 0xbb], 0x1122_3344_5566_7788);
        assert_eq!(z.read(a + 6, 8), 0x1122_3344_5566_7788u64.to_le_bytes());
        let b = z.alloc(16).unwrap();
        z.write(b, &[1; 16]);
        z.move_code(b, a, 16);
        assert_eq!(z.read(a, 16), vec![1; 16]);
        z.shrink_to(a + 16);
        assert_eq!(z.free_start(), a + 16);
        assert!(z.alloc(1 << 20).is_none());
    }

    #[test]
    #[should_panic(expected = "not the expected instruction")]
    fn patch_checks_the_instruction() {
        let mut z = CodeZone::new(4096).unwrap();
        let a = z.alloc(16).unwrap();
        z.patch_imm64(a + 2, [0x48, 0xb8], 0);
    }

    #[test]
    #[should_panic(expected = "outside the allocated part")]
    fn writes_outside_allocations_panic() {
        let mut z = CodeZone::new(4096).unwrap();
        let a = z.alloc(16).unwrap();
        z.write(a + ALIGN - 8, &[0; 16]);
    }
}
