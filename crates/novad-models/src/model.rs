//! The contract every model implements, and the types it speaks in.
//!
//! A model is a value; one timestep is a pure function `(model, batch texts) → (new model,
//! [`StepOutput`])` ([`PartsModel::step`]): the old model is never modified, so a caller that
//! fails to persist the new one simply keeps the old. A model's persistent state is a list of
//! named byte parts ([`PartsModel::state_parts`]) from which [`PartsModel::from_state_parts`]
//! rebuilds a model whose next step is identical; the storage layer only ever sees those
//! parts, so it needs no knowledge of any model.
//!
//! Also here: the per-document [`Verdict`], the per-timestep [`StepStats`], the emerging and
//! evolving [`Topic`]s, the errors ([`EngineError`], [`ParamsError`] with its range checks) and
//! the tokenizer settings every model shares ([`TextParams`]).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::text::{SparseDoc, Tokenizer, TokenizerVersion, Vocabulary};

/// A document of a batch: only its text matters to the engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub text: String,
}

impl<S: Into<String>> From<S> for Document {
    fn from(s: S) -> Self {
        Document { text: s.into() }
    }
}

/// The verdict on one document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// ℓ1 sparse-coding objective l(p, Â_t), in [0, 1] (1 = nothing explained). 0 for empty
    /// documents.
    pub score: f64,
    pub novel: bool,
    /// Document of the bootstrap batch (never novel by definition).
    pub bootstrap: bool,
    /// No known term after tokenization (stop words only, blank, …): score 0, never novel.
    pub empty: bool,
    /// The code could not lower the score below ‖p‖₁ (see [`Code::at_ceiling`]).
    pub at_ceiling: bool,
    /// Top residual terms (the words that make it novel), largest first.
    pub terms: Vec<(String, f64)>,
}

/// Per-timestep diagnostics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepStats {
    /// Timestep index of this batch (0 = first batch).
    pub timestep: u64,
    pub docs: usize,
    pub empty: usize,
    pub novel: usize,
    pub bootstrap: bool,
    /// Share of non-empty documents whose score sits at the ceiling ‖p‖₁.
    pub ceiling_fraction: f64,
    pub mean_iterations: f64,
    /// Mean number of non-zero code entries per non-empty document.
    pub mean_code_nnz: f64,
    /// Atoms used by at least one document of the batch.
    pub atoms_used: usize,
    /// The score threshold applied (see [`crate::threshold::decide`]); `None` when nothing
    /// was thresholded (bootstrap, or a top-fraction rule that selected nothing).
    pub threshold: Option<f64>,
    pub new_terms: usize,
    pub evicted_terms: usize,
    pub vocabulary: usize,
    pub oiadmm: OiadmmStats,
    /// Atoms replaced by the refresh rule.
    #[serde(default)]
    pub atoms_refreshed: usize,
    /// Emerging topics found.
    #[serde(default)]
    pub topics: usize,
    /// Atoms added from emerging topics / removed for disuse (adaptive dictionary size).
    #[serde(default)]
    pub atoms_injected: usize,
    #[serde(default)]
    pub atoms_retired: usize,
    /// Atoms of the dictionary after this timestep.
    #[serde(default)]
    pub atoms: usize,
    /// Finding the emerging topics and planning the atom refresh (where the step does), and
    /// waiting for them after the update (where another replica does). The event tracker's
    /// seconds are here too; where it steps beside the update (on a thread of its own) they
    /// overlap `seconds_update`'s.
    #[serde(default)]
    pub seconds_topics: f64,
    pub seconds_vectorize: f64,
    pub seconds_coding: f64,
    pub seconds_update: f64,
}

