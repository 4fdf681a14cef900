//! The daemon's door to the operating system outside BPF: procfs and sysctl reads, clocks,
//! resource limits, and the few calls that act in other processes' file systems (`openat2` in
//! a root, per-thread filesystem credentials, pidfds, Unix sockets by descriptor).
//!
//! Everything that touches `/proc` or `/sys` on behalf of the rest of the daemon goes through
//! here, so that the parsers stay pure and the callers stay testable. Reads are bounded: a
//! hostile or broken process cannot make the daemon swallow an unbounded file.

use std::{
    ffi::CString,
    fs::File,
    io::{self, Read},
    os::{
        fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
        unix::{ffi::OsStrExt, fs::MetadataExt},
    },
    path::{Path, PathBuf},
};

/// Largest procfs file the daemon reads (a /proc/PID/maps of a process with ~100k mappings).
pub const MAX_PROC_FILE_BYTES: u64 = 16 << 20;

/// `/proc/sys/kernel/perf_event_max_sample_rate`: the highest sampling frequency the kernel
/// accepts, which it may lower by itself when perf interrupts take too long.
pub const MAX_SAMPLE_RATE_SYSCTL: &str = "/proc/sys/kernel/perf_event_max_sample_rate";

/// What [`read_bounded`] asks for in its first read.
const READ_FIRST_BYTES: usize = 4096;

/// Reads a whole (small) file, refusing anything larger than `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    // procfs files say they are empty: from an empty vector, read_to_end would probe with 32
    // bytes and grow from there, six reads for a 300-byte /proc/PID/stat. A page takes most
    // of them in one read.
    let mut buf = Vec::with_capacity(
        usize::try_from(limit.saturating_add(1))
            .unwrap_or(usize::MAX)
            .min(READ_FIRST_BYTES),
    );
    file.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(io::Error::other(format!(
            "{} is larger than {limit} bytes",
            path.display()
        )));
    }
    Ok(buf)
}

/// Path of a file under `/proc/PID/`.
pub fn proc_path(pid: u32, name: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{name}"))
}

/// Reads `/proc/PID/NAME`, bounded by [`MAX_PROC_FILE_BYTES`].
pub fn read_proc(pid: u32, name: &str) -> io::Result<Vec<u8>> {
    read_bounded(&proc_path(pid, name), MAX_PROC_FILE_BYTES)
}

/// `/proc/PID/status`, parsed: who the process runs as, its thread group, its pid in its own
/// namespace.
pub fn read_status(pid: u32) -> io::Result<vmscope_parse::stat::ProcStatus> {
    let text = read_proc(pid, "status")?;
    vmscope_parse::stat::parse_status(&text)
        .map_err(|e| io::Error::other(format!("/proc/{pid}/status: {e}")))
}

/// The name (`comm`) of thread `tid` of process `pid`, from `/proc/PID/task/TID/comm`: what a
/// runtime named it (`C2 CompilerThread0`, `GC Thread#0`), at most 15 bytes.
pub fn thread_name(pid: u32, tid: u32) -> io::Result<String> {
    let text = read_bounded(&proc_path(pid, &format!("task/{tid}/comm")), 64)?;
    let text = text.strip_suffix(b"\n").unwrap_or(&text);
    Ok(String::from_utf8_lossy(text).into_owned())
}

/// Whether `tid` is a thread of process `pid` now: `/proc/PID/task/TID` exists (a look at a
/// directory, which takes none of the process's locks).
pub fn thread_exists(pid: u32, tid: u32) -> bool {
    std::fs::symlink_metadata(proc_path(pid, &format!("task/{tid}"))).is_ok()
}

/// The pids of every process now (the numeric entries of `/proc`).
pub fn pids() -> io::Result<Vec<u32>> {
    Ok(std::fs::read_dir("/proc")?
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect())
}

/// The start time of a process (`/proc/PID/stat`, in clock ticks after boot), if it still runs:
/// what tells it from a later process at its pid.
pub fn read_start_time(pid: u32) -> Option<u64> {
    let text = read_proc(pid, "stat").ok()?;
    vmscope_parse::stat::parse_stat(&text)
        .ok()
        .map(|s| s.start_time_ticks)
}

/// The kernel's current sampling-rate limit, in Hz.
pub fn perf_event_max_sample_rate() -> io::Result<u32> {
    let text = read_bounded(Path::new(MAX_SAMPLE_RATE_SYSCTL), 64)?;
    std::str::from_utf8(&text)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| io::Error::other(format!("{MAX_SAMPLE_RATE_SYSCTL} does not hold a number")))
}

