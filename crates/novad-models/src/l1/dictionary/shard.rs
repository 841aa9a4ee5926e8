//! Logical shards of a batch.
//!
//! The documents of a batch are split into [`LOGICAL_SHARDS`] fixed logical shards: document
//! `j` (its position in the batch) belongs to shard `j % LOGICAL_SHARDS`, and inside a shard
//! documents keep their batch order. Coding is per document, so a shard can be coded anywhere
//! ([`crate::l1::replicate`]). The OIADMM update needs, per dictionary row i, the sum
//! G_i = Σ_j w_ij x_·j over the batch (W = clip(P − ÂX̂ + Δ/β, ±1/β)); w_ij needs only row i of
//! Â and document j's columns of P, Δ and X̂, so G_i is a sum of per-shard parts, and
//! [`super::oiadmm_step`] adds them in shard order, each over its documents in batch order.
//! The floating-point result is defined by the number of logical shards only — not by rayon's
//! thread count, nor by how many processes code the shards.

/// The fixed number of logical shards a batch is split into (see the module docs): also the
/// most workers that can share the coding of a batch.
pub const LOGICAL_SHARDS: usize = 64;

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
    /// True when slot `j` was touched since the last clear.
    #[inline]
    pub(super) fn is_marked(&self, j: usize) -> bool {
        self.mark[j]
    }
    pub(super) fn clear(&mut self) {
        for &j in &self.touched {
            self.val[j as usize] = 0.0;
            self.mark[j as usize] = false;
        }
        self.touched.clear();
    }
}
