//! Format 7 → 8: every committed timestep gets its [`StepSummary`] in the new
//! [`SUMMARIES`] tree (documents, novel, first/last document time, score quantiles), computed
//! from its verdicts exactly as a commit of format 8 computes it ([`SummaryBuilder`]). A
//! timestep without verdicts gets the empty summary. Nothing else changes.
//!
//! One pass over the verdicts computes the summaries of a window of consecutive timesteps
//! whose documents (as their timestep records count them) total at most [`MAX_SCORES`]; a
//! store larger than that takes one pass per window, so memory stays bounded (one `f64` per
//! document of the window) whatever the size of the store. Summaries are written in batches of
//! [`BATCH`]. Idempotent: a rerun computes the same summaries and overwrites them. A verdict or
//! timestep record that does not decode is an error naming its key; nothing is written for the
//! window it was found in.

use std::collections::BTreeMap;

use crate::schema::{
    u64_key, StepSummary, SummaryBuilder, TimestepRecord, VerdictRecord, SUMMARIES, TIMESTEPS,
    VERDICTS,
};

/// Summaries written per sled batch.
const BATCH: usize = 10_000;
/// Most documents whose scores are held at once (8 bytes each: 32 MiB).
const MAX_SCORES: u64 = 4 << 20;

pub fn apply(db: &sled::Db) -> Result<(), String> {
    apply_windowed(db, MAX_SCORES)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// [`apply`] with windows of at most `max_docs` documents (at least one timestep each).
fn apply_windowed(db: &sled::Db, max_docs: u64) -> Result<(), String> {
    let e = |e: sled::Error| e.to_string();
    let steps = db.open_tree(TIMESTEPS).map_err(e)?;
    let mut counts: Vec<(u64, u64)> = Vec::new();
    for kv in steps.iter() {
        let (k, v) = kv.map_err(e)?;
        let r: TimestepRecord = postcard::from_bytes(&v)
            .map_err(|err| format!("timestep record {} does not decode: {err}", hex(&k)))?;
        counts.push((r.timestep, r.stats.docs as u64));
    }
    let mut start = 0;
    while start < counts.len() {
        let mut end = start + 1;
        let mut docs = counts[start].1;
        while end < counts.len() && docs + counts[end].1 <= max_docs {
            docs += counts[end].1;
            end += 1;
        }
        summarize(db, &counts[start..end])?;
        start = end;
    }
    Ok(())
}

/// Compute and write the summaries of `window` (timestep, documents) in one verdict pass.
fn summarize(db: &sled::Db, window: &[(u64, u64)]) -> Result<(), String> {
    let e = |e: sled::Error| e.to_string();
    let mut acc: BTreeMap<u64, SummaryBuilder> = window
        .iter()
        .map(|&(t, _)| (t, SummaryBuilder::default()))
        .collect();
    let (lo, hi) = (window[0].0, window[window.len() - 1].0);
    for kv in db.open_tree(VERDICTS).map_err(e)?.iter() {
        let (k, v) = kv.map_err(e)?;
        // format 7–9 records lack the `topic` that came with format 10
        let r: VerdictRecord = crate::schema::decode_verdict(&v, 1)
            .ok_or_else(|| format!("verdict record {} does not decode", hex(&k)))?;
        if (lo..=hi).contains(&r.timestep) {
            if let Some(b) = acc.get_mut(&r.timestep) {
                b.add(&r);
            }
        }
    }
    let out = db.open_tree(SUMMARIES).map_err(e)?;
    let mut batch = sled::Batch::default();
    let mut pending = 0;
    for (t, b) in acc {
        let s: StepSummary = b.finish();
        batch.insert(&u64_key(t), postcard::to_stdvec(&s).expect("serialise"));
        pending += 1;
        if pending == BATCH {
            out.apply_batch(std::mem::take(&mut batch)).map_err(e)?;
            pending = 0;
        }
    }
    out.apply_batch(batch).map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::verdict_key;

    fn record(timestep: u64, docs: usize) -> TimestepRecord {
        TimestepRecord {
            timestep,
            file: format!("{timestep}.jsonl"),
            hash: "00".into(),
            committed_at: 0,
            stats: novad_models::StepStats {
                timestep,
                docs,
                ..Default::default()
            },
        }
    }

    fn dump(db: &sled::Db) -> Vec<(Vec<u8>, Vec<u8>)> {
        let t = db.open_tree(SUMMARIES).unwrap();
        t.iter()
            .map(|kv| {
                let (k, v) = kv.unwrap();
                (k.to_vec(), v.to_vec())
            })
            .collect()
    }

    #[test]
    fn every_timestep_gets_the_summary_of_its_verdicts_in_any_window_size() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let steps = db.open_tree(TIMESTEPS).unwrap();
        let vt = db.open_tree(VERDICTS).unwrap();
        // timestep 3 has no verdicts; times interleave across timesteps
        let per_step = [5usize, 1, 7, 0, 4];
        let mut all: Vec<VerdictRecord> = Vec::new();
        for (t, &n) in per_step.iter().enumerate() {
            steps
                .insert(
                    u64_key(t as u64),
                    postcard::to_stdvec(&record(t as u64, n)).unwrap(),
                )
                .unwrap();
            for i in 0..n {
                let v = VerdictRecord {
                    doc_id: format!("{t}-{i}"),
                    time: ((i * 7 + t * 3) % 11) as i64 - 4,
                    timestep: t as u64,
                    seq: i as u32,
                    source: format!("{t}.jsonl"),
                    score: (i as f64 * 0.37 + t as f64).sin(),
                    novel: (i + t) % 3 == 0,
                    bootstrap: t == 0,
                    empty: i == 2,
                    at_ceiling: false,
                    terms: vec![],
                    hybrid: None,
                    topic: None,
                };
                vt.insert(
                    verdict_key(v.time, v.timestep, v.seq),
                    postcard::to_stdvec(&v).unwrap(),
                )
                .unwrap();
                all.push(v);
            }
        }
        apply_windowed(&db, 1).unwrap();
        let small = dump(&db);
        assert_eq!(small.len(), per_step.len());
        for (k, v) in &small {
            let t = u64::from_be_bytes(k[..].try_into().unwrap());
            let got: StepSummary = postcard::from_bytes(v).unwrap();
            let want = StepSummary::of(all.iter().filter(|v| v.timestep == t));
            assert_eq!(got, want, "timestep {t}");
            assert_eq!(got.docs, per_step[t as usize] as u64);
        }
        // one window, and a rerun: the same summaries
        apply(&db).unwrap();
        assert_eq!(dump(&db), small);
        apply(&db).unwrap();
        assert_eq!(dump(&db), small);
        // garbage is an error that names the record
        vt.insert(b"zz", vec![0xff, 0xff]).unwrap();
        let err = apply(&db).unwrap_err();
        assert!(
            err.contains("7a7a") && err.contains("does not decode"),
            "{err}"
        );
    }
}
