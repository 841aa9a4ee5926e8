//! Reading the verdict log and the store's status — from the store directly, or through the
//! running daemon's local API (see [`crate::daemon::api`]) — and printing them.

use std::io::Write;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::batch::parse_time;
pub use crate::show::{fmt_time, shown};
use crate::store::schema::TopicRecord;
use crate::store::schema::{
    verdict_time_prefix, StateMeta, StepSummary, SummaryBuilder, TimestepRecord, VerdictRecord,
    FILES, KEY_FORMAT, KEY_PARAMS, KEY_STATE, META, SUMMARIES, TIMESTEPS, VERDICTS,
};

/// Why a query failed: a bad filter (the caller's mistake) or an unreadable store.
#[derive(Debug, Error)]
pub enum QueryError {
    /// `min_score` is NaN or infinite: no verdict comparison with it means anything.
    #[error("the minimum score must be a finite number, got {0}")]
    MinScore(f64),
    /// A `since` / `until` bound that is not a time.
    #[error("{0}")]
    Time(String),
    /// sled could not read a tree.
    #[error("cannot read the store: {0}")]
    Store(#[from] sled::Error),
    /// The topic tree could not be read or decoded.
    #[error("cannot read the topics: {0}")]
    Topics(String),
    /// A record that does not decode.
    #[error("corrupt {what} in the store: {reason}")]
    Corrupt { what: &'static str, reason: String },
}

impl QueryError {
    fn corrupt(what: &'static str) -> impl Fn(postcard::Error) -> QueryError {
        move |e| QueryError::Corrupt {
            what,
            reason: e.to_string(),
        }
    }

    /// Whether the caller's request was at fault (as opposed to the store).
    pub fn is_bad_request(&self) -> bool {
        matches!(self, QueryError::MinScore(_) | QueryError::Time(_))
    }
}

/// Which verdicts to return. Times are Unix milliseconds; `until` is exclusive.
///
/// `limit: Some(0)` returns no verdicts ("at most 0"); `None` means no limit. `min_score` must
/// be finite ([`VerdictFilter::validate`]); [`verdicts`] rejects it otherwise, so a NaN bound
/// fails the same way in the CLI, through the daemon, or from any other client.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VerdictFilter {
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub novel_only: bool,
    pub min_score: Option<f64>,
    pub limit: Option<usize>,
}

impl VerdictFilter {
    /// `Err` when the filter cannot be applied meaningfully (a NaN or infinite `min_score`).
    pub fn validate(&self) -> Result<(), QueryError> {
        match self.min_score {
            Some(m) if !m.is_finite() => Err(QueryError::MinScore(m)),
            _ => Ok(()),
        }
    }

    /// Whether `v` passes the novelty and score conditions (the time range is applied by
    /// the key range in [`visit_verdicts`]).
    pub fn matches(&self, v: &VerdictRecord) -> bool {
        (!self.novel_only || v.novel) && self.min_score.is_none_or(|m| v.score >= m)
    }
}

/// Parse a `--since` bound: RFC 3339 time or date (start of that day, UTC).
pub fn parse_since(s: &str) -> Result<i64, QueryError> {
    parse_time(s).map_err(QueryError::Time)
}

/// Parse an `--until` bound: an RFC 3339 time is exclusive; a date `YYYY-MM-DD` includes that
/// whole day (the bound becomes the next midnight, UTC).
pub fn parse_until(s: &str) -> Result<i64, QueryError> {
    let t = parse_time(s).map_err(QueryError::Time)?;
    if chrono::NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d").is_ok() {
        Ok(t + 86_400_000)
    } else {
        Ok(t)
    }
}

