//! Mutated copies of a well-formed input, for the parsers' tests: each parser must take any of
//! them without panicking (the fuzz targets go further; these run with every `cargo test`).

/// Calls `parse` with `rounds` copies of `seed`, each with `flips` bytes past `keep` set to
/// pseudo-random values (xorshift64 from `state`, so that a failure repeats), and with the
/// generator's state after the flips, for a parser that wants a random query too.
pub fn for_each_mutation(
    seed: &[u8],
    keep: usize,
    rounds: usize,
    flips: usize,
    mut state: u64,
    mut parse: impl FnMut(&[u8], u64),
) {
    assert!(seed.len() > keep, "nothing to mutate past byte {keep}");
    let mut copy = seed.to_vec();
    for _ in 0..rounds {
        copy.copy_from_slice(seed);
        for _ in 0..flips {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = keep + (state as usize) % (copy.len() - keep);
            copy[at] = (state >> 56) as u8;
        }
        parse(&copy, state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_differ_from_the_seed_past_the_kept_prefix_only() {
        let seed = [7u8; 64];
        let (mut changed, mut calls) = (0, 0);
        for_each_mutation(&seed, 16, 100, 4, 0x2545_f491_4f6c_dd1d, |copy, _| {
            calls += 1;
            assert_eq!(copy[..16], seed[..16]);
            changed += usize::from(copy != seed);
        });
        assert_eq!(calls, 100);
        assert!(changed > 90, "{changed} of 100 copies changed");
    }
}
