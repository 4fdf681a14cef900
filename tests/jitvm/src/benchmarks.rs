//! The benchmarks and test workloads, in bytecode, and their Rust reference results.
//!
//! - `benchFib` and `benchmark` are Squeak's tinyBenchmarks (`benchmark` is the sieve; it
//!   fills its flags with `at:put:` in a loop instead of `atAllPut:`).
//! - `Loop>>hot` spends nearly all its time in one loop whose bytecode range the listing shows.
//! - `Inline>>run` calls `heavy` and `light`, which do 7 and 3 rounds of the same inner loop:
//!   once the optimising tier inlines both, 70% and 30% of `run`'s inlined time is theirs.
//! - `Poly>>mono:`, `poly:` and `mega:` each have one `area` send site, which sees 1, 3 and 8
//!   receiver classes: monomorphic, closed PIC, open PIC.
//! - `Decoy>>decoyN` are never run: the compaction workload compiles them into freed space.

use std::str::FromStr;

use crate::bytecode::Builder;
use crate::heap::Heap;
use crate::program::{ARRAY, ClassId, MethodId, Program, ProgramError, SMALL_INTEGER};
use crate::value::Value;

/// The argument of `benchFib` in the fib workload, and its answer.
pub const FIB_N: i64 = 25;
/// `25 benchFib`.
pub const FIB_25: i64 = 242_785;
/// The argument of `benchFib` in the compaction workload.
pub const FIB_SMALL_N: i64 = 20;
/// Flags in one sieve run (`size := 8190`).
pub const SIEVE_SIZE: i32 = 8190;
/// Primes counted by one sieve run.
pub const SIEVE_COUNT: i64 = 1028;
/// Sieve runs per call (`n benchmark`).
pub const SIEVE_RUNS: i64 = 2;
/// Iterations of `Loop>>hot`'s loop.
pub const LOOP_N: i32 = 200_000;
/// Rounds of the inner loop per call of `Inline>>heavy`.
pub const HEAVY_ROUNDS: i32 = 7;
/// Rounds of the inner loop per call of `Inline>>light`.
pub const LIGHT_ROUNDS: i32 = 3;
/// Iterations of the inner loop of one round.
pub const INNER_N: i32 = 100;
/// Calls of `Inline>>run` per call of `Inline>>bench`.
pub const INLINE_CALLS: i32 = 100;
/// Elements of each `Poly` array.
pub const POLY_SIZE: i32 = 24;
/// Rounds of the three `Poly` loops per call of `Poly>>run:with:with:`.
pub const POLY_ROUNDS: i32 = 50;
/// The shape classes answering `area`.
pub const SHAPES: [&str; 8] = [
    "Circle",
    "Square",
    "Triangle",
    "Hexagon",
    "Pentagon",
    "Octagon",
    "Rectangle",
    "Ellipse",
];
/// Number of decoy methods.
pub const DECOYS: usize = 4;

/// A workload of the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// fib and sieve in turn.
    Tiny,
    /// `25 benchFib`.
    Fib,
    /// `2 benchmark`.
    Sieve,
    /// `Loop new hot`.
    Loop,
    /// `Inline new bench`.
    Inline,
    /// `Poly new run: ones with: threes with: eights`.
    Poly,
    /// All of the above in phases, compacting the code zone often.
    Compact,
}

impl FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "tiny" => Workload::Tiny,
            "fib" => Workload::Fib,
            "sieve" => Workload::Sieve,
            "loop" => Workload::Loop,
            "inline" => Workload::Inline,
            "poly" => Workload::Poly,
            "compact" => Workload::Compact,
            _ => return Err(format!("unknown workload {s:?}")),
        })
    }
}

