//! Dynamic NMF: projection and HP filter against brute-force oracles, planted
//! evolving + emerging topics, state round trips, corruption, determinism.

use std::collections::BTreeMap;

use novad_models::dnmf::factorize::{emerging_w, Temporal};
use novad_models::dnmf::hp::{hinge_weights, hp_trend, slope_operator};
use novad_models::dnmf::project::{project_box_simplex, project_simplex};
use novad_models::dnmf::{DnmfModel, DnmfParams};
use novad_models::TopicKind;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Brute-force QP: enumerate every assignment of each coordinate to {lower, upper, free};
/// free coordinates are v − τ with τ fixed by the sum; keep feasible candidates, return the
/// closest to v.
fn brute_box_simplex(v: &[f64], l: &[f64], u: &[f64]) -> Option<Vec<f64>> {
    let d = v.len();
    let mut best: Option<(f64, Vec<f64>)> = None;
    let total = 3usize.pow(d as u32);
    for code in 0..total {
        let mut c = code;
        let mut state = vec![0u8; d];
        for s in state.iter_mut() {
            *s = (c % 3) as u8;
            c /= 3;
        }
        let fixed: f64 = (0..d)
            .map(|j| match state[j] {
                0 => l[j],
                1 => u[j],
                _ => 0.0,
            })
            .sum();
        let free: Vec<usize> = (0..d).filter(|&j| state[j] == 2).collect();
        let mut h = vec![0.0; d];
        if free.is_empty() {
            if (fixed - 1.0).abs() > 1e-9 {
                continue;
            }
        } else {
            let tau = (free.iter().map(|&j| v[j]).sum::<f64>() + fixed - 1.0) / free.len() as f64;
            for &j in &free {
                h[j] = v[j] - tau;
            }
        }
        let mut ok = true;
        for j in 0..d {
            match state[j] {
                0 => h[j] = l[j],
                1 => h[j] = u[j],
                _ => ok &= h[j] >= l[j] - 1e-12 && h[j] <= u[j] + 1e-12,
            }
        }
        if !ok {
            continue;
        }
        let dist: f64 = h.iter().zip(v).map(|(a, b)| (a - b) * (a - b)).sum();
        if best.as_ref().is_none_or(|(b, _)| dist < *b) {
            best = Some((dist, h));
        }
    }
    best.map(|b| b.1)
}

