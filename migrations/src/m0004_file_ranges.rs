//! Format 4 → 5: a file record says which byte range of its file the timestep consumed
//! (`range`), so a large file can be ingested as several timesteps and a grown file's new tail
//! as a later one. Records of format 4 each consumed a whole file: they are re-encoded with
//! `range: None`, which means exactly that. The `meta/progress\0<name>` keys are new and need
//! no migration.
//!
//! Idempotent: a record that already decodes exactly in the format-5 shape is left alone (a
//! format-4 record lacks the trailing `Option` tag, so it never decodes as format 5, and a
//! format-5 record has one byte too many to decode exactly as format 4).

use serde::{Deserialize, Serialize};

use crate::schema::{FileRecord, FILES};

/// A file record of formats 1–4.
#[derive(Serialize, Deserialize)]
struct FileRecordV4 {
    name: String,
    timestep: u64,
    docs: u64,
    committed_at: i64,
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
    let files = db.open_tree(FILES).map_err(e)?;
    let mut batch = sled::Batch::default();
    for kv in files.iter() {
        let (k, v) = kv.map_err(e)?;
        if exact::<FileRecord>(&v).is_some() {
            continue;
        }
        let old: FileRecordV4 = exact(&v).ok_or_else(|| {
            format!(
                "file record {} decodes neither as format 4 nor 5",
                k.iter().map(|b| format!("{b:02x}")).collect::<String>()
            )
        })?;
        let new = FileRecord {
            name: old.name,
            timestep: old.timestep,
            docs: old.docs,
            committed_at: old.committed_at,
            range: None,
        };
        batch.insert(k, postcard::to_stdvec(&new).map_err(|e| e.to_string())?);
    }
    files.apply_batch(batch).map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::FileRange;

    #[test]
    fn format_4_records_become_whole_file_records_and_format_5_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let files = db.open_tree(FILES).unwrap();
        let olds: Vec<([u8; 32], FileRecordV4)> = (0..3u8)
            .map(|i| {
                (
                    [i; 32],
                    FileRecordV4 {
                        name: format!("f{i}.jsonl"),
                        timestep: 10 + i as u64,
                        docs: 100 * i as u64 + 1,
                        committed_at: 1_700_000_000_000 + i as i64,
                    },
                )
            })
            .collect();
        for (k, r) in &olds {
            let bytes = postcard::to_stdvec(r).unwrap();
            assert!(
                exact::<FileRecord>(&bytes).is_none(),
                "v4 must not pass as v5"
            );
            files.insert(k, bytes).unwrap();
        }
        let v5 = FileRecord {
            name: "new.jsonl".into(),
            timestep: 20,
            docs: 7,
            committed_at: 5,
            range: Some(FileRange {
                start: 10,
                end: 90,
                first_line: 2,
                next_line: 9,
                hash: [9; 32],
                file: Some((1, 2)),
            }),
        };
        let v5_bytes = postcard::to_stdvec(&v5).unwrap();
        assert!(
            exact::<FileRecordV4>(&v5_bytes).is_none(),
            "v5 must not pass as v4"
        );
        files.insert([7u8; 32], v5_bytes.clone()).unwrap();
        apply(&db).unwrap();
        for (k, old) in &olds {
            let got: FileRecord = postcard::from_bytes(&files.get(k).unwrap().unwrap()).unwrap();
            assert_eq!(
                (got.name.as_str(), got.timestep, got.docs, got.committed_at),
                (old.name.as_str(), old.timestep, old.docs, old.committed_at)
            );
            assert_eq!(got.range, None);
        }
        assert_eq!(
            files.get([7u8; 32]).unwrap().unwrap().as_ref(),
            &v5_bytes[..]
        );
        // idempotent
        let before: Vec<_> = files.iter().map(|kv| kv.unwrap()).collect();
        apply(&db).unwrap();
        let after: Vec<_> = files.iter().map(|kv| kv.unwrap()).collect();
        assert_eq!(before, after);
        // garbage is an error, not a rewrite
        files.insert([8u8; 32], vec![0xff; 3]).unwrap();
        assert!(apply(&db).unwrap_err().contains("neither"));
        assert_eq!(files.get([8u8; 32]).unwrap().unwrap().as_ref(), &[0xff; 3]);
    }
}
