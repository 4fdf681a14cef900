//! Cost models (after Beagle): a function's time over profiles recorded at several values of a
//! workload parameter (`record --param n=...`), fitted as constant, n, n log n, n² or n³, the
//! model chosen by its cross-validated error.
//!
//! Each model is least squares over its terms and every lower one: constant `a`; n `a + b·n`;
//! n log n `a + b·n + c·n·log₂n`; n² `a + b·n + c·n²`; n³ `a + b·n + c·n² + d·n³`. A model is
//! judged by its leave-one-out error (each point predicted by the fit of the others): a model
//! with more terms fits the points it saw better, not those it did not. The simplest model
//! whose error is within 10% of the smallest, or below 1% of the largest cost measured, is
//! chosen: a linear cost is not called quadratic for a better fourth decimal, nor a quadratic
//! one cubic for fitting two samples' wobble better. A model whose highest term is negative (a
//! cost that would fall for large n) is never chosen. R² is of the chosen fit over all the
//! points.

use serde::Serialize;

/// The models, simplest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Model {
    /// `a`.
    Constant,
    /// `a + b·n`.
    Linear,
    /// `a + b·n + c·n·log₂n`.
    NLogN,
    /// `a + b·n + c·n²`.
    Quadratic,
    /// `a + b·n + c·n² + d·n³`.
    Cubic,
}

impl Model {
    /// Every model, simplest first.
    pub const ALL: [Model; 5] = [
        Model::Constant,
        Model::Linear,
        Model::NLogN,
        Model::Quadratic,
        Model::Cubic,
    ];

    /// How the output names it: `1`, `n`, `n log n`, `n^2`, `n^3`.
    pub fn as_str(self) -> &'static str {
        match self {
            Model::Constant => "1",
            Model::Linear => "n",
            Model::NLogN => "n log n",
            Model::Quadratic => "n^2",
            Model::Cubic => "n^3",
        }
    }

    /// The names of its terms, in coefficient order.
    pub fn terms(self) -> &'static [&'static str] {
        match self {
            Model::Constant => &["1"],
            Model::Linear => &["1", "n"],
            Model::NLogN => &["1", "n", "n log2 n"],
            Model::Quadratic => &["1", "n", "n^2"],
            Model::Cubic => &["1", "n", "n^2", "n^3"],
        }
    }

    fn basis(self, n: f64) -> Vec<f64> {
        match self {
            Model::Constant => vec![1.0],
            Model::Linear => vec![1.0, n],
            Model::NLogN => vec![1.0, n, n * n.max(1.0).log2()],
            Model::Quadratic => vec![1.0, n, n * n],
            Model::Cubic => vec![1.0, n, n * n, n * n * n],
        }
    }
}

/// One model fitted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fitted {
    /// The model.
    pub model: Model,
    /// Its coefficients, one per term ([`Model::terms`]).
    pub coefficients: Vec<f64>,
    /// R² over every point.
    pub r_squared: f64,
    /// Root mean square of the leave-one-out errors; `None` with too few points.
    pub cv_rmse: Option<f64>,
}

impl Fitted {
    /// Whether the highest term's coefficient is not negative. A model whose highest term is
    /// negative describes a cost that falls once n is large enough, which no workload's does:
    /// what it fitted is the bend of noisy points, so it is never chosen. The constant always
    /// qualifies.
    fn grows(&self) -> bool {
        self.model == Model::Constant || self.coefficients.last().is_some_and(|&c| c >= 0.0)
    }
}

/// The fits of one series of points, and the model chosen.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    /// The chosen fit.
    pub chosen: Fitted,
    /// Every model that could be fitted, simplest first.
    pub models: Vec<Fitted>,
}

/// The least margin, as a factor of the smallest leave-one-out error, within which the
/// simplest model is chosen, however steady the errors.
pub const SIMPLER_WITHIN: f64 = 1.10;

/// The leave-one-out error, as a fraction of the largest cost measured, below which models
/// are not told apart: profiles of one workload differ by about that much from run to run on
/// a shared machine, so a better error below it is the noise fitted.
pub const NOISE_FLOOR: f64 = 0.01;

/// Fits `points` (parameter, cost). Models need at least two points more than their terms
/// (one to leave out, one to judge); `None` with fewer than three points.
pub fn fit(points: &[(f64, f64)]) -> Option<Fit> {
    if points.len() < 3 {
        return None;
    }
    let models: Vec<Fitted> = Model::ALL
        .into_iter()
        .filter(|m| m.terms().len() + 2 <= points.len())
        .filter_map(|m| fit_model(m, points))
        .collect();
    let best = models
        .iter()
        .filter(|f| f.grows())
        .filter_map(|f| f.cv_rmse)
        .fold(f64::INFINITY, f64::min);
    let largest = points.iter().map(|p| p.1.abs()).fold(0.0, f64::max);
    let limit = (best * SIMPLER_WITHIN).max(largest * NOISE_FLOOR);
    let chosen = models
        .iter()
        .filter(|f| f.grows())
        .find(|f| f.cv_rmse.is_some_and(|e| e <= limit + 1e-12))
        .or(models.first())?
        .clone();
    Some(Fit { chosen, models })
}

