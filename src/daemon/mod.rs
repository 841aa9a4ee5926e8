//! The daemon: watch an inbox folder, ingest each complete batch file as one timestep, move it
//! to `processed/` (or `rejected/` with a `.error` note), serve live queries, stop cleanly on
//! SIGINT/SIGTERM.
//!
//! A file is taken when it is complete: it was renamed into the inbox (the watcher saw the
//! rename — how `rsync` and atomic writers finish), or its size and mtime are unchanged across
//! two scans and its mtime is at least `settle` old (so `cp` and slow appenders work). Dotfiles, `*.tmp` and `*.part` are ignored.
//! Files are taken oldest first (mtime, then name). The inbox is rescanned on every watcher
//! event and at least every `poll` interval, which also covers watcher overflows.

pub mod api;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

use notify::{RecursiveMode, Watcher};
use thiserror::Error;

use crate::engine::ModelParams;
use crate::ingest::{IngestError, Ingestor, Outcome};
use crate::store::StoreError;

pub const PROCESSED: &str = "processed";
pub const REJECTED: &str = "rejected";

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
    /// The dashboard and HTTP API (`None`: not served).
    pub http: Option<crate::http::HttpConfig>,
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
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
}

/// Whether a directory entry name is one the daemon never touches.
pub fn ignored(name: &str) -> bool {
    name.starts_with('.') || name.ends_with(".tmp") || name.ends_with(".part")
}

/// Move `path` into `dir` under its own name, or `<name>.1`, `<name>.2`, … if taken.
pub fn move_into(dir: &Path, path: &Path) -> std::io::Result<PathBuf> {
    let name = path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let mut dest = dir.join(&name);
    let mut i = 1;
    while dest.symlink_metadata().is_ok() {
        dest = dir.join(format!("{name}.{i}"));
        i += 1;
    }
    std::fs::rename(path, &dest)?;
    Ok(dest)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Reject a file: write `<name>.error` into `rejected/`, then move the file there.
fn reject(rejected: &Path, path: &Path, reason: &str) {
    let name = path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    tracing::warn!(file = %name, reason, "rejected batch file");
    let note = format!(
        "novad rejected `{name}` at {}: {reason}\nNothing of this file was applied. Fix it and drop it into the inbox again.\n",
        crate::query::fmt_time(now_ms())
    );
    if let Err(e) = std::fs::write(rejected.join(format!("{name}.error")), note) {
        tracing::error!(file = %name, error = %e, "cannot write the .error note");
    }
    if let Err(e) = move_into(rejected, path) {
        tracing::error!(file = %name, error = %e, "cannot move the rejected file");
    }
}

/// Observed state of a candidate file.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Seen {
    len: u64,
    mtime: SystemTime,
}

enum Candidate {
    File(PathBuf, Seen),
    Bad(PathBuf, String),
}

fn scan(inbox: &Path) -> std::io::Result<Vec<Candidate>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(inbox)? {
        let Ok(e) = e else { continue };
        let name = e.file_name().to_string_lossy().into_owned();
        if ignored(&name) || name == PROCESSED || name == REJECTED {
            continue;
        }
        let path = e.path();
        let Ok(md) = path.symlink_metadata() else {
            continue;
        };
        if md.file_type().is_symlink() {
            out.push(Candidate::Bad(
                path,
                "symbolic links are not accepted as batch files; copy the file into the inbox"
                    .into(),
            ));
        } else if md.is_dir() {
            out.push(Candidate::Bad(
                path,
                "directories are not batch files; drop .jsonl or .txt files into the inbox".into(),
            ));
        } else if md.is_file() {
            out.push(Candidate::File(
                path,
                Seen {
                    len: md.len(),
                    mtime: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                },
            ));
        }
    }
    Ok(out)
}

