//! The report's SVG charts (plotters' SVG backend).

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::super::results::{Column, ColumnResult, Results, TimestepResult};
use super::super::topics::TopicMethod;
use super::super::EvalError;
use super::{col, columns, f3};

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
        Column::HybridModel => RGBColor(174, 199, 232),
        Column::HybridNn => RGBColor(255, 152, 150),
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

/// One series per column: (timestep index, `value` of the column's result) over `ts`, where
/// the value exists; columns with no point are left out.
fn column_series(
    cols: impl Iterator<Item = Column>,
    ts: &[&TimestepResult],
    value: impl Fn(&ColumnResult) -> Option<f64>,
) -> Vec<Series> {
    cols.map(|c| {
        let points = ts
            .iter()
            .filter_map(|t| value(col(t, c)?).map(|v| (t.index as f64, v)))
            .collect();
        (c.title().to_string(), colour(c), points)
    })
    .filter(|s: &Series| !s.2.is_empty())
    .collect()
}

pub(super) fn plots(out: &Path, res: &Results) -> Result<Vec<PathBuf>, EvalError> {
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
    let series = column_series(cols.iter().copied(), &evald, |r| r.auc);
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
    let methods = cols.iter().copied().filter(|c| c.is_method());
    let series = column_series(methods, &evald, |r| r.seconds);
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
    let all: Vec<&TimestepResult> = res.timesteps.iter().collect();
    let dictionaries = [Column::L1Online, Column::L1Batch]
        .into_iter()
        .filter(|c| cols.contains(c));
    let series = column_series(dictionaries, &all, |r| r.sre);
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
