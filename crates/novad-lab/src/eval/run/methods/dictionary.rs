//! The dictionary methods: ℓ1-online (the daemon's `Model::step`), ℓ1-batch (Algorithm 7) and
//! ℓ2-batch (Algorithm 8), with the sparse reconstruction error (SRE) of their dictionaries.

use std::time::Instant;

use indicatif::ProgressBar;
use ndarray::Array2;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::super::super::results::{Column, ColumnResult};
use super::super::super::topics::DaemonTopicCost;
use super::super::super::EvalError;
use super::super::batch::StepBatch;
use super::super::secs;
use super::super::setup::Setup;
use super::{Methods, StepScores};
use crate::baselines::l1batch::{mean, L1Batch, LearnStats};
use crate::baselines::l2batch::L2Batch;
use novad_models::l1::coding::{code_batch, CodingDict};
use novad_models::l1::dictionary::{bootstrap, Dictionary};
use novad_models::model::Code;
use novad_models::text::SparseDoc;
use novad_models::Params;

/// The bootstrap dictionary and the codes of the bootstrap's non-empty documents over it,
/// with the seconds they took: ℓ1-online's bootstrap, which ℓ1-batch reuses.
pub(super) struct BootDictionary {
    dict: Array2<f32>,
    codes: Vec<Code>,
    seconds: f64,
}

impl Methods {
    /// ℓ1-online's timestep, when it runs: the daemon's own step on the raw texts, checked to
    /// vectorise exactly as the shared vectorizer. At the bootstrap, returns its dictionary
    /// and codes for ℓ1-batch; later, records the daemon's topic-stage cost.
    pub(super) fn step_l1_online(
        &mut self,
        b: &StepBatch,
        setup: &Setup,
        pb: &ProgressBar,
        out: &mut StepScores,
    ) -> Result<Option<BootDictionary>, EvalError> {
        let Some(model) = self.online.take() else {
            return Ok(None);
        };
        let t = b.t;
        pb.set_message(format!("{}: ℓ1-online", b.ts.name));
        let (next, step) = model.step(&b.texts)?;
        if step.vectors != b.vb.vectors {
            return Err(EvalError::Inconsistent(format!(
                "timestep {t}: the engine's TF-IDF vectors differ from the harness's"
            )));
        }
        let s = step.stats.seconds_coding + step.stats.seconds_update;
        out.verdicts.insert(
            Column::L1Online,
            step.verdicts.iter().map(|v| v.novel).collect(),
        );
        if t > 0 {
            out.daemon_cost = Some(DaemonTopicCost {
                novel: step.verdicts.iter().filter(|v| v.novel).count(),
                topics: step.topics.len(),
                seconds_topics: step.stats.seconds_topics,
                seconds_rest: step.stats.seconds_vectorize + s,
            });
        }
        let mut r = ColumnResult {
            seconds: Some(s),
            ceiling_fraction: Some(step.stats.ceiling_fraction),
            k: Some(setup.params.k),
            ..Default::default()
        };
        let mut boot = None;
        if t == 0 {
            if !step.stats.bootstrap {
                return Err(EvalError::Inconsistent(
                    "the engine did not bootstrap on the first timestep".into(),
                ));
            }
            let codes: Vec<Code> = nonempty_codes(&step.codes, &b.nonempty);
            r.sre = Some(mean(codes.iter().map(|c| c.score)));
            r.sre_docs = Some(codes.len());
            boot = Some(BootDictionary {
                dict: next.dictionary().to_dense(),
                codes,
                seconds: s,
            });
        } else {
            let idx = subsample(b.seen.len(), self.sre_sample, self.seed ^ (t as u64 + 1));
            r.sre = Some(sre(next.dictionary(), b.seen, &idx, &setup.params));
            r.sre_docs = Some(idx.len());
        }
        out.scores.insert(
            Column::L1Online,
            step.verdicts.iter().map(|v| v.score).collect(),
        );
        out.cols.insert(Column::L1Online, r);
        self.online = Some(next);
        pb.inc(1);
        Ok(boot)
    }

    /// ℓ1-batch's timestep: at the bootstrap, ℓ1-online's dictionary and codes when it ran
    /// (else the same bootstrap computed here); later, detection over the current dictionary
    /// and re-learning on every document seen so far. Fails when an A-step would exceed
    /// `--batch-max-gib`.
    pub(super) fn step_l1_batch(
        &mut self,
        b: &StepBatch,
        setup: &Setup,
        boot: Option<BootDictionary>,
        pb: &ProgressBar,
        out: &mut StepScores,
    ) -> Result<(), EvalError> {
        pb.set_message(format!("{}: ℓ1-batch", b.ts.name));
        let r = if b.t == 0 {
            let boot = boot.unwrap_or_else(|| l1_bootstrap(b, &setup.params));
            let v = mean(boot.codes.iter().map(|c| c.score));
            let r = ColumnResult {
                sre: Some(v),
                objective: Some(v),
                sre_docs: Some(boot.codes.len()),
                seconds: Some(boot.seconds),
                k: Some(setup.params.k),
                ceiling_fraction: Some(ceiling_share(&boot.codes)),
                ..Default::default()
            };
            out.scores.insert(
                Column::L1Batch,
                expand(&b.nonempty, boot.codes.iter().map(|c| c.score)),
            );
            self.l1_batch = Some(L1Batch::new(
                boot.dict,
                boot.codes,
                &setup.params.coding,
                setup.batch_params.clone(),
                setup.params.seed,
            ));
            r
        } else {
            let batch = self.l1_batch.as_mut().expect("ℓ1-batch bootstrapped");
            batch.remap(&b.vb.change);
            let t0 = Instant::now();
            let k = batch.k();
            let codes = batch.detect(&b.vb.vectors);
            let ne_codes = nonempty_codes(&codes, &b.nonempty);
            let ceiling_fraction = ceiling_share(&ne_codes);
            let st: LearnStats = batch
                .learn(b.seen, ne_codes, b.t as u64)
                .map_err(EvalError::Resources)?;
            let seconds = secs(t0);
            out.scores
                .insert(Column::L1Batch, codes.iter().map(|c| c.score).collect());
            ColumnResult {
                seconds: Some(seconds),
                k: Some(k),
                ceiling_fraction: Some(ceiling_fraction),
                sre: Some(st.objective),
                objective: Some(st.objective),
                sre_docs: Some(st.docs),
                alternations: Some(st.alternations),
                ..Default::default()
            }
        };
        out.cols.insert(Column::L1Batch, r);
        pb.inc(1);
        Ok(())
    }

