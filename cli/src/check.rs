//! `vmscope check NEW --baseline BASE --max-increase 5% NAME...`: assertions on a profile
//! against a baseline for CI, after Compteur's `assertIs:fasterThan:`.
//!
//! An assertion fails when the function's time grew by more than the allowed share *and* the
//! growth is more than sampling noise, by the test `vmscope diff` marks changes with
//! ([`vmscope_report::diff::noise`]), its level divided among the assertions (Bonferroni): a
//! rerun of the same build passes, however the ticks fell, and a regression of a few samples
//! is not told from the dice. Exit status: 0 when every assertion holds, 1 when one fails (one
//! line each, saying why), 2 when the check cannot be made (no such session or file, a
//! function in neither profile).

use std::io::{self, Write};

use vmscope_report::diff::{Diff, FunctionDiff, Measure, Side, format_p, noise};

/// What to assert.
#[derive(Debug, Clone, PartialEq)]
pub struct Assertions {
    /// The largest growth of time allowed against the baseline, in percent (`5` for `5%`).
    pub max_increase: Option<f64>,
    /// The functions whose time to check, by exact name; the whole profile when empty.
    pub functions: Vec<String>,
    /// Compare self time instead of inclusive time.
    pub self_time: bool,
    /// The most calls allowed of functions `record --count` counted: compared exactly.
    pub max_counts: Vec<(String, u64)>,
}

/// One assertion's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// What was checked: a function's name, `total`, or a counted function.
    pub subject: String,
    /// Whether it held.
    pub held: bool,
    /// Its line, after `ok: ` or `FAILED: `.
    pub line: String,
}

/// Why a check cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A function in neither profile: a typo must not pass for a success.
    #[error("no function named {name:?} in either profile{hint}")]
    NoSuchFunction {
        /// The name asked for.
        name: String,
        /// Close names, `; did you mean ...?`, or empty.
        hint: String,
    },
    /// A count asked for that the profile does not have.
    #[error("{profile} counted no calls of {function}: record it with --count {function}{hint}")]
    NotCounted {
        /// The profile.
        profile: String,
        /// The function asked for.
        function: String,
        /// What it counted, or empty.
        hint: String,
    },
}

/// Judges the time assertions on `diff` (made with every row kept: `min_percent` 0).
pub fn judge(diff: &Diff, assertions: &Assertions) -> Result<Vec<Outcome>, CheckError> {
    let Some(allowed) = assertions.max_increase else {
        return Ok(Vec::new());
    };
    let count = assertions.functions.len().max(1);
    let level = noise::ALPHA / count as f64;
    let of = |f: &FunctionDiff| {
        if assertions.self_time {
            f.self_time
        } else {
            f.inclusive
        }
    };
    let mut subjects: Vec<(String, Measure)> = Vec::new();
    if assertions.functions.is_empty() {
        subjects.push(("total".to_owned(), diff.total));
    }
    for name in &assertions.functions {
        let rows: Vec<&FunctionDiff> = diff.functions.iter().filter(|f| &f.name == name).collect();
        if rows.is_empty() {
            return Err(CheckError::NoSuchFunction {
                name: name.clone(),
                hint: hint(diff, name),
            });
        }
        for row in &rows {
            let subject = if rows.len() > 1 {
                format!("{name} [{}]", row.module)
            } else {
                name.clone()
            };
            subjects.push((subject, of(row)));
        }
    }
    let what = if assertions.self_time {
        "self"
    } else {
        "inclusive"
    };
    Ok(subjects
        .into_iter()
        .map(|(subject, m)| {
            let grew_too_much = match m.change.percent() {
                Some(percent) => percent > allowed,
                // Time where the base had none: any of it is more than allowed.
                None => m.new_samples > 0,
            };
            let held = !(grew_too_much && m.change.p_value < level);
            let change = match m.change.percent() {
                Some(p) => format!("{p:+.1}%"),
                None => "new".to_owned(),
            };
            let why = if !held {
                format!("more than the allowed +{allowed}%, and more than sampling noise")
            } else if grew_too_much {
                "more than allowed, but not more than sampling noise".to_owned()
            } else {
                format!("within +{allowed}%")
            };
            Outcome {
                line: format!(
                    "{subject} {what} CPU time {change} ({:.1} ms -> {:.1} ms, p = {}): {why}",
                    m.base_ms,
                    m.new_ms,
                    format_p(m.change.p_value),
                ),
                subject,
                held,
            }
        })
        .collect())
}

/// Judges the count assertions on `new`, exactly.
pub fn judge_counts(new: &Side, assertions: &Assertions) -> Result<Vec<Outcome>, CheckError> {
    assertions
        .max_counts
        .iter()
        .map(|(function, most)| {
            let Some(&(_, calls)) = new.calls.iter().find(|(f, _)| f == function) else {
                let counted: Vec<&str> = new.calls.iter().map(|(f, _)| f.as_str()).collect();
                return Err(CheckError::NotCounted {
                    profile: new.label.clone(),
                    function: function.clone(),
                    hint: if counted.is_empty() {
                        String::new()
                    } else {
                        format!(" (it counted {})", counted.join(", "))
                    },
                });
            };
            let held = calls <= *most;
            let why = if held {
                format!("at most {most}")
            } else {
                format!("more than the allowed {most}, by {}", calls - most)
            };
            Ok(Outcome {
                subject: function.clone(),
                held,
                line: format!("{function} {calls} calls (exact): {why}"),
            })
        })
        .collect()
}

