//! A replica's side of the cluster: its loop over the leader's commands ([`replica`]), its
//! part of each step ([`ReplicaSide`]) and its judge ([`RemoteJudge`]), which takes part in
//! the search and receives the leader's judgement (see [`super::protocol`]).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use novad_models::engine::{memory_batch, scored_batch, searcher, MemoryBatch};
use novad_models::l1::dictionary::{ColumnSum, GradientRows, ProjectedRows, UpdateJob};
use novad_models::l1::replicate::{
    CodedAndFound, CodingJob, Found, MemorySearch, Query, Replication, ShardOutput, ShardTerms,
    TermJob,
};
use novad_models::l1::Model;
use novad_models::memory::{DocMemory, Neighbour};
use novad_models::model::{EngineError, Judge, Judgement, Scored, StepStats};
use novad_models::text::{SparseDoc, Vocabulary};

use super::balance::{cpu_of, metered_search, Load, Meter};
use super::deal::{row_deal, Burdens};
use super::net::Gather;
use super::pool::{code_and_search, tokenise, PoolFigures};
use super::protocol::{
    broken, decode, encode, finds, finish_found, gather_rows, query_of, rows_message, search_round,
    sums_message, total_sums, Lead, LeadTerms, Reply,
};
use super::sides::{sent_since, waited_since};
use super::ClusterError;

/// A replica's side of a step: tokenises and codes its shards, contributes them, returns
/// everyone's.
pub(super) struct ReplicaSide {
    pub gather: Rc<RefCell<Gather>>,
    /// The timestep of the model being stepped.
    pub timestep: u64,
    /// How much of the step's tokenising the leader does ([`term_deal`](super::deal::term_deal)).
    pub lead_terms: LeadTerms,
    /// What the step's tokenising cost this worker.
    pub terms: PoolFigures,
    /// What the step's coding and search cost this worker.
    pub coding: PoolFigures,
    /// Each worker's measured other work (beyond the fixed parts), for the hands of the search and the rows.
    pub burdens: Burdens,
    /// This worker's load of the cycle before the step, reported in the coding round.
    pub load: Option<Load>,
    /// The CPU of this worker's dealt work in the step: its search and its rows.
    pub dealt: Cell<Duration>,
    /// Wall seconds of this worker's own search of the memory in the step.
    pub searched: Cell<f64>,
}

impl Replication for ReplicaSide {
    fn terms(&mut self, job: &TermJob<'_>) -> Result<Vec<ShardTerms>, EngineError> {
        let (outs, f) = tokenise(&self.gather, job, self.lead_terms)?;
        self.terms = f;
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
        let searched = query.map(|q| (q, metered_search(&*q.search, &self.dealt, &self.searched)));
        let searched = searched
            .as_ref()
            .map(|(q, search)| query_of(q.n, q.memory, q.shards, &**search));
        let (coded, f, _) = code_and_search(
            &self.gather,
            job,
            searched.as_ref(),
            &self.burdens,
            self.load,
        )?;
        self.coding = f;
        if query.is_some() {
            // the step's next round is the judgement, where a replica's part is always
            // Idle: begun now, the leader's judgement does not wait for what this replica
            // does before it asks for it (the refresh plan)
            self.gather.borrow_mut().begin(encode(&Reply::Idle));
        }
        Ok(coded)
    }

    fn nearest(
        &mut self,
        n: usize,
        memory: [u64; 3],
        shards: u64,
        search: &MemorySearch<'_>,
    ) -> Result<Vec<Option<Neighbour>>, EngineError> {
        let search = metered_search(search, &self.dealt, &self.searched);
        let q = query_of(n, memory, shards, &*search);
        search_round(&self.gather, self.timestep, &q, &self.burdens, &mut || {
            Ok(())
        })
    }

    fn finds(&self) -> bool {
        finds(&self.gather.borrow())
    }

    /// The leader records the verdicts; a replica keeps only its model in step.
    fn reports(&self) -> bool {
        false
    }

    /// The found round is the step's last: the replica also begins the round after it (its
    /// part there is [`Reply::Idle`], whatever the leader says), so that the leader's next
    /// command gets through while this replica still projects the update.
    fn offer(&mut self, mine: Option<&Found>) -> Result<(), EngineError> {
        let mut g = self.gather.borrow_mut();
        g.begin(encode(&Reply::Found {
            timestep: self.timestep,
            found: mine.cloned(),
        }));
        g.begin(encode(&Reply::Idle));
        Ok(())
    }

    fn found(&mut self, mine: Option<Found>) -> Result<Found, EngineError> {
        finish_found(&mut self.gather.borrow_mut(), mine, self.timestep)
    }

    /// Its hand of the update's row shards.
    fn gradient(&mut self, job: &UpdateJob<'_>) -> Result<Vec<GradientRows>, EngineError> {
        let (index, peers) = {
            let g = self.gather.borrow();
            (g.index(), g.peers())
        };
        let (rows, cpu) = cpu_of(|| job.run(&row_deal(job, peers, &self.burdens)[index]));
        self.dealt.set(self.dealt.get() + cpu);
        Ok(rows)
    }

