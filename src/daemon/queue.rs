//! The inbox's candidate files in memory: what was last observed of each, which are complete
//! (in the order they are taken: mtime, then name) and which must be looked at again when.
//!
//! The queue makes no system calls: [`super::inbox::Inbox`] lstats a path and reports what it
//! saw ([`Queue::observe`], [`Queue::gone`]), or a whole listing ([`Queue::merge`]). Every
//! operation costs O(log n) in the number of known files, except `merge`, which is linear in
//! the listing. Observations may arrive in any order and any number of times: the state of a
//! path depends only on what was observed of it and when, never on the order of other paths.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// The longest wait before a settling file is looked at again (a file whose mtime lies in the
/// future, or a wall clock that jumps, is re-checked at least this often).
pub const LONGEST_RECHECK: Duration = Duration::from_secs(1);

/// Observed state of a candidate file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub len: u64,
    pub mtime: SystemTime,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Complete: in `ready`.
    Ready,
    /// Settling: in `due` at this instant.
    Settling(Instant),
}

#[derive(Debug, Clone)]
struct Entry {
    seen: Seen,
    /// When `seen` was first observed as it is.
    since: Instant,
    /// Renamed into the inbox: complete as soon as it is seen.
    renamed: bool,
    state: State,
}

/// Candidate files and when to look at which again.
#[derive(Debug)]
pub struct Queue {
    settle: Duration,
    known: HashMap<PathBuf, Entry>,
    ready: BTreeSet<(SystemTime, PathBuf)>,
    /// Paths to look at again, by when; a path may be here without being known (a file just
    /// taken, held open, unreadable or stuck: looked at again from scratch).
    due: BTreeSet<(Instant, PathBuf)>,
    /// The instant each path is due at (one per path).
    due_at: HashMap<PathBuf, Instant>,
}

impl Queue {
    /// A file is complete once it was observed unchanged `min(settle, 200 ms)` apart and its
    /// mtime is at least `settle` old (or once it was renamed in).
    pub fn new(settle: Duration) -> Queue {
        Queue {
            settle,
            known: HashMap::new(),
            ready: BTreeSet::new(),
            due: BTreeSet::new(),
            due_at: HashMap::new(),
        }
    }

    /// How long an unchanged observation must last before the file counts as complete.
    fn gap(&self) -> Duration {
        self.settle.min(Duration::from_millis(200))
    }

    /// `path` is `s` at `at` (wall clock `wall`); `renamed`: it was renamed into the inbox.
    /// Afterwards it is either ready or due to be looked at again.
    pub fn observe(&mut self, path: &Path, s: Seen, renamed: bool, at: Instant, wall: SystemTime) {
        let entry = self.known.remove(path);
        let mut e = match entry {
            Some(e) => {
                self.unlist(path, &e);
                e
            }
            None => Entry {
                seen: s,
                since: at,
                renamed: false,
                state: State::Settling(at),
            },
        };
        e.renamed |= renamed;
        if e.seen != s {
            e.seen = s;
            e.since = at;
        }
        let age = wall.duration_since(s.mtime).ok();
        let old_enough = age.is_some_and(|a| a >= self.settle);
        // seen twice, `gap` apart (two looks even when the gap is zero)
        let stable = e.since < at && at.duration_since(e.since) >= self.gap();
        if e.renamed || (stable && old_enough) {
            e.state = State::Ready;
            self.ready.insert((s.mtime, path.to_path_buf()));
        } else {
            let until_stable = (e.since + self.gap()).saturating_duration_since(at);
            let until_old = match age {
                Some(a) => self.settle.saturating_sub(a),
                None => LONGEST_RECHECK,
            };
            let wait = until_stable.max(until_old).min(LONGEST_RECHECK);
            let when = at + wait;
            e.state = State::Settling(when);
            self.schedule(path, when);
        }
        self.known.insert(path.to_path_buf(), e);
    }

    /// `path` is not in the inbox (or not a candidate): forget it.
    pub fn gone(&mut self, path: &Path) {
        if let Some(e) = self.known.remove(path) {
            self.unlist(path, &e);
        }
        self.unschedule(path);
    }

    /// Forget what was observed of `path` and look at it again, from scratch, at `when`
    /// (instead of any time it was due at before).
    pub fn again_at(&mut self, path: &Path, when: Instant) {
        self.gone(path);
        self.schedule(path, when);
    }

    /// A complete listing of the inbox's candidates: paths not in it are forgotten (unless
    /// only due to be looked at again), the others observed.
    pub fn merge(&mut self, listing: Vec<(PathBuf, Seen)>, at: Instant, wall: SystemTime) {
        let present: HashSet<&PathBuf> = listing.iter().map(|(p, _)| p).collect();
        let missing: Vec<PathBuf> = self
            .known
            .keys()
            .filter(|p| !present.contains(p))
            .cloned()
            .collect();
        for p in missing {
            self.gone(&p);
        }
        for (p, s) in &listing {
            self.observe(p, *s, false, at, wall);
        }
    }

