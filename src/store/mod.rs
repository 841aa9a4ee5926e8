//! The sled store: model state, verdict log, ingested files, per-timestep records.
//!
//! Durability invariants (SPEC §2):
//! - every timestep is **one** sled transaction over all trees (state chunks, verdicts, file
//!   record, timestep record, timestep summary), so after a crash the store holds either all of
//!   a timestep or none of it;
//! - the caller flushes ([`Store::flush`]) before it moves the batch file, so a file is only
//!   moved once its timestep is durable; a file found in the inbox whose content hash is already
//!   in `files` was committed before a crash and is only moved, never re-applied;
//! - transaction closures do no I/O and only apply a precomputed write plan, so sled may rerun
//!   them freely;
//! - the state is written as chunks of a few KiB and only changed chunks are rewritten
//!   (sled does not reclaim large values well).

pub mod check;
mod commit;
pub mod durable;
pub mod guard;
pub mod migrate;
pub mod rebuild;
pub mod retry;
pub use novad_migrations::schema;
pub mod sidecar;
pub mod snapshot;
mod state;
pub mod topics;

pub use commit::Prepared;
use state::chunk_key;
pub use state::state_digest_of;

use std::collections::{BTreeMap, HashSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use thiserror::Error;

use novad_models::memory::PartsDelta;
use novad_models::Params;
use novad_models::{Engine, ModelParams, INCREMENTAL_PREFIX};
use novad_models::{EngineError, ModelKind};
use schema::*;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("store {dir} is in use by another process{pid} (sled's lock is held); stop it or use another --store")]
    Locked { dir: String, pid: String },
    #[error("store {dir} was written by a newer novad (store format {found}); this novad reads format {supported} — upgrade novad")]
    Newer {
        dir: String,
        found: u32,
        supported: u32,
    },
    #[error("store {dir} has format {found} and no migration leads from it to format {supported}")]
    NoMigration {
        dir: String,
        found: u32,
        supported: u32,
    },
    #[error("store {dir}: migration {name} failed: {msg} (a backup was written to {backup})")]
    Migration {
        dir: String,
        name: String,
        msg: String,
        backup: String,
    },
    #[error("store {dir}: {source}")]
    Sled {
        dir: String,
        #[source]
        source: sled::Error,
    },
    #[error("store {dir}: {what}: {source}")]
    Io {
        dir: String,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("store {dir}: corrupt {what}: {msg}")]
    Corrupt {
        dir: String,
        what: String,
        msg: String,
    },
    #[error("store {dir}: the model state is inconsistent: {source}")]
    Model {
        dir: String,
        #[source]
        source: EngineError,
    },
    #[error("store {dir} was created with different parameters; refusing to change {fields} (parameters are fixed when a store is created)")]
    Conflict { dir: String, fields: String },
    #[error("store {dir} is not empty; import needs a new store directory")]
    NotEmpty { dir: String },
    #[error("snapshot {path}: {msg}")]
    Snapshot { path: String, msg: String },
    /// The store cannot be trusted: sled reports or shows damage, or the store holds less than
    /// was committed. The message names the way out (`novad rebuild`).
    #[error("{}", guard::damaged_message(dir, detail))]
    Damaged { dir: String, detail: String },
    /// A commit handed to the committer thread failed: nothing more is committed through this
    /// handle (reopening the store resumes from its last durable timestep).
    #[error("store {dir}: a timestep's commit failed ({msg}); nothing more is committed until the store is reopened, which resumes from its last durable timestep")]
    Failed { dir: String, msg: String },
}

impl StoreError {
    /// Whether this error says the store is damaged (and must be rebuilt).
    pub fn is_damaged(&self) -> bool {
        matches!(self, StoreError::Damaged { .. })
    }
}

