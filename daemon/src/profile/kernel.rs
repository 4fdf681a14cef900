//! What the kernel counted for a session's targets ([`crate::stats::kernel::KernelEvents`]),
//! as a profile shows it: context switches split into voluntary and involuntary where the
//! kernel tells them apart.

use vmscope_model::{KernelCounts, KernelEvents, ProcessKernelCounts};

use crate::stats::kernel::{self, Counts};

/// What the kernel counted, as a profile shows it.
pub(super) fn kernel_events(events: kernel::KernelEvents) -> KernelEvents {
    KernelEvents {
        total: Some(kernel_counts(&events.total)),
        processes: events
            .processes
            .into_iter()
            .map(|p| ProcessKernelCounts {
                pid: p.pid,
                command: p.command,
                counts: Some(kernel_counts(&p.counts)),
                threads: p.threads,
                note: p.note.unwrap_or_default(),
            })
            .collect(),
        unavailable: events.unavailable,
    }
}

/// One set of kernel counts, as a profile shows it.
pub(super) fn kernel_counts(counts: &Counts) -> KernelCounts {
    let switches = counts.switches();
    KernelCounts {
        context_switches: counts.context_switches,
        voluntary_context_switches: switches.map(|(voluntary, _)| voluntary),
        involuntary_context_switches: switches.map(|(_, involuntary)| involuntary),
        cpu_migrations: counts.cpu_migrations,
        minor_faults: counts.minor_faults,
        major_faults: counts.major_faults,
        cycles: counts.cycles,
        instructions: counts.instructions,
        cache_misses: counts.cache_misses,
    }
}
