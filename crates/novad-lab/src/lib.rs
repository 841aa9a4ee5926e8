//! novad's laboratory: the papers' experiments on labelled corpora, run through the same model
//! steps the daemon runs (`novad-models`), with the baselines they are compared against.
//!
//! - [`eval`]: `novad-lab eval` (NIPS 2012 Table 1 / Figure 2 and the emerging-topic
//!   evaluation), `eval-dnmf` (WSDM 2012) and `eval-ostc` (WWW 2013): protocols, harnesses,
//!   reports and plots.
//! - [`baselines`]: ℓ1-batch, ℓ2-batch, exact and LSH nearest neighbours.
//! - [`medstc`]: max-margin supervised sparse topical coding (OSTC's supervised variant).
//! - [`corpus`]: readers for evaluation corpora (the 20 Newsgroups archive).
//! - [`cli`]: the `novad-lab` command line.

pub mod baselines;
pub mod cli;
pub mod corpus;
pub mod eval;
pub mod medstc;
