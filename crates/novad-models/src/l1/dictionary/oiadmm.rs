use ndarray::Array2;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sprs::CsMat;

use super::{project_columns, Multiplier};
use crate::linalg::{psi_max_codes, soft};
use crate::model::OiadmmStats;

/// Parameters of the OIADMM step (Algorithm 2). Checked by [`crate::Params::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OiadmmParams {
    /// Penalty β (paper: 5). > 0.
    pub beta: f64,
    /// τ = tau_scale / (2 Ψmax(X̂_t)) (paper: tau_scale = 1, from Theorem 4.6). > 0.
    pub tau_scale: f64,
    /// Carry the multiplier Δ from one batch to the next (the paper: column j of Δ_t is reused
    /// for document j of the next batch, although it is a different document). `false` starts
    /// every batch from Δ = 0, which makes Â learn much better on a planted stream (measured in
    /// `tests/dictionary.rs`) and removes Δ from the persisted state.
    pub carry_delta: bool,
}

impl OiadmmParams {
    pub fn paper() -> Self {
        OiadmmParams {
            beta: 5.0,
            tau_scale: 1.0,
            carry_delta: true,
        }
    }
}

/// Sparse accumulator over document positions: a dense buffer plus the list of touched slots,
/// reset in O(touched).
struct Acc {
    val: Vec<f64>,
    mark: Vec<bool>,
    touched: Vec<u32>,
}

impl Acc {
    fn new(n: usize) -> Self {
        Acc {
            val: vec![0.0; n],
            mark: vec![false; n],
            touched: Vec::new(),
        }
    }
    #[inline]
    fn add(&mut self, j: u32, v: f64) {
        let ju = j as usize;
        if !self.mark[ju] {
            self.mark[ju] = true;
            self.touched.push(j);
        }
        self.val[ju] += v;
    }
    fn clear(&mut self) {
        for &j in &self.touched {
            self.val[j as usize] = 0.0;
            self.mark[j as usize] = false;
        }
        self.touched.clear();
    }
}

/// (ÂX̂)_{i,·} for one row of Â: for each atom used in the row, add its weight times the row
/// of X̂ (CSR, k × n) into `acc`. Cost O(Σ_{k ∈ supp(row)} nnz(X̂_k,·)).
fn row_times_codes(row: &[f32], xr: &CsMat<f64>, acc: &mut Acc) {
    for (kk, &a) in row.iter().enumerate() {
        if a != 0.0 {
            let xrow = xr.outer_view(kk).unwrap();
            for (j, &v) in xrow.iter() {
                acc.add(j as u32, a as f64 * v);
            }
        }
    }
}

