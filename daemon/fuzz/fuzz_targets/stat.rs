//! /proc/PID/stat, /proc/PID/status and /proc/stat parsing never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::stat::{parse_proc_stat_cpu, parse_stat, parse_status};

fuzz_target!(|data: &[u8]| {
    if let Ok(stat) = parse_stat(data) {
        let _ = stat.cpu_ticks();
        let _ = stat.is_zombie();
    }
    let _ = parse_status(data);
    let _ = parse_proc_stat_cpu(data);
});
