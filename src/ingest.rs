//! One batch file → one committed timestep. Shared by the daemon and `novad ingest`.

use std::path::Path;
use std::time::Instant;

use thiserror::Error;

use crate::batch::{parse_batch, BatchError, MAX_FILE_BYTES};
use crate::store::schema::{topic_key, TopicRecord};
use crate::store::schema::{FileRecord, TimestepRecord, VerdictRecord};
use crate::store::{CommitStats, Store, StoreError, TimestepWrite};
use novad_models::{Engine, ModelParams};
use novad_models::{EngineError, StepStats};

#[derive(Debug, Error)]
pub enum IngestError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// What happened to one batch file.
#[derive(Debug)]
pub enum Outcome {
    /// A new timestep was committed and flushed.
    Committed {
        timestep: u64,
        stats: Box<StepStats>,
        commit: CommitStats,
        /// Whole ingest, and the part spent committing + flushing the store.
        seconds: f64,
        seconds_store: f64,
    },
    /// The same content was committed before (e.g. a crash after the flush, before the move).
    AlreadyCommitted { timestep: u64 },
    /// Nothing was applied; the reason says what and where.
    Rejected(String),
}

/// The store and the model it holds, kept in step: after every successful ingest the model in
/// memory equals the model in the store.
pub struct Ingestor {
    pub store: Store,
    pub engine: Engine,
}

impl Ingestor {
    /// Open the store in `dir` with its model (a new store gets `params` or the ℓ1 defaults;
    /// an existing one must match `params`, kind included, when they are given).
    pub fn open(dir: &Path, params: Option<&ModelParams>) -> Result<Ingestor, StoreError> {
        let mut store = Store::open(dir)?;
        let engine = store.engine(params)?;
        Ok(Ingestor { store, engine })
    }

    /// Read and ingest a file.
    pub fn ingest_path(&mut self, path: &Path, now_ms: i64) -> Result<Outcome, IngestError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let read_err = |source| IngestError::Read {
            path: path.display().to_string(),
            source,
        };
        let md = std::fs::metadata(path).map_err(read_err)?;
        if md.len() > MAX_FILE_BYTES {
            return Ok(Outcome::Rejected(format!(
                "file of {} bytes exceeds the limit of {MAX_FILE_BYTES} bytes",
                md.len()
            )));
        }
        let bytes = std::fs::read(path).map_err(read_err)?;
        self.ingest_bytes(&name, &bytes, now_ms)
    }

    /// Ingest a batch given as bytes: parse, step the model, commit one transaction, flush.
    /// On rejection or error nothing is applied and the model in memory is unchanged.
    pub fn ingest_bytes(
        &mut self,
        name: &str,
        bytes: &[u8],
        now_ms: i64,
    ) -> Result<Outcome, IngestError> {
        let t0 = Instant::now();
        let hash: [u8; 32] = *blake3::hash(bytes).as_bytes();
        if let Some(rec) = self.store.file_record(&hash)? {
            return Ok(Outcome::AlreadyCommitted {
                timestep: rec.timestep,
            });
        }
        let docs = match parse_batch(name, bytes, now_ms) {
            Ok(d) => d,
            Err(e @ BatchError::Line { .. }) | Err(e @ BatchError::File(_)) => {
                return Ok(Outcome::Rejected(e.to_string()))
            }
        };
        let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
        let (model, out) = match self.engine.step(&texts) {
            Ok(r) => r,
            Err(e @ EngineError::NonFinite(_)) | Err(e @ EngineError::Inconsistent(_)) => {
                return Ok(Outcome::Rejected(format!(
                    "the engine could not process it: {e}"
                )))
            }
            Err(EngineError::Params(e)) => {
                return Ok(Outcome::Rejected(format!("invalid parameters: {e}")))
            }
        };
        let timestep = self.engine.timestep();
        let verdicts: Vec<VerdictRecord> = docs
            .iter()
            .zip(&out.verdicts)
            .enumerate()
            .map(|(i, (d, v))| VerdictRecord {
                doc_id: d.id.clone(),
                time: d.time,
                timestep,
                seq: i as u32,
                source: name.to_string(),
                score: v.score,
                novel: v.novel,
                bootstrap: v.bootstrap,
                empty: v.empty,
                at_ceiling: v.at_ceiling,
                terms: v
                    .terms
                    .iter()
                    .map(|(t, r)| (t.clone(), *r as f32))
                    .collect(),
            })
            .collect();
        let topics: Vec<(Vec<u8>, Vec<u8>)> = out
            .topics
            .iter()
            .enumerate()
            .map(|(id, t)| {
                let rec = TopicRecord {
                    timestep,
                    id: id as u32,
                    time: t
                        .members
                        .iter()
                        .map(|&j| docs[j].time)
                        .min()
                        .unwrap_or(now_ms),
                    size: t.members.len() as u32,
                    terms: t
                        .terms
                        .iter()
                        .map(|&(tid, w)| (model.vocab().term(tid).to_string(), w))
                        .collect(),
                    docs: t
                        .representatives
                        .iter()
                        .map(|&j| docs[j].id.clone())
                        .collect(),
                    mean_score: t.mean_score,
                    kind: t.kind,
                    strength: t.strength,
                    profile: t.profile.clone(),
                };
                (
                    topic_key(timestep, id as u32),
                    postcard::to_stdvec(&rec).unwrap(),
                )
            })
            .collect();
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        let write = TimestepWrite {
            verdicts,
            hash,
            file: FileRecord {
                name: name.to_string(),
                timestep,
                docs: docs.len() as u64,
                committed_at: now_ms,
            },
            record: TimestepRecord {
                timestep,
                file: name.to_string(),
                hash: hex,
                committed_at: now_ms,
                stats: out.stats.clone(),
            },
            topics,
        };
        let t_store = Instant::now();
        let commit = self.store.commit(&model, &write)?;
        // The transaction is applied (visible to readers and to the file-hash check) even if
        // the flush below fails, so the model in memory must follow it now: a retry of this
        // file then finds it committed, and the next batch steps from this timestep.
        self.engine = model;
        self.store.flush()?;
        let seconds_store = t_store.elapsed().as_secs_f64();
        Ok(Outcome::Committed {
            timestep,
            stats: Box::new(out.stats),
            commit,
            seconds: t0.elapsed().as_secs_f64(),
            seconds_store,
        })
    }
}
