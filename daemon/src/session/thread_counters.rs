//! The words the VMs' threads publish for their samples to read (`codemap.proto`'s
//! `ThreadCounter` and `ThreadLabels`: a send counter, the id of the current label set), as
//! the kernel's `THREAD_COUNTERS` map holds them (one entry per thread for both), and each
//! user's share of that map.
//!
//! A thread's words are read by the sampler with each of the thread's samples, from the
//! thread's own memory: the kernel checks that the thread is still in the process that
//! published it, so what one process publishes is never read in another. The daemon checks
//! that the thread is the publisher's when it is published (`/proc/PID/task/TID`), and bounds
//! what one user may put in the map: a user's VMs may hold [`USER_SHARE`] entries, and
//! users other than root together half of the map, so that root's VMs always find room.
//!
//! Entries are removed by the kernel as their thread exits, and here as their process is let
//! go; an entry whose thread exited is only counted here until then, or until its process
//! publishes again at its share (its threads are then looked for, and the gone forgotten).

use std::collections::{BTreeMap, HashMap};

use crate::bpf::{SamplerControl, ThreadWords};

/// Most entries the VMs of one user other than root hold at once.
pub const USER_SHARE: usize = 4096;

/// Most entries the VMs of all users other than root hold at once: half of the kernel's map.
pub const USERS_SHARE: usize = vmscope_common::MAX_THREAD_COUNTERS as usize / 2;

/// Why a thread's counter is not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The thread is not one of the publisher's (or already gone).
    #[error("thread {tid} is not a thread of process {pid}")]
    NotItsThread {
        /// The publisher.
        pid: u32,
        /// The thread it named.
        tid: u32,
    },
    /// The publisher's user holds its share of the map already.
    #[error("uid {owner} holds {held} thread counters, its share")]
    Share {
        /// The user.
        owner: u32,
        /// What it holds.
        held: usize,
    },
    /// The kernel refused the entry (its map is full).
    #[error("the kernel refused thread {tid}'s counter: {reason}")]
    Kernel {
        /// The thread.
        tid: u32,
        /// What it said.
        reason: String,
    },
}

/// One word of a thread's memory, as its process published it: where it is, 0 for no longer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    /// Its send counter.
    Sends(u64),
    /// The id of its current label set.
    Labels(u64),
}

impl Word {
    /// `words` with this one changed.
    fn into(self, mut words: ThreadWords) -> ThreadWords {
        match self {
            Word::Sends(address) => words.sends = address,
            Word::Labels(address) => words.labels = address,
        }
        words
    }
}

/// The thread words the kernel reads, by process.
#[derive(Debug, Default)]
pub struct ThreadCounters {
    /// Per process: its owner, and its threads' words by thread id.
    by_pid: HashMap<u32, (u32, BTreeMap<u32, ThreadWords>)>,
    /// Entries held per owner.
    by_owner: HashMap<u32, usize>,
    /// Counters handed to the kernel so far (one per thread and process).
    pub set: u64,
    /// Counters refused, for any [`Refusal`].
    pub refused: u64,
}

impl ThreadCounters {
    /// Has the samples of thread `tid` of `pid` (owned by `owner`) read `word` where it says,
    /// or no longer when its address is 0 (the thread's other word is still read). `is_thread`
    /// says whether a thread of `pid` is alive now.
    pub fn publish(
        &mut self,
        sampler: &mut dyn SamplerControl,
        (pid, owner): (u32, u32),
        tid: u32,
        word: Word,
        is_thread: impl Fn(u32, u32) -> bool,
    ) -> Result<(), Refusal> {
        let old = self
            .by_pid
            .get(&pid)
            .and_then(|(_, threads)| threads.get(&tid))
            .copied();
        let words = word.into(old.unwrap_or_default());
        if words.is_empty() {
            self.remove(sampler, pid, tid);
            return Ok(());
        }
        if old == Some(words) {
            return Ok(());
        }
        if !is_thread(pid, tid) {
            self.refused += 1;
            return Err(Refusal::NotItsThread { pid, tid });
        }
        let known = old.is_some();
        if !known && owner != 0 {
            let mut held = self.by_owner.get(&owner).copied().unwrap_or(0);
            if held >= USER_SHARE || self.users_held() >= USERS_SHARE {
                // Threads gone since make room: the kernel removed them already.
                self.forget_gone(sampler, owner, &is_thread);
                held = self.by_owner.get(&owner).copied().unwrap_or(0);
            }
            if held >= USER_SHARE || self.users_held() >= USERS_SHARE {
                self.refused += 1;
                return Err(Refusal::Share { owner, held });
            }
        }
        if let Err(e) = sampler.set_thread_counter(tid, pid, words) {
            self.refused += 1;
            return Err(Refusal::Kernel {
                tid,
                reason: e.to_string(),
            });
        }
        let (_, threads) = self
            .by_pid
            .entry(pid)
            .or_insert_with(|| (owner, BTreeMap::new()));
        if threads.insert(tid, words).is_none() {
            *self.by_owner.entry(owner).or_insert(0) += 1;
            self.set += 1;
        }
        Ok(())
    }

