//! Projection onto 𝒜, OIADMM on a planted stream, bootstrap.
mod common;

use common::*;
use ndarray::Array2;
use novad_models::l1::coding::{code_batch, CodingDict, CodingParams};
use novad_models::l1::dictionary::{
    a_step, bootstrap, codes_to_csc, docs_to_csr, in_dictionary_set, init_atoms, oiadmm_step,
    project_columns, project_nonneg_l1_ball, remap_rows, resize_cols, AtomInit, BootstrapParams,
    Dictionary, Multiplier, OiadmmParams,
};
use novad_models::model::OiadmmStats;
use novad_models::text::Remap;
use rand::Rng;
use sprs::CsMat;

/// [`oiadmm_step`] on a dense Â (converted to rows and back, both bit for bit).
fn step_rows(
    p: &CsMat<f64>,
    a: &Array2<f32>,
    delta: Option<&mut Multiplier>,
    x: &CsMat<f64>,
    op: &OiadmmParams,
) -> (Array2<f32>, OiadmmStats) {
    let (a2, st) = oiadmm_step(p, &Dictionary::from_dense(a.view()), delta, x, op);
    (a2.to_dense(), st)
}

/// The codes of `docs` over the dense dictionary `a` with the paper's coding parameters.
fn paper_codes(
    a: &Array2<f32>,
    docs: &[novad_models::text::SparseDoc],
) -> Vec<novad_models::model::Code> {
    let params = CodingParams::paper();
    code_batch(
        &CodingDict::from_dense(a.view(), params.step),
        docs,
        &params,
    )
}

/// x is the Euclidean projection of v onto the polytope {x ≥ 0, Σx ≤ 1} iff x is in it and
/// ⟨v − x, y − x⟩ ≤ 0 for every vertex y ∈ {0, e_1, …, e_n}.
fn check_projection(v: &[f64], x: &[f64]) {
    assert!(x.iter().all(|&t| t >= 0.0));
    assert!(x.iter().sum::<f64>() <= 1.0 + 1e-12);
    let d: Vec<f64> = v.iter().zip(x).map(|(a, b)| a - b).collect();
    let dx: f64 = d.iter().zip(x).map(|(a, b)| a * b).sum();
    assert!(-dx <= 1e-12, "vertex 0 violates: {v:?} → {x:?}");
    for (i, di) in d.iter().enumerate() {
        assert!(di - dx <= 1e-12, "vertex e_{i} violates: {v:?} → {x:?}");
    }
}

#[test]
fn projection_satisfies_the_variational_inequality() {
    let mut r = rng(1);
    for case in 0..2000 {
        let n = 1 + case % 7;
        let scale = [0.1, 0.5, 1.0, 3.0][case % 4];
        let v: Vec<f64> = (0..n)
            .map(|_| scale * (r.random::<f64>() * 2.0 - 0.5))
            .collect();
        let mut x = v.clone();
        project_nonneg_l1_ball(&mut x);
        check_projection(&v, &x);
    }
    // ties and exact boundary
    let mut x = vec![0.5, 0.5, 0.5];
    project_nonneg_l1_ball(&mut x);
    for t in &x {
        assert!((t - 1.0 / 3.0).abs() < 1e-12);
    }
    let mut x = vec![0.25, 0.75];
    project_nonneg_l1_ball(&mut x);
    assert_eq!(x, vec![0.25, 0.75]);
}

#[test]
fn column_projection_projects_each_column() {
    let mut r = rng(2);
    let mut a = Array2::<f64>::from_shape_fn((9, 5), |_| r.random::<f64>() - 0.3);
    let orig = a.clone();
    project_columns(&mut a);
    for j in 0..5 {
        let v: Vec<f64> = orig.column(j).to_vec();
        let x: Vec<f64> = a.column(j).to_vec();
        check_projection(&v, &x);
    }
}

