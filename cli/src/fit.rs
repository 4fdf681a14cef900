//! `vmscope fit PROFILE...`: each function's CPU time over profiles recorded at several values
//! of a workload parameter (`record --param n=...`), fitted as constant, n, n log n, n² or n³
//! ([`vmscope_report::fit`]).

use std::{
    collections::BTreeMap,
    io::{self, Write},
};

use serde::Serialize;
use vmscope_report::{
    diff::{MAIN_MODULE, Side, Tally},
    fit::{Fit, fit},
};

/// What to fit.
#[derive(Debug, Clone, PartialEq)]
pub struct FitOptions {
    /// The parameter's key; the one every profile has when `None` and there is one.
    pub param: Option<String>,
    /// Fit self time instead of inclusive time.
    pub self_time: bool,
    /// Only these functions (exact names); every function holding at least `min_percent` of
    /// some profile's samples when empty.
    pub functions: Vec<String>,
    /// See `functions`.
    pub min_percent: f64,
}

/// One function's fit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionFit {
    /// Its name.
    pub name: String,
    /// Its module (`[main]` for the main executable).
    pub module: String,
    /// (parameter, milliseconds) per profile, in parameter order.
    pub points: Vec<(f64, f64)>,
    /// The fit.
    pub fit: Fit,
}

/// Every fit, for the output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fits {
    /// The parameter.
    pub param: String,
    /// Whether times are self times.
    pub self_time: bool,
    /// The profiles, by label, with their parameter value.
    pub profiles: Vec<(String, f64)>,
    /// One per function fitted, largest time at the largest parameter first.
    pub functions: Vec<FunctionFit>,
}

/// Why fits cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// Too few profiles.
    #[error("{0} profiles: a fit needs at least 3, at different values of the parameter")]
    TooFew(usize),
    /// No parameter named, and the profiles do not agree on one.
    #[error(
        "which parameter? the profiles' keys are {0:?}: give --param KEY (profiles take theirs \
         from `vmscope record --param KEY=VALUE`)"
    )]
    WhichParam(Vec<String>),
    /// A profile without the parameter, or with a value that is not a number.
    #[error("{label} has no numeric parameter {key} (its parameters: {params:?})")]
    NoValue {
        /// The profile.
        label: String,
        /// The key.
        key: String,
        /// What it has.
        params: Vec<(String, String)>,
    },
    /// A function asked for that no profile has.
    #[error("no function named {0:?} in any of the profiles")]
    NoSuchFunction(String),
}

