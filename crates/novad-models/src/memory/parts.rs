//! The memory's state as named parts of at most [`MAX_PART_BYTES`] bytes.
//!
//! Layout (append-mostly): `memory/meta` (parameters and counters, postcard) and one part per
//! occupied slot, `memory/doc/<slot as 8 hex digits>`, holding that document in a fixed
//! little-endian layout (version byte, `no` u64, timestep u64, seq u32, time i64, term count
//! u16, then the term keys as u64 and the weights as f32). A batch of b documents rewrites
//! `memory/meta`, writes at most b document parts and deletes at most b (evictions), whatever
//! the number stored.

use serde::{Deserialize, Serialize};

use super::calibrate::Calibration;
use super::hybrid::{Drift, Fusion, Hybrid, HybridParams};
use super::search::{DocMemory, MemoryPlan, StoredDoc};
use super::{DocRef, MemoryError, MemoryParams, TermVector};
use crate::threshold::{ScoreHistory, BINS};

/// Largest part, in bytes.
pub const MAX_PART_BYTES: usize = 4096;
/// Bytes of a document part before its terms (31 used, rounded up for headroom).
pub(crate) const DOC_HEADER_BYTES: usize = 40;
const DOC_VERSION: u8 = 1;
const META: &str = "memory/meta";
/// Prefix of the memory's document parts (one per stored document).
pub const DOC_PREFIX: &str = "memory/doc/";

/// Parts to write and parts to delete, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartsDelta {
    pub put: Vec<(String, Vec<u8>)>,
    pub delete: Vec<String>,
}

impl PartsDelta {
    /// Number of parts written or deleted.
    pub fn len(&self) -> usize {
        self.put.len() + self.delete.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn extend(&mut self, other: PartsDelta) {
        self.put.extend(other.put);
        self.delete.extend(other.delete);
    }
    /// Apply to a full set of parts (a map by name), as a store would.
    pub fn apply_to(&self, parts: &mut std::collections::BTreeMap<String, Vec<u8>>) {
        for n in &self.delete {
            parts.remove(n);
        }
        for (n, b) in &self.put {
            parts.insert(n.clone(), b.clone());
        }
    }
}

#[derive(Serialize, Deserialize)]
struct MetaRepr {
    version: u32,
    params: MemoryParams,
    offered: u64,
    rng: u64,
    slots_len: u64,
}

fn doc_name(slot: u32) -> String {
    format!("{DOC_PREFIX}{slot:08x}")
}

fn encode_doc(d: &StoredDoc) -> Vec<u8> {
    let n = d.vector.len();
    let mut out = Vec::with_capacity(31 + 12 * n);
    out.push(DOC_VERSION);
    out.extend(d.no.to_le_bytes());
    out.extend(d.reference.timestep.to_le_bytes());
    out.extend(d.reference.seq.to_le_bytes());
    out.extend(d.reference.time.to_le_bytes());
    out.extend((n as u16).to_le_bytes());
    for k in &d.vector.keys {
        out.extend(k.to_le_bytes());
    }
    for w in &d.vector.weights {
        out.extend(w.to_le_bytes());
    }
    out
}

fn decode_doc(name: &str, b: &[u8], max_terms: usize) -> Result<StoredDoc, MemoryError> {
    let bad = |msg: String| MemoryError::Part {
        part: name.to_string(),
        msg,
    };
    if b.len() < 31 || b[0] != DOC_VERSION {
        return Err(bad(format!(
            "not a version-{DOC_VERSION} document ({} bytes)",
            b.len()
        )));
    }
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let n = u16::from_le_bytes([b[29], b[30]]) as usize;
    if b.len() != 31 + 12 * n {
        return Err(bad(format!("{} bytes for {n} terms", b.len())));
    }
    if n == 0 || n > max_terms {
        return Err(bad(format!("{n} terms, expected 1..={max_terms}")));
    }
    let keys: Vec<u64> = (0..n).map(|i| u64_at(31 + 8 * i)).collect();
    let w0 = 31 + 8 * n;
    let weights: Vec<f32> = (0..n)
        .map(|i| f32::from_le_bytes(b[w0 + 4 * i..w0 + 4 * i + 4].try_into().expect("4")))
        .collect();
    if keys.windows(2).any(|w| w[0] >= w[1]) {
        return Err(bad("term keys are not strictly increasing".into()));
    }
    if weights.iter().any(|w| !(w.is_finite() && *w > 0.0)) {
        return Err(bad("a weight is not a finite number > 0".into()));
    }
    let norm: f64 = weights.iter().map(|&w| w as f64 * w as f64).sum();
    if (norm - 1.0).abs() > 1e-3 {
        return Err(bad(format!("vector is not unit ℓ2 (‖v‖² = {norm})")));
    }
    let reference = DocRef {
        timestep: u64_at(9),
        seq: u32::from_le_bytes(b[17..21].try_into().expect("4")),
        time: u64_at(21) as i64,
    };
    Ok(StoredDoc::new(
        u64_at(1),
        reference,
        TermVector { keys, weights },
    ))
}

fn meta_bytes(params: &MemoryParams, offered: u64, rng: u64, slots_len: usize) -> Vec<u8> {
    postcard::to_stdvec(&MetaRepr {
        version: 1,
        params: params.clone(),
        offered,
        rng,
        slots_len: slots_len as u64,
    })
    .expect("memory meta is plain data")
}

impl DocMemory {
    /// The whole state as named parts, sorted by name; every part ≤ [`MAX_PART_BYTES`].
    /// Panics on a memory whose [`super::Share`] dropped vectors (a cluster replica's, which
    /// never persists): its documents are not all here.
    pub fn state_parts(&self) -> Vec<(String, Vec<u8>)> {
        assert!(
            self.share.keeps_all(),
            "the state of a memory that keeps only some vectors"
        );
        let mut out = vec![(
            META.to_string(),
            meta_bytes(&self.params, self.offered, self.rng, self.slots.len()),
        )];
        out.extend(self.docs().map(|(s, d)| (doc_name(s), encode_doc(d))));
        out
    }

