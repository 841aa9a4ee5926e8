//! Batch files. Formats:
//! - `.jsonl`: one JSON object per non-empty line; `text` (string) is required, `id` (string
//!   or number) and `time` (RFC 3339 string, `YYYY-MM-DD` date, or Unix seconds as a number)
//!   are optional; other fields are ignored.
//! - `.txt`: one document per non-empty line.
//!
//! A document without `time` gets the file's ingestion time; one without `id` gets
//! `<file name>:<line>` (the line number in the whole file, also when the file is consumed in
//! several timesteps). Times must fall in the years 0000–9999. Files are read line by line
//! ([`LineReader`]), never whole into memory.

use std::io::BufRead;

use chrono::{DateTime, NaiveDate, Utc};
use thiserror::Error;

/// Largest accepted document (bytes of its line).
pub const MAX_DOC_BYTES: usize = 1 << 20;
/// Earliest accepted document time: 0000-01-01T00:00:00Z, in Unix milliseconds.
pub const MIN_TIME_MS: i64 = -62_167_219_200_000;
/// Latest accepted document time: 9999-12-31T23:59:59.999Z, in Unix milliseconds.
pub const MAX_TIME_MS: i64 = 253_402_300_799_999;

/// One document of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchDoc {
    pub id: String,
    /// Unix milliseconds, UTC.
    pub time: i64,
    pub text: String,
}

/// Why a batch file was rejected. `line` is 1-based.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BatchError {
    #[error("line {line}: {msg}")]
    Line { line: usize, msg: String },
    #[error("{0}")]
    File(String),
}

/// Which batch format a file name has, if any (case-insensitive extension).
pub fn format_of(name: &str) -> Option<Format> {
    let lower = name.to_lowercase();
    if lower.ends_with(".jsonl") {
        Some(Format::Jsonl)
    } else if lower.ends_with(".txt") {
        Some(Format::Txt)
    } else {
        None
    }
}

/// The format of `name`, or the error a file of another type is rejected with.
pub fn require_format(name: &str) -> Result<Format, BatchError> {
    format_of(name).ok_or_else(|| {
        BatchError::File(format!(
            "unsupported file type `{name}`: batch files end in .jsonl or .txt"
        ))
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Txt,
}

/// `ms` if it lies in the years 0000–9999, otherwise an error naming the accepted range.
fn in_range(ms: i64, shown: &str) -> Result<i64, String> {
    if (MIN_TIME_MS..=MAX_TIME_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(format!(
            "`{shown}` is outside the years 0000–9999 (Unix seconds from -62167219200 to 253402300799)"
        ))
    }
}

/// Parse a time value: RFC 3339, a `YYYY-MM-DD` date (UTC midnight), or Unix seconds. The
/// result lies in [`MIN_TIME_MS`]..=[`MAX_TIME_MS`].
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return in_range(t.with_timezone(&Utc).timestamp_millis(), s);
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return in_range(
            d.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp_millis(),
            s,
        );
    }
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() {
            let ms = secs * 1000.0;
            if ms < MIN_TIME_MS as f64 || ms > MAX_TIME_MS as f64 {
                return in_range(if ms < 0.0 { i64::MIN } else { i64::MAX }, s);
            }
            return in_range(ms.round() as i64, s);
        }
    }
    Err(format!(
        "`{s}` is not a time (RFC 3339 like 2024-05-01T12:00:00Z, a date like 2024-05-01, or Unix seconds)"
    ))
}

/// One line of a batch file as read.
#[derive(Debug, Clone, PartialEq)]
pub struct RawLine {
    /// 1-based line number in the whole file.
    pub number: u64,
    /// Byte offset of the line's first byte in the file.
    pub start: u64,
    /// Byte offset just past the line (past its `\n`, or the end of the range read).
    pub end: u64,
    /// The line's bytes without the `\n`; at most [`MAX_DOC_BYTES`] + 2 of them.
    pub bytes: Vec<u8>,
    /// The line is longer than the bytes kept (it exceeds [`MAX_DOC_BYTES`]).
    pub too_long: bool,
}

