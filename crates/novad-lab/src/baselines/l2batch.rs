//! ℓ2-batch: Algorithm 8 (L2-BATCH) of the NIPS 2012 paper — non-negative sparse coding with
//! squared loss, to show why the ℓ1 loss is used.
//!
//! Formulation. Documents are the shared unit-ℓ1 TF-IDF vectors, rescaled to unit ℓ2 norm
//! (p̃ = p/‖p‖₂; squared loss on unit-ℓ1 vectors would make λ = 0.1 exceed every
//! attainable correlation and zero every code). The dictionary lies in
//! 𝔸 = {A ≥ 0, ‖A_j‖₂ ≤ 1} (the paper's Appendix B set for the ℓ2 algorithm).
//! - Coding: `min_{x ≥ 0} ½‖p̃ − A x‖₂² + λ‖x‖₁`, solved exactly by cyclic coordinate descent
//!   with positivity (`x_j ← max(0, x_j − (∇_j + λ)/G_jj)` with the Gram matrix G = AᵀA and a
//!   maintained gradient), to a tolerance. Scores: the raw objective, and the relative
//!   residual ‖p − A x‖₂/‖p‖₂ (scale-free, identical for p and p̃).
//! - Dictionary: `min_{A ∈ 𝔸} ½‖P̃ − A X‖_F²` by projected gradient with step 1/Ψmax(XXᵀ),
//!   warm-started; the projection onto 𝔸 clips negatives and rescales columns with ℓ2 norm
//!   above 1 (exact for the intersection of the orthant and the ball). Rows are independent
//!   given C = XXᵀ and B = P̃Xᵀ, and a row's gradient is computed from its non-zeros only.
//! - Per timestep: k grows by η (new atoms: the same seeded random documents of the newest
//!   batch as ℓ1-batch, rescaled to unit ℓ2), then A-step / X-step alternations on all
//!   documents so far, as in ℓ1-batch.

use ndarray::Array2;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::l1batch::{growth_seed, mean, BatchParams, LearnStats};
use novad_models::text::{SparseDoc, VocabChange};

/// The code of one document under squared loss.
#[derive(Debug, Clone, PartialEq)]
pub struct L2Code {
    pub atoms: Vec<u32>,
    pub weights: Vec<f64>,
    /// ½‖p̃ − A x‖₂² + λ‖x‖₁ (½ for a document nothing explains; 0 for an empty one).
    pub objective: f64,
    /// ‖p − A x‖₂ / ‖p‖₂ in [0, 1] (1 = nothing explained; 0 for an empty document).
    pub rel_residual: f64,
    pub sweeps: u32,
}

/// Coordinate-descent settings.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct L2Params {
    pub lambda: f64,
    /// Rescale documents to unit ℓ2 norm before coding (default). `false` codes the unit-ℓ1
    /// TF-IDF vectors as they are: the raw objective then carries ½‖p‖₂², a length proxy.
    pub unit_l2: bool,
    /// Stop when no coordinate moves by more than `tol` (scaled by √G_jj) in a sweep.
    pub tol: f64,
    pub max_sweeps: u32,
}

/// A dictionary prepared for ℓ2 coding.
pub struct L2Dict<'a> {
    a: &'a Array2<f64>,
    gram: Vec<f64>,
    k: usize,
}

impl<'a> L2Dict<'a> {
    pub fn new(a: &'a Array2<f64>) -> Self {
        let k = a.ncols();
        let gram = gram(a);
        L2Dict { a, gram, k }
    }
}

