//! A hostile `/proc/PID/cgroup` never panics the container id parser, and any id it finds is
//! 64 lowercase hex digits that the file holds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::cgroup::{container_id, systemd_service};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Some(id) = container_id(&text) {
        assert_eq!(id.len(), 64);
        assert!(id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert!(text.contains(&id));
    }
    if let Some(service) = systemd_service(&text) {
        assert!(text.contains(&format!("{service}.service")));
    }
});
