//! Answers of the API cached per store version: the store changes only when a timestep
//! commits, and dashboards poll the same few paths, so a request between two commits costs
//! one key lookup and no store scan and no JSON encoding: every client gets the same bytes.
//!
//! The version is the committed state record, rewritten by every commit (in the same
//! transaction as the verdicts), read on every request: an answer is served only while the
//! store is still at the version it was computed from, so a cached answer is never older than
//! the newest visible commit. An answer computed while a commit landed is returned to its
//! request but not kept.
//!
//! After a commit, every polling client misses at once. Only one of the requests for a given
//! path computes the answer; the others for that path wait for it (a per-path lock, striped
//! over [`FILL_LOCKS`] locks) and are then served from the cache. Besides, the server watches
//! the state record (see [`refresh_on_commit`]) and, after each commit, computes again the
//! answers that clients read under the previous version, so polling clients usually find
//! them ready.
//!
//! Every cached answer carries an `ETag` (a hash of its bytes); a request whose
//! `If-None-Match` names it gets `304 Not Modified` and no body.
//!
//! An answer larger than [`GZIP_FROM`] bytes is also kept gzip-compressed, once per store
//! version, and sent so to a client that accepts gzip (as every browser does): the JSON of the
//! dashboard's panels shrinks about fivefold, and on the server most of a request's CPU time
//! is the kernel sending its bytes. The compressed form has a tag of its own (`…-gz"`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue, Method, Request, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;

use super::AppState;
use crate::store::schema::{KEY_STATE, META};

/// Most answers kept for one store version.
const MAX_ENTRIES: usize = 512;
/// Largest answer kept, bytes.
const MAX_BYTES: usize = 4 << 20;
/// Most bytes kept for one store version (bodies and their gzip forms): distinct queries
/// evict the least-read answers instead of growing the process.
const MAX_TOTAL_BYTES: usize = 32 << 20;
/// Locks that serialize the computing of missing answers (a path always maps to the same one).
const FILL_LOCKS: usize = 16;
/// Most answers computed ahead after a commit (the most read ones of the previous version).
const MAX_REFRESH: usize = 8;
/// How long answers are computed ahead after clients stopped reading them.
const WANTED_FOR: Duration = Duration::from_secs(60);
/// Smallest answer also kept gzip-compressed, bytes.
const GZIP_FROM: usize = 1024;
/// Smallest answer compressed on a store-read thread rather than the server's own, bytes
/// (about half a millisecond of compressing).
const COMPRESS_ASIDE_FROM: usize = 64 << 10;

/// A cached answer: the JSON body and its entity tag, and its gzip form when that is smaller.
#[derive(Clone)]
struct Answer {
    body: Bytes,
    etag: HeaderValue,
    /// The body gzip-compressed and its tag (the plain tag with `-gz` before the closing quote).
    gz: Option<(Bytes, HeaderValue)>,
    /// Requests served from it (decides what is computed ahead after the next commit).
    hits: Arc<AtomicU64>,
}

/// The answers of one store version.
#[derive(Default)]
struct Entries {
    version: Option<sled::IVec>,
    map: HashMap<String, Answer>,
    /// The targets most read lately (what to compute ahead after a commit).
    wanted: Vec<String>,
    /// When a client last read one of `wanted`'s answers.
    wanted_read: Option<Instant>,
    /// Bytes of the answers in `map` ([`Answer::size`]).
    bytes: usize,
}

impl Answer {
    /// Bytes it holds (body and gzip form).
    fn size(&self) -> usize {
        self.body.len() + self.gz.as_ref().map_or(0, |(z, _)| z.len())
    }
}

