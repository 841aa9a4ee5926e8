//! Queries during the daemon's start-up: kill -9 the daemon, start it again, and query the
//! store a few milliseconds later, `tries` times.
//!
//!     cargo build --release && cargo run --release --example startup_race -- [tries] [batches]
//!
//! Builds a store of `batches` (default 40) committed batches of 60 posts each with
//! `novad ingest`, then per try: `novad run` on it, a pause cycling through 5, 10, 20, 30 and
//! 50 ms, `novad status --format json` (odd tries) or `novad verdicts --format jsonl` (even
//! tries), kill -9. Prints how many queries answered with every committed verdict, and the
//! slowest answer.
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use std::time::{Duration, Instant};

fn main() {
    let arg = |i: usize, d: usize| -> usize {
        std::env::args()
            .nth(i)
            .map(|s| s.parse().expect("a number"))
            .unwrap_or(d)
    };
    let (tries, batches) = (arg(1, 50), arg(2, 40));
    let d = Dirs::new();
    let store = s(&d);
    let mut files = Vec::new();
    let src = d.tmp.path().join("batches");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..batches {
        let f = src.join(format!("b{i:04}.jsonl"));
        let day = format!("2026-{:02}-{:02}", 1 + i / 28, 1 + i % 28);
        std::fs::write(&f, jsonl_batch(i * 60, 60, &day, &format!("r{i}"))).unwrap();
        files.push(f.display().to_string());
    }
    let mut args = vec!["ingest", "--store", &store];
    args.extend(files.iter().map(String::as_str));
    novad_ok(&args);
    let want = batches * 60;
    println!(
        "store: {batches} timesteps, {want} verdicts, {:.1} MB",
        novad::store::dir_size(&d.store()) as f64 / 1e6
    );
    let (mut ok, mut slowest) = (0, Duration::ZERO);
    for i in 0..tries {
        let pause = [5u64, 10, 20, 30, 50][i % 5];
        let daemon = Daemon::start(&d, &[]);
        std::thread::sleep(Duration::from_millis(pause));
        let t = Instant::now();
        let o = if i % 2 == 0 {
            novad(&["verdicts", "--store", &store, "--format", "jsonl"])
        } else {
            novad(&["status", "--store", &store, "--format", "json"])
        };
        let took = t.elapsed();
        let out = String::from_utf8_lossy(&o.stdout);
        let right = o.status.success()
            && if i % 2 == 0 {
                jsonl(&out).len() == want
            } else {
                serde_json::from_str::<serde_json::Value>(&out).is_ok_and(|v| v["verdicts"] == want)
            };
        if right {
            ok += 1;
            slowest = slowest.max(took);
        } else {
            println!(
                "try {i} ({pause} ms after start) failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            let log = std::fs::read_to_string(d.log()).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(3).collect();
            println!("  daemon log: {tail:?}");
        }
        daemon.kill9();
    }
    println!(
        "answered {ok} of {tries} queries made 5-50 ms after a restart; slowest answer {:.2} s",
        slowest.as_secs_f64()
    );
}
