//! The template JIT: one native function per method, PICs.
//!
//! The assembler is dynasm-rs (`dynasmrt`): its `dynasm!` macro checks and encodes every
//! instruction template at Rust compile time, so a template reads like the assembly it is
//! (what Cog's templates are) and emitting one costs a memcpy, which matters when compiling
//! happens on a send miss. `VecAssembler` gives plain bytes with dynamic labels for the
//! bytecode jump targets, which we copy into our own code zone; iced-x86's code assembler
//! would encode at run time through a larger API for no gain here.
//!
//! The code is position independent: jumps and branches inside a function are relative,
//! everything outside it (trampolines, objects, counters, other methods) is an absolute
//! `imm64`. See [`crate::jit`] for the frame layout and the send-site shape.

use std::collections::HashMap;

use dynasmrt::x64::X64Relocation;
use dynasmrt::{DynamicLabel, DynasmApi, DynasmLabelApi, VecAssembler, dynasm};
use thiserror::Error;

use super::{Addrs, CompiledCode, MapEntry, SiteInfo};
use crate::bytecode::{ArithOp, Insn, SelId};
use crate::program::{ClassId, MethodId, Primitive, Program, SMALL_INTEGER};

type Ops = VecAssembler<X64Relocation>;

/// Slots of an open PIC's hashed table (class tag, unchecked entry); a power of two.
pub const OPEN_PIC_SLOTS: usize = 16;
/// Most cases of a closed PIC, as in Cog.
pub const CLOSED_PIC_MAX_CASES: usize = 6;
/// Alignment of loop heads, relative to the code's start (which the code zone aligns as much).
pub const LOOP_ALIGN: u32 = 64;

/// Code generation failed.
#[derive(Debug, Error)]
pub enum JitError {
    /// The assembler refused (a bug of a template).
    #[error("assembler: {0}")]
    Asm(String),
    /// A frame offset does not fit a displacement.
    #[error("frame too large")]
    FrameTooLarge,
}

impl From<dynasmrt::DynasmError> for JitError {
    fn from(e: dynasmrt::DynasmError) -> Self {
        JitError::Asm(e.to_string())
    }
}

/// A send to inline: the class the guard expects and the method it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inline {
    /// Receiver class the inlined code is for.
    pub class: ClassId,
    /// The inlined method.
    pub callee: MethodId,
}

/// Sends of a method to inline, by bcpc.
pub type InlinePlan = HashMap<u32, Inline>;

fn offset(ops: &Ops) -> u32 {
    u32::try_from(ops.offset().0).expect("code under 4 GiB")
}

/// `rcx := class tag of rdx` (1 for SmallIntegers, else the object's class word).
fn class_tag_of_rdx(ops: &mut Ops) {
    dynasm!(ops
        ; .arch x64
        ; mov ecx, SMALL_INTEGER.0 as i32
        ; test dl, 1
        ; jnz >tagged
        ; mov rcx, [rdx]
        ; tagged:
    );
}

/// Pads to the next [`LOOP_ALIGN`] boundary, jumping over the padding.
fn align_loop_head(ops: &mut Ops) {
    let pad = (LOOP_ALIGN - offset(ops) % LOOP_ALIGN) % LOOP_ALIGN;
    match pad {
        0 => {}
        1 => ops.push(0x90),
        _ => {
            ops.push(0xeb);
            ops.push(u8::try_from(pad - 2).expect("padding under 128 bytes"));
            ops.extend(std::iter::repeat_n(0xcc, pad as usize - 2));
        }
    }
}

fn jump_to(ops: &mut Ops, target: u64) {
    dynasm!(ops ; .arch x64 ; mov r11, QWORD target as i64 ; jmp r11);
}

/// The miss stub and the two entries; answers (checked entry, unchecked entry) offsets.
fn header(ops: &mut Ops, addrs: &Addrs) -> (u32, u32) {
    let miss = ops.new_dynamic_label();
    dynasm!(ops ; .arch x64 ; =>miss);
    jump_to(ops, addrs.send_miss);
    let check = offset(ops);
    class_tag_of_rdx(ops);
    dynasm!(ops
        ; .arch x64
        ; cmp rcx, rax
        ; jne =>miss
    );
    let nocheck = offset(ops);
    dynasm!(ops ; .arch x64 ; push rbp ; mov rbp, rsp);
    (check, nocheck)
}

