//! `cargo xtask package [--check]`: the Debian package (cargo-deb), and with `--check` the
//! proof that it installs and runs: `dpkg -i`, `systemd-analyze verify` of the installed unit,
//! the installed daemon started from the installed configuration as the unit starts it (these
//! machines run no systemd), `vmscope info` against it, SIGTERM, `dpkg --purge`.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::{cargo, root, run_checked, setup};

/// The cargo-deb this project builds its package with.
const CARGO_DEB_VERSION: &str = "^3.8";

/// The socket of the installed configuration (its default).
const INSTALLED_SOCKET: &str = "/run/vmscope/vmscoped.sock";

/// Builds the package; with `check`, installs, runs and removes it.
pub fn run(check: bool) -> anyhow::Result<()> {
    setup::run()?;
    ensure_cargo_deb()?;
    println!("xtask: building vmscoped and vmscope (release) for the package");
    run_checked(cargo().args(["build", "--release", "-p", "vmscoped", "-p", "vmscope"]))?;
    let out = root().join("target/debian");
    let built = Command::new("cargo")
        .args(["deb", "-p", "vmscoped", "--no-build", "--output"])
        .arg(&out)
        .current_dir(root())
        .output()
        .context("cargo deb")?;
    if !built.status.success() {
        bail!(
            "cargo deb failed:\n{}",
            String::from_utf8_lossy(&built.stderr)
        );
    }
    let deb = PathBuf::from(String::from_utf8_lossy(&built.stdout).trim().to_owned());
    println!("xtask: built {}", deb.display());
    if check {
        check_package(&deb)?;
    }
    Ok(())
}

fn ensure_cargo_deb() -> anyhow::Result<()> {
    let present = Command::new("cargo")
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        println!("xtask: installing cargo-deb {CARGO_DEB_VERSION}");
        run_checked(Command::new("cargo").args([
            "install",
            "cargo-deb",
            "--locked",
            "--version",
            CARGO_DEB_VERSION,
        ]))?;
    }
    Ok(())
}

/// Installs `deb`, checks its unit, runs its daemon from its configuration, removes it.
fn check_package(deb: &Path) -> anyhow::Result<()> {
    if !setup::is_root() {
        bail!("installing the package needs root: run `sudo -E cargo xtask package --check`");
    }
    run_checked(Command::new("dpkg").arg("-i").arg(deb))?;
    let result = run_installed();
    // Purged, configuration included: no /etc/vmscope/vmscoped.toml stays for later daemons.
    run_checked(Command::new("dpkg").args(["--purge", "vmscope"]))?;
    result
}

fn run_installed() -> anyhow::Result<()> {
    run_checked(
        Command::new("systemd-analyze").args(["verify", "/lib/systemd/system/vmscoped.service"]),
    )?;
    println!("xtask: systemd-analyze verify accepts the installed unit");
    // As the unit's ExecStart, with the installed configuration.
    let mut daemon = Command::new("/usr/bin/vmscoped")
        .args(["--config", "/etc/vmscope/vmscoped.toml"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("start the installed vmscoped")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(INSTALLED_SOCKET).is_err() {
        if let Some(status) = daemon.try_wait()? {
            let log = daemon.wait_with_output()?.stderr;
            bail!(
                "the installed vmscoped exited ({status}):\n{}",
                String::from_utf8_lossy(&log)
            );
        }
        if Instant::now() > deadline {
            let _ = daemon.kill();
            bail!("the installed vmscoped did not serve {INSTALLED_SOCKET} within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let info = Command::new("/usr/bin/vmscope")
        .args(["info", "--json"])
        .output()
        .context("run the installed vmscope")?;
    // SAFETY: kill only sends a signal to our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let status = daemon.wait()?;
    if !info.status.success() || !String::from_utf8_lossy(&info.stdout).contains("\"version\"") {
        bail!(
            "the installed vmscope could not ask the installed daemon: {}",
            String::from_utf8_lossy(&info.stderr)
        );
    }
    if !status.success() {
        bail!("the installed vmscoped exited {status} on SIGTERM");
    }
    println!(
        "xtask: the installed daemon served {INSTALLED_SOCKET} from the installed \
         configuration, answered vmscope info, and stopped on SIGTERM"
    );
    Ok(())
}