/// Ids of the methods the workloads use.
#[derive(Debug, Clone)]
pub struct Methods {
    /// `SmallInteger>>benchFib`.
    pub bench_fib: MethodId,
    /// `SmallInteger>>benchmark`.
    pub sieve: MethodId,
    /// `Loop>>hot`.
    pub loop_hot: MethodId,
    /// `Inline>>bench`.
    pub inline_bench: MethodId,
    /// `Inline>>run`.
    pub inline_run: MethodId,
    /// `Inline>>heavy`.
    pub heavy: MethodId,
    /// `Inline>>light`.
    pub light: MethodId,
    /// `Poly>>run:with:with:`.
    pub poly_run: MethodId,
    /// `Poly>>mono:`, `Poly>>poly:`, `Poly>>mega:`.
    pub poly_sites: [MethodId; 3],
    /// The `area` methods, by shape.
    pub areas: Vec<MethodId>,
    /// `Decoy>>decoy0`...
    pub decoys: Vec<MethodId>,
    /// Class `Loop`.
    pub loop_class: ClassId,
    /// Class `Inline`.
    pub inline_class: ClassId,
    /// Class `Poly`.
    pub poly_class: ClassId,
    /// The shapes.
    pub shapes: Vec<ClassId>,
}

/// Builds the program of all workloads.
pub fn program() -> Result<(Program, Methods), ProgramError> {
    let mut p = Program::new();
    let bench_fib = p.add_method(SMALL_INTEGER, "benchFib", 0, bench_fib)?;
    let sieve = p.add_method(SMALL_INTEGER, "benchmark", 7, sieve)?;

    let loop_class = p.add_class("Loop", 0);
    let loop_hot = p.add_method(loop_class, "hot", 2, loop_hot)?;

    let inline_class = p.add_class("Inline", 0);
    let heavy = p.add_method(inline_class, "heavy", 3, |b| rounds(b, HEAVY_ROUNDS))?;
    let light = p.add_method(inline_class, "light", 3, |b| rounds(b, LIGHT_ROUNDS))?;
    let inline_run = p.add_method(inline_class, "run", 0, |b| {
        b.push_self()
            .send("heavy")
            .push_self()
            .send("light")
            .add()
            .return_top();
    })?;
    let inline_bench = p.add_method(inline_class, "bench", 2, |b| {
        b.push_int(0).pop_into_temp(0);
        b.times_loop(
            1,
            0,
            |b| {
                b.push_int(INLINE_CALLS);
            },
            |b| {
                b.push_temp(0)
                    .push_self()
                    .send("run")
                    .add()
                    .pop_into_temp(0);
            },
        );
        b.push_temp(0).return_top();
    })?;

    let mut shapes = Vec::new();
    let mut areas = Vec::new();
    for (k, name) in SHAPES.iter().enumerate() {
        let c = p.add_class(name, 1);
        let k = i32::try_from(k + 1).expect("few shapes");
        areas.push(p.add_method(c, "area", 0, |b| {
            b.push_inst_var(0).push_inst_var(0).mul().push_int(k).mul();
            b.push_int(k).add().return_top();
        })?);
        shapes.push(c);
    }
    let poly_class = p.add_class("Poly", 0);
    let poly_sites = [
        p.add_method(poly_class, "mono:", 2, sum_areas)?,
        p.add_method(poly_class, "poly:", 2, sum_areas)?,
        p.add_method(poly_class, "mega:", 2, sum_areas)?,
    ];
    let poly_run = p.add_method(poly_class, "run:with:with:", 2, |b| {
        b.push_int(0).pop_into_temp(0);
        b.times_loop(
            1,
            0,
            |b| {
                b.push_int(POLY_ROUNDS);
            },
            |b| {
                b.push_temp(0);
                b.push_self().push_arg(0).send("mono:").add();
                b.push_self().push_arg(1).send("poly:").add();
                b.push_self().push_arg(2).send("mega:").add();
                b.pop_into_temp(0);
            },
        );
        b.push_temp(0).return_top();
    })?;

    let decoy_class = p.add_class("Decoy", 0);
    let mut decoys = Vec::new();
    for d in 0..DECOYS {
        let terms = 1 + 3 * d;
        decoys.push(p.add_method(decoy_class, &format!("decoy{d}"), 2, |b| {
            b.push_int(0).pop_into_temp(0);
            b.times_loop(
                1,
                0,
                |b| {
                    b.push_int(1000);
                },
                |b| {
                    b.push_temp(0);
                    for t in 0..terms {
                        b.push_temp(1)
                            .push_int(i32::try_from(t).unwrap_or(0))
                            .mul()
                            .add();
                    }
                    b.pop_into_temp(0);
                },
            );
            b.push_temp(0).return_top();
        })?);
    }

    let methods = Methods {
        bench_fib,
        sieve,
        loop_hot,
        inline_bench,
        inline_run,
        heavy,
        light,
        poly_run,
        poly_sites,
        areas,
        decoys,
        loop_class,
        inline_class,
        poly_class,
        shapes,
    };
    Ok((p, methods))
}

