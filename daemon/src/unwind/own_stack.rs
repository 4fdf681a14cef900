//! Captures the calling thread's own registers and stack, the way the kernel captures a
//! sampled thread's: for the unwinder's tests and benchmark (included there with `#[path]`),
//! which unwind a real stack through libc's `qsort`, code without frame pointers.

use std::{cell::RefCell, ffi::c_void};

/// Registers and stack bytes of a thread, as a sample would carry them.
#[derive(Clone, Debug)]
pub struct Captured {
    /// Instruction pointer, inside [`capture`].
    pub ip: u64,
    /// Stack pointer: the address of `stack[0]`.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
    /// The stack from `sp` up.
    pub stack: Vec<u8>,
    /// Whether the copy stopped at unreadable memory before `max_bytes`.
    pub faulted: bool,
}

/// Reads this thread's ip, sp and bp and copies up to `max_bytes` of its stack from sp, with
/// `process_vm_readv` on our own pid (which stops at the first unreadable page, as the kernel's
/// copy does).
#[inline(never)]
pub fn capture(max_bytes: usize) -> Captured {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers into outputs; touches no memory and no flags.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    let mut stack = vec![0u8; max_bytes];
    let remote = libc::iovec {
        iov_base: sp as *mut c_void,
        iov_len: max_bytes,
    };
    let local = libc::iovec {
        iov_base: stack.as_mut_ptr().cast(),
        iov_len: max_bytes,
    };
    // SAFETY: the local iovec covers `stack`; the kernel checks the remote range.
    let read = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    let read = usize::try_from(read).unwrap_or(0);
    stack.truncate(read);
    Captured {
        ip,
        sp,
        bp,
        faulted: read < max_bytes,
        stack,
    }
}

thread_local! {
    static CAPTURED: RefCell<Option<Captured>> = const { RefCell::new(None) };
    static CAPTURE_BYTES: RefCell<usize> = const { RefCell::new(0) };
}

extern "C" fn compare(a: *const c_void, b: *const c_void) -> libc::c_int {
    CAPTURED.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(capture(CAPTURE_BYTES.with(|b| *b.borrow())));
        }
    });
    // SAFETY: qsort passes pointers to elements of the u32 array below.
    let (a, b) = unsafe { (*a.cast::<u32>(), *b.cast::<u32>()) };
    a.cmp(&b) as libc::c_int
}

/// Sorts an array with libc's `qsort`, whose comparator captures the stack on its first call.
#[inline(never)]
pub fn sort_with_callback(max_bytes: usize) -> Captured {
    CAPTURE_BYTES.with(|b| *b.borrow_mut() = max_bytes);
    CAPTURED.with(|c| c.borrow_mut().take());
    let mut values: Vec<u32> = (0..64u32).rev().collect();
    // SAFETY: a valid array of 64 u32 and a comparator for u32.
    unsafe {
        libc::qsort(
            values.as_mut_ptr().cast(),
            values.len(),
            std::mem::size_of::<u32>(),
            Some(compare),
        );
    }
    std::hint::black_box(&values);
    CAPTURED
        .with(|c| c.borrow_mut().take())
        .expect("qsort called the comparator")
}

/// The chain of Rust functions above `qsort`, each kept as a frame of its own.
#[inline(never)]
pub fn chain_a(max_bytes: usize) -> Captured {
    let captured = chain_b(max_bytes);
    std::hint::black_box(&captured);
    captured
}

#[inline(never)]
fn chain_b(max_bytes: usize) -> Captured {
    let captured = chain_c(max_bytes);
    std::hint::black_box(&captured);
    captured
}

#[inline(never)]
fn chain_c(max_bytes: usize) -> Captured {
    let captured = sort_with_callback(max_bytes);
    std::hint::black_box(&captured);
    captured
}

/// Names of the functions the unwind must find, innermost first, after libc's frames.
pub const CHAIN: [&str; 4] = ["sort_with_callback", "chain_c", "chain_b", "chain_a"];
