//! The object heap: a bump allocator over one anonymous mapping.
//!
//! Object layout, in 64-bit words: `[class id, number of slots, slot 1, slot 2, ...]`; an
//! object value is the address of its first word. Generated code reads and writes objects at
//! these addresses directly (`Array>>at:` loads `[obj + 8 + 8 * index]`), and the Rust side
//! goes through [`Heap::load`] / [`Heap::store`], which check that the address is inside the
//! allocated part of the heap. Objects made before [`Heap::set_mark`] (nil, true, false, the
//! workloads' receivers) live for good; [`Heap::reset`] drops everything after the mark, which
//! the driver does between two calls into generated code, when no JIT frame holds a reference.
//! In the GC-heavy mode ([`crate::gc`]) the objects after the mark are the young generation
//! instead, left to pile up to the eden's size and then collected: [`Heap::trace`] reads
//! every slot of a range of objects, as a collector's trace does, and [`Heap::clear_young`]
//! wipes the young objects and frees them.

use std::io;
use std::ptr::NonNull;

use crate::program::{ARRAY, ClassId, FALSE, TRUE, UNDEFINED_OBJECT};
use crate::value::Value;

/// A bump-allocated heap of words.
#[derive(Debug)]
pub struct Heap {
    base: NonNull<u64>,
    /// Capacity in words.
    words: usize,
    /// Next free word.
    top: usize,
    /// Where [`Heap::reset`] goes back to.
    mark: usize,
    nil: Value,
    true_: Value,
    false_: Value,
}

