//! How OSTC codes and scores one document: the per-token likelihoods, document completion and
//! the [`ScoreRule`]s mapping them into [0, 1).

use ndarray::Array2;

use crate::ostc::coding::{
    code_doc, code_doc_collapsed, fold_in, CodeParams, DocBlock, DocCode, INIT_ITERS,
};
use crate::ostc::params::{OstcParams, ScoreRule};

/// Map a per-token objective r ≥ 0 to the score r / (1 + r) ∈ [0, 1) ([`ScoreRule::Objective`]).
pub fn score_of(per_token: f64) -> f64 {
    let r = per_token.max(0.0);
    r / (1.0 + r)
}

/// Per-token negative log-likelihood r = −Σ_n w_n ln(πᵀβ_{·n} + ε) / Σ_n w_n of a document
/// block under topic proportions π (normalised here; uniform when they sum to 0). In
/// [0, −ln ε] when every β row sums to ≤ 1 per topic; 0 for an empty document.
pub fn per_token_nll(doc: &DocBlock, pi: &[f64], eps: f64) -> f64 {
    let k = doc.k;
    let tot: f64 = pi.iter().map(|v| v.max(0.0)).sum();
    let norm: Vec<f64> = if tot > 0.0 && tot.is_finite() {
        pi.iter().map(|v| v.max(0.0) / tot).collect()
    } else {
        vec![1.0 / k.max(1) as f64; k]
    };
    let (mut nll, mut words) = (0.0, 0.0);
    for n in 0..doc.len() {
        let q: f64 = norm.iter().zip(doc.row(n)).map(|(a, b)| a * b).sum::<f64>();
        nll -= doc.w[n] * (q.clamp(0.0, 1.0) + eps).ln();
        words += doc.w[n];
    }
    if words > 0.0 {
        (nll / words).max(0.0)
    } else {
        0.0
    }
}

/// The two halves of a document's tokens, alternating in term order: (w_A, w_B), w_A + w_B = w.
pub fn split_tokens(w: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut off = 0u64;
    let (mut a, mut b) = (Vec::with_capacity(w.len()), Vec::with_capacity(w.len()));
    for &c in w {
        let c = c.max(0.0).round() as u64;
        let ca = if off % 2 == 0 { c.div_ceil(2) } else { c / 2 };
        a.push(ca as f64);
        b.push((c - ca) as f64);
        off += c;
    }
    (a, b)
}

/// Document-completion NLL per token ([`ScoreRule::Completion`]).
pub fn completion_nll(doc: &DocBlock, eps: f64) -> f64 {
    let (wa, wb) = split_tokens(&doc.w);
    let half = |w: &[f64]| DocBlock {
        w: w.to_vec(),
        beta: doc.beta.clone(),
        k: doc.k,
    };
    let (da, db) = (half(&wa), half(&wb));
    let (na, nb) = (wa.iter().sum::<f64>(), wb.iter().sum::<f64>());
    // NLL of half b under π fitted on half a, and vice versa (a half may be empty)
    let cross = |fit: &DocBlock, nfit: f64, eval: &DocBlock, neval: f64| {
        if neval <= 0.0 {
            return 0.0;
        }
        let pi = if nfit > 0.0 {
            fold_in(fit, INIT_ITERS)
        } else {
            fold_in(eval, INIT_ITERS)
        };
        per_token_nll(eval, &pi, eps) * neval
    };
    let tot = na + nb;
    if tot <= 0.0 {
        return 0.0;
    }
    (cross(&da, na, &db, nb) + cross(&db, nb, &da, na)) / tot
}

/// The novelty score of a coded document (see [`ScoreRule`]): in [0, 1), finite.
pub fn doc_score(doc: &DocBlock, code: &DocCode, p: &OstcParams) -> f64 {
    let words: f64 = doc.w.iter().sum();
    if words <= 0.0 {
        return 0.0;
    }
    let c = p.score_scale.unwrap_or(p.score.default_scale());
    let squash = |r: f64| 1.0 - (-r.max(0.0) / c).exp();
    let s = match p.score {
        ScoreRule::Objective => score_of(code.objective / words),
        ScoreRule::Perplexity => squash(per_token_nll(doc, &code.topic_counts(doc), p.eps)),
        ScoreRule::FoldIn => squash(per_token_nll(doc, &fold_in(doc, INIT_ITERS), p.eps)),
        ScoreRule::Completion => squash(completion_nll(doc, p.eps)),
        ScoreRule::Contrast => {
            // uniform proportions = the mean topic β̄
            let background = per_token_nll(doc, &vec![1.0; doc.k], p.eps);
            let r = completion_nll(doc, p.eps) - p.score_background * background;
            1.0 / (1.0 + (-r / c).exp())
        }
    };
    if s.is_finite() {
        s.clamp(0.0, 1.0 - f64::EPSILON)
    } else {
        0.0
    }
}

/// Gather the document block (counts and β rows as f64) of one (id, count) list.
pub fn doc_block(counts: &[(u32, u32)], beta: &Array2<f32>) -> DocBlock {
    let k = beta.ncols();
    let mut b = Vec::with_capacity(counts.len() * k);
    for &(id, _) in counts {
        b.extend(beta.row(id as usize).iter().map(|&v| v as f64));
    }
    DocBlock {
        w: counts.iter().map(|&(_, c)| c as f64).collect(),
        beta: b,
        k,
    }
}

/// Code one document (STC or collapsed per `collapsed`).
pub fn code_counts(
    counts: &[(u32, u32)],
    beta: &Array2<f32>,
    p: &CodeParams,
    collapsed: bool,
) -> DocCode {
    code_block(&doc_block(counts, beta), p, collapsed)
}

/// Code one gathered document block (STC or collapsed per `collapsed`).
pub fn code_block(blk: &DocBlock, p: &CodeParams, collapsed: bool) -> DocCode {
    if collapsed {
        code_doc_collapsed(blk, p)
    } else {
        code_doc(blk, p)
    }
}
