//! `GET /api/v1/events`: a server-sent-events stream with one message per durable timestep
//! (its summary and its new events), named by the timestep (`id:`), so a client that
//! reconnects with `Last-Event-ID: T` (as browsers' `EventSource` do) gets every timestep
//! after T from the store, then the live ones. Without it (and without `?after=T`) the stream
//! starts with the next timestep committed.
//!
//! A stream holds its connection's slot and one of [`MAX_STREAMS`]; its store reads run on the
//! store-read threads like every other read; a comment line every [`KEEP_ALIVE`] keeps proxies
//! from closing an idle stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::guard::error;
use super::AppState;
use crate::alerts::message::{event_json, new_events};
use crate::show::fmt_time;
use crate::store::schema::{u64_key, StepSummary, SUMMARIES};

/// Streams open at once; one more is refused with 503.
pub const MAX_STREAMS: usize = 64;
/// Interval of the keep-alive comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The message of timestep `t` as the stream sends it (`None` when the store does not hold
/// it).
pub fn timestep_event(db: &sled::Db, t: u64) -> Result<Option<Value>, String> {
    let (record, topics) = crate::query::timestep_detail(db, t)?;
    let Some(r) = record else { return Ok(None) };
    let summary: Option<StepSummary> = db
        .open_tree(SUMMARIES)
        .and_then(|s| s.get(u64_key(t)))
        .map_err(|e| e.to_string())?
        .and_then(|v| postcard::from_bytes(&v).ok());
    let s = summary.unwrap_or_default();
    Ok(Some(json!({
        "timestep": t,
        "file": r.file,
        "committed_at": fmt_time(r.committed_at),
        "documents": s.docs,
        "novel": s.novel,
        "time_range": {
            "first": s.first_time.map(fmt_time),
            "last": s.last_time.map(fmt_time),
        },
        "scores": s.scores,
        "topics": topics.len(),
        "events": new_events(topics).iter().map(event_json).collect::<Vec<_>>(),
    })))
}

/// Where a stream starts: after `Last-Event-ID` or `?after=`, else at the next commit; `Err`
/// says what is wrong with the request.
fn start_after(
    headers: &HeaderMap,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Option<u64>, String> {
    let bad = |what: &str, v: &str| {
        format!(
            "{what} `{}` is not a timestep number",
            crate::show::shown(v)
        )
    };
    let Query(q) = q.map_err(|e| e.body_text())?;
    if let Some((k, _)) = q.iter().find(|(k, _)| k != "after") {
        return Err(format!(
            "unknown parameter `{}` (the stream takes `after`)",
            crate::show::shown(k)
        ));
    }
    if let Some(v) = headers.get("last-event-id") {
        let s = v.to_str().unwrap_or("");
        return s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| bad("Last-Event-ID", s));
    }
    match q.iter().find(|(k, _)| k == "after") {
        Some((_, v)) => v.trim().parse().map(Some).map_err(|_| bad("after", v)),
        None => Ok(None),
    }
}

/// What a stream carries along: its next timestep, the durable count's receiver, the state,
/// and its place among the open streams.
struct Cursor {
    next: u64,
    durable: tokio::sync::watch::Receiver<u64>,
    state: Arc<AppState>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// The next message of the stream, waiting for a commit when it is at the newest (`None`
/// ends the stream: the daemon is stopping, or the store could not be read).
async fn next_event(mut c: Cursor) -> Option<(Result<Event, Infallible>, Cursor)> {
    loop {
        let durable = *c.durable.borrow_and_update();
        if c.next < durable {
            let t = c.next;
            c.next += 1;
            let st = Arc::clone(&c.state);
            let read = {
                let _q = st.queries.acquire().await.ok()?;
                let db = st.db.clone();
                tokio::task::spawn_blocking(move || timestep_event(&db, t)).await
            };
            match read {
                Ok(Ok(Some(v))) => {
                    let e = Event::default()
                        .id(t.to_string())
                        .event("timestep")
                        .data(v.to_string());
                    return Some((Ok(e), c));
                }
                Ok(Ok(None)) => continue,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, timestep = t, "event stream: store read failed");
                    return None;
                }
                Err(_) => return None,
            }
        }
        c.durable.changed().await.ok()?;
    }
}

pub(super) async fn events(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let after = match start_after(&headers, q) {
        Ok(a) => a,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let Ok(permit) = Arc::clone(&state.streams).try_acquire_owned() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_STREAMS} event streams are open; try again later"),
        );
    };
    let durable = state.durable.subscribe();
    let now = *durable.borrow();
    let cursor = Cursor {
        next: after.map_or(now, |a| a.saturating_add(1)),
        durable,
        state,
        _permit: permit,
    };
    let stream = futures_util::stream::unfold(cursor, next_event);
    let mut r = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    r.headers_mut().insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    r
}
