//! The vocabulary's work in one step of the stream, the part every process of a cluster
//! repeats: the copy of the vocabulary (the step is a function from the model before it to
//! the model after it) and its drop, the observation of a batch's resolved terms, and the
//! batch's TF-IDF vectors.
//!
//!     cargo run --release -p novad-lab --example bench_vocab -- [corpus] [rounds]
//!
//! Defaults: ../shared/data/20news-bydate.tar.gz, 40 rounds. The vocabulary (default bound,
//! 100,000 terms) first observes the corpus in batches of 1,000 posts, then each figure is
//! the best of `rounds` timings on the next batch of 1,000 posts (the corpus's first posts
//! again; their terms resolved beforehand, as a step's terms round gives them),
//! single-threaded, with the system allocator (the daemon's is mimalloc). Reported:
//! milliseconds per step.
use std::path::PathBuf;
use std::time::Instant;

use novad_models::text::{tfidf_l1, Tokenizer, Vocabulary};

/// Best seconds of `rounds` runs of `f` (timed whole, or as `f` says when it returns them).
fn best<R: Seconds>(rounds: usize, mut f: impl FnMut() -> R) -> f64 {
    (0..rounds)
        .map(|_| {
            let t0 = Instant::now();
            f().seconds(t0)
        })
        .fold(f64::INFINITY, f64::min)
}

/// What a timed run returns: nothing (timed whole) or its own seconds.
trait Seconds {
    fn seconds(self, t0: Instant) -> f64;
}
impl Seconds for () {
    fn seconds(self, t0: Instant) -> f64 {
        t0.elapsed().as_secs_f64()
    }
}
impl Seconds for f64 {
    fn seconds(self, _: Instant) -> f64 {
        self
    }
}

fn main() {
    let mut a = std::env::args().skip(1);
    let corpus = PathBuf::from(
        a.next()
            .unwrap_or_else(|| "../shared/data/20news-bydate.tar.gz".into()),
    );
    let rounds: usize = a.next().map_or(40, |s| s.parse().expect("rounds"));
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global()
        .expect("one rayon thread");
    let posts = novad_lab::corpus::read_20news(&corpus).expect("read the corpus");
    let tok = Tokenizer::default();
    let tokens: Vec<Vec<String>> = posts.iter().map(|p| tok.tokens(&p.text)).collect();
    let mut vocab = Vocabulary::new(100_000);
    for (t, batch) in tokens.chunks(1000).enumerate() {
        vocab.observe(batch, t as u64);
    }
    let step = tokens.len().div_ceil(1000) as u64;
    let batch = &tokens[..1000];
    println!(
        "vocabulary of {} terms after {} posts; a batch of {} posts",
        vocab.len(),
        tokens.len(),
        batch.len()
    );

    let copy = best(rounds, || drop(std::hint::black_box(vocab.clone())));
    let resolved: Vec<_> = batch.iter().map(|d| vocab.resolve(d)).collect();
    // what a step does with it: copy it, observe the batch in the copy, drop one (the step
    // drops the old one, of the same size)
    let step_work = best(rounds, || {
        let given = resolved.clone();
        let t0 = Instant::now();
        let mut v = vocab.clone();
        v.observe_resolved(given, step);
        drop(std::hint::black_box(v));
        t0.elapsed().as_secs_f64()
    });
    let mut after = vocab.clone();
    let (counts, change) = after.observe_resolved(resolved.clone(), step);
    println!(
        "the batch adds {} terms and evicts {}",
        change.added, change.evicted
    );
    let (df, n) = (|id: u32| after.df(id), after.docs_seen());
    let tfidf = best(rounds, || {
        std::hint::black_box(
            counts
                .iter()
                .map(|c| tfidf_l1(c, df, n))
                .collect::<Vec<_>>(),
        );
    });
    println!("copy and drop of the vocabulary: {:.2} ms", copy * 1e3);
    println!(
        "copy, observation of the batch's resolved terms, drop: {:.2} ms",
        step_work * 1e3
    );
    println!("TF-IDF of the batch: {:.2} ms", tfidf * 1e3);
}
