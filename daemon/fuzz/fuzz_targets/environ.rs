//! A hostile `/proc/PID/environ` never panics the service name parser.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::environ::service_name;

fuzz_target!(|data: &[u8]| {
    if let Some(name) = service_name(data) {
        assert!(!name.is_empty());
    }
});
