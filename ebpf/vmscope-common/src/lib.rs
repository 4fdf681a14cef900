//! Types shared by the kernel-side sampler (`vmscope-ebpf`) and the daemon (`vmscoped`).
//!
//! Everything here is `#[repr(C)]` with explicit padding so that the byte layout is the same on
//! both sides of the ring buffer and of the BPF maps. The daemon never casts ring-buffer bytes to
//! these types directly: it decodes them with [`Event::from_bytes`], which checks the length.
#![cfg_attr(not(test), no_std)]
#![deny(missing_docs)]

/// Slots of the kernel's per-CPU call counters (`record --count`): one per counted function
/// and process, over every session at once.
pub const MAX_COUNT_SLOTS: u32 = 256;

/// [`Event::kind`] of a timer sample.
pub const EVENT_SAMPLE: u32 = 0;
/// [`Event::kind`] of an `execve` by a tracked process: its mappings were all replaced. It
/// carries the new program's name: see [`Event::exec_comm`].
pub const EVENT_EXEC: u32 = 1;

/// [`Event::kind`] of the exit of a tracked process, sent by the `sched_process_exit` tracepoint
/// when its thread-group leader exits (or, for a process whose leader exited before, any of its
/// threads: see [`TRACK_ANY_THREAD`]). The kernel has already removed the process from
/// `TRACKED` when the daemon reads it, so that nothing forked into its pid afterwards is
/// sampled for its sessions; `tgid` is the process, `tid` the exiting thread. With system-wide
/// sessions running, leader exits of every process are sent too (nothing is removed for those).
pub const EVENT_EXIT: u32 = 2;

/// [`Event::kind`] of a thread of a tracked process (any process's, with system-wide sessions)
/// given a name (`pthread_setname_np`, `prctl(PR_SET_NAME)`, an `execve`): `tid` is the thread
/// renamed, which need not be the one that renamed it, and the new name travels as an exec's
/// does (see [`Event::exec_comm`]). Runtimes name their threads as they start them (HotSpot's
/// `C2 CompilerThread0`, `GC Thread#0`), some of which end before the daemon could read their
/// name from `/proc`.
pub const EVENT_RENAME: u32 = 4;

/// [`Event::kind`] of a thread of a target coming back to a CPU after it was off it (off-CPU
/// profiling): written as the thread is switched back in, when its user stack is still the one
/// it blocked in and its kernel stack says where in the kernel it waited. The record is a
/// sample's: the kernel stack (through the scheduler), then the user stack or its copy, as
/// [`Wants`] asks. [`Event::period_ns`] holds the time it was off the CPU (the time the record
/// stands for, as a sample's period is the CPU time it stands for), [`Event::timestamp_ns`] the
/// time it came back, and [`Event::block_state`] why it had left.
pub const EVENT_OFF_CPU: u32 = 3;

/// The period of the off-CPU channel in the `TARGETS`, `SYSTEM_WIDE`, `LOST` and `SHED` maps: an
/// entry at this "period" asks for a target's (or every process's) off-CPU time, not for
/// samples. No sampling period is 0.
pub const OFF_CPU_PERIOD: u64 = 0;

/// Why a thread left its CPU (the scheduler's `prev_state`), as [`Event::block_state`] carries
/// it: unknown.
pub const BLOCK_UNKNOWN: u32 = 0;
/// [`Event::block_state`]: preempted, or yielded, while runnable (`R`): it waited for a CPU.
pub const BLOCK_PREEMPTED: u32 = 1;
/// [`Event::block_state`]: an interruptible sleep (`S`): a timer, a lock, a futex, a read.
pub const BLOCK_SLEEPING: u32 = 2;
/// [`Event::block_state`]: an uninterruptible sleep (`D`): disk I/O, a page fault's read, a
/// kernel lock.
pub const BLOCK_UNINTERRUPTIBLE: u32 = 3;
/// [`Event::block_state`]: stopped or traced (`T`, `t`): a signal or a debugger.
pub const BLOCK_STOPPED: u32 = 4;
/// [`Event::block_state`]: an idle wait (`I`, `TASK_IDLE`): kernel threads waiting for work.
pub const BLOCK_IDLE: u32 = 5;
/// [`Event::block_state`]: any other state the scheduler reports (parked...).
pub const BLOCK_OTHER: u32 = 6;
/// Not a block: an exiting thread's last switch (`TASK_DEAD`). It never comes back, and is not
/// noted.
pub const BLOCK_EXITED: u32 = 15;

/// The kernel's task state bits, as `include/linux/sched.h` defines them (stable since 2.6).
const TASK_INTERRUPTIBLE: u64 = 0x1;
const TASK_UNINTERRUPTIBLE: u64 = 0x2;
const TASK_STOPPED: u64 = 0x4;
const TASK_TRACED: u64 = 0x8;
const TASK_DEAD: u64 = 0x80;
const TASK_NOLOAD: u64 = 0x400;

