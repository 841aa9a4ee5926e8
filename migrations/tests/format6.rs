//! The migration to format 6 on a store written by a format-4 release
//! (`tests/fixtures/store-format4-l1` of the workspace, first brought to format 5): it moves the ℓ1 state into `parts`,
//! keeps every other record, and a second run changes nothing.

use std::collections::BTreeMap;
use std::path::Path;

use novad_migrations::schema::{ALL_TREES, DICT, KEY_PARAMS, META, PARTS, VERDICTS};
use novad_migrations::MIGRATIONS;

type Dump = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>)>>;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

fn dump(db: &sled::Db) -> Dump {
    ALL_TREES
        .iter()
        .map(|t| {
            let kv = db
                .open_tree(t)
                .unwrap()
                .iter()
                .map(|r| {
                    let (k, v) = r.unwrap();
                    (k.to_vec(), v.to_vec())
                })
                .collect();
            (t.to_string(), kv)
        })
        .collect()
}

#[test]
fn format_5_to_6_moves_the_l1_state_keeps_the_records_and_is_idempotent() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/store-format4-l1/db");
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture, tmp.path());
    let db = sled::open(tmp.path()).unwrap();
    let step_from = |from: u32| MIGRATIONS.iter().find(|m| m.from == from).unwrap();
    (step_from(4).apply)(&db).unwrap();
    let step = step_from(5);
    let before = dump(&db);
    assert!(
        !before[DICT].is_empty() && before[PARTS].is_empty(),
        "a format-5 ℓ1 store"
    );
    (step.apply)(&db).unwrap();
    let once = dump(&db);
    assert!(once[DICT].is_empty() && !once[PARTS].is_empty());
    assert_eq!(once[VERDICTS], before[VERDICTS], "records are untouched");
    for t in ["files", "timesteps", "topics"] {
        assert_eq!(once[t], before[t], "{t} untouched");
    }
    let params = |d: &Dump| {
        d[META]
            .iter()
            .find(|(k, _)| k == KEY_PARAMS)
            .unwrap()
            .1
            .clone()
    };
    let json: serde_json::Value = serde_json::from_slice(&params(&once)).unwrap();
    assert!(json.is_object());
    (step.apply)(&db).unwrap();
    assert_eq!(dump(&db), once, "a second run changes nothing");
}
