//! Side-band perf records from any bytes: parsing never panics, and a record parsed fits in
//! the size its header gives.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::perf_record::{parse_record, record_size};

fuzz_target!(|data: &[u8]| {
    if let Ok(size) = record_size(data)
        && parse_record(data).is_ok()
    {
        assert!(size <= data.len());
    }
});
