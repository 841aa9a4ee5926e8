//! Hierarchical sparse coding of one document (STC, Zhu & Xing 2011; WWW'13 §3.3): word codes
//! s_n ∈ ℝᴷ₊ for each distinct term n of the document and a document code θ ∈ ℝᴷ₊, found by
//! coordinate descent with closed-form updates, and the collapsed variant (θ marginalised,
//! WWW'13 §4.2.1) whose word codes of one document are coupled.
//!
//! Objective of a document with counts w_n over terms n ∈ I (ν_n = s_nᵀβ_{·n} + ε):
//!
//! f(s, θ) = Σ_n [ν_n − w_n ln ν_n + ln w_n!] + (λ/2)‖θ‖² + (γ/2) Σ_n ‖s_n − θ‖² + ρ Σ_n ‖s_n‖₁
//!
//! The Poisson term is the full negative log-likelihood (it includes ln w_n!), so f ≥ 0. The
//! prior on θ is written (λ/2)‖θ‖² so that the θ-step is exactly the paper's Eq. (8):
//! θ_k = γ Σ_n s_nk / (λ + γ|I|).
//!
//! Collapsed objective (θ integrated out under the same Gaussian prior):
//!
//! f_c(s) = Σ_n [ν_n − w_n ln ν_n + ln w_n!] + a Σ_n ‖s_n‖² + b Σ_{n≠m} s_nᵀs_m + ρ Σ_n ‖s_n‖₁,
//! with c₀ = γ² / (2λ + 2γ|I|), a = γ/2 − c₀, b = −c₀ (a > 0 and the quadratic form is PSD).
//!
//! Numerics: everything in `f64`; the dictionary rows of the document's terms are gathered once
//! into a dense |I| × K `f64` block. Every returned value is finite (ε > 0 keeps ln away from 0).

use serde::{Deserialize, Serialize};

/// Parameters of the coding step (checked by [`crate::ostc::OstcParams::validate`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CodeParams {
    /// Laplace prior on word codes ρ ≥ 0 (sparsity).
    pub rho: f64,
    /// Gaussian coupling of word codes to the document code γ > 0; λ = γ (paper §3.3).
    pub gamma: f64,
    /// Poisson mean offset ε > 0.
    pub eps: f64,
    /// Maximum coordinate-descent sweeps (each: all word codes, then θ).
    pub sweeps: u32,
    /// Stop when the objective decreases by less than `tol` × |objective| in a sweep.
    pub tol: f64,
}

impl Default for CodeParams {
    fn default() -> Self {
        CodeParams {
            rho: 0.1,
            gamma: 0.01,
            eps: 1e-6,
            sweeps: 30,
            tol: 1e-4,
        }
    }
}

impl CodeParams {
    /// λ (= γ, the paper's choice).
    pub fn lambda(&self) -> f64 {
        self.gamma
    }
}

/// The 1-D objective of one word-code coordinate: g(s) = (A/2)s² + η s − w ln(β s + μ), s ≥ 0.
/// (STC: A = γ, η = β + ρ − γθ_k; collapsed: A = 2a, η = β + ρ + 2b Σ_{m≠n} s_mk; μ is the
/// rest of the Poisson mean, ≥ ε > 0.) Constant terms are dropped.
pub fn word_objective(s: f64, w: f64, beta: f64, mu: f64, a: f64, eta: f64) -> f64 {
    0.5 * a * s * s + eta * s - w * (beta * s + mu).ln()
}

/// Closed-form minimiser over s ≥ 0 of [`word_objective`]: the larger root of
/// Aβ s² + (Aμ + ηβ) s + ημ − wβ = 0, clamped at 0 (paper §3.3). Requires A > 0, β ≥ 0, μ > 0,
/// w ≥ 0; the result is finite and ≥ 0. Cancellation-free root formula; β = 0 gives
/// max(0, −η/A).
pub fn word_update(w: f64, beta: f64, mu: f64, a: f64, eta: f64) -> f64 {
    let qa = a * beta;
    let qb = a * mu + eta * beta;
    let qc = eta * mu - w * beta;
    if qc >= 0.0 && qb >= 0.0 {
        // both roots ≤ 0 (product ≥ 0, sum ≤ 0)
        return 0.0;
    }
    // The quadratic is ≤ 0 at s = −μ/β, so a real root ≥ −μ/β exists: disc ≥ 0 up to rounding.
    let disc = (qb * qb - 4.0 * qa * qc).max(0.0);
    let sq = disc.sqrt();
    let root = if qb > 0.0 {
        // −qb + sq loses precision: use the conjugate form
        (2.0 * qc) / (-qb - sq)
    } else if qa > 0.0 {
        (-qb + sq) / (2.0 * qa)
    } else {
        // qa = 0 and qb ≤ 0 cannot happen with μ > 0 and β = 0 (qb = Aμ > 0); be safe
        0.0
    };
    if root.is_finite() {
        root.max(0.0)
    } else {
        0.0
    }
}

