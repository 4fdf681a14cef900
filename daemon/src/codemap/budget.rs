//! How many bytes of code map files each user's processes may have read, per unit of time.
//!
//! Code map files are read as samples wait for them, on one reader thread per user
//! ([`super::reader`]): a file that is huge, sparse or growing without end must not keep the
//! attribution of its own user's samples, nor the reader, busy for long. Each uid has a token
//! bucket: its processes' sources read at most a burst at once
//! and a steady rate after, and what one user's files cost never comes out of another's share.

use std::collections::HashMap;

/// Bytes a user's code map files may be read per second, steadily.
pub const READ_BYTES_PER_SECOND: u64 = 32 << 20;

/// Bytes a user's code map files may be read at once, after a quiet time.
pub const READ_BURST_BYTES: u64 = 4 << 20;

/// Users idle this long are forgotten (their bucket would be full again anyway).
const FORGET_AFTER_NS: u64 = 10_000_000_000;

#[derive(Clone, Copy, Debug)]
struct Bucket {
    bytes: u64,
    at_ns: u64,
}

/// A token bucket of read bytes per uid.
#[derive(Debug, Default)]
pub struct ReadBudgets {
    buckets: HashMap<u32, Bucket>,
    /// Reads cut short because a user's budget was spent (they go on at later syncs).
    pub exhausted: u64,
}

impl ReadBudgets {
    /// The bytes `uid`'s sources may read now; what is not read goes back with
    /// [`ReadBudgets::put_back`].
    pub fn take(&mut self, uid: u32, now_ns: u64) -> u64 {
        if self.buckets.len() > 1024 {
            self.buckets
                .retain(|_, b| now_ns.saturating_sub(b.at_ns) < FORGET_AFTER_NS);
        }
        let bucket = self.buckets.entry(uid).or_insert(Bucket {
            bytes: READ_BURST_BYTES,
            at_ns: now_ns,
        });
        let elapsed = now_ns.saturating_sub(bucket.at_ns);
        let earned = (u128::from(elapsed) * u128::from(READ_BYTES_PER_SECOND) / 1_000_000_000)
            .min(u128::from(READ_BURST_BYTES)) as u64;
        // Time only counts once it earned a byte, so that frequent syncs still earn.
        if earned > 0 {
            bucket.at_ns = now_ns;
        }
        let available = (bucket.bytes + earned).min(READ_BURST_BYTES);
        bucket.bytes = 0;
        available
    }

    /// Gives back what a read did not use of [`ReadBudgets::take`]'s bytes; `cut_short`, it
    /// stopped for want of bytes with some left to read (counted). A read that needed nothing
    /// is not: it may well have been given nothing, while another of the user's was out.
    pub fn put_back(&mut self, uid: u32, left: u64, cut_short: bool) {
        if let Some(bucket) = self.buckets.get_mut(&uid) {
            bucket.bytes = (bucket.bytes + left).min(READ_BURST_BYTES);
        }
        if cut_short {
            self.exhausted += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_burst_then_the_rate_and_users_apart() {
        let mut budgets = ReadBudgets::default();
        assert_eq!(budgets.take(1000, 0), READ_BURST_BYTES);
        budgets.put_back(1000, 0, true);
        assert_eq!(budgets.exhausted, 1);
        // Nothing left at once; 100 ms earn a tenth of the rate. A read given nothing that
        // needed nothing was not cut short.
        assert_eq!(budgets.take(1000, 0), 0);
        budgets.put_back(1000, 0, false);
        assert_eq!(budgets.exhausted, 1);
        let earned = budgets.take(1000, 100 * MS);
        assert_eq!(earned, READ_BYTES_PER_SECOND / 10);
        budgets.put_back(1000, earned, false);
        // Another user's bucket is its own.
        assert_eq!(budgets.take(0, 100 * MS), READ_BURST_BYTES);
        // Over a second, one user reads about its rate whatever the number of syncs.
        let mut read = 0;
        for t in (100..1100).step_by(3) {
            read += budgets.take(1000, t * MS);
            budgets.put_back(1000, 0, true);
        }
        let expected = READ_BYTES_PER_SECOND + READ_BYTES_PER_SECOND / 10;
        assert!(
            read.abs_diff(expected) <= expected / 50,
            "{read} vs {expected}"
        );
    }
}
