//! Format 9 → 10: emerging topics can be events. A topic record gains the event it is a day of
//! (`event`) and every member's doc id (`members`); a verdict record gains the topic of its
//! timestep it belongs to (`topic`). Older records knew neither: they gain `None` for each (one
//! postcard byte per field, appended), which is what they mean, so their topics, verdicts and
//! queries read as before. A store's parameters are untouched: a store keeps its topic stage
//! (DICTCLUST) unless its parameters ask for events.
//!
//! Idempotent: a record that already decodes in format 10 is left as it is, so a rerun after a
//! crash finishes the rest. A record that decodes in neither format stops the migration, naming
//! its key.

use crate::schema::{decode_verdict, TopicRecord, TOPICS, VERDICTS};

/// Records rewritten per sled batch.
const BATCH: usize = 10_000;

/// Decode `bytes` as exactly one `T` (no trailing bytes).
fn exact<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Option<T> {
    match postcard::take_from_bytes::<T>(bytes) {
        Ok((v, [])) => Some(v),
        _ => None,
    }
}

fn hex(k: &[u8]) -> String {
    k.iter().map(|b| format!("{b:02x}")).collect()
}

/// Append `pad` `None` bytes to every record of `tree` that `done` does not accept and
/// `older` does once padded; fails on a record that neither accepts.
fn pad_tree(
    db: &sled::Db,
    tree: &str,
    pad: usize,
    done: impl Fn(&[u8]) -> bool,
    what: &str,
) -> Result<(), String> {
    let e = |e: sled::Error| e.to_string();
    let t = db.open_tree(tree).map_err(e)?;
    let mut batch = sled::Batch::default();
    let mut pending = 0;
    for kv in t.iter() {
        let (k, v) = kv.map_err(e)?;
        if done(&v) {
            continue;
        }
        let mut new = v.to_vec();
        new.extend(std::iter::repeat_n(0u8, pad));
        if !done(&new) {
            return Err(format!(
                "{what} record {} decodes neither as format 9 nor 10",
                hex(&k)
            ));
        }
        batch.insert(k, new);
        pending += 1;
        if pending == BATCH {
            t.apply_batch(std::mem::take(&mut batch)).map_err(e)?;
            pending = 0;
        }
    }
    t.apply_batch(batch).map_err(e)
}

pub fn apply(db: &sled::Db) -> Result<(), String> {
    pad_tree(
        db,
        VERDICTS,
        1,
        |b| decode_verdict(b, 0).is_some(),
        "verdict",
    )?;
    pad_tree(
        db,
        TOPICS,
        2,
        |b| exact::<TopicRecord>(b).is_some(),
        "topic",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{topic_key, verdict_key, TopicLink, VerdictRecord};
    use novad_models::TopicKind;

    fn verdict(i: u32, topic: Option<TopicLink>) -> VerdictRecord {
        VerdictRecord {
            doc_id: format!("d{i}"),
            time: i as i64 - 3,
            timestep: 1,
            seq: i,
            source: "b.jsonl".into(),
            score: 0.5,
            novel: i % 2 == 0,
            bootstrap: false,
            empty: false,
            at_ceiling: false,
            terms: vec![("lava".into(), 0.25)],
            hybrid: None,
            topic,
        }
    }

    fn topic(id: u32, event: Option<u64>, members: Option<Vec<String>>) -> TopicRecord {
        TopicRecord {
            timestep: 1,
            id,
            time: 0,
            size: 2,
            terms: vec![("lava".into(), 0.5)],
            docs: vec!["d0".into()],
            mean_score: 0.8,
            kind: TopicKind::Emerging,
            strength: 0.2,
            profile: vec![],
            event,
            members,
        }
    }

    /// Format-9 records (the format-10 encoding without its trailing fields) gain `None`s and
    /// decode exactly; format-10 records are untouched; a rerun changes nothing; a record in
    /// neither format is refused by key.
    #[test]
    fn older_records_gain_none_and_newer_ones_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let vt = db.open_tree(VERDICTS).unwrap();
        let tt = db.open_tree(TOPICS).unwrap();
        for i in 0..5u32 {
            let mut b = postcard::to_stdvec(&verdict(i, None)).unwrap();
            assert_eq!(b.pop(), Some(0), "the topic's None");
            vt.insert(verdict_key(i as i64 - 3, 1, i), b).unwrap();
        }
        let linked = verdict(
            9,
            Some(TopicLink {
                id: 0,
                event: Some(4),
            }),
        );
        vt.insert(verdict_key(6, 1, 9), postcard::to_stdvec(&linked).unwrap())
            .unwrap();
        let mut old = postcard::to_stdvec(&topic(0, None, None)).unwrap();
        assert_eq!(old.split_off(old.len() - 2), vec![0, 0]);
        tt.insert(topic_key(1, 0), old).unwrap();
        let new = topic(1, Some(4), Some(vec!["d0".into(), "d9".into()]));
        tt.insert(topic_key(1, 1), postcard::to_stdvec(&new).unwrap())
            .unwrap();
        apply(&db).unwrap();
        let snapshot = |t: &sled::Tree| -> Vec<(sled::IVec, sled::IVec)> {
            t.iter().map(|kv| kv.unwrap()).collect()
        };
        let (v1, t1) = (snapshot(&vt), snapshot(&tt));
        for (_, v) in &v1 {
            let r: VerdictRecord = exact(v).expect("format 10 exactly");
            assert_eq!(r.topic.is_some(), r.doc_id == "d9");
        }
        assert_eq!(exact::<TopicRecord>(&t1[0].1), Some(topic(0, None, None)));
        assert_eq!(exact::<TopicRecord>(&t1[1].1), Some(new));
        apply(&db).unwrap();
        assert_eq!((snapshot(&vt), snapshot(&tt)), (v1, t1));
        tt.insert(topic_key(2, 0), &b"\x01\x02\x03"[..]).unwrap();
        let err = apply(&db).unwrap_err();
        assert!(
            err.contains("topic record") && err.contains(&hex(&topic_key(2, 0))),
            "{err}"
        );
    }
}
