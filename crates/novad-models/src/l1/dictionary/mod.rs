//! The dictionary Â ∈ 𝒜 = {A ≥ 0, ‖A_j‖₁ ≤ 1 for every column j}: projection onto 𝒜, the
//! online OIADMM update (Algorithm 2), the batch A-step (Algorithm 6) and the bootstrap.
//!
//! Layout: the model's Â is a [`Dictionary`], held by rows (one per vocabulary term, its
//! stored entries by atom, `f32`): O(m + non-zeros) for every whole-matrix step (see
//! `rows.rs`). The batch algorithms (bootstrap, A-step, projection of a dense matrix) work on
//! `ndarray` `m × k` matrices in standard (row-major) layout. All updates are computed in
//! `f64` row by row (rows are independent, so rayon parallelism over rows is deterministic)
//! and rounded to `f32` once.

mod ball;
mod bootstrap;
mod gradient;
pub mod image;
mod multiplier;
mod oiadmm;
mod project;
mod refresh;
mod rows;

pub use crate::shard::{
    by_position, deal, deal_after, per_shard, shard_docs, shard_of, ShardGap, LOGICAL_SHARDS,
};
pub use ball::{add_sums, column_sums, ColumnSum, Thresholds};
pub use bootstrap::{a_step, bootstrap, init_atoms, AtomInit, BootstrapParams};
pub use multiplier::Multiplier;
pub use oiadmm::{
    oiadmm_step, project_here, GradientRows, OiadmmParams, Projected, ProjectedRows, UpdateJob,
    WHOLE,
};
pub use project::{project_columns, project_nonneg_l1_ball, SparseRows};
pub use refresh::{plan_refresh, RefreshParams, RefreshPlan};
pub use rows::Dictionary;

use std::mem::MaybeUninit;

use ndarray::Array2;
use rayon::prelude::*;
use sprs::{CsMat, TriMat};

use crate::model::Code;
use crate::text::{Remap, SparseDoc};

/// True when every entry is finite and ≥ 0 and every column has ℓ1 norm ≤ 1 + `tol`.
pub fn in_dictionary_set(a: &Array2<f32>, tol: f64) -> bool {
    if a.iter().any(|v| !v.is_finite() || *v < 0.0) {
        return false;
    }
    let mut sums = vec![0.0f64; a.ncols()];
    for row in a.rows() {
        for (s, &v) in sums.iter_mut().zip(row) {
            *s += v as f64;
        }
    }
    sums.iter().all(|&s| s <= 1.0 + tol)
}

/// Apply a vocabulary change to a term-indexed matrix: rows move per `remap`, evicted rows are
/// dropped, rows of new terms are zero. The result has `remap.new_len` rows.
pub fn remap_rows(a: &Array2<f32>, remap: &Remap) -> Array2<f32> {
    let cols = a.ncols();
    let a = a.as_standard_layout();
    let src = a.as_slice().expect("standard layout");
    // the old row of every new row (u32::MAX: a new term, zero)
    let mut from = vec![u32::MAX; remap.new_len];
    for r in 0..remap.old_len.min(a.nrows()) {
        if let Some(nr) = remap.get(r) {
            from[nr] = r as u32;
        }
    }
    // Every row of the new matrix is written once, in parallel (copied, or zero for a new
    // term): no serial zeroing pass first, and its pages are first touched on every core.
    let mut out = Array2::<f32>::uninit((remap.new_len, cols));
    if cols > 0 {
        out.as_slice_mut()
            .expect("standard layout")
            .par_chunks_mut(cols)
            .zip(from.par_iter())
            .for_each(|(row, &r)| {
                if r == u32::MAX {
                    row.fill(MaybeUninit::new(0.0));
                } else {
                    let r = r as usize;
                    for (o, &v) in row.iter_mut().zip(&src[r * cols..(r + 1) * cols]) {
                        *o = MaybeUninit::new(v);
                    }
                }
            });
    }
    // SAFETY: every row was written above (or there are no entries)
    unsafe { out.assume_init() }
}

/// Resize Δ to `n` columns: keep the first min(n_prev, n) columns, zero-pad the rest (SPEC §4.3).
pub fn resize_cols(a: &Array2<f32>, n: usize) -> Array2<f32> {
    let keep = a.ncols().min(n);
    let mut out = Array2::<f32>::zeros((a.nrows(), n));
    if keep > 0 {
        out.slice_mut(ndarray::s![.., ..keep])
            .assign(&a.slice(ndarray::s![.., ..keep]));
    }
    out
}

