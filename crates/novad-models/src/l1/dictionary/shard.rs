//! Logical shards of a batch and each shard's share of the OIADMM sum.
//!
//! The documents of a batch are split into [`LOGICAL_SHARDS`] fixed logical shards: document
//! `j` (its position in the batch) belongs to shard `j % LOGICAL_SHARDS`, and inside a shard
//! documents keep their batch order. The OIADMM update needs, per dictionary row i, the sum
//! G_i = Σ_j w_ij x_·j over the batch (W = clip(P − ÂX̂ + Δ/β, ±1/β)); w_ij needs only row i of
//! Â, document j's column of P and Δ and document j's code, so each shard's part G_s is
//! computed from that shard alone ([`shard_sum`]), and the update adds the parts in shard
//! order ([`super::oiadmm_step_sharded`]). The floating-point result therefore depends on the
//! number of logical shards only — not on rayon's thread count, nor on how many processes
//! share the shards.

use ndarray::Array2;
use serde::{Deserialize, Serialize};
use sprs::{CsMat, TriMat};

use super::Multiplier;
use crate::model::Code;
use crate::text::SparseDoc;

/// The fixed number of logical shards a batch is split into (see the module docs).
pub const LOGICAL_SHARDS: usize = 16;

/// The logical shard of the document at position `j` of a batch.
pub fn shard_of(j: usize) -> usize {
    j % LOGICAL_SHARDS
}

/// Positions (in batch order) of the documents of shard `s` in a batch of `n` documents.
pub fn shard_docs(n: usize, s: usize) -> impl Iterator<Item = usize> {
    (s..n).step_by(LOGICAL_SHARDS)
}

/// Sparse accumulator over `0..n`: a dense buffer plus the list of touched slots, reset in
/// O(touched).
pub(super) struct Acc {
    pub(super) val: Vec<f64>,
    mark: Vec<bool>,
    pub(super) touched: Vec<u32>,
}

impl Acc {
    pub(super) fn new(n: usize) -> Self {
        Acc {
            val: vec![0.0; n],
            mark: vec![false; n],
            touched: Vec::new(),
        }
    }
    #[inline]
    pub(super) fn add(&mut self, j: u32, v: f64) {
        let ju = j as usize;
        if !self.mark[ju] {
            self.mark[ju] = true;
            self.touched.push(j);
        }
        self.val[ju] += v;
    }
    pub(super) fn clear(&mut self) {
        for &j in &self.touched {
            self.val[j as usize] = 0.0;
            self.mark[j as usize] = false;
        }
        self.touched.clear();
    }
}

/// One logical shard's part G_s = Σ_{j ∈ s} w_ij x_·j of the OIADMM sum (m × k), sparse by
/// rows: only rows with a contribution are present, each with the atoms it touched.
///
/// Invariants (checked by [`ShardSum::check`]): `rows` increasing and `< m`,
/// `indptr.len() == rows.len() + 1`, atoms `< k`, values finite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardSum {
    /// The logical shard, `< LOGICAL_SHARDS`.
    pub shard: u32,
    rows: Vec<u32>,
    indptr: Vec<u32>,
    atoms: Vec<u32>,
    vals: Vec<f64>,
}

impl ShardSum {
    /// Stored entries.
    pub fn nnz(&self) -> usize {
        self.vals.len()
    }

    /// The rows present, increasing, each with its (atom, value) entries.
    pub fn iter_rows(&self) -> impl Iterator<Item = (usize, &[u32], &[f64])> + '_ {
        self.rows.iter().enumerate().map(move |(r, &i)| {
            let (a, b) = (self.indptr[r] as usize, self.indptr[r + 1] as usize);
            (i as usize, &self.atoms[a..b], &self.vals[a..b])
        })
    }

    /// True when the structure fits an m × k dictionary and every value is finite (a sum
    /// received from another process is checked before it is used).
    pub fn check(&self, m: usize, k: usize) -> bool {
        (self.shard as usize) < LOGICAL_SHARDS
            && self.indptr.len() == self.rows.len() + 1
            && self.indptr.first() == Some(&0)
            && self.indptr.windows(2).all(|w| w[0] <= w[1])
            && self.indptr.last().map(|&e| e as usize) == Some(self.atoms.len())
            && self.atoms.len() == self.vals.len()
            && self.rows.windows(2).all(|w| w[0] < w[1])
            && self.rows.iter().all(|&i| (i as usize) < m)
            && self.atoms.iter().all(|&a| (a as usize) < k)
            && self.vals.iter().all(|v| v.is_finite())
    }
}

