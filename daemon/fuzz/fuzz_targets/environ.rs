//! A hostile `/proc/PID/environ` never panics the service name parser, and any name it finds is
//! within the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::environ::{MAX_SERVICE_NAME, service_name};

fuzz_target!(|data: &[u8]| {
    if let Some(name) = service_name(data) {
        assert!(!name.is_empty() && name.len() <= MAX_SERVICE_NAME);
    }
});
