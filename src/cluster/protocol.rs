//! What the workers of a cluster say in each all-gather round, and what both sides of a step
//! share (the leader's side is [`super::sides`], a replica's [`super::replica`]).
//!
//! Every round, worker 0 (the leader) contributes a [`Lead`] and every other worker a
//! [`Reply`]. Between steps the replicas wait with [`Reply::Idle`] for the leader's command
//! ([`Lead::Load`], [`Lead::Step`], [`Lead::Stop`]). A step is then, on every worker, the same
//! [`Model::step_replicated`], in these rounds:
//! - terms: each worker contributes the documents of the logical shards it tokenised and
//!   resolved against the vocabulary ([`term_deal`](super::deal::term_deal));
//! - with a judge (the hybrid detector), a search round, where each worker contributes the
//!   nearest remembered documents of the documents of its logical shards, found in its copy
//!   of the whole memory ([`search_round`]; the shards dealt by [`my_shards`] with the
//!   step's burdens, which [`Lead::Step`] carries); the workers code while they wait for it;
//! - coding: each worker contributes the codes of the shards it coded ([`coding_deal`](super::deal::coding_deal); both
//!   deals by predicted cost, the same hands on every worker, evened out by work stealing, see
//!   [`super::pool`]); a replica adds its load of the cycle before ([`Reply::Shards`],
//!   [`super::balance`]);
//! - with a judge, the leader's judgement;
//! - when the step has topics or refreshes atoms, the topics and the refresh plan the last
//!   worker ([`finder`]) worked out after the update.
//! - when the step updates the dictionary, the OIADMM update shared by logical shards of Â's
//!   rows: each worker computes the gradient rows of its hand ([`row_deal`](super::deal::row_deal), with the
//!   step's burdens); rounds of
//!   per-column sums ([`Lead::Sums`], added up on every worker) find the projection's column
//!   thresholds, a few rounds of k pairs each; each worker projects its rows and contributes
//!   them ([`Lead::Rows`]), and every worker writes Â_{t+1} from all of them; the next step's
//!   [`Lead::Step`] follows at once when the leader read the next file meanwhile;
//!
//! A leader whose step failed, or that abandons a step it sent ahead, sends [`Lead::Abort`],
//! which ends the step on every replica still in it.

use std::cell::RefCell;

use serde::{Deserialize, Serialize};

use novad_models::l1::dictionary::{add_sums, shard_docs, ColumnSum, ProjectedRows};
use novad_models::l1::replicate::{Found, MemorySearch, Query, ShardOutput, ShardTerms, TermJob};
use novad_models::l1::Model;
use novad_models::memory::{Floor, Neighbour, Share};
use novad_models::model::{EngineError, Judgement};
use novad_models::text::Vocabulary;

use super::balance::Load;
use super::deal::{my_shards, Burdens};
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
    /// `lead_terms`: how much of the tokenising the leader does (see [`term_deal`](super::deal::term_deal));
    /// `burdens`: each worker's measured other work (beyond the fixed parts), for the hands of the search and the rows.
    Step {
        timestep: u64,
        docs: Vec<String>,
        times: Vec<i64>,
        judged: bool,
        lead_terms: LeadTerms,
        burdens: Burdens,
    },
    /// The leader's shards' resolved terms for the step's terms round, and the mark of the
    /// vocabulary they were resolved against.
    Terms {
        vocab: [u64; 2],
        outs: Vec<ShardTerms>,
    },
    /// The leader's shard outputs for the step's coding round.
    Shards(Vec<ShardOutput>),
    /// The leader's part of the search round (see [`search_round`]): its memory's mark, the
    /// logical shards its memory indexes (a mask) and its matches.
    Nearest {
        memory: [u64; 3],
        shards: u64,
        near: Vec<Option<Neighbour>>,
    },
    /// The leader's judgement (or the judge's error).
    Judgement(Result<Judgement, String>),
    /// The leader's part of a step's found round: what it worked out, when it is the finder.
    Found(Option<Found>),
    /// The leader's part of a round of the update's column sums ([`Thresholds`]).
    Sums(Vec<ColumnSum>),
    /// The leader's projected rows of the step's dictionary update (its hand of [`row_deal`](super::deal::row_deal)).
    Rows(Vec<ProjectedRows>),
    /// The leader's step failed, or the daemon does not take the step sent ahead: replicas
    /// still in it drop it.
    Abort,
    /// The cluster stops (with the reason when it stops on an error).
    Stop(Option<String>),
}

