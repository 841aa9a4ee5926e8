//! Committing a timestep: its write plan ([`Store::prepare`]), the one transaction that applies
//! it ([`Store::apply`]), and the same applied in the background ([`Store::commit_later`],
//! [`Store::settle`]).
//!
//! In the background a committer thread applies the transaction and flushes it, at the lowest
//! CPU priority (`SCHED_IDLE`): on a busy core it runs only while the caller's threads wait (a
//! cluster's leader waits for its peers in every round of a step). Once the caller waits for
//! it ([`Store::settle`]) it runs at normal priority, so other work cannot starve it then. At most one commit is in
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
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
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
    /// Set when a commit handed over failed: what failed.
    failed: Option<String>,
    /// The committer thread's id, once it runs (0 before).
    tid: Arc<AtomicI32>,
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

/// Set the scheduling policy of thread `tid` of this process (0: the calling thread) to
/// `policy` (`SCHED_IDLE` or `SCHED_OTHER`); false when the system refuses.
fn set_policy(tid: libc::pid_t, policy: libc::c_int) -> bool {
    // SAFETY: sched_setscheduler changes only the policy of thread `tid`; the parameter is a
    // valid, initialised struct.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(tid, policy, &param) == 0
    }
}

/// Whether a thread of this process put at `SCHED_IDLE` may be put back at `SCHED_OTHER`
/// (nice 0): as root, or with `RLIMIT_NICE` ≥ 20 (sched(7)).
fn can_raise() -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: geteuid has no preconditions; getrlimit writes into the valid struct given.
    unsafe {
        libc::geteuid() == 0
            || (libc::getrlimit(libc::RLIMIT_NICE, &mut lim) == 0 && lim.rlim_cur >= 20)
    }
}

