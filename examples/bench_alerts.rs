//! What webhooks cost ingest, and how soon a receiver hears of a commit.
//!
//!     cargo build --release && cargo run --release --example bench_alerts -- [files] [docs] [runs]
//!
//! For each of four receivers — none (no `--notify`), one that answers 200 at once (`up`),
//! one that nothing listens for (`down`: every attempt is refused, messages wait in the
//! outbox) and one that answers 200 after 5 s (`slow`) — `files` batch files of `docs` 20
//! Newsgroups posts each (defaults 40 × 200) wait in the inbox of a new store; the real
//! `novad run` ingests them, and the time from its first file in processed/ to its last is
//! the backlog's ingest time (the first file, the bootstrap, is left out). Runs (default 3)
//! go round the four receivers in turn, so a drift of the machine reaches each alike; the
//! report is each receiver's median and its slowdown against none.
//!
//! Latency (with `up`): the receiver's arrival time of each message minus the time the
//! daemon logged that timestep as committed (`timestep committed`, written once the timestep
//! is durable); the same clock, one machine.
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "../tests/common/receiver.rs"]
#[allow(dead_code)]
mod receiver;

use harness::*;
use receiver::{free_port, Answer, Receiver};
use std::collections::HashMap;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    None,
    Up,
    Down,
    Slow,
}

/// Unix ms of each `timestep committed` line of the log, by timestep.
fn committed_times(log: &str) -> HashMap<u64, i64> {
    let mut out = HashMap::new();
    for l in log.lines().filter(|l| l.contains("timestep committed")) {
        let Some(ts) = l.split_whitespace().next() else {
            continue;
        };
        let Ok(t) = chrono::DateTime::parse_from_rfc3339(ts) else {
            continue;
        };
        let Some(step) = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("timestep="))
            .and_then(|v| v.parse().ok())
        else {
            continue;
        };
        out.insert(step, t.timestamp_millis());
    }
    out
}

/// One run: seconds to ingest files 2..=n, and (with `up`) the latencies in ms.
fn run(mode: Mode, files: usize, docs: usize) -> (f64, Vec<i64>, usize) {
    let d = Dirs::new();
    std::fs::create_dir_all(d.inbox()).unwrap();
    for i in 0..files {
        let day = format!("2026-03-{:02}", 1 + i % 28);
        let b = jsonl_batch(i * docs, docs, &day, &format!("f{i}"));
        std::fs::write(d.inbox().join(format!("{i:03}.jsonl")), b).unwrap();
    }
    let port = free_port();
    let rx = match mode {
        Mode::Up => Some(Receiver::start(port, Answer::Status(200))),
        Mode::Slow => Some(Receiver::start(port, Answer::Late(Duration::from_secs(5)))),
        _ => None,
    };
    let url = format!("http://127.0.0.1:{port}/hook");
    let mut args = vec!["--no-http"];
    if mode != Mode::None {
        args.extend(["--notify", url.as_str()]);
    }
    let daemon = Daemon::start(&d, &args);
    wait_for(600, "the first file", || {
        !files_in(&d.processed()).is_empty()
    });
    let t0 = Instant::now();
    wait_for(3600, "every file", || {
        files_in(&d.processed()).len() == files
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut lat = Vec::new();
    let mut sent = 0;
    if let Some(rx) = &rx {
        std::thread::sleep(Duration::from_secs(if mode == Mode::Slow { 1 } else { 2 }));
        let log = std::fs::read_to_string(d.log()).unwrap();
        let when = committed_times(&log);
        let got = rx.got();
        sent = got.len();
        if mode == Mode::Up {
            for g in got {
                let t = g.json()["timestep"].as_u64().unwrap();
                if let Some(c) = when.get(&t) {
                    lat.push(g.at_ms - c);
                }
            }
        }
    }
    stop(daemon);
    (secs, lat, sent)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut a = std::env::args().skip(1);
    let files: usize = a.next().map_or(40, |s| s.parse().expect("files"));
    let docs: usize = a.next().map_or(200, |s| s.parse().expect("docs"));
    let runs: usize = a.next().map_or(3, |s| s.parse().expect("runs"));
    let modes = [Mode::None, Mode::Up, Mode::Down, Mode::Slow];
    let mut secs: HashMap<usize, Vec<f64>> = HashMap::new();
    let mut lat: Vec<i64> = Vec::new();
    for r in 0..runs {
        for k in 0..modes.len() {
            let i = (k + r) % modes.len();
            let (s, l, sent) = run(modes[i], files, docs);
            println!(
                "run {r} {:?}: {s:.2} s for {} files ({} messages received)",
                modes[i],
                files - 1,
                sent
            );
            secs.entry(i).or_default().push(s);
            lat.extend(l);
        }
    }
    let base = median(secs.get_mut(&0).unwrap());
    println!("\nbacklog of {files} files × {docs} documents, median of {runs} runs:");
    for (i, m) in modes.iter().enumerate() {
        let s = median(secs.get_mut(&i).unwrap());
        println!(
            "  receiver {:<5} {s:7.2} s  {:+6.1} % against none",
            format!("{m:?}").to_lowercase(),
            100.0 * (s / base - 1.0)
        );
    }
    lat.sort();
    if !lat.is_empty() {
        let q = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize];
        println!(
            "alert latency, commit logged → receiver (ms), {} messages: p50 {} p90 {} p99 {} max {}",
            lat.len(),
            q(0.5),
            q(0.9),
            q(0.99),
            lat[lat.len() - 1]
        );
    }
}
