//! Nearest-neighbour novelty (first-story detection): a document's score is
//! `1 − max cosine` to the documents of earlier timesteps (1 when there is none).
//!
//! - [`ExactNn`]: the UMass first-story-detection baseline — exact cosine against *all* earlier
//!   documents, through an inverted index (term → documents with their ℓ2-normalised weight),
//!   parallel over the documents of a batch. Its cost per timestep grows with the number of
//!   documents indexed.
//! - [`Lsh`]: Petrović, Osborne & Lavrenko (NAACL 2010), "Streaming first story detection with
//!   application to Twitter": `tables` hash tables, each keyed by the signs of `bits` random
//!   Gaussian hyperplane projections (random-hyperplane LSH for cosine); a document is compared
//!   exactly with the documents sharing a bucket with it in any table, plus the `recent` most
//!   recent documents (their variance-reduction step), and each bucket keeps only its
//!   `bucket_cap` most recent documents — so the cost per document is bounded, independent of
//!   the stream length.
//!
//! Both compare against documents of *earlier* timesteps only (the same information the
//! dictionary methods have when they score a batch); a batch is indexed after it was scored.
//! Vectors are the shared TF-IDF vectors (IDF as of each document's own timestep).

use std::collections::{HashMap, VecDeque};

use rayon::prelude::*;

use novad_models::text::{SparseDoc, VocabChange, Vocabulary};

fn l2_normalised(d: &SparseDoc) -> SparseDoc {
    let n = d.vals.iter().map(|v| v * v).sum::<f64>().sqrt();
    if n == 0.0 {
        return SparseDoc::default();
    }
    SparseDoc {
        ids: d.ids.clone(),
        vals: d.vals.iter().map(|v| v / n).collect(),
    }
}

/// Dot product of two sparse vectors with sorted ids.
#[cfg(test)]
fn sparse_dot(a: &SparseDoc, b: &SparseDoc) -> f64 {
    let (mut i, mut j, mut s) = (0, 0, 0.0);
    while i < a.ids.len() && j < b.ids.len() {
        match a.ids[i].cmp(&b.ids[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                s += a.vals[i] * b.vals[j];
                i += 1;
                j += 1;
            }
        }
    }
    s
}

/// Exact nearest-neighbour cosine over an inverted index.
#[derive(Default)]
pub struct ExactNn {
    postings: Vec<Vec<(u32, f64)>>,
    n_docs: usize,
}

impl ExactNn {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.n_docs
    }

    pub fn is_empty(&self) -> bool {
        self.n_docs == 0
    }

    /// Follow a vocabulary change: postings move with their term; evicted terms' postings are
    /// dropped (those terms no longer contribute to any cosine).
    pub fn remap(&mut self, change: &VocabChange) {
        let mut out = vec![Vec::new(); change.remap.new_len];
        for (r, p) in std::mem::take(&mut self.postings).into_iter().enumerate() {
            if r < change.remap.old_len {
                if let Some(nr) = change.remap.get(r) {
                    out[nr] = p;
                }
            }
        }
        self.postings = out;
    }

    /// Novelty scores of a batch against every indexed document.
    pub fn score(&self, docs: &[SparseDoc]) -> Vec<f64> {
        let n = self.n_docs;
        docs.par_iter()
            .map_init(
                || (vec![0.0f64; n], Vec::<u32>::new()),
                |(acc, touched), d| {
                    if n == 0 {
                        return 1.0;
                    }
                    let q = l2_normalised(d);
                    for (&id, &w) in q.ids.iter().zip(&q.vals) {
                        if let Some(p) = self.postings.get(id as usize) {
                            for &(doc, v) in p {
                                let slot = &mut acc[doc as usize];
                                if *slot == 0.0 {
                                    touched.push(doc);
                                }
                                *slot += w * v;
                            }
                        }
                    }
                    let mut best = 0.0f64;
                    for &t in touched.iter() {
                        best = best.max(acc[t as usize]);
                        acc[t as usize] = 0.0;
                    }
                    touched.clear();
                    1.0 - best.min(1.0)
                },
            )
            .collect()
    }

    /// Index a batch (non-empty documents; empty ones are skipped).
    pub fn insert(&mut self, docs: &[SparseDoc], m: usize) {
        if self.postings.len() < m {
            self.postings.resize(m, Vec::new());
        }
        for d in docs {
            if d.is_empty() {
                continue;
            }
            let q = l2_normalised(d);
            let id = self.n_docs as u32;
            for (&t, &w) in q.ids.iter().zip(&q.vals) {
                self.postings[t as usize].push((id, w));
            }
            self.n_docs += 1;
        }
    }
}

