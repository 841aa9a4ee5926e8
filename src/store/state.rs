//! The model state as store chunks (what [`super::Store::commit`] writes and diffs) and the
//! digest over them.

use novad_models::Model;
use novad_models::PartsModel;

use super::schema::*;
use super::ChunkKey;

/// The digest of a set of state chunks given as (tree index, key, blake3 of the value).
pub fn state_digest_of<'a>(
    entries: impl Iterator<Item = (usize, &'a [u8], blake3::Hash)>,
) -> String {
    let mut all: Vec<(usize, &[u8], blake3::Hash)> = entries.collect();
    all.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut h = blake3::Hasher::new();
    for (t, k, v) in all {
        h.update(&(t as u32).to_le_bytes());
        h.update(&(k.len() as u32).to_le_bytes());
        h.update(k);
        h.update(v.as_bytes());
    }
    h.finalize().to_hex().to_string()
}

/// The ℓ1 model's state chunks (vocabulary, Â, Δ trees and its meta keys).
pub(super) fn l1_state(model: &Model, now: i64, state: &mut Vec<(ChunkKey, Vec<u8>)>) {
    let meta_state = StateMeta {
        timestep: model.timestep(),
        bootstrapped: model.is_bootstrapped(),
        terms: model.vocab().len() as u64,
        atoms: model.dictionary().ncols() as u64,
        delta_cols: model.delta().ncols() as u64,
        docs_seen: model.vocab().docs_seen(),
        max_terms: model.vocab().max_terms() as u64,
        committed_at: now,
    };
    state.push((
        (0, KEY_STATE.to_vec()),
        postcard::to_stdvec(&meta_state).unwrap(),
    ));
    state.push((
        (0, KEY_HISTORY.to_vec()),
        postcard::to_stdvec(model.history()).unwrap(),
    ));
    state.push((
        (0, KEY_ATOM_AGE.to_vec()),
        postcard::to_stdvec(model.atom_last_used()).unwrap(),
    ));
    let entries: Vec<(&str, u64, u64)> = model.vocab().entries().collect();
    for (c, chunk) in entries.chunks(VOCAB_CHUNK).enumerate() {
        let v: Vec<TermEntry> = chunk
            .iter()
            .map(|&(t, d, l)| TermEntry {
                term: t.to_string(),
                df: d,
                last_seen: l,
            })
            .collect();
        state.push((
            (1, u32_key(c as u32).to_vec()),
            postcard::to_stdvec(&v).unwrap(),
        ));
    }
    for (c, bytes) in dict_chunks(model.dictionary()) {
        state.push(((2, u32_key(c).to_vec()), bytes));
    }
    for (c, bytes) in delta_chunks(model.delta()) {
        state.push(((3, u32_key(c).to_vec()), bytes));
    }
}

/// A [`PartsModel`]'s state chunks (the `parts` tree and `meta/state`).
pub(super) fn parts_state<M: PartsModel>(
    model: &M,
    atoms: u64,
    now: i64,
    state: &mut Vec<(ChunkKey, Vec<u8>)>,
) {
    let meta_state = StateMeta {
        timestep: model.timestep(),
        bootstrapped: model.timestep() > 0,
        terms: model.vocab().len() as u64,
        atoms,
        delta_cols: 0,
        docs_seen: model.vocab().docs_seen(),
        max_terms: model.vocab().max_terms() as u64,
        committed_at: now,
    };
    state.push((
        (0, KEY_STATE.to_vec()),
        postcard::to_stdvec(&meta_state).unwrap(),
    ));
    for (k, v) in part_chunks(&model.state_parts()) {
        state.push(((PARTS_TREE, k), v));
    }
}
