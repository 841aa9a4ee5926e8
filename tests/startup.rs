//! Queries while a daemon starts: the store is locked from the moment the daemon opens it,
//! its socket comes up only once the model is loaded. A query in that window must wait for
//! one of the two (within --retry-secs) and answer. Drives the real binary.
#[path = "common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A store with a few committed timesteps, the daemon that made it stopped.
fn store_with_history(d: &Dirs) {
    let daemon = Daemon::start(d, &["--k", "20"]);
    for i in 0..4 {
        d.drop_file(
            &format!("b{i}.jsonl"),
            jsonl_batch(i * 60, 60, &format!("2026-05-0{}", i + 1), "s").as_bytes(),
        );
    }
    wait_for(120, "four batches processed", || {
        files_in(&d.processed()).len() == 4
    });
    assert_eq!(daemon.stop(), 0);
}

fn verdict_count(out: &str) -> usize {
    jsonl(out).len()
}

/// kill -9 the daemon, start it again and query a few milliseconds later: every query
/// answers, with every committed verdict, whether it reaches the daemon's socket or the store.
#[test]
fn queries_right_after_a_restart_answer() {
    let d = Dirs::new();
    store_with_history(&d);
    let store = s(&d);
    let want = verdict_count(&novad_ok(&[
        "verdicts", "--store", &store, "--format", "jsonl",
    ]));
    assert_eq!(want, 240);
    for (i, pause_ms) in [5u64, 5, 10, 20, 30, 50, 80, 120].into_iter().enumerate() {
        let daemon = Daemon::start(&d, &["--k", "20"]);
        std::thread::sleep(Duration::from_millis(pause_ms));
        let args: &[&str] = if i % 2 == 0 {
            &["verdicts", "--store", &store, "--format", "jsonl"]
        } else {
            &["status", "--store", &store, "--format", "json"]
        };
        let o = novad(args);
        assert!(
            o.status.success(),
            "try {i} ({pause_ms} ms after start): {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let out = String::from_utf8_lossy(&o.stdout);
        if i % 2 == 0 {
            assert_eq!(verdict_count(&out), want, "try {i}");
        } else {
            let st: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(st["verdicts"], 240, "try {i}: {out}");
            assert_eq!(st["files"], 4, "try {i}: {out}");
        }
        daemon.kill9();
    }
}

/// A store locked for longer than the store's own lock wait (5 s) by a process without a
/// socket: the query keeps trying for its --retry-secs and answers once the lock is free;
/// with a shorter --retry-secs it fails naming the lock.
#[test]
fn a_query_waits_out_a_lock_within_retry_secs() {
    let d = Dirs::new();
    store_with_history(&d);
    let store = s(&d);
    let hold = |secs: u64| {
        let dir = d.store();
        std::thread::spawn(move || {
            let st = novad::store::Store::open(&dir).unwrap();
            std::thread::sleep(Duration::from_secs(secs));
            drop(st);
        })
    };
    let holder = hold(7);
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let o = Command::new(bin())
        .args(["verdicts", "--store", &store, "--format", "jsonl"])
        .args(["--retry-secs", "20"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(verdict_count(&String::from_utf8_lossy(&o.stdout)), 240);
    assert!(t.elapsed() >= Duration::from_secs(5), "{:?}", t.elapsed());
    holder.join().unwrap();

    let holder = hold(9);
    std::thread::sleep(Duration::from_millis(300));
    let o = novad(&["status", "--store", &store, "--retry-secs", "6"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("in use by another process"), "{err}");
    holder.join().unwrap();
}
