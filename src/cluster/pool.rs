//! A step's tokenising and coding shared out among the workers by work stealing, the coding
//! also run in the waits of the hybrid detector's search.
//!
//! Every worker deals the same hands of logical shards from the same job
//! ([`super::deal::term_deal`], [`super::deal::coding_deal`]). A worker works out its
//! hand from the front, and announces the shards it is about to work out with a claim
//! ([`Gather::notify`]): several of its hand at once, a shrinking share of what is left of
//! it ([`chunk`]), so that a hand takes a few claims rather than one per shard. It codes
//! while it waits for the other workers' parts of the search round, instead of waiting
//! idle. Once its hand is done it takes unclaimed shards from the
//! back of the hand with the most left, until every shard is claimed as far as it knows, and
//! only then contributes what it worked out to the round. Workers that run at different
//! speeds (another program on one core, the leader's other work, a batch whose documents cost
//! more than predicted) thus end the tokenising, and the search with the coding, at about the
//! same time. A replica that tokenised every shard itself goes on without waiting for the
//! terms round ([`tokenise`]).
//!
//! Nobody waits for a claim, so nothing can deadlock; every claimed shard is worked out by its
//! claimant, so when every shard is claimed every shard is worked out. Two workers that claim
//! the same shard at the same moment both work it out, alike (an output is a function of the
//! job and the shard only); the round keeps one ([`merge`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use novad_models::l1::coding::CodingDict;
use novad_models::l1::dictionary::LOGICAL_SHARDS;
use novad_models::l1::replicate::{
    CodedAndFound, CodingJob, Query, ShardOutput, ShardTerms, TermJob,
};
use novad_models::model::EngineError;

use super::balance::Load;
use super::deal::{coding_deal, term_deal, Burdens};
use super::net::Gather;
use super::protocol::{
    abandoned, broken, decode, encode, gather_outputs, gather_terms, search_round, shards_message,
    terms_message, vocab_mark, LeadTerms, Reply,
};

/// A worker's announcement that it works out `shards` (bit s: logical shard s) of the pooled
/// work that began at gather round `key` (so that claims left over from other work, or from
/// an abandoned step, are not taken for this work's).
#[derive(Serialize, Deserialize)]
struct Claim {
    key: u64,
    shards: u64,
}

const _: () = assert!(
    LOGICAL_SHARDS >= 1 && LOGICAL_SHARDS <= 64,
    "a claim is a 64-bit mask of logical shards"
);

/// How many shards of its own hand a worker claims at once when `left` of them are
/// unclaimed and `peers` workers share the work: a shrinking share of what is left (guided
/// self-scheduling), so that a hand takes a few claims instead of one per shard, while the
/// shards it leaves unclaimed are enough for a worker done early to take, down to one at a
/// time at the end. Every claim costs both workers a step of the dataflow and the network
/// threads a message.
fn chunk(left: usize, peers: usize) -> usize {
    left.div_ceil(2 * peers.max(1)).max(1)
}

/// What a worker's part of a step's pooled work (the tokenising, or the coding with the
/// search) cost it.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct PoolFigures {
    /// Seconds spent working out shards (of its hand and the ones it took).
    pub work_seconds: f64,
    /// Shards it worked out, of its own hand and of others'.
    pub shards: usize,
    /// Of those, shards of other workers' hands.
    pub taken: usize,
    /// Of those, shards worked out while waiting for a search round.
    pub filled: usize,
    /// Claims this worker sent (each of one shard or more).
    pub claims: usize,
    /// Seconds from the start of the search to the end of its last round.
    pub search_seconds: f64,
    /// Bytes sent and received over the network meanwhile (the search's parts, the claims).
    pub search_bytes: u64,
    /// Bytes sent and received over the network after the search (the claims, the outputs).
    pub outputs_bytes: u64,
    /// Seconds in the work's round after the last shard this worker worked out: the wait
    /// for the others' outputs, and the transfer.
    pub exchange_seconds: f64,
    /// Encoded size of every worker's contribution to the coding round: the volume
    /// all-gathered (each worker receives all but its own).
    pub codes_bytes: u64,
}

