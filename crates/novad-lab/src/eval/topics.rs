//! The emerging-topic evaluation of `novad eval` (CIKM 2011, §7): at every evaluated timestep
//! a detector's scores are thresholded, the detected novel documents are clustered, and the
//! clustering is scored with pairwise precision / recall / F1 over the novel documents
//! ([`novad_models::l1::dictclust::pairwise_prf`]; truth = the true new group of every truly novel document,
//! found = the cluster of every detected document). Four methods, as in the paper:
//!
//! | method | detection | clustering |
//! |---|---|---|
//! | DICTCLUST | ℓ1-online scores | [`novad_models::l1::dictclust::dictclust`] (the daemon's topic stage) |
//! | DICT-KM | ℓ1-online scores | spherical k-means, K clusters, best of `restarts` random inits |
//! | NN-KM | NN-cosine scores | spherical k-means |
//! | NN-DICT | NN-cosine scores | DICTCLUST |
//!
//! The threshold is swept, as the paper does, and the best F1 per method and timestep is
//! reported. The sweep points are score thresholds: for each fraction q of the grid the
//! threshold is the ⌈q·n⌉-th largest score of the timestep's n non-empty documents, and every
//! document scoring at least the threshold is detected (tied scores are all in or all out, so
//! the order of the batch never decides). Fractions giving the same threshold are one point.
//!
//! Both clusterers run on the detected documents with their term ids renumbered to the terms
//! those documents use ([`compact`]). This is exact: every other row of the topic dictionary
//! R or of a k-means centroid stays zero (no document puts mass there), so the result is the
//! one on the full vocabulary, at a fraction of the memory (the A-step keeps dense m × n work
//! arrays).

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use serde::Serialize;

use novad_models::l1::coding::CodingParams;
use novad_models::l1::dictclust::{dictclust, pairwise_prf, TopicParams};
use novad_models::l1::dictionary::{init_atoms, AtomInit};
use novad_models::text::SparseDoc;

/// A method of the emerging-topic evaluation: a detector followed by a clusterer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopicMethod {
    /// ℓ1-online detection + DICTCLUST (the paper's method).
    Dictclust,
    /// ℓ1-online detection + spherical k-means.
    DictKm,
    /// Nearest-neighbour cosine detection + spherical k-means.
    NnKm,
    /// Nearest-neighbour cosine detection + DICTCLUST.
    NnDict,
}

impl TopicMethod {
    pub const ALL: [TopicMethod; 4] = [
        TopicMethod::Dictclust,
        TopicMethod::DictKm,
        TopicMethod::NnKm,
        TopicMethod::NnDict,
    ];

    pub fn key(self) -> &'static str {
        match self {
            TopicMethod::Dictclust => "dictclust",
            TopicMethod::DictKm => "dict-km",
            TopicMethod::NnKm => "nn-km",
            TopicMethod::NnDict => "nn-dict",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            TopicMethod::Dictclust => "DICTCLUST",
            TopicMethod::DictKm => "DICT-KM",
            TopicMethod::NnKm => "NN-KM",
            TopicMethod::NnDict => "NN-DICT",
        }
    }

    /// Detection by the ℓ1-online scores (else by NN cosine).
    pub fn l1_detection(self) -> bool {
        matches!(self, TopicMethod::Dictclust | TopicMethod::DictKm)
    }

    /// Clustering by DICTCLUST (else by spherical k-means).
    pub fn dict_clustering(self) -> bool {
        matches!(self, TopicMethod::Dictclust | TopicMethod::NnDict)
    }
}

/// Parameters of the emerging-topic evaluation (recorded in results.json).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopicEvalParams {
    /// Fractions q of each timestep's non-empty documents defining the swept thresholds.
    pub fractions: Vec<f64>,
    /// DICTCLUST's parameters (k₁ = `dict.k1`).
    pub dict: TopicParams,
    /// K of spherical k-means.
    pub k: usize,
    /// k-means runs from random documents; the one with the best objective is kept.
    pub restarts: usize,
    /// Iterations of each k-means run.
    pub kmeans_iterations: u32,
    /// Recall levels of the interpolated precision–recall curves.
    pub recall_levels: Vec<f64>,
}

impl TopicEvalParams {
    /// 21 recall levels 0, 0.05, …, 1.
    pub fn default_recall_levels() -> Vec<f64> {
        (0..=20).map(|i| i as f64 / 20.0).collect()
    }
}