/// G = AᵀA (k × k, row-major), from the non-zeros of each row. Partial sums over fixed row
/// blocks are added in block order, so the result does not depend on the thread count or
/// on scheduling.
fn gram(a: &Array2<f64>) -> Vec<f64> {
    const BLOCK: usize = 2048;
    let k = a.ncols();
    let sl = a.as_slice().expect("standard layout");
    let parts: Vec<Vec<f64>> = sl
        .par_chunks((k * BLOCK).max(1))
        .map(|block| {
            let mut g = vec![0.0f64; k * k];
            let mut nz: Vec<(usize, f64)> = Vec::new();
            for row in block.chunks(k.max(1)) {
                nz.clear();
                nz.extend(
                    row.iter()
                        .enumerate()
                        .filter(|(_, &v)| v != 0.0)
                        .map(|(j, &v)| (j, v)),
                );
                for &(i, vi) in &nz {
                    let gi = &mut g[i * k..(i + 1) * k];
                    for &(j, vj) in &nz {
                        gi[j] += vi * vj;
                    }
                }
            }
            g
        })
        .collect();
    let mut g = vec![0.0f64; k * k];
    for p in parts {
        g.iter_mut().zip(&p).for_each(|(a, b)| *a += b);
    }
    g
}

/// Code one document (see the module doc).
pub fn code_l2(dict: &L2Dict<'_>, doc: &SparseDoc, params: &L2Params) -> L2Code {
    let k = dict.k;
    let norm = doc.vals.iter().map(|v| v * v).sum::<f64>().sqrt();
    if doc.is_empty() || norm == 0.0 {
        return L2Code {
            atoms: vec![],
            weights: vec![],
            objective: 0.0,
            rel_residual: 0.0,
            sweeps: 0,
        };
    }
    let m = dict.a.nrows();
    let scale = if params.unit_l2 { 1.0 / norm } else { 1.0 };
    let pn2 = (norm * scale).powi(2);
    // b = Aᵀ p̃
    let mut b = vec![0.0f64; k];
    for (&id, &v) in doc.ids.iter().zip(&doc.vals) {
        if (id as usize) < m {
            let pv = v * scale;
            for (bj, &a) in b.iter_mut().zip(dict.a.row(id as usize).iter()) {
                *bj += pv * a;
            }
        }
    }
    let g = &dict.gram;
    let mut x = vec![0.0f64; k];
    let mut gx = vec![0.0f64; k];
    let mut sweeps = 0;
    while sweeps < params.max_sweeps {
        sweeps += 1;
        let mut moved = 0.0f64;
        for j in 0..k {
            let gjj = g[j * k + j];
            if gjj <= 0.0 {
                continue;
            }
            let grad = gx[j] - b[j] + params.lambda;
            let xn = (x[j] - grad / gjj).max(0.0);
            if xn != x[j] {
                let d = xn - x[j];
                x[j] = xn;
                for (o, &gv) in gx.iter_mut().zip(&g[j * k..(j + 1) * k]) {
                    *o += d * gv;
                }
                moved = moved.max(d.abs() * gjj.sqrt());
            }
        }
        if moved <= params.tol {
            break;
        }
    }
    // ‖p̃ − Ax‖² = ‖p̃‖² − 2 bᵀx + xᵀGx
    let bx: f64 = b.iter().zip(&x).map(|(a, b)| a * b).sum();
    let xgx: f64 = x.iter().zip(&gx).map(|(a, b)| a * b).sum();
    let l1: f64 = x.iter().sum();
    let res2 = (pn2 - 2.0 * bx + xgx).clamp(0.0, pn2);
    let (atoms, weights): (Vec<u32>, Vec<f64>) = x
        .iter()
        .enumerate()
        .filter(|(_, &v)| v > 0.0)
        .map(|(j, &v)| (j as u32, v))
        .unzip();
    L2Code {
        atoms,
        weights,
        objective: (0.5 * res2 + params.lambda * l1).min(0.5 * pn2),
        rel_residual: (res2 / pn2).sqrt(),
        sweeps,
    }
}

pub fn code_l2_batch(a: &Array2<f64>, docs: &[SparseDoc], params: &L2Params) -> Vec<L2Code> {
    let dict = L2Dict::new(a);
    docs.par_iter().map(|d| code_l2(&dict, d, params)).collect()
}