/// Work shared out by logical shard: one shard's output, a function of the shard alone.
pub(super) trait Work {
    type Out: PartialEq;
    /// The output of logical shard `shard`.
    fn run(&self, shard: usize) -> Self::Out;
    /// The shard an output is of.
    fn shard(out: &Self::Out) -> u32;
}

/// The coding of a step's batch.
struct Coding<'j, 'a> {
    job: &'j CodingJob<'a>,
    dict: CodingDict<'a>,
}

impl Work for Coding<'_, '_> {
    type Out = ShardOutput;
    fn run(&self, shard: usize) -> ShardOutput {
        let mut outs = self.job.run_on(&self.dict, &[shard]);
        outs.pop().expect("one output per shard")
    }
    fn shard(out: &ShardOutput) -> u32 {
        out.shard
    }
}

/// The tokenising of a step's batch.
struct Terms<'j, 'a>(&'j TermJob<'a>);

impl Work for Terms<'_, '_> {
    type Out = ShardTerms;
    fn run(&self, shard: usize) -> ShardTerms {
        let mut outs = self.0.run(&[shard]);
        outs.pop().expect("one output per shard")
    }
    fn shard(out: &ShardTerms) -> u32 {
        out.shard
    }
}

/// One worker's view of work shared out by logical shard.
pub(super) struct Pool<W: Work> {
    work: W,
    /// Every worker's hand, increasing.
    hands: Vec<Vec<usize>>,
    me: usize,
    key: u64,
    /// The shards claimed so far, as this worker knows.
    claimed: [bool; LOGICAL_SHARDS],
    /// Shards this worker claimed and has not worked out yet, in the order it works them out.
    reserved: VecDeque<usize>,
    outs: Vec<W::Out>,
    pub figures: PoolFigures,
}

impl<W: Work> Pool<W> {
    /// The pool of `work` dealt out in `hands` for the worker of `g`, before any round of
    /// the work (every worker is then at the same round, the work's key).
    pub fn new(work: W, hands: Vec<Vec<usize>>, g: &Gather) -> Self {
        Pool {
            work,
            hands,
            me: g.index(),
            key: g.next_round(),
            claimed: [false; LOGICAL_SHARDS],
            reserved: VecDeque::new(),
            outs: Vec::new(),
            figures: PoolFigures::default(),
        }
    }

    /// Take in the claims the other workers sent so far.
    fn hear(&mut self, g: &mut Gather) -> Result<(), EngineError> {
        for (from, bytes) in g.notices() {
            let c: Claim = postcard::from_bytes(&bytes)
                .map_err(|e| broken(format!("undecodable claim from worker {from}: {e}")))?;
            if c.key == self.key {
                let beyond = c.shards & !(u64::MAX >> (64 - LOGICAL_SHARDS));
                if beyond != 0 {
                    return Err(broken(format!(
                        "worker {from} claims shard {}: no such shard",
                        beyond.trailing_zeros()
                    )));
                }
                for (s, slot) in self.claimed.iter_mut().enumerate() {
                    *slot |= (c.shards >> s) & 1 == 1;
                }
            }
        }
        Ok(())
    }

    /// The first unclaimed shards of this worker's hand, as many as it claims at once
    /// ([`chunk`]); empty when every shard of it is claimed.
    fn own_chunk(&self) -> Vec<usize> {
        let Some(hand) = self.hands.get(self.me) else {
            return Vec::new();
        };
        let unclaimed: Vec<usize> = hand.iter().copied().filter(|&s| !self.claimed[s]).collect();
        let n = chunk(unclaimed.len(), self.hands.len());
        unclaimed.into_iter().take(n).collect()
    }

    /// The last unclaimed shard of the hand with the most unclaimed shards (the first such
    /// hand on a tie), when this worker's own is done.
    fn next_taken(&self) -> Option<usize> {
        let left = |h: &Vec<usize>| h.iter().filter(|&&s| !self.claimed[s]).count();
        let (_, hand) = self
            .hands
            .iter()
            .map(|h| (left(h), h))
            .filter(|&(n, _)| n > 0)
            .fold(
                None,
                |best: Option<(usize, &Vec<usize>)>, (n, h)| match best {
                    Some((b, _)) if b >= n => best,
                    _ => Some((n, h)),
                },
            )?;
        hand.iter().rev().copied().find(|&s| !self.claimed[s])
    }

