//! Reading a batch file from disk, one timestep at a time, without ever holding it whole.
//!
//! Guarantees:
//! - only bytes up to the length the file had when it was opened are consumed, and every
//!   range but the last ends just past a `\n` (the last may end at that length: the caller
//!   takes a file once it has settled, so its last line is complete);
//! - before a commit the file is checked to still be the same file (device and inode of the
//!   path equal those of the open descriptor) and the bytes of the range are read again and
//!   must hash to what was parsed; otherwise nothing is committed ([`Outcome::Changed`]);
//! - the whole rest of the file is validated before its first range is committed, so a file is
//!   accepted whole or rejected whole (a grown tail: the tail whole);
//! - a resumed file must be the same inode with the same bytes up to the recorded end.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{Hash, Hasher as _};
use std::io::{BufReader, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use super::{IngestError, Ingestor, Limits, Outcome, Source};
use crate::batch::{parse_line, require_format, Format, LineReader};
use crate::store::schema::FileRange;

/// Most duplicate ids reported one by one per file (the rest are counted).
const DUP_IDS_SHOWN: usize = 10;
/// Read buffer.
const BUF_BYTES: usize = 256 << 10;

/// A file being ingested: where the next timestep starts.
pub struct FileJob {
    pub path: PathBuf,
    pub name: String,
    file: File,
    format: Format,
    /// (device, inode).
    id: (u64, u64),
    /// Length and mtime when opened; the job consumes up to `len`.
    len: u64,
    mtime: SystemTime,
    /// Next byte and its line number.
    pos: u64,
    line: u64,
    /// blake3 state over `[0, pos)`.
    prefix: blake3::Hasher,
    /// `files` key of the last commit (the progress entry), if any.
    key: Option<[u8; 32]>,
    /// A process had it open for writing when it was opened: only its complete lines are
    /// consumed, and it must not be moved yet.
    writing: bool,
}

/// How a file starts.
pub enum Begin {
    /// Ingest it, range by range ([`Ingestor::next_timestep`]).
    Job(FileJob),
    /// This very file (same name, same inode, same bytes) was committed to its end before;
    /// the job is [`FileJob::done`] (check it and move the file).
    AlreadyCommitted { timestep: u64, job: FileJob },
    /// Its content was committed before from `of` (another file, or another copy).
    Duplicate { of: String, timestep: u64 },
    /// Not a batch file or not valid; nothing was applied.
    Rejected(String),
}

/// A file's state compared with its job.
#[derive(Debug, PartialEq, Eq)]
pub enum FileCheck {
    /// Same file, same length and mtime as when it was opened.
    Unchanged,
    /// Same file, longer: the new tail is still to be ingested.
    Grown { len: u64 },
    /// Replaced, truncated, rewritten or gone.
    Changed(String),
}

impl FileJob {
    /// Everything up to the length at opening is consumed.
    pub fn done(&self) -> bool {
        self.pos >= self.len
    }

    /// Next byte to consume.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Length of the file when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Some process had the file open for writing when it was opened (`len` then stops after
    /// its last complete line).
    pub fn writing(&self) -> bool {
        self.writing
    }

    /// Whether some process has the file open for writing now (`None`: cannot tell).
    pub fn writer_open(&self) -> Option<bool> {
        open_for_writing(&self.file)
    }

    /// The `files` key of this file's last commit.
    pub fn key(&self) -> Option<[u8; 32]> {
        self.key
    }

    /// Compare the file at `path` (by name) and the open descriptor with the state at opening.
    pub fn check(&self) -> FileCheck {
        let Ok(md) = std::fs::symlink_metadata(&self.path) else {
            return FileCheck::Changed("it is gone from its place".into());
        };
        if (md.dev(), md.ino()) != self.id {
            return FileCheck::Changed("another file was put in its place".into());
        }
        self.check_open()
    }

    /// Compare the open descriptor (wherever the file now is) with the state at opening.
    pub fn check_open(&self) -> FileCheck {
        let Ok(md) = self.file.metadata() else {
            return FileCheck::Changed("it can no longer be read".into());
        };
        let mtime = md.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        match md.len() {
            l if l > self.len => FileCheck::Grown { len: l },
            l if l < self.len => {
                FileCheck::Changed(format!("it was truncated from {} to {l} bytes", self.len))
            }
            _ if mtime != self.mtime => {
                FileCheck::Changed("it was rewritten while being read".into())
            }
            _ => FileCheck::Unchanged,
        }
    }
}

/// (device, inode) and the kind of a non-regular file, for the rejection reason.
pub fn special_kind(ft: std::fs::FileType) -> Option<&'static str> {
    if ft.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if ft.is_socket() {
        Some("a socket")
    } else if ft.is_block_device() {
        Some("a block device")
    } else if ft.is_char_device() {
        Some("a character device")
    } else if ft.is_dir() {
        Some("a directory")
    } else if ft.is_symlink() {
        Some("a symbolic link")
    } else {
        None
    }
}

