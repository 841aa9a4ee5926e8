//! Evaluation of the dynamic NMF model (WSDM 2012 §6) on the CIKM 20 Newsgroups stream:
//! micro-averaged F1 at top-1 and top-5 (TDT style), miss rate at first detection (JSD
//! threshold θ), topic continuity (JSD between consecutive timesteps), against the
//! threshold-based TDT baseline (spherical k-means on the ad-hoc period, Yes/No threshold,
//! adaptation threshold τ, k-means of the leftovers). Grid: F1 vs δ for several µ (Figure 3).
//!
//! Definitions (paper §6.1), with the 20NG groups as events:
//! - F1@k: confusion matrix events × system topics over the non-empty documents of the
//!   timesteps after the ad-hoc (bootstrap) one; each event takes its k most co-occurring
//!   system topics; precision = Σ|true ∩ sys| / Σ|sys|, recall = Σ|true ∩ sys| / Σ|true|.
//! - Word distribution of an event at t: normalised centroid of the weighted vectors of all its
//!   documents up to t (in the vocabulary of t). First detection: the first t at which some
//!   system topic is within JSD θ (base 2, in [0, 1]). Miss rate: share of the event's
//!   documents streamed before that (100 % if never detected); averaged over the events that
//!   appear after the ad-hoc period.
//! - Continuity: mean JSD between a system topic's distributions at t−1 and t (topics present
//!   at both), and the same for the events.
//!
//! The baseline's thresholds are swept and its best F1 reported (as the paper does), which
//! favours the baseline. Deterministic given the seed (except timings).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use plotters::prelude::*;
use serde::Serialize;

use super::{cikm_protocol, spherical_kmeans_best, CikmSizes, EvalError};
use crate::corpus::read_20news;
use novad_models::dnmf::weight::weigh;
use novad_models::dnmf::{DnmfModel, DnmfParams};
use novad_models::text::{SparseDoc, Vocabulary};

/// Arguments of the dynamic-NMF evaluation.
mod report;
use report::*;

#[derive(Debug, Clone, Serialize, clap::Args)]
pub struct DnmfEvalArgs {
    /// The 20news-bydate.tar.gz archive.
    #[arg(long, default_value = "../shared/data/20news-bydate.tar.gz")]
    pub corpus: PathBuf,
    /// Seed of the protocol and the models.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output directory (created if missing).
    #[arg(long, default_value = "eval-dnmf-out")]
    pub out: PathBuf,
    /// Evolution parameters δ of the grid.
    #[arg(long, value_delimiter = ',', default_values_t = [0.0, 0.0001, 0.001, 0.01, 0.1, 1.0])]
    pub deltas: Vec<f64>,
    /// Emergence weights µ of the grid.
    #[arg(long, value_delimiter = ',', default_values_t = [0.0, 10.0, 100.0, 1000.0])]
    pub mus: Vec<f64>,
    /// JSD detection threshold θ of the miss rate.
    #[arg(long, default_value_t = 0.5)]
    pub theta: f64,
    /// Emerging topics per timestep (B).
    #[arg(long, default_value_t = 2)]
    pub emerging: usize,
    /// Hinge margin ν of the emergence regulariser.
    #[arg(long, default_value_t = DnmfParams::default().nu)]
    pub nu: f64,
    /// Emerging topics start from random distributions (the paper) instead of poorly
    /// explained documents.
    #[arg(long)]
    pub random_init: bool,
    /// Skip the TDT baseline sweep.
    #[arg(long)]
    pub skip_tdt: bool,
    /// CIKM: phases after the bootstrap (default: all).
    #[arg(long)]
    pub phases: Option<usize>,
}