/// The one implementation of the verdict query: hands the verdicts matching `f` to `visit`,
/// in time order, and returns how many it handed over. At most `f.limit` are visited; the
/// filter is validated first. `visit` may stop the walk by returning an error, which is
/// passed back. The store is read record by record, so memory does not grow with the answer.
pub fn visit_verdicts<E: From<QueryError>>(
    db: &sled::Db,
    f: &VerdictFilter,
    mut visit: impl FnMut(VerdictRecord) -> Result<(), E>,
) -> Result<usize, E> {
    f.validate()?;
    if f.limit == Some(0) {
        return Ok(0);
    }
    let tree = db.open_tree(VERDICTS).map_err(QueryError::from)?;
    let lo = f.since.map(verdict_time_prefix).unwrap_or([0; 8]);
    let iter = match f.until {
        Some(u) => tree.range(lo.to_vec()..verdict_time_prefix(u).to_vec()),
        None => tree.range(lo.to_vec()..),
    };
    let mut n = 0;
    for kv in iter {
        let (_, v) = kv.map_err(QueryError::from)?;
        let v: VerdictRecord =
            postcard::from_bytes(&v).map_err(QueryError::corrupt("verdict record"))?;
        if f.matches(&v) {
            visit(v)?;
            n += 1;
            if f.limit.is_some_and(|l| n >= l) {
                break;
            }
        }
    }
    Ok(n)
}

/// Verdicts in time order matching `f` (see [`visit_verdicts`]), collected.
pub fn verdicts(db: &sled::Db, f: &VerdictFilter) -> Result<Vec<VerdictRecord>, QueryError> {
    let mut out = Vec::new();
    visit_verdicts(db, f, |v| {
        out.push(v);
        Ok::<(), QueryError>(())
    })?;
    Ok(out)
}

/// Emerging topics whose earliest document time is in `[since, until)`.
pub fn topics(
    db: &sled::Db,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<Vec<TopicRecord>, QueryError> {
    crate::store::topics::query(db, since, until).map_err(QueryError::Topics)
}

/// A summary of a store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub format_version: u32,
    /// The model the store runs.
    #[serde(default)]
    pub model: novad_models::ModelKind,
    /// Its parameters (the JSON image of the model's parameter set).
    pub params: Option<serde_json::Value>,
    pub state: Option<StateMeta>,
    pub verdicts: usize,
    pub files: usize,
    /// The most recent timesteps, newest first.
    pub recent: Vec<TimestepRecord>,
    /// The most recent emerging topics, newest first.
    #[serde(default)]
    pub topics: Vec<TopicRecord>,
    /// Whether the answer came from a running daemon.
    pub daemon_pid: Option<u32>,
    /// Inbox scans of the running daemon since it started (absent without a daemon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox_scans: Option<u64>,
    pub disk_bytes: u64,
    /// Webhook messages not yet delivered, per receiver (none: every message was delivered).
    #[serde(default)]
    pub webhooks: Vec<crate::alerts::backlog::Backlog>,
}

/// Read the status from the store's trees (`recent` holds at most `n_recent` timesteps, and
/// `topics` at most `n_recent` topics). `daemon_pid` is `None` and `disk_bytes` 0: the caller
/// who knows them fills them in.
/// How many verdicts the store holds: the sum of the per-timestep summaries' document counts,
/// O(timesteps) (sled counts a tree's entries by visiting every one). `novad check` verifies
/// that every summary matches its verdicts.
fn verdict_count(db: &sled::Db) -> Result<usize, QueryError> {
    let mut n = 0u64;
    for kv in db.open_tree(SUMMARIES)?.iter() {
        let (_, v) = kv?;
        let s: StepSummary =
            postcard::from_bytes(&v).map_err(QueryError::corrupt("timestep summary"))?;
        n += s.docs;
    }
    Ok(n as usize)
}

pub fn status(db: &sled::Db, n_recent: usize) -> Result<Status, QueryError> {
    let meta = db.open_tree(META)?;
    let format_version = meta
        .get(KEY_FORMAT)?
        .and_then(|v| postcard::from_bytes(&v).ok())
        .unwrap_or(0);
    let model: novad_models::ModelKind = match meta.get(crate::store::schema::KEY_MODEL)? {
        None => Default::default(),
        Some(v) => postcard::from_bytes(&v).map_err(QueryError::corrupt("model kind"))?,
    };
    let params = match meta.get(KEY_PARAMS)? {
        None => None,
        Some(v) => Some(
            novad_models::ModelParams::from_bytes(model, &v)
                .map_err(|e| QueryError::Corrupt {
                    what: "parameter set",
                    reason: e.to_string(),
                })?
                .to_json(),
        ),
    };
    let state = meta
        .get(KEY_STATE)?
        .and_then(|v| postcard::from_bytes(&v).ok());
    let ts = db.open_tree(TIMESTEPS)?;
    let mut recent = Vec::new();
    for kv in ts.iter().rev().take(n_recent) {
        let (_, v) = kv?;
        recent.push(postcard::from_bytes(&v).map_err(QueryError::corrupt("timestep record"))?);
    }
    let tt = db.open_tree(crate::store::schema::TOPICS)?;
    let mut topics = Vec::new();
    for kv in tt.iter().rev().take(n_recent) {
        let (_, v) = kv?;
        topics.push(postcard::from_bytes(&v).map_err(QueryError::corrupt("topic record"))?);
    }
    Ok(Status {
        format_version,
        model,
        params,
        state,
        topics,
        verdicts: verdict_count(db)?,
        files: db.open_tree(FILES)?.len(),
        recent,
        daemon_pid: None,
        inbox_scans: None,
        disk_bytes: 0,
        webhooks: crate::alerts::backlog::read(db).map_err(|reason| QueryError::Corrupt {
            what: "webhook outbox",
            reason,
        })?,
    })
}