/// Run the daemon until SIGINT/SIGTERM. A second SIGINT/SIGTERM exits at once (status 130);
/// the store is consistent either way (a timestep is one transaction).
pub fn run(cfg: &RunConfig) -> Result<(), DaemonError> {
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
    let inbox = cfg
        .inbox
        .canonicalize()
        .map_err(|e| inbox_err(&cfg.inbox, e))?;
    let processed = inbox.join(PROCESSED);
    let rejected = inbox.join(REJECTED);

    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&term))
            .map_err(DaemonError::Signals)?;
        signal_hook::flag::register(sig, Arc::clone(&term)).map_err(DaemonError::Signals)?;
    }

    let mut ing = Ingestor::open(&cfg.store, cfg.params.as_ref())?;
    let sock =
        api::serve(&cfg.store, ing.store.db().clone()).map_err(|source| DaemonError::Api {
            path: api::socket_path(&cfg.store).display().to_string(),
            source,
        })?;
    crate::http::start_opt(&cfg.store, ing.store.db(), cfg.http.as_ref(), true)?;
    tracing::info!(
        inbox = %cfg.inbox.display(),
        store = %cfg.store.display(),
        timestep = ing.engine.timestep(),
        api = %sock.display(),
        "novad running"
    );

    // The watcher reports files renamed into the inbox (complete by convention); any other
    // event (including overflow / rescan notices and errors) just triggers a rescan.
    let (tx, rx) = mpsc::channel::<Option<PathBuf>>();
    let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        use notify::event::{EventKind, ModifyKind, RenameMode};
        match res {
            Ok(ev) => {
                let renamed_to = match ev.kind {
                    EventKind::Modify(ModifyKind::Name(RenameMode::To)) => {
                        ev.paths.first().cloned()
                    }
                    EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => {
                        ev.paths.get(1).cloned()
                    }
                    _ => None,
                };
                let _ = tx.send(renamed_to);
            }
            Err(e) => {
                tracing::debug!(error = %e, "watcher error; rescanning");
                let _ = tx.send(None);
            }
        }
    });
    let _watcher = match watcher {
        Ok(mut w) => match w.watch(&inbox, RecursiveMode::NonRecursive) {
            Ok(()) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "file watcher unavailable; polling the inbox");
                None
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "file watcher unavailable; polling the inbox");
            None
        }
    };

    let mut seen: HashMap<PathBuf, (Seen, Instant)> = HashMap::new();
    let mut renamed_in: HashSet<PathBuf> = HashSet::new();
    while !term.load(Ordering::SeqCst) {
        let cands = scan(&inbox).map_err(|e| inbox_err(&inbox, e))?;
        let now = SystemTime::now();
        // one instant per scan: files first seen together become ready together, so the
        // (mtime, name) order does not depend on directory listing order
        let scanned_at = Instant::now();
        let mut ready: Vec<(SystemTime, PathBuf)> = Vec::new();
        let mut pending = false;
        let mut present: Vec<PathBuf> = Vec::new();
        for c in cands {
            match c {
                Candidate::Bad(path, why) => reject(&rejected, &path, &why),
                Candidate::File(path, s) => {
                    present.push(path.clone());
                    let old_enough = now
                        .duration_since(s.mtime)
                        .map(|age| age >= cfg.settle)
                        .unwrap_or(false);
                    if renamed_in.contains(&path) {
                        ready.push((s.mtime, path));
                        continue;
                    }
                    match seen.get(&path) {
                        Some((prev, since))
                            if *prev == s
                                && old_enough
                                && scanned_at.duration_since(*since)
                                    >= cfg.settle.min(Duration::from_millis(200)) =>
                        {
                            ready.push((s.mtime, path));
                        }
                        Some((prev, _)) if *prev == s => pending = true,
                        _ => {
                            seen.insert(path, (s, scanned_at));
                            pending = true;
                        }
                    }
                }
            }
        }
        seen.retain(|p, _| present.contains(p));
        renamed_in.retain(|p| present.contains(p));
        ready.sort();
        if let Some((_, path)) = ready.into_iter().next() {
            seen.remove(&path);
            renamed_in.remove(&path);
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            match ing.ingest_path(&path, now_ms()) {
                Ok(Outcome::Committed {
                    timestep,
                    stats,
                    commit,
                    seconds,
                    seconds_store,
                }) => {
                    tracing::info!(
                        file = %name,
                        timestep,
                        docs = stats.docs,
                        novel = stats.novel,
                        bootstrap = stats.bootstrap,
                        ceiling = format!("{:.3}", stats.ceiling_fraction),
                        written_kib = commit.bytes / 1024,
                        seconds = format!("{seconds:.3}"),
                        store_seconds = format!("{seconds_store:.3}"),
                        "timestep committed"
                    );
                    if let Err(e) = move_into(&processed, &path) {
                        tracing::error!(file = %name, error = %e, "committed but cannot move to processed/");
                    }
                }
                Ok(Outcome::AlreadyCommitted { timestep }) => {
                    tracing::info!(file = %name, timestep, "already committed before a restart; moving to processed/");
                    if let Err(e) = move_into(&processed, &path) {
                        tracing::error!(file = %name, error = %e, "cannot move to processed/");
                    }
                }
                Ok(Outcome::Rejected(reason)) => reject(&rejected, &path, &reason),
                Err(IngestError::Read { path: p, source }) => {
                    // vanished or unreadable: report and look again on the next scan
                    tracing::warn!(file = %p, error = %source, "cannot read batch file");
                }
                Err(IngestError::Store(e)) => return Err(e.into()),
            }
            continue;
        }
        let wait = if pending {
            Duration::from_millis(100)
        } else {
            cfg.poll
        };
        let mut note = |ev: Option<PathBuf>| {
            if let Some(p) = ev {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if p.parent() == Some(inbox.as_path()) && !ignored(&name) {
                    renamed_in.insert(p);
                }
            }
        };
        if let Ok(ev) = rx.recv_timeout(wait) {
            note(ev);
        }
        while let Ok(ev) = rx.try_recv() {
            note(ev);
        }
    }
    tracing::info!(timestep = ing.engine.timestep(), "shutting down");
    drop(ing);
    let _ = std::fs::remove_file(&sock);
    Ok(())
}
