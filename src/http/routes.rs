//! The paths: the page, its assets, the login link, the versioned JSON API and `/metrics`. Every store
//! read goes through the functions of [`crate::query`] (the same as the socket API and the
//! command line), on a blocking thread.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::guard::{self, error, MAX_PAGE};
use super::{assets, AppState};
use crate::query::{self, PageRequest, VerdictFilter};
use crate::store::schema::{verdict_key, VerdictRecord};
use novad_models::TopicKind;

type Reply = Result<Response, ApiError>;

/// A refused or failed API request: its status and the reason, answered as
/// `{"error": reason}`.
#[derive(Debug, thiserror::Error)]
#[error("{msg}")]
pub struct ApiError {
    pub status: StatusCode,
    pub msg: String,
}

impl ApiError {
    fn new(status: StatusCode, msg: impl Into<String>) -> ApiError {
        ApiError {
            status,
            msg: msg.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error(self.status, self.msg)
    }
}

/// The paths with the access check and the limits in front (`.0`, what clients reach), and
/// the same paths without them (`.1`, for the server's own requests after a commit).
pub(super) fn router(state: Arc<AppState>) -> (Router, Router) {
    let inner = Router::new()
        .route("/", get(index))
        .route("/login", get(login))
        .route("/assets/{name}", get(asset))
        .route("/api/v1/status", get(status))
        .route("/api/v1/timesteps", get(timesteps))
        .route("/api/v1/verdicts", get(verdicts))
        .route("/api/v1/verdicts/{id}", get(verdict))
        .route("/api/v1/topics", get(topics))
        .route("/api/v1/events", get(super::events::events))
        .route("/metrics", get(metrics))
        .route(super::push::PATH, post(super::push::batches))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            super::cache::cached,
        ))
        .with_state(Arc::clone(&state));
    let outer = inner
        .clone()
        .layer(axum::middleware::from_fn_with_state(state, guard::guard));
    (outer, inner)
}

async fn not_found(uri: axum::http::Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no such path: {}", uri.path()),
    )
}

fn no_store(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

async fn index() -> Response {
    no_store(Html(assets::INDEX_HTML).into_response())
}

async fn asset(Path(name): Path<String>) -> Response {
    match assets::get(&name) {
        Some((ctype, bytes)) => (
            [
                (header::CONTENT_TYPE, ctype),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            bytes,
        )
            .into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no such asset: {name}")),
    }
}

async fn login(
    State(st): State<Arc<AppState>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let pairs = q.map(|Query(p)| p).unwrap_or_default();
    let ok = pairs.iter().any(|(k, v)| match k.as_str() {
        "code" => st.auth.redeem(v),
        "token" => st.auth.token_matches(v),
        _ => false,
    });
    if !ok {
        return guard::unauthorized(false);
    }
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    if let Ok(v) = HeaderValue::from_str(&st.auth.cookie()) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    no_store(r)
}

/// Query parameters, checked against the names a path knows.
struct Params(Vec<(String, String)>);

impl Params {
    fn new(
        q: Result<Query<Vec<(String, String)>>, QueryRejection>,
        known: &[&str],
    ) -> Result<Params, ApiError> {
        let Query(pairs) = q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
        for (k, _) in &pairs {
            if !known.contains(&k.as_str()) {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "unknown query parameter `{k}` (known: {})",
                        known.join(", ")
                    ),
                ));
            }
        }
        Ok(Params(pairs))
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(n, v)| n == k && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }
    fn bad(k: &str, v: &str, why: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("query parameter `{k}={v}`: {why}"),
        )
    }
    /// A time bound: Unix milliseconds, RFC 3339, or a date (`until` includes that whole day).
    fn time(&self, k: &str, until: bool) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.get(k) else {
            return Ok(None);
        };
        if let Ok(ms) = v.parse::<i64>() {
            return Ok(Some(ms));
        }
        let r = if until {
            query::parse_until(v)
        } else {
            query::parse_since(v)
        };
        r.map(Some).map_err(|e| Self::bad(k, v, e))
    }
    fn num<T: std::str::FromStr>(
        &self,
        k: &str,
        ok: impl Fn(&T) -> bool,
        want: &str,
    ) -> Result<Option<T>, ApiError> {
        let Some(v) = self.get(k) else {
            return Ok(None);
        };
        match v.parse::<T>() {
            Ok(x) if ok(&x) => Ok(Some(x)),
            _ => Err(Self::bad(k, v, format!("expected {want}"))),
        }
    }
    fn flag(&self, k: &str) -> Result<bool, ApiError> {
        match self.get(k) {
            None | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") => Ok(true),
            Some(v) => Err(Self::bad(k, v, "expected true or false")),
        }
    }
}

