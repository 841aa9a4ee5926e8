//! A hard cap on the CPU the HTTP server takes: its threads (the connection thread and the
//! store-read threads) may use at most [`CPU_SHARE`] of one core on average, so
//! however many clients poll and however fast, ingest keeps the rest of the machine.
//!
//! The server's threads register their CPU clocks as they start. Requests pass one at a time,
//! in arrival order, through a gate that measures the CPU those threads used (at most every
//! [`CHECK_EVERY`]) against a budget that grows by [`CPU_SHARE`] of the time that passes
//! (a token bucket holding at most [`BURST`]). Within budget a request passes at once; over
//! it, the gate waits until the budget is paid back, and requests queue behind it: a
//! flood of requests slows answers, never ingest. A request that would wait longer than the
//! deadline is answered `503` at once (load shed). A debt that would take more than
//! [`MAX_DEBT_WAIT`] to pay back (one long store read) is forgiven beyond that.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::Response;

use super::AppState;
#[cfg(target_os = "linux")]
use crate::cpu::read_clock;

/// The CPU the server's threads may use on average, as a fraction of one core.
pub const CPU_SHARE: f64 = 0.10;
/// CPU time the server may use at once before the cap holds requests back.
pub const BURST: Duration = Duration::from_millis(10);
/// Longest wait a debt makes requests pay; more debt is forgiven.
pub const MAX_DEBT_WAIT: Duration = Duration::from_secs(2);
/// Longest time between two measurements of the threads' CPU time.
pub const CHECK_EVERY: Duration = Duration::from_millis(2);

/// The CPU clock of one registered thread and its reading at the last measurement (ns).
struct ThreadClock {
    #[cfg(target_os = "linux")]
    clock: libc::clockid_t,
    last: u64,
}

#[derive(Default)]
struct Clocks {
    threads: Vec<(std::thread::ThreadId, ThreadClock)>,
    /// CPU time of threads that ended since the last measurement (ns).
    ended: u64,
}

/// The CPU clocks of the server's threads.
#[derive(Default, Clone)]
pub struct Threads(Arc<Mutex<Clocks>>);

impl Threads {
    /// Count the calling thread's CPU time from now on.
    pub fn register(&self) {
        #[cfg(target_os = "linux")]
        {
            let mut clock: libc::clockid_t = 0;
            // SAFETY: the calling thread's own handle, and a valid place for the clock id.
            let r = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
            let Some(now) = (r == 0).then(|| read_clock(clock)).flatten() else {
                return;
            };
            if let Ok(mut c) = self.0.lock() {
                let id = std::thread::current().id();
                c.threads.push((id, ThreadClock { clock, last: now }));
            }
        }
    }

    /// Stop counting the calling thread (it ends), keeping the CPU time it used.
    pub fn unregister(&self) {
        let id = std::thread::current().id();
        if let Ok(mut c) = self.0.lock() {
            if let Some(i) = c.threads.iter().position(|(t, _)| *t == id) {
                let (_, t) = c.threads.swap_remove(i);
                #[cfg(target_os = "linux")]
                {
                    let used = read_clock(t.clock).unwrap_or(t.last).saturating_sub(t.last);
                    c.ended += used;
                }
                #[cfg(not(target_os = "linux"))]
                let _ = t;
            }
        }
    }

    /// CPU time the registered threads used since the last call (ns).
    fn used_since_last(&self) -> u64 {
        let Ok(mut c) = self.0.lock() else {
            return 0;
        };
        let mut used = std::mem::take(&mut c.ended);
        #[cfg(target_os = "linux")]
        for (_, t) in c.threads.iter_mut() {
            if let Some(now) = read_clock(t.clock) {
                used += now.saturating_sub(t.last);
                t.last = now;
            }
        }
        used
    }
}

/// The budget: CPU time (ns) the server may still use; negative when it is in debt.
struct Budget {
    tokens: f64,
    at: Instant,
}

/// The gate every request passes.
pub struct Governor {
    threads: Threads,
    share: f64,
    burst: f64,
    gate: tokio::sync::Mutex<Budget>,
}

impl Governor {
    /// A cap of `share` of one core on the CPU of `threads`, with `burst` at once.
    pub fn new(threads: Threads, share: f64, burst: Duration) -> Governor {
        let burst = burst.as_nanos() as f64;
        Governor {
            threads,
            share,
            burst,
            gate: tokio::sync::Mutex::new(Budget {
                tokens: burst,
                at: Instant::now(),
            }),
        }
    }