#[test]
fn remap_and_resize_keep_rows_and_columns() {
    let a = Array2::from_shape_fn((4, 3), |(i, j)| (i * 3 + j) as f32 + 1.0);
    let r = Remap {
        old_len: 4,
        new_len: 4,
        map: Some(vec![u32::MAX, 0, 1, u32::MAX]),
    };
    let b = remap_rows(&a, &r);
    assert_eq!(b.row(0), a.row(1));
    assert_eq!(b.row(1), a.row(2));
    assert!(
        b.row(2).iter().chain(b.row(3).iter()).all(|&v| v == 0.0),
        "new terms are zero"
    );
    let c = resize_cols(&a, 5);
    assert_eq!(c.shape(), &[4, 5]);
    assert_eq!(c.column(2), a.column(2));
    assert!(c.column(4).iter().all(|&v| v == 0.0));
    let d = resize_cols(&a, 2);
    assert_eq!(d.column(1), a.column(1));
}

/// Documents drawn from a planted non-negative dictionary with a few atoms each.
fn planted_batch(
    r: &mut rand_chacha::ChaCha8Rng,
    truth: &Array2<f32>,
    n: usize,
) -> Vec<novad_models::text::SparseDoc> {
    let k = truth.ncols();
    (0..n)
        .map(|_| {
            let j = r.random_range(0..k);
            doc_from_atoms(r, truth, &[j], 0.05)
        })
        .collect()
}

/// Mean ℓ1 coding error per document for each of 40 planted batches, learning Â online.
fn planted_stream_errors(carry_delta: bool) -> Vec<f64> {
    let mut r = rng(5);
    let (m, k_true, k) = (120, 6, 12);
    // planted atoms: disjoint blocks of 20 terms with random weights
    let mut truth = Array2::<f32>::zeros((m, k_true));
    for j in 0..k_true {
        let mut s = 0.0;
        for i in j * 20..(j + 1) * 20 {
            let v = 0.2 + r.random::<f32>();
            truth[[i, j]] = v;
            s += v;
        }
        truth.column_mut(j).mapv_inplace(|v| v / s);
    }
    let mut params = CodingParams::paper();
    params.step = novad_models::l1::coding::StepSize::PerDocument;
    // start from atoms that are single noisy documents (the paper's initialisation), perturbed
    // with mass on random terms so there is something to learn
    let first = planted_batch(&mut r, &truth, 200);
    let mut a = init_atoms(&first, m, k, &AtomInit::RandomDocuments, 9);
    for j in 0..k {
        for _ in 0..8 {
            let i = r.random_range(0..m);
            a[[i, j]] += 0.04;
        }
    }
    let mut a64 = a.mapv(|v| v as f64);
    project_columns(&mut a64);
    a = a64.mapv(|v| v as f32);
    let mut delta = Multiplier::zeros(m, 0);
    let op = OiadmmParams {
        beta: 5.0,
        tau_scale: 1.0,
        carry_delta,
    };
    let mut errors = Vec::new();
    for t in 0..40 {
        let n = 150 + (t % 3) * 20; // batch size changes: Δ columns resize
        let batch = planted_batch(&mut r, &truth, n);
        let dict = CodingDict::from_dense(a.view(), params.step);
        let codes = code_batch(&dict, &batch, &params);
        errors.push(codes.iter().map(|c| c.score).sum::<f64>() / n as f64);
        let p = docs_to_csr(&batch, m);
        let x = codes_to_csc(&codes, k);
        delta = delta.remap_resize(
            &Remap {
                old_len: m,
                new_len: m,
                map: None,
            },
            n,
        );
        let (a2, stats) = step_rows(&p, &a, carry_delta.then_some(&mut delta), &x, &op);
        assert!(in_dictionary_set(&a2, 1e-5), "Â left 𝒜 at step {t}");
        assert!(stats.tau > 0.0);
        assert!(delta.is_valid());
        a = a2;
    }
    errors
}

#[test]
fn oiadmm_lowers_reconstruction_error_on_a_planted_stream_and_stays_in_the_set() {
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    // Δ restarted per batch: Â converges towards the planted atoms.
    let e = planted_stream_errors(false);
    assert!(
        mean(&e[35..]) < 0.6 * e[0] && mean(&e[35..]) < 0.8 * mean(&e[..5]),
        "error must fall: {:.3} → {:.3}",
        e[0],
        mean(&e[35..])
    );
    // The paper's Δ carry-over: the error still falls from the start, but stalls (Δ holds the
    // multipliers of other documents); measured 0.66 → 0.56.
    let c = planted_stream_errors(true);
    assert!(
        mean(&c[30..]) < 0.95 * c[0],
        "{:.3} → {:.3}",
        c[0],
        mean(&c[30..])
    );
    assert!(
        mean(&e[30..]) < mean(&c[30..]),
        "restarting Δ learns better"
    );
}

