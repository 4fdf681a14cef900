//! HPACK's Huffman code (RFC 7541, section 5.2 and Appendix B), decoding only.
//!
//! The code is canonical: codes of one length are consecutive numbers, in symbol order, and
//! each length's first code follows from the previous length's last. So a decoder needs no tree:
//! per length, the first code, how many codes there are, and where their symbols start in a list
//! of symbols sorted by code length. Those tables are computed at compile time from the code
//! table below, which `tests::every_code_decodes_to_its_symbol` checks against the property.

/// Bit length and code (right-aligned) of each symbol: the 256 octets, then EOS (256). RFC 7541,
/// Appendix B.
const CODES: [(u8, u32); 257] = [
    (13, 0x1ff8),
    (23, 0x7fffd8),
    (28, 0xfffffe2),
    (28, 0xfffffe3),
    (28, 0xfffffe4),
    (28, 0xfffffe5),
    (28, 0xfffffe6),
    (28, 0xfffffe7),
    (28, 0xfffffe8),
    (24, 0xffffea),
    (30, 0x3ffffffc),
    (28, 0xfffffe9),
    (28, 0xfffffea),
    (30, 0x3ffffffd),
    (28, 0xfffffeb),
    (28, 0xfffffec),
    (28, 0xfffffed),
    (28, 0xfffffee),
    (28, 0xfffffef),
    (28, 0xffffff0),
    (28, 0xffffff1),
    (28, 0xffffff2),
    (30, 0x3ffffffe),
    (28, 0xffffff3),
    (28, 0xffffff4),
    (28, 0xffffff5),
    (28, 0xffffff6),
    (28, 0xffffff7),
    (28, 0xffffff8),
    (28, 0xffffff9),
    (28, 0xffffffa),
    (28, 0xffffffb),
    (6, 0x14),
    (10, 0x3f8),
    (10, 0x3f9),
    (12, 0xffa),
    (13, 0x1ff9),
    (6, 0x15),
    (8, 0xf8),
    (11, 0x7fa),
    (10, 0x3fa),
    (10, 0x3fb),
    (8, 0xf9),
    (11, 0x7fb),
    (8, 0xfa),
    (6, 0x16),
    (6, 0x17),
    (6, 0x18),
    (5, 0x0),
    (5, 0x1),
    (5, 0x2),
    (6, 0x19),
    (6, 0x1a),
    (6, 0x1b),
    (6, 0x1c),
    (6, 0x1d),
    (6, 0x1e),
    (6, 0x1f),
    (7, 0x5c),
    (8, 0xfb),
    (15, 0x7ffc),
    (6, 0x20),
    (12, 0xffb),
    (10, 0x3fc),
    (13, 0x1ffa),
    (6, 0x21),
    (7, 0x5d),
    (7, 0x5e),
    (7, 0x5f),
    (7, 0x60),
    (7, 0x61),
    (7, 0x62),
    (7, 0x63),
    (7, 0x64),
    (7, 0x65),
    (7, 0x66),
    (7, 0x67),
    (7, 0x68),
    (7, 0x69),
    (7, 0x6a),
    (7, 0x6b),
    (7, 0x6c),
    (7, 0x6d),
    (7, 0x6e),
    (7, 0x6f),
    (7, 0x70),
    (7, 0x71),
    (7, 0x72),
    (8, 0xfc),
    (7, 0x73),
    (8, 0xfd),
    (13, 0x1ffb),
    (19, 0x7fff0),
    (13, 0x1ffc),
    (14, 0x3ffc),
    (6, 0x22),
    (15, 0x7ffd),
    (5, 0x3),
    (6, 0x23),
    (5, 0x4),
    (6, 0x24),
    (5, 0x5),
    (6, 0x25),
    (6, 0x26),
    (6, 0x27),
    (5, 0x6),
    (7, 0x74),
    (7, 0x75),
    (6, 0x28),
    (6, 0x29),
    (6, 0x2a),
    (5, 0x7),
    (6, 0x2b),
    (7, 0x76),
    (6, 0x2c),
    (5, 0x8),
    (5, 0x9),
    (6, 0x2d),
    (7, 0x77),
    (7, 0x78),
    (7, 0x79),
    (7, 0x7a),
    (7, 0x7b),
    (15, 0x7ffe),
    (11, 0x7fc),
    (14, 0x3ffd),
    (13, 0x1ffd),
    (28, 0xffffffc),
    (20, 0xfffe6),
    (22, 0x3fffd2),
    (20, 0xfffe7),
    (20, 0xfffe8),
    (22, 0x3fffd3),
    (22, 0x3fffd4),
    (22, 0x3fffd5),
    (23, 0x7fffd9),
    (22, 0x3fffd6),
    (23, 0x7fffda),
    (23, 0x7fffdb),
    (23, 0x7fffdc),
    (23, 0x7fffdd),
    (23, 0x7fffde),
    (24, 0xffffeb),
    (23, 0x7fffdf),
    (24, 0xffffec),
    (24, 0xffffed),
    (22, 0x3fffd7),
    (23, 0x7fffe0),
    (24, 0xffffee),
    (23, 0x7fffe1),
    (23, 0x7fffe2),
    (23, 0x7fffe3),
    (23, 0x7fffe4),
    (21, 0x1fffdc),
    (22, 0x3fffd8),
    (23, 0x7fffe5),
    (22, 0x3fffd9),
    (23, 0x7fffe6),
    (23, 0x7fffe7),
    (24, 0xffffef),
    (22, 0x3fffda),
    (21, 0x1fffdd),
    (20, 0xfffe9),
    (22, 0x3fffdb),
    (22, 0x3fffdc),
    (23, 0x7fffe8),
    (23, 0x7fffe9),
    (21, 0x1fffde),
    (23, 0x7fffea),
    (22, 0x3fffdd),
    (22, 0x3fffde),
    (24, 0xfffff0),
    (21, 0x1fffdf),
    (22, 0x3fffdf),
    (23, 0x7fffeb),
    (23, 0x7fffec),
    (21, 0x1fffe0),
    (21, 0x1fffe1),
    (22, 0x3fffe0),
    (21, 0x1fffe2),
    (23, 0x7fffed),
    (22, 0x3fffe1),
    (23, 0x7fffee),
    (23, 0x7fffef),
    (20, 0xfffea),
    (22, 0x3fffe2),
    (22, 0x3fffe3),
    (22, 0x3fffe4),
    (23, 0x7ffff0),
    (22, 0x3fffe5),
    (22, 0x3fffe6),
    (23, 0x7ffff1),
    (26, 0x3ffffe0),
    (26, 0x3ffffe1),
    (20, 0xfffeb),
    (19, 0x7fff1),
    (22, 0x3fffe7),
    (23, 0x7ffff2),
    (22, 0x3fffe8),
    (25, 0x1ffffec),
    (26, 0x3ffffe2),
    (26, 0x3ffffe3),
    (26, 0x3ffffe4),
    (27, 0x7ffffde),
    (27, 0x7ffffdf),
    (26, 0x3ffffe5),
    (24, 0xfffff1),
    (25, 0x1ffffed),
    (19, 0x7fff2),
    (21, 0x1fffe3),
    (26, 0x3ffffe6),
    (27, 0x7ffffe0),
    (27, 0x7ffffe1),
    (26, 0x3ffffe7),
    (27, 0x7ffffe2),
    (24, 0xfffff2),
    (21, 0x1fffe4),
    (21, 0x1fffe5),
    (26, 0x3ffffe8),
    (26, 0x3ffffe9),
    (28, 0xffffffd),
    (27, 0x7ffffe3),
    (27, 0x7ffffe4),
    (27, 0x7ffffe5),
    (20, 0xfffec),
    (24, 0xfffff3),
    (20, 0xfffed),
    (21, 0x1fffe6),
    (22, 0x3fffe9),
    (21, 0x1fffe7),
    (21, 0x1fffe8),
    (23, 0x7ffff3),
    (22, 0x3fffea),
    (22, 0x3fffeb),
    (25, 0x1ffffee),
    (25, 0x1ffffef),
    (24, 0xfffff4),
    (24, 0xfffff5),
    (26, 0x3ffffea),
    (23, 0x7ffff4),
    (26, 0x3ffffeb),
    (27, 0x7ffffe6),
    (26, 0x3ffffec),
    (26, 0x3ffffed),
    (27, 0x7ffffe7),
    (27, 0x7ffffe8),
    (27, 0x7ffffe9),
    (27, 0x7ffffea),
    (27, 0x7ffffeb),
    (28, 0xffffffe),
    (27, 0x7ffffec),
    (27, 0x7ffffed),
    (27, 0x7ffffee),
    (27, 0x7ffffef),
    (27, 0x7fffff0),
    (26, 0x3ffffee),
    (30, 0x3fffffff),
];

