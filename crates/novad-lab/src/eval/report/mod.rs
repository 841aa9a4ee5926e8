//! Outputs of `novad eval`: report.md, results.json, scores.jsonl and SVG plots (plotters' SVG
//! backend; text is emitted as SVG `<text>`, so no system font is needed). This file writes
//! them and holds the report's main sections; `topics.rs` the emerging-topic section,
//! `table1.rs` the parser of the AUC table, `plots.rs` the charts.

mod plots;
mod table1;
mod topics;

pub use table1::{parse_table1, Table1};

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::results::{Column, ColumnResult, Results, TimestepResult};
use super::EvalError;
use plots::plots;
use topics::topics_section;

pub(crate) struct Files {
    pub report: PathBuf,
    pub results: PathBuf,
    pub scores: PathBuf,
    pub plots: Vec<PathBuf>,
}

fn write(path: &Path, s: &str) -> Result<(), EvalError> {
    std::fs::write(path, s).map_err(|source| EvalError::Io {
        path: path.display().to_string(),
        source,
    })
}

pub(crate) fn write_all(out: &Path, res: &Results, scores: &str) -> Result<Files, EvalError> {
    let results = out.join("results.json");
    let json = serde_json::to_string_pretty(res).expect("results serialise");
    write(&results, &json)?;
    let scores_path = out.join("scores.jsonl");
    write(&scores_path, scores)?;
    let plots = plots(out, res)?;
    let report = out.join("report.md");
    write(&report, &markdown(res, &plots))?;
    Ok(Files {
        report,
        results,
        scores: scores_path,
        plots,
    })
}

fn columns(res: &Results) -> Vec<Column> {
    Column::ALL
        .into_iter()
        .filter(|c| res.columns.iter().any(|k| k == c.key()))
        .collect()
}

fn f3(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.3}"))
}

fn fsec(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 1.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.4}"),
    }
}

fn col(t: &TimestepResult, c: Column) -> Option<&ColumnResult> {
    t.columns.get(c.key())
}

fn table(out: &mut String, head: &[String], rows: &[Vec<String>]) {
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(head.len()));
    for r in rows {
        let _ = writeln!(out, "| {} |", r.join(" | "));
    }
    out.push('\n');
}

/// The title line of the AUC table; [`parse_table1`] looks for it.
pub const TABLE1_HEADING: &str = "## Table 1: AUC per timestep";

/// The whole report.md: title, the AUC tables, seconds, SRE, score ceiling, emerging topics,
/// checks, protocol, notes and plots, in that order.
fn markdown(res: &Results, plots: &[PathBuf]) -> String {
    let cols = columns(res);
    let evald: Vec<&TimestepResult> = res.timesteps.iter().filter(|t| !t.bootstrap).collect();
    let mut s = String::new();
    title(&mut s, res);
    table1(&mut s, res, &cols, &evald);
    whole_stream(&mut s, res, &cols);
    split_auc(&mut s, res, &cols);
    seconds(&mut s, res, &cols, &evald);
    sre(&mut s, res, &cols);
    ceiling(&mut s, res, &cols);
    topics_section(&mut s, res);
    checks(&mut s, res);
    protocol(&mut s, res);
    notes_and_plots(&mut s, res, plots);
    s
}

