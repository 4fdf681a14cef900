//! The vmscope gRPC API, `vmscope.v1`, as Rust types, tonic clients and tonic server traits.
//!
//! The sources of truth are `proto/vmscope/v1/profiler.proto` (sessions and profiles) and
//! `proto/vmscope/v1/codemap.proto` (code maps published by VMs); their comments document every
//! call and field. [`pprof`] holds the messages of google/pprof's `profile.proto`, which
//! vmscope writes pprof files with. Generated at build time with a vendored `protoc`, so users
//! need no protobuf toolchain. [`model`] carries the profile model (`vmscope-model`) as these
//! messages, both ways. Without the default `grpc` feature, only the messages are built.
#![deny(missing_docs)]

/// Messages, client and server of `vmscope.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/vmscope.v1.rs"));

    /// Encoded `FileDescriptorSet` of the API, for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/vmscope_v1_descriptor.bin"));
}

pub mod model;

/// google/pprof's `profile.proto` (package `perftools.profiles`), vendored in
/// `proto/google/pprof/profile.proto`: the messages of a pprof file, before gzip. Its comments
/// are the format's documentation (`string_table[0]` is "", ids are non-zero, the leaf is
/// `location_id[0]`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pprof {
    include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
}

/// Frequency a session samples at when the request does not say: the cadence of Cog's
/// VMProfiler.
pub const DEFAULT_FREQUENCY_HZ: u32 = 1400;

/// Bytes of user stack copied per sample with `CALL_GRAPH_DWARF` when the request names no
/// size: perf's default for `--call-graph dwarf`.
pub const DEFAULT_DWARF_STACK_BYTES: u32 = 8192;

/// Most bytes of user stack a `CALL_GRAPH_DWARF` session may copy per sample: perf's limit.
pub const MAX_DWARF_STACK_BYTES: u32 = 65528;

/// Socket path the daemon listens on and clients connect to unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/vmscope/vmscoped.sock";

/// The stop reason of a session the daemon stopped because every target exited.
pub const STOPPED_ALL_TARGETS_EXITED: &str = "all targets exited";

/// Environment variable that overrides [`DEFAULT_SOCKET`] for both the daemon and the CLI.
pub const SOCKET_ENV: &str = "VMSCOPE_SOCKET";
