//! The kernel side of vmscope.
//!
//! * `vmscope_sample` runs on every cpu-clock tick of every perf event the daemon opened (one per
//!   online CPU and sampling frequency). It keeps the tick when the interrupted process is a
//!   target at that event's period, or when a system-wide session runs at that period, and
//!   writes an [`Event`] to the ring buffer. When the matching map value has [`WANT_STACKS`],
//!   the same record also carries the kernel stack (if the tick landed in the kernel) and the
//!   user stack, walked by frame pointers with `bpf_get_stack`. A tick that finds the ring
//!   buffer full is counted in `LOST` (per CPU) and dropped: the kernel never waits for the
//!   daemon.
//! * `vmscope_exec` (raw tracepoint `sched_process_exec`) reports `execve` of tracked
//!   processes, whose mappings the daemon must then re-read, with the new program's name.
//!
//! Built for `bpfel-unknown-none` by `daemon/build.rs` (aya-build). On the host this file
//! compiles to an empty `main` so that `cargo build --workspace` and clippy work.
#![cfg_attr(target_arch = "bpf", no_std, no_main)]

#[cfg(target_arch = "bpf")]
mod prog {
    use aya_ebpf::{
        EbpfContext,
        bindings::{BPF_F_USER_STACK, BPF_RB_NO_WAKEUP, bpf_perf_event_data},
        helpers::{
            bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_smp_processor_id,
            bpf_get_stack, bpf_ktime_get_ns,
        },
        macros::{map, perf_event, raw_tracepoint},
        maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
        programs::{PerfEventContext, RawTracePointContext},
    };
    use vmscope_common::{
        CONFIG_LEN, CONFIG_MAX_STACK, CONFIG_SYSTEM_WIDE, EVENT_EXEC, EVENT_SAMPLE, Event,
        FLAG_KERNEL_MODE, FLAG_KERNEL_TRUNCATED, FLAG_STACK, FLAG_USER_STACK_FAILED,
        FLAG_USER_TRUNCATED, MAX_LOST_KEYS, MAX_STACK_FRAMES, MAX_TARGETS, RING_BUFFER_BYTES,
        TargetKey, WANT_STACKS,
    };

    /// A sample record with room for both stacks: what one ring-buffer record holds at most.
    /// Only its first `48 + 8 * (kernel_frames + user_frames)` bytes are sent.
    #[repr(C)]
    struct StackRecord {
        event: Event,
        /// Kernel frames, then user frames right after them, each leaf first.
        frames: [u64; 2 * MAX_STACK_FRAMES],
    }

    /// `MAX_STACK_FRAMES` is 127 = 0x7f: masking a frame count with it gives the verifier a
    /// bound it can follow through pointer arithmetic (comparisons get rewritten by LLVM in
    /// ways the verifier cannot always track). Counts never exceed it, so the mask changes
    /// nothing at run time.
    const FRAME_MASK: usize = MAX_STACK_FRAMES;
    const _: () = assert!((MAX_STACK_FRAMES + 1).is_power_of_two());

