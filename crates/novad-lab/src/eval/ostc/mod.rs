//! `novad eval` for OSTC (WWW'13 §5.2) on the 20 Newsgroups bydate split: held-out perplexity
//! by document completion (Eq. 19) of online STC against batch STC (M = D) as a function of
//! training seconds and documents seen, word-code sparsity against a dense baseline, the
//! collapsed variant, and online MedSTC classification accuracy against documents seen.
//!
//! Protocol (all seeded):
//! - vocabulary fixed from the training split: the crate's tokenizer, terms with document
//!   frequency ≥ `--min-df`; documents as raw (term, count) pairs;
//! - training documents shuffled once; online learners read them in that order in mini-batches
//!   of `--batch-size`; batch STC does full passes (code all, one dictionary step); both step
//!   by `--step` (`stats`: online EM on sufficient statistics);
//! - perplexity set: `--perp-docs` test documents, each document's tokens shuffled and split in
//!   halves; codes inferred from half 1, then for each term n of half 2 the Poisson mean
//!   ν_n = θᵀβ_{·n} + ε (word code set to its Gaussian mean θ) and
//!   perplexity = exp(Σ −ln Poisson(w_n; ν_n) / Σ |I₂|) — per distinct held-out term, as Eq. 19;
//!   and the normalised perplexity per held-out token, π by PLSA fold-in of half 1 (see
//!   `perplexity_norm`; Eq. 19 rewards flattening the dictionary, this one does not);
//! - sparsity ratio = share of zero word-code entries over all (term, topic) pairs of the
//!   perplexity set's half 1; the dense baseline codes the same documents over the same
//!   dictionary with ρ = 0 (no Laplace prior);
//! - classification: features ln(1 + z)/‖·‖₂ of the topic counts z (`--theta-features`:
//!   θ/‖θ‖₂; `--joint-features`: both), Pegasos multi-class SVM (iterates averaged by default);
//!   "STC + SVM" codes the training set with the final online-STC dictionary and trains the SVM
//!   afterwards; online MedSTC interleaves supervised coding (the hinge of the current online
//!   SVM on the features, weight C), dictionary updates and one Pegasos step per training
//!   document, and is scored on the test split (coded without labels) at checkpoints;
//!   `--holdout f` replaces the test split by the last share f of the shuffled training set
//!   (for choosing settings).
//!
//! Timing: seconds are wall-clock seconds of learning only (evaluation excluded), on however
//! many threads rayon has.

use std::path::{Path, PathBuf};
use std::time::Instant;

use ndarray::Array2;
use plotters::prelude::*;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::Serialize;
use thiserror::Error;

use crate::medstc::{code_doc_supervised, count_features, features, joint_features, Pegasos};
use novad_models::ostc::coding::{
    code_doc, code_doc_collapsed, code_doc_with, fold_in, poisson_nll, CodeParams, DocCode,
};
use novad_models::ostc::dictionary::{
    init_dictionary, init_dictionary_from_docs, learning_rate, step, StepRule,
};
use novad_models::ostc::model::doc_block;
use novad_models::text::Tokenizer;
use novad_models::TextParams;

mod classify;
mod report;
use classify::*;
use report::*;

/// `--step`: one of [`StepRule::ALL`] by name (the help lists them).
fn step_rule() -> impl clap::builder::TypedValueParser<Value = StepRule> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(StepRule::ALL.map(StepRule::name)).map(|s| {
        s.parse::<StepRule>()
            .expect("a possible value names a step rule")
    })
}