/// Whether some process has the file open for writing: `Some(true)` / `Some(false)`, or
/// `None` when the system cannot tell (Linux answers through a read lease, which needs the
/// file's owner or CAP_LEASE and a local file system). The lease is released at once; SIGIO
/// (sent to a lease holder whose lease is broken) is ignored process-wide from the first call.
pub fn open_for_writing(file: &File) -> Option<bool> {
    use std::os::fd::AsRawFd;
    static IGNORE_SIGIO: std::sync::Once = std::sync::Once::new();
    // SAFETY: setting a signal's disposition to SIG_IGN has no other effect
    IGNORE_SIGIO.call_once(|| unsafe {
        libc::signal(libc::SIGIO, libc::SIG_IGN);
    });
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own; F_SETLEASE takes an int argument
    let r = unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) };
    if r == 0 {
        // SAFETY: as above
        unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
        return Some(false);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => Some(true),
        _ => None,
    }
}

/// Length of the complete lines of `[0, len)`: just past the last `\n`, 0 if there is none.
fn complete_len(file: &File, len: u64) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 64 << 10];
    let mut to = len;
    while to > 0 {
        let from = to.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(to - from) as usize];
        file.read_exact_at(chunk, from)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(from + i as u64 + 1);
        }
        to = from;
    }
    Ok(0)
}

/// Open for reading without blocking (a FIFO swapped in after the scan must not hang us).
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

/// Hash `[from, to)` of `file` into every hasher given.
fn hash_range(
    file: &File,
    from: u64,
    to: u64,
    hashers: &mut [&mut blake3::Hasher],
) -> std::io::Result<()> {
    let mut buf = vec![0u8; BUF_BYTES];
    let mut at = from;
    while at < to {
        let want = ((to - at) as usize).min(buf.len());
        let n = file.read_at(&mut buf[..want], at)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the file ended at byte {at}, before byte {to}"),
            ));
        }
        for h in hashers.iter_mut() {
            h.update(&buf[..n]);
        }
        at += n as u64;
    }
    Ok(())
}

/// What a validation pass over `[start, len)` found.
struct Validated {
    /// blake3 of the whole file (prefix state continued over the rest).
    whole: [u8; 32],
    docs: u64,
    error: Option<String>,
}

/// Validate `[start, len)`: every line parses; report duplicate ids (a warning: both
/// documents are kept). Memory: one line plus 16 bytes per document.
fn validate(job: &FileJob, now_ms: i64) -> std::io::Result<Validated> {
    let mut f = &job.file;
    f.seek(SeekFrom::Start(job.pos))?;
    let mut whole = job.prefix.clone();
    let mut lines = LineReader::new(
        BufReader::with_capacity(BUF_BYTES, f),
        job.pos,
        job.len,
        job.line,
    );
    let mut ids: HashMap<u64, u64> = HashMap::new();
    let mut dups = 0usize;
    let mut docs = 0u64;
    let shown = crate::daemon::shown(&job.name);
    while let Some(raw) = lines.next_line(Some(&mut whole))? {
        let doc = match parse_line(job.format, &job.name, &raw, now_ms) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => {
                return Ok(Validated {
                    whole: [0; 32],
                    docs,
                    error: Some(e.to_string()),
                })
            }
        };
        docs += 1;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        doc.id.hash(&mut h);
        if let Some(first) = ids.insert(h.finish(), raw.number) {
            dups += 1;
            if dups <= DUP_IDS_SHOWN {
                tracing::warn!(
                    file = %shown,
                    id = %crate::daemon::shown(&doc.id),
                    first_line = first,
                    line = raw.number,
                    "duplicate document id in one file; both documents are kept, each with its own verdict"
                );
            }
        }
    }
    if dups > DUP_IDS_SHOWN {
        tracing::warn!(file = %shown, duplicates = dups, "more duplicate document ids in this file (the first {DUP_IDS_SHOWN} are shown)");
    }
    Ok(Validated {
        whole: *whole.finalize().as_bytes(),
        docs,
        error: None,
    })
}