/// What a timestep produced besides the new model.
#[derive(Debug, Clone)]
pub struct StepOutput {
    /// One per document; empty from a replica whose verdicts are not wanted
    /// ([`crate::l1::replicate::Replication::reports`] false: a cluster's replica).
    pub verdicts: Vec<Verdict>,
    /// The documents' TF-IDF vectors (ids valid in the new model's vocabulary).
    pub vectors: Vec<SparseDoc>,
    /// The codes of the documents over Â_t (the dictionary the batch was judged by).
    pub codes: Vec<Code>,
    /// Emerging topics among this batch's novel documents (largest first).
    pub topics: Vec<Topic>,
    pub stats: StepStats,
    /// The hybrid detector's verdict on each document (its explanation: component scores and
    /// nearest earlier document), in batch order; empty when the model's own score decides.
    /// When present, `verdicts[i].score` is the fused score and `hybrid[i].model_score` the
    /// model's own.
    pub hybrid: Vec<crate::memory::HybridVerdict>,
    /// Seconds the hybrid detector took (scoring the batch against the memory, then planning
    /// and applying its update); 0 without it.
    pub seconds_hybrid: f64,
}

/// A scored batch as a model hands it to a [`Judge`], after scoring and before anything that
/// depends on which documents are novel (topics, atom injection).
#[derive(Debug, Clone, Copy)]
pub struct Scored<'a> {
    /// TF-IDF vectors of the batch, ids in `vocab`.
    pub vectors: &'a [SparseDoc],
    /// The vocabulary after observing the batch.
    pub vocab: &'a Vocabulary,
    /// The model's novelty scores, finite, in [0, 1].
    pub scores: &'a [f64],
    /// Documents with at least one known term (the others are never novel).
    pub eligible: &'a [bool],
    /// No document of this batch may be novel (the bootstrap batch, or a batch before the
    /// model could bootstrap); the judge still sees it so that it can learn from it.
    pub silent: bool,
    /// The model's threshold rule.
    pub rule: &'a crate::threshold::ThresholdRule,
}

/// Which documents of a scored batch are novel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judgement {
    /// One flag per document; never true for an ineligible document or a silent batch.
    pub novel: Vec<bool>,
    /// The threshold applied to the judge's own score, if one was.
    pub threshold: Option<f64>,
    /// The documents the step's topics group when they are fewer than the novel ones (a
    /// subset of `novel`, one flag per document); None: the novel ones.
    pub topical: Option<Vec<bool>>,
}

/// Decides novelty in place of a model's own threshold (the hybrid detector is one). A model
/// that is given a judge calls it exactly once per step, with every document of the batch.
pub trait Judge {
    fn judge(&mut self, batch: &Scored) -> Result<Judgement, EngineError>;

    /// [`Self::judge`] in a step whose work `rep` shares among replicas of the model: a judge
    /// with work of its own to share (the hybrid detector's search) shares it there.
    fn judge_shared(
        &mut self,
        batch: &Scored,
        _rep: &mut dyn crate::l1::replicate::Replication,
    ) -> Result<Judgement, EngineError> {
        self.judge(batch)
    }

    /// The search this judge needs of the batch (its vectors, ids in the vocabulary after
    /// observing it) before it judges, for a step that runs it with its coding
    /// ([`crate::l1::replicate::Replication::code_and_search`]); the answer comes back by
    /// [`Self::answer`] before the judgement. `None` (the default): the judge searches, if at
    /// all, when it judges.
    fn query(
        &mut self,
        _vectors: &[SparseDoc],
        _vocab: &Vocabulary,
    ) -> Result<Option<crate::l1::replicate::Query<'_>>, EngineError> {
        Ok(None)
    }

    /// The answer to the search of [`Self::query`]: each document's nearest remembered
    /// document, in batch order.
    fn answer(&mut self, _near: Vec<Option<crate::memory::Neighbour>>) {}

    /// The scores the verdicts of its last judgement show, one per document, when they are
    /// not the model's own (the hybrid detector's fused scores); `None` (the default): the
    /// model's.
    fn scores(&self) -> Option<Vec<f64>> {
        None
    }
}

/// A step's novelty as decided: the flags, the threshold (∞ when none), the documents its
/// topics group (a subset of the novel ones) and the judge's scores ([`Judge::scores`]).
pub(crate) struct Decided {
    pub novel: Vec<bool>,
    pub threshold: f64,
    pub topical: Vec<bool>,
    pub scores: Option<Vec<f64>>,
}

