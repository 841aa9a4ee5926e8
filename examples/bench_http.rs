//! HTTP API under load while the daemon ingests: concurrent clients, latency p50/p99, and
//! how much slower ingest gets.
//!
//!     cargo build --release && cargo run --release --example bench_http -- [clients] [pairs] [think_ms] [client_nice] [revalidate] [gzip]
//!
//! Starts the real `novad run --http 127.0.0.1:0 --k 100`, bootstraps on 1,000 20NG posts, then
//! ingests `2 × pairs` (default 2 × 4) batches of 500 posts one at a time: the first of each
//! pair with no client, the second while `clients` (default 200) clients each loop over the
//! dashboard's requests (status, timesteps, newest novel verdicts, topics, one verdict) with
//! `think_ms` (default 0) between requests. Ingest time is from the file's rename into the
//! inbox to its arrival in processed/. Prints request latency percentiles (as the clients saw
//! them, and until the kernel had each answer's last bytes — `SO_TIMESTAMPNS` — which leaves out
//! the load generator's own wait for a core on this shared machine), the ingest
//! slowdown (mean loaded / mean unloaded − 1), and where the CPU went (from
//! `/proc/PID/task/*/schedstat`: time run and time waited for a core, of the daemon's HTTP
//! threads, its other threads, and the load generator).
//!
//! Each client is one HTTP/1.1 keep-alive connection with one request in flight at a time (a
//! closed loop, like a dashboard's poll). The clients stand for remote ones, so the load
//! generator takes as little of the daemon's machine as it can: all clients are coroutines of one
//! thread waiting on the sockets (like `wrk`), each request a pre-built byte string, each
//! answer checked for its status and read to its `Content-Length`. That thread runs at nice
//! `client_nice` (default 19, the lowest priority); `client_nice` 0 competes with ingest as
//! much as ingest itself. With `revalidate` 1 a client sends `If-None-Match` with the tag of
//! its last answer for that path, as a browser does (a `304` then counts as an answer);
//! default 0: every answer is sent in full. With `gzip` 1 (the default) requests accept
//! compressed answers as a browser's do; 0 asks for plain JSON.
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;
#[path = "../tests/common/http.rs"]
#[allow(dead_code)]
mod http;

#[path = "bench_http/load.rs"]
mod load;

use harness::*;
use load::Phase;
use std::time::{Duration, Instant};

/// CPU time (run, runqueue wait; ns, from `/proc/PID/task/*/schedstat`) of the threads of
/// `pid` whose name starts with `prefix` (`in_group`) or does not (`!in_group`).
fn cpu_ns(pid: u32, prefix: &str, in_group: bool) -> (u64, u64) {
    let mut run_wait = (0, 0);
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return run_wait;
    };
    for e in dir.flatten() {
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if name.starts_with(prefix) != in_group {
            continue;
        }
        let s = std::fs::read_to_string(e.path().join("schedstat")).unwrap_or_default();
        let mut f = s.split_whitespace().map(|x| x.parse::<u64>().unwrap_or(0));
        run_wait.0 += f.next().unwrap_or(0);
        run_wait.1 += f.next().unwrap_or(0);
    }
    run_wait
}

/// CPU figures of one moment: daemon HTTP threads, the daemon's other threads (ingest), and
/// this process (the client threads), each (run, wait) in ns.
#[derive(Clone, Copy, Default)]
struct Cpu([(u64, u64); 3]);

impl Cpu {
    fn now(daemon: u32) -> Cpu {
        Cpu([
            cpu_ns(daemon, "novad-http", true),
            cpu_ns(daemon, "novad-http", false),
            cpu_ns(std::process::id(), "", true),
        ])
    }
    fn add_since(&mut self, before: Cpu, after: Cpu) {
        for i in 0..3 {
            self.0[i].0 += after.0[i].0.saturating_sub(before.0[i].0);
            self.0[i].1 += after.0[i].1.saturating_sub(before.0[i].1);
        }
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((p * (sorted.len() - 1) as f64).round()) as usize]
}

/// p50, p90, p99 and max of sorted latencies.
fn percentiles(sorted: &[f64]) -> String {
    format!(
        "p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}",
        pct(sorted, 0.5),
        pct(sorted, 0.9),
        pct(sorted, 0.99),
        sorted.last().copied().unwrap_or(f64::NAN)
    )
}

