//! The bytecode: one-byte opcodes with inline operands, a builder with labels, a verifier that
//! computes the operand stack depth at every pc, and listings.
//!
//! pcs are 0-based byte offsets. Jumps carry their absolute target pc; a jump whose target is
//! not after it is a back jump (a loop). Special arithmetic and comparisons (`+ - * < <= > >=
//! =`) are bytecodes of their own, as in Smalltalk, so that the JIT can give them a SmallInteger
//! fast path; when it does not apply they send their selector. Everything else is a send.
//!
//! | opcode | operands | stack | meaning |
//! |---|---|---|---|
//! | `pushSelf` | | +1 | the receiver |
//! | `pushArg n` | u8 | +1 | argument n |
//! | `pushTemp n` | u8 | +1 | temporary n |
//! | `pushInstVar n` | u8 | +1 | slot n+1 of the receiver |
//! | `pushInt v` | i32 | +1 | a SmallInteger |
//! | `pushNil` `pushTrue` `pushFalse` | | +1 | constants |
//! | `storeTemp n` | u8 | 0 | top into temporary n |
//! | `popIntoTemp n` | u8 | -1 | pop into temporary n |
//! | `pop` `dup` | | -1 / +1 | |
//! | `send sel n` | u16, u8 | -n | send `sel` with n arguments |
//! | `+` `-` `*` `<` `<=` `>` `>=` `=` | | -1 | special arithmetic |
//! | `jump t` `jumpIfFalse t` `jumpIfTrue t` | u16 | 0 / -1 | |
//! | `returnTop` `returnSelf` | | | |
//! | `newArray` | | 0 | `Array new: top` |

use std::collections::HashMap;
use std::fmt::Write as _;

use thiserror::Error;

/// Opcodes.
#[allow(missing_docs)]
pub mod op {
    pub const PUSH_SELF: u8 = 0x01;
    pub const PUSH_ARG: u8 = 0x02;
    pub const PUSH_TEMP: u8 = 0x03;
    pub const PUSH_INST_VAR: u8 = 0x04;
    pub const PUSH_INT: u8 = 0x05;
    pub const PUSH_NIL: u8 = 0x06;
    pub const PUSH_TRUE: u8 = 0x07;
    pub const PUSH_FALSE: u8 = 0x08;
    pub const STORE_TEMP: u8 = 0x10;
    pub const POP_STORE_TEMP: u8 = 0x11;
    pub const POP: u8 = 0x12;
    pub const DUP: u8 = 0x13;
    pub const SEND: u8 = 0x20;
    pub const ARITH: u8 = 0x30; // 0x30..=0x37, in ArithOp order
    pub const JUMP: u8 = 0x40;
    pub const JUMP_IF_FALSE: u8 = 0x41;
    pub const JUMP_IF_TRUE: u8 = 0x42;
    pub const RETURN_TOP: u8 = 0x50;
    pub const RETURN_SELF: u8 = 0x51;
    pub const NEW_ARRAY: u8 = 0x60;
}

/// A selector, interned in [`Selectors`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SelId(pub u16);

/// Special arithmetic and comparison bytecodes, with their selectors.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
}

impl ArithOp {
    /// All of them, in opcode order.
    pub const ALL: [ArithOp; 8] = [
        ArithOp::Add,
        ArithOp::Sub,
        ArithOp::Mul,
        ArithOp::Lt,
        ArithOp::Le,
        ArithOp::Gt,
        ArithOp::Ge,
        ArithOp::Eq,
    ];

    /// The selector sent when the fast path does not apply (interned first, see
    /// [`Selectors::new`], so its id is its index).
    pub fn selector(self) -> SelId {
        SelId(self as u16)
    }

