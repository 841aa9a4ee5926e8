//! Batch files: one file = one timestep. Formats:
//! - `.jsonl`: one JSON object per non-empty line; `text` (string) is required, `id` (string
//!   or number) and `time` (RFC 3339 string, `YYYY-MM-DD` date, or Unix seconds as a number)
//!   are optional; other fields are ignored.
//! - `.txt`: one document per non-empty line.
//!
//! A document without `time` gets the file's ingestion time; one without `id` gets
//! `<file name>:<line>`. A file is accepted whole or rejected whole with the line that is wrong.

use chrono::{DateTime, NaiveDate, Utc};
use thiserror::Error;

/// Largest accepted document (bytes of its line).
pub const MAX_DOC_BYTES: usize = 1 << 20;
/// Largest accepted batch file.
pub const MAX_FILE_BYTES: u64 = 512 << 20;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Txt,
}

/// Parse a time value: RFC 3339, a `YYYY-MM-DD` date (UTC midnight), or Unix seconds.
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc).timestamp_millis());
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp_millis());
    }
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs.abs() < 1e13 {
            return Ok((secs * 1000.0).round() as i64);
        }
    }
    Err(format!(
        "`{s}` is not a time (RFC 3339 like 2024-05-01T12:00:00Z, a date like 2024-05-01, or Unix seconds)"
    ))
}

fn line_of(bytes: &[u8], offset: usize) -> usize {
    bytes[..offset.min(bytes.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Parse a whole batch file. `name` is the file name (for the format and default ids),
/// `ingest_ms` the time given to documents without one.
pub fn parse_batch(name: &str, bytes: &[u8], ingest_ms: i64) -> Result<Vec<BatchDoc>, BatchError> {
    let format = format_of(name).ok_or_else(|| {
        BatchError::File(format!(
            "unsupported file type `{name}`: batch files end in .jsonl or .txt"
        ))
    })?;
    if let Some(pos) = bytes.iter().position(|&b| b == 0) {
        return Err(BatchError::Line {
            line: line_of(bytes, pos),
            msg: format!("binary data (NUL byte at byte offset {pos}); batch files are UTF-8 text"),
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|e| BatchError::Line {
        line: line_of(bytes, e.valid_up_to()),
        msg: format!("invalid UTF-8 at byte offset {}", e.valid_up_to()),
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut docs = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = i + 1;
        let l = raw.strip_suffix('\r').unwrap_or(raw);
        if l.trim().is_empty() {
            continue;
        }
        if l.len() > MAX_DOC_BYTES {
            return Err(BatchError::Line {
                line,
                msg: format!(
                    "document of {} bytes exceeds the limit of {MAX_DOC_BYTES} bytes",
                    l.len()
                ),
            });
        }
        let doc = match format {
            Format::Txt => BatchDoc {
                id: format!("{name}:{line}"),
                time: ingest_ms,
                text: l.trim().to_string(),
            },
            Format::Jsonl => parse_json_line(name, line, l, ingest_ms)?,
        };
        docs.push(doc);
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
}
