//! HotSpot class histograms from any bytes: parsing never panics, and a histogram it returns
//! adds up to its total.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::class_histogram::parse_class_histogram;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = parse_class_histogram(&String::from_utf8_lossy(data)) {
        let instances: u64 = h.classes.iter().map(|c| c.instances).sum();
        assert_eq!(instances, h.total_instances);
    }
});
