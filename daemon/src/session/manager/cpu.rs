//! CPU accounting: the targets' and the host's CPU time, and the kernel's lost-sample counts.

use super::*;

/// The host's CPU times, now; zeros if /proc/stat cannot be read (then no steal is reported,
/// and a system-wide session's CPU time stays 0, which its report shows as no rate).
pub(super) fn read_host_cpu() -> HostCpu {
    let times = sys::read_bounded(std::path::Path::new("/proc/stat"), sys::MAX_PROC_FILE_BYTES)
        .ok()
        .and_then(|text| stat::parse_proc_stat_cpu(&text).ok())
        .unwrap_or_default();
    HostCpu {
        times,
        at_ns: sys::monotonic_ns(),
    }
}

/// Takes the host's CPU times when read (once for all sessions), and with `targets` the CPU
/// times of the session's targets, marking those found ended as exited. A process under a
/// target's pid with another start time is not the target.
pub(super) fn update_cpu(session: &mut Session, host: Option<HostCpu>, targets: bool) -> CpuUpdate {
    let mut update = CpuUpdate::default();
    if let Some(host) = host
        && host.times.total_ticks() >= session.host_cpu.1.times.total_ticks()
    {
        session.host_cpu.1 = host;
    }
    if session.spec.system_wide || !targets {
        return update;
    }
    for target in session.targets.iter_mut().filter(|t| !t.exited) {
        match life::probe(target.pid, target.start_time) {
            Life::Alive {
                cpu_ticks, leader, ..
            } => {
                target.cpu_ticks_last = cpu_ticks;
                if !leader && target.until_ns.is_none() {
                    update.leaderless.push(target.pid);
                }
            }
            Life::Exited { cpu_ticks, .. } => {
                target.cpu_ticks_last = cpu_ticks;
                target.exited = true;
            }
            Life::Reused { .. } => {
                update.reused += 1;
                target.exited = true;
            }
            Life::Gone => target.exited = true,
        }
    }
    update
}

/// Recomputes a session's lost samples per CPU from the kernel's counters.
pub(super) fn refresh_lost(session: &mut Session, lost: &LostCounts) {
    // An off-CPU session takes no samples: its losses are its blocks' (`off_cpu.rs`).
    if !session.spec.mode.on_cpu() {
        return;
    }
    let now = lost_for(
        lost,
        session.period_ns,
        session.spec.system_wide,
        &session.spec.pids,
    );
    session.lost = now
        .iter()
        .enumerate()
        .map(|(cpu, v)| v.saturating_sub(session.lost_baseline.get(cpu).copied().unwrap_or(0)))
        .collect();
}

/// The lost-sample counters, per CPU, that concern a session: its samples the ring had no
/// room for, and those left out for root's reserve (only ever a session of another user's:
/// root's samples are never shed).
pub(super) fn lost_for(
    lost: &LostCounts,
    period_ns: u64,
    system_wide: bool,
    pids: &[u32],
) -> Vec<u64> {
    let mut per_cpu = lost.unkeyed.clone();
    for (key, values) in lost.keyed.iter().chain(&lost.shed) {
        if key.period_ns != period_ns || !(system_wide || pids.contains(&key.tgid)) {
            continue;
        }
        if per_cpu.len() < values.len() {
            per_cpu.resize(values.len(), 0);
        }
        for (sum, v) in per_cpu.iter_mut().zip(values) {
            *sum += v;
        }
    }
    per_cpu
}

/// What a reading of the targets' CPU times found beyond the times.
#[derive(Debug, Default)]
pub(super) struct CpuUpdate {
    /// Targets whose pid another process holds now.
    pub(super) reused: u64,
    /// Targets that run on after their leader exited.
    pub(super) leaderless: Vec<u32>,
}
