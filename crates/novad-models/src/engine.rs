//! The models a store can run, behind one interface. A store is created for one model kind
//! ([`ModelKind`], fixed for its lifetime, default ℓ1); the ingest path, the daemon and the store
//! only see an [`Engine`] and the [`ModelParams`] it was created with.
//!
//! Every model implements [`PartsModel`]: its state is a list of named, postcard-encoded parts
//! that the store cuts into 4 KiB chunks and rewrites only where the bytes changed, so the
//! store has one layout for all of them.

use std::collections::BTreeMap;
use std::time::Instant;

use rayon::prelude::*;

use thiserror::Error;

use crate::dnmf::{DnmfModel, DnmfParams};
use crate::events::{EventParams, Events};
use crate::l1::replicate::{Local, Query, Replication};
use crate::l1::{Model, Params};
use crate::memory::{
    DocMemory, DocRef, Floor, Hybrid, HybridDoc, HybridParams, HybridStep, MemoryError, Neighbour,
    PartsDelta, Share, TermVector, DOC_PARTS_PREFIX,
};
use crate::model::{
    params_image, parts_digest_bytes, EngineError, Judge, Judgement, ModelKind, ParamsError,
    PartsModel, Scored, StepOutput,
};
use crate::ostc::{OstcModel, OstcParams};
use crate::text::{SparseDoc, Vocabulary};

/// A parameter set that does not decode.
#[derive(Debug, Error)]
pub enum ParamsFormatError {
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Postcard(#[from] postcard::Error),
}

/// The parameters a store is created with, by model.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelParams {
    L1(Params),
    Dnmf(DnmfParams),
    Ostc(OstcParams),
}

impl ModelParams {
    pub fn kind(&self) -> ModelKind {
        match self {
            ModelParams::L1(_) => ModelKind::L1,
            ModelParams::Dnmf(_) => ModelKind::Dnmf,
            ModelParams::Ostc(_) => ModelKind::Ostc,
        }
    }

    /// The defaults of a model kind.
    pub fn defaults(kind: ModelKind) -> ModelParams {
        match kind {
            ModelKind::L1 => ModelParams::L1(Params::default()),
            ModelKind::Dnmf => ModelParams::Dnmf(DnmfParams::default()),
            ModelKind::Ostc => ModelParams::Ostc(OstcParams::default()),
        }
    }

    /// Parse the TOML parameter format of `kind`.
    pub fn from_toml(kind: ModelKind, text: &str) -> Result<ModelParams, ParamsFormatError> {
        Ok(match kind {
            ModelKind::L1 => ModelParams::L1(toml::from_str(text)?),
            ModelKind::Dnmf => ModelParams::Dnmf(toml::from_str(text)?),
            ModelKind::Ostc => ModelParams::Ostc(toml::from_str(text)?),
        })
    }

    /// Parameters of `kind` from their JSON image.
    pub fn from_json(
        kind: ModelKind,
        v: serde_json::Value,
    ) -> Result<ModelParams, ParamsFormatError> {
        Ok(match kind {
            ModelKind::L1 => ModelParams::L1(serde_json::from_value(v)?),
            ModelKind::Dnmf => ModelParams::Dnmf(serde_json::from_value(v)?),
            ModelKind::Ostc => ModelParams::Ostc(serde_json::from_value(v)?),
        })
    }

    pub fn to_toml(&self) -> String {
        match self {
            ModelParams::L1(p) => toml::to_string(p),
            ModelParams::Dnmf(p) => toml::to_string(p),
            ModelParams::Ostc(p) => toml::to_string(p),
        }
        .expect("params serialize")
    }