/// Run a store read on a blocking thread, at most [`guard::MAX_QUERIES`] at once.
async fn read<T: Send + 'static>(
    st: &Arc<AppState>,
    f: impl FnOnce(&AppState) -> Result<T, String> + Send + 'static,
) -> Result<T, ApiError> {
    let _permit = st
        .queries
        .acquire()
        .await
        .map_err(|_| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down"))?;
    let st = Arc::clone(st);
    match tokio::task::spawn_blocking(move || f(&st)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("store read failed: {e}"),
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "store read failed (internal error)",
        )),
    }
}

fn json_ok(v: Value) -> Reply {
    Ok(no_store(Json(v).into_response()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// `t` as a JSON value, `f32` fields in their shortest form (as `serde_json::to_string`
/// writes them; `to_value` would widen them to `f64` digits).
fn to_json<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_string(t)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_else(|| json!({}))
}

/// A verdict as the API shows it: every field of the record, plus its `id` (the key, for
/// `/api/v1/verdicts/{id}` and cursors) and its time in RFC 3339.
/// With the hybrid detector's explanation, its nearest earlier document gets the `id` of its
/// own verdict (for `/api/v1/verdicts/{id}`).
pub fn verdict_json(key: &[u8], v: &VerdictRecord) -> Value {
    let mut j = to_json(v);
    j["id"] = json!(hex(key));
    j["time_utc"] = json!(query::fmt_time(v.time));
    if let Some(n) = v.hybrid.as_ref().and_then(|h| h.nearest.as_ref()) {
        j["hybrid"]["nearest"]["id"] = json!(hex(&verdict_key(n.time, n.timestep, n.seq)));
        j["hybrid"]["nearest"]["time_utc"] = json!(query::fmt_time(n.time));
    }
    j
}

async fn status(
    State(st): State<Arc<AppState>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Reply {
    Params::new(q, &[])?;
    let v = read(&st, |st| {
        let mut s = query::status(&st.db, 1).map_err(|e| e.to_string())?;
        if st.live {
            s.daemon_pid = Some(std::process::id());
        }
        s.disk_bytes = crate::store::dir_size(&st.dir);
        let mut j = to_json(&s);
        j["live"] = json!(st.live);
        j["version"] = json!(env!("CARGO_PKG_VERSION"));
        Ok(j)
    })
    .await?;
    json_ok(v)
}

/// The process's metrics ([`crate::metrics`]), the store's size measured now; never cached.
async fn metrics(
    State(st): State<Arc<AppState>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Reply {
    Params::new(q, &[])?;
    let text = read(&st, |st| {
        crate::metrics::set_store_bytes(crate::store::dir_size(&st.dir));
        let hooks = crate::alerts::backlog::read(&st.db)?;
        crate::metrics::set_webhook_backlog(
            hooks.iter().map(|h| h.waiting).sum(),
            hooks.iter().map(|h| h.parked).sum(),
        );
        Ok(crate::metrics::encode())
    })
    .await?;
    Ok(no_store(
        ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response(),
    ))
}

async fn timesteps(
    State(st): State<Arc<AppState>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Reply {
    let p = Params::new(q, &["since", "until"])?;
    let (since, until) = (p.time("since", false)?, p.time("until", true)?);
    let items = read(&st, move |st| query::timesteps(&st.db, since, until)).await?;
    json_ok(json!({ "items": to_json(&items) }))
}

async fn verdicts(
    State(st): State<Arc<AppState>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Reply {
    let p = Params::new(
        q,
        &[
            "since",
            "until",
            "novel",
            "min_score",
            "q",
            "limit",
            "cursor",
            "order",
        ],
    )?;
    let limit = p.num::<usize>(
        "limit",
        |&n| (1..=MAX_PAGE).contains(&n),
        &format!("a page size 1..={MAX_PAGE}"),
    )?;
    let after = match p.get("cursor") {
        None => None,
        Some(c) => Some(unhex(c).filter(|k| k.len() == 20).ok_or_else(|| {
            Params::bad(
                "cursor",
                c,
                "not a cursor (use `next` of the previous page)",
            )
        })?),
    };
    let newest_first = match p.get("order") {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(o) => return Err(Params::bad("order", o, "expected asc or desc")),
    };
    let req = PageRequest {
        filter: VerdictFilter {
            since: p.time("since", false)?,
            until: p.time("until", true)?,
            novel_only: p.flag("novel")?,
            min_score: p.num::<f64>("min_score", |x| x.is_finite(), "a finite number")?,
            limit: Some(limit.unwrap_or(100)),
        },
        text: p.get("q").map(str::to_string),
        newest_first,
        after,
    };
    let page = read(&st, move |st| query::verdict_page(&st.db, &req)).await?;
    let items: Vec<Value> = page.items.iter().map(|(k, v)| verdict_json(k, v)).collect();
    json_ok(json!({
        "items": items,
        "next": page.next.as_deref().map(hex),
    }))
}

async fn verdict(
    State(st): State<Arc<AppState>>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Reply {
    let Ok(Path(id)) = id else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "verdict id: not valid percent-encoded UTF-8; expected 40 hex digits",
        ));
    };
    let key = unhex(&id).filter(|k| k.len() == 20).ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("verdict id `{id}`: expected 40 hex digits (the `id` of a verdict)"),
        )
    })?;
    let k2 = key.clone();
    let found = read(&st, move |st| {
        let Some(v) = query::verdict_by_key(&st.db, &k2)? else {
            return Ok(None);
        };
        let (record, topics) = query::timestep_detail(&st.db, v.timestep)?;
        Ok(Some((v, record, topics)))
    })
    .await?;
    let Some((v, record, topics)) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no verdict with id {id}"),
        ));
    };
    let topics: Vec<_> = topics
        .into_iter()
        .filter(|t| t.docs.contains(&v.doc_id))
        .collect();
    json_ok(json!({
        "verdict": verdict_json(&key, &v),
        "threshold": record.as_ref().and_then(|r| r.stats.threshold),
        "timestep": record,
        "topics": to_json(&topics),
    }))
}