/// The judgement of `judge`, or `own` when there is none (its topics group every novel
/// document); checks the judge's answer has one flag per document, flags nothing it may not,
/// and groups only novel documents into topics.
pub(crate) fn judged(
    judge: Option<&mut (dyn Judge + '_)>,
    batch: &Scored,
    own: impl FnOnce() -> (Vec<bool>, f64),
) -> Result<Decided, EngineError> {
    let Some(j) = judge else {
        let (novel, threshold) = own();
        let topical = novel.clone();
        return Ok(Decided {
            novel,
            threshold,
            topical,
            scores: None,
        });
    };
    let d = j.judge(batch)?;
    let bad = d.novel.len() != batch.scores.len()
        || d.novel
            .iter()
            .zip(batch.eligible)
            .any(|(&n, &e)| n && (batch.silent || !e))
        || d.topical.as_ref().is_some_and(|t| {
            t.len() != d.novel.len() || t.iter().zip(&d.novel).any(|(&t, &n)| t && !n)
        });
    if bad {
        return Err(EngineError::Inconsistent(
            "the judge's verdicts do not match the batch".into(),
        ));
    }
    let topical = d.topical.unwrap_or_else(|| d.novel.clone());
    let scores = j.scores();
    if scores.as_ref().is_some_and(|s| s.len() != d.novel.len()) {
        return Err(EngineError::Inconsistent(
            "the judge's scores do not match the batch".into(),
        ));
    }
    Ok(Decided {
        novel: d.novel,
        threshold: d.threshold.unwrap_or(f64::INFINITY),
        topical,
        scores,
    })
}

#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    Params(#[from] ParamsError),
    #[error("numerical failure: {0} contains a non-finite value")]
    NonFinite(&'static str),
    #[error("model state is inconsistent: {0}")]
    Inconsistent(String),
}

/// The result of coding one document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Code {
    /// Atoms with a positive code entry, increasing.
    pub atoms: Vec<u32>,
    /// The code entries of `atoms` (all > 0, finite).
    pub weights: Vec<f64>,
    /// Objective value l(p, A) at the returned code: 0 ≤ score ≤ ceiling.
    pub score: f64,
    /// ‖p‖₁: the score of the zero code (1 for non-empty TF-IDF documents, 0 for empty ones).
    pub ceiling: f64,
    /// ADMM iterations run (0 when screening leaves no atom).
    pub iterations: u32,
    /// Atoms left after screening.
    pub active_atoms: u32,
    /// The largest positive entries of the residual p − Âx, (term id, residual), decreasing.
    pub residual: Vec<(u32, f64)>,
}

impl Code {
    /// True when the code could not lower the score below ‖p‖₁ (relative 1e-6): the document
    /// is unexplained by the dictionary. Empty documents are never at the ceiling.
    pub fn at_ceiling(&self) -> bool {
        self.ceiling > 0.0 && self.score >= self.ceiling * (1.0 - 1e-6)
    }
}

/// What one OIADMM step did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OiadmmStats {
    /// The step τ used (0 when every code was zero).
    pub tau: f64,
    /// ‖Â_{t+1} − Â_t‖_F / ‖Â_t‖_F (0 for a zero dictionary).
    pub relative_change: f64,
    /// Non-zeros of Δ_{t+1} (0 when Δ is not carried).
    pub delta_nnz: usize,
}

/// One emerging topic of a batch, in batch positions and term ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topic {
    /// Index of the topic atom in R (DICTCLUST; the topic's id in OSTC and DNMF); an event's
    /// rank among the step's topics.
    pub atom: u32,
    /// Batch positions of its documents.
    pub members: Vec<usize>,
    /// (term id, atom weight), largest first.
    pub terms: Vec<(u32, f32)>,
    /// The topic's atom (all its non-zeros, sorted by term id, unit ℓ1): what the adaptive
    /// dictionary injects.
    pub atom_vector: Vec<(u32, f32)>,
    /// Batch positions of the documents with the largest code weight on the atom.
    pub representatives: Vec<usize>,
    /// Mean novelty score of its documents.
    pub mean_score: f64,
    /// Emerging (new this timestep), evolving (tracked from earlier timesteps, DNMF) or
    /// continuing (a later day of an event). DICTCLUST topics are always emerging.
    pub kind: TopicKind,
    /// Model-defined topic strength (share of the batch's weight it carries, in [0, 1]);
    /// DICTCLUST: member share of the batch.
    pub strength: f64,
    /// Temporal profile (strength per timestep of the model's window, oldest first); empty
    /// when the model keeps none. An event's: its members per timestep of its life.
    pub profile: Vec<f32>,
    /// The event this topic is a day of ([`crate::events`]); None for the other topic
    /// stages (DICTCLUST, OSTC, DNMF).
    pub event: Option<u64>,
}

