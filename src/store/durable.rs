//! How many timesteps are durable, told to whoever waits for the next: the webhook senders
//! (threads, [`Durable::wait_past`]) and the HTTP event stream (async, [`Durable::subscribe`]).
//!
//! Invariant: the count published is never ahead of what sled has flushed. The store
//! publishes it after its flush and its sidecars ([`super::Store::flush`],
//! [`super::Store::settle`]); at open, everything the store holds is durable.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The number of durable timesteps (timesteps `0..n` are durable), with its waiters.
#[derive(Debug)]
pub struct Durable {
    n: Mutex<u64>,
    cv: Condvar,
    tx: tokio::sync::watch::Sender<u64>,
}

impl Durable {
    pub fn new(n: u64) -> Durable {
        Durable {
            n: Mutex::new(n),
            cv: Condvar::new(),
            tx: tokio::sync::watch::Sender::new(n),
        }
    }

    /// The timesteps durable now.
    pub fn timesteps(&self) -> u64 {
        *self.n.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `n` timesteps are durable now (a smaller `n` than published is ignored).
    pub fn publish(&self, n: u64) {
        let mut g = self.n.lock().unwrap_or_else(|p| p.into_inner());
        if n > *g {
            *g = n;
            self.cv.notify_all();
            self.tx.send_replace(n);
        }
    }

    /// Wait until more than `seen` timesteps are durable, or `timeout` passed; returns the
    /// count then.
    pub fn wait_past(&self, seen: u64, timeout: Duration) -> u64 {
        let g = self.n.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self
            .cv
            .wait_timeout_while(g, timeout, |n| *n <= seen)
            .unwrap_or_else(|p| p.into_inner());
        *g
    }

    /// A receiver of every later count (async).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A waiter wakes when a larger count is published, not for an equal or smaller one, and
    /// returns at its timeout otherwise.
    #[test]
    fn waiters_wake_on_a_larger_count_only() {
        let d = Arc::new(Durable::new(3));
        assert_eq!(d.wait_past(3, Duration::from_millis(20)), 3, "timeout");
        d.publish(2);
        assert_eq!(d.timesteps(), 3, "never goes back");
        let w = {
            let d = Arc::clone(&d);
            std::thread::spawn(move || d.wait_past(3, Duration::from_secs(30)))
        };
        std::thread::sleep(Duration::from_millis(20));
        d.publish(5);
        assert_eq!(w.join().unwrap(), 5);
        let mut rx = d.subscribe();
        d.publish(6);
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 6);
    }
}
