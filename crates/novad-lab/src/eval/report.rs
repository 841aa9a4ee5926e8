//! Outputs of `novad eval`: report.md, results.json, scores.jsonl and SVG plots (plotters' SVG
//! backend; text is emitted as SVG `<text>`, so no system font is needed).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::results::{Column, ColumnResult, Results, TimestepResult};
use super::topics::TopicMethod;
use super::EvalError;

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

fn markdown(res: &Results, plots: &[PathBuf]) -> String {
    let cols = columns(res);
    let evald: Vec<&TimestepResult> = res.timesteps.iter().filter(|t| !t.bootstrap).collect();
    let mut s = String::new();
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

    // Table 1
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
    table(&mut s, &head, &rows);
    let _ = writeln!(
        s,
        "ℓ1 / ℓ2 / NN columns are detectors; ℓ2 relative residual, unseen-term mass and length \
         are reference scores (length = distinct known terms: a detector should beat it).\n"
    );

    // Split AUC
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
        &mut s,
        &[
            "Score".into(),
            "all".into(),
            "vs bootstrap labels".into(),
            "vs later labels".into(),
        ],
        &rows,
    );

    // Seconds
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
    table(&mut s, &head, &rows);
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

    // SRE
    if cols.contains(&Column::L1Online) || cols.contains(&Column::L1Batch) {
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
            &mut s,
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

    // Ceiling
    let ccols: Vec<Column> = [Column::L1Online, Column::L1Batch, Column::L2Batch]
        .into_iter()
        .filter(|c| cols.contains(c))
        .collect();
    if !ccols.is_empty() {
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
        table(&mut s, &head, &rows);
    }

    topics_section(&mut s, res);

    // Checks
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

    // Protocol
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
    s
}

/// The title line of the emerging-topic section.
pub const TOPICS_HEADING: &str = "## Emerging topics";

/// Relative difference a / b − 1 as a signed percentage.
fn pct(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:+.1}%", (a / b - 1.0) * 100.0)
    } else {
        "–".into()
    }
}

