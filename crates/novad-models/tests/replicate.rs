//! A step whose topics and refresh plan were worked out by another replica ([`Found`]), or
//! whose dictionary update was shared by row shards among several ([`GradientRows`]).
mod common;

use common::ostc::planted;
use common::rng;
use std::sync::{Barrier, Mutex};

use novad_models::l1::dictionary::{
    add_sums, ColumnSum, GradientRows, ProjectedRows, UpdateJob, LOGICAL_SHARDS,
};
use novad_models::l1::replicate::{
    CodingJob, Found, Replication, ShardOutput, ShardTerms, TermJob,
};
use novad_models::model::EngineError;
use novad_models::{Model, Params};
use rand::Rng;

/// Codes every shard here; works out the step's `Found` itself and keeps a copy of it.
struct Finder {
    kept: Option<Found>,
}

/// Codes every shard here; takes the step's `Found` from elsewhere.
struct Taker {
    given: Found,
}

fn code_all(job: &CodingJob<'_>) -> Vec<ShardOutput> {
    job.run(&(0..LOGICAL_SHARDS).collect::<Vec<_>>())
}

fn terms_all(job: &TermJob<'_>) -> Vec<ShardTerms> {
    job.run(&(0..LOGICAL_SHARDS).collect::<Vec<_>>())
}

impl Replication for Finder {
    fn terms(&mut self, job: &TermJob<'_>) -> Result<Vec<ShardTerms>, EngineError> {
        Ok(terms_all(job))
    }
    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError> {
        Ok(code_all(job))
    }
    fn offer(&mut self, mine: Option<&Found>) -> Result<(), EngineError> {
        self.kept = mine.cloned();
        Ok(())
    }
}

impl Replication for Taker {
    fn terms(&mut self, job: &TermJob<'_>) -> Result<Vec<ShardTerms>, EngineError> {
        Ok(terms_all(job))
    }
    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError> {
        Ok(code_all(job))
    }
    fn finds(&self) -> bool {
        false
    }
    fn found(&mut self, mine: Option<Found>) -> Result<Found, EngineError> {
        assert!(mine.is_none(), "a taker works nothing out");
        Ok(self.given.clone())
    }
}

/// A model with the default detector's parameters after a bootstrap batch, and the next batch.
fn bootstrapped() -> (Model, Vec<String>) {
    let mut r = rng(11);
    let mut p = Params::novad_default();
    p.k = 12;
    // the finder's topics are DICTCLUST's (events are the engine's, after the step)
    p.events = None;
    p.topics = Some(novad_models::l1::dictclust::TopicParams::default());
    let model = Model::new(p).unwrap();
    let (model, _) = model
        .step(&planted(&mut r, &[0, 1, 2, 3, 4, 5], 120))
        .unwrap();
    // new topics appear: novel documents, topics and refreshed atoms
    (model, planted(&mut r, &[0, 1, 6, 7, 8], 120))
}

/// Taking the finder's topics and refresh plan gives the finder's step bit for bit; a
/// missing or spoiled plan fails the step instead of changing the model.
#[test]
fn a_step_with_the_finders_plan_equals_the_finders_step() {
    let (model, batch) = bootstrapped();
    let mut finder = Finder { kept: None };
    let (a, out_a) = model.step_replicated(&batch, None, &mut finder).unwrap();
    let found = finder.kept.expect("the finder offered its work");
    let plan = found.refresh.clone().expect("the default refreshes atoms");
    assert!(!plan.writes.is_empty() && out_a.stats.atoms_refreshed > 0);
    assert!(!out_a.topics.is_empty(), "the batch has emerging topics");

    let mut taker = Taker {
        given: found.clone(),
    };
    let (b, out_b) = model.step_replicated(&batch, None, &mut taker).unwrap();
    assert_eq!(a.state_parts(), b.state_parts());
    assert_eq!(out_a.topics, out_b.topics);
    let bits = |o: &novad_models::StepOutput| -> Vec<u64> {
        o.verdicts.iter().map(|v| v.score.to_bits()).collect()
    };
    assert_eq!(bits(&out_a), bits(&out_b));
    // and the same as a plain single-node step
    let (c, _) = model.step(&batch).unwrap();
    assert_eq!(a.state_parts(), c.state_parts());

    let spoiled = |f: &dyn Fn(&mut Found)| {
        let mut given = found.clone();
        f(&mut given);
        let r = model.step_replicated(&batch, None, &mut Taker { given });
        match r {
            Err(EngineError::Inconsistent(e)) => e,
            other => panic!("expected an inconsistency, got {:?}", other.map(|_| ())),
        }
    };
    assert!(spoiled(&|f| f.refresh = None).contains("refresh plan is missing"));
    assert!(spoiled(&|f| f.topics = None).contains("topics is missing"));
    let e = spoiled(&|f| f.refresh.as_mut().unwrap().victims[0] = 12);
    assert!(e.contains("does not fit"), "{e}");
}

