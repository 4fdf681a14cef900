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
//!   ([`cpython`]), recognised by their bytes read from the live process ([`ReadCode`]).
//!
//! Each process gets a framehop unwinder over its own mappings (`process.rs`), rebuilt only when
//! its mappings were read again; framehop's rule cache is shared by all processes (its entries
//! carry the unwinder's generation, so they never leak from one process to another).
//!
//! An unwind never fails: it yields the frames it found and a [`StackEnd`] saying why it
//! stopped, which is counted and shown in reports.

pub mod cpython;
mod memory;
mod process;

use std::{cell::Cell, collections::HashMap, fmt, sync::Arc};

use framehop::{
    Error as FrameError, FrameAddress, Unwinder as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64},
};
pub use memory::{MAX_CACHED_READS, MemoryCounters, ProcessMemory, ReadCode};
pub use vmscope_common::MAX_STACK_FRAMES;

use crate::{
    process::Process,
    symbolize::{Modules, unwind_tables::UnwindTables},
    vocab::StackEnd,
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
}

impl UnwindCounters {
    /// Stacks that ended for `end`.
    pub fn ended(&self, end: StackEnd) -> u64 {
        self.stacks[end.index()]
    }
}

/// Unwinds user stacks of sampled processes; owns per-process state and framehop's caches.
pub struct Unwinder {
    modules: Arc<Modules>,
    processes: HashMap<u32, ProcessUnwinder, foldhash::fast::RandomState>,
    cache: CacheX86_64,
    /// Loaded on first use: `None` until then, `Some(None)` if it cannot be read.
    vdso: Option<Option<UnwindTables>>,
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
            counters: UnwindCounters::default(),
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
        let unwinder = &self.processes[&process.pid];
        let end = walk(
            unwinder,
            &mut self.cache,
            process,
            regs,
            stack,
            code,
            out,
            &mut self.counters,
        );
        self.counters.frames += out.len() as u64;
        end
    }

    /// Counts a stack unwound from a copy as ending for `end`: the end the profile gives it,
    /// which may be another than the walk's (a return address outside every mapping found as
    /// its frames are placed). Once per stack, however often it was unwound.
    pub fn count_end(&mut self, end: StackEnd) {
        self.counters.stacks[end.index()] += 1;
    }

    /// Drops what is kept about a process (it exited or exec'd).
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// Keeps only the processes `keep` says, as the process table forgets idle ones.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.processes.retain(|&pid, _| keep(pid));
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
