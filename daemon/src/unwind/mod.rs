//! User-space stack unwinding from a copy of the stack (`--call-graph dwarf`).
//!
//! The kernel side gives each sample the user registers (ip, sp, bp) and a copy of the top of
//! the user stack, starting at sp. This module turns that into the list of return addresses,
//! the way perf and samply do, with [framehop](https://docs.rs/framehop):
//!
//! - native code by its DWARF call frame information: `.eh_frame` through `.eh_frame_hdr`,
//!   `.eh_frame` alone, or `.debug_frame` (of a separate debug file when the binary has none),
//!   loaded once per binary by the module registry and shared by build id
//!   ([`crate::symbolize::unwind_tables`], `Module::unwind_sections`);
//! - code in no binary (JIT code) by frame pointers, framehop's fallback;
//! - CPython 3.12's perf trampolines, which have neither, by their known frame layout
//!   ([`cpython`]), recognised by their bytes read from the live process ([`ReadCode`]);
//! - HotSpot's Java frames (compiled, interpreted, stubs and the call stub back into the VM)
//!   by the frame layout the JVM describes in its vmStructs ([`hotspot`]), for a process that
//!   maps `libjvm.so`.
//!
//! Each process gets a framehop unwinder over its own mappings (`process.rs`), rebuilt only when
//! its mappings were read again; framehop's rule cache is shared by all processes (its entries
//! carry the unwinder's generation, so they never leak from one process to another).
//!
//! An unwind never fails: it yields the frames it found and a [`StackEnd`] saying why it
//! stopped, which is counted and shown in reports.

pub mod cpython;
mod hotspot;

pub use hotspot::{JavaFrame, JavaName};
mod memory;
mod process;

use std::{cell::Cell, collections::HashMap, fmt, sync::Arc};

use framehop::{
    Error as FrameError, FrameAddress, Unwinder as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64},
};
pub use memory::{MAX_CACHED_READS, MemoryCounters, ProcessMemory, ReadCode};
pub use vmscope_common::MAX_STACK_FRAMES;
use vmscope_parse::hotspot::vm_structs::ElfExports;

use crate::{
    jvm::code_cache::CodeCache,
    process::Process,
    symbolize::{Modules, unwind_tables::UnwindTables},
    vocab::{ModuleId, StackEnd},
};
use process::ProcessUnwinder;

/// The user registers a sample carries, from the task's `pt_regs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserRegs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer (`rbp`).
    pub bp: u64,
}

/// The copy of the top of a user stack that a sample carries.
#[derive(Clone, Copy, Debug)]
pub struct StackCopy<'a> {
    /// The address of `bytes[0]`: the stack pointer at the sample.
    pub sp: u64,
    /// The stack bytes from `sp` up.
    pub bytes: &'a [u8],
    /// Whether the copy stopped early at memory that could not be read (the top of the stack,
    /// usually), rather than at the size asked for.
    pub faulted: bool,
    /// When it was taken (the sample's CLOCK_MONOTONIC time): a JVM's code is believed for
    /// it only if it was there then.
    pub taken_ns: u64,
}

impl StackCopy<'_> {
    /// The 8 bytes at `addr`, if the copy holds them.
    fn read(&self, addr: u64) -> Option<u64> {
        let start = usize::try_from(addr.checked_sub(self.sp)?).ok()?;
        let bytes = self.bytes.get(start..start.checked_add(8)?)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }
}

/// Counters of the unwinder, reported by the daemon.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindCounters {
    /// Stacks unwound, per [`StackEnd`] (indexed as [`StackEnd::ALL`]).
    pub stacks: [u64; StackEnd::ALL.len()],
    /// Frames produced, leaves included.
    pub frames: u64,
    /// Frames unwound through a CPython trampoline.
    pub trampolines: u64,
    /// Per-process framehop unwinders built (first sample, or mappings changed).
    pub unwinders_built: u64,
    /// Binary mappings given to those unwinders.
    pub modules_added: u64,
    /// Binary mappings left to frame pointers: tables unreadable, without CFI, or the mapping
    /// outside the binary's segments.
    pub modules_without_tables: u64,
    /// Unwind tables loaded from binaries (from the module registry).
    pub tables_loaded: u64,
    /// Unwind tables shared by build id instead of loaded again (from the module registry).
    pub tables_shared: u64,
    /// Binaries whose unwind tables could not be read (from the module registry).
    pub table_failures: u64,
    /// Whether the vDSO's tables could not be read (its frames use frame pointers then).
    pub vdso_failures: u64,
    /// Frames unwound by a JVM's frame layout (compiled, interpreted, stub and entry frames).
    pub java_frames: u64,
    /// JVMs whose code cache the unwinder follows.
    pub jvms_attached: u64,
    /// JVMs whose vmStructs could not be read or lack what the unwinder needs: their Java
    /// frames end the stack.
    pub jvms_refused: u64,
    /// Blobs read by scans of JVMs' whole code caches as sessions started.
    pub jvm_blobs_scanned: u64,
    /// nmethods confirmed still there as batches began, their blocks read again together.
    pub jvm_blobs_confirmed: u64,
}

