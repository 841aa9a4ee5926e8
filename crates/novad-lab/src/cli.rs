//! The `novad-lab` command line (clap definitions; `main.rs` only parses and dispatches).

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "novad-lab",
    version,
    about = "Replicates the papers' experiments for novad's models on labelled corpora",
    long_about = None
)]
pub struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replicate the papers' experiments on a labelled corpus: ℓ1-online vs ℓ1-batch, ℓ2 and
    /// nearest-neighbour baselines; writes report.md, results.json and SVG plots to --out.
    Eval(crate::eval::EvalArgs),
    /// The dynamic-NMF model's evaluation (WSDM 2012) on the 20NG CIKM stream: micro F1 at
    /// top-1/top-5, miss rate at first detection, topic continuity, the threshold-based TDT
    /// baseline, F1 vs δ for several µ; report.md, results.json, SVG plots in --out.
    #[command(name = "eval-dnmf")]
    EvalDnmf(crate::eval::dnmf::DnmfEvalArgs),
    /// The online sparse topical coding evaluation (WWW 2013) on 20NG bydate: held-out
    /// perplexity online vs batch, word-code sparsity, online MedSTC accuracy; report.md,
    /// results.json, SVG plots in --out.
    #[command(name = "eval-ostc")]
    EvalOstc(crate::eval::OstcEvalArgs),
}
