//! Parameters of the dynamic-NMF model.

use serde::{Deserialize, Serialize};

use crate::model::{check, check_nonneg, ParamsError, TextParams};
use crate::text::{Tokenizer, TokenizerVersion};

/// Parameters of [`super::DnmfModel`]. Defaults follow the paper (ω = 4 timesteps, B = 2
/// emerging topics per timestep, HP λ = 10) where it gives values; the rest (δ = 0.01,
/// µ = 100, ν = 200, residual-seeded emerging topics) were chosen on the CIKM 20 Newsgroups
/// stream (~1,000 documents per timestep, `novad eval-dnmf`) and are documented per
/// field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DnmfParams {
    /// Seed of every random choice (emerging-topic initialisation).
    pub seed: u64,
    /// Tokenizer and vocabulary bound. Default bound 20,000 terms (smaller than the ℓ1
    /// detector's: H is dense over the vocabulary, so the bound sets the cost per timestep).
    pub text: TextParams,
    /// Sliding window ω in timesteps (≥ 1): the documents factorised at each timestep.
    pub window: usize,
    /// Topics learnt on the first non-empty batch (the ad-hoc period), ≥ 1.
    pub initial_topics: usize,
    /// Emerging bandwidth B: new topics injected per timestep (≥ 1).
    pub emerging: usize,
    /// Upper bound on the topics kept after a timestep, K ≤ max_topics − emerging; the
    /// weakest topics are retired first when the bound is hit.
    pub max_topics: usize,
    /// Evolution δ ∈ [0, 1]: each word probability of an evolving topic stays within δ of its
    /// previous value (0 freezes topics, 1 leaves them free).
    pub delta: f64,
    /// Emergence weight µ ≥ 0 of the HP-trend hinge regulariser (0 disables it).
    pub mu: f64,
    /// Hinge margin ν ≥ 0 on the slope of the HP trend of an emerging topic's per-timestep
    /// total document weight. The paper uses 20 on TDT2 (~350 documents a week); the total
    /// weight grows with the batch size, and on ~1,000-document batches ν = 200 measured
    /// better (ν = 2,000 over-pushes: F1 drops by half).
    pub nu: f64,
    /// HP smoothing λ ≥ 0 (paper: 10).
    pub trend_lambda: f64,
    /// Maximum BCD sweeps per timestep (≥ 1).
    pub iterations: u32,
    /// Relative objective decrease below which BCD stops (> 0).
    pub tol: f64,
    /// Projected-gradient iterations per emerging w_i update (≥ 1).
    pub pg_iterations: u32,
    /// HALS sweeps of the W21 initialisation (new documents on existing topics).
    pub init_sweeps: u32,
    /// A topic that has been the dominant topic of no document for this many consecutive
    /// timesteps is retired (0 = only the `max_topics` bound retires).
    pub retire_after: u64,
    /// Terms with document frequency below this get weight 0 in X (≥ 1).
    pub min_df: u64,
    /// An emerging topic is a new theme — its documents are novel — when the previous
    /// timestep's topics alone (the W21 fit) leave on average at least this share of its
    /// documents' squared norm unexplained; otherwise it is a split of known themes. In
    /// [0, 1]; 0 = every emerging topic is new (the paper's reading).
    pub fresh_residual: f64,
    /// Initialise emerging topics from poorly explained new documents (drawn ∝ residual⁴ under
    /// the previous topics, mixed 9:1 with a random distribution) instead of purely random
    /// distributions (the paper's choice, `false`).
    pub seeded_init: bool,
    /// Top words reported per topic and why-terms per verdict.
    pub top_terms: usize,
    /// The tokenizer's rules ([`TokenizerVersion`]; None = the classic tokenizer, which stores
    /// created before the field existed keep: a missing field is None, not the default's
    /// value). Keep it the last field: the digest image drops its trailing `None` byte, and
    /// stored postcard parameters decode by appending it.
    #[serde(default = "no_tokenizer")]
    pub tokenizer: Option<TokenizerVersion>,
}

/// A parameter set without the `tokenizer` field: the classic tokenizer.
fn no_tokenizer() -> Option<TokenizerVersion> {
    None
}

impl Default for DnmfParams {
    fn default() -> Self {
        DnmfParams {
            seed: 0,
            text: TextParams {
                max_terms: 20_000,
                ..TextParams::default()
            },
            window: 4,
            initial_topics: 10,
            emerging: 2,
            max_topics: 60,
            delta: 0.01,
            mu: 100.0,
            nu: 200.0,
            trend_lambda: 10.0,
            iterations: 30,
            tol: 1e-4,
            pg_iterations: 10,
            init_sweeps: 5,
            retire_after: 8,
            min_df: 2,
            fresh_residual: 0.8,
            seeded_init: true,
            top_terms: 10,
            tokenizer: Some(TokenizerVersion::Unicode),
        }
    }
}

impl DnmfParams {
    /// The tokenizer of these parameters: [`TextParams`] with the rules of `tokenizer`.
    pub fn tokenizer(&self) -> Tokenizer {
        self.text.tokenizer(self.tokenizer)
    }

    /// Check every field; the error names the field (`dnmf.<name>`) and the accepted range.
    pub fn validate(&self) -> Result<(), ParamsError> {
        self.text
            .validate(["dnmf.text.max_terms", "dnmf.text.min_token_len"])?;
        check(
            (1..=64).contains(&self.window),
            "dnmf.window",
            "an integer in 1..=64",
            self.window.to_string(),
        )?;
        check(
            (1..=1000).contains(&self.initial_topics),
            "dnmf.initial_topics",
            "an integer in 1..=1000",
            self.initial_topics.to_string(),
        )?;
        check(
            (1..=100).contains(&self.emerging),
            "dnmf.emerging",
            "an integer in 1..=100",
            self.emerging.to_string(),
        )?;
        check(
            self.max_topics >= self.initial_topics.max(self.emerging) + self.emerging
                && self.max_topics <= 2000,
            "dnmf.max_topics",
            "an integer in (max(initial_topics, emerging) + emerging)..=2000",
            self.max_topics.to_string(),
        )?;
        check(
            (0.0..=1.0).contains(&self.delta),
            "dnmf.delta",
            "a number in [0, 1]",
            self.delta.to_string(),
        )?;
        check_nonneg(self.mu, "dnmf.mu")?;
        check_nonneg(self.nu, "dnmf.nu")?;
        check_nonneg(self.trend_lambda, "dnmf.trend_lambda")?;
        check(
            (1..=10_000).contains(&self.iterations),
            "dnmf.iterations",
            "an integer in 1..=10000",
            self.iterations.to_string(),
        )?;
        check(
            self.tol.is_finite() && self.tol > 0.0,
            "dnmf.tol",
            "a finite number > 0",
            self.tol.to_string(),
        )?;
        check(
            (1..=10_000).contains(&self.pg_iterations),
            "dnmf.pg_iterations",
            "an integer in 1..=10000",
            self.pg_iterations.to_string(),
        )?;
        check(
            self.init_sweeps <= 1000,
            "dnmf.init_sweeps",
            "an integer ≤ 1000",
            self.init_sweeps.to_string(),
        )?;
        check(
            self.min_df >= 1,
            "dnmf.min_df",
            "an integer ≥ 1",
            self.min_df.to_string(),
        )?;
        check(
            (1..=1000).contains(&self.top_terms),
            "dnmf.top_terms",
            "an integer in 1..=1000",
            self.top_terms.to_string(),
        )?;
        Ok(())
    }
}
