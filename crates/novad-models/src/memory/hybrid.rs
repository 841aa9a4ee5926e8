//! The hybrid novelty score: a model's own score and the document memory's nearest-neighbour
//! score (1 − max cosine to a remembered earlier document), fused. Calibrated (the default of
//! new stores, [`Calibration`]): fused on their own scale, the drift of the state taken out,
//! the threshold held in a band. Stores created before calibration existed map each part to
//! its quantile under its own exponentially forgotten score history, then fuse.
//!
//! Batch-composition independence: a document's scores depend only on the document, its model
//! score and the state as of the end of the previous timestep (memory and histories). Documents
//! of the same batch are not "earlier" for each other; the batch enters the memory and the
//! histories only when the plan of the timestep is applied.

use serde::{Deserialize, Serialize};

use super::calibrate::Calibration;
use super::parts::PartsDelta;
use super::search::{DocMemory, MemoryPlan, Neighbour};
use super::{DocRef, MemoryError, MemoryParams, TermVector};
use crate::model::{check, check_nonneg, ParamsError};
use crate::threshold::{decide, ScoreHistory, ThresholdRule, BINS};

/// How the two component quantiles q_model and q_nn become one score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fusion {
    /// (1 − w) · q_model + w · q_nn with w = [`HybridParams::nn_weight`].
    Mean,
    /// max(q_model, q_nn).
    Max,
    /// Fisher's combination of the tail probabilities p = 1 − q: with x = p_model · p_nn,
    /// score = 1 − x (1 − ln x) (the probability that two independent uniform tails multiply to
    /// more than x).
    Fisher,
}

impl std::str::FromStr for Fusion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mean" => Ok(Fusion::Mean),
            "max" => Ok(Fusion::Max),
            "fisher" => Ok(Fusion::Fisher),
            _ => Err(format!("unknown fusion `{s}` (mean, max, fisher)")),
        }
    }
}

