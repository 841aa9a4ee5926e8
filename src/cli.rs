//! Command-line definitions (clap) and the glue from parsed arguments to library calls.
//! `main.rs` only parses and dispatches.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::engine::{ModelKind, ModelParams};
use crate::threshold::ThresholdRule;

#[derive(Debug, Parser)]
#[command(
    name = "novad",
    version,
    about = "Finds novel documents in a text stream (online ℓ1 dictionary learning) and groups them into emerging topics",
    long_about = None
)]
pub struct Cli {
    /// More log output (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: watch the inbox, ingest each batch file as one timestep.
    Run(RunArgs),
    /// Ingest batch files once, in the order given (the daemon's code path, without moving
    /// files).
    Ingest(IngestArgs),
    /// List verdicts by document time (works while the daemon runs).
    Verdicts(VerdictArgs),
    /// List emerging topics (works while the daemon runs).
    Topics(TopicArgs),
    /// Show the store's state and the latest timesteps (works while the daemon runs).
    Status(StatusArgs),
    /// Write a portable snapshot of the whole store to FILE.
    Export(SnapshotArgs),
    /// Create a store from a snapshot FILE (the store directory must be new or empty).
    Import(SnapshotArgs),
    /// Print a fingerprint (blake3) of the model state: equal digests mean identical models.
    Digest(StoreArg),
    /// Replicate the papers' experiments on a labelled corpus: ℓ1-online vs ℓ1-batch, ℓ2 and
    /// nearest-neighbour baselines; writes report.md, results.json and SVG plots to --out.
    Eval(crate::eval::EvalArgs),
    /// The dynamic-NMF model's evaluation (WSDM 2012) on the 20NG CIKM stream: micro F1 at
    /// top-1/top-5, miss rate at first detection, topic continuity, the threshold-based TDT
    /// baseline, F1 vs δ for several µ; report.md, results.json, SVG plots in --out.
    #[command(name = "eval-dnmf")]
    EvalDnmf(crate::eval::dnmf::DnmfEvalArgs),
    /// The online sparse topical coding evaluation (WWW 2013) on 20NG bydate: held-out
    /// perplexity online vs batch, word-code sparsity, online MedSTC accuracy; report.md,
    /// results.json, SVG plots in --out.
    #[command(name = "eval-ostc")]
    EvalOstc(crate::eval::OstcEvalArgs),
    /// Serve the dashboard and HTTP API of a stopped store (read-only; a running daemon
    /// serves its own).
    Serve(ServeArgs),
    /// Print a parameter set as TOML (a starting point for `--config`): the defaults, the
    /// paper's configuration, or the parameters a store was created with.
    Params(ParamsArgs),
}

#[derive(Debug, Clone, Args)]
pub struct StoreArg {
    /// Store directory (created when missing).
    #[arg(long, default_value = "./novad-data")]
    pub store: PathBuf,
}

/// Model parameters, fixed when a store is created. Given for an existing store they must
/// match what it was created with.
#[derive(Debug, Clone, Default, Args)]
pub struct ParamArgs {
    /// Model of a new store: l1 (default), dnmf or ostc. Fixed when the store is created.
    #[arg(long, value_enum)]
    pub model: Option<ModelKind>,
    /// TOML file with the model's full parameter set (`novad params --model M` prints one);
    /// flags below override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Number of dictionary atoms (the adaptive size bounds follow it, ¾k..1½k, when it falls
    /// outside them).
    #[arg(long)]
    pub k: Option<usize>,
    /// ℓ1 weight λ of the codes.
    #[arg(long)]
    pub lambda: Option<f64>,
    /// OIADMM penalty β.
    #[arg(long)]
    pub beta: Option<f64>,
    /// Threshold rule: `fixed:ZETA`, `top:FRACTION` or `adaptive:QUANTILE[:HALF_LIFE]`.
    #[arg(long)]
    pub threshold: Option<String>,
    /// Vocabulary bound (terms).
    #[arg(long)]
    pub max_terms: Option<usize>,
    /// Seed of every random choice.
    #[arg(long)]
    pub seed: Option<u64>,
}

