//! OSTC numerics: closed-form word codes, coordinate descent, the collapsed objective, simplex
//! projection, the learning-rate schedule, and the dictionary's EM and stats steps.

use std::collections::BTreeMap;

use novad_models::ostc::coding::{
    code_doc, code_doc_collapsed, collapsed_ab, collapsed_objective, objective, word_objective,
    word_update, CodeParams, DocBlock,
};
use novad_models::ostc::dictionary::{learning_rate, project_simplex};
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
