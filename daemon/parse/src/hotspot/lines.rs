//! A Java method's line number table, as HotSpot keeps it: compressed, right after the
//! method's bytecodes in its `ConstMethod` (when the `has_linenumber_table` flag is set).
//!
//! The stream (`CompressedLineNumberReadStream`) is a series of (bci, line) pairs, each a delta
//! from the previous one (both start at 0): a byte `b` other than 0 and 0xFF is `bci += b >> 3,
//! line += b & 7`; 0xFF is followed by two signed compressed ints, the bci's delta then the
//! line's; a 0 byte ends the table.

use super::compressed::Unsigned5;

/// Most pairs read from one table (a method has at most 65,535 bytes of bytecode).
pub const MAX_PAIRS: usize = 65_536;

/// Why a table did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LinesError {
    /// The bytes end before the table's terminator: more must be read.
    #[error("the line number table goes on past the bytes read")]
    Truncated,
    /// Past [`MAX_PAIRS`], or a bci or line out of range.
    #[error("the line number table is not one")]
    Invalid,
}

/// A method's line number table: (first bci, line) pairs in the table's order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LineTable {
    pairs: Vec<(u32, u32)>,
}

impl LineTable {
    /// Decodes the table at the start of `bytes`, written by a JVM with `coding`.
    pub fn parse(bytes: &[u8], coding: Unsigned5) -> Result<LineTable, LinesError> {
        let mut pairs = Vec::new();
        let (mut bci, mut line) = (0i64, 0i64);
        let mut pos = 0;
        loop {
            let b = *bytes.get(pos).ok_or(LinesError::Truncated)?;
            pos += 1;
            match b {
                0 => break,
                0xFF => {
                    let mut signed = || {
                        // An int cut short by the bytes read is a read too short, not a lie.
                        let before = pos;
                        match coding.read_signed_int(bytes, &mut pos) {
                            Some(v) => Ok(i64::from(v)),
                            None if bytes.len() - before < 5 => Err(LinesError::Truncated),
                            None => Err(LinesError::Invalid),
                        }
                    };
                    bci += signed()?;
                    line += signed()?;
                }
                _ => {
                    bci += i64::from(b >> 3);
                    line += i64::from(b & 7);
                }
            }
            if pairs.len() == MAX_PAIRS {
                return Err(LinesError::Invalid);
            }
            let (Ok(b), Ok(l)) = (u32::try_from(bci), u32::try_from(line)) else {
                return Err(LinesError::Invalid);
            };
            if b > 0xFFFF {
                return Err(LinesError::Invalid);
            }
            pairs.push((b, l));
        }
        Ok(LineTable { pairs })
    }

    /// The line of the bytecode at `bci`: that of the pair with the greatest bci at or before
    /// it, as `Method::line_number_from_bci` picks it (the table need not be sorted).
    pub fn line_at(&self, bci: u32) -> Option<u32> {
        self.pairs
            .iter()
            .filter(|&&(b, _)| b <= bci)
            .max_by_key(|&&(b, _)| b)
            .map(|&(_, line)| line)
    }

    /// The pairs, in the table's order.
    pub fn pairs(&self) -> &[(u32, u32)] {
        &self.pairs
    }

    /// Whether the table has no pair.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

/// Writes `pairs` as HotSpot's `CompressedLineNumberWriteStream` does, terminator included:
/// for tests and fuzzing to build tables.
pub fn write(pairs: &[(u32, u32)], coding: Unsigned5) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut bci, mut line) = (0i32, 0i32);
    for &(b, l) in pairs {
        let (db, dl) = (b as i32 - bci, l as i32 - line);
        if (0..0x20).contains(&db) && (0..8).contains(&dl) && (db, dl) != (0, 0) {
            out.push(((db << 3) | dl) as u8);
        } else {
            out.push(0xFF);
            coding.write_signed_int(&mut out, db);
            coding.write_signed_int(&mut out, dl);
        }
        (bci, line) = (b as i32, l as i32);
    }
    out.push(0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_round_trip_with_short_and_escaped_pairs() {
        // javac's table for a method whose lines jump back (a loop) and forward by more than 7.
        let pairs = [
            (0, 12),
            (4, 13),
            (9, 30),
            (40, 14),
            (300, 2_000),
            (301, 2_001),
        ];
        for coding in [Unsigned5::for_jdk(17), Unsigned5::for_jdk(25)] {
            let bytes = write(&pairs, coding);
            let table = LineTable::parse(&bytes, coding).unwrap();
            assert_eq!(table.pairs(), pairs);
            assert_eq!(table.line_at(0), Some(12));
            assert_eq!(table.line_at(8), Some(13));
            assert_eq!(table.line_at(39), Some(30));
            assert_eq!(table.line_at(41), Some(14));
            assert_eq!(table.line_at(1_000), Some(2_001));
            assert_eq!(
                LineTable::parse(&bytes[..bytes.len() - 1], coding),
                Err(LinesError::Truncated)
            );
        }
        // The short pair `(4, 13)` is one byte whatever the coding: 4 << 3 | 1.
        assert_eq!(write(&[(0, 0), (4, 1)], Unsigned5::for_jdk(17))[3], 0x21);
    }

    #[test]
    fn a_line_before_any_pair_is_unknown_and_lies_are_refused() {
        let coding = Unsigned5::for_jdk(17);
        let table = LineTable::parse(&write(&[(5, 3)], coding), coding).unwrap();
        assert_eq!(table.line_at(4), None);
        assert_eq!(table.line_at(5), Some(3));
        // A bci below 0.
        let mut bytes = vec![0xFF];
        coding.write_signed_int(&mut bytes, -1);
        coding.write_signed_int(&mut bytes, 1);
        bytes.push(0);
        assert_eq!(LineTable::parse(&bytes, coding), Err(LinesError::Invalid));
        // No terminator in many bytes: one pair per byte, past the most believed.
        let endless = vec![0x08; MAX_PAIRS + 10];
        assert_eq!(LineTable::parse(&endless, coding), Err(LinesError::Invalid));
        assert_eq!(LineTable::parse(&[], coding), Err(LinesError::Truncated));
    }
}
