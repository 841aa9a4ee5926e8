//! OSTC: closed-form word codes, simplex projection, learning-rate schedule, planted topics,
//! novelty scores (unseen topics over known words), state round trips, determinism.

use std::collections::BTreeMap;

use novad_models::metrics::auc;
use novad_models::ostc::coding::{
    code_doc, code_doc_collapsed, collapsed_ab, collapsed_objective, objective, word_objective,
    word_update, CodeParams, DocBlock,
};
use novad_models::ostc::dictionary::{learning_rate, project_simplex};
use novad_models::ostc::model::split_tokens;
use novad_models::ostc::{OstcModel, OstcParams, ScoreRule};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Golden-section minimiser of a unimodal function on [lo, hi].
fn golden(f: impl Fn(f64) -> f64, mut lo: f64, mut hi: f64) -> f64 {
    let r = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..300 {
        let a = hi - r * (hi - lo);
        let b = lo + r * (hi - lo);
        if f(a) < f(b) {
            hi = b;
        } else {
            lo = a;
        }
    }
    0.5 * (lo + hi)
}

#[test]
fn closed_form_word_code_matches_numeric_minimiser() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut zeros = 0;
    for case in 0..2000 {
        let w = rng.random_range(1..6) as f64;
        let beta = if case % 10 == 0 {
            0.0
        } else {
            10f64.powf(rng.random_range(-6.0..-0.3))
        };
        let mu = 10f64.powf(rng.random_range(-6.0..1.0));
        let a = 10f64.powf(rng.random_range(-3.0..0.0));
        let eta = beta + rng.random_range(-0.2..0.3);
        let g = |s: f64| word_objective(s, w, beta, mu, a, eta);
        let s = word_update(w, beta, mu, a, eta);
        assert!(s.is_finite() && s >= 0.0);
        // bracket: the minimiser is below max(w/a-ish, ...): grow until g increases
        let mut hi = 1.0;
        while g(hi * 2.0) < g(hi) || hi < 4.0 * s.max(1e-9) {
            hi *= 2.0;
        }
        let n = golden(g, 0.0, hi);
        let tol = 1e-6 * (1.0 + s.abs());
        assert!(
            (s - n).abs() <= tol.max(1e-5 * hi) || g(s) <= g(n) + 1e-10 * (1.0 + g(n).abs()),
            "case {case}: closed form {s}, numeric {n} (w={w}, β={beta}, μ={mu}, A={a}, η={eta})"
        );
        // and nothing on a dense grid beats it
        for i in 0..=200 {
            let x = hi * i as f64 / 200.0;
            assert!(
                g(x) >= g(s) - 1e-9 * (1.0 + g(s).abs()),
                "case {case}: g({x}) < g({s})"
            );
        }
        if s == 0.0 {
            zeros += 1;
        }
    }
    assert!(
        zeros > 50 && zeros < 1950,
        "both regimes exercised: {zeros} zeros"
    );
}

fn random_doc(rng: &mut ChaCha8Rng, terms: usize, k: usize) -> DocBlock {
    DocBlock {
        w: (0..terms).map(|_| rng.random_range(1..5) as f64).collect(),
        beta: (0..terms * k)
            .map(|_| {
                if rng.random_bool(0.3) {
                    0.0
                } else {
                    10f64.powf(rng.random_range(-4.0..-0.5))
                }
            })
            .collect(),
        k,
    }
}

#[test]
fn coordinate_descent_reaches_a_coordinatewise_minimum() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let p = CodeParams {
        sweeps: 500,
        tol: 0.0,
        ..CodeParams::default()
    };
    for _ in 0..5 {
        let doc = random_doc(&mut rng, 8, 4);
        let c = code_doc(&doc, &p);
        let f0 = objective(&doc, &c.s, &c.theta, &p);
        assert!((f0 - c.objective).abs() < 1e-9 * (1.0 + f0));
        // no single word-code coordinate can be improved (grid on the true objective)
        for i in 0..c.s.len() {
            for step in [-1e-3, 1e-3, -0.05, 0.05, 1.0] {
                let mut s = c.s.clone();
                s[i] = (s[i] + step * (1.0 + s[i])).max(0.0);
                assert!(objective(&doc, &s, &c.theta, &p) >= f0 - 1e-7 * (1.0 + f0));
            }
        }
        // θ is optimal given s (quadratic, closed form)
        for k in 0..4 {
            for step in [-1e-3, 1e-3] {
                let mut t = c.theta.clone();
                t[k] = (t[k] + step).max(0.0);
                assert!(objective(&doc, &c.s, &t, &p) >= f0 - 1e-9);
            }
        }
        // collapsed: the same property on its own objective
        let cc = code_doc_collapsed(&doc, &p);
        let g0 = collapsed_objective(&doc, &cc.s, &p);
        for i in 0..cc.s.len() {
            for step in [-1e-3, 1e-3, -0.05, 0.05] {
                let mut s = cc.s.clone();
                s[i] = (s[i] + step * (1.0 + s[i])).max(0.0);
                assert!(collapsed_objective(&doc, &s, &p) >= g0 - 1e-7 * (1.0 + g0));
            }
        }
    }
}

