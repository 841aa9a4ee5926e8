//! The daemon's query socket under hostile or careless local clients: slow senders, oversize
//! requests, more clients than slots; and the CLI's queries agreeing with and without the
//! daemon. Server-side bounds are checked both in process (small [`Limits`], so the tests are
//! quick) and on the real binary with its default limits.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "common/synthetic.rs"]
mod synthetic;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use harness::*;
use novad::daemon::api::{self, ClientOptions, ErrorKind, Limits, Request, Trailer};
use novad::query::{self, VerdictFilter};

/// Documents in the template store: two days of 120 posts.
const DOCS: usize = 240;

/// A store holding [`DOCS`] verdicts, built once with `novad ingest` and copied per test.
fn template() -> &'static Path {
    static T: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &T.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        let mut files = Vec::new();
        for (i, day) in ["2026-03-01", "2026-03-02"].iter().enumerate() {
            let f = tmp.path().join(format!("{i}.jsonl"));
            std::fs::write(&f, synthetic::batch(i as u64, 120, day)).unwrap();
            files.push(f.display().to_string());
        }
        let mut args = vec!["ingest", "--store", store.to_str().unwrap(), "--k", "40"];
        args.extend(files.iter().map(|s| s.as_str()));
        novad_ok(&args);
        (tmp, store)
    })
    .1
}

/// A fresh copy of the template store in `d.store()`.
fn copy_store(d: &Dirs) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap().flatten() {
            let (src, dst) = (e.path(), to.join(e.file_name()));
            if src.is_dir() {
                copy(&src, &dst)
            } else {
                std::fs::copy(&src, &dst).unwrap();
            }
        }
    }
    copy(template(), &d.store());
}

/// Serve a copy of the template store in this process with `limits`.
fn serve_in_process(d: &Dirs, limits: Limits) -> (novad::store::Store, PathBuf) {
    copy_store(d);
    let store = novad::store::Store::open(&d.store()).unwrap();
    let sock = api::serve_with(&d.store(), store.db().clone(), limits).unwrap();
    (store, sock)
}

/// The real daemon on a copy of the template store, up and answering.
fn start_daemon(d: &Dirs) -> Daemon {
    copy_store(d);
    let daemon = Daemon::start(d, &[]);
    wait_for(60, "the daemon is up", || {
        std::fs::read_to_string(d.log()).is_ok_and(|l| l.contains("novad running"))
    });
    daemon
}

/// Every line the server sends until it closes (a reset after the last line ends it too).
fn lines_until_closed(conn: UnixStream) -> Vec<String> {
    let mut out = Vec::new();
    for l in BufReader::new(conn).lines() {
        match l {
            Ok(l) => out.push(l),
            Err(_) => break,
        }
    }
    out
}

fn trailer(line: &str) -> Trailer {
    Trailer::parse(line)
        .unwrap_or_else(|| panic!("not an end line: {line}"))
        .unwrap()
}

fn error_kind(line: &str) -> ErrorKind {
    match trailer(line) {
        Trailer::Error { kind, .. } => kind,
        t => panic!("expected an error, got {t:?}"),
    }
}

/// A client that sends one byte of a request every `every` and never finishes it. Returns
/// when the server closes on it: the last line it received, and how long it was connected.
fn slow_loris(sock: &Path, every: Duration) -> (Option<String>, Duration) {
    let t = Instant::now();
    let mut c = UnixStream::connect(sock).unwrap();
    let reader = c.try_clone().unwrap();
    let drip = std::thread::spawn(move || {
        // stops once the server has closed (the write fails)
        while c.write_all(b" ").is_ok() && t.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(every);
        }
    });
    let last = lines_until_closed(reader).pop();
    let held = t.elapsed();
    drip.join().unwrap();
    (last, held)
}

fn opts(retry: f64) -> ClientOptions {
    ClientOptions {
        retry_for: Duration::from_secs_f64(retry),
        ..Default::default()
    }
}

