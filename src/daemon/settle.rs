//! Files whose timesteps are committed in the background ([`Ingestor::defer`]): each is moved
//! to `processed/` only once its last timestep is durable, and each timestep is logged as
//! committed only then.

use crate::ingest::{FileJob, Ingestor, Outcome};

use super::{finish, shown, Inbox};

/// The files waiting for their last timestep's commit, and the length of the file of each
/// timestep in flight (for its log line).
#[derive(Default)]
pub(super) struct Later {
    jobs: Vec<(u64, FileJob)>,
    lens: Vec<(u64, u64)>,
}

impl Later {
    /// Timestep `timestep`, of a file `len` bytes long, was stepped and its commit is in
    /// flight.
    pub(super) fn stepped(&mut self, timestep: u64, len: u64) {
        self.lens.push((timestep, len));
    }

    /// `job` is stepped to its end; its last timestep is `timestep`. The inbox does not offer
    /// its file again meanwhile.
    pub(super) fn awaiting(&mut self, timestep: u64, job: FileJob, inbox: &mut Inbox) {
        inbox.wait_commit(&job.path);
        self.jobs.push((timestep, job));
    }

    /// Log the timesteps that became durable, and move the files whose every timestep is
    /// (those before the oldest timestep not durable, every one when none is).
    pub(super) fn drain(&mut self, ing: &mut Ingestor, inbox: &mut Inbox) {
        for s in ing.take_settled() {
            if let Outcome::Committed { timestep, .. } = &s.outcome {
                let at = self.lens.iter().position(|(t, _)| t == timestep);
                let len = at.map_or(0, |i| self.lens.remove(i).1);
                log_committed(&shown(&s.name), len, &s.outcome);
            }
        }
        let durable = |t: u64| ing.in_flight().is_none_or(|f| t < f);
        let (done, wait): (Vec<_>, Vec<_>) = self.jobs.drain(..).partition(|(t, _)| durable(*t));
        self.jobs = wait;
        for (_, job) in done {
            inbox.unwait(&job.path);
            finish(ing, inbox, &job);
        }
    }
}

/// The log line of a committed timestep of the file `name` (shown), `len` bytes long.
pub(super) fn log_committed(name: &str, len: u64, o: &Outcome) {
    let Outcome::Committed {
        timestep,
        stats,
        commit,
        start,
        end,
        seconds,
        seconds_store,
        seconds_step,
        seconds_hybrid,
        seconds_commit,
        memory_docs,
    } = o
    else {
        return;
    };
    crate::metrics::timestep_committed(*timestep, stats.docs as u64, stats.novel as u64, *seconds);
    tracing::info!(
        file = %name,
        timestep,
        bytes = format!("{start}..{end} of {len}"),
        docs = stats.docs,
        novel = stats.novel,
        bootstrap = stats.bootstrap,
        ceiling = format!("{:.3}", stats.ceiling_fraction),
        written_kib = commit.bytes / 1024,
        seconds = format!("{seconds:.3}"),
        store_seconds = format!("{seconds_store:.3}"),
        step_seconds = format!("{seconds_step:.3}"),
        vectorize_seconds = format!("{:.3}", stats.seconds_vectorize),
        coding_seconds = format!("{:.3}", stats.seconds_coding),
        coding_iterations = format!("{:.1}", stats.mean_iterations),
        update_seconds = format!("{:.3}", stats.seconds_update),
        topics_seconds = format!("{:.3}", stats.seconds_topics),
        hybrid_seconds = format!("{seconds_hybrid:.3}"),
        commit_seconds = format!("{seconds_commit:.3}"),
        memory_docs = memory_docs.map_or("none".to_string(), |n| n.to_string()),
        "timestep committed"
    );
}

#[cfg(test)]
mod tests {
    use super::super::{continue_file, start_file, Next};
    use super::*;
    use crate::ingest::Limits;
    use crate::store::sidecar::{JournalLine, JOURNAL};
    use novad_models::{ModelParams, Params};
    use std::collections::HashMap;
    use std::time::Duration;

    /// How many timesteps of each file the journal records: it is appended only after the
    /// flush of a commit, so it names exactly the durable timesteps.
    fn durable(store: &std::path::Path) -> HashMap<String, usize> {
        let mut n = HashMap::new();
        let text = std::fs::read_to_string(store.join(JOURNAL)).unwrap_or_default();
        for line in text.lines() {
            if let Ok(JournalLine::Timestep(e)) = serde_json::from_str(line) {
                *n.entry(e.file).or_insert(0) += 1;
            }
        }
        n
    }

    /// The daemon's loop over files of one or two timesteps, committed in the background: a
    /// file reaches processed/ only once all its timesteps are durable, a file waiting for its
    /// commit is not offered again, and in the end every file is moved.
    #[test]
    fn a_file_is_moved_only_once_all_its_timesteps_are_durable() {
        let (store_dir, inbox_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let params = ModelParams::L1(Params::default().with_k(6));
        let mut ing = Ingestor::open(store_dir.path(), Some(&params)).unwrap();
        ing.defer = true;
        let dir = inbox_dir.path().canonicalize().unwrap();
        let mut inbox = Inbox::new(dir.clone(), Duration::ZERO);
        for d in [&inbox.processed, &inbox.rejected] {
            std::fs::create_dir_all(d).unwrap();
        }
        let limits = Limits {
            max_docs: 30,
            max_bytes: 1 << 20,
        };
        let mut later = Later::default();
        let files = 7;
        // files 0, 3 and 6 take two timesteps (40 documents, 30 a timestep), the others one
        let steps = |f: usize| if f % 3 == 0 { 2 } else { 1 };
        for f in 0..files {
            let body: String = (0..20 * steps(f))
                .map(|i| format!("w{} w{} w{} x{f}\n", i % 3, (i + f) % 7, i % 5))
                .collect();
            let path = dir.join(format!("{f}.txt"));
            std::fs::write(&path, body).unwrap();
            let mut job = start_file(&mut ing, &mut inbox, &path, limits)
                .unwrap()
                .unwrap();
            loop {
                match continue_file(&mut ing, &mut inbox, &mut job, limits, &mut later).unwrap() {
                    Next::GoOn => continue,
                    Next::Awaiting(t) => later.awaiting(t, job, &mut inbox),
                    Next::Done => panic!("file {f} finished at once"),
                }
                break;
            }
            later.drain(&mut ing, &mut inbox);
            let counts = durable(store_dir.path());
            for e in std::fs::read_dir(&inbox.processed).unwrap() {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                let want = steps(name.trim_end_matches(".txt").parse().unwrap());
                assert_eq!(
                    counts.get(&name),
                    Some(&want),
                    "{name} moved after file {f}"
                );
            }
            // files awaiting their commit are not offered again
            for _ in 0..2 {
                assert_eq!(inbox.scan().ready, None, "after file {f}");
            }
        }
        let moved = std::fs::read_dir(&inbox.processed).unwrap().count();
        assert!(
            moved < files,
            "every file moved before its last commit settled"
        );
        ing.settle().unwrap();
        later.drain(&mut ing, &mut inbox);
        assert_eq!(std::fs::read_dir(&inbox.processed).unwrap().count(), files);
        let counts = durable(store_dir.path());
        assert!((0..files).all(|f| counts.get(&format!("{f}.txt")) == Some(&steps(f))));
    }
}
