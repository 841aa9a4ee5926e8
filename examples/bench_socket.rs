//! The query socket under load: many concurrent clients, with and without slow-loris clients
//! holding connections, and one 1,000 MiB request line.
//!
//!     cargo build --release && cargo run --release --example bench_socket -- [clients] [loris] [rounds] [limit]
//!
//! Builds a store of 2,000 synthetic documents with `novad ingest`, starts the real
//! `novad run` on it, then for each scenario runs `rounds` rounds of `clients` (default 200)
//! threads released together, each asking for `novad verdicts --limit <limit>` (default 100)
//! through the library client (which retries "busy" answers with backoff and jitter, as the
//! CLI does). Prints how many were answered and the latency percentiles. The second scenario
//! first connects `loris` (default 32) clients that send one byte a second and reconnect as
//! soon as the daemon cuts them off, and lasts at least twice the request timeout. Last, one client sends a 1,000 MiB line without a
//! newline; the daemon's peak RSS (VmHWM) is printed before and after.
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "../tests/common/synthetic.rs"]
mod synthetic;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use harness::*;
use novad::daemon::api::{self, ClientOptions};
use novad::query::VerdictFilter;

fn vm_hwm_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// One round: `clients` threads released together, each one query. Returns the latencies
/// (ms) of the answered ones and the number of failures.
fn round(store: &Path, clients: usize, limit: usize) -> (Vec<f64>, usize) {
    let gate = Arc::new(Barrier::new(clients));
    let handles: Vec<_> = (0..clients)
        .map(|_| {
            let gate = Arc::clone(&gate);
            let store = store.to_path_buf();
            std::thread::spawn(move || {
                let filter = VerdictFilter {
                    limit: Some(limit),
                    ..Default::default()
                };
                gate.wait();
                let t = Instant::now();
                let r = api::remote_verdicts(&store, &filter, &ClientOptions::default());
                match r {
                    Ok(Some(vs)) if vs.len() == limit => Ok(t.elapsed().as_secs_f64() * 1e3),
                    Ok(other) => Err(format!("unexpected answer: {:?}", other.map(|v| v.len()))),
                    Err(e) => Err(e.to_string()),
                }
            })
        })
        .collect();
    let mut lat = Vec::new();
    let mut failed = 0;
    for h in handles {
        match h.join().unwrap() {
            Ok(ms) => lat.push(ms),
            Err(e) => {
                failed += 1;
                eprintln!("client failed: {e}");
            }
        }
    }
    (lat, failed)
}

/// `rounds` rounds, and more until `min_time` has passed.
fn scenario(
    name: &str,
    store: &Path,
    clients: usize,
    (rounds, min_time): (usize, Duration),
    limit: usize,
) {
    let mut all = Vec::new();
    let mut failed = 0;
    let t = Instant::now();
    let mut done = 0;
    while done < rounds || t.elapsed() < min_time {
        done += 1;
        let (lat, f) = round(store, clients, limit);
        all.extend(lat);
        failed += f;
    }
    let wall = t.elapsed().as_secs_f64();
    all.sort_by(f64::total_cmp);
    println!(
        "{name:<34} {:>6}/{:<6} answered  p50 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms  ({} failed, {wall:.1} s)",
        all.len(),
        clients * done,
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        all.last().copied().unwrap_or(f64::NAN),
        failed
    );
}

