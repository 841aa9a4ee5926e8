//! Pushing batches over HTTP: `POST /api/v1/batches?name=NAME` puts the request body into the
//! running daemon's inbox as the file `NAME`, where it is ingested like any dropped file.
//!
//! * Access: the ingest token (`ingest.token`, see [`super::auth`]) as a bearer header; the
//!   read token is refused with 403, no or a wrong token with 401.
//! * Checks before anything is written: the name (a plain file name the inbox takes, see
//!   [`check_name`]), that no file of that name is in the inbox, `processed/` or `rejected/`
//!   (409), the size ([`super::HttpConfig::max_batch_bytes`], 413; no more than the cap and
//!   one byte is read), and the content, with the parser the inbox uses
//!   ([`crate::batch::parse_batch`]; 400 naming the line).
//! * Atomic arrival: the body is written to `.NAME.tmp` (a name the inbox ignores), synced,
//!   renamed to `NAME`, and the inbox directory synced; the answer (202) comes after.
//! * Retries: with an `Idempotency-Key` header, a record of the push is kept in
//!   `STORE/ingest-keys/<blake3 of the key, hex>` (small JSON, written to a temporary name,
//!   synced, renamed) after the batch's temporary file is durable and before its rename into
//!   the inbox. The same key again answers the same 202 without writing the batch again, and
//!   first finishes an earlier push cut short between the record and the rename (its
//!   temporary file is still there: it is renamed). The same key with another name or body is
//!   refused with 422. The records live in files, so they survive a restart; a record is kept
//!   [`KEEP_KEYS`] (seven days) and removed by a later push with a key.
//!
//! The body is read and the files are written on a blocking thread, one push at a time.

use std::future::poll_fn;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::guard::error;
use super::AppState;
use crate::daemon::inbox::{ignored, PROCESSED, REJECTED};

/// The path pushes are sent to.
pub const PATH: &str = "/api/v1/batches";
/// The default cap on a pushed batch, bytes (16 MiB).
pub const DEFAULT_MAX_BATCH_BYTES: u64 = 16 << 20;
/// The longest batch file name, bytes.
pub const MAX_NAME_BYTES: usize = 200;
/// The longest `Idempotency-Key`, bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// The folder of the idempotency key records, in the store directory.
pub const KEYS_DIR: &str = "ingest-keys";

/// How long an `Idempotency-Key` record is kept: a retry within this time after its push is
/// recognised; an older record is removed by the next push with a key.
pub const KEEP_KEYS: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);
/// The idempotency key header.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// How long the whole body of a push may take to arrive.
pub const BODY_DEADLINE: Duration = Duration::from_secs(120);

/// Whether `req` is a push (the one request that may carry a body).
pub fn is_push<B>(req: &Request<B>) -> bool {
    req.method() == axum::http::Method::POST && req.uri().path() == PATH
}

/// A refused push: its status and reason.
#[derive(Debug)]
pub struct Refused(pub StatusCode, pub String);

