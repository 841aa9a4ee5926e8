//! The daemon: watch an inbox folder, ingest each complete batch file (one timestep per
//! [`Limits`]-sized part, in file order), move it to `processed/` (or `rejected/` with a
//! `.error` note), serve live queries, stop cleanly on SIGINT/SIGTERM/SIGHUP (between two
//! timesteps; a file stopped in the middle resumes where it was).
//!
//! See [`inbox`] for when a file is taken. Files are taken oldest first (mtime, then name).
//! The inbox is listed in full when the daemon starts (its watcher already running), after the
//! watcher reports lost events or an error, and at a long interval as a safety net; in
//! between, each step looks only at the paths the watcher reported (not the opens and reads
//! the daemon's own reading causes) and at files due to be looked at again, so a step costs
//! what changed, not the size of the inbox. Without a working watcher the inbox is listed
//! every `poll` interval. An inbox that is removed (or cannot be listed) is waited for.
//!
//! No line reaches `processed/` without a verdict: a file is moved only when every byte of it
//! is committed, checked right before the move (same inode, same length and mtime as when it
//! was read) and again through the open descriptor right after it (an append that slipped in
//! through a descriptor opened before the move moves the file back into the inbox, where its
//! new tail becomes the next timestep).

pub mod api;
pub mod inbox;
mod queue;
mod settle;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::ingest::{Begin, FileCheck, FileJob, IngestError, Ingestor, Limits, Outcome, Upcoming};
use crate::store::StoreError;
pub use inbox::{ignored, move_into, name_of, shown, Inbox, PROCESSED, REJECTED};
use novad_models::ModelParams;

/// Inbox scans (looks at what changed, see [`Inbox::scan`]) since the daemon started (reported by `novad status` while it runs).
pub static INBOX_SCANS: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone)]
pub struct RunConfig {
    pub inbox: PathBuf,
    pub store: PathBuf,
    /// Parameters for a new store (an existing store must match them when given).
    pub params: Option<ModelParams>,
    /// How long a file's size and mtime must be stable before it is taken.
    pub settle: Duration,
    /// Longest wait between inbox scans.
    pub poll: Duration,
    /// Most documents / bytes of a file per timestep.
    pub limits: Limits,
    /// The dashboard and HTTP API (`None`: not served).
    pub http: Option<crate::http::HttpConfig>,
    /// Who hears of each committed timestep.
    pub webhooks: crate::alerts::Webhooks,
    /// Make parked webhook messages due again at start.
    pub retry_parked: bool,
}

