//! Portable snapshots of a whole store (`novad export` / `novad import`).
//!
//! Format: the magic `NOVADSNAP1\n`, the store format version (u32 LE), then records
//! `len: u32 LE` + postcard `(tree: String, key: Vec<u8>, value: Vec<u8>)`, a zero length as
//! end marker, and the 32-byte blake3 of everything before it. Import verifies the checksum
//! and the format before writing anything, and only into an empty store.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use super::schema::{FORMAT_VERSION, KEY_FORMAT, META};
use super::{Store, StoreError};

const MAGIC: &[u8] = b"NOVADSNAP1\n";

fn snap_err(path: &Path, msg: impl ToString) -> StoreError {
    StoreError::Snapshot {
        path: path.display().to_string(),
        msg: msg.to_string(),
    }
}

/// Write every tree of `db` to `path` (written to a temporary file of a fresh name in the same
/// directory, `.novad-export-…`, synced, then renamed over `path`; removed if anything fails, so
/// no file of the user's is touched but `path`). Returns the number
/// of records.
pub fn export_db(db: &sled::Db, format: u32, path: &Path) -> Result<u64, StoreError> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".novad-export-")
        .tempfile_in(dir)
        .map_err(|e| snap_err(path, e))?;
    let mut w = BufWriter::new(tmp);
    let mut h = blake3::Hasher::new();
    let mut put =
        |w: &mut BufWriter<tempfile::NamedTempFile>, bytes: &[u8]| -> Result<(), StoreError> {
            h.update(bytes);
            w.write_all(bytes).map_err(|e| snap_err(path, e))
        };
    put(&mut w, MAGIC)?;
    put(&mut w, &format.to_le_bytes())?;
    let mut n = 0u64;
    let mut names: Vec<sled::IVec> = db.tree_names();
    names.sort();
    for name in names {
        if name.as_ref() == b"__sled__default" {
            continue;
        }
        let tname = String::from_utf8_lossy(&name).into_owned();
        let tree = db.open_tree(&name).map_err(|e| snap_err(path, e))?;
        for kv in tree.iter() {
            let (k, v) = kv.map_err(|e| snap_err(path, e))?;
            let rec = postcard::to_stdvec(&(&tname, k.as_ref(), v.as_ref())).unwrap();
            put(&mut w, &(rec.len() as u32).to_le_bytes())?;
            put(&mut w, &rec)?;
            n += 1;
        }
    }
    put(&mut w, &0u32.to_le_bytes())?;
    let digest = h.finalize();
    w.write_all(digest.as_bytes())
        .map_err(|e| snap_err(path, e))?;
    let f = w.into_inner().map_err(|e| snap_err(path, e.error()))?;
    f.as_file().sync_all().map_err(|e| snap_err(path, e))?;
    f.persist(path).map_err(|e| snap_err(path, e.error))?;
    Ok(n)
}

/// Export an open store.
pub fn export(store: &Store, path: &Path) -> Result<u64, StoreError> {
    store.db().flush().map_err(|e| store.sled(e))?;
    export_db(store.db(), FORMAT_VERSION, path)
}

type Record = (String, Vec<u8>, Vec<u8>);

fn read_all(path: &Path) -> Result<(u32, Vec<Record>), StoreError> {
    let f = File::open(path).map_err(|e| snap_err(path, e))?;
    if f.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(snap_err(path, "is a directory, not a snapshot file"));
    }
    let size = f.metadata().map_or(u64::MAX, |m| m.len());
    let mut r = BufReader::new(f);
    let mut h = blake3::Hasher::new();
    let mut read = 0u64;
    let mut take = |r: &mut BufReader<File>, n: usize| -> Result<Vec<u8>, StoreError> {
        // a length from the file is trusted only as far as the file reaches: a damaged or
        // crafted length cannot make this allocate more than the file holds
        read += n as u64;
        if read > size {
            return Err(snap_err(path, "truncated snapshot"));
        }
        let mut buf = vec![0u8; n];
        r.read_exact(&mut buf)
            .map_err(|_| snap_err(path, "truncated snapshot"))?;
        h.update(&buf);
        Ok(buf)
    };
    if take(&mut r, MAGIC.len())? != MAGIC {
        return Err(snap_err(path, "not a novad snapshot (bad magic)"));
    }
    let v = take(&mut r, 4)?;
    let format = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
    let mut recs = Vec::new();
    loop {
        let l = take(&mut r, 4)?;
        let len = u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize;
        if len == 0 {
            break;
        }
        let rec = take(&mut r, len)?;
        let rec: Record = postcard::from_bytes(&rec)
            .map_err(|e| snap_err(path, format!("record {}: {e}", recs.len())))?;
        recs.push(rec);
    }
    let digest = h.finalize();
    let mut want = [0u8; 32];
    r.read_exact(&mut want)
        .map_err(|_| snap_err(path, "truncated snapshot (no checksum)"))?;
    if digest.as_bytes() != &want {
        return Err(snap_err(path, "checksum mismatch: the snapshot is damaged"));
    }
    let mut extra = [0u8; 1];
    if !matches!(r.read(&mut extra), Ok(0)) {
        return Err(snap_err(
            path,
            "bytes after the checksum: the file is not one whole snapshot (appended to, or two joined)",
        ));
    }
    Ok((format, recs))
}

