//! What the workers of a cluster say in each all-gather round, and the two sides of a step.
//!
//! Every round, worker 0 (the leader) contributes a [`Lead`] and every other worker a
//! [`Reply`]. Between steps the replicas wait with [`Reply::Idle`] for the leader's command
//! ([`Lead::Load`], [`Lead::Step`], [`Lead::Stop`]). A step is then, on every worker, the same
//! [`Model::step_replicated`]: one round where each worker contributes the outputs of its
//! logical shards (shard s is coded by worker s mod workers); when the leader has a judge (the
//! hybrid detector), one search round where each worker contributes the nearest documents in
//! its share of the memory (the remembered documents of its logical shards, see
//! [`novad_models::memory::Share`]) and one round where the leader contributes its judgement;
//! and, when the step has topics, one round where the last worker ([`topics_finder`])
//! contributes the topics it found while the others ran the update (begun before the update,
//! finished after it, so that nobody waits for it). A leader whose
//! step failed sends [`Lead::Abort`], which ends the step on every replica still in it.

use std::cell::RefCell;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use novad_models::engine::memory_batch;
use novad_models::l1::dictionary::LOGICAL_SHARDS;
use novad_models::l1::replicate::{CodingJob, Replication, ShardOutput};
use novad_models::l1::Model;
use novad_models::memory::{best_of_shares, DocMemory, Neighbour, Share, ShareGap, TermVector};
use novad_models::model::{EngineError, Judge, Judgement, Scored, Topic};

use super::net::Gather;

/// The leader's contribution to a round.
#[derive(Debug, Serialize, Deserialize)]
pub enum Lead {
    /// The committed model, and the hybrid detector's memory as its parts when there is one:
    /// replicas replace theirs with them.
    Load {
        model: Box<Model>,
        memory: Option<Vec<(String, Vec<u8>)>>,
    },
    /// Step the model at `timestep` on these documents (with their times); `judged`: the
    /// leader has the hybrid detector, so the step has a search round and a judgement round.
    Step {
        timestep: u64,
        docs: Vec<String>,
        times: Vec<i64>,
        judged: bool,
    },
    /// The leader's shard outputs for the step's coding round.
    Shards(Vec<ShardOutput>),
    /// The leader's part of the search round: its memory's mark, the logical shards its
    /// memory indexes (a mask) and the nearest document among them of each batch document.
    Nearest {
        memory: [u64; 3],
        shards: u64,
        near: Vec<Option<Neighbour>>,
    },
    /// The leader's judgement (or the judge's error).
    Judgement(Result<Judgement, String>),
    /// The leader's part of a step's topics round: the topics when it found them.
    Topics(Option<Vec<Topic>>),
    /// The leader's step failed: replicas still in it drop it.
    Abort,
    /// The cluster stops (with the reason when it stops on an error).
    Stop(Option<String>),
}

/// A replica's contribution to a round.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Idle,
    /// The outputs of its shards for the step of the model at `timestep`.
    Shards {
        timestep: u64,
        outs: Vec<ShardOutput>,
    },
    /// Its part of the search round of the step of the model at `timestep`, from a memory
    /// with this mark indexing these logical shards.
    Nearest {
        timestep: u64,
        memory: [u64; 3],
        shards: u64,
        near: Vec<Option<Neighbour>>,
    },
    /// Its part of the topics round of the step of the model at `timestep`: the topics when it
    /// found them.
    Topics {
        timestep: u64,
        topics: Option<Vec<Topic>>,
    },
}

impl Lead {
    /// A short name of the command, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Lead::Load { .. } => "load",
            Lead::Step { .. } => "step",
            Lead::Shards(_) => "shard outputs",
            Lead::Nearest { .. } => "nearest documents",
            Lead::Judgement(_) => "judgement",
            Lead::Topics(_) => "topics",
            Lead::Abort => "abort",
            Lead::Stop(_) => "stop",
        }
    }
}

pub(super) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).expect("cluster messages serialise")
}

fn broken(what: String) -> EngineError {
    EngineError::Inconsistent(format!("cluster: {what}"))
}

/// A round's payloads decoded: the leader's command and the replicas' replies.
pub(super) fn decode(round: &[Vec<u8>]) -> Result<(Lead, Vec<Reply>), EngineError> {
    let (first, rest) = round
        .split_first()
        .ok_or_else(|| broken("a round without the leader".into()))?;
    let lead: Lead = postcard::from_bytes(first)
        .map_err(|e| broken(format!("undecodable message from the leader: {e}")))?;
    let replies = rest
        .iter()
        .enumerate()
        .map(|(i, b)| {
            postcard::from_bytes(b)
                .map_err(|e| broken(format!("undecodable message from worker {}: {e}", i + 1)))
        })
        .collect::<Result<Vec<Reply>, _>>()?;
    Ok((lead, replies))
}

