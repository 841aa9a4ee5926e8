//! A step's work split by logical shards, so that several replicas of one model can share it:
//! tokenising (documents resolved against the vocabulary, [`TermJob`]) and coding.
//!
//! A step of the ℓ1 model ([`super::Model::step_replicated`]) hands its tokenising and its
//! coding to a [`Replication`]: a [`TermJob`] describes the batch's texts and the vocabulary,
//! a [`CodingJob`] the batch's vectors and the dictionary; the replication returns, for every
//! logical shard, its documents' resolved terms ([`ShardTerms`]) and codes ([`ShardOutput`]).
//! [`Local`] computes every shard here; a cluster computes each shard on one replica and
//! gathers them all. The OIADMM update is split by logical shards of Â's rows the same way:
//! each replica computes the gradient rows of its shards ([`Replication::gradient`]), the
//! column thresholds of the projection come from sums added up over the replicas
//! ([`Replication::reduce`]), and the projected rows are gathered
//! ([`Replication::gather_rows`]). The step's emerging topics and the plan of its atom
//! refresh, which do not need the updated Â, are worked out by one replica and offered to the
//! others ([`Found`], [`Replication::offer`],
//! [`Replication::found`]). Everything else in the step is a deterministic function of the
//! model, the batch and these outputs, so replicas that start from the same model and see the
//! same batch and outputs end with the same model.

use foldhash::{HashSet, HashSetExt};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::l1::coding::{code_document, CodingDict, CodingParams};
use crate::l1::dictionary::{
    by_position, per_shard, shard_of, ColumnSum, Dictionary, GradientRows, ProjectedRows,
    RefreshPlan, ShardGap, UpdateJob, LOGICAL_SHARDS,
};
use crate::memory::Neighbour;
use crate::memory::{Floor, Share};
use crate::model::{Code, EngineError, Judge, Judgement, Scored, Topic};
use crate::text::{SparseDoc, Term, Tokenizer, Vocabulary};

/// What the coding of one step needs: the batch's vectors and the dictionary they are coded
/// against.
pub struct CodingJob<'a> {
    /// The timestep of the model being stepped.
    pub timestep: u64,
    /// The batch's TF-IDF vectors, in batch order.
    pub vectors: &'a [SparseDoc],
    /// Â_t (m × k) as the step codes against it (after the vocabulary remap or the bootstrap).
    pub dict: &'a Dictionary,
    pub coding: &'a CodingParams,
}

/// One logical shard's share of a step: the codes of its documents, in batch order.
///
/// The OIADMM update is not shared out by documents: its per-document-shard parts would be up
/// to m × k each (nearly dense once Â has spread: 14–115 MB per timestep for 16 shards, 1,000
/// 20NG documents and k = 200, measured), against ~200 bytes of codes per document. It is
/// shared by shards of Â's rows instead, from the gathered codes ([`UpdateJob`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardOutput {
    pub shard: u32,
    pub codes: Vec<Code>,
}

impl<'a> CodingJob<'a> {
    /// The predicted cost of coding each logical shard, for dealing the shards out evenly
    /// ([`crate::l1::dictionary::deal`]): per document, the entries of Â in its terms' rows
    /// times √(its terms). Coding a document gathers those rows, screens the atoms and runs
    /// ADMM over what is left; on 20NG batches this predictor correlates with the measured
    /// time per document at r = 0.91 (the number of terms alone: 0.50). O(terms of the batch);
    /// an integer function of the job, so every worker predicts the same costs.
    pub fn shard_costs(&self) -> [u64; LOGICAL_SHARDS] {
        let m = self.dict.nrows();
        let mut costs = [0u64; LOGICAL_SHARDS];
        for (j, v) in self.vectors.iter().enumerate() {
            let rows: u64 = v
                .ids
                .iter()
                .filter(|&&id| (id as usize) < m)
                .map(|&id| self.dict.row(id as usize).len() as u64)
                .sum();
            // 8·√terms, in integers
            let root = (64 * v.ids.len() as u64).isqrt();
            let c = &mut costs[shard_of(j)];
            *c = c.saturating_add(rows.saturating_mul(root));
        }
        costs
    }

    /// Code the documents of `shards` (in parallel on the rayon pool; each code is a function
    /// of the job and its document only).
    pub fn run(&self, shards: &[usize]) -> Vec<ShardOutput> {
        self.run_on(&self.prepare(), shards)
    }

