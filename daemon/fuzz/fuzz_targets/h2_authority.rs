//! The `:authority` rewriter never panics and holds back a bounded amount; its output does not
//! depend on how the client's bytes are cut; what it did not rewrite comes out unchanged; and
//! its output, fed to it again, needs nothing more.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmscope_parse::h2_authority::{AuthorityRewriter, MAX_HEADER_BLOCK, PREFACE};

/// Runs the rewriter over `input` cut into pieces of `piece` bytes.
fn rewrite(input: &[u8], piece: usize) -> (Vec<u8>, AuthorityRewriter) {
    let mut rewriter = AuthorityRewriter::new();
    let mut out = Vec::new();
    for chunk in input.chunks(piece.max(1)) {
        rewriter.feed(chunk, &mut out);
        // At most one header block, and a frame header.
        assert!(rewriter.held() <= MAX_HEADER_BLOCK + 9);
    }
    rewriter.finish(&mut out);
    assert_eq!(rewriter.held(), 0);
    (out, rewriter)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    // So that the fuzzer need not find the preface, and reaches the HPACK reader at once: bit 0
    // adds the preface, bit 1 wraps the rest in one HEADERS frame; the other bits cut pieces.
    let mut input = Vec::new();
    if mode & 1 != 0 {
        input.extend_from_slice(PREFACE);
    }
    if mode & 2 != 0 {
        let len = rest.len().min(0xff_ffff) as u32;
        input.extend_from_slice(&len.to_be_bytes()[1..]);
        input.extend_from_slice(&[0x1, 0x5, 0, 0, 0, 1]);
        input.extend_from_slice(&rest[..len as usize]);
    } else {
        input.extend_from_slice(rest);
    }
    let piece = usize::from(mode >> 2) + 1;

    let (whole, rewriter) = rewrite(&input, input.len());
    let (pieces, _) = rewrite(&input, piece);
    assert!(whole == pieces, "the output depends on the cuts");
    if rewriter.rewritten() == 0 {
        assert!(whole == input, "nothing rewritten, yet the output differs");
    }
    if rewriter.fallback().is_none() {
        let (again, second) = rewrite(&whole, whole.len());
        assert_eq!(second.rewritten(), 0, "{:?}", second.fallback());
        assert!(again == whole);
    }
});