impl Refused {
    fn bad(msg: impl Into<String>) -> Refused {
        Refused(StatusCode::BAD_REQUEST, msg.into())
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

/// Check a batch file name: a plain file name (no separators, no `..`, no leading dot, no
/// control characters, 1 to [`MAX_NAME_BYTES`] bytes) that the inbox neither ignores nor
/// rejects for its type.
pub fn check_name(name: &str) -> Result<(), String> {
    let why = if name.is_empty() {
        "the name is empty".to_string()
    } else if name.len() > MAX_NAME_BYTES {
        format!(
            "the name is {} bytes long; at most {MAX_NAME_BYTES}",
            name.len()
        )
    } else if name.contains(['/', '\\']) {
        "the name contains a path separator; give a plain file name".into()
    } else if name.contains("..") {
        "the name contains `..`".into()
    } else if name.starts_with('.') {
        "the name starts with a dot (the inbox ignores such files)".into()
    } else if name.chars().any(char::is_control) {
        "the name contains a control character".into()
    } else if ignored(name) {
        "the inbox ignores names ending in .tmp or .part".into()
    } else if let Err(e) = crate::batch::require_format(name) {
        e.to_string()
    } else {
        return Ok(());
    };
    Err(format!("bad batch name `{}`: {why}", name.escape_debug()))
}

/// Where a file named `name` already is (the inbox, `processed/` or `rejected/`), if anywhere.
fn taken(inbox: &Path, name: &str) -> Option<PathBuf> {
    [
        inbox.join(name),
        inbox.join(PROCESSED).join(name),
        inbox.join(REJECTED).join(name),
    ]
    .into_iter()
    .find(|p| p.symlink_metadata().is_ok())
}

/// The temporary name a push is written to before its rename to `name` (ignored by the
/// inbox: leading dot, `.tmp`).
fn temp_of(inbox: &Path, name: &str) -> PathBuf {
    inbox.join(format!(".{name}.tmp"))
}

/// What a push put into the inbox: the answer, and the idempotency key record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    pub file: String,
    pub bytes: u64,
    pub documents: u64,
    /// blake3 of the body, hex (in the key record only).
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub body: String,
}

impl Accepted {
    fn answer(&self) -> Response {
        let j = serde_json::json!({
            "file": self.file,
            "bytes": self.bytes,
            "documents": self.documents,
        });
        let mut r = (StatusCode::ACCEPTED, axum::Json(j)).into_response();
        r.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
        r
    }
}

/// Sync a directory (its entries: a rename or creation in it).
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Write `bytes` to `path` (created or truncated) and sync it.
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn io_failed(what: &str, path: &Path, e: std::io::Error) -> Refused {
    tracing::error!(path = %path.display(), error = %e, "push: cannot {what}");
    Refused(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("cannot {what} {}: {e}", path.display()),
    )
}

/// The idempotency key records of a store.
struct Keys {
    dir: PathBuf,
}

impl Keys {
    /// The record file of `key`.
    fn path(&self, key: &str) -> PathBuf {
        self.dir
            .join(blake3::hash(key.as_bytes()).to_hex().as_str())
    }

    /// The record of `key`, if one was written.
    fn get(&self, key: &str) -> Result<Option<Accepted>, Refused> {
        let path = self.path(key);
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
                Refused(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!(
                        "the record of this Idempotency-Key, {}, is damaged ({e}); delete it to push again",
                        path.display()
                    ),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_failed("read", &path, e)),
        }
    }

    /// Remove the records last written more than `keep` ago (their pushes are long done);
    /// returns how many. Failures are ignored: a record left is only kept longer.
    fn prune(&self, keep: std::time::Duration) -> usize {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let old = |e: &std::fs::DirEntry| {
            e.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > keep)
        };
        rd.flatten()
            .filter(|e| old(e) && std::fs::remove_file(e.path()).is_ok())
            .count()
    }

    /// Keep the record of `key` durably: temporary name, sync, rename, sync the folder. Records
    /// older than [`KEEP_KEYS`] are removed first.
    fn put(&self, key: &str, rec: &Accepted) -> Result<(), Refused> {
        self.prune(KEEP_KEYS);
        std::fs::create_dir_all(&self.dir).map_err(|e| io_failed("create", &self.dir, e))?;
        let path = self.path(key);
        let tmp = self.dir.join(format!(".{}.tmp", name_of(&path)));
        let json = serde_json::to_vec(rec).expect("a record serializes");
        write_synced(&tmp, &json).map_err(|e| io_failed("write", &tmp, e))?;
        if let Err(e) = std::fs::rename(&tmp, &path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_failed("rename", &tmp, e));
        }
        // a record that may not last is taken back: the push fails whole
        sync_dir(&self.dir).map_err(|e| {
            let _ = std::fs::remove_file(&path);
            io_failed("sync", &self.dir, e)
        })
    }
}

fn name_of(path: &Path) -> String {
    crate::daemon::inbox::name_of(path)
}

/// The `Idempotency-Key` header, if any: visible ASCII, 1 to [`MAX_KEY_BYTES`] bytes.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Refused> {
    let mut all = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(v) = all.next() else { return Ok(None) };
    if all.next().is_some() {
        return Err(Refused::bad("more than one Idempotency-Key header"));
    }
    let ok = !v.is_empty()
        && v.len() <= MAX_KEY_BYTES
        && v.as_bytes().iter().all(|b| b.is_ascii_graphic());
    if !ok {
        return Err(Refused::bad(format!(
            "bad Idempotency-Key: 1 to {MAX_KEY_BYTES} visible ASCII characters expected"
        )));
    }
    Ok(Some(v.to_str().expect("ASCII").to_string()))
}