/// Where a file's ingestion starts.
enum Resume {
    /// At byte 0.
    Fresh,
    /// After the part committed up to `timestep`.
    At { timestep: u64 },
    /// Nothing left: committed to its end, up to `timestep`.
    Done { timestep: u64 },
}

impl Ingestor {
    /// Position `job` after the part of its file committed before, when the file's progress
    /// entry applies to it: same device and inode, at least as long, and the same bytes up to
    /// the recorded end (hashed again here).
    fn resume(&self, job: &mut FileJob) -> Result<Resume, IngestError> {
        let Some(key) = self.store.progress(&job.name)? else {
            return Ok(Resume::Fresh);
        };
        let Some(rec) = self.store.file_record(&key)? else {
            return Ok(Resume::Fresh);
        };
        let Some(r) = rec
            .range
            .filter(|r| r.file == Some(job.id) && r.end <= job.len)
        else {
            return Ok(Resume::Fresh);
        };
        let mut h = blake3::Hasher::new();
        hash_range(&job.file, 0, r.end, &mut [&mut h]).map_err(|source| IngestError::Read {
            path: job.path.display().to_string(),
            source,
        })?;
        if *h.finalize().as_bytes() != key {
            return Ok(Resume::Fresh);
        }
        job.pos = r.end;
        job.line = r.next_line;
        job.prefix = h;
        job.key = Some(key);
        Ok(if r.end == job.len {
            Resume::Done {
                timestep: rec.timestep,
            }
        } else {
            Resume::At {
                timestep: rec.timestep,
            }
        })
    }