    /// The next shard for this worker to work out: the next one it claimed already; else,
    /// after taking in the others' claims, the first shards of its own hand claimed at once;
    /// else the shard [`Self::next_taken`] names, claimed. A claim is sent to every other
    /// worker before the shard is worked out. `None` once every shard is claimed, as far as
    /// this worker knows.
    fn next(&mut self, g: &mut Gather) -> Result<Option<usize>, EngineError> {
        if let Some(s) = self.reserved.pop_front() {
            return Ok(Some(s));
        }
        self.hear(g)?;
        let mut claim = self.own_chunk();
        if claim.is_empty() {
            claim.extend(self.next_taken());
        }
        let Some(&first) = claim.first() else {
            return Ok(None);
        };
        let mut mask = 0u64;
        for &s in &claim {
            self.claimed[s] = true;
            mask |= 1 << s;
        }
        g.notify(encode(&Claim {
            key: self.key,
            shards: mask,
        }));
        self.figures.claims += 1;
        self.reserved.extend(&claim[1..]);
        Ok(Some(first))
    }

    /// Work out `shard` (claimed already).
    fn run(&mut self, shard: usize) {
        let t0 = Instant::now();
        self.outs.push(self.work.run(shard));
        self.figures.work_seconds += t0.elapsed().as_secs_f64();
        self.figures.shards += 1;
        if !self.hands.get(self.me).is_some_and(|h| h.contains(&shard)) {
            self.figures.taken += 1;
        }
    }

    /// Run shards (of this worker's hand first) until the oldest open round of `g` is
    /// complete.
    fn fill(&mut self, g: &mut Gather) -> Result<(), EngineError> {
        while !g.ready() {
            let Some(s) = self.next(g)? else {
                break;
            };
            self.run(s);
            self.figures.filled += 1;
        }
        Ok(())
    }

    /// Run shards until every shard is claimed.
    fn drain(&mut self, g: &mut Gather) -> Result<(), EngineError> {
        while let Some(s) = self.next(g)? {
            self.run(s);
        }
        Ok(())
    }

    /// Run shards until every shard is claimed, then contribute this worker's outputs (made
    /// into its message by `message`) to the next round and finish it.
    pub fn finish(
        &mut self,
        g: &mut Gather,
        message: impl FnOnce(Vec<W::Out>) -> Vec<u8>,
    ) -> Result<Vec<Vec<u8>>, EngineError> {
        self.drain(g)?;
        let t0 = Instant::now();
        // rounds still open before this one (a replica's terms round, when it resolved every
        // shard itself) are finished first; when the leader abandoned the step there, this
        // fails before contributing, so the next round holds the leader's next command
        while g.open() > 0 {
            if abandoned(&g.finish()) {
                return Err(broken("the leader abandoned the step".into()));
            }
        }
        let round = g.round(message(std::mem::take(&mut self.outs)));
        self.figures.exchange_seconds = t0.elapsed().as_secs_f64();
        Ok(round)
    }
}

