//! Reading the factorisation of one timestep: the dominant topic of each new document, which
//! emerging topics are fresh themes, the verdicts, the topic report, the topics that stay,
//! and the window's weights of the next state.

use std::collections::VecDeque;

use super::model::{Batch, WindowStep};
use super::params::DnmfParams;
use crate::model::{Topic, TopicKind, Verdict};
use crate::text::{SparseDoc, Vocabulary};

/// The factorisation of one timestep as the verdicts, the topic report and the next state
/// read it.
pub(super) struct Fit {
    /// W rounded to f32 precision, n × k row-major.
    pub(super) w: Vec<f64>,
    /// H, k × d row-major.
    pub(super) h: Vec<f64>,
    pub(super) k: usize,
    /// Evolving topics: the first `k_ev` of the `k`.
    pub(super) k_ev: usize,
    pub(super) bootstrap: bool,
    /// Dominant topic of each new document (None without weight).
    pub(super) dominant: Vec<Option<usize>>,
    /// Per topic: an emerging topic whose documents the previous topics explained badly.
    pub(super) fresh: Vec<bool>,
}

impl Fit {
    /// One verdict per text of the batch: empty documents keep the empty verdict; the others
    /// get the share of their weight on fresh topics as score (0 at bootstrap), `novel` when
    /// their dominant topic is fresh, and the `n_terms` terms their dominant topic explains
    /// best.
    pub(super) fn verdicts(&self, batch: &Batch, n_terms: usize) -> Vec<Verdict> {
        let (k, k_ev, d) = (self.k, self.k_ev, batch.vocab.len());
        let first_new = batch.x.rows() - batch.batch_pos.len();
        let mut verdicts: Vec<Verdict> = (0..batch.stats.docs).map(|_| empty_verdict()).collect();
        for (q, &pos) in batch.batch_pos.iter().enumerate() {
            let r = first_new + q;
            let wr = &self.w[r * k..(r + 1) * k];
            let total: f64 = wr.iter().sum();
            let v = &mut verdicts[pos];
            v.empty = false;
            v.bootstrap = self.bootstrap;
            let Some(best) = self.dominant[q] else {
                continue;
            };
            let em: f64 = (k_ev..k).filter(|&i| self.fresh[i]).map(|i| wr[i]).sum();
            v.score = if self.bootstrap {
                0.0
            } else {
                (em / total).clamp(0.0, 1.0)
            };
            v.novel = self.fresh[best];
            v.terms = why_terms(
                &batch.vecs[r],
                &self.h[best * d..(best + 1) * d],
                &batch.vocab,
                n_terms,
            );
        }
        verdicts
    }

    /// The topic report: every topic dominant for at least one document of the batch, with
    /// its members, top 3 representatives, mean score, kind, and its share of each window
    /// step's weight (the last share is its strength). Emerging topics first, then by
    /// strength descending, then by id.
    pub(super) fn report(&self, batch: &Batch, verdicts: &[Verdict], n_terms: usize) -> Vec<Topic> {
        let k = self.k;
        let n = batch.x.rows();
        let n_new = batch.batch_pos.len();
        let first_new = n - n_new;
        let t_steps = batch.window.len();
        let step_of = &batch.step_of;
        let w = &self.w;
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
                .filter(|&q| self.dominant[q] == Some(i))
                .map(|q| batch.batch_pos[q])
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
                .filter(|&q| self.dominant[q] == Some(i))
                .map(|q| (batch.batch_pos[q], w[(first_new + q) * k + i]))
                .collect();
            reps.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let mean_score =
                members.iter().map(|&m| verdicts[m].score).sum::<f64>() / members.len() as f64;
            report.push(Topic {
                atom: batch.topics[i].id,
                terms: top_terms(&batch.topics[i].row, n_terms),
                members,
                atom_vector: Vec::new(),
                representatives: reps.iter().take(3).map(|r| r.0).collect(),
                mean_score,
                kind: if i >= self.k_ev {
                    TopicKind::Emerging
                } else {
                    TopicKind::Evolving
                },
                strength,
                profile,
                event: None,
            });
        }
        report.sort_by(|a, b| {
            let ka = a.kind == TopicKind::Emerging;
            let kb = b.kind == TopicKind::Emerging;
            kb.cmp(&ka)
                .then(b.strength.total_cmp(&a.strength))
                .then(a.atom.cmp(&b.atom))
        });
        report
    }

    /// The topics that stay, ascending: those active within `retire_after` timesteps (all
    /// when it is 0), then, over the bound `max_topics − emerging`, the ones with the most
    /// weight over the window (ties to the lower index); never none (the one with the most
    /// weight stays).
    pub(super) fn retained(&self, batch: &Batch, p: &DnmfParams, ts: u64) -> Vec<usize> {
        let k = self.k;
        let n = batch.x.rows();
        let w = &self.w;
        let mut keep = vec![true; k];
        if p.retire_after > 0 {
            for (i, t) in batch.topics.iter().enumerate() {
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
        (0..k).filter(|&i| keep[i]).collect()
    }

    /// W of the next state: per window step, its documents' weights on the `kept` topics as
    /// f32 (row-major, `kept.len()` columns).
    pub(super) fn window_weights(
        &self,
        window: &VecDeque<WindowStep>,
        kept: &[usize],
    ) -> Vec<Vec<f32>> {
        let k = self.k;
        let mut new_weights = Vec::with_capacity(window.len());
        let mut r = 0;
        for ws in window.iter() {
            let mut m = Vec::with_capacity(ws.docs.len() * kept.len());
            for dd in 0..ws.docs.len() {
                for &i in kept {
                    m.push(self.w[(r + dd) * k + i] as f32);
                }
            }
            r += ws.docs.len();
            new_weights.push(m);
        }
        new_weights
    }
}

/// Dominant topic of each new document: the first topic of largest weight, None for a
/// document without terms or without weight.
pub(super) fn dominant_topics(batch: &Batch, w: &[f64], k: usize) -> Vec<Option<usize>> {
    let n_new = batch.batch_pos.len();
    let first_new = batch.x.rows() - n_new;
    (0..n_new)
        .map(|q| {
            let r = first_new + q;
            let wr = &w[r * k..(r + 1) * k];
            if batch.vecs[r].is_empty() || wr.iter().sum::<f64>() <= 0.0 {
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
        .collect()
}

/// Per topic, whether it is a fresh theme. An emerging topic is a new theme (its documents
/// novel) when the previous topics explained its documents badly: mean relative residual
/// `rho` ≥ `threshold`. Otherwise it is a split of existing themes (NMF uses spare bandwidth
/// to split drifting topics). Evolving topics, and every topic at bootstrap, are not fresh.
pub(super) fn fresh_topics(
    dominant: &[Option<usize>],
    rho: &[f64],
    k_ev: usize,
    k: usize,
    bootstrap: bool,
    threshold: f64,
) -> Vec<bool> {
    (0..k)
        .map(|i| {
            if bootstrap || i < k_ev {
                return false;
            }
            let members: Vec<f64> = (0..dominant.len())
                .filter(|&q| dominant[q] == Some(i))
                .map(|q| rho[q])
                .collect();
            !members.is_empty() && members.iter().sum::<f64>() / members.len() as f64 >= threshold
        })
        .collect()
}

pub(super) fn empty_verdict() -> Verdict {
    Verdict {
        score: 0.0,
        novel: false,
        bootstrap: false,
        empty: true,
        at_ceiling: false,
        terms: Vec::new(),
    }
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
