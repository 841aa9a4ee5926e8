//! The socket server: one accepting thread that never waits on a client, and one short-lived
//! thread per admitted connection (at most [`Limits::max_connections`]).
//!
//! Why threads and not an event loop: a connection's work is a blocking sled range scan
//! interleaved with socket writes, so an event loop would still need worker threads for the
//! queries plus per-connection output buffering for slow readers; with threads each guard is
//! a few lines of std (no new dependency, no unsafe). A slow or silent client costs one
//! mostly idle thread (a 512 KiB stack reserved, a few KiB touched) and one descriptor, for at
//! most [`Limits::request_timeout`]; the answer is streamed record by record, so memory does
//! not grow with the answer or with slow readers.

use std::io::{self, BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{socket_path, ErrorKind, Request, Trailer};
use crate::api_limits::{read_request, DeadlineStream, Limits, RequestError, Slot, Slots};
use crate::query::{self, QueryError};
use crate::store::guard;

/// Stack of a connection thread: reading a line, a sled range scan and serde need little.
const CONN_STACK: usize = 512 * 1024;

/// What every connection thread shares.
struct Shared {
    db: sled::Db,
    store_dir: PathBuf,
    limits: Limits,
}

/// [`serve_with`] the default [`Limits`].
pub fn serve(store_dir: &Path, db: sled::Db) -> io::Result<PathBuf> {
    serve_with(store_dir, db, Limits::default())
}

/// Bind `novad.sock` in `store_dir` (replacing a stale one; mode 0600) and answer requests on
/// background threads until the process exits, within `limits`. Returns the socket's path.
pub fn serve_with(store_dir: &Path, db: sled::Db, limits: Limits) -> io::Result<PathBuf> {
    let path = socket_path(store_dir);
    if path.exists() {
        // A live daemon would hold the store lock, so a socket file here is stale.
        std::fs::remove_file(&path)?;
    }
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let shared = Arc::new(Shared {
        db,
        store_dir: store_dir.to_path_buf(),
        limits,
    });
    let slots = Slots::new(limits.max_connections);
    std::thread::Builder::new()
        .name("novad-api".into())
        .spawn(move || accept_loop(&listener, &slots, &shared))?;
    Ok(path)
}

fn accept_loop(listener: &UnixListener, slots: &Slots, shared: &Arc<Shared>) {
    loop {
        match listener.accept() {
            Ok((conn, _)) => admit(conn, slots, shared),
            Err(e) => {
                // e.g. out of descriptors: do not spin; clients wait in the backlog meanwhile
                tracing::warn!(error = %e, "api: accept failed");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Hand `conn` to a thread of its own, or answer "busy" at once when no slot is free.
fn admit(conn: UnixStream, slots: &Slots, shared: &Arc<Shared>) {
    let accepted = Instant::now();
    let Some(slot) = slots.try_take() else {
        let msg = format!(
            "daemon busy: {} connections open, the most it serves at once; retry shortly",
            slots.max()
        );
        tracing::debug!("api: turned a client away (busy)");
        answer_now(conn, &Trailer::error(ErrorKind::Busy, msg));
        return;
    };
    // a second handle to answer with if the thread cannot be started
    let spare = conn.try_clone();
    let sh = Arc::clone(shared);
    let started = std::thread::Builder::new()
        .name("novad-api-conn".into())
        .stack_size(CONN_STACK)
        .spawn(move || connection(conn, slot, &sh, accepted));
    if let (Err(e), Ok(spare)) = (started, spare) {
        tracing::warn!(error = %e, "api: cannot start a connection thread");
        let msg = format!("daemon busy: cannot start a thread ({e}); retry shortly");
        answer_now(spare, &Trailer::error(ErrorKind::Busy, msg));
    }
}

/// Write one short line without ever blocking (it fits in the empty socket buffer of a new
/// connection; if not, it is dropped), then close.
fn answer_now(conn: UnixStream, t: &Trailer) {
    if conn.set_nonblocking(true).is_ok() {
        let _ = (&conn).write_all(t.line().as_bytes());
    }
}

/// Serve one connection within its deadlines; the slot is freed when this returns.
fn connection(conn: UnixStream, _slot: Slot, sh: &Shared, accepted: Instant) {
    let lim = &sh.limits;
    let mut s = DeadlineStream::new(conn, accepted + lim.request_timeout.min(lim.deadline));
    let line = read_request(&mut s, lim.max_request_bytes);
    // from here on, one deadline for everything: the answer is written by `deadline`
    s.set_deadline(accepted + lim.deadline);
    let fail = |s: &mut DeadlineStream<UnixStream>, kind, msg: String| {
        tracing::debug!(kind = ?kind, error = %msg, "api: request refused");
        let _ = s.write_all(Trailer::error(kind, msg).line().as_bytes());
    };
    let line = match line {
        Ok(l) => l,
        Err(RequestError::Closed) => return,
        Err(e @ RequestError::TooLarge { .. }) => {
            return fail(&mut s, ErrorKind::TooLarge, format!("{e}; closing"));
        }
        Err(RequestError::TimedOut) => {
            let msg = format!(
                "no complete request within {:.1} s of connecting; closing",
                lim.request_timeout.as_secs_f64()
            );
            return fail(&mut s, ErrorKind::Timeout, msg);
        }
        Err(RequestError::Io(e)) => {
            tracing::debug!(error = %e, "api: reading a request failed");
            return;
        }
    };
    let req: Request = match serde_json::from_slice(&line) {
        Ok(r) => r,
        Err(e) => return fail(&mut s, ErrorKind::BadRequest, format!("bad request: {e}")),
    };
    let mut out = BufWriter::with_capacity(64 * 1024, s);
    if let Err(e) = answer(sh, &req, &mut out).and_then(|()| out.flush()) {
        tracing::debug!(error = %e, "api: answer not delivered");
    }
}

/// Why an answer stopped: the client's socket, or the query.
enum Stop {
    Io(io::Error),
    Query(QueryError),
    /// The store guard caught a sled panic.
    Damaged(String),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Self {
        Stop::Io(e)
    }
}

impl From<QueryError> for Stop {
    fn from(e: QueryError) -> Self {
        Stop::Query(e)
    }
}

/// `f` under the store's damage guard (`store::guard`): a sled panic becomes a store error
/// reply; a read that stalls stops the daemon as damaged.
fn watched<T>(dir: &Path, what: &str, f: impl FnOnce() -> Result<T, Stop>) -> Result<T, Stop> {
    guard::watched(dir, what, f).unwrap_or_else(|e| Err(Stop::Damaged(e.to_string())))
}

fn data_line(out: &mut impl Write, v: &impl serde::Serialize) -> io::Result<()> {
    serde_json::to_writer(&mut *out, v)?;
    out.write_all(b"\n")
}

/// Run `req` against the store and write its data lines and trailer to `out`.
fn answer(sh: &Shared, req: &Request, out: &mut impl Write) -> io::Result<()> {
    let dir = &sh.store_dir;
    let r: Result<usize, Stop> = match req {
        // the scan reports progress per record, so a long answer is not taken for a stall
        Request::Verdicts { filter } => watched(dir, "reading verdicts", || {
            query::visit_verdicts(&sh.db, filter, |v| {
                guard::progress();
                data_line(out, &v).map_err(Stop::Io)
            })
        }),
        Request::Status { recent } => watched(dir, "reading the status", || {
            query::status(&sh.db, *recent).map_err(Stop::Query)
        })
        .and_then(|mut st| {
            st.daemon_pid = Some(std::process::id());
            st.inbox_scans =
                Some(crate::daemon::INBOX_SCANS.load(std::sync::atomic::Ordering::Relaxed));
            st.disk_bytes = crate::store::dir_size(&sh.store_dir);
            Ok(data_line(out, &st).map(|()| 1)?)
        }),
        Request::Topics { since, until } => watched(dir, "reading topics", || {
            query::topics(&sh.db, *since, *until).map_err(Stop::Query)
        })
        .and_then(|ts| {
            for t in &ts {
                data_line(out, t)?;
            }
            Ok(ts.len())
        }),
    };
    let trailer = match r {
        Ok(count) => Trailer::Done { count },
        Err(Stop::Io(e)) => return Err(e),
        Err(Stop::Query(e)) => {
            let kind = if e.is_bad_request() {
                ErrorKind::BadRequest
            } else {
                tracing::warn!(error = %e, "api: query failed");
                ErrorKind::Store
            };
            Trailer::error(kind, e.to_string())
        }
        Err(Stop::Damaged(msg)) => {
            tracing::error!(error = %msg, "api: store damaged");
            Trailer::error(ErrorKind::Store, msg)
        }
    };
    out.write_all(trailer.line().as_bytes())
}
