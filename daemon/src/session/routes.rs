//! Reference counts of the kernel-side state that sessions share.
//!
//! Several sessions may sample the same process at the same period, or run system-wide at the
//! same time. The kernel only needs one filter entry per `(period, pid)` and one set of perf
//! events per period; these counts decide when an entry is added or removed. A filter entry
//! also says whether its samples carry call stacks: it does while at least one of its sessions
//! wants them, so a session that wants none may receive stacks and ignore them, but a session
//! that wants them always gets them.
//!
//! A process's `TRACKED` entry, which its `TARGETS` entries need to be sampled, is added with
//! its first session here and removed with its last; in between the kernel removes it by itself
//! when the process exits, and the session manager arms it again while the process lives (see
//! `Manager::arm`). The count here says only when the daemon itself must remove it.
//!
//! A filter entry that a session of root's joins says so ([`WANT_ROOT`]): its samples may use
//! the half of the ring buffer kept for root. Samples of entries that only other users'
//! sessions hold are left out (and counted) once the ring holds its share of them.
//!
//! Every session that joins a process holds it ([`Guard::Held`]) until the manager has checked
//! who the process runs as and set the guard its sessions' owners call for (`Manager::arm`,
//! right after): a root session's target that a user's session joins is not sampled unguarded
//! in between.

use std::{
    collections::{BTreeMap, HashMap},
    hash::Hash,
};

use vmscope_common::{TargetKey, WANT_ROOT, WANT_STACKS, Wants};

use super::request::SessionSpec;
use crate::bpf::{Guard, SamplerControl, SamplerError, Tracking};

/// Counts per piece of kernel state.
#[derive(Debug, Default)]
pub struct Routes {
    periods: HashMap<u64, u32>,
    targets: Filter<TargetKey>,
    tracked: HashMap<u32, u32>,
    system_wide: Filter<u64>,
    system_wide_sessions: u32,
}

fn bump<K: Hash + Eq>(map: &mut HashMap<K, u32>, key: K) -> bool {
    let count = map.entry(key).or_insert(0);
    *count += 1;
    *count == 1
}

fn drop_one<K: Hash + Eq>(map: &mut HashMap<K, u32>, key: K) -> bool {
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

/// What a filter map entry must become after a session joins or leaves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Update {
    /// The kernel already holds the right value.
    Unchanged,
    /// Insert the entry, or change its value.
    Set { wants: Wants },
    /// Delete the entry: no session uses it any more.
    Remove,
}

/// The counts behind one filter map (`TARGETS` or `SYSTEM_WIDE`): sessions per entry, how
/// many of them want frame-pointer stacks, how many are root's, how many want each size of
/// user stack copy (never more than the sessions), and each minimum block (off-CPU entries).
/// The entry's value is their union: stacks if any wants them, root's if any is root's, the
/// largest copy any wants, the shortest minimum block.
#[derive(Debug)]
struct Filter<K> {
    sessions: HashMap<K, u32>,
    stacks: HashMap<K, u32>,
    root: HashMap<K, u32>,
    copies: HashMap<K, BTreeMap<u32, u32>>,
    min_blocks: HashMap<K, BTreeMap<u64, u32>>,
}

impl<K> Default for Filter<K> {
    fn default() -> Self {
        Filter {
            sessions: HashMap::new(),
            stacks: HashMap::new(),
            root: HashMap::new(),
            copies: HashMap::new(),
            min_blocks: HashMap::new(),
        }
    }
}

/// Counts one more of `value` in a key's multiset.
fn add_value<K: Hash + Eq, V: Ord>(map: &mut HashMap<K, BTreeMap<V, u32>>, key: K, value: V) {
    *map.entry(key).or_default().entry(value).or_insert(0) += 1;
}

/// Counts one less of `value` in a key's multiset.
fn remove_value<K: Hash + Eq, V: Ord>(map: &mut HashMap<K, BTreeMap<V, u32>>, key: K, value: V) {
    let Some(values) = map.get_mut(&key) else {
        return;
    };
    match values.get_mut(&value) {
        Some(count) if *count > 1 => *count -= 1,
        _ => {
            values.remove(&value);
        }
    }
    if values.is_empty() {
        map.remove(&key);
    }
}

