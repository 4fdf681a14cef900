//! CPython 3.12's perf trampolines, unwound by a rule of our own.
//!
//! With `-X perf`, CPython 3.12 calls each Python function's evaluation through a small
//! trampoline in anonymous memory, named `py::func:file` in the perf map, so that profilers see
//! Python frames. Every trampoline is the same 11 bytes, built without unwind information or a
//! frame pointer:
//!
//! ```text
//! 48 83 ec 08    sub  $8, %rsp
//! ff d1          call *%rcx        <- the return address points past this call
//! 48 83 c4 08    add  $8, %rsp
//! c3             ret
//! ```
//!
//! Frame-pointer unwinding (framehop's rule for code in no module) cannot get past it, and
//! `perf --call-graph dwarf` stops there. But its frame is known exactly: when the callee
//! returns to it, `rsp` is what it was at the call, 8 bytes below the caller's return address,
//! and the caller's `rsp` is 16 bytes up. `rbp` is untouched. The trampoline is recognised by
//! its bytes, never by its perf-map name, so that it works whatever the map says.

/// The bytes of a CPython 3.12 perf trampoline.
pub const TRAMPOLINE: [u8; 11] = [
    0x48, 0x83, 0xec, 0x08, 0xff, 0xd1, 0x48, 0x83, 0xc4, 0x08, 0xc3,
];

/// Offset of the return address of the trampoline's call from the trampoline's start.
pub const RETURN_OFFSET: u64 = 6;

/// Where the caller's return address is stored, from the trampoline's `rsp` after the callee
/// returned.
pub const CALLER_RETURN_ADDRESS_OFFSET: u64 = 8;

/// How far the caller's `rsp` is above the trampoline's.
pub const CALLER_SP_OFFSET: u64 = 16;

/// Whether the code bytes read at `return address - RETURN_OFFSET` are a trampoline, so that the
/// return address is the one of its call. The slice must hold at least the 11 bytes.
pub fn is_trampoline_return(bytes_at_ra_minus_6: &[u8]) -> bool {
    bytes_at_ra_minus_6.get(..TRAMPOLINE.len()) == Some(&TRAMPOLINE[..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_trampoline_at_the_call_is_recognised() {
        assert!(is_trampoline_return(&TRAMPOLINE));
        // Trailing bytes (the next trampoline) do not matter.
        let mut two = TRAMPOLINE.to_vec();
        two.extend_from_slice(&TRAMPOLINE);
        assert!(is_trampoline_return(&two));
        // Too short, shifted by one byte either way, or any byte changed: not a trampoline.
        assert!(!is_trampoline_return(&TRAMPOLINE[..10]));
        assert!(!is_trampoline_return(&two[1..]));
        let mut shifted = vec![0x90];
        shifted.extend_from_slice(&TRAMPOLINE);
        assert!(!is_trampoline_return(&shifted));
        for i in 0..TRAMPOLINE.len() {
            let mut bytes = TRAMPOLINE;
            bytes[i] ^= 0x01;
            assert!(!is_trampoline_return(&bytes), "byte {i} changed");
        }
        // `call *%rdx` (ff d2) instead of `call *%rcx`.
        let mut rdx = TRAMPOLINE;
        rdx[5] = 0xd2;
        assert!(!is_trampoline_return(&rdx));
    }
}
