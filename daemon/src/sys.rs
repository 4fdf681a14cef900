//! The daemon's door to the operating system outside BPF: procfs and sysctl reads, clocks,
//! resource limits.
//!
//! Everything that touches `/proc` or `/sys` on behalf of the rest of the daemon goes through
//! here, so that the parsers stay pure and the callers stay testable. Reads are bounded: a
//! hostile or broken process cannot make the daemon swallow an unbounded file.

use std::{
    fs::File,
    io::{self, Read},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

/// Largest procfs file the daemon reads (a /proc/PID/maps of a process with ~100k mappings).
pub const MAX_PROC_FILE_BYTES: u64 = 16 << 20;

/// `/proc/sys/kernel/perf_event_max_sample_rate`: the highest sampling frequency the kernel
/// accepts, which it may lower by itself when perf interrupts take too long.
pub const MAX_SAMPLE_RATE_SYSCTL: &str = "/proc/sys/kernel/perf_event_max_sample_rate";

/// Reads a whole (small) file, refusing anything larger than `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    let mut buf = Vec::new();
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
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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

/// Whether the CPU exposes a hardware PMU to perf (cycles, instructions retired). Virtual
/// machines often do not; sampling then relies on the software cpu-clock, which is what
/// vmscope uses anyway.
pub fn has_hardware_pmu() -> bool {
    Path::new("/sys/bus/event_source/devices/cpu/events/cpu-cycles").exists()
        || Path::new("/sys/bus/event_source/devices/cpu_core/events/cpu-cycles").exists()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_read_refuses_large_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![b'x'; 100]).unwrap();
        assert_eq!(read_bounded(&path, 100).unwrap().len(), 100);
        let err = read_bounded(&path, 99).unwrap_err();
        assert!(err.to_string().contains("larger than 99 bytes"), "{err}");
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

    #[test]
    fn sample_rate_limit_is_a_positive_number() {
        assert!(perf_event_max_sample_rate().unwrap() > 0);
    }
}
