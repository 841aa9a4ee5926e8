//! The classifiers of the OSTC evaluation: features of a document's codes, a standardised
//! multi-class Pegasos SVM over them ("STC + SVM"), online MedSTC, and the bag-of-words
//! reference.

use super::*;

/// Which codes the classifiers read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Feats {
    /// ln(1 + z)/‖·‖₂ of the topic counts z ([`DocCode::topic_counts`]).
    Counts,
    /// θ/‖θ‖₂.
    Theta,
    /// Both, concatenated (2K).
    Joint,
}

impl Feats {
    pub(super) fn of(args: &OstcEvalArgs) -> Feats {
        if args.joint_features {
            Feats::Joint
        } else if args.theta_features {
            Feats::Theta
        } else {
            Feats::Counts
        }
    }
    pub(super) fn dim(self, k: usize) -> usize {
        if self == Feats::Joint {
            2 * k
        } else {
            k
        }
    }
    /// The features of a document's codes (`b` its block under the dictionary coded with).
    pub(super) fn get(self, c: &DocCode, b: &novad_models::ostc::coding::DocBlock) -> Vec<f64> {
        match self {
            Feats::Counts => log_features(&c.topic_counts(b)),
            Feats::Theta => features(&c.theta),
            Feats::Joint => joint_features(&c.topic_counts(b), &c.theta),
        }
    }
}

/// Classifier features of a document coded without its label ([`code_doc`]).
pub(super) fn doc_features(d: &Doc, beta: &Array2<f32>, p: &CodeParams, f: Feats) -> Vec<f64> {
    let b = doc_block(d, beta);
    let c = code_doc(&b, p);
    f.get(&c, &b)
}

/// ln(1 + z), ℓ2-normalised: keeps a background topic holding most counts from drowning the
/// rest.
pub(super) fn log_features(z: &[f64]) -> Vec<f64> {
    count_features(z)
}

/// Per-dimension standardisation (x − mean) / sd learned on training features.
#[derive(Debug, Clone)]
pub(super) struct Standardise {
    mean: Vec<f64>,
    sd: Vec<f64>,
}

impl Standardise {
    pub(super) fn identity(dim: usize) -> Self {
        Standardise {
            mean: vec![0.0; dim],
            sd: vec![1.0; dim],
        }
    }
    pub(super) fn fit(xs: &[&[f64]], dim: usize) -> Self {
        let n = xs.len().max(1) as f64;
        let mut mean = vec![0.0; dim];
        for x in xs {
            for (m, v) in mean.iter_mut().zip(x.iter()) {
                *m += v / n;
            }
        }
        let mut sd = vec![0.0; dim];
        for x in xs {
            for ((s, v), m) in sd.iter_mut().zip(x.iter()).zip(&mean) {
                *s += (v - m) * (v - m) / n;
            }
        }
        let sd = sd
            .into_iter()
            .map(|v| if v > 1e-24 { v.sqrt() } else { 1.0 })
            .collect();
        Standardise { mean, sd }
    }
    /// Standardise, then scale to unit ℓ2 norm (Pegasos' step assumes bounded ‖x‖).
    pub(super) fn apply(&self, x: &[f64]) -> Vec<f64> {
        features(
            &x.iter()
                .zip(&self.mean)
                .zip(&self.sd)
                .map(|((v, m), s)| (v - m) / s)
                .collect::<Vec<f64>>(),
        )
    }
}

pub(super) fn accuracy(
    test: &[(Doc, usize)],
    beta: &Array2<f32>,
    p: &CodeParams,
    clf: &(Pegasos, Standardise),
    f: Feats,
) -> f64 {
    let (svm, st) = clf;
    let ok: usize = test
        .par_iter()
        .map(|(d, y)| usize::from(svm.predict(&st.apply(&doc_features(d, beta, p, f))) == *y))
        .sum();
    ok as f64 / test.len().max(1) as f64
}

pub(super) fn fit_svm(
    feats: &[(Vec<f64>, usize)],
    args: &OstcEvalArgs,
    classes: usize,
    rng: &mut ChaCha8Rng,
) -> (Pegasos, Standardise) {
    let dim = feats.first().map_or(0, |f| f.0.len());
    let xs: Vec<&[f64]> = feats.iter().map(|f| f.0.as_slice()).collect();
    let st = Standardise::fit(&xs, dim);
    let zs: Vec<Vec<f64>> = feats.iter().map(|f| st.apply(&f.0)).collect();
    let mut svm = Pegasos::new(classes, dim, args.svm_lambda, args.margin);
    let mut order: Vec<usize> = (0..feats.len()).collect();
    let avg_from = args.svm_epochs / 2;
    let mut avg = vec![0.0; svm.w.len()];
    let mut n_avg = 0.0;
    for e in 0..args.svm_epochs {
        order.shuffle(rng);
        for &i in &order {
            svm.update(&zs[i], feats[i].1);
            if args.svm_average && e >= avg_from {
                n_avg += 1.0;
                avg.iter_mut()
                    .zip(&svm.w)
                    .for_each(|(a, w)| *a += (w - *a) / n_avg);
            }
        }
    }
    if args.svm_average && n_avg > 0.0 {
        svm.w = avg;
    }
    (svm, st)
}