impl Entries {
    /// Move to version `ver` (dropping the answers of another one). The [`MAX_REFRESH`]
    /// targets most read under the version left become the wanted ones; when none was read,
    /// the wanted ones stay, until none has been read for [`WANTED_FOR`].
    fn advance(&mut self, ver: &sled::IVec) {
        if self.version.as_ref() == Some(ver) {
            return;
        }
        let mut read: Vec<(u64, &String)> = self
            .map
            .iter()
            .map(|(k, a)| (a.hits.load(Ordering::Relaxed), k))
            .filter(|(n, _)| *n > 0)
            .collect();
        read.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        let (mut wanted, mut wanted_read) = (std::mem::take(&mut self.wanted), self.wanted_read);
        if !read.is_empty() {
            wanted = read
                .into_iter()
                .take(MAX_REFRESH)
                .map(|(_, k)| k.clone())
                .collect();
            wanted_read = Some(Instant::now());
        } else if wanted_read.is_none_or(|t| t.elapsed() > WANTED_FOR) {
            wanted.clear();
        }
        *self = Entries {
            version: Some(ver.clone()),
            map: HashMap::new(),
            wanted,
            wanted_read,
            bytes: 0,
        };
    }

    /// Keep `a` as the answer to `key`, first evicting the least-read answers (ties: the
    /// greatest key) until at most [`MAX_ENTRIES`] − 1 answers of at most
    /// [`MAX_TOTAL_BYTES`] − `a.size()` bytes remain. Afterwards `bytes` ≤ MAX_TOTAL_BYTES
    /// and `map` holds ≤ MAX_ENTRIES answers (an answer is never over [`MAX_BYTES`]).
    fn insert(&mut self, key: String, a: Answer) {
        if let Some(old) = self.map.remove(&key) {
            self.bytes -= old.size();
        }
        while !self.map.is_empty()
            && (self.map.len() >= MAX_ENTRIES || self.bytes + a.size() > MAX_TOTAL_BYTES)
        {
            let victim = self
                .map
                .iter()
                .min_by(|x, y| {
                    let hits = |a: &Answer| a.hits.load(Ordering::Relaxed);
                    hits(x.1).cmp(&hits(y.1)).then_with(|| y.0.cmp(x.0))
                })
                .map(|(k, _)| k.clone());
            let Some(v) = victim else { break };
            if let Some(old) = self.map.remove(&v) {
                self.bytes -= old.size();
            }
        }
        self.bytes += a.size();
        self.map.insert(key, a);
    }
}

/// Marks a request made by the server itself after a commit (not counted as a read).
#[derive(Clone, Copy)]
struct Ahead;

/// Cached answers (request target → answer) of one store version.
pub struct Cache {
    meta: Option<sled::Tree>,
    inner: Mutex<Entries>,
    fill: [tokio::sync::Mutex<()>; FILL_LOCKS],
}

impl Cache {
    /// A cache for `db` (without a readable `meta` tree nothing is cached).
    pub fn new(db: &sled::Db) -> Cache {
        Cache {
            meta: db.open_tree(META).ok(),
            inner: Default::default(),
            fill: Default::default(),
        }
    }

    /// The store's version now: the committed state record (empty before the first commit).
    fn version(&self) -> Option<sled::IVec> {
        let meta = self.meta.as_ref()?;
        Some(meta.get(KEY_STATE).ok()?.unwrap_or_default())
    }

    /// The answer to `key` stored for store version `ver`, if any.
    fn get(&self, ver: &sled::IVec, key: &str) -> Option<Answer> {
        let c = self.inner.lock().ok()?;
        if c.version.as_ref() == Some(ver) {
            c.map.get(key).cloned()
        } else {
            None
        }
    }

    /// Keep `a` as the answer to `key` at version `ver`, unless the store has moved on since
    /// (the answer may then mix two versions). Returns it (kept or not).
    fn put(&self, ver: sled::IVec, key: String, a: Answer) -> Answer {
        if self.version().as_ref() != Some(&ver) {
            return a;
        }
        if let Ok(mut c) = self.inner.lock() {
            c.advance(&ver);
            c.insert(key, a.clone());
        }
        a
    }