/// The logical shards worker `index` of `peers` codes.
pub(super) fn my_shards(index: usize, peers: usize) -> Vec<usize> {
    (0..LOGICAL_SHARDS).filter(|s| s % peers == index).collect()
}

/// Every shard output of a coding round, checked to come from replicas at `timestep`.
pub(super) fn gather_outputs(
    lead: Lead,
    replies: Vec<Reply>,
    timestep: u64,
) -> Result<Vec<ShardOutput>, EngineError> {
    let mut all = match lead {
        Lead::Shards(o) => o,
        Lead::Abort => return Err(broken("the leader abandoned the step".into())),
        other => {
            return Err(broken(format!(
                "expected shard outputs, got {}",
                other.name()
            )))
        }
    };
    for (i, r) in replies.into_iter().enumerate() {
        match r {
            Reply::Shards { timestep: t, outs } if t == timestep => all.extend(outs),
            Reply::Shards { timestep: t, .. } => {
                return Err(broken(format!(
                    "worker {} holds the model at timestep {t}, the step is at {timestep}",
                    i + 1
                )))
            }
            Reply::Idle | Reply::Topics { .. } | Reply::Nearest { .. } => {
                return Err(broken(format!(
                    "worker {} did not take part in the step",
                    i + 1
                )))
            }
        }
    }
    Ok(all)
}

/// The nearest remembered document of every document of the batch, in batch order, from a
/// completed search round: the best of the workers' searches of their shares of the memory
/// ([`best_of_shares`]). Fails (naming the worker or shard) unless every worker took part
/// from a memory at the leader's mark, with one result per document, and the workers'
/// shares index every logical shard exactly once.
fn gathered_nearest(
    round: &[Vec<u8>],
    n: usize,
    timestep: u64,
) -> Result<Vec<Option<Neighbour>>, EngineError> {
    let (lead, replies) = decode(round)?;
    let (memory, mut parts) = match lead {
        Lead::Nearest {
            memory,
            shards,
            near,
        } => (memory, vec![(shards, near)]),
        Lead::Abort => return Err(broken("the leader abandoned the step".into())),
        other => {
            return Err(broken(format!(
                "expected nearest documents, got {}",
                other.name()
            )))
        }
    };
    for (i, r) in replies.into_iter().enumerate() {
        match r {
            Reply::Nearest {
                timestep: t,
                memory: mark,
                shards,
                near,
            } if t == timestep => {
                if mark != memory {
                    return Err(broken(format!(
                        "worker {}'s memory (offered, stored, bytes) is at {mark:?}, the \
                         leader's at {memory:?}",
                        i + 1
                    )));
                }
                parts.push((shards, near))
            }
            _ => {
                return Err(broken(format!(
                    "worker {} did not take part in the search at timestep {timestep}",
                    i + 1
                )))
            }
        }
    }
    best_of_shares(n, parts).map_err(|gap| match gap {
        ShareGap::Twice { s, first, second } => broken(format!(
            "memory shard {s} is searched by workers {first} and {second}"
        )),
        ShareGap::Missing(s) => broken(format!("no worker searched memory shard {s}")),
        ShareGap::Count { i, got, want } => broken(format!(
            "worker {i} found {got} nearest documents for {want} documents"
        )),
    })
}

/// A step's search round, on any worker: contribute this worker's part (`mine` wraps it as
/// its message), return everyone's.
pub(super) fn search_round(
    gather: &RefCell<Gather>,
    n: usize,
    timestep: u64,
    search: &dyn Fn() -> Vec<Option<Neighbour>>,
    mine: impl FnOnce(Vec<Option<Neighbour>>) -> Vec<u8>,
) -> Result<Vec<Option<Neighbour>>, EngineError> {
    let near = search();
    let round = gather.borrow_mut().round(mine(near));
    gathered_nearest(&round, n, timestep)
}

/// The share of the hybrid detector's memory worker `index` of `peers` searches: the memory
/// shards of its logical shards; the leader also keeps every vector (it persists the memory
/// and loads it into the replicas), a replica only those of its shards.
pub(super) fn memory_share(index: usize, peers: usize) -> Share {
    Share::of(&my_shards(index, peers), index == 0)
}

/// The worker that finds a step's topics: the last one (the leader has the most other work).
pub(super) fn topics_finder(peers: usize) -> usize {
    peers - 1
}

/// True when the worker of `g` finds the step's topics.
pub(super) fn finds_topics(g: &Gather) -> bool {
    g.index() == topics_finder(g.peers())
}

