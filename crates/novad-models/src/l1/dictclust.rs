//! Emerging topics (CIKM 2011, DICTCLUST): the novel documents of a timestep are summarised by
//! a small ℓ1 dictionary R (k₁ atoms) learned with the same machinery as the main dictionary
//! (bootstrap = alternating Algorithms 5 and 6); each document goes to the atom with its largest
//! code entry, and an atom with enough documents is an emerging topic, presented by its top
//! terms and its most representative documents.

use ndarray::Array2;
use serde::{Deserialize, Serialize};

use crate::l1::coding::{code_batch, CodingDict, CodingParams};
use crate::l1::dictionary::{bootstrap, AtomInit, BootstrapParams};
use crate::model::{Topic, TopicKind};
use crate::text::SparseDoc;

/// Parameters of the topic stage. Checked by [`crate::Params::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicParams {
    /// Atoms of the topic dictionary R (paper: 10).
    pub k1: usize,
    /// Documents an atom needs to be reported as a topic.
    pub min_support: usize,
    /// Terms shown per topic.
    pub top_terms: usize,
    /// Representative documents kept per topic.
    pub representatives: usize,
    /// Alternations of the ℓ1 dictionary learning on the novel documents.
    pub alternations: u32,
    /// Clusters whose centroids (mean member document) reach this cosine similarity are merged
    /// into one topic (an over-complete R splits a topic across several atoms). 1.0 never
    /// merges (the paper).
    #[serde(default = "default_merge")]
    pub merge_cosine: f64,
    /// Sparsity weight λ ≥ 0 of the topic stage: R's learning and the codes that assign the
    /// documents (the detector's `coding.lambda` scores documents against Â; R has only k₁
    /// atoms over a few dozen documents, and a λ that large leaves most codes all-zero).
    #[serde(default = "default_topic_lambda")]
    pub lambda: f64,
}

fn default_topic_lambda() -> f64 {
    // 20NG CIKM protocol, default detector, seeds 0/1/2 (docs/RESULTS.md, "Emerging topics")
    0.01
}

/// ADMM iteration cap of the topic stage's coding (the smaller of this and `coding.max_iter`
/// applies). Only a code's strongest atom matters here, and a few long documents running to
/// `coding.max_iter` (2,000) made most of the stage's time. An internal solver budget, not a
/// modelling choice, hence a constant. Measured on the 20NG CIKM protocol (docs/RESULTS.md,
/// "Emerging topics"): DICTCLUST F1 unchanged.
pub const TOPIC_MAX_ITER: u32 = 300;

/// Terms a novel document brings to the topic stage at most: its heaviest shared terms (ties by
/// lower term id). A very long post (one of 1,436 shared terms among 98 novel posts in the
/// 20NG stream of `bench_cluster`) made R's learning take 0.137 s where the other timesteps'
/// took 0.014–0.048 s; the memory keeps the same number of terms per document. An internal
/// budget, not a modelling choice: ordinary posts have far fewer shared terms, so their
/// clusters are unchanged.
pub const TOPIC_MAX_TERMS: usize = 256;

fn default_merge() -> f64 {
    // 20NG CIKM protocol, default detector, seeds 0/1/2: DICTCLUST F1 0.147 / 0.164 / 0.127 at
    // 0.3 vs 0.118 / 0.130 / 0.123 at 0.5; perfect detection 0.523 / 0.519 / 0.463 vs
    // 0.329 / 0.313 / 0.276 (docs/RESULTS.md, "Emerging topics")
    0.3
}

impl Default for TopicParams {
    fn default() -> Self {
        TopicParams {
            k1: 10,
            min_support: 3,
            top_terms: 10,
            representatives: 3,
            alternations: 3,
            merge_cosine: default_merge(),
            lambda: default_topic_lambda(),
        }
    }
}

