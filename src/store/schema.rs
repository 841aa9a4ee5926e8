//! The on-disk layout: tree names, key encodings, record types and the chunked encoding of the
//! model state. Every value is serde + postcard; matrices are little-endian `f32` chunks of at
//! most a few KiB (sled keeps large values in blob files it does not reclaim well, SPEC §2).

use ndarray::Array2;
use serde::{Deserialize, Serialize};

use crate::detector::StepStats;
use crate::dictionary::Multiplier;

/// Current store format version. Bumped by every layout change, with a migration in
/// `migrations/`.
pub const FORMAT_VERSION: u32 = 2;

pub const META: &str = "meta";
pub const VOCAB: &str = "vocab";
pub const DICT: &str = "dict";
pub const DELTA: &str = "delta";
pub const VERDICTS: &str = "verdicts";
pub const FILES: &str = "files";
pub const TIMESTEPS: &str = "timesteps";
pub const TOPICS: &str = "topics";

/// Trees holding the model state (rewritten chunk by chunk), in a fixed order.
pub const STATE_TREES: [&str; 4] = [META, VOCAB, DICT, DELTA];
/// Every tree of the current format, in transaction order.
pub const ALL_TREES: [&str; 8] = [META, VOCAB, DICT, DELTA, VERDICTS, FILES, TIMESTEPS, TOPICS];

pub const KEY_FORMAT: &[u8] = b"format_version";
pub const KEY_PARAMS: &[u8] = b"params";
pub const KEY_STATE: &[u8] = b"state";
pub const KEY_HISTORY: &[u8] = b"history";
pub const KEY_ATOM_AGE: &[u8] = b"atom_last_used";

/// Terms per vocabulary chunk.
pub const VOCAB_CHUNK: usize = 256;
/// Rows of Δ per chunk.
pub const DELTA_CHUNK: usize = 64;
/// Target bytes of a dictionary chunk.
pub const DICT_CHUNK_BYTES: usize = 4096;

/// Scalar model state kept in `meta/state`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateMeta {
    pub timestep: u64,
    pub bootstrapped: bool,
    pub terms: u64,
    pub atoms: u64,
    pub delta_cols: u64,
    pub docs_seen: u64,
    pub max_terms: u64,
    /// Unix milliseconds of the last commit.
    pub committed_at: i64,
}

/// One verdict as stored and as returned by queries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerdictRecord {
    pub doc_id: String,
    /// Document time, Unix milliseconds (UTC).
    pub time: i64,
    pub timestep: u64,
    /// Position of the document in its batch file.
    pub seq: u32,
    /// Batch file name.
    pub source: String,
    pub score: f64,
    pub novel: bool,
    pub bootstrap: bool,
    pub empty: bool,
    pub at_ceiling: bool,
    /// Why novel: top residual terms with their residual mass.
    pub terms: Vec<(String, f32)>,
}

/// A committed batch file, keyed by its content hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRecord {
    pub name: String,
    pub timestep: u64,
    pub docs: u64,
    pub committed_at: i64,
}

/// One committed timestep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimestepRecord {
    pub timestep: u64,
    pub file: String,
    /// blake3 of the file content, hex.
    pub hash: String,
    pub committed_at: i64,
    pub stats: StepStats,
}

