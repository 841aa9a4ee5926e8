//! The JSON message of a committed timestep (schema in docs/API.md, "Webhooks"): pure
//! functions of the timestep's write, so a message says exactly what its transaction
//! committed.

use serde_json::{json, Value};

use crate::show::fmt_time;
use crate::store::schema::{TopicRecord, VerdictRecord};
use crate::store::TimestepWrite;
use novad_models::TopicKind;

/// Which timesteps a receiver hears of, and what of them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Only timesteps with new events, and the message lists no single documents.
    pub events_only: bool,
    /// Only novel documents scoring at least this (finite) are listed and count as news.
    pub min_score: Option<f64>,
}

/// Novel documents listed per message, the highest scores first.
pub const TOP_DOCUMENTS: usize = 10;
/// Documents listed per event.
pub const EVENT_DOCUMENTS: usize = 5;

/// The message's stable id: the timestep and the start of the hash of the bytes it consumed,
/// so a message is named by what it tells of (the same on every attempt and after a restart).
pub fn message_id(timestep: u64, hash_hex: &str) -> String {
    format!("t{timestep}-{}", &hash_hex[..hash_hex.len().min(16)])
}

/// The new events among a timestep's topics: those that emerged in it (not a later day of
/// an event), largest first.
pub fn new_events(topics: impl IntoIterator<Item = TopicRecord>) -> Vec<TopicRecord> {
    let mut out: Vec<TopicRecord> = topics
        .into_iter()
        .filter(|t| t.kind == TopicKind::Emerging)
        .collect();
    out.sort_by(|a, b| b.size.cmp(&a.size).then(a.id.cmp(&b.id)));
    out
}

/// An event as messages and the event stream show it.
pub fn event_json(t: &TopicRecord) -> Value {
    json!({
        "topic": t.id,
        "event": t.event,
        "keywords": t.terms.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>(),
        "size": t.size,
        "first_seen": fmt_time(t.time),
        "mean_score": finite(t.mean_score),
        "top_documents": t.docs.iter().take(EVENT_DOCUMENTS).collect::<Vec<_>>(),
    })
}

