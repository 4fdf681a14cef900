//! `cargo xtask setup`: install what a fresh machine lacks, idempotently.

use std::process::Command;

use anyhow::{Context, bail};

use crate::run_checked;

/// bpf-linker version that matches the nightly's LLVM 22 (0.11+ wants LLVM 23).
pub const BPF_LINKER_VERSION: &str = "0.10.0";

/// Whether we run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn output(command: &mut Command) -> Option<String> {
    command
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
}

fn step(
    what: &str,
    present: bool,
    install: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    if present {
        println!("setup: {what}: present");
        Ok(())
    } else {
        println!("setup: {what}: installing");
        install().with_context(|| format!("installing {what}"))?;
        println!("setup: {what}: installed");
        Ok(())
    }
}

/// Installs the nightly toolchain's rust-src, bpf-linker and gcc when missing.
pub fn run() -> anyhow::Result<()> {
    let toolchains = output(Command::new("rustup").args(["toolchain", "list"]))
        .context("rustup is needed to build the eBPF program (https://rustup.rs)")?;
    step(
        "nightly toolchain",
        toolchains.lines().any(|l| l.starts_with("nightly")),
        || {
            run_checked(Command::new("rustup").args([
                "toolchain",
                "install",
                "nightly",
                "--profile",
                "minimal",
            ]))
        },
    )?;
    let components = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))
    .unwrap_or_default();
    step(
        "rust-src for nightly (eBPF builds core with -Z build-std)",
        components.lines().any(|l| l.starts_with("rust-src")),
        || {
            run_checked(Command::new("rustup").args([
                "component",
                "add",
                "rust-src",
                "--toolchain",
                "nightly",
            ]))
        },
    )?;
    let linker = output(Command::new("bpf-linker").arg("--version")).unwrap_or_default();
    step(
        &format!("bpf-linker {BPF_LINKER_VERSION}"),
        linker.split_whitespace().any(|w| w == BPF_LINKER_VERSION),
        || {
            run_checked(Command::new("cargo").args([
                "install",
                &format!("bpf-linker@{BPF_LINKER_VERSION}"),
                "--locked",
                "--force",
            ]))
        },
    )?;
    let stable = output(Command::new("rustup").args(["component", "list", "--installed"]))
        .unwrap_or_default();
    for component in ["rustfmt", "clippy"] {
        step(
            &format!("{component} (cargo xtask lint)"),
            stable.lines().any(|l| l.starts_with(component)),
            || run_checked(Command::new("rustup").args(["component", "add", component])),
        )?;
    }
    step(
        "gcc (builds the test fixtures)",
        output(Command::new("gcc").arg("--version")).is_some(),
        || apt_install(&["gcc", "libc6-dev"]),
    )?;
    Ok(())
}

fn apt_install(packages: &[&str]) -> anyhow::Result<()> {
    if !is_root() {
        bail!(
            "installing Debian packages needs root: run `sudo apt-get install -y {}`",
            packages.join(" ")
        );
    }
    run_checked(
        Command::new("apt-get")
            .arg("update")
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    run_checked(
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// Installs cargo-fuzz when missing.
pub fn ensure_cargo_fuzz() -> anyhow::Result<()> {
    step(
        "cargo-fuzz",
        output(Command::new("cargo").args(["fuzz", "--version"])).is_some(),
        || run_checked(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"])),
    )
}