/// Metrics of one model run.
#[derive(Debug, Clone, Serialize)]
pub struct RunMetrics {
    pub label: String,
    pub delta: f64,
    pub mu: f64,
    pub f1_top1: Prf,
    pub f1_top5: Prf,
    /// Mean miss rate at first detection (%) at θ, over the emerging events.
    pub miss_rate: f64,
    /// Miss rate (%) for each θ of [`THETAS`].
    pub miss_curve: Vec<f64>,
    /// Mean JSD of system topics between consecutive timesteps.
    pub continuity: f64,
    pub seconds: f64,
    pub topics_final: usize,
    /// Novelty verdicts against the protocol's labels (non-empty documents after the ad-hoc
    /// period): ROC AUC of the score, precision and recall (%) of `novel`.
    pub novelty_auc: Option<f64>,
    pub novel_precision: f64,
    pub novel_recall: f64,
}

/// Precision, recall, F1 (in %).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Prf {
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
}

/// One baseline setting.
#[derive(Debug, Clone, Serialize)]
pub struct TdtRun {
    pub yes_no: f64,
    pub adapt: f64,
    pub f1_top1: Prf,
    pub f1_top5: Prf,
    pub topics: usize,
}

/// Everything the evaluation measured.
#[derive(Debug, Clone, Serialize)]
pub struct DnmfEvalSummary {
    pub args: DnmfEvalArgs,
    pub params: DnmfParams,
    pub timesteps: usize,
    pub documents: usize,
    pub emerging_events: Vec<String>,
    /// Mean JSD of event distributions between consecutive timesteps.
    pub event_continuity: f64,
    pub runs: Vec<RunMetrics>,
    pub tdt: Vec<TdtRun>,
    pub tdt_best_top1: Option<TdtRun>,
    pub tdt_best_top5: Option<TdtRun>,
    pub thetas: Vec<f64>,
    pub seconds: f64,
}

/// θ values of the miss-rate curve.
pub const THETAS: [f64; 9] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9];

/// Run the evaluation and write `report.md`, `results.json` and the SVG plots to `--out`.
pub fn run_dnmf_eval(args: &DnmfEvalArgs) -> Result<DnmfEvalSummary, EvalError> {
    let t_all = Instant::now();
    if args.deltas.is_empty() || args.mus.is_empty() {
        return Err(EvalError::Args(
            "--deltas and --mus need at least one value".into(),
        ));
    }
    if !(0.0..=1.0).contains(&args.theta) {
        return Err(EvalError::Args("--theta must be in [0, 1]".into()));
    }
    let posts = read_20news(&args.corpus)?;
    let sizes = CikmSizes {
        phases: args.phases,
        ..CikmSizes::default()
    };
    let stream = cikm_protocol(&posts, &sizes, args.seed)?;
    let base = DnmfParams {
        seed: args.seed,
        emerging: args.emerging,
        nu: args.nu,
        seeded_init: !args.random_init,
        ..DnmfParams::default()
    };
    base.validate()?;
    let texts: Vec<Vec<&str>> = stream
        .timesteps
        .iter()
        .map(|t| t.docs.iter().map(|d| d.text.as_str()).collect())
        .collect();
    let labels: Vec<Vec<String>> = stream
        .timesteps
        .iter()
        .map(|t| t.docs.iter().map(|d| d.label.clone()).collect())
        .collect();
    let mut truth = Truth::build(&base, &texts, &labels);
    truth.novel = stream
        .timesteps
        .iter()
        .map(|t| t.docs.iter().map(|d| d.novel).collect())
        .collect();

    let mut runs = Vec::new();
    for &mu in &args.mus {
        for &delta in &args.deltas {
            let p = DnmfParams {
                mu,
                delta,
                ..base.clone()
            };
            runs.push(run_model(p, &texts, &truth, args.theta)?);
        }
    }
    let mut tdt = Vec::new();
    let grid: &[f64] = if args.skip_tdt {
        &[]
    } else {
        &[0.05, 0.1, 0.15, 0.2, 0.3]
    };
    for &yes in grid {
        for &adapt in &[0.2, 0.3, 0.5, 1.01] {
            tdt.push(run_tdt(&truth, &base, yes, adapt, args.seed));
        }
    }
    let best = |f: fn(&TdtRun) -> f64| tdt.iter().max_by(|a, b| f(a).total_cmp(&f(b))).cloned();
    let summary = DnmfEvalSummary {
        args: args.clone(),
        params: base,
        timesteps: texts.len(),
        documents: texts.iter().map(Vec::len).sum(),
        emerging_events: truth.emerging.clone(),
        event_continuity: truth.continuity,
        tdt_best_top1: best(|r| r.f1_top1.f1),
        tdt_best_top5: best(|r| r.f1_top5.f1),
        runs,
        tdt,
        thetas: THETAS.to_vec(),
        seconds: t_all.elapsed().as_secs_f64(),
    };
    write_outputs(&args.out, &summary)?;
    Ok(summary)
}