/// `rdx := rax op rcx` on tagged SmallIntegers (tags already checked); jumps to `slow` on
/// overflow. Comparisons answer true or false.
fn arith_op(ops: &mut Ops, addrs: &Addrs, op: ArithOp, slow: DynamicLabel) {
    let (t, f) = (addrs.true_ as i64, addrs.false_ as i64);
    match op {
        ArithOp::Add => dynasm!(ops ; .arch x64
            ; lea rdx, [rax - 1] ; add rdx, rcx ; jo =>slow),
        ArithOp::Sub => dynasm!(ops ; .arch x64
            ; mov rdx, rax ; sub rdx, rcx ; jo =>slow ; or rdx, 1),
        ArithOp::Mul => dynasm!(ops ; .arch x64
            ; mov rdx, rax ; sar rdx, 1 ; lea r8, [rcx - 1] ; imul rdx, r8 ; jo =>slow
            ; or rdx, 1),
        _ => {
            dynasm!(ops ; .arch x64
                ; mov rdx, QWORD f ; mov r8, QWORD t ; cmp rax, rcx);
            match op {
                ArithOp::Lt => dynasm!(ops ; .arch x64 ; cmovl rdx, r8),
                ArithOp::Le => dynasm!(ops ; .arch x64 ; cmovle rdx, r8),
                ArithOp::Gt => dynasm!(ops ; .arch x64 ; cmovg rdx, r8),
                ArithOp::Ge => dynasm!(ops ; .arch x64 ; cmovge rdx, r8),
                _ => dynasm!(ops ; .arch x64 ; cmove rdx, r8),
            }
        }
    }
}

/// Where a frame's variables are, rbp-relative, and how its code maps.
struct Frame {
    method: MethodId,
    recv: i32,
    args: Vec<i32>,
    temps: Vec<i32>,
    /// Global operand depth where this frame's operand stack starts.
    base: usize,
    labels: HashMap<usize, DynamicLabel>,
    inline: Option<InlineCtx>,
}

struct InlineCtx {
    /// Frames of the methods this one is inlined into, below the compiled method, outermost
    /// first (empty when inlined straight into the compiled method).
    chain: Vec<(MethodId, u32)>,
    /// The send's bcpc in the compiled method.
    root_bcpc: u32,
    /// Where inlined code goes on when it returns.
    cont: DynamicLabel,
    /// Slot of the receiver, which receives the answer.
    result_slot: usize,
}

struct Gen<'a> {
    ops: Ops,
    prog: &'a Program,
    addrs: &'a Addrs,
    plan: &'a InlinePlan,
    root_ntemps: usize,
    /// Operand slots in use: depth of the compiled method's stack, inlined frames included.
    depth: usize,
    sites: Vec<SiteInfo>,
    map: Vec<MapEntry>,
}