/// How much of a step's tokenising the leader does, beside its other work meanwhile (see
/// [`term_deal`](super::deal::term_deal)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeadTerms {
    /// A worker's share: it has nothing else to do meanwhile.
    Share,
    /// Less: it writes the last timestep's records and commit meanwhile, counted as half of
    /// the batch's bytes (a quarter of the batch with one replica).
    Less,
    /// Little: the batch went out at the end of the step before, and the leader finishes
    /// that step while the replicas tokenise, counted as three quarters of the batch's bytes
    /// (an eighth of the batch with one replica). When the leader also has the last
    /// timestep's records to write or the next file to read, its part of the terms round goes
    /// out empty before that work and the replicas take its hand too
    /// ([`super::pool::begin_terms_aside`]).
    Little,
}

/// A replica's contribution to a round.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Idle,
    /// Its shards' resolved terms for the step of the model at `timestep`, resolved against a
    /// vocabulary with this mark.
    Terms {
        timestep: u64,
        vocab: [u64; 2],
        outs: Vec<ShardTerms>,
    },
    /// The outputs of its shards for the step of the model at `timestep`, and its load of
    /// the cycle before this step, when it measured one.
    Shards {
        timestep: u64,
        outs: Vec<ShardOutput>,
        load: Option<Load>,
    },
    /// Its part of the search round of the step of the model at `timestep`, from a memory
    /// with this mark indexing these logical shards.
    Nearest {
        timestep: u64,
        memory: [u64; 3],
        shards: u64,
        near: Vec<Option<Neighbour>>,
    },
    /// Its part of a round of the update's column sums of the step of the model at
    /// `timestep`.
    Sums {
        timestep: u64,
        sums: Vec<ColumnSum>,
    },
    /// Its projected rows of the dictionary update of the step of the model at `timestep`.
    Rows {
        timestep: u64,
        rows: Vec<ProjectedRows>,
    },
    /// Its part of the found round of the step of the model at `timestep`: what it worked
    /// out, when it is the finder.
    Found {
        timestep: u64,
        found: Option<Found>,
    },
}

impl Lead {
    /// A short name of the command, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Lead::Load { .. } => "load",
            Lead::Step { .. } => "step",
            Lead::Terms { .. } => "terms",
            Lead::Shards(_) => "shard outputs",
            Lead::Nearest { .. } => "nearest documents",
            Lead::Judgement(_) => "judgement",
            Lead::Found(_) => "topics and refresh plan",
            Lead::Sums(_) => "column sums",
            Lead::Rows(_) => "dictionary rows",
            Lead::Abort => "abort",
            Lead::Stop(_) => "stop",
        }
    }
}

pub(super) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).expect("cluster messages serialise")
}

