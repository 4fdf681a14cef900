//! HotSpot's compressed stream (`CompressedReadStream`): the UNSIGNED5 integers that scopes
//! and line number tables are written in.
//!
//! A value is one to five bytes: a byte below 192 ends it, each byte from 192 up carries six
//! more bits (Pack200's UNSIGNED5: `L` one-byte values, `H` = 64). JDK 20 moved the coding to
//! `utilities/unsigned5.hpp` and made it never write a zero byte, so that streams may be
//! null-terminated: every byte is the old one plus one (`X` = 1 excluded byte, `L` = 191). The
//! boundary between the last byte and the others is 192 either way; only the value each byte
//! stands for moves. Which JDK wrote a stream is not in the stream, so the caller says
//! ([`Unsigned5::for_jdk`]).

/// The byte a value ends with is below this, in both codings (`X + L`).
const LOW_END: u32 = 192;
/// log2 of what each further byte is worth (`H` = 64).
const LG_H: u32 = 6;
/// Most bytes after the first.
const MAX_I: usize = 4;

/// One JDK's UNSIGNED5 coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsigned5 {
    /// Byte values no encoding uses, below every other (`X`): 0 up to JDK 19, 1 since JDK 20.
    pub excluded: u8,
}

impl Unsigned5 {
    /// The coding a JVM of `major` version writes (`Abstract_VM_Version::_vm_major_version`).
    pub fn for_jdk(major: u32) -> Unsigned5 {
        Unsigned5 {
            excluded: u8::from(major >= 20),
        }
    }

    /// Reads one value at `*pos`, moving past it; `None` when the stream ends inside it or
    /// holds an excluded byte.
    pub fn read_int(self, data: &[u8], pos: &mut usize) -> Option<u32> {
        let x = u32::from(self.excluded);
        let mut sum = 0u32;
        let mut shift = 0;
        for i in 0..=MAX_I {
            let b = u32::from(*data.get(*pos)?);
            *pos += 1;
            let digit = b.checked_sub(x)?;
            sum = sum.wrapping_add(digit.wrapping_shl(shift));
            if b < LOW_END || i == MAX_I {
                return Some(sum);
            }
            shift += LG_H;
        }
        Some(sum)
    }

    /// Reads a signed value (`read_signed_int`: zigzag over [`Unsigned5::read_int`]).
    pub fn read_signed_int(self, data: &[u8], pos: &mut usize) -> Option<i32> {
        let v = self.read_int(data, pos)?;
        Some(((v >> 1) as i32) ^ -((v & 1) as i32))
    }

    /// Writes `value` as HotSpot's `write_int` does: for tests and fuzzing to build streams.
    pub fn write_int(self, out: &mut Vec<u8>, value: u32) {
        let x = u32::from(self.excluded);
        let l = LOW_END - x;
        let mut sum = value;
        for i in 0..=MAX_I {
            if sum < l || i == MAX_I {
                out.push((x + sum) as u8);
                return;
            }
            sum -= l;
            out.push((x + l + sum % 64) as u8);
            sum >>= LG_H;
        }
    }

    /// Writes a signed value as HotSpot's `write_signed_int` does.
    pub fn write_signed_int(self, out: &mut Vec<u8>, value: i32) {
        self.write_int(out, ((value << 1) ^ (value >> 31)) as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_in_both_codings() {
        for coding in [Unsigned5::for_jdk(17), Unsigned5::for_jdk(25)] {
            for value in [
                0,
                1,
                190,
                191,
                192,
                193,
                255,
                4_000,
                12_479,
                12_480,
                1 << 20,
                u32::MAX >> 1,
                u32::MAX,
            ] {
                let mut bytes = Vec::new();
                coding.write_int(&mut bytes, value);
                let mut pos = 0;
                assert_eq!(
                    coding.read_int(&bytes, &mut pos),
                    Some(value),
                    "{coding:?} {bytes:?}"
                );
                assert_eq!(pos, bytes.len());
            }
            for value in [0, 1, -1, 7, -8, i32::MAX, i32::MIN] {
                let mut bytes = Vec::new();
                coding.write_signed_int(&mut bytes, value);
                let mut pos = 0;
                assert_eq!(coding.read_signed_int(&bytes, &mut pos), Some(value));
            }
            let mut pos = 0;
            assert_eq!(coding.read_int(&[200], &mut pos), None, "cut short");
        }
    }

    #[test]
    fn the_codings_differ_as_jdk_20_made_them() {
        // HotSpot's own bytes: JDK 17 writes 0 as 0x00 and 191 as 0xbf; JDK 20+ writes 0 as
        // 0x01, and 191, no longer a one-byte value, as 0xc0 0x01.
        let (old, new) = (Unsigned5::for_jdk(17), Unsigned5::for_jdk(21));
        let bytes = |coding: Unsigned5, v| {
            let mut out = Vec::new();
            coding.write_int(&mut out, v);
            out
        };
        assert_eq!(bytes(old, 0), [0x00]);
        assert_eq!(bytes(new, 0), [0x01]);
        assert_eq!(bytes(old, 191), [0xbf]);
        assert_eq!(bytes(new, 191), [0xc0, 0x01]);
        let mut pos = 0;
        assert_eq!(new.read_int(&[0x00], &mut pos), None, "an excluded byte");
    }
}