impl ParamArgs {
    /// The requested parameters, or `None` when nothing was requested (use the store's, or
    /// the ℓ1 defaults for a new store).
    pub fn resolve(&self) -> Result<Option<ModelParams>, String> {
        let l1_flag = self.k.is_some() || self.lambda.is_some() || self.beta.is_some();
        let any_flag =
            l1_flag || self.threshold.is_some() || self.max_terms.is_some() || self.seed.is_some();
        if self.model.is_none() && self.config.is_none() && !any_flag {
            return Ok(None);
        }
        let kind = self.model.unwrap_or_default();
        let mut p = match &self.config {
            Some(path) => {
                let s = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                ModelParams::from_toml(kind, &s).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => ModelParams::defaults(kind).map_err(|e| e.to_string())?,
        };
        match &mut p {
            ModelParams::L1(p) => {
                if let Some(v) = self.k {
                    *p = p.clone().with_k(v);
                }
                if let Some(v) = self.lambda {
                    p.coding.lambda = v;
                }
                if let Some(v) = self.beta {
                    p.oiadmm.beta = v;
                }
                if let Some(v) = self.max_terms {
                    p.text.max_terms = v;
                }
                if let Some(v) = self.seed {
                    p.seed = v;
                }
                if let Some(t) = &self.threshold {
                    p.threshold = parse_threshold(t)?;
                }
            }
            other => {
                if l1_flag {
                    return Err(format!(
                        "--k, --lambda and --beta apply to the l1 model only; set the {} parameters in a --config file (`novad params --model {}` prints them)",
                        kind, kind
                    ));
                }
                let mut v = other.to_json();
                let mut set = |path: &[&str], val: serde_json::Value, flag: &str| {
                    let mut node = &mut v;
                    for key in &path[..path.len() - 1] {
                        node = &mut node[*key];
                    }
                    match node.get_mut(path[path.len() - 1]) {
                        Some(slot) => {
                            *slot = val;
                            Ok(())
                        }
                        None => Err(format!("{flag} does not apply to the {kind} model")),
                    }
                };
                if let Some(x) = self.seed {
                    set(&["seed"], x.into(), "--seed")?;
                }
                if let Some(x) = self.max_terms {
                    set(&["text", "max_terms"], x.into(), "--max-terms")?;
                }
                if let Some(t) = &self.threshold {
                    let rule = serde_json::to_value(parse_threshold(t)?).unwrap();
                    set(&["threshold"], rule, "--threshold")?;
                }
                *other = ModelParams::from_json(kind, v)?;
            }
        }
        p.validate().map_err(|e| e.to_string())?;
        Ok(Some(p))
    }
}

/// Parse `fixed:ZETA`, `top:FRACTION`, `adaptive:QUANTILE[:HALF_LIFE]`.
pub fn parse_threshold(s: &str) -> Result<ThresholdRule, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let num = |i: usize| -> Result<f64, String> {
        parts
            .get(i)
            .ok_or_else(|| format!("threshold `{s}` is missing a number"))?
            .parse::<f64>()
            .map_err(|_| format!("threshold `{s}`: `{}` is not a number", parts[i]))
    };
    match parts[0] {
        "fixed" => Ok(ThresholdRule::Fixed { zeta: num(1)? }),
        "top" => Ok(ThresholdRule::TopFraction { fraction: num(1)? }),
        "adaptive" => Ok(ThresholdRule::Adaptive {
            quantile: num(1)?,
            half_life: if parts.len() > 2 { num(2)? } else { 30.0 },
        }),
        _ => Err(format!(
            "unknown threshold rule `{s}`: use fixed:ZETA, top:FRACTION or adaptive:QUANTILE[:HALF_LIFE]"
        )),
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Folder to watch for batch files (created when missing).
    #[arg(long, default_value = "./inbox")]
    pub inbox: PathBuf,
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub params: ParamArgs,
    /// Milliseconds a file's size and mtime must stay unchanged before it is taken.
    #[arg(long, default_value_t = 1000)]
    pub settle_ms: u64,
    /// Longest wait between inbox scans, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub poll_ms: u64,
    #[command(flatten)]
    pub http: HttpArgs,
}

/// Where the dashboard and HTTP API listen.
#[derive(Debug, Clone, Default, Args)]
pub struct HttpArgs {
    /// Address of the dashboard and HTTP API [default: 127.0.0.1:7878]; port 0 picks a free
    /// one (the login link printed at start shows it).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
    /// Serve no dashboard or HTTP API.
    #[arg(long, conflicts_with_all = ["http", "http_allow_remote"])]
    pub no_http: bool,
    /// Allow a non-loopback --http address. The API needs the token, but HTTP is unencrypted:
    /// put it behind a TLS proxy.
    #[arg(long)]
    pub http_allow_remote: bool,
}

impl HttpArgs {
    /// The server configuration, `None` with `--no-http`.
    pub fn config(&self) -> Option<crate::http::HttpConfig> {
        if self.no_http {
            return None;
        }
        let mut c = crate::http::HttpConfig {
            allow_remote: self.http_allow_remote,
            ..Default::default()
        };
        if let Some(a) = self.http {
            c.addr = a;
            c.explicit = true;
        }
        Some(c)
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub http: HttpArgs,
}

#[derive(Debug, Args)]
pub struct IngestArgs {
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub params: ParamArgs,
    /// Batch files (.jsonl or .txt), one timestep each, in this order.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct VerdictArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// Documents with time ≥ T (RFC 3339 or YYYY-MM-DD).
    #[arg(long)]
    pub since: Option<String>,
    /// Documents with time < T (RFC 3339), or on/before the date T (YYYY-MM-DD, whole day).
    #[arg(long)]
    pub until: Option<String>,
    /// Only novel documents.
    #[arg(long)]
    pub novel: bool,
    /// Only documents with score ≥ X.
    #[arg(long)]
    pub min_score: Option<f64>,
    /// At most N verdicts.
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: crate::query::Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TopicFormat {
    Table,
    Jsonl,
}

#[derive(Debug, Args)]
pub struct TopicArgs {
    #[command(flatten)]
    pub store: StoreArg,
    #[arg(long)]
    pub since: Option<String>,
    #[arg(long)]
    pub until: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: TopicFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// How many recent timesteps to show.
    #[arg(long, default_value_t = 5)]
    pub recent: usize,
    #[arg(long, value_enum, default_value = "text")]
    pub format: StatusFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    Default,
    Paper,
}

#[derive(Debug, Args)]
pub struct ParamsArgs {
    /// Model whose parameters to print.
    #[arg(long, value_enum, default_value = "l1", conflicts_with = "store")]
    pub model: ModelKind,
    /// Which parameter set (paper applies to the l1 model).
    #[arg(long, value_enum, default_value = "default", conflicts_with = "store")]
    pub preset: Preset,
    /// Print the parameters of this store instead.
    #[arg(long)]
    pub store: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// Snapshot file.
    pub file: PathBuf,
}
