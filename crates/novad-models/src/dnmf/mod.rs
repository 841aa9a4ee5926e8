//! Second model of novad: dynamic NMF with temporal regularisation (Saha & Sindhwani, WSDM
//! 2012) — evolving topics constrained to a δ-box around last timestep's word distributions,
//! emerging topics pushed by a Hodrick–Prescott-trend hinge regulariser, rank-one block
//! coordinate descent over a sliding window of ω timesteps.
//!
//! - [`project`]: projection onto the simplex with box constraints.
//! - [`hp`]: HP trend filter and the trend-slope operator.
//! - [`weight`]: the paper's 1 + log₂ TF · log₂ IDF, unit-ℓ2 document vectors.
//! - [`factorize`]: the BCD of one timestep; `init`: the starting point of its emerging topics.
//! - [`model`]: the streaming model ([`DnmfModel`]) and its timestep; `fit`: the timestep's
//!   reading of its factorisation (verdicts, topic report, retirement); `parts`: its persisted
//!   state as named parts and the checked rebuild from them.
//!
//! Numerics: f64 throughout the computation; the persisted W and H are f32.

pub mod factorize;
mod fit;
pub mod hp;
mod init;
pub mod model;
pub mod params;
mod parts;
pub mod project;
pub mod weight;

pub use model::{DnmfModel, TopicState, WindowStep};
pub use params::DnmfParams;