#[test]
fn slow_clients_do_not_block_a_query_and_are_cut_off_by_the_request_deadline() {
    let d = Dirs::new();
    let limits = Limits {
        max_connections: 12,
        request_timeout: Duration::from_secs(2),
        ..Limits::default()
    };
    let (store, sock) = serve_in_process(&d, limits);
    let want = query::verdicts(store.db(), &VerdictFilter::default()).unwrap();
    assert_eq!(want.len(), DOCS);
    let loris: Vec<_> = (0..10)
        .map(|_| {
            let sock = sock.clone();
            std::thread::spawn(move || slow_loris(&sock, Duration::from_millis(100)))
        })
        .collect();
    // wait until the server holds all ten (a byte every 100 ms keeps each one busy)
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let got = api::remote_verdicts(&d.store(), &VerdictFilter::default(), &opts(0.0))
        .unwrap()
        .expect("the daemon answers");
    let query_time = t.elapsed();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w, "the same verdicts as the direct query");
    }
    for h in loris {
        let (last, held) = h.join().unwrap();
        // cut off by the 2 s request deadline although they never stopped sending
        assert_eq!(
            error_kind(&last.expect("a goodbye line")),
            ErrorKind::Timeout
        );
        assert!(held >= Duration::from_secs(2), "{held:?}");
        assert!(held < Duration::from_secs(30), "{held:?}");
        // the query did not wait for any of them
        assert!(
            query_time < held,
            "query {query_time:?}, slow client {held:?}"
        );
    }
}

#[test]
fn over_capacity_clients_read_a_busy_line_and_slots_free_on_close() {
    let d = Dirs::new();
    let limits = Limits {
        max_connections: 2,
        request_timeout: Duration::from_secs(20),
        ..Limits::default()
    };
    let (_store, sock) = serve_in_process(&d, limits);
    let holders: Vec<UnixStream> = (0..2)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    // a client that only reads, and one that sends its whole request before reading
    let quiet = UnixStream::connect(&sock).unwrap();
    let lines = lines_until_closed(quiet);
    assert_eq!(lines.len(), 1, "{lines:?}");
    match trailer(&lines[0]) {
        Trailer::Error { kind, message } => {
            assert_eq!(kind, ErrorKind::Busy);
            assert!(
                message.contains("busy") && message.contains('2'),
                "{message}"
            );
        }
        t => panic!("{t:?}"),
    }
    let mut eager = UnixStream::connect(&sock).unwrap();
    let req = serde_json::to_string(&Request::Status { recent: 1 }).unwrap();
    let _ = eager.write_all(format!("{req}\n").as_bytes());
    let lines = lines_until_closed(eager);
    assert_eq!(error_kind(&lines[0]), ErrorKind::Busy);
    // a client that gives up after one try reports it clearly
    let e = api::remote_status(&d.store(), 1, &opts(0.0)).unwrap_err();
    assert!(e.to_string().contains("stayed busy"), "{e}");
    drop(holders);
    // closing the holders frees their slots
    wait_for(30, "a slot is free", || {
        api::remote_status(&d.store(), 1, &opts(0.0)).is_ok()
    });
}

#[test]
fn an_oversize_request_is_refused_and_does_not_grow_the_daemon() {
    let d = Dirs::new();
    let mut daemon = start_daemon(&d);
    let pid = daemon.child.id();
    let before = vm_hwm_kib(pid);
    let sock = api::socket_path(&d.store());
    let mut c = UnixStream::connect(&sock).unwrap();
    let reader = c.try_clone().unwrap();
    // a 1,000 MiB line without a newline (the server stops reading long before)
    let sender = std::thread::spawn(move || {
        let mut line = std::io::repeat(b'a').take(1000 << 20);
        std::io::copy(&mut line, &mut c).map_err(|e| e.kind())
    });
    let lines = lines_until_closed(reader);
    let sent = sender.join().unwrap();
    assert!(sent.is_err(), "the daemon closed the connection: {sent:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    match trailer(&lines[0]) {
        Trailer::Error { kind, message } => {
            assert_eq!(kind, ErrorKind::TooLarge);
            let limit = Limits::default().max_request_bytes.to_string();
            assert!(message.contains(&limit), "{message}");
        }
        t => panic!("{t:?}"),
    }
    let after = vm_hwm_kib(pid);
    assert!(
        after < before + 16 * 1024,
        "peak RSS grew from {before} to {after} KiB"
    );
    // and the daemon still answers
    let st = novad_ok(&["status", "--store", &s(&d), "--format", "json"]);
    assert!(st.contains("daemon_pid"));
    assert!(daemon.is_running());
    assert_eq!(stop(daemon), 0);
}

fn vm_hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM")
}

#[test]
fn bad_request_lines_get_a_clear_error() {
    let d = Dirs::new();
    let (_store, sock) = serve_in_process(&d, Limits::default());
    for (req, expect) in [
        ("not json", "bad request"),
        ("{\"op\":\"delete\"}", "unknown variant"),
        ("{\"op\":\"status\"}", "recent"),
    ] {
        let mut c = UnixStream::connect(&sock).unwrap();
        c.write_all(format!("{req}\n").as_bytes()).unwrap();
        let lines = lines_until_closed(c);
        assert_eq!(lines.len(), 1, "{req}: {lines:?}");
        match trailer(&lines[0]) {
            Trailer::Error { kind, message } => {
                assert_eq!(kind, ErrorKind::BadRequest, "{req}");
                assert!(message.contains(expect), "{req}: {message}");
            }
            t => panic!("{req}: {t:?}"),
        }
    }
}