/// Arguments of the OSTC evaluation.
#[derive(Debug, Clone, Serialize, clap::Args)]
pub struct OstcEvalArgs {
    /// The 20news-bydate.tar.gz archive.
    #[arg(long, default_value = "../shared/data/20news-bydate.tar.gz")]
    pub corpus: PathBuf,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output directory (created; files overwritten).
    #[arg(long, default_value = "eval-ostc")]
    pub out: PathBuf,
    /// Topics K.
    #[arg(long = "topics", default_value_t = 60)]
    pub k: usize,
    /// Laplace prior on word codes ρ.
    #[arg(long, default_value_t = 0.1)]
    pub rho: f64,
    /// Gaussian coupling γ (= λ).
    #[arg(long, default_value_t = 0.01)]
    pub gamma: f64,
    /// Learning rate α_t = τ₀/(t + τ).
    #[arg(long, default_value_t = 2.0)]
    pub tau0: f64,
    #[arg(long, default_value_t = 10.0)]
    pub tau: f64,
    /// τ₀ of batch STC (its step uses all training documents). The default 10 with τ = 10
    /// makes the first batch EM step a full M-step (α = 1), then 0.91, 0.83, …
    #[arg(long, default_value_t = 10.0)]
    pub batch_tau0: f64,
    /// Mini-batch size M of the online learners.
    #[arg(long, default_value_t = 64)]
    pub batch_size: usize,
    /// Passes of the online learners over the training set.
    #[arg(long, default_value_t = 1)]
    pub passes: u32,
    /// Iterations (full passes) of batch STC.
    #[arg(long, default_value_t = 6)]
    pub batch_iters: u32,
    /// Coordinate-descent sweeps per document.
    #[arg(long, default_value_t = 10)]
    pub sweeps: u32,
    /// Use at most this many training documents (0 = all).
    #[arg(long, default_value_t = 0)]
    pub train_docs: usize,
    /// Test documents classified (0 = all) and test documents in the perplexity set.
    #[arg(long, default_value_t = 0)]
    pub test_docs: usize,
    #[arg(long, default_value_t = 1000)]
    pub perp_docs: usize,
    /// Minimum training document frequency of a vocabulary term.
    #[arg(long, default_value_t = 5)]
    pub min_df: u64,
    /// Perplexity / accuracy checkpoints every this many training documents.
    #[arg(long, default_value_t = 2048)]
    pub eval_every: usize,
    /// Pegasos λ, hinge margin Δ and MedSTC's weight C of the hinge term in supervised coding
    /// (C = 100 chosen on a held-out 15 % of the training split, see docs/RESULTS.md).
    #[arg(long, default_value_t = 1e-4)]
    pub svm_lambda: f64,
    #[arg(long, default_value_t = 1.0)]
    pub margin: f64,
    #[arg(long, default_value_t = 100.0)]
    pub medstc_c: f64,
    /// Epochs of the post-hoc SVM (STC + SVM, and the MedSTC refit).
    #[arg(long, default_value_t = 10)]
    pub svm_epochs: u32,
    /// How a gradient becomes a dictionary step.
    #[arg(long, value_parser = step_rule(), default_value = "em")]
    pub step: StepRule,
    /// Uniform floor σ of the EM step.
    #[arg(long, default_value_t = 0.5)]
    pub em_smooth: f64,
    /// Training documents pooled into each initial topic (0 = term frequencies plus noise).
    #[arg(long, default_value_t = 0)]
    pub init_docs: usize,
    /// Classify on θ/‖θ‖₂ (the paper's features) instead of the topic counts z/‖z‖₂.
    #[arg(long)]
    pub theta_features: bool,
    /// Skip the collapsed variant / MedSTC (faster runs).
    #[arg(long)]
    pub no_collapsed: bool,
    #[arg(long)]
    pub no_medstc: bool,
    /// Diagnostic: start from the class-conditional term distributions of the training labels
    /// (topic j = class j mod 20, smoothed) and log the STC + SVM accuracy on that dictionary.
    #[arg(long)]
    pub oracle_init: bool,
    /// Run only the MedSTC stage (and the bag-of-words reference): no online / batch /
    /// collapsed perplexity runs, no STC + SVM (its rows are NaN in the report). MedSTC draws
    /// from its own seeded generator, so its numbers equal those of a full run.
    #[arg(long)]
    pub only_medstc: bool,
    /// Tuning: hold out this share of the (shuffled) training documents and use them as the
    /// test set instead of the test split (0 = evaluate on the test split).
    #[arg(long, default_value_t = 0.0)]
    pub holdout: f64,
    /// Average the Pegasos iterates of the post-hoc SVMs (STC + SVM, MedSTC refit, bag of
    /// words) over their last half of epochs, and MedSTC's online SVM over the second half of
    /// its stream (`--svm-average false` = last iterates).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub svm_average: bool,
    /// Tuning: also log (not report) the MedSTC refit accuracy with these Pegasos λ values
    /// (comma-separated), on the same final codes.
    #[arg(long, value_delimiter = ',')]
    pub refit_lambdas: Vec<f64>,
    /// Classify on the joint codes [ln(1 + z)/‖·‖₂ ; θ/‖θ‖₂] (dimension 2K; overrides
    /// `--theta-features`); MedSTC's hinge then acts on both halves (word codes and θ-step).
    #[arg(long)]
    pub joint_features: bool,
}

