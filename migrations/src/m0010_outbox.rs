//! Format 10 → 11: the [`OUTBOX`] tree of webhook messages waiting for their receivers. An
//! older store had no webhooks, so its outbox starts empty: the migration only creates the
//! tree. Nothing else changes. Idempotent (opening a tree that exists changes nothing).

use crate::schema::OUTBOX;

pub fn apply(db: &sled::Db) -> Result<(), String> {
    db.open_tree(OUTBOX).map(|_| ()).map_err(|e| e.to_string())
}
