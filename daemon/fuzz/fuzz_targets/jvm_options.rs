//! HotSpot options from any command line and environment: parsing never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::jvm_options::parse;

fuzz_target!(|data: &[u8]| {
    // Up to the first 0xff byte, the command line; after it, the environment.
    let split = data.iter().position(|&b| b == 0xff).unwrap_or(data.len());
    let (cmdline, environ) = data.split_at(split);
    let _ = parse(cmdline, environ.get(1..).unwrap_or_default());
});