/// `/proc/sys/kernel/perf_event_max_stack`: the most frames the kernel walks for one stack
/// (127 unless an administrator changed it).
pub const MAX_STACK_SYSCTL: &str = "/proc/sys/kernel/perf_event_max_stack";

/// The kernel's stack depth limit, in frames.
pub fn perf_event_max_stack() -> io::Result<u32> {
    let text = read_bounded(Path::new(MAX_STACK_SYSCTL), 64)?;
    std::str::from_utf8(&text)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| io::Error::other(format!("{MAX_STACK_SYSCTL} does not hold a number")))
}

/// `kernel.perf_event_paranoid`: above 1, the kernel keeps its own code out of unprivileged
/// users' profiles, and so does the daemon.
pub fn perf_event_paranoid() -> io::Result<i32> {
    let path = Path::new("/proc/sys/kernel/perf_event_paranoid");
    let text = read_bounded(path, 64)?;
    std::str::from_utf8(&text)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| io::Error::other(format!("{} does not hold a number", path.display())))
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock of `bpf_ktime_get_ns` and of jitdump.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_BOOTTIME now, in nanoseconds: CLOCK_MONOTONIC plus the time suspended, the clock of
/// a process's start time in /proc/PID/stat.
pub fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; both clocks exist on every kernel
    // vmscope runs on (CLOCK_BOOTTIME since 2.6.39).
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A one-shot CLOCK_MONOTONIC timer whose descriptor becomes readable when it expires
/// (`timerfd`), for a thread that waits on descriptors anyway.
///
/// tokio's timers wake their runtime twice for a deadline 64 ms or more away: at the start of
/// the deadline's slot in its timer wheel, then at the deadline. A timer of the kernel's wakes
/// once.
#[derive(Debug)]
pub struct DeadlineTimer {
    fd: OwnedFd,
}

impl DeadlineTimer {
    /// A disarmed timer, non-blocking.
    pub fn new() -> io::Result<DeadlineTimer> {
        // SAFETY: timerfd_create has no preconditions; a descriptor it returns is ours.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        Ok(DeadlineTimer {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Arms the timer to expire at CLOCK_MONOTONIC time `at_ns` (at once if it passed),
    /// replacing any earlier deadline.
    pub fn set_at(&self, at_ns: u64) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            // A zero value would disarm it: a deadline passed long ago is one nanosecond in.
            it_value: libc::timespec {
                tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (at_ns % 1_000_000_000).max(1) as libc::c_long,
            },
        };
        // SAFETY: the descriptor is a timerfd we own; the kernel reads `spec` and writes no old
        // value (null).
        let result = unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if result < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Clears an expiry, so that the descriptor is no longer readable; whether it had expired.
    pub fn clear(&self) -> bool {
        let mut expirations = 0u64;
        // SAFETY: reads 8 bytes into the u64 we own; non-blocking, so it fails with EAGAIN
        // when the timer has not expired.
        let read = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&raw mut expirations).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        read == std::mem::size_of::<u64>() as isize && expirations > 0
    }
}

impl AsRawFd for DeadlineTimer {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Clock ticks per second of the CPU times in /proc/PID/stat and /proc/stat (USER_HZ).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as u64 } else { 100 }
}

/// CPUs online now: what a system-wide session's CPU time can never exceed.
pub fn online_cpus() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u32::try_from(cpus).ok().filter(|&n| n > 0).unwrap_or(1)
}

/// Bytes of a memory page.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(4096)
}

