//! Online sparse topical coding (Zhang, Zhu & Zhang, WWW 2013): the third novelty model.
//!
//! - [`coding`]: hierarchical sparse coding of a document (word codes, document code) and the
//!   collapsed variant, by closed-form coordinate descent.
//! - [`dictionary`]: the topic dictionary on the simplex, its online projected-gradient update and
//!   learning-rate schedule.
//! - [`params`]: the checked parameters and score rules; [`score`]: coding and scoring one
//!   document.
//! - [`model`]: the streaming model (`step`, state parts) the daemon runs.
//!
//! Numerics: `f64` arithmetic everywhere; the persisted dictionary β is `f32`.

pub mod coding;
pub mod dictionary;
pub mod model;
pub mod params;
pub mod score;

pub use coding::{code_doc, code_doc_collapsed, word_update, CodeParams, DocBlock, DocCode};
pub use dictionary::{learning_rate, project_simplex};
pub use model::OstcModel;
pub use params::{OstcParams, ScoreRule};