/// The batch's documents tokenised and resolved by shard come back in batch order, equal to
/// resolving each document here; a part that does not fit the vocabulary or leaves a shard
/// out is refused, naming the shard.
#[test]
fn terms_resolved_by_shard_assemble_in_batch_order_and_are_checked() {
    use novad_models::text::Term;
    let p = Params::novad_default();
    let tokenizer = p.tokenizer();
    let (model, batch) = bootstrapped();
    let vocab = model.vocab();
    let texts: Vec<&str> = batch.iter().map(String::as_str).collect();
    let job = TermJob {
        timestep: model.timestep(),
        texts: &texts,
        tokenizer: &tokenizer,
        vocab,
    };
    // two workers' halves, the odd shards first
    let (even, odd): (Vec<usize>, Vec<usize>) = (0..LOGICAL_SHARDS).partition(|s| s % 2 == 0);
    let mut outs = job.run(&odd);
    outs.extend(job.run(&even));
    let all = job.assemble(outs.clone()).unwrap();
    assert_eq!(all.len(), texts.len());
    for (j, d) in all.iter().enumerate() {
        assert_eq!(
            d,
            &vocab.resolve(&tokenizer.tokens(texts[j])),
            "document {j}"
        );
    }
    assert!(all.iter().flatten().any(|(t, _)| matches!(t, Term::New(_))));
    let err = |outs: Vec<_>| match job.assemble(outs) {
        Err(EngineError::Inconsistent(e)) => e,
        other => panic!("expected an inconsistency, got {:?}", other.map(|_| ())),
    };
    // a document with known terms first and a new one last
    let (s, d) = (0..outs.len())
        .flat_map(|s| (0..outs[s].docs.len()).map(move |d| (s, d)))
        .find(|&(s, d)| {
            let doc = &outs[s].docs[d];
            doc.len() > 2
                && doc[..2].iter().all(|(t, _)| matches!(t, Term::Known(_)))
                && matches!(doc.last(), Some((Term::New(_), _)))
        })
        .expect("a document with known and new terms");
    let misfit = |outs: Vec<_>, why: &str| {
        let e = err(outs);
        assert!(
            e.contains("does not fit the vocabulary: ") && e.contains(why),
            "{e}"
        );
    };
    let mut past = outs.clone();
    past[s].docs[d].insert(2, (Term::Known(vocab.len() as u32), 1));
    misfit(past, "past the vocabulary's end");
    let mut zero = outs.clone();
    zero[s].docs[d][0].1 = 0;
    misfit(zero, "counted zero times");
    let mut short = outs.clone();
    let gone = short.remove(3).shard;
    assert!(err(short).contains(&format!("logical shard {gone} ")));
    // a known term twice, or spelled out although the vocabulary holds it
    let mut twice = outs.clone();
    let first = twice[s].docs[d][0].clone();
    twice[s].docs[d].insert(1, first);
    misfit(twice, "not in increasing order (or one twice)");
    let mut spelled = outs.clone();
    let held = vocab.term(0).to_string();
    spelled[2].docs[0].retain(|(t, _)| t != &Term::Known(0));
    spelled[2].docs[0].push((Term::New(held), 1));
    misfit(spelled, "a new term the vocabulary holds");
    let mut again_new = outs.clone();
    let last = again_new[s].docs[d].last().unwrap().clone();
    again_new[s].docs[d].push(last);
    misfit(again_new, "a new term twice");
    // not in the resolver's order: two known ids swapped, a new term before a known one
    let mut swapped = outs.clone();
    swapped[s].docs[d].swap(0, 1);
    misfit(swapped, "not in increasing order");
    let mut late = outs.clone();
    late[s].docs[d].rotate_right(1);
    misfit(late, "a known term after a new one");
    let mut again = outs.clone();
    again.push(outs[0].clone());
    assert!(err(again).contains("given twice"));
}

/// An in-memory all-gather among threads: each round every worker puts its payload and takes
/// everyone's, by worker.
struct Hub<T> {
    slots: Mutex<Vec<Option<T>>>,
    barrier: Barrier,
}

impl<T: Clone> Hub<T> {
    fn new(workers: usize) -> Self {
        Hub {
            slots: Mutex::new(vec![None; workers]),
            barrier: Barrier::new(workers),
        }
    }
    fn exchange(&self, me: usize, mine: T) -> Vec<T> {
        self.slots.lock().unwrap()[me] = Some(mine);
        self.barrier.wait();
        let all = self
            .slots
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .map(Option::unwrap)
            .collect();
        // nobody puts the next round's payload before everyone took this one's
        self.barrier.wait();
        all
    }
}