#[test]
fn box_simplex_projection_matches_brute_force_qp() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut checked = 0;
    for case in 0..400 {
        let d = 1 + case % 6;
        let v: Vec<f64> = (0..d).map(|_| rng.random_range(-1.0..1.5)).collect();
        let prev: Vec<f64> = {
            let r: Vec<f64> = (0..d).map(|_| rng.random::<f64>()).collect();
            let s: f64 = r.iter().sum();
            r.iter().map(|x| x / s).collect()
        };
        let delta = [0.0, 0.05, 0.2, 1.0][case % 4];
        // some cases with ties in v and in the breakpoints
        let v = if case % 7 == 0 { vec![0.3; d] } else { v };
        let l: Vec<f64> = prev.iter().map(|p| (p - delta).max(0.0)).collect();
        let u: Vec<f64> = prev.iter().map(|p| (p + delta).min(1.0)).collect();
        let mut got = vec![0.0; d];
        project_box_simplex(&v, &l, &u, &mut got);
        let want =
            brute_box_simplex(&v, &l, &u).expect("the δ-box around a distribution is feasible");
        for j in 0..d {
            assert!(
                (got[j] - want[j]).abs() < 1e-9,
                "case {case}: v={v:?} l={l:?} u={u:?}: got {got:?}, want {want:?}"
            );
            assert!(got[j] >= l[j] && got[j] <= u[j]);
        }
        assert!((got.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        checked += 1;
    }
    assert_eq!(checked, 400);
}

#[test]
fn simplex_projection_matches_brute_force_qp() {
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    for _ in 0..200 {
        let d = rng.random_range(1..7);
        let v: Vec<f64> = (0..d).map(|_| rng.random_range(-2.0..2.0)).collect();
        let mut got = vec![0.0; d];
        project_simplex(&v, &mut got);
        let want = brute_box_simplex(&v, &vec![0.0; d], &vec![1.0; d]).unwrap();
        for j in 0..d {
            assert!(
                (got[j] - want[j]).abs() < 1e-9,
                "v={v:?}: {got:?} vs {want:?}"
            );
        }
    }
}

/// Dense Gauss–Jordan solve of (I + 2λD₂ᵀD₂) x = y.
fn hp_dense(y: &[f64], lambda: f64) -> Vec<f64> {
    let t = y.len();
    let mut a = vec![vec![0.0; t + 1]; t];
    for (i, row) in a.iter_mut().enumerate() {
        row[i] = 1.0;
        row[t] = y[i];
    }
    if t >= 3 {
        for r in 0..t - 2 {
            let dr = [(r, 1.0), (r + 1, -2.0), (r + 2, 1.0)];
            for &(i, di) in &dr {
                for &(j, dj) in &dr {
                    a[i][j] += 2.0 * lambda * di * dj;
                }
            }
        }
    }
    for c in 0..t {
        let p = (c..t)
            .max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))
            .unwrap();
        a.swap(c, p);
        let piv = a[c][c];
        for x in a[c].iter_mut() {
            *x /= piv;
        }
        for r in 0..t {
            if r != c {
                let f = a[r][c];
                let rc = a[c].clone();
                for (x, y) in a[r].iter_mut().zip(&rc) {
                    *x -= f * y;
                }
            }
        }
    }
    a.iter().map(|r| r[t]).collect()
}

#[test]
fn hp_filter_matches_closed_form() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for t in 1..12 {
        for &lambda in &[0.0, 0.1, 10.0, 1600.0] {
            let y: Vec<f64> = (0..t).map(|_| rng.random_range(-5.0..5.0)).collect();
            let got = hp_trend(&y, lambda);
            let want = hp_dense(&y, lambda);
            for (a, b) in got.iter().zip(&want) {
                assert!(
                    (a - b).abs() < 1e-8 * (1.0 + b.abs()),
                    "T={t} λ={lambda}: {got:?} vs {want:?}"
                );
            }
            // the slope operator is D₁ applied to the same trend
            let q = slope_operator(t, lambda);
            assert_eq!(q.len(), t.saturating_sub(1));
            for (j, row) in q.iter().enumerate() {
                let s: f64 = row.iter().zip(&y).map(|(a, b)| a * b).sum();
                assert!((s - (want[j + 1] - want[j])).abs() < 1e-8 * (1.0 + s.abs()));
            }
        }
    }
}

#[test]
fn emerging_weights_minimise_the_regularised_objective() {
    // J(w) = ‖w − w0‖² + κ Σ c_j max(0, ν − (Q S w)_j)²: the projected-gradient answer must be
    // stationary (KKT) — no feasible coordinate move improves J — and push the newest step up.
    let steps = vec![0, 0, 1, 1, 2, 2, 3, 3];
    let t = Temporal {
        n_steps: 4,
        slope: slope_operator(4, 10.0),
        weights: hinge_weights(4),
        step: steps.clone(),
    };
    let w0 = vec![1.0, 0.5, 0.2, 0.8, 0.3, 0.1, 0.4, 0.2];
    let mut w = w0.clone();
    emerging_w(&mut w, &w0, 5.0, 4.0, &t, 2000, 1.0);
    let j = |w: &[f64]| {
        let q: f64 = w.iter().zip(&w0).map(|(a, b)| (a - b) * (a - b)).sum();
        let mut y = [0.0; 4];
        for (r, &s) in steps.iter().enumerate() {
            y[s] += w[r];
        }
        let mut l = 0.0;
        for (row, c) in t.slope.iter().zip(&t.weights) {
            let z: f64 = row.iter().zip(&y).map(|(a, b)| a * b).sum();
            l += c * (4.0 - z).max(0.0).powi(2);
        }
        q + 5.0 * l
    };
    let base = j(&w);
    for r in 0..w.len() {
        for &e in &[1e-4, -1e-4] {
            let mut v = w.clone();
            v[r] = (v[r] + e).max(0.0);
            assert!(
                j(&v) >= base - 1e-7,
                "coordinate {r} move {e} improves J: {} < {base}",
                j(&v)
            );
        }
    }
    let newest: f64 = w[6] + w[7];
    assert!(
        newest > w0[6] + w0[7] + 0.5,
        "the hinge pushes the newest timestep up: {w:?}"
    );
}

