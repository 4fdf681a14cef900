//! HotSpot's performance data file, `/tmp/hsperfdata_<user>/<pid>`: the counters `jstat` reads
//! (GC collections and their time, heap generations' capacities and use, JIT compilations,
//! safepoints), which every HotSpot JVM keeps in a file it maps, with no flag.
//!
//! The layout is HotSpot's `PerfDataPrologue` and `PerfDataEntry` (`perfMemory.hpp`):
//!
//! ```text
//! prologue (32 bytes)  magic ca fe c0 c0 | byte order (0 big, 1 little) | major | minor |
//!                      accessible | used: i32 | overflow: i32 | mod time: i64 |
//!                      first entry offset: i32 | entries: i32
//! entry (20 bytes +)   length: i32 | name offset: i32 | vector length: i32 (0: a scalar) |
//!                      type: u8 ('J' long, 'B' byte vector) | flags: u8 | units: u8 |
//!                      variability: u8 | data offset: i32; then the NUL-terminated name and
//!                      the data, at their offsets from the entry's start
//! ```
//!
//! The JVM writes the file as it runs, and another user's JVM can write anything in it: every
//! offset and length is checked against the bytes, the entries are walked by their lengths at
//! most `entries` times, and a broken entry ends the walk with an error naming it. The JVM
//! counts an entry (`used`, `entries`) when it allocates it, before it writes it into the
//! zeroed file, so a read may catch its last entries unwritten (a zero length) or half written
//! (a zero name or data offset): those end the walk without error, as jvmstat's reader does,
//! and [`PerfData::unwritten`] says how many were left out. Longs in the file's byte order are
//! read; other data types are kept as [`Value::Other`].

use std::fmt;

/// The magic number's bytes as they lie in the file, whatever its byte order.
pub const MAGIC: [u8; 4] = [0xca, 0xfe, 0xc0, 0xc0];

/// Size of the prologue.
const PROLOGUE_BYTES: usize = 32;
/// Size of an entry's fixed part.
const ENTRY_BYTES: usize = 20;
/// Longest name kept; HotSpot's longest are under 100 bytes.
const MAX_NAME_BYTES: usize = 1024;

/// Why a file is not performance data, or where its entries broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HsperfdataError {
    /// Shorter than the prologue.
    #[error("{0} bytes: shorter than the 32-byte prologue")]
    TooShort(usize),
    /// Not HotSpot's magic number.
    #[error("no hsperfdata magic (ca fe c0 c0), found {0:02x?}")]
    BadMagic([u8; 4]),
    /// A byte order other than 0 (big) or 1 (little).
    #[error("byte order {0} is neither 0 (big endian) nor 1 (little endian)")]
    BadByteOrder(u8),
    /// A version this parser does not know.
    #[error("version {0}.{1}: only version 2 is known")]
    UnknownVersion(u8, u8),
    /// An entry that does not fit where its predecessor's length puts it.
    #[error("entry {index} at offset {offset}: {why}")]
    BadEntry {
        /// Its index.
        index: usize,
        /// Its offset in the file.
        offset: usize,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// What an entry counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Units {
    /// A plain number.
    None,
    /// Bytes.
    Bytes,
    /// Ticks of the high-resolution clock: divide by `sun.os.hrt.frequency` for seconds.
    Ticks,
    /// Events (collections, compilations...).
    Events,
    /// A string.
    String,
    /// Hertz.
    Hertz,
    /// A unit this parser does not know.
    Other(u8),
}

impl Units {
    fn from_byte(byte: u8) -> Units {
        match byte {
            1 => Units::None,
            2 => Units::Bytes,
            3 => Units::Ticks,
            4 => Units::Events,
            5 => Units::String,
            6 => Units::Hertz,
            other => Units::Other(other),
        }
    }
}

/// How an entry changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variability {
    /// Set once (a configuration value).
    Constant,
    /// Only goes up (a counter).
    Monotonic,
    /// Goes up and down (a gauge).
    Variable,
    /// A variability this parser does not know.
    Other(u8),
}

impl Variability {
    fn from_byte(byte: u8) -> Variability {
        match byte {
            1 => Variability::Constant,
            2 => Variability::Monotonic,
            3 => Variability::Variable,
            other => Variability::Other(other),
        }
    }
}

/// An entry's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A scalar long ('J').
    Long(i64),
    /// A byte vector ('B') read as a NUL-terminated string (lossily, as UTF-8).
    String(String),
    /// Another type or a vector of longs: its type byte.
    Other(u8),
}