/// How long [`Store::open`] waits for another process to release the store's lock.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A sled error on the store in `dir`: damage reported by sled becomes
/// [`StoreError::Damaged`], anything else [`StoreError::Sled`].
pub fn sled_error(dir: &Path, source: sled::Error) -> StoreError {
    match source {
        sled::Error::Corruption { .. } | sled::Error::ReportableBug(_) => StoreError::Damaged {
            dir: dir.display().to_string(),
            detail: format!("sled: {source}"),
        },
        source => StoreError::Sled {
            dir: dir.display().to_string(),
            source,
        },
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Records committed with one timestep besides the model state.
#[derive(Debug, Clone)]
pub struct TimestepWrite {
    pub verdicts: Vec<VerdictRecord>,
    /// blake3 of the batch file's content.
    pub hash: [u8; 32],
    pub file: FileRecord,
    pub record: TimestepRecord,
    /// Extra (key, value) pairs for the `topics` tree.
    pub topics: Vec<(Vec<u8>, Vec<u8>)>,
    /// Name of the file whose progress (`meta/progress\0<name>` → `hash`) this timestep
    /// records; `None` for an in-memory batch.
    pub progress: Option<String>,
}

/// What a commit wrote.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommitStats {
    /// Keys + values inserted.
    pub bytes: u64,
    pub inserts: usize,
    pub removes: usize,
}

/// A state chunk: (index in [`ALL_TREES`], key).
pub(crate) type ChunkKey = (usize, Vec<u8>);

/// A write of one commit: (tree index, key, new value or `None` to remove).
type Op = (usize, Vec<u8>, Option<Vec<u8>>);

/// An open store. Holds sled's exclusive lock on the directory until dropped.
pub struct Store {
    dir: PathBuf,
    db: sled::Db,
    trees: Vec<sled::Tree>,
    /// blake3 of every state chunk as committed, by (tree index, key).
    cache: BTreeMap<(usize, Vec<u8>), blake3::Hash>,
    /// Journal lines and sidecar of commits not yet flushed (written by [`Store::flush`]).
    pending: Vec<sidecar::JournalLine>,
    pending_sidecar: Option<sidecar::Committed>,
    /// The committer thread and the commit it applies, if any ([`Store::commit_later`]).
    later: commit::Later,
    /// Progress entries to clear once the commit in flight has settled
    /// ([`Store::forget_progress`]).
    forgets: Vec<(String, [u8; 32])>,
    /// The outbox records each timestep's commit writes ([`Store::set_outbox`]).
    outbox: Option<OutboxFn>,
    /// The durable timesteps, published after every flush.
    durable: std::sync::Arc<durable::Durable>,
}

/// What a timestep adds to the [`OUTBOX`] tree, worked out from its write: (key, value) pairs
/// written in its transaction.
pub type OutboxFn = Box<dyn Fn(&TimestepWrite) -> Vec<(Vec<u8>, Vec<u8>)> + Send>;

fn pid_path(dir: &Path) -> PathBuf {
    dir.join("novad.pid")
}

impl Store {
    /// Open (or create) the store in `dir`, migrating an older format (after writing a
    /// backup snapshot next to it) and refusing a newer one.
    ///
    /// Guarantees: waits up to [`LOCK_WAIT`] for another process to release the store;
    /// removes a snapshot sled left half-written (`db/snap.*.generating`, e.g. on a full disk);
    /// never panics on a damaged `db` (see [`guard`]); refuses with [`StoreError::Damaged`] a
    /// store that holds fewer timesteps than `committed.json` says were committed.
    pub fn open(dir: &Path) -> Result<Store> {
        Store::open_waiting(dir, LOCK_WAIT)
    }

    /// [`Store::open`], waiting at most `lock_wait` (zero: one try) for another process to
    /// release the store before failing with [`StoreError::Locked`].
    pub fn open_waiting(dir: &Path, lock_wait: std::time::Duration) -> Result<Store> {
        let d = dir.display().to_string();
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            dir: d.clone(),
            what: "cannot create the directory".into(),
            source,
        })?;
        check::remove_stale_snapshots(dir);
        let db = open_db_waiting(dir, lock_wait)?;
        let _ = std::fs::write(pid_path(dir), std::process::id().to_string());
        let mut store = Store {
            dir: dir.to_path_buf(),
            trees: Vec::new(),
            cache: BTreeMap::new(),
            pending: Vec::new(),
            pending_sidecar: None,
            later: commit::Later::default(),
            forgets: Default::default(),
            outbox: None,
            durable: std::sync::Arc::new(durable::Durable::new(0)),
            db,
        };
        guard::watched(dir, "checking what the store holds", || {
            check::refuse_if_behind(&store)
        })??;
        guard::watched(dir, "migrating the store", || {
            migrate::bring_up_to_date(&store)
        })??;
        store.trees = guard::watched(dir, "opening the trees", || {
            ALL_TREES
                .iter()
                .map(|n| store.db.open_tree(n))
                .collect::<std::result::Result<Vec<_>, _>>()
        })?
        .map_err(|e| store.sled(e))?;
        // whatever the store holds at open is durable
        let held = match store.tree(TIMESTEPS).last().map_err(|e| store.sled(e))? {
            Some((k, _)) if k.len() == 8 => u64::from_be_bytes(k[..].try_into().unwrap()) + 1,
            _ => 0,
        };
        store.durable.publish(held);
        Ok(store)
    }

    /// Every later commit also writes what `f` makes of its timestep into the [`OUTBOX`]
    /// tree, in the same transaction.
    pub fn set_outbox(&mut self, f: OutboxFn) {
        self.outbox = Some(f);
    }

    /// The count of durable timesteps, and its waiters.
    pub fn durable(&self) -> std::sync::Arc<durable::Durable> {
        std::sync::Arc::clone(&self.durable)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn db(&self) -> &sled::Db {
        &self.db
    }
    pub(crate) fn dir_string(&self) -> String {
        self.dir.display().to_string()
    }
    pub(crate) fn sled(&self, source: sled::Error) -> StoreError {
        sled_error(&self.dir, source)
    }
    fn corrupt(&self, what: &str, msg: impl ToString) -> StoreError {
        StoreError::Corrupt {
            dir: self.dir_string(),
            what: what.into(),
            msg: msg.to_string(),
        }
    }
    /// A tree of the current format by name.
    pub fn tree(&self, name: &str) -> &sled::Tree {
        let i = ALL_TREES
            .iter()
            .position(|n| *n == name)
            .expect("known tree");
        &self.trees[i]
    }

    /// The stored format version (None for a store never written to).
    pub fn format_version(db: &sled::Db) -> std::result::Result<Option<u32>, String> {
        let meta = db.open_tree(META).map_err(|e| e.to_string())?;
        match meta.get(KEY_FORMAT).map_err(|e| e.to_string())? {
            None => Ok(None),
            Some(v) => postcard::from_bytes(&v)
                .map(Some)
                .map_err(|e| e.to_string()),
        }
    }

    /// The model kind the store was created for (ℓ1 for a store from before format 3 or a new
    /// store).
    pub fn kind(&self) -> Result<ModelKind> {
        match self.tree(META).get(KEY_MODEL).map_err(|e| self.sled(e))? {
            None => Ok(ModelKind::L1),
            Some(v) => postcard::from_bytes(&v).map_err(|e| self.corrupt("model kind", e)),
        }
    }

    /// The parameters the store was created with (None for a new store).
    pub fn model_params(&self) -> Result<Option<ModelParams>> {
        let kind = self.kind()?;
        match self.tree(META).get(KEY_PARAMS).map_err(|e| self.sled(e))? {
            None => Ok(None),
            Some(v) => ModelParams::from_bytes(kind, &v)
                .map(Some)
                .map_err(|e| self.corrupt("parameters", e)),
        }
    }

    /// Open the model: the stored one, or a new one from `requested` (or the ℓ1 defaults) for
    /// a new store. When `requested` is given for an existing store, it must be of the same
    /// kind and equal the stored parameters; the differing fields are named otherwise.
    ///
    /// Guarantees: the state is loaded under [`guard::watched`]; when `committed.json` records
    /// as many timesteps as the store holds, the loaded state's digest must equal the recorded
    /// one ([`StoreError::Damaged`] otherwise); when the store is ahead of it (the crash window
    /// after a flush), the sidecar and journal are brought up to date.
    pub fn engine(&mut self, requested: Option<&ModelParams>) -> Result<Engine> {
        let dir = self.dir.clone();
        let engine = guard::watched(&dir, "loading the model state", || {
            self.engine_unchecked(requested)
        })??;
        check::verify_committed(self, &engine)?;
        Ok(engine)
    }

    fn engine_unchecked(&mut self, requested: Option<&ModelParams>) -> Result<Engine> {
        match self.model_params()? {
            Some(stored) => {
                if let Some(req) = requested {
                    if req.kind() != stored.kind() {
                        return Err(StoreError::Conflict {
                            dir: self.dir_string(),
                            fields: format!(
                                "model (store: {}, requested: {})",
                                stored.kind(),
                                req.kind()
                            ),
                        });
                    }
                    let diff = json_diff(&stored.to_json(), &req.to_json());
                    if !diff.is_empty() {
                        return Err(StoreError::Conflict {
                            dir: self.dir_string(),
                            fields: diff.join(", "),
                        });
                    }
                }
                self.load_engine(stored)
            }
            None => {
                let params = match requested {
                    Some(p) => p.clone(),
                    None => ModelParams::L1(Params::default()),
                };
                let engine = Engine::new(params.clone()).map_err(|e| StoreError::Model {
                    dir: self.dir_string(),
                    source: e.into(),
                })?;
                let meta = self.tree(META).clone();
                // params and kind in one batch: a crash leaves both or neither
                let mut b = sled::Batch::default();
                b.insert(KEY_MODEL, postcard::to_stdvec(&params.kind()).unwrap());
                b.insert(KEY_PARAMS, params.to_bytes());
                meta.apply_batch(b).map_err(|e| self.sled(e))?;
                self.flush()?;
                check::start_journal(self, &params)?;
                Ok(engine)
            }
        }
    }

    fn state_meta(&self) -> Result<Option<StateMeta>> {
        match self.tree(META).get(KEY_STATE).map_err(|e| self.sled(e))? {
            None => Ok(None),
            Some(v) => Ok(Some(
                postcard::from_bytes(&v).map_err(|e| self.corrupt("state", e))?,
            )),
        }
    }

    /// Load the model from the `parts` tree (a new one when no timestep was committed). The
    /// same for every model kind: the store only sees named parts.
    fn load_engine(&mut self, params: ModelParams) -> Result<Engine> {
        let model_err = |store: &Store, source: EngineError| StoreError::Model {
            dir: store.dir_string(),
            source,
        };
        if self.state_meta()?.is_none() {
            return Engine::new(params).map_err(|e| model_err(self, e.into()));
        }
        let mut cache = BTreeMap::new();
        let mut chunks = Vec::new();
        for kv in self.tree(PARTS).iter() {
            let (k, v) = kv.map_err(|e| self.sled(e))?;
            cache.insert((PARTS_TREE, k.to_vec()), blake3::hash(&v));
            chunks.push((k.to_vec(), v.to_vec()));
        }
        let parts =
            parts_from_chunks(chunks.into_iter()).map_err(|e| self.corrupt("model state", e))?;
        let model = Engine::from_state_parts(params, &parts).map_err(|e| model_err(self, e))?;
        let meta = self.tree(META).clone();
        for key in [KEY_PARAMS, KEY_STATE, KEY_MODEL] {
            if let Some(v) = meta.get(key).map_err(|e| self.sled(e))? {
                cache.insert((0, key.to_vec()), blake3::hash(&v));
            }
        }
        self.cache = cache;
        Ok(model)
    }

    /// The content-hash record of a committed batch file, if any.
    pub fn file_record(&self, hash: &[u8; 32]) -> Result<Option<FileRecord>> {
        match self.tree(FILES).get(hash).map_err(|e| self.sled(e))? {
            None => Ok(None),
            Some(v) => postcard::from_bytes(&v)
                .map(Some)
                .map_err(|e| self.corrupt("file record", e)),
        }
    }

    /// The `files` key of the last timestep that consumed part of a file named `name`.
    pub fn progress(&self, name: &str) -> Result<Option<[u8; 32]>> {
        match self
            .tree(META)
            .get(progress_key(name))
            .map_err(|e| self.sled(e))?
        {
            None => Ok(None),
            Some(v) => <[u8; 32]>::try_from(v.as_ref())
                .map(Some)
                .map_err(|_| self.corrupt("file progress", format!("{} bytes", v.len()))),
        }
    }

    /// Drop the progress entry of `name` if it still is `hash` (the file was moved out of the
    /// inbox). Losing this write is harmless: an entry only applies to the file it was
    /// written for (same device, inode and content). While a commit is in flight the entry is
    /// dropped once that commit has settled ([`Store::settle`]): a write now would wait for
    /// the committer's transaction (9–15 ms in three of eight backlog steps of a probed
    /// cluster leader).
    /// Either way it is durable with the next flush, as any write outside a commit.
    pub fn forget_progress(&mut self, name: &str, hash: &[u8; 32]) -> Result<()> {
        if self.in_flight() {
            self.forgets.push((name.to_string(), *hash));
            return Ok(());
        }
        self.clear_progress(name, hash)
    }

    /// Clear the progress entries [`Self::forget_progress`] left for after the commit in
    /// flight (none must be in flight now).
    fn forget_queued(&mut self) -> Result<()> {
        for (name, hash) in std::mem::take(&mut self.forgets) {
            self.clear_progress(&name, &hash)?;
        }
        Ok(())
    }

    fn clear_progress(&self, name: &str, hash: &[u8; 32]) -> Result<()> {
        let _ = self
            .tree(META)
            .compare_and_swap(progress_key(name), Some(&hash[..]), None as Option<&[u8]>)
            .map_err(|e| self.sled(e))?;
        Ok(())
    }

    /// The verdict stored under (time, timestep, seq), if any.
    pub fn verdict_at(&self, time: i64, timestep: u64, seq: u32) -> Result<Option<VerdictRecord>> {
        let key = verdict_key(time, timestep, seq);
        match self.tree(VERDICTS).get(key).map_err(|e| self.sled(e))? {
            None => Ok(None),
            Some(v) => postcard::from_bytes(&v)
                .map(Some)
                .map_err(|e| self.corrupt("verdict", e)),
        }
    }

    /// The write operations that turn the stored state into `state` (every chunk given in
    /// full) plus `incremental` (changes to the chunks under [`INCREMENTAL_PREFIX`], which are
    /// otherwise kept), and the cache changes they make. Unchanged chunks are not written.
    fn state_ops(
        &self,
        state: Vec<(ChunkKey, Vec<u8>)>,
        incremental: Option<&PartsDelta>,
    ) -> (Vec<Op>, Vec<(ChunkKey, Option<blake3::Hash>)>) {
        let mut ops: Vec<Op> = Vec::new();
        let mut changes = Vec::new();
        let mut seen: HashSet<ChunkKey> = HashSet::with_capacity(state.len());
        for (key, bytes) in state {
            let h = blake3::hash(&bytes);
            if self.cache.get(&key) != Some(&h) {
                ops.push((key.0, key.1.clone(), Some(bytes)));
                changes.push((key.clone(), Some(h)));
            }
            seen.insert(key);
        }
        // every cached chunk the state no longer has, except (with a delta) the chunks under
        // the incremental prefix, which the delta changes: the cache is ordered, so those are
        // one key range, skipped without visiting it
        let mut removed: Vec<&ChunkKey> = match incremental {
            None => self.cache.keys().filter(|k| !seen.contains(*k)).collect(),
            Some(_) => {
                let (lo, hi) = incremental_range();
                self.cache
                    .range(..lo)
                    .chain(self.cache.range(hi..))
                    .map(|(k, _)| k)
                    .filter(|k| !seen.contains(*k))
                    .collect()
            }
        };
        if let Some(d) = incremental {
            for (k, bytes) in part_chunks(&d.put) {
                let key = (PARTS_TREE, k);
                let h = blake3::hash(&bytes);
                if self.cache.get(&key) != Some(&h) {
                    ops.push((key.0, key.1.clone(), Some(bytes)));
                    changes.push((key, Some(h)));
                }
            }
            // chunks past a rewritten part's new end, and every chunk of a deleted part
            let put = d
                .put
                .iter()
                .map(|(n, b)| (n, b.len().div_ceil(PART_CHUNK_BYTES).max(1)));
            let gone = d.delete.iter().map(|n| (n, 0));
            for (name, from) in put.chain(gone) {
                let mut i = from as u32;
                while let Some((k, _)) = self.cache.get_key_value(&chunk_key(name, i)) {
                    removed.push(k);
                    i += 1;
                }
            }
        }
        removed.sort();
        removed.dedup();
        for k in removed {
            ops.push((k.0, k.1.clone(), None));
            changes.push((k.clone(), None));
        }
        (ops, changes)
    }

    /// Make every committed transaction durable, then record it outside sled: the journal
    /// lines of the flushed commits are appended and `committed.json` is replaced (in that
    /// order, both only after sled's flush succeeded, so neither is ever ahead of sled).
    /// Returns bytes flushed by sled.
    pub fn flush(&mut self) -> Result<usize> {
        let dir = self.dir.clone();
        let n = guard::watched(&dir, "flushing", || self.db.flush())?.map_err(|e| self.sled(e))?;
        self.write_sidecars()?;
        Ok(n)
    }

    /// Record the commits sled has flushed outside sled: append their journal lines, then
    /// replace `committed.json`.
    fn write_sidecars(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            sidecar::append(&self.dir, &self.pending)?;
            self.pending.clear();
        }
        if let Some(c) = &self.pending_sidecar {
            sidecar::write(&self.dir, c)?;
            self.durable.publish(c.timesteps);
            self.pending_sidecar = None;
        }
        Ok(())
    }

    /// blake3 over the committed model state: every state chunk's (tree, key, blake3 of the
    /// value) in key order, as loaded or last committed. Equal digests mean equal stored
    /// state; [`check`] recomputes it from the trees.
    pub fn state_digest(&self) -> String {
        state_digest_of(self.cache.iter().map(|(k, h)| (k.0, k.1.as_slice(), *h)))
    }

    /// Bytes the store occupies on disk (all files under its directory).
    pub fn disk_bytes(&self) -> u64 {
        dir_size(&self.dir)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.settle();
        let _ = self.flush();
        let _ = std::fs::remove_file(pid_path(&self.dir));
    }
}

