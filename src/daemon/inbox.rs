//! The inbox folder: which entries are batch files, when a file is complete, moving files to
//! `processed/` and `rejected/`.
//!
//! A file is taken when it is complete: it was renamed into the inbox (the watcher saw the
//! rename — how `rsync` and atomic writers finish), or its size and mtime are unchanged across
//! two looks (lstats) `min(settle, 200 ms)` apart and its mtime is at least `settle` old
//! ([`super::queue`]). Complete files are taken in (mtime, name) order. Dotfiles, `*.tmp` and `*.part` are
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

use super::queue::{Queue, Seen};
use super::watch::{Change, Watch};
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

pub use crate::show::logged as shown;

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

/// Write the note of a file rejected into `dest`: `<dest>.error` with the time, the reason and
/// `applied` (what of it was applied).
fn write_note(dest: PathBuf, name: &str, reason: &str, applied: &str) {
    let note = format!(
        "novad rejected `{name}` at {}: {reason}\n{applied}\n",
        crate::show::fmt_time(chrono::Utc::now().timestamp_millis())
    );
    let mut note_path = dest.into_os_string();
    note_path.push(".error");
    if let Err(e) = std::fs::write(&note_path, note) {
        tracing::error!(file = %name, error = %e, "cannot write the .error note");
    }
}

/// With a working watcher, the inbox is listed in full this often anyway, as a safety net for
/// changes the watcher might not report.
pub const SAFETY_RESCAN: Duration = Duration::from_secs(60);
/// The longest back-off between two tries to move a file out of the inbox, or to list an
/// inbox that is gone or cannot be listed.
pub const LONGEST_BACKOFF: Duration = Duration::from_secs(5);
/// The first back-off of a file that could not be moved out of the inbox.
const FIRST_MOVE_BACKOFF: Duration = Duration::from_secs(1);
/// The first back-off of an inbox that cannot be listed.
const FIRST_LIST_BACKOFF: Duration = Duration::from_millis(100);

/// What one scan found.
pub struct Scan {
    /// The first complete file in take order (mtime, then name), if any.
    pub ready: Option<PathBuf>,
    /// The complete file after it, if any (the one taken next when `ready` is done).
    pub next: Option<PathBuf>,
    /// The longest the caller may wait for a watcher event before scanning again.
    pub wait: Duration,
}

/// Why a path is not a candidate for now.
enum Gate {
    /// Not a candidate at all (gone, ignored, waiting for its commit, rejected).
    Out,
    /// Look at it again at this instant (unreadable, held open, could not be moved).
    Until(Instant),
}

/// The inbox cannot be listed (gone, or not readable): since when the error is, when to try
/// again and the back-off that led there.
struct Unlisted {
    error: String,
    next: Instant,
    backoff: Duration,
}

/// The inbox and what the daemon remembers of its files between scans.
///
/// The whole directory is listed at the first scan, after the watcher reports lost events
/// or an error, and every [`SAFETY_RESCAN`] (every poll interval, or ten times the cost of a
/// listing if more, without a watcher); in between, a scan looks only at the paths the
/// watcher reported and at the files due to be looked at again, so its cost is proportional
/// to what changed.
pub struct Inbox {
    pub dir: PathBuf,
    pub processed: PathBuf,
    pub rejected: PathBuf,
    queue: Queue,
    watch: Option<Watch>,
    /// The longest time between two listings.
    relist: Duration,
    poll: Duration,
    /// When the inbox was last listed (`None`: at the next scan).
    listed: Option<Instant>,
    /// Paths the watcher reported since the last scan (and whether renamed in).
    touched: HashMap<PathBuf, bool>,
    /// First failure, last attempt, last error of files that could not be read.
    unreadable: HashMap<PathBuf, (Instant, Instant, String)>,
    /// Files some process holds open for writing, as seen then, and when that was checked.
    held: HashMap<PathBuf, (Seen, Instant)>,
    /// Files stepped to their end whose last commit is not durable yet: not offered again.
    waiting: HashSet<PathBuf>,
    /// Files that could not be moved out of the inbox: when to try again, the back-off.
    stuck: HashMap<PathBuf, (Instant, Duration)>,
    /// Moving files out of the inbox fails (logged once, until a move succeeds).
    moves_failing: bool,
    unlisted: Option<Unlisted>,
}

