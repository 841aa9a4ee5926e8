//! The streaming OSTC model: one timestep is a pure function (model, batch) → (model, output).
//!
//! A timestep: tokenize; observe the vocabulary (new terms get a small uniform mass in every
//! topic, evicted terms' rows are dropped, topics renormalised); code every document under the
//! current β and score it; threshold the scores; then learn: `passes` sweeps over the batch in
//! seeded random mini-batches of `batch_size` documents, each one dictionary step with
//! α_t = τ₀/(t + τ) (t counts mini-batch updates over the model's life): by default the
//! stochastic-EM step, or the paper's projected-gradient step β ← Π_P(β − α_t ĝ) (`step_rule`).
//! The first batch with a non-empty document initialises β and is the bootstrap batch (never
//! novel, `bootstrap_passes` sweeps).
//!
//! Score (see [`ScoreRule`]; default `contrast`): the document's held-out negative
//! log-likelihood per token under β by document completion (its tokens split alternately into
//! two halves, each half's topic proportions fitted by fold-in score the other half) minus
//! a = 0.75 times its NLL per token under the mean topic, r = r_completion − a·r_background,
//! mapped into (0, 1) by 1/(1 + exp(−r/c)) (c = 2 nats) so that the score histogram of
//! [`crate::threshold`] applies. Larger = worse explained by the topics = more novel. The
//! coding objective per token (the `objective` rule, r/(1 + r)) saturates at ≈ 0.999: every
//! token no topic explains costs −ln ε ≈ 13.8 nats.
//!
//! Numerics: β is stored as `f32` (N × K), all arithmetic in `f64`; documents are coded in
//! parallel with rayon but every reduction runs in document order, so results do not depend on
//! the thread count.

use std::collections::BTreeMap;
use std::time::Instant;

use ndarray::Array2;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::model::{
    judged, Decided, EngineError, Judge, ParamsError, Scored, StepOutput, StepStats, Topic,
    TopicKind, Verdict,
};
use crate::ostc::coding::{CodeParams, DocCode};
use crate::ostc::dictionary::{
    check_dictionary, init_dictionary, init_dictionary_from_docs, learning_rate, remap_dictionary,
    step, StepRule,
};
use crate::text::{tfidf_l1, SparseDoc, Tokenizer, Vocabulary};
use crate::threshold::{decide, ScoreHistory, ThresholdRule, BINS};

pub use crate::ostc::params::OstcParams;
pub use crate::ostc::score::{
    code_block, code_counts, completion_nll, doc_block, doc_score, per_token_nll, score_of,
    split_tokens,
};

/// Weight of the corpus term frequencies in a document-seeded initial topic.
const INIT_BACKGROUND: f64 = 0.5;

/// `passes` sweeps of online learning over `docs` (lists of (id, count)) in seeded random
/// mini-batches of `m`; `t` is the running update counter and `mass` the per-topic mass of
/// [`StepRule::Stats`] (both advanced). Pure in β.
#[allow(clippy::too_many_arguments)]
pub fn learn(
    beta: &Array2<f32>,
    docs: &[&[(u32, u32)]],
    p: &CodeParams,
    collapsed: bool,
    m: usize,
    passes: u32,
    (tau0, tau): (f64, f64),
    (rule, smooth): (StepRule, f64),
    (t, mass): (&mut u64, &mut Vec<f64>),
    rng: &mut ChaCha8Rng,
) -> Array2<f32> {
    let mut beta = beta.clone();
    let mut order: Vec<usize> = (0..docs.len()).filter(|&i| !docs[i].is_empty()).collect();
    if order.is_empty() {
        return beta;
    }
    for _ in 0..passes {
        order.shuffle(rng);
        for chunk in order.chunks(m.max(1)) {
            let codes: Vec<DocCode> = chunk
                .par_iter()
                .map(|&i| code_counts(docs[i], &beta, p, collapsed))
                .collect();
            let ids: Vec<Vec<u32>> = chunk
                .iter()
                .map(|&i| docs[i].iter().map(|c| c.0).collect())
                .collect();
            let ws: Vec<Vec<f64>> = chunk
                .iter()
                .map(|&i| docs[i].iter().map(|c| c.1 as f64).collect())
                .collect();
            let parts: Vec<(&[u32], &[f64], &DocCode)> = (0..chunk.len())
                .map(|j| (ids[j].as_slice(), ws[j].as_slice(), &codes[j]))
                .collect();
            let rate = learning_rate(*t, tau0, tau);
            beta = step(&beta, &parts, rate, (rule, smooth), mass);
            *t += 1;
        }
    }
    beta
}

