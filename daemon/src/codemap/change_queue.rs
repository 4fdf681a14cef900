//! The changes of a code map that wait to be applied, taken in time order, then in the order
//! they arrived.
//!
//! Nearly every change arrives in time order: a perf map read stamps all its entries with the
//! read's time, a jitdump's records and a VM's publications come as they were made. Those go to
//! the back of a deque, one push and one pop each. The rare change stamped before the newest
//! one waiting (two sources of one process, a clock step) goes to a B-tree, whose cost
//! stays logarithmic whatever order a hostile publisher stamps its changes in.

use std::collections::{BTreeMap, VecDeque};

use super::timeline::Change;

/// Changes waiting, by (time, arrival).
#[derive(Debug, Default)]
pub struct ChangeQueue {
    /// Changes that arrived in time order, each stamped later than everything in
    /// `out_of_order`: on equal times, they arrived before those.
    in_order: VecDeque<(u64, Change)>,
    /// The others, by (time, arrival).
    out_of_order: BTreeMap<(u64, u64), Change>,
    arrivals: u64,
}

impl ChangeQueue {
    /// Number of changes waiting.
    pub fn len(&self) -> usize {
        self.in_order.len() + self.out_of_order.len()
    }

    /// Whether no change waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `change`, stamped `timestamp_ns`, after every change queued before it with the
    /// same time.
    pub fn push(&mut self, timestamp_ns: u64, change: Change) {
        self.arrivals += 1;
        let after_in_order = self
            .in_order
            .back()
            .is_none_or(|&(newest, _)| timestamp_ns >= newest);
        // Strictly later: a change stamped like one out of order arrived after it.
        let after_out_of_order = self
            .out_of_order
            .last_key_value()
            .is_none_or(|(&(newest, _), _)| timestamp_ns > newest);
        if after_in_order && after_out_of_order {
            self.in_order.push_back((timestamp_ns, change));
        } else {
            self.out_of_order
                .insert((timestamp_ns, self.arrivals), change);
        }
    }

    /// Takes the earliest change stamped at or before `until_ns`.
    pub fn pop_until(&mut self, until_ns: u64) -> Option<Change> {
        let in_order = self.in_order.front().map(|&(at, _)| at);
        let out_of_order = self.out_of_order.first_key_value().map(|(&(at, _), _)| at);
        match (in_order, out_of_order) {
            // On equal times the in-order change arrived first (see `in_order`).
            (Some(a), b) if a <= until_ns && b.is_none_or(|b| a <= b) => {
                self.in_order.pop_front().map(|(_, change)| change)
            }
            (_, Some(b)) if b <= until_ns => self.out_of_order.pop_first().map(|(_, c)| c),
            _ => None,
        }
    }

    /// The changes waiting, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Change> {
        self.in_order
            .iter()
            .map(|(_, change)| change)
            .chain(self.out_of_order.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(start: u64) -> Change {
        Change::Free { start }
    }

    /// Every change taken through `until`, as the starts of the frees they are.
    fn drain(queue: &mut ChangeQueue, until: u64) -> Vec<u64> {
        std::iter::from_fn(|| queue.pop_until(until))
            .map(|change| match change {
                Change::Free { start } => start,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn changes_come_out_by_time_then_arrival_whatever_order_they_came_in() {
        // (time, id): ids say the arrival order.
        let arrivals = [
            (10, 1),
            (20, 2),
            (20, 3),
            (15, 4),
            (20, 5),
            (15, 6),
            (30, 7),
            (5, 8),
            (30, 9),
        ];
        let mut queue = ChangeQueue::default();
        for (at, id) in arrivals {
            queue.push(at, free(id));
        }
        assert_eq!(queue.len(), arrivals.len());
        assert_eq!(drain(&mut queue, 15), [8, 1, 4, 6]);
        assert_eq!(drain(&mut queue, 25), [2, 3, 5]);
        queue.push(25, free(10));
        queue.push(30, free(11));
        assert_eq!(drain(&mut queue, u64::MAX), [10, 7, 9, 11]);
        assert!(queue.is_empty());
    }

    #[test]
    fn the_queue_matches_a_sort_by_time_and_arrival() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut queue = ChangeQueue::default();
        let mut expected = Vec::new();
        for id in 0..5_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Mostly in order, sometimes earlier, often on equal times.
            let earlier = if state.is_multiple_of(5) {
                (state >> 8) % 50
            } else {
                0
            };
            let at = id / 4 - earlier.min(id / 4);
            queue.push(at, free(id));
            expected.push((at, id));
        }
        expected.sort();
        let taken = drain(&mut queue, u64::MAX);
        let expected: Vec<u64> = expected.into_iter().map(|(_, id)| id).collect();
        assert_eq!(taken, expected);
    }
}