impl<K: Hash + Eq + Copy> Filter<K> {
    /// What the entry's sessions want together.
    fn wants(&self, key: K) -> Wants {
        let flag = |counts: &HashMap<K, u32>, bit| {
            if counts.contains_key(&key) { bit } else { 0 }
        };
        Wants {
            flags: flag(&self.stacks, WANT_STACKS) | flag(&self.root, WANT_ROOT),
            user_copy_bytes: self
                .copies
                .get(&key)
                .and_then(|sizes| sizes.keys().next_back().copied())
                .unwrap_or(0),
            min_block_ns: self
                .min_blocks
                .get(&key)
                .and_then(|mins| mins.keys().next().copied())
                .unwrap_or(0),
        }
    }

    /// Counts a session in.
    fn join(&mut self, key: K, wants: Wants) -> Update {
        let before = self.sessions.contains_key(&key).then(|| self.wants(key));
        bump(&mut self.sessions, key);
        if wants.flags & WANT_STACKS != 0 {
            bump(&mut self.stacks, key);
        }
        if wants.for_root() {
            bump(&mut self.root, key);
        }
        if wants.user_copy_bytes > 0 {
            add_value(&mut self.copies, key, wants.user_copy_bytes);
        }
        add_value(&mut self.min_blocks, key, wants.min_block_ns);
        let after = self.wants(key);
        if before == Some(after) {
            Update::Unchanged
        } else {
            Update::Set { wants: after }
        }
    }

    /// Counts a session out; also undoes a [`Filter::join`] whose update failed, since the
    /// kernel then still holds what it held before.
    fn leave(&mut self, key: K, wants: Wants) -> Update {
        let before = self.wants(key);
        if wants.flags & WANT_STACKS != 0 {
            drop_one(&mut self.stacks, key);
        }
        if wants.for_root() {
            drop_one(&mut self.root, key);
        }
        if wants.user_copy_bytes > 0 {
            remove_value(&mut self.copies, key, wants.user_copy_bytes);
        }
        remove_value(&mut self.min_blocks, key, wants.min_block_ns);
        if drop_one(&mut self.sessions, key) {
            return Update::Remove;
        }
        let after = self.wants(key);
        if after == before {
            Update::Unchanged
        } else {
            Update::Set { wants: after }
        }
    }
}

fn apply_target(
    sampler: &mut dyn SamplerControl,
    key: TargetKey,
    update: Update,
) -> Result<(), SamplerError> {
    match update {
        Update::Unchanged => Ok(()),
        Update::Set { wants } => sampler.set_target(key, wants),
        Update::Remove => {
            sampler.remove_target(key);
            Ok(())
        }
    }
}

fn apply_system_wide(
    sampler: &mut dyn SamplerControl,
    period_ns: u64,
    update: Update,
) -> Result<(), SamplerError> {
    match update {
        Update::Unchanged => Ok(()),
        Update::Set { wants } => sampler.set_system_wide(period_ns, wants),
        Update::Remove => {
            sampler.remove_system_wide(period_ns);
            Ok(())
        }
    }
}

impl Routes {
    /// Makes the kernel sample what `spec` asks for, on each of its channels (its sampling
    /// period, the off-CPU channel). On failure nothing is left changed.
    pub fn acquire(
        &mut self,
        sampler: &mut dyn SamplerControl,
        spec: &SessionSpec,
    ) -> Result<(), SamplerError> {
        let channels: Vec<u64> = spec.channels().collect();
        for (i, &channel) in channels.iter().enumerate() {
            if let Err(e) = self.acquire_channel(sampler, spec, channel) {
                for &acquired in &channels[..i] {
                    self.release_channel(sampler, spec, acquired);
                }
                return Err(e);
            }
        }
        // Tracked once per session, whatever its channels.
        for &tgid in &spec.pids {
            bump(&mut self.tracked, tgid);
            sampler.set_tracking(tgid, Tracking::Leader, Guard::Held);
        }
        if spec.system_wide {
            self.system_wide_sessions += 1;
            sampler.set_system_wide_sessions(self.system_wide_sessions);
        }
        Ok(())
    }