impl Inbox {
    /// An inbox without a watcher, listed at every scan. `dir` must be absolute (listed
    /// paths and reported paths compare equal).
    pub fn new(dir: PathBuf, settle: Duration) -> Inbox {
        Inbox {
            processed: dir.join(PROCESSED),
            rejected: dir.join(REJECTED),
            dir,
            queue: Queue::new(settle),
            watch: None,
            relist: Duration::ZERO,
            poll: Duration::ZERO,
            listed: None,
            touched: HashMap::new(),
            unreadable: HashMap::new(),
            held: HashMap::new(),
            waiting: HashSet::new(),
            stuck: HashMap::new(),
            moves_failing: false,
            unlisted: None,
        }
    }

    /// An inbox watched for changes, listed in full at the first scan; the watcher starts
    /// before that listing, so a file that appears while it runs is reported. Without a
    /// working watcher it is listed every `poll` (or ten times the cost of a listing, if
    /// more).
    pub fn watched(dir: PathBuf, settle: Duration, poll: Duration) -> Inbox {
        let watch = Watch::start(&dir);
        let mut inbox = Inbox::new(dir, settle);
        inbox.poll = poll;
        inbox.relist = if watch.active() { SAFETY_RESCAN } else { poll };
        inbox.watch = Some(watch);
        inbox
    }

    /// Note a change the watcher reported (done by [`Self::scan`] and [`Self::wait`] for the
    /// inbox's own watcher).
    pub fn note(&mut self, change: Change) {
        match change {
            Change::Touched(p) => {
                self.touched.entry(p).or_insert(false);
            }
            Change::RenamedIn(p) => {
                self.touched.insert(p, true);
            }
            Change::Rescan => self.listed = None,
        }
    }

    /// Wait up to `timeout` for the watcher to report a change (just sleep without one).
    pub fn wait(&mut self, timeout: Duration) {
        match &self.watch {
            Some(w) if w.active() => {
                for c in w.wait(timeout) {
                    self.note(c);
                }
            }
            _ => std::thread::sleep(timeout),
        }
    }

    /// `path` is stepped to its end and waits for its last commit: scans skip it until
    /// [`Self::unwait`].
    pub fn wait_commit(&mut self, path: &Path) {
        self.waiting.insert(path.to_path_buf());
        self.queue.gone(path);
    }

    /// `path` no longer waits for a commit (it is moved, or looked at again).
    pub fn unwait(&mut self, path: &Path) {
        self.waiting.remove(path);
        self.queue.again_at(path, Instant::now());
    }

    /// Some process holds `path` open for writing: leave it alone while it stays as it is now
    /// and the writer keeps it open (checked every [`HELD_RECHECK`]).
    pub fn hold(&mut self, path: &Path) {
        if let Ok(md) = path.symlink_metadata() {
            let now = Instant::now();
            self.held.insert(path.to_path_buf(), (seen_of(&md), now));
            self.queue.again_at(path, now);
        }
    }

    /// Whether `path` (now `s`) is still held open for writing unchanged; rechecks the
    /// writer at most every [`HELD_RECHECK`].
    fn still_held(&mut self, path: &Path, s: Seen, now: Instant) -> Option<Instant> {
        let (seen, checked) = self.held.get_mut(path)?;
        if *seen == s {
            if now.duration_since(*checked) < HELD_RECHECK {
                return Some(*checked + HELD_RECHECK);
            }
            *checked = now;
            let writing = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .ok()
                .and_then(|f| open_for_writing(&f));
            if writing == Some(true) {
                return Some(now + HELD_RECHECK);
            }
        }
        self.held.remove(path);
        None
    }