fn finite(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

/// A novel document as a message lists it: score, why-novel terms, nearest earlier document.
fn novel_json(v: &VerdictRecord) -> Value {
    let nearest = v.hybrid.as_ref().and_then(|h| h.nearest.as_ref());
    json!({
        "doc_id": v.doc_id,
        "time": fmt_time(v.time),
        "score": finite(v.score),
        "why": v.terms.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
        "nearest": nearest.map(|n| json!({
            "doc_id": n.doc_id,
            "time": fmt_time(n.time),
            "cosine": n.cosine,
        })),
        "topic": v.topic.map(|t| t.id),
    })
}

/// The message of the timestep `w` for a receiver with `filter`, or `None` when it has
/// nothing for it: no new event and (unless `events_only`) no novel document at or above the
/// filter's score. Deterministic: the same write gives the same bytes.
pub fn build(w: &TimestepWrite, filter: &Filter) -> Option<Value> {
    // the write's topics as encoded for the store (one that does not decode is left out)
    let events = new_events(
        w.topics
            .iter()
            .filter_map(|(_, v)| postcard::from_bytes::<TopicRecord>(v).ok()),
    );
    let min = filter.min_score.unwrap_or(f64::NEG_INFINITY);
    let mut novel: Vec<&VerdictRecord> = w
        .verdicts
        .iter()
        .filter(|v| v.novel && v.score.is_finite() && v.score >= min)
        .collect();
    if events.is_empty() && (filter.events_only || novel.is_empty()) {
        return None;
    }
    novel.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.seq.cmp(&b.seq)));
    let listed: Vec<Value> = if filter.events_only {
        Vec::new()
    } else {
        novel
            .iter()
            .take(TOP_DOCUMENTS)
            .map(|v| novel_json(v))
            .collect()
    };
    let first = w.verdicts.iter().map(|v| v.time).min();
    let last = w.verdicts.iter().map(|v| v.time).max();
    let r = &w.record;
    Some(json!({
        "id": message_id(r.timestep, &r.hash),
        "type": "timestep",
        "timestep": r.timestep,
        "file": r.file,
        "committed_at": fmt_time(r.committed_at),
        "time_range": {
            "first": first.map(fmt_time),
            "last": last.map(fmt_time),
        },
        "documents": w.verdicts.len(),
        "novel": w.verdicts.iter().filter(|v| v.novel).count(),
        "novel_listed": novel.len(),
        "events": events.iter().map(event_json).collect::<Vec<_>>(),
        "novel_documents": listed,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schema::{FileRecord, TimestepRecord};

    fn verdict(seq: u32, score: f64, novel: bool) -> VerdictRecord {
        VerdictRecord {
            doc_id: format!("d{seq}"),
            time: 1_000 * seq as i64,
            timestep: 4,
            seq,
            source: "b.jsonl".into(),
            score,
            novel,
            bootstrap: false,
            empty: false,
            at_ceiling: false,
            terms: vec![("lava".into(), 0.5)],
            hybrid: None,
            topic: None,
        }
    }

    fn topic(id: u32, size: u32, kind: TopicKind) -> (Vec<u8>, Vec<u8>) {
        let t = TopicRecord {
            timestep: 4,
            id,
            time: 0,
            size,
            terms: vec![("eruption".into(), 1.0)],
            docs: vec!["d1".into()],
            mean_score: 0.9,
            kind,
            strength: 1.0,
            profile: vec![],
            event: Some(id as u64),
            members: None,
        };
        (
            crate::store::schema::topic_key(4, id),
            postcard::to_stdvec(&t).unwrap(),
        )
    }

    fn write(verdicts: Vec<VerdictRecord>, topics: Vec<(Vec<u8>, Vec<u8>)>) -> TimestepWrite {
        TimestepWrite {
            verdicts,
            hash: [7; 32],
            file: FileRecord {
                name: "b.jsonl".into(),
                timestep: 4,
                docs: 0,
                committed_at: 0,
                range: None,
            },
            record: TimestepRecord {
                timestep: 4,
                file: "b.jsonl".into(),
                hash: "0707070707070707070707".into(),
                committed_at: 5_000,
                stats: Default::default(),
            },
            topics,
            progress: None,
        }
    }

    /// A quiet timestep sends nothing; novel documents are listed highest score first, at
    /// most [`TOP_DOCUMENTS`], and only those at or above the filter's score count.
    #[test]
    fn novel_documents_are_listed_by_score_and_filtered() {
        assert!(build(
            &write(vec![verdict(0, 0.1, false)], vec![]),
            &Filter::default()
        )
        .is_none());
        let vs: Vec<_> = (0..15)
            .map(|i| verdict(i, i as f64 / 10.0, i % 2 == 1))
            .collect();
        let m = build(&write(vs.clone(), vec![]), &Filter::default()).unwrap();
        let listed = m["novel_documents"].as_array().unwrap();
        assert_eq!(listed.len(), 7, "the 7 novel of 15");
        let scores: Vec<f64> = listed
            .iter()
            .map(|d| d["score"].as_f64().unwrap())
            .collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
        assert_eq!(m["documents"], 15);
        assert_eq!(m["novel"], 7);
        assert_eq!(m["id"], "t4-0707070707070707");
        assert_eq!(m["time_range"]["first"], fmt_time(0));
        let f = Filter {
            min_score: Some(1.05),
            ..Default::default()
        };
        let m = build(&write(vs.clone(), vec![]), &f).unwrap();
        assert_eq!(
            m["novel_documents"].as_array().unwrap().len(),
            2,
            "1.1 and 1.3"
        );
        let f = Filter {
            min_score: Some(2.0),
            ..Default::default()
        };
        assert!(
            build(&write(vs, vec![]), &f).is_none(),
            "nothing reaches 2.0"
        );
    }

    /// Only emerging topics are new events; with `events_only` a timestep without one sends
    /// nothing and a message lists no single documents.
    #[test]
    fn events_only_sends_new_events_and_nothing_else() {
        let f = Filter {
            events_only: true,
            ..Default::default()
        };
        let vs = vec![verdict(1, 0.9, true)];
        assert!(build(&write(vs.clone(), vec![]), &f).is_none());
        let cont = vec![topic(0, 9, TopicKind::Continuing)];
        assert!(build(&write(vs.clone(), cont), &f).is_none(), "a later day");
        let new = vec![
            topic(0, 3, TopicKind::Emerging),
            topic(1, 9, TopicKind::Emerging),
            topic(2, 5, TopicKind::Continuing),
        ];
        let m = build(&write(vs, new), &f).unwrap();
        let ev = m["events"].as_array().unwrap();
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0]["size"], 9, "largest first");
        assert_eq!(ev[0]["keywords"][0], "eruption");
        assert!(m["novel_documents"].as_array().unwrap().is_empty());
    }
}
