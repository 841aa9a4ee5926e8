//! The starting point of a timestep's factorisation for its emerging topics: rows of H seeded
//! from the documents the evolving topics explain worst, and the emerging weights W22 scaled by
//! the best α (paper §5).

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::factorize::Csr;

/// W22: uniform random weights on the emerging columns of the new rows, scaled by
/// `α = argmin_{β ≥ 0} ‖(X − W_ev H_ev) − β W_em H_em‖²` over those rows (paper §5).
pub(super) fn init_emerging(
    x: &Csr,
    h: &[f64],
    w: &mut [f64],
    k: usize,
    k_ev: usize,
    rows: std::ops::Range<usize>,
    rng: &mut ChaCha8Rng,
) {
    let d = x.cols;
    if k_ev >= k || rows.is_empty() {
        return;
    }
    for r in rows.clone() {
        for i in k_ev..k {
            w[r * k + i] = rng.random::<f64>();
        }
    }
    // ⟨X − W_ev H_ev, W_em H_em⟩ and ‖W_em H_em‖², row by row over dense products.
    let mut num = 0.0;
    let mut den = 0.0;
    let mut em = vec![0.0; d];
    let mut ev = vec![0.0; d];
    for r in rows.clone() {
        em.fill(0.0);
        ev.fill(0.0);
        for i in 0..k {
            let c = w[r * k + i];
            if c == 0.0 {
                continue;
            }
            let target = if i < k_ev { &mut ev } else { &mut em };
            for (t, hv) in target.iter_mut().zip(&h[i * d..(i + 1) * d]) {
                *t += c * hv;
            }
        }
        for (j, xv) in x.row(r) {
            num += xv * em[j];
        }
        num -= ev.iter().zip(&em).map(|(a, b)| a * b).sum::<f64>();
        den += em.iter().map(|a| a * a).sum::<f64>();
    }
    let alpha = if den > 0.0 { (num / den).max(0.0) } else { 0.0 };
    for r in rows {
        for i in k_ev..k {
            w[r * k + i] *= alpha;
        }
    }
}

/// Residual-seeded emerging rows: each emerging row becomes 0.9 · (a new document's vector,
/// normalised to sum 1) + 0.1 · (its random distribution), the document drawn (without
/// repetition) with probability ∝ r², r = its relative residual ‖x − x̂‖² / ‖x‖² under the
/// previous topics (`rho`, from `row_residuals`; so ∝ ρ⁴ in the norm ratio ρ) — so the
/// injected bandwidth starts on what the evolving set explains worst.
pub(super) fn seed_emerging(
    x: &Csr,
    h: &mut [f64],
    k_ev: usize,
    k: usize,
    first_new: usize,
    rho: &[f64],
    rng: &mut ChaCha8Rng,
) {
    let d = x.cols;
    let mut weight: Vec<f64> = rho
        .iter()
        .enumerate()
        .map(|(q, r)| {
            let nonzero = x.row(first_new + q).next().is_some();
            if nonzero {
                r.powi(2).max(1e-12)
            } else {
                0.0
            }
        })
        .collect();
    for i in k_ev..k {
        let total: f64 = weight.iter().sum();
        if total <= 0.0 {
            return;
        }
        let mut u = rng.random::<f64>() * total;
        let mut pick = weight.len() - 1;
        for (q, &wq) in weight.iter().enumerate() {
            if u < wq {
                pick = q;
                break;
            }
            u -= wq;
        }
        weight[pick] = 0.0;
        let r = first_new + pick;
        let sx: f64 = x.row(r).map(|(_, v)| v).sum();
        let row = &mut h[i * d..(i + 1) * d];
        for v in row.iter_mut() {
            *v *= 0.1;
        }
        for (j, v) in x.row(r) {
            row[j] += 0.9 * v / sx;
        }
    }
}