pub(super) fn broken(what: String) -> EngineError {
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

/// What worker `index` contributes to a round of the update's column sums of the step at
/// `timestep`.
pub(super) fn sums_message(index: usize, timestep: u64, sums: Vec<ColumnSum>) -> Vec<u8> {
    if index == 0 {
        encode(&Lead::Sums(sums))
    } else {
        encode(&Reply::Sums { timestep, sums })
    }
}

/// Every worker's column sums of a completed round added up, checked to come from replicas
/// at `timestep`, with as many columns as the leader's.
pub(super) fn total_sums(round: &[Vec<u8>], timestep: u64) -> Result<Vec<ColumnSum>, EngineError> {
    let (lead, replies) = decode(round)?;
    let each = gather_parts(
        lead,
        replies,
        timestep,
        "column sums",
        |l| match l {
            Lead::Sums(s) => Ok(vec![s]),
            other => Err(other),
        },
        |r| match r {
            Reply::Sums { timestep, sums } => Some((timestep, vec![sums])),
            _ => None,
        },
    )?;
    let (first, rest) = each
        .split_first()
        .ok_or_else(|| broken("a round of column sums without the leader".into()))?;
    let mut total = first.clone();
    for (i, s) in rest.iter().enumerate() {
        add_sums(&mut total, s).map_err(|e| broken(format!("worker {}: {e}", i + 1)))?;
    }
    Ok(total)
}

/// What worker `index` contributes to the rows round of the step at `timestep`.
pub(super) fn rows_message(index: usize, timestep: u64, rows: Vec<ProjectedRows>) -> Vec<u8> {
    if index == 0 {
        encode(&Lead::Rows(rows))
    } else {
        encode(&Reply::Rows { timestep, rows })
    }
}

/// Every worker's projected rows of a completed rows round, checked to come from replicas at
/// `timestep` (the update checks that they cover every shard once).
pub(super) fn gather_rows(
    round: &[Vec<u8>],
    timestep: u64,
) -> Result<Vec<ProjectedRows>, EngineError> {
    let (lead, replies) = decode(round)?;
    gather_parts(
        lead,
        replies,
        timestep,
        "dictionary rows",
        |l| match l {
            Lead::Rows(r) => Ok(r),
            other => Err(other),
        },
        |r| match r {
            Reply::Rows { timestep, rows } => Some((timestep, rows)),
            _ => None,
        },
    )
}

/// What worker `index` contributes to the coding round of the step at `timestep`: the
/// outputs of the shards it coded.
pub(super) fn shards_message(
    index: usize,
    timestep: u64,
    outs: Vec<ShardOutput>,
    load: Option<Load>,
) -> Vec<u8> {
    if index == 0 {
        encode(&Lead::Shards(outs))
    } else {
        encode(&Reply::Shards {
            timestep,
            outs,
            load,
        })
    }
}

/// Every worker's parts of a round of per-shard parts (`what`, for errors), the leader's
/// taken by `lead_part` and the replicas' by `reply_part` (with their model's timestep),
/// checked to come from replicas at `timestep`.
fn gather_parts<T>(
    lead: Lead,
    replies: Vec<Reply>,
    timestep: u64,
    what: &str,
    lead_part: impl Fn(Lead) -> Result<Vec<T>, Lead>,
    reply_part: impl Fn(Reply) -> Option<(u64, Vec<T>)>,
) -> Result<Vec<T>, EngineError> {
    let mut all = match lead_part(lead) {
        Ok(o) => o,
        Err(Lead::Abort) => return Err(broken("the leader abandoned the step".into())),
        Err(other) => return Err(broken(format!("expected {what}, got {}", other.name()))),
    };
    for (i, r) in replies.into_iter().enumerate() {
        match reply_part(r) {
            Some((t, outs)) if t == timestep => all.extend(outs),
            Some((t, _)) => {
                return Err(broken(format!(
                    "worker {} holds the model at timestep {t}, the step is at {timestep}",
                    i + 1
                )))
            }
            None => {
                return Err(broken(format!(
                    "worker {} did not take part in the step's {what}",
                    i + 1
                )))
            }
        }
    }
    Ok(all)
}

/// Every shard output of a coding round, checked to come from replicas at `timestep`.
pub(super) fn gather_outputs(
    lead: Lead,
    replies: Vec<Reply>,
    timestep: u64,
) -> Result<Vec<ShardOutput>, EngineError> {
    gather_parts(
        lead,
        replies,
        timestep,
        "shard outputs",
        |l| match l {
            Lead::Shards(o) => Ok(o),
            other => Err(other),
        },
        |r| match r {
            Reply::Shards { timestep, outs, .. } => Some((timestep, outs)),
            _ => None,
        },
    )
}

/// What worker `index` contributes to the terms round of the step at `timestep`, with a
/// vocabulary of mark `vocab`: the resolved terms of the shards it tokenised.
pub(super) fn terms_message(
    index: usize,
    timestep: u64,
    vocab: [u64; 2],
    outs: Vec<ShardTerms>,
) -> Vec<u8> {
    if index == 0 {
        encode(&Lead::Terms { vocab, outs })
    } else {
        encode(&Reply::Terms {
            timestep,
            vocab,
            outs,
        })
    }
}

/// The mark of the vocabulary a step's terms are resolved against: (terms, documents seen).
pub(super) fn vocab_mark(job: &TermJob<'_>) -> [u64; 2] {
    mark_of(job.vocab)
}

/// The mark of `vocab`: (terms, documents seen).
pub(super) fn mark_of(vocab: &Vocabulary) -> [u64; 2] {
    [vocab.len() as u64, vocab.docs_seen()]
}

/// Every shard's resolved terms of a terms round, checked to come from replicas at
/// `timestep` whose vocabulary has the leader's mark.
pub(super) fn gather_terms(
    lead: Lead,
    replies: Vec<Reply>,
    timestep: u64,
) -> Result<Vec<ShardTerms>, EngineError> {
    if let Lead::Terms { vocab: mark, .. } = &lead {
        for (i, r) in replies.iter().enumerate() {
            if let Reply::Terms {
                timestep: t, vocab, ..
            } = r
            {
                if *t == timestep && vocab != mark {
                    return Err(broken(format!(
                        "worker {}'s vocabulary (terms, documents seen) is at {vocab:?}, the \
                         leader's at {mark:?}",
                        i + 1
                    )));
                }
            }
        }
    }
    gather_parts(
        lead,
        replies,
        timestep,
        "terms",
        |l| match l {
            Lead::Terms { outs, .. } => Ok(outs),
            other => Err(other),
        },
        |r| match r {
            Reply::Terms { timestep, outs, .. } => Some((timestep, outs)),
            _ => None,
        },
    )
}

/// One worker's part of a search round.
#[derive(Debug)]
struct SearchPart {
    /// The logical shards its memory indexes (bit s: shard s).
    shards: u64,
    near: Vec<Option<Neighbour>>,
}

/// Every worker's part of the search round of the step at `timestep`, by worker; fails
/// (naming the worker) unless every worker took part in that round from a memory at the
/// leader's mark.
fn search_parts(payloads: &[Vec<u8>], timestep: u64) -> Result<Vec<SearchPart>, EngineError> {
    let (lead, replies) = decode(payloads)?;
    let (memory, first) = match lead {
        Lead::Nearest {
            memory,
            shards,
            near,
        } => (memory, SearchPart { shards, near }),
        Lead::Abort => return Err(broken("the leader abandoned the step".into())),
        other => {
            return Err(broken(format!(
                "expected nearest documents of the search round, got {}",
                other.name()
            )))
        }
    };
    let mut parts = vec![first];
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
                parts.push(SearchPart { shards, near })
            }
            _ => {
                return Err(broken(format!(
                    "worker {} did not take part in the search round at timestep {timestep}",
                    i + 1
                )))
            }
        }
    }
    Ok(parts)
}

