//! Empty library target: it lets `daemon/build.rs` declare a build-dependency on this package so
//! that cargo rebuilds the daemon when the eBPF program's dependencies change (aya-build builds
//! the binary itself, for the bpf target).
#![no_std]
