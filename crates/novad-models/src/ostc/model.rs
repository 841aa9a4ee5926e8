//! The streaming OSTC model: one timestep is a pure function (model, batch) → (model, output).
//!
//! A timestep: tokenize; observe the vocabulary (new terms get a small uniform mass in every
//! topic, evicted terms' rows are dropped, topics renormalised); code every document under the
//! current β and score it; threshold the scores; then learn: `passes` sweeps over the batch in
//! seeded random mini-batches of `batch_size` documents, each one dictionary step with
//! α_t = τ₀/(t + τ) (t counts mini-batch updates over the model's life): by default the
//! stochastic-EM step, or the paper's projected-gradient step β ← Π_P(β − α_t ĝ) (`step_rule`).
//! The first batch with a non-empty document initialises β and is the bootstrap batch (never
//! novel, `bootstrap_passes` sweeps).
//!
//! Score (see [`ScoreRule`]; default `contrast`): the document's held-out negative
//! log-likelihood per token under β by document completion (its tokens split alternately into
//! two halves, each half's topic proportions fitted by fold-in score the other half) minus
//! a = 0.75 times its NLL per token under the mean topic, r = r_completion − a·r_background,
//! mapped into (0, 1) by 1/(1 + exp(−r/c)) (c = 2 nats) so that the score histogram of
//! [`crate::threshold`] applies. Larger = worse explained by the topics = more novel. The
//! coding objective per token (the `objective` rule, r/(1 + r)) saturates at ≈ 0.999: every
//! token no topic explains costs −ln ε ≈ 13.8 nats.
//!
//! Numerics: β is stored as `f32` (N × K), all arithmetic in `f64`; documents are coded in
//! parallel with rayon but every reduction runs in document order, so results do not depend on
//! the thread count.

use std::collections::BTreeMap;
use std::time::Instant;

use ndarray::Array2;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::memory::HybridParams;
use crate::model::{
    check, check_nonneg, judged, EngineError, Judge, ParamsError, Scored, StepOutput, StepStats,
    TextParams, Topic, TopicKind, Verdict,
};
use crate::ostc::coding::{
    code_doc, code_doc_collapsed, fold_in, CodeParams, DocBlock, DocCode, INIT_ITERS,
};
use crate::ostc::dictionary::{
    check_dictionary, init_dictionary, init_dictionary_from_docs, learning_rate, remap_dictionary,
    step, StepRule,
};
use crate::text::{tfidf_l1, SparseDoc, Tokenizer, Vocabulary};
use crate::threshold::{decide, ScoreHistory, ThresholdRule, BINS};

/// Every parameter of an OSTC model. Fixed when a store is created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OstcParams {
    /// Seed of every random choice (initial β, mini-batch order).
    pub seed: u64,
    pub text: TextParams,
    /// Topics K, 1..=10 000. Default 60 (paper's 20NG setting).
    pub k: usize,
    /// Laplace prior on word codes ρ ≥ 0. Default 0.1 (paper's 20NG setting).
    pub rho: f64,
    /// Gaussian coupling γ > 0 (λ = γ). Default 0.01 (the paper's 20NG setting). The coupling
    /// has to dominate the Poisson curvature (≈ β²/w) so that the word codes follow the
    /// document code θ; with a weak coupling every term's codes sit on the same topics in every
    /// document and the dictionary learns no co-occurrence.
    pub gamma: f64,
    /// Poisson mean offset ε, in (0, 1). Default 1e-6.
    pub eps: f64,
    /// Learning-rate numerator τ₀ > 0. Default 2 (with the EM and the ℓ1-normalised step rules
    /// α_t is the share of a topic one step may replace: 0.2 at t = 0, clamped to 1).
    pub tau0: f64,
    /// Learning-rate offset τ > 0 (paper: 10).
    pub tau: f64,
    /// How a mini-batch becomes a dictionary step (see [`StepRule`]; the paper's is `Raw`).
    /// Default `Em` (stochastic EM, see [`crate::ostc::dictionary::update_em`]).
    pub step_rule: StepRule,
    /// Uniform floor σ ∈ [0, 1] of the EM step's batch estimate. Default 0.5 (measured on
    /// 20NG, 3000 training documents: held-out perplexity 31.5 at σ = 0.5, 128 at 0.3, 1883
    /// at 0.1, ≈ 5·10⁴ at 0.01 — held-out words fall to ε — with the same accuracy).
    #[serde(default = "default_em_smooth")]
    pub em_smooth: f64,
    /// Documents of the bootstrap batch pooled into each initial topic (0 = the older
    /// term-frequency-plus-noise initialisation, the default: measured better on 20NG).
    #[serde(default = "default_init_docs")]
    pub init_docs: usize,
    /// Mini-batch size M ≥ 1 (paper: 16–256).
    pub batch_size: usize,
    /// Sweeps over each incoming batch (≥ 1).
    pub passes: u32,
    /// Sweeps over the bootstrap batch (≥ 1).
    pub bootstrap_passes: u32,
    /// Coordinate-descent sweeps per document (≥ 1) and relative objective tolerance (≥ 0).
    pub sweeps: u32,
    pub tol: f64,
    /// Collapsed STC (θ marginalised, coupled word codes) instead of hierarchical STC.
    pub collapsed: bool,
    /// Total mass (before renormalising) a topic gives to the terms new in a batch, spread
    /// uniformly over the vocabulary size: each new term starts at `new_term_mass / N`. In [0, 1].
    pub new_term_mass: f64,
    /// Weight of the first batch's term frequencies in the initial topics (≥ 0).
    pub init_data_weight: f64,
    pub threshold: ThresholdRule,
    /// Terms per topic (≥ 1) and why-terms per verdict.
    pub top_terms: usize,
    pub why_terms: usize,
    /// Novel documents a dominant topic needs to be reported (≥ 1).
    pub min_support: usize,
    /// Representative documents per topic.
    pub representatives: usize,
    // The score fields come last: stores up to format 4 kept parameters as postcard (a fixed
    // field sequence), and those written before these fields existed are exactly the prefix
    // (see [`LegacyParams`]); the migration to format 5 reads them with `from_stored`.
    /// How a document's code becomes its novelty score (see [`ScoreRule`]). Default
    /// `contrast`; stores created before the field existed load with the default.
    #[serde(default)]
    pub score: ScoreRule,
    /// Scale c > 0 (nats per token) of the rule's map from r to [0, 1) (see [`ScoreRule`]).
    /// Absent = the rule's own default ([`ScoreRule::default_scale`]).
    #[serde(default)]
    pub score_scale: Option<f64>,
    /// Weight a ∈ [0, 1] of the background NLL in [`ScoreRule::Contrast`]. Default 0.75
    /// ([`DEFAULT_SCORE_BACKGROUND`]).
    #[serde(default = "default_score_background")]
    pub score_background: f64,
    /// The hybrid detector (see [`crate::l1::Params::hybrid`]); None = the model's own score.
    /// Keep it the last field (legacy postcard parameters decode by appending its `None`).
    #[serde(default)]
    pub hybrid: Option<HybridParams>,
}