/// The batch positions (of `n`) of the documents of worker `index`'s logical shards, shard by
/// shard: the documents whose nearest match it looks for (dealt with the step's `burdens`).
fn own_positions(index: usize, peers: usize, n: usize, burdens: &Burdens) -> Vec<usize> {
    my_shards(index, peers, burdens)
        .into_iter()
        .flat_map(|s| shard_docs(n, s))
        .collect()
}

/// Each document's nearest match in the whole memory, in batch order, from the part of the
/// worker owning the document's logical shard. Fails unless every worker's memory indexes
/// every logical shard and each answered for exactly its own documents.
fn owners_best(
    parts: &[SearchPart],
    n: usize,
    burdens: &Burdens,
) -> Result<Vec<Option<Neighbour>>, EngineError> {
    let peers = parts.len();
    let all = Share::all().mask();
    if let Some(w) = parts.iter().position(|p| p.shards != all) {
        let missing = (!parts[w].shards & all).trailing_zeros();
        return Err(broken(format!(
            "worker {w}'s memory does not index memory shard {missing}: it cannot search the \
             whole memory"
        )));
    }
    let mut best = vec![None; n];
    for (w, p) in parts.iter().enumerate() {
        let at = own_positions(w, peers, n, burdens);
        check_count(w, p, at.len())?;
        for (j, x) in at.into_iter().zip(&p.near) {
            best[j] = *x;
        }
    }
    Ok(best)
}