/// The end-of-string symbol: never valid inside a string, its leading bits pad the last octet.
const EOS: u16 = 256;
/// Longest code, in bits (EOS's).
const MAX_BITS: usize = 30;

/// How many codes have each bit length.
const COUNT: [u32; MAX_BITS + 1] = {
    let mut count = [0; MAX_BITS + 1];
    let mut symbol = 0;
    while symbol < CODES.len() {
        count[CODES[symbol].0 as usize] += 1;
        symbol += 1;
    }
    count
};

/// The first (smallest) code of each bit length, as a canonical code assigns them.
const FIRST: [u32; MAX_BITS + 1] = {
    let mut first = [0; MAX_BITS + 1];
    let mut code = 0;
    let mut bits = 1;
    while bits <= MAX_BITS {
        code = (code + COUNT[bits - 1]) << 1;
        first[bits] = code;
        bits += 1;
    }
    first
};

/// Where the symbols of each bit length start in [`SORTED`].
const OFFSET: [usize; MAX_BITS + 1] = {
    let mut offset = [0; MAX_BITS + 1];
    let mut bits = 1;
    while bits <= MAX_BITS {
        offset[bits] = offset[bits - 1] + COUNT[bits - 1] as usize;
        bits += 1;
    }
    offset
};

/// The symbols sorted by code length, then by symbol: canonical code order.
const SORTED: [u16; 257] = {
    let mut sorted = [0; 257];
    let mut next = OFFSET;
    let mut symbol = 0;
    while symbol < CODES.len() {
        let bits = CODES[symbol].0 as usize;
        sorted[next[bits]] = symbol as u16;
        next[bits] += 1;
        symbol += 1;
    }
    sorted
};