    /// The dictionary prepared for coding ([`CodingDict::new`], O(non-zeros of Â)), for
    /// several calls of [`Self::run_on`].
    pub fn prepare(&self) -> CodingDict<'a> {
        CodingDict::new(self.dict, self.coding.step)
    }

    /// [`Self::run`] over `cd`, the job's dictionary prepared by [`Self::prepare`].
    pub fn run_on(&self, cd: &CodingDict<'_>, shards: &[usize]) -> Vec<ShardOutput> {
        per_shard(self.vectors.len(), shards, |at| {
            at.par_iter()
                .map(|&j| code_document(cd, &self.vectors[j], self.coding))
                .collect()
        })
        .into_iter()
        .map(|(s, codes)| ShardOutput {
            shard: s as u32,
            codes,
        })
        .collect()
    }

    /// Put the outputs of every shard together: the codes in batch order. Fails (naming the
    /// shard) when a shard is missing or repeated, or an output does not fit the batch (wrong
    /// count, atom out of range, non-finite value).
    pub fn assemble(&self, outs: Vec<ShardOutput>) -> Result<Vec<Code>, EngineError> {
        let (m, k) = self.dict.dim();
        let bad = |s: usize, what: &str| {
            EngineError::Inconsistent(format!("logical shard {s} of the batch: {what}"))
        };
        if let Some(o) = outs
            .iter()
            .find(|o| !o.codes.iter().all(|c| code_fits(c, m, k)))
        {
            return Err(bad(o.shard as usize, "a code does not fit the dictionary"));
        }
        let parts = outs.into_iter().map(|o| (o.shard as usize, o.codes));
        by_position(self.vectors.len(), parts).map_err(|gap| gap_error(gap, "codes", bad))
    }
}

/// What the vocabulary step of a batch needs: its texts, the tokenizer, and the vocabulary
/// before it.
pub struct TermJob<'a> {
    /// The timestep of the model being stepped.
    pub timestep: u64,
    pub texts: &'a [&'a str],
    pub tokenizer: &'a Tokenizer,
    pub vocab: &'a Vocabulary,
}

/// One logical shard's documents tokenised and resolved against the vocabulary
/// ([`Vocabulary::resolve`]), in batch order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardTerms {
    pub shard: u32,
    pub docs: Vec<Vec<(Term, u32)>>,
}

impl TermJob<'_> {
    /// The cost of tokenising each logical shard, for dealing the shards out evenly
    /// ([`crate::l1::dictionary::deal`]): the bytes of its documents' texts (the tokenizer
    /// and the lookups are linear in them).
    pub fn shard_costs(&self) -> [u64; LOGICAL_SHARDS] {
        let mut costs = [0u64; LOGICAL_SHARDS];
        for (j, t) in self.texts.iter().enumerate() {
            costs[shard_of(j)] += t.len() as u64;
        }
        costs
    }

    /// Tokenise and resolve the documents of `shards` (in parallel on the rayon pool; each is
    /// a function of its text and the vocabulary only).
    pub fn run(&self, shards: &[usize]) -> Vec<ShardTerms> {
        per_shard(self.texts.len(), shards, |at| {
            at.par_iter()
                .map(|&j| self.vocab.resolve(&self.tokenizer.tokens(self.texts[j])))
                .collect()
        })
        .into_iter()
        .map(|(s, docs)| ShardTerms {
            shard: s as u32,
            docs,
        })
        .collect()
    }

    /// Every document's resolved terms in batch order. Fails (naming the shard) when a shard
    /// is missing or repeated, or a document does not fit the vocabulary or is not in
    /// [`Vocabulary::resolve`]'s order: a known id past its end, known ids not increasing (a
    /// term twice among them) or after a new term, a new term the vocabulary holds or an
    /// empty one, a new term twice, a zero count.
    pub fn assemble(&self, outs: Vec<ShardTerms>) -> Result<Vec<Vec<(Term, u32)>>, EngineError> {
        let m = self.vocab.len();
        let bad = |s: usize, what: &str| {
            EngineError::Inconsistent(format!("logical shard {s} of the batch's terms: {what}"))
        };
        // why a document does not fit, if it does not
        let misfit = |d: &[(Term, u32)]| -> Option<&'static str> {
            let known = d
                .iter()
                .take_while(|(t, _)| matches!(t, Term::Known(_)))
                .count();
            let mut spelled: HashSet<&str> = HashSet::new();
            for (i, (t, c)) in d.iter().enumerate() {
                if *c == 0 {
                    return Some("a term counted zero times");
                }
                match t {
                    Term::Known(id) if (*id as usize) >= m => {
                        return Some("a known term past the vocabulary's end")
                    }
                    Term::Known(_) if i >= known => return Some("a known term after a new one"),
                    Term::Known(id)
                        if i > 0 && !matches!(d[i - 1].0, Term::Known(p) if p < *id) =>
                    {
                        return Some("known terms not in increasing order (or one twice)")
                    }
                    Term::Known(_) => {}
                    Term::New(t) if t.is_empty() => return Some("an empty new term"),
                    Term::New(t) if self.vocab.id(t).is_some() => {
                        return Some("a new term the vocabulary holds")
                    }
                    Term::New(t) if !spelled.insert(t) => return Some("a new term twice"),
                    Term::New(_) => {}
                }
            }
            None
        };
        for o in &outs {
            if let Some(why) = o.docs.iter().find_map(|d| misfit(d)) {
                return Err(bad(
                    o.shard as usize,
                    &format!("a document does not fit the vocabulary: {why}"),
                ));
            }
        }
        let parts = outs.into_iter().map(|o| (o.shard as usize, o.docs));
        by_position(self.texts.len(), parts).map_err(|gap| gap_error(gap, "documents", bad))
    }
}