    /// Rebuild a memory from [`Self::state_parts`] (parts with other prefixes are ignored).
    /// Checks every part and the caps; the result searches exactly like the original.
    pub fn from_state_parts<'a>(
        parts: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<DocMemory, MemoryError> {
        let mut meta: Option<MetaRepr> = None;
        let mut docs: Vec<(u32, &str, &[u8])> = Vec::new();
        for (name, bytes) in parts {
            if name == META {
                meta = Some(postcard::from_bytes(bytes).map_err(|e| MemoryError::Part {
                    part: name.to_string(),
                    msg: e.to_string(),
                })?);
            } else if let Some(hex) = name.strip_prefix(DOC_PREFIX) {
                let slot = u32::from_str_radix(hex, 16).map_err(|_| MemoryError::Part {
                    part: name.to_string(),
                    msg: "not a slot number".into(),
                })?;
                docs.push((slot, name, bytes));
            }
        }
        let meta = meta.ok_or_else(|| MemoryError::Missing(META.to_string()))?;
        if meta.version != 1 {
            return Err(MemoryError::Inconsistent(format!(
                "unknown memory layout version {}",
                meta.version
            )));
        }
        let mut m = DocMemory::new(meta.params)?;
        let len = usize::try_from(meta.slots_len)
            .ok()
            .filter(|&l| l <= m.params.max_docs)
            .ok_or_else(|| MemoryError::Inconsistent(format!("{} slots", meta.slots_len)))?;
        m.slots = vec![None; len];
        for (slot, name, bytes) in docs {
            let d = decode_doc(name, bytes, m.params.max_terms_per_doc)?;
            if slot as usize >= len || d.no >= meta.offered {
                return Err(MemoryError::Inconsistent(format!(
                    "{name}: slot {slot} / document {} outside {len} slots / {} offered",
                    d.no, meta.offered
                )));
            }
            m.slots[slot as usize] = Some(d);
        }
        m.offered = meta.offered;
        m.rng = meta.rng;
        m.rebuild();
        if m.len() > m.params.max_docs || m.bytes > m.params.max_bytes {
            return Err(MemoryError::Inconsistent(format!(
                "{} documents / {} bytes exceed the caps",
                m.len(),
                m.bytes
            )));
        }
        Ok(m)
    }
}

impl MemoryPlan {
    /// The parts this plan changes when applied to `mem` (the state it was planned on): the
    /// meta part, one part per stored document, one deletion per slot it empties.
    pub fn delta(&self, mem: &DocMemory) -> PartsDelta {
        let mut d = PartsDelta {
            put: vec![(
                META.to_string(),
                meta_bytes(&mem.params, self.offered, self.rng, self.slots_len),
            )],
            delete: Vec::new(),
        };
        for (&s, doc) in &self.slots {
            match doc {
                Some(doc) => d.put.push((doc_name(s), encode_doc(doc))),
                None if self.removed.contains(&s) => d.delete.push(doc_name(s)),
                None => {}
            }
        }
        d
    }
}

const HYBRID_META: &str = "hybrid/meta";
const HISTORY_NAMES: [&str; 3] = ["model", "nn", "fused"];
/// The history of raw fused scores of a calibrated hybrid.
const RAW_HISTORY: &str = "raw";
/// The anchor of a calibrated hybrid's drift correction (postcard `Option<f64>`).
const ANCHOR: &str = "hybrid/anchor";
/// Histogram bins per history part (500 × 8 bytes = 4000 bytes).
const BINS_PER_PART: usize = 500;

/// `hybrid/meta` of an uncalibrated hybrid (version 1, the layout of stores created before
/// calibration existed).
#[derive(Serialize, Deserialize)]
struct HybridMeta {
    version: u32,
    fusion: Fusion,
    nn_weight: f64,
    half_life: f64,
}

/// `hybrid/meta` of a calibrated hybrid (version 2): version 1's fields and the calibration.
#[derive(Serialize, Deserialize)]
struct HybridMetaV2 {
    version: u32,
    fusion: Fusion,
    nn_weight: f64,
    half_life: f64,
    calibration: Calibration,
}

/// The parts of one history: `hybrid/history/<name>/<i>`, each [`BINS_PER_PART`] weights as
/// little-endian f64.
fn one_history_parts(name: &str, h: &ScoreHistory, out: &mut Vec<(String, Vec<u8>)>) {
    for (i, c) in h.weights.chunks(BINS_PER_PART).enumerate() {
        let bytes = c.iter().flat_map(|w| w.to_le_bytes()).collect();
        out.push((format!("hybrid/history/{name}/{i}"), bytes));
    }
}

/// The parts of three histories (model, nn, fused).
pub(crate) fn history_parts(h: &[ScoreHistory; 3]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, h) in HISTORY_NAMES.iter().zip(h) {
        one_history_parts(name, h, &mut out);
    }
    out
}