/// A step's coding of `job` and, with `query`, its search, on any worker of `gather`: every
/// shard's outputs (each once, whoever coded it) and, with a query, the nearest remembered
/// document of each document ([`search_round`]). The worker codes its hand in the wait of
/// the search round and takes shards from the others' hands once its own is done (see the
/// module's documentation). The search's documents are dealt with the step's `burdens`; a
/// replica reports `load` with its outputs, and the replicas' loads are returned, by replica
/// (each `None` when it reported none).
pub(super) fn code_and_search(
    gather: &RefCell<Gather>,
    job: &CodingJob<'_>,
    query: Option<&Query<'_>>,
    burdens: &Burdens,
    load: Option<Load>,
) -> Result<(CodedAndFound, PoolFigures, Vec<Option<Load>>), EngineError> {
    let coding = Coding {
        job,
        dict: job.prepare(),
    };
    let mut pool = Pool::new(
        coding,
        coding_deal(job, gather.borrow().peers()),
        &gather.borrow(),
    );
    let traffic = || gather.borrow().traffic();
    let bytes0 = traffic();
    let t0 = Instant::now();
    let near = match query {
        Some(q) => {
            let mut fill = || pool.fill(&mut gather.borrow_mut());
            let near = search_round(gather, job.timestep, q, burdens, &mut fill)?;
            Some(near)
        }
        None => None,
    };
    pool.figures.search_seconds = t0.elapsed().as_secs_f64();
    let bytes1 = traffic();
    pool.figures.search_bytes = bytes1 - bytes0;
    let index = pool.me;
    let round = pool.finish(&mut gather.borrow_mut(), |outs| {
        shards_message(index, job.timestep, outs, load)
    })?;
    pool.figures.outputs_bytes = traffic() - bytes1;
    pool.figures.codes_bytes = round.iter().map(|b| b.len() as u64).sum();
    let (lead, replies) = decode(&round)?;
    let loads = replies
        .iter()
        .map(|r| match r {
            Reply::Shards { load, .. } => *load,
            _ => None,
        })
        .collect();
    let outs = merge::<Coding>(gather_outputs(lead, replies, job.timestep)?)?;
    Ok(((outs, near), pool.figures, loads))
}

/// A step's tokenising of `job` on any worker of `gather`: every shard's resolved terms, each
/// once, whoever worked it out. The shards are dealt out as [`term_deal`] deals them with the
/// leader's part `lead`; a worker that is done takes shards from the others' hands.
pub(super) fn tokenise(
    gather: &RefCell<Gather>,
    job: &TermJob<'_>,
    lead: LeadTerms,
) -> Result<(Vec<ShardTerms>, PoolFigures), EngineError> {
    let (index, peers) = {
        let g = gather.borrow();
        (g.index(), g.peers())
    };
    let hands = term_deal(&job.shard_costs(), peers, lead);
    let mut pool = Pool::new(Terms(job), hands, &gather.borrow());
    let traffic = || gather.borrow().traffic();
    let bytes0 = traffic();
    let vocab = vocab_mark(job);
    let message = |outs| terms_message(index, job.timestep, vocab, outs);
    if index > 0 {
        // a replica that works out every shard itself (the leader busy with the last
        // timestep's records) needs no one's terms: it goes on at once and leaves the round
        // open (the leader checks it)
        pool.drain(&mut gather.borrow_mut())?;
        if pool.outs.len() == LOGICAL_SHARDS {
            let outs = std::mem::take(&mut pool.outs);
            gather.borrow_mut().begin(message(outs.clone()));
            return Ok((merge::<Terms>(outs)?, pool.figures));
        }
    }
    let round = pool.finish(&mut gather.borrow_mut(), message)?;
    pool.figures.outputs_bytes = traffic() - bytes0;
    let (lead, replies) = decode(&round)?;
    let outs = merge::<Terms>(gather_terms(lead, replies, job.timestep)?)?;
    Ok((outs, pool.figures))
}

/// Begin the leader's part of a step's terms round before the step, empty, for a batch the
/// replicas tokenise already (it went out at the end of the step before): the leader writes
/// the last timestep and reads the next file meanwhile, and leaves every shard of the batch to
/// the replicas, which take its hand as they take any shard nobody claimed. So their terms
/// round completes without waiting for the leader's other work, and they go on to the coding,
/// where they take the leader's hand too until it joins. `vocab` is the mark of the leader's
/// vocabulary before the step ([`vocab_mark`]); [`tokenised_aside`] finishes the round.
pub(super) fn begin_terms_aside(gather: &RefCell<Gather>, vocab: [u64; 2]) {
    gather
        .borrow_mut()
        .begin(terms_message(0, 0, vocab, Vec::new()));
}

