//! The persisted state of [`DnmfModel`] as named parts (postcard), and its checked rebuild.
//!
//! Parts: `meta` (timestep, next topic id, the window's timesteps), `vocab`, `topics`,
//! `weights` (W of the window, f32) and one `docs-<timestep>` per window timestep.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::model::decode_part;

use super::model::{DnmfModel, TopicState, WindowStep};
use super::params::DnmfParams;
use crate::model::EngineError;
use crate::text::Vocabulary;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Meta {
    timestep: u64,
    next_id: u32,
    window: Vec<u64>,
}

/// W of the window: per window timestep, its documents' weights (row-major, `k` columns).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Weights {
    k: usize,
    steps: Vec<Vec<f32>>,
}

const PART_META: &str = "meta";
const PART_VOCAB: &str = "vocab";
const PART_TOPICS: &str = "topics";
const PART_WEIGHTS: &str = "weights";
const PART_DOCS: &str = "docs-";

impl DnmfModel {
    /// The persisted state as named parts (postcard): `meta`, `vocab`, `topics`, `weights`, and
    /// one `docs-<timestep>` per window timestep (unchanged between steps unless the
    /// vocabulary evicted terms, so it encodes to identical bytes).
    pub fn state_parts(&self) -> Vec<(String, Vec<u8>)> {
        use crate::model::part_bytes as enc;
        let meta = Meta {
            timestep: self.timestep,
            next_id: self.next_id,
            window: self.window.iter().map(|w| w.timestep).collect(),
        };
        let weights = Weights {
            k: self.topics.len(),
            steps: self.weights.clone(),
        };
        let mut parts = vec![
            (PART_META.to_string(), enc(&meta)),
            (PART_VOCAB.to_string(), enc(&self.vocab)),
            (PART_TOPICS.to_string(), enc(&self.topics)),
            (PART_WEIGHTS.to_string(), enc(&weights)),
        ];
        for w in &self.window {
            parts.push((docs_part(w.timestep), enc(&w.docs)));
        }
        parts
    }

    /// Rebuild from [`DnmfModel::state_parts`], checking every invariant: window bound and
    /// order, term ids inside the vocabulary, positive counts, W dimensions and values
    /// (finite, ≥ 0), topic rows (ids ascending and in range, finite values > 0 summing to 1
    /// within 1e-3), unique topic ids below the next id, K within `max_topics`.
    pub fn from_state_parts(
        params: DnmfParams,
        parts: &BTreeMap<String, Vec<u8>>,
    ) -> Result<DnmfModel, EngineError> {
        params.validate()?;
        let meta: Meta = decode_part(parts, PART_META)?;
        let vocab: Vocabulary = decode_part(parts, PART_VOCAB)?;
        let topics: Vec<TopicState> = decode_part(parts, PART_TOPICS)?;
        let weights: Weights = decode_part(parts, PART_WEIGHTS)?;
        check_bounds(&meta, &vocab, &params, parts)?;
        let window = read_window(&meta, parts, vocab.len())?;
        let k = topics.len();
        if k > params.max_topics {
            return bad(format!("{k} topics, max_topics = {}", params.max_topics));
        }
        check_weights(&weights, &window, k)?;
        check_topics(&topics, &meta, vocab.len())?;
        Ok(DnmfModel {
            params,
            vocab,
            timestep: meta.timestep,
            next_id: meta.next_id,
            window,
            weights: weights.steps,
            topics,
        })
    }
}

/// An inconsistent-state error with message `m`.
fn bad<T>(m: String) -> Result<T, EngineError> {
    Err(EngineError::Inconsistent(m))
}

/// Checks, in this order, that the vocabulary is within its bound, that the window holds at
/// most ω timesteps, increasing and below the model's timestep, and that every `docs-` part
/// belongs to a window timestep.
fn check_bounds(
    meta: &Meta,
    vocab: &Vocabulary,
    params: &DnmfParams,
    parts: &BTreeMap<String, Vec<u8>>,
) -> Result<(), EngineError> {
    let m = vocab.len();
    if m > vocab.max_terms() {
        return bad(format!(
            "vocabulary holds {m} terms, bound {}",
            vocab.max_terms()
        ));
    }
    if meta.window.len() > params.window {
        return bad(format!(
            "window holds {} timesteps, ω = {}",
            meta.window.len(),
            params.window
        ));
    }
    if meta.window.windows(2).any(|p| p[0] >= p[1])
        || meta.window.last().is_some_and(|&t| t >= meta.timestep)
    {
        return bad(format!(
            "window timesteps {:?} not increasing below {}",
            meta.window, meta.timestep
        ));
    }
    let expected: Vec<String> = meta.window.iter().map(|&t| docs_part(t)).collect();
    for name in parts.keys().filter(|n| n.starts_with(PART_DOCS)) {
        if !expected.contains(name) {
            return bad(format!(
                "part `{name}` is not in the window {:?}",
                meta.window
            ));
        }
    }
    Ok(())
}

