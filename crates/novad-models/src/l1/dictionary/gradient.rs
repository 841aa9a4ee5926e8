//! Pass 1 of the OIADMM step: the live rows of Â_t and their gradient rows, before the
//! projection (see [`super::oiadmm_step`]).

use rayon::prelude::*;
use sprs::CsMat;

use super::project::{RowBlock, SparseRows};
use super::{Dictionary, Multiplier};

/// Live rows per block of pass 1.
const ROW_BLOCK: usize = 256;

/// Sparse accumulator over document positions: a dense buffer plus the list of touched slots,
/// reset in O(touched).
pub(super) struct Acc {
    pub(super) val: Vec<f64>,
    pub(super) mark: Vec<bool>,
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

/// (ÂX̂)_{i,·} for one row of Â given by its non-zero entries (atom, value), by atom: add each
/// weight times the row of X̂ (CSR, k × n) into `acc`, atom by atom. Cost
/// O(Σ_{k ∈ supp(row)} nnz(X̂_k,·)).
pub(super) fn row_times_codes(
    row: impl IntoIterator<Item = (u32, f32)>,
    xr: &CsMat<f64>,
    acc: &mut Acc,
) {
    for (kk, a) in row {
        let xrow = xr.outer_view(kk as usize).unwrap();
        for (j, &v) in xrow.iter() {
            acc.add(j as u32, a as f64 * v);
        }
    }
}

/// The non-zero entries (atom, value) of a row's stored entries, by atom.
pub(super) fn nonzeros(row: &[(u32, f32)]) -> impl Iterator<Item = (u32, f32)> + '_ {
    row.iter().filter(|e| e.1 != 0.0).copied()
}

/// The rows a step can change (see [`live_rows`]), ascending, with their non-zero entries in
/// Â_t: read in place from Â_t, but for a row that also stores a −0 (which a dictionary
/// made from a dense matrix keeps), whose non-zero entries are copied apart.
pub(super) struct Live<'a> {
    pub(super) rows: Vec<usize>,
    /// Â_t.
    a: &'a Dictionary,
    /// Per live row: [`IN_PLACE`], or its row in `cleaned`.
    own: Vec<u32>,
    cleaned: SparseRows<f32>,
}

/// A live row whose entries are Â_t's row as it is.
const IN_PLACE: u32 = u32::MAX;

impl<'a> Live<'a> {
    /// The non-zero entries of live row `c` (row `rows[c]` of Â_t), by atom.
    pub(super) fn a_row(&self, c: usize) -> &[(u32, f32)] {
        match self.own[c] {
            IN_PLACE => self.a.row(self.rows[c]),
            r => self.cleaned.row(r as usize),
        }
    }
}

/// The rows of a step on batch `p` (m × n CSR) from Â_t `a` with multiplier `delta` that can
/// change, ascending: non-zero in Â_t, or with a term of the batch, or with a multiplier. A
/// row that is none of these is zero before and after the step (and the projection:
/// max(0, 0 − θ) = 0). One pass over Â_t's rows (O(m + non-zeros)), in parallel by blocks of
/// rows, joined in row order; only rows that store a −0 are copied.
pub(super) fn live_rows<'a>(
    p: &CsMat<f64>,
    a: &'a Dictionary,
    delta: Option<&Multiplier>,
) -> Live<'a> {
    let m = p.rows();
    type Block = (Vec<usize>, Vec<u32>, RowBlock<f32>);
    let blocks: Vec<Block> = (0..m.div_ceil(SCAN_BLOCK))
        .into_par_iter()
        .map(|b| {
            let (mut rows, mut own, mut lens, mut ent) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for i in b * SCAN_BLOCK..((b + 1) * SCAN_BLOCK).min(m) {
                let row = a.row(i);
                let zeros = row.iter().any(|e| e.1 == 0.0);
                let nonzero = if zeros {
                    row.iter().any(|e| e.1 != 0.0)
                } else {
                    !row.is_empty()
                };
                if nonzero
                    || p.outer_view(i).is_some_and(|r| r.nnz() > 0)
                    || delta.is_some_and(|d| !d.row(i).is_empty())
                {
                    rows.push(i);
                    if zeros {
                        own.push(lens.len() as u32);
                        let before = ent.len();
                        ent.extend(nonzeros(row));
                        lens.push(ent.len() - before);
                    } else {
                        own.push(IN_PLACE);
                    }
                }
            }
            (rows, own, (lens, ent))
        })
        .collect();
    let mut at = 0u32;
    let (mut rows, mut own, mut cleaned) = (Vec::new(), Vec::new(), Vec::new());
    for (r, o, block) in blocks {
        rows.extend(r);
        own.extend(
            o.into_iter()
                .map(|c| if c == IN_PLACE { c } else { c + at }),
        );
        at += block.0.len() as u32;
        cleaned.push(block);
    }
    Live {
        rows,
        a,
        own,
        cleaned: SparseRows::from_blocks(cleaned),
    }
}

