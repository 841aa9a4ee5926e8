//! The checked parameter set of an OSTC model ([`OstcParams`]), its score rules
//! ([`ScoreRule`]) and the decoding of parameters stored before fields existed.

use serde::{Deserialize, Serialize};

use crate::memory::HybridParams;
use crate::model::{check, check_nonneg, ParamsError, TextParams};
use crate::ostc::coding::CodeParams;
use crate::ostc::dictionary::StepRule;
use crate::text::{Tokenizer, TokenizerVersion};
use crate::threshold::ThresholdRule;

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
    /// Keep it the last field but one (legacy postcard parameters decode by appending its
    /// `None`).
    #[serde(default)]
    pub hybrid: Option<HybridParams>,
    /// The tokenizer's rules ([`TokenizerVersion`]; None = the classic tokenizer). Stores
    /// created before it existed decode with None and keep their tokens. Keep it the last
    /// field: the digest image drops its trailing `None` byte ([`OstcParams::image_drops`]),
    /// and stored postcard parameters decode by appending it.
    #[serde(default)]
    pub tokenizer: Option<TokenizerVersion>,
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
            // the calibrated hybrid's rule (see `hybrid` below)
            threshold: ThresholdRule::hybrid_adaptive(),
            top_terms: 10,
            why_terms: 10,
            min_support: 2,
            representatives: 3,
            score: ScoreRule::default(),
            score_scale: None,
            score_background: DEFAULT_SCORE_BACKGROUND,
            // calibrated: on 20NG seed 0 pooled AUC 0.820 against 0.790 for the quantile
            // fusion, mean per-timestep AUC 0.821 against 0.822 (docs/RESULTS.md)
            hybrid: Some(HybridParams::default()),
            tokenizer: Some(TokenizerVersion::Unicode),
        }
    }
}

impl OstcParams {
    /// The tokenizer of these parameters: [`TextParams`] with the rules of `tokenizer`.
    pub fn tokenizer(&self) -> Tokenizer {
        self.text.tokenizer(self.tokenizer)
    }

    /// Which trailing `None` tags the digest image drops ([`crate::model::params_image`]):
    /// the tokenizer's when absent, then the hybrid detector's.
    pub fn image_drops(&self) -> [bool; 2] {
        [
            self.tokenizer.is_none(),
            HybridParams::image_drops_trailing_none(&self.hybrid),
        ]
    }

    /// Decode parameters as stores up to format 4 held them (postcard): the current layout,
    /// or the layout before the score fields, which then take their defaults.
    /// Those stores predate the hybrid detector and the tokenizer choice: both decode as None
    /// (postcard's `None` byte is appended for each of the last two fields).
    pub fn from_stored(bytes: &[u8]) -> Result<OstcParams, postcard::Error> {
        let mut with_none = bytes.to_vec();
        with_none.extend([0, 0]);
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
                tokenizer: None,
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
