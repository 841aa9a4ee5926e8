//! novad, the daemon: ingests batch files dropped into an inbox, one timestep per file, runs
//! them through a model of `novad-models`, and commits model state and verdicts in one sled
//! transaction per timestep, flushed before the batch file is moved to `processed/`.
//!
//! - [`batch`]: batch file formats (JSONL, plain text) and their parsing.
//! - [`ingest`]: one batch file → one committed timestep (or a rejection that changes nothing).
//! - [`daemon`]: the inbox watcher and the local query socket ([`daemon::api`]).
//! - [`store`]: the sled store: open, lock, migrate, commit, snapshots, stored topics.
//! - [`query`]: verdicts, topics and status read from a store.
//! - [`cluster`]: the ℓ1 model's steps shared by several processes (timely-dataflow).
//! - [`metrics`]: the process's Prometheus metrics (`GET /metrics`).
//! - [`api_limits`]: what one client of a daemon API (socket or HTTP) may cost.
//! - [`show`]: times and text from the data as people see them.
//! - [`alerts`]: webhooks: each timestep's message, written to the store's outbox in its
//!   transaction and delivered afterwards, signed, retried, never lost.
//! - [`secret`]: files that hold a secret (owner-only, bounded).
//! - [`cli`]: the command line (clap definitions and their resolution to library values).

pub mod alerts;
pub mod api_limits;
pub mod batch;
pub mod cli;
pub mod cluster;
pub mod cpu;
pub mod daemon;
pub mod http;
pub mod ingest;
pub mod metrics;
pub mod query;
pub mod secret;
pub mod show;
pub mod store;
