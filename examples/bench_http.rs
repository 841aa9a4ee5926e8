//! HTTP API under load while the daemon ingests: 200 concurrent clients, latency p50/p99, and
//! how much slower ingest gets.
//!
//!     cargo build --release && cargo run --release --example bench_http -- [clients] [pairs] [think_ms] [client_nice]
//!
//! Starts the real `novad run --http 127.0.0.1:0 --k 100`, bootstraps on 1,000 20NG posts, then
//! ingests `2 × pairs` (default 2 × 4) batches of 500 posts one at a time: the first of each
//! pair with no client, the second while `clients` (default 200) threads each loop over the
//! dashboard's requests (status, timesteps, newest novel verdicts, topics, one verdict) with
//! `think_ms` (default 0) between requests. Ingest time is from the file's rename into the
//! inbox to its arrival in processed/. Prints request latency percentiles and the ingest
//! slowdown (mean loaded / mean unloaded − 1).
//!
//! The client threads run on the daemon's machine, but stand for remote clients: each lowers
//! itself to nice `client_nice` (default 19, the lowest priority, the same as the daemon's
//! HTTP threads) with `setpriority(PRIO_PROCESS, gettid(), client_nice)`, so the load
//! generator takes CPU from the daemon's ingest no more than the daemon's own HTTP threads
//! do. `client_nice` 0 runs them at normal priority, competing with ingest for the cores as
//! much as ingest itself: that measures the load generator as much as the daemon. Each
//! client keeps one HTTP/1.1 keep-alive connection (ureq's agent pool) for its requests.
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "../tests/common/http.rs"]
#[allow(dead_code)]
mod http;

use harness::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((p * (sorted.len() - 1) as f64).round()) as usize]
}

fn main() {
    let mut a = std::env::args().skip(1);
    let clients: usize = a.next().map(|s| s.parse().unwrap()).unwrap_or(200);
    let pairs: usize = a.next().map(|s| s.parse().unwrap()).unwrap_or(4);
    let think: u64 = a.next().map(|s| s.parse().unwrap()).unwrap_or(0);
    let nice: i32 = a.next().map(|s| s.parse().unwrap()).unwrap_or(19);
    let d = Dirs::new();
    let s = http::start(&d, &["--k", "100"]);
    let ingest = |name: &str, body: &str| -> f64 {
        let before = files_in(&d.processed()).len();
        let t = Instant::now();
        d.drop_file(name, body.as_bytes());
        while files_in(&d.processed()).len() == before {
            std::thread::sleep(Duration::from_millis(2));
            assert!(t.elapsed() < Duration::from_secs(600), "timeout on {name}");
        }
        t.elapsed().as_secs_f64()
    };
    ingest(
        "000-boot.jsonl",
        &jsonl_batch(0, 1000, "2026-02-28", "boot"),
    );
    let first = http::api(&s, "/api/v1/verdicts?limit=1")["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();

    let load = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let lat: Arc<Mutex<Vec<f64>>> = Arc::default();
    let errors = Arc::new(AtomicU64::new(0));
    let paths = [
        "/api/v1/status".to_string(),
        "/api/v1/timesteps".to_string(),
        "/api/v1/verdicts?novel=true&order=desc&limit=25".to_string(),
        "/api/v1/topics".to_string(),
        format!("/api/v1/verdicts/{first}"),
    ];
    let mut handles = Vec::new();
    for c in 0..clients {
        let (load, stop, lat, errors) = (load.clone(), stop.clone(), lat.clone(), errors.clone());
        let (base, token, paths) = (s.base.clone(), s.token.clone(), paths.clone());
        handles.push(std::thread::spawn(move || {
            // SAFETY: system calls on this thread's own id only
            unsafe {
                let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                libc::setpriority(libc::PRIO_PROCESS, tid, nice);
            }
            let agent = http::agent();
            let mut mine = Vec::new();
            let mut i = c;
            // bounded: stops when told, or after 10 minutes
            let t0 = Instant::now();
            while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(600) {
                if !load.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                let t = Instant::now();
                let r = agent
                    .get(format!("{base}{}", paths[i % paths.len()]))
                    .header("Authorization", format!("Bearer {token}"))
                    .call();
                match r {
                    Ok(mut r) if r.status() == 200 => {
                        let _ = r.body_mut().read_to_vec();
                        mine.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                i += 1;
                if think > 0 {
                    std::thread::sleep(Duration::from_millis(think));
                }
            }
            lat.lock().unwrap().extend(mine);
        }));
    }
    let (mut quiet, mut busy) = (Vec::new(), Vec::new());
    let mut loaded_secs = 0.0;
    for p in 0..pairs {
        for (j, under_load) in [false, true].into_iter().enumerate() {
            let n = 2 * p + j;
            let body = jsonl_batch(
                1000 + n * 500,
                500,
                &format!("2026-03-{:02}", 1 + n % 28),
                &format!("b{n}"),
            );
            load.store(under_load, Ordering::SeqCst);
            let secs = ingest(&format!("{:03}.jsonl", n + 1), &body);
            load.store(false, Ordering::SeqCst);
            println!(
                "batch {n:>2} ({}): {secs:.3} s",
                if under_load {
                    "under load"
                } else {
                    "no clients"
                }
            );
            if under_load {
                busy.push(secs);
                loaded_secs += secs;
            } else {
                quiet.push(secs);
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    for h in handles {
        h.join().unwrap();
    }
    let mut l = lat.lock().unwrap().clone();
    l.sort_by(f64::total_cmp);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "{clients} clients at nice {nice}, think {think} ms: {} requests in {loaded_secs:.1} s of ingest ({:.0} req/s), {} errors",
        l.len(),
        l.len() as f64 / loaded_secs,
        errors.load(Ordering::SeqCst)
    );
    println!(
        "latency ms: p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}",
        pct(&l, 0.5),
        pct(&l, 0.9),
        pct(&l, 0.99),
        l.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "ingest of a 500-post batch: {:.3} s without clients, {:.3} s under load: slowdown {:+.1} %",
        mean(&quiet),
        mean(&busy),
        100.0 * (mean(&busy) / mean(&quiet) - 1.0)
    );
    drop(s);
}
