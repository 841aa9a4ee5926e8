//! Batch files → committed timesteps. Shared by the daemon and `novad ingest`.
//!
//! A file is consumed in order, in byte ranges of at most [`Limits`] documents / bytes, each
//! range one timestep committed in one transaction together with a file record saying which
//! bytes it consumed ([`FileRecord`], keyed by the hash of the file's bytes up to the range's
//! end) and the file's progress (`meta/progress\0<name>`). After a crash or a stop the next
//! ingest of the same file (same device, inode and content up to the recorded end) resumes at
//! that end; a file that grew after its last commit gets its new tail as the next timestep.
//! See [`file`] for the checks made before every commit.

mod ahead;
pub mod file;
mod later;

use std::path::Path;
use std::time::Instant;

use thiserror::Error;

use crate::batch::{parse_batch, BatchDoc, BatchError};
use crate::store::schema::{topic_key, TopicLink, TopicRecord};
use crate::store::schema::{FileRange, HybridRecord, NearestRecord, VerdictRecord};
use crate::store::{CommitStats, Store, StoreError};
use novad_models::memory::HybridVerdict;
use novad_models::{Engine, ModelParams};
use novad_models::{EngineError, StepOutput, StepStats};

pub use ahead::Upcoming;
pub use file::{Begin, FileCheck, FileJob};
pub use later::Settled;

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

/// Most documents and bytes one timestep takes from a file; a larger file is consumed as
/// several consecutive timesteps in file order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_docs: usize,
    pub max_bytes: u64,
}

/// Default documents per timestep.
pub const DEFAULT_MAX_BATCH_DOCS: usize = 10_000;
/// Default bytes per timestep.
pub const DEFAULT_MAX_BATCH_BYTES: u64 = 16 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_docs: DEFAULT_MAX_BATCH_DOCS,
            max_bytes: DEFAULT_MAX_BATCH_BYTES,
        }
    }
}

/// What happened to one timestep's worth of a batch.
#[derive(Debug)]
pub enum Outcome {
    /// A new timestep was committed and flushed.
    Committed {
        timestep: u64,
        stats: Box<StepStats>,
        commit: CommitStats,
        /// Bytes `[start, end)` of the file it consumed.
        start: u64,
        end: u64,
        /// Whole ingest, and the part spent committing + flushing the store.
        seconds: f64,
        seconds_store: f64,
        /// Where the rest went: the engine's step (of which the hybrid detector
        /// `seconds_hybrid`), and the commit's transaction (before the flush).
        seconds_step: f64,
        seconds_hybrid: f64,
        seconds_commit: f64,
        /// Documents in the hybrid detector's memory after this timestep (None without it).
        memory_docs: Option<usize>,
    },
    /// A new timestep was stepped and its commit handed to the store's committer thread
    /// ([`Ingestor::defer`]): not durable until settled, when its [`Outcome::Committed`] is
    /// reported by [`Ingestor::take_settled`].
    Deferred { timestep: u64, start: u64, end: u64 },
    /// The same content was committed before (e.g. a crash after the flush, before the move).
    AlreadyCommitted { timestep: u64 },
    /// The whole content equals what was committed from another file (or another copy of it).
    Duplicate { of: String, timestep: u64 },
    /// Nothing of this part was applied; the reason says what and where.
    Rejected(String),
    /// The file changed or was replaced while being read; nothing was applied, read it again
    /// once it is stable.
    Changed(String),
    /// The rest of the file held only blank lines: nothing to commit.
    Blank { start: u64, end: u64 },
}

/// The store and the model it holds, kept in step: after every successful ingest the model in
/// memory equals the model in the store.
pub struct Ingestor {
    pub store: Store,
    pub engine: Engine,
    /// When set, every step is shared with these replicas of the model (a cluster's leader).
    pub replicas: Option<Box<dyn Replicas>>,
    /// Commit in the background: a timestep's transaction and flush run on the store's
    /// committer thread while the next timestep steps (see [`Store::commit_later`]). The model
    /// in memory then runs one timestep ahead of the durable store; the caller moves a batch
    /// file only once its last timestep is settled ([`Self::settle`], [`Self::in_flight`]).
    pub defer: bool,
    /// The timesteps stepped and not yet durable, and those settled since the caller last
    /// took them.
    later: later::Later,
    /// The file the caller takes after the current one ([`Self::read_ahead`]), and its
    /// validation once made ahead of its turn.
    upcoming: Option<Upcoming>,
    prepared: Option<ahead::Prepared>,
}