/// Output formats of `novad verdicts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Jsonl,
    Csv,
}

/// One verdict as the JSON object printed by `--format jsonl`.
pub fn verdict_json(v: &VerdictRecord) -> serde_json::Value {
    serde_json::json!({
        "doc_id": v.doc_id,
        "time": fmt_time(v.time),
        "timestep": v.timestep,
        "source": v.source,
        "score": v.score,
        "novel": v.novel,
        "bootstrap": v.bootstrap,
        "empty": v.empty,
        "at_ceiling": v.at_ceiling,
        "terms": v.terms.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
        "hybrid": v.hybrid.as_ref().map(|h| serde_json::json!({
            "model_score": h.model_score,
            "model_quantile": h.model_quantile,
            "nn_score": h.nn_score,
            "nn_quantile": h.nn_quantile,
            "nearest": h.nearest.as_ref().map(|n| serde_json::json!({
                "doc_id": n.doc_id,
                "time": fmt_time(n.time),
                "timestep": n.timestep,
                "cosine": n.cosine,
            })),
        })),
        "topic": v.topic.map(|t| serde_json::json!({"id": t.id, "event": t.event})),
    })
}

/// The table's explanation of a hybrid verdict: the model's own score and the nearest earlier
/// document with its cosine (`-` without a detector, `none` when no earlier document shares
/// a term).
fn nearest_cell(v: &VerdictRecord) -> String {
    match &v.hybrid {
        None => "-".into(),
        Some(h) => match &h.nearest {
            Some(n) => {
                let id = shown(&n.doc_id.chars().take(24).collect::<String>());
                format!("{:.3} {id} ({:.2})", h.model_score, n.cosine)
            }
            None => format!("{:.3} none", h.model_score),
        },
    }
}

