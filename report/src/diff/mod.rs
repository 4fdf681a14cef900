//! Two profiles compared (`vmscope diff BASE NEW`): per function and per bytecode range, the
//! self and inclusive CPU time of each side, the change, and whether it is more than sampling
//! noise ([`noise`]).
//!
//! Time, not shares, by default: a function whose work grew by 20% in a program that did the
//! same work otherwise takes 20% more time, and every other function takes as much as before,
//! where shares would have moved all of them. That reads right for runs of a fixed workload (a
//! benchmark, a test suite, a build). Runs of a fixed length (`record --duration`) sample the
//! same time whatever the program did: there `--normalize` compares each function's share of
//! its side's samples instead.

pub mod noise;
mod side;

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

pub use noise::Change;
pub use side::{
    CALLS_COMMENT, FrameKey, Granularity, MAIN_MODULE, PARAM_COMMENT, Side, SideError, SideStack,
};

/// How to compare.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiffOptions {
    /// Compare shares of each side's samples, not times (runs of a fixed length).
    pub normalize: bool,
    /// Show rows whose self and inclusive time are both under this percentage of their side's
    /// in both sides folded away (they are still tested). 0 shows every row.
    pub min_percent: f64,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            normalize: false,
            min_percent: 0.5,
        }
    }
}

/// One measure of one row in both sides.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Measure {
    /// Samples in the base.
    pub base_samples: u64,
    /// Samples in the new side.
    pub new_samples: u64,
    /// The base's CPU time, in milliseconds (its samples times its period).
    pub base_ms: f64,
    /// The new side's.
    pub new_ms: f64,
    /// The change, and what the test says of it.
    pub change: Change,
}

impl Measure {
    /// New minus base, in milliseconds (in shares of each side's time under `--normalize`,
    /// scaled to the base's total).
    pub fn delta_ms(&self) -> f64 {
        self.new_ms - self.base_ms
    }
}

/// A position inside a function (a bytecode range), in both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PositionDiff {
    /// The range (`8->23`, `@8` from pprof files).
    pub position: String,
    /// Samples whose leaf is there.
    #[serde(rename = "self")]
    pub self_time: Measure,
    /// Samples whose stack holds it (for a caller: time spent from that call site).
    pub inclusive: Measure,
}

/// A function in both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionDiff {
    /// Its name.
    pub name: String,
    /// Its module's file name ([`MAIN_MODULE`] for the main executable).
    pub module: String,
    /// Self time.
    #[serde(rename = "self")]
    pub self_time: Measure,
    /// Inclusive time.
    pub inclusive: Measure,
    /// Its positions, in code order of their labels.
    pub positions: Vec<PositionDiff>,
}

/// A counted function's calls in both sides (`record --count`): exact, compared as they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallsDiff {
    /// `MODULE:FUNCTION`.
    pub function: String,
    /// Its calls in the base, `None` when the base did not count it.
    pub base: Option<u64>,
    /// Its calls in the new side.
    pub new: Option<u64>,
}

/// One side as the diff's header describes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideSummary {
    /// `session 3`, a file name.
    pub label: String,
    /// Every sample.
    pub samples: u64,
    /// Nanoseconds one sample stands for.
    pub period_ns: f64,
    /// The CPU time sampled, in seconds.
    pub cpu_seconds: f64,
    /// The main executable's file name.
    pub main_executable: String,
}

/// Two profiles compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    /// The base.
    pub base: SideSummary,
    /// The new side.
    pub new: SideSummary,
    /// Shares compared rather than times.
    pub normalized: bool,
    /// Whether bytecode ranges are cut to their first pc (`@8`), as a pprof file keeps them.
    pub positions_by_first_pc: bool,
    /// The tests that count (rows and measures that could be significant at all, Tarone's
    /// correction): the divisor of [`noise::ALPHA`].
    pub tests: usize,
    /// The level under which one test's p-value is significant: `ALPHA / tests`.
    pub level: f64,
    /// The whole of each side.
    pub total: Measure,
    /// The functions shown, largest change of self time first (then of inclusive time).
    pub functions: Vec<FunctionDiff>,
    /// [`DiffOptions::min_percent`]: the share under which rows are folded away.
    pub min_percent: f64,
    /// Rows folded away under it.
    pub folded_rows: usize,
    /// Of the folded rows, those with a significant change (they are few, and small).
    pub folded_significant: usize,
    /// How the test is made, in one sentence, for the output.
    pub test: String,
    /// The functions either side counted the calls of, in the order counted.
    pub calls: Vec<CallsDiff>,
}