/// A sparse distribution: (term id, probability), ids ascending.
type Dist = Vec<(u32, f64)>;

/// Ground truth per timestep: labels, event distributions, and the vocabulary the model sees.
struct Truth {
    /// Per timestep, per document: event index (None for empty documents).
    events: Vec<Vec<Option<usize>>>,
    /// Per timestep, per document: the protocol's novelty label.
    novel: Vec<Vec<bool>>,
    names: Vec<String>,
    /// Events first appearing after the ad-hoc period, with their first timestep.
    emerging: Vec<String>,
    first: Vec<usize>,
    /// Per timestep: the vocabulary after it, and every event's distribution (term, prob).
    vocabs: Vec<Vocabulary>,
    dists: Vec<Vec<Option<Dist>>>,
    continuity: f64,
    /// Per timestep, the documents' weighted vectors (for the baseline), ids in vocabs[t].
    vectors: Vec<Vec<SparseDoc>>,
}

impl Truth {
    fn build(p: &DnmfParams, texts: &[Vec<&str>], labels: &[Vec<String>]) -> Truth {
        let t = &p.text;
        let tok = p.tokenizer();
        let mut vocab = Vocabulary::new(t.max_terms);
        let mut names: Vec<String> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut all_tokens: Vec<(usize, Vec<String>)> = Vec::new();
        let mut events = Vec::new();
        let mut first = Vec::new();
        let mut vocabs = Vec::new();
        let mut dists: Vec<Vec<Option<Dist>>> = Vec::new();
        let mut vectors = Vec::new();
        for (ts, (batch, labs)) in texts.iter().zip(labels).enumerate() {
            let tokens: Vec<Vec<String>> = batch.iter().map(|s| tok.tokens(s)).collect();
            vocab.observe(&tokens, ts as u64);
            let mut ev = Vec::new();
            for (tk, l) in tokens.into_iter().zip(labs) {
                if tk.is_empty() {
                    ev.push(None);
                    continue;
                }
                let e = *index.entry(l.clone()).or_insert_with(|| {
                    names.push(l.clone());
                    first.push(ts);
                    names.len() - 1
                });
                ev.push(Some(e));
                all_tokens.push((e, tk));
            }
            // event centroids over everything so far, in the current vocabulary; by term id,
            // so that every sum is taken in one order (the same digits on every run)
            let mut sums: Vec<BTreeMap<u32, f64>> = vec![BTreeMap::new(); names.len()];
            for (e, tk) in &all_tokens {
                let x = weigh(&vocab.counts(tk), &vocab, p.min_df);
                for (&id, &v) in x.ids.iter().zip(&x.vals) {
                    *sums[*e].entry(id).or_insert(0.0) += v;
                }
            }
            dists.push(
                sums.into_iter()
                    .map(|m| {
                        let s: f64 = m.values().sum();
                        (s > 0.0).then(|| m.into_iter().map(|(k, x)| (k, x / s)).collect())
                    })
                    .collect(),
            );
            vectors.push(
                batch
                    .iter()
                    .map(|s| weigh(&vocab.counts(&tok.tokens(s)), &vocab, p.min_df))
                    .collect(),
            );
            vocabs.push(vocab.clone());
            events.push(ev);
        }
        let emerging: Vec<String> = (0..names.len())
            .filter(|&e| first[e] > 0)
            .map(|e| names[e].clone())
            .collect();
        // event continuity
        let mut js = Vec::new();
        for ts in 1..dists.len() {
            for (a, b) in dists[ts - 1].iter().zip(&dists[ts]) {
                if let (Some(a), Some(b)) = (a, b) {
                    let a = remap_dist(a, &vocabs[ts - 1], &vocabs[ts]);
                    js.push(jsd(&a, b));
                }
            }
        }
        Truth {
            events,
            novel: Vec::new(),
            names,
            emerging,
            first,
            vocabs,
            dists,
            continuity: mean(&js),
            vectors,
        }
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Move a distribution from one vocabulary's ids to another's (terms missing are dropped and
/// the rest renormalised); result sorted by id.
fn remap_dist(a: &[(u32, f64)], from: &Vocabulary, to: &Vocabulary) -> Vec<(u32, f64)> {
    let mut v: Vec<(u32, f64)> = a
        .iter()
        .filter_map(|&(id, x)| to.id(from.term(id)).map(|n| (n, x)))
        .collect();
    v.sort_unstable_by_key(|e| e.0);
    let s: f64 = v.iter().map(|e| e.1).sum();
    if s > 0.0 {
        for e in v.iter_mut() {
            e.1 /= s;
        }
    }
    v
}

/// Jensen–Shannon divergence (base 2, in [0, 1]) of two sparse distributions sorted by id.
pub fn jsd(p: &[(u32, f64)], q: &[(u32, f64)]) -> f64 {
    let term = |a: f64, m: f64| if a > 0.0 { a * (a / m).log2() } else { 0.0 };
    let (mut i, mut j) = (0, 0);
    let mut s = 0.0;
    while i < p.len() || j < q.len() {
        let (a, b) = match (p.get(i), q.get(j)) {
            (Some(x), Some(y)) if x.0 == y.0 => {
                i += 1;
                j += 1;
                (x.1, y.1)
            }
            (Some(x), Some(y)) if x.0 < y.0 => {
                i += 1;
                (x.1, 0.0)
            }
            (Some(_), Some(y)) => {
                j += 1;
                (0.0, y.1)
            }
            (Some(x), None) => {
                i += 1;
                (x.1, 0.0)
            }
            (None, Some(y)) => {
                j += 1;
                (0.0, y.1)
            }
            (None, None) => break,
        };
        let m = 0.5 * (a + b);
        s += 0.5 * (term(a, m) + term(b, m));
    }
    s.clamp(0.0, 1.0)
}

/// Micro-averaged P/R/F1 at top-k from (event, system topic) pairs; documents without a
/// system topic count for recall only.
pub fn micro_f1(pairs: &[(usize, Option<u64>)], k: usize) -> Prf {
    let mut cm: BTreeMap<usize, BTreeMap<u64, usize>> = BTreeMap::new();
    let mut size: BTreeMap<usize, usize> = BTreeMap::new();
    let mut sys_size: BTreeMap<u64, usize> = BTreeMap::new();
    for &(e, s) in pairs {
        *size.entry(e).or_default() += 1;
        if let Some(s) = s {
            *cm.entry(e).or_default().entry(s).or_default() += 1;
            *sys_size.entry(s).or_default() += 1;
        }
    }
    let (mut inter, mut sys, mut tru) = (0usize, 0usize, 0usize);
    for (&e, &n) in &size {
        tru += n;
        if let Some(row) = cm.get(&e) {
            let mut v: Vec<(u64, usize)> = row.iter().map(|(&s, &c)| (s, c)).collect();
            v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            for &(s, c) in v.iter().take(k) {
                inter += c;
                sys += sys_size[&s];
            }
        }
    }
    let p = if sys > 0 {
        100.0 * inter as f64 / sys as f64
    } else {
        0.0
    };
    let r = if tru > 0 {
        100.0 * inter as f64 / tru as f64
    } else {
        0.0
    };
    let f = if p + r > 0.0 {
        2.0 * p * r / (p + r)
    } else {
        0.0
    };
    Prf {
        precision: p,
        recall: r,
        f1: f,
    }
}

fn run_model(
    p: DnmfParams,
    texts: &[Vec<&str>],
    truth: &Truth,
    theta: f64,
) -> Result<RunMetrics, EvalError> {
    let t0 = Instant::now();
    let (delta, mu) = (p.delta, p.mu);
    let mut model = DnmfModel::new(p)?;
    let mut pairs: Vec<(usize, Option<u64>)> = Vec::new();
    let n_ev = truth.names.len();
    // per event, per θ: first detection timestep
    let mut detect: Vec<Vec<Option<usize>>> = vec![vec![None; THETAS.len() + 1]; n_ev];
    let mut prev_rows: Option<(Vocabulary, BTreeMap<u32, Dist>)> = None;
    let mut cont = Vec::new();
    let mut verdicts: Vec<(f64, bool, bool)> = Vec::new();
    for (ts, batch) in texts.iter().enumerate() {
        let (next, out) = model.step(batch)?;
        if next.vocab().len() != truth.vocabs[ts].len() {
            return Err(EvalError::Inconsistent(format!(
                "timestep {ts}: model vocabulary {} terms, harness {}",
                next.vocab().len(),
                truth.vocabs[ts].len()
            )));
        }
        let mut sys: Vec<Option<u64>> = vec![None; batch.len()];
        for t in &out.topics {
            for &m in &t.members {
                sys[m] = Some(t.atom as u64);
            }
        }
        if ts > 0 {
            for (q, e) in truth.events[ts].iter().enumerate() {
                if let Some(e) = e {
                    pairs.push((*e, sys[q]));
                    let v = &out.verdicts[q];
                    verdicts.push((v.score, v.novel, truth.novel[ts][q]));
                }
            }
        }
        let rows: BTreeMap<u32, Vec<(u32, f64)>> = next
            .topics()
            .iter()
            .map(|t| (t.id, t.row.iter().map(|&(i, v)| (i, v as f64)).collect()))
            .collect();
        // first detection
        for (det, dist) in detect.iter_mut().zip(&truth.dists[ts]) {
            let Some(dist) = dist else {
                continue;
            };
            let best = rows
                .values()
                .map(|r| jsd(dist, r))
                .fold(f64::INFINITY, f64::min);
            for (i, &th) in THETAS.iter().chain(std::iter::once(&theta)).enumerate() {
                if det[i].is_none() && best < th {
                    det[i] = Some(ts);
                }
            }
        }
        // continuity
        if let Some((pv, pr)) = &prev_rows {
            for (id, r) in &rows {
                if let Some(a) = pr.get(id) {
                    cont.push(jsd(&remap_dist(a, pv, next.vocab()), r));
                }
            }
        }
        prev_rows = Some((next.vocab().clone(), rows));
        model = next;
    }
    // miss rates over emerging events
    let mut counts = vec![vec![0usize; texts.len()]; n_ev];
    for (ts, ev) in truth.events.iter().enumerate() {
        for e in ev.iter().flatten() {
            counts[*e][ts] += 1;
        }
    }
    let miss = |i: usize| -> f64 {
        let v: Vec<f64> = (0..n_ev)
            .filter(|&e| truth.first[e] > 0)
            .map(|e| {
                let total: usize = counts[e].iter().sum();
                let before: usize = match detect[e][i] {
                    Some(t) => counts[e][..t].iter().sum(),
                    None => total,
                };
                100.0 * before as f64 / total.max(1) as f64
            })
            .collect();
        mean(&v)
    };
    Ok(RunMetrics {
        label: format!("µ={mu} δ={delta}"),
        delta,
        mu,
        f1_top1: micro_f1(&pairs, 1),
        f1_top5: micro_f1(&pairs, 5),
        miss_rate: miss(THETAS.len()),
        miss_curve: (0..THETAS.len()).map(miss).collect(),
        continuity: mean(&cont),
        seconds: t0.elapsed().as_secs_f64(),
        topics_final: model.topics().len(),
        novelty_auc: super::auc(
            &verdicts.iter().map(|v| v.0).collect::<Vec<_>>(),
            &verdicts.iter().map(|v| v.2).collect::<Vec<_>>(),
        ),
        novel_precision: ratio(
            verdicts.iter().filter(|v| v.1 && v.2).count(),
            verdicts.iter().filter(|v| v.1).count(),
        ),
        novel_recall: ratio(
            verdicts.iter().filter(|v| v.1 && v.2).count(),
            verdicts.iter().filter(|v| v.2).count(),
        ),
    })
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

fn cosine(x: &SparseDoc, c: &HashMap<u32, f64>, cnorm: f64) -> f64 {
    if cnorm <= 0.0 {
        return 0.0;
    }
    x.ids
        .iter()
        .zip(&x.vals)
        .map(|(i, v)| v * c.get(i).copied().unwrap_or(0.0))
        .sum::<f64>()
        / cnorm
}

/// Threshold-based TDT (paper §6.2): centres from spherical k-means of the ad-hoc period; a
/// document joins its most similar centre if the cosine reaches `yes_no` (and moves the centre
/// when it reaches `adapt`); the leftovers of a timestep are clustered by k-means into B
/// emerging topics (absorbed as centres); leftovers below `yes_no` to their cluster become
/// singleton topics. Centres are kept by term string so vocabulary evictions cannot move them,
/// in term order, so that every norm is summed in one order (the same result on every run).
fn run_tdt(truth: &Truth, p: &DnmfParams, yes_no: f64, adapt: f64, seed: u64) -> TdtRun {
    type Centre = (BTreeMap<String, f64>, f64); // term → summed weight, number of documents
    let mut centres: Vec<(u64, Centre)> = Vec::new();
    let mut next_id = 0u64;
    let mut singletons = 0u64;
    let mut pairs = Vec::new();
    let make = |docs: &[&SparseDoc], v: &Vocabulary| -> Centre {
        let mut m: BTreeMap<String, f64> = BTreeMap::new();
        for d in docs {
            for (&i, &x) in d.ids.iter().zip(&d.vals) {
                *m.entry(v.term(i).to_string()).or_insert(0.0) += x;
            }
        }
        (m, docs.len() as f64)
    };
    for (ts, docs) in truth.vectors.iter().enumerate() {
        let v = &truth.vocabs[ts];
        // centres in this timestep's ids, with their norms summed in term order
        let local = |c: &Centre| -> (HashMap<u32, f64>, f64) {
            let kept: Vec<(u32, f64)> =
                c.0.iter()
                    .filter_map(|(t, &x)| v.id(t).map(|i| (i, x)))
                    .collect();
            let n = kept.iter().map(|(_, x)| x * x).sum::<f64>().sqrt();
            (kept.into_iter().collect(), n)
        };
        let mut sys: Vec<Option<u64>> = vec![None; docs.len()];
        let nonempty: Vec<usize> = (0..docs.len()).filter(|&i| !docs[i].is_empty()).collect();
        let mut leftovers: Vec<usize> = Vec::new();
        if ts == 0 {
            leftovers = nonempty.clone();
        } else {
            let mut loc: Vec<(HashMap<u32, f64>, f64)> =
                centres.iter().map(|c| local(&c.1)).collect();
            for &i in &nonempty {
                let mut best = (f64::NEG_INFINITY, 0usize);
                for (c, (m, n)) in loc.iter().enumerate() {
                    let s = cosine(&docs[i], m, *n);
                    if s > best.0 {
                        best = (s, c);
                    }
                }
                if best.0 >= yes_no {
                    sys[i] = Some(centres[best.1].0);
                    if best.0 >= adapt {
                        let c = &mut centres[best.1].1;
                        for (&id, &x) in docs[i].ids.iter().zip(&docs[i].vals) {
                            *c.0.entry(v.term(id).to_string()).or_insert(0.0) += x;
                        }
                        c.1 += 1.0;
                        loc[best.1] = local(c);
                    }
                } else {
                    leftovers.push(i);
                }
            }
        }
        let k = if ts == 0 {
            p.initial_topics
        } else {
            p.emerging
        };
        if !leftovers.is_empty() {
            let sub: Vec<SparseDoc> = leftovers.iter().map(|&i| docs[i].clone()).collect();
            let (assign, _) = spherical_kmeans_best(&sub, v.len(), k, 4, 20, seed ^ ts as u64);
            let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
            for (j, a) in assign.iter().enumerate() {
                if let Some(a) = a {
                    groups.entry(*a).or_default().push(leftovers[j]);
                }
            }
            for (_, members) in groups {
                let refs: Vec<&SparseDoc> = members.iter().map(|&i| &docs[i]).collect();
                let c = make(&refs, v);
                let (m, n) = local(&c);
                let id = next_id;
                next_id += 1;
                let mut kept = 0;
                for &i in &members {
                    if ts == 0 || cosine(&docs[i], &m, n) >= yes_no {
                        sys[i] = Some(id);
                        kept += 1;
                    } else {
                        singletons += 1;
                        sys[i] = Some(u64::MAX - singletons);
                    }
                }
                if kept > 0 {
                    centres.push((id, c));
                }
            }
        }
        if ts > 0 {
            for (q, e) in truth.events[ts].iter().enumerate() {
                if let Some(e) = e {
                    pairs.push((*e, sys[q]));
                }
            }
        }
    }
    TdtRun {
        yes_no,
        adapt,
        f1_top1: micro_f1(&pairs, 1),
        f1_top5: micro_f1(&pairs, 5),
        topics: centres.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsd_is_zero_for_equal_and_one_for_disjoint() {
        let p = vec![(0, 0.5), (1, 0.5)];
        assert!(jsd(&p, &p).abs() < 1e-12);
        assert!((jsd(&p, &[(2, 1.0)]) - 1.0).abs() < 1e-12);
        let q = vec![(0, 1.0)];
        // closed form for p = (½, ½), q = (1, 0): ½ KL(p‖m) + ½ KL(q‖m), m = (¾, ¼)
        let m = [0.75, 0.25];
        let want = 0.5 * (0.5 * (0.5f64 / m[0]).log2() + 0.5 * (0.5f64 / m[1]).log2())
            + 0.5 * (1.0f64 / m[0]).log2();
        assert!((jsd(&p, &q) - want).abs() < 1e-12);
    }

    #[test]
    fn micro_f1_counts_top_k_topics() {
        // event 0: 3 docs on topic 1, 1 on topic 2; event 1: 2 docs on topic 2
        let pairs = vec![
            (0, Some(1)),
            (0, Some(1)),
            (0, Some(1)),
            (0, Some(2)),
            (1, Some(2)),
            (1, Some(2)),
        ];
        let a = micro_f1(&pairs, 1);
        // top1: e0→t1 (3 of |t1|=3), e1→t2 (2 of |t2|=3): P = 5/6, R = 5/6
        assert!((a.precision - 500.0 / 6.0).abs() < 1e-9 && (a.recall - 500.0 / 6.0).abs() < 1e-9);
        let b = micro_f1(&pairs, 5);
        // top5: e0→{t1,t2}: 4 of 6; e1→t2: 2 of 3 → P = 6/9, R = 1
        assert!((b.precision - 600.0 / 9.0).abs() < 1e-9 && (b.recall - 100.0).abs() < 1e-9);
    }
}
