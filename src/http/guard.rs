//! Limits every request passes before it reaches a handler: read-only methods (but for a push,
//! `POST` [`push::PATH`], the one request with a body, capped by
//! [`HttpConfig::max_batch_bytes`](super::HttpConfig::max_batch_bytes)), bounded URI, headers
//! and (absent) body, the access token (the ingest token for a push), and a deadline (a push
//! bounds its own time, see [`push::BODY_DEADLINE`]).
//!
//! The limits that mean the same for HTTP as for the query socket come from the one
//! [`Limits`](crate::api_limits::Limits) value the server is started with:
//! `max_request_bytes` caps the request head (hyper's read buffer: a larger head is refused),
//! `request_timeout` is the time a client has to send a request head, and `deadline` bounds
//! the time from a head being read to its answer being ready (503 after). The ones below are
//! HTTP's own: URI and header sizes, the page size, store reads at once, and open connections
//! (an HTTP connection stays open between requests, keep-alive, unlike a socket exchange, so
//! its ceiling counts mostly idle connections and is higher).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, Method, Request, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::PushAccess;
use super::{push, AppState};

/// Longest request target (path and query), bytes.
pub const MAX_URI: usize = 2048;
/// Largest request head (all header names and values), bytes.
pub const MAX_HEADERS: usize = 8192;
/// hyper's smallest allowed read buffer, bytes (`Limits::max_request_bytes` is raised to it).
pub const MIN_BUFFER: usize = 8192;
/// Open connections; more are closed at once.
pub const MAX_CONNECTIONS: usize = 512;
/// Store reads running at once; more wait (within the deadline). Two: on the small machines
/// the daemon targets, more parallel scans only add contention with ingest for the cores, and
/// answers are cached per store version (see `cache`), so few reads reach the store.
pub const MAX_QUERIES: usize = 2;
/// Largest page of verdicts.
pub const MAX_PAGE: usize = 500;

/// A JSON error body `{"error": msg}` with `status`.
pub fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    let mut r = (
        status,
        axum::Json(serde_json::json!({ "error": msg.into() })),
    )
        .into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Refuse what a read-only API never needs before anything else runs (a push's body is
/// checked by its handler).
pub(crate) fn refuse<B>(req: &Request<B>) -> Option<Response> {
    let push = push::is_push(req);
    if !push && req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = error(
            StatusCode::METHOD_NOT_ALLOWED,
            format!(
                "{} not allowed: the API is read-only (GET), but for POST {}",
                req.method(),
                push::PATH
            ),
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Some(r);
    }
    let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if uri_len > MAX_URI {
        return Some(error(
            StatusCode::URI_TOO_LONG,
            format!("request target of {uri_len} bytes; at most {MAX_URI}"),
        ));
    }
    let head: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    if head > MAX_HEADERS {
        return Some(error(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("request headers of {head} bytes; at most {MAX_HEADERS}"),
        ));
    }
    let has_body = req.headers().contains_key(header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if has_body && !push {
        return Some(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "requests carry no body: the API is read-only",
        ));
    }
    None
}

/// The request limits and the access check, in that order; then the handler under
/// the deadline (`Limits::deadline`). `/login` is the one path open without the token (it checks a code itself).
pub(crate) async fn guard(
    State(state): State<Arc<AppState>>,
    req: Request<Body>,
    next: Next,
) -> Response {
    if let Some(r) = refuse(&req) {
        return r;
    }
    if push::is_push(&req) {
        return match state.auth.push_access(req.headers()) {
            PushAccess::Allowed => next.run(req).await,
            PushAccess::ReadToken => error(
                StatusCode::FORBIDDEN,
                "the read token cannot ingest; use ingest.token (the store's ingest.token file) as `Authorization: Bearer TOKEN`",
            ),
            PushAccess::Denied => {
                let mut r = error(
                    StatusCode::UNAUTHORIZED,
                    "missing or wrong ingest token: send `Authorization: Bearer TOKEN` (the token is in the store's ingest.token file)",
                );
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"novad\""),
                );
                r
            }
        };
    }
    let open = req.uri().path() == "/login";
    if !open && !state.auth.authorized(req.headers()) {
        return unauthorized(req.uri().path().starts_with("/api/"));
    }
    let deadline = state.limits.deadline;
    let mut resp = match tokio::time::timeout(deadline, next.run(req)).await {
        Ok(r) => r,
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "busy: no answer within the {} s deadline; try again",
                deadline.as_secs()
            ),
        ),
    };
    secure(resp.headers_mut());
    resp
}

/// The security headers every answer carries (no sniffing, no framing, no referrer, and a
/// content policy that allows only the page's own files).
pub(crate) fn secure(h: &mut axum::http::HeaderMap) {
    for (k, v) in [
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        (
            "content-security-policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; frame-ancestors 'none'",
        ),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
}

/// 401: JSON for the API, a short page for people.
pub fn unauthorized(api: bool) -> Response {
    let mut r = if api {
        error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong access token: send `Authorization: Bearer TOKEN` (the token is in the store's http.token file)",
        )
    } else {
        (
            StatusCode::UNAUTHORIZED,
            axum::response::Html(super::assets::UNAUTHORIZED_HTML),
        )
            .into_response()
    };
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"novad\""),
    );
    r
}