/// The terms round the leader began with [`begin_terms_aside`] (the newest open round),
/// finished: every shard's resolved terms, from the replicas. Fails when the round went out
/// for another vocabulary than `job`'s, or when the replicas' terms miss a shard.
pub(super) fn tokenised_aside(
    gather: &RefCell<Gather>,
    job: &TermJob<'_>,
    vocab: [u64; 2],
) -> Result<(Vec<ShardTerms>, PoolFigures), EngineError> {
    if vocab != vocab_mark(job) {
        return Err(broken(format!(
            "the leader's terms round went out for a vocabulary marked {vocab:?}, the step's is \
             marked {:?}",
            vocab_mark(job)
        )));
    }
    let bytes0 = gather.borrow().traffic();
    let t0 = Instant::now();
    let round = {
        let mut g = gather.borrow_mut();
        while g.open() > 1 {
            g.finish();
        }
        g.finish()
    };
    let figures = PoolFigures {
        exchange_seconds: t0.elapsed().as_secs_f64(),
        outputs_bytes: gather.borrow().traffic() - bytes0,
        ..Default::default()
    };
    let (lead, replies) = decode(&round)?;
    let outs = merge::<Terms>(gather_terms(lead, replies, job.timestep)?)?;
    if outs.len() != LOGICAL_SHARDS {
        return Err(broken(format!(
            "the replicas resolved {} of the batch's {LOGICAL_SHARDS} logical shards",
            outs.len()
        )));
    }
    Ok((outs, figures))
}

