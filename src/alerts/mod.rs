//! Webhooks: after a committed timestep with novel documents or new events, one signed JSON
//! message to every receiver that wants it ([`message`]), delivered by a thread per receiver
//! ([`deliver`]).
//!
//! Durability invariant: a timestep's messages are records of the store's `outbox` tree,
//! written in the timestep's own transaction ([`Webhooks::outbox`]), so a timestep is never
//! committed without its messages nor a message written for a timestep that is not. A message
//! is sent only once its timestep is durable, and removed (then flushed) only after its
//! receiver answered 2xx. A kill at any moment therefore loses no message; a kill between the
//! receiver's 2xx and the flush of the removal sends it once more, with the same
//! `Idempotency-Key`, which the receiver uses to drop the repeat.

pub mod backlog;
pub mod deliver;
pub mod message;
pub mod sign;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

pub use message::Filter;

use crate::store::schema::{outbox_key, OutboxRecord};
use crate::store::{OutboxFn, TimestepWrite};

/// Delivery gives up on a message (parks it) after this long by default.
pub const GIVE_UP_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Why the webhook configuration cannot be used.
#[derive(Debug, Error)]
pub enum AlertError {
    #[error("webhook URL `{url}`: {why}")]
    Url { url: String, why: String },
    #[error(transparent)]
    Secret(#[from] crate::secret::SecretError),
    #[error("webhook configuration {path}: {msg}")]
    Config { path: String, msg: String },
    #[error("webhook {url}: --notify-min-score must be a finite number, not {value}")]
    MinScore { url: String, value: f64 },
}

/// One receiver of messages.
#[derive(Clone)]
pub struct Receiver {
    /// `http://` or `https://` URL messages are POSTed to.
    pub url: String,
    /// The HMAC-SHA256 key of the signature header; `None`: messages go unsigned.
    pub secret: Option<Vec<u8>>,
    pub filter: Filter,
    /// A message still undelivered this long after its commit is parked after its next failed
    /// attempt.
    pub give_up_after: Duration,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("url", &self.url)
            .field("signed", &self.secret.is_some())
            .field("filter", &self.filter)
            .field("give_up_after", &self.give_up_after)
            .finish()
    }
}

/// Fewest bytes of a signing secret.
pub const MIN_SECRET_BYTES: usize = 16;

const SECRET_HINT: &str = "e.g. `head -c 32 /dev/urandom | base64 > FILE`";

/// How logs show a receiver: scheme, host and port only, then the receiver's id (hex of
/// [`crate::store::schema::receiver_id`]) — chat webhooks carry their secret in the path.
pub fn shown_url(url: &str) -> String {
    let id: String = crate::store::schema::receiver_id(url)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    match url.parse::<axum::http::Uri>() {
        Ok(u) => match (u.scheme_str(), u.authority()) {
            (Some(s), Some(a)) => format!("{s}://{}/… ({id})", a.host()),
            _ => format!("({id})"),
        },
        Err(_) => format!("({id})"),
    }
}

impl Receiver {
    /// A receiver at `url` (checked: `http` or `https`, with a host), signing with the secret
    /// in `secret_file` (mode 0600, at least [`MIN_SECRET_BYTES`] bytes, a trailing line
    /// break dropped) when given.
    pub fn new(
        url: &str,
        secret_file: Option<&Path>,
        filter: Filter,
        give_up_after: Duration,
    ) -> Result<Receiver, AlertError> {
        check_url(url)?;
        if let Some(m) = filter.min_score.filter(|m| !m.is_finite()) {
            return Err(AlertError::MinScore {
                url: url.into(),
                value: m,
            });
        }
        let secret = match secret_file {
            None => None,
            Some(p) => {
                let mut s =
                    crate::secret::read_private(p, "webhook secret", 0, 64 * 1024, SECRET_HINT)?;
                while s.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    s.pop();
                }
                // the length that counts is the secret's, without its line break
                if s.len() < MIN_SECRET_BYTES {
                    return Err(crate::secret::SecretError::Short {
                        what: "webhook secret",
                        path: p.display().to_string(),
                        len: s.len(),
                        min: MIN_SECRET_BYTES,
                        hint: SECRET_HINT,
                    }
                    .into());
                }
                Some(s)
            }
        };
        Ok(Receiver {
            url: url.into(),
            secret,
            filter,
            give_up_after,
        })
    }
}

/// Refuse what is not an absolute `http`/`https` URL with a host.
fn check_url(url: &str) -> Result<(), AlertError> {
    let bad = |why: &str| AlertError::Url {
        url: url.into(),
        why: why.into(),
    };
    let uri: axum::http::Uri = url.parse().map_err(|e| bad(&format!("{e}")))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(bad("only http:// and https:// URLs can receive webhooks")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(bad(
            "credentials in the URL are refused (they would show in logs); sign with --notify-secret",
        ));
    }
    Ok(())
}

/// Every receiver of the daemon.
#[derive(Debug, Clone, Default)]
pub struct Webhooks {
    pub receivers: Vec<Receiver>,
}

/// One `[[webhook]]` of a configuration file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookEntry {
    url: String,
    secret_file: Option<PathBuf>,
    #[serde(default)]
    events_only: bool,
    min_score: Option<f64>,
    give_up_after_secs: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookFile {
    #[serde(default)]
    webhook: Vec<WebhookEntry>,
}

