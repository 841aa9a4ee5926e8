//! Committing a timestep: its write plan ([`Store::prepare`]), the one transaction that applies
//! it ([`Store::apply`]), and the same applied in the background ([`Store::commit_later`],
//! [`Store::settle`]).
//!
//! In the background a committer thread applies the transaction and flushes it, at the lowest
//! CPU priority (`SCHED_IDLE`): on a busy core it runs only while the caller's threads wait (a
//! cluster's leader waits for its peers in every round of a step). At most one commit is in
//! flight, and the next is prepared only once it is settled, so every plan is diffed against
//! the state the previous commit left.
//!
//! Durability invariant: a commit handed to [`Store::commit_later`] is durable once
//! [`Store::settle`] returned `Ok` for it, and not before; whatever depends on it being durable
//! (moving its batch file) waits for that. [`Store::settle`] then records it outside sled
//! (journal, `committed.json`), after sled's flush, as [`Store::flush`] does. Until then its
//! records may already be visible to readers (as after [`Store::apply`] before a flush), never
//! only part of them.

use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use novad_models::Engine;

use super::schema::*;
use super::state::parts_state;
use super::{
    guard, sidecar, sled_error, u64_key, verdict_key, ChunkKey, CommitStats, Op, Result, Store,
    StoreError, TimestepWrite, KEY_MODEL, KEY_PARAMS,
};

/// A timestep's commit worked out and not yet applied: the writes of its one transaction and
/// what applying them changes outside sled.
pub struct Prepared {
    ops: Vec<Op>,
    rest: Rest,
}

/// What a commit changes besides its writes: the cache of state chunks, its journal line and
/// the sidecar's counters.
struct Rest {
    changes: Vec<(ChunkKey, Option<blake3::Hash>)>,
    stats: CommitStats,
    journal: sidecar::JournalEntry,
    timesteps: u64,
    committed_at: i64,
}

/// The committer thread (started at the first [`Store::commit_later`]) and the commit in
/// flight.
#[derive(Default)]
pub(super) struct Later {
    jobs: Option<Sender<Vec<Op>>>,
    done: Option<Receiver<Result<()>>>,
    thread: Option<JoinHandle<()>>,
    inflight: Option<Rest>,
}

impl Drop for Later {
    fn drop(&mut self) {
        // closing the channel ends the thread
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Apply `ops` in one transaction over `trees`. The closure only replays `ops` (sled may run
/// it more than once).
fn apply_ops(trees: &[sled::Tree], ops: &[Op]) -> std::result::Result<(), sled::Error> {
    let refs: Vec<&sled::Tree> = trees.iter().collect();
    let res: std::result::Result<(), TransactionError<()>> = refs.as_slice().transaction(|views| {
        for (t, k, v) in ops {
            match v {
                Some(v) => {
                    views[*t].insert(k.as_slice(), v.as_slice())?;
                }
                None => {
                    views[*t].remove(k.as_slice())?;
                }
            }
        }
        Ok::<(), ConflictableTransactionError<()>>(())
    });
    match res {
        Ok(()) => Ok(()),
        Err(TransactionError::Storage(e)) => Err(e),
        Err(TransactionError::Abort(())) => unreachable!("the closure never aborts"),
    }
}

/// The committer thread's loop: each plan applied in one transaction and flushed, the outcome
/// sent back. Runs at `SCHED_IDLE` where the system allows it.
fn committer(
    dir: PathBuf,
    db: sled::Db,
    trees: Vec<sled::Tree>,
    jobs: Receiver<Vec<Op>>,
    done: Sender<Result<()>>,
) {
    // SAFETY: sched_setscheduler with pid 0 changes only the calling thread's policy; the
    // parameter is a valid, initialised struct.
    let idle = unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param)
    };
    if idle != 0 {
        tracing::debug!("the committer thread runs at normal priority (SCHED_IDLE refused)");
    }
    for ops in jobs {
        let r = guard::watched(&dir, "committing a timestep", || {
            apply_ops(&trees, &ops)?;
            db.flush().map(|_| ())
        })
        .and_then(|r| r.map_err(|e| sled_error(&dir, e)));
        if done.send(r).is_err() {
            return;
        }
    }
}

impl Store {
    /// Commit one timestep atomically: the new model state (changed chunks only) and the
    /// timestep's records, its [`StepSummary`] (computed from `write.verdicts`) included. Not
    /// durable until [`Store::flush`]. Settles a commit in flight first.
    pub fn commit(&mut self, engine: &Engine, write: &TimestepWrite) -> Result<CommitStats> {
        self.settle()?;
        let p = self.prepare(engine, write);
        self.apply(p)
    }

