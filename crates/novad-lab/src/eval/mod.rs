//! `novad eval`: the experiments of the NIPS 2012 paper (Table 1, Figure 2) on a labelled
//! corpus — ℓ1-online (exactly what the daemon runs) against ℓ1-batch (Algorithm 7), ℓ2-batch
//! (Algorithm 8), exact nearest-neighbour cosine (UMass first-story detection) and LSH nearest
//! neighbour (Petrović et al. 2010), plus cheap reference scores (ℓ2 relative residual, mass on
//! never-seen terms, document length).
//!
//! Entry point: [`run`] with [`EvalArgs`] (a `clap::Args` struct, so a binary can flatten it
//! into its own CLI). Output in `--out`: `report.md` (a table shaped like the paper's Table 1,
//! timings, SRE, ceiling share, split AUCs, checks), `results.json` (everything, including the
//! ROC points, parameters and seeds), `scores.jsonl` (every document's score under every
//! method) and SVG plots (ROC per timestep, AUC, seconds per timestep on a log scale, SRE).
//!
//! Trustworthiness rules the harness enforces:
//! - the same timesteps, documents and TF-IDF vectors for every method; vocabulary and IDF only
//!   from documents up to the current timestep ([`StreamVectorizer`]; checked against the engine's
//!   own vectors when ℓ1-online runs);
//! - AUC exact with ties counted ½, after rounding scores to `--round` (default 1e-9) so float
//!   noise on saturated scores counts as a tie;
//! - documents with no known term (empty vectors) are excluded from every AUC;
//! - every seed is recorded in results.json; the run is deterministic given the seed
//!   (except for the timings).

pub mod dnmf;
mod events;
mod hybrid;
pub mod ostc;
mod pooled;
mod protocol;
mod report;
mod results;
mod run;
mod topics;
mod vectorize;

use std::path::PathBuf;

use serde::Serialize;
use thiserror::Error;

pub use events::{EventJudge, EventStep, EventSummary, EventTopic};
pub use hybrid::{HybridEvalParams, HybridInput, HybridMethod, HybridOut, ReweightRun};
pub use novad_models::metrics::{auc, roc_points};
pub use ostc::{run_ostc_eval, OstcEvalArgs, OstcEvalError, OstcEvalSummary};
pub use pooled::{best_f1, quality};
pub use protocol::{
    cikm_protocol, parse_jsonl_stream, read_jsonl_stream, CikmSizes, EvalDoc, FlagCounts, Period,
    Stream, Timestep,
};
pub use report::{parse_table1, Table1};
pub use results::{
    Column, ColumnResult, EvalSummary, Results, Summary, TimestepResult, VerdictQuality,
};
pub use run::{round_scores, run};
pub use topics::{
    best_point, compact, dictclust_assign, interpolated_precision, kmeans_run_seed,
    spherical_kmeans_best, spherical_kmeans_run, sweep, sweep_thresholds, DaemonTopicCost,
    SweepPoint, TopicEvalParams, TopicMethod, TopicMethodResult, TopicStep, TopicSummary,
};
pub use vectorize::{StreamVectorizer, VectorizedBatch};

/// A method of `novad eval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// The daemon's detector: ℓ1 coding + OIADMM (Algorithm 3), through `Model::step`.
    L1Online,
    /// Algorithm 7: re-learn on all data so far, warm start, k grows by η.
    L1Batch,
    /// Algorithm 8: non-negative sparse coding with squared loss (also gives the ℓ2 relative
    /// residual reference score).
    L2Batch,
    /// Exact nearest-neighbour cosine against all earlier documents.
    Nn,
    /// LSH nearest neighbour (Petrović et al. 2010).
    Lsh,
    /// The OSTC model (`--model ostc`), exactly as the daemon runs it: `OstcModel::step` on
    /// each timestep's raw texts (its own tokenizer and vocabulary), its verdict scores. Not
    /// among the defaults.
    Ostc,
    /// The daemon's ℓ1 detector with the hybrid detector (the model's score fused with the
    /// bounded document memory): `Engine::step_at` on the parameters with `hybrid` set from
    /// the `--hybrid-*` arguments, its verdict scores. With `--hybrid-reweight`, the
    /// re-weighting experiment on ℓ1-online's scores instead (runs ℓ1-online).
    Hybrid,
    /// The same with the OSTC model (`--ostc-config`). With `--hybrid-reweight`, on OSTC's
    /// scores (runs OSTC).
    HybridOstc,
}