async fn topics(
    State(st): State<Arc<AppState>>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Reply {
    let p = Params::new(q, &["since", "until", "kind", "event"])?;
    let event = match p.get("event") {
        None => None,
        Some(e) => Some(
            e.parse::<u64>()
                .map_err(|_| Params::bad("event", e, "expected an event id (an integer ≥ 0)"))?,
        ),
    };
    let (since, until) = (p.time("since", false)?, p.time("until", true)?);
    let kind = match p.get("kind") {
        None => None,
        Some("emerging") => Some(TopicKind::Emerging),
        Some("evolving") => Some(TopicKind::Evolving),
        Some("continuing") => Some(TopicKind::Continuing),
        Some(k) => {
            return Err(Params::bad(
                "kind",
                k,
                "expected emerging, evolving or continuing",
            ))
        }
    };
    let ts = read(&st, move |st| {
        crate::store::topics::query(&st.db, since, until)
    })
    .await?;
    let items: Vec<Value> = ts
        .iter()
        .filter(|t| kind.is_none_or(|k| t.kind == k))
        .filter(|t| event.is_none_or(|e| t.event == Some(e)))
        .map(|t| {
            let mut j = to_json(t);
            j["time_utc"] = json!(query::fmt_time(t.time));
            j
        })
        .collect();
    json_ok(json!({ "items": items }))
}
