//! The daemon's read-only local API: a Unix socket `novad.sock` in the store directory,
//! created with mode 0600 (only the owner can connect). sled admits one process per store, so
//! `novad verdicts` / `status` / `topics` talk to the running daemon through it.
//!
//! Protocol (one exchange per connection):
//! - the client sends one JSON line, a [`Request`], of at most
//!   [`Limits::max_request_bytes`];
//! - the server answers with zero or more JSON lines of data (verdict records, topic records,
//!   or one status object), then exactly one [`Trailer`] line: `{"done":{"count":N}}` with the
//!   number of data lines, or `{"error":{"kind":K,"message":M}}`; then it closes. An answer
//!   without a trailer was cut off (the client stopped reading, or the deadline passed).
//! - When every connection slot is taken the server sends only
//!   `{"error":{"kind":"busy",...}}` and closes without reading; clients retry later
//!   ([`client::request`] does, with exponential backoff and jitter, for a bounded time).
//!
//! The bounds ([`Limits`]) and why slow clients cannot block the others are in [`limits`].
//! Queries run the same functions as the CLI's direct path ([`crate::query`]).

pub mod client;
mod server;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::query::VerdictFilter;

pub use crate::api_limits::Limits;
pub use client::{remote_status, remote_topics, remote_verdicts, request, ApiError, ClientOptions};
pub use server::{serve, serve_with};

/// One query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// Verdicts matching the filter, in time order ([`crate::query::verdicts`]).
    Verdicts { filter: VerdictFilter },
    /// The store's status with `recent` timesteps and topics ([`crate::query::status`]).
    Status { recent: usize },
    /// Emerging topics by time ([`crate::query::topics`]).
    Topics {
        since: Option<i64>,
        until: Option<i64>,
    },
}

/// The last line of every answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trailer {
    /// The answer is complete: `count` data lines came before.
    Done { count: usize },
    /// The request failed; no data line before this one is to be used.
    Error { kind: ErrorKind, message: String },
}

/// What went wrong, for clients that act on it (retry on `busy`, report the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Every connection slot was taken; nothing was read. Retry later.
    Busy,
    /// The request line was longer than the limit.
    TooLarge,
    /// The request did not arrive before the request timeout.
    Timeout,
    /// The request was not valid JSON of a [`Request`], or its filter is invalid.
    BadRequest,
    /// The store could not be read.
    Store,
}

impl Trailer {
    pub fn error(kind: ErrorKind, message: impl Into<String>) -> Trailer {
        Trailer::Error {
            kind,
            message: message.into(),
        }
    }

    /// The trailer as one line, newline included.
    pub fn line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("a trailer serializes");
        s.push('\n');
        s
    }

    /// The trailer on `line`, or `None` when `line` is a data line. Data lines are JSON
    /// objects whose first key is a record field, never `done` or `error`.
    pub fn parse(line: &str) -> Option<Result<Trailer, serde_json::Error>> {
        (line.starts_with("{\"done\"") || line.starts_with("{\"error\""))
            .then(|| serde_json::from_str(line))
    }
}

/// Where the daemon of `store_dir` listens.
pub fn socket_path(store_dir: &Path) -> PathBuf {
    store_dir.join("novad.sock")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailers_round_trip_and_data_lines_are_not_trailers() {
        for t in [
            Trailer::Done { count: 7 },
            Trailer::error(ErrorKind::Busy, "busy"),
            Trailer::error(ErrorKind::TooLarge, "big"),
        ] {
            let line = t.line();
            assert!(line.ends_with('\n'));
            let back = Trailer::parse(line.trim_end()).expect("a trailer").unwrap();
            assert_eq!(back, t);
        }
        let v = crate::store::schema::VerdictRecord {
            doc_id: "error".into(),
            time: 0,
            timestep: 1,
            seq: 0,
            source: "done".into(),
            score: 0.5,
            novel: true,
            bootstrap: false,
            empty: false,
            at_ceiling: false,
            terms: vec![("error".into(), 0.5)],
            hybrid: None,
            topic: None,
        };
        let data = serde_json::to_string(&v).unwrap();
        assert!(Trailer::parse(&data).is_none(), "{data}");
    }

    #[test]
    fn requests_round_trip_through_json() {
        let f = VerdictFilter {
            since: Some(1),
            until: Some(2),
            novel_only: true,
            min_score: Some(0.25),
            limit: Some(0),
        };
        for r in [
            Request::Verdicts { filter: f },
            Request::Status { recent: 3 },
            Request::Topics {
                since: None,
                until: Some(9),
            },
        ] {
            let s = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), r);
        }
    }
}
