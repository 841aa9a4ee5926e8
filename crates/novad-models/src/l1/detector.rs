//! One timestep end to end: vectorize, code, score, decide (threshold or judge), topics,
//! OIADMM, refresh, adaptive atoms, verdicts — a pure function
//! `(model, batch) → (new model, verdicts)`. The old model is never modified, so a caller that
//! fails to persist the new one simply keeps the old.

use std::collections::BTreeMap;
use std::time::Instant;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::events::beside::Beside;
use crate::events::{EventBatch, Events};
use crate::l1::dictclust::dictclust;
use crate::l1::dictionary::{
    bootstrap, codes_to_csc, column_sums, docs_to_csr, image, plan_refresh, Dictionary, Multiplier,
    ProjectedRows, RefreshPlan, Thresholds, UpdateJob,
};
use crate::l1::params::Params;
use crate::l1::replicate::{CodingJob, Found, Local, Replication, Tapped, TermJob};
use crate::model::{
    decode_part, judged, params_image, Code, Decided, EngineError, Judge, ParamsError, Scored,
    StepOutput, StepStats, Topic, Verdict,
};
use crate::text::{tfidf_l1, Remap, SparseDoc, Tokenizer, VocabChange, Vocabulary};
use crate::threshold::{decide, ScoreHistory, ThresholdRule};

const PART_META: &str = "meta";
const PART_VOCAB: &str = "vocab";
const PART_DICT: &str = "dict";
const PART_DELTA: &str = "delta";
const PART_HISTORY: &str = "history";
const PART_LAST_USED: &str = "last_used";

/// Â from its part (either image version, see [`image`]).
fn decode_dict(parts: &BTreeMap<String, Vec<u8>>) -> Result<Dictionary, EngineError> {
    let b = parts
        .get(PART_DICT)
        .ok_or_else(|| EngineError::Inconsistent(format!("part `{PART_DICT}` is missing")))?;
    image::decode(b)
        .map_err(|e| EngineError::Inconsistent(format!("part `{PART_DICT}` does not decode: {e}")))
}

/// The scalar state, one part.
#[derive(Serialize, Deserialize)]
struct PartMeta {
    timestep: u64,
    bootstrapped: bool,
}

/// The complete model state: parameters, vocabulary, dictionary Â (m × k), multiplier Δ
/// (m × n_prev), score history, timestep.
///
/// Invariants: `dict.nrows() == delta.nrows() == vocab.len()`; `dict.ncols() == last_used.len()`
/// (= `params.k`, or within the adaptive bounds when atoms are injected and retired);
/// Â ∈ 𝒜; every value finite; params valid.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Model {
    params: Params,
    vocab: Vocabulary,
    dict: Dictionary,
    delta: Multiplier,
    history: ScoreHistory,
    /// Per atom, the last timestep it had a non-zero code (or was created).
    last_used: Vec<u64>,
    timestep: u64,
    bootstrapped: bool,
}

impl Model {
    /// An empty model (no vocabulary, not bootstrapped).
    pub fn new(params: Params) -> Result<Model, ParamsError> {
        params.validate()?;
        Ok(Model {
            vocab: Vocabulary::new(params.text.max_terms),
            dict: Dictionary::zeros(0, params.k),
            delta: Multiplier::zeros(0, 0),
            history: ScoreHistory::default(),
            last_used: vec![0; params.k],
            timestep: 0,
            bootstrapped: false,
            params,
        })
    }

    /// Reassemble a model from its parts (e.g. read back from a store), checking every
    /// invariant.
    pub fn from_parts(parts: ModelParts) -> Result<Model, EngineError> {
        parts.params.validate()?;
        let m = parts.vocab.len();
        let k = parts.dict.ncols();
        let (kmin, kmax) = parts.params.atom_bounds();
        if parts.dict.nrows() != m || k < kmin || k > kmax {
            return Err(EngineError::Inconsistent(format!(
                "dictionary is {:?}, expected {m} rows and {kmin}..={kmax} atoms",
                parts.dict.dim(),
            )));
        }
        if parts.delta.nrows() != m {
            return Err(EngineError::Inconsistent(format!(
                "Δ has {} rows, vocabulary {m} terms",
                parts.delta.nrows()
            )));
        }
        if parts.last_used.len() != k {
            return Err(EngineError::Inconsistent(format!(
                "{} atom ages for {k} atoms",
                parts.last_used.len(),
            )));
        }
        if parts.history.weights.len() != crate::threshold::BINS {
            return Err(EngineError::Inconsistent("score history size".into()));
        }
        if !parts.dict.in_set(1e-4) {
            return Err(EngineError::NonFinite("dictionary (or it left 𝒜)"));
        }
        if !parts.delta.is_valid() {
            return Err(EngineError::NonFinite("Δ (or its structure is invalid)"));
        }
        Ok(Model {
            params: parts.params,
            vocab: parts.vocab,
            dict: parts.dict,
            delta: parts.delta,
            history: parts.history,
            last_used: parts.last_used,
            timestep: parts.timestep,
            bootstrapped: parts.bootstrapped,
        })
    }