/// A row the step cannot change (no entry other than ±0, no term of the batch, no multiplier)
/// keeps its bits, −0.0 included, as it would in a dense Â; the rest of Â does change.
#[test]
fn rows_the_step_cannot_change_keep_their_bits() {
    let mut r = rng(9);
    let mut a = random_dict(&mut r, 30, 4, 0.3);
    a.row_mut(29).fill(-0.0);
    let docs: Vec<_> = (0..6).map(|_| random_doc(&mut r, 29, 5)).collect();
    let codes: Vec<_> = (0..docs.len())
        .map(|j| novad_models::model::Code {
            atoms: vec![(j % 4) as u32],
            weights: vec![0.5 + j as f64 / 10.0],
            score: 1.0,
            ceiling: 1.0,
            iterations: 1,
            active_atoms: 1,
            residual: vec![],
        })
        .collect();
    let (p, x) = (docs_to_csr(&docs, 30), codes_to_csc(&codes, 4));
    let (a2, st) = step_rows(&p, &a, None, &x, &OiadmmParams::paper());
    assert!(st.tau > 0.0 && st.relative_change > 0.0, "{st:?}");
    let minus_zero = (-0.0f32).to_bits();
    assert!(a2.row(29).iter().all(|v| v.to_bits() == minus_zero));
}

#[test]
fn oiadmm_with_zero_codes_keeps_the_dictionary() {
    let mut r = rng(8);
    let a = random_dict(&mut r, 30, 4, 0.3);
    let docs: Vec<_> = (0..5).map(|_| random_doc(&mut r, 30, 5)).collect();
    let p = docs_to_csr(&docs, 30);
    let x = codes_to_csc(
        &docs
            .iter()
            .map(|_| novad_models::model::Code {
                atoms: vec![],
                weights: vec![],
                score: 1.0,
                ceiling: 1.0,
                iterations: 0,
                active_atoms: 0,
                residual: vec![],
            })
            .collect::<Vec<_>>(),
        4,
    );
    let mut d2 = Multiplier::zeros(30, 5);
    let (a2, st) = step_rows(&p, &a, Some(&mut d2), &x, &OiadmmParams::paper());
    let d2 = d2.to_dense();
    assert_eq!(a2, a);
    assert_eq!(st.tau, 0.0);
    // Δ_{t+1} = β (P − Γ) with Γ = soft(P, 1/β): each entry is β·min(p, 1/β) = min(βp, 1)
    for (i, row) in d2.rows().into_iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            let pij = docs[j]
                .ids
                .iter()
                .position(|&t| t as usize == i)
                .map(|q| docs[j].vals[q])
                .unwrap_or(0.0);
            assert!((v as f64 - (5.0 * pij).min(1.0)).abs() < 1e-6);
        }
    }
}

