//! One process's framehop unwinder: its binaries placed at their addresses.

use std::{ops::Range, sync::Arc};

use framehop::{Module, Unwinder as _, x86_64::UnwinderX86_64};

use super::UnwindCounters;
use crate::{
    process::Process,
    symbolize::{
        Modules,
        unwind_tables::{SectionBytes, UnwindTables},
    },
};

/// framehop's unwinder over a process's mappings, rebuilt when they change.
///
/// Building is cheap: framehop indexes nothing for a module with `.eh_frame_hdr` (it searches
/// the hdr's table in place), and the section bytes are shared with every other process that
/// maps the binary. Only `.eh_frame` without a hdr and `.debug_frame` get an index of their
/// FDEs, built per module.
pub(super) struct ProcessUnwinder {
    pub(super) maps_generation: u64,
    pub(super) unwinder: UnwinderX86_64<SectionBytes>,
}

impl ProcessUnwinder {
    /// An unwinder over `process`'s file mappings and vDSO. Binaries whose tables cannot be
    /// loaded, or have no CFI, are left out: framehop unwinds their frames with frame pointers.
    pub(super) fn build(
        process: &Process,
        modules: &Modules,
        vdso: Option<&UnwindTables>,
        counters: &mut UnwindCounters,
    ) -> ProcessUnwinder {
        counters.unwinders_built += 1;
        let mut unwinder = UnwinderX86_64::new();
        // Adjacent mappings of one binary at one bias become one framehop module: a binary whose
        // text the kernel split into several mappings is added (and indexed) once.
        let mut pending: Option<Pending> = None;
        for (range, offset, id) in process.file_mappings() {
            let Some(module) = modules.get(id) else {
                continue;
            };
            let tables = match module.unwind_sections(modules) {
                Ok(tables) if tables.has_cfi() => tables,
                _ => {
                    counters.modules_without_tables += 1;
                    continue;
                }
            };
            let Some(bias) = tables.load_bias(range.start, offset) else {
                counters.modules_without_tables += 1;
                continue;
            };
            match &mut pending {
                Some(p)
                    if p.range.end == range.start
                        && p.bias == bias
                        && Arc::ptr_eq(&p.tables, &tables) =>
                {
                    p.range.end = range.end;
                }
                _ => {
                    add(pending.take(), &mut unwinder);
                    counters.modules_added += 1;
                    pending = Some(Pending {
                        range,
                        bias,
                        tables,
                        name: module.name.clone(),
                    });
                }
            }
        }
        add(pending, &mut unwinder);
        if let (Some(range), Some(tables)) = (process.vdso_mapping(), vdso)
            && let Some(bias) = tables.load_bias(range.start, 0)
        {
            counters.modules_added += 1;
            unwinder.add_module(Module::new(
                "[vdso]".to_owned(),
                range,
                bias,
                tables.section_info(),
            ));
        }
        ProcessUnwinder {
            maps_generation: process.maps_generation(),
            unwinder,
        }
    }
}

/// A framehop module being assembled from adjacent mappings.
struct Pending {
    range: Range<u64>,
    bias: u64,
    tables: Arc<UnwindTables>,
    name: String,
}

fn add(pending: Option<Pending>, unwinder: &mut UnwinderX86_64<SectionBytes>) {
    if let Some(p) = pending {
        unwinder.add_module(Module::new(
            p.name,
            p.range,
            p.bias,
            p.tables.section_info(),
        ));
    }
}