/// `benchFib  ^self < 2 ifTrue: [1] ifFalse: [(self - 1) benchFib + (self - 2) benchFib + 1]`
fn bench_fib(b: &mut Builder) {
    let recurse = b.label();
    b.push_self().push_int(2).lt().jump_if_false(recurse);
    b.push_int(1).return_top();
    b.bind(recurse);
    b.push_self().push_int(1).sub().send("benchFib");
    b.push_self().push_int(2).sub().send("benchFib");
    b.add().push_int(1).add().return_top();
}

/// Squeak's `Integer>>benchmark` (the sieve), temps: size flags prime k count iter i.
fn sieve(b: &mut Builder) {
    const SIZE: u8 = 0;
    const FLAGS: u8 = 1;
    const PRIME: u8 = 2;
    const K: u8 = 3;
    const COUNT: u8 = 4;
    const ITER: u8 = 5;
    const I: u8 = 6;
    b.push_int(SIEVE_SIZE).pop_into_temp(SIZE);
    b.push_int(0).pop_into_temp(COUNT);
    // 1 to: self do: [:iter | ...] is iter from 1 while iter < self + 1.
    b.times_loop(
        ITER,
        1,
        |b| {
            b.push_self().push_int(1).add();
        },
        |b| {
            b.push_int(0).pop_into_temp(COUNT);
            b.push_temp(SIZE).new_array().pop_into_temp(FLAGS);
            b.times_loop(
                I,
                1,
                |b| {
                    b.push_temp(SIZE).push_int(1).add();
                },
                |b| {
                    b.push_temp(FLAGS)
                        .push_temp(I)
                        .push_true()
                        .send("at:put:")
                        .pop();
                },
            );
            b.times_loop(
                I,
                1,
                |b| {
                    b.push_temp(SIZE).push_int(1).add();
                },
                |b| {
                    let skip = b.label();
                    b.push_temp(FLAGS)
                        .push_temp(I)
                        .send("at:")
                        .jump_if_false(skip);
                    b.push_temp(I).push_int(1).add().pop_into_temp(PRIME);
                    b.push_temp(I).push_temp(PRIME).add().pop_into_temp(K);
                    let head = b.here();
                    let done = b.label();
                    b.push_temp(K).push_temp(SIZE).le().jump_if_false(done);
                    b.push_temp(FLAGS)
                        .push_temp(K)
                        .push_false()
                        .send("at:put:")
                        .pop();
                    b.push_temp(K).push_temp(PRIME).add().pop_into_temp(K);
                    b.jump(head).bind(done);
                    b.push_temp(COUNT).push_int(1).add().pop_into_temp(COUNT);
                    b.bind(skip);
                },
            );
        },
    );
    b.push_temp(COUNT).return_top();
}

/// `Loop>>hot`: a prologue, one loop of [`LOOP_N`] iterations, an epilogue.
fn loop_hot(b: &mut Builder) {
    const ACC: u8 = 0;
    const I: u8 = 1;
    // prologue: acc := 7 * 3 + 1
    b.push_int(7)
        .push_int(3)
        .mul()
        .push_int(1)
        .add()
        .pop_into_temp(ACC);
    // the loop: acc := acc + (i * i) - i + 3
    b.times_loop(
        I,
        0,
        |b| {
            b.push_int(LOOP_N);
        },
        |b| {
            b.push_temp(ACC).push_temp(I).push_temp(I).mul().add();
            b.push_temp(I).sub().push_int(3).add().pop_into_temp(ACC);
        },
    );
    // epilogue: ^acc * 2 + 1
    b.push_temp(ACC)
        .push_int(2)
        .mul()
        .push_int(1)
        .add()
        .return_top();
}

/// `heavy`/`light`: `rounds` rounds of the same inner loop. Temps: s i j.
fn rounds(b: &mut Builder, rounds: i32) {
    b.push_int(0).pop_into_temp(0);
    b.times_loop(
        1,
        0,
        |b| {
            b.push_int(rounds);
        },
        |b| {
            b.times_loop(
                2,
                0,
                |b| {
                    b.push_int(INNER_N);
                },
                |b| {
                    b.push_temp(0)
                        .push_temp(2)
                        .push_int(3)
                        .mul()
                        .add()
                        .push_temp(1)
                        .add();
                    b.pop_into_temp(0);
                },
            );
        },
    );
    b.push_temp(0).return_top();
}

