//! Jitdump parsing never panics on hostile files, walks them as the daemon does (header, then
//! records until one is incomplete or wrong), and every record it returns is consistent; a
//! debug info record read again by file name length never panics either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::jitdump::{
    HEADER_SIZE, RECORD_HEADER_SIZE, Record, next_record, parse_header, reread_debug_info,
};

fuzz_target!(|data: &[u8]| {
    let Ok(Some(header)) = parse_header(data) else {
        return;
    };
    let mut pos = header.header_size as usize;
    assert!(pos >= HEADER_SIZE && pos <= data.len());
    while let Ok(Some((record, used))) = next_record(&data[pos..], header.endian) {
        assert!(used >= RECORD_HEADER_SIZE && used <= data.len() - pos);
        match &record {
            Record::CodeLoad {
                code_addr,
                code_size,
                ..
            } => assert!(code_addr.checked_add(*code_size).is_some()),
            Record::CodeMove {
                old_code_addr,
                new_code_addr,
                code_size,
                ..
            } => {
                assert!(old_code_addr.checked_add(*code_size).is_some());
                assert!(new_code_addr.checked_add(*code_size).is_some());
            }
            // Each entry takes at least 17 bytes of the record: nr_entry alone allocates nothing.
            Record::DebugInfo { entries, .. } => {
                assert!(entries.len() * 17 <= used);
                // Read again with file names of a given length, as for V8: the same count of
                // entries, each name within the record.
                let record = &data[pos..pos + used];
                for len in [0, 1, entries.first().map_or(7, |e| e.file.len())] {
                    if let Some(again) = reread_debug_info(record, header.endian, len) {
                        assert_eq!(again.len(), entries.len());
                        assert!(again.iter().all(|e| e.file.len() < used));
                    }
                }
            }
            Record::UnwindingInfo {
                eh_frame_hdr_size,
                data: unwind,
                ..
            } => {
                assert!(*eh_frame_hdr_size <= unwind.len() as u64);
                assert!(unwind.len() < used);
            }
            Record::Close { .. } | Record::Unknown { .. } => {}
        }
        // The same record cut short is incomplete, not an error: the daemon waits for it.
        assert!(matches!(
            next_record(&data[pos..pos + used - 1], header.endian),
            Ok(None)
        ));
        pos += used;
    }
});