/// Why a thread left its CPU, from the `sched_switch` tracepoint's `preempt` and `prev_state`:
/// one of the `BLOCK_*` values. A preempted thread is runnable whatever its state says (it was
/// preempted while setting one); a state of 0 is `TASK_RUNNING`, a thread that yielded.
pub const fn block_state(preempt: bool, prev_state: u64) -> u32 {
    if preempt || prev_state == 0 {
        return BLOCK_PREEMPTED;
    }
    if prev_state & TASK_DEAD != 0 {
        return BLOCK_EXITED;
    }
    if prev_state & (TASK_UNINTERRUPTIBLE | TASK_NOLOAD) == TASK_UNINTERRUPTIBLE | TASK_NOLOAD {
        BLOCK_IDLE
    } else if prev_state & TASK_UNINTERRUPTIBLE != 0 {
        BLOCK_UNINTERRUPTIBLE
    } else if prev_state & TASK_INTERRUPTIBLE != 0 {
        BLOCK_SLEEPING
    } else if prev_state & (TASK_STOPPED | TASK_TRACED) != 0 {
        BLOCK_STOPPED
    } else {
        BLOCK_OTHER
    }
}

/// Value of the `BLOCKED` map, keyed by thread id: a thread of an off-CPU target that left its
/// CPU and has not come back, since when, why, and its user stack as it left (which is still
/// its stack when it comes back). The daemon also writes entries for the targets' threads when
/// a session starts (those asleep then would never be seen leaving: [`BLOCKED_NOTED`], no
/// stack), and reads what is left at a session's stop: threads still off the CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Blocked {
    /// `bpf_ktime_get_ns()` when it left.
    pub since_ns: u64,
    /// Its process.
    pub tgid: u32,
    /// Why: one of the `BLOCK_*` values.
    pub state: u32,
    /// What was taken of its user stack: [`FLAG_STACK`] (frames in `user`),
    /// [`FLAG_USER_STACK_FAILED`], [`FLAG_USER_TRUNCATED`], [`FLAG_USER_COPY`] (a copy in
    /// `BLOCKED_COPIES`), [`FLAG_USER_COPY_FAULTED`]; or [`BLOCKED_NOTED`].
    pub flags: u32,
    /// Frames in `user`.
    pub user_frames: u32,
    /// The user stack by frame pointers, leaf first (the user ip first).
    pub user: [u64; MAX_STACK_FRAMES],
}

impl Default for Blocked {
    fn default() -> Self {
        Blocked {
            since_ns: 0,
            tgid: 0,
            state: 0,
            flags: 0,
            user_frames: 0,
            user: [0; MAX_STACK_FRAMES],
        }
    }
}

/// [`Blocked::flags`] and [`Event::flags`] bit: the daemon noted the thread off its CPU when its
/// session started; it was never seen leaving, and its user stack was not taken.
pub const BLOCKED_NOTED: u32 = 256;

/// Most bytes of user stack kept per thread off its CPU for `--call-graph dwarf` (the copy
/// waits in the kernel until the thread comes back): perf's default copy, less one word so
/// that the program's bound fits its buffer. Sessions asking for more get this much of a
/// block's stack.
pub const OFF_CPU_MAX_COPY: u32 = 8184;

/// Value of the `BLOCKED_COPIES` map, keyed by thread id: the user registers and the top of the
/// user stack of a thread off its CPU, for sessions that unwind copies (`--call-graph dwarf`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockedCopy {
    /// The user registers; `len` bytes of stack follow.
    pub header: UserCopyHeader,
    /// The stack from `header.sp` up.
    pub stack: [u8; OFF_CPU_MAX_COPY as usize + 8],
}

/// Most threads off their CPU whose stack copies the kernel keeps at once (`BLOCKED_COPIES`): a
/// thread beyond is recorded with its frame-pointer stack alone.
pub const MAX_BLOCKED_COPIES: u32 = 4096;

/// Most threads off their CPU the kernel follows at once (the `BLOCKED` map, about 1 KiB a
/// thread, allocated as threads block): the threads of a hundred large JVMs. A thread that
/// leaves its CPU while it is full is not followed, and counted ([`OFF_CPU_UNFOLLOWED`]).
pub const MAX_BLOCKED_THREADS: u32 = 32 * 1024;

/// Value of the `SHORT_BLOCKS` per-CPU map, keyed by process: blocks shorter than every
/// session's minimum ([`Wants::min_block_ns`]), counted in the kernel and not sent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ShortBlocks {
    /// How many.
    pub count: u64,
    /// Their time off the CPU, summed, in nanoseconds.
    pub ns: u64,
}

/// Index in the `OFF_CPU_COUNTS` per-CPU array: threads of off-CPU targets that left their CPU
/// while `BLOCKED` was full, so that their time off it is unknown.
pub const OFF_CPU_UNFOLLOWED: u32 = 0;
/// Index in `OFF_CPU_COUNTS`: short blocks (see [`ShortBlocks`]) counted while `SHORT_BLOCKS`
/// was full.
pub const OFF_CPU_SHORT: u32 = 1;
/// Index in `OFF_CPU_COUNTS`: the nanoseconds of those short blocks.
pub const OFF_CPU_SHORT_NS: u32 = 2;
/// Index in `OFF_CPU_COUNTS`: threads that left their CPU while `BLOCKED_COPIES` was full, whose
/// blocks have their frame-pointer stack alone.
pub const OFF_CPU_COPIES_FULL: u32 = 3;
/// Slots of the `OFF_CPU_COUNTS` array.
pub const OFF_CPU_COUNTS_LEN: u32 = 4;

/// Value of a `TRACKED` entry: the process is removed from `TRACKED` (so no longer sampled for
/// its target sessions) when its thread-group leader exits. Its pid cannot be given to another
/// process before the leader is reaped, and the leader's exit comes before that.
pub const TRACK_LEADER: u8 = 1;
/// Value of a `TRACKED` entry: the leader exited already (`pthread_exit` in `main`) while other
/// threads run on, so the process is removed when any of its threads exits; the daemon arms it
/// again while threads remain. The last thread's exit comes before the pid can be reused.
pub const TRACK_ANY_THREAD: u8 = 2;