/// Effective uid of the daemon.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Raises a resource limit's soft value to its hard value, returning the new soft value.
///
/// The daemon keeps a file open per binary it has seen (so that binaries deleted or replaced
/// during a session can still be symbolised), and older kernels charge BPF maps to
/// RLIMIT_MEMLOCK.
pub fn raise_limit(resource: libc::__rlimit_resource_t) -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct we own.
    unsafe {
        if libc::getrlimit(resource, &mut limit) != 0 {
            return Err(io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(resource, &limit) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(limit.rlim_cur)
}

/// Sets the calling thread's nice value (Linux: threads have their own; those it starts
/// afterwards inherit it).
pub fn set_nice(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority on the calling thread only; no memory is passed.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The calling thread's nice value.
pub fn thread_nice() -> io::Result<i32> {
    // getpriority may return -1 as a value: errno tells.
    // SAFETY: errno is the calling thread's; getpriority reads the calling thread's priority.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t);
        let error = io::Error::last_os_error();
        if nice == -1 && error.raw_os_error() != Some(0) {
            return Err(error);
        }
        Ok(nice)
    }
}

/// Makes every thread allocate from glibc's one main arena. By default glibc gives each thread
/// that meets another in the allocator an arena of its own (up to eight per CPU: nine in a
/// daemon that had run three sessions), and memory freed in one arena serves no other thread,
/// so each thread's peak stays resident beside the others' (`malloc_stats`: the warmer's arena
/// 16.5 MB with 80 KB in use after parsing libc's DWARF tables, the main one 23 MB with 6.6 MB).
/// `cargo xtask bench --daemon-cpu`, one run: peak RSS 64.5 MiB before, 47.3 MiB with this and
/// the DWARF tables inflated in place (57.1 MiB with those alone, in another run); daemon CPU
/// unchanged: the threads but the manager allocate little, and small blocks come from each
/// thread's cache without the arena's lock. Call it before any thread starts.
pub fn use_one_malloc_arena() {
    // SAFETY: mallopt only sets an allocator parameter; called before any other thread runs.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Asks the allocator to give the memory it holds free back to the system: glibc keeps freed
/// memory in its arenas, so without this a big map let go shows in no RSS figure.
pub fn return_free_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Whether a process `pid` exists: `kill(pid, 0)`, one system call and no descriptor, cheap
/// enough to ask for every known process once a second. A zombie still exists; so does a later
/// process that reused the pid, which makes the answer err on the side of "alive".
pub fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; it only checks that the process exists.
    let done = unsafe { libc::kill(pid, 0) };
    // EPERM: it exists, under a user we may not signal (root may signal anyone, but a user
    // namespace can still refuse).
    done == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Reads another process's memory at `address` into `buf` with `process_vm_readv`, returning
/// how many bytes were read: fewer than asked when the range runs into an unmapped or
/// unreadable page (the read stops there).
///
/// One system call, no file descriptor, no ptrace stop: cheap enough to call per sample. Needs
/// the rights of ptrace (`PTRACE_MODE_ATTACH_REALCREDS`), which root has.
pub fn read_process_memory(pid: u32, address: u64, buf: &mut [u8]) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: the local iovec covers exactly `buf`, which we borrow mutably; the remote one is
    // only read by the kernel, which checks it against the other process's mappings.
    let read = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if read < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(read as usize)
    }
}

/// Identity of a file: device and inode, as /proc/PID/maps prints them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    /// Device major number.
    pub dev_major: u32,
    /// Device minor number.
    pub dev_minor: u32,
    /// Inode number.
    pub inode: u64,
}

impl FileId {
    /// The identity of an open file or a path's target, from its metadata.
    pub fn from_metadata(meta: &std::fs::Metadata) -> FileId {
        let dev = meta.dev();
        FileId {
            dev_major: libc::major(dev),
            dev_minor: libc::minor(dev),
            inode: meta.ino(),
        }
    }
}

/// The identity of a process's main executable (`/proc/PID/exe`), used to tell the "VM
/// executable" apart from its libraries.
pub fn process_exe(pid: u32) -> io::Result<(PathBuf, FileId)> {
    let link = proc_path(pid, "exe");
    let path = std::fs::read_link(&link)?;
    let meta = std::fs::metadata(&link)?;
    Ok((path, FileId::from_metadata(&meta)))
}

/// Opens a file the daemon reads on a process's behalf, refusing anything but a regular file.
///
/// The open never blocks (`O_NONBLOCK`: a FIFO planted under an expected name would otherwise
/// hang the daemon), never follows a final symlink (`O_NOFOLLOW`), and when `expected` is given
/// the file must be exactly that one (device and inode), so that renaming, symlinked
/// directories or another mount namespace cannot make the root daemon read another file.
pub fn open_untrusted(path: &Path, expected: Option<FileId>) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    if let Some(expected) = expected
        && FileId::from_metadata(&meta) != expected
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not the file the process mapped (replaced, or another mount namespace)",
                path.display()
            ),
        ));
    }
    Ok(file)
}