#[test]
fn a_step_lowers_the_batch_l1_objective_and_bootstrap_is_deterministic() {
    let mut r = rng(13);
    let truth = random_dict(&mut r, 80, 5, 0.2);
    let docs: Vec<_> = (0..120)
        .map(|i| doc_from_atoms(&mut r, &truth, &[i % 5], 0.1))
        .collect();
    let params = CodingParams::paper();
    let a0 = init_atoms(&docs, 80, 8, &AtomInit::RandomDocuments, 1);
    let obj = |a: &Array2<f32>, x: &sprs::CsMat<f64>| -> f64 {
        // ‖P − A X‖₁ over all entries
        let mut total = 0.0;
        for (j, d) in docs.iter().enumerate() {
            let mut col = dense(d, 80);
            if let Some(c) = x.outer_view(j) {
                for (kk, &v) in c.iter() {
                    for i in 0..80 {
                        col[i] -= a[[i, kk]] as f64 * v;
                    }
                }
            }
            total += col.iter().map(|v| v.abs()).sum::<f64>();
        }
        total
    };
    let dict = CodingDict::from_dense(a0.view(), params.step);
    let x = codes_to_csc(&code_batch(&dict, &docs, &params), 8);
    let p = docs_to_csr(&docs, 80);
    let a1 = a_step(&p, &x, &a0, params.phi, params.gamma, 60);
    assert!(in_dictionary_set(&a1, 1e-5));
    assert!(
        obj(&a1, &x) < obj(&a0, &x),
        "A-step must lower ‖P − AX‖₁ for fixed X"
    );

    let bp = BootstrapParams::paper();
    let b1 = bootstrap(&docs, 80, 8, &params, &bp, 42);
    let b2 = bootstrap(&docs, 80, 8, &params, &bp, 42);
    assert_eq!(b1, b2);
    assert!(in_dictionary_set(&b1, 1e-5));
    let km = AtomInit::KMeans {
        top_terms: 5,
        iterations: 10,
    };
    let k1 = init_atoms(&docs, 80, 8, &km, 3);
    assert!(in_dictionary_set(&k1, 1e-5));
    for j in 0..8 {
        let nnz = k1.column(j).iter().filter(|&&v| v > 0.0).count();
        assert!(nnz <= 5, "k-means atoms are cut to their top terms");
    }
}

/// Algorithm 2 transcribed literally with dense matrices (the oracle for the sparse, row-wise
/// implementation).
fn oiadmm_dense(
    p: &Array2<f64>,
    a: &Array2<f64>,
    d: &Array2<f64>,
    x: &Array2<f64>,
    beta: f64,
    tau: f64,
) -> (Array2<f64>, Array2<f64>) {
    let soft = |v: f64, t: f64| v.signum() * (v.abs() - t).max(0.0);
    let gt = p - &a.dot(x);
    let g = (&gt + &(d / beta)).mapv(|v| soft(v, 1.0 / beta));
    let grad = -(&(d / beta) + &gt - &g).dot(&x.t());
    let mut a2 = (a - &(grad * tau)).mapv(|v| v.max(0.0));
    project_columns(&mut a2);
    let d2 = d + &((p - &a2.dot(x) - &g) * beta);
    (a2, d2)
}

#[test]
fn oiadmm_matches_a_dense_transcription_of_algorithm_2() {
    let mut r = rng(21);
    for case in 0..20 {
        let (m, k, n) = (25 + case, 4 + case % 3, 6 + case % 5);
        let a = random_dict(&mut r, m, k, 0.3);
        let docs: Vec<_> = (0..n).map(|_| random_doc(&mut r, m, 6)).collect();
        // Δ with a mix of zeros, small and large (|Δ| > 1, clipped) entries
        let delta = Array2::<f32>::from_shape_fn((m, n), |_| {
            if r.random::<f64>() < 0.5 {
                0.0
            } else {
                (r.random::<f32>() - 0.5) * 3.0
            }
        });
        let codes: Vec<novad_models::model::Code> = (0..n)
            .map(|j| {
                let atoms: Vec<u32> = if j % 3 == 0 {
                    vec![]
                } else {
                    vec![0, (j % k) as u32]
                };
                let mut atoms = atoms;
                atoms.dedup();
                novad_models::model::Code {
                    weights: atoms.iter().map(|_| 0.2 + r.random::<f64>()).collect(),
                    atoms,
                    score: 0.0,
                    ceiling: 1.0,
                    iterations: 0,
                    active_atoms: 0,
                    residual: vec![],
                }
            })
            .collect();
        let x = codes_to_csc(&codes, k);
        let p = docs_to_csr(&docs, m);
        let mut d2 = Multiplier::from_dense(&delta);
        let (a2, st) = step_rows(&p, &a, Some(&mut d2), &x, &OiadmmParams::paper());
        assert!(d2.is_valid());
        let d2 = d2.to_dense();
        let (ea, ed) = oiadmm_dense(
            &p.to_dense(),
            &a.mapv(|v| v as f64),
            &delta.mapv(|v| v as f64),
            &x.to_dense(),
            5.0,
            st.tau,
        );
        for (u, v) in a2.iter().zip(ea.iter()) {
            assert!((*u as f64 - v).abs() < 1e-5, "case {case}: Â {u} vs {v}");
        }
        for (u, v) in d2.iter().zip(ed.iter()) {
            assert!((*u as f64 - v).abs() < 1e-4, "case {case}: Δ {u} vs {v}");
        }
        // without Δ the dictionary equals the dense step from Δ = 0
        let (a3, _) = step_rows(&p, &a, None, &x, &OiadmmParams::paper());
        let (ea3, _) = oiadmm_dense(
            &p.to_dense(),
            &a.mapv(|v| v as f64),
            &Array2::zeros((m, n)),
            &x.to_dense(),
            5.0,
            st.tau,
        );
        for (u, v) in a3.iter().zip(ea3.iter()) {
            assert!((*u as f64 - v).abs() < 1e-5);
        }
    }
}