    /// Its name, which is also its selector.
    pub fn name(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Lt => "<",
            ArithOp::Le => "<=",
            ArithOp::Gt => ">",
            ArithOp::Ge => ">=",
            ArithOp::Eq => "=",
        }
    }

    /// Whether it answers a Boolean.
    pub fn is_comparison(self) -> bool {
        !matches!(self, ArithOp::Add | ArithOp::Sub | ArithOp::Mul)
    }

    /// The operation on integers: `None` on SmallInteger overflow. Comparisons answer 0 or 1.
    pub fn apply(self, a: i64, b: i64) -> Option<i64> {
        let r = match self {
            ArithOp::Add => a.checked_add(b)?,
            ArithOp::Sub => a.checked_sub(b)?,
            ArithOp::Mul => a.checked_mul(b)?,
            ArithOp::Lt => i64::from(a < b),
            ArithOp::Le => i64::from(a <= b),
            ArithOp::Gt => i64::from(a > b),
            ArithOp::Ge => i64::from(a >= b),
            ArithOp::Eq => i64::from(a == b),
        };
        crate::value::Value::int(r).map(|_| r)
    }
}

/// The selector `at:`.
pub const SEL_AT: SelId = SelId(8);
/// The selector `at:put:`.
pub const SEL_AT_PUT: SelId = SelId(9);

/// Interned selectors.
#[derive(Debug, Clone)]
pub struct Selectors {
    names: Vec<String>,
    index: HashMap<String, SelId>,
}

impl Default for Selectors {
    fn default() -> Self {
        Self::new()
    }
}

impl Selectors {
    /// The table with the special selectors first (`+` is 0 ... `=` is 7), then `at:`, `at:put:`.
    pub fn new() -> Selectors {
        let mut s = Selectors {
            names: Vec::new(),
            index: HashMap::new(),
        };
        for op in ArithOp::ALL {
            s.intern(op.name());
        }
        assert_eq!(s.intern("at:"), SEL_AT);
        assert_eq!(s.intern("at:put:"), SEL_AT_PUT);
        s
    }

    /// The id of `name`, interning it if new.
    pub fn intern(&mut self, name: &str) -> SelId {
        if let Some(&id) = self.index.get(name) {
            return id;
        }
        let id = SelId(u16::try_from(self.names.len()).expect("fewer than 65536 selectors"));
        self.names.push(name.to_owned());
        self.index.insert(name.to_owned(), id);
        id
    }

    /// The name of a selector.
    pub fn name(&self, id: SelId) -> &str {
        self.names
            .get(usize::from(id.0))
            .map_or("?", String::as_str)
    }

    /// The number of arguments a selector takes, from its shape (`+` 1, `at:put:` 2, `area` 0).
    pub fn arity(&self, id: SelId) -> u8 {
        let name = self.name(id);
        if !name.starts_with(|c: char| c.is_alphabetic()) {
            1
        } else {
            u8::try_from(name.matches(':').count()).unwrap_or(u8::MAX)
        }
    }
}

/// A decoded instruction.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insn {
    PushSelf,
    PushArg(u8),
    PushTemp(u8),
    PushInstVar(u8),
    PushInt(i32),
    PushNil,
    PushTrue,
    PushFalse,
    StoreTemp(u8),
    PopStoreTemp(u8),
    Pop,
    Dup,
    Send(SelId, u8),
    Arith(ArithOp),
    Jump(u16),
    JumpIfFalse(u16),
    JumpIfTrue(u16),
    ReturnTop,
    ReturnSelf,
    NewArray,
}

/// What is wrong with some bytecode.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BytecodeError {
    /// Unknown opcode.
    #[error("pc {pc}: unknown opcode {opcode:#04x}")]
    UnknownOpcode {
        /// Where.
        pc: usize,
        /// The byte.
        opcode: u8,
    },
    /// Operands run past the end of the method.
    #[error("pc {0}: truncated instruction")]
    Truncated(usize),
    /// An operand is out of range (argument, temporary, slot, jump target, arity).
    #[error("pc {pc}: {what}")]
    BadOperand {
        /// Where.
        pc: usize,
        /// What.
        what: String,
    },
    /// The operand stack would underflow.
    #[error("pc {0}: operand stack underflow")]
    Underflow(usize),
    /// Two paths reach a pc with different stack depths.
    #[error("pc {pc}: stack depth {a} on one path, {b} on another")]
    DepthMismatch {
        /// Where.
        pc: usize,
        /// One depth.
        a: u16,
        /// The other.
        b: u16,
    },
    /// Execution can run off the end of the method.
    #[error("control falls off the end of the method")]
    FallsOffEnd,
    /// A label was used but never bound.
    #[error("label {0} never bound")]
    UnboundLabel(usize),
}