/// Reads the lines of a byte range `[pos, limit)` of a file one at a time. Memory is bounded
/// by one line (at most [`MAX_DOC_BYTES`] + 2 bytes are kept of a longer one). A last line
/// without `\n` ends at `limit`.
pub struct LineReader<R: BufRead> {
    inner: R,
    pos: u64,
    limit: u64,
    number: u64,
}

impl<R: BufRead> LineReader<R> {
    /// `inner` must be positioned at byte `pos`, which starts line `number` (1-based).
    pub fn new(inner: R, pos: u64, limit: u64, number: u64) -> Self {
        LineReader {
            inner,
            pos,
            limit,
            number,
        }
    }

    /// Byte offset of the next line.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Number of the next line.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The next line, or `None` at `limit`. Every byte read (also of an over-long line's
    /// dropped part) is fed to `hash` when given, so it sees exactly `[pos, end)`.
    pub fn next_line(
        &mut self,
        hash: Option<&mut blake3::Hasher>,
    ) -> std::io::Result<Option<RawLine>> {
        match hash {
            Some(h) => self.next_line_hashed(&mut [h]),
            None => self.next_line_hashed(&mut []),
        }
    }

    /// [`Self::next_line`] feeding every byte read to each of `hashes`.
    pub fn next_line_hashed(
        &mut self,
        hashes: &mut [&mut blake3::Hasher],
    ) -> std::io::Result<Option<RawLine>> {
        if self.pos >= self.limit {
            return Ok(None);
        }
        let start = self.pos;
        let cap = MAX_DOC_BYTES as u64 + 2;
        let mut bytes = Vec::new();
        let mut too_long = false;
        let mut ended = false;
        while !ended && self.pos < self.limit {
            let avail = self.inner.fill_buf()?;
            if avail.is_empty() {
                // the file is shorter than `limit`: it shrank while being read
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "the file ended at byte {} before the {} bytes expected",
                        self.pos, self.limit
                    ),
                ));
            }
            let room = (self.limit - self.pos).min(avail.len() as u64) as usize;
            let avail = &avail[..room];
            let take = match avail.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    ended = true;
                    i + 1
                }
                None => avail.len(),
            };
            for h in hashes.iter_mut() {
                h.update(&avail[..take]);
            }
            let content = &avail[..if ended { take - 1 } else { take }];
            let keep = (cap as usize)
                .saturating_sub(bytes.len())
                .min(content.len());
            bytes.extend_from_slice(&content[..keep]);
            too_long |= keep < content.len();
            self.inner.consume(take);
            self.pos += take as u64;
        }
        let number = self.number;
        self.number += 1;
        Ok(Some(RawLine {
            number,
            start,
            end: self.pos,
            bytes,
            too_long,
        }))
    }
}

/// Parse one line: `Ok(None)` for a blank line. `name` is the file name (default ids),
/// `ingest_ms` the time given to documents without one. A UTF-8 byte-order mark at the start
/// of the file is skipped.
pub fn parse_line(
    format: Format,
    name: &str,
    raw: &RawLine,
    ingest_ms: i64,
) -> Result<Option<BatchDoc>, BatchError> {
    let line = raw.number as usize;
    let err = |msg: String| BatchError::Line { line, msg };
    if raw.too_long {
        return Err(err(format!(
            "document exceeds the limit of {MAX_DOC_BYTES} bytes"
        )));
    }
    if let Some(pos) = raw.bytes.iter().position(|&b| b == 0) {
        return Err(err(format!(
            "binary data (NUL byte at byte offset {}); batch files are UTF-8 text",
            raw.start + pos as u64
        )));
    }
    let text = std::str::from_utf8(&raw.bytes).map_err(|e| {
        err(format!(
            "invalid UTF-8 at byte offset {}",
            raw.start + e.valid_up_to() as u64
        ))
    })?;
    let text = if raw.start == 0 {
        text.strip_prefix('\u{feff}').unwrap_or(text)
    } else {
        text
    };
    let l = text.strip_suffix('\r').unwrap_or(text);
    if l.trim().is_empty() {
        return Ok(None);
    }
    if l.len() > MAX_DOC_BYTES {
        return Err(err(format!(
            "document of {} bytes exceeds the limit of {MAX_DOC_BYTES} bytes",
            l.len()
        )));
    }
    Ok(Some(match format {
        Format::Txt => BatchDoc {
            id: format!("{name}:{line}"),
            time: ingest_ms,
            text: l.trim().to_string(),
        },
        Format::Jsonl => parse_json_line(name, line, l, ingest_ms)?,
    }))
}

