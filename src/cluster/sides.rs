//! The leader's side of the cluster: it steps the daemon's engine with the replicas (see
//! [`super::protocol`]).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use novad_models::l1::dictionary::{ColumnSum, GradientRows, ProjectedRows, UpdateJob};
use novad_models::l1::replicate::{
    CodedAndFound, CodingJob, Found, MemorySearch, Query, Replication, ShardOutput, ShardTerms,
    TermJob,
};
use novad_models::memory::Neighbour;
use novad_models::model::{EngineError, Judgement};
use novad_models::{Engine, StepOutput};

use super::balance::{cpu_of, metered_search, Balance, Load, Meter};
use super::deal::{fixed_burdens, row_deal, Burdens, BURDEN_UNIT};
use super::net::Gather;
use super::pool::{begin_terms_aside, code_and_search, tokenise, tokenised_aside};
use super::protocol::{
    encode, finds, finish_found, gather_rows, mark_of, query_of, rows_message, search_round,
    sums_message, total_sums, Lead, LeadTerms,
};
use crate::ingest::{Batch, Before, Replicas};

/// The leader: steps the daemon's engine with the replicas, keeps them on the committed model.
pub struct Leader {
    gather: Rc<RefCell<Gather>>,
    /// The replicas hold the engine's committed model (false until the first load, and from
    /// the start of every step until its commit).
    in_sync: bool,
    /// Why the cluster stops, told to the replicas when the leader is dropped.
    pub stop_reason: Option<String>,
    /// When the last step ended (the time between steps is the daemon's: files, records).
    last_end: Option<Instant>,
    /// The step sent to the replicas ahead of its turn, at the end of the step before
    /// ([`crate::ingest::ahead`]), until the daemon steps it or it is abandoned.
    ahead: Option<Ahead>,
    /// The gather's waiting counted up to the last step logged.
    waited: f64,
    /// The bytes the gather sent counted up to the last step logged.
    sent: u64,
    /// This process's CPU from one step's start to the next.
    meter: Meter,
    /// Every worker's other work, measured, for the deal of the next steps.
    balance: Balance,
}

/// A step sent out ahead of its turn: the timestep of the model it steps, its batch, and the
/// burdens it was sent with.
struct Ahead {
    timestep: u64,
    batch: Batch,
    burdens: Burdens,
}

impl Ahead {
    /// Whether it is the step of `engine` on `texts` and `times`.
    fn is(&self, engine: &Engine, texts: &[&str], times: &[i64]) -> bool {
        self.timestep == engine.timestep()
            && self.batch.times == times
            && self.batch.texts.len() == texts.len()
            && self.batch.texts.iter().zip(texts).all(|(a, b)| a == b)
    }
}

impl Leader {
    pub fn new(gather: Gather) -> Leader {
        Leader {
            gather: Rc::new(RefCell::new(gather)),
            in_sync: false,
            stop_reason: None,
            last_end: None,
            ahead: None,
            waited: 0.0,
            sent: 0,
            meter: Meter::default(),
            balance: Balance::default(),
        }
    }

    /// Payload bytes the leader sent to other processes so far.
    pub fn bytes_sent(&self) -> u64 {
        self.gather.borrow().bytes_sent
    }

    /// End the step sent ahead, if any, on every replica (they drop it): before any command
    /// but that step.
    fn abandon_ahead(&mut self) {
        if self.ahead.take().is_some() {
            self.gather.borrow_mut().round(encode(&Lead::Abort));
        }
    }

    /// Load `engine`'s model and memory into every replica (each holds the whole memory).
    fn load(&mut self, engine: &mut Engine) -> Result<(), EngineError> {
        self.abandon_ahead();
        let m = engine.as_l1().ok_or_else(|| {
            EngineError::Inconsistent(format!(
                "the {} model runs on one node only: it cannot share its steps among processes",
                engine.kind()
            ))
        })?;
        let memory = engine.hybrid().map(|h| h.memory().state_parts());
        self.gather.borrow_mut().round(encode(&Lead::Load {
            model: Box::new(m.clone()),
            memory,
        }));
        self.in_sync = true;
        Ok(())
    }

