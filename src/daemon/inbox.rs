//! The inbox folder: which entries are batch files, when a file is complete, moving files to
//! `processed/` and `rejected/`.
//!
//! A file is taken when it is complete: it was renamed into the inbox (the watcher saw the
//! rename — how `rsync` and atomic writers finish), or its size and mtime are unchanged across
//! two scans and its mtime is at least `settle` old. Dotfiles, `*.tmp` and `*.part` are
//! ignored. Symbolic links, directories, FIFOs, sockets and devices are rejected without ever
//! being opened. A file that cannot be read is warned about once, retried every
//! [`UNREADABLE_RETRY`], and rejected after [`UNREADABLE_LIMIT`]. A file that some process
//! holds open for writing (Linux read-lease test, see
//! [`crate::ingest::file::open_for_writing`]) has only its complete lines ingested and stays
//! in the inbox until the writer closes it.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use std::os::unix::fs::OpenOptionsExt;

use crate::ingest::file::{open_for_writing, special_kind};

pub const PROCESSED: &str = "processed";
pub const REJECTED: &str = "rejected";

/// How often an unreadable file is tried again.
pub const UNREADABLE_RETRY: Duration = Duration::from_secs(1);
/// How often a file held open for writing is checked again.
pub const HELD_RECHECK: Duration = Duration::from_secs(1);
/// How long a file may stay unreadable before it is rejected.
pub const UNREADABLE_LIMIT: Duration = Duration::from_secs(10);

/// Whether a directory entry name is one the daemon never touches.
pub fn ignored(name: &str) -> bool {
    name.starts_with('.') || name.ends_with(".tmp") || name.ends_with(".part")
}

/// A file name as shown in logs and notes: control characters (newlines, escapes, …),
/// quotes and backslashes escaped, so one name is always one token on one line.
pub fn shown(name: &str) -> String {
    name.escape_debug().to_string()
}

/// The file name of `path` (lossy UTF-8).
pub fn name_of(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// Move `path` into `dir` under its own name, or `<name>.1`, `<name>.2`, … if taken.
pub fn move_into(dir: &Path, path: &Path) -> std::io::Result<PathBuf> {
    let name = name_of(path);
    let mut dest = dir.join(&name);
    let mut i = 1;
    while dest.symlink_metadata().is_ok() {
        dest = dir.join(format!("{name}.{i}"));
        i += 1;
    }
    std::fs::rename(path, &dest)?;
    Ok(dest)
}

/// What of a rejected file was applied, for its note.
pub const NOTHING_APPLIED: &str =
    "Nothing of this file was applied. Fix it and drop it into the inbox again.";

/// Reject a file: move it into `rejected/` and write `<its name there>.error` next to it with
/// the time, the reason and `applied` (what of it was applied).
pub fn reject(rejected: &Path, path: &Path, reason: &str, applied: &str) {
    let name = shown(&name_of(path));
    tracing::warn!(file = %name, reason, "rejected batch file");
    let dest = match move_into(rejected, path) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(file = %name, error = %e, "cannot move the rejected file");
            return;
        }
    };
    let note = format!(
        "novad rejected `{name}` at {}: {reason}\n{applied}\n",
        crate::query::fmt_time(chrono::Utc::now().timestamp_millis())
    );
    let mut note_path = dest.into_os_string();
    note_path.push(".error");
    if let Err(e) = std::fs::write(&note_path, note) {
        tracing::error!(file = %name, error = %e, "cannot write the .error note");
    }
}

/// Observed state of a candidate file.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Seen {
    len: u64,
    mtime: SystemTime,
}

/// What one scan found.
pub struct Scan {
    /// The oldest complete file (mtime, then name), if any.
    pub ready: Option<PathBuf>,
    /// The complete file after it, if any (the one taken next when `ready` is done).
    pub next: Option<PathBuf>,
    /// Files still settling (scan again soon).
    pub pending: bool,
}

/// The inbox and what the daemon remembers of its files between scans.
pub struct Inbox {
    pub dir: PathBuf,
    pub processed: PathBuf,
    pub rejected: PathBuf,
    settle: Duration,
    seen: HashMap<PathBuf, (Seen, Instant)>,
    renamed_in: HashSet<PathBuf>,
    /// First failure, last attempt, last error of files that could not be read.
    unreadable: HashMap<PathBuf, (Instant, Instant, String)>,
    /// Files some process holds open for writing, as seen then, and when that was checked.
    held: HashMap<PathBuf, (Seen, Instant)>,
    /// Files stepped to their end whose last commit is not durable yet: not offered again.
    waiting: HashSet<PathBuf>,
}

impl Inbox {
    /// `dir` must be absolute (scan paths and watcher paths compare equal).
    pub fn new(dir: PathBuf, settle: Duration) -> Inbox {
        Inbox {
            processed: dir.join(PROCESSED),
            rejected: dir.join(REJECTED),
            dir,
            settle,
            seen: HashMap::new(),
            renamed_in: HashSet::new(),
            unreadable: HashMap::new(),
            held: HashMap::new(),
            waiting: HashSet::new(),
        }
    }

    /// `path` is stepped to its end and waits for its last commit: scans skip it until
    /// [`Self::unwait`].
    pub fn wait(&mut self, path: &Path) {
        self.waiting.insert(path.to_path_buf());
    }

    /// `path` no longer waits for a commit (it is moved, or looked at again).
    pub fn unwait(&mut self, path: &Path) {
        self.waiting.remove(path);
    }

