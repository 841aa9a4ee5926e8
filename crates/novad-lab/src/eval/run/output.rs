//! The end of an evaluation: the summary over the evaluated timesteps, the results.json
//! record (parameters, seeds, notes) and the written outputs.

use std::time::Instant;

use super::super::hybrid::HybridEvalParams;
use super::super::results::{Column, ColumnResult, EvalSummary, Results, Summary, TimestepResult};
use super::super::topics::TopicStep;
use super::super::{report, EvalArgs, EvalError, Method};
use super::setup::Setup;
use super::{secs, Sink};
use novad_models::ostc::OstcParams;

/// Summarise the timesteps (and the pooled measures of `sink`), write report.md, results.json,
/// scores.jsonl (`sink.dump`) and the plots into `--out`, and return what was written. The returned wall time (since `wall`)
/// includes writing the outputs; the recorded one stops just before.
pub(super) fn finish(
    args: &EvalArgs,
    setup: Setup,
    ostc: Option<OstcParams>,
    hybrid: Option<HybridEvalParams>,
    timesteps: Vec<TimestepResult>,
    sink: &Sink,
    wall: Instant,
) -> Result<EvalSummary, EvalError> {
    let mut summary = summary(&timesteps, &setup);
    sink.pool.summarise(&mut summary);
    summary.wall_seconds = secs(wall);
    let n_steps = setup.stream.timesteps.len();
    let seeds = seeds(args, &setup);
    let mut notes = notes(args);
    if setup.topic_params.is_some() {
        notes.push(TOPICS_NOTE.to_string());
    }
    let results = Results {
        version: 1,
        args: args.clone(),
        corpus: args.corpus.display().to_string(),
        protocol: setup.stream.protocol,
        protocol_details: setup.stream.details,
        config: setup.config,
        seeds,
        params: setup.params,
        batch: setup.batch_params,
        l2: setup.l2_params,
        lsh: setup.lsh_params,
        ostc,
        hybrid,
        methods: setup.methods,
        columns: setup.columns.iter().map(|c| c.key().to_string()).collect(),
        threads: rayon::current_num_threads(),
        topics: setup.topic_params,
        timesteps,
        summary: summary.clone(),
        notes,
    };
    let files = report::write_all(&args.out, &results, &sink.dump)?;
    summary.wall_seconds = secs(wall);
    Ok(EvalSummary {
        out: args.out.clone(),
        report: files.report,
        results: files.results,
        scores: files.scores,
        plots: files.plots,
        timesteps: n_steps - 1,
        summary,
    })
}

/// The summary of the columns and, when the emerging topics ran, of the topic steps and the
/// share of the daemon's step spent in its topic stage. Wall time left at 0.
fn summary(timesteps: &[TimestepResult], setup: &Setup) -> Summary {
    let mut summary = summarise(timesteps, &setup.columns);
    let stages: std::collections::BTreeSet<&String> =
        timesteps.iter().flat_map(|r| r.events.keys()).collect();
    for stage in stages {
        let steps: Vec<&super::super::EventStep> = timesteps
            .iter()
            .filter_map(|r| r.events.get(stage))
            .collect();
        summary
            .events
            .insert(stage.clone(), super::super::events::summarise(&steps));
    }
    if let Some(tp) = &setup.topic_params {
        let steps: Vec<&TopicStep> = timesteps.iter().filter_map(|r| r.topics.as_ref()).collect();
        summary.topics = super::super::topics::summarise(&steps, tp.recall_levels.len());
        summary.topics_oracle = super::super::topics::summarise_oracle(&steps);
        let (mut top, mut all) = (0.0, 0.0);
        for d in steps.iter().filter_map(|s| s.daemon.as_ref()) {
            top += d.seconds_topics;
            all += d.seconds_topics + d.seconds_rest;
        }
        summary.daemon_topic_seconds_share = (all > 0.0).then(|| top / all);
    }
    summary
}