#[derive(Debug, Error)]
pub enum DaemonError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("inbox {path}: {source}")]
    Inbox {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the query API at {path}: {source}")]
    Api {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Http(#[from] crate::http::HttpError),
    #[error("webhooks of store {path}: {source}")]
    Webhooks {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the step's threads: {0}")]
    Pool(#[source] rayon::ThreadPoolBuildError),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("the store holds a {0} model, which runs on one node only; the cluster mode is for the l1 model")]
    SingleNode(novad_models::ModelKind),
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Run the daemon until SIGINT/SIGTERM/SIGHUP, which stop it after the timestep in progress
/// (status 0). A second signal exits at once (status 130); the store is consistent either way
/// (a timestep is one transaction).
pub fn run(cfg: &RunConfig) -> Result<(), DaemonError> {
    let _pool = stepping_pool(1)?;
    run_with(cfg, None)
}

/// Makes the calling thread, the one that steps the model, a worker of a rayon pool of its
/// own, this thread among its threads: the step's parallel work then starts on this thread
/// and is shared from here, instead of being handed to the global pool and waited for — a
/// wake-up and a sleep on each side for every parallel part of a step, and with one thread
/// the whole step on one thread. The pool has the threads rayon's global pool would have
/// (`RAYON_NUM_THREADS`, else one per available core) divided among the `steppers` threads
/// of the process that each call this (a cluster process's local workers), at least one.
/// Other threads keep the global pool. Keep the pool while the thread steps: once it is
/// dropped the thread stays registered to it (rayon keeps the registry for the thread's
/// life), its parallel work then runs on it alone, and a second call on it fails.
pub fn stepping_pool(steppers: usize) -> Result<rayon::ThreadPool, DaemonError> {
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    rayon::ThreadPoolBuilder::new()
        .num_threads((threads / steppers.max(1)).max(1))
        .use_current_thread()
        .thread_name(|i| format!("novad-step-{i}"))
        .build()
        .map_err(DaemonError::Pool)
}

/// [`run`] as the leader of a cluster: every step is shared with `replicas` (see
/// [`crate::cluster`]). Refuses a store whose model cannot share its steps (dnmf, ostc).
pub fn run_replicated(
    cfg: &RunConfig,
    replicas: Box<dyn crate::ingest::Replicas>,
) -> Result<(), DaemonError> {
    run_with(cfg, Some(replicas))
}

fn run_with(
    cfg: &RunConfig,
    replicas: Option<Box<dyn crate::ingest::Replicas>>,
) -> Result<(), DaemonError> {
    let inbox_err = |path: &Path, source| DaemonError::Inbox {
        path: path.display().to_string(),
        source,
    };
    for d in [
        cfg.inbox.clone(),
        cfg.inbox.join(PROCESSED),
        cfg.inbox.join(REJECTED),
    ] {
        std::fs::create_dir_all(&d).map_err(|e| inbox_err(&d, e))?;
    }
    // absolute, so scan paths and watcher paths compare equal
    let dir = cfg
        .inbox
        .canonicalize()
        .map_err(|e| inbox_err(&cfg.inbox, e))?;

    let term = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&term))
            .map_err(DaemonError::Signals)?;
        signal_hook::flag::register(sig, Arc::clone(&term)).map_err(DaemonError::Signals)?;
    }

    let mut ing = crate::store::retry::open_waiting(&cfg.store, &term, || {
        Ingestor::open(&cfg.store, cfg.params.as_ref())
    })?;
    if replicas.is_some() && !ing.engine.replicable() {
        return Err(DaemonError::SingleNode(ing.engine.kind()));
    }
    // a cluster's leader commits in the background, while the next timestep steps: its
    // rounds' waits for the replicas give the committer thread its time
    ing.defer = replicas.is_some();
    ing.replicas = replicas;
    let sock =
        api::serve(&cfg.store, ing.store.db().clone()).map_err(|source| DaemonError::Api {
            path: api::socket_path(&cfg.store).display().to_string(),
            source,
        })?;
    // every way out of here removes the socket
    let sock = RemoveOnDrop(sock);
    let sock = &sock.0;
    let _senders = start_webhooks(&mut ing, cfg)?;
    crate::http::start_opt(
        &cfg.store,
        ing.store.db(),
        ing.store.durable(),
        cfg.http.as_ref(),
        Some(&dir),
    )?;
    tracing::info!(
        inbox = %cfg.inbox.display(),
        store = %cfg.store.display(),
        timestep = ing.engine.timestep(),
        api = %sock.display(),
        "novad running"
    );
    let mut inbox = Inbox::watched(dir, cfg.settle, cfg.poll);
    let mut active: Option<FileJob> = None;
    let mut later = settle::Later::default();
    while !term.load(Ordering::SeqCst) {
        if let Some(mut job) = active.take() {
            let next = continue_file(&mut ing, &mut inbox, &mut job, cfg.limits, &mut later);
            match survive_store_error(next, cfg, &term)? {
                Some(Next::GoOn) => active = Some(job),
                Some(Next::Awaiting(t)) => later.awaiting(t, job, &mut inbox),
                Some(Next::Done) | None => {}
            }
            later.drain(&mut ing, &mut inbox);
            continue;
        }
        INBOX_SCANS.fetch_add(1, Ordering::Relaxed);
        let scan = inbox.scan();
        if let Some(path) = scan.ready {
            inbox.take(&path);
            let started = start_file(&mut ing, &mut inbox, &path, cfg.limits);
            active = survive_store_error(started, cfg, &term)?.flatten();
            // a cluster's leader reads the file after it during its last timestep
            ing.read_ahead(scan.next.map(|path| Upcoming {
                path,
                limits: cfg.limits,
            }));
            later.drain(&mut ing, &mut inbox);
            continue;
        }
        // nothing to step now: the commit in flight becomes durable, its file is moved
        if ing.in_flight().is_some() {
            let settled = ing.settle().map_err(DaemonError::from);
            survive_store_error(settled, cfg, &term)?;
            later.drain(&mut ing, &mut inbox);
            continue;
        }
        inbox.wait(scan.wait.min(cfg.poll));
    }
    match &active {
        Some(job) => tracing::info!(
            timestep = ing.engine.timestep(),
            file = %shown(&job.name),
            resumes_at_byte = job.pos(),
            "shutting down; the file stays in the inbox and resumes at that byte"
        ),
        None => tracing::info!(timestep = ing.engine.timestep(), "shutting down"),
    }
    match ing.settle() {
        Ok(()) => later.drain(&mut ing, &mut inbox),
        Err(e) => {
            tracing::error!(error = %e, "the last timestep's commit failed; its file stays in the inbox")
        }
    }
    drop(active);
    drop(ing);
    Ok(())
}

/// Have every commit write its webhook messages ([`crate::alerts`]) and start their senders.
fn start_webhooks(
    ing: &mut Ingestor,
    cfg: &RunConfig,
) -> Result<crate::alerts::deliver::Senders, DaemonError> {
    let db = ing.store.db().clone();
    let io = |source| DaemonError::Webhooks {
        path: cfg.store.display().to_string(),
        source,
    };
    if cfg.retry_parked {
        let n =
            crate::alerts::deliver::retry_parked(&db).map_err(|e| io(std::io::Error::other(e)))?;
        tracing::info!(messages = n, "parked webhook messages are due again");
    }
    ing.store.set_outbox(cfg.webhooks.outbox());
    let receivers = &cfg.webhooks.receivers;
    for b in crate::alerts::backlog::read(&db).map_err(|e| io(std::io::Error::other(e)))? {
        if !receivers.iter().any(|r| r.url == b.url) {
            let url = b.url;
            tracing::warn!(url = %crate::alerts::shown_url(&url), "webhook messages wait for a receiver that is no longer configured: they are kept (novad status lists them) and sent once it is configured again");
        }
    }
    for r in receivers {
        tracing::info!(url = %crate::alerts::shown_url(&r.url), signed = r.secret.is_some(), events_only = r.filter.events_only, "webhook receiver");
    }
    crate::alerts::deliver::start(&db, receivers, ing.store.durable()).map_err(io)
}

/// A file removed when this is dropped (the query socket, on every way out of the daemon).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A store error while ingesting goes to the full-disk policy (log, keep the file in the
/// inbox, wait for room, restart in place); `Ok(None)` when it returns because a shutdown was
/// requested. Other errors stop the daemon.
fn survive_store_error<T>(
    r: Result<T, DaemonError>,
    cfg: &RunConfig,
    term: &AtomicBool,
) -> Result<Option<T>, DaemonError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(DaemonError::Store(e)) => {
            crate::store::retry::after_store_error(e, &cfg.store, term)?;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Open a complete file and decide what to do with it; returns the job when it has ranges
/// left to ingest.
fn start_file(
    ing: &mut Ingestor,
    inbox: &mut Inbox,
    path: &Path,
    limits: Limits,
) -> Result<Option<FileJob>, DaemonError> {
    let name = shown(&name_of(path));
    let begin = match ing.begin(path, now_ms(), limits) {
        Ok(b) => b,
        Err(IngestError::Read { source, .. }) => {
            inbox.unreadable(path, &source);
            return Ok(None);
        }
        Err(IngestError::Store(e)) => return Err(e.into()),
    };
    inbox.readable(path);
    match begin {
        Begin::Job(job) if job.done() => finish(ing, inbox, &job),
        Begin::Job(job) => return Ok(Some(job)),
        Begin::AlreadyCommitted { timestep, job } => {
            const WHY: &str = "committed up to its end before (a restart, or its writer just closed it); moving to processed/";
            if inbox.is_stuck(path) {
                tracing::debug!(file = %name, timestep, "{}", WHY);
            } else {
                tracing::info!(file = %name, timestep, "{}", WHY);
            }
            finish(ing, inbox, &job);
        }
        Begin::Duplicate { of, timestep } => inbox.reject(
            path,
            &format!(
                "duplicate of `{}`, timestep {timestep}: the same content was committed before",
                shown(&of)
            ),
            "Nothing of this file was applied: its documents already have verdicts.",
        ),
        Begin::Rejected(why) => inbox.reject(path, &why, inbox::NOTHING_APPLIED),
    }
    Ok(None)
}

/// What becomes of a file job after one of its timesteps.
enum Next {
    /// It has more to ingest.
    GoOn,
    /// It is finished (moved, left in the inbox, or rejected).
    Done,
    /// Every byte of it is stepped, and its last timestep is at most this one, the newest not
    /// durable: it is moved once that is durable.
    Awaiting(u64),
}

/// Ingest the next range of `job`.
fn continue_file(
    ing: &mut Ingestor,
    inbox: &mut Inbox,
    job: &mut FileJob,
    limits: Limits,
    later: &mut settle::Later,
) -> Result<Next, DaemonError> {
    let name = shown(&job.name);
    let started_at = job.pos();
    match ing.next_timestep(job, limits, now_ms()) {
        Ok(o @ Outcome::Committed { .. }) => settle::log_committed(&name, job.len(), &o),
        Ok(Outcome::Deferred { timestep, .. }) => later.stepped(timestep, job.len()),
        Ok(Outcome::Blank { .. }) => {}
        Ok(Outcome::Changed(why)) => {
            tracing::info!(file = %name, reason = %why, "changed while being read; nothing of that part was applied, it is read again once stable");
            return Ok(Next::Done);
        }
        Ok(Outcome::Rejected(why)) => {
            // the note says the earlier part was applied: it must be durable first
            if started_at > 0 {
                ing.settle()?;
            }
            let applied = if started_at == 0 {
                inbox::NOTHING_APPLIED.to_string()
            } else {
                format!("Bytes 0..{started_at} of this file were applied (earlier timesteps); nothing from byte {started_at} on.")
            };
            let why = format!("bytes from {started_at} on: {why}");
            inbox.reject(&job.path, &why, &applied);
            return Ok(Next::Done);
        }
        Ok(o @ (Outcome::AlreadyCommitted { .. } | Outcome::Duplicate { .. })) => {
            unreachable!("next_timestep never reports {o:?}")
        }
        Err(IngestError::Read { path, source }) => {
            tracing::warn!(file = %shown(&path), error = %source, "cannot read batch file; trying again later");
            return Ok(Next::Done);
        }
        Err(IngestError::Store(e)) => return Err(e.into()),
    }
    if job.done() {
        if let Some(t) = ing.last_in_flight() {
            return Ok(Next::Awaiting(t));
        }
        finish(ing, inbox, job);
        return Ok(Next::Done);
    }
    Ok(Next::GoOn)
}

/// Move a fully committed file to `processed/` if it is still exactly what was committed;
/// otherwise leave it in the inbox (a grown file's new part becomes the next timestep once the
/// file is stable again).
pub(crate) fn finish(ing: &mut Ingestor, inbox: &mut Inbox, job: &FileJob) {
    let name = shown(&job.name);
    let writer = job.writer_open() == Some(true);
    match job.check() {
        FileCheck::Unchanged if !writer => {}
        FileCheck::Unchanged | FileCheck::Grown { .. } if writer || job.writing() => {
            tracing::debug!(file = %name, committed_bytes = job.len(), "open for writing; its complete lines are committed, it stays in the inbox until the writer closes it");
            inbox.hold(&job.path);
            return;
        }
        FileCheck::Unchanged => unreachable!("handled above"),
        FileCheck::Grown { len } => {
            tracing::info!(file = %name, committed_bytes = job.len(), len, "grew after its last commit; the new part becomes the next timestep once the file is stable");
            return;
        }
        FileCheck::Changed(why) => {
            tracing::info!(file = %name, reason = %why, "changed after its last commit; it is looked at again once stable");
            return;
        }
    }
    let processed = inbox.processed.clone();
    let dest = match inbox.move_out(&processed, &job.path) {
        Ok(d) => d,
        Err(e) => {
            // other errors are logged (once while they last) by `move_out`
            if e.kind() == std::io::ErrorKind::NotFound {
                tracing::error!(file = %name, error = %e, "committed but cannot move to processed/");
            }
            return;
        }
    };
    if let FileCheck::Grown { len } = job.check_open() {
        // appended through a descriptor opened before the move: put it back (a hard link
        // fails rather than replace a new file of the same name)
        if std::fs::hard_link(&dest, &job.path).is_ok() {
            let _ = std::fs::remove_file(&dest);
            tracing::info!(file = %name, committed_bytes = job.len(), len, "grew while being moved; moved back into the inbox, the new part becomes the next timestep");
        } else {
            tracing::error!(file = %name, moved_to = %shown(&dest.display().to_string()), from_byte = job.len(), len,
                "grew while being moved and cannot be moved back (a new file of that name is in the inbox): the bytes from `from_byte` on have no verdict; drop them into the inbox as a new file");
        }
        return;
    }
    if let Some(key) = job.key() {
        if let Err(e) = ing.store.forget_progress(&job.name, &key) {
            tracing::warn!(file = %name, error = %e, "cannot clear the file's progress entry (harmless)");
        }
    }
}