    /// Events for the daemon.
    #[map]
    static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);

    /// Processes to sample, per sampling period. The value holds [`WANT_STACKS`] while a
    /// session there wants call stacks (the daemon keeps the reference counts).
    #[map]
    static TARGETS: HashMap<TargetKey, u8> = HashMap::with_max_entries(MAX_TARGETS, 0);

    /// Sampling periods (ns) at which every process is sampled; the value as in `TARGETS`.
    #[map]
    static SYSTEM_WIDE: HashMap<u64, u8> = HashMap::with_max_entries(64, 0);

    /// Per-CPU room to assemble a sample with stacks: 2 KiB, four times the BPF stack.
    #[map]
    static SCRATCH: PerCpuArray<StackRecord> = PerCpuArray::with_max_entries(1, 0);

    /// Processes whose `execve` the daemon wants to hear about.
    #[map]
    static TRACKED: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TARGETS, 0);

    /// Small settings: [`CONFIG_SYSTEM_WIDE`] holds the number of system-wide sessions,
    /// [`CONFIG_MAX_STACK`] the stack depth limit (0 until the daemon sets it: then
    /// [`MAX_STACK_FRAMES`]).
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
        let mut value = unsafe { SYSTEM_WIDE.get(period_ns).copied() };
        // The target entry matters too when system-wide mode does not want stacks: a session
        // on this process may.
        if value.is_none_or(|v| v & WANT_STACKS == 0) {
            // SAFETY: as above.
            if let Some(&target) = unsafe { TARGETS.get(key) } {
                value = Some(value.unwrap_or(0) | target);
            }
        }
        let Some(value) = value else {
            return 0;
        };
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
        let sent = if value & WANT_STACKS != 0 {
            output_with_stacks(&ctx, &event)
        } else {
            // No wakeup per sample: the daemon drains the ring on a timer, and a wakeup costs
            // far more than the sample.
            EVENTS.output::<Event>(&event, u64::from(BPF_RB_NO_WAKEUP))
        };
        if sent.is_err() {
            count_lost(&key);
        }
        0
    }

    /// Writes `event` followed by its kernel stack (when it interrupted the kernel) and its
    /// user stack as one record, as long as the frames it has: a record is 48 bytes plus 8 per
    /// frame, so the ring keeps as many samples as it did for shallow stacks.
    #[inline(always)]
    fn output_with_stacks(ctx: &PerfEventContext, event: &Event) -> Result<(), i32> {
        let Some(record) = SCRATCH.get_ptr_mut(0) else {
            // Cannot happen (a one-entry array always has its entry); send the bare event
            // rather than nothing.
            return EVENTS.output::<Event>(event, u64::from(BPF_RB_NO_WAKEUP));
        };
        // SAFETY: the pointer is this CPU's slot, valid for this program run; perf event
        // programs do not nest on one CPU, so nothing else uses it meanwhile.
        let record = unsafe { &mut *record };
        let limit = match CONFIG.get(CONFIG_MAX_STACK).copied().unwrap_or(0) as usize {
            n if n > 0 && n < MAX_STACK_FRAMES => n,
            _ => MAX_STACK_FRAMES,
        };
        // In bytes, as bpf_get_stack counts.
        let size = ((limit & FRAME_MASK) * 8) as u32;
        let mut flags = event.flags | FLAG_STACK;
        let base = record.frames.as_mut_ptr();

        let mut kernel_frames = 0;
        if event.is_kernel() {
            // SAFETY: `base` has room for MAX_STACK_FRAMES frames and size is at most that.
            // Flags 0: the kernel stack, from the interrupted registers; its first entry is the
            // interrupted kernel ip.
            let n = unsafe { bpf_get_stack(ctx.as_ptr(), base.cast(), size, 0) };
            if n > 0 {
                kernel_frames = (n as usize / 8) & FRAME_MASK;
            }
            if kernel_frames >= limit {
                flags |= FLAG_KERNEL_TRUNCATED;
            }
        }

        // The user stack goes right after the kernel frames. With BPF_F_USER_STACK the kernel
        // walks from the task's saved user registers when the tick landed in the kernel, and
        // from the interrupted ones otherwise; the first entry is the user ip.
        // SAFETY: kernel_frames <= MAX_STACK_FRAMES, so base + kernel_frames has room for
        // another MAX_STACK_FRAMES frames, and size is at most that.
        let n = unsafe {
            bpf_get_stack(
                ctx.as_ptr(),
                base.add(kernel_frames).cast(),
                size,
                u64::from(BPF_F_USER_STACK),
            )
        };
        let mut user_frames = 0;
        if n < 0 {
            flags |= FLAG_USER_STACK_FAILED;
        } else {
            user_frames = (n as usize / 8) & FRAME_MASK;
            if user_frames >= limit {
                flags |= FLAG_USER_TRUNCATED;
            }
        }

        record.event = Event {
            flags,
            kernel_frames: kernel_frames as u16,
            user_frames: user_frames as u16,
            ..*event
        };
        let len = Event::SIZE + 8 * (kernel_frames + user_frames);
        // SAFETY: len <= size_of::<StackRecord>() because both counts are masked to
        // MAX_STACK_FRAMES, and every byte up to len was written above.
        let bytes =
            unsafe { core::slice::from_raw_parts(core::ptr::from_mut(record).cast::<u8>(), len) };
        EVENTS.output::<[u8]>(bytes, u64::from(BPF_RB_NO_WAKEUP))
    }

    // A raw tracepoint attaches by name and needs no tracefs mounted (many containers and
    // minimal hosts have none); the current task is all we need from it.
    #[raw_tracepoint(tracepoint = "sched_process_exec")]
    pub fn vmscope_exec(_ctx: RawTracePointContext) -> i32 {
        let pid_tgid = bpf_get_current_pid_tgid();
        let tgid = (pid_tgid >> 32) as u32;
        let system_wide = CONFIG.get(CONFIG_SYSTEM_WIDE).copied().unwrap_or(0) > 0;
        // SAFETY: see vmscope_sample.
        if !system_wide && unsafe { TRACKED.get(tgid).is_none() } {
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
                if LOST.insert(key, 1, 0).is_err() {
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

    // bpf_get_stack is GPL-only.
    #[unsafe(link_section = "license")]
    #[unsafe(no_mangle)]
    static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
}

#[cfg(not(target_arch = "bpf"))]
fn main() {}
