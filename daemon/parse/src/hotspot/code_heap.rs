//! The code cache's heaps, their blocks, and the code blob in each block.
//!
//! A code heap is a range of memory cut into segments (128 bytes on x86_64) and a segment map
//! with one byte per segment: 0 where a block starts, otherwise how many segments to step back
//! towards its start (at most 0xFE per step), 0xFF for a segment that is free. HotSpot's
//! `CodeHeap::find_block_for` walks the map back from a pc's segment to the block's start;
//! [`walk_segmap`] does the same over a window of the map, so that the caller reads only
//! what the walk needs. A used block starts with a `HeapBlock` header (its length in segments
//! and a used flag), and the code blob follows it.

use super::layout::{BlobLayout, CodeBounds, HeapLayout};

/// The segment map's mark for a free segment (`CodeHeap::free_sentinel`).
pub const FREE_SEGMENT: u8 = 0xFF;

/// Largest frame believed, in words: HotSpot's biggest (the safepoint blobs', with every
/// vector register saved) are a few hundred.
pub const MAX_FRAME_WORDS: u64 = 1 << 16;

/// One code heap, as its `CodeHeap` object says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heap {
    /// First byte.
    pub low: u64,
    /// End of the committed part.
    pub high: u64,
    /// Address of the segment map.
    pub segmap: u64,
    /// log2 of the segment size.
    pub log2_segment: u32,
}

impl Heap {
    /// The heap a `CodeHeap` object's bytes describe, if they are plausible.
    pub fn parse(bytes: &[u8], layout: &HeapLayout) -> Option<Heap> {
        let low = layout.memory_low.get_u64(bytes)?;
        let high = layout.memory_high.get_u64(bytes)?;
        let segmap = layout.segmap_low.get_u64(bytes)?;
        let log2 = layout.log2_segment_size.get(bytes)?;
        if low == 0 || high <= low || segmap == 0 || !(4..=16).contains(&log2) {
            return None;
        }
        Some(Heap {
            low,
            high,
            segmap,
            log2_segment: log2 as u32,
        })
    }

    /// Whether `pc` is in the committed part.
    pub fn contains(&self, pc: u64) -> bool {
        (self.low..self.high).contains(&pc)
    }

    /// The segment `pc` is in (`pc` must be in the heap).
    pub fn segment_of(&self, pc: u64) -> u64 {
        (pc - self.low) >> self.log2_segment
    }

    /// The first byte of segment `segment`.
    pub fn segment_start(&self, segment: u64) -> u64 {
        self.low + (segment << self.log2_segment)
    }
}

/// Where a step of the segment map walk got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// The block starts at this segment.
    Start(u64),
    /// The segment is free, or the map contradicts itself: no block holds it.
    Free,
    /// The walk continues at this segment, before the window: read the map there.
    Before(u64),
}

/// Walks the segment map back from segment `from`, over `window`: the map's bytes for the
/// segments `first..first + window.len()`, which must hold `from`.
pub fn walk_segmap(window: &[u8], first: u64, from: u64) -> Walk {
    let mut at = from;
    loop {
        let Some(&hop) = at
            .checked_sub(first)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| window.get(i))
        else {
            return Walk::Free;
        };
        match hop {
            0 => return Walk::Start(at),
            FREE_SEGMENT => return Walk::Free,
            hop => {
                let Some(next) = at.checked_sub(u64::from(hop)) else {
                    return Walk::Free;
                };
                if next < first {
                    return Walk::Before(next);
                }
                at = next;
            }
        }
    }
}

/// What kind of code a blob holds, as far as unwinding cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobKind {
    /// A compiled Java method, or the wrapper of a native one: has a `Method*`.
    Nmethod,
    /// Anything else: the interpreter, stubs, adapters, the call stub.
    Other,
}

/// A code blob's header, as read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blob {
    /// The blob's first byte (after its block's header).
    pub start: u64,
    /// Its size in bytes.
    pub size: u64,
    /// First instruction.
    pub code_begin: u64,
    /// End of the instructions.
    pub code_end: u64,
    /// Where its frame is complete: before it (in the prologue), the frame is not built yet.
    pub frame_complete: u64,
    /// Its frame in words, return address included; 0 for code without a frame of its own.
    pub frame_words: u64,
    /// Address of its name (a C string in libjvm).
    pub name: u64,
    /// Its `Method*` and compile id, for an nmethod; 0 otherwise.
    pub method: u64,
    /// The compile id of an nmethod (unique for the JVM's life); 0 otherwise.
    pub compile_id: i64,
}

