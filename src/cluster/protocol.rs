//! What the workers of a cluster say in each all-gather round, and the two sides of a step.
//!
//! Every round, worker 0 (the leader) contributes a [`Lead`] and every other worker a
//! [`Reply`]. Between steps the replicas wait with [`Reply::Idle`] for the leader's command
//! ([`Lead::Load`], [`Lead::Step`], [`Lead::Stop`]). A step is then, on every worker, the same
//! [`Model::step_replicated`]: one round where each worker contributes the outputs of its
//! logical shards (shard s is coded by worker s mod workers), and, when the leader has a judge
//! (the hybrid detector), one round where the leader contributes its judgement, and, when the
//! step has topics, one round where the last worker ([`topics_finder`]) contributes the topics
//! it found while the others ran the update (begun before the update, finished after it, so
//! that nobody waits for it). A leader whose
//! step failed sends [`Lead::Abort`], which ends the step on every replica still in it.

use std::cell::RefCell;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use novad_models::engine::memory_batch;
use novad_models::l1::dictionary::{by_position, per_shard, ShardGap, LOGICAL_SHARDS};
use novad_models::l1::replicate::{CodingJob, Replication, ShardOutput};
use novad_models::l1::Model;
use novad_models::memory::{DocMemory, Neighbour, TermVector};
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
    /// The leader's part of the search round: its memory's mark and the nearest remembered
    /// document of each document of its logical shards.
    Nearest {
        memory: [u64; 3],
        parts: Vec<NearestPart>,
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
    /// with this mark.
    Nearest {
        timestep: u64,
        memory: [u64; 3],
        parts: Vec<NearestPart>,
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

/// One logical shard's part of the search round: the nearest remembered document of each of
/// its documents, in batch order.
#[derive(Debug, Serialize, Deserialize)]
pub struct NearestPart {
    pub shard: u32,
    pub near: Vec<Option<Neighbour>>,
}

/// This worker's part of the search round for a batch of `n` documents.
fn nearest_parts(
    index: usize,
    peers: usize,
    n: usize,
    search: &dyn Fn(&[usize]) -> Vec<Option<Neighbour>>,
) -> Vec<NearestPart> {
    per_shard(n, &my_shards(index, peers), search)
        .into_iter()
        .map(|(s, near)| NearestPart {
            shard: s as u32,
            near,
        })
        .collect()
}

/// The nearest remembered document of every document of the batch, in batch order, from a
/// completed search round; fails (naming the worker or shard) unless every logical shard
/// came exactly once, from a replica at `timestep`, with one entry per document.
fn gathered_nearest(
    round: &[Vec<u8>],
    n: usize,
    timestep: u64,
) -> Result<Vec<Option<Neighbour>>, EngineError> {
    let (lead, replies) = decode(round)?;
    let (memory, mut parts) = match lead {
        Lead::Nearest { memory, parts } => (memory, parts),
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
                parts: p,
            } if t == timestep => {
                if mark != memory {
                    return Err(broken(format!(
                        "worker {}'s memory (offered, stored, bytes) is at {mark:?}, the \
                         leader's at {memory:?}",
                        i + 1
                    )));
                }
                parts.extend(p)
            }
            _ => {
                return Err(broken(format!(
                    "worker {} did not take part in the search at timestep {timestep}",
                    i + 1
                )))
            }
        }
    }
    let parts = parts.into_iter().map(|p| (p.shard as usize, p.near));
    by_position(n, parts).map_err(|gap| match gap {
        ShardGap::Unknown(s) | ShardGap::Twice(s) => {
            broken(format!("logical shard {s}: unknown or given twice"))
        }
        ShardGap::Missing(s) => broken(format!(
            "no search result for documents of logical shard {s}"
        )),
        ShardGap::Count(s) => broken(format!("logical shard {s}: wrong number of documents")),
    })
}