#[derive(Debug, Error)]
pub enum OstcEvalError {
    #[error(transparent)]
    Corpus(#[from] crate::corpus::CorpusError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("plot {path}: {msg}")]
    Plot { path: String, msg: String },
    #[error("bad arguments: {0}")]
    Args(String),
}

/// One checkpoint of a learner.
#[derive(Debug, Clone, Serialize)]
pub struct Checkpoint {
    pub docs_seen: usize,
    /// Learning seconds so far (evaluation excluded).
    pub seconds: f64,
    pub perplexity: f64,
    /// Normalised held-out perplexity per token (Eq. 18's form, the appendix's "LDA testing"):
    /// π by PLSA fold-in on half 1, exp(−Σ w_n ln(πᵀβ_{·n} + ε) / Σ w_n) over half 2's tokens.
    pub perplexity_norm: f64,
    /// Test accuracy (MedSTC only).
    pub accuracy: Option<f64>,
}

/// Everything the evaluation measured.
#[derive(Debug, Clone, Serialize)]
pub struct OstcEvalSummary {
    pub args: OstcEvalArgs,
    pub vocabulary: usize,
    pub train_docs: usize,
    pub test_docs: usize,
    pub perp_docs: usize,
    /// The unsupervised stages (their fields appear at the top level of results.json).
    #[serde(flatten)]
    pub stc: Unsupervised,
    pub medstc: Vec<Checkpoint>,
    /// Test accuracy of online MedSTC: its online SVM, and an SVM refit on the final codes.
    pub accuracy_medstc: Option<f64>,
    pub accuracy_medstc_refit: Option<f64>,
    pub seconds_total: f64,
}

/// What the unsupervised stages measured (online, batch and collapsed STC); NaN / empty / None
/// when `--only-medstc` skipped them.
#[derive(Debug, Clone, Serialize)]
pub struct Unsupervised {
    pub online: Vec<Checkpoint>,
    pub batch: Vec<Checkpoint>,
    pub collapsed: Vec<Checkpoint>,
    /// Seconds online STC needed to reach the best batch-STC perplexity (None = never).
    pub online_seconds_to_batch_perplexity: Option<f64>,
    /// The same for the normalised perplexity.
    pub online_seconds_to_batch_perplexity_norm: Option<f64>,
    /// Seconds batch STC needed to reach the normalised perplexity online STC ended with.
    pub batch_seconds_to_online_perplexity_norm: Option<f64>,
    /// Both perplexities (Eq. 19, normalised) of the final online dictionary mixed with
    /// `FLATTEN` (25 %) uniform mass: a check of what each metric rewards.
    pub flattened_perplexity: (f64, f64),
    pub sparsity_online: f64,
    pub sparsity_batch: f64,
    pub sparsity_collapsed: Option<f64>,
    pub sparsity_dense: f64,
    /// Test accuracy of an SVM on online-STC codes (unsupervised dictionary).
    pub accuracy_stc_svm: f64,
    /// The same on the final batch-STC dictionary (None without batch iterations).
    pub accuracy_batch_stc_svm: Option<f64>,
    /// The same SVM on ℓ2-normalised term counts (a check of the classifier, not a topic model).
    pub accuracy_bow_svm: f64,
}

type Doc = Vec<(u32, u32)>;

struct Data {
    train: Vec<(Doc, usize)>,
    test: Vec<(Doc, usize)>,
    /// (half 1, half 2) of the perplexity set.
    perp: Vec<(Doc, Doc)>,
    vocab: usize,
    tf: Vec<f64>,
}

fn counts(tokens: &[String], index: &std::collections::HashMap<String, u32>) -> Doc {
    let mut m: std::collections::BTreeMap<u32, u32> = Default::default();
    for t in tokens {
        if let Some(&id) = index.get(t) {
            *m.entry(id).or_insert(0) += 1;
        }
    }
    m.into_iter().collect()
}

fn load(args: &OstcEvalArgs, rng: &mut ChaCha8Rng) -> Result<Data, OstcEvalError> {
    let posts = crate::corpus::read_20news(&args.corpus)?;
    let tp = TextParams::default();
    let tok = Tokenizer::new(
        tp.min_token_len,
        tp.max_token_len,
        tp.builtin_stop_words,
        &tp.extra_stop_words,
    );
    let mut groups: Vec<String> = posts.iter().map(|p| p.group.clone()).collect();
    groups.sort();
    groups.dedup();
    let label = |g: &str| groups.iter().position(|x| x == g).unwrap_or(0);
    let toks: Vec<(Vec<String>, usize, bool)> = posts
        .par_iter()
        .map(|p| (tok.tokens(&p.text), label(&p.group), p.split == "train"))
        .collect();
    let mut df: std::collections::HashMap<&str, u64> = Default::default();
    for (t, _, train) in &toks {
        if *train {
            let mut u: Vec<&str> = t.iter().map(|s| s.as_str()).collect();
            u.sort_unstable();
            u.dedup();
            for s in u {
                *df.entry(s).or_insert(0) += 1;
            }
        }
    }
    let mut terms: Vec<&str> = df
        .iter()
        .filter(|(_, &d)| d >= args.min_df)
        .map(|(t, _)| *t)
        .collect();
    terms.sort_unstable();
    let index: std::collections::HashMap<String, u32> = terms
        .iter()
        .enumerate()
        .map(|(i, t)| (t.to_string(), i as u32))
        .collect();
    let mut train = Vec::new();
    let mut test = Vec::new();
    let mut test_tokens = Vec::new();
    for (t, y, is_train) in &toks {
        let c = counts(t, &index);
        if c.is_empty() {
            continue;
        }
        if *is_train {
            train.push((c, *y));
        } else {
            test.push((c, *y));
            test_tokens.push(t.clone());
        }
    }
    train.shuffle(rng);
    if args.train_docs > 0 {
        train.truncate(args.train_docs);
    }
    let mut order: Vec<usize> = (0..test.len()).collect();
    order.shuffle(rng);
    let mut perp = Vec::new();
    for &i in &order {
        if perp.len() >= args.perp_docs {
            break;
        }
        let mut t: Vec<String> = test_tokens[i]
            .iter()
            .filter(|s| index.contains_key(*s))
            .cloned()
            .collect();
        if t.len() < 4 {
            continue;
        }
        t.shuffle(rng);
        let (a, b) = t.split_at(t.len() / 2);
        perp.push((counts(a, &index), counts(b, &index)));
    }
    let test: Vec<(Doc, usize)> = if args.test_docs > 0 {
        order
            .iter()
            .take(args.test_docs)
            .map(|&i| test[i].clone())
            .collect()
    } else {
        test
    };
    let mut tf = vec![0.0; terms.len()];
    for (d, _) in &train {
        for &(id, c) in d {
            tf[id as usize] += c as f64;
        }
    }
    Ok(Data {
        train,
        test,
        perp,
        vocab: terms.len(),
        tf,
    })
}

fn code(d: &Doc, beta: &Array2<f32>, p: &CodeParams, collapsed: bool) -> DocCode {
    let b = doc_block(d, beta);
    if collapsed {
        code_doc_collapsed(&b, p)
    } else {
        code_doc(&b, p)
    }
}

/// The 20 Newsgroups classes.
const CLASSES: usize = 20;

/// Share of uniform mass mixed into the final online dictionary for the flattening check.
const FLATTEN: f64 = 0.25;

/// Iterations of the PLSA fold-in of [`perplexity_norm`].
const FOLD_IN_ITERS: usize = 50;

/// Normalised held-out perplexity per token by document completion: π = fold-in of half 1
/// (a point of the simplex), then exp(−Σ_{half 2} w_n ln(πᵀβ_{·n} + ε) / Σ_{half 2} w_n).
/// Every term of the vocabulary competes for the same unit of probability, so unlike Eq. 19
/// a flatter dictionary is not rewarded for spreading mass over terms that never occur.
fn perplexity_norm(perp: &[(Doc, Doc)], beta: &Array2<f32>, eps: f64) -> f64 {
    let res: Vec<(f64, f64)> = perp
        .par_iter()
        .map(|(a, b)| {
            let pi = fold_in(&doc_block(a, beta), FOLD_IN_ITERS);
            let mut nll = 0.0;
            let mut n = 0.0;
            for &(id, w) in b {
                let q: f64 = pi
                    .iter()
                    .zip(beta.row(id as usize))
                    .map(|(t, &x)| t * x as f64)
                    .sum();
                nll -= w as f64 * (q + eps).ln();
                n += w as f64;
            }
            (nll, n)
        })
        .collect();
    let (nll, n) = res
        .iter()
        .fold((0.0, 0.0), |acc, r| (acc.0 + r.0, acc.1 + r.1));
    (nll / n.max(1.0)).exp()
}

/// A checkpoint of a learner with dictionary `beta` (both perplexities measured now; NaN
/// without a perplexity set).
fn checkpoint(
    data: &Data,
    beta: &Array2<f32>,
    p: &CodeParams,
    collapsed: bool,
    (docs_seen, seconds): (usize, f64),
    accuracy: Option<f64>,
) -> Checkpoint {
    let (perplexity, perplexity_norm) = if data.perp.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        (
            perplexity(&data.perp, beta, p, collapsed).0,
            perplexity_norm(&data.perp, beta, p.eps),
        )
    };
    Checkpoint {
        docs_seen,
        seconds,
        perplexity,
        perplexity_norm,
        accuracy,
    }
}

