//! Tagged 64-bit values: SmallIntegers and object pointers.
//!
//! A SmallInteger `n` is the word `n << 1 | 1`; an object is the (8-aligned, so even) address of
//! its header in the [`Heap`](crate::heap::Heap). The JIT relies on three facts about the
//! encoding: a value is a SmallInteger iff its low bit is set; tagged addition is `a - 1 + b`
//! and tagged comparison is plain signed comparison; a tagged value overflows the machine word
//! exactly when its integer leaves [`SMALL_MIN`]..=[`SMALL_MAX`], so `jo` after the tagged
//! operation is the overflow check.

use std::fmt;

/// Largest SmallInteger (2^62 - 1).
pub const SMALL_MAX: i64 = (1 << 62) - 1;
/// Smallest SmallInteger (-2^62).
pub const SMALL_MIN: i64 = -(1 << 62);

/// A tagged value, as generated code sees it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Value(pub u64);

impl Value {
    /// The SmallInteger `n`, or `None` outside the SmallInteger range.
    pub fn int(n: i64) -> Option<Value> {
        (SMALL_MIN..=SMALL_MAX)
            .contains(&n)
            .then_some(Value(((n << 1) | 1) as u64))
    }

    /// The SmallInteger `n`; panics outside the range (for constants).
    pub fn small(n: i64) -> Value {
        Value::int(n).expect("SmallInteger constant in range")
    }

    /// Whether this is a SmallInteger.
    pub fn is_int(self) -> bool {
        self.0 & 1 == 1
    }

    /// The integer, if this is a SmallInteger.
    pub fn as_int(self) -> Option<i64> {
        self.is_int().then_some((self.0 as i64) >> 1)
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_int() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "@{:#x}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagging_round_trips_and_bounds() {
        for n in [0, 1, -1, 242785, SMALL_MAX, SMALL_MIN] {
            assert_eq!(Value::small(n).as_int(), Some(n));
        }
        assert!(Value::int(SMALL_MAX + 1).is_none());
        assert!(Value::int(SMALL_MIN - 1).is_none());
        assert_eq!(Value::small(3).0, 7);
        assert!(Value(0x1000).as_int().is_none());
    }
}