/// Finish a step's topics round on any worker: `mine` when this worker found the topics, else
/// the finder's (checked either way, so a leader that gave up the step is noticed).
pub(super) fn finish_topics(
    g: &mut Gather,
    mine: Option<Vec<Topic>>,
    timestep: u64,
) -> Result<Vec<Topic>, EngineError> {
    let round = g.finish();
    let theirs = gathered_topics(&round, timestep)?;
    Ok(mine.unwrap_or(theirs))
}

/// The topics of a completed topics round: the finder's contribution, checked to come from a
/// replica at `timestep`.
pub(super) fn gathered_topics(round: &[Vec<u8>], timestep: u64) -> Result<Vec<Topic>, EngineError> {
    let (lead, replies) = decode(round)?;
    let finder = topics_finder(replies.len() + 1);
    let found = match lead {
        Lead::Topics(t) if finder == 0 => t,
        Lead::Topics(_) => match replies.into_iter().nth(finder - 1) {
            Some(Reply::Topics {
                timestep: t,
                topics,
            }) if t == timestep => topics,
            Some(Reply::Topics { timestep: t, .. }) => {
                return Err(broken(format!(
                    "worker {finder} holds the model at timestep {t}, the step is at {timestep}"
                )))
            }
            _ => {
                return Err(broken(format!(
                    "worker {finder} did not take part in the topics round"
                )))
            }
        },
        Lead::Abort => return Err(broken("the leader abandoned the step".into())),
        other => return Err(broken(format!("expected topics, got {}", other.name()))),
    };
    found.ok_or_else(|| broken(format!("worker {finder} found no topics")))
}

/// A replica's side of a step: codes its shards, contributes them, returns everyone's.
pub(super) struct ReplicaSide {
    pub gather: Rc<RefCell<Gather>>,
    /// The timestep of the model being stepped.
    pub timestep: u64,
}

impl Replication for ReplicaSide {
    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError> {
        let mut g = self.gather.borrow_mut();
        let outs = job.run(&my_shards(g.index(), g.peers()));
        let round = g.round(encode(&Reply::Shards {
            timestep: job.timestep,
            outs,
        }));
        let (lead, replies) = decode(&round)?;
        gather_outputs(lead, replies, job.timestep)
    }

    fn nearest(
        &mut self,
        n: usize,
        memory: [u64; 3],
        shards: u64,
        search: &dyn Fn() -> Vec<Option<Neighbour>>,
    ) -> Result<Vec<Option<Neighbour>>, EngineError> {
        let timestep = self.timestep;
        search_round(&self.gather, n, timestep, search, |near| {
            encode(&Reply::Nearest {
                timestep,
                memory,
                shards,
                near,
            })
        })
    }

    fn finds_topics(&self) -> bool {
        finds_topics(&self.gather.borrow())
    }

    /// The topics round is the step's last: the replica also begins the round after it (its
    /// part there is [`Reply::Idle`], whatever the leader says), so that the leader's next
    /// command gets through while this replica still runs its update.
    fn offer_topics(&mut self, mine: Option<&[Topic]>) -> Result<(), EngineError> {
        let mut g = self.gather.borrow_mut();
        g.begin(encode(&Reply::Topics {
            timestep: self.timestep,
            topics: mine.map(<[Topic]>::to_vec),
        }));
        g.begin(encode(&Reply::Idle));
        Ok(())
    }

    fn topics(&mut self, mine: Option<Vec<Topic>>) -> Result<Vec<Topic>, EngineError> {
        finish_topics(&mut self.gather.borrow_mut(), mine, self.timestep)
    }
}

/// A replica's judge: takes part in the hybrid detector's search with its replica of the
/// memory, receives the leader's judgement in the step's judgement round, and then takes the
/// batch into its memory as the leader's step does.
pub(super) struct RemoteJudge<'a> {
    pub gather: Rc<RefCell<Gather>>,
    pub memory: Option<&'a mut DocMemory>,
    pub timestep: u64,
    pub times: &'a [i64],
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
        let memory = self
            .memory
            .as_deref_mut()
            .ok_or_else(|| broken("this replica holds no memory of the hybrid detector".into()))?;
        let (vectors, refs) = memory_batch(batch, self.timestep, self.times)?;
        let qs: Vec<&TermVector> = vectors.iter().collect();
        let search = || memory.nearest_batch(&qs);
        rep.nearest(qs.len(), memory.mark(), memory.share().mask(), &search)?;
        let judgement = leaders_judgement(&self.gather)?;
        let docs: Vec<_> = refs.into_iter().zip(vectors.iter()).collect();
        let plan = memory.plan(&docs);
        memory.apply(plan);
        Ok(judgement)
    }
}