/// Held-out perplexity by document completion (Eq. 19) and the word-code sparsity of half 1.
fn perplexity(
    perp: &[(Doc, Doc)],
    beta: &Array2<f32>,
    p: &CodeParams,
    collapsed: bool,
) -> (f64, f64) {
    let k = beta.ncols();
    let res: Vec<(f64, f64, f64, f64)> = perp
        .par_iter()
        .map(|(a, b)| {
            let c = code(a, beta, p, collapsed);
            let mut nll = 0.0;
            for &(id, w) in b {
                let nu = p.eps
                    + c.theta
                        .iter()
                        .zip(beta.row(id as usize))
                        .map(|(t, &x)| t * x as f64)
                        .sum::<f64>();
                nll += poisson_nll(w as f64, nu);
            }
            let zeros = c.s.iter().filter(|&&v| v == 0.0).count() as f64;
            (nll, b.len() as f64, zeros, (a.len() * k) as f64)
        })
        .collect();
    let (nll, n, z, tot) = res.iter().fold((0.0, 0.0, 0.0, 0.0), |acc, r| {
        (acc.0 + r.0, acc.1 + r.1, acc.2 + r.2, acc.3 + r.3)
    });
    ((nll / n.max(1.0)).exp(), z / tot.max(1.0))
}