/// Whether a topic is new or carried over from earlier timesteps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopicKind {
    Emerging,
    Evolving,
    /// A later day of an event ([`crate::events`]).
    Continuing,
}

/// Tokenizer and vocabulary settings. Which tokenizer rules apply is not among them: a model's
/// parameter set names it in its last field (`tokenizer`, a [`TokenizerVersion`]; absent = the
/// classic rules), so that stores created before the choice existed keep their tokenizer and
/// their digests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextParams {
    /// Vocabulary bound (terms); see [`crate::text::Vocabulary`] for the eviction policy. ≥ 10.
    pub max_terms: usize,
    /// Token length bounds in characters, 1 ≤ min ≤ max.
    pub min_token_len: usize,
    pub max_token_len: usize,
    pub builtin_stop_words: bool,
    pub extra_stop_words: Vec<String>,
}

impl TextParams {
    /// The tokenizer these settings describe, with the rules of `version` (`None`: classic).
    pub fn tokenizer(&self, version: Option<TokenizerVersion>) -> Tokenizer {
        Tokenizer::with_version(
            version,
            self.min_token_len,
            self.max_token_len,
            self.builtin_stop_words,
            &self.extra_stop_words,
        )
    }

    /// Check the fields; `names` are how the caller's parameter set spells `max_terms` and
    /// `min_token_len` (e.g. `dnmf.text.max_terms`).
    pub fn validate(&self, names: [&'static str; 2]) -> Result<(), ParamsError> {
        check(
            self.max_terms >= 10 && self.max_terms <= 10_000_000,
            names[0],
            "an integer in 10..=10000000",
            self.max_terms.to_string(),
        )?;
        check(
            self.min_token_len >= 1 && self.min_token_len <= self.max_token_len,
            names[1],
            "an integer in 1..=max_token_len",
            self.min_token_len.to_string(),
        )
    }
}

/// `Ok(())` when `ok`, otherwise [`ParamsError::OutOfRange`] naming `field`, the accepted
/// range `want` and the value `got`. Every parameter set's `validate` is built from it.
pub fn check(
    ok: bool,
    field: &'static str,
    want: &'static str,
    got: String,
) -> Result<(), ParamsError> {
    if ok {
        Ok(())
    } else {
        Err(ParamsError::OutOfRange { field, want, got })
    }
}

/// [`check`] that `v` is a finite number ≥ 0.
pub fn check_nonneg(v: f64, field: &'static str) -> Result<(), ParamsError> {
    check(
        v.is_finite() && v >= 0.0,
        field,
        "a finite number ≥ 0",
        v.to_string(),
    )
}

impl Default for TextParams {
    fn default() -> Self {
        TextParams {
            max_terms: 100_000,
            min_token_len: 2,
            max_token_len: 40,
            builtin_stop_words: true,
            extra_stop_words: Vec::new(),
        }
    }
}

/// A parameter outside its accepted range.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ParamsError {
    #[error("parameter `{field}` must be {want}, got {got}")]
    OutOfRange {
        field: &'static str,
        want: &'static str,
        got: String,
    },
}

/// The model a store runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// Online ℓ1 dictionary learning (NIPS 2012) with DICTCLUST emerging topics (CIKM 2011).
    #[default]
    L1,
    /// Dynamic NMF with temporal regularisation: evolving and emerging topics (WSDM 2012).
    Dnmf,
    /// Online sparse topical coding (WWW 2013).
    Ostc,
}

impl ModelKind {
    pub const ALL: [ModelKind; 3] = [ModelKind::L1, ModelKind::Dnmf, ModelKind::Ostc];

    pub fn name(self) -> &'static str {
        match self {
            ModelKind::L1 => "l1",
            ModelKind::Dnmf => "dnmf",
            ModelKind::Ostc => "ostc",
        }
    }
}

