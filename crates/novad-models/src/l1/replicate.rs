//! A step's coding split by logical shards, so that several replicas of one model can share it.
//!
//! A step of the ℓ1 model ([`super::Model::step_replicated`]) hands its coding to a
//! [`Replication`]: a [`CodingJob`] describes the batch and the dictionary; the replication
//! returns, for every logical shard, the codes of its documents and (when the step updates Â)
//! its part of the OIADMM sum ([`ShardOutput`]). [`Local`] computes every shard here; a cluster
//! computes each shard on one replica and gathers them all. Everything else in the step is a
//! deterministic function of the model, the batch and these outputs, so replicas that start
//! from the same model and see the same batch and outputs end with the same model.

use ndarray::Array2;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::l1::coding::{code_document, CodingDict, CodingParams};
use crate::l1::dictionary::{
    shard_docs, shard_sum, DictRows, Multiplier, ShardSum, LOGICAL_SHARDS,
};
use crate::model::{Code, EngineError, Judge, Judgement, Scored};
use crate::text::SparseDoc;

/// What the coding of one step needs: the batch's vectors, the dictionary they are coded
/// against and, when the step updates Â, what the OIADMM sum needs.
pub struct CodingJob<'a> {
    /// The timestep of the model being stepped.
    pub timestep: u64,
    /// The batch's TF-IDF vectors, in batch order.
    pub vectors: &'a [SparseDoc],
    /// Â_t (m × k) as the step codes against it (after the vocabulary remap or the bootstrap).
    pub dict: &'a Array2<f32>,
    pub coding: &'a CodingParams,
    /// Whether the step updates Â: then every shard also returns its part of the OIADMM sum.
    pub update: bool,
    /// Δ_t resized to the batch when it is carried (only used with `update`).
    pub delta: Option<&'a Multiplier>,
    /// The OIADMM penalty β.
    pub beta: f64,
}

/// One logical shard's share of a step: the codes of its documents (in batch order) and its
/// part of the OIADMM sum when the step updates Â.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardOutput {
    pub shard: u32,
    pub codes: Vec<Code>,
    pub sum: Option<ShardSum>,
}

/// The codes of a whole batch (batch order) and, when the step updates Â, every shard's part
/// of the OIADMM sum (shard order).
pub type Assembled = (Vec<Code>, Option<Vec<ShardSum>>);