/// The `meta` key of a file name's ingest progress.
/// The cache keys of the chunks under [`INCREMENTAL_PREFIX`]: exactly the keys `k` with
/// `lo <= k < hi` (the prefix, then the prefix with its last byte incremented).
fn incremental_range() -> (ChunkKey, ChunkKey) {
    let lo = INCREMENTAL_PREFIX.as_bytes().to_vec();
    let mut hi = lo.clone();
    let last = hi.last_mut().expect("a non-empty prefix");
    *last += 1;
    ((PARTS_TREE, lo), (PARTS_TREE, hi))
}

fn progress_key(name: &str) -> Vec<u8> {
    let mut k = KEY_PROGRESS.to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

/// Open sled in `dir/db`, waiting up to `lock_wait` for another process's lock; a panic or
/// corruption report becomes [`StoreError::Damaged`].
fn open_db_waiting(dir: &Path, lock_wait: std::time::Duration) -> Result<sled::Db> {
    let d = dir.display().to_string();
    let t = std::time::Instant::now();
    loop {
        // No background flusher: every commit is flushed explicitly, and without the thread a
        // dropped Db releases its lock at once.
        let res = guard::watched(dir, "opening the sled database", || {
            sled::Config::new()
                .path(dir.join("db"))
                .flush_every_ms(None)
                .open()
        })?;
        match res {
            Ok(db) => return Ok(db),
            Err(sled::Error::Io(e))
                if e.kind() == ErrorKind::WouldBlock || e.to_string().contains("lock") =>
            {
                if t.elapsed() < lock_wait {
                    std::thread::sleep(std::time::Duration::from_millis(50).min(lock_wait));
                    continue;
                }
                let pid = std::fs::read_to_string(pid_path(dir))
                    .ok()
                    .map(|p| format!(" (novad pid {})", p.trim()))
                    .unwrap_or_default();
                return Err(StoreError::Locked { dir: d, pid });
            }
            Err(source) => return Err(sled_error(dir, source)),
        }
    }
}

/// Total size of the regular files under `dir`.
pub fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if let Ok(md) = e.metadata() {
                if md.is_dir() {
                    total += dir_size(&e.path());
                } else {
                    total += md.len();
                }
            }
        }
    }
    total
}

