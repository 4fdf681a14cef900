//! The VM: code zone, compiled methods, calls into generated code and the runtime functions
//! that generated code calls back (through the trampolines).
//!
//! Generated code runs on the VM's thread only, entered through [`Vm::call`]; while it runs,
//! the runtime is reachable from the trampolines through a thread-local pointer. Changes to
//! the code zone happen in two kinds of places: on a send miss, called from generated code
//! (compile a method, link a site, make a PIC: things that only add code), and at safepoints,
//! between two calls from the driver, when no generated frame exists (optimise, compact,
//! free: things that remove or move code). Every change is published before the code it
//! concerns can run, and every free after the code last ran.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use vmscope_proto::v1::code_map_event::Event;
use vmscope_proto::v1::{
    CodeEntry as ProtoEntry, CodeFree, CodeKind, CodeZone as ProtoZone, InlinedFrame, PcMapping,
    PicCase,
};

use crate::bytecode::SelId;
use crate::codezone::{CodeZone, Entries, Entry, EntryId, EntryKind, Link, Site};
use crate::error::VmError;
use crate::gc::GcConfig;
use crate::heap::Heap;
use crate::interp::{self, Interpreter};
use crate::jit::Addrs;
use crate::jit::encoding::INT3;
use crate::jit::trampolines::{self, PieceKind, RuntimeFns};
use crate::jit::x64::{self, InlinePlan};
use crate::program::{ClassId, MethodId, Program};
use crate::publish::{self, Publisher};
use crate::value::Value;

/// VM settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Bytes of the code zone.
    pub zone_size: usize,
    /// Bytes of the object heap.
    pub heap_size: usize,
    /// Compile every method with the optimising tier from the start (`--opt`).
    pub opt: bool,
    /// Calls after which a method is recompiled by the optimising tier (checked at
    /// safepoints); `u64::MAX` never.
    pub hot_calls: u64,
    /// Compile decoys into the space a compaction frees.
    pub decoys: bool,
    /// Bytes of machine stack generated code may use below [`Vm::call`]'s frame.
    pub jit_stack_bytes: u64,
    /// Where the code map goes.
    pub publish: publish::Config,
    /// The GC-heavy mode: young objects collected when they fill an eden, not at every
    /// safepoint.
    pub gc: Option<GcConfig>,
    /// Count each method's activations (prologues, inlined bodies, the interpreter) and
    /// publish the counters (`CounterRegion`). Off, nothing is counted, the optimising tier
    /// never sees a method as hot, and the VM runs as it would without exact counts: the
    /// baseline of what counting costs.
    pub counters: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            zone_size: 1 << 20,
            heap_size: 64 << 20,
            opt: false,
            hot_calls: 1000,
            decoys: false,
            jit_stack_bytes: 1 << 20,
            publish: publish::Config::none(),
            gc: None,
            counters: true,
        }
    }
}

/// Counts of what the VM did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    /// Compactions.
    pub compactions: u64,
    /// Methods compiled (baseline, optimised, primitives, decoys).
    pub compiled: u64,
    /// Methods recompiled or compiled by the optimising tier.
    pub optimised: u64,
    /// Decoys compiled.
    pub decoys: u64,
    /// Closed PICs made.
    pub closed_pics: u64,
    /// Open PICs made.
    pub open_pics: u64,
    /// Entries moved by compactions.
    pub moves: u64,
    /// Of those, moves of methods' code (each published as a `method moved` domain event).
    pub method_moves: u64,
    /// Entries freed.
    pub frees: u64,
    /// Send misses handled.
    pub send_misses: u64,
    /// Sends the interpreter ran because the zone had no room.
    pub interpreted: u64,
    /// Stack overflows of generated code (each ends the call that overflowed).
    pub stack_overflows: u64,
    /// Young collections (GC-heavy mode).
    pub scavenges: u64,
    /// Full collections (GC-heavy mode).
    pub full_gcs: u64,
    /// Time in collections, in ns, as published.
    pub gc_ns: u64,
    /// CPU time of the VM's thread in collections, in ns.
    pub gc_thread_cpu_ns: u64,
    /// CPU time of the whole process (the publisher's thread too) in collections, in ns.
    pub gc_process_cpu_ns: u64,
    /// Time in code compactions, in ns, as published.
    pub compaction_ns: u64,
    /// The lowest and highest young generation sizes published, in bytes.
    pub young_published: Option<(usize, usize)>,
}

