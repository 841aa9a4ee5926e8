//! The daemon's other engines run as they are: OSTC (`OstcModel::step` on the raw texts) and
//! the hybrid detectors (the model's score fused with the bounded document memory).

use std::time::Instant;

use indicatif::ProgressBar;

use super::super::super::hybrid::HybridInput;
use super::super::super::results::{Column, ColumnResult};
use super::super::super::EvalError;
use super::super::batch::StepBatch;
use super::super::secs;
use super::super::setup::Setup;
use super::{Methods, StepScores};

impl Methods {
    /// OSTC's timestep, when it runs: the daemon's own step on the raw texts (its tokenizer,
    /// vocabulary and threshold), its verdict scores. Fails when it does not bootstrap on the
    /// first timestep.
    pub(super) fn step_ostc(
        &mut self,
        b: &StepBatch,
        pb: &ProgressBar,
        out: &mut StepScores,
    ) -> Result<(), EvalError> {
        let Some(model) = self.ostc.take() else {
            return Ok(());
        };
        pb.set_message(format!("{}: OSTC", b.ts.name));
        let (next, step) = model.step(&b.texts)?;
        if b.t == 0 && !step.stats.bootstrap {
            return Err(EvalError::Inconsistent(
                "OSTC did not bootstrap on the first timestep".into(),
            ));
        }
        out.cols.insert(
            Column::Ostc,
            ColumnResult {
                seconds: Some(step.stats.seconds_coding + step.stats.seconds_update),
                k: Some(next.params().k),
                ..Default::default()
            },
        );
        out.scores.insert(
            Column::Ostc,
            step.verdicts.iter().map(|v| v.score).collect(),
        );
        self.ostc = Some(next);
        pb.inc(1);
        Ok(())
    }

    /// Every hybrid method's timestep, in column order: its fused scores (the re-weighting
    /// experiment reads the base model's scores of this timestep) and the seconds of its
    /// whole step.
    pub(super) fn step_hybrid(
        &mut self,
        b: &StepBatch,
        setup: &Setup,
        pb: &ProgressBar,
        out: &mut StepScores,
    ) -> Result<(), EvalError> {
        for (col, base, run) in self.hybrid_runs.iter_mut() {
            pb.set_message(format!("{}: {}", b.ts.name, col.title()));
            let t0 = Instant::now();
            let none = Vec::new();
            let s = run.step(&HybridInput {
                t: b.t,
                texts: &b.texts,
                vectors: &b.vb.vectors,
                vocab: b.vocab,
                model_scores: out.scores.get(base).unwrap_or(&none),
                rule: &setup.params.threshold,
                tok: &self.tok,
            })?;
            out.cols.insert(
                *col,
                ColumnResult {
                    seconds: Some(secs(t0)),
                    ..Default::default()
                },
            );
            out.scores.insert(*col, s.scores);
            out.verdicts.insert(*col, s.novel);
            if *col == Column::Hybrid {
                out.events = s.topics;
            }
            if let (Column::Hybrid, Some((model, nn))) = (*col, s.parts) {
                for (c, v) in [(Column::HybridModel, model), (Column::HybridNn, nn)] {
                    out.scores.insert(c, v);
                    out.cols.entry(c).or_default();
                }
            }
            pb.inc(1);
        }
        Ok(())
    }
}
