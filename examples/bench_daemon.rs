//! End-to-end daemon benchmark on 20 Newsgroups: file renamed into the inbox → committed →
//! moved to processed/, for 1,000-document batches with k = 200 and the hybrid detector (the
//! default); where each batch's time goes, the memory size, RSS, and bytes written per
//! timestep.
//!
//!     cargo build --release && cargo run --release --example bench_daemon -- [batches] [k] [max_terms] [memory_docs]
//!
//! Starts the real `novad run` on temporary directories (`--memory-docs memory_docs` when
//! given, `--detector model` for `model` or `model:N` (the latter after the same fill as a
//! cap of N, for a like-for-like comparison), otherwise the default cap of 100,000), bootstraps
//! on 2,000 posts, fills the memory towards its cap with 10,000-post files (their timesteps
//! not measured), then drops `batches` (default 10) batches of 1,000 posts one at a time and
//! times each until it appears in processed/. Posts past the corpus's ~18.8k cycle it:
//! repeated posts get new ids and later times (so the memory can be filled beyond the corpus;
//! a repeated post's nearest remembered document is then its own earlier copy while that is
//! still stored). The summary line covers the batches committed with the memory full.
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use std::time::{Duration, Instant};

/// A `VmHWM:` / `VmRSS:` figure of a process, in MiB.
fn vm_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(field)).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<f64>().ok())
            })
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// The value of a `key=value` field (value possibly quoted) of a log line.
fn field(line: &str, key: &str) -> Option<f64> {
    let rest = line.split(&format!(" {key}=")).nth(1)?;
    rest.split_whitespace()
        .next()?
        .trim_matches('"')
        .parse()
        .ok()
}

