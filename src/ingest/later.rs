//! Timesteps committed in the background ([`Ingestor::defer`]).
//!
//! A timestep goes through three states: *stepped* (the model in memory has it; its records
//! are not written), *in flight* (its records and state are written into a prepared commit
//! that the store's committer thread applies and flushes), *settled* (durable; its outcome
//! waits for the caller). At most one timestep is stepped and one in flight: the stepped one is
//! handed over when the next timestep's batch has gone out to the replicas (the replicas start
//! on it meanwhile), and handing it over settles the one in flight first, so a timestep's
//! records read every verdict before it from the store.
//!
//! Durability invariant: a timestep is durable once it is settled and not before; its batch
//! file is moved only then ([`Ingestor::in_flight`]). A crash before loses it whole: the store
//! holds the timesteps before it, and the file is still in the inbox. A commit that fails
//! leaves the store refusing every later commit until it is reopened ([`Store::settle`]), so
//! no timestep is ever committed on top of one that is not.

use std::time::Instant;

use novad_models::{Engine, StepOutput};

use super::{step_records, IngestError, Ingestor, Outcome};
use crate::store::schema::{FileRange, FileRecord, TimestepRecord};
use crate::store::{CommitStats, Store, StoreError, TimestepWrite};

/// A timestep stepped whose records and commit are not worked out yet: what they need.
pub(super) struct Stepped {
    pub timestep: u64,
    /// The file it came from and the `files` key of its commit.
    pub name: String,
    pub key: [u8; 32],
    pub range: FileRange,
    /// Record the file's progress under its name.
    pub progress: bool,
    /// Its documents' ids and times, in batch order.
    pub docs: Vec<(String, i64)>,
    pub out: StepOutput,
    pub now_ms: i64,
    /// When its ingest began, and the seconds its step took.
    pub t0: Instant,
    pub seconds_step: f64,
}

impl Stepped {
    /// The timestep's write: its verdicts and topics (read against `store`, which holds every
    /// timestep before it), its file, timestep and progress records. `model` is the engine
    /// after the step.
    pub(super) fn write(&self, model: &Engine, store: &Store) -> TimestepWrite {
        let (t, name) = (self.timestep, &self.name);
        let (verdicts, topics) =
            step_records(name, t, &self.docs, model, &self.out, self.now_ms, store);
        let hex: String = self.key.iter().map(|b| format!("{b:02x}")).collect();
        TimestepWrite {
            verdicts,
            hash: self.key,
            file: FileRecord {
                name: name.clone(),
                timestep: t,
                docs: self.docs.len() as u64,
                committed_at: self.now_ms,
                range: Some(self.range.clone()),
            },
            record: TimestepRecord {
                timestep: t,
                file: name.clone(),
                hash: hex,
                committed_at: self.now_ms,
                stats: self.out.stats.clone(),
            },
            topics,
            progress: self.progress.then(|| name.clone()),
        }
    }

    /// Its [`Outcome::Committed`], with the commit's figures.
    pub(super) fn outcome(
        self,
        commit: CommitStats,
        seconds_store: f64,
        seconds_commit: f64,
        memory_docs: Option<usize>,
    ) -> Outcome {
        Outcome::Committed {
            timestep: self.timestep,
            stats: Box::new(self.out.stats),
            commit,
            start: self.range.start,
            end: self.range.end,
            seconds: self.t0.elapsed().as_secs_f64(),
            seconds_store,
            seconds_step: self.seconds_step,
            seconds_hybrid: self.out.seconds_hybrid,
            seconds_commit,
            memory_docs,
        }
    }
}

/// A timestep in flight: its file, its `files` key, and its outcome (whose commit figures are
/// filled in when it settles).
struct InFlight {
    timestep: u64,
    name: String,
    key: [u8; 32],
    outcome: Outcome,
    /// Seconds spent writing and preparing it.
    seconds_commit: f64,
}

/// A timestep whose commit is durable: the file it came from and its [`Outcome::Committed`].
#[derive(Debug)]
pub struct Settled {
    pub name: String,
    pub outcome: Outcome,
}

/// The timesteps stepped and not yet durable, and those settled and not yet taken.
#[derive(Default)]
pub(super) struct Later {
    stepped: Option<Stepped>,
    inflight: Option<InFlight>,
    settled: Vec<Settled>,
}

impl Later {
    /// Keep a stepped timestep (the one before it must have been handed over).
    pub(super) fn stepped(&mut self, s: Stepped) {
        debug_assert!(self.stepped.is_none());
        self.stepped = Some(s);
    }

    /// True when a timestep is stepped and not yet handed over.
    pub(super) fn has_stepped(&self) -> bool {
        self.stepped.is_some()
    }

