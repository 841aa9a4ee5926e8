//! The streaming dynamic-NMF model: one timestep is a pure function `(model, batch) → (next
//! model, output)`.
//!
//! State (all bounded): the vocabulary (≤ `text.max_terms`), the term counts of the non-empty
//! documents of the last ω timesteps, their topic weights W (f32), and the topics (stable id,
//! birth timestep, last timestep it was dominant for a document, word distribution as a sparse
//! f32 row on the simplex). Numerics: every computation is f64; W and H are rounded once to
//! f32 when the next state is written (halves the store), and the rounded values are what the
//! next step starts from, so a model read back from its parts (`parts.rs`) behaves exactly like
//! the one in memory.

use std::collections::VecDeque;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::factorize::{factorize, nnls_rows, row_residuals, Csr, Settings, Temporal};
use super::fit::{dominant_topics, empty_verdict, fresh_topics, Fit};
use super::hp::{hinge_weights, slope_operator};
use super::init::{init_emerging, seed_emerging};
use super::params::DnmfParams;
use super::weight::weigh;
use crate::model::{EngineError, ParamsError, StepOutput, StepStats, Topic, Verdict};
use crate::text::{Remap, SparseDoc, Tokenizer, Vocabulary};

/// One topic of the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicState {
    /// Stable id (never reused).
    pub id: u32,
    /// Timestep it was injected as an emerging topic.
    pub born: u64,
    /// Last timestep it was the dominant topic of at least one document (or `born`).
    pub last_active: u64,
    /// Word distribution: (term id, probability), ids ascending, values > 0, sum ≈ 1.
    pub row: Vec<(u32, f32)>,
}

/// The documents of one window timestep: (term id, count) pairs per document (non-empty when
/// it entered the window; vocabulary eviction may empty it later).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowStep {
    pub timestep: u64,
    pub docs: Vec<Vec<(u32, u32)>>,
}

/// The dynamic NMF model (Saha & Sindhwani, WSDM 2012) — see the module docs for the state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DnmfModel {
    pub(super) params: DnmfParams,
    pub(super) vocab: Vocabulary,
    pub(super) timestep: u64,
    pub(super) next_id: u32,
    pub(super) window: VecDeque<WindowStep>,
    /// Per window step, n_docs × K (row-major), aligned with `topics`.
    pub(super) weights: Vec<Vec<f32>>,
    pub(super) topics: Vec<TopicState>,
}

impl DnmfModel {
    /// An empty model (no vocabulary, no topics).
    pub fn new(params: DnmfParams) -> Result<DnmfModel, ParamsError> {
        params.validate()?;
        Ok(DnmfModel {
            vocab: Vocabulary::new(params.text.max_terms),
            timestep: 0,
            next_id: 0,
            window: VecDeque::new(),
            weights: Vec::new(),
            topics: Vec::new(),
            params,
        })
    }

    pub fn params(&self) -> &DnmfParams {
        &self.params
    }
    /// Index the next batch gets (0 before the first).
    pub fn timestep(&self) -> u64 {
        self.timestep
    }
    pub fn vocab(&self) -> &Vocabulary {
        &self.vocab
    }
    /// The current topics (evolving set of the next timestep), in model order.
    pub fn topics(&self) -> &[TopicState] {
        &self.topics
    }
    /// The window's documents, oldest timestep first.
    pub fn window(&self) -> impl Iterator<Item = &WindowStep> {
        self.window.iter()
    }

    /// The tokenizer of the model's text parameters.
    pub fn tokenizer(&self) -> Tokenizer {
        self.params.tokenizer()
    }