/// `sum: arr`: the sum of `(arr at: i) area` over the array. Temps: s i.
fn sum_areas(b: &mut Builder) {
    b.push_int(0).pop_into_temp(0);
    b.times_loop(
        1,
        1,
        |b| {
            b.push_int(POLY_SIZE + 1);
        },
        |b| {
            b.push_temp(0)
                .push_arg(0)
                .push_temp(1)
                .send("at:")
                .send("area")
                .add();
            b.pop_into_temp(0);
        },
    );
    b.push_temp(0).return_top();
}

/// The decoy methods of a program (class `Decoy`), smallest first.
pub fn decoy_methods(p: &Program) -> Vec<MethodId> {
    let Some(decoy) = p.class_named("Decoy") else {
        return Vec::new();
    };
    let mut v: Vec<MethodId> = p.class(decoy).methods.values().copied().collect();
    v.sort_by_key(|&m| (p.method(m).code.len(), m));
    v
}

/// Rust reference: `Loop>>hot`.
pub fn loop_reference() -> i64 {
    let mut acc: i64 = 7 * 3 + 1;
    for i in 0..i64::from(LOOP_N) {
        acc = acc + i * i - i + 3;
    }
    acc * 2 + 1
}

/// Rust reference: `Inline>>heavy` or `light` with `rounds` rounds.
pub fn rounds_reference(rounds: i32) -> i64 {
    let mut s = 0;
    for i in 0..i64::from(rounds) {
        for j in 0..i64::from(INNER_N) {
            s += j * 3 + i;
        }
    }
    s
}

/// Rust reference: `Inline>>bench`.
pub fn inline_reference() -> i64 {
    i64::from(INLINE_CALLS) * (rounds_reference(HEAVY_ROUNDS) + rounds_reference(LIGHT_ROUNDS))
}

/// Rust reference: `benchFib`.
pub fn fib_reference(n: i64) -> i64 {
    if n < 2 {
        1
    } else {
        fib_reference(n - 1) + fib_reference(n - 2) + 1
    }
}

/// The shape class index (0-based) and size of element `i` (0-based) of the array of
/// `classes` classes.
fn shape_of(classes: usize, i: usize) -> (usize, i64) {
    (i % classes, i64::try_from(i).unwrap_or(0) + 1)
}

/// Rust reference: `Poly>>run:with:with:`.
pub fn poly_reference() -> i64 {
    let sum = |classes: usize| -> i64 {
        (0..POLY_SIZE as usize)
            .map(|i| {
                let (c, size) = shape_of(classes, i);
                let k = i64::try_from(c).unwrap_or(0) + 1;
                size * size * k + k
            })
            .sum()
    };
    i64::from(POLY_ROUNDS) * (sum(1) + sum(3) + sum(8))
}

/// One call the driver makes into the VM.
#[derive(Debug, Clone)]
pub struct Call {
    /// What it is, for messages.
    pub label: &'static str,
    /// The method.
    pub method: MethodId,
    /// Its receiver.
    pub receiver: Value,
    /// Its arguments.
    pub args: Vec<Value>,
    /// The answer the Rust reference computes.
    pub expected: i64,
}