    /// The bytes a store keeps in `meta/params`: JSON, fields by name, so a field added later
    /// with a serde default (`#[serde(default)]`) decodes from older stores as they are.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.to_json()).expect("params serialize")
    }

    /// Decode [`ModelParams::to_bytes`]; a missing field with a serde default takes it.
    pub fn from_bytes(kind: ModelKind, bytes: &[u8]) -> Result<ModelParams, ParamsFormatError> {
        let v: serde_json::Value = serde_json::from_slice(bytes)?;
        ModelParams::from_json(kind, v)
    }

    /// Decode the postcard encoding stores used for parameters up to format 4 (fields by
    /// position). Only the store migration to format 5 needs it.
    pub fn from_postcard(kind: ModelKind, bytes: &[u8]) -> Result<ModelParams, ParamsFormatError> {
        Ok(match kind {
            ModelKind::L1 => {
                // those stores predate the hybrid detector, the events and the tokenizer
                // choice, the last fields: decode their Nones
                let mut with_none = bytes.to_vec();
                with_none.extend([0, 0, 0]);
                ModelParams::L1(postcard::from_bytes(&with_none)?)
            }
            ModelKind::Dnmf => {
                // they predate the tokenizer choice, the last field: decode its None
                let mut with_none = bytes.to_vec();
                with_none.push(0);
                ModelParams::Dnmf(postcard::from_bytes(&with_none)?)
            }
            ModelKind::Ostc => ModelParams::Ostc(OstcParams::from_stored(bytes)?),
        })
    }

    pub fn to_json(&self) -> serde_json::Value {
        match self {
            ModelParams::L1(p) => serde_json::to_value(p),
            ModelParams::Dnmf(p) => serde_json::to_value(p),
            ModelParams::Ostc(p) => serde_json::to_value(p),
        }
        .expect("params serialize")
    }

    pub fn validate(&self) -> Result<(), ParamsError> {
        match self {
            ModelParams::L1(p) => p.validate(),
            ModelParams::Dnmf(p) => p.validate(),
            ModelParams::Ostc(p) => p.validate(),
        }
    }
}

impl From<Params> for ModelParams {
    fn from(p: Params) -> Self {
        ModelParams::L1(p)
    }
}

/// A running model of any kind, with the hybrid detector when its parameters ask for one.
#[derive(Debug, Clone)]
pub struct Engine {
    model: Inner,
    hybrid: Option<Box<Hybrid>>,
    /// The event tracker, when the parameters ask for events ([`crate::events`]).
    events: Option<Box<Events>>,
    /// The memory parts the step that made this engine changed (see [`Engine::state_write`]).
    delta: Option<PartsDelta>,
    /// The hybrid detector moved to a successor ([`Engine::step_at_moving`]).
    spent: bool,
}

#[derive(Debug, Clone)]
enum Inner {
    L1(Box<Model>),
    Dnmf(Box<DnmfModel>),
    Ostc(Box<OstcModel>),
}

impl Inner {
    fn vocab(&self) -> &Vocabulary {
        match self {
            Inner::L1(m) => m.vocab(),
            Inner::Dnmf(m) => m.vocab(),
            Inner::Ostc(m) => m.vocab(),
        }
    }
}

/// The model state as [`Engine::state_write`] hands it to a store.
#[derive(Debug, Clone)]
pub struct StateWrite {
    /// Parts given in full: every part, or (with `incremental`) every part outside
    /// [`INCREMENTAL_PREFIX`].
    pub full: Vec<(String, Vec<u8>)>,
    /// When set, the parts under [`INCREMENTAL_PREFIX`] are the previous step's ones changed
    /// by this delta (O(batch) parts, whatever the memory holds).
    pub incremental: Option<PartsDelta>,
}

/// The part names [`StateWrite::incremental`] covers: the memory's documents.
pub const INCREMENTAL_PREFIX: &str = DOC_PARTS_PREFIX;

impl ModelParams {
    /// The hybrid detector's parameters, if this parameter set asks for it (ℓ1 and OSTC).
    pub fn hybrid(&self) -> Option<&HybridParams> {
        match self {
            ModelParams::L1(p) => p.hybrid.as_ref(),
            ModelParams::Ostc(p) => p.hybrid.as_ref(),
            ModelParams::Dnmf(_) => None,
        }
    }
}

impl ModelParams {
    /// The event stage's parameters, if this parameter set asks for events (ℓ1).
    pub fn events(&self) -> Option<&EventParams> {
        match self {
            ModelParams::L1(p) => p.events.as_ref(),
            ModelParams::Ostc(_) | ModelParams::Dnmf(_) => None,
        }
    }

    /// The slot of the hybrid detector's parameters, for the kinds that can run it (ℓ1 and
    /// OSTC); `None` for dnmf.
    pub fn hybrid_mut(&mut self) -> Option<&mut Option<HybridParams>> {
        match self {
            ModelParams::L1(p) => Some(&mut p.hybrid),
            ModelParams::Ostc(p) => Some(&mut p.hybrid),
            ModelParams::Dnmf(_) => None,
        }
    }

