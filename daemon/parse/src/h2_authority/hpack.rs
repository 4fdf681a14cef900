//! A reader of HPACK header blocks (RFC 7541) that replaces the `:authority` values h2 refuses.
//!
//! It tracks the client's dynamic table as the server's decoder will hold it, but keeps of each
//! entry only what that needs: its size, its name's length, and whether it is an `:authority`.
//! A refused value is replaced by one of the same length (see [`replacement`]), so every entry
//! keeps its size: the server's table evicts exactly when the client's does, and every index the
//! client sends later still names the entry it means. Fields keep their place: h2 wants the
//! pseudo-header fields before the others, and C-core sends `:authority` between `:path` and
//! `:method`, so renaming it to an ordinary header would break the request anyway.

use std::collections::VecDeque;

use thiserror::Error;

use super::huffman::{self, HuffmanError};

/// Largest dynamic table this reader follows. h2 refuses a size update above its own
/// SETTINGS_HEADER_TABLE_SIZE (4096 unless the server raises it); this bound only keeps the
/// entries tracked here few (at most 2048 of 32 bytes or more).
pub const MAX_TABLE_SIZE: usize = 65536;

/// `:authority`, the only field rewritten.
const AUTHORITY: &[u8] = b":authority";

/// HPACK's per-entry overhead (RFC 7541, section 4.1).
const ENTRY_OVERHEAD: usize = 32;

/// Names of the static table (RFC 7541, Appendix A), index 1 to 61: their lengths size the
/// entries whose names they lend. Index 1 is `:authority` with an empty value.
const STATIC_NAMES: [&str; 61] = [
    ":authority",
    ":method",
    ":method",
    ":path",
    ":path",
    ":scheme",
    ":scheme",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    ":status",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "accept",
    "access-control-allow-origin",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-range",
    "content-type",
    "cookie",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "link",
    "location",
    "max-forwards",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "refresh",
    "retry-after",
    "server",
    "set-cookie",
    "strict-transport-security",
    "transfer-encoding",
    "user-agent",
    "vary",
    "via",
    "www-authenticate",
];

/// Why a header block could not be read. The caller then forwards it, and all that follows,
/// unchanged: h2 judges it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HpackError {
    /// The block ends inside a field.
    #[error("the header block ends inside a field")]
    Truncated,
    /// An integer longer than h2 reads (five octets).
    #[error("an integer is longer than five octets")]
    IntegerTooLong,
    /// Index 0, which RFC 7541 makes a decoding error.
    #[error("a field refers to index 0")]
    ZeroIndex,
    /// An index past the static and dynamic tables.
    #[error("index {0} is in neither the static nor the dynamic table")]
    UnknownIndex(usize),
    /// A string whose Huffman code does not decode.
    #[error("a Huffman-coded string does not decode: {0:?}")]
    Huffman(HuffmanError),
    /// A dynamic table size update after a field: RFC 7541 allows them at the start only.
    #[error("a dynamic table size update follows a field")]
    LateSizeUpdate,
    /// A dynamic table larger than [`MAX_TABLE_SIZE`].
    #[error("a dynamic table of {0} bytes is larger than this reader follows")]
    TableTooLarge(usize),
}

impl From<HuffmanError> for HpackError {
    fn from(error: HuffmanError) -> Self {
        HpackError::Huffman(error)
    }
}

/// What a dynamic table entry holds, as the server will decode it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Not `:authority`.
    Other,
    /// `:authority` with a value h2 accepts (the client's, or its replacement).
    Authority,
    /// `:authority` with a value h2 refuses: an empty one, which no value of the same size can
    /// replace.
    RefusedAuthority,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    kind: Kind,
    name_len: usize,
    size: usize,
}

/// The dynamic table, newest entry first.
#[derive(Debug)]
struct Table {
    entries: VecDeque<Entry>,
    size: usize,
    max_size: usize,
}

impl Table {
    fn get(&self, index: usize) -> Result<Entry, HpackError> {
        index
            .checked_sub(STATIC_NAMES.len() + 1)
            .and_then(|i| self.entries.get(i).copied())
            .ok_or(HpackError::UnknownIndex(index))
    }

