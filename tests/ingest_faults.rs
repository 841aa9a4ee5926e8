//! The ingest path under hostile or careless input: slow writers, files larger than one
//! timestep, kills in the middle of a file, special files, unreadable files, odd names,
//! duplicate content and ids, out-of-range times, SIGHUP, an idle inbox. Drives the real binary.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `n` JSONL documents of synthetic text (seeded), ids `<tag>-<i>`, dated `day`.
fn synth(n: usize, tag: &str, seed: u64) -> String {
    const WORDS: [&str; 24] = [
        "market",
        "river",
        "engine",
        "planet",
        "vaccine",
        "league",
        "budget",
        "castle",
        "protein",
        "harbor",
        "satellite",
        "orchestra",
        "glacier",
        "festival",
        "tariff",
        "volcano",
        "library",
        "reactor",
        "pilgrim",
        "canyon",
        "senate",
        "quantum",
        "harvest",
        "lantern",
    ];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut s = String::new();
    for i in 0..n {
        let text: Vec<&str> = (0..12)
            .map(|_| WORDS[rng.random_range(0..WORDS.len())])
            .collect();
        let v = serde_json::json!({
            "id": format!("{tag}-{i}"),
            "time": format!("2026-02-{:02}T10:00:00Z", 1 + i % 28),
            "text": text.join(" "),
        });
        s.push_str(&v.to_string());
        s.push('\n');
    }
    s
}

/// Start `novad run` with exactly `args` after the inbox and store (no test defaults).
fn start_with(d: &Dirs, args: &[&str]) -> Daemon {
    Daemon::start_exactly(d, args)
}

fn log_of(d: &Dirs) -> String {
    std::fs::read_to_string(d.log()).unwrap_or_default()
}

fn wait_up(d: &Dirs, before: usize) {
    wait_for(60, "the daemon is up", || {
        log_of(d).matches("novad running").count() > before
    });
}

fn status(d: &Dirs) -> serde_json::Value {
    status_json(d, 1000)
}

fn verdicts(store: &str) -> Vec<serde_json::Value> {
    jsonl(&novad_ok(&[
        "verdicts", "--store", store, "--format", "jsonl",
    ]))
}

/// Every line of every file in `dir` (ids of the JSON objects).
fn ids_in(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in files_in(dir) {
        if f.ends_with(".error") {
            continue;
        }
        for l in std::fs::read_to_string(dir.join(f)).unwrap().lines() {
            if l.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            out.push(v["id"].as_str().unwrap().to_string());
        }
    }
    out
}