/// A planted stream: topics A and B throughout, topic C appears at timestep 3.
fn planted(seed: u64) -> Vec<Vec<(String, char)>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut steps = Vec::new();
    for ts in 0..5 {
        let mut docs = Vec::new();
        let groups: &[(char, usize)] = if ts < 3 {
            &[('a', 60), ('b', 60)]
        } else {
            &[('a', 50), ('b', 50), ('c', 40)]
        };
        for &(g, n) in groups {
            for _ in 0..n {
                let words: Vec<String> = (0..25)
                    .map(|_| {
                        if rng.random::<f64>() < 0.1 {
                            format!("noise{}", rng.random_range(0..30u32))
                                .replace(char::is_numeric, "x")
                                + &"q".repeat(rng.random_range(0..30))
                        } else {
                            // drift: the topic's vocabulary shifts by one word per timestep
                            let i = rng.random_range(0..40) + ts;
                            format!("{g}{g}word{}", letters(i))
                        }
                    })
                    .collect();
                docs.push((words.join(" "), g));
            }
        }
        // deterministic shuffle
        for i in (1..docs.len()).rev() {
            let j = rng.random_range(0..=i);
            docs.swap(i, j);
        }
        steps.push(docs);
    }
    steps
}

fn letters(mut i: usize) -> String {
    let mut s = String::new();
    loop {
        s.push((b'a' + (i % 26) as u8) as char);
        i /= 26;
        if i == 0 {
            return s;
        }
    }
}

fn small_params() -> DnmfParams {
    DnmfParams {
        initial_topics: 2,
        emerging: 2,
        max_topics: 12,
        window: 3,
        delta: 0.05,
        mu: 10.0,
        nu: 1.0,
        ..DnmfParams::default()
    }
}

#[test]
fn planted_evolving_and_emerging_topics_are_recovered() {
    let stream = planted(1);
    let mut model = DnmfModel::new(small_params()).unwrap();
    for (ts, docs) in stream.iter().enumerate() {
        let texts: Vec<&str> = docs.iter().map(|d| d.0.as_str()).collect();
        let (next, out) = model.step(&texts).unwrap();
        assert_eq!(out.verdicts.len(), texts.len());
        for v in &out.verdicts {
            assert!(v.score.is_finite() && (0.0..=1.0).contains(&v.score));
        }
        let novel_of = |g: char| {
            let idx: Vec<usize> = (0..docs.len()).filter(|&i| docs[i].1 == g).collect();
            idx.iter().filter(|&&i| out.verdicts[i].novel).count() as f64 / idx.len().max(1) as f64
        };
        if ts == 0 {
            assert!(out.verdicts.iter().all(|v| v.bootstrap && !v.novel));
        }
        if ts == 3 {
            assert!(
                novel_of('c') >= 0.8,
                "planted emerging topic C found novel: {}",
                novel_of('c')
            );
            assert!(
                novel_of('a') <= 0.2 && novel_of('b') <= 0.2,
                "A {} B {}",
                novel_of('a'),
                novel_of('b')
            );
            // an emerging topic whose top words are C's
            let vocab = next.vocab();
            let c_topic = out
                .topics
                .iter()
                .find(|t| {
                    t.kind == TopicKind::Emerging && vocab.term(t.terms[0].0).starts_with("cc")
                })
                .expect("an emerging topic on C");
            assert!(
                c_topic
                    .members
                    .iter()
                    .filter(|&&m| docs[m].1 == 'c')
                    .count()
                    >= 30
            );
            assert_eq!(c_topic.profile.len(), 3);
            assert!(c_topic.profile[2] > c_topic.profile[0]);
        }
        if ts == 4 {
            // C is tracked by an evolving topic now; nothing is novel any more
            assert!(novel_of('c') <= 0.2, "C no longer novel: {}", novel_of('c'));
        }
        if ts >= 1 {
            // topics stay pure: no topic mixes the planted groups (with more topics than groups,
            // NMF may split a drifting group, never merge two)
            for t in &out.topics {
                let per: Vec<usize> = ['a', 'b', 'c']
                    .iter()
                    .map(|&g| t.members.iter().filter(|&&m| docs[m].1 == g).count())
                    .collect();
                let top = *per.iter().max().unwrap();
                assert!(
                    top as f64 >= 0.9 * t.members.len() as f64,
                    "timestep {ts}: topic {} mixes groups {per:?}",
                    t.atom
                );
            }
        }
        model = next;
    }
}

