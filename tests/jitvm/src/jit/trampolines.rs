//! Trampolines (generated code -> runtime) and the enilopmart (runtime -> generated code),
//! generated once at the start of the code zone, as in Cog.
//!
//! - `ceEnterJITMethod` (enilopmart): `extern "C" fn(entry, receiver, args, nargs) -> answer`.
//!   Saves the callee-saved registers, records its frame in the unwind cell, pushes the
//!   receiver and arguments and calls a method's unchecked entry. An answer of 0 (never a
//!   valid value) means the program failed and unwound.
//! - `ceSendMissTrampoline`: entered by `jmp` from a method's checked entry or a PIC, or by
//!   `call` from an unlinked site, with the send site's return address on top of the stack.
//!   Calls the runtime's send-miss handler with that address and the arguments' address; the
//!   handler answers a target to jump to (the receiver and arguments are still in place), or
//!   a value to return to the site, or neither (error: unwind).
//! - `ceNewArrayTrampoline`: `rdi` = size; answers the array.
//! - `cePrimitiveFailTrampoline`, `ceMustBeBooleanTrampoline`, `ceStackOverflowTrampoline`:
//!   report the error (the return address says where) and unwind.
//! - `ceUnwindToRuntime`: goes back to the enilopmart's exit with 0, from any depth of
//!   generated frames.

use dynasmrt::x64::X64Relocation;
use dynasmrt::{DynasmApi, DynasmLabelApi, VecAssembler, dynasm};

use super::x64::JitError;
use crate::jit::encoding::INT3;

type Ops = VecAssembler<X64Relocation>;

/// Addresses of the runtime the trampolines call, and of the unwind cell.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeFns {
    /// `extern "C" fn(ret: u64, args: *const u64) -> MissAnswer`.
    pub send_miss: u64,
    /// `extern "C" fn(size: u64) -> u64` (0: failed).
    pub new_array: u64,
    /// `extern "C" fn(ret: u64)`.
    pub prim_failed: u64,
    /// `extern "C" fn(ret: u64)`.
    pub must_be_boolean: u64,
    /// `extern "C" fn(ret: u64)`.
    pub stack_overflow: u64,
    /// A word holding the rbp of the innermost active enilopmart.
    pub unwind_cell: u64,
}

/// Whether a piece is a trampoline or an enilopmart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceKind {
    /// Generated code -> runtime.
    Trampoline,
    /// Runtime -> generated code.
    Enilopmart,
}

/// One named piece of the generated runtime glue.
#[derive(Debug, Clone)]
pub struct Piece {
    /// Its name, as published.
    pub name: &'static str,
    /// Its kind.
    pub kind: PieceKind,
    /// Offset from the start of the glue.
    pub offset: u32,
    /// Bytes.
    pub size: u32,
}

/// The generated glue.
#[derive(Debug, Clone)]
pub struct Glue {
    /// Machine code, position independent.
    pub code: Vec<u8>,
    /// Its pieces, in address order, each 16-aligned.
    pub pieces: Vec<Piece>,
}

impl Glue {
    /// Offset of a piece by name.
    pub fn offset_of(&self, name: &str) -> Option<u32> {
        self.pieces
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.offset)
    }
}

/// Name of the enilopmart.
pub const ENTER: &str = "ceEnterJITMethod";
/// Name of the send-miss trampoline.
pub const SEND_MISS: &str = "ceSendMissTrampoline";
/// Name of the allocation trampoline.
pub const NEW_ARRAY: &str = "ceNewArrayTrampoline";
/// Name of the primitive-failure trampoline.
pub const PRIM_FAIL: &str = "cePrimitiveFailTrampoline";
/// Name of the must-be-Boolean trampoline.
pub const MUST_BE_BOOLEAN: &str = "ceMustBeBooleanTrampoline";
/// Name of the stack-overflow trampoline.
pub const STACK_OVERFLOW: &str = "ceStackOverflowTrampoline";
/// Name of the unwinder.
pub const UNWIND: &str = "ceUnwindToRuntime";

