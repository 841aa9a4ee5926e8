//! Format 5 → 6: one store layout for every model, and self-describing parameters.
//!
//! - The ℓ1 detector's state moves from its own trees (`vocab`, `dict`, `delta`, and
//!   `meta/history`, `meta/atom_last_used`) into the `parts` tree as the named parts of
//!   [`novad_models::Model::state_parts`], the layout the other models already use. The model
//!   is read in the format-4 layout, checked (`Model::from_parts`), and written back as parts,
//!   so its logical content — and `novad digest` — is unchanged.
//! - `meta/params` changes from postcard (fields by position: a new field needed a migration)
//!   to JSON (fields by name: a new field with a serde default loads older stores as they are).
//!
//! Everything is rewritten in one transaction over the touched trees, so a crash leaves format
//! 5 or format 6, never a mix. Idempotent: parameters that already decode as JSON are left
//! alone, and the ℓ1 state is only moved while `meta/history` (format ≤ 5 only) exists.

use std::collections::HashMap;

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use crate::schema::{
    delta_from_chunks, dict_from_chunks, part_chunks, StateMeta, TermEntry, DELTA, DICT,
    KEY_ATOM_AGE, KEY_HISTORY, KEY_MODEL, KEY_PARAMS, KEY_STATE, META, PARTS, VOCAB,
};
use novad_models::l1::dictionary::Dictionary;
use novad_models::l1::{Model, ModelParts};
use novad_models::text::Vocabulary;
use novad_models::{ModelKind, ModelParams, Params};

/// (tree index in [`TREES`], key) → new value (`None` removes).
type Ops = HashMap<(usize, Vec<u8>), Option<Vec<u8>>>;

/// The trees this migration touches, in transaction order.
const TREES: [&str; 5] = [META, VOCAB, DICT, DELTA, PARTS];

pub fn apply(db: &sled::Db) -> Result<(), String> {
    let e = |e: sled::Error| e.to_string();
    let trees: Vec<sled::Tree> = TREES
        .iter()
        .map(|t| db.open_tree(t))
        .collect::<Result<_, _>>()
        .map_err(e)?;
    let meta = &trees[0];
    let kind: ModelKind = match meta.get(KEY_MODEL).map_err(e)? {
        None => ModelKind::L1,
        Some(v) => postcard::from_bytes(&v).map_err(|err| format!("model kind: {err}"))?,
    };
    let Some(stored) = meta.get(KEY_PARAMS).map_err(e)? else {
        return Ok(()); // a store that never got parameters: nothing to convert
    };
    let mut ops = Ops::new();
    let params = match ModelParams::from_bytes(kind, &stored) {
        Ok(p) => p, // already JSON
        Err(_) => {
            let p = ModelParams::from_postcard(kind, &stored)
                .map_err(|err| format!("parameters decode neither as JSON nor postcard: {err}"))?;
            ops.insert((0, KEY_PARAMS.to_vec()), Some(p.to_bytes()));
            p
        }
    };
    if let ModelParams::L1(p) = params {
        if meta.get(KEY_HISTORY).map_err(e)?.is_some() {
            move_l1_state(&trees, p, &mut ops)?;
        }
    }
    if ops.is_empty() {
        return Ok(());
    }
    let ops: Vec<_> = ops.into_iter().collect();
    let refs: Vec<&sled::Tree> = trees.iter().collect();
    let res: Result<(), TransactionError<()>> = refs.as_slice().transaction(|views| {
        for ((t, k), v) in &ops {
            match v {
                Some(v) => {
                    views[*t].insert(k.as_slice(), v.as_slice())?;
                }
                None => {
                    views[*t].remove(k.as_slice())?;
                }
            }
        }
        Ok::<(), ConflictableTransactionError<()>>(())
    });
    res.map_err(|err| format!("{err:?}"))?;
    db.flush().map_err(e)?;
    Ok(())
}

/// Read the format-4 ℓ1 layout into a checked [`Model`] and plan its move into `parts`.
fn move_l1_state(trees: &[sled::Tree], params: Params, ops: &mut Ops) -> Result<(), String> {
    let e = |e: sled::Error| e.to_string();
    let meta = &trees[0];
    let get = |key: &[u8], what: &str| -> Result<sled::IVec, String> {
        meta.get(key)
            .map_err(e)?
            .ok_or_else(|| format!("{what} is missing"))
    };
    let state: StateMeta =
        postcard::from_bytes(&get(KEY_STATE, "state")?).map_err(|err| format!("state: {err}"))?;
    let history = postcard::from_bytes(&get(KEY_HISTORY, "score history")?)
        .map_err(|err| format!("score history: {err}"))?;
    let last_used = postcard::from_bytes(&get(KEY_ATOM_AGE, "atom ages")?)
        .map_err(|err| format!("atom ages: {err}"))?;
    let mut chunks = |t: usize| -> Result<Vec<(u32, Vec<u8>)>, String> {
        let mut out = Vec::new();
        for kv in trees[t].iter() {
            let (k, v) = kv.map_err(e)?;
            let idx: [u8; 4] = k
                .as_ref()
                .try_into()
                .map_err(|_| format!("{}: bad chunk key {k:02x?}", TREES[t]))?;
            ops.insert((t, k.to_vec()), None);
            out.push((u32::from_be_bytes(idx), v.to_vec()));
        }
        Ok(out)
    };
    let (vocab_chunks, dict_chunks, delta_chunks) = (chunks(1)?, chunks(2)?, chunks(3)?);
    let mut entries = Vec::with_capacity(state.terms as usize);
    for (_, bytes) in vocab_chunks {
        let chunk: Vec<TermEntry> =
            postcard::from_bytes(&bytes).map_err(|err| format!("vocabulary: {err}"))?;
        entries.extend(chunk.into_iter().map(|t| (t.term, t.df, t.last_seen)));
    }
    if entries.len() as u64 != state.terms {
        return Err(format!(
            "vocabulary: {} terms stored, {} expected",
            entries.len(),
            state.terms
        ));
    }
    let vocab = Vocabulary::from_entries(entries, state.docs_seen, state.max_terms as usize)
        .map_err(|err| format!("vocabulary: {err}"))?;
    let m = state.terms as usize;
    let dict = dict_from_chunks(m, state.atoms as usize, dict_chunks.into_iter())
        .map_err(|err| format!("dictionary: {err}"))?;
    let delta = delta_from_chunks(m, state.delta_cols as usize, delta_chunks.into_iter())
        .map_err(|err| format!("Δ: {err}"))?;
    let model = Model::from_parts(ModelParts {
        params,
        vocab,
        dict: Dictionary::from_dense(dict.view()),
        delta,
        history,
        last_used,
        timestep: state.timestep,
        bootstrapped: state.bootstrapped,
    })
    .map_err(|err| format!("model: {err}"))?;
    for (k, v) in part_chunks(&model.state_parts()) {
        ops.insert((4, k), Some(v));
    }
    ops.insert((0, KEY_HISTORY.to_vec()), None);
    ops.insert((0, KEY_ATOM_AGE.to_vec()), None);
    Ok(())
}
