//! The hybrid methods of `novad eval`, computed by the product itself: an [`Engine`] whose
//! parameters carry the hybrid detector (`hybrid: Some(..)`, built from the eval arguments)
//! steps on each timestep's raw texts, exactly as the daemon does (the model's own tokenizer,
//! vocabulary and threshold; the memory fed the model's own vectors), and the column is its
//! verdict scores (the fused scores).
//!
//! `--hybrid-reweight` is an experiment the product does not run (every remembered document
//! re-weighted with the current IDF before each timestep): it keeps a [`ReweightRun`] on the
//! eval's vectorizer, fed the base model's verdict scores.

use serde::Serialize;

use novad_models::memory::{
    Calibration, DocMemory, DocRef, Hybrid, HybridDoc, HybridParams, MemoryParams, TermVector,
};
use novad_models::text::{tfidf_l1, SparseDoc, Tokenizer, Vocabulary};
use novad_models::threshold::ThresholdRule;
use novad_models::{Engine, ModelParams};

use super::EvalError;

/// Settings of the hybrid methods (from the eval arguments).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HybridEvalParams {
    pub hybrid: HybridParams,
    /// Re-weight every remembered document with the current IDF before each timestep (an
    /// experiment on IDF drift; the daemon stores each vector with the IDF of its time).
    pub reweight: bool,
    /// Beside a model whose topics are events, run the same model with DICTCLUST topics
    /// (the paper's stage) and judge both.
    pub compare_dictclust: bool,
}

impl HybridEvalParams {
    /// The hybrid of the `--hybrid-*` arguments; fails on invalid ones.
    pub fn new(args: &super::EvalArgs) -> Result<Self, EvalError> {
        let calibration = match args.hybrid_scale {
            super::HybridScale::Calibrated => Some(Calibration {
                max_shift: args.hybrid_max_shift,
                floor: args.hybrid_floor,
                ceiling: args.hybrid_ceiling,
                topic_quantile: args.hybrid_topic_quantile,
            }),
            super::HybridScale::Quantiles => None,
        };
        let hybrid = HybridParams {
            memory: MemoryParams {
                max_docs: args.hybrid_max_docs,
                eviction: args.hybrid_eviction,
                max_terms_per_doc: args.hybrid_terms,
                ..MemoryParams::default()
            },
            fusion: args.hybrid_fusion,
            nn_weight: args.hybrid_nn_weight,
            half_life: args.hybrid_half_life,
            calibration,
        };
        let reweight = args.hybrid_reweight;
        hybrid
            .validate()
            .map_err(|e| EvalError::Args(e.to_string()))?;
        Ok(HybridEvalParams {
            hybrid,
            reweight,
            compare_dictclust: args.compare_dictclust,
        })
    }

    /// `model` with this hybrid detector switched on (what a store created with these
    /// settings runs). Fails for a model kind without the hybrid detector.
    pub fn product_params(&self, model: ModelParams) -> Result<ModelParams, EvalError> {
        Ok(match model {
            ModelParams::L1(mut p) => {
                p.hybrid = Some(self.hybrid.clone());
                ModelParams::L1(p)
            }
            ModelParams::Ostc(mut p) => {
                p.hybrid = Some(self.hybrid.clone());
                ModelParams::Ostc(p)
            }
            ModelParams::Dnmf(_) => {
                return Err(EvalError::Args(
                    "the hybrid detector runs on the ℓ1 and OSTC models only".into(),
                ))
            }
        })
    }
}

/// One timestep as a hybrid method sees it.
pub struct HybridInput<'a> {
    /// Index of the timestep (also the documents' time).
    pub t: usize,
    pub texts: &'a [&'a str],
    /// The eval's TF-IDF vectors and vocabulary (only [`ReweightRun`] uses them).
    pub vectors: &'a [SparseDoc],
    pub vocab: &'a Vocabulary,
    /// The base model's verdict scores (only [`ReweightRun`] uses them).
    pub model_scores: &'a [f64],
    pub rule: &'a ThresholdRule,
    pub tok: &'a Tokenizer,
}

/// What a hybrid method says of one timestep: one entry per document (documents without a
/// known term score 0 and are never novel).
pub struct HybridOut {
    /// The fused scores.
    pub scores: Vec<f64>,
    /// The verdicts.
    pub novel: Vec<bool>,
    /// The parts, as the detector judged them: the model's own score and the memory's
    /// nearest-neighbour score (None for the re-weighting experiment).
    pub parts: Option<(Vec<f64>, Vec<f64>)>,
    /// The step's topics with their keywords, by topic stage (none for the re-weighting
    /// experiment, which finds none).
    pub topics: Vec<(String, Vec<super::EventTopic>)>,
}

/// The name of the topic stage a parameter set runs.
pub fn topic_stage(p: &ModelParams) -> &'static str {
    match p {
        ModelParams::L1(p) if p.events.is_some() => "events",
        ModelParams::L1(_) => "dictclust",
        ModelParams::Ostc(_) => "ostc",
        ModelParams::Dnmf(_) => "dnmf",
    }
}

/// The step's topics as the event judge sees them (keywords spelled out in `vocab`).
fn event_topics(out: &novad_models::StepOutput, vocab: &Vocabulary) -> Vec<super::EventTopic> {
    out.topics
        .iter()
        .map(|t| super::EventTopic {
            members: t.members.clone(),
            terms: t
                .terms
                .iter()
                .map(|&(id, _)| vocab.term(id).to_string())
                .collect(),
            event: t.event,
            continuing: t.kind == novad_models::TopicKind::Continuing,
        })
        .collect()
}