/// One document as (term id, count) pairs with the dictionary rows of its terms.
#[derive(Debug, Clone)]
pub struct DocBlock {
    /// Counts w_n > 0 of the document's distinct terms.
    pub w: Vec<f64>,
    /// β_{·n} for each term, row-major |I| × K.
    pub beta: Vec<f64>,
    pub k: usize,
}

impl DocBlock {
    pub fn len(&self) -> usize {
        self.w.len()
    }
    pub fn is_empty(&self) -> bool {
        self.w.is_empty()
    }
    pub fn row(&self, n: usize) -> &[f64] {
        &self.beta[n * self.k..(n + 1) * self.k]
    }
}

/// The codes of one document.
#[derive(Debug, Clone, PartialEq)]
pub struct DocCode {
    /// Word codes, row-major |I| × K, all ≥ 0.
    pub s: Vec<f64>,
    /// Document code θ (K), ≥ 0. For the collapsed variant: the posterior mean of θ given s,
    /// γ Σ_n s_n / (λ + γ|I|).
    pub theta: Vec<f64>,
    /// Poisson means ν_n = s_nᵀβ_{·n} + ε.
    pub nu: Vec<f64>,
    /// Objective value f (≥ 0) at the returned codes.
    pub objective: f64,
    /// Sweeps carried out.
    pub sweeps: u32,
}

impl DocCode {
    /// −ln Poisson(w_n; ν_n) for each term (≥ 0).
    pub fn word_losses(&self, w: &[f64]) -> Vec<f64> {
        w.iter()
            .zip(&self.nu)
            .map(|(&w, &nu)| poisson_nll(w, nu))
            .collect()
    }
    /// Counts attributed to each topic: z_k = Σ_n w_n s_nk β_kn / ν_n (the share of each word's
    /// Poisson mean that topic k supplies, times its count). Scale-free in β, unlike θ, whose
    /// entries grow like 1/β of the document's rarest terms. Needs the document's block.
    pub fn topic_counts(&self, doc: &DocBlock) -> Vec<f64> {
        let k = doc.k;
        let mut z = vec![0.0; k];
        for n in 0..doc.len() {
            let f = doc.w[n] / self.nu[n];
            for (j, zj) in z.iter_mut().enumerate() {
                *zj += f * self.s[n * k + j] * doc.beta[n * k + j];
            }
        }
        z
    }
    /// Zero entries of the word codes / all entries (1 when there are none).
    pub fn sparsity(&self) -> f64 {
        if self.s.is_empty() {
            return 1.0;
        }
        self.s.iter().filter(|&&v| v == 0.0).count() as f64 / self.s.len() as f64
    }
}

/// ln w! for an integer count w ≥ 0 (exact sum below 20, Stirling series above).
pub fn ln_factorial(x: f64) -> f64 {
    if x < 2.0 {
        return 0.0;
    }
    if x < 20.0 && x.fract() == 0.0 {
        return (2..=x as u64).map(|i| (i as f64).ln()).sum();
    }
    let y = x + 1.0;
    (y - 0.5) * y.ln() - y + 0.5 * (2.0 * std::f64::consts::PI).ln() + 1.0 / (12.0 * y)
        - 1.0 / (360.0 * y * y * y)
}

/// −ln Poisson(w; ν) = ν − w ln ν + ln w! (≥ 0 for integer w, ν > 0).
pub fn poisson_nll(w: f64, nu: f64) -> f64 {
    (nu - w * nu.ln() + ln_factorial(w)).max(0.0)
}