/// Decodes the instruction at `pc`: the instruction and the pc of the next one.
pub fn decode(code: &[u8], pc: usize) -> Result<(Insn, usize), BytecodeError> {
    let byte = |i: usize| {
        code.get(pc + i)
            .copied()
            .ok_or(BytecodeError::Truncated(pc))
    };
    let u16_at = |i: usize| Ok::<u16, BytecodeError>(u16::from_le_bytes([byte(i)?, byte(i + 1)?]));
    let opcode = byte(0)?;
    let (insn, len) = match opcode {
        op::PUSH_SELF => (Insn::PushSelf, 1),
        op::PUSH_ARG => (Insn::PushArg(byte(1)?), 2),
        op::PUSH_TEMP => (Insn::PushTemp(byte(1)?), 2),
        op::PUSH_INST_VAR => (Insn::PushInstVar(byte(1)?), 2),
        op::PUSH_INT => (
            Insn::PushInt(i32::from_le_bytes([byte(1)?, byte(2)?, byte(3)?, byte(4)?])),
            5,
        ),
        op::PUSH_NIL => (Insn::PushNil, 1),
        op::PUSH_TRUE => (Insn::PushTrue, 1),
        op::PUSH_FALSE => (Insn::PushFalse, 1),
        op::STORE_TEMP => (Insn::StoreTemp(byte(1)?), 2),
        op::POP_STORE_TEMP => (Insn::PopStoreTemp(byte(1)?), 2),
        op::POP => (Insn::Pop, 1),
        op::DUP => (Insn::Dup, 1),
        op::SEND => (Insn::Send(SelId(u16_at(1)?), byte(3)?), 4),
        b if (op::ARITH..op::ARITH + 8).contains(&b) => {
            (Insn::Arith(ArithOp::ALL[usize::from(b - op::ARITH)]), 1)
        }
        op::JUMP => (Insn::Jump(u16_at(1)?), 3),
        op::JUMP_IF_FALSE => (Insn::JumpIfFalse(u16_at(1)?), 3),
        op::JUMP_IF_TRUE => (Insn::JumpIfTrue(u16_at(1)?), 3),
        op::RETURN_TOP => (Insn::ReturnTop, 1),
        op::RETURN_SELF => (Insn::ReturnSelf, 1),
        op::NEW_ARRAY => (Insn::NewArray, 1),
        opcode => return Err(BytecodeError::UnknownOpcode { pc, opcode }),
    };
    Ok((insn, pc + len))
}

impl Insn {
    fn encode(self, out: &mut Vec<u8>) {
        match self {
            Insn::PushSelf => out.push(op::PUSH_SELF),
            Insn::PushArg(n) => out.extend([op::PUSH_ARG, n]),
            Insn::PushTemp(n) => out.extend([op::PUSH_TEMP, n]),
            Insn::PushInstVar(n) => out.extend([op::PUSH_INST_VAR, n]),
            Insn::PushInt(v) => {
                out.push(op::PUSH_INT);
                out.extend(v.to_le_bytes());
            }
            Insn::PushNil => out.push(op::PUSH_NIL),
            Insn::PushTrue => out.push(op::PUSH_TRUE),
            Insn::PushFalse => out.push(op::PUSH_FALSE),
            Insn::StoreTemp(n) => out.extend([op::STORE_TEMP, n]),
            Insn::PopStoreTemp(n) => out.extend([op::POP_STORE_TEMP, n]),
            Insn::Pop => out.push(op::POP),
            Insn::Dup => out.push(op::DUP),
            Insn::Send(sel, n) => {
                out.push(op::SEND);
                out.extend(sel.0.to_le_bytes());
                out.push(n);
            }
            Insn::Arith(a) => out.push(op::ARITH + a as u8),
            Insn::Jump(t) => {
                out.push(op::JUMP);
                out.extend(t.to_le_bytes());
            }
            Insn::JumpIfFalse(t) => {
                out.push(op::JUMP_IF_FALSE);
                out.extend(t.to_le_bytes());
            }
            Insn::JumpIfTrue(t) => {
                out.push(op::JUMP_IF_TRUE);
                out.extend(t.to_le_bytes());
            }
            Insn::ReturnTop => out.push(op::RETURN_TOP),
            Insn::ReturnSelf => out.push(op::RETURN_SELF),
            Insn::NewArray => out.push(op::NEW_ARRAY),
        }
    }

