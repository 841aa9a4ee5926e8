//! The methods' state across the pass and one timestep of every method, in a fixed order:
//! ℓ1-online, ℓ1-batch, ℓ2-batch ([`dictionary`]), NN, LSH ([`neighbours`]), OSTC and the
//! hybrid detectors ([`engines`]); then the reference scores. Each method's seconds cover its
//! own work only, measured while no other method runs.

mod dictionary;
mod engines;
mod neighbours;

use std::collections::BTreeMap;

use indicatif::ProgressBar;

use super::super::hybrid::{HybridEvalParams, HybridMethod};
use super::super::results::{Column, ColumnResult};
use super::super::topics::DaemonTopicCost;
use super::super::{EvalArgs, EvalError, Method};
use super::batch::StepBatch;
use super::setup::{resolve_ostc_params, Setup};
use crate::baselines::l1batch::L1Batch;
use crate::baselines::l2batch::L2Batch;
use crate::baselines::neighbours::{ExactNn, Lsh};
use novad_models::ostc::{OstcModel, OstcParams};
use novad_models::text::Tokenizer;
use novad_models::{Model, ModelParams};

/// What the methods produced at one timestep.
#[derive(Default)]
pub(super) struct StepScores {
    /// Per column: one score per document of the timestep (empty documents included).
    pub scores: BTreeMap<Column, Vec<f64>>,
    /// Per column: its seconds, SRE, ceiling share and the other per-timestep figures.
    pub cols: BTreeMap<Column, ColumnResult>,
    /// Per column whose method decides novelty itself: its verdicts (one per document).
    pub verdicts: BTreeMap<Column, Vec<bool>>,
    /// The daemon's topics (the `hybrid` method's engine step), when it runs, by topic stage
    /// (its own, and DICTCLUST's beside it when compared).
    pub events: Vec<(String, Vec<super::super::EventTopic>)>,
    /// What the daemon's own topic stage cost (ℓ1-online, evaluated timesteps only).
    pub daemon_cost: Option<DaemonTopicCost>,
}

/// The state every running method carries from one timestep to the next.
pub(super) struct Methods {
    /// ℓ1-online: the daemon's model (None when it does not run).
    online: Option<Model>,
    /// ℓ1-batch, once bootstrapped.
    l1_batch: Option<L1Batch>,
    /// ℓ2-batch, once bootstrapped.
    l2_batch: Option<L2Batch>,
    nn: Option<ExactNn>,
    lsh: Option<Lsh>,
    /// OSTC: the daemon's model (None when it does not run).
    ostc: Option<OstcModel>,
    /// Per hybrid method: its column, the column whose scores it may fuse, its state.
    hybrid_runs: Vec<(Column, Column, HybridMethod)>,
    /// The detector's tokenizer (the hybrid re-weighting experiment reads it).
    tok: Tokenizer,
    /// The OSTC model's parameters (when OSTC or hybrid-ostc runs).
    ostc_params: Option<OstcParams>,
    /// The hybrid methods' parameters (when one of them runs).
    hybrid_params: Option<HybridEvalParams>,
    /// ℓ1-online's SRE: documents coded per timestep (0: all seen so far).
    sre_sample: usize,
    /// `--seed` (seeds ℓ1-online's SRE subsample).
    seed: u64,
}

impl Methods {
    /// The initial state of every method of `setup`; the batch baselines start at their
    /// bootstrap. Fails when the OSTC or hybrid parameters are invalid.
    pub fn new(args: &EvalArgs, setup: &Setup) -> Result<Self, EvalError> {
        let params = &setup.params;
        let has = |m: Method| setup.has(m);
        let online = if has(Method::L1Online) {
            Some(Model::new(params.clone())?)
        } else {
            None
        };
        let ostc_params = if has(Method::Ostc) || has(Method::HybridOstc) {
            Some(resolve_ostc_params(args)?)
        } else {
            None
        };
        let ostc = match &ostc_params {
            Some(p) if has(Method::Ostc) => Some(OstcModel::new(p.clone())?),
            _ => None,
        };
        let hybrid_params = if has(Method::Hybrid) || has(Method::HybridOstc) {
            Some(HybridEvalParams::new(args)?)
        } else {
            None
        };
        // the product's engines with the hybrid detector on the model's own parameters
        let mut hybrid_runs: Vec<(Column, Column, HybridMethod)> = Vec::new();
        for (m, col, base) in [
            (Method::Hybrid, Column::Hybrid, Column::L1Online),
            (Method::HybridOstc, Column::HybridOstc, Column::Ostc),
        ] {
            if let (true, Some(hp)) = (has(m), &hybrid_params) {
                let model = match m {
                    Method::Hybrid => ModelParams::L1(params.clone()),
                    _ => ModelParams::Ostc(ostc_params.clone().expect("OSTC parameters resolved")),
                };
                hybrid_runs.push((col, base, HybridMethod::new(hp, model)?));
            }
        }
        Ok(Methods {
            online,
            l1_batch: None,
            l2_batch: None,
            ostc,
            hybrid_runs,
            tok: params.tokenizer(),
            nn: has(Method::Nn).then(ExactNn::new),
            lsh: has(Method::Lsh).then(|| Lsh::new(setup.lsh_params.clone())),
            ostc_params,
            hybrid_params,
            sre_sample: args.sre_sample,
            seed: args.seed,
        })
    }

    /// Run every method of `setup` on one timestep, in the fixed order, and add the reference
    /// scores (mass on never-seen terms, document length). Every column gets one score per
    /// document; `pb` advances by one per method.
    pub fn step(
        &mut self,
        b: &StepBatch,
        setup: &Setup,
        pb: &ProgressBar,
    ) -> Result<StepScores, EvalError> {
        let mut out = StepScores::default();
        let boot = self.step_l1_online(b, setup, pb, &mut out)?;
        if setup.has(Method::L1Batch) {
            self.step_l1_batch(b, setup, boot, pb, &mut out)?;
        }
        if setup.has(Method::L2Batch) {
            self.step_l2_batch(b, setup, pb, &mut out);
        }
        self.step_nn(b, pb, &mut out);
        self.step_lsh(b, pb, &mut out);
        self.step_ostc(b, pb, &mut out)?;
        self.step_hybrid(b, setup, pb, &mut out)?;

        out.scores
            .insert(Column::UnseenMass, b.vb.unseen_mass.clone());
        out.scores.insert(
            Column::Length,
            b.vb.vectors.iter().map(|v| v.nnz() as f64).collect(),
        );
        out.cols.entry(Column::UnseenMass).or_default();
        out.cols.entry(Column::Length).or_default();
        Ok(out)
    }

    /// The parameters the run recorded for OSTC and the hybrid methods (None for those that
    /// did not run).
    pub fn into_params(self) -> (Option<OstcParams>, Option<HybridEvalParams>) {
        (self.ostc_params, self.hybrid_params)
    }
}
