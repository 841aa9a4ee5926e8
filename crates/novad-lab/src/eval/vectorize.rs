//! The shared vectorisation of the evaluation stream: every method sees, at timestep t, the
//! TF-IDF vectors the daemon computes at t — vocabulary and document frequencies of the
//! documents up to and including batch t, nothing later (no information from the future).
//!
//! This mirrors [`novad_models::Model::step`] exactly (same tokenizer, same [`Vocabulary::observe`]
//! call with the same timestep, same [`tfidf_l1`]); when ℓ1-online runs, the harness checks
//! that the vectors the engine produced are identical to these.

use std::time::Instant;

use novad_models::text::{
    tfidf_l1, SparseDoc, Tokenizer, TokenizerVersion, VocabChange, Vocabulary,
};
use novad_models::TextParams;

/// Vectorizer state: tokenizer and the streaming vocabulary.
pub struct StreamVectorizer {
    tok: Tokenizer,
    vocab: Vocabulary,
    timestep: u64,
}

/// One vectorised batch.
pub struct VectorizedBatch {
    /// Unit-ℓ1 TF-IDF vectors, ids valid in the vocabulary after this batch.
    pub vectors: Vec<SparseDoc>,
    /// How ids changed (apply to every term-indexed structure kept from earlier timesteps).
    pub change: VocabChange,
    /// Per document: TF-IDF mass on terms never seen before this batch (a reference score).
    pub unseen_mass: Vec<f64>,
    pub seconds: f64,
}

impl StreamVectorizer {
    /// A vectorizer with the tokenizer of `text` and `version` (a parameter set's
    /// `tokenizer`) and an empty vocabulary.
    pub fn new(text: &TextParams, version: Option<TokenizerVersion>) -> Self {
        StreamVectorizer {
            tok: text.tokenizer(version),
            vocab: Vocabulary::new(text.max_terms),
            timestep: 0,
        }
    }

    pub fn vocab(&self) -> &Vocabulary {
        &self.vocab
    }

    /// Observe one batch (one timestep) and vectorise it.
    pub fn step<S: AsRef<str>>(&mut self, texts: &[S]) -> VectorizedBatch {
        let t0 = Instant::now();
        let tokens: Vec<Vec<String>> = texts.iter().map(|t| self.tok.tokens(t.as_ref())).collect();
        let (counts, change) = self.vocab.observe(&tokens, self.timestep);
        self.timestep += 1;
        let vocab = &self.vocab;
        let vectors: Vec<SparseDoc> = counts
            .iter()
            .map(|c| tfidf_l1(c, |id| vocab.df(id), vocab.docs_seen()))
            .collect();
        // rows filled from an old row are terms seen before this batch
        let mut old = vec![false; change.remap.new_len];
        for r in 0..change.remap.old_len {
            if let Some(nr) = change.remap.get(r) {
                old[nr] = true;
            }
        }
        let unseen_mass = vectors
            .iter()
            .map(|v| {
                v.ids
                    .iter()
                    .zip(&v.vals)
                    .filter(|(&id, _)| !old[id as usize])
                    .map(|(_, &x)| x)
                    .sum()
            })
            .collect();
        VectorizedBatch {
            vectors,
            change,
            unseen_mass,
            seconds: t0.elapsed().as_secs_f64(),
        }
    }
}
