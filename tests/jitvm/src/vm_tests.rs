//! Tests of the whole VM through its API: generated code against the interpreter and the Rust
//! references, linking, tiering, compaction while a benchmark is under way, errors.

use crate::benchmarks::{self, Methods, Workload};
use crate::codezone::{EntryKind, Link};
use crate::error::VmError;
use crate::heap::Heap;
use crate::interp::Interpreter;
use crate::jit::x64::InlinePlan;
use crate::program::SMALL_INTEGER;
use crate::runtime::{Config, Vm};
use crate::value::Value;

fn vm_with(config: Config) -> (Vm, Methods, Vec<benchmarks::Call>) {
    let (prog, m) = benchmarks::program().unwrap();
    let mut heap = Heap::new(config.heap_size).unwrap();
    let calls = benchmarks::calls(Workload::Compact, &m, &mut heap).unwrap();
    (Vm::new(prog, heap, config).unwrap(), m, calls)
}

fn vm() -> (Vm, Methods, Vec<benchmarks::Call>) {
    vm_with(Config::default())
}

#[test]
fn generated_code_agrees_with_interpreter_and_references() {
    let (mut vm, m, calls) = vm();
    for c in &calls {
        let expected = Interpreter::new(&vm.prog, &mut vm.heap).run(c.method, c.receiver, &c.args);
        vm.heap.reset();
        assert_eq!(
            expected,
            Ok(Value::small(c.expected)),
            "interpreter, {}",
            c.label
        );
        for _ in 0..3 {
            assert_eq!(
                vm.call(c.method, c.receiver, &c.args),
                expected,
                "{}",
                c.label
            );
            vm.safepoint();
        }
    }
    let r = vm.call(m.bench_fib, Value::small(benchmarks::FIB_N), &[]);
    assert_eq!(r, Ok(Value::small(benchmarks::FIB_25)));
    // Arithmetic edge cases against the interpreter, through SmallInteger>>+ etc.
    for n in [0, 1, 2, 3, 10] {
        let r = vm.call(m.bench_fib, Value::small(n), &[]).unwrap();
        assert_eq!(r.as_int(), Some(benchmarks::fib_reference(n)));
    }
}

#[test]
fn sites_go_monomorphic_closed_open() {
    let (mut vm, m, calls) = vm_with(Config {
        hot_calls: u64::MAX,
        ..Config::default()
    });
    let poly = calls.iter().find(|c| c.method == m.poly_run).unwrap();
    assert_eq!(
        vm.call(poly.method, poly.receiver, &poly.args)
            .unwrap()
            .as_int(),
        Some(poly.expected)
    );
    let area = vm.prog.selectors.clone().intern("area");
    let link_of = |vm: &Vm, method| {
        let id = vm.methods[method as usize].code.unwrap();
        let e = vm.entries.get(id).unwrap();
        e.sites
            .iter()
            .find(|s| s.info.selector == area)
            .unwrap()
            .link
    };
    let [mono, poly_site, mega] = m.poly_sites.map(|x| x.0);
    assert!(matches!(link_of(&vm, mono), Link::Mono { .. }));
    let Link::Closed(p) = link_of(&vm, poly_site) else {
        panic!("poly: site not a closed PIC");
    };
    match &vm.entries.get(p).unwrap().kind {
        EntryKind::ClosedPic { cases, .. } => assert_eq!(cases.len(), 3),
        k => panic!("{k:?}"),
    }
    assert!(matches!(link_of(&vm, mega), Link::Open(_)));
    assert_eq!(vm.stats.open_pics, 1);
    assert_eq!(vm.stats.closed_pics, 2 + 5, "2 then 3 cases; 2..=6 cases");
    // Steady state: no more misses.
    let misses = vm.stats.send_misses;
    vm.call(poly.method, poly.receiver, &poly.args).unwrap();
    assert_eq!(vm.stats.send_misses, misses);
}

