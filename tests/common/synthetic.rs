//! Synthetic batch files: small, fast to ingest, with no corpus on disk.

/// `n` (at most 1,440) documents dated `day` (ids `<day>-<i>`, a minute apart), each 20–60 words
/// drawn mostly from one of six small topic vocabularies, the rest shared filler words.
pub fn batch(seed: u64, n: usize, day: &str) -> String {
    use rand::{Rng, SeedableRng};
    const TOPICS: [&str; 6] = [
        "goalkeeper striker league penalty referee stadium season coach transfer derby",
        "compiler borrow checker lifetime trait generic crate module macro closure",
        "volcano eruption lava magma ash seismic crater summit tremor evacuation",
        "election ballot senate campaign poll debate governor turnout caucus primary",
        "telescope galaxy nebula orbit comet asteroid supernova quasar pulsar eclipse",
        "recipe flour butter oven dough yeast simmer garlic roast saffron",
    ];
    const FILLER: &str = "the of and a to in is it that for on with as was at by this";
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut out = String::new();
    for i in 0..n {
        let topic: Vec<&str> = TOPICS[r.random_range(0..TOPICS.len())].split(' ').collect();
        let filler: Vec<&str> = FILLER.split(' ').collect();
        let words: Vec<&str> = (0..r.random_range(20..60))
            .map(|_| {
                if r.random_bool(0.7) {
                    topic[r.random_range(0..topic.len())]
                } else {
                    filler[r.random_range(0..filler.len())]
                }
            })
            .collect();
        let v = serde_json::json!({
            "id": format!("{day}-{i}"),
            "time": format!("{day}T{:02}:{:02}:00Z", i / 60, i % 60),
            "text": words.join(" "),
        });
        out.push_str(&v.to_string());
        out.push('\n');
    }
    out
}