/// [`Tracked::guard`]: samples are kept whoever the process runs as (only root's sessions hold
/// it: root may profile anything).
pub const GUARD_OPEN: u8 = 0;
/// [`Tracked::guard`]: samples are kept only while the sampled thread's credentials are
/// [`Tracked::creds`], those the daemon checked the process's right to be profiled against. A
/// setuid, setgid or file-capability `execve`, or any change of ids, stops its samples in the
/// kernel at once, whether or not the daemon ever hears of it.
pub const GUARD_CREDS: u8 = 1;
/// [`Tracked::guard`]: nothing is sampled for target sessions until the daemon has checked the
/// process (a new entry, or one whose credentials could not be read).
pub const GUARD_HELD: u8 = 2;

/// A thread's credentials as the kernel's `struct cred` holds them (`kuid_t`/`kgid_t` values,
/// as `/proc/PID/status` shows them to a reader in the initial user namespace).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Creds {
    /// `uid, gid, suid, sgid, euid, egid, fsuid, fsgid`, in `struct cred`'s order: the kernel
    /// program reads them as one block.
    pub ids: [u32; 8],
    /// `kernel_cap_t cap_permitted`: 64 bits (two `__u32` words before Linux 6.3, low first),
    /// `CapPrm:` in `/proc/PID/status`.
    pub cap_permitted: u64,
}

impl Creds {
    /// Credentials with these real/effective/saved/filesystem uids and gids and permitted
    /// capabilities.
    pub const fn new(uids: [u32; 4], gids: [u32; 4], cap_permitted: u64) -> Creds {
        let [uid, euid, suid, fsuid] = uids;
        let [gid, egid, sgid, fsgid] = gids;
        Creds {
            ids: [uid, gid, suid, sgid, euid, egid, fsuid, fsgid],
            cap_permitted,
        }
    }
}

/// Value of the `TRACKED` map: a live target process, and what its samples need to be kept
/// for target sessions.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tracked {
    /// [`TRACK_LEADER`] or [`TRACK_ANY_THREAD`]: whose exit removes the entry.
    pub mode: u8,
    /// [`GUARD_OPEN`], [`GUARD_CREDS`] or [`GUARD_HELD`].
    pub guard: u8,
    /// Explicit padding; always 0.
    pub _pad: [u8; 6],
    /// With [`GUARD_CREDS`], the credentials a sampled thread must have.
    pub creds: Creds,
}

/// Length of a task's command name (`comm`) in the kernel, NUL included.
pub const COMM_LEN: usize = 16;

/// [`Event::flags`] bit: the sample interrupted kernel code (`regs.cs & 3 == 0`).
pub const FLAG_KERNEL_MODE: u32 = 1;
/// [`Event::flags`] bit: call stacks were asked for and follow the event (see
/// [`Event::kernel_frames`]); without it the sample is its instruction pointer alone.
pub const FLAG_STACK: u32 = 2;
/// [`Event::flags`] bit: the kernel stack filled [`MAX_STACK_FRAMES`] (or the depth limit) and
/// may have been cut.
pub const FLAG_KERNEL_TRUNCATED: u32 = 4;
/// [`Event::flags`] bit: the user stack filled [`MAX_STACK_FRAMES`] (or the depth limit) and may
/// have been cut.
pub const FLAG_USER_TRUNCATED: u32 = 8;
/// [`Event::flags`] bit: the kernel could not walk the user stack (`bpf_get_stack` failed); the
/// sample has its instruction pointer only.
pub const FLAG_USER_STACK_FAILED: u32 = 16;
/// [`Event::flags`] bit: a [`UserCopyHeader`] (the user registers) and the top of the user stack
/// follow the frames (`--call-graph dwarf`): see [`Event::user_copy_from_bytes`].
pub const FLAG_USER_COPY: u32 = 32;
/// [`Event::flags`] bit: the copy of the user stack stopped at an address it could not read
/// (the end of the stack mapping, a guard page) before it had the bytes asked for; the bytes
/// before that address are all there.
pub const FLAG_USER_COPY_FAULTED: u32 = 64;

/// Where [`Event::flags`] carries an off-CPU event's `BLOCK_*` state: bits 16 to 19.
pub const FLAG_BLOCK_STATE_SHIFT: u32 = 16;
/// Mask of the block state in [`Event::flags`].
pub const FLAG_BLOCK_STATE_MASK: u32 = 0xf << FLAG_BLOCK_STATE_SHIFT;

/// [`Event::flags`] bit: the kernel kept the sample for the target sessions of its process (its
/// `TARGETS` entry at this period and its `TRACKED` entry let it through). A sample without it
/// was taken for system-wide sessions only, and no target session may count it.
pub const FLAG_TARGET: u32 = 128;

/// [`Event::flags`] bit: [`Event::count`] holds the sampled thread's send counter, read from
/// the address its VM published ([`ThreadCounter`]).
pub const FLAG_COUNT: u32 = 512;

/// [`Event::flags`] bit: [`Event::labels`] holds the id of the sampled thread's current label
/// set, read from the word its process published ([`ThreadCounter::labels`]); 0 is none.
pub const FLAG_LABELS: u32 = 1024;