/// One named item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name (`sun.gc.collector.0.invocations`).
    pub name: String,
    /// Its unit.
    pub units: Units,
    /// How it changes.
    pub variability: Variability,
    /// Its value.
    pub value: Value,
}

/// A parsed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfData {
    /// Major and minor version (2.0 for every JDK since 1.4.2).
    pub version: (u8, u8),
    /// Whether the JVM has finished setting the file up.
    pub accessible: bool,
    /// The entries, in file order.
    pub entries: Vec<Entry>,
    /// Entries the JVM had counted but not yet written when the file was read: left out.
    pub unwritten: usize,
}

impl PerfData {
    /// The long named `name`, if there is one.
    pub fn long(&self, name: &str) -> Option<i64> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| match e.value {
                Value::Long(v) => Some(v),
                _ => None,
            })
    }

    /// The string named `name`, if there is one.
    pub fn string(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| match &e.value {
                Value::String(s) => Some(s.as_str()),
                _ => None,
            })
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Long(v) => write!(f, "{v}"),
            Value::String(s) => write!(f, "\"{s}\""),
            Value::Other(t) => write!(f, "<type {:?}>", *t as char),
        }
    }
}

/// Reads integers in the file's byte order.
#[derive(Clone, Copy)]
struct Order {
    little: bool,
}

impl Order {
    fn i32(self, bytes: &[u8], at: usize) -> Option<i32> {
        let raw: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if self.little {
            i32::from_le_bytes(raw)
        } else {
            i32::from_be_bytes(raw)
        })
    }

    fn i64(self, bytes: &[u8], at: usize) -> Option<i64> {
        let raw: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
        Some(if self.little {
            i64::from_le_bytes(raw)
        } else {
            i64::from_be_bytes(raw)
        })
    }

    /// A non-negative i32 as an offset or length.
    fn offset(self, bytes: &[u8], at: usize) -> Option<usize> {
        usize::try_from(self.i32(bytes, at)?).ok()
    }
}

