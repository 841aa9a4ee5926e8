//! `novad-lab` command line: parses arguments and calls the library.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use novad_lab::cli::{Cli, Command};

fn init_logs(verbose: u8) {
    let level = ["warn", "info", "debug", "trace"][(verbose as usize).min(3)];
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(cli.verbose);
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("novad-lab: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn dispatch(cli: Cli) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Eval(a) => {
            let s = novad_lab::eval::run(&a)?;
            writeln!(out, "report:  {}", s.report.display())?;
            writeln!(out, "results: {}", s.results.display())?;
            for (k, v) in &s.summary.mean_auc {
                writeln!(out, "mean AUC {k:>14}: {v:.3}")?;
            }
            for (k, v) in &s.summary.mean_seconds {
                writeln!(out, "mean s   {k:>14}: {v:.3}")?;
            }
            if let Some(x) = s.summary.speedup_last {
                writeln!(out, "ℓ1-batch / ℓ1-online at the last timestep: {x:.1}×")?;
            }
            writeln!(out, "wall time: {:.1} s", s.summary.wall_seconds)?;
        }
        Command::EvalDnmf(a) => {
            let s = novad_lab::eval::dnmf::run_dnmf_eval(&a)?;
            writeln!(out, "report:  {}", a.out.join("report.md").display())?;
            writeln!(out, "results: {}", a.out.join("results.json").display())?;
            writeln!(out, "wall time: {:.1} s", s.seconds)?;
        }
        Command::EvalOstc(a) => {
            let s = novad_lab::eval::run_ostc_eval(&a)?;
            writeln!(out, "report:  {}", a.out.join("report.md").display())?;
            writeln!(out, "results: {}", a.out.join("results.json").display())?;
            writeln!(out, "wall time: {:.1} s", s.seconds_total)?;
        }
    }
    out.flush()?;
    Ok(())
}
