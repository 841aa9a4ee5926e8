//! The read-only HTTP API (`/api/v1/…`, JSON) and the dashboard page (`/`), served by the
//! daemon next to ingest, or by `novad serve` on a stopped store.
//!
//! Security model: the server binds a loopback address unless told otherwise
//! ([`HttpConfig::allow_remote`]); every request needs the store's access token (see
//! [`auth`]) as a bearer header or as the cookie set by the login link printed at start; only
//! `GET`/`HEAD` are served, but for pushing batches into a running daemon's inbox (`POST
//! /api/v1/batches` with the separate ingest token, see [`push`]); requests have a deadline
//! and size limits (see [`guard`]).
//!
//! The server runs on threads of its own: one thread serves every connection (a
//! single-threaded tokio runtime: under the CPU cap one is enough, and it measured less CPU
//! per request than two), and every store read (and the compressing of a large answer) runs
//! on a blocking thread, so a slow client never holds up ingest. Two things keep clients from
//! slowing ingest:
//!
//! * a hard cap on the CPU of the server's threads (the connection thread and the
//!   store-read threads): [`governor::CPU_SHARE`] of one core on average, however many
//!   clients ask; beyond it requests wait in line (see [`governor`]);
//! * a lower priority for those threads ([`HTTP_NICE`], see [`lower_thread_priority`]): when
//!   they and ingest want the same core, ingest gets most of it. Not the lowest priority:
//!   at nice 19 a thread waits many times its own run time for a core while ingest computes,
//!   and answers then take hundreds of milliseconds although they cost microseconds.
//!
//! Answers are computed once per store version and served as the same bytes to every client
//! (see [`cache`]); after each commit the answers clients read are computed again ahead of
//! them, on threads of their own at the process's priority (bounded work per commit).

pub mod assets;
pub mod auth;
mod cache;
mod events;
pub mod governor;
pub mod guard;
pub mod push;
mod routes;
pub mod silent;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper_util::rt::{TokioIo, TokioTimer};
use thiserror::Error;

use crate::api_limits::Limits;

/// The default address: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7878";

/// Where and how to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    pub addr: SocketAddr,
    /// Serve on a non-loopback address (the user said so explicitly).
    pub allow_remote: bool,
    /// The address was given by the user: failing to bind it is an error. The default address
    /// being taken (another daemon) only disables HTTP, with a warning.
    pub explicit: bool,
    /// The largest batch a push may carry, bytes (`--http-max-batch-bytes`).
    pub max_batch_bytes: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            addr: DEFAULT_ADDR.parse().expect("valid default address"),
            allow_remote: false,
            explicit: false,
            max_batch_bytes: push::DEFAULT_MAX_BATCH_BYTES,
        }
    }
}

#[derive(Debug, Error)]
pub enum HttpError {
    #[error("refusing to serve HTTP on {addr}: not a loopback address. The API is token-protected but unencrypted; pass --http-allow-remote to expose it to the network anyway")]
    NotLoopback { addr: SocketAddr },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("access token {path}: {msg}")]
    Token { path: PathBuf, msg: String },
    #[error("cannot start the HTTP server threads: {0}")]
    Runtime(std::io::Error),
}

/// A running server. It serves until the process exits.
#[derive(Debug, Clone)]
pub struct Server {
    /// The bound address (the real port when port 0 was asked for).
    pub addr: SocketAddr,
    /// The one-time login link (sets the access cookie, then redirects to the dashboard).
    pub login_url: String,
}

/// What every request handler shares.
pub(crate) struct AppState {
    pub db: sled::Db,
    pub dir: PathBuf,
    /// Whether a daemon ingests into this store (false for `novad serve`).
    pub live: bool,
    /// The inbox of the daemon that ingests into this store (`None` for `novad serve`:
    /// pushes are refused).
    pub inbox: Option<PathBuf>,
    /// The largest batch a push may carry, bytes.
    pub max_batch_bytes: u64,
    /// One push at a time (its checks, writes and rename).
    pub pushes: Arc<tokio::sync::Semaphore>,
    pub auth: auth::Auth,
    /// The bounds shared with the query socket (request size, time to send it, deadline).
    pub limits: Limits,
    /// Store reads running at once (each on a blocking thread).
    pub queries: tokio::sync::Semaphore,
    pub cache: cache::Cache,
    /// The cap on the server's CPU.
    pub governor: governor::Governor,
    /// The count of durable timesteps (the event stream follows it).
    pub durable: Arc<crate::store::durable::Durable>,
    /// Event streams open ([`events::MAX_STREAMS`] permits).
    pub streams: Arc<tokio::sync::Semaphore>,
}

/// Start serving `db` (the store in `store_dir`) per `cfg`: checks the address, creates or
/// reads the access tokens, binds, then serves on background threads. `inbox` is the inbox
/// of the daemon ingesting into the store (`None` when none does). Returns `Ok(None)` when
/// the default address is taken (HTTP disabled, logged); every other failure is an error.
/// Requests are bounded by the default [`Limits`] (the query socket's) and [`guard`]'s
/// HTTP-only limits.
pub fn start(
    store_dir: &Path,
    db: sled::Db,
    durable: Arc<crate::store::durable::Durable>,
    cfg: &HttpConfig,
    inbox: Option<&Path>,
) -> Result<Option<Server>, HttpError> {
    start_with(store_dir, db, durable, cfg, inbox, Limits::default())
}

