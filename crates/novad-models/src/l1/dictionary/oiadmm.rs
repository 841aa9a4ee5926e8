use ndarray::Array2;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sprs::CsMat;

use super::shard::{shard_docs, shard_sum, Acc, DictRows, ShardSum, LOGICAL_SHARDS};
use super::{project_columns, Multiplier};
use crate::linalg::{psi_max_codes, soft};
use crate::model::{Code, OiadmmStats};
use crate::text::SparseDoc;

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
/// The sum over the batch is taken by logical shards ([`shard_sum`], added in shard order), as
/// [`oiadmm_step_sharded`] does with sums computed elsewhere: the result does not depend on
/// the number of threads. Guarantees: Â_{t+1} ∈ 𝒜, all values finite; the result equals the
/// dense transcription of Algorithm 2 up to rounding (tested).
pub fn oiadmm_step(
    p: &CsMat<f64>,
    a: &Array2<f32>,
    delta: Option<&mut Multiplier>,
    x: &CsMat<f64>,
    params: &OiadmmParams,
) -> (Array2<f32>, OiadmmStats) {
    assert!(p.is_csr() && x.is_csc());
    let pc = p.to_csc();
    let docs: Vec<SparseDoc> = pc
        .outer_iterator()
        .map(|c| SparseDoc {
            ids: c.indices().iter().map(|&i| i as u32).collect(),
            vals: c.data().to_vec(),
        })
        .collect();
    let codes: Vec<Code> = x
        .outer_iterator()
        .map(|c| Code {
            atoms: c.indices().iter().map(|&i| i as u32).collect(),
            weights: c.data().to_vec(),
            score: 0.0,
            ceiling: 0.0,
            iterations: 0,
            active_atoms: 0,
            residual: Vec::new(),
        })
        .collect();
    let rows = DictRows::new(a);
    let d_ref = delta.as_deref();
    let sums: Vec<ShardSum> = (0..LOGICAL_SHARDS)
        .into_par_iter()
        .map(|s| {
            let sc: Vec<Code> = shard_docs(codes.len(), s)
                .map(|j| codes[j].clone())
                .collect();
            shard_sum(s, &docs, &rows, d_ref, &sc, a.ncols(), params.beta)
        })
        .collect();
    oiadmm_step_sharded(p, a, delta, x, &sums, params)
}

/// [`oiadmm_step`] with the sum over the batch given as the parts of every logical shard
/// (`sums[s]` from [`shard_sum`] for shard s, in shard order). Row i of Â_{t+1} is
/// Π(Â_i + τ Σ_s G_s[i, ·]), the parts added in shard order, τ = tau_scale / (2 Ψmax(X̂)).
///
/// Panics when the shapes disagree or `sums` is not one part per shard in order (callers
/// check parts received from elsewhere with [`ShardSum::check`]).
pub fn oiadmm_step_sharded(
    p: &CsMat<f64>,
    a: &Array2<f32>,
    delta: Option<&mut Multiplier>,
    x: &CsMat<f64>,
    sums: &[ShardSum],
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
    assert_eq!(sums.len(), LOGICAL_SHARDS, "one sum per logical shard");
    assert!(sums.iter().enumerate().all(|(s, g)| g.shard as usize == s));
    let beta = params.beta;
    let psi = psi_max_codes(x);
    let tau = if psi > 0.0 {
        params.tau_scale / (2.0 * psi)
    } else {
        0.0
    };
    let xr = x.to_csr();
    let a_sl = a.as_slice().expect("standard layout");

    // Pass 1: Â' = Π(Â − τ G) with G = −W X̂ᵀ = −Σ_s G_s, W = clip(Γ̃ + Δ/β, ±1/β),
    // Γ̃ = P − Â X̂ (the parts computed per shard by `shard_sum`).
    let mut a_new = Array2::<f64>::zeros((m, k));
    a_new.zip_mut_with(a, |o, &v| *o = v as f64);
    if tau > 0.0 && k > 0 {
        // per shard, the position of each row in its part (u32::MAX: absent)
        let pos: Vec<Vec<u32>> = sums
            .par_iter()
            .map(|g| {
                let mut pos = vec![u32::MAX; m];
                for (r, (i, _, _)) in g.iter_rows().enumerate() {
                    pos[i] = r as u32;
                }
                pos
            })
            .collect();
        let rows: Vec<Vec<(&[u32], &[f64])>> = sums
            .iter()
            .map(|g| g.iter_rows().map(|(_, at, v)| (at, v)).collect())
            .collect();
        a_new
            .as_slice_mut()
            .unwrap()
            .par_chunks_mut(k)
            .enumerate()
            .for_each_init(
                || vec![0.0f64; k],
                |acc, (i, out)| {
                    acc.iter_mut().for_each(|v| *v = 0.0);
                    let mut any = false;
                    for (s, pos) in pos.iter().enumerate() {
                        if pos[i] != u32::MAX {
                            let (at, v) = rows[s][pos[i] as usize];
                            for (&kk, &g) in at.iter().zip(v) {
                                acc[kk as usize] += g;
                            }
                            any = true;
                        }
                    }
                    if any {
                        for (o, &g) in out.iter_mut().zip(acc.iter()) {
                            *o += tau * g;
                        }
                    }
                },
            );
        project_columns(&mut a_new);
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
