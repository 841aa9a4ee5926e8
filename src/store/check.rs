//! Verifying a store (`novad check`, and the checks every open and every model load make)
//! and keeping the sidecar and journal in step with it.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Serialize;

use super::schema::*;
use super::sidecar::{self, Committed, JournalEntry, JournalLine};
use super::{guard, Store, StoreError};
use crate::store::schema::TopicRecord;
use novad_models::{Engine, ModelParams};

fn damaged(dir: &Path, detail: impl Into<String>) -> StoreError {
    StoreError::Damaged {
        dir: dir.display().to_string(),
        detail: detail.into(),
    }
}

/// Remove snapshots sled left half-written (`db/snap.*.generating`): sled writes a snapshot
/// under that name, fsyncs it and only then renames it, so such a file is never a finished
/// snapshot — but sled would read it (it sorts last) and fail with "Read corrupted data" on
/// every open. Only done when no process holds the store (an advisory lock on `db/db`, the
/// same lock sled takes), so a snapshot being written right now is left alone. Returns the
/// files removed.
pub fn remove_stale_snapshots(dir: &Path) -> Vec<String> {
    use std::os::fd::AsRawFd;
    let db_dir = dir.join("db");
    let Ok(rd) = std::fs::read_dir(&db_dir) else {
        return Vec::new();
    };
    let stale: Vec<std::path::PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with("snap.") && n.ends_with(".generating")
        })
        .collect();
    if stale.is_empty() {
        return Vec::new();
    }
    let Ok(lock) = std::fs::File::open(db_dir.join("db")) else {
        return Vec::new();
    };
    // SAFETY: flock on a file descriptor we own; released when `lock` is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Vec::new();
    }
    let mut removed = Vec::new();
    for p in stale {
        if std::fs::remove_file(&p).is_ok() {
            tracing::warn!(file = %p.display(), "removed a half-written sled snapshot (left by a full disk or a crash)");
            removed.push(p.display().to_string());
        }
    }
    drop(lock);
    removed
}

/// The committed timesteps as `meta/state` records them (0 for a store without state).
fn stored_timesteps(db: &sled::Db, dir: &Path) -> Result<u64, StoreError> {
    let meta = db.open_tree(META).map_err(|e| super::sled_error(dir, e))?;
    match meta.get(KEY_STATE).map_err(|e| super::sled_error(dir, e))? {
        None => Ok(0),
        Some(v) => postcard::from_bytes::<StateMeta>(&v)
            .map(|s| s.timestep)
            .map_err(|e| damaged(dir, format!("meta/state does not decode: {e}"))),
    }
}

/// Refuse a store that holds fewer timesteps than `committed.json` records: it went
/// backwards (sled opened a truncated or damaged log as its valid prefix).
pub fn refuse_if_behind(store: &Store) -> Result<(), StoreError> {
    let Some(c) = sidecar::read(store.dir())? else {
        return Ok(());
    };
    let have = stored_timesteps(store.db(), store.dir())?;
    if have < c.timesteps {
        return Err(damaged(
            store.dir(),
            format!(
                "it holds {have} timesteps but {} were committed (committed.json): the store lost committed data (a truncated or damaged `db`)",
                c.timesteps
            ),
        ));
    }
    Ok(())
}

/// After the model state was loaded: compare it with `committed.json`, or bring the sidecar
/// and journal up to date when the store is ahead of them (the crash window after a flush).
/// A failure to write them is logged, not returned (they may lag; they are never ahead).
pub fn verify_committed(store: &mut Store, engine: &Engine) -> Result<(), StoreError> {
    let have = engine.timestep();
    let digest = store.state_digest();
    match sidecar::read(store.dir())? {
        Some(c) if c.timesteps == have => {
            if c.state_digest != digest {
                return Err(damaged(
                    store.dir(),
                    format!(
                        "the model state after timestep {have} differs from the one committed (state digest {digest}, committed.json: {})",
                        c.state_digest
                    ),
                ));
            }
            tracing::debug!(
                timesteps = have,
                "model state verified against committed.json"
            );
            Ok(())
        }
        Some(c) if c.timesteps > have => Err(damaged(
            store.dir(),
            format!(
                "the model holds {have} timesteps but {} were committed (committed.json)",
                c.timesteps
            ),
        )),
        None if have == 0 => Ok(()),
        _ => {
            let res = repair_journal(store).and_then(|_| {
                let committed_at = last_commit_time(store)?;
                sidecar::write(
                    store.dir(),
                    &Committed {
                        timesteps: have,
                        state_digest: digest,
                        committed_at,
                    },
                )
            });
            if let Err(e) = res {
                tracing::warn!(error = %e, "cannot bring committed.json / journal.jsonl up to date; they lag the store (safe) and are retried on the next open");
            }
            Ok(())
        }
    }
}