/// A step's search round, on any worker: contribute this worker's part (`mine` wraps it as
/// its message), return everyone's.
pub(super) fn search_round(
    gather: &RefCell<Gather>,
    n: usize,
    timestep: u64,
    search: &dyn Fn(&[usize]) -> Vec<Option<Neighbour>>,
    mine: impl FnOnce(Vec<NearestPart>) -> Vec<u8>,
) -> Result<Vec<Option<Neighbour>>, EngineError> {
    let mut g = gather.borrow_mut();
    let parts = nearest_parts(g.index(), g.peers(), n, search);
    let round = g.round(mine(parts));
    gathered_nearest(&round, n, timestep)
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
        search: &dyn Fn(&[usize]) -> Vec<Option<Neighbour>>,
    ) -> Result<Vec<Option<Neighbour>>, EngineError> {
        let timestep = self.timestep;
        search_round(&self.gather, n, timestep, search, |parts| {
            encode(&Reply::Nearest {
                timestep,
                memory,
                parts,
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
        let search = |at: &[usize]| {
            let qs: Vec<&TermVector> = at.iter().map(|&j| &vectors[j]).collect();
            memory.nearest_batch(&qs)
        };
        rep.nearest(vectors.len(), memory.mark(), &search)?;
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
    use novad_models::memory::DocRef;

    /// A stand-in for the memory's search: document j's neighbour is unique to j (none for
    /// every fifth document).
    fn search(at: &[usize]) -> Vec<Option<Neighbour>> {
        at.iter()
            .map(|&j| {
                (j % 5 != 4).then_some(Neighbour {
                    reference: DocRef {
                        timestep: 3,
                        seq: j as u32,
                        time: -(j as i64),
                    },
                    cosine: 1.0 / (j + 1) as f64,
                })
            })
            .collect()
    }

    /// The leader's memory mark, and another one.
    const MARK: [u64; 3] = [900, 700, 1 << 20];
    const STALE: [u64; 3] = [800, 700, 1 << 20];

    /// The round's payloads when every worker of `peers` contributes its part (`edit`
    /// changes worker i's parts first; worker `stale`, if any, searched another memory).
    fn round(
        peers: usize,
        n: usize,
        timestep: u64,
        stale: Option<usize>,
        edit: impl Fn(usize, &mut Vec<NearestPart>),
    ) -> Vec<Vec<u8>> {
        (0..peers)
            .map(|i| {
                let mut parts = nearest_parts(i, peers, n, &search);
                edit(i, &mut parts);
                if i == 0 {
                    encode(&Lead::Nearest {
                        memory: MARK,
                        parts,
                    })
                } else {
                    encode(&Reply::Nearest {
                        timestep,
                        memory: if stale == Some(i) { STALE } else { MARK },
                        parts,
                    })
                }
            })
            .collect()
    }

    #[test]
    fn the_search_shared_by_shards_assembles_to_the_search_of_every_document() {
        for peers in 1..=3 {
            for n in [0, 5, 64, 130] {
                let all: Vec<usize> = (0..n).collect();
                let got = gathered_nearest(&round(peers, n, 7, None, |_, _| {}), n, 7).unwrap();
                assert_eq!(got, search(&all), "{peers} workers, {n} documents");
            }
        }
    }

    #[test]
    fn a_missing_repeated_or_stale_part_is_refused() {
        let n = 130;
        let err = |r: Vec<Vec<u8>>, timestep: u64| {
            gathered_nearest(&r, n, timestep).unwrap_err().to_string()
        };
        // worker 1 left one shard out
        let e = err(
            round(2, n, 7, None, |i, p| {
                if i == 1 {
                    p.truncate(3)
                }
            }),
            7,
        );
        assert!(e.contains("no search result for document"), "{e}");
        // worker 1 sent the leader's shard 0 as well
        let e = err(
            round(2, n, 7, None, |i, p| {
                if i == 1 {
                    p.push(nearest_parts(0, 2, n, &search).remove(0))
                }
            }),
            7,
        );
        assert!(e.contains("logical shard 0: unknown or given twice"), "{e}");
        // a shard with a document too few
        let e = err(
            round(2, n, 7, None, |i, p| {
                if i == 0 {
                    p[1].near.pop();
                }
            }),
            7,
        );
        assert!(
            e.contains("logical shard 2: wrong number of documents"),
            "{e}"
        );
        // a replica at another timestep, or one that did not take part
        let e = err(round(3, n, 6, None, |_, _| {}), 7);
        assert!(
            e.contains("worker 1 did not take part in the search"),
            "{e}"
        );
        // a replica whose memory is not where the leader's is
        let e = err(round(3, n, 7, Some(2), |_, _| {}), 7);
        assert!(
            e.contains("worker 2's memory (offered, stored, bytes)"),
            "{e}"
        );
        let mut r = round(2, n, 7, None, |_, _| {});
        r[1] = encode(&Reply::Idle);
        assert!(err(r, 7).contains("worker 1 did not take part"));
    }
}