/// One point of a threshold sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    /// The smallest grid fraction giving this threshold.
    pub fraction: f64,
    /// Score threshold: detected = score ≥ threshold.
    pub threshold: f64,
    /// Documents detected, and how many of them are truly novel.
    pub detected: usize,
    pub detected_novel: usize,
    /// Clusters among the detected documents.
    pub clusters: usize,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
}

/// One method at one timestep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopicMethodResult {
    /// The sweep point with the largest F1 (ties: the higher threshold). None without
    /// documents.
    pub best: Option<SweepPoint>,
    /// Every sweep point, threshold decreasing.
    pub sweep: Vec<SweepPoint>,
    /// Interpolated precision at [`TopicEvalParams::recall_levels`]: the largest precision of
    /// a sweep point with at least that recall (0 if none).
    pub interpolated_precision: Vec<f64>,
    /// Clustering time over the whole sweep (detection excluded: the scores are the
    /// detectors').
    pub seconds: f64,
}

/// What the daemon's own topic stage cost at this timestep (ℓ1-online's `Model::step`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DaemonTopicCost {
    /// Documents the daemon's threshold rule marked novel (DICTCLUST's input).
    pub novel: usize,
    pub topics: usize,
    pub seconds_topics: f64,
    /// The rest of the timestep: vectorise + coding + dictionary update.
    pub seconds_rest: f64,
}

/// The emerging-topic evaluation of one timestep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopicStep {
    /// Non-empty truly novel documents and their true groups.
    pub truly_novel: usize,
    pub true_topics: usize,
    /// By [`TopicMethod::key`].
    pub methods: BTreeMap<String, TopicMethodResult>,
    /// The clusterers alone: perfect detection (exactly the truly novel documents) clustered
    /// by DICTCLUST (`dict`) and by k-means (`km`) — separates clustering from detection.
    pub oracle: BTreeMap<String, SweepPoint>,
    pub daemon: Option<DaemonTopicCost>,
}

/// Averages of one method over the evaluated timesteps.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TopicSummary {
    pub timesteps: usize,
    /// Mean over timesteps of the best F1, and of P and R at that point.
    pub mean_f1: f64,
    pub mean_precision: f64,
    pub mean_recall: f64,
    /// Mean number of detected documents at the best point.
    pub mean_detected: f64,
    /// Mean interpolated precision per recall level (the plotted PR curve).
    pub mean_interpolated_precision: Vec<f64>,
    pub mean_seconds: f64,
}

/// The documents at positions `sel` with their term ids renumbered to 0..m′ in increasing
/// order (m′ = distinct terms among them). Ids stay sorted when they were.
pub fn compact(docs: &[SparseDoc], sel: &[usize]) -> (Vec<SparseDoc>, usize) {
    let mut terms: Vec<u32> = sel
        .iter()
        .flat_map(|&j| docs[j].ids.iter().copied())
        .collect();
    terms.sort_unstable();
    terms.dedup();
    let map: HashMap<u32, u32> = terms
        .iter()
        .enumerate()
        .map(|(i, &t)| (t, i as u32))
        .collect();
    let out = sel
        .iter()
        .map(|&j| SparseDoc {
            ids: docs[j].ids.iter().map(|i| map[i]).collect(),
            vals: docs[j].vals.clone(),
        })
        .collect();
    (out, terms.len())
}

