//! Access control: one random token per store, in `http.token` (mode 0600) in the store
//! directory. A request carries it as `Authorization: Bearer TOKEN` or as the cookie
//! `novad_token_PORT` (the port in the name keeps two servers on one host apart). The cookie is
//! set by `/login?code=CODE` — a one-time code printed at start, like Jupyter's link — or by
//! `/login?token=TOKEN`.
//!
//! Pushing batches (`POST /api/v1/batches`) takes a second token, `ingest.token` (also 256
//! random bits, mode 0600), as a bearer header only (no cookie: a page a browser visits must
//! not be able to push). Each token opens only its own part: the read token cannot push and
//! the ingest token cannot read.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rand::TryRngCore;

use super::HttpError;

/// The token file's name in the store directory.
pub const TOKEN_FILE: &str = "http.token";

/// The ingest token file's name in the store directory.
pub const INGEST_TOKEN_FILE: &str = "ingest.token";

/// Path of the (read) token file of a store.
pub fn token_path(store_dir: &Path) -> PathBuf {
    store_dir.join(TOKEN_FILE)
}

/// Path of the ingest token file of a store.
pub fn ingest_token_path(store_dir: &Path) -> PathBuf {
    store_dir.join(INGEST_TOKEN_FILE)
}

/// `n` random bytes from the operating system, as lowercase hex.
fn random_hex(n: usize) -> Result<String, String> {
    let mut buf = vec![0u8; n];
    rand::rngs::OsRng
        .try_fill_bytes(&mut buf)
        .map_err(|e| format!("no randomness from the operating system: {e}"))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// A token of the store: read from `store_dir/file` (e.g. [`TOKEN_FILE`]), or created there
/// (256 random bits, mode 0600) when missing. Refuses a token file that others can read or
/// that holds no usable token.
pub fn load_or_create_token(store_dir: &Path, file: &str) -> Result<String, HttpError> {
    let path = store_dir.join(file);
    let err = |msg: String| HttpError::Token {
        path: path.clone(),
        msg,
    };
    std::fs::create_dir_all(store_dir)
        .map_err(|e| err(format!("cannot create the directory: {e}")))?;
    let token = random_hex(32).map_err(err)?;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut f) => {
            f.write_all(format!("{token}\n").as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| err(format!("cannot write: {e}")))?;
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let md = std::fs::metadata(&path).map_err(|e| err(e.to_string()))?;
            let mode = md.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(err(format!(
                    "readable by other users (mode {mode:o}); run `chmod 600 {}`",
                    path.display()
                )));
            }
            let s = std::fs::read_to_string(&path).map_err(|e| err(e.to_string()))?;
            let t = s.trim();
            if t.len() < 32 || !t.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(err(
                    "not a token (32 or more letters and digits expected); delete the file to get a new one".into(),
                ));
            }
            Ok(t.to_string())
        }
        Err(e) => Err(err(format!("cannot create: {e}"))),
    }
}

/// Equality in time independent of where the inputs differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whose token a push carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushAccess {
    /// The ingest token, as a bearer header.
    Allowed,
    /// The read token (bearer header or cookie), which cannot push.
    ReadToken,
    /// No token, or a wrong one.
    Denied,
}

/// The server's credentials: the tokens and the one-time login code.
pub struct Auth {
    token: String,
    /// The token that pushes batches (`None`: nothing can push).
    ingest_token: Option<String>,
    cookie_name: String,
    login_code: Mutex<Option<String>>,
    /// When the login code stops working (used or not).
    code_expires: std::time::Instant,
}

/// How long the one-time login code printed at start works.
pub const LOGIN_CODE_TTL: std::time::Duration = std::time::Duration::from_secs(15 * 60);

impl Auth {
    pub fn new(token: String, port: u16) -> Auth {
        // a fresh code per start; if the OS has no randomness the link is simply unavailable
        let code = random_hex(16).ok();
        Auth {
            token,
            ingest_token: None,
            cookie_name: format!("novad_token_{port}"),
            login_code: Mutex::new(code),
            code_expires: std::time::Instant::now() + LOGIN_CODE_TTL,
        }
    }