    /// Split into parts (for storage).
    pub fn into_parts(self) -> ModelParts {
        ModelParts {
            params: self.params,
            vocab: self.vocab,
            dict: self.dict,
            delta: self.delta,
            history: self.history,
            last_used: self.last_used,
            timestep: self.timestep,
            bootstrapped: self.bootstrapped,
        }
    }

    pub fn params(&self) -> &Params {
        &self.params
    }
    pub fn vocab(&self) -> &Vocabulary {
        &self.vocab
    }
    /// Â, m × k (rows = terms), held by rows.
    pub fn dictionary(&self) -> &Dictionary {
        &self.dict
    }
    /// Δ, m × n of the last batch (m × 0 when Δ is not carried between batches).
    pub fn delta(&self) -> &Multiplier {
        &self.delta
    }
    pub fn history(&self) -> &ScoreHistory {
        &self.history
    }
    /// Per atom, the last timestep it was used by a code (or created).
    pub fn atom_last_used(&self) -> &[u64] {
        &self.last_used
    }
    /// Number of timesteps processed so far (= index of the next one).
    pub fn timestep(&self) -> u64 {
        self.timestep
    }
    pub fn is_bootstrapped(&self) -> bool {
        self.bootstrapped
    }

    /// Deterministic image of the whole state for digests: the postcard encoding of the model
    /// with the parameters' digest image ([`params_image`]; equal to the plain encoding when
    /// the hybrid detector is set).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = params_image(&self.params, &self.params.image_drops());
        // postcard encodes a struct as its fields in order, like this tuple
        let rest = (
            &self.vocab,
            &self.dict,
            &self.delta,
            &self.history,
            &self.last_used,
            self.timestep,
            self.bootstrapped,
        );
        out.extend(postcard::to_stdvec(&rest).expect("model serialises"));
        out
    }

    /// The state as named parts (the [`crate::PartsModel`] contract): `meta` (timestep,
    /// bootstrapped), `vocab`, `dict` (Â as a row-compressed [`image`]), `delta` (Δ), `history` (score histogram),
    /// `last_used` (atom ages). A part whose content did not change encodes to the same bytes.
    pub fn state_parts(&self) -> Vec<(String, Vec<u8>)> {
        use crate::model::part_bytes as enc;
        let meta = PartMeta {
            timestep: self.timestep,
            bootstrapped: self.bootstrapped,
        };
        vec![
            (PART_META.to_string(), enc(&meta)),
            (PART_VOCAB.to_string(), enc(&self.vocab)),
            (PART_DICT.to_string(), image::encode(&self.dict)),
            (PART_DELTA.to_string(), enc(&self.delta)),
            (PART_HISTORY.to_string(), enc(&self.history)),
            (PART_LAST_USED.to_string(), enc(&self.last_used)),
        ]
    }

    /// Rebuild from [`Model::state_parts`], checking every invariant ([`Model::from_parts`]).
    pub fn from_state_parts(
        params: Params,
        parts: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Model, EngineError> {
        let meta: PartMeta = decode_part(parts, PART_META)?;
        Model::from_parts(ModelParts {
            params,
            vocab: decode_part(parts, PART_VOCAB)?,
            dict: decode_dict(parts)?,
            delta: decode_part(parts, PART_DELTA)?,
            history: decode_part(parts, PART_HISTORY)?,
            last_used: decode_part(parts, PART_LAST_USED)?,
            timestep: meta.timestep,
            bootstrapped: meta.bootstrapped,
        })
    }

    /// Vectorize texts against a vocabulary *without* changing it (unknown terms dropped):
    /// for scoring or inspection outside the stream.
    pub fn vectorize_frozen(&self, texts: &[&str]) -> Vec<SparseDoc> {
        let tok = self.tokenizer();
        texts
            .iter()
            .map(|t| {
                let c = self.vocab.counts(&tok.tokens(t));
                tfidf_l1(&c, |id| self.vocab.df(id), self.vocab.docs_seen())
            })
            .collect()
    }

    fn tokenizer(&self) -> Tokenizer {
        self.params.tokenizer()
    }

    /// The step's emerging topics (DICTCLUST) among the `novel` documents of the batch.
    fn find_topics(
        &self,
        vectors: &[SparseDoc],
        scores: &[f64],
        novel: &[bool],
        m: usize,
    ) -> Vec<crate::model::Topic> {
        let Some(tp) = &self.params.topics else {
            return Vec::new();
        };
        let novel_idx: Vec<usize> = (0..vectors.len()).filter(|&j| novel[j]).collect();
        dictclust(
            vectors,
            scores,
            &novel_idx,
            m,
            &self.params.coding,
            tp,
            self.params.seed ^ self.timestep.wrapping_mul(0xA24B_AED4_963E_E407),
        )
        .0
    }

    /// Process one batch (one timestep). The first batch with a non-empty document bootstraps
    /// the dictionary; its documents get `bootstrap = true` verdicts. Later batches are scored
    /// against Â_t, thresholded, and Â, Δ updated by OIADMM.
    pub fn step<D: AsRef<str> + Sync>(
        &self,
        docs: &[D],
    ) -> Result<(Model, StepOutput), EngineError> {
        self.step_judged(docs, None)
    }

    /// [`Self::step`] with novelty decided by `judge` instead of the model's threshold (the
    /// model's score history is still kept); topics are found among the judge's novel
    /// documents.
    pub fn step_judged<D: AsRef<str> + Sync>(
        &self,
        docs: &[D],
        judge: Option<&mut (dyn Judge + '_)>,
    ) -> Result<(Model, StepOutput), EngineError> {
        self.step_replicated(docs, judge, &mut Local)
    }

    /// [`Self::step_judged`] with the tokenising and the coding done by `rep` (by logical
    /// shard), the judge's decision told to it, and the step's topics and refresh plan taken
    /// from it when another replica works them out ([`Found`]). With [`Local`] this is the
    /// single-node step; replicas of one model that are given the same batch, the same shards'
    /// terms and codes, the same `Found` (and the leader's judgement) compute the same new
    /// model, bit for bit.
    pub fn step_replicated<D: AsRef<str> + Sync>(
        &self,
        docs: &[D],
        judge: Option<&mut (dyn Judge + '_)>,
        rep: &mut dyn Replication,
    ) -> Result<(Model, StepOutput), EngineError> {
        let (model, out, _) = self.step_tracked(docs, judge, rep, None)?;
        Ok((model, out))
    }

    /// [`Self::step_replicated`] with the event tracker `events` stepped on the judged batch
    /// (its vectors, the vocabulary after it, the verdicts' novelty and scores, as the engine's
    /// event stage sees them); the step's topics are then the tracker's, which comes back
    /// stepped (its events never become atoms: the atoms' adaptation sees DICTCLUST's topics
    /// only, none when the tracker runs). Where [`Replication::waits`], the tracker steps on a
    /// thread of its own once this worker's part of the update is done ([`Beside`]), filling
    /// its waits for the others; else (and on a step without an update) after the update.
    pub fn step_tracked<D: AsRef<str> + Sync>(
        &self,
        docs: &[D],
        mut judge: Option<&mut (dyn Judge + '_)>,
        rep: &mut dyn Replication,
        events: Option<&Events>,
    ) -> Result<(Model, StepOutput, Option<Events>), EngineError> {
        let p = &self.params;
        let Coded {
            vocab,
            vectors,
            change,
            mut dict,
            eligible,
            codes,
            scores,
            is_bootstrap,
            bootstrapped,
            mut stats,
        } = self.coded(docs, judge.as_deref_mut(), rep)?;
        let (m, n) = (vocab.len(), docs.len());
        let mut history = self.history.clone();
        let silent = is_bootstrap || !bootstrapped;
        let scored = Scored {
            vectors: &vectors,
            vocab: &vocab,
            scores: &scores,
            eligible: &eligible,
            silent,
            rule: &p.threshold,
        };
        // The bootstrap batch is scored in-sample (against atoms learned from itself), which
        // biases its scores low; it does not enter the history the adaptive rule uses, so the
        // first batch after it falls back to the top (1 − quantile) share.
        let learn = bootstrapped && !is_bootstrap;
        // Atom ages: the atoms of Â_t this batch's codes use (the update keeps the atoms).
        let (usage, mut last_used) = self.atom_use(&codes, dict.ncols());

        // Emerging topics among the novel documents (DICTCLUST), judged by Â_t like the scores
        // (not on the bootstrap batch), and the plan of the refresh of the least-used atoms
        // (nor on an empty batch): one replica works them out and offers them while every
        // other replica goes on with the update. The plan does not depend on the novelty: it
        // is worked out before the judgement, while the leader decides (the coding round and
        // the search are over by then, and a replica has joined the judgement round already,
        // so no other worker waits for it).
        let t_plan = Instant::now();
        let refresh = (bootstrapped && !is_bootstrap && n > 0)
            .then_some(p.refresh.as_ref())
            .flatten();
        let plan = refresh.filter(|_| rep.finds()).map(|rp| {
            let k = dict.ncols();
            let (seed, t) = (p.seed, self.timestep);
            plan_refresh((m, k), &last_used, &usage, &vectors, &scores, rp, seed, t)
        });
        let plan_seconds = t_plan.elapsed().as_secs_f64();
        let Decided {
            novel,
            threshold: thr,
            topical,
            scores: judged_scores,
        } = self.novelty(&scored, judge, rep, &mut history, learn)?;
        stats.threshold = thr.is_finite().then_some(thr);

        // Dictionary update (not on the bootstrap batch, not before bootstrap, not on an empty
        // batch), shared by logical shards of Â's rows through `rep`, with the event tracker's
        // step beside it; then the topics, which do not need it.
        let t2 = Instant::now();
        let updating = bootstrapped && !is_bootstrap && n > 0;
        let judged_batch = EventBatch {
            timestep: self.timestep,
            vectors: &vectors,
            vocab: &vocab,
            novel: &novel,
            scores: judged_scores.as_deref().unwrap_or(&scores),
        };
        let apart = rep.waits();
        let (delta, seconds_update, tracked) = std::thread::scope(|s| {
            let mut beside = Beside::new(s, events, judged_batch, apart);
            let (remap, dict) = (&change.remap, &mut dict);
            let delta = self.update(
                updating,
                remap,
                &vectors,
                &codes,
                dict,
                &mut stats,
                rep,
                &mut beside,
            )?;
            // the update's seconds; the tracker's are the topics'
            let seconds = t2.elapsed().as_secs_f64();
            Ok::<_, EngineError>((delta, seconds, beside.join()))
        })?;

        // events, when set, are the step's topics (the tracker's): DICTCLUST does not run
        let want = (
            p.topics.is_some() && p.events.is_none() && !is_bootstrap && bootstrapped,
            refresh.is_some(),
        );
        let batch = (&vectors[..], &scores[..], &topical[..], m);
        let (topics, refreshing) = self.take_found(want, batch, plan, &mut stats, rep)?;
        stats.seconds_topics += plan_seconds;
        let t4 = Instant::now();
        let phase = (is_bootstrap, bootstrapped);
        self.tend_atoms(
            &mut dict,
            &mut last_used,
            refreshing,
            &topics,
            phase,
            &mut stats,
        )?;
        let (topics, events) = match tracked {
            Some((next, events_topics, seconds)) => {
                stats.seconds_topics += seconds;
                (events_topics, Some(next))
            }
            None => (topics, None),
        };
        stats.topics = topics.len();
        stats.atoms = dict.ncols();
        stats.seconds_update = seconds_update + t4.elapsed().as_secs_f64();
        if !dict.all_finite() {
            return Err(EngineError::NonFinite("dictionary"));
        }
        if !delta.is_valid() {
            return Err(EngineError::NonFinite("Δ"));
        }
        summarise(&mut stats, &codes, &eligible, &usage, &novel);
        stats.bootstrap = is_bootstrap;
        let verdicts = if rep.reports() {
            verdicts(&codes, &novel, &eligible, &scores, &vocab, is_bootstrap)
        } else {
            Vec::new()
        };
        let model = Model {
            params: self.params.clone(),
            vocab,
            dict,
            delta,
            history,
            last_used,
            timestep: self.timestep + 1,
            bootstrapped,
        };
        let out = StepOutput {
            verdicts,
            vectors,
            codes,
            topics,
            stats,
            hybrid: Vec::new(),
            seconds_hybrid: 0.0,
        };
        Ok((model, out, events))
    }

    /// The batch vectorised (the vocabulary after it), the dictionary the batch is coded
    /// over (Â_t remapped, or learned from the bootstrap batch), and each document's code and
    /// score (the code's, blended with its mass on new terms).
    fn coded<D: AsRef<str> + Sync>(
        &self,
        docs: &[D],
        judge: Option<&mut (dyn Judge + '_)>,
        rep: &mut dyn Replication,
    ) -> Result<Coded, EngineError> {
        let t0 = Instant::now();
        let p = &self.params;
        let (vocab, vectors, change) = self.vectorize(docs, rep)?;
        let m = vocab.len();
        let mut dict = self.dict.remap(&change.remap);
        let eligible: Vec<bool> = vectors.iter().map(|v| !v.is_empty()).collect();
        let mut stats = StepStats {
            timestep: self.timestep,
            docs: docs.len(),
            empty: eligible.iter().filter(|&&e| !e).count(),
            new_terms: change.added,
            evicted_terms: change.evicted,
            vocabulary: m,
            seconds_vectorize: t0.elapsed().as_secs_f64(),
            ..Default::default()
        };
        let is_bootstrap = !self.bootstrapped && eligible.iter().any(|&e| e);
        let bootstrapped = self.bootstrapped || is_bootstrap;
        let t1 = Instant::now();
        if is_bootstrap {
            let dense = bootstrap(&vectors, m, p.k, &p.coding, &p.bootstrap, p.seed);
            dict = Dictionary::from_dense(dense.view());
        }
        let codes = if bootstrapped {
            self.code(&vectors, &vocab, &dict, judge, rep)?
        } else {
            vectors.iter().map(uncoded).collect()
        };
        stats.seconds_coding = t1.elapsed().as_secs_f64();
        // Mass on terms never seen before this batch (known to the vocabulary, not to any past
        // timestep): optionally part of the score. The bootstrap batch has no past: 0.
        let is_new = (!is_bootstrap).then(|| change.remap.new_ids());
        let scores = batch_scores(&codes, &vectors, is_new.as_deref(), p.unseen_weight)?;
        Ok(Coded {
            vocab,
            vectors,
            change,
            dict,
            eligible,
            codes,
            scores,
            is_bootstrap,
            bootstrapped,
            stats,
        })
    }

    /// The step's [`Found`] — DICTCLUST's topics and the refresh plan, as far as `want` (topics,
    /// refresh) asks — offered by the finder (`plan` is its own) and taken by every replica
    /// through `rep`: the topics (none unless wanted) and the plan (exactly when wanted).
    fn take_found(
        &self,
        (want_topics, want_refresh): (bool, bool),
        (vectors, scores, topical, m): (&[SparseDoc], &[f64], &[bool], usize),
        plan: Option<RefreshPlan>,
        stats: &mut StepStats,
        rep: &mut dyn Replication,
    ) -> Result<(Vec<Topic>, Option<RefreshPlan>), EngineError> {
        let t0 = Instant::now();
        let want = want_topics || want_refresh;
        let mine = (want && rep.finds()).then(|| Found {
            topics: want_topics.then(|| self.find_topics(vectors, scores, topical, m)),
            refresh: plan,
        });
        if want {
            rep.offer(mine.as_ref())?;
        }
        stats.seconds_topics += t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let found = if want {
            rep.found(mine)?
        } else {
            Found::default()
        };
        let missing =
            |what: &str| EngineError::Inconsistent(format!("the step's {what} is missing"));
        let topics = match (want_topics, found.topics) {
            (true, Some(t)) => t,
            (true, None) => return Err(missing("list of topics")),
            (false, _) => Vec::new(),
        };
        stats.seconds_topics += t1.elapsed().as_secs_f64();
        let plan = match (want_refresh, found.refresh) {
            (true, None) => return Err(missing("refresh plan")),
            (true, plan) => plan,
            (false, _) => None,
        };
        Ok((topics, plan))
    }

    /// The OIADMM step of `dict` (in place) on the batch's `vectors` and `codes` when
    /// `updating`, shared by logical shards of Â's rows through `rep`, with `beside` started
    /// once this worker's rows are done; returns Δ as it is after the step (remapped to the
    /// vocabulary after the batch).
    #[allow(clippy::too_many_arguments)]
    fn update(
        &self,
        updating: bool,
        remap: &Remap,
        vectors: &[SparseDoc],
        codes: &[Code],
        dict: &mut Dictionary,
        stats: &mut StepStats,
        rep: &mut dyn Replication,
        beside: &mut Beside<'_, '_>,
    ) -> Result<Multiplier, EngineError> {
        let p = &self.params;
        let (m, n) = (dict.nrows(), vectors.len());
        let mut delta = if updating && p.oiadmm.carry_delta {
            self.delta.remap_resize(remap, n)
        } else if updating {
            Multiplier::zeros(m, 0)
        } else {
            self.delta.remap_resize(remap, self.delta.ncols())
        };
        if updating {
            let (pm, x) = (docs_to_csr(vectors, m), codes_to_csc(codes, dict.ncols()));
            let carried = p.oiadmm.carry_delta.then_some(&delta);
            let job = UpdateJob::new(&pm, dict, carried, &x, &p.oiadmm);
            let rows = shared_update(&job, rep, beside)?;
            let mut done = job.project(rows)?;
            if p.oiadmm.carry_delta {
                done.next_delta(&mut delta, &pm, dict);
            }
            stats.oiadmm = done.stats;
            *dict = done.dict;
        }
        Ok(delta)
    }

    /// Each document's novelty, the threshold used (∞ when none) and the documents the
    /// topics group: the judge's decision when there is one (told to `rep`), else the
    /// model's rule; nothing is novel when `scored` is silent. With `learn`, the history
    /// takes the eligible documents' scores.
    fn novelty(
        &self,
        scored: &Scored<'_>,
        judge: Option<&mut (dyn Judge + '_)>,
        rep: &mut dyn Replication,
        history: &mut ScoreHistory,
        learn: bool,
    ) -> Result<Decided, EngineError> {
        let mut tapped = judge.map(|inner| Tapped { inner, rep });
        let judge = tapped.as_mut().map(|t| t as &mut dyn Judge);
        let rule = &self.params.threshold;
        let decided = judged(judge, scored, || {
            if scored.silent {
                (vec![false; scored.scores.len()], f64::INFINITY)
            } else {
                decide(rule, history, scored.scores, scored.eligible)
            }
        })?;
        let kept: Vec<f64> = scored
            .scores
            .iter()
            .zip(scored.eligible)
            .filter(|(_, &e)| e)
            .map(|(&s, _)| s)
            .collect();
        if learn && !kept.is_empty() {
            history.update(&kept, half_life(rule));
        }
        Ok(decided)
    }

    /// The atoms of Â_{t+1} after the update: the step's refresh `plan` applied, when there is
    /// one (after OIADMM: new atoms have no code in this batch, so the update would not touch
    /// them anyway); the atoms' last use set to this timestep for the bootstrap's atoms (the
    /// `phase` (is_bootstrap, bootstrapped)), else the dictionary's size adapted to the step's
    /// DICTCLUST `topics` once bootstrapped (none when the tracker runs: its events never
    /// become atoms).
    fn tend_atoms(
        &self,
        dict: &mut Dictionary,
        last_used: &mut Vec<u64>,
        plan: Option<RefreshPlan>,
        topics: &[Topic],
        (is_bootstrap, bootstrapped): (bool, bool),
        stats: &mut StepStats,
    ) -> Result<(), EngineError> {
        if let Some(plan) = plan {
            stats.atoms_refreshed = self.refresh(dict, last_used, &plan)?;
        }
        if is_bootstrap {
            for (lu, used) in last_used.iter_mut().zip(dict.positive_columns()) {
                if used {
                    *lu = self.timestep;
                }
            }
        } else if bootstrapped {
            self.adapt_atoms(dict, last_used, topics, stats);
        }
        Ok(())
    }

    /// Apply the step's refresh `plan` to Â_{t+1} (checked to fit it); returns the number of
    /// atoms replaced.
    fn refresh(
        &self,
        dict: &mut Dictionary,
        last_used: &mut [u64],
        plan: &RefreshPlan,
    ) -> Result<usize, EngineError> {
        if !plan.fits(dict.nrows(), dict.ncols()) {
            return Err(EngineError::Inconsistent(
                "the step's refresh plan does not fit the dictionary".into(),
            ));
        }
        plan.apply(dict, last_used, self.timestep);
        Ok(plan.victims.len())
    }

    /// The batch's TF-IDF vectors, in batch order, and the vocabulary after it (with the
    /// change that maps the old term ids to the new). Documents are tokenised and resolved
    /// against the vocabulary by logical shard through `rep` (each independently: the same
    /// result anywhere), then observed in batch order.
    fn vectorize<D: AsRef<str> + Sync>(
        &self,
        docs: &[D],
        rep: &mut dyn Replication,
    ) -> Result<(Vocabulary, Vec<SparseDoc>, VocabChange), EngineError> {
        let texts: Vec<&str> = docs.iter().map(AsRef::as_ref).collect();
        let tokenizer = self.tokenizer();
        let job = TermJob {
            timestep: self.timestep,
            texts: &texts,
            tokenizer: &tokenizer,
            vocab: &self.vocab,
        };
        let outs = rep.terms(&job)?;
        let resolved = job.assemble(outs)?;
        let mut vocab = self.vocab.clone();
        let (counts, change) = vocab.observe_resolved(resolved, self.timestep);
        let vectors: Vec<SparseDoc> = counts
            .par_iter()
            .map(|c| tfidf_l1(c, |id| vocab.df(id), vocab.docs_seen()))
            .collect();
        Ok((vocab, vectors, change))
    }

    /// The codes of the batch against `dict`, in batch order, computed by logical shard by
    /// `rep` and checked to fit. When `rep` is not [`Local`], the search `judge` asks for runs
    /// with the coding and its answer goes back to the judge.
    fn code(
        &self,
        vectors: &[SparseDoc],
        vocab: &Vocabulary,
        dict: &Dictionary,
        judge: Option<&mut (dyn Judge + '_)>,
        rep: &mut dyn Replication,
    ) -> Result<Vec<Code>, EngineError> {
        let job = CodingJob {
            timestep: self.timestep,
            vectors,
            dict,
            coding: &self.params.coding,
        };
        let outs = match judge {
            Some(j) if !rep.is_local() => {
                let query = j.query(vectors, vocab)?;
                let (outs, near) = rep.code_and_search(&job, query.as_ref())?;
                drop(query);
                if let Some(near) = near {
                    j.answer(near);
                }
                outs
            }
            _ => rep.code(&job)?,
        };
        job.assemble(outs)
    }

    /// How many documents of the batch use each of the k atoms, and every atom's last use
    /// with this batch's uses at the current timestep.
    fn atom_use(&self, codes: &[Code], k: usize) -> (Vec<u32>, Vec<u64>) {
        let mut last_used = self.last_used.clone();
        let mut usage = vec![0u32; k];
        for c in codes {
            for &a in &c.atoms {
                usage[a as usize] += 1;
                last_used[a as usize] = self.timestep;
            }
        }
        (usage, last_used)
    }

    /// Adaptive dictionary size, when configured: emerging topics become atoms (up to the
    /// largest k), then atoms unused for `retire_after` timesteps retire (down to the
    /// smallest k), oldest first.
    fn adapt_atoms(
        &self,
        dict: &mut Dictionary,
        last_used: &mut Vec<u64>,
        topics: &[crate::model::Topic],
        stats: &mut StepStats,
    ) {
        let Some(ad) = &self.params.adapt else {
            return;
        };
        let (kmin, kmax) = self.params.atom_bounds();
        if ad.inject {
            let room = kmax.saturating_sub(dict.ncols());
            let cols: Vec<Vec<(u32, f32)>> = topics
                .iter()
                .take(room)
                .map(|t| t.atom_vector.clone())
                .collect();
            dict.push_columns(&cols);
            last_used.extend(std::iter::repeat_n(self.timestep, cols.len()));
            stats.atoms_injected += cols.len();
        }
        if ad.retire_after > 0 {
            let mut order: Vec<usize> = (0..dict.ncols())
                .filter(|&j| last_used[j] + ad.retire_after < self.timestep)
                .collect();
            order.sort_by_key(|&j| (last_used[j], j));
            let removable = dict.ncols().saturating_sub(kmin);
            order.truncate(removable);
            if !order.is_empty() {
                let keep: Vec<usize> = (0..dict.ncols()).filter(|j| !order.contains(j)).collect();
                *dict = dict.select_columns(&keep);
                *last_used = keep.iter().map(|&j| last_used[j]).collect();
                stats.atoms_retired = order.len();
            }
        }
    }
}

/// A batch vectorised, coded and scored ([`Model::coded`]).
struct Coded {
    vocab: Vocabulary,
    vectors: Vec<SparseDoc>,
    change: VocabChange,
    /// The dictionary the batch is coded over (Â_t, remapped; or the bootstrap's).
    dict: Dictionary,
    /// False for an empty document.
    eligible: Vec<bool>,
    codes: Vec<Code>,
    scores: Vec<f64>,
    is_bootstrap: bool,
    /// True once the dictionary exists (this batch bootstrapped it, or an earlier one).
    bootstrapped: bool,
    stats: StepStats,
}

/// The rows of Â_{t+1} of `job`, every shard's, projected onto 𝒜: this replica's hand of the
/// gradient rows, the column thresholds found over every replica's sums, its rows projected
/// and everyone's gathered (see [`UpdateJob`]).
fn shared_update(
    job: &UpdateJob<'_>,
    rep: &mut dyn Replication,
    beside: &mut Beside<'_, '_>,
) -> Result<Vec<ProjectedRows>, EngineError> {
    let mine = rep.gradient(job)?;
    beside.start();
    let bad = |e: String| EngineError::Inconsistent(format!("the update's column sums: {e}"));
    let mut th = Thresholds::start(&rep.reduce(column_sums(&mine, job.atoms()))?);
    let mut cand = th.candidates(&mine);
    while !th.is_done() {
        let totals = rep.reduce(th.sums_above(&mut cand))?;
        th.advance(&totals).map_err(bad)?;
    }
    rep.gather_rows(th.apply(mine))
}

/// The code of a document before the dictionary exists: no atom, its whole mass as the score.
fn uncoded(v: &SparseDoc) -> Code {
    Code {
        atoms: vec![],
        weights: vec![],
        score: v.l1(),
        ceiling: v.l1(),
        iterations: 0,
        active_atoms: 0,
        residual: vec![],
    }
}

/// Each document's score: (code score + α · mass on terms new in this batch) / (1 + α), all
/// finite; `is_new` by term id, `None` when no term counts as new (the bootstrap batch).
fn batch_scores(
    codes: &[Code],
    vectors: &[SparseDoc],
    is_new: Option<&[bool]>,
    alpha: f64,
) -> Result<Vec<f64>, EngineError> {
    let unseen: Vec<f64> = vectors
        .iter()
        .map(|v| {
            let Some(is_new) = is_new.filter(|_| alpha != 0.0) else {
                return 0.0;
            };
            v.ids
                .iter()
                .zip(&v.vals)
                .filter(|(&id, _)| is_new[id as usize])
                .map(|(_, &x)| x)
                .sum()
        })
        .collect();
    let scores: Vec<f64> = codes
        .iter()
        .zip(&unseen)
        .map(|(c, &u)| (c.score + alpha * u) / (1.0 + alpha))
        .collect();
    if scores.iter().any(|s| !s.is_finite()) {
        return Err(EngineError::NonFinite("scores"));
    }
    Ok(scores)
}

/// The half-life of the adaptive threshold's score history (0 for the other rules).
fn half_life(rule: &ThresholdRule) -> f64 {
    match rule {
        ThresholdRule::Adaptive { half_life, .. } => *half_life,
        _ => 0.0,
    }
}

/// The step's figures about its codes and decisions.
fn summarise(
    stats: &mut StepStats,
    codes: &[Code],
    eligible: &[bool],
    usage: &[u32],
    novel: &[bool],
) {
    let n_kept = eligible.iter().filter(|&&e| e).count().max(1) as f64;
    stats.ceiling_fraction = codes.iter().filter(|c| c.at_ceiling()).count() as f64 / n_kept;
    stats.mean_iterations = codes
        .iter()
        .zip(eligible)
        .filter(|(_, &e)| e)
        .map(|(c, _)| c.iterations as f64)
        .sum::<f64>()
        / n_kept;
    stats.mean_code_nnz = codes.iter().map(|c| c.atoms.len() as f64).sum::<f64>() / n_kept;
    // atoms of Â_t (the dictionary the codes refer to) used by this batch
    stats.atoms_used = usage.iter().filter(|&&u| u > 0).count();
    stats.novel = novel.iter().filter(|&&b| b).count();
}

/// One verdict per document, in batch order, with its residual terms spelled out.
fn verdicts(
    codes: &[Code],
    novel: &[bool],
    eligible: &[bool],
    scores: &[f64],
    vocab: &Vocabulary,
    bootstrap: bool,
) -> Vec<Verdict> {
    codes
        .iter()
        .zip(novel)
        .zip(eligible)
        .zip(scores)
        .map(|(((c, &nv), &e), &score)| Verdict {
            score,
            novel: nv,
            bootstrap,
            empty: !e,
            at_ceiling: c.at_ceiling(),
            terms: c
                .residual
                .iter()
                .map(|&(id, r)| (vocab.term(id).to_string(), r))
                .collect(),
        })
        .collect()
}

/// The parts of a [`Model`], for storage layers that persist them separately.
#[derive(Debug, Clone)]
pub struct ModelParts {
    pub params: Params,
    pub vocab: Vocabulary,
    pub dict: Dictionary,
    pub delta: Multiplier,
    pub history: ScoreHistory,
    pub last_used: Vec<u64>,
    pub timestep: u64,
    pub bootstrapped: bool,
}
