//! What `novad-lab eval` produces: per-timestep results of every score column, the summary,
//! and the whole results file. Shared by the evaluation loop ([`super::run`]) that fills them
//! and the report writer ([`super::report`]) that renders them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::topics::{TopicEvalParams, TopicStep, TopicSummary};
use super::{EvalArgs, Method};
use crate::baselines::{BatchParams, L2Params, LshParams};
use novad_models::ostc::OstcParams;
use novad_models::Params;

/// A score column of the report: a method's novelty score or a reference score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Column {
    L1Online,
    L1Batch,
    /// ℓ2-batch, raw objective ½‖p̃ − Ax‖² + λ‖x‖₁.
    L2Batch,
    /// ℓ2-batch, relative residual ‖p − Ax‖₂/‖p‖₂ (reference score).
    L2Residual,
    Nn,
    Lsh,
    /// The OSTC model's verdict scores.
    Ostc,
    /// ℓ1-online fused with the document memory.
    Hybrid,
    /// OSTC fused with the document memory.
    HybridOstc,
    /// The hybrid's model part: ℓ1-online's own score as the hybrid judged it (reference).
    HybridModel,
    /// The hybrid's nearest-neighbour part: 1 − the largest cosine to a document of its
    /// bounded memory (reference).
    HybridNn,
    /// TF-IDF mass on terms never seen before the timestep (reference score).
    UnseenMass,
    /// Number of distinct known terms (reference score: length alone).
    Length,
}

impl Column {
    pub const ALL: [Column; 13] = [
        Column::L1Online,
        Column::L1Batch,
        Column::L2Batch,
        Column::L2Residual,
        Column::Nn,
        Column::Lsh,
        Column::Ostc,
        Column::Hybrid,
        Column::HybridOstc,
        Column::HybridModel,
        Column::HybridNn,
        Column::UnseenMass,
        Column::Length,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Column::L1Online => "l1-online",
            Column::L1Batch => "l1-batch",
            Column::L2Batch => "l2-batch",
            Column::L2Residual => "l2-residual",
            Column::Nn => "nn",
            Column::Lsh => "lsh",
            Column::Ostc => "ostc",
            Column::Hybrid => "hybrid",
            Column::HybridOstc => "hybrid-ostc",
            Column::HybridModel => "hybrid-model",
            Column::HybridNn => "hybrid-nn",
            Column::UnseenMass => "unseen-mass",
            Column::Length => "length",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Column::L1Online => "ℓ1-online",
            Column::L1Batch => "ℓ1-batch",
            Column::L2Batch => "ℓ2-batch",
            Column::L2Residual => "ℓ2 ‖p−Ax‖₂/‖p‖₂",
            Column::Nn => "NN cosine",
            Column::Lsh => "LSH NN",
            Column::Ostc => "OSTC",
            Column::Hybrid => "hybrid (ℓ1 + memory)",
            Column::HybridOstc => "hybrid (OSTC + memory)",
            Column::HybridModel => "hybrid's ℓ1 part",
            Column::HybridNn => "hybrid's memory NN part",
            Column::UnseenMass => "unseen-term mass",
            Column::Length => "length",
        }
    }

    /// The method producing the column (`None`: always computed).
    pub fn method(self) -> Option<Method> {
        match self {
            Column::L1Online => Some(Method::L1Online),
            Column::L1Batch => Some(Method::L1Batch),
            Column::L2Batch | Column::L2Residual => Some(Method::L2Batch),
            Column::Nn => Some(Method::Nn),
            Column::Lsh => Some(Method::Lsh),
            Column::Ostc => Some(Method::Ostc),
            Column::Hybrid | Column::HybridModel | Column::HybridNn => Some(Method::Hybrid),
            Column::HybridOstc => Some(Method::HybridOstc),
            Column::UnseenMass | Column::Length => None,
        }
    }

    /// A column that is a method (has its own cost), not a derived reference score.
    pub fn is_method(self) -> bool {
        !matches!(
            self,
            Column::L2Residual
                | Column::HybridModel
                | Column::HybridNn
                | Column::UnseenMass
                | Column::Length
        )
    }
}

/// One column at one timestep.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ColumnResult {
    /// ROC AUC, novel = positive (None at the bootstrap or without both classes).
    pub auc: Option<f64>,
    /// AUC of novel documents against the non-novel documents whose label was in the bootstrap
    /// timestep, and against those whose label arrived later (SPEC §4.8's split).
    pub auc_vs_bootstrap_labels: Option<f64>,
    pub auc_vs_later_labels: Option<f64>,
    /// ROC points (FPR, TPR), one per distinct (rounded) score.
    pub roc: Vec<(f64, f64)>,
    /// Seconds of the method's own work at this timestep (scoring + learning; the shared
    /// vectorisation excluded). None for reference columns.
    pub seconds: Option<f64>,
    /// ℓ1 methods: SRE of the dictionary after this timestep, mean l(p, A) over the documents
    /// seen so far (`sre_docs` of them).
    pub sre: Option<f64>,
    pub sre_docs: Option<usize>,
    /// Batch methods: mean training objective after re-learning (ℓ1: equals the SRE).
    pub objective: Option<f64>,
    /// Share of the (non-empty) batch whose score is at the ceiling (ℓ1: ‖p‖₁; ℓ2: zero code).
    pub ceiling_fraction: Option<f64>,
    /// Dictionary size used to score this batch.
    pub k: Option<usize>,
    pub alternations: Option<u32>,
    /// LSH: mean exact comparisons per document.
    pub comparisons: Option<f64>,
}

