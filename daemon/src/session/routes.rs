//! Reference counts of the kernel-side state that sessions share.
//!
//! Several sessions may sample the same process at the same period, or run system-wide at the
//! same time. The kernel only needs one filter entry per `(period, pid)` and one set of perf
//! events per period; these counts decide when an entry is added or removed.

use std::collections::HashMap;

use vmscope_common::TargetKey;

use super::request::SessionSpec;
use crate::bpf::{SamplerControl, SamplerError, period_of};

/// Counts per piece of kernel state.
#[derive(Debug, Default)]
pub struct Routes {
    periods: HashMap<u64, u32>,
    targets: HashMap<TargetKey, u32>,
    tracked: HashMap<u32, u32>,
    system_wide: HashMap<u64, u32>,
    system_wide_sessions: u32,
}

fn bump<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u32>, key: K) -> bool {
    let count = map.entry(key).or_insert(0);
    *count += 1;
    *count == 1
}

fn drop_one<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u32>, key: K) -> bool {
    match map.get_mut(&key) {
        Some(count) if *count > 1 => {
            *count -= 1;
            false
        }
        Some(_) => {
            map.remove(&key);
            true
        }
        None => false,
    }
}

impl Routes {
    /// Makes the kernel sample what `spec` asks for. On failure nothing is left changed.
    pub fn acquire(
        &mut self,
        sampler: &mut dyn SamplerControl,
        spec: &SessionSpec,
    ) -> Result<(), SamplerError> {
        let period_ns = period_of(spec.frequency_hz);
        // Filters first, perf events last: an event that fires before its filter is set only
        // wastes a tick, but the other order would be the same with more to undo.
        if spec.system_wide {
            if bump(&mut self.system_wide, period_ns)
                && let Err(e) = sampler.add_system_wide(period_ns)
            {
                drop_one(&mut self.system_wide, period_ns);
                return Err(e);
            }
            self.system_wide_sessions += 1;
            sampler.set_system_wide_sessions(self.system_wide_sessions);
        }
        for (i, &tgid) in spec.pids.iter().enumerate() {
            let key = TargetKey {
                period_ns,
                tgid,
                _pad: 0,
            };
            if bump(&mut self.targets, key)
                && let Err(e) = sampler.add_target(key)
            {
                drop_one(&mut self.targets, key);
                let partial = SessionSpec {
                    pids: spec.pids[..i].to_vec(),
                    ..spec.clone()
                };
                self.release_filters(sampler, &partial);
                return Err(e);
            }
            if bump(&mut self.tracked, tgid) {
                sampler.set_exec_tracking(tgid, true);
            }
        }
        if bump(&mut self.periods, period_ns)
            && let Err(e) = sampler.start_period(period_ns)
        {
            drop_one(&mut self.periods, period_ns);
            self.release_filters(sampler, spec);
            return Err(e);
        }
        Ok(())
    }

    /// Undoes [`Routes::acquire`] for the pids in `spec` (those not released one by one).
    pub fn release(&mut self, sampler: &mut dyn SamplerControl, spec: &SessionSpec) {
        let period_ns = period_of(spec.frequency_hz);
        if drop_one(&mut self.periods, period_ns) {
            sampler.stop_period(period_ns);
            sampler.clear_lost(period_ns);
        }
        self.release_filters(sampler, spec);
    }

    /// Stops sampling one process of a session early (it exited, or may no longer be
    /// sampled); [`Routes::release`] must then be given the session's other pids only.
    pub fn release_target(&mut self, sampler: &mut dyn SamplerControl, period_ns: u64, tgid: u32) {
        let key = TargetKey {
            period_ns,
            tgid,
            _pad: 0,
        };
        if drop_one(&mut self.targets, key) {
            sampler.remove_target(key);
        }
        if drop_one(&mut self.tracked, tgid) {
            sampler.set_exec_tracking(tgid, false);
        }
    }

    fn release_filters(&mut self, sampler: &mut dyn SamplerControl, spec: &SessionSpec) {
        let period_ns = period_of(spec.frequency_hz);
        for &tgid in &spec.pids {
            self.release_target(sampler, period_ns, tgid);
        }
        if spec.system_wide {
            if drop_one(&mut self.system_wide, period_ns) {
                sampler.remove_system_wide(period_ns);
            }
            self.system_wide_sessions = self.system_wide_sessions.saturating_sub(1);
            sampler.set_system_wide_sessions(self.system_wide_sessions);
        }
    }
}
