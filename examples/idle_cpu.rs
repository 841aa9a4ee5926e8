//! Idle cost of the daemon: CPU share of one core and inbox scans per second while the inbox
//! stays empty.
//!
//!     cargo build --release && cargo run --release --example idle_cpu -- [seconds]
//!
//! Starts the real `novad run` with its default `--settle-ms` and `--poll-ms` on temporary
//! directories, waits until it is up, then reads its user + system CPU time from
//! `/proc/PID/stat` and its scan counter from `novad status --format json` at the start and end
//! of a `seconds`-long window (default 60).
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn scans(d: &Dirs) -> u64 {
    let st: serde_json::Value =
        serde_json::from_str(&novad_ok(&["status", "--store", &s(d), "--format", "json"])).unwrap();
    st["inbox_scans"]
        .as_u64()
        .expect("inbox_scans from a running daemon")
}

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("seconds"))
        .unwrap_or(60);
    let d = Dirs::new();
    let log = std::fs::File::create(d.log()).unwrap();
    let mut child = Command::new(bin())
        .args(["run", "--inbox"])
        .arg(d.inbox())
        .arg("--store")
        .arg(d.store())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_for(60, "the daemon is up", || {
        std::fs::read_to_string(d.log())
            .unwrap_or_default()
            .contains("novad running")
    });
    std::thread::sleep(Duration::from_secs(2));
    let (c0, s0, t0) = (cpu_seconds(pid), scans(&d), Instant::now());
    std::thread::sleep(Duration::from_secs(secs));
    let (c1, s1, wall) = (cpu_seconds(pid), scans(&d), t0.elapsed().as_secs_f64());
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "idle daemon over {wall:.1} s: cpu {:.3} s = {:.3} % of one core; {} inbox scans = {:.2} /s",
        c1 - c0,
        100.0 * (c1 - c0) / wall,
        s1 - s0,
        (s1 - s0) as f64 / wall
    );
}