    /// Values popped and pushed.
    pub fn stack_effect(self) -> (u16, u16) {
        match self {
            Insn::PushSelf
            | Insn::PushArg(_)
            | Insn::PushTemp(_)
            | Insn::PushInstVar(_)
            | Insn::PushInt(_)
            | Insn::PushNil
            | Insn::PushTrue
            | Insn::PushFalse => (0, 1),
            Insn::StoreTemp(_) => (1, 1),
            Insn::PopStoreTemp(_) | Insn::Pop => (1, 0),
            Insn::Dup => (1, 2),
            Insn::Send(_, n) => (u16::from(n) + 1, 1),
            Insn::Arith(_) => (2, 1),
            Insn::Jump(_) => (0, 0),
            Insn::JumpIfFalse(_) | Insn::JumpIfTrue(_) => (1, 0),
            Insn::ReturnTop => (1, 0),
            Insn::ReturnSelf => (0, 0),
            Insn::NewArray => (1, 1),
        }
    }

    /// The jump target, for jumps.
    pub fn target(self) -> Option<u16> {
        match self {
            Insn::Jump(t) | Insn::JumpIfFalse(t) | Insn::JumpIfTrue(t) => Some(t),
            _ => None,
        }
    }

    /// Whether control can go on to the next instruction.
    pub fn falls_through(self) -> bool {
        !matches!(self, Insn::Jump(_) | Insn::ReturnTop | Insn::ReturnSelf)
    }

    /// Mnemonic and operands, as in listings.
    pub fn render(self, sels: &Selectors) -> String {
        match self {
            Insn::PushSelf => "pushSelf".into(),
            Insn::PushArg(n) => format!("pushArg {n}"),
            Insn::PushTemp(n) => format!("pushTemp {n}"),
            Insn::PushInstVar(n) => format!("pushInstVar {n}"),
            Insn::PushInt(v) => format!("pushInt {v}"),
            Insn::PushNil => "pushNil".into(),
            Insn::PushTrue => "pushTrue".into(),
            Insn::PushFalse => "pushFalse".into(),
            Insn::StoreTemp(n) => format!("storeTemp {n}"),
            Insn::PopStoreTemp(n) => format!("popIntoTemp {n}"),
            Insn::Pop => "pop".into(),
            Insn::Dup => "dup".into(),
            Insn::Send(sel, n) => format!("send #{} {n}", sels.name(sel)),
            Insn::Arith(a) => format!("special {}", a.name()),
            Insn::Jump(t) => format!("jump {t}"),
            Insn::JumpIfFalse(t) => format!("jumpIfFalse {t}"),
            Insn::JumpIfTrue(t) => format!("jumpIfTrue {t}"),
            Insn::ReturnTop => "returnTop".into(),
            Insn::ReturnSelf => "returnSelf".into(),
            Insn::NewArray => "newArray".into(),
        }
    }
}

/// A forward or backward jump target in a [`Builder`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(usize);

/// Assembles a method's bytecode.
#[derive(Debug)]
pub struct Builder<'s> {
    code: Vec<u8>,
    labels: Vec<Option<u16>>,
    fixups: Vec<(usize, Label)>,
    sels: &'s mut Selectors,
}

