//! The kernel side of vmscope.
//!
//! * `vmscope_sample` runs on every cpu-clock tick of every perf event the daemon opened (one per
//!   online CPU and sampling frequency). It keeps the tick when the interrupted process is a
//!   target at that event's period, or when a system-wide session runs at that period, and
//!   writes an [`Event`] to the ring buffer. A tick that finds the ring buffer full is counted
//!   in `LOST` (per CPU) and dropped: the kernel never waits for the daemon.
//! * `vmscope_exec` (raw tracepoint `sched_process_exec`) reports `execve` of tracked
//!   processes, whose mappings the daemon must then re-read, with the new program's name.
//!
//! Built for `bpfel-unknown-none` by `daemon/build.rs` (aya-build). On the host this file
//! compiles to an empty `main` so that `cargo build --workspace` and clippy work.
#![cfg_attr(target_arch = "bpf", no_std, no_main)]

#[cfg(target_arch = "bpf")]
mod prog {
    use aya_ebpf::{
        bindings::{BPF_RB_NO_WAKEUP, bpf_perf_event_data},
        helpers::{
            bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_smp_processor_id,
            bpf_ktime_get_ns,
        },
        macros::{map, perf_event, raw_tracepoint},
        maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
        programs::{PerfEventContext, RawTracePointContext},
    };
    use vmscope_common::{
        CONFIG_LEN, CONFIG_SYSTEM_WIDE, EVENT_EXEC, EVENT_SAMPLE, Event, FLAG_KERNEL_MODE,
        MAX_LOST_KEYS, MAX_TARGETS, RING_BUFFER_BYTES, TargetKey,
    };

    /// Events for the daemon.
    #[map]
    static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);

    /// Processes to sample, per sampling period. The value is unused (the daemon keeps the
    /// reference counts).
    #[map]
    static TARGETS: HashMap<TargetKey, u8> = HashMap::with_max_entries(MAX_TARGETS, 0);

    /// Sampling periods (ns) at which every process is sampled.
    #[map]
    static SYSTEM_WIDE: HashMap<u64, u8> = HashMap::with_max_entries(64, 0);

    /// Processes whose `execve` the daemon wants to hear about.
    #[map]
    static TRACKED: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TARGETS, 0);

    /// Small settings: [`CONFIG_SYSTEM_WIDE`] holds the number of system-wide sessions.
    #[map]
    static CONFIG: Array<u32> = Array::with_max_entries(CONFIG_LEN, 0);

    /// Samples that did not fit in the ring buffer, per CPU, by process and period.
    #[map]
    static LOST: PerCpuHashMap<TargetKey, u64> = PerCpuHashMap::with_max_entries(MAX_LOST_KEYS, 0);

    /// Samples lost while `LOST` itself was full, per CPU (index 0).
    #[map]
    static LOST_UNKEYED: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

    #[perf_event]
    pub fn vmscope_sample(ctx: PerfEventContext) -> u32 {
        let pid_tgid = bpf_get_current_pid_tgid();
        let tgid = (pid_tgid >> 32) as u32;
        // The idle task is not a process; leaving it out makes system-wide profiles about work.
        if tgid == 0 {
            return 0;
        }
        // SAFETY: the kernel passes a valid bpf_perf_event_data to perf_event programs.
        let data: &bpf_perf_event_data = unsafe { &*ctx.ctx };
        let period_ns = data.sample_period;
        let key = TargetKey {
            period_ns,
            tgid,
            _pad: 0,
        };
        // SAFETY: map lookups return pointers into the map that stay valid for this program run.
        let wanted =
            unsafe { SYSTEM_WIDE.get(&period_ns).is_some() || TARGETS.get(&key).is_some() };
        if !wanted {
            return 0;
        }
        let kernel = data.regs.cs & 3 == 0;
        let event = Event {
            kind: EVENT_SAMPLE,
            // SAFETY: these helpers have no preconditions.
            cpu: unsafe { bpf_get_smp_processor_id() },
            tgid,
            tid: pid_tgid as u32,
            // SAFETY: as above.
            timestamp_ns: unsafe { bpf_ktime_get_ns() },
            ip: data.regs.rip,
            period_ns,
            flags: if kernel { FLAG_KERNEL_MODE } else { 0 },
            kernel_frames: 0,
            user_frames: 0,
        };
        // No wakeup per sample: the daemon drains the ring on a timer, and a wakeup costs far
        // more than the sample.
        if EVENTS
            .output::<Event>(&event, u64::from(BPF_RB_NO_WAKEUP))
            .is_err()
        {
            count_lost(&key);
        }
        0
    }

    // A raw tracepoint attaches by name and needs no tracefs mounted (many containers and
    // minimal hosts have none); the current task is all we need from it.
    #[raw_tracepoint(tracepoint = "sched_process_exec")]
    pub fn vmscope_exec(_ctx: RawTracePointContext) -> i32 {
        let pid_tgid = bpf_get_current_pid_tgid();
        let tgid = (pid_tgid >> 32) as u32;
        let system_wide = CONFIG.get(CONFIG_SYSTEM_WIDE).copied().unwrap_or(0) > 0;
        // SAFETY: see vmscope_sample.
        if !system_wide && unsafe { TRACKED.get(&tgid).is_none() } {
            return 0;
        }
        // The program's name, set from the exec'd file's name before this tracepoint fires.
        let (ip, period_ns) = Event::comm_words(&bpf_get_current_comm().unwrap_or([0; 16]));
        let event = Event {
            kind: EVENT_EXEC,
            // SAFETY: these helpers have no preconditions.
            cpu: unsafe { bpf_get_smp_processor_id() },
            tgid,
            tid: pid_tgid as u32,
            // SAFETY: as above.
            timestamp_ns: unsafe { bpf_ktime_get_ns() },
            ip,
            period_ns,
            flags: 0,
            kernel_frames: 0,
            user_frames: 0,
        };
        if EVENTS
            .output::<Event>(&event, u64::from(BPF_RB_NO_WAKEUP))
            .is_err()
        {
            // An exec that is not seen leaves stale mappings until the next miss forces a
            // re-read; count it with the unkeyed losses so that it is not silent.
            count_unkeyed();
        }
        0
    }

    fn count_lost(key: &TargetKey) {
        // Perf event programs do not nest on one CPU, so a plain increment of the per-CPU slot
        // cannot race.
        match LOST.get_ptr_mut(key) {
            // SAFETY: the pointer comes from the map and is valid for this program run.
            Some(slot) => unsafe { *slot += 1 },
            None => {
                if LOST.insert(key, &1, 0).is_err() {
                    count_unkeyed();
                }
            }
        }
    }

    fn count_unkeyed() {
        if let Some(slot) = LOST_UNKEYED.get_ptr_mut(0) {
            // SAFETY: as in count_lost.
            unsafe { *slot += 1 };
        }
    }

    #[panic_handler]
    fn panic(_info: &core::panic::PanicInfo) -> ! {
        loop {}
    }

    // bpf_get_stackid and the perf_event helpers we use later are GPL-only.
    #[unsafe(link_section = "license")]
    #[unsafe(no_mangle)]
    static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
}

#[cfg(not(target_arch = "bpf"))]
fn main() {}
