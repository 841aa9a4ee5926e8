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
use crate::batch::{parse_line, require_format, BatchDoc, Format, LineReader};
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
    /// The range starting at `pos`, parsed by the validation (not parsed again).
    first: Option<Parsed>,
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
    /// A job at byte 0 of the batch file at `path`, opened without blocking; the inner `Err`
    /// says why it is not a batch file (its name's format, or a special file).
    pub(super) fn open(path: &Path) -> std::io::Result<Result<FileJob, String>> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let format = match require_format(&name) {
            Ok(f) => f,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let file = open_nonblocking(path)?;
        let md = file.metadata()?;
        if let Some(kind) = special_kind(md.file_type()) {
            return Ok(Err(format!(
                "{kind} is not a batch file; drop regular .jsonl or .txt files into the inbox"
            )));
        }
        Ok(Ok(FileJob {
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
            first: None,
        }))
    }

    /// (device, inode) of the file.
    pub(super) fn id(&self) -> (u64, u64) {
        self.id
    }

    /// The file's metadata now (from the open file, whatever its path points at now).
    pub(super) fn metadata(&self) -> std::io::Result<std::fs::Metadata> {
        self.file.metadata()
    }

    /// Its mtime when it was opened.
    pub(super) fn mtime(&self) -> SystemTime {
        self.mtime
    }

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

/// Whether a range from `start` holding `docs` documents, read up to byte `pos`, takes
/// another line: a timestep holds at most `limits` documents and bytes (at least one line).
fn takes_more(limits: Limits, start: u64, docs: usize, pos: u64) -> bool {
    docs < limits.max_docs.max(1) && pos - start < limits.max_bytes
}

/// The first range of a file, parsed while the file was validated, so that stepping it
/// needs no second parse (its bytes are still read and hashed again before the commit).
struct Parsed {
    /// The limits it was cut by.
    limits: Limits,
    /// Its bytes `[start, end)`; the line after it is `next_line`.
    start: u64,
    end: u64,
    next_line: u64,
    docs: Vec<BatchDoc>,
    /// blake3 of `[start, end)`, and the state over `[0, end)`.
    seg: [u8; 32],
    prefix: blake3::Hasher,
}

/// What a validation pass over `[start, len)` found.
pub(super) struct Validated {
    /// blake3 of the whole file (prefix state continued over the rest).
    whole: [u8; 32],
    docs: u64,
    error: Option<String>,
    /// The range starting at `start` by the limits given, parsed (when valid).
    first: Option<Parsed>,
    /// Duplicate document ids: how many, and the first [`DUP_IDS_SHOWN`] as
    /// (id, line of its first use, line).
    dups: usize,
    dups_shown: Vec<(String, u64, u64)>,
}

impl Validated {
    /// The texts and times of the documents of the range parsed on the way, when the whole
    /// pass validated and that range has documents.
    pub(super) fn first_batch(&self) -> Option<super::Batch> {
        let first = self.first.as_ref().filter(|_| self.error.is_none())?;
        (!first.docs.is_empty()).then(|| super::Batch {
            texts: first.docs.iter().map(|d| d.text.clone()).collect(),
            times: first.docs.iter().map(|d| d.time).collect(),
        })
    }

    /// Warn of the duplicate document ids of the file `name`.
    fn report_dups(&self, name: &str) {
        let shown = crate::show::logged(name);
        for (id, first_line, line) in &self.dups_shown {
            tracing::warn!(
                file = %shown,
                id = %crate::show::logged(id),
                first_line,
                line,
                "duplicate document id in one file; both documents are kept, each with its own verdict"
            );
        }
        if self.dups > DUP_IDS_SHOWN {
            tracing::warn!(file = %shown, duplicates = self.dups, "more duplicate document ids in this file (the first {DUP_IDS_SHOWN} are shown)");
        }
    }
}

