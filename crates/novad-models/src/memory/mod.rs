//! A bounded memory of past documents and the hybrid novelty score built on it.
//!
//! - [`DocMemory`]: the unit-ℓ2 TF-IDF vectors of past documents, capped by a number of
//!   documents and by bytes, with exact nearest-neighbour cosine search through an inverted
//!   index over terms. Terms are keyed by a 64-bit hash of the term string, so the memory does
//!   not depend on any model's term ids (vocabulary compaction never rewrites it) and every
//!   model can use it. Cost per document is bounded by the caps, never by the stream length.
//! - [`Hybrid`]: a model's own score and the memory's nearest-neighbour score fused into one
//!   score in [0, 1]: on their own scale with the state's drift taken out and the threshold
//!   held in a band ([`Calibration`]), or, in stores created before that, each mapped to its
//!   quantile under its own decayed score history.
//!
//! Everything here is pure computation: no store, no I/O. State is exposed as named parts of at
//! most [`MAX_PART_BYTES`] bytes, laid out so that one timestep changes O(batch) parts.

mod calibrate;
mod hybrid;
mod nearest;
mod parts;
mod search;
mod share;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::model::{check, ParamsError};
use crate::text::SparseDoc;

pub use calibrate::{median, Calibration};
pub use hybrid::{
    cdf, Drift, Fusion, Hybrid, HybridDoc, HybridParams, HybridPlan, HybridStep, HybridVerdict,
};
pub use nearest::Floor;
pub use parts::{PartsDelta, DOC_PREFIX as DOC_PARTS_PREFIX, MAX_PART_BYTES};
pub use search::{DocMemory, MemoryPlan, Neighbour};
pub use share::{better_neighbour, memory_shard, Share};

/// Which stored document makes room when a cap is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Eviction {
    /// The oldest stored document first (a sliding window over the stream).
    Oldest,
    /// Reservoir sampling (Vitter's algorithm R): a uniform sample of everything offered.
    Reservoir,
}

impl std::str::FromStr for Eviction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "oldest" => Ok(Eviction::Oldest),
            "reservoir" => Ok(Eviction::Reservoir),
            _ => Err(format!("unknown eviction `{s}` (oldest, reservoir)")),
        }
    }
}

/// Caps and policy of a [`DocMemory`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryParams {
    /// Most documents kept. 1 ≤ max_docs ≤ 10 000 000.
    pub max_docs: usize,
    /// Most bytes of document vectors and index kept (see [`DocMemory::bytes`]). ≥ 1 MiB.
    pub max_bytes: u64,
    /// A stored document keeps its `max_terms_per_doc` heaviest terms (then re-normalised to
    /// unit ℓ2), so each document fits one part. 1..=[`MAX_TERMS_PER_DOC`].
    pub max_terms_per_doc: usize,
    pub eviction: Eviction,
    /// Seed of the reservoir's random choices.
    pub seed: u64,
}

/// The largest `max_terms_per_doc` whose document part still fits [`MAX_PART_BYTES`].
pub const MAX_TERMS_PER_DOC: usize = (MAX_PART_BYTES - parts::DOC_HEADER_BYTES) / 12;

impl Default for MemoryParams {
    fn default() -> Self {
        MemoryParams {
            max_docs: 100_000,
            max_bytes: 512 << 20,
            max_terms_per_doc: 256,
            eviction: Eviction::Oldest,
            seed: 0,
        }
    }
}

impl MemoryParams {
    /// Check every field; the error names the field (as `memory.<field>`) and its range.
    pub fn validate(&self) -> Result<(), ParamsError> {
        check(
            (1..=10_000_000).contains(&self.max_docs),
            "memory.max_docs",
            "an integer in 1..=10000000",
            self.max_docs.to_string(),
        )?;
        check(
            self.max_bytes >= 1 << 20,
            "memory.max_bytes",
            "an integer ≥ 1048576 (1 MiB)",
            self.max_bytes.to_string(),
        )?;
        check(
            (1..=MAX_TERMS_PER_DOC).contains(&self.max_terms_per_doc),
            "memory.max_terms_per_doc",
            "an integer in 1..=338",
            self.max_terms_per_doc.to_string(),
        )
    }
}

/// Where a remembered document came from: enough for a caller to find its verdict
/// (the store keys verdicts by time, timestep and position in the batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DocRef {
    pub timestep: u64,
    /// Position in its batch.
    pub seq: u32,
    /// Document time (the caller's unit, e.g. Unix milliseconds).
    pub time: i64,
}

/// A document as the memory sees it: term keys ([`term_key`]) strictly increasing, weights of
/// unit ℓ2 norm (or no entries for an empty document).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TermVector {
    pub keys: Vec<u64>,
    pub weights: Vec<f32>,
}