impl<'s> Builder<'s> {
    /// An empty method, interning selectors into `sels`.
    pub fn new(sels: &'s mut Selectors) -> Builder<'s> {
        Builder {
            code: Vec::new(),
            labels: Vec::new(),
            fixups: Vec::new(),
            sels,
        }
    }

    fn emit(&mut self, i: Insn) -> &mut Self {
        i.encode(&mut self.code);
        self
    }

    /// The current pc.
    pub fn pc(&self) -> usize {
        self.code.len()
    }

    /// A new unbound label.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Binds `l` here.
    pub fn bind(&mut self, l: Label) -> &mut Self {
        let pc = u16::try_from(self.code.len()).expect("methods are under 64 KiB");
        self.labels[l.0] = Some(pc);
        self
    }

    /// A new label bound here (a loop head).
    pub fn here(&mut self) -> Label {
        let l = self.label();
        self.bind(l);
        l
    }

    /// `pushSelf`.
    pub fn push_self(&mut self) -> &mut Self {
        self.emit(Insn::PushSelf)
    }
    /// `pushArg n`.
    pub fn push_arg(&mut self, n: u8) -> &mut Self {
        self.emit(Insn::PushArg(n))
    }
    /// `pushTemp n`.
    pub fn push_temp(&mut self, n: u8) -> &mut Self {
        self.emit(Insn::PushTemp(n))
    }
    /// `pushInstVar n`.
    pub fn push_inst_var(&mut self, n: u8) -> &mut Self {
        self.emit(Insn::PushInstVar(n))
    }
    /// `pushInt v`.
    pub fn push_int(&mut self, v: i32) -> &mut Self {
        self.emit(Insn::PushInt(v))
    }
    /// `pushNil`.
    pub fn push_nil(&mut self) -> &mut Self {
        self.emit(Insn::PushNil)
    }
    /// `pushTrue`.
    pub fn push_true(&mut self) -> &mut Self {
        self.emit(Insn::PushTrue)
    }
    /// `pushFalse`.
    pub fn push_false(&mut self) -> &mut Self {
        self.emit(Insn::PushFalse)
    }
    /// `storeTemp n`.
    pub fn store_temp(&mut self, n: u8) -> &mut Self {
        self.emit(Insn::StoreTemp(n))
    }
    /// `popIntoTemp n`.
    pub fn pop_into_temp(&mut self, n: u8) -> &mut Self {
        self.emit(Insn::PopStoreTemp(n))
    }
    /// `pop`.
    pub fn pop(&mut self) -> &mut Self {
        self.emit(Insn::Pop)
    }
    /// `dup`.
    pub fn dup(&mut self) -> &mut Self {
        self.emit(Insn::Dup)
    }
    /// `send selector`, with the arity of the selector.
    pub fn send(&mut self, selector: &str) -> &mut Self {
        let sel = self.sels.intern(selector);
        let n = self.sels.arity(sel);
        self.emit(Insn::Send(sel, n))
    }
    /// A special arithmetic or comparison bytecode.
    pub fn arith(&mut self, a: ArithOp) -> &mut Self {
        self.emit(Insn::Arith(a))
    }
    /// `+`.
    pub fn add(&mut self) -> &mut Self {
        self.arith(ArithOp::Add)
    }
    /// `-`.
    pub fn sub(&mut self) -> &mut Self {
        self.arith(ArithOp::Sub)
    }
    /// `*`.
    pub fn mul(&mut self) -> &mut Self {
        self.arith(ArithOp::Mul)
    }
    /// `<`.
    pub fn lt(&mut self) -> &mut Self {
        self.arith(ArithOp::Lt)
    }
    /// `<=`.
    pub fn le(&mut self) -> &mut Self {
        self.arith(ArithOp::Le)
    }
    fn jump_to(&mut self, opcode: fn(u16) -> Insn, l: Label) -> &mut Self {
        let at = self.code.len() + 1;
        self.fixups.push((at, l));
        self.emit(opcode(0))
    }
    /// `jump l`.
    pub fn jump(&mut self, l: Label) -> &mut Self {
        self.jump_to(Insn::Jump, l)
    }
    /// `jumpIfFalse l`.
    pub fn jump_if_false(&mut self, l: Label) -> &mut Self {
        self.jump_to(Insn::JumpIfFalse, l)
    }
    /// `jumpIfTrue l`.
    pub fn jump_if_true(&mut self, l: Label) -> &mut Self {
        self.jump_to(Insn::JumpIfTrue, l)
    }
    /// `returnTop`.
    pub fn return_top(&mut self) -> &mut Self {
        self.emit(Insn::ReturnTop)
    }
    /// `returnSelf`.
    pub fn return_self(&mut self) -> &mut Self {
        self.emit(Insn::ReturnSelf)
    }
    /// `newArray`.
    pub fn new_array(&mut self) -> &mut Self {
        self.emit(Insn::NewArray)
    }

    /// `temp := temp + delta` (statement).
    pub fn inc_temp(&mut self, temp: u8, delta: i32) -> &mut Self {
        self.push_temp(temp)
            .push_int(delta)
            .add()
            .pop_into_temp(temp)
    }

    /// `[temp < limit] whileTrue: [body. temp := temp + 1]`, with `temp` set to `from` first:
    /// the counting loop of `from to: limit - 1 do:`.
    pub fn times_loop(
        &mut self,
        temp: u8,
        from: i32,
        limit: impl FnOnce(&mut Self),
        body: impl FnOnce(&mut Self),
    ) -> &mut Self {
        self.push_int(from).pop_into_temp(temp);
        let head = self.here();
        let done = self.label();
        self.push_temp(temp);
        limit(self);
        self.lt().jump_if_false(done);
        body(self);
        self.inc_temp(temp, 1).jump(head).bind(done)
    }

    /// The bytecode, with jump targets filled in.
    pub fn finish(mut self) -> Result<Vec<u8>, BytecodeError> {
        for (at, l) in std::mem::take(&mut self.fixups) {
            let t = self.labels[l.0].ok_or(BytecodeError::UnboundLabel(l.0))?;
            self.code[at..at + 2].copy_from_slice(&t.to_le_bytes());
        }
        Ok(self.code)
    }
}

/// What the verifier learnt about a method.
#[derive(Debug, Clone, Default)]
pub struct MethodInfo {
    /// Operand stack depth before each instruction (`None`: not an instruction start, or
    /// unreachable).
    pub depth: Vec<Option<u16>>,
    /// Largest operand stack depth.
    pub max_depth: u16,
    /// pcs that some jump targets.
    pub targets: Vec<bool>,
    /// pcs that some back jump targets: loop heads.
    pub loop_heads: Vec<bool>,
    /// pcs of sends whose receiver is certainly `self` (its class is then known statically).
    pub self_sends: Vec<bool>,
    /// Whether the method has `send` bytecodes (special arithmetic does not count).
    pub has_sends: bool,
    /// Whether it loops (has a back jump).
    pub has_loops: bool,
}

impl MethodInfo {
    /// The reachable instructions, in pc order: (pc, instruction, next pc).
    pub fn instructions<'c>(
        &'c self,
        code: &'c [u8],
    ) -> impl Iterator<Item = (usize, Insn, usize)> + 'c {
        (0..code.len()).filter_map(move |pc| {
            self.depth[pc]?;
            let (i, next) = decode(code, pc).ok()?;
            Some((pc, i, next))
        })
    }
}