impl CodingJob<'_> {
    /// Code the documents of `shards` and compute their parts of the OIADMM sum (in parallel
    /// on the rayon pool; each result is a function of the job and its shard only).
    pub fn run(&self, shards: &[usize]) -> Vec<ShardOutput> {
        let n = self.vectors.len();
        let cd = CodingDict::new(self.dict.view(), self.coding.step);
        let idx: Vec<(usize, usize)> = shards
            .iter()
            .flat_map(|&s| shard_docs(n, s).map(move |j| (s, j)))
            .collect();
        let mut codes: Vec<Code> = idx
            .par_iter()
            .map(|&(_, j)| code_document(&cd, &self.vectors[j], self.coding))
            .collect();
        let mut per_shard: Vec<(usize, Vec<Code>)> = Vec::with_capacity(shards.len());
        for &s in shards.iter().rev() {
            let count = idx.iter().filter(|&&(t, _)| t == s).count();
            per_shard.push((s, codes.split_off(codes.len() - count)));
        }
        per_shard.reverse();
        let rows = self.update.then(|| DictRows::new(self.dict));
        per_shard
            .into_par_iter()
            .map(|(s, codes)| ShardOutput {
                shard: s as u32,
                sum: rows.as_ref().map(|r| {
                    shard_sum(
                        s,
                        self.vectors,
                        r,
                        self.delta,
                        &codes,
                        self.dict.ncols(),
                        self.beta,
                    )
                }),
                codes,
            })
            .collect()
    }

    /// Put the outputs of every shard together: the codes in batch order and the sums in
    /// shard order. Fails (naming the shard) when a shard is missing or repeated, or an output
    /// does not fit the batch (wrong count, atom out of range, non-finite value).
    pub fn assemble(&self, outs: Vec<ShardOutput>) -> Result<Assembled, EngineError> {
        let n = self.vectors.len();
        let (m, k) = self.dict.dim();
        let bad = |s: usize, what: &str| {
            EngineError::Inconsistent(format!("logical shard {s} of the batch: {what}"))
        };
        let mut slots: Vec<Option<ShardOutput>> = vec![None; LOGICAL_SHARDS];
        for o in outs {
            let s = o.shard as usize;
            if s >= LOGICAL_SHARDS {
                return Err(bad(s, "no such shard"));
            }
            if slots[s].is_some() {
                return Err(bad(s, "given twice"));
            }
            slots[s] = Some(o);
        }
        let mut codes: Vec<Option<Code>> = vec![None; n];
        let mut sums = Vec::with_capacity(LOGICAL_SHARDS);
        for (s, slot) in slots.into_iter().enumerate() {
            let o = slot.ok_or_else(|| bad(s, "missing"))?;
            let docs: Vec<usize> = shard_docs(n, s).collect();
            if o.codes.len() != docs.len() {
                return Err(bad(s, "wrong number of codes"));
            }
            if !o.codes.iter().all(|c| code_fits(c, m, k)) {
                return Err(bad(s, "a code does not fit the dictionary"));
            }
            match (o.sum, self.update) {
                (Some(g), true) if g.check(m, k) && g.shard as usize == s => sums.push(g),
                (None, false) => {}
                _ => return Err(bad(s, "missing or malformed part of the dictionary update")),
            }
            for (j, c) in docs.into_iter().zip(o.codes) {
                codes[j] = Some(c);
            }
        }
        let codes = codes
            .into_iter()
            .map(|c| c.expect("every position set"))
            .collect();
        Ok((codes, self.update.then_some(sums)))
    }
}

/// A code received from elsewhere fits an m × k dictionary: atoms increasing and `< k`, one
/// finite positive weight each, finite score, residual terms `< m`.
fn code_fits(c: &Code, m: usize, k: usize) -> bool {
    c.atoms.len() == c.weights.len()
        && c.atoms.windows(2).all(|w| w[0] < w[1])
        && c.atoms.iter().all(|&a| (a as usize) < k)
        && c.weights.iter().all(|w| w.is_finite() && *w > 0.0)
        && c.score.is_finite()
        && c.ceiling.is_finite()
        && c.residual
            .iter()
            .all(|&(i, r)| (i as usize) < m && r.is_finite())
}

/// How a step's coding is shared among replicas of the model.
pub trait Replication {
    /// The outputs of every logical shard for `job` (in any order; the step checks and
    /// assembles them). Called at most once per step, only once the model is bootstrapped.
    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError>;

    /// Told the judge's decision when the step has a judge (called right after it, once per
    /// step), so that a leader can pass it on to replicas that have no judge of their own.
    fn judged(&mut self, _judgement: &Result<Judgement, EngineError>) -> Result<(), EngineError> {
        Ok(())
    }

    /// True for [`Local`]: every shard is computed here (any model kind may then step).
    fn is_local(&self) -> bool {
        false
    }
}

/// Every shard computed here: the single-node step.
pub struct Local;

impl Replication for Local {
    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError> {
        let all: Vec<usize> = (0..LOGICAL_SHARDS).collect();
        Ok(job.run(&all))
    }
    fn is_local(&self) -> bool {
        true
    }
}

/// A judge whose decision is also told to a [`Replication`].
pub(crate) struct Tapped<'a, 'b> {
    pub(crate) inner: &'a mut (dyn Judge + 'b),
    pub(crate) rep: &'a mut dyn Replication,
}

impl Judge for Tapped<'_, '_> {
    fn judge(&mut self, batch: &Scored) -> Result<Judgement, EngineError> {
        let r = self.inner.judge(batch);
        self.rep.judged(&r)?;
        r
    }
}
