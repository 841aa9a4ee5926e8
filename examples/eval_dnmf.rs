//! Run the dynamic-NMF evaluation (`novad::eval::dnmf::run_dnmf_eval`).
//!
//! `cargo run --release --example eval_dnmf -- --out eval-dnmf-out`

use clap::Parser;
use novad::eval::dnmf::{run_dnmf_eval, DnmfEvalArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: DnmfEvalArgs,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let s = run_dnmf_eval(&cli.args)?;
    println!(
        "{}",
        std::fs::read_to_string(cli.args.out.join("report.md"))?
    );
    println!("done in {:.0} s", s.seconds);
    Ok(())
}