/// The title and the paragraph naming the detector configuration, seed, methods, threads and
/// wall time.
fn title(s: &mut String, res: &Results) {
    let _ = writeln!(
        s,
        "# novad eval — {} protocol on `{}`\n",
        res.protocol, res.corpus
    );
    let _ =
        writeln!(
        s,
        "Detector configuration `{}` (k = {}, λ = {}, w = {}, β = {}, Δ carried: {}), seed {}, \
         methods {}, {} threads; wall time {:.1} s.\n",
        res.config,
        res.params.k,
        res.params.coding.lambda,
        res.params.coding.absent_weight,
        res.params.oiadmm.beta,
        res.params.oiadmm.carry_delta,
        res.args.seed,
        res.methods
            .iter()
            .map(|m| serde_json::to_value(m).unwrap().as_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        res.threads,
        res.summary.wall_seconds
    );
}

/// Table 1 ([`TABLE1_HEADING`]): AUC of every column per evaluated timestep, then the averages
/// row, then the note on detectors and reference scores.
fn table1(s: &mut String, res: &Results, cols: &[Column], evald: &[&TimestepResult]) {
    let _ = writeln!(s, "{TABLE1_HEADING}\n");
    let mut head = vec![
        "Timestep".to_string(),
        "No. of novel docs".into(),
        "No. of non-novel docs".into(),
    ];
    head.extend(cols.iter().map(|c| c.title().to_string()));
    let mut rows: Vec<Vec<String>> = evald
        .iter()
        .map(|t| {
            let mut r = vec![
                t.index.to_string(),
                t.novel.to_string(),
                t.non_novel.to_string(),
            ];
            r.extend(cols.iter().map(|&c| f3(col(t, c).and_then(|x| x.auc))));
            r
        })
        .collect();
    let mut avg = vec!["Avg.".to_string(), String::new(), String::new()];
    avg.extend(
        cols.iter()
            .map(|c| f3(res.summary.mean_auc.get(c.key()).copied())),
    );
    rows.push(avg);
    table(s, &head, &rows);
    let _ = writeln!(
        s,
        "ℓ1 / ℓ2 / NN columns are detectors; ℓ2 relative residual, unseen-term mass and length \
         are reference scores (length = distinct known terms: a detector should beat it).\n"
    );
}

/// Over the whole stream: every column's pooled AUC beside its mean per-timestep AUC, then the
/// verdicts of the methods that make them against the best F1 of one fixed threshold.
fn whole_stream(s: &mut String, res: &Results, cols: &[Column]) {
    let _ = writeln!(s, "## Over the whole stream\n");
    let _ = writeln!(
        s,
        "Pooled AUC ranks every evaluated timestep's documents together, as one threshold over \
         a date range does; the mean is the per-timestep AUC of Table 1.\n"
    );
    let rows: Vec<Vec<String>> = cols
        .iter()
        .map(|c| {
            vec![
                c.title().to_string(),
                f3(res.summary.pooled_auc.get(c.key()).copied()),
                f3(res.summary.mean_auc.get(c.key()).copied()),
            ]
        })
        .collect();
    table(
        s,
        &["Score".into(), "pooled AUC".into(), "mean AUC".into()],
        &rows,
    );
    events(s, res);
    if res.summary.verdicts.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = cols
        .iter()
        .filter_map(|c| Some((c, res.summary.verdicts.get(c.key())?)))
        .map(|(c, v)| {
            vec![
                c.title().to_string(),
                format!("{} / {}", v.true_positives, v.flagged),
                f3(Some(v.precision)),
                f3(Some(v.recall)),
                f3(Some(v.f1)),
                format!("{:.3} (score ≥ {:.4})", v.best_f1, v.best_threshold),
                f3(Some(v.f1_ratio)),
            ]
        })
        .collect();
    table(
        s,
        &[
            "Verdicts of".into(),
            "novel / flagged".into(),
            "precision".into(),
            "recall".into(),
            "F1".into(),
            "best fixed-threshold F1".into(),
            "F1 / best".into(),
        ],
        &rows,
    );
}

/// The daemon's emerging topics as events (when the `hybrid` method ran): per timestep and
/// over the stream.
fn events(s: &mut String, res: &Results) {
    if res.summary.events.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "Emerging topics as events (the hybrid method's own topics, by topic stage): an event is \
         an emerging topic whose members are mostly of a group new at its timestep; a new group \
         is found when an event of its arrival leads with it; keyword precision@5 against the \
         group's 20 most distinctive terms (group document frequency × ln IDF over the documents \
         before). Continuing topics (later days of an event) are counted apart: their members, \
         and the share of those of the group the event emerged with.\n"
    );
    let f = |v: Option<f64>| f3(v);
    let rows: Vec<Vec<String>> = res
        .summary
        .events
        .iter()
        .map(|(stage, e)| {
            vec![
                stage.clone(),
                e.topics.to_string(),
                e.events.to_string(),
                f(e.event_precision),
                format!("{} / {}", e.found_groups, e.new_groups),
                f(e.event_recall),
                f(e.topics_per_event),
                f(e.keyword_precision_at_5),
                format!("{} ({} docs)", e.continuing, e.followed),
                f(e.on_story),
            ]
        })
        .collect();
    table(
        s,
        &[
            "stage".into(),
            "emerging topics".into(),
            "events".into(),
            "event precision".into(),
            "new groups found".into(),
            "event recall".into(),
            "topics per found group".into(),
            "keyword precision@5".into(),
            "continuing topics".into(),
            "on story".into(),
        ],
        &rows,
    );
}