fn fit_model(model: Model, points: &[(f64, f64)]) -> Option<Fitted> {
    let coefficients = least_squares(model, points)?;
    let predict =
        |c: &[f64], n: f64| -> f64 { model.basis(n).iter().zip(c).map(|(b, c)| b * c).sum() };
    let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
    let total: f64 = points.iter().map(|p| (p.1 - mean).powi(2)).sum();
    let residual: f64 = points
        .iter()
        .map(|&(n, y)| (y - predict(&coefficients, n)).powi(2))
        .sum();
    let r_squared = if total > 0.0 {
        1.0 - residual / total
    } else {
        1.0
    };
    let mut errors = 0.0;
    let mut judged = 0;
    for i in 0..points.len() {
        let others: Vec<(f64, f64)> = points
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, &p)| p)
            .collect();
        if let Some(c) = least_squares(model, &others) {
            errors += (points[i].1 - predict(&c, points[i].0)).powi(2);
            judged += 1;
        }
    }
    Some(Fitted {
        model,
        coefficients,
        r_squared,
        cv_rmse: (judged == points.len()).then(|| (errors / judged as f64).sqrt()),
    })
}

/// Least squares of `model` over `points`, on the parameter scaled to at most 1 (n³ of a
/// thousand would swamp the constant term), scaled back; `None` when the system is singular
/// (too few distinct parameters).
fn least_squares(model: Model, points: &[(f64, f64)]) -> Option<Vec<f64>> {
    let scale = points.iter().map(|p| p.0.abs()).fold(0.0, f64::max);
    if scale == 0.0 {
        return None;
    }
    let k = model.terms().len();
    // Normal equations on the scaled basis: (XᵀX) c = Xᵀy.
    let mut a = vec![vec![0.0; k + 1]; k];
    for &(n, y) in points {
        let x = scaled_basis(model, n, scale);
        for i in 0..k {
            for j in 0..k {
                a[i][j] += x[i] * x[j];
            }
            a[i][k] += x[i] * y;
        }
    }
    let c = solve(a)?;
    // Back to the parameter's own scale: each term's coefficient over its scale.
    Some((0..k).map(|i| c[i] / term_scale(model, i, scale)).collect())
}

/// The basis at `n / scale`, with n log n's logarithm of the real `n` (its scale is then
/// `scale`, as for n).
fn scaled_basis(model: Model, n: f64, scale: f64) -> Vec<f64> {
    model
        .basis(n)
        .iter()
        .enumerate()
        .map(|(i, b)| b / term_scale(model, i, scale))
        .collect()
}

fn term_scale(model: Model, term: usize, scale: f64) -> f64 {
    match (model, term) {
        (_, 0) => 1.0,
        (_, 1) => scale,
        (Model::NLogN, 2) => scale * scale.max(2.0).log2(),
        (_, t) => scale.powi(t as i32),
    }
}