/// A CSV cell: quoted when it holds a separator, quote or line break; and a cell that a
/// spreadsheet would read as a formula (it begins with `=`, `+`, `-`, `@`, a tab or a carriage
/// return, as OWASP's CSV-injection advice lists) gets a leading `'`, so it stays text.
fn csv_field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// Print verdicts in the given format.
pub fn write_verdicts(
    out: &mut dyn Write,
    vs: &[VerdictRecord],
    format: Format,
) -> std::io::Result<()> {
    match format {
        Format::Jsonl => {
            for v in vs {
                writeln!(out, "{}", verdict_json(v))?;
            }
        }
        Format::Csv => {
            writeln!(
                out,
                "doc_id,time,timestep,source,score,novel,bootstrap,empty,terms,\
                 model_score,nn_score,nearest_id,nearest_cosine,topic,event"
            )?;
            for v in vs {
                let terms: Vec<&str> = v.terms.iter().map(|t| t.0.as_str()).collect();
                let (ms, ns, nid, ncos) = match &v.hybrid {
                    None => Default::default(),
                    Some(h) => (
                        format!("{:.6}", h.model_score),
                        format!("{:.6}", h.nn_score),
                        h.nearest
                            .as_ref()
                            .map_or(String::new(), |n| n.doc_id.clone()),
                        h.nearest
                            .as_ref()
                            .map_or(String::new(), |n| format!("{:.6}", n.cosine)),
                    ),
                };
                let (topic, event) = match v.topic {
                    None => (String::new(), String::new()),
                    Some(t) => (
                        t.id.to_string(),
                        t.event.map_or(String::new(), |e| e.to_string()),
                    ),
                };
                writeln!(
                    out,
                    "{},{},{},{},{:.6},{},{},{},{},{ms},{ns},{},{ncos},{topic},{event}",
                    csv_field(&v.doc_id),
                    fmt_time(v.time),
                    v.timestep,
                    csv_field(&v.source),
                    v.score,
                    v.novel,
                    v.bootstrap,
                    v.empty,
                    csv_field(&terms.join(" ")),
                    csv_field(&nid),
                )?;
            }
        }
        Format::Table => {
            let hybrid = vs.iter().any(|v| v.hybrid.is_some());
            writeln!(
                out,
                "{:<24} {:<24} {:>5} {:>8} {:<5} why (top residual terms){}",
                "time",
                "doc_id",
                "step",
                "score",
                "novel",
                if hybrid {
                    "  |  model score, nearest earlier document (cosine)"
                } else {
                    ""
                }
            )?;
            for v in vs {
                let flag = if v.bootstrap {
                    "boot"
                } else if v.empty {
                    "empty"
                } else if v.novel {
                    "NOVEL"
                } else {
                    "-"
                };
                let terms: Vec<&str> = v.terms.iter().take(5).map(|t| t.0.as_str()).collect();
                let id = shown(&v.doc_id.chars().take(24).collect::<String>());
                let near = if hybrid {
                    format!("  |  {}", nearest_cell(v))
                } else {
                    String::new()
                };
                writeln!(
                    out,
                    "{:<24} {:<24} {:>5} {:>8.4} {:<5} {}{near}",
                    fmt_time(v.time),
                    id,
                    v.timestep,
                    v.score,
                    flag,
                    terms.join(" ")
                )?;
            }
            writeln!(out, "{} verdicts", vs.len())?;
        }
    }
    Ok(())
}

/// Print a status summary for people.
pub fn write_status(out: &mut dyn Write, s: &Status) -> std::io::Result<()> {
    writeln!(out, "store format     {}", s.format_version)?;
    writeln!(out, "model            {}", s.model)?;
    match s.daemon_pid {
        Some(p) => writeln!(out, "daemon           running (pid {p})")?,
        None => writeln!(out, "daemon           not running")?,
    }
    if let Some(st) = &s.state {
        writeln!(out, "timesteps        {}", st.timestep)?;
        writeln!(out, "bootstrapped     {}", st.bootstrapped)?;
        writeln!(
            out,
            "vocabulary       {} terms (bound {})",
            st.terms, st.max_terms
        )?;
        writeln!(out, "atoms (k)        {}", st.atoms)?;
        writeln!(out, "documents seen   {}", st.docs_seen)?;
        writeln!(out, "last commit      {}", fmt_time(st.committed_at))?;
    } else {
        writeln!(out, "timesteps        0 (nothing ingested yet)")?;
    }
    writeln!(out, "verdicts         {}", s.verdicts)?;
    writeln!(out, "files            {}", s.files)?;
    if s.disk_bytes > 0 {
        writeln!(
            out,
            "disk             {:.1} MiB",
            s.disk_bytes as f64 / (1 << 20) as f64
        )?;
    }
    crate::alerts::backlog::write(out, &s.webhooks)?;
    if !s.topics.is_empty() {
        writeln!(out, "\nlatest topics (newest first):")?;
        for t in &s.topics {
            let terms: Vec<&str> = t.terms.iter().take(8).map(|x| x.0.as_str()).collect();
            writeln!(
                out,
                "  step {:>4} topic {:>3} {:<8} {:>4} docs  {}",
                t.timestep,
                t.id,
                kind_name(t.kind),
                t.size,
                terms.join(" ")
            )?;
        }
    }
    if !s.recent.is_empty() {
        writeln!(out, "\nrecent timesteps (newest first):")?;
        writeln!(
            out,
            "{:>5} {:<28} {:>6} {:>6} {:>8} {:>9} {:>9} {:>8} {:>7}",
            "step", "file", "docs", "novel", "ceiling", "code_nnz", "atoms", "Â moved", "secs"
        )?;
        for r in &s.recent {
            let st = &r.stats;
            let f = shown(&r.file.chars().take(28).collect::<String>());
            writeln!(
                out,
                "{:>5} {:<28} {:>6} {:>6} {:>8.3} {:>9.2} {:>9} {:>8.4} {:>7.3}",
                r.timestep,
                f,
                st.docs,
                st.novel,
                st.ceiling_fraction,
                st.mean_code_nnz,
                st.atoms_used,
                st.oiadmm.relative_change,
                st.seconds_vectorize + st.seconds_coding + st.seconds_update
            )?;
        }
    }
    Ok(())
}