/// [`OstcParams`] as stored before the score fields existed (the same fields in the same
/// order, without the last three): [`OstcParams::from_stored`] falls back to it.
#[derive(Deserialize)]
struct LegacyParams {
    seed: u64,
    text: TextParams,
    k: usize,
    rho: f64,
    gamma: f64,
    eps: f64,
    tau0: f64,
    tau: f64,
    step_rule: StepRule,
    em_smooth: f64,
    init_docs: usize,
    batch_size: usize,
    passes: u32,
    bootstrap_passes: u32,
    sweeps: u32,
    tol: f64,
    collapsed: bool,
    new_term_mass: f64,
    init_data_weight: f64,
    threshold: ThresholdRule,
    top_terms: usize,
    why_terms: usize,
    min_support: usize,
    representatives: usize,
}

fn default_em_smooth() -> f64 {
    0.5
}

fn default_init_docs() -> usize {
    0
}

/// Default scale c (nats per token) of the absolute log-likelihood rules (`perplexity`,
/// `fold-in`, `completion`): r ↦ 1 − exp(−r/c). The map's slope exp(−r/c)/c is largest at
/// r = c; on 20NG batches r (completion) lies in 6.7–12.7 with q10–q90 8.3–9.8, so c = 8
/// spreads the bulk of the scores over 0.65–0.71 (≈ 120 bins of the threshold histogram) and
/// the extremes over 0.57–0.80, far from 1.
pub const DEFAULT_NLL_SCALE: f64 = 8.0;

/// Default scale c of [`ScoreRule::Contrast`]: r ↦ 1/(1 + exp(−r/c)). On 20NG batches its r
/// lies in −0.1…3.2 nats with q10–q90 1.5–2.3, so c = 2 puts the bulk at 0.68–0.76 (≈ 160
/// bins) and the extremes at 0.49–0.83.
pub const DEFAULT_CONTRAST_SCALE: f64 = 2.0;

/// Default background weight a of [`ScoreRule::Contrast`], chosen on 20NG seed 0 (mean AUC
/// 0.777 / 0.785 / 0.790 / 0.796 / 0.799 / 0.799 / 0.783 at a = 0.25 / 0.4 / 0.5 / 0.65 /
/// 0.75 / 0.85 / 1); seed 1 held out.
pub const DEFAULT_SCORE_BACKGROUND: f64 = 0.75;

fn default_score_background() -> f64 {
    DEFAULT_SCORE_BACKGROUND
}

