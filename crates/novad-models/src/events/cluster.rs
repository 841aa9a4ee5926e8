//! A timestep's documents grouped into communities that can be events. A story that breaks
//! fills a region of the batch with documents that score high; a false alarm is a high score
//! among ordinary documents of a known subject. So the candidates are the documents whose
//! score is elevated (at or above the batch's `elevated_quantile`), each candidate's nearest
//! documents in the whole batch are found (cosine over TF × IDF of the past,
//! [`Past::reweight`]), and only the candidates whose neighbourhood is mostly elevated (a share
//! of at least `min_elevated_share`) are cores; the cores' k-nearest-neighbour graph is cut
//! into Louvain communities, and a community of at least `min_size` cores, at least
//! `min_novel_share` of them novel, is an event. Its members include the story's documents
//! that scored high without crossing the novelty threshold: the verdicts stay as they are.

use rayon::prelude::*;

use super::graph::{knn_graph, louvain};
use super::keywords::{keywords, Past};
use super::EventParams;
use crate::linalg::heaviest_first;
use crate::text::SparseDoc;

/// Terms a document brings to the similarities at most (its heaviest): a long post must not
/// dominate them, and the frequent light terms make most of the work. An internal budget: on
/// 20NG (docs/RESULTS.md, "Emerging topics as events") 64 found the same new groups as 256 and
/// took about 0.015 s less per 1,000-post batch.
const MAX_TERMS: usize = 64;

/// Similarity below which two cores are never joined in the graph.
const FLOOR: f32 = 0.02;

/// A group of cores that passed every test.
#[derive(Debug, Clone, PartialEq)]
pub struct Community {
    /// Batch positions of its documents, increasing.
    pub members: Vec<usize>,
    /// Its keywords, (term id, weight), largest first ([`keywords`]).
    pub keywords: Vec<(u32, f64)>,
}

/// Each document as a unit-ℓ2 vector over its [`MAX_TERMS`] heaviest terms, weighted TF × IDF
/// of the past ([`Past::reweight`]; a term every earlier document had weighs 0), in batch
/// order; empty when nothing is left.
pub fn past_unit(vectors: &[SparseDoc], past: &Past) -> Vec<Vec<(u32, f32)>> {
    // each term's weight worked out once a batch (a logarithm), not once per occurrence
    let ids = vectors.iter().flat_map(|d| d.ids.iter());
    let mut weight = vec![f64::NAN; ids.max().map_or(0, |&i| i as usize + 1)];
    vectors
        .iter()
        .map(|d| {
            let kept: Vec<(u32, f64)> = d
                .ids
                .iter()
                .zip(&d.vals)
                .map(|(&i, &v)| {
                    let w = &mut weight[i as usize];
                    if w.is_nan() {
                        *w = past.reweight(i);
                    }
                    (i, v * *w)
                })
                .filter(|&(_, v)| v > 0.0 && v.is_finite())
                .collect();
            let kept = heaviest(kept, MAX_TERMS);
            let norm = kept.iter().map(|t| t.1 * t.1).sum::<f64>().sqrt();
            if !(norm > 0.0 && norm.is_finite()) {
                return Vec::new();
            }
            kept.into_iter()
                .map(|(i, v)| (i, (v / norm) as f32))
                .collect()
        })
        .collect()
}

/// The `max` heaviest of a document's (term, weight) entries (ties to the lower term), in
/// term order; all of them when there are no more. Terms distinct, in increasing order.
fn heaviest(mut kept: Vec<(u32, f64)>, max: usize) -> Vec<(u32, f64)> {
    if kept.len() > max {
        heaviest_first(&mut kept, max);
        kept.sort_unstable_by_key(|t| t.0);
    }
    kept
}

/// For each document of `rows` (batch positions): the share of `flag`ged documents among its
/// `k` nearest in the batch `unit` ([`flagged_share`]), and its cosines with the documents of
/// `rows` (itself: 1). A row of the whole batch lives only while its share is taken, so the
/// memory is O(rows²), not O(rows × batch).
fn similarities(
    unit: &[Vec<(u32, f32)>],
    rows: &[usize],
    flag: &[bool],
    k: usize,
) -> (Vec<f64>, Vec<Vec<f32>>) {
    // each term's documents, by term id, in batch order
    let terms = unit.iter().flatten().map(|&(t, _)| t as usize + 1).max();
    let mut postings: Vec<Vec<(u32, f32)>> = vec![Vec::new(); terms.unwrap_or(0)];
    for (j, d) in unit.iter().enumerate() {
        for &(t, w) in d {
            postings[t as usize].push((j as u32, w));
        }
    }
    rows.par_iter()
        .map(|&i| {
            let mut acc = vec![0.0f64; unit.len()];
            for &(t, w) in &unit[i] {
                for &(j, v) in &postings[t as usize] {
                    acc[j as usize] += w as f64 * v as f64;
                }
            }
            let mut row: Vec<f32> = acc.iter().map(|a| a.clamp(0.0, 1.0) as f32).collect();
            row[i] = -1.0;
            let share = flagged_share(&row, flag, k);
            let own: Vec<f32> = rows
                .iter()
                .map(|&j| if j == i { 1.0 } else { row[j] })
                .collect();
            (share, own)
        })
        .unzip()
}

