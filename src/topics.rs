//! Emerging topics as stored per timestep (filled by the topic stage of the detector).

use serde::{Deserialize, Serialize};

use crate::store::schema::TOPICS;

/// One emerging topic of one timestep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub timestep: u64,
    pub id: u32,
    /// Unix milliseconds of the earliest document of the topic.
    pub time: i64,
    pub size: u32,
    pub terms: Vec<(String, f32)>,
    /// Most representative documents (doc ids), strongest first.
    pub docs: Vec<String>,
    pub mean_score: f64,
}

/// Topic key: timestep then topic id (big-endian).
pub fn topic_key(timestep: u64, id: u32) -> Vec<u8> {
    let mut k = timestep.to_be_bytes().to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

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