/// A worker of a cluster in threads: tokenises and codes every shard itself, and shares the
/// dictionary update with the others through the hubs, computing the gradient rows of its
/// hand of the row shards; `tamper` has its way with the gathered rows.
struct Peer<'a> {
    me: usize,
    hand: Vec<usize>,
    sums: &'a Hub<Vec<ColumnSum>>,
    rows: &'a Hub<Vec<ProjectedRows>>,
    tamper: fn(&mut Vec<ProjectedRows>),
}

impl Replication for Peer<'_> {
    fn terms(&mut self, job: &TermJob<'_>) -> Result<Vec<ShardTerms>, EngineError> {
        Ok(terms_all(job))
    }
    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError> {
        Ok(code_all(job))
    }
    fn gradient(&mut self, job: &UpdateJob<'_>) -> Result<Vec<GradientRows>, EngineError> {
        Ok(job.run(&self.hand))
    }
    fn reduce(&mut self, mine: Vec<ColumnSum>) -> Result<Vec<ColumnSum>, EngineError> {
        let all = self.sums.exchange(self.me, mine);
        let mut total = all[0].clone();
        for o in &all[1..] {
            add_sums(&mut total, o).map_err(EngineError::Inconsistent)?;
        }
        Ok(total)
    }
    fn gather_rows(&mut self, mine: Vec<ProjectedRows>) -> Result<Vec<ProjectedRows>, EngineError> {
        let mut all: Vec<ProjectedRows> = self.rows.exchange(self.me, mine).concat();
        (self.tamper)(&mut all);
        Ok(all)
    }
}

/// Step `model` on `batch` with `workers` peers in threads, the row shards dealt at random:
/// every peer's new model.
fn step_in_peers(
    model: &Model,
    batch: &[String],
    workers: usize,
    seed: u64,
    tamper: fn(&mut Vec<ProjectedRows>),
) -> Vec<Result<Model, EngineError>> {
    let mut r = rng(seed);
    let owner: Vec<usize> = (0..LOGICAL_SHARDS)
        .map(|_| r.random_range(0..workers))
        .collect();
    let (sums, rows) = (Hub::new(workers), Hub::new(workers));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|me| {
                let hand = (0..LOGICAL_SHARDS).filter(|&s| owner[s] == me).collect();
                let (sums, rows) = (&sums, &rows);
                s.spawn(move || {
                    let mut peer = Peer {
                        me,
                        hand,
                        sums,
                        rows,
                        tamper,
                    };
                    model
                        .step_replicated(batch, None, &mut peer)
                        .map(|(m, _)| m)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A step whose update was shared by row shards among peers (any deal, the thresholds found
/// from their added sums) ends with a single node's model bit for bit on every peer, the
/// refresh included; a missing, repeated or damaged shard of rows is refused, naming the
/// shard.
#[test]
fn a_step_with_its_update_shared_by_row_shards_equals_a_local_step() {
    let (model, batch) = bootstrapped();
    let (want, out) = model.step(&batch).unwrap();
    assert!(out.stats.atoms_refreshed > 0, "the step refreshes atoms");
    for (workers, seed) in [(2usize, 1), (3, 2), (5, 3)] {
        for got in step_in_peers(&model, &batch, workers, seed, |_| {}) {
            assert_eq!(
                got.unwrap().state_parts(),
                want.state_parts(),
                "{workers} workers"
            );
        }
    }
    let refused =
        |tamper: fn(&mut Vec<ProjectedRows>)| match step_in_peers(&model, &batch, 2, 4, tamper)
            .remove(0)
        {
            Err(EngineError::Inconsistent(e)) => e,
            other => panic!("expected an inconsistency, got {:?}", other.map(|_| ())),
        };
    let e = refused(|g| {
        g.retain(|p| p.shard != 40);
    });
    assert!(
        e.contains("logical shard 40 ") && e.contains("missing"),
        "{e}"
    );
    let e = refused(|g| {
        let again = g.iter().find(|p| p.shard == 7).unwrap().clone();
        g.push(again);
    });
    assert!(e.contains("logical shard 7 ") && e.contains("twice"), "{e}");
    let e = refused(|g| {
        let part = g.iter_mut().find(|p| !p.entries.is_empty()).unwrap();
        part.entries[0].1 = f32::NAN;
    });
    assert!(e.contains("does not fit"), "{e}");
    let e = refused(|g| {
        let part = g.iter_mut().find(|p| !p.lens.is_empty()).unwrap();
        part.lens.pop();
    });
    assert!(e.contains("not one row per live row"), "{e}");
}
