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
use super::hp::{hinge_weights, slope_operator};
use super::init::{init_emerging, seed_emerging};
use super::params::DnmfParams;
use super::weight::weigh;
use crate::model::{EngineError, ParamsError, StepOutput, StepStats, Topic, TopicKind, Verdict};
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
        self.params.text.tokenizer()
    }

    /// Process one batch (one timestep). The first batch with a non-empty document learns
    /// `initial_topics` topics from scratch (its verdicts are `bootstrap`); every later batch
    /// keeps the K(t−1) topics as the δ-constrained evolving set and injects `emerging` new
    /// ones.
    pub fn step(&self, texts: &[&str]) -> Result<(DnmfModel, StepOutput), EngineError> {
        let t0 = Instant::now();
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
        let k_ev = self.topics.len();
        let bootstrap = k_ev == 0;
        let mut topics: Vec<TopicState> = self
            .topics
            .iter()
            .map(|t| TopicState {
                row: remap_row(&t.row, remap),
                ..t.clone()
            })
            .collect();

        // X over the window, rows oldest first.
        let mut x = Csr {
            cols: d,
            ptr: vec![0],
            ..Default::default()
        };
        let mut step_of = Vec::new();
        let mut vecs: Vec<SparseDoc> = Vec::new();
        for (s, w) in window.iter().enumerate() {
            for c in &w.docs {
                let v = weigh(c, &vocab, p.min_df);
                x.idx.extend_from_slice(&v.ids);
                x.val.extend_from_slice(&v.vals);
                x.ptr.push(x.idx.len());
                step_of.push(s);
                vecs.push(v);
            }
        }
        let n = x.rows();
        let n_new = batch_pos.len();
        let first_new = n - n_new;
        let t_steps = window.len();
        let mut stats = StepStats {
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

        // Nothing to factorise: no new document, or (before any topic exists) no document with
        // weight — e.g. a single first document (IDF 0) or terms all below `min_df`. Topics stay
        // as they are (none before bootstrap); the window moves on with an empty step, so no
        // document without weights enters it.
        let no_signal = x.val.iter().all(|&v| v == 0.0);
        if n_new == 0 || (bootstrap && no_signal) {
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
            let verdicts = (0..texts.len())
                .map(|i| Verdict {
                    empty: counts[i].is_empty(),
                    ..empty_verdict()
                })
                .collect();
            let next = DnmfModel {
                params: p.clone(),
                vocab,
                timestep: ts + 1,
                next_id: self.next_id,
                weights,
                window,
                topics,
            };
            return Ok((next, output(verdicts, Vec::new(), stats)));
        }

        // Topics of this timestep: evolving (previous) + emerging (B, or the initial K).
        let b = if bootstrap {
            p.initial_topics
        } else {
            p.emerging
        };
        let k = k_ev + b;
        let mut rng =
            ChaCha8Rng::seed_from_u64(p.seed ^ (ts + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let prev: Vec<Vec<f64>> = topics.iter().map(|t| dense_row(&t.row, d)).collect();
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
        // W: old documents keep their weights on evolving topics (W11) and start at 0 on the
        // emerging ones (W12); new documents get NNLS weights on the evolving topics (W21) and
        // random weights on the emerging ones scaled by the best α (W22).
        let mut w = vec![0.0; n * k];
        {
            let mut r = 0;
            for (s, ws) in weights.iter().enumerate() {
                let nd = window[s].docs.len();
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
        }
        if k_ev > 0 && n_new > 0 {
            nnls_rows(&x, &h, &mut w, k, first_new..n, 0..k_ev, p.init_sweeps);
        }
        // How badly the previous topics alone explain each new document (1 before any topic).
        let rho = if k_ev > 0 {
            row_residuals(&x, &h, &w, k, first_new..n, 0..k_ev)
        } else {
            vec![1.0; n_new]
        };
        if p.seeded_init && n_new > 0 {
            seed_emerging(&x, &mut h, k_ev, k, first_new, &rho, &mut rng);
        }
        init_emerging(&x, &h, &mut w, k, k_ev, first_new..n, &mut rng);

        let temporal = Temporal {
            step: step_of.clone(),
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
        let fs = factorize(&x, &temporal, &prev, &settings, &mut w, &mut h, k);
        stats.seconds_update = t1.elapsed().as_secs_f64();
        stats.mean_iterations = fs.iterations as f64;
        if w.iter().chain(h.iter()).any(|v| !v.is_finite()) {
            return Err(EngineError::NonFinite("dynamic NMF factors"));
        }

        // Round to the stored precision; everything below uses the rounded factors.
        let w: Vec<f64> = w.iter().map(|&v| v as f32 as f64).collect();
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
        let next_id = self.next_id + b as u32;

        // Dominant topic of each new document.
        let dominant: Vec<Option<usize>> = (0..n_new)
            .map(|q| {
                let r = first_new + q;
                let wr = &w[r * k..(r + 1) * k];
                if vecs[r].is_empty() || wr.iter().sum::<f64>() <= 0.0 {
                    return None;
                }
                let mut best = 0;
                for i in 1..k {
                    if wr[i] > wr[best] {
                        best = i;
                    }
                }
                Some(best)
            })
            .collect();
        // An emerging topic is a new theme (its documents novel) when the previous topics
        // explained its documents badly: mean relative residual ≥ fresh_residual. Otherwise
        // it is a split of existing themes (NMF uses spare bandwidth to split drifting
        // topics).
        let fresh: Vec<bool> = (0..k)
            .map(|i| {
                if bootstrap || i < k_ev {
                    return false;
                }
                let members: Vec<f64> = (0..n_new)
                    .filter(|&q| dominant[q] == Some(i))
                    .map(|q| rho[q])
                    .collect();
                !members.is_empty()
                    && members.iter().sum::<f64>() / members.len() as f64 >= p.fresh_residual
            })
            .collect();

        // Verdicts of the batch.
        let t2 = Instant::now();
        let mut verdicts: Vec<Verdict> = texts.iter().map(|_| empty_verdict()).collect();
        for (q, &pos) in batch_pos.iter().enumerate() {
            let r = first_new + q;
            let wr = &w[r * k..(r + 1) * k];
            let total: f64 = wr.iter().sum();
            let v = &mut verdicts[pos];
            v.empty = false;
            v.bootstrap = bootstrap;
            let Some(best) = dominant[q] else { continue };
            let em: f64 = (k_ev..k).filter(|&i| fresh[i]).map(|i| wr[i]).sum();
            v.score = if bootstrap {
                0.0
            } else {
                (em / total).clamp(0.0, 1.0)
            };
            v.novel = fresh[best];
            v.terms = why_terms(
                &vecs[r],
                &h[best * d..(best + 1) * d],
                &vocab,
                p.top_terms.min(10),
            );
        }
        for &i in dominant.iter().flatten() {
            topics[i].last_active = ts;
        }

        // Topic report: every topic dominant for at least one document of the batch.
        let step_totals: Vec<f64> = (0..t_steps)
            .map(|s| {
                (0..n)
                    .filter(|&r| step_of[r] == s)
                    .map(|r| w[r * k..(r + 1) * k].iter().sum::<f64>())
                    .sum()
            })
            .collect();
        let mut report = Vec::new();
        for i in 0..k {
            let members: Vec<usize> = (0..n_new)
                .filter(|&q| dominant[q] == Some(i))
                .map(|q| batch_pos[q])
                .collect();
            if members.is_empty() {
                continue;
            }
            let mut col_step = vec![0.0; t_steps];
            for r in 0..n {
                col_step[step_of[r]] += w[r * k + i];
            }
            let profile: Vec<f32> = col_step
                .iter()
                .zip(&step_totals)
                .map(|(a, t)| if *t > 0.0 { (a / t) as f32 } else { 0.0 })
                .collect();
            let strength = *profile.last().unwrap_or(&0.0) as f64;
            let mut reps: Vec<(usize, f64)> = (0..n_new)
                .filter(|&q| dominant[q] == Some(i))
                .map(|q| (batch_pos[q], w[(first_new + q) * k + i]))
                .collect();
            reps.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let mean_score =
                members.iter().map(|&m| verdicts[m].score).sum::<f64>() / members.len() as f64;
            report.push(Topic {
                atom: topics[i].id,
                terms: top_terms(&topics[i].row, p.top_terms),
                members,
                atom_vector: Vec::new(),
                representatives: reps.iter().take(3).map(|r| r.0).collect(),
                mean_score,
                kind: if i >= k_ev {
                    TopicKind::Emerging
                } else {
                    TopicKind::Evolving
                },
                strength,
                profile,
            });
        }
        report.sort_by(|a, b| {
            let ka = a.kind == TopicKind::Emerging;
            let kb = b.kind == TopicKind::Emerging;
            kb.cmp(&ka)
                .then(b.strength.total_cmp(&a.strength))
                .then(a.atom.cmp(&b.atom))
        });
        stats.novel = verdicts.iter().filter(|v| v.novel).count();
        stats.topics = report.len();
        stats.atoms_injected = b;

        // Retirement: inactive for `retire_after` timesteps, then the weakest over the bound.
        let mut keep = vec![true; k];
        if p.retire_after > 0 {
            for (i, t) in topics.iter().enumerate() {
                if ts.saturating_sub(t.last_active) >= p.retire_after {
                    keep[i] = false;
                }
            }
        }
        let cap = p.max_topics - p.emerging;
        let col_mass: Vec<f64> = (0..k).map(|i| (0..n).map(|r| w[r * k + i]).sum()).collect();
        let mut order: Vec<usize> = (0..k).filter(|&i| keep[i]).collect();
        if order.len() > cap {
            order.sort_by(|&a, &b| col_mass[a].total_cmp(&col_mass[b]).then(a.cmp(&b)));
            let excess = order.len() - cap;
            for &i in order.iter().take(excess) {
                keep[i] = false;
            }
        }
        if !keep.iter().any(|&x| x) {
            // never drop every topic: keep the strongest
            let best = (0..k)
                .max_by(|&a, &b| col_mass[a].total_cmp(&col_mass[b]))
                .unwrap_or(0);
            keep[best] = true;
        }
        let kept: Vec<usize> = (0..k).filter(|&i| keep[i]).collect();
        stats.atoms_retired = k - kept.len();
        stats.atoms = kept.len();
        let topics: Vec<TopicState> = kept.iter().map(|&i| topics[i].clone()).collect();
        let mut new_weights = Vec::with_capacity(t_steps);
        let mut r = 0;
        for ws in window.iter() {
            let mut m = Vec::with_capacity(ws.docs.len() * kept.len());
            for dd in 0..ws.docs.len() {
                for &i in &kept {
                    m.push(w[(r + dd) * k + i] as f32);
                }
            }
            r += ws.docs.len();
            new_weights.push(m);
        }
        stats.seconds_topics = t2.elapsed().as_secs_f64();
        let next = DnmfModel {
            params: p.clone(),
            vocab,
            timestep: ts + 1,
            next_id,
            window,
            weights: new_weights,
            topics,
        };
        Ok((next, output(verdicts, report, stats)))
    }
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

fn empty_verdict() -> Verdict {
    Verdict {
        score: 0.0,
        novel: false,
        bootstrap: false,
        empty: true,
        at_ceiling: false,
        terms: Vec::new(),
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

fn top_terms(row: &[(u32, f32)], n: usize) -> Vec<(u32, f32)> {
    let mut v = row.to_vec();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

/// The document's terms that its dominant topic explains best (x_j · h_j), largest first.
fn why_terms(doc: &SparseDoc, h: &[f64], vocab: &Vocabulary, n: usize) -> Vec<(String, f64)> {
    let mut v: Vec<(u32, f64)> = doc
        .ids
        .iter()
        .zip(&doc.vals)
        .map(|(&id, &x)| (id, x * h[id as usize]))
        .filter(|p| p.1 > 0.0)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(n);
    v.into_iter()
        .map(|(id, s)| (vocab.term(id).to_string(), s))
        .collect()
}