impl Gen<'_> {
    fn slot(&self, k: usize) -> Result<i32, JitError> {
        let words = i32::try_from(self.root_ntemps + 1 + k).map_err(|_| JitError::FrameTooLarge)?;
        words.checked_mul(-8).ok_or(JitError::FrameTooLarge)
    }

    fn push_map(&mut self, e: MapEntry) {
        match self.map.last_mut() {
            // An empty range says nothing: the later entry describes what follows.
            Some(last) if last.offset == e.offset => *last = e,
            _ => self.map.push(e),
        }
    }

    /// Maps the current address to bytecode `pc` of frame `f`.
    fn mark(&mut self, f: &Frame, pc: usize) {
        let pc = u32::try_from(pc).expect("pc under 64 KiB");
        let e = match &f.inline {
            None => MapEntry {
                offset: offset(&self.ops),
                bcpc: pc,
                inlined: Vec::new(),
            },
            Some(c) => {
                let mut inlined = c.chain.clone();
                inlined.push((f.method, pc));
                MapEntry {
                    offset: offset(&self.ops),
                    bcpc: c.root_bcpc,
                    inlined,
                }
            }
        };
        self.push_map(e);
    }

    fn root_bcpc(f: &Frame, pc: usize) -> u32 {
        f.inline
            .as_ref()
            .map_or(u32::try_from(pc).unwrap_or(u32::MAX), |c| c.root_bcpc)
    }

    /// A linkable send site; leaves the answer in place of the receiver.
    fn send_site(&mut self, f: &Frame, pc: usize, selector: SelId, nargs: u8, arith: bool) {
        let n = i32::from(nargs);
        dynasm!(self.ops
            ; .arch x64
            ; mov rdx, [rsp + 8 * n]
            ; mov rax, QWORD 0
        );
        let tag_imm = offset(&self.ops) - 8;
        dynasm!(self.ops ; .arch x64 ; mov r11, QWORD self.addrs.send_miss as i64);
        let target_imm = offset(&self.ops) - 8;
        dynasm!(self.ops ; .arch x64 ; call r11);
        let ret = offset(&self.ops);
        self.sites.push(SiteInfo {
            tag_imm,
            target_imm,
            ret,
            selector,
            nargs,
            bcpc: Self::root_bcpc(f, pc),
            arith,
            inlined: f.inline.is_some(),
        });
        self.mark(f, pc);
        if n > 0 {
            dynasm!(self.ops ; .arch x64 ; lea rsp, [rsp + 8 * n]);
        }
        dynasm!(self.ops ; .arch x64 ; mov [rsp], rax);
    }

    /// Loads the two operands and checks both are SmallIntegers, else jumps to `slow`.
    fn arith_operands(&mut self, slow: DynamicLabel) {
        dynasm!(self.ops
            ; .arch x64
            ; mov rax, [rsp + 8]
            ; mov rcx, [rsp]
            ; mov edx, eax
            ; and edx, ecx
            ; test dl, 1
            ; jz =>slow
        );
    }

    /// `jumpIfTrue`/`jumpIfFalse` on the value on top of the stack.
    fn cond_jump(&mut self, f: &Frame, pc: usize, when: bool, target: DynamicLabel) {
        let (jumping, other) = if when {
            (self.addrs.true_, self.addrs.false_)
        } else {
            (self.addrs.false_, self.addrs.true_)
        };
        dynasm!(self.ops
            ; .arch x64
            ; pop rax
            ; mov rcx, QWORD jumping as i64
            ; cmp rax, rcx
            ; je =>target
        );
        self.mark(f, pc);
        dynasm!(self.ops
            ; .arch x64
            ; mov rcx, QWORD other as i64
            ; cmp rax, rcx
            ; je >boolean
            ; mov r11, QWORD self.addrs.must_be_boolean as i64
            ; call r11
            ; boolean:
        );
    }

    /// Answers from an inlined frame: the answer replaces its receiver, on to the continuation.
    fn inline_return(&mut self, c: &InlineCtx) -> Result<(), JitError> {
        let slot = self.slot(c.result_slot)?;
        dynasm!(self.ops
            ; .arch x64
            ; mov [rbp + slot], rax
            ; lea rsp, [rbp + slot]
            ; jmp =>c.cont
        );
        Ok(())
    }

    fn label(f: &Frame, pc: u16) -> Result<DynamicLabel, JitError> {
        f.labels
            .get(&usize::from(pc))
            .copied()
            .ok_or_else(|| JitError::Asm(format!("no label for pc {pc}")))
    }

    /// Compiles the bytecode of frame `f`.
    fn body(&mut self, f: &Frame) -> Result<(), JitError> {
        let prog = self.prog;
        let m = prog.method(f.method);
        let insns: Vec<(usize, Insn, usize)> = m.info.instructions(&m.code).collect();
        let mut fused_away = None;
        for (idx, &(pc, insn, next)) in insns.iter().enumerate() {
            if let Some(&l) = f.labels.get(&pc) {
                if m.info.loop_heads[pc] {
                    align_loop_head(&mut self.ops);
                }
                dynasm!(self.ops ; .arch x64 ; =>l);
                // Loop heads are mapped too, so that a loop's code maps to the loop's bytecodes
                // from its first instruction on.
                if m.info.loop_heads[pc] {
                    self.mark(f, pc);
                }
            }
            if fused_away == Some(pc) {
                continue;
            }
            self.depth = f.base + usize::from(m.info.depth[pc].unwrap_or(0));
            match insn {
                Insn::PushSelf => dynasm!(self.ops ; .arch x64 ; push QWORD [rbp + f.recv]),
                Insn::PushArg(i) => {
                    let o = f.args[usize::from(i)];
                    dynasm!(self.ops ; .arch x64 ; push QWORD [rbp + o]);
                }
                Insn::PushTemp(i) => {
                    let o = f.temps[usize::from(i)];
                    dynasm!(self.ops ; .arch x64 ; push QWORD [rbp + o]);
                }
                Insn::PushInstVar(i) => {
                    let o = 16 + 8 * i32::from(i);
                    dynasm!(self.ops ; .arch x64
                        ; mov rax, [rbp + f.recv] ; push QWORD [rax + o]);
                }
                Insn::PushInt(v) => {
                    let tagged = i64::from(v) * 2 + 1;
                    match i32::try_from(tagged) {
                        Ok(t) => dynasm!(self.ops ; .arch x64 ; push t),
                        Err(_) => dynasm!(self.ops ; .arch x64 ; mov rax, QWORD tagged ; push rax),
                    }
                }
                Insn::PushNil | Insn::PushTrue | Insn::PushFalse => {
                    let v = match insn {
                        Insn::PushNil => self.addrs.nil,
                        Insn::PushTrue => self.addrs.true_,
                        _ => self.addrs.false_,
                    };
                    dynasm!(self.ops ; .arch x64 ; mov rax, QWORD v as i64 ; push rax);
                }
                Insn::StoreTemp(i) => {
                    let o = f.temps[usize::from(i)];
                    dynasm!(self.ops ; .arch x64 ; mov rax, [rsp] ; mov [rbp + o], rax);
                }
                Insn::PopStoreTemp(i) => {
                    let o = f.temps[usize::from(i)];
                    dynasm!(self.ops ; .arch x64 ; pop rax ; mov [rbp + o], rax);
                }
                Insn::Pop => dynasm!(self.ops ; .arch x64 ; lea rsp, [rsp + 8]),
                Insn::Dup => dynasm!(self.ops ; .arch x64 ; push QWORD [rsp]),
                Insn::Send(sel, n) => {
                    let planned = u32::try_from(pc).ok().and_then(|p| self.plan.get(&p));
                    match planned {
                        Some(&inl) if f.inline.is_none() => self.inline_send(f, pc, sel, n, inl)?,
                        _ => self.send_site(f, pc, sel, n, false),
                    }
                }
                Insn::Arith(op) => {
                    let branch = insns
                        .get(idx + 1)
                        .filter(|&&(p, _, _)| p == next && !m.info.targets[p])
                        .and_then(|&(p, i, _)| match i {
                            Insn::JumpIfFalse(t) if op.is_comparison() => Some((p, false, t)),
                            Insn::JumpIfTrue(t) if op.is_comparison() => Some((p, true, t)),
                            _ => None,
                        });
                    match branch {
                        Some((bpc, when, t)) => {
                            fused_away = Some(bpc);
                            self.compare_branch(f, pc, op, bpc, when, Self::label(f, t)?);
                        }
                        None => self.arith(f, pc, op),
                    }
                }
                Insn::Jump(t) => {
                    let l = Self::label(f, t)?;
                    dynasm!(self.ops ; .arch x64 ; jmp =>l);
                    self.mark(f, pc);
                }
                Insn::JumpIfFalse(t) => self.cond_jump(f, pc, false, Self::label(f, t)?),
                Insn::JumpIfTrue(t) => self.cond_jump(f, pc, true, Self::label(f, t)?),
                Insn::ReturnTop => {
                    dynasm!(self.ops ; .arch x64 ; pop rax);
                    match &f.inline {
                        None => dynasm!(self.ops ; .arch x64 ; leave ; ret),
                        Some(c) => self.inline_return(c)?,
                    }
                }
                Insn::ReturnSelf => {
                    dynasm!(self.ops ; .arch x64 ; mov rax, [rbp + f.recv]);
                    match &f.inline {
                        None => dynasm!(self.ops ; .arch x64 ; leave ; ret),
                        Some(c) => self.inline_return(c)?,
                    }
                }
                Insn::NewArray => {
                    dynasm!(self.ops
                        ; .arch x64
                        ; pop rdi
                        ; mov r11, QWORD self.addrs.new_array as i64
                        ; call r11
                    );
                    self.mark(f, pc);
                    dynasm!(self.ops ; .arch x64 ; push rax);
                }
            }
        }
        Ok(())
    }

    /// Special arithmetic with its SmallInteger fast path, else a send.
    fn arith(&mut self, f: &Frame, pc: usize, op: ArithOp) {
        let slow = self.ops.new_dynamic_label();
        let done = self.ops.new_dynamic_label();
        self.arith_operands(slow);
        arith_op(&mut self.ops, self.addrs, op, slow);
        dynasm!(self.ops
            ; .arch x64
            ; lea rsp, [rsp + 8]
            ; mov [rsp], rdx
            ; jmp =>done
            ; =>slow
        );
        self.send_site(f, pc, op.selector(), 1, true);
        dynasm!(self.ops ; .arch x64 ; =>done);
    }

    /// A comparison followed by a conditional jump: compare and branch on the fast path.
    fn compare_branch(
        &mut self,
        f: &Frame,
        pc: usize,
        op: ArithOp,
        branch_pc: usize,
        when: bool,
        target: DynamicLabel,
    ) {
        let slow = self.ops.new_dynamic_label();
        let done = self.ops.new_dynamic_label();
        self.arith_operands(slow);
        dynasm!(self.ops ; .arch x64 ; lea rsp, [rsp + 16] ; cmp rax, rcx);
        // Jump when the comparison's outcome is `when`.
        let ops = &mut self.ops;
        match (op, when) {
            (ArithOp::Lt, true) | (ArithOp::Ge, false) => dynasm!(ops ; .arch x64 ; jl =>target),
            (ArithOp::Lt, false) | (ArithOp::Ge, true) => dynasm!(ops ; .arch x64 ; jge =>target),
            (ArithOp::Le, true) | (ArithOp::Gt, false) => dynasm!(ops ; .arch x64 ; jle =>target),
            (ArithOp::Le, false) | (ArithOp::Gt, true) => dynasm!(ops ; .arch x64 ; jg =>target),
            (_, true) => dynasm!(ops ; .arch x64 ; je =>target),
            (_, false) => dynasm!(ops ; .arch x64 ; jne =>target),
        }
        self.mark(f, branch_pc);
        dynasm!(self.ops ; .arch x64 ; jmp =>done ; =>slow);
        self.send_site(f, pc, op.selector(), 1, true);
        self.cond_jump(f, branch_pc, when, target);
        dynasm!(self.ops ; .arch x64 ; =>done);
    }

    /// A send inlined behind a class guard, with a normal send as the fallback.
    fn inline_send(
        &mut self,
        f: &Frame,
        pc: usize,
        sel: SelId,
        nargs: u8,
        inl: Inline,
    ) -> Result<(), JitError> {
        let callee = self.prog.method(inl.callee);
        let n = usize::from(nargs);
        let d = self.depth;
        let rs = d - 1 - n;
        let fast = self.ops.new_dynamic_label();
        let cont = self.ops.new_dynamic_label();
        let class = i32::try_from(inl.class.0).map_err(|_| JitError::FrameTooLarge)?;
        dynasm!(self.ops ; .arch x64 ; mov rdx, [rsp + 8 * n as i32]);
        class_tag_of_rdx(&mut self.ops);
        dynasm!(self.ops ; .arch x64 ; cmp rcx, DWORD class ; je =>fast);
        self.send_site(f, pc, sel, nargs, false);
        dynasm!(self.ops ; .arch x64 ; jmp =>cont ; =>fast);
        let mut chain = f
            .inline
            .as_ref()
            .map(|c| c.chain.clone())
            .unwrap_or_default();
        if f.inline.is_some() {
            chain.push((f.method, u32::try_from(pc).unwrap_or(u32::MAX)));
        }
        let ntemps = usize::from(callee.ntemps);
        let frame = Frame {
            method: inl.callee,
            recv: self.slot(rs)?,
            args: (0..n)
                .map(|i| self.slot(rs + 1 + i))
                .collect::<Result<_, _>>()?,
            temps: (0..ntemps)
                .map(|j| self.slot(d + j))
                .collect::<Result<_, _>>()?,
            base: d + ntemps,
            labels: jump_labels(&mut self.ops, self.prog, inl.callee),
            inline: Some(InlineCtx {
                chain,
                root_bcpc: Self::root_bcpc(f, pc),
                cont,
                result_slot: rs,
            }),
        };
        self.mark(&frame, 0);
        if self.addrs.counters != 0 {
            // The inlined activation counts as its method's, as its prologue would have.
            let counter = self.addrs.counters + 8 * u64::from(inl.callee.0);
            dynasm!(self.ops ; .arch x64 ; mov r11, QWORD counter as i64 ; add QWORD [r11], 1);
            if self.addrs.sends != 0 {
                let sends = self.addrs.sends;
                dynasm!(self.ops ; .arch x64 ; mov r11, QWORD sends as i64 ; add QWORD [r11], 1);
            }
        }
        if ntemps > 0 {
            dynasm!(self.ops ; .arch x64 ; mov rax, QWORD self.addrs.nil as i64);
            for _ in 0..ntemps {
                dynasm!(self.ops ; .arch x64 ; push rax);
            }
        }
        self.body(&frame)?;
        dynasm!(self.ops ; .arch x64 ; =>cont);
        self.mark(f, pc);
        Ok(())
    }
}