    /// Process one batch (one timestep). The first batch with a non-empty document learns
    /// `initial_topics` topics from scratch (its verdicts are `bootstrap`); every later batch
    /// keeps the K(t−1) topics as the δ-constrained evolving set and injects `emerging` new
    /// ones.
    pub fn step(&self, texts: &[&str]) -> Result<(DnmfModel, StepOutput), EngineError> {
        let t0 = Instant::now();
        let p = &self.params;
        let ts = self.timestep;
        let mut batch = self.vectorize(texts, t0);
        let n_new = batch.batch_pos.len();
        let k_ev = self.topics.len();
        let bootstrap = k_ev == 0;

        // Nothing to factorise: no new document, or (before any topic exists) no document with
        // weight — e.g. a single first document (IDF 0) or terms all below `min_df`.
        let no_signal = batch.x.val.iter().all(|&v| v == 0.0);
        if n_new == 0 || (bootstrap && no_signal) {
            return Ok(self.idle_step(batch));
        }

        // Topics of this timestep: evolving (previous) + emerging (B, or the initial K).
        let b = if bootstrap {
            p.initial_topics
        } else {
            p.emerging
        };
        let k = k_ev + b;
        let mut start = self.starting_point(&batch, k);
        self.factorise(&mut batch, &mut start, k)?;

        // Round to the stored precision; everything below uses the rounded factors.
        let w: Vec<f64> = start.w.iter().map(|&v| v as f32 as f64).collect();
        self.add_emerging_topics(&mut batch.topics, &start.h, k, batch.vocab.len());
        let next_id = self.next_id + b as u32;
        let dominant = dominant_topics(&batch, &w, k);
        let fresh = fresh_topics(&dominant, &start.rho, k_ev, k, bootstrap, p.fresh_residual);
        let fit = Fit {
            w,
            h: start.h,
            k,
            k_ev,
            bootstrap,
            dominant,
            fresh,
        };

        let t2 = Instant::now();
        let verdicts = fit.verdicts(&batch, p.top_terms.min(10));
        for &i in fit.dominant.iter().flatten() {
            batch.topics[i].last_active = ts;
        }
        let report = fit.report(&batch, &verdicts, p.top_terms);
        batch.stats.novel = verdicts.iter().filter(|v| v.novel).count();
        batch.stats.topics = report.len();
        batch.stats.atoms_injected = b;

        let kept = fit.retained(&batch, p, ts);
        batch.stats.atoms_retired = k - kept.len();
        batch.stats.atoms = kept.len();
        let topics: Vec<TopicState> = kept.iter().map(|&i| batch.topics[i].clone()).collect();
        let new_weights = fit.window_weights(&batch.window, &kept);
        batch.stats.seconds_topics = t2.elapsed().as_secs_f64();
        let next = DnmfModel {
            params: p.clone(),
            vocab: batch.vocab,
            timestep: ts + 1,
            next_id,
            window: batch.window,
            weights: new_weights,
            topics,
        };
        Ok((next, output(verdicts, report, batch.stats)))
    }

    /// Tokenises the batch into a copy of the vocabulary, moves the window on by one timestep
    /// (older documents re-indexed to the new vocabulary, this batch's non-empty documents
    /// appended, the steps beyond ω dropped together with their weights), re-indexes the
    /// topics and builds X over the window. The returned statistics are complete up to the
    /// factorisation; `seconds_vectorize` is the time since `t0`, taken once X is built.
    fn vectorize(&self, texts: &[&str], t0: Instant) -> Batch {
        let p = &self.params;
        let ts = self.timestep;
        let tok = self.tokenizer();
        let tokens: Vec<Vec<String>> = texts.iter().map(|t| tok.tokens(t)).collect();
        let mut vocab = self.vocab.clone();
        let (counts, change) = vocab.observe(&tokens, ts);
        let remap = &change.remap;
        let d = vocab.len();

        // Window: remap old documents, append this batch's non-empty ones, drop the oldest.
        let mut window: VecDeque<WindowStep> = self
            .window
            .iter()
            .map(|w| WindowStep {
                timestep: w.timestep,
                docs: w.docs.iter().map(|c| remap_counts(c, remap)).collect(),
            })
            .collect();
        let mut weights = self.weights.clone();
        let batch_pos: Vec<usize> = (0..texts.len())
            .filter(|&i| !counts[i].is_empty())
            .collect();
        window.push_back(WindowStep {
            timestep: ts,
            docs: batch_pos.iter().map(|&i| counts[i].clone()).collect(),
        });
        while window.len() > p.window {
            window.pop_front();
            weights.remove(0);
        }
        let bootstrap = self.topics.is_empty();
        let topics: Vec<TopicState> = self
            .topics
            .iter()
            .map(|t| TopicState {
                row: remap_row(&t.row, remap),
                ..t.clone()
            })
            .collect();

        let (x, step_of, vecs) = weigh_window(&window, &vocab, p.min_df);
        let n_new = batch_pos.len();
        let stats = StepStats {
            timestep: ts,
            docs: texts.len(),
            empty: texts.len() - n_new,
            new_terms: change.added,
            evicted_terms: change.evicted,
            vocabulary: d,
            bootstrap: bootstrap && n_new > 0,
            seconds_vectorize: t0.elapsed().as_secs_f64(),
            ..Default::default()
        };
        Batch {
            vocab,
            counts,
            window,
            weights,
            topics,
            batch_pos,
            x,
            step_of,
            vecs,
            stats,
        }
    }