/// Read the body on this (blocking) thread: at most `cap` + 1 bytes, within
/// [`BODY_DEADLINE`].
fn read_body(rt: &tokio::runtime::Handle, mut body: Body, cap: u64) -> Result<Vec<u8>, Refused> {
    let until = tokio::time::Instant::now() + BODY_DEADLINE;
    let mut out: Vec<u8> = Vec::new();
    loop {
        let next = rt.block_on(tokio::time::timeout_at(
            until,
            poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)),
        ));
        let frame = match next {
            Err(_) => {
                return Err(Refused(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the batch did not arrive within {} s",
                        BODY_DEADLINE.as_secs()
                    ),
                ))
            }
            Ok(None) => return Ok(out),
            Ok(Some(Err(e))) => return Err(Refused::bad(format!("cannot read the batch: {e}"))),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            let room = (cap + 1).saturating_sub(out.len() as u64) as usize;
            out.extend_from_slice(&data[..data.len().min(room)]);
            if out.len() as u64 > cap {
                return Err(too_large(cap));
            }
        }
    }
}

fn too_large(cap: u64) -> Refused {
    Refused(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the batch is larger than the limit of {cap} bytes (--http-max-batch-bytes)"),
    )
}

/// One push, on a blocking thread: read, check, write, rename.
fn push(
    rt: &tokio::runtime::Handle,
    store: &Path,
    inbox: &Path,
    name: &str,
    key: Option<&str>,
    body: Body,
    cap: u64,
) -> Result<Accepted, Refused> {
    let bytes = read_body(rt, body, cap)?;
    let hash = blake3::hash(&bytes).to_hex().to_string();
    let keys = Keys {
        dir: store.join(KEYS_DIR),
    };
    let temp = temp_of(inbox, name);
    if let Some(key) = key {
        if let Some(rec) = keys.get(key)? {
            if rec.file != name || rec.body != hash {
                return Err(Refused(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "this Idempotency-Key was used for another push (`{}`, {} bytes); use a new key for a different batch",
                        rec.file.escape_debug(),
                        rec.bytes
                    ),
                ));
            }
            // the same push again: finish it if it was cut short before its rename
            if temp.symlink_metadata().is_ok() && taken(inbox, name).is_none() {
                let dest = inbox.join(name);
                std::fs::rename(&temp, &dest).map_err(|e| io_failed("rename", &temp, e))?;
                sync_dir(inbox).map_err(|e| io_failed("sync", inbox, e))?;
                tracing::info!(file = %crate::show::logged(name), "push: finished an earlier push of the same key");
            }
            return Ok(rec);
        }
    }
    if let Some(at) = taken(inbox, name) {
        return Err(Refused(
            StatusCode::CONFLICT,
            format!(
                "a file named `{}` is already there ({}); choose another name",
                name.escape_debug(),
                at.display()
            ),
        ));
    }
    let now_ms = chrono::Utc::now().timestamp_millis();
    let docs = crate::batch::parse_batch(name, &bytes, now_ms)
        .map_err(|e| Refused::bad(format!("bad batch `{}`: {e}", name.escape_debug())))?;
    let rec = Accepted {
        file: name.to_string(),
        bytes: bytes.len() as u64,
        documents: docs.len() as u64,
        body: hash,
    };
    drop(docs);
    let written = write_synced(&temp, &bytes)
        .and_then(|()| sync_dir(inbox))
        .map_err(|e| io_failed("write", &temp, e));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    if let Some(key) = key {
        if let Err(e) = keys.put(key, &rec) {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
    }
    let dest = inbox.join(name);
    std::fs::rename(&temp, &dest).map_err(|e| io_failed("rename", &temp, e))?;
    sync_dir(inbox).map_err(|e| io_failed("sync", inbox, e))?;
    tracing::info!(
        file = %crate::show::logged(name),
        bytes = rec.bytes,
        documents = rec.documents,
        "push: batch put into the inbox"
    );
    Ok(rec)
}

/// `POST /api/v1/batches?name=NAME`: the access check ran before (see `guard`).
pub(crate) async fn batches(State(st): State<Arc<AppState>>, req: Request<Body>) -> Response {
    match batches_inner(&st, req).await {
        Ok(a) => a.answer(),
        Err(r) => r.into_response(),
    }
}

