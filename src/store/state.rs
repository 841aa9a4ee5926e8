//! The model state as store chunks (what [`super::Store::commit`] writes and diffs) and the
//! digest over them.

use novad_models::Engine;

use rayon::slice::ParallelSliceMut;

use super::schema::*;
use super::ChunkKey;

/// The digest of a set of state chunks given as (tree index, key, blake3 of the value).
pub fn state_digest_of<'a>(
    entries: impl Iterator<Item = (usize, &'a [u8], blake3::Hash)>,
) -> String {
    let mut all: Vec<(usize, &[u8], blake3::Hash)> = entries.collect();
    // (tree, key) is unique: an unstable (parallel) sort gives the one order
    all.par_sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    // the hashed bytes, laid out once and hashed in one call (the same bytes as one update
    // per field, so the same digest; many small updates are several times slower)
    let mut bytes = Vec::with_capacity(all.iter().map(|e| 40 + e.1.len()).sum());
    for (t, k, v) in all {
        bytes.extend_from_slice(&(t as u32).to_le_bytes());
        bytes.extend_from_slice(&(k.len() as u32).to_le_bytes());
        bytes.extend_from_slice(k);
        bytes.extend_from_slice(v.as_bytes());
    }
    blake3::hash(&bytes).to_hex().to_string()
}

/// A model's state chunks (the `parts` tree) and its summary in `meta/state`: the chunks of
/// `full` (the parts [`Engine::state_write`] gives in full).
pub(super) fn parts_state(
    engine: &Engine,
    full: &[(String, Vec<u8>)],
    atoms: u64,
    now: i64,
    state: &mut Vec<(ChunkKey, Vec<u8>)>,
) {
    // the summary `novad status` shows; the ℓ1 detector's bootstrap can be later than its
    // first timestep (a batch of only empty documents does not bootstrap)
    let l1 = engine.as_l1();
    let meta_state = StateMeta {
        timestep: engine.timestep(),
        bootstrapped: l1.map_or(engine.timestep() > 0, |m| m.is_bootstrapped()),
        terms: engine.vocab().len() as u64,
        atoms: l1.map_or(atoms, |m| m.dictionary().ncols() as u64),
        delta_cols: l1.map_or(0, |m| m.delta().ncols() as u64),
        docs_seen: engine.vocab().docs_seen(),
        max_terms: engine.vocab().max_terms() as u64,
        committed_at: now,
    };
    state.push((
        (0, KEY_STATE.to_vec()),
        postcard::to_stdvec(&meta_state).unwrap(),
    ));
    for (k, v) in part_chunks(full) {
        state.push(((PARTS_TREE, k), v));
    }
}

/// The chunk key of chunk `i` of part `name` (the layout of [`part_chunks`]).
pub(super) fn chunk_key(name: &str, i: u32) -> ChunkKey {
    (PARTS_TREE, part_chunk_key(name, i))
}
