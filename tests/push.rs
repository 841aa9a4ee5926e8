//! Pushing batches over HTTP (`POST /api/v1/batches`) into the real daemon's inbox: the
//! ingest token and only it, the checks made before anything is written (name, content,
//! size, a name already there), the daemon processing what was pushed, idempotency keys
//! across a restart, and `novad serve` refusing pushes.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "common/http.rs"]
#[allow(dead_code)]
mod http;

use harness::*;
use http::*;
use serde_json::Value;
use std::path::Path;

/// The store's ingest token.
fn ingest_token(d: &Dirs) -> String {
    std::fs::read_to_string(d.store().join("ingest.token"))
        .unwrap()
        .trim()
        .to_string()
}

/// POST `body` to `/api/v1/batches{query}` with an optional bearer `token` and extra
/// headers: (status, body).
fn post(
    base: &str,
    query: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut r = agent().post(format!("{base}/api/v1/batches{query}"));
    if let Some(t) = token {
        r = r.header("Authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let mut resp = r.send(body).expect("HTTP request");
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().unwrap_or_default();
    (status, body)
}

/// Every entry of the inbox folder itself (dotfiles and temporary files included, the
/// `processed` and `rejected` folders not).
fn inbox_entries(d: &Dirs) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d.inbox())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "processed" && n != "rejected")
        .collect();
    v.sort();
    v
}

