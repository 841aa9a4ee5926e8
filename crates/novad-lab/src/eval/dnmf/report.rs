//! The dnmf evaluation's outputs: `results.json`, the Markdown report and the charts.

use super::*;

pub(super) fn write_outputs(out: &Path, s: &DnmfEvalSummary) -> Result<(), EvalError> {
    let io = |path: &Path, e: std::io::Error| EvalError::Io {
        path: path.display().to_string(),
        source: e,
    };
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let json = out.join("results.json");
    std::fs::write(
        &json,
        serde_json::to_string_pretty(s).expect("summary serialises"),
    )
    .map_err(|e| io(&json, e))?;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Dynamic NMF (WSDM 2012) on the CIKM 20 Newsgroups stream\n"
    );
    let _ = writeln!(
        md,
        "{} timesteps, {} documents, seed {}; ω = {}, K₀ = {}, B = {}, ν = {}, HP λ = {}, θ = {}. Emerging events: {}.\n",
        s.timesteps,
        s.documents,
        s.args.seed,
        s.params.window,
        s.params.initial_topics,
        s.params.emerging,
        s.params.nu,
        s.params.trend_lambda,
        s.args.theta,
        s.emerging_events.join(", ")
    );
    let _ = writeln!(md, "| µ | δ | P@1 | R@1 | F1@1 | P@5 | R@5 | F1@5 | miss rate % (θ) | continuity JSD | novelty AUC | novel P | novel R | topics | seconds |");
    let _ = writeln!(
        md,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in &s.runs {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.3} | {} | {:.1} | {:.1} | {} | {:.1} |",
            r.mu,
            r.delta,
            r.f1_top1.precision,
            r.f1_top1.recall,
            r.f1_top1.f1,
            r.f1_top5.precision,
            r.f1_top5.recall,
            r.f1_top5.f1,
            r.miss_rate,
            r.continuity,
            r.novelty_auc.map_or("–".into(), |a| format!("{a:.3}")),
            r.novel_precision,
            r.novel_recall,
            r.topics_final,
            r.seconds
        );
    }
    let _ = writeln!(
        md,
        "\nEvent continuity (true topics, mean JSD between consecutive timesteps): {:.3}\n",
        s.event_continuity
    );
    let _ = writeln!(
        md,
        "## Threshold-based TDT baseline (best over the swept thresholds)\n"
    );
    let _ = writeln!(
        md,
        "| pick | Yes/No | τ | P@1 | R@1 | F1@1 | P@5 | R@5 | F1@5 | topics |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for (name, r) in [
        ("best F1@1", &s.tdt_best_top1),
        ("best F1@5", &s.tdt_best_top5),
    ] {
        if let Some(r) = r {
            let _ = writeln!(
                md,
                "| {name} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
                r.yes_no,
                r.adapt,
                r.f1_top1.precision,
                r.f1_top1.recall,
                r.f1_top1.f1,
                r.f1_top5.precision,
                r.f1_top5.recall,
                r.f1_top5.f1,
                r.topics
            );
        }
    }
    let _ = writeln!(md, "\n## Miss rate at first detection vs θ (%)\n");
    let _ = write!(md, "| run |");
    for t in THETAS {
        let _ = write!(md, " θ={t} |");
    }
    let _ = writeln!(md, "\n|---|{}", "---|".repeat(THETAS.len()));
    for r in &s.runs {
        let _ = write!(md, "| {} |", r.label);
        for m in &r.miss_curve {
            let _ = write!(md, " {m:.1} |");
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md, "\nWall time {:.0} s. Plots: f1_top1_vs_delta.svg, f1_top5_vs_delta.svg, miss_vs_delta.svg, continuity_vs_delta.svg.", s.seconds);
    let mdp = out.join("report.md");
    std::fs::write(&mdp, md).map_err(|e| io(&mdp, e))?;

    // Figure 3-like plots: x = δ (categorical position), one line per µ.
    let xs: Vec<f64> = s.args.deltas.clone();
    let series = |f: &dyn Fn(&RunMetrics) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        s.args
            .mus
            .iter()
            .map(|&mu| {
                let pts = s
                    .runs
                    .iter()
                    .filter(|r| r.mu == mu)
                    .map(|r| {
                        (
                            xs.iter().position(|&d| d == r.delta).unwrap_or(0) as f64,
                            f(r),
                        )
                    })
                    .collect();
                (format!("µ = {mu}"), pts)
            })
            .collect()
    };
    let tdt1 = s.tdt_best_top1.as_ref().map(|r| r.f1_top1.f1);
    let tdt5 = s.tdt_best_top5.as_ref().map(|r| r.f1_top5.f1);
    chart(
        &out.join("f1_top1_vs_delta.svg"),
        "F1@1 vs δ",
        "F1 (%)",
        &xs,
        series(&|r| r.f1_top1.f1),
        tdt1,
    )?;
    chart(
        &out.join("f1_top5_vs_delta.svg"),
        "F1@5 vs δ",
        "F1 (%)",
        &xs,
        series(&|r| r.f1_top5.f1),
        tdt5,
    )?;
    chart(
        &out.join("miss_vs_delta.svg"),
        "Miss rate at first detection vs δ",
        "miss rate (%)",
        &xs,
        series(&|r| r.miss_rate),
        None,
    )?;
    chart(
        &out.join("continuity_vs_delta.svg"),
        "Topic continuity (JSD) vs δ",
        "JSD",
        &xs,
        series(&|r| r.continuity),
        Some(s.event_continuity),
    )?;
    Ok(())
}

pub(super) fn chart(
    path: &Path,
    caption: &str,
    ydesc: &str,
    deltas: &[f64],
    series: Vec<(String, Vec<(f64, f64)>)>,
    reference: Option<f64>,
) -> Result<(), EvalError> {
    let err = |e: &dyn std::fmt::Display| EvalError::Plot {
        path: path.display().to_string(),
        msg: e.to_string(),
    };
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .chain(reference)
        .fold(0.0f64, f64::max)
        * 1.1
        + 1e-9;
    let root = SVGBackend::new(path, (760, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.2..(deltas.len() as f64 - 0.8), 0.0..ymax)
        .map_err(|e| err(&e))?;
    let labels: Vec<String> = deltas.iter().map(|d| format!("{d}")).collect();
    chart
        .configure_mesh()
        .x_labels(deltas.len())
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .x_desc("δ")
        .y_desc(ydesc)
        .draw()
        .map_err(|e| err(&e))?;
    let colours = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
    ];
    for (i, (name, pts)) in series.into_iter().enumerate() {
        let c = colours[i % colours.len()];
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(|e| err(&e))?;
    }
    if let Some(r) = reference {
        let c = RGBColor(127, 127, 127);
        chart
            .draw_series(LineSeries::new(
                vec![(-0.2, r), (deltas.len() as f64 - 0.8, r)],
                c.stroke_width(1),
            ))
            .map_err(|e| err(&e))?
            .label(if caption.starts_with("F1") {
                "TDT baseline (best)"
            } else {
                "events"
            })
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
