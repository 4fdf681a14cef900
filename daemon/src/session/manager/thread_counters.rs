//! The VMs' thread counters handed to the kernel as they are published, and taken out of it
//! with their process.

use super::*;

impl Manager {
    /// Hands the thread counters published since the last call to the kernel (each refusal is
    /// counted and logged), and takes out those of processes the code maps let go.
    pub(super) fn apply_thread_counters(&mut self) {
        for published in self.vms.take_thread_counters() {
            let PublishedCounter {
                pid,
                tid,
                word,
                owner,
            } = published;
            if let Err(refusal) = self.thread_counters.publish(
                self.sampler.as_mut(),
                (pid, owner),
                tid,
                word,
                sys::thread_exists,
            ) {
                tracing::debug!(pid, tid, ?word, "a thread's word is not read: {refusal}");
            }
        }
    }

    /// Takes the counters of processes the code maps no longer know (exited, or their pid
    /// another's) out of the kernel.
    pub(super) fn forget_thread_counters(&mut self) {
        let gone: Vec<u32> = self
            .thread_counters
            .pids()
            .filter(|&pid| !self.codemaps.knows(pid))
            .collect();
        for pid in gone {
            self.thread_counters.forget(self.sampler.as_mut(), pid);
        }
    }
}
