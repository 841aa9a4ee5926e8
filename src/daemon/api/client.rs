//! The client side of the local API: one exchange per connection, retried with exponential
//! backoff and jitter while the daemon answers "busy", for a bounded total time.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use rand::Rng;
use serde::de::DeserializeOwned;
use thiserror::Error;

use super::{socket_path, ErrorKind, Request, Trailer};
use crate::api_limits::{DeadlineStream, Limits};
use crate::query::{QueryError, Status, VerdictFilter};
use crate::store::schema::TopicRecord;
use crate::store::schema::VerdictRecord;

/// First pause after a "busy" answer. Each further one doubles, up to [`MAX_PAUSE`]; the
/// pause actually slept is drawn uniformly from its upper half, so clients turned away
/// together do not come back together.
pub const FIRST_PAUSE: Duration = Duration::from_millis(25);
/// Longest pause between two attempts.
pub const MAX_PAUSE: Duration = Duration::from_secs(1);

/// How a client waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientOptions {
    /// How long to keep retrying while the daemon answers "busy", counted from the first
    /// attempt; zero tries once.
    pub retry_for: Duration,
    /// Longest wait for one whole answer. The daemon closes every connection after its own
    /// deadline, so this only matters when the daemon is stuck.
    pub timeout: Duration,
}

impl Default for ClientOptions {
    /// Retry for 10 s; wait at most the server's deadline plus 10 s for an answer.
    fn default() -> Self {
        ClientOptions {
            retry_for: Duration::from_secs(10),
            timeout: Limits::default().deadline + Duration::from_secs(10),
        }
    }
}

/// Why a query through the daemon failed.
#[derive(Debug, Error)]
pub enum ApiError {
    #[error(
        "the daemon at {path} stayed busy: it turned this client away {attempts} times in {waited:.1} s (last answer: {message}); try again later, or raise --retry-secs"
    )]
    Busy {
        path: String,
        attempts: u32,
        waited: f64,
        message: String,
    },
    #[error("the daemon refused the request: {message}")]
    Refused { kind: ErrorKind, message: String },
    #[error("daemon API {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("daemon API {path}: no complete answer within {secs:.0} s")]
    TimedOut { path: String, secs: f64 },
    #[error(
        "daemon API {path}: the answer was cut off after {lines} lines (no end line); the daemon closes a connection after its deadline"
    )]
    Truncated { path: String, lines: usize },
    #[error("daemon API {path}: bad answer: {reason}")]
    BadAnswer { path: String, reason: String },
    /// The query was invalid before anything was sent.
    #[error(transparent)]
    Query(#[from] QueryError),
}

/// What one exchange returned.
enum Outcome {
    Lines(Vec<String>),
    Busy(String),
}