/// Fits `sides` as `options` says.
pub fn fits(sides: &[Side], options: &FitOptions) -> Result<Fits, FitError> {
    if sides.len() < 3 {
        return Err(FitError::TooFew(sides.len()));
    }
    let key = match &options.param {
        Some(key) => key.clone(),
        None => {
            let mut keys: Vec<String> = sides[0].params.iter().map(|(k, _)| k.clone()).collect();
            keys.retain(|k| {
                sides
                    .iter()
                    .all(|s| s.params.iter().any(|(key, _)| key == k))
            });
            match keys.as_slice() {
                [one] => one.clone(),
                _ => {
                    let mut all: Vec<String> = sides
                        .iter()
                        .flat_map(|s| s.params.iter().map(|(k, _)| k.clone()))
                        .collect();
                    all.sort();
                    all.dedup();
                    return Err(FitError::WhichParam(all));
                }
            }
        }
    };
    let mut profiles = Vec::with_capacity(sides.len());
    for side in sides {
        let value = side
            .params
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite())
            .ok_or_else(|| FitError::NoValue {
                label: side.label.clone(),
                key: key.clone(),
                params: side.params.clone(),
            })?;
        profiles.push((side.label.clone(), value));
    }

    // Milliseconds per (function, module) per profile.
    let mut times: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut shown: BTreeMap<(String, String), bool> = BTreeMap::new();
    for (i, side) in sides.iter().enumerate() {
        let tally = Tally::of(side);
        let samples = tally.functions.into_iter().map(|((name, module), t)| {
            let count = if options.self_time {
                t.self_samples
            } else {
                t.inclusive
            };
            ((name.to_owned(), module.to_owned()), count)
        });
        for (key, count) in samples {
            let share = count as f64 * 100.0 / side.total_samples.max(1) as f64;
            let big = shown.entry(key.clone()).or_default();
            *big |= share >= options.min_percent;
            times.entry(key).or_insert_with(|| vec![0.0; sides.len()])[i] =
                count as f64 * side.period_ns / 1e6;
        }
    }
    for name in &options.functions {
        if !times.keys().any(|(n, _)| n == name) {
            return Err(FitError::NoSuchFunction(name.clone()));
        }
    }
    let mut functions: Vec<FunctionFit> = times
        .into_iter()
        .filter(|(key, _)| {
            if options.functions.is_empty() {
                shown.get(key).copied().unwrap_or(false)
            } else {
                options.functions.contains(&key.0)
            }
        })
        .filter_map(|((name, module), ms)| {
            let mut points: Vec<(f64, f64)> = profiles.iter().map(|p| p.1).zip(ms).collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let fit = fit(&points)?;
            Some(FunctionFit {
                name,
                module,
                points,
                fit,
            })
        })
        .collect();
    functions.sort_by(|a, b| {
        let last = |f: &FunctionFit| f.points.last().map_or(0.0, |p| p.1);
        last(b)
            .total_cmp(&last(a))
            .then_with(|| a.name.cmp(&b.name))
    });
    Ok(Fits {
        param: key,
        self_time: options.self_time,
        profiles,
        functions,
    })
}

/// The fits as text: one line per function, its chosen model with its coefficients, R² and
/// leave-one-out error, then the others' errors.
pub fn render_text(fits: &Fits, main: &str, out: &mut impl Write) -> io::Result<()> {
    let (low, high) = fits
        .profiles
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            (l.min(p.1), h.max(p.1))
        });
    writeln!(
        out,
        "cost models of {} CPU time (ms) against {}, over {} profiles ({} = {low} to {high})",
        if fits.self_time { "self" } else { "inclusive" },
        fits.param,
        fits.profiles.len(),
        fits.param
    )?;
    writeln!(
        out,
        "models a + b*n + ... by least squares, chosen by leave-one-out error (the simplest \
         within {:.0}% of the best or below {:.0}% of the largest cost, never one falling for \
         large n); R^2 of the chosen fit over every point",
        (vmscope_report::fit::SIMPLER_WITHIN - 1.0) * 100.0,
        vmscope_report::fit::NOISE_FLOOR * 100.0
    )?;
    for f in &fits.functions {
        let module = if f.module == MAIN_MODULE {
            main
        } else {
            &f.module
        };
        let chosen = &f.fit.chosen;
        let terms: Vec<String> = chosen
            .model
            .terms()
            .iter()
            .zip(&chosen.coefficients)
            .map(|(t, c)| format!("{t}: {c:.4e}"))
            .collect();
        writeln!(out)?;
        writeln!(out, "{} [{module}]", f.name)?;
        writeln!(
            out,
            "  O({})  {}  R^2 {:.4}  error {} ms",
            chosen.model.as_str(),
            terms.join("  "),
            chosen.r_squared,
            chosen.cv_rmse.map_or("-".to_owned(), |e| format!("{e:.2}"))
        )?;
        let others: Vec<String> = f
            .fit
            .models
            .iter()
            .filter(|m| m.model != chosen.model)
            .map(|m| {
                format!(
                    "O({}) {}",
                    m.model.as_str(),
                    m.cv_rmse.map_or("-".to_owned(), |e| format!("{e:.2}"))
                )
            })
            .collect();
        writeln!(out, "  other models' errors (ms): {}", others.join(", "))?;
    }
    Ok(())
}
