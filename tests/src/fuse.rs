//! A FUSE file system whose one file stops answering opens on request: what a user's file on
//! a hung FUSE or NFS server looks like to the daemon.
//!
//! It speaks the kernel's FUSE protocol on `/dev/fuse` itself (root mounts it with mount(2)),
//! answering just enough for a process to open and map `jit-1.dump`; after
//! [`HangingFs::hang_opens`] (or [`HangingFs::hang_reads`]), opens (reads) of the file are held
//! unanswered until [`HangingFs::release`] or drop, which answer them with EIO (and later ones
//! as before).

use std::{
    ffi::CString,
    fs::File,
    io::{Read, Write},
    os::{
        fd::AsRawFd,
        unix::{ffi::OsStrExt, fs::OpenOptionsExt},
    },
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

/// The one file's name: a jitdump file, by its name.
pub const FILE_NAME: &str = "jit-1.dump";

const LOOKUP: u32 = 1;
const FORGET: u32 = 2;
const GETATTR: u32 = 3;
const OPEN: u32 = 14;
const READ: u32 = 15;
const RELEASE: u32 = 18;
const FLUSH: u32 = 25;
const INIT: u32 = 26;
const INTERRUPT: u32 = 36;
const BATCH_FORGET: u32 = 42;
const ROOT: u64 = 1;
const FILE: u64 = 2;
const FILE_SIZE: u64 = 4096;

#[derive(Debug, Default)]
struct State {
    hang: AtomicBool,
    hang_reads: AtomicBool,
    /// Opens held unanswered: their request ids.
    held: Mutex<Vec<u64>>,
    /// Reads held unanswered: their request ids.
    held_reads: Mutex<Vec<u64>>,
}

/// A mounted [`HangingFs`]; unmounted on drop.
#[derive(Debug)]
pub struct HangingFs {
    dir: tempfile::TempDir,
    device: Arc<File>,
    state: Arc<State>,
}

impl HangingFs {
    /// Mounts it on a new directory every user can reach; its file belongs to `uid`.
    pub fn mount(uid: u32) -> HangingFs {
        let dir = crate::shared_tempdir();
        let device = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open("/dev/fuse")
            .expect("open /dev/fuse (the kernel's FUSE module)");
        let target = CString::new(dir.path().as_os_str().as_bytes()).unwrap();
        let options = CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
            device.as_raw_fd()
        ))
        .unwrap();
        // SAFETY: the strings are NUL-terminated and outlive the call.
        let rc = unsafe {
            libc::mount(
                c"vmscope-hanging".as_ptr(),
                target.as_ptr(),
                c"fuse".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                options.as_ptr().cast(),
            )
        };
        assert_eq!(rc, 0, "mount fuse: {}", std::io::Error::last_os_error());
        let device = Arc::new(device);
        let state = Arc::new(State::default());
        let (d, s) = (device.clone(), state.clone());
        std::thread::Builder::new()
            .name("hanging-fuse".into())
            .spawn(move || serve(&d, &s, uid))
            .expect("spawn the FUSE server");
        HangingFs { dir, device, state }
    }

    /// The file's path.
    pub fn file(&self) -> PathBuf {
        self.dir.path().join(FILE_NAME)
    }

    /// From now on, opens of the file are not answered.
    pub fn hang_opens(&self) {
        self.state.hang.store(true, Ordering::SeqCst);
    }

    /// From now on, reads of the file are not answered: a process that faults a page of it in
    /// while holding its own mmap lock (a read of `/proc/self/mem`) holds that lock for good.
    pub fn hang_reads(&self) {
        self.state.hang_reads.store(true, Ordering::SeqCst);
    }

    /// How many reads are held unanswered now.
    pub fn held_reads(&self) -> usize {
        self.state.held_reads.lock().unwrap().len()
    }

    /// How many opens are held unanswered now.
    pub fn held_opens(&self) -> usize {
        self.state.held.lock().unwrap().len()
    }

    /// Answers the held opens and reads with EIO, and those from now on as before the hang.
    pub fn release(&self) {
        let mut held = self.state.held.lock().unwrap();
        let mut held_reads = self.state.held_reads.lock().unwrap();
        self.state.hang.store(false, Ordering::SeqCst);
        self.state.hang_reads.store(false, Ordering::SeqCst);
        for unique in held.drain(..).chain(held_reads.drain(..)) {
            reply(&self.device, unique, -libc::EIO, &[]);
        }
    }
}

