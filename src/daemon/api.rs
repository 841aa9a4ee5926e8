//! The daemon's read-only local API: a Unix socket `novad.sock` in the store directory,
//! created with mode 0600 (only the owner can connect). sled admits one process per store, so
//! `novad verdicts` / `status` / `topics` talk to the running daemon through it.
//!
//! Protocol: the client sends one JSON line ([`Request`]); the server answers with JSON lines
//! (verdict records, or one status object) and closes the connection. Errors are a single line
//! `{"error": "..."}`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::query::{self, Status, VerdictFilter};
use crate::store::schema::VerdictRecord;

/// Most connections served at once; more are answered with an error.
const MAX_CONNECTIONS: usize = 16;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    Verdicts {
        filter: VerdictFilter,
    },
    Status {
        recent: usize,
    },
    Topics {
        since: Option<i64>,
        until: Option<i64>,
    },
}

pub fn socket_path(store_dir: &Path) -> PathBuf {
    store_dir.join("novad.sock")
}

/// Bind the socket (replacing a stale one) and serve requests on a background thread until
/// the process exits.
pub fn serve(store_dir: &Path, db: sled::Db) -> std::io::Result<PathBuf> {
    let path = socket_path(store_dir);
    if path.exists() {
        // A live daemon would hold the store lock, so a socket file here is stale.
        std::fs::remove_file(&path)?;
    }
    let listener = UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let active = Arc::new(AtomicUsize::new(0));
    let disk_dir = store_dir.to_path_buf();
    std::thread::Builder::new()
        .name("novad-api".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                if active.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                    let mut c = conn;
                    let _ = writeln!(
                        c,
                        "{}",
                        serde_json::json!({"error": "too many connections"})
                    );
                    continue;
                }
                active.fetch_add(1, Ordering::SeqCst);
                let db = db.clone();
                let active = Arc::clone(&active);
                let dir = disk_dir.clone();
                let _ = std::thread::Builder::new()
                    .name("novad-api-conn".into())
                    .spawn(move || {
                        if let Err(e) = handle(conn, &db, &dir) {
                            tracing::debug!(error = %e, "api connection ended with an error");
                        }
                        active.fetch_sub(1, Ordering::SeqCst);
                    });
            }
        })?;
    Ok(path)
}

/// A store read under [`crate::store::guard::watched`] (a sled panic becomes an error line;
/// a read that stalls stops the daemon as damaged).
fn guarded<T>(dir: &Path, what: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    crate::store::guard::watched(dir, what, f).unwrap_or_else(|e| Err(e.to_string()))
}

fn handle(conn: UnixStream, db: &sled::Db, dir: &Path) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut out = std::io::BufWriter::new(conn);
    let req: Request = match serde_json::from_str(&line) {
        Ok(r) => r,
        Err(e) => {
            writeln!(
                out,
                "{}",
                serde_json::json!({"error": format!("bad request: {e}")})
            )?;
            return out.flush();
        }
    };
    match req {
        Request::Verdicts { filter } => {
            match guarded(dir, "reading verdicts", || query::verdicts(db, &filter)) {
                Ok(vs) => {
                    for v in vs {
                        serde_json::to_writer(&mut out, &v)?;
                        out.write_all(b"\n")?;
                    }
                }
                Err(e) => writeln!(out, "{}", serde_json::json!({ "error": e }))?,
            }
        }
        Request::Status { recent } => {
            match guarded(dir, "reading the status", || query::status(db, recent)) {
                Ok(mut s) => {
                    s.daemon_pid = Some(std::process::id());
                    s.disk_bytes = crate::store::dir_size(dir);
                    serde_json::to_writer(&mut out, &s)?;
                    out.write_all(b"\n")?;
                }
                Err(e) => writeln!(out, "{}", serde_json::json!({ "error": e }))?,
            }
        }
        Request::Topics { since, until } => match guarded(dir, "reading topics", || {
            crate::topics::query(db, since, until)
        }) {
            Ok(ts) => {
                for t in ts {
                    serde_json::to_writer(&mut out, &t)?;
                    out.write_all(b"\n")?;
                }
            }
            Err(e) => writeln!(out, "{}", serde_json::json!({ "error": e }))?,
        },
    }
    out.flush()
}

/// Send a request to the daemon of `store_dir`. `Ok(None)` when no daemon answers (no socket,
/// or nobody listening); otherwise the response lines.
pub fn request(store_dir: &Path, req: &Request) -> Result<Option<Vec<String>>, String> {
    let path = socket_path(store_dir);
    let Ok(mut conn) = UnixStream::connect(&path) else {
        return Ok(None);
    };
    conn.set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(|e| e.to_string())?;
    let mut line = serde_json::to_string(req).map_err(|e| e.to_string())?;
    line.push('\n');
    conn.write_all(line.as_bytes())
        .map_err(|e| format!("daemon API {}: {e}", path.display()))?;
    let mut lines = Vec::new();
    for l in BufReader::new(conn).lines() {
        let l = l.map_err(|e| format!("daemon API {}: {e}", path.display()))?;
        if l.starts_with("{\"error\"") {
            let v: serde_json::Value = serde_json::from_str(&l).unwrap_or_default();
            return Err(format!("daemon: {}", v["error"].as_str().unwrap_or(&l)));
        }
        lines.push(l);
    }
    Ok(Some(lines))
}

/// Verdicts through the daemon, if it runs.
pub fn remote_verdicts(
    store_dir: &Path,
    filter: &VerdictFilter,
) -> Result<Option<Vec<VerdictRecord>>, String> {
    let Some(lines) = request(
        store_dir,
        &Request::Verdicts {
            filter: filter.clone(),
        },
    )?
    else {
        return Ok(None);
    };
    lines
        .iter()
        .map(|l| serde_json::from_str(l).map_err(|e| format!("bad response: {e}")))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Status through the daemon, if it runs.
pub fn remote_status(store_dir: &Path, recent: usize) -> Result<Option<Status>, String> {
    let Some(lines) = request(store_dir, &Request::Status { recent })? else {
        return Ok(None);
    };
    let l = lines.first().ok_or("empty status response")?;
    serde_json::from_str(l)
        .map(Some)
        .map_err(|e| format!("bad response: {e}"))
}