    /// The paths due to be looked at by `now`, removed from the schedule (their entries stay
    /// until observed again).
    pub fn due_by(&mut self, now: Instant) -> Vec<PathBuf> {
        let mut out = Vec::new();
        while let Some((when, _)) = self.due.first() {
            if *when > now {
                break;
            }
            let (_, p) = self.due.pop_first().expect("non-empty");
            self.due_at.remove(&p);
            out.push(p);
        }
        out
    }

    /// When the next path is due, if any.
    pub fn next_due(&self) -> Option<Instant> {
        self.due.first().map(|(w, _)| *w)
    }

    /// The first complete files in take order (at most `n`).
    pub fn first_ready(&self, n: usize) -> Vec<PathBuf> {
        self.ready.iter().take(n).map(|(_, p)| p.clone()).collect()
    }

    /// What was last observed of `path`, if it is known.
    pub fn seen(&self, path: &Path) -> Option<Seen> {
        self.known.get(path).map(|e| e.seen)
    }

    /// Whether `path` is known and complete.
    #[cfg(test)]
    pub fn is_ready(&self, path: &Path) -> bool {
        self.known
            .get(path)
            .is_some_and(|e| e.state == State::Ready)
    }

    /// How many files are known.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether no file is known.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// Remove `e` (of `path`) from `ready`.
    fn unlist(&mut self, path: &Path, e: &Entry) {
        if e.state == State::Ready {
            self.ready.remove(&(e.seen.mtime, path.to_path_buf()));
        }
    }

    /// Look at `path` again at `when` (or earlier, when it is due earlier already).
    fn schedule(&mut self, path: &Path, when: Instant) {
        if let Some(old) = self.due_at.get(path).copied() {
            if old <= when {
                return;
            }
            self.due.remove(&(old, path.to_path_buf()));
        }
        self.due.insert((when, path.to_path_buf()));
        self.due_at.insert(path.to_path_buf(), when);
    }