/// Replicas of the engine's model elsewhere that share its steps (see [`crate::cluster`]).
pub trait Replicas {
    /// Step `engine` on the batch as [`Engine::step_at_moving`] does (same result), sharing
    /// the work with the replicas.
    /// `before`, when given, is called once with the engine as it is before the step (the
    /// last timestep's state), right after the batch has gone out to the replicas and before
    /// the step: the leader's work on the last timestep (its records, its commit) and its
    /// reading of the next file then overlap the replicas' start on this one. It returns the
    /// next file's first batch when it read it ([`ahead`]): the replicas may be sent it at
    /// the end of this step, and the next call steps on it when it is given the same batch.
    fn step(
        &mut self,
        engine: &mut Engine,
        texts: &[&str],
        times: &[i64],
        before: Option<Before<'_>>,
    ) -> Result<(Engine, StepOutput), EngineError>;
    /// The engine the last step returned is now the committed state.
    fn committed(&mut self);
}

/// The leader's work beside a shared step (see [`Replicas::step`]).
pub type Before<'a> = &'a mut dyn FnMut(&Engine) -> Option<Batch>;

/// The documents of a batch as a step takes them: texts and times (Unix ms), in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub texts: Vec<String>,
    pub times: Vec<i64>,
}

/// Where the documents of a commit come from.
struct Source<'a> {
    name: &'a str,
    /// `files` key: blake3 of the file's bytes up to `range.end`.
    key: [u8; 32],
    range: FileRange,
    /// Record the file's progress under its name.
    progress: bool,
    /// The range is the file's last (the next file may be read meanwhile).
    last: bool,
}

impl Ingestor {
    /// Open the store in `dir` with its model (a new store gets `params` or the ℓ1 defaults;
    /// an existing one must match `params`, kind included, when they are given).
    pub fn open(dir: &Path, params: Option<&ModelParams>) -> Result<Ingestor, StoreError> {
        let mut store = Store::open(dir)?;
        let engine = store.engine(params)?;
        Ok(Ingestor {
            store,
            engine,
            replicas: None,
            defer: false,
            later: later::Later::default(),
            upcoming: None,
            prepared: None,
        })
    }

    /// Ingest a whole file: one timestep per [`Limits`]-sized range, until the length the file
    /// had when it was opened. Stops at the first outcome that is not a commit. Returns the
    /// outcomes in order.
    pub fn ingest_path(
        &mut self,
        path: &Path,
        limits: Limits,
        now_ms: i64,
    ) -> Result<Vec<Outcome>, IngestError> {
        let mut job = match self.begin(path, now_ms, limits)? {
            Begin::Job(job) => job,
            Begin::AlreadyCommitted { timestep, .. } => {
                return Ok(vec![Outcome::AlreadyCommitted { timestep }])
            }
            Begin::Duplicate { of, timestep } => {
                return Ok(vec![Outcome::Duplicate { of, timestep }])
            }
            Begin::Rejected(why) => return Ok(vec![Outcome::Rejected(why)]),
        };
        let mut out = Vec::new();
        while !job.done() {
            let o = self.next_timestep(&mut job, limits, now_ms)?;
            let go_on = matches!(
                o,
                Outcome::Committed { .. } | Outcome::Deferred { .. } | Outcome::Blank { .. }
            );
            out.push(o);
            if !go_on {
                break;
            }
        }
        Ok(out)
    }

