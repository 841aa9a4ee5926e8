//! The timeline (`query::timesteps`): without a time bound it reads the summaries stored with
//! each commit, and its answer equals the one computed from every verdict
//! (`query::timesteps_scanned`) on a store with a bootstrap timestep, an empty document and
//! document times that interleave across timesteps; `novad check` names a summary that does
//! not match its verdicts.

#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "common/synthetic.rs"]
mod synthetic;

use std::path::Path;

use harness::*;
use novad::query::{self, TimestepSummary};
use novad::store::schema::{u64_key, StepSummary, SUMMARIES};
use novad::store::Store;

/// Batch `t` of `n` documents whose times spread over the same hour as every other batch's
/// (so the times of different timesteps interleave); `empty` adds a document with no term.
fn batch_file(dir: &Path, t: usize, n: usize, empty: bool) -> String {
    let mut out = String::new();
    for (i, line) in synthetic::batch(t as u64, n, "2026-06-01")
        .lines()
        .enumerate()
    {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        let minute = (i * 7 + t * 13) % 60;
        v["time"] = format!("2026-06-01T10:{minute:02}:{:02}Z", t).into();
        out.push_str(&format!("{v}\n"));
    }
    if empty {
        out.push_str(r#"{"id":"blank","time":"2026-06-01T10:30:30Z","text":"!!! ???"}"#);
        out.push('\n');
    }
    let path = dir.join(format!("{t:02}.jsonl"));
    std::fs::write(&path, out).unwrap();
    path.display().to_string()
}

fn json(ts: &[TimestepSummary]) -> serde_json::Value {
    serde_json::to_value(ts).unwrap()
}

/// A store of four timesteps (the first one bootstrap, one with an empty document).
fn store() -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store").display().to_string();
    let files: Vec<String> = (0..4)
        .map(|t| batch_file(tmp.path(), t, 40 + 5 * t, t == 2))
        .collect();
    let mut args = vec!["ingest", "--store", store.as_str(), "--k", "10"];
    args.extend(files.iter().map(|f| f.as_str()));
    novad_ok(&args);
    (tmp, store)
}

#[test]
fn the_stored_summaries_answer_the_timeline_exactly_as_the_verdict_scan() {
    let (_tmp, dir) = store();
    let store = Store::open(Path::new(&dir)).unwrap();
    let db = store.db();
    let all = query::verdicts(db, &Default::default()).unwrap();
    assert!(all.iter().any(|v| v.bootstrap), "a bootstrap timestep");
    assert!(all.iter().any(|v| v.empty), "an empty document");
    assert!(
        all.windows(2).any(|w| w[0].timestep > w[1].timestep),
        "document times interleave across timesteps"
    );
    let fast = query::timesteps(db, None, None).unwrap();
    let scan = query::timesteps_scanned(db, None, None).unwrap();
    assert_eq!(fast.len(), 4);
    assert_eq!(json(&fast), json(&scan));
    assert!(
        fast.iter().any(|t| t.scores.is_none()),
        "bootstrap: no scores"
    );
    assert!(fast.iter().filter(|t| t.scores.is_some()).count() >= 2);
    assert_eq!(
        fast.iter().map(|t| t.docs).sum::<usize>(),
        all.len(),
        "every document in exactly one timestep"
    );
    // a bound cuts through timesteps: only the documents in range count
    let mid = all[all.len() / 2].time;
    let cut = query::timesteps(db, Some(mid), None).unwrap();
    let in_range = all.iter().filter(|v| v.time >= mid).count();
    assert_eq!(cut.iter().map(|t| t.docs).sum::<usize>(), in_range);
    assert!(cut.iter().any(|c| fast
        .iter()
        .any(|f| f.record.timestep == c.record.timestep && f.docs > c.docs)));
    assert!(cut.iter().all(|c| c.first_time.unwrap() >= mid));
}

#[test]
fn a_summary_that_does_not_match_its_verdicts_is_reported_and_a_missing_one_refused() {
    let (_tmp, dir) = store();
    novad_ok(&["check", "--store", &dir]);
    {
        let store = Store::open(Path::new(&dir)).unwrap();
        let t = store.tree(SUMMARIES);
        let mut s: StepSummary =
            postcard::from_bytes(&t.get(u64_key(1)).unwrap().unwrap()).unwrap();
        s.novel += 1;
        t.insert(u64_key(1), postcard::to_stdvec(&s).unwrap())
            .unwrap();
        t.remove(u64_key(2)).unwrap();
        let err = query::timesteps(store.db(), None, None).unwrap_err();
        assert!(err.contains("timestep 2 has no summary"), "{err}");
        store.db().flush().unwrap();
    }
    let o = novad(&["check", "--store", &dir]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(
        out.contains("timestep 1 (01.jsonl): its stored summary")
            && out.contains("differs from its verdicts'"),
        "{out}"
    );
    assert!(
        out.contains("timestep 2 (02.jsonl): no summary stored"),
        "{out}"
    );
}

/// The `summaries` tree, key and value bytes.
fn summaries(dir: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let store = Store::open(Path::new(dir)).unwrap();
    let t = store.tree(SUMMARIES);
    t.iter()
        .map(|kv| {
            let (k, v) = kv.unwrap();
            (k.to_vec(), v.to_vec())
        })
        .collect()
}

#[test]
fn export_import_and_rebuild_carry_the_same_summaries() {
    let (tmp, dir) = store();
    let original = summaries(&dir);
    assert_eq!(original.len(), 4);
    let snap = tmp.path().join("s.snapshot").display().to_string();
    let imported = tmp.path().join("imported").display().to_string();
    novad_ok(&["export", "--store", &dir, &snap]);
    novad_ok(&["import", "--store", &imported, &snap]);
    assert_eq!(summaries(&imported), original);
    let rebuilt = tmp.path().join("rebuilt").display().to_string();
    let from = tmp.path().display().to_string();
    novad_ok(&[
        "rebuild", "--from", &from, "--old", &dir, "--store", &rebuilt,
    ]);
    assert_eq!(summaries(&rebuilt), original);
}
