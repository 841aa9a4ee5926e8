//! Format 2 → 3: a store names the model it runs (`meta/model`; stores before format 3 all
//! ran the ℓ1 detector), the `parts` tree holds the state of the other models, and a topic
//! record carries its kind (emerging / evolving), strength and temporal profile. Old topic
//! records are DICTCLUST topics: emerging, with strength = size / documents of their timestep
//! (from the timestep record; 0 when it is missing) and no profile.
//!
//! Idempotent: a record that already decodes in the new shape is left alone (a format-2
//! record is too short to decode as a format-3 one), and the model key is only written when
//! absent.

use serde::Deserialize;

use crate::schema::TopicRecord;
use crate::schema::{TimestepRecord, KEY_MODEL, META, TIMESTEPS, TOPICS};
use novad_models::ModelKind;
use novad_models::TopicKind;

/// The topic record of format 2.
#[derive(Deserialize)]
struct TopicRecordV2 {
    timestep: u64,
    id: u32,
    time: i64,
    size: u32,
    terms: Vec<(String, f32)>,
    docs: Vec<String>,
    mean_score: f64,
}

pub fn apply(db: &sled::Db) -> Result<(), String> {
    let e = |e: sled::Error| e.to_string();
    let meta = db.open_tree(META).map_err(e)?;
    if meta.get(KEY_MODEL).map_err(e)?.is_none() {
        meta.insert(KEY_MODEL, postcard::to_stdvec(&ModelKind::L1).unwrap())
            .map_err(e)?;
    }
    let steps = db.open_tree(TIMESTEPS).map_err(e)?;
    let topics = db.open_tree(TOPICS).map_err(e)?;
    let mut batch = sled::Batch::default();
    for kv in topics.iter() {
        let (k, v) = kv.map_err(e)?;
        if postcard::from_bytes::<TopicRecord>(&v).is_ok() {
            continue;
        }
        let old: TopicRecordV2 =
            postcard::from_bytes(&v).map_err(|err| format!("topic record {k:02x?}: {err}"))?;
        let docs = match steps.get(old.timestep.to_be_bytes()).map_err(e)? {
            Some(r) => {
                postcard::from_bytes::<TimestepRecord>(&r)
                    .map_err(|err| format!("timestep record {}: {err}", old.timestep))?
                    .stats
                    .docs
            }
            None => 0,
        };
        let new = TopicRecord {
            timestep: old.timestep,
            id: old.id,
            time: old.time,
            size: old.size,
            terms: old.terms,
            docs: old.docs,
            mean_score: old.mean_score,
            kind: TopicKind::Emerging,
            strength: if docs > 0 {
                old.size as f64 / docs as f64
            } else {
                0.0
            },
            profile: Vec::new(),
            event: None,
            members: None,
        };
        batch.insert(k, postcard::to_stdvec(&new).unwrap());
    }
    topics.apply_batch(batch).map_err(e)?;
    Ok(())
}
