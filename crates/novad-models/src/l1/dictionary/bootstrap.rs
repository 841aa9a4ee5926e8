use ndarray::Array2;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sprs::CsMat;

use super::{coded_columns, codes_to_csc, docs_to_csr, project_columns};
use crate::l1::coding::{code_batch, CodingDict, CodingParams};
use crate::linalg::{heaviest_first, psi_max_codes, soft};
use crate::text::SparseDoc;

/// How the k initial atoms are chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AtomInit {
    /// k distinct documents drawn at random (seeded) — the paper's choice.
    RandomDocuments,
    /// Spherical k-means on the documents (seeded k-means from random documents), each centroid
    /// cut to its `top_terms` largest entries and scaled to unit ℓ1 norm.
    KMeans { top_terms: usize, iterations: u32 },
    /// Farthest-first traversal: a random first document, then each next atom is the document
    /// least similar (cosine) to every atom chosen so far — every well-separated group of
    /// documents gets an atom once k is at least the number of groups.
    FarthestFirst,
}

/// Parameters of the bootstrap (alternating Algorithms 5 and 6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BootstrapParams {
    /// Alternations of (code all documents, A-step). 0 keeps the initial atoms.
    pub alternations: u32,
    /// ADMM iterations of each A-step (Algorithm 6).
    pub a_step_iter: u32,
    pub init: AtomInit,
}

impl BootstrapParams {
    pub fn paper() -> Self {
        BootstrapParams {
            alternations: 3,
            a_step_iter: 30,
            init: AtomInit::RandomDocuments,
        }
    }
}