fn last_commit_time(store: &Store) -> Result<i64, StoreError> {
    Ok(store
        .tree(TIMESTEPS)
        .last()
        .map_err(|e| store.sled(e))?
        .and_then(|(_, v)| postcard::from_bytes::<TimestepRecord>(&v).ok())
        .map(|r| r.committed_at)
        .unwrap_or(0))
}

/// Write the journal's header for a new store (when there is no journal yet).
pub fn start_journal(store: &Store, params: &ModelParams) -> Result<(), StoreError> {
    if sidecar::journal_path(store.dir()).exists() {
        return Ok(());
    }
    sidecar::append(
        store.dir(),
        &[JournalLine::Header {
            model: params.kind(),
            params: params.to_json(),
        }],
    )
}

/// The committed timesteps as the store's `timesteps` tree records them, in order.
pub fn store_entries(store: &Store) -> Result<Vec<JournalEntry>, StoreError> {
    let mut files: HashMap<String, u64> = HashMap::new();
    for kv in store.tree(FILES).iter() {
        guard::progress();
        let (k, v) = kv.map_err(|e| store.sled(e))?;
        let f: FileRecord = postcard::from_bytes(&v)
            .map_err(|e| damaged(store.dir(), format!("a file record does not decode: {e}")))?;
        files.insert(hex(&k), f.docs);
    }
    let mut out = Vec::new();
    for kv in store.tree(TIMESTEPS).iter() {
        guard::progress();
        let (_, v) = kv.map_err(|e| store.sled(e))?;
        let r: TimestepRecord = postcard::from_bytes(&v).map_err(|e| {
            damaged(
                store.dir(),
                format!("a timestep record does not decode: {e}"),
            )
        })?;
        out.push(JournalEntry {
            timestep: r.timestep,
            docs: files.get(&r.hash).copied().unwrap_or(r.stats.docs as u64),
            file: r.file,
            hash: r.hash,
            committed_at: r.committed_at,
        });
    }
    Ok(out)
}

/// Append to the journal what the store committed beyond it (a header too if it is new).
fn repair_journal(store: &Store) -> Result<(), StoreError> {
    let path = sidecar::journal_path(store.dir());
    let (have, header) = if path.exists() {
        let j = sidecar::read_journal(&path).map_err(|msg| StoreError::Corrupt {
            dir: store.dir_string(),
            what: sidecar::JOURNAL.into(),
            msg,
        })?;
        (j.entries.len() as u64, j.header.is_some())
    } else {
        (0, false)
    };
    let mut lines = Vec::new();
    if !header {
        if let Some(p) = store.model_params()? {
            lines.push(JournalLine::Header {
                model: p.kind(),
                params: p.to_json(),
            });
        }
    }
    lines.extend(
        store_entries(store)?
            .into_iter()
            .filter(|e| e.timestep >= have)
            .map(JournalLine::Timestep),
    );
    sidecar::append(store.dir(), &lines)
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What `novad check` found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Records read per tree.
    pub trees: BTreeMap<String, u64>,
    pub timesteps: u64,
    pub state_digest: String,
    /// `novad digest` of the loaded model.
    pub model_digest: String,
    pub sidecar: Option<Committed>,
    pub journal_entries: Option<usize>,
    /// Everything wrong, one line each; empty for a healthy store.
    pub problems: Vec<String>,
}