fn jump_labels(ops: &mut Ops, prog: &Program, id: MethodId) -> HashMap<usize, DynamicLabel> {
    let m = prog.method(id);
    (0..m.code.len())
        .filter(|&pc| m.info.targets[pc])
        .map(|pc| (pc, ops.new_dynamic_label()))
        .collect()
}

/// Compiles method `id`. `counter`: address of its call counter, incremented on every entry
/// (baseline code); `plan`: sends to inline (optimised code).
pub fn compile_method(
    prog: &Program,
    id: MethodId,
    addrs: &Addrs,
    counter: Option<u64>,
    plan: &InlinePlan,
) -> Result<CompiledCode, JitError> {
    let m = prog.method(id);
    let mut ops = Ops::new(0);
    let (check_entry, nocheck_entry) = header(&mut ops, addrs);
    if let Some(p) = m.primitive {
        primitive(&mut ops, p, addrs);
        return Ok(CompiledCode {
            code: ops.finalize()?,
            check_entry,
            nocheck_entry,
            sites: Vec::new(),
            pc_map: Vec::new(),
        });
    }
    dynasm!(ops
        ; .arch x64
        ; mov r11, QWORD addrs.stack_limit as i64
        ; cmp rsp, [r11]
        ; jae >stack_ok
        ; mov r11, QWORD addrs.stack_overflow as i64
        ; call r11
        ; stack_ok:
    );
    if let Some(c) = counter {
        dynasm!(ops ; .arch x64 ; mov r11, QWORD c as i64 ; add QWORD [r11], 1);
        if addrs.sends != 0 {
            let sends = addrs.sends;
            dynasm!(ops ; .arch x64 ; mov r11, QWORD sends as i64 ; add QWORD [r11], 1);
        }
    }
    if m.ntemps > 0 {
        dynasm!(ops ; .arch x64 ; mov rax, QWORD addrs.nil as i64);
        for _ in 0..m.ntemps {
            dynasm!(ops ; .arch x64 ; push rax);
        }
    }
    let n = i32::from(m.nargs);
    let labels = jump_labels(&mut ops, prog, id);
    let frame = Frame {
        method: id,
        recv: 16 + 8 * n,
        args: (0..n).map(|i| 16 + 8 * (n - 1 - i)).collect(),
        temps: (0..i32::from(m.ntemps)).map(|j| -8 * (1 + j)).collect(),
        base: 0,
        labels,
        inline: None,
    };
    let mut g = Gen {
        ops,
        prog,
        addrs,
        plan,
        root_ntemps: usize::from(m.ntemps),
        depth: 0,
        sites: Vec::new(),
        map: Vec::new(),
    };
    g.body(&frame)?;
    // Nothing falls off the end (the verifier made sure); the int3 keeps the last mapped pc
    // (after a final jump) inside the method.
    dynasm!(g.ops ; .arch x64 ; int3);
    Ok(CompiledCode {
        code: g.ops.finalize()?,
        check_entry,
        nocheck_entry,
        sites: g.sites,
        pc_map: g.map,
    })
}

