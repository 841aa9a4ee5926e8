//! The on-disk layout: tree names, key encodings, record types and the chunked encoding of the
//! model state. Records are serde + postcard; the parameters are JSON (fields by name); a
//! model's state is its named parts cut into chunks of at most a few KiB (sled keeps large
//! values in blob files it does not reclaim well, SPEC §2).
//!
//! Since format 5 every model, the ℓ1 detector included, keeps its state in [`PARTS`]. The
//! `vocab`, `dict` and `delta` trees, the `meta/history` and `meta/atom_last_used` keys and
//! their chunk codecs below are the ℓ1 layout of formats 1–4: empty in a current store, read
//! only by the migration to format 5.

use ndarray::Array2;
use serde::{Deserialize, Serialize};

use novad_models::l1::dictionary::Multiplier;
use novad_models::{StepStats, TopicKind};

pub use crate::summary::{ScoreQuantiles, StepSummary, SummaryBuilder};

/// Current store format version. Bumped by every layout change, with a migration in
/// this crate.
pub const FORMAT_VERSION: u32 = 11;

pub const META: &str = "meta";
pub const VOCAB: &str = "vocab";
pub const DICT: &str = "dict";
pub const DELTA: &str = "delta";
pub const VERDICTS: &str = "verdicts";
pub const FILES: &str = "files";
pub const TIMESTEPS: &str = "timesteps";
pub const TOPICS: &str = "topics";
/// The model state ([`novad_models::PartsModel::state_parts`], every model): chunks keyed by
/// `part name, 0x00, chunk index (u32 BE)`.
pub const PARTS: &str = "parts";
/// One [`StepSummary`] per committed timestep, keyed like [`TIMESTEPS`] (`u64` big-endian),
/// written in the timestep's transaction (format ≥ 8): the timeline reads one small record per
/// timestep instead of every verdict. A tree of its own rather than a field of
/// [`TimestepRecord`], so the timestep records (read by the journal, status and rebuild) keep
/// their encoding and a summary can be recomputed without touching them.
pub const SUMMARIES: &str = "summaries";
/// Webhook messages not yet acknowledged by their receiver (format ≥ 11), keyed by
/// [`outbox_key`] (receiver, then timestep): each is written in the transaction of the
/// timestep it tells of and removed once its receiver answered 2xx.
pub const OUTBOX: &str = "outbox";

/// Trees holding the model state (rewritten chunk by chunk), in a fixed order.
pub const STATE_TREES: [&str; 4] = [META, VOCAB, DICT, DELTA];
/// Every tree of the current format, in transaction order.
pub const ALL_TREES: [&str; 11] = [
    META, VOCAB, DICT, DELTA, VERDICTS, FILES, TIMESTEPS, TOPICS, PARTS, SUMMARIES, OUTBOX,
];
/// Index of [`PARTS`] in [`ALL_TREES`].
pub const PARTS_TREE: usize = 8;

pub const KEY_FORMAT: &[u8] = b"format_version";
pub const KEY_PARAMS: &[u8] = b"params";
pub const KEY_STATE: &[u8] = b"state";
pub const KEY_HISTORY: &[u8] = b"history";
pub const KEY_ATOM_AGE: &[u8] = b"atom_last_used";
/// The store's [`novad_models::ModelKind`] (format ≥ 3; absent in older stores = ℓ1).
pub const KEY_MODEL: &[u8] = b"model";
/// Prefix of the `meta` keys `progress\0<file name>`: the `files` key (32 bytes) of the last
/// timestep that consumed part of a file of that name (format ≥ 5). Written in the same
/// transaction as that timestep; how far into a file ingestion got.
pub const KEY_PROGRESS: &[u8] = b"progress\0";
/// Bytes of a part chunk.
pub const PART_CHUNK_BYTES: usize = 4096;

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
    /// The hybrid detector's explanation (`score` is then the fused score); `None` for a
    /// store that runs the model's own score and for records from before format 7. Keep it
    /// the last field but one: format-6 records gained its `None` byte.
    pub hybrid: Option<HybridRecord>,
    /// The topic of its timestep it belongs to, if any (format ≥ 10; older records have
    /// None). Keep it last: format-9 records gained its `None` byte.
    pub topic: Option<TopicLink>,
}