/// How a document's code under β becomes its novelty score in [0, 1). Every rule is a pure,
/// deterministic function of (document counts, β, parameters); larger = more novel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScoreRule {
    /// The coding objective per token r = f(s, θ)/Σ_n w_n, mapped by r/(1 + r). Saturates on
    /// real text (≈ 0.999 for every document): the Poisson loss of every token no topic
    /// explains is −w ln ε ≈ 13.8 w nats and dominates r.
    Objective,
    /// Per-token negative log-likelihood of the document under its normalised reconstruction:
    /// π = the document's topic counts z (see [`DocCode::topic_counts`]) normalised to the
    /// simplex, q_n = πᵀβ_{·n} + ε (a distribution over the whole vocabulary, up to ε), and
    /// r = −Σ_n w_n ln q_n / Σ_n w_n — the document's log-perplexity under its own code, bounded
    /// by −ln ε; score 1 − exp(−r/c).
    Perplexity,
    /// As `Perplexity`, with π the maximum-likelihood topic proportions (PLSA fold-in,
    /// [`crate::ostc::coding::fold_in`]) instead of the STC codes' topic counts.
    FoldIn,
    /// Document completion: the tokens split alternately into two halves (in term order); π
    /// fitted by fold-in on each half scores the other half; r = the summed NLL / Σ_n w_n
    /// (held-out log-perplexity per token, as the WWW'13 evaluation's document completion);
    /// score 1 − exp(−r/c).
    Completion,
    /// The completion NLL contrasted with the dictionary's background: r = r_completion −
    /// a · r_background, where r_background is the per-token NLL under the mean topic
    /// β̄ = (1/K) Σ_k β_k and a = `score_background`; score 1/(1 + exp(−r/c)), strictly inside
    /// (0, 1). At a = 1, r is minus the per-token log-likelihood ratio of the document's own
    /// topic mixture against the background (how little the topics help); a < 1 keeps part of
    /// the absolute perplexity (words rare everywhere). Subtracting the background removes
    /// what makes a document hard to predict whatever its topic (a rich vocabulary), which
    /// the absolute rules mistake for novelty. The default: best measured (docs/RESULTS.md, OSTC).
    #[default]
    Contrast,
}

impl ScoreRule {
    /// The scale c used when `score_scale` is absent.
    pub fn default_scale(self) -> f64 {
        match self {
            ScoreRule::Contrast => DEFAULT_CONTRAST_SCALE,
            _ => DEFAULT_NLL_SCALE,
        }
    }
}

/// Weight of the corpus term frequencies in a document-seeded initial topic.
const INIT_BACKGROUND: f64 = 0.5;

impl Default for OstcParams {
    fn default() -> Self {
        OstcParams {
            seed: 0,
            text: TextParams::default(),
            k: 60,
            rho: 0.1,
            gamma: 0.01,
            eps: 1e-6,
            tau0: 2.0,
            tau: 10.0,
            step_rule: StepRule::Em,
            em_smooth: default_em_smooth(),
            init_docs: default_init_docs(),
            batch_size: 64,
            passes: 1,
            bootstrap_passes: 3,
            sweeps: 20,
            tol: 1e-4,
            collapsed: false,
            new_term_mass: 0.1,
            init_data_weight: 5.0,
            threshold: ThresholdRule::default_adaptive(),
            top_terms: 10,
            why_terms: 10,
            min_support: 2,
            representatives: 3,
            score: ScoreRule::default(),
            score_scale: None,
            score_background: DEFAULT_SCORE_BACKGROUND,
            hybrid: Some(HybridParams::default()),
        }
    }
}

impl OstcParams {
    /// Decode parameters as stores up to format 4 held them (postcard): the current layout,
    /// or the layout before the score fields, which then take their defaults.
    /// Those stores predate the hybrid detector: it decodes as None (postcard's `None` byte is
    /// appended for the last field).
    pub fn from_stored(bytes: &[u8]) -> Result<OstcParams, postcard::Error> {
        let mut with_none = bytes.to_vec();
        with_none.push(0);
        postcard::from_bytes::<OstcParams>(&with_none).or_else(|err| {
            let Ok(l) = postcard::from_bytes::<LegacyParams>(bytes) else {
                return Err(err);
            };
            Ok(OstcParams {
                seed: l.seed,
                text: l.text,
                k: l.k,
                rho: l.rho,
                gamma: l.gamma,
                eps: l.eps,
                tau0: l.tau0,
                tau: l.tau,
                step_rule: l.step_rule,
                em_smooth: l.em_smooth,
                init_docs: l.init_docs,
                batch_size: l.batch_size,
                passes: l.passes,
                bootstrap_passes: l.bootstrap_passes,
                sweeps: l.sweeps,
                tol: l.tol,
                collapsed: l.collapsed,
                new_term_mass: l.new_term_mass,
                init_data_weight: l.init_data_weight,
                threshold: l.threshold,
                top_terms: l.top_terms,
                why_terms: l.why_terms,
                min_support: l.min_support,
                representatives: l.representatives,
                score: ScoreRule::default(),
                score_scale: None,
                score_background: DEFAULT_SCORE_BACKGROUND,
                hybrid: None,
            })
        })
    }

    /// The coding parameters.
    pub fn code(&self) -> CodeParams {
        CodeParams {
            rho: self.rho,
            gamma: self.gamma,
            eps: self.eps,
            sweeps: self.sweeps,
            tol: self.tol,
        }
    }