/// The error for lists by shard that do not make up a batch (`values`: what a shard lists),
/// made by `bad(shard, what)`.
fn gap_error(gap: ShardGap, values: &str, bad: impl Fn(usize, &str) -> EngineError) -> EngineError {
    match gap {
        ShardGap::Unknown(s) => bad(s, "no such shard"),
        ShardGap::Twice(s) => bad(s, "given twice"),
        ShardGap::Missing(s) => bad(s, "missing"),
        ShardGap::Count(s) => bad(s, &format!("wrong number of {values}")),
    }
}

/// A code received from elsewhere fits an m × k dictionary: atoms increasing and `< k`, one
/// finite positive weight each, finite score, residual terms `< m`.
fn code_fits(c: &Code, m: usize, k: usize) -> bool {
    c.atoms.len() == c.weights.len()
        && c.atoms.windows(2).all(|w| w[0] < w[1])
        && c.atoms.iter().all(|&a| (a as usize) < k)
        && c.weights.iter().all(|w| w.is_finite() && *w > 0.0)
        && c.score.is_finite()
        && c.ceiling.is_finite()
        && c.residual
            .iter()
            .all(|&(i, r)| (i as usize) < m && r.is_finite())
}

/// What one replica works out for all of them in a step:
/// the step's emerging topics (when it has topics) and the plan of its atom refresh (when it
/// refreshes atoms). Neither needs the updated Â.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Found {
    pub topics: Option<Vec<Topic>>,
    pub refresh: Option<RefreshPlan>,
}

/// A search of a replica's memory: the nearest remembered document of the batch document at
/// each given position, only among those beating the floor when there is one (see
/// [`crate::memory::DocMemory::nearest_above`]), in the order asked.
pub type MemorySearch<'a> = dyn Fn(&[(usize, Option<Floor>)]) -> Vec<Option<Neighbour>> + 'a;

/// A judge's search of a step's batch ([`Judge::query`]), as [`Replication::nearest`] takes
/// it: the batch's `n` documents, the mark and the logical-shard mask of the memory searched,
/// and the search itself.
pub struct Query<'a> {
    pub n: usize,
    pub memory: [u64; 3],
    pub shards: u64,
    pub search: Box<MemorySearch<'a>>,
}

/// Every shard's outputs of a step's coding, and the nearest remembered document of each of
/// its documents when its judge asked for a search ([`Replication::code_and_search`]).
pub type CodedAndFound = (Vec<ShardOutput>, Option<Vec<Option<Neighbour>>>);

