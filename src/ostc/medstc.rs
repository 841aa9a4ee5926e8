//! Online MedSTC (WWW'13 §4.2.2): a multi-class linear SVM (Crammer–Singer hinge loss) on
//! document codes, learned online by Pegasos (Shalev-Shwartz et al. 2007), and the supervised
//! θ-step that couples it to the codes.
//!
//! Features: x = θ / ‖θ‖₂ (0 for θ = 0), so the classifier is scale-free in the codes.
//! Hinge loss: max_y [Δ·1(y ≠ y_d) + η_yᵀx − η_{y_d}ᵀx].

use serde::{Deserialize, Serialize};

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

    /// The supervised θ-step of MedSTC for a labelled document: with y* the loss-augmented
    /// prediction, θ_k ← max(0, θ_k − c (η_{y*k} − η_{label,k}) / denom) (the closed-form
    /// minimiser of the STC θ-terms plus c times the hinge, linearised at y*). No-op when
    /// y* = label.
    pub fn supervise_theta(&self, theta: &mut [f64], label: usize, c: f64, denom: f64) {
        let x = features(theta);
        let y = self.most_violating(&x, label);
        if y == label {
            return;
        }
        let d = self.dim;
        for (k, t) in theta.iter_mut().enumerate() {
            *t = (*t - c * (self.w[y * d + k] - self.w[label * d + k]) / denom).max(0.0);
        }
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
}
