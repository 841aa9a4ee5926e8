//! `novad rebuild`: a new store from the processed batch files, replayed in their recorded
//! order. The model is deterministic, so the processed files plus the order they were
//! committed in are a full backup of the store.
//!
//! The order (and the model's parameters) come from the old store's `timesteps` tree when
//! the old store opens, else from its `journal.jsonl` ([`super::sidecar`]), which is written
//! outside sled after every flush for exactly this case. Every timestep's input is found by
//! its content hash among the files of `--from` (a name clash in `processed/` gives a file a
//! `.1` suffix, so names alone are not trusted), turned into bytes by [`timestep_input`], and
//! ingested through the same code path as the daemon with the original commit time (the
//! time documents without one receive), so the rebuilt store equals the old one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::sidecar::{self, JournalEntry};
use super::{check, Store, StoreError};
use crate::ingest::{IngestError, Ingestor, Outcome};
use novad_models::{ModelKind, ModelParams};

#[derive(Debug, Error)]
pub enum RebuildError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no replay order for {old}: the store does not open ({why}) and its journal cannot be used ({journal})")]
    NoOrder {
        old: String,
        why: String,
        journal: String,
    },
    #[error("timestep {timestep} ({file}, blake3 {hash}) is not among the files of {from}")]
    Missing {
        timestep: u64,
        file: String,
        hash: String,
        from: String,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{new} already holds a store; rebuild needs a new directory")]
    NotEmpty { new: String },
    #[error("timestep {timestep} ({file}) did not replay: {why}")]
    Replay {
        timestep: u64,
        file: String,
        why: String,
    },
}

/// Where the replay order came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderSource {
    Store,
    Journal,
}

/// The timesteps to replay and the parameters of the model.
#[derive(Debug, Clone)]
pub struct Plan {
    pub params: ModelParams,
    pub entries: Vec<JournalEntry>,
    pub source: OrderSource,
    /// The committed state digest the rebuilt store must reach (from `committed.json`), if
    /// it records the same number of timesteps.
    pub committed_digest: Option<String>,
    /// `novad digest` of the old store's model, when it still loads.
    pub old_model_digest: Option<String>,
}

/// What a rebuild did.
#[derive(Debug, Clone)]
pub struct Summary {
    pub timesteps: u64,
    pub docs: u64,
    pub source: OrderSource,
    /// `novad digest` of the rebuilt model.
    pub model_digest: String,
    pub state_digest: String,
    /// Whether the rebuilt state equals the committed digest / old model (None: nothing to
    /// compare with).
    pub matches_committed: Option<bool>,
    pub matches_old_model: Option<bool>,
}

fn from_store(old: &Path) -> Result<Plan, StoreError> {
    if !old.join("db").exists() {
        return Err(StoreError::Corrupt {
            dir: old.display().to_string(),
            what: "db".into(),
            msg: "there is no sled database".into(),
        });
    }
    let mut store = Store::open(old)?;
    let params = store.model_params()?.ok_or_else(|| StoreError::Corrupt {
        dir: old.display().to_string(),
        what: "parameters".into(),
        msg: "missing".into(),
    })?;
    let entries = super::guard::watched(old, "reading the timesteps", || {
        check::store_entries(&store)
    })??;
    let old_model_digest = store
        .engine(None)
        .ok()
        .map(|e| blake3::hash(&e.to_bytes()).to_hex().to_string());
    Ok(Plan {
        params,
        entries,
        source: OrderSource::Store,
        committed_digest: None,
        old_model_digest,
    })
}

fn from_journal(old: &Path) -> Result<Plan, String> {
    let j = sidecar::read_journal(&sidecar::journal_path(old))?;
    let (kind, json): (ModelKind, serde_json::Value) = j
        .header
        .ok_or_else(|| "the journal has no header with the model's parameters".to_string())?;
    let params = ModelParams::from_json(kind, json).map_err(|e| format!("parameters: {e}"))?;
    Ok(Plan {
        params,
        entries: j.entries,
        source: OrderSource::Journal,
        committed_digest: None,
        old_model_digest: None,
    })
}