/// Value of the `THREAD_COUNTERS` map, keyed by thread id: the words a thread of a VM keeps in
/// its own memory for the sampler to read with each of its samples: its send counter (a `u64`
/// it only ever increments) and the id of its current label set (a `u64` it stores as its
/// labels change). The daemon writes an entry for each thread its process published either
/// for; the exit program removes it as the thread exits. The reads are of the sampled thread's
/// own memory, and only while the thread is in `tgid`: a thread id reused by another process
/// reads nothing. Two 8-byte reads at most per sample, whatever the labels hold: the sets
/// themselves are published once each to the daemon, never read by the kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ThreadCounter {
    /// Address of the send counter in the thread's process; 0: none.
    pub address: u64,
    /// Address of the word holding the id of the thread's current label set; 0: none.
    pub labels: u64,
    /// The process that published it.
    pub tgid: u32,
    /// Explicit padding; always 0.
    pub _pad: u32,
}

/// Most threads whose send counters the kernel reads at once (`THREAD_COUNTERS`, allocated as
/// they are added).
pub const MAX_THREAD_COUNTERS: u32 = 64 * 1024;

/// Most frames of each stack (kernel, user) a sample carries: the default of
/// `kernel.perf_event_max_stack`, which bounds what the kernel walks anyway.
pub const MAX_STACK_FRAMES: usize = 127;

/// Bit of [`Wants::flags`]: some session there wants call stacks walked by frame pointers (the
/// kernel stack, and the user stack by `bpf_get_stack`).
pub const WANT_STACKS: u32 = 1;

/// Bit of [`Wants::flags`]: a session of root's wants these samples. Samples that only other
/// users' sessions want are written to the ring buffer only while it holds less than
/// [`Wants::shared_ring_bytes`]; the rest of the ring is root's reserve, so that no user can
/// fill it and cost root its samples. Those not written are counted in `SHED`, never in
/// root's sessions.
pub const WANT_ROOT: u32 = 2;

/// Most bytes of user stack a sample may copy: perf's limit for `--call-graph dwarf,SIZE`
/// (a record must fit in perf's 16-bit size field, hence 65528 rather than 65536).
pub const MAX_USER_COPY: u32 = 65528;

/// Bytes of user stack copied when `--call-graph dwarf` names no size: perf's default.
pub const DEFAULT_USER_COPY: u32 = 8192;

/// Value of the `TARGETS` and `SYSTEM_WIDE` maps: present means sampled; the fields say what
/// each sample carries beyond its instruction pointer, the union of what the sessions there
/// asked for.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Wants {
    /// [`WANT_STACKS`] and [`WANT_ROOT`] bits.
    pub flags: u32,
    /// Bytes of user stack to copy from the stack pointer up, with the user registers
    /// (`--call-graph dwarf`); 0 for none. A multiple of 8, at most [`MAX_USER_COPY`]. A copy
    /// comes with the kernel stack too, as [`WANT_STACKS`] does.
    pub user_copy_bytes: u32,
    /// Off-CPU entries ([`OFF_CPU_PERIOD`]): blocks shorter than this are counted in the
    /// kernel and not sent (`--min-block`); the least any session there asked for. 0 for
    /// sampling entries.
    pub min_block_ns: u64,
}

impl Wants {
    /// Whether samples carry a record beyond the bare [`Event`]: the kernel stack at least.
    pub const fn any_stack(&self) -> bool {
        self.flags & WANT_STACKS != 0 || self.user_copy_bytes > 0
    }

    /// Whether a session of root's wants these samples ([`WANT_ROOT`]).
    pub const fn for_root(&self) -> bool {
        self.flags & WANT_ROOT != 0
    }

    /// The most bytes a sample's record takes with what these sessions want: the event, both
    /// stacks at their deepest and the user copy. The kernel program tests the room left in
    /// the ring with it before it spends time on the stacks.
    pub const fn max_record_bytes(&self) -> u64 {
        if !self.any_stack() {
            return Event::SIZE as u64;
        }
        let copy = if self.user_copy_bytes > 0 {
            UserCopyHeader::SIZE as u64 + self.user_copy_bytes as u64
        } else {
            0
        };
        Event::SIZE as u64 + 2 * 8 * MAX_STACK_FRAMES as u64 + copy
    }

    /// Bytes of a ring of `ring_bytes` that samples no session of root's wants may fill: the
    /// first half. The other half is root's reserve.
    pub const fn shared_ring_bytes(ring_bytes: u64) -> u64 {
        ring_bytes / 2
    }

    /// Whether a sample with these wants, of at most `record_bytes`, may go into a ring of
    /// `ring_bytes` that holds `held_bytes` unread: always for root's, else only while it
    /// stays within [`Wants::shared_ring_bytes`].
    pub const fn fits(&self, record_bytes: u64, held_bytes: u64, ring_bytes: u64) -> bool {
        self.for_root() || held_bytes + record_bytes <= Wants::shared_ring_bytes(ring_bytes)
    }

    /// What two sessions on the same samples want together: the shorter of their minimum
    /// blocks, since a block either wants is sent.
    pub const fn union(self, other: Wants) -> Wants {
        Wants {
            flags: self.flags | other.flags,
            user_copy_bytes: if self.user_copy_bytes > other.user_copy_bytes {
                self.user_copy_bytes
            } else {
                other.user_copy_bytes
            },
            min_block_ns: if self.min_block_ns < other.min_block_ns {
                self.min_block_ns
            } else {
                other.min_block_ns
            },
        }
    }
}