    /// [`Routes::acquire`] of one channel: filters first, the channel's events (perf events,
    /// the switch programs) last: an event that fires before its filter is set only wastes a
    /// tick, but the other order would be the same with more to undo.
    fn acquire_channel(
        &mut self,
        sampler: &mut dyn SamplerControl,
        spec: &SessionSpec,
        channel: u64,
    ) -> Result<(), SamplerError> {
        let wants = spec.wants_at(channel);
        if spec.system_wide {
            let update = self.system_wide.join(channel, wants);
            if let Err(e) = apply_system_wide(sampler, channel, update) {
                self.system_wide.leave(channel, wants);
                return Err(e);
            }
        }
        for (i, &tgid) in spec.pids.iter().enumerate() {
            let key = target_key(channel, tgid);
            let wants = spec.wants_for(channel, tgid);
            let update = self.targets.join(key, wants);
            if let Err(e) = apply_target(sampler, key, update) {
                self.targets.leave(key, wants);
                self.leave_filters(sampler, spec, channel, &spec.pids[..i]);
                return Err(e);
            }
        }
        if bump(&mut self.periods, channel)
            && let Err(e) = sampler.start_period(channel)
        {
            drop_one(&mut self.periods, channel);
            self.leave_filters(sampler, spec, channel, &spec.pids);
            return Err(e);
        }
        Ok(())
    }

    /// Undoes [`Routes::acquire`] for the pids in `spec` (those not released one by one).
    pub fn release(&mut self, sampler: &mut dyn SamplerControl, spec: &SessionSpec) {
        for channel in spec.channels() {
            self.release_channel(sampler, spec, channel);
        }
        for &tgid in &spec.pids {
            self.untrack(sampler, tgid);
        }
        if spec.system_wide {
            self.system_wide_sessions = self.system_wide_sessions.saturating_sub(1);
            sampler.set_system_wide_sessions(self.system_wide_sessions);
        }
    }

    fn release_channel(
        &mut self,
        sampler: &mut dyn SamplerControl,
        spec: &SessionSpec,
        channel: u64,
    ) {
        if drop_one(&mut self.periods, channel) {
            sampler.stop_period(channel);
            sampler.clear_lost(channel);
        }
        self.leave_filters(sampler, spec, channel, &spec.pids);
    }

    /// Stops sampling one process of a session early (it exited, or may no longer be
    /// sampled); [`Routes::release`] must then be given the session's other pids only.
    pub fn release_target(
        &mut self,
        sampler: &mut dyn SamplerControl,
        spec: &SessionSpec,
        tgid: u32,
    ) {
        for channel in spec.channels() {
            self.leave_target(sampler, spec, channel, tgid);
        }
        self.untrack(sampler, tgid);
    }