/// One coordinate-descent sweep over the word codes of `doc` (the closed-form update of each
/// s_nk in word order, θ fixed) with `extra(n·K + k)` added to the coefficient η of s_nk's
/// linear term (−0.0 for plain STC, which leaves η bit-identical; a linearised supervised
/// loss otherwise). `nu` is kept equal to
/// the Poisson means of `s` (up to the ε floor).
pub fn word_sweep(
    doc: &DocBlock,
    p: &CodeParams,
    theta: &[f64],
    (s, nu): (&mut [f64], &mut [f64]),
    extra: impl Fn(usize) -> f64,
) {
    let k = doc.k;
    for n in 0..doc.len() {
        let b = doc.row(n);
        let sn = &mut s[n * k..(n + 1) * k];
        let w = doc.w[n];
        let mut v = nu[n];
        for j in 0..k {
            let mu = (v - sn[j] * b[j]).max(p.eps);
            let eta = b[j] + p.rho - p.gamma * theta[j] + extra(n * k + j);
            let x = word_update(w, b[j], mu, p.gamma, eta);
            sn[j] = x;
            v = mu + x * b[j];
        }
        nu[n] = v;
    }
}

/// The θ-step: θ = γ Σ_n s_n / (λ + γ |I|), the minimiser of f over θ for fixed word codes.
pub fn theta_step(s: &[f64], n_words: usize, k: usize, p: &CodeParams, theta: &mut [f64]) {
    let denom = p.lambda() + p.gamma * n_words as f64;
    theta.iter_mut().for_each(|t| *t = 0.0);
    for n in 0..n_words {
        for (t, &v) in theta.iter_mut().zip(&s[n * k..(n + 1) * k]) {
            *t += v;
        }
    }
    theta.iter_mut().for_each(|t| *t *= p.gamma / denom);
}

/// The STC objective f(s, θ) of a document (see the module docs).
pub fn objective(doc: &DocBlock, s: &[f64], theta: &[f64], p: &CodeParams) -> f64 {
    let k = doc.k;
    let mut f = 0.5 * p.lambda() * theta.iter().map(|t| t * t).sum::<f64>();
    for n in 0..doc.len() {
        let sn = &s[n * k..(n + 1) * k];
        let nu = p.eps + sn.iter().zip(doc.row(n)).map(|(a, b)| a * b).sum::<f64>();
        f += poisson_nll(doc.w[n], nu);
        for (&v, &t) in sn.iter().zip(theta) {
            f += 0.5 * p.gamma * (v - t) * (v - t) + p.rho * v;
        }
    }
    f
}

/// Collapsed coupling constants (a, b) for a document with `n_words` distinct terms.
pub fn collapsed_ab(n_words: usize, p: &CodeParams) -> (f64, f64) {
    let c0 = p.gamma * p.gamma / (2.0 * p.lambda() + 2.0 * p.gamma * n_words as f64);
    (0.5 * p.gamma - c0, -c0)
}

/// The collapsed objective f_c(s) of a document (see the module docs).
pub fn collapsed_objective(doc: &DocBlock, s: &[f64], p: &CodeParams) -> f64 {
    let k = doc.k;
    let (a, b) = collapsed_ab(doc.len(), p);
    let mut tot = vec![0.0; k];
    let mut f = 0.0;
    for n in 0..doc.len() {
        let sn = &s[n * k..(n + 1) * k];
        let nu = p.eps + sn.iter().zip(doc.row(n)).map(|(a, b)| a * b).sum::<f64>();
        f += poisson_nll(doc.w[n], nu);
        for (j, &v) in sn.iter().enumerate() {
            f += a * v * v + p.rho * v - b * v * v;
            tot[j] += v;
        }
    }
    // b Σ_{n≠m} s_nᵀ s_m = b (‖Σ s_n‖² − Σ ‖s_n‖²); the −Σ‖s_n‖² part is added above
    f + b * tot.iter().map(|t| t * t).sum::<f64>()
}

/// Multiplicative (PLSA / KL-NMF) iterations for the document's topic proportions π (on the
/// simplex) under the dictionary rows: π_k ← π_k Σ_n w_n β_kn / (πᵀβ_{·n}) / Σ_n w_n, from
/// uniform.
pub const INIT_ITERS: usize = 15;