/// Runtime state of a method.
#[derive(Debug, Clone, Default)]
pub(crate) struct MethodState {
    /// Its current compiled code.
    pub(crate) code: Option<EntryId>,
    /// Whether the optimising tier has looked at it.
    pub(crate) tier_considered: bool,
}

/// The VM.
#[derive(Debug)]
pub struct Vm {
    /// The program.
    pub prog: Program,
    /// The object heap.
    pub heap: Heap,
    pub(crate) zone: CodeZone,
    pub(crate) entries: Entries,
    pub(crate) addrs: Addrs,
    /// Address of the enilopmart.
    enter: u64,
    /// End of the trampolines: compaction moves nothing below.
    pub(crate) glue_end: u64,
    /// rbp of the active enilopmart, for unwinding (read and written by generated code).
    unwind_cell: Box<AtomicU64>,
    /// Lowest rsp generated code may use (read by every method's prologue).
    stack_limit: Box<AtomicU64>,
    /// Calls of each method (incremented by generated code).
    counters: Box<[AtomicU64]>,
    /// The VM thread's sends (incremented with the counters). Never freed: the profiler's
    /// kernel may read it until the thread exits, after its withdrawal too.
    thread_sends: &'static AtomicU64,
    /// The VM thread's label word (see `labels.rs`).
    pub(crate) thread_labels: &'static AtomicU64,
    /// The last label set id published.
    pub(crate) next_label_set: u64,
    /// Counters at the last compaction: unchanged means cold.
    pub(crate) counters_then: Vec<u64>,
    pub(crate) methods: Vec<MethodState>,
    pub(crate) open_pics: HashMap<SelId, EntryId>,
    publisher: Publisher,
    published_free_start: u64,
    pub(crate) config: Config,
    error: Option<VmError>,
    /// A compaction is due at the next safepoint (the zone filled up outside one).
    pub(crate) compaction_wanted: bool,
    in_jit: bool,
    pub(crate) next_decoy: usize,
    /// What happened.
    pub stats: Stats,
    /// When the counters were last published.
    pub(crate) levels_published: Option<std::time::Instant>,
    /// The VM's named roots: what heap queries start from, and what a full collection keeps.
    pub globals: Vec<(String, Value)>,
    /// The daemon's heap requests, answered at safepoints.
    heap_service: Option<crate::publish::HeapService>,
    /// Set (by another thread) to make the next safepoint let the global `order` go.
    pub release_order: Arc<std::sync::atomic::AtomicBool>,
}

thread_local! {
    /// The VM whose generated code runs on this thread, while it runs.
    static CURRENT: Cell<*mut Vm> = const { Cell::new(std::ptr::null_mut()) };
}

/// What the send-miss handler answers the trampoline (in rax:rdx).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MissAnswer {
    /// Code to jump to with the send's receiver and arguments in place, or 0.
    pub target: u64,
    /// When `target` is 0: the value to answer at the send site, or 0 to unwind.
    pub value: u64,
}

type EnterFn = unsafe extern "C" fn(entry: u64, receiver: u64, args: *const u64, nargs: u64) -> u64;

/// Runs `f` on the VM that is running generated code on this thread.
fn with_vm<R>(f: impl FnOnce(&mut Vm) -> R) -> R {
    let p = CURRENT.with(Cell::get);
    if p.is_null() {
        eprintln!("jitvm: runtime called from generated code outside Vm::call");
        std::process::abort();
    }
    // SAFETY: CURRENT is set by Vm::call to the VM it was called on, for the duration of the
    // call into generated code, during which Vm::call does not touch the VM itself; the
    // trampolines call back on this thread, one at a time, so this is the only live reference.
    f(unsafe { &mut *p })
}