    /// Settle the timestep in flight, then write the stepped one against the store and hand
    /// its commit to the committer thread. `engine` is the engine after the stepped timestep.
    pub(super) fn hand_over(
        &mut self,
        store: &mut Store,
        engine: &Engine,
    ) -> Result<(), StoreError> {
        self.settle(store)?;
        let Some(s) = self.stepped.take() else {
            return Ok(());
        };
        let t = Instant::now();
        let write = s.write(engine, store);
        let p = store.prepare(engine, &write);
        store.commit_later(p)?;
        let seconds_commit = t.elapsed().as_secs_f64();
        let memory_docs = engine.hybrid().map(|h| h.memory().len());
        let (timestep, name, key) = (s.timestep, s.name.clone(), s.key);
        self.inflight = Some(InFlight {
            timestep,
            name,
            key,
            outcome: s.outcome(CommitStats::default(), 0.0, seconds_commit, memory_docs),
            seconds_commit,
        });
        Ok(())
    }

    /// Settle the timestep in flight, then write the stepped one and commit it in line (no
    /// other work to overlap): applied and flushed on return.
    fn commit_now(&mut self, store: &mut Store, engine: &Engine) -> Result<(), StoreError> {
        self.settle(store)?;
        let Some(s) = self.stepped.take() else {
            return Ok(());
        };
        let t = Instant::now();
        let write = s.write(engine, store);
        let commit = store.commit(engine, &write)?;
        let seconds_commit = t.elapsed().as_secs_f64();
        store.flush()?;
        let memory_docs = engine.hybrid().map(|h| h.memory().len());
        let name = s.name.clone();
        let outcome = s.outcome(
            commit,
            t.elapsed().as_secs_f64(),
            seconds_commit,
            memory_docs,
        );
        self.settled.push(Settled { name, outcome });
        Ok(())
    }

    /// Wait for the timestep in flight, if any; once durable its outcome is kept.
    fn settle(&mut self, store: &mut Store) -> Result<(), StoreError> {
        let t = Instant::now();
        let Some(stats) = store.settle()? else {
            return Ok(());
        };
        if let Some(mut f) = self.inflight.take() {
            if let Outcome::Committed {
                commit,
                seconds_store,
                ..
            } = &mut f.outcome
            {
                *commit = stats;
                *seconds_store = f.seconds_commit + t.elapsed().as_secs_f64();
            }
            self.settled.push(Settled {
                name: f.name,
                outcome: f.outcome,
            });
        }
        Ok(())
    }

    /// The timesteps not yet durable, oldest first: the one in flight, then the one stepped.
    fn not_durable(&self) -> impl Iterator<Item = u64> + '_ {
        let inflight = self.inflight.as_ref().map(|f| f.timestep);
        inflight
            .into_iter()
            .chain(self.stepped.as_ref().map(|s| s.timestep))
    }

    /// True when the timestep stepped or in flight is of the file `name` or has the `files`
    /// key `key`.
    fn touches(&self, name: &str, key: Option<&[u8; 32]>) -> bool {
        let hit = |n: &str, k: &[u8; 32]| n == name || key.is_some_and(|x| x == k);
        self.stepped.as_ref().is_some_and(|s| hit(&s.name, &s.key))
            || self.inflight.as_ref().is_some_and(|f| hit(&f.name, &f.key))
    }
}

impl Ingestor {
    /// Make every timestep stepped so far durable ([`Self::defer`]): write the stepped one,
    /// commit it, wait for it. Their outcomes are kept for [`Self::take_settled`]. An error
    /// leaves the store with what was durable before: the caller stops, the files stay in the
    /// inbox.
    pub fn settle(&mut self) -> Result<(), StoreError> {
        self.later.commit_now(&mut self.store, &self.engine)
    }

    /// The timesteps that became durable since the last call, in commit order.
    pub fn take_settled(&mut self) -> Vec<Settled> {
        std::mem::take(&mut self.later.settled)
    }

    /// The oldest timestep stepped and not yet durable, if any: every timestep before it is
    /// durable (its file may be moved), it and every one after it may still be lost.
    pub fn in_flight(&self) -> Option<u64> {
        self.later.not_durable().next()
    }

    /// The newest timestep stepped and not yet durable, if any: a file stepped to its end is
    /// durable once this one is.
    pub fn last_in_flight(&self) -> Option<u64> {
        self.later.not_durable().last()
    }

    /// [`Self::settle`] when a timestep not yet durable is of the file `name` or has the
    /// `files` key `key`: what it writes (the file's progress, its record) is about to be read.
    pub(super) fn settle_if(
        &mut self,
        name: &str,
        key: Option<&[u8; 32]>,
    ) -> Result<(), IngestError> {
        if self.later.touches(name, key) {
            self.settle()?;
        }
        Ok(())
    }
}