    /// A parameter set whose threshold is the calibrated hybrid's default rule
    /// ([`ThresholdRule::hybrid_adaptive`]) gets the model's own default instead
    /// ([`ThresholdRule::default_adaptive`]): for a set switched to the model's own score.
    pub fn reset_default_threshold(&mut self) {
        let t = match self {
            ModelParams::L1(p) => &mut p.threshold,
            ModelParams::Ostc(p) => &mut p.threshold,
            ModelParams::Dnmf(_) => return,
        };
        if *t == ThresholdRule::hybrid_adaptive() {
            *t = ThresholdRule::default_adaptive();
        }
    }
}

use crate::threshold::ThresholdRule;

fn memory_err(e: MemoryError) -> EngineError {
    match e {
        MemoryError::Params(p) => EngineError::Params(p),
        other => EngineError::Inconsistent(other.to_string()),
    }
}

/// The hybrid detector as a [`Judge`]: scores the batch against the state before it and keeps
/// the step (verdicts and plan) for [`Engine::step_at`].
struct HybridJudge<'a> {
    hybrid: &'a Hybrid,
    timestep: u64,
    times: &'a [i64],
    step: Option<HybridStep>,
    seconds: f64,
    /// The batch as the memory sees it, once [`Judge::query`] asked for its search.
    batch: Option<MemoryBatch>,
    /// The answer to that search, once given.
    near: Option<Vec<Option<Neighbour>>>,
}

/// A batch as the hybrid detector's memory sees it ([`memory_batch`]).
pub type MemoryBatch = (Vec<TermVector>, Vec<DocRef>);

/// The batch as the hybrid detector's memory sees it: each document's term vector (keyed by
/// term, so independent of the model's term ids) and its reference, in batch order. Fails when
/// `times` does not have one entry per document.
pub fn memory_batch(
    vectors: &[SparseDoc],
    vocab: &Vocabulary,
    timestep: u64,
    times: &[i64],
) -> Result<MemoryBatch, EngineError> {
    let keyed: Vec<TermVector> = vectors
        .par_iter()
        .map(|v| TermVector::from_keyed(v, |id| vocab.key(id)))
        .collect();
    if times.len() != vectors.len() {
        return Err(EngineError::Inconsistent(format!(
            "{} times for {} documents",
            times.len(),
            vectors.len()
        )));
    }
    let refs = (0..keyed.len())
        .map(|i| DocRef {
            timestep,
            seq: i as u32,
            time: times[i],
        })
        .collect();
    Ok((keyed, refs))
}

/// The memory batch of `b`: the one `prepared` for its search when there is one, else made
/// now; checked to have one document per score.
pub fn scored_batch(
    b: &Scored,
    prepared: Option<MemoryBatch>,
    timestep: u64,
    times: &[i64],
) -> Result<MemoryBatch, EngineError> {
    let batch = match prepared {
        Some(p) => p,
        None => memory_batch(b.vectors, b.vocab, timestep, times)?,
    };
    if batch.0.len() != b.scores.len() {
        return Err(EngineError::Inconsistent(format!(
            "{} vectors for {} scores",
            batch.0.len(),
            b.scores.len()
        )));
    }
    Ok(batch)
}

/// The search of `memory` for the documents of `batch` at the given positions (see
/// [`MemorySearch`](crate::l1::replicate::MemorySearch)).
pub fn searcher<'a>(memory: &'a DocMemory, batch: &'a [TermVector]) -> Query<'a> {
    Query {
        n: batch.len(),
        memory: memory.mark(),
        shards: memory.share().mask(),
        search: Box::new(move |at: &[(usize, Option<Floor>)]| {
            let qs: Vec<_> = at.iter().map(|&(j, f)| (&batch[j], f)).collect();
            memory.nearest_batch_above(&qs)
        }),
    }
}