    /// Wait (in arrival order) until the server is within its CPU budget; `Err` with the
    /// wait when that would take longer than `limit`.
    pub async fn admit(&self, limit: Duration) -> Result<(), Duration> {
        let mut b = self.gate.lock().await;
        loop {
            let now = Instant::now();
            let since = now.duration_since(b.at);
            if b.tokens > 0.0 && since < CHECK_EVERY {
                return Ok(());
            }
            let used = self.threads.used_since_last() as f64;
            b.tokens = (b.tokens + since.as_nanos() as f64 * self.share).min(self.burst) - used;
            // a debt past MAX_DEBT_WAIT is forgiven: one heavy store read (a text search over
            // a large store) holds the others back for a while, not for ten times its length
            b.tokens = b
                .tokens
                .max(-(MAX_DEBT_WAIT.as_nanos() as f64) * self.share);
            b.at = now;
            if b.tokens > 0.0 {
                return Ok(());
            }
            let wait = Duration::from_nanos((-b.tokens / self.share) as u64 + 1);
            if wait > limit {
                return Err(wait);
            }
            tokio::time::sleep(wait).await;
        }
    }
}

/// Hold a request until the server is within its CPU budget (see [`Governor`]); `Err` with
/// the `503` to send when that would take longer than the request deadline. Every request
/// passes here once, before anything else is done for it.
pub(crate) async fn admitted(state: &AppState) -> Result<(), Response> {
    let deadline = state.limits.deadline;
    state.governor.admit(deadline).await.map_err(|wait| {
        super::guard::error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "busy: the server is at its CPU cap and would answer in {:.1} s, past the {} s deadline; try again",
                wait.as_secs_f64(),
                deadline.as_secs()
            ),
        )
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Spin on the calling thread until it has used `d` of CPU time.
    fn burn(d: Duration) {
        let t = Threads::default();
        t.register();
        let mut used = 0;
        let mut x = 0u64;
        while used < d.as_nanos() as u64 {
            for i in 0..10_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
            std::hint::black_box(x);
            used += t.used_since_last();
        }
    }

    /// A runtime and a governor of `share` of a core with a 1 ms burst over this thread's
    /// CPU clock.
    fn governed(share: f64) -> (tokio::runtime::Runtime, Governor) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let threads = Threads::default();
        threads.register();
        (rt, Governor::new(threads, share, Duration::from_millis(1)))
    }

    #[test]
    fn within_budget_passes_over_it_waits_in_proportion_or_is_refused() {
        let (rt, g) = governed(0.5);
        rt.block_on(async {
            // nothing used yet: passes at once
            let t = Instant::now();
            g.admit(Duration::from_secs(5)).await.unwrap();
            assert!(t.elapsed() < Duration::from_millis(50), "{:?}", t.elapsed());
            // 40 ms of CPU at half a core: 78 ms to pay back (the budget holds at most the
            // 1 ms burst however long the burning took)
            burn(Duration::from_millis(40));
            let refused = g.admit(Duration::from_millis(1)).await.unwrap_err();
            assert!(refused > Duration::from_millis(1), "{refused:?}");
            let t = Instant::now();
            g.admit(Duration::from_secs(5)).await.unwrap();
            let waited = t.elapsed();
            assert!(
                waited >= Duration::from_millis(70) && waited < Duration::from_secs(2),
                "waited {waited:?} for 40 ms of CPU at a 0.5 share"
            );
        });
    }

    #[test]
    fn a_long_debt_is_forgiven_past_the_longest_wait() {
        let (rt, g) = governed(0.05);
        // 150 ms of CPU at a twentieth of a core would take 3 s to pay back
        burn(Duration::from_millis(150));
        let wait = rt.block_on(g.admit(Duration::from_millis(1))).unwrap_err();
        assert!(
            wait > MAX_DEBT_WAIT.mul_f64(0.9) && wait <= MAX_DEBT_WAIT + Duration::from_millis(1),
            "{wait:?}"
        );
    }

    #[test]
    fn an_ended_thread_still_counts_once() {
        let threads = Threads::default();
        let t2 = threads.clone();
        std::thread::spawn(move || {
            t2.register();
            burn(Duration::from_millis(5));
            t2.unregister();
        })
        .join()
        .unwrap();
        assert!(threads.0.lock().unwrap().threads.is_empty());
        let used = threads.used_since_last();
        assert!(
            used >= 5_000_000,
            "the ended thread's CPU time is kept: {used} ns"
        );
        assert_eq!(threads.used_since_last(), 0, "and counted once");
    }
}