/// How much lower than the process's own the CPU priority of the HTTP server's threads is
/// (in nice steps, up to the lowest, 19): ingest (nice 0 by default) gets about three times
/// their share of a core both want, yet they are not starved.
pub const HTTP_NICE: i32 = 5;

/// Set the calling thread's CPU priority to [`HTTP_NICE`] below the main thread's (to nice
/// 19 at most; a thread started by a lowered one is not lowered twice) with
/// `setpriority(PRIO_PROCESS, gettid(), …)`: on Linux a thread id there names that one
/// thread, so the rest of the process (ingest) keeps its priority. Raising it back would need
/// privileges, so this is for threads that only serve clients. A failure is logged and
/// ignored (the thread then serves at the process's priority). Elsewhere than Linux it does
/// nothing.
pub fn lower_thread_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread's own id; no memory is shared.
        // getpriority may return -1 as a value: errno tells an error apart.
        let r = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            *libc::__errno_location() = 0;
            // the process's own priority: its main thread's (the pid names that one)
            let own = libc::getpriority(libc::PRIO_PROCESS, libc::getpid() as libc::id_t);
            if own == -1 && *libc::__errno_location() != 0 {
                -1
            } else {
                libc::setpriority(libc::PRIO_PROCESS, tid, (own + HTTP_NICE).min(19))
            }
        };
        if r != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "cannot lower an HTTP thread's priority");
        }
    }
}

/// Set the calling thread's CPU priority back to the process's own (its main thread's), as
/// far as allowed (a thread started by a lowered one inherits the lower priority, and
/// raising it may need privileges: a failure is logged and ignored).
fn restore_thread_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread's and the process's own ids.
        let r = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            *libc::__errno_location() = 0;
            let own = libc::getpriority(libc::PRIO_PROCESS, libc::getpid() as libc::id_t);
            if own == -1 && *libc::__errno_location() != 0 {
                -1
            } else {
                libc::setpriority(libc::PRIO_PROCESS, tid, own)
            }
        };
        if r != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "cannot restore a thread's priority");
        }
    }
}

/// [`start`] with explicit `limits`.
pub fn start_with(
    store_dir: &Path,
    db: sled::Db,
    durable: Arc<crate::store::durable::Durable>,
    cfg: &HttpConfig,
    inbox: Option<&Path>,
    limits: Limits,
) -> Result<Option<Server>, HttpError> {
    if !cfg.addr.ip().is_loopback() && !cfg.allow_remote {
        return Err(HttpError::NotLoopback { addr: cfg.addr });
    }
    let token = auth::load_or_create_token(store_dir, auth::TOKEN_FILE)?;
    let ingest_token = auth::load_or_create_token(store_dir, auth::INGEST_TOKEN_FILE)?;
    let listener = match TcpListener::bind(cfg.addr) {
        Ok(l) => l,
        Err(e) if !cfg.explicit && e.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::warn!(addr = %cfg.addr, "HTTP address in use; dashboard disabled (pass --http ADDR to choose another)");
            return Ok(None);
        }
        Err(source) => {
            return Err(HttpError::Bind {
                addr: cfg.addr,
                source,
            })
        }
    };
    let bind_err = |source| HttpError::Bind {
        addr: cfg.addr,
        source,
    };
    let addr = listener.local_addr().map_err(bind_err)?;
    listener.set_nonblocking(true).map_err(bind_err)?;
    let auth = auth::Auth::new(token, addr.port()).with_ingest_token(ingest_token);
    let login_url = format!("http://{addr}/login?code={}", auth.login_code());
    let threads = governor::Threads::default();
    let state = Arc::new(AppState {
        governor: governor::Governor::new(threads.clone(), governor::CPU_SHARE, governor::BURST),
        dir: store_dir.to_path_buf(),
        live: inbox.is_some(),
        inbox: inbox.map(Path::to_path_buf),
        max_batch_bytes: cfg.max_batch_bytes,
        pushes: Arc::new(tokio::sync::Semaphore::new(1)),
        auth,
        limits,
        queries: tokio::sync::Semaphore::new(guard::MAX_QUERIES),
        cache: cache::Cache::new(&db),
        durable,
        streams: Arc::new(tokio::sync::Semaphore::new(events::MAX_STREAMS)),
        db,
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(guard::MAX_QUERIES + 2)
        .thread_name("novad-http")
        .on_thread_start({
            let threads = threads.clone();
            move || {
                lower_thread_priority();
                threads.register();
            }
        })
        .on_thread_stop({
            let threads = threads.clone();
            move || threads.unregister()
        })
        .enable_all()
        .build()
        .map_err(HttpError::Runtime)?;
    std::thread::Builder::new()
        .name("novad-http-main".into())
        .spawn(move || {
            lower_thread_priority();
            threads.register();
            rt.block_on(accept_loop(listener, state))
        })
        .map_err(HttpError::Runtime)?;
    Ok(Some(Server { addr, login_url }))
}

/// The daemon's entry: start per `cfg` (nothing when `None`) and log the login link.
pub fn start_opt(
    store_dir: &Path,
    db: &sled::Db,
    durable: Arc<crate::store::durable::Durable>,
    cfg: Option<&HttpConfig>,
    inbox: Option<&Path>,
) -> Result<Option<Server>, HttpError> {
    let Some(cfg) = cfg else { return Ok(None) };
    let server = start(store_dir, db.clone(), durable, cfg, inbox)?;
    if let Some(s) = &server {
        tracing::info!(
            url = %s.login_url,
            token = %auth::token_path(store_dir).display(),
            ingest_token = %auth::ingest_token_path(store_dir).display(),
            "dashboard: open the one-time link to sign in; API clients send the token file's content as a bearer token, pushes the ingest token file's"
        );
    }
    Ok(server)
}

/// Compute the answers clients read after each commit ([`cache::refresh_on_commit`]) on a
/// thread and store-read threads of its own, at the process's priority and outside the
/// server's CPU cap: that work is bounded per commit (not by the clients), and answers must
/// be ready soon after a commit while ingest already codes the next batch. Without them (no
/// thread could be started), answers are computed by the first request that needs them.
fn refresh_after_commits(state: Arc<AppState>, app: axum::Router) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(guard::MAX_QUERIES)
        .thread_name("novad-refresh")
        .on_thread_start(restore_thread_priority)
        .enable_all()
        .build();
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            tracing::debug!(error = %e, "no thread to compute answers after commits");
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("novad-refresh".into())
        .spawn(move || {
            restore_thread_priority();
            rt.block_on(cache::refresh_on_commit(state, app))
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "no thread to compute answers after commits");
    }
}

