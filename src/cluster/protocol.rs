//! What the workers of a cluster say in each all-gather round, and the two sides of a step.
//!
//! Every round, worker 0 (the leader) contributes a [`Lead`] and every other worker a
//! [`Reply`]. Between steps the replicas wait with [`Reply::Idle`] for the leader's command
//! ([`Lead::Load`], [`Lead::Step`], [`Lead::Stop`]). A step is then, on every worker, the same
//! [`Model::step_replicated`]: one round where each worker contributes the outputs of its
//! logical shards (shard s is coded by worker s mod workers), and, when the leader has a judge
//! (the hybrid detector), one round where the leader contributes its judgement. A leader whose
//! step failed sends [`Lead::Abort`], which ends the step on every replica still in it.

use std::cell::RefCell;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use novad_models::l1::dictionary::LOGICAL_SHARDS;
use novad_models::l1::replicate::{CodingJob, Replication, ShardOutput};
use novad_models::l1::Model;
use novad_models::model::{EngineError, Judge, Judgement, Scored};

use super::net::Gather;

/// The leader's contribution to a round.
#[derive(Debug, Serialize, Deserialize)]
pub enum Lead {
    /// The committed model: replicas replace theirs with it.
    Load(Box<Model>),
    /// Step the model at `timestep` on these documents; `judged`: the leader has a judge, so
    /// the step has a judgement round.
    Step {
        timestep: u64,
        docs: Vec<String>,
        judged: bool,
    },
    /// The leader's shard outputs for the step's coding round.
    Shards(Vec<ShardOutput>),
    /// The leader's judgement (or the judge's error).
    Judgement(Result<Judgement, String>),
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
}

impl Lead {
    /// A short name of the command, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Lead::Load(_) => "load",
            Lead::Step { .. } => "step",
            Lead::Shards(_) => "shard outputs",
            Lead::Judgement(_) => "judgement",
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
            Reply::Idle => {
                return Err(broken(format!(
                    "worker {} did not take part in the step",
                    i + 1
                )))
            }
        }
    }
    Ok(all)
}

/// A replica's side of a step: codes its shards, contributes them, returns everyone's.
pub(super) struct ReplicaSide {
    pub gather: Rc<RefCell<Gather>>,
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
}

/// A replica's judge: the leader's judgement, received in the step's judgement round.
pub(super) struct RemoteJudge {
    pub gather: Rc<RefCell<Gather>>,
}

impl Judge for RemoteJudge {
    fn judge(&mut self, _batch: &Scored) -> Result<Judgement, EngineError> {
        let round = self.gather.borrow_mut().round(encode(&Reply::Idle));
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
}
