//! The kernel side of vmscope.
//!
//! * `vmscope_sample` runs on every cpu-clock tick of every perf event the daemon opened (one per
//!   online CPU and sampling frequency). It keeps the tick when the interrupted process is a
//!   target at that event's period, or when a system-wide session runs at that period, and
//!   writes an [`Event`] to the ring buffer. When the matching map value ([`Wants`]) has
//!   [`WANT_STACKS`], the same record also carries the kernel stack (if the tick landed in the
//!   kernel) and the user stack, walked by frame pointers with `bpf_get_stack`; when it asks
//!   for a user copy (`--call-graph dwarf`), the kernel stack, then the user registers and the
//!   top of the user stack, copied page by page (see `copy_user_stack`). A tick that finds the ring
//!   buffer full is counted in `LOST` (per CPU) and dropped: the kernel never waits for the
//!   daemon. A tick that no session of root's wants (no [`WANT_ROOT`]) is kept only while the
//!   ring holds less than half its size with its record (see [`Wants::fits`]), and is
//!   otherwise counted in `SHED` and dropped before any stack is walked: the other half is
//!   root's, and no user can fill it.
//!   A tick of a target process is kept for its target sessions only while its `TRACKED` entry
//!   allows: with [`GUARD_CREDS`], only while the interrupted thread's credentials are those the
//!   daemon checked the owner's right against (read from `task->real_cred` at offsets the
//!   daemon found in the kernel's BTF). A thread whose ids or capabilities changed (a setuid
//!   `execve`, whose event the daemon may never see when the ring is full) is not sampled for
//!   them from its first tick on; the process goes to `CREDS_CHANGED`, for the daemon to check
//!   again. Samples kept for target sessions carry [`FLAG_TARGET`]; those taken for system-wide
//!   sessions alone do not, and no target session counts them. A thread whose VM published
//!   where it keeps its send counter (`THREAD_COUNTERS`) has the counter read with each sample
//!   ([`FLAG_COUNT`], `bpf_probe_read_user` of its own memory): the daemon counts the sends
//!   between two samples of the thread on the stack of the second. One that published where it
//!   keeps the id of its current label set has that word read too ([`FLAG_LABELS`]): each
//!   sample carries the thread's labels as they were at its instant.
//! * `vmscope_exec` (raw tracepoint `sched_process_exec`) reports `execve` of tracked
//!   processes, whose mappings the daemon must then re-read, with the new program's name.
//! * `vmscope_exit` (raw tracepoint `sched_process_exit`) ends a tracked process's life in the
//!   kernel itself: it removes the process from `TRACKED`, which `vmscope_sample` requires of
//!   every target, the moment its thread-group leader exits, and tells the daemon
//!   ([`EVENT_EXIT`]). Whatever is forked into the pid afterwards is never sampled for the old
//!   target's sessions, however late the daemon reads the event. Any exiting thread's send
//!   counter entry goes with it.
//! * `vmscope_rename` (raw tracepoint `task_rename`) reports a tracked process's thread given a
//!   name ([`EVENT_RENAME`]), with the name: the name of a thread at its samples, even one
//!   gone before the daemon could read `/proc`.
//! * Off-CPU time, attached only while an off-CPU or wall session runs: `vmscope_switch`
//!   (`tp_btf/sched_switch`, which runs as the leaving thread, with the leaving and the coming
//!   thread as arguments) notes in `BLOCKED` when a thread of an off-CPU target
//!   ([`OFF_CPU_PERIOD`] entries of `TARGETS` and `SYSTEM_WIDE`) leaves its CPU: when, why, and
//!   its user stack (by frame pointers, and for `--call-graph dwarf` its registers and the top
//!   of its stack in `BLOCKED_COPIES`), which only it can be read as. When such a thread is the
//!   one coming back, its entry is taken out and, for a block at least as long as the sessions'
//!   minimum, an [`EVENT_OFF_CPU`] record is written exactly as a sample's: its kernel stack
//!   (read from the sleeping task, `bpf_get_task_stack`), then the user stack kept. Shorter
//!   blocks are counted per process in `SHORT_BLOCKS`. This kernel has no kprobes, and refuses
//!   fentry programs: the switch tracepoint is all there is to run on.
//!
//! Built for `bpfel-unknown-none` by `daemon/build.rs` (aya-build). On the host this file
//! compiles to an empty `main` so that `cargo build --workspace` and clippy work.
#![cfg_attr(target_arch = "bpf", no_std, no_main)]
// The atomic add of the call counters (vmscope_count): the eBPF program builds with nightly.
#![cfg_attr(
    target_arch = "bpf",
    allow(internal_features),
    feature(core_intrinsics)
)]

#[cfg(target_arch = "bpf")]
mod prog {
    use aya_ebpf::{
        EbpfContext,
        bindings::{
            BPF_F_USER_STACK, BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE,
            bpf_perf_event_data, pt_regs,
        },
        cty::c_void,
        helpers::{
            bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_smp_processor_id,
            bpf_get_stack, bpf_ktime_get_ns, bpf_probe_read_kernel,
            generated::{
                bpf_get_attach_cookie, bpf_get_current_task, bpf_get_current_task_btf,
                bpf_get_task_stack, bpf_probe_read_kernel as probe_read_kernel_raw,
                bpf_probe_read_user, bpf_task_pt_regs,
            },
        },
        macros::{btf_tracepoint, map, perf_event, raw_tracepoint, uprobe},
        maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
        programs::{BtfTracePointContext, PerfEventContext, ProbeContext, RawTracePointContext},
    };
    use vmscope_common::{
        BLOCK_EXITED, BLOCKED_NOTED, Blocked, BlockedCopy, CONFIG_CRED_CAPS, CONFIG_CRED_IDS,
        CONFIG_LEN, CONFIG_MAX_STACK, CONFIG_SYSTEM_WIDE, CONFIG_TASK_CRED, CONFIG_TASK_PID,
        CONFIG_TASK_TGID, Creds, EVENT_EXEC, EVENT_EXIT, EVENT_OFF_CPU, EVENT_RENAME, EVENT_SAMPLE,
        Event, FLAG_BLOCK_STATE_SHIFT, FLAG_COUNT, FLAG_KERNEL_MODE, FLAG_KERNEL_TRUNCATED,
        FLAG_LABELS, FLAG_STACK, FLAG_TARGET, FLAG_USER_COPY, FLAG_USER_COPY_FAULTED,
        FLAG_USER_STACK_FAILED, FLAG_USER_TRUNCATED, GUARD_CREDS, GUARD_HELD, GUARD_OPEN,
        MAX_BLOCKED_COPIES, MAX_BLOCKED_THREADS, MAX_COUNT_SLOTS, MAX_LOST_KEYS, MAX_STACK_FRAMES,
        MAX_TARGETS, MAX_THREAD_COUNTERS, MAX_USER_COPY, OFF_CPU_COPIES_FULL, OFF_CPU_COUNTS_LEN,
        OFF_CPU_MAX_COPY, OFF_CPU_PERIOD, OFF_CPU_SHORT, OFF_CPU_SHORT_NS, OFF_CPU_UNFOLLOWED,
        RING_BUFFER_BYTES, ShortBlocks, TRACK_ANY_THREAD, TargetKey, ThreadCounter, Tracked,
        UserCopyHeader, WANT_STACKS, Wants, block_state,
    };

