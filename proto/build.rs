//! Generates the vmscope.v1 client, server and messages, plus the encoded file descriptor set that
//! the daemon serves through gRPC reflection; and the messages of google/pprof's profile.proto
//! (perftools.profiles), which vmscope writes pprof files with.

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let include = protoc_bin_vendored::include_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { env::set_var("PROTOC", protoc) };

    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let protos = ["vmscope/v1/profiler.proto", "vmscope/v1/codemap.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let grpc = env::var_os("CARGO_FEATURE_GRPC").is_some();
    tonic_prost_build::configure()
        .build_client(grpc)
        .build_server(grpc)
        .file_descriptor_set_path(out_dir.join("vmscope_v1_descriptor.bin"))
        .compile_protos(
            &protos.map(PathBuf::from),
            &[PathBuf::from("."), include.clone()],
        )?;

    // pprof is a file format, not part of our API: messages only, and kept out of the descriptor
    // set that reflection serves.
    let pprof = "google/pprof/profile.proto";
    println!("cargo:rerun-if-changed={pprof}");
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_protos(&[PathBuf::from(pprof)], &[PathBuf::from("."), include])?;
    Ok(())
}
