//! The daemon's own types shown as the API's: kinds of interval and code, VM statistics, the
//! kernel's counts, kinds of symbolisation issue. The profile is where they meet the API until
//! the profile has a model of its own (issue 24).

use vmscope_proto::v1::{self as pb, CodeKind};

use vmscope_model::{ConfigValue, IntervalKind, VmStatistics};

use crate::{
    stats::kernel::{Counts, KernelEvents},
    symbolize::Issue,
    vocab::UnmappedReason,
};

/// A kind of interval as the API says it: its kind, and the name a VM gave its own.
pub(super) fn interval_kind(kind: &IntervalKind) -> (pb::IntervalKind, String) {
    match kind {
        IntervalKind::Scavenge => (pb::IntervalKind::Scavenge, String::new()),
        IntervalKind::FullGc => (pb::IntervalKind::FullGc, String::new()),
        IntervalKind::CodeCompaction => (pb::IntervalKind::CodeCompaction, String::new()),
        IntervalKind::Safepoint => (pb::IntervalKind::Safepoint, String::new()),
        IntervalKind::Named(name) => (pb::IntervalKind::Named, name.clone()),
    }
}

/// A VM's statistics as the API carries them.
pub(super) fn vm_statistics(stats: VmStatistics) -> pb::VmStatistics {
    pb::VmStatistics {
        pid: stats.pid,
        vm: stats.vm,
        configuration: stats
            .configuration
            .into_iter()
            .map(|setting| pb::Configuration {
                name: setting.name,
                value: Some(match setting.value {
                    ConfigValue::Number(n) => pb::configuration::Value::Number(n),
                    ConfigValue::Text(t) => pb::configuration::Value::Text(t),
                }),
                unit: setting.unit,
            })
            .collect(),
        counters: stats
            .counters
            .into_iter()
            .map(|c| pb::CounterDelta {
                name: c.name,
                unit: c.unit,
                delta: c.delta,
                last: c.last,
            })
            .collect(),
        gauges: stats
            .gauges
            .into_iter()
            .map(|g| pb::GaugeDelta {
                name: g.name,
                unit: g.unit,
                delta: g.delta,
                last: g.last,
                low: g.low,
                high: g.high,
            })
            .collect(),
        intervals: stats
            .intervals
            .into_iter()
            .map(|t| {
                let (kind, name) = interval_kind(&t.kind);
                pb::IntervalTotals {
                    kind: kind as i32,
                    name,
                    count: t.count,
                    total_ns: t.total_ns,
                    longest_ns: t.longest_ns,
                    sampled: t.sampled,
                }
            })
            .collect(),
        window_ns: stats.window_ns,
        samples: stats.samples,
    }
}

/// What the kernel counted as the API carries it.
pub(super) fn kernel_events(events: KernelEvents) -> pb::KernelEvents {
    pb::KernelEvents {
        total: Some(kernel_counts(&events.total)),
        processes: events
            .processes
            .into_iter()
            .map(|p| pb::ProcessKernelCounts {
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

/// One set of kernel counts as the API carries it.
pub(super) fn kernel_counts(counts: &Counts) -> pb::KernelCounts {
    let switches = counts.switches();
    pb::KernelCounts {
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

/// A kind of generated code as the API says it.
pub(super) fn code_kind(kind: vmscope_model::CodeKind) -> CodeKind {
    use vmscope_model::CodeKind as Kind;
    match kind {
        Kind::Method => CodeKind::Method,
        Kind::Block => CodeKind::Block,
        Kind::Trampoline => CodeKind::Trampoline,
        Kind::Enilopmart => CodeKind::Enilopmart,
        Kind::ClosedPic => CodeKind::ClosedPic,
        Kind::OpenPic => CodeKind::OpenPic,
        Kind::Stub => CodeKind::Stub,
        Kind::Unknown => CodeKind::Unknown,
    }
}

/// What kind of issue a symbolisation issue is, for clients that group them.
pub(super) fn issue_kind(issue: &Issue) -> pb::SymbolizationIssueKind {
    use pb::SymbolizationIssueKind as Kind;
    match issue {
        Issue::Binary(_) => Kind::BinaryUnreadable,
        Issue::OutsideSegments => Kind::OutsideSegments,
        Issue::Stripped => Kind::Stripped,
        Issue::NoSymbol => Kind::NoSymbol,
        Issue::ModuleClosed => Kind::BinaryClosed,
        Issue::KernelAddressesHidden => Kind::KernelAddressesHidden,
        Issue::NotInKallsyms => Kind::NotInKallsyms,
        Issue::KernelHidden(_) => Kind::KernelNotShown,
        Issue::Unexplained(_) => Kind::JitUnexplained,
        Issue::Unmapped(UnmappedReason::ProcessGone) => Kind::ProcessGone,
        Issue::Unmapped(UnmappedReason::NoMapping) => Kind::Unmapped,
        Issue::Unmapped(UnmappedReason::Unreadable) => Kind::MappingsUnreadable,
        Issue::Unmapped(UnmappedReason::Pseudo) => Kind::PseudoMapping,
        Issue::UnregisteredModule | Issue::UnknownCode => Kind::DaemonBug,
    }
}