/// The mean AUC of every column against all non-novel documents, against those of labels
/// present at the bootstrap, and against those of labels that arrived later.
fn split_auc(s: &mut String, res: &Results, cols: &[Column]) {
    let _ = writeln!(s, "## AUC split by the origin of the non-novel documents\n");
    let _ = writeln!(
        s,
        "Novel documents against non-novel documents of labels present at the bootstrap, and \
         against non-novel documents of labels that arrived later (averages over timesteps \
         where the split exists).\n"
    );
    let rows: Vec<Vec<String>> = cols
        .iter()
        .map(|c| {
            vec![
                c.title().to_string(),
                f3(res.summary.mean_auc.get(c.key()).copied()),
                f3(res
                    .summary
                    .mean_auc_vs_bootstrap_labels
                    .get(c.key())
                    .copied()),
                f3(res.summary.mean_auc_vs_later_labels.get(c.key()).copied()),
            ]
        })
        .collect();
    table(
        s,
        &[
            "Score".into(),
            "all".into(),
            "vs bootstrap labels".into(),
            "vs later labels".into(),
        ],
        &rows,
    );
}

/// Seconds of every method per timestep (bootstrap included), the ℓ1-batch / ℓ1-online ratio
/// and the shared vectorisation; then LSH's comparisons per document at the last timestep when
/// LSH ran.
fn seconds(s: &mut String, res: &Results, cols: &[Column], evald: &[&TimestepResult]) {
    let mcols: Vec<Column> = cols.iter().copied().filter(|c| c.is_method()).collect();
    let _ = writeln!(s, "## Seconds per timestep\n");
    let mut head = vec!["Timestep".to_string()];
    head.extend(mcols.iter().map(|c| c.title().to_string()));
    head.push("ℓ1-batch / ℓ1-online".into());
    head.push("vectorise (shared)".into());
    let rows: Vec<Vec<String>> = res
        .timesteps
        .iter()
        .map(|t| {
            let mut r = vec![if t.bootstrap {
                format!("{} (bootstrap)", t.index)
            } else {
                t.index.to_string()
            }];
            r.extend(
                mcols
                    .iter()
                    .map(|&c| fsec(col(t, c).and_then(|x| x.seconds))),
            );
            let ratio = match (
                col(t, Column::L1Online).and_then(|x| x.seconds),
                col(t, Column::L1Batch).and_then(|x| x.seconds),
            ) {
                (Some(o), Some(b)) if o > 0.0 && !t.bootstrap => format!("{:.1}×", b / o),
                _ => "–".into(),
            };
            r.push(ratio);
            r.push(fsec(Some(t.seconds_vectorize)));
            r
        })
        .collect();
    table(s, &head, &rows);
    if let Some(c) = col(
        evald.last().copied().unwrap_or(&res.timesteps[0]),
        Column::Lsh,
    ) {
        if let Some(x) = c.comparisons {
            let _ = writeln!(
                s,
                "LSH compared each document of the last timestep with {x:.0} earlier documents on \
                 average.\n"
            );
        }
    }
}

/// SRE of ℓ1-online and ℓ1-batch per timestep, with ℓ1-batch's k and alternations and ℓ2-batch's
/// objective; nothing when neither ℓ1 method ran.
fn sre(s: &mut String, res: &Results, cols: &[Column]) {
    if !(cols.contains(&Column::L1Online) || cols.contains(&Column::L1Batch)) {
        return;
    }
    let _ = writeln!(s, "## SRE per timestep\n");
    let _ = writeln!(
        s,
        "Mean l(p, A) over all documents seen so far with the dictionary after the \
         timestep (lower = better representation); k = atoms ℓ1-batch scored the batch with; \
         ℓ2 objective = ℓ2-batch's mean training objective.\n"
    );
    let rows: Vec<Vec<String>> = res
        .timesteps
        .iter()
        .map(|t| {
            let on = col(t, Column::L1Online);
            let ba = col(t, Column::L1Batch);
            let l2 = col(t, Column::L2Batch);
            let kb = ba.and_then(|b| b.k);
            vec![
                t.index.to_string(),
                on.and_then(|x| x.sre)
                    .map_or("–".into(), |v| format!("{v:.4}")),
                on.and_then(|x| x.sre_docs)
                    .map_or("–".into(), |v| v.to_string()),
                ba.and_then(|x| x.sre)
                    .map_or("–".into(), |v| format!("{v:.4}")),
                kb.map_or("–".into(), |k| k.to_string()),
                ba.and_then(|x| x.alternations)
                    .map_or("–".into(), |v| v.to_string()),
                l2.and_then(|x| x.objective)
                    .map_or("–".into(), |v| format!("{v:.4}")),
            ]
        })
        .collect();
    table(
        s,
        &[
            "Timestep".into(),
            "SRE ℓ1-online".into(),
            "docs".into(),
            "SRE ℓ1-batch".into(),
            "k ℓ1-batch (scoring)".into(),
            "alternations".into(),
            "ℓ2 objective".into(),
        ],
        &rows,
    );
}