/// One OIADMM step (Algorithm 2): returns Â_{t+1} and overwrites `delta` (Δ_t) with Δ_{t+1}.
///
/// Shapes: `p` is the batch, m × n CSR (rows = terms); `a` is Â_t, m × k; `delta` is Δ_t,
/// m × n (already resized to this batch), or `None` for Δ_t = 0 — then Δ_{t+1} is not
/// computed; `x` is X̂_t, k × n CSC.
///
/// Cost: O(nnz(P) + nnz(Δ) + nnz(Â X̂) + m·k) — X̂ is used sparsely and only the entries of
/// Γ̃ + Δ/β that can be non-zero are visited. Guarantees: Â_{t+1} ∈ 𝒜, all values finite;
/// the result equals the dense transcription of Algorithm 2 (tested).
pub fn oiadmm_step(
    p: &CsMat<f64>,
    a: &Array2<f32>,
    delta: Option<&mut Multiplier>,
    x: &CsMat<f64>,
    params: &OiadmmParams,
) -> (Array2<f32>, OiadmmStats) {
    let (m, k) = a.dim();
    let n = p.cols();
    assert_eq!(p.rows(), m, "P rows");
    if let Some(d) = &delta {
        assert_eq!((d.nrows(), d.ncols()), (m, n), "Δ shape");
    }
    assert_eq!(x.rows(), k, "X rows");
    assert_eq!(x.cols(), n, "X cols");
    assert!(p.is_csr() && x.is_csc());
    let beta = params.beta;
    let psi = psi_max_codes(x);
    let tau = if psi > 0.0 {
        params.tau_scale / (2.0 * psi)
    } else {
        0.0
    };
    let xr = x.to_csr();
    let a_sl = a.as_slice().expect("standard layout");
    let empty: Vec<(u32, f32)> = Vec::new();
    let d_ref: Option<&Multiplier> = delta.as_deref();
    let d_row = |i: usize| -> &[(u32, f32)] {
        match d_ref {
            Some(d) => d.row(i),
            None => &empty,
        }
    };

    // Pass 1: Â' = max(0, Â − τ G) with G = −W X̂ᵀ, W = Δ/β + Γ̃ − Γ = clip(Γ̃ + Δ/β, ±1/β),
    // Γ̃ = P − Â X̂. Only documents with a non-zero code contribute, and W_ij ≠ 0 needs
    // P_ij ≠ 0, Δ_ij ≠ 0 or (ÂX̂)_ij ≠ 0.
    let mut a_new = Array2::<f64>::zeros((m, k));
    if tau > 0.0 && k > 0 {
        a_new
            .as_slice_mut()
            .unwrap()
            .par_chunks_mut(k)
            .enumerate()
            .for_each_init(
                || (Acc::new(n), Acc::new(n)),
                |(ax, gt), (i, out)| {
                    let a_row = &a_sl[i * k..(i + 1) * k];
                    for (o, &v) in out.iter_mut().zip(a_row) {
                        *o = v as f64;
                    }
                    row_times_codes(a_row, &xr, ax);
                    // gt accumulates Γ̃ + Δ/β on the candidate positions
                    for &j in &ax.touched {
                        gt.add(j, -ax.val[j as usize]);
                    }
                    for (j, &v) in p.outer_view(i).unwrap().iter() {
                        gt.add(j as u32, v);
                    }
                    for &(j, d) in d_row(i) {
                        gt.add(j, d as f64 / beta);
                    }
                    for &j in &gt.touched {
                        let code = x.outer_view(j as usize).unwrap();
                        if code.nnz() == 0 {
                            continue;
                        }
                        let w = gt.val[j as usize].clamp(-1.0 / beta, 1.0 / beta);
                        if w != 0.0 {
                            for (kk, &v) in code.iter() {
                                out[kk] += tau * w * v;
                            }
                        }
                    }
                    ax.clear();
                    gt.clear();
                },
            );
        project_columns(&mut a_new);
    } else {
        a_new.zip_mut_with(a, |o, &v| *o = v as f64);
    }
    let a_out = a_new.mapv(|v| v as f32);

    // Pass 2: Δ_{t+1} = Δ_t + β (P − Â_{t+1} X̂ − Γ), Γ = soft(P − Â_t X̂ + Δ_t/β, 1/β).
    // Where P_ij = 0 and (ÂX̂)_ij = 0 before and after, this is Δ_ij ← clip(Δ_ij, −1, 1), so
    // zeros stay zero and only the candidate positions are visited.
    let mut delta_nnz = 0;
    if let Some(d) = delta {
        let a_out_sl = a_out.as_slice().unwrap();
        d.rows_mut().par_iter_mut().enumerate().for_each_init(
            || (Acc::new(n), Acc::new(n), Acc::new(n), Acc::new(n)),
            |(ax_old, ax_new, pv, cand), (i, row)| {
                row_times_codes(&a_sl[i * k..(i + 1) * k], &xr, ax_old);
                row_times_codes(&a_out_sl[i * k..(i + 1) * k], &xr, ax_new);
                for (j, &v) in p.outer_view(i).unwrap().iter() {
                    pv.add(j as u32, v);
                }
                for &(j, dv) in row.iter() {
                    cand.add(j, dv as f64);
                }
                for &j in ax_old
                    .touched
                    .iter()
                    .chain(&ax_new.touched)
                    .chain(&pv.touched)
                {
                    cand.add(j, 0.0);
                }
                let mut next: Vec<(u32, f32)> = Vec::with_capacity(cand.touched.len());
                for &j in &cand.touched {
                    let ju = j as usize;
                    let dv = cand.val[ju];
                    let pij = pv.val[ju];
                    let g = soft(pij - ax_old.val[ju] + dv / beta, 1.0 / beta);
                    let nv = (dv + beta * (pij - ax_new.val[ju] - g)) as f32;
                    if nv != 0.0 {
                        next.push((j, nv));
                    }
                }
                next.sort_unstable_by_key(|e| e.0);
                *row = next;
                ax_old.clear();
                ax_new.clear();
                pv.clear();
                cand.clear();
            },
        );
        delta_nnz = d.nnz();
    }
    let mut diff = 0.0f64;
    let mut norm = 0.0f64;
    for (&o, &nw) in a.iter().zip(a_out.iter()) {
        diff += (nw as f64 - o as f64).powi(2);
        norm += (o as f64).powi(2);
    }
    let relative_change = if norm > 0.0 {
        (diff / norm).sqrt()
    } else {
        0.0
    };
    (
        a_out,
        OiadmmStats {
            tau,
            relative_change,
            delta_nnz,
        },
    )
}
