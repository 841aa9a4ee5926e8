//! The hybrid methods of `novad eval`: a model's own verdict scores fused with the bounded
//! document memory ([`novad_models::memory::Hybrid`]), computed exactly as a daemon would — label-free,
//! streaming, one timestep at a time, each document scored against the state at the end of
//! the previous timestep, then the plan applied.

use serde::Serialize;

use novad_models::memory::{
    DocMemory, DocRef, Eviction, Fusion, Hybrid, HybridDoc, HybridParams, MemoryParams, TermVector,
};
use novad_models::text::{tfidf_l1, SparseDoc, Tokenizer, Vocabulary};
use novad_models::threshold::ThresholdRule;

use super::EvalError;

/// Settings of the hybrid methods (from the eval arguments).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HybridEvalParams {
    pub hybrid: HybridParams,
    /// Re-weight every remembered document with the current IDF before each timestep (an
    /// experiment on IDF drift; the daemon stores each vector with the IDF of its time).
    pub reweight: bool,
}

impl HybridEvalParams {
    pub fn new(
        fusion: Fusion,
        nn_weight: f64,
        max_docs: usize,
        eviction: Eviction,
        max_terms_per_doc: usize,
        half_life: f64,
        reweight: bool,
    ) -> Result<Self, EvalError> {
        let hybrid = HybridParams {
            memory: MemoryParams {
                max_docs,
                eviction,
                max_terms_per_doc,
                ..MemoryParams::default()
            },
            fusion,
            nn_weight,
            half_life,
        };
        hybrid
            .validate()
            .map_err(|e| EvalError::Args(e.to_string()))?;
        Ok(HybridEvalParams { hybrid, reweight })
    }
}

/// One hybrid method's streaming state.
pub struct HybridRun {
    hybrid: Hybrid,
    reweight: bool,
    /// With `reweight`: every non-empty document's tokens, in arrival order.
    past: Vec<(DocRef, Vec<String>)>,
}

impl HybridRun {
    pub fn new(p: &HybridEvalParams) -> Result<Self, EvalError> {
        Ok(HybridRun {
            hybrid: Hybrid::new(p.hybrid.clone()).map_err(|e| EvalError::Args(e.to_string()))?,
            reweight: p.reweight,
            past: Vec::new(),
        })
    }

    /// Score timestep `t` (fused scores, one per document; empty documents 0) and fold it into
    /// the state. `vectors` are the model's TF-IDF vectors in `vocab`'s ids, `model_scores` its
    /// verdict scores; `texts`/`tok` are only used with `reweight`.
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &mut self,
        t: usize,
        vectors: &[SparseDoc],
        vocab: &Vocabulary,
        model_scores: &[f64],
        rule: &ThresholdRule,
        bootstrap: bool,
        texts: &[&str],
        tok: &Tokenizer,
    ) -> Result<Vec<f64>, EvalError> {
        let tv: Vec<TermVector> = vectors
            .iter()
            .map(|v| TermVector::from_sparse(v, |id| vocab.term(id)))
            .collect();
        let refs: Vec<DocRef> = (0..vectors.len())
            .map(|i| DocRef {
                timestep: t as u64,
                seq: i as u32,
                time: t as i64,
            })
            .collect();
        if self.reweight {
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
            for (i, text) in texts.iter().enumerate() {
                if !vectors[i].is_empty() {
                    self.past.push((refs[i], tok.tokens(text)));
                }
            }
        }
        let docs: Vec<HybridDoc> = tv
            .iter()
            .zip(&refs)
            .zip(model_scores)
            .map(|((v, r), &s)| HybridDoc {
                reference: *r,
                vector: v,
                model_score: s,
            })
            .collect();
        let out = self
            .hybrid
            .step(&docs, rule, bootstrap)
            .map_err(|e| EvalError::Inconsistent(e.to_string()))?;
        self.hybrid.apply(out.plan);
        Ok(out.verdicts.iter().map(|v| v.score).collect())
    }
}