/// Limits a method's operands are checked against.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Arguments.
    pub nargs: u8,
    /// Temporaries (besides the arguments).
    pub ntemps: u8,
    /// Slots of the receiver's class.
    pub inst_size: usize,
}

/// Verifies a method: every reachable instruction decodes, operands are in range, the stack
/// never underflows, every pc has one depth whatever the path, and control never runs off the
/// end. The JIT relies on all of this: it trusts depths when it addresses stack slots.
pub fn analyze(code: &[u8], shape: Shape, sels: &Selectors) -> Result<MethodInfo, BytecodeError> {
    let n = code.len();
    let mut info = MethodInfo {
        depth: vec![None; n],
        max_depth: 0,
        targets: vec![false; n],
        loop_heads: vec![false; n],
        self_sends: vec![false; n],
        has_sends: false,
        has_loops: false,
    };
    let bad = |pc: usize, what: String| BytecodeError::BadOperand { pc, what };
    let mut work = vec![(0usize, 0u16)];
    while let Some((pc, depth)) = work.pop() {
        if pc >= n {
            return Err(BytecodeError::FallsOffEnd);
        }
        match info.depth[pc] {
            Some(d) if d == depth => continue,
            Some(d) => {
                return Err(BytecodeError::DepthMismatch { pc, a: d, b: depth });
            }
            None => info.depth[pc] = Some(depth),
        }
        let (insn, next) = decode(code, pc)?;
        match insn {
            Insn::PushArg(a) if a >= shape.nargs => {
                return Err(bad(pc, format!("argument {a} of {}", shape.nargs)));
            }
            Insn::PushTemp(t) | Insn::StoreTemp(t) | Insn::PopStoreTemp(t) if t >= shape.ntemps => {
                return Err(bad(pc, format!("temporary {t} of {}", shape.ntemps)));
            }
            Insn::PushInstVar(s) if usize::from(s) >= shape.inst_size => {
                return Err(bad(pc, format!("slot {s} of {}", shape.inst_size)));
            }
            Insn::Send(sel, a) if a != sels.arity(sel) || a > 15 => {
                return Err(bad(pc, format!("#{} with {a} arguments", sels.name(sel))));
            }
            Insn::Send(..) => info.has_sends = true,
            _ => {}
        }
        let (pops, pushes) = insn.stack_effect();
        let after = depth
            .checked_sub(pops)
            .ok_or(BytecodeError::Underflow(pc))?
            + pushes;
        info.max_depth = info.max_depth.max(after).max(depth);
        if let Some(t) = insn.target() {
            let t = usize::from(t);
            if t >= n {
                return Err(bad(pc, format!("jump to {t} past the end")));
            }
            info.targets[t] = true;
            info.loop_heads[t] |= t <= pc;
            info.has_loops |= t <= pc;
            work.push((t, after));
        }
        if insn.falls_through() {
            work.push((next, after));
        }
    }
    // Jump targets must be instruction starts: a target that is not reachable as an
    // instruction start would have been decoded from its own pc above, so check that no
    // reachable instruction overlaps another one.
    let mut covered = vec![false; n];
    for (pc, _, next) in info.instructions(code) {
        for c in &mut covered[pc + 1..next] {
            if *c {
                return Err(bad(pc, "overlapping instructions".into()));
            }
            *c = true;
        }
    }
    for (pc, &c) in covered.iter().enumerate() {
        if c && info.depth[pc].is_some() {
            return Err(bad(pc, "jump into the middle of an instruction".into()));
        }
    }
    // Which stack slots certainly hold self: a linear pass that forgets everything at jump
    // targets (conservative, hence sound).
    let mut is_self: Vec<bool> = Vec::new();
    let mut after_jump = true;
    let insns: Vec<_> = info.instructions(code).collect();
    for (pc, insn, _) in insns {
        let depth = usize::from(info.depth[pc].unwrap_or(0));
        if info.targets[pc] || after_jump || is_self.len() != depth {
            is_self = vec![false; depth];
        }
        if let Insn::Send(_, a) = insn {
            info.self_sends[pc] = is_self[depth - 1 - usize::from(a)];
        }
        let (pops, pushes) = insn.stack_effect();
        let top = is_self.last().copied().unwrap_or(false);
        is_self.truncate(depth - usize::from(pops));
        match insn {
            Insn::PushSelf => is_self.push(true),
            Insn::Dup | Insn::StoreTemp(_) => is_self.extend([top; 2].iter().take(pushes.into())),
            _ => is_self.extend(std::iter::repeat_n(false, pushes.into())),
        }
        after_jump = !insn.falls_through();
    }
    Ok(info)
}