/// The committer thread's loop: each plan applied in one transaction and flushed, the outcome
/// sent back. It runs at `SCHED_IDLE` when the process may raise it back ([`can_raise`];
/// otherwise at normal priority): on a busy core it runs while the step's thread waits. `tid`
/// receives its thread id once its policy is set, so that a caller that waits for it
/// ([`Store::settle`]) raises it to normal priority meanwhile — a waiting caller never depends
/// on a thread that other work may starve.
fn committer(
    dir: PathBuf,
    db: sled::Db,
    trees: Vec<sled::Tree>,
    jobs: Receiver<Vec<Op>>,
    done: Sender<Result<()>>,
    tid: Arc<AtomicI32>,
) {
    if !(can_raise() && set_policy(0, libc::SCHED_IDLE)) {
        tracing::debug!(
            "the committer thread runs at normal priority (SCHED_IDLE could not be undone)"
        );
    }
    // SAFETY: gettid has no preconditions.
    tid.store(unsafe { libc::gettid() }, Ordering::Release);
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
        // 3. The timestep's records, and its outbox messages.
        records_ops(write, &mut ops);
        if let Some(f) = &self.outbox {
            let oi = ALL_TREES.iter().position(|n| *n == OUTBOX).unwrap();
            ops.extend(f(write).into_iter().map(|(k, v)| (oi, k, Some(v))));
        }
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
            let tid = Arc::new(AtomicI32::new(0));
            let t = Arc::clone(&tid);
            let thread = std::thread::Builder::new()
                .name("novad-commit".into())
                .spawn(move || committer(dir, db, trees, rx, tx, t))
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
                failed: None,
                tid,
            };
        }
        let sent = self.later.jobs.as_ref().map(|j| j.send(p.ops));
        if !matches!(sent, Some(Ok(()))) {
            let e = self.committer_gone();
            self.later.failed = Some(e.to_string());
            return Err(e);
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
    /// An error leaves it unsettled for good: from then on this call, [`Store::commit`] and
    /// [`Store::commit_later`] fail with [`StoreError::Failed`] until the store is reopened
    /// (which resumes from what is durable), so nothing is committed on top of it.
    pub fn settle(&mut self) -> Result<Option<CommitStats>> {
        self.check_failed()?;
        let Some(rest) = self.later.inflight.take() else {
            return Ok(None);
        };
        // the caller waits for the committer: meanwhile it runs at normal priority
        self.committer_policy(libc::SCHED_OTHER);
        let got = self.later.done.as_ref().map(|d| d.recv());
        self.committer_policy(libc::SCHED_IDLE);
        let r = match got {
            Some(Ok(Ok(()))) => {
                let stats = self.record(rest);
                if let Err(e) = self.forget_queued() {
                    tracing::warn!(error = %e, "cannot clear the progress entry of a moved file (harmless)");
                }
                self.write_sidecars().map(|()| Some(stats))
            }
            Some(Ok(Err(e))) => Err(e),
            _ => Err(self.committer_gone()),
        };
        if let Err(e) = &r {
            self.later.failed = Some(e.to_string());
        }
        r
    }

    /// [`StoreError::Failed`] once a commit handed over has failed.
    fn check_failed(&self) -> Result<()> {
        match &self.later.failed {
            Some(msg) => Err(StoreError::Failed {
                dir: self.dir_string(),
                msg: msg.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Put the committer thread at `policy` when it runs at `SCHED_IDLE` between waits (see
    /// [`committer`]); waits for the thread to have set its policy first (it does so as it
    /// starts).
    fn committer_policy(&self, policy: libc::c_int) {
        if self.later.thread.is_none() || !can_raise() {
            return;
        }
        let tid = loop {
            match self.later.tid.load(Ordering::Acquire) {
                0 => std::thread::yield_now(),
                t => break t,
            }
        };
        set_policy(tid, policy);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schema::{FileRecord, TimestepRecord};
    use novad_models::{ModelParams, Params};

    /// The records of an empty timestep `t` of the file `name`.
    fn write(t: u64, name: &str) -> TimestepWrite {
        TimestepWrite {
            verdicts: Vec::new(),
            hash: [t as u8 + 1; 32],
            file: FileRecord {
                name: name.into(),
                timestep: t,
                docs: 0,
                committed_at: 0,
                range: None,
            },
            record: TimestepRecord {
                timestep: t,
                file: name.into(),
                hash: String::new(),
                committed_at: 0,
                stats: Default::default(),
            },
            topics: Vec::new(),
            progress: None,
        }
    }

    /// A new store (k = 4) in a temporary directory, and its engine.
    fn new_store() -> (tempfile::TempDir, Store, Engine) {
        let dir = tempfile::tempdir().unwrap();
        let params = ModelParams::L1(Params::default().with_k(4));
        let mut store = Store::open(dir.path()).unwrap();
        let engine = store.engine(Some(&params)).unwrap();
        (dir, store, engine)
    }

    /// The committer waits for work at `SCHED_IDLE` (when it can be raised back) and a caller
    /// that waits for it raises it to normal priority: it is never starved while the caller
    /// depends on it.
    #[test]
    fn the_committer_is_idle_between_waits_and_normal_while_waited_for() {
        let (_dir, mut store, engine) = new_store();
        // SAFETY: sched_getscheduler only reads the policy of a thread of this process
        let policy = |tid| unsafe { libc::sched_getscheduler(tid) };
        let between = if can_raise() {
            libc::SCHED_IDLE
        } else {
            libc::SCHED_OTHER
        };
        for t in 0..3 {
            let p = store.prepare(&engine, &write(t, "a.txt"));
            store.commit_later(p).unwrap();
            store.settle().unwrap().expect("a commit was in flight");
            let tid = store.later.tid.load(Ordering::Acquire);
            assert!(tid > 0, "the committer's thread id is known once it ran");
            assert_eq!(policy(tid), between, "between waits, timestep {t}");
            store.committer_policy(libc::SCHED_OTHER);
            assert_eq!(
                policy(tid),
                libc::SCHED_OTHER,
                "while waited for, timestep {t}"
            );
            store.committer_policy(libc::SCHED_IDLE);
            assert_eq!(policy(tid), between, "after the wait, timestep {t}");
        }
    }

    /// A file's progress entry dropped while a commit is in flight is dropped once that commit
    /// has settled (not before: the write would wait for the committer), and only while it is
    /// still the file's entry.
    #[test]
    fn progress_forgotten_during_a_commit_goes_once_the_commit_has_settled() {
        let (_dir, mut store, engine) = new_store();
        let mut w = write(0, "a.txt");
        w.progress = Some("a.txt".into());
        store.commit(&engine, &w).unwrap();
        assert_eq!(store.progress("a.txt").unwrap(), Some(w.hash));
        // another file's commit in flight
        let mut b = write(1, "b.txt");
        b.progress = Some("b.txt".into());
        let p = store.prepare(&engine, &b);
        store.commit_later(p).unwrap();
        store.forget_progress("a.txt", &w.hash).unwrap();
        store.forget_progress("b.txt", &[9; 32]).unwrap();
        assert_eq!(store.progress("a.txt").unwrap(), Some(w.hash), "queued");
        store.settle().unwrap().expect("a commit was in flight");
        assert_eq!(store.progress("a.txt").unwrap(), None);
        assert_eq!(
            store.progress("b.txt").unwrap(),
            Some(b.hash),
            "another hash"
        );
        // with nothing in flight it goes at once
        store.forget_progress("b.txt", &b.hash).unwrap();
        assert_eq!(store.progress("b.txt").unwrap(), None);
    }

    /// A background commit that fails is reported once as what went wrong, then every later
    /// settle and commit, in line or in the background, is refused: nothing is committed on
    /// top of a timestep that is not durable. A store reopened afterwards works again.
    #[test]
    fn after_a_failed_background_commit_every_later_commit_is_refused() {
        let (dir, mut store, engine) = new_store();
        let p = store.prepare(&engine, &write(0, "a.txt"));
        store.commit_later(p).unwrap();
        assert!(store.in_flight());
        // the committer's answer is lost, as when the thread dies
        let (tx, rx) = channel();
        drop(tx);
        store.later.done = Some(rx);
        let first = store.settle().unwrap_err();
        assert!(matches!(first, StoreError::Damaged { .. }), "{first}");
        assert!(!store.in_flight());
        let refused = |r: Result<()>| matches!(r, Err(StoreError::Failed { .. }));
        assert!(refused(store.settle().map(|_| ())));
        assert!(refused(
            store.commit(&engine, &write(1, "b.txt")).map(|_| ())
        ));
        let p = store.prepare(&engine, &write(1, "b.txt"));
        assert!(refused(store.commit_later(p)));
        let msg = store.settle().unwrap_err().to_string();
        assert!(
            msg.contains("committer thread stopped") && msg.contains("reopened"),
            "{msg}"
        );
        drop(store);
        let mut back = Store::open(dir.path()).unwrap();
        let engine = back.engine(None).unwrap();
        back.commit(&engine, &write(1, "b.txt")).unwrap();
        back.flush().unwrap();
    }
}