impl Method {
    pub const ALL: [Method; 5] = [
        Method::L1Online,
        Method::L1Batch,
        Method::L2Batch,
        Method::Nn,
        Method::Lsh,
    ];
}

/// How a hybrid method puts its two parts on one scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum HybridScale {
    Calibrated,
    Quantiles,
}

/// The evaluation protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ProtocolKind {
    /// CIKM 2011 protocol on the 20 Newsgroups bydate archive (SPEC §6).
    Cikm,
    /// A JSONL stream with `text`, `time`, `label`, cut into days or weeks.
    Stream,
}

/// When the emerging-topic evaluation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TopicsMode {
    /// When both ℓ1-online and NN run (all four methods).
    Auto,
    /// Whenever ℓ1-online or NN runs (the methods whose detector runs).
    On,
    Off,
}

/// A named parameter set of the detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ConfigName {
    /// The NIPS 2012 paper's configuration ([`novad_models::Params::paper`]).
    Paper,
    /// The knobs of SPEC §4.8's probe: per-document step, asymmetric loss w = 0.05, Δ restarted
    /// per batch, k-means atoms cut to their top 5 terms.
    Tuned,
}

impl ConfigName {
    /// The detector parameters of this configuration.
    pub fn params(self) -> novad_models::Params {
        use novad_models::l1::coding::StepSize;
        use novad_models::l1::dictionary::AtomInit;
        let mut p = novad_models::Params::paper();
        if self == ConfigName::Tuned {
            p.coding.step = StepSize::PerDocument;
            p.coding.absent_weight = 0.05;
            p.oiadmm.carry_delta = false;
            p.bootstrap.init = AtomInit::KMeans {
                top_terms: 5,
                iterations: 10,
            };
        }
        p
    }
}

/// Arguments of `novad eval`.
#[derive(Debug, Clone, Serialize, clap::Args)]
pub struct EvalArgs {
    /// Corpus: the 20news-bydate.tar.gz archive (cikm) or a JSONL file (stream).
    #[arg(long, default_value = "../shared/data/20news-bydate.tar.gz")]
    pub corpus: PathBuf,
    #[arg(long, value_enum, default_value_t = ProtocolKind::Cikm)]
    pub protocol: ProtocolKind,
    /// Methods to run (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Method::ALL)]
    pub methods: Vec<Method>,
    /// Seed of every random choice (protocol, model, new batch atoms, LSH hyperplanes).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output directory (created if missing; files in it are overwritten).
    #[arg(long, default_value = "eval-out")]
    pub out: PathBuf,
    /// Named detector configuration (ignored when --params is given).
    #[arg(long, value_enum, default_value_t = ConfigName::Paper)]
    pub config: ConfigName,
    /// Detector parameters from a TOML file (the `Params` format); --seed still overrides the
    /// seed.
    #[arg(long)]
    pub params: Option<PathBuf>,
    /// Override the number of atoms k.
    #[arg(long)]
    pub k: Option<usize>,
    /// OSTC method: its parameters from a TOML file (`novad params --model ostc` prints the
    /// defaults); --seed still overrides the seed.
    #[arg(long)]
    pub ostc_config: Option<PathBuf>,