/// The batch as an `m × n` CSR matrix (rows = terms, columns = documents). Every id must be
/// `< m`. Documents with strictly increasing ids (as [`SparseDoc`]s are built) are placed by
/// a counting sort over rows, O(m + non-zeros): documents are visited in order, so each row's
/// columns come out ascending. Any other document (ids repeated or out of order, or not one
/// value per id) sends the batch through sprs's triplet conversion, which sums repeated
/// entries; both give the same matrix.
pub fn docs_to_csr(docs: &[SparseDoc], m: usize) -> CsMat<f64> {
    let increasing = docs
        .iter()
        .all(|d| d.ids.len() == d.vals.len() && d.ids.windows(2).all(|w| w[0] < w[1]));
    if !increasing {
        return triplets_to_csr(docs, m);
    }
    let mut indptr = vec![0usize; m + 1];
    for d in docs {
        for &i in &d.ids {
            indptr[i as usize + 1] += 1;
        }
    }
    for i in 0..m {
        indptr[i + 1] += indptr[i];
    }
    let nnz = indptr[m];
    let mut next = indptr[..m].to_vec();
    let (mut indices, mut data) = (vec![0usize; nnz], vec![0.0f64; nnz]);
    for (j, d) in docs.iter().enumerate() {
        for (&i, &v) in d.ids.iter().zip(&d.vals) {
            let at = &mut next[i as usize];
            indices[*at] = j;
            data[*at] = v;
            *at += 1;
        }
    }
    CsMat::new((m, docs.len()), indptr, indices, data)
}

/// [`docs_to_csr`] through sprs's triplets (repeated entries summed).
fn triplets_to_csr(docs: &[SparseDoc], m: usize) -> CsMat<f64> {
    let nnz = docs.iter().map(|d| d.nnz()).sum();
    let mut t = TriMat::with_capacity((m, docs.len()), nnz);
    for (j, d) in docs.iter().enumerate() {
        for (&i, &v) in d.ids.iter().zip(&d.vals) {
            t.add_triplet(i as usize, j, v);
        }
    }
    t.to_csr()
}

/// The codes of a batch as a `k × n` CSC matrix (one column per document).
pub fn codes_to_csc(codes: &[Code], k: usize) -> CsMat<f64> {
    let mut indptr = Vec::with_capacity(codes.len() + 1);
    let mut indices = Vec::new();
    let mut data = Vec::new();
    indptr.push(0);
    for c in codes {
        for (&a, &w) in c.atoms.iter().zip(&c.weights) {
            indices.push(a as usize);
            data.push(w);
        }
        indptr.push(indices.len());
    }
    CsMat::new_csc((k, codes.len()), indptr, indices, data)
}

/// Per document j, the (atom, weight) pairs of its code: documents with an all-zero code are
/// skipped. Sorted by document.
pub(crate) fn coded_columns(x: &CsMat<f64>) -> Vec<(usize, Vec<(usize, f64)>)> {
    x.outer_iterator()
        .enumerate()
        .filter(|(_, c)| c.nnz() > 0)
        .map(|(j, c)| (j, c.iter().map(|(i, &v)| (i, v)).collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The counting sort gives sprs's triplet conversion bit for bit (structure and values),
    /// with empty documents, unused rows and a batch of no documents; a document with a
    /// repeated id is summed as the triplets sum it.
    #[test]
    fn the_batch_matrix_equals_the_triplet_conversion() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for (n, m) in [(0, 5), (3, 0), (1, 1), (40, 300), (200, 50)] {
            let docs: Vec<SparseDoc> = (0..n)
                .map(|_| {
                    let ids: Vec<u32> = (0..m as u32).filter(|_| rng.random_bool(0.1)).collect();
                    let vals = ids.iter().map(|_| rng.random_range(0.01..1.0)).collect();
                    SparseDoc { ids, vals }
                })
                .collect();
            let (got, want) = (docs_to_csr(&docs, m), triplets_to_csr(&docs, m));
            assert_eq!(got.shape(), want.shape());
            assert_eq!(got.indptr().raw_storage(), want.indptr().raw_storage());
            assert_eq!(got.indices(), want.indices());
            let bits = |x: &CsMat<f64>| x.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "n = {n}, m = {m}");
            assert!(got.is_csr());
        }
        let twice = SparseDoc {
            ids: vec![3, 1, 3],
            vals: vec![0.25, 0.5, 0.125],
        };
        let x = docs_to_csr(&[twice], 4);
        assert_eq!(x.get(3, 0), Some(&0.375));
        assert_eq!(x.get(1, 0), Some(&0.5));
        assert_eq!(x.nnz(), 2);
    }
}
