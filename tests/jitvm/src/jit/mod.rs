//! Code generation: methods, PICs, trampolines and the enilopmart, as position-independent
//! x86-64 machine code.
//!
//! # Calling convention
//!
//! The operand stack is the machine stack. A send pushes the receiver, then the arguments
//! (first argument deepest), then calls; the callee leaves them and answers in `rax`; the
//! caller pops the arguments and replaces the receiver with the answer. In a method's frame
//! (frame pointers kept, `push rbp; mov rbp, rsp`):
//!
//! ```text
//! [rbp + 16 + 8 * nargs]          receiver
//! [rbp + 16 + 8 * (nargs - 1 - i)] argument i
//! [rbp + 8]                       return address
//! [rbp]                           caller's rbp
//! [rbp - 8 * (1 + j)]             temporary j (nil on entry)
//! [rbp - 8 * (ntemps + 1 + k)]    operand stack slot k
//! ```
//!
//! Scratch registers: `rax rcx rdx r8 r11` (and `rdi rsi` around runtime calls). Generated code
//! never touches the callee-saved registers other than `rbp`, so the enilopmart saves them only
//! for its own sake.
//!
//! # Send sites and inline caches (Cog style)
//!
//! ```text
//! mov rdx, [rsp + 8 * nargs]   ; receiver, for the callee's class check
//! mov rax, imm64               ; cached class tag          (patched)
//! mov r11, imm64               ; cached target             (patched)
//! call r11
//! <return address>             ; the mcpc mapped to the send's bcpc
//! ```
//!
//! Unlinked, the target is the send-miss trampoline. Linked monomorphic, it is the target
//! method's checked entry, which compares the receiver's class tag (1 for SmallIntegers, else
//! the object's first word) with `rax` and on a miss jumps to the send-miss trampoline with the
//! return address still on the stack; the runtime finds the site from it. Linked polymorphic,
//! the target is a closed PIC (up to 6 class compares, each jumping to a method's unchecked
//! entry) or an open PIC (a probe of a 16-slot hashed table of class tag -> unchecked entry).
//! Every reference out of a piece of code is an absolute `imm64`, and every jump inside it is
//! relative, so code can be moved with memcpy once its send sites are unlinked.
//!
//! # pc map
//!
//! mcpc is the address right after the instruction that implements a mapped bytecode: the
//! return address of a send's call (what the stack holds during the send, as in Cog) and the
//! address after a jump or conditional branch. Loop heads (targets of back jumps) are mapped
//! too, at their first instruction, so that a loop's ranges start at the loop. Optimised code
//! adds entries where inlined code starts (inlined frame with bcpc 0) and where it ends (back
//! to the caller's send bcpc).

pub mod trampolines;
pub mod x64;

use crate::bytecode::SelId;
use crate::program::MethodId;

/// Addresses generated code refers to: trampolines and constant objects.
#[derive(Debug, Clone, Copy, Default)]
pub struct Addrs {
    /// `ceSendMissTrampoline`, entered by `jmp`/`call` from send sites and entries.
    pub send_miss: u64,
    /// `ceNewArrayTrampoline`: `rdi` = size; answers the array in `rax`.
    pub new_array: u64,
    /// `cePrimitiveFailTrampoline`: never returns.
    pub prim_fail: u64,
    /// `ceMustBeBooleanTrampoline`: never returns.
    pub must_be_boolean: u64,
    /// `ceStackOverflowTrampoline`: never returns.
    pub stack_overflow: u64,
    /// Address of the word holding the lowest rsp generated code may use (checked in every
    /// method's prologue, as Cog checks its stack limit).
    pub stack_limit: u64,
    /// Address of the first of the methods' activation counters (a packed array of `u64`, one
    /// per method, in method order), or 0 for none: inlined bodies bump their method's, as
    /// prologues do (`compile_method`'s `counter`), so that activations count exactly.
    pub counters: u64,
    /// Address of the VM thread's send counter (a `u64`), or 0 for none: bumped beside every
    /// activation counter, it counts the thread's sends, which the profiler reads with each
    /// sample (`ThreadCounter`).
    pub sends: u64,
    /// The nil object.
    pub nil: u64,
    /// The true object.
    pub true_: u64,
    /// The false object.
    pub false_: u64,
}

/// A send site in compiled code; offsets from the start of the code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteInfo {
    /// Offset of the class tag `imm64` (the 8 bytes after `48 b8`, `mov rax, imm64`).
    pub tag_imm: u32,
    /// Offset of the target `imm64` (after `49 bb`, `mov r11, imm64`).
    pub target_imm: u32,
    /// Offset of the return address.
    pub ret: u32,
    /// Selector sent.
    pub selector: SelId,
    /// Its arguments.
    pub nargs: u8,
    /// bcpc of the send in the compiled method (the outermost method for inlined code).
    pub bcpc: u32,
    /// Whether it is the slow path of special arithmetic.
    pub arith: bool,
    /// Whether it is in inlined code.
    pub inlined: bool,
}

/// One mcpc -> bcpc pair, with the inlined frames of the code from it to the next one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// Offset from the start of the code.
    pub offset: u32,
    /// bcpc in the compiled method.
    pub bcpc: u32,
    /// Inlined methods and their bcpcs, outermost first; empty for the method's own code.
    pub inlined: Vec<(MethodId, u32)>,
}

/// The output of compiling a method.
#[derive(Debug, Clone)]
pub struct CompiledCode {
    /// Machine code, to be copied anywhere in the code zone.
    pub code: Vec<u8>,
    /// Offset of the checked entry (class check against `rax`).
    pub check_entry: u32,
    /// Offset of the unchecked entry (the receiver's class is known to be right).
    pub nocheck_entry: u32,
    /// Its send sites, by return address.
    pub sites: Vec<SiteInfo>,
    /// Its pc map, sorted by offset.
    pub pc_map: Vec<MapEntry>,
}

/// x86-64 encodings the runtime checks before it patches a site.
pub mod encoding {
    /// `mov rax, imm64` (REX.W B8).
    pub const MOV_RAX_IMM64: [u8; 2] = [0x48, 0xb8];
    /// `mov r11, imm64` (REX.WB B8+3).
    pub const MOV_R11_IMM64: [u8; 2] = [0x49, 0xbb];
    /// `call r11`.
    pub const CALL_R11: [u8; 3] = [0x41, 0xff, 0xd3];
    /// `int3`, which fills unused and freed code.
    pub const INT3: u8 = 0xcc;
}
