//! The perf map a JVM writes when asked, and its removal when the daemon caused it.
//!
//! `Compiler.perfmap` leaves `/tmp/perf-<nspid>.map` in the JVM's file system for good: a JVM
//! recorded once kept a listing of its code cache in its /tmp after every session, and after
//! it exited. The daemon removes what it caused and keeps what was there before. Before it
//! first asks a JVM, it looks for the file ([`PerfMapFile::look`]): a file there already (from
//! `jcmd`, from the user's own tools) is the user's, and so is one that the JVM writes at exit
//! by itself (`-XX:+DumpPerfMapAtExit`, which the caller checks). Otherwise the file is the
//! daemon's doing, and [`PerfMapFile::remove`] takes it away once no session needs it (see
//! [`crate::session::jvm`]).
//!
//! The look keeps a descriptor of the JVM's /tmp, opened through `/proc/PID/root` without
//! following symbolic links ([`sys::open_in_root`]), so that the file can still be removed
//! after the JVM exited and its `/proc/PID/root` is gone. Only a regular file of the JVM's
//! user is removed, by name in that directory (`unlinkat`, which follows no link). Both calls
//! touch the target's file system, which may be a FUSE mount its user serves and never
//! answers: call them on a thread of their own.

use std::{
    fs::File,
    io,
    os::{
        fd::{AsFd, OwnedFd},
        unix::fs::MetadataExt,
    },
    path::{Path, PathBuf},
};

use super::JvmTarget;
use crate::sys;

/// A JVM's perf map, by its name in the JVM's /tmp.
#[derive(Debug)]
pub struct PerfMapFile {
    /// The JVM's /tmp (a path-only descriptor).
    tmp: OwnedFd,
    /// `perf-<nspid>.map`.
    name: PathBuf,
    /// The JVM's effective uid: only its files are removed.
    uid: u32,
}

impl PerfMapFile {
    /// Opens the JVM's /tmp and says whether its perf map is there now (a symbolic link of
    /// that name counts as there: it is not the daemon's).
    pub fn look(target: &JvmTarget) -> io::Result<(PerfMapFile, bool)> {
        let root = sys::open_process_root(target.pid)?;
        let tmp = sys::open_in_root(
            root.as_fd(),
            Path::new("tmp"),
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )?;
        PerfMapFile::look_in(tmp, target.nspid, target.uid)
    }

    /// [`PerfMapFile::look`] in the directory `tmp`, for a JVM of pid `nspid` in its own pid
    /// namespace and effective uid `uid`.
    pub fn look_in(tmp: OwnedFd, nspid: u32, uid: u32) -> io::Result<(PerfMapFile, bool)> {
        let file = PerfMapFile {
            tmp,
            name: PathBuf::from(format!("perf-{nspid}.map")),
            uid,
        };
        let there = match file.open() {
            Ok(_) => true,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => false,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => true,
            Err(e) => return Err(e),
        };
        Ok((file, there))
    }

    /// The file's name, `perf-<nspid>.map`.
    pub fn name(&self) -> &Path {
        &self.name
    }

    fn open(&self) -> io::Result<OwnedFd> {
        sys::open_in_root(
            self.tmp.as_fd(),
            &self.name,
            libc::O_PATH | libc::O_NOFOLLOW,
            0,
        )
    }

    /// Removes the file if it is a regular file of the JVM's user. Whether it removed it:
    /// false when there is none, or when what has the name now is not such a file (left
    /// alone).
    pub fn remove(&self) -> io::Result<bool> {
        let meta = match self.open().and_then(|fd| File::from(fd).metadata()) {
            Ok(meta) => meta,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ELOOP)) => {
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        if !meta.is_file() || meta.uid() != self.uid {
            return Ok(false);
        }
        match sys::unlink_at(self.tmp.as_fd(), &self.name) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    fn dir_fd(dir: &Path) -> OwnedFd {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(dir)
            .map(OwnedFd::from)
            .unwrap()
    }

    fn me() -> u32 {
        sys::effective_uid()
    }

    #[test]
    fn a_map_written_after_the_look_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (file, there) = PerfMapFile::look_in(dir_fd(dir.path()), 42, me()).unwrap();
        assert!(!there);
        assert_eq!(file.name(), Path::new("perf-42.map"));
        let path = dir.path().join("perf-42.map");
        std::fs::write(&path, "7f00 10 hot\n").unwrap();
        assert!(file.remove().unwrap());
        assert!(!path.exists());
        // Gone already: nothing to do.
        assert!(!file.remove().unwrap());
    }

    #[test]
    fn a_map_there_before_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("perf-42.map"), "").unwrap();
        let (_, there) = PerfMapFile::look_in(dir_fd(dir.path()), 42, me()).unwrap();
        assert!(there);
        symlink("/etc/passwd", dir.path().join("perf-43.map")).unwrap();
        let (_, there) = PerfMapFile::look_in(dir_fd(dir.path()), 43, me()).unwrap();
        assert!(there, "a link is not the daemon's");
    }

    #[test]
    fn only_a_regular_file_of_the_jvms_user_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // Another user's file (the JVM runs as uid me + 1).
        let (other, _) = PerfMapFile::look_in(dir_fd(dir.path()), 42, me() + 1).unwrap();
        let path = dir.path().join("perf-42.map");
        std::fs::write(&path, "").unwrap();
        assert!(!other.remove().unwrap());
        assert!(path.exists());
        // A symbolic link: neither it nor its target is touched.
        let target = dir.path().join("precious");
        std::fs::write(&target, "keep").unwrap();
        std::fs::remove_file(&path).unwrap();
        symlink(&target, &path).unwrap();
        let (link, _) = PerfMapFile::look_in(dir_fd(dir.path()), 42, me()).unwrap();
        assert!(!link.remove().unwrap());
        assert!(path.symlink_metadata().is_ok() && target.exists());
        // A directory.
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert!(!link.remove().unwrap());
        assert!(path.is_dir());
    }
}