/// Dotted names of the parameter fields that differ between `a` and `b`.
pub fn param_diff(a: &Params, b: &Params) -> Vec<String> {
    json_diff(
        &serde_json::to_value(a).unwrap(),
        &serde_json::to_value(b).unwrap(),
    )
}

/// Dotted names of the fields that differ between two JSON images of a parameter set.
pub fn json_diff(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    fn walk(prefix: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value::Object;
        match (a, b) {
            (Object(x), Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    let n = serde_json::Value::Null;
                    walk(&p, x.get(k).unwrap_or(&n), y.get(k).unwrap_or(&n), out);
                }
            }
            _ if a != b => out.push(format!("{prefix} (store: {a}, requested: {b})")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", a, b, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_incremental_range_holds_exactly_the_keys_under_the_prefix() {
        let (lo, hi) = incremental_range();
        let p = INCREMENTAL_PREFIX.as_bytes();
        let mut keys: Vec<ChunkKey> = Vec::new();
        for name in [
            "memory/doc/",
            "memory/doc/00000000",
            "memory/doc/ffffffff",
            "memory/doc0",
            "memory/doc.",
            "memory/do",
            "memory/meta",
            "hybrid/meta",
            "vocab",
        ] {
            for i in [0, 7] {
                keys.push(chunk_key(name, i));
                keys.push((0, chunk_key(name, i).1));
            }
        }
        let mut with_tail = p.to_vec();
        with_tail.extend([0xff, 0xff]);
        keys.push((PARTS_TREE, with_tail));
        for k in &keys {
            let under = k.0 == PARTS_TREE && k.1.starts_with(p);
            assert_eq!(
                *k >= lo && *k < hi,
                under,
                "{:?}",
                String::from_utf8_lossy(&k.1)
            );
        }
        assert!(keys.iter().filter(|k| *k >= &lo && *k < &hi).count() >= 5);
    }
}
