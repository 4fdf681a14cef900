//! What the VMs publish of their own statistics, as the session manager keeps it: each
//! process's state so far (what a session starting now takes over), fed to the windows of the
//! sessions that watch it, and its intervals through time, which its samples are tagged with.
//!
//! A process that publishes as a VM (its Hello, on a stream or in a code map file) has *all*
//! its samples wait for its publication to be known up to their time, not only those in
//! generated code: a sample taken in the collector must see the collection's begin, which
//! may still be on its way when the sample is read from the kernel. So does a process that maps
//! a code map file no read has opened yet: the Hello may be in it.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use vmscope_model::{IntervalKind, Label};

use super::{Session, State, thread_counters::Word};
use crate::stats::{
    intervals::During,
    jvm_gcs::JvmGcs,
    vm::{StatEvent, VmState},
};

/// Most processes whose statistics the daemon follows at once: statistics of more are dropped
/// (and counted) until some exit.
pub const MAX_VM_STATES: usize = 4096;

/// The VMs' states by pid.
#[derive(Debug, Default)]
pub struct Vms {
    states: HashMap<u32, VmState>,
    /// Statistics events taken.
    pub taken: u64,
    /// Statistics events dropped for want of room ([`MAX_VM_STATES`]).
    pub dropped: u64,
    /// Intervals of processes let go, forgotten before their time (see
    /// [`VmState::intervals_forgotten`]).
    forgotten_before: u64,
    /// The collections of the JVMs off-CPU sessions watch, which publish none of their own
    /// but keep them in their performance data file.
    pub gcs: JvmGcs,
    /// Thread counters published since the manager last took them, for the kernel.
    thread_counters: Vec<PublishedCounter>,
    /// The label sets each process published, by pid and set id.
    label_sets: HashMap<u32, HashMap<u64, Arc<[Label]>>>,
}

/// A thread's word for the sampler as its VM published it (see [`StatEvent::ThreadCounter`],
/// [`StatEvent::ThreadLabels`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublishedCounter {
    /// The publishing process.
    pub pid: u32,
    /// Its thread.
    pub tid: u32,
    /// Which word, and where it is (0 for no longer).
    pub word: Word,
    /// The publisher's uid.
    pub owner: u32,
}

impl Vms {
    /// A VM's statistics, in its publication's order: kept as its latest state, and added to
    /// the windows of the sessions that watch it at their time.
    pub fn apply(
        &mut self,
        pid: u32,
        stats: Vec<(u64, StatEvent)>,
        sessions: &mut BTreeMap<u64, Session>,
    ) {
        if stats.is_empty() {
            return;
        }
        if !self.states.contains_key(&pid) && self.states.len() >= MAX_VM_STATES {
            self.dropped += stats.len() as u64;
            return;
        }
        let state = self.states.entry(pid).or_default();
        for (ts, event) in &stats {
            let word = match *event {
                StatEvent::ThreadCounter {
                    tid,
                    address,
                    owner,
                } => Some((tid, Word::Sends(address), owner)),
                StatEvent::ThreadLabels {
                    tid,
                    address,
                    owner,
                } => Some((tid, Word::Labels(address), owner)),
                _ => None,
            };
            if let Some((tid, word, owner)) = word {
                self.thread_counters.push(PublishedCounter {
                    pid,
                    tid,
                    word,
                    owner,
                });
                continue;
            }
            if let StatEvent::LabelSet { id, labels } = event {
                // The rules bound a publication's sets, and refuse an id changing its set.
                self.label_sets
                    .entry(pid)
                    .or_default()
                    .insert(*id, labels.clone());
                continue;
            }
            for session in sessions.values_mut() {
                if session.state == State::Stopped || !session.watches(pid, *ts) {
                    continue;
                }
                let start = session.start_ns;
                session
                    .vm
                    .entry(pid)
                    .or_insert_with(|| state.window(start))
                    .apply(*ts, event, session.stop_ns);
            }
            state.apply(*ts, event);
        }
        self.taken += stats.len() as u64;
    }

    /// The thread counters published since the last call, in their order.
    pub fn take_thread_counters(&mut self) -> Vec<PublishedCounter> {
        std::mem::take(&mut self.thread_counters)
    }

    /// Whether `pid` publishes as a VM: its samples wait for its publication, to be tagged
    /// with the intervals under way at their time.
    pub fn holds(&self, pid: u32) -> bool {
        self.states.contains_key(&pid)
    }

    /// The labels `pid` published under `id`, if it did (0 is none).
    pub fn labels(&self, pid: u32, id: u64) -> Option<&Arc<[Label]>> {
        if id == 0 {
            return None;
        }
        self.label_sets.get(&pid)?.get(&id)
    }

    /// The intervals of `pid` under way at `ts`; none for a process that publishes none.
    pub fn during(&self, pid: u32, ts: u64) -> Option<During<'_>> {
        if self.states.is_empty() {
            return None;
        }
        let during = self.states.get(&pid)?.during(ts);
        (!during.set.is_empty()).then_some(during)
    }

    /// How much of `[begin, end)` each kind of `pid`'s intervals covers: a block's time waiting
    /// in each. Empty for a process that publishes none.
    pub fn overlaps(&self, pid: u32, begin: u64, end: u64) -> Vec<(IntervalKind, u64)> {
        self.states
            .get(&pid)
            .map_or_else(Vec::new, |state| state.overlaps(begin, end))
    }

    /// The state of `pid`, if it published.
    pub fn get(&self, pid: u32) -> Option<&VmState> {
        self.states.get(&pid)
    }

    /// Every state, by pid.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &VmState)> {
        self.states.iter().map(|(&pid, state)| (pid, state))
    }

    /// Keeps the states of the processes `keep` says.
    pub fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        let forgotten = &mut self.forgotten_before;
        self.states.retain(|&pid, state| {
            let kept = keep(pid);
            if !kept {
                *forgotten += state.intervals_forgotten();
            }
            kept
        });
        let states = &self.states;
        self.label_sets.retain(|pid, _| states.contains_key(pid));
    }

    /// Intervals forgotten before no sample could need them, of every process so far.
    pub fn intervals_forgotten(&self) -> u64 {
        self.forgotten_before
            + self
                .states
                .values()
                .map(VmState::intervals_forgotten)
                .sum::<u64>()
    }
}
