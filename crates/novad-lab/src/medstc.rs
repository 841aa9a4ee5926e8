//! Online MedSTC (WWW'13 §4.2.2): a multi-class linear SVM (Crammer–Singer hinge loss) on
//! document codes, learned online by Pegasos (Shalev-Shwartz et al. 2007), and the supervised
//! coding that couples it to the codes.
//!
//! Features (what the classifier reads, and what the hinge acts on):
//! - default: x = u/‖u‖₂, u = ln(1 + z), z the topic counts z_k = Σ_n w_n s_nk β_kn/ν_n
//!   ([`count_features`]); the hinge acts on the word codes s through z
//!   ([`code_doc_supervised`]) and θ follows s through the Gaussian coupling;
//! - `θ/‖θ‖₂` ([`features`], the paper's choice): the hinge acts in the θ-step
//!   ([`Pegasos::supervise_theta`]);
//! - both concatenated ([`joint_features`]).
//!
//! Hinge loss: max_y [Δ·1(y ≠ y_d) + η_yᵀx − η_{y_d}ᵀx].

use serde::{Deserialize, Serialize};

use novad_models::ostc::coding::{self, CodeParams, DocBlock, DocCode};

/// A multi-class linear classifier η (L × K) trained by Pegasos.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pegasos {
    /// Weights, row-major L × K.
    pub w: Vec<f64>,
    pub classes: usize,
    pub dim: usize,
    /// Regulariser λ_svm > 0.
    pub lambda: f64,
    /// Margin Δ > 0 of the loss Δ·1(y ≠ y').
    pub margin: f64,
    /// Examples seen.
    pub t: u64,
}

/// x = θ / ‖θ‖₂ (0 when θ = 0).
pub fn features(theta: &[f64]) -> Vec<f64> {
    let n = theta.iter().map(|v| v * v).sum::<f64>().sqrt();
    if n > 0.0 && n.is_finite() {
        theta.iter().map(|v| v / n).collect()
    } else {
        vec![0.0; theta.len()]
    }
}

impl Pegasos {
    pub fn new(classes: usize, dim: usize, lambda: f64, margin: f64) -> Pegasos {
        Pegasos {
            w: vec![0.0; classes * dim],
            classes,
            dim,
            lambda,
            margin,
            t: 0,
        }
    }

    /// η_yᵀx for every class.
    pub fn scores(&self, x: &[f64]) -> Vec<f64> {
        (0..self.classes)
            .map(|y| {
                self.w[y * self.dim..(y + 1) * self.dim]
                    .iter()
                    .zip(x)
                    .map(|(a, b)| a * b)
                    .sum()
            })
            .collect()
    }

    /// argmax_y η_yᵀx (smallest y on ties).
    pub fn predict(&self, x: &[f64]) -> usize {
        let s = self.scores(x);
        (0..self.classes)
            .max_by(|&a, &b| s[a].total_cmp(&s[b]).then(b.cmp(&a)))
            .unwrap_or(0)
    }

    /// The loss-augmented prediction argmax_y [Δ·1(y ≠ label) + η_yᵀx].
    pub fn most_violating(&self, x: &[f64], label: usize) -> usize {
        let mut s = self.scores(x);
        for (y, v) in s.iter_mut().enumerate() {
            if y != label {
                *v += self.margin;
            }
        }
        (0..self.classes)
            .max_by(|&a, &b| s[a].total_cmp(&s[b]).then(b.cmp(&a)))
            .unwrap_or(0)
    }

    /// The multi-class hinge max_y [Δ·1(y ≠ label) + η_yᵀx] − η_labelᵀx (≥ 0).
    pub fn hinge(&self, x: &[f64], label: usize) -> f64 {
        let sc = self.scores(x);
        let y = self.most_violating(x, label);
        let m = if y == label { 0.0 } else { self.margin };
        (m + sc[y] - sc[label]).max(0.0)
    }

