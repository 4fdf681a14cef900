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

use vmscope_report::diff::{Diff, FunctionDiff, Measure, format_p, noise};

/// What to assert.
#[derive(Debug, Clone, PartialEq)]
pub struct Assertions {
    /// The largest growth allowed, in percent (`5` for `5%`).
    pub max_increase: f64,
    /// The functions to check, by exact name; the whole profile when empty.
    pub functions: Vec<String>,
    /// Compare self time instead of inclusive time.
    pub self_time: bool,
}

/// One assertion's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// What was checked: a function's name, or `total`.
    pub subject: String,
    /// Its measure in both sides.
    pub measure: Measure,
    /// Whether it held.
    pub held: bool,
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
}

/// Judges `assertions` on `diff` (made with every row kept: `min_percent` 0).
pub fn judge(diff: &Diff, assertions: &Assertions) -> Result<Vec<Outcome>, CheckError> {
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
        for row in rows {
            let subject = if diff.functions.iter().filter(|f| &f.name == name).count() > 1 {
                format!("{name} [{}]", row.module)
            } else {
                name.clone()
            };
            subjects.push((subject, of(row)));
        }
    }
    Ok(subjects
        .into_iter()
        .map(|(subject, measure)| {
            let grew_too_much = match measure.change.percent() {
                Some(percent) => percent > assertions.max_increase,
                // Time where the base had none: any of it is more than allowed.
                None => measure.new_samples > 0,
            };
            let held = !(grew_too_much && measure.change.p_value < level);
            Outcome {
                subject,
                measure,
                held,
            }
        })
        .collect())
}

/// Close names for a name not found: those containing it or contained in it.
fn hint(diff: &Diff, name: &str) -> String {
    let lower = name.to_lowercase();
    let mut close: Vec<&str> = diff
        .functions
        .iter()
        .map(|f| f.name.as_str())
        .filter(|n| {
            let n = n.to_lowercase();
            n.contains(&lower) || lower.contains(&n) && n.len() > 2
        })
        .collect();
    close.sort_unstable();
    close.dedup();
    close.truncate(5);
    if close.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", close.join(", "))
    }
}

/// Writes one line per outcome: `ok` or `FAILED`, and why. Returns the exit status: 0 if every
/// assertion held, 1 otherwise.
pub fn report(
    outcomes: &[Outcome],
    assertions: &Assertions,
    out: &mut impl Write,
) -> io::Result<i32> {
    let what = if assertions.self_time {
        "self"
    } else {
        "inclusive"
    };
    let allowed = assertions.max_increase;
    for o in outcomes {
        let m = &o.measure;
        let change = match m.change.percent() {
            Some(p) => format!("{p:+.1}%"),
            None => "new".to_owned(),
        };
        let verdict = if o.held { "ok" } else { "FAILED" };
        let why = if o.held {
            if m.change.percent().is_some_and(|p| p > allowed) {
                "more than allowed, but not more than sampling noise".to_owned()
            } else {
                format!("within +{allowed}%")
            }
        } else {
            format!("more than the allowed +{allowed}%, and more than sampling noise")
        };
        writeln!(
            out,
            "{verdict}: {} {what} CPU time {change} ({:.1} ms -> {:.1} ms, p = {}): {why}",
            o.subject,
            m.base_ms,
            m.new_ms,
            format_p(m.change.p_value),
        )?;
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
        }
    }

    fn assertions(functions: &[&str]) -> Assertions {
        Assertions {
            max_increase: 5.0,
            functions: functions.iter().map(|f| (*f).to_owned()).collect(),
            self_time: false,
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
        let code = report(&outcomes, &a, &mut out).unwrap();
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
    fn a_name_in_neither_profile_is_an_error_with_close_names() {
        let d = diff(&side(10), &side(10), &DiffOptions::default());
        let error = judge(&d, &assertions(&["hot"])).unwrap_err().to_string();
        assert_eq!(
            error,
            "no function named \"hot\" in either profile; did you mean hot_a, hot_b?"
        );
    }
}