    /// Ingest a batch given as bytes, as one timestep: parse, step the model, commit one
    /// transaction, flush. On rejection or error nothing is applied and the model in memory is
    /// unchanged.
    pub fn ingest_bytes(
        &mut self,
        name: &str,
        bytes: &[u8],
        now_ms: i64,
    ) -> Result<Outcome, IngestError> {
        let t0 = Instant::now();
        let key: [u8; 32] = *blake3::hash(bytes).as_bytes();
        // a timestep not yet durable of this name or content writes the record read here
        self.settle_if(name, Some(&key))?;
        if let Some(rec) = self.store.file_record(&key)? {
            return Ok(if rec.name == name {
                Outcome::AlreadyCommitted {
                    timestep: rec.timestep,
                }
            } else {
                Outcome::Duplicate {
                    of: rec.name,
                    timestep: rec.timestep,
                }
            });
        }
        let docs = match parse_batch(name, bytes, now_ms) {
            Ok(d) => d,
            Err(e @ BatchError::Line { .. }) | Err(e @ BatchError::File(_)) => {
                return Ok(Outcome::Rejected(e.to_string()))
            }
        };
        let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        let src = Source {
            name,
            key,
            range: FileRange {
                start: 0,
                end: bytes.len() as u64,
                first_line: 1,
                next_line: lines + 1,
                hash: key,
                file: None,
            },
            progress: false,
            last: false,
        };
        self.commit_docs(&src, &docs, now_ms, t0)
    }

    /// The file the caller takes once the current one is done, if any. A cluster's leader
    /// reads it ahead during the current file's last timestep and sends its first range to
    /// the replicas at the end of that step ([`ahead`]); [`Self::begin`] of that file takes
    /// the validation made then.
    pub fn read_ahead(&mut self, up: Option<Upcoming>) {
        self.upcoming = up.filter(|_| self.replicas.is_some());
        // a validation made for a file that is not the next one any more is dropped
        let next = self.upcoming.as_ref().map(|u| u.path.as_path());
        if self
            .prepared
            .as_ref()
            .is_some_and(|p| Some(p.path()) != next)
        {
            self.prepared = None;
        }
    }