/// How a step's tokenising, coding and more are shared among replicas of the model.
pub trait Replication {
    /// Every logical shard's documents tokenised and resolved for `job` (in any order; the
    /// step checks and assembles them). Called once per step, first.
    fn terms(&mut self, job: &TermJob<'_>) -> Result<Vec<ShardTerms>, EngineError>;

    /// The outputs of every logical shard for `job` (in any order; the step checks and
    /// assembles them). Called at most once per step, only once the model is bootstrapped.
    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError>;

    /// [`Self::code`] for `job` and, when the step's judge asked for a search
    /// ([`Judge::query`]), [`Self::nearest`] for `query`: every shard's outputs and, with a
    /// query, the nearest remembered document of each document in batch order. Called instead
    /// of [`Self::code`] when this is not [`Local`] (a single node keeps the search in the
    /// judgement's time). By default one, then the other; a cluster codes while it waits for
    /// the other workers' parts of the search.
    fn code_and_search(
        &mut self,
        job: &CodingJob<'_>,
        query: Option<&Query<'_>>,
    ) -> Result<CodedAndFound, EngineError> {
        let outs = self.code(job)?;
        let near = match query {
            Some(q) => Some(self.nearest(q.n, q.memory, q.shards, &*q.search)?),
            None => None,
        };
        Ok((outs, near))
    }

    /// Told the judge's decision when the step has a judge (called right after it, once per
    /// step), so that a leader can pass it on to replicas that have no judge of their own.
    fn judged(&mut self, _judgement: &Result<Judgement, EngineError>) -> Result<(), EngineError> {
        Ok(())
    }

    /// True when the step's verdicts are wanted from this replica: [`Local`] and a cluster's
    /// leader, which records them (the engine's steps need them); a replica that only keeps
    /// its model in step gets a [`crate::model::StepOutput`] without them (no keyword
    /// strings made and dropped).
    fn reports(&self) -> bool {
        true
    }

    /// True when this replica works out the step's [`Found`] (its emerging topics and the
    /// plan of its atom refresh): [`Local`] always; in a cluster one worker does, before the
    /// update, while another runs it.
    fn finds(&self) -> bool {
        true
    }

    /// Offer the step's [`Found`] to the other replicas without waiting for them: `Some`
    /// exactly when [`Self::finds`]. Called once per step that has topics or a refresh, before
    /// the update.
    fn offer(&mut self, _mine: Option<&Found>) -> Result<(), EngineError> {
        Ok(())
    }

    /// The step's [`Found`], after the update: `mine` when this replica worked it out, else
    /// the finder's offer (waiting for it). Fails when no replica worked it out.
    fn found(&mut self, mine: Option<Found>) -> Result<Found, EngineError> {
        mine.ok_or_else(|| {
            EngineError::Inconsistent(
                "no replica worked out the step's topics and refresh plan".into(),
            )
        })
    }

    /// The hybrid detector's search for the step's batch of `n` documents: the nearest
    /// remembered document of each, in batch order. `search` searches this replica's memory
    /// (whose [`crate::memory::DocMemory::mark`] is `memory` and which indexes the logical
    /// shards of the mask `shards`) for the documents at the given batch positions, each
    /// only for matches beating its floor when it has one. [`Local`] needs the whole memory;
    /// so does the daemon's cluster, whose workers each search their own documents in a
    /// replica of the whole memory with the same mark (replicas holding disjoint shares of
    /// it could combine their matches with [`crate::memory::better_neighbour`]).
    fn nearest(
        &mut self,
        n: usize,
        _memory: [u64; 3],
        shards: u64,
        search: &MemorySearch<'_>,
    ) -> Result<Vec<Option<Neighbour>>, EngineError> {
        if shards != Share::all().mask() {
            return Err(EngineError::Inconsistent(format!(
                "a memory that indexes only some logical shards ({shards:#x}) cannot search alone"
            )));
        }
        let all: Vec<(usize, Option<Floor>)> = (0..n).map(|j| (j, None)).collect();
        Ok(search(&all))
    }

    /// The gradient rows (pass 1 of the OIADMM update, [`UpdateJob::run`]) of the logical
    /// shards of Â's rows this replica computes: [`Local`] computes every row, as one part in
    /// row order ([`UpdateJob::run_whole`]). Called once
    /// per step that updates the dictionary; [`Self::reduce`] and [`Self::gather_rows`]
    /// follow.
    fn gradient(&mut self, job: &UpdateJob<'_>) -> Result<Vec<GradientRows>, EngineError> {
        Ok(vec![job.run_whole()])
    }

    /// Every replica's per-column sums of a round of the update's thresholds added up
    /// ([`crate::l1::dictionary::add_sums`]), given this replica's own. [`Local`]: its own.
    fn reduce(&mut self, mine: Vec<ColumnSum>) -> Result<Vec<ColumnSum>, EngineError> {
        Ok(mine)
    }

    /// Every shard's projected rows of the update (in any order; [`UpdateJob::project`]
    /// checks them), given this replica's own.
    fn gather_rows(&mut self, mine: Vec<ProjectedRows>) -> Result<Vec<ProjectedRows>, EngineError> {
        Ok(mine)
    }

    /// True for [`Local`]: every shard is computed here (any model kind may then step).
    fn is_local(&self) -> bool {
        false
    }

    /// True when the step's rounds wait for other workers, so that work that does not need
    /// the update is best done beside it, in those waits (see
    /// [`crate::events::beside::Beside`]): by default, unless [`Self::is_local`].
    fn waits(&self) -> bool {
        !self.is_local()
    }
}

/// Every shard computed here: the single-node step.
pub struct Local;

impl Replication for Local {
    fn terms(&mut self, job: &TermJob<'_>) -> Result<Vec<ShardTerms>, EngineError> {
        Ok(job.run(&(0..LOGICAL_SHARDS).collect::<Vec<_>>()))
    }
    fn code(&mut self, job: &CodingJob<'_>) -> Result<Vec<ShardOutput>, EngineError> {
        let all: Vec<usize> = (0..LOGICAL_SHARDS).collect();
        Ok(job.run(&all))
    }
    fn is_local(&self) -> bool {
        true
    }
}

/// A judge whose decision is also told to a [`Replication`].
pub(crate) struct Tapped<'a, 'b> {
    pub(crate) inner: &'a mut (dyn Judge + 'b),
    pub(crate) rep: &'a mut dyn Replication,
}