/// Test accuracy of "STC + SVM" on dictionary `beta`: the training documents coded without
/// labels, an SVM fitted on their features ([`fit_svm`]), the test documents coded and
/// classified.
pub(super) fn stc_svm_accuracy(
    data: &Data,
    args: &OstcEvalArgs,
    p: &CodeParams,
    beta: &Array2<f32>,
    rng: &mut ChaCha8Rng,
) -> f64 {
    let feats: Vec<(Vec<f64>, usize)> = data
        .train
        .par_iter()
        .map(|(d, y)| (doc_features(d, beta, p, Feats::of(args)), *y))
        .collect();
    let svm = fit_svm(&feats, args, CLASSES, rng);
    accuracy(&data.test, beta, p, &svm, Feats::of(args))
}

/// Online (M = batch_size) or collapsed-online learning with perplexity checkpoints.
pub(super) fn run_online(
    data: &Data,
    args: &OstcEvalArgs,
    p: &CodeParams,
    collapsed: bool,
    beta0: &Array2<f32>,
    rng: &mut ChaCha8Rng,
) -> (Array2<f32>, Vec<Checkpoint>) {
    let mut beta = beta0.clone();
    let mut mass = Vec::new();
    let mut cps = vec![checkpoint(data, &beta, p, collapsed, (0, 0.0), None)];
    let (mut secs, mut seen, mut t, mut next) = (0.0, 0usize, 0u64, args.eval_every);
    for _ in 0..args.passes {
        let mut order: Vec<usize> = (0..data.train.len()).collect();
        order.shuffle(rng);
        for chunk in order.chunks(args.batch_size.max(1)) {
            let t0 = Instant::now();
            let docs: Vec<&Doc> = chunk.iter().map(|&i| &data.train[i].0).collect();
            let codes: Vec<DocCode> = docs
                .par_iter()
                .map(|d| code(d, &beta, p, collapsed))
                .collect();
            let rate = learning_rate(t, args.tau0, args.tau);
            beta = learn_step(args, &mut mass, &beta, (&docs, &codes), rate);
            t += 1;
            secs += t0.elapsed().as_secs_f64();
            seen += chunk.len();
            if seen >= next {
                next += args.eval_every;
                cps.push(checkpoint(data, &beta, p, collapsed, (seen, secs), None));
                tracing::info!(
                    collapsed,
                    seen,
                    secs,
                    ppl = cps.last().map(|c| c.perplexity),
                    ppl_norm = cps.last().map(|c| c.perplexity_norm),
                    "online checkpoint"
                );
            }
        }
    }
    if cps.last().map(|c| c.docs_seen) != Some(seen) {
        cps.push(checkpoint(data, &beta, p, collapsed, (seen, secs), None));
    }
    (beta, cps)
}