/// The parts of a calibrated hybrid's drift state: the raw history and the anchor.
pub(crate) fn drift_parts(d: &Drift) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    one_history_parts(RAW_HISTORY, &d.raw_history, &mut out);
    out.push((
        ANCHOR.to_string(),
        postcard::to_stdvec(&d.anchor).expect("an anchor is plain data"),
    ));
    out
}

/// Decode the history `name` from the parts `find` gives, checking every weight.
fn read_history(
    name: &str,
    find: &dyn Fn(&str) -> Result<Vec<u8>, MemoryError>,
) -> Result<ScoreHistory, MemoryError> {
    let mut weights = Vec::with_capacity(BINS);
    for i in 0..BINS.div_ceil(BINS_PER_PART) {
        let pn = format!("hybrid/history/{name}/{i}");
        let b = find(&pn)?;
        let want = BINS_PER_PART.min(BINS - i * BINS_PER_PART) * 8;
        if b.len() != want {
            return Err(part_err(&pn, format!("{} bytes, expected {want}", b.len())));
        }
        for c in b.chunks(8) {
            let w = f64::from_le_bytes(c.try_into().expect("8 bytes"));
            if !(w.is_finite() && w >= 0.0) {
                return Err(part_err(&pn, format!("weight {w} is not finite and ≥ 0")));
            }
            weights.push(w);
        }
    }
    let total = weights.iter().sum();
    Ok(ScoreHistory { weights, total })
}

fn part_err(part: &str, msg: String) -> MemoryError {
    MemoryError::Part {
        part: part.to_string(),
        msg,
    }
}