/// The OIADMM step is bit-identical whatever the number of rayon threads (rows are computed
/// independently, each in a fixed order), Â and Δ alike; and the same from codes computed
/// shard by shard in any order (as separate processes would) and put back in batch order.
#[test]
fn oiadmm_is_bit_identical_whatever_the_number_of_threads_or_who_coded() {
    let mut r = rng(11);
    let (m, k, n) = (200, 10, 97);
    let a = random_dict(&mut r, m, k, 0.3);
    let docs: Vec<_> = (0..n)
        .map(|j| match j % 3 {
            0 => random_doc(&mut r, m, 12),
            _ => doc_from_atoms(&mut r, &a, &[j % k, (j * 7) % k], 0.1),
        })
        .collect();
    let params = CodingParams::paper();
    let codes = paper_codes(&a, &docs);
    assert!(codes.iter().filter(|c| !c.atoms.is_empty()).count() > n / 2);
    let p = docs_to_csr(&docs, m);
    let x = codes_to_csc(&codes, k);
    let mut dense_delta = Array2::<f32>::zeros((m, n));
    for _ in 0..300 {
        dense_delta[[r.random_range(0..m), r.random_range(0..n)]] = r.random::<f32>() - 0.5;
    }
    let delta0 = Multiplier::from_dense(&dense_delta);
    let bits = |a: &Array2<f32>| a.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    // β = 5 (the paper's) takes every row through the Gram matrix; β = 50 clips, so many rows
    // are summed document by document
    for beta in [5.0, 50.0] {
        let op = OiadmmParams {
            beta,
            ..OiadmmParams::paper()
        };
        let run_in = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut d = delta0.clone();
                let (a2, st) = step_rows(&p, &a, Some(&mut d), &x, &op);
                (a2, d, st.tau)
            })
        };
        let (a1, d1, tau) = run_in(1);
        let (a2, d2, _) = run_in(2);
        let (a3, _, _) = run_in(3);
        assert_eq!(bits(&a1), bits(&a2));
        assert_eq!(bits(&a1), bits(&a3));
        assert_eq!(d1, d2);
        assert_ne!(bits(&a1), bits(&a), "the step changed Â");
        assert!(tau > 0.0);
    }
    let op = OiadmmParams::paper();
    let mut d1 = delta0.clone();
    let (a1, _) = step_rows(&p, &a, Some(&mut d1), &x, &op);
    // the codes again, shard by shard from the last shard to the first
    use novad_models::l1::dictionary::{shard_docs, LOGICAL_SHARDS};
    let cd = CodingDict::from_dense(a.view(), params.step);
    let mut by_shard = vec![None; n];
    for s in (0..LOGICAL_SHARDS).rev() {
        let pos: Vec<usize> = shard_docs(n, s).collect();
        let shard: Vec<_> = pos.iter().map(|&j| docs[j].clone()).collect();
        for (j, c) in pos.into_iter().zip(code_batch(&cd, &shard, &params)) {
            by_shard[j] = Some(c);
        }
    }
    let again: Vec<_> = by_shard.into_iter().map(Option::unwrap).collect();
    assert_eq!(
        again, codes,
        "a document's code does not depend on its shard-mates"
    );
    let mut d4 = delta0.clone();
    let (a4, _) = step_rows(&p, &a, Some(&mut d4), &codes_to_csc(&again, k), &op);
    assert_eq!(bits(&a1), bits(&a4));
    assert_eq!(d1, d4);
}