    /// The stored answer to `key` at version `ver` as sent to a request with `inm` as its
    /// `If-None-Match` that accepts gzip or not (see [`reply`]), counted as `reads` reads.
    fn answer(
        &self,
        ver: &sled::IVec,
        key: &str,
        reads: u64,
        inm: Option<&HeaderValue>,
        gzip: bool,
    ) -> Option<Response> {
        let a = self.get(ver, key)?;
        a.hits.fetch_add(reads, Ordering::Relaxed);
        Some(reply(&a, inm, gzip))
    }

    /// The request targets to have ready at version `ver`: those most read lately (at most
    /// [`MAX_REFRESH`]).
    fn wanted(&self, ver: &sled::IVec) -> Vec<String> {
        let Ok(mut c) = self.inner.lock() else {
            return Vec::new();
        };
        c.advance(ver);
        c.wanted.clone()
    }

    /// The lock under which a missing answer to `key` is computed.
    fn fill_lock(&self, key: &str) -> &tokio::sync::Mutex<()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        &self.fill[(h.finish() as usize) % FILL_LOCKS]
    }
}

impl Answer {
    /// `body` with its tag and, when at least [`GZIP_FROM`] bytes and smaller so, its gzip form.
    fn new(body: Bytes, reads: u64) -> Answer {
        let etag = etag(&body);
        let gz = (body.len() >= GZIP_FROM)
            .then(|| gzip(&body))
            .flatten()
            .filter(|z| z.len() < body.len())
            .map(|z| {
                let tag = etag.to_str().expect("hex tag").trim_end_matches('"');
                let tag = HeaderValue::from_str(&format!("{tag}-gz\"")).expect("hex tag");
                (Bytes::from(z), tag)
            });
        Answer {
            body,
            etag,
            gz,
            hits: Arc::new(AtomicU64::new(reads)),
        }
    }
}

/// `body` gzip-compressed at the fastest level (the answer is compressed once per store
/// version, on the thread that computed it); `None` if compression fails.
fn gzip(body: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::fast(),
    );
    z.write_all(body).ok()?;
    z.finish().ok()
}

/// Whether the request's `Accept-Encoding` admits gzip (`gzip`, `x-gzip` or `*`, with a
/// non-zero `q`).
fn accepts_gzip(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .filter_map(|q| q.trim().parse::<f32>().ok())
                .next()
                .unwrap_or(1.0);
            matches!(coding.as_str(), "gzip" | "x-gzip" | "*") && q > 0.0
        })
}

/// A strong entity tag for `body`: 128 bits of its BLAKE3 hash, quoted.
fn etag(body: &[u8]) -> HeaderValue {
    let h = blake3::hash(body);
    let hex: String = h.as_bytes()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    HeaderValue::from_str(&format!("\"{hex}\"")).expect("hex is a valid header value")
}

/// Whether the request's `If-None-Match` (`inm`) names `etag` (or is `*`).
fn not_modified(inm: Option<&HeaderValue>, etag: &HeaderValue) -> bool {
    inm.and_then(|v| v.to_str().ok())
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == "*" || t.as_bytes() == etag.as_bytes())
}

/// The answer as sent: 200 with the body (gzip-compressed when `gzip` and the answer has
/// that form), or 304 when the client has that form already. Browsers may keep it (private)
/// but must ask again each time (no-cache), sending its tag.
fn reply(a: &Answer, inm: Option<&HeaderValue>, gzip: bool) -> Response {
    let cache = (
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-cache"),
    );
    let vary = (header::VARY, HeaderValue::from_static("accept-encoding"));
    let (body, etag, encoding) = match (&a.gz, gzip) {
        (Some((z, tag)), true) => (z, tag, Some(HeaderValue::from_static("gzip"))),
        _ => (&a.body, &a.etag, None),
    };
    if not_modified(inm, etag) {
        return (
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, etag.clone()), cache, vary],
        )
            .into_response();
    }
    let json = HeaderValue::from_static("application/json");
    let mut r = (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, json),
            (header::ETAG, etag.clone()),
            cache,
            vary,
        ],
        body.clone(),
    )
        .into_response();
    if let Some(e) = encoding {
        r.headers_mut().insert(header::CONTENT_ENCODING, e);
    }
    r
}

