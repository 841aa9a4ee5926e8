//! OSTC learning through the streaming model: planted topics recovered by each dictionary step,
//! documents of an unseen topic scored novel, the bootstrap batch and empty documents, and
//! determinism independent of the thread count.
mod common;

use common::ostc::{parts_map, planted, small_params};
use novad_models::ostc::{OstcModel, OstcParams};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Train `params` on 400 planted documents (4 topics, seed `seed`) in batches of 100 and check
/// that each planted topic is matched by a distinct learned topic holding more than
/// `min_mass` of its mass on the planted topic's words.
fn assert_planted_recovered(params: OstcParams, seed: u64, min_mass: f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let texts = planted(&mut rng, &[0, 1, 2, 3], 400);
    let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    let mut m = OstcModel::new(params).unwrap();
    for chunk in refs.chunks(100) {
        m = m.step(chunk).unwrap().0;
    }
    let beta = m.beta();
    let v = m.vocab();
    let mut used = [false; 4];
    for k in 0..4 {
        let prefix = format!("topic{}", (b'a' + k as u8) as char);
        let mass = |j: usize| -> f64 {
            (0..v.len())
                .filter(|&i| v.term(i as u32).starts_with(&prefix))
                .map(|i| beta[[i, j]] as f64)
                .sum()
        };
        let (best, m) = (0..4)
            .filter(|&j| !used[j])
            .map(|j| (j, mass(j)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap();
        assert!(
            m > min_mass,
            "planted topic {k}: best learned topic {best} has mass {m}"
        );
        used[best] = true;
    }
}

#[test]
fn planted_topics_are_recovered() {
    assert_planted_recovered(small_params(3, 4), 1, 0.7);
}

/// Default parameters but K = 4 and more passes, for the planted-topic tests of a step rule.
fn planted_learner(step_rule: novad_models::ostc::dictionary::StepRule) -> OstcParams {
    OstcParams {
        seed: 5,
        k: 4,
        batch_size: 16,
        passes: 3,
        bootstrap_passes: 10,
        step_rule,
        ..OstcParams::default()
    }
}

/// The default dictionary step (stochastic EM, document-seeded start) with the default coding
/// parameters recovers the planted topics: each planted topic is matched by a distinct learned
/// topic holding most of its mass on the planted topic's words (> 0.5, twice their uniform share
/// 12/48: the EM step's uniform floor σ = 0.5 keeps half of each step's mass on all 48 terms).
#[test]
fn planted_topics_are_recovered_by_the_default_em_step() {
    assert_eq!(
        OstcParams::default().step_rule,
        novad_models::ostc::dictionary::StepRule::Em
    );
    assert_planted_recovered(
        planted_learner(novad_models::ostc::dictionary::StepRule::Em),
        11,
        0.5,
    );
}

/// The `stats` rule learns the planted topics through the daemon's model as well.
#[test]
fn planted_topics_are_recovered_by_the_stats_step() {
    assert_planted_recovered(
        planted_learner(novad_models::ostc::dictionary::StepRule::Stats),
        11,
        0.5,
    );
}

#[test]
fn documents_of_an_unseen_topic_score_higher_and_are_novel() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let old = planted(&mut rng, &[0, 1], 300);
    let new = planted(&mut rng, &[2], 10);
    let mut m = OstcModel::new(small_params(4, 3)).unwrap();
    for chunk in old.chunks(100) {
        let r: Vec<&str> = chunk.iter().map(|s| s.as_str()).collect();
        m = m.step(&r).unwrap().0;
    }
    let batch: Vec<&str> = old[..40].iter().chain(&new).map(|s| s.as_str()).collect();
    let (_, out) = m.step(&batch).unwrap();
    assert_eq!(out.verdicts.len(), 50);
    let old_max = out.verdicts[..40]
        .iter()
        .map(|v| v.score)
        .fold(0.0, f64::max);
    let new_min = out.verdicts[40..]
        .iter()
        .map(|v| v.score)
        .fold(1.0, f64::min);
    assert!(new_min > old_max, "new {new_min} vs old {old_max}");
    assert!(out.verdicts[40..].iter().all(|v| v.novel && !v.bootstrap));
    assert!(
        out.verdicts[40].terms[0].0.starts_with("topicc"),
        "{:?}",
        out.verdicts[40].terms
    );
    // the novel documents form topics whose members are the new documents
    assert!(!out.topics.is_empty());
    for t in &out.topics {
        assert!(t.members.iter().all(|&j| j >= 40 || out.verdicts[j].novel));
        assert!(t.strength > 0.0 && t.strength <= 1.0);
    }
}

#[test]
fn first_batch_bootstraps_and_empty_documents_are_defined() {
    let m = OstcModel::new(small_params(0, 3)).unwrap();
    let (m1, out) = m
        .step(&["", "the and of", "rocket launch orbit rocket"])
        .unwrap();
    assert_eq!(m.timestep(), 0);
    assert_eq!(m1.timestep(), 1);
    assert_eq!(out.verdicts.len(), 3);
    assert!(out.verdicts[0].empty && out.verdicts[1].empty);
    assert_eq!(out.verdicts[0].score, 0.0);
    assert!(out.verdicts.iter().all(|v| v.bootstrap && !v.novel));
    assert!(out.verdicts[2].score > 0.0 && out.verdicts[2].score < 1.0);
    let (_, out2) = m1.step(&["", "rocket"]).unwrap();
    assert!(out2.verdicts[0].empty && !out2.verdicts[0].novel && !out2.verdicts[1].bootstrap);
}

#[test]
fn deterministic_and_independent_of_thread_count() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let texts = planted(&mut rng, &[0, 1, 2], 150);
    let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    let run = |threads: usize, collapsed: bool| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut p = small_params(21, 3);
            p.collapsed = collapsed;
            let mut m = OstcModel::new(p).unwrap();
            let mut scores = Vec::new();
            for c in refs.chunks(50) {
                let (n, out) = m.step(c).unwrap();
                scores.extend(out.verdicts.iter().map(|v| v.score));
                m = n;
            }
            (parts_map(&m), scores)
        })
    };
    let a = run(1, false);
    assert_eq!(a, run(2, false));
    assert_eq!(a, run(1, false));
    let c = run(2, true);
    assert_eq!(c, run(1, true));
    assert_ne!(a.1, c.1, "the collapsed variant codes differently");
}