    /// Open a batch file and decide how to ingest it: resume after its last committed range
    /// (same inode, same bytes up to there), recognise a whole file committed before, or
    /// validate it and start at byte 0. Nothing is committed here.
    pub fn begin(&mut self, path: &Path, now_ms: i64) -> Result<Begin, IngestError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let read_err = |source| IngestError::Read {
            path: path.display().to_string(),
            source,
        };
        let format = match require_format(&name) {
            Ok(f) => f,
            Err(e) => return Ok(Begin::Rejected(e.to_string())),
        };
        let file = open_nonblocking(path).map_err(read_err)?;
        let md = file.metadata().map_err(read_err)?;
        if let Some(kind) = special_kind(md.file_type()) {
            return Ok(Begin::Rejected(format!(
                "{kind} is not a batch file; drop regular .jsonl or .txt files into the inbox"
            )));
        }
        let mut job = FileJob {
            path: path.to_path_buf(),
            name,
            file,
            format,
            id: (md.dev(), md.ino()),
            len: md.len(),
            mtime: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            pos: 0,
            line: 1,
            prefix: blake3::Hasher::new(),
            key: None,
            writing: false,
        };
        if open_for_writing(&job.file) == Some(true) {
            // still being written: its last line may be incomplete
            job.writing = true;
            job.len = complete_len(&job.file, job.len).map_err(read_err)?;
        }
        // a commit in flight of this file writes its progress, which `resume` reads
        self.settle_if(&job.name, None)?;
        let committed_to = match self.resume(&mut job)? {
            Resume::Fresh => None,
            Resume::At { timestep } => Some(timestep),
            Resume::Done { timestep } => return Ok(Begin::AlreadyCommitted { timestep, job }),
        };
        let v = validate(&job, now_ms).map_err(read_err)?;
        if committed_to.is_none() && v.error.is_none() && !job.writing {
            self.settle_if(&job.name, Some(&v.whole))?;
            if let Some(rec) = self.store.file_record(&v.whole)? {
                let same = rec.name == job.name
                    && rec
                        .range
                        .as_ref()
                        .is_none_or(|r| r.file.is_none_or(|id| id == job.id));
                return Ok(if same {
                    job.pos = job.len;
                    job.key = Some(v.whole);
                    Begin::AlreadyCommitted {
                        timestep: rec.timestep,
                        job,
                    }
                } else {
                    Begin::Duplicate {
                        of: rec.name,
                        timestep: rec.timestep,
                    }
                });
            }
        }
        if let Some(e) = v.error {
            return Ok(Begin::Rejected(match committed_to {
                Some(t) => format!(
                    "{e} (in the part from byte {} = line {} on; the {} bytes before it were committed earlier, up to timestep {t})",
                    job.pos, job.line, job.pos
                ),
                None => e,
            }));
        }
        if v.docs == 0 {
            match committed_to {
                None if !job.writing => {
                    return Ok(Begin::Rejected(
                        "no documents (the file is empty or blank)".into(),
                    ))
                }
                // a blank tail, or nothing complete yet: nothing to commit, done at once
                _ => job.pos = job.len,
            }
        }
        Ok(Begin::Job(job))
    }

    /// Ingest the next range of `job` as one timestep: at most `limits` documents / bytes,
    /// ending past a `\n` or at the length at opening. Checks the file before committing (see
    /// the module doc). Advances the job only when the range was committed or blank.
    pub fn next_timestep(
        &mut self,
        job: &mut FileJob,
        limits: Limits,
        now_ms: i64,
    ) -> Result<Outcome, IngestError> {
        let t0 = Instant::now();
        let read_err = |source| IngestError::Read {
            path: job.path.display().to_string(),
            source,
        };
        let start = job.pos;
        let mut seg = blake3::Hasher::new();
        let mut docs = Vec::new();
        let (end, next_line) = {
            let mut f = &job.file;
            f.seek(SeekFrom::Start(start)).map_err(read_err)?;
            let mut lines = LineReader::new(
                BufReader::with_capacity(BUF_BYTES, f),
                start,
                job.len,
                job.line,
            );
            while docs.len() < limits.max_docs.max(1) && lines.pos() - start < limits.max_bytes {
                let raw = match lines.next_line(Some(&mut seg)) {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(e) => return Ok(Outcome::Changed(e.to_string())),
                };
                match parse_line(job.format, &job.name, &raw, now_ms) {
                    Ok(Some(d)) => docs.push(d),
                    Ok(None) => {}
                    // it validated before: the bytes changed since
                    Err(e) => {
                        return Ok(Outcome::Changed(format!(
                            "it changed while being read ({e})"
                        )))
                    }
                }
            }
            (lines.pos(), lines.number())
        };
        // the same file, and the bytes on disk are still those parsed
        if let FileCheck::Changed(why) = job.check() {
            return Ok(Outcome::Changed(why));
        }
        let mut again = blake3::Hasher::new();
        let mut prefix = job.prefix.clone();
        if let Err(e) = hash_range(&job.file, start, end, &mut [&mut again, &mut prefix]) {
            return Ok(Outcome::Changed(e.to_string()));
        }
        let hash = *seg.finalize().as_bytes();
        if *again.finalize().as_bytes() != hash {
            return Ok(Outcome::Changed(
                "its bytes changed while being read".into(),
            ));
        }
        let key = *prefix.finalize().as_bytes();
        let outcome = if docs.is_empty() {
            Outcome::Blank { start, end }
        } else {
            let src = Source {
                name: &job.name,
                key,
                range: FileRange {
                    start,
                    end,
                    first_line: job.line,
                    next_line,
                    hash,
                    file: Some(job.id),
                },
                progress: true,
            };
            let o = self.commit_docs(&src, &docs, now_ms, t0)?;
            if !matches!(o, Outcome::Committed { .. } | Outcome::Deferred { .. }) {
                return Ok(o);
            }
            job.key = Some(key);
            o
        };
        job.pos = end;
        job.line = next_line;
        job.prefix = prefix;
        Ok(outcome)
    }
}
