//! The migration to format 6 on a store written by a format-4 release
//! (`tests/fixtures/store-format4-l1` of the workspace, first brought to format 5): it moves the ℓ1 state into `parts`,
//! keeps every other record, and a second run changes nothing.

mod common;

use common::{dump, format4_fixture, step_from, Dump};
use novad_migrations::schema::{DICT, KEY_PARAMS, META, PARTS, VERDICTS};

#[test]
fn format_5_to_6_moves_the_l1_state_keeps_the_records_and_is_idempotent() {
    let tmp = tempfile::tempdir().unwrap();
    let db = format4_fixture(tmp.path());
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