    /// The step of `engine` on `texts` and `times` sent to the replicas, unless it went out
    /// ahead (`sent_ahead`); `writes`: the leader writes the last timestep meanwhile. Gives
    /// how much of the tokenising the leader does, the burdens the step is dealt with, and
    /// the seconds and bytes of sending it.
    fn send_step(
        &mut self,
        engine: &Engine,
        texts: &[&str],
        times: &[i64],
        sent_ahead: bool,
        writes: bool,
    ) -> (LeadTerms, Burdens, f64, u64) {
        if let Some(a) = self.ahead.take_if(|_| sent_ahead) {
            return (LeadTerms::Little, a.burdens, 0.0, 0);
        }
        self.abandon_ahead();
        // with the last timestep to write, the leader leaves most tokenising to the replicas
        let lead_terms = if writes {
            LeadTerms::Less
        } else {
            LeadTerms::Share
        };
        // the batch goes out while the leader tokenises its shards; the terms round finishes it
        let burdens = self.balance.burdens();
        let docs = metered(&self.gather, || {
            self.gather.borrow_mut().begin(encode(&Lead::Step {
                timestep: engine.timestep(),
                docs: texts.iter().map(|t| t.to_string()).collect(),
                times: times.to_vec(),
                judged: engine.hybrid().is_some(),
                lead_terms,
                burdens: burdens.clone(),
            }))
        });
        (lead_terms, burdens, docs.seconds, docs.bytes)
    }

    fn try_step(
        &mut self,
        engine: &mut Engine,
        texts: &[&str],
        times: &[i64],
        before: &mut Option<Before<'_>>,
    ) -> Result<(Engine, StepOutput), EngineError> {
        let between_seconds = self.last_end.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let load = self.meter.cycle();
        if !self.in_sync {
            self.load(engine)?;
            // the load is no usual cycle's work
            self.meter.restart();
        }
        self.in_sync = false;
        let sent_ahead = self
            .ahead
            .as_ref()
            .is_some_and(|a| a.is(engine, texts, times));
        let (lead_terms, burdens, docs_seconds, docs_bytes) =
            self.send_step(engine, texts, times, sent_ahead, before.is_some());
        // the replicas tokenise meanwhile; when they have the batch already and the leader has
        // other work, they tokenise all of it and go on to the coding without waiting for it
        let terms_aside = (sent_ahead && before.is_some() && self.gather.borrow().peers() > 1)
            .then(|| {
                let mark = mark_of(engine.vocab());
                begin_terms_aside(&self.gather, mark);
                mark
            });
        let aside = terms_aside.is_some();
        let t_before = Instant::now();
        let next = before.take().and_then(|f| f(engine));
        let before_seconds = t_before.elapsed().as_secs_f64();
        let mut side = LeaderSide {
            gather: Rc::clone(&self.gather),
            timestep: engine.timestep(),
            judged: engine.hybrid().is_some(),
            lead_terms,
            next,
            ahead: None,
            terms_aside,
            ahead_due: false,
            figures: Figures::default(),
            burdens,
            // a cycle that ended with this step sent ahead was spent under a backlog
            load: load.filter(|_| sent_ahead),
            balance: std::mem::take(&mut self.balance),
            dealt: Cell::new(Duration::ZERO),
        };
        let r = engine.step_at_moving_replicated(texts, times, &mut side);
        self.meter.add_dealt(side.dealt.get());
        self.balance = std::mem::take(&mut side.balance);
        if r.is_ok() && side.ahead_due {
            // a step without a found round: its rows round was its last
            side.send_ahead();
        }
        if r.is_err() {
            // ends this step, and the next one if it went out, on every replica
            self.gather.borrow_mut().round(encode(&Lead::Abort));
        } else {
            self.ahead = side.ahead;
        }
        let f = side.figures;
        self.last_end = Some(Instant::now());
        tracing::info!(
            timestep = engine.timestep(),
            workers = self.gather.borrow().peers(),
            between_seconds = format!("{between_seconds:.4}"),
            sent_ahead,
            terms_aside = aside,
            docs_seconds = format!("{docs_seconds:.4}"),
            docs_bytes,
            before_seconds = format!("{before_seconds:.4}"),
            terms_seconds = format!("{:.4}", f.terms_seconds),
            terms_exchange_seconds = format!("{:.4}", f.terms_exchange_seconds),
            terms_bytes = f.terms_bytes,
            terms_shards = f.terms_shards,
            claims_sent = f.claims_sent,
            code_seconds = format!("{:.4}", f.code_seconds),
            exchange_seconds = format!("{:.4}", f.exchange_seconds),
            outputs_bytes = f.outputs_bytes,
            codes_bytes = f.codes_bytes,
            shards_coded = f.shards_coded,
            shards_taken = f.shards_taken,
            shards_filled = f.shards_filled,
            search_seconds = format!("{:.4}", f.search_seconds),
            search_own_seconds = format!("{:.4}", f.search_own_seconds),
            search_bytes = f.search_bytes,
            judgement_bytes = f.judgement_bytes,
            topics_wait_seconds = format!("{:.4}", f.topics_wait_seconds),
            topics_bytes = f.topics_bytes,
            gradient_seconds = format!("{:.4}", f.gradient_seconds),
            update_wait_seconds = format!("{:.4}", f.update_wait_seconds),
            gradient_wait_seconds = format!("{:.4}", f.gradient_wait_seconds),
            update_rounds = f.update_rounds,
            update_bytes = f.update_bytes,
            burdens = shown(&side.burdens),
            cycle_ms = f.cycle_ms,
            wait_seconds = format!("{:.4}", waited_since(&self.gather, &mut self.waited)),
            sent_bytes = sent_since(&self.gather, &mut self.sent),
            "cluster step"
        );
        r
    }
}