/// Per column, the means over the evaluated timesteps (AUCs, seconds, ceiling share) and the
/// total seconds over all timesteps; the ℓ1-batch / ℓ1-online speed-ups and the growth of
/// ℓ1-online's and NN's seconds.
fn summarise(results: &[TimestepResult], columns: &[Column]) -> Summary {
    let mut s = Summary::default();
    let evald: Vec<&TimestepResult> = results.iter().filter(|r| !r.bootstrap).collect();
    let avg = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    for c in columns {
        let get = |f: &dyn Fn(&ColumnResult) -> Option<f64>| -> Vec<f64> {
            evald
                .iter()
                .filter_map(|r| r.columns.get(c.key()).and_then(f))
                .collect()
        };
        if let Some(a) = avg(get(&|r| r.auc)) {
            s.mean_auc.insert(c.key().into(), a);
        }
        if let Some(a) = avg(get(&|r| r.auc_vs_bootstrap_labels)) {
            s.mean_auc_vs_bootstrap_labels.insert(c.key().into(), a);
        }
        if let Some(a) = avg(get(&|r| r.auc_vs_later_labels)) {
            s.mean_auc_vs_later_labels.insert(c.key().into(), a);
        }
        if let Some(a) = avg(get(&|r| r.seconds)) {
            s.mean_seconds.insert(c.key().into(), a);
        }
        if let Some(a) = avg(get(&|r| r.ceiling_fraction)) {
            s.mean_ceiling_fraction.insert(c.key().into(), a);
        }
        let total: Vec<f64> = results
            .iter()
            .filter_map(|r| r.columns.get(c.key()).and_then(|x| x.seconds))
            .collect();
        if !total.is_empty() {
            s.total_seconds.insert(c.key().into(), total.iter().sum());
        }
    }
    let secs_of = |c: Column| -> Vec<Option<f64>> {
        evald
            .iter()
            .map(|r| r.columns.get(c.key()).and_then(|x| x.seconds))
            .collect()
    };
    let on = secs_of(Column::L1Online);
    let ba = secs_of(Column::L1Batch);
    s.speedup = on
        .iter()
        .zip(&ba)
        .filter_map(|(o, b)| match (o, b) {
            (Some(o), Some(b)) if *o > 0.0 => Some(b / o),
            _ => None,
        })
        .collect();
    if on.last().is_some_and(|o| o.is_some()) && ba.last().is_some_and(|b| b.is_some()) {
        s.speedup_last = s.speedup.last().copied();
    }
    let on: Vec<f64> = on.into_iter().flatten().collect();
    if !on.is_empty() {
        let mx = on.iter().cloned().fold(f64::MIN, f64::max);
        let mn = on.iter().cloned().fold(f64::MAX, f64::min);
        if mn > 0.0 {
            s.online_seconds_max_over_min = Some(mx / mn);
        }
    }
    let nn: Vec<f64> = secs_of(Column::Nn).into_iter().flatten().collect();
    if nn.len() >= 2 && nn[0] > 0.0 {
        s.nn_seconds_last_over_first = Some(nn[nn.len() - 1] / nn[0]);
    }
    s
}

/// Every seed of the run and how each random choice derives from it.
fn seeds(args: &EvalArgs, setup: &Setup) -> serde_json::Value {
    serde_json::json!({
        "seed": args.seed,
        "params.seed (atom initialisation, ℓ2 atoms)": setup.params.seed,
        "protocol": "seed ^ 0x5eedc1c320110006 (ChaCha8)",
        "batch growth at timestep t": "seed ^ (0x9e3779b97f4a7c15 * (t + 1))",
        "lsh hyperplanes": args.seed,
        "sre subsample at timestep t": "seed ^ (t + 1)",
        "DICTCLUST / NN-DICT at timestep t (the daemon's)": "params.seed ^ (t * 0xA24BAED4963EE407)",
        "k-means at timestep t": "seed ^ 0x6b6d65616e730000 ^ (t + 1); run r: ^ ((r + 1) * 0x9e3779b97f4a7c15)",
    })
}

/// How the emerging-topic evaluation reads (a note of results.json when it ran).
const TOPICS_NOTE: &str = "Emerging topics: truth = the true new group of every truly novel \
     non-empty document; detected = non-empty documents whose rounded score is at least the \
     swept threshold (ties all in). DICTCLUST is the daemon's `dictclust` with the detector's \
     topic parameters and its seed at that timestep; both clusterers run on the detected \
     documents' own terms (exact: other rows stay zero). The daemon-cost rows come from \
     ℓ1-online's own `Model::step` (its threshold rule, full vocabulary).";

/// How to read the results of a run with `args` (the notes of results.json).
fn notes(args: &EvalArgs) -> Vec<String> {
    let mut n = vec![
        "All methods see the same timesteps and the same TF-IDF vectors: vocabulary and document \
         frequencies of the documents up to and including the current batch (what the daemon \
         computes), nothing later. Vectors of earlier documents keep the IDF of their own \
         timestep."
            .to_string(),
        format!(
            "AUC: exact (Mann–Whitney), ties ½, after rounding scores to multiples of {:e}; \
             novel = positive. Documents without a known term are excluded from every AUC.",
            args.round
        ),
        "Seconds: each method's own work per timestep (scoring + learning), measured \
         sequentially on the same machine; the shared vectorisation is listed separately. At \
         the bootstrap ℓ1-batch reuses ℓ1-online's bootstrap dictionary (identical computation) \
         and reports its time."
            .to_string(),
        "SRE: mean l(p, A) = min_x≥0 ‖p − Ax‖₁ + λ‖x‖₁ over all non-empty documents seen so far, \
         with the dictionary after the timestep's update, computed with the engine's coding. \
         For ℓ1-batch it is the objective of its final X-step."
            .to_string(),
        "ℓ2-batch codes unit-ℓ2 rescaled documents (½‖p̃ − Ax‖² + λ‖x‖₁, A ≥ 0, ‖A_j‖₂ ≤ 1); \
         its ceiling fraction is the share of zero codes."
            .to_string(),
        "NN and LSH compare against documents of earlier timesteps only.".to_string(),
        "Split AUCs: novel documents against non-novel documents of labels present at the \
         bootstrap, and against non-novel documents of labels that arrived later."
            .to_string(),
    ];
    if !args.hybrid_reweight
        && args
            .methods
            .iter()
            .any(|m| matches!(m, Method::Hybrid | Method::HybridOstc))
    {
        n.push(
            "Hybrid columns: the daemon's engine with the hybrid detector on the model's own \
             tokenizer and vocabulary (their seconds are the whole engine step, model included)."
                .to_string(),
        );
    }
    if args.sre_sample > 0 {
        n.push(format!(
            "ℓ1-online SRE is computed on a seeded subsample of at most {} documents per timestep.",
            args.sre_sample
        ));
    }
    n
}
