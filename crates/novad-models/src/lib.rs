//! novad's models as a library: streaming novelty and topic models over a text stream, each a
//! pure step `(model, batch) → (model, output)` behind one contract ([`model::PartsModel`]).
//! No storage, no I/O, no command line: the daemon persists what [`model::PartsModel::state_parts`]
//! returns, the lab replays corpora through the same steps.
//!
//! - [`model`]: the contract, [`Verdict`], [`StepOutput`], [`StepStats`], [`Topic`], the errors.
//! - [`engine`]: the model kinds a store can run, their parameters, one dispatching [`Engine`].
//! - [`text`]: tokenizer, streaming vocabulary with document frequencies, TF-IDF vectors.
//! - [`threshold`]: rules turning scores into novel / not-novel verdicts.
//! - [`linalg`], [`metrics`]: dense helpers; AUC and ROC.
//! - [`shard`]: the fixed logical shards a batch is split into, shared by every part that
//!   divides a batch's work (coding, memory search, the cluster).
//! - [`l1`]: online ℓ1 dictionary learning (NIPS 2012) with DICTCLUST topics (CIKM 2011).
//! - [`events`]: emerging topics as events (communities of novel documents, followed over
//!   timesteps).
//! - [`dnmf`]: dynamic NMF with temporal regularisation (WSDM 2012).
//! - [`ostc`]: online sparse topical coding (WWW 2013).
//!
//! Numerics: the persistent matrices are stored as `f32` to halve memory and store size; all
//! arithmetic on them is carried out in `f64` and rounded once when a new state is written, so
//! results are deterministic and independent of the thread count.

pub mod dnmf;
pub mod engine;
pub mod events;
pub mod l1;
pub mod linalg;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod ostc;
pub mod shard;
pub mod text;
pub mod threshold;

pub use engine::{Engine, ModelParams, StateWrite, INCREMENTAL_PREFIX};
pub use l1::{Model, Params};
pub use model::{
    Document, EngineError, ModelKind, ParamsError, PartsModel, StepOutput, StepStats, TextParams,
    Topic, TopicKind, Verdict,
};