/// Calls `f` with the mini-batch as the dictionary module takes it: (term ids, counts, code)
/// per document.
fn with_parts<R>(
    docs: &[&Doc],
    codes: &[DocCode],
    f: impl FnOnce(&[(&[u32], &[f64], &DocCode)]) -> R,
) -> R {
    let ids: Vec<Vec<u32>> = docs
        .iter()
        .map(|d| d.iter().map(|c| c.0).collect())
        .collect();
    let ws: Vec<Vec<f64>> = docs
        .iter()
        .map(|d| d.iter().map(|c| c.1 as f64).collect())
        .collect();
    let parts: Vec<(&[u32], &[f64], &DocCode)> = (0..docs.len())
        .map(|j| (ids[j].as_slice(), ws[j].as_slice(), &codes[j]))
        .collect();
    f(&parts)
}

/// One dictionary step of a learner at rate α: `--step` with σ = `--em-smooth`; `mass` is the
/// learner's per-topic mass (used by `--step stats`).
fn learn_step(
    args: &OstcEvalArgs,
    mass: &mut Vec<f64>,
    beta: &Array2<f32>,
    (docs, codes): (&[&Doc], &[DocCode]),
    rate: f64,
) -> Array2<f32> {
    with_parts(docs, codes, |parts| {
        step(beta, parts, rate, (args.step, args.em_smooth), mass)
    })
}