async fn batches_inner(st: &Arc<AppState>, req: Request<Body>) -> Result<Accepted, Refused> {
    let Some(inbox) = st.inbox.clone() else {
        return Err(Refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "no daemon ingests into this store: pushes need `novad run`".into(),
        ));
    };
    let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(req.uri())
        .map_err(|e| Refused::bad(format!("bad query: {e}")))?;
    let mut name = None;
    for (k, v) in pairs {
        match (k.as_str(), &name) {
            ("name", None) => name = Some(v),
            ("name", Some(_)) => return Err(Refused::bad("`name` given more than once")),
            _ => {
                return Err(Refused::bad(format!(
                    "unknown parameter `{}`: this path takes `name`",
                    k.escape_debug()
                )))
            }
        }
    }
    let name =
        name.ok_or_else(|| Refused::bad("missing `name`: POST /api/v1/batches?name=NAME"))?;
    check_name(&name).map_err(Refused::bad)?;
    let key = idempotency_key(req.headers())?;
    let cap = st.max_batch_bytes;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > cap) {
        return Err(too_large(cap));
    }
    let permit = Arc::clone(&st.pushes)
        .acquire_owned()
        .await
        .map_err(|_| Refused(StatusCode::SERVICE_UNAVAILABLE, "shutting down".into()))?;
    let store = st.dir.clone();
    let rt = tokio::runtime::Handle::current();
    let body = req.into_body();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        push(&rt, &store, &inbox, &name, key.as_deref(), body, cap)
    })
    .await
    .map_err(|e| {
        Refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the push failed: {e}"),
        )
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_file_names_the_inbox_takes() {
        for good in ["a.jsonl", "b.txt", "2024-05-01 news.JSONL", "ünï.txt"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        let long = format!("{}.txt", "a".repeat(MAX_NAME_BYTES));
        for (bad, why) in [
            ("", "empty"),
            ("a/b.txt", "separator"),
            ("a\\b.txt", "separator"),
            ("..txt", "`..`"),
            ("a..b.jsonl", "`..`"),
            (".hidden.txt", "dot"),
            ("x.txt.tmp", ".tmp"),
            ("x.txt.part", ".tmp or .part"),
            ("x.csv", ".jsonl or .txt"),
            ("a\nb.txt", "control"),
            (long.as_str(), "at most 200"),
        ] {
            let e = check_name(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_key_is_visible_ascii_of_bounded_length() {
        let mut h = HeaderMap::new();
        assert!(idempotency_key(&h).unwrap().is_none());
        h.insert(IDEMPOTENCY_KEY, "k-1".parse().unwrap());
        assert_eq!(idempotency_key(&h).unwrap().as_deref(), Some("k-1"));
        h.insert(IDEMPOTENCY_KEY, "a b".parse().unwrap());
        assert!(idempotency_key(&h).is_err());
        h.insert(
            IDEMPOTENCY_KEY,
            "k".repeat(MAX_KEY_BYTES + 1).parse().unwrap(),
        );
        assert!(idempotency_key(&h).is_err());
    }

    #[test]
    fn a_key_record_is_kept_durably_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        let keys = Keys {
            dir: d.path().join(KEYS_DIR),
        };
        assert!(keys.get("k").unwrap().is_none());
        let rec = Accepted {
            file: "a.txt".into(),
            bytes: 3,
            documents: 1,
            body: "00".into(),
        };
        keys.put("k", &rec).unwrap();
        assert_eq!(keys.get("k").unwrap(), Some(rec.clone()));
        assert!(keys.get("other").unwrap().is_none());
        let names = std::fs::read_dir(&keys.dir).unwrap().count();
        assert_eq!(names, 1, "no temporary file left");
        let file = keys.path("k");
        assert_eq!(name_of(&file).len(), 64, "blake3 hex");
        // a record older than KEEP_KEYS goes at the next put; a recent one stays
        let week_ago =
            std::time::SystemTime::now() - KEEP_KEYS - std::time::Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(week_ago)
            .unwrap();
        keys.put("k2", &rec).unwrap();
        assert!(
            keys.get("k").unwrap().is_none(),
            "the old record was removed"
        );
        assert!(keys.get("k2").unwrap().is_some());
        assert_eq!(keys.prune(KEEP_KEYS), 0);
        assert_eq!(
            keys.prune(std::time::Duration::ZERO),
            1,
            "k2 is older than zero"
        );
    }
}