extern "C" fn ce_send_miss(ret: u64, args: *const u64) -> MissAnswer {
    with_vm(|vm| vm.send_miss(ret, args))
}

extern "C" fn ce_new_array(size: u64) -> u64 {
    with_vm(|vm| match interp::new_array(&mut vm.heap, Value(size)) {
        Ok(a) => a.0,
        Err(e) => vm.fail(e),
    })
}

extern "C" fn ce_primitive_failed(ret: u64) {
    with_vm(|vm| {
        let method = vm.method_name_at(ret);
        vm.fail(VmError::PrimitiveFailed { method });
    });
}

extern "C" fn ce_stack_overflow(ret: u64) {
    with_vm(|vm| {
        vm.stats.stack_overflows += 1;
        let method = vm.method_name_at(ret);
        let bytes = vm.config.jit_stack_bytes;
        vm.fail(VmError::StackOverflow { method, bytes });
    });
}

extern "C" fn ce_must_be_boolean(ret: u64) {
    with_vm(|vm| {
        let method = vm.method_name_at(ret);
        vm.fail(VmError::MustBeBoolean { method });
    });
}

impl Vm {
    /// A VM for `prog` with objects in `heap`: maps the code zone, generates the trampolines
    /// and the enilopmart at its start and publishes Hello, the zone and them.
    pub fn new(prog: Program, heap: Heap, config: Config) -> anyhow::Result<Vm> {
        let mut publisher = Publisher::new(&config.publish)?;
        let heap_service = publisher.take_heap_service();
        let mut zone = CodeZone::new(config.zone_size)?;
        let unwind_cell = Box::new(AtomicU64::new(0));
        let stack_limit = Box::new(AtomicU64::new(u64::MAX));
        let counters: Box<[AtomicU64]> =
            (0..prog.methods.len()).map(|_| AtomicU64::new(0)).collect();
        let thread_sends: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let fns = RuntimeFns {
            send_miss: ce_send_miss as *const () as u64,
            new_array: ce_new_array as *const () as u64,
            prim_failed: ce_primitive_failed as *const () as u64,
            must_be_boolean: ce_must_be_boolean as *const () as u64,
            stack_overflow: ce_stack_overflow as *const () as u64,
            unwind_cell: std::ptr::from_ref::<AtomicU64>(&unwind_cell) as u64,
        };
        let glue = trampolines::generate(&fns)?;
        let base = zone
            .alloc(glue.code.len())
            .ok_or_else(|| anyhow::anyhow!("code zone smaller than the trampolines"))?;
        zone.write(base, &glue.code);
        let at = |name| base + u64::from(glue.offset_of(name).unwrap_or(0));
        let addrs = Addrs {
            send_miss: at(trampolines::SEND_MISS),
            new_array: at(trampolines::NEW_ARRAY),
            prim_fail: at(trampolines::PRIM_FAIL),
            must_be_boolean: at(trampolines::MUST_BE_BOOLEAN),
            stack_overflow: at(trampolines::STACK_OVERFLOW),
            stack_limit: std::ptr::from_ref::<AtomicU64>(&stack_limit) as u64,
            counters: if config.counters {
                counters.as_ptr() as u64
            } else {
                0
            },
            sends: if config.counters {
                std::ptr::from_ref::<AtomicU64>(thread_sends) as u64
            } else {
                0
            },
            nil: heap.nil().0,
            true_: heap.true_().0,
            false_: heap.false_().0,
        };
        let nmethods = prog.methods.len();
        let mut vm = Vm {
            prog,
            heap,
            enter: at(trampolines::ENTER),
            glue_end: zone.free_start(),
            zone,
            entries: Entries::default(),
            addrs,
            unwind_cell,
            stack_limit,
            counters,
            thread_sends,
            thread_labels: crate::labels::new_word(),
            next_label_set: 0,
            counters_then: vec![0; nmethods],
            methods: vec![MethodState::default(); nmethods],
            open_pics: HashMap::new(),
            publisher,
            published_free_start: 0,
            config,
            error: None,
            compaction_wanted: false,
            in_jit: false,
            next_decoy: 0,
            stats: Stats::default(),
            levels_published: None,
            globals: Vec::new(),
            heap_service,
            release_order: Arc::default(),
        };
        if let Some(gc) = vm.config.gc {
            anyhow::ensure!(
                gc.eden_bytes > 0 && gc.eden_bytes <= vm.config.heap_size / 2,
                "an eden of {} bytes in a heap of {}: at most half of it",
                gc.eden_bytes,
                vm.config.heap_size
            );
        }
        vm.publish_configuration();
        vm.publish_thread_labels(true);
        if vm.config.counters {
            vm.publish_counter_region();
            vm.publish_thread_counter();
        }
        vm.publish_levels();
        vm.publish_zone();
        for p in &glue.pieces {
            let kind = match p.kind {
                PieceKind::Trampoline => EntryKind::Trampoline,
                PieceKind::Enilopmart => EntryKind::Enilopmart,
            };
            let id = vm.entries.insert(Entry {
                kind,
                name: p.name.to_owned(),
                start: base + u64::from(p.offset),
                size: u64::from(p.size),
                check_entry: 0,
                nocheck_entry: 0,
                sites: Vec::new(),
                pc_map: Vec::new(),
            });
            vm.publish_load(id);
        }
        Ok(vm)
    }