#[test]
fn compaction_moves_running_benchmark_code() {
    let (mut vm, _, calls) = vm();
    // A decoy below the benchmark's methods leaves a hole for them to move into.
    let decoy = benchmarks::decoy_methods(&vm.prog)[0];
    vm.compile_code(decoy, false, true, &InlinePlan::new(), None)
        .unwrap()
        .unwrap();
    for c in &calls {
        vm.call(c.method, c.receiver, &c.args).unwrap();
    }
    let before = vm.code_entries();
    for round in 0..5 {
        vm.compact();
        assert!(vm.stats.moves > 0, "round {round}: nothing moved");
        for c in &calls {
            let r = vm.call(c.method, c.receiver, &c.args).unwrap();
            assert_eq!(r.as_int(), Some(c.expected), "round {round}: {}", c.label);
            vm.safepoint();
        }
    }
    let after = vm.code_entries();
    let moved = before
        .iter()
        .filter(|b| b.1 == "method")
        .filter(|b| after.iter().any(|a| a.0 == b.0 && a.2 < b.2))
        .count();
    assert!(moved > 0, "before {before:?}\nafter {after:?}");
    assert!(vm.stats.compactions >= 5);
}

#[test]
fn optimising_tier_inlines_and_replaces() {
    let (mut vm, m, calls) = vm_with(Config {
        hot_calls: 50,
        ..Config::default()
    });
    let c = calls.iter().find(|c| c.method == m.inline_bench).unwrap();
    vm.call(c.method, c.receiver, &c.args).unwrap();
    // Heavy's activations in one call, through its own prologue.
    let called = vm.calls_of(m.heavy);
    let old = vm.methods[m.inline_run.0 as usize].code.unwrap();
    vm.safepoint();
    let new = vm.methods[m.inline_run.0 as usize].code.unwrap();
    assert_ne!(old, new);
    assert!(vm.entries.get(old).is_none(), "baseline run freed");
    let e = vm.entries.get(new).unwrap();
    assert!(matches!(
        e.kind,
        EntryKind::Method {
            optimised: true,
            ..
        }
    ));
    for callee in [m.heavy, m.light] {
        assert!(
            e.pc_map
                .iter()
                .any(|p| p.inlined.first().is_some_and(|f| f.0 == callee))
        );
    }
    // Inlined, heavy still counts each activation, as its prologue did: as many per call.
    let before = vm.calls_of(m.heavy);
    assert_eq!(
        vm.call(c.method, c.receiver, &c.args).unwrap().as_int(),
        Some(c.expected)
    );
    assert_eq!(
        vm.calls_of(m.heavy) - before,
        called,
        "heavy's inlined activations count as its called ones did"
    );
}

#[test]
fn opt_compiles_inlined_from_the_start() {
    let (mut vm, m, calls) = vm_with(Config {
        opt: true,
        ..Config::default()
    });
    call_each(&mut vm, &calls);
    assert!(
        vm.methods[m.heavy.0 as usize].code.is_none(),
        "heavy never needed code of its own: it only ever ran inlined"
    );
    assert!(vm.calls_of(m.heavy) > 0, "its inlined activations count");
}

/// The thread's send counter moves with the activation counters wherever an activation runs:
/// compiled prologues, inlined bodies (opt), the interpreter (a zone too small for the code).
#[test]
fn the_thread_s_send_counter_is_the_sum_of_the_activations() {
    for config in [
        Config::default(),
        Config {
            opt: true,
            ..Config::default()
        },
        Config {
            zone_size: 4 << 10,
            ..Config::default()
        },
    ] {
        let (mut vm, m, calls) = vm_with(config);
        for c in calls.iter().filter(|c| c.method != m.sieve) {
            assert_eq!(
                vm.call(c.method, c.receiver, &c.args).unwrap().as_int(),
                Some(c.expected)
            );
            vm.safepoint();
        }
        assert!(vm.sends() > 0);
        assert_eq!(
            vm.thread_sends().load(std::sync::atomic::Ordering::Relaxed),
            vm.sends()
        );
    }
}

#[test]
fn full_zone_interprets_then_compacts() {
    // Too small for the working set of Poly>>run:with:with: (and for the sieve at all).
    let (mut vm, m, calls) = vm_with(Config {
        zone_size: 4 << 10,
        ..Config::default()
    });
    for round in 0..3 {
        for c in calls.iter().filter(|c| c.method != m.sieve) {
            let r = vm.call(c.method, c.receiver, &c.args);
            assert_eq!(
                r.map(|v| v.as_int()),
                Ok(Some(c.expected)),
                "round {round}: {}",
                c.label
            );
            vm.safepoint();
        }
    }
    assert!(vm.stats.interpreted > 0, "{:?}", vm.stats);
    assert!(vm.stats.compactions > 0, "{:?}", vm.stats);
    let sieve = calls.iter().find(|c| c.method == m.sieve).unwrap();
    let r = vm.call(sieve.method, sieve.receiver, &sieve.args);
    assert!(matches!(r, Err(VmError::ZoneTooSmall(_))), "{r:?}");
}