/// The initial m × k dictionary. Non-empty documents are the candidates; with fewer than k of
/// them the remaining atoms are zero columns (still in 𝒜, never used by a code). Deterministic
/// in `seed`.
pub fn init_atoms(
    docs: &[SparseDoc],
    m: usize,
    k: usize,
    init: &AtomInit,
    seed: u64,
) -> Array2<f32> {
    let cand: Vec<usize> = (0..docs.len()).filter(|&j| !docs[j].is_empty()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let take = k.min(cand.len());
    let mut chosen: Vec<usize> = match init {
        AtomInit::FarthestFirst => farthest_first(docs, &cand, take, m, &mut rng),
        _ => sample(&mut rng, cand.len(), take)
            .into_iter()
            .map(|i| cand[i])
            .collect(),
    };
    chosen.sort_unstable();
    let mut a = Array2::<f32>::zeros((m, k));
    match init {
        AtomInit::RandomDocuments | AtomInit::FarthestFirst => {
            for (c, &j) in chosen.iter().enumerate() {
                for (&i, &v) in docs[j].ids.iter().zip(&docs[j].vals) {
                    a[[i as usize, c]] = v as f32;
                }
            }
        }
        AtomInit::KMeans {
            top_terms,
            iterations,
        } => {
            let cents = spherical_kmeans(docs, &cand, &chosen, m, *iterations);
            for (c, cent) in cents.iter().enumerate() {
                for (i, v) in top_terms_unit_l1(cent, *top_terms) {
                    a[[i, c]] = v as f32;
                }
            }
        }
    }
    // Rounding to f32 can push a column sum a hair above 1: project to stay inside 𝒜.
    let mut a64 = a.mapv(|v| v as f64);
    project_columns(&mut a64);
    a64.mapv(|v| v as f32)
}

/// A centroid, given by its (term, value) entries with distinct terms, cut to its `top`
/// largest positive entries (ties by term) and scaled to unit ℓ1 norm, as (term, weight)
/// pairs; empty for a centroid with no positive entry.
pub(crate) fn top_terms_unit_l1(cent: &[(usize, f64)], top: usize) -> Vec<(usize, f64)> {
    let mut top_set: Vec<(usize, f64)> = cent.iter().copied().filter(|e| e.1 > 0.0).collect();
    heaviest_first(&mut top_set, top);
    let s: f64 = top_set.iter().map(|e| e.1).sum();
    if s > 0.0 {
        top_set.into_iter().map(|(i, v)| (i, v / s)).collect()
    } else {
        Vec::new()
    }
}

/// Farthest-first traversal in cosine similarity over the candidate documents.
fn farthest_first(
    docs: &[SparseDoc],
    cand: &[usize],
    take: usize,
    m: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<usize> {
    if take == 0 {
        return Vec::new();
    }
    let norm = |d: &SparseDoc| d.vals.iter().map(|v| v * v).sum::<f64>().sqrt();
    let norms: Vec<f64> = cand.iter().map(|&j| norm(&docs[j])).collect();
    let mut best = vec![f64::NEG_INFINITY; cand.len()];
    let mut chosen = Vec::with_capacity(take);
    let mut next = sample(rng, cand.len(), 1).index(0);
    let mut dense = vec![0.0f64; m];
    for _ in 0..take {
        chosen.push(cand[next]);
        best[next] = f64::INFINITY;
        let d = &docs[cand[next]];
        let nd = norms[next];
        for (&i, &v) in d.ids.iter().zip(&d.vals) {
            dense[i as usize] = v / nd;
        }
        for (q, &j) in cand.iter().enumerate() {
            if best[q] == f64::INFINITY {
                continue;
            }
            let e = &docs[j];
            let s: f64 = e
                .ids
                .iter()
                .zip(&e.vals)
                .map(|(&i, &v)| dense[i as usize] * v)
                .sum::<f64>()
                / norms[q];
            best[q] = best[q].max(s);
        }
        for &i in &d.ids {
            dense[i as usize] = 0.0;
        }
        // least similar to everything chosen; ties by position
        let mut pick = None;
        for q in 0..cand.len() {
            if best[q] != f64::INFINITY && pick.is_none_or(|p: usize| best[q] < best[p]) {
                pick = Some(q);
            }
        }
        match pick {
            Some(p) => next = p,
            None => break,
        }
    }
    chosen
}

/// Spherical k-means over the candidate documents (ℓ2-normalised), starting from `seeds`.
/// Returns one centroid (ℓ2-normalised, non-negative) per seed, as (term, value) pairs over
/// the terms of the candidates and seeds, terms ascending (every other entry is 0).
pub(crate) fn spherical_kmeans(
    docs: &[SparseDoc],
    cand: &[usize],
    seeds: &[usize],
    m: usize,
    iterations: u32,
) -> Vec<Vec<(usize, f64)>> {
    let space = LocalSpace::new(docs, cand, seeds, m);
    let values = kmeans_iterations(&space.vecs, &space.seeds, space.terms.len(), iterations);
    space.pairs(values)
}

/// The documents of a k-means over its local terms: the terms of the candidates and seeds
/// (below m), ascending, so every sum visits its non-zeros in the same order as over all m
/// terms and the result is the same bit for bit. Vectors are ℓ2-normalised, by local term.
struct LocalSpace {
    terms: Vec<u32>,
    vecs: Vec<Vec<(u32, f64)>>,
    seeds: Vec<Vec<(u32, f64)>>,
}

impl LocalSpace {
    fn new(docs: &[SparseDoc], cand: &[usize], seeds: &[usize], m: usize) -> LocalSpace {
        // the terms marked over all m, then numbered in ascending order: a scan of m instead
        // of a sort of every candidate's terms
        const NONE: u32 = u32::MAX;
        let mut local_of = vec![NONE; m];
        for &j in cand.iter().chain(seeds) {
            for &i in docs[j].ids.iter().filter(|&&i| (i as usize) < m) {
                local_of[i as usize] = 0;
            }
        }
        let mut terms: Vec<u32> = Vec::new();
        for (i, l) in local_of.iter_mut().enumerate() {
            if *l != NONE {
                *l = terms.len() as u32;
                terms.push(i as u32);
            }
        }
        let local = |d: &SparseDoc| -> Vec<(u32, f64)> {
            let n = d.vals.iter().map(|v| v * v).sum::<f64>().sqrt();
            d.ids
                .iter()
                .zip(&d.vals)
                .filter_map(|(&i, &v)| {
                    let l = *local_of.get(i as usize)?;
                    (l != NONE).then_some((l, v / n))
                })
                .collect()
        };
        let vecs = cand.iter().map(|&j| local(&docs[j])).collect();
        let seeds = seeds.iter().map(|&j| local(&docs[j])).collect();
        LocalSpace { terms, vecs, seeds }
    }

    /// Centroids given densely over the local terms as (term, value) pairs over all of them.
    fn pairs(&self, values: Vec<Vec<f64>>) -> Vec<Vec<(usize, f64)>> {
        values
            .into_iter()
            .map(|c| self.terms.iter().map(|&t| t as usize).zip(c).collect())
            .collect()
    }
}

/// The index of the centroid with the largest dot product with `v` (the first of ties), the
/// centroids given term-major in `tm` (k values per local term).
fn nearest_centroid(v: &[(u32, f64)], tm: &[f64], k: usize) -> usize {
    let mut s = vec![0.0f64; k];
    for &(i, x) in v {
        for (sc, &cv) in s.iter_mut().zip(&tm[i as usize * k..(i as usize + 1) * k]) {
            *sc += x * cv;
        }
    }
    let mut best = 0;
    for c in 1..k {
        if s[c] > s[best] {
            best = c;
        }
    }
    best
}

/// `iterations` rounds of assigning every vector to its nearest centroid and setting each
/// centroid with members to their ℓ2-normalised sum (one without members stays), from the
/// seeds; `m` local terms. Returns the centroids dense over the local terms. Stops early, with
/// the same result bit for bit, at a fixed point: an assignment equal to the one before (on
/// the refresh's batches the second iteration's, as a rule).
fn kmeans_iterations(
    vecs: &[Vec<(u32, f64)>],
    seeds: &[Vec<(u32, f64)>],
    m: usize,
    iterations: u32,
) -> Vec<Vec<f64>> {
    let k = seeds.len();
    let mut cents: Vec<Centroid> = seeds.iter().map(|s| Centroid::new(m, s)).collect();
    // term-major copy for cache-friendly dot products: the non-zeros of the current
    // centroids, every other entry 0 (`written`: the entries set, cleared before the next)
    let mut tm = vec![0.0f64; m * k];
    let mut written: Vec<usize> = Vec::new();
    let mut mark = vec![false; m];
    // the last iteration's assignment of every vector to a centroid
    let mut last: Option<Vec<usize>> = None;
    for _ in 0..iterations {
        for &at in &written {
            tm[at] = 0.0;
        }
        written.clear();
        for (c, cent) in cents.iter().enumerate() {
            for &i in &cent.support {
                let v = cent.value[i as usize];
                if v != 0.0 {
                    tm[i as usize * k + c] = v;
                    written.push(i as usize * k + c);
                }
            }
        }
        let assign: Vec<usize> = vecs
            .par_iter()
            .map(|v| nearest_centroid(v, &tm, k))
            .collect();
        // the same assignment as the iteration before gives the same centroids, bit for
        // bit (the same members summed in the same order; a centroid without members stays),
        // and so every later iteration the same again: a fixed point, the iterations left
        // change nothing
        if last.as_ref() == Some(&assign) {
            break;
        }
        for (v, &c) in vecs.iter().zip(&assign) {
            cents[c].add(v);
        }
        for cent in &mut cents {
            cent.renormalise(&mut mark);
        }
        last = Some(assign);
    }
    cents.into_iter().map(|c| c.value).collect()
}

/// A centroid of [`spherical_kmeans`]: dense over the local terms, non-zero only on
/// `support`, with the sum of the members assigned to it in this iteration
/// (`sum`: zeros except at `touched`). Each iteration then touches the centroid's and its
/// members' entries only, not all m, with the arithmetic of dense loops: the same sums in the
/// same order (the entries left out are exact zeros).
struct Centroid {
    value: Vec<f64>,
    support: Vec<u32>,
    sum: Vec<f64>,
    touched: Vec<u32>,
}

/// `entries` (local term, value) as a dense vector over `m` local terms.
fn dense(m: usize, entries: &[(u32, f64)]) -> Vec<f64> {
    let mut value = vec![0.0; m];
    for &(i, v) in entries {
        value[i as usize] = v;
    }
    value
}

impl Centroid {
    fn new(m: usize, entries: &[(u32, f64)]) -> Centroid {
        Centroid {
            value: dense(m, entries),
            support: entries.iter().map(|&(i, _)| i).collect(),
            sum: vec![0.0; m],
            touched: Vec::new(),
        }
    }

    /// Add a member (local term, weight) to this iteration's sum.
    fn add(&mut self, v: &[(u32, f64)]) {
        for &(i, x) in v {
            self.sum[i as usize] += x;
            self.touched.push(i);
        }
    }

    /// The centroid becomes its members' sum over its ℓ2 norm (the norm summed by ascending
    /// term, as over all m: zeros add nothing); without members (or a zero sum) it stays.
    /// The sum is reset for the next iteration. `mark` is all false on entry and on return.
    fn renormalise(&mut self, mark: &mut [bool]) {
        if self.touched.is_empty() {
            return;
        }
        let t = &mut self.touched;
        t.retain(|&i| !std::mem::replace(&mut mark[i as usize], true));
        t.sort_unstable();
        for &i in t.iter() {
            mark[i as usize] = false;
        }
        let n = t
            .iter()
            .map(|&i| self.sum[i as usize] * self.sum[i as usize])
            .sum::<f64>()
            .sqrt();
        if n > 0.0 {
            for &i in &self.support {
                self.value[i as usize] = 0.0;
            }
            for &i in t.iter() {
                self.value[i as usize] = self.sum[i as usize] / n;
            }
            std::mem::swap(&mut self.support, t);
        }
        for &i in self.support.iter().chain(self.touched.iter()) {
            self.sum[i as usize] = 0.0;
        }
        self.touched.clear();
    }
}

/// The batch A-step (Algorithm 6): approximately solve min_{A ∈ 𝒜} ‖P − A X‖₁ by `iters`
/// ADMM iterations warm-started at `a0`. `p` is m × n CSR, `x` is k × n CSC.
///
/// Exact reduction: a document whose code is zero contributes nothing to the A-gradient
/// (G = (AX + E − P − ρ/φ) Xᵀ only reads columns with X_j ≠ 0) and its E, ρ columns never
/// feed back, so only the n_c documents with a non-zero code are carried. E and ρ are dense
/// m × n_c (stored `f32`, computed in `f64`): memory 8·m·n_c bytes.
/// Guarantees: the result is in 𝒜 and finite; with all codes zero it equals Π_𝒜(a0).
pub fn a_step(
    p: &CsMat<f64>,
    x: &CsMat<f64>,
    a0: &Array2<f32>,
    phi: f64,
    gamma: f64,
    iters: u32,
) -> Array2<f32> {
    let keep: Vec<usize> = (0..x.cols())
        .filter(|&j| x.outer_view(j).is_some_and(|c| c.nnz() > 0))
        .collect();
    if keep.len() < x.cols() {
        let pc = p.to_csc();
        let mut cols_p = Vec::with_capacity(keep.len());
        let mut cols_x = Vec::with_capacity(keep.len());
        for &j in &keep {
            cols_p.push(pc.outer_view(j).unwrap().to_owned());
            cols_x.push(x.outer_view(j).unwrap().to_owned());
        }
        let pr = stack_csc(p.rows(), &cols_p).to_csr();
        let xr = stack_csc(x.rows(), &cols_x);
        return a_step_dense(&pr, &xr, a0, phi, gamma, iters);
    }
    a_step_dense(p, x, a0, phi, gamma, iters)
}

fn stack_csc(rows: usize, cols: &[sprs::CsVec<f64>]) -> CsMat<f64> {
    let mut indptr = vec![0];
    let mut indices = Vec::new();
    let mut data = Vec::new();
    for c in cols {
        indices.extend_from_slice(c.indices());
        data.extend_from_slice(c.data());
        indptr.push(indices.len());
    }
    CsMat::new_csc((rows, cols.len()), indptr, indices, data)
}

fn a_step_dense(
    p: &CsMat<f64>,
    x: &CsMat<f64>,
    a0: &Array2<f32>,
    phi: f64,
    gamma: f64,
    iters: u32,
) -> Array2<f32> {
    let (m, k) = a0.dim();
    let n = x.cols();
    let psi = psi_max_codes(x);
    let mut a = a0.mapv(|v| v as f64);
    if psi <= 0.0 || iters == 0 || n == 0 {
        project_columns(&mut a);
        return a.mapv(|v| v as f32);
    }
    let kappa = 1.0 / psi;
    let coded = coded_columns(x);
    let mut e = Array2::<f32>::zeros((m, n));
    let mut rho = Array2::<f32>::zeros((m, n));
    // E₁ = P
    for (i, row) in p.outer_iterator().enumerate() {
        for (j, &v) in row.iter() {
            e[[i, j]] = v as f32;
        }
    }
    let inv_phi = 1.0 / phi;
    // double buffer: `a_old` holds the previous iterate while `a` is rewritten
    let mut a_old = a.clone();
    for _ in 0..iters {
        std::mem::swap(&mut a, &mut a_old);
        let a_sl = a_old.as_slice().unwrap();
        let e_sl = e.as_slice_mut().unwrap();
        let r_sl = rho.as_slice().unwrap();
        // Pass 1: E update (all entries) and A' = max(A − κ G, 0), G = (AX + E − P − ρ/φ) Xᵀ.
        a.as_slice_mut()
            .unwrap()
            .par_chunks_mut(k)
            .zip(e_sl.par_chunks_mut(n))
            .enumerate()
            .for_each_init(
                || (vec![0.0f64; n], vec![0.0f64; n]),
                |(pbuf, ax), (i, (out, e_row))| {
                    let a_row = &a_sl[i * k..(i + 1) * k];
                    out.copy_from_slice(a_row);
                    let r_row = &r_sl[i * n..(i + 1) * n];
                    pbuf.iter_mut().for_each(|v| *v = 0.0);
                    ax.iter_mut().for_each(|v| *v = 0.0);
                    for (j, &v) in p.outer_view(i).unwrap().iter() {
                        pbuf[j] = v;
                    }
                    for (j, code) in &coded {
                        ax[*j] = code.iter().map(|&(kk, v)| a_row[kk] * v).sum();
                    }
                    for j in 0..n {
                        let en = soft(pbuf[j] - ax[j] + r_row[j] as f64 * inv_phi, inv_phi);
                        e_row[j] = en as f32;
                    }
                    for (j, code) in &coded {
                        let u = ax[*j] + e_row[*j] as f64 - pbuf[*j] - r_row[*j] as f64 * inv_phi;
                        if u != 0.0 {
                            for &(kk, v) in code {
                                out[kk] -= kappa * u * v;
                            }
                        }
                    }
                },
            );
        project_columns(&mut a);
        // Pass 2: ρ += γφ (P − A X − E)
        let a_sl = a.as_slice().unwrap();
        let e_sl = e.as_slice().unwrap();
        rho.as_slice_mut()
            .unwrap()
            .par_chunks_mut(n)
            .enumerate()
            .for_each_init(
                || (vec![0.0f64; n], vec![0.0f64; n]),
                |(pbuf, ax), (i, r_row)| {
                    let a_row = &a_sl[i * k..(i + 1) * k];
                    pbuf.iter_mut().for_each(|v| *v = 0.0);
                    ax.iter_mut().for_each(|v| *v = 0.0);
                    for (j, &v) in p.outer_view(i).unwrap().iter() {
                        pbuf[j] = v;
                    }
                    for (j, code) in &coded {
                        ax[*j] = code.iter().map(|&(kk, v)| a_row[kk] * v).sum();
                    }
                    let e_row = &e_sl[i * n..(i + 1) * n];
                    for j in 0..n {
                        let r = r_row[j] as f64 + gamma * phi * (pbuf[j] - ax[j] - e_row[j] as f64);
                        r_row[j] = r as f32;
                    }
                },
            );
    }
    a.mapv(|v| v as f32)
}

/// Bootstrap a dictionary from one batch: initial atoms, then `alternations` rounds of coding
/// every document (Algorithm 5, via [`code_batch`]) and an A-step (Algorithm 6).
/// Deterministic in `seed`; the result is in 𝒜.
pub fn bootstrap(
    docs: &[SparseDoc],
    m: usize,
    k: usize,
    coding: &CodingParams,
    params: &BootstrapParams,
    seed: u64,
) -> Array2<f32> {
    // Exact reduction to the rows the documents use: every initial atom lives there, and a
    // row with P = 0 and A = 0 keeps E = ρ = 0 and a zero gradient in the A-step, so it stays
    // zero. For a small batch over a large vocabulary (the topic stage) this is most of the
    // work saved.
    let mut used = vec![false; m];
    for d in docs {
        for &i in &d.ids {
            used[i as usize] = true;
        }
    }
    let rows: Vec<usize> = (0..m).filter(|&i| used[i]).collect();
    if rows.len() < m {
        let mut new_id = vec![u32::MAX; m];
        for (n, &i) in rows.iter().enumerate() {
            new_id[i] = n as u32;
        }
        let compact: Vec<SparseDoc> = docs
            .iter()
            .map(|d| SparseDoc {
                ids: d.ids.iter().map(|&i| new_id[i as usize]).collect(),
                vals: d.vals.clone(),
            })
            .collect();
        let small = bootstrap_rows(&compact, rows.len(), k, coding, params, seed);
        let mut a = Array2::<f32>::zeros((m, k));
        for (n, &i) in rows.iter().enumerate() {
            a.row_mut(i).assign(&small.row(n));
        }
        return a;
    }
    bootstrap_rows(docs, m, k, coding, params, seed)
}

fn bootstrap_rows(
    docs: &[SparseDoc],
    m: usize,
    k: usize,
    coding: &CodingParams,
    params: &BootstrapParams,
    seed: u64,
) -> Array2<f32> {
    let mut a = init_atoms(docs, m, k, &params.init, seed);
    if params.alternations == 0 {
        return a;
    }
    let p = docs_to_csr(docs, m);
    for _ in 0..params.alternations {
        let dict = CodingDict::from_dense(a.view(), coding.step);
        let codes = code_batch(&dict, docs, coding);
        let x = codes_to_csc(&codes, k);
        a = a_step(&p, &x, &a, coding.phi, coding.gamma, params.a_step_iter);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The k-means iterations as first written, every loop over all k × m entries: the oracle
    /// the support-tracking version must equal bit for bit.
    fn dense_iterations(
        vecs: &[Vec<(u32, f64)>],
        seeds: &[Vec<(u32, f64)>],
        m: usize,
        iterations: u32,
    ) -> Vec<Vec<f64>> {
        let k = seeds.len();
        let mut cents: Vec<Vec<f64>> = seeds.iter().map(|s| dense(m, s)).collect();
        let mut tm = vec![0.0f64; m * k];
        for _ in 0..iterations {
            tm.fill(0.0);
            for (c, cent) in cents.iter().enumerate() {
                for (i, &v) in cent.iter().enumerate() {
                    if v != 0.0 {
                        tm[i * k + c] = v;
                    }
                }
            }
            let assign: Vec<usize> = vecs.iter().map(|v| nearest_centroid(v, &tm, k)).collect();
            let mut sums = vec![vec![0.0f64; 0]; k];
            for (v, &c) in vecs.iter().zip(&assign) {
                if sums[c].is_empty() {
                    sums[c] = vec![0.0; m];
                }
                for &(i, x) in v {
                    sums[c][i as usize] += x;
                }
            }
            for (c, s) in sums.into_iter().enumerate() {
                let n = s.iter().map(|v| v * v).sum::<f64>().sqrt();
                if n > 0.0 {
                    cents[c] = s.into_iter().map(|v| v / n).collect();
                }
            }
        }
        cents
    }

    /// Random documents over `m` terms, some sharing a topic's terms, a few empty.
    fn documents(n: usize, m: u32, seed: u64) -> Vec<SparseDoc> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|j| {
                if j % 17 == 5 {
                    return SparseDoc::default();
                }
                let topic = rng.random_range(0..4u32) * (m / 4);
                let mut ids: Vec<u32> = Vec::new();
                for t in 0..16 {
                    ids.push(if t < 12 {
                        topic + rng.random_range(0..m / 4)
                    } else {
                        rng.random_range(0..m)
                    });
                }
                ids.sort_unstable();
                ids.dedup();
                let vals = ids.iter().map(|_| rng.random_range(0.05..1.0)).collect();
                SparseDoc { ids, vals }
            })
            .collect()
    }

    /// Centroids as their values' bits, to compare bit for bit.
    fn bits(c: &[Vec<f64>]) -> Vec<Vec<u64>> {
        c.iter()
            .map(|v| v.iter().map(|x| x.to_bits()).collect())
            .collect()
    }

    /// Centroids equal the dense loops' bit for bit: seeds of several sizes (more than the
    /// topics, so some clusters lose every member and keep their centroid), candidates that
    /// leave terms out, zero and several iterations, a term range past `m`.
    #[test]
    fn kmeans_equals_the_dense_loops_bit_for_bit() {
        let mut kept = 0;
        for (seed, n, m, k, iterations) in [
            (1, 60, 200, 3, 10),
            (2, 200, 400, 20, 10),
            (3, 40, 100, 12, 5),
            (4, 30, 80, 6, 0),
        ] {
            let docs = documents(n, m, seed);
            let cand: Vec<usize> = (0..n).filter(|j| j % 3 != 1).collect();
            let seeds: Vec<usize> = (0..k).map(|c| (c * 7 + 2) % n).collect();
            let space = LocalSpace::new(&docs, &cand, &seeds, m as usize - 10);
            let local = space.terms.len();
            let got = kmeans_iterations(&space.vecs, &space.seeds, local, iterations);
            let want = dense_iterations(&space.vecs, &space.seeds, local, iterations);
            assert_eq!(bits(&got), bits(&want), "seed {seed}");
            assert_eq!(
                spherical_kmeans(&docs, &cand, &seeds, m as usize - 10, iterations),
                space.pairs(got.clone())
            );
            // a centroid that lost every member keeps its seed (runs that iterate only)
            if iterations > 0 {
                let firsts = kmeans_iterations(&space.vecs, &space.seeds, local, 0);
                kept += got.iter().zip(&firsts).filter(|(g, f)| g == f).count();
            }
        }
        assert!(kept > 0, "the data must leave some cluster empty");
    }

    /// The local space numbers exactly the distinct terms below m of the candidates and seeds,
    /// ascending, and maps every candidate's and seed's entries below m to them, ℓ2-normalised
    /// over the whole document (the oracle: a sort of every term and a search for each).
    #[test]
    fn the_local_space_numbers_the_terms_in_order() {
        let (n, m) = (80usize, 300u32);
        let docs = documents(n, m, 9);
        let cand: Vec<usize> = (0..n).filter(|j| j % 4 != 0).collect();
        let seeds = vec![0, 4, 77];
        let below = 250;
        let space = LocalSpace::new(&docs, &cand, &seeds, below);
        let mut terms: Vec<u32> = cand
            .iter()
            .chain(&seeds)
            .flat_map(|&j| docs[j].ids.iter().copied())
            .filter(|&i| (i as usize) < below)
            .collect();
        terms.sort_unstable();
        terms.dedup();
        assert_eq!(space.terms, terms);
        assert!(docs
            .iter()
            .any(|d| d.ids.iter().any(|&i| i as usize >= below)));
        let want = |j: usize| -> Vec<(u32, f64)> {
            let d = &docs[j];
            let norm = d.vals.iter().map(|v| v * v).sum::<f64>().sqrt();
            d.ids
                .iter()
                .zip(&d.vals)
                .filter_map(|(i, &v)| terms.binary_search(i).ok().map(|l| (l as u32, v / norm)))
                .collect()
        };
        for (c, &j) in cand.iter().enumerate() {
            assert_eq!(space.vecs[c], want(j), "candidate {j}");
        }
        for (c, &j) in seeds.iter().enumerate() {
            assert_eq!(space.seeds[c], want(j), "seed {j}");
        }
    }

    /// The top terms are those of a full sort by (value descending, term ascending), ties and
    /// non-positive entries included, scaled to unit ℓ1; fewer entries than `top` keep all.
    #[test]
    fn the_top_terms_are_those_of_a_full_sort() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for case in 0..200 {
            let len = rng.random_range(0..60usize);
            // few distinct values, so that ties are common; some zeros and negatives
            let cent: Vec<(usize, f64)> = (0..len)
                .map(|t| (t * 3 + 1, rng.random_range(-2..6i32) as f64 / 4.0))
                .collect();
            let top = rng.random_range(0..12usize);
            let mut all: Vec<(usize, f64)> = cent.iter().copied().filter(|e| e.1 > 0.0).collect();
            all.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
            all.truncate(top);
            let s: f64 = all.iter().map(|e| e.1).sum();
            let want: Vec<(usize, f64)> = all.iter().map(|&(i, v)| (i, v / s)).collect();
            assert_eq!(top_terms_unit_l1(&cent, top), want, "case {case}");
        }
    }

    /// Every number of iterations gives the dense loops' centroids bit for bit, whether the
    /// iterations end at a fixed point or run out before it; the data reaches a fixed point
    /// (more iterations past it give the same centroids).
    #[test]
    fn kmeans_stops_at_a_fixed_point_with_the_same_centroids() {
        let (n, m) = (120usize, 240u32);
        let docs = documents(n, m, 11);
        let cand: Vec<usize> = (0..n).collect();
        let seeds: Vec<usize> = (0..8).map(|c| c * 13 + 1).collect();
        let space = LocalSpace::new(&docs, &cand, &seeds, m as usize);
        let local = space.terms.len();
        let mut fixed_from = None;
        let mut before = kmeans_iterations(&space.vecs, &space.seeds, local, 0);
        for iterations in 1..=15 {
            let got = kmeans_iterations(&space.vecs, &space.seeds, local, iterations);
            let want = dense_iterations(&space.vecs, &space.seeds, local, iterations);
            assert_eq!(bits(&got), bits(&want), "{iterations} iterations");
            if got == before && fixed_from.is_none() {
                fixed_from = Some(iterations);
            }
            before = got;
        }
        let from = fixed_from.expect("the iterations reach a fixed point");
        assert!(from < 15, "fixed from {from}");
    }
}