    /// Step the model on `docs` and commit the timestep with its records; flush. With
    /// [`Self::defer`], the records and the commit are worked out once the next timestep's
    /// batch has gone out to the replicas (or at [`Self::settle`]), and applied in the
    /// background: the outcome is then [`Outcome::Deferred`].
    fn commit_docs(
        &mut self,
        src: &Source,
        docs: &[BatchDoc],
        now_ms: i64,
        t0: Instant,
    ) -> Result<Outcome, IngestError> {
        let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
        let times: Vec<i64> = docs.iter().map(|d| d.time).collect();
        if self.engine.is_spent() {
            // a step whose commit failed moved the detector's memory away: the store still
            // holds the state before it, which is the state to go on from (once the commit in
            // flight, if any, has landed)
            self.settle()?;
            self.engine = self.store.engine(None)?;
        }
        let t_step = Instant::now();
        // the memory is updated in place: `self.engine` is spent until replaced below
        let (stepped, failed) = match &mut self.replicas {
            Some(r) => {
                // the timestep before this one is written, and the next file read, while the
                // replicas start on this one
                let waiting = self.later.has_stepped();
                let upcoming = if src.last { self.upcoming.take() } else { None };
                let (store, later) = (&mut self.store, &mut self.later);
                let prepared = &mut self.prepared;
                let mut failed = None;
                let mut meanwhile = |e: &Engine| {
                    if waiting {
                        failed = later.hand_over(store, e).err();
                    }
                    let now_ms = chrono::Utc::now().timestamp_millis();
                    let p = ahead::prepare(upcoming.as_ref()?, now_ms)?;
                    let batch = p.batch();
                    *prepared = Some(p);
                    batch
                };
                let before: Option<Before> = match waiting || upcoming.is_some() {
                    true => Some(&mut meanwhile),
                    false => None,
                };
                (r.step(&mut self.engine, &texts, &times, before), failed)
            }
            None => {
                self.later.hand_over(&mut self.store, &self.engine)?;
                (self.engine.step_at_moving(&texts, &times), None)
            }
        };
        if let Some(e) = failed {
            return Err(e.into());
        }
        let (model, out) = match stepped {
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
        let seconds_step = t_step.elapsed().as_secs_f64();
        let timestep = self.engine.timestep();
        let step = later::Stepped {
            timestep,
            name: src.name.to_string(),
            key: src.key,
            range: src.range.clone(),
            progress: src.progress,
            docs: docs.iter().map(|d| (d.id.clone(), d.time)).collect(),
            out,
            now_ms,
            t0,
            seconds_step,
        };
        if self.defer {
            self.engine = model;
            if let Some(r) = &mut self.replicas {
                r.committed();
            }
            self.later.stepped(step);
            return Ok(Outcome::Deferred {
                timestep,
                start: src.range.start,
                end: src.range.end,
            });
        }
        let t_store = Instant::now();
        let write = step.write(&model, &self.store);
        let commit = self.store.commit(&model, &write)?;
        let seconds_commit = t_store.elapsed().as_secs_f64();
        let memory_docs = model.hybrid().map(|h| h.memory().len());
        // The transaction is applied (visible to readers and to the file-hash check) even if
        // the flush below fails, so the model in memory must follow it now: a retry of this
        // file then finds it committed, and the next batch steps from this timestep.
        self.engine = model;
        if let Some(r) = &mut self.replicas {
            r.committed();
        }
        self.store.flush()?;
        let seconds_store = t_store.elapsed().as_secs_f64();
        Ok(step.outcome(commit, seconds_store, seconds_commit, memory_docs))
    }
}

/// The stored form of the hybrid detector's explanation of one verdict.
fn hybrid_record(h: &HybridVerdict, store: &Store) -> HybridRecord {
    HybridRecord {
        model_score: h.model_score,
        model_quantile: h.model_quantile,
        nn_score: h.nn_score,
        nn_quantile: h.nn_quantile,
        nearest: h.nearest.map(|(r, cosine)| NearestRecord {
            doc_id: store
                .verdict_at(r.time, r.timestep, r.seq)
                .ok()
                .flatten()
                .map(|v| v.doc_id)
                .unwrap_or_default(),
            time: r.time,
            timestep: r.timestep,
            seq: r.seq,
            cosine: cosine as f32,
        }),
    }
}

/// A (key, value) pair of a tree.
type KeyValue = (Vec<u8>, Vec<u8>);

/// The verdict records and the (key, value) pairs of the emerging-topic records of one step.
fn step_records(
    source: &str,
    timestep: u64,
    docs: &[(String, i64)],
    model: &Engine,
    out: &StepOutput,
    now_ms: i64,
    store: &Store,
) -> (Vec<VerdictRecord>, Vec<KeyValue>) {
    // each document's topic (a document is in at most one)
    let mut link: Vec<Option<TopicLink>> = vec![None; docs.len()];
    for (id, t) in out.topics.iter().enumerate() {
        for &j in &t.members {
            if let Some(l) = link.get_mut(j) {
                l.get_or_insert(TopicLink {
                    id: id as u32,
                    event: t.event,
                });
            }
        }
    }
    let verdicts: Vec<VerdictRecord> = docs
        .iter()
        .zip(&out.verdicts)
        .enumerate()
        .map(|(i, ((id, time), v))| VerdictRecord {
            hybrid: out.hybrid.get(i).map(|h| hybrid_record(h, store)),
            topic: link[i],
            doc_id: id.clone(),
            time: *time,
            timestep,
            seq: i as u32,
            source: source.to_string(),
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
                time: t.members.iter().map(|&j| docs[j].1).min().unwrap_or(now_ms),
                size: t.members.len() as u32,
                terms: t
                    .terms
                    .iter()
                    .map(|&(tid, w)| (model.vocab().term(tid).to_string(), w))
                    .collect(),
                docs: t
                    .representatives
                    .iter()
                    .map(|&j| docs[j].0.clone())
                    .collect(),
                mean_score: t.mean_score,
                kind: t.kind,
                strength: t.strength,
                profile: t.profile.clone(),
                event: t.event,
                members: Some(t.members.iter().map(|&j| docs[j].0.clone()).collect()),
            };
            (
                topic_key(timestep, id as u32),
                postcard::to_stdvec(&rec).unwrap(),
            )
        })
        .collect();
    (verdicts, topics)
}
