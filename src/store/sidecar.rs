//! What the store has committed, recorded outside sled, so that a store that lost data is
//! recognised and can be rebuilt.
//!
//! Two files in the store directory, both written only after sled's flush succeeded:
//!
//! - `journal.jsonl`: a header line with the model and its parameters (written when the store
//!   is created), then one line per committed timestep (index, batch file name, content hash,
//!   documents, commit time), appended and fsynced. It is the replay order for
//!   `novad rebuild` when sled cannot be read at all. A line may appear twice (a crash between
//!   the append and the sidecar write, then a repair on the next open); readers keep one.
//! - `committed.json`: the number of committed timesteps and the digest of the model state
//!   they produced, replaced atomically (temp file, fsync, rename, fsync of the directory).
//!
//! The rule for the crash window between sled's flush and these writes: they happen strictly
//! after the flush, so the sidecar is never ahead of sled. It can be behind (a crash after the
//! flush, or a failed write on a full disk); opening the store then brings it up to date from
//! the store itself. A store holding fewer timesteps than the sidecar went backwards: it lost
//! committed data, and opening it is refused.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::StoreError;

pub const SIDECAR: &str = "committed.json";
pub const JOURNAL: &str = "journal.jsonl";

/// The committed state as of the last successful flush.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    /// Committed timesteps (the model's timestep counter).
    pub timesteps: u64,
    /// [`super::Store::state_digest`] of the model state after them (hex).
    pub state_digest: String,
    /// Unix milliseconds of the last commit.
    pub committed_at: i64,
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JournalLine {
    /// The store's model and parameters (JSON image of the parameter set).
    Header {
        model: novad_models::ModelKind,
        params: serde_json::Value,
    },
    Timestep(JournalEntry),
}

/// A committed timestep as the journal records it: enough to find its input again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// Index of the timestep (0 for the first).
    pub timestep: u64,
    /// Batch file name as ingested.
    pub file: String,
    /// blake3 of the timestep's input bytes, hex.
    pub hash: String,
    pub docs: u64,
    /// Unix milliseconds; also the ingestion time given to documents without a time.
    pub committed_at: i64,
}

fn io_err(dir: &Path, what: &str, source: std::io::Error) -> StoreError {
    StoreError::Io {
        dir: dir.display().to_string(),
        what: what.into(),
        source,
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replace `dir/committed.json` atomically and durably: temp file, fsync, rename, fsync dir.
pub fn write(dir: &Path, c: &Committed) -> Result<(), StoreError> {
    let path = dir.join(SIDECAR);
    let tmp = dir.join(format!("{SIDECAR}.tmp"));
    let go = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(serde_json::to_string_pretty(c).unwrap().as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &path)?;
        sync_dir(dir)
    };
    go().map_err(|e| io_err(dir, "cannot write committed.json", e))
}

/// The sidecar, or None when there is none (a store written before it existed, or never
/// committed to). A sidecar that cannot be parsed is an error naming it.
pub fn read(dir: &Path) -> Result<Option<Committed>, StoreError> {
    let path = dir.join(SIDECAR);
    match std::fs::read_to_string(&path) {
        Ok(s) => serde_json::from_str(&s)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                dir: dir.display().to_string(),
                what: SIDECAR.into(),
                msg: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(dir, "cannot read committed.json", e)),
    }
}

pub fn journal_path(dir: &Path) -> PathBuf {
    dir.join(JOURNAL)
}

/// Append lines to the journal and fsync it (and the directory when the file is new).
pub fn append(dir: &Path, lines: &[JournalLine]) -> Result<(), StoreError> {
    if lines.is_empty() {
        return Ok(());
    }
    let path = journal_path(dir);
    let new = !path.exists();
    let go = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        let mut buf = Vec::new();
        // a crash during an earlier append may have left a torn last line: start a new one
        let len = f.metadata()?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut last, len - 1)?;
            if last[0] != b'\n' {
                buf.push(b'\n');
            }
        }
        for l in lines {
            serde_json::to_writer(&mut buf, l).map_err(std::io::Error::other)?;
            buf.push(b'\n');
        }
        f.write_all(&buf)?;
        f.sync_all()?;
        if new {
            sync_dir(dir)?;
        }
        Ok(())
    };
    go().map_err(|e| io_err(dir, "cannot append to journal.jsonl", e))
}

