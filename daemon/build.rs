//! Builds the eBPF program (`ebpf/vmscope-ebpf`) for the bpf target with the nightly toolchain
//! and bpf-linker (`cargo xtask setup` installs both), leaving the object in `OUT_DIR`, where
//! `src/bpf/mod.rs` embeds it.

fn main() -> aya_build::Result<()> {
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
