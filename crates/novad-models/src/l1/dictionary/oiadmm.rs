use ndarray::Array2;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sprs::CsMat;

use super::project::{project_sparse_rows, SparseRows};
use super::Multiplier;
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

/// Live rows per block of pass 1.
const ROW_BLOCK: usize = 256;

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

/// The inputs of pass 1 of a step: P (m × n CSR), Â_t (row-major m × k), Δ_t, X̂ (CSC and CSR).
struct Inputs<'a> {
    p: &'a CsMat<f64>,
    a: &'a [f32],
    k: usize,
    delta: Option<&'a Multiplier>,
    x: &'a CsMat<f64>,
    xr: &'a CsMat<f64>,
}

impl Inputs<'_> {
    fn a_row(&self, i: usize) -> &[f32] {
        &self.a[i * self.k..(i + 1) * self.k]
    }
    fn d_row(&self, i: usize) -> &[(u32, f32)] {
        match self.delta {
            Some(d) => d.row(i),
            None => &[],
        }
    }

    /// The rows a step can change, ascending: non-zero in Â_t, or with a term of the batch, or
    /// with a multiplier. A row that is none of these is zero before and after the step (and
    /// the projection: max(0, 0 − θ) = 0).
    fn live_rows(&self) -> Vec<usize> {
        (0..self.p.rows())
            .into_par_iter()
            .filter(|&i| {
                self.a_row(i).iter().any(|&v| v != 0.0)
                    || self.p.outer_view(i).is_some_and(|r| r.nnz() > 0)
                    || !self.d_row(i).is_empty()
            })
            .collect()
    }

    /// Pass 1 of the step on the live rows: Â' = max(0, Â − τ G) with G = −W X̂ᵀ,
    /// W = Δ/β + Γ̃ − Γ = clip(Γ̃ + Δ/β, ±1/β), Γ̃ = P − Â X̂. Only documents with a non-zero
    /// code contribute, and W_ij ≠ 0 needs P_ij ≠ 0, Δ_ij ≠ 0 or (ÂX̂)_ij ≠ 0. Each row is
    /// returned sparse: its positive entries (atom, value), by atom — the clip at 0 of the
    /// projection, which is all it does to a column whose sum stays ≤ 1. Sums skip only exact
    /// zeros, so the values are bit-identical to the dense transcription.
    fn gradient_rows(&self, beta: f64, tau: f64, live: &[usize]) -> SparseRows {
        let (k, n) = (self.k, self.p.cols());
        // blocks of rows, each into one buffer (few allocations), joined in row order
        // per block: the rows' entry counts and their entries
        type Block = (Vec<usize>, Vec<(u32, f64)>);
        let blocks: Vec<Block> = live
            .par_chunks(ROW_BLOCK)
            .map_init(
                || (Acc::new(n), Acc::new(n), vec![0.0f64; k]),
                |(ax, gt, out), block| {
                    let (mut lens, mut ent) = (Vec::with_capacity(block.len()), Vec::new());
                    for &i in block {
                        let before = ent.len();
                        self.gradient_row(i, beta, tau, (ax, gt, out), &mut ent);
                        lens.push(ent.len() - before);
                    }
                    (lens, ent)
                },
            )
            .collect();
        let mut rows = SparseRows {
            ptr: Vec::with_capacity(live.len() + 1),
            entries: Vec::with_capacity(blocks.iter().map(|b| b.1.len()).sum()),
        };
        rows.ptr.push(0);
        for (lens, ent) in blocks {
            for l in lens {
                rows.ptr.push(rows.ptr.last().unwrap() + l);
            }
            rows.entries.extend(ent);
        }
        rows
    }

    /// Row `i` of pass 1, its positive entries appended to `ent`.
    fn gradient_row(
        &self,
        i: usize,
        beta: f64,
        tau: f64,
        (ax, gt, out): (&mut Acc, &mut Acc, &mut [f64]),
        ent: &mut Vec<(u32, f64)>,
    ) {
        let a_row = self.a_row(i);
        for (o, &v) in out.iter_mut().zip(a_row) {
            *o = v as f64;
        }
        row_times_codes(a_row, self.xr, ax);
        // gt accumulates Γ̃ + Δ/β on the candidate positions
        for &j in &ax.touched {
            gt.add(j, -ax.val[j as usize]);
        }
        for (j, &v) in self.p.outer_view(i).unwrap().iter() {
            gt.add(j as u32, v);
        }
        for &(j, d) in self.d_row(i) {
            gt.add(j, d as f64 / beta);
        }
        for &j in &gt.touched {
            let code = self.x.outer_view(j as usize).unwrap();
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
        ent.extend(
            out.iter()
                .enumerate()
                .filter(|(_, &v)| v > 0.0)
                .map(|(j, &v)| (j as u32, v)),
        );
    }
}