    fn insert(&mut self, entry: Entry) {
        // RFC 7541 section 4.4: evict until it fits; an entry larger than the table empties it.
        while self.size + entry.size > self.max_size {
            match self.entries.pop_back() {
                Some(old) => self.size -= old.size,
                None => return,
            }
        }
        self.size += entry.size;
        self.entries.push_front(entry);
    }

    fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        while self.size > max_size {
            if let Some(old) = self.entries.pop_back() {
                self.size -= old.size;
            }
        }
    }
}

/// How a literal field asks the decoder to treat it (RFC 7541, section 6.2), with the first
/// octet's pattern of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Indexing {
    Incremental,
    Without,
    Never,
}

impl Indexing {
    fn prefix_bits(self) -> u8 {
        match self {
            Indexing::Incremental => 6,
            Indexing::Without | Indexing::Never => 4,
        }
    }

    fn pattern(self) -> u8 {
        match self {
            Indexing::Incremental => 0x40,
            Indexing::Without => 0x00,
            Indexing::Never => 0x10,
        }
    }
}

/// A string literal as it is on the wire.
#[derive(Debug, Clone, Copy)]
struct Literal<'a> {
    huffman: bool,
    bytes: &'a [u8],
}

impl Literal<'_> {
    fn decode(self, out: &mut Vec<u8>) -> Result<(), HpackError> {
        out.clear();
        if self.huffman {
            huffman::decode(self.bytes, out)?;
        } else {
            out.extend_from_slice(self.bytes);
        }
        Ok(())
    }

    fn decoded_len(self) -> Result<usize, HpackError> {
        Ok(if self.huffman {
            huffman::decoded_len(self.bytes)?
        } else {
            self.bytes.len()
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, HpackError> {
        let byte = *self.bytes.get(self.pos).ok_or(HpackError::Truncated)?;
        self.pos += 1;
        Ok(byte)
    }

    /// An integer with an N-bit prefix (RFC 7541, section 5.1), read as h2 reads it: at most
    /// four octets after the prefix.
    fn integer(&mut self, prefix_bits: u8) -> Result<usize, HpackError> {
        let mask = (1u8 << prefix_bits) - 1;
        let mut value = usize::from(self.byte()? & mask);
        if value < usize::from(mask) {
            return Ok(value);
        }
        for shift in [0, 7, 14, 21] {
            let byte = self.byte()?;
            value += usize::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(HpackError::IntegerTooLong)
    }

    fn literal(&mut self) -> Result<Literal<'a>, HpackError> {
        let huffman = self.bytes.get(self.pos).ok_or(HpackError::Truncated)? & 0x80 != 0;
        let len = self.integer(7)?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len())
            .ok_or(HpackError::Truncated)?;
        let bytes = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(Literal { huffman, bytes })
    }
}

/// Whether h2 takes `value` as `:authority`: it parses it with the `http` crate.
pub fn is_accepted(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// A value h2 accepts, of the same length as the refused non-empty `value`: URI unreserved
/// characters stay, every other octet becomes `-` (`tmp%2Fnu%2Fs` becomes `tmp-2Fnu-2Fs`), so
/// the result is a registered name (RFC 3986) and still tells where it came from.
pub fn replacement(value: &[u8]) -> Vec<u8> {
    value
        .iter()
        .map(|&b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => b,
            _ => b'-',
        })
        .collect()
}

/// Writes an integer with an N-bit prefix after the `pattern` bits of its first octet.
pub(super) fn put_integer(out: &mut Vec<u8>, pattern: u8, prefix_bits: u8, value: usize) {
    let mask = (1u8 << prefix_bits) - 1;
    if value < usize::from(mask) {
        out.push(pattern | value as u8);
        return;
    }
    out.push(pattern | mask);
    let mut rest = value - usize::from(mask);
    while rest >= 0x80 {
        out.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// A header block with its refused `:authority` fields replaced or dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    /// The new block.
    pub block: Vec<u8>,
    /// How many fields changed.
    pub fields: usize,
}

/// Follows the header blocks of one connection, client to server, in order.
#[derive(Debug)]
pub struct BlockRewriter {
    table: Table,
    /// A decoded name or `:authority` value.
    scratch: Vec<u8>,
}

impl Default for BlockRewriter {
    fn default() -> Self {
        BlockRewriter {
            table: Table {
                entries: VecDeque::new(),
                size: 0,
                // SETTINGS_HEADER_TABLE_SIZE's initial value (RFC 9113, section 6.5.2).
                max_size: 4096,
            },
            scratch: Vec::new(),
        }
    }
}

/// The output block, copied from the input up to the first change only.
struct Output<'a> {
    input: &'a [u8],
    block: Option<Vec<u8>>,
    copied: usize,
    fields: usize,
}

impl Output<'_> {
    /// Replaces `input[start..end]` (one field) with `with`.
    fn replace(&mut self, start: usize, end: usize, with: &[u8]) {
        let block = self.block.get_or_insert_with(Vec::new);
        block.extend_from_slice(&self.input[self.copied..start]);
        block.extend_from_slice(with);
        self.copied = end;
        self.fields += 1;
    }
}