/// Append the entries of `out` above `floor` to `ent`, (atom, value) by atom.
fn keep_above(out: &[f64], floor: f64, ent: &mut Vec<(u32, f64)>) {
    ent.extend(
        out.iter()
            .enumerate()
            .filter(|(_, &v)| v > floor)
            .map(|(j, &v)| (j as u32, v)),
    );
}

/// Rows of Â per block of the live-row scan.
const SCAN_BLOCK: usize = 4096;

/// The inputs of pass 1 of a step: P (m × n CSR), Â_t (m × k by rows), Δ_t, X̂ (CSC and CSR).
pub(super) struct Inputs<'a> {
    pub(super) p: &'a CsMat<f64>,
    pub(super) a: &'a Dictionary,
    pub(super) delta: Option<&'a Multiplier>,
    pub(super) x: &'a CsMat<f64>,
    pub(super) xr: &'a CsMat<f64>,
}

impl Inputs<'_> {
    fn a_row(&self, i: usize) -> &[(u32, f32)] {
        self.a.row(i)
    }
    /// `out` set to row `i` of Â_t as a dense row (every other entry 0).
    fn dense_row(&self, i: usize, out: &mut [f64]) {
        out.fill(0.0);
        for &(j, v) in self.a_row(i) {
            out[j as usize] = v as f64;
        }
    }
    fn d_row(&self, i: usize) -> &[(u32, f32)] {
        match self.delta {
            Some(d) => d.row(i),
            None => &[],
        }
    }

    /// Pass 1 of the step on the live rows: Â' = max(0, Â − τ G) with G = −W X̂ᵀ,
    /// W = Δ/β + Γ̃ − Γ = clip(Γ̃ + Δ/β, ±1/β), Γ̃ = P − Â X̂. Only documents with a non-zero
    /// code contribute, and W_ij ≠ 0 needs P_ij ≠ 0, Δ_ij ≠ 0 or (ÂX̂)_ij ≠ 0. Each row is
    /// returned sparse: its positive entries (atom, value), by atom — the clip at 0 of the
    /// projection, which is all it does to a column whose sum stays ≤ 1.
    ///
    /// A row is computed one of two ways: through the Gram matrix X̂X̂ᵀ ([`Self::gram_row`])
    /// when no entry of its W can be clipped away from the batch's terms and k ≤
    /// [`GRAM_MAX_K`], otherwise document by document ([`Self::exact_row`]). Both are
    /// deterministic functions of the row and the batch.
    ///
    /// `idx` picks the live rows computed (positions in `live`, in the order wanted) and
    /// `gram` is [`Gram::for_codes`] of the batch's codes: a row's result does not depend on
    /// which other rows are computed with it.
    pub(super) fn gradient_rows(
        &self,
        beta: f64,
        tau: f64,
        live: &Live<'_>,
        gram: Option<&Gram>,
        idx: &[usize],
    ) -> SparseRows {
        let (k, n) = (self.a.ncols(), self.p.cols());
        // blocks of rows, each into one buffer (few allocations), joined in row order
        let blocks: Vec<RowBlock<f64>> = idx
            .par_chunks(ROW_BLOCK)
            .map_init(
                || (Acc::new(n), Acc::new(n), vec![0.0f64; k], vec![0.0f32; k]),
                |(ax, gt, out, dense), block| {
                    let (mut lens, mut ent) = (Vec::with_capacity(block.len()), Vec::new());
                    for &c in block {
                        let before = ent.len();
                        let (i, a_row) = (live.rows[c], live.a_row(c));
                        let row = Row {
                            i,
                            a: a_row,
                            beta,
                            tau,
                        };
                        if let Some(gram) = gram.filter(|g| g.unclipped(a_row, beta)) {
                            self.gram_row(&row, gram, (gt, out, dense), &mut ent);
                        } else {
                            self.exact_row(&row, (ax, gt, out), &mut ent);
                        }
                        lens.push(ent.len() - before);
                    }
                    (lens, ent)
                },
            )
            .collect();
        SparseRows::from_blocks(blocks)
    }

    /// Row `i` of pass 1 document by document: every entry is summed in a fixed order (Â_t's
    /// value, then the documents in the order they were touched), the sums of the earlier
    /// dense-row code bit for bit. Its positive entries are appended to `ent`.
    fn exact_row(
        &self,
        row: &Row<'_>,
        (ax, gt, out): (&mut Acc, &mut Acc, &mut [f64]),
        ent: &mut Vec<(u32, f64)>,
    ) {
        let (beta, tau) = (row.beta, row.tau);
        self.dense_row(row.i, out);
        row_times_codes(row.a.iter().copied(), self.xr, ax);
        // gt accumulates Γ̃ + Δ/β on the candidate positions
        for &j in &ax.touched {
            gt.add(j, -ax.val[j as usize]);
        }
        self.add_terms(row, gt);
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
        keep_above(out, 0.0, ent);
    }

    /// P_ij + Δ_ij/β into `gt` on the row's explicit positions (its terms and multipliers).
    fn add_terms(&self, row: &Row<'_>, gt: &mut Acc) {
        for (j, &v) in self.p.outer_view(row.i).unwrap().iter() {
            gt.add(j as u32, v);
        }
        for &(j, d) in self.d_row(row.i) {
            gt.add(j, d as f64 / row.beta);
        }
    }

    /// Row `i` of pass 1 through the Gram matrix, for a row whose (ÂX̂)_ij stay ≤ 1/β
    /// ([`Gram::unclipped`]). Off the row's explicit positions S (P_ij ≠ 0 or Δ_ij ≠ 0),
    /// W_ij = −(ÂX̂)_ij exactly, so
    ///
    /// Σ_j W_ij x_j = −Â_i X̂X̂ᵀ + Σ_{j ∈ S} ((ÂX̂)_ij + W_ij) x_j,
    ///
    /// O(nnz(Â_i)·k + |S|·nnz(code)) where the document-by-document sum is
    /// O(Σ_{atoms of Â_i} uses of the atom · nnz(code)). Equal to [`Self::exact_row`] up to
    /// rounding, except that values ≤ [`CANCEL`] are taken as 0 (where the exact row may keep
    /// a positive entry that small).
    fn gram_row(
        &self,
        row: &Row<'_>,
        gram: &Gram,
        (gt, out, dense): (&mut Acc, &mut [f64], &mut [f32]),
        ent: &mut Vec<(u32, f64)>,
    ) {
        let (k, beta, tau) = (self.a.ncols(), row.beta, row.tau);
        // `dense` is +0.0 everywhere on entry and again on return: only the row's entries
        // are written and cleared
        for &(j, v) in self.a_row(row.i) {
            dense[j as usize] = v;
        }
        self.dense_row(row.i, out);
        for &(kk, v) in row.a {
            let s = tau * v as f64;
            let c = &gram.c[kk as usize * k..(kk as usize + 1) * k];
            for (o, &cv) in out.iter_mut().zip(c) {
                *o -= s * cv;
            }
        }
        self.add_terms(row, gt);
        for &j in &gt.touched {
            let code = self.x.outer_view(j as usize).unwrap();
            if code.nnz() == 0 {
                continue;
            }
            let ax: f64 = code.iter().map(|(kk, &v)| dense[kk] as f64 * v).sum();
            let w = (gt.val[j as usize] - ax).clamp(-1.0 / beta, 1.0 / beta);
            let corr = ax + w;
            if corr != 0.0 {
                for (kk, &v) in code.iter() {
                    out[kk] += tau * corr * v;
                }
            }
        }
        gt.clear();
        for &(j, _) in self.a_row(row.i) {
            dense[j as usize] = 0.0;
        }
        keep_above(out, CANCEL, ent);
    }
}

