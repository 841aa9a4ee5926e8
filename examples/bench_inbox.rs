//! Inbox throughput with a large backlog: files taken per second, and the daemon's CPU share,
//! while `n` one-document files wait in the inbox (each file is its own committed timestep).
//!
//!     cargo build --release && cargo run --release --example bench_inbox -- [n] [measured] [dir] [novad]
//!
//! Writes `n` (default 100,000) one-line `.txt` files into `dir/inbox` (default a temporary
//! directory; `dir` must not exist or be empty), starts the real `novad run` on it (`novad`:
//! another binary, e.g. an older build, for a before/after comparison), waits for the first
//! file in processed/, then times the next `measured` files (default 1,000) and reads the
//! daemon's user + system CPU time over that window from `/proc/PID/stat`.
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How many entries `dir` holds.
fn count(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |rd| rd.count())
}

fn main() {
    let mut a = std::env::args().skip(1);
    let n: usize = a.next().map_or(100_000, |s| s.parse().expect("n"));
    let measured: usize = a.next().map_or(1_000, |s| s.parse().expect("measured"));
    let tmp = tempfile::tempdir().unwrap();
    let root: PathBuf = a.next().map_or(tmp.path().to_path_buf(), PathBuf::from);
    let novad = a.next().map_or_else(bin, PathBuf::from);
    assert!(measured < n, "measured must be below n");
    let inbox = root.join("inbox");
    let store = root.join("store");
    let processed = inbox.join("processed");
    std::fs::create_dir_all(&inbox).unwrap();
    let t = Instant::now();
    for i in 0..n {
        let body = format!("report {i} about topic{} and item{}\n", i % 97, i % 13);
        std::fs::write(inbox.join(format!("{i:06}.txt")), body).unwrap();
    }
    println!(
        "wrote {n} one-document files in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    let log = std::fs::File::create(root.join("daemon.log")).unwrap();
    let mut child = Command::new(&novad)
        .args(["run", "--inbox"])
        .arg(&inbox)
        .arg("--store")
        .arg(&store)
        .args(["--k", "5", "--settle-ms", "200"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let pid = child.id();
    let started = Instant::now();
    while count(&processed) == 0 {
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            started.elapsed() < Duration::from_secs(1200),
            "no file taken"
        );
    }
    let first = started.elapsed().as_secs_f64();
    let (c0, t0, p0) = (cpu_seconds(pid), Instant::now(), count(&processed));
    while count(&processed) < p0 + measured {
        std::thread::sleep(Duration::from_millis(200));
        assert!(t0.elapsed() < Duration::from_secs(3600), "too slow");
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - c0;
    let taken = count(&processed) - p0;
    let _ = child.kill();
    let _ = child.wait();
    println!("novad: {}", novad.display());
    println!("first file in processed/ {first:.1}s after start");
    println!(
        "{taken} files taken with {} to {} waiting: {:.1} files/s, CPU {:.0}% of a core ({:.1} ms CPU a file)",
        n - p0,
        n - p0 - taken,
        taken as f64 / secs,
        100.0 * cpu / secs,
        1000.0 * cpu / taken as f64
    );
}