/// The native body of a primitive method; failure goes to the primitive-fail trampoline.
fn primitive(ops: &mut Ops, p: Primitive, addrs: &Addrs) {
    let fail = ops.new_dynamic_label();
    match p {
        Primitive::Arith(op) => {
            dynasm!(ops
                ; .arch x64
                ; mov rax, [rbp + 24]
                ; mov rcx, [rbp + 16]
                ; mov edx, eax
                ; and edx, ecx
                ; test dl, 1
                ; jz =>fail
            );
            // Same operation as the inline fast path.
            arith_op(ops, addrs, op, fail);
            dynasm!(ops ; .arch x64 ; mov rax, rdx ; leave ; ret);
        }
        Primitive::At | Primitive::AtPut => {
            let nargs = if p == Primitive::At { 1 } else { 2 };
            let (recv, index) = (16 + 8 * nargs, 8 + 8 * nargs);
            dynasm!(ops
                ; .arch x64
                ; mov rax, [rbp + recv]
                ; mov rcx, [rbp + index]
                ; test cl, 1
                ; jz =>fail
                ; sar rcx, 1
                ; cmp rcx, 1
                ; jl =>fail
                ; cmp rcx, [rax + 8]
                ; jg =>fail
            );
            if p == Primitive::At {
                dynasm!(ops ; .arch x64 ; mov rax, [rax + rcx * 8 + 8]);
            } else {
                dynasm!(ops ; .arch x64
                    ; mov rdx, [rbp + 16] ; mov [rax + rcx * 8 + 8], rdx ; mov rax, rdx);
            }
            dynasm!(ops ; .arch x64 ; leave ; ret);
        }
    }
    dynasm!(ops
        ; .arch x64
        ; =>fail
        ; mov r11, QWORD addrs.prim_fail as i64
        ; call r11
        ; int3
    );
}

