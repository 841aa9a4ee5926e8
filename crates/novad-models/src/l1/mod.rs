//! Online ℓ1 dictionary learning (NIPS 2012): a document is novel when a sparse non-negative
//! code over the dictionary Â leaves much of it unexplained; Â follows the stream by online
//! inexact ADMM (OIADMM). Novel documents are grouped into emerging topics by DICTCLUST
//! (CIKM 2011).
//!
//! - [`coding`]: ℓ1 sparse coding of one document over a dictionary (the novelty score).
//! - [`dictionary`]: the dictionary set 𝒜, projection onto it, OIADMM, bootstrap, refresh.
//! - [`dictclust`]: emerging topics among a batch's novel documents.
//! - [`params`]: the checked parameter set.
//! - [`replicate`]: a step's coding by logical shards, shared among replicas of a model.
//! - [`detector`]: one timestep end to end as a pure function of (model, batch).

pub mod coding;
pub mod detector;
pub mod dictclust;
pub mod dictionary;
pub mod params;
pub mod replicate;

pub use detector::{Model, ModelParts};
pub use params::Params;
