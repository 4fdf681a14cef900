//! The daemon's Unix socket.
//!
//! The directory is created owned by root with mode 0755: others may reach the socket but not
//! replace it. An existing directory must be as safe: owned by the daemon's user, and writable
//! by nobody else unless sticky (like /tmp, where others cannot remove or rename our socket).
//! The socket itself is 0666: any local user may connect, and each request is then authorised
//! from the peer credentials the kernel attaches to the connection. With `--socket-group` it
//! is that group's, 0660 ([`restrict_socket`]): only its members and root may connect.

use std::{
    fs,
    io::{self, ErrorKind},
    os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt},
    path::Path,
};

use tokio::net::UnixListener;

/// Binds the socket at `path`, replacing a stale socket left by a daemon that died, but never a
/// live one nor a file that is not a socket.
pub fn bind_socket(path: &Path) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        match fs::symlink_metadata(dir) {
            Ok(meta) if meta.is_dir() => check_directory(dir, &meta)?,
            Ok(_) => {
                return Err(io::Error::new(
                    ErrorKind::AlreadyExists,
                    format!("{} exists and is not a directory", dir.display()),
                ));
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(dir)
                    .map_err(|e| with_path(e, "cannot create", dir))?;
            }
            Err(e) => return Err(with_path(e, "cannot inspect", dir)),
        }
    }
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => {
                    return Err(io::Error::new(
                        ErrorKind::AddrInUse,
                        format!(
                            "another vmscoped already serves {}; stop it first or pick another \
                             socket with --socket",
                            path.display()
                        ),
                    ));
                }
                // Nobody listens: a daemon died without cleaning up.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => fs::remove_file(path)
                    .map_err(|e| with_path(e, "cannot remove stale socket", path))?,
                Err(e) => return Err(with_path(e, "cannot tell whether a daemon serves", path)),
            }
        }
        Ok(_) => {
            return Err(io::Error::new(
                ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket; remove it", path.display()),
            ));
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(with_path(e, "cannot inspect", path)),
    }
    let listener = UnixListener::bind(path).map_err(|e| with_path(e, "cannot bind", path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o666))
        .map_err(|e| with_path(e, "cannot set permissions of", path))?;
    Ok(listener)
}

/// Refuses a directory in which another user could replace the socket.
fn check_directory(dir: &Path, meta: &fs::Metadata) -> io::Result<()> {
    let mode = meta.mode();
    let writable_by_others = mode & 0o022 != 0;
    let sticky = mode & 0o1000 != 0;
    if meta.uid() != crate::sys::effective_uid() && meta.uid() != 0 {
        return Err(io::Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "refusing to serve in {}: it belongs to uid {}, who could replace the socket",
                dir.display(),
                meta.uid()
            ),
        ));
    }
    if writable_by_others && !sticky {
        return Err(io::Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "refusing to serve in {}: others may write to it (mode {:o}) and could replace \
                 the socket; use a directory only root can write to",
                dir.display(),
                mode & 0o7777
            ),
        ));
    }
    Ok(())
}

fn with_path(error: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(error.kind(), format!("{what} {}: {error}", path.display()))
}

/// Gives the socket at `path` to group `group`, mode 0660: only the group's members (and root)
/// may connect.
pub fn restrict_socket(path: &Path, group: &str) -> io::Result<()> {
    let gid = group_id(group)?;
    std::os::unix::fs::chown(path, None, Some(gid))
        .map_err(|e| with_path(e, "cannot give the socket to its group", path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o660))
        .map_err(|e| with_path(e, "cannot set the socket's mode", path))
}

/// The id of the group named `name`, from the system's group database.
fn group_id(name: &str) -> io::Result<u32> {
    let c_name = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(ErrorKind::InvalidInput, "a group name holds no NUL"))?;
    let mut group: libc::group = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is to a live local of the size given; getgrnam_r writes the
    // group's strings into `buffer`, which outlives the read of `gr_gid` below.
    let error = unsafe {
        libc::getgrnam_r(
            c_name.as_ptr(),
            &mut group,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if error != 0 {
        return Err(io::Error::from_raw_os_error(error));
    }
    if found.is_null() {
        return Err(io::Error::new(
            ErrorKind::NotFound,
            format!("no group named {name:?} (--socket-group)"),
        ));
    }
    Ok(group.gr_gid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_socket_given_to_a_group_is_its_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vmscoped.sock");
        let _listener = bind_socket(&path).unwrap();
        // Every system has a group 0 (root), whoever runs the test may give its files to it
        // only as root: the mode is checked either way.
        match restrict_socket(&path, "root") {
            Ok(()) => {
                let meta = fs::metadata(&path).unwrap();
                assert_eq!(meta.permissions().mode() & 0o777, 0o660);
                assert_eq!(meta.gid(), 0);
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}"),
        }
        let missing = restrict_socket(&path, "no-such-group-here").unwrap_err();
        assert!(missing.to_string().contains("no group named"), "{missing}");
    }

    #[tokio::test]
    async fn binds_replaces_stale_and_refuses_live() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/vmscoped.sock");
        let listener = bind_socket(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666);
        let dir_mode = fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o755);

        let live = bind_socket(&path).unwrap_err();
        assert_eq!(live.kind(), ErrorKind::AddrInUse, "{live}");
        assert!(live.to_string().contains("already serves"));

        drop(listener); // the file stays: a stale socket
        assert!(path.exists());
        bind_socket(&path).unwrap();

        let file = dir.path().join("plain");
        fs::write(&file, b"x").unwrap();
        let err = bind_socket(&file).unwrap_err();
        assert!(err.to_string().contains("not a socket"), "{err}");
    }

    #[tokio::test]
    async fn unsafe_directories_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let err = bind_socket(&open.join("s.sock")).unwrap_err();
        assert!(err.to_string().contains("others may write"), "{err}");
        // Sticky, like /tmp: others cannot remove or rename what we create there.
        fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).unwrap();
        bind_socket(&open.join("s.sock")).unwrap();
    }
}