impl Fusion {
    /// The fused score of two quantiles in [0, 1]; in [0, 1] and non-decreasing in each.
    /// `nn_weight` ∈ [0, 1] weighs q_nn in [`Fusion::Mean`] (ignored by the other rules).
    pub fn fuse(self, q_model: f64, q_nn: f64, nn_weight: f64) -> f64 {
        let (a, b) = (q_model.clamp(0.0, 1.0), q_nn.clamp(0.0, 1.0));
        let w = nn_weight.clamp(0.0, 1.0);
        let s = match self {
            Fusion::Mean => (1.0 - w) * a + w * b,
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
    /// Weight of the NN quantile in [`Fusion::Mean`], in [0, 1].
    pub nn_weight: f64,
    /// Half-life, in timesteps, of the weight of past scores in the component and fused
    /// histories (0 = never forget).
    pub half_life: f64,
    /// The calibrated score and its threshold band (None: each part mapped to its quantile
    /// under its own history, as stores created before calibration existed do). Keep it the
    /// last field: the digest image drops its trailing `None`, so those stores keep their
    /// digest.
    #[serde(default)]
    pub calibration: Option<Calibration>,
}

impl Default for HybridParams {
    /// The calibrated hybrid, the parts fused 0.6 · model + 0.4 · NN (measured on 20
    /// Newsgroups, docs/RESULTS.md "Calibrated hybrid score and a threshold band").
    fn default() -> Self {
        HybridParams {
            memory: MemoryParams::default(),
            fusion: Fusion::Mean,
            nn_weight: 0.4,
            half_life: 30.0,
            calibration: Some(Calibration::default()),
        }
    }
}

impl HybridParams {
    pub fn validate(&self) -> Result<(), ParamsError> {
        self.memory.validate()?;
        check(
            (0.0..=1.0).contains(&self.nn_weight),
            "hybrid.nn_weight",
            "a number in [0, 1]",
            self.nn_weight.to_string(),
        )?;
        check_nonneg(self.half_life, "hybrid.half_life")?;
        match &self.calibration {
            Some(c) => c.validate(),
            None => Ok(()),
        }
    }

    /// The hybrid of stores created before calibration existed: the parts' quantiles fused
    /// 0.4 · model + 0.6 · NN.
    pub fn quantiles() -> HybridParams {
        HybridParams {
            nn_weight: 0.6,
            calibration: None,
            ..HybridParams::default()
        }
    }

    /// Whether the digest image of a parameter set ending with `hybrid` drops its trailing
    /// `None` byte: the hybrid's own when absent, else the calibration's when absent.
    pub fn image_drops_trailing_none(hybrid: &Option<HybridParams>) -> bool {
        hybrid.as_ref().is_none_or(|h| h.calibration.is_none())
    }
}

/// The quantile of `score` under a history: the weight below it (linear within its bin) over
/// the total, in [0, 1]; `None` for an empty history.
pub fn cdf(h: &ScoreHistory, score: f64) -> Option<f64> {
    quantile(h, score, |b| h.weights[..b].iter().sum())
}

/// The quantile of `score` under `h`, given `below(b)`, the weight of the bins under bin b.
fn quantile(h: &ScoreHistory, score: f64, below: impl Fn(usize) -> f64) -> Option<f64> {
    if !(h.total.is_finite() && h.total > 0.0) {
        return None;
    }
    let x = score.clamp(0.0, 1.0) * BINS as f64;
    let b = (x as usize).min(BINS - 1);
    let q = (below(b) + (x - b as f64).clamp(0.0, 1.0) * h.weights[b]) / h.total;
    Some(q.clamp(0.0, 1.0))
}

/// The quantiles of scores under one history, [`cdf`]'s values bit for bit, with the weight
/// below each bin summed once (in bin order, as [`cdf`] sums it): O(bins) to make, O(1) per
/// score. A batch's scores are taken under the same histories.
pub struct Quantiles<'a> {
    h: &'a ScoreHistory,
    /// `below[b]`: the weights of bins `0..b`.
    below: Vec<f64>,
}

impl<'a> Quantiles<'a> {
    pub fn new(h: &'a ScoreHistory) -> Quantiles<'a> {
        let mut below = Vec::with_capacity(h.weights.len() + 1);
        let mut acc: f64 = std::iter::empty::<f64>().sum();
        below.push(acc);
        for w in &h.weights {
            acc += w;
            below.push(acc);
        }
        Quantiles { h, below }
    }

    /// [`cdf`] of `score` under the history.
    pub fn of(&self, score: f64) -> Option<f64> {
        quantile(self.h, score, |b| self.below[b])
    }
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
    /// Fused score in [0, 1] (0 for an empty document); calibrated when the hybrid is.
    pub score: f64,
    pub novel: bool,
    pub empty: bool,
    pub model_score: f64,
    /// Quantile of `model_score` under the model-score history (the score itself while that
    /// history is empty); an explanation only when the hybrid is calibrated.
    pub model_quantile: f64,
    /// 1 − cosine to the nearest remembered document (1 when none shares a term).
    pub nn_score: f64,
    pub nn_quantile: f64,
    /// The nearest remembered earlier document and its cosine.
    pub nearest: Option<(DocRef, f64)>,
}

/// The hybrid detector's state: the memory and three score histories (model, NN, and the
/// fused scores the threshold rule reads), plus, when calibrated, the history of raw fused
/// scores and the anchor.
#[derive(Debug, Clone)]
pub struct Hybrid {
    pub(crate) params: HybridParams,
    pub(crate) memory: DocMemory,
    pub(crate) model_history: ScoreHistory,
    pub(crate) nn_history: ScoreHistory,
    pub(crate) fused_history: ScoreHistory,
    pub(crate) drift: Drift,
}

/// The state of a calibrated hybrid's drift correction (empty for an uncalibrated one).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Drift {
    /// The raw fused scores of past timesteps, forgotten with the hybrid's half-life.
    pub raw_history: ScoreHistory,
    /// The median of the first scored timestep's raw fused scores.
    pub anchor: Option<f64>,
}

/// What one timestep changes; see [`Hybrid::step`] and [`Hybrid::apply`].
#[derive(Debug, Clone)]
pub struct HybridPlan {
    pub memory: MemoryPlan,
    /// New histories (None: unchanged, e.g. at the bootstrap).
    pub(crate) histories: Option<[ScoreHistory; 3]>,
    /// The new drift state of a calibrated hybrid (None: unchanged).
    pub(crate) drift: Option<Drift>,
}

/// The result of [`Hybrid::step`].
#[derive(Debug, Clone)]
pub struct HybridStep {
    pub verdicts: Vec<HybridVerdict>,
    /// Threshold applied to the fused score (None at the bootstrap or when nothing was
    /// selected by a top-fraction rule).
    pub threshold: Option<f64>,
    /// The novel documents the topics group, when a calibration selects fewer
    /// ([`Calibration::topic_quantile`]); None: every novel document.
    pub topical: Option<Vec<bool>>,
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
            drift: Drift::default(),
        })
    }

    pub fn params(&self) -> &HybridParams {
        &self.params
    }
    /// Replace the memory (the evaluation's IDF re-weighting experiment rebuilds it); the
    /// histories are kept.
    pub fn replace_memory(&mut self, memory: DocMemory) {
        self.memory = memory;
    }

    pub fn memory(&self) -> &DocMemory {
        &self.memory
    }
    /// Histories of the model scores, the NN scores and the fused scores.
    pub fn histories(&self) -> [&ScoreHistory; 3] {
        [&self.model_history, &self.nn_history, &self.fused_history]
    }

    /// The drift correction's state (empty unless calibrated).
    pub fn drift(&self) -> &Drift {
        &self.drift
    }

    /// The drift correction this state applies to raw fused scores (≤ 0; 0 when not
    /// calibrated, see [`Calibration::shift`]).
    pub fn shift(&self) -> f64 {
        match &self.params.calibration {
            Some(c) => c.shift(&self.drift.raw_history, self.drift.anchor),
            None => 0.0,
        }
    }

    /// The parts fused on their own scale, in [0, 1].
    fn raw(&self, model: f64, nn: f64) -> f64 {
        let (m, n) = (model.clamp(0.0, 1.0), nn.clamp(0.0, 1.0));
        self.params.fusion.fuse(m, n, self.params.nn_weight)
    }

    /// (fused score, model quantile, NN quantile) of a document's parts under the quantile
    /// maps `q` and the drift correction `shift`.
    fn fuse_with(&self, q: &[Quantiles; 2], shift: f64, model: f64, nn: f64) -> (f64, f64, f64) {
        let qm = q[0].of(model).unwrap_or(model.clamp(0.0, 1.0));
        let qn = q[1].of(nn).unwrap_or(nn.clamp(0.0, 1.0));
        let score = match &self.params.calibration {
            Some(c) => c.score(self.raw(model, nn), shift),
            None => self.params.fusion.fuse(qm, qn, self.params.nn_weight),
        };
        (score, qm, qn)
    }

    /// Score a batch against the current state (`novel` is false in every verdict). Each
    /// verdict depends only on its own document and the state, never on the rest of the batch.
    /// Fails on a model score that is not finite.
    pub fn score(&self, docs: &[HybridDoc]) -> Result<Vec<HybridVerdict>, MemoryError> {
        let qs: Vec<&TermVector> = docs.iter().map(|d| d.vector).collect();
        self.score_with(docs, self.memory.nearest_batch(&qs))
    }

    /// [`Self::score`] with the memory's search already done: `near[j]` is the nearest stored
    /// document of `docs[j]` ([`DocMemory::nearest`] on this state, wherever it ran). Fails
    /// when `near` does not have one entry per document.
    pub fn score_with(
        &self,
        docs: &[HybridDoc],
        near: Vec<Option<Neighbour>>,
    ) -> Result<Vec<HybridVerdict>, MemoryError> {
        if let Some(j) = docs.iter().position(|d| !d.model_score.is_finite()) {
            return Err(MemoryError::Inconsistent(format!(
                "model score of document {j} is not finite"
            )));
        }
        if near.len() != docs.len() {
            return Err(MemoryError::Inconsistent(format!(
                "{} nearest documents for {} documents",
                near.len(),
                docs.len()
            )));
        }
        let q = [
            Quantiles::new(&self.model_history),
            Quantiles::new(&self.nn_history),
        ];
        let shift = self.shift();
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
                let nn = 1.0 - nb.map_or(0.0, |n| n.cosine());
                let (score, qm, qn) = self.fuse_with(&q, shift, d.model_score, nn);
                HybridVerdict {
                    score,
                    novel: false,
                    empty: false,
                    model_score: d.model_score,
                    model_quantile: qm,
                    nn_score: nn,
                    nn_quantile: qn,
                    nearest: nb.map(|n| (n.reference, n.cosine())),
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
        let qs: Vec<&TermVector> = docs.iter().map(|d| d.vector).collect();
        self.step_with(docs, self.memory.nearest_batch(&qs), rule, bootstrap)
    }

    /// [`Self::step`] with the memory's search already done (see [`Self::score_with`]): the
    /// same step when `near` is what this memory's search gives.
    pub fn step_with(
        &self,
        docs: &[HybridDoc],
        near: Vec<Option<Neighbour>>,
        rule: &ThresholdRule,
        bootstrap: bool,
    ) -> Result<HybridStep, MemoryError> {
        let mut verdicts = self.score_with(docs, near)?;
        let batch: Vec<(DocRef, &TermVector)> =
            docs.iter().map(|d| (d.reference, d.vector)).collect();
        let memory = self.memory.plan(&batch);
        if bootstrap {
            return Ok(HybridStep {
                verdicts,
                threshold: None,
                topical: None,
                plan: HybridPlan {
                    memory,
                    histories: None,
                    drift: None,
                },
            });
        }
        let scores: Vec<f64> = verdicts.iter().map(|v| v.score).collect();
        let eligible: Vec<bool> = verdicts.iter().map(|v| !v.empty).collect();
        let (mut novel, mut thr) = decide(rule, &self.fused_history, &scores, &eligible);
        if let Some(c) = &self.params.calibration {
            (novel, thr) = c.band(&scores, &eligible, &novel, thr);
        }
        let topical = self.topical(rule, &scores, &eligible, &novel);
        for (v, n) in verdicts.iter_mut().zip(novel) {
            v.novel = n;
        }
        let (histories, drift) = self.next_histories(&verdicts);
        Ok(HybridStep {
            verdicts,
            threshold: thr.is_finite().then_some(thr),
            topical,
            plan: HybridPlan {
                memory,
                histories: Some(histories),
                drift,
            },
        })
    }

    /// The novel documents a calibrated hybrid's topics group: those the adaptive `rule`
    /// flags at the calibration's topic quantile too, held in the band (None when that is not
    /// stricter than the rule, or the rule is not adaptive: every novel document).
    fn topical(
        &self,
        rule: &ThresholdRule,
        scores: &[f64],
        eligible: &[bool],
        novel: &[bool],
    ) -> Option<Vec<bool>> {
        let c = self.params.calibration.as_ref()?;
        let ThresholdRule::Adaptive {
            quantile,
            half_life,
        } = *rule
        else {
            return None;
        };
        if c.topic_quantile <= quantile {
            return None;
        }
        let strict = ThresholdRule::Adaptive {
            quantile: c.topic_quantile,
            half_life,
        };
        let (flags, t) = decide(&strict, &self.fused_history, scores, eligible);
        let (flags, _) = c.band(scores, eligible, &flags, t);
        Some(flags.iter().zip(novel).map(|(&f, &n)| f && n).collect())
    }

    /// The histories after a judged timestep: the model and NN scores of its non-empty
    /// documents enter their histories; then, uncalibrated, their fused scores recomputed
    /// under those new histories enter the fused history (so it is on the current scale from
    /// the first timestep on); calibrated, their scores as judged enter it, their raw fused
    /// scores the raw history, and the first such timestep's median becomes the anchor.
    fn next_histories(&self, verdicts: &[HybridVerdict]) -> ([ScoreHistory; 3], Option<Drift>) {
        let kept: Vec<&HybridVerdict> = verdicts.iter().filter(|v| !v.empty).collect();
        let hl = self.params.half_life;
        let mut mh = self.model_history.clone();
        let mut nh = self.nn_history.clone();
        let mut fh = self.fused_history.clone();
        let mut drift = self.params.calibration.as_ref().map(|_| self.drift.clone());
        if kept.is_empty() {
            return ([mh, nh, fh], drift);
        }
        mh.update(&kept.iter().map(|v| v.model_score).collect::<Vec<_>>(), hl);
        nh.update(&kept.iter().map(|v| v.nn_score).collect::<Vec<_>>(), hl);
        match &mut drift {
            Some(d) => {
                fh.update(&kept.iter().map(|v| v.score).collect::<Vec<_>>(), hl);
                let raw: Vec<f64> = kept
                    .iter()
                    .map(|v| self.raw(v.model_score, v.nn_score))
                    .collect();
                d.raw_history.update(&raw, hl);
                if d.anchor.is_none() {
                    d.anchor = super::calibrate::median(&d.raw_history);
                }
            }
            None => {
                let q = [Quantiles::new(&mh), Quantiles::new(&nh)];
                let fused: Vec<f64> = kept
                    .iter()
                    .map(|v| self.fuse_with(&q, 0.0, v.model_score, v.nn_score).0)
                    .collect();
                fh.update(&fused, hl);
            }
        }
        ([mh, nh, fh], drift)
    }

    /// The parts a plan of [`Self::step`] on this state changes (see [`Self::state_parts`]):
    /// the memory's O(batch) parts and, unless at the bootstrap, the history parts.
    pub fn plan_delta(&self, plan: &HybridPlan) -> PartsDelta {
        let mut d = plan.memory.delta(&self.memory);
        if let Some(h) = &plan.histories {
            d.put.extend(super::parts::history_parts(h));
        }
        if let Some(drift) = &plan.drift {
            d.put.extend(super::parts::drift_parts(drift));
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
        if let Some(d) = plan.drift {
            self.drift = d;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::memory::testing::next;

    fn tv(pairs: &[(u64, f64)]) -> TermVector {
        TermVector::from_pairs(pairs.to_vec())
    }

    fn r(t: u64, i: u32) -> DocRef {
        DocRef {
            timestep: t,
            seq: i,
            time: 1000 * t as i64 + i as i64,
        }
    }

    /// A little stream: topic `t % 4` words 10·topic.., plus noise terms.
    fn batch(t: u64, n: usize) -> Vec<(TermVector, f64)> {
        let mut st = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 77;
        let mut next = || {
            st = st.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = st;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z ^ (z >> 27)
        };
        (0..n)
            .map(|_| {
                let topic = next() % 4;
                let mut pairs: Vec<(u64, f64)> = Vec::new();
                for _ in 0..6 {
                    let k = 10 * topic + next() % 10;
                    pairs.push((k, 1.0 + (next() % 3) as f64));
                }
                for _ in 0..2 {
                    pairs.push((1000 + next() % 500, 1.0));
                }
                (tv(&pairs), (next() % 1000) as f64 / 1000.0)
            })
            .collect()
    }

    fn docs(t: u64, b: &[(TermVector, f64)]) -> Vec<HybridDoc<'_>> {
        b.iter()
            .enumerate()
            .map(|(i, (v, s))| HybridDoc {
                reference: r(t, i as u32),
                vector: v,
                model_score: *s,
            })
            .collect()
    }

    fn warmed(steps: u64) -> Hybrid {
        warmed_with(HybridParams::default(), steps)
    }

    fn warmed_with(params: HybridParams, steps: u64) -> Hybrid {
        let mut h = Hybrid::new(params).unwrap();
        for t in 0..steps {
            let b = batch(t, 25);
            let out = h
                .step(&docs(t, &b), &ThresholdRule::default_adaptive(), t == 0)
                .unwrap();
            h.apply(out.plan);
        }
        h
    }

    #[test]
    fn fusion_is_bounded_and_monotone() {
        let grid: Vec<f64> = (0..=20).map(|i| i as f64 / 20.0).collect();
        for f in [Fusion::Mean, Fusion::Max, Fusion::Fisher] {
            for &a in &grid {
                for w in grid.windows(2) {
                    for nw in [0.0, 0.3, 0.5, 1.0] {
                        let (lo, hi) = (f.fuse(a, w[0], nw), f.fuse(a, w[1], nw));
                        assert!((0.0..=1.0).contains(&lo) && lo <= hi + 1e-12, "{f:?}");
                        assert!(f.fuse(w[0], a, nw) <= f.fuse(w[1], a, nw) + 1e-12, "{f:?}");
                    }
                }
            }
            assert_eq!(f.fuse(1.0, 1.0, 0.5), 1.0);
            assert_eq!(f.fuse(0.0, 0.0, 0.5), 0.0);
        }
        // Fisher: two moderately high quantiles beat one alone
        assert!(Fusion::Fisher.fuse(0.9, 0.9, 0.5) > 0.9);
        // the weight moves the mean toward the NN quantile
        assert!((Fusion::Mean.fuse(0.2, 0.8, 0.75) - 0.65).abs() < 1e-12);
    }

    /// The quantiles worked out once per history are [`cdf`]'s, bit for bit, on histories of
    /// uneven weights (zeros, tiny and large ones) and on scores inside, between, at the edges
    /// of and outside the bins.
    #[test]
    fn quantiles_are_the_cdf_bit_for_bit() {
        let mut st = 11u64;
        for round in 0..20 {
            let mut h = ScoreHistory::default();
            let scores: Vec<f64> = (0..200 + 50 * round)
                .map(|_| (next(&mut st) % 10_000) as f64 / 9_000.0 - 0.05)
                .collect();
            h.update(&scores, if round % 2 == 0 { 0.0 } else { 7.0 });
            h.weights[(next(&mut st) % BINS as u64) as usize] += 1e-300;
            let q = Quantiles::new(&h);
            let edges = [-1.0, 0.0, 5e-4, 0.5, 1.0 - 1e-12, 1.0, 3.0];
            let probes = (0..500)
                .map(|_| (next(&mut st) % 1_000_003) as f64 / 1_000_000.0)
                .chain(edges);
            for s in probes {
                let (a, b) = (q.of(s).unwrap(), cdf(&h, s).unwrap());
                assert_eq!(a.to_bits(), b.to_bits(), "score {s}: {a} vs {b}");
            }
        }
        assert_eq!(Quantiles::new(&ScoreHistory::default()).of(0.3), None);
    }

    #[test]
    fn cdf_is_the_share_of_past_weight_below() {
        let mut h = ScoreHistory::default();
        assert_eq!(cdf(&h, 0.5), None);
        h.update(&(0..100).map(|i| i as f64 / 100.0).collect::<Vec<_>>(), 0.0);
        for i in 0..100 {
            let s = i as f64 / 100.0 + 0.005;
            let q = cdf(&h, s).unwrap();
            assert!((q - (i + 1) as f64 / 100.0).abs() < 0.011, "{s}: {q}");
        }
        assert_eq!(cdf(&h, -3.0), Some(0.0));
        assert_eq!(cdf(&h, 7.0), Some(1.0));
    }

    #[test]
    fn a_documents_verdict_does_not_depend_on_its_batch() {
        let h = warmed(4);
        assert!(h.fused_history.total > 0.0);
        let probe = (tv(&[(3, 2.0), (5, 1.0), (1200, 1.0)]), 0.42);
        let twin = (tv(&[(3, 2.0), (5, 1.0), (1200, 1.1)]), 0.40);
        let others = batch(50, 30);
        let a: Vec<_> = std::iter::once(probe.clone())
            .chain(std::iter::once(twin))
            .collect();
        let b: Vec<_> = others[..7]
            .iter()
            .cloned()
            .chain(std::iter::once(probe.clone()))
            .chain(others[7..].iter().cloned())
            .collect();
        let rule = ThresholdRule::default_adaptive();
        let va = h.step(&docs(9, &a), &rule, false).unwrap().verdicts[0].clone();
        let vb = h.step(&docs(9, &b), &rule, false).unwrap().verdicts[7].clone();
        assert_eq!(va, vb);
        // the twin in the same batch is not an earlier document
        assert!(va.nearest.is_none_or(|(r, _)| r.timestep < 9));
    }

    #[test]
    fn the_nearest_earlier_document_explains_the_score() {
        let mut h = Hybrid::new(HybridParams::default()).unwrap();
        let old = vec![
            (tv(&[(1, 1.0), (2, 1.0)]), 0.3),
            (tv(&[(7, 1.0), (8, 1.0), (9, 1.0)]), 0.3),
        ];
        let rule = ThresholdRule::default_adaptive();
        let out = h.step(&docs(0, &old), &rule, true).unwrap();
        assert!(out.verdicts.iter().all(|v| !v.novel && v.nn_score == 1.0));
        assert!(out.plan.histories.is_none(), "the bootstrap is not history");
        h.apply(out.plan);
        let new = vec![
            (tv(&[(7, 1.0), (8, 1.0), (9, 1.0)]), 0.5),
            (tv(&[(2, 1.0), (40, 1.0)]), 0.5),
            (tv(&[(41, 1.0)]), 0.5),
            (TermVector::default(), 0.0),
        ];
        let v = h.step(&docs(1, &new), &rule, false).unwrap().verdicts;
        let (r0, c0) = v[0].nearest.unwrap();
        assert_eq!(r0, r(0, 1));
        assert!((c0 - 1.0).abs() < 1e-6 && v[0].nn_score < 1e-6);
        let (r1, c1) = v[1].nearest.unwrap();
        assert_eq!(r1, r(0, 0));
        assert!((c1 - 0.5).abs() < 1e-6);
        assert_eq!((v[2].nearest, v[2].nn_score), (None, 1.0));
        assert!(v[3].empty && !v[3].novel && v[3].score == 0.0);
        assert!(v[2].score > v[1].score && v[1].score > v[0].score);
    }

    #[test]
    fn parts_round_trip_and_one_timestep_changes_o_batch_parts() {
        let mut h = warmed(3);
        let mut stored: BTreeMap<String, Vec<u8>> = h.state_parts().into_iter().collect();
        let rule = ThresholdRule::default_adaptive();
        for t in 3..8 {
            let b = batch(t, 5 + t as usize);
            let out = h.step(&docs(t, &b), &rule, false).unwrap();
            let delta = h.plan_delta(&out.plan);
            // memory meta + ≤ 2 parts per document + the 12 history parts, whatever is stored
            assert!(delta.len() <= 1 + 2 * b.len() + 12, "{}", delta.len());
            assert!(delta
                .put
                .iter()
                .all(|p| p.1.len() <= crate::memory::MAX_PART_BYTES));
            h.apply(out.plan);
            delta.apply_to(&mut stored);
            assert_eq!(stored, h.state_parts().into_iter().collect());
            let back =
                Hybrid::from_state_parts(stored.iter().map(|(n, b)| (n.as_str(), b.as_slice())))
                    .unwrap();
            let probe = batch(100 + t, 6);
            let d = docs(t + 1, &probe);
            assert_eq!(
                back.step(&d, &rule, false).unwrap().verdicts,
                h.step(&d, &rule, false).unwrap().verdicts
            );
        }
        assert!(
            h.memory().len() > 60,
            "the memory holds more than one batch"
        );
        let mut bad = stored.clone();
        bad.insert("hybrid/history/nn/2".into(), vec![0; 12]);
        let e = Hybrid::from_state_parts(bad.iter().map(|(n, b)| (n.as_str(), b.as_slice())))
            .unwrap_err();
        assert!(e.to_string().contains("hybrid/history/nn/2"), "{e}");
    }

    #[test]
    fn a_replica_of_the_memory_that_plans_each_batch_itself_stays_equal() {
        // what a cluster's replica does: load the leader's memory from its parts once, then
        // search and take in every batch itself; the leader's step uses the shared search
        let mut h = warmed(3);
        let mut replica = DocMemory::from_state_parts(
            h.memory()
                .state_parts()
                .iter()
                .map(|(n, b)| (n.as_str(), b.as_slice())),
        )
        .unwrap();
        let rule = ThresholdRule::default_adaptive();
        for t in 3..8 {
            let b = batch(t, 40);
            let d = docs(t, &b);
            // the replica searches the odd positions, the leader the even ones
            let qs: Vec<&TermVector> = d.iter().map(|x| x.vector).collect();
            let odd: Vec<usize> = (1..d.len()).step_by(2).collect();
            let theirs = replica.nearest_batch(&odd.iter().map(|&j| qs[j]).collect::<Vec<_>>());
            let mut near = h.memory().nearest_batch(&qs);
            for (&j, nb) in odd.iter().zip(theirs) {
                near[j] = nb;
            }
            let shared = h.step_with(&d, near, &rule, false).unwrap();
            let own = h.step(&d, &rule, false).unwrap();
            assert_eq!(shared.verdicts, own.verdicts, "timestep {t}");
            assert_eq!(shared.plan.memory, own.plan.memory);
            let refs: Vec<(DocRef, &TermVector)> =
                d.iter().map(|x| (x.reference, x.vector)).collect();
            replica.apply(replica.plan(&refs));
            h.apply(shared.plan);
            assert_eq!(
                replica.state_parts(),
                h.memory().state_parts(),
                "timestep {t}"
            );
        }
        assert!(h.memory().len() > 100);
        // a search result per document, or the step is refused
        let b = batch(9, 3);
        assert!(h
            .step_with(&docs(9, &b), vec![None; 2], &rule, false)
            .is_err());
    }

    /// Calibrated, a score is the parts fused on their own scale plus the drift correction:
    /// past fused scores (the threshold's history) do not move it; the anchor is the median
    /// of the first scored timestep's raw scores; the correction only raises.
    #[test]
    fn a_calibrated_score_is_the_raw_fusion_plus_the_drift_correction() {
        let mut h = warmed(1);
        assert_eq!(h.drift().anchor, None, "the bootstrap sets no anchor");
        let rule = ThresholdRule::hybrid_adaptive();
        let b = batch(1, 40);
        let out = h.step(&docs(1, &b), &rule, false).unwrap();
        // no shift yet: the score is the raw fusion of the parts
        for v in out.verdicts.iter().filter(|v| !v.empty) {
            let raw = 0.6 * v.model_score + 0.4 * v.nn_score;
            assert!((v.score - raw).abs() < 1e-12, "{} vs {raw}", v.score);
        }
        let raw: Vec<f64> = out
            .verdicts
            .iter()
            .filter(|v| !v.empty)
            .map(|v| v.score)
            .collect();
        h.apply(out.plan);
        let anchor = h
            .drift()
            .anchor
            .expect("the first scored timestep sets the anchor");
        // the anchor is the median: half the first timestep's raw scores at most it
        let below = raw.iter().filter(|&&r| r <= anchor).count() as f64 / raw.len() as f64;
        assert!((0.5..0.6).contains(&below), "{anchor}: {below}");
        // a history of far lower raw scores: every later score is raised by max_shift, never
        // more; past fused scores play no part
        let mut low = h.clone();
        low.drift.raw_history.update(&[0.0; 5000], 0.0);
        low.fused_history.update(&[1.0; 5000], 0.0);
        let probe = batch(7, 30);
        let (a, b2) = (
            h.score(&docs(7, &probe)).unwrap(),
            low.score(&docs(7, &probe)).unwrap(),
        );
        let max = HybridParams::default().calibration.unwrap().max_shift;
        for (x, y) in a.iter().zip(&b2).filter(|(x, _)| !x.empty) {
            let raised = (y.score - x.score) - (max + h.shift());
            assert!(
                raised.abs() < 1e-9 || y.score == 1.0,
                "{} → {}",
                x.score,
                y.score
            );
            assert!(y.score >= x.score);
        }
        // a history of higher raw scores (a burst) lowers nothing below the raw fusion
        let mut burst = h.clone();
        burst.drift.raw_history.update(&[1.0; 5000], 0.0);
        assert_eq!(burst.shift(), 0.0);
        for (v, x) in burst.score(&docs(7, &probe)).unwrap().iter().zip(&a) {
            assert!(v.score >= x.score - (-h.shift()) - 1e-12);
        }
    }

    /// Topics group the novel documents the stricter topic quantile flags too: a subset of
    /// the verdicts, and every verdict when the rule is at least as strict.
    #[test]
    fn topics_take_a_stricter_subset_of_the_novel_documents() {
        let h = warmed(6);
        let b = batch(6, 200);
        let step = h
            .step(&docs(6, &b), &ThresholdRule::hybrid_adaptive(), false)
            .unwrap();
        let topical = step.topical.expect("a stricter selection");
        let novel: Vec<bool> = step.verdicts.iter().map(|v| v.novel).collect();
        assert_eq!(topical.len(), novel.len());
        assert!(topical.iter().zip(&novel).all(|(&t, &n)| !t || n));
        let (t, n) = (
            topical.iter().filter(|&&x| x).count(),
            novel.iter().filter(|&&x| x).count(),
        );
        assert!(t < n, "{t} topical of {n} novel");
        // the lowest topical score is above the highest non-topical novel one's threshold
        let lowest = (0..novel.len())
            .filter(|&j| topical[j])
            .map(|j| step.verdicts[j].score)
            .fold(f64::INFINITY, f64::min);
        assert!((0..novel.len())
            .filter(|&j| novel[j] && !topical[j])
            .all(|j| step.verdicts[j].score <= lowest));
        let strict = ThresholdRule::Adaptive {
            quantile: 0.95,
            half_life: 30.0,
        };
        assert!(h
            .step(&docs(6, &b), &strict, false)
            .unwrap()
            .topical
            .is_none());
        let old = warmed_with(HybridParams::quantiles(), 6);
        let step = old.step(&docs(6, &b), &ThresholdRule::hybrid_adaptive(), false);
        assert!(step.unwrap().topical.is_none());
    }

    /// A hybrid without calibration (stores created before it) keeps its layout: version-1
    /// meta, no drift parts, quantile fusion; its parts round-trip.
    #[test]
    fn an_uncalibrated_hybrid_keeps_the_quantile_fusion_and_its_layout() {
        let h = warmed_with(HybridParams::quantiles(), 4);
        let parts = h.state_parts();
        assert!(parts
            .iter()
            .all(|(n, _)| n != "hybrid/anchor" && !n.starts_with("hybrid/history/raw/")));
        let meta = &parts.iter().find(|(n, _)| n == "hybrid/meta").unwrap().1;
        assert_eq!(meta[0], 1, "version 1");
        let back = Hybrid::from_state_parts(parts.iter().map(|(n, b)| (n.as_str(), b.as_slice())))
            .unwrap();
        assert_eq!(back.params(), h.params());
        assert_eq!(back.params().calibration, None);
        let probe = batch(9, 12);
        let v = h.score(&docs(9, &probe)).unwrap();
        assert_eq!(back.score(&docs(9, &probe)).unwrap(), v);
        for x in v.iter().filter(|x| !x.empty) {
            let fused = 0.4 * x.model_quantile + 0.6 * x.nn_quantile;
            assert!((x.score - fused).abs() < 1e-12);
        }
        // calibrated parts carry the drift state and round-trip too
        let c = warmed(4);
        let cp = c.state_parts();
        assert!(cp.iter().any(|(n, _)| n == "hybrid/anchor"));
        let back =
            Hybrid::from_state_parts(cp.iter().map(|(n, b)| (n.as_str(), b.as_slice()))).unwrap();
        assert_eq!(back.drift(), c.drift());
        assert_eq!(back.params(), c.params());
        let mut bad: BTreeMap<String, Vec<u8>> = cp.into_iter().collect();
        bad.insert(
            "hybrid/anchor".into(),
            postcard::to_stdvec(&Some(3.0f64)).unwrap(),
        );
        let e = Hybrid::from_state_parts(bad.iter().map(|(n, b)| (n.as_str(), b.as_slice())))
            .unwrap_err();
        assert!(e.to_string().contains("hybrid/anchor"), "{e}");
    }

    #[test]
    fn non_finite_model_scores_are_refused() {
        let h = warmed(2);
        let b = vec![(tv(&[(1, 1.0)]), f64::NAN)];
        assert!(h.score(&docs(5, &b)).is_err());
    }
}