/// The daemon's handle on the leader (the cluster keeps another, to stop the replicas with
/// the daemon's outcome).
impl Replicas for Rc<RefCell<Leader>> {
    fn step(
        &mut self,
        engine: &mut Engine,
        texts: &[&str],
        times: &[i64],
        before: Option<Before<'_>>,
    ) -> Result<(Engine, StepOutput), EngineError> {
        self.borrow_mut().step(engine, texts, times, before)
    }
    fn committed(&mut self) {
        self.borrow_mut().committed()
    }
}

impl Replicas for Leader {
    /// A step that failed because of the cluster (a replica out of step) is taken again once,
    /// after loading the committed model into every replica.
    fn step(
        &mut self,
        engine: &mut Engine,
        texts: &[&str],
        times: &[i64],
        before: Option<Before<'_>>,
    ) -> Result<(Engine, StepOutput), EngineError> {
        let mut before = before;
        let r = match self.try_step(engine, texts, times, &mut before) {
            Err(EngineError::Inconsistent(e)) if e.starts_with("cluster:") => {
                tracing::warn!(error = %e, "step again after loading the model into every replica");
                self.try_step(engine, texts, times, &mut before)
            }
            r => r,
        };
        // a step that failed before the batch went out: the engine is as it was (the next
        // file read meanwhile is not sent ahead)
        if let Some(f) = before {
            f(engine);
        }
        r
    }

    fn committed(&mut self) {
        self.in_sync = true;
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.abandon_ahead();
        let why = self.stop_reason.take();
        self.gather.borrow_mut().round(encode(&Lead::Stop(why)));
    }
}

/// Bytes `gather`'s worker sent to other processes since `*last` (the count at the last step
/// logged), which becomes the count now: the payloads of every round and every notice.
pub(super) fn sent_since(gather: &RefCell<Gather>, last: &mut u64) -> u64 {
    let now = gather.borrow().bytes_sent;
    now - std::mem::replace(last, now)
}

/// Seconds `gather`'s worker waited for other workers' payloads since `*last` (the count at
/// the last step logged), which becomes the count now: every wait between two steps' logs,
/// the wait for the next step's batch included.
pub(super) fn waited_since(gather: &RefCell<Gather>, last: &mut f64) -> f64 {
    let now = gather.borrow().waited;
    now - std::mem::replace(last, now)
}