/// One run of spherical k-means (cosine) of `docs` into `k` clusters (at most one per
/// non-empty document): `iterations` steps of the crate's spherical k-means from `k` distinct
/// random documents (seeded; [`AtomInit::KMeans`] with every term kept), then every document
/// is assigned to the centroid of largest cosine (ties: lowest index). Returns the cluster of
/// every document (None for an empty document) and the objective Σ cos(document, its
/// centroid).
pub fn spherical_kmeans_run(
    docs: &[SparseDoc],
    m: usize,
    k: usize,
    iterations: u32,
    seed: u64,
) -> (Vec<Option<usize>>, f64) {
    let nonempty = docs.iter().filter(|d| !d.is_empty()).count();
    let k = k.min(nonempty);
    if k == 0 || m == 0 {
        return (vec![None; docs.len()], 0.0);
    }
    let init = AtomInit::KMeans {
        top_terms: m,
        iterations,
    };
    // columns ∝ the ℓ2-normalised centroids (init_atoms scales them to unit ℓ1)
    let a = init_atoms(docs, m, k, &init, seed);
    let cn: Vec<f64> = a
        .columns()
        .into_iter()
        .map(|c| {
            c.iter()
                .map(|&v| (v as f64) * (v as f64))
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    let mut objective = 0.0;
    let mut assign = Vec::with_capacity(docs.len());
    let mut sc = vec![0.0f64; k];
    for d in docs {
        if d.is_empty() {
            assign.push(None);
            continue;
        }
        let dn = d.vals.iter().map(|v| v * v).sum::<f64>().sqrt();
        sc.iter_mut().for_each(|x| *x = 0.0);
        for (&i, &v) in d.ids.iter().zip(&d.vals) {
            for (s, &x) in sc.iter_mut().zip(a.row(i as usize)) {
                *s += v * x as f64;
            }
        }
        let mut b = None;
        let mut bv = f64::NEG_INFINITY;
        for c in 0..k {
            if cn[c] > 0.0 {
                let cos = sc[c] / (cn[c] * dn);
                if cos > bv {
                    bv = cos;
                    b = Some(c);
                }
            }
        }
        if b.is_some() {
            objective += bv;
        }
        assign.push(b);
    }
    (assign, objective)
}

/// The seed of run `r` of [`spherical_kmeans_best`].
pub fn kmeans_run_seed(seed: u64, r: usize) -> u64 {
    seed ^ (r as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Spherical k-means as the CIKM paper runs it: `restarts` runs of [`spherical_kmeans_run`]
/// (run r seeded by [`kmeans_run_seed`]), keeping the one with the largest objective (ties:
/// the earlier run).
pub fn spherical_kmeans_best(
    docs: &[SparseDoc],
    m: usize,
    k: usize,
    restarts: usize,
    iterations: u32,
    seed: u64,
) -> (Vec<Option<usize>>, f64) {
    let mut best: Option<(Vec<Option<usize>>, f64)> = None;
    for r in 0..restarts.max(1) {
        let run = spherical_kmeans_run(docs, m, k, iterations, kmeans_run_seed(seed, r));
        if best.as_ref().is_none_or(|(_, o)| run.1 > *o) {
            best = Some(run);
        }
    }
    best.expect("at least one run")
}

/// DICTCLUST over all of `docs` (the daemon's [`dictclust`]): the emerging topic of every
/// document, i.e. the index of the reported topic holding it — None for a document whose
/// (merged) atom has fewer than `min_support` documents, which the daemon reports in no topic
/// (CIKM 2011: an atom with enough support is an emerging topic).
pub fn dictclust_assign(
    docs: &[SparseDoc],
    m: usize,
    coding: &CodingParams,
    params: &TopicParams,
    seed: u64,
) -> Vec<Option<usize>> {
    let all: Vec<usize> = (0..docs.len()).filter(|&j| !docs[j].is_empty()).collect();
    let scores = vec![0.0; docs.len()];
    let (topics, _) = dictclust(docs, &scores, &all, m, coding, params, seed);
    let mut found = vec![None; docs.len()];
    for (i, t) in topics.iter().enumerate() {
        for &j in &t.members {
            found[j] = Some(i);
        }
    }
    found
}

/// The thresholds of a sweep: for every fraction q in (0, 1] (larger values are clamped) the
/// ⌈q·n⌉-th largest of the n scores; (smallest fraction, threshold) pairs, one per distinct
/// threshold, threshold decreasing.
pub fn sweep_thresholds(scores: &[f64], fractions: &[f64]) -> Vec<(f64, f64)> {
    let n = scores.len();
    if n == 0 {
        return Vec::new();
    }
    let mut sorted = scores.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let mut fr: Vec<f64> = fractions
        .iter()
        .copied()
        .filter(|q| *q > 0.0 && q.is_finite())
        .map(|q| q.min(1.0))
        .collect();
    fr.sort_by(f64::total_cmp);
    let mut out: Vec<(f64, f64)> = Vec::new();
    for q in fr {
        // (the tolerance keeps 0.3 · 10 at rank 3 despite rounding)
        let r = ((q * n as f64 - 1e-9).ceil() as usize).clamp(1, n);
        let thr = sorted[r - 1];
        if out.last().is_none_or(|&(_, t)| t != thr) {
            out.push((q, thr));
        }
    }
    out
}

/// Sweep the detection threshold: at every threshold of [`sweep_thresholds`] the documents
/// scoring at least it are detected, `cluster` gets their positions (increasing) and returns
/// one cluster per detected document (None: unclustered), and the result is scored by
/// [`pairwise_prf`] against `truth` (one entry per score: the true new group, None if not
/// truly novel).
pub fn sweep<F>(
    scores: &[f64],
    truth: &[Option<usize>],
    fractions: &[f64],
    mut cluster: F,
) -> Vec<SweepPoint>
where
    F: FnMut(&[usize]) -> Vec<Option<usize>>,
{
    assert_eq!(scores.len(), truth.len());
    let mut out = Vec::new();
    for (q, thr) in sweep_thresholds(scores, fractions) {
        let sel: Vec<usize> = (0..scores.len()).filter(|&j| scores[j] >= thr).collect();
        let found_sel = cluster(&sel);
        assert_eq!(
            found_sel.len(),
            sel.len(),
            "one cluster per detected document"
        );
        let mut found: Vec<Option<usize>> = vec![None; scores.len()];
        for (&j, &c) in sel.iter().zip(&found_sel) {
            found[j] = c;
        }
        // pairs with neither side in a cluster count nowhere: score the union only
        let idx: Vec<usize> = (0..scores.len())
            .filter(|&j| truth[j].is_some() || found[j].is_some())
            .collect();
        let t: Vec<Option<usize>> = idx.iter().map(|&j| truth[j]).collect();
        let f: Vec<Option<usize>> = idx.iter().map(|&j| found[j]).collect();
        let (precision, recall, f1) = pairwise_prf(&t, &f);
        let mut cl: Vec<usize> = found_sel.iter().flatten().copied().collect();
        cl.sort_unstable();
        cl.dedup();
        out.push(SweepPoint {
            fraction: q,
            threshold: thr,
            detected: sel.len(),
            detected_novel: sel.iter().filter(|&&j| truth[j].is_some()).count(),
            clusters: cl.len(),
            precision,
            recall,
            f1,
        });
    }
    out
}

/// The sweep point with the largest F1; ties go to the earlier point (the higher threshold).
pub fn best_point(points: &[SweepPoint]) -> Option<&SweepPoint> {
    let mut best: Option<&SweepPoint> = None;
    for p in points {
        if best.is_none_or(|b| p.f1 > b.f1) {
            best = Some(p);
        }
    }
    best
}

/// Interpolated precision at each recall level: the largest precision among the points with
/// recall ≥ the level (0 if none) — the standard interpolated PR curve.
pub fn interpolated_precision(points: &[SweepPoint], levels: &[f64]) -> Vec<f64> {
    levels
        .iter()
        .map(|&r| {
            points
                .iter()
                .filter(|p| p.recall >= r - 1e-12)
                .map(|p| p.precision)
                .fold(0.0, f64::max)
        })
        .collect()
}

/// Inputs of one timestep's evaluation. Every slice indexed by the timestep's non-empty
/// documents (`docs[i]` ↔ `truth[i]` ↔ the scores).
pub(crate) struct StepInput<'a> {
    pub docs: &'a [SparseDoc],
    pub truth: &'a [Option<usize>],
    /// Rounded ℓ1-online / NN scores (None: the detector did not run).
    pub l1: Option<&'a [f64]>,
    pub nn: Option<&'a [f64]>,
    pub coding: &'a CodingParams,
    pub dict_seed: u64,
    pub kmeans_seed: u64,
}

/// Evaluate every method whose detector ran (nothing when fewer than two documents are truly
/// novel: without a true pair recall is undefined).
pub(crate) fn evaluate_step(
    input: &StepInput<'_>,
    params: &TopicEvalParams,
) -> BTreeMap<String, TopicMethodResult> {
    let mut out = BTreeMap::new();
    if input.truth.iter().filter(|t| t.is_some()).count() < 2 {
        // no truly novel pair: recall, hence F1, is undefined
        return out;
    }
    for method in TopicMethod::ALL {
        let scores = if method.l1_detection() {
            input.l1
        } else {
            input.nn
        };
        let Some(scores) = scores else { continue };
        let mut seconds = 0.0;
        let points = sweep(scores, input.truth, &params.fractions, |sel| {
            let t0 = Instant::now();
            let (local, m) = compact(input.docs, sel);
            let found = if method.dict_clustering() {
                dictclust_assign(&local, m, input.coding, &params.dict, input.dict_seed)
            } else {
                spherical_kmeans_best(
                    &local,
                    m,
                    params.k,
                    params.restarts,
                    params.kmeans_iterations,
                    input.kmeans_seed,
                )
                .0
            };
            seconds += t0.elapsed().as_secs_f64();
            found
        });
        out.insert(
            method.key().to_string(),
            TopicMethodResult {
                best: best_point(&points).cloned(),
                interpolated_precision: interpolated_precision(&points, &params.recall_levels),
                sweep: points,
                seconds,
            },
        );
    }
    out
}

/// Perfect detection clustered by each clusterer (see [`TopicStep::oracle`]).
pub(crate) fn evaluate_oracle(
    input: &StepInput<'_>,
    params: &TopicEvalParams,
) -> BTreeMap<String, SweepPoint> {
    let mut out = BTreeMap::new();
    // scores 1 for the truly novel, 0 otherwise; the fraction = their share selects them
    let scores: Vec<f64> = input
        .truth
        .iter()
        .map(|t| t.is_some() as u8 as f64)
        .collect();
    let n_novel = input.truth.iter().filter(|t| t.is_some()).count();
    if n_novel < 2 {
        return out;
    }
    let q = n_novel as f64 / scores.len() as f64;
    for (key, dict) in [("dict", true), ("km", false)] {
        let pts = sweep(&scores, input.truth, &[q], |sel| {
            let (local, m) = compact(input.docs, sel);
            if dict {
                dictclust_assign(&local, m, input.coding, &params.dict, input.dict_seed)
            } else {
                spherical_kmeans_best(
                    &local,
                    m,
                    params.k,
                    params.restarts,
                    params.kmeans_iterations,
                    input.kmeans_seed,
                )
                .0
            }
        });
        if let Some(p) = pts.into_iter().next() {
            out.insert(key.to_string(), p);
        }
    }
    out
}

/// Per-method averages over the evaluated timesteps' topic results.
pub(crate) fn summarise(steps: &[&TopicStep], levels: usize) -> BTreeMap<String, TopicSummary> {
    let mut out = BTreeMap::new();
    for method in TopicMethod::ALL {
        let rs: Vec<&TopicMethodResult> = steps
            .iter()
            .filter_map(|s| s.methods.get(method.key()))
            .collect();
        let bests: Vec<&SweepPoint> = rs.iter().filter_map(|r| r.best.as_ref()).collect();
        if bests.is_empty() {
            continue;
        }
        let n = bests.len() as f64;
        let mean = |f: &dyn Fn(&SweepPoint) -> f64| bests.iter().map(|p| f(p)).sum::<f64>() / n;
        let mut ip = vec![0.0; levels];
        for r in &rs {
            for (a, b) in ip.iter_mut().zip(&r.interpolated_precision) {
                *a += b / rs.len() as f64;
            }
        }
        out.insert(
            method.key().to_string(),
            TopicSummary {
                timesteps: bests.len(),
                mean_f1: mean(&|p| p.f1),
                mean_precision: mean(&|p| p.precision),
                mean_recall: mean(&|p| p.recall),
                mean_detected: mean(&|p| p.detected as f64),
                mean_interpolated_precision: ip,
                mean_seconds: rs.iter().map(|r| r.seconds).sum::<f64>() / rs.len() as f64,
            },
        );
    }
    out
}

/// Averages of the oracle rows ([`TopicStep::oracle`]) by clusterer (`dict`, `km`); no curve.
pub(crate) fn summarise_oracle(steps: &[&TopicStep]) -> BTreeMap<String, TopicSummary> {
    let mut out = BTreeMap::new();
    for key in ["dict", "km"] {
        let pts: Vec<&SweepPoint> = steps.iter().filter_map(|s| s.oracle.get(key)).collect();
        if pts.is_empty() {
            continue;
        }
        let n = pts.len() as f64;
        let mean = |f: &dyn Fn(&SweepPoint) -> f64| pts.iter().map(|p| f(p)).sum::<f64>() / n;
        out.insert(
            key.to_string(),
            TopicSummary {
                timesteps: pts.len(),
                mean_f1: mean(&|p| p.f1),
                mean_precision: mean(&|p| p.precision),
                mean_recall: mean(&|p| p.recall),
                mean_detected: mean(&|p| p.detected as f64),
                ..Default::default()
            },
        );
    }
    out
}