    /// ℓ2-batch's timestep: at the bootstrap, its own dictionary learnt on the bootstrap's
    /// non-empty documents; later, detection over the current dictionary and re-learning on
    /// every document seen so far. Gives the ℓ2-batch column (objective) and the ℓ2 relative
    /// residual column.
    pub(super) fn step_l2_batch(
        &mut self,
        b: &StepBatch,
        setup: &Setup,
        pb: &ProgressBar,
        out: &mut StepScores,
    ) {
        pb.set_message(format!("{}: ℓ2-batch", b.ts.name));
        let mut r = ColumnResult::default();
        let codes = if b.t == 0 {
            let params = &setup.params;
            let t0 = Instant::now();
            let (batch, st) = L2Batch::bootstrap(
                &b.batch_ne,
                b.vocab_len(),
                params.k,
                setup.l2_params.clone(),
                setup.l2_batch_params.clone(),
                params.seed,
            );
            r.seconds = Some(secs(t0));
            r.objective = Some(st.objective);
            r.k = Some(params.k);
            r.alternations = Some(st.alternations);
            r.ceiling_fraction = Some(1.0 - st.coded_docs as f64 / st.docs.max(1) as f64);
            let codes = batch.detect(&b.vb.vectors);
            self.l2_batch = Some(batch);
            codes
        } else {
            let batch = self.l2_batch.as_mut().expect("ℓ2-batch bootstrapped");
            batch.remap(&b.vb.change);
            let t0 = Instant::now();
            r.k = Some(batch.k());
            let codes = batch.detect(&b.vb.vectors);
            let ne_codes = nonempty_codes(&codes, &b.nonempty);
            r.ceiling_fraction = Some(
                ne_codes.iter().filter(|c| c.atoms.is_empty()).count() as f64
                    / ne_codes.len().max(1) as f64,
            );
            let st = batch.learn(b.seen, ne_codes, b.t as u64);
            r.seconds = Some(secs(t0));
            r.objective = Some(st.objective);
            r.alternations = Some(st.alternations);
            codes
        };
        out.scores
            .insert(Column::L2Batch, codes.iter().map(|c| c.objective).collect());
        out.scores.insert(
            Column::L2Residual,
            codes.iter().map(|c| c.rel_residual).collect(),
        );
        let rr = ColumnResult {
            ceiling_fraction: r.ceiling_fraction,
            ..Default::default()
        };
        out.cols.insert(Column::L2Batch, r);
        out.cols.insert(Column::L2Residual, rr);
        pb.inc(1);
    }
}

/// ℓ1-online's bootstrap computed for ℓ1-batch alone: the detector's bootstrap dictionary on
/// the first batch and the codes of its non-empty documents, timed together.
fn l1_bootstrap(b: &StepBatch, params: &Params) -> BootDictionary {
    let t0 = Instant::now();
    let dict = bootstrap(
        &b.vb.vectors,
        b.vocab_len(),
        params.k,
        &params.coding,
        &params.bootstrap,
        params.seed,
    );
    let cd = CodingDict::from_dense(dict.view(), params.coding.step);
    let codes = code_batch(&cd, &b.batch_ne, &params.coding);
    let seconds = secs(t0);
    BootDictionary {
        dict,
        codes,
        seconds,
    }
}

/// The codes of the non-empty documents, in order.
fn nonempty_codes<C: Clone>(codes: &[C], nonempty: &[bool]) -> Vec<C> {
    codes
        .iter()
        .zip(nonempty)
        .filter(|(_, &e)| e)
        .map(|(c, _)| c.clone())
        .collect()
}

/// Share of `codes` at the score ceiling (0 for none).
fn ceiling_share(codes: &[Code]) -> f64 {
    codes.iter().filter(|c| c.at_ceiling()).count() as f64 / codes.len().max(1) as f64
}

/// Scores of the non-empty documents spread back over the whole batch (empty documents: 0).
fn expand(nonempty: &[bool], vals: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut it = vals;
    nonempty
        .iter()
        .map(|&e| if e { it.next().unwrap_or(0.0) } else { 0.0 })
        .collect()
}

/// Indices of a seeded subsample of `n` items (all when `cap` is 0 or ≥ n), increasing.
fn subsample(n: usize, cap: usize, seed: u64) -> Vec<usize> {
    if cap == 0 || cap >= n {
        return (0..n).collect();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v = sample(&mut rng, n, cap).into_vec();
    v.sort_unstable();
    v
}

/// Mean ℓ1 score l(p, A) over `docs[idx]`.
fn sre(dict: &Dictionary, docs: &[SparseDoc], idx: &[usize], params: &Params) -> f64 {
    let mut coding = params.coding.clone();
    coding.residual_terms = 0;
    let cd = CodingDict::new(dict, coding.step);
    let pick: Vec<SparseDoc> = idx.iter().map(|&i| docs[i].clone()).collect();
    mean(code_batch(&cd, &pick, &coding).iter().map(|c| c.score))
}
