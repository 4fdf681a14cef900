//! A plain bytecode interpreter: the reference that generated code is checked against, and
//! the fallback the runtime uses when a method must run but the code zone has no room for it
//! until the next compaction.
//!
//! Same semantics as the JIT, on the same heap: special arithmetic with a SmallInteger fast
//! path that otherwise sends its selector, primitives that fail into errors, conditional jumps
//! that accept only Booleans.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::bytecode::{ArithOp, Insn, SelId, decode};
use crate::error::VmError;
use crate::heap::Heap;
use crate::program::{ARRAY, ClassId, MethodId, Primitive, Program, SMALL_INTEGER};
use crate::value::Value;

/// Deepest nesting of sends the interpreter accepts.
pub const MAX_DEPTH: usize = 2000;

/// The class of any value.
pub fn class_of(heap: &Heap, v: Value) -> ClassId {
    if v.is_int() {
        SMALL_INTEGER
    } else {
        heap.class_of_object(v).unwrap_or(ClassId(0))
    }
}

/// Runs a primitive; `None` when it fails.
pub fn primitive(
    heap: &mut Heap,
    prim: Primitive,
    receiver: Value,
    args: &[Value],
) -> Option<Value> {
    match prim {
        Primitive::Arith(op) => {
            let (a, b) = (receiver.as_int()?, args.first()?.as_int()?);
            let r = op.apply(a, b)?;
            Some(if op.is_comparison() {
                heap.boolean(r != 0)
            } else {
                Value::small(r)
            })
        }
        Primitive::At => {
            if heap.class_of_object(receiver)? != ARRAY {
                return None;
            }
            let i = usize::try_from(args.first()?.as_int()?).ok()?;
            heap.load(receiver, i)
        }
        Primitive::AtPut => {
            if heap.class_of_object(receiver)? != ARRAY {
                return None;
            }
            let i = usize::try_from(args.first()?.as_int()?).ok()?;
            let v = *args.get(1)?;
            heap.store(receiver, i, v)?;
            Some(v)
        }
    }
}

/// The interpreter, over a program and a heap.
#[derive(Debug)]
pub struct Interpreter<'a> {
    prog: &'a Program,
    heap: &'a mut Heap,
    depth: usize,
    /// Bytecodes executed so far.
    pub bytecodes: u64,
    /// The VM's activation counters, bumped as compiled prologues bump them.
    counters: Option<&'a [AtomicU64]>,
    /// The thread's send counter, bumped with them.
    sends: Option<&'a AtomicU64>,
}

