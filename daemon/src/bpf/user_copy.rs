//! The user registers and the copy of the top of the user stack that samples carry with
//! `--call-graph dwarf`, kept per batch in two arenas so that a sample costs no allocation.
//!
//! The kernel side copies from the user stack pointer up, page by page, and stops at the first
//! page it cannot read: a copy may be shorter than asked (the stack ends first) and then says
//! so ([`UserCopy::faulted`]); what it holds is always the stack from `sp` on, contiguous.

use vmscope_common::UserCopyHeader;

/// One sample's user registers and the top of its user stack: what a DWARF unwinder starts
/// from. `stack[i]` is the byte at address `sp + i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserCopy<'a> {
    /// User instruction pointer: the interrupted one, or where the task will return to user
    /// mode when the tick landed in the kernel.
    pub ip: u64,
    /// User stack pointer: the address of `stack[0]`.
    pub sp: u64,
    /// User frame pointer register (rbp), for code that keeps frame pointers.
    pub bp: u64,
    /// The bytes copied from `sp` up; shorter than asked when the stack ended first.
    pub stack: &'a [u8],
    /// The copy stopped at an address it could not read (the end of the stack mapping, a
    /// guard page) before it had the bytes asked for.
    pub faulted: bool,
}

impl<'a> UserCopy<'a> {
    /// The copy as the kernel's record holds it: its header and its bytes.
    pub fn from_header(header: &UserCopyHeader, stack: &'a [u8], faulted: bool) -> Self {
        UserCopy {
            ip: header.ip,
            sp: header.sp,
            bp: header.bp,
            stack,
            faulted,
        }
    }
}

/// Where one copy lives in [`UserCopies`].
#[derive(Clone, Copy, Debug)]
struct Entry {
    ip: u64,
    sp: u64,
    bp: u64,
    start: usize,
    len: u32,
    faulted: bool,
}

/// Marks an event without a copy in [`UserCopies`].
const NO_COPY: u32 = u32::MAX;

/// The user copies of a batch's events: registers in one vector, stack bytes in another,
/// and for each event the index of its copy, if it has one.
#[derive(Clone, Debug, Default)]
pub struct UserCopies {
    entries: Vec<Entry>,
    bytes: Vec<u8>,
    of_event: Vec<u32>,
}

impl UserCopies {
    /// Records the copy of the next event (`None` for an event without one). Events must be
    /// pushed in order, one call each.
    pub fn push(&mut self, copy: Option<UserCopy<'_>>) {
        let Some(copy) = copy else {
            self.of_event.push(NO_COPY);
            return;
        };
        self.of_event.push(self.entries.len() as u32);
        self.entries.push(Entry {
            ip: copy.ip,
            sp: copy.sp,
            bp: copy.bp,
            start: self.bytes.len(),
            len: copy.stack.len() as u32,
            faulted: copy.faulted,
        });
        self.bytes.extend_from_slice(copy.stack);
    }

    /// The copy of event `i`, if it has one.
    pub fn get(&self, i: usize) -> Option<UserCopy<'_>> {
        let index = *self.of_event.get(i)?;
        let entry = self.entries.get(index as usize)?;
        let stack = self
            .bytes
            .get(entry.start..entry.start + entry.len as usize)?;
        Some(UserCopy {
            ip: entry.ip,
            sp: entry.sp,
            bp: entry.bp,
            stack,
            faulted: entry.faulted,
        })
    }

    /// Stack bytes held for all events, to bound a batch's memory.
    pub fn bytes_len(&self) -> usize {
        self.bytes.len()
    }

    /// Number of copies held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no event has a copy.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(ip: u64, stack: &[u8], faulted: bool) -> UserCopy<'_> {
        UserCopy {
            ip,
            sp: 0x7ffd_0000_0000 + ip,
            bp: 0x7ffd_0000_1000,
            stack,
            faulted,
        }
    }

    #[test]
    fn copies_are_found_by_event_beside_events_without_one() {
        let (a, b) = ([1u8, 2, 3, 4, 5, 6, 7, 8], [9u8; 16]);
        let mut copies = UserCopies::default();
        copies.push(Some(copy(1, &a, false)));
        copies.push(None);
        copies.push(Some(copy(3, &b, true)));
        copies.push(Some(copy(4, &[], true)));
        assert_eq!(copies.get(0), Some(copy(1, &a, false)));
        assert_eq!(copies.get(1), None);
        assert_eq!(copies.get(2), Some(copy(3, &b, true)));
        assert_eq!(copies.get(3), Some(copy(4, &[], true)));
        assert_eq!(copies.get(4), None, "past the last event");
        assert_eq!((copies.len(), copies.bytes_len()), (3, 24));
    }
}