    /// Reads no counter of `pid`'s any more: it exited, or its pid is another's now.
    pub fn forget(&mut self, sampler: &mut dyn SamplerControl, pid: u32) {
        let Some((owner, threads)) = self.by_pid.remove(&pid) else {
            return;
        };
        for &tid in threads.keys() {
            sampler.remove_thread_counter(tid);
        }
        self.release(owner, threads.len());
    }

    /// The processes whose counters are read now.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_pid.keys().copied()
    }

    /// Entries held now: by everyone, and by the publishers that are not root.
    pub fn held(&self) -> (usize, usize) {
        let all = self.by_owner.values().sum();
        (all, self.users_held())
    }

    fn users_held(&self) -> usize {
        self.by_owner
            .iter()
            .filter(|&(&owner, _)| owner != 0)
            .map(|(_, &n)| n)
            .sum()
    }

    fn remove(&mut self, sampler: &mut dyn SamplerControl, pid: u32, tid: u32) {
        let Some((owner, threads)) = self.by_pid.get_mut(&pid) else {
            return;
        };
        if threads.remove(&tid).is_some() {
            sampler.remove_thread_counter(tid);
            let (owner, empty) = (*owner, threads.is_empty());
            if empty {
                self.by_pid.remove(&pid);
            }
            self.release(owner, 1);
        }
    }

    /// Forgets the entries of `owner`'s processes (all users' when the users' half is full)
    /// whose thread is gone.
    fn forget_gone(
        &mut self,
        sampler: &mut dyn SamplerControl,
        owner: u32,
        is_thread: &impl Fn(u32, u32) -> bool,
    ) {
        let users_full = self.users_held() >= USERS_SHARE;
        let mut gone: Vec<(u32, u32)> = Vec::new();
        for (&pid, (o, threads)) in &self.by_pid {
            if *o == owner || (users_full && *o != 0) {
                gone.extend(
                    threads
                        .keys()
                        .filter(|&&tid| !is_thread(pid, tid))
                        .map(|&tid| (pid, tid)),
                );
            }
        }
        for (pid, tid) in gone {
            self.remove(sampler, pid, tid);
        }
    }

    fn release(&mut self, owner: u32, n: usize) {
        if let Some(held) = self.by_owner.get_mut(&owner) {
            *held = held.saturating_sub(n);
            if *held == 0 {
                self.by_owner.remove(&owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::fake::FakeSampler;

    fn kernel(sampler: &FakeSampler) -> BTreeMap<u32, (u32, u64)> {
        let kernel = sampler.kernel.lock().unwrap();
        let sends = kernel.thread_counters.iter();
        sends
            .map(|(&tid, &(tgid, w))| (tid, (tgid, w.sends)))
            .collect()
    }

    /// What a VM publishes reaches the kernel with its process; a thread that is not the
    /// publisher's is refused, and address 0 takes the entry out.
    #[test]
    fn counters_reach_the_kernel_only_for_the_publishers_threads() {
        let mut sampler = FakeSampler::default();
        let mut counters = ThreadCounters::default();
        let alive = |pid: u32, tid: u32| pid == 10 && (10..20).contains(&tid);
        counters
            .publish(&mut sampler, (10, 1000), 11, Word::Sends(0x7000), alive)
            .unwrap();
        assert_eq!(
            counters.publish(&mut sampler, (10, 1000), 99, Word::Sends(0x7008), alive),
            Err(Refusal::NotItsThread { pid: 10, tid: 99 })
        );
        assert_eq!(kernel(&sampler), BTreeMap::from([(11, (10, 0x7000))]));
        // Published again at another address: moved, still one entry.
        counters
            .publish(&mut sampler, (10, 1000), 11, Word::Sends(0x8000), alive)
            .unwrap();
        assert_eq!((counters.set, counters.held()), (1, (1, 1)));
        counters
            .publish(&mut sampler, (10, 1000), 11, Word::Sends(0), alive)
            .unwrap();
        assert!(kernel(&sampler).is_empty());
        assert_eq!(
            (counters.set, counters.refused, counters.held()),
            (1, 1, (0, 0))
        );
    }

    /// A thread's send counter and its label word are one entry of the kernel's map, held
    /// once against its user's share: taking one out leaves the other read.
    #[test]
    fn a_thread_s_counter_and_labels_are_one_entry() {
        let mut sampler = FakeSampler::default();
        let mut counters = ThreadCounters::default();
        let alive = |_: u32, _: u32| true;
        let both = ThreadWords {
            sends: 0x7000,
            labels: 0x9000,
        };
        counters
            .publish(&mut sampler, (10, 1000), 11, Word::Labels(0x9000), alive)
            .unwrap();
        counters
            .publish(&mut sampler, (10, 1000), 11, Word::Sends(0x7000), alive)
            .unwrap();
        let words = |s: &FakeSampler| s.kernel.lock().unwrap().thread_counters.clone();
        assert_eq!(words(&sampler), BTreeMap::from([(11, (10, both))]));
        assert_eq!((counters.set, counters.held()), (1, (1, 1)));
        counters
            .publish(&mut sampler, (10, 1000), 11, Word::Sends(0), alive)
            .unwrap();
        let labels_only = ThreadWords { sends: 0, ..both };
        assert_eq!(words(&sampler), BTreeMap::from([(11, (10, labels_only))]));
        counters
            .publish(&mut sampler, (10, 1000), 11, Word::Labels(0), alive)
            .unwrap();
        assert!(words(&sampler).is_empty());
        assert_eq!(counters.held(), (0, 0));
    }

    /// A user's VMs hold at most its share; threads gone make room again, and root's are not
    /// counted against anyone.
    #[test]
    fn a_user_holds_its_share_of_the_kernel_s_map_and_no_more() {
        let mut sampler = FakeSampler::default();
        let mut counters = ThreadCounters::default();
        let gone = std::cell::Cell::new(0u32);
        let alive = |_: u32, tid: u32| tid >= gone.get();
        for tid in 1..=USER_SHARE as u32 {
            counters
                .publish(
                    &mut sampler,
                    (5, 1000),
                    tid,
                    Word::Sends(8 * u64::from(tid)),
                    alive,
                )
                .unwrap();
        }
        let over = USER_SHARE as u32 + 1;
        assert_eq!(
            counters.publish(&mut sampler, (5, 1000), over, Word::Sends(0x10), alive),
            Err(Refusal::Share {
                owner: 1000,
                held: USER_SHARE
            })
        );
        // Another user, and root, are not refused for it.
        counters
            .publish(&mut sampler, (6, 1001), over, Word::Sends(0x10), alive)
            .unwrap();
        counters
            .publish(&mut sampler, (7, 0), over + 1, Word::Sends(0x10), alive)
            .unwrap();
        // Ten of the first user's threads exit: room for ten more.
        gone.set(11);
        for tid in 0..10 {
            counters
                .publish(
                    &mut sampler,
                    (5, 1000),
                    over + 2 + tid,
                    Word::Sends(0x10),
                    alive,
                )
                .unwrap();
        }
        assert!(
            counters
                .publish(&mut sampler, (5, 1000), over + 20, Word::Sends(0x10), alive)
                .is_err()
        );
        assert_eq!(counters.held(), (USER_SHARE + 2, USER_SHARE + 1));
        assert_eq!(kernel(&sampler).len(), USER_SHARE + 2);
        // The process let go takes its entries out of the kernel.
        counters.forget(&mut sampler, 5);
        assert_eq!(counters.held(), (2, 1));
        assert_eq!(kernel(&sampler).len(), 2);
        assert_eq!(counters.pids().count(), 2);
    }
}