impl Unsupervised {
    /// Only the classifier reference was measured.
    fn skipped(accuracy_bow_svm: f64) -> Unsupervised {
        Unsupervised {
            online: Vec::new(),
            batch: Vec::new(),
            collapsed: Vec::new(),
            online_seconds_to_batch_perplexity: None,
            online_seconds_to_batch_perplexity_norm: None,
            batch_seconds_to_online_perplexity_norm: None,
            flattened_perplexity: (f64::NAN, f64::NAN),
            sparsity_online: f64::NAN,
            sparsity_batch: f64::NAN,
            sparsity_collapsed: None,
            sparsity_dense: f64::NAN,
            accuracy_stc_svm: f64::NAN,
            accuracy_batch_stc_svm: None,
            accuracy_bow_svm,
        }
    }
}

/// The unsupervised stages from the initial dictionary `beta0`: online STC, the flattening
/// check, batch STC, collapsed online STC, sparsities, time-to-target, STC + SVM on both
/// dictionaries and the bag-of-words reference (in that order on `rng`).
fn run_unsupervised(
    data: &Data,
    args: &OstcEvalArgs,
    p: &CodeParams,
    beta0: &Array2<f32>,
    rng: &mut ChaCha8Rng,
) -> Unsupervised {
    // Online STC.
    let (beta_online, online) = run_online(data, args, p, false, beta0, rng);

    // The metrics' response to flattening: the online dictionary mixed with FLATTEN uniform.
    let flat = {
        let n = data.vocab.max(1) as f64;
        let b = beta_online.mapv(|v| ((1.0 - FLATTEN) * v as f64 + FLATTEN / n) as f32);
        (
            perplexity(&data.perp, &b, p, false).0,
            perplexity_norm(&data.perp, &b, p.eps),
        )
    };
    // Batch STC: M = D.
    let mut beta = beta0.clone();
    let mut bmass = Vec::new();
    let mut batch = vec![online[0].clone()];
    let mut secs = 0.0;
    for it in 0..args.batch_iters {
        let t0 = Instant::now();
        let docs: Vec<&Doc> = data.train.iter().map(|d| &d.0).collect();
        let codes: Vec<DocCode> = docs.par_iter().map(|d| code(d, &beta, p, false)).collect();
        let rate = learning_rate(it as u64, args.batch_tau0, args.tau);
        beta = learn_step(args, &mut bmass, &beta, (&docs, &codes), rate);
        secs += t0.elapsed().as_secs_f64();
        let seen = (it as usize + 1) * data.train.len();
        batch.push(checkpoint(data, &beta, p, false, (seen, secs), None));
        tracing::info!(
            it,
            secs,
            ppl = batch.last().map(|c| c.perplexity),
            "batch iteration"
        );
    }
    let beta_batch = beta;

    // Collapsed online.
    let (collapsed, sparsity_collapsed) = if args.no_collapsed {
        (Vec::new(), None)
    } else {
        let (b, cps) = run_online(data, args, p, true, beta0, rng);
        (cps, Some(perplexity(&data.perp, &b, p, true).1))
    };

    let sparsity_online = perplexity(&data.perp, &beta_online, p, false).1;
    let sparsity_batch = perplexity(&data.perp, &beta_batch, p, false).1;
    let dense = CodeParams { rho: 0.0, ..*p };
    let sparsity_dense = perplexity(&data.perp, &beta_online, &dense, false).1;
    // online's seconds to the best perplexity batch STC reaches (not its last: sharpening
    // topics can raise Eq. 19), per measure
    let online_seconds_to_batch = |metric: fn(&Checkpoint) -> f64| {
        let target = batch
            .iter()
            .skip(1)
            .map(metric)
            .fold(f64::INFINITY, f64::min);
        online
            .iter()
            .find(|c| metric(c) <= target)
            .map(|c| c.seconds)
    };
    let online_seconds_to_batch_perplexity = online_seconds_to_batch(|c| c.perplexity);
    let online_seconds_to_batch_perplexity_norm = online_seconds_to_batch(|c| c.perplexity_norm);
    let online_final = online.last().map_or(f64::INFINITY, |c| c.perplexity_norm);
    let batch_seconds_to_online_perplexity_norm = batch
        .iter()
        .skip(1)
        .find(|c| c.perplexity_norm <= online_final)
        .map(|c| c.seconds);

    // STC + SVM on the online dictionary, then (after the reference) on the batch one.
    let accuracy_stc_svm = stc_svm_accuracy(data, args, p, &beta_online, rng);
    tracing::info!(accuracy_stc_svm, "STC + SVM");

    let accuracy_bow_svm = bow_accuracy(data, args, CLASSES, rng);
    tracing::info!(accuracy_bow_svm, "bag-of-words SVM");
    let accuracy_batch_stc_svm =
        (args.batch_iters > 0).then(|| stc_svm_accuracy(data, args, p, &beta_batch, rng));
    tracing::info!(accuracy_batch_stc_svm, "batch STC + SVM");

    Unsupervised {
        online,
        batch,
        collapsed,
        online_seconds_to_batch_perplexity,
        online_seconds_to_batch_perplexity_norm,
        batch_seconds_to_online_perplexity_norm,
        flattened_perplexity: flat,
        sparsity_online,
        sparsity_batch,
        sparsity_collapsed,
        sparsity_dense,
        accuracy_stc_svm,
        accuracy_batch_stc_svm,
        accuracy_bow_svm,
    }
}

