//! The emerging-topic evaluation of `novad eval` on planted cases: the threshold sweep, the
//! k-means baseline (best of restarts), DICTCLUST through the evaluation's compaction, and
//! the interpolated precision–recall curve.

use novad_lab::eval::{
    best_point, compact, dictclust_assign, interpolated_precision, kmeans_run_seed,
    spherical_kmeans_best, spherical_kmeans_run, sweep, sweep_thresholds, SweepPoint,
};
use novad_models::l1::coding::CodingParams;
use novad_models::l1::dictclust::{dictclust, pairwise_prf, TopicParams};
use novad_models::text::SparseDoc;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` documents of a group whose vocabulary is `vocab` (term ids): each uses `per_doc`
/// distinct random terms of it with random positive weights, unit ℓ1, ids sorted.
fn group(vocab: &[u32], n: usize, per_doc: usize, rng: &mut ChaCha8Rng) -> Vec<SparseDoc> {
    (0..n)
        .map(|_| {
            let mut ids: Vec<u32> = sample(rng, vocab.len(), per_doc)
                .into_iter()
                .map(|i| vocab[i])
                .collect();
            ids.sort_unstable();
            let w: Vec<f64> = ids.iter().map(|_| rng.random_range(0.5..1.5)).collect();
            let s: f64 = w.iter().sum();
            SparseDoc {
                ids,
                vals: w.iter().map(|v| v / s).collect(),
            }
        })
        .collect()
}

/// One old group (not novel) and two novel groups with disjoint vocabularies of 12 terms
/// scattered over a 600-term space; 8 terms per document, so any two documents of a group
/// share at least 4 terms. Returns (docs, truth, scores): the novel documents score 0.9 + ε,
/// the old ones 0.2 + ε, and the batch is interleaved.
fn planted(seed: u64) -> (Vec<SparseDoc>, Vec<Option<usize>>, Vec<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let vocab = |g: u32| -> Vec<u32> { (0..12).map(|i| 7 + g * 193 + i * 13).collect() };
    let old = group(&vocab(0), 20, 8, &mut rng);
    let a = group(&vocab(1), 10, 8, &mut rng);
    let b = group(&vocab(2), 10, 8, &mut rng);
    let mut docs = Vec::new();
    let mut truth = Vec::new();
    let mut scores = Vec::new();
    let (mut io, mut ia, mut ib) = (old.into_iter(), a.into_iter(), b.into_iter());
    for j in 0..40 {
        let (d, t, s) = match j % 4 {
            0 => (ia.next().unwrap(), Some(0), 0.9),
            1 => (io.next().unwrap(), None, 0.2),
            2 => (ib.next().unwrap(), Some(1), 0.9),
            _ => (io.next().unwrap(), None, 0.2),
        };
        docs.push(d);
        truth.push(t);
        scores.push(s + rng.random_range(0.0..0.05));
    }
    (docs, truth, scores)
}

const M: usize = 600;

#[test]
fn perfect_detection_and_planted_groups_give_f1_one() {
    let (docs, truth, scores) = planted(1);
    let coding = CodingParams::paper();
    let tp = TopicParams {
        k1: 2,
        ..TopicParams::default()
    };
    let fractions = [0.25, 0.5, 0.75, 1.0];
    // DICTCLUST (what DICTCLUST / NN-DICT run)
    let pts = sweep(&scores, &truth, &fractions, |sel| {
        let (local, m) = compact(&docs, sel);
        dictclust_assign(&local, m, &coding, &tp, 3)
    });
    assert_eq!(pts.len(), 4);
    let b = best_point(&pts).unwrap();
    assert_eq!((b.detected, b.detected_novel, b.clusters), (20, 20, 2));
    assert_eq!((b.precision, b.recall, b.f1), (1.0, 1.0, 1.0));
    assert!(b.threshold >= 0.9 && b.threshold < 0.95, "{}", b.threshold);
    // detecting everything: the old group joins a cluster, precision drops
    let all = pts.last().unwrap();
    assert_eq!(all.detected, 40);
    assert!(all.f1 < 1.0);
    // spherical k-means (DICT-KM / NN-KM), K = 2, best of 8
    let pts = sweep(&scores, &truth, &fractions, |sel| {
        let (local, m) = compact(&docs, sel);
        spherical_kmeans_best(&local, m, 2, 8, 20, 11).0
    });
    let b = best_point(&pts).unwrap();
    assert_eq!((b.detected, b.f1), (20, 1.0));
    // K = 3 on everything: the three planted groups exactly
    let (assign, _) = spherical_kmeans_best(&docs, M, 3, 8, 20, 5);
    let groups: Vec<Option<usize>> = truth.iter().map(|t| Some(t.map_or(2, |g| g))).collect();
    assert_eq!(pairwise_prf(&groups, &assign), (1.0, 1.0, 1.0));
}

#[test]
fn kmeans_keeps_the_best_of_its_restarts() {
    // Three unequal groups and K = 3: a run whose two seeds fall in one group can end in a
    // worse local optimum; the kept run must be the best of the 8.
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut docs = Vec::new();
    for (g, n) in [(0u32, 30usize), (1, 6), (2, 6)] {
        let vocab: Vec<u32> = (0..12).map(|i| g * 50 + i).collect();
        docs.extend(group(&vocab, n, 8, &mut rng));
    }
    let seed = 77;
    let runs: Vec<(Vec<Option<usize>>, f64)> = (0..8)
        .map(|r| spherical_kmeans_run(&docs, 200, 3, 10, kmeans_run_seed(seed, r)))
        .collect();
    let (assign, obj) = spherical_kmeans_best(&docs, 200, 3, 8, 10, seed);
    let max = runs.iter().map(|r| r.1).fold(f64::MIN, f64::max);
    assert_eq!(obj, max);
    let first_best = runs.iter().position(|r| r.1 == max).unwrap();
    assert_eq!(assign, runs[first_best].0);
    // restarts matter here (some run is worse), and the objective is Σ cosine ≤ n
    assert!(runs.iter().any(|r| r.1 < max - 1e-9), "{runs:?}");
    assert!(obj <= docs.len() as f64 + 1e-9);
    // one cluster per document, K distinct clusters, deterministic
    assert!(assign.iter().all(|a| a.is_some_and(|c| c < 3)));
    assert_eq!(spherical_kmeans_best(&docs, 200, 3, 8, 10, seed).0, assign);
    // K larger than the number of documents is capped
    let (a2, _) = spherical_kmeans_best(&docs[..2], 200, 10, 2, 5, 1);
    assert!(a2.iter().all(|a| a.is_some_and(|c| c < 2)));
}

#[test]
fn the_sweep_picks_the_f1_maximising_threshold() {
    // docs 0–3: new group 0, docs 4–5: new group 1, 6–9: not novel. The clusterer puts every
    // truly novel document in its group's cluster and every other one into cluster 0, so
    // precision falls as old documents are detected. By hand (7 true pairs):
    //   thr .95 {0}: F 0 | .90 {0,1}: P 1, R 1/7 | .85 +6: P 1/3, R 1/7 | .80 +2: P 1/2, R 3/7
    //   .70 +3: P 6/10, R 6/7 | .60 +4: same | .50 +5: P 7/11, R 1 → F 7/9 (the best)
    //   .40 +7: P 7/16, R 1 | …
    let scores = [0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.85, 0.4, 0.3, 0.2];
    let truth = [
        Some(0),
        Some(0),
        Some(0),
        Some(0),
        Some(1),
        Some(1),
        None,
        None,
        None,
        None,
    ];
    let fractions: Vec<f64> = (1..=10).map(|i| i as f64 / 10.0).collect();
    let mut calls = Vec::new();
    let pts = sweep(&scores, &truth, &fractions, |sel| {
        calls.push(sel.to_vec());
        sel.iter().map(|&j| Some(truth[j].unwrap_or(0))).collect()
    });
    assert_eq!(pts.len(), 10);
    assert_eq!(calls[2], vec![0, 1, 6], "detected = score ≥ threshold");
    let f: Vec<f64> = pts.iter().map(|p| p.f1).collect();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    assert!(close(f[0], 0.0));
    assert!(close(f[1], 0.25));
    assert!(close(f[3], 6.0 / 13.0));
    assert!(close(f[4], 12.0 / 17.0) && close(f[5], 12.0 / 17.0));
    assert!(close(f[6], 7.0 / 9.0));
    let b = best_point(&pts).unwrap();
    assert_eq!(b.threshold, 0.5);
    assert_eq!(b.detected, 7);
    assert!(close(b.precision, 7.0 / 11.0) && close(b.recall, 1.0));
    assert!(close(b.fraction, 0.7), "7th of 10 scores");

    // ties in F1 go to the higher threshold (the earlier point)
    let p = |thr: f64, f1: f64| SweepPoint {
        fraction: 0.0,
        threshold: thr,
        detected: 0,
        detected_novel: 0,
        clusters: 0,
        precision: f1,
        recall: f1,
        f1,
    };
    let tied = [p(0.9, 0.3), p(0.8, 0.5), p(0.7, 0.5), p(0.6, 0.1)];
    assert_eq!(best_point(&tied).unwrap().threshold, 0.8);
    assert!(best_point(&[]).is_none());
}

#[test]
fn thresholds_follow_ranks_and_keep_ties_together() {
    let s = [0.2, 0.9, 0.9, 0.5, 0.1];
    // ranks ⌈q·5⌉: q .2 → 1st = .9, .4 → 2nd = .9 (same), .6 → 3rd = .5, 1 → .1
    let t = sweep_thresholds(&s, &[1.0, 0.4, 0.2, 0.6, 0.0, 7.0]);
    assert_eq!(t, vec![(0.2, 0.9), (0.6, 0.5), (1.0, 0.1)]);
    assert!(sweep_thresholds(&[], &[0.5]).is_empty());
    // a tied block is detected whole: fraction 0.2 of these scores detects both 0.9s
    let truth = [None, Some(0), Some(0), None, None];
    let pts = sweep(&s, &truth, &[0.2], |sel| {
        assert_eq!(sel, &[1, 2]);
        vec![Some(0); sel.len()]
    });
    assert_eq!(pts[0].f1, 1.0);
}

#[test]
fn interpolated_precision_is_the_best_precision_at_or_beyond_each_recall() {
    let p = |precision: f64, recall: f64| SweepPoint {
        fraction: 0.0,
        threshold: 0.0,
        detected: 0,
        detected_novel: 0,
        clusters: 0,
        precision,
        recall,
        f1: 0.0,
    };
    let pts = [p(0.5, 0.2), p(0.8, 0.4), p(0.3, 0.9)];
    let levels = [0.0, 0.2, 0.3, 0.4, 0.5, 0.9, 1.0];
    assert_eq!(
        interpolated_precision(&pts, &levels),
        vec![0.8, 0.8, 0.8, 0.8, 0.3, 0.3, 0.0]
    );
}

#[test]
fn compaction_gives_the_full_vocabulary_clustering() {
    // the evaluation runs DICTCLUST on the detected documents' own terms; it must assign
    // exactly as the daemon's call on the full vocabulary does
    let (docs, truth, scores) = planted(4);
    let coding = CodingParams::paper();
    let tp = TopicParams::default(); // k₁ = 10, merging on
    let novel: Vec<usize> = (0..docs.len()).filter(|&j| truth[j].is_some()).collect();
    let (topics, _) = dictclust(&docs, &scores, &novel, M, &coding, &tp, 21);
    // the full-vocabulary run's reported topics, as topic indices per document
    let mut full: Vec<Option<usize>> = vec![None; docs.len()];
    for (i, t) in topics.iter().enumerate() {
        for &j in &t.members {
            full[j] = Some(i);
        }
    }
    let (local, m) = compact(&docs, &novel);
    assert_eq!(m, 24, "two groups × 12 terms");
    assert!(local
        .iter()
        .all(|d| d.ids.windows(2).all(|w| w[0] < w[1]) && d.ids.iter().all(|&i| (i as usize) < m)));
    let loc = dictclust_assign(&local, m, &coding, &tp, 21);
    let full_sel: Vec<Option<usize>> = novel.iter().map(|&j| full[j]).collect();
    assert_eq!(loc, full_sel);
    assert!(loc.iter().all(|a| a.is_some()));
    // the same for k-means
    let (km_local, o1) = spherical_kmeans_best(&local, m, 4, 3, 10, 8);
    let sel: Vec<SparseDoc> = novel.iter().map(|&j| docs[j].clone()).collect();
    let (km_full, o2) = spherical_kmeans_best(&sel, M, 4, 3, 10, 8);
    assert_eq!(km_local, km_full);
    assert!((o1 - o2).abs() < 1e-9);
}