/// Opens a process's root directory (`/proc/PID/root`) as a path-only descriptor. It stays
/// usable after the process exits, to read files the process wrote as it exited (a perf map
/// written at exit), with [`open_in_root`].
pub fn open_process_root(pid: u32) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(proc_path(pid, "root"))
        .map(OwnedFd::from)
}

/// [`open_untrusted`] for `path` inside a process's root ([`open_process_root`]): no symlink
/// followed, and nothing but a regular file.
pub fn open_untrusted_in_root(root: BorrowedFd<'_>, path: &Path) -> io::Result<File> {
    let fd = open_in_root(root, path, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
    let file = File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// Opens the file behind an executable mapping of a live process.
///
/// `/proc/PID/map_files/START-END` reaches the very file the process mapped, even when it was
/// deleted or replaced since, or lives in another mount namespace (a container). The path in
/// /proc/PID/maps is only the fallback, for when the process is already gone, and is held to
/// [`open_untrusted`]'s rules against the mapping's device and inode.
pub fn open_mapped_file(
    pid: u32,
    start: u64,
    end: u64,
    path: &Path,
    id: FileId,
) -> io::Result<File> {
    let map_file = proc_path(pid, &format!("map_files/{start:x}-{end:x}"));
    match File::open(&map_file) {
        Ok(file) => Ok(file),
        Err(first) => open_untrusted(path, Some(id)).map_err(|second| {
            io::Error::new(
                second.kind(),
                format!(
                    "cannot open {} ({first}) nor {} ({second})",
                    map_file.display(),
                    path.display()
                ),
            )
        }),
    }
}

/// How [`open_in_root`] resolves a path: inside the root, and through no symbolic link.
const IN_ROOT_RESOLVE: u64 =
    libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;

/// Opens `path` below the directory `root` as if `root` were `/`, following no symbolic link.
///
/// `openat2(2)` (Linux 5.6+) with `RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS`: `..` and absolute paths stay inside `root`, and a symbolic link in
/// any component (the last one included) fails with `ELOOP` instead of being followed. This is
/// how the root daemon works in another process's file system (`/proc/PID/root`) and in
/// directories other users can write (`/tmp`), where a planted symlink must never make it open,
/// create or connect to a file elsewhere. `flags` are `open(2)` flags (`O_CLOEXEC` is always
/// added); `mode` is only used with `O_CREAT` or `O_TMPFILE`, and must be 0 otherwise.
///
/// The kernel may answer `EAGAIN` when a rename or mount raced with the lookup; that is retried
/// a few times, as is `EINTR`.
pub fn open_in_root(
    root: BorrowedFd<'_>,
    path: &Path,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} holds a NUL byte", path.display()),
        )
    })?;
    // SAFETY: open_how is plain data (non-exhaustive in libc: zeroed, then filled).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u32 as u64;
    how.mode = u64::from(mode);
    how.resolve = IN_ROOT_RESOLVE;
    let mut attempts = 0;
    loop {
        // SAFETY: openat2 reads the C string and the open_how we own, whose size we pass; the
        // descriptor it returns is new and ours alone.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                c_path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a descriptor openat2 just returned, owned by nobody else.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let error = io::Error::last_os_error();
        attempts += 1;
        match error.raw_os_error() {
            Some(libc::EAGAIN | libc::EINTR) if attempts < 8 => continue,
            _ => return Err(error),
        }
    }
}

/// The calling thread's filesystem uid and gid switched to another user's, until dropped.
///
/// `setfsuid(2)`/`setfsgid(2)` are per thread (glibc's wrappers issue the system call alone,
/// unlike `setuid`, which it applies to every thread), so one worker thread of the daemon can
/// create and unlink files as the user of a target process while the rest of the daemon stays
/// root. While switched, files are created with that owner and permission checks are that
/// user's: the thread also loses `CAP_DAC_OVERRIDE` and the other filesystem capabilities,
/// which the kernel gives back when the fsuid returns to 0. Needs `CAP_SETUID` and
/// `CAP_SETGID`. Not `Send`: it must be dropped on the thread that made it. Threads created
/// while it is held start with its credentials (clone copies them): create none.
#[derive(Debug)]
pub struct FsCredentials {
    previous_uid: u32,
    previous_gid: u32,
    _per_thread: std::marker::PhantomData<*const ()>,
}

