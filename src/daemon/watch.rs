//! The inbox's file watcher (inotify through `notify`): what changed in the inbox, as
//! [`Change`]s on a channel.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher as _};

/// What the watcher reports about the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `path` may be new, changed or gone: look at it.
    Touched(PathBuf),
    /// `path` was renamed into the inbox (how `rsync` and atomic writers finish): complete.
    RenamedIn(PathBuf),
    /// Events were lost (queue overflow, a watcher error) or the inbox itself was removed or
    /// moved: list the whole inbox again.
    Rescan,
}

/// A watcher on one directory, or none (the inbox is polled).
pub struct Watch {
    dir: PathBuf,
    watcher: Option<notify::RecommendedWatcher>,
    rx: mpsc::Receiver<Change>,
}

/// The change an event stands for, if any. Access events (opens, reads, closes without
/// writing — the daemon's own reads cause them) stand for none.
fn change_of(dir: &Path, ev: notify::Event) -> Option<Change> {
    use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind, RenameMode};
    if ev.need_rescan() {
        return Some(Change::Rescan);
    }
    let first = ev.paths.first().cloned();
    let touched = |p: Option<PathBuf>| match p {
        Some(p) if p.as_path() != dir => Change::Touched(p),
        _ => Change::Rescan,
    };
    match ev.kind {
        EventKind::Modify(ModifyKind::Name(RenameMode::To)) => match first {
            Some(p) if p.as_path() != dir => Some(Change::RenamedIn(p)),
            _ => Some(Change::Rescan),
        },
        // the `To` event of the same rename is sent too
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => None,
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => Some(touched(first)),
        EventKind::Access(_) => None,
        EventKind::Create(_) | EventKind::Remove(_) | EventKind::Modify(_) => Some(touched(first)),
        EventKind::Any | EventKind::Other => Some(Change::Rescan),
    }
}

impl Watch {
    /// Watch `dir` (absolute). Without a working watcher (a filesystem inotify does not
    /// cover, no inotify instances left), warns once and returns a `Watch` that reports
    /// nothing: the caller polls.
    pub fn start(dir: &Path) -> Watch {
        let (tx, rx) = mpsc::channel::<Change>();
        let d = dir.to_path_buf();
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            let change = match res {
                Ok(ev) => change_of(&d, ev),
                Err(e) => {
                    tracing::debug!(error = %e, "watcher error; listing the inbox again");
                    Some(Change::Rescan)
                }
            };
            if let Some(c) = change {
                let _ = tx.send(c);
            }
        });
        let mut w = Watch {
            dir: dir.to_path_buf(),
            watcher: None,
            rx,
        };
        match watcher {
            Ok(watcher) => {
                w.watcher = Some(watcher);
                w.rearm();
            }
            Err(e) => tracing::warn!(error = %e, "file watcher unavailable; polling the inbox"),
        }
        w
    }

    /// Watch the directory again (after it was removed and made anew); `false` when the
    /// watcher does not work for it (the inbox is polled).
    pub fn rearm(&mut self) -> bool {
        let Some(w) = self.watcher.as_mut() else {
            return false;
        };
        let _ = w.unwatch(&self.dir);
        match w.watch(&self.dir, RecursiveMode::NonRecursive) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "file watcher unavailable; polling the inbox");
                self.watcher = None;
                false
            }
        }
    }

    /// Whether changes are reported (otherwise the inbox must be polled).
    pub fn active(&self) -> bool {
        self.watcher.is_some()
    }

    /// Wait up to `timeout` for a change, then take every change reported so far.
    pub fn wait(&self, timeout: Duration) -> Vec<Change> {
        let mut out = Vec::new();
        if let Ok(c) = self.rx.recv_timeout(timeout) {
            out.push(c);
        }
        out.extend(self.rx.try_iter());
        out
    }

    /// Every change reported so far, without waiting.
    pub fn drain(&self) -> Vec<Change> {
        self.rx.try_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{
        AccessKind, AccessMode, CreateKind, EventKind, Flag, ModifyKind, RemoveKind, RenameMode,
    };

    fn ev(kind: EventKind, paths: &[&str]) -> notify::Event {
        let mut e = notify::Event::new(kind);
        for p in paths {
            e = e.add_path(PathBuf::from(p));
        }
        e
    }

    #[test]
    fn events_map_to_looks_renames_and_rescans() {
        let dir = Path::new("/in");
        let t = |p: &str| Some(Change::Touched(PathBuf::from(p)));
        let name = |m| EventKind::Modify(ModifyKind::Name(m));
        assert_eq!(
            change_of(dir, ev(name(RenameMode::To), &["/in/a"])),
            Some(Change::RenamedIn("/in/a".into()))
        );
        assert_eq!(
            change_of(dir, ev(name(RenameMode::Both), &["/x", "/in/a"])),
            None
        );
        assert_eq!(
            change_of(dir, ev(name(RenameMode::From), &["/in/a"])),
            t("/in/a")
        );
        let create = EventKind::Create(CreateKind::File);
        assert_eq!(change_of(dir, ev(create, &["/in/b"])), t("/in/b"));
        let close = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert_eq!(change_of(dir, ev(close, &["/in/b"])), t("/in/b"));
        let read = EventKind::Access(AccessKind::Close(AccessMode::Read));
        assert_eq!(change_of(dir, ev(read, &["/in/b"])), None);
        let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
        assert_eq!(change_of(dir, ev(open, &["/in/b"])), None);
        let rm = EventKind::Remove(RemoveKind::File);
        assert_eq!(change_of(dir, ev(rm, &["/in/b"])), t("/in/b"));
        // the inbox itself removed or moved, an overflow, an unknown event: list it again
        let rm_dir = EventKind::Remove(RemoveKind::Folder);
        assert_eq!(change_of(dir, ev(rm_dir, &["/in"])), Some(Change::Rescan));
        assert_eq!(
            change_of(dir, ev(name(RenameMode::From), &["/in"])),
            Some(Change::Rescan)
        );
        let overflow = notify::Event::new(EventKind::Other).set_flag(Flag::Rescan);
        assert_eq!(change_of(dir, overflow), Some(Change::Rescan));
        assert_eq!(
            change_of(dir, ev(EventKind::Any, &[])),
            Some(Change::Rescan)
        );
    }

    #[test]
    fn a_watched_directory_reports_a_new_file_and_a_rename_into_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let w = Watch::start(&dir);
        assert!(
            w.active(),
            "inotify works on the test's temporary directory"
        );
        std::fs::write(dir.join("a.txt"), "x\n").unwrap();
        std::fs::write(dir.join(".b.tmp"), "y\n").unwrap();
        std::fs::rename(dir.join(".b.tmp"), dir.join("b.txt")).unwrap();
        let mut got = Vec::new();
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_secs(5)
            && !got.contains(&Change::RenamedIn(dir.join("b.txt")))
        {
            got.extend(w.wait(Duration::from_millis(100)));
        }
        assert!(got.contains(&Change::Touched(dir.join("a.txt"))), "{got:?}");
        assert!(
            got.contains(&Change::RenamedIn(dir.join("b.txt"))),
            "{got:?}"
        );
    }
}
