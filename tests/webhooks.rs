//! Webhooks against the real daemon and a real HTTP receiver: messages written with their
//! timestep survive a receiver that is down and a kill -9, then arrive once each, signed;
//! a receiver that keeps failing gets its messages parked, and they are sent again on
//! request; the event stream sends every commit and resumes after a reconnect.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "common/http.rs"]
#[allow(dead_code)]
mod http;
#[path = "common/receiver.rs"]
#[allow(dead_code)]
mod receiver;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use harness::*;
use hmac::{Hmac, Mac};
use receiver::{free_port, Answer, Receiver};
use serde_json::Value;

const SECRET: &str = "a-webhook-secret-of-32-bytes-xyz";

fn secret_file(d: &Dirs) -> String {
    let p = d.tmp.path().join("hook.secret");
    std::fs::write(&p, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p.display().to_string()
}

fn status(d: &Dirs) -> Value {
    status_json(d, 5)
}

/// (waiting, parked) over every receiver, from `novad status`.
fn backlog(d: &Dirs) -> (u64, u64) {
    let st = status(d);
    let hooks = st["webhooks"].as_array().cloned().unwrap_or_default();
    hooks.iter().fold((0, 0), |(w, p), h| {
        (
            w + h["waiting"].as_u64().unwrap(),
            p + h["parked"].as_u64().unwrap(),
        )
    })
}

/// Drop every example batch and wait until each is processed.
fn ingest_examples(d: &Dirs) {
    for b in example_batches() {
        http::ingest_example(d, &b);
    }
}

/// HMAC-SHA256 of `body`, as `sha256=<hex>` (computed here with the hmac crate, not with
/// novad's code).
fn expected_signature(body: &[u8]) -> String {
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    m.update(body);
    let hex: String = m
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

/// The receiver is down while the daemon ingests; the daemon is killed (-9) before it could
/// deliver anything; then the receiver comes up and the daemon restarts: every message
/// arrives, exactly once, in timestep order, with a valid signature and its id as the
/// Idempotency-Key, and the outbox is empty afterwards.
#[test]
fn messages_survive_a_down_receiver_and_a_kill_and_arrive_once() {
    let d = Dirs::new();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/hook");
    let secret = secret_file(&d);
    let args = ["--no-http", "--notify", &url, "--notify-secret", &secret];
    let daemon = Daemon::start(&d, &args);
    ingest_examples(&d);
    let (waiting, parked) = backlog(&d);
    assert!(
        waiting >= 1,
        "the walk-through has novel documents: {waiting}"
    );
    assert_eq!(parked, 0);
    daemon.kill9();

    let rx = Receiver::start(port, Answer::Status(200));
    // restarted with the HTTP server, to read its metrics
    let restart = [
        &["--http", "127.0.0.1:0"][..],
        &["--notify", &url, "--notify-secret", &secret][..],
    ]
    .concat();
    let daemon = Daemon::start(&d, &restart);
    let got = rx.wait_for(waiting as usize, 60);
    wait_for(30, "the outbox emptied", || backlog(&d) == (0, 0));
    std::thread::sleep(Duration::from_millis(1500));
    let got_after = rx.got();
    assert_eq!(got_after.len(), got.len(), "no message sent twice");
    assert_eq!(got.len() as u64, waiting, "every message arrived");
    let mut ids = HashSet::new();
    let mut last = None;
    for g in &got {
        let m = g.json();
        let id = m["id"].as_str().unwrap().to_string();
        assert_eq!(g.header("Idempotency-Key"), Some(id.as_str()));
        assert_eq!(g.header("X-Novad-Event"), Some("timestep"));
        assert_eq!(
            g.header("X-Novad-Signature-256"),
            Some(expected_signature(&g.body).as_str()),
            "signature of {id}"
        );
        assert!(ids.insert(id), "sent once");
        let t = m["timestep"].as_u64().unwrap();
        assert!(last.is_none_or(|l| t > l), "timestep order");
        last = Some(t);
        assert!(m["novel"].as_u64().unwrap() > 0 || !m["events"].as_array().unwrap().is_empty());
        for doc in m["novel_documents"].as_array().unwrap() {
            assert!(
                doc["score"].as_f64().is_some() && doc["why"].is_array(),
                "{doc}"
            );
        }
    }
    // the messages tell what the store committed: the same novel counts per timestep
    let steps = status_json(&d, 10);
    for g in &got {
        let m = g.json();
        let t = m["timestep"].as_u64().unwrap();
        let rec = steps["recent"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["timestep"].as_u64() == Some(t))
            .unwrap();
        assert_eq!(m["novel"], rec["stats"]["novel"], "timestep {t}");
    }
    // the metrics count the deliveries of this run and an empty backlog
    let base = http::login_link(&d.log());
    let base = base.split("/login").next().unwrap();
    let token = std::fs::read_to_string(d.store().join("http.token")).unwrap();
    let (code, text) = http::get(base, "/metrics", Some(token.trim()), &[]);
    assert_eq!(code, 200);
    let sample = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    assert_eq!(
        sample("novad_webhook_deliveries_total{result=\"delivered\"}"),
        waiting as f64
    );
    assert_eq!(sample("novad_webhook_backlog"), 0.0);
    assert_eq!(stop(daemon), 0);
}

/// A receiver that keeps answering 500: each message is tried again with the same id, then
/// parked once it is older than --notify-give-up-after; `novad status` shows it parked and
/// the last error. Restarted with --notify-retry-parked and a receiver that answers 200, it
/// is delivered and the outbox empties.
#[test]
fn a_failing_receiver_gets_messages_parked_then_sent_on_request() {
    let d = Dirs::new();
    let rx = Receiver::start(0, Answer::Status(500));
    let url = rx.url();
    let daemon = Daemon::start(
        &d,
        &["--no-http", "--notify", &url, "--notify-give-up-after", "2"],
    );
    ingest_examples(&d);
    wait_for(60, "a parked message", || backlog(&d).1 >= 1);
    wait_for(60, "every message parked", || backlog(&d).0 == 0);
    let (_, parked) = backlog(&d);
    let tries = rx.got();
    assert!(
        tries.len() as u64 > parked,
        "retried before parking: {}",
        tries.len()
    );
    let first = tries[0].header("Idempotency-Key").unwrap().to_string();
    assert!(
        tries
            .iter()
            .filter(|g| g.header("Idempotency-Key") == Some(&first))
            .count()
            >= 2,
        "a retry carries the same id"
    );
    let st = status(&d);
    assert!(
        st["webhooks"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains("500"),
        "{st}"
    );
    assert!(st["webhooks"][0]["parked_ids"][0].as_str().is_some());
    let text = novad_ok(&["status", "--store", &s(&d)]);
    assert!(text.contains("parked"), "{text}");
    // parked messages are not tried again
    let n = rx.got().len();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(rx.got().len(), n, "a parked message was sent");
    assert_eq!(stop(daemon), 0);

    rx.answer(Answer::Status(204));
    let daemon = Daemon::start(
        &d,
        &["--no-http", "--notify", &url, "--notify-retry-parked"],
    );
    wait_for(60, "the outbox emptied", || backlog(&d) == (0, 0));
    let sent: Vec<String> = rx.got()[n..]
        .iter()
        .map(|g| g.header("Idempotency-Key").unwrap().to_string())
        .collect();
    let distinct: HashSet<&String> = sent.iter().collect();
    assert_eq!(distinct.len() as u64, parked, "every parked message");
    assert_eq!(sent.len(), distinct.len(), "each once");
    assert_eq!(stop(daemon), 0);
}

/// Bad webhook settings stop the daemon at start with a message naming them.
#[test]
fn bad_webhook_settings_are_refused_at_start() {
    let d = Dirs::new();
    let open = d.tmp.path().join("open.secret");
    std::fs::write(&open, SECRET).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = open.display().to_string();
    for (args, says) in [
        (vec!["--notify", "ftp://x/y"], "ftp://x/y"),
        (
            vec!["--notify", "http://127.0.0.1:9/", "--notify-secret", &o],
            "0644",
        ),
        (
            vec![
                "--notify",
                "http://127.0.0.1:9/",
                "--notify",
                "http://127.0.0.1:9/",
            ],
            "given twice",
        ),
    ] {
        let mut all = vec!["run", "--inbox"];
        let inbox = d.inbox().display().to_string();
        let store = s(&d);
        all.extend([inbox.as_str(), "--store", &store, "--no-http"]);
        all.extend(args.iter().copied());
        let out = novad(&all);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// Read SSE messages from `r` until `n` `timestep` messages came: their ids and data.
fn read_events(r: &mut impl BufRead, n: usize) -> Vec<(u64, Value)> {
    let mut out = Vec::new();
    let (mut id, mut event, mut data) = (None, None, String::new());
    let mut line = String::new();
    while out.len() < n {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "the stream ended");
        let l = line.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            if event.as_deref() == Some("timestep") {
                out.push((id.unwrap(), serde_json::from_str(&data).unwrap()));
            }
            (id, event, data) = (None, None, String::new());
        } else if let Some(v) = l.strip_prefix("id:") {
            id = Some(v.trim().parse::<u64>().unwrap());
        } else if let Some(v) = l.strip_prefix("event:") {
            event = Some(v.trim().to_string());
        } else if let Some(v) = l.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
    out
}

/// Open the event stream of `base` with `token` and extra header lines; the status and the
/// reader past the head.
fn open_stream(base: &str, token: &str, extra: &str) -> (u16, BufReader<std::net::TcpStream>) {
    let addr = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET /api/v1/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n{extra}\r\n"
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line.trim_end().is_empty() {
            break;
        }
    }
    (status, r)
}

/// The event stream sends one message per commit, named by its timestep; a client that
/// reconnects with Last-Event-ID gets what it missed from the store, then the live ones.
#[test]
fn the_event_stream_sends_each_commit_and_resumes_after_a_reconnect() {
    let d = Dirs::new();
    let srv = http::start(&d, &[]);
    let batches = example_batches();
    let (code, mut r) = open_stream(&srv.base, &srv.token, "");
    assert_eq!(code, 200);
    http::ingest_example(&d, &batches[0]);
    let first = read_events(&mut r, 1);
    assert_eq!(first[0].0, 0);
    assert_eq!(first[0].1["timestep"], 0);
    assert!(first[0].1["documents"].as_u64().unwrap() > 0);
    drop(r);
    // missed while away
    http::ingest_example(&d, &batches[1]);
    http::ingest_example(&d, &batches[2]);
    let (code, mut r) = open_stream(&srv.base, &srv.token, "Last-Event-ID: 0\r\n");
    assert_eq!(code, 200);
    let got = read_events(&mut r, 2);
    assert_eq!(got.iter().map(|e| e.0).collect::<Vec<_>>(), vec![1, 2]);
    let steps = http::api(&srv, "/api/v1/timesteps")["items"].clone();
    for (t, m) in &got {
        let rec = &steps[*t as usize];
        assert_eq!(m["documents"], rec["docs"], "timestep {t}");
        assert_eq!(m["novel"], rec["novel"], "timestep {t}");
    }
    // then live again
    d.drop_file(
        "04.jsonl",
        jsonl_batch(500, 40, "2026-03-05", "live").as_bytes(),
    );
    let live = read_events(&mut r, 1);
    assert_eq!(live[0].0, 3);
    // refusals: no token, a bad Last-Event-ID
    let (code, _) = open_stream(&srv.base, "wrong", "");
    assert_eq!(code, 401);
    let (code, _) = open_stream(&srv.base, &srv.token, "Last-Event-ID: yesterday\r\n");
    assert_eq!(code, 400);
    assert_eq!(stop(srv.daemon), 0);
}