/// The user registers of a sample with [`FLAG_USER_COPY`], between its frames and its copy of
/// the user stack: the registers a DWARF unwinder starts from.
///
/// Taken from the interrupted registers when the tick landed in user code, else from the task's
/// saved user registers (`bpf_task_pt_regs`, what the task will return to). Followed by `len`
/// bytes of stack from `sp` up, with no padding after them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserCopyHeader {
    /// User instruction pointer (`regs->ip`).
    pub ip: u64,
    /// User stack pointer (`regs->sp`): the address of the first copied byte.
    pub sp: u64,
    /// User frame pointer (`regs->bp`), for code that keeps one.
    pub bp: u64,
    /// Bytes of stack copied, at most [`MAX_USER_COPY`].
    pub len: u32,
    /// Explicit padding; always 0.
    pub _pad: u32,
}

/// A record whose user copy is cut short or longer than [`MAX_USER_COPY`]: a build mismatch
/// between daemon and program, never trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MalformedCopy;

impl UserCopyHeader {
    /// Size of an encoded header in bytes.
    pub const SIZE: usize = core::mem::size_of::<UserCopyHeader>();

    /// Encodes the header into its ring-buffer bytes (used by tests).
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        // SAFETY: repr(C) without implicit padding, so every byte is initialised.
        unsafe { core::mem::transmute::<UserCopyHeader, [u8; Self::SIZE]>(*self) }
    }
}

/// Size of the BPF ring buffer in bytes (a power of two and a multiple of the page size).
///
/// 8 MiB holds about 170,000 events: a second of 1400 Hz sampling on 120 busy CPUs, which leaves
/// the daemon ample slack before anything is lost.
pub const RING_BUFFER_BYTES: u32 = 8 << 20;

/// Capacity of the target filter map (distinct `(period, tgid)` pairs across all sessions).
pub const MAX_TARGETS: u32 = 16 * 1024;

/// Capacity of the per-CPU lost-sample counters keyed by [`TargetKey`].
pub const MAX_LOST_KEYS: u32 = 16 * 1024;

/// Index of the number of system-wide sessions in the `CONFIG` array.
pub const CONFIG_SYSTEM_WIDE: u32 = 0;
/// Index of the stack depth limit in the `CONFIG` array: `kernel.perf_event_max_stack`, capped
/// at [`MAX_STACK_FRAMES`]. A stack that reaches it is marked truncated.
pub const CONFIG_MAX_STACK: u32 = 1;
/// Index in the `CONFIG` array of the offset of `real_cred` in `struct task_struct`, from the
/// running kernel's BTF; 0 (unknown) makes every [`GUARD_CREDS`] check fail.
pub const CONFIG_TASK_CRED: u32 = 2;
/// Index in the `CONFIG` array of the offset of `uid` in `struct cred`, where [`Creds::ids`]
/// start; 0 (unknown) makes every [`GUARD_CREDS`] check fail.
pub const CONFIG_CRED_IDS: u32 = 3;
/// Index in the `CONFIG` array of the offset of `cap_permitted` in `struct cred`; 0 (unknown)
/// makes every [`GUARD_CREDS`] check fail.
pub const CONFIG_CRED_CAPS: u32 = 4;
/// Index in the `CONFIG` array of the offset of `pid` (the thread id) in `struct task_struct`:
/// the switch program reads the thread coming back to its CPU, which is not the current one.
pub const CONFIG_TASK_PID: u32 = 5;
/// Index in the `CONFIG` array of the offset of `tgid` in `struct task_struct`.
pub const CONFIG_TASK_TGID: u32 = 6;
/// Number of slots in the `CONFIG` array.
pub const CONFIG_LEN: u32 = 8;

/// One record in the ring buffer, written by the kernel and read by the daemon.
///
/// 64 bytes, no implicit padding. A sample with [`FLAG_STACK`] is followed in the same record by
/// [`Event::kernel_frames`] kernel addresses then [`Event::user_frames`] user addresses (u64
/// each, leaf first): see [`Event::frames_from_bytes`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// [`EVENT_SAMPLE`], [`EVENT_OFF_CPU`], [`EVENT_EXEC`], [`EVENT_EXIT`] or
    /// [`EVENT_RENAME`].
    pub kind: u32,
    /// CPU the event was taken on (`bpf_get_smp_processor_id`).
    pub cpu: u32,
    /// Process id (thread group id) of the interrupted task.
    pub tgid: u32,
    /// Thread id of the interrupted task.
    pub tid: u32,
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC, the clock that jitdump timestamps use too.
    pub timestamp_ns: u64,
    /// Instruction pointer (`regs.rip`). Exec events carry the first half of the new `comm`
    /// here instead (see [`Event::exec_comm`]).
    pub ip: u64,
    /// Sampling period of the perf event that fired, in nanoseconds. The kernel turns a
    /// cpu-clock frequency into the fixed period `NSEC_PER_SEC / freq`, so this names the
    /// frequency group, and thereby the sessions, a sample belongs to. Off-CPU events carry the
    /// time the thread was off the CPU here; exec events the second half of the new `comm`.
    pub period_ns: u64,
    /// [`FLAG_KERNEL_MODE`], [`FLAG_STACK`] and the stack flags.
    pub flags: u32,
    /// Kernel frames after the event (0 unless the tick landed in the kernel).
    pub kernel_frames: u16,
    /// User frames after the kernel frames.
    pub user_frames: u16,
    /// With [`FLAG_COUNT`], the sampled thread's own send counter as the sample read it (see
    /// [`ThreadCounter`]): the daemon counts the sends between two samples of the thread.
    pub count: u64,
    /// With [`FLAG_LABELS`], the id of the sampled thread's label set at the sample's instant
    /// (0: no labels set), as its process published the set.
    pub labels: u64,
}

