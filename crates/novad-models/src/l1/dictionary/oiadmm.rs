use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sprs::CsMat;

use super::gradient::{nonzeros, row_times_codes, Acc, Inputs, Live};
use super::project::{project_sparse_rows, SparseRows};
use super::{Dictionary, Multiplier};
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

/// Â_{t+1}: `a` with its live rows replaced by their projected rows rounded to f32 (every
/// other row holds only ±0, kept as it is, see [`Inputs::live`]), and (‖Â_{t+1} − Â_t‖²,
/// ‖Â_t‖²) over the live rows, the new values rounded to f32 first. Each row's sums run over the union of its old and new
/// non-zeros by atom (the terms left out are exact zeros) and are computed in parallel, then
/// added in row order, so the figures equal the dense ones bit for bit.
fn write_rows(a: &Dictionary, live: &Live, rows: &SparseRows) -> (Dictionary, f64, f64) {
    let parts: Vec<(f64, f64)> = (0..live.rows.len())
        .into_par_iter()
        .map(|c| {
            let (old, new) = (live.a_row(c), rows.row(c));
            let (mut diff, mut norm) = (0.0f64, 0.0f64);
            let (mut o, mut n) = (old.iter().peekable(), new.iter().peekable());
            loop {
                let (ov, nv) = match (o.peek(), n.peek()) {
                    (None, None) => break,
                    (Some(&&(jo, _)), Some(&&(jn, _))) if jo == jn => {
                        (o.next().unwrap().1, n.next().unwrap().1 as f32)
                    }
                    (Some(&&(jo, _)), Some(&&(jn, _))) if jo < jn => (o.next().unwrap().1, 0.0),
                    (Some(_), None) => (o.next().unwrap().1, 0.0),
                    _ => (0.0, n.next().unwrap().1 as f32),
                };
                diff += (nv as f64 - ov as f64).powi(2);
                norm += (ov as f64).powi(2);
            }
            (diff, norm)
        })
        .collect();
    let (diff, norm) = parts
        .iter()
        .fold((0.0, 0.0), |(d, n), &(di, ni)| (d + di, n + ni));
    let next = a.with_rows(&live.rows, |c| rows.row(c), |v| v as f32);
    (next, diff, norm)
}

/// ‖Â_t‖² over the live rows, added in row order.
fn live_norm(live: &Live) -> f64 {
    let parts: Vec<f64> = (0..live.rows.len())
        .into_par_iter()
        .map(|c| {
            live.a_row(c)
                .iter()
                .map(|&(_, v)| (v as f64).powi(2))
                .sum::<f64>()
        })
        .collect();
    parts.iter().sum()
}

/// One OIADMM step (Algorithm 2): returns Â_{t+1} and overwrites `delta` (Δ_t) with Δ_{t+1}.
///
/// Shapes: `p` is the batch, m × n CSR (rows = terms); `a` is Â_t, m × k; `delta` is Δ_t,
/// m × n (already resized to this batch), or `None` for Δ_t = 0 — then Δ_{t+1} is not
/// computed; `x` is X̂_t, k × n CSC.
///
/// Cost: one pass over Â_t's rows for its live rows (O(m + non-zeros)), the Gram matrix X̂X̂ᵀ
/// (O(Σ_j nnz(x_j)²) time, k² f64; only for k ≤ 1024), then per live row i
/// O(nnz(Â_i)·k + (nnz(P_i) + nnz(Δ_i))·nnz(code)) through the Gram matrix, or
/// O(nnz((ÂX̂)_i)·nnz(code)) for the few rows whose W can clip off the batch's terms; the
/// projection and the new Â are O(m + non-zeros). Guarantees: Â_{t+1} ∈ 𝒜, all values
/// finite; the result equals the dense transcription of Algorithm 2 up to rounding (tested to
/// 1e-5), and is a deterministic function of the inputs (any number of threads, bit for bit).
pub fn oiadmm_step(
    p: &CsMat<f64>,
    a: &Dictionary,
    delta: Option<&mut Multiplier>,
    x: &CsMat<f64>,
    params: &OiadmmParams,
) -> (Dictionary, OiadmmStats) {
    let (m, k) = a.dim();
    let n = p.cols();
    assert_eq!(p.rows(), m, "P rows");
    if let Some(d) = &delta {
        assert_eq!((d.nrows(), d.ncols()), (m, n), "Δ shape");
    }
    assert_eq!(x.rows(), k, "X rows");
    assert_eq!(x.cols(), n, "X cols");
    assert!(p.is_csr() && x.is_csc());
    let psi = psi_max_codes(x);
    let tau = if psi > 0.0 {
        params.tau_scale / (2.0 * psi)
    } else {
        0.0
    };
    let xr = x.to_csr();
    let (live, rows) = {
        let inputs = Inputs {
            p,
            a,
            delta: delta.as_deref(),
            x,
            xr: &xr,
        };
        let live = inputs.live();
        let mut rows = if tau > 0.0 && k > 0 {
            inputs.gradient_rows(params.beta, tau, &live)
        } else {
            SparseRows::default()
        };
        if !rows.is_empty() {
            project_sparse_rows(&mut rows, k);
        }
        (live, rows)
    };
    // The new Â (every row outside `live` holds only ±0, kept as it is) and its change.
    let (a_out, diff, norm) = if rows.is_empty() {
        (a.clone(), 0.0, live_norm(&live))
    } else {
        write_rows(a, &live, &rows)
    };
    let relative_change = if norm > 0.0 {
        (diff / norm).sqrt()
    } else {
        0.0
    };
    let beta = params.beta;

    // Pass 2: Δ_{t+1} = Δ_t + β (P − Â_{t+1} X̂ − Γ), Γ = soft(P − Â_t X̂ + Δ_t/β, 1/β).
    // Where P_ij = 0 and (ÂX̂)_ij = 0 before and after, this is Δ_ij ← clip(Δ_ij, −1, 1), so
    // zeros stay zero and only the candidate positions are visited.
    let mut delta_nnz = 0;
    if let Some(d) = delta {
        d.rows_mut().par_iter_mut().enumerate().for_each_init(
            || (Acc::new(n), Acc::new(n), Acc::new(n), Acc::new(n)),
            |(ax_old, ax_new, pv, cand), (i, row)| {
                row_times_codes(nonzeros(a.row(i)), &xr, ax_old);
                row_times_codes(nonzeros(a_out.row(i)), &xr, ax_new);
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
    (
        a_out,
        OiadmmStats {
            tau,
            relative_change,
            delta_nnz,
        },
    )
}
