//! A stand-in for the kernel side: records what the session manager asks of it, so that
//! session logic can be tested (and benchmarked) without root or BPF.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
};

use vmscope_common::{Blocked, TargetKey, WANT_STACKS, Wants};

use super::{Guard, LostCounts, SamplerControl, SamplerError, ThreadWords, Tracking};

/// What the fake kernel currently holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FakeKernel {
    /// Periods with perf events open.
    pub periods: BTreeSet<u64>,
    /// Filter entries `(period, tgid)`.
    pub targets: BTreeSet<(u64, u32)>,
    /// The filter entries whose samples carry frame-pointer stacks (a subset of `targets`).
    pub stack_targets: BTreeSet<(u64, u32)>,
    /// The filter entries whose samples carry a copy of the user stack, with its size.
    pub copy_targets: BTreeMap<(u64, u32), u32>,
    /// The filter entries that a session of root's wants ([`vmscope_common::WANT_ROOT`]: their
    /// samples may use root's reserve of the ring).
    pub root_targets: BTreeSet<(u64, u32)>,
    /// Periods sampled system-wide.
    pub system_wide: BTreeSet<u64>,
    /// The system-wide periods whose samples carry frame-pointer stacks (a subset of
    /// `system_wide`).
    pub stack_system_wide: BTreeSet<u64>,
    /// The system-wide periods whose samples carry a copy of the user stack, with its size.
    pub copy_system_wide: BTreeMap<u64, u32>,
    /// Live targets (`TRACKED`): their samples are kept, their exec and exit reported.
    pub tracked: BTreeSet<u32>,
    /// Of `tracked`, those whose entry any thread's exit removes ([`Tracking::AnyThread`]).
    pub tracked_any_thread: BTreeSet<u32>,
    /// The guard of each tracked process.
    pub guards: BTreeMap<u32, Guard>,
    /// Processes whose credentials the kernel found changed, with the time: what
    /// `take_creds_changed` reports next (tests put them here).
    pub creds_changed: Vec<(u32, u64)>,
    /// Number of system-wide sessions.
    pub system_wide_sessions: u32,
    /// Lost counters to report.
    pub lost: LostCounts,
    /// Fail the next `start_period` (to test rollback).
    pub fail_next_start: bool,
    /// Fail the next `set_target` or `set_system_wide`, as a full map would (to test
    /// rollback).
    pub fail_next_filter: bool,
    /// Calls to `start_period` that opened events, by period.
    pub starts: BTreeMap<u64, u32>,
    /// Threads off their CPU the kernel follows (`BLOCKED`), by thread id: those the daemon
    /// noted, and those tests put here as the switch program would.
    pub blocked: BTreeMap<u32, Blocked>,
    /// The minimum block of each off-CPU filter entry with one.
    pub min_blocks: BTreeMap<(u64, u32), u64>,
    /// Threads whose words samples read (`THREAD_COUNTERS`): tid to (tgid, words).
    pub thread_counters: BTreeMap<u32, (u32, ThreadWords)>,
}

/// A [`SamplerControl`] whose state tests can inspect through a shared handle.
#[derive(Clone, Debug, Default)]
pub struct FakeSampler {
    /// The shared state.
    pub kernel: Arc<Mutex<FakeKernel>>,
}

