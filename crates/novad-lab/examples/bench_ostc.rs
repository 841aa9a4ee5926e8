//! Per-timestep seconds of the streaming OSTC model on 20 Newsgroups batches, with the mean and
//! the 10 % / 90 % quantiles of the scores (the model's score rule, default `completion`) of
//! each batch before learning from it, and the documents the default adaptive threshold flags.
//!
//!     cargo run --release --example bench_ostc -- [batch size = 1000] [batches = 8] [k = 60] [tau0] [gamma] [rho] [collapsed 0|1] [score rule] [step rule]
use std::path::Path;

use novad_models::ostc::{OstcModel, OstcParams};
use rand::seq::SliceRandom;
use rand::SeedableRng;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: f64| a.get(i).map_or(d, |s| s.parse().unwrap());
    let (size, batches) = (arg(0, 1000.0) as usize, arg(1, 8.0) as usize);
    let d = OstcParams::default();
    let p = OstcParams {
        k: arg(2, d.k as f64) as usize,
        tau0: arg(3, d.tau0),
        gamma: arg(4, d.gamma),
        rho: arg(5, d.rho),
        collapsed: arg(6, 0.0) > 0.0,
        score: a.get(7).map_or(d.score, |s| {
            serde_json::from_value(serde_json::Value::String(s.clone())).unwrap()
        }),
        step_rule: a.get(8).map_or(d.step_rule, |s| {
            serde_json::from_value(serde_json::Value::String(s.clone())).unwrap()
        }),
        ..d
    };
    let mut posts =
        novad_lab::corpus::read_20news(Path::new("../shared/data/20news-bydate.tar.gz")).unwrap();
    posts.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(0));
    let mut m = OstcModel::new(p).unwrap();
    println!(
        "score rule: {:?}, step rule: {:?}",
        m.params().score,
        m.params().step_rule
    );
    println!(
        "timestep  docs  vocab  mean_score  q10_score  q90_score  novel  topics  s_code  s_update  s_total"
    );
    for (t, chunk) in posts.chunks(size).take(batches).enumerate() {
        let texts: Vec<&str> = chunk.iter().map(|p| p.text.as_str()).collect();
        let t0 = std::time::Instant::now();
        let (n, out) = m.step(&texts).unwrap();
        let secs = t0.elapsed().as_secs_f64();
        let st = &out.stats;
        let mut live: Vec<f64> = out
            .verdicts
            .iter()
            .filter(|v| !v.empty)
            .map(|v| v.score)
            .collect();
        live.sort_by(f64::total_cmp);
        let q = |f: f64| {
            live.get((f * live.len() as f64) as usize)
                .copied()
                .unwrap_or(0.0)
        };
        println!(
            "{t:8}  {:4}  {:5}  {:10.4}  {:9.4}  {:9.4}  {:5}  {:6}  {:6.2}  {:8.2}  {:7.2}",
            st.docs,
            st.vocabulary,
            live.iter().sum::<f64>() / live.len().max(1) as f64,
            q(0.1),
            q(0.9),
            st.novel,
            st.topics,
            st.seconds_coding,
            st.seconds_update,
            secs
        );
        m = n;
    }
    // the five topics with the most mass on their top 10 terms
    let b = m.beta();
    let mut tops: Vec<(f64, String)> = (0..b.ncols())
        .map(|k| {
            let mut t: Vec<(u32, f32)> = b
                .column(k)
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as u32, v))
                .collect();
            t.sort_by(|a, b| b.1.total_cmp(&a.1));
            let mass: f64 = t.iter().take(10).map(|x| x.1 as f64).sum();
            let words: Vec<&str> = t.iter().take(8).map(|x| m.vocab().term(x.0)).collect();
            (
                mass,
                format!("topic {k} (top-10 mass {mass:.2}): {}", words.join(" ")),
            )
        })
        .collect();
    tops.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, s) in tops.iter().take(5).chain(tops.iter().rev().take(2)) {
        println!("{s}");
    }
}