/// Whether answers to `GET path` are cached: the API's, but for the event stream (it never
/// ends, and is new at every commit).
fn cacheable(path: &str) -> bool {
    path.starts_with("/api/") && path != "/api/v1/events"
}

/// The cached answer to an admitted client request, if it is one the cache answers (`GET
/// /api/…`, within the request limits, with the access token) and the cache holds its answer
/// at the store's version now; with the security headers. `None` sends the request the full
/// way (limits, access check, handler), which answers every other case.
pub(crate) fn hit<B>(state: &AppState, req: &Request<B>) -> Option<Response> {
    if req.method() != Method::GET
        || !cacheable(req.uri().path())
        || super::guard::refuse(req).is_some()
        || !state.auth.authorized(req.headers())
    {
        return None;
    }
    let ver = state.cache.version()?;
    let h = req.headers();
    let key = req.uri().to_string();
    let mut r = state
        .cache
        .answer(&ver, &key, 1, h.get(header::IF_NONE_MATCH), accepts_gzip(h))?;
    super::guard::secure(r.headers_mut());
    Some(r)
}

/// Serve a `GET /api/…` from the cache when the store has not changed since it was stored;
/// otherwise run the handler and keep a successful answer.
pub(crate) async fn cached(
    State(state): State<Arc<AppState>>,
    req: Request<Body>,
    next: Next,
) -> Response {
    if req.method() != Method::GET || !cacheable(req.uri().path()) {
        return next.run(req).await;
    }
    let cache = &state.cache;
    let Some(ver) = cache.version() else {
        return next.run(req).await;
    };
    let key = req.uri().to_string();
    let reads = u64::from(req.extensions().get::<Ahead>().is_none());
    let inm = req.headers().get(header::IF_NONE_MATCH).cloned();
    let gz = accepts_gzip(req.headers());
    let hit = || cache.answer(&ver, &key, reads, inm.as_ref(), gz);
    if let Some(r) = hit() {
        return r;
    }
    // one request per path computes; the others wait here, then find its answer
    let _filling = cache.fill_lock(&key).lock().await;
    if let Some(r) = hit() {
        return r;
    }
    let resp = next.run(req).await;
    if resp.status() != StatusCode::OK {
        return resp;
    }
    let Ok(body) = axum::body::to_bytes(resp.into_body(), MAX_BYTES).await else {
        return super::guard::error(StatusCode::INTERNAL_SERVER_ERROR, "answer too large");
    };
    // compressing a large answer would hold the server's one thread: a store-read thread does it
    let a = if body.len() >= COMPRESS_ASIDE_FROM {
        match tokio::task::spawn_blocking(move || Answer::new(body, reads)).await {
            Ok(a) => a,
            Err(_) => {
                return super::guard::error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "answer not prepared (internal error)",
                )
            }
        }
    } else {
        Answer::new(body, reads)
    };
    let a = cache.put(ver, key, a);
    reply(&a, inm.as_ref(), gz)
}