    fn reduce(&mut self, mine: Vec<ColumnSum>) -> Result<Vec<ColumnSum>, EngineError> {
        let mut g = self.gather.borrow_mut();
        let index = g.index();
        let round = g.round(sums_message(index, self.timestep, mine));
        total_sums(&round, self.timestep)
    }

    fn gather_rows(&mut self, mine: Vec<ProjectedRows>) -> Result<Vec<ProjectedRows>, EngineError> {
        let mut g = self.gather.borrow_mut();
        let index = g.index();
        let round = g.round(rows_message(index, self.timestep, mine));
        gather_rows(&round, self.timestep)
    }
}

/// A replica's judge: takes part in the hybrid detector's search with its replica of the
/// memory, receives the leader's judgement in the step's judgement round, and takes the batch
/// into its memory as the leader's step does, once the step succeeded ([`Self::take_in`]).
pub(super) struct RemoteJudge<'a> {
    pub gather: Rc<RefCell<Gather>>,
    pub memory: Option<&'a mut DocMemory>,
    pub timestep: u64,
    pub times: &'a [i64],
    /// The batch as the memory sees it, once [`Judge::query`] asked for its search.
    pub batch: Option<MemoryBatch>,
    /// The search ran with the coding ([`Judge::answer`]).
    pub searched: bool,
    /// The batch the memory takes once the step succeeded (vectors, references).
    pub intake: Option<MemoryBatch>,
}

impl RemoteJudge<'_> {
    /// The step's batch taken into the memory, after the step: the memory is next searched
    /// in the next step, so its intake waits until the step's rounds are over instead of
    /// delaying this worker's rows in the update (with the refresh plan, the finder is the
    /// last to send them). Call only once the step succeeded: a failed step is followed by a
    /// load of the leader's state.
    fn take_in(&mut self) {
        if let (Some(memory), Some((vectors, refs))) =
            (self.memory.as_deref_mut(), self.intake.take())
        {
            let docs: Vec<_> = refs.into_iter().zip(vectors.iter()).collect();
            let plan = memory.plan(&docs);
            memory.apply(plan);
        }
    }

    fn memory(&self) -> Result<&DocMemory, EngineError> {
        self.memory
            .as_deref()
            .ok_or_else(|| broken("this replica holds no memory of the hybrid detector".into()))
    }
}

impl Judge for RemoteJudge<'_> {
    fn judge(&mut self, _batch: &Scored) -> Result<Judgement, EngineError> {
        Err(broken("a replica judges only in a shared step".into()))
    }

    fn judge_shared(
        &mut self,
        batch: &Scored,
        rep: &mut dyn Replication,
    ) -> Result<Judgement, EngineError> {
        self.memory()?;
        let (vectors, refs) = scored_batch(batch, self.batch.take(), self.timestep, self.times)?;
        if !std::mem::take(&mut self.searched) {
            let q = searcher(self.memory()?, &vectors);
            rep.nearest(q.n, q.memory, q.shards, &*q.search)?;
        }
        self.intake = Some((vectors, refs));
        leaders_judgement(&self.gather)
    }

    fn query(
        &mut self,
        vectors: &[SparseDoc],
        vocab: &Vocabulary,
    ) -> Result<Option<Query<'_>>, EngineError> {
        self.memory()?;
        let batch = memory_batch(vectors, vocab, self.timestep, self.times)?;
        let memory = self.memory.as_deref().expect("checked above");
        Ok(Some(searcher(memory, &self.batch.insert(batch).0)))
    }

    /// The leader combines the search's answer; a replica only takes part.
    fn answer(&mut self, _near: Vec<Option<Neighbour>>) {
        self.searched = true;
    }
}

/// The leader's judgement, received in the step's judgement round (begun already when the
/// search ran with the coding, see [`ReplicaSide::code_and_search`]).
fn leaders_judgement(gather: &RefCell<Gather>) -> Result<Judgement, EngineError> {
    let round = {
        let mut g = gather.borrow_mut();
        if g.open() > 0 {
            g.finish()
        } else {
            g.round(encode(&Reply::Idle))
        }
    };
    match decode(&round)?.0 {
        Lead::Judgement(Ok(j)) => Ok(j),
        Lead::Judgement(Err(e)) => Err(broken(format!("the leader's judge failed: {e}"))),
        Lead::Abort => Err(broken("the leader abandoned the step".into())),
        other => Err(broken(format!(
            "expected the judgement, got {}",
            other.name()
        ))),
    }
}

/// The leader's next command, on a replica between steps.
fn next_command(gather: &RefCell<Gather>) -> Result<Lead, ClusterError> {
    let round = {
        let mut g = gather.borrow_mut();
        // a step ends with the next round begun (see `ReplicaSide::offer`), or with its
        // found round still open too when it failed before collecting it
        while g.open() > 1 {
            g.finish();
        }
        if g.open() == 0 {
            g.begin(encode(&Reply::Idle));
        }
        g.finish()
    };
    Ok(decode(&round)
        .map_err(|e| ClusterError::Protocol(e.to_string()))?
        .0)
}