    /// `MAX_STACK_FRAMES` is 127 = 0x7f: masking a frame count with it gives the verifier a
    /// bound it can follow through pointer arithmetic (comparisons get rewritten by LLVM in
    /// ways the verifier cannot always track). Counts never exceed it, so the mask changes
    /// nothing at run time.
    const FRAME_MASK: usize = MAX_STACK_FRAMES;
    const _: () = assert!((MAX_STACK_FRAMES + 1).is_power_of_two());

    /// Bound of the words of both stacks together (at most 2 * 127), for the verifier.
    const FRAMES_MASK: usize = 0xff;
    /// Bound of the bytes copied so far (at most `MAX_USER_COPY`), for the verifier.
    const COPIED_MASK: usize = 0xffff;
    /// Bound of one chunk of the copy (at most a page), for the verifier.
    const CHUNK_MASK: usize = 0x1fff;
    /// The copy goes page by page, so that a fault keeps the pages before it.
    const PAGE: usize = 4096;
    /// Chunks of a copy: a partial first page, then whole pages.
    const MAX_CHUNKS: usize = MAX_USER_COPY as usize / PAGE + 2;
    const HEADER_WORDS: usize = UserCopyHeader::SIZE / 8;
    /// Words after the event: every offset the masks above allow, plus a chunk, fits, so the
    /// verifier can prove each write and the output in bounds.
    const TAIL_WORDS: usize = FRAMES_MASK + HEADER_WORDS + (COPIED_MASK + 1 + CHUNK_MASK + 1) / 8;
    const _: () = assert!(2 * MAX_STACK_FRAMES <= FRAMES_MASK);
    /// Bound of a kept copy's length (at most `OFF_CPU_MAX_COPY`), for the verifier.
    const OFF_CPU_COPY_MASK: usize = 0x1fff;
    const _: () = assert!(OFF_CPU_MAX_COPY as usize <= OFF_CPU_COPY_MASK);
    const _: () =
        assert!(core::mem::size_of::<BlockedCopy>() >= UserCopyHeader::SIZE + OFF_CPU_COPY_MASK);
    /// Bound of a record's length, for the verifier: the largest record fits under it.
    const RECORD_MASK: usize = 0x1ffff;
    const _: () = assert!(core::mem::size_of::<StackRecord>() <= RECORD_MASK + 1);
    /// `BPF_F_NO_PREALLOC` of linux/bpf.h: hash map entries allocated as they are added.
    const BPF_F_NO_PREALLOC: u32 = 1;
    const _: () = assert!(MAX_USER_COPY as usize <= COPIED_MASK && PAGE <= CHUNK_MASK);

    /// A sample record with room for both stacks, the user registers and the largest copy of
    /// the user stack: what one ring-buffer record holds at most. Only the bytes written are
    /// sent: the event, `8 * (kernel_frames + user_frames)` bytes of frames and, with a copy,
    /// its header and the bytes copied.
    #[repr(C)]
    struct StackRecord {
        event: Event,
        /// Kernel frames, then user frames right after them, each leaf first; then the
        /// [`UserCopyHeader`] and the copied stack.
        tail: [u64; TAIL_WORDS],
    }