    /// `path` is taken: forget what was observed of it (if it is still in the inbox when the
    /// daemon is done with it, it settles again from scratch).
    pub fn take(&mut self, path: &Path) {
        self.queue.again_at(path, Instant::now());
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
            self.reject(
                path,
                &why,
                "Nothing of this file was applied. Make it readable by the daemon's user and drop it into the inbox again.",
            );
        }
        self.queue.again_at(path, now + UNREADABLE_RETRY);
    }

    /// `path` was read: it is no longer unreadable.
    pub fn readable(&mut self, path: &Path) {
        self.unreadable.remove(path);
    }

    /// Whether moving `path` out of the inbox failed before (its log lines are then kept to
    /// the debug level).
    pub fn is_stuck(&self, path: &Path) -> bool {
        self.stuck.contains_key(path)
    }

    /// Move `path` into `dir` ([`move_into`]). A failure other than the file being gone
    /// backs the file off (1 s, doubling up to [`LONGEST_BACKOFF`]) and is logged only when
    /// moves start failing; the first move that works after that is logged too.
    pub fn move_out(&mut self, dir: &Path, path: &Path) -> std::io::Result<PathBuf> {
        match move_into(dir, path) {
            Ok(dest) => {
                self.stuck.remove(path);
                if self.moves_failing {
                    self.moves_failing = false;
                    tracing::info!(file = %shown(&name_of(path)), "files can be moved out of the inbox again");
                }
                Ok(dest)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !path.exists() => Err(e),
            Err(e) => {
                let now = Instant::now();
                let backoff = self
                    .stuck
                    .get(path)
                    .map_or(FIRST_MOVE_BACKOFF, |s| (s.1 * 2).min(LONGEST_BACKOFF));
                self.stuck
                    .insert(path.to_path_buf(), (now + backoff, backoff));
                self.queue.again_at(path, now + backoff);
                if !self.moves_failing {
                    self.moves_failing = true;
                    tracing::error!(file = %shown(&name_of(path)), to = %dir.display(), error = %e,
                        "cannot move files out of the inbox; each is tried again with back-off (up to {}s); logged again once moves work", LONGEST_BACKOFF.as_secs());
                } else {
                    tracing::debug!(file = %shown(&name_of(path)), error = %e, "still cannot move the file out of the inbox");
                }
                Err(e)
            }
        }
    }

    /// Reject a file: move it into `rejected/` and write `<its name there>.error` next to it
    /// with the time, the reason and `applied` (what of it was applied). A file that could
    /// not be moved before is warned about once.
    pub fn reject(&mut self, path: &Path, reason: &str, applied: &str) {
        let name = shown(&name_of(path));
        if self.is_stuck(path) {
            tracing::debug!(file = %name, reason, "rejected batch file");
        } else {
            tracing::warn!(file = %name, reason, "rejected batch file");
        }
        let rejected = self.rejected.clone();
        if let Ok(dest) = self.move_out(&rejected, path) {
            crate::metrics::file_rejected();
            write_note(dest, &name, reason, applied);
        }
    }

    /// Why `path` (lstat `md`) is not a candidate now, if it is not: ignored names, special
    /// files (rejected), files waiting for their commit, unreadable, stuck or held files.
    fn gate(&mut self, path: &Path, md: &std::fs::Metadata, at: Instant) -> Option<Gate> {
        let name = name_of(path);
        if path.parent() != Some(self.dir.as_path())
            || ignored(&name)
            || name == PROCESSED
            || name == REJECTED
            || self.waiting.contains(path)
        {
            return Some(Gate::Out);
        }
        if let Some((until, _)) = self.stuck.get(path) {
            if at < *until {
                return Some(Gate::Until(*until));
            }
        }
        if let Some(kind) = special_kind(md.file_type()) {
            let why = if md.file_type().is_symlink() {
                "symbolic links are not accepted as batch files; copy the file into the inbox"
                    .to_string()
            } else if md.is_dir() {
                "directories are not batch files; drop .jsonl or .txt files into the inbox"
                    .to_string()
            } else {
                format!(
                    "{kind} is not a batch file; drop regular .jsonl or .txt files into the inbox"
                )
            };
            self.reject(path, &why, NOTHING_APPLIED);
            return Some(match self.stuck.get(path) {
                Some((until, _)) => Gate::Until(*until),
                None => Gate::Out,
            });
        }
        if let Some((_, last, _)) = self.unreadable.get(path) {
            if at.duration_since(*last) < UNREADABLE_RETRY {
                return Some(Gate::Until(*last + UNREADABLE_RETRY));
            }
        }
        self.still_held(path, seen_of(md), at).map(Gate::Until)
    }

    /// Look at `path` now (one lstat) and update the queue.
    fn look(&mut self, path: &Path, renamed: bool, at: Instant, wall: SystemTime) {
        let Ok(md) = path.symlink_metadata() else {
            self.queue.gone(path);
            self.unreadable.remove(path);
            self.held.remove(path);
            return;
        };
        match self.gate(path, &md, at) {
            Some(Gate::Out) => self.queue.gone(path),
            Some(Gate::Until(when)) => self.queue.again_at(path, when),
            None => self.queue.observe(path, seen_of(&md), renamed, at, wall),
        }
    }

    /// List the whole inbox and merge the listing into the queue.
    fn list(&mut self, at: Instant, wall: SystemTime) -> std::io::Result<()> {
        let mut candidates = Vec::new();
        let mut gated = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let Ok(e) = e else { continue };
            let path = e.path();
            // lstat: never follows a link, never opens the entry
            let Ok(md) = path.symlink_metadata() else {
                continue;
            };
            match self.gate(&path, &md, at) {
                None => candidates.push((path, seen_of(&md))),
                Some(Gate::Until(when)) => gated.push((path, when)),
                Some(Gate::Out) => {}
            }
        }
        let present: HashSet<&Path> = candidates
            .iter()
            .map(|(p, _)| p.as_path())
            .chain(gated.iter().map(|(p, _)| p.as_path()))
            .collect();
        self.unreadable.retain(|p, _| present.contains(p.as_path()));
        self.held.retain(|p, _| present.contains(p.as_path()));
        self.stuck.retain(|p, _| present.contains(p.as_path()));
        self.queue.merge(candidates, at, wall);
        for (p, when) in gated {
            self.queue.again_at(&p, when);
        }
        Ok(())
    }

    /// The inbox could not be listed: log it when this starts (or the error changes), and try
    /// again later, backing off up to [`LONGEST_BACKOFF`].
    fn cannot_list(&mut self, e: &std::io::Error, at: Instant) {
        let error = e.to_string();
        let u = self.unlisted.get_or_insert_with(|| Unlisted {
            error: String::new(),
            next: at,
            backoff: FIRST_LIST_BACKOFF / 2,
        });
        if u.error != error {
            tracing::warn!(inbox = %self.dir.display(), error = %e,
                "the inbox cannot be listed (gone?); waiting for it, checking with back-off up to {}s", LONGEST_BACKOFF.as_secs());
            u.error = error;
        }
        u.backoff = (u.backoff * 2).min(LONGEST_BACKOFF);
        u.next = at + u.backoff;
    }

    /// The inbox can be listed again: make its `processed/` and `rejected/` (watched anew by
    /// [`Self::relisted_watch_first`] before it was listed).
    fn relisted(&mut self) {
        if self.unlisted.take().is_none() {
            return;
        }
        tracing::info!(inbox = %self.dir.display(), "the inbox is back");
        for d in [&self.processed, &self.rejected] {
            if let Err(e) = std::fs::create_dir_all(d) {
                tracing::error!(dir = %d.display(), error = %e, "cannot create the inbox's folder");
            }
        }
    }

    /// Bring the queue up to date — list the inbox when due (see [`Inbox`]), otherwise look
    /// only at reported and due paths — and return the first complete file in take order
    /// (mtime, then name), checked to be still there unchanged. Never fails: an inbox that
    /// cannot be listed (removed, unreadable) is waited for, see [`Self::cannot_list`].
    pub fn scan(&mut self) -> Scan {
        let at = Instant::now();
        let wall = SystemTime::now();
        if let Some(w) = &self.watch {
            for c in w.drain() {
                self.note(c);
            }
        }
        if let Some(u) = &self.unlisted {
            if at < u.next {
                return self.nothing(u.next - at);
            }
            // a new directory of that name must be watched before it is listed
            if self.dir.is_dir() {
                self.relisted_watch_first();
            }
            self.listed = None;
        }
        let due = self.queue.due_by(at);
        let relist = self
            .listed
            .is_none_or(|l| at.duration_since(l) >= self.relist);
        if relist {
            let started = Instant::now();
            if let Err(e) = self.list(at, wall) {
                self.cannot_list(&e, at);
                let next = self.unlisted.as_ref().map_or(at, |u| u.next);
                return self.nothing(next.saturating_duration_since(at));
            }
            self.relisted();
            self.listed = Some(at);
            if self.watch.as_ref().is_none_or(|w| !w.active()) {
                self.relist = self.poll.max(started.elapsed() * 10);
            }
        }
        let touched: Vec<(PathBuf, bool)> = self.touched.drain().collect();
        for (p, renamed) in touched {
            self.look(&p, renamed, at, wall);
        }
        if !relist {
            for p in due {
                self.look(&p, false, at, wall);
            }
        }
        crate::metrics::set_inbox_waiting(self.queue.len() as u64);
        let ready = self.first_ready(at, wall);
        let next = ready
            .as_ref()
            .and_then(|_| self.queue.first_ready(2).get(1).cloned());
        let mut wait = match self.listed {
            Some(l) => (l + self.relist).saturating_duration_since(Instant::now()),
            None => Duration::ZERO,
        };
        if let Some(d) = self.queue.next_due() {
            wait = wait.min(d.saturating_duration_since(Instant::now()));
        }
        Scan { ready, next, wait }
    }

    /// The inbox was unlisted and is a directory again: watch it before listing it.
    fn relisted_watch_first(&mut self) {
        if let Some(w) = self.watch.as_mut() {
            self.relist = if w.rearm() { SAFETY_RESCAN } else { self.poll };
        }
    }

    /// A scan that found nothing; scan again after `wait`.
    fn nothing(&self, wait: Duration) -> Scan {
        Scan {
            ready: None,
            next: None,
            wait,
        }
    }

    /// The first ready file that an lstat finds unchanged (the others are looked at anew).
    fn first_ready(&mut self, at: Instant, wall: SystemTime) -> Option<PathBuf> {
        loop {
            let head = self.queue.first_ready(1).pop()?;
            let now = head.symlink_metadata().ok().map(|md| seen_of(&md));
            if now.is_some() && now == self.queue.seen(&head) {
                return Some(head);
            }
            self.look(&head, false, at, wall);
        }
    }
}

