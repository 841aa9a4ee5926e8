//! The hybrid detector (default ℓ1 model + document memory) on the example batches: three
//! days of small news, baking chatter on every day, a volcano story only on day 3; and the
//! memory's cap and state persistence through the engine.

use std::collections::BTreeMap;

use novad_models::events::Events;
use novad_models::events::{EventBatch, EventParams};
use novad_models::l1::dictionary::LOGICAL_SHARDS;
use novad_models::l1::params::AdaptParams;
use novad_models::l1::replicate::{
    CodedAndFound, CodingJob, Local, Query, Replication, ShardOutput, ShardTerms, TermJob,
};
use novad_models::l1::Model;
use novad_models::memory::{Floor, HybridParams, HybridVerdict, MemoryParams};
use novad_models::model::EngineError;
use novad_models::{Engine, ModelParams, Params, StepOutput, INCREMENTAL_PREFIX};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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

/// Run the default ℓ1 parameters (hybrid detector on) through the engine, as the daemon does;
/// per day the hybrid's verdicts.
fn run() -> (Vec<Day>, Vec<Vec<HybridVerdict>>) {
    let days = days();
    let params = Params::default();
    assert!(params.hybrid.is_some());
    let mut engine = Engine::new(ModelParams::L1(params)).unwrap();
    let mut hv = Vec::new();
    for (t, day) in days.iter().enumerate() {
        let texts: Vec<&str> = day.texts.iter().map(String::as_str).collect();
        let (next, out) = engine
            .step_at(&texts, &vec![t as i64; texts.len()])
            .unwrap();
        for (v, h) in out.verdicts.iter().zip(&out.hybrid) {
            assert_eq!(
                (v.score, v.novel),
                (h.score, h.novel),
                "verdicts are the hybrid's"
            );
        }
        engine = next;
        hv.push(out.hybrid);
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

/// A stream of small batches: topic documents, stop-word-only documents (no known term) and
/// one batch of nothing but those. Returns the batches and which documents have a known term.
fn capped_stream(seed: u64, batches: usize) -> Vec<Vec<(String, bool)>> {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    (0..batches)
        .map(|t| {
            let n = if t == 0 { 24 } else { r.random_range(1..10) };
            (0..n)
                .map(|_| {
                    if t == 5 || r.random::<f64>() < 0.15 {
                        return ("the and of it".to_string(), false);
                    }
                    let topic = r.random_range(0..6) + t / 8;
                    let mut words: Vec<String> = (0..12)
                        .map(|_| format!("t{topic}w{}", r.random_range(0..15)))
                        .collect();
                    for _ in 0..3 {
                        words.push(format!("noise{}", r.random_range(0..200)));
                    }
                    (words.join(" "), true)
                })
                .collect()
        })
        .collect()
}

fn capped_params(max_docs: usize) -> ModelParams {
    let mut p = Params::default().with_k(6);
    p.hybrid = Some(HybridParams {
        memory: MemoryParams {
            max_docs,
            ..MemoryParams::default()
        },
        ..HybridParams::default()
    });
    ModelParams::L1(p)
}

fn step(e: &Engine, t: usize, batch: &[(String, bool)]) -> (Engine, StepOutput) {
    let texts: Vec<&str> = batch.iter().map(|d| d.0.as_str()).collect();
    let times: Vec<i64> = (0..texts.len())
        .map(|i| 1000 * t as i64 + i as i64)
        .collect();
    e.step_at(&texts, &times).unwrap()
}

fn moving_step(e: &mut Engine, t: usize, batch: &[(String, bool)]) -> (Engine, StepOutput) {
    let texts: Vec<&str> = batch.iter().map(|d| d.0.as_str()).collect();
    let times: Vec<i64> = (0..texts.len())
        .map(|i| 1000 * t as i64 + i as i64)
        .collect();
    e.step_at_moving(&texts, &times).unwrap()
}

/// Scores, flags and explanations of a step, and the state it leads to.
fn outcome(
    e: &Engine,
    t: usize,
    batch: &[(String, bool)],
) -> (Vec<(f64, bool)>, Vec<HybridVerdict>, Vec<u8>) {
    let (next, out) = step(e, t, batch);
    let v = out.verdicts.iter().map(|v| (v.score, v.novel)).collect();
    (v, out.hybrid, next.to_bytes())
}

/// What a store holds after committing `engine`'s state write over `stored`: the parts given in
/// full replace every part outside the incremental prefix; the delta updates the rest.
fn commit_write(stored: &mut BTreeMap<String, Vec<u8>>, engine: &Engine) {
    let w = engine.state_write();
    match &w.incremental {
        None => *stored = w.full.into_iter().collect(),
        Some(d) => {
            stored.retain(|n, _| n.starts_with(INCREMENTAL_PREFIX));
            assert!(w
                .full
                .iter()
                .all(|(n, _)| !n.starts_with(INCREMENTAL_PREFIX)));
            stored.extend(w.full);
            d.apply_to(stored);
        }
    }
}

#[test]
fn the_memory_never_exceeds_its_cap_and_the_delta_and_in_place_paths_equal_the_full_state() {
    let cap = 20;
    let params = capped_params(cap);
    let stream = capped_stream(7, 40);
    let mut engine = Engine::new(params.clone()).unwrap();
    // the daemon's path: the memory moved along and updated in place
    let mut moving = Engine::new(params.clone()).unwrap();
    let mut stored: BTreeMap<String, Vec<u8>> = engine.state_parts().into_iter().collect();
    let mut nonempty = 0usize;
    let mut max_seen = 0usize;
    for (t, batch) in stream.iter().enumerate() {
        let (next, out) = step(&engine, t, batch);
        for (v, d) in out.verdicts.iter().zip(batch) {
            assert_eq!(v.empty, !d.1, "{}", d.0);
        }
        let (moved, moved_out) = moving_step(&mut moving, t, batch);
        assert_eq!(moved_out.hybrid, out.hybrid, "timestep {t}");
        let scores = |o: &StepOutput| {
            o.verdicts
                .iter()
                .map(|v| (v.score, v.novel))
                .collect::<Vec<_>>()
        };
        assert_eq!(scores(&moved_out), scores(&out), "timestep {t}");
        assert_eq!(moved.to_bytes(), next.to_bytes(), "timestep {t}");
        let (a, b) = (moved.state_write(), next.state_write());
        assert_eq!(
            (a.full, a.incremental),
            (b.full, b.incremental),
            "timestep {t}"
        );
        assert!(moving.is_spent() && !moved.is_spent());
        let again = moving.step_at(&["lava"], &[0]).unwrap_err().to_string();
        assert!(again.contains("moved"), "{again}");
        moving = moved;
        nonempty += batch.iter().filter(|d| d.1).count();
        let len = next.hybrid().unwrap().memory().len();
        assert!(
            len <= cap,
            "timestep {t}: {len} documents over a cap of {cap}"
        );
        assert_eq!(len, nonempty.min(cap), "timestep {t}");
        max_seen = max_seen.max(len);
        // the store's path: this step's write over what was stored before it
        commit_write(&mut stored, &next);
        let full: BTreeMap<String, Vec<u8>> = next.state_parts().into_iter().collect();
        assert_eq!(
            stored, full,
            "timestep {t}: delta-applied parts differ from the full parts"
        );
        let from_full = Engine::from_state_parts(params.clone(), &full).unwrap();
        let from_delta = Engine::from_state_parts(params.clone(), &stored).unwrap();
        assert_eq!(from_full.to_bytes(), next.to_bytes(), "timestep {t}");
        assert_eq!(from_delta.to_bytes(), next.to_bytes(), "timestep {t}");
        if let Some(probe) = stream.get(t + 1) {
            let want = outcome(&next, t + 1, probe);
            assert_eq!(
                outcome(&from_full, t + 1, probe),
                want,
                "timestep {}",
                t + 1
            );
            assert_eq!(
                outcome(&from_delta, t + 1, probe),
                want,
                "timestep {}",
                t + 1
            );
        }
        engine = next;
    }
    assert!(
        nonempty > 3 * cap,
        "the stream overflows the memory several times"
    );
    assert_eq!(max_seen, cap);
    // oldest-first eviction: the memory holds exactly the last `cap` documents with a term
    let mut kept: Vec<(u64, u32)> = engine
        .hybrid()
        .unwrap()
        .memory()
        .docs()
        .map(|(_, d)| (d.reference.timestep, d.reference.seq))
        .collect();
    kept.sort_unstable();
    let all: Vec<(u64, u32)> = stream
        .iter()
        .enumerate()
        .flat_map(|(t, b)| {
            b.iter()
                .enumerate()
                .filter(|(_, d)| d.1)
                .map(move |(i, _)| (t as u64, i as u32))
        })
        .collect();
    assert_eq!(kept, all[all.len() - cap..]);
}

#[test]
fn a_memory_that_holds_some_shards_only_does_not_step_alone() {
    use novad_models::memory::Share;
    let stream = capped_stream(3, 4);
    let mut engine = Engine::new(capped_params(1000)).unwrap();
    for (t, b) in stream.iter().enumerate().take(3) {
        engine = step(&engine, t, b).0;
    }
    // the whole memory again is a no-op; half of it cannot answer for the whole
    engine.share_memory(Share::all()).unwrap();
    let whole = step(&engine, 3, &stream[3]).1;
    engine.share_memory(Share::of(&[0, 1, 2], true)).unwrap();
    let texts: Vec<&str> = stream[3].iter().map(|d| d.0.as_str()).collect();
    let e = engine
        .step_at(&texts, &vec![3000; texts.len()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("indexes only some logical shards"), "{e}");
    assert!(!whole.verdicts.is_empty());
}

/// Tokenises and codes every shard here, but is not `Local`: the step hands its judge's search
/// to [`Replication::code_and_search`] with the coding, as a cluster's step does. Answers it
/// here, in the given order, and counts the searches handed over.
struct Apart {
    queries: usize,
}

impl Replication for Apart {
    fn terms(&mut self, job: &TermJob<'_>) -> Result<Vec<ShardTerms>, EngineError> {
        Ok(job.run(&(0..LOGICAL_SHARDS).collect::<Vec<_>>()))
    }
    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError> {
        Ok(job.run(&(0..LOGICAL_SHARDS).collect::<Vec<_>>()))
    }
    fn code_and_search(
        &mut self,
        job: &CodingJob<'_>,
        query: Option<&Query<'_>>,
    ) -> Result<CodedAndFound, EngineError> {
        let near = query.map(|q| {
            self.queries += 1;
            // the second half of the batch first: the answer is by position, whatever the order
            let mut at: Vec<(usize, Option<Floor>)> = (0..q.n).map(|j| (j, None)).collect();
            at.rotate_left(q.n / 2);
            let found = (q.search)(&at);
            let mut near = vec![None; q.n];
            for ((j, _), x) in at.into_iter().zip(found) {
                near[j] = x;
            }
            near
        });
        Ok((self.code(job)?, near))
    }
}

/// A step whose judge's search runs with the coding (a replication that is not `Local`) scores,
/// flags, explains and leads to the same state as the single-node step, bit for bit.
#[test]
fn the_search_run_with_the_coding_gives_the_single_node_step() {
    let stream = capped_stream(7, 10);
    let mut local = Engine::new(capped_params(40)).unwrap();
    let mut apart = Engine::new(capped_params(40)).unwrap();
    let mut rep = Apart { queries: 0 };
    for (t, b) in stream.iter().enumerate() {
        let texts: Vec<&str> = b.iter().map(|d| d.0.as_str()).collect();
        let times: Vec<i64> = (0..texts.len())
            .map(|i| 1000 * t as i64 + i as i64)
            .collect();
        let (l, lo) = local
            .step_at_moving_replicated(&texts, &times, &mut Local)
            .unwrap();
        let (a, ao) = apart
            .step_at_moving_replicated(&texts, &times, &mut rep)
            .unwrap();
        let v = |o: &StepOutput| -> Vec<(u64, bool)> {
            o.verdicts
                .iter()
                .map(|v| (v.score.to_bits(), v.novel))
                .collect()
        };
        assert_eq!(v(&lo), v(&ao), "timestep {t}");
        assert_eq!(lo.hybrid, ao.hybrid, "timestep {t}");
        assert_eq!(l.to_bytes(), a.to_bytes(), "timestep {t}");
        (local, apart) = (l, a);
    }
    // every step codes (the first one after learning its atoms), and hands its search over
    assert_eq!(rep.queries, stream.len());
}

/// Batches of 60 documents on six known subjects; from timestep 3 on, a third of each batch
/// is a story none of the earlier ones told.
fn story_stream(seed: u64, batches: usize) -> Vec<Vec<String>> {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    (0..batches)
        .map(|t| {
            (0..60)
                .map(|i| {
                    let subject = if t >= 3 && i % 3 == 0 {
                        format!("story{}", t / 3)
                    } else {
                        format!("s{}", r.random_range(0..6))
                    };
                    let mut words: Vec<String> = (0..14)
                        .map(|_| format!("{subject}w{}", r.random_range(0..12)))
                        .collect();
                    words.extend((0..4).map(|_| format!("noise{}", r.random_range(0..300))));
                    words.join(" ")
                })
                .collect()
        })
        .collect()
}

/// The event tracker stepped within the model's step — on a thread of its own beside the
/// update where the rounds wait for other workers, else after it — gives the events the
/// engine's event stage gives a model that does not step it: the tracker before the step,
/// stepped on the step's vectors, the vocabulary after it and the verdicts' flags and fused
/// scores. Same topics and tracker, bit for bit, either way.
#[test]
fn the_tracker_stepped_beside_the_update_gives_the_events_of_the_verdicts() {
    let ModelParams::L1(mut p) = capped_params(400) else {
        unreachable!()
    };
    p.events = Some(EventParams::default());
    let params = ModelParams::L1(p);
    let (mut local, mut apart) = (
        Engine::new(params.clone()).unwrap(),
        Engine::new(params).unwrap(),
    );
    let mut rep = Apart { queries: 0 };
    let mut with_topics = 0;
    for (t, b) in story_stream(11, 7).iter().enumerate() {
        let texts: Vec<&str> = b.iter().map(String::as_str).collect();
        let times = vec![t as i64; texts.len()];
        let before = apart.events().unwrap().clone();
        let (a, ao) = apart
            .step_at_moving_replicated(&texts, &times, &mut rep)
            .unwrap();
        let (l, lo) = local.step_at_moving(&texts, &times).unwrap();
        let novel: Vec<bool> = ao.verdicts.iter().map(|v| v.novel).collect();
        let scores: Vec<f64> = ao.verdicts.iter().map(|v| v.score).collect();
        let (next, topics) = before.step(&EventBatch {
            timestep: t as u64,
            vectors: &ao.vectors,
            vocab: a.vocab(),
            novel: &novel,
            scores: &scores,
        });
        assert_eq!(ao.topics, topics, "timestep {t}");
        assert_eq!(a.events().unwrap().state_parts(), next.state_parts());
        assert_eq!(lo.topics, ao.topics, "timestep {t}");
        assert_eq!(l.to_bytes(), a.to_bytes(), "timestep {t}");
        with_topics += usize::from(!topics.is_empty());
        (local, apart) = (l, a);
    }
    // the story breaks and events are found
    assert!(with_topics >= 2, "{with_topics} timesteps with events");
}

/// With atoms injected from the step's topics, the tracker's events never become atoms: the
/// model stepped with the tracker (on its thread beside the update) equals the model stepped
/// without it, bit for bit, while the tracker finds events.
#[test]
fn the_trackers_events_never_become_atoms() {
    let mut p = Params::default().with_k(6);
    p.adapt = Some(AdaptParams {
        inject: true,
        retire_after: 0,
        min_atoms: 6,
        max_atoms: 12,
    });
    p.events = Some(EventParams::default());
    let mut events = Events::new(EventParams::default()).unwrap();
    let (mut with, mut without) = (Model::new(p.clone()).unwrap(), Model::new(p).unwrap());
    let mut rep = Apart { queries: 0 };
    let mut with_topics = 0;
    for b in story_stream(11, 7) {
        let (w, wo, next) = with
            .step_tracked(&b, None, &mut rep, Some(&events))
            .unwrap();
        let (n, _) = without.step_replicated(&b, None, &mut Local).unwrap();
        assert_eq!(w.to_bytes(), n.to_bytes());
        with_topics += usize::from(!wo.topics.is_empty());
        (with, without, events) = (w, n, next.unwrap());
    }
    assert!(with_topics >= 2, "{with_topics} timesteps with events");
}