/// Read and verify every tree of the store in `dir`: every record decodes and sits under its
/// own key, the timesteps run 0..T without a gap, every timestep has its file record,
/// exactly its documents' verdicts and the summary of those verdicts, the model state loads
/// and equals the committed digest, and the journal agrees with the store. Damage that stops
/// the reading (sled errors, panics) is returned as [`StoreError::Damaged`]; inconsistencies
/// are listed in [`Report::problems`]. Holds one `f64` per scored verdict (to recompute the
/// summaries' quantiles).
pub fn check(dir: &Path) -> Result<Report, StoreError> {
    let mut store = Store::open(dir)?;
    let mut r = Report::default();
    guard::watched(dir, "reading every tree", || read_trees(&store, &mut r))??;
    let engine = store.engine(None)?;
    r.timesteps = engine.timestep();
    r.state_digest = store.state_digest();
    r.model_digest = blake3::hash(&engine.to_bytes()).to_hex().to_string();
    if r.trees.get(TIMESTEPS).copied().unwrap_or(0) != r.timesteps {
        r.problems.push(format!(
            "the model is at timestep {} but {} timestep records are stored",
            r.timesteps,
            r.trees.get(TIMESTEPS).copied().unwrap_or(0)
        ));
    }
    r.sidecar = sidecar::read(dir)?;
    let jpath = sidecar::journal_path(dir);
    if jpath.exists() {
        match sidecar::read_journal(&jpath) {
            Err(e) => r.problems.push(format!("journal: {e}")),
            Ok(j) => {
                r.journal_entries = Some(j.entries.len());
                let stored =
                    guard::watched(dir, "reading the timesteps", || store_entries(&store))??;
                for (a, b) in stored.iter().zip(&j.entries) {
                    if (a.timestep, &a.file, &a.hash) != (b.timestep, &b.file, &b.hash) {
                        r.problems.push(format!(
                            "timestep {}: the store has {} ({}), the journal {} ({})",
                            a.timestep, a.file, a.hash, b.file, b.hash
                        ));
                    }
                }
                if j.entries.len() != stored.len() {
                    r.problems.push(format!(
                        "the journal records {} timesteps, the store {}",
                        j.entries.len(),
                        stored.len()
                    ));
                }
            }
        }
    }
    Ok(r)
}