/// Each worker's CPU over a cycle, in thousandths of a second, as logged: empty unless every
/// worker's was measured (only such a cycle can steer the burdens).
fn cycle_ms(loads: &[Option<Load>]) -> String {
    if loads.iter().any(Option::is_none) {
        return String::new();
    }
    let ms = |l: &Option<Load>| l.map_or(0, |l| l.cycle_us / 1000).to_string();
    loads.iter().map(ms).collect::<Vec<_>>().join(",")
}

/// Burdens as logged: each worker's in thousandths of the dealt work, or `fixed`.
fn shown(b: &Burdens) -> String {
    match &b.0 {
        Some(v) => v
            .iter()
            .map(|&n| (n as u64 * 1000 / BURDEN_UNIT as u64).to_string())
            .collect::<Vec<_>>()
            .join(","),
        None => "fixed".into(),
    }
}

/// Where a step's time and traffic went, as the leader sees it (logged with each step).
#[derive(Default)]
struct Figures {
    /// Tokenising and resolving the leader's own shards' documents.
    terms_seconds: f64,
    /// Shards the leader tokenised.
    terms_shards: usize,
    /// Claims the leader sent in the tokenising and the coding (each of one shard or more).
    claims_sent: usize,
    /// Waiting for the terms round to complete.
    terms_exchange_seconds: f64,
    /// Bytes of the terms round sent and received over the network.
    terms_bytes: u64,
    /// Coding: the leader's hand and the shards it took from others'.
    code_seconds: f64,
    /// The coding round after the leader's last shard: waiting for the others' outputs, and
    /// the transfer.
    exchange_seconds: f64,
    /// Bytes the leader sent and received over the network in the coding and the search
    /// rounds that run it (claims, outputs, the search's parts).
    outputs_bytes: u64,
    /// Encoded size of every worker's contribution to the coding round: the volume
    /// all-gathered (each worker receives all but its own).
    codes_bytes: u64,
    /// Shards the leader coded.
    shards_coded: usize,
    /// Of those, shards of the replicas' hands.
    shards_taken: usize,
    /// Of those, shards coded while waiting for a search round.
    shards_filled: usize,
    /// Bytes of the judgement round sent over the network.
    judgement_bytes: u64,
    /// The hybrid detector's search round: the leader's own search and the exchange.
    search_seconds: f64,
    /// The leader's own search of the memory for its shards' documents.
    search_own_seconds: f64,
    /// Bytes of the search round sent and received over the network.
    search_bytes: u64,
    /// Waiting, after the update, for the topics and refresh plan the last worker worked out.
    topics_wait_seconds: f64,
    /// Bytes of the found round (topics, refresh plan) sent and received over the network.
    topics_bytes: u64,
    /// The leader's gradient rows of the update (its hand of the row shards).
    gradient_seconds: f64,
    /// The update's rounds (column sums, rows): exchange and waiting.
    update_wait_seconds: f64,
    /// Of those, the first: waiting for the other workers' gradient rows.
    gradient_wait_seconds: f64,
    /// Each worker's CPU over the cycle before (thousandths of a second, the leader first),
    /// as the burdens took it in; empty unless every worker's was measured (a cycle spent
    /// under a backlog).
    cycle_ms: String,
    /// Rounds of column sums the update took.
    update_rounds: usize,
    /// Bytes of the update's rounds sent and received over the network.
    update_bytes: u64,
}

/// The leader's side of a step: tokenises and codes its shards, searches the memory for its shards'
/// documents, passes its judge's decision on.
struct LeaderSide {
    gather: Rc<RefCell<Gather>>,
    /// The timestep of the model being stepped.
    timestep: u64,
    /// The leader has the hybrid detector (the steps have search and judgement rounds).
    judged: bool,
    /// How much of the step's tokenising the leader does
    /// ([`term_deal`](super::deal::term_deal)); none when its part went out before the
    /// step (`terms_aside`).
    lead_terms: LeadTerms,
    /// The next batch, read meanwhile: sent out with the update, as the next step.
    next: Option<Batch>,
    /// That step, once sent.
    ahead: Option<Ahead>,
    /// The leader's part of the step's terms round went out before the step, empty, with this
    /// vocabulary mark ([`begin_terms_aside`]).
    terms_aside: Option<[u64; 2]>,
    /// The update is over: the next batch goes out after the step's last round is begun.
    ahead_due: bool,
    figures: Figures,
    /// Each worker's measured other work (beyond the fixed parts), for the hands of the step's search and rows.
    burdens: Burdens,
    /// The leader's load of the cycle before the step, when that cycle was spent under a
    /// backlog (this step went out ahead, at its end): only such cycles steer the burdens.
    load: Option<Load>,
    /// Every worker's other work, measured: takes the loads of the step's coding round.
    balance: Balance,
    /// The CPU of the leader's dealt work in the step: its search and its rows.
    dealt: Cell<Duration>,
}

