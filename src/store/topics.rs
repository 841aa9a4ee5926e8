//! Emerging and evolving topics as stored, one record per (timestep, topic) in the `topics`
//! tree (records and keys in [`super::schema`]).

use super::schema::{TopicRecord, TOPICS};

/// Stored topics whose time lies in [since, until), in timestep order.
pub fn query(
    db: &sled::Db,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<Vec<TopicRecord>, String> {
    let tree = db.open_tree(TOPICS).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for kv in tree.iter() {
        let (_, v) = kv.map_err(|e| e.to_string())?;
        let t: TopicRecord = postcard::from_bytes(&v).map_err(|e| format!("corrupt topic: {e}"))?;
        if since.is_none_or(|s| t.time >= s) && until.is_none_or(|u| t.time < u) {
            out.push(t);
        }
    }
    Ok(out)
}