/// One timestep.
#[derive(Debug, Clone, Serialize)]
pub struct TimestepResult {
    pub index: usize,
    pub name: String,
    pub bootstrap: bool,
    pub docs: usize,
    /// Documents without a known term (excluded from every AUC).
    pub empty: usize,
    /// Non-empty novel / non-novel documents (the AUC population).
    pub novel: usize,
    pub non_novel: usize,
    pub new_labels: Vec<String>,
    pub vocabulary: usize,
    pub evicted_terms: usize,
    pub seconds_vectorize: f64,
    pub columns: BTreeMap<String, ColumnResult>,
    /// Emerging-topic evaluation (None at the bootstrap or when off).
    pub topics: Option<TopicStep>,
    /// The daemon's own emerging topics as events (when the `hybrid` method runs; None at
    /// the bootstrap).
    pub events: BTreeMap<String, super::EventStep>,
}

/// Averages over the evaluated timesteps.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Mean AUC over the evaluated timesteps that have both classes.
    pub mean_auc: BTreeMap<String, f64>,
    /// Pooled AUC: one ranking of every evaluated timestep's documents together (what one
    /// threshold over a date range sees).
    pub pooled_auc: BTreeMap<String, f64>,
    /// The daemon's emerging topics as events over the evaluated timesteps (when the
    /// `hybrid` method runs).
    pub events: BTreeMap<String, super::EventSummary>,
    /// Per column whose method makes verdicts: their quality over every evaluated timestep,
    /// beside the best F1 any one fixed threshold on its scores reaches in hindsight.
    pub verdicts: BTreeMap<String, VerdictQuality>,
    pub mean_auc_vs_bootstrap_labels: BTreeMap<String, f64>,
    pub mean_auc_vs_later_labels: BTreeMap<String, f64>,
    /// Mean seconds per evaluated timestep, and total (bootstrap included).
    pub mean_seconds: BTreeMap<String, f64>,
    pub total_seconds: BTreeMap<String, f64>,
    pub mean_ceiling_fraction: BTreeMap<String, f64>,
    /// ℓ1-batch seconds / ℓ1-online seconds at the last timestep (target ≥ 20).
    pub speedup_last: Option<f64>,
    /// Per evaluated timestep, ℓ1-batch / ℓ1-online seconds.
    pub speedup: Vec<f64>,
    /// ℓ1-online: max / min seconds over the evaluated timesteps (flat ≈ small).
    pub online_seconds_max_over_min: Option<f64>,
    /// NN: seconds at the last / first evaluated timestep (grows with t).
    pub nn_seconds_last_over_first: Option<f64>,
    /// Emerging topics: per method (dictclust, dict-km, nn-km, nn-dict) the averages over the
    /// evaluated timesteps.
    pub topics: BTreeMap<String, TopicSummary>,
    /// The clusterers alone on perfect detection (`dict` = DICTCLUST, `km` = k-means).
    pub topics_oracle: BTreeMap<String, TopicSummary>,
    /// The daemon's topic stage (ℓ1-online's `Model::step`): Σ seconds_topics / Σ seconds of
    /// the whole timestep (vectorise + coding + topics + update), evaluated timesteps.
    pub daemon_topic_seconds_share: Option<f64>,
    pub wall_seconds: f64,
}

/// The verdicts of a method over the whole stream against the labels.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct VerdictQuality {
    /// Documents flagged novel, and how many of them are novel.
    pub flagged: usize,
    pub true_positives: usize,
    /// Novel documents (non-empty, evaluated timesteps).
    pub novel: usize,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    /// The best F1 of any one fixed threshold on the (rounded) scores, and that threshold
    /// (novel = score ≥ it).
    pub best_f1: f64,
    pub best_threshold: f64,
    /// f1 / best_f1.
    pub f1_ratio: f64,
}

/// Everything an evaluation measured (written to results.json).
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub version: u32,
    pub args: EvalArgs,
    pub corpus: String,
    pub protocol: String,
    pub protocol_details: serde_json::Value,
    pub config: String,
    pub params: Params,
    pub seeds: serde_json::Value,
    pub batch: BatchParams,
    pub l2: L2Params,
    pub lsh: LshParams,
    /// Parameters of the OSTC method (None when it did not run).
    pub ostc: Option<OstcParams>,
    pub methods: Vec<Method>,
    pub columns: Vec<String>,
    pub threads: usize,
    /// Parameters of the emerging-topic evaluation (None when off).
    pub topics: Option<TopicEvalParams>,
    /// Parameters of the hybrid methods (None when none ran).
    pub hybrid: Option<super::HybridEvalParams>,
    pub timesteps: Vec<TimestepResult>,
    pub summary: Summary,
    pub notes: Vec<String>,
}

/// What [`run`] returns.
#[derive(Debug, Clone)]
pub struct EvalSummary {
    pub out: PathBuf,
    pub report: PathBuf,
    pub results: PathBuf,
    pub scores: PathBuf,
    pub plots: Vec<PathBuf>,
    /// Evaluated timesteps (bootstrap excluded).
    pub timesteps: usize,
    pub summary: Summary,
}