fn check_count(worker: usize, p: &SearchPart, want: usize) -> Result<(), EngineError> {
    if p.near.len() != want {
        return Err(broken(format!(
            "worker {worker} found {} nearest documents for {want} documents",
            p.near.len()
        )));
    }
    Ok(())
}

/// What worker `index` sends in the search round of the step at `timestep`, from a memory
/// with the mark `memory`.
fn search_message(index: usize, timestep: u64, memory: [u64; 3], part: SearchPart) -> Vec<u8> {
    let SearchPart { shards, near } = part;
    if index == 0 {
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
}

/// A step's search, on any worker (whose memory has the mark `memory` and indexes the
/// logical shards of the mask `shards`: all of them): the nearest remembered document of each
/// of the batch's `n` documents, the whole memory's answer bit for bit. Every worker holds the
/// whole memory and searches it for the documents of its logical shards, one round; the
/// answers are gathered by batch position. (Searching shares of the memory instead costs more
/// in all the more workers share it: a document's match must then be looked for in every
/// share, see docs/RESULTS.md.)
///
/// The documents are dealt with the step's `burdens` ([`my_shards`]). `fill` runs while this
/// worker waits for the round (it returns once the round is complete, or when it has nothing
/// more to do).
pub(super) fn search_round(
    gather: &RefCell<Gather>,
    timestep: u64,
    query: &Query<'_>,
    burdens: &Burdens,
    fill: &mut dyn FnMut() -> Result<(), EngineError>,
) -> Result<Vec<Option<Neighbour>>, EngineError> {
    let Query {
        n,
        memory,
        shards,
        ref search,
    } = *query;
    let (index, peers) = {
        let g = gather.borrow();
        (g.index(), g.peers())
    };
    let own: Vec<(usize, Option<Floor>)> = own_positions(index, peers, n, burdens)
        .into_iter()
        .map(|j| (j, None))
        .collect();
    let part = SearchPart {
        shards,
        near: search(&own),
    };
    let payloads = exchange(gather, search_message(index, timestep, memory, part), fill)?;
    owners_best(&search_parts(&payloads, timestep)?, n, burdens)
}

/// A round of `gather` with `mine` as this worker's payload, `fill` running while it waits.
/// Rounds still open before it (a replica's terms round, when it worked out every shard
/// itself, [`super::pool::tokenise`]) are finished first, their payloads dropped; when the
/// leader abandoned the step there instead ([`Lead::Abort`]), this fails and leaves this
/// round open: it holds the leader's next command.
fn exchange(
    gather: &RefCell<Gather>,
    mine: Vec<u8>,
    fill: &mut dyn FnMut() -> Result<(), EngineError>,
) -> Result<Vec<Vec<u8>>, EngineError> {
    gather.borrow_mut().begin(mine);
    loop {
        fill()?;
        let mut g = gather.borrow_mut();
        let last = g.open() == 1;
        let payloads = g.finish();
        if last {
            return Ok(payloads);
        }
        if abandoned(&payloads) {
            return Err(broken("the leader abandoned the step".into()));
        }
    }
}

/// True when the leader's payload of a completed round is [`Lead::Abort`]: it abandoned the
/// step there. Compared as bytes (a unit variant encodes as its index alone), so a large
/// payload — a batch's texts — is not decoded to be dropped.
pub(super) fn abandoned(payloads: &[Vec<u8>]) -> bool {
    payloads.first().is_some_and(|b| *b == encode(&Lead::Abort))
}

/// The search of [`Replication::nearest`](novad_models::l1::replicate::Replication::nearest)'s arguments as a [`Query`].
pub(super) fn query_of<'a>(
    n: usize,
    memory: [u64; 3],
    shards: u64,
    search: &'a MemorySearch<'a>,
) -> Query<'a> {
    Query {
        n,
        memory,
        shards,
        search: Box::new(search),
    }
}