impl<'a> Interpreter<'a> {
    /// An interpreter for `prog` allocating in `heap`.
    pub fn new(prog: &'a Program, heap: &'a mut Heap) -> Interpreter<'a> {
        Interpreter {
            prog,
            heap,
            depth: 0,
            bytecodes: 0,
            counters: None,
            sends: None,
        }
    }

    /// Counts each activation of a method (not of a primitive, as compiled code) in
    /// `counters`, one per method, and in the thread's `sends`: interpreted calls count as
    /// compiled ones do.
    pub fn counting(mut self, counters: &'a [AtomicU64], sends: &'a AtomicU64) -> Interpreter<'a> {
        self.counters = Some(counters);
        self.sends = Some(sends);
        self
    }

    /// Sends `selector` to `receiver`.
    pub fn send(
        &mut self,
        receiver: Value,
        selector: SelId,
        args: &[Value],
    ) -> Result<Value, VmError> {
        let class = class_of(self.heap, receiver);
        let Some(m) = self.prog.lookup(class, selector) else {
            return Err(VmError::DoesNotUnderstand {
                class: self.prog.class(class).name.clone(),
                selector: self.prog.selectors.name(selector).to_owned(),
            });
        };
        self.run(m, receiver, args)
    }

    /// Runs method `id` (which must be the one `receiver`'s class has for its selector).
    pub fn run(&mut self, id: MethodId, receiver: Value, args: &[Value]) -> Result<Value, VmError> {
        let m = self.prog.method(id);
        if args.len() != usize::from(m.nargs) {
            return Err(VmError::Internal(format!(
                "{} given {} arguments",
                m.name,
                args.len()
            )));
        }
        if let Some(p) = m.primitive {
            return primitive(self.heap, p, receiver, args).ok_or_else(|| {
                VmError::PrimitiveFailed {
                    method: m.name.clone(),
                }
            });
        }
        if self.depth >= MAX_DEPTH {
            return Err(VmError::TooDeep(MAX_DEPTH));
        }
        self.depth += 1;
        if let Some(counter) = self.counters.and_then(|c| c.get(id.0 as usize)) {
            counter.fetch_add(1, Ordering::Relaxed);
            if let Some(sends) = self.sends {
                sends.fetch_add(1, Ordering::Relaxed);
            }
        }
        let r = self.execute(id, receiver, args);
        self.depth -= 1;
        r
    }

    fn execute(&mut self, id: MethodId, receiver: Value, args: &[Value]) -> Result<Value, VmError> {
        let m = self.prog.method(id);
        let nil = self.heap.nil();
        let mut temps = vec![nil; usize::from(m.ntemps)];
        let mut stack: Vec<Value> = Vec::with_capacity(usize::from(m.info.max_depth));
        let internal = |what: &str| VmError::Internal(format!("{}: {what}", m.name));
        let mut pc = 0;
        loop {
            let (insn, next) = decode(&m.code, pc).map_err(|e| internal(&e.to_string()))?;
            self.bytecodes += 1;
            let pop = |stack: &mut Vec<Value>| stack.pop().ok_or_else(|| internal("underflow"));
            pc = next;
            match insn {
                Insn::PushSelf => stack.push(receiver),
                Insn::PushArg(i) => stack.push(args[usize::from(i)]),
                Insn::PushTemp(i) => stack.push(temps[usize::from(i)]),
                Insn::PushInstVar(i) => stack.push(
                    self.heap
                        .load(receiver, usize::from(i) + 1)
                        .ok_or_else(|| internal("slot"))?,
                ),
                Insn::PushInt(v) => stack.push(Value::small(i64::from(v))),
                Insn::PushNil => stack.push(nil),
                Insn::PushTrue => stack.push(self.heap.true_()),
                Insn::PushFalse => stack.push(self.heap.false_()),
                Insn::StoreTemp(i) => {
                    temps[usize::from(i)] = *stack.last().ok_or_else(|| internal("underflow"))?
                }
                Insn::PopStoreTemp(i) => temps[usize::from(i)] = pop(&mut stack)?,
                Insn::Pop => {
                    pop(&mut stack)?;
                }
                Insn::Dup => {
                    let v = *stack.last().ok_or_else(|| internal("underflow"))?;
                    stack.push(v);
                }
                Insn::Send(sel, n) => {
                    let at = stack
                        .len()
                        .checked_sub(usize::from(n) + 1)
                        .ok_or_else(|| internal("underflow"))?;
                    let argv: Vec<Value> = stack.split_off(at + 1);
                    let rcvr = pop(&mut stack)?;
                    let r = self.send(rcvr, sel, &argv)?;
                    stack.push(r);
                }
                Insn::Arith(op) => {
                    let b = pop(&mut stack)?;
                    let a = pop(&mut stack)?;
                    let r = match (a.as_int(), b.as_int()) {
                        (Some(x), Some(y)) => arith_fast(self.heap, op, x, y),
                        _ => None,
                    };
                    let r = match r {
                        Some(r) => r,
                        None => self.send(a, op.selector(), &[b])?,
                    };
                    stack.push(r);
                }
                Insn::Jump(t) => pc = usize::from(t),
                Insn::JumpIfFalse(t) | Insn::JumpIfTrue(t) => {
                    let v = pop(&mut stack)?;
                    let want = matches!(insn, Insn::JumpIfTrue(_));
                    if v == self.heap.boolean(want) {
                        pc = usize::from(t);
                    } else if v != self.heap.boolean(!want) {
                        return Err(VmError::MustBeBoolean {
                            method: m.name.clone(),
                        });
                    }
                }
                Insn::ReturnTop => return pop(&mut stack),
                Insn::ReturnSelf => return Ok(receiver),
                Insn::NewArray => {
                    let size = pop(&mut stack)?;
                    let a = new_array(self.heap, size)?;
                    stack.push(a);
                }
            }
        }
    }
}

/// The special arithmetic fast path on two SmallIntegers; `None` on overflow.
pub fn arith_fast(heap: &Heap, op: ArithOp, a: i64, b: i64) -> Option<Value> {
    let r = op.apply(a, b)?;
    Some(if op.is_comparison() {
        heap.boolean(r != 0)
    } else {
        Value::small(r)
    })
}

/// `Array new: size`, as the `newArray` bytecode does it.
pub fn new_array(heap: &mut Heap, size: Value) -> Result<Value, VmError> {
    let n = size
        .as_int()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= 1 << 24)
        .ok_or_else(|| VmError::PrimitiveFailed {
            method: "Array class>>new:".into(),
        })?;
    heap.new_array(n).ok_or(VmError::HeapFull)
}