impl UnwindCounters {
    /// Stacks that ended for `end`.
    pub fn ended(&self, end: StackEnd) -> u64 {
        self.stacks[end.index()]
    }
}

/// How often, and how long after the last try, a JVM whose tables could not be read is tried
/// again: a JVM that has just mapped `libjvm.so` has not set up its code cache yet.
const JVM_TRIES: u32 = 8;
const JVM_RETRY_NS: u64 = 500_000_000;

/// What the unwinder knows of a process's JVM.
#[derive(Debug)]
enum Jvm {
    /// Its code cache is followed; the uid it runs as.
    Following(Box<CodeCache>, u32),
    /// It could not be followed: tried `tries` times, the last at `at_ns`.
    Refused { tries: u32, at_ns: u64 },
}

/// Unwinds user stacks of sampled processes; owns per-process state and framehop's caches.
pub struct Unwinder {
    modules: Arc<Modules>,
    processes: HashMap<u32, ProcessUnwinder, foldhash::fast::RandomState>,
    cache: CacheX86_64,
    /// Loaded on first use: `None` until then, `Some(None)` if it cannot be read.
    vdso: Option<Option<UnwindTables>>,
    /// The code cache of each process that maps `libjvm.so`, or when to try again.
    jvms: HashMap<u32, Jvm, foldhash::fast::RandomState>,
    /// The vmStructs exports of each `libjvm.so` seen, or why they cannot be read.
    jvm_exports: HashMap<ModuleId, Result<Arc<ElfExports>, String>, foldhash::fast::RandomState>,
    /// The Java frames of the last stack unwound.
    java_frames: Vec<JavaFrame>,
    /// Whether JVMs' code caches are followed at all.
    follow_java: bool,
    counters: UnwindCounters,
}

