//! The vmscope gRPC API, `vmscope.v1`, as Rust types, a tonic client and a tonic server trait.
//!
//! The source of truth is `proto/vmscope/v1/profiler.proto`; its comments document every call
//! and field. Generated at build time with a vendored `protoc`, so users need no protobuf
//! toolchain.
#![deny(missing_docs)]

/// Messages, client and server of `vmscope.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("vmscope.v1");

    /// Encoded `FileDescriptorSet` of the API, for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/vmscope_v1_descriptor.bin"));
}

/// Frequency a session samples at when the request does not say: the cadence of Cog's
/// VMProfiler.
pub const DEFAULT_FREQUENCY_HZ: u32 = 1400;

/// Socket path the daemon listens on and clients connect to unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/vmscope/vmscoped.sock";

/// Environment variable that overrides [`DEFAULT_SOCKET`] for both the daemon and the CLI.
pub const SOCKET_ENV: &str = "VMSCOPE_SOCKET";
