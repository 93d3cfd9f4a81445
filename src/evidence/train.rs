//! Training: multinomial logistic regression with an L2 penalty, by
//! L-BFGS, deterministically.
//!
//! Minimises `(1/Σc) Σ c(yᵢ)·(−log p(yᵢ | xᵢ)) + (λ/2)‖W‖²` (the biases
//! are not penalised) over the buckets the examples use, where `c(y)`
//! weighs a reason by `(N / (K·n_y))^balance` so that a rare reason is not
//! drowned by the common ones ([`Options::balance`]). Everything runs in a
//! fixed order on one thread in `f64`, with a fixed iteration bound and
//! tolerance, so the same examples give the same bytes on one platform.
//!
//! Each feature is weighed by its inverse document frequency over the
//! examples trained on, `ln((1 + N) / (1 + df)) + 1` ([`Options::idf`]):
//! a bucket in every error (`error`, a status token) counts for less in the
//! penalty's eyes than one that names a meaning. The factor is folded into
//! the stored weights (`w·idf` of a bucket is what a raw feature meets), so
//! inference and the file are unchanged: a model trained with it reads the
//! same vectors as one without.
//! Hand-written (about a hundred lines) rather than a dependency: no
//! well-kept Rust crate does sparse multinomial logistic regression
//! without pulling a linear-algebra stack into the library's build.

use std::collections::BTreeMap;

use super::{Model, Trained};

/// One labelled error: its vector ([`super::vector`]) and its reason's
/// index in the reasons list.
#[derive(Clone, Debug)]
pub struct Example {
    /// (bucket, value), ascending.
    pub vector: Vec<(u32, f32)>,
    /// The label's index.
    pub label: usize,
}

/// How to train.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Options {
    /// The L2 penalty λ.
    pub lambda: f64,
    /// At most this many L-BFGS iterations.
    pub max_iterations: u32,
    /// Stop when the gradient's largest component is below this.
    pub tolerance: f64,
    /// How much rare reasons are weighed up: 0 not at all, 1 as much as
    /// the common ones in total.
    pub balance: f64,
    /// Whether features are weighed by their inverse document frequency
    /// over the training examples (the module notes). Cross-validated by
    /// source on the field corpus (`docs/model.md`), rules + model: 92.3%
    /// without, 92.8% with.
    pub idf: bool,
}

impl Default for Options {
    /// λ = 1e-4 and 80 iterations (chosen by cross-validation,
    /// `docs/model.md`: 300 iterations change no verdict that matters and
    /// cost four times as long), tolerance 1e-6, balance ½, with IDF.
    fn default() -> Self {
        Options {
            lambda: 1e-4,
            max_iterations: 80,
            tolerance: 1e-6,
            balance: 0.5,
            idf: true,
        }
    }
}

/// The problem in compact form: buckets renumbered densely.
struct Problem<'a> {
    examples: &'a [Example],
    /// Each example's features as (dense column, value).
    columns: Vec<Vec<(usize, f64)>>,
    /// Each reason's weight in the loss, normalised so that the examples'
    /// weights sum to their count.
    class_weight: Vec<f64>,
    dims: usize,
    classes: usize,
    lambda: f64,
}

