//! One timestep as every method sees it: the raw texts, the shared TF-IDF vectors and the
//! documents seen so far.

use super::super::protocol::Timestep;
use super::super::vectorize::{StreamVectorizer, VectorizedBatch};
use super::super::EvalError;
use crate::baselines::remap_doc;
use novad_models::text::{SparseDoc, Vocabulary};

/// One vectorised timestep, shared by every method.
pub(super) struct StepBatch<'a> {
    /// Index of the timestep (0: the bootstrap).
    pub t: usize,
    /// The timestep: its documents, labels and name.
    pub ts: &'a Timestep,
    /// The documents' raw texts, in stream order.
    pub texts: Vec<&'a str>,
    /// The TF-IDF vectors of `texts` (one per document, empty when no term is known).
    pub vb: VectorizedBatch,
    /// The vocabulary after this timestep.
    pub vocab: &'a Vocabulary,
    /// Per document: whether its vector has a known term.
    pub nonempty: Vec<bool>,
    /// The non-empty vectors of this timestep, in stream order.
    pub batch_ne: Vec<SparseDoc>,
    /// Every non-empty document up to and including this timestep, ids in the current
    /// vocabulary.
    pub seen: &'a [SparseDoc],
}

impl<'a> StepBatch<'a> {
    /// Vectorise timestep `t` with the stream's vectorizer, remap the documents seen so far to
    /// the new vocabulary and append this timestep's non-empty documents to them. Fails when
    /// the bootstrap timestep has no document with a known term.
    pub fn new(
        t: usize,
        ts: &'a Timestep,
        vz: &'a mut StreamVectorizer,
        seen: &'a mut Vec<SparseDoc>,
    ) -> Result<Self, EvalError> {
        let texts: Vec<&str> = ts.docs.iter().map(|d| d.text.as_str()).collect();
        let vb = vz.step(&texts);
        let vz: &'a StreamVectorizer = vz;
        if vb.change.remap.map.is_some() {
            for d in seen.iter_mut() {
                remap_doc(d, &vb.change);
            }
        }
        let nonempty: Vec<bool> = vb.vectors.iter().map(|v| !v.is_empty()).collect();
        let batch_ne: Vec<SparseDoc> = vb
            .vectors
            .iter()
            .filter(|v| !v.is_empty())
            .cloned()
            .collect();
        if t == 0 && batch_ne.is_empty() {
            return Err(EvalError::Protocol(
                "the bootstrap timestep has no document with a known term".into(),
            ));
        }
        seen.extend(batch_ne.iter().cloned());
        Ok(StepBatch {
            t,
            ts,
            texts,
            vb,
            vocab: vz.vocab(),
            nonempty,
            batch_ne,
            seen,
        })
    }

    /// Size of the vocabulary after this timestep.
    pub fn vocab_len(&self) -> usize {
        self.vocab.len()
    }
}
