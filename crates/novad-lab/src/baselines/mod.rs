//! The baselines `novad eval` compares the online ℓ1 detector against: the NIPS 2012 paper's
//! batch learners and two nearest-neighbour detectors.
//!
//! - [`l1batch`]: ℓ1-batch (Algorithm 7): re-learn the dictionary on all data so far.
//! - [`l2batch`]: ℓ2-batch (Algorithm 8): non-negative sparse coding with squared loss.
//! - [`neighbours`]: exact nearest-neighbour cosine (UMass first-story detection) and LSH
//!   nearest neighbour (Petrović et al. 2010).

pub mod l1batch;
pub mod l2batch;
pub mod neighbours;

pub use l1batch::{BatchParams, L1Batch, LearnStats};
pub use l2batch::{code_l2, code_l2_batch, l2_a_step, L2Batch, L2Code, L2Dict, L2Params};
pub use neighbours::{ExactNn, Lsh, LshParams};

use novad_models::text::{SparseDoc, VocabChange};

/// Apply a vocabulary change to a stored vector: ids move, evicted terms are dropped (the
/// remaining ids stay sorted because compaction keeps the old order). Returns true when the
/// vector changed.
pub fn remap_doc(doc: &mut SparseDoc, change: &VocabChange) -> bool {
    if change.remap.map.is_none() {
        return false;
    }
    let mut ids = Vec::with_capacity(doc.ids.len());
    let mut vals = Vec::with_capacity(doc.vals.len());
    for (&id, &v) in doc.ids.iter().zip(&doc.vals) {
        if let Some(n) = change.remap.get(id as usize) {
            ids.push(n as u32);
            vals.push(v);
        }
    }
    doc.ids = ids;
    doc.vals = vals;
    true
}