impl Judge for HybridJudge<'_> {
    fn judge(&mut self, b: &Scored) -> Result<Judgement, EngineError> {
        self.judge_shared(b, &mut Local)
    }

    /// The memory's search goes through `rep` (shared out by memory shard in a cluster),
    /// unless it ran with the coding ([`Judge::query`]); fusion, the threshold and the plan
    /// are the leader's.
    fn judge_shared(
        &mut self,
        b: &Scored,
        rep: &mut dyn Replication,
    ) -> Result<Judgement, EngineError> {
        let t0 = Instant::now();
        let (vectors, refs) = scored_batch(b, self.batch.take(), self.timestep, self.times)?;
        let near = match self.near.take() {
            Some(near) => near,
            None => {
                let q = searcher(self.hybrid.memory(), &vectors);
                rep.nearest(q.n, q.memory, q.shards, &*q.search)?
            }
        };
        let docs: Vec<HybridDoc> = vectors
            .iter()
            .zip(refs)
            .enumerate()
            .map(|(i, (v, reference))| HybridDoc {
                reference,
                vector: v,
                model_score: b.scores[i],
            })
            .collect();
        let step = self
            .hybrid
            .step_with(&docs, near, b.rule, b.silent)
            .map_err(memory_err)?;
        let j = Judgement {
            novel: step.verdicts.iter().map(|v| v.novel).collect(),
            threshold: step.threshold,
            topical: step.topical.clone(),
        };
        self.step = Some(step);
        self.seconds += t0.elapsed().as_secs_f64();
        Ok(j)
    }

    /// The search of the memory, run with the coding (its time is the coding's; the judge's
    /// seconds count the batch's term vectors).
    fn query(
        &mut self,
        vectors: &[SparseDoc],
        vocab: &Vocabulary,
    ) -> Result<Option<Query<'_>>, EngineError> {
        let t0 = Instant::now();
        let batch = memory_batch(vectors, vocab, self.timestep, self.times)?;
        self.seconds += t0.elapsed().as_secs_f64();
        let memory = self.hybrid.memory();
        Ok(Some(searcher(memory, &self.batch.insert(batch).0)))
    }

    fn answer(&mut self, near: Vec<Option<Neighbour>>) {
        self.near = Some(near);
    }

    /// The fused scores, which the verdicts show once the step is folded ([`fold_hybrid`]).
    fn scores(&self) -> Option<Vec<f64>> {
        let step = self.step.as_ref()?;
        Some(step.verdicts.iter().map(|v| v.score).collect())
    }
}

/// Apply a hybrid step to `h` (the state it was planned on) and put its verdicts into `out`
/// (fused scores, explanations); returns the parts it changed.
fn fold_hybrid(h: &mut Hybrid, step: HybridStep, out: &mut StepOutput) -> PartsDelta {
    let delta = h.plan_delta(&step.plan);
    h.apply(step.plan);
    for (v, hv) in out.verdicts.iter_mut().zip(&step.verdicts) {
        v.score = hv.score;
    }
    out.hybrid = step.verdicts;
    delta
}

/// A model's step before the engine folds it: the new model, its output (its topics the
/// tracker's when there is one), the hybrid detector's step (not yet applied) with its
/// seconds, and the event tracker after the step.
struct ModelStep {
    model: Inner,
    out: StepOutput,
    hybrid: Option<(HybridStep, f64)>,
    tracked: Option<Events>,
}

impl Engine {
    /// A new, empty model (and an empty hybrid detector when `params` asks for one).
    pub fn new(params: ModelParams) -> Result<Engine, ParamsError> {
        params.validate()?;
        let hybrid = match params.hybrid() {
            Some(h) => Some(Box::new(Hybrid::new(h.clone()).map_err(|e| match e {
                MemoryError::Params(p) => p,
                other => ParamsError::OutOfRange {
                    field: "hybrid",
                    want: "a valid hybrid detector",
                    got: other.to_string(),
                },
            })?)),
            None => None,
        };
        let events = match params.events() {
            Some(e) => Some(Box::new(Events::new(e.clone())?)),
            None => None,
        };
        let model = match params {
            ModelParams::L1(p) => Inner::L1(Box::new(Model::new(p)?)),
            ModelParams::Dnmf(p) => Inner::Dnmf(Box::new(DnmfModel::new(p)?)),
            ModelParams::Ostc(p) => Inner::Ostc(Box::new(OstcModel::new(p)?)),
        };
        Ok(Engine {
            model,
            hybrid,
            events,
            delta: None,
            spent: false,
        })
    }

    pub fn kind(&self) -> ModelKind {
        match &self.model {
            Inner::L1(_) => ModelKind::L1,
            Inner::Dnmf(_) => ModelKind::Dnmf,
            Inner::Ostc(_) => ModelKind::Ostc,
        }
    }

    pub fn params(&self) -> ModelParams {
        match &self.model {
            Inner::L1(m) => ModelParams::L1(m.params().clone()),
            Inner::Dnmf(m) => ModelParams::Dnmf(m.params().clone()),
            Inner::Ostc(m) => ModelParams::Ostc(m.params().clone()),
        }
    }