    fn unschedule(&mut self, path: &Path) {
        if let Some(old) = self.due_at.remove(path) {
            self.due.remove(&(old, path.to_path_buf()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTLE: Duration = Duration::from_millis(1000);

    fn seen(len: u64, mtime: SystemTime) -> Seen {
        Seen { len, mtime }
    }

    fn p(name: &str) -> PathBuf {
        PathBuf::from("/inbox").join(name)
    }

    /// Observe each path of `files` at `t0` and again at every due time until none is due,
    /// in the order given.
    fn settle_all(q: &mut Queue, files: &[(PathBuf, Seen)], t0: Instant, wall: SystemTime) {
        for (f, s) in files {
            q.observe(f, *s, false, t0, wall);
        }
        let mut now = t0;
        for _ in 0..10 {
            now += LONGEST_RECHECK;
            for f in q.due_by(now) {
                let s = files.iter().find(|x| x.0 == f).unwrap().1;
                q.observe(&f, s, false, now, wall + (now - t0));
            }
        }
    }

    #[test]
    fn files_become_ready_in_mtime_then_name_order_whatever_order_they_are_seen_in() {
        let wall = SystemTime::now();
        let old = wall - Duration::from_secs(60);
        let files = [
            (p("c"), seen(1, old)),
            (p("a"), seen(1, old + Duration::from_secs(1))),
            (p("b"), seen(1, old)),
            (p("d"), seen(1, old - Duration::from_secs(1))),
        ];
        let t0 = Instant::now();
        let want = vec![p("d"), p("b"), p("c"), p("a")];
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]] {
            let mut q = Queue::new(SETTLE);
            let shuffled: Vec<_> = order.iter().map(|&i| files[i].clone()).collect();
            settle_all(&mut q, &shuffled, t0, wall);
            assert_eq!(q.first_ready(10), want, "seen in order {order:?}");
        }
    }

    #[test]
    fn a_file_is_ready_only_after_two_equal_observations_and_once_old_enough() {
        let wall = SystemTime::now();
        let t0 = Instant::now();
        let mut q = Queue::new(SETTLE);
        let f = p("f");
        // an old file: ready after the second look, 200 ms later
        q.observe(&f, seen(5, wall - SETTLE * 2), false, t0, wall);
        assert!(q.first_ready(1).is_empty());
        assert_eq!(q.next_due(), Some(t0 + Duration::from_millis(200)));
        assert!(q.due_by(t0 + Duration::from_millis(199)).is_empty());
        assert_eq!(q.due_by(t0 + Duration::from_millis(200)), vec![f.clone()]);
        // it grew meanwhile: settling again
        let t1 = t0 + Duration::from_millis(200);
        q.observe(&f, seen(6, wall), false, t1, wall);
        assert!(!q.is_ready(&f));
        // unchanged, but its mtime is not `settle` old yet
        let t2 = t1 + Duration::from_millis(500);
        q.observe(
            &f,
            seen(6, wall),
            false,
            t2,
            wall + Duration::from_millis(500),
        );
        assert!(!q.is_ready(&f));
        let t3 = t1 + SETTLE;
        q.observe(&f, seen(6, wall), false, t3, wall + SETTLE);
        assert_eq!(q.first_ready(2), vec![f]);
    }

    #[test]
    fn a_renamed_in_file_is_ready_at_once_and_stays_so_until_it_is_gone() {
        let wall = SystemTime::now();
        let t0 = Instant::now();
        let mut q = Queue::new(SETTLE);
        q.observe(&p("r"), seen(3, wall), true, t0, wall);
        assert_eq!(q.first_ready(1), vec![p("r")]);
        // a later change event for it keeps it ready (it was complete when renamed in)
        q.observe(&p("r"), seen(4, wall), false, t0, wall);
        assert!(q.is_ready(&p("r")));
        q.gone(&p("r"));
        assert!(q.first_ready(1).is_empty() && q.is_empty());
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn a_file_removed_before_it_is_taken_is_never_offered_and_a_new_one_of_its_name_settles_afresh()
    {
        let wall = SystemTime::now();
        let old = wall - Duration::from_secs(60);
        let t0 = Instant::now();
        let mut q = Queue::new(SETTLE);
        settle_all(&mut q, &[(p("x"), seen(1, old))], t0, wall);
        assert!(q.is_ready(&p("x")));
        q.gone(&p("x"));
        assert!(q.first_ready(1).is_empty());
        // the removal reported again, or before a creation that comes after it
        q.gone(&p("x"));
        let t1 = t0 + Duration::from_secs(30);
        q.observe(&p("x"), seen(2, old), false, t1, wall);
        assert!(!q.is_ready(&p("x")), "a new file must settle");
        assert_eq!(q.due_by(t1 + Duration::from_millis(200)), vec![p("x")]);
    }

    #[test]
    fn a_rescan_merges_forgets_what_is_gone_keeps_what_is_unchanged_and_settles_what_changed() {
        let wall = SystemTime::now();
        let old = wall - Duration::from_secs(60);
        let t0 = Instant::now();
        let mut q = Queue::new(SETTLE);
        let files = vec![
            (p("a"), seen(1, old)),
            (p("b"), seen(1, old)),
            (p("c"), seen(1, old)),
        ];
        settle_all(&mut q, &files, t0, wall);
        assert_eq!(q.first_ready(9), vec![p("a"), p("b"), p("c")]);
        // events were lost: b is gone, c grew, d is new
        let t1 = t0 + Duration::from_secs(20);
        let listing = vec![
            (p("d"), seen(1, old)),
            (p("c"), seen(2, old)),
            (p("a"), seen(1, old)),
        ];
        q.merge(listing, t1, wall);
        assert_eq!(
            q.first_ready(9),
            vec![p("a")],
            "a is unchanged: still ready"
        );
        assert_eq!(q.len(), 3);
        let mut due = q.due_by(t1 + Duration::from_millis(200));
        due.sort();
        assert_eq!(due, vec![p("c"), p("d")]);
    }

    #[test]
    fn a_path_looked_at_again_loses_its_state_and_is_due_once() {
        let wall = SystemTime::now();
        let t0 = Instant::now();
        let mut q = Queue::new(SETTLE);
        let f = p("f");
        q.observe(&f, seen(1, wall - SETTLE), true, t0, wall);
        let later = t0 + Duration::from_secs(5);
        q.again_at(&f, later);
        q.again_at(&f, later + Duration::from_secs(1));
        assert!(q.is_empty() && q.first_ready(1).is_empty());
        assert_eq!(
            q.next_due(),
            Some(later + Duration::from_secs(1)),
            "the last call wins"
        );
        assert_eq!(q.due_by(later + Duration::from_secs(1)), vec![f]);
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn with_no_settle_time_a_file_is_still_seen_twice() {
        let wall = SystemTime::now();
        let t0 = Instant::now();
        let mut q = Queue::new(Duration::ZERO);
        q.observe(&p("z"), seen(1, wall), false, t0, wall);
        assert!(!q.is_ready(&p("z")));
        assert_eq!(q.due_by(t0), vec![p("z")]);
        q.observe(
            &p("z"),
            seen(1, wall),
            false,
            t0 + Duration::from_millis(1),
            wall,
        );
        assert!(q.is_ready(&p("z")));
    }
}