/// Per-tree reading and decoding for [`check`].
fn read_trees(store: &Store, r: &mut Report) -> Result<(), StoreError> {
    let mut verdicts_per_step: BTreeMap<u64, SummaryBuilder> = BTreeMap::new();
    let mut summaries: BTreeMap<u64, StepSummary> = BTreeMap::new();
    let mut files: HashMap<String, FileRecord> = HashMap::new();
    let mut steps: Vec<TimestepRecord> = Vec::new();
    for name in ALL_TREES {
        let mut n = 0u64;
        for kv in store.tree(name).iter() {
            guard::progress();
            let (k, v) = kv.map_err(|e| store.sled(e))?;
            n += 1;
            let bad = |what: &str, e: String| format!("{name}: {what} at key {}: {e}", hex(&k));
            match name {
                VERDICTS => match postcard::from_bytes::<VerdictRecord>(&v) {
                    Ok(rec) if verdict_key(rec.time, rec.timestep, rec.seq)[..] == k[..] => {
                        verdicts_per_step.entry(rec.timestep).or_default().add(&rec);
                    }
                    Ok(_) => r
                        .problems
                        .push(bad("verdict", "under a foreign key".into())),
                    Err(e) => r.problems.push(bad("verdict", e.to_string())),
                },
                FILES => match postcard::from_bytes::<FileRecord>(&v) {
                    Ok(rec) => {
                        files.insert(hex(&k), rec);
                    }
                    Err(e) => r.problems.push(bad("file record", e.to_string())),
                },
                TIMESTEPS => match postcard::from_bytes::<TimestepRecord>(&v) {
                    Ok(rec) if u64_key(rec.timestep)[..] == k[..] => steps.push(rec),
                    Ok(_) => r
                        .problems
                        .push(bad("timestep", "under a foreign key".into())),
                    Err(e) => r.problems.push(bad("timestep", e.to_string())),
                },
                SUMMARIES => match postcard::from_bytes::<StepSummary>(&v) {
                    Ok(rec) if k.len() == 8 => {
                        summaries.insert(u64::from_be_bytes(k[..].try_into().unwrap()), rec);
                    }
                    Ok(_) => r
                        .problems
                        .push(bad("summary", "under a foreign key".into())),
                    Err(e) => r.problems.push(bad("summary", e.to_string())),
                },
                TOPICS => {
                    if let Err(e) = postcard::from_bytes::<TopicRecord>(&v) {
                        r.problems.push(bad("topic", e.to_string()));
                    }
                }
                OUTBOX => match postcard::from_bytes::<OutboxRecord>(&v) {
                    Ok(rec) if outbox_key(&rec.url, rec.timestep)[..] == k[..] => {}
                    Ok(_) => r
                        .problems
                        .push(bad("webhook message", "under a foreign key".into())),
                    Err(e) => r.problems.push(bad("webhook message", e.to_string())),
                },
                _ => {}
            }
        }
        r.trees.insert(name.to_string(), n);
    }
    let computed: BTreeMap<u64, StepSummary> = verdicts_per_step
        .into_iter()
        .map(|(t, b)| (t, b.finish()))
        .collect();
    check_summaries(&steps, &computed, &summaries, &mut r.problems);
    for (i, s) in steps.iter().enumerate() {
        if s.timestep != i as u64 {
            r.problems.push(format!(
                "timestep {i} is missing (the next stored is {})",
                s.timestep
            ));
            break;
        }
        match files.get(&s.hash) {
            None => r.problems.push(format!(
                "timestep {} ({}): no file record for its hash",
                s.timestep, s.file
            )),
            Some(f) => {
                let got = computed.get(&s.timestep).map_or(0, |c| c.docs);
                if f.timestep != s.timestep || f.name != s.file {
                    r.problems.push(format!(
                        "timestep {} ({}): its file record says timestep {} ({})",
                        s.timestep, s.file, f.timestep, f.name
                    ));
                }
                if got != f.docs {
                    r.problems.push(format!(
                        "timestep {} ({}): {got} verdicts stored for {} documents",
                        s.timestep, s.file, f.docs
                    ));
                }
            }
        }
    }
    if files.len() != steps.len() {
        r.problems.push(format!(
            "{} file records for {} timesteps",
            files.len(),
            steps.len()
        ));
    }
    Ok(())
}

/// Every timestep has exactly one stored summary, equal to the summary of its verdicts
/// (`computed`, by timestep); a summary of no committed timestep is a problem too.
fn check_summaries(
    steps: &[TimestepRecord],
    computed: &BTreeMap<u64, StepSummary>,
    stored: &BTreeMap<u64, StepSummary>,
    problems: &mut Vec<String>,
) {
    let empty = StepSummary::default();
    for s in steps {
        let want = computed.get(&s.timestep).unwrap_or(&empty);
        match stored.get(&s.timestep) {
            None => problems.push(format!(
                "timestep {} ({}): no summary stored (the timeline cannot show it)",
                s.timestep, s.file
            )),
            Some(got) if got != want => problems.push(format!(
                "timestep {} ({}): its stored summary ({}) differs from its verdicts' ({})",
                s.timestep,
                s.file,
                describe(got),
                describe(want)
            )),
            Some(_) => {}
        }
    }
    let known: std::collections::HashSet<u64> = steps.iter().map(|s| s.timestep).collect();
    for t in stored.keys().filter(|t| !known.contains(t)) {
        problems.push(format!(
            "a summary is stored for timestep {t}, which has no record"
        ));
    }
}

/// A summary in one line, for a problem report.
fn describe(s: &StepSummary) -> String {
    let time = |t: Option<i64>| t.map_or("-".into(), crate::show::fmt_time);
    let scores = s.scores.map_or("no scores".into(), |q| {
        format!(
            "scores p10 {} p50 {} p90 {} max {}",
            q.p10, q.p50, q.p90, q.max
        )
    });
    format!(
        "{} docs, {} novel, {} to {}, {scores}",
        s.docs,
        s.novel,
        time(s.first_time),
        time(s.last_time)
    )
}