/// A closed PIC: compares the receiver's class tag with each case's class and jumps to that
/// case's unchecked entry; otherwise to the send-miss trampoline.
pub fn compile_closed_pic(cases: &[(ClassId, u64)], addrs: &Addrs) -> Result<Vec<u8>, JitError> {
    let mut ops = Ops::new(0);
    class_tag_of_rdx(&mut ops);
    for &(class, target) in cases {
        let class = i32::try_from(class.0).map_err(|_| JitError::FrameTooLarge)?;
        dynasm!(ops
            ; .arch x64
            ; cmp rcx, DWORD class
            ; jne >next
            ; mov r11, QWORD target as i64
            ; jmp r11
            ; next:
        );
    }
    jump_to(&mut ops, addrs.send_miss);
    dynasm!(ops ; .arch x64 ; int3);
    Ok(ops.finalize()?)
}

/// An open PIC: probes two slots of the hashed table at `table` (`OPEN_PIC_SLOTS` pairs of
/// class tag and unchecked entry, slot = tag mod size, then the next one); otherwise to the
/// send-miss trampoline.
pub fn compile_open_pic(table: u64, addrs: &Addrs) -> Result<Vec<u8>, JitError> {
    let mask = i32::try_from((OPEN_PIC_SLOTS - 1) << 4).map_err(|_| JitError::FrameTooLarge)?;
    let mut ops = Ops::new(0);
    class_tag_of_rdx(&mut ops);
    dynasm!(ops
        ; .arch x64
        ; mov r11, QWORD table as i64
        ; mov r8, rcx
        ; shl r8, 4
        ; and r8, mask
        ; cmp [r11 + r8], rcx
        ; jne >second
        ; jmp QWORD [r11 + r8 + 8]
        ; second:
        ; add r8, 16
        ; and r8, mask
        ; cmp [r11 + r8], rcx
        ; jne >miss
        ; jmp QWORD [r11 + r8 + 8]
        ; miss:
    );
    jump_to(&mut ops, addrs.send_miss);
    dynasm!(ops ; .arch x64 ; int3);
    Ok(ops.finalize()?)
}