    /// The commit of one timestep worked out against the stored state, not applied: the state
    /// chunks that changed, the records, what it changes outside sled. Apply it with
    /// [`Store::apply`] or [`Store::commit_later`] before preparing the next.
    pub fn prepare(&self, engine: &Engine, write: &TimestepWrite) -> Prepared {
        let now = write.record.committed_at;
        // 1. The state as (tree, key) → bytes; the memory's documents as a delta.
        let sw = engine.state_write();
        let mut state: Vec<(ChunkKey, Vec<u8>)> = vec![
            (
                (0, KEY_MODEL.to_vec()),
                postcard::to_stdvec(&engine.kind()).unwrap(),
            ),
            ((0, KEY_PARAMS.to_vec()), engine.params().to_bytes()),
        ];
        parts_state(
            engine,
            &sw.full,
            write.record.stats.atoms as u64,
            now,
            &mut state,
        );
        // 2. Diff against what is stored; `changes` is applied to the cache once committed.
        let (mut ops, changes) = self.state_ops(state, sw.incremental.as_ref());
        // 3. The timestep's records.
        records_ops(write, &mut ops);
        let stats = CommitStats {
            bytes: ops
                .iter()
                .map(|(_, k, v)| (k.len() + v.as_ref().map_or(0, |v| v.len())) as u64)
                .sum(),
            inserts: ops.iter().filter(|o| o.2.is_some()).count(),
            removes: ops.iter().filter(|o| o.2.is_none()).count(),
        };
        Prepared {
            ops,
            rest: Rest {
                changes,
                stats,
                journal: sidecar::JournalEntry {
                    timestep: write.record.timestep,
                    file: write.record.file.clone(),
                    hash: write.record.hash.clone(),
                    docs: write.file.docs,
                    committed_at: write.record.committed_at,
                },
                timesteps: engine.timestep(),
                committed_at: now,
            },
        }
    }

    /// Apply a prepared commit in one transaction (not durable until [`Store::flush`]).
    pub fn apply(&mut self, p: Prepared) -> Result<CommitStats> {
        apply_ops(&self.trees, &p.ops).map_err(|e| self.sled(e))?;
        Ok(self.record(p.rest))
    }

    /// Hand a prepared commit to the committer thread, which applies it in one transaction and
    /// flushes it; [`Store::settle`] waits for it. Settles the commit in flight first.
    pub fn commit_later(&mut self, p: Prepared) -> Result<()> {
        self.settle()?;
        if self.later.jobs.is_none() {
            let (jobs, rx) = channel();
            let (tx, done) = channel();
            let (dir, db, trees) = (self.dir.clone(), self.db.clone(), self.trees.clone());
            let thread = std::thread::Builder::new()
                .name("novad-commit".into())
                .spawn(move || committer(dir, db, trees, rx, tx))
                .map_err(|source| StoreError::Io {
                    dir: self.dir_string(),
                    what: "starting the committer thread".into(),
                    source,
                })?;
            self.later = Later {
                jobs: Some(jobs),
                done: Some(done),
                thread: Some(thread),
                inflight: None,
            };
        }
        let sent = self.later.jobs.as_ref().map(|j| j.send(p.ops));
        if !matches!(sent, Some(Ok(()))) {
            return Err(self.committer_gone());
        }
        self.later.inflight = Some(p.rest);
        Ok(())
    }

    /// True while a commit handed to [`Store::commit_later`] is not settled.
    pub fn in_flight(&self) -> bool {
        self.later.inflight.is_some()
    }

    /// Wait for the commit in flight, if any: once it is applied and flushed, record it
    /// outside sled (journal, `committed.json`) and return what it wrote; it is then durable.
    /// An error leaves it unsettled for good (the daemon stops on a store error).
    pub fn settle(&mut self) -> Result<Option<CommitStats>> {
        let Some(rest) = self.later.inflight.take() else {
            return Ok(None);
        };
        let got = self.later.done.as_ref().map(|d| d.recv());
        match got {
            Some(Ok(Ok(()))) => {
                let stats = self.record(rest);
                self.write_sidecars()?;
                Ok(Some(stats))
            }
            Some(Ok(Err(e))) => Err(e),
            _ => Err(self.committer_gone()),
        }
    }

    fn committer_gone(&self) -> StoreError {
        StoreError::Damaged {
            dir: self.dir_string(),
            detail: "the committer thread stopped".into(),
        }
    }

    /// Take an applied commit into the cache of state chunks and the pending journal.
    fn record(&mut self, rest: Rest) -> CommitStats {
        for (k, h) in rest.changes {
            match h {
                Some(h) => self.cache.insert(k, h),
                None => self.cache.remove(&k),
            };
        }
        self.pending
            .push(sidecar::JournalLine::Timestep(rest.journal));
        self.pending_sidecar = Some(sidecar::Committed {
            timesteps: rest.timesteps,
            state_digest: self.state_digest(),
            committed_at: rest.committed_at,
        });
        rest.stats
    }
}

/// The writes of a timestep's records: its verdicts, file record, progress, timestep record,
/// summary and topics.
fn records_ops(write: &TimestepWrite, ops: &mut Vec<Op>) {
    let tree = |name: &str| ALL_TREES.iter().position(|n| *n == name).unwrap();
    let vi = tree(VERDICTS);
    for v in &write.verdicts {
        ops.push((
            vi,
            verdict_key(v.time, v.timestep, v.seq).to_vec(),
            Some(postcard::to_stdvec(v).unwrap()),
        ));
    }
    ops.push((
        tree(FILES),
        write.hash.to_vec(),
        Some(postcard::to_stdvec(&write.file).unwrap()),
    ));
    if let Some(name) = &write.progress {
        ops.push((0, super::progress_key(name), Some(write.hash.to_vec())));
    }
    ops.push((
        tree(TIMESTEPS),
        u64_key(write.record.timestep).to_vec(),
        Some(postcard::to_stdvec(&write.record).unwrap()),
    ));
    // the timeline's summary of the timestep, from its verdicts (O(batch))
    ops.push((
        tree(SUMMARIES),
        u64_key(write.record.timestep).to_vec(),
        Some(postcard::to_stdvec(&StepSummary::of(&write.verdicts)).unwrap()),
    ));
    let oi = tree(TOPICS);
    for (k, v) in &write.topics {
        ops.push((oi, k.clone(), Some(v.clone())));
    }
}