/// Gaussian elimination with partial pivoting of an augmented `k × (k + 1)` system.
fn solve(mut a: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let k = a.len();
    for col in 0..k {
        let pivot = (col..k).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (row, values) in a.iter_mut().enumerate() {
            if row != col {
                let factor = values[col] / pivot_row[col];
                for (value, p) in values.iter_mut().zip(&pivot_row).skip(col) {
                    *value -= factor * p;
                }
            }
        }
    }
    Some((0..k).map(|i| a[i][k] / a[i][i]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: [f64; 10] = [
        16.0, 32.0, 64.0, 128.0, 256.0, 384.0, 512.0, 640.0, 768.0, 1024.0,
    ];

    /// `f` at each n, with a deterministic wobble of `noise` (relative) and sampling's
    /// quantum of 0.7 ms.
    fn series(f: impl Fn(f64) -> f64, noise: f64) -> Vec<(f64, f64)> {
        NS.iter()
            .enumerate()
            .map(|(i, &n)| {
                let wobble = if i % 2 == 0 { 1.0 + noise } else { 1.0 - noise };
                (n, ((f(n) * wobble) / 0.7).round() * 0.7)
            })
            .collect()
    }

    #[test]
    fn a_quadratic_cost_is_found_with_its_coefficient() {
        // 1 µs per unit of n² + 3n, in ms.
        let fit = fit(&series(|n| (n * n + 3.0 * n) * 1e-3, 0.01)).unwrap();
        assert_eq!(fit.chosen.model, Model::Quadratic, "{fit:#?}");
        let c = fit.chosen.coefficients[2];
        assert!((c - 1e-3).abs() < 0.05e-3, "c = {c}");
        assert!(fit.chosen.r_squared >= 0.99);
    }

    #[test]
    fn a_linear_cost_is_called_linear() {
        let fit = fit(&series(|n| 0.5 * n, 0.02)).unwrap();
        assert_eq!(fit.chosen.model, Model::Linear, "{fit:#?}");
        assert!((fit.chosen.coefficients[1] - 0.5).abs() < 0.02);
    }

    #[test]
    fn constant_n_log_n_and_cubic_costs_are_told_apart() {
        assert_eq!(
            fit(&series(|_| 300.0, 0.01)).unwrap().chosen.model,
            Model::Constant
        );
        assert_eq!(
            fit(&series(|n| 0.2 * n * n.log2(), 0.002))
                .unwrap()
                .chosen
                .model,
            Model::NLogN
        );
        assert_eq!(
            fit(&series(|n| n * n * n * 1e-6, 0.01))
                .unwrap()
                .chosen
                .model,
            Model::Cubic
        );
    }

    /// Points of the `cost` fixture's quadratic (0.5 µs·(n² + 3n)) as CI measured them, each
    /// within two samples of the truth: the cubic's leave-one-out error undercut the quadratic's
    /// by 16% on those wiggles, so a 10% margin alone called it cubic.
    #[test]
    fn a_quadratic_measured_within_two_samples_is_not_called_cubic() {
        let points = [
            (16.0, 0.0),
            (32.0, 0.714286),
            (64.0, 0.0),
            (128.0, 8.571432),
            (256.0, 33.571442),
            (384.0, 75.714316),
            (512.0, 132.857196),
            (640.0, 204.285796),
            (768.0, 295.714404),
            (1024.0, 526.428782),
        ];
        let fit = fit(&points).unwrap();
        assert_eq!(fit.chosen.model, Model::Quadratic, "{fit:#?}");
        let c = fit.chosen.coefficients[2];
        assert!((c - 0.5e-3).abs() <= 0.05 * 0.5e-3, "c = {c}");
    }

    /// The `cost` fixture's linear function (0.25 ms·n) as a loaded CI machine measured it:
    /// the middle sizes a few per cent high bend the points, and the n log n, quadratic and
    /// cubic fits bend with them by a negative highest term (a cost that falls past some n,
    /// which no workload's does). They undercut the line's leave-one-out error by more than
    /// the margin, and one of them was chosen.
    #[test]
    fn a_linear_cost_bent_by_noise_is_not_a_falling_curve() {
        // Up to 5% high in the middle sizes, on the sampling period's grid (0.714 ms).
        let points: Vec<(f64, f64)> = NS
            .iter()
            .map(|&n| {
                let bend = 1.0 + 0.05 * (std::f64::consts::PI * n / 1024.0).sin();
                (n, ((0.25 * n * bend) / 0.714286).round() * 0.714286)
            })
            .collect();
        let fit = fit(&points).unwrap();
        let n_log_n = fit.models.iter().find(|m| m.model == Model::NLogN).unwrap();
        let linear = fit
            .models
            .iter()
            .find(|m| m.model == Model::Linear)
            .unwrap();
        // The trap is laid: the falling n log n fits the bend better by more than the margin.
        assert!(n_log_n.coefficients[2] < 0.0, "{fit:#?}");
        assert!(
            n_log_n.cv_rmse.unwrap() * SIMPLER_WITHIN < linear.cv_rmse.unwrap(),
            "{fit:#?}"
        );
        assert_eq!(fit.chosen.model, Model::Linear, "{fit:#?}");
        let b = fit.chosen.coefficients[1];
        assert!((b - 0.25).abs() <= 0.05 * 0.25, "b = {b}");
    }

    #[test]
    fn too_few_points_or_one_parameter_value_fit_nothing_beyond_what_they_can() {
        assert!(fit(&[(1.0, 1.0), (2.0, 2.0)]).is_none());
        // Three points: the constant only (a line needs one left out and one to judge).
        let f = fit(&[(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]).unwrap();
        assert!(f.models.iter().all(|m| m.model.terms().len() <= 1));
        // One parameter value: no line through it.
        let f = fit(&[(4.0, 1.0), (4.0, 2.0), (4.0, 3.0), (4.0, 1.0)]).unwrap();
        assert_eq!(f.chosen.model, Model::Constant);
    }
}