/// Verdict key: document time (sign-flipped big-endian so byte order = time order), then
/// timestep and position, so a date range is one contiguous scan.
pub fn verdict_key(time_ms: i64, timestep: u64, seq: u32) -> [u8; 20] {
    let mut k = [0u8; 20];
    k[..8].copy_from_slice(&((time_ms as u64) ^ (1 << 63)).to_be_bytes());
    k[8..16].copy_from_slice(&timestep.to_be_bytes());
    k[16..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// The smallest verdict key at or after `time_ms`.
pub fn verdict_time_prefix(time_ms: i64) -> [u8; 8] {
    ((time_ms as u64) ^ (1 << 63)).to_be_bytes()
}

pub fn u64_key(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

pub fn u32_key(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

/// Rows per dictionary chunk for k atoms.
pub fn dict_rows_per_chunk(k: usize) -> usize {
    (DICT_CHUNK_BYTES / (4 * k.max(1))).max(1)
}

/// The dictionary as (chunk index, LE f32 bytes) pairs; all-zero chunks are omitted (an absent
/// chunk reads as zeros).
pub fn dict_chunks(a: &Array2<f32>) -> Vec<(u32, Vec<u8>)> {
    let (m, k) = a.dim();
    let rows = dict_rows_per_chunk(k);
    let sl = a.as_slice().expect("standard layout");
    let mut out = Vec::new();
    for (c, start) in (0..m).step_by(rows).enumerate() {
        let end = (start + rows).min(m);
        let vals = &sl[start * k..end * k];
        if vals.iter().all(|&v| v == 0.0) {
            continue;
        }
        let mut bytes = Vec::with_capacity(vals.len() * 4);
        for v in vals {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        out.push((c as u32, bytes));
    }
    out
}

/// Rebuild an m × k dictionary from its chunks. Fails on a chunk of the wrong size or index.
pub fn dict_from_chunks(
    m: usize,
    k: usize,
    chunks: impl Iterator<Item = (u32, Vec<u8>)>,
) -> Result<Array2<f32>, String> {
    let rows = dict_rows_per_chunk(k);
    let mut a = Array2::<f32>::zeros((m, k));
    let sl = a.as_slice_mut().unwrap();
    for (c, bytes) in chunks {
        let start = c as usize * rows;
        if start >= m.max(1) && !(m == 0 && start == 0) {
            return Err(format!("dictionary chunk {c} beyond {m} rows"));
        }
        let end = (start + rows).min(m);
        if bytes.len() != (end - start) * k * 4 {
            return Err(format!("dictionary chunk {c} has {} bytes", bytes.len()));
        }
        for (dst, b) in sl[start * k..end * k].iter_mut().zip(bytes.chunks_exact(4)) {
            *dst = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }
    Ok(a)
}

/// Δ as (chunk index, postcard rows) pairs for groups of [`DELTA_CHUNK`] rows; empty groups
/// are omitted.
pub fn delta_chunks(d: &Multiplier) -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    for (c, start) in (0..d.nrows()).step_by(DELTA_CHUNK).enumerate() {
        let end = (start + DELTA_CHUNK).min(d.nrows());
        if (start..end).all(|i| d.row(i).is_empty()) {
            continue;
        }
        let rows: Vec<&[(u32, f32)]> = (start..end).map(|i| d.row(i)).collect();
        out.push((c as u32, postcard::to_stdvec(&rows).expect("serialise")));
    }
    out
}

/// Rebuild Δ (m × n) from its chunks.
pub fn delta_from_chunks(
    m: usize,
    n: usize,
    chunks: impl Iterator<Item = (u32, Vec<u8>)>,
) -> Result<Multiplier, String> {
    let mut rows: Vec<Vec<(u32, f32)>> = vec![Vec::new(); m];
    for (c, bytes) in chunks {
        let start = c as usize * DELTA_CHUNK;
        let group: Vec<Vec<(u32, f32)>> =
            postcard::from_bytes(&bytes).map_err(|e| format!("Δ chunk {c}: {e}"))?;
        if start + group.len() > m {
            return Err(format!("Δ chunk {c} beyond {m} rows"));
        }
        for (i, r) in group.into_iter().enumerate() {
            rows[start + i] = r;
        }
    }
    let d = Multiplier::from_rows(n, rows);
    if !d.is_valid() {
        return Err("Δ entries out of range or not finite".into());
    }
    Ok(d)
}

/// One vocabulary entry as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TermEntry {
    pub term: String,
    pub df: u64,
    pub last_seen: u64,
}
