//! Shared fixtures of the OSTC integration tests: planted-topic corpora, small parameters and
//! the state as a map of named parts.

use std::collections::BTreeMap;

use novad_models::ostc::{OstcModel, OstcParams};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A Poisson(`mean`) count by inversion (one uniform draw), capped at 60.
pub fn poisson(rng: &mut ChaCha8Rng, mean: f64) -> usize {
    let u: f64 = rng.random_range(0.0..1.0);
    let (mut c, mut p) = (0usize, (-mean).exp());
    let mut cdf = p;
    while u > cdf && c < 60 {
        c += 1;
        p *= mean / c as f64;
        cdf += p;
    }
    c
}

/// Synthetic corpus: `topics` planted topics, each on its own 12 words (`t{k}w{i}` spelled in
/// letters), documents mixing one or two topics with Poisson counts.
pub fn planted(rng: &mut ChaCha8Rng, topics: &[usize], docs: usize) -> Vec<String> {
    let word = |k: usize, i: usize| {
        format!(
            "topic{}word{}",
            (b'a' + k as u8) as char,
            (b'a' + i as u8) as char
        )
    };
    (0..docs)
        .map(|_| {
            let k1 = topics[rng.random_range(0..topics.len())];
            let k2 = topics[rng.random_range(0..topics.len())];
            let mut out = Vec::new();
            for (k, weight) in [(k1, 0.8), (k2, 0.2)] {
                for i in 0..12 {
                    // Zipf-like topic weights
                    let c = poisson(rng, 30.0 * weight / (i as f64 + 2.0));
                    for _ in 0..c {
                        out.push(word(k, i));
                    }
                }
            }
            out.join(" ")
        })
        .collect()
}

pub fn small_params(seed: u64, k: usize) -> OstcParams {
    OstcParams {
        seed,
        k,
        gamma: 0.1,
        rho: 0.1,
        tau0: 0.01,
        step_rule: novad_models::ostc::dictionary::StepRule::Raw,
        batch_size: 16,
        passes: 3,
        bootstrap_passes: 10,
        init_data_weight: 1.0,
        ..OstcParams::default()
    }
}

pub fn parts_map(m: &OstcModel) -> BTreeMap<String, Vec<u8>> {
    m.state_parts().into_iter().collect()
}