/// The rows of Â as (atom, weight) lists of their non-zeros: built once per step, shared by
/// every shard's sum.
pub struct DictRows {
    indptr: Vec<usize>,
    entries: Vec<(u32, f64)>,
}

impl DictRows {
    pub fn new(a: &Array2<f32>) -> DictRows {
        let mut indptr = Vec::with_capacity(a.nrows() + 1);
        let mut entries = Vec::new();
        indptr.push(0);
        for row in a.rows() {
            for (kk, &v) in row.iter().enumerate() {
                if v != 0.0 {
                    entries.push((kk as u32, v as f64));
                }
            }
            indptr.push(entries.len());
        }
        DictRows { indptr, entries }
    }
    fn row(&self, i: usize) -> &[(u32, f64)] {
        &self.entries[self.indptr[i]..self.indptr[i + 1]]
    }
    fn nrows(&self) -> usize {
        self.indptr.len() - 1
    }
}

/// The part of shard `s` of the OIADMM sum: G_s[i, ·] = Σ_j w_ij x_·j over the documents j of
/// shard `s` in batch order, w_ij = clip((P − ÂX̂)_ij + Δ_ij/β, ±1/β); documents with an
/// all-zero code contribute nothing.
///
/// `docs` is the whole batch (P by columns); `codes[l]` is the code of the shard's l-th
/// document (position `s + l · LOGICAL_SHARDS`); `delta` is Δ_t resized to the batch, or
/// `None` for Δ = 0. The result is a function of these values only (sequential, fixed order).
pub fn shard_sum(
    s: usize,
    docs: &[SparseDoc],
    a: &DictRows,
    delta: Option<&Multiplier>,
    codes: &[Code],
    k: usize,
    beta: f64,
) -> ShardSum {
    let m = a.nrows();
    let n = docs.len();
    let local: Vec<usize> = shard_docs(n, s).collect();
    assert_eq!(
        local.len(),
        codes.len(),
        "one code per document of the shard"
    );
    let ns = local.len();
    // P_s (m × n_s, CSR) and X̂_s (k × n_s, CSR: by atom) with local document indices
    let mut pt = TriMat::new((m, ns));
    let mut xt = TriMat::new((k, ns));
    for (l, &j) in local.iter().enumerate() {
        for (&i, &v) in docs[j].ids.iter().zip(&docs[j].vals) {
            pt.add_triplet(i as usize, l, v);
        }
        for (&kk, &w) in codes[l].atoms.iter().zip(&codes[l].weights) {
            xt.add_triplet(kk as usize, l, w);
        }
    }
    let ps: CsMat<f64> = pt.to_csr();
    let xs: CsMat<f64> = xt.to_csr();
    let mut out = ShardSum {
        shard: s as u32,
        rows: Vec::new(),
        indptr: vec![0],
        atoms: Vec::new(),
        vals: Vec::new(),
    };
    let (mut ax, mut gt, mut racc) = (Acc::new(ns), Acc::new(ns), Acc::new(k));
    for i in 0..m {
        // (ÂX̂_s)_i· from the atoms of row i
        for &(kk, av) in a.row(i) {
            if let Some(xrow) = xs.outer_view(kk as usize) {
                for (l, &v) in xrow.iter() {
                    ax.add(l as u32, av * v);
                }
            }
        }
        for &l in &ax.touched {
            gt.add(l, -ax.val[l as usize]);
        }
        for (l, &v) in ps.outer_view(i).unwrap().iter() {
            gt.add(l as u32, v);
        }
        if let Some(d) = delta {
            for &(j, dv) in d.row(i) {
                let j = j as usize;
                if shard_of(j) == s {
                    gt.add((j / LOGICAL_SHARDS) as u32, dv as f64 / beta);
                }
            }
        }
        for &l in &gt.touched {
            let c = &codes[l as usize];
            if c.atoms.is_empty() {
                continue;
            }
            let w = gt.val[l as usize].clamp(-1.0 / beta, 1.0 / beta);
            if w != 0.0 {
                for (&kk, &v) in c.atoms.iter().zip(&c.weights) {
                    racc.add(kk, w * v);
                }
            }
        }
        if !racc.touched.is_empty() {
            out.rows.push(i as u32);
            for &kk in &racc.touched {
                out.atoms.push(kk);
                out.vals.push(racc.val[kk as usize]);
            }
            out.indptr.push(out.atoms.len() as u32);
        }
        ax.clear();
        gt.clear();
        racc.clear();
    }
    out
}
