//! Answers of the API cached per store version: the store changes only when a timestep
//! commits, and dashboards poll the same few paths, so repeated requests between two commits
//! cost one key lookup instead of a scan of the verdict log.
//!
//! After a commit, every polling client misses at once. Only one of the requests for a given
//! path computes the answer; the others for that path wait for it (a per-path lock, striped
//! over [`FILL_LOCKS`] locks) and are then served from the cache, so a commit costs one store
//! read per polled path instead of one per client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue, Method, Request, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::store::schema::{KEY_STATE, META};

/// Most answers kept for one store version.
const MAX_ENTRIES: usize = 512;
/// Largest answer kept, bytes.
const MAX_BYTES: usize = 4 << 20;

/// Locks that serialize the computing of missing answers (a path always maps to the same one).
const FILL_LOCKS: usize = 16;

/// Cached answers (request target → JSON body) of one store version.
#[derive(Default)]
pub struct Cache {
    inner: Mutex<(Vec<u8>, HashMap<String, Bytes>)>,
    fill: [tokio::sync::Mutex<()>; FILL_LOCKS],
}

impl Cache {
    /// The answer to `key` stored for store version `ver`, if any.
    fn get(&self, ver: &[u8], key: &str) -> Option<Bytes> {
        let c = self.inner.lock().ok()?;
        if c.0 == ver {
            c.1.get(key).cloned()
        } else {
            None
        }
    }

    /// The lock under which a missing answer to `key` is computed.
    fn fill_lock(&self, key: &str) -> &tokio::sync::Mutex<()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        &self.fill[(h.finish() as usize) % FILL_LOCKS]
    }
}

/// The store's version: the committed state record, rewritten by every commit.
fn version(db: &sled::Db) -> Option<Vec<u8>> {
    let meta = db.open_tree(META).ok()?;
    Some(
        meta.get(KEY_STATE)
            .ok()?
            .map(|v| v.to_vec())
            .unwrap_or_default(),
    )
}

fn json(body: Bytes) -> Response {
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body,
    )
        .into_response()
}

/// Serve a `GET /api/…` from the cache when the store has not changed since it was stored;
/// otherwise run the handler and keep a successful answer.
pub(crate) async fn cached(
    State(state): State<Arc<AppState>>,
    req: Request<Body>,
    next: Next,
) -> Response {
    if req.method() != Method::GET || !req.uri().path().starts_with("/api/") {
        return next.run(req).await;
    }
    let Some(ver) = version(&state.db) else {
        return next.run(req).await;
    };
    let key = req.uri().to_string();
    if let Some(b) = state.cache.get(&ver, &key) {
        return json(b);
    }
    // one request per path computes; the others wait here, then find its answer
    let _filling = state.cache.fill_lock(&key).lock().await;
    if let Some(b) = state.cache.get(&ver, &key) {
        return json(b);
    }
    let resp = next.run(req).await;
    if resp.status() != StatusCode::OK {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BYTES).await else {
        return super::guard::error(StatusCode::INTERNAL_SERVER_ERROR, "answer too large");
    };
    if let Ok(mut c) = state.cache.inner.lock() {
        if c.0 != ver {
            *c = (ver, HashMap::new());
        }
        if c.1.len() >= MAX_ENTRIES {
            c.1.clear();
        }
        c.1.insert(key, bytes.clone());
    }
    Response::from_parts(parts, Body::from(bytes))
}