    /// The hybrid detector, when the store runs one.
    pub fn hybrid(&self) -> Option<&Hybrid> {
        self.hybrid.as_deref()
    }

    /// One timestep (pure: self is unchanged), documents timed by their position in the
    /// stream (time = timestep). See [`Self::step_at`].
    pub fn step(&self, texts: &[&str]) -> Result<(Engine, StepOutput), EngineError> {
        let times = vec![self.timestep() as i64; texts.len()];
        self.step_at(texts, &times)
    }

    /// One timestep (pure: self is unchanged). `times[i]` is document i's time (the caller's
    /// unit; the hybrid detector's nearest-document references carry it). With the hybrid
    /// detector the verdicts' scores are the fused scores, novelty is decided on them, topics
    /// group those novel documents, and `StepOutput::hybrid` explains each verdict.
    ///
    /// The new engine gets its own copy of the hybrid detector's memory (O(memory));
    /// [`Self::step_at_moving`] updates it in place instead.
    pub fn step_at(
        &self,
        texts: &[&str],
        times: &[i64],
    ) -> Result<(Engine, StepOutput), EngineError> {
        let step = self.step_model(texts, times, &mut Local)?;
        Ok(Engine::finish(step, self.hybrid.clone()))
    }

    /// [`Self::step_at`] that moves the hybrid detector into the new engine and updates its
    /// memory in place: O(batch) instead of an O(memory) copy, same engine and output.
    ///
    /// On error `self` is unchanged. On success `self` is spent ([`Self::is_spent`]): it keeps
    /// its model but its hybrid detector went to the new engine, so it refuses to step again
    /// and must be replaced (by the new engine once its state is committed, or by the
    /// committed state reloaded when it is not).
    pub fn step_at_moving(
        &mut self,
        texts: &[&str],
        times: &[i64],
    ) -> Result<(Engine, StepOutput), EngineError> {
        self.step_at_moving_replicated(texts, times, &mut Local)
    }

    /// [`Self::step_at_moving`] with the ℓ1 model's coding shared by `rep` (see
    /// [`crate::l1::replicate`]); same result as the single-node step for the same shard
    /// outputs. Only the ℓ1 model can share its step: the other kinds are refused unless `rep`
    /// is [`Local`] (checked by [`Self::replicable`]).
    pub fn step_at_moving_replicated(
        &mut self,
        texts: &[&str],
        times: &[i64],
        rep: &mut dyn Replication,
    ) -> Result<(Engine, StepOutput), EngineError> {
        let step = self.step_model(texts, times, rep)?;
        let hybrid = self.hybrid.take();
        self.spent = hybrid.is_some();
        Ok(Engine::finish(step, hybrid))
    }

    /// The engine after a step: `hybrid` (the detector as it was before the step, owned)
    /// with the step's plan applied, the delta of its parts recorded, and the verdicts fused;
    /// the step's topics are already the event tracker's, when it runs (the ℓ1 model steps
    /// it within its step: events are the ℓ1 model's only).
    fn finish(step: ModelStep, hybrid: Option<Box<Hybrid>>) -> (Engine, StepOutput) {
        let ModelStep {
            model,
            mut out,
            hybrid: step,
            tracked,
        } = step;
        let (hybrid, delta) = match (hybrid, step) {
            (Some(mut h), Some((step, judged))) => {
                let t0 = Instant::now();
                let delta = fold_hybrid(&mut h, step, &mut out);
                out.seconds_hybrid = judged + t0.elapsed().as_secs_f64();
                (Some(h), Some(delta))
            }
            _ => (None, None),
        };
        let events = tracked.map(Box::new);
        let engine = Engine {
            model,
            hybrid,
            events,
            delta,
            spent: false,
        };
        (engine, out)
    }

    /// True when this engine's model can share its steps among processes (the ℓ1 model);
    /// dnmf and ostc run on one node only.
    pub fn replicable(&self) -> bool {
        matches!(self.model, Inner::L1(_))
    }

    /// True when [`Self::step_at_moving`] moved this engine's hybrid detector away.
    pub fn is_spent(&self) -> bool {
        self.spent
    }