impl BlockRewriter {
    /// Reads the next header block of the connection (the fragments of a HEADERS frame and its
    /// CONTINUATION frames, put together) and updates the table as the server's decoder will.
    /// `None` when h2 takes the block as it is. After an error the table is lost: the caller
    /// must stop rewriting the connection.
    pub fn rewrite(&mut self, block: &[u8]) -> Result<Option<Rewritten>, HpackError> {
        let mut reader = Reader {
            bytes: block,
            pos: 0,
        };
        let mut out = Output {
            input: block,
            block: None,
            copied: 0,
            fields: 0,
        };
        let mut at_start = true;
        while let Some(&first) = block.get(reader.pos) {
            let start = reader.pos;
            if first & 0x80 != 0 {
                // Indexed field (section 6.1): no change to the table.
                let refused = match reader.integer(7)? {
                    0 => return Err(HpackError::ZeroIndex),
                    // The static `:authority` has an empty value.
                    1 => true,
                    2..=61 => false,
                    index => self.table.get(index)?.kind == Kind::RefusedAuthority,
                };
                if refused {
                    // Dropping it leaves the table as it is; the request then has no authority,
                    // which h2 accepts.
                    out.replace(start, reader.pos, &[]);
                }
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (section 6.3).
                if !at_start {
                    return Err(HpackError::LateSizeUpdate);
                }
                let size = reader.integer(5)?;
                if size > MAX_TABLE_SIZE {
                    return Err(HpackError::TableTooLarge(size));
                }
                self.table.set_max_size(size);
                continue;
            } else {
                let indexing = if first & 0x40 != 0 {
                    Indexing::Incremental
                } else if first & 0xf0 == 0x10 {
                    Indexing::Never
                } else {
                    Indexing::Without
                };
                self.literal(&mut reader, &mut out, start, indexing)?;
            }
            at_start = false;
        }
        Ok(out.block.map(|mut new| {
            new.extend_from_slice(&block[out.copied..]);
            Rewritten {
                block: new,
                fields: out.fields,
            }
        }))
    }

