//! What sharing the document memory out between `workers` workers would cost its search,
//! against every worker searching the whole memory for its own queries (what the cluster
//! does). A memory of `stored` 20NG posts (shuffled with a fixed seed) is searched for the
//! `queries` posts after them, whole, and as `workers` shares would search it: each share
//! holds the documents of its logical shards (shard s to worker s mod `workers`), and a query
//! is looked for first in the share of its batch position's worker without a floor, then in
//! every other share only for matches beating the first round's (`DocMemory::nearest_above`).
//! Checks that the two rounds give the whole memory's answer, and prints the time of each
//! (one thread, the best of `reps` runs): their sum against the whole memory's search is the
//! extra work sharing the memory would add.
//!
//!     cargo run --release -p novad-lab --example share_search -- [corpus] [stored] [queries] [reps] [workers]
//!
//! Defaults: ../shared/data/20news-bydate.tar.gz, 17000, 1000, 5, 2.
use std::path::PathBuf;
use std::time::Instant;

use novad_lab::corpus::{keyed_vectors, near_copy, read_20news};
use novad_models::l1::dictionary::{shard_of, LOGICAL_SHARDS};
use novad_models::memory::{better_neighbour, DocMemory, DocRef, MemoryParams, Share, TermVector};
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// The memory holding `docs` (offered in order, 1,000 a timestep).
fn memory(docs: &[TermVector]) -> DocMemory {
    let mut mem = DocMemory::new(MemoryParams::default()).expect("valid parameters");
    for (t, chunk) in docs.chunks(1000).enumerate() {
        let batch: Vec<(DocRef, &TermVector)> = chunk
            .iter()
            .enumerate()
            .map(|(j, v)| {
                let r = DocRef {
                    timestep: t as u64,
                    seq: j as u32,
                    time: (t * 1000 + j) as i64,
                };
                (r, v)
            })
            .collect();
        let plan = mem.plan(&batch);
        mem.apply(plan);
    }
    mem
}

/// Seconds `f` takes, the best of `reps` runs, and its last result.
fn best_of<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut out = None;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        out = Some(f());
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, out.expect("at least one run"))
}

fn main() {
    let mut a = std::env::args().skip(1);
    let corpus = PathBuf::from(
        a.next()
            .unwrap_or_else(|| "../shared/data/20news-bydate.tar.gz".into()),
    );
    let stored: usize = a.next().map_or(17_000, |s| s.parse().expect("stored"));
    let queries: usize = a.next().map_or(1_000, |s| s.parse().expect("queries"));
    let reps: usize = a.next().map_or(5, |s| s.parse().expect("reps"));
    let workers: usize = a.next().map_or(2, |s| s.parse().expect("workers"));

    let posts = read_20news(&corpus).expect("read the corpus");
    let mut base = keyed_vectors(&posts);
    base.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(0));
    assert!(
        stored + queries <= base.len(),
        "{stored} stored and {queries} queries: the corpus has {} posts",
        base.len()
    );
    let docs: Vec<TermVector> = base[..stored].iter().map(|b| near_copy(b, 0)).collect();
    let qs: Vec<TermVector> = base[stored..stored + queries]
        .iter()
        .map(|b| near_copy(b, 0))
        .collect();
    let whole = memory(&docs);
    let shares: Vec<DocMemory> = (0..workers)
        .map(|w| {
            let mut m = whole.clone();
            let mine: Vec<usize> = (0..LOGICAL_SHARDS).filter(|s| s % workers == w).collect();
            m.restrict(Share::of(&mine, false))
                .expect("a narrower share");
            m
        })
        .collect();
    // the worker that looks first: the one holding the query's batch position's shard
    let first = |j: usize| shard_of(j) % workers;

    let (t_whole, want) = best_of(reps, || {
        qs.iter().map(|q| whole.nearest(q)).collect::<Vec<_>>()
    });
    let (t_one, own) = best_of(reps, || {
        qs.iter()
            .enumerate()
            .map(|(j, q)| shares[first(j)].nearest(q))
            .collect::<Vec<_>>()
    });
    let (t_two, beyond) = best_of(reps, || {
        qs.iter()
            .enumerate()
            .map(|(j, q)| {
                let others = (0..workers).filter(|&w| w != first(j));
                others.fold(None, |best, w| {
                    let found = match own[j] {
                        Some(n) => shares[w].nearest_above(q, n.floor()),
                        None => shares[w].nearest(q),
                    };
                    better_neighbour(best, found)
                })
            })
            .collect::<Vec<_>>()
    });
    let (t_blind, _) = best_of(reps, || {
        qs.iter()
            .enumerate()
            .map(|(j, q)| {
                let others = (0..workers).filter(|&w| w != first(j));
                others.fold(None, |best, w| better_neighbour(best, shares[w].nearest(q)))
            })
            .collect::<Vec<_>>()
    });
    for j in 0..queries {
        assert_eq!(better_neighbour(own[j], beyond[j]), want[j], "query {j}");
    }
    let found = want.iter().filter(|n| n.is_some()).count();
    let mean_cos = want.iter().flatten().map(|n| n.dot).sum::<f64>() / found.max(1) as f64;
    println!(
        "{stored} remembered posts, {queries} queries ({found} with a match, mean cosine {mean_cos:.3}); one thread, best of {reps}"
    );
    println!(
        "whole memory:                          {:7.1} ms",
        t_whole * 1e3
    );
    println!(
        "round 1, own share, no floor:          {:7.1} ms ({:.2} of the whole)",
        t_one * 1e3,
        t_one / t_whole
    );
    println!(
        "round 2, other shares, round 1's floor:{:7.1} ms ({:.2}; without the floor {:.1} ms)",
        t_two * 1e3,
        t_two / t_whole,
        t_blind * 1e3
    );
    println!(
        "both rounds:                           {:7.1} ms ({:.2}× the whole memory's search)",
        (t_one + t_two) * 1e3,
        (t_one + t_two) / t_whole
    );
}