impl Problem<'_> {
    fn params(&self) -> usize {
        (self.dims + 1) * self.classes
    }

    /// The objective and its gradient at `theta` (weights row by row, then
    /// the biases).
    fn eval(&self, theta: &[f64], grad: &mut [f64]) -> f64 {
        let k = self.classes;
        let bias_at = self.dims * k;
        grad.iter_mut().for_each(|g| *g = 0.0);
        let n = self.examples.len().max(1) as f64;
        let mut loss = 0.0;
        let mut z = vec![0.0f64; k];
        for (ex, cols) in self.examples.iter().zip(&self.columns) {
            let cw = self.class_weight[ex.label];
            z.copy_from_slice(&theta[bias_at..bias_at + k]);
            for &(c, x) in cols {
                for (zj, w) in z.iter_mut().zip(&theta[c * k..c * k + k]) {
                    *zj += x * w;
                }
            }
            let max = z.iter().copied().fold(f64::MIN, f64::max);
            // −log p(y) = log Σ exp(z) − z_y, computed shifted by the max.
            let shifted_y = z[ex.label] - max;
            let mut sum = 0.0;
            for zj in z.iter_mut() {
                *zj = (*zj - max).exp();
                sum += *zj;
            }
            loss += cw * (sum.ln() - shifted_y);
            for zj in z.iter_mut() {
                *zj /= sum;
            }
            z[ex.label] -= 1.0;
            for &(c, x) in cols {
                for (g, d) in grad[c * k..c * k + k].iter_mut().zip(&z) {
                    *g += cw * x * d / n;
                }
            }
            for (g, d) in grad[bias_at..bias_at + k].iter_mut().zip(&z) {
                *g += cw * d / n;
            }
        }
        loss /= n;
        let mut penalty = 0.0;
        for (g, w) in grad[..bias_at].iter_mut().zip(&theta[..bias_at]) {
            penalty += w * w;
            *g += self.lambda * w;
        }
        loss + 0.5 * self.lambda * penalty
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Minimises `f` from `x` by L-BFGS (memory 10) with a backtracking
/// (Armijo) line search; returns the iterations run.
fn lbfgs(
    f: &dyn Fn(&[f64], &mut [f64]) -> f64,
    x: &mut [f64],
    max_iterations: u32,
    tolerance: f64,
) -> u32 {
    const MEMORY: usize = 10;
    let n = x.len();
    let mut g = vec![0.0; n];
    let mut fx = f(x, &mut g);
    let mut s_hist: Vec<Vec<f64>> = Vec::new();
    let mut y_hist: Vec<Vec<f64>> = Vec::new();
    let mut rho: Vec<f64> = Vec::new();
    let mut d = vec![0.0; n];
    let mut x_new = vec![0.0; n];
    let mut g_new = vec![0.0; n];
    let mut iterations = 0;
    while iterations < max_iterations {
        if g.iter().fold(0.0f64, |m, v| m.max(v.abs())) < tolerance {
            break;
        }
        iterations += 1;
        // Two-loop recursion: d = −H g.
        d.copy_from_slice(&g);
        let mut alpha = vec![0.0; s_hist.len()];
        for i in (0..s_hist.len()).rev() {
            alpha[i] = rho[i] * dot(&s_hist[i], &d);
            for (dj, yj) in d.iter_mut().zip(&y_hist[i]) {
                *dj -= alpha[i] * yj;
            }
        }
        let gamma = match (s_hist.last(), y_hist.last()) {
            (Some(s), Some(y)) => dot(s, y) / dot(y, y),
            _ => 1.0 / dot(&g, &g).sqrt().max(1e-12),
        };
        d.iter_mut().for_each(|v| *v *= gamma);
        for i in 0..s_hist.len() {
            let beta = rho[i] * dot(&y_hist[i], &d);
            for (dj, sj) in d.iter_mut().zip(&s_hist[i]) {
                *dj += (alpha[i] - beta) * sj;
            }
        }
        d.iter_mut().for_each(|v| *v = -*v);
        let mut slope = dot(&g, &d);
        if slope >= 0.0 {
            // Not a descent direction: restart from the gradient.
            s_hist.clear();
            y_hist.clear();
            rho.clear();
            for (dj, gj) in d.iter_mut().zip(&g) {
                *dj = -gj;
            }
            slope = dot(&g, &d);
        }
        let mut step = 1.0;
        let mut f_new;
        loop {
            for ((xn, xi), di) in x_new.iter_mut().zip(x.iter()).zip(&d) {
                *xn = xi + step * di;
            }
            f_new = f(&x_new, &mut g_new);
            if f_new <= fx + 1e-4 * step * slope || step < 1e-10 {
                break;
            }
            step *= 0.5;
        }
        let s: Vec<f64> = x_new.iter().zip(x.iter()).map(|(a, b)| a - b).collect();
        let y: Vec<f64> = g_new.iter().zip(&g).map(|(a, b)| a - b).collect();
        let sy = dot(&s, &y);
        x.copy_from_slice(&x_new);
        g.copy_from_slice(&g_new);
        let decrease = fx - f_new;
        fx = f_new;
        if sy > 1e-12 {
            if s_hist.len() == MEMORY {
                s_hist.remove(0);
                y_hist.remove(0);
                rho.remove(0);
            }
            s_hist.push(s);
            y_hist.push(y);
            rho.push(1.0 / sy);
        }
        if decrease.abs() <= 1e-12 * fx.abs().max(1.0) {
            break;
        }
    }
    iterations
}

/// Trains a model on `examples` labelled over `reasons`.
pub fn train(examples: &[Example], reasons: Vec<String>, options: Options) -> Model {
    let classes = reasons.len();
    let mut dense: BTreeMap<u32, usize> = BTreeMap::new();
    for ex in examples {
        for &(b, _) in &ex.vector {
            dense.entry(b).or_insert(0);
        }
    }
    for (i, v) in dense.values_mut().enumerate() {
        *v = i;
    }
    let idf = if options.idf {
        idf(examples, &dense)
    } else {
        vec![1.0; dense.len()]
    };
    let columns = examples
        .iter()
        .map(|ex| {
            ex.vector
                .iter()
                .map(|&(b, x)| {
                    let c = dense[&b];
                    (c, f64::from(x) * idf[c])
                })
                .collect()
        })
        .collect();
    let problem = Problem {
        examples,
        columns,
        dims: dense.len(),
        classes,
        lambda: options.lambda,
        class_weight: class_weights(examples, classes, options.balance),
    };
    let mut theta = vec![0.0; problem.params()];
    let iterations = lbfgs(
        &|t, g| problem.eval(t, g),
        &mut theta,
        options.max_iterations,
        options.tolerance,
    );
    let k = classes;
    let rows: Vec<(usize, Vec<f32>)> = dense
        .iter()
        .map(|(&b, &c)| {
            (
                b as usize,
                theta[c * k..c * k + k]
                    .iter()
                    .map(|&w| (w * idf[c]) as f32)
                    .collect(),
            )
        })
        .collect();
    let bias: Vec<f32> = theta[problem.dims * k..]
        .iter()
        .map(|&w| w as f32)
        .collect();
    Model::from_parts(
        reasons,
        &bias,
        &rows,
        Trained {
            items: examples.len() as u32,
            lambda: options.lambda as f32,
            iterations,
            temperature: 1.0,
        },
    )
}

/// Each dense column's inverse document frequency over `examples`,
/// smoothed: `ln((1 + N) / (1 + df)) + 1`, where `df` is how many examples
/// hold the bucket (at least 1, the smallest value 1).
fn idf(examples: &[Example], dense: &BTreeMap<u32, usize>) -> Vec<f64> {
    let mut df = vec![0u32; dense.len()];
    for ex in examples {
        for &(b, _) in &ex.vector {
            df[dense[&b]] += 1;
        }
    }
    let n = examples.len() as f64;
    df.iter()
        .map(|&d| ((1.0 + n) / (1.0 + f64::from(d))).ln() + 1.0)
        .collect()
}

/// Each reason's weight in the loss: `(N / (K·n_y))^balance` over the `K`
/// reasons that have examples, scaled so that the examples' weights sum
/// to `N` (the objective keeps its scale, and λ its meaning).
fn class_weights(examples: &[Example], classes: usize, balance: f64) -> Vec<f64> {
    let mut counts = vec![0usize; classes];
    for e in examples {
        counts[e.label] += 1;
    }
    let n = examples.len() as f64;
    let present = counts.iter().filter(|&&c| c > 0).count().max(1) as f64;
    let raw: Vec<f64> = counts
        .iter()
        .map(|&c| {
            if c == 0 {
                0.0
            } else {
                (n / (present * c as f64)).powf(balance)
            }
        })
        .collect();
    let total: f64 = counts.iter().zip(&raw).map(|(&c, w)| c as f64 * w).sum();
    let scale = if total > 0.0 { n / total } else { 1.0 };
    raw.into_iter().map(|w| w * scale).collect()
}

/// The temperature `T` that makes `softmax(log p / T)` fit the labels
/// best (the least mean negative log-likelihood of the item's defensible
/// labels, `−log Σ p(y)` over them), from each item's log-probabilities
/// under a model that never saw it and its labels:
/// temperature scaling (Guo et al., "On Calibration of Modern Neural
/// Networks", 2017). A golden-section search over `ln T` in [1/20, 20],
/// deterministic; 1 without items.
pub fn fit_temperature(items: &[(Vec<f32>, Vec<usize>)]) -> f32 {
    if items.is_empty() {
        return 1.0;
    }
    let nll = |ln_t: f64| -> f64 {
        let inv = (-ln_t).exp();
        let mut total = 0.0;
        for (logp, labels) in items {
            let max = logp.iter().copied().fold(f32::MIN, f32::max) as f64;
            let e = |l: f32| ((l as f64 - max) * inv).exp();
            let sum: f64 = logp.iter().map(|&l| e(l)).sum();
            let right: f64 = labels.iter().map(|&y| e(logp[y])).sum();
            total += sum.ln() - right.max(f64::MIN_POSITIVE).ln();
        }
        total / items.len() as f64
    };
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    let (mut a, mut b) = ((1.0f64 / 20.0).ln(), 20f64.ln());
    let mut c = b - phi * (b - a);
    let mut d = a + phi * (b - a);
    let (mut fc, mut fd) = (nll(c), nll(d));
    for _ in 0..60 {
        if fc <= fd {
            b = d;
            d = c;
            fd = fc;
            c = b - phi * (b - a);
            fc = nll(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + phi * (b - a);
            fd = nll(d);
        }
    }
    ((a + b) / 2.0).exp() as f32
}

#[cfg(test)]
pub(super) fn objective_for_test(
    examples: &[Example],
    classes: usize,
    lambda: f64,
    theta: &[f64],
) -> (f64, Vec<f64>) {
    let dims = examples
        .iter()
        .flat_map(|e| e.vector.iter().map(|f| f.0 as usize + 1))
        .max()
        .unwrap_or(0);
    let problem = Problem {
        examples,
        columns: examples
            .iter()
            .map(|e| {
                e.vector
                    .iter()
                    .map(|&(b, x)| (b as usize, f64::from(x)))
                    .collect()
            })
            .collect(),
        dims,
        classes,
        lambda,
        class_weight: vec![1.0; classes],
    };
    let mut g = vec![0.0; problem.params()];
    let f = problem.eval(theta, &mut g);
    (f, g)
}
