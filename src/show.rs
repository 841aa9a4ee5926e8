//! How values from the store and the data are shown to people: times, and text that may hold
//! control characters. Shared by the query output, the store's reports and the logs.

/// RFC 3339 (UTC, milliseconds) of a Unix-millisecond time.
pub fn fmt_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

/// Text from the data (ids, file names) as a terminal shows it: control characters (escape
/// sequences, bells, line breaks) written as escapes (`\u{1b}`, `\n`), so an id can neither
/// drive the terminal nor break a row.
pub fn shown(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A name or id as written into logs and notes: control characters (newlines, escapes, …),
/// quotes and backslashes escaped, so one name is always one token on one line.
pub fn logged(name: &str) -> String {
    name.escape_debug().to_string()
}