/// What a journal holds: the header (if any) and one entry per timestep index, in order.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    pub header: Option<(novad_models::ModelKind, serde_json::Value)>,
    pub entries: Vec<JournalEntry>,
    /// Lines skipped because they do not parse.
    pub torn: usize,
}

/// Read a journal. Lines that do not parse (torn by a crash during an append) are skipped and
/// counted; two different entries for one timestep or a gap in the indices is an error.
pub fn read_journal(path: &Path) -> Result<Journal, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let lines: Vec<String> = BufReader::new(f)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut j = Journal::default();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed: JournalLine = match serde_json::from_str(line) {
            Ok(p) => p,
            Err(_) => {
                j.torn += 1;
                continue;
            }
        };
        match parsed {
            JournalLine::Header { model, params } => j.header = Some((model, params)),
            JournalLine::Timestep(e) => {
                let next = j.entries.len() as u64;
                if e.timestep < next {
                    if j.entries[e.timestep as usize] != e {
                        return Err(format!(
                            "{} line {}: timestep {} recorded twice with different files",
                            path.display(),
                            i + 1,
                            e.timestep
                        ));
                    }
                } else if e.timestep == next {
                    j.entries.push(e);
                } else {
                    return Err(format!(
                        "{} line {}: timestep {} follows {} (a gap)",
                        path.display(),
                        i + 1,
                        e.timestep,
                        next as i64 - 1
                    ));
                }
            }
        }
    }
    Ok(j)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(t: u64) -> JournalEntry {
        JournalEntry {
            timestep: t,
            file: format!("{t}.jsonl"),
            hash: format!("{t:064x}"),
            docs: 3,
            committed_at: 1000 + t as i64,
        }
    }

    #[test]
    fn sidecar_round_trips_and_leaves_no_temp_file() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path()).unwrap(), None);
        let c = Committed {
            timesteps: 4,
            state_digest: "ab".repeat(32),
            committed_at: 17,
        };
        write(d.path(), &c).unwrap();
        assert_eq!(read(d.path()).unwrap(), Some(c));
        assert!(!d.path().join("committed.json.tmp").exists());
        std::fs::write(d.path().join(SIDECAR), "{not json").unwrap();
        assert!(read(d.path()).is_err());
    }

    #[test]
    fn journal_keeps_one_entry_per_timestep_and_ignores_a_torn_tail() {
        let d = tempfile::tempdir().unwrap();
        let header = JournalLine::Header {
            model: novad_models::ModelKind::L1,
            params: serde_json::json!({"k": 3}),
        };
        let lines: Vec<JournalLine> = vec![
            header,
            JournalLine::Timestep(entry(0)),
            JournalLine::Timestep(entry(1)),
            JournalLine::Timestep(entry(1)),
            JournalLine::Timestep(entry(2)),
        ];
        append(d.path(), &lines).unwrap();
        let p = journal_path(d.path());
        let mut raw = std::fs::read(&p).unwrap();
        raw.extend_from_slice(b"{\"timestep\":3,\"fi");
        std::fs::write(&p, &raw).unwrap();
        let j = read_journal(&p).unwrap();
        assert_eq!(j.entries, vec![entry(0), entry(1), entry(2)]);
        assert_eq!(j.torn, 1);
        assert_eq!(j.header.unwrap().1["k"], 3);
        // the next append starts a new line after the torn one
        append(d.path(), &[JournalLine::Timestep(entry(3))]).unwrap();
        let j = read_journal(&p).unwrap();
        assert_eq!(j.entries.len(), 4);
        assert_eq!(j.torn, 1);
        // a conflicting duplicate and a gap are errors
        let mut other = entry(1);
        other.file = "x.jsonl".into();
        append(d.path(), &[JournalLine::Timestep(other)]).unwrap();
        assert!(read_journal(&p).unwrap_err().contains("twice"));
        let d2 = tempfile::tempdir().unwrap();
        append(
            d2.path(),
            &[
                JournalLine::Timestep(entry(0)),
                JournalLine::Timestep(entry(2)),
            ],
        )
        .unwrap();
        let e = read_journal(&journal_path(d2.path())).unwrap_err();
        assert!(e.contains("gap"), "{e}");
    }
}
