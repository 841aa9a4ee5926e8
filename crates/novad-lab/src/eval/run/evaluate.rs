//! One timestep's evaluation against the labels: AUC, ROC and split AUCs per column, the
//! emerging-topic step, the per-document score rows of scores.jsonl and the timestep's
//! record in results.json.

use std::collections::{BTreeMap, HashSet};

use indicatif::ProgressBar;

use super::super::protocol::Timestep;
use super::super::results::{Column, ColumnResult, TimestepResult};
use super::super::topics::{evaluate_oracle, evaluate_step, StepInput, TopicEvalParams, TopicStep};
use super::super::{auc, roc_points, EvalArgs, EvalError};
use super::batch::StepBatch;
use super::methods::StepScores;
use super::setup::Setup;
use super::{round_scores, Sink};
use novad_models::text::SparseDoc;

/// The documents every AUC counts: the timestep's non-empty documents.
struct Kept {
    /// Their indices in the timestep, increasing.
    idx: Vec<usize>,
    /// Their labels (novel = true).
    novel: Vec<bool>,
    /// Whether their label was present at the bootstrap.
    old_boot: Vec<bool>,
}

impl Kept {
    /// `scores` of the kept documents, rounded to multiples of `round`.
    fn rounded(&self, scores: &[f64], round: f64) -> Vec<f64> {
        round_scores(
            &self.idx.iter().map(|&i| scores[i]).collect::<Vec<_>>(),
            round,
        )
    }
}

/// Evaluate timestep `b.t`: every column's AUCs (evaluated timesteps only), the emerging
/// topics when they run, one row per document appended to `sink.dump`, the kept documents'
/// rounded scores, labels and verdicts added to `sink.pool`. Returns the timestep's
/// record, with the columns of `setup.columns`. Fails when a bootstrap document is labelled
/// novel or a column's scores are not one finite number per document.
pub(super) fn timestep(
    b: &StepBatch,
    out: StepScores,
    setup: &Setup,
    args: &EvalArgs,
    boot_labels: &HashSet<String>,
    pb: &ProgressBar,
    sink: &mut Sink,
) -> Result<TimestepResult, EvalError> {
    let StepScores {
        scores,
        mut cols,
        verdicts,
        events,
        daemon_cost,
    } = out;
    let ts = b.ts;
    let labels: Vec<bool> = ts.docs.iter().map(|d| d.novel).collect();
    if ts.bootstrap && labels.iter().any(|&l| l) {
        return Err(EvalError::Inconsistent(
            "a bootstrap document is labelled novel".into(),
        ));
    }
    let idx: Vec<usize> = (0..ts.docs.len()).filter(|&i| b.nonempty[i]).collect();
    let kept = Kept {
        novel: idx.iter().map(|&i| labels[i]).collect(),
        old_boot: idx
            .iter()
            .map(|&i| boot_labels.contains(&ts.docs[i].label))
            .collect(),
        idx,
    };
    let n_novel = kept.novel.iter().filter(|&&l| l).count();
    if !ts.bootstrap {
        score_columns(ts, &scores, &mut cols, &kept, args.round)?;
        for (c, s) in &scores {
            if verdicts.get(c).is_some_and(|v| v.len() != ts.docs.len()) {
                return Err(EvalError::Inconsistent(format!(
                    "{} made a verdict count unlike its {} documents",
                    c.key(),
                    ts.docs.len()
                )));
            }
            let v = verdicts
                .get(c)
                .map(|v| kept.idx.iter().map(|&i| v[i]).collect::<Vec<bool>>());
            sink.pool
                .add(*c, &kept.rounded(s, args.round), &kept.novel, v.as_deref());
        }
    }
    let topics = match &setup.topic_params {
        Some(tp) if !ts.bootstrap => {
            pb.set_message(format!("{}: emerging topics", ts.name));
            let mut step = topic_step(b, &scores, &kept, setup, args, tp);
            step.daemon = daemon_cost;
            pb.inc(1);
            Some(step)
        }
        _ => None,
    };
    dump_rows(b.t, ts, &b.nonempty, &scores, &mut sink.dump);
    let mut judged = BTreeMap::new();
    if let Some(j) = sink.events.as_mut() {
        let labels: Vec<&str> = ts.docs.iter().map(|d| d.label.as_str()).collect();
        for (stage, topics) in &events {
            let topics: &[_] = if ts.bootstrap { &[] } else { topics };
            let new: &[String] = if ts.bootstrap { &[] } else { &ts.new_labels };
            let step = j.judge(stage, topics, &labels, &b.texts, new);
            if !ts.bootstrap {
                judged.insert(stage.clone(), step);
            }
        }
        j.advance(&b.texts);
    }
    let n_kept = kept.idx.len();
    Ok(TimestepResult {
        index: b.t,
        name: ts.name.clone(),
        bootstrap: ts.bootstrap,
        docs: ts.docs.len(),
        empty: ts.docs.len() - n_kept,
        novel: n_novel,
        non_novel: n_kept - n_novel,
        new_labels: ts.new_labels.clone(),
        vocabulary: b.vocab_len(),
        evicted_terms: b.vb.change.evicted,
        seconds_vectorize: b.vb.seconds,
        events: judged,
        columns: cols
            .into_iter()
            .filter(|(c, _)| setup.columns.contains(c))
            .map(|(c, r)| (c.key().to_string(), r))
            .collect(),
        topics,
    })
}

