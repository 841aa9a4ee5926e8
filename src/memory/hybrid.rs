//! The hybrid novelty score: a model's own score and the document memory's nearest-neighbour
//! score (1 − max cosine to a remembered earlier document), each mapped to its quantile under
//! its own exponentially forgotten score history, then fused.
//!
//! Batch-composition independence: a document's scores depend only on the document, its model
//! score and the state as of the end of the previous timestep (memory and histories). Documents
//! of the same batch are not "earlier" for each other; the batch enters the memory and the
//! histories only when the plan of the timestep is applied.

use serde::{Deserialize, Serialize};

use super::parts::PartsDelta;
use super::search::{DocMemory, MemoryPlan, Neighbour};
use super::{DocRef, MemoryError, MemoryParams, TermVector};
use crate::params::{check_nonneg, ParamsError};
use crate::threshold::{decide, ScoreHistory, ThresholdRule, BINS};

/// How the two component quantiles q_model and q_nn become one score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fusion {
    /// (q_model + q_nn) / 2.
    Mean,
    /// max(q_model, q_nn).
    Max,
    /// Fisher's combination of the tail probabilities p = 1 − q: with x = p_model · p_nn,
    /// score = 1 − x (1 − ln x) (the probability that two independent uniform tails multiply to
    /// more than x).
    Fisher,
}

impl Fusion {
    /// The fused score of two quantiles in [0, 1]; in [0, 1] and non-decreasing in each.
    pub fn fuse(self, q_model: f64, q_nn: f64) -> f64 {
        let (a, b) = (q_model.clamp(0.0, 1.0), q_nn.clamp(0.0, 1.0));
        let s = match self {
            Fusion::Mean => 0.5 * (a + b),
            Fusion::Max => a.max(b),
            Fusion::Fisher => {
                let x = (1.0 - a) * (1.0 - b);
                if x <= 0.0 {
                    1.0
                } else {
                    1.0 - x * (1.0 - x.ln())
                }
            }
        };
        s.clamp(0.0, 1.0)
    }
}

/// Parameters of a [`Hybrid`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HybridParams {
    pub memory: MemoryParams,
    pub fusion: Fusion,
    /// Half-life, in timesteps, of the weight of past scores in the component and fused
    /// histories (0 = never forget).
    pub half_life: f64,
}

impl Default for HybridParams {
    fn default() -> Self {
        HybridParams {
            memory: MemoryParams::default(),
            fusion: Fusion::Mean,
            half_life: 30.0,
        }
    }
}

impl HybridParams {
    pub fn validate(&self) -> Result<(), ParamsError> {
        self.memory.validate()?;
        check_nonneg(self.half_life, "hybrid.half_life")
    }
}

/// The quantile of `score` under a history: the weight below it (linear within its bin) over
/// the total, in [0, 1]; `None` for an empty history.
pub fn cdf(h: &ScoreHistory, score: f64) -> Option<f64> {
    if !(h.total.is_finite() && h.total > 0.0) {
        return None;
    }
    let x = score.clamp(0.0, 1.0) * BINS as f64;
    let b = (x as usize).min(BINS - 1);
    let below: f64 = h.weights[..b].iter().sum();
    let q = (below + (x - b as f64).clamp(0.0, 1.0) * h.weights[b]) / h.total;
    Some(q.clamp(0.0, 1.0))
}

/// One document of a batch, as the hybrid needs it.
#[derive(Debug, Clone, Copy)]
pub struct HybridDoc<'a> {
    pub reference: DocRef,
    /// The document's unit-ℓ2 vector (empty = no known term: score 0, never novel, not
    /// remembered).
    pub vector: &'a TermVector,
    /// The model's own novelty score, in [0, 1].
    pub model_score: f64,
}

/// The hybrid verdict on one document, with its explanation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HybridVerdict {
    /// Fused score in [0, 1] (0 for an empty document).
    pub score: f64,
    pub novel: bool,
    pub empty: bool,
    pub model_score: f64,
    /// Quantile of `model_score` under the model-score history (the score itself while that
    /// history is empty).
    pub model_quantile: f64,
    /// 1 − cosine to the nearest remembered document (1 when none shares a term).
    pub nn_score: f64,
    pub nn_quantile: f64,
    /// The nearest remembered earlier document and its cosine.
    pub nearest: Option<(DocRef, f64)>,
}

/// The hybrid detector's state: the memory and three score histories.
#[derive(Debug, Clone)]
pub struct Hybrid {
    pub(crate) params: HybridParams,
    pub(crate) memory: DocMemory,
    pub(crate) model_history: ScoreHistory,
    pub(crate) nn_history: ScoreHistory,
    pub(crate) fused_history: ScoreHistory,
}

/// What one timestep changes; see [`Hybrid::step`] and [`Hybrid::apply`].
#[derive(Debug, Clone)]
pub struct HybridPlan {
    pub memory: MemoryPlan,
    /// New histories (None: unchanged, e.g. at the bootstrap).
    pub(crate) histories: Option<[ScoreHistory; 3]>,
}

/// The result of [`Hybrid::step`].
#[derive(Debug, Clone)]
pub struct HybridStep {
    pub verdicts: Vec<HybridVerdict>,
    /// Threshold applied to the fused score (None at the bootstrap or when nothing was
    /// selected by a top-fraction rule).
    pub threshold: Option<f64>,
    pub plan: HybridPlan,
}

impl Hybrid {
    pub fn new(params: HybridParams) -> Result<Hybrid, MemoryError> {
        params.validate()?;
        Ok(Hybrid {
            memory: DocMemory::new(params.memory.clone())?,
            params,
            model_history: ScoreHistory::default(),
            nn_history: ScoreHistory::default(),
            fused_history: ScoreHistory::default(),
        })
    }