impl Event {
    /// Size of an encoded event in bytes.
    pub const SIZE: usize = core::mem::size_of::<Event>();

    /// Decodes an event from ring-buffer bytes, or `None` if `bytes` is too short.
    pub fn from_bytes(bytes: &[u8]) -> Option<Event> {
        if bytes.len() < Self::SIZE {
            return None;
        }
        // SAFETY: the length was checked above, Event is plain old data with no invalid bit
        // patterns, and read_unaligned copes with any alignment of the ring-buffer slice.
        Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<Event>()) })
    }

    /// Encodes the event into its ring-buffer bytes (used by tests and benchmarks).
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        // SAFETY: Event is repr(C) without implicit padding, so every byte is initialised.
        unsafe { core::mem::transmute::<Event, [u8; Self::SIZE]>(*self) }
    }

    /// Size of the record of this event up to the end of its frames; a user copy, if any,
    /// follows.
    pub fn record_size(&self) -> usize {
        Self::SIZE + 8 * (usize::from(self.kernel_frames) + usize::from(self.user_frames))
    }

    /// The user registers and copied stack after the frames of a record with
    /// [`FLAG_USER_COPY`]: `Ok(None)` without the flag, [`MalformedCopy`] if the record is
    /// shorter than its header and `len` say, or `len` exceeds [`MAX_USER_COPY`]. Bytes after
    /// the copy (none from the kernel) are ignored.
    pub fn user_copy_from_bytes<'a>(
        &self,
        record: &'a [u8],
    ) -> Result<Option<(UserCopyHeader, &'a [u8])>, MalformedCopy> {
        if self.flags & FLAG_USER_COPY == 0 {
            return Ok(None);
        }
        let start = self.record_size();
        let Some(header) = record.get(start..start + UserCopyHeader::SIZE) else {
            return Err(MalformedCopy);
        };
        // SAFETY: the slice is exactly UserCopyHeader::SIZE bytes, the type is plain old data
        // with no invalid bit patterns, and read_unaligned copes with any alignment.
        let header = unsafe { core::ptr::read_unaligned(header.as_ptr().cast::<UserCopyHeader>()) };
        if header.len > MAX_USER_COPY {
            return Err(MalformedCopy);
        }
        let stack_start = start + UserCopyHeader::SIZE;
        match record.get(stack_start..stack_start + header.len as usize) {
            Some(stack) => Ok(Some((header, stack))),
            None => Err(MalformedCopy),
        }
    }

    /// The frames that follow an event in its record, kernel frames then user frames, each leaf
    /// first; `None` if the record is shorter than its counts say or a count exceeds
    /// [`MAX_STACK_FRAMES`].
    pub fn frames_from_bytes<'a>(
        &self,
        record: &'a [u8],
    ) -> Option<impl ExactSizeIterator<Item = u64> + 'a> {
        let (k, u) = (
            usize::from(self.kernel_frames),
            usize::from(self.user_frames),
        );
        if k > MAX_STACK_FRAMES || u > MAX_STACK_FRAMES || record.len() < self.record_size() {
            return None;
        }
        Some(
            record[Self::SIZE..self.record_size()]
                .chunks_exact(8)
                .map(|w| u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]])),
        )
    }

    /// Whether the sample interrupted kernel code.
    pub fn is_kernel(&self) -> bool {
        self.flags & FLAG_KERNEL_MODE != 0
    }

    /// An off-CPU event's reason for leaving its CPU: one of the `BLOCK_*` values.
    pub const fn block_state(&self) -> u32 {
        (self.flags & FLAG_BLOCK_STATE_MASK) >> FLAG_BLOCK_STATE_SHIFT
    }

    /// An exec event's new command name: the kernel sets it from the exec'd file's name before
    /// the event fires, so it names the program even when the process exits before the daemon
    /// can read `/proc` (`sh -c 'exit 7'` lives a millisecond). It travels in `ip` and
    /// `period_ns`, which exec events do not use, so that every event keeps one size.
    pub fn exec_comm(&self) -> [u8; COMM_LEN] {
        let (a, b) = (self.ip.to_ne_bytes(), self.period_ns.to_ne_bytes());
        let mut comm = [0; COMM_LEN];
        let mut i = 0;
        while i < 8 {
            comm[i] = a[i];
            comm[i + 8] = b[i];
            i += 1;
        }
        comm
    }

    /// The `(ip, period_ns)` words that carry `comm` in an exec event.
    pub const fn comm_words(comm: &[u8; COMM_LEN]) -> (u64, u64) {
        let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
        let mut i = 0;
        while i < 8 {
            a[i] = comm[i];
            b[i] = comm[i + 8];
            i += 1;
        }
        (u64::from_ne_bytes(a), u64::from_ne_bytes(b))
    }
}

/// Key of the target filter and of the lost-sample counters: a process at a sampling period.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TargetKey {
    /// Sampling period in nanoseconds, see [`Event::period_ns`].
    pub period_ns: u64,
    /// Process id (thread group id).
    pub tgid: u32,
    /// Explicit padding; always 0.
    pub _pad: u32,
}

#[cfg(feature = "user")]
// SAFETY: repr(C), no padding, any bit pattern is valid.
unsafe impl aya::Pod for TargetKey {}

