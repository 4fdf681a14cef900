//! vmscoped
pub const EBPF: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/vmscope-ebpf"));
