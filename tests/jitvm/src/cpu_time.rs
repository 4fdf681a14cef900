//! CPU time read from the kernel's clocks: the ground truth for a sampler that ticks on CPU
//! time. Wall time is not: on a busy machine the VM's thread is switched out at random,
//! inside collections and outside, and a share of wall time drifts from a share of samples
//! by more than the sampling error.
//!
//! Nor is the process's clock, to the precision a share of samples needs: the kernel adds up
//! the runtime each thread was last accounted, and a thread running on another CPU is
//! accounted only at its CPU's tick or when it is switched (`thread_group_cputime` says so).
//! A collection that wakes the publisher's thread was charged up to a tick of the publisher's
//! running before it: under load, 93 ms of the publisher's CPU time inside collections where
//! its samples (62 at 1.4 kHz, as many as `perf record` took) said 44. [`ThreadTimes`] reads
//! each thread's own clock, which the kernel brings up to date when read.

/// A CPU-time clock of `clock_gettime(2)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuClock {
    /// The calling thread's CPU time since it started.
    Thread,
    /// The CPU time of all the process's threads since it started.
    Process,
}

impl CpuClock {
    /// The clock's reading now, in ns.
    pub fn now_ns(self) -> u64 {
        let id = match self {
            CpuClock::Thread => libc::CLOCK_THREAD_CPUTIME_ID,
            CpuClock::Process => libc::CLOCK_PROCESS_CPUTIME_ID,
        };
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; these clocks exist on every Linux.
        let rc = unsafe { libc::clock_gettime(id, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime({id}) failed");
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

/// The CPU time of each of the process's threads at one moment, each read from the thread's
/// own clock: up to date even for a thread running on another CPU at that moment.
#[derive(Clone, Debug, Default)]
pub struct ThreadTimes(Vec<(libc::pid_t, u64)>);

impl ThreadTimes {
    /// Each live thread's CPU time now. The threads are listed first and their clocks read
    /// after, back to back, so that the reading is of one moment.
    pub fn now() -> ThreadTimes {
        ThreadTimes(read_clocks(threads()))
    }

    /// The same threads' CPU times now, read back to back and nothing else: a window between
    /// two readings holds no listing of threads. A thread started since is not in it (the VM
    /// starts its threads before it runs).
    pub fn again(&self) -> ThreadTimes {
        ThreadTimes(read_clocks(self.0.iter().map(|t| t.0)))
    }

    /// The CPU time the threads ran between `earlier` and `self`: one that exited since is not
    /// counted for the part it ran, one that started since for all its time.
    pub fn since(&self, earlier: &ThreadTimes) -> u64 {
        self.0
            .iter()
            .map(|&(tid, ns)| {
                let before = earlier.0.iter().find(|(t, _)| *t == tid).map_or(0, |t| t.1);
                ns.saturating_sub(before)
            })
            .sum()
    }
}

/// The process's threads now (none if `/proc` cannot say).
fn threads() -> Vec<libc::pid_t> {
    std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| task.file_name().to_str()?.parse().ok())
        .collect()
}

/// The clocks of `tids` that still run.
fn read_clocks(tids: impl IntoIterator<Item = libc::pid_t>) -> Vec<(libc::pid_t, u64)> {
    tids.into_iter()
        .filter_map(|tid| Some((tid, thread_clock_ns(tid)?)))
        .collect()
}

/// The CPU time of thread `tid` of this process, from its clock (`CPUCLOCK_SCHED` of
/// `CPUCLOCK_PERTHREAD`, the id glibc's `pthread_getcpuclockid` makes): `None` once it exited.
fn thread_clock_ns(tid: libc::pid_t) -> Option<u64> {
    let id: libc::clockid_t = (!tid << 3) | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; an unknown clock is an error, not UB.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_moves_both_clocks_and_sleep_moves_neither_by_much() {
        let (thread, process) = (CpuClock::Thread.now_ns(), CpuClock::Process.now_ns());
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let busy = CpuClock::Thread.now_ns() - thread;
        assert!(busy > 1_000_000, "20M steps took {busy} ns of CPU");
        assert!(CpuClock::Process.now_ns() - process >= busy);
        let before = CpuClock::Thread.now_ns();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let slept = CpuClock::Thread.now_ns() - before;
        assert!(slept < 10_000_000, "a 50 ms sleep took {slept} ns of CPU");
    }

    /// A thread busy beside the caller is counted as it runs, not only when its CPU's tick
    /// accounts it; reading again reads the same threads.
    #[test]
    fn thread_times_count_another_threads_work_while_it_runs() {
        use std::sync::{
            Arc,
            atomic::{AtomicBool, Ordering},
        };
        let before = ThreadTimes::now();
        let stop = Arc::new(AtomicBool::new(false));
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let worker = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tid_tx.send(unsafe { libc::gettid() }).unwrap();
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
                }
                CpuClock::Thread.now_ns()
            })
        };
        let tid = tid_rx.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let during = ThreadTimes::now();
        stop.store(true, Ordering::Relaxed);
        let worker_ns = worker.join().unwrap();
        let only_worker = |times: &ThreadTimes| {
            ThreadTimes(times.0.iter().copied().filter(|t| t.0 == tid).collect())
        };
        let counted = only_worker(&during).since(&only_worker(&before));
        assert!(
            (15_000_000..=worker_ns).contains(&counted),
            "{counted} ns counted while a thread ran for 30 ms ({worker_ns} ns in all)"
        );
        assert!(during.since(&before) >= counted);
        assert_eq!(during.since(&during), 0);
        // SAFETY: gettid has no preconditions.
        let caller = unsafe { libc::gettid() };
        let after = during.again();
        assert!(
            after.0.iter().any(|t| t.0 == caller) && after.0.len() <= during.0.len(),
            "the threads read before are read again: {during:?}, then {after:?}"
        );
    }
}