    /// CIKM: groups in the bootstrap phase.
    #[arg(long, default_value_t = 6)]
    pub bootstrap_groups: usize,
    /// CIKM: posts per bootstrap group.
    #[arg(long, default_value_t = 150)]
    pub bootstrap_posts: usize,
    /// CIKM: new groups per phase.
    #[arg(long, default_value_t = 2)]
    pub new_groups: usize,
    /// CIKM: posts per new group in its first phase (all novel).
    #[arg(long, default_value_t = 100)]
    pub novel_posts: usize,
    /// CIKM: posts of already-seen groups per phase (round-robin over the known groups).
    #[arg(long, default_value_t = 800)]
    pub known_posts: usize,
    /// CIKM: phases after the bootstrap (default: as many as the unused groups allow).
    #[arg(long)]
    pub phases: Option<usize>,

    /// Stream: timestep length.
    #[arg(long, value_enum, default_value_t = Period::Day)]
    pub period: Period,
    /// Stream: number of leading non-empty periods forming the bootstrap timestep.
    #[arg(long, default_value_t = 1)]
    pub bootstrap_periods: usize,

    /// Batch baselines: atoms added per timestep (paper: η = 10).
    #[arg(long, default_value_t = 10)]
    pub eta: usize,
    /// Batch baselines: maximum (A-step, X-step) alternations per timestep.
    #[arg(long, default_value_t = 3)]
    pub batch_alternations: u32,
    /// Batch baselines: stop alternating when the objective improves by less than this
    /// (relative).
    #[arg(long, default_value_t = 1e-3)]
    pub batch_tol: f64,
    /// ℓ1-batch: iterations per A-step (default: the detector's bootstrap.a_step_iter).
    #[arg(long)]
    pub batch_a_iter: Option<u32>,
    /// ℓ1-batch: refuse an A-step needing more dense work space than this (GiB).
    #[arg(long, default_value_t = 4.0)]
    pub batch_max_gib: f64,
    /// ℓ2-batch: λ (default: the detector's coding.lambda).
    #[arg(long)]
    pub l2_lambda: Option<f64>,
    /// ℓ2-batch: code the unit-ℓ1 TF-IDF vectors as they are instead of rescaling them to unit
    /// ℓ2 norm (the raw objective then includes ½‖p‖₂², a length proxy).
    #[arg(long)]
    pub l2_raw_docs: bool,
    /// ℓ2-batch: projected-gradient iterations per A-step.
    #[arg(long, default_value_t = 10)]
    pub l2_a_iter: u32,

    /// LSH: hyperplanes per table.
    #[arg(long, default_value_t = 12)]
    pub lsh_bits: u32,
    /// LSH: number of hash tables.
    #[arg(long, default_value_t = 16)]
    pub lsh_tables: u32,
    /// LSH: documents kept per bucket (most recent).
    #[arg(long, default_value_t = 64)]
    pub lsh_bucket: usize,
    /// LSH: most recent documents always compared.
    #[arg(long, default_value_t = 500)]
    pub lsh_recent: usize,