    /// A literal field (section 6.2) starting at `start`.
    fn literal(
        &mut self,
        reader: &mut Reader<'_>,
        out: &mut Output<'_>,
        start: usize,
        indexing: Indexing,
    ) -> Result<(), HpackError> {
        let (name_len, is_authority) = match reader.integer(indexing.prefix_bits())? {
            0 => {
                reader.literal()?.decode(&mut self.scratch)?;
                (self.scratch.len(), self.scratch == AUTHORITY)
            }
            index @ 1..=61 => {
                let name = STATIC_NAMES[index - 1];
                (name.len(), name.as_bytes() == AUTHORITY)
            }
            index => {
                let entry = self.table.get(index)?;
                (entry.name_len, entry.kind != Kind::Other)
            }
        };
        let value = reader.literal()?;
        let (kind, value_len) = if is_authority {
            value.decode(&mut self.scratch)?;
            let len = self.scratch.len();
            if is_accepted(&self.scratch) {
                (Kind::Authority, len)
            } else if len > 0 {
                let mut field = Vec::with_capacity(len + 8);
                // Name: the static `:authority`, whatever the client named it by.
                put_integer(&mut field, indexing.pattern(), indexing.prefix_bits(), 1);
                put_integer(&mut field, 0x00, 7, len);
                field.extend_from_slice(&replacement(&self.scratch));
                out.replace(start, reader.pos, &field);
                (Kind::Authority, len)
            } else if indexing == Indexing::Incremental {
                // Nothing of 42 bytes replaces it where it stands without another name: leave
                // it for h2 to judge, and drop what refers to it later.
                (Kind::RefusedAuthority, 0)
            } else {
                out.replace(start, reader.pos, &[]);
                return Ok(());
            }
        } else {
            (Kind::Other, value.decoded_len()?)
        };
        if indexing == Indexing::Incremental {
            self.table.insert(Entry {
                kind,
                name_len,
                size: name_len + value_len + ENTRY_OVERHEAD,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_read_and_write_as_rfc_7541_c1() {
        // C.1.1: 10 with a 5-bit prefix; C.1.2: 1337 with a 5-bit prefix; and 127, which just
        // overflows a 7-bit prefix.
        let cases: [(&[u8], u8, usize); 3] = [
            (&[0x0a], 5, 10),
            (&[0x1f, 0x9a, 0x0a], 5, 1337),
            (&[0x7f, 0x00], 7, 127),
        ];
        for (bytes, bits, value) in cases {
            let mut reader = Reader { bytes, pos: 0 };
            assert_eq!(reader.integer(bits), Ok(value));
            assert_eq!(reader.pos, bytes.len());
            let mut out = Vec::new();
            put_integer(&mut out, 0, bits, value);
            assert_eq!(out, bytes);
        }
        // h2 stops at five octets.
        let mut reader = Reader {
            bytes: &[0x1f, 0xff, 0xff, 0xff, 0x7f],
            pos: 0,
        };
        assert_eq!(reader.integer(5), Ok(31 + (1 << 28) - 1));
        let mut reader = Reader {
            bytes: &[0x1f, 0xff, 0xff, 0xff, 0xff, 0x01],
            pos: 0,
        };
        assert_eq!(reader.integer(5), Err(HpackError::IntegerTooLong));
    }

    #[test]
    fn replacements_are_accepted_and_keep_the_length() {
        for value in [
            &b"tmp%2Fnu%2Fs"[..],
            b"/run/vmscope/vmscoped.sock",
            b"a b",
            b"x:1:2",
            b"\xff\x00",
            b"%",
            b"host/path",
            b"[::1",
        ] {
            assert!(!is_accepted(value), "{value:?}");
            let new = replacement(value);
            assert_eq!(new.len(), value.len());
            assert!(is_accepted(&new), "{new:?}");
        }
        assert_eq!(replacement(b"tmp%2Fnu%2Fs"), b"tmp-2Fnu-2Fs");
        for value in [
            "localhost",
            "localhost:50051",
            "[::1]:80",
            "u%40x@host",
            "a.b-c_d~",
        ] {
            assert!(is_accepted(value.as_bytes()), "{value}");
        }
        assert!(!is_accepted(b""));
    }

    #[test]
    fn the_table_evicts_and_resizes_as_rfc_7541() {
        let mut table = BlockRewriter::default().table;
        let entry = |size| Entry {
            kind: Kind::Other,
            name_len: 1,
            size,
        };
        table.set_max_size(100);
        table.insert(entry(40));
        table.insert(entry(50));
        assert_eq!((table.entries.len(), table.size), (2, 90));
        table.insert(entry(20)); // evicts the 40
        assert_eq!((table.entries.len(), table.size), (2, 70));
        assert_eq!(table.get(62).unwrap().size, 20);
        assert_eq!(table.get(63).unwrap().size, 50);
        assert_eq!(table.get(64).unwrap_err(), HpackError::UnknownIndex(64));
        table.insert(entry(101)); // larger than the table: empties it
        assert_eq!((table.entries.len(), table.size), (0, 0));
        table.insert(entry(60));
        table.set_max_size(59);
        assert_eq!((table.entries.len(), table.size), (0, 0));
    }
}