/// Projected-gradient A-step: `iters` steps on ½‖P̃ − A X‖_F² over 𝔸, warm-started at `a`.
pub fn l2_a_step(
    a: &mut Array2<f64>,
    docs: &[SparseDoc],
    codes: &[L2Code],
    unit_l2: bool,
    iters: u32,
) {
    let (m, k) = a.dim();
    // C = X Xᵀ, B = P̃ Xᵀ
    let mut c = vec![0.0f64; k * k];
    let mut bmat = vec![0.0f64; m * k];
    for (d, x) in docs.iter().zip(codes) {
        if x.atoms.is_empty() {
            continue;
        }
        for (&i, &vi) in x.atoms.iter().zip(&x.weights) {
            for (&j, &vj) in x.atoms.iter().zip(&x.weights) {
                c[i as usize * k + j as usize] += vi * vj;
            }
        }
        let scale = if unit_l2 {
            1.0 / d.vals.iter().map(|v| v * v).sum::<f64>().sqrt()
        } else {
            1.0
        };
        for (&t, &pv) in d.ids.iter().zip(&d.vals) {
            if (t as usize) < m {
                let row = &mut bmat[t as usize * k..(t as usize + 1) * k];
                for (&j, &vj) in x.atoms.iter().zip(&x.weights) {
                    row[j as usize] += pv * scale * vj;
                }
            }
        }
    }
    let lip = psi_max_dense(&c, k);
    if lip <= 0.0 || iters == 0 {
        project_l2(a);
        return;
    }
    let step = 1.0 / lip;
    for _ in 0..iters {
        let sl = a.as_slice_mut().expect("standard layout");
        sl.par_chunks_mut(k).zip(bmat.par_chunks(k)).for_each_init(
            || (Vec::<(usize, f64)>::new(), vec![0.0f64; k]),
            |(nz, grad), (row, brow)| {
                nz.clear();
                nz.extend(
                    row.iter()
                        .enumerate()
                        .filter(|(_, &v)| v != 0.0)
                        .map(|(j, &v)| (j, v)),
                );
                if nz.is_empty() && brow.iter().all(|&v| v == 0.0) {
                    return;
                }
                grad.iter_mut().zip(brow).for_each(|(g, &b)| *g = -b);
                for &(l, v) in nz.iter() {
                    for (g, &cv) in grad.iter_mut().zip(&c[l * k..(l + 1) * k]) {
                        *g += v * cv;
                    }
                }
                for (r, &g) in row.iter_mut().zip(grad.iter()) {
                    *r = (*r - step * g).max(0.0);
                }
            },
        );
        project_l2(a);
    }
}

/// Projection onto 𝔸: negatives clipped, columns with ℓ2 norm > 1 rescaled to 1.
pub fn project_l2(a: &mut Array2<f64>) {
    a.mapv_inplace(|v| v.max(0.0));
    let k = a.ncols();
    let mut sq = vec![0.0f64; k];
    for row in a.rows() {
        for (s, &v) in sq.iter_mut().zip(row) {
            *s += v * v;
        }
    }
    let scale: Vec<f64> = sq
        .iter()
        .map(|&s| if s > 1.0 { 1.0 / s.sqrt() } else { 1.0 })
        .collect();
    if scale.iter().any(|&s| s != 1.0) {
        for mut row in a.rows_mut() {
            for (v, &s) in row.iter_mut().zip(&scale) {
                *v *= s;
            }
        }
    }
}

/// Largest eigenvalue of a symmetric PSD k × k matrix by power iteration, inflated by 1 % and
/// capped by the trace (an upper bound).
fn psi_max_dense(c: &[f64], k: usize) -> f64 {
    let trace: f64 = (0..k).map(|i| c[i * k + i]).sum();
    if trace <= 0.0 {
        return 0.0;
    }
    let mut v = vec![1.0 / (k as f64).sqrt(); k];
    let mut est = 0.0;
    for _ in 0..300 {
        let w: Vec<f64> = (0..k)
            .map(|i| {
                c[i * k..(i + 1) * k]
                    .iter()
                    .zip(&v)
                    .map(|(a, b)| a * b)
                    .sum()
            })
            .collect();
        let new_est: f64 = w.iter().zip(&v).map(|(a, b)| a * b).sum();
        let norm = w.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm == 0.0 {
            break;
        }
        v = w.into_iter().map(|x| x / norm).collect();
        let done = (new_est - est).abs() <= 1e-9 * new_est.abs();
        est = new_est;
        if done {
            break;
        }
    }
    (est * 1.01).min(trace)
}

