//! Builds the eBPF program (`ebpf/vmscope-ebpf`) for the bpf target with the nightly toolchain
//! and bpf-linker (`cargo xtask setup` installs both), leaving the object in `OUT_DIR`, where
//! `src/bpf/mod.rs` embeds it.

fn main() -> aya_build::Result<()> {
    // aya-build relays every line the nested cargo prints as a cargo warning, which buries real
    // warnings under "Compiling ..." noise on each build; errors still come through.
    // SAFETY: build scripts are single-threaded; nothing reads the environment concurrently.
    unsafe { std::env::set_var("CARGO_TERM_QUIET", "true") };
    let root_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../ebpf/vmscope-ebpf");
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "vmscope-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::Nightly,
    )
}
