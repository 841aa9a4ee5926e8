//! End-to-end daemon benchmark on 20 Newsgroups: file renamed into the inbox → committed →
//! moved to processed/, for 1,000-document batches with k = 200; store size and bytes written
//! per timestep.
//!
//!     cargo build --release && cargo run --release --example bench_daemon -- [batches] [k] [max_terms]
//!
//! Starts the real `novad run` on temporary directories, bootstraps on 2,000 posts, then drops
//! `batches` (default 10) batches of 1,000 posts one at a time and times each until it appears
//! in processed/.
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use std::time::{Duration, Instant};

fn vm_hwm_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<f64>().ok())
            })
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// The numeric values of a `key=value` field (value possibly quoted) on the log lines that
/// pass `keep`.
fn field_values(log: &str, key: &str, keep: impl Fn(&str) -> bool) -> Vec<f64> {
    log.lines()
        .filter(|l| keep(l))
        .filter_map(|l| l.split(key).nth(1))
        .filter_map(|r| r.split_whitespace().next()?.trim_matches('"').parse().ok())
        .collect()
}

fn main() {
    let mut a = std::env::args().skip(1);
    let batches: usize = a.next().map(|s| s.parse().unwrap()).unwrap_or(10);
    let k: String = a.next().unwrap_or_else(|| "200".into());
    let max_terms: String = a.next().unwrap_or_else(|| "100000".into());
    let d = Dirs::new();
    let daemon = Daemon::start(&d, &["--k", &k, "--max-terms", &max_terms]);
    let drop_and_wait = |name: &str, body: &str| -> f64 {
        let t = Instant::now();
        d.drop_file(name, body.as_bytes());
        let target = d.processed().join(name);
        while !target.exists() {
            std::thread::sleep(Duration::from_millis(2));
            assert!(t.elapsed() < Duration::from_secs(600), "timeout on {name}");
        }
        t.elapsed().as_secs_f64()
    };
    let secs = drop_and_wait(
        "000-bootstrap.jsonl",
        &jsonl_batch(0, 2000, "2026-01-01", "boot"),
    );
    println!(
        "bootstrap batch (2000 docs, k = {k}, vocabulary bound {max_terms}): {secs:.2}s end to end"
    );
    println!("batch  docs   end_to_end_s  store_MiB");
    let mut lat = Vec::new();
    for b in 0..batches {
        let name = format!("{:03}.jsonl", b + 1);
        let day = format!("2026-01-{:02}", 2 + b % 27);
        let body = jsonl_batch(2000 + b * 1000, 1000, &day, &format!("b{b}"));
        let s = drop_and_wait(&name, &body);
        lat.push(s);
        println!(
            "{:>5} {:>5} {:>14.3} {:>10.1}",
            b + 1,
            1000,
            s,
            novad::store::dir_size(&d.store()) as f64 / (1 << 20) as f64
        );
    }
    let rss = vm_hwm_mib(daemon.child.id());
    let status: serde_json::Value = serde_json::from_str(&novad_ok(&[
        "status",
        "--store",
        &d.store().display().to_string(),
        "--format",
        "json",
    ]))
    .unwrap();
    drop(daemon);
    let log = std::fs::read_to_string(d.log()).unwrap();
    let written = field_values(&log, "written_kib=", |_| true);
    let store_s = field_values(&log, "store_seconds=", |_| true);
    let total_s = field_values(&log, " seconds=", |l| l.contains("timestep committed"));
    if store_s.len() > 1 && store_s.len() == total_s.len() {
        let st: f64 = store_s[1..].iter().sum();
        let tt: f64 = total_s[1..].iter().sum();
        println!(
            "of the ingest time after the bootstrap, committing + flushing the store took {:.0} % ({st:.2} s of {tt:.2} s)",
            100.0 * st / tt
        );
    }
    lat.sort_by(f64::total_cmp);
    let mean = lat.iter().sum::<f64>() / lat.len() as f64;
    println!(
        "end to end per 1000-doc batch: mean {mean:.3}s, median {:.3}s, max {:.3}s",
        lat[lat.len() / 2],
        lat[lat.len() - 1]
    );
    println!(
        "vocabulary at the end: {} terms; daemon peak RSS {rss:.0} MiB",
        status["state"]["terms"]
    );
    if written.len() > 1 {
        let steady = &written[1..];
        println!(
            "bytes written per timestep (keys+values of the transaction): bootstrap {:.1} MiB, then mean {:.1} MiB, max {:.1} MiB",
            written[0] / 1024.0,
            steady.iter().sum::<f64>() / steady.len() as f64 / 1024.0,
            steady.iter().cloned().fold(0.0, f64::max) / 1024.0
        );
    }
    println!(
        "store size on disk after {} timesteps: {:.1} MiB",
        batches + 1,
        novad::store::dir_size(&d.store()) as f64 / (1 << 20) as f64
    );
}