impl LeaderSide {
    /// A round of the update that carries `payload` from the leader, its time and bytes
    /// counted in the update's figures.
    fn round_of(&mut self, payload: Vec<u8>) -> Vec<Vec<u8>> {
        let r = metered(&self.gather, || self.gather.borrow_mut().round(payload));
        self.figures.update_wait_seconds += r.seconds;
        self.figures.update_bytes += r.bytes;
        r.value
    }

    /// A round that carries `lead` from the leader, metered.
    fn round(&self, lead: &Lead) -> Metered<Vec<Vec<u8>>> {
        metered(&self.gather, || {
            self.gather.borrow_mut().round(encode(lead))
        })
    }
}

/// A value with what producing it cost the leader: wall seconds and the bytes its process sent
/// and received meanwhile.
struct Metered<T> {
    value: T,
    seconds: f64,
    bytes: u64,
}

/// `f()` (an exchange through `gather`, which `f` borrows itself), timed and its traffic counted.
fn metered<T>(gather: &RefCell<Gather>, f: impl FnOnce() -> T) -> Metered<T> {
    let before = gather.borrow().traffic();
    let t0 = Instant::now();
    let value = f();
    Metered {
        value,
        seconds: t0.elapsed().as_secs_f64(),
        bytes: gather.borrow().traffic() - before,
    }
}

impl LeaderSide {
    /// Send the next batch, when the leader read it meanwhile, as the next step: the replicas
    /// start on it while the leader finishes this step.
    fn send_ahead(&mut self) {
        let Some(batch) = self.next.take() else {
            return;
        };
        let timestep = self.timestep + 1;
        let step = Lead::Step {
            timestep,
            docs: batch.texts,
            times: batch.times,
            judged: self.judged,
            lead_terms: LeadTerms::Little,
            burdens: self.balance.burdens(),
        };
        self.gather.borrow_mut().begin(encode(&step));
        if let Lead::Step {
            docs,
            times,
            burdens,
            ..
        } = step
        {
            let batch = Batch { texts: docs, times };
            self.ahead = Some(Ahead {
                timestep,
                batch,
                burdens,
            });
        }
    }
}

impl Replication for LeaderSide {
    fn terms(&mut self, job: &TermJob<'_>) -> Result<Vec<ShardTerms>, EngineError> {
        let (outs, pool) = match self.terms_aside.take() {
            Some(mark) => tokenised_aside(&self.gather, job, mark)?,
            None => tokenise(&self.gather, job, self.lead_terms)?,
        };
        let f = &mut self.figures;
        f.terms_seconds = pool.work_seconds;
        f.terms_exchange_seconds = pool.exchange_seconds;
        f.terms_bytes = pool.outputs_bytes;
        f.terms_shards = pool.shards;
        f.claims_sent += pool.claims;
        Ok(outs)
    }

    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError> {
        Ok(self.code_and_search(job, None)?.0)
    }

    fn code_and_search(
        &mut self,
        job: &CodingJob<'_>,
        query: Option<&Query<'_>>,
    ) -> Result<CodedAndFound, EngineError> {
        let own = Cell::new(0.0);
        let timed = query.map(|q| (q, metered_search(&*q.search, &self.dealt, &own)));
        let timed = timed
            .as_ref()
            .map(|(q, search)| query_of(q.n, q.memory, q.shards, &**search));
        let (out, pool, loads) =
            code_and_search(&self.gather, job, timed.as_ref(), &self.burdens, None)?;
        let loads: Vec<Option<Load>> = std::iter::once(self.load).chain(loads).collect();
        self.balance.observe(&loads, fixed_burdens);
        let f = &mut self.figures;
        f.cycle_ms = cycle_ms(&loads);
        f.search_seconds = pool.search_seconds;
        f.search_own_seconds = own.get();
        f.code_seconds = pool.work_seconds;
        f.exchange_seconds = pool.exchange_seconds;
        f.search_bytes = pool.search_bytes;
        f.outputs_bytes = pool.outputs_bytes;
        f.codes_bytes = pool.codes_bytes;
        f.shards_coded = pool.shards;
        f.shards_taken = pool.taken;
        f.shards_filled = pool.filled;
        f.claims_sent += pool.claims;
        Ok(out)
    }

