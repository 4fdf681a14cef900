//! Java frames of a HotSpot JVM, unwound by the JVM's own description of them.
//!
//! HotSpot's compiled code keeps no frame pointer (unless `-XX:+PreserveFramePointer`) and has
//! no `.eh_frame`, so neither of framehop's ways gets past the first Java frame. The JVM knows
//! each frame's shape, and says so in its vmStructs ([`crate::jvm::code_cache`]):
//!
//! - a **compiled frame** (an nmethod, or a runtime stub with a frame) is `frame_size` words,
//!   the return address in the top one and the caller's `rbp` below it: the caller's `sp` is
//!   `sp + 8 * frame_size`. Before the prologue has built the frame (`frame_complete_offset`)
//!   the return address is still at `sp`;
//! - an **interpreted frame** keeps `rbp` as its frame pointer: the return address above it,
//!   the caller's `rbp` at it, and the caller's `sp` in the slot
//!   `frame::interpreter_frame_sender_sp_offset` (the caller's own `sp`, before an adapter
//!   extended it for the callee's arguments);
//! - the **entry frame** that the call stub builds when C++ calls Java (`JavaCalls::call_helper`)
//!   is a frame-pointer frame: a return address into the call stub
//!   (`StubRoutines::_call_stub_return_address`) means the next frame is it, and its caller is
//!   the VM's C++ code, which framehop unwinds by libjvm's `.eh_frame` from there;
//! - code without a frame of its own (adapters, vtable stubs) has its return address at `sp`
//!   when sampled, and passes through otherwise.
//!
//! Every step reads only the stack copy the sample carries; the blob headers come from the
//! live process through [`CodeCache::blob_at`], within milliseconds of the sample.

use vmscope_parse::hotspot::Memory;

use super::{ReadCode, StackEnd};
use crate::jvm::code_cache::{BlobAt, CodeCache};
pub use crate::jvm::java_codes::JavaName;

/// A frame's caller, as the JVM's frame layout gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Caller {
    /// The return address into the caller.
    pub return_address: u64,
    /// The caller's stack pointer.
    pub sp: u64,
    /// The caller's frame pointer register.
    pub bp: u64,
    /// For an interpreted frame: its `Method*` and bytecode pointer, from its slots.
    pub interpreted: Option<(u64, u64)>,
    /// For a compiled frame: its blob, and whether it held the pc at the sample's time.
    pub compiled: Option<BlobAt>,
    /// For a stub's frame (the call stub, adapters, runtime stubs: blobs the JVM keeps for its
    /// life): where its name is, when its blob was read before the sample.
    pub stub: Option<u64>,
}

/// A Java frame of an unwound stack, named by the JVM's own structures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JavaFrame {
    /// Its index in the stack, leaf first.
    pub index: usize,
    /// The uid the JVM runs as: the owner of the code its name is kept as.
    pub owner: u32,
    /// What it is.
    pub name: JavaName,
}

/// The live memory of one process, for [`CodeCache`]'s reads.
pub(super) struct LiveMemory<'a> {
    pub code: &'a mut dyn ReadCode,
    pub pid: u32,
}

impl Memory for LiveMemory<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        self.code.read(self.pid, addr, buf)
    }

    fn read_many(&mut self, reads: &mut [(u64, &mut [u8])]) -> Vec<bool> {
        self.code.read_many(self.pid, reads)
    }
}

/// The caller of the Java frame whose pc is `pc` (the sampled instruction pointer for the
/// leaf, else the return address into it), with `sp` and `bp` the registers in that frame;
/// `None` if `pc` is not in the JVM's code cache, for framehop to unwind.
#[allow(clippy::too_many_arguments)]
pub(super) fn caller(
    cache: &mut CodeCache,
    mem: &mut dyn Memory,
    pc: u64,
    leaf: bool,
    sp: u64,
    bp: u64,
    read_stack: &mut dyn FnMut(u64) -> Result<u64, ()>,
    sample_ns: u64,
    now_ns: u64,
) -> Option<Result<Caller, StackEnd>> {
    let lookup = if leaf { pc } else { pc.checked_sub(1)? };
    if !cache.contains(lookup) {
        return None;
    }
    let mut read = |addr: u64| read_stack(addr).map_err(|()| StackEnd::BadAddress);
    let frame_pointer_frame =
        |read: &mut dyn FnMut(u64) -> Result<u64, StackEnd>| -> Result<Caller, StackEnd> {
            Ok(Caller {
                return_address: read(bp.checked_add(8).ok_or(StackEnd::BadAddress)?)?,
                sp: bp.checked_add(16).ok_or(StackEnd::BadAddress)?,
                bp: read(bp)?,
                interpreted: None,
                compiled: None,
                stub: None,
            })
        };
    let step = if cache.in_interpreter(lookup) {
        let frame = cache.layout().frame;
        let slot = |words: i64| bp.checked_add_signed(words * 8).ok_or(StackEnd::BadAddress);
        let sender_sp = slot(frame.sender_sp).and_then(&mut read);
        // A frame whose slots cannot be read is still unwound: only its name is lost.
        let method = slot(frame.method).and_then(&mut read).ok();
        let bcp = slot(frame.bcp).and_then(&mut read).ok();
        frame_pointer_frame(&mut read).and_then(|c| {
            Ok(Caller {
                sp: sender_sp?,
                compiled: None,
                interpreted: method.map(|m| (m, bcp.unwrap_or(0))),
                ..c
            })
        })
    } else if !leaf && pc == cache.call_stub_return() {
        let stub = cache
            .blob_at(mem, lookup, sample_ns, now_ns)
            .filter(|at| at.exact)
            .map(|at| at.blob.name);
        frame_pointer_frame(&mut read).map(|c| Caller { stub, ..c })
    } else {
        let Some(at) = cache.blob_at(mem, lookup, sample_ns, now_ns) else {
            return Some(Err(StackEnd::BadAddress));
        };
        let blob = at.blob;
        let compiled = (blob.method != 0).then_some(at);
        let stub = (blob.method == 0 && at.exact).then_some(blob.name);
        if blob.frame_words == 0 || (leaf && pc < blob.frame_complete) {
            if leaf {
                read(sp).map(|ra| Caller {
                    return_address: ra,
                    sp: sp + 8,
                    bp,
                    interpreted: None,
                    compiled,
                    stub,
                })
            } else {
                frame_pointer_frame(&mut read).map(|c| Caller { stub, ..c })
            }
        } else {
            let caller_sp = sp
                .checked_add(blob.frame_words * 8)
                .ok_or(StackEnd::BadAddress);
            caller_sp.and_then(|caller_sp| {
                Ok(Caller {
                    return_address: read(caller_sp - 8)?,
                    sp: caller_sp,
                    bp: read(caller_sp - 16)?,
                    interpreted: None,
                    compiled,
                    stub,
                })
            })
        }
    };
    Some(step.and_then(|c| {
        // Frames are above their callees: anything else is a walk gone astray.
        if c.sp <= sp {
            Err(StackEnd::NoProgress)
        } else if c.return_address == 0 {
            Err(StackEnd::NullReturnAddress)
        } else {
            Ok(c)
        }
    }))
}