impl fmt::Debug for Unwinder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unwinder")
            .field("processes", &self.processes.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Unwinder {
    /// An unwinder that reads binaries' tables through `modules`.
    pub fn new(modules: Arc<Modules>) -> Self {
        Unwinder {
            modules,
            processes: HashMap::default(),
            cache: CacheX86_64::new(),
            vdso: None,
            jvms: HashMap::default(),
            jvm_exports: HashMap::default(),
            java_frames: Vec::new(),
            follow_java: true,
            counters: UnwindCounters::default(),
        }
    }

    /// Whether to follow JVMs' code caches for their Java frames (on by default); off, their
    /// frames are unwound as any JIT code's, by frame pointers.
    pub fn following_java(self, follow: bool) -> Self {
        Unwinder {
            follow_java: follow,
            ..self
        }
    }

    /// Unwinds one sample's user stack into `out`: the leaf ip first, then return addresses
    /// (not minus 1: symbolise `addr - 1`), at most [`MAX_STACK_FRAMES`].
    ///
    /// `process` must be the sampled process with its current mappings; `code` reads code bytes
    /// of JIT memory for the CPython trampoline rule.
    pub fn unwind(
        &mut self,
        process: &Process,
        regs: UserRegs,
        stack: StackCopy<'_>,
        code: &mut dyn ReadCode,
        out: &mut Vec<u64>,
    ) -> StackEnd {
        out.clear();
        let current = self
            .processes
            .get(&process.pid)
            .is_some_and(|u| u.maps_generation == process.maps_generation());
        if !current {
            let vdso = self
                .vdso
                .get_or_insert_with(|| load_vdso(&mut self.counters));
            let built =
                ProcessUnwinder::build(process, &self.modules, vdso.as_ref(), &mut self.counters);
            self.processes.insert(process.pid, built);
        }
        let now_ns = crate::sys::monotonic_ns();
        // A process not known as a JVM is looked at as its unwinder is built (its mappings
        // read anew).
        if self.follow_java && self.attach_due(process.pid, !current, now_ns) {
            self.attach_jvm(process, code, now_ns);
        }
        let unwinder = &self.processes[&process.pid];
        let jvm = match self.jvms.get_mut(&process.pid) {
            Some(Jvm::Following(cache, owner)) => Some((&mut **cache, *owner)),
            _ => None,
        };
        self.java_frames.clear();
        let end = walk(
            unwinder,
            &mut self.cache,
            process,
            jvm.map(|(cache, owner)| (cache, owner, &mut self.java_frames)),
            now_ns,
            regs,
            stack,
            code,
            out,
            &mut self.counters,
        );
        self.counters.frames += out.len() as u64;
        end
    }

    /// A batch of samples begins: the nmethods the last batch's stacks went through are read
    /// again, one round trip per JVM ([`CodeCache::confirm_used`]), so that this batch's
    /// samples in them are known to have run in them.
    pub fn begin_batch(&mut self, code: &mut dyn ReadCode) {
        let now_ns = crate::sys::monotonic_ns();
        for (&pid, jvm) in &mut self.jvms {
            if let Jvm::Following(cache, _) = jvm {
                let mut mem = hotspot::LiveMemory { code, pid };
                self.counters.jvm_blobs_confirmed += cache.confirm_used(&mut mem, now_ns) as u64;
            }
        }
    }

    /// Reads the code cache of `process`, a JVM about to be sampled, whole (attaching to it
    /// first if need be): every blob of its heaps read now is then known to have been there
    /// at the samples that follow. Without it, a session's first samples in code compiled
    /// before it would find their blobs first read after them, and be named by the perf map.
    /// Returns the blobs read (0 for a process that is not a JVM, or not followed).
    pub fn scan_jvm(&mut self, process: &Process, code: &mut dyn ReadCode) -> usize {
        if !self.follow_java {
            return 0;
        }
        let now_ns = crate::sys::monotonic_ns();
        if self.attach_due(process.pid, true, now_ns) {
            self.attach_jvm(process, code, now_ns);
        }
        let Some(Jvm::Following(cache, _)) = self.jvms.get_mut(&process.pid) else {
            return 0;
        };
        let mut mem = hotspot::LiveMemory {
            code,
            pid: process.pid,
        };
        let blobs = cache.scan(&mut mem, now_ns);
        self.counters.jvm_blobs_scanned += blobs as u64;
        blobs
    }

    /// Counts a stack unwound from a copy as ending for `end`: the end the profile gives it,
    /// which may be another than the walk's (a return address outside every mapping found as
    /// its frames are placed). Once per stack, however often it was unwound.
    pub fn count_end(&mut self, end: StackEnd) {
        self.counters.stacks[end.index()] += 1;
    }

    /// Whether to try following `pid`'s code cache now: a process never tried when `unknown`
    /// says so, a refused JVM [`JVM_RETRY_NS`] after its last try while it has tries left.
    fn attach_due(&self, pid: u32, unknown: bool, now_ns: u64) -> bool {
        match self.jvms.get(&pid) {
            None => unknown,
            Some(Jvm::Following(..)) => false,
            Some(&Jvm::Refused { tries, at_ns }) => {
                tries < JVM_TRIES && now_ns.saturating_sub(at_ns) >= JVM_RETRY_NS
            }
        }
    }

    /// Follows the code cache of `process` if it maps `libjvm.so`. A JVM whose tables cannot
    /// be read is tried again [`JVM_TRIES`] times, [`JVM_RETRY_NS`] apart, and then left alone.
    fn attach_jvm(&mut self, process: &Process, code: &mut dyn ReadCode, now_ns: u64) {
        let Some((range, offset, module)) = process
            .file_mappings()
            .find(|&(_, _, id)| self.modules.get(id).is_some_and(|m| m.is_libjvm()))
        else {
            return;
        };
        let exports = self
            .jvm_exports
            .entry(module)
            .or_insert_with(|| {
                let module = self.modules.get(module).ok_or("libjvm.so is closed")?;
                module.hotspot_exports().map(Arc::new)
            })
            .clone();
        let attached = exports.and_then(|exports| {
            let owner = crate::sys::read_status(process.pid)
                .map_err(|e| format!("cannot read its status: {e}"))?
                .uids
                .effective;
            let placed = exports
                .in_process(range.start, offset)
                .ok_or("libjvm.so's mapping is in none of its segments")?;
            let mut mem = hotspot::LiveMemory {
                code,
                pid: process.pid,
            };
            CodeCache::attach(&mut mem, &placed, now_ns)
                .map(|cache| (cache, owner))
                .map_err(|e| e.to_string())
        });
        let pid = process.pid;
        match attached {
            Ok((cache, owner)) => {
                self.counters.jvms_attached += 1;
                tracing::debug!(pid, "following the JVM's Java frames");
                self.jvms
                    .insert(pid, Jvm::Following(Box::new(cache), owner));
            }
            Err(e) => {
                let tries = match self.jvms.get(&pid) {
                    Some(Jvm::Refused { tries, .. }) => tries + 1,
                    _ => 1,
                };
                if tries == JVM_TRIES {
                    self.counters.jvms_refused += 1;
                    tracing::warn!(
                        pid,
                        "cannot follow the JVM's Java frames, its stacks end at Java code: {e}"
                    );
                } else {
                    tracing::debug!(pid, tries, "cannot follow the JVM's Java frames yet: {e}");
                }
                self.jvms.insert(
                    pid,
                    Jvm::Refused {
                        tries,
                        at_ns: now_ns,
                    },
                );
            }
        }
    }

    /// The interpreted Java frames of the stack [`Unwinder::unwind`] gave last, named by the
    /// methods their frames hold.
    pub fn java_frames(&self) -> &[JavaFrame] {
        &self.java_frames
    }

    /// Whether the Java frames of `pid` are unwound by its JVM's frame layout: a JVM whose
    /// vmStructs were read.
    pub fn follows_java(&self, pid: u32) -> bool {
        matches!(self.jvms.get(&pid), Some(Jvm::Following(..)))
    }

    /// Drops what is kept about a process (it exited or exec'd).
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
        self.jvms.remove(&pid);
    }

    /// Keeps only the processes `keep` says, as the process table forgets idle ones.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.processes.retain(|&pid, _| keep(pid));
        self.jvms.retain(|&pid, _| keep(pid));
    }

    /// The counters, with the module registry's counts of unwind tables.
    pub fn counters(&self) -> UnwindCounters {
        let modules = self.modules.counters();
        UnwindCounters {
            tables_loaded: modules.unwind_loaded,
            tables_shared: modules.unwind_build_id_hits,
            table_failures: modules.unwind_failures,
            ..self.counters
        }
    }
}