/// One live row of pass 1: its index, its non-zero entries in Â_t, and the step's β and τ.
struct Row<'a> {
    i: usize,
    a: &'a [(u32, f32)],
    beta: f64,
    tau: f64,
}

/// Entries of a row computed through the Gram matrix that are at most this are 0: the
/// rounding of the identity there (sums of products ≤ 1, so errors ~1e-16) is far below it,
/// and so is anything an f32 Â could tell from 0 in a column of ℓ1 norm ≤ 1 that matters.
const CANCEL: f64 = 1e-12;

/// The largest k for which pass 1 builds the Gram matrix (k² f64: 8 MiB at this size); a larger
/// dictionary sums every row document by document.
const GRAM_MAX_K: usize = 1024;

/// The batch's codes as pass 1's Gram path needs them: C = X̂X̂ᵀ (k × k, row-major, summed
/// document by document in batch order; O(Σ_j nnz(x_j)²)) and the largest |weight| of each
/// atom over the codes.
pub(super) struct Gram {
    c: Vec<f64>,
    xmax: Vec<f64>,
}

impl Gram {
    /// The Gram matrix pass 1 uses for codes `x` (k × n CSC) of k atoms: `None` above
    /// [`GRAM_MAX_K`].
    pub(super) fn for_codes(x: &CsMat<f64>, k: usize) -> Option<Gram> {
        (k <= GRAM_MAX_K).then(|| Gram::new(x, k))
    }