/// The window's documents, oldest timestep first, decoded from their `docs-` parts; every
/// document sorted by term id, with positive counts and ids below `m` (an empty document is
/// valid: vocabulary eviction may have taken all its terms).
fn read_window(
    meta: &Meta,
    parts: &BTreeMap<String, Vec<u8>>,
    m: usize,
) -> Result<VecDeque<WindowStep>, EngineError> {
    let mut window = VecDeque::new();
    for &t in &meta.window {
        let name = docs_part(t);
        let docs: Vec<Vec<(u32, u32)>> = decode_part(parts, &name)?;
        for (i, doc) in docs.iter().enumerate() {
            if doc.iter().any(|&(id, c)| id as usize >= m || c == 0)
                || doc.windows(2).any(|p| p[0].0 >= p[1].0)
            {
                return bad(format!("part `{name}`: document {i} has an unsorted, zero-count or out-of-vocabulary entry"));
            }
        }
        window.push_back(WindowStep { timestep: t, docs });
    }
    Ok(window)
}

/// Checks that W is for `k` topics and the window's timesteps, with one row per window
/// document, and that its values are finite and ≥ 0.
fn check_weights(
    weights: &Weights,
    window: &VecDeque<WindowStep>,
    k: usize,
) -> Result<(), EngineError> {
    if weights.k != k || weights.steps.len() != window.len() {
        return bad(format!(
            "weights are for {} topics × {} timesteps, state has {k} × {}",
            weights.k,
            weights.steps.len(),
            window.len()
        ));
    }
    for (s, (ws, w)) in weights.steps.iter().zip(window).enumerate() {
        if ws.len() != w.docs.len() * k {
            return bad(format!(
                "weights of window step {s}: {} values for {} documents × {k} topics",
                ws.len(),
                w.docs.len()
            ));
        }
        if ws.iter().any(|v| !v.is_finite()) {
            return Err(EngineError::NonFinite("topic weights W"));
        }
        if ws.iter().any(|&v| v < 0.0) {
            return bad(format!("weights of window step {s} are negative"));
        }
    }
    Ok(())
}

/// Checks every topic: id unique and below the next id, word distribution finite, ids
/// ascending and below `m`, values > 0 summing to 1 within 1e-3, born and last active no
/// later than the model's timestep.
fn check_topics(topics: &[TopicState], meta: &Meta, m: usize) -> Result<(), EngineError> {
    let mut ids = std::collections::HashSet::new();
    for t in topics {
        if !ids.insert(t.id) || t.id >= meta.next_id {
            return bad(format!(
                "topic id {} repeated or ≥ next id {}",
                t.id, meta.next_id
            ));
        }
        if t.row.iter().any(|&(_, v)| !v.is_finite()) {
            return Err(EngineError::NonFinite("topic word distribution H"));
        }
        if t.row.iter().any(|&(id, v)| id as usize >= m || v <= 0.0)
            || t.row.windows(2).any(|p| p[0].0 >= p[1].0)
        {
            return bad(format!(
                "topic {}: term ids out of order or range, or a value ≤ 0",
                t.id
            ));
        }
        let s: f64 = t.row.iter().map(|&(_, v)| v as f64).sum();
        if (s - 1.0).abs() > 1e-3 {
            return bad(format!("topic {} is off the simplex (sum {s})", t.id));
        }
        if t.born > meta.timestep || t.last_active > meta.timestep {
            return bad(format!(
                "topic {} born or active after timestep {}",
                t.id, meta.timestep
            ));
        }
    }
    Ok(())
}

fn docs_part(t: u64) -> String {
    format!("{PART_DOCS}{t:020}")
}