fn load_vdso(counters: &mut UnwindCounters) -> Option<UnwindTables> {
    let tables = crate::symbolize::vdso::image()
        .and_then(|image| UnwindTables::parse(image).map_err(|e| e.to_string()));
    match tables {
        Ok(tables) if tables.has_cfi() => Some(tables),
        Ok(_) => {
            counters.vdso_failures += 1;
            tracing::warn!("the vDSO has no unwind tables: its frames use frame pointers");
            None
        }
        Err(e) => {
            counters.vdso_failures += 1;
            tracing::warn!(
                "cannot read the vDSO's unwind tables, its frames use frame pointers: {e}"
            );
            None
        }
    }
}

/// Reads the stack copy for framehop, remembering whether a read fell past its end: a frame
/// that needed such bytes is not trusted even when framehop found a way on (it falls back to
/// frame pointers when DWARF evaluation fails).
struct Reader<'a> {
    copy: StackCopy<'a>,
    past_end: Cell<bool>,
}

impl Reader<'_> {
    fn read(&self, addr: u64) -> Result<u64, ()> {
        self.copy.read(addr).ok_or_else(|| {
            if addr >= self.copy.sp {
                self.past_end.set(true);
            }
        })
    }

    fn end_of_copy(&self) -> StackEnd {
        if self.copy.faulted {
            StackEnd::CopyFaulted
        } else {
            StackEnd::CopyTooSmall
        }
    }

    fn end_for(&self, error: FrameError) -> StackEnd {
        match error {
            FrameError::CouldNotReadStack(addr) if addr >= self.copy.sp => self.end_of_copy(),
            FrameError::CouldNotReadStack(_) | FrameError::IntegerOverflow => StackEnd::BadAddress,
            FrameError::FramepointerUnwindingMovedBackwards => StackEnd::FramePointerBackwards,
            FrameError::DidNotAdvance => StackEnd::NoProgress,
            FrameError::ReturnAddressIsNull => StackEnd::NullReturnAddress,
        }
    }
}