/// Decode a stored verdict record exactly (no trailing bytes), in the current layout or one at
/// most `older` steps back: each step lacks one more of the trailing `Option` fields added
/// since (`topic`, format 10; `hybrid`, format 7), which decode as None.
pub fn decode_verdict(bytes: &[u8], older: usize) -> Option<VerdictRecord> {
    let mut b = bytes.to_vec();
    for _ in 0..=older.min(2) {
        if let Ok((v, [])) = postcard::take_from_bytes::<VerdictRecord>(&b) {
            return Some(v);
        }
        b.push(0);
    }
    None
}

/// A verdict's topic: the topic's id in its timestep (its [`topic_key`]) and, when the topic
/// is a day of an event, the event's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicLink {
    pub id: u32,
    pub event: Option<u64>,
}

/// How the hybrid detector scored a document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HybridRecord {
    /// The model's own score, and its quantile under the model-score history.
    pub model_score: f64,
    pub model_quantile: f64,
    /// 1 − cosine to the nearest remembered earlier document (1 when none shares a term), and
    /// its quantile under the NN-score history.
    pub nn_score: f64,
    pub nn_quantile: f64,
    /// The nearest remembered earlier document, if any shares a term.
    pub nearest: Option<NearestRecord>,
}

/// A remembered earlier document: its id, the key of its verdict ([`verdict_key`]: time,
/// timestep, seq) and its cosine to the judged document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NearestRecord {
    /// Empty when its verdict could not be read at ingest time.
    pub doc_id: String,
    pub time: i64,
    pub timestep: u64,
    pub seq: u32,
    pub cosine: f32,
}

/// What one timestep consumed of a batch file. Keyed in `files` by the blake3 hash of the
/// file's bytes `[0, end)` (the whole file when the timestep consumed it to its end), so a file
/// whose whole content was committed before is found by its hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRecord {
    pub name: String,
    pub timestep: u64,
    pub docs: u64,
    pub committed_at: i64,
    /// The byte range consumed; `None` for records from before format 5 (each consumed its
    /// whole file).
    pub range: Option<FileRange>,
}

/// A byte range of a batch file consumed by one timestep: enough to read exactly the same
/// documents again (same bytes, same line numbers, so the same default ids).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRange {
    /// First byte consumed.
    pub start: u64,
    /// One past the last byte consumed (always just past a `\n`, or the end of the file).
    pub end: u64,
    /// 1-based line number of byte `start` in the file.
    pub first_line: u64,
    /// 1-based line number of byte `end`.
    pub next_line: u64,
    /// blake3 of the bytes `[start, end)`.
    pub hash: [u8; 32],
    /// The file's (device, inode) when it was read from disk; `None` for an in-memory batch.
    pub file: Option<(u64, u64)>,
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

/// One emerging topic as stored per timestep.
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
    /// Emerging or evolving (format ≥ 3; older records are migrated as emerging).
    pub kind: TopicKind,
    /// See [`novad_models::Topic::strength`].
    pub strength: f64,
    /// See [`novad_models::Topic::profile`].
    pub profile: Vec<f32>,
    /// The event this topic is a day of (format ≥ 10; None for other topic stages and older
    /// records).
    pub event: Option<u64>,
    /// Every member's doc id, in batch order (format ≥ 10; None for older records, which
    /// kept only `docs`). Keep `event` and `members` last: format-9 records gained their two
    /// `None` bytes.
    pub members: Option<Vec<String>>,
}

/// A webhook message waiting for its receiver: its body as sent, and how its delivery went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxRecord {
    /// The message's stable id (its `Idempotency-Key`): the same on every attempt.
    pub id: String,
    /// The receiver's URL.
    pub url: String,
    pub timestep: u64,
    /// Unix milliseconds when its timestep was committed, or when it was last made due again
    /// after being parked: the give-up age counts from here.
    pub created_at: i64,
    /// The JSON body, exactly as signed and sent.
    pub body: Vec<u8>,
    /// Attempts made so far.
    pub attempts: u32,
    /// Unix milliseconds before which it is not tried again (0: at once).
    pub next_at: i64,
    /// What the last attempt got (status or error), if one failed.
    pub last_error: Option<String>,
    /// Set when delivery gave up: the message waits for an operator (`novad status` lists
    /// it) and is not tried again.
    pub parked: bool,
}