/// The hybrid detector's memory from the leader's parts of it (every worker searches all of
/// it for its own documents); none, with a warning, when they do not load.
fn loaded_memory(index: usize, parts: &[(String, Vec<u8>)]) -> Option<DocMemory> {
    match DocMemory::from_state_parts(parts.iter().map(|(n, b)| (n.as_str(), b.as_slice()))) {
        Ok(mem) => Some(mem),
        Err(e) => {
            tracing::warn!(worker = index, error = %e, "the leader's memory does not load");
            None
        }
    }
}

/// The log line of a replica's step that took `seconds`: its figures, `side`'s, its memory's
/// size, and the seconds it waited and the bytes it sent since the step before (`exchanged`).
fn log_step(
    index: usize,
    timestep: u64,
    seconds: f64,
    s: &StepStats,
    side: &ReplicaSide,
    memory: Option<&DocMemory>,
    (wait, sent): (f64, u64),
) {
    tracing::info!(
        worker = index,
        timestep,
        step_seconds = format!("{seconds:.4}"),
        vectorize_seconds = format!("{:.4}", s.seconds_vectorize),
        coding_seconds = format!("{:.4}", s.seconds_coding),
        terms_shards = side.terms.shards,
        claims_sent = side.terms.claims + side.coding.claims,
        code_seconds = format!("{:.4}", side.coding.work_seconds),
        search_own_seconds = format!("{:.4}", side.searched.get()),
        shards_coded = side.coding.shards,
        shards_taken = side.coding.taken,
        shards_filled = side.coding.filled,
        topics_seconds = format!("{:.4}", s.seconds_topics),
        update_seconds = format!("{:.4}", s.seconds_update),
        memory_docs = memory.map_or(0, DocMemory::len),
        memory_vectors = memory.map_or(0, DocMemory::vectors_kept),
        wait_seconds = format!("{wait:.4}"),
        sent_bytes = sent,
        "replica step"
    );
}

/// A replica: follows the leader's commands until it stops. Its model is the committed one
/// after every successful step of the leader.
pub fn replica(gather: Gather) -> Result<(), ClusterError> {
    let index = gather.index();
    let gather = Rc::new(RefCell::new(gather));
    let mut model: Option<Model> = None;
    // the gather's waiting counted up to the last step logged
    let mut waited = 0.0;
    // and the bytes it sent
    let mut sent = 0;
    let mut memory: Option<DocMemory> = None;
    // this process's CPU from one step's start to the next, reported to the leader
    let mut meter = Meter::default();
    loop {
        match next_command(&gather)? {
            Lead::Load {
                model: m,
                memory: parts,
            } => {
                memory = parts.and_then(|p| loaded_memory(index, &p));
                tracing::info!(
                    worker = index,
                    timestep = m.timestep(),
                    memory_docs = memory.as_ref().map_or(0, DocMemory::len),
                    "model loaded"
                );
                model = Some(*m);
                // the cycle under way is not a usual one: not measured
                meter = Meter::default();
            }
            Lead::Step {
                timestep,
                docs,
                times,
                judged,
                lead_terms,
                burdens,
            } => {
                let load = meter.cycle();
                let Some(cur) = model.as_ref().filter(|m| m.timestep() == timestep) else {
                    tracing::warn!(worker = index, timestep, "not at the leader's timestep");
                    continue;
                };
                let mut side = ReplicaSide {
                    gather: Rc::clone(&gather),
                    timestep,
                    lead_terms,
                    terms: Default::default(),
                    coding: Default::default(),
                    burdens,
                    load,
                    dealt: Cell::new(Duration::ZERO),
                    searched: Cell::new(0.0),
                };
                let mut remote = RemoteJudge {
                    gather: Rc::clone(&gather),
                    memory: memory.as_mut(),
                    timestep,
                    times: &times,
                    batch: None,
                    searched: false,
                    intake: None,
                };
                let judge: Option<&mut dyn Judge> = if judged { Some(&mut remote) } else { None };
                let t0 = Instant::now();
                let stepped = cur.step_replicated(&docs, judge, &mut side);
                if stepped.is_ok() {
                    remote.take_in();
                }
                meter.add_dealt(side.dealt.get());
                match stepped {
                    Ok((m, out)) => {
                        let exchanged = (
                            waited_since(&gather, &mut waited),
                            sent_since(&gather, &mut sent),
                        );
                        let took = t0.elapsed().as_secs_f64();
                        log_step(
                            index,
                            timestep,
                            took,
                            &out.stats,
                            &side,
                            memory.as_ref(),
                            exchanged,
                        );
                        model = Some(m);
                    }
                    Err(e) => tracing::warn!(worker = index, timestep, error = %e, "step dropped"),
                }
            }
            Lead::Stop(None) => return Ok(()),
            Lead::Stop(Some(why)) => return Err(ClusterError::LeaderStopped(why)),
            Lead::Terms { .. }
            | Lead::Shards(_)
            | Lead::Nearest { .. }
            | Lead::Judgement(_)
            | Lead::Found(_)
            | Lead::Sums(_)
            | Lead::Rows(_)
            | Lead::Abort => {}
        }
    }
}