    fn nearest(
        &mut self,
        n: usize,
        memory: [u64; 3],
        shards: u64,
        search: &MemorySearch<'_>,
    ) -> Result<Vec<Option<Neighbour>>, EngineError> {
        let own = Cell::new(0.0);
        let timed = metered_search(search, &self.dealt, &own);
        let q = query_of(n, memory, shards, &*timed);
        let near = metered(&self.gather, || {
            search_round(&self.gather, self.timestep, &q, &self.burdens, &mut || {
                Ok(())
            })
        });
        self.figures.search_seconds = near.seconds;
        self.figures.search_own_seconds = own.get();
        self.figures.search_bytes = near.bytes;
        near.value
    }

    fn finds(&self) -> bool {
        finds(&self.gather.borrow())
    }

    /// A cluster of one waits for nobody.
    fn waits(&self) -> bool {
        self.gather.borrow().peers() > 1
    }

    /// The found round is the step's last: the next batch follows it at once when due.
    fn offer(&mut self, mine: Option<&Found>) -> Result<(), EngineError> {
        self.gather
            .borrow_mut()
            .begin(encode(&Lead::Found(mine.cloned())));
        if std::mem::take(&mut self.ahead_due) {
            self.send_ahead();
        }
        Ok(())
    }

    fn found(&mut self, mine: Option<Found>) -> Result<Found, EngineError> {
        let found = metered(&self.gather, || {
            finish_found(&mut self.gather.borrow_mut(), mine, self.timestep)
        });
        self.figures.topics_wait_seconds = found.seconds;
        self.figures.topics_bytes = found.bytes;
        found.value
    }

    /// The leader's hand of the update's row shards.
    fn gradient(&mut self, job: &UpdateJob<'_>) -> Result<Vec<GradientRows>, EngineError> {
        let (index, peers) = {
            let g = self.gather.borrow();
            (g.index(), g.peers())
        };
        let t0 = Instant::now();
        let (mine, cpu) = cpu_of(|| job.run(&row_deal(job, peers, &self.burdens)[index]));
        self.figures.gradient_seconds = t0.elapsed().as_secs_f64();
        self.dealt.set(self.dealt.get() + cpu);
        Ok(mine)
    }

    fn reduce(&mut self, mine: Vec<ColumnSum>) -> Result<Vec<ColumnSum>, EngineError> {
        let before = self.figures.update_wait_seconds;
        let round = self.round_of(sums_message(0, self.timestep, mine));
        if self.figures.update_rounds == 0 {
            self.figures.gradient_wait_seconds = self.figures.update_wait_seconds - before;
        }
        self.figures.update_rounds += 1;
        total_sums(&round, self.timestep)
    }

    /// Every worker's rows; the next batch, when the leader read it meanwhile, follows as
    /// the next step ([`Ahead`]) once the step's last round is begun.
    fn gather_rows(&mut self, mine: Vec<ProjectedRows>) -> Result<Vec<ProjectedRows>, EngineError> {
        let round = self.round_of(rows_message(0, self.timestep, mine));
        let all = gather_rows(&round, self.timestep)?;
        self.ahead_due = true;
        Ok(all)
    }

    fn judged(&mut self, j: &Result<Judgement, EngineError>) -> Result<(), EngineError> {
        let sent = match j {
            Ok(v) => Ok(v.clone()),
            Err(e) => Err(e.to_string()),
        };
        self.figures.judgement_bytes = self.round(&Lead::Judgement(sent)).bytes;
        Ok(())
    }
}
