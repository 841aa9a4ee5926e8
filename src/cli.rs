//! Command-line definitions (clap) and the glue from parsed arguments to library calls.
//! `main.rs` only parses and dispatches.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use thiserror::Error;

use novad_models::engine::ParamsFormatError;
use novad_models::memory::HybridParams;
use novad_models::threshold::ThresholdRule;
use novad_models::{ModelKind, ModelParams, ParamsError};

/// `--model`: one of [`ModelKind::ALL`] by name (the help lists them).
fn model_kind() -> impl TypedValueParser<Value = ModelKind> {
    PossibleValuesParser::new(ModelKind::ALL.map(ModelKind::name)).map(|s| {
        s.parse::<ModelKind>()
            .expect("a possible value names a model")
    })
}

/// Why the model parameters given on the command line cannot be used.
#[derive(Debug, Error)]
pub enum ParamArgsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Config {
        path: String,
        #[source]
        source: ParamsFormatError,
    },
    #[error("{path}: unknown key(s) {keys} for the {kind} model (`novad params --model {kind}` prints every key)")]
    UnknownKeys {
        path: String,
        kind: ModelKind,
        keys: String,
    },
    #[error("--k, --lambda and --beta apply to the l1 model only; set the {0} parameters in a --config file (`novad params --model {0}` prints them)")]
    L1Only(ModelKind),
    #[error("{flag} does not apply to the {kind} model")]
    NotApplicable { flag: &'static str, kind: ModelKind },
    #[error("--memory-docs sets the hybrid detector's memory; this {0} parameter set runs the model's own score (--detector model)")]
    NeedsHybrid(ModelKind),
    #[error("{0}")]
    Threshold(String),
    #[error(transparent)]
    Format(#[from] ParamsFormatError),
    #[error(transparent)]
    Params(#[from] ParamsError),
}

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
    Run(Box<RunArgs>),
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
    /// Read and verify every tree of a store (records decode, timesteps complete, verdicts
    /// per file, model state equal to the committed digest). Exit status 0 healthy, 3 damaged.
    Check(CheckArgs),
    /// Build a new store by replaying the processed batch files in the order the old store
    /// recorded (its records, or its journal.jsonl when it does not open).
    Rebuild(RebuildArgs),
    /// Serve the dashboard and HTTP API of a stopped store (read-only; a running daemon
    /// serves its own).
    Serve(ServeArgs),
    /// Print a parameter set as TOML (a starting point for `--config`): the defaults, the
    /// paper's configuration, or the parameters a store was created with.
    Params(ParamsArgs),
    /// Write a fresh cluster key to FILE (32 random bytes, mode 0600; an existing file is never
    /// overwritten). Copy it to every process and pass it as `run --cluster-key FILE`.
    ClusterKey(ClusterKeyArgs),
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell) to stdout,
    /// e.g. `novad completions bash > /usr/share/bash-completion/completions/novad`.
    Completions(CompletionsArgs),
    /// Print the manual page (roff) to stdout, e.g. `novad manpage > novad.1`.
    Manpage,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell the script is for.
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ClusterKeyArgs {
    /// The key file to create.
    pub file: PathBuf,
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
    #[arg(long, value_parser = model_kind())]
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
    /// Novelty detector of an l1 or ostc store: `hybrid` (default: the model's score fused
    /// with a bounded memory of past documents) or `model` (the model's own score alone).
    #[arg(long, value_parser = ["hybrid", "model"])]
    pub detector: Option<String>,
    /// Documents the hybrid detector remembers (default 100000).
    #[arg(long)]
    pub memory_docs: Option<usize>,
}

impl ParamArgs {
    /// The requested parameters, or `None` when nothing was requested (use the store's, or
    /// the ℓ1 defaults for a new store).
    pub fn resolve(&self) -> Result<Option<ModelParams>, ParamArgsError> {
        let l1_flag = self.k.is_some() || self.lambda.is_some() || self.beta.is_some();
        let any_flag = l1_flag
            || self.threshold.is_some()
            || self.max_terms.is_some()
            || self.seed.is_some()
            || self.detector.is_some()
            || self.memory_docs.is_some();
        if self.model.is_none() && self.config.is_none() && !any_flag {
            return Ok(None);
        }
        let kind = self.model.unwrap_or_default();
        let mut p = match &self.config {
            Some(path) => {
                let path_name = || path.display().to_string();
                let s = std::fs::read_to_string(path).map_err(|source| ParamArgsError::Read {
                    path: path_name(),
                    source,
                })?;
                let p =
                    ModelParams::from_toml(kind, &s).map_err(|source| ParamArgsError::Config {
                        path: path_name(),
                        source,
                    })?;
                refuse_unknown_keys(&s, &p.to_toml()).map_err(|keys| {
                    ParamArgsError::UnknownKeys {
                        path: path_name(),
                        kind,
                        keys: keys.join(", "),
                    }
                })?;
                p
            }
            None => ModelParams::defaults(kind),
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
                    p.threshold = parse_threshold(t).map_err(ParamArgsError::Threshold)?;
                }
            }
            other => {
                if l1_flag {
                    return Err(ParamArgsError::L1Only(kind));
                }
                let mut v = other.to_json();
                let mut set = |path: &[&str], val: serde_json::Value, flag: &'static str| {
                    let mut node = &mut v;
                    for key in &path[..path.len() - 1] {
                        node = &mut node[*key];
                    }
                    match node.get_mut(path[path.len() - 1]) {
                        Some(slot) => {
                            *slot = val;
                            Ok(())
                        }
                        None => Err(ParamArgsError::NotApplicable { flag, kind }),
                    }
                };
                if let Some(x) = self.seed {
                    set(&["seed"], x.into(), "--seed")?;
                }
                if let Some(x) = self.max_terms {
                    set(&["text", "max_terms"], x.into(), "--max-terms")?;
                }
                if let Some(t) = &self.threshold {
                    let rule = parse_threshold(t).map_err(ParamArgsError::Threshold)?;
                    let rule = serde_json::to_value(rule).expect("a rule is plain data");
                    set(&["threshold"], rule, "--threshold")?;
                }
                *other = ModelParams::from_json(kind, v)?;
            }
        }
        self.apply_detector(&mut p, kind)?;
        p.validate()?;
        Ok(Some(p))
    }

    /// `--detector`, `--memory-docs`, and `--seed` for the memory's random choices too.
    fn apply_detector(&self, p: &mut ModelParams, kind: ModelKind) -> Result<(), ParamArgsError> {
        if let Some(d) = self.detector.as_deref() {
            let slot = p.hybrid_mut().ok_or(ParamArgsError::NotApplicable {
                flag: "--detector",
                kind,
            })?;
            if d == "model" {
                *slot = None;
                // the hybrid's default rule is tuned for its calibrated score: the model's own
                // score gets its own default, unless a rule was given
                if self.threshold.is_none() {
                    p.reset_default_threshold();
                }
            } else {
                slot.get_or_insert_with(HybridParams::default);
            }
        }
        if let Some(n) = self.memory_docs {
            let slot = p.hybrid_mut().ok_or(ParamArgsError::NotApplicable {
                flag: "--memory-docs",
                kind,
            })?;
            let h = slot.as_mut().ok_or(ParamArgsError::NeedsHybrid(kind))?;
            h.memory.max_docs = n;
        }
        if let (Some(seed), Some(Some(h))) = (self.seed, p.hybrid_mut()) {
            h.memory.seed = seed;
        }
        Ok(())
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
    pub limits: LimitArgs,
    #[command(flatten)]
    pub http: HttpArgs,
    /// The largest batch a push over HTTP (`POST /api/v1/batches`) may carry, in bytes (≥ 1);
    /// a larger one is refused with 413.
    #[arg(long, value_name = "BYTES", default_value_t = crate::http::push::DEFAULT_MAX_BATCH_BYTES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub http_max_batch_bytes: u64,
    #[command(flatten)]
    pub notify: NotifyArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Webhooks: who is told of each committed timestep with novel documents or new events.
#[derive(Debug, Default, Args)]
pub struct NotifyArgs {
    /// POST a JSON message to URL after each committed timestep with novel documents or new
    /// events (repeatable). Messages wait in the store until the receiver answers 2xx.
    #[arg(long, value_name = "URL")]
    pub notify: Vec<String>,
    /// Sign --notify messages with the secret in FILE (mode 0600, ≥ 16 bytes): header
    /// `X-Novad-Signature-256: sha256=HMAC-SHA256(secret, body)`.
    #[arg(long, value_name = "FILE", requires = "notify")]
    pub notify_secret: Option<PathBuf>,
    /// --notify receivers hear only of timesteps with new events.
    #[arg(long, requires = "notify")]
    pub notify_events_only: bool,
    /// --notify receivers hear only of novel documents scoring at least X.
    #[arg(
        long,
        value_name = "X",
        requires = "notify",
        allow_negative_numbers = true
    )]
    pub notify_min_score: Option<f64>,
    /// Park a --notify message still undelivered this many seconds after its commit.
    #[arg(long, value_name = "SECS", requires = "notify",
          default_value_t = crate::alerts::GIVE_UP_AFTER.as_secs())]
    pub notify_give_up_after: u64,
    /// More receivers, each with its own settings: a TOML file of `[[webhook]]` tables (`url`,
    /// `secret_file`, `events_only`, `min_score`, `give_up_after_secs`).
    #[arg(long, value_name = "FILE")]
    pub notify_config: Option<PathBuf>,
    /// At start, make every parked message due again.
    #[arg(long)]
    pub notify_retry_parked: bool,
}

