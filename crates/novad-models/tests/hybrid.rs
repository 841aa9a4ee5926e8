//! The hybrid detector (default ℓ1 model + document memory) on the example batches: three
//! days of small news, baking chatter on every day, a volcano story only on day 3.

use novad_models::memory::{DocRef, Hybrid, HybridDoc, HybridParams, HybridVerdict, TermVector};
use novad_models::{Model, Params};

struct Day {
    ids: Vec<String>,
    texts: Vec<String>,
}

fn days() -> Vec<Day> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/batches");
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| {
            let (mut ids, mut texts) = (Vec::new(), Vec::new());
            for line in std::fs::read_to_string(p).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                ids.push(v["id"].as_str().unwrap().to_string());
                texts.push(v["text"].as_str().unwrap().to_string());
            }
            Day { ids, texts }
        })
        .collect()
}

/// Run the default model and the hybrid over the days; per day the hybrid's verdicts.
fn run() -> (Vec<Day>, Vec<Vec<HybridVerdict>>) {
    let days = days();
    let params = Params::default();
    let mut model = Model::new(params.clone()).unwrap();
    let mut hybrid = Hybrid::new(HybridParams::default()).unwrap();
    let mut hv = Vec::new();
    for (t, day) in days.iter().enumerate() {
        let (next, out) = model.step(&day.texts).unwrap();
        let vectors: Vec<TermVector> = out
            .vectors
            .iter()
            .map(|v| TermVector::from_sparse(v, |id| next.vocab().term(id)))
            .collect();
        let docs: Vec<HybridDoc> = vectors
            .iter()
            .zip(&out.verdicts)
            .enumerate()
            .map(|(i, (v, verdict))| HybridDoc {
                reference: DocRef {
                    timestep: t as u64,
                    seq: i as u32,
                    time: t as i64,
                },
                vector: v,
                model_score: verdict.score,
            })
            .collect();
        let step = hybrid
            .step(&docs, &params.threshold, out.stats.bootstrap)
            .unwrap();
        hybrid.apply(step.plan);
        model = next;
        hv.push(step.verdicts);
    }
    (days, hv)
}

fn flagged(ids: &[String], novel: impl Iterator<Item = bool>) -> Vec<&str> {
    ids.iter()
        .zip(novel)
        .filter(|(_, n)| *n)
        .map(|(i, _)| i.as_str())
        .collect()
}

#[test]
fn day_three_flags_the_volcano_story_not_the_recurring_chatter() {
    let (days, hv) = run();
    let day3 = &days[2];
    let volcano: Vec<&str> = day3
        .ids
        .iter()
        .filter(|i| i.contains("-v"))
        .map(|s| s.as_str())
        .collect();
    assert!(volcano.len() >= 6, "the example has its volcano documents");
    let hybrid_flags = flagged(&day3.ids, hv[2].iter().map(|v| v.novel));
    for v in &volcano {
        assert!(
            hybrid_flags.contains(v),
            "{v} not flagged: {hybrid_flags:?}"
        );
    }
    let others: Vec<&&str> = hybrid_flags
        .iter()
        .filter(|i| !volcano.contains(i))
        .collect();
    assert!(others.len() <= 2, "flagged besides the volcano: {others:?}");
    // every volcano document outranks every recurring one on the fused score
    let (mut lo_volcano, mut hi_other) = (f64::INFINITY, f64::NEG_INFINITY);
    for (v, id) in hv[2].iter().zip(&day3.ids) {
        if volcano.contains(&id.as_str()) {
            lo_volcano = lo_volcano.min(v.score);
        } else {
            hi_other = hi_other.max(v.score);
        }
    }
    assert!(lo_volcano > hi_other, "{lo_volcano} vs {hi_other}");
}

#[test]
fn verdicts_explain_themselves_with_the_nearest_earlier_document() {
    let (days, hv) = run();
    for (t, day) in hv.iter().enumerate().skip(1) {
        for (i, v) in day.iter().enumerate() {
            assert!(v.score.is_finite() && (0.0..=1.0).contains(&v.score));
            if v.empty {
                continue;
            }
            let (r, cos) = v.nearest.expect("every example document shares a term");
            assert!(
                r.timestep < t as u64,
                "{}: neighbour from its own day",
                days[t].ids[i]
            );
            assert!((v.nn_score - (1.0 - cos)).abs() < 1e-12);
            assert!((0.0..=1.0).contains(&v.model_quantile));
            assert!((0.0..=1.0).contains(&v.nn_quantile));
        }
    }
    // a volcano document's nearest earlier document is farther than any baking chatter's
    let day3 = &days[2];
    let worst_chatter = hv[2]
        .iter()
        .zip(&day3.ids)
        .filter(|(_, id)| !id.contains("-v"))
        .map(|(v, _)| v.nearest.map_or(0.0, |n| n.1))
        .fold(1.0f64, f64::min);
    let best_volcano = hv[2]
        .iter()
        .zip(&day3.ids)
        .filter(|(_, id)| id.contains("-v"))
        .map(|(v, _)| v.nearest.map_or(0.0, |n| n.1))
        .fold(0.0f64, f64::max);
    assert!(
        best_volcano < worst_chatter,
        "{best_volcano} vs {worst_chatter}"
    );
}