#[test]
fn slow_appenders_never_move_a_line_without_a_verdict() {
    let d = Dirs::new();
    std::fs::create_dir_all(d.inbox()).unwrap();
    // settle 300 ms, appends 1 s apart: every file is taken while its writer is still going
    let daemon = start_with(&d, &["--k", "5", "--settle-ms", "300", "--poll-ms", "200"]);
    wait_up(&d, 0);
    let line = |tag: &str, i: u32| {
        format!(r#"{{"id":"{tag}-{i}","text":"slow writer line {i} about the {tag} harbor"}}"#)
    };
    // one appender opens the file for each line (`>>`), one keeps a descriptor open and ends
    // with a line written in two pieces
    let mut by_path = String::new();
    let mut held = String::from("exec 3>>held.jsonl; ");
    for i in 1..=6 {
        by_path.push_str(&format!(
            "echo '{}' >> open.jsonl; sleep 1; ",
            line("open", i)
        ));
        held.push_str(&format!("echo '{}' >&3; sleep 1; ", line("held", i)));
    }
    let last = line("held", 7);
    let (a, b) = last.split_at(20);
    held.push_str(&format!(
        "printf '%s' '{a}' >&3; sleep 1.5; printf '%s\\n' '{b}' >&3"
    ));
    let run = |script: String| {
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(d.inbox())
            .spawn()
            .unwrap()
    };
    let mut w1 = run(by_path);
    let mut w2 = run(held);
    assert!(w1.wait().unwrap().success() && w2.wait().unwrap().success());
    let want: HashSet<String> = (1..=6)
        .map(|i| format!("open-{i}"))
        .chain((1..=7).map(|i| format!("held-{i}")))
        .collect();
    wait_for(
        60,
        "every line has a verdict and the inbox is empty",
        || verdicts(&s(&d)).len() >= want.len() && files_in(&d.inbox()).is_empty(),
    );
    assert_eq!(stop(daemon), 0);
    let vs = verdicts(&s(&d));
    let got: Vec<String> = vs
        .iter()
        .map(|v| v["doc_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got.len(), want.len(), "one verdict per line: {got:?}");
    assert_eq!(got.iter().cloned().collect::<HashSet<_>>(), want);
    // what is in processed/ is exactly what has verdicts
    let mut moved = ids_in(&d.processed());
    moved.sort();
    let mut all: Vec<String> = want.into_iter().collect();
    all.sort();
    assert_eq!(moved, all, "processed/ holds every line once");
    assert!(files_in(&d.rejected()).is_empty());
}

#[test]
fn the_reported_slow_writer_with_the_default_settle_time_loses_nothing() {
    let d = Dirs::new();
    std::fs::create_dir_all(d.inbox()).unwrap();
    let daemon = start_with(&d, &["--k", "5"]);
    wait_up(&d, 0);
    let script = r#"for i in 1 2 3 4 5; do echo '{"id":"slow-'$i'","text":"slow writer line"}' >> slow.jsonl; sleep 1; done"#;
    let ok = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(d.inbox())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    wait_for(60, "all lines committed and moved", || {
        files_in(&d.inbox()).is_empty() && verdicts(&s(&d)).len() >= 5
    });
    assert_eq!(stop(daemon), 0);
    let ids: HashSet<String> = verdicts(&s(&d))
        .iter()
        .map(|v| v["doc_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 5);
    assert_eq!(ids_in(&d.processed()).len(), 5);
}

#[test]
fn an_idle_daemon_scans_the_inbox_about_once_per_poll() {
    let d = Dirs::new();
    let daemon = start_with(&d, &["--k", "5"]); // default --poll-ms 1000
    wait_up(&d, 0);
    std::thread::sleep(Duration::from_secs(2));
    let scans = |d: &Dirs| status(d)["inbox_scans"].as_u64().expect("inbox_scans");
    let s0 = scans(&d);
    std::thread::sleep(Duration::from_secs(6));
    let s1 = scans(&d);
    let rate = (s1 - s0) as f64 / 6.0;
    // one scan per second of polling; the status requests themselves cause none
    assert!(
        (0.5..=2.0).contains(&rate),
        "{rate} scans/s on an empty inbox"
    );
    assert_eq!(stop(daemon), 0);
    // without a daemon the field is absent
    assert!(status(&d).get("inbox_scans").is_none());
}

/// The timestep of every verdict by document id.
fn timesteps_by_id(store: &str) -> HashMap<String, u64> {
    verdicts(store)
        .iter()
        .map(|v| {
            (
                v["doc_id"].as_str().unwrap().to_string(),
                v["timestep"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_large_file_becomes_consecutive_timesteps_whose_records_replay_it_exactly() {
    let d = Dirs::new();
    let body = synth(100, "big", 3);
    let path = d.tmp.path().join("big.jsonl");
    std::fs::write(&path, &body).unwrap();
    let out = novad_ok(&[
        "ingest",
        "--store",
        &s(&d),
        "--k",
        "5",
        "--max-batch-docs",
        "30",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.lines().count(), 4, "{out}");
    let ts = timesteps_by_id(&s(&d));
    assert_eq!(ts.len(), 100);
    for i in 0..100 {
        assert_eq!(ts[&format!("big-{i}")], (i / 30) as u64, "big-{i}");
    }
    // the file records: contiguous ranges covering the file, keyed by the hash of the prefix
    // up to their end, and re-parsing each range gives that timestep's documents
    let store = novad::store::Store::open(&d.store()).unwrap();
    let mut recs: Vec<(Vec<u8>, novad::store::schema::FileRecord)> = store
        .tree(novad::store::schema::FILES)
        .iter()
        .map(|kv| {
            let (k, v) = kv.unwrap();
            (k.to_vec(), postcard::from_bytes(&v).unwrap())
        })
        .collect();
    recs.sort_by_key(|r| r.1.timestep);
    assert_eq!(recs.len(), 4);
    let bytes = body.as_bytes();
    let mut at = 0u64;
    let mut line = 1u64;
    for (key, rec) in &recs {
        let r = rec.range.as_ref().expect("a byte range");
        assert_eq!((r.start, r.first_line), (at, line));
        assert_eq!(
            key.as_slice(),
            blake3::hash(&bytes[..r.end as usize]).as_bytes()
        );
        let part = &bytes[r.start as usize..r.end as usize];
        assert_eq!(&r.hash, blake3::hash(part).as_bytes());
        let mut lines = novad::batch::LineReader::new(part, r.start, r.end, r.first_line);
        let mut ids = Vec::new();
        while let Some(raw) = lines.next_line(None).unwrap() {
            let doc = novad::batch::parse_line(novad::batch::Format::Jsonl, "big.jsonl", &raw, 0)
                .unwrap()
                .unwrap();
            ids.push(doc.id);
        }
        assert_eq!(lines.number(), r.next_line);
        assert_eq!(ids.len() as u64, rec.docs);
        assert!(ids.iter().all(|id| ts[id] == rec.timestep));
        at = r.end;
        line = r.next_line;
    }
    assert_eq!(at, bytes.len() as u64);
    drop(store);
    // a byte cap cuts at the line that reaches it
    let d2 = Dirs::new();
    let out = novad_ok(&[
        "ingest",
        "--store",
        &s(&d2),
        "--k",
        "5",
        "--max-batch-bytes",
        "4000",
        path.to_str().unwrap(),
    ]);
    let n = out.lines().count();
    let avg = body.len() / 100;
    assert!(
        n >= body.len() / (4000 + avg) && n <= body.len() / 4000 + 1,
        "{n} timesteps: {out}"
    );
    assert_eq!(timesteps_by_id(&s(&d2)).len(), 100);
}

#[test]
fn kill_9_and_sigterm_in_the_middle_of_a_file_resume_with_nothing_lost_or_duplicated() {
    const DOCS: usize = 3000;
    const PER: usize = 20;
    let d = Dirs::new();
    let body = synth(DOCS, "mid", 5);
    let per = PER.to_string();
    let args = ["--k", "5", "--max-batch-docs", per.as_str()];
    // reference: uninterrupted, same limits
    let reference = d.tmp.path().join("ref-files/mid.jsonl");
    std::fs::create_dir_all(reference.parent().unwrap()).unwrap();
    std::fs::write(&reference, &body).unwrap();
    let ref_store = d.tmp.path().join("ref").display().to_string();
    let mut a = vec!["ingest", "--store", &ref_store];
    a.extend(args);
    a.push(reference.to_str().unwrap());
    novad_ok(&a);
    let want = novad_ok(&["digest", "--store", &ref_store]);

    d.drop_file("mid.jsonl", body.as_bytes());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let count = |d: &Dirs| status(d)["verdicts"].as_u64().unwrap_or(0) as usize;
    let mut mid_kills = 0;
    let mut starts = 0;
    let mut last = 0;
    for _ in 0..5 {
        let daemon = start_with(&d, &args);
        wait_up(&d, starts);
        starts += 1;
        // kill soon after the daemon committed a further part of the file
        wait_for(120, "a further timestep", || count(&d) > last);
        std::thread::sleep(Duration::from_millis(rng.random_range(0..20)));
        daemon.kill9();
        let n = count(&d);
        assert_eq!(n % PER, 0, "whole timesteps only ({n})");
        assert!(n >= last);
        if n < DOCS && files_in(&d.inbox()) == ["mid.jsonl"] {
            mid_kills += 1;
        }
        assert!(files_in(&d.processed()).is_empty() || n == DOCS);
        last = n;
        if n == DOCS {
            break;
        }
    }
    assert!(mid_kills >= 3, "kills landed mid-file ({mid_kills})");
    // SIGTERM mid-file: stops after the timestep in progress, exit 0, the file stays
    let daemon = start_with(&d, &args);
    wait_up(&d, starts);
    starts += 1;
    wait_for(120, "a further timestep", || count(&d) > last);
    assert_eq!(stop(daemon), 0);
    let n = count(&d);
    assert!(n < DOCS, "stopped before the end ({n})");
    assert_eq!(n % PER, 0, "whole timesteps only ({n})");
    assert!(log_of(&d).contains("resumes_at_byte"));
    assert_eq!(files_in(&d.inbox()), ["mid.jsonl"]);
    // the rest
    let daemon = start_with(&d, &args);
    wait_up(&d, starts);
    wait_for(120, "the file is done", || {
        files_in(&d.processed()) == ["mid.jsonl"]
    });
    assert_eq!(stop(daemon), 0);
    let ts = timesteps_by_id(&s(&d));
    assert_eq!(ts.len(), DOCS);
    assert_eq!(verdicts(&s(&d)).len(), DOCS, "each document exactly once");
    for i in 0..DOCS {
        assert_eq!(ts[&format!("mid-{i}")], (i / PER) as u64, "mid-{i}");
    }
    assert_eq!(novad_ok(&["digest", "--store", &s(&d)]), want);
}

#[test]
fn sighup_stops_the_daemon_cleanly() {
    let d = Dirs::new();
    let mut daemon = start_with(&d, &["--k", "5"]);
    wait_up(&d, 0);
    daemon.signal("HUP");
    let code = wait_child(&mut daemon.child, Duration::from_secs(30));
    assert_eq!(code, Some(0));
    assert!(log_of(&d).contains("shutting down"));
    assert!(!d.store().join("novad.sock").exists(), "socket removed");
}

/// Start a daemon, let it ingest a first file, run `make` (which puts something into the inbox)
/// and wait for `rejected/<name>` and its note; check the note and that a later file still goes
/// through. Returns the note and the log.
fn rejected_after(d: &Dirs, name: &str, make: impl FnOnce(&Dirs)) -> (String, String) {
    let daemon = start_with(d, &["--k", "5", "--settle-ms", "200", "--poll-ms", "100"]);
    wait_up(d, 0);
    d.drop_file("first.jsonl", synth(20, "first", 1).as_bytes());
    wait_for(60, "first processed", || {
        files_in(&d.processed()).contains(&"first.jsonl".to_string())
    });
    make(d);
    let note = d.rejected().join(format!("{name}.error"));
    wait_for(60, "rejected with a note", || {
        note.exists() && d.rejected().join(name).symlink_metadata().is_ok()
    });
    d.drop_file("after.jsonl", synth(10, "after", 2).as_bytes());
    wait_for(60, "after processed", || {
        files_in(&d.processed()).contains(&"after.jsonl".to_string())
    });
    assert_eq!(stop(daemon), 0, "the daemon kept running");
    (std::fs::read_to_string(note).unwrap(), log_of(d))
}

#[test]
fn a_fifo_and_a_socket_are_rejected_without_being_opened() {
    let d = Dirs::new();
    let (note, _) = rejected_after(&d, "pipe.jsonl", |d| {
        let p = std::ffi::CString::new(d.inbox().join("pipe.jsonl").to_str().unwrap()).unwrap();
        // SAFETY: a valid C string path
        assert_eq!(unsafe { libc::mkfifo(p.as_ptr(), 0o644) }, 0);
    });
    assert!(note.contains("FIFO"), "{note}");
    let d = Dirs::new();
    let (note, _) = rejected_after(&d, "sock.jsonl", |d| {
        let l = std::os::unix::net::UnixListener::bind(d.inbox().join("sock.jsonl")).unwrap();
        std::mem::forget(l);
    });
    assert!(note.contains("socket"), "{note}");
    assert_eq!(verdicts(&s(&d)).len(), 30);
}

#[test]
fn a_second_file_with_committed_content_is_named_a_duplicate() {
    let d = Dirs::new();
    let body = synth(20, "first", 1); // the same content as first.jsonl
    let (note, log) = rejected_after(&d, "copy.jsonl", |d| {
        d.drop_file("copy.jsonl", body.as_bytes())
    });
    assert!(
        note.contains("duplicate of `first.jsonl`, timestep 0"),
        "{note}"
    );
    assert!(!note.contains("restart") && !log.contains("before a restart"));
    assert_eq!(verdicts(&s(&d)).len(), 30);
}

#[test]
fn a_control_character_in_a_file_name_is_escaped_in_the_log() {
    let d = Dirs::new();
    let name = "evil\nname\u{1b}[31m.jsonl";
    let (note, log) = rejected_after(&d, name, |d| d.drop_file(name, b"{not json\n"));
    assert!(note.contains("line 1"), "{note}");
    assert!(log.contains(r"evil\nname\u{1b}[31m.jsonl"), "{log}");
    assert!(!log.contains('\u{1b}'), "no raw escape byte in the log");
    // every log line is a whole record (starts with its timestamp)
    for l in log.lines() {
        assert!(l.starts_with("20"), "broken log line: {l:?}");
    }
}

#[test]
fn a_time_beyond_year_9999_is_rejected_naming_file_and_line() {
    let d = Dirs::new();
    let f = d.tmp.path().join("future.jsonl");
    std::fs::write(
        &f,
        "{\"text\":\"fine\",\"time\":1700000000}\n{\"text\":\"far\",\"time\":253402300800}\n",
    )
    .unwrap();
    let o = novad(&["ingest", "--store", &s(&d), f.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("future.jsonl") && err.contains("line 2") && err.contains("9999"),
        "{err}"
    );
    let st = status(&d);
    assert_eq!(st["verdicts"], 0, "nothing applied");
}

#[test]
fn duplicate_ids_in_one_file_are_warned_with_their_lines_and_both_kept() {
    let d = Dirs::new();
    let (_, log) = rejected_after(&d, "bad.jsonl", |d| {
        d.drop_file(
            "dups.jsonl",
            b"{\"id\":\"x\",\"text\":\"alpha river\"}\n{\"id\":\"y\",\"text\":\"beta canyon\"}\n{\"id\":\"x\",\"text\":\"gamma harbor\"}\n",
        );
        wait_for(60, "dups processed", || {
            files_in(&d.processed()).contains(&"dups.jsonl".to_string())
        });
        d.drop_file("bad.jsonl", b"{\"text\": 1}\n");
    });
    let warn = log
        .lines()
        .find(|l| l.contains("duplicate document id"))
        .expect("a warning");
    assert!(
        warn.contains("dups.jsonl")
            && warn.contains("id=x")
            && warn.contains("first_line=1")
            && warn.contains("line=3"),
        "{warn}"
    );
    let xs = verdicts(&s(&d))
        .into_iter()
        .filter(|v| v["doc_id"] == "x")
        .count();
    assert_eq!(xs, 2, "both documents with id x have a verdict");
}

#[test]
fn an_unreadable_file_is_warned_about_once_then_rejected_with_the_reason() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let d = Dirs::new();
    // as root, permissions do not stop reads: run the daemon as an unprivileged user
    // SAFETY: geteuid has no preconditions
    let root = unsafe { libc::geteuid() } == 0;
    std::fs::set_permissions(d.tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let log = std::fs::File::create(d.log()).unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["run", "--inbox"])
        .arg(d.inbox())
        .arg("--store")
        .arg(d.store())
        .args(["--k", "5", "--settle-ms", "200", "--poll-ms", "100"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    if root {
        cmd.uid(65534).gid(65534);
    }
    let daemon = Daemon {
        child: cmd.spawn().unwrap(),
    };
    wait_up(&d, 0);
    let p = d.inbox().join("secret.jsonl");
    std::fs::write(&p, synth(5, "secret", 4)).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
    let note = d.rejected().join("secret.jsonl.error");
    wait_for(60, "rejected after the grace period", || note.exists());
    let text = std::fs::read_to_string(&note).unwrap();
    assert!(
        text.contains("cannot be read") && text.contains("ermission denied"),
        "{text}"
    );
    assert!(d.rejected().join("secret.jsonl").exists());
    assert_eq!(stop(daemon), 0);
    let warned = log_of(&d).matches("cannot read batch file").count();
    assert_eq!(warned, 1, "warned once: {}", log_of(&d));
}
