//! Engine benchmark on the 20 Newsgroups archive (read directly from the .tar.gz).
//!
//!     cargo run --release --example bench_engine -- ../shared/data/20news-bydate.tar.gz [config]
//!
//! Bootstraps k = 200 atoms on 2,000 training posts, then streams the remaining training posts
//! in batches of 1,000 through `Model::step`, printing per batch: coding docs/s, mean ADMM
//! iterations, share of documents at the score ceiling, seconds of the OIADMM step; at the end
//! the totals and the peak resident memory (VmHWM). `config` is `paper` (the default of this
//! program), `default` (novad's default detector) or `tuned` (per-document step, Δ restarted
//! per batch, asymmetric loss w = 0.05, k-means atoms, with the A-step) to show the cost of
//! the knobs.

use std::path::PathBuf;
use std::time::Instant;

use novad_lab::corpus::read_20news;
use novad_lab::eval::ConfigName;
use novad_models::{Model, Params};
use rand::seq::SliceRandom;
use rand::SeedableRng;

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .map(|v| v.parse::<f64>().unwrap_or(0.0))
            })
        })
        .unwrap_or(0.0)
        / 1024.0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "../shared/data/20news-bydate.tar.gz".into()),
    );
    let config = args.next().unwrap_or_else(|| "paper".into());
    let mut params = Params::paper();
    match config.as_str() {
        "paper" => {}
        "default" => params = Params::default(),
        "tuned" => params = ConfigName::Tuned.params(),
        other => panic!("unknown config {other} (paper | default | tuned)"),
    }
    let t = Instant::now();
    let posts = read_20news(&path).expect("read archive");
    let mut train: Vec<String> = posts
        .into_iter()
        .filter(|p| p.split == "train")
        .map(|p| p.text)
        .collect();
    train.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(0));
    println!(
        "read {} training posts in {:.2}s; config {config}",
        train.len(),
        t.elapsed().as_secs_f64()
    );
    println!("threads: {}", rayon::current_num_threads());

    let mut model = Model::new(params).unwrap();
    let t = Instant::now();
    let (m, out) = model.step(&train[..2000]).unwrap();
    model = m;
    println!(
        "bootstrap: 2000 docs, k = 200, vocabulary {} terms: {:.2}s (coding {:.2}s)",
        out.stats.vocabulary,
        t.elapsed().as_secs_f64(),
        out.stats.seconds_coding
    );
    println!("batch  docs  terms   coding_docs/s  mean_iter  ceiling  code_nnz  oiadmm_s  topics_s  step_s");
    let (mut docs, mut coding_s, mut iters, mut oi_s, mut steps) = (0usize, 0.0, 0.0, 0.0, 0);
    for (b, chunk) in train[2000..].chunks(1000).enumerate() {
        let t = Instant::now();
        let (m, out) = model.step(chunk).unwrap();
        model = m;
        let s = &out.stats;
        println!(
            "{:>5} {:>5} {:>6} {:>15.0} {:>10.1} {:>8.3} {:>9.2} {:>9.3} {:>9.3} {:>7.3}",
            b + 1,
            s.docs,
            s.vocabulary,
            s.docs as f64 / s.seconds_coding,
            s.mean_iterations,
            s.ceiling_fraction,
            s.mean_code_nnz,
            s.seconds_update,
            s.seconds_topics,
            t.elapsed().as_secs_f64()
        );
        docs += s.docs;
        coding_s += s.seconds_coding;
        iters += s.mean_iterations * s.docs as f64;
        if s.docs == 1000 {
            oi_s += s.seconds_update;
            steps += 1;
        }
    }
    println!(
        "total: {docs} docs, coding {:.0} docs/s, mean ADMM iterations {:.1}, OIADMM {:.3} s per 1000-doc step, peak RSS {:.0} MiB",
        docs as f64 / coding_s,
        iters / docs as f64,
        oi_s / steps.max(1) as f64,
        peak_rss_mib()
    );
}