impl Hybrid {
    /// The whole state as named parts, sorted by name, every part ≤ [`MAX_PART_BYTES`]:
    /// `hybrid/meta`, the history parts and the memory's parts ([`DocMemory::state_parts`]).
    pub fn state_parts(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = self.fixed_parts();
        out.extend(self.memory.state_parts());
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// `hybrid/meta` and the history parts (and, calibrated, the drift parts).
    fn fixed_parts(&self) -> Vec<(String, Vec<u8>)> {
        let p = &self.params;
        let meta = match &p.calibration {
            None => postcard::to_stdvec(&HybridMeta {
                version: 1,
                fusion: p.fusion,
                nn_weight: p.nn_weight,
                half_life: p.half_life,
            }),
            Some(c) => postcard::to_stdvec(&HybridMetaV2 {
                version: 2,
                fusion: p.fusion,
                nn_weight: p.nn_weight,
                half_life: p.half_life,
                calibration: c.clone(),
            }),
        };
        let mut out = vec![(
            HYBRID_META.to_string(),
            meta.expect("hybrid meta is plain data"),
        )];
        out.extend(history_parts(&[
            self.model_history.clone(),
            self.nn_history.clone(),
            self.fused_history.clone(),
        ]));
        if p.calibration.is_some() {
            out.extend(drift_parts(&self.drift));
        }
        out
    }

    /// [`Self::state_parts`] without the memory's document parts (those under [`DOC_PREFIX`]):
    /// the few parts every step rewrites.
    pub fn state_parts_except_docs(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = self.fixed_parts();
        out.push((
            META.to_string(),
            meta_bytes(
                &self.memory.params,
                self.memory.offered,
                self.memory.rng,
                self.memory.slots.len(),
            ),
        ));
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Rebuild from [`Self::state_parts`], checking every part.
    pub fn from_state_parts<'a>(
        parts: impl IntoIterator<Item = (&'a str, &'a [u8])> + Clone,
    ) -> Result<Hybrid, MemoryError> {
        let find = |name: &str| {
            parts
                .clone()
                .into_iter()
                .find(|(n, _)| *n == name)
                .map(|p| p.1.to_vec())
                .ok_or_else(|| MemoryError::Missing(name.to_string()))
        };
        let meta_bytes = find(HYBRID_META)?;
        let (meta, calibration) = match postcard::from_bytes::<u32>(&meta_bytes) {
            Ok(2) => {
                let m: HybridMetaV2 = postcard::from_bytes(&meta_bytes)
                    .map_err(|e| part_err(HYBRID_META, e.to_string()))?;
                let v1 = HybridMeta {
                    version: 1,
                    fusion: m.fusion,
                    nn_weight: m.nn_weight,
                    half_life: m.half_life,
                };
                (v1, Some(m.calibration))
            }
            Ok(1) => (
                postcard::from_bytes::<HybridMeta>(&meta_bytes)
                    .map_err(|e| part_err(HYBRID_META, e.to_string()))?,
                None,
            ),
            Ok(v) => return Err(part_err(HYBRID_META, format!("unknown version {v}"))),
            Err(e) => return Err(part_err(HYBRID_META, e.to_string())),
        };
        let mut hist: Vec<ScoreHistory> = Vec::new();
        for name in HISTORY_NAMES {
            hist.push(read_history(name, &find)?);
        }
        let drift = match &calibration {
            None => Drift::default(),
            Some(_) => {
                let raw_history = read_history(RAW_HISTORY, &find)?;
                let anchor: Option<f64> = postcard::from_bytes(&find(ANCHOR)?)
                    .map_err(|e| part_err(ANCHOR, e.to_string()))?;
                if anchor.is_some_and(|a| !(0.0..=1.0).contains(&a)) {
                    return Err(part_err(ANCHOR, format!("{anchor:?} is not in [0, 1]")));
                }
                Drift {
                    raw_history,
                    anchor,
                }
            }
        };
        let memory = DocMemory::from_state_parts(parts)?;
        let params = HybridParams {
            memory: memory.params().clone(),
            fusion: meta.fusion,
            nn_weight: meta.nn_weight,
            half_life: meta.half_life,
            calibration,
        };
        params.validate()?;
        let [model_history, nn_history, fused_history]: [ScoreHistory; 3] =
            hist.try_into().expect("three histories");
        Ok(Hybrid {
            params,
            memory,
            model_history,
            nn_history,
            fused_history,
            drift,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{Eviction, MAX_TERMS_PER_DOC};
    use super::*;

    fn doc(i: u64, terms: usize) -> TermVector {
        TermVector::from_pairs(
            (0..terms as u64)
                .map(|k| (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i, 1.0 + k as f64))
                .collect(),
        )
    }

    fn r(i: u64) -> DocRef {
        DocRef {
            timestep: i / 7,
            seq: (i % 7) as u32,
            time: -(i as i64),
        }
    }

    fn as_map(parts: Vec<(String, Vec<u8>)>) -> BTreeMap<String, Vec<u8>> {
        parts.into_iter().collect()
    }

    fn load(parts: &BTreeMap<String, Vec<u8>>) -> DocMemory {
        DocMemory::from_state_parts(parts.iter().map(|(n, b)| (n.as_str(), b.as_slice()))).unwrap()
    }

    #[test]
    fn round_trip_and_deltas_reproduce_the_state_with_o_batch_parts() {
        for ev in [Eviction::Oldest, Eviction::Reservoir] {
            let p = MemoryParams {
                max_docs: 30,
                eviction: ev,
                max_terms_per_doc: MAX_TERMS_PER_DOC,
                ..Default::default()
            };
            let mut m = DocMemory::new(p).unwrap();
            let mut stored = as_map(m.state_parts());
            for step in 0..12u64 {
                let b = 1 + (step as usize * 5) % 9;
                let vs: Vec<TermVector> = (0..b)
                    .map(|i| doc(step * 100 + i as u64, 3 + i * 40))
                    .collect();
                let batch: Vec<_> = vs
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (r(step * 10 + i as u64), v))
                    .collect();
                let plan = m.plan(&batch);
                let delta = plan.delta(&m);
                // one meta part, at most one write and one delete per document of the batch
                assert!(
                    delta.len() <= 1 + 2 * b,
                    "{} parts for {b} docs",
                    delta.len()
                );
                assert!(delta.put.iter().all(|(_, v)| v.len() <= MAX_PART_BYTES));
                m.apply(plan);
                delta.apply_to(&mut stored);
                assert_eq!(stored, as_map(m.state_parts()), "{ev:?} step {step}");
                let back = load(&stored);
                assert_eq!(back.state_parts(), m.state_parts());
                for v in &vs {
                    assert_eq!(back.nearest(v), m.nearest(v));
                }
                // the rebuilt memory plans the next batch exactly like the original
                let next = doc(999 + step, 5);
                let nb = [(r(1000), &next)];
                assert_eq!(back.plan(&nb), m.plan(&nb));
            }
        }
    }

    #[test]
    fn the_longest_document_fits_one_part() {
        let mut m = DocMemory::new(MemoryParams {
            max_terms_per_doc: MAX_TERMS_PER_DOC,
            ..Default::default()
        })
        .unwrap();
        let v = doc(1, 5000);
        m.insert(&[(r(0), &v)]);
        let parts = m.state_parts();
        let (_, bytes) = parts
            .iter()
            .find(|(n, _)| n.starts_with(DOC_PREFIX))
            .unwrap();
        assert!(bytes.len() <= MAX_PART_BYTES, "{}", bytes.len());
        assert!(bytes.len() > MAX_PART_BYTES - 24, "the bound is tight");
    }

    #[test]
    fn damaged_parts_are_rejected_with_their_name() {
        let mut m = DocMemory::new(MemoryParams::default()).unwrap();
        let v = doc(3, 10);
        m.insert(&[(r(0), &v)]);
        let parts = as_map(m.state_parts());
        let name = parts
            .keys()
            .find(|n| n.starts_with(DOC_PREFIX))
            .unwrap()
            .clone();
        let mut bad = parts.clone();
        bad.get_mut(&name).unwrap().truncate(40);
        let e = DocMemory::from_state_parts(bad.iter().map(|(n, b)| (n.as_str(), b.as_slice())))
            .unwrap_err();
        assert!(e.to_string().contains(&name), "{e}");
        let mut bad = parts.clone();
        let b = bad.get_mut(&name).unwrap();
        let last = b.len() - 4;
        b[last..].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(matches!(
            DocMemory::from_state_parts(bad.iter().map(|(n, b)| (n.as_str(), b.as_slice()))),
            Err(MemoryError::Part { .. })
        ));
        let mut bad = parts;
        bad.remove(META);
        assert_eq!(
            DocMemory::from_state_parts(bad.iter().map(|(n, b)| (n.as_str(), b.as_slice())))
                .unwrap_err(),
            MemoryError::Missing(META.into())
        );
    }
}