impl Heap {
    /// A heap of `bytes` (rounded down to words), with nil, true and false allocated.
    pub fn new(bytes: usize) -> io::Result<Heap> {
        let words = bytes / 8;
        if words < 64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "heap under 512 bytes",
            ));
        }
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it. It is never
        // unmapped while the heap lives (Drop unmaps it), so `base` stays valid.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                words * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u64>()).ok_or_else(io::Error::last_os_error)?;
        let mut heap = Heap {
            base,
            words,
            top: 0,
            mark: 0,
            nil: Value(0),
            true_: Value(0),
            false_: Value(0),
        };
        // Never fails: the heap holds at least 64 words.
        heap.nil = heap.alloc_raw(UNDEFINED_OBJECT, 0).expect("room for nil");
        heap.true_ = heap.alloc_raw(TRUE, 0).expect("room for true");
        heap.false_ = heap.alloc_raw(FALSE, 0).expect("room for false");
        heap.mark = heap.top;
        Ok(heap)
    }

    /// The nil object.
    pub fn nil(&self) -> Value {
        self.nil
    }

    /// The true object.
    pub fn true_(&self) -> Value {
        self.true_
    }

    /// The false object.
    pub fn false_(&self) -> Value {
        self.false_
    }

    /// The Boolean object for `b`.
    pub fn boolean(&self, b: bool) -> Value {
        if b { self.true_ } else { self.false_ }
    }

    fn alloc_raw(&mut self, class: ClassId, slots: usize) -> Option<Value> {
        let need = slots.checked_add(2)?;
        if self.words - self.top < need {
            return None;
        }
        let at = self.top;
        self.top += need;
        let v = Value(self.base.as_ptr() as u64 + 8 * at as u64);
        self.store_word(at, u64::from(class.0));
        self.store_word(at + 1, slots as u64);
        Some(v)
    }

    /// A new object of `class` with `slots` slots, all `fill`; `None` when the heap is full.
    pub fn alloc(&mut self, class: ClassId, slots: usize, fill: Value) -> Option<Value> {
        let v = self.alloc_raw(class, slots)?;
        let first = self.index_of(v)? + 2;
        for i in first..first + slots {
            self.store_word(i, fill.0);
        }
        Some(v)
    }

    /// A new Array of `size` nils.
    pub fn new_array(&mut self, size: usize) -> Option<Value> {
        self.alloc(ARRAY, size, self.nil)
    }

    /// Makes everything allocated so far permanent.
    pub fn set_mark(&mut self) {
        self.mark = self.top;
    }

    /// Frees everything allocated after the mark. Only when no live value refers to it.
    pub fn reset(&mut self) {
        self.top = self.mark;
    }

    /// Bytes in use.
    pub fn used(&self) -> usize {
        self.top * 8
    }

    /// Bytes of the objects made after the mark (the young generation).
    pub fn young_bytes(&self) -> usize {
        (self.top - self.mark) * 8
    }

    /// Bytes of the objects made before the mark (live for good: the old generation).
    pub fn old_bytes(&self) -> usize {
        self.mark * 8
    }

    /// Bytes never allocated.
    pub fn free_bytes(&self) -> usize {
        (self.words - self.top) * 8
    }

    /// Reads every slot of every object, young ones only unless `all`, as a collector's trace
    /// does; answers how many slots refer to an object of the heap.
    pub fn trace(&self, all: bool) -> u64 {
        let base = self.base.as_ptr() as u64;
        let end = base + 8 * self.top as u64;
        let mut at = if all { 0 } else { self.mark };
        let mut references = 0;
        while at + 2 <= self.top {
            let slots = usize::try_from(self.load_word(at + 1)).unwrap_or(usize::MAX);
            let last = at.saturating_add(2).saturating_add(slots).min(self.top);
            for i in at + 2..last {
                let v = Value(self.load_word(i));
                references += u64::from(!v.is_int() && v.0 >= base && v.0 < end);
            }
            at = last;
        }
        references
    }

    /// Wipes the young objects (every word to 0, as a scavenger's eden is cleared for its
    /// next use) and frees them.
    pub fn clear_young(&mut self) {
        let young = self.top - self.mark;
        // SAFETY: words [mark, top) are inside the mapping (top <= words), readable and
        // writable, and no live value refers to them (the caller's contract, as for reset).
        unsafe { self.base.as_ptr().add(self.mark).write_bytes(0, young) };
        self.top = self.mark;
    }

    /// Every allocated object, in address order: the heap is a sequence of objects, each its
    /// header and its slots.
    pub fn objects(&self) -> impl Iterator<Item = Value> + '_ {
        let base = self.base.as_ptr() as u64;
        let mut at = 0;
        std::iter::from_fn(move || {
            if at + 2 > self.top {
                return None;
            }
            let v = Value(base + 8 * at as u64);
            let slots = usize::try_from(self.load_word(at + 1)).unwrap_or(usize::MAX);
            at = at.saturating_add(2).saturating_add(slots).min(self.top);
            Some(v)
        })
    }

    /// Words allocated: an object's word index ([`Heap::word_of`]) is below.
    pub fn allocated_words(&self) -> usize {
        self.top
    }

    /// The word index of `v` in the heap, if it is an address inside it (not necessarily an
    /// object's header: [`Heap::objects`] says which are).
    pub fn word_of(&self, v: Value) -> Option<usize> {
        self.index_of(v)
    }

    /// Bytes of an object: its two header words and its slots.
    pub fn bytes_of(&self, v: Value) -> Option<u64> {
        Some(8 * (2 + self.size_of(v)? as u64))
    }

    /// Word index of an object, if `v` is the address of an allocated object header.
    fn index_of(&self, v: Value) -> Option<usize> {
        let base = self.base.as_ptr() as u64;
        if v.is_int() || v.0 < base || !v.0.is_multiple_of(8) {
            return None;
        }
        let i = usize::try_from((v.0 - base) / 8).ok()?;
        (i + 2 <= self.top).then_some(i)
    }

    fn store_word(&mut self, i: usize, w: u64) {
        assert!(i < self.words, "heap word {i} out of bounds");
        // SAFETY: `i` is inside the mapping (checked above), which is readable and writable.
        unsafe { self.base.as_ptr().add(i).write(w) }
    }

    fn load_word(&self, i: usize) -> u64 {
        assert!(i < self.words, "heap word {i} out of bounds");
        // SAFETY: as in store_word.
        unsafe { self.base.as_ptr().add(i).read() }
    }

    /// Class of an object (not of a SmallInteger), if `v` is one.
    pub fn class_of_object(&self, v: Value) -> Option<ClassId> {
        let i = self.index_of(v)?;
        Some(ClassId(u32::try_from(self.load_word(i)).ok()?))
    }

    /// Number of slots of an object.
    pub fn size_of(&self, v: Value) -> Option<usize> {
        let i = self.index_of(v)?;
        usize::try_from(self.load_word(i + 1)).ok()
    }

    /// Slot `n` (1-based, as `at:`) of an object.
    pub fn load(&self, v: Value, n: usize) -> Option<Value> {
        let i = self.index_of(v)?;
        let size = self.size_of(v)?;
        (1..=size)
            .contains(&n)
            .then(|| Value(self.load_word(i + 1 + n)))
    }

    /// Stores into slot `n` (1-based) of an object; `None` if out of bounds.
    pub fn store(&mut self, v: Value, n: usize, x: Value) -> Option<()> {
        let i = self.index_of(v)?;
        let size = self.size_of(v)?;
        (1..=size)
            .contains(&n)
            .then(|| self.store_word(i + 1 + n, x.0))
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of this size; no value is dereferenced after the
        // heap is dropped (the VM owns the heap and outlives every call into generated code).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.words * 8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_load_store_and_reset() {
        let mut h = Heap::new(1 << 20).unwrap();
        assert_eq!(h.class_of_object(h.nil()), Some(UNDEFINED_OBJECT));
        let a = h.new_array(3).unwrap();
        assert_eq!(h.size_of(a), Some(3));
        assert_eq!(h.load(a, 1), Some(h.nil()));
        h.store(a, 3, Value::small(9)).unwrap();
        assert_eq!(h.load(a, 3), Some(Value::small(9)));
        assert!(h.load(a, 0).is_none() && h.load(a, 4).is_none());
        assert!(h.store(a, 4, Value::small(1)).is_none());
        assert!(h.load(Value::small(1), 1).is_none());
        h.reset();
        assert!(h.size_of(a).is_none(), "reset frees objects after the mark");
        let b = h.new_array(4).unwrap();
        h.store(b, 2, h.true_()).unwrap();
        h.store(b, 3, Value::small(5)).unwrap();
        assert_eq!(h.young_bytes(), 6 * 8);
        // Two nils and true refer to heap objects; the SmallInteger does not.
        assert_eq!(h.trace(false), 3);
        assert_eq!(h.trace(true), 3, "nil, true and false have no slots");
        h.clear_young();
        assert_eq!(h.young_bytes(), 0);
        assert!(h.size_of(b).is_none());
        assert!(
            h.new_array(1 << 20).is_none(),
            "allocation beyond capacity fails"
        );
    }
}
