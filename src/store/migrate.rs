//! The migrations runner. The migrations themselves live in the `novad-migrations` crate (the
//! top-level `migrations/` directory), one file per format step.

pub use novad_migrations::{Migration, MIGRATIONS};

use super::schema::{FORMAT_VERSION, KEY_FORMAT, META};
use super::{snapshot, Store, StoreError};

/// Bring an open store to [`FORMAT_VERSION`]: stamp a new store, refuse a newer one, migrate an
/// older one (after writing a backup snapshot into the store directory).
pub fn bring_up_to_date(store: &Store) -> Result<(), StoreError> {
    run(store, FORMAT_VERSION, MIGRATIONS)
}

/// [`bring_up_to_date`] with an explicit target and migration list (tests use their own).
pub fn run(store: &Store, target: u32, migrations: &[Migration]) -> Result<(), StoreError> {
    let dir = store.dir_string();
    let found = Store::format_version(store.db()).map_err(|msg| StoreError::Corrupt {
        dir: dir.clone(),
        what: "format version".into(),
        msg,
    })?;
    let set_version = |v: u32| -> Result<(), StoreError> {
        let meta = store.db().open_tree(META).map_err(|e| store.sled(e))?;
        meta.insert(KEY_FORMAT, postcard::to_stdvec(&v).unwrap())
            .map_err(|e| store.sled(e))?;
        store.db().flush().map_err(|e| store.sled(e))?;
        Ok(())
    };
    let mut v = match found {
        None => {
            let has_data = store
                .db()
                .tree_names()
                .iter()
                .filter(|n| n.as_ref() != b"__sled__default")
                .any(|n| {
                    store
                        .db()
                        .open_tree(n)
                        .map(|t| !t.is_empty())
                        .unwrap_or(true)
                });
            if has_data {
                return Err(StoreError::Corrupt {
                    dir,
                    what: "format version".into(),
                    msg: "the store has data but no format version".into(),
                });
            }
            return set_version(target);
        }
        Some(v) => v,
    };
    if v == target {
        return Ok(());
    }
    if v > target {
        return Err(StoreError::Newer {
            dir,
            found: v,
            supported: target,
        });
    }
    let backup = store.dir().join(format!(
        "backup-format-{v}-{}.snapshot",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
    ));
    snapshot::export_db(store.db(), v, &backup)?;
    while v < target {
        let Some(m) = migrations.iter().find(|m| m.from == v) else {
            return Err(StoreError::NoMigration {
                dir,
                found: v,
                supported: target,
            });
        };
        tracing::info!(migration = m.name, from = v, to = v + 1, backup = %backup.display(), "migrating store");
        (m.apply)(store.db()).map_err(|msg| StoreError::Migration {
            dir: dir.clone(),
            name: m.name.into(),
            msg,
            backup: backup.display().to_string(),
        })?;
        v += 1;
        set_version(v)?;
    }
    Ok(())
}