/// Slow-loris clients: each sends a byte a second and reconnects when cut off, until `stop`.
/// Returns the threads and a counter of connections the daemon cut off.
fn start_loris(
    sock: &Path,
    n: usize,
    stop: &Arc<AtomicBool>,
) -> (Vec<std::thread::JoinHandle<()>>, Arc<AtomicUsize>) {
    let cut = Arc::new(AtomicUsize::new(0));
    let hs = (0..n)
        .map(|_| {
            let (sock, stop, cut) = (sock.to_path_buf(), Arc::clone(stop), Arc::clone(&cut));
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let Ok(mut c) = UnixStream::connect(&sock) else {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    };
                    let _ = c.set_read_timeout(Some(Duration::from_millis(1000)));
                    let mut r = BufReader::new(c.try_clone().unwrap());
                    while !stop.load(Ordering::SeqCst) {
                        if c.write_all(b" ").is_err() {
                            break;
                        }
                        let mut line = String::new();
                        // a line is the daemon's goodbye (timeout); an error means a
                        // second passed without one: drip again
                        if r.read_line(&mut line).is_ok() {
                            cut.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    (hs, cut)
}

/// Send a 1,000 MiB line; returns the daemon's answer and how many bytes went out.
fn oversize(sock: &PathBuf) -> (String, u64) {
    let mut c = UnixStream::connect(sock).unwrap();
    let reader = c.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut sent = 0u64;
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..1000 {
            if c.write_all(&chunk).is_err() {
                break;
            }
            sent += chunk.len() as u64;
        }
        sent
    });
    let mut answer = String::new();
    let _ = BufReader::new(reader).take(4096).read_line(&mut answer);
    (answer.trim_end().to_string(), sender.join().unwrap())
}

fn main() {
    let mut a = std::env::args().skip(1);
    let clients: usize = a.next().map(|s| s.parse().unwrap()).unwrap_or(200);
    let loris: usize = a.next().map(|s| s.parse().unwrap()).unwrap_or(32);
    let rounds: usize = a.next().map(|s| s.parse().unwrap()).unwrap_or(5);
    let limit: usize = a.next().map(|s| s.parse().unwrap()).unwrap_or(100);
    let d = Dirs::new();
    let store = d.store();
    let mut files = Vec::new();
    for i in 0..4 {
        let f = d.tmp.path().join(format!("{i}.jsonl"));
        let day = format!("2026-03-{:02}", i + 1);
        std::fs::write(&f, synthetic::batch(i, 500, &day)).unwrap();
        files.push(f.display().to_string());
    }
    let mut args = vec!["ingest", "--store", store.to_str().unwrap(), "--k", "40"];
    args.extend(files.iter().map(|s| s.as_str()));
    novad_ok(&args);
    let daemon = Daemon::start(&d, &[]);
    wait_for(60, "the daemon is up", || {
        std::fs::read_to_string(d.log()).is_ok_and(|l| l.contains("novad running"))
    });
    let pid = daemon.child.id();
    let sock = api::socket_path(&store);
    let lim = api::Limits::default();
    println!(
        "limits: {} connections, {} B requests, {:?} to send a request, {:?} per exchange",
        lim.max_connections, lim.max_request_bytes, lim.request_timeout, lim.deadline
    );
    println!("{clients} clients per round, {rounds} rounds, `verdicts --limit {limit}` each");
    scenario("plain", &store, clients, (rounds, Duration::ZERO), limit);
    let stop = Arc::new(AtomicBool::new(false));
    let (hs, cut) = start_loris(&sock, loris, &stop);
    std::thread::sleep(Duration::from_millis(500));
    // long enough for every slow client to be cut off and come back at least twice
    let min_time = lim.request_timeout * 2 + Duration::from_secs(1);
    scenario(
        &format!("with {loris} slow-loris clients"),
        &store,
        clients,
        (rounds, min_time),
        limit,
    );
    stop.store(true, Ordering::SeqCst);
    for h in hs {
        h.join().unwrap();
    }
    println!(
        "slow-loris connections cut off by the daemon: {}",
        cut.load(Ordering::SeqCst)
    );
    let before = vm_hwm_mib(pid);
    let t = Instant::now();
    let (answer, sent) = oversize(&sock);
    println!(
        "1000 MiB request line: answered in {:.1} ms after {:.2} MiB sent: {answer}",
        t.elapsed().as_secs_f64() * 1e3,
        sent as f64 / (1 << 20) as f64
    );
    println!(
        "daemon peak RSS (VmHWM): {before:.1} MiB before, {:.1} MiB after",
        vm_hwm_mib(pid)
    );
    assert_eq!(stop_daemon(daemon), 0);
}

fn stop_daemon(d: Daemon) -> i32 {
    harness::stop(d)
}