/// The memory's key of a term: 64-bit FNV-1a of its UTF-8 bytes. Stable across processes and
/// versions (never change it: stored documents are keyed by it).
pub fn term_key(term: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in term.as_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

impl TermVector {
    /// The unit-ℓ2 vector of a model's sparse document; `term(id)` gives the term string of a
    /// model term id. Zero or non-finite weights are dropped; an all-zero document gives an
    /// empty vector.
    pub fn from_sparse<'a>(doc: &SparseDoc, term: impl Fn(u32) -> &'a str) -> TermVector {
        TermVector::from_keyed(doc, |id| term_key(term(id)))
    }

    /// [`Self::from_sparse`] given each term id's key (`key(id) = term_key(term(id))`, e.g.
    /// [`crate::text::Vocabulary::key`]) instead of its string.
    pub fn from_keyed(doc: &SparseDoc, key: impl Fn(u32) -> u64) -> TermVector {
        let pairs: Vec<(u64, f64)> = doc
            .ids
            .iter()
            .zip(&doc.vals)
            .filter(|(_, v)| v.is_finite() && **v > 0.0)
            .map(|(&id, &v)| (key(id), v))
            .collect();
        TermVector::from_pairs(pairs)
    }

    /// A unit-ℓ2 vector from (key, weight) pairs; duplicate keys are summed, weights that are
    /// not finite and > 0 dropped.
    pub fn from_pairs(mut pairs: Vec<(u64, f64)>) -> TermVector {
        pairs.retain(|p| p.1.is_finite() && p.1 > 0.0);
        pairs.sort_unstable_by_key(|p| p.0);
        pairs.dedup_by(|b, a| {
            if a.0 == b.0 {
                a.1 += b.1;
                true
            } else {
                false
            }
        });
        let norm = pairs.iter().map(|p| p.1 * p.1).sum::<f64>().sqrt();
        if !(norm.is_finite() && norm > 0.0) {
            return TermVector::default();
        }
        TermVector {
            keys: pairs.iter().map(|p| p.0).collect(),
            weights: pairs.iter().map(|p| (p.1 / norm) as f32).collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The `cap` heaviest entries (ties: smaller key first), re-normalised to unit ℓ2.
    pub fn truncated(&self, cap: usize) -> TermVector {
        if self.len() <= cap {
            return self.clone();
        }
        let mut idx: Vec<usize> = (0..self.len()).collect();
        // the keys are distinct, so the order is total and the first `cap` are one set
        // however they are found: a selection (O(len)) instead of a sort; `from_pairs` puts
        // them in key order
        if cap > 0 {
            idx.select_nth_unstable_by(cap - 1, |&a, &b| {
                self.weights[b]
                    .total_cmp(&self.weights[a])
                    .then(self.keys[a].cmp(&self.keys[b]))
            });
        }
        idx.truncate(cap);
        TermVector::from_pairs(
            idx.iter()
                .map(|&i| (self.keys[i], self.weights[i] as f64))
                .collect(),
        )
    }
}

/// Why memory or hybrid state could not be rebuilt from its parts.
#[derive(Debug, Error, PartialEq)]
pub enum MemoryError {
    #[error(transparent)]
    Params(#[from] ParamsError),
    #[error("memory part `{part}`: {msg}")]
    Part { part: String, msg: String },
    #[error("memory state is missing part `{0}`")]
    Missing(String),
    #[error("memory state is inconsistent: {0}")]
    Inconsistent(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_unit_l2_sorted_and_truncation_keeps_the_heaviest() {
        let v = TermVector::from_pairs(vec![(9, 3.0), (2, 4.0), (5, 0.0), (2, 0.0), (7, f64::NAN)]);
        assert_eq!(v.keys, vec![2, 9]);
        let n: f32 = v.weights.iter().map(|w| w * w).sum();
        assert!((n - 1.0).abs() < 1e-6);
        let t = TermVector::from_pairs(vec![(1, 1.0), (2, 5.0), (3, 2.0)]).truncated(2);
        assert_eq!(t.keys, vec![2, 3]);
        let n: f32 = t.weights.iter().map(|w| w * w).sum();
        assert!((n - 1.0).abs() < 1e-6);
        assert!(TermVector::from_pairs(vec![(1, 0.0)]).is_empty());
    }

    /// The selection keeps what sorting every entry by weight (ties: smaller key) and taking
    /// the first `cap` keeps, on vectors with many tied weights.
    #[test]
    fn truncation_keeps_the_first_of_the_full_order() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for round in 0..200 {
            let len = rng.random_range(1..60);
            let pairs: Vec<(u64, f64)> = (0..len)
                .map(|_| (rng.random_range(0..500u64), rng.random_range(1..6) as f64))
                .collect();
            let v = TermVector::from_pairs(pairs);
            let cap = rng.random_range(0..len + 2);
            let mut order: Vec<usize> = (0..v.len()).collect();
            order.sort_by(|&a, &b| {
                v.weights[b]
                    .total_cmp(&v.weights[a])
                    .then(v.keys[a].cmp(&v.keys[b]))
            });
            order.truncate(cap);
            let want = TermVector::from_pairs(
                order
                    .iter()
                    .map(|&i| (v.keys[i], v.weights[i] as f64))
                    .collect(),
            );
            assert_eq!(v.truncated(cap), want, "round {round}, cap {cap}");
        }
    }

    #[test]
    fn term_keys_follow_the_string_not_the_id() {
        let d = SparseDoc {
            ids: vec![0, 1],
            vals: vec![0.5, 0.5],
        };
        let a = TermVector::from_sparse(&d, |id| ["lava", "ash"][id as usize]);
        let b = TermVector::from_sparse(&d, |id| ["ash", "lava"][id as usize]);
        assert_eq!(a, b);
        assert_ne!(term_key("lava"), term_key("ash"));
    }

    #[test]
    fn params_checks_name_the_field() {
        MemoryParams::default().validate().unwrap();
        let p = MemoryParams {
            max_terms_per_doc: MAX_TERMS_PER_DOC + 1,
            ..Default::default()
        };
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("memory.max_terms_per_doc"), "{e}");
        assert_eq!(MAX_TERMS_PER_DOC, 338);
    }
}
