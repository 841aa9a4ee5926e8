//! The evaluation loop: one pass over the timesteps, every method fed the same batch.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::hybrid::{HybridEvalParams, HybridInput, HybridMethod};
use super::protocol::{cikm_protocol, read_jsonl_stream, CikmSizes, Stream};
use super::results::{Column, ColumnResult, EvalSummary, Results, Summary, TimestepResult};
use super::topics::{
    evaluate_oracle, evaluate_step, DaemonTopicCost, StepInput, TopicEvalParams, TopicStep,
};
use super::vectorize::StreamVectorizer;
use super::{
    auc, report, roc_points, ConfigName, EvalArgs, EvalError, Method, ProtocolKind, TopicsMode,
};
use crate::baselines::l1batch::{mean, BatchParams, L1Batch, LearnStats};
use crate::baselines::l2batch::{L2Batch, L2Params};
use crate::baselines::neighbours::{ExactNn, Lsh, LshParams};
use crate::baselines::remap_doc;
use novad_models::l1::coding::{code_batch, CodingDict, StepSize};
use novad_models::l1::dictionary::{bootstrap, AtomInit};
use novad_models::ostc::{OstcModel, OstcParams};
use novad_models::text::SparseDoc;
use novad_models::{Model, ModelParams, Params};

/// Round every score to a multiple of `step` (no-op for `step ≤ 0`), so float noise counts as
/// a tie in the AUC.
pub fn round_scores(scores: &[f64], step: f64) -> Vec<f64> {
    if step <= 0.0 {
        return scores.to_vec();
    }
    scores.iter().map(|s| (s / step).round() * step).collect()
}

fn resolve_params(args: &EvalArgs) -> Result<(Params, String), EvalError> {
    let (mut p, name) = match &args.params {
        Some(path) => {
            let s = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
                path: path.display().to_string(),
                source,
            })?;
            let p: Params = toml::from_str(&s).map_err(|e| EvalError::ParamsFile {
                path: path.display().to_string(),
                msg: e.to_string(),
            })?;
            (p, format!("file {}", path.display()))
        }
        None => match args.config {
            ConfigName::Paper => (Params::paper(), "paper".to_string()),
            ConfigName::Tuned => {
                let mut p = Params::paper();
                p.coding.step = StepSize::PerDocument;
                p.coding.absent_weight = 0.05;
                p.oiadmm.carry_delta = false;
                p.bootstrap.init = AtomInit::KMeans {
                    top_terms: 5,
                    iterations: 10,
                };
                (p, "tuned".to_string())
            }
        },
    };
    if let Some(k) = args.k {
        p.k = k;
    }
    p.seed = args.seed;
    p.validate()?;
    Ok((p, name))
}

/// The OSTC method's parameters: `--ostc-config` or the defaults, with `--seed`.
fn resolve_ostc_params(args: &EvalArgs) -> Result<OstcParams, EvalError> {
    let mut p = match &args.ostc_config {
        Some(path) => {
            let s = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
                path: path.display().to_string(),
                source,
            })?;
            toml::from_str::<OstcParams>(&s).map_err(|e| EvalError::ParamsFile {
                path: path.display().to_string(),
                msg: e.to_string(),
            })?
        }
        None => OstcParams::default(),
    };
    p.seed = args.seed;
    p.validate()?;
    Ok(p)
}

/// The emerging-topic evaluation's parameters from the arguments and the detector's topic
/// parameters (the daemon's DICTCLUST; defaults when the detector has topics off).
fn topic_params(args: &EvalArgs, params: &Params) -> Result<TopicEvalParams, EvalError> {
    let mut dict = params.topics.clone().unwrap_or_default();
    if let Some(k) = args.topic_k {
        if k == 0 {
            return Err(EvalError::Args("--topic-k must be ≥ 1".into()));
        }
        dict.k1 = k;
    }
    if let Some(c) = args.topic_merge {
        if !(c.is_finite() && c > 0.0 && c <= 1.0) {
            return Err(EvalError::Args(format!(
                "--topic-merge must be in (0, 1], got {c}"
            )));
        }
        dict.merge_cosine = c;
    }
    if args.topic_fractions.is_empty()
        || args
            .topic_fractions
            .iter()
            .any(|q| !(q.is_finite() && *q > 0.0 && *q <= 1.0))
    {
        return Err(EvalError::Args(format!(
            "--topic-fractions must be numbers in (0, 1], got {:?}",
            args.topic_fractions
        )));
    }
    if args.topic_restarts == 0 {
        return Err(EvalError::Args("--topic-restarts must be ≥ 1".into()));
    }
    let mut fractions = args.topic_fractions.clone();
    fractions.sort_by(f64::total_cmp);
    fractions.dedup();
    Ok(TopicEvalParams {
        fractions,
        k: dict.k1,
        dict,
        restarts: args.topic_restarts,
        kmeans_iterations: args.topic_kmeans_iter,
        recall_levels: TopicEvalParams::default_recall_levels(),
    })
}

