//! Cost of the document memory at its cap: insert 20NG-like documents in batches of 1 000 up to
//! and past the cap, and time exact nearest-neighbour queries along the way.
//!
//!     cargo run --release --example bench_memory -- [corpus] [max_docs] [offered] [queries]
//!
//! Defaults: ../shared/data/20news-bydate.tar.gz, 100000, 150000, 1000. The 18 846 posts are
//! vectorised once (TF-IDF over the whole corpus) and cycled; copy c > 0 of a post has about
//! a fifth of its terms replaced by copy-specific terms, so copies are near, not exact,
//! duplicates and the vocabulary keeps growing like a real stream's.
use std::path::PathBuf;
use std::time::Instant;

use novad_lab::corpus::{keyed_vectors, near_copy};
use novad_models::memory::{DocMemory, DocRef, MemoryParams, TermVector};

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn main() {
    let mut a = std::env::args().skip(1);
    let corpus = PathBuf::from(
        a.next()
            .unwrap_or_else(|| "../shared/data/20news-bydate.tar.gz".into()),
    );
    let max_docs: usize = a.next().map_or(100_000, |s| s.parse().expect("max_docs"));
    let offered: usize = a.next().map_or(150_000, |s| s.parse().expect("offered"));
    let queries: usize = a.next().map_or(1_000, |s| s.parse().expect("queries"));

    let posts = novad_lab::corpus::read_20news(&corpus).expect("read the corpus");
    let base = keyed_vectors(&posts);
    let mean_terms = base.iter().map(|b| b.len()).sum::<usize>() as f64 / base.len() as f64;
    println!(
        "{} posts, {mean_terms:.1} distinct terms per post on average; cap {max_docs} documents",
        base.len()
    );
    let params = MemoryParams {
        max_docs,
        ..MemoryParams::default()
    };
    println!(
        "memory: max_terms_per_doc {}, max_bytes {} MiB, eviction {:?}",
        params.max_terms_per_doc,
        params.max_bytes >> 20,
        params.eviction
    );
    let mut mem = DocMemory::new(params).expect("valid parameters");
    // held-out queries: copies no stored document has
    let qs: Vec<TermVector> = (0..queries)
        .map(|i| near_copy(&base[(i * 7919) % base.len()], 1_000_003 + i as u64))
        .collect();
    let qrefs: Vec<&TermVector> = qs.iter().collect();
    println!(
        "{:>9} {:>9} {:>12} {:>14} {:>16} {:>12} {:>10}",
        "offered",
        "stored",
        "insert µs/doc",
        "query µs (1 thr)",
        "batch docs/s",
        "bytes MiB",
        "RSS MiB"
    );
    let mut next = 0usize;
    let mut insert_secs = 0.0;
    let mut inserted_since = 0usize;
    let checkpoints: Vec<usize> = [
        10_000, 25_000, 50_000, 75_000, 100_000, 125_000, 150_000, 200_000,
    ]
    .into_iter()
    .filter(|&c| c <= offered)
    .collect();
    for cp in checkpoints {
        while next < cp {
            let end = (next + 1000).min(cp);
            let vs: Vec<TermVector> = (next..end)
                .map(|i| near_copy(&base[i % base.len()], (i / base.len()) as u64))
                .collect();
            let batch: Vec<(DocRef, &TermVector)> = vs
                .iter()
                .enumerate()
                .map(|(j, v)| {
                    let i = next + j;
                    (
                        DocRef {
                            timestep: (i / 1000) as u64,
                            seq: (i % 1000) as u32,
                            time: i as i64,
                        },
                        v,
                    )
                })
                .collect();
            let t0 = Instant::now();
            let plan = mem.plan(&batch);
            mem.apply(plan);
            insert_secs += t0.elapsed().as_secs_f64();
            inserted_since += end - next;
            next = end;
        }
        let t0 = Instant::now();
        let mut hits = 0usize;
        for q in &qs {
            hits += mem.nearest(q).is_some() as usize;
        }
        let single = t0.elapsed().as_secs_f64() / qs.len() as f64;
        let t1 = Instant::now();
        let r = mem.nearest_batch(&qrefs);
        let batch_rate = qs.len() as f64 / t1.elapsed().as_secs_f64();
        assert_eq!(r.iter().filter(|x| x.is_some()).count(), hits);
        println!(
            "{:>9} {:>9} {:>12.1} {:>14.0} {:>16.0} {:>12.1} {:>10.0}",
            cp,
            mem.len(),
            insert_secs * 1e6 / inserted_since.max(1) as f64,
            single * 1e6,
            batch_rate,
            mem.bytes() as f64 / (1u64 << 20) as f64,
            rss_mib()
        );
        insert_secs = 0.0;
        inserted_since = 0;
    }
    let parts = mem.state_parts();
    let total: usize = parts.iter().map(|p| p.1.len()).sum();
    let largest = parts.iter().map(|p| p.1.len()).max().unwrap_or(0);
    println!(
        "state: {} parts, {:.1} MiB, largest part {largest} bytes",
        parts.len(),
        total as f64 / (1u64 << 20) as f64
    );
    println!("threads: {}", rayon::current_num_threads());
}