/// `k` atoms from seeded random non-empty documents, each rescaled to unit ℓ2 norm.
fn doc_atoms(docs: &[SparseDoc], m: usize, k: usize, seed: u64) -> Array2<f64> {
    let cand: Vec<usize> = (0..docs.len()).filter(|&j| !docs[j].is_empty()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let take = k.min(cand.len());
    let mut chosen: Vec<usize> = sample(&mut rng, cand.len(), take)
        .into_iter()
        .map(|i| cand[i])
        .collect();
    chosen.sort_unstable();
    let mut a = Array2::<f64>::zeros((m, k));
    for (c, &j) in chosen.iter().enumerate() {
        let d = &docs[j];
        let norm = d.vals.iter().map(|v| v * v).sum::<f64>().sqrt();
        for (&i, &v) in d.ids.iter().zip(&d.vals) {
            if (i as usize) < m {
                a[[i as usize, c]] = v / norm;
            }
        }
    }
    a
}

/// State of the ℓ2-batch baseline.
pub struct L2Batch {
    coding: L2Params,
    params: BatchParams,
    seed: u64,
    dict: Array2<f64>,
    codes: Vec<L2Code>,
}

impl L2Batch {
    /// Bootstrap on the first batch (its non-empty documents): k atoms from seeded random
    /// documents (the same documents as the ℓ1 bootstrap picks), then `alternations` rounds of
    /// (X-step, A-step) and a final X-step.
    pub fn bootstrap(
        docs: &[SparseDoc],
        m: usize,
        k: usize,
        coding: L2Params,
        params: BatchParams,
        seed: u64,
    ) -> (Self, LearnStats) {
        let mut dict = doc_atoms(docs, m, k, seed);
        let mut codes = code_l2_batch(&dict, docs, &coding);
        let mut stats = LearnStats {
            k,
            docs: docs.len(),
            ..Default::default()
        };
        for _ in 0..params.alternations {
            l2_a_step(&mut dict, docs, &codes, coding.unit_l2, params.a_step_iter);
            codes = code_l2_batch(&dict, docs, &coding);
            stats.alternations += 1;
        }
        stats.objective = mean(codes.iter().map(|c| c.objective));
        stats.coded_docs = codes.iter().filter(|c| !c.atoms.is_empty()).count();
        (
            L2Batch {
                coding,
                params,
                seed,
                dict,
                codes,
            },
            stats,
        )
    }

    pub fn k(&self) -> usize {
        self.dict.ncols()
    }

    pub fn dictionary(&self) -> &Array2<f64> {
        &self.dict
    }

    pub fn remap(&mut self, change: &VocabChange) {
        let (_, k) = self.dict.dim();
        let mut out = Array2::<f64>::zeros((change.remap.new_len, k));
        let old = change.remap.old_len.min(self.dict.nrows());
        for r in 0..old {
            if let Some(nr) = change.remap.get(r) {
                out.row_mut(nr).assign(&self.dict.row(r));
            }
        }
        self.dict = out;
    }

    pub fn detect(&self, docs: &[SparseDoc]) -> Vec<L2Code> {
        code_l2_batch(&self.dict, docs, &self.coding)
    }

    /// Re-learn on all documents so far (see [`super::l1batch::L1Batch::learn`]).
    pub fn learn(
        &mut self,
        seen: &[SparseDoc],
        new_codes: Vec<L2Code>,
        timestep: u64,
    ) -> LearnStats {
        let n_new = new_codes.len();
        self.codes.extend(new_codes);
        assert_eq!(self.codes.len(), seen.len(), "codes aligned with documents");
        let (m, k0) = self.dict.dim();
        let eta = self.params.eta;
        if eta > 0 {
            let batch = &seen[seen.len() - n_new..];
            let fresh = doc_atoms(batch, m, eta, growth_seed(self.seed, timestep));
            let mut out = Array2::<f64>::zeros((m, k0 + eta));
            out.slice_mut(ndarray::s![.., ..k0]).assign(&self.dict);
            out.slice_mut(ndarray::s![.., k0..]).assign(&fresh);
            self.dict = out;
        }
        let k = self.dict.ncols();
        let mut stats = LearnStats {
            k,
            docs: seen.len(),
            ..Default::default()
        };
        let mut prev = f64::INFINITY;
        for _ in 0..self.params.alternations.max(1) {
            l2_a_step(
                &mut self.dict,
                seen,
                &self.codes,
                self.coding.unit_l2,
                self.params.a_step_iter,
            );
            self.codes = code_l2_batch(&self.dict, seen, &self.coding);
            stats.alternations += 1;
            let obj = mean(self.codes.iter().map(|c| c.objective));
            stats.objective = obj;
            let done = prev.is_finite() && (prev - obj) <= self.params.tol * prev.abs();
            prev = obj;
            if done {
                break;
            }
        }
        stats.coded_docs = self.codes.iter().filter(|c| !c.atoms.is_empty()).count();
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(ids: &[u32], vals: &[f64]) -> SparseDoc {
        let s: f64 = vals.iter().sum();
        SparseDoc {
            ids: ids.to_vec(),
            vals: vals.iter().map(|v| v / s).collect(),
        }
    }

    /// Brute-force check of the coordinate-descent optimum on a tiny problem: no feasible
    /// perturbation lowers the objective.
    #[test]
    fn coordinate_descent_reaches_the_optimum() {
        let mut a = Array2::<f64>::zeros((4, 3));
        a[[0, 0]] = 0.8;
        a[[1, 0]] = 0.6;
        a[[1, 1]] = 1.0;
        a[[2, 2]] = 0.6;
        a[[3, 2]] = 0.8;
        let p = doc(&[0, 1, 2], &[3.0, 2.0, 1.0]);
        let params = L2Params {
            lambda: 0.05,
            unit_l2: true,
            tol: 1e-12,
            max_sweeps: 10_000,
        };
        let dict = L2Dict::new(&a);
        let c = code_l2(&dict, &p, &params);
        let norm = p.vals.iter().map(|v| v * v).sum::<f64>().sqrt();
        let obj = |x: &[f64]| {
            let mut r = [0.0; 4];
            for (&i, &v) in p.ids.iter().zip(&p.vals) {
                r[i as usize] = v / norm;
            }
            for (i, ri) in r.iter_mut().enumerate() {
                for (j, &xj) in x.iter().enumerate() {
                    *ri -= a[[i, j]] * xj;
                }
            }
            0.5 * r.iter().map(|v| v * v).sum::<f64>() + params.lambda * x.iter().sum::<f64>()
        };
        let mut x = [0.0; 3];
        for (&j, &w) in c.atoms.iter().zip(&c.weights) {
            x[j as usize] = w;
        }
        assert!((obj(&x) - c.objective).abs() < 1e-9);
        for j in 0..3 {
            for d in [-1e-4, 1e-4] {
                let mut y = x;
                y[j] = (y[j] + d).max(0.0);
                assert!(obj(&y) >= obj(&x) - 1e-12);
            }
        }
        assert!(c.rel_residual > 0.0 && c.rel_residual < 1.0);
    }

    #[test]
    fn a_step_stays_in_the_set_and_lowers_the_loss() {
        let docs = vec![
            doc(&[0, 1], &[1.0, 1.0]),
            doc(&[1, 2], &[1.0, 2.0]),
            doc(&[0, 3], &[2.0, 1.0]),
        ];
        let params = L2Params {
            lambda: 0.01,
            unit_l2: true,
            tol: 1e-10,
            max_sweeps: 1000,
        };
        let mut a = doc_atoms(&docs, 4, 2, 1);
        let codes = code_l2_batch(&a, &docs, &params);
        let before: f64 = codes.iter().map(|c| c.objective).sum();
        l2_a_step(&mut a, &docs, &codes, true, 50);
        for col in a.columns() {
            assert!(col.iter().all(|&v| v >= 0.0));
            assert!(col.iter().map(|v| v * v).sum::<f64>() <= 1.0 + 1e-12);
        }
        let after: f64 = code_l2_batch(&a, &docs, &params)
            .iter()
            .map(|c| c.objective)
            .sum();
        assert!(after <= before + 1e-12, "{after} > {before}");
    }
}