/// Every column's AUC, ROC points and split AUCs over the kept documents, scores rounded to
/// `round`. Fails when a column has not one finite score per document.
fn score_columns(
    ts: &Timestep,
    scores: &BTreeMap<Column, Vec<f64>>,
    cols: &mut BTreeMap<Column, ColumnResult>,
    kept: &Kept,
    round: f64,
) -> Result<(), EvalError> {
    let lab = &kept.novel;
    for (c, s) in scores {
        if s.len() != ts.docs.len() {
            return Err(EvalError::Inconsistent(format!(
                "{} produced {} scores for {} documents",
                c.key(),
                s.len(),
                ts.docs.len()
            )));
        }
        if s.iter().any(|v| !v.is_finite()) {
            return Err(EvalError::Inconsistent(format!(
                "{} produced a non-finite score",
                c.key()
            )));
        }
        let sc = kept.rounded(s, round);
        let r = cols.get_mut(c).expect("column result");
        r.auc = auc(&sc, lab);
        r.roc = roc_points(&sc, lab);
        let split = |want_boot: bool| {
            let idx: Vec<usize> = (0..lab.len())
                .filter(|&j| lab[j] || kept.old_boot[j] == want_boot)
                .collect();
            auc(
                &idx.iter().map(|&j| sc[j]).collect::<Vec<_>>(),
                &idx.iter().map(|&j| lab[j]).collect::<Vec<_>>(),
            )
        };
        r.auc_vs_bootstrap_labels = split(true);
        r.auc_vs_later_labels = split(false);
    }
    Ok(())
}

/// The emerging-topic step of an evaluated timestep: the clusterers on the kept documents
/// detected by ℓ1-online's and NN's rounded scores, against the true new group of every
/// truly novel kept document, and the oracle on the true novel documents. The daemon's cost
/// is left unset.
fn topic_step(
    b: &StepBatch,
    scores: &BTreeMap<Column, Vec<f64>>,
    kept: &Kept,
    setup: &Setup,
    args: &EvalArgs,
    tp: &TopicEvalParams,
) -> TopicStep {
    let (t, ts) = (b.t, b.ts);
    // truth: the new group of every truly novel non-empty document
    let truth = ts.novel_groups(&kept.idx);
    let docs: Vec<SparseDoc> = kept.idx.iter().map(|&i| b.vb.vectors[i].clone()).collect();
    let pick = |c: Column| scores.get(&c).map(|s| kept.rounded(s, args.round));
    let (l1, nn_s) = (pick(Column::L1Online), pick(Column::Nn));
    let params = &setup.params;
    let input = StepInput {
        docs: &docs,
        truth: &truth,
        l1: l1.as_deref(),
        nn: nn_s.as_deref(),
        coding: &params.coding,
        // the daemon's DICTCLUST seed at this timestep
        dict_seed: params.seed ^ (t as u64).wrapping_mul(0xA24B_AED4_963E_E407),
        kmeans_seed: args.seed ^ 0x6b6d_6561_6e73_0000 ^ (t as u64 + 1),
    };
    let methods = evaluate_step(&input, tp);
    let oracle = evaluate_oracle(&input, tp);
    TopicStep {
        truly_novel: truth.iter().filter(|x| x.is_some()).count(),
        true_topics: truth.iter().flatten().max().map_or(0, |&g| g + 1),
        methods,
        oracle,
        daemon: None,
    }
}

/// One scores.jsonl row per document of timestep `t`: its source, label, novelty, emptiness
/// and its score under every column.
fn dump_rows(
    t: usize,
    ts: &Timestep,
    nonempty: &[bool],
    scores: &BTreeMap<Column, Vec<f64>>,
    dump: &mut String,
) {
    for (i, d) in ts.docs.iter().enumerate() {
        let sc: BTreeMap<&str, f64> = scores.iter().map(|(c, s)| (c.key(), s[i])).collect();
        let row = serde_json::json!({
            "timestep": t,
            "source": d.source,
            "label": d.label,
            "novel": d.novel,
            "empty": !nonempty[i],
            "scores": sc,
        });
        dump.push_str(&row.to_string());
        dump.push('\n');
    }
}