/// Why a Huffman string does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HuffmanError {
    /// The string holds the EOS symbol, which RFC 7541 makes a decoding error.
    Eos,
    /// The last octet's padding is longer than 7 bits, or not the EOS code's leading ones.
    Padding,
}

/// Decodes `input`, calling `emit` with each octet; what h2 decodes, h2 refuses what it does.
pub fn decode_with(input: &[u8], mut emit: impl FnMut(u8)) -> Result<(), HuffmanError> {
    let mut code: u32 = 0;
    let mut bits = 0;
    for &byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            bits += 1;
            // Canonical: a prefix past its length's codes leads to longer ones.
            let rank = code.wrapping_sub(FIRST[bits]);
            if rank < COUNT[bits] {
                match SORTED[OFFSET[bits] + rank as usize] {
                    EOS => return Err(HuffmanError::Eos),
                    symbol => emit(symbol as u8),
                }
                code = 0;
                bits = 0;
            } else if bits == MAX_BITS {
                // Unreachable with a complete code, kept so that no input can index past the
                // tables.
                return Err(HuffmanError::Padding);
            }
        }
    }
    // Padding: fewer than 8 bits, all ones (the most significant bits of EOS).
    if bits > 7 || code != (1 << bits) - 1 {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

/// Decodes `input`, appending the octets to `out`.
pub fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    decode_with(input, |b| out.push(b))
}

/// Length of the decoded string.
pub fn decoded_len(input: &[u8]) -> Result<usize, HuffmanError> {
    let mut len = 0;
    decode_with(input, |_| len += 1)?;
    Ok(len)
}

/// Encodes `input` (for tests: the rewriter never encodes with Huffman).
#[cfg(test)]
pub fn encode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut acc: u64 = 0;
    let mut bits = 0;
    for &byte in input {
        let (len, code) = CODES[usize::from(byte)];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        // Pad with the leading ones of EOS.
        out.push(((acc << (8 - bits)) as u8) | (0xff >> bits));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_decodes_to_its_symbol() {
        // The tables assume a canonical code: this fails if the code table is not one.
        for (symbol, &(bits, code)) in CODES.iter().enumerate() {
            let bits = usize::from(bits);
            let rank = code - FIRST[bits];
            assert!(rank < COUNT[bits], "symbol {symbol}");
            assert_eq!(usize::from(SORTED[OFFSET[bits] + rank as usize]), symbol);
        }
        let all: Vec<u8> = (0..=255).collect();
        let mut out = Vec::new();
        decode(&encode(&all), &mut out).unwrap();
        assert_eq!(out, all);
    }

    #[test]
    fn decodes_rfc_7541_examples() {
        // C.4.1 and C.4.3.
        let cases: [(&[u8], &[u8]); 3] = [
            (
                &[
                    0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
                ],
                b"www.example.com",
            ),
            (&[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf], b"no-cache"),
            (
                &[0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xb8, 0xe8, 0xb4, 0xbf],
                b"custom-value",
            ),
        ];
        for (input, expected) in cases {
            let mut out = Vec::new();
            decode(input, &mut out).unwrap();
            assert_eq!(out, expected);
            assert_eq!(decoded_len(input), Ok(expected.len()));
            assert_eq!(encode(expected), input);
        }
    }

    #[test]
    fn refuses_eos_and_bad_padding() {
        let cases: [(&[u8], HuffmanError); 4] = [
            // EOS, 30 ones, then two padding ones.
            (&[0xff, 0xff, 0xff, 0xff], HuffmanError::Eos),
            // '0' (00000) padded with zeros.
            (&[0x00], HuffmanError::Padding),
            // A whole octet of padding after 'a' (00011) + 3 ones.
            (&[0x1f, 0xff], HuffmanError::Padding),
            // An unfinished 13-bit code: 8 ones is a prefix, not padding.
            (&[0xff], HuffmanError::Padding),
        ];
        for (input, error) in cases {
            assert_eq!(decoded_len(input), Err(error), "{input:x?}");
        }
        assert_eq!(decoded_len(&[]), Ok(0));
    }
}
