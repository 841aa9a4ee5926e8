//! The OSTC evaluation's outputs: `results.json`, the Markdown report and the charts.

use super::*;

pub(super) fn io(path: &Path) -> impl Fn(std::io::Error) -> OstcEvalError + '_ {
    move |source| OstcEvalError::Io {
        path: path.display().to_string(),
        source,
    }
}

pub(super) fn write_outputs(out: &Path, s: &OstcEvalSummary) -> Result<(), OstcEvalError> {
    let json = out.join("results.json");
    std::fs::write(&json, serde_json::to_string_pretty(s).expect("plain data"))
        .map_err(io(&json))?;
    let acc_docs = out.join("accuracy_docs.svg");
    let series = |c: &[Checkpoint],
                  f: &dyn Fn(&Checkpoint) -> Option<(f64, f64)>|
     -> Vec<(f64, f64)> { c.iter().filter_map(f).collect() };
    type Metric = fn(&Checkpoint) -> f64;
    let metrics: [(&str, &str, Metric); 2] = [
        ("", "Eq. 19", |c| c.perplexity),
        ("_norm", "normalised", |c| c.perplexity_norm),
    ];
    for (suffix, label, metric) in metrics {
        for (axis, xdesc, x) in [
            (
                "seconds",
                "seconds",
                (|c: &Checkpoint| c.seconds.max(1e-3)) as Metric,
            ),
            ("docs", "documents seen", |c: &Checkpoint| {
                c.docs_seen as f64
            }),
        ] {
            let path = out.join(format!("perplexity{suffix}_{axis}.svg"));
            let point = |c: &Checkpoint| Some((x(c), metric(c)));
            chart(
                &path,
                &format!("Held-out perplexity ({label}) vs {xdesc}"),
                xdesc,
                "perplexity",
                &[
                    ("online STC", BLUE, series(&s.stc.online, &point)),
                    ("batch STC", RED, series(&s.stc.batch, &point)),
                    (
                        "online collapsed STC",
                        GREEN,
                        series(&s.stc.collapsed, &point),
                    ),
                ],
            )?;
        }
    }
    let acc = |c: &Checkpoint| c.accuracy.map(|a| (c.docs_seen as f64, a));
    let stc_line = s
        .medstc
        .iter()
        .map(|c| (c.docs_seen as f64, s.stc.accuracy_stc_svm))
        .collect();
    chart(
        &acc_docs,
        "Test accuracy vs documents seen",
        "documents seen",
        "accuracy",
        &[
            ("online MedSTC", BLUE, series(&s.medstc, &acc)),
            ("STC + SVM (final)", RED, stc_line),
        ],
    )?;
    let md = markdown(s);
    let rp = out.join("report.md");
    std::fs::write(&rp, md).map_err(io(&rp))
}