/// DICTCLUST over the documents at batch positions `novel` (vectors in `docs`, scores in
/// `scores`): learn R (m × k₁) on them (atoms initialised farthest-first, so every
/// well-separated group gets one), assign each to its strongest atom, keep atoms with at
/// least `min_support` documents. R is learned over the terms at least two of the novel
/// documents share; a document sharing none belongs to no cluster. A document whose code is
/// all zero (no atom reaches the screening rule) goes to the atom holding most of its mass, so
/// every other novel document belongs to exactly one cluster. Deterministic in (`seed`, `timestep`). Topics are
/// ordered by size, then atom.
pub fn dictclust(
    docs: &[SparseDoc],
    scores: &[f64],
    novel: &[usize],
    m: usize,
    coding: &CodingParams,
    params: &TopicParams,
    seed: u64,
) -> (Vec<Topic>, Vec<Option<u32>>) {
    let mut assignment: Vec<Option<u32>> = vec![None; docs.len()];
    let sel: Vec<SparseDoc> = novel.iter().map(|&j| docs[j].clone()).collect();
    if sel.len() < params.min_support.max(1) || params.k1 == 0 {
        return (Vec::new(), assignment);
    }
    let k1 = params.k1.min(sel.len());
    let coding = &CodingParams {
        max_iter: coding.max_iter.min(TOPIC_MAX_ITER),
        lambda: params.lambda,
        ..coding.clone()
    };
    let bp = BootstrapParams {
        alternations: params.alternations,
        a_step_iter: 30,
        init: AtomInit::FarthestFirst,
    };
    // R is learned over the terms that at least two novel documents share: a term of one
    // document carries no co-occurrence, only takes atom mass, and (with P = 0 elsewhere)
    // its row is most of the A-step's work. The codes do not depend on those rows' loss,
    // which is the same constant for every code.
    let shared = shared_terms(&sel, TOPIC_MAX_TERMS);
    let r: Array2<f32> = bootstrap(&shared, m, k1, coding, &bp, seed);
    let cd = CodingDict::from_dense(r.view(), coding.step);
    let codes = code_batch(&cd, &shared, coding);
    let mut members: Vec<Vec<(usize, f64)>> = vec![Vec::new(); k1];
    for (q, (d, c)) in shared.iter().zip(&codes).enumerate() {
        if d.is_empty() {
            // shares no term with any other novel document: in no topic
            continue;
        }
        let best = c
            .atoms
            .iter()
            .zip(&c.weights)
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(&a, &w)| (a as usize, w));
        let (atom, w) = match best {
            Some(b) => b,
            None => {
                // most of the document's mass: Σ_{i ∈ S} R_ij
                let mut s = vec![0.0f64; k1];
                for &id in &d.ids {
                    for (sj, &v) in s.iter_mut().zip(r.row(id as usize).iter()) {
                        *sj += v as f64;
                    }
                }
                let mut b = 0;
                for j in 1..k1 {
                    if s[j] > s[b] {
                        b = j;
                    }
                }
                (b, 0.0)
            }
        };
        members[atom].push((q, w));
        assignment[novel[q]] = Some(atom as u32);
    }
    // Merge near-duplicate atoms (union-find over pairs with cosine ≥ merge_cosine).
    let mut root: Vec<usize> = (0..k1).collect();
    fn find(root: &mut [usize], mut a: usize) -> usize {
        while root[a] != a {
            root[a] = root[root[a]];
            a = root[a];
        }
        a
    }
    if params.merge_cosine < 1.0 {
        // centroid (ℓ2-normalised mean of the member documents) of each non-empty cluster
        let cents: Vec<std::collections::HashMap<u32, f64>> = members
            .iter()
            .map(|mem| {
                let mut c = std::collections::HashMap::new();
                for &(q, _) in mem {
                    let d = &sel[q];
                    let n = d.vals.iter().map(|v| v * v).sum::<f64>().sqrt();
                    for (&i, &v) in d.ids.iter().zip(&d.vals) {
                        *c.entry(i).or_insert(0.0) += v / n;
                    }
                }
                let n = c.values().map(|v| v * v).sum::<f64>().sqrt();
                c.values_mut().for_each(|v| *v /= n.max(f64::MIN_POSITIVE));
                c
            })
            .collect();
        for a in 0..k1 {
            for b in a + 1..k1 {
                if cents[a].is_empty() || cents[b].is_empty() {
                    continue;
                }
                let (small, big) = if cents[a].len() < cents[b].len() {
                    (&cents[a], &cents[b])
                } else {
                    (&cents[b], &cents[a])
                };
                let cos: f64 = small
                    .iter()
                    .map(|(i, v)| v * big.get(i).unwrap_or(&0.0))
                    .sum();
                if cos >= params.merge_cosine {
                    let (ra, rb) = (find(&mut root, a), find(&mut root, b));
                    root[ra.max(rb)] = ra.min(rb);
                }
            }
        }
    }
    let mut groups: Vec<Vec<(usize, f64)>> = vec![Vec::new(); k1];
    for (atom, mem) in members.into_iter().enumerate() {
        let g = find(&mut root, atom);
        groups[g].extend(mem);
    }
    for a in assignment.iter_mut().flatten() {
        *a = find(&mut root, *a as usize) as u32;
    }
    let mut topics = Vec::new();
    for (atom, mem) in groups.iter_mut().enumerate() {
        if mem.len() < params.min_support {
            continue;
        }
        mem.sort_by_key(|&(q, _)| q);
        // the topic's atom: the sum of its merged atoms
        let mut col = vec![0.0f32; m];
        for j in (0..k1).filter(|&j| find(&mut root, j) == atom) {
            for (c, &v) in col.iter_mut().zip(r.column(j).iter()) {
                *c += v;
            }
        }
        let mut terms: Vec<(u32, f32)> = col
            .iter()
            .enumerate()
            .filter(|(_, &v)| v > 0.0)
            .map(|(i, &v)| (i as u32, v))
            .collect();
        let total: f64 = terms.iter().map(|t| t.1 as f64).sum();
        let atom_vector: Vec<(u32, f32)> = terms
            .iter()
            .map(|&(i, v)| (i, (v as f64 / total * (1.0 - 1e-6)) as f32))
            .collect();
        terms.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        terms.truncate(params.top_terms);
        let mut rep = mem.clone();
        rep.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        topics.push(Topic {
            atom: atom as u32,
            members: mem.iter().map(|&(q, _)| novel[q]).collect(),
            terms,
            atom_vector,
            representatives: rep
                .iter()
                .take(params.representatives)
                .map(|&(q, _)| novel[q])
                .collect(),
            mean_score: mem.iter().map(|&(q, _)| scores[novel[q]]).sum::<f64>() / mem.len() as f64,
            kind: TopicKind::Emerging,
            strength: mem.len() as f64 / scores.len().max(1) as f64,
            profile: Vec::new(),
            event: None,
        });
    }
    topics.sort_by(|a, b| {
        b.members
            .len()
            .cmp(&a.members.len())
            .then(a.atom.cmp(&b.atom))
    });
    (topics, assignment)
}