/// Run the OSTC evaluation; writes report.md, results.json and SVG plots into `--out`.
pub fn run_ostc_eval(args: &OstcEvalArgs) -> Result<OstcEvalSummary, OstcEvalError> {
    let t_all = Instant::now();
    if args.k == 0 || args.batch_size == 0 || args.eval_every == 0 {
        return Err(OstcEvalError::Args(
            "--topics, --batch-size and --eval-every must be ≥ 1".into(),
        ));
    }
    std::fs::create_dir_all(&args.out).map_err(|source| OstcEvalError::Io {
        path: args.out.display().to_string(),
        source,
    })?;
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let mut data = load(args, &mut rng)?;
    if args.holdout > 0.0 {
        // tuning mode: the last share of the shuffled training documents becomes the test set
        let n = data.train.len();
        let h = ((n as f64 * args.holdout.min(0.9)) as usize).max(1);
        data.test = data.train.split_off(n - h);
    }
    let classes = CLASSES;
    let p = CodeParams {
        rho: args.rho,
        gamma: args.gamma,
        eps: 1e-6,
        sweeps: args.sweeps,
        tol: 1e-4,
    };
    let mut init_rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0x5EED);
    let mut beta0 = if args.init_docs == 0 {
        init_dictionary(data.vocab, args.k, &data.tf, 5.0, &mut init_rng)
    } else {
        let docs: Vec<&[(u32, u32)]> = data.train.iter().map(|d| d.0.as_slice()).collect();
        init_dictionary_from_docs(
            data.vocab,
            args.k,
            &data.tf,
            &docs,
            args.init_docs,
            0.5,
            &mut init_rng,
        )
    };
    if args.oracle_init {
        let mut m = Array2::<f64>::from_elem((data.vocab, args.k), 0.01);
        for (d, y) in &data.train {
            for j in (0..args.k).filter(|j| j % classes == *y) {
                for &(id, c) in d {
                    m[[id as usize, j]] += c as f64;
                }
            }
        }
        for mut col in m.columns_mut() {
            let t: f64 = col.sum();
            col.mapv_inplace(|x| x / t);
        }
        beta0 = m.mapv(|x| x as f32);
        let acc = stc_svm_accuracy(&data, args, &p, &beta0, &mut rng);
        tracing::info!(acc, "oracle dictionary: STC + SVM");
    }
    tracing::info!(
        vocab = data.vocab,
        train = data.train.len(),
        test = data.test.len(),
        "ostc eval data"
    );
    let u = if args.only_medstc {
        let accuracy_bow_svm = bow_accuracy(&data, args, classes, &mut rng);
        tracing::info!(accuracy_bow_svm, "bag-of-words SVM");
        Unsupervised::skipped(accuracy_bow_svm)
    } else {
        run_unsupervised(&data, args, &p, &beta0, &mut rng)
    };

    // Online MedSTC (its own generator: the order relative to the stages above is immaterial).
    let (medstc, accuracy_medstc, accuracy_medstc_refit) = if args.no_medstc {
        (Vec::new(), None, None)
    } else {
        run_medstc(&data, args, &p, &beta0, classes)
    };

    let summary = OstcEvalSummary {
        args: args.clone(),
        vocabulary: data.vocab,
        train_docs: data.train.len(),
        test_docs: data.test.len(),
        perp_docs: data.perp.len(),
        stc: u,
        medstc,
        accuracy_medstc,
        accuracy_medstc_refit,
        seconds_total: t_all.elapsed().as_secs_f64(),
    };
    write_outputs(&args.out, &summary)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// Gibbs' inequality: with one topic, the normalised held-out perplexity is smallest when
    /// the topic is the held-out half's own term distribution p, where it equals exp(H(p));
    /// every other distribution (including flatter ones) does worse.
    #[test]
    fn normalised_perplexity_is_minimised_by_the_held_out_distribution() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let n = 12usize;
        let half1: Doc = vec![(0, 2), (3, 1), (5, 4)];
        let half2: Doc = (0..n as u32)
            .filter(|i| i % 3 != 1)
            .map(|i| (i, 1 + i % 4))
            .collect();
        let tot: f64 = half2.iter().map(|c| c.1 as f64).sum();
        let mut p = vec![0.0; n];
        for &(id, w) in &half2 {
            p[id as usize] = w as f64 / tot;
        }
        let entropy: f64 = p.iter().filter(|&&v| v > 0.0).map(|v| -v * v.ln()).sum();
        let as_beta = |q: &[f64]| Array2::from_shape_fn((n, 1), |(i, _)| q[i] as f32);
        let perp = vec![(half1, half2)];
        let best = perplexity_norm(&perp, &as_beta(&p), 1e-12);
        assert!(
            (best - entropy.exp()).abs() < 1e-4 * best,
            "{best} vs {}",
            entropy.exp()
        );
        for trial in 0..50 {
            let mix: f64 = if trial < 10 {
                0.05 * (trial + 1) as f64
            } else {
                rng.random_range(0.01..1.0)
            };
            let other: Vec<f64> = if trial < 10 {
                vec![1.0 / n as f64; n] // flatter
            } else {
                let r: Vec<f64> = (0..n).map(|_| rng.random_range(0.0..1.0)).collect();
                let s: f64 = r.iter().sum();
                r.iter().map(|v| v / s).collect()
            };
            let q: Vec<f64> = p
                .iter()
                .zip(&other)
                .map(|(a, b)| (1.0 - mix) * a + mix * b)
                .collect();
            let v = perplexity_norm(&perp, &as_beta(&q), 1e-12);
            assert!(v > best, "trial {trial}: {v} ≤ {best}");
        }
    }
}
