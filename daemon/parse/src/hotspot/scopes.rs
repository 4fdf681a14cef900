//! An nmethod's debug information: which methods were inlined at each of its pcs.
//!
//! C2 and C1 record, for every pc where the VM may stop the code (calls, safepoint polls,
//! implicit exceptions), a `PcDesc`: the pc's offset from the code's start and where its scope
//! is in the nmethod's scopes data. A scope is `(sender, method, bci, ...)` in HotSpot's
//! compressed stream ([`super::compressed`]): the innermost method inlined there, its bytecode index, and
//! the scope it was inlined into, up to the compiled method's own. Methods are indices into
//! the nmethod's metadata table (1-based; 0 is null).

use super::{compressed::Unsigned5, layout::FieldAt};

/// `DebugInformationRecorder::serialized_null`: no scope, or no sender.
pub const SERIALIZED_NULL: u32 = 0;

/// Deepest inlining believed (C2's `MaxInlineLevel` is 15 by default, at most 100 or so).
pub const MAX_DEPTH: usize = 64;

/// One `PcDesc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcDesc {
    /// Offset of the pc from the code's start (a return address, for a call).
    pub pc_offset: u32,
    /// Where its scope is in the scopes data; [`SERIALIZED_NULL`] for none.
    pub scope: u32,
}

/// The layout of a `PcDesc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcDescLayout {
    /// `sizeof(PcDesc)`.
    pub size: u64,
    /// `PcDesc::_pc_offset`.
    pub pc_offset: FieldAt,
    /// `PcDesc::_scope_decode_offset`.
    pub scope: FieldAt,
}

/// The `PcDesc`s in `bytes` (the nmethod's scopes pcs), sorted by pc, those without a scope
/// and HotSpot's sentinel (`pc_offset` -1) left out.
pub fn pc_descs(bytes: &[u8], layout: &PcDescLayout) -> Vec<PcDesc> {
    let Ok(size) = usize::try_from(layout.size) else {
        return Vec::new();
    };
    if size == 0 {
        return Vec::new();
    }
    let mut descs: Vec<PcDesc> = bytes
        .chunks_exact(size)
        .filter_map(|d| {
            let pc = u32::try_from(layout.pc_offset.get(d)?).ok()?;
            let scope = u32::try_from(layout.scope.get(d)?).ok()?;
            (scope != SERIALIZED_NULL).then_some(PcDesc {
                pc_offset: pc,
                scope,
            })
        })
        .collect();
    descs.sort_by_key(|d| d.pc_offset);
    descs.dedup_by_key(|d| d.pc_offset);
    descs
}

/// One scope: a method (by metadata index) at a bytecode index, inlined into its sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    /// Where the sender's scope is; [`SERIALIZED_NULL`] for the compiled method's own.
    pub sender: u32,
    /// Index into the nmethod's metadata (1-based).
    pub method: u32,
    /// Bytecode index; -1 (`InvocationEntryBci`) at the method's entry.
    pub bci: i32,
}

/// The scope at `offset` of `data` (the scopes data, written in `coding`).
pub fn scope_at(data: &[u8], offset: u32, coding: Unsigned5) -> Option<Scope> {
    let mut pos = usize::try_from(offset).ok()?;
    let sender = coding.read_int(data, &mut pos)?;
    let method = coding.read_int(data, &mut pos)?;
    // `read_bci`: stored as bci - InvocationEntryBci.
    let bci = (coding.read_int(data, &mut pos)? as i32).wrapping_sub(1);
    Some(Scope {
        sender,
        method,
        bci,
    })
}

/// The scopes from the one at `offset` out to the compiled method's own, innermost first;
/// `None` if the chain does not decode, loops, or is deeper than [`MAX_DEPTH`].
pub fn scope_chain(data: &[u8], offset: u32, coding: Unsigned5) -> Option<Vec<Scope>> {
    let mut chain = Vec::new();
    let mut at = offset;
    while at != SERIALIZED_NULL {
        if chain.len() >= MAX_DEPTH {
            return None;
        }
        let scope = scope_at(data, at, coding)?;
        // A sender is always recorded before the scopes inlined into it.
        if scope.sender >= at && scope.sender != SERIALIZED_NULL {
            return None;
        }
        chain.push(scope);
        at = scope.sender;
    }
    (!chain.is_empty()).then_some(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    const JDK17: Unsigned5 = Unsigned5 { excluded: 0 };

    fn write_int(out: &mut Vec<u8>, value: u32) {
        JDK17.write_int(out, value);
    }

    #[test]
    fn a_chain_goes_from_the_innermost_scope_out() {
        // Scope of the compiled method at offset 1 (offset 0 is serialized_null's), a method
        // inlined into it at offset 5.
        let mut data = vec![0u8];
        let outer = data.len() as u32;
        for v in [SERIALIZED_NULL, 1, 10 + 1, 0, 0, 0] {
            write_int(&mut data, v);
        }
        let inner = data.len() as u32;
        for v in [outer, 2, 3 + 1, 0, 0, 0] {
            write_int(&mut data, v);
        }
        let chain = scope_chain(&data, inner, JDK17).unwrap();
        assert_eq!(
            chain,
            [
                Scope {
                    sender: outer,
                    method: 2,
                    bci: 3
                },
                Scope {
                    sender: 0,
                    method: 1,
                    bci: 10
                }
            ]
        );
        // A sender after its scope would loop.
        let mut looping = vec![0u8];
        for v in [5, 1, 1] {
            write_int(&mut looping, v);
        }
        assert_eq!(scope_chain(&looping, 1, JDK17), None);
        assert_eq!(scope_chain(&data, 200, JDK17), None, "outside the data");
    }

    #[test]
    fn pc_descs_are_sorted_and_those_without_scope_dropped() {
        let layout = PcDescLayout {
            size: 16,
            pc_offset: FieldAt {
                offset: 0,
                width: 4,
                signed: true,
            },
            scope: FieldAt {
                offset: 4,
                width: 4,
                signed: true,
            },
        };
        let mut bytes = Vec::new();
        for (pc, scope) in [(-1i32, 0i32), (40, 7), (12, 3), (20, 0)] {
            bytes.extend_from_slice(&pc.to_le_bytes());
            bytes.extend_from_slice(&scope.to_le_bytes());
            bytes.extend_from_slice(&[0; 8]);
        }
        assert_eq!(
            pc_descs(&bytes, &layout),
            [
                PcDesc {
                    pc_offset: 12,
                    scope: 3
                },
                PcDesc {
                    pc_offset: 40,
                    scope: 7
                }
            ]
        );
    }
}
