//! Cost of the timeline query (`query::timesteps`, no time bound: what the dashboard, the
//! socket and `/api/v1/timesteps` ask after every commit) on a store of N verdicts: the
//! answer read from the stored per-timestep summaries against the same answer computed by
//! reading every verdict (`query::timesteps_scanned`, how it was answered before summaries).
//!
//!     cargo run --release --example timeline_query -- [verdicts] [docs-per-timestep]
//!
//! Defaults: 100,000 verdicts, 1,000 per timestep. The store is written directly through its
//! trees (records as a commit writes them: verdicts with 8 why-novel terms, timestep records,
//! summaries) so that building it takes seconds; both answers are checked equal. Prints the
//! median of 5 runs of each (after one warm-up run).
use std::time::Instant;

use novad::query;
use novad::store::schema::*;
use novad::store::Store;

fn verdict(t: u64, i: u64, per: u64) -> VerdictRecord {
    let h = (t * 2_654_435_761 + i * 40_503) % 1_000_003;
    VerdictRecord {
        doc_id: format!("doc-{t}-{i}"),
        time: 1_780_000_000_000 + (t * per + i) as i64 * 60_000 - (h % 7_200_000) as i64,
        timestep: t,
        seq: i as u32,
        source: format!("batch-{t:05}.jsonl"),
        score: (h as f64 / 1_000_003.0) * 3.0,
        novel: h % 17 == 0,
        bootstrap: t == 0,
        empty: h % 101 == 0,
        at_ceiling: false,
        terms: (0..8)
            .map(|j| (format!("term{}", (h + j) % 5000), 0.1))
            .collect(),
        hybrid: None,
        topic: None,
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn time(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(100_000, |a| a.parse().expect("verdicts"));
    let per: u64 = args
        .next()
        .map_or(1_000, |a| a.parse().expect("docs per timestep"));
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).expect("store");
    let steps = n.div_ceil(per);
    let built = Instant::now();
    for t in 0..steps {
        let vs: Vec<VerdictRecord> = (0..per.min(n - t * per))
            .map(|i| verdict(t, i, per))
            .collect();
        let mut b = sled::Batch::default();
        for v in &vs {
            b.insert(
                &verdict_key(v.time, v.timestep, v.seq),
                postcard::to_stdvec(v).unwrap(),
            );
        }
        store.tree(VERDICTS).apply_batch(b).unwrap();
        let rec = TimestepRecord {
            timestep: t,
            file: format!("batch-{t:05}.jsonl"),
            hash: "00".repeat(32),
            committed_at: 0,
            stats: novad_models::StepStats {
                timestep: t,
                docs: vs.len(),
                ..Default::default()
            },
        };
        let key = u64_key(t);
        store
            .tree(TIMESTEPS)
            .insert(key, postcard::to_stdvec(&rec).unwrap())
            .unwrap();
        let summary = StepSummary::of(&vs);
        store
            .tree(SUMMARIES)
            .insert(key, postcard::to_stdvec(&summary).unwrap())
            .unwrap();
    }
    store.db().flush().unwrap();
    let db = store.db();
    println!(
        "store: {n} verdicts in {steps} timesteps, built in {:.1} s",
        built.elapsed().as_secs_f64()
    );
    let fast = query::timesteps(db, None, None).unwrap();
    let scan = query::timesteps_scanned(db, None, None).unwrap();
    assert_eq!(
        serde_json::to_value(&fast).unwrap(),
        serde_json::to_value(&scan).unwrap(),
        "the two answers differ"
    );
    let before = time(5, || {
        query::timesteps_scanned(db, None, None).unwrap();
    });
    let after = time(5, || {
        query::timesteps(db, None, None).unwrap();
    });
    println!(
        "timeline from every verdict (before): {:.2} ms",
        before * 1e3
    );
    println!(
        "timeline from the summaries (after):  {:.3} ms",
        after * 1e3
    );
    println!("speed-up: {:.0}×", before / after);
}