/// What an lstat says of a candidate file.
fn seen_of(md: &std::fs::Metadata) -> Seen {
    Seen {
        len: md.len(),
        mtime: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An inbox on a temporary directory that, like a watched one, is listed only at its
    /// first scan and when a rescan is asked for.
    fn event_driven() -> (tempfile::TempDir, Inbox) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let mut inbox = Inbox::new(dir, Duration::ZERO);
        inbox.relist = Duration::from_secs(3600);
        (tmp, inbox)
    }

    /// Write `name` with an mtime `age_s` seconds ago.
    fn file(inbox: &Inbox, name: &str, age_s: u64) -> PathBuf {
        let p = inbox.dir.join(name);
        std::fs::write(&p, format!("{name}\n")).unwrap();
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(age_s))
            .unwrap();
        p
    }

    /// Scan twice (a file is complete after two equal looks) and return what is ready.
    fn settle(inbox: &mut Inbox) -> Option<PathBuf> {
        inbox.scan();
        std::thread::sleep(Duration::from_millis(2));
        inbox.scan().ready
    }

    #[test]
    fn after_the_first_listing_only_reported_paths_are_looked_at_until_a_rescan() {
        let (_tmp, mut inbox) = event_driven();
        let a = file(&inbox, "a.txt", 30);
        assert_eq!(settle(&mut inbox), Some(a.clone()));
        // written without an event: unseen, a stays first
        let b = file(&inbox, "b.txt", 40);
        assert_eq!(settle(&mut inbox), Some(a.clone()));
        inbox.note(Change::Touched(b.clone()));
        assert_eq!(settle(&mut inbox), Some(b.clone()), "b is older than a");
        // events were lost: the rescan finds c
        let c = file(&inbox, "c.txt", 50);
        assert_eq!(settle(&mut inbox), Some(b.clone()));
        inbox.note(Change::Rescan);
        assert_eq!(settle(&mut inbox), Some(c.clone()));
        let scan = inbox.scan();
        assert_eq!((scan.ready, scan.next), (Some(c), Some(b)));
    }

    #[test]
    fn a_file_gone_before_it_is_taken_is_not_offered_whether_or_not_its_removal_is_reported() {
        let (_tmp, mut inbox) = event_driven();
        let a = file(&inbox, "a.txt", 30);
        let b = file(&inbox, "b.txt", 20);
        assert_eq!(settle(&mut inbox), Some(a.clone()));
        // removed, no event yet: the check before offering it finds it gone
        std::fs::remove_file(&a).unwrap();
        assert_eq!(inbox.scan().ready, Some(b.clone()));
        // the removal reported late, then the file made again: it settles afresh
        inbox.note(Change::Touched(a.clone()));
        inbox.scan();
        let a = file(&inbox, "a.txt", 30);
        inbox.note(Change::Touched(a.clone()));
        assert_eq!(
            inbox.scan().ready,
            Some(b),
            "a new file is not complete at once"
        );
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(inbox.scan().ready, Some(a));
    }

    #[test]
    fn a_renamed_in_file_is_complete_at_once_and_a_taken_file_left_behind_settles_again() {
        let (_tmp, mut inbox) = event_driven();
        inbox.scan();
        let r = file(&inbox, "r.txt", 0);
        inbox.note(Change::RenamedIn(r.clone()));
        assert_eq!(inbox.scan().ready, Some(r.clone()));
        inbox.take(&r);
        // the daemon left it in the inbox (it grew): two looks again
        std::fs::write(&r, "r\nmore\n").unwrap();
        assert_eq!(inbox.scan().ready, None);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(inbox.scan().ready, Some(r));
    }

    #[test]
    fn ignored_names_and_folders_are_never_offered_and_special_files_are_rejected() {
        let (_tmp, mut inbox) = event_driven();
        std::fs::create_dir_all(&inbox.processed).unwrap();
        std::fs::create_dir_all(&inbox.rejected).unwrap();
        for n in [".hidden", "x.tmp", "y.part"] {
            file(&inbox, n, 30);
        }
        std::fs::create_dir(inbox.dir.join("sub")).unwrap();
        assert_eq!(settle(&mut inbox), None);
        assert!(inbox.rejected.join("sub").is_dir(), "a folder is rejected");
        assert!(inbox.dir.join(".hidden").exists());
    }

    #[test]
    fn a_missing_inbox_is_waited_for_with_back_off_and_listed_again_when_it_is_back() {
        let (_tmp, mut inbox) = event_driven();
        inbox.scan();
        std::fs::remove_dir(&inbox.dir).unwrap();
        inbox.note(Change::Rescan);
        let mut waits = Vec::new();
        for _ in 0..5 {
            let scan = inbox.scan();
            assert_eq!(scan.ready, None);
            waits.push(scan.wait);
            std::thread::sleep(scan.wait);
        }
        assert!(waits.windows(2).all(|w| w[1] >= w[0]), "{waits:?}");
        assert!(
            waits[4] > waits[0] && waits[4] <= LONGEST_BACKOFF,
            "{waits:?}"
        );
        std::fs::create_dir(&inbox.dir).unwrap();
        let a = file(&inbox, "a.txt", 30);
        std::thread::sleep(waits[4]);
        assert_eq!(settle(&mut inbox), Some(a));
        assert!(inbox.processed.is_dir() && inbox.rejected.is_dir());
    }
}