/// Settings of the LSH baseline.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LshParams {
    /// Hyperplanes per table (signature bits).
    pub bits: u32,
    pub tables: u32,
    /// Documents kept per bucket (the most recent).
    pub bucket_cap: usize,
    /// Most recent documents always compared.
    pub recent: usize,
    pub seed: u64,
}

/// Streaming LSH first-story detection (Petrović et al. 2010).
pub struct Lsh {
    params: LshParams,
    /// Per term id, `tables · bits` Gaussian hyperplane coordinates (generated from the term
    /// string and the seed, so they follow a term through vocabulary compaction).
    planes: Vec<f32>,
    planes_rows: usize,
    buckets: Vec<HashMap<u64, VecDeque<u32>>>,
    docs: Vec<SparseDoc>,
    recent: VecDeque<u32>,
}

fn fnv1a(bytes: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed.wrapping_mul(0x100_0000_01b3);
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `n` standard normal values determined by (term, seed), Box–Muller.
fn gaussians(term: &str, seed: u64, out: &mut [f32]) {
    let mut st = fnv1a(term.as_bytes(), seed);
    let unif = |st: &mut u64| ((splitmix(st) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let mut i = 0;
    while i < out.len() {
        let (u1, u2) = (unif(&mut st), unif(&mut st));
        let r = (-2.0 * u1.ln()).sqrt();
        let th = std::f64::consts::TAU * u2;
        out[i] = (r * th.cos()) as f32;
        if i + 1 < out.len() {
            out[i + 1] = (r * th.sin()) as f32;
        }
        i += 2;
    }
}

impl Lsh {
    pub fn new(params: LshParams) -> Self {
        assert!(params.bits >= 1 && params.bits <= 64 && params.tables >= 1);
        Lsh {
            buckets: vec![HashMap::new(); params.tables as usize],
            params,
            planes: Vec::new(),
            planes_rows: 0,
            docs: Vec::new(),
            recent: VecDeque::new(),
        }
    }

    fn width(&self) -> usize {
        (self.params.tables * self.params.bits) as usize
    }

    /// Make sure every term of `vocab` has its hyperplane coordinates.
    fn extend_planes(&mut self, vocab: &Vocabulary) {
        let w = self.width();
        let m = vocab.len();
        if self.planes_rows >= m {
            return;
        }
        self.planes.resize(m * w, 0.0);
        let seed = self.params.seed;
        self.planes[self.planes_rows * w..]
            .par_chunks_mut(w)
            .enumerate()
            .for_each(|(r, out)| {
                let id = (self.planes_rows + r) as u32;
                gaussians(vocab.term(id), seed, out)
            });
        self.planes_rows = m;
    }

    /// Follow a vocabulary change: stored vectors are remapped, hyperplanes regenerated.
    pub fn remap(&mut self, change: &VocabChange, vocab: &Vocabulary) {
        if change.remap.map.is_some() {
            for d in &mut self.docs {
                super::remap_doc(d, change);
            }
            self.planes.clear();
            self.planes_rows = 0;
        }
        self.extend_planes(vocab);
    }

    fn signatures(&self, d: &SparseDoc) -> Vec<u64> {
        let (tables, bits) = (self.params.tables as usize, self.params.bits as usize);
        let w = tables * bits;
        let mut proj = vec![0.0f64; w];
        for (&id, &v) in d.ids.iter().zip(&d.vals) {
            if id as usize >= self.planes_rows {
                continue;
            }
            let row = &self.planes[id as usize * w..(id as usize + 1) * w];
            for (p, &r) in proj.iter_mut().zip(row) {
                *p += v * r as f64;
            }
        }
        (0..tables)
            .map(|t| {
                let mut s = 0u64;
                for b in 0..bits {
                    if proj[t * bits + b] > 0.0 {
                        s |= 1 << b;
                    }
                }
                s
            })
            .collect()
    }

    /// Novelty scores of a batch against the indexed documents. Returns the scores and the
    /// mean number of exact comparisons per document.
    pub fn score(&self, docs: &[SparseDoc]) -> (Vec<f64>, f64) {
        let m = docs
            .iter()
            .filter_map(|d| d.ids.last())
            .map(|&i| i as usize + 1)
            .max()
            .unwrap_or(0);
        let out: Vec<(f64, usize)> = docs
            .par_iter()
            .map_init(
                || (Vec::<u32>::new(), vec![0.0f64; m]),
                |(cand, dense), d| {
                    if self.docs.is_empty() || d.is_empty() {
                        return (if d.is_empty() { 0.0 } else { 1.0 }, 0);
                    }
                    let q = l2_normalised(d);
                    cand.clear();
                    for (t, s) in self.signatures(&q).into_iter().enumerate() {
                        if let Some(b) = self.buckets[t].get(&s) {
                            cand.extend(b.iter().copied());
                        }
                    }
                    cand.extend(self.recent.iter().copied());
                    cand.sort_unstable();
                    cand.dedup();
                    // exact cosines by scattering the query into a dense buffer
                    for (&i, &v) in q.ids.iter().zip(&q.vals) {
                        dense[i as usize] = v;
                    }
                    let best = cand
                        .iter()
                        .map(|&j| {
                            let o = &self.docs[j as usize];
                            o.ids
                                .iter()
                                .zip(&o.vals)
                                .map(|(&i, &v)| dense.get(i as usize).map_or(0.0, |q| q * v))
                                .sum::<f64>()
                        })
                        .fold(0.0f64, f64::max);
                    for &i in &q.ids {
                        dense[i as usize] = 0.0;
                    }
                    (1.0 - best.min(1.0), cand.len())
                },
            )
            .collect();
        let comps = out.iter().map(|o| o.1 as f64).sum::<f64>() / out.len().max(1) as f64;
        (out.into_iter().map(|o| o.0).collect(), comps)
    }

    /// Index a batch (non-empty documents only). `vocab` is the vocabulary the ids refer to.
    pub fn insert(&mut self, docs: &[SparseDoc], vocab: &Vocabulary) {
        self.extend_planes(vocab);
        for d in docs {
            if d.is_empty() {
                continue;
            }
            let q = l2_normalised(d);
            let id = self.docs.len() as u32;
            for (t, s) in self.signatures(&q).into_iter().enumerate() {
                let b = self.buckets[t].entry(s).or_default();
                b.push_back(id);
                if b.len() > self.params.bucket_cap {
                    b.pop_front();
                }
            }
            self.recent.push_back(id);
            if self.recent.len() > self.params.recent {
                self.recent.pop_front();
            }
            self.docs.push(q);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(ids: &[u32], vals: &[f64]) -> SparseDoc {
        SparseDoc {
            ids: ids.to_vec(),
            vals: vals.to_vec(),
        }
    }

    #[test]
    fn exact_nn_matches_brute_force() {
        let past = vec![
            doc(&[0, 1], &[0.5, 0.5]),
            doc(&[1, 2, 3], &[0.2, 0.3, 0.5]),
            doc(&[4], &[1.0]),
        ];
        let mut nn = ExactNn::new();
        assert_eq!(nn.score(&past[..1]), vec![1.0]);
        nn.insert(&past, 5);
        let q = vec![
            doc(&[1, 3], &[0.5, 0.5]),
            doc(&[4], &[1.0]),
            doc(&[5], &[1.0]),
        ];
        let s = nn.score(&q);
        for (qi, si) in q.iter().zip(&s) {
            let qn = l2_normalised(qi);
            let best = past
                .iter()
                .map(|p| sparse_dot(&qn, &l2_normalised(p)))
                .fold(0.0, f64::max);
            assert!((si - (1.0 - best)).abs() < 1e-12);
        }
        assert!(s[1].abs() < 1e-12, "identical document");
        assert_eq!(s[2], 1.0, "no shared term");
    }

    #[test]
    fn lsh_finds_duplicates_and_is_deterministic() {
        let mut vocab = Vocabulary::new(100);
        let toks: Vec<Vec<String>> = (0..20)
            .map(|i| vec![format!("t{i}"), format!("u{}", i % 3)])
            .collect();
        let (counts, _) = vocab.observe(&toks, 0);
        let docs: Vec<SparseDoc> = counts
            .iter()
            .map(|c| novad_models::text::tfidf_l1(c, |id| vocab.df(id), vocab.docs_seen()))
            .collect();
        let params = LshParams {
            bits: 8,
            tables: 4,
            bucket_cap: 10,
            recent: 0,
            seed: 3,
        };
        let mut lsh = Lsh::new(params.clone());
        lsh.insert(&docs, &vocab);
        let (s, _) = lsh.score(&docs);
        // every document collides with itself in every table
        assert!(s.iter().all(|&v| v.abs() < 1e-9), "{s:?}");
        let mut again = Lsh::new(params);
        again.insert(&docs, &vocab);
        assert_eq!(again.score(&docs).0, s);
    }
}