    /// Check every field; the error names it as `ostc.<field>`.
    pub fn validate(&self) -> Result<(), ParamsError> {
        let pos = |x: f64| x.is_finite() && x > 0.0;
        check(
            (1..=10_000).contains(&self.k),
            "ostc.k",
            "an integer in 1..=10000",
            self.k.to_string(),
        )?;
        check_nonneg(self.rho, "ostc.rho")?;
        check(
            pos(self.gamma),
            "ostc.gamma",
            "a finite number > 0",
            self.gamma.to_string(),
        )?;
        check(
            pos(self.eps) && self.eps < 1.0,
            "ostc.eps",
            "a number in (0, 1)",
            self.eps.to_string(),
        )?;
        check(
            pos(self.tau0),
            "ostc.tau0",
            "a finite number > 0",
            self.tau0.to_string(),
        )?;
        check(
            pos(self.tau),
            "ostc.tau",
            "a finite number > 0",
            self.tau.to_string(),
        )?;
        check(
            (0.0..=1.0).contains(&self.em_smooth),
            "ostc.em_smooth",
            "a number in [0, 1]",
            self.em_smooth.to_string(),
        )?;
        check(
            self.score_scale.is_none_or(pos),
            "ostc.score_scale",
            "a finite number > 0",
            format!("{:?}", self.score_scale),
        )?;
        check(
            (0.0..=1.0).contains(&self.score_background),
            "ostc.score_background",
            "a number in [0, 1]",
            self.score_background.to_string(),
        )?;
        check(
            self.batch_size >= 1,
            "ostc.batch_size",
            "≥ 1",
            self.batch_size.to_string(),
        )?;
        check(
            self.passes >= 1,
            "ostc.passes",
            "≥ 1",
            self.passes.to_string(),
        )?;
        check(
            self.bootstrap_passes >= 1,
            "ostc.bootstrap_passes",
            "≥ 1",
            self.bootstrap_passes.to_string(),
        )?;
        check(
            self.sweeps >= 1,
            "ostc.sweeps",
            "≥ 1",
            self.sweeps.to_string(),
        )?;
        check_nonneg(self.tol, "ostc.tol")?;
        check(
            (0.0..=1.0).contains(&self.new_term_mass),
            "ostc.new_term_mass",
            "a number in [0, 1]",
            self.new_term_mass.to_string(),
        )?;
        check_nonneg(self.init_data_weight, "ostc.init_data_weight")?;
        check(
            self.top_terms >= 1,
            "ostc.top_terms",
            "≥ 1",
            self.top_terms.to_string(),
        )?;
        check(
            self.min_support >= 1,
            "ostc.min_support",
            "≥ 1",
            self.min_support.to_string(),
        )?;
        self.text
            .validate(["ostc.text.max_terms", "ostc.text.min_token_len"])?;
        match self.threshold {
            ThresholdRule::Fixed { zeta } => check(
                zeta.is_finite(),
                "ostc.threshold.zeta",
                "finite",
                zeta.to_string(),
            ),
            ThresholdRule::TopFraction { fraction } => check(
                fraction > 0.0 && fraction <= 1.0,
                "ostc.threshold.fraction",
                "a number in (0, 1]",
                fraction.to_string(),
            ),
            ThresholdRule::Adaptive {
                quantile,
                half_life,
            } => {
                check(
                    (0.0..=1.0).contains(&quantile),
                    "ostc.threshold.quantile",
                    "a number in [0, 1]",
                    quantile.to_string(),
                )?;
                check_nonneg(half_life, "ostc.threshold.half_life")
            }
        }
    }
}

/// Map a per-token objective r ≥ 0 to the score r / (1 + r) ∈ [0, 1) ([`ScoreRule::Objective`]).
pub fn score_of(per_token: f64) -> f64 {
    let r = per_token.max(0.0);
    r / (1.0 + r)
}

/// Per-token negative log-likelihood r = −Σ_n w_n ln(πᵀβ_{·n} + ε) / Σ_n w_n of a document
/// block under topic proportions π (normalised here; uniform when they sum to 0). In
/// [0, −ln ε] when every β row sums to ≤ 1 per topic; 0 for an empty document.
pub fn per_token_nll(doc: &DocBlock, pi: &[f64], eps: f64) -> f64 {
    let k = doc.k;
    let tot: f64 = pi.iter().map(|v| v.max(0.0)).sum();
    let norm: Vec<f64> = if tot > 0.0 && tot.is_finite() {
        pi.iter().map(|v| v.max(0.0) / tot).collect()
    } else {
        vec![1.0 / k.max(1) as f64; k]
    };
    let (mut nll, mut words) = (0.0, 0.0);
    for n in 0..doc.len() {
        let q: f64 = norm.iter().zip(doc.row(n)).map(|(a, b)| a * b).sum::<f64>();
        nll -= doc.w[n] * (q.clamp(0.0, 1.0) + eps).ln();
        words += doc.w[n];
    }
    if words > 0.0 {
        (nll / words).max(0.0)
    } else {
        0.0
    }
}

/// The two halves of a document's tokens, alternating in term order: (w_A, w_B), w_A + w_B = w.
pub fn split_tokens(w: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut off = 0u64;
    let (mut a, mut b) = (Vec::with_capacity(w.len()), Vec::with_capacity(w.len()));
    for &c in w {
        let c = c.max(0.0).round() as u64;
        let ca = if off % 2 == 0 { c.div_ceil(2) } else { c / 2 };
        a.push(ca as f64);
        b.push((c - ca) as f64);
        off += c;
    }
    (a, b)
}

/// Document-completion NLL per token ([`ScoreRule::Completion`]).
pub fn completion_nll(doc: &DocBlock, eps: f64) -> f64 {
    let (wa, wb) = split_tokens(&doc.w);
    let half = |w: &[f64]| DocBlock {
        w: w.to_vec(),
        beta: doc.beta.clone(),
        k: doc.k,
    };
    let (da, db) = (half(&wa), half(&wb));
    let (na, nb) = (wa.iter().sum::<f64>(), wb.iter().sum::<f64>());
    // NLL of half b under π fitted on half a, and vice versa (a half may be empty)
    let cross = |fit: &DocBlock, nfit: f64, eval: &DocBlock, neval: f64| {
        if neval <= 0.0 {
            return 0.0;
        }
        let pi = if nfit > 0.0 {
            fold_in(fit, INIT_ITERS)
        } else {
            fold_in(eval, INIT_ITERS)
        };
        per_token_nll(eval, &pi, eps) * neval
    };
    let tot = na + nb;
    if tot <= 0.0 {
        return 0.0;
    }
    (cross(&da, na, &db, nb) + cross(&db, nb, &da, na)) / tot
}