/// Validate `[start, len)`: every line parses; count duplicate ids (a warning: both documents
/// are kept); parse the range from `start` by `limits` on the way. Memory: that range's
/// documents, one line, and 16 bytes per document.
pub(super) fn validate(job: &FileJob, now_ms: i64, limits: Limits) -> std::io::Result<Validated> {
    let mut f = &job.file;
    f.seek(SeekFrom::Start(job.pos))?;
    let mut whole = job.prefix.clone();
    let mut lines = LineReader::new(
        BufReader::with_capacity(BUF_BYTES, f),
        job.pos,
        job.len,
        job.line,
    );
    let mut v = Validated {
        whole: [0; 32],
        docs: 0,
        error: None,
        first: None,
        dups: 0,
        dups_shown: Vec::new(),
    };
    let mut ids: HashMap<u64, u64> = HashMap::new();
    // the first range while it is being read: its hash and documents
    let mut open = Some((blake3::Hasher::new(), Vec::new()));
    let close = |open: &mut Option<(blake3::Hasher, Vec<BatchDoc>)>,
                 lines: &LineReader<_>,
                 whole: &blake3::Hasher| {
        open.take().map(|(seg, docs)| Parsed {
            limits,
            start: job.pos,
            end: lines.pos(),
            next_line: lines.number(),
            docs,
            seg: *seg.finalize().as_bytes(),
            prefix: whole.clone(),
        })
    };
    loop {
        // the range ends where `parse_range` ends it
        let full = open
            .as_ref()
            .is_some_and(|(_, docs)| !takes_more(limits, job.pos, docs.len(), lines.pos()));
        if full {
            v.first = close(&mut open, &lines, &whole);
        }
        let raw = match open.as_mut() {
            Some((seg, _)) => lines.next_line_hashed(&mut [&mut whole, seg])?,
            None => lines.next_line(Some(&mut whole))?,
        };
        let Some(raw) = raw else { break };
        let doc = match parse_line(job.format, &job.name, &raw, now_ms) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => {
                v.error = Some(e.to_string());
                v.first = None;
                return Ok(v);
            }
        };
        v.docs += 1;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        doc.id.hash(&mut h);
        if let Some(first) = ids.insert(h.finish(), raw.number) {
            v.dups += 1;
            if v.dups <= DUP_IDS_SHOWN {
                v.dups_shown.push((doc.id.clone(), first, raw.number));
            }
        }
        if let Some((_, docs)) = open.as_mut() {
            docs.push(doc);
        }
    }
    if open.is_some() {
        v.first = close(&mut open, &lines, &whole);
    }
    v.whole = *whole.finalize().as_bytes();
    Ok(v)
}