/// Version of the `meta` part: 1 = scores by the `objective` rule (before [`ScoreRule`]),
/// 2 = scores by `params.score`. A version-1 store loads with an empty score history.
const META_VERSION: u32 = 2;

/// Persisted counters of the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Meta {
    version: u32,
    timestep: u64,
    updates: u64,
    initialised: bool,
    k: usize,
    terms: usize,
}

/// The streaming OSTC model. Invariants: `beta` is `vocab.len() × params.k` (or 0 × k before
/// the first non-empty document), finite, every topic on the simplex within
/// [`crate::ostc::dictionary::SIMPLEX_TOL`]; `history` has [`BINS`] finite weights.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OstcModel {
    params: OstcParams,
    vocab: Vocabulary,
    beta: Array2<f32>,
    history: ScoreHistory,
    timestep: u64,
    /// Mini-batch updates carried out (t of α_t).
    updates: u64,
    /// Per-topic mass T_k of [`StepRule::Stats`] (K finite values ≥ 0 once that rule has
    /// stepped; empty before, and for the other rules).
    mass: Vec<f64>,
    initialised: bool,
}

impl OstcModel {
    pub fn new(params: OstcParams) -> Result<OstcModel, ParamsError> {
        params.validate()?;
        Ok(OstcModel {
            vocab: Vocabulary::new(params.text.max_terms),
            beta: Array2::zeros((0, params.k)),
            history: ScoreHistory::default(),
            timestep: 0,
            updates: 0,
            mass: Vec::new(),
            initialised: false,
            params,
        })
    }
    pub fn params(&self) -> &OstcParams {
        &self.params
    }
    /// Index the next batch gets (0 before the first).
    pub fn timestep(&self) -> u64 {
        self.timestep
    }
    pub fn vocab(&self) -> &Vocabulary {
        &self.vocab
    }
    /// β, N × K (row = term, column = topic on the simplex).
    pub fn beta(&self) -> &Array2<f32> {
        &self.beta
    }
    pub fn history(&self) -> &ScoreHistory {
        &self.history
    }
    /// Mini-batch updates so far.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    fn tokenizer(&self) -> Tokenizer {
        self.params.tokenizer()
    }

    /// Process one batch. Pure: `self` is not modified.
    pub fn step(&self, texts: &[&str]) -> Result<(OstcModel, StepOutput), EngineError> {
        self.step_judged(texts, None)
    }

    /// [`Self::step`] with novelty decided by `judge` instead of the model's threshold (the
    /// model's score history is still kept; topics group the judge's novel documents). The
    /// judge sees the batch's TF-IDF vectors, which the output then carries too.
    pub fn step_judged(
        &self,
        texts: &[&str],
        mut judge: Option<&mut (dyn Judge + '_)>,
    ) -> Result<(OstcModel, StepOutput), EngineError> {
        let t0 = Instant::now();
        let p = &self.params;
        let cp = p.code();
        let tok = self.tokenizer();
        let tokens: Vec<Vec<String>> = texts.iter().map(|d| tok.tokens(d)).collect();
        let mut vocab = self.vocab.clone();
        let (counts, change) = vocab.observe(&tokens, self.timestep);
        let n = texts.len();
        let eligible: Vec<bool> = counts.iter().map(|c| !c.is_empty()).collect();
        let any_doc = eligible.iter().any(|&e| e);
        let is_bootstrap = !self.initialised && any_doc;
        let mut rng =
            ChaCha8Rng::seed_from_u64(p.seed ^ self.timestep.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let beta = if is_bootstrap {
            let mut tf = vec![0.0; vocab.len()];
            for c in &counts {
                for &(id, w) in c {
                    tf[id as usize] += w as f64;
                }
            }
            if p.init_docs == 0 {
                init_dictionary(vocab.len(), p.k, &tf, p.init_data_weight, &mut rng)
            } else {
                let docs: Vec<&[(u32, u32)]> = counts.iter().map(|c| c.as_slice()).collect();
                init_dictionary_from_docs(
                    vocab.len(),
                    p.k,
                    &tf,
                    &docs,
                    p.init_docs,
                    INIT_BACKGROUND,
                    &mut rng,
                )
            }
        } else if self.initialised {
            remap_dictionary(&self.beta, &change.remap, p.new_term_mass)
        } else {
            Array2::zeros((0, p.k))
        };
        let mut stats = StepStats {
            timestep: self.timestep,
            docs: n,
            empty: eligible.iter().filter(|&&e| !e).count(),
            new_terms: change.added,
            evicted_terms: change.evicted,
            vocabulary: vocab.len(),
            bootstrap: is_bootstrap,
            atoms: p.k,
            seconds_vectorize: t0.elapsed().as_secs_f64(),
            ..Default::default()
        };

        // Score every document under β_t (before learning from the batch).
        let t1 = Instant::now();
        let scored: Vec<Option<(DocCode, f64)>> = counts
            .par_iter()
            .map(|c| {
                (!c.is_empty()).then(|| {
                    let blk = doc_block(c, &beta);
                    let code = code_block(&blk, &cp, p.collapsed);
                    let score = doc_score(&blk, &code, p);
                    (code, score)
                })
            })
            .collect();
        let scores: Vec<f64> = scored
            .iter()
            .map(|c| c.as_ref().map_or(0.0, |c| c.1))
            .collect();
        let codes: Vec<Option<DocCode>> = scored.into_iter().map(|c| c.map(|c| c.0)).collect();
        if scores.iter().any(|s| !s.is_finite()) {
            return Err(EngineError::NonFinite("scores"));
        }
        stats.seconds_coding = t1.elapsed().as_secs_f64();
        let silent = !self.initialised || is_bootstrap;
        let vectors: Vec<SparseDoc> = if judge.is_some() {
            counts
                .iter()
                .map(|c| tfidf_l1(c, |id| vocab.df(id), vocab.docs_seen()))
                .collect()
        } else {
            Vec::new()
        };
        let scored = Scored {
            vectors: &vectors,
            vocab: &vocab,
            scores: &scores,
            eligible: &eligible,
            silent,
            rule: &p.threshold,
        };
        let Decided {
            novel,
            threshold: thr,
            topical,
            ..
        } = judged(judge.take(), &scored, || {
            if silent {
                (vec![false; n], f64::INFINITY)
            } else {
                decide(&p.threshold, &self.history, &scores, &eligible)
            }
        })?;
        stats.threshold = thr.is_finite().then_some(thr);
        let mut history = self.history.clone();
        let kept: Vec<f64> = scores
            .iter()
            .zip(&eligible)
            .filter(|(_, &e)| e)
            .map(|(&s, _)| s)
            .collect();
        if self.initialised && !kept.is_empty() {
            let half_life = match p.threshold {
                ThresholdRule::Adaptive { half_life, .. } => half_life,
                _ => 0.0,
            };
            history.update(&kept, half_life);
        }

        // Learn from the batch.
        let t2 = Instant::now();
        let mut updates = self.updates;
        let mut mass = self.mass.clone();
        let initialised = self.initialised || any_doc;
        let beta = if initialised && any_doc {
            let docs: Vec<&[(u32, u32)]> = counts.iter().map(|c| c.as_slice()).collect();
            let passes = if is_bootstrap {
                p.bootstrap_passes
            } else {
                p.passes
            };
            learn(
                &beta,
                &docs,
                &cp,
                p.collapsed,
                p.batch_size,
                passes,
                (p.tau0, p.tau),
                (p.step_rule, p.em_smooth),
                (&mut updates, &mut mass),
                &mut rng,
            )
        } else {
            beta
        };
        if beta.iter().any(|v| !v.is_finite()) {
            return Err(EngineError::NonFinite("topic dictionary β"));
        }
        stats.seconds_update = t2.elapsed().as_secs_f64();

        // Topics: the novel documents the judgement groups (all of them without a judge), by
        // their dominant topic (argmax θ under β_t).
        let t3 = Instant::now();
        let dominant: Vec<Option<usize>> = codes
            .iter()
            .map(|c| {
                c.as_ref().and_then(|c| {
                    let (j, &v) = c
                        .theta
                        .iter()
                        .enumerate()
                        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))?;
                    (v > 0.0).then_some(j)
                })
            })
            .collect();
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for j in 0..n {
            if topical[j] {
                if let Some(k) = dominant[j] {
                    groups.entry(k).or_default().push(j);
                }
            }
        }
        let mut topics: Vec<Topic> = groups
            .into_iter()
            .filter(|(_, m)| m.len() >= p.min_support)
            .map(|(k, members)| {
                let mut terms: Vec<(u32, f32)> = beta
                    .column(k)
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| (i as u32, v))
                    .collect();
                terms.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                terms.truncate(p.top_terms);
                let mut reps = members.clone();
                let th = |j: usize| codes[j].as_ref().map_or(0.0, |c| c.theta[k]);
                reps.sort_by(|&a, &b| th(b).total_cmp(&th(a)).then(a.cmp(&b)));
                reps.truncate(p.representatives);
                let mean_score =
                    members.iter().map(|&j| scores[j]).sum::<f64>() / members.len() as f64;
                Topic {
                    atom: k as u32,
                    strength: members.len() as f64 / n.max(1) as f64,
                    members,
                    terms,
                    atom_vector: Vec::new(),
                    representatives: reps,
                    mean_score,
                    kind: TopicKind::Emerging,
                    profile: Vec::new(),
                    event: None,
                }
            })
            .collect();
        topics.sort_by(|a, b| {
            b.members
                .len()
                .cmp(&a.members.len())
                .then(a.atom.cmp(&b.atom))
        });
        stats.topics = topics.len();
        stats.seconds_topics = t3.elapsed().as_secs_f64();

        let coded: Vec<&DocCode> = codes.iter().flatten().collect();
        let nk = coded.len().max(1) as f64;
        stats.mean_iterations = coded.iter().map(|c| c.sweeps as f64).sum::<f64>() / nk;
        stats.mean_code_nnz = coded
            .iter()
            .map(|c| c.theta.iter().filter(|&&v| v > 0.0).count() as f64)
            .sum::<f64>()
            / nk;
        stats.atoms_used = (0..p.k)
            .filter(|&k| coded.iter().any(|c| c.theta[k] > 0.0))
            .count();
        stats.novel = novel.iter().filter(|&&b| b).count();

        let verdicts = (0..n)
            .map(|j| {
                let terms = match &codes[j] {
                    Some(c) => {
                        let w: Vec<f64> = counts[j].iter().map(|&(_, w)| w as f64).collect();
                        let mut l: Vec<(u32, f64)> = counts[j]
                            .iter()
                            .map(|c| c.0)
                            .zip(c.word_losses(&w))
                            .collect();
                        l.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                        l.truncate(p.why_terms);
                        l.into_iter()
                            .map(|(id, v)| (vocab.term(id).to_string(), v))
                            .collect()
                    }
                    None => Vec::new(),
                };
                Verdict {
                    score: scores[j],
                    novel: novel[j],
                    bootstrap: is_bootstrap,
                    empty: !eligible[j],
                    at_ceiling: false,
                    terms,
                }
            })
            .collect();
        let model = OstcModel {
            params: self.params.clone(),
            vocab,
            beta,
            history,
            timestep: self.timestep + 1,
            updates,
            mass,
            initialised,
        };
        Ok((
            model,
            StepOutput {
                verdicts,
                vectors,
                codes: Vec::new(),
                topics,
                stats,
                hybrid: Vec::new(),
                seconds_hybrid: 0.0,
            },
        ))
    }

    /// The persisted state as named parts (postcard): `meta`, `vocab`, `beta`, `history`,
    /// `mass` (empty unless the step rule is `stats`; stores written before it existed load
    /// with it empty). A part whose content did not change encodes to identical bytes.
    pub fn state_parts(&self) -> Vec<(String, Vec<u8>)> {
        let meta = Meta {
            version: META_VERSION,
            timestep: self.timestep,
            updates: self.updates,
            initialised: self.initialised,
            k: self.beta.ncols(),
            terms: self.beta.nrows(),
        };
        use crate::model::part_bytes as enc;
        vec![
            ("meta".to_string(), enc(&meta)),
            ("vocab".to_string(), enc(&self.vocab)),
            (
                "beta".to_string(),
                enc(&(
                    self.beta.nrows() as u64,
                    self.beta.ncols() as u64,
                    self.beta.iter().copied().collect::<Vec<f32>>(),
                )),
            ),
            ("history".to_string(), enc(&self.history)),
            ("mass".to_string(), enc(&self.mass)),
        ]
    }

    /// Rebuild from [`OstcModel::state_parts`], checking every invariant.
    pub fn from_state_parts(
        params: OstcParams,
        parts: &BTreeMap<String, Vec<u8>>,
    ) -> Result<OstcModel, EngineError> {
        params.validate()?;
        fn get<'a>(
            parts: &'a BTreeMap<String, Vec<u8>>,
            name: &str,
        ) -> Result<&'a [u8], EngineError> {
            parts
                .get(name)
                .map(|v| v.as_slice())
                .ok_or_else(|| EngineError::Inconsistent(format!("missing state part `{name}`")))
        }
        fn dec<T: for<'de> Deserialize<'de>>(b: &[u8], name: &str) -> Result<T, EngineError> {
            postcard::from_bytes(b).map_err(|e| {
                EngineError::Inconsistent(format!("state part `{name}` does not decode: {e}"))
            })
        }
        let meta: Meta = dec(get(parts, "meta")?, "meta")?;
        if !(1..=META_VERSION).contains(&meta.version) {
            return Err(EngineError::Inconsistent(format!(
                "state part `meta` has version {}, expected 1..={META_VERSION}",
                meta.version
            )));
        }
        let vocab: Vocabulary = dec(get(parts, "vocab")?, "vocab")?;
        let (rows, cols, data): (u64, u64, Vec<f32>) = dec(get(parts, "beta")?, "beta")?;
        let mut history: ScoreHistory = dec(get(parts, "history")?, "history")?;
        let bad = |s: String| Err(EngineError::Inconsistent(s));
        if cols as usize != params.k || meta.k != params.k {
            return bad(format!(
                "state part `beta` has {cols} topics, the parameters say k = {}",
                params.k
            ));
        }
        if (rows as usize) != meta.terms || data.len() as u64 != rows * cols {
            return bad(format!(
                "state part `beta` has {} values for {rows} × {cols}",
                data.len()
            ));
        }
        let expect_rows = if meta.initialised { vocab.len() } else { 0 };
        if rows as usize != expect_rows {
            return bad(format!(
                "state part `beta` has {rows} term rows, the vocabulary has {} terms",
                vocab.len()
            ));
        }
        if data.iter().any(|v| !v.is_finite()) {
            return Err(EngineError::NonFinite("state part `beta`"));
        }
        let beta = Array2::from_shape_vec((rows as usize, cols as usize), data)
            .map_err(|e| EngineError::Inconsistent(format!("state part `beta`: {e}")))?;
        if let Err(e) = check_dictionary(&beta) {
            return bad(format!("state part `beta` is not a topic dictionary: {e}"));
        }
        if history.weights.len() != BINS {
            return bad(format!(
                "state part `history` has {} bins, expected {BINS}",
                history.weights.len()
            ));
        }
        if history.weights.iter().any(|w| !w.is_finite() || *w < 0.0) || !history.total.is_finite()
        {
            return Err(EngineError::NonFinite("state part `history`"));
        }
        if vocab.max_terms() != params.text.max_terms {
            return bad(format!(
                "state part `vocab` has bound {}, the parameters say {}",
                vocab.max_terms(),
                params.text.max_terms
            ));
        }
        let mass: Vec<f64> = match parts.get("mass") {
            Some(b) => dec(b, "mass")?,
            None => Vec::new(),
        };
        if !(mass.is_empty() || mass.len() == params.k) {
            return bad(format!(
                "state part `mass` has {} values, the parameters say k = {}",
                mass.len(),
                params.k
            ));
        }
        if mass.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(EngineError::NonFinite("state part `mass`"));
        }
        if meta.version < 2 {
            // version 1 stored scores of the saturating `objective` rule: a histogram in other
            // units than the current rule's; start the adaptive threshold afresh.
            history = ScoreHistory::default();
        }
        Ok(OstcModel {
            params,
            vocab,
            beta,
            history,
            timestep: meta.timestep,
            updates: meta.updates,
            mass,
            initialised: meta.initialised,
        })
    }
}
