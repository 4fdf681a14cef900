//! `cargo xtask setup`: install what a fresh machine lacks, idempotently.

use std::{path::PathBuf, process::Command};

use anyhow::{Context, bail};

use crate::run_checked;

/// bpf-linker version that matches the nightly's LLVM 22 (0.11+ wants LLVM 23).
pub const BPF_LINKER_VERSION: &str = "0.10.0";

/// Python packages of the gRPC C-core client the end-to-end tests drive (tests/tests/grpcio.rs),
/// pinned with what they need: grpcio sends the socket path as `:authority` over a Unix socket.
/// tests/src/lib.rs (`GRPCIO_VERSION`) checks the grpcio version. The OpenTelemetry project's
/// own generated messages and service for OTLP profiles make the test's OTLP receiver
/// (tests/clients/otlp_receiver.py).
const GRPCIO_PACKAGES: [(&str, &str); 5] = [
    ("grpcio", "1.85.1"),
    ("grpcio-reflection", "1.85.1"),
    ("protobuf", "7.36.2"),
    ("typing-extensions", "4.16.0"),
    ("opentelemetry-proto", "1.45.2"),
];

/// The virtualenv holding [`GRPCIO_PACKAGES`]: `$VMSCOPE_GRPCIO_VENV`, by default
/// `$HOME/.cache/vmscope/grpcio-venv`. tests/src/lib.rs (`grpcio_python`) looks in the same
/// place.
pub(crate) fn grpcio_venv() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("VMSCOPE_GRPCIO_VENV") {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME").context("HOME is not set; set VMSCOPE_GRPCIO_VENV")?;
    Ok(PathBuf::from(home).join(".cache/vmscope/grpcio-venv"))
}

/// Whether the virtualenv's Python imports the pinned grpcio, grpcio-reflection, protobuf and
/// opentelemetry-proto.
fn grpcio_present(venv: &std::path::Path) -> bool {
    let expected = format!(
        "{} {} {} {}",
        GRPCIO_PACKAGES[0].1, GRPCIO_PACKAGES[1].1, GRPCIO_PACKAGES[2].1, GRPCIO_PACKAGES[4].1
    );
    output(Command::new(venv.join("bin/python")).args([
        "-c",
        "import grpc, grpc_reflection, google.protobuf as p; \
         import opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2_grpc; \
         from importlib.metadata import version; \
         print(grpc.__version__, version('grpcio-reflection'), p.__version__, \
               version('opentelemetry-proto'))",
    ]))
    .is_some_and(|v| v.trim() == expected)
}

/// Creates the virtualenv afresh with the machine's Python and installs the pinned packages.
fn install_grpcio(venv: &std::path::Path) -> anyhow::Result<()> {
    // Debian splits ensurepip, which venv needs, into python3-venv.
    if output(Command::new("python3").args(["-c", "import venv, ensurepip"])).is_none() {
        apt_install(&["python3-venv"])?;
    }
    run_checked(
        Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(venv),
    )?;
    run_checked(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(GRPCIO_PACKAGES.map(|(name, version)| format!("{name}=={version}"))),
    )
}

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