    /// One Pegasos step on (x, label): step 1/(λ t), shrink, sub-gradient of the hinge, then
    /// projection onto the ball of radius 1/√λ.
    pub fn update(&mut self, x: &[f64], label: usize) {
        self.t += 1;
        let lr = 1.0 / (self.lambda * self.t as f64);
        let y = self.most_violating(x, label);
        let shrink = 1.0 - lr * self.lambda;
        self.w.iter_mut().for_each(|v| *v *= shrink);
        if y != label {
            let d = self.dim;
            for (k, &xk) in x.iter().enumerate() {
                self.w[label * d + k] += lr * xk;
                self.w[y * d + k] -= lr * xk;
            }
        }
        let norm = self.w.iter().map(|v| v * v).sum::<f64>().sqrt();
        let r = 1.0 / self.lambda.sqrt();
        if norm > r {
            self.w.iter_mut().for_each(|v| *v *= r / norm);
        }
    }

    /// The supervised θ-step for the joint features [x(z); θ/‖θ‖₂] ([`joint_features`], this
    /// classifier of dimension 2K = 2 · `k`), z fixed: with y* the loss-augmented prediction at
    /// (z, θ) and d the θ-half of η_{y*} − η_label, θ ← max(0, θ − c (I − x xᵀ) d / (‖θ‖ denom)),
    /// x = θ/‖θ‖ — the closed-form minimiser of (denom/2)‖θ' − θ‖² + c·(hinge linearised in θ).
    /// No-op when y* = label or θ = 0; keeps θ ≥ 0 and finite.
    pub fn supervise_theta_block(
        &self,
        theta: &mut [f64],
        label: usize,
        c: f64,
        denom: f64,
        k: usize,
        z: &[f64],
    ) {
        let n = theta.iter().map(|v| v * v).sum::<f64>().sqrt();
        if !(n > 0.0 && n.is_finite()) || self.dim != 2 * k {
            return;
        }
        let x = features(theta);
        let y = self.most_violating(&joint_features(z, theta), label);
        if y == label {
            return;
        }
        let d = self.dim;
        let diff: Vec<f64> = (0..k)
            .map(|j| self.w[y * d + k + j] - self.w[label * d + k + j])
            .collect();
        let dx: f64 = diff.iter().zip(&x).map(|(a, b)| a * b).sum();
        for (j, t) in theta.iter_mut().enumerate() {
            let g = (diff[j] - dx * x[j]) / n;
            let v = *t - c * g / denom;
            *t = if v.is_finite() { v.max(0.0) } else { *t };
        }
    }

    /// The supervised θ-step of MedSTC on the θ features x = θ/‖θ‖₂ (`--theta-features`): with
    /// y* the loss-augmented prediction at θ and d = η_{y*} − η_label, one linearised step
    /// θ ← max(0, θ − c (I − x xᵀ) d / (‖θ‖ denom)) — (I − x xᵀ) d / ‖θ‖ is the exact gradient of
    /// dᵀ(θ/‖θ‖), so this is the closed-form minimiser of (denom/2)‖θ' − θ‖² + c·(linearised
    /// hinge), clamped at 0. No-op when y* = label or θ = 0; keeps θ ≥ 0 and finite.
    pub fn supervise_theta(&self, theta: &mut [f64], label: usize, c: f64, denom: f64) {
        let n = theta.iter().map(|v| v * v).sum::<f64>().sqrt();
        if !(n > 0.0 && n.is_finite()) {
            return;
        }
        let x = features(theta);
        let y = self.most_violating(&x, label);
        if y == label {
            return;
        }
        let d = self.dim;
        let diff: Vec<f64> = (0..d)
            .map(|k| self.w[y * d + k] - self.w[label * d + k])
            .collect();
        let dx: f64 = diff.iter().zip(&x).map(|(a, b)| a * b).sum();
        for (k, t) in theta.iter_mut().enumerate() {
            let g = (diff[k] - dx * x[k]) / n;
            let v = *t - c * g / denom;
            *t = if v.is_finite() { v.max(0.0) } else { *t };
        }
    }
}