/// The calls of a workload, with their receivers and arguments allocated (permanently) in
/// `heap`. The driver cycles through them (see [`phase_of`]).
pub fn calls(w: Workload, m: &Methods, heap: &mut Heap) -> Option<Vec<Call>> {
    let fib = |n| Call {
        label: "benchFib",
        method: m.bench_fib,
        receiver: Value::small(n),
        args: vec![],
        expected: fib_reference(n),
    };
    let sieve = Call {
        label: "benchmark",
        method: m.sieve,
        receiver: Value::small(SIEVE_RUNS),
        args: vec![],
        expected: SIEVE_COUNT,
    };
    let looping = Call {
        label: "Loop>>hot",
        method: m.loop_hot,
        receiver: heap.alloc(m.loop_class, 0, heap.nil())?,
        args: vec![],
        expected: loop_reference(),
    };
    let inline = Call {
        label: "Inline>>bench",
        method: m.inline_bench,
        receiver: heap.alloc(m.inline_class, 0, heap.nil())?,
        args: vec![],
        expected: inline_reference(),
    };
    let mut shapes = |classes: usize| -> Option<Value> {
        let a = heap.alloc(ARRAY, POLY_SIZE as usize, heap.nil())?;
        for i in 0..POLY_SIZE as usize {
            let (c, size) = shape_of(classes, i);
            let s = heap.alloc(m.shapes[c], 1, Value::small(size))?;
            heap.store(a, i + 1, s)?;
        }
        Some(a)
    };
    let args = vec![shapes(1)?, shapes(3)?, shapes(8)?];
    let poly = Call {
        label: "Poly>>run:with:with:",
        method: m.poly_run,
        receiver: heap.alloc(m.poly_class, 0, heap.nil())?,
        args,
        expected: poly_reference(),
    };
    heap.set_mark();
    Some(match w {
        Workload::Tiny => vec![fib(FIB_N), sieve],
        Workload::Fib => vec![fib(FIB_N)],
        Workload::Sieve => vec![sieve],
        Workload::Loop => vec![looping],
        Workload::Inline => vec![inline],
        Workload::Poly => vec![poly],
        Workload::Compact => vec![fib(FIB_SMALL_N), looping, sieve, inline, poly],
    })
}

/// Which call iteration `iter` of workload `w` makes, out of `n`: tiny alternates fib and the
/// sieve in runs of 16 calls; the compaction workload runs each call for a phase of 8
/// iterations. Runs, not single calls, so that the methods of the other phases go cold between
/// two compactions (`--compact-every-ms 1`) however fast a call is (a tiny call takes half a
/// millisecond), and compactions free and move code.
pub fn phase_of(w: Workload, iter: u64, n: usize) -> usize {
    let n = n as u64;
    let i = match w {
        Workload::Compact => (iter / 8) % n,
        Workload::Tiny => (iter / 16) % n,
        _ => iter % n,
    };
    i as usize
}

/// The methods whose listings `--listing` prints for a workload.
pub fn listed(w: Workload, m: &Methods) -> Vec<MethodId> {
    match w {
        Workload::Tiny => vec![m.bench_fib, m.sieve],
        Workload::Fib => vec![m.bench_fib],
        Workload::Sieve => vec![m.sieve],
        Workload::Loop => vec![m.loop_hot],
        Workload::Inline => vec![m.inline_bench, m.inline_run, m.heavy, m.light],
        Workload::Poly => {
            let mut v = vec![m.poly_run];
            v.extend(m.poly_sites);
            v.extend(&m.areas);
            v
        }
        Workload::Compact => {
            let mut v = vec![m.bench_fib, m.loop_hot, m.sieve, m.inline_bench, m.poly_run];
            v.extend(&m.decoys);
            v
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::Interpreter;

    #[test]
    fn interpreter_agrees_with_rust_references() {
        let (p, m) = program().unwrap();
        let mut heap = Heap::new(64 << 20).unwrap();
        let calls = calls(Workload::Compact, &m, &mut heap).unwrap();
        assert_eq!(fib_reference(FIB_N), FIB_25);
        for c in calls {
            let r = Interpreter::new(&p, &mut heap).run(c.method, c.receiver, &c.args);
            assert_eq!(r, Ok(Value::small(c.expected)), "{}", c.label);
            heap.reset();
        }
        let mut i = Interpreter::new(&p, &mut heap);
        let r = i.run(m.bench_fib, Value::small(FIB_N), &[]);
        assert_eq!(r, Ok(Value::small(FIB_25)));
    }

    #[test]
    fn the_loop_is_most_of_loop_hot() {
        let (p, m) = program().unwrap();
        let method = p.method(m.loop_hot);
        let back = method
            .info
            .instructions(&method.code)
            .find_map(|(pc, i, _)| {
                i.target()
                    .filter(|&t| usize::from(t) <= pc)
                    .map(|t| (t, pc))
            })
            .unwrap();
        // A short prologue before the loop head, a short epilogue after the back jump.
        assert!(back.0 > 0 && back.0 < 30, "{back:?}");
        assert!(back.1 + 20 > method.code.len(), "{back:?}");
    }
}