fn topics_section(s: &mut String, res: &Results) {
    let Some(tp) = &res.topics else { return };
    let evald: Vec<&TimestepResult> = res
        .timesteps
        .iter()
        .filter(|t| !t.bootstrap && t.topics.is_some())
        .collect();
    let methods: Vec<TopicMethod> = TopicMethod::ALL
        .into_iter()
        .filter(|m| res.summary.topics.contains_key(m.key()))
        .collect();
    let _ = writeln!(s, "{TOPICS_HEADING}\n");
    let _ = writeln!(
        s,
        "CIKM 2011 §7: pairwise precision / recall / F1 over the novel documents of each \
         timestep (truth: the true new group of every truly novel non-empty document; found: \
         the cluster of every detected document). DICTCLUST = ℓ1-online detection + the \
         daemon's DICTCLUST (k₁ = {}, merge_cosine = {}, min_support = {}, {} alternations); \
         DICT-KM = ℓ1-online detection + spherical k-means (K = {}, best objective of {} random \
         inits, {} iterations each); NN-KM = NN-cosine detection + k-means; NN-DICT = \
         NN-cosine detection + DICTCLUST. The detection threshold is swept over the scores at \
         the top fractions {} of each timestep's non-empty documents (all documents tied at \
         the threshold are detected), and each method's best F1 per timestep is reported, as \
         the paper does.\n",
        tp.dict.k1,
        tp.dict.merge_cosine,
        tp.dict.min_support,
        tp.dict.alternations,
        tp.k,
        tp.restarts,
        tp.kmeans_iterations,
        tp.fractions
            .iter()
            .map(|q| format!("{q}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // summary
    let _ = writeln!(s, "### Average over timesteps\n");
    let rows: Vec<Vec<String>> = methods
        .iter()
        .map(|m| {
            let x = &res.summary.topics[m.key()];
            vec![
                m.title().to_string(),
                f3(Some(x.mean_f1)),
                f3(Some(x.mean_precision)),
                f3(Some(x.mean_recall)),
                format!("{:.0}", x.mean_detected),
                fsec(Some(x.mean_seconds)),
            ]
        })
        .collect();
    table(
        s,
        &[
            "Method".into(),
            "avg best F1".into(),
            "avg P at best".into(),
            "avg R at best".into(),
            "avg detected at best".into(),
            "clustering s / timestep (whole sweep)".into(),
        ],
        &rows,
    );
    let f = |m: TopicMethod| res.summary.topics.get(m.key()).map(|x| x.mean_f1);
    if let (Some(dc), Some(dk), Some(nk)) = (
        f(TopicMethod::Dictclust),
        f(TopicMethod::DictKm),
        f(TopicMethod::NnKm),
    ) {
        let _ = writeln!(
            s,
            "DICTCLUST vs DICT-KM {}, vs NN-KM {}{} (paper, 20NG: +7.0% and +16.0%). \
             Ordering DICTCLUST > DICT-KM > NN-KM: {}.\n",
            pct(dc, dk),
            pct(dc, nk),
            f(TopicMethod::NnDict)
                .map(|nd| format!(", vs NN-DICT {}", pct(dc, nd)))
                .unwrap_or_default(),
            if dc > dk && dk > nk { "yes" } else { "no" }
        );
    }
    // per timestep
    let _ = writeln!(s, "### Best F1 per timestep (P / R at that point)\n");
    let mut head = vec!["Timestep".to_string(), "truly novel (groups)".into()];
    head.extend(methods.iter().map(|m| m.title().to_string()));
    let mut rows: Vec<Vec<String>> = evald
        .iter()
        .map(|t| {
            let ts = t.topics.as_ref().expect("topics");
            let mut r = vec![
                t.index.to_string(),
                format!("{} ({})", ts.truly_novel, ts.true_topics),
            ];
            r.extend(methods.iter().map(|m| {
                match ts.methods.get(m.key()).and_then(|x| x.best.as_ref()) {
                    Some(b) => format!("{:.3} ({:.2} / {:.2})", b.f1, b.precision, b.recall),
                    None => "–".into(),
                }
            }));
            r
        })
        .collect();
    let mut avg = vec!["Avg.".to_string(), String::new()];
    avg.extend(methods.iter().map(|m| {
        let x = &res.summary.topics[m.key()];
        format!(
            "{:.3} ({:.2} / {:.2})",
            x.mean_f1, x.mean_precision, x.mean_recall
        )
    }));
    rows.push(avg);
    table(s, &head, &rows);
    let _ = writeln!(
        s,
        "### Chosen threshold per timestep (score threshold, detected documents, truly novel \
         among them, clusters)\n"
    );
    let mut head = vec!["Timestep".to_string()];
    head.extend(methods.iter().map(|m| m.title().to_string()));
    let rows: Vec<Vec<String>> = evald
        .iter()
        .map(|t| {
            let ts = t.topics.as_ref().expect("topics");
            let mut r = vec![t.index.to_string()];
            r.extend(methods.iter().map(|m| {
                match ts.methods.get(m.key()).and_then(|x| x.best.as_ref()) {
                    Some(b) => format!(
                        "{:.4} (top {:.0}%: {} docs, {} novel, {} clusters)",
                        b.threshold,
                        b.fraction * 100.0,
                        b.detected,
                        b.detected_novel,
                        b.clusters
                    ),
                    None => "–".into(),
                }
            }));
            r
        })
        .collect();
    table(s, &head, &rows);
    // the clusterers alone
    if !res.summary.topics_oracle.is_empty() {
        let _ = writeln!(s, "### Clustering alone: perfect detection\n");
        let _ = writeln!(
            s,
            "Exactly the truly novel documents, clustered by DICTCLUST and by k-means (same \
             parameters and seeds as above): F1 (P / R). Separates the clustering from the \
             detection; not a method of the paper.\n"
        );
        let keys = [("dict", "DICTCLUST"), ("km", "k-means")];
        let cell = |p: Option<(f64, f64, f64)>| {
            p.map_or("–".into(), |(f, pr, r)| {
                format!("{f:.3} ({pr:.2} / {r:.2})")
            })
        };
        let mut rows: Vec<Vec<String>> = evald
            .iter()
            .map(|t| {
                let o = &t.topics.as_ref().expect("topics").oracle;
                let mut r = vec![t.index.to_string()];
                r.extend(
                    keys.iter()
                        .map(|(k, _)| cell(o.get(*k).map(|p| (p.f1, p.precision, p.recall)))),
                );
                r
            })
            .collect();
        let mut avg = vec!["Avg.".to_string()];
        avg.extend(keys.iter().map(|(k, _)| {
            cell(
                res.summary
                    .topics_oracle
                    .get(*k)
                    .map(|x| (x.mean_f1, x.mean_precision, x.mean_recall)),
            )
        }));
        rows.push(avg);
        let mut head = vec!["Timestep".to_string()];
        head.extend(keys.iter().map(|(_, t)| t.to_string()));
        table(s, &head, &rows);
    }
    let _ = writeln!(
        s,
        "The precision–recall plot (`topics_pr.svg`) shows, per method, the interpolated \
         pairwise precision (largest precision of a sweep point with at least that recall) at \
         recall 0, 0.05, …, 1, averaged over the {} evaluated timesteps.\n",
        evald.len()
    );
    // the daemon's topic stage
    let costs: Vec<(usize, &super::topics::DaemonTopicCost)> = evald
        .iter()
        .filter_map(|t| Some((t.index, t.topics.as_ref()?.daemon.as_ref()?)))
        .collect();
    if !costs.is_empty() {
        let _ = writeln!(s, "### Cost of the daemon's topic stage\n");
        let _ = writeln!(
            s,
            "ℓ1-online's `Model::step` (what the daemon runs) with its own threshold rule: \
             DICTCLUST on the documents it marked novel (`StepStats.seconds_topics`) against \
             the rest of the timestep (vectorise + coding + dictionary update).\n"
        );
        let rows: Vec<Vec<String>> = costs
            .iter()
            .map(|(i, d)| {
                let all = d.seconds_topics + d.seconds_rest;
                vec![
                    i.to_string(),
                    d.novel.to_string(),
                    d.topics.to_string(),
                    fsec(Some(d.seconds_topics)),
                    fsec(Some(d.seconds_rest)),
                    if all > 0.0 {
                        format!("{:.1}%", 100.0 * d.seconds_topics / all)
                    } else {
                        "–".into()
                    },
                ]
            })
            .collect();
        table(
            s,
            &[
                "Timestep".into(),
                "novel (daemon)".into(),
                "topics".into(),
                "s topics".into(),
                "s rest".into(),
                "topics share of the timestep".into(),
            ],
            &rows,
        );
        if let Some(x) = res.summary.daemon_topic_seconds_share {
            let _ = writeln!(
                s,
                "Over all evaluated timesteps the topic stage is {:.1}% of the daemon's \
                 timestep time ({:.1}% on top of the rest).\n",
                100.0 * x,
                100.0 * x / (1.0 - x).max(f64::MIN_POSITIVE)
            );
        }
    }
}

/// The AUC table of a report.md, parsed back.
#[derive(Debug, Clone, PartialEq)]
pub struct Table1 {
    /// Score column titles (after the three count columns).
    pub columns: Vec<String>,
    /// Per timestep: index, novel, non-novel, one AUC per column (None for "–").
    pub rows: Vec<(usize, usize, usize, Vec<Option<f64>>)>,
    /// The "Avg." row.
    pub avg: Vec<Option<f64>>,
}

/// Parse the Table 1 section of a report.md.
pub fn parse_table1(md: &str) -> Result<Table1, String> {
    let start = md
        .find(TABLE1_HEADING)
        .ok_or_else(|| "no Table 1 heading".to_string())?;
    let lines: Vec<&str> = md[start..]
        .lines()
        .skip(1)
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with('|'))
        .collect();
    if lines.len() < 3 {
        return Err("table too short".into());
    }
    let cells = |l: &str| -> Vec<String> {
        l.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    };
    let head = cells(lines[0]);
    if head.len() < 4 || head[0] != "Timestep" {
        return Err(format!("unexpected header {head:?}"));
    }
    let ncol = head.len();
    let num = |c: &str| -> Result<Option<f64>, String> {
        if c == "–" {
            return Ok(None);
        }
        let v: f64 = c.parse().map_err(|_| format!("not a number: {c:?}"))?;
        if !(0.0..=1.0).contains(&v) {
            return Err(format!("AUC out of [0, 1]: {v}"));
        }
        Ok(Some(v))
    };
    let mut rows = Vec::new();
    let mut avg = None;
    for l in &lines[2..] {
        let c = cells(l);
        if c.len() != ncol {
            return Err(format!("row has {} cells, header {ncol}: {l}", c.len()));
        }
        let aucs = c[3..]
            .iter()
            .map(|x| num(x))
            .collect::<Result<Vec<_>, _>>()?;
        if c[0] == "Avg." {
            avg = Some(aucs);
        } else {
            let p = |x: &str| {
                x.parse::<usize>()
                    .map_err(|_| format!("not a count: {x:?}"))
            };
            rows.push((p(&c[0])?, p(&c[1])?, p(&c[2])?, aucs));
        }
    }
    Ok(Table1 {
        columns: head[3..].to_vec(),
        rows,
        avg: avg.ok_or("no Avg. row")?,
    })
}

fn plot_err(path: &Path, e: impl std::fmt::Display) -> EvalError {
    EvalError::Plot {
        path: path.display().to_string(),
        msg: e.to_string(),
    }
}

fn colour(c: Column) -> RGBColor {
    match c {
        Column::L1Online => RGBColor(31, 119, 180),
        Column::L1Batch => RGBColor(255, 127, 14),
        Column::L2Batch => RGBColor(44, 160, 44),
        Column::L2Residual => RGBColor(152, 223, 138),
        Column::Nn => RGBColor(214, 39, 40),
        Column::Lsh => RGBColor(148, 103, 189),
        Column::Ostc => RGBColor(188, 189, 34),
        Column::Hybrid => RGBColor(23, 190, 207),
        Column::HybridOstc => RGBColor(227, 119, 194),
        Column::UnseenMass => RGBColor(140, 86, 75),
        Column::Length => RGBColor(127, 127, 127),
    }
}

fn topic_colour(m: TopicMethod) -> RGBColor {
    match m {
        TopicMethod::Dictclust => RGBColor(31, 119, 180),
        TopicMethod::DictKm => RGBColor(23, 190, 207),
        TopicMethod::NnKm => RGBColor(214, 39, 40),
        TopicMethod::NnDict => RGBColor(255, 127, 14),
    }
}

type Series = (String, RGBColor, Vec<(f64, f64)>);

/// A line chart; `log_y` uses a logarithmic y axis (non-positive values are dropped).
#[allow(clippy::too_many_arguments)]
fn line_chart(
    path: &Path,
    caption: &str,
    xdesc: &str,
    ydesc: &str,
    x: (f64, f64),
    y: (f64, f64),
    log_y: bool,
    series: &[Series],
) -> Result<(), EvalError> {
    // timestep axes get integer labels
    let int_x = xdesc == "timestep";
    let root = SVGBackend::new(path, (760, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            let fmt = |v: &f64| {
                if int_x {
                    if (v - v.round()).abs() < 1e-6 {
                        format!("{v:.0}")
                    } else {
                        String::new()
                    }
                } else {
                    format!("{v:.1}")
                }
            };
            chart
                .configure_mesh()
                .x_label_formatter(&fmt)
                .x_desc(xdesc)
                .y_desc(ydesc)
                .draw()
                .map_err(|e| plot_err(path, e))?;
            for (name, c, pts) in series {
                let c = *c;
                let pts: Vec<(f64, f64)> = pts
                    .iter()
                    .copied()
                    .filter(|p| !log_y || p.1 > 0.0)
                    .collect();
                chart
                    .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                    .map_err(|e| plot_err(path, e))?
                    .label(name.as_str())
                    .legend(move |(px, py)| {
                        PathElement::new(vec![(px, py), (px + 18, py)], c.stroke_width(2))
                    });
                if pts.len() <= 40 {
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                        .map_err(|e| plot_err(path, e))?;
                }
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::LowerRight)
                .draw()
                .map_err(|e| plot_err(path, e))?;
        }};
    }
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    if log_y {
        draw!(builder
            .build_cartesian_2d(x.0..x.1, (y.0..y.1).log_scale())
            .map_err(|e| plot_err(path, e))?);
    } else {
        draw!(builder
            .build_cartesian_2d(x.0..x.1, y.0..y.1)
            .map_err(|e| plot_err(path, e))?);
    }
    root.present().map_err(|e| plot_err(path, e))?;
    Ok(())
}

fn plots(out: &Path, res: &Results) -> Result<Vec<PathBuf>, EvalError> {
    let cols = columns(res);
    let mut files = Vec::new();
    let evald: Vec<&TimestepResult> = res.timesteps.iter().filter(|t| !t.bootstrap).collect();
    // ROC per timestep
    for t in &evald {
        let series: Vec<Series> = cols
            .iter()
            .filter_map(|&c| {
                let r = col(t, c)?;
                (!r.roc.is_empty()).then(|| {
                    (
                        format!("{} ({})", c.title(), f3(r.auc)),
                        colour(c),
                        r.roc.clone(),
                    )
                })
            })
            .collect();
        let mut series = series;
        series.push((
            "chance".into(),
            RGBColor(200, 200, 200),
            vec![(0.0, 0.0), (1.0, 1.0)],
        ));
        let p = out.join(format!("roc_t{}.svg", t.index));
        line_chart(
            &p,
            &format!(
                "ROC, timestep {} ({} novel / {} non-novel)",
                t.index, t.novel, t.non_novel
            ),
            "false-positive rate",
            "true-positive rate",
            (0.0, 1.0),
            (0.0, 1.0),
            false,
            &series,
        )?;
        files.push(p);
    }
    let xr = (
        evald.first().map_or(0.0, |t| t.index as f64) - 0.2,
        evald.last().map_or(1.0, |t| t.index as f64) + 0.2,
    );
    // AUC per timestep
    let series: Vec<Series> = cols
        .iter()
        .map(|&c| {
            (
                c.title().to_string(),
                colour(c),
                evald
                    .iter()
                    .filter_map(|t| col(t, c)?.auc.map(|a| (t.index as f64, a)))
                    .collect(),
            )
        })
        .filter(|s: &Series| !s.2.is_empty())
        .collect();
    let p = out.join("auc.svg");
    line_chart(
        &p,
        "AUC per timestep",
        "timestep",
        "AUC",
        xr,
        (0.0, 1.0),
        false,
        &series,
    )?;
    files.push(p);
    // seconds per timestep (log scale)
    let series: Vec<Series> = cols
        .iter()
        .filter(|c| c.is_method())
        .map(|&c| {
            (
                c.title().to_string(),
                colour(c),
                evald
                    .iter()
                    .filter_map(|t| col(t, c)?.seconds.map(|s| (t.index as f64, s)))
                    .collect(),
            )
        })
        .filter(|s: &Series| !s.2.is_empty())
        .collect();
    let (lo, hi) = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .filter(|&v| v > 0.0)
        .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    let (lo, hi) = if lo <= hi {
        (lo / 2.0, hi * 2.0)
    } else {
        (1e-3, 1.0)
    };
    let p = out.join("seconds.svg");
    line_chart(
        &p,
        "Seconds per timestep (log scale)",
        "timestep",
        "seconds",
        xr,
        (lo, hi),
        true,
        &series,
    )?;
    files.push(p);
    // SRE per timestep
    let series: Vec<Series> = [Column::L1Online, Column::L1Batch]
        .into_iter()
        .filter(|c| cols.contains(c))
        .map(|c| {
            (
                c.title().to_string(),
                colour(c),
                res.timesteps
                    .iter()
                    .filter_map(|t| col(t, c)?.sre.map(|s| (t.index as f64, s)))
                    .collect(),
            )
        })
        .filter(|s: &Series| !s.2.is_empty())
        .collect();
    if !series.is_empty() {
        let (lo, hi) = series
            .iter()
            .flat_map(|s| s.2.iter().map(|p| p.1))
            .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
        let pad = ((hi - lo) * 0.1).max(1e-3);
        let p = out.join("sre.svg");
        line_chart(
            &p,
            "SRE of the dictionary per timestep",
            "timestep",
            "SRE (mean l(p, A) over documents so far)",
            (-0.2, res.timesteps.len() as f64 - 0.8),
            (lo - pad, hi + pad),
            false,
            &series,
        )?;
        files.push(p);
    }
    // emerging topics: mean interpolated PR curve, best F1 per timestep
    if let Some(tp) = &res.topics {
        let methods: Vec<TopicMethod> = TopicMethod::ALL
            .into_iter()
            .filter(|m| res.summary.topics.contains_key(m.key()))
            .collect();
        if !methods.is_empty() {
            let series: Vec<Series> = methods
                .iter()
                .map(|&m| {
                    let x = &res.summary.topics[m.key()];
                    (
                        format!("{} (avg F1 {:.3})", m.title(), x.mean_f1),
                        topic_colour(m),
                        tp.recall_levels
                            .iter()
                            .copied()
                            .zip(x.mean_interpolated_precision.iter().copied())
                            .collect(),
                    )
                })
                .collect();
            let p = out.join("topics_pr.svg");
            line_chart(
                &p,
                "Emerging topics: interpolated pairwise PR, mean over timesteps",
                "pairwise recall",
                "interpolated pairwise precision",
                (0.0, 1.0),
                (0.0, 1.0),
                false,
                &series,
            )?;
            files.push(p);
            let series: Vec<Series> = methods
                .iter()
                .map(|&m| {
                    (
                        m.title().to_string(),
                        topic_colour(m),
                        evald
                            .iter()
                            .filter_map(|t| {
                                let b = t.topics.as_ref()?.methods.get(m.key())?.best.as_ref()?;
                                Some((t.index as f64, b.f1))
                            })
                            .collect(),
                    )
                })
                .filter(|s: &Series| !s.2.is_empty())
                .collect();
            let p = out.join("topics_f1.svg");
            line_chart(
                &p,
                "Emerging topics: best pairwise F1 per timestep",
                "timestep",
                "best pairwise F1",
                xr,
                (0.0, 1.0),
                false,
                &series,
            )?;
            files.push(p);
        }
    }
    Ok(files)
}