pub(super) fn markdown(s: &OstcEvalSummary) -> String {
    use std::fmt::Write;
    let a = &s.args;
    let mut m = String::new();
    let _ = writeln!(m, "# OSTC on 20 Newsgroups (bydate)\n");
    let _ = writeln!(
        m,
        "K = {}, ρ = {}, γ = λ = {}, τ₀ = {} (batch {}), τ = {}, M = {}, sweeps = {}, passes = {}, seed = {}. \
         Vocabulary {} terms (train df ≥ {}), {} training / {} test documents, perplexity set {} test documents. \
         Total wall time {:.0} s.\n",
        a.k, a.rho, a.gamma, a.tau0, a.batch_tau0, a.tau, a.batch_size, a.sweeps, a.passes, a.seed, s.vocabulary, a.min_df,
        s.train_docs, s.test_docs, s.perp_docs, s.seconds_total
    );
    let _ = writeln!(m, "## Held-out perplexity (document completion)\n");
    let _ = writeln!(
        m,
        "Eq. 19: Poisson, per distinct held-out term, codes of half 1. Normalised: per held-out \
         token, π by fold-in of half 1 (Eq. 18's form).\n"
    );
    let _ = writeln!(
        m,
        "| learner | docs seen | learning s | perplexity (Eq. 19) | perplexity (normalised) |\n|---|---:|---:|---:|---:|"
    );
    for (name, c) in [
        ("online STC", &s.stc.online),
        ("batch STC", &s.stc.batch),
        ("online collapsed STC", &s.stc.collapsed),
    ] {
        for cp in c {
            let _ = writeln!(
                m,
                "| {name} | {} | {:.1} | {:.1} | {:.0} |",
                cp.docs_seen, cp.seconds, cp.perplexity, cp.perplexity_norm
            );
        }
    }
    let when = |v: Option<f64>| {
        v.map_or("never (within the run)".to_string(), |v| {
            format!("{v:.1} s")
        })
    };
    let _ = writeln!(
        m,
        "\nOnline STC reaches the best batch-STC perplexity after: {} (Eq. 19), {} (normalised).\n",
        when(s.stc.online_seconds_to_batch_perplexity),
        when(s.stc.online_seconds_to_batch_perplexity_norm)
    );
    let _ = writeln!(
        m,
        "Batch STC reaches the normalised perplexity online STC ends with ({:.0}, after {:.1} s) after: {}.\n",
        s.stc.online.last().map_or(f64::NAN, |c| c.perplexity_norm),
        s.stc.online.last().map_or(f64::NAN, |c| c.seconds),
        when(s.stc.batch_seconds_to_online_perplexity_norm)
    );
    let _ = writeln!(
        m,
        "Flattening check: the final online dictionary mixed with {:.0} % uniform mass has \
         perplexity {:.1} (Eq. 19) and {:.0} (normalised).\n",
        FLATTEN * 100.0,
        s.stc.flattened_perplexity.0,
        s.stc.flattened_perplexity.1
    );
    let _ = writeln!(m, "## Word-code sparsity (share of zero entries)\n");
    let _ = writeln!(m, "| codes | sparsity |\n|---|---:|");
    let _ = writeln!(m, "| online STC | {:.3} |", s.stc.sparsity_online);
    let _ = writeln!(m, "| batch STC | {:.3} |", s.stc.sparsity_batch);
    if let Some(c) = s.stc.sparsity_collapsed {
        let _ = writeln!(m, "| online collapsed STC | {c:.3} |");
    }
    let _ = writeln!(
        m,
        "| dense baseline (ρ = 0, online dictionary) | {:.3} |\n",
        s.stc.sparsity_dense
    );
    let _ = writeln!(
        m,
        "## Classification accuracy (20 classes, bydate test split)\n"
    );
    let _ = writeln!(m, "| model | accuracy |\n|---|---:|");
    let _ = writeln!(
        m,
        "| online STC + Pegasos SVM | {:.3} |",
        s.stc.accuracy_stc_svm
    );
    if let Some(v) = s.stc.accuracy_batch_stc_svm {
        let _ = writeln!(m, "| batch STC (final iteration) + Pegasos SVM | {v:.3} |");
    }
    let _ = writeln!(
        m,
        "| reference: Pegasos SVM on term counts | {:.3} |",
        s.stc.accuracy_bow_svm
    );
    if let Some(v) = s.accuracy_medstc {
        let _ = writeln!(m, "| online MedSTC (online SVM) | {v:.3} |");
    }
    if let Some(v) = s.accuracy_medstc_refit {
        let _ = writeln!(m, "| online MedSTC (SVM refit on final codes) | {v:.3} |");
    }
    if !s.medstc.is_empty() {
        let _ = writeln!(
            m,
            "\n| MedSTC docs seen | learning s | accuracy | perplexity |\n|---:|---:|---:|---:|"
        );
        for c in &s.medstc {
            let _ = writeln!(
                m,
                "| {} | {:.1} | {:.3} | {:.1} |",
                c.docs_seen,
                c.seconds,
                c.accuracy.unwrap_or(f64::NAN),
                c.perplexity
            );
        }
    }
    let _ = writeln!(
        m,
        "\nPlots: perplexity_seconds.svg, perplexity_docs.svg (Eq. 19), perplexity_norm_seconds.svg, \
         perplexity_norm_docs.svg (normalised), accuracy_docs.svg."
    );
    m
}

type Line<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

pub(super) fn chart(
    path: &Path,
    caption: &str,
    xdesc: &str,
    ydesc: &str,
    series: &[Line],
) -> Result<(), OstcEvalError> {
    let err = |e: &dyn std::fmt::Display| OstcEvalError::Plot {
        path: path.display().to_string(),
        msg: e.to_string(),
    };
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for &(x, y) in &pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if pts.is_empty() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let pad = 0.05 * (y1 - y0);
    let root = SVGBackend::new(path, (760, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut c = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc(xdesc)
        .y_desc(ydesc)
        .draw()
        .map_err(|e| err(&e))?;
    for (name, col, p) in series {
        if p.is_empty() {
            continue;
        }
        let col = *col;
        c.draw_series(LineSeries::new(p.clone(), col.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
        c.draw_series(p.iter().map(|&q| Circle::new(q, 3, col.filled())))
            .map_err(|e| err(&e))?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