#[test]
fn errors_unwind_to_the_caller() {
    let (mut prog, _) = benchmarks::program().unwrap();
    let dnu = prog
        .add_method(SMALL_INTEGER, "oops", 0, |b| {
            b.push_self()
                .push_int(1)
                .add()
                .send("noSuchMessage")
                .return_top();
        })
        .unwrap();
    let bounds = prog
        .add_method(SMALL_INTEGER, "outOfBounds", 0, |b| {
            b.push_int(3)
                .new_array()
                .push_int(4)
                .send("at:")
                .return_top();
        })
        .unwrap();
    let not_bool = prog
        .add_method(SMALL_INTEGER, "notBoolean", 0, |b| {
            let l = b.label();
            b.push_self()
                .jump_if_false(l)
                .bind(l)
                .push_int(1)
                .return_top();
        })
        .unwrap();
    let overflow = prog
        .add_method(SMALL_INTEGER, "overflow", 0, |b| {
            b.push_self().push_self().mul().return_top();
        })
        .unwrap();
    let deep = prog
        .add_method(SMALL_INTEGER, "deep", 0, |b| {
            let l = b.label();
            b.push_self()
                .push_int(0)
                .arith(crate::bytecode::ArithOp::Eq)
                .jump_if_false(l);
            b.push_int(0).return_top().bind(l);
            b.push_self()
                .push_int(1)
                .sub()
                .send("deep")
                .push_int(1)
                .add()
                .return_top();
        })
        .unwrap();
    let heap = Heap::new(1 << 20).unwrap();
    let mut vm = Vm::new(prog, heap, Config::default()).unwrap();
    let r = vm.call(dnu, Value::small(1), &[]);
    assert!(
        matches!(r, Err(VmError::DoesNotUnderstand { ref selector, .. }) if selector == "noSuchMessage"),
        "{r:?}"
    );
    let r = vm.call(bounds, Value::small(1), &[]);
    assert!(
        matches!(r, Err(VmError::PrimitiveFailed { ref method }) if method == "Array>>at:"),
        "{r:?}"
    );
    let r = vm.call(not_bool, Value::small(1), &[]);
    assert!(matches!(r, Err(VmError::MustBeBoolean { .. })), "{r:?}");
    let r = vm.call(overflow, Value::small(1 << 40), &[]);
    assert!(
        matches!(r, Err(VmError::PrimitiveFailed { ref method }) if method == "SmallInteger>>*"),
        "{r:?}"
    );
    assert_eq!(
        vm.call(overflow, Value::small(1 << 20), &[]),
        Ok(Value::small(1 << 40))
    );
    assert_eq!(
        vm.call(deep, Value::small(1000), &[]),
        Ok(Value::small(1000))
    );
    let r = vm.call(deep, Value::small(10_000_000), &[]);
    assert!(
        matches!(r, Err(VmError::StackOverflow { ref method, .. }) if method == "SmallInteger>>deep"),
        "{r:?}"
    );
    // Still usable after unwinding.
    let fib = vm.prog.method_named("SmallInteger>>benchFib").unwrap();
    assert_eq!(
        vm.call(fib, Value::small(20), &[]).unwrap().as_int(),
        Some(21891)
    );
}

#[test]
fn without_counters_nothing_is_counted_and_the_answers_hold() {
    let (mut vm, m, calls) = vm_with(Config {
        counters: false,
        ..Config::default()
    });
    call_each(&mut vm, &calls);
    assert_eq!(vm.calls_of(m.bench_fib), 0);
    assert_eq!(vm.sends(), 0);
    assert_eq!(
        vm.thread_sends().load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

/// Makes each of `calls` once, a safepoint after each, checking its answer.
fn call_each(vm: &mut Vm, calls: &[benchmarks::Call]) {
    for c in calls {
        assert_eq!(
            vm.call(c.method, c.receiver, &c.args).unwrap().as_int(),
            Some(c.expected)
        );
        vm.safepoint();
    }
}