impl Drop for HangingFs {
    fn drop(&mut self) {
        self.release();
        let target = CString::new(self.dir.path().as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path. Lazy: a process may still map the file.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

fn reply(device: &File, unique: u64, error: i32, body: &[u8]) {
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(&(16 + body.len() as u32).to_ne_bytes());
    out.extend_from_slice(&error.to_ne_bytes());
    out.extend_from_slice(&unique.to_ne_bytes());
    out.extend_from_slice(body);
    // An interrupted or aborted request is gone: nothing to answer.
    let _ = (&*device).write_all(&out);
}

/// `struct fuse_attr`.
fn attr(node: u64, uid: u32) -> Vec<u8> {
    let (size, mode, nlink) = if node == ROOT {
        (0, libc::S_IFDIR | 0o755, 2)
    } else {
        (FILE_SIZE, libc::S_IFREG | 0o644, 1)
    };
    let mut a = Vec::with_capacity(88);
    for v in [node, size, size.div_ceil(512), 0, 0, 0] {
        a.extend_from_slice(&v.to_ne_bytes());
    }
    let owner = if node == ROOT { 0 } else { uid };
    for v in [0, 0, 0, mode, nlink, owner, owner, 0, 4096, 0u32] {
        a.extend_from_slice(&v.to_ne_bytes());
    }
    a
}

fn serve(device: &File, state: &State, uid: u32) {
    let mut buf = vec![0u8; 1 << 17];
    loop {
        let n = match (&*device).read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            // ENODEV: unmounted.
            Err(_) => return,
        };
        if n < 40 {
            continue;
        }
        let u32_at = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_ne_bytes(buf[o..o + 8].try_into().unwrap());
        let (opcode, unique, node) = (u32_at(4), u64_at(8), u64_at(16));
        let body = &buf[40..n];
        match opcode {
            INIT => {
                let minor = u32::from_ne_bytes(body[4..8].try_into().unwrap()).min(31);
                let mut out = Vec::with_capacity(64);
                for v in [7u32, minor, 0, 0] {
                    out.extend_from_slice(&v.to_ne_bytes());
                }
                out.extend_from_slice(&16u16.to_ne_bytes()); // max_background
                out.extend_from_slice(&12u16.to_ne_bytes()); // congestion_threshold
                out.extend_from_slice(&4096u32.to_ne_bytes()); // max_write
                out.extend_from_slice(&1u32.to_ne_bytes()); // time_gran
                out.resize(64, 0);
                reply(device, unique, 0, &out);
            }
            LOOKUP => {
                let name = body.split(|&b| b == 0).next().unwrap_or_default();
                if node == ROOT && name == FILE_NAME.as_bytes() {
                    let mut out = Vec::with_capacity(128);
                    for v in [FILE, 0, 3600, 3600] {
                        out.extend_from_slice(&v.to_ne_bytes());
                    }
                    out.extend_from_slice(&[0; 8]);
                    out.extend_from_slice(&attr(FILE, uid));
                    reply(device, unique, 0, &out);
                } else {
                    reply(device, unique, -libc::ENOENT, &[]);
                }
            }
            GETATTR => {
                let mut out = Vec::with_capacity(104);
                out.extend_from_slice(&3600u64.to_ne_bytes());
                out.extend_from_slice(&[0; 8]);
                out.extend_from_slice(&attr(node, uid));
                reply(device, unique, 0, &out);
            }
            OPEN => {
                let mut held = state.held.lock().unwrap();
                if state.hang.load(Ordering::SeqCst) {
                    held.push(unique);
                } else {
                    reply(device, unique, 0, &[0; 16]);
                }
            }
            READ => {
                let mut held = state.held_reads.lock().unwrap();
                if state.hang_reads.load(Ordering::SeqCst) {
                    held.push(unique);
                    continue;
                }
                drop(held);
                let size = u32::from_ne_bytes(body[16..20].try_into().unwrap()) as usize;
                let offset = u64::from_ne_bytes(body[8..16].try_into().unwrap());
                let left = FILE_SIZE.saturating_sub(offset) as usize;
                reply(device, unique, 0, &vec![0; size.min(left)]);
            }
            RELEASE | FLUSH => reply(device, unique, 0, &[]),
            FORGET | BATCH_FORGET | INTERRUPT => {}
            _ => reply(device, unique, -libc::ENOSYS, &[]),
        }
    }
}