/// The outputs of a round of pooled work with every shard once: by shard, the first of those
/// two workers computed alike. Fails when two workers' outputs of a shard differ (they are a
/// function of the step and the shard only, so the workers' replicas of the step differ).
pub(super) fn merge<W: Work>(mut outs: Vec<W::Out>) -> Result<Vec<W::Out>, EngineError> {
    outs.sort_by_key(W::shard);
    let mut kept: Vec<W::Out> = Vec::with_capacity(outs.len());
    for o in outs {
        match kept.last() {
            Some(last) if W::shard(last) == W::shard(&o) => {
                if *last != o {
                    return Err(broken(format!(
                        "logical shard {} was worked out twice, with different outputs",
                        W::shard(&o)
                    )));
                }
            }
            _ => kept.push(o),
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Shard s's output is (s, s²); the worker `slow` takes `pause` per shard.
    struct Squares {
        slow: bool,
        pause: Duration,
    }

    impl Work for Squares {
        type Out = (u32, u64);
        fn run(&self, shard: usize) -> (u32, u64) {
            if self.slow {
                std::thread::sleep(self.pause);
            }
            (shard as u32, (shard * shard) as u64)
        }
        fn shard(out: &(u32, u64)) -> u32 {
            out.0
        }
    }

    /// Even shards to worker 0, odd ones to worker 1.
    fn halves() -> Vec<Vec<usize>> {
        (0..2)
            .map(|w| (0..LOGICAL_SHARDS).filter(|s| s % 2 == w).collect())
            .collect()
    }

    /// Every output of a round of [`Squares`], merged.
    fn merged(round: &[Vec<u8>]) -> Vec<(u32, u64)> {
        let all: Vec<(u32, u64)> = round
            .iter()
            .flat_map(|b| postcard::from_bytes::<Vec<(u32, u64)>>(b).unwrap())
            .collect();
        merge::<Squares>(all).unwrap()
    }

    /// A worker that is done takes the unclaimed shards of a slow worker's hand, and every
    /// shard's output is in the round exactly once.
    #[test]
    fn a_done_worker_takes_a_slow_workers_shards_and_every_shard_is_worked_out_once() {
        let guards = timely::execute(timely::Config::process(2), |worker| {
            let mut g = Gather::new(worker, 2);
            let slow = g.index() == 1;
            let work = Squares {
                slow,
                pause: Duration::from_millis(5),
            };
            let mut pool = Pool::new(work, halves(), &g);
            let round = pool.finish(&mut g, |outs| encode(&outs)).unwrap();
            (merged(&round), pool.figures)
        })
        .unwrap();
        let results: Vec<_> = guards.join().into_iter().map(Result::unwrap).collect();
        let want: Vec<(u32, u64)> = (0..LOGICAL_SHARDS as u64)
            .map(|s| (s as u32, s * s))
            .collect();
        for (outs, _) in &results {
            assert_eq!(outs, &want);
        }
        let (fast, slow) = (results[0].1, results[1].1);
        assert!(fast.taken > 0, "the fast worker took nothing: {fast:?}");
        // its own hand in a few claims, each shard it took in one
        assert!(fast.claims < fast.shards, "{fast:?}");
        assert!(fast.claims >= fast.taken, "{fast:?}");
        assert_eq!(slow.taken, 0, "{slow:?}");
        assert!(fast.shards + slow.shards >= LOGICAL_SHARDS);
        assert!(slow.shards < LOGICAL_SHARDS / 2, "{slow:?}");
    }

    /// A worker waiting for a round works meanwhile, and stops once the round is complete.
    #[test]
    fn a_worker_works_while_it_waits_for_a_round() {
        let guards = timely::execute(timely::Config::process(2), |worker| {
            let mut g = Gather::new(worker, 2);
            let me = g.index();
            let work = Squares {
                slow: true,
                pause: Duration::from_millis(5),
            };
            let mut pool = Pool::new(work, halves(), &g);
            if me == 1 {
                // worker 1 contributes late, and only then works
                std::thread::sleep(Duration::from_millis(60));
            }
            g.begin(vec![me as u8]);
            pool.fill(&mut g).unwrap();
            let filled = pool.figures.filled;
            let round = g.finish();
            let outs = pool.finish(&mut g, |outs| encode(&outs)).unwrap();
            (round, filled, merged(&outs))
        })
        .unwrap();
        let results: Vec<_> = guards.join().into_iter().map(Result::unwrap).collect();
        for (round, _, outs) in &results {
            assert_eq!(round, &vec![vec![0], vec![1]]);
            assert_eq!(outs.len(), LOGICAL_SHARDS);
        }
        // 60 ms of waiting at 5 ms a shard: worker 0 filled much of its wait, not all 64
        // shards (it stops once the round is complete)
        assert!(results[0].1 >= 5, "worker 0 filled {} shards", results[0].1);
        assert!(results[0].1 < LOGICAL_SHARDS, "worker 0 filled every shard");
    }

    /// Workers of the same speed claim their hands a few shards at a time: far fewer claims
    /// than shards, and every shard still worked out once.
    #[test]
    fn a_hand_is_claimed_in_a_few_claims() {
        let guards = timely::execute(timely::Config::process(2), |worker| {
            let mut g = Gather::new(worker, 2);
            let work = Squares {
                slow: true,
                pause: Duration::from_millis(1),
            };
            let mut pool = Pool::new(work, halves(), &g);
            let round = pool.finish(&mut g, |outs| encode(&outs)).unwrap();
            (merged(&round).len(), pool.figures)
        })
        .unwrap();
        for r in guards.join() {
            let (outs, f) = r.unwrap();
            assert_eq!(outs, LOGICAL_SHARDS);
            assert!(f.claims * 2 <= f.shards, "{f:?}");
        }
    }

    /// A claim of a worker's own hand leaves at least half of what is left of it unclaimed
    /// (for a worker done early to take), ends with claims of one shard, and a hand of more
    /// than two shards a worker takes fewer claims than shards.
    #[test]
    fn a_claim_leaves_half_of_the_hand_and_shrinks_to_one_shard() {
        for peers in 2..=4 {
            for hand in 1..=LOGICAL_SHARDS {
                let (mut left, mut claims, mut last) = (hand, 0, 0);
                while left > 0 {
                    let c = chunk(left, peers);
                    assert!(c >= 1 && c <= left.div_ceil(2), "{c} of {left}");
                    left -= c;
                    claims += 1;
                    last = c;
                }
                assert_eq!(last, 1, "hand {hand}, {peers} workers");
                if hand > 2 * peers {
                    assert!(
                        claims < hand,
                        "{claims} claims, hand {hand}, {peers} workers"
                    );
                }
            }
        }
    }

    /// A leader busy with other work begins its terms round empty: the replicas resolve every
    /// shard between them (the leader's hand too: with one replica it is not empty) and
    /// complete the round while the leader does not step its worker, and every worker gets
    /// the batch's terms as resolving them all in one place gives; the rounds after it stay
    /// aligned. A leader whose vocabulary is not the one the round went out for is refused.
    #[test]
    fn replicas_tokenise_the_whole_batch_while_the_leader_is_busy() {
        use novad_models::text::{Tokenizer, Vocabulary};
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let texts: Arc<Vec<String>> = Arc::new(
            (0..300)
                .map(|j| format!("post {j} about w{} and w{} with w{}", j % 7, j % 13, j % 31))
                .collect(),
        );
        let run = |texts: &[String], f: &mut dyn FnMut(&TermJob<'_>)| {
            let tokenizer = Tokenizer::new(2, 20, false, &[]);
            let mut vocab = Vocabulary::new(1000);
            vocab.observe(&[vec!["w1".into(), "post".into()]], 0);
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            f(&TermJob {
                timestep: 4,
                texts: &refs,
                tokenizer: &tokenizer,
                vocab: &vocab,
            })
        };
        let mut want = Vec::new();
        run(&texts, &mut |job| {
            want = job.run(&(0..LOGICAL_SHARDS).collect::<Vec<_>>());
            assert!(!term_deal(&job.shard_costs(), 2, LeadTerms::Little)[0].is_empty());
        });
        for peers in [2, 3] {
            let shared = Arc::clone(&texts);
            let done = Arc::new(AtomicUsize::new(0));
            let guards = timely::execute(timely::Config::process(peers), move |worker| {
                let g = RefCell::new(Gather::new(worker, peers));
                let index = g.borrow().index();
                let mut got = None;
                run(&shared, &mut |job| {
                    let mark = vocab_mark(job);
                    got = Some(if index == 0 {
                        begin_terms_aside(&g, mark);
                        // the leader's other work: it does not step its worker until every
                        // replica has its terms
                        let t0 = Instant::now();
                        while done.load(Ordering::SeqCst) < peers - 1 {
                            assert!(
                                t0.elapsed().as_secs() < 30,
                                "the replicas wait for the leader"
                            );
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                        let stale = [mark[0] + 1, mark[1]];
                        let e = tokenised_aside(&g, job, stale).unwrap_err().to_string();
                        assert!(e.contains("terms round went out"), "{e}");
                        tokenised_aside(&g, job, mark).unwrap().0
                    } else {
                        let (outs, f) = tokenise(&g, job, LeadTerms::Little).unwrap();
                        done.fetch_add(1, Ordering::SeqCst);
                        assert!(f.shards > 0, "worker {index} resolved nothing");
                        outs
                    });
                });
                let after = g.borrow_mut().round(vec![index as u8]);
                (index, got.unwrap(), after)
            })
            .unwrap();
            for r in guards.join() {
                let (index, outs, after) = r.unwrap();
                assert_eq!(outs, want, "{peers} workers: worker {index}");
                let all: Vec<Vec<u8>> = (0..peers as u8).map(|i| vec![i]).collect();
                assert_eq!(after, all, "{peers} workers: worker {index}");
            }
        }
    }

    /// A replica that left its terms round open (it resolved every shard itself) and finds
    /// there that the leader abandoned the step stops its pooled work before contributing, so
    /// the round after it lines up with the leader's next command.
    #[test]
    fn pooled_work_stops_at_an_abandoned_round_left_open() {
        let guards = timely::execute(timely::Config::process(2), |worker| {
            let mut g = Gather::new(worker, 2);
            if g.index() == 0 {
                g.round(encode(&super::super::protocol::Lead::Abort));
                let next = g.round(vec![7]);
                (next, None)
            } else {
                g.begin(vec![1]);
                let work = Squares {
                    slow: false,
                    pause: Duration::ZERO,
                };
                let mut pool = Pool::new(work, halves(), &g);
                let e = pool.finish(&mut g, |outs| encode(&outs)).unwrap_err();
                let next = g.round(vec![8]);
                (next, Some(e.to_string()))
            }
        })
        .unwrap();
        for r in guards.join() {
            let (next, e) = r.unwrap();
            assert_eq!(next, vec![vec![7], vec![8]]);
            if let Some(e) = e {
                assert!(e.contains("abandoned"), "{e}");
            }
        }
    }

    #[test]
    fn merge_keeps_one_of_equal_outputs_and_refuses_different_ones() {
        let kept = merge::<Squares>(vec![(3, 9), (1, 1), (3, 9), (2, 4)]).unwrap();
        assert_eq!(kept, vec![(1, 1), (2, 4), (3, 9)]);
        let e = merge::<Squares>(vec![(3, 9), (3, 10)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("logical shard 3"), "{e}");
    }
}