impl Blob {
    /// Whether `pc` is in its instructions.
    pub fn contains(&self, pc: u64) -> bool {
        (self.code_begin..self.code_end).contains(&pc)
    }
}

/// Why a block holds no blob that can be believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockError {
    /// The bytes read are too few for the header.
    Short,
    /// The block is free.
    Free,
    /// The header contradicts itself or its block.
    Inconsistent,
}

/// The length in segments of the block whose header starts `bytes` (free or used): where a
/// walk of the whole heap goes next. `None` for a header cut short or a length of 0, which a
/// heap never holds (a walk would not move).
pub fn block_segments(bytes: &[u8], layout: &HeapLayout) -> Option<u64> {
    layout
        .block_length
        .get_u64(bytes)
        .filter(|&length| length > 0)
}

/// The blob in the block at `block`, from `bytes` read there (the block header and at least
/// `blob.read_size` more); `is_nmethod` tells nmethods from other blobs by their name's
/// address (JDK 17 has no kind field: its nmethods are named `nmethod` or `native nmethod`).
pub fn parse_block(
    bytes: &[u8],
    block: u64,
    heap: &Heap,
    layout: &HeapLayout,
    blob: &BlobLayout,
    is_nmethod: impl FnOnce(u64) -> bool,
) -> Result<Blob, BlockError> {
    let header = usize::try_from(layout.block_header).map_err(|_| BlockError::Short)?;
    let used = layout.block_used.get(bytes).ok_or(BlockError::Short)?;
    let length = layout
        .block_length
        .get_u64(bytes)
        .ok_or(BlockError::Short)?;
    if used & 0xff == 0 {
        return Err(BlockError::Free);
    }
    let body = bytes.get(header..).ok_or(BlockError::Short)?;
    let start = block + layout.block_header;
    let block_bytes = length
        .checked_shl(heap.log2_segment)
        .filter(|&b| b > 0 && b <= heap.high - block)
        .ok_or(BlockError::Inconsistent)?;
    let size = blob.size.get_u64(body).ok_or(BlockError::Short)?;
    if size == 0 || size > block_bytes - layout.block_header.min(block_bytes) {
        return Err(BlockError::Inconsistent);
    }
    let end = start + size;
    let (code_begin, code_end) = match blob.code {
        CodeBounds::Pointers { begin, end } => (
            begin.get_u64(body).ok_or(BlockError::Short)?,
            end.get_u64(body).ok_or(BlockError::Short)?,
        ),
        CodeBounds::Offsets { code, data } => (
            start.wrapping_add(code.get_u64(body).ok_or(BlockError::Short)?),
            start.wrapping_add(data.get_u64(body).ok_or(BlockError::Short)?),
        ),
    };
    if !(start <= code_begin && code_begin <= code_end && code_end <= end) {
        return Err(BlockError::Inconsistent);
    }
    let frame_words = blob.frame_size.get(body).ok_or(BlockError::Short)?;
    let frame_words = u64::try_from(frame_words)
        .ok()
        .filter(|&w| w <= MAX_FRAME_WORDS)
        .ok_or(BlockError::Inconsistent)?;
    // -1 means "not known" (some stubs): as if complete at the start.
    let complete = blob
        .frame_complete_offset
        .get(body)
        .ok_or(BlockError::Short)?;
    let frame_complete = code_begin
        .saturating_add(u64::try_from(complete).unwrap_or(0))
        .min(code_end);
    let name = blob.name.get_u64(body).ok_or(BlockError::Short)?;
    let (method, compile_id) = if is_nmethod(name) {
        (
            blob.method.get_u64(body).ok_or(BlockError::Short)?,
            blob.compile_id.get(body).ok_or(BlockError::Short)?,
        )
    } else {
        (0, 0)
    };
    Ok(Blob {
        start,
        size,
        code_begin,
        code_end,
        frame_complete,
        frame_words,
        name,
        method,
        compile_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hotspot::layout::{Layout, tests::jdk17};

    #[test]
    fn the_walk_steps_back_to_the_block_start_and_asks_for_more_map_before_its_window() {
        // Segments 10..20: a block at 12 (hops 1, 2, 3...), a free one at 17.
        let map = [5, 6, 0, 1, 2, 3, 4, FREE_SEGMENT, FREE_SEGMENT, 0];
        assert_eq!(walk_segmap(&map, 10, 16), Walk::Start(12));
        assert_eq!(walk_segmap(&map, 10, 12), Walk::Start(12));
        assert_eq!(walk_segmap(&map, 10, 17), Walk::Free);
        assert_eq!(walk_segmap(&map, 10, 19), Walk::Start(19));
        assert_eq!(walk_segmap(&map, 10, 11), Walk::Before(5));
        assert_eq!(walk_segmap(&map, 10, 25), Walk::Free, "outside the window");
        assert_eq!(
            walk_segmap(&[7], 3, 3),
            Walk::Free,
            "a hop before segment 0"
        );
    }

    fn block(length_segments: u64, used: bool, blob: &[(u64, &[u8])]) -> Vec<u8> {
        let mut b = vec![0u8; 16 + 320];
        b[0..8].copy_from_slice(&length_segments.to_le_bytes());
        b[8] = u8::from(used);
        for (offset, bytes) in blob {
            let at = 16 + *offset as usize;
            b[at..at + bytes.len()].copy_from_slice(bytes);
        }
        b
    }

    #[test]
    fn an_nmethods_header_is_read_and_checked_against_its_block() {
        let layout = Layout::new(&jdk17()).unwrap();
        let heap = Heap {
            low: 0x1000_0000,
            high: 0x1010_0000,
            segmap: 0x2000_0000,
            log2_segment: 7,
        };
        let at = 0x1000_0400u64;
        let start = at + 16;
        let bytes = block(
            4,
            true,
            &[
                (12, &400i32.to_le_bytes()),
                (20, &16i32.to_le_bytes()),
                (28, &6i32.to_le_bytes()),
                (32, &(start + 0x40).to_le_bytes()),
                (40, &(start + 0x180).to_le_bytes()),
                (96, &0xabcdu64.to_le_bytes()),
                (112, &0x7777_0000u64.to_le_bytes()),
                (304, &42i32.to_le_bytes()),
            ],
        );
        let blob = parse_block(&bytes, at, &heap, &layout.heap, &layout.blob, |n| {
            n == 0xabcd
        })
        .unwrap();
        assert_eq!(
            blob,
            Blob {
                start,
                size: 400,
                code_begin: start + 0x40,
                code_end: start + 0x180,
                frame_complete: start + 0x50,
                frame_words: 6,
                name: 0xabcd,
                method: 0x7777_0000,
                compile_id: 42,
            }
        );
        assert!(blob.contains(start + 0x40) && !blob.contains(start + 0x180));

        let other = parse_block(&bytes, at, &heap, &layout.heap, &layout.blob, |_| false);
        assert_eq!(other.unwrap().method, 0);

        let free = block(4, false, &[]);
        // A scan moves block to block, free or used, by their lengths.
        assert_eq!(block_segments(&bytes, &layout.heap), Some(4));
        assert_eq!(block_segments(&free, &layout.heap), Some(4));
        assert_eq!(block_segments(&block(0, true, &[]), &layout.heap), None);
        assert_eq!(block_segments(&bytes[..4], &layout.heap), None);
        assert_eq!(
            parse_block(&free, at, &heap, &layout.heap, &layout.blob, |_| true),
            Err(BlockError::Free)
        );
        // A blob bigger than its block (4 segments of 128 bytes).
        let mut big = bytes.clone();
        big[16 + 12..16 + 16].copy_from_slice(&600i32.to_le_bytes());
        assert_eq!(
            parse_block(&big, at, &heap, &layout.heap, &layout.blob, |_| true),
            Err(BlockError::Inconsistent)
        );
        // Code outside the blob.
        let mut out = bytes.clone();
        out[16 + 40..16 + 48].copy_from_slice(&(start + 0x1000).to_le_bytes());
        assert_eq!(
            parse_block(&out, at, &heap, &layout.heap, &layout.blob, |_| true),
            Err(BlockError::Inconsistent)
        );
        assert_eq!(
            parse_block(&bytes[..100], at, &heap, &layout.heap, &layout.blob, |_| {
                true
            }),
            Err(BlockError::Short)
        );
    }
}
