//! The format-4 fixture store of the workspace, opened on a copy, and a dump of every tree, for
//! the migration tests.

use std::collections::BTreeMap;
use std::path::Path;

use novad_migrations::schema::ALL_TREES;
use novad_migrations::{Migration, MIGRATIONS};

/// Every tree's entries, by tree name.
pub type Dump = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>)>>;

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

/// A copy of `tests/fixtures/store-format4-l1` (written by a format-4 release) in `dir`, open.
pub fn format4_fixture(dir: &Path) -> sled::Db {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/store-format4-l1/db");
    copy_dir(&fixture, dir);
    sled::open(dir).unwrap()
}

/// The migration from format `from`.
pub fn step_from(from: u32) -> &'static Migration {
    MIGRATIONS.iter().find(|m| m.from == from).unwrap()
}

pub fn dump(db: &sled::Db) -> Dump {
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