/// The listing of a method's bytecode: one line per instruction, `pc mnemonic operands`,
/// with back jumps marked.
pub fn listing(code: &[u8], sels: &Selectors) -> String {
    let mut out = String::new();
    let mut pc = 0;
    while pc < code.len() {
        match decode(code, pc) {
            Ok((insn, next)) => {
                let back = insn.target().is_some_and(|t| usize::from(t) <= pc);
                let _ = writeln!(
                    out,
                    "{pc:5}  {}{}",
                    insn.render(sels),
                    if back { "   (back jump)" } else { "" }
                );
                pc = next;
            }
            Err(e) => {
                let _ = writeln!(out, "{pc:5}  ?? {e}");
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(nargs: u8, ntemps: u8) -> Shape {
        Shape {
            nargs,
            ntemps,
            inst_size: 0,
        }
    }

    #[test]
    fn builder_round_trips_through_decode_and_listing() {
        let mut sels = Selectors::new();
        let mut b = Builder::new(&mut sels);
        b.times_loop(
            0,
            1,
            |b| {
                b.push_int(10);
            },
            |b| {
                b.push_self().push_temp(0).send("at:").pop();
            },
        );
        b.push_self().send("foo").return_top();
        let code = b.finish().unwrap();
        let info = analyze(&code, shape(0, 1), &sels).unwrap();
        assert!(info.has_sends && info.has_loops);
        let insns: Vec<_> = info.instructions(&code).map(|(_, i, _)| i).collect();
        assert_eq!(insns[0], Insn::PushInt(1));
        assert!(matches!(insns.last(), Some(Insn::ReturnTop)));
        let text = listing(&code, &sels);
        assert!(text.contains("send #at: 1"), "{text}");
        assert!(text.contains("(back jump)"), "{text}");
        // Both sends have self as receiver.
        let selfs: Vec<usize> = (0..code.len()).filter(|&p| info.self_sends[p]).collect();
        assert_eq!(selfs.len(), 2, "{text}");
    }

    #[test]
    fn verifier_rejects_bad_methods() {
        let sels = Selectors::new();
        let check = |code: &[u8], s: Shape| analyze(code, s, &sels);
        assert_eq!(
            check(&[op::POP], shape(0, 0)).unwrap_err(),
            BytecodeError::Underflow(0)
        );
        assert_eq!(
            check(&[op::PUSH_SELF], shape(0, 0)).unwrap_err(),
            BytecodeError::FallsOffEnd
        );
        assert!(matches!(
            check(&[op::PUSH_ARG, 0, op::RETURN_TOP], shape(0, 0)),
            Err(BytecodeError::BadOperand { .. })
        ));
        assert!(matches!(
            check(&[op::PUSH_TEMP, 3, op::RETURN_TOP], shape(0, 1)),
            Err(BytecodeError::BadOperand { .. })
        ));
        assert_eq!(
            check(&[0xff], shape(0, 0)).unwrap_err(),
            BytecodeError::UnknownOpcode {
                pc: 0,
                opcode: 0xff
            }
        );
        assert_eq!(
            check(&[op::PUSH_INT, 1], shape(0, 0)).unwrap_err(),
            BytecodeError::Truncated(0)
        );
        // A loop that pushes on every iteration: depth differs at the head.
        let code = [op::PUSH_NIL, op::JUMP, 0, 0];
        assert!(matches!(
            check(&code, shape(0, 0)),
            Err(BytecodeError::DepthMismatch { .. })
        ));
        // A jump into the operand of pushInt.
        let code = [
            op::PUSH_INT,
            1,
            0,
            0,
            0,
            op::JUMP_IF_TRUE,
            2,
            0,
            op::RETURN_SELF,
        ];
        assert!(check(&code, shape(0, 0)).is_err());
        // Wrong arity for a selector.
        let code = [op::PUSH_SELF, op::SEND, 8, 0, 0, op::RETURN_TOP];
        assert!(matches!(
            check(&code, shape(0, 0)),
            Err(BytecodeError::BadOperand { .. })
        ));
    }

    #[test]
    fn arity_from_selector_shape() {
        let mut s = Selectors::new();
        assert_eq!(s.arity(SEL_AT_PUT), 2);
        let area = s.intern("area");
        assert_eq!(s.arity(area), 0);
        assert_eq!(s.arity(ArithOp::Le.selector()), 1);
        assert_eq!(s.name(ArithOp::Ge.selector()), ">=");
    }
}