    pub fn params(&self) -> &HybridParams {
        &self.params
    }
    pub fn memory(&self) -> &DocMemory {
        &self.memory
    }
    /// Histories of the model scores, the NN scores and the fused scores.
    pub fn histories(&self) -> [&ScoreHistory; 3] {
        [&self.model_history, &self.nn_history, &self.fused_history]
    }

    fn fuse_with(&self, h: [&ScoreHistory; 2], model: f64, nn: f64) -> (f64, f64, f64) {
        let qm = cdf(h[0], model).unwrap_or(model.clamp(0.0, 1.0));
        let qn = cdf(h[1], nn).unwrap_or(nn.clamp(0.0, 1.0));
        (self.params.fusion.fuse(qm, qn), qm, qn)
    }

    /// Score a batch against the current state (`novel` is false in every verdict). Each
    /// verdict depends only on its own document and the state, never on the rest of the batch.
    /// Fails on a model score that is not finite.
    pub fn score(&self, docs: &[HybridDoc]) -> Result<Vec<HybridVerdict>, MemoryError> {
        if let Some(j) = docs.iter().position(|d| !d.model_score.is_finite()) {
            return Err(MemoryError::Inconsistent(format!(
                "model score of document {j} is not finite"
            )));
        }
        let qs: Vec<&TermVector> = docs.iter().map(|d| d.vector).collect();
        let near: Vec<Option<Neighbour>> = self.memory.nearest_batch(&qs);
        let h = [&self.model_history, &self.nn_history];
        Ok(docs
            .iter()
            .zip(near)
            .map(|(d, nb)| {
                if d.vector.is_empty() {
                    return HybridVerdict {
                        score: 0.0,
                        novel: false,
                        empty: true,
                        model_score: d.model_score,
                        model_quantile: 0.0,
                        nn_score: 0.0,
                        nn_quantile: 0.0,
                        nearest: None,
                    };
                }
                let nn = 1.0 - nb.map_or(0.0, |n| n.cosine);
                let (score, qm, qn) = self.fuse_with(h, d.model_score, nn);
                HybridVerdict {
                    score,
                    novel: false,
                    empty: false,
                    model_score: d.model_score,
                    model_quantile: qm,
                    nn_score: nn,
                    nn_quantile: qn,
                    nearest: nb.map(|n| (n.reference, n.cosine)),
                }
            })
            .collect())
    }

    /// One timestep, without changing `self`: score the batch, decide novelty with `rule` on
    /// the fused score (against the fused history), and plan the update: the batch's
    /// documents enter the memory; unless `bootstrap`, the model and NN scores enter their
    /// histories and then the batch's fused scores, recomputed under those new histories,
    /// enter the fused history (so the fused history is on the current scale from the first
    /// timestep on). Bootstrap documents are never novel.
    pub fn step(
        &self,
        docs: &[HybridDoc],
        rule: &ThresholdRule,
        bootstrap: bool,
    ) -> Result<HybridStep, MemoryError> {
        let mut verdicts = self.score(docs)?;
        let batch: Vec<(DocRef, &TermVector)> =
            docs.iter().map(|d| (d.reference, d.vector)).collect();
        let memory = self.memory.plan(&batch);
        if bootstrap {
            return Ok(HybridStep {
                verdicts,
                threshold: None,
                plan: HybridPlan {
                    memory,
                    histories: None,
                },
            });
        }
        let scores: Vec<f64> = verdicts.iter().map(|v| v.score).collect();
        let eligible: Vec<bool> = verdicts.iter().map(|v| !v.empty).collect();
        let (novel, thr) = decide(rule, &self.fused_history, &scores, &eligible);
        for (v, n) in verdicts.iter_mut().zip(novel) {
            v.novel = n;
        }
        let kept: Vec<&HybridVerdict> = verdicts.iter().filter(|v| !v.empty).collect();
        let hl = self.params.half_life;
        let mut mh = self.model_history.clone();
        let mut nh = self.nn_history.clone();
        let mut fh = self.fused_history.clone();
        if !kept.is_empty() {
            mh.update(&kept.iter().map(|v| v.model_score).collect::<Vec<_>>(), hl);
            nh.update(&kept.iter().map(|v| v.nn_score).collect::<Vec<_>>(), hl);
            let fused: Vec<f64> = kept
                .iter()
                .map(|v| self.fuse_with([&mh, &nh], v.model_score, v.nn_score).0)
                .collect();
            fh.update(&fused, hl);
        }
        Ok(HybridStep {
            verdicts,
            threshold: thr.is_finite().then_some(thr),
            plan: HybridPlan {
                memory,
                histories: Some([mh, nh, fh]),
            },
        })
    }

    /// The parts a plan of [`Self::step`] on this state changes (see [`Self::state_parts`]):
    /// the memory's O(batch) parts and, unless at the bootstrap, the history parts.
    pub fn plan_delta(&self, plan: &HybridPlan) -> PartsDelta {
        let mut d = plan.memory.delta(&self.memory);
        if let Some(h) = &plan.histories {
            d.put.extend(super::parts::history_parts(h));
        }
        d
    }

    /// Carry out a plan of [`Self::step`] made on this very state.
    pub fn apply(&mut self, plan: HybridPlan) {
        self.memory.apply(plan.memory);
        if let Some([m, n, f]) = plan.histories {
            self.model_history = m;
            self.nn_history = n;
            self.fused_history = f;
        }
    }
}
