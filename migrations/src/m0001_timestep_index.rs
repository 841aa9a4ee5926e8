//! Format 1 → 2: format 1 had no `timesteps` tree (per-timestep records); format 2 keeps one
//! record per committed timestep for `novad status` and the eval/diagnostics. The records are
//! rebuilt from the verdict log (documents, novel and empty counts per timestep, the source
//! file) and the `files` tree (content hash, commit time). Statistics that format 1 did not
//! keep (timings, ceiling share, threshold) are left at zero.

use std::collections::BTreeMap;

use novad_models::StepStats;
use serde::Deserialize;

use crate::schema::{TimestepRecord, VerdictRecord, FILES, TIMESTEPS, VERDICTS};

/// A file record as formats 1–4 stored it.
#[derive(Deserialize)]
struct FileRecord {
    name: String,
    timestep: u64,
    #[allow(dead_code)]
    docs: u64,
    committed_at: i64,
}

pub fn apply(db: &sled::Db) -> Result<(), String> {
    let verdicts = db.open_tree(VERDICTS).map_err(|e| e.to_string())?;
    let files = db.open_tree(FILES).map_err(|e| e.to_string())?;
    let timesteps = db.open_tree(TIMESTEPS).map_err(|e| e.to_string())?;
    let mut by_step: BTreeMap<u64, TimestepRecord> = BTreeMap::new();
    for kv in verdicts.iter() {
        let (_, v) = kv.map_err(|e| e.to_string())?;
        // a record of these formats lacks the last field (the hybrid explanation): its `None`
        let mut b = v.to_vec();
        b.push(0);
        let v: VerdictRecord = crate::schema::decode_verdict(&b, 2)
            .ok_or_else(|| "verdict: does not decode".to_string())?;
        let r = by_step.entry(v.timestep).or_insert_with(|| TimestepRecord {
            timestep: v.timestep,
            file: v.source.clone(),
            hash: String::new(),
            committed_at: 0,
            stats: StepStats {
                timestep: v.timestep,
                bootstrap: v.bootstrap,
                ..Default::default()
            },
        });
        r.stats.docs += 1;
        r.stats.novel += v.novel as usize;
        r.stats.empty += v.empty as usize;
    }
    for kv in files.iter() {
        let (k, v) = kv.map_err(|e| e.to_string())?;
        let f: FileRecord = postcard::from_bytes(&v).map_err(|e| format!("file record: {e}"))?;
        let r = by_step.entry(f.timestep).or_insert_with(|| TimestepRecord {
            timestep: f.timestep,
            file: f.name.clone(),
            hash: String::new(),
            committed_at: f.committed_at,
            stats: StepStats {
                timestep: f.timestep,
                ..Default::default()
            },
        });
        r.hash = k.iter().map(|b| format!("{b:02x}")).collect();
        r.committed_at = f.committed_at;
    }
    for (t, r) in by_step {
        timesteps
            .insert(
                t.to_be_bytes(),
                postcard::to_stdvec(&r).map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
