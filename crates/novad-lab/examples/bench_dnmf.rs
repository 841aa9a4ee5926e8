//! Per-timestep seconds of the dynamic NMF model on the CIKM 20 Newsgroups stream (~1,000
//! documents per timestep, window ω = 4 by default).
//!
//! `cargo run --release --example bench_dnmf -- [corpus.tar.gz] [timesteps]`

use std::path::PathBuf;
use std::time::Instant;

use novad_lab::corpus::read_20news;
use novad_lab::eval::{cikm_protocol, CikmSizes};
use novad_models::dnmf::{DnmfModel, DnmfParams};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let corpus = PathBuf::from(
        args.get(1)
            .map(String::as_str)
            .unwrap_or("../shared/data/20news-bydate.tar.gz"),
    );
    let steps: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(8);
    let posts = read_20news(&corpus)?;
    let stream = cikm_protocol(&posts, &CikmSizes::default(), 0)?;
    let params = DnmfParams::default();
    println!(
        "window ω = {}, K0 = {}, B = {}, δ = {}, µ = {}, iterations ≤ {}, max_terms = {}",
        params.window,
        params.initial_topics,
        params.emerging,
        params.delta,
        params.mu,
        params.iterations,
        params.text.max_terms
    );
    let mut model = DnmfModel::new(params)?;
    println!("timestep  docs  window_docs  K  vocab  iters  seconds  (factorize)");
    let mut total = 0.0;
    let mut counted = 0;
    for ts in stream.timesteps.iter().take(steps) {
        let texts: Vec<&str> = ts.docs.iter().map(|d| d.text.as_str()).collect();
        let t = Instant::now();
        let (next, out) = model.step(&texts)?;
        let secs = t.elapsed().as_secs_f64();
        let window_docs: usize = next.window().map(|w| w.docs.len()).sum();
        println!(
            "{:>8}  {:>4}  {:>11}  {:>2}  {:>5}  {:>5}  {:>7.2}  ({:.2})",
            out.stats.timestep,
            texts.len(),
            window_docs,
            out.stats.atoms,
            out.stats.vocabulary,
            out.stats.mean_iterations,
            secs,
            out.stats.seconds_update
        );
        if next.window().count() >= 4 {
            total += secs;
            counted += 1;
        }
        model = next;
    }
    if counted > 0 {
        println!(
            "mean seconds per timestep with a full window: {:.2}",
            total / counted as f64
        );
    }
    Ok(())
}
