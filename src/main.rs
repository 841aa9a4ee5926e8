//! `novad` command line: parses arguments and calls the library.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Parser;
use novad::cli::{Cli, Command, StatusFormat};
use novad::daemon::{self, api, RunConfig};
use novad::ingest::{Ingestor, Outcome};
use novad::query::{self, VerdictFilter};
use novad::store::{guard, snapshot, Store, StoreError};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`: its position in `mi_option_t` of the mimalloc (v3)
/// sources `libmimalloc-sys` builds, which does not name it (checked by a test below).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Milliseconds freed memory stays with the process before mimalloc may return it to the
/// system. At 10 s instead of mimalloc's default (1 000 ms) the next timestep reuses what the
/// last one freed (`bench_cluster -- 8 200 hybrid`, docs/RESULTS.md: 4–10 % less time per
/// timestep with a backlog; the kernel's page zeroing fell from 11–13 % to 9–12 % of the
/// samples). The cost is resident memory: mimalloc returns memory only while it allocates, so
/// an idle daemon keeps what its last timesteps freed (measured: 336 MiB against 226 MiB with
/// the default, unchanged after 120 s).
const PURGE_DELAY_MS: std::ffi::c_long = 10_000;

/// Set the allocator's options; a `MIMALLOC_PURGE_DELAY` in the environment still wins.
fn tune_allocator() {
    // SAFETY: mimalloc's option setters are plain stores into its option table; this runs
    // first in `main`, before any other thread of ours exists.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
}

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
    tune_allocator();
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
            if is_damaged(&e) {
                ExitCode::from(guard::EXIT_DAMAGED)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// Whether the error says the store is damaged (exit status [`guard::EXIT_DAMAGED`]).
fn is_damaged(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<StoreError>().is_some_and(|s| s.is_damaged())
            || c.downcast_ref::<daemon::DaemonError>().is_some_and(
                |d| matches!(d, daemon::DaemonError::Store(s) if s.is_damaged()),
            )
            || c.downcast_ref::<novad::ingest::IngestError>().is_some_and(
                |i| matches!(i, novad::ingest::IngestError::Store(s) if s.is_damaged()),
            )
            || c.downcast_ref::<novad::store::rebuild::RebuildError>().is_some_and(
                |r| matches!(r, novad::store::rebuild::RebuildError::Store(s) if s.is_damaged()),
            )
    })
}

/// Run a direct read of the store under the damage guard; a read error that reports
/// corruption becomes a "store damaged" error.
fn read_store<T, E: std::fmt::Display>(
    dir: &std::path::Path,
    what: &str,
    f: impl FnOnce() -> std::result::Result<T, E>,
) -> Result<T> {
    let r = guard::watched(dir, what, f)?;
    r.map_err(|e| {
        let msg = e.to_string();
        let lower = msg.to_lowercase();
        if lower.contains("corrupt") {
            anyhow::Error::new(StoreError::Damaged {
                dir: dir.display().to_string(),
                detail: format!("{what}: {msg}"),
            })
        } else {
            anyhow::anyhow!(msg)
        }
    })
}

fn time_bound(s: &Option<String>, until: bool) -> Result<Option<i64>> {
    Ok(s.as_deref()
        .map(|t| {
            if until {
                query::parse_until(t)
            } else {
                query::parse_since(t)
            }
        })
        .transpose()?)
}

/// Print what `novad ingest` did with one part of a file; 1 when it failed.
fn report_ingest(out: &mut impl Write, f: &std::path::Path, o: Outcome) -> Result<usize> {
    let f = f.display();
    match o {
        Outcome::Committed {
            timestep,
            stats,
            seconds,
            start,
            end,
            ..
        } => writeln!(
            out,
            "{f}: timestep {timestep}: bytes {start}..{end}: {} documents, {} novel{} ({seconds:.3}s)",
            stats.docs,
            stats.novel,
            if stats.bootstrap { ", bootstrap" } else { "" }
        )?,
        Outcome::AlreadyCommitted { timestep } => {
            writeln!(out, "{f}: already ingested up to timestep {timestep}; skipped")?
        }
        Outcome::Duplicate { of, timestep } => writeln!(
            out,
            "{f}: duplicate of {of}, timestep {timestep} (same content); skipped"
        )?,
        Outcome::Blank { .. } => {}
        Outcome::Deferred { timestep, .. } => {
            unreachable!("`novad ingest` commits in line; timestep {timestep} was deferred")
        }
        Outcome::Rejected(why) => {
            eprintln!("novad: {f} rejected: {why}");
            return Ok(1);
        }
        Outcome::Changed(why) => {
            eprintln!("novad: {f} changed while being read ({why}); nothing of that part was applied, run again");
            return Ok(1);
        }
    }
    Ok(0)
}

fn dispatch(cli: Cli) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Run(a) => {
            let params = a.params.resolve()?;
            let cluster = a.cluster.config()?;
            let http = a.http_config();
            let cfg = RunConfig {
                inbox: a.inbox,
                store: a.store.store,
                params,
                settle: std::time::Duration::from_millis(a.settle_ms),
                poll: std::time::Duration::from_millis(a.poll_ms),
                limits: a.limits.limits(),
                http,
                webhooks: a.notify.webhooks()?,
                retry_parked: a.notify.notify_retry_parked,
            };
            match cluster {
                Some(c) => novad::cluster::run(&cfg, &c)?,
                None => daemon::run(&cfg)?,
            }
        }
        Command::Serve(a) => serve(&a)?,
        Command::Completions(a) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(a.shell, &mut cmd, "novad", &mut out);
        }
        Command::Manpage => {
            let cmd = <Cli as clap::CommandFactory>::command();
            clap_mangen::Man::new(cmd).render(&mut out)?;
        }
        Command::ClusterKey(a) => {
            novad::cluster::auth::write_new_key(&a.file)?;
            writeln!(
                out,
                "wrote a new cluster key to {} (mode 0600): copy it to every process of the \
                 cluster, keeping it 0600, and start each with --cluster-key {}",
                a.file.display(),
                a.file.display()
            )?;
        }
        Command::Ingest(a) => {
            let params = a.params.resolve()?;
            let mut ing = Ingestor::open(&a.store.store, params.as_ref())?;
            let mut failed = 0;
            for f in &a.files {
                let now = chrono::Utc::now().timestamp_millis();
                for o in ing.ingest_path(f, a.limits.limits(), now)? {
                    failed += report_ingest(&mut out, f, o)?;
                }
            }
            if failed > 0 {
                bail!("{failed} file(s) rejected or changed while being read; the messages above say what was applied");
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
            filter.validate()?;
            let dir = &a.store.store;
            let opts = a.api.options();
            // the store (and its lock) is released before the output is written
            let vs = answer(
                dir,
                &opts,
                || api::remote_verdicts(dir, &filter, &opts),
                |store| {
                    read_store(dir, "reading verdicts", || {
                        query::verdicts(store.db(), &filter)
                    })
                },
            )?;
            query::write_verdicts(&mut out, &vs, a.format)?;
        }
        Command::Topics(a) => {
            let since = time_bound(&a.since, false)?;
            let until = time_bound(&a.until, true)?;
            let dir = &a.store.store;
            let opts = a.api.options();
            let mut topics = answer(
                dir,
                &opts,
                || api::remote_topics(dir, since, until, &opts),
                |store| {
                    read_store(dir, "reading topics", || {
                        query::topics(store.db(), since, until)
                    })
                },
            )?;
            if let Some(e) = a.event {
                topics.retain(|t| t.event == Some(e));
            }
            query::write_topics(&mut out, &topics, a.format, a.event.is_some())?;
        }
        Command::Status(a) => {
            let dir = &a.store.store;
            let opts = a.api.options();
            let st = answer(
                dir,
                &opts,
                || api::remote_status(dir, a.recent, &opts),
                |store| {
                    let mut s = read_store(dir, "reading the status", || {
                        query::status(store.db(), a.recent)
                    })?;
                    s.disk_bytes = store.disk_bytes();
                    Ok(s)
                },
            )?;
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
        Command::Params(a) => {
            use novad_models::{ModelKind, ModelParams};
            let p = match (&a.store, a.model, a.preset) {
                (Some(dir), _, _) => open_existing(dir)?.model_params()?.ok_or_else(|| {
                    anyhow::anyhow!("store {} has no parameters yet", dir.display())
                })?,
                (None, ModelKind::L1, novad::cli::Preset::Paper) => {
                    ModelParams::L1(novad_models::Params::paper())
                }
                (None, kind, novad::cli::Preset::Default) => ModelParams::defaults(kind),
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
        Command::Check(a) => check(&mut out, &a)?,
        Command::Rebuild(a) => rebuild(&mut out, &a)?,
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

/// `novad check`: print the report; a damaged store is an error (exit status 3).
fn check(out: &mut impl Write, a: &novad::cli::CheckArgs) -> Result<()> {
    let dir = &a.store.store;
    if !dir.join("db").exists() {
        bail!("no store at {}", dir.display());
    }
    let r = novad::store::check::check(dir)?;
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
    } else {
        write_check(out, dir, &r)?;
    }
    if !r.problems.is_empty() {
        out.flush()?;
        return Err(StoreError::Damaged {
            dir: dir.display().to_string(),
            detail: format!(
                "{} problem(s) found: {}",
                r.problems.len(),
                r.problems.join("; ")
            ),
        }
        .into());
    }
    Ok(())
}

/// `novad rebuild`: replay the processed files into a new store and compare the digests.
fn rebuild(out: &mut impl Write, a: &novad::cli::RebuildArgs) -> Result<()> {
    use novad::store::rebuild;
    let new = a.store.clone().unwrap_or_else(|| {
        let mut s = a.old.clone().into_os_string();
        s.push(".rebuilt");
        s.into()
    });
    let plan = rebuild::plan(&a.old)?;
    writeln!(
        out,
        "replaying {} timesteps from {} in the order of {} ({})",
        plan.entries.len(),
        a.from.display(),
        a.old.display(),
        match plan.source {
            rebuild::OrderSource::Store => "its records",
            rebuild::OrderSource::Journal => "its journal.jsonl",
        }
    )?;
    let s = rebuild::run(&plan, &a.from, &new)?;
    writeln!(
        out,
        "rebuilt {} timesteps ({} documents) into {}",
        s.timesteps,
        s.docs,
        new.display()
    )?;
    writeln!(out, "digest {}", s.model_digest)?;
    for (what, m) in [
        ("the old store's model", s.matches_old_model),
        ("the committed state (committed.json)", s.matches_committed),
    ] {
        match m {
            Some(true) => writeln!(out, "equal to {what}")?,
            Some(false) => bail!("the rebuilt store differs from {what}"),
            None => {}
        }
    }
    Ok(())
}

fn write_check(
    out: &mut impl Write,
    dir: &std::path::Path,
    r: &novad::store::check::Report,
) -> std::io::Result<()> {
    writeln!(out, "store {}", dir.display())?;
    for (t, n) in &r.trees {
        writeln!(out, "  tree {t:<10} {n:>9} records read")?;
    }
    writeln!(out, "  timesteps  {}", r.timesteps)?;
    writeln!(out, "  state      {}", r.state_digest)?;
    writeln!(out, "  digest     {}", r.model_digest)?;
    match &r.sidecar {
        Some(c) => writeln!(
            out,
            "  committed  {} timesteps, state {}",
            c.timesteps, c.state_digest
        )?,
        None => writeln!(out, "  committed  no committed.json")?,
    }
    match r.journal_entries {
        Some(n) => writeln!(out, "  journal    {n} timesteps")?,
        None => writeln!(out, "  journal    none")?,
    }
    if r.problems.is_empty() {
        writeln!(out, "ok: every tree read and verified")?;
    }
    for p in &r.problems {
        writeln!(out, "problem: {p}")?;
    }
    Ok(())
}

/// `novad serve`: the dashboard and API of a stopped store, until SIGINT/SIGTERM.
fn serve(a: &novad::cli::ServeArgs) -> Result<()> {
    let Some(cfg) = a.http.config() else {
        bail!("`novad serve` serves HTTP; drop --no-http");
    };
    let store = open_existing(&a.store.store)?;
    let server = novad::http::start(
        &a.store.store,
        store.db().clone(),
        store.durable(),
        &cfg,
        None,
    )?
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
    open_existing_waiting(dir, novad::store::LOCK_WAIT)
}

/// [`open_existing`], waiting at most `lock_wait` for another process's lock.
fn open_existing_waiting(dir: &std::path::Path, lock_wait: std::time::Duration) -> Result<Store> {
    if !dir.join("db").exists() {
        bail!(
            "no store at {} (run `novad run` or `novad ingest` first, or pass --store)",
            dir.display()
        );
    }
    Ok(Store::open_waiting(dir, lock_wait)?)
}

/// Pause between two rounds of [`answer`] while the store is locked and no daemon answers.
const ANSWER_PAUSE: std::time::Duration = std::time::Duration::from_millis(40);

/// A query's answer: from the daemon of `dir` over its socket when one answers (`remote`),
/// otherwise read from the store itself (`local`, with the store open and locked).
///
/// A daemon holds the store's lock from the moment it opens the store, but its socket comes
/// up only after the model is loaded (up to seconds on a large store): in that window neither
/// way answers at once. So while the store is locked and no daemon answers, both are tried
/// again, turn about, until `opts.retry_for` (at least [`novad::store::LOCK_WAIT`]) has passed;
/// then the lock error is returned. A daemon that answers "busy" is retried by `remote` itself.
fn answer<T>(
    dir: &std::path::Path,
    opts: &api::ClientOptions,
    mut remote: impl FnMut() -> std::result::Result<Option<T>, api::ApiError>,
    local: impl FnOnce(&Store) -> Result<T>,
) -> Result<T> {
    let budget = opts.retry_for.max(novad::store::LOCK_WAIT);
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = remote()? {
            return Ok(v);
        }
        let left = budget.saturating_sub(start.elapsed());
        match open_existing_waiting(dir, ANSWER_PAUSE.min(left)) {
            Ok(store) => return local(&store),
            Err(e) if is_locked(&e) && !left.is_zero() => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Whether `e` says another process holds the store's lock.
fn is_locked(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<StoreError>(),
        Some(StoreError::Locked { .. })
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option set is mimalloc's purge delay: before, it holds that option's default of the
    /// bundled mimalloc v3 (1 000 ms; the neighbouring options default to 1 and 0), after, the
    /// value set. A mimalloc whose option table moved fails here.
    #[test]
    fn the_purge_delay_option_is_mimallocs() {
        // SAFETY: reading an option of the process's allocator
        let before = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(
            before, 1_000,
            "mimalloc's default purge delay (run without MIMALLOC_PURGE_DELAY)"
        );
        tune_allocator();
        let after = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(after, PURGE_DELAY_MS);
    }
}