    /// The model's step, judged by the hybrid detector when there is one; its step (not yet
    /// applied) and the seconds it took come back with the model's output.
    fn step_model(
        &self,
        texts: &[&str],
        times: &[i64],
        rep: &mut dyn Replication,
    ) -> Result<ModelStep, EngineError> {
        if self.spent {
            return Err(EngineError::Inconsistent(
                "this engine's hybrid detector moved to the engine its step returned".into(),
            ));
        }
        if times.len() != texts.len() {
            return Err(EngineError::Inconsistent(format!(
                "{} times for {} documents",
                times.len(),
                texts.len()
            )));
        }
        if !self.replicable() && !rep.is_local() {
            return Err(EngineError::Inconsistent(format!(
                "the {} model runs on one node only: it cannot share its steps among processes",
                self.kind()
            )));
        }
        let mut judge = self.hybrid.as_deref().map(|h| HybridJudge {
            hybrid: h,
            timestep: self.timestep(),
            times,
            step: None,
            seconds: 0.0,
            batch: None,
            near: None,
        });
        let j: Option<&mut dyn Judge> = judge.as_mut().map(|j| j as &mut dyn Judge);
        let events = self.events.as_deref();
        let (model, out, tracked) = match &self.model {
            Inner::L1(m) => m
                .step_tracked(texts, j, rep, events)
                .map(|(m, o, e)| (Inner::L1(Box::new(m)), o, e))?,
            Inner::Dnmf(m) => m
                .step(texts)
                .map(|(m, o)| (Inner::Dnmf(Box::new(m)), o, None))?,
            Inner::Ostc(m) => m
                .step_judged(texts, j)
                .map(|(m, o)| (Inner::Ostc(Box::new(m)), o, None))?,
        };
        let hybrid = match judge {
            None => None,
            Some(HybridJudge {
                step: Some(step),
                seconds,
                ..
            }) => Some((step, seconds)),
            Some(_) => {
                return Err(EngineError::Inconsistent(
                    "the model did not consult the hybrid detector".into(),
                ))
            }
        };
        Ok(ModelStep {
            model,
            out,
            hybrid,
            tracked,
        })
    }

    /// Index the next batch gets.
    pub fn timestep(&self) -> u64 {
        match &self.model {
            Inner::L1(m) => m.timestep(),
            Inner::Dnmf(m) => m.timestep(),
            Inner::Ostc(m) => m.timestep(),
        }
    }

    pub fn vocab(&self) -> &Vocabulary {
        self.model.vocab()
    }

    fn model_parts(&self) -> Vec<(String, Vec<u8>)> {
        match &self.model {
            Inner::L1(m) => m.state_parts(),
            Inner::Dnmf(m) => m.state_parts(),
            Inner::Ostc(m) => m.state_parts(),
        }
    }

    /// The whole state as named parts ([`PartsModel::state_parts`]): the model's, then the
    /// hybrid detector's (`hybrid/…`, `memory/…`), then the event tracker's (`events/…`).
    pub fn state_parts(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = self.model_parts();
        if let Some(h) = &self.hybrid {
            out.extend(h.state_parts());
        }
        out.extend(self.event_parts());
        out
    }

    /// The event tracker's parts (none without one).
    fn event_parts(&self) -> Vec<(String, Vec<u8>)> {
        self.events
            .as_ref()
            .map(|e| e.state_parts())
            .unwrap_or_default()
    }

    /// The event tracker, when the store runs one.
    pub fn events(&self) -> Option<&Events> {
        self.events.as_deref()
    }

    /// The state as a store writes it after a step: everything except the memory's documents
    /// in full, and the documents as the delta of the step that made this engine (O(batch)).
    /// An engine not made by a step (new, or loaded) gives every part in full.
    pub fn state_write(&self) -> StateWrite {
        match (&self.hybrid, &self.delta) {
            (Some(h), Some(d)) => {
                let mut full = self.model_parts();
                full.extend(h.state_parts_except_docs());
                full.extend(self.event_parts());
                let incremental = PartsDelta {
                    put: d
                        .put
                        .iter()
                        .filter(|(n, _)| n.starts_with(INCREMENTAL_PREFIX))
                        .cloned()
                        .collect(),
                    delete: d
                        .delete
                        .iter()
                        .filter(|n| n.starts_with(INCREMENTAL_PREFIX))
                        .cloned()
                        .collect(),
                };
                StateWrite {
                    full,
                    incremental: Some(incremental),
                }
            }
            _ => StateWrite {
                full: self.state_parts(),
                incremental: None,
            },
        }
    }

