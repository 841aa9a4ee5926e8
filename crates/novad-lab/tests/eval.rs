//! `novad-lab eval`: protocol invariants on the real 20NG archive, smoke runs that check the
//! outputs, determinism, and that no method uses information from later timesteps.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use clap::Parser;
use novad_lab::corpus::{read_20news, Post};
use novad_lab::eval::{
    auc, cikm_protocol, parse_table1, round_scores, run, CikmSizes, EvalArgs, EvalError,
};

fn archive() -> PathBuf {
    novad_lab::corpus::archive_20news()
}

fn posts() -> &'static [Post] {
    static P: OnceLock<Vec<Post>> = OnceLock::new();
    P.get_or_init(|| read_20news(&archive()).expect("20NG archive"))
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: EvalArgs,
}

fn args(extra: &[&str]) -> EvalArgs {
    let corpus = archive().display().to_string();
    let mut v = vec!["eval", "--corpus", corpus.as_str(), "--quiet"];
    v.extend_from_slice(extra);
    Cli::try_parse_from(v).expect("arguments parse").args
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("novad-eval-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A small slice of the CIKM protocol: 3 bootstrap groups × 40 posts, then phases of
/// 2 new groups × 15 posts + 45 known posts, k = 30.
const SMALL: &[&str] = &[
    "--bootstrap-groups",
    "3",
    "--bootstrap-posts",
    "40",
    "--new-groups",
    "2",
    "--novel-posts",
    "15",
    "--known-posts",
    "45",
    "--k",
    "30",
    "--eta",
    "5",
];

fn number(source: &str) -> u64 {
    source.rsplit('/').next().unwrap().parse().unwrap()
}

#[test]
fn cikm_protocol_invariants_on_the_archive() {
    let sizes = CikmSizes::default();
    let s = cikm_protocol(posts(), &sizes, 3).unwrap();
    // 20 groups: 6 bootstrap + 7 phases × 2
    assert_eq!(s.timesteps.len(), 8);
    let boot = &s.timesteps[0];
    assert!(boot.bootstrap);
    assert_eq!(boot.docs.len(), 6 * 150);
    assert!(
        boot.docs.iter().all(|d| !d.novel),
        "bootstrap docs never novel"
    );
    let boot_groups: HashSet<&str> = boot.docs.iter().map(|d| d.label.as_str()).collect();
    assert_eq!(boot_groups.len(), 6);

    let mut first_phase: HashMap<String, usize> = HashMap::new();
    for g in &boot_groups {
        first_phase.insert(g.to_string(), 0);
    }
    let mut used: HashSet<String> = HashSet::new();
    let mut last_number: HashMap<String, u64> = HashMap::new();
    for (t, ts) in s.timesteps.iter().enumerate() {
        if t > 0 {
            assert!(!ts.bootstrap);
            assert_eq!(ts.docs.len(), 2 * 100 + 800, "phase {t} size");
            assert_eq!(ts.n_novel(), 200, "phase {t}: 2 new groups × 100 posts");
            assert_eq!(ts.new_labels.len(), 2);
            for g in &ts.new_labels {
                assert!(first_phase.insert(g.clone(), t).is_none(), "{g} new twice");
            }
        }
        // a group's first phase marks all its docs novel, later phases none
        for d in &ts.docs {
            let fp = first_phase[&d.label];
            assert_eq!(d.novel, t > 0 && fp == t, "{} at phase {t}", d.source);
            assert!(used.insert(d.source.clone()), "{} used twice", d.source);
        }
        // within a group, phases consume posts in article-number order
        let mut by_group: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for d in &ts.docs {
            by_group
                .entry(&d.label)
                .or_default()
                .push(number(&d.source));
        }
        for (g, mut nums) in by_group {
            nums.sort_unstable();
            if let Some(&prev) = last_number.get(g) {
                assert!(
                    nums[0] > prev,
                    "{g}: phase {t} goes back in article numbers"
                );
            }
            last_number.insert(g.to_string(), *nums.last().unwrap());
        }
    }
    assert_eq!(first_phase.len(), 20, "every group used");
    // the bootstrap takes each of its groups' lowest-numbered non-blank posts
    for g in &boot_groups {
        let mut all: Vec<u64> = posts()
            .iter()
            .filter(|p| p.group == *g && !p.text.trim().is_empty())
            .map(|p| p.number)
            .collect();
        all.sort_unstable();
        let mut got: Vec<u64> = boot
            .docs
            .iter()
            .filter(|d| d.label == *g)
            .map(|d| number(&d.source))
            .collect();
        got.sort_unstable();
        assert_eq!(got, all[..150].to_vec(), "{g}");
    }

    // deterministic given the seed; another seed picks another group order
    let again = cikm_protocol(posts(), &sizes, 3).unwrap();
    for (a, b) in s.timesteps.iter().zip(&again.timesteps) {
        assert_eq!(a.docs, b.docs);
    }
    let other = cikm_protocol(posts(), &sizes, 4).unwrap();
    assert_ne!(s.details["group_order"], other.details["group_order"]);

    // configured sizes are honoured, impossible ones rejected
    let custom = CikmSizes {
        bootstrap_groups: 4,
        bootstrap_posts: 30,
        new_groups: 3,
        novel_posts: 20,
        known_posts: 50,
        phases: Some(2),
    };
    let c = cikm_protocol(posts(), &custom, 0).unwrap();
    let sizes: Vec<(usize, usize)> = c
        .timesteps
        .iter()
        .map(|t| (t.docs.len(), t.n_novel()))
        .collect();
    assert_eq!(sizes, vec![(120, 0), (110, 60), (110, 60)]);
    let too_many = CikmSizes {
        phases: Some(8),
        ..CikmSizes::default()
    };
    assert!(matches!(
        cikm_protocol(posts(), &too_many, 0),
        Err(EvalError::Protocol(_))
    ));
    let too_long = CikmSizes {
        novel_posts: 5000,
        ..CikmSizes::default()
    };
    assert!(cikm_protocol(posts(), &too_long, 0).is_err());
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Strip the timing fields (the only non-deterministic part) from results.json.
fn without_timings(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.retain(|k, _| {
                !(k.contains("seconds") || k == "speedup" || k == "speedup_last" || k == "args")
            });
            for (_, x) in m.iter_mut() {
                without_timings(x);
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(without_timings),
        _ => {}
    }
}

#[test]
fn smoke_run_writes_report_results_and_plots() {
    let out = tmp("smoke");
    let o = out.display().to_string();
    let mut a: Vec<&str> = SMALL.to_vec();
    a.extend(["--phases", "2", "--out", &o]);
    let summary = run(&args(&a)).expect("eval runs");
    assert_eq!(summary.timesteps, 2);
    for f in [
        "report.md",
        "results.json",
        "scores.jsonl",
        "roc_t1.svg",
        "roc_t2.svg",
        "auc.svg",
        "seconds.svg",
        "sre.svg",
        "topics_pr.svg",
        "topics_f1.svg",
    ] {
        let p = out.join(f);
        assert!(p.is_file(), "{f} missing");
        if f.ends_with(".svg") {
            let s = read(&p);
            assert!(
                s.starts_with("<svg") && s.trim_end().ends_with("</svg>"),
                "{f}"
            );
            assert!(
                s.contains("<polyline") || s.contains("<path"),
                "{f} has no line"
            );
        }
    }
    assert_eq!(summary.plots.len(), 7);

    // Table 1 parses and agrees with results.json
    let md = read(&out.join("report.md"));
    let t1 = parse_table1(&md).expect("Table 1 parses");
    let res: serde_json::Value = serde_json::from_str(&read(&out.join("results.json"))).unwrap();
    let cols: Vec<&str> = res["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        cols,
        [
            "l1-online",
            "l1-batch",
            "l2-batch",
            "l2-residual",
            "nn",
            "lsh",
            "unseen-mass",
            "length"
        ]
    );
    assert_eq!(t1.columns.len(), cols.len());
    assert_eq!(t1.rows.len(), 2);
    let ts = res["timesteps"].as_array().unwrap();
    assert_eq!(ts.len(), 3);
    for (row, t) in t1.rows.iter().zip(&ts[1..]) {
        assert_eq!(row.0 as u64, t["index"].as_u64().unwrap());
        assert_eq!(row.1 as u64, t["novel"].as_u64().unwrap());
        assert_eq!(row.2 as u64, t["non_novel"].as_u64().unwrap());
        assert_eq!(row.1 + row.2 + t["empty"].as_u64().unwrap() as usize, 75);
        for (v, c) in row.3.iter().zip(&cols) {
            let a = t["columns"][c]["auc"].as_f64().expect("AUC present");
            assert!((v.unwrap() - a).abs() <= 5e-4, "{c}: table {v:?}, json {a}");
            let roc = t["columns"][c]["roc"].as_array().unwrap();
            assert!(roc.len() >= 2);
        }
        // every method has a time, the ℓ1 methods an SRE and a ceiling share
        for c in ["l1-online", "l1-batch", "l2-batch", "nn", "lsh"] {
            assert!(t["columns"][c]["seconds"].as_f64().unwrap() >= 0.0, "{c}");
        }
        for c in ["l1-online", "l1-batch"] {
            let sre = t["columns"][c]["sre"].as_f64().unwrap();
            assert!((0.0..=1.0 + 1e-9).contains(&sre), "{c} SRE {sre}");
            let cf = t["columns"][c]["ceiling_fraction"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&cf));
        }
    }
    assert!(t1.avg.iter().all(|v| v.is_some()));
    // bootstrap timestep: not evaluated, all non-novel
    assert_eq!(ts[0]["novel"], 0);
    assert!(ts[0]["columns"]["l1-online"]["auc"].is_null());
    // seeds and parameters recorded
    assert_eq!(res["seeds"]["seed"], 0);
    assert_eq!(res["params"]["k"], 30);
    assert_eq!(res["protocol_details"]["sizes"]["novel_posts"], 15);
    // one score line per document, every column scored
    let scores = read(&out.join("scores.jsonl"));
    let lines: Vec<serde_json::Value> = scores
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 120 + 2 * 75);
    assert!(lines
        .iter()
        .all(|l| l["scores"].as_object().unwrap().len() == cols.len()));
    // summary agrees with the table's Avg. row
    let on = summary.summary.mean_auc["l1-online"];
    assert!((on - t1.avg[0].unwrap()).abs() <= 5e-4);

    // emerging topics: on by default (ℓ1-online and NN both run), four methods per timestep
    check_topics(
        &md,
        &res,
        &summary.summary,
        &["dictclust", "dict-km", "nn-km", "nn-dict"],
    );
    assert!(read(&out.join("topics_pr.svg")).contains("DICTCLUST"));
    let _ = std::fs::remove_dir_all(&out);
}

/// The emerging-topic section of a report and results.json: every evaluated timestep has a
/// sweep per method whose best point is its largest F1, the summary averages them, and the
/// report shows the section.
fn check_topics(
    md: &str,
    res: &serde_json::Value,
    summary: &novad_lab::eval::Summary,
    methods: &[&str],
) {
    assert!(md.contains("## Emerging topics"), "no topics section");
    assert!(md.contains("### Best F1 per timestep"));
    assert!(md.contains("### Cost of the daemon's topic stage") == methods.contains(&"dictclust"));
    assert!(res["topics"]["fractions"].as_array().unwrap().len() >= 5);
    let ts = res["timesteps"].as_array().unwrap();
    assert!(ts[0]["topics"].is_null(), "bootstrap not evaluated");
    let mut f1s: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for t in &ts[1..] {
        let tp = &t["topics"];
        assert_eq!(tp["truly_novel"], t["novel"]);
        let got: Vec<&str> = tp["methods"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        let mut want = methods.to_vec();
        want.sort_unstable();
        assert_eq!(got, want);
        for m in methods {
            let r = &tp["methods"][*m];
            let sweep = r["sweep"].as_array().unwrap();
            assert!(!sweep.is_empty(), "{m}");
            let max = sweep
                .iter()
                .map(|p| p["f1"].as_f64().unwrap())
                .fold(0.0, f64::max);
            let best = r["best"]["f1"].as_f64().unwrap();
            assert_eq!(best, max, "{m}: best is the sweep's largest F1");
            for p in sweep {
                for k in ["precision", "recall", "f1"] {
                    assert!((0.0..=1.0).contains(&p[k].as_f64().unwrap()));
                }
                assert!(p["detected"].as_u64().unwrap() >= p["detected_novel"].as_u64().unwrap());
            }
            // thresholds strictly decreasing, detected sets growing
            for w in sweep.windows(2) {
                assert!(w[0]["threshold"].as_f64() > w[1]["threshold"].as_f64());
                assert!(w[0]["detected"].as_u64() < w[1]["detected"].as_u64());
            }
            assert_eq!(r["interpolated_precision"].as_array().unwrap().len(), 21);
            f1s.entry(m.to_string()).or_default().push(best);
        }
        assert!(tp["oracle"]["dict"]["f1"].as_f64().is_some());
        assert!(tp["oracle"]["km"]["f1"].as_f64().is_some());
        assert_eq!(tp["daemon"].is_null(), !methods.contains(&"dictclust"));
    }
    for (m, v) in f1s {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!((summary.topics[&m].mean_f1 - mean).abs() < 1e-12, "{m}");
        assert!(
            md.contains(&format!("{mean:.3}")),
            "{m}: mean F1 in the report"
        );
    }
    if methods.contains(&"dictclust") {
        let share = summary.daemon_topic_seconds_share.unwrap();
        assert!((0.0..=1.0).contains(&share));
    }
}

#[test]
fn topics_flag_chooses_the_methods() {
    let out = tmp("topics-flag");
    let o = out.display().to_string();
    let mut a: Vec<&str> = SMALL.to_vec();
    a.extend(["--phases", "1", "--out", &o, "--methods", "nn"]);
    // auto: only with both detectors
    let s = run(&args(&a)).expect("eval runs");
    assert!(s.summary.topics.is_empty());
    assert!(!read(&out.join("report.md")).contains("## Emerging topics"));
    assert!(!out.join("topics_pr.svg").exists());
    // on: the methods whose detector runs
    a.extend(["--topics", "on"]);
    let s = run(&args(&a)).expect("eval runs");
    let keys: Vec<&str> = s.summary.topics.keys().map(|k| k.as_str()).collect();
    assert_eq!(keys, ["nn-dict", "nn-km"]);
    let md = read(&out.join("report.md"));
    let res: serde_json::Value = serde_json::from_str(&read(&out.join("results.json"))).unwrap();
    check_topics(&md, &res, &s.summary, &["nn-km", "nn-dict"]);
    assert!(out.join("topics_pr.svg").is_file());
    // off, and bad values are typed errors
    let mut b: Vec<&str> = SMALL.to_vec();
    b.extend([
        "--phases",
        "1",
        "--out",
        &o,
        "--topics",
        "off",
        "--methods",
        "l1-online,nn",
    ]);
    assert!(run(&args(&b)).unwrap().summary.topics.is_empty());
    for bad in [
        &["--topic-fractions", "0.5,1.5"][..],
        &["--topic-restarts", "0"],
        &["--topic-merge", "0"],
        &["--topic-k", "0"],
    ] {
        let mut c: Vec<&str> = SMALL.to_vec();
        c.extend([
            "--phases",
            "1",
            "--out",
            &o,
            "--methods",
            "nn",
            "--topics",
            "on",
        ]);
        c.extend_from_slice(bad);
        assert!(matches!(run(&args(&c)), Err(EvalError::Args(_))), "{bad:?}");
    }
    let mut c: Vec<&str> = SMALL.to_vec();
    c.extend([
        "--phases",
        "1",
        "--out",
        &o,
        "--methods",
        "lsh",
        "--topics",
        "on",
    ]);
    assert!(matches!(run(&args(&c)), Err(EvalError::Args(_))));
    let _ = std::fs::remove_dir_all(&out);
}

/// Line-by-line equality with a short message naming the first difference.
fn same_lines(a: &str, b: &str, what: &str) {
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    if let Some(i) = (0..la.len().min(lb.len())).find(|&i| la[i] != lb[i]) {
        panic!("{what}: line {} differs:\n{}\n{}", i + 1, la[i], lb[i]);
    }
    assert_eq!(la.len(), lb.len(), "{what}: line counts differ");
}

#[test]
fn deterministic_and_no_information_from_the_future() {
    let run_with = |name: &str, phases: &str| -> (String, serde_json::Value) {
        let out = tmp(name);
        let o = out.display().to_string();
        let mut a: Vec<&str> = SMALL.to_vec();
        a.extend(["--phases", phases, "--seed", "5", "--out", &o]);
        run(&args(&a)).expect("eval runs");
        let scores = read(&out.join("scores.jsonl"));
        let mut res: serde_json::Value =
            serde_json::from_str(&read(&out.join("results.json"))).unwrap();
        without_timings(&mut res);
        let _ = std::fs::remove_dir_all(&out);
        (scores, res)
    };
    let (s1, r1) = run_with("det-a", "2");
    let (s2, r2) = run_with("det-b", "2");
    same_lines(&s1, &s2, "scores are deterministic given the seed");
    assert_eq!(r1, r2, "results (timings aside) are deterministic");
    // A run that stops one phase earlier sees the same past: every score of the shared
    // timesteps must be identical (no method may look at later batches).
    let (s3, _) = run_with("det-c", "1");
    let shared: Vec<&str> = s1
        .lines()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["timestep"].as_u64().unwrap() <= 1
        })
        .collect();
    same_lines(&shared.join("\n"), &s3, "a shorter run sees the same past");
}