/// The date of batch `b`: one day per batch from 2026-01-02 (28-day months), so times only grow.
fn day(b: usize) -> String {
    let d = b + 1;
    format!("2026-{:02}-{:02}", 1 + d / 28, 1 + d % 28)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

const COLUMNS: [&str; 10] = [
    "seconds",
    "step_seconds",
    "coding_seconds",
    "update_seconds",
    "topics_seconds",
    "hybrid_seconds",
    "commit_seconds",
    "store_seconds",
    "written_kib",
    "coding_iterations",
];

fn main() {
    let mut a = std::env::args().skip(1);
    let batches: usize = a.next().map(|s| s.parse().unwrap()).unwrap_or(10);
    let k: String = a.next().unwrap_or_else(|| "200".into());
    let max_terms: String = a.next().unwrap_or_else(|| "100000".into());
    let memory: Option<String> = a.next();
    let d = Dirs::new();
    let mut args = vec!["--k", &k, "--max-terms", &max_terms];
    match memory.as_deref() {
        Some(m) if m.starts_with("model") => args.extend(["--detector", "model"]),
        Some(m) => args.extend(["--memory-docs", m]),
        None => {}
    }
    let daemon = Daemon::start(&d, &args);
    let pid = daemon.child.id();
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
    let cap = memory.as_deref().unwrap_or("the default");
    let secs = drop_and_wait(
        "000-bootstrap.jsonl",
        &jsonl_batch(0, 2000, "2026-01-01", "boot"),
    );
    println!(
        "bootstrap batch (2000 docs, k = {k}, vocabulary bound {max_terms}, memory cap {cap}): {secs:.2}s end to end"
    );
    // fill the memory to its cap in 10,000-document files (one timestep each), then measure
    let cap_docs: usize = match memory.as_deref() {
        // `model:N`: the model's own score after the same N-document fill
        Some(m) if m.starts_with("model") => m
            .strip_prefix("model:")
            .map_or(0, |n| n.parse().expect("model:N")),
        Some(m) => m.parse().expect("memory_docs"),
        None => 100_000,
    };
    let mut offset = 2000;
    let mut fills = 0;
    while offset + 10_000 <= cap_docs {
        let name = format!("fill-{fills:03}.jsonl");
        let body = jsonl_batch(offset, 10_000, &day(fills), &format!("f{fills}"));
        let s = drop_and_wait(&name, &body);
        println!(
            "fill file {fills}: 10000 docs in {s:.2}s (documents so far: {})",
            offset + 10_000
        );
        offset += 10_000;
        fills += 1;
    }
    let mut lat = Vec::new();
    let mut rss = Vec::new();
    for b in 0..batches {
        let name = format!("{:04}.jsonl", b + 1);
        let body = jsonl_batch(offset + b * 1000, 1000, &day(fills + b), &format!("b{b}"));
        lat.push(drop_and_wait(&name, &body));
        rss.push(vm_mib(pid, "VmRSS:"));
    }
    let hwm = vm_mib(pid, "VmHWM:");
    drop(daemon);
    let log = std::fs::read_to_string(d.log()).unwrap();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("timestep committed"))
        .collect();
    // a fill file may take more than one timestep (--max-batch-bytes): leave them all out
    let lines: Vec<&str> = lines.into_iter().filter(|l| !l.contains("fill-")).collect();
    assert_eq!(
        lines.len(),
        batches + 1,
        "one committed timestep per measured file"
    );
    println!(
        "batch end_to_end  step coding update topics hybrid commit store+flush written_KiB memory_docs RSS_MiB admm_iter"
    );
    let mut at_cap: Vec<Vec<f64>> = vec![Vec::new(); COLUMNS.len() + 1];
    for (b, l) in lines[1..].iter().enumerate() {
        let f: Vec<f64> = COLUMNS
            .iter()
            .map(|c| field(l, c).unwrap_or(f64::NAN))
            .collect();
        let mem = field(l, "memory_docs").unwrap_or(f64::NAN);
        println!(
            "{:>5} {:>10.3} {:>5.3} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>11.3} {:>11.0} {:>11} {:>7.0} {:>9.1}",
            b + 1,
            lat[b],
            f[1],
            f[2],
            f[3],
            f[4],
            f[5],
            f[6],
            f[7],
            f[8],
            mem,
            rss[b],
            f[9]
        );
        // batches committed with the memory full (after one more batch at the cap)
        // (every batch without the hybrid detector)
        let prev_full = mem.is_nan() || (b > 0 && field(lines[b], "memory_docs") == Some(mem));
        if prev_full {
            at_cap[0].push(lat[b]);
            for (i, v) in f.iter().enumerate() {
                at_cap[i + 1].push(*v);
            }
        }
    }
    if at_cap[0].is_empty() {
        println!("the memory never stayed at its cap: add batches");
    } else {
        let m: Vec<f64> = at_cap.iter().map(|v| mean(v)).collect();
        let mut sorted = at_cap[0].clone();
        sorted.sort_by(f64::total_cmp);
        println!(
            "batches with the memory at its cap, or all without the hybrid ({}): end to end mean {:.3}s, median {:.3}s, max {:.3}s; \
             daemon ingest {:.3}s = step {:.3}s (coding {:.3}, update {:.3}, topics {:.3}, hybrid {:.3}) \
             + commit {:.3}s + flush {:.3}s; written {:.1} MiB per timestep; {:.0} ADMM iterations per document",
            sorted.len(),
            m[0],
            sorted[sorted.len() / 2],
            sorted[sorted.len() - 1],
            m[1],
            m[2],
            m[3],
            m[4],
            m[5],
            m[6],
            m[7],
            m[8] - m[7],
            m[9] / 1024.0,
            m[10]
        );
    }
    println!(
        "daemon peak RSS (VmHWM) {hwm:.0} MiB; bootstrap wrote {:.1} MiB; store on disk after {} timesteps: {:.1} MiB",
        field(lines[0], "written_kib").unwrap_or(f64::NAN) / 1024.0,
        batches + 1,
        novad::store::dir_size(&d.store()) as f64 / (1 << 20) as f64
    );
}