impl Judge for Tapped<'_, '_> {
    fn judge(&mut self, batch: &Scored) -> Result<Judgement, EngineError> {
        let r = self.inner.judge_shared(batch, self.rep);
        self.rep.judged(&r)?;
        r
    }

    fn scores(&self) -> Option<Vec<f64>> {
        self.inner.scores()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::l1::dictionary::{deal, shard_docs};
    use ndarray::Array2;

    /// A document over `ids`, each with the same weight.
    fn doc(ids: &[u32]) -> SparseDoc {
        SparseDoc {
            ids: ids.to_vec(),
            vals: vec![1.0 / ids.len().max(1) as f64; ids.len()],
        }
    }

    #[test]
    fn shard_costs_follow_the_rows_a_document_gathers() {
        // 20 terms, 8 atoms: terms 0..10 are in every atom, terms 10..20 in one
        let (m, k) = (20, 8);
        let dense = Array2::from_shape_fn(
            (m, k),
            |(i, j)| {
                if i < 10 || j == i % k {
                    0.5f32
                } else {
                    0.0
                }
            },
        );
        let dict = Dictionary::from_dense(dense.view());
        let coding = CodingParams::paper();
        // 200 documents: shard 5's on the dense rows, shard 9's empty or on unknown terms
        // only, the others on three sparse rows
        let vectors: Vec<SparseDoc> = (0..200)
            .map(|j| match shard_of(j) {
                5 => doc(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
                9 if j % 2 == 0 => doc(&[]),
                9 => doc(&[25, 30]),
                _ => doc(&[10, 11, 12]),
            })
            .collect();
        let job = CodingJob {
            timestep: 3,
            vectors: &vectors,
            dict: &dict,
            coding: &coding,
        };
        let costs = job.shard_costs();
        // per document: (entries in its rows) · ⌊8·√terms⌋
        let dense_doc = (10 * k as u64) * 25; // ⌊√640⌋ = 25
        let sparse_doc = 3 * 13; // ⌊√192⌋ = 13
        for (s, &cost) in costs.iter().enumerate() {
            let docs = shard_docs(vectors.len(), s).count() as u64;
            let want = match s {
                5 => docs * dense_doc,
                9 => 0,
                _ => docs * sparse_doc,
            };
            assert_eq!(cost, want, "shard {s}");
        }
        // two workers: the one given the dense shard gets fewer of the others
        let hands = deal(&costs, 2);
        let heavy = usize::from(!hands[0].contains(&5));
        assert!(hands[heavy].len() < hands[1 - heavy].len(), "{hands:?}");
    }
}
