//! Format 6 → 7: a verdict record carries the hybrid detector's explanation (`hybrid`: the
//! model's own score, the nearest-neighbour score, their quantiles and the nearest earlier
//! document). Records of format 6 were all judged by the model's own score: they are
//! re-encoded with `hybrid: None`, which means exactly that (postcard encodes a trailing
//! `None` as one 0 byte, so the new value is the old one with that byte appended). A store's
//! parameters need nothing: a parameter set without `hybrid` decodes with the detector off, so
//! an existing store keeps its behaviour.
//!
//! Idempotent and bounded in memory: records are rewritten in batches of [`BATCH`] (each
//! applied atomically); a record that already decodes exactly as format 7 is left alone (a
//! format-6 record lacks the tag byte, so it never does, and a format-7 record has one byte too
//! many to decode exactly as format 6).

use serde::Deserialize;

use crate::schema::VERDICTS;

/// Records rewritten per sled batch.
const BATCH: usize = 10_000;

/// A verdict record of formats 2–6.
#[derive(Deserialize)]
#[allow(dead_code)] // decoded only to prove the shape
struct VerdictRecordV6 {
    doc_id: String,
    time: i64,
    timestep: u64,
    seq: u32,
    source: String,
    score: f64,
    novel: bool,
    bootstrap: bool,
    empty: bool,
    at_ceiling: bool,
    terms: Vec<(String, f32)>,
}

/// Decode `bytes` as exactly one `T` (no trailing bytes).
fn exact<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
    match postcard::take_from_bytes::<T>(bytes) {
        Ok((v, [])) => Some(v),
        _ => None,
    }
}

pub fn apply(db: &sled::Db) -> Result<(), String> {
    let e = |e: sled::Error| e.to_string();
    let verdicts = db.open_tree(VERDICTS).map_err(e)?;
    let mut batch = sled::Batch::default();
    let mut pending = 0;
    for kv in verdicts.iter() {
        let (k, v) = kv.map_err(e)?;
        // format 7 or later already
        if crate::schema::decode_verdict(&v, 1).is_some() {
            continue;
        }
        if exact::<VerdictRecordV6>(&v).is_none() {
            return Err(format!(
                "verdict record {} decodes neither as format 6 nor 7",
                k.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ));
        }
        let mut new = v.to_vec();
        new.push(0);
        batch.insert(k, new);
        pending += 1;
        if pending == BATCH {
            verdicts
                .apply_batch(std::mem::take(&mut batch))
                .map_err(e)?;
            pending = 0;
        }
    }
    verdicts.apply_batch(batch).map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{verdict_key, HybridRecord, NearestRecord, VerdictRecord};
    use serde::Serialize;

    #[derive(Serialize)]
    struct V6<'a> {
        doc_id: &'a str,
        time: i64,
        timestep: u64,
        seq: u32,
        source: &'a str,
        score: f64,
        novel: bool,
        bootstrap: bool,
        empty: bool,
        at_ceiling: bool,
        terms: Vec<(String, f32)>,
    }

    #[test]
    fn format_6_records_gain_an_empty_explanation_and_format_7_ones_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let t = db.open_tree(VERDICTS).unwrap();
        // more records than one batch, so the batching is exercised
        let n = BATCH as u64 + 7;
        for i in 0..n {
            let old = V6 {
                doc_id: "d",
                time: i as i64,
                timestep: i / 100,
                seq: (i % 100) as u32,
                source: "b.jsonl",
                score: 0.25,
                novel: i % 3 == 0,
                bootstrap: false,
                empty: false,
                at_ceiling: false,
                terms: vec![("lava".into(), 0.5)],
            };
            let key = verdict_key(old.time, old.timestep, old.seq);
            t.insert(key, postcard::to_stdvec(&old).unwrap()).unwrap();
        }
        // one record already in format 7, with an explanation
        let kept = VerdictRecord {
            doc_id: "new".into(),
            time: -5,
            timestep: 0,
            seq: 0,
            source: "c.jsonl".into(),
            score: 0.9,
            novel: true,
            bootstrap: false,
            empty: false,
            at_ceiling: false,
            terms: vec![],
            hybrid: Some(HybridRecord {
                model_score: 0.5,
                model_quantile: 0.6,
                nn_score: 0.7,
                nn_quantile: 0.8,
                nearest: Some(NearestRecord {
                    doc_id: "old".into(),
                    time: -9,
                    timestep: 0,
                    seq: 1,
                    cosine: 0.3,
                }),
            }),
            topic: None,
        };
        let kept_key = verdict_key(-5, 0, 0);
        t.insert(kept_key, postcard::to_stdvec(&kept).unwrap())
            .unwrap();
        apply(&db).unwrap();
        let mut seen = 0;
        for kv in t.iter() {
            let (k, v) = kv.unwrap();
            let r: VerdictRecord = crate::schema::decode_verdict(&v, 1).expect("format 7 exactly");
            if k.as_ref() == kept_key.as_slice() {
                assert_eq!(r, kept);
                continue;
            }
            assert_eq!(r.hybrid, None);
            assert_eq!(r.novel, r.time % 3 == 0);
            assert_eq!(
                verdict_key(r.time, r.timestep, r.seq).as_slice(),
                k.as_ref()
            );
            seen += 1;
        }
        assert_eq!(seen, n);
        // idempotent
        let before: Vec<_> = t.iter().map(|kv| kv.unwrap()).collect();
        apply(&db).unwrap();
        let after: Vec<_> = t.iter().map(|kv| kv.unwrap()).collect();
        assert_eq!(before, after);
        // garbage is an error that names the record, not a rewrite
        t.insert(b"zz", vec![0xff, 0xff]).unwrap();
        let e = apply(&db).unwrap_err();
        assert!(e.contains("7a7a") && e.contains("neither"), "{e}");
    }
}
