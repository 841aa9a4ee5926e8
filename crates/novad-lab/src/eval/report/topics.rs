//! The emerging-topic section of report.md.

use std::fmt::Write as _;

use super::super::results::{Results, TimestepResult};
use super::super::topics::{DaemonTopicCost, TopicEvalParams, TopicMethod};
use super::{f3, fsec, table};

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

/// The emerging-topic section ([`TOPICS_HEADING`]): the protocol paragraph, the averages, best
/// F1 and chosen thresholds per timestep, clustering alone, the precision–recall note and the
/// daemon's topic-stage cost; nothing when the topic evaluation did not run.
pub(super) fn topics_section(s: &mut String, res: &Results) {
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
    intro(s, tp);
    averages(s, res, &methods);
    best_f1(s, res, &methods, &evald);
    thresholds(s, &methods, &evald);
    oracle(s, res, &evald);
    let _ = writeln!(
        s,
        "The precision–recall plot (`topics_pr.svg`) shows, per method, the interpolated \
         pairwise precision (largest precision of a sweep point with at least that recall) at \
         recall 0, 0.05, …, 1, averaged over the {} evaluated timesteps.\n",
        evald.len()
    );
    daemon_cost(s, res, &evald);
}

/// The heading and the paragraph stating the measure, the methods with their parameters and the
/// swept detection fractions.
fn intro(s: &mut String, tp: &TopicEvalParams) {
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
}

/// Per method the averages over timesteps (best F1, P and R at it, detected documents, seconds),
/// then DICTCLUST's relative gains over the other methods when DICTCLUST, DICT-KM and NN-KM
/// all ran.
fn averages(s: &mut String, res: &Results, methods: &[TopicMethod]) {
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
}

/// Per evaluated timestep the truly novel documents (groups) and every method's best F1 (P / R
/// at it), then the averages row.
fn best_f1(s: &mut String, res: &Results, methods: &[TopicMethod], evald: &[&TimestepResult]) {
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
}

/// Per evaluated timestep and method the sweep point of the best F1: score threshold, fraction,
/// detected documents, truly novel among them, clusters.
fn thresholds(s: &mut String, methods: &[TopicMethod], evald: &[&TimestepResult]) {
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
}

/// DICTCLUST and k-means on exactly the truly novel documents: F1 (P / R) per evaluated timestep
/// and on average; nothing when that evaluation did not run.
fn oracle(s: &mut String, res: &Results, evald: &[&TimestepResult]) {
    if res.summary.topics_oracle.is_empty() {
        return;
    }
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

/// The daemon's topic stage (ℓ1-online's `Model::step`) per evaluated timestep: novel
/// documents, topics, seconds of the stage and of the rest, its share; then its share over all
/// timesteps. Nothing when no timestep measured it.
fn daemon_cost(s: &mut String, res: &Results, evald: &[&TimestepResult]) {
    let costs: Vec<(usize, &DaemonTopicCost)> = evald
        .iter()
        .filter_map(|t| Some((t.index, t.topics.as_ref()?.daemon.as_ref()?)))
        .collect();
    if costs.is_empty() {
        return;
    }
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
