//! Evaluation: metrics (ROC AUC) and, later, the protocols and baselines of `novad eval`.

mod metrics;

pub use metrics::{auc, roc_points};