/// Hold every slot of the real daemon (its default limit) with idle connections, and check
/// that one more client is turned away.
fn fill_slots(sock: &Path) -> Vec<UnixStream> {
    let held: Vec<UnixStream> = (0..Limits::default().max_connections)
        .map(|_| UnixStream::connect(sock).unwrap())
        .collect();
    let probe = lines_until_closed(UnixStream::connect(sock).unwrap());
    assert_eq!(error_kind(&probe[0]), ErrorKind::Busy, "slots full");
    held
}

#[test]
fn the_cli_retries_while_the_daemon_is_busy_and_gives_up_clearly() {
    let d = Dirs::new();
    let daemon = start_daemon(&d);
    let sock = api::socket_path(&d.store());
    let store = s(&d);
    let held = fill_slots(&sock);
    // a short retry budget: a clear error, no partial output
    let o = novad(&["status", "--store", &store, "--retry-secs", "0.3"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("stayed busy") && err.contains("--retry-secs"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    // the default budget: retries until the slots free up, then answers
    let child = std::process::Command::new(bin())
        .args(["-v", "verdicts", "--store", &store, "--format", "jsonl"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    drop(held);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("daemon busy; retrying"), "it retried: {err}");
    assert_eq!(jsonl(&String::from_utf8(o.stdout).unwrap()).len(), DOCS);
    assert_eq!(stop(daemon), 0);
}

#[test]
fn slow_clients_do_not_block_cli_queries_of_the_real_daemon() {
    let d = Dirs::new();
    let daemon = start_daemon(&d);
    let sock = api::socket_path(&d.store());
    let loris: Vec<_> = (0..20)
        .map(|_| {
            let sock = sock.clone();
            std::thread::spawn(move || slow_loris(&sock, Duration::from_millis(500)))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let store = s(&d);
    let st: serde_json::Value = serde_json::from_str(&novad_ok(&[
        "status", "--store", &store, "--format", "json",
    ]))
    .unwrap();
    assert!(st["daemon_pid"].is_number(), "answered by the daemon");
    let vs = jsonl(&novad_ok(&[
        "verdicts", "--store", &store, "--format", "jsonl",
    ]));
    assert_eq!(vs.len(), DOCS);
    let request_timeout = Limits::default().request_timeout;
    for h in loris {
        let (last, held) = h.join().unwrap();
        assert_eq!(
            error_kind(&last.expect("a goodbye line")),
            ErrorKind::Timeout
        );
        assert!(held >= request_timeout, "{held:?}");
        assert!(held < request_timeout * 6, "{held:?}");
    }
    assert_eq!(stop(daemon), 0);
}

/// `novad verdicts ARGS --format jsonl` on `store`, as (success, stdout, stderr).
fn verdicts_cli(store: &str, args: &[&str]) -> (bool, String, String) {
    let mut a = vec!["verdicts", "--store", store, "--format", "jsonl"];
    a.extend_from_slice(args);
    let o = novad(&a);
    (
        o.status.success(),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

#[test]
fn queries_agree_with_and_without_the_daemon_and_bad_filters_fail_on_both() {
    let d = Dirs::new();
    let daemon = start_daemon(&d);
    let store = s(&d);
    let cases: Vec<Vec<&str>> = vec![
        vec![],
        vec!["--limit", "0"],
        vec!["--limit", "1"],
        vec!["--limit", "7"],
        vec!["--novel"],
        vec!["--min-score", "0.5"],
        vec!["--min-score", "-1"],
        vec!["--since", "2026-03-02"],
        vec!["--until", "2026-03-01", "--novel", "--limit", "3"],
        vec!["--min-score", "nan"],
        vec!["--min-score", "NaN"],
        vec!["--min-score", "inf"],
        vec!["--min-score=-inf"],
    ];
    let with: Vec<_> = cases.iter().map(|c| verdicts_cli(&store, c)).collect();
    let others = || {
        let mut st: serde_json::Value = serde_json::from_str(&novad_ok(&[
            "status", "--store", &store, "--format", "json", "--recent", "9",
        ]))
        .unwrap();
        let pid = st["daemon_pid"].take();
        st["disk_bytes"].take();
        // only a running daemon counts its inbox scans
        st.as_object_mut().unwrap().remove("inbox_scans");
        let topics = novad_ok(&["topics", "--store", &store, "--format", "jsonl"]);
        (pid.is_number(), st, topics)
    };
    let (by_daemon, st_with, topics_with) = others();
    assert!(by_daemon);
    assert_eq!(stop(daemon), 0);
    let without: Vec<_> = cases.iter().map(|c| verdicts_cli(&store, c)).collect();
    let (by_daemon, st_without, topics_without) = others();
    assert!(!by_daemon);
    assert_eq!(st_with, st_without, "status with and without the daemon");
    assert_eq!(st_with["recent"].as_array().unwrap().len(), 2);
    assert_eq!(
        topics_with, topics_without,
        "topics with and without the daemon"
    );
    let all = jsonl(&with[0].1);
    assert_eq!(all.len(), DOCS);
    for ((case, w), wo) in cases.iter().zip(&with).zip(&without) {
        assert_eq!(w.0, wo.0, "{case:?}: with the daemon vs without");
        assert_eq!(w.2, wo.2, "{case:?}: with the daemon vs without");
        for (a, b) in w.1.lines().zip(wo.1.lines()) {
            assert_eq!(a, b, "{case:?}: with the daemon vs without");
        }
        assert_eq!(w.1.lines().count(), wo.1.lines().count(), "{case:?}");
        let bad = case
            .iter()
            .any(|a| ["nan", "NaN", "inf", "--min-score=-inf"].contains(a));
        if bad {
            assert!(!w.0, "{case:?} is rejected");
            assert!(w.2.contains("finite"), "{case:?}: {}", w.2);
            continue;
        }
        assert!(w.0, "{case:?}: {}", w.2);
        let got = jsonl(&w.1);
        // oracle: the unfiltered list, filtered here
        let pos = |flag: &str| case.iter().position(|a| *a == flag).map(|i| case[i + 1]);
        let min: Option<f64> = pos("--min-score").map(|x| x.parse().unwrap());
        let limit: Option<usize> = pos("--limit").map(|x| x.parse().unwrap());
        let day = |v: &serde_json::Value| v["time"].as_str().unwrap()[..10].to_string();
        let want: Vec<&serde_json::Value> = all
            .iter()
            .filter(|v| !case.contains(&"--novel") || v["novel"] == true)
            .filter(|v| min.is_none_or(|m| v["score"].as_f64().unwrap() >= m))
            .filter(|v| pos("--since").is_none_or(|s| day(v).as_str() >= s))
            .filter(|v| pos("--until").is_none_or(|u| day(v).as_str() <= u))
            .take(limit.unwrap_or(usize::MAX))
            .collect();
        assert_eq!(got.iter().collect::<Vec<_>>(), want, "{case:?}");
    }
    // `--limit 0` is "at most zero": nothing, also in the table format
    let table = novad_ok(&["verdicts", "--store", &store, "--limit", "0"]);
    assert!(table.trim_end().ends_with("0 verdicts"), "{table}");
}

/// A stand-in daemon at `dir`'s socket that answers one connection with `answer` and closes.
fn fake_daemon(dir: &Path, answer: String) -> std::thread::JoinHandle<()> {
    let l = std::os::unix::net::UnixListener::bind(api::socket_path(dir)).unwrap();
    std::thread::spawn(move || {
        let (c, _) = l.accept().unwrap();
        let mut line = String::new();
        BufReader::new(&c).read_line(&mut line).unwrap();
        (&c).write_all(answer.as_bytes()).unwrap();
    })
}

#[test]
fn a_cut_off_or_inconsistent_answer_is_an_error_not_a_short_list() {
    let v = r#"{"doc_id":"a","time":0,"timestep":0,"seq":0,"source":"f","score":0.5,"novel":false,"bootstrap":false,"empty":false,"at_ceiling":false,"terms":[]}"#;
    let done = |n: usize| Trailer::Done { count: n }.line();
    for (answer, expect) in [
        (format!("{v}\n{v}\n"), Some("cut off")),
        (format!("{v}\n{}", done(3)), Some("says 3")),
        (format!("{v}\n{}", done(1)), None),
    ] {
        let d = tempfile::tempdir().unwrap();
        let server = fake_daemon(d.path(), answer);
        let r = api::remote_verdicts(d.path(), &VerdictFilter::default(), &opts(0.0));
        server.join().unwrap();
        match expect {
            Some(e) => {
                let err = r.unwrap_err().to_string();
                assert!(err.contains(e), "{err}");
            }
            None => assert_eq!(r.unwrap().unwrap().len(), 1),
        }
    }
}