/// The update shared by logical shards of Â's rows ([`UpdateJob`]): each of several workers
/// computes the gradient rows of its hand of a deal by predicted cost, the column thresholds
/// come from their sums added up round by round, each projects its rows, every part is
/// handed to the new Â (in any order), and Â_{t+1} and Δ_{t+1} equal the one-worker step bit
/// for bit; the deal spreads the predicted cost.
#[test]
fn the_update_shared_by_row_shards_equals_the_one_worker_step() {
    use novad_models::l1::dictionary::{
        add_sums, column_sums, deal, ColumnSum, GradientRows, Thresholds, UpdateJob, LOGICAL_SHARDS,
    };
    // the all-reduce of the workers' sums
    let reduce = |each: Vec<Vec<ColumnSum>>| {
        let mut t = each[0].clone();
        for o in &each[1..] {
            add_sums(&mut t, o).unwrap();
        }
        t
    };
    let mut r = rng(17);
    let (m, k, n) = (300, 10, 80);
    let a = random_dict(&mut r, m, k, 0.3);
    let docs: Vec<_> = (0..n)
        .map(|j| doc_from_atoms(&mut r, &a, &[j % k, (j * 3) % k], 0.1))
        .collect();
    let codes = paper_codes(&a, &docs);
    let (p, x) = (docs_to_csr(&docs, m), codes_to_csc(&codes, k));
    let mut dense_delta = Array2::<f32>::zeros((m, n));
    for _ in 0..400 {
        dense_delta[[r.random_range(0..m), r.random_range(0..n)]] = r.random::<f32>() - 0.5;
    }
    let (dict, delta0) = (
        Dictionary::from_dense(a.view()),
        Multiplier::from_dense(&dense_delta),
    );
    let op = OiadmmParams::paper();
    for carried in [false, true] {
        let mut d1 = delta0.clone();
        let (want, want_st) = oiadmm_step(&p, &dict, carried.then_some(&mut d1), &x, &op);
        for workers in [2, 3, 7] {
            let mut d2 = delta0.clone();
            let job = UpdateJob::new(&p, &dict, carried.then_some(&d2), &x, &op);
            let costs = job.shard_costs();
            assert!(costs.iter().filter(|&&c| c > 0).count() > LOGICAL_SHARDS / 2);
            let hands = deal(&costs, workers);
            let loads: Vec<u64> = hands
                .iter()
                .map(|h| h.iter().map(|&s| costs[s]).sum())
                .collect();
            let (most, least) = (loads.iter().max().unwrap(), loads.iter().min().unwrap());
            assert!(most - least <= *costs.iter().max().unwrap(), "{loads:?}");
            // each worker's rows; the thresholds from their sums, round by round
            let rows: Vec<Vec<GradientRows>> = hands.iter().map(|h| job.run(h)).collect();
            let mut th =
                Thresholds::start(&reduce(rows.iter().map(|r| column_sums(r, k)).collect()));
            let mut cand: Vec<_> = rows.iter().map(|r| th.candidates(r)).collect();
            while !th.is_done() {
                th.advance(&reduce(cand.iter_mut().map(|c| th.sums_above(c)).collect()))
                    .unwrap();
            }
            assert!(th.rounds() > 0, "some column is over the ball");
            let mut parts: Vec<_> = rows.into_iter().rev().flat_map(|r| th.apply(r)).collect();
            parts.reverse();
            let mut done = job.project(parts).unwrap();
            if carried {
                done.next_delta(&mut d2, &p, &dict);
                assert_eq!(d2, d1, "Δ with {workers} workers");
            }
            assert_eq!(
                done.dict, want,
                "Â with {workers} workers, Δ carried: {carried}"
            );
            assert_eq!(done.stats.tau.to_bits(), want_st.tau.to_bits());
            assert_eq!(
                done.stats.relative_change.to_bits(),
                want_st.relative_change.to_bits()
            );
        }
    }
}