/// Online MedSTC: one pass per `--passes` over the training documents (reshuffled each pass)
/// in mini-batches of `--batch-size`; each training document is coded with its label
/// ([`code_doc_supervised`]: the hinge of the current online SVM acts on the word codes through
/// the topic-count features; with `--theta-features`, [`Pegasos::supervise_theta`] acts on θ),
/// the online SVM takes one Pegasos step per document on those codes' features, and the
/// dictionary takes one step per mini-batch. Test documents are coded without labels. Returns
/// the checkpoints (test accuracy of the online SVM, perplexity), the final online-SVM accuracy
/// and the accuracy of an SVM refit on the label-free codes of the training documents under
/// the final dictionary. Uses its own generator (seed ^ 0x3ED5) so that its numbers do not
/// depend on which other stages ran.
pub(super) fn run_medstc(
    data: &Data,
    args: &OstcEvalArgs,
    p: &CodeParams,
    beta0: &Array2<f32>,
    classes: usize,
) -> (Vec<Checkpoint>, Option<f64>, Option<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0x3ED5);
    let p = *p;
    let mut beta = beta0.clone();
    let mut mass = Vec::new();
    let fk = Feats::of(args);
    let mut svm = Pegasos::new(classes, fk.dim(args.k), args.svm_lambda, args.margin);
    let mut cps = Vec::new();
    let (mut secs, mut seen, mut t, mut next) = (0.0, 0usize, 0u64, args.eval_every);
    let total = data.train.len() * args.passes as usize;
    // --svm-average: the online SVM predicts with the mean of its iterates over the second
    // half of the training stream (before that, with the current iterate)
    let seen_avg_from = total / 2;
    let mut avg = vec![0.0; svm.w.len()];
    let mut n_avg = 0.0;
    for _ in 0..args.passes {
        let mut order: Vec<usize> = (0..data.train.len()).collect();
        order.shuffle(&mut rng);
        for chunk in order.chunks(args.batch_size) {
            let t0 = Instant::now();
            let docs: Vec<&Doc> = chunk.iter().map(|&i| &data.train[i].0).collect();
            let (codes, feats): (Vec<DocCode>, Vec<Vec<f64>>) = chunk
                .par_iter()
                .map(|&i| {
                    let (d, y) = &data.train[i];
                    let blk = doc_block(d, &beta);
                    if fk == Feats::Theta {
                        let denom = p.lambda() + p.gamma * d.len() as f64;
                        let c = code_doc_with(&blk, &p, |theta, _s| {
                            svm.supervise_theta(theta, *y, args.medstc_c, denom)
                        });
                        let f = fk.get(&c, &blk);
                        (c, f)
                    } else {
                        let joint = fk == Feats::Joint;
                        let c = code_doc_supervised(&blk, &p, &svm, *y, args.medstc_c, joint);
                        let f = fk.get(&c, &blk);
                        (c, f)
                    }
                })
                .unzip();
            for (f, &i) in feats.iter().zip(chunk) {
                svm.update(f, data.train[i].1);
                if args.svm_average && seen_avg_from <= seen {
                    n_avg += 1.0;
                    avg.iter_mut()
                        .zip(&svm.w)
                        .for_each(|(a, w)| *a += (w - *a) / n_avg);
                }
            }
            let rate = learning_rate(t, args.tau0, args.tau);
            beta = learn_step(args, &mut mass, &beta, (&docs, &codes), rate);
            t += 1;
            secs += t0.elapsed().as_secs_f64();
            seen += chunk.len();
            if seen >= next || seen == total {
                next += args.eval_every;
                let mut clf = svm.clone();
                if n_avg > 0.0 {
                    clf.w = avg.clone();
                }
                let acc = accuracy(
                    &data.test,
                    &beta,
                    &p,
                    &(clf, Standardise::identity(fk.dim(args.k))),
                    Feats::of(args),
                );
                cps.push(checkpoint(data, &beta, &p, false, (seen, secs), Some(acc)));
                tracing::info!(seen, secs, acc, "medstc checkpoint");
            }
        }
    }
    let acc = cps.last().and_then(|c| c.accuracy);
    let acc_refit = stc_svm_accuracy(data, args, &p, &beta, &mut rng);
    tracing::info!(acc, acc_refit, "medstc final");
    for &svm_lambda in &args.refit_lambdas {
        let a2 = OstcEvalArgs {
            svm_lambda,
            ..args.clone()
        };
        let mut r2 = ChaCha8Rng::seed_from_u64(args.seed ^ 0x3ED6);
        let acc = stc_svm_accuracy(data, &a2, &p, &beta, &mut r2);
        tracing::info!(svm_lambda, acc, "medstc refit (tuning)");
    }
    (cps, acc, Some(acc_refit))
}

/// Sanity reference for the classifier (not a topic model): the same Pegasos SVM on
/// ℓ2-normalised term counts (term ids folded into 4096 dimensions).
pub(super) fn bow_accuracy(
    data: &Data,
    args: &OstcEvalArgs,
    classes: usize,
    rng: &mut ChaCha8Rng,
) -> f64 {
    let bow = |d: &Doc| {
        let mut x = vec![0.0; 4096];
        for &(id, c) in d {
            x[id as usize % 4096] += c as f64;
        }
        features(&x)
    };
    let bow_train: Vec<(Vec<f64>, usize)> = data.train.iter().map(|(d, y)| (bow(d), *y)).collect();
    let bow_svm = fit_svm(&bow_train, args, classes, rng);
    let ok = data
        .test
        .iter()
        .filter(|(d, y)| bow_svm.0.predict(&bow_svm.1.apply(&bow(d))) == *y)
        .count();
    ok as f64 / data.test.len().max(1) as f64
}