/// Close names for a name not found, as call trees suggest them (`tree::close_names`): the
/// same in another case, containing it or contained in it, a few edits away.
fn hint(diff: &Diff, name: &str) -> String {
    let mut names: Vec<&str> = diff.functions.iter().map(|f| f.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let close = vmscope_report::tree::close_names(name, names.into_iter());
    if close.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", close.join(", "))
    }
}

/// Writes one line per outcome, `ok: ...` or `FAILED: ...`. Returns the exit status: 0 if every
/// assertion held, 1 otherwise.
pub fn report(outcomes: &[Outcome], out: &mut impl Write) -> io::Result<i32> {
    for o in outcomes {
        let verdict = if o.held { "ok" } else { "FAILED" };
        writeln!(out, "{verdict}: {}", o.line)?;
    }
    Ok(if outcomes.iter().all(|o| o.held) {
        0
    } else {
        1
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmscope_report::diff::{DiffOptions, FrameKey, MAIN_MODULE, Side, SideStack, diff};

    /// `hot_a` at `a` samples and `hot_b` at 1000, under main, at 1 ms a sample.
    fn side(a: u64) -> Side {
        let frame = |name: &str| FrameKey {
            name: name.to_owned(),
            module: MAIN_MODULE.to_owned(),
            position: String::new(),
        };
        let stacks = vec![
            SideStack {
                frames: vec![frame("hot_a"), frame("main")],
                samples: a,
            },
            SideStack {
                frames: vec![frame("hot_b"), frame("main")],
                samples: 1000,
            },
        ];
        Side {
            label: "s".to_owned(),
            period_ns: 1e6,
            total_samples: a + 1000,
            stacks,
            main_executable: "vm".to_owned(),
            params: Vec::new(),
            calls: Vec::new(),
        }
    }

    fn assertions(functions: &[&str]) -> Assertions {
        Assertions {
            max_increase: Some(5.0),
            functions: functions.iter().map(|f| (*f).to_owned()).collect(),
            self_time: false,
            max_counts: Vec::new(),
        }
    }

    fn run(base: u64, new: u64, functions: &[&str]) -> (i32, String) {
        let options = DiffOptions {
            min_percent: 0.0,
            ..DiffOptions::default()
        };
        let d = diff(&side(base), &side(new), &options);
        let a = assertions(functions);
        let outcomes = judge(&d, &a).unwrap();
        let mut out = Vec::new();
        let code = report(&outcomes, &mut out).unwrap();
        (code, String::from_utf8(out).unwrap())
    }

    #[test]
    fn a_regression_beyond_the_allowance_and_the_noise_fails() {
        let (code, text) = run(2000, 2400, &["hot_a", "hot_b"]);
        assert_eq!(code, 1, "{text}");
        assert!(
            text.starts_with("FAILED: hot_a inclusive CPU time +20.0% (2000.0 ms -> 2400.0 ms")
        );
        assert!(
            text.contains("ok: hot_b inclusive CPU time +0.0%"),
            "{text}"
        );
    }

    #[test]
    fn growth_within_the_allowance_or_the_noise_passes() {
        // +4%: within 5%, however significant.
        assert_eq!(run(20_000, 20_800, &["hot_a"]).0, 0);
        // +20% of ten samples: beyond 5%, but dice.
        let (code, text) = run(10, 12, &["hot_a"]);
        assert_eq!(code, 0, "{text}");
        assert!(text.contains("not more than sampling noise"), "{text}");
        // Faster is never a failure.
        assert_eq!(run(2000, 1000, &["hot_a"]).0, 0);
    }

    #[test]
    fn no_function_checks_the_whole_profile() {
        let (code, text) = run(2000, 4000, &[]);
        assert_eq!(code, 1);
        assert!(
            text.starts_with("FAILED: total inclusive CPU time +66.7%"),
            "{text}"
        );
    }

    #[test]
    fn counts_are_compared_exactly() {
        let mut new = side(10);
        new.calls = vec![("libc.so.6:malloc".to_owned(), 1_000_001)];
        let at_most = |n| Assertions {
            max_increase: None,
            functions: Vec::new(),
            self_time: false,
            max_counts: vec![("libc.so.6:malloc".to_owned(), n)],
        };
        let outcomes = judge_counts(&new, &at_most(1_000_000)).unwrap();
        let mut out = Vec::new();
        assert_eq!(report(&outcomes, &mut out).unwrap(), 1);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "FAILED: libc.so.6:malloc 1000001 calls (exact): more than the allowed 1000000, by 1\n"
        );
        let outcomes = judge_counts(&new, &at_most(1_000_001)).unwrap();
        assert!(outcomes[0].held);
        let mut other = at_most(1);
        other.max_counts[0].0 = "libc.so.6:free".to_owned();
        let error = judge_counts(&new, &other).unwrap_err().to_string();
        assert!(
            error.contains("counted no calls of libc.so.6:free: record it with --count")
                && error.contains("(it counted libc.so.6:malloc)"),
            "{error}"
        );
    }

    #[test]
    fn a_name_in_neither_profile_is_an_error_with_close_names() {
        let d = diff(&side(10), &side(10), &DiffOptions::default());
        let error = judge(&d, &assertions(&["hot"])).unwrap_err().to_string();
        assert_eq!(
            error,
            "no function named \"hot\" in either profile; did you mean hot_a, hot_b?"
        );
    }
}
