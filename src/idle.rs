//! Work at the lowest CPU priority (`SCHED_IDLE`, sched(7)): on a busy core it runs only while
//! the process's other threads wait — a cluster's leader waits for its peers in every round of a
//! step. A thread someone waits for is raised back to normal priority meanwhile, so other work
//! can never starve it (the store's committer, [`crate::store`]); the [`Dropper`] needs no
//! raising: a caller never waits for it.
//!
//! Lowering is done only when it can be undone ([`can_raise`]); otherwise the work runs at
//! normal priority, which changes when it runs, never what it computes.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;

/// Set the scheduling policy of thread `tid` of this process (0: the calling thread) to
/// `policy` (`SCHED_IDLE` or `SCHED_OTHER`); false when the system refuses.
pub(crate) fn set_policy(tid: libc::pid_t, policy: libc::c_int) -> bool {
    // SAFETY: sched_setscheduler changes only the policy of thread `tid`; the parameter is a
    // valid, initialised struct.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(tid, policy, &param) == 0
    }
}

/// Whether a thread of this process put at `SCHED_IDLE` may be put back at `SCHED_OTHER`
/// (nice 0): as root, or with `RLIMIT_NICE` ≥ 20 (sched(7)).
pub(crate) fn can_raise() -> bool {
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

/// Put the calling thread at `SCHED_IDLE` when that can be undone, and publish its thread id in
/// `tid` (whether lowered or not) so that a waiter can raise it. True when it was lowered.
pub(crate) fn lower_self(tid: &AtomicI32) -> bool {
    let lowered = can_raise() && set_policy(0, libc::SCHED_IDLE);
    // SAFETY: gettid has no preconditions.
    tid.store(unsafe { libc::gettid() }, Ordering::Release);
    lowered
}

/// Set the policy of the thread whose id `tid` publishes ([`lower_self`]), once it has
/// published it; nothing when the process may not raise a thread back.
pub(crate) fn set_published(tid: &AtomicI32, policy: libc::c_int) {
    if !can_raise() {
        return;
    }
    let id = loop {
        match tid.load(Ordering::Acquire) {
            0 => std::thread::yield_now(),
            t => break t,
        }
    };
    set_policy(id, policy);
}

/// A thread at idle priority that drops what it is given ([`Dropper::drop`]): freeing a large
/// value (the model a step replaced) then happens while the process waits, not on the step's
/// path. At most `queue` values wait for it; one more is dropped by the caller at once, so the
/// memory held for it stays bounded whether or not the process ever waits.
pub struct Dropper {
    tx: Option<SyncSender<Box<dyn Send>>>,
}

impl Dropper {
    /// A dropper with room for `queue` values (none, dropping every value at once, when no
    /// thread can be started).
    pub fn new(queue: usize) -> Dropper {
        let (tx, rx) = sync_channel::<Box<dyn Send>>(queue);
        let started = std::thread::Builder::new()
            .name("novad-drop".into())
            .spawn(move || {
                lower_self(&AtomicI32::new(0));
                for value in rx {
                    drop(value);
                }
            });
        Dropper {
            tx: started.ok().map(|_| tx),
        }
    }

    /// Drop `value` on the dropper's thread, or here when its queue is full.
    pub fn drop<T: Send + 'static>(&self, value: T) {
        let Some(tx) = &self.tx else {
            return;
        };
        match tx.try_send(Box::new(value)) {
            Ok(()) => {}
            Err(TrySendError::Full(v) | TrySendError::Disconnected(v)) => drop(v),
        }
    }
}

/// Drop `value` on the process's [`Dropper`] (room for two values).
pub fn drop_later<T: Send + 'static>(value: T) {
    static DROPPER: OnceLock<Dropper> = OnceLock::new();
    DROPPER.get_or_init(|| Dropper::new(2)).drop(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads the calling thread's scheduling policy.
    fn policy() -> libc::c_int {
        // SAFETY: sched_getscheduler(0) reads the calling thread's policy.
        unsafe { libc::sched_getscheduler(0) }
    }

    /// Tells, when dropped, the name of the thread that dropped it and its policy; waits for
    /// `hold` first, when given.
    struct Probe {
        name: &'static str,
        told: std::sync::mpsc::Sender<(&'static str, Option<String>, libc::c_int)>,
        hold: Option<std::sync::mpsc::Receiver<()>>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            let t = std::thread::current();
            let _ = self
                .told
                .send((self.name, t.name().map(String::from), policy()));
            if let Some(h) = self.hold.take() {
                let _ = h.recv();
            }
        }
    }

    #[test]
    fn the_dropper_drops_at_idle_priority_and_the_caller_once_its_queue_is_full() {
        let d = Dropper::new(2);
        let (told, heard) = std::sync::mpsc::channel();
        let (release, hold) = std::sync::mpsc::channel();
        let probe = |name, hold| Probe {
            name,
            told: told.clone(),
            hold,
        };
        d.drop(probe("first", Some(hold)));
        // the first is being dropped (and holds the thread): two more fill the queue
        let (name, thread, p) = heard.recv().unwrap();
        assert_eq!((name, thread.as_deref()), ("first", Some("novad-drop")));
        if can_raise() {
            assert_eq!(p, libc::SCHED_IDLE);
        }
        d.drop(probe("second", None));
        d.drop(probe("third", None));
        d.drop(probe("fourth", None));
        let (name, thread, _) = heard.recv().unwrap();
        assert_eq!(
            name, "fourth",
            "dropped by the caller, the queue being full"
        );
        assert_eq!(thread, std::thread::current().name().map(String::from));
        release.send(()).unwrap();
        for want in ["second", "third"] {
            let (name, thread, _) = heard.recv().unwrap();
            assert_eq!((name, thread.as_deref()), (want, Some("novad-drop")));
        }
    }
}