/// Each document restricted to the terms at least two of `docs` share, at most `max` of them
/// (its heaviest, [`heaviest`]), values as they were, ids increasing.
fn shared_terms(docs: &[SparseDoc], max: usize) -> Vec<SparseDoc> {
    let mut df = std::collections::HashMap::<u32, u32>::new();
    for d in docs {
        for &i in &d.ids {
            *df.entry(i).or_insert(0) += 1;
        }
    }
    docs.iter()
        .map(|d| {
            let mut kept: Vec<(u32, f64)> = d
                .ids
                .iter()
                .zip(&d.vals)
                .filter(|(i, _)| df[*i] >= 2)
                .map(|(&i, &v)| (i, v))
                .collect();
            heaviest(&mut kept, max);
            let (ids, vals) = kept.into_iter().unzip();
            SparseDoc { ids, vals }
        })
        .collect()
}

/// Keep the `max` largest values of `terms` (ties by lower id), in increasing id order; a
/// shorter list is left as it is.
fn heaviest(terms: &mut Vec<(u32, f64)>, max: usize) {
    if terms.len() <= max {
        return;
    }
    terms.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    terms.truncate(max);
    terms.sort_unstable_by_key(|t| t.0);
}

/// Pairwise precision, recall and F1 of a clustering of novel documents (CIKM 2011, §7):
/// `truth[i]` is the true emerging cluster of document i (None if it is not truly novel),
/// `found[i]` the system's cluster (None if it was not detected as novel). Precision = pairs
/// together in both / pairs together in `found`; recall = pairs together in both / pairs
/// together in `truth`; F1 their harmonic mean. Empty denominators give 0.
pub fn pairwise_prf(truth: &[Option<usize>], found: &[Option<usize>]) -> (f64, f64, f64) {
    assert_eq!(truth.len(), found.len());
    let (mut both, mut in_found, mut in_truth) = (0u64, 0u64, 0u64);
    for i in 0..truth.len() {
        for j in i + 1..truth.len() {
            let t = truth[i].is_some() && truth[i] == truth[j];
            let f = found[i].is_some() && found[i] == found[j];
            in_truth += t as u64;
            in_found += f as u64;
            both += (t && f) as u64;
        }
    }
    let p = if in_found > 0 {
        both as f64 / in_found as f64
    } else {
        0.0
    };
    let r = if in_truth > 0 {
        both as f64 / in_truth as f64
    } else {
        0.0
    };
    let f1 = if p + r > 0.0 {
        2.0 * p * r / (p + r)
    } else {
        0.0
    };
    (p, r, f1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kept terms are the heaviest (every kept value ≥ every dropped one; on equal
    /// values the lower ids are kept), in increasing id order; a short list is untouched.
    #[test]
    fn heaviest_keeps_the_largest_values_by_id() {
        let all: Vec<(u32, f64)> = (0..40u32)
            .map(|i| (i * 3, f64::from((i * 7) % 11) + 0.5))
            .collect();
        for max in [0, 1, 5, 12, 39, 40, 60] {
            let mut kept = all.clone();
            heaviest(&mut kept, max);
            assert_eq!(kept.len(), max.min(all.len()));
            assert!(kept.windows(2).all(|w| w[0].0 < w[1].0), "max {max}");
            let dropped: Vec<&(u32, f64)> = all.iter().filter(|t| !kept.contains(t)).collect();
            for k in &kept {
                for d in &dropped {
                    assert!(
                        k.1 > d.1 || (k.1 == d.1 && k.0 < d.0),
                        "max {max}: {k:?} vs {d:?}"
                    );
                }
            }
        }
        let mut short = vec![(9, 0.1), (2, 0.7)];
        heaviest(&mut short, 5);
        assert_eq!(short, vec![(9, 0.1), (2, 0.7)]);
    }

    /// A term of one document only is dropped; a long document keeps its `max` heaviest
    /// shared terms with their values; the others keep all their shared terms.
    #[test]
    fn topic_documents_keep_their_heaviest_shared_terms() {
        let doc = |pairs: Vec<(u32, f64)>| SparseDoc {
            ids: pairs.iter().map(|p| p.0).collect(),
            vals: pairs.iter().map(|p| p.1).collect(),
        };
        // the long document: terms 0..300, weight rising with the id; term 1000 its own
        let long = doc((0..300)
            .map(|i| (i, 1.0 + f64::from(i)))
            .chain([(1000, 99.0)])
            .collect());
        let other = doc((0..300).map(|i| (i, 0.5)).collect());
        let short = doc(vec![(3, 0.25), (7, 0.75), (2000, 1.0)]);
        let out = shared_terms(&[long, other, short], 256);
        // the long one: its 256 heaviest shared terms are 44..300; 1000 is nobody else's
        assert_eq!(out[0].ids, (44..300).collect::<Vec<u32>>());
        assert_eq!(out[0].vals[0], 45.0);
        assert_eq!(out[1].ids.len(), 256);
        assert_eq!(out[2].ids, vec![3, 7]);
        assert_eq!(out[2].vals, vec![0.25, 0.75]);
    }

    #[test]
    fn pairwise_scores_of_the_cikm_worked_example() {
        // P = {p1..p7}; true novel {p3,p4,p5} in one cluster; found {(p3,p4,p6),(p5,p7)}.
        let truth = [None, None, Some(0), Some(0), Some(0), None, None];
        let found = [None, None, Some(0), Some(0), Some(1), Some(0), Some(1)];
        let (p, r, f1) = pairwise_prf(&truth, &found);
        assert!((p - 1.0 / 4.0).abs() < 1e-12);
        assert!((r - 1.0 / 3.0).abs() < 1e-12);
        assert!((f1 - 2.0 / 7.0).abs() < 1e-12);
        assert_eq!(
            pairwise_prf(&[None, None], &[Some(0), Some(1)]),
            (0.0, 0.0, 0.0)
        );
        assert_eq!(
            pairwise_prf(&[Some(1), Some(1)], &[Some(4), Some(4)]),
            (1.0, 1.0, 1.0)
        );
    }
}