impl std::str::FromStr for ModelKind {
    type Err = UnknownName;
    /// The kebab-case name ([`ModelKind::name`]).
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        ModelKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownName::new("model", s, ModelKind::ALL.map(ModelKind::name)))
    }
}

/// A name that is none of the accepted ones (command-line and TOML values).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown {what} `{got}` (expected one of: {})", .expected.join(", "))]
pub struct UnknownName {
    pub what: &'static str,
    pub got: String,
    pub expected: Vec<&'static str>,
}

impl UnknownName {
    pub fn new<const N: usize>(what: &'static str, got: &str, expected: [&'static str; N]) -> Self {
        UnknownName {
            what,
            got: got.to_string(),
            expected: expected.to_vec(),
        }
    }
}

impl std::fmt::Display for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A streaming model whose state is persisted as named parts.
///
/// Contract: `step` is pure (self unchanged); `from_state_parts(p, state_parts())` rebuilds a
/// model whose next step is identical; a part whose content did not change between two steps
/// encodes to identical bytes (the store then leaves its chunks alone); part names contain no
/// NUL byte.
pub trait PartsModel: Sized + Clone {
    type Params: Clone + PartialEq + std::fmt::Debug + Serialize + DeserializeOwned + Default;
    const KIND: ModelKind;
    fn create(params: Self::Params) -> Result<Self, ParamsError>;
    fn step(&self, texts: &[&str]) -> Result<(Self, StepOutput), EngineError>;
    fn params(&self) -> &Self::Params;
    /// Index the next batch gets (0 before the first).
    fn timestep(&self) -> u64;
    fn vocab(&self) -> &Vocabulary;
    fn state_parts(&self) -> Vec<(String, Vec<u8>)>;
    fn from_state_parts(
        params: Self::Params,
        parts: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Self, EngineError>;
}

/// The postcard encoding of one state part. Cannot fail for the plain-data types the models
/// persist (no maps with non-string keys, no unsupported serde features).
pub(crate) fn part_bytes<T: serde::Serialize + ?Sized>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).expect("state parts are plain data")
}

/// Decode the part `name` of a model's state (see [`part_bytes`]); a missing or undecodable
/// part is [`EngineError::Inconsistent`].
pub(crate) fn decode_part<T: DeserializeOwned>(
    parts: &BTreeMap<String, Vec<u8>>,
    name: &str,
) -> Result<T, EngineError> {
    let b = parts
        .get(name)
        .ok_or_else(|| EngineError::Inconsistent(format!("part `{name}` is missing")))?;
    postcard::from_bytes(b)
        .map_err(|e| EngineError::Inconsistent(format!("part `{name}` does not decode: {e}")))
}

/// The postcard image of a parameter set for digests. The ℓ1 and OSTC parameter sets end with
/// optional fields added after stores existed (the hybrid detector, which ends with its optional
/// calibration; the ℓ1 set's events after it). `drops` says, from the last field backwards,
/// whether that field's trailing `None` tag is dropped; dropping stops at the first `false`.
/// What remains is the image the set had before those fields existed, so the digest of a store
/// that predates them does not change. See
/// [`HybridParams::image_drops_trailing_none`](crate::memory::HybridParams::image_drops_trailing_none).
pub fn params_image<P: Serialize>(p: &P, drops: &[bool]) -> Vec<u8> {
    let mut b = postcard::to_stdvec(p).expect("params serialize");
    for _ in drops.iter().take_while(|&&d| d) {
        debug_assert_eq!(b.last(), Some(&0), "a trailing None");
        b.pop();
    }
    b
}

/// Canonical bytes of a parts model: its kind, params (`params`, their digest image) and every
/// part, length-prefixed.
pub fn parts_digest_bytes<M: PartsModel>(m: &M, params: Vec<u8>) -> Vec<u8> {
    let mut out = M::KIND.name().as_bytes().to_vec();
    let p = params;
    out.extend((p.len() as u64).to_le_bytes());
    out.extend(p);
    for (name, bytes) in m.state_parts() {
        out.extend((name.len() as u64).to_le_bytes());
        out.extend(name.as_bytes());
        out.extend((bytes.len() as u64).to_le_bytes());
        out.extend(bytes);
    }
    out
}
