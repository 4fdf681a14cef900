//! Whether a change of sampled time is more than sampling noise.
//!
//! A sampling profiler counts ticks of a clock: a function that holds time T under a period P
//! collects about T/P samples, with Poisson noise. So two sample counts `k1` (base, period
//! `P1`) and `k2` (new, `P2`) of the same function, given their sum `n = k1 + k2`, have `k2`
//! binomial with `n` trials and the probability `q0 = w2 / (w1 + w2)` that the null hypothesis
//! gives a sample to the new side: equal time means weights `wi = 1 / Pi` (samples per unit of
//! time), equal shares (`--normalize`) weights `wi = Ni`, each side's total samples. The test
//! is the exact two-sided binomial test of `k2` against `q0`, and the change's 95% interval
//! comes from the Clopper–Pearson interval of the binomial proportion.
//!
//! Many rows are tested at once, so the level is shared among them (Bonferroni), but only
//! among the rows that *could* be significant: a row of five samples cannot reach p < 0.001
//! however they split, and counting it would only blunt the test of the rows that can. That is
//! Tarone's correction (1990): the divisor is the smallest `K` such that at most `K` rows have a
//! smallest achievable p-value under `ALPHA / K`.
//!
//! What it does not know: run-to-run variation of the program itself (caches, CPU frequency,
//! another tenant), which is not sampling noise. A test on counts says "this is not the
//! profiler's dice"; whether it is the program's is for repeated runs to say, which is why
//! `check` compares exact counts exactly.

use serde::Serialize;
use statrs::distribution::{Beta, Binomial, ContinuousCDF, DiscreteCDF};

/// The significance level of one family of tests, before Bonferroni's correction.
pub const ALPHA: f64 = 0.01;

/// What the test says of one row's change.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Change {
    /// `new / base` of the time (or share), `None` when the base has no sample.
    pub ratio: Option<f64>,
    /// The 95% interval of the ratio: `[low, high]`; `high` is infinite when the base's count
    /// allows any ratio.
    pub interval: (f64, f64),
    /// The two-sided p-value of "no change".
    pub p_value: f64,
    /// Whether `p_value` is under the family's corrected level.
    pub significant: bool,
}

impl Change {
    /// The change as a percentage of the base (`+20.0` for 1.2), `None` without a base.
    pub fn percent(&self) -> Option<f64> {
        self.ratio.map(|r| (r - 1.0) * 100.0)
    }
}

/// The test of `k2` new samples against `k1` base samples, the sides weighing `w1` and `w2`
/// (see the module docs), significant under `level`.
pub fn test(k1: u64, k2: u64, w1: f64, w2: f64, level: f64) -> Change {
    let n = k1 + k2;
    let q0 = w2 / (w1 + w2);
    // The odds of a sample being the new side's, over the null's: the ratio of times.
    let odds = |q: f64| (q / (1.0 - q)) / (q0 / (1.0 - q0));
    let ratio = (k1 > 0).then(|| (k2 as f64 / w2) / (k1 as f64 / w1));
    if n == 0 {
        return Change {
            ratio,
            interval: (0.0, f64::INFINITY),
            p_value: 1.0,
            significant: false,
        };
    }
    let p_value = two_sided_p(k2, n, q0);
    let (low, high) = clopper_pearson(k2, n, 0.05);
    let interval = (
        odds(low),
        if high >= 1.0 {
            f64::INFINITY
        } else {
            odds(high)
        },
    );
    Change {
        ratio,
        interval,
        p_value,
        significant: p_value < level,
    }
}

/// Tarone's corrected level for tests of `counts` (each a row's `k1 + k2`) at the null's
/// probability `q0`: `(ALPHA / K, K)`, `K` the number of rows that count. `K` is at least 1.
pub fn tarone_level(counts: &[u64], q0: f64, alpha: f64) -> (f64, usize) {
    let smallest = q0.min(1.0 - q0);
    // The smallest p-value n samples can give: all of them on the likelier-to-be-empty side.
    let min_p = |n: u64| (2.0 * smallest.powf(n as f64)).min(1.0);
    let mut min_ps: Vec<f64> = counts.iter().map(|&n| min_p(n)).collect();
    min_ps.sort_by(f64::total_cmp);
    let mut k = 1;
    loop {
        let testable = min_ps.partition_point(|&p| p < alpha / k as f64);
        if testable <= k {
            return (alpha / k as f64, k);
        }
        k += 1;
    }
}

