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
    let (a_out, stats, _) = oiadmm_step_sharing(p, a, delta, x, params, false);
    (a_out, stats)
}

/// The rows of Â_{t+1} one OIADMM step wrote, with the step's τ and relative change: what a
/// replica that computed the step sends to replicas of the same Â_t and batch, so that they
/// take the step ([`take_new_rows`]) instead of computing it.
///
/// Invariants (checked by [`take_new_rows`]): `rows` strictly ascending; `lens` has one entry
/// per row and they add up to `entries.len()`; each row's entries are Â_{t+1}'s stored
/// entries of that row (atoms strictly ascending, values finite and ≥ 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRows {
    pub rows: Vec<u32>,
    pub lens: Vec<u32>,
    pub entries: Vec<(u32, f32)>,
    pub tau: f64,
    pub relative_change: f64,
}

/// [`oiadmm_step`], and when `share` the rows it wrote ([`NewRows`]).
pub fn oiadmm_step_sharing(
    p: &CsMat<f64>,
    a: &Dictionary,
    delta: Option<&mut Multiplier>,
    x: &CsMat<f64>,
    params: &OiadmmParams,
    share: bool,
) -> (Dictionary, OiadmmStats, Option<NewRows>) {
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
    let new_rows = share.then(|| NewRows {
        rows: live.rows.iter().map(|&i| i as u32).collect(),
        lens: live
            .rows
            .iter()
            .map(|&i| a_out.row(i).len() as u32)
            .collect(),
        entries: live
            .rows
            .iter()
            .flat_map(|&i| a_out.row(i))
            .copied()
            .collect(),
        tau,
        relative_change,
    });
    let delta_nnz = match delta {
        Some(d) => oiadmm_delta(p, a, &a_out, d, &xr, params.beta),
        None => 0,
    };
    (
        a_out,
        OiadmmStats {
            tau,
            relative_change,
            delta_nnz,
        },
        new_rows,
    )
}

/// Pass 2 of the step: `delta` (Δ_t, m × n) becomes Δ_{t+1} = Δ_t + β (P − Â_{t+1} X̂ − Γ),
/// Γ = soft(P − Â_t X̂ + Δ_t/β, 1/β), given Â_t (`a`), Â_{t+1} (`a_out`) and X̂ by rows (`xr`,
/// k × n CSR). Returns the non-zeros of Δ_{t+1}. Deterministic (rows are independent).
///
/// Where P_ij = 0 and (ÂX̂)_ij = 0 before and after, this is Δ_ij ← clip(Δ_ij, −1, 1), so
/// zeros stay zero and only the candidate positions are visited.
pub fn oiadmm_delta(
    p: &CsMat<f64>,
    a: &Dictionary,
    a_out: &Dictionary,
    delta: &mut Multiplier,
    xr: &CsMat<f64>,
    beta: f64,
) -> usize {
    let n = p.cols();
    delta.rows_mut().par_iter_mut().enumerate().for_each_init(
        || (Acc::new(n), Acc::new(n), Acc::new(n), Acc::new(n)),
        |(ax_old, ax_new, pv, cand), (i, row)| {
            row_times_codes(nonzeros(a.row(i)), xr, ax_old);
            row_times_codes(nonzeros(a_out.row(i)), xr, ax_new);
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
    delta.nnz()
}

/// Â_{t+1} from Â_t (`a`) and the rows a replica of the same Â_t wrote in its step
/// ([`oiadmm_step_sharing`]): bit for bit the Â_{t+1} that replica computed. Refused, with
/// what is wrong, unless `new` keeps its invariants ([`NewRows`]) for an m × k dictionary,
/// every row of Â_t it leaves out holds only zeros (such a row is not live, so a step leaves
/// it as it is) and every column of the written rows sums to at most 1 (+1e-5 for the f32
/// rounding), τ and the relative change finite and ≥ 0. O(m + non-zeros).
pub fn take_new_rows(a: &Dictionary, new: &NewRows) -> Result<Dictionary, String> {
    let (m, k) = a.dim();
    if new.lens.len() != new.rows.len() {
        return Err(format!(
            "{} rows but {} lengths",
            new.rows.len(),
            new.lens.len()
        ));
    }
    if new.lens.iter().map(|&l| l as usize).sum::<usize>() != new.entries.len() {
        return Err(format!(
            "the lengths do not add up to the {} entries",
            new.entries.len()
        ));
    }
    let fine = |v: f64| v.is_finite() && v >= 0.0;
    if !(fine(new.tau) && fine(new.relative_change)) {
        return Err(format!(
            "τ {} or relative change {} out of range",
            new.tau, new.relative_change
        ));
    }
    let mut at = vec![usize::MAX; m];
    for (c, w) in new.rows.windows(2).enumerate() {
        if w[0] >= w[1] {
            return Err(format!("rows not strictly ascending at position {}", c + 1));
        }
    }
    let mut offsets = Vec::with_capacity(new.rows.len() + 1);
    offsets.push(0usize);
    let mut sums = vec![0.0f64; k];
    for (c, (&i, &len)) in new.rows.iter().zip(&new.lens).enumerate() {
        let i = i as usize;
        if i >= m {
            return Err(format!("row {i} of a dictionary of {m} rows"));
        }
        at[i] = c;
        let (lo, hi) = (offsets[c], offsets[c] + len as usize);
        let row = &new.entries[lo..hi];
        if row.windows(2).any(|e| e[0].0 >= e[1].0) {
            return Err(format!("row {i}: atoms not strictly ascending"));
        }
        for &(j, v) in row {
            if j as usize >= k || !v.is_finite() || v < 0.0 {
                return Err(format!(
                    "row {i}: entry ({j}, {v}) outside {k} atoms or negative"
                ));
            }
            sums[j as usize] += v as f64;
        }
        offsets.push(hi);
    }
    if let Some(j) = sums.iter().position(|&s| s > 1.0 + 1e-5) {
        return Err(format!(
            "atom {j} sums to {} over the written rows",
            sums[j]
        ));
    }
    if let Some(i) = (0..m).find(|&i| at[i] == usize::MAX && a.row(i).iter().any(|e| e.1 != 0.0)) {
        return Err(format!(
            "row {i} holds non-zero entries but was not written"
        ));
    }
    let rows: Vec<usize> = new.rows.iter().map(|&i| i as usize).collect();
    Ok(a.with_rows(&rows, |c| &new.entries[offsets[c]..offsets[c + 1]], |v| v))
}
