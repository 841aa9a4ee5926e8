//! What an evaluation runs with: the checked arguments, the detector's parameters, the stream,
//! the baselines' parameters, the emerging-topic parameters and the reported columns.

use super::super::protocol::{cikm_protocol, read_jsonl_stream, CikmSizes, Stream};
use super::super::results::Column;
use super::super::topics::TopicEvalParams;
use super::super::{ConfigName, EvalArgs, EvalError, Method, ProtocolKind, TopicsMode};
use crate::baselines::l1batch::BatchParams;
use crate::baselines::l2batch::L2Params;
use crate::baselines::neighbours::LshParams;
use novad_models::ostc::OstcParams;
use novad_models::Params;

/// The resolved configuration of one evaluation; fixed for the whole pass.
pub(super) struct Setup {
    /// The methods that run, sorted and without duplicates (never empty).
    pub methods: Vec<Method>,
    /// The detector's parameters (validated; seed = `--seed`).
    pub params: Params,
    /// Where `params` came from (`paper`, `tuned` or `file …`).
    pub config: String,
    /// The stream: a bootstrap timestep and at least one evaluated timestep.
    pub stream: Stream,
    /// ℓ1-batch's parameters.
    pub batch_params: BatchParams,
    /// ℓ2-batch's alternation parameters (its own A-step iterations).
    pub l2_batch_params: BatchParams,
    /// ℓ2-batch's coding parameters.
    pub l2_params: L2Params,
    pub lsh_params: LshParams,
    /// The emerging-topic evaluation's parameters (None when it does not run).
    pub topic_params: Option<TopicEvalParams>,
    /// The reported columns, in [`Column::ALL`] order: the reference scores and those of the
    /// methods that run.
    pub columns: Vec<Column>,
}

impl Setup {
    /// Check the arguments, read the stream and create the output directory. Fails before any
    /// method runs when an argument, the parameters or the stream is unusable.
    pub fn resolve(args: &EvalArgs) -> Result<Self, EvalError> {
        check_args(args)?;
        let methods = method_list(args);
        if methods.is_empty() {
            return Err(EvalError::Args("--methods is empty".into()));
        }
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

        let topic_params = if topics_on(args, &methods)? {
            Some(topic_params(args, &params)?)
        } else {
            None
        };
        let columns: Vec<Column> = Column::ALL
            .into_iter()
            .filter(|c| match c.method() {
                None => true,
                Some(m) => methods.contains(&m),
            })
            .collect();
        Ok(Setup {
            methods,
            params,
            config,
            stream,
            batch_params,
            l2_batch_params,
            l2_params,
            lsh_params,
            topic_params,
            columns,
        })
    }

    /// Whether method `m` runs.
    pub fn has(&self, m: Method) -> bool {
        self.methods.contains(&m)
    }
}

/// `--round` is finite and ≥ 0; the LSH shape is usable.
fn check_args(args: &EvalArgs) -> Result<(), EvalError> {
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
    Ok(())
}

/// `--methods`, sorted and deduplicated, plus the model whose verdict scores the re-weighting
/// experiment fuses (ℓ1-online for hybrid, OSTC for hybrid-ostc) under `--hybrid-reweight`.
fn method_list(args: &EvalArgs) -> Vec<Method> {
    let mut m = args.methods.clone();
    if args.hybrid_reweight && m.contains(&Method::Hybrid) {
        m.push(Method::L1Online);
    }
    if args.hybrid_reweight && m.contains(&Method::HybridOstc) {
        m.push(Method::Ostc);
    }
    m.sort();
    m.dedup();
    m
}

/// Whether the emerging-topic evaluation runs: `auto` when both ℓ1-online and NN run, `on`
/// (an error unless ℓ1-online or NN runs), never with `off`.
fn topics_on(args: &EvalArgs, methods: &[Method]) -> Result<bool, EvalError> {
    let has = |m: Method| methods.contains(&m);
    Ok(match args.topics {
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
    })
}

/// The detector's parameters (`--params`, else the named `--config`) with `--k` and `--seed`
/// applied, validated, and the name of their source.
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
            ConfigName::Paper => (ConfigName::Paper.params(), "paper".to_string()),
            ConfigName::Tuned => (ConfigName::Tuned.params(), "tuned".to_string()),
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
pub(super) fn resolve_ostc_params(args: &EvalArgs) -> Result<OstcParams, EvalError> {
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

/// The evaluation stream of `--protocol`: the CIKM protocol on the 20 Newsgroups archive, or
/// a JSONL stream cut into periods.
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