fn status(base: &str, token: &str) -> Value {
    let (st, body) = get(base, "/api/v1/status", Some(token), &[]);
    assert_eq!(st, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn timesteps(base: &str, token: &str) -> usize {
    let (st, body) = get(base, "/api/v1/timesteps", Some(token), &[]);
    assert_eq!(st, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["items"].as_array().unwrap().len()
}

/// The base URL of the newest sign-in link in `log` past byte `from` (a restarted daemon
/// appends its own).
fn base_after(log: &Path, from: usize) -> String {
    let mut base = String::new();
    wait_for(60, "a new dashboard link in the log", || {
        let s = std::fs::read_to_string(log).unwrap_or_default();
        let Some(tail) = s.get(from..) else {
            return false;
        };
        match tail.split_whitespace().find(|w| w.contains("/login?code=")) {
            Some(w) => {
                let link = w.trim_start_matches("url=");
                base = link.split("/login").next().unwrap().to_string();
                true
            }
            None => false,
        }
    });
    base
}

#[test]
fn a_pushed_batch_is_processed_and_only_the_ingest_token_pushes() {
    let d = Dirs::new();
    let s = start(&d, &[]);
    let ingest = ingest_token(&d);
    assert_ne!(ingest, s.token);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(d.store().join("ingest.token"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let batch = jsonl_batch(0, 20, "2024-03-01", "push");

    // the read token, no token, a wrong token: refused, nothing written
    let (st, body) = post(
        &s.base,
        "?name=a.jsonl",
        Some(&s.token),
        &[],
        batch.as_bytes(),
    );
    assert_eq!(st, 403, "{body}");
    assert!(
        body.contains("the read token cannot ingest; use ingest.token"),
        "{body}"
    );
    let (st, body) = post(&s.base, "?name=a.jsonl", None, &[], batch.as_bytes());
    assert_eq!(st, 401, "{body}");
    let (st, _) = post(
        &s.base,
        "?name=a.jsonl",
        Some("0123"),
        &[],
        batch.as_bytes(),
    );
    assert_eq!(st, 401);
    // the ingest token as the access cookie does not push (no cookie for a push)
    let cookie = format!(
        "novad_token_{}={}",
        s.base.rsplit(':').next().unwrap(),
        ingest
    );
    let (st, _) = post(
        &s.base,
        "?name=a.jsonl",
        None,
        &[("Cookie", &cookie)],
        batch.as_bytes(),
    );
    assert_eq!(st, 401, "the ingest token as a cookie");
    assert!(inbox_entries(&d).is_empty(), "{:?}", inbox_entries(&d));
    // the ingest token does not open the read API
    let (st, _) = get(&s.base, "/api/v1/status", Some(&ingest), &[]);
    assert_eq!(st, 401);
    // POST elsewhere stays 405
    let (st, heads, _) = {
        let mut resp = agent()
            .post(format!("{}/api/v1/status", s.base))
            .header("Authorization", format!("Bearer {}", s.token))
            .send(&b""[..])
            .unwrap();
        let heads: Vec<(String, String)> = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        (
            resp.status().as_u16(),
            heads,
            resp.body_mut().read_to_string(),
        )
    };
    assert_eq!(st, 405);
    assert_eq!(header(&heads, "allow"), Some("GET, HEAD"));

    // bad names: 400, nothing written
    let long = format!("?name={}.txt", "a".repeat(200));
    for q in [
        "",
        "?name=",
        "?name=..%2Fa.jsonl",
        "?name=sub%2Fa.jsonl",
        "?name=.a.jsonl",
        "?name=a.jsonl.tmp",
        "?name=a.jsonl.part",
        "?name=a.csv",
        long.as_str(),
        "?name=a.jsonl&other=1",
    ] {
        let (st, body) = post(&s.base, q, Some(&ingest), &[], batch.as_bytes());
        assert_eq!(st, 400, "{q}: {body}");
        let e: Value = serde_json::from_str(&body).unwrap();
        assert!(!e["error"].as_str().unwrap().is_empty());
    }
    // a malformed batch: 400 naming the line, nothing written
    let mut bad = jsonl_batch(0, 3, "2024-03-01", "bad");
    bad.push_str("{\"text\": oops}\n");
    let (st, body) = post(
        &s.base,
        "?name=bad.jsonl",
        Some(&ingest),
        &[],
        bad.as_bytes(),
    );
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("line 4"), "{body}");
    assert!(body.contains("malformed JSON"), "{body}");
    let (st, body) = post(&s.base, "?name=empty.txt", Some(&ingest), &[], b"\n \n");
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("no documents"), "{body}");
    assert!(inbox_entries(&d).is_empty(), "{:?}", inbox_entries(&d));
    assert!(files_in(&d.rejected()).is_empty());

    // a good batch: 202, then processed like a dropped file
    let (st, body) = post(
        &s.base,
        "?name=a.jsonl",
        Some(&ingest),
        &[],
        batch.as_bytes(),
    );
    assert_eq!(st, 202, "{body}");
    let a: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(a["file"], "a.jsonl");
    assert_eq!(a["bytes"], batch.len() as u64);
    assert_eq!(a["documents"], 20);
    wait_for(120, "the pushed batch processed", || {
        files_in(&d.processed()) == ["a.jsonl"]
    });
    assert_eq!(
        std::fs::read(d.processed().join("a.jsonl")).unwrap(),
        batch.as_bytes()
    );
    wait_for(30, "the timestep in the status", || {
        timesteps(&s.base, &s.token) == 1
    });
    assert_eq!(status(&s.base, &s.token)["files"], 1);
    assert!(inbox_entries(&d).is_empty(), "{:?}", inbox_entries(&d));

    // the same name again (now in processed/): 409; a text batch under another name: 202
    let other = jsonl_batch(40, 5, "2024-03-02", "other");
    let (st, body) = post(
        &s.base,
        "?name=a.jsonl",
        Some(&ingest),
        &[],
        other.as_bytes(),
    );
    assert_eq!(st, 409, "{body}");
    assert!(body.contains("a.jsonl"), "{body}");
    let (st, body) = post(
        &s.base,
        "?name=notes.txt",
        Some(&ingest),
        &[],
        b"first document here\n\nsecond one\n",
    );
    assert_eq!(st, 202, "{body}");
    let a: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(a["documents"], 2);
    wait_for(120, "the text batch processed", || {
        files_in(&d.processed()).len() == 2
    });
    assert_eq!(stop(s.daemon), 0);
}

#[test]
fn a_batch_over_the_cap_is_413_and_nothing_is_written() {
    let d = Dirs::new();
    let s = start(&d, &["--http-max-batch-bytes", "1000"]);
    let ingest = ingest_token(&d);
    let big = "some words of a document\n".repeat(200);
    assert!(big.len() > 1000);
    let (st, body) = post(&s.base, "?name=big.txt", Some(&ingest), &[], big.as_bytes());
    assert_eq!(st, 413, "{body}");
    assert!(body.contains("1000 bytes"), "{body}");
    // without a length up front (chunked): read up to the cap, then refused
    let port = s.base.trim_start_matches("http://");
    let mut req = format!(
        "POST /api/v1/batches?name=big.txt HTTP/1.1\r\nHost: {port}\r\nAuthorization: Bearer {ingest}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    for _ in 0..4 {
        req.push_str(&format!("{:x}\r\n{}\r\n", 500, "w".repeat(499) + "\n"));
    }
    req.push_str("0\r\n\r\n");
    let (st, body) = raw(&s.base, req.as_bytes());
    assert_eq!(st, 413, "{body}");
    assert!(body.contains("1000 bytes"), "{body}");
    assert!(inbox_entries(&d).is_empty(), "{:?}", inbox_entries(&d));
    // at the cap it is taken
    let fits = "w".repeat(999) + "\n";
    let (st, body) = post(
        &s.base,
        "?name=fits.txt",
        Some(&ingest),
        &[],
        fits.as_bytes(),
    );
    assert_eq!(st, 202, "{body}");
    assert_eq!(stop(s.daemon), 0);
}

#[test]
fn the_same_idempotency_key_is_one_file_and_one_timestep_across_a_restart() {
    let d = Dirs::new();
    let s = start(&d, &[]);
    let ingest = ingest_token(&d);
    let batch = jsonl_batch(100, 15, "2024-04-01", "idem");
    let key = [("Idempotency-Key", "batch-2024-04-01")];
    let (st, first) = post(
        &s.base,
        "?name=k.jsonl",
        Some(&ingest),
        &key,
        batch.as_bytes(),
    );
    assert_eq!(st, 202, "{first}");
    let (st, again) = post(
        &s.base,
        "?name=k.jsonl",
        Some(&ingest),
        &key,
        batch.as_bytes(),
    );
    assert_eq!(st, 202, "{again}");
    assert_eq!(again, first, "the same answer");
    wait_for(120, "the batch processed", || {
        files_in(&d.processed()) == ["k.jsonl"]
    });
    // the same key with another body or another name: 422
    let other = jsonl_batch(200, 15, "2024-04-01", "idem");
    let (st, body) = post(
        &s.base,
        "?name=k.jsonl",
        Some(&ingest),
        &key,
        other.as_bytes(),
    );
    assert_eq!(st, 422, "{body}");
    let (st, body) = post(
        &s.base,
        "?name=k2.jsonl",
        Some(&ingest),
        &key,
        batch.as_bytes(),
    );
    assert_eq!(st, 422, "{body}");
    // the records are small files named by the key's hash
    let records = files_in(&d.store().join("ingest-keys"));
    let hash = blake3::hash(key[0].1.as_bytes()).to_hex().to_string();
    assert_eq!(records, [hash]);

    // across a restart: the same answer, nothing written again
    let log_len = std::fs::metadata(d.log()).unwrap().len() as usize;
    assert_eq!(stop(s.daemon), 0);
    let daemon = Daemon::start(&d, &["--http", "127.0.0.1:0"]);
    let base = base_after(&d.log(), log_len);
    let (st, after) = post(
        &base,
        "?name=k.jsonl",
        Some(&ingest),
        &key,
        batch.as_bytes(),
    );
    assert_eq!(st, 202, "{after}");
    assert_eq!(after, first);

    // a push cut short between its key record and its rename: the retry finishes it
    let late = jsonl_batch(300, 10, "2024-04-02", "late");
    let late_key = "late-key";
    let record = serde_json::json!({
        "file": "late.jsonl",
        "bytes": late.len(),
        "documents": 10,
        "body": blake3::hash(late.as_bytes()).to_hex().to_string(),
    });
    std::fs::write(d.inbox().join(".late.jsonl.tmp"), &late).unwrap();
    let rec_path = d
        .store()
        .join("ingest-keys")
        .join(blake3::hash(late_key.as_bytes()).to_hex().as_str());
    std::fs::write(&rec_path, record.to_string()).unwrap();
    let (st, body) = post(
        &base,
        "?name=late.jsonl",
        Some(&ingest),
        &[("Idempotency-Key", late_key)],
        late.as_bytes(),
    );
    assert_eq!(st, 202, "{body}");
    let a: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(a["file"], "late.jsonl");
    assert_eq!(a["documents"], 10);
    wait_for(120, "the finished push processed", || {
        files_in(&d.processed()) == ["k.jsonl", "late.jsonl"]
    });
    let token = s.token.clone();
    wait_for(30, "two timesteps in the status", || {
        timesteps(&base, &token) == 2
    });
    // nothing more comes: one timestep per batch
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(timesteps(&base, &token), 2);
    assert_eq!(status(&base, &token)["files"], 2);
    assert!(inbox_entries(&d).is_empty(), "{:?}", inbox_entries(&d));
    assert_eq!(stop(daemon), 0);
}

#[test]
fn novad_serve_refuses_pushes_with_503() {
    let d = Dirs::new();
    let s = start(&d, &[]);
    assert_eq!(stop(s.daemon), 0);
    let ingest = ingest_token(&d);
    let log = d.tmp.path().join("serve.log");
    let mut child = std::process::Command::new(bin())
        .args([
            "serve",
            "--store",
            &d.store().display().to_string(),
            "--http",
            "127.0.0.1:0",
        ])
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base = base_after(&log, 0);
    let batch = jsonl_batch(0, 5, "2024-05-01", "serve");
    let (st, body) = post(&base, "?name=s.jsonl", Some(&ingest), &[], batch.as_bytes());
    assert_eq!(st, 503, "{body}");
    assert!(body.contains("no daemon ingests into this store"), "{body}");
    let (st, _) = post(&base, "?name=s.jsonl", None, &[], batch.as_bytes());
    assert_eq!(st, 401);
    let _ = child.kill();
    let _ = child.wait();
    assert!(inbox_entries(&d).is_empty(), "{:?}", inbox_entries(&d));
}