/// Write the projected live rows into Â (row-major m × k; rows outside `live` are untouched)
/// and return (‖Â_{t+1} − Â_t‖², ‖Â_t‖²) over those rows, the new values rounded to f32 first.
/// Rows are written in parallel; the sums are added in row order (deterministic).
fn write_rows(a: &mut Array2<f32>, live: &[usize], rows: &SparseRows) -> (f64, f64) {
    let k = a.ncols();
    let mut pos = vec![u32::MAX; a.nrows()];
    for (c, &i) in live.iter().enumerate() {
        pos[i] = c as u32;
    }
    let parts: Vec<(f64, f64)> = a
        .as_slice_mut()
        .expect("standard layout")
        .par_chunks_mut(k)
        .enumerate()
        .filter(|(i, _)| pos[*i] != u32::MAX)
        .map(|(i, out)| {
            let row = rows.row(pos[i] as usize);
            let (mut diff, mut norm) = (0.0f64, 0.0f64);
            let mut it = row.iter().peekable();
            for (j, o) in out.iter_mut().enumerate() {
                let nw = match it.peek() {
                    Some(&&(c, v)) if c as usize == j => {
                        it.next();
                        v as f32
                    }
                    _ => 0.0,
                };
                diff += (nw as f64 - *o as f64).powi(2);
                norm += (*o as f64).powi(2);
                *o = nw;
            }
            (diff, norm)
        })
        .collect();
    parts
        .iter()
        .fold((0.0, 0.0), |(d, n), &(di, ni)| (d + di, n + ni))
}

/// ‖Â‖² over the given rows, added in row order.
fn live_norm(a: &Array2<f32>, live: &[usize]) -> f64 {
    let parts: Vec<f64> = live
        .par_iter()
        .map(|&i| a.row(i).iter().map(|&v| (v as f64).powi(2)).sum::<f64>())
        .collect();
    parts.iter().sum()
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
    oiadmm_step_owned(p, a.clone(), delta, x, params)
}

/// [`oiadmm_step`] on an owned Â_t, updated in place: without Δ no second m × k matrix is
/// allocated, and only the live rows (see below) are read or written. Same result, bit for bit.
pub fn oiadmm_step_owned(
    p: &CsMat<f64>,
    mut a: Array2<f32>,
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
    if !a.is_standard_layout() {
        a = a.as_standard_layout().into_owned();
    }
    let psi = psi_max_codes(x);
    let tau = if psi > 0.0 {
        params.tau_scale / (2.0 * psi)
    } else {
        0.0
    };
    let xr = x.to_csr();
    // Δ_{t+1} needs Â_t and Â_{t+1} side by side
    let a_old = delta.as_ref().map(|_| a.clone());
    let (live, rows) = {
        let inputs = Inputs {
            p,
            a: a.as_slice().expect("standard layout"),
            k,
            delta: delta.as_deref(),
            x,
            xr: &xr,
        };
        let live = inputs.live_rows();
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
    // Write the live rows back (every other row is 0 before and after) and measure the change.
    let (diff, norm) = if rows.is_empty() {
        (0.0, live_norm(&a, &live))
    } else {
        write_rows(&mut a, &live, &rows)
    };
    let relative_change = if norm > 0.0 {
        (diff / norm).sqrt()
    } else {
        0.0
    };
    let a_out = a;
    let beta = params.beta;
    let a_sl: &[f32] = match &a_old {
        Some(old) => old.as_slice().expect("standard layout"),
        None => &[],
    };

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
    (
        a_out,
        OiadmmStats {
            tau,
            relative_change,
            delta_nnz,
        },
    )
}
