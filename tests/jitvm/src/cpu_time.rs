//! CPU time read from the kernel's clocks: the ground truth for a sampler that ticks on CPU
//! time. Wall time is not: on a busy machine the VM's thread is switched out at random,
//! inside collections and outside, and a share of wall time drifts from a share of samples
//! by more than the sampling error.

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
}