    /// Some process holds `path` open for writing: leave it alone while it stays as it is now
    /// and the writer keeps it open (checked every [`HELD_RECHECK`]).
    pub fn hold(&mut self, path: &Path) {
        if let Ok(md) = path.symlink_metadata() {
            let s = Seen {
                len: md.len(),
                mtime: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            };
            self.held.insert(path.to_path_buf(), (s, Instant::now()));
        }
    }

    /// Whether `path` (now `s`) is still held open for writing unchanged; rechecks the
    /// writer at most every [`HELD_RECHECK`].
    fn still_held(&mut self, path: &Path, s: Seen, now: Instant) -> bool {
        let Some((seen, checked)) = self.held.get_mut(path) else {
            return false;
        };
        if *seen == s {
            if now.duration_since(*checked) < HELD_RECHECK {
                return true;
            }
            *checked = now;
            let writing = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .ok()
                .and_then(|f| open_for_writing(&f));
            if writing == Some(true) {
                return true;
            }
        }
        self.held.remove(path);
        false
    }

    /// A watcher saw `path` renamed into the inbox: it is complete.
    pub fn note_renamed(&mut self, path: PathBuf) {
        if path.parent() == Some(self.dir.as_path()) && !ignored(&name_of(&path)) {
            self.renamed_in.insert(path);
        }
    }

    /// Forget what was observed of `path` (it is taken, or must settle again).
    pub fn forget(&mut self, path: &Path) {
        self.seen.remove(path);
        self.renamed_in.remove(path);
    }

    /// `path` could not be read: warn the first time; reject it once it has failed for
    /// [`UNREADABLE_LIMIT`].
    pub fn unreadable(&mut self, path: &Path, error: &std::io::Error) {
        if error.kind() == std::io::ErrorKind::NotFound {
            return; // it went away
        }
        let now = Instant::now();
        let e = self
            .unreadable
            .entry(path.to_path_buf())
            .or_insert_with(|| {
                tracing::warn!(file = %shown(&name_of(path)), error = %error,
                    "cannot read batch file; retrying every {}s, rejecting it after {}s",
                    UNREADABLE_RETRY.as_secs(), UNREADABLE_LIMIT.as_secs());
                (now, now, String::new())
            });
        e.1 = now;
        e.2 = error.to_string();
        if now.duration_since(e.0) >= UNREADABLE_LIMIT {
            let why = format!(
                "it cannot be read: {} (tried for {} s)",
                e.2,
                UNREADABLE_LIMIT.as_secs()
            );
            self.unreadable.remove(path);
            self.forget(path);
            reject(
                &self.rejected,
                path,
                &why,
                "Nothing of this file was applied. Make it readable by the daemon's user and drop it into the inbox again.",
            );
        }
    }

    /// `path` was read: it is no longer unreadable.
    pub fn readable(&mut self, path: &Path) {
        self.unreadable.remove(path);
    }

    /// List the inbox: reject entries that are not regular files, and return the oldest
    /// complete file and the complete file after it.
    pub fn scan(&mut self) -> std::io::Result<Scan> {
        let now = SystemTime::now();
        // one instant per scan: files first seen together become ready together, so the
        // (mtime, name) order does not depend on directory listing order
        let scanned_at = Instant::now();
        let mut ready: Vec<(SystemTime, PathBuf)> = Vec::new();
        let mut pending = false;
        let mut present: HashSet<PathBuf> = HashSet::new();
        for e in std::fs::read_dir(&self.dir)? {
            let Ok(e) = e else { continue };
            let name = e.file_name().to_string_lossy().into_owned();
            if ignored(&name) || name == PROCESSED || name == REJECTED {
                continue;
            }
            let path = e.path();
            // lstat: never follows a link, never opens the entry
            let Ok(md) = path.symlink_metadata() else {
                continue;
            };
            if let Some(kind) = special_kind(md.file_type()) {
                let why = if md.file_type().is_symlink() {
                    "symbolic links are not accepted as batch files; copy the file into the inbox"
                        .to_string()
                } else if md.is_dir() {
                    "directories are not batch files; drop .jsonl or .txt files into the inbox"
                        .to_string()
                } else {
                    format!("{kind} is not a batch file; drop regular .jsonl or .txt files into the inbox")
                };
                reject(&self.rejected, &path, &why, NOTHING_APPLIED);
                continue;
            }
            if self.waiting.contains(&path) {
                continue;
            }
            present.insert(path.clone());
            if let Some((_, last, _)) = self.unreadable.get(&path) {
                if scanned_at.duration_since(*last) < UNREADABLE_RETRY {
                    pending = true;
                    continue;
                }
            }
            let s = Seen {
                len: md.len(),
                mtime: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            };
            if self.still_held(&path, s, scanned_at) {
                continue;
            }
            if self.renamed_in.contains(&path) {
                ready.push((s.mtime, path));
                continue;
            }
            let old_enough = now
                .duration_since(s.mtime)
                .map(|age| age >= self.settle)
                .unwrap_or(false);
            match self.seen.get(&path) {
                Some((prev, since))
                    if *prev == s
                        && old_enough
                        && scanned_at.duration_since(*since)
                            >= self.settle.min(Duration::from_millis(200)) =>
                {
                    ready.push((s.mtime, path));
                }
                Some((prev, _)) if *prev == s => pending = true,
                _ => {
                    self.seen.insert(path, (s, scanned_at));
                    pending = true;
                }
            }
        }
        self.seen.retain(|p, _| present.contains(p));
        self.renamed_in.retain(|p| present.contains(p));
        self.unreadable.retain(|p, _| present.contains(p));
        self.held.retain(|p, _| present.contains(p));
        ready.sort();
        let mut ready = ready.into_iter().map(|r| r.1);
        Ok(Scan {
            ready: ready.next(),
            next: ready.next(),
            pending,
        })
    }
}
