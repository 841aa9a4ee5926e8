//! Delivery: one thread per receiver sends its messages from the store's outbox in timestep
//! order, each once its timestep is durable, and removes a message once the receiver answered
//! 2xx (flushed at once). A failed attempt is retried after an exponential back-off with
//! jitter ([`backoff`]); a message still failing [`super::Receiver::give_up_after`] after its
//! commit is parked: kept, listed by `novad status`, not tried again (until the daemon is
//! started with `--notify-retry-parked`). A parked message does not hold up later ones.
//!
//! The threads run below the process's CPU priority and never hold anything ingest waits for:
//! ingest only writes new outbox records in its transactions; the threads rewrite or remove
//! records of timesteps already durable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{sign, Receiver};
use crate::store::durable::Durable;
use crate::store::schema::{receiver_id, OutboxRecord, OUTBOX};

/// Longest wait for an answer (connecting, sending and reading it).
pub const TIMEOUT: Duration = Duration::from_secs(15);
/// First retry delay, and the longest.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
pub const LONGEST_RETRY: Duration = Duration::from_secs(600);

/// The delay before attempt `attempts + 1` of message `id`, after `attempts` ≥ 1 failures:
/// [`FIRST_RETRY`] doubled per failure up to [`LONGEST_RETRY`], times a jitter factor in
/// [0.5, 1) drawn from blake3 of (id, attempts), so receivers that fail together do not get
/// their retries together, and a given message's schedule is reproducible.
pub fn backoff(id: &str, attempts: u32) -> Duration {
    let exp = attempts.saturating_sub(1).min(20);
    let full = (FIRST_RETRY.as_secs_f64() * 2f64.powi(exp as i32)).min(LONGEST_RETRY.as_secs_f64());
    let h = blake3::hash(format!("{id}\0{attempts}").as_bytes());
    let u = u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap()) as f64 / u64::MAX as f64;
    Duration::from_secs_f64(full * (0.5 + 0.5 * u.min(0.999_999)))
}

/// What an attempt got.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// A 2xx answer.
    Delivered(u16),
    /// Another status, or no answer (the reason).
    Failed(String),
}

/// POST `rec`'s body to its receiver with the message headers (and the signature when `secret`
/// is given). Blocking, at most [`TIMEOUT`].
pub fn send(agent: &ureq::Agent, rec: &OutboxRecord, secret: Option<&[u8]>) -> Attempt {
    let mut req = agent
        .post(&rec.url)
        .header("Content-Type", "application/json")
        .header("Idempotency-Key", &rec.id)
        .header("X-Novad-Delivery", &rec.id)
        .header("X-Novad-Event", "timestep");
    if let Some(s) = secret {
        req = req.header(sign::HEADER, &sign::signature(s, &rec.body));
    }
    match req.send(&rec.body[..]) {
        Ok(r) if r.status().is_success() => Attempt::Delivered(r.status().as_u16()),
        Ok(r) => Attempt::Failed(format!("HTTP {}", r.status())),
        Err(e) => Attempt::Failed(e.to_string()),
    }
}