/// The slot an open PIC probes first for a class tag.
pub fn open_pic_slot(class: ClassId) -> usize {
    class.0 as usize % OPEN_PIC_SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::benchmarks;
    use crate::jit::encoding::{CALL_R11, MOV_R11_IMM64, MOV_RAX_IMM64};

    fn addrs() -> Addrs {
        Addrs {
            send_miss: 0x1111_2222_3333,
            new_array: 0x2222,
            prim_fail: 0x3333,
            must_be_boolean: 0x4444,
            stack_overflow: 0x5555,
            stack_limit: 0x6666,
            counters: 0,
            sends: 0,
            nil: 0x10,
            true_: 0x20,
            false_: 0x30,
        }
    }

    #[test]
    fn send_sites_have_the_patchable_shape() {
        let (p, m) = benchmarks::program().unwrap();
        let c = compile_method(&p, m.bench_fib, &addrs(), Some(0x5000), &HashMap::new()).unwrap();
        // Two benchFib sends, and the slow paths of <, -, -, +, +.
        assert_eq!(c.sites.iter().filter(|s| !s.arith).count(), 2);
        assert_eq!(c.sites.len(), 7);
        for s in &c.sites {
            let (t, g, r) = (s.tag_imm as usize, s.target_imm as usize, s.ret as usize);
            assert_eq!(c.code[t - 2..t], MOV_RAX_IMM64);
            assert_eq!(c.code[g - 2..g], MOV_R11_IMM64);
            assert_eq!(c.code[g..g + 8], 0x1111_2222_3333u64.to_le_bytes());
            assert_eq!(c.code[r - 3..r], CALL_R11);
            assert!(
                c.pc_map
                    .iter()
                    .any(|e| e.offset == s.ret && e.bcpc == s.bcpc)
            );
        }
        assert!(c.pc_map.windows(2).all(|w| w[0].offset < w[1].offset));
        assert!(c.pc_map.iter().all(|e| (e.offset as usize) < c.code.len()));
        assert!(c.check_entry < c.nocheck_entry);
    }

    /// `Inline>>run` compiled with `heavy` and `light` inlined.
    fn inline_run_optimised() -> (Program, benchmarks::Methods, CompiledCode) {
        let (p, m) = benchmarks::program().unwrap();
        let run = p.method(m.inline_run);
        let plan: InlinePlan = run
            .info
            .instructions(&run.code)
            .filter_map(|(pc, i, _)| match i {
                Insn::Send(sel, _) => Some((
                    pc as u32,
                    Inline {
                        class: m.inline_class,
                        callee: p.lookup(m.inline_class, sel).unwrap(),
                    },
                )),
                _ => None,
            })
            .collect();
        assert_eq!(plan.len(), 2);
        let c = compile_method(&p, m.inline_run, &addrs(), None, &plan).unwrap();
        (p, m, c)
    }

    #[test]
    fn inlined_code_maps_to_inlined_frames() {
        let (_, m, c) = inline_run_optimised();
        for callee in [m.heavy, m.light] {
            let frames: Vec<_> = c
                .pc_map
                .iter()
                .filter(|e| e.inlined.first().is_some_and(|f| f.0 == callee))
                .collect();
            assert!(frames.len() > 3, "{callee:?}: {:?}", c.pc_map);
            assert!(frames.iter().any(|e| e.inlined[0].1 == 0));
        }
        // Back in run's own code after each inlined body.
        assert!(c.pc_map.last().unwrap().inlined.is_empty());
    }

    /// The inline workload's 70/30 split holds in machine time only if both inlined copies of
    /// its loops run alike: each loop head starts a [`LOOP_ALIGN`] block, and from there on
    /// both copies lay out their bytecodes at the same offsets.
    #[test]
    fn inlined_loops_are_aligned_alike() {
        let (p, m, c) = inline_run_optimised();
        let layout = |callee: MethodId| -> Vec<(u32, u32)> {
            let body: Vec<(u32, u32)> = c
                .pc_map
                .iter()
                .filter_map(|e| match e.inlined.first() {
                    Some(&(id, pc)) if id == callee => Some((pc, e.offset)),
                    _ => None,
                })
                .collect();
            let heads: Vec<u32> = body
                .iter()
                .filter(|&&(pc, _)| p.method(callee).info.loop_heads[pc as usize])
                .map(|&(_, offset)| offset)
                .collect();
            assert_eq!(heads.len(), 2, "{callee:?}: an outer and an inner loop");
            for &h in &heads {
                assert_eq!(h % LOOP_ALIGN, 0, "{callee:?}: loop head at {h:#x}");
            }
            body.iter()
                .filter(|&&(_, offset)| offset >= heads[0])
                .map(|&(pc, offset)| (pc, offset - heads[0]))
                .collect()
        };
        assert_eq!(layout(m.heavy), layout(m.light));
    }
}
