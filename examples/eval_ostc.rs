//! The OSTC evaluation on 20 Newsgroups (held-out perplexity online vs batch, word-code
//! sparsity, online MedSTC accuracy); see `novad::eval::ostc`.
//!
//!     cargo run --release --example eval_ostc -- --out eval-ostc [--topics 60] [...]
use clap::Parser;
use novad::eval::{run_ostc_eval, OstcEvalArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: OstcEvalArgs,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "novad=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let s = run_ostc_eval(&cli.args)?;
    println!(
        "{}",
        std::fs::read_to_string(cli.args.out.join("report.md"))?
    );
    eprintln!("total {:.0} s", s.seconds_total);
    Ok(())
}
