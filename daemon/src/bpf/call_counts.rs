//! Exact call counts of native functions (`record --count 'libc.so.6:malloc'`): the uprobe
//! program `vmscope_count` attached at a function's entry for one process, counting in a
//! per-CPU slot that its attachment's cookie names.
//!
//! A uprobe attached for one process has its breakpoint installed in that process's memory
//! only (the kernel's uprobe filter matches the perf event's task's `mm`): every thread of the
//! target is counted, other processes running the same library never trap. Slots are the
//! manager's to hand out ([`MAX_COUNT_SLOTS`]); a slot is zeroed when attached, read as the sum
//! over CPUs.

use std::{collections::HashMap, path::Path};

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray, PerCpuValues},
    programs::{
        ProgramError, UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeError, UProbeLinkId, UProbeScope},
    },
};
use vmscope_common::MAX_COUNT_SLOTS;

use super::{SamplerError, map_err};

/// The counting program, its counters, and the attachments by slot.
pub(super) struct CallCounter {
    counts: PerCpuArray<MapData, u64>,
    links: HashMap<u32, UProbeLinkId>,
    /// Why counting cannot run here (the kernel refused the uprobe program).
    refusal: Option<String>,
    cpus: usize,
}

impl CallCounter {
    /// Loads the program (attached later, per function and process) and takes its map.
    pub(super) fn load(ebpf: &mut Ebpf, cpus: usize) -> Result<CallCounter, SamplerError> {
        let refusal = match ebpf.program_mut("vmscope_count") {
            None => return Err(SamplerError::Missing("program vmscope_count")),
            Some(program) => match <&mut UProbe>::try_from(program) {
                Ok(uprobe) => uprobe
                    .load()
                    .err()
                    .map(|e| format!("the kernel refused the uprobe program: {e}")),
                Err(e) => Some(format!("vmscope_count is not a uprobe program: {e}")),
            },
        };
        if let Some(refusal) = &refusal {
            tracing::warn!("call counts are not available: {refusal}");
        }
        let map = ebpf
            .take_map("CALL_COUNTS")
            .ok_or(SamplerError::Missing("CALL_COUNTS"))?;
        let counts = PerCpuArray::try_from(map).map_err(map_err("CALL_COUNTS"))?;
        Ok(CallCounter {
            counts,
            links: HashMap::new(),
            refusal,
            cpus,
        })
    }

    /// Counts calls of `symbol` in the ELF file at `path` (`shown` in messages) by process
    /// `pid` in `slot`, from 0.
    pub(super) fn attach(
        &mut self,
        ebpf: &mut Ebpf,
        slot: u32,
        (path, shown): (&Path, &str),
        symbol: &str,
        pid: u32,
    ) -> Result<(), SamplerError> {
        let refused = |why: String| SamplerError::Count(why);
        if let Some(refusal) = &self.refusal {
            return Err(refused(refusal.clone()));
        }
        if slot >= MAX_COUNT_SLOTS || self.links.contains_key(&slot) {
            return Err(refused(format!("slot {slot} is not free")));
        }
        let pid = std::num::NonZeroU32::new(pid).ok_or_else(|| refused("pid 0".into()))?;
        let zeros =
            PerCpuValues::try_from(vec![0u64; self.cpus]).map_err(|e| refused(e.to_string()))?;
        self.counts
            .set(slot, zeros, 0)
            .map_err(map_err("CALL_COUNTS"))?;
        let uprobe: &mut UProbe = ebpf
            .program_mut("vmscope_count")
            .and_then(|p| <&mut UProbe>::try_from(p).ok())
            .ok_or(SamplerError::Missing("program vmscope_count"))?;
        let link = uprobe
            .attach(
                UProbeAttachPoint {
                    location: UProbeAttachLocation::Symbol(symbol),
                    cookie: Some(u64::from(slot)),
                },
                path,
                UProbeScope::OneProcess(pid),
            )
            .map_err(|e| match e {
                ProgramError::UProbeError(UProbeError::SymbolError { .. }) => refused(format!(
                    "no function {symbol} in {shown} (neither in its symbols nor in its \
                     dynamic symbols)"
                )),
                e => refused(format!("{symbol} in {shown}: {:#}", anyhow::Error::new(e))),
            })?;
        self.links.insert(slot, link);
        Ok(())
    }

    /// The calls counted in `slot` so far.
    pub(super) fn read(&self, slot: u32) -> Result<u64, SamplerError> {
        let values = self.counts.get(&slot, 0).map_err(map_err("CALL_COUNTS"))?;
        Ok(values.iter().sum())
    }

    /// Detaches `slot`'s uprobe; its count stays readable until the slot is attached again.
    pub(super) fn detach(&mut self, ebpf: &mut Ebpf, slot: u32) {
        let Some(link) = self.links.remove(&slot) else {
            return;
        };
        if let Some(uprobe) = ebpf
            .program_mut("vmscope_count")
            .and_then(|p| <&mut UProbe>::try_from(p).ok())
            && let Err(e) = uprobe.detach(link)
        {
            tracing::warn!("detaching the uprobe of slot {slot} failed: {e}");
        }
    }
}
