//! Crash soak: SIGKILL the real daemon at random moments during ingest, many times, then check
//! that every document has exactly one verdict, no file is both in the inbox and processed, and
//! the final model is byte-identical to an uninterrupted run.
//!
//!     cargo build --release && cargo run --release --example soak_crash -- [cycles] [files] [docs] [seed]
//!
//! Defaults: 200 cycles over 600 files of 60 20NG posts. CI runs a 20-cycle version
//! (tests/daemon_faults.rs); this is the long one.
#[path = "../tests/common/daemon.rs"]
#[allow(dead_code)]
mod harness;

fn main() {
    let mut a = std::env::args()
        .skip(1)
        .map(|s| s.parse::<u64>().expect("numbers"));
    let cycles = a.next().unwrap_or(200) as usize;
    let files = a.next().unwrap_or(600) as usize;
    let docs = a.next().unwrap_or(60) as usize;
    let seed = a.next().unwrap_or(1);
    let t = std::time::Instant::now();
    let r = harness::crash_cycles(cycles, files, docs, seed);
    println!(
        "soak passed: {} SIGKILLs ({} during ingest), {files} files × {docs} docs, every document one verdict, model identical to the uninterrupted run; {:.0}s",
        r.kills,
        r.progress,
        t.elapsed().as_secs_f64()
    );
}