/// The ingest slowdown (mean loaded / mean unloaded − 1) and the half-width of its 95 %
/// interval from the pairs' differences (loaded − unloaded, each pair's two batches ingested
/// one after the other), both relative to the unloaded mean; `t` 2.0 (normal approximation;
/// 2.09 for 20 pairs).
fn slowdown(quiet: &[f64], busy: &[f64]) -> (f64, f64) {
    let n = quiet.len().min(busy.len()) as f64;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let q = mean(quiet);
    let d: Vec<f64> = busy.iter().zip(quiet).map(|(b, q)| b - q).collect();
    let dm = mean(&d);
    let sd = (d.iter().map(|x| (x - dm).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt();
    (mean(busy) / q - 1.0, 2.0 * sd / n.sqrt() / q)
}

fn main() {
    let mut a = std::env::args().skip(1);
    let clients: usize = a.next().map(|s| s.parse().unwrap()).unwrap_or(200);
    let pairs: usize = a.next().map(|s| s.parse().unwrap()).unwrap_or(4);
    let think: u64 = a.next().map(|s| s.parse().unwrap()).unwrap_or(0);
    let nice: i32 = a.next().map(|s| s.parse().unwrap()).unwrap_or(19);
    let revalidate = a.next().is_some_and(|s| s == "1");
    let gzip = a.next().is_none_or(|s| s == "1");
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

    let paths = [
        "/api/v1/status".to_string(),
        "/api/v1/timesteps".to_string(),
        "/api/v1/verdicts?order=desc&limit=15&novel=true".to_string(),
        "/api/v1/topics".to_string(),
        format!("/api/v1/verdicts/{first}"),
    ];
    let (phase, phase_rx) = tokio::sync::watch::channel(Phase::Idle);
    let host = s.base.trim_start_matches("http://").to_string();
    let gen = load::Load {
        addr: host.parse().unwrap(),
        requests: paths
            .iter()
            .map(|p| load::request(&host, p, &s.token, gzip))
            .collect(),
        clients,
        think: Duration::from_millis(think),
        revalidate,
    };
    let generator = std::thread::spawn(move || {
        // SAFETY: system calls on this thread's own id only
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, nice);
        }
        gen.run(phase_rx)
    });
    let (mut quiet, mut busy) = (Vec::new(), Vec::new());
    let mut loaded_secs = 0.0;
    let pid = s.daemon.child.id();
    // [no clients, under load]
    let mut cpu = [Cpu::default(); 2];
    for p in 0..pairs {
        for (j, under_load) in [false, true].into_iter().enumerate() {
            let n = 2 * p + j;
            let body = jsonl_batch(
                1000 + n * 500,
                500,
                &format!("2026-03-{:02}", 1 + n % 28),
                &format!("b{n}"),
            );
            let c0 = Cpu::now(pid);
            let _ = phase.send(if under_load { Phase::Load } else { Phase::Idle });
            let secs = ingest(&format!("{:03}.jsonl", n + 1), &body);
            let _ = phase.send(Phase::Idle);
            cpu[j].add_since(c0, Cpu::now(pid));
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
    let _ = phase.send(Phase::Stop);
    let (mut l, mut wire, errors, not_modified) = generator.join().unwrap();
    l.sort_by(f64::total_cmp);
    wire.sort_by(f64::total_cmp);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "{clients} clients at nice {nice}, think {think} ms, revalidate {revalidate}, gzip {gzip}: {} answers ({not_modified} of them 304) in {loaded_secs:.1} s of ingest ({:.0} req/s), {errors} errors",
        l.len(),
        l.len() as f64 / loaded_secs,
    );
    println!("latency ms: {}", percentiles(&l));
    println!(
        "latency ms until the kernel had the answer (the server's part, without the load generator's own wait for a core; {} answers stamped): {}",
        wire.len(),
        percentiles(&wire)
    );
    let (slow, half) = slowdown(&quiet, &busy);
    println!(
        "ingest of a 500-post batch: {:.3} s without clients, {:.3} s under load: slowdown {:+.1} % (95 % interval ±{:.1} points over {} pairs)",
        mean(&quiet),
        mean(&busy),
        100.0 * slow,
        100.0 * half,
        busy.len()
    );
    let sizes: Vec<String> = paths
        .iter()
        .map(|p| {
            let (_, body) = http::get(&s.base, p, Some(&s.token), &[]);
            let (_, _, zipped) =
                http::get_raw(&s.base, p, &s.token, &[("Accept-Encoding", "gzip")]);
            format!(
                "{} {} B ({} B gzip)",
                p.split('?').next().unwrap_or(p),
                body.len(),
                zipped.len()
            )
        })
        .collect();
    println!("answer sizes at the end: {}", sizes.join(", "));
    let ms = |ns: u64| ns as f64 / 1e6;
    for (j, what) in ["no clients", "under load"].iter().enumerate() {
        let [http, other, bench] = cpu[j].0;
        println!(
            "CPU ms per batch {what}: daemon HTTP threads run {:.0} wait {:.0}; daemon other threads run {:.0} wait {:.0}; clients run {:.0} wait {:.0}",
            ms(http.0) / pairs as f64,
            ms(http.1) / pairs as f64,
            ms(other.0) / pairs as f64,
            ms(other.1) / pairs as f64,
            ms(bench.0) / pairs as f64,
            ms(bench.1) / pairs as f64,
        );
    }
    if !l.is_empty() {
        let [http, _, bench] = cpu[1].0;
        println!(
            "CPU µs per request under load: daemon HTTP {:.1}, clients {:.1}",
            http.0 as f64 / 1e3 / l.len() as f64,
            bench.0 as f64 / 1e3 / l.len() as f64
        );
    }
    drop(s);
}