    /// Hybrid methods: fusion of the two component quantiles (mean, max, fisher).
    #[arg(long, default_value = "mean")]
    pub hybrid_fusion: novad_models::memory::Fusion,
    /// Hybrid methods: weight of the NN quantile in the mean fusion.
    #[arg(long, default_value_t = novad_models::memory::HybridParams::default().nn_weight)]
    pub hybrid_nn_weight: f64,
    /// Hybrid methods: documents kept in the memory.
    #[arg(long, default_value_t = novad_models::memory::MemoryParams::default().max_docs)]
    pub hybrid_max_docs: usize,
    /// Hybrid methods: eviction policy of the memory (oldest, reservoir).
    #[arg(long, default_value = "oldest")]
    pub hybrid_eviction: novad_models::memory::Eviction,
    /// Hybrid methods: heaviest terms kept per remembered document.
    #[arg(long, default_value_t = novad_models::memory::MemoryParams::default().max_terms_per_doc)]
    pub hybrid_terms: usize,
    /// Hybrid methods: half-life (timesteps) of the score histories.
    #[arg(long, default_value_t = 30.0)]
    pub hybrid_half_life: f64,
    /// Hybrid methods: `calibrated` (the parts fused on their own scale, the drift taken out,
    /// the threshold held in a band; new stores) or `quantiles` (each part mapped to its
    /// quantile under its own history; stores created before calibration existed).
    #[arg(long, value_enum, default_value_t = HybridScale::Calibrated)]
    pub hybrid_scale: HybridScale,
    /// Hybrid methods, calibrated: the largest raise of the drift correction.
    #[arg(long, default_value_t = novad_models::memory::Calibration::default().max_shift)]
    pub hybrid_max_shift: f64,
    /// Hybrid methods, calibrated: scores at most this are never novel.
    #[arg(long, default_value_t = novad_models::memory::Calibration::default().floor)]
    pub hybrid_floor: f64,
    /// Hybrid methods, calibrated: scores above this are always novel.
    #[arg(long, default_value_t = novad_models::memory::Calibration::default().ceiling)]
    pub hybrid_ceiling: f64,
    /// Hybrid methods, calibrated: topics group the novel documents the rule would flag at
    /// this quantile too.
    #[arg(long, default_value_t = novad_models::memory::Calibration::default().topic_quantile)]
    pub hybrid_topic_quantile: f64,
    /// Hybrid methods: re-weight remembered documents with the current IDF each timestep
    /// (experiment; cost grows with the memory).
    #[arg(long)]
    pub hybrid_reweight: bool,
    /// The `hybrid` method, when its topics are events: also run it with DICTCLUST topics
    /// (the paper's stage) and judge both as events, side by side.
    #[arg(long)]
    pub compare_dictclust: bool,

    /// Emerging topics (CIKM 2011): pairwise P/R/F1 of DICTCLUST, DICT-KM, NN-KM and NN-DICT
    /// over the novel documents, threshold swept to the best F1.
    #[arg(long, value_enum, default_value_t = TopicsMode::Auto)]
    pub topics: TopicsMode,
    /// Topics: swept detection fractions (each gives the threshold = the score at that rank
    /// of the timestep's non-empty documents).
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = [0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.7, 1.0]
    )]
    pub topic_fractions: Vec<f64>,
    /// Topics: k₁ of DICTCLUST and K of k-means (default: the detector's topics.k1, paper 10).
    #[arg(long)]
    pub topic_k: Option<usize>,
    /// Topics: DICTCLUST's merge_cosine (default: the detector's; 1.0 = never merge, the
    /// paper).
    #[arg(long)]
    pub topic_merge: Option<f64>,
    /// Topics: k-means runs from random documents, the best objective kept (paper: 8).
    #[arg(long, default_value_t = 8)]
    pub topic_restarts: usize,
    /// Topics: iterations of each k-means run.
    #[arg(long, default_value_t = 20)]
    pub topic_kmeans_iter: u32,

    /// SRE of ℓ1-online: documents coded per timestep (seeded subsample of all documents seen
    /// so far; 0 = all).
    #[arg(long, default_value_t = 0)]
    pub sre_sample: usize,
    /// Scores are rounded to a multiple of this before ranking (0 = no rounding).
    #[arg(long, default_value_t = 1e-9)]
    pub round: f64,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

impl EvalArgs {
    /// The defaults, as the command line would give them.
    pub fn defaults() -> Self {
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: EvalArgs,
        }
        <P as clap::Parser>::parse_from(["eval"]).a
    }
}

/// Why an evaluation failed.
#[derive(Debug, Error)]
pub enum EvalError {
    #[error(transparent)]
    Corpus(#[from] crate::corpus::CorpusError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}, line {line}: {msg}")]
    Jsonl {
        path: String,
        line: usize,
        msg: String,
    },
    #[error("{path}: not a parameter file: {msg}")]
    ParamsFile { path: String, msg: String },
    #[error(transparent)]
    Params(#[from] novad_models::ParamsError),
    #[error(transparent)]
    Engine(#[from] novad_models::EngineError),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("invalid argument: {0}")]
    Args(String),
    #[error("plot {path}: {msg}")]
    Plot { path: String, msg: String },
    #[error("resources: {0}")]
    Resources(String),
    #[error("inconsistent evaluation state: {0}")]
    Inconsistent(String),
}
