//! Peak memory and time of ingesting one large batch file, and how it was cut into timesteps.
//!
//!     cargo build --release && cargo run --release --example big_file_rss -- [MB] [extra novad ingest args…]
//!
//! Writes a JSONL file of about `MB` megabytes (default 20) from 20 Newsgroups posts (each
//! line a post with an id and a date; the corpus is repeated to reach the size), then runs the
//! real `novad ingest` on it with a new store and reports: the child's peak RSS (`ru_maxrss`
//! from wait4), wall time, documents, and the timesteps it was cut into. Extra arguments go to
//! `novad ingest` (e.g. `--max-batch-docs 5000`).
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;

use harness::*;
use std::io::Write;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let mb: f64 = args.next().map(|s| s.parse().expect("MB")).unwrap_or(20.0);
    let extra: Vec<String> = args.collect();
    let d = Dirs::new();
    let path = d.tmp.path().join("big.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let (mut bytes, mut docs) = (0u64, 0u64);
    let all = posts();
    while (bytes as f64) < mb * 1e6 {
        let (group, text) = &all[docs as usize % all.len()];
        let line = serde_json::json!({
            "id": format!("big-{docs}"),
            "time": format!("2026-03-{:02}T00:00:00Z", 1 + docs % 28),
            "group": group,
            "text": text,
        })
        .to_string();
        writeln!(f, "{line}").unwrap();
        bytes += line.len() as u64 + 1;
        docs += 1;
    }
    f.flush().unwrap();
    drop(f);
    println!("file: {:.1} MB, {docs} documents", bytes as f64 / 1e6);
    let t0 = Instant::now();
    // reaped below with wait4 (which also reports the peak RSS), not Child::wait
    #[allow(clippy::zombie_processes)]
    let mut child = std::process::Command::new(bin())
        .args(["ingest", "--store"])
        .arg(d.store())
        .args(&extra)
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let lines: Vec<String> = std::io::BufRead::lines(std::io::BufReader::new(out))
        .map(|l| l.unwrap())
        .collect();
    // reap with wait4 to read the child's peak RSS
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid pointers
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert_eq!(r, child.id() as i32, "wait4");
    let wall = t0.elapsed().as_secs_f64();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "novad ingest failed"
    );
    let timesteps = lines.iter().filter(|l| l.contains(": timestep ")).count();
    println!(
        "novad ingest: {wall:.1} s, peak RSS {:.0} MiB, {timesteps} timesteps ({:.0} documents/s)",
        ru.ru_maxrss as f64 / 1024.0,
        docs as f64 / wall
    );
    for l in lines.iter().take(3) {
        println!("  {l}");
    }
    if lines.len() > 3 {
        println!("  … ({} more)", lines.len() - 3);
    }
}