#[test]
fn stream_protocol_from_jsonl() {
    // Three days: day 1 = groups A, B (bootstrap), day 2 = A + C, day 3 = B, C, D.
    let groups = [
        "sci.space",
        "rec.autos",
        "talk.politics.guns",
        "comp.graphics",
    ];
    let mut by_group: HashMap<&str, Vec<&Post>> = HashMap::new();
    for p in posts() {
        if groups.contains(&p.group.as_str()) && !p.text.trim().is_empty() {
            by_group.entry(p.group.as_str()).or_default().push(p);
        }
    }
    let plan: [(&str, &[(usize, usize)]); 3] = [
        ("2024-05-01", &[(0, 30), (1, 30)]),
        ("2024-05-02", &[(0, 20), (2, 15)]),
        ("2024-05-03", &[(1, 20), (2, 10), (3, 15)]),
    ];
    let mut jsonl = String::new();
    let mut used: HashMap<usize, usize> = HashMap::new();
    for (day, parts) in plan {
        for &(g, n) in parts {
            let off = used.entry(g).or_insert(0);
            for (i, p) in by_group[groups[g]][*off..*off + n].iter().enumerate() {
                let v = serde_json::json!({
                    "text": p.text,
                    "time": format!("{day}T{:02}:{:02}:00Z", i / 60, i % 60),
                    "label": groups[g],
                });
                jsonl.push_str(&v.to_string());
                jsonl.push('\n');
            }
            *off += n;
        }
    }
    let dir = tmp("stream");
    std::fs::create_dir_all(&dir).unwrap();
    let corpus = dir.join("stream.jsonl");
    std::fs::write(&corpus, jsonl).unwrap();
    let out = dir.join("out");
    let (c, o) = (corpus.display().to_string(), out.display().to_string());
    let a = Cli::try_parse_from([
        "eval",
        "--protocol",
        "stream",
        "--corpus",
        &c,
        "--methods",
        "l1-online,nn",
        "--k",
        "20",
        "--out",
        &o,
        "--quiet",
    ])
    .unwrap()
    .args;
    let s = run(&a).expect("stream eval runs");
    assert_eq!(s.timesteps, 2);
    let res: serde_json::Value = serde_json::from_str(&read(&out.join("results.json"))).unwrap();
    let ts = res["timesteps"].as_array().unwrap();
    let counts: Vec<(u64, u64, u64)> = ts
        .iter()
        .map(|t| {
            (
                t["docs"].as_u64().unwrap(),
                t["novel"].as_u64().unwrap(),
                t["non_novel"].as_u64().unwrap() + t["empty"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(counts, vec![(60, 0, 60), (35, 15, 20), (45, 15, 30)]);
    assert_eq!(ts[2]["new_labels"], serde_json::json!(["comp.graphics"]));
    assert!(parse_table1(&read(&out.join("report.md"))).is_ok());
    // a corpus line without a label is rejected with its line number
    std::fs::write(&corpus, "{\"text\":\"x\",\"time\":\"2024-01-01\"}\n").unwrap();
    match run(&a) {
        Err(EvalError::Jsonl { line, .. }) => assert_eq!(line, 1),
        other => panic!("expected a JSONL error, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn auc_ties_and_rounding() {
    // hand-computed: pos {0.9, 0.4, 0.4}, neg {0.4, 0.1}:
    // 0.9 beats both (2), each 0.4 ties 0.4 (½) and beats 0.1 (1) → 2 + 2 × 1.5 = 5 of 6
    let s = [0.9, 0.4, 0.4, 0.4, 0.1];
    let l = [true, true, true, false, false];
    assert!((auc(&s, &l).unwrap() - 5.0 / 6.0).abs() < 1e-12);
    // saturated scores with float noise: unrounded the noise decides, rounded it is a tie
    let noisy = [1.0, 1.0 + 1e-13, 1.0 - 1e-13, 1.0 - 2e-13];
    let lab = [true, true, false, false];
    assert_eq!(auc(&noisy, &lab), Some(1.0));
    assert_eq!(auc(&round_scores(&noisy, 1e-9), &lab), Some(0.5));
    assert_eq!(round_scores(&noisy, 0.0), noisy.to_vec());
    // no positives / no negatives: undefined
    assert_eq!(auc(&[0.3, 0.2], &[false, false]), None);
    assert_eq!(auc(&[0.3, 0.2], &[true, true]), None);
}

#[test]
fn bad_arguments_are_typed_errors() {
    let out = tmp("bad");
    let o = out.display().to_string();
    let mut a = args(&["--out", &o]);
    a.corpus = PathBuf::from("/nonexistent/20news.tar.gz");
    assert!(matches!(run(&a), Err(EvalError::Corpus(_))));
    let a = args(&["--out", &o, "--phases", "9"]);
    assert!(matches!(run(&a), Err(EvalError::Protocol(_))));
    let a = args(&["--out", &o, "--k", "0"]);
    assert!(matches!(run(&a), Err(EvalError::Params(_))));
    assert!(Cli::try_parse_from(["eval", "--methods", "l1-online,bogus"]).is_err());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn hybrid_columns_are_the_daemons_engine_verdict_scores() {
    use novad_models::memory::HybridParams;
    use novad_models::ostc::OstcParams;
    use novad_models::{Engine, ModelParams, Params};
    let out = tmp("hybrid-product");
    let o = out.display().to_string();
    let mut extra: Vec<&str> = SMALL.to_vec();
    extra.extend([
        "--phases",
        "3",
        "--seed",
        "3",
        "--config",
        "paper",
        "--methods",
        "hybrid,hybrid-ostc",
        "--topics",
        "off",
        "--hybrid-max-docs",
        "60",
        "--hybrid-nn-weight",
        "0.7",
        "--out",
        &o,
    ]);
    run(&args(&extra)).expect("eval runs");
    // the columns, per timestep, from scores.jsonl
    let mut cols: BTreeMap<(String, usize), Vec<f64>> = BTreeMap::new();
    for line in read(&out.join("scores.jsonl")).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let t = v["timestep"].as_u64().unwrap() as usize;
        for c in ["hybrid", "hybrid-ostc"] {
            let s = v["scores"][c]
                .as_f64()
                .expect("a score in each hybrid column");
            cols.entry((c.to_string(), t)).or_default().push(s);
        }
    }
    // the oracle: the daemon's engine on the same stream, hybrid set as the arguments say
    let stream = cikm_protocol(
        posts(),
        &CikmSizes {
            bootstrap_groups: 3,
            bootstrap_posts: 40,
            new_groups: 2,
            novel_posts: 15,
            known_posts: 45,
            phases: Some(3),
        },
        3,
    )
    .unwrap();
    let mut hp = HybridParams::default();
    hp.memory.max_docs = 60;
    hp.nn_weight = 0.7;
    let mut l1 = Params::paper();
    l1.k = 30;
    l1.seed = 3;
    l1.hybrid = Some(hp.clone());
    let ostc = OstcParams {
        seed: 3,
        hybrid: Some(hp),
        ..OstcParams::default()
    };
    for (col, params) in [
        ("hybrid", ModelParams::L1(l1)),
        ("hybrid-ostc", ModelParams::Ostc(ostc)),
    ] {
        let mut e = Engine::new(params).unwrap();
        let mut remembered = 0;
        let mut topics = 0;
        for (t, ts) in stream.timesteps.iter().enumerate() {
            let texts: Vec<&str> = ts.docs.iter().map(|d| d.text.as_str()).collect();
            let (next, o) = e.step_at(&texts, &vec![t as i64; texts.len()]).unwrap();
            let want: Vec<f64> = o.verdicts.iter().map(|v| v.score).collect();
            assert_eq!(cols[&(col.to_string(), t)], want, "{col}, timestep {t}");
            assert_eq!(o.hybrid.len(), texts.len());
            if t > 0 {
                topics += o.topics.len();
            }
            e = next;
            remembered = e.hybrid().unwrap().memory().len();
        }
        if col == "hybrid" {
            // the event measures judge exactly the engine's emerging topics
            let res: serde_json::Value =
                serde_json::from_str(&read(&out.join("results.json"))).unwrap();
            // the paper's parameters run DICTCLUST
            let ev = &res["summary"]["events"]["dictclust"];
            assert!(topics > 0, "the stream has emerging topics");
            assert_eq!(ev["topics"].as_u64().unwrap() as usize, topics, "{ev}");
            assert!(ev["events"].as_u64().unwrap() <= topics as u64);
            assert_eq!(ev["new_groups"].as_u64().unwrap(), 2 * 3);
            assert!(ev["found_groups"].as_u64().unwrap() <= 6);
        }
        assert_eq!(
            remembered, 60,
            "{col}: the memory cap came from --hybrid-max-docs"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