/// The novelty score of a coded document (see [`ScoreRule`]): in [0, 1), finite.
pub fn doc_score(doc: &DocBlock, code: &DocCode, p: &OstcParams) -> f64 {
    let words: f64 = doc.w.iter().sum();
    if words <= 0.0 {
        return 0.0;
    }
    let c = p.score_scale.unwrap_or(p.score.default_scale());
    let squash = |r: f64| 1.0 - (-r.max(0.0) / c).exp();
    let s = match p.score {
        ScoreRule::Objective => score_of(code.objective / words),
        ScoreRule::Perplexity => squash(per_token_nll(doc, &code.topic_counts(doc), p.eps)),
        ScoreRule::FoldIn => squash(per_token_nll(doc, &fold_in(doc, INIT_ITERS), p.eps)),
        ScoreRule::Completion => squash(completion_nll(doc, p.eps)),
        ScoreRule::Contrast => {
            // uniform proportions = the mean topic β̄
            let background = per_token_nll(doc, &vec![1.0; doc.k], p.eps);
            let r = completion_nll(doc, p.eps) - p.score_background * background;
            1.0 / (1.0 + (-r / c).exp())
        }
    };
    if s.is_finite() {
        s.clamp(0.0, 1.0 - f64::EPSILON)
    } else {
        0.0
    }
}

/// Gather the document block (counts and β rows as f64) of one (id, count) list.
pub fn doc_block(counts: &[(u32, u32)], beta: &Array2<f32>) -> DocBlock {
    let k = beta.ncols();
    let mut b = Vec::with_capacity(counts.len() * k);
    for &(id, _) in counts {
        b.extend(beta.row(id as usize).iter().map(|&v| v as f64));
    }
    DocBlock {
        w: counts.iter().map(|&(_, c)| c as f64).collect(),
        beta: b,
        k,
    }
}

/// Code one document (STC or collapsed per `collapsed`).
pub fn code_counts(
    counts: &[(u32, u32)],
    beta: &Array2<f32>,
    p: &CodeParams,
    collapsed: bool,
) -> DocCode {
    code_block(&doc_block(counts, beta), p, collapsed)
}

/// Code one gathered document block (STC or collapsed per `collapsed`).
pub fn code_block(blk: &DocBlock, p: &CodeParams, collapsed: bool) -> DocCode {
    if collapsed {
        code_doc_collapsed(blk, p)
    } else {
        code_doc(blk, p)
    }
}

/// `passes` sweeps of online learning over `docs` (lists of (id, count)) in seeded random
/// mini-batches of `m`; `t` is the running update counter and `mass` the per-topic mass of
/// [`StepRule::Stats`] (both advanced). Pure in β.
#[allow(clippy::too_many_arguments)]
pub fn learn(
    beta: &Array2<f32>,
    docs: &[&[(u32, u32)]],
    p: &CodeParams,
    collapsed: bool,
    m: usize,
    passes: u32,
    (tau0, tau): (f64, f64),
    (rule, smooth): (StepRule, f64),
    (t, mass): (&mut u64, &mut Vec<f64>),
    rng: &mut ChaCha8Rng,
) -> Array2<f32> {
    let mut beta = beta.clone();
    let mut order: Vec<usize> = (0..docs.len()).filter(|&i| !docs[i].is_empty()).collect();
    if order.is_empty() {
        return beta;
    }
    for _ in 0..passes {
        order.shuffle(rng);
        for chunk in order.chunks(m.max(1)) {
            let codes: Vec<DocCode> = chunk
                .par_iter()
                .map(|&i| code_counts(docs[i], &beta, p, collapsed))
                .collect();
            let ids: Vec<Vec<u32>> = chunk
                .iter()
                .map(|&i| docs[i].iter().map(|c| c.0).collect())
                .collect();
            let ws: Vec<Vec<f64>> = chunk
                .iter()
                .map(|&i| docs[i].iter().map(|c| c.1 as f64).collect())
                .collect();
            let parts: Vec<(&[u32], &[f64], &DocCode)> = (0..chunk.len())
                .map(|j| (ids[j].as_slice(), ws[j].as_slice(), &codes[j]))
                .collect();
            let rate = learning_rate(*t, tau0, tau);
            beta = step(&beta, &parts, rate, (rule, smooth), mass);
            *t += 1;
        }
    }
    beta
}

/// Version of the `meta` part: 1 = scores by the `objective` rule (before [`ScoreRule`]),
/// 2 = scores by `params.score`. A version-1 store loads with an empty score history.
const META_VERSION: u32 = 2;

/// Persisted counters of the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Meta {
    version: u32,
    timestep: u64,
    updates: u64,
    initialised: bool,
    k: usize,
    terms: usize,
}