/// The worker that works out a step's [`Found`] (topics, refresh plan): the last one (the
/// leader has the most other work).
pub(super) fn finder(peers: usize) -> usize {
    peers - 1
}

/// True when the worker of `g` works out the step's [`Found`].
pub(super) fn finds(g: &Gather) -> bool {
    g.index() == finder(g.peers())
}

/// Finish a step's found round on any worker: `mine` when this worker is the finder, else the
/// finder's (checked either way, so a leader that gave up the step is noticed).
pub(super) fn finish_found(
    g: &mut Gather,
    mine: Option<Found>,
    timestep: u64,
) -> Result<Found, EngineError> {
    let round = g.finish();
    let theirs = gathered_found(&round, timestep)?;
    Ok(mine.unwrap_or(theirs))
}

/// The finder's contribution to a completed found round, checked to come from a replica at
/// `timestep`.
pub(super) fn gathered_found(round: &[Vec<u8>], timestep: u64) -> Result<Found, EngineError> {
    let (lead, replies) = decode(round)?;
    let finder = finder(replies.len() + 1);
    let found = match lead {
        Lead::Found(f) if finder == 0 => f,
        Lead::Found(_) => match replies.into_iter().nth(finder - 1) {
            Some(Reply::Found { timestep: t, found }) if t == timestep => found,
            Some(Reply::Found { timestep: t, .. }) => {
                return Err(broken(format!(
                    "worker {finder} holds the model at timestep {t}, the step is at {timestep}"
                )))
            }
            _ => {
                return Err(broken(format!(
                    "worker {finder} did not take part in the found round"
                )))
            }
        },
        Lead::Abort => return Err(broken("the leader abandoned the step".into())),
        other => {
            return Err(broken(format!(
                "expected topics and a refresh plan, got {}",
                other.name()
            )))
        }
    };
    found.ok_or_else(|| broken(format!("worker {finder} offered nothing")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::deal::BURDEN_UNIT;
    use novad_models::memory::testing::{batch, next};
    use novad_models::memory::{DocMemory, MemoryParams, TermVector};

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
        m.insert(&batch(&docs));
        (m, vectors(130, 2))
    }

    /// A memory's mark that is not the leader's.
    const STALE: [u64; 3] = [800, 700, 1 << 20];

    /// A step's search by `peers` workers, each holding the whole memory of [`memory`], for
    /// the first `n` queries, as [`search_round`] runs it but without a network:
    /// `edit(worker, part)` changes a worker's part first; replicas report `timestep` (the
    /// step is at 7); worker `stale`, if any, another memory mark.
    fn search(
        peers: usize,
        n: usize,
        timestep: u64,
        stale: Option<usize>,
        edit: impl Fn(usize, &mut SearchPart),
    ) -> Result<Vec<Option<Neighbour>>, EngineError> {
        search_dealt(&Burdens(None), peers, n, timestep, stale, edit)
    }

    /// [`search`] with the documents dealt by `burdens`.
    fn search_dealt(
        burdens: &Burdens,
        peers: usize,
        n: usize,
        timestep: u64,
        stale: Option<usize>,
        edit: impl Fn(usize, &mut SearchPart),
    ) -> Result<Vec<Option<Neighbour>>, EngineError> {
        let (m, qs) = memory();
        let round: Vec<Vec<u8>> = (0..peers)
            .map(|i| {
                let asked: Vec<&TermVector> = own_positions(i, peers, n, burdens)
                    .iter()
                    .map(|&j| &qs[j])
                    .collect();
                let mut part = SearchPart {
                    shards: m.share().mask(),
                    near: m.nearest_batch(&asked),
                };
                edit(i, &mut part);
                let mark = if stale == Some(i) { STALE } else { m.mark() };
                search_message(i, timestep, mark, part)
            })
            .collect();
        owners_best(&search_parts(&round, 7)?, n, burdens)
    }

    /// Measured burdens of 3 workers: the second's a quarter of the dealt work beyond the
    /// fixed parts (the leader's half).
    fn measured() -> Burdens {
        Burdens(Some(vec![0, BURDEN_UNIT / 4, 0]))
    }

    #[test]
    fn one_search_round_over_the_whole_memory_gives_its_answer_once_per_document() {
        let (m, qs) = memory();
        for burdens in [Burdens(None), measured()] {
            for peers in 1..=3 {
                for n in [0, 5, 64, 130] {
                    let qs: Vec<&TermVector> = qs.iter().take(n).collect();
                    let got = search_dealt(&burdens, peers, n, 7, None, |_, _| {}).unwrap();
                    assert_eq!(got, m.nearest_batch(&qs), "{peers} workers, {n} documents");
                }
            }
        }
        // every position is asked by exactly one worker; the leader, with other work, asks
        // for fewer than any replica; with measured burdens, the busier the fewer
        for burdens in [Burdens(None), measured()] {
            for peers in 1..=5 {
                let mut seen = vec![0; 130];
                for i in 0..peers {
                    for j in own_positions(i, peers, 130, &burdens) {
                        seen[j] += 1;
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "{peers}: {seen:?}");
            }
        }
        let none = Burdens(None);
        for peers in 1..=5 {
            let lead = my_shards(0, peers, &none).len();
            for i in 1..peers {
                assert!(
                    lead < my_shards(i, peers, &none).len(),
                    "{peers}: worker {i}"
                );
            }
        }
        assert!(my_shards(5, 5, &none).is_empty());
        let hand = |w| my_shards(w, 3, &measured()).len();
        assert!(
            hand(0) < hand(1) && hand(1) < hand(2),
            "{:?}",
            (hand(0), hand(1), hand(2))
        );
    }

    /// Only the leader's abort marks a round abandoned: not another command, not a replica's
    /// payload that happens to hold the same bytes, not an empty round.
    #[test]
    fn a_round_is_abandoned_only_by_the_leaders_abort() {
        let abort = encode(&Lead::Abort);
        assert!(abandoned(&[abort.clone(), encode(&Reply::Idle)]));
        assert!(!abandoned(&[encode(&Lead::Stop(None)), abort.clone()]));
        assert!(!abandoned(&[encode(&Lead::Terms {
            vocab: [3, 4],
            outs: Vec::new(),
        })]));
        assert!(!abandoned(&[]));
    }

    /// A terms round takes every worker's shards; a replica at another timestep, with
    /// another vocabulary or not in the round is named, and the leader's abort is told.
    #[test]
    fn a_terms_round_names_a_stale_or_absent_worker() {
        let part = |shard: u32| ShardTerms {
            shard,
            docs: vec![vec![]],
        };
        let lead = || Lead::Terms {
            vocab: [10, 4],
            outs: vec![part(0)],
        };
        let reply = |timestep, vocab| Reply::Terms {
            timestep,
            vocab,
            outs: vec![part(1)],
        };
        let ok = gather_terms(lead(), vec![reply(5, [10, 4])], 5).unwrap();
        assert_eq!(ok, vec![part(0), part(1)]);
        let err = |lead: Lead, r: Reply| gather_terms(lead, vec![r], 5).unwrap_err().to_string();
        let e = err(lead(), reply(5, [11, 4]));
        assert!(
            e.contains("worker 1's vocabulary") && e.contains("[11, 4]"),
            "{e}"
        );
        let e = err(lead(), reply(4, [10, 4]));
        assert!(e.contains("worker 1 holds the model at timestep 4"), "{e}");
        let e = err(lead(), Reply::Idle);
        assert!(e.contains("did not take part in the step's terms"), "{e}");
        let e = err(Lead::Abort, reply(5, [10, 4]));
        assert!(e.contains("abandoned"), "{e}");
    }

    #[test]
    fn a_partial_short_or_stale_part_is_refused() {
        let n = 130;
        let err = |r: Result<Vec<Option<Neighbour>>, EngineError>| r.unwrap_err().to_string();
        // worker 1's memory leaves its memory shard 3 out
        let e = err(search(2, n, 7, None, |i, p| {
            if i == 1 {
                p.shards &= !(1 << 3)
            }
        }));
        assert!(
            e.contains("worker 1's memory does not index memory shard 3"),
            "{e}"
        );
        // a part with a document too few
        let e = err(search(2, n, 7, None, |i, p| {
            if i == 1 {
                p.near.pop();
            }
        }));
        assert!(e.contains("worker 1 found"), "{e}");
        // a replica at another timestep
        let e = err(search(3, n, 6, None, |_, _| {}));
        assert!(
            e.contains("worker 1 did not take part in the search round"),
            "{e}"
        );
        // a replica whose memory is not where the leader's is
        let e = err(search(3, n, 7, Some(2), |_, _| {}));
        assert!(
            e.contains("worker 2's memory (offered, stored, bytes)"),
            "{e}"
        );
        // a replica that sends something else
        let (m, _) = memory();
        let part = SearchPart {
            shards: m.share().mask(),
            near: vec![None; own_positions(0, 2, n, &Burdens(None)).len()],
        };
        let r = vec![search_message(0, 7, m.mark(), part), encode(&Reply::Idle)];
        let e = search_parts(&r, 7).unwrap_err().to_string();
        assert!(e.contains("worker 1 did not take part"), "{e}");
    }

    /// The update's rounds: column sums are added up over the workers; a replica with
    /// another number of columns, at another timestep or sending something else is refused,
    /// named; the rows of every worker are gathered.
    #[test]
    fn the_updates_rounds_add_the_sums_and_name_a_stray_worker() {
        use novad_models::l1::dictionary::ProjectedRows;
        let sums = |v: &[(i128, u64)]| -> Vec<ColumnSum> {
            v.iter()
                .map(|&(sum, count)| ColumnSum { sum, count })
                .collect()
        };
        let round = |parts: Vec<Vec<u8>>| parts;
        let good = round(vec![
            sums_message(0, 5, sums(&[(3, 1), (0, 0)])),
            sums_message(1, 5, sums(&[(4, 2), (7, 1)])),
            sums_message(2, 5, sums(&[(0, 0), (1, 1)])),
        ]);
        assert_eq!(total_sums(&good, 5).unwrap(), sums(&[(7, 3), (8, 2)]));
        let short = round(vec![
            sums_message(0, 5, sums(&[(3, 1), (0, 0)])),
            sums_message(1, 5, sums(&[(4, 2)])),
        ]);
        let e = total_sums(&short, 5).unwrap_err().to_string();
        assert!(e.contains("worker 1") && e.contains("1 column sums"), "{e}");
        let stale = round(vec![
            sums_message(0, 5, sums(&[(3, 1)])),
            sums_message(1, 4, sums(&[(4, 2)])),
        ]);
        let e = total_sums(&stale, 5).unwrap_err().to_string();
        assert!(e.contains("worker 1 holds the model at timestep 4"), "{e}");
        let other = round(vec![
            sums_message(0, 5, sums(&[(3, 1)])),
            encode(&Reply::Idle),
        ]);
        let e = total_sums(&other, 5).unwrap_err().to_string();
        assert!(e.contains("worker 1 did not take part"), "{e}");
        let rows = |shard: u32| ProjectedRows {
            shard,
            lens: vec![1],
            entries: vec![(0, 0.5)],
        };
        let both = round(vec![
            rows_message(0, 5, vec![rows(0), rows(2)]),
            rows_message(1, 5, vec![rows(1)]),
        ]);
        let got: Vec<u32> = gather_rows(&both, 5)
            .unwrap()
            .iter()
            .map(|r| r.shard)
            .collect();
        assert_eq!(got, [0, 2, 1]);
    }
}