/// The leader's judgement, received in the step's judgement round.
fn leaders_judgement(gather: &RefCell<Gather>) -> Result<Judgement, EngineError> {
    let round = gather.borrow_mut().round(encode(&Reply::Idle));
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

#[cfg(test)]
mod tests {
    use super::*;
    use novad_models::memory::{DocRef, MemoryParams};

    fn next(st: &mut u64) -> u64 {
        *st = st.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *st;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Short vectors over 30 terms (ties between remembered documents are common).
    fn vectors(n: usize, seed: u64) -> Vec<TermVector> {
        let mut st = seed;
        (0..n)
            .map(|_| {
                let len = 1 + (next(&mut st) % 4) as usize;
                TermVector::from_pairs(
                    (0..len)
                        .map(|_| (next(&mut st) % 30, 1.0 + (next(&mut st) % 2) as f64))
                        .collect(),
                )
            })
            .collect()
    }

    /// A memory of 300 documents and 130 queries.
    fn memory() -> (DocMemory, Vec<TermVector>) {
        let mut m = DocMemory::new(MemoryParams::default()).unwrap();
        let docs = vectors(300, 1);
        let batch: Vec<(DocRef, &TermVector)> = docs
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let r = DocRef {
                    timestep: 0,
                    seq: i as u32,
                    time: i as i64,
                };
                (r, v)
            })
            .collect();
        m.insert(&batch);
        (m, vectors(130, 2))
    }

    /// The leader's memory mark, and another one.
    const STALE: [u64; 3] = [800, 700, 1 << 20];

    /// The round's payloads when every worker of `peers` searches its share of `m` for the
    /// first `n` queries (`edit` changes worker i's mask and results first; worker `stale`,
    /// if any, searched another memory).
    fn round(
        peers: usize,
        n: usize,
        timestep: u64,
        stale: Option<usize>,
        edit: impl Fn(usize, &mut u64, &mut Vec<Option<Neighbour>>),
    ) -> Vec<Vec<u8>> {
        let (m, qs) = memory();
        let qs: Vec<&TermVector> = qs.iter().take(n).collect();
        (0..peers)
            .map(|i| {
                let mut mine = m.clone();
                mine.restrict(memory_share(i, peers)).unwrap();
                let mut shards = mine.share().mask();
                let mut near = mine.nearest_batch(&qs);
                edit(i, &mut shards, &mut near);
                let memory = if stale == Some(i) { STALE } else { m.mark() };
                if i == 0 {
                    encode(&Lead::Nearest {
                        memory,
                        shards,
                        near,
                    })
                } else {
                    encode(&Reply::Nearest {
                        timestep,
                        memory,
                        shards,
                        near,
                    })
                }
            })
            .collect()
    }

    #[test]
    fn the_searches_of_the_workers_shares_assemble_to_the_search_of_the_whole_memory() {
        let (m, qs) = memory();
        for peers in 1..=3 {
            for n in [0, 5, 64, 130] {
                let qs: Vec<&TermVector> = qs.iter().take(n).collect();
                let got = gathered_nearest(&round(peers, n, 7, None, |_, _, _| {}), n, 7).unwrap();
                assert_eq!(got, m.nearest_batch(&qs), "{peers} workers, {n} documents");
            }
        }
    }

    #[test]
    fn a_missing_repeated_or_stale_part_is_refused() {
        let n = 130;
        let err = |r: Vec<Vec<u8>>, timestep: u64| {
            gathered_nearest(&r, n, timestep).unwrap_err().to_string()
        };
        // worker 1 left its shard 3 out
        let e = err(
            round(2, n, 7, None, |i, mask, _| {
                if i == 1 {
                    *mask &= !(1 << 3)
                }
            }),
            7,
        );
        assert!(e.contains("no worker searched memory shard 3"), "{e}");
        // worker 1 searched the leader's shard 0 as well
        let e = err(
            round(2, n, 7, None, |i, mask, _| {
                if i == 1 {
                    *mask |= 1
                }
            }),
            7,
        );
        assert!(
            e.contains("memory shard 0 is searched by workers 0 and 1"),
            "{e}"
        );
        // a search with a document too few
        let e = err(
            round(2, n, 7, None, |i, _, near| {
                if i == 0 {
                    near.pop();
                }
            }),
            7,
        );
        assert!(
            e.contains("worker 0 found 129 nearest documents for 130"),
            "{e}"
        );
        // a replica at another timestep, or one that did not take part
        let e = err(round(3, n, 6, None, |_, _, _| {}), 7);
        assert!(
            e.contains("worker 1 did not take part in the search"),
            "{e}"
        );
        // a replica whose memory is not where the leader's is
        let e = err(round(3, n, 7, Some(2), |_, _, _| {}), 7);
        assert!(
            e.contains("worker 2's memory (offered, stored, bytes)"),
            "{e}"
        );
        let mut r = round(2, n, 7, None, |_, _, _| {});
        r[1] = encode(&Reply::Idle);
        assert!(err(r, 7).contains("worker 1 did not take part"));
    }
}
