//! The HTTP API against the real daemon (`novad run --http`) after it ingested the example
//! batches: access control, request limits, and answers checked against the command line
//! (which reads the same store through the socket API) and the batch files themselves.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "common/http.rs"]
#[allow(dead_code)]
mod http;

use harness::*;
use http::*;
use serde_json::Value;
use std::collections::BTreeMap;

/// A daemon that has ingested every example batch.
fn served() -> (Dirs, Served) {
    let d = Dirs::new();
    let s = start(&d, &[]);
    for b in example_batches() {
        ingest_example(&d, &b);
    }
    (d, s)
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

/// Every verdict via the cursor, pages of `limit`.
fn walk(s: &Served, query: &str, limit: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let c = cursor
            .as_deref()
            .map(|c| format!("&cursor={c}"))
            .unwrap_or_default();
        let page = api(s, &format!("/api/v1/verdicts?limit={limit}{query}{c}"));
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= limit);
        out.extend(items.iter().cloned());
        match page["next"].as_str() {
            Some(n) => {
                assert_eq!(items.len(), limit, "only a full page has a next page");
                cursor = Some(n.to_string())
            }
            None => return out,
        }
    }
}

#[test]
fn without_the_token_every_path_is_401_and_the_token_or_login_cookie_opens_it() {
    let (_d, s) = served();
    for path in [
        "/",
        "/api/v1/status",
        "/api/v1/verdicts",
        "/assets/app.js",
        "/no/such/path",
    ] {
        assert_eq!(get(&s.base, path, None, &[]).0, 401, "{path} without token");
        assert_eq!(
            get(&s.base, path, Some("0123456789abcdef0123456789abcdef"), &[]).0,
            401,
            "{path} with a wrong token"
        );
        let cookie = format!("novad_token_0={}", s.token);
        assert_eq!(
            get(&s.base, path, None, &[("Cookie", &cookie)]).0,
            401,
            "{path} with the token under another server's cookie"
        );
    }
    let (st, body) = get(&s.base, "/api/v1/status", None, &[]);
    assert!(body.contains("Bearer") && st == 401, "{body}");
    assert_eq!(get(&s.base, "/", Some(&s.token), &[]).0, 200);
    assert_eq!(get(&s.base, "/assets/app.js", Some(&s.token), &[]).0, 200);

    // the one-time link sets the cookie, once
    let mut r = agent().get(&s.login).call().unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let set = r
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let _ = r.body_mut().read_to_string();
    let pair = set.split(';').next().unwrap().to_string();
    assert!(pair.ends_with(&s.token));
    assert_eq!(
        get(&s.base, "/api/v1/status", None, &[("Cookie", &pair)]).0,
        200
    );
    assert_eq!(
        get(&s.base, &s.login[s.base.len()..], None, &[]).0,
        401,
        "second use"
    );
    let (st, _) = get(&s.base, &format!("/login?token={}", s.token), None, &[]);
    assert_eq!(st, 303, "the token itself works as a reusable link");

    // the token file is private
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(_d.store().join("http.token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn traversal_oversized_and_writing_requests_are_refused() {
    let (d, s) = served();
    let secret = s.token.clone();
    let auth = format!("Authorization: Bearer {}\r\n", s.token);
    for target in [
        "/assets/../http.token",
        "/assets/..%2f..%2fCargo.toml",
        "/assets/%2e%2e/%2e%2e/Cargo.toml",
        "/../http.token",
        "/assets/..%5chttp.token",
        "/http.token",
        "/db/conf",
    ] {
        let req = format!("GET {target} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n");
        let (st, resp) = raw(&s.base, req.as_bytes());
        assert!(st == 404 || st == 400, "{target}: {st}");
        assert!(
            !resp.contains(&secret[8..]),
            "{target} leaked the token file"
        );
        assert!(!resp.contains("[package]"), "{target} leaked a file");
    }
    let long = format!("/api/v1/verdicts?q={}", "a".repeat(5000));
    assert_eq!(get(&s.base, &long, Some(&s.token), &[]).0, 414);
    let big = "b".repeat(10_000);
    assert_eq!(
        get(
            &s.base,
            "/api/v1/status",
            Some(&s.token),
            &[("X-Big", &big)]
        )
        .0,
        431
    );
    // a head larger than the server's buffer is refused by the HTTP layer itself
    let huge = format!(
        "GET /api/v1/status HTTP/1.1\r\nHost: x\r\n{auth}X-Huge: {}\r\n\r\n",
        "c".repeat(100_000)
    );
    let (st, _) = raw(&s.base, huge.as_bytes());
    assert!(st == 431 || st == 0, "huge head: {st}");
    for method in ["POST", "PUT", "DELETE"] {
        let req = format!("{method} /api/v1/status HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 2\r\nConnection: close\r\n\r\n{{}}");
        let (st, resp) = raw(&s.base, req.as_bytes());
        assert_eq!(st, 405, "{method}");
        secure_json_refusal(&resp);
    }
    let req = format!("GET /api/v1/status HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 5\r\nConnection: close\r\n\r\nhello");
    let (st, resp) = raw(&s.base, req.as_bytes());
    assert_eq!(st, 413, "GET with a body");
    secure_json_refusal(&resp);
    let req = format!("GET {long} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n");
    let (st, resp) = raw(&s.base, req.as_bytes());
    assert_eq!(st, 414);
    secure_json_refusal(&resp);
    let req = "GET /api/v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let (st, resp) = raw(&s.base, req.as_bytes());
    assert_eq!(st, 401);
    secure_json_refusal(&resp);
    // the scheme name is case-insensitive
    let lower = format!("bearer {}", s.token);
    let (st, _) = get(
        &s.base,
        "/api/v1/status",
        None,
        &[("Authorization", &lower)],
    );
    assert_eq!(st, 200, "lower-case bearer");
    // a verdict id that is not UTF-8 once decoded: a JSON 400, not a plain-text one
    let req = format!(
        "GET /api/v1/verdicts/%ff%fe HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
    );
    let (st, resp) = raw(&s.base, req.as_bytes());
    assert_eq!(st, 400);
    secure_json_refusal(&resp);
    // a client that never finishes its head is cut off (header read timeout)
    let t = std::time::Instant::now();
    let (st, _) = raw(&s.base, b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\n");
    assert!(st == 0 || st == 408, "slow head: {st}");
    assert!(t.elapsed() < std::time::Duration::from_secs(15));
    // the daemon still serves and ingests after all that
    assert_eq!(api(&s, "/api/v1/status")["verdicts"], 102);
    assert!(s.daemon.child.id() > 0 && files_in(&d.processed()).len() == 3);
}

#[test]
fn answers_match_the_command_line_and_the_batches() {
    let (d, s) = served();
    let store = d.store().display().to_string();
    let batches = example_batches();
    let total: usize = batches.iter().map(|b| lines(b)).sum();

    let st = api(&s, "/api/v1/status");
    assert_eq!(st["verdicts"], total);
    assert_eq!(
        st["state"]["timestep"],
        batches.len(),
        "timesteps committed"
    );
    assert_eq!(st["live"], true);
    assert_eq!(st["model"], "l1");

    // verdicts: the cursor walk in pages of 7 is exactly the CLI's list, in the same order
    let cli = jsonl(&novad_ok(&[
        "verdicts", "--store", &store, "--format", "jsonl",
    ]));
    let asc = walk(&s, "", 7);
    let ids = |vs: &[Value]| -> Vec<String> {
        vs.iter()
            .map(|v| v["doc_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&asc), ids(&cli));
    let mut desc = walk(&s, "&order=desc", 11);
    desc.reverse();
    assert_eq!(ids(&desc), ids(&cli));
    for (a, c) in asc.iter().zip(&cli) {
        assert_eq!(a["score"], c["score"]);
        assert_eq!(a["novel"], c["novel"]);
        assert_eq!(a["time_utc"], c["time"]);
    }

    // filters agree with filtering the full list
    let novel = walk(&s, "&novel=true", 100);
    assert_eq!(
        ids(&novel),
        ids(&cli
            .iter()
            .filter(|v| v["novel"] == true)
            .cloned()
            .collect::<Vec<_>>())
    );
    assert!(!novel.is_empty());
    let cut = novel[novel.len() / 2]["score"].as_f64().unwrap();
    let above = walk(&s, &format!("&min_score={cut}"), 100);
    let want: Vec<&Value> = cli
        .iter()
        .filter(|v| v["score"].as_f64().unwrap() >= cut)
        .collect();
    assert_eq!(above.len(), want.len());
    let term = novel[0]["terms"][0][0].as_str().unwrap().to_string();
    let hits = walk(&s, &format!("&q={}", term.to_uppercase()), 100);
    assert!(hits.iter().any(|v| v["doc_id"] == novel[0]["doc_id"]));
    for v in &hits {
        let has = v["doc_id"].as_str().unwrap().contains(&term)
            || v["terms"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t[0].as_str().unwrap().contains(&term));
        assert!(has, "{v} does not match `{term}`");
    }
    // a date `until` includes that day; `since` starts at midnight
    let day1 = walk(&s, "&until=2026-03-02", 100);
    assert_eq!(day1.len(), lines(&batches[0]));
    let later = walk(&s, "&since=2026-03-03", 100);
    assert_eq!(later.len(), total - lines(&batches[0]));

    // one verdict, with its timestep record
    let one = api(
        &s,
        &format!("/api/v1/verdicts/{}", novel[0]["id"].as_str().unwrap()),
    );
    assert_eq!(one["verdict"], novel[0]);
    assert_eq!(one["timestep"]["timestep"], novel[0]["timestep"]);
    let thr = one["threshold"].as_f64().unwrap();
    assert!(
        novel[0]["score"].as_f64().unwrap() >= thr,
        "a novel score reaches the threshold"
    );
    // the hybrid detector's explanation links its nearest earlier document's own verdict
    let near = &one["verdict"]["hybrid"]["nearest"];
    let other = api(
        &s,
        &format!("/api/v1/verdicts/{}", near["id"].as_str().unwrap()),
    );
    assert_eq!(other["verdict"]["doc_id"], near["doc_id"], "{near}");
    assert_eq!(other["verdict"]["timestep"], near["timestep"]);
    assert!(near["timestep"].as_u64().unwrap() < novel[0]["timestep"].as_u64().unwrap());

    // timesteps: one per batch, documents per batch, novel counts equal the verdicts'
    let ts = api(&s, "/api/v1/timesteps")["items"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(ts.len(), batches.len());
    let mut novel_by_step: BTreeMap<u64, usize> = BTreeMap::new();
    for v in &novel {
        *novel_by_step
            .entry(v["timestep"].as_u64().unwrap())
            .or_default() += 1;
    }
    for (t, b) in ts.iter().zip(&batches) {
        assert_eq!(t["docs"], lines(b));
        assert_eq!(
            t["record"]["file"],
            b.file_name().unwrap().to_str().unwrap()
        );
        let step = t["record"]["timestep"].as_u64().unwrap();
        assert_eq!(t["novel"], novel_by_step.get(&step).copied().unwrap_or(0));
        if let Some(q) = t["scores"].as_object() {
            let qs: Vec<f64> = ["p10", "p25", "p50", "p75", "p90", "max"]
                .iter()
                .map(|k| q[*k].as_f64().unwrap())
                .collect();
            assert!(
                qs.windows(2).all(|w| w[0] <= w[1]),
                "ordered quantiles {qs:?}"
            );
        } else {
            assert_eq!(
                t["record"]["stats"]["bootstrap"], true,
                "only bootstrap has no scores"
            );
        }
    }
    let ts2 = api(&s, "/api/v1/timesteps?since=2026-03-03")["items"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(ts2, batches.len() - 1);

    // topics: the CLI's
    let cli_topics = jsonl(&novad_ok(&[
        "topics", "--store", &store, "--format", "jsonl",
    ]));
    let topics = api(&s, "/api/v1/topics")["items"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(topics.len(), cli_topics.len());
    assert!(!topics.is_empty(), "the examples have an emerging topic");
    for (a, c) in topics.iter().zip(&cli_topics) {
        for k in [
            "timestep", "id", "terms", "docs", "size", "kind", "strength", "profile",
        ] {
            assert_eq!(a[k], c[k], "{k}");
        }
    }
    assert_eq!(
        api(&s, "/api/v1/topics?kind=evolving")["items"]
            .as_array()
            .unwrap()
            .len(),
        topics.iter().filter(|t| t["kind"] == "evolving").count()
    );
}

#[test]
fn bad_parameters_are_400_with_the_reason() {
    let (_d, s) = served();
    for (path, want) in [
        ("/api/v1/verdicts?limit=0", "limit"),
        ("/api/v1/verdicts?limit=501", "limit"),
        ("/api/v1/verdicts?min_score=nan", "min_score"),
        ("/api/v1/verdicts?order=sideways", "order"),
        ("/api/v1/verdicts?cursor=zz", "cursor"),
        ("/api/v1/verdicts?novel=maybe", "novel"),
        ("/api/v1/verdicts?since=yesterday", "since"),
        ("/api/v1/verdicts?colour=red", "colour"),
        ("/api/v1/topics?kind=hot", "kind"),
        ("/api/v1/verdicts/xyz", "40 hex digits"),
    ] {
        let (st, body) = get(&s.base, path, Some(&s.token), &[]);
        assert_eq!(st, 400, "{path}: {body}");
        let e: Value = serde_json::from_str(&body).unwrap();
        assert!(
            e["error"].as_str().unwrap().contains(want),
            "{path}: {body}"
        );
    }
    let missing = format!("/api/v1/verdicts/{}", "0".repeat(40));
    assert_eq!(get(&s.base, &missing, Some(&s.token), &[]).0, 404);
    assert_eq!(get(&s.base, "/api/v2/status", Some(&s.token), &[]).0, 404);
}

#[test]
fn non_loopback_is_refused_and_serve_reads_a_stopped_store() {
    let d = Dirs::new();
    let o = novad(&[
        "run",
        "--inbox",
        &d.inbox().display().to_string(),
        "--store",
        &d.store().display().to_string(),
        "--http",
        "0.0.0.0:0",
    ]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("not a loopback address") && e.contains("--http-allow-remote"),
        "{e}"
    );

    let s = start(&d, &[]);
    ingest_example(&d, &example_batches()[0]);
    let live = api(&s, "/api/v1/timesteps");
    // serve refuses while the daemon holds the store
    let o = novad(&[
        "serve",
        "--store",
        &d.store().display().to_string(),
        "--http",
        "127.0.0.1:0",
    ]);
    assert!(!o.status.success());
    assert_eq!(stop(s.daemon), 0);

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
    let login = login_link(&log);
    let base = login.split("/login").next().unwrap().to_string();
    let (st, body) = get(&base, "/api/v1/timesteps", Some(&s.token), &[]);
    assert_eq!(st, 200);
    let stopped: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(stopped, live, "same answers from the stopped store");
    let (_, body) = get(&base, "/api/v1/status", Some(&s.token), &[]);
    let stv: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(stv["live"], false);
    assert_eq!(stv["daemon_pid"], Value::Null);
    let _ = child.kill();
    let _ = child.wait();
}

/// `(thread name, nice)` of every thread of process `pid`, from `/proc/PID/task/*/stat`.
fn thread_nices(pid: u32) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let Ok(stat) = std::fs::read_to_string(e.unwrap().path().join("stat")) else {
            continue; // the thread ended meanwhile
        };
        let (head, rest) = stat.rsplit_once(')').unwrap();
        let name = head.split_once('(').unwrap().1.to_string();
        // fields after the name start at field 3 (state); nice is field 19
        let nice = rest.split_whitespace().nth(16).unwrap().parse().unwrap();
        out.push((name, nice));
    }
    out
}

#[test]
fn http_threads_run_below_ingest_priority_and_ingest_at_its_own() {
    let (_d, s) = served();
    // store reads start the runtime's blocking threads
    for p in ["/api/v1/status", "/api/v1/timesteps", "/api/v1/topics"] {
        assert!(api(&s, p).is_object(), "{p}");
    }
    let own: i32 = thread_nices(std::process::id())
        .into_iter()
        .next()
        .map(|(_, n)| n)
        .unwrap();
    let threads = thread_nices(s.daemon.child.id());
    let http: Vec<_> = threads
        .iter()
        .filter(|(n, _)| n.starts_with("novad-http"))
        .collect();
    // the thread serving the connections, and at least one store-read thread
    assert!(
        http.iter().any(|(n, _)| n == "novad-http-main") && http.len() >= 2,
        "{threads:?}"
    );
    let lowered = (own + novad::http::HTTP_NICE).min(19);
    assert!(own == 19 || lowered > own);
    assert!(http.iter().all(|(_, nice)| *nice == lowered), "{threads:?}");
    // every other thread (ingest, its workers, the one computing answers after commits)
    // keeps the priority it was started with
    assert!(threads.iter().any(|(n, _)| n.starts_with("novad-refresh")));
    let others: Vec<_> = threads
        .iter()
        .filter(|(n, _)| !n.starts_with("novad-http"))
        .collect();
    assert!(!others.is_empty());
    assert!(others.iter().all(|(_, nice)| *nice == own), "{threads:?}");
}

/// Drop a batch of `n` 20NG posts (the `i`-th of the test) and wait until it is processed.
fn ingest_posts(d: &Dirs, i: usize, n: usize) {
    let before = files_in(&d.processed()).len();
    let body = jsonl_batch(i * n, n, &format!("2026-04-{:02}", 1 + i), &format!("p{i}"));
    d.drop_file(&format!("{i:03}.jsonl"), body.as_bytes());
    wait_for(120, "the batch processed", || {
        files_in(&d.processed()).len() > before
    });
}

#[test]
fn answers_are_never_older_than_the_last_commit_and_unchanged_ones_are_304() {
    let d = Dirs::new();
    let s = start(&d, &[]);
    ingest_posts(&d, 0, 300);
    let novel_page = "/api/v1/verdicts?order=desc&limit=15&novel=true";

    // while batches commit, a client polls: every answer covers at least the batches that
    // were processed (so committed and flushed) before it asked
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (stop, base, token, processed) =
            (stop.clone(), s.base.clone(), s.token.clone(), d.processed());
        std::thread::spawn(move || {
            let mut polls = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let done = files_in(&processed).len();
                let (st, _, body) = get_tagged(&base, "/api/v1/status", &token, &[]);
                assert_eq!(st, 200, "{body}");
                let v: Value = serde_json::from_str(&body).unwrap();
                let step = v["state"]["timestep"].as_u64().unwrap() as usize;
                assert!(
                    step >= done,
                    "status at timestep {step} after {done} commits"
                );
                let done = files_in(&processed).len();
                let (_, _, body) = get_tagged(&base, "/api/v1/timesteps", &token, &[]);
                let v: Value = serde_json::from_str(&body).unwrap();
                let n = v["items"].as_array().unwrap().len();
                assert!(n >= done, "{n} timesteps listed after {done} commits");
                polls += 1;
            }
            polls
        })
    };
    for i in 1..5 {
        ingest_posts(&d, i, 150);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(poller.join().unwrap() > 0, "the client polled");

    // answers served again (from the cache) equal the first and a fresh read by the CLI
    let store = d.store().display().to_string();
    let cli = jsonl(&novad_ok(&[
        "verdicts", "--store", &store, "--format", "jsonl",
    ]));
    let mut newest_novel: Vec<&Value> = cli.iter().filter(|v| v["novel"] == true).collect();
    newest_novel.reverse();
    newest_novel.truncate(15);
    let first = api(&s, novel_page);
    assert_eq!(api(&s, novel_page), first);
    let ids: Vec<&Value> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["doc_id"])
        .collect();
    let want: Vec<&Value> = newest_novel.iter().map(|v| &v["doc_id"]).collect();
    assert_eq!(ids, want);
    assert_eq!(
        api(&s, "/api/v1/status")["verdicts"],
        cli.len(),
        "status counts every verdict"
    );

    // an answer the client has is 304 without a body until the next commit changes it
    let (st, tag, body) = get_tagged(&s.base, "/api/v1/status", &s.token, &[]);
    assert_eq!(st, 200);
    let tag = tag.expect("an ETag");
    let (st, tag2, body2) = get_tagged(
        &s.base,
        "/api/v1/status",
        &s.token,
        &[("If-None-Match", &tag)],
    );
    assert_eq!((st, body2.as_str()), (304, ""));
    assert_eq!(tag2.as_deref(), Some(tag.as_str()));
    let weak = format!("\"other\", W/{tag}");
    let (st, _, _) = get_tagged(
        &s.base,
        "/api/v1/status",
        &s.token,
        &[("If-None-Match", &weak)],
    );
    assert_eq!(st, 304, "a list of tags, weak form");
    let (st, _, body3) = get_tagged(
        &s.base,
        "/api/v1/status",
        &s.token,
        &[("If-None-Match", "\"0123\"")],
    );
    assert_eq!((st, &body3), (200, &body), "another tag: the full answer");
    ingest_posts(&d, 5, 150);
    let (st, tag3, body4) = get_tagged(
        &s.base,
        "/api/v1/status",
        &s.token,
        &[("If-None-Match", &tag)],
    );
    assert_eq!(st, 200, "a commit changed the answer");
    assert_ne!(tag3.as_deref(), Some(tag.as_str()));
    assert_ne!(body4, body);
    // without the token the tag opens nothing
    let (st, _) = get(&s.base, "/api/v1/status", None, &[("If-None-Match", &tag)]);
    assert_eq!(st, 401);

    // a client that accepts gzip (as a browser does) gets the same answer compressed, under
    // a tag of its own; one that refuses it (q=0) or does not say gets it plain
    let path = "/api/v1/timesteps";
    let (st, ptag, plain) = get_tagged(&s.base, path, &s.token, &[]);
    assert_eq!(st, 200);
    let browser = [("Accept-Encoding", "gzip, deflate, br, zstd")];
    let (st, heads, zipped) = get_raw(&s.base, path, &s.token, &browser);
    assert_eq!(st, 200);
    secure(&heads);
    assert_eq!(header(&heads, "content-encoding"), Some("gzip"));
    assert_eq!(header(&heads, "vary"), Some("accept-encoding"));
    let mut unzipped = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(&zipped[..]),
        &mut unzipped,
    )
    .expect("a gzip body");
    assert_eq!(unzipped, plain);
    assert!(
        zipped.len() < plain.len(),
        "{} ≥ {}",
        zipped.len(),
        plain.len()
    );
    let ztag = header(&heads, "etag").expect("an ETag").to_string();
    assert_ne!(Some(ztag.as_str()), ptag.as_deref());
    let (st, heads, none) = get_raw(
        &s.base,
        path,
        &s.token,
        &[browser[0], ("If-None-Match", &ztag)],
    );
    assert_eq!((st, none.len()), (304, 0));
    secure(&heads);
    let (st, heads, body) = get_raw(
        &s.base,
        path,
        &s.token,
        &[
            ("Accept-Encoding", "br, gzip;q=0"),
            ("If-None-Match", &ztag),
        ],
    );
    assert_eq!(st, 200, "the plain form is another representation");
    assert_eq!(header(&heads, "content-encoding"), None);
    assert_eq!(body, plain.as_bytes());
    secure(&heads);
}

/// Every answer, cached or not, carries the security headers.
fn secure(heads: &[(String, String)]) {
    assert_eq!(header(heads, "x-content-type-options"), Some("nosniff"));
    assert_eq!(header(heads, "x-frame-options"), Some("DENY"));
    assert_eq!(header(heads, "referrer-policy"), Some("no-referrer"));
    assert!(
        header(heads, "content-security-policy")
            .is_some_and(|v| v.starts_with("default-src 'none'")),
        "{heads:?}"
    );
}

/// A refusal read raw: it carries the security headers and a JSON `{"error": …}` body.
fn secure_json_refusal(resp: &str) {
    let (head, body) = resp.split_once("\r\n\r\n").expect("a head and a body");
    let heads: Vec<(String, String)> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_string()))
        .collect();
    secure(&heads);
    let v: Value = serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{e}: {resp}"));
    assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{resp}");
}