    /// The timestep when there is nothing to factorise: the topics stay as they are (none
    /// before bootstrap), the window moves on with an empty step (so no document without
    /// weights enters it), and every verdict is the empty one (`empty` set for the empty
    /// documents).
    fn idle_step(&self, batch: Batch) -> (DnmfModel, StepOutput) {
        let Batch {
            vocab,
            counts,
            mut window,
            weights,
            topics,
            mut stats,
            ..
        } = batch;
        let bootstrap = self.topics.is_empty();
        if let Some(last) = window.back_mut() {
            last.docs.clear();
        }
        let weights = if bootstrap {
            window.iter().map(|_| Vec::new()).collect()
        } else {
            let mut w = weights;
            w.push(Vec::new());
            w
        };
        stats.bootstrap = false;
        stats.atoms = topics.len();
        let verdicts = (0..stats.docs)
            .map(|i| Verdict {
                empty: counts[i].is_empty(),
                ..empty_verdict()
            })
            .collect();
        let next = DnmfModel {
            params: self.params.clone(),
            vocab,
            timestep: self.timestep + 1,
            next_id: self.next_id,
            weights,
            window,
            topics,
        };
        (next, output(verdicts, Vec::new(), stats))
    }

    /// The starting point of the factorisation with `k` topics, evolving ones first. H: the
    /// evolving rows are the previous distributions (renormalised after eviction), the
    /// emerging rows random points of the simplex, then (with `seeded_init`) seeded from the
    /// poorly explained new documents. W: old documents keep their weights on evolving topics
    /// (W11) and start at 0 on the emerging ones (W12); new documents get NNLS weights on the
    /// evolving topics (W21) and random weights on the emerging ones scaled by the best α
    /// (W22). The random numbers are drawn from the timestep's seed in exactly that order.
    fn starting_point(&self, batch: &Batch, k: usize) -> Start {
        let p = &self.params;
        let ts = self.timestep;
        let k_ev = self.topics.len();
        let x = &batch.x;
        let d = batch.vocab.len();
        let n = x.rows();
        let n_new = batch.batch_pos.len();
        let first_new = n - n_new;
        let mut rng =
            ChaCha8Rng::seed_from_u64(p.seed ^ (ts + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let prev: Vec<Vec<f64>> = batch.topics.iter().map(|t| dense_row(&t.row, d)).collect();
        let mut h = vec![0.0; k * d];
        for (i, r) in prev.iter().enumerate() {
            h[i * d..(i + 1) * d].copy_from_slice(r);
        }
        for i in k_ev..k {
            let row = &mut h[i * d..(i + 1) * d];
            let mut s = 0.0;
            for v in row.iter_mut() {
                *v = rng.random::<f64>();
                s += *v;
            }
            for v in row.iter_mut() {
                *v /= s.max(1e-300);
            }
        }
        let mut w = carried_weights(batch, n, k, k_ev);
        if k_ev > 0 && n_new > 0 {
            nnls_rows(x, &h, &mut w, k, first_new..n, 0..k_ev, p.init_sweeps);
        }
        // How badly the previous topics alone explain each new document (1 before any topic).
        let rho = if k_ev > 0 {
            row_residuals(x, &h, &w, k, first_new..n, 0..k_ev)
        } else {
            vec![1.0; n_new]
        };
        if p.seeded_init && n_new > 0 {
            seed_emerging(x, &mut h, k_ev, k, first_new, &rho, &mut rng);
        }
        init_emerging(x, &h, &mut w, k, k_ev, first_new..n, &mut rng);
        Start { prev, w, h, rho }
    }

    /// Runs the temporally regularised factorisation of the window from `start` (W and H
    /// updated in place) and records its time and iterations in the batch's statistics.
    /// Fails if a factor is not finite.
    fn factorise(&self, batch: &mut Batch, start: &mut Start, k: usize) -> Result<(), EngineError> {
        let p = &self.params;
        let bootstrap = self.topics.is_empty();
        let t_steps = batch.window.len();
        let temporal = Temporal {
            step: batch.step_of.clone(),
            n_steps: t_steps,
            slope: slope_operator(t_steps, p.trend_lambda),
            weights: hinge_weights(t_steps),
        };
        let settings = Settings {
            delta: p.delta,
            mu: if bootstrap { 0.0 } else { p.mu },
            nu: p.nu,
            max_iter: p.iterations,
            tol: p.tol,
            pg_iter: p.pg_iterations,
        };
        let t1 = Instant::now();
        let fs = factorize(
            &batch.x,
            &temporal,
            &start.prev,
            &settings,
            &mut start.w,
            &mut start.h,
            k,
        );
        batch.stats.seconds_update = t1.elapsed().as_secs_f64();
        batch.stats.mean_iterations = fs.iterations as f64;
        if start.w.iter().chain(start.h.iter()).any(|v| !v.is_finite()) {
            return Err(EngineError::NonFinite("dynamic NMF factors"));
        }
        Ok(())
    }

    /// Appends the emerging topics (rows `k_ev..k` of H) to `topics`, born now with ids from
    /// the model's next id on, and sets every topic's word distribution to its row of H
    /// rounded to f32 (zeros dropped).
    fn add_emerging_topics(&self, topics: &mut Vec<TopicState>, h: &[f64], k: usize, d: usize) {
        let ts = self.timestep;
        let k_ev = self.topics.len();
        for i in k_ev..k {
            topics.push(TopicState {
                id: self.next_id + (i - k_ev) as u32,
                born: ts,
                last_active: ts,
                row: Vec::new(),
            });
        }
        for (i, t) in topics.iter_mut().enumerate() {
            t.row = sparse_row(&h[i * d..(i + 1) * d]);
        }
    }
}

/// This timestep's view of the stream: the vocabulary after the batch, the window moved on
/// by one step, the previous topics re-indexed to the vocabulary, and X over the window.
pub(super) struct Batch {
    pub(super) vocab: Vocabulary,
    /// (term id, count) pairs of every text of the batch, in batch order.
    pub(super) counts: Vec<Vec<(u32, u32)>>,
    pub(super) window: VecDeque<WindowStep>,
    /// W of the window steps before this batch's, oldest first.
    pub(super) weights: Vec<Vec<f32>>,
    pub(super) topics: Vec<TopicState>,
    /// Batch positions of the non-empty documents: the rows of X after the older steps'.
    pub(super) batch_pos: Vec<usize>,
    /// The window's weighted documents, rows oldest first.
    pub(super) x: Csr,
    /// Window step of each row of X.
    pub(super) step_of: Vec<usize>,
    /// Each row of X as a document vector.
    pub(super) vecs: Vec<SparseDoc>,
    pub(super) stats: StepStats,
}

/// The factors the factorisation starts from (and, after it, its result).
struct Start {
    /// The previous topics' distributions over the current vocabulary (the δ-box centres).
    prev: Vec<Vec<f64>>,
    /// W, n × k row-major.
    w: Vec<f64>,
    /// H, k × d row-major.
    h: Vec<f64>,
    /// Relative residual of each new document under the previous topics alone.
    rho: Vec<f64>,
}

/// X over the window, rows oldest first (each document weighed against `vocab`), with the
/// window step of each row and each row as a document vector.
fn weigh_window(
    window: &VecDeque<WindowStep>,
    vocab: &Vocabulary,
    min_df: u64,
) -> (Csr, Vec<usize>, Vec<SparseDoc>) {
    let mut x = Csr {
        cols: vocab.len(),
        ptr: vec![0],
        ..Default::default()
    };
    let mut step_of = Vec::new();
    let mut vecs: Vec<SparseDoc> = Vec::new();
    for (s, w) in window.iter().enumerate() {
        for c in &w.docs {
            let v = weigh(c, vocab, min_df);
            x.idx.extend_from_slice(&v.ids);
            x.val.extend_from_slice(&v.vals);
            x.ptr.push(x.idx.len());
            step_of.push(s);
            vecs.push(v);
        }
    }
    (x, step_of, vecs)
}

/// W's starting rows for the documents of the older window steps (n × k, zero elsewhere):
/// their stored weights on the `k_ev` evolving topics, 0 where none is stored.
fn carried_weights(batch: &Batch, n: usize, k: usize, k_ev: usize) -> Vec<f64> {
    let t_steps = batch.window.len();
    let mut w = vec![0.0; n * k];
    let mut r = 0;
    for (s, ws) in batch.weights.iter().enumerate() {
        let nd = batch.window[s].docs.len();
        if s + 1 == t_steps {
            break;
        }
        for dd in 0..nd {
            for i in 0..k_ev {
                w[(r + dd) * k + i] = ws.get(dd * k_ev + i).copied().unwrap_or(0.0) as f64;
            }
        }
        r += nd;
    }
    w
}

fn output(verdicts: Vec<Verdict>, topics: Vec<Topic>, stats: StepStats) -> StepOutput {
    StepOutput {
        verdicts,
        vectors: Vec::new(),
        codes: Vec::new(),
        topics,
        stats,
        hybrid: Vec::new(),
        seconds_hybrid: 0.0,
    }
}

/// Apply a vocabulary remap to (id, count) pairs (evicted ids dropped; order kept, since the
/// remap is monotone).
fn remap_counts(c: &[(u32, u32)], remap: &Remap) -> Vec<(u32, u32)> {
    c.iter()
        .filter_map(|&(id, n)| remap.get(id as usize).map(|r| (r as u32, n)))
        .collect()
}

fn remap_row(row: &[(u32, f32)], remap: &Remap) -> Vec<(u32, f32)> {
    row.iter()
        .filter_map(|&(id, v)| remap.get(id as usize).map(|r| (r as u32, v)))
        .collect()
}

/// Dense f64 row of length d, renormalised to sum 1 (mass on evicted terms is gone); uniform
/// if nothing is left.
fn dense_row(row: &[(u32, f32)], d: usize) -> Vec<f64> {
    let mut v = vec![0.0; d];
    let mut s = 0.0;
    for &(id, x) in row {
        v[id as usize] = x as f64;
        s += x as f64;
    }
    if s > 0.0 {
        for x in v.iter_mut() {
            *x /= s;
        }
    } else if d > 0 {
        v.fill(1.0 / d as f64);
    }
    v
}

fn sparse_row(h: &[f64]) -> Vec<(u32, f32)> {
    h.iter()
        .enumerate()
        .filter_map(|(j, &v)| {
            let f = v as f32;
            (f > 0.0).then_some((j as u32, f))
        })
        .collect()
}