/// The share of flagged documents among the `k` most similar documents of `row` (ties to the
/// lower position), of those with a positive similarity; 0 when there are none.
fn flagged_share(row: &[f32], flag: &[bool], k: usize) -> f64 {
    let mut near: Vec<usize> = (0..row.len()).filter(|&j| row[j] > 0.0).collect();
    if near.is_empty() {
        return 0.0;
    }
    let k = k.min(near.len());
    near.select_nth_unstable_by(k - 1, |&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    near[..k].iter().filter(|&&j| flag[j]).count() as f64 / k as f64
}

/// The documents whose score is at least the `q`-quantile of the scores of the documents
/// with a vector (`unit` not empty); none when there are none.
fn elevated(unit: &[Vec<(u32, f32)>], scores: &[f64], q: f64) -> Vec<bool> {
    let mut s: Vec<f64> = (0..unit.len())
        .filter(|&j| !unit[j].is_empty())
        .map(|j| scores[j])
        .collect();
    if s.is_empty() {
        return vec![false; unit.len()];
    }
    s.sort_by(f64::total_cmp);
    let at = ((q * (s.len() - 1) as f64).round() as usize).min(s.len() - 1);
    let cut = s[at];
    (0..unit.len())
        .map(|j| !unit[j].is_empty() && scores[j] >= cut)
        .collect()
}

/// Neighbours that judge a candidate: `max`, fewer in a small batch (a fiftieth of it), never
/// fewer than `least` (an event's smallest size).
fn neighbourhood(n: usize, max: usize, least: usize) -> usize {
    (n / 50).clamp(least.min(max), max)
}

/// The communities of a batch (`unit` is [`past_unit`] of `vectors`; `scores` and `novel` one
/// per document) that pass `p`'s tests, largest first (ties by first member). Deterministic.
pub fn communities(
    unit: &[Vec<(u32, f32)>],
    vectors: &[SparseDoc],
    scores: &[f64],
    novel: &[bool],
    past: &Past,
    p: &EventParams,
) -> Vec<Community> {
    if !novel.iter().any(|&v| v) {
        return Vec::new();
    }
    let flag = elevated(unit, scores, p.elevated_quantile);
    let cand: Vec<usize> = (0..unit.len()).filter(|&j| flag[j]).collect();
    if cand.len() < p.min_size {
        return Vec::new();
    }
    let k = neighbourhood(unit.len(), p.neighbourhood, p.min_size);
    let (share, rows) = similarities(unit, &cand, &flag, k);
    let core: Vec<usize> = (0..cand.len())
        .filter(|&q| share[q] >= p.min_elevated_share)
        .collect();
    if core.len() < p.min_size {
        return Vec::new();
    }
    let n = core.len();
    let mut sims = vec![0.0f32; n * n];
    for (a, &qa) in core.iter().enumerate() {
        for (b, &qb) in core.iter().enumerate() {
            sims[a * n + b] = rows[qa][qb];
        }
    }
    let graph = knn_graph(&sims, n, p.neighbours, FLOOR);
    let label = louvain(&graph, p.resolution);
    let count = label.iter().max().map_or(0, |&m| m + 1);
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); count];
    for (a, &l) in label.iter().enumerate() {
        groups[l].push(a);
    }
    let mut out: Vec<Community> = groups
        .into_iter()
        .filter(|g| {
            let novel_members = g.iter().filter(|&&a| novel[cand[core[a]]]).count();
            g.len() >= p.min_size && novel_members as f64 >= p.min_novel_share * g.len() as f64
        })
        .map(|g| {
            let mut members: Vec<usize> = g.iter().map(|&a| cand[core[a]]).collect();
            members.sort_unstable();
            let docs: Vec<&SparseDoc> = members.iter().map(|&j| &vectors[j]).collect();
            Community {
                keywords: keywords(&docs, past, p.top_terms),
                members,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.members
            .len()
            .cmp(&a.members.len())
            .then(a.members[0].cmp(&b.members[0]))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The heaviest entries are those a full sort by weight (ties to the lower term) keeps, put
    /// back in term order; a document with no more than `max` keeps all.
    #[test]
    fn the_heaviest_terms_are_those_of_a_full_sort() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for case in 0..300 {
            let len = rng.random_range(0..120usize);
            // few distinct weights, so that ties are common
            let kept: Vec<(u32, f64)> = (0..len)
                .map(|t| (t as u32 * 2 + 5, rng.random_range(1..8u32) as f64 / 8.0))
                .collect();
            let max = rng.random_range(0..80usize);
            let mut want = kept.clone();
            if want.len() > max {
                want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                want.truncate(max);
                want.sort_by_key(|t| t.0);
            }
            assert_eq!(heaviest(kept, max), want, "case {case}");
        }
    }
}
