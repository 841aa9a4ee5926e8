//! ADMM step rules on a real dictionary: iterations, time and score error per rule.
//!
//!     cargo run --release -p novad-lab --example coding_steps -- [corpus] [batches]
//!
//! Trains novad's default ℓ1 model on 20 Newsgroups (all posts, shuffled with seed 0): a
//! 2,000-post bootstrap, then `batches` (default 8) batches of 1,000 posts. The next 1,000
//! posts are then coded against that dictionary with a tight reference (per-document step,
//! tolerance 1e-8) and with each step rule and tolerance; per rule it prints the coding time,
//! the mean and largest ADMM iteration count, and the mean and largest distance of the scores
//! from the reference's.
use std::path::PathBuf;
use std::time::Instant;

use novad_lab::corpus::read_20news;
use novad_models::l1::coding::{code_batch, CodingDict, CodingParams, StepSize};
use novad_models::text::SparseDoc;
use novad_models::{Model, Params};
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// Code `docs` with `c`; print one line (against `reference` when given); return the scores.
fn run(model: &Model, docs: &[SparseDoc], c: &CodingParams, reference: Option<&[f64]>) -> Vec<f64> {
    let dict = CodingDict::new(model.dictionary(), c.step);
    let t = Instant::now();
    let codes = code_batch(&dict, docs, c);
    let secs = t.elapsed().as_secs_f64();
    let n = codes.len().max(1) as f64;
    let mean_it = codes.iter().map(|c| c.iterations as f64).sum::<f64>() / n;
    let max_it = codes.iter().map(|c| c.iterations).max().unwrap_or(0);
    let scores: Vec<f64> = codes.iter().map(|c| c.score).collect();
    let (mut mean_err, mut max_err) = (0.0, 0.0f64);
    if let Some(r) = reference {
        for (a, b) in scores.iter().zip(r) {
            mean_err += (a - b).abs() / n;
            max_err = max_err.max((a - b).abs());
        }
    }
    println!(
        "{:<12} {:>5} {:>7.0e} {:>8.3} {:>9.1} {:>8} {:>10.2e} {:>10.2e}",
        format!("{:?}", c.step),
        c.phi,
        c.tol,
        secs,
        mean_it,
        max_it,
        mean_err,
        max_err
    );
    scores
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "../shared/data/20news-bydate.tar.gz".into()),
    );
    let batches: usize = args.next().map_or(8, |s| s.parse().expect("batches"));
    let posts = read_20news(&path).expect("read archive");
    let mut texts: Vec<String> = posts.into_iter().map(|p| p.text).collect();
    texts.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(0));
    let mut model = Model::new(Params::default()).expect("default params");
    model = model.step(&texts[..2000]).expect("bootstrap").0;
    for chunk in texts[2000..2000 + batches * 1000].chunks(1000) {
        model = model.step(chunk).expect("step").0;
    }
    let start = 2000 + batches * 1000;
    let next: Vec<&str> = texts[start..start + 1000]
        .iter()
        .map(|s| s.as_str())
        .collect();
    let docs = model.vectorize_frozen(&next);
    println!(
        "threads: {}; step rule, phi, tol, seconds, mean / max iterations, mean / max |score - reference|",
        rayon::current_num_threads()
    );
    let base = model.params().coding.clone();
    let with = |step, phi, tol| CodingParams {
        step,
        phi,
        tol,
        max_iter: if tol < 1e-6 { 100_000 } else { base.max_iter },
        ..base.clone()
    };
    let reference = run(&model, &docs, &with(StepSize::PerDocument, 5.0, 1e-8), None);
    for (step, phi, tol) in [
        (StepSize::PerDocument, 5.0, 1e-4),
        (StepSize::PerAtom, 5.0, 1e-4),
        (StepSize::PerAtom, 5.0, 3e-4),
        (StepSize::PerAtom, 10.0, 3e-4),
    ] {
        run(&model, &docs, &with(step, phi, tol), Some(&reference));
    }
}
