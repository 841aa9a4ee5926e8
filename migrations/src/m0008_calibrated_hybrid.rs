//! Format 8 → 9: the hybrid detector can be calibrated (its parts fused on their own scale, the
//! state's drift taken out, the threshold held in a band). A calibrated store keeps two more
//! state parts (`hybrid/history/raw/…`, `hybrid/anchor`), a version-2 `hybrid/meta` and a
//! `hybrid.calibration` in its parameters. Stores of format 8 have none of these: their
//! parameters decode with the calibration off, their parts as they are, and their digest is
//! unchanged, so nothing is rewritten. The step is there so that a novad that predates
//! calibration refuses a calibrated store naming both formats, instead of failing on parts it
//! cannot read.
//!
//! What it checks: the stored parameters (`meta/params`) decode as the store's model's
//! parameter set, so a store whose parameters are damaged is refused here, before it is
//! stamped format 9. Idempotent: it writes nothing.

use crate::schema::{KEY_MODEL, KEY_PARAMS, META};
use novad_models::{ModelKind, ModelParams};

pub fn apply(db: &sled::Db) -> Result<(), String> {
    let e = |e: sled::Error| e.to_string();
    let meta = db.open_tree(META).map_err(e)?;
    let Some(bytes) = meta.get(KEY_PARAMS).map_err(e)? else {
        return Ok(());
    };
    let kind = match meta.get(KEY_MODEL).map_err(e)? {
        Some(v) => {
            postcard::from_bytes::<ModelKind>(&v).map_err(|err| format!("meta/model: {err}"))?
        }
        None => ModelKind::L1,
    };
    ModelParams::from_bytes(kind, &bytes)
        .map_err(|err| format!("meta/params is not a {} parameter set: {err}", kind.name()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db_with(params: Option<&[u8]>) -> (tempfile::TempDir, sled::Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        if let Some(p) = params {
            db.open_tree(META).unwrap().insert(KEY_PARAMS, p).unwrap();
        }
        (dir, db)
    }

    #[test]
    fn parameters_are_checked_and_nothing_is_written() {
        // a format-8 store's parameters: a hybrid without the calibration field
        let mut v = ModelParams::L1(novad_models::Params::default()).to_json();
        let h = v["hybrid"].as_object_mut().unwrap();
        assert!(h.remove("calibration").is_some());
        h.insert("nn_weight".into(), 0.6.into());
        let before_calibration = serde_json::to_vec(&v).unwrap();
        let decoded = ModelParams::from_bytes(ModelKind::L1, &before_calibration).unwrap();
        let ModelParams::L1(p) = decoded else {
            panic!("an l1 parameter set")
        };
        assert_eq!(
            p.hybrid.unwrap().calibration,
            None,
            "decodes with calibration off"
        );
        for ok in [Some(&before_calibration[..]), None] {
            let (_d, db) = db_with(ok);
            let before: Vec<_> = db.open_tree(META).unwrap().iter().flatten().collect();
            apply(&db).unwrap();
            apply(&db).unwrap();
            let after: Vec<_> = db.open_tree(META).unwrap().iter().flatten().collect();
            assert_eq!(before, after);
        }
        let (_d, db) = db_with(Some(b"\x01\x02 not json"));
        assert!(apply(&db).unwrap_err().contains("meta/params"));
        let (_d, db) = db_with(Some(b"[1, 2]"));
        assert!(apply(&db).unwrap_err().contains("meta/params"));
    }
}
