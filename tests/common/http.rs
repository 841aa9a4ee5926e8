//! Talking HTTP to the real `novad`: start a daemon with the HTTP server on a free port, find
//! its address and token, make requests (ureq, or raw bytes for malformed ones).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use super::harness::{files_in, wait_for, Daemon, Dirs};

/// A daemon serving HTTP, with what a client needs.
pub struct Served {
    pub daemon: Daemon,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// The one-time sign-in link the daemon logged.
    pub login: String,
    pub token: String,
}

/// The sign-in link logged by the daemon whose log is at `log` (waits ≤ 60 s for it).
pub fn login_link(log: &Path) -> String {
    let mut link = String::new();
    wait_for(60, "the dashboard link in the log", || {
        let s = std::fs::read_to_string(log).unwrap_or_default();
        match s.split_whitespace().find(|w| w.contains("/login?code=")) {
            Some(w) => {
                link = w.trim_start_matches("url=").to_string();
                true
            }
            None => false,
        }
    });
    link
}

/// Start `novad run` with `--http 127.0.0.1:0` (plus `extra`).
pub fn start(d: &Dirs, extra: &[&str]) -> Served {
    let mut args = vec!["--http", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let daemon = Daemon::start(d, &args);
    let login = login_link(&d.log());
    let base = login.split("/login").next().unwrap().to_string();
    let token = std::fs::read_to_string(d.store().join("http.token"))
        .unwrap()
        .trim()
        .to_string();
    Served {
        daemon,
        base,
        login,
        token,
    }
}

/// Drop the example batch `path` into the inbox and wait until it is processed.
pub fn ingest_example(d: &Dirs, path: &Path) {
    let before = files_in(&d.processed()).len();
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    d.drop_file(&name, &std::fs::read(path).unwrap());
    wait_for(120, "the batch processed", || {
        files_in(&d.processed()).len() > before
    });
}

/// An agent that returns 4xx/5xx as responses, not errors.
pub fn agent() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(30)))
            .build(),
    )
}

/// GET `base + path` with optional bearer `token` and extra headers; (status, body).
pub fn get(base: &str, path: &str, token: Option<&str>, headers: &[(&str, &str)]) -> (u16, String) {
    let mut r = agent().get(format!("{base}{path}"));
    if let Some(t) = token {
        r = r.header("Authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let mut resp = r.call().expect("HTTP request");
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().unwrap_or_default();
    (status, body)
}

/// GET `base + path` with the bearer `token` and extra headers: (status, the response's
/// headers as lower-case name and value, the body's bytes as sent — a gzip answer stays
/// compressed).
pub fn get_raw(
    base: &str,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut r = agent()
        .get(format!("{base}{path}"))
        .header("Authorization", format!("Bearer {token}"));
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let mut resp = r.call().expect("HTTP request");
    let status = resp.status().as_u16();
    let heads = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    (status, heads, resp.body_mut().read_to_vec().expect("body"))
}

/// The value of header `name` (lower case) in `heads`.
pub fn header<'a>(heads: &'a [(String, String)], name: &str) -> Option<&'a str> {
    heads
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// GET `base + path` with the bearer `token` and extra headers; (status, `ETag`, body).
pub fn get_tagged(
    base: &str,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, String) {
    let (status, heads, body) = get_raw(base, path, token, headers);
    let etag = header(&heads, "etag").map(str::to_string);
    (status, etag, String::from_utf8(body).unwrap_or_default())
}

/// GET a JSON API path with the token; panics unless 200.
pub fn api(s: &Served, path: &str) -> serde_json::Value {
    let (st, body) = get(&s.base, path, Some(&s.token), &[]);
    assert_eq!(st, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Send `request` bytes as they are; returns the status code (0 when the server closed the
/// connection without answering) and the raw response.
pub fn raw(base: &str, request: &[u8]) -> (u16, String) {
    let addr = base.trim_start_matches("http://");
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = c.write_all(request);
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let s = String::from_utf8_lossy(&out).into_owned();
    let status = s
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, s)
}
