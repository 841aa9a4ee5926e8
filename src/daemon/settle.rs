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

    /// `job` is stepped to its end; its last timestep is `timestep`.
    pub(super) fn awaiting(&mut self, timestep: u64, job: FileJob) {
        self.jobs.push((timestep, job));
    }

    /// Log the timesteps that became durable, and move the files whose every timestep is
    /// (those before the timestep still in flight, every one when none is).
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