fn align16(ops: &mut Ops) {
    let pad = (16 - ops.offset().0 % 16) % 16;
    ops.extend(std::iter::repeat_n(INT3, pad));
}

/// Generates the glue calling the runtime functions `f`.
pub fn generate(f: &RuntimeFns) -> Result<Glue, JitError> {
    let mut ops = Ops::new(0);
    let mut starts: Vec<(&'static str, PieceKind, usize)> = Vec::new();
    let exit = ops.new_dynamic_label();
    let unwind = ops.new_dynamic_label();
    let cell = f.unwind_cell as i64;

    starts.push((ENTER, PieceKind::Enilopmart, ops.offset().0));
    dynasm!(ops
        ; .arch x64
        ; push rbp
        ; mov rbp, rsp
        ; push rbx
        ; push r12
        ; push r13
        ; push r14
        ; push r15
        ; mov r11, QWORD cell
        ; push QWORD [r11]
        ; mov [r11], rbp
        ; push rsi
        ; xor r8d, r8d
        ; next_arg:
        ; cmp r8, rcx
        ; je >call
        ; push QWORD [rdx + r8 * 8]
        ; inc r8
        ; jmp <next_arg
        ; call:
        ; mov rdx, rsi
        ; call rdi
        ; =>exit
        ; mov r11, QWORD cell
        ; mov rcx, [rbp - 48]
        ; mov [r11], rcx
        ; lea rsp, [rbp - 40]
        ; pop r15
        ; pop r14
        ; pop r13
        ; pop r12
        ; pop rbx
        ; pop rbp
        ; ret
    );

    align16(&mut ops);
    starts.push((UNWIND, PieceKind::Trampoline, ops.offset().0));
    dynasm!(ops
        ; .arch x64
        ; =>unwind
        ; mov r11, QWORD cell
        ; mov rbp, [r11]
        ; xor eax, eax
        ; jmp =>exit
    );

    align16(&mut ops);
    starts.push((SEND_MISS, PieceKind::Trampoline, ops.offset().0));
    dynasm!(ops
        ; .arch x64
        ; push rbp
        ; mov rbp, rsp
        ; mov rdi, [rbp + 8]
        ; lea rsi, [rbp + 16]
        ; and rsp, -16
        ; mov rax, QWORD f.send_miss as i64
        ; call rax
        ; mov rsp, rbp
        ; pop rbp
        ; test rax, rax
        ; jz >no_target
        ; jmp rax
        ; no_target:
        ; test rdx, rdx
        ; jz =>unwind
        ; mov rax, rdx
        ; ret
    );

    align16(&mut ops);
    starts.push((NEW_ARRAY, PieceKind::Trampoline, ops.offset().0));
    dynasm!(ops
        ; .arch x64
        ; push rbp
        ; mov rbp, rsp
        ; and rsp, -16
        ; mov rax, QWORD f.new_array as i64
        ; call rax
        ; mov rsp, rbp
        ; pop rbp
        ; test rax, rax
        ; jz =>unwind
        ; ret
    );

    for (name, target) in [
        (PRIM_FAIL, f.prim_failed),
        (MUST_BE_BOOLEAN, f.must_be_boolean),
        (STACK_OVERFLOW, f.stack_overflow),
    ] {
        align16(&mut ops);
        starts.push((name, PieceKind::Trampoline, ops.offset().0));
        dynasm!(ops
            ; .arch x64
            ; push rbp
            ; mov rbp, rsp
            ; mov rdi, [rbp + 8]
            ; and rsp, -16
            ; mov rax, QWORD target as i64
            ; call rax
            ; jmp =>unwind
        );
    }
    align16(&mut ops);
    let end = ops.offset().0;
    let code = ops.finalize()?;
    let pieces = starts
        .iter()
        .enumerate()
        .map(|(i, &(name, kind, start))| {
            let limit = starts.get(i + 1).map_or(end, |s| s.2);
            Piece {
                name,
                kind,
                offset: u32::try_from(start).unwrap_or(u32::MAX),
                size: u32::try_from(limit - start).unwrap_or(0),
            }
        })
        .collect();
    Ok(Glue { code, pieces })
}