/// Parses a performance data file. Entries past the prologue's `used` bytes are not read:
/// the JVM may be writing them.
pub fn parse_hsperfdata(bytes: &[u8]) -> Result<PerfData, HsperfdataError> {
    if bytes.len() < PROLOGUE_BYTES {
        return Err(HsperfdataError::TooShort(bytes.len()));
    }
    let magic: [u8; 4] = bytes[..4].try_into().expect("4 bytes");
    if magic != MAGIC {
        return Err(HsperfdataError::BadMagic(magic));
    }
    let little = match bytes[4] {
        0 => false,
        1 => true,
        other => return Err(HsperfdataError::BadByteOrder(other)),
    };
    let version = (bytes[5], bytes[6]);
    if version.0 != 2 {
        return Err(HsperfdataError::UnknownVersion(version.0, version.1));
    }
    let order = Order { little };
    let accessible = bytes[7] != 0;
    let used = order
        .offset(bytes, 8)
        .map_or(bytes.len(), |used| used.min(bytes.len()));
    let bytes = &bytes[..used.max(PROLOGUE_BYTES)];
    let first = order.offset(bytes, 24).unwrap_or(usize::MAX);
    let count = order.offset(bytes, 28).unwrap_or(0);

    // A field of an entry's header still zero: the JVM has not written it yet.
    let unwritten = |header: &[u8], at: usize| order.i32(header, at) == Some(0);
    let mut entries = Vec::with_capacity(count.min(bytes.len() / ENTRY_BYTES));
    let mut offset = first;
    for index in 0..count {
        let bad = |why| HsperfdataError::BadEntry { index, offset, why };
        let header = offset
            .checked_add(ENTRY_BYTES)
            .and_then(|end| bytes.get(offset..end))
            .ok_or_else(|| bad("its header lies past the data in use"))?;
        let length = order
            .offset(header, 0)
            .ok_or_else(|| bad("negative length"))?;
        if length == 0 || unwritten(header, 4) || unwritten(header, 16) {
            return Ok(PerfData {
                version,
                accessible,
                entries,
                unwritten: count - index,
            });
        }
        if length < ENTRY_BYTES {
            return Err(bad("shorter than an entry header"));
        }
        let entry = offset
            .checked_add(length)
            .and_then(|end| bytes.get(offset..end))
            .ok_or_else(|| bad("its length runs past the data in use"))?;
        let name_at = order
            .offset(header, 4)
            .ok_or_else(|| bad("bad name offset"))?;
        let vector = order
            .offset(header, 8)
            .ok_or_else(|| bad("bad vector length"))?;
        let data_type = header[12];
        let units = Units::from_byte(header[14]);
        let variability = Variability::from_byte(header[15]);
        let data_at = order
            .offset(header, 16)
            .ok_or_else(|| bad("bad data offset"))?;

        let name = entry
            .get(name_at..)
            .and_then(|tail| {
                let tail = &tail[..tail.len().min(MAX_NAME_BYTES)];
                let end = tail.iter().position(|&b| b == 0)?;
                Some(String::from_utf8_lossy(&tail[..end]).into_owned())
            })
            .ok_or_else(|| bad("its name is not a NUL-terminated string inside it"))?;
        let value = match (data_type, vector) {
            (b'J', 0) => Value::Long(
                order
                    .i64(entry, data_at)
                    .ok_or_else(|| bad("its long lies outside it"))?,
            ),
            (b'B', n) if n > 0 => {
                let data = data_at
                    .checked_add(n)
                    .and_then(|end| entry.get(data_at..end))
                    .ok_or_else(|| bad("its bytes lie outside it"))?;
                let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                Value::String(String::from_utf8_lossy(&data[..end]).into_owned())
            }
            (other, _) => Value::Other(other),
        };
        entries.push(Entry {
            name,
            units,
            variability,
            value,
        });
        offset += length;
    }
    Ok(PerfData {
        version,
        accessible,
        entries,
        unwritten: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a file as HotSpot lays it out, in either byte order.
    struct Builder {
        little: bool,
        entries: Vec<Vec<u8>>,
    }

    impl Builder {
        fn new(little: bool) -> Builder {
            Builder {
                little,
                entries: Vec::new(),
            }
        }

        fn i32(&self, v: i32) -> [u8; 4] {
            if self.little {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            }
        }

        fn entry(mut self, name: &str, data_type: u8, vector: i32, units: u8, data: &[u8]) -> Self {
            let name_at = ENTRY_BYTES;
            let data_at = (name_at + name.len() + 1).next_multiple_of(8);
            let length = (data_at + data.len()).next_multiple_of(8);
            let mut e = Vec::new();
            e.extend(self.i32(length as i32));
            e.extend(self.i32(name_at as i32));
            e.extend(self.i32(vector));
            e.extend([data_type, 1, units, 2]);
            e.extend(self.i32(data_at as i32));
            e.extend(name.as_bytes());
            e.resize(data_at, 0);
            e.extend(data);
            e.resize(length, 0);
            self.entries.push(e);
            self
        }

        fn long(self, name: &str, units: u8, v: i64) -> Self {
            let bytes = if self.little {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            };
            self.entry(name, b'J', 0, units, &bytes)
        }

        fn build(&self) -> Vec<u8> {
            let body: usize = self.entries.iter().map(Vec::len).sum();
            let mut f = MAGIC.to_vec();
            f.extend([u8::from(self.little), 2, 0, 1]);
            f.extend(self.i32((PROLOGUE_BYTES + body) as i32));
            f.extend(self.i32(0));
            f.extend([0; 8]);
            f.extend(self.i32(PROLOGUE_BYTES as i32));
            f.extend(self.i32(self.entries.len() as i32));
            for e in &self.entries {
                f.extend(e);
            }
            f
        }
    }

    fn sample(little: bool) -> Vec<u8> {
        let mut name = b"G1 Young Generation".to_vec();
        name.resize(64, 0);
        Builder::new(little)
            .long("sun.gc.collector.0.invocations", 4, 182)
            .long("sun.gc.collector.0.time", 3, 57_000_000)
            .entry("sun.gc.collector.0.name", b'B', 64, 5, &name)
            .long("sun.os.hrt.frequency", 6, 1_000_000_000)
            .build()
    }

    #[test]
    fn longs_and_strings_in_both_byte_orders() {
        for little in [true, false] {
            let data = parse_hsperfdata(&sample(little)).expect("parses");
            assert_eq!(data.version, (2, 0));
            assert!(data.accessible);
            assert_eq!(data.entries.len(), 4);
            assert_eq!(data.long("sun.gc.collector.0.invocations"), Some(182));
            assert_eq!(data.long("sun.gc.collector.0.time"), Some(57_000_000));
            assert_eq!(
                data.string("sun.gc.collector.0.name"),
                Some("G1 Young Generation")
            );
            let time = &data.entries[1];
            assert_eq!(time.units, Units::Ticks);
            assert_eq!(time.variability, Variability::Monotonic);
            assert_eq!(data.long("no.such.entry"), None);
        }
    }

    #[test]
    fn broken_files_are_refused_with_the_reason() {
        let good = sample(true);
        assert_eq!(
            parse_hsperfdata(&good[..10]),
            Err(HsperfdataError::TooShort(10))
        );
        let mut bad = good.clone();
        bad[0] = 0;
        assert!(matches!(
            parse_hsperfdata(&bad),
            Err(HsperfdataError::BadMagic(_))
        ));
        let mut bad = good.clone();
        bad[4] = 7;
        assert_eq!(
            parse_hsperfdata(&bad),
            Err(HsperfdataError::BadByteOrder(7))
        );
        let mut bad = good.clone();
        bad[5] = 1;
        assert_eq!(
            parse_hsperfdata(&bad),
            Err(HsperfdataError::UnknownVersion(1, 0))
        );
        // The second entry's length points past the end of the data in use.
        let second = PROLOGUE_BYTES + i32::from_le_bytes(good[32..36].try_into().unwrap()) as usize;
        let mut bad = good.clone();
        bad[second..second + 4].copy_from_slice(&100_000i32.to_le_bytes());
        assert!(matches!(
            parse_hsperfdata(&bad),
            Err(HsperfdataError::BadEntry { index: 1, .. })
        ));
        // A length too short to hold a header would loop for ever if trusted.
        let mut bad = good.clone();
        bad[second..second + 4].copy_from_slice(&8i32.to_le_bytes());
        assert!(matches!(
            parse_hsperfdata(&bad),
            Err(HsperfdataError::BadEntry { index: 1, why, .. }) if why.contains("shorter")
        ));
        // A name that runs off its entry.
        let mut bad = good.clone();
        bad[36..40].copy_from_slice(&4000i32.to_le_bytes());
        assert!(parse_hsperfdata(&bad).is_err());
    }

    /// The JVM counts an entry before it writes it: a read between the two finds it zeroed,
    /// or with its header half written. What was written before it is the reading.
    #[test]
    fn entries_counted_but_not_yet_written_are_left_out() {
        let good = sample(true);
        let offsets: Vec<usize> = parse_offsets(&good);
        let last = offsets[3];
        // Allocated, nothing written yet.
        let mut file = good.clone();
        file[last..].fill(0);
        let data = parse_hsperfdata(&file).expect("a reading of the entries written");
        assert_eq!((data.entries.len(), data.unwritten), (3, 1));
        assert_eq!(data.long("sun.gc.collector.0.invocations"), Some(182));
        assert_eq!(data.long("sun.os.hrt.frequency"), None);
        // Its length and name offset written, its data offset not yet: its value would be
        // read from its header.
        let mut file = good.clone();
        file[last + 16..last + 20].fill(0);
        let data = parse_hsperfdata(&file).expect("a reading of the entries written");
        assert_eq!((data.entries.len(), data.unwritten), (3, 1));
        // Two threads each allocated one, and the second wrote its entry first: the walk
        // cannot step over the first, whose length is not written.
        let mut file = good.clone();
        file[offsets[2]..offsets[2] + 4].fill(0);
        let data = parse_hsperfdata(&file).expect("a reading of the entries written");
        assert_eq!((data.entries.len(), data.unwritten), (2, 2));
        assert_eq!(parse_hsperfdata(&good).unwrap().unwritten, 0);
    }

    /// Where each entry of a little-endian file starts.
    fn parse_offsets(file: &[u8]) -> Vec<usize> {
        let mut at = PROLOGUE_BYTES;
        let mut offsets = Vec::new();
        while at < file.len() {
            offsets.push(at);
            at += i32::from_le_bytes(file[at..at + 4].try_into().unwrap()) as usize;
        }
        offsets
    }

    #[test]
    fn entries_beyond_the_used_bytes_are_not_read() {
        let mut file = sample(true);
        // The JVM has used only the first entry so far.
        let first = i32::from_le_bytes(file[32..36].try_into().unwrap());
        file[8..12].copy_from_slice(&(PROLOGUE_BYTES as i32 + first).to_le_bytes());
        assert!(matches!(
            parse_hsperfdata(&file),
            Err(HsperfdataError::BadEntry { index: 1, .. })
        ));
    }
}
