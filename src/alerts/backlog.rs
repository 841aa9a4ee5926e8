//! What waits in the outbox, per receiver: for `novad status`, the dashboard and the metrics.

use serde::{Deserialize, Serialize};

use crate::store::schema::{OutboxRecord, OUTBOX};

/// The messages of one receiver not yet delivered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Backlog {
    pub url: String,
    /// Messages that will be tried (again).
    pub waiting: u64,
    /// Messages delivery gave up on.
    pub parked: u64,
    /// The oldest undelivered message's timestep.
    pub oldest_timestep: Option<u64>,
    /// What the latest failed attempt got, and the ids of the parked messages (at most 20).
    pub last_error: Option<String>,
    pub parked_ids: Vec<String>,
}

/// The outbox of `db` per receiver, in URL order. A record that does not decode is an error.
pub fn read(db: &sled::Db) -> Result<Vec<Backlog>, String> {
    let tree = db.open_tree(OUTBOX).map_err(|e| e.to_string())?;
    let mut out: std::collections::BTreeMap<String, Backlog> = Default::default();
    for kv in tree.iter() {
        let (_, v) = kv.map_err(|e| e.to_string())?;
        let rec: OutboxRecord =
            postcard::from_bytes(&v).map_err(|e| format!("corrupt webhook message: {e}"))?;
        let b = out.entry(rec.url.clone()).or_insert_with(|| Backlog {
            url: rec.url.clone(),
            ..Default::default()
        });
        if rec.parked {
            b.parked += 1;
            if b.parked_ids.len() < 20 {
                b.parked_ids.push(rec.id.clone());
            }
        } else {
            b.waiting += 1;
        }
        b.oldest_timestep = Some(
            b.oldest_timestep
                .map_or(rec.timestep, |t| t.min(rec.timestep)),
        );
        if rec.last_error.is_some() {
            b.last_error = rec.last_error;
        }
    }
    Ok(out.into_values().collect())
}

/// The lines of `novad status` for the backlogs: one per receiver, and the parked ids.
pub fn write(out: &mut dyn std::io::Write, backlogs: &[Backlog]) -> std::io::Result<()> {
    use crate::show::shown;
    for w in backlogs {
        let error = w
            .last_error
            .as_ref()
            .map_or(String::new(), |e| format!(" (last error: {})", shown(e)));
        writeln!(
            out,
            "webhook          {}: {} waiting, {} parked{error}",
            shown(&w.url),
            w.waiting,
            w.parked,
        )?;
        if !w.parked_ids.is_empty() {
            writeln!(out, "  parked          {}", w.parked_ids.join(" "))?;
        }
    }
    Ok(())
}