/// Share of documents at the score ceiling per timestep for ℓ1-online, ℓ1-batch and ℓ2-batch
/// (those that ran); nothing when none did.
fn ceiling(s: &mut String, res: &Results, cols: &[Column]) {
    let ccols: Vec<Column> = [Column::L1Online, Column::L1Batch, Column::L2Batch]
        .into_iter()
        .filter(|c| cols.contains(c))
        .collect();
    if ccols.is_empty() {
        return;
    }
    let _ = writeln!(s, "## Share of documents at the score ceiling\n");
    let _ = writeln!(
        s,
        "ℓ1: score = ‖p‖₁ (nothing explained, x = 0); ℓ2: zero code.\n"
    );
    let mut head = vec!["Timestep".to_string()];
    head.extend(ccols.iter().map(|c| c.title().to_string()));
    let rows: Vec<Vec<String>> = res
        .timesteps
        .iter()
        .map(|t| {
            let mut r = vec![t.index.to_string()];
            r.extend(
                ccols
                    .iter()
                    .map(|&c| f3(col(t, c).and_then(|x| x.ceiling_fraction))),
            );
            r
        })
        .collect();
    table(s, &head, &rows);
}

/// The checks list: ℓ1-online's speed-up over ℓ1-batch (PASS when ≥ 20× at the last timestep)
/// and per timestep, ℓ1-online's max / min seconds, NN's growth in seconds, and the wall time;
/// a check whose measurement is missing says so or is left out.
fn checks(s: &mut String, res: &Results) {
    let _ = writeln!(s, "## Checks\n");
    let sm = &res.summary;
    match sm.speedup_last {
        Some(x) => {
            let _ = writeln!(
                s,
                "- ℓ1-online ≥ 20× faster than ℓ1-batch at the last timestep: {x:.1}× — {}",
                if x >= 20.0 { "PASS" } else { "FAIL" }
            );
            let _ = writeln!(
                s,
                "- ℓ1-batch / ℓ1-online per timestep: {}",
                sm.speedup
                    .iter()
                    .map(|v| format!("{v:.1}×"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        None => {
            let _ = writeln!(s, "- speed-up: not measured (needs ℓ1-online and ℓ1-batch)");
        }
    }
    if let Some(x) = sm.online_seconds_max_over_min {
        let _ = writeln!(
            s,
            "- ℓ1-online seconds per timestep, max / min: {x:.2} (flat in t when close to 1)"
        );
    }
    if let Some(x) = sm.nn_seconds_last_over_first {
        let _ = writeln!(
            s,
            "- NN seconds, last / first evaluated timestep: {x:.2}× — {}",
            if x > 1.0 {
                "grows with t"
            } else {
                "does not grow"
            }
        );
    }
    let _ = writeln!(s, "- wall time: {:.1} s\n", sm.wall_seconds);
}

/// One line per timestep (documents, empty ones, new labels, vocabulary size and evictions),
/// then where the protocol details and seeds are recorded.
fn protocol(s: &mut String, res: &Results) {
    let _ = writeln!(s, "## Protocol\n");
    for t in &res.timesteps {
        let _ = writeln!(
            s,
            "- {} `{}`: {} docs ({} empty), new labels: {}; vocabulary {} terms{}",
            t.index,
            t.name,
            t.docs,
            t.empty,
            if t.new_labels.is_empty() {
                "none".to_string()
            } else {
                t.new_labels.join(", ")
            },
            t.vocabulary,
            if t.evicted_terms > 0 {
                format!(", {} evicted", t.evicted_terms)
            } else {
                String::new()
            }
        );
    }
    let _ = writeln!(
        s,
        "\nProtocol details and every seed are in results.json (`protocol_details`, `seeds`).\n"
    );
}

/// The run's notes as a list, then every plot as an image linked by its file name.
fn notes_and_plots(s: &mut String, res: &Results, plots: &[PathBuf]) {
    let _ = writeln!(s, "## Notes\n");
    for n in &res.notes {
        let _ = writeln!(s, "- {n}");
    }
    s.push('\n');

    let _ = writeln!(s, "## Plots\n");
    for p in plots {
        let name = p.file_name().unwrap().to_string_lossy();
        let _ = writeln!(s, "![{name}]({name})");
    }
}