/// Scores, novel flags and (topic id, members) of one timestep.
type StepView = (Vec<f64>, Vec<bool>, Vec<(u32, Vec<usize>)>);

fn run(params: DnmfParams, stream: &[Vec<(String, char)>]) -> Vec<StepView> {
    let mut model = DnmfModel::new(params).unwrap();
    let mut outs = Vec::new();
    for docs in stream {
        let texts: Vec<&str> = docs.iter().map(|d| d.0.as_str()).collect();
        let (next, out) = model.step(&texts).unwrap();
        outs.push((
            out.verdicts.iter().map(|v| v.score).collect(),
            out.verdicts.iter().map(|v| v.novel).collect(),
            out.topics
                .iter()
                .map(|t| (t.atom, t.members.clone()))
                .collect(),
        ));
        model = next;
    }
    outs
}

#[test]
fn deterministic_given_the_seed() {
    let stream = planted(2);
    let a = run(small_params(), &stream);
    let b = run(small_params(), &stream);
    assert_eq!(a, b);
    let c = run(
        DnmfParams {
            seed: 99,
            ..small_params()
        },
        &stream,
    );
    // a different seed changes the random initialisation (scores differ somewhere)
    assert_ne!(
        a.iter().map(|x| &x.0).collect::<Vec<_>>(),
        c.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
}

fn parts_map(m: &DnmfModel) -> BTreeMap<String, Vec<u8>> {
    m.state_parts().into_iter().collect()
}

#[test]
fn state_round_trips_and_unchanged_parts_keep_their_bytes() {
    let stream = planted(3);
    let p = small_params();
    let mut model = DnmfModel::new(p.clone()).unwrap();
    let mut before: Option<BTreeMap<String, Vec<u8>>> = None;
    for docs in &stream {
        let texts: Vec<&str> = docs.iter().map(|d| d.0.as_str()).collect();
        let parts = parts_map(&model);
        let back = DnmfModel::from_state_parts(p.clone(), &parts).unwrap();
        assert_eq!(
            parts_map(&back),
            parts,
            "re-encoding a restored model is the identity"
        );
        let (m1, o1) = model.step(&texts).unwrap();
        let (m2, o2) = back.step(&texts).unwrap();
        assert_eq!(o1.verdicts, o2.verdicts);
        assert_eq!(o1.topics, o2.topics);
        assert_eq!(parts_map(&m1), parts_map(&m2));
        if let Some(b) = &before {
            // documents of a window timestep that stayed are byte-identical (no eviction here)
            let now = parts_map(&m1);
            let shared: Vec<&String> = b
                .keys()
                .filter(|k| k.starts_with("docs-") && now.contains_key(*k))
                .collect();
            assert!(!shared.is_empty());
            for k in shared {
                assert_eq!(b[k], now[k], "{k} rewritten");
            }
        }
        before = Some(parts_map(&m1));
        model = m1;
    }
    assert!(model.window().count() <= p.window);
}

#[test]
fn corrupted_parts_are_refused_with_a_clear_error() {
    let stream = planted(4);
    let p = small_params();
    let mut model = DnmfModel::new(p.clone()).unwrap();
    for docs in stream.iter().take(3) {
        let texts: Vec<&str> = docs.iter().map(|d| d.0.as_str()).collect();
        model = model.step(&texts).unwrap().0;
    }
    let parts = parts_map(&model);
    let err = |parts: &BTreeMap<String, Vec<u8>>| {
        DnmfModel::from_state_parts(p.clone(), parts)
            .unwrap_err()
            .to_string()
    };

    let mut missing = parts.clone();
    missing.remove("topics");
    assert!(
        err(&missing).contains("`topics` is missing"),
        "{}",
        err(&missing)
    );

    let mut garbage = parts.clone();
    garbage.insert("weights".into(), vec![0xff; 3]);
    assert!(err(&garbage).contains("weights"), "{}", err(&garbage));

    // a topic off the simplex: scale one topic's row by re-encoding
    let mut topics: Vec<novad_models::dnmf::TopicState> =
        postcard::from_bytes(&parts["topics"]).unwrap();
    for e in topics[0].row.iter_mut() {
        e.1 *= 2.0;
    }
    let mut off = parts.clone();
    off.insert("topics".into(), postcard::to_stdvec(&topics).unwrap());
    assert!(err(&off).contains("off the simplex"), "{}", err(&off));

    topics[0].row[0].1 = f32::NAN;
    let mut nan = parts.clone();
    nan.insert("topics".into(), postcard::to_stdvec(&topics).unwrap());
    assert!(err(&nan).contains("non-finite"), "{}", err(&nan));

    // a window timestep's documents pointing outside the vocabulary
    let key = parts
        .keys()
        .find(|k| k.starts_with("docs-"))
        .unwrap()
        .clone();
    let mut docs: Vec<Vec<(u32, u32)>> = postcard::from_bytes(&parts[&key]).unwrap();
    docs[0].push((u32::MAX - 1, 1));
    let mut oov = parts.clone();
    oov.insert(key.clone(), postcard::to_stdvec(&docs).unwrap());
    assert!(err(&oov).contains("out-of-vocabulary"), "{}", err(&oov));

    // dropping one document breaks the W dimensions
    docs.pop();
    let mut fewer: Vec<Vec<(u32, u32)>> = postcard::from_bytes(&parts[&key]).unwrap();
    fewer.pop();
    let mut dims = parts.clone();
    dims.insert(key, postcard::to_stdvec(&fewer).unwrap());
    assert!(err(&dims).contains("documents"), "{}", err(&dims));

    // the unmodified parts still load
    DnmfModel::from_state_parts(p, &parts).unwrap();
}

#[test]
fn empty_documents_get_a_defined_verdict_and_bad_params_name_the_field() {
    let model = DnmfModel::new(small_params()).unwrap();
    let (m, out) = model
        .step(&["", "the and of", "apple banana cherry apple"])
        .unwrap();
    assert!(out.verdicts[0].empty && out.verdicts[1].empty && !out.verdicts[2].empty);
    // one document: every idf is 0, so it has no weighted term — not empty, not novel, score 0
    assert!(out.verdicts.iter().all(|v| !v.novel && v.score == 0.0));
    let (_, out2) = m.step(&["", "apple banana"]).unwrap();
    assert!(out2.verdicts[0].empty && !out2.verdicts[0].novel);
    let e = DnmfModel::new(DnmfParams {
        delta: 1.5,
        ..DnmfParams::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("dnmf.delta"), "{e}");
}

/// Restore `m` from its parts and check the restored model's next step equals the original's.
fn assert_restores(p: &DnmfParams, m: &DnmfModel, next: &[&str]) -> DnmfModel {
    let parts = parts_map(m);
    let back = DnmfModel::from_state_parts(p.clone(), &parts)
        .unwrap_or_else(|e| panic!("a state the model wrote must load: {e}"));
    let (m1, o1) = m.step(next).unwrap();
    let (m2, o2) = back.step(next).unwrap();
    assert_eq!(o1.verdicts, o2.verdicts);
    assert_eq!(parts_map(&m1), parts_map(&m2));
    m1
}

#[test]
fn a_window_document_emptied_by_eviction_still_round_trips() {
    // max_terms = 10: every batch of new words evicts the oldest, rarest terms, until the
    // first window documents have lost every term
    let p = DnmfParams {
        text: novad_models::TextParams {
            max_terms: 10,
            ..Default::default()
        },
        min_df: 1,
        window: 4,
        ..small_params()
    };
    let batches: Vec<Vec<String>> = (0..5)
        .map(|t| {
            (0..4)
                .map(|d| {
                    (0..6)
                        .map(|w| letters(t * 100 + d * 7 + w))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect()
        })
        .collect();
    let mut m = DnmfModel::new(p.clone()).unwrap();
    let mut emptied = false;
    for b in &batches {
        let texts: Vec<&str> = b.iter().map(|s| s.as_str()).collect();
        m = assert_restores(&p, &m, &texts);
        emptied |= m.window().any(|w| w.docs.iter().any(|d| d.is_empty()));
    }
    assert!(
        emptied,
        "the stream empties a window document (else the test proves nothing)"
    );
}

#[test]
fn an_empty_batch_keeps_the_topics_and_adds_none() {
    let p = small_params();
    let stream = planted(5);
    let mut m = DnmfModel::new(p.clone()).unwrap();
    for docs in stream.iter().take(2) {
        let texts: Vec<&str> = docs.iter().map(|d| d.0.as_str()).collect();
        m = m.step(&texts).unwrap().0;
    }
    let before: Vec<(u32, Vec<(u32, f32)>)> =
        m.topics().iter().map(|t| (t.id, t.row.clone())).collect();
    assert!(!before.is_empty());
    for batch in [vec![], vec!["", "the and of"]] {
        let (next, out) = m.step(&batch).unwrap();
        let after: Vec<(u32, Vec<(u32, f32)>)> = next
            .topics()
            .iter()
            .map(|t| (t.id, t.row.clone()))
            .collect();
        assert_eq!(
            after, before,
            "no topic injected or changed by an empty batch"
        );
        assert!(out
            .verdicts
            .iter()
            .all(|v| v.empty && !v.novel && v.score == 0.0));
        assert!(out.topics.is_empty());
        m = assert_restores(&p, &next, &[]);
    }
    // and the stream goes on
    let texts: Vec<&str> = stream[2].iter().map(|d| d.0.as_str()).collect();
    let (_, out) = m.step(&texts).unwrap();
    assert_eq!(out.verdicts.len(), texts.len());
}

#[test]
fn a_first_batch_without_weight_does_not_use_up_the_bootstrap() {
    // one document: every term has IDF 0, so the batch carries no signal
    let p = small_params();
    let m = DnmfModel::new(p.clone()).unwrap();
    let (m, out) = m.step(&["alpha beta gamma delta"]).unwrap();
    assert!(
        m.topics().is_empty(),
        "no topics learnt from a weightless batch"
    );
    assert!(!out.verdicts[0].empty && !out.verdicts[0].novel && !out.verdicts[0].bootstrap);
    assert!(!out.stats.bootstrap);
    // the next real batch bootstraps
    let stream = planted(6);
    let texts: Vec<&str> = stream[0].iter().map(|d| d.0.as_str()).collect();
    let (m, out) = m.step(&texts).unwrap();
    assert!(out.stats.bootstrap);
    assert_eq!(m.topics().len(), p.initial_topics);
}
