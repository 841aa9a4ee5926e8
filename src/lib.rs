//! novad — novel document detection over a text stream with online ℓ1 dictionary learning.
//!
//! The crate is organised by domain concept:
//! - [`text`]: tokenizer, streaming vocabulary with document frequencies, TF-IDF vectors.
//! - [`coding`]: ℓ1 sparse coding of one document over a dictionary (the novelty score).
//! - [`dictionary`]: the dictionary set 𝒜, projection onto it, OIADMM, bootstrap.
//! - [`memory`]: a bounded memory of past documents (exact nearest-neighbour search) and the
//!   hybrid score fusing a model's score with it.
//! - [`threshold`]: rules turning scores into novel / not-novel verdicts.
//! - [`detector`]: one timestep end to end as a pure function of (model, batch).
//! - [`params`]: the checked parameter set of a model.
//! - [`corpus`]: readers for evaluation corpora (20 Newsgroups archive).
//!
//! Numerics: the persistent matrices (dictionary Â, multiplier Δ) are stored as `f32` to halve
//! memory and store size; all arithmetic on them is carried out in `f64` and rounded once when a
//! new state is written, so results are deterministic and independent of the thread count.

pub mod batch;
pub mod cli;
pub mod coding;
pub mod corpus;
pub mod daemon;
pub mod detector;
pub mod dictionary;
pub mod dnmf;
pub mod engine;
pub mod eval;
pub mod ingest;
pub mod linalg;
pub mod memory;
pub mod ostc;
pub mod params;
pub mod query;
pub mod store;
pub mod text;
pub mod threshold;
pub mod topics;

pub use detector::{Document, Model, StepOutput, Verdict};
pub use params::{Params, ParamsError};