/// Steps frame by frame, so that the trampoline rule can take the frames framehop would get
/// wrong.
#[allow(clippy::too_many_arguments)]
fn walk(
    unwinder: &ProcessUnwinder,
    cache: &mut CacheX86_64,
    process: &Process,
    mut jvm: Option<(&mut CodeCache, u32, &mut Vec<JavaFrame>)>,
    now_ns: u64,
    regs: UserRegs,
    stack: StackCopy<'_>,
    code: &mut dyn ReadCode,
    out: &mut Vec<u64>,
    counters: &mut UnwindCounters,
) -> StackEnd {
    let reader = Reader {
        copy: stack,
        past_end: Cell::new(false),
    };
    let mut read_stack = |addr| reader.read(addr);
    let mut state = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
    let mut address = FrameAddress::from_instruction_pointer(regs.ip);
    out.push(regs.ip);
    loop {
        let (pc, leaf) = match address {
            FrameAddress::InstructionPointer(ip) => (ip, true),
            FrameAddress::ReturnAddress(ra) => (ra.get(), false),
        };
        let java = jvm.as_mut().and_then(|(jvm, owner, frames)| {
            let mut mem = hotspot::LiveMemory {
                code: &mut *code,
                pid: process.pid,
            };
            let step = hotspot::caller(
                jvm,
                &mut mem,
                pc,
                leaf,
                state.sp(),
                state.bp(),
                &mut read_stack,
                stack.taken_ns,
                now_ns,
            );
            let name = match step {
                Some(Ok(hotspot::Caller {
                    interpreted: Some((method, bcp)),
                    ..
                })) => jvm
                    .method(&mut mem, method, now_ns)
                    .map(|m| JavaName::Interpreted {
                        bci: m.bci(bcp),
                        method: m,
                    }),
                Some(Ok(hotspot::Caller {
                    compiled: Some(at), ..
                })) if at.exact => jvm
                    .compiled(&mut mem, &at.blob, now_ns)
                    .map(JavaName::Compiled),
                Some(Ok(hotspot::Caller {
                    stub: Some(name), ..
                })) => jvm.stub_name(&mut mem, name).map(JavaName::Stub),
                _ => None,
            };
            if let Some(name) = name {
                frames.push(JavaFrame {
                    index: out.len() - 1,
                    owner: *owner,
                    name,
                });
            }
            step
        });
        if let Some(java) = java {
            counters.java_frames += 1;
            if reader.past_end.get() {
                return reader.end_of_copy();
            }
            let caller = match java {
                Ok(caller) => caller,
                Err(end) => return end,
            };
            state.set_ip(caller.return_address);
            state.set_sp(caller.sp);
            state.set_bp(caller.bp);
            let Some(next) = FrameAddress::from_return_address(caller.return_address) else {
                return StackEnd::NullReturnAddress;
            };
            if out.len() >= MAX_STACK_FRAMES {
                return StackEnd::FrameLimit;
            }
            out.push(caller.return_address);
            address = next;
            continue;
        }
        let step = match address {
            FrameAddress::ReturnAddress(ra) if is_trampoline(process, ra.get(), code) => {
                counters.trampolines += 1;
                let sp = state.sp();
                let caller_sp = sp.checked_add(cpython::CALLER_SP_OFFSET);
                match (
                    sp.checked_add(cpython::CALLER_RETURN_ADDRESS_OFFSET),
                    caller_sp,
                ) {
                    (Some(slot), Some(caller_sp)) => read_stack(slot)
                        .map(|caller_ra| {
                            state.set_ip(caller_ra);
                            state.set_sp(caller_sp);
                            Some(caller_ra)
                        })
                        .map_err(|()| FrameError::CouldNotReadStack(slot)),
                    _ => Err(FrameError::IntegerOverflow),
                }
            }
            _ => unwinder
                .unwinder
                .unwind_frame(address, &mut state, cache, &mut read_stack),
        };
        if reader.past_end.get() {
            return reader.end_of_copy();
        }
        let return_address = match step {
            Ok(Some(ra)) => ra,
            Ok(None) => return StackEnd::Complete,
            Err(error) => return reader.end_for(error),
        };
        let Some(next) = FrameAddress::from_return_address(return_address) else {
            return StackEnd::NullReturnAddress;
        };
        if out.len() >= MAX_STACK_FRAMES {
            return StackEnd::FrameLimit;
        }
        out.push(return_address);
        address = next;
    }
}

/// Whether `ra` is the return address of a CPython trampoline's call: in anonymous memory, with
/// the trampoline's bytes around it.
fn is_trampoline(process: &Process, ra: u64, code: &mut dyn ReadCode) -> bool {
    let Some(start) = ra.checked_sub(cpython::RETURN_OFFSET) else {
        return false;
    };
    if !process.is_anonymous_code(start) {
        return false;
    }
    let mut bytes = [0; cpython::TRAMPOLINE.len()];
    code.read(process.pid, start, &mut bytes) && cpython::is_trampoline_return(&bytes)
}

#[cfg(test)]
mod own_stack;
#[cfg(test)]
mod tests;
