//! The nearest-neighbour methods: exact cosine NN (UMass first-story detection) and LSH
//! (Petrović et al. 2010), both against the documents of earlier timesteps only.

use std::time::Instant;

use indicatif::ProgressBar;

use super::super::super::results::{Column, ColumnResult};
use super::super::batch::StepBatch;
use super::super::secs;
use super::{Methods, StepScores};

impl Methods {
    /// NN's timestep, when it runs: score the batch against every earlier document, then add
    /// the batch's non-empty documents to the index.
    pub(super) fn step_nn(&mut self, b: &StepBatch, pb: &ProgressBar, out: &mut StepScores) {
        let Some(index) = self.nn.as_mut() else {
            return;
        };
        pb.set_message(format!("{}: NN", b.ts.name));
        index.remap(&b.vb.change);
        let t0 = Instant::now();
        let s = index.score(&b.vb.vectors);
        index.insert(&b.batch_ne, b.vocab_len());
        out.cols.insert(
            Column::Nn,
            ColumnResult {
                seconds: Some(secs(t0)),
                ..Default::default()
            },
        );
        out.scores.insert(Column::Nn, s);
        pb.inc(1);
    }

    /// LSH's timestep, when it runs: score the batch against the earlier documents sharing a
    /// bucket (and the most recent ones), then add the batch's non-empty documents. Records
    /// the number of comparisons.
    pub(super) fn step_lsh(&mut self, b: &StepBatch, pb: &ProgressBar, out: &mut StepScores) {
        let Some(index) = self.lsh.as_mut() else {
            return;
        };
        pb.set_message(format!("{}: LSH", b.ts.name));
        let t0 = Instant::now();
        index.remap(&b.vb.change, b.vocab);
        let (s, comps) = index.score(&b.vb.vectors);
        index.insert(&b.batch_ne, b.vocab);
        out.cols.insert(
            Column::Lsh,
            ColumnResult {
                seconds: Some(secs(t0)),
                comparisons: Some(comps),
                ..Default::default()
            },
        );
        out.scores.insert(Column::Lsh, s);
        pb.inc(1);
    }
}