    /// Changes what one target's entries carry for a running session, from what `before`
    /// wants of them to what `after` wants (a JVM found since the session's start gets its
    /// stack copied: `SessionSpec::java_copies`). On failure nothing is changed.
    pub fn change_target(
        &mut self,
        sampler: &mut dyn SamplerControl,
        before: &SessionSpec,
        after: &SessionSpec,
        tgid: u32,
    ) -> Result<(), SamplerError> {
        let changes: Vec<(TargetKey, Wants, Wants)> = after
            .channels()
            .map(|channel| {
                let key = target_key(channel, tgid);
                (
                    key,
                    before.wants_for(channel, tgid),
                    after.wants_for(channel, tgid),
                )
            })
            .filter(|(_, old, new)| old != new)
            .collect();
        for (i, &(key, old, new)) in changes.iter().enumerate() {
            if let Err(e) = self.swap_wants(sampler, key, old, new) {
                for &(key, old, new) in &changes[..i] {
                    if let Err(e) = self.swap_wants(sampler, key, new, old) {
                        tracing::warn!(?key, "restoring a target's wants failed: {e}");
                    }
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Counts a session's wants of `key` as `to` instead of `from`. The new wants join before
    /// the old leave, so the entry never carries less than either in between; an error means
    /// the kernel and the counts are as they were.
    fn swap_wants(
        &mut self,
        sampler: &mut dyn SamplerControl,
        key: TargetKey,
        from: Wants,
        to: Wants,
    ) -> Result<(), SamplerError> {
        let update = self.targets.join(key, to);
        if let Err(e) = apply_target(sampler, key, update) {
            self.targets.leave(key, to);
            return Err(e);
        }
        let update = self.targets.leave(key, from);
        if let Err(e) = apply_target(sampler, key, update) {
            // Only a value change can fail here: the entry carries the union of both.
            tracing::warn!(?key, "dropping a target's former wants failed: {e}");
        }
        Ok(())
    }

    fn leave_target(
        &mut self,
        sampler: &mut dyn SamplerControl,
        spec: &SessionSpec,
        channel: u64,
        tgid: u32,
    ) {
        let key = target_key(channel, tgid);
        let update = self.targets.leave(key, spec.wants_for(channel, tgid));
        if let Err(e) = apply_target(sampler, key, update) {
            // Only a value change can fail here; the entry stays, with stacks nobody reads.
            tracing::warn!(?key, "turning stacks down for a target failed: {e}");
        }
    }

    fn untrack(&mut self, sampler: &mut dyn SamplerControl, tgid: u32) {
        if drop_one(&mut self.tracked, tgid) {
            sampler.set_tracking(tgid, Tracking::Off, Guard::Held);
        }
    }

    /// Counts the session out of `channel`'s filters of `pids`, and system-wide.
    fn leave_filters(
        &mut self,
        sampler: &mut dyn SamplerControl,
        spec: &SessionSpec,
        channel: u64,
        pids: &[u32],
    ) {
        for &tgid in pids {
            self.leave_target(sampler, spec, channel, tgid);
        }
        if spec.system_wide {
            let update = self.system_wide.leave(channel, spec.wants_at(channel));
            if let Err(e) = apply_system_wide(sampler, channel, update) {
                tracing::warn!(channel, "turning stacks down system-wide failed: {e}");
            }
        }
    }
}

fn target_key(period_ns: u64, tgid: u32) -> TargetKey {
    TargetKey {
        period_ns,
        tgid,
        _pad: 0,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use vmscope_common::DEFAULT_USER_COPY;

    use super::*;
    use crate::{
        bpf::{
            fake::{FakeKernel, FakeSampler},
            period_of,
        },
        session::request::CallGraph,
    };

    const HZ: u32 = 1000;

    fn spec(pids: &[u32], system_wide: bool, call_graph: CallGraph) -> SessionSpec {
        SessionSpec {
            pids: pids.to_vec(),
            system_wide,
            frequency_hz: HZ,
            duration: None,
            keep_samples: 0,
            call_graph,
            jvm_attach: true,
            root: false,
            mode: vmscope_model::ProfileMode::Cpu,
            min_block_ns: 0,
            params: Vec::new(),
            counts: Vec::new(),
            java_copies: Vec::new(),
        }
    }

    fn kernel(sampler: &FakeSampler) -> FakeKernel {
        sampler.kernel.lock().unwrap().clone()
    }

    /// The `(period, pid)` entries of the target filter: all, and those with stacks.
    fn targets(sampler: &FakeSampler) -> (Vec<u32>, Vec<u32>) {
        let k = kernel(sampler);
        let pids = |set: &BTreeSet<(u64, u32)>| {
            set.iter()
                .inspect(|(period, _)| assert_eq!(*period, period_of(HZ)))
                .map(|&(_, pid)| pid)
                .collect()
        };
        (pids(&k.targets), pids(&k.stack_targets))
    }

    #[test]
    fn a_target_has_stacks_while_one_of_its_sessions_wants_them() {
        let mut sampler = FakeSampler::default();
        let mut routes = Routes::default();
        let plain = spec(&[10, 11], false, CallGraph::None);
        let stacks = spec(&[11, 12], false, CallGraph::FramePointers);
        let stacks_too = spec(&[11], false, CallGraph::FramePointers);

        routes.acquire(&mut sampler, &plain).unwrap();
        assert_eq!(targets(&sampler), (vec![10, 11], vec![]));
        routes.acquire(&mut sampler, &stacks).unwrap();
        assert_eq!(targets(&sampler), (vec![10, 11, 12], vec![11, 12]));
        routes.acquire(&mut sampler, &stacks_too).unwrap();

        routes.release(&mut sampler, &stacks);
        assert_eq!(
            targets(&sampler),
            (vec![10, 11], vec![11]),
            "another session still wants stacks of 11"
        );
        routes.release(&mut sampler, &stacks_too);
        assert_eq!(
            targets(&sampler),
            (vec![10, 11], vec![]),
            "the plain session keeps 11, without stacks"
        );
        routes.release(&mut sampler, &plain);
        assert_eq!(targets(&sampler), (vec![], vec![]));
        assert!(kernel(&sampler).periods.is_empty());
    }

    #[test]
    fn a_plain_session_leaving_does_not_take_stacks_away() {
        let mut sampler = FakeSampler::default();
        let mut routes = Routes::default();
        let stacks = spec(&[20], false, CallGraph::FramePointers);
        let plain = spec(&[20], false, CallGraph::None);
        routes.acquire(&mut sampler, &stacks).unwrap();
        routes.acquire(&mut sampler, &plain).unwrap();
        assert_eq!(targets(&sampler), (vec![20], vec![20]));
        routes.release(&mut sampler, &plain);
        assert_eq!(targets(&sampler), (vec![20], vec![20]));
        // The stack session's target exits early: released one by one, then the rest.
        routes.release_target(&mut sampler, &stacks, 20);
        assert_eq!(targets(&sampler), (vec![], vec![]));
        routes.release(&mut sampler, &spec(&[], false, CallGraph::FramePointers));
        assert_eq!(kernel(&sampler).tracked, BTreeSet::new());
    }

    #[test]
    fn system_wide_stacks_follow_the_same_rule() {
        let mut sampler = FakeSampler::default();
        let mut routes = Routes::default();
        let plain = spec(&[], true, CallGraph::None);
        let stacks = spec(&[], true, CallGraph::FramePointers);
        let period = period_of(HZ);

        routes.acquire(&mut sampler, &plain).unwrap();
        let k = kernel(&sampler);
        assert_eq!(k.system_wide, [period].into());
        assert!(k.stack_system_wide.is_empty());
        routes.acquire(&mut sampler, &stacks).unwrap();
        assert_eq!(kernel(&sampler).stack_system_wide, [period].into());
        assert_eq!(kernel(&sampler).system_wide_sessions, 2);
        routes.release(&mut sampler, &stacks);
        let k = kernel(&sampler);
        assert_eq!(k.system_wide, [period].into());
        assert!(k.stack_system_wide.is_empty());
        assert_eq!(k.system_wide_sessions, 1);
        routes.release(&mut sampler, &plain);
        let k = kernel(&sampler);
        assert!(k.system_wide.is_empty() && k.periods.is_empty());
    }

    /// The copy size of each target entry with a copy.
    fn copies(sampler: &FakeSampler) -> Vec<(u32, u32)> {
        kernel(sampler)
            .copy_targets
            .iter()
            .map(|(&(_, pid), &bytes)| (pid, bytes))
            .collect()
    }

    #[test]
    fn a_target_copies_the_most_stack_any_session_wants_and_keeps_fp_stacks() {
        let mut sampler = FakeSampler::default();
        let mut routes = Routes::default();
        let small = spec(&[40], false, CallGraph::Dwarf { stack_bytes: 8192 });
        let large = spec(&[40, 41], false, CallGraph::Dwarf { stack_bytes: 65528 });
        let small_too = spec(&[40], false, CallGraph::Dwarf { stack_bytes: 8192 });
        let fp = spec(&[40], false, CallGraph::FramePointers);

        routes.acquire(&mut sampler, &small).unwrap();
        assert_eq!(copies(&sampler), [(40, 8192)]);
        assert_eq!(
            targets(&sampler),
            (vec![40], vec![]),
            "no fp walk for dwarf"
        );
        routes.acquire(&mut sampler, &large).unwrap();
        routes.acquire(&mut sampler, &small_too).unwrap();
        routes.acquire(&mut sampler, &fp).unwrap();
        assert_eq!(copies(&sampler), [(40, 65528), (41, 65528)]);
        assert_eq!(
            targets(&sampler),
            (vec![40, 41], vec![40]),
            "fp and copy both"
        );

        routes.release(&mut sampler, &large);
        assert_eq!(copies(&sampler), [(40, 8192)], "back to the largest left");
        routes.release(&mut sampler, &small);
        assert_eq!(copies(&sampler), [(40, 8192)], "another session wants 8192");
        routes.release(&mut sampler, &small_too);
        assert_eq!(copies(&sampler), [], "the fp session alone: no copy");
        assert_eq!(targets(&sampler), (vec![40], vec![40]));
        routes.release(&mut sampler, &fp);
        assert_eq!(targets(&sampler), (vec![], vec![]));
    }

    #[test]
    fn a_target_that_becomes_a_jvm_gets_its_copy_and_loses_it_with_its_session() {
        let mut sampler = FakeSampler::default();
        let mut routes = Routes::default();
        let before = spec(&[60, 61], false, CallGraph::FramePointers);
        routes.acquire(&mut sampler, &before).unwrap();
        let after = SessionSpec {
            java_copies: vec![61],
            ..before.clone()
        };
        // The switch fails: no copy, and the session's counts stay those of `before`.
        sampler.kernel.lock().unwrap().fail_next_filter = true;
        assert!(
            routes
                .change_target(&mut sampler, &before, &after, 61)
                .is_err()
        );
        assert_eq!(copies(&sampler), []);
        routes
            .change_target(&mut sampler, &before, &after, 61)
            .unwrap();
        assert_eq!(copies(&sampler), [(61, DEFAULT_USER_COPY)]);
        assert_eq!(
            targets(&sampler),
            (vec![60, 61], vec![60, 61]),
            "the copy and the fp walk both"
        );
        // Nothing to change for a target the copy is not for.
        routes
            .change_target(&mut sampler, &before, &after, 60)
            .unwrap();
        assert_eq!(copies(&sampler), [(61, DEFAULT_USER_COPY)]);
        // Released as it now is, nothing is left: the counts followed the change.
        routes.release(&mut sampler, &after);
        assert_eq!(targets(&sampler), (vec![], vec![]));
        assert_eq!(copies(&sampler), []);
    }

    #[test]
    fn a_target_is_roots_while_a_session_of_roots_holds_it() {
        let mut sampler = FakeSampler::default();
        let mut routes = Routes::default();
        let theirs = spec(&[50, 51], false, CallGraph::Dwarf { stack_bytes: 65528 });
        let ours = SessionSpec {
            root: true,
            ..spec(&[51, 52], false, CallGraph::FramePointers)
        };
        let roots = |sampler: &FakeSampler| -> Vec<u32> {
            kernel(sampler)
                .root_targets
                .iter()
                .map(|&(_, pid)| pid)
                .collect()
        };
        routes.acquire(&mut sampler, &theirs).unwrap();
        assert_eq!(roots(&sampler), [] as [u32; 0], "another user's alone");
        routes.acquire(&mut sampler, &ours).unwrap();
        assert_eq!(roots(&sampler), [51, 52], "shared with root: root's");
        assert_eq!(copies(&sampler), [(50, 65528), (51, 65528)]);
        routes.release_target(&mut sampler, &ours, 51);
        assert_eq!(roots(&sampler), [52], "root left 51 to the other user");
        routes.release(
            &mut sampler,
            &SessionSpec {
                pids: vec![52],
                ..ours.clone()
            },
        );
        assert_eq!(roots(&sampler), [] as [u32; 0]);
        assert_eq!(targets(&sampler).0, [50, 51]);
        routes.release(&mut sampler, &theirs);
        assert_eq!(targets(&sampler).0, [] as [u32; 0]);
    }

    #[test]
    fn system_wide_copies_follow_the_same_rule() {
        let mut sampler = FakeSampler::default();
        let mut routes = Routes::default();
        let period = period_of(HZ);
        let dwarf = spec(&[], true, CallGraph::Dwarf { stack_bytes: 16384 });
        let plain = spec(&[], true, CallGraph::None);
        routes.acquire(&mut sampler, &plain).unwrap();
        routes.acquire(&mut sampler, &dwarf).unwrap();
        assert_eq!(kernel(&sampler).copy_system_wide, [(period, 16384)].into());
        routes.release(&mut sampler, &dwarf);
        let k = kernel(&sampler);
        assert!(k.copy_system_wide.is_empty() && k.system_wide.contains(&period));
    }

    #[test]
    fn a_failed_switch_to_stacks_leaves_everything_as_it_was() {
        let mut sampler = FakeSampler::default();
        let mut routes = Routes::default();
        let plain = spec(&[30], true, CallGraph::None);
        routes.acquire(&mut sampler, &plain).unwrap();
        let before = kernel(&sampler);

        // The system-wide entry must change to stacks and fails.
        sampler.kernel.lock().unwrap().fail_next_filter = true;
        let stacks = spec(&[], true, CallGraph::FramePointers);
        assert!(routes.acquire(&mut sampler, &stacks).is_err());
        assert_eq!(kernel(&sampler), before);

        // System-wide switches to stacks, 31 is added, then 30's switch to stacks (the third
        // filter update) fails: all of it is undone.
        let mixed = spec(&[31, 30], true, CallGraph::FramePointers);
        let mut failing = FailNth {
            inner: sampler.clone(),
            calls: 0,
            fail_at: 3,
        };
        assert!(routes.acquire(&mut failing, &mixed).is_err());
        let after = kernel(&sampler);
        assert_eq!(after.targets, before.targets);
        assert_eq!(after.stack_targets, before.stack_targets);
        assert_eq!(after.system_wide, before.system_wide);
        assert_eq!(after.stack_system_wide, before.stack_system_wide);
        assert_eq!(after.system_wide_sessions, 1);
        assert_eq!(after.tracked, before.tracked);

        // The counts were restored too: the plain session leaves and nothing remains.
        routes.release(&mut sampler, &plain);
        let k = kernel(&sampler);
        assert!(k.targets.is_empty() && k.system_wide.is_empty() && k.tracked.is_empty());
    }

    /// A sampler whose `fail_at`-th filter update (1-based) fails.
    struct FailNth {
        inner: FakeSampler,
        calls: u32,
        fail_at: u32,
    }

    impl FailNth {
        fn tick(&mut self) {
            self.calls += 1;
            if self.calls == self.fail_at {
                self.inner.kernel.lock().unwrap().fail_next_filter = true;
            }
        }
    }

    impl SamplerControl for FailNth {
        fn start_period(&mut self, period_ns: u64) -> Result<(), SamplerError> {
            self.inner.start_period(period_ns)
        }
        fn stop_period(&mut self, period_ns: u64) {
            self.inner.stop_period(period_ns)
        }
        fn set_target(&mut self, key: TargetKey, wants: Wants) -> Result<(), SamplerError> {
            self.tick();
            self.inner.set_target(key, wants)
        }
        fn remove_target(&mut self, key: TargetKey) {
            self.inner.remove_target(key)
        }
        fn set_system_wide(&mut self, period_ns: u64, wants: Wants) -> Result<(), SamplerError> {
            self.tick();
            self.inner.set_system_wide(period_ns, wants)
        }
        fn remove_system_wide(&mut self, period_ns: u64) {
            self.inner.remove_system_wide(period_ns)
        }
        fn set_tracking(&mut self, tgid: u32, tracking: Tracking, guard: Guard) {
            self.inner.set_tracking(tgid, tracking, guard)
        }
        fn take_creds_changed(&mut self) -> Vec<(u32, u64)> {
            self.inner.take_creds_changed()
        }
        fn set_system_wide_sessions(&mut self, count: u32) {
            self.inner.set_system_wide_sessions(count)
        }
        fn lost(&self) -> Result<crate::bpf::LostCounts, SamplerError> {
            self.inner.lost()
        }
        fn clear_lost(&mut self, period_ns: u64) {
            self.inner.clear_lost(period_ns)
        }
        fn note_blocked(&mut self, tid: u32, blocked: vmscope_common::Blocked) -> bool {
            self.inner.note_blocked(tid, blocked)
        }
        fn blocked(&self) -> Vec<(u32, vmscope_common::Blocked)> {
            self.inner.blocked()
        }
    }
}