#[test]
fn collapsed_objective_is_theta_marginalised() {
    // min over θ of the STC coupling terms equals the collapsed quadratic form (θ unconstrained
    // ≥ 0 is inactive for s ≥ 0): (λ/2)‖θ*‖² + (γ/2)Σ‖s_n − θ*‖² = a Σ‖s_n‖² + b Σ_{n≠m} s_nᵀs_m.
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let p = CodeParams::default();
    let (nw, k) = (5, 3);
    let s: Vec<f64> = (0..nw * k).map(|_| rng.random_range(0.0..4.0)).collect();
    let lam = p.lambda();
    let mut theta = vec![0.0; k];
    for n in 0..nw {
        for j in 0..k {
            theta[j] += p.gamma * s[n * k + j] / (lam + p.gamma * nw as f64);
        }
    }
    let mut lhs = 0.5 * lam * theta.iter().map(|t| t * t).sum::<f64>();
    for n in 0..nw {
        for j in 0..k {
            lhs += 0.5 * p.gamma * (s[n * k + j] - theta[j]).powi(2);
        }
    }
    let (a, b) = collapsed_ab(nw, &p);
    let mut rhs = 0.0;
    for n in 0..nw {
        for m in 0..nw {
            let dot: f64 = (0..k).map(|j| s[n * k + j] * s[m * k + j]).sum();
            rhs += if n == m { a * dot } else { b * dot };
        }
    }
    assert!(
        (lhs - rhs).abs() < 1e-9 * (1.0 + lhs.abs()),
        "{lhs} vs {rhs}"
    );
}

#[test]
fn simplex_projection_satisfies_kkt_and_beats_random_points() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for case in 0..500 {
        let n = rng.random_range(1..40);
        let scale = 10f64.powf(rng.random_range(-3.0..2.0));
        let v: Vec<f64> = (0..n)
            .map(|_| rng.random_range(-1.0..1.0) * scale)
            .collect();
        let mut x = v.clone();
        project_simplex(&mut x);
        let sum: f64 = x.iter().sum();
        assert!((sum - 1.0).abs() < 1e-12, "case {case}: sum {sum}");
        assert!(x.iter().all(|&xi| xi >= 0.0));
        // KKT: x_i = max(v_i − τ, 0) for one τ; v_i ≤ τ where x_i = 0
        let i = (0..n).find(|&i| x[i] > 0.0).unwrap();
        let tau = v[i] - x[i];
        for j in 0..n {
            if x[j] > 0.0 {
                assert!(
                    (v[j] - x[j] - tau).abs() < 1e-10 * (1.0 + scale),
                    "case {case}"
                );
            } else {
                assert!(v[j] <= tau + 1e-10 * (1.0 + scale), "case {case}");
            }
        }
        // brute force: no random simplex point is closer
        let d = |y: &[f64]| {
            y.iter()
                .zip(&v)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f64>()
        };
        let dx = d(&x);
        for _ in 0..50 {
            let mut y: Vec<f64> = (0..n)
                .map(|_| -rng.random_range(1e-12f64..1.0).ln())
                .collect();
            let s: f64 = y.iter().sum();
            y.iter_mut().for_each(|t| *t /= s);
            assert!(d(&y) >= dx - 1e-12);
        }
    }
}