/// A hybrid column's streaming state.
pub enum HybridMethod {
    /// The product path: the engine with the hybrid detector, and the same engine with
    /// DICTCLUST topics when they are compared.
    Product(Box<Engine>, Option<Box<Engine>>),
    /// The IDF re-weighting experiment.
    Reweight(Box<ReweightRun>),
}

impl HybridMethod {
    /// The product's engine on `model` with the hybrid of `p`, or the re-weighting experiment
    /// when `p.reweight`.
    pub fn new(p: &HybridEvalParams, model: ModelParams) -> Result<Self, EvalError> {
        if p.reweight {
            return Ok(HybridMethod::Reweight(Box::new(ReweightRun::new(p)?)));
        }
        let params = p.product_params(model)?;
        let baseline = match &params {
            ModelParams::L1(l1) if p.compare_dictclust && l1.events.is_some() => {
                let mut b = l1.clone();
                b.events = None;
                b.topics = Some(novad_models::l1::dictclust::TopicParams::default());
                Some(Box::new(Engine::new(ModelParams::L1(b))?))
            }
            _ => None,
        };
        Ok(HybridMethod::Product(
            Box::new(Engine::new(params)?),
            baseline,
        ))
    }

    /// What the method says of timestep `input.t`, the state folded forward.
    pub fn step(&mut self, input: &HybridInput) -> Result<HybridOut, EvalError> {
        match self {
            HybridMethod::Product(engine, baseline) => {
                let times = vec![input.t as i64; input.texts.len()];
                let (next, out) = engine.step_at(input.texts, &times)?;
                if out.hybrid.len() != input.texts.len() {
                    return Err(EvalError::Inconsistent(format!(
                        "timestep {}: the engine explained {} of {} verdicts",
                        input.t,
                        out.hybrid.len(),
                        input.texts.len()
                    )));
                }
                let mut topics = vec![(
                    topic_stage(&engine.params()).to_string(),
                    event_topics(&out, next.vocab()),
                )];
                **engine = next;
                if let Some(base) = baseline {
                    let (b_next, b_out) = base.step_at(input.texts, &times)?;
                    topics.push((
                        topic_stage(&b_next.params()).to_string(),
                        event_topics(&b_out, b_next.vocab()),
                    ));
                    **base = b_next;
                }
                Ok(HybridOut {
                    topics,
                    scores: out.verdicts.iter().map(|v| v.score).collect(),
                    novel: out.verdicts.iter().map(|v| v.novel).collect(),
                    parts: Some((
                        out.hybrid.iter().map(|h| h.model_score).collect(),
                        out.hybrid.iter().map(|h| h.nn_score).collect(),
                    )),
                })
            }
            HybridMethod::Reweight(run) => run.step(input),
        }
    }
}

/// The IDF re-weighting experiment: the hybrid on the eval's vectors, the memory rebuilt from
/// every earlier document's tokens with the current IDF before each timestep.
pub struct ReweightRun {
    hybrid: Hybrid,
    /// Every non-empty document's tokens, in arrival order.
    past: Vec<(DocRef, Vec<String>)>,
}

impl ReweightRun {
    pub fn new(p: &HybridEvalParams) -> Result<Self, EvalError> {
        Ok(ReweightRun {
            hybrid: Hybrid::new(p.hybrid.clone()).map_err(|e| EvalError::Args(e.to_string()))?,
            past: Vec::new(),
        })
    }

    fn step(&mut self, input: &HybridInput) -> Result<HybridOut, EvalError> {
        let (t, vocab) = (input.t, input.vocab);
        let tv: Vec<TermVector> = input
            .vectors
            .iter()
            .map(|v| TermVector::from_sparse(v, |id| vocab.term(id)))
            .collect();
        let refs: Vec<DocRef> = (0..input.vectors.len())
            .map(|i| DocRef {
                timestep: t as u64,
                seq: i as u32,
                time: t as i64,
            })
            .collect();
        let mut mem = DocMemory::new(self.hybrid.params().memory.clone())
            .map_err(|e| EvalError::Inconsistent(e.to_string()))?;
        let past: Vec<TermVector> = self
            .past
            .iter()
            .map(|(_, toks)| {
                let c = vocab.counts(toks);
                let d = tfidf_l1(&c, |id| vocab.df(id), vocab.docs_seen());
                TermVector::from_sparse(&d, |id| vocab.term(id))
            })
            .collect();
        let batch: Vec<(DocRef, &TermVector)> =
            self.past.iter().map(|p| p.0).zip(past.iter()).collect();
        mem.insert(&batch);
        self.hybrid.replace_memory(mem);
        for (i, text) in input.texts.iter().enumerate() {
            if !input.vectors[i].is_empty() {
                self.past.push((refs[i], input.tok.tokens(text)));
            }
        }
        let docs: Vec<HybridDoc> = tv
            .iter()
            .zip(&refs)
            .zip(input.model_scores)
            .map(|((v, r), &s)| HybridDoc {
                reference: *r,
                vector: v,
                model_score: s,
            })
            .collect();
        let out = self
            .hybrid
            .step(&docs, input.rule, t == 0)
            .map_err(|e| EvalError::Inconsistent(e.to_string()))?;
        self.hybrid.apply(out.plan);
        Ok(HybridOut {
            scores: out.verdicts.iter().map(|v| v.score).collect(),
            novel: out.verdicts.iter().map(|v| v.novel).collect(),
            parts: None,
            topics: Vec::new(),
        })
    }
}