impl FsCredentials {
    /// Switches the thread's filesystem gid to `gid`, then its uid to `uid`.
    pub fn switch(uid: u32, gid: u32) -> io::Result<FsCredentials> {
        // setfsgid/setfsuid return the previous id, success or not: calling them again with
        // the same id tells whether the change happened.
        // SAFETY: setfsgid has no memory preconditions.
        let previous_gid = unsafe { libc::setfsgid(gid) } as u32;
        // SAFETY: as above.
        if unsafe { libc::setfsgid(gid) } as u32 != gid {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("cannot switch the filesystem gid to {gid} (needs CAP_SETGID)"),
            ));
        }
        // SAFETY: setfsuid has no memory preconditions.
        let previous_uid = unsafe { libc::setfsuid(uid) } as u32;
        // SAFETY: as above.
        if unsafe { libc::setfsuid(uid) } as u32 != uid {
            // SAFETY: as above.
            unsafe { libc::setfsgid(previous_gid) };
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("cannot switch the filesystem uid to {uid} (needs CAP_SETUID)"),
            ));
        }
        Ok(FsCredentials {
            previous_uid,
            previous_gid,
            _per_thread: std::marker::PhantomData,
        })
    }

    /// The thread's current filesystem uid and gid (for tests and logs).
    pub fn current() -> (u32, u32) {
        // An invalid id (-1) changes nothing and returns the current one.
        // SAFETY: setfsuid/setfsgid have no memory preconditions.
        unsafe {
            (
                libc::setfsuid(u32::MAX) as u32,
                libc::setfsgid(u32::MAX) as u32,
            )
        }
    }
}

impl Drop for FsCredentials {
    fn drop(&mut self) {
        // The uid first: with fsuid 0 again, the thread has its capabilities back.
        // SAFETY: setfsuid/setfsgid have no memory preconditions.
        unsafe {
            libc::setfsuid(self.previous_uid);
            libc::setfsgid(self.previous_gid);
        }
    }
}

/// A process, held by a pidfd (Linux 5.3+): signals sent through it reach that process or
/// nothing, never a later process that reused its pid.
#[derive(Debug)]
pub struct ProcessHandle {
    pid: u32,
    fd: OwnedFd,
}

impl ProcessHandle {
    /// `pidfd_open(2)`: `ESRCH` when there is no such process.
    pub fn open(pid: u32) -> io::Result<ProcessHandle> {
        let raw = libc::pid_t::try_from(pid)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ProcessHandle {
            pid,
            // SAFETY: a descriptor pidfd_open just returned, owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd as RawFd) },
        })
    }

    /// The pid it was opened with.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `pidfd_send_signal(2)`; signal 0 only checks that the process still exists (`ESRCH`
    /// once it has exited).
    pub fn signal(&self, signal: libc::c_int) -> io::Result<()> {
        // SAFETY: no siginfo (null), no flags; the descriptor is ours.
        let done = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if done < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

/// Connects a Unix stream socket to the socket file open (with `O_PATH`) as `socket_file`.
///
/// The connection goes through `/proc/self/fd/N`, so it reaches exactly the inode that was
/// opened and checked, whatever is renamed or planted on the path since; `timeout` bounds the
/// connect (`SO_SNDTIMEO`, which Unix sockets apply to a connect waiting on a full backlog) and
/// is set as the stream's read and write timeout.
pub fn connect_unix_at(
    socket_file: BorrowedFd<'_>,
    timeout: std::time::Duration,
) -> io::Result<std::os::unix::net::UnixStream> {
    // SAFETY: socket takes no pointers and returns a new descriptor.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor socket just returned, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let timeout = timeout.max(std::time::Duration::from_millis(1));
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: setsockopt reads the timeval we own, whose size we pass.
    if unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    let path = format!("/proc/self/fd/{}", socket_file.as_raw_fd());
    // SAFETY: sockaddr_un is plain data; zeroed is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (slot, byte) in addr.sun_path.iter_mut().zip(path.bytes()) {
        *slot = byte as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + path.len() + 1;
    loop {
        // SAFETY: connect reads `len` bytes of the sockaddr_un we own (the path is far shorter
        // than sun_path and NUL-terminated by the zeroing).
        let done = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len as libc::socklen_t,
            )
        };
        if done == 0 {
            break;
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINTR) {
            return Err(error);
        }
    }
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(stream)
}

/// The credentials of a Unix socket's peer (`SO_PEERCRED`): for the connecting side, those of
/// the process that called `listen`, its pid as the caller's pid namespace sees it.
pub fn peer_credentials(socket: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the ucred we own.
    let done = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if done != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}