#[test]
fn learning_rate_schedule() {
    let (tau0, tau) = (0.5, 10.0);
    assert!((learning_rate(0, tau0, tau) - 0.05).abs() < 1e-15);
    assert!((learning_rate(90, tau0, tau) - 0.005).abs() < 1e-15);
    let mut prev = f64::INFINITY;
    let (mut s1, mut s2) = (0.0, 0.0);
    for t in 0..1_000_000u64 {
        let a = learning_rate(t, tau0, tau);
        assert!(a > 0.0 && a < prev);
        prev = a;
        s1 += a;
        s2 += a * a;
    }
    // Σα diverges like τ₀ ln t; Σα² converges below τ₀²/(τ − 1)
    assert!(s1 > tau0 * (1e6f64 / (tau + 1.0)).ln());
    assert!(s2 < tau0 * tau0 / (tau - 1.0));
}

/// Synthetic corpus: `topics` planted topics, each on its own 12 words (`t{k}w{i}` spelled in
/// letters), documents mixing one or two topics with Poisson counts.
/// A Poisson(`mean`) count by inversion (one uniform draw), capped at 60.
fn poisson(rng: &mut ChaCha8Rng, mean: f64) -> usize {
    let u: f64 = rng.random_range(0.0..1.0);
    let (mut c, mut p) = (0usize, (-mean).exp());
    let mut cdf = p;
    while u > cdf && c < 60 {
        c += 1;
        p *= mean / c as f64;
        cdf += p;
    }
    c
}

fn planted(rng: &mut ChaCha8Rng, topics: &[usize], docs: usize) -> Vec<String> {
    let word = |k: usize, i: usize| {
        format!(
            "topic{}word{}",
            (b'a' + k as u8) as char,
            (b'a' + i as u8) as char
        )
    };
    (0..docs)
        .map(|_| {
            let k1 = topics[rng.random_range(0..topics.len())];
            let k2 = topics[rng.random_range(0..topics.len())];
            let mut out = Vec::new();
            for (k, weight) in [(k1, 0.8), (k2, 0.2)] {
                for i in 0..12 {
                    // Zipf-like topic weights
                    let c = poisson(rng, 30.0 * weight / (i as f64 + 2.0));
                    for _ in 0..c {
                        out.push(word(k, i));
                    }
                }
            }
            out.join(" ")
        })
        .collect()
}

fn small_params(seed: u64, k: usize) -> OstcParams {
    OstcParams {
        seed,
        k,
        gamma: 0.1,
        rho: 0.1,
        tau0: 0.01,
        step_rule: novad_models::ostc::dictionary::StepRule::Raw,
        batch_size: 16,
        passes: 3,
        bootstrap_passes: 10,
        init_data_weight: 1.0,
        ..OstcParams::default()
    }
}

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

/// The EM step: with α = 1, σ = 0 and one topic explaining all counts, that topic becomes the
/// normalised expected counts (the EM fixed point for fixed codes); every step stays on the
/// simplex; a topic with no counts in the batch does not move.
#[test]
fn em_step_moves_topics_to_normalised_expected_counts() {
    use ndarray::Array2;
    use novad_models::ostc::dictionary::{topic_term_counts, update_em};
    let beta = Array2::from_shape_vec((3, 2), vec![0.5f32, 0.2, 0.3, 0.3, 0.2, 0.5]).unwrap();
    let mut c: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    c.insert(0, vec![6.0, 0.0]);
    c.insert(2, vec![2.0, 0.0]);
    let b = update_em(&beta, &c, 1.0, 0.0);
    // a_0 = α C_0 / (C_0 + C̄) = 8 / (8 + 4) = 2/3
    let a = 2.0 / 3.0;
    let want = [
        (1.0 - a) * 0.5 + a * 0.75,
        (1.0 - a) * 0.3,
        (1.0 - a) * 0.2 + a * 0.25,
    ];
    for (i, w) in want.iter().enumerate() {
        assert!(
            (b[[i, 0]] as f64 - w).abs() < 1e-6,
            "{i}: {} vs {w}",
            b[[i, 0]]
        );
        assert!((b[[i, 1]] - beta[[i, 1]]).abs() < 1e-7);
    }
    for col in b.columns() {
        assert!((col.sum() - 1.0).abs() < 1e-5);
    }
    // expected counts split each word's count by s_k β_kn / ν
    let code = novad_models::ostc::DocCode {
        s: vec![1.0, 1.0, 2.0, 0.0],
        theta: vec![0.0, 0.0],
        nu: vec![0.5 * 1.0 + 0.2 * 1.0, 0.3 * 2.0],
        objective: 0.0,
        sweeps: 1,
    };
    let ids = [0u32, 1];
    let w = [7.0, 3.0];
    let c = topic_term_counts(&[(&ids[..], &w[..], &code)], &beta);
    assert!((c[&0][0] - 5.0).abs() < 1e-6 && (c[&0][1] - 2.0).abs() < 1e-6);
    assert!((c[&1][0] - 3.0).abs() < 1e-6 && c[&1][1] == 0.0);
}