/// Print topics: one JSON record per line, or a table row per topic (with `members`, each
/// topic's documents below it, as `novad topics --event` lists an event's).
pub fn write_topics(
    out: &mut dyn Write,
    topics: &[TopicRecord],
    format: crate::cli::TopicFormat,
    members: bool,
) -> std::io::Result<()> {
    match format {
        crate::cli::TopicFormat::Jsonl => {
            for t in topics {
                writeln!(
                    out,
                    "{}",
                    serde_json::to_string(t).map_err(std::io::Error::other)?
                )?;
            }
        }
        crate::cli::TopicFormat::Table => {
            for t in topics {
                let terms: Vec<&str> = t.terms.iter().map(|x| x.0.as_str()).collect();
                let event = t.event.map_or("-".to_string(), |e| e.to_string());
                writeln!(
                    out,
                    "step {:>4} topic {:>3} event {:>5} {:<10} {:>5} docs  strength {:.3}  score {:.3}  {}",
                    t.timestep,
                    t.id,
                    event,
                    kind_name(t.kind),
                    t.size,
                    t.strength,
                    t.mean_score,
                    terms.join(" ")
                )?;
                if members {
                    match &t.members {
                        Some(m) => {
                            for d in m {
                                writeln!(out, "    {}", shown(d))?;
                            }
                        }
                        None => writeln!(
                            out,
                            "    (members not recorded: {})",
                            shown(&t.docs.join(" "))
                        )?,
                    }
                }
            }
            writeln!(out, "{} topics", topics.len())?;
        }
    }
    Ok(())
}

/// Display name of a topic kind.
pub fn kind_name(k: novad_models::TopicKind) -> &'static str {
    match k {
        novad_models::TopicKind::Emerging => "emerging",
        novad_models::TopicKind::Evolving => "evolving",
        novad_models::TopicKind::Continuing => "continuing",
    }
}

pub use crate::store::schema::ScoreQuantiles;

/// One timestep as a timeline shows it: its stored record (diagnostics) and a summary of
/// those of its documents whose time lies in the queried range.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimestepSummary {
    pub record: TimestepRecord,
    /// Documents of the timestep in the range, and how many of them are novel.
    pub docs: usize,
    pub novel: usize,
    /// Earliest and latest document time in the range (Unix ms); `None` when it has none.
    pub first_time: Option<i64>,
    pub last_time: Option<i64>,
    /// Quantiles of the scores of its scored documents (not empty, not bootstrap) in range.
    pub scores: Option<ScoreQuantiles>,
}

impl TimestepSummary {
    fn new(record: TimestepRecord, s: StepSummary) -> TimestepSummary {
        TimestepSummary {
            record,
            docs: s.docs as usize,
            novel: s.novel as usize,
            first_time: s.first_time,
            last_time: s.last_time,
            scores: s.scores,
        }
    }
}

