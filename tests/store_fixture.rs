//! A store written by the previous release (format 4, `tests/fixtures/store-format4-l1`, built
//! with the default ℓ1 parameters from `examples/batches`; `store-format4-l1.digest` is the
//! `novad digest` that release printed for it) is migrated to the current format on open and
//! then holds the same model — equal digest before and after — in the one layout every model
//! uses, and reads exactly as the store this release builds from the same files with the same
//! parameters.

#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use std::path::{Path, PathBuf};

use harness::*;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-format4-l1")
}

/// The migrated store: the format-4 ℓ1 trees and keys are gone, the state is in `parts`, the
/// parameters are JSON, the format is current, and a backup of the old store was written.
fn assert_one_layout(store: &Path) {
    use novad::store::schema::*;
    let backups = std::fs::read_dir(store)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("backup-format-4-")
        })
        .count();
    assert_eq!(backups, 1, "one backup of the format-4 store");
    let db = sled::open(store.join("db")).unwrap();
    for tree in [VOCAB, DICT, DELTA] {
        assert!(db.open_tree(tree).unwrap().is_empty(), "{tree} is empty");
    }
    let meta = db.open_tree(META).unwrap();
    for key in [KEY_HISTORY, KEY_ATOM_AGE] {
        assert!(meta.get(key).unwrap().is_none());
    }
    let format: u32 = postcard::from_bytes(&meta.get(KEY_FORMAT).unwrap().unwrap()).unwrap();
    assert_eq!(format, FORMAT_VERSION);
    let params: serde_json::Value =
        serde_json::from_slice(&meta.get(KEY_PARAMS).unwrap().unwrap()).unwrap();
    assert!(params["coding"]["lambda"].is_number(), "{params}");
    let parts = db.open_tree(PARTS).unwrap();
    let names: std::collections::BTreeSet<String> = parts
        .iter()
        .keys()
        .map(|k| {
            let k = k.unwrap();
            String::from_utf8(k[..k.len() - 5].to_vec()).unwrap()
        })
        .collect();
    for part in ["meta", "vocab", "dict", "delta", "history", "last_used"] {
        assert!(names.contains(part), "part {part} in {names:?}");
    }
}

fn batches() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/batches");
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path().display().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn a_store_of_the_previous_release_reads_as_the_same_model_and_log() {
    let tmp = tempfile::tempdir().unwrap();
    let old = tmp.path().join("old");
    copy_dir(&fixture(), &old);
    let old = old.display().to_string();
    let new = tmp.path().join("new").display().to_string();
    let before = std::fs::read_to_string(fixture().with_extension("digest")).unwrap();
    let digest = novad_ok(&["digest", "--store", &old]);
    // the new store gets the fixture's parameters (the defaults have moved on since); they
    // predate the hybrid detector: the model's own score, which a new store gets with
    // `--detector model`
    let params = tmp.path().join("fixture.toml");
    std::fs::write(&params, novad_ok(&["params", "--store", &old])).unwrap();
    let params = params.display().to_string();
    let mut args = vec![
        "ingest",
        "--store",
        new.as_str(),
        "--config",
        params.as_str(),
    ];
    args.extend(["--detector", "model"]);
    let files = batches();
    args.extend(files.iter().map(|s| s.as_str()));
    novad_ok(&args);

    assert_eq!(digest.trim().len(), 64, "a blake3 hex digest: {digest}");
    assert_eq!(
        digest.trim(),
        before.trim(),
        "the migration keeps the model"
    );
    assert_eq!(digest, novad_ok(&["digest", "--store", &new]));
    assert_one_layout(Path::new(&old));
    // records from before format 10 do not know a verdict's topic nor a topic's members
    let older = |out: String| -> Vec<serde_json::Value> {
        out.lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                let o = v.as_object_mut().unwrap();
                o.remove("topic");
                o.remove("members");
                v
            })
            .collect()
    };
    for query in ["verdicts", "topics"] {
        let a = novad_ok(&[query, "--store", &old, "--format", "jsonl"]);
        assert!(!a.trim().is_empty(), "the fixture has {query}");
        assert_eq!(
            older(a),
            older(novad_ok(&[query, "--store", &new, "--format", "jsonl"]))
        );
    }
    // the migration summarized the old timesteps: its timeline equals the verdict scan's and
    // the new store's (records aside: they hold commit times and durations)
    let timeline = |dir: &str| {
        let store = novad::store::Store::open(Path::new(dir)).unwrap();
        let fast = novad::query::timesteps(store.db(), None, None).unwrap();
        let scan = novad::query::timesteps_scanned(store.db(), None, None).unwrap();
        let json = |t: &[novad::query::TimestepSummary]| {
            t.iter()
                .map(|t| {
                    let (d, n, f, l) = (t.docs, t.novel, t.first_time, t.last_time);
                    serde_json::json!([t.record.timestep, d, n, f, l, t.scores])
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(json(&fast), json(&scan), "{dir}");
        json(&fast)
    };
    let old_timeline = timeline(&old);
    assert_eq!(old_timeline.len(), files.len());
    assert_eq!(old_timeline, timeline(&new));
    // the old store goes on where it stopped: one more batch gives the same model in both
    let more = tmp.path().join("04-2026-03-05.jsonl");
    let third = std::fs::read_to_string(&files[2]).unwrap();
    std::fs::write(&more, third.replace("2026-03-04", "2026-03-05")).unwrap();
    let more = more.display().to_string();
    novad_ok(&["ingest", "--store", &old, &more]);
    novad_ok(&["ingest", "--store", &new, &more]);
    assert_eq!(
        novad_ok(&["digest", "--store", &old]),
        novad_ok(&["digest", "--store", &new])
    );
}