/// Starting word codes: s_n = w_n π / πᵀβ_{·n} with π the document's topic proportions after
/// [`INIT_ITERS`] PLSA iterations (so that s_nᵀβ_{·n} = w_n, the count, and every word code
/// points in the document's direction). The STC objective is jointly convex in (s, θ), so the
/// start changes only how fast coordinate descent gets there — but with the word codes tied to
/// θ the s/θ alternation moves θ slowly, and a start that ignores the document (each word's
/// code following its own β row) leaves every term's codes on the same topics in every
/// document, so the dictionary never sees co-occurrence. Symmetric in the topics: no topic is
/// favoured by the coordinate order. 0 for a term no topic carries.
pub fn init_codes(doc: &DocBlock) -> Vec<f64> {
    let k = doc.k;
    let nw = doc.len();
    let mut s = vec![0.0; nw * k];
    if k == 0 || nw == 0 {
        return s;
    }
    let pi = fold_in(doc, INIT_ITERS);
    for n in 0..nw {
        let b = doc.row(n);
        let nu: f64 = pi.iter().zip(b).map(|(p, x)| p * x).sum();
        if nu > 0.0 && nu.is_finite() {
            for (v, &p) in s[n * k..(n + 1) * k].iter_mut().zip(&pi) {
                *v = doc.w[n] * p / nu;
            }
        }
    }
    s
}

/// The document's topic proportions π (on the simplex) under the dictionary rows by `iters`
/// PLSA / KL-NMF multiplicative iterations from uniform (maximum-likelihood fold-in):
/// π_k ← π_k Σ_n w_n β_kn / (πᵀβ_{·n}) / Σ_n w_n. Uniform for an empty document, or when
/// no topic carries any of its terms.
pub fn fold_in(doc: &DocBlock, iters: usize) -> Vec<f64> {
    let k = doc.k;
    let nw = doc.len();
    let mut pi = vec![1.0 / k.max(1) as f64; k];
    if k == 0 || nw == 0 {
        return pi;
    }
    let tot: f64 = doc.w.iter().sum();
    let mut acc = vec![0.0; k];
    for _ in 0..iters {
        acc.iter_mut().for_each(|a| *a = 0.0);
        for n in 0..nw {
            let b = doc.row(n);
            let nu: f64 = pi.iter().zip(b).map(|(p, x)| p * x).sum();
            if nu > 0.0 && nu.is_finite() {
                let f = doc.w[n] / nu;
                for (a, &x) in acc.iter_mut().zip(b) {
                    *a += f * x;
                }
            }
        }
        let mut z = 0.0;
        for (p, a) in pi.iter_mut().zip(&acc) {
            *p *= a / tot.max(1e-300);
            z += *p;
        }
        if !(z > 0.0 && z.is_finite()) {
            pi.iter_mut().for_each(|p| *p = 1.0 / k as f64);
            break;
        }
        pi.iter_mut().for_each(|p| *p /= z);
    }
    pi
}

/// Poisson means ν_n = s_nᵀβ_{·n} + ε.
pub fn means(doc: &DocBlock, s: &[f64], eps: f64) -> Vec<f64> {
    let k = doc.k;
    (0..doc.len())
        .map(|n| {
            eps + s[n * k..(n + 1) * k]
                .iter()
                .zip(doc.row(n))
                .map(|(a, b)| a * b)
                .sum::<f64>()
        })
        .collect()
}

/// Hierarchical sparse coding of one document by coordinate descent (closed-form word-code
/// updates, then θ by Eq. 8), from [`init_codes`] and the θ they imply. Deterministic. An empty document gives empty
/// codes, θ = 0 and objective 0.
pub fn code_doc(doc: &DocBlock, p: &CodeParams) -> DocCode {
    code_doc_with(doc, p, |_theta, _s| {})
}

