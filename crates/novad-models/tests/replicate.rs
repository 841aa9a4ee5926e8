//! A step whose topics and refresh plan were worked out by another replica ([`Found`]), or
//! whose dictionary update was computed by another ([`Updated`]).
mod common;

use common::ostc::planted;
use common::rng;
use novad_models::l1::dictionary::LOGICAL_SHARDS;
use novad_models::l1::replicate::{
    CodingJob, Found, Replication, ShardOutput, ShardTerms, TermJob, Updated,
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
    let mut r = rng(5);
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
    let mut past = outs.clone();
    let at = r.random_range(0..past.len());
    past[at].docs[0].push((Term::Known(vocab.len() as u32), 1));
    assert!(err(past).contains("does not fit"));
    let mut zero = outs.clone();
    zero[0].docs[0][0].1 = 0;
    assert!(err(zero).contains("does not fit"));
    let mut short = outs.clone();
    let gone = short.remove(3).shard;
    assert!(err(short).contains(&format!("logical shard {gone} ")));
    // a term twice in one document, or spelled out although the vocabulary holds it
    let mut twice = outs.clone();
    let first = twice[1].docs[0][0].clone();
    twice[1].docs[0].push(first);
    assert!(err(twice).contains("does not fit"));
    let mut spelled = outs.clone();
    let held = vocab.term(0).to_string();
    spelled[2].docs[0].retain(|(t, _)| t != &Term::Known(0));
    spelled[2].docs[0].push((Term::New(held), 1));
    assert!(err(spelled).contains("does not fit"));
    let mut again = outs.clone();
    again.push(outs[0].clone());
    assert!(err(again).contains("given twice"));
}

/// Shares the update: without `given` it computes the update and keeps what it passes on
/// (`sent`); with `given` it takes that instead of computing it.
struct Sharer {
    given: Option<Updated>,
    sent: Option<Updated>,
}

impl Replication for Sharer {
    fn terms(&mut self, job: &TermJob<'_>) -> Result<Vec<ShardTerms>, EngineError> {
        Ok(terms_all(job))
    }
    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError> {
        Ok(code_all(job))
    }
    fn shares_update(&self) -> bool {
        true
    }
    fn updates(&self) -> bool {
        self.given.is_none()
    }
    fn updated(&mut self, mine: Option<Updated>) -> Result<Option<Updated>, EngineError> {
        match (&self.given, mine) {
            (None, Some(u)) => {
                self.sent = Some(u);
                Ok(None)
            }
            (Some(g), None) => Ok(Some(g.clone())),
            (given, mine) => panic!(
                "a sender computes the update, a receiver none (given {}, computed {})",
                given.is_some(),
                mine.is_some()
            ),
        }
    }
}

/// A replica that takes the update another computed ends with that replica's model, which is
/// a single-node step's model bit for bit; an update that does not fit the step is refused.
#[test]
fn a_step_with_a_received_update_equals_the_senders_and_a_local_step() {
    let (model, batch) = bootstrapped();
    let mut sender = Sharer {
        given: None,
        sent: None,
    };
    let (a, out_a) = model.step_replicated(&batch, None, &mut sender).unwrap();
    let sent = sender.sent.expect("the step updates the dictionary");
    assert!(
        out_a.stats.atoms_refreshed > 0,
        "the update includes the refresh"
    );
    let (c, _) = model.step(&batch).unwrap();
    assert_eq!(
        a.state_parts(),
        c.state_parts(),
        "the sender steps as one node"
    );

    let mut receiver = Sharer {
        given: Some(sent.clone()),
        sent: None,
    };
    let (b, out_b) = model.step_replicated(&batch, None, &mut receiver).unwrap();
    assert_eq!(
        b.state_parts(),
        c.state_parts(),
        "the receiver ends where one node does"
    );
    assert_eq!(out_b.stats.atoms_refreshed, out_a.stats.atoms_refreshed);

    let refused = |f: &dyn Fn(&mut Updated)| {
        let mut given = sent.clone();
        f(&mut given);
        let mut receiver = Sharer {
            given: Some(given),
            sent: None,
        };
        match model.step_replicated(&batch, None, &mut receiver) {
            Err(EngineError::Inconsistent(e)) => e,
            other => panic!("expected an inconsistency, got {:?}", other.map(|_| ())),
        }
    };
    assert!(refused(&|u| u.last_used.pop().map(drop).unwrap()).contains("atom ages"));
    assert!(refused(&|u| u.dict.truncate(3)).contains("dictionary update received"));
    let other = {
        let mut r = rng(3);
        let (m, _) = Model::new(Params::novad_default().with_k(12))
            .unwrap()
            .step(&planted(&mut r, &[0, 1], 30))
            .unwrap();
        novad_models::l1::dictionary::image::encode(m.dictionary())
    };
    assert!(refused(&|u| u.dict = other.clone()).contains("rows"));
}