/// After each commit (a change of the state record), compute the answers that were read
/// lately, through `app` (the paths behind the access check), all at once; each under the
/// request deadline. Runs until the store is closed.
pub(crate) async fn refresh_on_commit(state: Arc<AppState>, app: Router) {
    let Some(meta) = state.cache.meta.clone() else {
        return;
    };
    let mut commits = meta.watch_prefix(KEY_STATE);
    while (&mut commits).await.is_some() {
        let Some(ver) = state.cache.version() else {
            continue;
        };
        let mut computing = Vec::new();
        for key in state.cache.wanted(&ver) {
            let Ok(mut req) = Request::get(key.as_str()).body(Body::empty()) else {
                continue;
            };
            req.extensions_mut().insert(Ahead);
            let call = tower_service::Service::call(&mut app.clone(), req);
            let deadline = state.limits.deadline;
            computing.push(tokio::spawn(async move {
                if tokio::time::timeout(deadline, call).await.is_err() {
                    tracing::debug!(path = %key, "answer not ready within the deadline after a commit");
                }
            }));
        }
        // all at once (store reads stay bounded by the server's limit), done before the next
        for c in computing {
            let _ = c.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts(v: &str) -> bool {
        let mut h = axum::http::HeaderMap::new();
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
        accepts_gzip(&h)
    }

    fn answer_of(n: usize) -> Answer {
        Answer {
            body: Bytes::from(vec![b'x'; n]),
            etag: HeaderValue::from_static("\"t\""),
            gz: None,
            hits: Arc::new(AtomicU64::new(0)),
        }
    }

    #[test]
    fn distinct_answers_stay_within_the_byte_bound_and_the_most_read_stay() {
        let mut e = Entries::default();
        let hot = answer_of(1 << 20);
        hot.hits.store(1000, Ordering::Relaxed);
        e.insert("/api/v1/status".into(), hot);
        for i in 0..520 {
            e.insert(format!("/api/v1/verdicts?since={i}"), answer_of(300 << 10));
            let sum: usize = e.map.values().map(Answer::size).sum();
            assert_eq!(e.bytes, sum);
            assert!(e.bytes <= MAX_TOTAL_BYTES && e.map.len() <= MAX_ENTRIES);
        }
        assert!(e.map.contains_key("/api/v1/status"));
        assert!(e.map.contains_key("/api/v1/verdicts?since=519"));
        assert!(e.bytes > MAX_TOTAL_BYTES - (300 << 10), "{}", e.bytes);
        // many small answers: the entry bound holds too
        for i in 0..(2 * MAX_ENTRIES) {
            e.insert(format!("/api/v1/topics?since={i}"), answer_of(10));
        }
        assert_eq!(e.map.len(), MAX_ENTRIES);
        assert!(e.map.contains_key("/api/v1/status"));
        // a replaced answer is not counted twice
        let before = e.bytes;
        e.insert("/api/v1/status".into(), answer_of(1 << 20));
        assert_eq!(e.bytes, before);
    }

    #[test]
    fn gzip_is_accepted_as_http_says() {
        assert!(accepts("gzip"));
        assert!(accepts("deflate, GZip;q=0.5"));
        assert!(accepts("x-gzip"));
        assert!(accepts("*"));
        assert!(!accepts("br, zstd"));
        assert!(!accepts("gzip;q=0"));
        assert!(!accepts("gzip; q=0.0, br"));
        assert!(!accepts("identity"));
        assert!(!accepts_gzip(&axum::http::HeaderMap::new()));
    }

    #[test]
    fn a_large_answer_keeps_a_smaller_gzip_form_under_its_own_tag_a_small_one_none() {
        let body: String = (0..200)
            .map(|i| format!("{{\"timestep\":{i},\"docs\":500}},"))
            .collect();
        let a = Answer::new(Bytes::from(body.clone()), 0);
        let (z, tag) = a.gz.as_ref().expect("a gzip form");
        assert!(z.len() < body.len() / 2, "{} of {}", z.len(), body.len());
        let mut back = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&z[..]), &mut back)
            .unwrap();
        assert_eq!(back, body);
        let plain = a.etag.to_str().unwrap();
        assert_eq!(
            tag.to_str().unwrap(),
            format!("{}-gz\"", plain.trim_end_matches('"'))
        );
        assert!(Answer::new(Bytes::from_static(b"{\"ok\":true}"), 0)
            .gz
            .is_none());
    }
}