/// Timesteps in timestep order. Without a time bound every committed timestep is returned,
/// read from the summaries stored with each commit (one timestep record and one summary per
/// timestep, no verdict: the cost grows with the timesteps, not the documents); with a bound,
/// those having at least one document with time in [since, until), summarized from exactly
/// those documents ([`timesteps_scanned`]). Both give the answer [`timesteps_scanned`] gives.
pub fn timesteps(
    db: &sled::Db,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<Vec<TimestepSummary>, String> {
    if since.is_none() && until.is_none() {
        timesteps_summarized(db)
    } else {
        timesteps_scanned(db, since, until)
    }
}

/// Every committed timestep with its stored [`StepSummary`]. A timestep record without a
/// summary is an error naming it, unless it is the newest one: the trees are read outside the
/// commit's transaction, so that timestep's commit is still being applied and it is left out
/// (as it would be had the query come a moment earlier).
fn timesteps_summarized(db: &sled::Db) -> Result<Vec<TimestepSummary>, String> {
    let tree = db.open_tree(TIMESTEPS).map_err(|e| e.to_string())?;
    let sums = db.open_tree(SUMMARIES).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut iter = tree.iter().peekable();
    while let Some(kv) = iter.next() {
        let (k, v) = kv.map_err(|e| e.to_string())?;
        let record: TimestepRecord =
            postcard::from_bytes(&v).map_err(|e| format!("corrupt timestep record: {e}"))?;
        let summary: StepSummary = match sums.get(&k).map_err(|e| e.to_string())? {
            Some(s) => postcard::from_bytes(&s)
                .map_err(|e| format!("corrupt summary of timestep {}: {e}", record.timestep))?,
            None if iter.peek().is_none() => break,
            None => {
                return Err(format!(
                    "timestep {} has no summary in the store (`novad check` lists what is wrong)",
                    record.timestep
                ))
            }
        };
        out.push(TimestepSummary::new(record, summary));
    }
    Ok(out)
}

/// The timeline computed from the verdicts alone: every verdict with time in
/// [since, until) is read (every verdict when both are `None`) and summarized per timestep
/// ([`SummaryBuilder`]). Unbounded, every committed timestep is returned (with the empty
/// summary when it has no documents); bounded, those having at least one document in range.
/// [`timesteps`] answers a bounded range with it.
pub fn timesteps_scanned(
    db: &sled::Db,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<Vec<TimestepSummary>, String> {
    let mut acc: std::collections::BTreeMap<u64, SummaryBuilder> = Default::default();
    let all = VerdictFilter {
        since,
        until,
        ..Default::default()
    };
    visit_verdicts(db, &all, |v| {
        acc.entry(v.timestep).or_default().add(&v);
        Ok::<(), QueryError>(())
    })
    .map_err(|e| e.to_string())?;
    let bounded = since.is_some() || until.is_some();
    let tree = db.open_tree(TIMESTEPS).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for kv in tree.iter() {
        let (_, v) = kv.map_err(|e| e.to_string())?;
        let record: TimestepRecord =
            postcard::from_bytes(&v).map_err(|e| format!("corrupt timestep record: {e}"))?;
        let a = match acc.remove(&record.timestep) {
            Some(a) => a,
            None if bounded => continue,
            None => SummaryBuilder::default(),
        };
        out.push(TimestepSummary::new(record, a.finish()));
    }
    Ok(out)
}

/// One page of verdicts: a filter, a text search, an order and a cursor.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PageRequest {
    /// Time range and filters; `limit` is the page size.
    pub filter: VerdictFilter,
    /// Case-insensitive substring of the document id or of one of its why-novel terms.
    pub text: Option<String>,
    pub newest_first: bool,
    /// Continue after this verdict key (the previous page's `next`).
    pub after: Option<Vec<u8>>,
}

/// A page of verdicts with their keys; `next` is the cursor of the following page, `None` on
/// the last one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    pub items: Vec<(Vec<u8>, VerdictRecord)>,
    pub next: Option<Vec<u8>>,
}

/// The verdicts of `req`, at most `req.filter.limit` (default 100), in time order (or newest
/// first). Every verdict of the range that matches is on exactly one page when the cursor is
/// followed.
pub fn verdict_page(db: &sled::Db, req: &PageRequest) -> Result<Page, String> {
    let tree = db.open_tree(VERDICTS).map_err(|e| e.to_string())?;
    let f = &req.filter;
    let mut lo = f.since.map(verdict_time_prefix).unwrap_or([0; 8]).to_vec();
    let mut hi = f.until.map(|u| verdict_time_prefix(u).to_vec());
    if let Some(after) = &req.after {
        if req.newest_first {
            if hi.as_ref().is_none_or(|h| after < h) {
                hi = Some(after.clone());
            }
        } else {
            // the smallest key greater than `after`
            let mut next = after.clone();
            next.push(0);
            lo = lo.max(next);
        }
    }
    type Kv = sled::Result<(sled::IVec, sled::IVec)>;
    let iter: Box<dyn DoubleEndedIterator<Item = Kv>> = match hi {
        Some(h) if h <= lo => Box::new(std::iter::empty()),
        Some(h) => Box::new(tree.range(lo..h)),
        None => Box::new(tree.range(lo..)),
    };
    let iter: Box<dyn Iterator<Item = Kv>> = if req.newest_first {
        Box::new(iter.rev())
    } else {
        iter
    };
    let limit = f.limit.unwrap_or(100).max(1);
    let needle = req.text.as_deref().map(str::to_lowercase);
    let mut page = Page::default();
    for kv in iter {
        let (k, v) = kv.map_err(|e| e.to_string())?;
        let v: VerdictRecord =
            postcard::from_bytes(&v).map_err(|e| format!("corrupt verdict: {e}"))?;
        if !f.matches(&v) || !needle.as_deref().is_none_or(|n| text_matches(&v, n)) {
            continue;
        }
        if page.items.len() == limit {
            page.next = page.items.last().map(|(k, _)| k.clone());
            break;
        }
        page.items.push((k.to_vec(), v));
    }
    Ok(page)
}