/// The agent every sender uses: [`TIMEOUT`], no redirects (a POST is not replayed
/// elsewhere), statuses as answers.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(TIMEOUT))
        .timeout_connect(Some(Duration::from_secs(5)))
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("novad/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// The running senders. Dropping it asks them to stop and waits up to two seconds.
pub struct Senders {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for Senders {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let until = Instant::now() + Duration::from_secs(2);
        for t in self.threads.drain(..) {
            while !t.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Start one sender per receiver over the outbox of `db`; `durable` says which timesteps
/// may be sent.
pub fn start(
    db: &sled::Db,
    receivers: &[Receiver],
    durable: Arc<Durable>,
) -> std::io::Result<Senders> {
    let stop = Arc::new(AtomicBool::new(false));
    let tree = db.open_tree(OUTBOX).map_err(std::io::Error::other)?;
    let mut threads = Vec::new();
    for (i, r) in receivers.iter().enumerate() {
        let (db, tree, r, durable, stop) = (
            db.clone(),
            tree.clone(),
            r.clone(),
            Arc::clone(&durable),
            Arc::clone(&stop),
        );
        threads.push(
            std::thread::Builder::new()
                .name(format!("novad-hook-{i}"))
                .spawn(move || {
                    crate::http::lower_thread_priority();
                    run(&db, &tree, &r, &durable, &stop)
                })?,
        );
    }
    Ok(Senders { stop, threads })
}

/// The first message of receiver `prefix` that is neither parked nor of a timestep at or past
/// `durable`.
fn next(tree: &sled::Tree, prefix: &[u8], durable: u64) -> Option<(sled::IVec, OutboxRecord)> {
    for kv in tree.scan_prefix(prefix) {
        let (k, v) = match kv {
            Ok(kv) => kv,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the webhook outbox");
                return None;
            }
        };
        match postcard::from_bytes::<OutboxRecord>(&v) {
            Ok(rec) if rec.timestep >= durable => return None,
            Ok(rec) if !rec.parked => return Some((k, rec)),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "a webhook message does not decode; skipped"),
        }
    }
    None
}

/// A sender's loop: until `stop`, send the receiver's next due message.
fn run(db: &sled::Db, tree: &sled::Tree, r: &Receiver, durable: &Durable, stop: &AtomicBool) {
    let agent = agent();
    let prefix = receiver_id(&r.url);
    while !stop.load(Ordering::SeqCst) {
        let seen = durable.timesteps();
        let Some((key, mut rec)) = next(tree, &prefix, seen) else {
            durable.wait_past(seen, Duration::from_millis(500));
            continue;
        };
        let wait = rec.next_at - now_ms();
        if wait > 0 {
            std::thread::sleep(Duration::from_millis(wait.min(500) as u64));
            continue;
        }
        match send(&agent, &rec, r.secret.as_deref()) {
            Attempt::Delivered(status) => {
                let removed = tree.remove(&key).and_then(|_| db.flush().map(|_| ()));
                if let Err(e) = removed {
                    tracing::warn!(error = %e, id = %rec.id, "a delivered webhook message could not be removed; it will be sent again with the same Idempotency-Key");
                }
                crate::metrics::webhook_delivered();
                tracing::debug!(url = %super::shown_url(&r.url), id = %rec.id, status, "webhook delivered");
            }
            Attempt::Failed(why) => {
                crate::metrics::webhook_failed();
                rec.attempts += 1;
                let age = Duration::from_millis((now_ms() - rec.created_at).max(0) as u64);
                if age >= r.give_up_after {
                    rec.parked = true;
                    tracing::error!(url = %super::shown_url(&r.url), id = %rec.id, attempts = rec.attempts, error = %why, "webhook message parked: its receiver failed for too long (novad status lists it; --notify-retry-parked sends it again)");
                } else {
                    let d = backoff(&rec.id, rec.attempts);
                    rec.next_at = now_ms() + d.as_millis() as i64;
                    if rec.attempts == 1 || rec.attempts.is_power_of_two() {
                        tracing::warn!(url = %super::shown_url(&r.url), id = %rec.id, attempts = rec.attempts, error = %why, retry_in_secs = d.as_secs_f64(), "webhook delivery failed; will retry");
                    }
                }
                rec.last_error = Some(why);
                let bytes = postcard::to_stdvec(&rec).expect("a record serialises");
                // a parked message stays parked after a crash (an attempt's count may not)
                let parked = rec.parked;
                let recorded = tree.insert(&key, bytes).and_then(|_| {
                    if parked {
                        db.flush().map(|_| ())
                    } else {
                        Ok(())
                    }
                });
                if let Err(e) = recorded {
                    tracing::warn!(error = %e, "cannot record a webhook attempt");
                    // not recorded: wait out its back-off here rather than retry at once
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
    }
}

/// Make every parked message due again (attempts from 0), for `--notify-retry-parked`;
/// returns how many. Flushed.
pub fn retry_parked(db: &sled::Db) -> Result<usize, sled::Error> {
    let tree = db.open_tree(OUTBOX)?;
    let mut n = 0;
    for kv in tree.iter() {
        let (k, v) = kv?;
        if let Ok(mut rec) = postcard::from_bytes::<OutboxRecord>(&v) {
            if rec.parked {
                rec.parked = false;
                rec.attempts = 0;
                rec.next_at = 0;
                rec.created_at = now_ms();
                tree.insert(k, postcard::to_stdvec(&rec).expect("a record serialises"))?;
                n += 1;
            }
        }
    }
    db.flush()?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schema::outbox_key;

    fn record(url: &str, timestep: u64, parked: bool) -> (Vec<u8>, Vec<u8>) {
        let rec = OutboxRecord {
            id: format!("t{timestep}"),
            url: url.into(),
            timestep,
            created_at: 0,
            body: b"{}".to_vec(),
            attempts: 0,
            next_at: 0,
            last_error: None,
            parked,
        };
        (
            outbox_key(url, timestep).to_vec(),
            postcard::to_stdvec(&rec).unwrap(),
        )
    }

    /// A sender takes its receiver's oldest message that is not parked, and none of a
    /// timestep that is not durable yet (nor anything after it).
    #[test]
    fn the_next_message_is_the_oldest_durable_one_not_parked() {
        let d = tempfile::tempdir().unwrap();
        let db = sled::open(d.path()).unwrap();
        let tree = db.open_tree(OUTBOX).unwrap();
        let (a, b) = ("http://a/", "http://b/");
        for (k, v) in [
            record(a, 1, true),
            record(a, 2, false),
            record(a, 3, false),
            record(b, 0, false),
        ] {
            tree.insert(k, v).unwrap();
        }
        let first = |durable| next(&tree, &receiver_id(a), durable).map(|(_, r)| r.timestep);
        assert_eq!(
            first(2),
            None,
            "timestep 2 is not durable while 2 timesteps are"
        );
        assert_eq!(first(3), Some(2), "the parked timestep 1 is passed over");
        assert_eq!(first(10), Some(2));
        assert_eq!(
            next(&tree, &receiver_id(b), 1).map(|(_, r)| r.timestep),
            Some(0),
            "each receiver its own"
        );
        assert_eq!(
            next(&tree, &receiver_id(b), 0).map(|(_, r)| r.timestep),
            None
        );
    }

    /// The delay doubles from one second up to ten minutes, each within [½, 1) of its step,
    /// and is the same for the same message and attempt.
    #[test]
    fn backoff_doubles_with_jitter_up_to_its_cap() {
        for a in 1..30u32 {
            let full = (2f64.powi(a as i32 - 1)).min(600.0);
            let d = backoff("t3-abc", a).as_secs_f64();
            assert!(d >= 0.5 * full && d < full, "attempt {a}: {d} of {full}");
            assert_eq!(backoff("t3-abc", a), backoff("t3-abc", a));
        }
        let spread: std::collections::HashSet<u128> = (0..50)
            .map(|i| backoff(&format!("t{i}"), 3).as_millis())
            .collect();
        assert!(
            spread.len() > 40,
            "jitter spreads retries: {}",
            spread.len()
        );
    }
}