/// Classifier features of topic counts z (see [`DocCode::topic_counts`]): u = ln(1 + z),
/// x = u / ‖u‖₂ (0 when u = 0). Every entry is finite and ‖x‖₂ ≤ 1.
pub fn count_features(z: &[f64]) -> Vec<f64> {
    features(&z.iter().map(|v| v.max(0.0).ln_1p()).collect::<Vec<f64>>())
}

/// Joint classifier features [x(z); θ/‖θ‖₂] (dimension 2K): [`count_features`] of the topic
/// counts followed by [`features`] of the document code; ‖·‖₂ ≤ √2.
pub fn joint_features(z: &[f64], theta: &[f64]) -> Vec<f64> {
    let mut x = count_features(z);
    x.extend(features(theta));
    x
}

/// Gradient with respect to z of dᵀx(z), x = [`count_features`]:
/// ∂/∂z_k = (d_k − (dᵀx) x_k) / (‖u‖ (1 + z_k)), u = ln(1 + z). Returns 0 where u = 0 (x is
/// not differentiable there; no direction is preferred).
pub fn count_features_grad(z: &[f64], d: &[f64]) -> Vec<f64> {
    let u: Vec<f64> = z.iter().map(|v| v.max(0.0).ln_1p()).collect();
    let n = u.iter().map(|v| v * v).sum::<f64>().sqrt();
    if !(n > 0.0 && n.is_finite()) {
        return vec![0.0; z.len()];
    }
    let dx: f64 = d.iter().zip(&u).map(|(a, b)| a * b / n).sum();
    z.iter()
        .zip(&u)
        .zip(d)
        .map(|((zk, uk), dk)| (dk - dx * uk / n) / (n * (1.0 + zk.max(0.0))))
        .collect()
}

/// Topic counts z_k = Σ_n w_n s_nk β_kn / ν_n of word codes s with Poisson means ν (the same
/// quantity as [`DocCode::topic_counts`]).
pub fn counts_of(doc: &DocBlock, s: &[f64], nu: &[f64]) -> Vec<f64> {
    let k = doc.k;
    let mut z = vec![0.0; k];
    for n in 0..doc.len() {
        let f = doc.w[n] / nu[n];
        for (j, zj) in z.iter_mut().enumerate() {
            *zj += f * s[n * k + j] * doc.beta[n * k + j];
        }
    }
    z
}

/// Gradient of gᵀz(s) with respect to the word codes (row-major |I| × K), z = [`counts_of`]
/// with ν = means(s): ∂/∂s_nk = (w_n β_kn / ν_n)(g_k − Σ_j g_j s_nj β_jn / ν_n). `nu` must be
/// the means of `s` (ε included).
pub fn counts_grad_s(doc: &DocBlock, s: &[f64], nu: &[f64], g: &[f64]) -> Vec<f64> {
    let k = doc.k;
    let mut out = vec![0.0; s.len()];
    for n in 0..doc.len() {
        let b = doc.row(n);
        let sn = &s[n * k..(n + 1) * k];
        let gbar: f64 = (0..k).map(|j| g[j] * sn[j] * b[j]).sum::<f64>() / nu[n];
        let f = doc.w[n] / nu[n];
        for j in 0..k {
            out[n * k + j] = f * b[j] * (g[j] - gbar);
        }
    }
    out
}

/// The supervised coding objective of a labelled document: the STC objective
/// [`coding::objective`] plus c · hinge(x, label), x = [`count_features`] of z(s), or with
/// `joint` [`joint_features`] of (z(s), θ).
#[allow(clippy::too_many_arguments)]
pub fn supervised_objective(
    doc: &DocBlock,
    s: &[f64],
    theta: &[f64],
    p: &CodeParams,
    svm: &Pegasos,
    label: usize,
    c: f64,
    joint: bool,
) -> f64 {
    let nu = coding::means(doc, s, p.eps);
    let z = counts_of(doc, s, &nu);
    let x = if joint {
        joint_features(&z, theta)
    } else {
        count_features(&z)
    };
    coding::objective(doc, s, theta, p) + c * svm.hinge(&x, label)
}

