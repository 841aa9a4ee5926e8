//! Outputs of `novad eval`: report.md, results.json, scores.jsonl and SVG plots (plotters' SVG
//! backend; text is emitted as SVG `<text>`, so no system font is needed).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::run::{Column, Results, TimestepResult};
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

fn col(t: &TimestepResult, c: Column) -> Option<&super::run::ColumnResult> {
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
        Column::UnseenMass => RGBColor(140, 86, 75),
        Column::Length => RGBColor(127, 127, 127),
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
    Ok(files)
}