impl FakeSampler {
    fn with<T>(&self, f: impl FnOnce(&mut FakeKernel) -> T) -> T {
        f(&mut self.kernel.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

fn injected_filter_failure(k: &mut FakeKernel) -> Result<(), SamplerError> {
    if std::mem::take(&mut k.fail_next_filter) {
        return Err(SamplerError::Cpus(std::io::Error::other(
            "injected filter failure",
        )));
    }
    Ok(())
}

impl SamplerControl for FakeSampler {
    fn start_period(&mut self, period_ns: u64) -> Result<(), SamplerError> {
        self.with(|k| {
            if std::mem::take(&mut k.fail_next_start) {
                return Err(SamplerError::Cpus(std::io::Error::other(
                    "injected failure",
                )));
            }
            k.periods.insert(period_ns);
            *k.starts.entry(period_ns).or_insert(0) += 1;
            Ok(())
        })
    }

    fn stop_period(&mut self, period_ns: u64) {
        self.with(|k| {
            k.periods.remove(&period_ns);
            if period_ns == vmscope_common::OFF_CPU_PERIOD {
                k.blocked.clear();
            }
        });
    }

    fn set_target(&mut self, key: TargetKey, wants: Wants) -> Result<(), SamplerError> {
        let entry = (key.period_ns, key.tgid);
        self.with(|k| {
            injected_filter_failure(k)?;
            k.targets.insert(entry);
            if wants.flags & WANT_STACKS != 0 {
                k.stack_targets.insert(entry);
            } else {
                k.stack_targets.remove(&entry);
            }
            if wants.user_copy_bytes > 0 {
                k.copy_targets.insert(entry, wants.user_copy_bytes);
            } else {
                k.copy_targets.remove(&entry);
            }
            if wants.for_root() {
                k.root_targets.insert(entry);
            } else {
                k.root_targets.remove(&entry);
            }
            if wants.min_block_ns > 0 {
                k.min_blocks.insert(entry, wants.min_block_ns);
            } else {
                k.min_blocks.remove(&entry);
            }
            Ok(())
        })
    }

    fn remove_target(&mut self, key: TargetKey) {
        let entry = (key.period_ns, key.tgid);
        self.with(|k| {
            k.targets.remove(&entry);
            k.stack_targets.remove(&entry);
            k.copy_targets.remove(&entry);
            k.root_targets.remove(&entry);
            k.min_blocks.remove(&entry);
        });
    }

    fn set_system_wide(&mut self, period_ns: u64, wants: Wants) -> Result<(), SamplerError> {
        self.with(|k| {
            injected_filter_failure(k)?;
            k.system_wide.insert(period_ns);
            if wants.flags & WANT_STACKS != 0 {
                k.stack_system_wide.insert(period_ns);
            } else {
                k.stack_system_wide.remove(&period_ns);
            }
            if wants.user_copy_bytes > 0 {
                k.copy_system_wide.insert(period_ns, wants.user_copy_bytes);
            } else {
                k.copy_system_wide.remove(&period_ns);
            }
            Ok(())
        })
    }

    fn remove_system_wide(&mut self, period_ns: u64) {
        self.with(|k| {
            k.system_wide.remove(&period_ns);
            k.stack_system_wide.remove(&period_ns);
            k.copy_system_wide.remove(&period_ns);
        });
    }

    fn set_tracking(&mut self, tgid: u32, tracking: Tracking, guard: Guard) {
        self.with(|k| {
            if tracking == Tracking::Off {
                k.tracked.remove(&tgid);
                k.guards.remove(&tgid);
            } else {
                k.tracked.insert(tgid);
                k.guards.insert(tgid, guard);
            }
            if tracking == Tracking::AnyThread {
                k.tracked_any_thread.insert(tgid);
            } else {
                k.tracked_any_thread.remove(&tgid);
            }
        });
    }

    fn take_creds_changed(&mut self) -> Vec<(u32, u64)> {
        self.with(|k| std::mem::take(&mut k.creds_changed))
    }

    fn set_system_wide_sessions(&mut self, count: u32) {
        self.with(|k| k.system_wide_sessions = count);
    }

    fn lost(&self) -> Result<LostCounts, SamplerError> {
        Ok(self.with(|k| k.lost.clone()))
    }

    fn clear_lost(&mut self, period_ns: u64) {
        self.with(|k| {
            k.lost.keyed.retain(|key, _| key.period_ns != period_ns);
            let cleared: u64 = k
                .lost
                .shed
                .iter()
                .filter(|(key, _)| key.period_ns == period_ns)
                .flat_map(|(_, values)| values)
                .sum();
            k.lost.shed_cleared += cleared;
            k.lost.shed.retain(|key, _| key.period_ns != period_ns);
            if period_ns == vmscope_common::OFF_CPU_PERIOD {
                k.lost.short_blocks.clear();
            }
        });
    }

    fn note_blocked(&mut self, tid: u32, blocked: Blocked) -> bool {
        self.with(|k| match k.blocked.entry(tid) {
            std::collections::btree_map::Entry::Vacant(entry) => {
                entry.insert(blocked);
                true
            }
            std::collections::btree_map::Entry::Occupied(_) => false,
        })
    }

    fn blocked(&self) -> Vec<(u32, Blocked)> {
        self.with(|k| k.blocked.iter().map(|(&tid, &b)| (tid, b)).collect())
    }

    fn set_thread_counter(
        &mut self,
        tid: u32,
        tgid: u32,
        words: ThreadWords,
    ) -> Result<(), SamplerError> {
        self.with(|k| {
            injected_filter_failure(k)?;
            k.thread_counters.insert(tid, (tgid, words));
            Ok(())
        })
    }

    fn remove_thread_counter(&mut self, tid: u32) {
        self.with(|k| k.thread_counters.remove(&tid));
    }
}