#[derive(Default, Clone, Copy)]
struct Counts {
    self_samples: [u64; 2],
    inclusive: [u64; 2],
}

/// A function as a side names it: name and module, borrowed from the side.
pub type FunctionKey<'a> = (&'a str, &'a str);

/// One side's samples of a function or position: whose leaf it is (self), and in how many
/// stacks it stands (inclusive, once per stack).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tallied {
    /// Samples whose leaf it is.
    pub self_samples: u64,
    /// Samples whose stack holds it.
    pub inclusive: u64,
}

/// A side's samples per function and per position in a function.
#[derive(Debug, Default)]
pub struct Tally<'a> {
    /// Per function.
    pub functions: BTreeMap<FunctionKey<'a>, Tallied>,
    /// Per (function, position).
    pub positions: BTreeMap<(FunctionKey<'a>, &'a str), Tallied>,
}

impl<'a> Tally<'a> {
    /// The self and inclusive samples of `side`'s functions and positions.
    pub fn of(side: &'a Side) -> Tally<'a> {
        let mut tally = Tally::default();
        // Each function and position counts once per stack in inclusive time.
        let mut seen_functions: HashSet<FunctionKey<'a>> = HashSet::new();
        let mut seen_positions: HashSet<(FunctionKey<'a>, &'a str)> = HashSet::new();
        for stack in &side.stacks {
            seen_functions.clear();
            seen_positions.clear();
            for (depth, frame) in stack.frames.iter().enumerate() {
                let function = (frame.name.as_str(), frame.module.as_str());
                let leaf = depth == 0;
                if leaf {
                    tally.functions.entry(function).or_default().self_samples += stack.samples;
                }
                if !frame.position.is_empty() {
                    let key = (function, frame.position.as_str());
                    if leaf {
                        tally.positions.entry(key).or_default().self_samples += stack.samples;
                    }
                    if seen_positions.insert(key) {
                        tally.positions.entry(key).or_default().inclusive += stack.samples;
                    }
                }
                if seen_functions.insert(function) {
                    tally.functions.entry(function).or_default().inclusive += stack.samples;
                }
            }
        }
        tally
    }
}

/// Compares `base` and `new`.
pub fn diff(base: &Side, new: &Side, options: &DiffOptions) -> Diff {
    let mut functions: BTreeMap<FunctionKey<'_>, Counts> = BTreeMap::new();
    let mut positions: BTreeMap<(FunctionKey<'_>, &str), Counts> = BTreeMap::new();
    for (side, profile) in [base, new].into_iter().enumerate() {
        let tally = Tally::of(profile);
        for (key, t) in tally.functions {
            let counts = functions.entry(key).or_default();
            counts.self_samples[side] = t.self_samples;
            counts.inclusive[side] = t.inclusive;
        }
        for (key, t) in tally.positions {
            let counts = positions.entry(key).or_default();
            counts.self_samples[side] = t.self_samples;
            counts.inclusive[side] = t.inclusive;
        }
    }

    let weights = if options.normalize {
        [
            base.total_samples.max(1) as f64,
            new.total_samples.max(1) as f64,
        ]
    } else {
        [1.0 / base.period_ns, 1.0 / new.period_ns]
    };
    let counts: Vec<u64> = functions
        .values()
        .chain(positions.values())
        .flat_map(|c| [c.self_samples, c.inclusive])
        .chain([[base.total_samples, new.total_samples]])
        .map(|k| k[0] + k[1])
        .filter(|&n| n > 0)
        .collect();
    let (level, tests) = noise::tarone_level(
        &counts,
        weights[1] / (weights[0] + weights[1]),
        noise::ALPHA,
    );
    let scale = if options.normalize {
        // Each side's time in shares of its total, shown as the base's milliseconds.
        let base_ms = base.cpu_seconds() * 1e3;
        [
            base_ms / base.total_samples.max(1) as f64,
            base_ms / new.total_samples.max(1) as f64,
        ]
    } else {
        [base.period_ns / 1e6, new.period_ns / 1e6]
    };
    let measure = |k: [u64; 2]| Measure {
        base_samples: k[0],
        new_samples: k[1],
        base_ms: k[0] as f64 * scale[0],
        new_ms: k[1] as f64 * scale[1],
        change: noise::test(k[0], k[1], weights[0], weights[1], level),
    };
    let total = measure([base.total_samples, new.total_samples]);

    let mut by_function: HashMap<FunctionKey<'_>, Vec<PositionDiff>> = HashMap::new();
    for (&(function, position), counts) in &positions {
        by_function.entry(function).or_default().push(PositionDiff {
            position: position.to_owned(),
            self_time: measure(counts.self_samples),
            inclusive: measure(counts.inclusive),
        });
    }
    let shown = |m: &Measure, totals: [u64; 2]| {
        let share = |k: u64, n: u64| k as f64 * 100.0 / n.max(1) as f64;
        share(m.base_samples, totals[0]) >= options.min_percent
            || share(m.new_samples, totals[1]) >= options.min_percent
    };
    let totals = [base.total_samples, new.total_samples];
    let (mut folded_rows, mut folded_significant) = (0, 0);
    let mut fold = |significant: bool| {
        folded_rows += 1;
        folded_significant += usize::from(significant);
    };
    let mut rows = Vec::new();
    for (&(name, module), counts) in &functions {
        let self_time = measure(counts.self_samples);
        let inclusive = measure(counts.inclusive);
        let mut positions = by_function.remove(&(name, module)).unwrap_or_default();
        if !shown(&self_time, totals) && !shown(&inclusive, totals) {
            fold(self_time.change.significant || inclusive.change.significant);
            for p in &positions {
                fold(p.self_time.change.significant || p.inclusive.change.significant);
            }
            continue;
        }
        positions.retain(|p| {
            let keep = shown(&p.self_time, totals) || shown(&p.inclusive, totals);
            if !keep {
                fold(p.self_time.change.significant || p.inclusive.change.significant);
            }
            keep
        });
        rows.push(FunctionDiff {
            name: name.to_owned(),
            module: module.to_owned(),
            self_time,
            inclusive,
            positions,
        });
    }
    rows.sort_by(|a, b| {
        let key = |f: &FunctionDiff| (f.self_time.delta_ms().abs(), f.inclusive.delta_ms().abs());
        key(b)
            .partial_cmp(&key(a))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| (&a.name, &a.module).cmp(&(&b.name, &b.module)))
    });
    let summary = |side: &Side| SideSummary {
        label: side.label.clone(),
        samples: side.total_samples,
        period_ns: side.period_ns,
        cpu_seconds: side.cpu_seconds(),
        main_executable: side.main_executable.clone(),
    };
    let what = if options.normalize {
        "each side's share of its samples"
    } else {
        "sampled CPU time"
    };
    let mut calls: Vec<CallsDiff> = Vec::new();
    for (side, counts) in [&base.calls, &new.calls].into_iter().enumerate() {
        for (function, n) in counts {
            let at = match calls.iter().position(|c| &c.function == function) {
                Some(at) => at,
                None => {
                    calls.push(CallsDiff {
                        function: function.clone(),
                        base: None,
                        new: None,
                    });
                    calls.len() - 1
                }
            };
            if side == 0 {
                calls[at].base = Some(*n);
            } else {
                calls[at].new = Some(*n);
            }
        }
    }
    Diff {
        base: summary(base),
        new: summary(new),
        normalized: options.normalize,
        positions_by_first_pc: false,
        tests,
        level,
        total,
        functions: rows,
        min_percent: options.min_percent,
        folded_rows,
        folded_significant,
        test: format!(
            "{what}; * marks a change more than sampling noise: an exact two-sided binomial \
             test of the sample counts given their sum (Poisson sampling), p < {} ({} over \
             the {tests} rows that could reach it, Bonferroni after Tarone); intervals are 95% \
             (Clopper-Pearson)",
            format_p(level),
            noise::ALPHA,
        ),
        calls,
    }
}

/// A p-value for people: two significant digits, scientific under 0.001.
pub fn format_p(p: f64) -> String {
    if p == 0.0 {
        "0".to_owned()
    } else if p < 1e-3 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

impl Diff {
    /// The first function named `name` exactly among the rows shown (a diff made with
    /// `min_percent` 0 shows every row).
    pub fn function(&self, name: &str) -> Option<&FunctionDiff> {
        self.functions.iter().find(|f| f.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str, position: &str) -> FrameKey {
        FrameKey {
            name: name.to_owned(),
            module: MAIN_MODULE.to_owned(),
            position: position.to_owned(),
        }
    }

    /// The 60/30/10 split at `a` ms per round of a, 3 of b, 1 of c, for `rounds` rounds, at
    /// 1400 Hz: each function under main.
    fn side(label: &str, a_ms: f64, rounds: f64) -> Side {
        let period_ns = 1e9 / 1400.0;
        let samples = |ms: f64| (ms * rounds * 1e6 / period_ns).round() as u64;
        let stacks: Vec<SideStack> = [("hot_a", a_ms), ("hot_b", 3.0), ("hot_c", 1.0)]
            .into_iter()
            .map(|(name, ms)| SideStack {
                frames: vec![frame(name, ""), frame("main", "")],
                samples: samples(ms),
            })
            .collect();
        Side {
            label: label.to_owned(),
            period_ns,
            total_samples: stacks.iter().map(|s| s.samples).sum(),
            stacks,
            main_executable: "hotspots".to_owned(),
            params: Vec::new(),
            calls: Vec::new(),
        }
    }

    #[test]
    fn the_same_work_twice_is_no_change() {
        let d = diff(
            &side("a", 6.0, 300.0),
            &side("b", 6.0, 300.0),
            &DiffOptions::default(),
        );
        assert!(d.functions.iter().all(|f| !f.self_time.change.significant));
        assert_eq!(d.functions.len(), 4);
        // Self and inclusive of each function, but main's self (no sample in either), and
        // the total: all large enough to count.
        assert_eq!(d.tests, 4 * 2 - 1 + 1);
    }

    #[test]
    fn one_function_doing_more_work_alone_is_flagged() {
        let d = diff(
            &side("a", 6.0, 300.0),
            &side("b", 7.2, 300.0),
            &DiffOptions::default(),
        );
        let flagged: Vec<&str> = d
            .functions
            .iter()
            .filter(|f| f.self_time.change.significant)
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(flagged, ["hot_a"]);
        let a = d.function("hot_a").unwrap();
        assert!((a.self_time.change.percent().unwrap() - 20.0).abs() < 0.1);
        // main holds everything: its inclusive time grew by 1.2 of 10 ms a round.
        let main = d.function("main").unwrap();
        assert!(main.inclusive.change.significant);
        assert!((main.inclusive.change.percent().unwrap() - 12.0).abs() < 0.1);
        // Largest change first.
        assert_eq!(d.functions[0].name, "hot_a");
    }

    #[test]
    fn shares_move_together_where_times_do_not() {
        let options = DiffOptions {
            normalize: true,
            ..DiffOptions::default()
        };
        let d = diff(&side("a", 6.0, 300.0), &side("b", 7.2, 300.0), &options);
        let b = d.function("hot_b").unwrap();
        // 3/10 of the time before, 3/11.2 after.
        let expected = (3.0 / 11.2) / (3.0 / 10.0) - 1.0;
        assert!((b.self_time.change.percent().unwrap() / 100.0 - expected).abs() < 0.002);
        // A run twice as long with the same split: no share moved.
        let d = diff(&side("a", 6.0, 300.0), &side("b", 6.0, 600.0), &options);
        assert!(d.functions.iter().all(|f| !f.self_time.change.significant));
    }

    #[test]
    fn positions_count_self_at_the_leaf_and_inclusive_once_per_stack() {
        let stacks = vec![
            SideStack {
                frames: vec![
                    frame("callee", ""),
                    frame("m", "8->23"),
                    frame("m", "8->23"),
                ],
                samples: 10,
            },
            SideStack {
                frames: vec![frame("m", "1->8")],
                samples: 5,
            },
        ];
        let s = Side {
            label: "s".to_owned(),
            period_ns: 1e6,
            total_samples: 15,
            stacks,
            main_executable: String::new(),
            params: Vec::new(),
            calls: Vec::new(),
        };
        let d = diff(
            &s,
            &s,
            &DiffOptions {
                min_percent: 0.0,
                ..DiffOptions::default()
            },
        );
        let m = d.function("m").unwrap();
        assert_eq!(
            (m.self_time.base_samples, m.inclusive.base_samples),
            (5, 15)
        );
        let call_site = m.positions.iter().find(|p| p.position == "8->23").unwrap();
        assert_eq!(
            (
                call_site.self_time.base_samples,
                call_site.inclusive.base_samples
            ),
            (0, 10)
        );
        assert_eq!(d.folded_rows, 0);
    }
}