/// Parse a whole batch held in memory. `name` is the file name (for the format and default
/// ids), `ingest_ms` the time given to documents without one. Fails on the first bad line,
/// or when there is no document.
pub fn parse_batch(name: &str, bytes: &[u8], ingest_ms: i64) -> Result<Vec<BatchDoc>, BatchError> {
    let format = require_format(name)?;
    let mut lines = LineReader::new(bytes, 0, bytes.len() as u64, 1);
    let mut docs = Vec::new();
    while let Some(raw) = lines.next_line(None).expect("reading memory cannot fail") {
        if let Some(doc) = parse_line(format, name, &raw, ingest_ms)? {
            docs.push(doc);
        }
    }
    if docs.is_empty() {
        return Err(BatchError::File(
            "no documents (the file is empty or blank)".into(),
        ));
    }
    Ok(docs)
}

fn parse_json_line(
    name: &str,
    line: usize,
    l: &str,
    ingest_ms: i64,
) -> Result<BatchDoc, BatchError> {
    let err = |msg: String| BatchError::Line { line, msg };
    let v: serde_json::Value =
        serde_json::from_str(l).map_err(|e| err(format!("malformed JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| err("expected a JSON object like {\"text\": \"...\"}".into()))?;
    let text = match obj.get("text") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => return Err(err(format!("`text` must be a string, got {other}"))),
        None => return Err(err("missing required field `text`".into())),
    };
    let id = match obj.get("id") {
        None | Some(serde_json::Value::Null) => format!("{name}:{line}"),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        Some(other) => return Err(err(format!("`id` must be a string or number, got {other}"))),
    };
    let time = match obj.get("time") {
        None | Some(serde_json::Value::Null) => ingest_ms,
        Some(serde_json::Value::String(s)) => {
            parse_time(s).map_err(|m| err(format!("`time`: {m}")))?
        }
        Some(serde_json::Value::Number(n)) => {
            parse_time(&n.to_string()).map_err(|m| err(format!("`time`: {m}")))?
        }
        Some(other) => {
            return Err(err(format!(
                "`time` must be a string or number, got {other}"
            )))
        }
    };
    Ok(BatchDoc { id, time, text })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_fields_defaults_and_times() {
        let b = b"{\"text\":\"a b\",\"id\":7,\"time\":\"2024-05-01\"}\n\n{\"text\":\"c\",\"time\":\"2024-05-01T12:00:00+02:00\"}\r\n{\"text\":\"d\",\"time\":86400}\n{\"text\":\"e\"}";
        let d = parse_batch("x.jsonl", b, 5).unwrap();
        assert_eq!(d.len(), 4);
        assert_eq!(d[0].id, "7");
        assert_eq!(d[0].time, 1_714_521_600_000);
        assert_eq!(d[1].id, "x.jsonl:3");
        assert_eq!(d[1].time, 1_714_557_600_000);
        assert_eq!(d[2].time, 86_400_000);
        assert_eq!(d[3].time, 5);
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_batch("x.jsonl", b"{\"text\":\"ok\"}\n{\"text\": 3}\n", 0).unwrap_err();
        assert_eq!(
            e,
            BatchError::Line {
                line: 2,
                msg: "`text` must be a string, got 3".into()
            }
        );
        let e = parse_batch("x.jsonl", b"{\"text\":\"ok\"}\n\n{oops\n", 0).unwrap_err();
        assert!(matches!(e, BatchError::Line { line: 3, .. }), "{e}");
        let e = parse_batch("x.txt", b"fine\nbad \xff\xfe byte\n", 0).unwrap_err();
        assert!(matches!(e, BatchError::Line { line: 2, .. }), "{e}");
        let e = parse_batch("x.txt", b"a\x00b", 0).unwrap_err();
        assert!(e.to_string().contains("binary"), "{e}");
        assert!(parse_batch("x.txt", b"\n  \n", 0).is_err());
        assert!(parse_batch("x.csv", b"a", 0)
            .unwrap_err()
            .to_string()
            .contains(".jsonl"));
        let e = parse_batch("x.jsonl", b"{\"text\":\"a\",\"time\":\"yesterday\"}", 0).unwrap_err();
        assert!(e.to_string().contains("`time`"), "{e}");
    }

    #[test]
    fn txt_lines_are_documents() {
        let d = parse_batch("b.TXT", b"first doc\n\n  second doc  \n", 9).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[1].text, "second doc");
        assert_eq!(d[1].id, "b.TXT:3");
    }

    #[test]
    fn times_outside_years_0000_to_9999_are_rejected_with_the_line() {
        // the last millisecond of 9999 and the first of 0000 are accepted
        assert_eq!(parse_time("253402300799.999").unwrap(), MAX_TIME_MS);
        assert_eq!(parse_time("-62167219200").unwrap(), MIN_TIME_MS);
        assert_eq!(
            chrono::DateTime::from_timestamp_millis(MAX_TIME_MS)
                .unwrap()
                .to_rfc3339(),
            "9999-12-31T23:59:59.999+00:00"
        );
        for bad in ["253402300800", "1e15", "-62167219201", "1e300", "-1e300"] {
            let e = parse_time(bad).unwrap_err();
            assert!(e.contains("0000–9999"), "{bad}: {e}");
        }
        let b = b"{\"text\":\"ok\",\"time\":1}\n{\"text\":\"far\",\"time\":32503680000000}\n";
        let e = parse_batch("x.jsonl", b, 0).unwrap_err();
        assert!(
            matches!(&e, BatchError::Line { line: 2, msg } if msg.contains("`time`")),
            "{e}"
        );
    }

    #[test]
    fn the_line_reader_covers_a_range_exactly_and_bounds_long_lines() {
        let text = b"one\ntwo\r\n\nthree-without-newline";
        // a range cut in the middle of a line ends that line at the cut
        let mut h = blake3::Hasher::new();
        let mut r = LineReader::new(&text[4..], 4, 12, 2);
        let mut got = Vec::new();
        while let Some(l) = r.next_line(Some(&mut h)).unwrap() {
            got.push((l.number, l.start, l.end, l.bytes));
        }
        assert_eq!(
            got,
            vec![
                (2, 4, 9, b"two\r".to_vec()),
                (3, 9, 10, b"".to_vec()),
                (4, 10, 12, b"th".to_vec())
            ]
        );
        assert_eq!(h.finalize(), blake3::hash(&text[4..12]));
        // a line over the limit is flagged, its bytes are bounded, and it is hashed whole
        let mut long = vec![b'a'; MAX_DOC_BYTES + 100];
        long.push(b'\n');
        long.extend_from_slice(b"next\n");
        let mut h = blake3::Hasher::new();
        let mut r = LineReader::new(std::io::BufReader::new(&long[..]), 0, long.len() as u64, 1);
        let l = r.next_line(Some(&mut h)).unwrap().unwrap();
        assert!(l.too_long && l.bytes.len() == MAX_DOC_BYTES + 2);
        assert_eq!(l.end, MAX_DOC_BYTES as u64 + 101);
        let e = parse_line(Format::Txt, "x.txt", &l, 0).unwrap_err();
        assert!(matches!(e, BatchError::Line { line: 1, .. }), "{e}");
        assert_eq!(r.next_line(Some(&mut h)).unwrap().unwrap().bytes, b"next");
        assert_eq!(h.finalize(), blake3::hash(&long));
        // a file shorter than the range is an error, not a short read
        let mut r = LineReader::new(&b"ab"[..], 0, 5, 1);
        assert!(r.next_line(None).is_err());
    }
}