/// Import a snapshot into the new (empty) store directory `dir`. The snapshot's format may be
/// older (it is migrated when the store is next opened) but not newer.
pub fn import(dir: &Path, path: &Path) -> Result<u64, StoreError> {
    let (format, recs) = read_all(path)?;
    if format > FORMAT_VERSION {
        return Err(StoreError::Newer {
            dir: path.display().to_string(),
            found: format,
            supported: FORMAT_VERSION,
        });
    }
    let d = dir.display().to_string();
    std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
        dir: d.clone(),
        what: "cannot create the directory".into(),
        source,
    })?;
    let db = sled::Config::new()
        .path(dir.join("db"))
        .flush_every_ms(None)
        .open()
        .map_err(|source| StoreError::Sled {
            dir: d.clone(),
            source,
        })?;
    let sled_err = |source| StoreError::Sled {
        dir: d.clone(),
        source,
    };
    let non_empty = db
        .tree_names()
        .iter()
        .any(|n| db.open_tree(n).map(|t| !t.is_empty()).unwrap_or(true));
    if non_empty {
        return Err(StoreError::NotEmpty { dir: d });
    }
    let n = recs.len() as u64;
    for (tree, k, v) in recs {
        db.open_tree(tree.as_bytes())
            .map_err(sled_err)?
            .insert(k, v)
            .map_err(sled_err)?;
    }
    // the format key is part of the records; make sure it is there even for a bare snapshot
    let meta = db.open_tree(META).map_err(sled_err)?;
    if meta.get(KEY_FORMAT).map_err(sled_err)?.is_none() {
        meta.insert(KEY_FORMAT, postcard::to_stdvec(&format).unwrap())
            .map_err(sled_err)?;
    }
    db.flush().map_err(sled_err)?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The export writes only its own file: a user's `FILE.tmp` beside `FILE.bin` is left as
    /// it was, no temporary file is left behind, and the snapshot reads back every record.
    #[test]
    fn export_touches_no_file_but_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .path(dir.path().join("db"))
            .open()
            .unwrap();
        db.open_tree("verdicts")
            .unwrap()
            .insert(b"k", b"v")
            .unwrap();
        let out = dir.path().join("snap");
        std::fs::create_dir(&out).unwrap();
        let theirs = out.join("FILE.tmp");
        std::fs::write(&theirs, b"the user's notes").unwrap();
        let n = export_db(&db, 10, &out.join("FILE.bin")).unwrap();
        assert_eq!(n, 1);
        assert_eq!(std::fs::read(&theirs).unwrap(), b"the user's notes");
        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["FILE.bin", "FILE.tmp"]);
        let (format, records) = read_all(&out.join("FILE.bin")).unwrap();
        assert_eq!(format, 10);
        assert_eq!(
            records,
            vec![("verdicts".to_string(), b"k".to_vec(), b"v".to_vec())]
        );
        // a directory that cannot take the file: an error, and still nothing left behind
        assert!(export_db(&db, 10, &out.join("missing/FILE.bin")).is_err());
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 2);
    }

    /// A snapshot with bytes appended after its checksum, and a directory, are refused with
    /// what is wrong; the whole snapshot reads.
    #[test]
    fn trailing_bytes_and_directories_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .path(dir.path().join("db"))
            .open()
            .unwrap();
        db.insert(b"k", b"v").unwrap();
        let snap = dir.path().join("s.bin");
        export_db(&db, 10, &snap).unwrap();
        assert!(read_all(&snap).is_ok());
        let mut bytes = std::fs::read(&snap).unwrap();
        bytes.push(0);
        std::fs::write(&snap, &bytes).unwrap();
        let e = read_all(&snap).unwrap_err().to_string();
        assert!(e.contains("bytes after the checksum"), "{e}");
        let e = read_all(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
    }
}