/// [`code_doc`] with a hook that may adjust θ after each θ-step (MedSTC's hinge term); the
/// hook receives (θ, s) and must leave θ ≥ 0 and finite.
pub fn code_doc_with(
    doc: &DocBlock,
    p: &CodeParams,
    mut theta_hook: impl FnMut(&mut [f64], &[f64]),
) -> DocCode {
    let k = doc.k;
    let nw = doc.len();
    let mut s = init_codes(doc);
    let mut theta = vec![0.0; k];
    theta_step(&s, nw, k, p, &mut theta);
    let mut nu = means(doc, &s, p.eps);
    let mut last = f64::INFINITY;
    let mut sweeps = 0;
    for _ in 0..p.sweeps.max(1) {
        sweeps += 1;
        word_sweep(doc, p, &theta, (&mut s, &mut nu), |_| -0.0);
        theta_step(&s, nw, k, p, &mut theta);
        theta_hook(&mut theta, &s);
        let f = objective(doc, &s, &theta, p);
        if (last - f) <= p.tol * f.abs().max(1e-12) {
            last = f;
            break;
        }
        last = f;
    }
    // recompute ν exactly (no drift from incremental updates)
    for (n, v) in nu.iter_mut().enumerate() {
        *v = p.eps
            + s[n * k..(n + 1) * k]
                .iter()
                .zip(doc.row(n))
                .map(|(a, b)| a * b)
                .sum::<f64>();
    }
    DocCode {
        s,
        theta,
        nu,
        objective: if nw == 0 { 0.0 } else { last },
        sweeps,
    }
}

/// Collapsed sparse coding of one document: coordinate descent on f_c(s) with the closed-form
/// update (A = 2a, η = β + ρ + 2b Σ_{m≠n} s_mk). θ in the result is the posterior mean given s.
pub fn code_doc_collapsed(doc: &DocBlock, p: &CodeParams) -> DocCode {
    let k = doc.k;
    let nw = doc.len();
    let (a, b2) = collapsed_ab(nw, p);
    let mut s = init_codes(doc);
    let mut tot = vec![0.0; k];
    for n in 0..nw {
        for (t, &v) in tot.iter_mut().zip(&s[n * k..(n + 1) * k]) {
            *t += v;
        }
    }
    let mut nu = means(doc, &s, p.eps);
    let mut last = f64::INFINITY;
    let mut sweeps = 0;
    for _ in 0..p.sweeps.max(1) {
        sweeps += 1;
        for n in 0..nw {
            let b = doc.row(n);
            let sn = &mut s[n * k..(n + 1) * k];
            let w = doc.w[n];
            let mut v = nu[n];
            for j in 0..k {
                let old = sn[j];
                let mu = (v - old * b[j]).max(p.eps);
                let others = tot[j] - old;
                let eta = b[j] + p.rho + 2.0 * b2 * others;
                let x = word_update(w, b[j], mu, 2.0 * a, eta);
                sn[j] = x;
                tot[j] = others + x;
                v = mu + x * b[j];
            }
            nu[n] = v;
        }
        let f = collapsed_objective(doc, &s, p);
        if (last - f) <= p.tol * f.abs().max(1e-12) {
            last = f;
            break;
        }
        last = f;
    }
    for (n, v) in nu.iter_mut().enumerate() {
        *v = p.eps
            + s[n * k..(n + 1) * k]
                .iter()
                .zip(doc.row(n))
                .map(|(a, b)| a * b)
                .sum::<f64>();
    }
    let mut theta = vec![0.0; k];
    theta_step(&s, nw, k, p, &mut theta);
    DocCode {
        s,
        theta,
        nu,
        objective: if nw == 0 { 0.0 } else { last },
        sweeps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_factorial_matches_product() {
        for x in 0..40u64 {
            let exact: f64 = (2..=x).map(|i| (i as f64).ln()).sum();
            assert!((ln_factorial(x as f64) - exact).abs() < 1e-9, "{x}");
        }
    }

    #[test]
    fn beta_zero_gives_shrunk_theta() {
        // β = 0: g(s) = (A/2)s² + ηs → s = max(0, −η/A)
        assert!((word_update(3.0, 0.0, 0.5, 2.0, -1.0) - 0.5).abs() < 1e-12);
        assert_eq!(word_update(3.0, 0.0, 0.5, 2.0, 1.0), 0.0);
    }

    #[test]
    fn objective_decreases_and_is_nonnegative() {
        let doc = DocBlock {
            w: vec![3.0, 1.0, 2.0],
            beta: vec![0.2, 0.01, 0.05, 0.3, 0.1, 0.1],
            k: 2,
        };
        let p = CodeParams::default();
        let c = code_doc(&doc, &p);
        let zero = objective(&doc, &[0.0; 6], &[0.0; 2], &p);
        assert!(c.objective >= 0.0 && c.objective < zero);
        let cc = code_doc_collapsed(&doc, &p);
        assert!(cc.objective >= 0.0 && cc.objective < collapsed_objective(&doc, &[0.0; 6], &p));
    }
}