    /// Events for the daemon.
    #[map]
    static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);

    /// Processes to sample, per sampling period. The value says what the sessions there want
    /// with each sample (the daemon keeps the reference counts).
    #[map]
    static TARGETS: HashMap<TargetKey, Wants> = HashMap::with_max_entries(MAX_TARGETS, 0);

    /// Sampling periods (ns) at which every process is sampled; the value as in `TARGETS`.
    #[map]
    static SYSTEM_WIDE: HashMap<u64, Wants> = HashMap::with_max_entries(64, 0);

    /// Room to assemble a sample with stacks, one slot per possible CPU (the daemon sets the
    /// count at load), indexed by CPU number: a slot is about 74 KiB, above the 32 KiB a per-CPU
    /// array value may hold. Perf event programs do not nest on one CPU; the switch program,
    /// which shares the slots, runs inside the scheduler with interrupts off, so that the
    /// sampler's timer never fires inside it, and it never runs inside the sampler (the
    /// scheduler does not run in an interrupt): a slot has one user at a time.
    #[map]
    static SCRATCH: Array<StackRecord> = Array::with_max_entries(1, 0);

    /// Target processes that live: the gate of `TARGETS`, and the processes whose `execve` and
    /// exit the daemon wants to hear about. The value says whose exit ends the entry:
    /// `TRACK_LEADER` or [`TRACK_ANY_THREAD`] (see vmscope_common).
    ///
    /// `TARGETS` is keyed by (period, tgid), one entry per sampling period, and only the daemon
    /// knows the periods; this map is keyed by tgid alone, so the exit program removes a process
    /// from every period with one delete, and the sampler pays one more lookup only for ticks
    /// that hit a target. The daemon adds the entry with the target's filters, and again when
    /// a process it judged alive lost its entry (a leader gone before its threads).
    ///
    /// The value also says whose samples target sessions may have ([`Tracked::guard`]).
    #[map]
    static TRACKED: HashMap<u32, Tracked> = HashMap::with_max_entries(MAX_TARGETS, 0);

    /// Target processes whose thread was not sampled for target sessions because its
    /// credentials were not those the daemon checked (a setuid `execve`, a change of ids), with
    /// the time of the first such tick: the daemon checks them again, then removes them. The
    /// first tick's time stays until then.
    #[map]
    static CREDS_CHANGED: HashMap<u32, u64> = HashMap::with_max_entries(MAX_TARGETS, 0);

    /// How many processes each CPU put in `CREDS_CHANGED`: the daemon looks through that map
    /// only when their sum moved, rather than walk every bucket of an empty hash table for each
    /// batch of samples.
    #[map]
    static CREDS_CHANGES: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

    /// Small settings: [`CONFIG_SYSTEM_WIDE`] holds the number of system-wide sessions,
    /// [`CONFIG_MAX_STACK`] the stack depth limit (0 until the daemon sets it: then
    /// [`MAX_STACK_FRAMES`]).
    #[map]
    static CONFIG: Array<u32> = Array::with_max_entries(CONFIG_LEN, 0);

    /// Samples that did not fit in the ring buffer, per CPU, by process and period.
    #[map]
    static LOST: PerCpuHashMap<TargetKey, u64> = PerCpuHashMap::with_max_entries(MAX_LOST_KEYS, 0);

    /// Samples that no session of root's wanted, left out because the ring buffer held its
    /// share of other users' samples already ([`Wants::fits`]), per CPU, by process and period:
    /// lost for the sessions that wanted them, and for nobody else.
    #[map]
    static SHED: PerCpuHashMap<TargetKey, u64> = PerCpuHashMap::with_max_entries(MAX_LOST_KEYS, 0);

    /// Samples shed while `SHED` itself was full, per CPU (index 0): counted for the daemon
    /// alone, never in root's sessions as the unkeyed losses are.
    #[map]
    static SHED_UNKEYED: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

    /// Samples lost while `LOST` itself was full, per CPU (index 0).
    #[map]
    static LOST_UNKEYED: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

    /// Threads of off-CPU targets off their CPU, by thread id: since when, why, and their user
    /// stack (see `vmscope_switch`). Entries are allocated as threads leave (`BPF_F_NO_PREALLOC`):
    /// about 1 KiB each, for the threads off their CPU now. Bounded: a thread that leaves while
    /// it is full is counted in `OFF_CPU_COUNTS` and not followed.
    #[map]
    static BLOCKED: HashMap<u32, Blocked> =
        HashMap::with_max_entries(MAX_BLOCKED_THREADS, BPF_F_NO_PREALLOC);

    /// The user registers and stack copies of threads off their CPU, for sessions that unwind
    /// copies, by thread id; 8 KiB each, allocated as threads leave.
    #[map]
    static BLOCKED_COPIES: HashMap<u32, BlockedCopy> =
        HashMap::with_max_entries(MAX_BLOCKED_COPIES, BPF_F_NO_PREALLOC);

    /// Where a leaving thread's entry is assembled before it goes into `BLOCKED`.
    #[map]
    static BLOCKED_SCRATCH: PerCpuArray<Blocked> = PerCpuArray::with_max_entries(1, 0);

    /// Offsets of `pid` and `tgid` in `struct task_struct`, from the running kernel's BTF, set
    /// by the daemon at load: read-only data, so that the verifier knows them as constants and
    /// lets the switch program read the coming thread's ids at them.
    #[unsafe(no_mangle)]
    static TASK_PID_OFFSET: u32 = 0;
    #[unsafe(no_mangle)]
    static TASK_TGID_OFFSET: u32 = 0;

    /// Blocks shorter than the sessions' minimum, per CPU, by process: counted, not sent.
    #[map]
    static SHORT_BLOCKS: PerCpuHashMap<u32, ShortBlocks> =
        PerCpuHashMap::with_max_entries(MAX_LOST_KEYS, 0);

    /// The off-CPU programs' counts, per CPU: see `OFF_CPU_UNFOLLOWED` and the indices after it.
    #[map]
    static OFF_CPU_COUNTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(OFF_CPU_COUNTS_LEN, 0);

    /// Where the VMs' threads keep their send counters, by thread id (see [`ThreadCounter`]):
    /// written by the daemon, read with each sample of the thread, removed as it exits.
    #[map]
    static THREAD_COUNTERS: HashMap<u32, ThreadCounter> =
        HashMap::with_max_entries(MAX_THREAD_COUNTERS, BPF_F_NO_PREALLOC);

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
        let (sampled, value, target_flag) = wanted(&key);
        if !sampled {
            return 0;
        }
        // Before any work on the stacks: a user's sample that would take the ring past its
        // share costs the kernel one lookup and a count. Root's samples always fit: the ring
        // is not even queried for them.
        if !value.for_root()
            && !value.fits(
                value.max_record_bytes(),
                EVENTS.query(u64::from(BPF_RB_AVAIL_DATA)),
                EVENTS.query(u64::from(BPF_RB_RING_SIZE)),
            )
        {
            count(&SHED, &SHED_UNKEYED, &key);
            return 0;
        }
        let kernel = data.regs.cs & 3 == 0;
        let tid = pid_tgid as u32;
        let (words_flags, sends, labels) = thread_words(tid, tgid);
        let event = Event {
            kind: EVENT_SAMPLE,
            // SAFETY: these helpers have no preconditions.
            cpu: unsafe { bpf_get_smp_processor_id() },
            tgid,
            tid,
            // SAFETY: as above.
            timestamp_ns: unsafe { bpf_ktime_get_ns() },
            ip: data.regs.rip,
            period_ns,
            flags: (if kernel { FLAG_KERNEL_MODE } else { 0 }) | target_flag | words_flags,
            kernel_frames: 0,
            user_frames: 0,
            count: sends,
            labels,
        };
        let sent = if value.any_stack() {
            output_with_stacks(ctx.as_ptr(), || user_regs(data, kernel), &event, value)
        } else {
            // No wakeup per sample: the daemon drains the ring on a timer, and a wakeup costs
            // far more than the sample.
            EVENTS.output::<Event>(&event, u64::from(BPF_RB_NO_WAKEUP))
        };
        if sent.is_err() {
            count(&LOST, &LOST_UNKEYED, &key);
        }
        0
    }

    /// The current thread's send counter and label set id, where its process published their
    /// words: ([`FLAG_COUNT`] and [`FLAG_LABELS`] for the words read, the counter, the set id).
    /// Read from the thread's own memory, only while it is in the process that published the
    /// addresses; a page not present (the tick cannot fault it in) reads nothing: the next
    /// sample counts the sends since the last one read, and this one is unlabelled.
    #[inline(always)]
    fn thread_words(tid: u32, tgid: u32) -> (u32, u64, u64) {
        // SAFETY: see vmscope_sample.
        let Some(&words) = (unsafe { THREAD_COUNTERS.get(tid) }) else {
            return (0, 0, 0);
        };
        if words.tgid != tgid {
            return (0, 0, 0);
        }
        let (mut flags, mut sends, mut labels) = (0, 0, 0);
        if words.address != 0 && read_user_word(words.address, &mut sends) {
            flags |= FLAG_COUNT;
        }
        if words.labels != 0 && read_user_word(words.labels, &mut labels) {
            flags |= FLAG_LABELS;
        }
        (flags, sends, labels)
    }

    /// Reads the `u64` at `address` of the current task's memory into `value`: whether it
    /// could (a bad or absent page fails).
    #[inline(always)]
    fn read_user_word(address: u64, value: &mut u64) -> bool {
        // SAFETY: bpf_probe_read_user copes with any address: a bad one fails.
        unsafe {
            bpf_probe_read_user(
                core::ptr::from_mut(value).cast(),
                8,
                address as *const c_void,
            ) == 0
        }
    }

    /// What the sessions at `key` (a sampling period, or [`OFF_CPU_PERIOD`]) want of the current
    /// thread: whether any does, the union of their wants, and [`FLAG_TARGET`] when target
    /// sessions may count it. A flag and a value rather than an `Option<Wants>`: LLVM copies
    /// the undefined payload of a `None` around, and the verifier refuses reads of
    /// uninitialised registers.
    #[inline(always)]
    fn wanted(key: &TargetKey) -> (bool, Wants, u32) {
        // SAFETY: map lookups return pointers into the map that stay valid for this program run.
        let (mut sampled, mut value) = match unsafe { SYSTEM_WIDE.get(key.period_ns) } {
            Some(&wants) => (true, wants),
            None => (false, Wants::default()),
        };
        // The target entry is looked up even when system-wide mode wants everything: a sample
        // that target sessions may count says so (FLAG_TARGET), and sessions on this process
        // may want more.
        let mut target_flag = 0;
        // SAFETY: as above.
        if let Some(&target) = unsafe { TARGETS.get(key) }
            // A target is sampled while it lives: vmscope_exit removes it from TRACKED when
            // it exits, before its pid can go to another process, while its TARGETS
            // entries wait for the daemon.
            && let Some(tracked) = TRACKED.get_ptr(key.tgid)
            // SAFETY: the pointer comes from the map and is valid for this program run.
            && admitted(unsafe { &*tracked }, key.tgid)
        {
            value = if sampled { value.union(target) } else { target };
            sampled = true;
            target_flag = FLAG_TARGET;
        }
        (sampled, value, target_flag)
    }

    /// Whether the current thread of a tracked process may be sampled for its target sessions:
    /// see [`Tracked::guard`]. A thread whose credentials are not the checked ones puts its
    /// process in `CREDS_CHANGED`.
    #[inline(always)]
    fn admitted(tracked: &Tracked, tgid: u32) -> bool {
        match tracked.guard {
            GUARD_OPEN => true,
            GUARD_CREDS => {
                if current_creds_are(&tracked.creds) {
                    return true;
                }
                // SAFETY: the helper has no preconditions.
                let now = unsafe { bpf_ktime_get_ns() };
                // Present already: the daemon has yet to read it, and the first time stays.
                if CREDS_CHANGED
                    .insert(tgid, now, u64::from(BPF_NOEXIST))
                    .is_ok()
                    && let Some(count) = CREDS_CHANGES.get_ptr_mut(0)
                {
                    // Counted after the insert: a daemon that sees the new count finds the
                    // entry. SAFETY: this CPU's slot, valid for the program's run; perf event
                    // programs do not nest on one CPU, so the increment cannot race.
                    unsafe { *count += 1 };
                }
                false
            }
            // GUARD_HELD, or a value this program does not know: nothing.
            _ => false,
        }
    }

    /// Whether the current thread's objective credentials (`task->real_cred`: what
    /// `/proc/PID/status` shows and ptrace checks) are `expected`. False when the offsets are
    /// unknown or a read fails: a guard that cannot be checked keeps the samples out.
    #[inline(always)]
    fn current_creds_are(expected: &Creds) -> bool {
        let offset = |slot| CONFIG.get(slot).copied().unwrap_or(0) as usize;
        let (task_cred, ids, caps) = (
            offset(CONFIG_TASK_CRED),
            offset(CONFIG_CRED_IDS),
            offset(CONFIG_CRED_CAPS),
        );
        if task_cred == 0 || ids == 0 || caps == 0 {
            return false;
        }
        // SAFETY: bpf_get_current_task has no preconditions; bpf_probe_read_kernel copes with
        // any address (a wrong one fails, and the check with it).
        let read = unsafe {
            let task = bpf_get_current_task() as usize;
            match bpf_probe_read_kernel((task + task_cred) as *const usize) {
                Ok(cred) => bpf_probe_read_kernel((cred + ids) as *const [u32; 8])
                    .and_then(|ids| Ok((ids, bpf_probe_read_kernel((cred + caps) as *const u64)?))),
                Err(e) => Err(e),
            }
        };
        let Ok((ids, cap_permitted)) = read else {
            return false;
        };
        // Word by word: a slice comparison would call memcmp, which BPF programs do not have.
        let mut differ = cap_permitted ^ expected.cap_permitted;
        for i in 0..8 {
            differ |= u64::from(ids[i] ^ expected.ids[i]);
        }
        differ == 0
    }

    /// Writes `event` followed by its kernel stack (when it interrupted the kernel), its user
    /// stack by frame pointers (with [`WANT_STACKS`]) and its user registers and stack copy
    /// (with [`Wants::user_copy_bytes`], from `user_regs`) as one record, as long as what it
    /// holds: a record is 64 bytes plus 8 per frame plus the copy, so the ring keeps as many
    /// samples as it did for shallow stacks. `ctx` is the program's context, whose registers
    /// the kernel stack is walked from. An off-CPU event takes its `ip` from its kernel stack's
    /// first entry (the daemon places the leaf by `ip`).
    #[inline(always)]
    fn output_with_stacks(
        ctx: *mut c_void,
        user_regs: impl FnOnce() -> Option<pt_regs>,
        event: &Event,
        wants: Wants,
    ) -> Result<(), i32> {
        let Some(record) = SCRATCH.get_ptr_mut(event.cpu) else {
            // Only if the daemon sized SCRATCH below the possible CPUs: send the bare event
            // rather than nothing.
            return EVENTS.output::<Event>(event, u64::from(BPF_RB_NO_WAKEUP));
        };
        // SAFETY: the pointer is this CPU's slot, valid for this program run; perf event
        // programs do not nest on one CPU, and no other CPU uses this slot.
        let record = unsafe { &mut *record };
        let limit = match CONFIG.get(CONFIG_MAX_STACK).copied().unwrap_or(0) as usize {
            n if n > 0 && n < MAX_STACK_FRAMES => n,
            _ => MAX_STACK_FRAMES,
        };
        // In bytes, as bpf_get_stack counts.
        let size = ((limit & FRAME_MASK) * 8) as u32;
        let mut flags = event.flags | FLAG_STACK;
        let base = record.tail.as_mut_ptr();

        let mut kernel_frames = 0;
        if event.is_kernel() {
            // SAFETY: `base` has room for MAX_STACK_FRAMES frames and size is at most that.
            // Flags 0: the kernel stack, from the interrupted registers; its first entry is the
            // interrupted kernel ip.
            let n = unsafe { bpf_get_stack(ctx, base.cast(), size, 0) };
            if n > 0 {
                kernel_frames = (n as usize / 8) & FRAME_MASK;
            }
            if kernel_frames >= limit {
                flags |= FLAG_KERNEL_TRUNCATED;
            }
        }

        let mut user_frames = 0;
        if wants.flags & WANT_STACKS != 0 {
            // The user stack goes right after the kernel frames. With BPF_F_USER_STACK the
            // kernel walks from the task's saved user registers when the tick landed in the
            // kernel, and from the interrupted ones otherwise; the first entry is the user ip.
            // SAFETY: kernel_frames <= MAX_STACK_FRAMES, so base + kernel_frames has room for
            // another MAX_STACK_FRAMES frames, and size is at most that.
            let n = unsafe {
                bpf_get_stack(
                    ctx,
                    base.add(kernel_frames).cast(),
                    size,
                    u64::from(BPF_F_USER_STACK),
                )
            };
            if n < 0 {
                flags |= FLAG_USER_STACK_FAILED;
            } else {
                user_frames = (n as usize / 8) & FRAME_MASK;
                if user_frames >= limit {
                    flags |= FLAG_USER_TRUNCATED;
                }
            }
        }

        let frame_words = (kernel_frames + user_frames) & FRAMES_MASK;
        let mut len = Event::SIZE + 8 * frame_words;
        if wants.user_copy_bytes > 0
            && let Some(regs) = user_regs()
        {
            // SAFETY: frame_words <= FRAMES_MASK, and the tail has room for FRAMES_MASK words,
            // a header and the largest copy after them.
            let header = unsafe { base.add(frame_words) };
            let copy = copy_user_stack(header, regs.rsp, wants.user_copy_bytes);
            flags |= FLAG_USER_COPY | copy.faulted;
            // SAFETY: as above; the header is 8-aligned, like every word of the tail.
            unsafe {
                header.cast::<UserCopyHeader>().write(UserCopyHeader {
                    ip: regs.rip,
                    sp: regs.rsp,
                    bp: regs.rbp,
                    len: copy.len as u32,
                    _pad: 0,
                });
            }
            len += UserCopyHeader::SIZE + (copy.len & COPIED_MASK);
        }

        let ip = if event.kind == EVENT_OFF_CPU && kernel_frames > 0 {
            // SAFETY: kernel_frames > 0 words were written at base.
            unsafe { *base }
        } else {
            event.ip
        };
        record.event = Event {
            ip,
            flags,
            kernel_frames: kernel_frames as u16,
            user_frames: user_frames as u16,
            ..*event
        };
        // SAFETY: len <= size_of::<StackRecord>() because every part of it is masked to the
        // bounds the tail was sized for, and every byte up to len was written above.
        let bytes =
            unsafe { core::slice::from_raw_parts(core::ptr::from_mut(record).cast::<u8>(), len) };
        EVENTS.output::<[u8]>(bytes, u64::from(BPF_RB_NO_WAKEUP))
    }

    /// The registers user code was interrupted in: the tick's own when it landed in user mode,
    /// else those the task entered the kernel with (kernel 5.15+), which it will return to.
    /// `None` for a task without user state (a kernel thread: its saved registers are not user
    /// mode).
    #[inline(always)]
    fn user_regs(data: &bpf_perf_event_data, kernel: bool) -> Option<pt_regs> {
        if !kernel {
            return Some(data.regs);
        }
        task_user_regs()
    }

    /// The registers the current task entered the kernel with, which it will return to user
    /// code with; `None` for a kernel thread.
    #[inline(always)]
    fn task_user_regs() -> Option<pt_regs> {
        // SAFETY: bpf_get_current_task_btf has no preconditions and returns a trusted pointer;
        // bpf_task_pt_regs accepts it and returns the task's saved registers, read here with
        // bpf_probe_read_kernel, which copes with any address.
        let regs = unsafe {
            let task = bpf_get_current_task_btf();
            let regs = bpf_task_pt_regs(task) as *const pt_regs;
            bpf_probe_read_kernel(regs).ok()?
        };
        (regs.cs & 3 != 0).then_some(regs)
    }

    /// How much of the user stack was copied.
    struct Copied {
        len: usize,
        /// [`FLAG_USER_COPY_FAULTED`] when the copy stopped short at an unreadable address.
        faulted: u32,
    }

    /// Copies up to `want` bytes of user stack from `sp` to just after the header at `header`:
    /// first up to the next page boundary, then page by page, so that a fault (the end of the
    /// stack mapping, a guard page) keeps every page before it.
    #[inline(always)]
    fn copy_user_stack(header: *mut u64, sp: u64, want: u32) -> Copied {
        let want = (if want > MAX_USER_COPY {
            MAX_USER_COPY
        } else {
            want
        } & !7) as usize;
        // SAFETY: see output_with_stacks: the header and a copy of MAX_USER_COPY fit after it.
        let stack = unsafe { header.add(HEADER_WORDS).cast::<u8>() };
        let mut copied = 0usize;
        for _ in 0..MAX_CHUNKS {
            if copied >= want {
                break;
            }
            let at = sp.wrapping_add(copied as u64);
            let page_left = PAGE - (at as usize & (PAGE - 1));
            let rest = want - copied;
            let chunk = (if page_left < rest { page_left } else { rest }) & CHUNK_MASK;
            // SAFETY: copied <= COPIED_MASK and chunk <= CHUNK_MASK after the masks, and the
            // tail has room for both after the header; bpf_probe_read_user checks the source.
            let status = unsafe {
                bpf_probe_read_user(
                    stack.add(copied & COPIED_MASK).cast(),
                    chunk as u32,
                    at as *const _,
                )
            };
            if status != 0 {
                return Copied {
                    len: copied,
                    faulted: FLAG_USER_COPY_FAULTED,
                };
            }
            copied += chunk;
        }
        Copied {
            len: copied,
            faulted: 0,
        }
    }

    /// The scheduler switches from `prev` (the current thread) to `next`: `prev` leaving is
    /// noted when it is an off-CPU target's, and `next` coming back is sent when it was noted.
    /// Its arguments are `(preempt, prev, next, prev_state)` (Linux 5.18+: the daemon says so
    /// when the load is refused).
    #[btf_tracepoint(function = "sched_switch")]
    pub fn vmscope_switch(ctx: BtfTracePointContext) -> i32 {
        // The clock is read only for a thread wanted: most of the host's switches are
        // nobody's, and cost two lookups each.
        let mut now = 0;
        switch_out(&ctx, &mut now);
        switch_in(&ctx, &mut now);
        0
    }

    /// The time of this switch, read once.
    #[inline(always)]
    fn switch_time(now: &mut u64) -> u64 {
        if *now == 0 {
            // SAFETY: the helper has no preconditions.
            *now = unsafe { bpf_ktime_get_ns() };
        }
        *now
    }

    /// Notes the current thread leaving its CPU in `BLOCKED` (and its stack copy in
    /// `BLOCKED_COPIES`) when an off-CPU session wants its process: what it will have been
    /// waiting in when it comes back.
    #[inline(always)]
    fn switch_out(ctx: &BtfTracePointContext, now: &mut u64) {
        let pid_tgid = bpf_get_current_pid_tgid();
        let (tid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
        if tgid == 0 {
            return;
        }
        let key = TargetKey {
            period_ns: OFF_CPU_PERIOD,
            tgid,
            _pad: 0,
        };
        let (wanted, value, _) = wanted(&key);
        if !wanted {
            return;
        }
        // The tracepoint's arguments, as its BTF declares them.
        let (preempt, prev_state): (u64, u64) = (ctx.arg(0), ctx.arg(3));
        let state = block_state(preempt & 1 != 0, prev_state & 0xffff_ffff);
        // An exiting thread's last switch: it never comes back.
        if state == BLOCK_EXITED {
            return;
        }
        let Some(entry) = BLOCKED_SCRATCH.get_ptr_mut(0) else {
            return;
        };
        // SAFETY: this CPU's slot, valid for the program's run; the switch program does not
        // nest on one CPU.
        let entry = unsafe { &mut *entry };
        entry.since_ns = switch_time(now);
        entry.tgid = tgid;
        entry.state = state;
        entry.flags = 0;
        entry.user_frames = 0;
        if value.flags & WANT_STACKS != 0 {
            let limit = stack_limit();
            // SAFETY: `user` has room for MAX_STACK_FRAMES frames and the size is at most that.
            // With BPF_F_USER_STACK the kernel walks from the task's saved user registers.
            let n = unsafe {
                bpf_get_stack(
                    ctx.as_ptr(),
                    entry.user.as_mut_ptr().cast(),
                    ((limit & FRAME_MASK) * 8) as u32,
                    u64::from(BPF_F_USER_STACK),
                )
            };
            entry.flags = FLAG_STACK;
            if n < 0 {
                entry.flags |= FLAG_USER_STACK_FAILED;
            } else {
                entry.user_frames = ((n as usize / 8) & FRAME_MASK) as u32;
                if entry.user_frames as usize >= limit {
                    entry.flags |= FLAG_USER_TRUNCATED;
                }
            }
        }
        if value.user_copy_bytes > 0 {
            entry.flags |= FLAG_STACK | keep_copy(tid, value.user_copy_bytes);
        }
        // Replaces what is there: the daemon's note for a thread asleep when its session
        // started, or an entry its return never took out (the programs were detached between).
        if BLOCKED.insert(tid, &*entry, 0).is_err() {
            add_off_cpu_count(OFF_CPU_UNFOLLOWED, 1);
        }
    }

    /// Copies the current thread's user registers and the top of its user stack into
    /// `BLOCKED_COPIES`: [`FLAG_USER_COPY`] (and [`FLAG_USER_COPY_FAULTED`]) when kept, 0 when
    /// not (no user state, or no room: counted).
    #[inline(always)]
    fn keep_copy(tid: u32, want: u32) -> u32 {
        let Some(regs) = task_user_regs() else {
            return 0;
        };
        // SAFETY: the CPU number is a valid index or the lookup fails.
        let Some(record) = SCRATCH.get_ptr_mut(unsafe { bpf_get_smp_processor_id() }) else {
            return 0;
        };
        // Assembled at the start of the slot's tail, which has room for a header and the largest
        // copy: a BlockedCopy is the header and at most OFF_CPU_MAX_COPY bytes.
        // SAFETY: this CPU's slot (see SCRATCH), valid for the program's run.
        let header = unsafe { (*record).tail.as_mut_ptr() };
        let want = if want > OFF_CPU_MAX_COPY {
            OFF_CPU_MAX_COPY
        } else {
            want
        };
        let copy = copy_user_stack(header, regs.rsp, want);
        // SAFETY: the tail is 8-aligned and has room for the header.
        unsafe {
            header.cast::<UserCopyHeader>().write(UserCopyHeader {
                ip: regs.rip,
                sp: regs.rsp,
                bp: regs.rbp,
                len: copy.len as u32,
                _pad: 0,
            });
        }
        // SAFETY: the tail holds size_of::<BlockedCopy>() bytes from its start, all written
        // up to the copy's length; the rest is never read.
        let copied = unsafe { &*header.cast::<BlockedCopy>() };
        if BLOCKED_COPIES.insert(tid, copied, 0).is_err() {
            add_off_cpu_count(OFF_CPU_COPIES_FULL, 1);
            return 0;
        }
        FLAG_USER_COPY | copy.faulted
    }

    /// Sends the thread coming back to its CPU (`next`) when it was noted leaving: its time
    /// off the CPU, its kernel stack, and the user stack kept; or counts it as short.
    #[inline(always)]
    fn switch_in(ctx: &BtfTracePointContext, now: &mut u64) {
        // The tracepoint's third argument is the task coming in: a trusted pointer for the
        // helpers below.
        let next: *mut aya_ebpf::bindings::task_struct = ctx.arg(2);
        let base = next.cast::<u8>();
        // SAFETY: the offsets are those of the running kernel's task_struct (read-only data the
        // daemon set at load), inside the struct, and the reads cope with any address. The
        // process's id is read only for a thread noted leaving: most switches are nobody's.
        let tid = unsafe {
            let pid_at = core::ptr::read_volatile(&TASK_PID_OFFSET) as usize;
            bpf_probe_read_kernel(base.add(pid_at).cast::<u32>()).unwrap_or(0)
        };
        if tid == 0 {
            return;
        }
        let Some(entry) = BLOCKED.get_ptr(tid) else {
            return;
        };
        // SAFETY: as above.
        let tgid = unsafe {
            let tgid_at = core::ptr::read_volatile(&TASK_TGID_OFFSET) as usize;
            bpf_probe_read_kernel(base.add(tgid_at).cast::<u32>()).unwrap_or(0)
        };
        // SAFETY: the pointer comes from the map and is valid for this program run.
        let entry = unsafe { &*entry };
        let key = TargetKey {
            period_ns: OFF_CPU_PERIOD,
            tgid,
            _pad: 0,
        };
        let (wanted, value, target_flag) = wanted_back(&key);
        // A thread id now in another process (a thread that exec'd takes its leader's id), or
        // a process no session wants any more.
        if entry.tgid == tgid && wanted {
            let now = switch_time(now);
            let off_ns = now.saturating_sub(entry.since_ns);
            if off_ns < value.min_block_ns {
                count_short(tgid, off_ns);
            } else if !value.for_root()
                && !value.fits(
                    value.max_record_bytes(),
                    EVENTS.query(u64::from(BPF_RB_AVAIL_DATA)),
                    EVENTS.query(u64::from(BPF_RB_RING_SIZE)),
                )
            {
                count(&SHED, &SHED_UNKEYED, &key);
            } else if output_block(next, entry, tid, tgid, now, off_ns, target_flag).is_err() {
                count(&LOST, &LOST_UNKEYED, &key);
            }
        }
        let _ = BLOCKED.remove(tid);
        if entry.flags & FLAG_USER_COPY != 0 {
            let _ = BLOCKED_COPIES.remove(tid);
        }
    }

    /// What the sessions at `key` want of a thread coming back: as [`wanted`], but the
    /// credentials checked are those it left with (it is not the current thread, and cannot
    /// have changed them while off its CPU): a held process sends nothing.
    #[inline(always)]
    fn wanted_back(key: &TargetKey) -> (bool, Wants, u32) {
        // SAFETY: map lookups return pointers into the map that stay valid for this program run.
        let (mut sampled, mut value) = match unsafe { SYSTEM_WIDE.get(key.period_ns) } {
            Some(&wants) => (true, wants),
            None => (false, Wants::default()),
        };
        let mut target_flag = 0;
        // SAFETY: as above.
        if let Some(&target) = unsafe { TARGETS.get(key) }
            && let Some(tracked) = TRACKED.get_ptr(key.tgid)
            // SAFETY: the pointer comes from the map and is valid for this program run.
            && unsafe { (*tracked).guard } != GUARD_HELD
        {
            value = if sampled { value.union(target) } else { target };
            sampled = true;
            target_flag = FLAG_TARGET;
        }
        (sampled, value, target_flag)
    }

    /// Writes the [`EVENT_OFF_CPU`] record of `next`, back after `off_ns` off its CPU: the
    /// event, its kernel stack (where it waited in the kernel), the user stack `entry` kept,
    /// and its stack copy when one was kept.
    #[inline(always)]
    fn output_block(
        next: *mut aya_ebpf::bindings::task_struct,
        entry: &Blocked,
        tid: u32,
        tgid: u32,
        now: u64,
        off_ns: u64,
        target_flag: u32,
    ) -> Result<(), i32> {
        // SAFETY: the helper has no preconditions.
        let cpu = unsafe { bpf_get_smp_processor_id() };
        let Some(record) = SCRATCH.get_ptr_mut(cpu) else {
            return Err(0);
        };
        // SAFETY: this CPU's slot (see SCRATCH), valid for the program's run.
        let record = unsafe { &mut *record };
        let base = record.tail.as_mut_ptr();
        let limit = stack_limit();
        let mut flags = FLAG_KERNEL_MODE
            | FLAG_STACK
            | target_flag
            | (entry.flags & !FLAG_STACK)
            | entry.state << FLAG_BLOCK_STATE_SHIFT;
        // SAFETY: `base` has room for MAX_STACK_FRAMES frames and the size is at most that; the
        // task is trusted (the tracepoint's argument) and sleeping in the scheduler.
        let n =
            unsafe { bpf_get_task_stack(next, base.cast(), ((limit & FRAME_MASK) * 8) as u32, 0) };
        let kernel_frames = if n > 0 {
            (n as usize / 8) & FRAME_MASK
        } else {
            0
        };
        if kernel_frames >= limit {
            flags |= FLAG_KERNEL_TRUNCATED;
        }
        let user_frames = entry.user_frames as usize & FRAME_MASK;
        if user_frames > 0 {
            // SAFETY: kernel_frames <= MAX_STACK_FRAMES, so the tail has room for another
            // MAX_STACK_FRAMES frames after them; the source is the map value's frames, at
            // least user_frames long.
            unsafe {
                probe_read_kernel_raw(
                    base.add(kernel_frames).cast(),
                    (user_frames * 8) as u32,
                    entry.user.as_ptr().cast(),
                );
            }
        }
        let frame_words = (kernel_frames + user_frames) & FRAMES_MASK;
        let mut len = Event::SIZE + 8 * frame_words;
        if entry.flags & FLAG_USER_COPY != 0 {
            match BLOCKED_COPIES.get_ptr(tid) {
                Some(copy) => {
                    // SAFETY: the pointer comes from the map and is valid for this program run;
                    // the tail has room for a header and the largest copy after the frames.
                    let copied = unsafe { (*copy).header.len } as usize & OFF_CPU_COPY_MASK;
                    let bytes = UserCopyHeader::SIZE + copied;
                    // SAFETY: as above.
                    unsafe {
                        probe_read_kernel_raw(
                            base.add(frame_words).cast(),
                            bytes as u32,
                            copy.cast(),
                        );
                    }
                    len += bytes;
                }
                None => flags &= !(FLAG_USER_COPY | FLAG_USER_COPY_FAULTED),
            }
        }
        if entry.flags & BLOCKED_NOTED != 0 {
            flags |= BLOCKED_NOTED;
        }
        record.event = Event {
            kind: EVENT_OFF_CPU,
            cpu,
            tgid,
            tid,
            timestamp_ns: now,
            // The daemon places the leaf by `ip`: the kernel stack's first entry.
            ip: if kernel_frames > 0 {
                // SAFETY: kernel_frames > 0 words were written at base.
                unsafe { *base }
            } else {
                0
            },
            period_ns: off_ns,
            flags,
            kernel_frames: kernel_frames as u16,
            user_frames: user_frames as u16,
            count: 0,
            labels: 0,
        };
        // SAFETY: len <= size_of::<StackRecord>() as every part is masked to the bounds the
        // tail was sized for, and every byte up to len was written above.
        let bytes = unsafe {
            core::slice::from_raw_parts(core::ptr::from_mut(record).cast::<u8>(), len & RECORD_MASK)
        };
        EVENTS.output::<[u8]>(bytes, u64::from(BPF_RB_NO_WAKEUP))
    }

    /// The stack depth the kernel works to (see `CONFIG_MAX_STACK`).
    #[inline(always)]
    fn stack_limit() -> usize {
        match CONFIG.get(CONFIG_MAX_STACK).copied().unwrap_or(0) as usize {
            n if n > 0 && n < MAX_STACK_FRAMES => n,
            _ => MAX_STACK_FRAMES,
        }
    }

    /// Counts a block of `tgid` shorter than the sessions' minimum.
    #[inline(always)]
    fn count_short(tgid: u32, ns: u64) {
        // The switch program does not nest on one CPU, so the per-CPU slot cannot race.
        match SHORT_BLOCKS.get_ptr_mut(tgid) {
            // SAFETY: the pointer comes from the map and is valid for this program run.
            Some(slot) => unsafe {
                (*slot).count += 1;
                (*slot).ns += ns;
            },
            None => {
                if SHORT_BLOCKS
                    .insert(tgid, ShortBlocks { count: 1, ns }, 0)
                    .is_err()
                {
                    add_off_cpu_count(OFF_CPU_SHORT, 1);
                    add_off_cpu_count(OFF_CPU_SHORT_NS, ns);
                }
            }
        }
    }

    /// Adds `n` to this CPU's slot `index` of `OFF_CPU_COUNTS` (the switch program does not
    /// nest on one CPU).
    #[inline(always)]
    fn add_off_cpu_count(index: u32, n: u64) {
        if let Some(slot) = OFF_CPU_COUNTS.get_ptr_mut(index) {
            // SAFETY: this CPU's slot, valid for the program's run.
            unsafe { *slot += n };
        }
    }

    /// A thread is given a name: arguments `(task, comm)`. The renamed task need not be the
    /// current one (`pthread_setname_np` of another thread writes its `/proc` comm), so its ids
    /// are read at the offsets the daemon found in the kernel's BTF.
    #[raw_tracepoint(tracepoint = "task_rename")]
    pub fn vmscope_rename(ctx: RawTracePointContext) -> i32 {
        let task: u64 = ctx.arg(0);
        let comm: u64 = ctx.arg(1);
        let offset = |slot| CONFIG.get(slot).copied().unwrap_or(0) as u64;
        let (pid_at, tgid_at) = (offset(CONFIG_TASK_PID), offset(CONFIG_TASK_TGID));
        if pid_at == 0 || tgid_at == 0 {
            return 0;
        }
        // SAFETY: bpf_probe_read_kernel copes with any address: a wrong one fails.
        let ids = unsafe {
            bpf_probe_read_kernel((task + pid_at) as *const u32)
                .and_then(|tid| Ok((tid, bpf_probe_read_kernel((task + tgid_at) as *const u32)?)))
        };
        let Ok((tid, tgid)) = ids else {
            return 0;
        };
        let system_wide = CONFIG.get(CONFIG_SYSTEM_WIDE).copied().unwrap_or(0) > 0;
        // SAFETY: see vmscope_sample.
        if tgid == 0 || (!system_wide && unsafe { TRACKED.get(tgid).is_none() }) {
            return 0;
        }
        let mut name = [0u8; 16];
        // SAFETY: the helper copes with any address and writes at most the buffer.
        let _ = unsafe {
            aya_ebpf::helpers::bpf_probe_read_kernel_str_bytes(comm as *const u8, &mut name)
        };
        let (ip, period_ns) = Event::comm_words(&name);
        tell_daemon(
            EVENT_RENAME,
            (u64::from(tgid) << 32) | u64::from(tid),
            ip,
            period_ns,
        );
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
        if !system_wide && unsafe { TRACKED.get(tgid).is_none() } {
            return 0;
        }
        // The program's name, set from the exec'd file's name before this tracepoint fires.
        let (ip, period_ns) = Event::comm_words(&bpf_get_current_comm().unwrap_or([0; 16]));
        // An exec that is not seen leaves stale mappings until the next miss forces a re-read;
        // it is counted with the unkeyed losses so that it is not silent.
        tell_daemon(EVENT_EXEC, pid_tgid, ip, period_ns);
        0
    }

    // Fires in do_exit for every exiting thread, before the task is a zombie: its process cannot
    // be reaped, and its pid reused, before this has run. The current task is all we need; the
    // tracepoint's arguments (the task, and on recent kernels whether its whole group is dead)
    // are not read, so that the program attaches on every kernel that has the tracepoint.
    #[raw_tracepoint(tracepoint = "sched_process_exit")]
    pub fn vmscope_exit(_ctx: RawTracePointContext) -> i32 {
        let pid_tgid = bpf_get_current_pid_tgid();
        let tgid = (pid_tgid >> 32) as u32;
        let leader = pid_tgid as u32 == tgid;
        // Any thread's: a thread id is the exiting thread's alone until it is reaped, and a
        // failed delete means it had no counter.
        let _ = THREAD_COUNTERS.remove(pid_tgid as u32);
        // SAFETY: see vmscope_sample.
        let tracked = match unsafe { TRACKED.get(tgid) } {
            Some(entry) => leader || entry.mode == TRACK_ANY_THREAD,
            None => false,
        };
        if tracked {
            // Before anything else: from here on no tick samples the pid for a target session,
            // whoever holds it. Only this program and the daemon change entries, and a failed
            // delete means the entry is gone already.
            let _ = TRACKED.remove(tgid);
        } else {
            // A thread among others, or an untracked process: system-wide sessions still want
            // to know when a process ends, so that its pid's next owner is read afresh.
            let system_wide = CONFIG.get(CONFIG_SYSTEM_WIDE).copied().unwrap_or(0) > 0;
            if !(leader && system_wide) {
                return 0;
            }
        }
        // Lost, the filter is gone all the same; the daemon notices the exit at its next tick.
        tell_daemon(EVENT_EXIT, pid_tgid, 0, 0);
        0
    }

    /// Sends the daemon an event about the current process (no stack), counting it with the
    /// unkeyed losses when the ring buffer is full.
    #[inline(always)]
    fn tell_daemon(kind: u32, pid_tgid: u64, ip: u64, period_ns: u64) {
        let event = Event {
            kind,
            // SAFETY: these helpers have no preconditions.
            cpu: unsafe { bpf_get_smp_processor_id() },
            tgid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            // SAFETY: as above.
            timestamp_ns: unsafe { bpf_ktime_get_ns() },
            ip,
            period_ns,
            flags: 0,
            kernel_frames: 0,
            user_frames: 0,
            count: 0,
            labels: 0,
        };
        if EVENTS
            .output::<Event>(&event, u64::from(BPF_RB_NO_WAKEUP))
            .is_err()
        {
            count_unkeyed();
        }
    }

    /// Counts a sample of `key` in `map` (`LOST` or `SHED`), or in `unkeyed` when the map is
    /// full.
    #[inline(always)]
    fn count(map: &PerCpuHashMap<TargetKey, u64>, unkeyed: &PerCpuArray<u64>, key: &TargetKey) {
        // Perf event programs do not nest on one CPU, so a plain increment of the per-CPU slot
        // cannot race.
        match map.get_ptr_mut(key) {
            // SAFETY: the pointer comes from the map and is valid for this program run.
            Some(slot) => unsafe { *slot += 1 },
            None => {
                if map.insert(key, 1, 0).is_err()
                    && let Some(slot) = unkeyed.get_ptr_mut(0)
                {
                    // SAFETY: as above.
                    unsafe { *slot += 1 };
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

    /// Calls of the functions sessions count (`record --count`), per CPU, by slot.
    #[map]
    static CALL_COUNTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_COUNT_SLOTS, 0);

    /// Counts a call of a function a session counts: a uprobe at its entry, attached for one
    /// process (the kernel installs its breakpoint in that process's memory only, for all its
    /// threads), its slot in the attachment's cookie. An atomic add: a uprobe's program can be
    /// preempted, and another thread on the CPU hit the same slot.
    #[uprobe]
    pub fn vmscope_count(ctx: ProbeContext) -> u32 {
        // SAFETY: the context is the program's own.
        let slot = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
        if let Some(count) = CALL_COUNTS.get_ptr_mut(slot) {
            // SAFETY: the pointer comes from the map, valid and aligned for this run.
            // The bpf target has atomic adds but no compare-and-swap, so core's atomic types
            // offer no fetch_add: the intrinsic, which LLVM emits as BPF_ATOMIC | BPF_ADD.
            unsafe {
                core::intrinsics::atomic_xadd::<
                    u64,
                    u64,
                    { core::intrinsics::AtomicOrdering::Relaxed },
                >(count, 1)
            };
        }
        0
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