fn load_stream(args: &EvalArgs) -> Result<Stream, EvalError> {
    match args.protocol {
        ProtocolKind::Cikm => {
            let posts = crate::corpus::read_20news(&args.corpus)?;
            let sizes = CikmSizes {
                bootstrap_groups: args.bootstrap_groups,
                bootstrap_posts: args.bootstrap_posts,
                new_groups: args.new_groups,
                novel_posts: args.novel_posts,
                known_posts: args.known_posts,
                phases: args.phases,
            };
            cikm_protocol(&posts, &sizes, args.seed)
        }
        ProtocolKind::Stream => {
            read_jsonl_stream(&args.corpus, args.period, args.bootstrap_periods)
        }
    }
}

/// Indices of a seeded subsample of `n` items (all when `cap` is 0 or ≥ n), increasing.
fn subsample(n: usize, cap: usize, seed: u64) -> Vec<usize> {
    if cap == 0 || cap >= n {
        return (0..n).collect();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v = sample(&mut rng, n, cap).into_vec();
    v.sort_unstable();
    v
}

/// Mean ℓ1 score l(p, A) over `docs[idx]`.
fn sre(dict: &ndarray::Array2<f32>, docs: &[SparseDoc], idx: &[usize], params: &Params) -> f64 {
    let mut coding = params.coding.clone();
    coding.residual_terms = 0;
    let cd = CodingDict::new(dict.view(), coding.step);
    let pick: Vec<SparseDoc> = idx.iter().map(|&i| docs[i].clone()).collect();
    mean(code_batch(&cd, &pick, &coding).iter().map(|c| c.score))
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// Run an evaluation and write its outputs. See the module documentation of [`super`].
pub fn run(args: &EvalArgs) -> Result<EvalSummary, EvalError> {
    let wall = Instant::now();
    if !(args.round >= 0.0 && args.round.is_finite()) {
        return Err(EvalError::Args(format!(
            "--round must be a finite number ≥ 0, got {}",
            args.round
        )));
    }
    if args.lsh_bits == 0 || args.lsh_bits > 64 || args.lsh_tables == 0 {
        return Err(EvalError::Args(
            "--lsh-bits must be in 1..=64 and --lsh-tables ≥ 1".into(),
        ));
    }
    let methods: Vec<Method> = {
        let mut m = args.methods.clone();
        // the re-weighting experiment fuses its model's verdict scores
        if args.hybrid_reweight && m.contains(&Method::Hybrid) {
            m.push(Method::L1Online);
        }
        if args.hybrid_reweight && m.contains(&Method::HybridOstc) {
            m.push(Method::Ostc);
        }
        m.sort();
        m.dedup();
        m
    };
    if methods.is_empty() {
        return Err(EvalError::Args("--methods is empty".into()));
    }
    let has = |m: Method| methods.contains(&m);
    let (params, config) = resolve_params(args)?;
    let stream = load_stream(args)?;
    if stream.timesteps.len() < 2 {
        return Err(EvalError::Protocol(
            "the stream needs a bootstrap timestep and at least one evaluated timestep".into(),
        ));
    }
    std::fs::create_dir_all(&args.out).map_err(|source| EvalError::Io {
        path: args.out.display().to_string(),
        source,
    })?;

    let batch_params = BatchParams {
        eta: args.eta,
        alternations: args.batch_alternations,
        tol: args.batch_tol,
        a_step_iter: args.batch_a_iter.unwrap_or(params.bootstrap.a_step_iter),
        max_bytes: (args.batch_max_gib.max(0.0) * (1u64 << 30) as f64) as u64,
    };
    let l2_batch_params = BatchParams {
        a_step_iter: args.l2_a_iter,
        ..batch_params.clone()
    };
    let l2_params = L2Params {
        lambda: args.l2_lambda.unwrap_or(params.coding.lambda),
        unit_l2: !args.l2_raw_docs,
        tol: 1e-6,
        max_sweeps: 500,
    };
    let lsh_params = LshParams {
        bits: args.lsh_bits,
        tables: args.lsh_tables,
        bucket_cap: args.lsh_bucket,
        recent: args.lsh_recent,
        seed: args.seed,
    };

    let topics_on = match args.topics {
        TopicsMode::Off => false,
        TopicsMode::Auto => has(Method::L1Online) && has(Method::Nn),
        TopicsMode::On => {
            if !(has(Method::L1Online) || has(Method::Nn)) {
                return Err(EvalError::Args(
                    "--topics on needs l1-online or nn among --methods".into(),
                ));
            }
            true
        }
    };
    let topic_params = if topics_on {
        Some(topic_params(args, &params)?)
    } else {
        None
    };

    let columns: Vec<Column> = Column::ALL
        .into_iter()
        .filter(|c| match c.method() {
            None => true,
            Some(m) => has(m),
        })
        .collect();
    let n_steps = stream.timesteps.len();
    let pb = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new((n_steps * methods.len() + topics_on as usize * (n_steps - 1)) as u64)
    };
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );

    let mut vz = StreamVectorizer::new(&params.text);
    let mut online = if has(Method::L1Online) {
        Some(Model::new(params.clone())?)
    } else {
        None
    };
    let mut l1b: Option<L1Batch> = None;
    let mut l2b: Option<L2Batch> = None;
    let ostc_params = if has(Method::Ostc) || has(Method::HybridOstc) {
        Some(resolve_ostc_params(args)?)
    } else {
        None
    };
    let mut ostc = match &ostc_params {
        Some(p) if has(Method::Ostc) => Some(OstcModel::new(p.clone())?),
        _ => None,
    };
    let hybrid_params = if has(Method::Hybrid) || has(Method::HybridOstc) {
        Some(HybridEvalParams::new(
            args.hybrid_fusion,
            args.hybrid_nn_weight,
            args.hybrid_max_docs,
            args.hybrid_eviction,
            args.hybrid_terms,
            args.hybrid_half_life,
            args.hybrid_reweight,
        )?)
    } else {
        None
    };
    // the product's engines with the hybrid detector on the model's own parameters
    let mut hybrid_runs: Vec<(Column, Column, HybridMethod)> = Vec::new();
    for (m, col, base) in [
        (Method::Hybrid, Column::Hybrid, Column::L1Online),
        (Method::HybridOstc, Column::HybridOstc, Column::Ostc),
    ] {
        if let (true, Some(hp)) = (has(m), &hybrid_params) {
            let model = match m {
                Method::Hybrid => ModelParams::L1(params.clone()),
                _ => ModelParams::Ostc(ostc_params.clone().expect("OSTC parameters resolved")),
            };
            hybrid_runs.push((col, base, HybridMethod::new(hp, model)?));
        }
    }
    let tok = params.text.tokenizer();
    let mut nn = has(Method::Nn).then(ExactNn::new);
    let mut lsh = has(Method::Lsh).then(|| Lsh::new(lsh_params.clone()));
    // every non-empty document so far (P_[t]), ids in the current vocabulary
    let mut seen: Vec<SparseDoc> = Vec::new();
    let boot_labels: HashSet<String> = stream.timesteps[0]
        .docs
        .iter()
        .map(|d| d.label.clone())
        .collect();
    let mut results: Vec<TimestepResult> = Vec::with_capacity(n_steps);
    let mut dump = String::new();

    for (t, ts) in stream.timesteps.iter().enumerate() {
        let texts: Vec<&str> = ts.docs.iter().map(|d| d.text.as_str()).collect();
        let vb = vz.step(&texts);
        let m = vz.vocab().len();
        if vb.change.remap.map.is_some() {
            for d in &mut seen {
                remap_doc(d, &vb.change);
            }
        }
        let nonempty: Vec<bool> = vb.vectors.iter().map(|v| !v.is_empty()).collect();
        let batch_ne: Vec<SparseDoc> = vb
            .vectors
            .iter()
            .filter(|v| !v.is_empty())
            .cloned()
            .collect();
        if t == 0 && batch_ne.is_empty() {
            return Err(EvalError::Protocol(
                "the bootstrap timestep has no document with a known term".into(),
            ));
        }
        seen.extend(batch_ne.iter().cloned());
        let sre_idx = subsample(seen.len(), args.sre_sample, args.seed ^ (t as u64 + 1));
        let mut scores: BTreeMap<Column, Vec<f64>> = BTreeMap::new();
        let mut cols: BTreeMap<Column, ColumnResult> = BTreeMap::new();
        // codes of the bootstrap batch over the bootstrap dictionary, for ℓ1-batch
        let mut boot_shared: Option<(ndarray::Array2<f32>, Vec<novad_models::model::Code>, f64)> =
            None;
        // what the daemon's own topic stage cost in this step
        let mut daemon_cost: Option<DaemonTopicCost> = None;

        if let Some(model) = online.take() {
            pb.set_message(format!("{}: ℓ1-online", ts.name));
            let (next, out) = model.step(&texts)?;
            if out.vectors != vb.vectors {
                return Err(EvalError::Inconsistent(format!(
                    "timestep {t}: the engine's TF-IDF vectors differ from the harness's"
                )));
            }
            let s = out.stats.seconds_coding + out.stats.seconds_update;
            if t > 0 {
                daemon_cost = Some(DaemonTopicCost {
                    novel: out.verdicts.iter().filter(|v| v.novel).count(),
                    topics: out.topics.len(),
                    seconds_topics: out.stats.seconds_topics,
                    seconds_rest: out.stats.seconds_vectorize + s,
                });
            }
            let mut r = ColumnResult {
                seconds: Some(s),
                ceiling_fraction: Some(out.stats.ceiling_fraction),
                k: Some(params.k),
                ..Default::default()
            };
            if t == 0 {
                if !out.stats.bootstrap {
                    return Err(EvalError::Inconsistent(
                        "the engine did not bootstrap on the first timestep".into(),
                    ));
                }
                let codes: Vec<_> = out
                    .codes
                    .iter()
                    .zip(&nonempty)
                    .filter(|(_, &e)| e)
                    .map(|(c, _)| c.clone())
                    .collect();
                let v = mean(codes.iter().map(|c| c.score));
                r.sre = Some(v);
                r.sre_docs = Some(codes.len());
                boot_shared = Some((next.dictionary().clone(), codes, s));
            } else {
                r.sre = Some(sre(next.dictionary(), &seen, &sre_idx, &params));
                r.sre_docs = Some(sre_idx.len());
            }
            scores.insert(
                Column::L1Online,
                out.verdicts.iter().map(|v| v.score).collect(),
            );
            cols.insert(Column::L1Online, r);
            online = Some(next);
            pb.inc(1);
        }

        if has(Method::L1Batch) {
            pb.set_message(format!("{}: ℓ1-batch", ts.name));
            let mut r = ColumnResult::default();
            if t == 0 {
                let (dict, codes, s) = match boot_shared.take() {
                    Some(x) => x,
                    None => {
                        let t0 = Instant::now();
                        let dict = bootstrap(
                            &vb.vectors,
                            m,
                            params.k,
                            &params.coding,
                            &params.bootstrap,
                            params.seed,
                        );
                        let cd = CodingDict::new(dict.view(), params.coding.step);
                        let codes = code_batch(&cd, &batch_ne, &params.coding);
                        let s = secs(t0);
                        (dict, codes, s)
                    }
                };
                let v = mean(codes.iter().map(|c| c.score));
                r.sre = Some(v);
                r.objective = Some(v);
                r.sre_docs = Some(codes.len());
                r.seconds = Some(s);
                r.k = Some(params.k);
                r.ceiling_fraction = Some(
                    codes.iter().filter(|c| c.at_ceiling()).count() as f64
                        / codes.len().max(1) as f64,
                );
                scores.insert(
                    Column::L1Batch,
                    expand(&nonempty, codes.iter().map(|c| c.score)),
                );
                l1b = Some(L1Batch::new(
                    dict,
                    codes,
                    &params.coding,
                    batch_params.clone(),
                    params.seed,
                ));
            } else {
                let b = l1b.as_mut().expect("ℓ1-batch bootstrapped");
                b.remap(&vb.change);
                let t0 = Instant::now();
                r.k = Some(b.k());
                let codes = b.detect(&vb.vectors);
                let ne_codes: Vec<_> = codes
                    .iter()
                    .zip(&nonempty)
                    .filter(|(_, &e)| e)
                    .map(|(c, _)| c.clone())
                    .collect();
                r.ceiling_fraction = Some(
                    ne_codes.iter().filter(|c| c.at_ceiling()).count() as f64
                        / ne_codes.len().max(1) as f64,
                );
                let st: LearnStats = b
                    .learn(&seen, ne_codes, t as u64)
                    .map_err(EvalError::Resources)?;
                r.seconds = Some(secs(t0));
                r.sre = Some(st.objective);
                r.objective = Some(st.objective);
                r.sre_docs = Some(st.docs);
                r.alternations = Some(st.alternations);
                scores.insert(Column::L1Batch, codes.iter().map(|c| c.score).collect());
            }
            cols.insert(Column::L1Batch, r);
            pb.inc(1);
        }

        if has(Method::L2Batch) {
            pb.set_message(format!("{}: ℓ2-batch", ts.name));
            let mut r = ColumnResult::default();
            let mut rr = ColumnResult::default();
            if t == 0 {
                let t0 = Instant::now();
                let (b, st) = L2Batch::bootstrap(
                    &batch_ne,
                    m,
                    params.k,
                    l2_params.clone(),
                    l2_batch_params.clone(),
                    params.seed,
                );
                r.seconds = Some(secs(t0));
                r.objective = Some(st.objective);
                r.k = Some(params.k);
                r.alternations = Some(st.alternations);
                r.ceiling_fraction = Some(1.0 - st.coded_docs as f64 / st.docs.max(1) as f64);
                let codes = b.detect(&vb.vectors);
                scores.insert(Column::L2Batch, codes.iter().map(|c| c.objective).collect());
                scores.insert(
                    Column::L2Residual,
                    codes.iter().map(|c| c.rel_residual).collect(),
                );
                l2b = Some(b);
            } else {
                let b = l2b.as_mut().expect("ℓ2-batch bootstrapped");
                b.remap(&vb.change);
                let t0 = Instant::now();
                r.k = Some(b.k());
                let codes = b.detect(&vb.vectors);
                let ne_codes: Vec<_> = codes
                    .iter()
                    .zip(&nonempty)
                    .filter(|(_, &e)| e)
                    .map(|(c, _)| c.clone())
                    .collect();
                r.ceiling_fraction = Some(
                    ne_codes.iter().filter(|c| c.atoms.is_empty()).count() as f64
                        / ne_codes.len().max(1) as f64,
                );
                let st = b.learn(&seen, ne_codes, t as u64);
                r.seconds = Some(secs(t0));
                r.objective = Some(st.objective);
                r.alternations = Some(st.alternations);
                scores.insert(Column::L2Batch, codes.iter().map(|c| c.objective).collect());
                scores.insert(
                    Column::L2Residual,
                    codes.iter().map(|c| c.rel_residual).collect(),
                );
            }
            rr.ceiling_fraction = r.ceiling_fraction;
            cols.insert(Column::L2Batch, r);
            cols.insert(Column::L2Residual, rr);
            pb.inc(1);
        }

        if let Some(index) = nn.as_mut() {
            pb.set_message(format!("{}: NN", ts.name));
            index.remap(&vb.change);
            let t0 = Instant::now();
            let s = index.score(&vb.vectors);
            index.insert(&batch_ne, m);
            cols.insert(
                Column::Nn,
                ColumnResult {
                    seconds: Some(secs(t0)),
                    ..Default::default()
                },
            );
            scores.insert(Column::Nn, s);
            pb.inc(1);
        }

        if let Some(index) = lsh.as_mut() {
            pb.set_message(format!("{}: LSH", ts.name));
            let t0 = Instant::now();
            index.remap(&vb.change, vz.vocab());
            let (s, comps) = index.score(&vb.vectors);
            index.insert(&batch_ne, vz.vocab());
            cols.insert(
                Column::Lsh,
                ColumnResult {
                    seconds: Some(secs(t0)),
                    comparisons: Some(comps),
                    ..Default::default()
                },
            );
            scores.insert(Column::Lsh, s);
            pb.inc(1);
        }

        if let Some(model) = ostc.take() {
            pb.set_message(format!("{}: OSTC", ts.name));
            // the daemon's own step on the raw texts (its tokenizer, vocabulary and threshold)
            let (next, out) = model.step(&texts)?;
            if t == 0 && !out.stats.bootstrap {
                return Err(EvalError::Inconsistent(
                    "OSTC did not bootstrap on the first timestep".into(),
                ));
            }
            cols.insert(
                Column::Ostc,
                ColumnResult {
                    seconds: Some(out.stats.seconds_coding + out.stats.seconds_update),
                    k: Some(next.params().k),
                    ..Default::default()
                },
            );
            scores.insert(Column::Ostc, out.verdicts.iter().map(|v| v.score).collect());
            ostc = Some(next);
            pb.inc(1);
        }

        for (col, base, run) in hybrid_runs.iter_mut() {
            pb.set_message(format!("{}: {}", ts.name, col.title()));
            let t0 = Instant::now();
            let none = Vec::new();
            let s = run.step(&HybridInput {
                t,
                texts: &texts,
                vectors: &vb.vectors,
                vocab: vz.vocab(),
                model_scores: scores.get(base).unwrap_or(&none),
                rule: &params.threshold,
                tok: &tok,
            })?;
            cols.insert(
                *col,
                ColumnResult {
                    seconds: Some(secs(t0)),
                    ..Default::default()
                },
            );
            scores.insert(*col, s);
            pb.inc(1);
        }

        scores.insert(Column::UnseenMass, vb.unseen_mass.clone());
        scores.insert(
            Column::Length,
            vb.vectors.iter().map(|v| v.nnz() as f64).collect(),
        );
        cols.entry(Column::UnseenMass).or_default();
        cols.entry(Column::Length).or_default();

        // evaluation
        let labels: Vec<bool> = ts.docs.iter().map(|d| d.novel).collect();
        if ts.bootstrap && labels.iter().any(|&l| l) {
            return Err(EvalError::Inconsistent(
                "a bootstrap document is labelled novel".into(),
            ));
        }
        let keep: Vec<usize> = (0..ts.docs.len()).filter(|&i| nonempty[i]).collect();
        let lab: Vec<bool> = keep.iter().map(|&i| labels[i]).collect();
        let old_boot: Vec<bool> = keep
            .iter()
            .map(|&i| boot_labels.contains(&ts.docs[i].label))
            .collect();
        let n_novel = lab.iter().filter(|&&l| l).count();
        if !ts.bootstrap {
            for (c, s) in &scores {
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
                let sc = round_scores(&keep.iter().map(|&i| s[i]).collect::<Vec<_>>(), args.round);
                let r = cols.get_mut(c).expect("column result");
                r.auc = auc(&sc, &lab);
                r.roc = roc_points(&sc, &lab);
                let split = |want_boot: bool| {
                    let idx: Vec<usize> = (0..lab.len())
                        .filter(|&j| lab[j] || old_boot[j] == want_boot)
                        .collect();
                    auc(
                        &idx.iter().map(|&j| sc[j]).collect::<Vec<_>>(),
                        &idx.iter().map(|&j| lab[j]).collect::<Vec<_>>(),
                    )
                };
                r.auc_vs_bootstrap_labels = split(true);
                r.auc_vs_later_labels = split(false);
            }
        }
        let topic_step = match &topic_params {
            Some(tp) if !ts.bootstrap => {
                pb.set_message(format!("{}: emerging topics", ts.name));
                // truth: the new group of every truly novel non-empty document
                let mut groups: HashMap<&str, usize> = HashMap::new();
                let truth: Vec<Option<usize>> = keep
                    .iter()
                    .map(|&i| {
                        let d = &ts.docs[i];
                        d.novel.then(|| {
                            let n = groups.len();
                            *groups.entry(d.label.as_str()).or_insert(n)
                        })
                    })
                    .collect();
                let docs: Vec<SparseDoc> = keep.iter().map(|&i| vb.vectors[i].clone()).collect();
                let pick = |c: Column| {
                    scores.get(&c).map(|s| {
                        round_scores(&keep.iter().map(|&i| s[i]).collect::<Vec<_>>(), args.round)
                    })
                };
                let (l1, nn_s) = (pick(Column::L1Online), pick(Column::Nn));
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
                pb.inc(1);
                Some(TopicStep {
                    truly_novel: truth.iter().filter(|x| x.is_some()).count(),
                    true_topics: groups.len(),
                    methods,
                    oracle,
                    daemon: daemon_cost.take(),
                })
            }
            _ => None,
        };
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
        results.push(TimestepResult {
            index: t,
            name: ts.name.clone(),
            bootstrap: ts.bootstrap,
            docs: ts.docs.len(),
            empty: ts.docs.len() - keep.len(),
            novel: n_novel,
            non_novel: keep.len() - n_novel,
            new_labels: ts.new_labels.clone(),
            vocabulary: m,
            evicted_terms: vb.change.evicted,
            seconds_vectorize: vb.seconds,
            columns: cols
                .into_iter()
                .filter(|(c, _)| columns.contains(c))
                .map(|(c, r)| (c.key().to_string(), r))
                .collect(),
            topics: topic_step,
        });
    }
    pb.finish_and_clear();

    let mut summary = summarise(&results, &columns);
    if let Some(tp) = &topic_params {
        let steps: Vec<&TopicStep> = results.iter().filter_map(|r| r.topics.as_ref()).collect();
        summary.topics = super::topics::summarise(&steps, tp.recall_levels.len());
        summary.topics_oracle = super::topics::summarise_oracle(&steps);
        let (mut top, mut all) = (0.0, 0.0);
        for d in steps.iter().filter_map(|s| s.daemon.as_ref()) {
            top += d.seconds_topics;
            all += d.seconds_topics + d.seconds_rest;
        }
        summary.daemon_topic_seconds_share = (all > 0.0).then(|| top / all);
    }
    summary.wall_seconds = secs(wall);
    let results = Results {
        version: 1,
        args: args.clone(),
        corpus: args.corpus.display().to_string(),
        protocol: stream.protocol.clone(),
        protocol_details: stream.details.clone(),
        config,
        seeds: serde_json::json!({
            "seed": args.seed,
            "params.seed (atom initialisation, ℓ2 atoms)": params.seed,
            "protocol": "seed ^ 0x5eedc1c320110006 (ChaCha8)",
            "batch growth at timestep t": "seed ^ (0x9e3779b97f4a7c15 * (t + 1))",
            "lsh hyperplanes": args.seed,
            "sre subsample at timestep t": "seed ^ (t + 1)",
            "DICTCLUST / NN-DICT at timestep t (the daemon's)": "params.seed ^ (t * 0xA24BAED4963EE407)",
            "k-means at timestep t": "seed ^ 0x6b6d65616e730000 ^ (t + 1); run r: ^ ((r + 1) * 0x9e3779b97f4a7c15)",
        }),
        params,
        batch: batch_params,
        l2: l2_params,
        lsh: lsh_params,
        ostc: ostc_params,
        hybrid: hybrid_params,
        methods,
        columns: columns.iter().map(|c| c.key().to_string()).collect(),
        threads: rayon::current_num_threads(),
        topics: topic_params.clone(),
        timesteps: results,
        summary: summary.clone(),
        notes: {
            let mut n = notes(args);
            if topic_params.is_some() {
                n.push(
                    "Emerging topics: truth = the true new group of every truly novel non-empty \
                     document; detected = non-empty documents whose rounded score is at least the \
                     swept threshold (ties all in). DICTCLUST is the daemon's `dictclust` with the \
                     detector's topic parameters and its seed at that timestep; both clusterers \
                     run on the detected documents' own terms (exact: other rows stay zero). The \
                     daemon-cost rows come from ℓ1-online's own `Model::step` (its threshold rule, \
                     full vocabulary)."
                        .to_string(),
                );
            }
            n
        },
    };
    let files = report::write_all(&args.out, &results, &dump)?;
    // the returned wall time includes writing the outputs
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

/// Scores of the non-empty documents spread back over the whole batch (empty documents: 0).
fn expand(nonempty: &[bool], vals: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut it = vals;
    nonempty
        .iter()
        .map(|&e| if e { it.next().unwrap_or(0.0) } else { 0.0 })
        .collect()
}

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
