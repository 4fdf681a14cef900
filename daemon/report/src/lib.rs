//! The vmscope report model, shared by the daemon and the command line.
//!
//! A [`vmscope_proto::v1::Profile`] is what the daemon measured; this crate says what it means,
//! once, for every client: the daemon encodes pprof with it for `GetProfile`, the CLI renders
//! its text, JSON, folded stacks and flame graphs from it.
#![deny(missing_docs)]