    /// Rebuild a model of `params`' kind from its parts ([`PartsModel::from_state_parts`]);
    /// with a hybrid detector in `params`, its parts must be there and agree with `params`.
    pub fn from_state_parts(
        params: ModelParams,
        parts: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Engine, EngineError> {
        let hybrid = match params.hybrid() {
            Some(want) => {
                let h = Hybrid::from_state_parts(parts.iter().map(|(n, b)| (n.as_str(), &b[..])))
                    .map_err(memory_err)?;
                if h.params() != want {
                    return Err(EngineError::Inconsistent(
                        "the hybrid detector's state does not match its parameters".into(),
                    ));
                }
                Some(Box::new(h))
            }
            None => None,
        };
        let events = match params.events() {
            Some(e) => Some(Box::new(Events::from_state_parts(e.clone(), parts)?)),
            None => None,
        };
        let model = match params {
            ModelParams::L1(p) => Inner::L1(Box::new(Model::from_state_parts(p, parts)?)),
            ModelParams::Dnmf(p) => Inner::Dnmf(Box::new(DnmfModel::from_state_parts(p, parts)?)),
            ModelParams::Ostc(p) => Inner::Ostc(Box::new(OstcModel::from_state_parts(p, parts)?)),
        };
        Ok(Engine {
            model,
            hybrid,
            events,
            delta: None,
            spent: false,
        })
    }

    /// A canonical byte image of the model's logical content (parameters and state, encoded
    /// from the values in memory, not from any store layout): equal bytes ⇔ identical models.
    /// `novad digest` hashes it, so a store migration that keeps the model keeps the digest.
    /// Without a hybrid detector it is the model's image alone (digests of stores that predate
    /// the detector are unchanged).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = match &self.model {
            Inner::L1(m) => m.to_bytes(),
            Inner::Dnmf(m) => {
                let p = m.params();
                parts_digest_bytes(m.as_ref(), params_image(p, &[p.tokenizer.is_none()]))
            }
            Inner::Ostc(m) => {
                let p = m.params();
                parts_digest_bytes(m.as_ref(), params_image(p, &p.image_drops()))
            }
        };
        let sections = [
            (
                &b"hybrid"[..],
                self.hybrid.as_ref().map(|h| h.state_parts()),
            ),
            (
                &b"events"[..],
                self.events.as_ref().map(|e| e.state_parts()),
            ),
        ];
        for (tag, parts) in sections {
            let Some(parts) = parts else { continue };
            out.extend(tag);
            for (name, bytes) in parts {
                out.extend((name.len() as u64).to_le_bytes());
                out.extend(name.as_bytes());
                out.extend((bytes.len() as u64).to_le_bytes());
                out.extend(bytes);
            }
        }
        out
    }

    /// Let the hybrid detector's memory index only the documents of `share` (a cluster
    /// worker's part, see [`crate::memory::DocMemory::restrict`]); nothing to do without one.
    pub fn share_memory(&mut self, share: Share) -> Result<(), EngineError> {
        match &mut self.hybrid {
            Some(h) => h.memory.restrict(share).map_err(memory_err),
            None => Ok(()),
        }
    }

    /// The ℓ1 model, if this is one.
    pub fn as_l1(&self) -> Option<&Model> {
        match &self.model {
            Inner::L1(m) => Some(m),
            _ => None,
        }
    }
}

macro_rules! parts_model {
    ($model:ty, $params:ty, $kind:expr) => {
        impl PartsModel for $model {
            type Params = $params;
            const KIND: ModelKind = $kind;
            fn create(params: $params) -> Result<Self, ParamsError> {
                <$model>::new(params)
            }
            fn step(&self, texts: &[&str]) -> Result<(Self, StepOutput), EngineError> {
                <$model>::step(self, texts)
            }
            fn params(&self) -> &$params {
                <$model>::params(self)
            }
            fn timestep(&self) -> u64 {
                <$model>::timestep(self)
            }
            fn vocab(&self) -> &Vocabulary {
                <$model>::vocab(self)
            }
            fn state_parts(&self) -> Vec<(String, Vec<u8>)> {
                <$model>::state_parts(self)
            }
            fn from_state_parts(
                params: $params,
                parts: &BTreeMap<String, Vec<u8>>,
            ) -> Result<Self, EngineError> {
                <$model>::from_state_parts(params, parts)
            }
        }
    };
}

parts_model!(Model, Params, ModelKind::L1);
parts_model!(DnmfModel, DnmfParams, ModelKind::Dnmf);
parts_model!(OstcModel, OstcParams, ModelKind::Ostc);