impl NotifyArgs {
    /// The receivers these flags name, checked (URLs, secret files, scores).
    pub fn webhooks(&self) -> Result<crate::alerts::Webhooks, crate::alerts::AlertError> {
        let filter = crate::alerts::Filter {
            events_only: self.notify_events_only,
            min_score: self.notify_min_score,
        };
        let give_up = std::time::Duration::from_secs(self.notify_give_up_after);
        let mut receivers = self
            .notify
            .iter()
            .map(|u| {
                crate::alerts::Receiver::new(
                    u,
                    self.notify_secret.as_deref(),
                    filter.clone(),
                    give_up,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(f) = &self.notify_config {
            receivers.extend(crate::alerts::Webhooks::from_file(f)?);
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(r) = receivers.iter().find(|r| !seen.insert(r.url.clone())) {
            return Err(crate::alerts::AlertError::Url {
                url: r.url.clone(),
                why: "given twice".into(),
            });
        }
        Ok(crate::alerts::Webhooks { receivers })
    }
}

impl RunArgs {
    /// The HTTP server's configuration, `None` with `--no-http`.
    pub fn http_config(&self) -> Option<crate::http::HttpConfig> {
        self.http.config().map(|c| crate::http::HttpConfig {
            max_batch_bytes: self.http_max_batch_bytes,
            ..c
        })
    }
}

/// Sharing the ℓ1 model's steps among several processes.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Run as one process of a cluster listed in HOSTFILE (one host:port per line, process 0
    /// first). Process 0 leads: it watches the inbox and owns the store; the others only share
    /// the coding of every batch (their --inbox and --store are not used). Results are
    /// identical to a single-node run. The l1 model only.
    #[arg(long, value_name = "HOSTFILE", requires = "process")]
    pub cluster: Option<PathBuf>,
    /// This process's line in the hosts file, from 0.
    #[arg(long, value_name = "I", requires = "cluster")]
    pub process: Option<usize>,
    /// Worker threads of every process of the cluster (each holds a replica of the model).
    #[arg(long, value_name = "W", default_value_t = 1)]
    pub workers_per_process: usize,
    /// Seconds to wait at start for every process of the cluster.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub connect_timeout_secs: u64,
    /// The cluster's shared key (`novad cluster-key FILE` writes one; mode 0600, the same file
    /// on every process). Processes prove they hold it before anything else is exchanged.
    #[arg(long, value_name = "FILE", requires = "cluster")]
    pub cluster_key: Option<PathBuf>,
}

impl ClusterArgs {
    /// The cluster this process belongs to, if any.
    pub fn config(
        &self,
    ) -> Result<Option<crate::cluster::ClusterConfig>, crate::cluster::ClusterError> {
        match (&self.cluster, self.process) {
            (Some(f), Some(i)) => Ok(Some(crate::cluster::ClusterConfig::new(
                f,
                i,
                self.workers_per_process,
                std::time::Duration::from_secs(self.connect_timeout_secs),
                self.cluster_key.as_deref(),
            )?)),
            _ => Ok(None),
        }
    }
}

/// `Err` with the dotted names of the keys of the TOML text `given` that the parameter set
/// read from it does not have (`known`, that set written back as TOML): serde skips unknown
/// keys, so a misspelt parameter would otherwise silently keep its default.
fn refuse_unknown_keys(given: &str, known: &str) -> Result<(), Vec<String>> {
    fn walk(g: &toml::Value, k: &toml::Value, at: &str, out: &mut Vec<String>) {
        match (g, k) {
            (toml::Value::Table(g), toml::Value::Table(k)) => {
                for (key, gv) in g {
                    let name = if at.is_empty() {
                        key.clone()
                    } else {
                        format!("{at}.{key}")
                    };
                    match k.get(key) {
                        Some(kv) => walk(gv, kv, &name, out),
                        None => out.push(name),
                    }
                }
            }
            (toml::Value::Array(g), toml::Value::Array(k)) => {
                for (i, (gv, kv)) in g.iter().zip(k).enumerate() {
                    walk(gv, kv, &format!("{at}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let (Ok(g), Ok(k)) = (given.parse::<toml::Value>(), known.parse::<toml::Value>()) else {
        return Ok(());
    };
    let mut out = Vec::new();
    walk(&g, &k, "", &mut out);
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}

/// How much of a batch file one timestep takes.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Most documents per timestep (≥ 1); a larger file is ingested as several consecutive
    /// timesteps in file order.
    #[arg(long, default_value_t = crate::ingest::DEFAULT_MAX_BATCH_DOCS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_batch_docs: usize,
    /// Most bytes of a file per timestep (the range ends at the line that reaches it), ≥ 1.
    #[arg(long, default_value_t = crate::ingest::DEFAULT_MAX_BATCH_BYTES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_batch_bytes: u64,
}

impl LimitArgs {
    pub fn limits(&self) -> crate::ingest::Limits {
        crate::ingest::Limits {
            max_docs: self.max_batch_docs,
            max_bytes: self.max_batch_bytes,
        }
    }
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
    /// Batch files (.jsonl or .txt), in this order; one timestep each, or several for a
    /// file over the limits below.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub limits: LimitArgs,
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
    /// Only documents with score ≥ X (a finite number).
    #[arg(long, allow_negative_numbers = true)]
    pub min_score: Option<f64>,
    /// At most N verdicts, the earliest first (0 prints none).
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: crate::query::Format,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// How a query talks to a running daemon.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// While the daemon answers busy, keep retrying this many seconds (with growing, jittered
    /// pauses) before giving up; 0 tries once.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS", value_parser = parse_seconds)]
    pub retry_secs: f64,
}

impl ApiArgs {
    pub fn options(&self) -> crate::daemon::api::ClientOptions {
        crate::daemon::api::ClientOptions {
            retry_for: std::time::Duration::from_secs_f64(self.retry_secs),
            ..Default::default()
        }
    }
}

/// A number of seconds: finite, ≥ 0, at most a day.
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && (0.0..=86_400.0).contains(&x) => Ok(x),
        _ => Err(format!("`{s}` is not a number of seconds from 0 to 86400")),
    }
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
    /// Only the days of this event, each with every one of its documents.
    #[arg(long)]
    pub event: Option<u64>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: TopicFormat,
    #[command(flatten)]
    pub api: ApiArgs,
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
    #[command(flatten)]
    pub api: ApiArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    Default,
    Paper,
}

#[derive(Debug, Args)]
pub struct ParamsArgs {
    /// Model whose parameters to print.
    #[arg(long, value_parser = model_kind(), default_value = "l1", conflicts_with = "store")]
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

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub store: StoreArg,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RebuildArgs {
    /// Folder holding the processed batch files (usually INBOX/processed).
    #[arg(long)]
    pub from: PathBuf,
    /// The old (damaged) store whose records or journal give the replay order.
    #[arg(long, default_value = "./novad-data")]
    pub old: PathBuf,
    /// The new store directory (must not hold a store); default: OLD with `.rebuilt`.
    #[arg(long)]
    pub store: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use novad_models::{ModelKind, ModelParams};

    #[test]
    fn every_key_of_a_written_parameter_set_is_known() {
        for kind in [ModelKind::L1, ModelKind::Dnmf, ModelKind::Ostc] {
            let text = ModelParams::defaults(kind).to_toml();
            let back = ModelParams::from_toml(kind, &text).unwrap().to_toml();
            assert_eq!(refuse_unknown_keys(&text, &back), Ok(()), "{kind}");
        }
    }

    #[test]
    fn misspelt_keys_are_named_with_their_path() {
        let kind = ModelKind::L1;
        let mut text = ModelParams::defaults(kind).to_toml();
        // serde skips keys it does not know: a misspelt optional setting would be lost
        text = format!("sed = 3\n{text}");
        text = text.replacen("[text]\n", "[text]\nmax_term = 5\n", 1);
        let p = ModelParams::from_toml(kind, &text).unwrap();
        let keys = refuse_unknown_keys(&text, &p.to_toml()).unwrap_err();
        assert_eq!(keys, vec!["sed".to_string(), "text.max_term".to_string()]);
    }

    #[test]
    fn zero_batch_limits_are_refused() {
        for flag in ["--max-batch-docs", "--max-batch-bytes"] {
            let r = Cli::try_parse_from(["novad", "ingest", "--store", "s", flag, "0", "f"]);
            let e = r.unwrap_err().to_string();
            assert!(e.contains(flag) && e.contains('0'), "{e}");
            let r = Cli::try_parse_from(["novad", "ingest", "--store", "s", flag, "1", "f"]);
            assert!(r.is_ok(), "{flag} 1");
        }
    }
}