    fn new(x: &CsMat<f64>, k: usize) -> Gram {
        let (mut c, mut xmax) = (vec![0.0f64; k * k], vec![0.0f64; k]);
        for code in x.outer_iterator() {
            for (a, &va) in code.iter() {
                xmax[a] = xmax[a].max(va.abs());
                for (b, &vb) in code.iter() {
                    c[a * k + b] += va * vb;
                }
            }
        }
        Gram { c, xmax }
    }

    /// True when |(ÂX̂)_ij| ≤ Σ_k |Â_ik| max_j |x_kj| stays below 1/β for every document j,
    /// so the clip of W at ±1/β never acts off the row's terms (whatever the signs; in the
    /// model Â and the codes are ≥ 0).
    fn unclipped(&self, a_row: &[(u32, f32)], beta: f64) -> bool {
        let bound: f64 = a_row
            .iter()
            .map(|&(kk, v)| (v as f64).abs() * self.xmax[kk as usize])
            .sum();
        bound < (1.0 / beta) * (1.0 - 1e-9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;
    use rand::{Rng, SeedableRng};
    use sprs::TriMat;

    /// A row as a dense vector of length k.
    fn dense(row: &[(u32, f64)], k: usize) -> Vec<f64> {
        let mut v = vec![0.0; k];
        for &(j, x) in row {
            v[j as usize] = x;
        }
        v
    }

    /// The live rows are exactly the rows non-zero in Â_t, with a term of the batch or with a
    /// multiplier, each with Â_t's non-zero entries by atom: rows storing a −0 among their
    /// values (copied apart) and rows read in place alike, over several scan blocks.
    #[test]
    fn live_rows_are_the_changeable_rows_with_their_nonzero_entries() {
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let (m, k, n) = (3 * SCAN_BLOCK + 17, 6, 5);
        let mut a = Array2::<f32>::zeros((m, k));
        for i in 0..m {
            for j in 0..k {
                a[[i, j]] = match (i % 7, r.random_range(0..4)) {
                    // rows of −0 alone, rows mixing −0 with values, rows of values
                    (0, _) => -0.0,
                    (1, 0) => -0.0,
                    (1..=3, 1) => r.random::<f32>() + 0.01,
                    _ => 0.0,
                };
            }
        }
        let mut p = TriMat::new((m, n));
        let mut d = Array2::<f32>::zeros((m, n));
        for i in (0..m).filter(|i| i % 11 == 0) {
            p.add_triplet(i, i % n, 0.5);
        }
        for i in (0..m).filter(|i| i % 13 == 0) {
            d[[i, i % n]] = 0.25;
        }
        let (p, d): (CsMat<f64>, _) = (p.to_csr(), Multiplier::from_dense(&d));
        let dict = Dictionary::from_dense(a.view());
        let live = live_rows(&p, &dict, Some(&d));
        let want: Vec<usize> = (0..m)
            .filter(|&i| a.row(i).iter().any(|&v| v != 0.0) || i % 11 == 0 || i % 13 == 0)
            .collect();
        assert_eq!(live.rows, want);
        let (mut copied, mut in_place) = (0, 0);
        for (c, &i) in live.rows.iter().enumerate() {
            let nonzero: Vec<(u32, f32)> = (0..k)
                .filter(|&j| a[[i, j]] != 0.0)
                .map(|j| (j as u32, a[[i, j]]))
                .collect();
            assert_eq!(live.a_row(c), &nonzero[..], "row {i}");
            match live.own[c] {
                IN_PLACE => in_place += 1,
                _ => copied += 1,
            }
        }
        assert!(
            copied > 0 && in_place > 0,
            "{copied} copied, {in_place} in place"
        );
    }

    /// The Gram path agrees with the document-by-document sums on every row it is used for
    /// (within 1e-12), and both paths occur: most rows of small entries, a few heavy rows
    /// that can clip, with and without a multiplier.
    #[test]
    fn gram_rows_equal_the_exact_rows() {
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let (m, k, n, beta, tau) = (80, 12, 40, 5.0, 0.3);
        let (mut gram_rows, mut exact_rows) = (0, 0);
        for case in 0..6 {
            let mut a = Array2::<f32>::zeros((m, k));
            for i in 0..m {
                let scale = if i % 17 == 0 { 0.6 } else { 0.04 };
                for j in 0..k {
                    if r.random::<f64>() < 0.25 {
                        a[[i, j]] = r.random::<f32>() * scale;
                    }
                }
            }
            let mut p = TriMat::new((m, n));
            let mut x = TriMat::new((k, n));
            for j in 0..n {
                for _ in 0..6 {
                    p.add_triplet(r.random_range(0..m), j, r.random::<f64>() * 0.3);
                }
                if j % 5 != 0 {
                    let mut atoms: Vec<usize> = (0..3).map(|_| r.random_range(0..k)).collect();
                    atoms.sort_unstable();
                    atoms.dedup();
                    for kk in atoms {
                        x.add_triplet(kk, j, 0.1 + r.random::<f64>() * 1.4);
                    }
                }
            }
            let (p, x): (CsMat<f64>, CsMat<f64>) = (p.to_csr(), x.to_csc());
            let xr = x.to_csr();
            let d = Array2::<f32>::from_shape_fn((m, n), |_| {
                if r.random::<f64>() < 0.05 {
                    (r.random::<f32>() - 0.5) * 3.0
                } else {
                    0.0
                }
            });
            let d = Multiplier::from_dense(&d);
            let a = Dictionary::from_dense(a.view());
            let inputs = Inputs {
                p: &p,
                a: &a,
                delta: (case % 2 == 1).then_some(&d),
                x: &x,
                xr: &xr,
            };
            let live = live_rows(&p, &a, inputs.delta);
            let gram = Gram::new(&x, k);
            let (mut ax, mut gt) = (Acc::new(n), Acc::new(n));
            let (mut out, mut scratch) = (vec![0.0; k], vec![0.0f32; k]);
            for c in 0..live.rows.len() {
                let row = Row {
                    i: live.rows[c],
                    a: live.a_row(c),
                    beta,
                    tau,
                };
                let (mut e, mut g) = (Vec::new(), Vec::new());
                inputs.exact_row(&row, (&mut ax, &mut gt, &mut out), &mut e);
                if !gram.unclipped(row.a, beta) {
                    exact_rows += 1;
                    continue;
                }
                gram_rows += 1;
                inputs.gram_row(&row, &gram, (&mut gt, &mut out, &mut scratch), &mut g);
                for (u, v) in dense(&e, k).iter().zip(dense(&g, k)) {
                    assert!(
                        (u - v).abs() <= 1e-12,
                        "case {case} row {}: {u} vs {v}",
                        row.i
                    );
                }
            }
        }
        assert!(
            gram_rows > 200 && exact_rows > 10,
            "{gram_rows} / {exact_rows}"
        );
    }
}