fn text_matches(v: &VerdictRecord, needle: &str) -> bool {
    v.doc_id.to_lowercase().contains(needle)
        || v.terms
            .iter()
            .any(|(t, _)| t.to_lowercase().contains(needle))
}

/// The verdict stored under `key`, if any.
pub fn verdict_by_key(db: &sled::Db, key: &[u8]) -> Result<Option<VerdictRecord>, String> {
    let tree = db.open_tree(VERDICTS).map_err(|e| e.to_string())?;
    match tree.get(key).map_err(|e| e.to_string())? {
        None => Ok(None),
        Some(v) => postcard::from_bytes(&v)
            .map(Some)
            .map_err(|e| format!("corrupt verdict: {e}")),
    }
}

/// The record of one timestep and the topics found in it.
pub fn timestep_detail(
    db: &sled::Db,
    timestep: u64,
) -> Result<
    (
        Option<TimestepRecord>,
        Vec<crate::store::schema::TopicRecord>,
    ),
    String,
> {
    let e = |e: sled::Error| e.to_string();
    let ts = db.open_tree(TIMESTEPS).map_err(e)?;
    let record = match ts.get(crate::store::schema::u64_key(timestep)).map_err(e)? {
        None => None,
        Some(v) => {
            Some(postcard::from_bytes(&v).map_err(|e| format!("corrupt timestep record: {e}"))?)
        }
    };
    let tt = db.open_tree(crate::store::schema::TOPICS).map_err(e)?;
    let mut topics = Vec::new();
    for kv in tt.scan_prefix(crate::store::schema::u64_key(timestep)) {
        let (_, v) = kv.map_err(e)?;
        topics.push(postcard::from_bytes(&v).map_err(|e| format!("corrupt topic: {e}"))?);
    }
    Ok((record, topics))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, source: &str) -> VerdictRecord {
        VerdictRecord {
            doc_id: id.into(),
            time: 0,
            timestep: 1,
            seq: 0,
            source: source.into(),
            score: 0.9,
            novel: true,
            bootstrap: false,
            empty: false,
            at_ceiling: false,
            terms: vec![("lava".into(), 0.5)],
            hybrid: None,
            topic: None,
        }
    }

    fn written(vs: &[VerdictRecord], f: Format) -> String {
        let mut out = Vec::new();
        write_verdicts(&mut out, vs, f).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// A cell a spreadsheet would run as a formula is written as text; other cells as they
    /// are.
    #[test]
    fn csv_cells_never_start_a_formula() {
        for (id, cell) in [
            ("=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"),
            ("+1+1", "'+1+1"),
            ("-2", "'-2"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("=1,2", "\"'=1,2\""),
            ("plain-id", "plain-id"),
        ] {
            let csv = written(&[record(id, "b.jsonl")], Format::Csv);
            let row = csv.lines().nth(1).unwrap();
            assert!(row.starts_with(&format!("{cell},")), "{id}: {row}");
        }
    }

    /// Escape sequences, bells and line breaks in ids and file names are shown escaped: the
    /// table keeps one line per verdict and no control character reaches the terminal.
    #[test]
    fn tables_show_control_characters_escaped() {
        let evil = "\u{1b}]0;owned\u{7}x\ny\rz";
        let table = written(&[record(evil, "b.jsonl")], Format::Table);
        assert_eq!(table.lines().count(), 3, "{table:?}");
        assert!(
            !table.chars().any(|c| c.is_control() && c != '\n'),
            "{table:?}"
        );
        assert!(table.contains("\\u{1b}]0;owned"), "{table:?}");
        assert_eq!(shown("plain"), "plain");
        assert_eq!(shown("a\tb"), "a\\tb");
    }
}