/// Removes the directory entry `name` of `dir` (`unlinkat(2)`, not a directory).
pub fn unlink_at(dir: BorrowedFd<'_>, name: &Path) -> io::Result<()> {
    let c_name = CString::new(name.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name holds a NUL byte"))?;
    // SAFETY: unlinkat reads the C string we own.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c_name.as_ptr(), 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A thread of the test process with a name, waiting until dropped.
    pub(crate) struct NamedThread {
        /// Its task id.
        pub(crate) tid: u32,
        done: Option<std::sync::mpsc::Sender<()>>,
        handle: Option<std::thread::JoinHandle<()>>,
    }

    impl NamedThread {
        pub(crate) fn start(name: &str) -> NamedThread {
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let (done, done_rx) = std::sync::mpsc::channel::<()>();
            let handle = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    tid_tx.send(unsafe { libc::gettid() } as u32).unwrap();
                    done_rx.recv().ok();
                })
                .unwrap();
            NamedThread {
                tid: tid_rx.recv().unwrap(),
                done: Some(done),
                handle: Some(handle),
            }
        }
    }

    impl Drop for NamedThread {
        fn drop(&mut self) {
            drop(self.done.take());
            if let Some(handle) = self.handle.take() {
                handle.join().ok();
            }
        }
    }

    #[test]
    fn bounded_read_refuses_large_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![b'x'; 100]).unwrap();
        assert_eq!(read_bounded(&path, 100).unwrap().len(), 100);
        let err = read_bounded(&path, 99).unwrap_err();
        assert!(err.to_string().contains("larger than 99 bytes"), "{err}");
    }

    /// A thread's name is what it set itself, without the newline `/proc` ends it with.
    #[test]
    fn a_thread_name_is_read_as_the_thread_set_it() {
        let worker = NamedThread::start("vmscope-named");
        let name = thread_name(std::process::id(), worker.tid);
        drop(worker);
        assert_eq!(name.unwrap(), "vmscope-named");
        assert!(thread_name(std::process::id(), u32::MAX).is_err());
    }

    #[test]
    fn the_stack_depth_limit_is_read() {
        // Every kernel with perf events has the sysctl (since 4.8); 127 unless changed.
        let limit = perf_event_max_stack().expect("kernel.perf_event_max_stack");
        assert!(limit > 0, "a limit of {limit} frames");
    }

    #[test]
    fn monotonic_clock_advances() {
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(b >= a + 2_000_000, "{a} {b}");
    }

    #[test]
    fn own_executable_is_found() {
        let (path, id) = process_exe(std::process::id()).unwrap();
        let expected = std::env::current_exe().unwrap();
        assert_eq!(path, expected);
        assert_eq!(
            id,
            FileId::from_metadata(&std::fs::metadata(&expected).unwrap())
        );
    }

    #[test]
    fn untrusted_opens_refuse_fifos_symlinks_and_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        // Would block forever without O_NONBLOCK.
        let err = open_untrusted(&fifo, None).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");

        let real = dir.path().join("real");
        std::fs::write(&real, b"x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(
            open_untrusted(&link, None).unwrap_err().raw_os_error(),
            Some(libc::ELOOP)
        );

        let id = FileId::from_metadata(&std::fs::metadata(&real).unwrap());
        assert!(open_untrusted(&real, Some(id)).is_ok());
        let other = dir.path().join("other");
        std::fs::write(&other, b"y").unwrap();
        let err = open_untrusted(&other, Some(id)).unwrap_err();
        assert!(
            err.to_string().contains("not the file the process mapped"),
            "{err}"
        );
    }

    #[test]
    fn process_memory_is_read_up_to_the_first_unmapped_page() {
        let pid = std::process::id();
        let data = *b"vmscope reads this";
        let mut buf = [0u8; 18];
        let read = read_process_memory(pid, data.as_ptr() as u64, &mut buf).unwrap();
        assert_eq!((read, buf), (18, data));
        // Address 8 is never mapped: nothing is read.
        assert!(read_process_memory(pid, 8, &mut buf).is_err());
        // A page followed by an inaccessible one: the read stops at the boundary.
        // SAFETY: a fresh anonymous mapping of two pages, unmapped below before returning.
        unsafe {
            let page = 4096;
            let base = libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            assert_eq!(
                libc::mprotect(base.cast::<u8>().add(page).cast(), page, libc::PROT_NONE),
                0
            );
            let mut big = vec![0u8; 2 * page];
            let read = read_process_memory(pid, base as u64 + 100, &mut big);
            libc::munmap(base, 2 * page);
            assert_eq!(read.unwrap(), page - 100);
        }
    }

    fn root_of(dir: &Path) -> OwnedFd {
        use std::os::unix::fs::OpenOptionsExt;
        File::options()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(dir)
            .unwrap()
            .into()
    }

    #[test]
    fn opens_in_a_root_stay_inside_and_follow_no_symlink() {
        use std::os::fd::AsFd;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        std::fs::write(dir.path().join("tmp/file"), b"inside").unwrap();
        let root = root_of(dir.path());
        let read = |path: &str| -> io::Result<String> {
            let fd = open_in_root(root.as_fd(), Path::new(path), libc::O_RDONLY, 0)?;
            let mut text = String::new();
            File::from(fd).read_to_string(&mut text)?;
            Ok(text)
        };
        assert_eq!(read("tmp/file").unwrap(), "inside");
        // `..` and absolute paths resolve inside the root.
        assert_eq!(read("/tmp/../../../tmp/file").unwrap(), "inside");

        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"outside").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("tmp/link"))
            .unwrap();
        std::os::unix::fs::symlink("file", dir.path().join("tmp/relative")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("dirlink")).unwrap();
        for path in ["tmp/link", "tmp/relative", "dirlink/secret"] {
            assert_eq!(
                read(path).unwrap_err().raw_os_error(),
                Some(libc::ELOOP),
                "{path}"
            );
        }
        // Magic links too: /proc/self/root would lead out of any root.
        let proc = root_of(Path::new("/proc"));
        let err = open_in_root(proc.as_fd(), Path::new("self/root"), libc::O_PATH, 0);
        assert_eq!(err.unwrap_err().raw_os_error(), Some(libc::ELOOP));
        // O_CREAT never creates through a symlink.
        let err = open_in_root(
            root.as_fd(),
            Path::new("tmp/link"),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o600,
        )
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    }

    #[test]
    fn filesystem_credentials_apply_to_this_thread_until_dropped() {
        use std::os::fd::AsFd;
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root");
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o1777),
        )
        .unwrap();
        std::fs::write(dir.path().join("roots"), b"x").unwrap();
        std::fs::set_permissions(
            dir.path().join("roots"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let root = root_of(dir.path());
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let (answer, answered) = std::sync::mpsc::channel();
        let other = std::thread::spawn(move || {
            while asked.recv().is_ok() {
                answer.send(FsCredentials::current()).unwrap();
            }
        });
        {
            let _nobody = FsCredentials::switch(65534, 65534).unwrap();
            assert_eq!(FsCredentials::current(), (65534, 65534));
            // Other threads keep root's.
            ask.send(()).unwrap();
            assert_eq!(answered.recv().unwrap(), (0, 0));
            let fd = open_in_root(
                root.as_fd(),
                Path::new("made"),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                0o600,
            )
            .unwrap();
            let meta = File::from(fd).metadata().unwrap();
            assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
            // Without CAP_DAC_OVERRIDE, root's 0600 file is closed to it.
            let err = open_in_root(root.as_fd(), Path::new("roots"), libc::O_RDONLY, 0);
            assert_eq!(err.unwrap_err().raw_os_error(), Some(libc::EACCES));
            unlink_at(root.as_fd(), Path::new("made")).unwrap();
        }
        assert_eq!(FsCredentials::current(), (0, 0));
        assert!(open_in_root(root.as_fd(), Path::new("roots"), libc::O_RDONLY, 0).is_ok());
        drop(ask);
        other.join().unwrap();
    }

    #[test]
    fn signals_through_a_pidfd_reach_only_that_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let handle = ProcessHandle::open(child.id()).unwrap();
        handle.signal(0).unwrap();
        handle.signal(libc::SIGKILL).unwrap();
        child.wait().unwrap();
        // Reaped: the pid may be reused, the pidfd still means the dead process.
        assert_eq!(
            handle.signal(0).unwrap_err().raw_os_error(),
            Some(libc::ESRCH)
        );
    }

    #[test]
    fn sample_rate_limit_is_a_positive_number() {
        assert!(perf_event_max_sample_rate().unwrap() > 0);
    }
}