    /// Publishes the counters a last time and ends publication (see [`Publisher::finish`]);
    /// answers what the VM did, those last levels included. The thread's send counter is
    /// withdrawn before it is freed.
    pub fn finish(mut self) -> Stats {
        self.publish_levels();
        self.use_labels(0);
        self.publish_thread_labels(false);
        if self.config.counters {
            self.publish_counter_values();
            self.withdraw_thread_counter();
        }
        self.publisher.finish();
        self.stats
    }

    /// Calls of compiled methods so far, as their prologues count them.
    pub fn sends(&self) -> u64 {
        self.counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// The code map publisher.
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// Publishes `codes` made-up methods, each with a 256-point pc map (about 10 KiB in the
    /// daemon's code store), packed from the end of the code zone down to half its free
    /// space, where the VM's own code does not reach: a VM that hogs the daemon's code store,
    /// for the tests of its per-user shares. Answers how many fitted.
    pub fn flood(&mut self, codes: u64) -> u64 {
        const SIZE: u64 = 256;
        self.publish_zone();
        let (_, free, end) = self.zone_bounds();
        let room = (end - free) / 2 / SIZE;
        let codes = codes.min(room);
        for i in 0..codes {
            let start = end - (i + 1) * SIZE;
            self.publisher.publish(Event::Load(ProtoEntry {
                kind: CodeKind::Method as i32,
                name: format!("Flood>>method{i}"),
                start,
                size: SIZE,
                pc_map: (0..SIZE)
                    .map(|pc| PcMapping {
                        mcpc: start + pc,
                        bcpc: pc as u32,
                        inlined: Vec::new(),
                    })
                    .collect(),
                cases: Vec::new(),
            }));
        }
        codes
    }

    /// The code zone: (start, free start, end).
    pub fn zone_bounds(&self) -> (u64, u64, u64) {
        (self.zone.start(), self.zone.free_start(), self.zone.end())
    }

    /// Calls of a method so far.
    pub fn calls_of(&self, m: MethodId) -> u64 {
        self.counters[m.0 as usize].load(Ordering::Relaxed)
    }

    /// The activation counters, one per method in method order.
    pub(crate) fn counters(&self) -> &[AtomicU64] {
        &self.counters
    }

    /// The VM thread's send counter: the sum of the activation counters, kept in one word
    /// that the profiler reads with each sample of the thread.
    pub fn thread_sends(&self) -> &AtomicU64 {
        self.thread_sends
    }

    pub(crate) fn counter_addr(&self, m: MethodId) -> u64 {
        std::ptr::from_ref::<AtomicU64>(&self.counters[m.0 as usize]) as u64
    }

    /// The live entries: (name, kind, start, size), in address order.
    pub fn code_entries(&self) -> Vec<(String, &'static str, u64, u64)> {
        self.entries
            .in_address_order()
            .into_iter()
            .filter_map(|id| self.entries.get(id))
            .map(|e| {
                let kind = match &e.kind {
                    EntryKind::Trampoline => "trampoline",
                    EntryKind::Enilopmart => "enilopmart",
                    EntryKind::Method {
                        optimised: true, ..
                    } => "optimised method",
                    EntryKind::Method { decoy: true, .. } => "decoy",
                    EntryKind::Method { .. } => "method",
                    EntryKind::ClosedPic { .. } => "closed PIC",
                    EntryKind::OpenPic { .. } => "open PIC",
                };
                (e.name.clone(), kind, e.start, e.size)
            })
            .collect()
    }

    /// Records an error for the caller of generated code and answers 0 (unwind).
    fn fail(&mut self, e: VmError) -> u64 {
        self.error.get_or_insert(e);
        0
    }

    fn method_name_at(&self, ret: u64) -> String {
        self.entries
            .containing(ret.wrapping_sub(1))
            .and_then(|id| self.entries.get(id))
            .map_or_else(|| format!("code at {ret:#x}"), |e| e.name.clone())
    }

    /// Runs `method` on `receiver` with `args` in generated code, compiling it if needed. Only
    /// from the driver (not from generated code): this is a safepoint before and after.
    pub fn call(
        &mut self,
        method: MethodId,
        receiver: Value,
        args: &[Value],
    ) -> Result<Value, VmError> {
        if self.in_jit {
            return Err(VmError::Internal("Vm::call from generated code".into()));
        }
        let m = self.prog.method(method);
        if args.len() != usize::from(m.nargs) || interp::class_of(&self.heap, receiver) != m.class {
            return Err(VmError::Internal(format!(
                "bad receiver or arguments for {}",
                m.name
            )));
        }
        let id = self.ensure_compiled_at_safepoint(method)?;
        let e = self
            .entries
            .get(id)
            .ok_or_else(|| VmError::Internal("lost entry".into()))?;
        let entry = e.start + u64::from(e.nocheck_entry);
        let raw: Vec<u64> = args.iter().map(|v| v.0).collect();
        self.in_jit = true;
        self.error = None;
        let here = 0u8;
        let sp = std::ptr::addr_of!(here) as u64;
        self.stack_limit.store(
            sp.saturating_sub(self.config.jit_stack_bytes),
            Ordering::Relaxed,
        );
        let enter = self.enter;
        let vm: *mut Vm = self;
        let previous = CURRENT.with(|c| c.replace(vm));
        // SAFETY: `enter` is the enilopmart generated in `new`, at the start of the zone, which
        // lives as long as `self`; its signature is EnterFn (see jit::trampolines). `entry` is
        // the unchecked entry of live code for `method`, whose class matches the receiver's
        // (checked above), called with as many arguments as it takes. Generated code only
        // reaches the VM through CURRENT (see with_vm) and does not outlive this call.
        let answer = unsafe {
            let f: EnterFn = std::mem::transmute::<usize, EnterFn>(enter as usize);
            f(entry, receiver.0, raw.as_ptr(), raw.len() as u64)
        };
        CURRENT.with(|c| c.set(previous));
        self.in_jit = false;
        debug_assert_eq!(
            self.unwind_cell.load(Ordering::Relaxed),
            0,
            "enilopmart restores the cell"
        );
        if answer == 0 {
            return Err(self
                .error
                .take()
                .unwrap_or_else(|| VmError::Internal("unwound without an error".into())));
        }
        Ok(Value(answer))
    }

    /// Code for `method`, compiling it (and compacting first if the zone is full).
    fn ensure_compiled_at_safepoint(&mut self, method: MethodId) -> Result<EntryId, VmError> {
        if let Some(id) = self.methods[method.0 as usize].code {
            return Ok(id);
        }
        for attempt in 0..3 {
            if let Some(id) = self.compile(method, self.config.opt)? {
                return Ok(id);
            }
            match attempt {
                0 => self.compact(),
                _ => self.compact_all(),
            }
        }
        Err(VmError::ZoneTooSmall(self.prog.method(method).name.clone()))
    }

    /// Compiles `method` and makes it its current code; `None` when the zone is full.
    pub(crate) fn compile(
        &mut self,
        method: MethodId,
        optimised: bool,
    ) -> Result<Option<EntryId>, VmError> {
        let plan = if optimised {
            self.inline_plan(method)
        } else {
            InlinePlan::new()
        };
        let id = self.compile_code(method, optimised, false, &plan, None)?;
        if let Some(id) = id {
            self.methods[method.0 as usize].code = Some(id);
            if optimised {
                self.stats.optimised += 1;
            }
        }
        Ok(id)
    }

    /// Compiles `method` into the zone (not installing it); with `pad_to`, pads the code with
    /// `int3` to exactly that size, or gives up if it is bigger.
    pub(crate) fn compile_code(
        &mut self,
        method: MethodId,
        optimised: bool,
        decoy: bool,
        plan: &InlinePlan,
        pad_to: Option<usize>,
    ) -> Result<Option<EntryId>, VmError> {
        let counter = self.config.counters.then(|| self.counter_addr(method));
        let cc = x64::compile_method(&self.prog, method, &self.addrs, counter, plan)
            .map_err(|e| VmError::Internal(format!("{}: {e}", self.prog.method(method).name)))?;
        let mut code = cc.code;
        if let Some(n) = pad_to {
            if code.len() > n {
                return Ok(None);
            }
            code.resize(n, INT3);
        }
        if code.len() > self.zone.size() / 2 {
            return Err(VmError::ZoneTooSmall(self.prog.method(method).name.clone()));
        }
        let Some(start) = self.zone.alloc(code.len()) else {
            return Ok(None);
        };
        self.zone.write(start, &code);
        let id = self.entries.insert(Entry {
            kind: EntryKind::Method {
                method,
                optimised,
                decoy,
            },
            name: self.prog.method(method).name.clone(),
            start,
            size: code.len() as u64,
            check_entry: cc.check_entry,
            nocheck_entry: cc.nocheck_entry,
            sites: cc
                .sites
                .into_iter()
                .map(|info| Site {
                    info,
                    link: Link::Unlinked,
                })
                .collect(),
            pc_map: cc.pc_map,
        });
        self.stats.compiled += 1;
        self.publish_load(id);
        Ok(Some(id))
    }

    /// Puts raw code (a PIC) in the zone and publishes it; `None` when the zone is full.
    pub(crate) fn install_stub(
        &mut self,
        kind: EntryKind,
        name: String,
        code: &[u8],
    ) -> Option<EntryId> {
        let start = self.zone.alloc(code.len())?;
        self.zone.write(start, code);
        let id = self.entries.insert(Entry {
            kind,
            name,
            start,
            size: code.len() as u64,
            check_entry: 0,
            nocheck_entry: 0,
            sites: Vec::new(),
            pc_map: Vec::new(),
        });
        self.publish_load(id);
        Some(id)
    }

    /// Frees an entry that nothing links to and no frame runs: publishes the free, fills it
    /// with `int3`, forgets it.
    pub(crate) fn free_entry(&mut self, id: EntryId) {
        let Some(e) = self.entries.remove(id) else {
            return;
        };
        self.publisher
            .publish(Event::Free(CodeFree { start: e.start }));
        self.zone
            .fill(e.start, usize::try_from(e.size).unwrap_or(0));
        if let Some(m) = e.method()
            && self.methods[m.0 as usize].code == Some(id)
        {
            self.methods[m.0 as usize].code = None;
        }
        if let EntryKind::OpenPic { selector, .. } = e.kind {
            self.open_pics.remove(&selector);
        }
        self.stats.frees += 1;
    }

    /// The send-miss handler: find the site from its return address, look the method up for
    /// the receiver's class, compile it if needed, relink the site, and answer where to go.
    fn send_miss(&mut self, ret: u64, args: *const u64) -> MissAnswer {
        self.stats.send_misses += 1;
        let unwind = MissAnswer {
            target: 0,
            value: 0,
        };
        let found = self.entries.containing(ret.wrapping_sub(1)).and_then(|id| {
            let e = self.entries.get(id)?;
            Some((id, e.site_at(ret)?))
        });
        let Some((eid, site)) = found else {
            self.fail(VmError::Internal(format!(
                "send miss from unknown site {ret:#x}"
            )));
            return unwind;
        };
        let info = self.entries.get(eid).map(|e| e.sites[site].info.clone());
        let Some(info) = info else {
            return unwind;
        };
        let n = usize::from(info.nargs);
        // SAFETY: the trampoline passes the address just above the return address, where the
        // send site found by that return address pushed `n` arguments over the receiver.
        let words: Vec<u64> = (0..=n).map(|i| unsafe { args.add(i).read() }).collect();
        let receiver = Value(words[n]);
        let argv: Vec<Value> = words[..n].iter().rev().map(|&w| Value(w)).collect();
        let class = interp::class_of(&self.heap, receiver);
        let Some(method) = self.prog.lookup(class, info.selector) else {
            let e = VmError::DoesNotUnderstand {
                class: self.prog.class(class).name.clone(),
                selector: self.prog.selectors.name(info.selector).to_owned(),
            };
            self.fail(e);
            return unwind;
        };
        let target = match self.methods[method.0 as usize].code {
            Some(t) => Some(t),
            None => match self.compile(method, self.config.opt) {
                Ok(t) => t,
                Err(e) => {
                    self.fail(e);
                    return unwind;
                }
            },
        };
        let Some(target) = target else {
            // No room until the next compaction: interpret this call.
            self.compaction_wanted = true;
            self.stats.interpreted += 1;
            let interpreter = Interpreter::new(&self.prog, &mut self.heap);
            let mut interpreter = if self.config.counters {
                interpreter.counting(&self.counters, self.thread_sends)
            } else {
                interpreter
            };
            let r = interpreter.run(method, receiver, &argv);
            return match r {
                Ok(v) => MissAnswer {
                    target: 0,
                    value: v.0,
                },
                Err(e) => {
                    self.fail(e);
                    unwind
                }
            };
        };
        self.relink(eid, site, class, target);
        let e = self.entries.get(target).expect("target compiled above");
        MissAnswer {
            target: e.start + u64::from(e.nocheck_entry),
            value: 0,
        }
    }

    /// Publishes the zone if CCFree moved since the last time.
    pub(crate) fn publish_zone(&mut self) {
        let free = self.zone.free_start();
        if free != self.published_free_start {
            self.published_free_start = free;
            self.publisher.publish(Event::Zone(ProtoZone {
                start: self.zone.start(),
                free_start: free,
                end: self.zone.end(),
            }));
        }
    }

    /// Publishes a new entry: the zone first if it grew, then the load.
    fn publish_load(&mut self, id: EntryId) {
        self.publish_zone();
        let Some(e) = self.entries.get(id) else {
            return;
        };
        let event = Event::Load(self.proto_entry(e));
        self.publisher.publish(event);
    }

    /// Publishes a move (the code is already at `to`).
    pub(crate) fn publish_move(&mut self, from: u64, to: u64) {
        self.publisher
            .publish(Event::Move(vmscope_proto::v1::CodeMove { from, to }));
    }

    fn proto_entry(&self, e: &Entry) -> ProtoEntry {
        let kind = match e.kind {
            EntryKind::Trampoline => CodeKind::Trampoline,
            EntryKind::Enilopmart => CodeKind::Enilopmart,
            EntryKind::Method { .. } => CodeKind::Method,
            EntryKind::ClosedPic { .. } => CodeKind::ClosedPic,
            EntryKind::OpenPic { .. } => CodeKind::OpenPic,
        };
        let pc_map = e
            .pc_map
            .iter()
            .map(|m| PcMapping {
                mcpc: e.start + u64::from(m.offset),
                bcpc: m.bcpc,
                inlined: m
                    .inlined
                    .iter()
                    .map(|&(method, bcpc)| InlinedFrame {
                        method: self.prog.method(method).name.clone(),
                        bcpc,
                    })
                    .collect(),
            })
            .collect();
        let cases = match &e.kind {
            EntryKind::ClosedPic { cases, .. } => cases
                .iter()
                .filter_map(|&(class, target)| {
                    let t = self.entries.get(target)?;
                    Some(PicCase {
                        class_name: self.prog.class(class).name.clone(),
                        target: t.start + u64::from(t.nocheck_entry),
                    })
                })
                .collect(),
            _ => Vec::new(),
        };
        ProtoEntry {
            kind: kind as i32,
            name: e.name.clone(),
            start: e.start,
            size: e.size,
            pc_map,
            cases,
        }
    }

    /// Between two calls into generated code: drops the heap's temporary objects (or collects
    /// them, in the GC-heavy mode), recompiles hot methods with the optimising tier, compacts
    /// if the zone asked for it or has less than a quarter free, and publishes the counters
    /// when due.
    pub fn safepoint(&mut self) {
        debug_assert!(!self.in_jit);
        self.collect_if_due();
        self.serve_heap();
        self.tier_up();
        if self.compaction_wanted || self.zone.free_bytes() < self.zone.size() / 4 {
            self.compact();
        }
        self.publish_levels_if_due();
    }

    /// Answers the daemon's heap requests that came since the last safepoint, and lets the
    /// `order` global go if told to. The VM thread is stopped while it counts: that is the
    /// pause each answer gives.
    fn serve_heap(&mut self) {
        if self.release_order.swap(false, Ordering::Relaxed) {
            let nil = self.heap.nil();
            for (name, value) in &mut self.globals {
                if name == "order" {
                    *value = nil;
                }
            }
            println!("released");
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
        let Some(service) = &self.heap_service else {
            return;
        };
        while let Ok(request) = service.requests.try_recv() {
            use vmscope_proto::v1::{heap_answer::Answer, heap_request::Request};
            let started = std::time::Instant::now();
            let census = crate::heap_census::Census::new(
                &self.heap,
                &self.prog,
                &self.globals,
                request.full_gc,
            );
            let answer = match &request.request {
                Some(Request::Histogram(_)) => Answer::Histogram(vmscope_proto::v1::HeapClasses {
                    classes: census.histogram(),
                }),
                Some(Request::Query(query)) => match census.structures(query) {
                    Ok(structures) => {
                        Answer::Structures(vmscope_proto::v1::HeapStructures { structures })
                    }
                    Err(why) => Answer::Error(why),
                },
                None => Answer::Error("a request with nothing asked".into()),
            };
            let pause_ns = started.elapsed().as_nanos() as u64;
            let _ = service.answers.send(vmscope_proto::v1::HeapAnswer {
                id: request.id,
                pause_ns,
                answer: Some(answer),
            });
        }
    }

    /// The class id for a value (for tests and the driver).
    pub fn class_of(&self, v: Value) -> ClassId {
        interp::class_of(&self.heap, v)
    }
}