/// Online EM on statistics: two mini-batches of m documents, ρ = 1 then 1/2, leave each topic
/// at the normalised *sum* of both batches' counts (the batch M-step over their union), with
/// the floor σ/N on top, and the mass at the average tokens per document; the other EM rule
/// has no such fixed point. Also: entries ≥ σ/N, topics on the simplex.
#[test]
fn stats_step_is_the_m_step_over_everything_seen() {
    use ndarray::Array2;
    use novad_models::ostc::dictionary::update_stats;
    let n = 5usize;
    let beta = Array2::from_elem((n, 2), 0.2f32);
    let mut a: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    a.insert(0, vec![6.0, 1.0]);
    a.insert(3, vec![2.0, 0.0]);
    let mut b: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    b.insert(1, vec![4.0, 0.0]);
    b.insert(3, vec![4.0, 3.0]);
    for smooth in [0.0, 0.3] {
        let mut mass = vec![1.0, 1.0];
        let m = 4;
        let b1 = update_stats(&beta, &a, &mut mass, 1.0, m, smooth);
        let b2 = update_stats(&b1, &b, &mut mass, 0.5, m, smooth);
        for j in 0..2 {
            let tot: f64 = a.values().chain(b.values()).map(|r| r[j]).sum();
            assert!((mass[j] - tot / (2.0 * m as f64)).abs() < 1e-9, "mass {j}");
            for i in 0..n as u32 {
                let c = a.get(&i).map_or(0.0, |r| r[j]) + b.get(&i).map_or(0.0, |r| r[j]);
                let want = (1.0 - smooth) * c / tot + smooth / n as f64;
                let got = b2[[i as usize, j]] as f64;
                assert!(
                    (got - want).abs() < 1e-5,
                    "σ {smooth} term {i} topic {j}: {got} vs {want}"
                );
                assert!(got >= smooth / n as f64 - 1e-6);
            }
            let s: f64 = b2.column(j).iter().map(|&v| v as f64).sum();
            assert!((s - 1.0).abs() < 1e-5);
        }
    }
    // ρ = 0 leaves β (and the mass) alone
    let mut mass = vec![2.0, 3.0];
    let same = update_stats(&beta, &a, &mut mass, 0.0, 4, 0.0);
    assert_eq!(mass, vec![2.0, 3.0]);
    assert!(same
        .iter()
        .zip(beta.iter())
        .all(|(x, y)| (x - y).abs() < 1e-7));
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

fn parts_map(m: &OstcModel) -> BTreeMap<String, Vec<u8>> {
    m.state_parts().into_iter().collect()
}

#[test]
fn state_round_trips_and_corruption_is_refused() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let texts = planted(&mut rng, &[0, 1, 2], 120);
    let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    let p = small_params(5, 3);
    let m = OstcModel::new(p.clone()).unwrap();
    let (m, _) = m.step(&refs[..60]).unwrap();
    let parts = parts_map(&m);
    let back = OstcModel::from_state_parts(p.clone(), &parts).unwrap();
    assert_eq!(parts_map(&back), parts);
    let (a, oa) = m.step(&refs[60..]).unwrap();
    let (b, ob) = back.step(&refs[60..]).unwrap();
    assert_eq!(oa.verdicts, ob.verdicts);
    assert_eq!(oa.topics, ob.topics);
    assert_eq!(parts_map(&a), parts_map(&b));
    // unchanged content → identical bytes: an empty batch changes neither vocab nor β
    let (c, _) = a.step(&[]).unwrap();
    let (pa, pc) = (parts_map(&a), parts_map(&c));
    assert_eq!(pa["vocab"], pc["vocab"]);
    assert_eq!(pa["beta"], pc["beta"]);
    assert_ne!(pa["meta"], pc["meta"]);

    // corruption: truncated β
    let mut bad = parts.clone();
    let v = bad.get_mut("beta").unwrap();
    v.truncate(v.len() / 2);
    let e = OstcModel::from_state_parts(p.clone(), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("beta"), "{e}");
    // a topic off the simplex (valid encoding, wrong content)
    let (rows, cols, mut data): (u64, u64, Vec<f32>) =
        postcard::from_bytes(&parts["beta"]).unwrap();
    data[0] += 0.5;
    let mut bad = parts.clone();
    bad.insert(
        "beta".into(),
        postcard::to_allocvec(&(rows, cols, data.clone())).unwrap(),
    );
    let e = OstcModel::from_state_parts(p.clone(), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("topic 0 sums to"), "{e}");
    // non-finite
    data[0] = f32::NAN;
    bad.insert(
        "beta".into(),
        postcard::to_allocvec(&(rows, cols, data)).unwrap(),
    );
    let e = OstcModel::from_state_parts(p.clone(), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("non-finite"), "{e}");
    // missing part, wrong k
    let mut bad = parts.clone();
    bad.remove("history");
    let e = OstcModel::from_state_parts(p.clone(), &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing state part `history`"), "{e}");
    let e = OstcModel::from_state_parts(small_params(5, 4), &parts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("k = 4"), "{e}");
    // invalid parameters are named
    let mut q = p.clone();
    q.rho = -1.0;
    let e = OstcModel::new(q).unwrap_err().to_string();
    assert!(e.contains("ostc.rho"), "{e}");
}

/// The `stats` rule's per-topic mass is state: it round-trips, the resumed model continues
/// byte-identically, a store without the part (written before it existed) loads with it
/// empty, and a mass of the wrong length or a negative one is refused.
#[test]
fn stats_mass_round_trips_and_is_checked() {
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    let texts = planted(&mut rng, &[0, 1, 2], 120);
    let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    let p = OstcParams {
        step_rule: novad_models::ostc::dictionary::StepRule::Stats,
        ..small_params(5, 3)
    };
    let (m, _) = OstcModel::new(p.clone())
        .unwrap()
        .step(&refs[..60])
        .unwrap();
    let parts = parts_map(&m);
    let mass: Vec<f64> = postcard::from_bytes(&parts["mass"]).unwrap();
    assert_eq!(mass.len(), 3);
    assert!(mass.iter().all(|v| v.is_finite() && *v > 0.0), "{mass:?}");
    let back = OstcModel::from_state_parts(p.clone(), &parts).unwrap();
    let (a, oa) = m.step(&refs[60..]).unwrap();
    let (b, ob) = back.step(&refs[60..]).unwrap();
    assert_eq!(oa.verdicts, ob.verdicts);
    assert_eq!(parts_map(&a), parts_map(&b));
    assert_ne!(parts_map(&a)["mass"], parts["mass"]);
    // an `em` store written before the part existed
    let q = small_params(5, 3);
    let (old, _) = OstcModel::new(q.clone())
        .unwrap()
        .step(&refs[..60])
        .unwrap();
    let mut old_parts = parts_map(&old);
    assert_eq!(
        old_parts["mass"],
        postcard::to_allocvec(&Vec::<f64>::new()).unwrap()
    );
    old_parts.remove("mass");
    let loaded = OstcModel::from_state_parts(q, &old_parts).unwrap();
    assert_eq!(parts_map(&loaded)["beta"], old_parts["beta"]);
    for bad_mass in [vec![1.0, 2.0], vec![1.0, -1.0, 1.0]] {
        let mut bad = parts.clone();
        bad.insert("mass".into(), postcard::to_allocvec(&bad_mass).unwrap());
        let e = OstcModel::from_state_parts(p.clone(), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("mass"), "{e}");
    }
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

#[test]
fn default_params_are_valid_and_survive_toml() {
    let p = OstcParams::default();
    p.validate().unwrap();
    let s = toml::to_string(&p).unwrap();
    let back: OstcParams = toml::from_str(&s).unwrap();
    assert_eq!(back, p);
    let mut q = p.clone();
    q.batch_size = 0;
    let e = q.validate().unwrap_err().to_string();
    assert!(e.contains("ostc.batch_size"), "{e}");
}

/// Synthetic Poisson corpus over a shared vocabulary of `6 × 10` words: a document draws ~35
/// tokens from one topic's 10 words (Zipf-like weights), 4 background tokens uniform over
/// those 60 words (so every topic word is seen from the start, also the words of topics no
/// document is about yet) and 12 tokens from a tail of 2 000 rare words.
fn shared_vocab_docs(rng: &mut ChaCha8Rng, topics: &[usize], docs: usize) -> Vec<String> {
    let word = |j: usize| {
        format!(
            "word{}{}",
            (b'a' + (j / 10) as u8) as char,
            (b'a' + (j % 10) as u8) as char
        )
    };
    (0..docs)
        .map(|_| {
            let k = topics[rng.random_range(0..topics.len())];
            let mut out = Vec::new();
            for i in 0..10 {
                let c = poisson(rng, 12.0 / (i as f64 + 1.0));
                out.extend(std::iter::repeat_n(word(10 * k + i), c));
            }
            for _ in 0..4 {
                out.push(word(rng.random_range(0..60)));
            }
            // a long tail, as in real text: 12 tokens from 2 000 rare words
            for _ in 0..12 {
                let j = rng.random_range(0..2000usize);
                let l = |x: usize| (b'a' + (x % 26) as u8) as char;
                out.push(format!("rare{}{}{}", l(j / 676), l(j / 26), l(j)));
            }
            out.join(" ")
        })
        .collect()
}

/// Scores of a batch of 100 documents of the 4 known topics followed by 25 of the 2 topics
/// no earlier document was about, after training on 600 known-topic documents.
fn unseen_topic_scores(params: OstcParams, seed: u64) -> (Vec<f64>, Vec<bool>, Vec<bool>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let train = shared_vocab_docs(&mut rng, &[0, 1, 2, 3], 600);
    let mut m = OstcModel::new(params).unwrap();
    for chunk in train.chunks(200) {
        let r: Vec<&str> = chunk.iter().map(|s| s.as_str()).collect();
        m = m.step(&r).unwrap().0;
    }
    let mut batch = shared_vocab_docs(&mut rng, &[0, 1, 2, 3], 100);
    batch.extend(shared_vocab_docs(&mut rng, &[4, 5], 25));
    let r: Vec<&str> = batch.iter().map(|s| s.as_str()).collect();
    let (_, out) = m.step(&r).unwrap();
    let labels: Vec<bool> = (0..batch.len()).map(|j| j >= 100).collect();
    (
        out.verdicts.iter().map(|v| v.score).collect(),
        labels,
        out.verdicts.iter().map(|v| v.novel).collect(),
    )
}

fn default_small(seed: u64, score: ScoreRule) -> OstcParams {
    OstcParams {
        seed,
        k: 6,
        batch_size: 16,
        score,
        ..OstcParams::default()
    }
}

#[test]
fn unseen_topics_over_known_words_rank_first_and_scores_are_not_saturated() {
    for seed in [1, 2] {
        for rule in [
            ScoreRule::Contrast,
            ScoreRule::Completion,
            ScoreRule::Perplexity,
            ScoreRule::FoldIn,
        ] {
            let (scores, labels, novel) = unseen_topic_scores(default_small(seed, rule), seed);
            let a = auc(&scores, &labels).unwrap();
            assert!(a >= 0.9, "{rule:?} seed {seed}: AUC {a}");
            // strictly inside [0, 1), and spread out instead of pinned near 1
            assert!(scores.iter().all(|&s| s > 0.0 && s < 1.0), "{scores:?}");
            let max = scores.iter().copied().fold(0.0, f64::max);
            let min = scores.iter().copied().fold(1.0, f64::min);
            assert!(max < 0.95 && max - min > 0.05, "{rule:?}: {min}..{max}");
            if rule == ScoreRule::default() {
                // the default adaptive threshold flags mostly the unseen-topic documents
                let hit = (100..125).filter(|&j| novel[j]).count();
                let false_alarms = (0..100).filter(|&j| novel[j]).count();
                assert!(
                    hit >= 15 && false_alarms <= 15,
                    "{hit} hits, {false_alarms} false alarms"
                );
            }
        }
    }
}

#[test]
fn score_rules_stay_in_the_unit_interval_on_odd_documents() {
    let p = default_small(0, ScoreRule::Completion);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let train = shared_vocab_docs(&mut rng, &[0, 1], 50);
    let r: Vec<&str> = train.iter().map(|s| s.as_str()).collect();
    for rule in [
        ScoreRule::Objective,
        ScoreRule::Perplexity,
        ScoreRule::FoldIn,
        ScoreRule::Completion,
        ScoreRule::Contrast,
    ] {
        let m = OstcModel::new(OstcParams {
            score: rule,
            ..p.clone()
        })
        .unwrap();
        let m = m.step(&r).unwrap().0;
        // one token, one known word repeated, only unknown words, a mix
        let odd = [
            "wordaa",
            "wordab wordab wordab wordab wordab wordab wordab wordab",
            "zebra quokka narwhal",
            "wordaa zebra wordba quokka wordfj",
            "",
        ];
        let (_, out) = m.step(&odd).unwrap();
        for v in &out.verdicts {
            assert!(
                v.score.is_finite() && (0.0..1.0).contains(&v.score),
                "{rule:?}: {}",
                v.score
            );
        }
        assert_eq!(out.verdicts[4].score, 0.0);
        // unknown words are worse explained than a known one
        assert!(out.verdicts[2].score > out.verdicts[1].score, "{rule:?}");
    }
}

#[test]
fn completion_halves_split_every_count() {
    for w in [
        vec![1.0],
        vec![1.0, 1.0, 1.0],
        vec![3.0, 2.0, 5.0, 1.0],
        vec![],
    ] {
        let (a, b) = split_tokens(&w);
        for ((x, y), z) in a.iter().zip(&b).zip(&w) {
            assert_eq!(x + y, *z);
        }
        let (sa, sb): (f64, f64) = (a.iter().sum(), b.iter().sum());
        assert!((sa - sb).abs() <= 1.0, "{a:?} {b:?}");
    }
}

#[test]
fn version_one_state_loads_with_a_fresh_score_history() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let texts = planted(&mut rng, &[0, 1], 120);
    let r: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    let p = small_params(1, 3);
    let mut m = OstcModel::new(p.clone()).unwrap();
    for chunk in r.chunks(40) {
        m = m.step(chunk).unwrap().0;
    }
    assert!(m.history().total > 0.0);
    let mut parts = parts_map(&m);
    // `meta` starts with its version as a postcard varint: 2 now, 1 before score rules
    assert_eq!(parts["meta"][0], 2);
    parts.get_mut("meta").unwrap()[0] = 1;
    let old = OstcModel::from_state_parts(p.clone(), &parts).unwrap();
    assert_eq!(old.history().total, 0.0);
    assert_eq!(old.beta(), m.beta());
    parts.get_mut("meta").unwrap()[0] = 3;
    assert!(OstcModel::from_state_parts(p, &parts).is_err());
}

#[test]
fn parameters_written_before_score_rules_load_with_the_defaults() {
    let mut v = toml::Value::try_from(OstcParams::default()).unwrap();
    let t = v.as_table_mut().unwrap();
    for key in ["score", "score_scale", "score_background"] {
        t.remove(key);
    }
    let old: OstcParams = toml::from_str(&toml::to_string(&v).unwrap()).unwrap();
    assert_eq!(old, OstcParams::default());
    assert_eq!(old.score, ScoreRule::Contrast);
    let bad = OstcParams {
        score_scale: Some(0.0),
        ..OstcParams::default()
    };
    assert!(bad.validate().is_err());
}

#[test]
fn stored_parameters_without_the_score_fields_decode_with_the_defaults() {
    // stores up to format 4 predate the hybrid detector: their parameters decode without it
    let p = OstcParams {
        seed: 42,
        k: 17,
        hybrid: None,
        ..OstcParams::default()
    };
    let with_hybrid_field = postcard::to_stdvec(&p).unwrap();
    assert_eq!(
        with_hybrid_field.last(),
        Some(&0),
        "the trailing None of `hybrid`"
    );
    let bytes = &with_hybrid_field[..with_hybrid_field.len() - 1];
    assert_eq!(OstcParams::from_stored(bytes).unwrap(), p);
    // the layout before the score fields is the prefix without their 10 bytes (enum tag,
    // None tag, f64)
    let legacy = &bytes[..bytes.len() - 10];
    assert!(postcard::from_bytes::<OstcParams>(legacy).is_err());
    assert_eq!(OstcParams::from_stored(legacy).unwrap(), p);
    assert!(OstcParams::from_stored(&bytes[..bytes.len() - 12]).is_err());
}