/// Send `req` to the daemon of `store_dir` and return its data lines; `Ok(None)` when no
/// daemon answers (no socket, or nobody listening). While the daemon answers "busy", retry
/// after pauses growing from [`FIRST_PAUSE`] to [`MAX_PAUSE`] (with jitter) until
/// `opts.retry_for` has passed, then fail with [`ApiError::Busy`]. Never returns a partial
/// answer: an answer without its end line is [`ApiError::Truncated`].
pub fn request(
    store_dir: &Path,
    req: &Request,
    opts: &ClientOptions,
) -> Result<Option<Vec<String>>, ApiError> {
    let path = socket_path(store_dir);
    let start = Instant::now();
    let mut pause = FIRST_PAUSE;
    let mut attempts = 0;
    loop {
        let Ok(conn) = UnixStream::connect(&path) else {
            return Ok(None);
        };
        attempts += 1;
        let message = match exchange(conn, req, opts, &path)? {
            Outcome::Lines(lines) => return Ok(Some(lines)),
            Outcome::Busy(message) => message,
        };
        let waited = start.elapsed();
        if waited >= opts.retry_for {
            return Err(ApiError::Busy {
                path: path.display().to_string(),
                attempts,
                waited: waited.as_secs_f64(),
                message,
            });
        }
        let sleep = pause
            .mul_f64(rand::rng().random_range(0.5..=1.0))
            .min(opts.retry_for - waited);
        tracing::debug!(
            attempts,
            pause_ms = sleep.as_millis() as u64,
            "daemon busy; retrying"
        );
        std::thread::sleep(sleep);
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// One request and its answer on `conn`.
fn exchange(
    conn: UnixStream,
    req: &Request,
    opts: &ClientOptions,
    path: &Path,
) -> Result<Outcome, ApiError> {
    let p = || path.display().to_string();
    let mut s = DeadlineStream::new(conn, Instant::now() + opts.timeout);
    let mut line = serde_json::to_string(req).map_err(|e| ApiError::BadAnswer {
        path: p(),
        reason: format!("cannot encode the request: {e}"),
    })?;
    line.push('\n');
    // a busy daemon answers without reading, so the write may fail while the answer waits
    let wrote = s.write_all(line.as_bytes());
    let mut reader = BufReader::new(s);
    let mut lines = Vec::new();
    let mut buf = String::new();
    loop {
        buf.clear();
        match reader.read_line(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                return Err(ApiError::TimedOut {
                    path: p(),
                    secs: opts.timeout.as_secs_f64(),
                })
            }
            Err(source) => return Err(ApiError::Io { path: p(), source }),
        }
        let l = buf.trim_end_matches('\n');
        match Trailer::parse(l) {
            None => lines.push(l.to_string()),
            Some(Ok(Trailer::Done { count })) if count == lines.len() => {
                return Ok(Outcome::Lines(lines))
            }
            Some(Ok(Trailer::Done { count })) => {
                return Err(ApiError::BadAnswer {
                    path: p(),
                    reason: format!("{} lines but the end line says {count}", lines.len()),
                })
            }
            Some(Ok(Trailer::Error {
                kind: ErrorKind::Busy,
                message,
            })) => return Ok(Outcome::Busy(message)),
            Some(Ok(Trailer::Error { kind, message })) => {
                return Err(ApiError::Refused { kind, message })
            }
            Some(Err(e)) => {
                return Err(ApiError::BadAnswer {
                    path: p(),
                    reason: format!("unreadable end line `{l}`: {e}"),
                })
            }
        }
    }
    match wrote {
        Err(source) if lines.is_empty() => Err(ApiError::Io { path: p(), source }),
        _ => Err(ApiError::Truncated {
            path: p(),
            lines: lines.len(),
        }),
    }
}

/// [`request`], each data line decoded as a `T`.
fn request_as<T: DeserializeOwned>(
    store_dir: &Path,
    req: &Request,
    opts: &ClientOptions,
) -> Result<Option<Vec<T>>, ApiError> {
    let Some(lines) = request(store_dir, req, opts)? else {
        return Ok(None);
    };
    lines
        .iter()
        .map(|l| {
            serde_json::from_str(l).map_err(|e| ApiError::BadAnswer {
                path: socket_path(store_dir).display().to_string(),
                reason: e.to_string(),
            })
        })
        .collect::<Result<Vec<T>, _>>()
        .map(Some)
}

/// Verdicts through the daemon, if it runs. The filter is validated first, with the same
/// check (and error) as the direct query.
pub fn remote_verdicts(
    store_dir: &Path,
    filter: &VerdictFilter,
    opts: &ClientOptions,
) -> Result<Option<Vec<VerdictRecord>>, ApiError> {
    filter.validate()?;
    let req = Request::Verdicts {
        filter: filter.clone(),
    };
    request_as(store_dir, &req, opts)
}

/// Status through the daemon, if it runs.
pub fn remote_status(
    store_dir: &Path,
    recent: usize,
    opts: &ClientOptions,
) -> Result<Option<Status>, ApiError> {
    let Some(mut v) = request_as::<Status>(store_dir, &Request::Status { recent }, opts)? else {
        return Ok(None);
    };
    match (v.pop(), v.is_empty()) {
        (Some(s), true) => Ok(Some(s)),
        _ => Err(ApiError::BadAnswer {
            path: socket_path(store_dir).display().to_string(),
            reason: "expected exactly one status line".into(),
        }),
    }
}

/// Emerging topics through the daemon, if it runs.
pub fn remote_topics(
    store_dir: &Path,
    since: Option<i64>,
    until: Option<i64>,
    opts: &ClientOptions,
) -> Result<Option<Vec<TopicRecord>>, ApiError> {
    request_as(store_dir, &Request::Topics { since, until }, opts)
}
