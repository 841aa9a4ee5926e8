//! `novad` command line: parses arguments and calls the library.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Parser;
use novad::cli::{Cli, Command, StatusFormat, TopicFormat};
use novad::daemon::{self, api, RunConfig};
use novad::ingest::{Ingestor, Outcome};
use novad::query::{self, VerdictFilter};
use novad::store::{snapshot, Store};

fn init_logs(verbose: u8, default: &str) {
    let level = match verbose {
        0 => default,
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("novad={level},{level}")));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Command::Run(_) | Command::Ingest(_)) {
        "info"
    } else {
        "warn"
    };
    init_logs(cli.verbose, default_level);
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // `novad verdicts | head`: a closed pipe is not an error
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("novad: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn time_bound(s: &Option<String>, until: bool) -> Result<Option<i64>> {
    s.as_deref()
        .map(|t| {
            if until {
                query::parse_until(t)
            } else {
                query::parse_since(t)
            }
        })
        .transpose()
        .map_err(|e| anyhow::anyhow!(e))
}

fn dispatch(cli: Cli) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Run(a) => {
            let params = a.params.resolve().map_err(|e| anyhow::anyhow!(e))?;
            daemon::run(&RunConfig {
                inbox: a.inbox,
                store: a.store.store,
                params,
                settle: std::time::Duration::from_millis(a.settle_ms),
                poll: std::time::Duration::from_millis(a.poll_ms),
                http: a.http.config(),
            })?;
        }
        Command::Serve(a) => serve(&a)?,
        Command::Ingest(a) => {
            let params = a.params.resolve().map_err(|e| anyhow::anyhow!(e))?;
            let mut ing = Ingestor::open(&a.store.store, params.as_ref())?;
            let mut rejected = 0;
            for f in &a.files {
                let now = chrono::Utc::now().timestamp_millis();
                match ing.ingest_path(f, now)? {
                    Outcome::Committed {
                        timestep,
                        stats,
                        seconds,
                        ..
                    } => writeln!(
                        out,
                        "{}: timestep {timestep}: {} documents, {} novel{} ({seconds:.3}s)",
                        f.display(),
                        stats.docs,
                        stats.novel,
                        if stats.bootstrap { ", bootstrap" } else { "" }
                    )?,
                    Outcome::AlreadyCommitted { timestep } => writeln!(
                        out,
                        "{}: already ingested as timestep {timestep}; skipped",
                        f.display()
                    )?,
                    Outcome::Rejected(why) => {
                        rejected += 1;
                        eprintln!("novad: {} rejected: {why}", f.display());
                    }
                }
            }
            if rejected > 0 {
                bail!("{rejected} file(s) rejected; nothing of them was applied");
            }
        }
        Command::Verdicts(a) => {
            let filter = VerdictFilter {
                since: time_bound(&a.since, false)?,
                until: time_bound(&a.until, true)?,
                novel_only: a.novel,
                min_score: a.min_score,
                limit: a.limit,
            };
            let dir = &a.store.store;
            let vs = match api::remote_verdicts(dir, &filter).map_err(|e| anyhow::anyhow!(e))? {
                Some(vs) => vs,
                None => {
                    let store = open_existing(dir)?;
                    query::verdicts(store.db(), &filter).map_err(|e| anyhow::anyhow!(e))?
                }
            };
            query::write_verdicts(&mut out, &vs, a.format)?;
        }
        Command::Topics(a) => {
            let since = time_bound(&a.since, false)?;
            let until = time_bound(&a.until, true)?;
            let dir = &a.store.store;
            let lines = api::request(dir, &api::Request::Topics { since, until })
                .map_err(|e| anyhow::anyhow!(e))?;
            let topics: Vec<novad::topics::TopicRecord> = match lines {
                Some(ls) => ls
                    .iter()
                    .map(|l| serde_json::from_str(l))
                    .collect::<Result<_, _>>()
                    .context("bad response from the daemon")?,
                None => {
                    let store = open_existing(dir)?;
                    novad::topics::query(store.db(), since, until)
                        .map_err(|e| anyhow::anyhow!(e))?
                }
            };
            match a.format {
                TopicFormat::Jsonl => {
                    for t in &topics {
                        writeln!(out, "{}", serde_json::to_string(t)?)?;
                    }
                }
                TopicFormat::Table => {
                    for t in &topics {
                        let terms: Vec<&str> = t.terms.iter().map(|x| x.0.as_str()).collect();
                        writeln!(
                            out,
                            "step {:>4} topic {:>3} {:<8} {:>5} docs  strength {:.3}  score {:.3}  {}",
                            t.timestep,
                            t.id,
                            query::kind_name(t.kind),
                            t.size,
                            t.strength,
                            t.mean_score,
                            terms.join(" ")
                        )?;
                    }
                    writeln!(out, "{} topics", topics.len())?;
                }
            }
        }
        Command::Status(a) => {
            let dir = &a.store.store;
            let st = match api::remote_status(dir, a.recent).map_err(|e| anyhow::anyhow!(e))? {
                Some(s) => s,
                None => {
                    let store = open_existing(dir)?;
                    let mut s =
                        query::status(store.db(), a.recent).map_err(|e| anyhow::anyhow!(e))?;
                    s.disk_bytes = store.disk_bytes();
                    s
                }
            };
            match a.format {
                StatusFormat::Json => writeln!(out, "{}", serde_json::to_string_pretty(&st)?)?,
                StatusFormat::Text => query::write_status(&mut out, &st)?,
            }
        }
        Command::Export(a) => {
            let store = open_existing(&a.store.store)?;
            let n = snapshot::export(&store, &a.file)?;
            writeln!(out, "exported {n} records to {}", a.file.display())?;
        }
        Command::Eval(a) => {
            let s = novad::eval::run(&a)?;
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
            let s = novad::eval::dnmf::run_dnmf_eval(&a)?;
            writeln!(out, "report:  {}", a.out.join("report.md").display())?;
            writeln!(out, "results: {}", a.out.join("results.json").display())?;
            writeln!(out, "wall time: {:.1} s", s.seconds)?;
        }
        Command::EvalOstc(a) => {
            let s = novad::eval::run_ostc_eval(&a)?;
            writeln!(out, "report:  {}", a.out.join("report.md").display())?;
            writeln!(out, "results: {}", a.out.join("results.json").display())?;
            writeln!(out, "wall time: {:.1} s", s.seconds_total)?;
        }
        Command::Params(a) => {
            use novad::engine::{ModelKind, ModelParams};
            let p = match (&a.store, a.model, a.preset) {
                (Some(dir), _, _) => open_existing(dir)?.model_params()?.ok_or_else(|| {
                    anyhow::anyhow!("store {} has no parameters yet", dir.display())
                })?,
                (None, ModelKind::L1, novad::cli::Preset::Paper) => {
                    ModelParams::L1(novad::Params::paper())
                }
                (None, kind, novad::cli::Preset::Default) => ModelParams::defaults(kind)?,
                (None, kind, novad::cli::Preset::Paper) => {
                    bail!("--preset paper applies to the l1 model only (not {kind})")
                }
            };
            write!(out, "{}", p.to_toml())?;
        }
        Command::Digest(a) => {
            let mut store = open_existing(&a.store)?;
            let engine = store.engine(None)?;
            writeln!(out, "{}", blake3::hash(&engine.to_bytes()).to_hex())?;
        }
        Command::Import(a) => {
            let n = snapshot::import(&a.store.store, &a.file)?;
            // open once to run migrations (an older snapshot) and check the model loads; sled
            // releases its lock asynchronously after a drop, so wait for it briefly
            let t = std::time::Instant::now();
            let mut store = loop {
                match Store::open(&a.store.store) {
                    Err(novad::store::StoreError::Locked { .. })
                        if t.elapsed() < std::time::Duration::from_secs(10) =>
                    {
                        std::thread::sleep(std::time::Duration::from_millis(50))
                    }
                    r => break r?,
                }
            };
            store.engine(None)?;
            writeln!(out, "imported {n} records into {}", a.store.store.display())?;
        }
    }
    out.flush()?;
    Ok(())
}

/// `novad serve`: the dashboard and API of a stopped store, until SIGINT/SIGTERM.
fn serve(a: &novad::cli::ServeArgs) -> Result<()> {
    let Some(cfg) = a.http.config() else {
        bail!("`novad serve` serves HTTP; drop --no-http");
    };
    let store = open_existing(&a.store.store)?;
    let server = novad::http::start(&a.store.store, store.db().clone(), &cfg, false)?
        .context("the HTTP address is in use; pass --http ADDR")?;
    println!("novad: serving {} read-only", a.store.store.display());
    println!(
        "novad: dashboard (one-time sign-in link): {}",
        server.login_url
    );
    println!(
        "novad: API token in {}",
        novad::http::auth::token_path(&a.store.store).display()
    );
    std::io::stdout().flush()?;
    let term = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, std::sync::Arc::clone(&term))?;
    }
    while !term.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Ok(())
}

/// Open a store that must already exist (queries never create one).
fn open_existing(dir: &std::path::Path) -> Result<Store> {
    if !dir.join("db").exists() {
        bail!(
            "no store at {} (run `novad run` or `novad ingest` first, or pass --store)",
            dir.display()
        );
    }
    Ok(Store::open(dir)?)
}