/// Answer one request: it waits for the CPU cap ([`governor::admitted`]), then is answered
/// from the cache when it can be ([`cache::hit`], the common case: a dashboard polling),
/// else by the router (limits, access check, handler).
async fn serve(
    state: Arc<AppState>,
    mut app: axum::Router,
    req: axum::http::Request<hyper::body::Incoming>,
) -> Result<axum::response::Response, std::convert::Infallible> {
    let mut resp = if let Err(busy) = governor::admitted(&state).await {
        busy
    } else if let Some(r) = cache::hit(&state, &req) {
        r
    } else {
        tower_service::Service::call(&mut app, req.map(axum::body::Body::new)).await?
    };
    // every answer, refusals (401, 405, 413, 414, 503) included
    guard::secure(resp.headers_mut());
    crate::metrics::http_response(resp.status().as_u16());
    Ok(resp)
}

/// Raise the process's soft limit of open descriptors to `want` (at most the hard limit), so
/// the connections the server admits fit beside the store's files. Failing is harmless: the
/// accept loop backs off when descriptors run out.
fn raise_fd_limit(want: usize) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-parameter for getrlimit, then the same struct passed back.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < want as libc::rlim_t {
            l.rlim_cur = (want as libc::rlim_t).min(l.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// Accept connections and serve each with HTTP/1.1 (keep-alive; the first byte must arrive
/// within [`silent::FIRST_BYTE`], the request head within [`Limits::request_timeout`] and fit
/// in [`Limits::max_request_bytes`]). At most [`silent::MAX_SILENT`] connections wait for
/// their first byte (the oldest is closed to make room); a connection that spoke takes one of
/// [`guard::MAX_CONNECTIONS`] slots, or is closed when none is free.
async fn accept_loop(listener: TcpListener, state: Arc<AppState>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "HTTP listener unusable; dashboard disabled");
            return;
        }
    };
    let (app, unguarded) = routes::router(Arc::clone(&state));
    refresh_after_commits(Arc::clone(&state), unguarded);
    raise_fd_limit(silent::MAX_SILENT + guard::MAX_CONNECTIONS + 512);
    let slots = crate::api_limits::Slots::new(guard::MAX_CONNECTIONS);
    let silent = silent::Silent::default();
    let limits = state.limits;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // e.g. out of file descriptors: free the oldest silent connection's, and back
                // off instead of spinning
                tracing::debug!(error = %e, "HTTP accept failed");
                silent.evict_oldest();
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // silence is cheap (a descriptor and a waiting task) and bounded on its own: past
        // MAX_SILENT the oldest silent connection makes room; the slots are for connections
        // that speak, so silent sockets cannot keep a speaking client out
        if silent.len() >= silent::MAX_SILENT {
            silent.evict_oldest();
        }
        let slots = slots.clone();
        let app = app.clone();
        let state = Arc::clone(&state);
        let entry = silent.enter();
        tokio::spawn(async move {
            if !silent::first_byte(&stream, entry).await {
                return;
            }
            // the slot is freed when the task ends, however it ends
            let Some(_slot) = slots.try_take() else {
                return;
            };
            let service =
                hyper::service::service_fn(move |req| serve(Arc::clone(&state), app.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.request_timeout)
                .max_buf_size(limits.max_request_bytes.max(guard::MIN_BUFFER))
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
}
