//! The next batch file, read ahead of its turn.
//!
//! A cluster's leader reads and validates the file the daemon takes next while the replicas
//! start on the current file's last timestep (in the `before` slot of
//! [`super::Replicas::step`]), and sends its first range out at the end of that step, so that
//! the replicas tokenise it while the leader finishes the step and writes it; otherwise the
//! replicas would wait, between two timesteps, for the leader to read the file. Nothing is
//! committed or moved here, and the result is only used for the very file it was made of:
//! [`Ingestor::begin`](super::Ingestor::begin) takes it when the file at that path is the same
//! inode with the same length, mtime and ctime, and validates the file itself otherwise. The range
//! parsed on the way is read and hashed again before its commit, as every range is
//! ([`super::file`]). A batch sent out ahead that is not the one stepped next (the file was
//! changed, is a duplicate, …) is abandoned by the leader before anything else
//! ([`crate::cluster`]).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::file::{validate, FileJob, Validated};
use super::{Batch, Limits};

/// The file the daemon takes next, and the limits its timesteps are cut by.
#[derive(Debug, Clone, PartialEq)]
pub struct Upcoming {
    pub path: PathBuf,
    pub limits: Limits,
}

/// A file validated ahead of its turn, and what it was then.
pub(super) struct Prepared {
    path: PathBuf,
    /// (device, inode), length, mtime and ctime (seconds, nanoseconds: no writer can set
    /// it back) when it was validated.
    id: (u64, u64),
    len: u64,
    mtime: SystemTime,
    ctime: (i64, i64),
    limits: Limits,
    validated: Validated,
}

/// Validate the regular batch file at `path` from its start, as [`super::Ingestor::begin`]
/// would for a file never committed. `None` when it is not such a file now, is open for
/// writing (its length is not settled), or cannot be read: the daemon then finds out at its
/// turn.
pub(super) fn prepare(up: &Upcoming, now_ms: i64) -> Option<Prepared> {
    let job = FileJob::open(&up.path).ok()?.ok()?;
    if job.writer_open() != Some(false) {
        return None;
    }
    let md = job.metadata().ok()?;
    let validated = validate(&job, now_ms, up.limits).ok()?;
    Some(Prepared {
        path: up.path.clone(),
        id: job.id(),
        len: job.len(),
        mtime: job.mtime(),
        ctime: (md.ctime(), md.ctime_nsec()),
        limits: up.limits,
        validated,
    })
}

impl Prepared {
    /// The path it validated.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The documents of its first range (texts and times, in file order), when the whole
    /// file validated and that range has documents: the batch its first timestep steps on,
    /// unless the file turns out to be committed before or changes.
    pub(super) fn batch(&self) -> Option<Batch> {
        self.validated.first_batch()
    }

    /// Its validation, when it was made of `job`'s file as it is now (same path, inode,
    /// length, mtime and ctime), from the start, by `limits`.
    pub(super) fn of(self, job: &FileJob, limits: Limits) -> Option<Validated> {
        let ctime = job.metadata().ok().map(|md| (md.ctime(), md.ctime_nsec()));
        let same = self.path == job.path
            && self.id == job.id()
            && self.len == job.len()
            && self.mtime == job.mtime()
            && ctime == Some(self.ctime)
            && self.limits == limits
            && job.pos() == 0
            && !job.writing();
        same.then_some(self.validated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{Begin, Ingestor, Outcome};
    use novad_models::{ModelParams, Params};
    use std::os::unix::fs::FileExt;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, Ingestor) {
        let (store, inbox) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let params = ModelParams::L1(Params::default().with_k(4));
        let ing = Ingestor::open(store.path(), Some(&params)).unwrap();
        (store, inbox, ing)
    }

    fn lines(n: usize, word: &str) -> String {
        (0..n)
            .map(|i| format!("{word} w{} x{}\n", i % 3, i % 5))
            .collect()
    }

    fn upcoming(path: &Path) -> Upcoming {
        Upcoming {
            path: path.to_path_buf(),
            limits: Limits::default(),
        }
    }

    /// Write `n` lines of `word` to `name` in `dir` and validate the file ahead (at time 5)
    /// for `ing`.
    fn prepared(ing: &mut Ingestor, dir: &Path, name: &str, n: usize, word: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, lines(n, word)).unwrap();
        ing.prepared = prepare(&upcoming(&path), 5);
        path
    }

    /// A file validated ahead and left as it is taken as validated (its documents carry the
    /// read-ahead's time, not the time of its turn); one rewritten in place since, even with
    /// its length and mtime kept, is validated again (its ctime moved), so nothing of it is
    /// committed.
    #[test]
    fn a_prepared_file_is_taken_unless_it_was_rewritten_in_place() {
        let (_s, inbox, mut ing) = setup();
        let limits = Limits::default();
        let path = prepared(&mut ing, inbox.path(), "a.txt", 12, "alpha");
        assert!(ing.prepared.as_ref().and_then(Prepared::batch).is_some());
        let Begin::Job(mut job) = ing.begin(&path, 7, limits).unwrap() else {
            panic!("a valid file is a job")
        };
        match ing.next_timestep(&mut job, limits, 7).unwrap() {
            Outcome::Committed { .. } => {}
            o => panic!("{o:?}"),
        }
        assert!(
            ing.store.verdict_at(5, 0, 0).unwrap().is_some(),
            "not taken"
        );
        // rewritten in place, length and mtime kept
        let path = prepared(&mut ing, inbox.path(), "b.txt", 12, "beta");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        // a NUL byte: the file no longer validates
        f.write_all_at(b"\0", 3).unwrap();
        f.set_modified(mtime).unwrap();
        drop(f);
        match ing.begin(&path, 7, limits).unwrap() {
            Begin::Rejected(why) => assert!(why.contains("line 1"), "{why}"),
            _ => panic!("the validation made before the rewrite was taken"),
        }
        assert_eq!(ing.engine.timestep(), 1);
    }

    /// A file replaced, grown or touched since it was validated ahead is validated again.
    #[test]
    fn a_file_changed_since_it_was_prepared_is_validated_again() {
        let (_s, inbox, mut ing) = setup();
        let limits = Limits::default();
        // replaced by another file (another inode) that does not validate
        let path = prepared(&mut ing, inbox.path(), "a.txt", 12, "alpha");
        let tmp = inbox.path().join(".b");
        std::fs::write(&tmp, "alpha \0 beta\n").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert!(matches!(
            ing.begin(&path, 5, limits).unwrap(),
            Begin::Rejected(_)
        ));
        // grown: the new lines are part of the job's first range
        prepared(&mut ing, inbox.path(), "a.txt", 12, "alpha");
        let more = lines(3, "gamma");
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all_at(more.as_bytes(), 0).unwrap();
        drop(f);
        let Begin::Job(mut job) = ing.begin(&path, 5, limits).unwrap() else {
            panic!("a valid grown file is a job")
        };
        assert_eq!(job.len(), std::fs::metadata(&path).unwrap().len());
        match ing.next_timestep(&mut job, limits, 5).unwrap() {
            Outcome::Committed { end, .. } => assert_eq!(end, job.len()),
            o => panic!("{o:?}"),
        }
        // a preparation of another file is kept for that file
        let other = prepared(&mut ing, inbox.path(), "c.txt", 4, "delta");
        let third = inbox.path().join("d.txt");
        std::fs::write(&third, lines(4, "omega")).unwrap();
        assert!(matches!(
            ing.begin(&third, 5, limits).unwrap(),
            Begin::Job(_)
        ));
        assert!(ing.prepared.as_ref().is_some_and(|p| p.path() == other));
    }
}