#[cfg(feature = "user")]
// SAFETY: repr(C), no padding, any bit pattern is valid.
unsafe impl aya::Pod for Event {}

#[cfg(feature = "user")]
// SAFETY: repr(C), no padding, any bit pattern is valid.
unsafe impl aya::Pod for Wants {}

#[cfg(feature = "user")]
// SAFETY: repr(C), explicit padding, any bit pattern is valid.
unsafe impl aya::Pod for Tracked {}

#[cfg(feature = "user")]
// SAFETY: repr(C), no padding, any bit pattern is valid.
unsafe impl aya::Pod for Blocked {}

#[cfg(feature = "user")]
// SAFETY: repr(C), no padding, any bit pattern is valid.
unsafe impl aya::Pod for BlockedCopy {}

#[cfg(feature = "user")]
// SAFETY: repr(C), no padding, any bit pattern is valid.
unsafe impl aya::Pod for ShortBlocks {}

#[cfg(feature = "user")]
// SAFETY: repr(C), explicit padding, any bit pattern is valid.
unsafe impl aya::Pod for ThreadCounter {}

const _: () = assert!(Event::SIZE == 64);
const _: () = assert!(core::mem::size_of::<ThreadCounter>() == 24);
const _: () = assert!(core::mem::size_of::<TargetKey>() == 16);
const _: () = assert!(UserCopyHeader::SIZE == 32);
const _: () = assert!(core::mem::size_of::<Wants>() == 16);
const _: () = assert!(core::mem::size_of::<Blocked>() == 24 + 8 * MAX_STACK_FRAMES);
const _: () = assert!(core::mem::size_of::<BlockedCopy>() == 32 + OFF_CPU_MAX_COPY as usize + 8);
const _: () = assert!(BLOCK_EXITED << FLAG_BLOCK_STATE_SHIFT & !FLAG_BLOCK_STATE_MASK == 0);
const _: () = assert!(core::mem::size_of::<Creds>() == 40);
const _: () = assert!(core::mem::size_of::<Tracked>() == 48);
const _: () = assert!(MAX_USER_COPY.is_multiple_of(8) && DEFAULT_USER_COPY.is_multiple_of(8));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_round_trips_through_bytes() {
        let e = Event {
            kind: EVENT_SAMPLE,
            cpu: 3,
            tgid: 42,
            tid: 43,
            timestamp_ns: 123_456_789,
            ip: 0xffff_ffff_8100_0000,
            period_ns: 714_285,
            flags: FLAG_KERNEL_MODE | FLAG_COUNT | FLAG_LABELS,
            kernel_frames: 0,
            user_frames: 0,
            count: 1_234_567,
            labels: 0x1234,
        };
        let bytes = e.to_bytes();
        assert_eq!(Event::from_bytes(&bytes), Some(e));
        assert!(Event::from_bytes(&bytes).unwrap().is_kernel());
    }

    #[test]
    fn exec_events_carry_the_whole_comm() {
        let comm = *b"a-long-name-xyz\0";
        let (ip, period_ns) = Event::comm_words(&comm);
        let e = Event {
            kind: EVENT_EXEC,
            ip,
            period_ns,
            ..Event::default()
        };
        let decoded = Event::from_bytes(&e.to_bytes()).unwrap();
        assert_eq!(decoded.exec_comm(), comm);
    }

    #[test]
    fn stacks_follow_the_event_and_short_records_are_refused() {
        let e = Event {
            flags: FLAG_STACK,
            kernel_frames: 1,
            user_frames: 2,
            ..Event::default()
        };
        let mut record = e.to_bytes().to_vec();
        for frame in [0xffff_ffff_8100_0000u64, 0x40_1000, 0x40_2000] {
            record.extend(frame.to_ne_bytes());
        }
        let frames: Vec<u64> = e.frames_from_bytes(&record).unwrap().collect();
        assert_eq!(frames, [0xffff_ffff_8100_0000, 0x40_1000, 0x40_2000]);
        assert!(e.frames_from_bytes(&record[..record.len() - 1]).is_none());
        let huge = Event {
            user_frames: MAX_STACK_FRAMES as u16 + 1,
            ..e
        };
        assert!(huge.frames_from_bytes(&[0; 4096]).is_none());
    }

    /// A record with `frames` user frames and a copy header saying `len`, followed by
    /// `stack` (which may be shorter or longer than `len`).
    fn copy_record(frames: u16, len: u32, stack: &[u8]) -> (Event, Vec<u8>) {
        let e = Event {
            flags: FLAG_STACK | FLAG_USER_COPY,
            user_frames: frames,
            ..Event::default()
        };
        let mut record = e.to_bytes().to_vec();
        for i in 0..frames {
            record.extend((0x40_1000 + u64::from(i)).to_ne_bytes());
        }
        let header = UserCopyHeader {
            ip: 0x40_1234,
            sp: 0x7ffd_0000_1000,
            bp: 0x7ffd_0000_1100,
            len,
            _pad: 0,
        };
        record.extend(header.to_bytes());
        record.extend(stack);
        (e, record)
    }

    #[test]
    fn user_copies_follow_the_frames() {
        let stack: Vec<u8> = (0..24).collect();
        let (e, record) = copy_record(2, 24, &stack);
        let (header, bytes) = e.user_copy_from_bytes(&record).unwrap().unwrap();
        assert_eq!(
            (header.ip, header.sp, header.len),
            (0x40_1234, 0x7ffd_0000_1000, 24)
        );
        assert_eq!(bytes, &stack[..]);
        // The frames are still read as before.
        assert_eq!(e.frames_from_bytes(&record).unwrap().len(), 2);
        // Without the flag there is no copy, whatever follows.
        let plain = Event {
            flags: FLAG_STACK,
            ..e
        };
        assert_eq!(plain.user_copy_from_bytes(&record), Ok(None));
    }

    #[test]
    fn user_copies_that_lie_about_their_length_are_refused() {
        let (e, record) = copy_record(1, 16, &[7; 8]);
        assert_eq!(
            e.user_copy_from_bytes(&record),
            Err(MalformedCopy),
            "8 bytes short"
        );
        let (e, record) = copy_record(0, MAX_USER_COPY + 8, &vec![0; 70_000]);
        assert_eq!(
            e.user_copy_from_bytes(&record),
            Err(MalformedCopy),
            "over the limit"
        );
        let (e, record) = copy_record(3, 0, &[]);
        assert_eq!(
            e.user_copy_from_bytes(&record[..record.len() - 1]),
            Err(MalformedCopy),
            "header cut"
        );
        let (header, bytes) = e.user_copy_from_bytes(&record).unwrap().unwrap();
        assert_eq!((header.len, bytes.len()), (0, 0), "an empty copy is fine");
        let (e, record) = copy_record(0, MAX_USER_COPY, &vec![1; MAX_USER_COPY as usize]);
        assert_eq!(
            e.user_copy_from_bytes(&record).unwrap().unwrap().1.len(),
            MAX_USER_COPY as usize
        );
    }

    #[test]
    fn wants_unite_to_the_most_either_asks_for() {
        let fp = Wants {
            flags: WANT_STACKS,
            ..Wants::default()
        };
        let dwarf = Wants {
            user_copy_bytes: 8192,
            ..Wants::default()
        };
        assert_eq!(
            fp.union(dwarf),
            Wants {
                flags: WANT_STACKS,
                user_copy_bytes: 8192,
                min_block_ns: 0,
            }
        );
        let off_cpu = |min_block_ns| Wants {
            flags: WANT_STACKS,
            min_block_ns,
            ..Wants::default()
        };
        assert_eq!(
            off_cpu(1_000_000).union(off_cpu(5_000)).min_block_ns,
            5_000,
            "a block either session wants is sent"
        );
        assert!(fp.any_stack() && dwarf.any_stack() && !Wants::default().any_stack());
    }

    #[test]
    fn samples_no_root_session_wants_stay_out_of_roots_half_of_the_ring() {
        const RING: u64 = 1 << 20;
        let users = Wants {
            user_copy_bytes: MAX_USER_COPY,
            ..Wants::default()
        };
        let roots = Wants {
            flags: WANT_ROOT,
            ..users
        };
        let big = users.max_record_bytes();
        // The largest record the program writes: event, 2 x 127 frames, header, copy.
        assert_eq!(big, 64 + 2032 + 32 + 65528);
        assert_eq!(Wants::default().max_record_bytes(), 64);
        assert_eq!(
            Wants {
                flags: WANT_STACKS,
                ..Wants::default()
            }
            .max_record_bytes(),
            64 + 2032
        );
        assert!(users.fits(big, RING / 2 - big, RING), "just up to half");
        assert!(
            !users.fits(big, RING / 2 - big + 1, RING),
            "a byte past half"
        );
        assert!(!Wants::default().fits(64, RING / 2, RING));
        assert!(roots.fits(big, RING - big, RING), "root's may use it all");
        // A union with root's sessions is root's.
        assert!(users.union(roots).for_root() && roots.union(users).for_root());
    }

    /// The scheduler's states, as `/proc/PID/stat` letters them, each in its class; a
    /// preempted thread is runnable whatever its state word says.
    #[test]
    fn block_states_follow_the_scheduler_s_prev_state() {
        assert_eq!(block_state(false, 0), BLOCK_PREEMPTED, "R: yielded");
        assert_eq!(
            block_state(true, 0x1),
            BLOCK_PREEMPTED,
            "preempted mid-sleep"
        );
        assert_eq!(block_state(false, 0x1), BLOCK_SLEEPING, "S");
        assert_eq!(block_state(false, 0x2), BLOCK_UNINTERRUPTIBLE, "D");
        assert_eq!(
            block_state(false, 0x102),
            BLOCK_UNINTERRUPTIBLE,
            "TASK_KILLABLE"
        );
        assert_eq!(block_state(false, 0x402), BLOCK_IDLE, "TASK_IDLE");
        assert_eq!(block_state(false, 0x4), BLOCK_STOPPED, "T");
        assert_eq!(block_state(false, 0x8), BLOCK_STOPPED, "t");
        assert_eq!(block_state(false, 0x40), BLOCK_OTHER, "parked");
        assert_eq!(block_state(false, 0x80), BLOCK_EXITED, "its last switch");
        let e = Event {
            kind: EVENT_OFF_CPU,
            flags: FLAG_KERNEL_MODE | BLOCK_UNINTERRUPTIBLE << FLAG_BLOCK_STATE_SHIFT,
            ..Event::default()
        };
        assert_eq!(e.block_state(), BLOCK_UNINTERRUPTIBLE);
        assert!(e.is_kernel());
    }

    #[test]
    fn short_input_is_refused() {
        assert_eq!(Event::from_bytes(&[0u8; Event::SIZE - 1]), None);
        assert_eq!(Event::from_bytes(&[]), None);
    }
}
