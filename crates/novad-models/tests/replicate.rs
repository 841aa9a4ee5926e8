//! A step whose topics and refresh plan were worked out by another replica ([`Found`]), or
//! whose dictionary update another replica computed ([`NewRows`]).
mod common;

use common::ostc::planted;
use common::rng;
use novad_models::l1::dictionary::{NewRows, LOGICAL_SHARDS};
use novad_models::l1::replicate::{
    CodingJob, Found, Replication, ShardOutput, ShardTerms, TermJob, UpdateRole,
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
    bootstrapped_with(|_| {})
}

/// [`bootstrapped`] with parameters changed by `tune`.
fn bootstrapped_with(tune: impl Fn(&mut Params)) -> (Model, Vec<String>) {
    let mut r = rng(11);
    let mut p = Params::novad_default();
    p.k = 12;
    tune(&mut p);
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
    let tokenizer = p.text.tokenizer();
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

/// A way to spoil the rows an update wrote.
type Spoil = Box<dyn Fn(&mut NewRows)>;

/// Computes the update and keeps the rows it wrote (as a cluster's leader sends them).
struct Sharer {
    kept: Option<NewRows>,
}

/// Takes the update's rows from elsewhere instead of computing it.
struct UpdateTaker {
    given: NewRows,
}

impl Replication for Sharer {
    fn terms(&mut self, job: &TermJob<'_>) -> Result<Vec<ShardTerms>, EngineError> {
        Ok(terms_all(job))
    }
    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError> {
        Ok(code_all(job))
    }
    fn update_role(&self) -> UpdateRole {
        UpdateRole::Share
    }
    fn share_update(&mut self, rows: NewRows) -> Result<(), EngineError> {
        self.kept = Some(rows);
        Ok(())
    }
}

impl Replication for UpdateTaker {
    fn terms(&mut self, job: &TermJob<'_>) -> Result<Vec<ShardTerms>, EngineError> {
        Ok(terms_all(job))
    }
    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError> {
        Ok(code_all(job))
    }
    fn update_role(&self) -> UpdateRole {
        UpdateRole::Take
    }
    fn take_update(&mut self) -> Result<NewRows, EngineError> {
        Ok(self.given.clone())
    }
}

/// Taking the rows another replica's update wrote gives the single node's step bit for bit
/// (with Δ carried too, which the taker computes itself); rows that break an invariant, leave
/// out a row holding entries or push an atom's sum over 1 fail the step, saying what is wrong.
#[test]
fn a_step_with_the_sharers_update_equals_the_single_nodes_step() {
    for carry_delta in [false, true] {
        let (model, batch) = bootstrapped_with(|p| p.oiadmm.carry_delta = carry_delta);
        let (single, out_single) = model.step(&batch).unwrap();
        let mut sharer = Sharer { kept: None };
        let (a, _) = model.step_replicated(&batch, None, &mut sharer).unwrap();
        assert_eq!(a.state_parts(), single.state_parts());
        let rows = sharer.kept.expect("the sharer sent its rows");
        assert!(!rows.entries.is_empty() && rows.tau > 0.0);

        let mut taker = UpdateTaker {
            given: rows.clone(),
        };
        let (b, out_b) = model.step_replicated(&batch, None, &mut taker).unwrap();
        assert_eq!(
            b.state_parts(),
            single.state_parts(),
            "carry_delta {carry_delta}"
        );
        assert_eq!(out_b.stats.oiadmm, out_single.stats.oiadmm);
        if carry_delta {
            assert!(out_b.stats.oiadmm.delta_nnz > 0);
        }

        let spoiled = |f: &dyn Fn(&mut NewRows)| {
            let mut given = rows.clone();
            f(&mut given);
            match model.step_replicated(&batch, None, &mut UpdateTaker { given }) {
                Err(EngineError::Inconsistent(e)) => e,
                other => panic!("expected an inconsistency, got {:?}", other.map(|_| ())),
            }
        };
        let m = model.vocab().len() as u32;
        let held = (0..model.dictionary().nrows())
            .find(|&i| model.dictionary().row(i).iter().any(|e| e.1 != 0.0))
            .unwrap() as u32;
        let first_long = rows.lens.iter().position(|&l| l >= 2).unwrap();
        let at = rows.lens[..first_long].iter().sum::<u32>() as usize;
        let cases: Vec<(&str, Spoil)> = vec![
            ("lengths", Box::new(|r| r.lens.pop().map_or((), |_| ()))),
            ("add up", Box::new(|r| r.lens[0] += 1)),
            ("strictly ascending", Box::new(|r| r.rows.swap(0, 1))),
            ("rows", Box::new(move |r| *r.rows.last_mut().unwrap() = m)),
            (
                "atoms not strictly",
                Box::new(move |r| r.entries.swap(at, at + 1)),
            ),
            ("negative", Box::new(|r| r.entries[0].1 = -0.5)),
            ("negative", Box::new(|r| r.entries[0].1 = f32::NAN)),
            ("sums to", Box::new(|r| r.entries[0].1 = 1.5)),
            ("τ", Box::new(|r| r.tau = f64::INFINITY)),
            (
                "not written",
                Box::new(move |r| {
                    // a row holding entries in Â_t left out (its entries dropped with it); no term
                    // is evicted, so Â_t's rows keep their numbers in the step
                    let c = r.rows.iter().position(|&i| i == held).unwrap();
                    let lo = r.lens[..c].iter().sum::<u32>() as usize;
                    let len = r.lens[c] as usize;
                    r.entries.drain(lo..lo + len);
                    r.rows.remove(c);
                    r.lens.remove(c);
                }),
            ),
        ];
        for (want, f) in &cases {
            let e = spoiled(f.as_ref());
            assert!(
                e.contains("dictionary update received") && e.contains(want),
                "{want}: {e}"
            );
        }
    }
}
