//! The one order of every ranked list a profile holds: rows, inlined methods, processes,
//! source lines, call tree children, symbolisation issues, stack ends. Most samples first; ties
//! broken by what the caller names, so that the order never depends on input or hash order.

use std::cmp::Ordering;

/// Sorts `items` most `samples` first, ties by `tie` (ascending: names A to Z, pids low to
/// high).
pub fn rank<T>(items: &mut [T], samples: impl Fn(&T) -> u64, tie: impl Fn(&T, &T) -> Ordering) {
    items.sort_by(|a, b| most_first(samples(a), samples(b)).then_with(|| tie(a, b)));
}

/// The order of two counts in a ranked list: the larger first.
pub fn most_first(a: u64, b: u64) -> Ordering {
    b.cmp(&a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_samples_first_then_the_tie_order() {
        let mut rows = vec![("b", 5), ("c", 9), ("a", 5), ("d", 0)];
        rank(&mut rows, |r| r.1, |a, b| a.0.cmp(b.0));
        assert_eq!(rows, [("c", 9), ("a", 5), ("b", 5), ("d", 0)]);
    }
}