/// The replay plan for the old store in `old`: its own records if it opens, else its journal.
pub fn plan(old: &Path) -> Result<Plan, RebuildError> {
    let mut p = match from_store(old) {
        Ok(p) => p,
        Err(why) => {
            tracing::warn!(error = %why, "the old store does not open; using its journal");
            from_journal(old).map_err(|journal| RebuildError::NoOrder {
                old: old.display().to_string(),
                why: why.to_string(),
                journal,
            })?
        }
    };
    if let Ok(Some(c)) = sidecar::read(old) {
        if c.timesteps == p.entries.len() as u64 {
            p.committed_digest = Some(c.state_digest);
        }
    }
    Ok(p)
}

/// The files of a folder of processed batch files, found by content hash.
pub struct Inputs {
    dir: PathBuf,
    by_hash: Option<HashMap<String, PathBuf>>,
}

impl Inputs {
    pub fn new(dir: &Path) -> Inputs {
        Inputs {
            dir: dir.to_path_buf(),
            by_hash: None,
        }
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>, RebuildError> {
        std::fs::read(path).map_err(|source| RebuildError::Read {
            path: path.display().to_string(),
            source,
        })
    }

    /// The content of the file whose blake3 is `hash` (the file named `name` is tried first).
    fn find(&mut self, name: &str, hash: &str) -> Result<Option<Vec<u8>>, RebuildError> {
        let named = self.dir.join(name);
        if named.is_file() {
            let bytes = self.read(&named)?;
            if check::hex(blake3::hash(&bytes).as_bytes()) == hash {
                return Ok(Some(bytes));
            }
        }
        if self.by_hash.is_none() {
            let mut m = HashMap::new();
            let rd = std::fs::read_dir(&self.dir).map_err(|source| RebuildError::Read {
                path: self.dir.display().to_string(),
                source,
            })?;
            for e in rd.flatten() {
                let p = e.path();
                if p.is_file() {
                    let bytes = self.read(&p)?;
                    m.insert(check::hex(blake3::hash(&bytes).as_bytes()), p);
                }
            }
            self.by_hash = Some(m);
        }
        match self.by_hash.as_ref().and_then(|m| m.get(hash)).cloned() {
            Some(p) => self.read(&p).map(Some),
            None => Ok(None),
        }
    }
}

/// The input bytes of one recorded timestep: the one place that maps a record to the data
/// the model consumed (a record of the whole file whose blake3 it names).
pub fn timestep_input(entry: &JournalEntry, inputs: &mut Inputs) -> Result<Vec<u8>, RebuildError> {
    inputs
        .find(&entry.file, &entry.hash)?
        .ok_or_else(|| RebuildError::Missing {
            timestep: entry.timestep,
            file: entry.file.clone(),
            hash: entry.hash.clone(),
            from: inputs.dir.display().to_string(),
        })
}

/// Replay `plan` from the files in `from` into the new store `new` (which must not hold a
/// store yet). Every timestep must commit as the same index it had; the result's digests are
/// compared with what the old store recorded.
pub fn run(plan: &Plan, from: &Path, new: &Path) -> Result<Summary, RebuildError> {
    if new.join("db").exists() {
        return Err(RebuildError::NotEmpty {
            new: new.display().to_string(),
        });
    }
    let mut ing = Ingestor::open(new, Some(&plan.params))?;
    let mut inputs = Inputs::new(from);
    let mut docs = 0;
    for e in &plan.entries {
        let replay_err = |why: String| RebuildError::Replay {
            timestep: e.timestep,
            file: e.file.clone(),
            why,
        };
        if ing.engine.timestep() != e.timestep {
            return Err(replay_err(format!(
                "the new store is at timestep {}",
                ing.engine.timestep()
            )));
        }
        let bytes = timestep_input(e, &mut inputs)?;
        match ing.ingest_bytes(&e.file, &bytes, e.committed_at) {
            Ok(Outcome::Committed { stats, .. }) => docs += stats.docs as u64,
            Ok(other) => return Err(replay_err(format!("{other:?}"))),
            Err(IngestError::Store(s)) => return Err(s.into()),
            Err(other) => return Err(replay_err(other.to_string())),
        }
    }
    let model_digest = blake3::hash(&ing.engine.to_bytes()).to_hex().to_string();
    let state_digest = ing.store.state_digest();
    Ok(Summary {
        timesteps: ing.engine.timestep(),
        docs,
        source: plan.source,
        matches_committed: plan.committed_digest.as_ref().map(|d| *d == state_digest),
        matches_old_model: plan.old_model_digest.as_ref().map(|d| *d == model_digest),
        model_digest,
        state_digest,
    })
}