/// MedSTC coding of a labelled training document with the hinge acting on the classifier's
/// features (topic counts): coordinate descent on the STC objective plus
/// c · hinge(x(z(s)), label) ([`supervised_objective`]).
///
/// Method: the coordinate descent of [`coding::code_doc`] (same start, sweeps, θ-step and
/// stopping rule, the rule applied to the supervised objective), where each sweep first
/// linearises the hinge at the current codes — y* the loss-augmented prediction,
/// g = ∂(η_{y*} − η_label)ᵀx/∂z ([`count_features_grad`]) — and adds its exact partial
/// derivatives ∂/∂s_nk ([`counts_grad_s`]) to the linear coefficients of the closed-form
/// word-code updates ([`coding::word_update`]); θ follows by Eq. 8 (the hinge does not involve
/// θ; θ couples to s through γ). When the document is classified with margin (y* = label) the
/// sweep is the unsupervised one.
///
/// With `joint` the features are [`joint_features`] (the classifier has dimension 2K): the
/// word-code sweep uses the z-half of η_{y*} − η_label as above, and the θ-step is followed by
/// the supervised θ-step on the θ-half ([`Pegasos::supervise_theta_block`]), its step halved
/// until it lowers the supervised objective (kept at Eq. 8 if 8 halvings do not).
///
/// Guarantees: codes ≥ 0 and finite; c = 0 gives exactly [`coding::code_doc`]'s codes.
/// `objective` in the result is the STC objective f (without the hinge). The hinge is not
/// convex in s, so a sweep need not decrease the supervised objective; the unit tests check
/// that it does on a planted example.
pub fn code_doc_supervised(
    doc: &DocBlock,
    p: &CodeParams,
    svm: &Pegasos,
    label: usize,
    c: f64,
    joint: bool,
) -> DocCode {
    let k = doc.k;
    let nw = doc.len();
    if c <= 0.0 || nw == 0 || k == 0 {
        return coding::code_doc(doc, p);
    }
    let denom = p.lambda() + p.gamma * nw as f64;
    let mut s = coding::init_codes(doc);
    let mut theta = vec![0.0; k];
    coding::theta_step(&s, nw, k, p, &mut theta);
    let mut nu = coding::means(doc, &s, p.eps);
    let mut last = f64::INFINITY;
    let mut sweeps = 0;
    for _ in 0..p.sweeps.max(1) {
        sweeps += 1;
        let z = counts_of(doc, &s, &nu);
        let x = if joint {
            joint_features(&z, &theta)
        } else {
            count_features(&z)
        };
        let y = svm.most_violating(&x, label);
        // word n's coefficients depend on s_n and ν_n only, so computing all of them here
        // equals computing each just before word n's updates
        let lin = if y == label {
            vec![0.0; s.len()]
        } else {
            let d: Vec<f64> = (0..svm.dim)
                .map(|j| svm.w[y * svm.dim + j] - svm.w[label * svm.dim + j])
                .collect();
            counts_grad_s(doc, &s, &nu, &count_features_grad(&z, &d[..k]))
        };
        coding::word_sweep(doc, p, &theta, (&mut s, &mut nu), |i| c * lin[i]);
        coding::theta_step(&s, nw, k, p, &mut theta);
        if joint {
            // supervised θ-step on the θ half of the features (the paper's θ-step), z fixed at
            // the codes just computed; the linearised step can overshoot (x = θ/‖θ‖ is not
            // linear), so it is halved until it lowers the supervised objective (≤ 8 tries,
            // else θ stays at Eq. 8)
            let nu_now = coding::means(doc, &s, p.eps);
            let z_now = counts_of(doc, &s, &nu_now);
            let f0 = supervised_objective(doc, &s, &theta, p, svm, label, c, true);
            let mut ct = c;
            for _ in 0..8 {
                let mut t2 = theta.clone();
                svm.supervise_theta_block(&mut t2, label, ct, denom, k, &z_now);
                if supervised_objective(doc, &s, &t2, p, svm, label, c, true) < f0 {
                    theta = t2;
                    break;
                }
                ct *= 0.5;
            }
        }
        nu = coding::means(doc, &s, p.eps);
        let f = supervised_objective(doc, &s, &theta, p, svm, label, c, joint);
        if (last - f) <= p.tol * f.abs().max(1e-12) {
            break;
        }
        last = f;
    }
    let objective = coding::objective(doc, &s, &theta, p);
    DocCode {
        s,
        theta,
        nu,
        objective,
        sweeps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separable_classes_are_learned() {
        let mut p = Pegasos::new(3, 3, 1e-3, 1.0);
        let xs = [[1.0, 0.1, 0.0], [0.0, 1.0, 0.2], [0.1, 0.0, 1.0]];
        for i in 0..300 {
            let y = i % 3;
            p.update(&features(&xs[y]), y);
        }
        for (y, x) in xs.iter().enumerate() {
            assert_eq!(p.predict(&features(x)), y);
        }
    }

    fn planted_doc(k: usize, hot: usize, seed: u64) -> DocBlock {
        // 3 terms per topic, topic `hot` carries most of the document, every term has a
        // little mass in every topic; topic 1's terms are as likely under topic 0 (ambiguous
        // words the hinge can move)
        let nt = 3 * k;
        let mut beta = vec![0.0; nt * k];
        for n in 0..nt {
            for j in 0..k {
                beta[n * k + j] = if n / 3 == j || (n / 3 == 1 && j == 0) {
                    0.3
                } else {
                    0.01 / nt as f64
                };
            }
        }
        let w = (0..nt)
            .map(|n| {
                let base = if n / 3 == hot { 4.0 } else { 1.0 };
                base + ((n as u64 * 7 + seed * 13) % 3) as f64
            })
            .collect();
        DocBlock { w, beta, k }
    }

    #[test]
    fn count_features_grad_matches_finite_differences() {
        let z = [3.0, 0.5, 10.0, 0.0, 1.2];
        let d = [0.7, -1.1, 0.2, 0.9, -0.3];
        let g = count_features_grad(&z, &d);
        let f = |z: &[f64]| -> f64 { count_features(z).iter().zip(&d).map(|(a, b)| a * b).sum() };
        for k in 0..z.len() {
            let h = 1e-6;
            let mut zp = z;
            zp[k] += h;
            let mut zm = z;
            zm[k] = (zm[k] - h).max(0.0);
            let num = (f(&zp) - f(&zm)) / (zp[k] - zm[k]);
            assert!((num - g[k]).abs() < 1e-6, "k {k}: {num} vs {}", g[k]);
        }
    }

    #[test]
    fn counts_grad_s_matches_finite_differences() {
        let doc = planted_doc(3, 1, 0);
        let p = CodeParams::default();
        let c = coding::code_doc(&doc, &p);
        let g = [0.4, -0.8, 0.3];
        let lin = counts_grad_s(&doc, &c.s, &c.nu, &g);
        let f = |s: &[f64]| -> f64 {
            let nu = coding::means(&doc, s, p.eps);
            counts_of(&doc, s, &nu)
                .iter()
                .zip(&g)
                .map(|(a, b)| a * b)
                .sum()
        };
        for i in 0..c.s.len() {
            let h = 1e-5 * c.s[i].max(1.0);
            let mut sp = c.s.clone();
            sp[i] += h;
            let mut sm = c.s.clone();
            sm[i] += -h;
            let num = (f(&sp) - f(&sm)) / (2.0 * h);
            assert!(
                (num - lin[i]).abs() <= 1e-5 * (1.0 + num.abs()),
                "{i}: {num} vs {}",
                lin[i]
            );
        }
    }

    #[test]
    fn supervised_coding_lowers_the_supervised_objective() {
        let k = 4;
        let p = CodeParams::default();
        // a classifier that prefers topic 0 for class 0 and topic 1 for class 1; the document
        // is mostly topic 2, labelled 1, and its topic-1 words are also topic-0 words (coded
        // mostly as topic 0 without the label)
        let mut svm = Pegasos::new(2, k, 1e-2, 1.0);
        svm.w = vec![2.0, -2.0, 0.0, 0.0, -2.0, 2.0, 0.0, 0.0];
        let doc = planted_doc(k, 2, 1);
        let un = coding::code_doc(&doc, &p);
        let f_un = supervised_objective(&doc, &un.s, &un.theta, &p, &svm, 1, 5.0, false);
        let sup = code_doc_supervised(&doc, &p, &svm, 1, 5.0, false);
        let f_sup = supervised_objective(&doc, &sup.s, &sup.theta, &p, &svm, 1, 5.0, false);
        assert!(f_sup < f_un - 1e-6, "{f_sup} vs {f_un}");
        assert!(sup
            .s
            .iter()
            .chain(&sup.theta)
            .all(|v| v.is_finite() && *v >= 0.0));
        // the hinge itself went down: topic 1's share of the counts grew
        let x_un = count_features(&counts_of(&doc, &un.s, &un.nu));
        let x_sup = count_features(&counts_of(&doc, &sup.s, &sup.nu));
        assert!(svm.hinge(&x_sup, 1) < svm.hinge(&x_un, 1));
        assert!(x_sup[1] > x_un[1]);
        // c = 0: exactly the unsupervised codes
        assert_eq!(code_doc_supervised(&doc, &p, &svm, 1, 0.0, false), un);
    }

    #[test]
    fn supervised_theta_step_follows_the_normalised_gradient() {
        // linearised step on x = θ/‖θ‖: moves θ along −(I − xxᵀ)d, so the hinge decreases for a
        // small step, and the component along θ is unchanged (scale-free features)
        let mut svm = Pegasos::new(2, 3, 1e-2, 1.0);
        svm.w = vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0];
        let theta0 = vec![1.0, 2.0, 0.5];
        let mut theta = theta0.clone();
        svm.supervise_theta(&mut theta, 0, 0.1, 1.0);
        let h0 = svm.hinge(&features(&theta0), 0);
        let h1 = svm.hinge(&features(&theta), 0);
        assert!(h1 < h0, "{h1} vs {h0}");
        let x = features(&theta0);
        let along: f64 = theta
            .iter()
            .zip(&theta0)
            .zip(&x)
            .map(|((a, b), c)| (a - b) * c)
            .sum();
        assert!(along.abs() < 1e-12);
    }

    #[test]
    fn planted_labels_supervised_codes_separate_better() {
        // topics: 0 = class-0 words (terms 0–2), 1 = class-1 words (terms 3–5), 2 = background
        // (terms 6–11); terms 6–11 are equally likely under all three topics, so without the
        // label a document's many shared words carry no class signal and its topic counts sit
        // mostly on the shared topics; its class shows only in one class-word token, and every
        // third document has two tokens of the other class's words (not separable unsupervised).
        let k = 3;
        let nt = 12;
        let mut beta = vec![0.0; nt * k];
        for n in 0..nt {
            for j in 0..k {
                beta[n * k + j] = match n {
                    0..=2 => [0.3, 0.002, 0.002][j],
                    3..=5 => [0.002, 0.3, 0.002][j],
                    _ => 0.1,
                };
            }
        }
        let p = CodeParams::default();
        let docs: Vec<(DocBlock, usize)> = (0..40)
            .map(|i| {
                let y = i % 2;
                let w: Vec<f64> = (0..nt)
                    .map(|n| match n {
                        0..=2 if y == 0 && n == i % 3 => 1.0,
                        3..=5 if y == 1 && n == 3 + i % 3 => 1.0,
                        // every third document also has 2 tokens of a word of the other class
                        0..=2 if y == 1 && i % 3 == 0 && n == (i / 3) % 3 => 2.0,
                        3..=5 if y == 0 && i % 3 == 0 && n == 3 + (i / 3) % 3 => 2.0,
                        6..=11 => 2.0 + ((i * 7 + n * 3) % 5) as f64,
                        _ => 0.0,
                    })
                    .collect();
                let keep: Vec<usize> = (0..nt).filter(|&n| w[n] > 0.0).collect();
                let blk = DocBlock {
                    w: keep.iter().map(|&n| w[n]).collect(),
                    beta: keep
                        .iter()
                        .flat_map(|&n| beta[n * k..(n + 1) * k].to_vec())
                        .collect(),
                    k,
                };
                (blk, y)
            })
            .collect();
        // the classifier the supervision uses: topic 0 ↔ class 0, topic 1 ↔ class 1
        let mut guide = Pegasos::new(2, k, 1e-2, 1.0);
        guide.w = vec![3.0, -3.0, 0.0, -3.0, 3.0, 0.0];
        let feats = |sup: bool| -> Vec<Vec<f64>> {
            docs.iter()
                .map(|(d, y)| {
                    let c = if sup {
                        code_doc_supervised(d, &p, &guide, *y, 10.0, false)
                    } else {
                        coding::code_doc(d, &p)
                    };
                    count_features(&c.topic_counts(d))
                })
                .collect()
        };
        // a fresh SVM trained on each set of codes: mean hinge on its own training codes
        let separation = |xs: &[Vec<f64>]| -> f64 {
            let mut svm = Pegasos::new(2, k, 1e-3, 1.0);
            for _ in 0..50 {
                for (x, (_, y)) in xs.iter().zip(&docs) {
                    svm.update(x, *y);
                }
            }
            xs.iter()
                .zip(&docs)
                .map(|(x, (_, y))| svm.hinge(x, *y))
                .sum::<f64>()
                / xs.len() as f64
        };
        let (h_un, h_sup) = (separation(&feats(false)), separation(&feats(true)));
        assert!(
            h_sup < 0.5 * h_un,
            "supervised {h_sup} vs unsupervised {h_un}"
        );
    }

    #[test]
    fn joint_theta_block_step_lowers_the_hinge() {
        // K = 3, joint features [x(z); θ/‖θ‖]: only the θ half of the classifier is non-zero
        let mut svm = Pegasos::new(2, 6, 1e-2, 1.0);
        svm.w = vec![0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0];
        let z = [1.0, 2.0, 3.0];
        let theta0 = vec![1.0, 2.0, 0.5];
        let mut theta = theta0.clone();
        svm.supervise_theta_block(&mut theta, 0, 0.1, 1.0, 3, &z);
        let h0 = svm.hinge(&joint_features(&z, &theta0), 0);
        let h1 = svm.hinge(&joint_features(&z, &theta), 0);
        assert!(h1 < h0, "{h1} vs {h0}");
        // wrong dimension: no-op
        let mut t2 = theta0.clone();
        Pegasos::new(2, 3, 1e-2, 1.0).supervise_theta_block(&mut t2, 0, 0.1, 1.0, 3, &z);
        assert_eq!(t2, theta0);
        // joint supervised coding lowers the joint supervised objective on the planted document
        let p = CodeParams::default();
        let doc = planted_doc(3, 2, 1);
        let mut svm = Pegasos::new(2, 6, 1e-2, 1.0);
        svm.w = vec![
            2.0, -2.0, 0.0, 1.0, -1.0, 0.0, -2.0, 2.0, 0.0, -1.0, 1.0, 0.0,
        ];
        let un = coding::code_doc(&doc, &p);
        let f_un = supervised_objective(&doc, &un.s, &un.theta, &p, &svm, 1, 5.0, true);
        let sup = code_doc_supervised(&doc, &p, &svm, 1, 5.0, true);
        let f_sup = supervised_objective(&doc, &sup.s, &sup.theta, &p, &svm, 1, 5.0, true);
        assert!(f_sup < f_un, "{f_sup} vs {f_un}");
    }
}