impl Webhooks {
    /// The receivers of a configuration file (TOML, `[[webhook]]` tables with `url` and
    /// optional `secret_file`, `events_only`, `min_score`, `give_up_after_secs`; unknown keys
    /// are refused). A relative `secret_file` is relative to the file's folder.
    pub fn from_file(path: &Path) -> Result<Vec<Receiver>, AlertError> {
        let err = |msg: String| AlertError::Config {
            path: path.display().to_string(),
            msg,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let f: WebhookFile = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        f.webhook
            .into_iter()
            .map(|w| {
                let secret = w.secret_file.map(|s| base.join(s));
                Receiver::new(
                    &w.url,
                    secret.as_deref(),
                    Filter {
                        events_only: w.events_only,
                        min_score: w.min_score,
                    },
                    w.give_up_after_secs
                        .map_or(GIVE_UP_AFTER, Duration::from_secs),
                )
            })
            .collect()
    }

    /// The outbox records of a timestep for every receiver that wants its message, keyed by
    /// [`outbox_key`]. Deterministic.
    pub fn records(&self, w: &TimestepWrite) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for r in &self.receivers {
            let Some(msg) = message::build(w, &r.filter) else {
                continue;
            };
            let rec = OutboxRecord {
                id: message::message_id(w.record.timestep, &w.record.hash),
                url: r.url.clone(),
                timestep: w.record.timestep,
                created_at: w.record.committed_at,
                body: serde_json::to_vec(&msg).expect("a JSON value serialises"),
                attempts: 0,
                next_at: 0,
                last_error: None,
                parked: false,
            };
            out.push((
                outbox_key(&r.url, rec.timestep).to_vec(),
                postcard::to_stdvec(&rec).expect("a record serialises"),
            ));
        }
        out
    }

    /// [`Webhooks::records`] as the store's outbox function ([`crate::store::Store::set_outbox`]).
    pub fn outbox(&self) -> OutboxFn {
        let me = self.clone();
        Box::new(move |w| me.records(w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn urls_must_be_http_with_a_host() {
        for bad in [
            "ftp://x/y",
            "/relative",
            "http://",
            "not a url",
            "mailto:a@b",
            "https://user:pw@h/x",
        ] {
            let e = Receiver::new(bad, None, Filter::default(), GIVE_UP_AFTER).unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
        for good in ["http://127.0.0.1:9/hook", "https://hooks.example.com/x?y=1"] {
            Receiver::new(good, None, Filter::default(), GIVE_UP_AFTER).unwrap();
        }
    }

    /// A secret file must be private and long enough; its trailing line break is not part of
    /// the secret.
    #[test]
    fn secrets_are_private_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s");
        std::fs::write(&p, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let url = "http://127.0.0.1:9/";
        let e = Receiver::new(url, Some(&p), Filter::default(), GIVE_UP_AFTER).unwrap_err();
        assert!(e.to_string().contains("0644"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let r = Receiver::new(url, Some(&p), Filter::default(), GIVE_UP_AFTER).unwrap();
        assert_eq!(r.secret.as_deref(), Some(&b"0123456789abcdef0123"[..]));
        std::fs::write(&p, "short").unwrap();
        let e = Receiver::new(url, Some(&p), Filter::default(), GIVE_UP_AFTER).unwrap_err();
        assert!(e.to_string().contains("at least 16"), "{e}");
        // 15 bytes and a line break are 15 bytes of secret
        std::fs::write(&p, "0123456789abcde\n").unwrap();
        let e = Receiver::new(url, Some(&p), Filter::default(), GIVE_UP_AFTER).unwrap_err();
        assert!(e.to_string().contains("holds 15 bytes"), "{e}");
    }

    /// Logs show a receiver's host and id, never its path (where chat webhooks keep a secret).
    #[test]
    fn receivers_are_logged_without_their_path() {
        let url = "https://hooks.example.com:8443/services/T0/B0/SECRET";
        let shown = shown_url(url);
        assert!(
            shown.starts_with("https://hooks.example.com/… ("),
            "{shown}"
        );
        assert!(
            !shown.contains("SECRET") && !shown.contains("services"),
            "{shown}"
        );
        assert_ne!(
            shown,
            shown_url("https://hooks.example.com/other"),
            "ids tell them apart"
        );
    }

    /// A configuration file gives one receiver per table, refuses unknown keys by name and
    /// takes a relative secret file from its own folder.
    #[test]
    fn configuration_files_list_receivers() {
        let d = tempfile::tempdir().unwrap();
        let s = d.path().join("hook.secret");
        std::fs::write(&s, "0123456789abcdef0123").unwrap();
        std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o600)).unwrap();
        let f = d.path().join("hooks.toml");
        std::fs::write(
            &f,
            "[[webhook]]\nurl = \"http://127.0.0.1:9/a\"\nsecret_file = \"hook.secret\"\n\
             events_only = true\n\n[[webhook]]\nurl = \"http://127.0.0.1:9/b\"\nmin_score = 0.5\n\
             give_up_after_secs = 60\n",
        )
        .unwrap();
        let r = Webhooks::from_file(&f).unwrap();
        assert_eq!(r.len(), 2);
        assert!(r[0].secret.is_some() && r[0].filter.events_only);
        assert_eq!(r[1].filter.min_score, Some(0.5));
        assert_eq!(r[1].give_up_after, Duration::from_secs(60));
        std::fs::write(
            &f,
            "[[webhook]]\nurl = \"http://127.0.0.1:9/a\"\nevents = true\n",
        )
        .unwrap();
        let e = Webhooks::from_file(&f).unwrap_err().to_string();
        assert!(e.contains("events") && e.contains("hooks.toml"), "{e}");
    }
}