/// The exact two-sided binomial p-value of `k` successes in `n` trials at probability `q`:
/// twice the smaller tail, at most 1.
fn two_sided_p(k: u64, n: u64, q: f64) -> f64 {
    let Ok(binomial) = Binomial::new(q, n) else {
        return 1.0;
    };
    let lower = binomial.cdf(k);
    let upper = if k == 0 {
        1.0
    } else {
        1.0 - binomial.cdf(k - 1)
    };
    (2.0 * lower.min(upper)).min(1.0)
}

/// The Clopper–Pearson interval of a binomial proportion, `k` of `n`, at confidence
/// `1 - alpha`.
fn clopper_pearson(k: u64, n: u64, alpha: f64) -> (f64, f64) {
    let (k, n) = (k as f64, n as f64);
    let low = if k == 0.0 {
        0.0
    } else {
        Beta::new(k, n - k + 1.0).map_or(0.0, |b| b.inverse_cdf(alpha / 2.0))
    };
    let high = if k == n {
        1.0
    } else {
        Beta::new(k + 1.0, n - k).map_or(1.0, |b| b.inverse_cdf(1.0 - alpha / 2.0))
    };
    (low, high)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_counts_at_equal_periods_are_no_change() {
        let change = test(1000, 1000, 1.0, 1.0, ALPHA);
        assert_eq!(change.ratio, Some(1.0));
        assert!(change.p_value > 0.9, "{change:?}");
        assert!(!change.significant);
        assert!(change.interval.0 < 1.0 && change.interval.1 > 1.0);
    }

    #[test]
    fn twenty_percent_more_of_thousands_of_samples_is_significant() {
        let change = test(2520, 3024, 1.0, 1.0, ALPHA);
        assert!((change.percent().unwrap() - 20.0).abs() < 1e-9);
        assert!(change.p_value < 1e-9, "{change:?}");
        assert!(change.significant);
        let (low, high) = change.interval;
        assert!(
            low > 1.1 && low < 1.2 && high > 1.2 && high < 1.3,
            "{change:?}"
        );
    }

    #[test]
    fn a_few_samples_are_never_significant() {
        // 3 against 7: a ratio of 2.3, but ten samples say little.
        let change = test(3, 7, 1.0, 1.0, ALPHA);
        assert!(change.p_value > 0.3, "{change:?}");
        assert!(!change.significant);
    }

    #[test]
    fn the_weights_take_the_periods() {
        // The new side sampled twice as often: twice the samples is the same time.
        let change = test(1000, 2000, 1.0, 2.0, ALPHA);
        assert!((change.ratio.unwrap() - 1.0).abs() < 1e-9);
        assert!(!change.significant, "{change:?}");
        // And the same samples is half the time.
        let change = test(1000, 1000, 1.0, 2.0, ALPHA);
        assert!((change.ratio.unwrap() - 0.5).abs() < 1e-9);
        assert!(change.significant, "{change:?}");
    }

    #[test]
    fn code_new_in_one_side_has_no_ratio_but_a_test() {
        let change = test(0, 500, 1.0, 1.0, ALPHA);
        assert_eq!(change.ratio, None);
        assert!(change.significant);
        assert_eq!(change.interval.1, f64::INFINITY);
    }

    #[test]
    fn rows_too_small_to_be_significant_do_not_blunt_the_others() {
        // Two large rows and a hundred of three samples: only the large ones count.
        let mut counts = vec![2000, 1500];
        counts.extend(std::iter::repeat_n(3, 100));
        let (level, k) = tarone_level(&counts, 0.5, ALPHA);
        assert_eq!(k, 2);
        assert_eq!(level, ALPHA / 2.0);
        // Nothing testable: one test's level.
        assert_eq!(tarone_level(&[1, 2], 0.5, ALPHA).1, 1);
        // Every row large: Bonferroni's divisor.
        assert_eq!(tarone_level(&[100; 7], 0.5, ALPHA).1, 7);
    }

    #[test]
    fn p_values_match_known_binomial_tails() {
        // Binomial(10, 0.5): P(X <= 1) = 11/1024; two-sided 22/1024.
        assert!((two_sided_p(1, 10, 0.5) - 22.0 / 1024.0).abs() < 1e-12);
        assert!((two_sided_p(5, 10, 0.5) - 1.0).abs() < 1e-12);
    }
}