    /// These credentials with `token` as the ingest token.
    pub fn with_ingest_token(mut self, token: String) -> Auth {
        self.ingest_token = Some(token);
        self
    }

    /// The one-time login code (empty once used or when none could be made).
    pub fn login_code(&self) -> String {
        self.login_code
            .lock()
            .map(|c| c.clone().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Spend the one-time code: true (once) when `code` is it and it has not expired
    /// ([`LOGIN_CODE_TTL`] after start).
    pub fn redeem(&self, code: &str) -> bool {
        self.redeem_at(code, std::time::Instant::now())
    }

    fn redeem_at(&self, code: &str, now: std::time::Instant) -> bool {
        let Ok(mut slot) = self.login_code.lock() else {
            return false;
        };
        if now >= self.code_expires {
            *slot = None;
            return false;
        }
        match slot.as_deref() {
            Some(c) if constant_time_eq(c.as_bytes(), code.as_bytes()) => {
                *slot = None;
                true
            }
            _ => false,
        }
    }

    pub fn token_matches(&self, t: &str) -> bool {
        constant_time_eq(self.token.as_bytes(), t.as_bytes())
    }

    /// The bearer tokens of `headers`.
    fn bearers(headers: &axum::http::HeaderMap) -> impl Iterator<Item = &str> {
        headers
            .get_all(axum::http::header::AUTHORIZATION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|v| v.trim_start().split_once(' '))
            // the scheme name is case-insensitive (RFC 9110 §11.1)
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
    }

    /// Whether a push's headers carry the ingest token as a bearer header (the cookie never
    /// pushes), the read token instead, or neither.
    pub fn push_access(&self, headers: &axum::http::HeaderMap) -> PushAccess {
        let ingest = self.ingest_token.as_deref().is_some_and(|want| {
            Self::bearers(headers).any(|t| constant_time_eq(want.as_bytes(), t.as_bytes()))
        });
        if ingest {
            PushAccess::Allowed
        } else if self.authorized(headers) {
            PushAccess::ReadToken
        } else {
            PushAccess::Denied
        }
    }

    /// Whether the request headers carry the read token (bearer header or cookie).
    pub fn authorized(&self, headers: &axum::http::HeaderMap) -> bool {
        let bearer = Self::bearers(headers).any(|t| self.token_matches(t));
        bearer
            || headers
                .get_all(axum::http::header::COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(';'))
                .filter_map(|kv| kv.trim().split_once('='))
                .any(|(k, v)| k == self.cookie_name && self.token_matches(v))
    }

    /// The `Set-Cookie` value that grants access to this server for the browser session.
    pub fn cookie(&self) -> String {
        format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            self.cookie_name, self.token
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    #[test]
    fn token_file_is_private_stable_and_checked() {
        let d = tempfile::tempdir().unwrap();
        let t1 = load_or_create_token(d.path(), TOKEN_FILE).unwrap();
        let mode = std::fs::metadata(token_path(d.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(t1.len(), 64);
        assert_eq!(
            load_or_create_token(d.path(), TOKEN_FILE).unwrap(),
            t1,
            "read back"
        );
        let other = tempfile::tempdir().unwrap();
        assert_ne!(
            load_or_create_token(other.path(), TOKEN_FILE).unwrap(),
            t1,
            "random"
        );
        std::fs::set_permissions(token_path(d.path()), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let e = load_or_create_token(d.path(), TOKEN_FILE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("chmod 600"), "{e}");
        // the ingest token is another file with another token
        let i = load_or_create_token(other.path(), INGEST_TOKEN_FILE).unwrap();
        let mode = std::fs::metadata(ingest_token_path(other.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(i.len(), 64);
        assert_ne!(i, load_or_create_token(other.path(), TOKEN_FILE).unwrap());
    }

    #[test]
    fn only_the_ingest_token_as_a_bearer_header_pushes() {
        let a = Auth::new("r".repeat(64), 9000).with_ingest_token("i".repeat(64));
        let bearer = |t: &str| {
            let mut h = HeaderMap::new();
            let v = format!("Bearer {t}");
            h.insert("authorization", HeaderValue::from_str(&v).unwrap());
            h
        };
        assert_eq!(a.push_access(&bearer(&"i".repeat(64))), PushAccess::Allowed);
        assert_eq!(
            a.push_access(&bearer(&"r".repeat(64))),
            PushAccess::ReadToken
        );
        assert_eq!(a.push_access(&bearer("wrong")), PushAccess::Denied);
        assert_eq!(a.push_access(&HeaderMap::new()), PushAccess::Denied);
        assert!(
            !a.authorized(&bearer(&"i".repeat(64))),
            "the ingest token cannot read"
        );
        // the ingest token as a cookie does not push
        let mut c = HeaderMap::new();
        let v = format!("novad_token_9000={}", "i".repeat(64));
        c.insert("cookie", HeaderValue::from_str(&v).unwrap());
        assert_eq!(a.push_access(&c), PushAccess::Denied);
        // without an ingest token nothing pushes
        let b = Auth::new("r".repeat(64), 9000);
        assert_eq!(b.push_access(&bearer(&"i".repeat(64))), PushAccess::Denied);
    }

    #[test]
    fn bearer_and_cookie_accepted_others_refused_code_used_once() {
        let a = Auth::new("a".repeat(64), 9000);
        let mut h = HeaderMap::new();
        assert!(!a.authorized(&h));
        h.insert("authorization", HeaderValue::from_static("Bearer wrong"));
        assert!(!a.authorized(&h));
        let good = format!("Bearer {}", "a".repeat(64));
        h.insert("authorization", HeaderValue::from_str(&good).unwrap());
        assert!(a.authorized(&h));
        let mut c = HeaderMap::new();
        let cookie = a.cookie();
        let pair = cookie.split(';').next().unwrap();
        c.insert(
            "cookie",
            HeaderValue::from_str(&format!("x=1; {pair}")).unwrap(),
        );
        assert!(a.authorized(&c));
        // the same token under another server's cookie name is not this server's cookie
        let other = pair.replace("9000", "9001");
        c.insert("cookie", HeaderValue::from_str(&other).unwrap());
        assert!(!a.authorized(&c));
        let code = a.login_code();
        assert_eq!(code.len(), 32);
        assert!(!a.redeem("nope"));
        assert!(a.redeem(&code));
        assert!(!a.redeem(&code), "one-time");
        assert_eq!(a.login_code(), "");
    }

    #[test]
    fn the_scheme_is_case_insensitive_and_the_token_is_not() {
        let a = Auth::new("aB".repeat(32), 9000);
        for scheme in ["bearer", "BEARER", "Bearer", "bEaReR"] {
            let mut h = HeaderMap::new();
            let v = format!("{scheme} {}", "aB".repeat(32));
            h.insert("authorization", HeaderValue::from_str(&v).unwrap());
            assert!(a.authorized(&h), "{scheme}");
        }
        let mut h = HeaderMap::new();
        let v = format!("Bearer {}", "ab".repeat(32));
        h.insert("authorization", HeaderValue::from_str(&v).unwrap());
        assert!(!a.authorized(&h));
        let v = format!("Basic {}", "aB".repeat(32));
        h.insert("authorization", HeaderValue::from_str(&v).unwrap());
        assert!(!a.authorized(&h));
    }

    #[test]
    fn the_login_code_expires_unused() {
        let a = Auth::new("a".repeat(64), 9000);
        let code = a.login_code();
        let late = std::time::Instant::now() + LOGIN_CODE_TTL;
        assert!(!a.redeem_at(&code, late));
        assert!(!a.redeem(&code), "an expired code stays spent");
        let b = Auth::new("a".repeat(64), 9000);
        let code = b.login_code();
        let early = std::time::Instant::now() + LOGIN_CODE_TTL / 2;
        assert!(b.redeem_at(&code, early));
    }
}