/// Outbox key: the receiver's id (the first 8 bytes of blake3 of its URL), then the timestep
/// (big-endian), so one receiver's messages are one contiguous scan in timestep order.
pub fn outbox_key(url: &str, timestep: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&receiver_id(url));
    k[8..].copy_from_slice(&timestep.to_be_bytes());
    k
}

/// The 8-byte id of a receiver URL in [`outbox_key`].
pub fn receiver_id(url: &str) -> [u8; 8] {
    let mut id = [0u8; 8];
    id.copy_from_slice(&blake3::hash(url.as_bytes()).as_bytes()[..8]);
    id
}

/// Topic key: timestep then topic id (big-endian).
pub fn topic_key(timestep: u64, id: u32) -> Vec<u8> {
    let mut k = timestep.to_be_bytes().to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
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

/// Chunks of named state parts: key = name, 0x00, chunk index (u32 BE); each value at most
/// [`PART_CHUNK_BYTES`]. An empty part is stored as one empty chunk, so it reads back.
/// The key of chunk `i` of part `name` in [`PARTS`]: the name, 0x00, `i` as u32 big-endian.
pub fn part_chunk_key(name: &str, i: u32) -> Vec<u8> {
    let mut k = name.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(&u32_key(i));
    k
}

pub fn part_chunks(parts: &[(String, Vec<u8>)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, bytes) in parts {
        assert!(!name.as_bytes().contains(&0), "part names contain no NUL");
        let mut push = |i: usize, chunk: &[u8]| {
            out.push((part_chunk_key(name, i as u32), chunk.to_vec()));
        };
        if bytes.is_empty() {
            push(0, &[]);
        }
        for (i, c) in bytes.chunks(PART_CHUNK_BYTES).enumerate() {
            push(i, c);
        }
    }
    out
}

/// Reassemble parts from their chunks (in key order, as sled iterates). Every part's chunk
/// indices must run 0, 1, 2, … without a gap.
pub fn parts_from_chunks(
    chunks: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
) -> Result<std::collections::BTreeMap<String, Vec<u8>>, String> {
    let mut out: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
    let mut next: std::collections::BTreeMap<String, u32> = Default::default();
    for (k, v) in chunks {
        let cut = k
            .iter()
            .position(|&b| b == 0)
            .filter(|&p| k.len() == p + 5)
            .ok_or_else(|| format!("bad part chunk key {k:02x?}"))?;
        let name = String::from_utf8(k[..cut].to_vec())
            .map_err(|_| format!("part name is not UTF-8: {:02x?}", &k[..cut]))?;
        let idx = u32::from_be_bytes([k[cut + 1], k[cut + 2], k[cut + 3], k[cut + 4]]);
        let want = next.entry(name.clone()).or_insert(0);
        if idx != *want {
            return Err(format!(
                "part `{name}`: chunk {idx} where {want} was expected"
            ));
        }
        *want += 1;
        out.entry(name).or_default().extend_from_slice(&v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_round_trip_through_chunks_of_at_most_4_kib() {
        let parts: Vec<(String, Vec<u8>)> = vec![
            ("a".into(), vec![]),
            ("b".into(), (0..PART_CHUNK_BYTES).map(|i| i as u8).collect()),
            (
                "c".into(),
                (0..3 * PART_CHUNK_BYTES + 7)
                    .map(|i| (i * 7) as u8)
                    .collect(),
            ),
            ("window/00000003".into(), vec![1, 2, 3]),
        ];
        let mut chunks = part_chunks(&parts);
        assert!(chunks.iter().all(|(_, v)| v.len() <= PART_CHUNK_BYTES));
        assert_eq!(chunks.len(), 1 + 1 + 4 + 1);
        chunks.sort(); // sled iterates in key order
        let back = parts_from_chunks(chunks.clone().into_iter()).unwrap();
        assert_eq!(back.len(), parts.len());
        for (name, bytes) in &parts {
            assert_eq!(&back[name], bytes, "{name}");
        }
        // a missing chunk is detected
        let mut gap = chunks.clone();
        let i = gap.iter().position(|(k, _)| k.starts_with(b"c\0")).unwrap();
        gap.remove(i + 1);
        let e = parts_from_chunks(gap.into_iter()).unwrap_err();
        assert!(e.contains("part `c`") && e.contains("chunk 2"), "{e}");
        // a malformed key is detected
        let mut bad = chunks;
        bad.push((b"nonul".to_vec(), vec![]));
        assert!(parts_from_chunks(bad.into_iter()).is_err());
    }
}