/// Installs the nightly toolchain's rust-src, bpf-linker, gcc, the runtimes the tests profile, Go
/// (for `go tool pprof`) and the tests' Python gRPC client when missing.
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
    // The tests compare vmscope's kernel counts with `perf stat` on the same program.
    step(
        "perf (`perf stat`: the kernel counts' reference)",
        output(Command::new("perf").arg("--version")).is_some(),
        || apt_install(&["linux-perf"]),
    )?;
    // The daemon splits context switches into voluntary and not with the sched_switch
    // tracepoint, whose id tracefs gives; some machines boot without it mounted.
    let tracefs = std::path::Path::new("/sys/kernel/tracing");
    if is_root() {
        step(
            "tracefs at /sys/kernel/tracing (voluntary context switches in the report's Events)",
            tracefs.join("events").exists(),
            || {
                run_checked(Command::new("mount").args([
                    "-t",
                    "tracefs",
                    "nodev",
                    "/sys/kernel/tracing",
                ]))
            },
        )?;
    } else if !tracefs.join("events").exists() {
        println!(
            "setup: tracefs is not mounted and only root can mount it: reports will not split \
             context switches into voluntary and involuntary ones"
        );
    }
    // Real runtimes the end-to-end tests profile (DESIGN.md "Real clients").
    step(
        "Node.js (a real JIT: perf maps, jitdump)",
        output(Command::new("node").arg("--version")).is_some(),
        || apt_install(&["nodejs"]),
    )?;
    step(
        "a JDK (java and javac: HotSpot, whose VM is libjvm.so)",
        output(Command::new("javac").arg("-version")).is_some(),
        || apt_install(&["openjdk-17-jdk-headless"]),
    )?;
    step(
        "sqlite3 (its VDBE is a bytecode VM in a library)",
        output(Command::new("sqlite3").arg("--version")).is_some(),
        || apt_install(&["sqlite3"]),
    )?;
    // A pprof reader nobody on this project wrote: tests/tests/pprof.rs checks our pprof files
    // with `go tool pprof`, which ships with Go.
    step(
        "Go (`go tool pprof` reads vmscope's pprof files)",
        output(Command::new("go").args(["tool", "-n", "pprof"])).is_some(),
        || apt_install(&["golang-go"]),
    )?;
    // The HTTP endpoint's readers (tests/tests/http.rs): Prometheus's own checker of metrics
    // pages, and curl for the requests go tool pprof does not make.
    step(
        "promtool (`promtool check metrics` reads the daemon's /metrics)",
        output(Command::new("promtool").arg("--version")).is_some(),
        || apt_install(&["prometheus"]),
    )?;
    // `cargo xtask package --check` verifies the installed unit with systemd-analyze (no
    // systemd need run).
    step(
        "systemd-analyze (`cargo xtask package --check` verifies the systemd unit)",
        output(Command::new("systemd-analyze").arg("--version")).is_some(),
        || apt_install(&["systemd"]),
    )?;
    step(
        "curl (HTTP requests to the daemon's --http endpoint)",
        output(Command::new("curl").arg("--version")).is_some(),
        || apt_install(&["curl"]),
    )?;
    for version in PYENV_PYTHONS {
        step(
            &format!("CPython {version} built as a shared library, under pyenv"),
            pyenv_shared_python(version).is_some(),
            || install_pyenv_python(version),
        )?;
    }
    let venv = grpcio_venv()?;
    step(
        &format!(
            "Python grpcio {} in {} (the tests' C-core gRPC client)",
            GRPCIO_PACKAGES[0].1,
            venv.display()
        ),
        grpcio_present(&venv),
        || install_grpcio(&venv),
    )?;
    Ok(())
}

/// The CPythons the tests profile, each a build whose VM is `libpython3.x.so`, like the pyenv
/// builds of this machine kind: 3.12 (runtime modules, `-X perf` trampolines) and 3.13
/// (`-X perf_jit`). Keep in step with `tests/src/lib.rs` and `tests/tests/dwarf_stacks.rs`.
pub const PYENV_PYTHONS: [&str; 2] = ["3.12", "3.13"];

/// `$(pyenv root)/versions/VERSION.*/bin/pythonVERSION` when that build has its libpython.
fn pyenv_shared_python(version: &str) -> Option<std::path::PathBuf> {
    let root = output(Command::new("pyenv").arg("root"))?;
    let versions = std::path::Path::new(root.trim()).join("versions");
    let mut found: Vec<std::path::PathBuf> = std::fs::read_dir(versions)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{version}.")))
        })
        .filter(|p| p.join(format!("lib/libpython{version}.so")).exists())
        .collect();
    found.sort();
    found.pop().map(|p| p.join(format!("bin/python{version}")))
}

/// Builds CPython `version` with pyenv as a shared library (a few minutes).
fn install_pyenv_python(version: &str) -> anyhow::Result<()> {
    if output(Command::new("pyenv").arg("--version")).is_none() {
        bail!(
            "pyenv is missing: install it (https://github.com/pyenv/pyenv#installation), then \
             rerun `cargo xtask setup`"
        );
    }
    apt_install(&[
        "make",
        "libssl-dev",
        "zlib1g-dev",
        "libbz2-dev",
        "libreadline-dev",
        "libsqlite3-dev",
        "libffi-dev",
        "liblzma-dev",
    ])?;
    run_checked(
        Command::new("pyenv")
            .args(["install", "--skip-existing", version])
            .env("PYTHON_CONFIGURE_OPTS", "--enable-shared"),
    )
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
