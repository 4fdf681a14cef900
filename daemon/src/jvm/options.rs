//! The HotSpot options of a running JVM, read from `/proc` (the parser is
//! [`vmscope_parse::jvm_options`]).

use std::io;

pub use vmscope_parse::jvm_options::{JvmOptions, parse};

use crate::sys;

/// Largest `/proc/PID/cmdline` or `/proc/PID/environ` read (the kernel caps arguments plus
/// environment at a quarter of the stack limit; 1 MiB is far beyond any real JVM's).
const MAX_ARGS_BYTES: u64 = 1 << 20;

/// Reads the options of the running process `pid` (bounded reads of `/proc/PID/cmdline` and
/// `/proc/PID/environ`; the environment is the one the process started with).
pub fn read(pid: u32) -> io::Result<JvmOptions> {
    let cmdline = sys::read_bounded(&sys::proc_path(pid, "cmdline"), MAX_ARGS_BYTES)?;
    let environ = sys::read_bounded(&sys::proc_path(pid, "environ"), MAX_ARGS_BYTES)?;
    Ok(parse(&cmdline, &environ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_options_read_as_defaults() {
        // The test binary is no JVM: reading it works and finds no HotSpot flag.
        let options = read(std::process::id()).unwrap();
        assert!(!options.attach_disabled);
    }
}