/// Read and parse the range of `job` from its position by `limits` (what [`validate`]
/// parsed on the way, for a range it did not). The inner `Err`: why the file changed since it
/// validated.
fn parse_range(
    job: &FileJob,
    limits: Limits,
    now_ms: i64,
) -> std::io::Result<Result<Parsed, String>> {
    let start = job.pos;
    let mut seg = blake3::Hasher::new();
    let mut prefix = job.prefix.clone();
    let mut docs = Vec::new();
    let mut f = &job.file;
    f.seek(SeekFrom::Start(start))?;
    let mut lines = LineReader::new(
        BufReader::with_capacity(BUF_BYTES, f),
        start,
        job.len,
        job.line,
    );
    while takes_more(limits, start, docs.len(), lines.pos()) {
        let raw = match lines.next_line_hashed(&mut [&mut seg, &mut prefix]) {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => return Ok(Err(e.to_string())),
        };
        match parse_line(job.format, &job.name, &raw, now_ms) {
            Ok(Some(d)) => docs.push(d),
            Ok(None) => {}
            // it validated before: the bytes changed since
            Err(e) => return Ok(Err(format!("it changed while being read ({e})"))),
        }
    }
    Ok(Ok(Parsed {
        limits,
        start,
        end: lines.pos(),
        next_line: lines.number(),
        docs,
        seg: *seg.finalize().as_bytes(),
        prefix,
    }))
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
    /// validate it and start at byte 0. The validation parses the job's next range by
    /// `limits` on the way; a validation made ahead of the file's turn ([`super::ahead`]) is
    /// taken instead when it was made of this file as it is now. Nothing is committed here.
    pub fn begin(
        &mut self,
        path: &Path,
        now_ms: i64,
        limits: Limits,
    ) -> Result<Begin, IngestError> {
        let read_err = |source| IngestError::Read {
            path: path.display().to_string(),
            source,
        };
        let mut job = match FileJob::open(path).map_err(read_err)? {
            Ok(job) => job,
            Err(why) => return Ok(Begin::Rejected(why)),
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
        let prepared = match self.prepared.take() {
            Some(p) if p.path() == path => p.of(&job, limits),
            other => {
                self.prepared = other;
                None
            }
        };
        let mut v = match prepared {
            Some(v) => v,
            None => validate(&job, now_ms, limits).map_err(read_err)?,
        };
        v.report_dups(&job.name);
        job.first = v.first.take();
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
        let parsed = match job.first.take() {
            Some(p) if p.start == start && p.limits == limits => p,
            _ => match parse_range(job, limits, now_ms).map_err(read_err)? {
                Ok(p) => p,
                Err(why) => return Ok(Outcome::Changed(why)),
            },
        };
        let Parsed {
            end,
            next_line,
            docs,
            seg: hash,
            prefix,
            ..
        } = parsed;
        // the same file, and the bytes on disk are still those parsed
        if let FileCheck::Changed(why) = job.check() {
            return Ok(Outcome::Changed(why));
        }
        let mut again = blake3::Hasher::new();
        if let Err(e) = hash_range(&job.file, start, end, &mut [&mut again]) {
            return Ok(Outcome::Changed(e.to_string()));
        }
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
                last: end >= job.len,
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

#[cfg(test)]
mod tests {
    use super::*;
    use novad_models::{ModelParams, Params};

    fn ingestor(dir: &Path) -> Ingestor {
        let params = ModelParams::L1(Params::default().with_k(4));
        Ingestor::open(dir, Some(&params)).unwrap()
    }

    /// Lines of varied length, some blank, some documents with an id and time.
    fn body(n: usize) -> String {
        (0..n)
            .map(|i| match i % 5 {
                3 => "\n".to_string(),
                _ => format!(
                    "{{\"id\":\"d{i}\",\"time\":\"2026-01-0{}T00:00:00Z\",\"text\":\"w{} w{} {}\"}}\n",
                    1 + i % 9,
                    i % 7,
                    i % 11,
                    "x".repeat(i % 13)
                ),
            })
            .collect()
    }

    /// The range the validation parses on the way is the range a separate read-and-parse of
    /// the job's position gives: same end, next line, documents, hash and prefix state, for
    /// limits that cut it by documents, by bytes, or not at all.
    #[test]
    fn the_range_parsed_by_the_validation_is_the_range_read_on_its_own() {
        let (store, inbox) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut ing = ingestor(store.path());
        let path = inbox.path().join("b.jsonl");
        std::fs::write(&path, body(40)).unwrap();
        for (max_docs, max_bytes) in [(1, 1 << 20), (7, 1 << 20), (1000, 1 << 20), (1000, 300)] {
            let limits = Limits {
                max_docs,
                max_bytes,
            };
            let Begin::Job(mut job) = ing.begin(&path, 5, limits).unwrap() else {
                panic!("a fresh valid file is a job")
            };
            let at_validation = job.first.take().expect("the first range is parsed");
            let alone = parse_range(&job, limits, 5).unwrap().unwrap();
            assert_eq!(at_validation.start, 0);
            assert_eq!(
                (
                    at_validation.end,
                    at_validation.next_line,
                    at_validation.seg
                ),
                (alone.end, alone.next_line, alone.seg),
                "limits {max_docs} docs, {max_bytes} bytes"
            );
            assert_eq!(at_validation.docs, alone.docs);
            assert_eq!(
                at_validation.prefix.finalize(),
                alone.prefix.finalize(),
                "the state over [0, end)"
            );
            let cut_by_docs = at_validation.docs.len() == max_docs;
            let cut_by_bytes = at_validation.end >= max_bytes;
            let whole = at_validation.end == job.len();
            assert!(cut_by_docs || cut_by_bytes || whole);
        }
    }

    /// A range parsed by the validation is still checked against the disk before its commit:
    /// bytes rewritten in place (same length, mtime put back) are noticed and nothing is
    /// committed.
    #[test]
    fn a_range_parsed_by_the_validation_is_checked_against_the_disk_before_its_commit() {
        let (store, inbox) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut ing = ingestor(store.path());
        let path = inbox.path().join("b.jsonl");
        let text = body(30);
        std::fs::write(&path, &text).unwrap();
        let limits = Limits::default();
        let Begin::Job(mut job) = ing.begin(&path, 5, limits).unwrap() else {
            panic!("a fresh valid file is a job")
        };
        assert!(job.first.is_some());
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(text.replace("w1 ", "w2 ").as_bytes(), 0)
            .unwrap();
        f.set_modified(mtime).unwrap();
        drop(f);
        match ing.next_timestep(&mut job, limits, 5).unwrap() {
            Outcome::Changed(why) => assert!(why.contains("bytes changed"), "{why}"),
            o => panic!("committed a range whose bytes changed: {o:?}"),
        }
        assert_eq!(ing.engine.timestep(), 0, "nothing was stepped");
        assert_eq!(job.pos(), 0, "the job did not advance");
    }
}