/// The streaming OSTC model. Invariants: `beta` is `vocab.len() × params.k` (or 0 × k before
/// the first non-empty document), finite, every topic on the simplex within
/// [`crate::ostc::dictionary::SIMPLEX_TOL`]; `history` has [`BINS`] finite weights.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OstcModel {
    params: OstcParams,
    vocab: Vocabulary,
    beta: Array2<f32>,
    history: ScoreHistory,
    timestep: u64,
    /// Mini-batch updates carried out (t of α_t).
    updates: u64,
    /// Per-topic mass T_k of [`StepRule::Stats`] (K finite values ≥ 0 once that rule has
    /// stepped; empty before, and for the other rules).
    mass: Vec<f64>,
    initialised: bool,
}

impl OstcModel {
    pub fn new(params: OstcParams) -> Result<OstcModel, ParamsError> {
        params.validate()?;
        Ok(OstcModel {
            vocab: Vocabulary::new(params.text.max_terms),
            beta: Array2::zeros((0, params.k)),
            history: ScoreHistory::default(),
            timestep: 0,
            updates: 0,
            mass: Vec::new(),
            initialised: false,
            params,
        })
    }
    pub fn params(&self) -> &OstcParams {
        &self.params
    }
    /// Index the next batch gets (0 before the first).
    pub fn timestep(&self) -> u64 {
        self.timestep
    }
    pub fn vocab(&self) -> &Vocabulary {
        &self.vocab
    }
    /// β, N × K (row = term, column = topic on the simplex).
    pub fn beta(&self) -> &Array2<f32> {
        &self.beta
    }
    pub fn history(&self) -> &ScoreHistory {
        &self.history
    }
    /// Mini-batch updates so far.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    fn tokenizer(&self) -> Tokenizer {
        self.params.text.tokenizer()
    }

    /// Process one batch. Pure: `self` is not modified.
    pub fn step(&self, texts: &[&str]) -> Result<(OstcModel, StepOutput), EngineError> {
        self.step_judged(texts, None)
    }

    /// [`Self::step`] with novelty decided by `judge` instead of the model's threshold (the
    /// model's score history is still kept; topics group the judge's novel documents). The
    /// judge sees the batch's TF-IDF vectors, which the output then carries too.
    pub fn step_judged(
        &self,
        texts: &[&str],
        mut judge: Option<&mut (dyn Judge + '_)>,
    ) -> Result<(OstcModel, StepOutput), EngineError> {
        let t0 = Instant::now();
        let p = &self.params;
        let cp = p.code();
        let tok = self.tokenizer();
        let tokens: Vec<Vec<String>> = texts.iter().map(|d| tok.tokens(d)).collect();
        let mut vocab = self.vocab.clone();
        let (counts, change) = vocab.observe(&tokens, self.timestep);
        let n = texts.len();
        let eligible: Vec<bool> = counts.iter().map(|c| !c.is_empty()).collect();
        let any_doc = eligible.iter().any(|&e| e);
        let is_bootstrap = !self.initialised && any_doc;
        let mut rng =
            ChaCha8Rng::seed_from_u64(p.seed ^ self.timestep.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let beta = if is_bootstrap {
            let mut tf = vec![0.0; vocab.len()];
            for c in &counts {
                for &(id, w) in c {
                    tf[id as usize] += w as f64;
                }
            }
            if p.init_docs == 0 {
                init_dictionary(vocab.len(), p.k, &tf, p.init_data_weight, &mut rng)
            } else {
                let docs: Vec<&[(u32, u32)]> = counts.iter().map(|c| c.as_slice()).collect();
                init_dictionary_from_docs(
                    vocab.len(),
                    p.k,
                    &tf,
                    &docs,
                    p.init_docs,
                    INIT_BACKGROUND,
                    &mut rng,
                )
            }
        } else if self.initialised {
            remap_dictionary(&self.beta, &change.remap, p.new_term_mass)
        } else {
            Array2::zeros((0, p.k))
        };
        let mut stats = StepStats {
            timestep: self.timestep,
            docs: n,
            empty: eligible.iter().filter(|&&e| !e).count(),
            new_terms: change.added,
            evicted_terms: change.evicted,
            vocabulary: vocab.len(),
            bootstrap: is_bootstrap,
            atoms: p.k,
            seconds_vectorize: t0.elapsed().as_secs_f64(),
            ..Default::default()
        };

        // Score every document under β_t (before learning from the batch).
        let t1 = Instant::now();
        let scored: Vec<Option<(DocCode, f64)>> = counts
            .par_iter()
            .map(|c| {
                (!c.is_empty()).then(|| {
                    let blk = doc_block(c, &beta);
                    let code = code_block(&blk, &cp, p.collapsed);
                    let score = doc_score(&blk, &code, p);
                    (code, score)
                })
            })
            .collect();
        let scores: Vec<f64> = scored
            .iter()
            .map(|c| c.as_ref().map_or(0.0, |c| c.1))
            .collect();
        let codes: Vec<Option<DocCode>> = scored.into_iter().map(|c| c.map(|c| c.0)).collect();
        if scores.iter().any(|s| !s.is_finite()) {
            return Err(EngineError::NonFinite("scores"));
        }
        stats.seconds_coding = t1.elapsed().as_secs_f64();
        let silent = !self.initialised || is_bootstrap;
        let vectors: Vec<SparseDoc> = if judge.is_some() {
            counts
                .iter()
                .map(|c| tfidf_l1(c, |id| vocab.df(id), vocab.docs_seen()))
                .collect()
        } else {
            Vec::new()
        };
        let scored = Scored {
            vectors: &vectors,
            vocab: &vocab,
            scores: &scores,
            eligible: &eligible,
            silent,
            rule: &p.threshold,
        };
        let (novel, thr) = judged(judge.take(), &scored, || {
            if silent {
                (vec![false; n], f64::INFINITY)
            } else {
                decide(&p.threshold, &self.history, &scores, &eligible)
            }
        })?;
        stats.threshold = thr.is_finite().then_some(thr);
        let mut history = self.history.clone();
        let kept: Vec<f64> = scores
            .iter()
            .zip(&eligible)
            .filter(|(_, &e)| e)
            .map(|(&s, _)| s)
            .collect();
        if self.initialised && !kept.is_empty() {
            let half_life = match p.threshold {
                ThresholdRule::Adaptive { half_life, .. } => half_life,
                _ => 0.0,
            };
            history.update(&kept, half_life);
        }

        // Learn from the batch.
        let t2 = Instant::now();
        let mut updates = self.updates;
        let mut mass = self.mass.clone();
        let initialised = self.initialised || any_doc;
        let beta = if initialised && any_doc {
            let docs: Vec<&[(u32, u32)]> = counts.iter().map(|c| c.as_slice()).collect();
            let passes = if is_bootstrap {
                p.bootstrap_passes
            } else {
                p.passes
            };
            learn(
                &beta,
                &docs,
                &cp,
                p.collapsed,
                p.batch_size,
                passes,
                (p.tau0, p.tau),
                (p.step_rule, p.em_smooth),
                (&mut updates, &mut mass),
                &mut rng,
            )
        } else {
            beta
        };
        if beta.iter().any(|v| !v.is_finite()) {
            return Err(EngineError::NonFinite("topic dictionary β"));
        }
        stats.seconds_update = t2.elapsed().as_secs_f64();

        // Topics: novel documents grouped by their dominant topic (argmax θ under β_t).
        let t3 = Instant::now();
        let dominant: Vec<Option<usize>> = codes
            .iter()
            .map(|c| {
                c.as_ref().and_then(|c| {
                    let (j, &v) = c
                        .theta
                        .iter()
                        .enumerate()
                        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))?;
                    (v > 0.0).then_some(j)
                })
            })
            .collect();
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for j in 0..n {
            if novel[j] {
                if let Some(k) = dominant[j] {
                    groups.entry(k).or_default().push(j);
                }
            }
        }
        let mut topics: Vec<Topic> = groups
            .into_iter()
            .filter(|(_, m)| m.len() >= p.min_support)
            .map(|(k, members)| {
                let mut terms: Vec<(u32, f32)> = beta
                    .column(k)
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| (i as u32, v))
                    .collect();
                terms.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                terms.truncate(p.top_terms);
                let mut reps = members.clone();
                let th = |j: usize| codes[j].as_ref().map_or(0.0, |c| c.theta[k]);
                reps.sort_by(|&a, &b| th(b).total_cmp(&th(a)).then(a.cmp(&b)));
                reps.truncate(p.representatives);
                let mean_score =
                    members.iter().map(|&j| scores[j]).sum::<f64>() / members.len() as f64;
                Topic {
                    atom: k as u32,
                    strength: members.len() as f64 / n.max(1) as f64,
                    members,
                    terms,
                    atom_vector: Vec::new(),
                    representatives: reps,
                    mean_score,
                    kind: TopicKind::Emerging,
                    profile: Vec::new(),
                }
            })
            .collect();
        topics.sort_by(|a, b| {
            b.members
                .len()
                .cmp(&a.members.len())
                .then(a.atom.cmp(&b.atom))
        });
        stats.topics = topics.len();
        stats.seconds_topics = t3.elapsed().as_secs_f64();

        let coded: Vec<&DocCode> = codes.iter().flatten().collect();
        let nk = coded.len().max(1) as f64;
        stats.mean_iterations = coded.iter().map(|c| c.sweeps as f64).sum::<f64>() / nk;
        stats.mean_code_nnz = coded
            .iter()
            .map(|c| c.theta.iter().filter(|&&v| v > 0.0).count() as f64)
            .sum::<f64>()
            / nk;
        stats.atoms_used = (0..p.k)
            .filter(|&k| coded.iter().any(|c| c.theta[k] > 0.0))
            .count();
        stats.novel = novel.iter().filter(|&&b| b).count();

        let verdicts = (0..n)
            .map(|j| {
                let terms = match &codes[j] {
                    Some(c) => {
                        let w: Vec<f64> = counts[j].iter().map(|&(_, w)| w as f64).collect();
                        let mut l: Vec<(u32, f64)> = counts[j]
                            .iter()
                            .map(|c| c.0)
                            .zip(c.word_losses(&w))
                            .collect();
                        l.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                        l.truncate(p.why_terms);
                        l.into_iter()
                            .map(|(id, v)| (vocab.term(id).to_string(), v))
                            .collect()
                    }
                    None => Vec::new(),
                };
                Verdict {
                    score: scores[j],
                    novel: novel[j],
                    bootstrap: is_bootstrap,
                    empty: !eligible[j],
                    at_ceiling: false,
                    terms,
                }
            })
            .collect();
        let model = OstcModel {
            params: self.params.clone(),
            vocab,
            beta,
            history,
            timestep: self.timestep + 1,
            updates,
            mass,
            initialised,
        };
        Ok((
            model,
            StepOutput {
                verdicts,
                vectors,
                codes: Vec::new(),
                topics,
                stats,
                hybrid: Vec::new(),
                seconds_hybrid: 0.0,
            },
        ))
    }

    /// The persisted state as named parts (postcard): `meta`, `vocab`, `beta`, `history`,
    /// `mass` (empty unless the step rule is `stats`; stores written before it existed load
    /// with it empty). A part whose content did not change encodes to identical bytes.
    pub fn state_parts(&self) -> Vec<(String, Vec<u8>)> {
        let meta = Meta {
            version: META_VERSION,
            timestep: self.timestep,
            updates: self.updates,
            initialised: self.initialised,
            k: self.beta.ncols(),
            terms: self.beta.nrows(),
        };
        use crate::model::part_bytes as enc;
        vec![
            ("meta".to_string(), enc(&meta)),
            ("vocab".to_string(), enc(&self.vocab)),
            (
                "beta".to_string(),
                enc(&(
                    self.beta.nrows() as u64,
                    self.beta.ncols() as u64,
                    self.beta.iter().copied().collect::<Vec<f32>>(),
                )),
            ),
            ("history".to_string(), enc(&self.history)),
            ("mass".to_string(), enc(&self.mass)),
        ]
    }

    /// Rebuild from [`OstcModel::state_parts`], checking every invariant.
    pub fn from_state_parts(
        params: OstcParams,
        parts: &BTreeMap<String, Vec<u8>>,
    ) -> Result<OstcModel, EngineError> {
        params.validate()?;
        fn get<'a>(
            parts: &'a BTreeMap<String, Vec<u8>>,
            name: &str,
        ) -> Result<&'a [u8], EngineError> {
            parts
                .get(name)
                .map(|v| v.as_slice())
                .ok_or_else(|| EngineError::Inconsistent(format!("missing state part `{name}`")))
        }
        fn dec<T: for<'de> Deserialize<'de>>(b: &[u8], name: &str) -> Result<T, EngineError> {
            postcard::from_bytes(b).map_err(|e| {
                EngineError::Inconsistent(format!("state part `{name}` does not decode: {e}"))
            })
        }
        let meta: Meta = dec(get(parts, "meta")?, "meta")?;
        if !(1..=META_VERSION).contains(&meta.version) {
            return Err(EngineError::Inconsistent(format!(
                "state part `meta` has version {}, expected 1..={META_VERSION}",
                meta.version
            )));
        }
        let vocab: Vocabulary = dec(get(parts, "vocab")?, "vocab")?;
        let (rows, cols, data): (u64, u64, Vec<f32>) = dec(get(parts, "beta")?, "beta")?;
        let mut history: ScoreHistory = dec(get(parts, "history")?, "history")?;
        let bad = |s: String| Err(EngineError::Inconsistent(s));
        if cols as usize != params.k || meta.k != params.k {
            return bad(format!(
                "state part `beta` has {cols} topics, the parameters say k = {}",
                params.k
            ));
        }
        if (rows as usize) != meta.terms || data.len() as u64 != rows * cols {
            return bad(format!(
                "state part `beta` has {} values for {rows} × {cols}",
                data.len()
            ));
        }
        let expect_rows = if meta.initialised { vocab.len() } else { 0 };
        if rows as usize != expect_rows {
            return bad(format!(
                "state part `beta` has {rows} term rows, the vocabulary has {} terms",
                vocab.len()
            ));
        }
        if data.iter().any(|v| !v.is_finite()) {
            return Err(EngineError::NonFinite("state part `beta`"));
        }
        let beta = Array2::from_shape_vec((rows as usize, cols as usize), data)
            .map_err(|e| EngineError::Inconsistent(format!("state part `beta`: {e}")))?;
        if let Err(e) = check_dictionary(&beta) {
            return bad(format!("state part `beta` is not a topic dictionary: {e}"));
        }
        if history.weights.len() != BINS {
            return bad(format!(
                "state part `history` has {} bins, expected {BINS}",
                history.weights.len()
            ));
        }
        if history.weights.iter().any(|w| !w.is_finite() || *w < 0.0) || !history.total.is_finite()
        {
            return Err(EngineError::NonFinite("state part `history`"));
        }
        if vocab.max_terms() != params.text.max_terms {
            return bad(format!(
                "state part `vocab` has bound {}, the parameters say {}",
                vocab.max_terms(),
                params.text.max_terms
            ));
        }
        let mass: Vec<f64> = match parts.get("mass") {
            Some(b) => dec(b, "mass")?,
            None => Vec::new(),
        };
        if !(mass.is_empty() || mass.len() == params.k) {
            return bad(format!(
                "state part `mass` has {} values, the parameters say k = {}",
                mass.len(),
                params.k
            ));
        }
        if mass.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(EngineError::NonFinite("state part `mass`"));
        }
        if meta.version < 2 {
            // version 1 stored scores of the saturating `objective` rule: a histogram in other
            // units than the current rule's; start the adaptive threshold afresh.
            history = ScoreHistory::default();
        }
        Ok(OstcModel {
            params,
            vocab,
            beta,
            history,
            timestep: meta.timestep,
            updates: meta.updates,
            mass,
            initialised: meta.initialised,
        })
    }
}
